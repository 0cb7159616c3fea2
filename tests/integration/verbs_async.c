/* An RDMA WRITE with a wrong rkey between two programs on libibverbs (libroce-verbs.so
 * preloaded, in-process on net_memif), to check what the provider hands over through file
 * descriptors: the client sleeps in poll() on its completion channel's fd and reads the
 * remote access error's completion with ibv_get_cq_event/ibv_poll_cq; the server sleeps in
 * poll() on the context's async_fd and reads IBV_EVENT_QP_ACCESS_ERR for its QP with
 * ibv_get_async_event. On both sides ibv_query_qp then says the QP is in the error state.
 *   verbs_async server PORT | verbs_async client PORT HOST      (device roce0, GID index 0)
 *   verbs_async wait-fatal SECONDS: the first async event must be IBV_EVENT_DEVICE_FATAL
 *   verbs_async wait-port SECONDS: the first two must be IBV_EVENT_PORT_ACTIVE, _PORT_ERR */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct peer {
  uint32_t qpn, psn, rkey;
  uint64_t addr;
  union ibv_gid gid;
};

static void die(const char* what) {
  perror(what);
  exit(1);
}

static int tcp(int server, const char* port, const char* host) {
  struct addrinfo hints = {
      .ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = server ? AI_PASSIVE : 0};
  struct addrinfo* ai;
  if (getaddrinfo(server ? NULL : host, port, &hints, &ai) != 0) die("getaddrinfo");
  int s = socket(ai->ai_family, ai->ai_socktype, 0);
  if (server) {
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, ai->ai_addr, ai->ai_addrlen) != 0 || listen(s, 1) != 0) die("listen");
    int c = accept(s, NULL, NULL);
    close(s);
    s = c;
  } else {
    int i;
    for (i = 0; i < 100 && connect(s, ai->ai_addr, ai->ai_addrlen) != 0; ++i) usleep(100000);
    if (i == 100) die("connect");
  }
  freeaddrinfo(ai);
  return s;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s server PORT | client PORT HOST\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "wait-port") == 0) {
    /* the port's first two events: the link's other end comes, then goes */
    int n = 0;
    struct ibv_device** list = ibv_get_device_list(&n);
    if (list == NULL || n < 1) die("no device");
    struct ibv_context* ctx = ibv_open_device(list[n - 1]);
    if (ctx == NULL) die("ibv_open_device");
    printf("device open\n");
    fflush(stdout);
    enum ibv_event_type seen[2];
    for (int i = 0; i < 2; ++i) {
      struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
      if (poll(&p, 1, atoi(argv[2]) * 1000) != 1) die("poll async_fd: nothing");
      struct ibv_async_event ev;
      if (ibv_get_async_event(ctx, &ev) != 0) die("ibv_get_async_event");
      printf("async event: %s, port %d\n", ibv_event_type_str(ev.event_type), ev.element.port_num);
      fflush(stdout);
      seen[i] = ev.event_type;
      ibv_ack_async_event(&ev);
    }
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return !(seen[0] == IBV_EVENT_PORT_ACTIVE && seen[1] == IBV_EVENT_PORT_ERR);
  }
  if (strcmp(argv[1], "wait-fatal") == 0) {
    /* the device's first asynchronous event, expected IBV_EVENT_DEVICE_FATAL (roced killed) */
    int n = 0;
    struct ibv_device** list = ibv_get_device_list(&n);
    if (list == NULL || n < 1) die("no device");
    struct ibv_context* ctx = ibv_open_device(list[n - 1]);
    if (ctx == NULL) die("ibv_open_device");
    printf("device open\n");
    fflush(stdout);
    struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
    if (poll(&p, 1, atoi(argv[2]) * 1000) != 1) die("poll async_fd: nothing");
    struct ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev) != 0) die("ibv_get_async_event");
    printf("async event: %s\n", ibv_event_type_str(ev.event_type));
    ibv_ack_async_event(&ev);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return ev.event_type == IBV_EVENT_DEVICE_FATAL ? 0 : 1;
  }
  const int server = strcmp(argv[1], "server") == 0;
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_device* dev = NULL;
  for (int i = 0; list != NULL && i < n; ++i)
    if (strcmp(ibv_get_device_name(list[i]), "roce0") == 0) dev = list[i];
  if (dev == NULL) die("no roce0");
  struct ibv_context* ctx = ibv_open_device(dev);
  if (ctx == NULL) die("ibv_open_device");
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  if (pd == NULL || ch == NULL) die("pd/channel");
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
  if (cq == NULL) die("ibv_create_cq");
  static char buf[4096];
  struct ibv_mr* mr =
      ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (mr == NULL) die("ibv_reg_mr");
  struct ibv_qp_init_attr ia = {
      .send_cq = cq,
      .recv_cq = cq,
      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC};
  struct ibv_qp* qp = ibv_create_qp(pd, &ia);
  if (qp == NULL) die("ibv_create_qp");

  struct peer me = {.qpn = qp->qp_num,
                    .psn = 0x1234 + server,
                    .rkey = mr->rkey,
                    .addr = (uintptr_t)buf},
              them;
  if (ibv_query_gid(ctx, 1, 0, &me.gid) != 0) die("ibv_query_gid");
  int s = tcp(server, argv[2], argc > 3 ? argv[3] : NULL);
  if (write(s, &me, sizeof me) != sizeof me || read(s, &them, sizeof them) != sizeof them)
    die("exchange");

  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = them.qpn;
  a.rq_psn = them.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = them.gid;
  a.ah_attr.grh.sgid_index = 0;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("RTR");
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = me.psn;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("RTS");
  char go = 'g';
  if (write(s, &go, 1) != 1 || read(s, &go, 1) != 1) die("sync");

  int rc = 1;
  if (server) {
    struct ibv_async_event ev;
    for (;;) { /* the port's events first (the link came up when the client joined) */
      struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
      if (poll(&p, 1, 20000) != 1) die("poll async_fd: nothing in 20 s");
      if (ibv_get_async_event(ctx, &ev) != 0) die("ibv_get_async_event");
      if (ev.event_type != IBV_EVENT_PORT_ACTIVE && ev.event_type != IBV_EVENT_PORT_ERR) break;
      printf("async event: %s\n", ibv_event_type_str(ev.event_type));
      ibv_ack_async_event(&ev);
    }
    printf("async event: %s, element is our QP: %s\n", ibv_event_type_str(ev.event_type),
           ev.element.qp == qp ? "yes" : "no");
    rc = !(ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == qp);
    ibv_ack_async_event(&ev);
    struct ibv_qp_init_attr qi;
    if (ibv_query_qp(qp, &a, IBV_QP_STATE, &qi) != 0) die("ibv_query_qp");
    printf("QP state after the event: %d (IBV_QPS_ERR is %d)\n", a.qp_state, IBV_QPS_ERR);
    rc |= a.qp_state != IBV_QPS_ERR;
  } else {
    if (ibv_req_notify_cq(cq, 0) != 0) die("ibv_req_notify_cq");
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 7,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = them.addr;
    wr.wr.rdma.rkey = them.rkey ^ 0x5a5a00; /* not a key the server gave */
    struct ibv_send_wr* bad;
    if (ibv_post_send(qp, &wr, &bad) != 0) die("ibv_post_send");
    struct pollfd p = {.fd = ch->fd, .events = POLLIN};
    if (poll(&p, 1, 20000) != 1) die("poll channel: nothing in 20 s");
    struct ibv_cq* ecq;
    void* ectx;
    if (ibv_get_cq_event(ch, &ecq, &ectx) != 0 || ecq != cq) die("ibv_get_cq_event");
    ibv_ack_cq_events(cq, 1);
    struct ibv_wc wc;
    if (ibv_poll_cq(cq, 1, &wc) != 1) die("ibv_poll_cq");
    printf("completion: wr_id %llu, %s\n", (unsigned long long)wc.wr_id,
           ibv_wc_status_str(wc.status));
    rc = !(wc.wr_id == 7 && wc.status == IBV_WC_REM_ACCESS_ERR);
    struct ibv_qp_init_attr qi;
    if (ibv_query_qp(qp, &a, IBV_QP_STATE, &qi) != 0) die("ibv_query_qp");
    printf("QP state after the completion: %d (IBV_QPS_ERR is %d)\n", a.qp_state, IBV_QPS_ERR);
    rc |= a.qp_state != IBV_QPS_ERR;
  }
  if (write(s, &go, 1) != 1 || read(s, &go, 1) != 1) die("sync");
  close(s);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_destroy_comp_channel(ch);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  printf("%s\n", rc == 0 ? "OK" : "FAIL");
  return rc;
}
