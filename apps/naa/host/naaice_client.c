/* @file
 * naaice_client: offloads every kernel of the NAA (roce-naa) through the NAAICE host API and
 * checks each result against a reference computed here; or provokes one MRSP error or
 * application error and checks that the NAA reports exactly it. The same source runs on
 * rdma-core (naaice_client_ibverbs) and on the appliance's stack (naaice_client_roce).
 *
 *   naaice_client [-p PORT] [-k all|increment|vector_add|reduce_sum|crc32|matmul] [-s BYTES]
 *                 [-n CALLS] [-H HOSTS] [-M NAA_MIB] [-e ERROR]
 *                 [--attach SOCKET [--attach-port NAME]] NAA_IP
 *   --attach: naaice_client_roce attached to a running roced (its port; no DPDK here) instead
 *             of a port of its own (NAAICE_ROCE)
 *   ERROR: too-many-regions, invalid-address, not-enough-memory, unknown-function,
 *          bad-return-address, bad-param-count, bad-param-size;
 *          foreign-rkey: host B writes host A's NAA region with A's rkey over B's connection (the
 *            NAA must refuse it with a remote access error, and A's data stay A's);
 *          slow-kernel: while host A's call runs (roce-naa --kernel-delay-ms 3000
 *            --kernel-queue 1), host B connects, gets its advertisement and is answered
 *            "busy" (0x01) at once */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/naa/host/naaice.h"
#include "apps/naa/host/naaice_transport.h"

enum { K_INCREMENT = 1, K_VECTOR_ADD = 2, K_REDUCE_SUM = 3, K_CRC32 = 4, K_MATMUL = 5 };
static const char* kernel_names[] = {"",           "increment", "vector_add",
                                     "reduce_sum", "crc32",     "matmul"};

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

/* One host's call: its parameters, the expected result, its context. */
struct job {
  int kernel;
  int fncode; /* the function code called (the kernel's, unless an error is provoked) */
  unsigned nparams;
  char* params[40];
  unsigned sizes[40];
  unsigned ret;              /* index of the return parameter */
  unsigned char* expect[40]; /* expected content per parameter after the call (NULL: any) */
  struct naaice_communication_context* ctx;
};

static void fill(struct job* j) {
  for (unsigned i = 0; i < j->nparams; i++)
    for (unsigned b = 0; b < j->sizes[i]; b++) j->params[i][b] = (char)rnd();
  uint32_t* dims;
  switch (j->kernel) {
    case K_INCREMENT:
      for (unsigned i = 0; i < j->nparams; i++)
        for (unsigned b = 0; b < j->sizes[i]; b++)
          j->expect[i][b] = (unsigned char)(j->params[i][b] + 1);
      break;
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
      const uint32_t m = 16, n = 16, k = j->sizes[1] / 4 / 16;
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
      fprintf(stderr, "FAIL %s host %u call %u: parameter %u differs at byte %u\n",
              kernel_names[j->kernel], host, call, i, b);
      return -1;
    }
  }
  return 0;
}

static void setup_job(struct job* j, int kernel, unsigned size) {
  memset(j, 0, sizeof *j);
  j->kernel = kernel;
  j->fncode = kernel;
  size = (size + 63) / 64 * 64;
  switch (kernel) {
    case K_INCREMENT:
      j->nparams = 3;
      j->sizes[0] = size;
      j->sizes[1] = size / 2 + 1;
      j->sizes[2] = 1;
      j->ret = 0;
      break;
    case K_VECTOR_ADD:
      j->nparams = 3;
      j->sizes[0] = j->sizes[1] = j->sizes[2] = size;
      j->ret = 2;
      break;
    case K_REDUCE_SUM:
      j->nparams = 2;
      j->sizes[0] = size;
      j->sizes[1] = 8;
      j->ret = 1;
      break;
    case K_CRC32:
      j->nparams = 2;
      j->sizes[0] = size + 3;
      j->sizes[1] = 4;
      j->ret = 1;
      break;
    case K_MATMUL:
      j->nparams = 4;
      j->sizes[0] = 12;
      j->sizes[1] = j->sizes[2] = size; /* 16 x k and k x 16 */
      j->sizes[3] = 16 * 16 * 4;
      j->ret = 3;
      break;
  }
  for (unsigned i = 0; i < j->nparams; i++) {
    j->params[i] = calloc(1, j->sizes[i]);
    const int out = kernel == K_INCREMENT || i == j->ret;
    j->expect[i] = out ? calloc(1, j->sizes[i]) : NULL;
  }
}

static void free_job(struct job* j) {
  for (unsigned i = 0; i < j->nparams; i++) {
    free(j->params[i]);
    free(j->expect[i]);
  }
}

static int open_job(struct job* j, const char* ip, uint16_t port) {
  if (naaice_init_communication_context(&j->ctx, j->sizes, j->params, j->nparams,
                                        (uint8_t)j->fncode, ip, port))
    return -1;
  if (naaice_setup_connection(j->ctx) || naaice_register_mrs(j->ctx) ||
      naaice_set_metadata(j->ctx, (uintptr_t)j->params[j->ret]))
    return -1;
  return 0;
}

/* Every kernel, `hosts` connections at once, `calls` calls each. */
static int run_kernels(const char* ip, uint16_t port, int only, unsigned size, unsigned calls,
                       unsigned hosts) {
  struct job* jobs = calloc(hosts, sizeof *jobs);
  for (int k = K_INCREMENT; k <= K_MATMUL; k++) {
    if (only && k != only) continue;
    for (unsigned h = 0; h < hosts; h++) {
      setup_job(&jobs[h], k, size);
      if (open_job(&jobs[h], ip, port)) {
        fprintf(stderr, "FAIL %s: host %u cannot connect\n", kernel_names[k], h);
        return 1;
      }
    }
    for (unsigned h = 0; h < hosts; h++)
      if (naaice_init_mrsp(jobs[h].ctx)) return 1;
    for (unsigned h = 0; h < hosts; h++)
      while (jobs[h].ctx->state < MRSP_DONE)
        if (naaice_poll_cq_nonblocking(jobs[h].ctx)) {
          fprintf(stderr, "FAIL %s: host %u MRSP\n", kernel_names[k], h);
          return 1;
        }
    for (unsigned c = 0; c < calls; c++) {
      for (unsigned h = 0; h < hosts; h++) {
        fill(&jobs[h]);
        if (naaice_init_data_transfer(jobs[h].ctx)) return 1;
      }
      /* All hosts' calls are in flight at once; wait for each. */
      for (unsigned h = 0; h < hosts; h++) {
        while (jobs[h].ctx->state < FINISHED)
          if (naaice_poll_cq_nonblocking(jobs[h].ctx)) {
            fprintf(stderr, "FAIL %s host %u call %u: %s\n", kernel_names[k], h, c,
                    naaice_rpc_status_string(jobs[h].ctx->rpc_status));
            return 1;
          }
        if (check(&jobs[h], h, c)) return 1;
      }
    }
    for (unsigned h = 0; h < hosts; h++) {
      naaice_disconnect_and_cleanup(jobs[h].ctx);
      free_job(&jobs[h]);
    }
    printf("PASS %s: %u hosts x %u calls, results match the reference\n", kernel_names[k], hosts,
           calls);
    fflush(stdout);
  }
  free(jobs);
  return 0;
}

/* One error provoked; 0 when the NAA reports exactly it. */
static int provoke(const char* ip, uint16_t port, const char* what, unsigned naa_mib) {
  struct job j;
  unsigned want_mrsp = 0, want_status = 0;
  if (!strcmp(what, "too-many-regions")) {
    /* 33 parameters + the metadata region: 34 regions, the NAA handles 32. */
    memset(&j, 0, sizeof j);
    j.kernel = j.fncode = K_INCREMENT;
    j.nparams = 33;
    for (unsigned i = 0; i < j.nparams; i++) {
      j.sizes[i] = 64;
      j.params[i] = calloc(1, 64);
    }
    want_mrsp = NAAICE_MRSP_TOO_MANY_REGIONS;
  } else if (!strcmp(what, "invalid-address") || !strcmp(what, "not-enough-memory")) {
    setup_job(&j, K_VECTOR_ADD, 4096);
    want_mrsp = !strcmp(what, "invalid-address") ? NAAICE_MRSP_INVALID_ADDRESS
                                                 : NAAICE_MRSP_NOT_ENOUGH_MEMORY;
  } else if (!strcmp(what, "unknown-function")) {
    setup_job(&j, K_VECTOR_ADD, 256);
    j.fncode = 0x77;
    want_status = 0x10;
  } else if (!strcmp(what, "bad-return-address")) {
    setup_job(&j, K_VECTOR_ADD, 256);
    want_status = 0x11;
  } else if (!strcmp(what, "bad-param-count")) {
    setup_job(&j, K_REDUCE_SUM, 256);
    j.fncode = K_VECTOR_ADD; /* two parameters for a three-parameter kernel */
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
  if (open_job(&j, ip, port)) goto out;
  const uint64_t mem = (uint64_t)naa_mib << 20;
  uint64_t fa[3] = {0, 0, 0};
  if (want_mrsp == NAAICE_MRSP_INVALID_ADDRESS) fa[1] = mem + 4096;   /* beyond the memory */
  if (want_mrsp == NAAICE_MRSP_NOT_ENOUGH_MEMORY) fa[1] = mem - 1024; /* runs over its end */
  if (fa[1] && naaice_set_fpga_addresses(j.ctx, fa)) goto out;
  int rc = naaice_do_mrsp(j.ctx);
  if (want_mrsp) {
    if (rc == 0 || j.ctx->mrsp_error != want_mrsp) {
      fprintf(stderr, "FAIL %s: MRSP error 0x%02x, expected 0x%02x\n", what, j.ctx->mrsp_error,
              want_mrsp);
      goto out;
    }
    printf("PASS %s: the NAA answered MRSP error 0x%02x (%s)\n", what, j.ctx->mrsp_error,
           naaice_mrsp_error_string(j.ctx->mrsp_error));
    /* The connection survives an MRSP error: a valid request now succeeds. */
    if (want_mrsp != NAAICE_MRSP_TOO_MANY_REGIONS) {
      fa[1] = 0;
      naaice_set_fpga_addresses(j.ctx, fa);
      if (naaice_do_mrsp(j.ctx)) {
        fprintf(stderr, "FAIL %s: a valid MRSP after the error failed\n", what);
        goto out;
      }
      fill(&j);
      if (naaice_do_data_transfer(j.ctx) || check(&j, 0, 0)) {
        fprintf(stderr, "FAIL %s: the call after the retried MRSP failed\n", what);
        goto out;
      }
      printf("PASS %s: retried MRSP and call succeeded\n", what);
    }
  } else {
    if (rc) goto out;
    fill(&j);
    if (want_status == 0x11) {
      /* A metadata region naming no region of ours (set_metadata refuses such an address). */
      unsigned char* m = (unsigned char*)j.ctx->mr_local_data[0].addr;
      m[7] ^= 0x40;
    }
    rc = naaice_do_data_transfer(j.ctx);
    if (rc == 0 || j.ctx->rpc_status != want_status) {
      fprintf(stderr, "FAIL %s: status 0x%02x, expected 0x%02x\n", what, j.ctx->rpc_status,
              want_status);
      goto out;
    }
    printf("PASS %s: the NAA answered status 0x%02x (%s)\n", what, j.ctx->rpc_status,
           naaice_rpc_status_string(j.ctx->rpc_status));
  }
  result = 0;
out:
  /* Always disconnect: the NAA frees this host's memory at once. */
  if (j.ctx) naaice_disconnect_and_cleanup(j.ctx);
  for (unsigned i = 0; i < j.nparams; i++) {
    free(j.params[i]);
    free(j.expect[i]);
  }
  return result;
}

/* A call without new data: only the final zero-length WRITE_WITH_IMM(fncode), so that the NAA
 * computes on what its copies of the regions hold now. 0 and the result in the return
 * parameter, or -1. */
static int call_on_naa_data(struct job* j) {
  struct naaice_communication_context* c = j->ctx;
  struct naaice_transport* t = c->transport;
  const unsigned last = c->no_local_mrs - 1;
  if (c->recv_posted == 0 && naaice_post_recv_data(c)) return -1;
  c->rpc_status = 0;
  c->state = CALCULATING;
  if (t->post_send(t->priv, NAAICE_OP_WRITE_IMM, 2, NULL, 0, 0, c->mr_peer_data[last].addr,
                   c->mr_peer_data[last].rkey, (uint32_t)j->fncode, 1))
    return -1;
  while (c->state < FINISHED)
    if (naaice_poll_cq_nonblocking(c)) return -1;
  return c->state == FINISHED && c->rpc_status == 0 ? 0 : -1;
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
  fill(&a);
  if (naaice_do_data_transfer(a.ctx) || check(&a, 0, 0)) {
    fprintf(stderr, "FAIL foreign-rkey: host A's first call\n");
    goto out;
  }
  printf("host A: region 1 at NAA address 0x%llx, rkey 0x%x; host B's own rkey 0x%x\n",
         (unsigned long long)a.ctx->mr_peer_data[1].addr, a.ctx->mr_peer_data[1].rkey,
         b.ctx->mr_peer_data[1].rkey);
  memset(b.params[0], 0xEE, b.sizes[0]);
  struct naaice_transport* t = b.ctx->transport;
  if (t->post_send(t->priv, NAAICE_OP_WRITE, 77, b.params[0], b.sizes[0],
                   b.ctx->mr_local_data[1].lkey, a.ctx->mr_peer_data[1].addr,
                   a.ctx->mr_peer_data[1].rkey, 0, 1)) {
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

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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
  fill(&a);
  const double t0 = mono_s();
  if (naaice_init_data_transfer(a.ctx)) goto out;
  /* A's data are on the way; its answer comes when the kernel is done. */
  while (a.ctx->state < DATA_RECEIVING && mono_s() - t0 < 5)
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
  fill(&b);
  const int rc = naaice_do_data_transfer(b.ctx);
  const double tc = mono_s() - t0;
  if (rc == 0 || b.ctx->rpc_status != 0x01) {
    fprintf(stderr, "FAIL slow-kernel: host B's call got status 0x%02x, not 0x01 (busy)\n",
            b.ctx->rpc_status);
    goto out;
  }
  printf(
      "PASS slow-kernel: host B connected and advertised %.1f ms into A's call, its call "
      "answered 0x01 (%s) at %.1f ms\n",
      tb * 1e3, naaice_rpc_status_string(b.ctx->rpc_status), tc * 1e3);
  while (a.ctx->state < FINISHED)
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
  int only = 0;
  const char* error = NULL;
  int opt;
  static const struct option longs[] = {{"attach", required_argument, NULL, 'A'},
                                        {"attach-port", required_argument, NULL, 'P'},
                                        {NULL, 0, NULL, 0}};
  while ((opt = getopt_long(argc, argv, "p:k:s:n:H:M:e:h", longs, NULL)) != -1) {
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
      case 'k':
        only = 0;
        for (int k = K_INCREMENT; k <= K_MATMUL; k++)
          if (!strcmp(optarg, kernel_names[k])) only = k;
        if (!only && strcmp(optarg, "all")) {
          fprintf(stderr, "unknown kernel %s\n", optarg);
          return 2;
        }
        break;
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
                "usage: %s [-p PORT] [-k KERNEL|all] [-s BYTES] [-n CALLS] [-H HOSTS] "
                "[-M NAA_MIB] [-e ERROR] [--attach SOCKET [--attach-port NAME]] NAA_IP\n",
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
  if (error) return provoke(argv[optind], (uint16_t)port, error, mib);
  return run_kernels(argv[optind], (uint16_t)port, only, size, calls, hosts);
}
