/* @file
 * naaice_bench: function-call benchmarks through the NAAICE host API, against an NAA with the
 * echo kernel (function code 6: the parameter goes to the NAA and comes back unchanged).
 *
 *   naaice_bench -m rtt [-S MIN] [-L MAX] [-n CALLS] NAA_IP
 *       round-trip time of one call against the payload size, MIN..MAX bytes in steps of x4;
 *       one connection per size, 2 warm-up calls, then CALLS calls (fewer for large payloads)
 *   naaice_bench -m rate [-H HOSTS] [-S SIZE] [-t SECONDS] NAA_IP
 *       calls per second with HOSTS connections, each with one call in flight at all times
 *
 * Every call's result is checked. Prints one CSV line per measurement:
 *   rtt,SIZE,CALLS,MEDIAN_US,P90_US,MIN_US,MBPS  (MB/s counts the payload both ways)
 *   rate,HOSTS,SIZE,SECONDS,CALLS,CALLS_PER_S */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/naa/host/naaice.h"

#define FN_ECHO 6

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

struct host {
  char* buf;
  unsigned size;
  struct naaice_communication_context* ctx;
  unsigned char stamp;
};

static int open_host(struct host* h, const char* ip, uint16_t port, unsigned size) {
  h->size = size;
  h->buf = malloc(size);
  if (!h->buf) return -1;
  memset(h->buf, 0x5a, size);
  char* params[1] = {h->buf};
  size_t sizes[1] = {size};
  /* One region, input and output: the echo writes it back. */
  if (naaice_init_communication_context(&h->ctx, 0, sizes, params, 1, 0, NULL, FN_ECHO, NULL, ip,
                                        port) ||
      naaice_set_input_mr(h->ctx, 0) || naaice_set_output_mr(h->ctx, 0) ||
      naaice_setup_connection(h->ctx) || naaice_register_mrs(h->ctx) || naaice_do_mrsp(h->ctx))
    return -1;
  return 0;
}

static void close_host(struct host* h) {
  if (h->ctx) naaice_disconnect_and_cleanup(h->ctx);
  free(h->buf);
  memset(h, 0, sizeof *h);
}

/* The first and last byte carry a stamp: the echo must bring them back. */
static int start_call(struct host* h) {
  h->stamp++;
  h->buf[0] = (char)h->stamp;
  h->buf[h->size - 1] = (char)(255 - h->stamp);
  return naaice_init_data_transfer(h->ctx);
}
/* A finished call the NAA answered with a non-zero return code is a failure here. */

static int check_call(const struct host* h) {
  const int first = (unsigned char)h->buf[0], last = (unsigned char)h->buf[h->size - 1];
  const int stamp = h->stamp;
  if (h->ctx->naa_returncode) {
    fprintf(stderr, "naaice_bench: the NAA returned 0x%02x\n", h->ctx->naa_returncode);
    return -1;
  }
  if (first != stamp || last != 255 - stamp) {
    fprintf(stderr, "naaice_bench: the echo came back wrong\n");
    return -1;
  }
  return 0;
}

static int rtt(const char* ip, uint16_t port, unsigned min, unsigned max, unsigned calls) {
  for (unsigned long long s = min; s <= max; s *= 4) {
    struct host h;
    memset(&h, 0, sizeof h);
    if (open_host(&h, ip, port, (unsigned)s)) return 1;
    unsigned n = calls;
    const unsigned long long budget = 512ull << 20; /* bytes per size, about */
    if ((unsigned long long)n * s > budget) n = (unsigned)(budget / s);
    if (n < 5) n = 5;
    double* t = calloc(n, sizeof *t);
    for (unsigned i = 0; i < n + 2; i++) {
      const double t0 = now_s();
      if (start_call(&h)) return 1;
      while (h.ctx->state < NAAICE_FINISHED)
        if (naaice_poll_cq_nonblocking(h.ctx)) return 1;
      const double dt = now_s() - t0;
      if (check_call(&h)) return 1;
      if (i >= 2) t[i - 2] = dt;
    }
    qsort(t, n, sizeof *t, cmp_double);
    const double med = t[n / 2];
    printf("rtt,%llu,%u,%.1f,%.1f,%.1f,%.1f\n", s, n, med * 1e6, t[(n * 9) / 10] * 1e6, t[0] * 1e6,
           2.0 * (double)s / med / 1e6);
    fflush(stdout);
    free(t);
    close_host(&h);
  }
  return 0;
}

static int rate(const char* ip, uint16_t port, unsigned hosts, unsigned size, double seconds) {
  struct host* h = calloc(hosts, sizeof *h);
  for (unsigned i = 0; i < hosts; i++)
    if (open_host(&h[i], ip, port, size)) return 1;
  unsigned long long done = 0;
  for (unsigned i = 0; i < hosts; i++)
    if (start_call(&h[i])) return 1;
  const double t0 = now_s();
  double t1 = t0;
  while ((t1 = now_s()) - t0 < seconds) {
    for (unsigned i = 0; i < hosts; i++) {
      if (naaice_poll_cq_nonblocking(h[i].ctx)) return 1;
      if (h[i].ctx->state < NAAICE_FINISHED) continue;
      if (check_call(&h[i])) return 1;
      done++;
      if (start_call(&h[i])) return 1;
    }
  }
  /* Let the calls in flight finish before disconnecting. */
  for (unsigned i = 0; i < hosts; i++)
    while (h[i].ctx->state < NAAICE_FINISHED)
      if (naaice_poll_cq_nonblocking(h[i].ctx)) return 1;
  printf("rate,%u,%u,%.2f,%llu,%.0f\n", hosts, size, t1 - t0, done, (double)done / (t1 - t0));
  fflush(stdout);
  for (unsigned i = 0; i < hosts; i++) close_host(&h[i]);
  free(h);
  return 0;
}

int main(int argc, char** argv) {
  unsigned port = NAAICE_DEFAULT_PORT, min = 64, max = 64u << 20, calls = 200, hosts = 1;
  double seconds = 2;
  const char* mode = "rtt";
  int opt;
  while ((opt = getopt(argc, argv, "p:m:S:L:n:H:t:h")) != -1) {
    switch (opt) {
      case 'p':
        port = (unsigned)atoi(optarg);
        break;
      case 'm':
        mode = optarg;
        break;
      case 'S':
        min = (unsigned)strtoul(optarg, NULL, 0);
        break;
      case 'L':
        max = (unsigned)strtoul(optarg, NULL, 0);
        break;
      case 'n':
        calls = (unsigned)atoi(optarg);
        break;
      case 'H':
        hosts = (unsigned)atoi(optarg);
        break;
      case 't':
        seconds = atof(optarg);
        break;
      default:
        fprintf(stderr,
                "usage: %s [-m rtt|rate] [-p PORT] [-S MIN] [-L MAX] [-n CALLS] [-H HOSTS] "
                "[-t SECONDS] NAA_IP\n",
                argv[0]);
        return opt == 'h' ? 0 : 2;
    }
  }
  if (optind != argc - 1 || port == 0 || port > 65535 || min < 1 || max < min ||
      max > NAAICE_MAX_MR_SIZE || hosts == 0 || hosts > 255 || calls == 0 || seconds <= 0) {
    fprintf(stderr, "%s: bad arguments (try -h)\n", argv[0]);
    return 2;
  }
  if (!strcmp(mode, "rtt")) return rtt(argv[optind], (uint16_t)port, min, max, calls);
  if (!strcmp(mode, "rate")) return rate(argv[optind], (uint16_t)port, hosts, min, seconds);
  fprintf(stderr, "%s: -m must be rtt or rate\n", argv[0]);
  return 2;
}
