/* An rdma_cm client that gives its connect up before the answer, through librdmacm's public API
 * only: it resolves ADDR:PORT, creates its QP, calls rdma_connect and at once rdma_destroy_qp
 * and rdma_destroy_id, then stays LINGER_MS so that what the destroy sends leaves the process
 * (rdmacm_pair.sh "give_up", rdmacm_rxe.sh "give_up": the server, Debian's rping, must report
 * RDMA_CM_EVENT_REJECTED with reason 4, "timeout", as from a Linux client).
 *   cm_give_up ADDR PORT LINGER_MS */
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int expect(struct rdma_event_channel* ch, enum rdma_cm_event_type want) {
  struct rdma_cm_event* ev = NULL;
  if (rdma_get_cm_event(ch, &ev)) {
    perror("rdma_get_cm_event");
    return -1;
  }
  const enum rdma_cm_event_type got = ev->event;
  rdma_ack_cm_event(ev);
  if (got != want) {
    fprintf(stderr, "cm_give_up: %s, wanted %s\n", rdma_event_str(got), rdma_event_str(want));
    return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: cm_give_up ADDR PORT LINGER_MS\n");
    return 2;
  }
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((unsigned short)atoi(argv[2]));
  if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) return 2;
  struct rdma_event_channel* ch = rdma_create_event_channel();
  struct rdma_cm_id* id = NULL;
  if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
    perror("rdma_create_id");
    return 1;
  }
  if (rdma_resolve_addr(id, NULL, (struct sockaddr*)&sa, 2000) ||
      expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED) || rdma_resolve_route(id, 2000) ||
      expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) {
    perror("resolve");
    return 1;
  }
  struct ibv_qp_init_attr qa;
  memset(&qa, 0, sizeof qa);
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  if (rdma_create_qp(id, NULL, &qa)) {
    perror("rdma_create_qp");
    return 1;
  }
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  cp.responder_resources = cp.initiator_depth = 1;
  cp.retry_count = 7;
  if (rdma_connect(id, &cp)) {
    perror("rdma_connect");
    return 1;
  }
  rdma_destroy_qp(id);
  if (rdma_destroy_id(id)) {
    perror("rdma_destroy_id");
    return 1;
  }
  printf("gave the connect up\n");
  fflush(stdout);
  const long ms = atol(argv[3]);
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
  rdma_destroy_event_channel(ch);
  return 0;
}
