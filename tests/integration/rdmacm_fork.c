/* rdmacm_fork server PORT | rdmacm_fork client IP PORT: an rdma_cm RC connection whose client
 * forks a child that exit()s at once, then stays connected 2 s before it disconnects. The
 * server prints the time its first event (DISCONNECTED) came after the connection was made:
 * a child's exit must not disconnect its parent's connections. */
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  struct rdma_addrinfo hints, *res;
  struct ibv_qp_init_attr attr;
  struct rdma_cm_id *id, *listen_id;
  memset(&hints, 0, sizeof hints);
  memset(&attr, 0, sizeof attr);
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.qp_type = IBV_QPT_RC;
  hints.ai_port_space = RDMA_PS_TCP;
  if (argc == 3 && strcmp(argv[1], "server") == 0) {
    hints.ai_flags = RAI_PASSIVE;
    if (rdma_getaddrinfo(NULL, argv[2], &hints, &res)) return perror("rdma_getaddrinfo"), 2;
    if (rdma_create_ep(&listen_id, res, NULL, &attr)) return perror("rdma_create_ep"), 2;
    if (rdma_listen(listen_id, 1)) return perror("rdma_listen"), 2;
    printf("server: listening\n");
    fflush(stdout);
    if (rdma_get_request(listen_id, &id)) return perror("rdma_get_request"), 2;
    if (rdma_accept(id, NULL)) return perror("rdma_accept"), 2;
    const double t0 = now();
    printf("server: connected\n");
    fflush(stdout);
    struct pollfd p = {id->channel->fd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) {
      printf("server: no event in 10 s\n");
      return 1;
    }
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(id->channel, &ev)) return perror("rdma_get_cm_event"), 2;
    printf("server: %s after %.1f s\n", rdma_event_str(ev->event), now() - t0);
    rdma_ack_cm_event(ev);
    return 0;
  }
  if (argc != 4 || strcmp(argv[1], "client") != 0) {
    fprintf(stderr, "usage: rdmacm_fork server PORT | client IP PORT\n");
    return 2;
  }
  if (rdma_getaddrinfo(argv[2], argv[3], &hints, &res)) return perror("rdma_getaddrinfo"), 2;
  if (rdma_create_ep(&id, res, NULL, &attr)) return perror("rdma_create_ep"), 2;
  if (rdma_connect(id, NULL)) return perror("rdma_connect"), 2;
  printf("client: connected\n");
  fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return perror("fork"), 2;
  if (child == 0) exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  printf("client: the child exited with %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  fflush(stdout);
  sleep(2);
  printf("client: disconnecting\n");
  fflush(stdout);
  rdma_disconnect(id);
  return 0;
}
