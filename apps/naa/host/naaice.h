/* @file
 * The NAAICE low-level host API (AP1): offload a function to a network-attached accelerator
 * over RoCEv2. Names and call sequence as in the NAAICE low-level API:
 *
 *   1. naaice_init_communication_context   parameters (host buffers), function code, NAA address
 *   2. naaice_setup_connection             rdma_cm: resolve, REQ/REP/RTU
 *      naaice_register_mrs                 metadata region, parameters, MRSP buffers
 *      naaice_set_metadata                 which parameter receives the result
 *      naaice_set_internal_mrs             (optional) NAA-only regions
 *   3. naaice_do_mrsp                      advertisement+request -> advertisement (or error)
 *      (or naaice_init_mrsp, then naaice_poll_cq_nonblocking until state >= MRSP_DONE)
 *   4. naaice_do_data_transfer             n-1 WRITEs + WRITE_WITH_IMM(fncode), wait for the
 *      (or naaice_init_data_transfer, then  NAA's WRITE_WITH_IMM(status)
 *       naaice_poll_cq_nonblocking until state >= FINISHED); may be repeated
 *   5. naaice_disconnect_and_cleanup       DREQ/DREP, everything freed
 *
 * Every function returns 0 on success and -1 on failure (a message on stderr). After a failed
 * MRSP, comm_ctx->mrsp_error holds the NAA's error code (0x01 not enough memory, 0x02 invalid
 * address, 0x03 too many regions); after a call, comm_ctx->rpc_status holds the NAA's status
 * (0 success, 0x01-0x0f transport/reserved, 0x10-0x7f application errors).
 *
 * The same source builds against rdma-core (libnaaice_ibverbs) and against the appliance's
 * own stack (libnaaice_roce); see naaice_transport.h. */
#ifndef NAAICE_H
#define NAAICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NAAICE_DEFAULT_PORT 12345
/* MRSP limits: the 8-bit count, and the regions an NAA handles. */
#define NAAICE_MAX_COUNT 255
#define NAAICE_MAX_MRS 32
#define NAAICE_MAX_MR_SIZE (1u << 30)

/* MRSP message types. */
enum message_id {
  MSG_MR_ERR = 0x00,
  MSG_MR_AAR = 0x01,
  MSG_MR_A = 0x02,
  MSG_MR_R = 0x03, /* defined, unused */
};

/* MR flags of an advertisement+request entry. */
enum naaice_mrflags_value { MRFLAG_INTERNAL = 0x01 };

/* MRSP error codes. */
enum naaice_mrsp_error {
  NAAICE_MRSP_NOT_ENOUGH_MEMORY = 0x01,
  NAAICE_MRSP_INVALID_ADDRESS = 0x02,
  NAAICE_MRSP_TOO_MANY_REGIONS = 0x03,
};

enum naaice_communication_state {
  INIT = 0,
  READY = 1,
  CONNECTED = 2,
  MRSP_SENDING = 10,
  MRSP_RECEIVING = 11,
  MRSP_DONE = 12,
  DATA_SENDING = 20,
  CALCULATING = 21,
  DATA_RECEIVING = 22,
  FINISHED = 30,
  ERROR = 40,
};

struct naaice_mr_local {
  char* addr;
  size_t size;
  uint32_t lkey, rkey;
  void* handle;
};

struct naaice_mr_peer {
  uint64_t addr;
  uint32_t rkey;
  uint32_t size;
};

struct naaice_mr_internal {
  uint64_t addr; /* requested NAA (FPGA) address */
  uint32_t size;
};

/* The metadata region (region 0): where the NAA writes the result back. Big-endian. */
struct naaice_rpc_metadata {
  uint64_t return_addr;
};

struct naaice_transport;

struct naaice_communication_context {
  struct naaice_transport* transport;
  enum naaice_communication_state state;

  /* Local regions: [0] the metadata region, [1..] the parameters. */
  struct naaice_mr_local* mr_local_data;
  uint8_t no_local_mrs;
  uint8_t mr_return_idx; /* set by naaice_set_metadata, in [1, no_local_mrs) */

  /* The NAA's regions, from its advertisement (same order as mr_local_data). */
  struct naaice_mr_peer* mr_peer_data;
  uint8_t no_peer_mrs;

  /* MRSP buffer: send half, then receive half. */
  struct naaice_mr_local* mr_local_message;

  struct naaice_mr_internal* mr_internal;
  uint8_t no_internal_mrs;

  uint8_t fncode; /* may be changed between calls */
  uint8_t rdma_writes_done;

  /* This implementation's additions. */
  char remote_ip[64];
  uint16_t port;
  uint64_t* fpga_addrs; /* requested NAA address per local region (0: anywhere) */
  uint8_t mrsp_error;   /* the NAA's MRSP error code, 0 if none */
  uint32_t rpc_status;  /* the NAA's status of the last call */
  double timeout;       /* seconds for connection, MRSP and each call (default 60) */
  int recv_posted;      /* receives waiting on the QP */
};

int naaice_init_communication_context(struct naaice_communication_context** comm_ctx,
                                      unsigned int* param_sizes, char** params,
                                      unsigned int params_amount, uint8_t fncode,
                                      const char* remote_ip, uint16_t port);
int naaice_setup_connection(struct naaice_communication_context* comm_ctx);
int naaice_register_mrs(struct naaice_communication_context* comm_ctx);
int naaice_set_metadata(struct naaice_communication_context* comm_ctx, uintptr_t return_addr);
int naaice_set_internal_mrs(struct naaice_communication_context* comm_ctx,
                            unsigned int n_internal_mrs, uintptr_t* addrs, size_t* sizes);
/* Addition: the NAA (FPGA) address to request for each parameter (params_amount entries; 0
 * lets the NAA choose). Call before naaice_init_mrsp. */
int naaice_set_fpga_addresses(struct naaice_communication_context* comm_ctx, const uint64_t* addrs);
int naaice_init_mrsp(struct naaice_communication_context* comm_ctx);
int naaice_init_data_transfer(struct naaice_communication_context* comm_ctx);
int naaice_poll_cq_nonblocking(struct naaice_communication_context* comm_ctx);
int naaice_do_mrsp(struct naaice_communication_context* comm_ctx);
int naaice_do_data_transfer(struct naaice_communication_context* comm_ctx);
int naaice_disconnect_and_cleanup(struct naaice_communication_context* comm_ctx);

/* Lower-level steps, as in the NAAICE API. */
int naaice_send_message(struct naaice_communication_context* comm_ctx, enum message_id message_type,
                        uint8_t errorcode);
int naaice_write_data(struct naaice_communication_context* comm_ctx, uint8_t fncode);
int naaice_post_recv_mrsp(struct naaice_communication_context* comm_ctx);
int naaice_post_recv_data(struct naaice_communication_context* comm_ctx);

/* Text of an MRSP error code / a completion status. */
const char* naaice_mrsp_error_string(uint8_t code);
const char* naaice_rpc_status_string(uint32_t status);

#ifdef __cplusplus
}
#endif

#endif
