/* @file
 * naaice_client: offloads every kernel of an NAA through the NAAICE host API and checks each
 * result against a reference computed here; or provokes one MRSP error or application error
 * and checks that the NAA reports exactly it. The same source runs on rdma-core
 * (naaice_client_ibverbs) and on the appliance's stack (naaice_client_roce, _attached).
 *
 *   naaice_client [-p PORT] [-k KERNEL[=CODE]|all|upstream] [-s BYTES] [-n CALLS] [-H HOSTS]
 *                 [-M NAA_MIB] [-e ERROR] [-U] [-l LOCAL_IP] [-R RETRIES] [-T SECONDS]
 *                 [--attach SOCKET [--attach-port NAME]] NAA_IP
 *   KERNEL: the appliance's (roce-naa: increment, vector_add, reduce_sum, crc32, matmul; "all")
 *           or upstream's software NAA's (examples/naaice_server: add1, add2, noop; "upstream"),
 *           called under its function code (1-5; 1-3), or CODE
 *   -U: the NAA is upstream's software NAA: its kernels by default, and its answers to errors
 *       (it ends the connection after an MRSP error; an unknown function code gets no answer)
 *   -T: seconds the MRSP and each call may take (60)
 *   -R: connect again after a refused connection, at most RETRIES times, 0.5 s apart
 *   --attach: naaice_client_roce attached to a running roced (its port; no DPDK here) instead
 *             of a port of its own (NAAICE_ROCE)
 *   ERROR: too-many-regions, invalid-address, not-enough-memory (the requested NAA addresses
 *          against -M), naa-out-of-memory (an internal region of 4 GiB - 4 KiB),
 *          unknown-function, bad-param-count, bad-param-size;
 *          foreign-rkey: host B writes host A's NAA region with A's rkey over B's connection (the
 *            NAA must refuse it with a remote access error, and A's data stay A's);
 *          slow-kernel: while host A's call runs (roce-naa --kernel-delay-ms 3000
 *            --kernel-queue 1), host B connects, gets its advertisement and is answered
 *            "busy" (0x01) at once
 * Regions carry upstream's flags: inputs (written each call; single-send ones on the first),
 * outputs (written back); the adding kernels are checked against a model of the NAA's copies. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/naa/host/naaice.h"
#include "apps/naa/host/naaice_transport.h"

/* The kernels: the appliance's (roce-naa) and upstream's software NAA's (examples/naaice_server
 * at f7b72fc: 1 adds 1 to every byte of every region, 2 adds 2, 3 leaves them). Each is called
 * under the function code given here (-k NAME=CODE overrides it). */
enum {
  K_INCREMENT = 1,
  K_VECTOR_ADD,
  K_REDUCE_SUM,
  K_CRC32,
  K_MATMUL,
  K_ADD1, /* upstream's software NAA */
  K_ADD2,
  K_NOOP,
  K_COUNT
};
static const char* kernel_names[K_COUNT] = {
    "", "increment", "vector_add", "reduce_sum", "crc32", "matmul", "add1", "add2", "noop"};
/* The NAA's default table (roce-naa, docs/naa.md): upstream's 1..3, then ours from 4. */
static int kernel_codes[K_COUNT] = {0, 1, 7, 8, 4, 5, 1, 2, 3};
/* What the NAA adds to every byte of every one of its regions (the model of upstream's software
 * NAA and of the appliance's increment), or -1 for a kernel with a reference of its own. */
static int kernel_adds(int k) {
  return k == K_INCREMENT || k == K_ADD1 ? 1 : k == K_ADD2 ? 2 : k == K_NOOP ? 0 : -1;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 16);
}

static uint32_t crc32_ref(const unsigned char* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int b = 0; b < 8; b++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return ~c;
}

enum { IN = 1, OUT = 2, ONCE = 4 }; /* a region's role: input, output, single send */

/* One host's call: its parameters, the expected result, its context. */
struct job {
  int kernel;
  int fncode; /* the function code called (the kernel's, unless an error is provoked) */
  unsigned nparams;
  char* params[40];
  size_t sizes[40];
  int role[40];
  unsigned char* expect[40]; /* expected content per parameter after the call (NULL: any) */
  unsigned char* naa[40];    /* the model of the NAA's copy of each region (adding kernels) */
  size_t send[40];           /* bytes written per input this call */
  unsigned calls;            /* calls made on this connection */
  struct naaice_communication_context* ctx;
};

/* New inputs and the expected outputs of the next call. */
static void fill(struct job* j) {
  for (unsigned i = 0; i < j->nparams; i++) {
    j->send[i] = j->sizes[i];
    if (!(j->role[i] & IN) || ((j->role[i] & ONCE) && j->calls > 0)) continue;
    for (size_t b = 0; b < j->sizes[i]; b++) j->params[i][b] = (char)rnd();
  }
  const int add = kernel_adds(j->kernel);
  if (add >= 0) {
    /* The NAA receives the inputs sent (single-send ones on the first call only), adds to every
     * byte of all its regions (an output-only region keeps the NAA's value from the call
     * before, zero at first), and writes the outputs back. */
    for (unsigned i = 0; i < j->nparams; i++) {
      const int sent = (j->role[i] & IN) && !((j->role[i] & ONCE) && j->calls > 0);
      if (sent) memcpy(j->naa[i], j->params[i], j->send[i]);
      for (size_t b = 0; b < j->sizes[i]; b++) j->naa[i][b] = (unsigned char)(j->naa[i][b] + add);
      if (j->expect[i]) memcpy(j->expect[i], j->naa[i], j->sizes[i]);
    }
    return;
  }
  uint32_t* dims;
  switch (j->kernel) {
    case K_VECTOR_ADD: {
      const uint32_t *a = (uint32_t*)j->params[0], *b = (uint32_t*)j->params[1];
      uint32_t* e = (uint32_t*)j->expect[2];
      for (unsigned i = 0; i < j->sizes[0] / 4; i++) e[i] = a[i] + b[i];
      break;
    }
    case K_REDUCE_SUM: {
      const uint32_t* a = (uint32_t*)j->params[0];
      uint64_t s = 0;
      for (unsigned i = 0; i < j->sizes[0] / 4; i++) s += a[i];
      memcpy(j->expect[1], &s, 8);
      break;
    }
    case K_CRC32: {
      const uint32_t c = crc32_ref((unsigned char*)j->params[0], j->sizes[0]);
      memcpy(j->expect[1], &c, 4);
      break;
    }
    case K_MATMUL: {
      dims = (uint32_t*)j->params[0];
      const uint32_t m = 16, n = 16, k = (uint32_t)(j->sizes[1] / 4 / 16);
      dims[0] = m;
      dims[1] = k;
      dims[2] = n;
      const uint32_t *a = (uint32_t*)j->params[1], *b = (uint32_t*)j->params[2];
      uint32_t* e = (uint32_t*)j->expect[3];
      for (uint32_t r = 0; r < m; r++)
        for (uint32_t c = 0; c < n; c++) {
          uint32_t acc = 0;
          for (uint32_t x = 0; x < k; x++) acc += a[r * k + x] * b[x * n + c];
          e[r * n + c] = acc;
        }
      break;
    }
  }
}

static int check(struct job* j, unsigned host, unsigned call) {
  for (unsigned i = 0; i < j->nparams; i++) {
    if (!j->expect[i]) continue;
    if (memcmp(j->expect[i], j->params[i], j->sizes[i]) != 0) {
      unsigned b = 0;
      while (((unsigned char*)j->params[i])[b] == j->expect[i][b]) b++;
      fprintf(stderr,
              "FAIL %s host %u call %u: parameter %u differs at byte %u (0x%02x, want 0x%02x)\n",
              kernel_names[j->kernel], host, call, i, b, ((unsigned char*)j->params[i])[b],
              j->expect[i][b]);
      return -1;
    }
  }
  return 0;
}

static void setup_job(struct job* j, int kernel, unsigned size) {
  memset(j, 0, sizeof *j);
  j->kernel = kernel;
  j->fncode = kernel_codes[kernel];
  size = (size + 63) / 64 * 64;
  switch (kernel) {
    case K_INCREMENT:
      j->nparams = 3;
      j->sizes[0] = size;
      j->sizes[1] = size / 2 + 1;
      j->sizes[2] = 1;
      j->role[0] = j->role[1] = j->role[2] = IN | OUT;
      break;
    case K_ADD1:
    case K_ADD2:
    case K_NOOP:
      /* Every role: a single-send input, an input and output, an output only, an input. */
      j->nparams = 4;
      j->sizes[0] = 64;
      j->sizes[1] = size;
      j->sizes[2] = size / 2 + 1;
      j->sizes[3] = 8;
      j->role[0] = IN | ONCE;
      j->role[1] = IN | OUT;
      j->role[2] = OUT;
      j->role[3] = IN;
      break;
    case K_VECTOR_ADD:
      j->nparams = 3;
      j->sizes[0] = j->sizes[1] = j->sizes[2] = size;
      j->role[0] = j->role[1] = IN;
      j->role[2] = OUT;
      break;
    case K_REDUCE_SUM:
      j->nparams = 2;
      j->sizes[0] = size;
      j->sizes[1] = 8;
      j->role[0] = IN;
      j->role[1] = OUT;
      break;
    case K_CRC32:
      j->nparams = 2;
      j->sizes[0] = size + 3;
      j->sizes[1] = 4;
      j->role[0] = IN;
      j->role[1] = OUT;
      break;
    case K_MATMUL:
      j->nparams = 4;
      j->sizes[0] = 12;
      j->sizes[1] = j->sizes[2] = size; /* 16 x k and k x 16 */
      j->sizes[3] = 16 * 16 * 4;
      j->role[0] = j->role[1] = j->role[2] = IN;
      j->role[3] = OUT;
      break;
  }
  for (unsigned i = 0; i < j->nparams; i++) {
    j->params[i] = calloc(1, j->sizes[i]);
    j->naa[i] = calloc(1, j->sizes[i]);
    j->expect[i] = (j->role[i] & OUT) ? calloc(1, j->sizes[i]) : NULL;
  }
}

static void free_job(struct job* j) {
  for (unsigned i = 0; i < j->nparams; i++) {
    free(j->params[i]);
    free(j->expect[i]);
    free(j->naa[i]);
  }
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char* local_ip = NULL;  /* -l: the source address (rdma-core) */
static unsigned connect_retries = 0; /* -R: connection attempts after a refused one */
static double call_timeout = 60;     /* -T: seconds for the MRSP and each call */

/* Context, connection, roles, registration; `naa_addrs`: the NAA addresses to request (NULL:
 * upstream's sequential ones from 0). */
static int open_job_at(struct job* j, const char* ip, uint16_t port, const uint64_t* naa_addrs);
/* open_job_at, again after a refused connection (an NAA whose connections are all taken until
 * its workers notice the last disconnects) at most -R times, 0.5 s apart. */
static int open_job_retrying(struct job* j, const char* ip, uint16_t port,
                             const uint64_t* naa_addrs) {
  for (unsigned attempt = 0;; attempt++) {
    if (open_job_at(j, ip, port, naa_addrs) == 0) return 0;
    if (attempt >= connect_retries || !j->ctx || j->ctx->state != NAAICE_ERROR) return -1;
    naaice_disconnect_and_cleanup(j->ctx);
    j->ctx = NULL;
    const struct timespec ts = {0, 500000000};
    nanosleep(&ts, NULL);
  }
}

static int open_job_at(struct job* j, const char* ip, uint16_t port, const uint64_t* naa_addrs) {
  if (naaice_init_communication_context(&j->ctx, 0, j->sizes, j->params, j->nparams, 0, NULL,
                                        (uint8_t)j->fncode, local_ip, ip, port))
    return -1;
  if (naa_addrs) {
    uint64_t locals[40], remotes[40];
    for (unsigned i = 0; i < j->nparams; i++) {
      locals[i] = (uintptr_t)j->params[i];
      remotes[i] = naa_addrs[i];
    }
    if (naaice_set_parameter_mrs(j->ctx, j->nparams, locals, remotes, j->sizes)) return -1;
  }
  for (unsigned i = 0; i < j->nparams; i++) {
    if ((j->role[i] & ONCE) && naaice_set_singlesend_mr(j->ctx, i)) return -1;
    if ((j->role[i] & IN) && naaice_set_input_mr(j->ctx, i)) return -1;
    if ((j->role[i] & OUT) && naaice_set_output_mr(j->ctx, i)) return -1;
  }
  j->ctx->timeout = call_timeout;
  return naaice_setup_connection(j->ctx) || naaice_register_mrs(j->ctx) ? -1 : 0;
}
static int open_job(struct job* j, const char* ip, uint16_t port) {
  return open_job_retrying(j, ip, port, NULL);
}

/* A call started: inputs written. */
static int start_call(struct job* j) {
  fill(j);
  if (naaice_init_data_transfer(j->ctx)) return -1;
  j->calls++;
  return 0;
}

/* Every kernel of `set` (-1: the appliance's, -2: upstream's; or one), `hosts` connections at
 * once, `calls` calls each. */
/* After a failure: every host disconnects (the NAA frees what it holds for them); 1. */
static int close_all(struct job* jobs, unsigned hosts) {
  for (unsigned h = 0; h < hosts; h++) {
    if (jobs[h].ctx) naaice_disconnect_and_cleanup(jobs[h].ctx);
    jobs[h].ctx = NULL;
    free_job(&jobs[h]);
  }
  free(jobs);
  return 1;
}

static int run_kernels(const char* ip, uint16_t port, int only, unsigned size, unsigned calls,
                       unsigned hosts) {
  struct job* jobs = calloc(hosts, sizeof *jobs);
  for (int k = K_INCREMENT; k < K_COUNT; k++) {
    if (only == -1 && k > K_MATMUL) continue;
    if (only == -2 && k < K_ADD1) continue;
    if (only > 0 && k != only) continue;
    for (unsigned h = 0; h < hosts; h++) {
      setup_job(&jobs[h], k, size);
      if (open_job(&jobs[h], ip, port)) {
        fprintf(stderr, "FAIL %s: host %u cannot connect\n", kernel_names[k], h);
        return close_all(jobs, h + 1);
      }
    }
    for (unsigned h = 0; h < hosts; h++)
      if (naaice_init_mrsp(jobs[h].ctx)) return close_all(jobs, hosts);
    for (unsigned h = 0; h < hosts; h++) {
      const double end = mono_s() + call_timeout;
      while (jobs[h].ctx->state < NAAICE_MRSP_DONE)
        if (naaice_poll_cq_nonblocking(jobs[h].ctx) || mono_s() > end) {
          fprintf(stderr, "FAIL %s: host %u MRSP (%s)\n", kernel_names[k], h,
                  mono_s() > end ? "timed out" : "failed");
          return close_all(jobs, hosts);
        }
    }
    for (unsigned c = 0; c < calls; c++) {
      for (unsigned h = 0; h < hosts; h++)
        if (start_call(&jobs[h])) return close_all(jobs, hosts);
      /* All hosts' calls are in flight at once; wait for each (the three ways upstream's API
       * offers, in turn). */
      for (unsigned h = 0; h < hosts; h++) {
        struct naaice_communication_context* x = jobs[h].ctx;
        int rc = 0;
        const unsigned way = (c + h) % 3;
        const double end = mono_s() + call_timeout;
        while (rc == 0 && x->state < NAAICE_FINISHED) {
          rc = way == 0   ? naaice_poll_cq_nonblocking(x)
               : way == 1 ? naaice_poll_cq_blocking(x)
                          : naaice_poll_cq_busy(x);
          if (rc == 0 && x->state < NAAICE_FINISHED && mono_s() > end) {
            fprintf(stderr, "naaice_client: timed out waiting for the result\n");
            rc = -1;
          }
        }
        if (rc || x->naa_returncode) {
          fprintf(stderr, "FAIL %s host %u call %u: %s, return code 0x%02x (%s)\n", kernel_names[k],
                  h, c, naaice_state_string(x->state), x->naa_returncode,
                  naaice_rpc_status_string(x->naa_returncode));
          return close_all(jobs, hosts);
        }
        if (check(&jobs[h], h, c)) return close_all(jobs, hosts);
      }
    }
    for (unsigned h = 0; h < hosts; h++) {
      naaice_disconnect_and_cleanup(jobs[h].ctx);
      free_job(&jobs[h]);
    }
    printf("PASS %s (function code %d): %u hosts x %u calls, results match the reference\n",
           kernel_names[k], kernel_codes[k], hosts, calls);
    fflush(stdout);
  }
  free(jobs);
  return 0;
}

/* One error provoked; 0 when the NAA reports exactly it. `upstream`: the NAA is upstream's
 * software NAA, which answers differently (see main's comment). */
static int provoke(const char* ip, uint16_t port, const char* what, unsigned naa_mib,
                   int upstream) {
  struct job j;
  unsigned want_mrsp = 0, want_status = 0;
  int want_silence = 0; /* upstream: the NAA drops the connection without an answer */
  uint64_t naa_addrs[40] = {0};
  int set_addrs = 0;
  size_t huge = 0; /* an internal region of this size */
  memset(&j, 0, sizeof j);
  const uint64_t mem = (uint64_t)naa_mib << 20;
  if (!strcmp(what, "too-many-regions")) {
    /* 33 regions: the NAA handles 32. */
    j.kernel = K_INCREMENT;
    j.fncode = kernel_codes[K_INCREMENT];
    j.nparams = 33;
    for (unsigned i = 0; i < j.nparams; i++) {
      j.sizes[i] = 64;
      j.params[i] = calloc(1, 64);
      j.naa[i] = calloc(1, 64);
      j.role[i] = IN | OUT;
    }
    want_mrsp = NAAICE_MRSP_TOO_MANY_REGIONS;
  } else if (!strcmp(what, "invalid-address") || !strcmp(what, "not-enough-memory")) {
    setup_job(&j, K_VECTOR_ADD, 4096);
    const int invalid = !strcmp(what, "invalid-address");
    want_mrsp = invalid ? NAAICE_MRSP_INVALID_ADDRESS : NAAICE_MRSP_NOT_ENOUGH_MEMORY;
    naa_addrs[1] = invalid ? mem + 4096 /* beyond the memory */ : mem - 1024 /* runs over */;
    naa_addrs[2] = 8192;
    set_addrs = 1;
  } else if (!strcmp(what, "naa-out-of-memory")) {
    /* An internal region the NAA cannot allocate (4 GiB - 4 KiB): upstream's software NAA
     * answers 0x01. */
    setup_job(&j, upstream ? K_ADD1 : K_INCREMENT, 256);
    huge = 0xfffff000u;
    want_mrsp = NAAICE_MRSP_NOT_ENOUGH_MEMORY;
  } else if (!strcmp(what, "unknown-function")) {
    setup_job(&j, upstream ? K_ADD1 : K_VECTOR_ADD, 256);
    j.fncode = 0x77;
    want_status = 0x10;
    want_silence = upstream;
  } else if (!strcmp(what, "bad-param-count")) {
    setup_job(&j, K_REDUCE_SUM, 256);
    j.fncode = kernel_codes[K_VECTOR_ADD]; /* two parameters for a three-parameter kernel */
    want_status = 0x12;
  } else if (!strcmp(what, "bad-param-size")) {
    setup_job(&j, K_REDUCE_SUM, 256);
    j.sizes[1] = 4; /* the sum needs 8 bytes */
    want_status = 0x13;
  } else {
    fprintf(stderr, "unknown error to provoke: %s\n", what);
    return 2;
  }
  int result = 1;
  if (open_job_retrying(&j, ip, port, set_addrs ? naa_addrs : NULL)) goto out;
  if (huge) {
    uint64_t a = 0x100000;
    size_t sz = huge;
    if (naaice_set_internal_mrs(j.ctx, 1, &a, &sz)) goto out;
  }
  if (want_silence) j.ctx->timeout = 10;
  int rc = naaice_do_mrsp(j.ctx);
  if (upstream && want_mrsp == NAAICE_MRSP_TOO_MANY_REGIONS) {
    /* Upstream's NAA receives requests into 768 bytes (32 entries of 24, no room for the
     * header): 33 regions do not fit, its receive fails and so does our SEND. */
    if (rc == 0 || j.ctx->mrsp_error) {
      fprintf(stderr, "FAIL %s: the request %s\n", what,
              rc == 0 ? "succeeded" : "was answered with an MRSP error");
      goto out;
    }
    printf(
        "PASS %s: upstream's NAA cannot receive a request of 33 regions (no answer, our "
        "SEND failed)\n",
        what);
    result = 0;
    goto out;
  }
  if (want_mrsp) {
    if (rc == 0 || j.ctx->mrsp_error != want_mrsp) {
      fprintf(stderr, "FAIL %s: MRSP error 0x%02x, expected 0x%02x\n", what, j.ctx->mrsp_error,
              want_mrsp);
      goto out;
    }
    printf("PASS %s: the NAA answered MRSP error 0x%02x (%s)\n", what, j.ctx->mrsp_error,
           naaice_mrsp_error_string(j.ctx->mrsp_error));
    /* The connection survives an MRSP error at the appliance's NAA: a valid request now
     * succeeds (upstream's NAA ends the connection after its error). */
    if (!upstream && want_mrsp != NAAICE_MRSP_TOO_MANY_REGIONS) {
      if (set_addrs) j.ctx->mr_peer_data[1].addr = 0x10000; /* the request, within bounds */
      if (huge && naaice_set_internal_mrs(j.ctx, 0, NULL, NULL)) goto out;
      if (naaice_do_mrsp(j.ctx)) {
        fprintf(stderr, "FAIL %s: a valid MRSP after the error failed\n", what);
        goto out;
      }
      if (start_call(&j) || naaice_poll_cq_busy(j.ctx) || j.ctx->naa_returncode ||
          check(&j, 0, 0)) {
        fprintf(stderr, "FAIL %s: the call after the retried MRSP failed\n", what);
        goto out;
      }
      printf("PASS %s: retried MRSP and call succeeded\n", what);
    }
  } else {
    if (rc) goto out;
    if (start_call(&j)) goto out;
    rc = naaice_poll_cq_busy(j.ctx);
    if (want_silence) {
      if (rc == 0) {
        fprintf(stderr, "FAIL %s: the NAA answered (0x%02x)\n", what, j.ctx->naa_returncode);
        goto out;
      }
      printf("PASS %s: upstream's NAA gave no answer to function code 0x%02x (%s)\n", what,
             j.fncode, naaice_state_string(j.ctx->state));
    } else {
      if (rc || j.ctx->naa_returncode != want_status) {
        fprintf(stderr, "FAIL %s: return code 0x%02x, expected 0x%02x\n", what,
                j.ctx->naa_returncode, want_status);
        goto out;
      }
      printf("PASS %s: the NAA answered return code 0x%02x (%s)\n", what, j.ctx->naa_returncode,
             naaice_rpc_status_string(j.ctx->naa_returncode));
    }
  }
  result = 0;
out:
  if (upstream && want_mrsp && j.ctx) {
    /* Upstream's NAA ends the connection's worker after a failed MRSP; a DREQ that reaches it
     * meanwhile races with that worker (its server can crash): let the worker finish first. */
    const struct timespec ts = {2, 0};
    nanosleep(&ts, NULL);
  }
  /* Always disconnect: the NAA frees this host's memory at once. */
  if (j.ctx) naaice_disconnect_and_cleanup(j.ctx);
  free_job(&j);
  return result;
}

/* A call without new data: only a zero-length WRITE_WITH_IMM(fncode | 0x80), so that the NAA
 * computes on what its copies of the regions hold now. 0 and the result in the outputs, or
 * -1. */
static int call_on_naa_data(struct job* j) {
  struct naaice_communication_context* c = j->ctx;
  struct naaice_transport* t = c->transport;
  const unsigned last = c->no_local_mrs - 1;
  if (c->recv_posted == 0 && naaice_post_recv_data(c)) return -1;
  c->naa_returncode = 0;
  c->state = NAAICE_CALCULATING;
  if (t->post_send(t->priv, NAAICE_OP_WRITE_IMM, 2, NULL, 0, 0, c->mr_peer_data[last].addr,
                   c->mr_peer_data[last].rkey, (uint32_t)j->fncode | NAAICE_IMM_START_RPC,
                   NAAICE_SEND_SIGNALED | NAAICE_SEND_SOLICITED))
    return -1;
  if (naaice_poll_cq_busy(c)) return -1;
  return c->state == NAAICE_FINISHED && c->naa_returncode == 0 ? 0 : -1;
}

/* The work completion of `wr_id` on `j`'s connection: 1 success, 0 failure (its status in
 * `status`), -1 none within `seconds`. */
static int wait_wc(struct job* j, uint64_t wr_id, double seconds, char* status, size_t n) {
  struct naaice_transport* t = j->ctx->transport;
  for (long spins = 0; spins < (long)(seconds * 200000); spins++) {
    struct naaice_wc wc;
    const int k = t->poll(t->priv, &wc, 1);
    if (k < 0) {
      snprintf(status, n, "connection broken: %s", t->error(t->priv));
      return 0;
    }
    if (k == 1 && wc.wr_id == wr_id) {
      snprintf(status, n, "%s", wc.ok ? "success" : wc.status);
      return wc.ok ? 1 : 0;
    }
  }
  return -1;
}

/* Host B aims an RDMA WRITE at host A's NAA region with A's rkey, over B's own connection. */
static int foreign_rkey(const char* ip, uint16_t port) {
  struct job a, b;
  setup_job(&a, K_VECTOR_ADD, 4096);
  setup_job(&b, K_VECTOR_ADD, 4096);
  int result = 1;
  if (open_job(&a, ip, port) || open_job(&b, ip, port) || naaice_do_mrsp(a.ctx) ||
      naaice_do_mrsp(b.ctx)) {
    fprintf(stderr, "FAIL foreign-rkey: cannot set up hosts A and B\n");
    goto out;
  }
  /* A's call: the NAA holds A's parameters. */
  if (start_call(&a) || naaice_poll_cq_busy(a.ctx) || a.ctx->naa_returncode || check(&a, 0, 0)) {
    fprintf(stderr, "FAIL foreign-rkey: host A's first call\n");
    goto out;
  }
  printf("host A: region 1 at NAA address 0x%llx, rkey 0x%x; host B's own rkey 0x%x\n",
         (unsigned long long)a.ctx->mr_peer_data[1].addr, a.ctx->mr_peer_data[1].rkey,
         b.ctx->mr_peer_data[1].rkey);
  memset(b.params[0], 0xEE, b.sizes[0]);
  struct naaice_transport* t = b.ctx->transport;
  if (t->post_send(t->priv, NAAICE_OP_WRITE, 77, b.params[0], b.sizes[0],
                   b.ctx->mr_local_data[0].lkey, a.ctx->mr_peer_data[1].addr,
                   a.ctx->mr_peer_data[1].rkey, 0, NAAICE_SEND_SIGNALED)) {
    fprintf(stderr, "FAIL foreign-rkey: cannot post B's write\n");
    goto out;
  }
  char st[96];
  const int w = wait_wc(&b, 77, 10, st, sizeof st);
  if (w != 0) {
    fprintf(stderr, "FAIL foreign-rkey: host B's WRITE with host A's rkey: %s\n",
            w > 0 ? "completed: B wrote A's memory" : "no completion");
    goto out;
  }
  printf("PASS foreign-rkey: host B's WRITE with host A's rkey failed (%s)\n", st);
  /* A's region at the NAA still holds A's data: a call on the NAA's copies (no new data)
   * gives A's sum, not 0xEEEEEEEE + b. */
  if (call_on_naa_data(&a) || check(&a, 0, 1)) {
    fprintf(stderr, "FAIL foreign-rkey: host A's data at the NAA changed, or its call failed\n");
    goto out;
  }
  printf("PASS foreign-rkey: host A's NAA memory unchanged, its next call correct\n");
  result = 0;
out:
  if (a.ctx) naaice_disconnect_and_cleanup(a.ctx);
  if (b.ctx) naaice_disconnect_and_cleanup(b.ctx);
  free_job(&a);
  free_job(&b);
  return result;
}

/* While host A's call runs on the NAA (a slow kernel), host B is served: connection, MRSP,
 * and its call is answered 0x01 at once (the kernel queue of one is A's). */
static int slow_kernel(const char* ip, uint16_t port) {
  struct job a, b;
  setup_job(&a, K_VECTOR_ADD, 4096);
  setup_job(&b, K_VECTOR_ADD, 4096);
  int result = 1;
  if (open_job(&a, ip, port) || naaice_do_mrsp(a.ctx)) {
    fprintf(stderr, "FAIL slow-kernel: cannot set up host A\n");
    goto out;
  }
  const double t0 = mono_s();
  if (start_call(&a)) goto out;
  /* A's data are on the way; its answer comes when the kernel is done. */
  while (a.ctx->state < NAAICE_DATA_RECEIVING && mono_s() - t0 < 5)
    if (naaice_poll_cq_nonblocking(a.ctx)) goto out;
  printf("host A: call started\n");
  fflush(stdout);
  if (open_job(&b, ip, port) || naaice_do_mrsp(b.ctx)) {
    fprintf(stderr, "FAIL slow-kernel: host B not served while A's kernel ran\n");
    goto out;
  }
  const double tb = mono_s() - t0;
  /* A's kernel takes 3 s (--kernel-delay-ms 3000): B within half of it was served while it
   * ran; an NAA that runs kernels on its poll loop serves B only when A's call is over. */
  if (tb >= 1.5) {
    fprintf(stderr, "FAIL slow-kernel: host B was served only %.1f ms into A's 3 s call\n",
            tb * 1e3);
    goto out;
  }
  const int rc = start_call(&b) || naaice_poll_cq_busy(b.ctx);
  const double tc = mono_s() - t0;
  if (rc || b.ctx->naa_returncode != SOCKET_UNAVAIL) {
    fprintf(stderr, "FAIL slow-kernel: host B's call got return code 0x%02x, not 0x01 (busy)\n",
            b.ctx->naa_returncode);
    goto out;
  }
  printf(
      "PASS slow-kernel: host B connected and advertised %.1f ms into A's call, its call "
      "answered 0x01 (%s) at %.1f ms\n",
      tb * 1e3, naaice_rpc_status_string(b.ctx->naa_returncode), tc * 1e3);
  while (a.ctx->state < NAAICE_FINISHED)
    if (naaice_poll_cq_nonblocking(a.ctx)) goto out;
  if (check(&a, 0, 0)) goto out;
  printf("PASS slow-kernel: host A's call done after %.0f ms, result correct\n",
         (mono_s() - t0) * 1e3);
  result = 0;
out:
  if (a.ctx) naaice_disconnect_and_cleanup(a.ctx);
  if (b.ctx) naaice_disconnect_and_cleanup(b.ctx);
  free_job(&a);
  free_job(&b);
  return result;
}

int main(int argc, char** argv) {
  unsigned port = NAAICE_DEFAULT_PORT, size = 4096, calls = 3, hosts = 1, mib = 64;
  int only = -1, upstream = 0;
  const char* error = NULL;
  int opt;
  static const struct option longs[] = {{"attach", required_argument, NULL, 'A'},
                                        {"attach-port", required_argument, NULL, 'P'},
                                        {"upstream", no_argument, NULL, 'U'},
                                        {NULL, 0, NULL, 0}};
  while ((opt = getopt_long(argc, argv, "p:k:s:n:H:M:e:l:R:T:Uh", longs, NULL)) != -1) {
    switch (opt) {
      case 'A': /* the appliance's transport: attached to this roced (no DPDK port here) */
        setenv("NAAICE_ROCE_ATTACH", optarg, 1);
        break;
      case 'P':
        setenv("NAAICE_ROCE_ATTACH_PORT", optarg, 1);
        break;
      case 'p':
        port = (unsigned)atoi(optarg);
        break;
      case 'U':
        upstream = 1;
        if (only == -1) only = -2;
        break;
      case 'l':
        local_ip = optarg;
        break;
      case 'R':
        connect_retries = (unsigned)atoi(optarg);
        break;
      case 'T':
        call_timeout = atof(optarg);
        break;
      case 'k': {
        /* NAME or NAME=CODE (the function code the NAA knows it by); all (the appliance's),
         * upstream (upstream's software NAA's). */
        char name[32];
        snprintf(name, sizeof name, "%s", optarg);
        char* eq = strchr(name, '=');
        if (eq) *eq = '\0';
        only = !strcmp(name, "all") ? -1 : !strcmp(name, "upstream") ? -2 : 0;
        for (int k = K_INCREMENT; k < K_COUNT; k++)
          if (!strcmp(name, kernel_names[k])) only = k;
        if (only == 0) {
          fprintf(stderr, "unknown kernel %s\n", name);
          return 2;
        }
        if (eq && only > 0) kernel_codes[only] = atoi(eq + 1);
        if (only > 0 && (kernel_codes[only] < 1 || kernel_codes[only] > 0x7f)) {
          fprintf(stderr, "function code of %s: 1..127\n", name);
          return 2;
        }
        break;
      }
      case 's':
        size = (unsigned)atoi(optarg);
        break;
      case 'n':
        calls = (unsigned)atoi(optarg);
        break;
      case 'H':
        hosts = (unsigned)atoi(optarg);
        break;
      case 'M':
        mib = (unsigned)atoi(optarg);
        break;
      case 'e':
        error = optarg;
        break;
      default:
        fprintf(stderr,
                "usage: %s [-p PORT] [-k KERNEL[=CODE]|all|upstream] [-s BYTES] [-n CALLS] "
                "[-H HOSTS] [-M NAA_MIB] [-e ERROR] [-U] [-l LOCAL_IP] [-R RETRIES] [-T SECONDS] "
                "[--attach SOCKET [--attach-port NAME]] NAA_IP\n",
                argv[0]);
        return opt == 'h' ? 0 : 2;
    }
  }
  if (optind != argc - 1 || port == 0 || port > 65535 || size < 64 || size > (64u << 20) ||
      hosts == 0 || hosts > 64 || mib == 0) {
    fprintf(stderr, "%s: bad arguments (try -h)\n", argv[0]);
    return 2;
  }
  if (error && !strcmp(error, "foreign-rkey")) return foreign_rkey(argv[optind], (uint16_t)port);
  if (error && !strcmp(error, "slow-kernel")) return slow_kernel(argv[optind], (uint16_t)port);
  if (error) return provoke(argv[optind], (uint16_t)port, error, mib, upstream);
  return run_kernels(argv[optind], (uint16_t)port, only, size, calls, hosts);
}
