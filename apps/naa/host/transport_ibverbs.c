/* @file
 * The host library's transport on rdma-core (naaice_transport.h): librdmacm for the connection
 * (resolve address and route, connect, disconnect), libibverbs for the PD, CQ, QP, memory
 * registration and work requests. Runs wherever rdma-core does (an RNIC, Linux rxe). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/naa/host/naaice_transport.h"

struct ibv_transport {
  struct rdma_event_channel* ch;
  struct rdma_cm_id* id;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  int connected, broken;
  char error[160];
};

static void set_error(struct ibv_transport* t, const char* what) {
  snprintf(t->error, sizeof t->error, "%s", what);
}

/* The next CM event within `timeout_s`; its type in *type (the event acknowledged). */
static int next_event(struct ibv_transport* t, double timeout_s, enum rdma_cm_event_type* type,
                      int* status) {
  struct pollfd p = {t->ch->fd, POLLIN, 0};
  if (poll(&p, 1, (int)(timeout_s * 1000)) != 1) {
    set_error(t, "timed out waiting for a connection event");
    return -1;
  }
  struct rdma_cm_event* ev;
  if (rdma_get_cm_event(t->ch, &ev)) {
    set_error(t, "rdma_get_cm_event failed");
    return -1;
  }
  *type = ev->event;
  *status = ev->status;
  rdma_ack_cm_event(ev);
  return 0;
}

static int expect(struct ibv_transport* t, enum rdma_cm_event_type want, double timeout_s) {
  enum rdma_cm_event_type got;
  int status = 0;
  if (next_event(t, timeout_s, &got, &status)) return -1;
  if (got != want) {
    snprintf(t->error, sizeof t->error, "connection event %s (status %d), expected %s",
             rdma_event_str(got), status, rdma_event_str(want));
    return -1;
  }
  return 0;
}

static int t_connect(void* p, const char* local_ip, const char* ip, uint16_t port,
                     uint32_t send_depth, uint32_t recv_depth, uint8_t retry_count,
                     double timeout_s) {
  struct ibv_transport* t = p;
  struct addrinfo *res, *src = NULL;
  char service[8];
  snprintf(service, sizeof service, "%u", port);
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  if (getaddrinfo(ip, service, &hints, &res)) {
    set_error(t, "cannot parse the NAA's address");
    return -1;
  }
  if (local_ip && getaddrinfo(local_ip, NULL, &hints, &src)) {
    freeaddrinfo(res);
    set_error(t, "cannot parse the local address");
    return -1;
  }
  int rc = rdma_resolve_addr(t->id, src ? src->ai_addr : NULL, res->ai_addr, 2000);
  freeaddrinfo(res);
  if (src) freeaddrinfo(src);
  if (rc) {
    set_error(t, "rdma_resolve_addr failed");
    return -1;
  }
  if (expect(t, RDMA_CM_EVENT_ADDR_RESOLVED, timeout_s)) return -1;
  if (rdma_resolve_route(t->id, 2000)) {
    set_error(t, "rdma_resolve_route failed");
    return -1;
  }
  if (expect(t, RDMA_CM_EVENT_ROUTE_RESOLVED, timeout_s)) return -1;
  t->pd = ibv_alloc_pd(t->id->verbs);
  t->cq =
      t->pd ? ibv_create_cq(t->id->verbs, (int)(send_depth + recv_depth + 8), NULL, NULL, 0) : NULL;
  if (!t->pd || !t->cq) {
    set_error(t, "cannot create the PD and CQ");
    return -1;
  }
  struct ibv_qp_init_attr qa;
  memset(&qa, 0, sizeof qa);
  qa.send_cq = qa.recv_cq = t->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = send_depth;
  qa.cap.max_recv_wr = recv_depth;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if (rdma_create_qp(t->id, t->pd, &qa)) {
    set_error(t, "rdma_create_qp failed");
    return -1;
  }
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  cp.retry_count = retry_count;
  cp.rnr_retry_count = 6; /* upstream's: 7 would retry for ever */
  cp.initiator_depth = 1;
  cp.responder_resources = 1;
  if (rdma_connect(t->id, &cp)) {
    set_error(t, "rdma_connect failed");
    return -1;
  }
  if (expect(t, RDMA_CM_EVENT_ESTABLISHED, timeout_s)) return -1;
  t->connected = 1;
  /* Later events (DISCONNECTED) are picked up by poll without blocking. */
  fcntl(t->ch->fd, F_SETFL, fcntl(t->ch->fd, F_GETFL) | O_NONBLOCK);
  return 0;
}

static int t_reg_mr(void* p, void* addr, uint64_t length, struct naaice_mr_handle* out) {
  struct ibv_transport* t = p;
  struct ibv_mr* mr =
      ibv_reg_mr(t->pd, addr, length, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) {
    set_error(t, "ibv_reg_mr failed");
    return -1;
  }
  out->addr = addr;
  out->length = length;
  out->lkey = mr->lkey;
  out->rkey = mr->rkey;
  out->priv = mr;
  return 0;
}

static void t_dereg_mr(void* p, struct naaice_mr_handle* h) {
  (void)p;
  if (h->priv) ibv_dereg_mr(h->priv);
}

static int t_post_recv(void* p, uint64_t wr_id, void* addr, uint32_t length, uint32_t lkey) {
  struct ibv_transport* t = p;
  struct ibv_sge sge = {(uintptr_t)addr, length, lkey};
  struct ibv_recv_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (ibv_post_recv(t->id->qp, &wr, &bad)) {
    set_error(t, "ibv_post_recv failed");
    return -1;
  }
  return 0;
}

static int t_post_send(void* p, enum naaice_op op, uint64_t wr_id, const void* local,
                       uint32_t length, uint32_t lkey, uint64_t remote_addr, uint32_t rkey,
                       uint32_t imm, unsigned flags) {
  struct ibv_transport* t = p;
  struct ibv_sge sge = {(uintptr_t)local, length, lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.sg_list = length ? &sge : NULL;
  wr.num_sge = length ? 1 : 0;
  wr.opcode = op == NAAICE_OP_SEND    ? IBV_WR_SEND
              : op == NAAICE_OP_WRITE ? IBV_WR_RDMA_WRITE
                                      : IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = ((flags & NAAICE_SEND_SIGNALED) ? IBV_SEND_SIGNALED : 0) |
                  ((flags & NAAICE_SEND_SOLICITED) ? IBV_SEND_SOLICITED : 0);
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(t->id->qp, &wr, &bad)) {
    set_error(t, "ibv_post_send failed");
    return -1;
  }
  return 0;
}

static int t_poll(void* p, struct naaice_wc* out, int max) {
  struct ibv_transport* t = p;
  struct rdma_cm_event* ev;
  while (rdma_get_cm_event(t->ch, &ev) == 0) {
    if (ev->event == RDMA_CM_EVENT_DISCONNECTED) {
      t->broken = 1;
      set_error(t, "the NAA disconnected");
    }
    rdma_ack_cm_event(ev);
  }
  struct ibv_wc wc[16];
  const int n = ibv_poll_cq(t->cq, max < 16 ? max : 16, wc);
  if (n < 0) {
    set_error(t, "ibv_poll_cq failed");
    return -1;
  }
  for (int i = 0; i < n; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].wr_id = wc[i].wr_id;
    out[i].ok = wc[i].status == IBV_WC_SUCCESS;
    snprintf(out[i].status, sizeof out[i].status, "%s", ibv_wc_status_str(wc[i].status));
    out[i].byte_len = wc[i].byte_len;
    switch (wc[i].opcode) {
      case IBV_WC_RECV:
        out[i].kind = NAAICE_WC_RECV;
        break;
      case IBV_WC_RECV_RDMA_WITH_IMM:
        out[i].kind = NAAICE_WC_RECV_IMM;
        out[i].imm = ntohl(wc[i].imm_data);
        break;
      case IBV_WC_RDMA_WRITE:
        out[i].kind = NAAICE_WC_WRITE;
        break;
      default:
        out[i].kind = NAAICE_WC_SEND;
        break;
    }
  }
  if (n == 0 && t->broken) return -1;
  return n;
}

static void t_disconnect(void* p) {
  struct ibv_transport* t = p;
  if (!t->connected) return;
  t->connected = 0;
  if (rdma_disconnect(t->id)) return;
  /* Wait a moment for the DREP (DISCONNECTED). */
  const time_t end = time(NULL) + 2;
  while (!t->broken && time(NULL) <= end) {
    struct rdma_cm_event* ev;
    struct pollfd pf = {t->ch->fd, POLLIN, 0};
    if (poll(&pf, 1, 200) != 1) continue;
    if (rdma_get_cm_event(t->ch, &ev)) continue;
    if (ev->event == RDMA_CM_EVENT_DISCONNECTED) t->broken = 1;
    rdma_ack_cm_event(ev);
  }
}

static void t_destroy(void* p) {
  struct ibv_transport* t = p;
  if (t->id && t->id->qp) rdma_destroy_qp(t->id);
  if (t->cq) ibv_destroy_cq(t->cq);
  if (t->pd) ibv_dealloc_pd(t->pd);
  if (t->id) rdma_destroy_id(t->id);
  if (t->ch) rdma_destroy_event_channel(t->ch);
  free(t);
}

static const char* t_error(void* p) { return ((struct ibv_transport*)p)->error; }

struct naaice_transport* naaice_transport_open(void) {
  struct ibv_transport* t = calloc(1, sizeof *t);
  struct naaice_transport* n = calloc(1, sizeof *n);
  if (!t || !n) {
    free(t);
    free(n);
    return NULL;
  }
  set_error(t, "no error");
  t->ch = rdma_create_event_channel();
  if (!t->ch || rdma_create_id(t->ch, &t->id, NULL, RDMA_PS_TCP)) {
    fprintf(stderr, "naaice: cannot create an rdma_cm ID (no RDMA device?)\n");
    if (t->ch) rdma_destroy_event_channel(t->ch);
    free(t);
    free(n);
    return NULL;
  }
  n->priv = t;
  n->connect = t_connect;
  n->reg_mr = t_reg_mr;
  n->dereg_mr = t_dereg_mr;
  n->post_recv = t_post_recv;
  n->post_send = t_post_send;
  n->poll = t_poll;
  n->sync_in = NULL; /* the RNIC writes the application's memory */
  n->disconnect = t_disconnect;
  n->destroy = t_destroy;
  n->error = t_error;
  return n;
}
