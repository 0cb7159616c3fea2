/* netfr-libfabric: a NetFR client and a NetFR host written on libfabric's verbs provider
 * (FI_EP_MSG over rdma_cm), as the seed's implementation and the programs that connect to it
 * are, with nothing of the appliance's code: the messages are laid out here again from the
 * protocol description (docs/netfr.md), so that the interop tests check our codec against an
 * independent one. Runs where rdma-core runs (the rxe interop VM).
 *   netfr-libfabric client HOST_IP   receives the frames of "roce-netfr-check host frames"
 *   netfr-libfabric host LOCAL_IP    plays "roce-netfr-check host frames" for
 *                                    "roce-netfr-check client frames"
 * Frames 1 KiB .. 4 MiB into buffers of 4 KiB, 64 KiB, 1 MiB, 16 MiB (the smallest that fits),
 * a cursor datagram on the secondary channel after each, every byte and the total order
 * checked, credits counted. Prints PASS or FAIL lines. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define MAGIC "NetFrame"
#define VERSION 1
#define MSG_MAX 4096
#define PAYLOAD_MAX (MSG_MAX - 32)
#define CREDITS 60
#define RESERVED 8
#define SLOTS 128
#define PORT 5010
#define MAX_REGIONS 40
enum {
  T_CLIENT_HELLO = 1, T_SERVER_HELLO, T_HOST_BUFFER_STATE, T_BUFFER_UPDATE,
  T_CLIENT_BUFFER_STATE, T_CLIENT_DATA, T_CLIENT_DATA_ACK, T_HOST_DATA, T_HOST_DATA_ACK
};
#define END_UDATA UINT64_MAX

#define FAIL(...)                                  \
  do {                                             \
    printf("FAIL netfr-libfabric: " __VA_ARGS__);  \
    printf("\n");                                  \
    fflush(stdout);                                \
    exit(1);                                       \
  } while (0)
#define FI_CHECK(call)                                                           \
  do {                                                                           \
    int rc_ = (int)(call);                                                       \
    if (rc_) FAIL("%s: %d (%s)", #call, rc_, fi_strerror(-rc_));                 \
  } while (0)

static void put32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t* p, uint64_t v) { for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t* p) { uint32_t v = 0; for (int i = 3; i >= 0; --i) v = (v << 8) | p[i]; return v; }
static uint64_t get64(const uint8_t* p) { uint64_t v = 0; for (int i = 7; i >= 0; --i) v = (v << 8) | p[i]; return v; }
static size_t header(uint8_t* p, int type, size_t size) {
  memset(p, 0, size);
  memcpy(p, MAGIC, 8);
  p[8] = VERSION;
  p[9] = (uint8_t)type;
  return size;
}
static int valid(const uint8_t* p, size_t len) {
  return len >= 10 && memcmp(p, MAGIC, 8) == 0 && p[8] == VERSION;
}
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The same bytes as roce-netfr-check's fill(). */
static void fill(uint8_t* b, uint64_t len, uint64_t seq) {
  uint64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w = (seq << 40) ^ (i * 0x9E3779B97F4A7C15ull) ^ 0x5bd1e995ull;
    memcpy(b + i, &w, 8);
  }
  for (; i < len; ++i) b[i] = (uint8_t)(seq + i);
}
static int check(const uint8_t* b, uint64_t len, uint64_t seq) {
  uint64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w = (seq << 40) ^ (i * 0x9E3779B97F4A7C15ull) ^ 0x5bd1e995ull;
    if (memcmp(b + i, &w, 8) != 0) return 0;
  }
  for (; i < len; ++i)
    if (b[i] != (uint8_t)(seq + i)) return 0;
  return 1;
}

static const uint64_t kBufSizes[] = {4096, 65536, 1 << 20, 16 << 20};
#define NBUF 4
#define MAX_FRAME (4u << 20)

struct chan {
  struct fid_ep* ep;
  struct fid_cq* cq;
  uint8_t *rx, *tx;
  struct fid_mr *rx_mr, *tx_mr;
  int free_tx[SLOTS], nfree;
  int credits;
  uint32_t tx_chs, rx_chs;
  int connected;
};

static struct fid_fabric* fabric;
static struct fid_domain* domain;
static struct fid_eq* eq;
static struct chan ch[2];
static uint32_t msg_serial; /* host: next connection-wide serial */
static uint64_t acks_rx, msgs_rx, msgs_tx;

/* Operation contexts (FI_CONTEXT: the provider may use them): one per channel, kind, slot. */
enum { K_RECV = 1, K_SEND = 2, K_WRITE = 3 };
static struct fi_context ctxs[2][4][SLOTS];
static void* ctx(int c, int kind, int slot) { return &ctxs[c][kind][slot]; }

static struct fi_info* hints(void) {
  struct fi_info* h = fi_allocinfo();
  h->ep_attr->type = FI_EP_MSG;
  h->caps = FI_MSG | FI_RMA;
  h->mode = FI_CONTEXT;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  h->fabric_attr->prov_name = strdup("verbs");
  h->addr_format = FI_SOCKADDR_IN;
  return h;
}

static struct fid_mr* reg(void* buf, size_t len, uint64_t access) {
  struct fid_mr* mr;
  FI_CHECK(fi_mr_reg(domain, buf, len, access, 0, 0, 0, &mr, NULL));
  return mr;
}

static void post_recv(int c, int slot) {
  ssize_t r;
  while ((r = fi_recv(ch[c].ep, ch[c].rx + (size_t)slot * MSG_MAX, MSG_MAX, fi_mr_desc(ch[c].rx_mr), 0,
                      ctx(c, K_RECV, slot))) == -FI_EAGAIN)
    ;
  if (r) FAIL("fi_recv: %zd", r);
}

/* Creates the channel's CQ and slots, binds, enables, posts the receives. */
static void setup_ep(int c, struct fi_info* info) {
  struct fi_cq_attr ca = {.size = 4 * SLOTS, .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
  FI_CHECK(fi_endpoint(domain, info, &ch[c].ep, NULL));
  FI_CHECK(fi_cq_open(domain, &ca, &ch[c].cq, NULL));
  FI_CHECK(fi_ep_bind(ch[c].ep, &eq->fid, 0));
  FI_CHECK(fi_ep_bind(ch[c].ep, &ch[c].cq->fid, FI_TRANSMIT | FI_RECV));
  FI_CHECK(fi_enable(ch[c].ep));
  ch[c].rx = aligned_alloc(4096, (size_t)SLOTS * MSG_MAX);
  ch[c].tx = aligned_alloc(4096, (size_t)SLOTS * MSG_MAX);
  ch[c].rx_mr = reg(ch[c].rx, (size_t)SLOTS * MSG_MAX, FI_RECV);
  ch[c].tx_mr = reg(ch[c].tx, (size_t)SLOTS * MSG_MAX, FI_SEND);
  ch[c].nfree = 0;
  for (int s = 0; s < SLOTS; ++s) ch[c].free_tx[ch[c].nfree++] = s;
  ch[c].credits = CREDITS;
  for (int s = 0; s < SLOTS; ++s) post_recv(c, s);
}

/* Waits for `want` on the EQ; returns the event data's length (into data). */
static ssize_t wait_eq(uint32_t want, struct fi_eq_cm_entry* entry, size_t size) {
  uint32_t ev;
  ssize_t r = fi_eq_sread(eq, &ev, entry, size, 30000, 0);
  if (r == -FI_EAVAIL) {
    struct fi_eq_err_entry err = {0};
    fi_eq_readerr(eq, &err, 0);
    if (err.err == ECONNREFUSED && err.err_data_size >= 11 && memcmp(err.err_data, MAGIC, 8) == 0)
      FAIL("refused by the host (ServerHello status %u)", ((uint8_t*)err.err_data)[10]);
    FAIL("EQ error %d (%s), provider error %d", err.err, fi_strerror(err.err), err.prov_errno);
  }
  if (r < 0) FAIL("fi_eq_sread: %zd (%s)", r, fi_strerror((int)-r));
  if (ev != want) FAIL("EQ event %u, expected %u", ev, want);
  return r - (ssize_t)sizeof(struct fi_eq_cm_entry);
}

static int progress(void);

static void send_msg(int c, const uint8_t* m, size_t len, int ack) {
  struct chan* h = &ch[c];
  double end = now_s() + 30;
  while (h->nfree == 0 || (!ack && h->credits <= 0)) {
    progress();
    if (now_s() > end) FAIL("no credit on channel %d", c);
  }
  if (!ack) --h->credits;
  int slot = h->free_tx[--h->nfree];
  uint8_t* p = h->tx + (size_t)slot * MSG_MAX;
  memcpy(p, m, len);
  ssize_t r;
  while ((r = fi_send(h->ep, p, len, fi_mr_desc(h->tx_mr), 0, ctx(c, K_SEND, slot))) == -FI_EAGAIN)
    progress();
  if (r) FAIL("fi_send: %zd", r);
  ++msgs_tx;
}
static void send_ack(int c, int type) {
  uint8_t m[10];
  send_msg(c, m, header(m, type, 10), 1);
}

/* ---- received messages, per role ---- */
struct rxmsg {
  int used, ch, slot;
  uint32_t serial;
};
static struct rxmsg pending[2 * SLOTS];
static void (*on_message)(int c, int slot, const uint8_t* m, size_t len);

static int progress(void) {
  struct fi_cq_msg_entry e[16];
  int any = 0;
  for (int c = 0; c < 2; ++c) {
    if (!ch[c].cq) continue;
    ssize_t n = fi_cq_read(ch[c].cq, e, 16);
    if (n == -FI_EAGAIN) continue;
    if (n == -FI_EAVAIL) {
      struct fi_cq_err_entry err = {0};
      fi_cq_readerr(ch[c].cq, &err, 0);
      FAIL("completion error on channel %d: %d (%s)", c, err.err, fi_strerror(err.err));
    }
    if (n < 0) FAIL("fi_cq_read: %zd", n);
    for (ssize_t i = 0; i < n; ++i) {
      any = 1;
      ptrdiff_t w = (struct fi_context*)e[i].op_context - &ctxs[0][0][0];
      int kind = (int)((w / SLOTS) % 4), slot = (int)(w % SLOTS);
      if (kind == K_SEND) {
        ch[c].free_tx[ch[c].nfree++] = slot;
      } else if (kind == K_RECV) {
        const uint8_t* m = ch[c].rx + (size_t)slot * MSG_MAX;
        if (!valid(m, e[i].len)) FAIL("bad message on channel %d (%zu bytes)", c, e[i].len);
        if (m[9] == T_CLIENT_DATA_ACK || m[9] == T_HOST_DATA_ACK) {
          ++acks_rx;
          if (++ch[c].credits > CREDITS) FAIL("more acknowledgements than messages");
          post_recv(c, slot);
        } else {
          ++msgs_rx;
          on_message(c, slot, m, e[i].len);
        }
      }
    }
  }
  return any;
}

/* ---- client ---- */
static uint8_t* cbuf[NBUF];
static struct fid_mr* cmr[NBUF];
static uint32_t next_serial;

static void advertise(int i) {
  uint8_t m[48];
  header(m, T_CLIENT_BUFFER_STATE, 48);
  put32(m + 12, (uint32_t)i);
  put32(m + 16, 4096);
  put64(m + 24, (uint64_t)(uintptr_t)cbuf[i]);
  put64(m + 32, kBufSizes[i]);
  put64(m + 40, fi_mr_key(cmr[i]));
  send_msg(0, m, 48, 0);
}

static void client_message(int c, int slot, const uint8_t* m, size_t len) {
  if (m[9] == T_HOST_BUFFER_STATE) {
    if (len < 16 + 41 * 8) FAIL("short HostBufferState");
    printf("client: the host's memory: %" PRIu64 " bytes\n", get64(m + 16));
    send_ack(c, T_HOST_DATA_ACK);
    post_recv(c, slot);
    return;
  }
  uint32_t serial, chs;
  if (m[9] == T_HOST_DATA) {
    serial = get32(m + 16);
    chs = get32(m + 20);
  } else if (m[9] == T_BUFFER_UPDATE) {
    serial = get32(m + 24);
    chs = get32(m + 28);
  } else {
    FAIL("host sent type %u", m[9]);
  }
  if (chs != ch[c].rx_chs++) FAIL("channel %d serial %u out of order", c, chs);
  for (int i = 0; i < 2 * SLOTS; ++i)
    if (!pending[i].used) {
      pending[i] = (struct rxmsg){1, c, slot, serial};
      return;
    }
  FAIL("more messages held than slots");
}

static int run_client(const char* host) {
  struct fi_info* h = hints();
  char port[16];
  uint8_t hello[10];
  header(hello, T_CLIENT_HELLO, 10);
  struct {
    struct fi_eq_cm_entry e;
    uint8_t data[256];
  } ent;
  for (int c = 0; c < 2; ++c) {
    struct fi_info* info;
    snprintf(port, sizeof port, "%d", PORT + c);
    FI_CHECK(fi_getinfo(FI_VERSION(1, 17), host, port, 0, h, &info));
    if (!fabric) {
      FI_CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
      struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
      FI_CHECK(fi_eq_open(fabric, &ea, &eq, NULL));
      FI_CHECK(fi_domain(fabric, info, &domain, NULL));
      printf("client: provider %s, domain %s\n", info->fabric_attr->prov_name, info->domain_attr->name);
    }
    setup_ep(c, info);
    FI_CHECK(fi_connect(ch[c].ep, info->dest_addr, hello, sizeof hello));
    ssize_t n = wait_eq(FI_CONNECTED, &ent.e, sizeof ent);
    if (n < 11 || memcmp(ent.data, MAGIC, 8) != 0 || ent.data[9] != T_SERVER_HELLO || ent.data[10] != 1)
      FAIL("channel %d: no ServerHello OK in the reply (%zd bytes)", c, n);
    printf("client: channel %d connected, ServerHello OK\n", c);
    fi_freeinfo(info);
  }
  fi_freeinfo(h);
  on_message = client_message;
  for (int i = 0; i < NBUF; ++i) {
    cbuf[i] = aligned_alloc(4096, kBufSizes[i]);
    memset(cbuf[i], 0xEE, kBufSizes[i]);
    cmr[i] = reg(cbuf[i], kBufSizes[i], FI_REMOTE_WRITE);
    advertise(i);
  }
  uint64_t next_udata = 0, frames = 0, bytes = 0, events = 0;
  double end = now_s() + 120;
  for (;;) {
    progress();
    if (now_s() > end) FAIL("timed out after %" PRIu64 " events", events);
    int found = -1;
    for (int i = 0; i < 2 * SLOTS; ++i)
      if (pending[i].used && pending[i].serial == next_serial) found = i;
    if (found < 0) continue;
    struct rxmsg p = pending[found];
    pending[found].used = 0;
    ++next_serial;
    ++events;
    const uint8_t* m = ch[p.ch].rx + (size_t)p.slot * MSG_MAX;
    if (m[9] == T_HOST_DATA) {
      uint32_t len = get32(m + 12);
      uint64_t ud = get64(m + 24);
      if (len == 0 || len > PAYLOAD_MAX) FAIL("bad data length %u", len);
      if (ud == END_UDATA) break;
      if (ud != next_udata) FAIL("message %" PRIu64 " where %" PRIu64 " was due", ud, next_udata);
      if (!check(m + 32, len, ud)) FAIL("datagram %" PRIu64 " corrupt", ud);
      ++next_udata;
      post_recv(p.ch, p.slot);
      send_ack(p.ch, T_HOST_DATA_ACK);
    } else {
      uint32_t idx = get32(m + 12), size = get32(m + 16), off = get32(m + 20);
      uint64_t ud = get64(m + 32);
      if (idx >= NBUF || (uint64_t)off + size > kBufSizes[idx]) FAIL("buffer update outside buffer %u", idx);
      if (ud != next_udata) FAIL("frame %" PRIu64 " where %" PRIu64 " was due", ud, next_udata);
      if (!check(cbuf[idx] + off, size, ud)) FAIL("frame %" PRIu64 " (%u bytes) corrupt", ud, size);
      int want = 0;
      while (kBufSizes[want] < size) ++want;
      if ((int)idx != want) FAIL("frame of %u bytes in buffer %u, not %d", size, idx, want);
      ++next_udata;
      ++frames;
      bytes += size;
      post_recv(p.ch, p.slot);
      send_ack(p.ch, T_HOST_DATA_ACK);
      /* The buffer back, then the answer the host waits for (in this order on one QP, so that
         the host knows the buffer is free when it writes the next frame). */
      advertise((int)idx);
      uint8_t a[40];
      header(a, T_CLIENT_DATA, 40);
      put32(a + 12, 8);
      put32(a + 16, msg_serial++);
      put32(a + 20, ch[0].tx_chs++);
      put64(a + 24, ud);
      a[32] = 1;
      send_msg(0, a, 40, 0);
    }
  }
  printf("client: %" PRIu64 " messages in total order, %" PRIu64 " frames (%" PRIu64
         " bytes) byte-exact; %" PRIu64 " received, %" PRIu64 " sent, %" PRIu64 " acks\n",
         events, frames, bytes, msgs_rx, msgs_tx, acks_rx);
  for (int c = 0; c < 2; ++c) fi_shutdown(ch[c].ep, 0);
  printf("PASS netfr-libfabric client\n");
  return 0;
}

/* ---- host ---- */
struct rbuf {
  int known, busy;
  uint64_t addr, size, key;
};
static struct rbuf rb[MAX_REGIONS];
static uint64_t answer = UINT64_MAX;
static uint32_t cdata_serial;

static void host_message(int c, int slot, const uint8_t* m, size_t len) {
  if (m[9] == T_CLIENT_BUFFER_STATE && len >= 48) {
    uint32_t i = get32(m + 12);
    if (i >= MAX_REGIONS) FAIL("buffer index %u", i);
    rb[i] = (struct rbuf){1, 0, get64(m + 24), get64(m + 32), get64(m + 40)};
  } else if (m[9] == T_CLIENT_DATA && len >= 32) {
    if (get32(m + 20) != cdata_serial++) FAIL("client data out of order");
    answer = get64(m + 24);
  } else {
    FAIL("client sent type %u (%zu bytes)", m[9], len);
  }
  post_recv(c, slot);
  send_ack(c, T_CLIENT_DATA_ACK);
}

static void host_send(int c, uint8_t* m, size_t len) {
  double end = now_s() + 30;
  while (ch[c].credits <= RESERVED) {
    progress();
    if (now_s() > end) FAIL("credits did not come back");
  }
  send_msg(c, m, len, 0);
}

static int run_host(const char* local) {
  struct fi_info* h = hints();
  struct fid_pep* pep[2];
  char port[16];
  struct fi_info* info;
  for (int c = 0; c < 2; ++c) {
    snprintf(port, sizeof port, "%d", PORT + c);
    FI_CHECK(fi_getinfo(FI_VERSION(1, 17), local, port, FI_SOURCE, h, &info));
    if (!fabric) {
      FI_CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
      struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
      FI_CHECK(fi_eq_open(fabric, &ea, &eq, NULL));
    }
    FI_CHECK(fi_passive_ep(fabric, info, &pep[c], NULL));
    FI_CHECK(fi_pep_bind(pep[c], &eq->fid, 0));
    FI_CHECK(fi_listen(pep[c]));
    fi_freeinfo(info);
  }
  fi_freeinfo(h);
  printf("host: listening on %s ports %d, %d\n", local, PORT, PORT + 1);
  fflush(stdout);
  struct {
    struct fi_eq_cm_entry e;
    uint8_t data[256];
  } ent;
  for (int n = 0; n < 2; ++n) {
    ssize_t dl = wait_eq(FI_CONNREQ, &ent.e, sizeof ent);
    int c = ent.e.fid == &pep[0]->fid ? 0 : 1;
    if (dl < 10 || memcmp(ent.data, MAGIC, 8) != 0 || ent.data[9] != T_CLIENT_HELLO)
      FAIL("connect request on channel %d without a ClientHello (%zd bytes)", c, dl);
    if (!domain) FI_CHECK(fi_domain(fabric, ent.e.info, &domain, NULL));
    setup_ep(c, ent.e.info);
    uint8_t sh[11];
    header(sh, T_SERVER_HELLO, 11);
    sh[10] = 1;
    FI_CHECK(fi_accept(ch[c].ep, sh, sizeof sh));
    wait_eq(FI_CONNECTED, &ent.e, sizeof ent);
    fi_freeinfo(ent.e.info);
    printf("host: channel %d connected (ClientHello seen)\n", c);
  }
  on_message = host_message;
  uint8_t* src = aligned_alloc(4096, MAX_FRAME);
  struct fid_mr* smr = reg(src, MAX_FRAME, FI_WRITE);
  uint8_t m[MSG_MAX];
  header(m, T_HOST_BUFFER_STATE, 16 + 41 * 8);
  put64(m + 16, MAX_FRAME);
  host_send(0, m, 16 + 41 * 8);
  uint64_t seq = 0;
  uint64_t sizes[32];
  int ns = 0;
  for (uint64_t s = 1024; s <= MAX_FRAME; s *= 4) {
    sizes[ns++] = s;
    if (s * 3 <= MAX_FRAME) sizes[ns++] = s * 3;
  }
  if (sizes[ns - 1] != MAX_FRAME) sizes[ns++] = MAX_FRAME;
  for (int f = 0; f < ns; ++f) {
    uint64_t len = sizes[f];
    int best = -1;
    double end = now_s() + 30;
    for (;;) {
      for (int i = 0; i < MAX_REGIONS; ++i)
        if (rb[i].known && !rb[i].busy && rb[i].size >= len && (best < 0 || rb[i].size < rb[best].size)) best = i;
      if (best >= 0) break;
      progress();
      if (now_s() > end) FAIL("no buffer for %" PRIu64 " bytes", len);
    }
    fill(src, len, seq);
    ssize_t r;
    while ((r = fi_write(ch[0].ep, src, len, fi_mr_desc(smr), 0, rb[best].addr, rb[best].key,
                         ctx(0, K_WRITE, 0))) == -FI_EAGAIN)
      progress();
    if (r) FAIL("fi_write: %zd", r);
    header(m, T_BUFFER_UPDATE, 40);
    put32(m + 12, (uint32_t)best);
    put32(m + 16, (uint32_t)len);
    put32(m + 20, 0);
    put32(m + 24, msg_serial++);
    put32(m + 28, ch[0].tx_chs++);
    put64(m + 32, seq);
    rb[best].busy = 1;
    host_send(0, m, 40);
    uint64_t frame = seq++;
    header(m, T_HOST_DATA, 32 + 64);
    put32(m + 12, 64);
    put32(m + 16, msg_serial++);
    put32(m + 20, ch[1].tx_chs++);
    put64(m + 24, seq);
    fill(m + 32, 64, seq);
    host_send(1, m, 32 + 64);
    ++seq;
    end = now_s() + 30;
    while (answer != frame) {
      progress();
      if (now_s() > end) FAIL("no answer for frame %" PRIu64, frame);
    }
    printf("host: frame %" PRIu64 " bytes -> buffer %d ok\n", len, best);
  }
  /* Larger than every buffer: nothing fits, nothing is written. */
  int fits = 0;
  for (int i = 0; i < MAX_REGIONS; ++i)
    if (rb[i].known && rb[i].size >= (16u << 20) + 4096) fits = 1;
  if (fits) FAIL("a buffer larger than advertised");
  header(m, T_HOST_DATA, 40);
  put32(m + 12, 8);
  put32(m + 16, msg_serial++);
  put32(m + 20, ch[1].tx_chs++);
  put64(m + 24, END_UDATA);
  host_send(1, m, 40);
  /* Until the client disconnects. */
  double end = now_s() + 30;
  for (;;) {
    progress();
    uint32_t ev;
    ssize_t r = fi_eq_read(eq, &ev, &ent, sizeof ent, 0);
    if (r > 0 && ev == FI_SHUTDOWN) break;
    if (now_s() > end) FAIL("the client did not disconnect");
  }
  printf("host: %" PRIu64 " received, %" PRIu64 " sent, %" PRIu64 " acks\n", msgs_rx, msgs_tx, acks_rx);
  printf("PASS netfr-libfabric host\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3 || (strcmp(argv[1], "client") && strcmp(argv[1], "host"))) {
    fprintf(stderr, "usage: %s client HOST_IP | host LOCAL_IP\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  return strcmp(argv[1], "client") == 0 ? run_client(argv[2]) : run_host(argv[2]);
}
