/// @file
/// roce-netfr-demo: a live frame stream over NetFR. The host renders synthetic RGBA frames (a
/// gradient moving a few pixels per frame, with a header: sequence, resolution, send time) at
/// a frame rate and writes each into the client's buffers (nfrHostWriteBuffer), with a cursor
/// stream (position datagrams on the secondary channel, two per frame). The client checks every
/// byte of every frame and every cursor message, prints a live progress line, and at the end
/// per resolution: frames delivered, dropped (must be 0), achieved fps, throughput, and the
/// latency from the host's write to the client's notification (p50, p99, p99.9, max), then
/// draws latency over time (--svg). Both sides on one machine share the monotonic clock;
/// across machines the latencies need synchronised clocks.
///   roce-netfr-demo host   [--res 1080p,4k] [--fps 60] [--seconds 5]
///   roce-netfr-demo client HOST_IP [--svg FILE] [--order strict|relaxed]
/// The link: NETFR_LINK (see netfr.h).
#include <errno.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "apps/netfr/include/netfr/netfr.h"
#include "apps/netfr/local_stack.h"

namespace {

std::uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}
unsigned long long U(std::uint64_t v) { return v; }

struct Res {
  const char* name;
  std::uint32_t w, h;
};
constexpr Res kRes[] = {{"1080p", 1920, 1080}, {"4k", 3840, 2160}};
const Res* find_res(const std::string& n) {
  for (const Res& r : kRes)
    if (n == r.name) return &r;
  return nullptr;
}

constexpr std::uint32_t kMagic = 0x4652464E;  // "NFRF"
/// The frame's first 64 bytes.
struct FrameHeader {
  std::uint32_t magic, res;  ///< res: index into kRes
  std::uint64_t seq, sent_ns;
  std::uint32_t w, h, shift, pad;
  std::uint8_t rest[24];
};
static_assert(sizeof(FrameHeader) == 64);

/// Datagrams (udata says which).
enum : std::uint64_t { kCursor = 1, kPhaseEnd = 2, kDone = 3 };
struct Cursor {
  std::uint64_t seq, sent_ns;
  std::int32_t x, y;
  std::uint32_t res, pad;
};
struct PhaseEnd {
  std::uint32_t res, fps;
  std::uint64_t frames, cursors;
  double seconds;
};

/// A row of the moving gradient, twice as wide so that any shift is one memcpy.
std::vector<std::uint8_t> base_row(std::uint32_t w) {
  std::vector<std::uint8_t> b(std::size_t{w} * 8);
  for (std::uint32_t x = 0; x < 2 * w; ++x) {
    const std::uint32_t v = x % w;
    b[4 * x + 0] = static_cast<std::uint8_t>(v * 255 / w);
    b[4 * x + 1] = static_cast<std::uint8_t>((v * 7) & 0xFF);
    b[4 * x + 2] = static_cast<std::uint8_t>(255 - v * 255 / w);
    b[4 * x + 3] = 0xFF;
  }
  return b;
}
/// Row y of frame `shift`: the base row moved by shift + y pixels (a diagonal drift).
const std::uint8_t* row_src(const std::vector<std::uint8_t>& base, std::uint32_t w,
                            std::uint32_t shift, std::uint32_t y) {
  return base.data() + 4 * ((shift + y) % w);
}

void render(std::uint8_t* f, const Res& r, std::uint32_t shift,
            const std::vector<std::uint8_t>& base) {
  const std::size_t stride = std::size_t{r.w} * 4;
  for (std::uint32_t y = 0; y < r.h; ++y)
    std::memcpy(f + y * stride, row_src(base, r.w, shift, y), stride);
}
bool verify(const std::uint8_t* f, const Res& r, std::uint32_t shift,
            const std::vector<std::uint8_t>& base) {
  const std::size_t stride = std::size_t{r.w} * 4;
  if (std::memcmp(f + 64, row_src(base, r.w, shift, 0) + 64, stride - 64) != 0) return false;
  for (std::uint32_t y = 1; y < r.h; ++y)
    if (std::memcmp(f + y * stride, row_src(base, r.w, shift, y), stride) != 0) return false;
  return true;
}

NFRInitOpts init_opts(const char* peer) {
  NFRInitOpts o{};
  o.peer = peer;
  o.port = 5010;
  o.timeoutSec = 30;
  o.blocking = 1;  // the demo waits for credits and buffers
  return o;
}

void write_done(const void** uData) { *static_cast<int*>(const_cast<void*>(uData[0])) = 0; }

int run_host(const std::vector<const Res*>& res, unsigned fps, double seconds) {
  PNFRHost h = nullptr;
  NFRInitOpts o = init_opts(nullptr);
  int r = nfrHostInit(&o, &h);
  if (r) {
    std::fprintf(stderr, "nfrHostInit: %d\n", r);
    return 1;
  }
  constexpr int kRing = 3;
  std::size_t max_bytes = 0;
  for (const Res* x : res)
    max_bytes = std::max<std::size_t>(max_bytes, std::size_t{x->w} * x->h * 4);
  // Frames are rendered in the stack's memory (zero copy; shared with roced when attached).
  PNFRMemory mem[kRing];
  int busy[kRing] = {};
  for (int k = 0; k < kRing; ++k)
    if (!(mem[k] = nfrHostAllocMemory(h, max_bytes, 0))) {
      std::fprintf(stderr, "host: nfrHostAllocMemory failed\n");
      return 1;
    }
  std::printf("host: waiting for a client\n");
  std::fflush(stdout);
  while (nfrHostProcess(h) == -ENOTCONN) {
  }
  std::printf("host: client connected\n");
  auto send_dg = [&](int ch, const void* p, std::uint32_t n, std::uint64_t ud) {
    int rr;
    while ((rr = nfrHostSendData(h, ch, p, n, ud)) == -EAGAIN) nfrHostProcess(h);
    return rr;
  };
  for (const Res* x : res) {
    const auto base = base_row(x->w);
    const std::size_t bytes = std::size_t{x->w} * x->h * 4;
    const std::uint64_t period = 1000000000ull / fps;
    const std::uint64_t frames = static_cast<std::uint64_t>(seconds * fps);
    std::uint64_t cursors = 0, late = 0;
    const std::uint64_t t0 = now_ns() + 20000000;
    for (std::uint64_t n = 0; n < frames; ++n) {
      // Two cursor updates per frame: one at the frame's tick, one half a period later.
      for (int half = 0; half < 2; ++half) {
        const std::uint64_t tick = t0 + n * period + static_cast<std::uint64_t>(half) * period / 2;
        while (now_ns() < tick) nfrHostProcess(h);
        if (now_ns() > tick + period) ++late;
        Cursor c{cursors++,
                 now_ns(),
                 static_cast<std::int32_t>((n * 7 + half * 3) % x->w),
                 static_cast<std::int32_t>((n * 5) % x->h),
                 static_cast<std::uint32_t>(x - kRes),
                 0};
        if (send_dg(NETFR_CHANNEL_SECONDARY, &c, sizeof c, kCursor) != 0) return 1;
        if (half == 1) continue;
        const int k = static_cast<int>(n % kRing);
        while (busy[k] == 1) nfrHostProcess(h);
        if (busy[k] < 0) {
          std::fprintf(stderr, "host: a write failed\n");
          return 1;
        }
        auto* f = static_cast<std::uint8_t*>(nfrMemoryPointer(mem[k]));
        const std::uint32_t shift = static_cast<std::uint32_t>(n * 4);
        render(f, *x, shift, base);
        FrameHeader hd{};
        hd.magic = kMagic;
        hd.res = static_cast<std::uint32_t>(x - kRes);
        hd.seq = n;
        hd.w = x->w;
        hd.h = x->h;
        hd.shift = shift;
        hd.sent_ns = now_ns();
        std::memcpy(f, &hd, sizeof hd);
        NFRCallbackInfo cb{};
        cb.callback = write_done;
        cb.uData[0] = &busy[k];
        busy[k] = 1;
        int idx;
        // Until the client's buffers are advertised, or while it holds them, no buffer is free
        // (-ENOBUFS): the frame waits.
        while ((idx = nfrHostWriteBufferUdata(mem[k], 0, 0, bytes, n, &cb)) == -ENOBUFS ||
               idx == -EAGAIN)
          nfrHostProcess(h);
        if (idx < 0) {
          std::fprintf(stderr, "host: nfrHostWriteBuffer: %d\n", idx);
          return 1;
        }
      }
    }
    PhaseEnd pe{static_cast<std::uint32_t>(x - kRes), fps, frames, cursors, seconds};
    send_dg(NETFR_CHANNEL_PRIMARY, &pe, sizeof pe, kPhaseEnd);
    std::printf("host: %s@%u: %llu frames, %llu cursor updates sent (%llu ticks missed)\n", x->name,
                fps, U(frames), U(cursors), U(late));
  }
  // On both channels: with relaxed order, the client is done when both arrived.
  std::uint8_t done[8] = {};
  send_dg(NETFR_CHANNEL_SECONDARY, done, sizeof done, kDone);
  send_dg(NETFR_CHANNEL_PRIMARY, done, sizeof done, kDone);
  while (nfrHostProcess(h) != -ENOTCONN) {
  }
  std::printf("host stats: %s\n", nfrHostStats(h));
  nfrHostFree(&h);
  return 0;
}

struct Series {
  std::vector<double> lat_us;  ///< per frame
  std::vector<double> at_s;    ///< when (since the phase's first frame)
  std::vector<double> cursor_us;
  std::uint64_t frames = 0, bad = 0, bytes = 0, cursors = 0, first_ns = 0, last_ns = 0;
  std::uint64_t expected = 0, expected_cursors = 0;
  double verify_ms = 0;
  std::uint32_t fps = 0;
};

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p / 100.0 * v.size()));
  return v[i];
}

void write_svg(const std::string& path, const std::map<std::uint32_t, Series>& s) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  const double W = 800, H = 400, L = 60, B = 40;
  double tmax = 0.001, lmax = 1;
  for (auto& [r, x] : s)
    for (std::size_t i = 0; i < x.lat_us.size(); ++i) {
      tmax = std::max(tmax, x.at_s[i]);
      lmax = std::max(lmax, x.lat_us[i]);
    }
  lmax *= 1.1;
  std::fprintf(f,
               "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' "
               "font-family='sans-serif' font-size='12'>\n",
               W + L + 20, H + B + 30);
  std::fprintf(f, "<rect x='%g' y='10' width='%g' height='%g' fill='none' stroke='black'/>\n", L, W,
               H);
  for (int i = 0; i <= 4; ++i) {
    const double y = 10 + H - H * i / 4;
    std::fprintf(f, "<text x='%g' y='%g' text-anchor='end'>%.0f</text>\n", L - 4, y + 4,
                 lmax * i / 4);
    std::fprintf(f, "<text x='%g' y='%g' text-anchor='middle'>%.1f</text>\n", L + W * i / 4, H + 26,
                 tmax * i / 4);
  }
  std::fprintf(f,
               "<text x='%g' y='%g' text-anchor='middle'>seconds since the first frame of the "
               "phase</text>\n",
               L + W / 2, H + B + 10);
  std::fprintf(f,
               "<text x='14' y='%g' transform='rotate(-90 14 %g)' text-anchor='middle'>frame "
               "latency (us)</text>\n",
               10 + H / 2, 10 + H / 2);
  const char* colours[] = {"#1f77b4", "#d62728"};
  int line = 0;
  for (auto& [r, x] : s) {
    std::fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1' points='",
                 colours[line % 2]);
    for (std::size_t i = 0; i < x.lat_us.size(); ++i)
      std::fprintf(f, "%.1f,%.1f ", L + W * x.at_s[i] / tmax, 10 + H - H * x.lat_us[i] / lmax);
    std::fprintf(f, "'/>\n<text x='%g' y='%d' fill='%s'>%s@%u</text>\n", L + 10, 28 + 16 * line,
                 colours[line % 2], kRes[r].name, x.fps);
    ++line;
  }
  std::fprintf(f, "</svg>\n");
  std::fclose(f);
}

int run_client(const char* host, const std::string& svg, bool relaxed) {
  PNFRClient c = nullptr;
  NFRInitOpts o = init_opts(host);
  o.totalOrder = relaxed ? 0 : 1;  // relaxed: upstream NetFR's order
  int r = nfrClientInit(&o, nullptr, &c);
  if (r == 0) r = nfrClientConnectWait(c);
  if (r) {
    std::fprintf(stderr, "nfrClientInit: %d\n", r);
    return 1;
  }
  // Three buffers for each resolution, the stack's memory (zero copy): each frame lands in
  // the smallest that fits.
  for (const Res& x : kRes)
    for (int k = 0; k < 3; ++k)
      if (!nfrClientAllocMemory(c, std::size_t{x.w} * x.h * 4, 0)) return 1;
  std::vector<std::vector<std::uint8_t>> bases;
  for (const Res& x : kRes) bases.push_back(base_row(x.w));
  std::map<std::uint32_t, Series> series;
  auto* ev = new NFRClientEvent;
  std::uint32_t cur_res = 0;
  std::uint64_t next_seq = 0, last_print = 0, dropped = 0, misplaced = 0, done = 0;
  for (;;) {
    r = nfrClientProcess(c, -1, ev);
    if (r < 0) {
      std::fprintf(stderr, "\nclient: nfrClientProcess: %d\n", r);
      return 1;
    }
    const std::uint64_t t = now_ns();
    if (r == 0) {
      if (t - last_print > 1000000000ull && series.count(cur_res)) {
        const Series& s = series[cur_res];
        const double el = (s.last_ns - s.first_ns) / 1e9;
        std::printf("\r%s: %llu frames, %.1f fps, %.0f MB/s, latency p50 %.0f us, last %.0f us   ",
                    kRes[cur_res].name, U(s.frames), el > 0 ? (s.frames - 1) / el : 0,
                    el > 0 ? s.bytes / el / 1e6 : 0, pct(s.lat_us, 50),
                    s.lat_us.empty() ? 0 : s.lat_us.back());
        std::fflush(stdout);
        last_print = t;
      }
      continue;
    }
    if (ev->type == NFR_CLIENT_EVENT_MEM_WRITE) {
      const auto* f =
          static_cast<const std::uint8_t*>(nfrMemoryPointer(ev->memRegion)) + ev->payloadOffset;
      FrameHeader hd;
      std::memcpy(&hd, f, sizeof hd);
      if (hd.magic != kMagic || hd.res >= 2) {
        std::fprintf(stderr, "\nclient: not a frame\n");
        return 1;
      }
      if (hd.res != cur_res) {
        cur_res = hd.res;
        next_seq = 0;
      }
      Series& s = series[hd.res];
      const double lat = (t - hd.sent_ns) / 1e3;
      if (!s.frames) s.first_ns = t;
      s.last_ns = t;
      s.lat_us.push_back(lat);
      s.at_s.push_back((t - s.first_ns) / 1e9);
      if (hd.seq != next_seq) dropped += hd.seq - next_seq;
      next_seq = hd.seq + 1;
      const Res& x = kRes[hd.res];
      const std::uint64_t v0 = now_ns();
      if (ev->payloadLength != std::size_t{x.w} * x.h * 4 || !verify(f, x, hd.shift, bases[hd.res]))
        ++s.bad;
      s.verify_ms += (now_ns() - v0) / 1e6;
      if (nfrMemorySize(ev->memRegion) != ev->payloadLength) ++misplaced;
      ++s.frames;
      s.bytes += ev->payloadLength;
      nfrClientBufferAck(c, ev->memRegion);
    } else if (ev->udata == kCursor) {
      Cursor cu;
      std::memcpy(&cu, ev->inlineData, sizeof cu);
      if (cu.res >= 2) {
        std::fprintf(stderr, "\nclient: bad cursor message\n");
        return 1;
      }
      series[cu.res].cursor_us.push_back((t - cu.sent_ns) / 1e3);
      ++series[cu.res].cursors;
    } else if (ev->udata == kPhaseEnd) {
      PhaseEnd pe;
      std::memcpy(&pe, ev->inlineData, sizeof pe);
      Series& s = series[pe.res];
      s.expected = pe.frames;
      s.expected_cursors = pe.cursors;
      s.fps = pe.fps;
    } else if (ev->udata == kDone) {
      if (++done == 2) break;
    }
  }
  std::printf("\n");
  int rc = 0;
  for (auto& [ri, s] : series) {
    const double el = s.frames > 1 ? (s.last_ns - s.first_ns) / 1e9 : 0;
    const std::uint64_t lost = s.expected - std::min(s.expected, s.frames);
    std::printf(
        "%s@%u: frames delivered %llu of %llu, dropped %llu, corrupt %llu, %.1f fps, "
        "%.0f MB/s, verify %.2f ms/frame\n",
        kRes[ri].name, s.fps, U(s.frames), U(s.expected), U(lost), U(s.bad),
        el > 0 ? (s.frames - 1) / el : 0, el > 0 ? s.bytes / el / 1e6 : 0,
        s.frames ? s.verify_ms / s.frames : 0);
    std::printf("%s@%u: frame latency us: p50 %.0f p99 %.0f p99.9 %.0f max %.0f\n", kRes[ri].name,
                s.fps, pct(s.lat_us, 50), pct(s.lat_us, 99), pct(s.lat_us, 99.9),
                pct(s.lat_us, 100));
    std::printf("%s@%u: cursor updates %llu of %llu, latency us: p50 %.0f p99 %.0f max %.0f\n",
                kRes[ri].name, s.fps, U(s.cursors), U(s.expected_cursors), pct(s.cursor_us, 50),
                pct(s.cursor_us, 99), pct(s.cursor_us, 100));
    if (lost || s.bad || s.cursors != s.expected_cursors) rc = 1;
  }
  std::printf("dropped %llu, frames in a larger buffer than needed %llu\n", U(dropped),
              U(misplaced));
  if (dropped) rc = 1;
  if (!svg.empty()) {
    write_svg(svg, series);
    std::printf("latency plot: %s\n", svg.c_str());
  }
  delete ev;
  nfrClientFree(&c);
  std::printf(rc ? "FAIL netfr demo\n" : "PASS netfr demo\n");
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  roce::netfr::use_local_stack();  // NETFR_LINK: in-process links as well as attach=SOCKET
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s host [--res 1080p,4k] [--fps N] [--seconds S] | client HOST_IP [--svg "
                 "FILE] [--order strict|relaxed]\n",
                 argv[0]);
    return 2;
  }
  const std::string role = argv[1];
  std::vector<const Res*> res;
  unsigned fps = 60;
  double seconds = 5;
  std::string svg, peer;
  bool relaxed = false;
  int i = 2;
  if (role == "client") {
    if (argc < 3) return 2;
    peer = argv[2];
    i = 3;
  }
  for (; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--res") {
      std::size_t p = 0;
      while (p <= v.size()) {
        const std::size_t q = std::min(v.find(',', p), v.size());
        const Res* x = find_res(v.substr(p, q - p));
        if (!x) {
          std::fprintf(stderr, "unknown resolution in %s (1080p, 4k)\n", v.c_str());
          return 2;
        }
        res.push_back(x);
        p = q + 1;
      }
    } else if (k == "--fps")
      fps = static_cast<unsigned>(std::atoi(v.c_str()));
    else if (k == "--seconds")
      seconds = std::atof(v.c_str());
    else if (k == "--svg")
      svg = v;
    else if (k == "--order")
      relaxed = v == "relaxed";
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (fps == 0 || fps > 1000 || seconds <= 0) return 2;
  if (res.empty()) res = {&kRes[0], &kRes[1]};
  return role == "host" ? run_host(res, fps, seconds) : run_client(peer.c_str(), svg, relaxed);
}
