/* @file
 * The NAAICE low-level host API (AP1): offload a function to a network-attached accelerator
 * over RoCEv2. Names, call sequence, wire protocol and return codes of the upstream library
 * (naaice-greenhpc/naa-communication-library, lib/naaice.h at f7b72fc):
 *
 *   1. naaice_init_communication_context   parameters (host buffers), internal regions,
 *                                          function code, NAA address
 *   2. (in any order) naaice_setup_connection (rdma_cm), naaice_register_mrs,
 *      naaice_set_input_mr / naaice_set_output_mr / naaice_set_singlesend_mr per parameter,
 *      naaice_set_internal_mrs (optional), naaice_set_immediate (optional)
 *   3. naaice_set_bytes_to_send (optional, after naaice_register_mrs)
 *   4. naaice_do_mrsp                      advertisement+request -> advertisement (or error)
 *      (or naaice_init_mrsp, then naaice_poll_cq_nonblocking until state >= NAAICE_MRSP_DONE)
 *   5. naaice_do_data_transfer             the input regions: WRITEs, the last a
 *      (or naaice_init_data_transfer, then  WRITE_WITH_IMM(fncode | 0x80); the NAA writes the
 *       a naaice_poll_cq_* until state >=   output regions back, the last with an immediate
 *       NAAICE_FINISHED); may be repeated   whose upper 24 bits are its return code
 *   6. naaice_disconnect_and_cleanup       DREQ/DREP, everything freed
 *
 * Every function returns 0 on success and -1 on failure (a message on stderr), as upstream's.
 * A call the NAA answers with a non-zero return code still succeeds (upstream): the code is in
 * naa_returncode. This library's additions: mrsp_error (the NAA's MRSP error code after a
 * failed MRSP; upstream only logs it), naa_immediate (the NAA's whole immediate), an MRSP that
 * may be repeated after an error, comm_ctx->timeout on every wait (when positive; 0: none, as
 * upstream), and call_gap (for upstream's software NAA; docs/naa.md). Compiled against this
 * header, a program written for upstream's needs apps/naa/host on its include path alone.
 *
 * The same source builds against rdma-core (libnaaice_ibverbs) and against the appliance's
 * own stack (libnaaice_roce, libnaaice_attached); see naaice_transport.h. What upstream's API
 * has that is bound to rdma-core (the rdma_cm event handlers, naaice_poll_connection_event,
 * naaice_init_rdma_resources, the ibv_* members of the context and naaice_mr_local's ibv) is
 * not here; naaice_handle_work_completion takes the
 * transport's completion (struct naaice_wc) instead of an ibv_wc. */
#ifndef NAAICE_H
#define NAAICE_H

/* What upstream's naaice.h brings in besides rdma-core and microlog (<ulog.h>: a program that
 * logs with ulog_* includes it itself, as upstream's examples do): its users call the C library
 * without including it. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* The connection state is atomic, as upstream's (another thread may watch it). */
#ifdef __cplusplus
#include <atomic>
#define ATOMIC_TYPE(T) std::atomic<T>
#else
#include <stdatomic.h>
#define ATOMIC_TYPE(T) _Atomic(T)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Upstream's constants. */
#define SERVER_CONNECTION_PORT 12345
#define NAAICE_DEFAULT_PORT SERVER_CONNECTION_PORT
/* Seconds a blocking call waits for the NAA. */
#define DEFAULT_TIMEOUT 3600
/* rdma_cm retry count of the connection. */
#define DEFAULT_RETRY_COUNT 7
/* Milliseconds naaice_poll_cq_nonblocking waits for a completion event (upstream; ours
 * returns at once). */
#define POLLING_TIMEOUT 500
/* Upstream's queue depth and route resolution timeout (ms): rdma-core's, defined for source
 * compatibility. */
#define RX_DEPTH 1025
#define TIMEOUT_RESOLVE_ROUTE 500
#define ntohll be64toh
#define htonll htobe64
/* Regions upstream's NAA handles (parameters and internal regions). */
#define MAX_MRS 32
/* The NAA's return code sits above the immediate's lowest byte. */
#define IMMEDIATE_OFFSET 8
/* The immediate's bit that marks a host-to-NAA call, and the function code's bits. */
#define NAAICE_IMM_START_RPC 0x80u
#define NAAICE_IMM_FNCODE_MASK 0x7fu

/* MRSP limits: the 8-bit count; the wire's 32-bit region size; the 56-bit NAA address. */
#define NAAICE_MAX_COUNT 255
#define NAAICE_MAX_MRS MAX_MRS
#define NAAICE_MAX_MR_SIZE 0xffffffffu
#define NAAICE_MAX_NAA_ADDR ((1ull << 56) - 1)
/* Upstream aligns the NAA addresses it requests to this. */
#define NAAICE_NAA_PAGE 4096

/* MRSP message types. */
enum message_id {
  MSG_MR_ERR = 0x00,
  MSG_MR_AAR = 0x01,
  MSG_MR_A = 0x02,
  MSG_MR_R = 0x03, /* defined, unused */
};

/* Upstream's message structs, for programs that use them (this library lays its messages out
 * byte by byte): every field big-endian on the wire, no padding inside an entry. An
 * advertisement entry: */
struct naaice_mr_advertisement {
  uint64_t addr;
  uint32_t rkey;
  uint32_t size;
};
/* An advertisement+request entry: mr_info = htonll(flags << 56 | requested NAA address). */
struct naaice_mr_advertisement_request {
  union {
    uint64_t mr_info;
    uint8_t mr_info_bytearray[8];
  };
  uint64_t addr;
  uint32_t rkey;
  uint32_t size;
};
struct naaice_mr_request {
  uint64_t size;
};
struct naaice_mr_error {
  uint8_t code;
  uint8_t padding[2];
};
struct naaice_mr_hdr {
  uint8_t type;
};
struct naaice_mr_dynamic_hdr {
  uint8_t count;
  uint8_t padding[2];
};
/* The seed's metadata region (upstream declares it and no longer uses it). */
struct naaice_rpc_metadata {
  uintptr_t return_addr;
};
/* Upstream's MRSP buffer size (its host's and software NAA's; ours holds NAAICE_MAX_COUNT). */
#define MR_SIZE_MRSP (sizeof(struct naaice_mr_advertisement_request) * MAX_MRS)

/* MR flags, the first byte of an advertisement+request entry. */
enum naaice_mrflags_value {
  MRFLAG_INTERNAL = 0x01,   /* on the NAA only, never transferred */
  MRFLAG_SINGLESEND = 0x02, /* written on the first call of a connection only */
  MRFLAG_INPUT = 0x04,      /* written to the NAA on each call */
  MRFLAG_OUTPUT = 0x08,     /* written back by the NAA after each call */
};

/* MRSP error codes (the NAAICE low-level API). */
enum naaice_mrsp_error {
  NAAICE_MRSP_NOT_ENOUGH_MEMORY = 0x01,
  NAAICE_MRSP_INVALID_ADDRESS = 0x02,
  NAAICE_MRSP_TOO_MANY_REGIONS = 0x03,
};

/* The NAA's return codes (upstream's naaice_ap2.h names them; 0x10-0x7f: the application's). */
enum naa_error {
  NAA_SUCCESS = 0x00,
  SOCKET_UNAVAIL = 0x01,
  KERNEL_TIMEOUT = 0x02,
  /* 0x03-0x0f reserved; 0x10-0x7f the application's. This library's: the enum's range, so that
   * C++ may hold every code in it. */
  NAA_ERROR_LAST = 0xff,
};

typedef enum {
  NAAICE_INIT = 0,
  NAAICE_READY = 1,
  NAAICE_CONNECTED = 2,
  NAAICE_DISCONNECTED = 3,
  NAAICE_MRSP_SENDING = 10,
  NAAICE_MRSP_RECEIVING = 11,
  NAAICE_MRSP_DONE = 12,
  NAAICE_DATA_SENDING = 20,
  NAAICE_CALCULATING = 21,
  NAAICE_DATA_RECEIVING = 22,
  NAAICE_FINISHED = 30,
  NAAICE_ERROR = 40,
} naaice_communication_state;

struct naaice_mr_local {
  char* addr;
  size_t size;      /* bytes written per call (naaice_set_bytes_to_send) */
  bool to_write;    /* an input: written to the NAA */
  bool single_send; /* written on the connection's first call only */
  /* This library's: the registration. */
  size_t length; /* registered (and advertised) size */
  uint32_t lkey, rkey;
  void* handle;
};

struct naaice_mr_peer {
  union {
    uint64_t addr; /* before the MRSP: the NAA address requested; after: the advertised one */
    uint8_t fpgaaddr[8];
  };
  uint32_t rkey;
  size_t size;
  bool to_write; /* an output: written back by the NAA */
  bool single_send;
};

struct naaice_mr_internal {
  union {
    uint64_t addr; /* the NAA address requested */
    uint8_t fpgaaddr[8];
  };
  size_t size;
};

struct naaice_transport;

struct naaice_communication_context {
  struct naaice_transport* transport;
  double timeout;           /* seconds any blocking call waits (DEFAULT_TIMEOUT); 0 or less: no
                               limit, as upstream */
  uint8_t retry_count;      /* DEFAULT_RETRY_COUNT */
  uint16_t max_inline_data; /* upstream's (rdma-core's inline size); unused */

  ATOMIC_TYPE(naaice_communication_state) state;

  /* The parameters, in the order given. */
  struct naaice_mr_local* mr_local_data;
  uint8_t no_local_mrs;
  uint8_t mr_return_idx; /* upstream's; unused */

  /* The NAA's counterparts, same order. */
  struct naaice_mr_peer* mr_peer_data;
  uint8_t no_peer_mrs;

  /* MRSP buffer: send half, then receive half. */
  struct naaice_mr_local* mr_local_message;

  struct naaice_mr_internal* mr_internal;
  uint8_t no_internal_mrs;

  uint8_t fncode;
  uint8_t naa_returncode; /* the NAA's return code of the last call: (imm >> 8), 8 bits */

  uint8_t rdma_writes_done;
  uint32_t bytes_received; /* length of the NAA's last write of the last call */
  uint8_t no_input_mrs;
  uint8_t no_output_mrs;
  unsigned int no_rpc_calls;

  /* The immediate of a call: the lowest byte the function code, the upper three bytes
   * naaice_set_immediate's (immediate_bytearr as on a little-endian host, upstream's layout). */
  union {
    uint32_t immediate;
    uint8_t immediate_bytearr[4];
  };

  uint8_t connection_id; /* upstream's (its NAA's); unused */

  /* This library's additions. */
  char local_ip[64];
  char remote_ip[64]; /* the NAA's IPv4 address (remote_address resolved, as upstream) */
  uint16_t port;
  uint8_t mrsp_error;     /* the NAA's MRSP error code, 0 if none */
  uint32_t naa_immediate; /* the NAA's last immediate, whole */
  int recv_posted;        /* receives waiting on the QP */
  uint8_t writes_posted;  /* by the last naaice_write_data: their completions end DATA_SENDING */
  /* Seconds a call waits after the NAA's last message (its advertisement or the last result)
   * before it writes; the transport keeps running meanwhile. 0 unless NAAICE_CALL_GAP_MS is
   * set. Upstream's software NAA (f7b72fc) needs it: it re-arms its CQ only after it has
   * handled the completions of its own SEND or WRITEs (our ACKs), so a call whose
   * WRITE_WITH_IMM reaches it before then lands in its CQ unannounced and is never answered. */
  double call_gap;
  double naa_msg_at; /* when the NAA's last message arrived (monotonic seconds) */
};

/* addr_offset: the NAA address requested for the first region; the others follow, each
 * aligned to NAAICE_NAA_PAGE (internal regions first, then the parameters), as upstream.
 * local_address may be NULL. params_amount >= 1; fncode 1..127 (the NAA takes its low 7 bits:
 * 128 is refused, 129..255 arrive as 1..127). */
int naaice_init_communication_context(struct naaice_communication_context** comm_ctx,
                                      uint64_t addr_offset, size_t* param_sizes, char** params,
                                      unsigned int params_amount, unsigned int internal_mr_amount,
                                      size_t* internal_mr_sizes, uint8_t fncode,
                                      const char* local_address, const char* remote_address,
                                      uint16_t remote_cm_port);
/* Connects (rdma_cm). Returns 0 at once on a connected context, as upstream. */
int naaice_setup_connection(struct naaice_communication_context* comm_ctx);
/* Upstream's step of naaice_setup_connection's loop (while state < NAAICE_CONNECTED): here the
 * whole connection setup, blocking (naaice_setup_connection); on a context that is no longer
 * in NAAICE_INIT, nothing. 0, or -1 when the connection failed (state NAAICE_ERROR). */
int naaice_poll_and_handle_connection_event(struct naaice_communication_context* comm_ctx);
int naaice_register_mrs(struct naaice_communication_context* comm_ctx);
/* Replaces the parameters (before naaice_register_mrs): their addresses, the NAA addresses to
 * request, sizes; every flag cleared. */
int naaice_set_parameter_mrs(struct naaice_communication_context* comm_ctx,
                             unsigned int n_parameter_mrs, uint64_t* local_addrs,
                             uint64_t* remote_addrs, size_t* sizes);
int naaice_set_input_mr(struct naaice_communication_context* comm_ctx, unsigned int input_mr_idx);
int naaice_set_output_mr(struct naaice_communication_context* comm_ctx, unsigned int output_mr_idx);
/* Also marks the region an input. */
int naaice_set_singlesend_mr(struct naaice_communication_context* comm_ctx,
                             unsigned int singlesend_mr_idx);
int naaice_set_internal_mrs(struct naaice_communication_context* comm_ctx,
                            unsigned int n_internal_mrs, uint64_t* addrs, size_t* sizes);
/* imm_bytes: 3 bytes, the immediate's upper bytes; the lowest becomes the current fncode (call
 * it again after changing comm_ctx->fncode, as upstream). */
int naaice_set_immediate(struct naaice_communication_context* comm_ctx, uint8_t* imm_bytes);
int naaice_init_mrsp(struct naaice_communication_context* comm_ctx);
int naaice_init_data_transfer(struct naaice_communication_context* comm_ctx);
struct naaice_wc;
int naaice_handle_work_completion(const struct naaice_wc* wc,
                                  struct naaice_communication_context* comm_ctx);
/* Handles what has completed; returns at once. */
int naaice_poll_cq_nonblocking(struct naaice_communication_context* comm_ctx);
/* Waits (at most comm_ctx->timeout, if positive) until something the NAA sent has arrived (the MRSP
 * answer or a call's result) and handles it with everything else completed. */
int naaice_poll_cq_blocking(struct naaice_communication_context* comm_ctx);
/* Spins until the call is finished (state >= NAAICE_FINISHED), at most comm_ctx->timeout (if
 * positive; upstream: 500 ms). */
int naaice_poll_cq_busy(struct naaice_communication_context* comm_ctx);
int naaice_disconnect_and_cleanup(struct naaice_communication_context* comm_ctx);
int naaice_send_message(struct naaice_communication_context* comm_ctx, enum message_id message_type,
                        uint8_t errorcode);
/* fncode 0: a zero-length WRITE_WITH_IMM with immediate 0 to the first region (upstream's has
 * no scatter entry), NAAICE's "error on the host side"; otherwise the input regions with
 * comm_ctx->immediate. */
int naaice_write_data(struct naaice_communication_context* comm_ctx, uint8_t fncode);
int naaice_post_recv_mrsp(struct naaice_communication_context* comm_ctx);
int naaice_post_recv_data(struct naaice_communication_context* comm_ctx);
int naaice_do_mrsp(struct naaice_communication_context* comm_ctx);
int naaice_do_data_transfer(struct naaice_communication_context* comm_ctx);
/* number_bytes < 0: the region's registered size again. */
int naaice_set_bytes_to_send(struct naaice_communication_context* comm_ctx, int mr_idx,
                             int number_bytes);

/* Text of an MRSP error code / a return code; of a state. */
const char* naaice_mrsp_error_string(uint8_t code);
const char* naaice_rpc_status_string(uint32_t status);
const char* naaice_state_string(naaice_communication_state state);

#ifdef __cplusplus
}
#endif

#endif
