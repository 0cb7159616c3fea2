/* A program as a user of upstream NAAICE (naaice-greenhpc/naa-communication-library at f7b72fc)
 * writes it, compiled against this project's host library headers with nothing on the include
 * path but apps/naa/host (test naaice_upstream_source, syntax only): upstream's examples include
 * <naaice.h> or "naaice_ap2.h" alone and use what upstream's naaice.h brings in (the C library:
 * strtok, strtol, atoi, malloc, calloc, memset, printf; be64toh as ntohll), its constants and
 * message structs, and the connection loop its header describes. Implicit declarations are
 * errors here: GCC 14 makes them errors anyway, and an implicit strtok returns a truncated
 * pointer on 64-bit hosts. The names bound to rdma-core (ibv_*, rdma_cm events) are left out
 * (docs/naa.md). */
#include <naaice.h>

#include "naaice_ap2.h"

#define FNCODE 3

int main(int argc, char* argv[]) {
  if (argc != 4) {
    printf("use: client remote-ip number-of-regions 'region-sizes'\n");
    return -1;
  }
  char* ptr;
  long int params_amount = strtol(argv[2], &ptr, 10);
  if (params_amount < 1 || params_amount > MAX_MRS) return -1;
  size_t param_sizes[MAX_MRS];
  char* token = strtok(argv[3], " ");
  param_sizes[0] = (size_t)atoi(token);
  for (long i = 1; i < params_amount && (token = strtok(NULL, " ")) != NULL; i++)
    param_sizes[i] = (size_t)atoi(token);
  char* params[MAX_MRS];
  for (long i = 0; i < params_amount; i++) {
    params[i] = (char*)malloc(param_sizes[i]);
    if (params[i] == NULL) return -1;
    memset(params[i], (int)(10 + i), param_sizes[i]);
  }
  struct naaice_communication_context* comm_ctx = NULL;
  if (naaice_init_communication_context(&comm_ctx, 0, param_sizes, params, (unsigned)params_amount,
                                        0, 0, FNCODE, NULL, argv[1], SERVER_CONNECTION_PORT))
    return -1;
  /* The connection loop upstream's header describes, instead of naaice_setup_connection. */
  comm_ctx->timeout = DEFAULT_TIMEOUT;
  comm_ctx->retry_count = DEFAULT_RETRY_COUNT;
  comm_ctx->max_inline_data = 0;
  while (comm_ctx->state < NAAICE_CONNECTED)
    if (naaice_poll_and_handle_connection_event(comm_ctx)) break;
  /* The state is atomic, as upstream's: another thread may watch it. */
  _Static_assert(_Generic(&comm_ctx->state, _Atomic(naaice_communication_state)* : 1, default : 0),
                 "the state is _Atomic");
  if (atomic_load(&comm_ctx->state) != NAAICE_CONNECTED) return -1;
  if (comm_ctx->state != NAAICE_CONNECTED) return -1;
  for (long i = 0; i < params_amount; i++)
    if (naaice_set_input_mr(comm_ctx, (unsigned)i)) return -1;
  if (naaice_set_output_mr(comm_ctx, (unsigned)params_amount - 1)) return -1;
  uint8_t imm_bytes[4] = {0, 0, 0, 0};
  if (naaice_register_mrs(comm_ctx) || naaice_set_bytes_to_send(comm_ctx, 0, 2) ||
      naaice_set_immediate(comm_ctx, imm_bytes))
    return -1;
  if (naaice_init_mrsp(comm_ctx)) return -1;
  while (comm_ctx->state < NAAICE_MRSP_DONE)
    if (naaice_poll_cq_nonblocking(comm_ctx)) return -1;
  if (naaice_do_data_transfer(comm_ctx)) return -1;
  printf("return code %d, %" PRIu32 " bytes back, %u calls\n", comm_ctx->naa_returncode,
         comm_ctx->bytes_received, comm_ctx->no_rpc_calls);
  /* Upstream's wire structs and helpers. */
  struct naaice_mr_advertisement adv;
  struct naaice_mr_advertisement_request req;
  struct naaice_mr_hdr hdr = {MSG_MR_AAR};
  struct naaice_mr_dynamic_hdr dyn = {1, {0, 0}};
  struct naaice_mr_error err = {0x01, {0, 0}};
  struct naaice_mr_request mreq = {4096};
  struct naaice_rpc_metadata meta = {0};
  adv.addr = htonll((uint64_t)(uintptr_t)params[0]);
  adv.rkey = htonl(1);
  adv.size = htonl((uint32_t)param_sizes[0]);
  req.mr_info = htonll((uint64_t)MRFLAG_INPUT << 56);
  req.mr_info_bytearray[0] |= 0;
  req.addr = ntohll(adv.addr);
  req.rkey = ntohl(adv.rkey);
  req.size = ntohl(adv.size);
  size_t mrsp_buffer = MR_SIZE_MRSP;
  printf("%zu %u %u %d %d %" PRIu64 " %d %d %d\n", mrsp_buffer, hdr.type, dyn.count, err.code,
         RX_DEPTH, mreq.size, TIMEOUT_RESOLVE_ROUTE, POLLING_TIMEOUT, (int)meta.return_addr);
  if (naaice_disconnect_and_cleanup(comm_ctx)) return -1;
  for (long i = 0; i < params_amount; i++) free(params[i]);

  /* AP2, as upstream's naaice_client_ap2.c. */
  struct naa_handle* handle = (naa_handle*)calloc(1, sizeof(struct naa_handle));
  struct naa_param_t in[] = {{calloc(1, 64), 64, false}};
  struct naa_param_t out[] = {{calloc(1, 64), 64, false}};
  if (!handle || naa_create(1, in, 1, out, 1, handle)) return -1;
  struct naa_status status;
  bool flag = false;
  if (naa_invoke(handle)) return -1;
  while (!flag)
    if (naa_test(handle, &flag, &status)) return -1;
  if (naa_invoke(handle) || naa_wait(handle, &status)) return -1;
  printf("Bytes received: %" PRIu64 ", RPC Return code: %d\n", status.bytes_received,
         status.naa_error);
  naa_finalize(handle);
  return status.naa_error == NAA_SUCCESS ? 0 : 1;
}
