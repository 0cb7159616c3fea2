/* Several threads of one process, each with NAAICE connections of its own (one thread per NAA
 * handle, as an OpenMP or progress-thread HPC code has them): upstream's library is safe there
 * (rdma-core's verbs, a QP and CQ per context); so must the host library be on every transport.
 * Each thread connects, does the MRSP and NAA_HOST_THREADS_CALLS calls of function 1 (upstream's
 * "add 1": the output-only region holds the call count afterwards) with the three polls in
 * turn; two threads go through AP2 (NAA_SPEC has two entries of the function code, one per
 * handle). Prints PASS when every result is right.
 *   naa_host_threads NAA_IP [THREADS]   (tests/integration/naa_host_run.sh runs it) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naaice.h"
#include "naaice_ap2.h"

enum { kSize = 4096, kCalls = 40 };
static const char* naa_ip;

static void* low_level(void* arg) {
  const long id = (long)arg;
  char* p[2] = {malloc(kSize), calloc(1, kSize)};
  size_t sz[2] = {kSize, kSize};
  memset(p[0], (int)id, kSize);
  struct naaice_communication_context* c = NULL;
  long bad = 1;
  if (naaice_init_communication_context(&c, 0, sz, p, 2, 0, NULL, 1, NULL, naa_ip,
                                        SERVER_CONNECTION_PORT))
    goto out;
  c->timeout = 30;
  if (naaice_setup_connection(c) || naaice_set_input_mr(c, 0) || naaice_set_output_mr(c, 1) ||
      naaice_register_mrs(c) || naaice_do_mrsp(c))
    goto out;
  for (int k = 1; k <= kCalls; k++) {
    if (naaice_init_data_transfer(c)) goto out;
    int rc = 0;
    while (rc == 0 && c->state < NAAICE_FINISHED)
      rc = k % 3 == 0   ? naaice_poll_cq_nonblocking(c)
           : k % 3 == 1 ? naaice_poll_cq_blocking(c)
                        : naaice_poll_cq_busy(c);
    if (rc || c->naa_returncode || (unsigned char)p[1][0] != k ||
        (unsigned char)p[1][kSize - 1] != k) {
      fprintf(stderr, "FAIL thread %ld call %d: rc %d, return code %d, output %d\n", id, k, rc,
              c->naa_returncode, (unsigned char)p[1][0]);
      goto out;
    }
  }
  bad = 0;
out:
  if (bad) fprintf(stderr, "FAIL thread %ld\n", id);
  if (c) naaice_disconnect_and_cleanup(c);
  free(p[0]);
  free(p[1]);
  return (void*)bad;
}

static void* ap2(void* arg) {
  const long id = (long)arg;
  unsigned char* in = malloc(kSize);
  unsigned char* out = calloc(1, kSize);
  memset(in, 7, kSize);
  naa_param_t ip[] = {{in, kSize, false}}, op[] = {{out, kSize, false}};
  naa_handle h = {0};
  long bad = 1;
  if (naa_create(1, ip, 1, op, 1, &h)) goto out;
  for (int k = 1; k <= kCalls; k++) {
    naa_status s;
    if (naa_invoke(&h) || naa_wait(&h, &s) || s.naa_error || out[0] != k) {
      fprintf(stderr, "FAIL AP2 thread %ld call %d: output %d\n", id, k, out[0]);
      goto out;
    }
  }
  bad = 0;
out:
  if (bad) fprintf(stderr, "FAIL AP2 thread %ld\n", id);
  if (h.comm_ctx) naa_finalize(&h);
  free(in);
  free(out);
  return (void*)bad;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s NAA_IP [THREADS]\n", argv[0]);
    return 2;
  }
  naa_ip = argv[1];
  const long n = argc > 2 ? atol(argv[2]) : 4;
  if (n < 1 || n > 64) return 2;
  char spec[128];
  snprintf(spec, sizeof spec, "%s::1:1,%s::1:1", naa_ip, naa_ip);  // two AP2 handles
  setenv("NAA_SPEC", spec, 1);
  pthread_t t[64];
  for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, i < 2 ? ap2 : low_level, (void*)i);
  long bad = 0;
  for (long i = 0; i < n; i++) {
    void* r;
    pthread_join(t[i], &r);
    bad += (long)r;
  }
  if (bad) {
    printf("FAIL naa_host_threads: %ld of %ld threads\n", bad, n);
    return 1;
  }
  printf("PASS naa_host_threads: %ld threads x %d calls\n", n, kCalls);
  return 0;
}
