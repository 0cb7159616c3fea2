/* The extended verbs API end to end, as a program written against Debian's libibverbs uses it
 * (no Debian binary polls with ibv_start_poll unless it asks for completion timestamps):
 * ibv_create_qp_ex with send_ops_flags and ibv_create_cq_ex with wc_flags, one ibv_wr_* batch
 * of every builder the appliance has (SEND with immediate from an SGE list, SEND of inline data
 * from a buffer list overwritten before wr_complete, RDMA WRITE with immediate, RDMA READ, the
 * two atomics), and both sides' completions read with start_poll/next_poll/end_poll and the
 * ibv_wc_read_* accessors. The data, the immediates, the atomics' results are checked; so are
 * the creation errors (EOPNOTSUPP).
 *   verbs_ex_pingpong PORT              the server (passive side)
 *   verbs_ex_pingpong PORT SERVER_IP    the client: it posts the batch
 * Prints "verbs_ex_pingpong: PASS" on success, else a FAIL line, exit 1. */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF 65536
#define OFF_WRITE 4096
#define OFF_READ 8192
#define OFF_FADD 12288
#define OFF_CSWP 12296

static const char* role = "?";

#define CHECK(cond, ...)                                     \
  do {                                                       \
    if (!(cond)) {                                           \
      fprintf(stderr, "verbs_ex_pingpong %s: FAIL: ", role); \
      fprintf(stderr, __VA_ARGS__);                          \
      fprintf(stderr, "\n");                                 \
      exit(1);                                               \
    }                                                        \
  } while (0)

struct peer {
  uint32_t qpn, psn, rkey;
  uint64_t addr;
  union ibv_gid gid;
};

static int tcp(int port, const char* server) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(s >= 0, "socket: %s", strerror(errno));
  if (server) {
    CHECK(inet_pton(AF_INET, server, &a.sin_addr) == 1, "bad address %s", server);
    for (int i = 0; connect(s, (struct sockaddr*)&a, sizeof a) != 0; ++i) {
      CHECK(i < 100, "connect: %s", strerror(errno));
      usleep(100000);
    }
    return s;
  }
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  CHECK(bind(s, (struct sockaddr*)&a, sizeof a) == 0, "bind: %s", strerror(errno));
  CHECK(listen(s, 1) == 0, "listen: %s", strerror(errno));
  int c = accept(s, NULL, NULL);
  CHECK(c >= 0, "accept: %s", strerror(errno));
  close(s);
  return c;
}

static void xfer(int s, void* out, const void* in, size_t n) {
  CHECK(write(s, in, n) == (ssize_t)n, "write: %s", strerror(errno));
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(s, (char*)out + got, n - got);
    CHECK(r > 0, "read: %s", r ? strerror(errno) : "closed");
    got += (size_t)r;
  }
}

/* The next completion of `cq` (start_poll, or next_poll inside a batch), waiting up to 10 s. */
static void next_wc(struct ibv_cq_ex* cq, int* in_batch) {
  struct ibv_poll_cq_attr attr = {0};
  time_t end = time(NULL) + 10;
  for (;;) {
    int rc = *in_batch ? ibv_next_poll(cq) : ibv_start_poll(cq, &attr);
    if (rc == 0) {
      *in_batch = 1;
      return;
    }
    CHECK(rc == ENOENT, "%s: %s", *in_batch ? "ibv_next_poll" : "ibv_start_poll", strerror(rc));
    if (*in_batch) {
      ibv_end_poll(cq);
      *in_batch = 0;
    }
    CHECK(time(NULL) < end, "no completion within 10 s");
  }
}

static void to_rts(struct ibv_qp* qp, const struct peer* me, const struct peer* them) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC;
  CHECK(
      !ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
      "INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = them->qpn;
  a.rq_psn = them->psn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = them->gid;
  a.ah_attr.grh.sgid_index = 0;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  CHECK(!ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
        "RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = me->psn;
  a.max_rd_atomic = 4;
  CHECK(!ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
        "RTS");
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: verbs_ex_pingpong PORT [SERVER_IP]\n");
    return 2;
  }
  const char* server = argc > 2 ? argv[2] : NULL;
  role = server ? "client" : "server";
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  CHECK(list && n > 0, "no device");
  struct ibv_context* ctx = ibv_open_device(list[0]);
  CHECK(ctx, "ibv_open_device: %s", strerror(errno));
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd");
  uint8_t* buf = aligned_alloc(4096, BUF);
  memset(buf, 0, BUF);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, BUF,
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  CHECK(mr, "ibv_reg_mr: %s", strerror(errno));

  /* What the appliance has not: refused at creation, as rdma-core's rxe does. */
  struct ibv_cq_init_attr_ex ca;
  memset(&ca, 0, sizeof ca);
  ca.cqe = 64;
  ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  errno = 0;
  CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EOPNOTSUPP, "a CQ with timestamps: errno %d",
        errno);
  ca.wc_flags = IBV_WC_STANDARD_FLAGS;
  struct ibv_cq_ex* scq = ibv_create_cq_ex(ctx, &ca);
  struct ibv_cq_ex* rcq = ibv_create_cq_ex(ctx, &ca);
  CHECK(scq && rcq, "ibv_create_cq_ex: %s", strerror(errno));

  struct ibv_qp_init_attr_ex qa;
  memset(&qa, 0, sizeof qa);
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = ibv_cq_ex_to_cq(scq);
  qa.recv_cq = ibv_cq_ex_to_cq(rcq);
  qa.cap.max_send_wr = 16;
  qa.cap.max_recv_wr = 16;
  qa.cap.max_send_sge = 2;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = 64;
  qa.pd = pd;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.send_ops_flags = IBV_QP_EX_WITH_BIND_MW;
  errno = 0;
  CHECK(!ibv_create_qp_ex(ctx, &qa) && errno == EOPNOTSUPP, "a QP with BIND_MW: errno %d", errno);
  qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                      IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                      IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
  struct ibv_qp* qp = ibv_create_qp_ex(ctx, &qa);
  CHECK(qp, "ibv_create_qp_ex: %s", strerror(errno));
  struct ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp);
  CHECK(qpx && qpx->wr_start && qpx->wr_send_imm && qpx->wr_atomic_cmp_swp,
        "ibv_qp_to_qp_ex: no builder");

  struct peer me = {qp->qp_num, (uint32_t)(getpid() & 0xffffff), mr->rkey, (uintptr_t)buf, {{0}}};
  struct peer them;
  CHECK(!ibv_query_gid(ctx, 1, 0, &me.gid), "ibv_query_gid");
  int s = tcp(atoi(argv[1]), server);
  xfer(s, &them, &me, sizeof me);
  to_rts(qp, &me, &them);
  if (!server) { /* what the client will read and add to */
    for (int i = 0; i < 1024; ++i) buf[OFF_READ + i] = (uint8_t)(i * 7 + 3);
    uint64_t v = 100;
    memcpy(buf + OFF_FADD, &v, 8);
    v = 7;
    memcpy(buf + OFF_CSWP, &v, 8);
    for (int i = 0; i < 3; ++i) { /* SEND_IMM, SEND (inline), WRITE_IMM */
      struct ibv_sge sge = {(uintptr_t)(buf + i * 1024), 1024, mr->lkey};
      struct ibv_recv_wr rw = {.wr_id = 100 + (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
      CHECK(!ibv_post_recv(qp, &rw, &bad), "ibv_post_recv");
    }
  }
  char sync = 0;
  xfer(s, &sync, &sync, 1); /* both RTS */

  if (server) { /* the active side, named "client" on the command line */
    for (int i = 0; i < 300; ++i) buf[i] = (uint8_t)(i ^ 0x5a);
    for (int i = 0; i < 512; ++i) buf[OFF_WRITE + i] = (uint8_t)(i * 3);
    char inl1[8] = "hello ", inl2[8] = "inline";
    struct ibv_sge two[2] = {{(uintptr_t)buf, 100, mr->lkey},
                             {(uintptr_t)(buf + 200), 100, mr->lkey}};
    struct ibv_data_buf inl[2] = {{inl1, 6}, {inl2, 6}};
    ibv_wr_start(qpx);
    qpx->wr_flags = IBV_SEND_SIGNALED;
    qpx->wr_id = 1;
    ibv_wr_send_imm(qpx, htonl(0x1234));
    ibv_wr_set_sge_list(qpx, 2, two);
    qpx->wr_id = 2;
    ibv_wr_send(qpx);
    ibv_wr_set_inline_data_list(qpx, 2, inl);
    memset(inl1, 'X', sizeof inl1); /* copied at the call: free again */
    qpx->wr_id = 3;
    ibv_wr_rdma_write_imm(qpx, them.rkey, them.addr + OFF_WRITE, htonl(0x5678));
    ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)(buf + OFF_WRITE), 512);
    qpx->wr_id = 4;
    ibv_wr_rdma_read(qpx, them.rkey, them.addr + OFF_READ);
    ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)(buf + OFF_READ), 1024);
    qpx->wr_id = 5;
    ibv_wr_atomic_fetch_add(qpx, them.rkey, them.addr + OFF_FADD, 5);
    ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)(buf + OFF_FADD), 8);
    qpx->wr_id = 6;
    ibv_wr_atomic_cmp_swp(qpx, them.rkey, them.addr + OFF_CSWP, 7, 9);
    ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)(buf + OFF_CSWP), 8);
    int rc = ibv_wr_complete(qpx);
    CHECK(rc == 0, "ibv_wr_complete: %s", strerror(rc));

    static const enum ibv_wc_opcode want[] = {IBV_WC_SEND,      IBV_WC_SEND,      IBV_WC_RDMA_WRITE,
                                              IBV_WC_RDMA_READ, IBV_WC_FETCH_ADD, IBV_WC_COMP_SWAP};
    int in_batch = 0;
    for (int i = 0; i < 6; ++i) {
      next_wc(scq, &in_batch);
      CHECK(scq->status == IBV_WC_SUCCESS, "send completion %d: %s", i,
            ibv_wc_status_str(scq->status));
      CHECK(scq->wr_id == (uint64_t)i + 1, "send completion %d: wr_id %llu", i,
            (unsigned long long)scq->wr_id);
      CHECK(ibv_wc_read_opcode(scq) == want[i], "send completion %d: opcode %d", i,
            ibv_wc_read_opcode(scq));
      CHECK(ibv_wc_read_qp_num(scq) == qp->qp_num, "send completion %d: qp_num", i);
      if (i == 3)
        CHECK(ibv_wc_read_byte_len(scq) == 1024, "READ byte_len %u", ibv_wc_read_byte_len(scq));
    }
    ibv_end_poll(scq);
    for (int i = 0; i < 1024; ++i)
      CHECK(buf[OFF_READ + i] == (uint8_t)(i * 7 + 3), "READ data at %d", i);
    uint64_t v;
    memcpy(&v, buf + OFF_FADD, 8);
    CHECK(v == 100, "FETCH_ADD returned %llu", (unsigned long long)v);
    memcpy(&v, buf + OFF_CSWP, 8);
    CHECK(v == 7, "CMP_SWP returned %llu", (unsigned long long)v);
  } else {
    /* One completion per start_poll..end_poll, as pyverbs polls: the iterator keeps the rest. */
    struct {
      enum ibv_wc_opcode op;
      uint32_t len, imm;
      unsigned flags;
    } want[] = {{IBV_WC_RECV, 200, 0x1234, IBV_WC_WITH_IMM},
                {IBV_WC_RECV, 12, 0, 0},
                {IBV_WC_RECV_RDMA_WITH_IMM, 512, 0x5678, IBV_WC_WITH_IMM}};
    for (int i = 0; i < 3; ++i) {
      int in_batch = 0;
      next_wc(rcq, &in_batch);
      CHECK(rcq->status == IBV_WC_SUCCESS, "recv %d: %s", i, ibv_wc_status_str(rcq->status));
      CHECK(rcq->wr_id == 100 + (uint64_t)i, "recv %d: wr_id %llu", i,
            (unsigned long long)rcq->wr_id);
      CHECK(ibv_wc_read_opcode(rcq) == want[i].op, "recv %d: opcode %d", i,
            ibv_wc_read_opcode(rcq));
      CHECK(ibv_wc_read_byte_len(rcq) == want[i].len, "recv %d: byte_len %u", i,
            ibv_wc_read_byte_len(rcq));
      CHECK((ibv_wc_read_wc_flags(rcq) & IBV_WC_WITH_IMM) == want[i].flags, "recv %d: wc_flags %#x",
            i, ibv_wc_read_wc_flags(rcq));
      if (want[i].flags)
        CHECK(ntohl(ibv_wc_read_imm_data(rcq)) == want[i].imm, "recv %d: imm %#x", i,
              ntohl(ibv_wc_read_imm_data(rcq)));
      CHECK(ibv_wc_read_qp_num(rcq) == qp->qp_num, "recv %d: qp_num", i);
      ibv_end_poll(rcq);
    }
    for (int i = 0; i < 100; ++i)
      CHECK(buf[i] == (uint8_t)(i ^ 0x5a) && buf[100 + i] == (uint8_t)((200 + i) ^ 0x5a),
            "SEND data at %d", i);
    CHECK(memcmp(buf + 1024, "hello inline", 12) == 0, "inline SEND data \"%.12s\"", buf + 1024);
    for (int i = 0; i < 512; ++i)
      CHECK(buf[OFF_WRITE + i] == (uint8_t)(i * 3), "WRITE data at %d", i);
  }
  xfer(s, &sync, &sync, 1); /* the client's checks done: the atomics have landed */
  if (!server) {
    uint64_t v;
    memcpy(&v, buf + OFF_FADD, 8);
    CHECK(v == 105, "after FETCH_ADD: %llu", (unsigned long long)v);
    memcpy(&v, buf + OFF_CSWP, 8);
    CHECK(v == 9, "after CMP_SWP: %llu", (unsigned long long)v);
  }
  xfer(s, &sync, &sync, 1);
  close(s);
  CHECK(!ibv_destroy_qp(qp), "ibv_destroy_qp");
  CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(scq)) && !ibv_destroy_cq(ibv_cq_ex_to_cq(rcq)),
        "ibv_destroy_cq");
  CHECK(!ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd), "dereg/dealloc");
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  free(buf);
  printf("verbs_ex_pingpong %s: PASS\n", role);
  return 0;
}
