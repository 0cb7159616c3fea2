/* @file
 * libroce for C programs: the same calls as roce::client::Context (roce/client.h) on an
 * attached roced, with rdma-core's conventions: creating calls return NULL and set errno,
 * the others return 0 or an errno value, roce_poll_cq a count or -errno. Numeric values of
 * the enums are libibverbs' (IBV_QPT_RC = 2, IBV_WC_SUCCESS = 0, ...). */
#ifndef ROCE_ROCE_H
#define ROCE_ROCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct roce_context roce_context;
typedef struct roce_pd roce_pd;
typedef struct roce_buffer roce_buffer;
typedef struct roce_mr roce_mr;
typedef struct roce_cq roce_cq;
typedef struct roce_qp roce_qp;

enum { ROCE_QPT_RC = 2, ROCE_QPT_UC = 3, ROCE_QPT_UD = 4 };
enum {
  ROCE_ACCESS_LOCAL_WRITE = 1,
  ROCE_ACCESS_REMOTE_WRITE = 2,
  ROCE_ACCESS_REMOTE_READ = 4,
  ROCE_ACCESS_REMOTE_ATOMIC = 8
};
enum {
  ROCE_WR_RDMA_WRITE = 0,
  ROCE_WR_RDMA_WRITE_WITH_IMM = 1,
  ROCE_WR_SEND = 2,
  ROCE_WR_SEND_WITH_IMM = 3,
  ROCE_WR_RDMA_READ = 4,
  ROCE_WR_ATOMIC_CMP_AND_SWP = 5,
  ROCE_WR_ATOMIC_FETCH_AND_ADD = 6
};
enum { ROCE_SEND_FENCE = 1, ROCE_SEND_SIGNALED = 2, ROCE_SEND_SOLICITED = 4 };
enum { ROCE_WC_SUCCESS = 0, ROCE_WC_WR_FLUSH_ERR = 5 };
enum {
  ROCE_WC_SEND = 0,
  ROCE_WC_RDMA_WRITE = 1,
  ROCE_WC_RDMA_READ = 2,
  ROCE_WC_RECV = 128,
  ROCE_WC_RECV_RDMA_WITH_IMM = 129
};
enum { ROCE_MTU_256 = 1, ROCE_MTU_512, ROCE_MTU_1024, ROCE_MTU_2048, ROCE_MTU_4096 };

struct roce_sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};
struct roce_send_wr {
  uint64_t wr_id;
  struct roce_send_wr* next;
  struct roce_sge* sg_list;
  int num_sge;
  int opcode;          /* ROCE_WR_* */
  unsigned send_flags; /* ROCE_SEND_* */
  uint32_t imm_data;
  uint64_t remote_addr; /* RDMA and atomics */
  uint32_t rkey;
  uint64_t compare_add, swap;
};
struct roce_recv_wr {
  uint64_t wr_id;
  struct roce_recv_wr* next;
  struct roce_sge* sg_list;
  int num_sge;
};
struct roce_wc {
  uint64_t wr_id;
  int status; /* ROCE_WC_SUCCESS, ... */
  int opcode; /* ROCE_WC_* */
  uint32_t byte_len;
  uint32_t imm_data;
  uint32_t qp_num;
  uint32_t src_qp;
  unsigned wc_flags;
};
struct roce_qp_cap {
  uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge;
};
struct roce_port_info {
  uint8_t mac[6];
  uint8_t gid[16]; /* ::ffff:a.b.c.d */
  uint32_t ipv4;   /* host byte order */
  int max_mtu;     /* ROCE_MTU_* */
};
/* What roce_connect_rc needs of the far end (exchanged out of band). */
struct roce_rc_peer {
  uint32_t qpn;
  uint32_t psn;
  uint8_t gid[16];
};

/* NULL + errno: ENOENT/ECONNREFUSED (no roced), EACCES (socket mode), EPROTO (version). */
roce_context* roce_attach(const char* socket_path, const char* port /* NULL: the first */);
void roce_close(roce_context* ctx); /* releases everything the context created */
int roce_query_port(roce_context* ctx, struct roce_port_info* out);

roce_pd* roce_alloc_pd(roce_context* ctx);
int roce_dealloc_pd(roce_context* ctx, roce_pd* pd);
/* Shared memory (a sealed memfd) that roced maps too; *addr receives its address here. */
roce_buffer* roce_alloc_buffer(roce_context* ctx, size_t length, void** addr);
int roce_free_buffer(roce_context* ctx, roce_buffer* buf);
roce_mr* roce_reg_mr(roce_context* ctx, roce_pd* pd, void* addr, size_t length, unsigned access);
int roce_dereg_mr(roce_context* ctx, roce_mr* mr);
uint32_t roce_mr_lkey(const roce_mr* mr);
uint32_t roce_mr_rkey(const roce_mr* mr);
uint64_t roce_mr_iova(const roce_mr* mr); /* a peer's remote_addr for the MR's first byte */

roce_cq* roce_create_cq(roce_context* ctx, uint32_t depth);
int roce_destroy_cq(roce_context* ctx, roce_cq* cq);
roce_qp* roce_create_qp(roce_context* ctx, roce_pd* pd, int type, roce_cq* send_cq,
                        roce_cq* recv_cq, const struct roce_qp_cap* cap);
int roce_destroy_qp(roce_context* ctx, roce_qp* qp);
uint32_t roce_qp_num(const roce_qp* qp);
/* RESET -> INIT -> RTR -> RTS towards `peer`, the MAC found by ARP on roced's port. */
int roce_connect_rc(roce_context* ctx, roce_qp* qp, const struct roce_rc_peer* peer,
                    uint32_t sq_psn, int mtu);

int roce_post_send(roce_context* ctx, roce_qp* qp, struct roce_send_wr* wr,
                   struct roce_send_wr** bad_wr);
int roce_post_recv(roce_context* ctx, roce_qp* qp, struct roce_recv_wr* wr,
                   struct roce_recv_wr** bad_wr);
int roce_poll_cq(roce_context* ctx, roce_cq* cq, int max, struct roce_wc* out);
/* 0: a completion is there; ETIMEDOUT; ENOTCONN when roced is gone. timeout_ms -1: forever */
int roce_wait_cq(roce_context* ctx, roce_cq* cq, int timeout_ms);

/* rdma_cm (port space TCP, IPv4, RC QPs) on the CM of roced's port: no out-of-band exchange.
 * The CM moves the QPs through their states. Event types as rdma_cm_event's meaning: */
enum {
  ROCE_CM_CONNECT_REQUEST = 1, /* accept (roce_cm_accept) or refuse (roce_cm_reject) */
  ROCE_CM_ESTABLISHED,
  ROCE_CM_REJECTED, /* reason: the IBA REJ reason (8: nobody listens, 28: the application) */
  ROCE_CM_UNREACHABLE,
  ROCE_CM_CONNECT_ERROR,
  ROCE_CM_DISCONNECTED
};
struct roce_cm_event {
  int type;           /* ROCE_CM_* */
  uint32_t id;        /* the connection */
  uint32_t qp_num;    /* ESTABLISHED: our QP */
  uint32_t peer_ipv4; /* host byte order */
  uint16_t port;      /* CONNECT_REQUEST: the listened port */
  uint32_t reason;    /* REJECTED */
  int remote;         /* DISCONNECTED: the peer ended it */
  uint8_t private_data[196];
  uint32_t private_len;
};
/* struct rdma_conn_param's part that matters; private data: connect <= 56, accept <= 196. */
struct roce_cm_param {
  uint8_t responder_resources, initiator_depth, rnr_retry;
  const void* private_data;
  uint32_t private_len;
};
int roce_cm_listen(roce_context* ctx, uint16_t port); /* EADDRINUSE: taken */
int roce_cm_connect(roce_context* ctx, roce_qp* qp, uint32_t dst_ipv4 /* host order */,
                    uint16_t port, const struct roce_cm_param* param /* NULL: defaults */,
                    uint32_t* id);
int roce_cm_accept(roce_context* ctx, uint32_t id, roce_qp* qp,
                   const struct roce_cm_param* param /* NULL: defaults */);
int roce_cm_reject(roce_context* ctx, uint32_t id, const void* private_data, uint32_t len);
int roce_cm_disconnect(roce_context* ctx, uint32_t id);
/* 0 with *ev filled; ETIMEDOUT; ENOTCONN when roced is gone. timeout_ms -1: forever */
int roce_cm_get_event(roce_context* ctx, struct roce_cm_event* ev, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* ROCE_ROCE_H */
