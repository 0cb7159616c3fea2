/* rdmacm_ece server PORT MODE | rdmacm_ece client IP PORT MODE: an rdma_cm RC connection whose
 * ends ask for selective repeat through ECE, as an application does (docs/configuration.md
 * "transport"). The client's MODE: "offer" (ibv_set_ece on its QP of rdma_create_ep, options
 * 0x524F0001) or "none". The server's: "accept" (rdma_set_local_ece 0x524F0002 on the request's
 * id, before its QP), "echo" (rdma_get_remote_ece copied into rdma_set_local_ece, what a
 * program written for rdma-core's passive side may do) or "none". Each side prints the peer's
 * ECE it saw and, once connected, what ibv_query_ece says is in force; the client stays
 * connected 3 s (the script reads roced's counters meanwhile), then disconnects. The client's
 * MODE "offer-exchange" offers too, then does what rdma-core's rdma_client does (a 16-byte SEND
 * and RECV) for rdma_server as its peer (tests/interop/rdmacm_rxe.sh ece). */
#include <errno.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct rdma_cm_event* next_event(struct rdma_event_channel* ch, enum rdma_cm_event_type t) {
  struct rdma_cm_event* ev;
  struct pollfd p = {ch->fd, POLLIN, 0};
  if (poll(&p, 1, 20000) != 1) {
    printf("no event in 20 s, wanted %s\n", rdma_event_str(t));
    exit(1);
  }
  if (rdma_get_cm_event(ch, &ev)) perror("rdma_get_cm_event"), exit(2);
  if (ev->event != t) {
    printf("got %s (status %d), wanted %s\n", rdma_event_str(ev->event), ev->status,
           rdma_event_str(t));
    exit(1);
  }
  return ev;
}

static void print_in_force(const char* side, struct ibv_qp* qp) {
  struct ibv_ece e;
  memset(&e, 0, sizeof e);
  const int rc = ibv_query_ece(qp, &e);
  printf("%s: in force rc %d vendor 0x%x options 0x%x\n", side, rc, e.vendor_id, e.options);
  fflush(stdout);
}

int main(int argc, char** argv) {
  struct ibv_qp_init_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.qp_type = IBV_QPT_RC;
  if (argc == 4 && strcmp(argv[1], "server") == 0) {
    const char* mode = argv[3];
    struct rdma_event_channel* ch = rdma_create_event_channel();
    struct rdma_cm_id *listen_id, *id;
    if (!ch || rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP)) return perror("create_id"), 2;
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_port = htons((unsigned short)atoi(argv[2]));
    if (rdma_bind_addr(listen_id, (struct sockaddr*)&sin)) return perror("rdma_bind_addr"), 2;
    if (rdma_listen(listen_id, 1)) return perror("rdma_listen"), 2;
    printf("server: listening\n");
    fflush(stdout);
    struct rdma_cm_event* ev = next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    id = ev->id;
    rdma_ack_cm_event(ev);
    struct ibv_ece remote;
    memset(&remote, 0, sizeof remote);
    if (rdma_get_remote_ece(id, &remote)) return perror("rdma_get_remote_ece"), 2;
    printf("server: remote vendor 0x%x options 0x%x\n", remote.vendor_id, remote.options);
    struct ibv_ece local = {0xFFFFFF, 0x524F0002, 0};
    if (strcmp(mode, "echo") == 0) local = remote;
    if (strcmp(mode, "none") != 0 && local.vendor_id != 0 && rdma_set_local_ece(id, &local))
      return perror("rdma_set_local_ece"), 2;
    if (rdma_create_qp(id, NULL, &attr)) return perror("rdma_create_qp"), 2;
    if (rdma_accept(id, NULL)) return perror("rdma_accept"), 2;
    rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ESTABLISHED));
    print_in_force("server", id->qp);
    rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_DISCONNECTED));
    printf("server: disconnected\n");
    return 0;
  }
  if (argc != 5 || strcmp(argv[1], "client") != 0) {
    fprintf(stderr, "usage: rdmacm_ece server PORT MODE | client IP PORT MODE\n");
    return 2;
  }
  struct rdma_addrinfo hints, *res;
  struct rdma_cm_id* id;
  memset(&hints, 0, sizeof hints);
  hints.ai_port_space = RDMA_PS_TCP;
  if (rdma_getaddrinfo(argv[2], argv[3], &hints, &res)) return perror("rdma_getaddrinfo"), 2;
  if (rdma_create_ep(&id, res, NULL, &attr)) return perror("rdma_create_ep"), 2;
  const int exchange = strcmp(argv[4], "offer-exchange") == 0;
  if (strncmp(argv[4], "offer", 5) == 0) {
    struct ibv_ece offer = {0xFFFFFF, 0x524F0001, 0};
    if (ibv_set_ece(id->qp, &offer)) return perror("ibv_set_ece"), 2;
  }
  static char send_msg[16] = "ece", recv_msg[16];
  struct ibv_mr *smr = NULL, *rmr = NULL;
  if (exchange) {
    rmr = rdma_reg_msgs(id, recv_msg, sizeof recv_msg);
    smr = rdma_reg_msgs(id, send_msg, sizeof send_msg);
    if (!rmr || !smr) return perror("rdma_reg_msgs"), 2;
    if (rdma_post_recv(id, NULL, recv_msg, sizeof recv_msg, rmr)) return perror("post_recv"), 2;
  }
  if (rdma_connect(id, NULL)) { /* the words the interop script retries on */
    printf("rdma_connect: %s (REJECTED or UNREACHABLE: no listener yet?)\n", strerror(errno));
    return 2;
  }
  printf("client: connected\n");
  print_in_force("client", id->qp);
  if (exchange) {
    struct ibv_wc wc;
    if (rdma_post_send(id, NULL, send_msg, sizeof send_msg, smr, IBV_SEND_SIGNALED))
      return perror("rdma_post_send"), 2;
    if (rdma_get_send_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS)
      return printf("client: send failed\n"), 1;
    if (rdma_get_recv_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS)
      return printf("client: receive failed\n"), 1;
    printf("client: exchanged\n");
    fflush(stdout);
  }
  sleep(exchange ? 0 : 3);
  rdma_disconnect(id);
  printf("client: disconnected\n");
  return 0;
}
