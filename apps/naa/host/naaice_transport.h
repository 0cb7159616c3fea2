/* @file
 * What the NAAICE host library (naaice.c) needs from an RDMA stack: one rdma_cm connection with
 * its QP, memory registration, SEND / RDMA WRITE / WRITE_WITH_IMM / RECV and completions. Two
 * implementations, chosen at link time: transport_ibverbs.c (rdma-core: libibverbs and
 * librdmacm) and transport_roce.cc (the appliance's own stack, in-process). The library and
 * the applications above it are the same source for both. */
#ifndef NAAICE_TRANSPORT_H
#define NAAICE_TRANSPORT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct naaice_mr_handle {
  void* addr;
  uint64_t length;
  uint32_t lkey, rkey;
  void* priv; /* the transport's own */
};

enum naaice_wc_kind {
  NAAICE_WC_SEND = 0,
  NAAICE_WC_WRITE = 1,
  NAAICE_WC_RECV = 2,
  NAAICE_WC_RECV_IMM = 3,
};

struct naaice_wc {
  uint64_t wr_id;
  int ok; /* 1: success */
  enum naaice_wc_kind kind;
  uint32_t byte_len;
  uint32_t imm;    /* host order */
  char status[48]; /* when !ok: the completion status */
};

enum naaice_op { NAAICE_OP_SEND = 0, NAAICE_OP_WRITE = 1, NAAICE_OP_WRITE_IMM = 2 };
/* post_send's flags: a completion for it; the Solicited Event bit (BTH SE) on its last
 * packet, which wakes a peer whose CQ is armed for solicited completions only. */
enum { NAAICE_SEND_SIGNALED = 1, NAAICE_SEND_SOLICITED = 2 };

struct naaice_transport {
  void* priv;
  /* Connects to ip:port with rdma_cm (resolve address and route, REQ/REP/RTU), from
   * local_ip when it is given (NULL: any; the appliance's stack has its own); the QP has
   * `send_depth` send and `recv_depth` receive entries, `retry_count` transport retries.
   * 0, or -1 (see error()). */
  int (*connect)(void* priv, const char* local_ip, const char* ip, uint16_t port,
                 uint32_t send_depth, uint32_t recv_depth, uint8_t retry_count, double timeout_s);
  int (*reg_mr)(void* priv, void* addr, uint64_t length, struct naaice_mr_handle* out);
  void (*dereg_mr)(void* priv, struct naaice_mr_handle* mr);
  int (*post_recv)(void* priv, uint64_t wr_id, void* addr, uint32_t length, uint32_t lkey);
  int (*post_send)(void* priv, enum naaice_op op, uint64_t wr_id, const void* local,
                   uint32_t length, uint32_t lkey, uint64_t remote_addr, uint32_t rkey,
                   uint32_t imm, unsigned flags);
  /* Up to `max` completions; -1 when the connection broke (peer disconnected). */
  int (*poll)(void* priv, struct naaice_wc* wc, int max);
  /* The peer may have written [addr, addr + length) of a registered region (a call's
   * result has arrived): make it visible there. NULL when the NIC writes the application's
   * memory itself (rdma-core). */
  void (*sync_in)(void* priv, void* addr, uint64_t length);
  /* DREQ, waits a moment for the DREP. */
  void (*disconnect)(void* priv);
  void (*destroy)(void* priv);
  const char* (*error)(void* priv);
};

/* A new, unconnected transport of the implementation linked in; NULL on failure (reason on
 * stderr). */
struct naaice_transport* naaice_transport_open(void);

#ifdef __cplusplus
}
#endif

#endif
