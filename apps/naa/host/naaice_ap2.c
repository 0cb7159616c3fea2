/* @file
 * The NAAICE middleware API (naaice_ap2.h) on the low-level API. */
#define _DEFAULT_SOURCE /* strsep, strdup */
#include "apps/naa/host/naaice_ap2.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAA_SPEC_ENV "NAA_SPEC"
#define NAA_LOCAL_IP_ENV "NAA_LOCAL_IP"
#define NAA_MAX_PARAMS NAAICE_MAX_COUNT

struct naa_spec {
  char address[64];
  uint16_t port;
  naa_function_code_t fn_code;
  unsigned param_count;
  unsigned index; /* its place in NAA_SPEC */
};

/* The handle each NAA_SPEC entry serves (by its place; entries beyond the table are never
 * taken): upstream gives an entry to one handle at a time, so that two entries of one function
 * code serve two handles. Upstream never frees an entry; naa_finalize does here. */
#define NAA_MAX_SPEC 256
static const naa_handle* spec_user[NAA_MAX_SPEC];
/* Guards spec_user: handles may be created and finalized from threads of their own. */
static pthread_mutex_t spec_lock = PTHREAD_MUTEX_INITIALIZER;

/* The first entry of NAA_SPEC for `fn` that no handle holds: 0, or -1 (reason on stderr). */
static int find_naa(naa_function_code_t fn, struct naa_spec* out) {
  const char* env = getenv(NAA_SPEC_ENV);
  if (!env || !*env) {
    fprintf(stderr, "naaice: " NAA_SPEC_ENV " is not set: no NAA to use\n");
    return -1;
  }
  char* spec = strdup(env);
  if (!spec) return -1;
  int found = -1, taken = 0;
  char* rest = spec;
  for (unsigned index = 0; found && index < NAA_MAX_SPEC; index++) {
    char* chunk = strsep(&rest, ",");
    if (!chunk) break;
    struct naa_spec s;
    memset(&s, 0, sizeof s);
    s.index = index;
    s.port = SERVER_CONNECTION_PORT;
    unsigned field = 0;
    for (char* tok; (tok = strsep(&chunk, ":")) != NULL; field++) {
      if (field == 0) snprintf(s.address, sizeof s.address, "%s", tok);
      if (field == 1 && *tok) s.port = (uint16_t)strtoul(tok, NULL, 10);
      if (field == 2) s.fn_code = (naa_function_code_t)strtoul(tok, NULL, 10);
      if (field == 3) s.param_count = (unsigned)strtoul(tok, NULL, 10);
    }
    if (field == 4 && s.fn_code == fn) {
      if (spec_user[index]) {
        taken++;
        continue;
      }
      *out = s;
      found = 0;
    }
  }
  free(spec);
  if (found)
    fprintf(stderr, "naaice: no NAA for function code %u in " NAA_SPEC_ENV "%s\n", fn,
            taken ? " that another handle does not use" : "");
  return found;
}

int naa_create(const naa_function_code_t function_code, naa_param_t* input_params,
               unsigned int input_amount, naa_param_t* output_params, unsigned int output_amount,
               naa_handle* handle) {
  if (!handle || (input_amount && !input_params) || (output_amount && !output_params) ||
      input_amount + output_amount == 0 || input_amount + output_amount > NAA_MAX_PARAMS ||
      function_code < 1 || function_code > NAAICE_IMM_FNCODE_MASK) {
    fprintf(stderr, "naaice: naa_create: invalid arguments\n");
    return -1;
  }
  memset(handle, 0, sizeof *handle);
  struct naa_spec naa;
  pthread_mutex_lock(&spec_lock);
  if (find_naa(function_code, &naa)) {
    pthread_mutex_unlock(&spec_lock);
    return -1;
  }
  if (naa.param_count != input_amount) {
    pthread_mutex_unlock(&spec_lock);
    fprintf(stderr,
            "naaice: the NAA at %s (function code %u) takes %u inputs, the application gives %u\n",
            naa.address, function_code, naa.param_count, input_amount);
    return -1;
  }
  spec_user[naa.index] = handle; /* upstream: held from here on, whatever follows */
  pthread_mutex_unlock(&spec_lock);
  /* The regions: the inputs, then the outputs that are not inputs. */
  char* addrs[NAA_MAX_PARAMS];
  size_t sizes[NAA_MAX_PARAMS];
  unsigned n = 0;
  for (unsigned i = 0; i < input_amount; i++) {
    addrs[n] = input_params[i].addr;
    sizes[n++] = input_params[i].size;
  }
  for (unsigned o = 0; o < output_amount; o++) {
    int is_input = 0;
    for (unsigned i = 0; i < input_amount; i++)
      if (output_params[o].addr == input_params[i].addr) is_input = 1;
    if (is_input) continue;
    addrs[n] = output_params[o].addr;
    sizes[n++] = output_params[o].size;
  }
  struct naaice_communication_context* c = NULL;
  if (naaice_init_communication_context(&c, 0, sizes, addrs, n, 0, NULL, (uint8_t)function_code,
                                        getenv(NAA_LOCAL_IP_ENV), naa.address, naa.port))
    return -1;
  handle->function_code = function_code;
  handle->comm_ctx = c;
  uint8_t imm[3] = {0, 0, 0};
  if (naaice_set_immediate(c, imm) || naaice_setup_connection(c)) return -1;
  for (unsigned i = 0; i < input_amount; i++)
    for (unsigned r = 0; r < n; r++)
      if (c->mr_local_data[r].addr == (char*)input_params[i].addr) {
        if ((input_params[i].single_send && naaice_set_singlesend_mr(c, r)) ||
            naaice_set_input_mr(c, r))
          return -1;
        break;
      }
  for (unsigned o = 0; o < output_amount; o++)
    for (unsigned r = 0; r < n; r++)
      if (c->mr_local_data[r].addr == (char*)output_params[o].addr) {
        if ((output_params[o].single_send && naaice_set_singlesend_mr(c, r)) ||
            naaice_set_output_mr(c, r))
          return -1;
        break;
      }
  if (naaice_register_mrs(c)) return -1;
  return naaice_do_mrsp(c);
}

int naa_invoke(naa_handle* handle) {
  if (!handle || !handle->comm_ctx) return -1;
  return naaice_init_data_transfer(handle->comm_ctx);
}

static void fill_status(const naa_handle* handle, naa_status* status) {
  if (!status) return;
  status->state = handle->comm_ctx->state;
  status->naa_error = (enum naa_error)handle->comm_ctx->naa_returncode;
  status->bytes_received = handle->comm_ctx->bytes_received;
}

int naa_test(naa_handle* handle, bool* flag, naa_status* status) {
  if (!handle || !handle->comm_ctx || !flag) return -1;
  if (naaice_poll_cq_nonblocking(handle->comm_ctx)) return -1;
  *flag = handle->comm_ctx->state >= NAAICE_FINISHED;
  fill_status(handle, status);
  return 0;
}

int naa_wait(naa_handle* handle, naa_status* status) {
  if (!handle || !handle->comm_ctx) return -1;
  if (naaice_poll_cq_blocking(handle->comm_ctx)) return -1;
  fill_status(handle, status);
  return 0;
}

int naa_finalize(naa_handle* handle) {
  if (!handle) return -1;
  /* The NAA_SPEC entry goes also when naa_create failed after taking it. */
  pthread_mutex_lock(&spec_lock);
  for (unsigned i = 0; i < NAA_MAX_SPEC; i++)
    if (spec_user[i] == handle) spec_user[i] = NULL;
  pthread_mutex_unlock(&spec_lock);
  if (!handle->comm_ctx) return -1;
  const int rc = naaice_disconnect_and_cleanup(handle->comm_ctx);
  handle->comm_ctx = NULL;
  return rc;
}
