/* @file
 * The NAAICE middleware API (AP2) over the low-level API (naaice.h): names and behaviour of
 * upstream's lib/naaice_ap2.h (naaice-greenhpc/naa-communication-library at f7b72fc).
 *
 *   naa_create   takes the first entry of NAA_SPEC for the function code that no other
 *                handle holds ("ADDRESS:PORT:FNCODE:INPUTS[,...]", PORT empty: 12345;
 *                NAA_LOCAL_IP the source address), connects, registers the inputs, then the
 *                outputs that are not inputs, marks them (and single-send ones) and does the
 *                MRSP
 *   naa_invoke   writes the inputs, the last with the function code
 *   naa_test     polls once: *flag = the call has finished; status filled
 *   naa_wait     waits for the NAA's next message (the call's result); status filled
 *   naa_finalize disconnects and frees, and gives the NAA_SPEC entry back (also after a
 *                failed naa_create)
 * Each returns 0, or -1 on failure. The NAA's return code is status->naa_error. */
#ifndef NAAICE_AP2_H
#define NAAICE_AP2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Beside this header, as upstream's: programs include "naaice_ap2.h" with apps/naa/host on
 * their include path alone. */
#include "naaice.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint32_t naa_function_code_t;

typedef struct naa_param_t {
  void* addr;
  size_t size;
  bool single_send; /* sent with the first call only (configuration data) */
} naa_param_t;

typedef struct naa_handle {
  naa_function_code_t function_code;
  struct naaice_communication_context* comm_ctx;
} naa_handle;

typedef struct naa_status {
  naaice_communication_state state;
  enum naa_error naa_error; /* the NAA's return code */
  uint64_t bytes_received;
} naa_status;

int naa_create(const naa_function_code_t function_code, naa_param_t* input_params,
               unsigned int input_amount, naa_param_t* output_params, unsigned int output_amount,
               naa_handle* handle);
int naa_invoke(naa_handle* handle);
int naa_test(naa_handle* handle, bool* flag, naa_status* status);
int naa_wait(naa_handle* handle, naa_status* status);
int naa_finalize(naa_handle* handle);

#ifdef __cplusplus
}
#endif

#endif
