/* A UD listener (RDMA_PS_UDP) that stops listening with rdma_destroy_id, through librdmacm's
 * public API only (sidr_attach.sh runs it attached, under roce-run): it listens on ADDR:PORT,
 * destroys the id, listens again on the same port from a new id and destroys that one too, then
 * prints "unlistened" and watches its event channel for WAIT_MS: any event there (a request to
 * a port it no longer listens on) fails it.
 *   sidr_unlisten ADDR PORT WAIT_MS */
#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int listen_once(struct rdma_event_channel* ch, struct sockaddr_in* sa, const char* what) {
  struct rdma_cm_id* id = NULL;
  if (rdma_create_id(ch, &id, NULL, RDMA_PS_UDP)) {
    perror("rdma_create_id");
    return -1;
  }
  if (rdma_bind_addr(id, (struct sockaddr*)sa) || rdma_listen(id, 0)) {
    perror(what);
    return -1;
  }
  printf("%s\n", what);
  if (rdma_destroy_id(id)) {
    perror("rdma_destroy_id");
    return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: sidr_unlisten ADDR PORT WAIT_MS\n");
    return 2;
  }
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((unsigned short)atoi(argv[2]));
  if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) return 2;
  struct rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) {
    perror("rdma_create_event_channel");
    return 1;
  }
  if (listen_once(ch, &sa, "listening") || listen_once(ch, &sa, "listening again")) return 1;
  printf("unlistened\n");
  fflush(stdout);
  struct pollfd p = {.fd = ch->fd, .events = POLLIN};
  const int n = poll(&p, 1, atoi(argv[3]));
  if (n != 0) {
    struct rdma_cm_event* ev = NULL;
    if (n > 0 && rdma_get_cm_event(ch, &ev) == 0)
      printf("FAIL: %s after rdma_destroy_id\n", rdma_event_str(ev->event));
    else
      printf("FAIL: poll %d\n", n);
    return 1;
  }
  printf("no request\n");
  rdma_destroy_event_channel(ch);
  return 0;
}
