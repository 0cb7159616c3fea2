/* verbs_bounce send|recv DIR PEER_IP: an RC pair of two attached programs whose sender posts
 * more inline SENDs than its send queue holds (the provider copies inline data into its bounce
 * buffer), retrying every post refused with ENOMEM, while the receiver has no receive posted
 * (RNR: the queue stays full). The receiver posts its receives only after the sender has been
 * refused many times, then checks that every message arrived with its own bytes.
 * The two exchange QP numbers through files in DIR. */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kMessages = 24, kDepth = 4, kRetriesBeforeGo = 200 };

static void put_number(const char *dir, const char *name, unsigned v) {
  char path[512], tmp[520];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (f == NULL) exit(2);
  fprintf(f, "%u\n", v);
  fclose(f);
  rename(tmp, path);
}

static unsigned get_number(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  for (;;) {
    FILE *f = fopen(path, "r");
    unsigned v;
    if (f != NULL) {
      const int ok = fscanf(f, "%u", &v) == 1;
      fclose(f);
      if (ok) return v;
    }
    usleep(10000);
  }
}

static int connect_qp(struct ibv_qp *qp, unsigned peer_qpn, const char *peer_ip) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.grh.dgid.raw[10] = 0xff;
  a.ah_attr.grh.dgid.raw[11] = 0xff;
  if (inet_pton(AF_INET, peer_ip, &a.ah_attr.grh.dgid.raw[12]) != 1) return -1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7; /* retry for ever while the receiver has nothing posted */
  a.sq_psn = 1;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: verbs_bounce send|recv DIR PEER_IP\n");
    return 2;
  }
  const int sender = strcmp(argv[1], "send") == 0;
  const char *dir = argv[2];
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (list == NULL || n == 0) {
    fprintf(stderr, "no device\n");
    return 2;
  }
  struct ibv_context *c = ibv_open_device(list[0]);
  struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;
  struct ibv_cq *cq = pd ? ibv_create_cq(c, 64, NULL, NULL, 0) : NULL;
  if (cq == NULL) {
    perror("open/alloc_pd/create_cq");
    return 2;
  }
  struct ibv_qp_init_attr qa;
  memset(&qa, 0, sizeof qa);
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = kDepth;
  qa.cap.max_recv_wr = kMessages;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = 64;
  qa.sq_sig_all = 1;
  struct ibv_qp *qp = ibv_create_qp(pd, &qa);
  if (qp == NULL) {
    perror("create_qp");
    return 2;
  }
  put_number(dir, sender ? "send.qpn" : "recv.qpn", qp->qp_num);
  if (connect_qp(qp, get_number(dir, sender ? "recv.qpn" : "send.qpn"), argv[3]) != 0) {
    perror("modify_qp");
    return 2;
  }
  if (sender) {
    long refused = 0;
    for (int i = 0; i < kMessages; ++i) {
      char msg[32];
      snprintf(msg, sizeof msg, "message %02d", i);
      struct ibv_sge sge = {(uintptr_t)msg, (uint32_t)strlen(msg) + 1, 0};
      struct ibv_send_wr wr, *bad = NULL;
      memset(&wr, 0, sizeof wr);
      wr.wr_id = (uint64_t)i;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
      for (;;) {
        const int rc = ibv_post_send(qp, &wr, &bad);
        if (rc == 0) break;
        if (rc != ENOMEM || bad != &wr) {
          printf("post %d: %s\n", i, strerror(rc));
          return 1;
        }
        /* The message's bytes change between tries: a refused post must leave nothing behind. */
        memset(msg, 'x', sizeof msg - 1);
        snprintf(msg, sizeof msg, "message %02d", i);
        if (++refused == kRetriesBeforeGo) put_number(dir, "go", 1);
        struct ibv_wc wc[16];
        ibv_poll_cq(cq, 16, wc);
        usleep(1000);
      }
    }
    if (refused < kRetriesBeforeGo) put_number(dir, "go", 1);
    printf("sender: %d posted, %ld posts refused with ENOMEM and tried again\n", kMessages,
           refused);
    fflush(stdout);
    sleep(3); /* the last ones leave */
    return 0;
  }
  static char bufs[kMessages][64];
  struct ibv_mr *mr = ibv_reg_mr(pd, bufs, sizeof bufs, IBV_ACCESS_LOCAL_WRITE);
  if (mr == NULL) {
    perror("reg_mr");
    return 2;
  }
  get_number(dir, "go");
  for (int i = 0; i < kMessages; ++i) {
    struct ibv_sge sge = {(uintptr_t)bufs[i], sizeof bufs[i], mr->lkey};
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = (uint64_t)i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(qp, &wr, &bad) != 0) {
      perror("post_recv");
      return 2;
    }
  }
  int got = 0, wrong = 0;
  for (int t = 0; t < 1000 && got < kMessages; ++t) {
    struct ibv_wc wc[16];
    const int k = ibv_poll_cq(cq, 16, wc);
    for (int j = 0; j < k; ++j) {
      if (wc[j].status != IBV_WC_SUCCESS) {
        printf("receive %d: %s\n", (int)wc[j].wr_id, ibv_wc_status_str(wc[j].status));
        ++wrong;
        ++got;
        continue;
      }
      /* In order: the n-th receive holds the n-th message. */
      char want[32];
      snprintf(want, sizeof want, "message %02d", (int)wc[j].wr_id);
      if (strcmp(want, bufs[wc[j].wr_id]) != 0) {
        printf("receive %d: \"%.63s\", not \"%s\"\n", (int)wc[j].wr_id, bufs[wc[j].wr_id], want);
        ++wrong;
      }
      ++got;
    }
    if (k == 0) usleep(10000);
  }
  printf("receiver: %d of %d received, %d wrong\n", got, kMessages, wrong);
  return got == kMessages && wrong == 0 ? 0 : 1;
}
