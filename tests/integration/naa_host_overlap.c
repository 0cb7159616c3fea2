/* A call runs on the NAA while the application computes: upstream's API starts a call
 * (naaice_init_data_transfer, naa_invoke) and lets the program do other work before it waits
 * (naaice_poll_cq_*, naa_wait); on rdma-core the NIC sends the call at once. Each call here is
 * started, the program sleeps SLEEP_MS without touching the library, then waits; the NAA's
 * kernel takes KERNEL_MS (roce-naa --kernel-delay-ms). A call that went out when it was started
 * is answered about max(SLEEP_MS, KERNEL_MS) after its start; one that waited for the program's
 * first wait, SLEEP_MS + KERNEL_MS. Prints PASS when every call took less than
 * max + (the smaller) / 2, the results being right.
 *   naa_host_overlap NAA_IP SLEEP_MS KERNEL_MS   (tests/integration/naa_host_run.sh runs it) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "naaice.h"
#include "naaice_ap2.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts)) {
  }
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s NAA_IP SLEEP_MS KERNEL_MS\n", argv[0]);
    return 2;
  }
  const long sleep = atol(argv[2]), kernel = atol(argv[3]);
  const double longer = (double)(sleep > kernel ? sleep : kernel) / 1e3;
  const double limit = longer + (double)(sleep > kernel ? kernel : sleep) / 2e3;
  int bad = 0;

  /* The low-level API. */
  char* p[2] = {malloc(256), calloc(1, 256)};
  size_t sz[2] = {256, 256};
  memset(p[0], 3, 256);
  struct naaice_communication_context* c = NULL;
  if (naaice_init_communication_context(&c, 0, sz, p, 2, 0, NULL, 1, NULL, argv[1],
                                        SERVER_CONNECTION_PORT) ||
      naaice_setup_connection(c) || naaice_set_input_mr(c, 0) || naaice_set_output_mr(c, 1) ||
      naaice_register_mrs(c) || naaice_do_mrsp(c)) {
    printf("FAIL naa_host_overlap: no connection\n");
    return 1;
  }
  c->timeout = 30;
  for (int k = 1; k <= 2; k++) {
    const double t0 = now_s();
    if (naaice_init_data_transfer(c)) return 1;
    sleep_ms(sleep);
    int rc = 0;
    while (rc == 0 && c->state < NAAICE_FINISHED) rc = naaice_poll_cq_blocking(c);
    const double took = now_s() - t0;
    printf("low-level call %d: %.3f s (limit %.3f s), output %d\n", k, took, limit, p[1][0]);
    if (rc || c->naa_returncode || p[1][0] != k || took > limit) bad++;
  }
  naaice_disconnect_and_cleanup(c);

  /* AP2: naa_invoke, other work, naa_wait. */
  unsigned char in[64], out[64];
  memset(in, 1, sizeof in);
  memset(out, 0, sizeof out);
  naa_param_t ip[] = {{in, sizeof in, false}}, op[] = {{out, sizeof out, false}};
  naa_handle h = {0};
  char spec[128];
  snprintf(spec, sizeof spec, "%s::1:1", argv[1]);
  setenv("NAA_SPEC", spec, 1);
  if (naa_create(1, ip, 1, op, 1, &h)) {
    printf("FAIL naa_host_overlap: naa_create\n");
    return 1;
  }
  h.comm_ctx->timeout = 30;
  for (int k = 1; k <= 2; k++) {
    const double t0 = now_s();
    if (naa_invoke(&h)) return 1;
    sleep_ms(sleep);
    naa_status s;
    const int rc = naa_wait(&h, &s);
    const double took = now_s() - t0;
    printf("AP2 call %d: %.3f s (limit %.3f s), output %d\n", k, took, limit, out[0]);
    if (rc || s.naa_error || out[0] != k || took > limit) bad++;
  }
  naa_finalize(&h);
  if (bad) {
    printf("FAIL naa_host_overlap: %d calls did not overlap the program's work\n", bad);
    return 1;
  }
  printf("PASS naa_host_overlap\n");
  return 0;
}
