/// @file
/// roce-netfr-check: the two sides of NetFR's integration tests, each a process on its own
/// appliance link (NETFR_LINK), using only the C API (netfr.h). Prints PASS or FAIL lines.
///   roce-netfr-check host   SCENARIO [--sessions N] [--max-frame BYTES] [--ops N]
///   roce-netfr-check client SCENARIO HOST_IP [--max-frame BYTES] [--ops N] [--fill BYTE]
/// Scenarios:
///   frames:  the client advertises buffers of 4 KiB, 64 KiB, 1 MiB, 16 MiB (and 64 MiB when
///            --max-frame allows) on the primary channel; the host writes frames of 1 KiB up to
///            --max-frame, each into the smallest buffer that fits (checked on both sides), with
///            a cursor datagram on the secondary channel after each; the client checks every
///            byte and the total order, answers each frame with a datagram; then a frame larger
///            than every buffer is refused (-ENOBUFS) and the client sees nothing of it.
///   order:   --ops random operations (frame writes on the primary, datagrams on either
///            channel); the client checks that it sees them in exactly the order issued.
///   credits: both ways, a receiver that does not read makes the sender's credits run out
///            (-EAGAIN after CREDIT_COUNT - RESERVED + 1 messages, upstream's rule, non-blocking);
///            once it reads,
///            sending resumes, and every message arrives, in order.
///   refuse:  while the client is connected a second client (same process) is refused.
///   bench:   latency of NetFR buffer writes (write + notification, until the client's event)
///            against bare RDMA WRITEs of the same size (until the client sees the last bytes),
///            4 KiB .. 4K RGBA, one at a time; the client prints a table.
///   restart: the host serves --sessions clients one after the other (run the client that
///            many times): each gets its frames.
///   killed:  the host's first client is killed (SIGKILL, by the test) once connected: no DREQ,
///            nothing more from it; the keepalive frees the host's slot within 30 s and the
///            second client (run it with the frames scenario) gets its frames.
///   threads: Looking Glass's threads: on the host a frame thread writes buffers (primary) and a
///            cursor thread sends datagrams (secondary) while the main thread runs
///            nfrHostProcess and reads the client's datagrams; on the client a thread sends
///            datagrams while the main thread takes events. --ops of each; both sides check
///            every byte and each channel's order (upstream's order: no order across channels).
///   upstream: against upstream NetFR's test programs (telescope-proj/netfr test/host and
///            test/client, tests/interop/netfr_upstream_*.sh), which write and expect one buffer
///            of 128 MiB on the primary channel and datagrams on the secondary. Client: one
///            buffer of --max-frame bytes; each of --ops writes must fill it whole with the byte
///            --fill (upstream's host never writes its memory: the test makes its allocator
///            fill it); then the buffer is given back; meanwhile 64 datagrams go to the host one
///            at a time (more than the credits: its acknowledgements must come back). Host: a
///            --max-frame source, written --ops times into the client's buffer (each time
///            after the client gave it back), and the client's own datagrams must read
///            "Hello server" (none to it: host_upstream says why).
#include <errno.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "apps/netfr/bench.h"
#include "apps/netfr/include/netfr/netfr.h"
#include "apps/netfr/local_stack.h"

namespace {

int g_fail = 0;
unsigned long long U(std::uint64_t v) { return v; }
#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                   \
      std::printf("\n");                                          \
      std::fflush(stdout);                                        \
      std::exit(1);                                               \
    }                                                             \
  } while (0)

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// The bytes of message `seq`: 64-bit words of a simple mix, so that any misplaced, stale or
/// foreign byte shows.
void fill(void* p, std::uint64_t len, std::uint64_t seq) {
  auto* b = static_cast<std::uint8_t*>(p);
  std::uint64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const std::uint64_t w = (seq << 40) ^ (i * 0x9E3779B97F4A7C15ull) ^ 0x5bd1e995ull;
    std::memcpy(b + i, &w, 8);
  }
  for (; i < len; ++i) b[i] = static_cast<std::uint8_t>(seq + i);
}
bool check(const void* p, std::uint64_t len, std::uint64_t seq) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  std::uint64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const std::uint64_t w = (seq << 40) ^ (i * 0x9E3779B97F4A7C15ull) ^ 0x5bd1e995ull;
    if (std::memcmp(b + i, &w, 8) != 0) return false;
  }
  for (; i < len; ++i)
    if (b[i] != static_cast<std::uint8_t>(seq + i)) return false;
  return true;
}

constexpr std::uint64_t kEnd = ~0ull;
constexpr std::uint64_t KiB = 1024, MiB = 1024 * 1024;

std::vector<std::uint64_t> buffer_sizes(std::uint64_t max_frame) {
  std::vector<std::uint64_t> s{4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB};
  if (max_frame > 16 * MiB) s.push_back(64 * MiB);
  return s;
}
std::vector<std::uint64_t> frame_sizes(std::uint64_t max_frame) {
  std::vector<std::uint64_t> f;
  for (std::uint64_t s = KiB; s <= max_frame; s *= 4) {
    f.push_back(s);
    if (s * 3 <= max_frame) f.push_back(s * 3);  // in between: not a buffer's size
  }
  if (f.back() != max_frame) f.push_back(max_frame);
  return f;
}

struct Args {
  std::string scenario, host_ip;
  int sessions = 1;
  std::uint64_t max_frame = 4 * MiB;
  int ops = 2000;
  int fill_byte = 0xA5;
};

NFRInitOpts opts(const Args& a, bool nonblocking) {
  NFRInitOpts o{};
  o.link = nullptr;
  o.peer = a.host_ip.empty() ? nullptr : a.host_ip.c_str();
  o.port = 5010;
  o.blocking = nonblocking ? 0 : 1;
  o.timeoutSec = 60;
  // Ours: the total order, checked below; threads and upstream: upstream's order.
  o.totalOrder = a.scenario == "upstream" || a.scenario == "threads" ? 0 : 1;
  return o;
}

// ---- host ----

/// Waits for the client's datagram on `ch`; returns its udata.
std::uint64_t host_read(PNFRHost h, int ch, std::vector<std::uint8_t>& buf, double timeout = 60) {
  const double end = now_s() + timeout;
  for (;;) {
    std::uint32_t len = static_cast<std::uint32_t>(buf.size());
    std::uint64_t ud = 0;
    const int r = nfrHostReadData(h, ch, buf.data(), &len, &ud);
    if (r == 0) {
      buf.resize(len);
      return ud;
    }
    CHECK(r == -EAGAIN, "nfrHostReadData: %d", r);
    CHECK(now_s() < end, "no datagram from the client");
  }
}

void wait_client(PNFRHost h) {
  const double end = now_s() + 60;
  while (nfrHostProcess(h) == -ENOTCONN) CHECK(now_s() < end, "no client connected");
  std::printf("host: client connected\n");
  std::fflush(stdout);
}

void wait_gone(PNFRHost h) {
  const double end = now_s() + 30;
  while (nfrHostProcess(h) != -ENOTCONN) CHECK(now_s() < end, "the client did not leave");
}

void host_frames(PNFRHost h, PNFRMemory mem, const Args& a) {
  const auto bufs = buffer_sizes(a.max_frame);
  // The client advertises its buffers right after connecting: wait for the first write to fit.
  std::uint64_t seq = 0;
  std::vector<std::uint8_t> rb(NETFR_MESSAGE_MAX_PAYLOAD_SIZE);
  for (std::uint64_t len : frame_sizes(a.max_frame)) {
    fill(nfrMemoryPointer(mem), len, seq);
    int idx;
    const double end = now_s() + 30;
    while ((idx = nfrHostWriteBufferUdata(mem, 0, 0, len, seq, nullptr)) == -EMSGSIZE ||
           idx == -ENOBUFS) {
      CHECK(now_s() < end, "no buffer for %llu bytes", U(len));
      nfrHostProcess(h);
    }
    CHECK(idx >= 0, "nfrHostWriteBuffer(%llu): %d", U(len), idx);
    std::size_t want = 0;
    while (bufs[want] < len) ++want;
    CHECK(static_cast<std::size_t>(idx) == want, "frame of %llu bytes went to buffer %d, not %zu",
          U(len), idx, want);
    ++seq;
    // A cursor update on the secondary channel, after the frame.
    std::uint8_t cur[64];
    fill(cur, sizeof cur, seq);
    CHECK(nfrHostSendData(h, NETFR_CHANNEL_SECONDARY, cur, sizeof cur, seq) == 0, "cursor");
    ++seq;
    rb.resize(NETFR_MESSAGE_MAX_PAYLOAD_SIZE);
    const std::uint64_t ack = host_read(h, NETFR_CHANNEL_PRIMARY, rb);
    CHECK(ack == seq - 2, "client answered %llu for frame %llu", U(ack), U(seq - 2));
    std::printf("host: frame %llu bytes -> buffer %d ok\n", U(len), idx);
  }
  // Larger than every buffer: refused, nothing written.
  const std::uint64_t too = bufs.back() + 4096;
  std::vector<std::uint8_t> big(too);
  PNFRMemory bm = nfrHostAttachMemory(h, big.data(), big.size(), NETFR_CHANNEL_PRIMARY);
  CHECK(bm, "attach");
  const int r = nfrHostWriteBufferUdata(bm, 0, 0, too, seq, nullptr);
  CHECK(r == -ENOBUFS, "a frame of %llu bytes (larger than every buffer): %d, not -ENOBUFS", U(too),
        r);
  // An offset pushing a fitting frame past the largest buffer: refused too.
  const int r2 = nfrHostWriteBufferUdata(mem, 0, bufs.back() - 1024, 4096, seq, nullptr);
  CHECK(r2 == -ENOBUFS, "offset past the buffer: %d", r2);
  std::printf("host: too-large frame refused (-ENOBUFS)\n");
  std::uint8_t end[8] = {};
  CHECK(nfrHostSendData(h, NETFR_CHANNEL_SECONDARY, end, sizeof end, kEnd) == 0, "end");
}

/// The source of a write may change only once its callback ran: a ring of sources.
void source_done(const void** uData) { *static_cast<int*>(const_cast<void*>(uData[0])) = 0; }

void host_order(PNFRHost h, PNFRMemory, const Args& a) {
  constexpr int kSources = 8;
  static std::vector<std::uint8_t> src[kSources];
  static PNFRMemory mems[kSources];
  static int busy[kSources];
  for (int k = 0; k < kSources; ++k)
    if (!mems[k]) {
      src[k].resize(256 * KiB);
      mems[k] = nfrHostAttachMemory(h, src[k].data(), src[k].size(), NETFR_CHANNEL_PRIMARY);
      CHECK(mems[k], "attach");
    }
  int next = 0;
  std::mt19937 rng(7);
  std::uint8_t msg[NETFR_MESSAGE_MAX_PAYLOAD_SIZE];
  std::uint64_t writes = 0, datagrams = 0;
  for (std::uint64_t seq = 0; seq < static_cast<std::uint64_t>(a.ops); ++seq) {
    const unsigned kind = rng() % 4;
    if (kind == 0 || kind == 1) {  // a frame on the primary
      const std::uint64_t top = std::min<std::uint64_t>(a.max_frame, 256 * KiB);
      const std::uint64_t len = 1024 + rng() % (top - 1023);
      const int k = next++ % kSources;
      const double end = now_s() + 60;
      while (busy[k] == 1) {
        CHECK(now_s() < end, "write %d never completed", k);
        nfrHostProcess(h);
      }
      CHECK(busy[k] == 0, "a write failed");
      fill(src[k].data(), len, seq);
      NFRCallbackInfo cb{};
      cb.callback = source_done;
      cb.uData[0] = &busy[k];
      busy[k] = 1;
      int idx;
      while ((idx = nfrHostWriteBufferUdata(mems[k], 0, 0, len, seq, &cb)) == -ENOBUFS ||
             idx == -EMSGSIZE) {
        CHECK(now_s() < end, "no free buffer");
        nfrHostProcess(h);
      }
      CHECK(idx >= 0, "write: %d", idx);
      ++writes;
    } else {  // a datagram, mostly cursor updates on the secondary
      const int ch = kind == 2 ? NETFR_CHANNEL_SECONDARY : NETFR_CHANNEL_PRIMARY;
      const std::uint32_t len = 1 + rng() % (kind == 2 ? 256 : NETFR_MESSAGE_MAX_PAYLOAD_SIZE);
      fill(msg, len, seq);
      const int r = nfrHostSendData(h, ch, msg, len, seq);
      CHECK(r == 0, "send: %d", r);
      ++datagrams;
    }
  }
  CHECK(nfrHostSendData(h, NETFR_CHANNEL_SECONDARY, msg, 8, kEnd) == 0, "end");
  std::printf("host: issued %llu frame writes and %llu datagrams\n", U(writes), U(datagrams));
}

void host_credits(PNFRHost h) {
  // client -> host: do not read until the client ran out (it says so on the secondary... which
  // we do not read either): wait a while, then read everything in order.
  const double t0 = now_s();
  while (now_s() < t0 + 1.5) nfrHostProcess(h);
  std::vector<std::uint8_t> rb;
  std::uint64_t n = 0;
  for (;;) {
    rb.resize(NETFR_MESSAGE_MAX_PAYLOAD_SIZE);
    const std::uint64_t ud = host_read(h, NETFR_CHANNEL_PRIMARY, rb);
    if (ud == kEnd) break;
    CHECK(ud == n, "client datagram %llu, expected %llu", U(ud), U(n));
    CHECK(check(rb.data(), rb.size(), ud), "client datagram %llu corrupt", U(ud));
    ++n;
  }
  std::printf("host: read %llu client datagrams in order\n", U(n));
  // host -> client: the client does not process for a while: we run out (non-blocking).
  std::uint8_t msg[256];
  std::uint64_t sent = 0;
  int r;
  for (;;) {
    fill(msg, sizeof msg, sent);
    r = nfrHostSendData(h, NETFR_CHANNEL_PRIMARY, msg, sizeof msg, sent);
    if (r != 0) break;
    ++sent;
  }
  CHECK(r == -EAGAIN, "send: %d", r);
  CHECK(sent == NETFR_CREDIT_COUNT - NETFR_RESERVED_CREDIT_COUNT + 1, "ran out after %llu",
        U(sent));
  std::printf("host: out of credits after %llu datagrams (-EAGAIN)\n", U(sent));
  const double end = now_s() + 30;
  while (sent < 300) {
    fill(msg, sizeof msg, sent);
    r = nfrHostSendData(h, NETFR_CHANNEL_PRIMARY, msg, sizeof msg, sent);
    if (r == 0)
      ++sent;
    else {
      CHECK(r == -EAGAIN, "send: %d", r);
      CHECK(now_s() < end, "credits did not come back");
      nfrHostProcess(h);
    }
  }
  while (nfrHostSendData(h, NETFR_CHANNEL_PRIMARY, msg, 8, kEnd) == -EAGAIN) nfrHostProcess(h);
  std::printf("host: credits recovered, %llu datagrams sent\n", U(sent));
}

// ---- bench: NetFR buffer writes against bare RDMA WRITEs of the same size ----

constexpr std::uint64_t kCtl = 0xC0DE000000000000ull;
const std::vector<std::uint64_t> kBenchSizes{4 * KiB, 64 * KiB, 1 * MiB, 1920ull * 1080 * 4,
                                             3840ull * 2160 * 4};
int bench_iters(std::uint64_t len) {
  return len <= 64 * KiB ? 400 : len <= MiB ? 150 : len <= 10 * MiB ? 40 : 20;
}
struct BenchCtl {
  std::uint32_t index, raw, iters, pad;
};

std::uint64_t mono_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

void host_bench(PNFRHost h) {
  static std::vector<std::uint8_t> src(kBenchSizes.back());
  PNFRMemory mem = nfrHostAttachMemory(h, src.data(), src.size(), NETFR_CHANNEL_PRIMARY);
  CHECK(mem, "attach");
  std::vector<std::uint8_t> rb;
  for (std::uint32_t i = 0; i < kBenchSizes.size(); ++i) {
    const std::uint64_t len = kBenchSizes[i];
    const int iters = bench_iters(len);
    fill(src.data(), len, i);
    for (std::uint32_t raw = 1; raw <= 1; raw -= 1) {  // raw (1), then NetFR (0)
      BenchCtl ctl{i, raw, static_cast<std::uint32_t>(iters), 0};
      CHECK(nfrHostSendData(h, NETFR_CHANNEL_PRIMARY, &ctl, sizeof ctl, kCtl) == 0, "ctl");
      rb.resize(NETFR_MESSAGE_MAX_PAYLOAD_SIZE);
      CHECK(host_read(h, NETFR_CHANNEL_PRIMARY, rb) == kCtl, "ready");
      for (int k = 0; k < iters; ++k) {
        const std::uint64_t t0 = mono_ns();
        if (raw) {
          const std::uint64_t mark[2] = {t0, static_cast<std::uint64_t>(k) + 1};
          std::memcpy(src.data() + len - 16, mark, 16);
          CHECK(nfr_bench_host_raw_write(h, mem, len, i) == 0, "raw write");
        } else {
          const int idx = nfrHostWriteBufferUdata(mem, 0, 0, len, t0, nullptr);
          CHECK(idx == static_cast<int>(i), "write: %d", idx);
        }
        rb.resize(NETFR_MESSAGE_MAX_PAYLOAD_SIZE);
        CHECK(host_read(h, NETFR_CHANNEL_PRIMARY, rb) == static_cast<std::uint64_t>(k), "answer");
      }
      if (raw == 0) break;
    }
    std::printf("host: bench %llu bytes done\n", U(len));
  }
  std::uint8_t end[8] = {};
  CHECK(nfrHostSendData(h, NETFR_CHANNEL_SECONDARY, end, sizeof end, kEnd) == 0, "end");
}

void client_bench(PNFRClient c, std::vector<std::span<std::uint8_t>>& store) {
  auto* ev = new NFRClientEvent;
  std::printf(
      "| frame | bytes | bare RDMA WRITE p50 / p99 (us) | NetFR write + notification p50 / p99 "
      "(us) | NetFR / bare (p50) |\n");
  std::printf("|---|---|---|---|---|\n");
  double raw_p50 = 0, raw_p99 = 0;
  auto pct = [](std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0
                     : v[std::min(v.size() - 1, static_cast<std::size_t>(p / 100 * v.size()))];
  };
  for (;;) {
    int r = nfrClientProcess(c, -1, ev);
    CHECK(r >= 0, "process: %d", r);
    if (r == 0) continue;
    if (ev->udata == kEnd) break;
    CHECK(ev->type == NFR_CLIENT_EVENT_DATA && ev->udata == kCtl,
          "expected a bench control message");
    BenchCtl ctl;
    std::memcpy(&ctl, ev->inlineData, sizeof ctl);
    CHECK(ctl.index < store.size(), "bench index");
    const std::uint64_t len = kBenchSizes[ctl.index];
    std::uint8_t ready[8] = {};
    CHECK(nfrClientSendData(c, NETFR_CHANNEL_PRIMARY, ready, 8, kCtl) == 0, "ready");
    std::vector<double> lat;
    for (std::uint32_t k = 0; k < ctl.iters; ++k) {
      double us = 0;
      if (ctl.raw) {
        const std::uint8_t* tail = store[ctl.index].data() + len - 16;
        std::uint64_t mark[2];
        const double end = now_s() + 30;
        for (;;) {
          std::memcpy(mark, tail, 16);
          if (mark[1] == k + 1) break;
          r = nfrClientProcess(c, -1, ev);
          CHECK(r == 0, "an event during a bare write: %d", r);
          CHECK(now_s() < end, "bare write %u never landed", k);
        }
        us = static_cast<double>(mono_ns() - mark[0]) / 1e3;
      } else {
        const double end = now_s() + 30;
        while ((r = nfrClientProcess(c, -1, ev)) == 0) CHECK(now_s() < end, "no frame");
        CHECK(r == 1 && ev->type == NFR_CLIENT_EVENT_MEM_WRITE, "expected a frame");
        us = static_cast<double>(mono_ns() - ev->udata) / 1e3;
        CHECK(nfrClientBufferAck(c, ev->memRegion) == 0, "buffer ack");
      }
      if (k >= 3) lat.push_back(us);  // warm-up
      std::uint8_t ok[8] = {};
      CHECK(nfrClientSendData(c, NETFR_CHANNEL_PRIMARY, ok, 8, k) == 0, "answer");
    }
    CHECK(check(store[ctl.index].data(), len - 16, ctl.index), "bench frame corrupt");
    if (ctl.raw) {
      raw_p50 = pct(lat, 50);
      raw_p99 = pct(lat, 99);
    } else {
      const char* name = len == 1920ull * 1080 * 4   ? "1080p RGBA"
                         : len == 3840ull * 2160 * 4 ? "4K RGBA"
                                                     : "-";
      std::printf("| %s | %llu | %.1f / %.1f | %.1f / %.1f | %.2f |\n", name, U(len), raw_p50,
                  raw_p99, pct(lat, 50), pct(lat, 99), raw_p50 > 0 ? pct(lat, 50) / raw_p50 : 0);
      std::fflush(stdout);
    }
  }
  delete ev;
}

// ---- threads ----

/// Reads the peer's datagrams on `ch` (host side): udata 0, 1, ... each with fill() bytes, then
/// kEnd. Returns false while the end has not come.
bool host_read_seq(PNFRHost h, int ch, std::uint64_t& next) {
  std::uint8_t buf[NETFR_MESSAGE_MAX_PAYLOAD_SIZE];
  for (;;) {
    std::uint32_t len = sizeof buf;
    std::uint64_t ud = 0;
    const int r = nfrHostReadData(h, ch, buf, &len, &ud);
    if (r == -EAGAIN) return false;
    CHECK(r == 0, "nfrHostReadData: %d (%s; %llu read)", r, nfrHostStats(h), U(next));
    if (ud == kEnd) return true;
    CHECK(ud == next && check(buf, len, ud), "client datagram %llu where %llu was due", U(ud),
          U(next));
    ++next;
  }
}

void atomic_done(const void** uData) {
  static_cast<std::atomic<int>*>(const_cast<void*>(uData[0]))->store(0);
}

void host_threads(PNFRHost h, const Args& a) {
  const std::uint64_t n = static_cast<std::uint64_t>(a.ops);
  static std::vector<std::uint8_t> src(64 * KiB);
  PNFRMemory mem = nfrHostAttachMemory(h, src.data(), src.size(), NETFR_CHANNEL_PRIMARY);
  CHECK(mem, "attach");
  std::atomic<int> busy{0};
  std::atomic<bool> frames_done{false}, cursors_done{false};
  const double end = now_s() + 60;
  // Frames: one source, rewritten once the callback says the last write went.
  std::thread frames([&] {
    std::mt19937 rng(11);
    for (std::uint64_t seq = 0; seq <= n; ++seq) {
      while (busy.load()) {
        CHECK(now_s() < end, "frame %llu: the last write never completed", U(seq));
        std::this_thread::yield();
      }
      if (seq == n) break;
      const std::uint64_t len = 4 * KiB + rng() % (60 * KiB);
      fill(src.data(), len, seq);
      NFRCallbackInfo cb{};
      cb.callback = atomic_done;
      cb.uData[0] = &busy;
      busy = 1;
      int idx;
      while ((idx = nfrHostWriteBufferUdata(mem, 0, 0, len, seq, &cb)) == -ENOBUFS) {
        CHECK(now_s() < end, "frame %llu: no free buffer", U(seq));
        std::this_thread::yield();
      }
      CHECK(idx >= 0, "frame thread: nfrHostWriteBuffer: %d", idx);
    }
    std::uint8_t e[8] = {};
    while (nfrHostSendData(h, NETFR_CHANNEL_PRIMARY, e, sizeof e, kEnd) == -EAGAIN)
      std::this_thread::yield();
    frames_done = true;
  });
  std::thread cursors([&] {
    std::uint8_t msg[64];
    for (std::uint64_t seq = 0; seq <= n; ++seq) {
      fill(msg, sizeof msg, seq);
      int r;
      while ((r = nfrHostSendData(h, NETFR_CHANNEL_SECONDARY, msg, sizeof msg,
                                  seq == n ? kEnd : seq)) == -EAGAIN) {
        CHECK(now_s() < end, "cursor %llu: no credit (%s)", U(seq), nfrHostStats(h));
        std::this_thread::yield();
      }
      CHECK(r == 0, "cursor thread: nfrHostSendData: %d", r);
    }
    cursors_done = true;
  });
  std::uint64_t next = 0;
  bool client_done = false;
  while (!frames_done || !cursors_done || !client_done) {
    CHECK(now_s() < end, "timed out (frames %d cursors %d client %d)", int(frames_done.load()),
          int(cursors_done.load()), int(client_done));
    const int pr = nfrHostProcess(h);
    CHECK(pr == 0, "nfrHostProcess: %d (%s; %llu client datagrams read)", pr, nfrHostStats(h),
          U(next));
    if (!client_done) client_done = host_read_seq(h, NETFR_CHANNEL_SECONDARY, next);
  }
  frames.join();
  cursors.join();
  CHECK(next == n, "%llu client datagrams, not %llu", U(next), U(n));
  // The client leaves once it saw this: until then its last datagrams may still be on the way.
  std::uint8_t bye[8] = {};
  int br;
  while ((br = nfrHostSendData(h, NETFR_CHANNEL_SECONDARY, bye, sizeof bye, kEnd - 1)) == -EAGAIN)
    nfrHostProcess(h);
  CHECK(br == 0, "bye: %d", br);
  std::printf("host: %llu frames and %llu cursors from two threads, %llu client datagrams\n", U(n),
              U(n), U(next));
}

void client_threads(PNFRClient c, const Args& a) {
  const std::uint64_t n = static_cast<std::uint64_t>(a.ops);
  for (int i = 0; i < 4; ++i)
    CHECK(nfrClientAllocMemory(c, 64 * KiB, NETFR_CHANNEL_PRIMARY), "alloc");
  const double end = now_s() + 60;
  std::atomic<bool> sent_all{false};
  std::thread sender([&] {
    std::uint8_t msg[128];
    for (std::uint64_t seq = 0; seq <= n; ++seq) {
      fill(msg, sizeof msg, seq);
      int r;
      while ((r = nfrClientSendData(c, NETFR_CHANNEL_SECONDARY, msg, sizeof msg,
                                    seq == n ? kEnd : seq)) == -EAGAIN) {
        CHECK(now_s() < end, "client datagram %llu: no credit (%s)", U(seq), nfrClientStats(c));
        std::this_thread::yield();
      }
      CHECK(r == 0, "sender thread: nfrClientSendData: %d", r);
    }
    sent_all = true;
  });
  auto* ev = new NFRClientEvent;
  std::uint64_t next[2] = {0, 0};
  bool ended[2] = {false, false}, bye = false;
  // Non-blocking sends do not move the stack (upstream's rule): this thread keeps processing,
  // which brings the host's acknowledgements in, until the host read everything (its bye).
  while (!ended[0] || !ended[1] || !bye) {
    CHECK(now_s() < end, "timed out: %llu frames, %llu cursors", U(next[0]), U(next[1]));
    const int r = nfrClientProcess(c, -1, ev);
    CHECK(r >= 0, "nfrClientProcess: %d", r);
    if (r == 0) continue;
    const unsigned ch = ev->channelIndex;
    if (ev->type == NFR_CLIENT_EVENT_DATA && ev->udata == kEnd - 1) {
      CHECK(sent_all && ended[1], "the host's bye before the end");
      bye = true;
      continue;
    }
    CHECK(ch < 2 && !ended[ch], "event on channel %u", ch);
    if (ev->type == NFR_CLIENT_EVENT_DATA && ev->udata == kEnd) {
      ended[ch] = true;
      continue;
    }
    CHECK(ev->udata == next[ch], "channel %u: %llu where %llu was due", ch, U(ev->udata),
          U(next[ch]));
    if (ev->type == NFR_CLIENT_EVENT_MEM_WRITE) {
      CHECK(ch == 0, "a write on the secondary");
      const auto* p = static_cast<const std::uint8_t*>(nfrMemoryPointer(ev->memRegion));
      CHECK(check(p + ev->payloadOffset, ev->payloadLength, ev->udata), "frame %llu corrupt",
            U(ev->udata));
      nfrAckBuffer(ev->memRegion);
    } else {
      CHECK(ch == 1 && check(ev->inlineData, ev->payloadLength, ev->udata),
            "cursor %llu corrupt or on the primary", U(ev->udata));
    }
    ++next[ch];
  }
  sender.join();
  CHECK(next[0] == n && next[1] == n, "%llu frames, %llu cursors", U(next[0]), U(next[1]));
  std::printf(
      "client: %llu frames and %llu cursors in each channel's order, byte-exact; %llu "
      "datagrams sent from a second thread\n",
      U(n), U(n), U(n));
  delete ev;
}

// ---- against upstream's test programs ----

constexpr char kHelloServer[] = "Hello server";  // what upstream's test/client sends, with NUL

/// Host: upstream's test/client advertises one 128 MiB buffer on the primary channel, gives it
/// back after each write, and right after an event (at most once a second) sends kHelloServer
/// on the secondary. No datagrams to it: upstream's client hands a HostData out again on every
/// nfrClientProcess and acknowledges it each time until its send queue is full, then asserts
/// (its receive context never leaves HAS_DATA); upstream's own host never sends one to it.
void host_upstream(PNFRHost h, PNFRMemory mem, const Args& a) {
  fill(nfrMemoryPointer(mem), a.max_frame, 7);
  int writes = 0, hellos = 0;
  const int want_hellos = std::min(a.ops, 2);
  const double end = now_s() + 600;
  std::vector<std::uint8_t> rb(NETFR_MESSAGE_MAX_PAYLOAD_SIZE);
  while (writes < a.ops || hellos < want_hellos) {
    CHECK(now_s() < end, "timed out: %d writes, %d hellos", writes, hellos);
    const int pr = nfrHostProcess(h);
    CHECK(pr == 0, "the client left: %d", pr);
    if (writes < a.ops) {
      const int idx = nfrHostWriteBufferUdata(mem, 0, 0, a.max_frame,
                                              static_cast<std::uint64_t>(writes), nullptr);
      if (idx >= 0) {
        ++writes;
        std::printf("host: write %d of %llu bytes into the client's buffer %d\n", writes,
                    U(a.max_frame), idx);
        std::fflush(stdout);
      } else {
        CHECK(idx == -ENOBUFS, "nfrHostWriteBuffer: %d", idx);
      }
    }
    rb.resize(NETFR_MESSAGE_MAX_PAYLOAD_SIZE);
    std::uint32_t len = static_cast<std::uint32_t>(rb.size());
    std::uint64_t ud = 0;
    const int r = nfrHostReadData(h, NETFR_CHANNEL_SECONDARY, rb.data(), &len, &ud);
    if (r == 0) {
      CHECK(len == sizeof kHelloServer && std::memcmp(rb.data(), kHelloServer, len) == 0,
            "the client's datagram %d is not \"%s\" (%u bytes)", hellos, kHelloServer, len);
      ++hellos;
    } else {
      CHECK(r == -EAGAIN, "nfrHostReadData: %d", r);
    }
  }
  // One more write goes only once the client gave the buffer back after the last one.
  while (nfrHostWriteBuffer(mem, 0, 0, a.max_frame, nullptr) == -ENOBUFS) {
    CHECK(now_s() < end, "the client never gave the buffer back after write %d", writes);
    CHECK(nfrHostProcess(h) == 0, "the client left");
  }
  std::printf(
      "host: %d writes of %llu bytes, each given back (write %d shows the last came "
      "back); %d \"%s\" read\n",
      writes, U(a.max_frame), writes + 1, hellos, kHelloServer);
}

/// Client: upstream's test/host writes its 128 MiB (never written, so what its allocator left)
/// into the smallest buffer that holds it, again each time the buffer comes back, and reads
/// datagrams on the secondary channel (acknowledging each: two at a time at most).
void client_upstream(PNFRClient c, const Args& a) {
  PNFRMemory m = nfrClientAllocMemory(c, a.max_frame, NETFR_CHANNEL_PRIMARY);
  CHECK(m, "attach %llu bytes", U(a.max_frame));
  auto* p = static_cast<std::uint8_t*>(nfrMemoryPointer(m));
  const auto fillb = static_cast<std::uint8_t>(a.fill_byte);
  const auto other = static_cast<std::uint8_t>(~fillb);
  std::memset(p, other, a.max_frame);
  auto* ev = new NFRClientEvent;
  int writes = 0, sent = 0;
  double next_dg = 0;
  const double end = now_s() + 900;
  while (writes < a.ops || sent < 64) {
    CHECK(now_s() < end, "timed out: %d writes, %d datagrams sent", writes, sent);
    const int r = nfrClientProcess(c, -1, ev);
    CHECK(r >= 0, "nfrClientProcess: %d", r);
    if (r == 1) {
      CHECK(ev->type == NFR_CLIENT_EVENT_MEM_WRITE, "event type %u", ev->type);
      CHECK(ev->memRegion == m && ev->payloadOffset == 0 && ev->payloadLength == a.max_frame,
            "write of %u bytes at %u", ev->payloadLength, ev->payloadOffset);
      std::uint64_t bad = 0;
      for (std::uint64_t i = 0; i < a.max_frame; ++i) bad += p[i] != fillb;
      CHECK(bad == 0, "write %d: %llu of %llu bytes are not 0x%02x", writes + 1, U(bad),
            U(a.max_frame), fillb);
      ++writes;
      std::printf("client: write %d: %llu bytes, every one 0x%02x\n", writes, U(a.max_frame),
                  fillb);
      std::fflush(stdout);
      std::memset(p, other, a.max_frame);
      CHECK(nfrClientBufferAck(c, m) == 0, "buffer ack");
    }
    // One datagram at a time: upstream's nfrHostReadData acknowledges every waiting datagram
    // at once with two ack contexts and asserts when a third is waiting.
    if (sent < 64 && now_s() >= next_dg &&
        nfrClientCredits(c, NETFR_CHANNEL_SECONDARY) == NETFR_CREDIT_COUNT) {
      char msg[32];
      const int n = std::snprintf(msg, sizeof msg, "Hello host %d", sent);
      const int s2 =
          nfrClientSendData(c, NETFR_CHANNEL_SECONDARY, msg, static_cast<std::uint32_t>(n + 1),
                            static_cast<std::uint64_t>(sent));
      if (s2 == 0) {
        ++sent;
        next_dg = now_s() + 0.05;
      } else {
        CHECK(s2 == -EAGAIN, "nfrClientSendData: %d", s2);
      }
    }
  }
  std::printf("client: %d writes of %llu bytes checked; %d datagrams acknowledged\n", writes,
              U(a.max_frame), sent);
  delete ev;
}

int run_host(const Args& a) {
  PNFRHost h = nullptr;
  const bool nb = a.scenario == "credits" || a.scenario == "upstream" || a.scenario == "threads";
  NFRInitOpts o = opts(a, nb);
  int r = nfrHostInit(&o, &h);
  CHECK(r == 0, "nfrHostInit: %d", r);
  const std::uint64_t src_size = std::max<std::uint64_t>(a.max_frame, 256 * KiB);
  std::vector<std::uint8_t> src(src_size);
  PNFRMemory mem = nfrHostAttachMemory(h, src.data(), src.size(), NETFR_CHANNEL_PRIMARY);
  CHECK(mem, "nfrHostAttachMemory");
  std::printf("host: listening\n");
  std::fflush(stdout);
  for (int s = 0; s < a.sessions; ++s) {
    wait_client(h);
    CHECK(nfrHostClientsConnected(h, 0) == 1 && nfrHostClientsConnected(h, 1) == 1, "connected");
    if (a.scenario == "killed" && s == 0) {
      const double t0 = now_s();
      wait_gone(h);
      std::printf("host: the killed client's slot freed after %.1f s\n", now_s() - t0);
      std::fflush(stdout);
      continue;
    }
    if (a.scenario == "frames" || a.scenario == "restart" || a.scenario == "refuse" ||
        a.scenario == "killed")
      host_frames(h, mem, a);
    else if (a.scenario == "order")
      host_order(h, mem, a);
    else if (a.scenario == "credits")
      host_credits(h);
    else if (a.scenario == "bench")
      host_bench(h);
    else if (a.scenario == "threads")
      host_threads(h, a);
    else if (a.scenario == "upstream") {
      host_upstream(h, mem, a);
      break;  // upstream's client does not leave by itself: we end the session
    }
    wait_gone(h);
    std::printf("host: session %d done, client gone\n", s + 1);
    std::fflush(stdout);
  }
  std::printf("host stats: %s\n", nfrHostStats(h));
  nfrHostFree(&h);
  std::printf("PASS netfr host %s\n", a.scenario.c_str());
  return 0;
}

// ---- client ----

struct Verifier {
  std::uint64_t next_udata = 0;
  std::uint32_t next_serial = 1;
  std::uint64_t events = 0, writes = 0, bytes = 0;
};

int run_client(const Args& a) {
  PNFRClient c = nullptr;
  const bool nb = a.scenario == "credits" || a.scenario == "upstream" || a.scenario == "threads";
  NFRInitOpts o = opts(a, nb);
  int r = nfrClientInit(&o, nullptr, &c);
  if (r == 0) r = nfrClientConnectWait(c);  // upstream's nfrClientConnect until done
  CHECK(r == 0, "nfrClientInit: %d", r);
  std::printf("client: connected\n");
  std::vector<std::span<std::uint8_t>> store;  // the stack's memory (zero copy)
  std::vector<std::uint64_t> sizes;
  if (a.scenario == "order") {
    for (int i = 0; i < 8; ++i) sizes.push_back(256 * KiB);
  } else if (a.scenario == "bench") {
    sizes = kBenchSizes;
  } else if (a.scenario != "credits" && a.scenario != "upstream" && a.scenario != "threads") {
    sizes = buffer_sizes(a.max_frame);
  }
  // Attach the largest first: indices follow the attach order, and the host checks that it
  // chose by size, not by index... except for the frames scenario, which names them by size.
  for (std::uint64_t s : sizes) {
    PNFRMemory m = nfrClientAllocMemory(c, s, NETFR_CHANNEL_PRIMARY);
    CHECK(m, "attach");
    store.emplace_back(static_cast<std::uint8_t*>(nfrMemoryPointer(m)), s);
    std::memset(store.back().data(), 0xEE, s);
  }
  if (a.scenario == "killed") {  // connected and silent until the test kills it
    std::printf("client: connected, waiting to be killed\n");
    std::fflush(stdout);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (a.scenario == "refuse") {
    PNFRClient second = nullptr;
    int r2 = nfrClientInit(&o, nullptr, &second);
    CHECK(r2 == 0, "nfrClientInit: %d", r2);
    while ((r2 = nfrClientConnect(second)) == -EAGAIN) {
    }
    CHECK(r2 == -ECONNREFUSED, "a second client got %d, not -ECONNREFUSED", r2);
    nfrClientFree(&second);
    std::printf("client: a second client was refused (-ECONNREFUSED)\n");
  }
  if (a.scenario == "bench") {
    client_bench(c, store);
  } else if (a.scenario == "upstream") {
    client_upstream(c, a);
  } else if (a.scenario == "threads") {
    client_threads(c, a);
  } else if (a.scenario == "credits") {
    std::uint8_t msg[512];
    std::uint64_t sent = 0;
    for (;;) {
      fill(msg, sizeof msg, sent);
      r = nfrClientSendData(c, NETFR_CHANNEL_PRIMARY, msg, sizeof msg, sent);
      if (r != 0) break;
      ++sent;
    }
    CHECK(r == -EAGAIN, "send: %d", r);
    CHECK(sent == NETFR_CREDIT_COUNT - NETFR_RESERVED_CREDIT_COUNT + 1, "ran out after %llu",
          U(sent));
    std::printf("client: out of credits after %llu datagrams (-EAGAIN)\n", U(sent));
    NFRClientEvent* ev = new NFRClientEvent;
    const double end = now_s() + 30;
    while (sent < 200) {
      fill(msg, sizeof msg, sent);
      r = nfrClientSendData(c, NETFR_CHANNEL_PRIMARY, msg, sizeof msg, sent);
      if (r == 0)
        ++sent;
      else {
        CHECK(r == -EAGAIN, "send: %d", r);
        CHECK(now_s() < end, "credits did not come back");
        CHECK(nfrClientProcess(c, -1, ev) == 0, "unexpected event");
      }
    }
    while (nfrClientSendData(c, NETFR_CHANNEL_PRIMARY, msg, 8, kEnd) == -EAGAIN)
      nfrClientProcess(c, -1, ev);
    std::printf("client: credits recovered, %llu datagrams sent\n", U(sent));
    // Now do not process for a while: the host runs out.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    std::uint64_t n = 0;
    for (;;) {
      r = nfrClientProcess(c, -1, ev);
      CHECK(r >= 0, "process: %d", r);
      if (r == 0) continue;
      if (ev->udata == kEnd) break;
      CHECK(ev->udata == n && check(ev->inlineData, ev->payloadLength, n), "datagram %llu", U(n));
      ++n;
    }
    std::printf("client: %llu host datagrams in order\n", U(n));
    delete ev;
  } else {
    Verifier v;
    auto* ev = new NFRClientEvent;
    const double end = now_s() + 300;
    for (;;) {
      CHECK(now_s() < end, "timed out after %llu events", U(v.events));
      r = nfrClientProcess(c, -1, ev);
      CHECK(r >= 0, "nfrClientProcess: %d", r);
      if (r == 0) continue;
      CHECK(ev->serial == v.next_serial, "serial %u, expected %u", ev->serial, v.next_serial);
      ++v.next_serial;
      ++v.events;
      if (ev->type == NFR_CLIENT_EVENT_DATA && ev->udata == kEnd) break;
      CHECK(ev->udata == v.next_udata, "message %llu arrived where %llu was due (channel %u)",
            U(ev->udata), U(v.next_udata), ev->channelIndex);
      ++v.next_udata;
      if (ev->type == NFR_CLIENT_EVENT_MEM_WRITE) {
        CHECK(ev->channelIndex == NETFR_CHANNEL_PRIMARY, "write on channel %u", ev->channelIndex);
        const auto* p = static_cast<const std::uint8_t*>(nfrMemoryPointer(ev->memRegion));
        CHECK(check(p + ev->payloadOffset, ev->payloadLength, ev->udata),
              "frame %llu (%u bytes) corrupt", U(ev->udata), ev->payloadLength);
        if (a.scenario != "order") {
          // The smallest buffer that fits.
          std::uint64_t want = 0;
          for (std::uint64_t s : sizes)
            if (s >= ev->payloadLength && (want == 0 || s < want)) want = s;
          CHECK(nfrMemorySize(ev->memRegion) == want, "frame of %u bytes in a %llu-byte buffer",
                ev->payloadLength, U(nfrMemorySize(ev->memRegion)));
        }
        ++v.writes;
        v.bytes += ev->payloadLength;
        // The buffer back, then the answer (one QP: the host sees them in this order).
        CHECK(nfrClientBufferAck(c, ev->memRegion) == 0, "buffer ack");
        if (a.scenario != "order") {
          std::uint8_t ok[8] = {1};
          CHECK(nfrClientSendData(c, NETFR_CHANNEL_PRIMARY, ok, sizeof ok, ev->udata) == 0,
                "answer");
        }
      } else {
        CHECK(check(ev->inlineData, ev->payloadLength, ev->udata), "datagram %llu corrupt",
              U(ev->udata));
      }
    }
    std::printf("client: %llu messages in total order, %llu frames (%llu bytes) byte-exact\n",
                U(v.events), U(v.writes), U(v.bytes));
    delete ev;
  }
  std::printf("client stats: %s\n", nfrClientStats(c));
  nfrClientFree(&c);
  std::printf("PASS netfr client %s\n", a.scenario.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  roce::netfr::use_local_stack();  // NETFR_LINK: in-process links as well as attach=SOCKET
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s host|client SCENARIO [HOST_IP] [--sessions N] "
                 "[--max-frame BYTES] [--ops N]\n",
                 argv[0]);
    return 2;
  }
  Args a;
  const std::string role = argv[1];
  a.scenario = argv[2];
  int i = 3;
  if (role == "client") {
    if (argc < 4) return 2;
    a.host_ip = argv[3];
    i = 4;
  }
  for (; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--sessions")
      a.sessions = std::atoi(argv[i + 1]);
    else if (k == "--max-frame")
      a.max_frame = std::strtoull(argv[i + 1], nullptr, 0);
    else if (k == "--ops")
      a.ops = std::atoi(argv[i + 1]);
    else if (k == "--fill")
      a.fill_byte = static_cast<int>(std::strtol(argv[i + 1], nullptr, 0));
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (a.max_frame < 4096 || a.max_frame > NETFR_MAX_BUFFER_SIZE || a.ops < 1 || a.sessions < 1) {
    std::fprintf(stderr, "--max-frame must be 4096 .. 256 MiB, --ops and --sessions >= 1\n");
    return 2;
  }
  (void)g_fail;
  return role == "host" ? run_host(a) : run_client(a);
}
