/// @file
/// The benchmark runner. The parent process measures kernel TCP, then forks two appliance
/// processes joined by a net_memif link (roce-link-demo's topology): A (lcore 0) drives every
/// measurement and B (lcore 1) answers. They talk over a socket pair: QP information, and
/// start/stop/query steps of the link baselines. A prints the table as it goes and sends every
/// measured Point to the parent down a pipe; the parent writes the JSON and the SVG.
///
/// With a remote topology the parent forks A only, on a port of a real interface, and B is
/// `roce-perf --bench-peer` on another host (run_bench_peer): the control channel is a TCP
/// connection on which the parent first sends the configuration file, so that B runs the same
/// workloads. Everything after that is the same on both topologies.
///
/// Per workload each side builds a fresh Engine and PollLoop on its port (so that counters and
/// fault injection are per workload), creates the QPs, exchanges their addresses and connects
/// them; A then runs every message size, B serves (re-posting receives) until A is done.
#include "apps/perf/bench/bench_run.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "apps/perf/bench/bench.h"
#include "apps/perf/bench/bench_report.h"
#include "apps/perf/bench/tsc.h"
#include "controlplane/address.h"
#include "controlplane/tcp.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/pmd_frames.h"
#include "dataplane/port/poll_loop.h"
#include "runtime/link.h"

namespace roce::bench {

using namespace roce::engine;

namespace {

constexpr std::uint16_t kBlastType = 0x88b5;  // IEEE 802 local experimental ethertypes
constexpr std::uint16_t kEchoType = 0x88b6;
constexpr std::uint64_t kWarmup = 16;  // round trips not recorded

// ---- progress line ----------------------------------------------------------------------------

bool g_tty = false;

void progress(const std::string& what) {
  if (!g_tty) return;
  std::fprintf(stderr, "\r\033[K  %s", what.c_str());
  std::fflush(stderr);
}

void progress_clear() {
  if (!g_tty) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

[[noreturn]] void die(int side, const std::string& msg) {
  progress_clear();
  std::fflush(stdout);
  std::fprintf(stderr, "roce-perf bench [%c]: %s\n", side ? 'B' : 'A', msg.c_str());
  std::fflush(stderr);
  _exit(1);
}

// How long a side waits for the memif link (the other side's process must have started):
// ROCE_BENCH_LINK_WAIT_S, 1..3600, default 60.
std::uint64_t link_wait_seconds() {
  const char* v = std::getenv("ROCE_BENCH_LINK_WAIT_S");
  if (v == nullptr || *v == '\0') return 60;
  char* end = nullptr;
  const unsigned long long s = std::strtoull(v, &end, 10);
  if (*end != '\0' || s < 1 || s > 3600) {
    std::fprintf(stderr,
                 "roce-perf bench: ROCE_BENCH_LINK_WAIT_S=%s is not 1..3600 seconds; waiting 60\n",
                 v);
    return 60;
  }
  return s;
}

// ---- the control channel between A and B ------------------------------------------------------

enum class MsgType : std::uint32_t {
  kReset = 1,  ///< B: zero the blast counters, then kResetAck
  kResetAck,
  kQuery,         ///< B: send the blast counters (kQueryReply)
  kQueryReply,    ///< b = frames, c = bytes, d = TSC ticks from first to last frame
  kLinkDone,      ///< link baselines over
  kQpInfo,        ///< a = QPN, b = address, c = rkey, d = PSN
  kReady,         ///< B has posted its receives
  kWorkloadDone,  ///< A has run every size of the workload
  kSizeDone,      ///< A has measured one size: B answers with kLoopTime
  kLoopTime,      ///< B's poll loop since the last one: b = busy ns, c = idle ns
  kHello,         ///< each side once its port is up: a = IPv4 address, b = MAC
  kConfig,        ///< remote topology, driver to peer first: a = version, b = length of the
                  ///< configuration text that follows
  kC2c,           ///< B: answer a core-to-core probe of `a` rounds on the shared line
  kLinkStart,     ///< B: serve link baselines (link_b) until kLinkDone, within a workload
  kStopped,       ///< A polls its port no more (the run is over): B may close
  kClosed         ///< B has closed its port: A may close
};
constexpr std::uint32_t kProtocolVersion = 2;
constexpr std::uint64_t kMaxConfigText = 1 << 20;

struct Msg {
  MsgType type{};
  std::uint32_t a = 0;
  std::uint64_t b = 0, c = 0, d = 0;
};

class Channel {
 public:
  Channel(int side, int fd, double timeout) : side_(side), fd_(fd), timeout_(timeout) {}
  /// Sends `m`; while the socket is full (both sides may send a burst, e.g. the QP numbers of
  /// a thousand QPs, before reading), keeps what arrives for the next try_recv.
  void send(const Msg& m) {
    const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(timeout_ * 1e9);
    for (;;) {
      const ssize_t w = ::write(fd_, &m, sizeof m);
      if (w == static_cast<ssize_t>(sizeof m)) return;
      if (w >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || port::now_ns() > end)
        die(side_, "control channel write failed");
      Msg in;
      if (read_one(in)) backlog_.push_back(in);
    }
  }
  /// Non-blocking: true when a whole message has arrived.
  bool try_recv(Msg& m) {
    if (!backlog_.empty()) {
      m = backlog_.front();
      backlog_.pop_front();
      return true;
    }
    return read_one(m);
  }
  /// Waits for a message of `type`, calling `poll()` meanwhile (keeps the dataplane going).
  template <class Poll>
  Msg recv(MsgType type, Poll&& poll) {
    const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(timeout_ * 1e9);
    Msg m;
    while (!try_recv(m)) {
      if (port::now_ns() > end) die(side_, "timed out waiting for the peer");
      poll();
    }
    if (m.type != type)
      die(side_,
          "control channel: unexpected message " + std::to_string(static_cast<unsigned>(m.type)));
    return m;
  }

 private:
  bool read_one(Msg& m) {
    const ssize_t r = ::read(fd_, buf_ + got_, sizeof buf_ - got_);
    if (r == 0) die(side_, "the peer closed the control channel");
    if (r > 0) got_ += static_cast<std::size_t>(r);
    if (got_ < sizeof(Msg)) return false;
    std::memcpy(&m, buf_, sizeof m);
    got_ = 0;
    return true;
  }

  int side_, fd_;
  double timeout_;
  char buf_[sizeof(Msg)];
  std::size_t got_ = 0;
  std::deque<Msg> backlog_;
};

// ---- the core-to-core probe ---------------------------------------------------------------------

/// A cache line both appliance processes of the memif topology map (MAP_SHARED, made before the
/// fork). A bounces `seq` off B: odd values are A's, even ones B's answers. The round trip says
/// where the VM's two cores sit on the host right now (the same core complex or not), which
/// moves every figure that crosses cores (docs/benchmarks.md).
struct alignas(64) C2cLine {
  std::atomic<std::uint32_t> seq{0};
};
constexpr std::uint32_t kC2cRounds = 1000;

// ---- one side: a process with a port that drives (A) or answers (B)
// --------------------------------------------------------------------

struct PeerQp {
  std::uint32_t qpn = 0, rkey = 0, psn = 0;
  std::uint64_t addr = 0;
  bool sr = false;          ///< announced selective repeat
  std::uint32_t sr_rx = 0;  ///< and the message index it receives from (SrIndexBase::rx)
};
/// kQpInfo's `d`: the PSN in bits 0-23, and bit 32 when the side announces selective repeat
/// (an older peer neither sets it nor reads past the PSN's 32 bits, so it keeps go-back-N).
/// `c`: the R_Key in bits 0-31 and, with selective repeat announced, in bits 32-63 the
/// message index the side's QP receives from (drawn at random: the other side's SrIndexBase::tx;
/// an older peer reads only the key's 32 bits).
constexpr std::uint64_t kQpInfoSelectiveRepeat = std::uint64_t{1} << 32;

/// How one side reaches the link: its port's options and the EAL's memory.
struct Site {
  runtime::LinkOptions link;
  unsigned mem_mb = 512;
};

/// Side A (server) or B (client) of a net_memif link whose socket is in `workdir`.
Site memif_site(int side, const std::string& workdir, std::uint32_t pmtu) {
  Site s;
  s.link.set_memif(workdir + "/memif.sock", side == 0 ? "server" : "client");
  // The port layer gives memif buffers that hold a whole frame (a frame chained over several
  // takes a path of the PMD that crashes in DPDK 22.11 under the L2 blast).
  s.link.netdev_mtu = netdev_mtu_for(pmtu);
  s.link.mac = "02:00:5e:00:03:0" + std::to_string(1 + side);
  s.link.ip = side == 0 ? "192.0.2.1" : "192.0.2.2";
  s.link.lcore = side;
  s.mem_mb = 256;
  return s;
}

/// A port on a kernel interface (remote topology): roce-perf's af_packet, af_xdp or tap port.
Site link_site(const runtime::LinkOptions& o, std::uint32_t lcore) {
  Site s;
  s.link = o;
  s.link.lcore = static_cast<int>(lcore);
  return s;
}

class BenchSide {
 public:
  BenchSide(int side, int ctl_fd, int results_fd, const BenchConfig& cfg, double tsc_hz,
            Results base, C2cLine* c2c)
      : c2c_(c2c),
        side_(side),
        results_fd_(results_fd),
        cfg_(cfg),
        hz_(tsc_hz),
        ch_(side, ctl_fd, cfg.timeout),
        base_(std::move(base)) {}

  int run(const Site& site);
  /// Side A of the memif topology: where to say that its port has started (its memif server
  /// accepts a client only from then on); -1 elsewhere.
  int ready_fd = -1;

 private:
  bool a() const { return side_ == 0; }
  void emit(const Point& p) {
    base_.points.push_back(p);
    if (::write(results_fd_, &p, sizeof p) != static_cast<ssize_t>(sizeof p))
      die(side_, "results pipe write failed");
  }
  double secs(std::uint64_t ticks) const { return static_cast<double>(ticks) / hz_; }
  std::vector<std::uint8_t> raw_frame(std::uint16_t type, std::uint32_t payload) const;
  void drain_rx() {
    port_->rx([](std::span<const std::uint8_t>) {});
  }
  // core-to-core probe: A measures (ns per round trip; -1 without a shared line), B answers
  double c2c_probe();
  void c2c_answer(std::uint32_t rounds);
  void c2c_wait(std::uint32_t value);
  // link baselines
  void link_a();
  void link_b();
  Point link_baseline(Kind kind, std::uint32_t payload);
  /// Of a row's `repeat` measurements (with their adjacent link baselines, if any): prints
  /// and emits the median one, with the range of them all. Reorders `runs`.
  void emit_median_row(const Workload& w,
                       std::vector<std::pair<std::optional<Point>, Point>>& runs);
  Point blast(std::uint32_t payload);
  Point echo(std::uint32_t payload);
  // workloads
  void workload(std::size_t wi);

  C2cLine* c2c_;
  int side_, results_fd_;
  const BenchConfig& cfg_;
  double hz_;
  Channel ch_;
  Results base_;  ///< baselines (TCP from the parent, link measured here), then our points
  std::unique_ptr<port::DpdkPort> port_;
  wire::MacAddr mac_, peer_mac_;
  wire::Ipv4Addr ip_, peer_ip_;
  std::set<std::uint32_t> blast_sizes_, echo_sizes_;
};

std::vector<std::uint8_t> BenchSide::raw_frame(std::uint16_t type, std::uint32_t payload) const {
  std::vector<std::uint8_t> f(std::max<std::uint32_t>(60, payload + kFrameOverhead), 0xa5);
  std::memcpy(f.data(), peer_mac_.b.data(), 6);
  std::memcpy(f.data() + 6, mac_.b.data(), 6);
  f[12] = static_cast<std::uint8_t>(type >> 8);
  f[13] = static_cast<std::uint8_t>(type);
  return f;
}

void BenchSide::c2c_wait(std::uint32_t value) {
  const std::uint64_t limit = rdtsc() + static_cast<std::uint64_t>(cfg_.timeout * hz_);
  for (unsigned spins = 0; c2c_->seq.load(std::memory_order_acquire) != value; ++spins)
    if ((spins & 1023) == 0 && rdtsc() > limit) die(side_, "core-to-core probe: no answer");
}

double BenchSide::c2c_probe() {
  if (c2c_ == nullptr) return -1;
  c2c_->seq.store(0, std::memory_order_relaxed);
  ch_.send({MsgType::kC2c, kC2cRounds});
  c2c_->seq.store(1, std::memory_order_release);
  c2c_wait(2);  // B reads its control channel now and then: the first round is not timed
  const std::uint64_t t0 = rdtsc();
  for (std::uint32_t i = 1; i < kC2cRounds; ++i) {
    c2c_->seq.store(2 * i + 1, std::memory_order_release);
    c2c_wait(2 * i + 2);
  }
  return secs(rdtsc() - t0) * 1e9 / (kC2cRounds - 1);
}

void BenchSide::c2c_answer(std::uint32_t rounds) {
  if (c2c_ == nullptr) die(side_, "core-to-core probe without a shared line");
  for (std::uint32_t i = 0; i < rounds; ++i) {
    c2c_wait(2 * i + 1);
    c2c_->seq.store(2 * i + 2, std::memory_order_release);
  }
}

Point BenchSide::blast(std::uint32_t payload) {
  const auto frame = raw_frame(kBlastType, payload);
  const double c2c = c2c_probe();
  ch_.send({MsgType::kReset});
  ch_.recv(MsgType::kResetAck, [&] { drain_rx(); });
  const std::uint64_t sent0 = port_->stats().tx_frames;
  std::uint64_t submitted = 0;
  const std::uint64_t end = rdtsc() + static_cast<std::uint64_t>(cfg_.baselines.duration * hz_);
  // Keep at most 1024 frames queued in the port, so that none is dropped by the sender.
  // (the port's counters are read once per burst: they include the PMD's own, a call into it)
  while (rdtsc() < end) {
    const std::uint64_t queued = submitted - (port_->stats().tx_frames - sent0);
    for (std::uint64_t i = 0; i < 32 && queued + i < 1024; ++i) {
      port_->tx(frame);
      ++submitted;
    }
    port_->flush();
  }
  const std::uint64_t drain_end = rdtsc() + static_cast<std::uint64_t>(hz_);
  while (port_->stats().tx_frames - sent0 < submitted && rdtsc() < drain_end) port_->flush();
  const std::uint64_t sent = port_->stats().tx_frames - sent0;
  const std::uint64_t settle = rdtsc() + static_cast<std::uint64_t>(0.02 * hz_);
  while (rdtsc() < settle) drain_rx();
  ch_.send({MsgType::kQuery});
  const Msg r = ch_.recv(MsgType::kQueryReply, [&] { drain_rx(); });
  Point p;
  p.kind = Kind::kL2Blast;
  p.c2c_ns = c2c;
  p.size = payload;
  p.frame = static_cast<std::uint32_t>(frame.size());
  p.iterations = r.b;
  p.seconds = secs(r.d);
  p.lost = sent > r.b ? sent - r.b : 0;
  if (p.seconds > 0) {
    p.msgs_per_s = static_cast<double>(r.b) / p.seconds;
    p.bytes_per_s = p.msgs_per_s * payload;
  }
  return p;
}

Point BenchSide::echo(std::uint32_t payload) {
  const auto frame = raw_frame(kEchoType, payload);
  const double c2c = c2c_probe();
  std::vector<double> ns;
  const std::uint64_t n = cfg_.baselines.iterations;
  ns.reserve(n);
  const std::uint64_t start = rdtsc();
  for (std::uint64_t i = 0; i < n + kWarmup; ++i) {
    const std::uint64_t t = rdtsc();
    port_->tx(frame);
    port_->flush();
    bool back = false;
    const std::uint64_t limit = t + static_cast<std::uint64_t>(hz_);
    while (!back) {
      port_->rx([&](std::span<const std::uint8_t> f) {
        if (f.size() == frame.size() && f[12] == (kEchoType >> 8) && f[13] == (kEchoType & 0xff))
          back = true;
      });
      if (!back && rdtsc() > limit) die(side_, "L2 echo: no answer within 1 s");
    }
    if (i >= kWarmup) ns.push_back(secs(rdtsc() - t) * 1e9);
  }
  Point p;
  p.kind = Kind::kL2Echo;
  p.c2c_ns = c2c;
  p.size = payload;
  p.frame = static_cast<std::uint32_t>(frame.size());
  p.iterations = ns.size();
  p.seconds = secs(rdtsc() - start);
  p.msgs_per_s = static_cast<double>(ns.size()) / p.seconds;
  p.bytes_per_s = p.msgs_per_s * payload;
  summarize_latency(ns, p);
  return p;
}

Point BenchSide::link_baseline(Kind kind, std::uint32_t payload) {
  // baselines.repeat runs, the median one reported with the range of all.
  const bool is_blast = kind == Kind::kL2Blast;
  const auto key = [&](const Point& p) { return is_blast ? p.msgs_per_s : p.lat_p50; };
  std::vector<Point> runs;
  for (std::uint32_t r = 0; r < cfg_.baselines.repeat; ++r)
    runs.push_back(is_blast ? blast(payload) : echo(payload));
  std::sort(runs.begin(), runs.end(),
            [&](const Point& x, const Point& y) { return key(x) < key(y); });
  Point p = runs[runs.size() / 2];
  p.runs = static_cast<std::uint32_t>(runs.size());
  p.runs_lo = key(runs.front());
  p.runs_hi = key(runs.back());
  return p;
}

void BenchSide::link_a() {
  std::size_t i = 0;
  const std::size_t total = blast_sizes_.size() + echo_sizes_.size();
  for (const auto s : blast_sizes_) {
    progress("link L2 blast, payload " + std::to_string(s) + " B (" + std::to_string(++i) + "/" +
             std::to_string(total) + ")");
    emit(link_baseline(Kind::kL2Blast, s));
  }
  for (const auto s : echo_sizes_) {
    progress("link L2 echo, payload " + std::to_string(s) + " B (" + std::to_string(++i) + "/" +
             std::to_string(total) + ")");
    emit(link_baseline(Kind::kL2Echo, s));
  }
  ch_.send({MsgType::kLinkDone});
  progress_clear();
}

void BenchSide::link_b() {
  std::uint64_t frames = 0, bytes = 0, first = 0, last = 0;
  std::vector<std::uint8_t> reply(16384);
  for (unsigned idle = 0;;) {
    const std::uint16_t got = port_->rx([&](std::span<const std::uint8_t> f) {
      if (f.size() < 14) return;
      const std::uint16_t type = static_cast<std::uint16_t>(f[12] << 8 | f[13]);
      if (type == kBlastType) {
        const std::uint64_t now = rdtsc();
        if (frames++ == 0) first = now;
        last = now;
        bytes += f.size();
      } else if (type == kEchoType && f.size() <= reply.size()) {
        std::memcpy(reply.data(), f.data() + 6, 6);
        std::memcpy(reply.data() + 6, f.data(), 6);
        std::memcpy(reply.data() + 12, f.data() + 12, f.size() - 12);
        port_->tx({reply.data(), f.size()});
      }
    });
    port_->flush();
    // The control channel costs a system call: look at it only when the link is quiet.
    if (got != 0 || ++idle < 64) continue;
    idle = 0;
    Msg m;
    if (!ch_.try_recv(m)) continue;
    if (m.type == MsgType::kReset) {
      frames = bytes = first = last = 0;
      ch_.send({MsgType::kResetAck});
    } else if (m.type == MsgType::kQuery) {
      ch_.send({MsgType::kQueryReply, 0, frames, bytes, last - first});
    } else if (m.type == MsgType::kC2c) {
      c2c_answer(m.a);
    } else if (m.type == MsgType::kLinkDone) {
      return;
    } else {
      die(side_, "link baselines: unexpected message");
    }
  }
}

void BenchSide::emit_median_row(const Workload& w,
                                std::vector<std::pair<std::optional<Point>, Point>>& runs) {
  // The median by the figure the targets read: against the row's own link baseline when
  // there is one (a run and its baseline saw the same machine), else the row's own figure.
  const bool bw = w.mode == Mode::kBw;
  const auto own = [bw](const Point& p) { return bw ? p.msgs_per_s : p.lat_p50; };
  const auto key = [&](const std::pair<std::optional<Point>, Point>& r) {
    if (!r.first) return own(r.second);
    const double ref = own(*r.first);
    return ref > 0 ? own(r.second) / ref : 0.0;
  };
  std::sort(runs.begin(), runs.end(),
            [&](const auto& x, const auto& y) { return key(x) < key(y); });
  auto& [lp, p] = runs[runs.size() / 2];
  p.runs = static_cast<std::uint32_t>(runs.size());
  p.key_lo = key(runs.front());
  p.key_med = key(runs[runs.size() / 2]);
  p.key_hi = key(runs.back());
  const auto [lo, hi] = std::minmax_element(
      runs.begin(), runs.end(),
      [&](const auto& x, const auto& y) { return own(x.second) < own(y.second); });
  p.runs_lo = own(lo->second);
  p.runs_hi = own(hi->second);
  if (lp) emit(*lp);
  print_row(stdout, w, p, base_);
  emit(p);
}

WrOpcode wr_opcode(Op op) {
  switch (op) {
    case Op::kWrite:
      return WrOpcode::kWrite;
    case Op::kRead:
      return WrOpcode::kRead;
    case Op::kSend:
      return WrOpcode::kSend;
    case Op::kAtomic:
      return WrOpcode::kFetchAdd;
    case Op::kWriteImm:
      return WrOpcode::kWriteImm;
  }
  return WrOpcode::kWrite;
}

Mtu mtu_enum(std::uint32_t bytes) {
  switch (bytes) {
    case 256:
      return Mtu::k256;
    case 512:
      return Mtu::k512;
    case 2048:
      return Mtu::k2048;
    case 4096:
      return Mtu::k4096;
    default:
      return Mtu::k1024;
  }
}

void BenchSide::workload(std::size_t wi) {
  const Workload& w = cfg_.workloads[wi];
  const std::uint32_t max_size = *std::max_element(w.sizes.begin(), w.sizes.end());
  const bool needs_recv = w.op == Op::kSend || w.op == Op::kWriteImm;
  const std::uint32_t depth = w.queue_depth;
  const std::uint32_t rq_depth = needs_recv ? std::min<std::uint32_t>(1024, 4 * depth + 64) : 1;
  std::vector<std::vector<std::uint8_t>> bufs(w.qps);
  for (auto& b : bufs) b.assign(std::max<std::uint32_t>(64, (max_size + 63) / 64 * 64), 0x7b);

  EngineConfig ec;
  ec.mac = mac_;
  ec.ipv4 = ip_;
  ec.seed = 1000 + wi * 2 + static_cast<std::uint64_t>(side_);
  ec.max_qps = std::max(ec.max_qps, w.qps + 16);  // QP1 and room to spare
  if (w.window != 0) ec.max_inflight_psns = w.window;
  if (w.window_bytes != 0) ec.max_inflight_bytes = w.window_bytes;
  if (w.sr_window_bytes != 0) ec.sr_inflight_bytes = w.sr_window_bytes;
  if (w.sr_bdp_cap) ec.sr_bdp_cap = *w.sr_bdp_cap;
  if (w.loss_window != 0) ec.loss_window = w.loss_window;
  if (w.recovery_batch != 0) ec.recovery_batch = w.recovery_batch;
  if (w.ack_req_every != 0) ec.ack_req_every = w.ack_req_every;
  if (w.probe_min_us >= 0) ec.probe_min_ns = static_cast<std::uint64_t>(w.probe_min_us) * 1000;
  Engine eng(ec);
  FaultPolicy fp;
  fp.drop_rate = w.drop_rate;
  fp.seed = w.seed * 2 + static_cast<std::uint64_t>(side_);
  port::PollLoop loop(*port_, eng, fp);
  // The port (memif) sends zero-copy from 512 bytes; a workload may move or disable that.
  if (w.zero_copy_min >= 0 && port_->offloads().tx_zero_copy != 0)
    eng.set_tx_zero_copy(static_cast<std::uint32_t>(w.zero_copy_min));
  const auto poll = [&] { loop.poll_once(); };

  Pd* pd = eng.alloc_pd();
  Cq* scq = eng.create_cq(w.qps * (depth + 1) + 64);
  Cq* rcq = eng.create_cq(w.qps * rq_depth + 64);
  const std::uint32_t acc =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
  std::vector<PeerQp> peers(w.qps);
  std::mt19937 rng(static_cast<unsigned>(ec.seed));
  std::vector<std::uint32_t> psns;
  // Selective repeat: what this side announces in the QP exchange, and where the indices of the
  // messages each QP receives start (a blind forger must not know it: the kernel's generator).
  const bool announce = w.selective_repeat && (a() || w.peer_announces);
  std::vector<std::uint32_t> sr_rx(w.qps, 0);
  if (announce) {
    std::random_device rd;
    for (std::uint32_t& b : sr_rx) b = rd();
  }
  for (std::uint32_t q = 0; q < w.qps; ++q) {
    Qp* qp =
        eng.create_qp(pd, QpType::kRc, scq, rcq,
                      QpCap{depth + 1, rq_depth, 1, 1, std::max<std::uint32_t>(64, w.inline_size)});
    Mr* mr = eng.reg_mr(pd, bufs[q].data(), bufs[q].size(), acc);
    if (!qp || !mr) die(side_, w.name + ": cannot create QP or MR");
    qps.push_back(qp);
    mrs.push_back(mr);
    psns.push_back(rng() & 0xffffff);
    ch_.send({MsgType::kQpInfo, qp->qpn, reinterpret_cast<std::uint64_t>(bufs[q].data()),
              mr->key | std::uint64_t{sr_rx[q]} << 32,
              psns.back() | (announce ? kQpInfoSelectiveRepeat : 0)});
  }
  for (std::uint32_t q = 0; q < w.qps; ++q) {
    const Msg m = ch_.recv(MsgType::kQpInfo, poll);
    peers[q] = {
        m.a, static_cast<std::uint32_t>(m.c),     static_cast<std::uint32_t>(m.d & 0xFFFFFF),
        m.b, (m.d & kQpInfoSelectiveRepeat) != 0, static_cast<std::uint32_t>(m.c >> 32)};
  }
  for (std::uint32_t q = 0; q < w.qps; ++q) {
    QpAttr at;
    at.qp_state = QpState::kInit;
    at.qp_access_flags = acc;
    if (eng.modify_qp(qps[q], at, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk)
      die(side_, "INIT refused");
    // Selective repeat only when both sides announced it: a QP with one side on would see
    // SACKs it does not know (go-back-N still recovers, but slowly).
    if (announce && peers[q].sr &&
        eng.set_selective_repeat(qps[q], true, {peers[q].sr_rx, sr_rx[q]}) != kOk)
      die(side_, "selective repeat refused");
    at.qp_state = QpState::kRtr;
    at.path_mtu = mtu_enum(w.mtu);
    at.dest_qp_num = peers[q].qpn;
    at.rq_psn = peers[q].psn;
    at.max_dest_rd_atomic = 16;
    at.min_rnr_timer = 1;
    at.ah.dmac = peer_mac_;
    at.ah.dgid = wire::ipv4_mapped(peer_ip_);
    if (eng.modify_qp(qps[q], at,
                      kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                          kQpMinRnrTimer) != kOk)
      die(side_, "RTR refused");
    at.qp_state = QpState::kRts;
    at.sq_psn = psns[q];
    at.timeout = static_cast<std::uint8_t>(w.retry_timeout);
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.max_rd_atomic = 16;
    if (eng.modify_qp(
            qps[q], at,
            kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic) != kOk)
      die(side_, "RTS refused");
  }

  if (!a()) {
    // B: keep every QP's receive queue full until A is done.
    std::vector<Sge> rsge(w.qps);
    const auto post_recv = [&](std::uint32_t q) {
      RecvWr r;
      r.wr_id = q;
      r.sg_list = &rsge[q];
      r.num_sge = 1;
      if (eng.post_recv(qps[q], &r, nullptr) != kOk) die(side_, "post_recv refused");
    };
    for (std::uint32_t q = 0; q < w.qps; ++q) {
      rsge[q] = {reinterpret_cast<std::uint64_t>(bufs[q].data()), max_size, mrs[q]->key};
      if (needs_recv)
        for (std::uint32_t i = 0; i < rq_depth; ++i) post_recv(q);
    }
    ch_.send({MsgType::kReady});
    Msg m;
    Wc wc[32];
    std::uint64_t next_look = 0;
    std::uint64_t busy0 = loop.time_stats().busy_ns, idle0 = loop.time_stats().idle_ns;
    // READ response frames this side sent for the row (selective READ retry: sent vs needed).
    std::uint64_t resp0 = eng.stats().get(Counter::kReadResponsesSent);
    for (unsigned spins = 0;; ++spins) {
      loop.poll_once();
      const int n = eng.poll_cq(rcq, 32, wc);
      for (int i = 0; i < n; ++i) {
        if (wc[i].status != WcStatus::kSuccess)
          die(side_, w.name + ": receive completion " + std::string(to_string(wc[i].status)));
        post_recv(static_cast<std::uint32_t>(wc[i].wr_id));
      }
      // The control channel costs a system call: look at it every 100 us only, and at the
      // clock every 64 polls only (each poll is the delay before a request is seen).
      if (spins % 64 != 0) continue;
      if (const std::uint64_t t = rdtsc(); t < next_look) {
        continue;
      } else {
        next_look = t + static_cast<std::uint64_t>(hz_ / 10'000);
      }
      if (ch_.try_recv(m)) {
        const bool away = m.type == MsgType::kC2c || m.type == MsgType::kLinkStart;
        if (m.type == MsgType::kC2c) c2c_answer(m.a);
        if (m.type == MsgType::kLinkStart) link_b();  // baselines.adjacent: the next row's
        if (away) {  // that time is neither the row's busy nor its idle time
          loop.poll_once();
          busy0 = loop.time_stats().busy_ns;
          idle0 = loop.time_stats().idle_ns;
          continue;
        }
        if (m.type == MsgType::kSizeDone) {
          const auto& ts = loop.time_stats();
          const std::uint64_t resp = eng.stats().get(Counter::kReadResponsesSent);
          ch_.send({MsgType::kLoopTime, 0, ts.busy_ns - busy0, ts.idle_ns - idle0, resp - resp0});
          busy0 = ts.busy_ns;
          idle0 = ts.idle_ns;
          resp0 = resp;
          continue;
        }
        if (m.type != MsgType::kWorkloadDone) die(side_, "unexpected message during a workload");
        break;
      }
    }
    port::poll_until(
        loop, [] { return false; }, 0.05);
    return;
  }

  ch_.recv(MsgType::kReady, poll);
  print_workload_header(stdout, w);
  const bool can_inline = w.op == Op::kWrite || w.op == Op::kSend || w.op == Op::kWriteImm;
  // One measurement of a row: `run_of` names it in progress lines and errors.
  const auto measure = [&](std::uint32_t size, const std::string& run_of) {
    const double c2c = c2c_probe();
    loop.poll_once();  // the time spent on the probe and baseline is not the row's
    const auto st0 = eng.stats();
    const port::PollLoop::TimeStats time0 = loop.time_stats();
    const std::uint64_t drops0 = loop.faults() ? loop.faults()->stats().dropped : 0;
    const std::uint32_t chunk =
        w.mode == Mode::kLat ? 1 : std::clamp<std::uint32_t>(depth / 4, 1, 16);
    std::vector<std::uint32_t> inflight(w.qps, 0);
    std::vector<std::uint32_t> ready(w.qps);  ///< QPs that may have room to post
    std::vector<bool> in_ready(w.qps, true);
    for (std::uint32_t q = 0; q < w.qps; ++q) ready[q] = q;
    // The work requests are built once and only patched for another QP or count, as
    // perftest does: the benchmark should measure the stack, not its own WR building.
    SendWr wrs[16];
    Sge sges[16];
    const std::uint32_t base_flags =
        can_inline && size <= w.inline_size ? std::uint32_t{kSendInline} : 0u;
    for (std::uint32_t i = 0; i < 16; ++i) {
      wrs[i].sg_list = &sges[i];
      wrs[i].num_sge = 1;
      wrs[i].opcode = wr_opcode(w.op);
      wrs[i].imm_data = 0x1234;
    }
    std::uint32_t built_q = UINT32_MAX, built_k = 0;
    const auto post = [&](std::uint32_t q, std::uint32_t k) {
      if (q != built_q || k != built_k) {
        built_q = q;
        built_k = k;
        for (std::uint32_t i = 0; i < k; ++i) {
          SendWr& wr = wrs[i];
          sges[i] = {reinterpret_cast<std::uint64_t>(bufs[q].data()),
                     w.op == Op::kAtomic ? 8 : size, mrs[q]->key};
          wr.rdma = {peers[q].addr, peers[q].rkey};
          wr.atomic = {peers[q].addr, peers[q].rkey, 1, 0};
          const bool last = i + 1 == k;
          wr.next = last ? nullptr : &wrs[i + 1];
          wr.send_flags = base_flags | (last ? std::uint32_t{kSendSignaled} : 0u);
          wr.wr_id = last ? static_cast<std::uint64_t>(q) << 32 | k : 0;
        }
      }
      const SendWr* bad = nullptr;
      if (const int rc = eng.post_send(qps[q], &wrs[0], &bad); rc != kOk)
        die(side_, w.name + ": post_send refused (" + std::to_string(rc) + ")");
      inflight[q] += k;
    };
    const std::uint64_t t0 = rdtsc();
    const std::uint64_t deadline = t0 + static_cast<std::uint64_t>(w.duration * hz_);
    const std::uint64_t target = w.iterations;
    std::uint64_t posted = 0, completed = 0, t_last = t0, t_progress = t0, t_stall = t0;
    std::vector<double> ns;
    if (w.mode == Mode::kLat) ns.reserve(w.duration > 0 ? 1 << 20 : target);
    const std::string label = w.name + " " + std::to_string(size) + " B" + run_of;
    Wc wc[32];
    if (w.mode == Mode::kBw) {
      for (;;) {
        const bool posting = w.duration > 0 ? rdtsc() < deadline : posted < target;
        if (posting) {
          // Only the QPs that completed something since the last pass have room: with 1000
          // QPs, looking at every one of them per pass would cost more than the stack does.
          std::size_t keep = 0;
          for (const std::uint32_t q : ready) {
            while (inflight[q] < depth) {
              std::uint32_t k = std::min(chunk, depth - inflight[q]);
              if (w.duration == 0)
                k = static_cast<std::uint32_t>(std::min<std::uint64_t>(k, target - posted));
              if (k == 0) break;
              post(q, k);
              posted += k;
            }
            if (inflight[q] < depth)
              ready[keep++] = q;  // the target is reached: it stays, with room
            else
              in_ready[q] = false;
          }
          ready.resize(keep);
        }
        loop.poll_once();
        // Every completion there is (a CQ polled 32 at a time would hold back the posting).
        const std::uint64_t now = rdtsc();
        for (int n = 32; n == 32;) {
          n = eng.poll_cq(scq, 32, wc);
          for (int i = 0; i < n; ++i) {
            if (wc[i].status != WcStatus::kSuccess)
              die(side_, label + ": completion " + std::string(to_string(wc[i].status)));
            const auto q = static_cast<std::uint32_t>(wc[i].wr_id >> 32);
            const auto k = static_cast<std::uint32_t>(wc[i].wr_id);
            inflight[q] -= k;
            completed += k;
            t_last = t_stall = now;
            if (!in_ready[q]) {
              in_ready[q] = true;
              ready.push_back(q);
            }
          }
        }
        if (!posting && completed == posted) break;
        if (now - t_stall > static_cast<std::uint64_t>(cfg_.timeout * hz_))
          die(side_, label + ": no completion for " + std::to_string(cfg_.timeout) + " s");
        if (now - t_progress > static_cast<std::uint64_t>(0.5 * hz_)) {
          t_progress = now;
          progress(label + ": " + std::to_string(completed) +
                   (w.duration > 0 ? "" : "/" + std::to_string(target)) + " messages, " +
                   std::to_string(static_cast<int>(secs(now - t0))) + " s");
        }
      }
    } else {
      std::uint64_t i = 0;
      for (;; ++i) {
        const bool more = w.duration > 0 ? rdtsc() < deadline : i < target + kWarmup;
        if (!more) break;
        const auto q = static_cast<std::uint32_t>(i % w.qps);
        const std::uint64_t t = rdtsc();
        post(q, 1);
        int n = 0;
        // The clock is read for the timeout every 256 polls only: this loop is the latency.
        for (unsigned spins = 1; (n = eng.poll_cq(scq, 1, wc)) == 0; ++spins) {
          loop.poll_once();
          if (spins % 256 == 0 && rdtsc() - t > static_cast<std::uint64_t>(cfg_.timeout * hz_))
            die(side_, label + ": no completion for " + std::to_string(cfg_.timeout) + " s");
        }
        const std::uint64_t now = rdtsc();
        if (wc[0].status != WcStatus::kSuccess)
          die(side_, label + ": completion " + std::string(to_string(wc[0].status)));
        inflight[q] = 0;
        if (i >= kWarmup) ns.push_back(secs(now - t) * 1e9);
        t_last = now;
        if (now - t_progress > static_cast<std::uint64_t>(0.5 * hz_)) {
          t_progress = now;
          progress(label + ": " + std::to_string(ns.size()) +
                   (w.duration > 0 ? "" : "/" + std::to_string(target)) + " round trips");
        }
      }
      completed = ns.size();
    }
    progress_clear();
    Point p;
    p.kind = Kind::kOurs;
    p.c2c_ns = c2c;
    p.workload = static_cast<std::int32_t>(wi);
    p.size = w.op == Op::kAtomic ? 8 : size;
    p.iterations = completed;
    p.seconds = secs(t_last - t0);
    if (p.seconds > 0) {
      p.msgs_per_s = static_cast<double>(completed) / p.seconds;
      p.bytes_per_s = p.msgs_per_s * p.size;
    }
    summarize_latency(ns, p);
    const auto& st = eng.stats();
    const auto diff = [&](Counter c) { return st.get(c) - st0.get(c); };
    p.retransmitted = diff(Counter::kRetransmittedPackets);
    p.timeouts = diff(Counter::kRetransmitTimeouts);
    p.probes = diff(Counter::kRetransmitProbes);
    p.rnr_naks = diff(Counter::kRnrNakRcvd);
    p.seq_naks = diff(Counter::kSeqErrNakRcvd);
    p.read_rerequests = diff(Counter::kReadReRequests);
    p.read_rerequest_bytes = diff(Counter::kReadReRequestBytes);
    p.retransmitted_bytes = diff(Counter::kRetransmittedBytes);
    p.sr_retransmits = diff(Counter::kSrRetransmits);
    p.window_stalls = diff(Counter::kWindowStalls);
    p.window_stall_ns = diff(Counter::kWindowStallNs);
    p.sr_edge_resends = diff(Counter::kSrEdgeResends);
    p.selective_repeat = announce && peers[0].sr;
    p.srtt_ns = eng.srtt_ns();
    p.injected_drops = (loop.faults() ? loop.faults()->stats().dropped : 0) - drops0;
    // Every request frame of a WRITE or SEND row carries min(size, MTU) bytes (A sends
    // nothing else but the occasional ACK of B's link probes): the payload lost.
    if (w.op == Op::kWrite || w.op == Op::kSend || w.op == Op::kWriteImm)
      p.lost_bytes = p.injected_drops * std::min(size, w.mtu);
    const auto busy_of = [](std::uint64_t busy, std::uint64_t idle) {
      return busy + idle ? static_cast<double>(busy) / static_cast<double>(busy + idle) : -1.0;
    };
    const port::PollLoop::TimeStats& time1 = loop.time_stats();
    p.busy_a = busy_of(time1.busy_ns - time0.busy_ns, time1.idle_ns - time0.idle_ns);
    ch_.send({MsgType::kSizeDone});
    const Msg lt = ch_.recv(MsgType::kLoopTime, poll);
    p.busy_b = busy_of(lt.b, lt.c);
    p.peer_read_responses = lt.d;
    return p;
  };
  for (const std::uint32_t size : w.sizes) {
    // `repeat` measurements of this size, each with its own link baseline when asked for
    std::vector<std::pair<std::optional<Point>, Point>> runs;
    for (std::uint32_t rep = 0; rep < w.repeat; ++rep) {
      const std::string run_of =
          w.repeat > 1 ? " (run " + std::to_string(rep + 1) + "/" + std::to_string(w.repeat) + ")"
                       : "";
      std::optional<Point> lp;
      if (cfg_.baselines.adjacent && cfg_.baselines.link) {
        // The link's figure for this row, measured just before it: on a VM whose cores move
        // on the host, the run's baselines can have been measured on a different machine.
        const Kind k = w.mode == Mode::kBw ? Kind::kL2Blast : Kind::kL2Echo;
        progress(w.name + " " + std::to_string(size) + " B: link baseline" + run_of);
        ch_.send({MsgType::kLinkStart});
        lp = link_baseline(k, frame_payload(size, w.mtu));
        ch_.send({MsgType::kLinkDone});
        lp->for_workload = static_cast<std::int32_t>(wi);
        lp->for_size = w.op == Op::kAtomic ? 8 : size;
      }
      runs.emplace_back(lp, measure(size, run_of));
    }
    emit_median_row(w, runs);
  }
  ch_.send({MsgType::kWorkloadDone});
  port::poll_until(
      loop, [] { return false; }, 0.05);
}

int BenchSide::run(const Site& site) {
  for (const auto& w : cfg_.workloads)
    for (const auto s : w.sizes)
      (w.mode == Mode::kBw ? blast_sizes_ : echo_sizes_).insert(frame_payload(s, w.mtu));
  try {
    port::eal_init(runtime::link_eal_args(site.link, "rocebench", site.mem_mb));
    port::PortSpec spec = runtime::link_port_spec(site.link);
    if (site.link.pmd != "af_xdp") spec.mbufs = 8192;  // 1000 QPs keep thousands of frames queued
    mac_ = spec.mac;
    ip_ = *ctl::parse_ipv4(site.link.ip);  // checked by link_eal_args
    port_ = std::make_unique<port::DpdkPort>(spec);
  } catch (const std::exception& e) {
    die(side_, e.what());
  }
  if (ready_fd >= 0) {  // the parent starts B now (run_bench)
    const char started = 1;
    if (::write(ready_fd, &started, 1) != 1) die(side_, "cannot tell the parent the port is up");
    ::close(ready_fd);
    ready_fd = -1;
  }
  // The other side may still be starting (EAL set-up takes seconds when the host is busy): wait
  // without spinning, so that this process does not take the CPU the peer needs to come up.
  const std::uint64_t wait_s = link_wait_seconds();
  const std::uint64_t up_end = port::now_ns() + wait_s * 1'000'000'000ull;
  while (!port_->link_up_or_redial()) {
    if (port::now_ns() > up_end)
      die(side_, "the link did not come up within " + std::to_string(wait_s) +
                     " s: is the other side running? (ROCE_BENCH_LINK_WAIT_S sets the wait)");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Addresses both ways: the link baselines and the QPs need the peer's MAC and IPv4 address.
  // (both ends run this program: the MAC's bytes travel as they are in `b`)
  Msg mine{MsgType::kHello, ip_.v};
  std::memcpy(&mine.b, mac_.b.data(), mac_.b.size());
  ch_.send(mine);
  const Msg hello = ch_.recv(MsgType::kHello, [&] { drain_rx(); });
  peer_ip_ = wire::Ipv4Addr{hello.a};
  std::memcpy(peer_mac_.b.data(), &hello.b, peer_mac_.b.size());
  if (cfg_.baselines.link) {
    if (a())
      link_a();
    else
      link_b();
  }
  if (a()) print_baselines(stdout, cfg_, base_);
  for (std::size_t wi = 0; wi < cfg_.workloads.size(); ++wi) workload(wi);
  // An ordered close. memif takes a connection down on its interrupt thread when the peer
  // goes, and a side still polling its rings then can touch memory being unmapped (the link
  // demo's B once died of SIGSEGV so; here it showed as "EAL: Error: Invalid memory"). So A
  // stops polling first, B closes while A waits, and A closes last.
  const auto no_poll = [] {};
  if (a()) {
    ch_.send({MsgType::kStopped});
    ch_.recv(MsgType::kClosed, no_poll);
  } else {
    ch_.recv(MsgType::kStopped, no_poll);
    port_.reset();
    ch_.send({MsgType::kClosed});
  }
  return 0;
}

void write_all(int fd, const void* p, std::size_t n, const char* what) {
  if (!ctl::write_all(fd, p, n))
    throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

/// The control connection of a remote topology: connects to the bench peer (retrying while
/// nobody listens there, up to the run's timeout) and sends it the configuration text.
int connect_peer(const BenchConfig& cfg) {
  const Topology& t = cfg.topology;
  const std::string where = t.peer + ":" + std::to_string(t.tcp_port());
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (const int e =
          ::getaddrinfo(t.peer.c_str(), std::to_string(t.tcp_port()).c_str(), &hints, &ai);
      e != 0)
    throw std::runtime_error("bench peer " + t.peer + ": " + ::gai_strerror(e));
  const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(cfg.timeout * 1e9);
  int fd = -1;
  for (;;) {
    fd = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    const int err = errno;
    if (fd >= 0) ::close(fd);
    if (err != ECONNREFUSED || port::now_ns() > end) {
      ::freeaddrinfo(ai);
      throw std::runtime_error("cannot reach the bench peer at " + where + ": " +
                               std::strerror(err) + " (is `roce-perf --bench-peer` running?)");
    }
    ::usleep(100'000);
  }
  ::freeaddrinfo(ai);
  ctl::tcp_nodelay(fd);
  const Msg m{MsgType::kConfig, kProtocolVersion, cfg.text.size()};
  write_all(fd, &m, sizeof m, "bench peer");
  write_all(fd, cfg.text.data(), cfg.text.size(), "bench peer");
  std::printf("bench peer: %s, this side on %s (%s, %s)\n", where.c_str(), t.iface.c_str(),
              t.pmd.c_str(), t.ip.c_str());
  return fd;
}

runtime::LinkOptions link_options(const Topology& t) {
  runtime::LinkOptions o;
  o.iface = t.iface;
  o.pmd = t.pmd;
  o.ip = t.ip;
  o.mac = t.mac;
  o.netdev_mtu = t.netdev_mtu;
  return o;
}

}  // namespace

int run_bench(const BenchConfig& cfg) {
  g_tty = ::isatty(2) != 0;
  const double hz = calibrate_tsc();
  std::printf("roce-perf bench '%s' (%s): %zu workload%s, TSC %.3f GHz\n", cfg.name.c_str(),
              cfg.origin.c_str(), cfg.workloads.size(), cfg.workloads.size() == 1 ? "" : "s",
              hz / 1e9);
  std::fflush(stdout);
  Results base;
  base.tsc_hz = hz;
  if (cfg.baselines.tcp) {
    std::set<std::uint32_t> stream_sizes, pp_sizes;
    for (const auto& w : cfg.workloads)
      for (const auto s : w.sizes) (w.mode == Mode::kBw ? stream_sizes : pp_sizes).insert(s);
    tcp_baselines(cfg, stream_sizes, pp_sizes, hz, base,
                  [](const std::string& what, std::size_t i, std::size_t n) {
                    progress(what + " (" + std::to_string(i + 1) + "/" + std::to_string(n) + ")");
                  });
    progress_clear();
  }

  const bool remote = cfg.topology.remote();
  std::string workdir = cfg.workdir;
  bool own_workdir = false;
  int ctl[2] = {-1, -1}, res[2];
  if (remote) {
    ctl[0] = connect_peer(cfg);
  } else {
    if (workdir.empty()) {
      char tmpl[] = "/tmp/roce-bench-XXXXXX";
      if (!::mkdtemp(tmpl)) throw std::runtime_error("cannot create a directory under /tmp");
      workdir = tmpl;
      own_workdir = true;
    } else {
      std::filesystem::create_directories(workdir);
      workdir = std::filesystem::absolute(workdir).string();  // memif wants an absolute path
      std::filesystem::remove(workdir + "/memif.sock");
    }
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, ctl) != 0)
      throw std::runtime_error("socketpair failed");
  }
  if (::pipe(res) != 0) throw std::runtime_error("pipe failed");
  // A says on `ready` when its port has started. A memif server's socket exists from its EAL
  // set-up on, but until rte_eth_dev_start it answers a client's INIT with "ID not found" and
  // DPDK 22.11's client never calls again: B started then waits for a link that never comes
  // (both sides' "link did not come up"; demo.sh step 2 beside a busy appliance on A's CPU).
  int ready[2] = {-1, -1};
  if (!remote && ::pipe(ready) != 0) throw std::runtime_error("pipe failed");
  // The core-to-core probe's line, shared by the two forked appliances (memif topology only).
  C2cLine* c2c = nullptr;
  if (!remote) {
    void* m =
        ::mmap(nullptr, sizeof(C2cLine), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::runtime_error("mmap of the probe line failed");
    c2c = new (m) C2cLine;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const int sides = remote ? 1 : 2;  // remote: B is the peer's
  pid_t pid[2];
  for (int side = 0; side < sides; ++side) {
    pid[side] = ::fork();
    if (pid[side] < 0) throw std::runtime_error("fork failed");
    if (pid[side] == 0) {
      if (!remote) ::close(ctl[1 - side]);
      ::close(res[0]);
      if (side == 1) ::close(res[1]);
      if (ready[0] >= 0) ::close(ready[0]);
      ::fcntl(ctl[side], F_SETFL, O_NONBLOCK);
      int rc = 1;
      try {
        const Site site = remote ? link_site(link_options(cfg.topology), cfg.topology.lcore)
                                 : memif_site(side, workdir, max_path_mtu(cfg));
        BenchSide app(side, ctl[side], side == 0 ? res[1] : -1, cfg, hz, base, c2c);
        app.ready_fd = side == 0 ? ready[1] : -1;
        rc = app.run(site);
      } catch (const std::exception& e) {
        die(side, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
    if (side == 0 && !remote) {
      // B (the memif client) once A's port has started: a byte, or the end of the pipe when
      // A failed before (B then fails on its own, without a server).
      ::close(ready[1]);
      char started = 0;
      while (::read(ready[0], &started, 1) < 0 && errno == EINTR) {
      }
      ::close(ready[0]);
      ready[0] = ready[1] = -1;
    }
  }
  for (const int fd : ctl)
    if (fd >= 0) ::close(fd);
  ::close(res[1]);
  Results all = base;
  Point p;
  while (ctl::read_all(res[0], &p, sizeof p)) all.points.push_back(p);
  ::close(res[0]);
  int rc = 0;
  for (int side = 0; side < sides; ++side) {
    int status = 0;
    ::waitpid(pid[side], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "roce-perf bench: appliance %c failed (status %d)\n", side ? 'B' : 'A',
                   status);
      rc = 1;
    }
  }
  if (own_workdir) std::filesystem::remove_all(workdir);
  if (c2c != nullptr) ::munmap(c2c, sizeof(C2cLine));
  std::fflush(stdout);
  print_targets(stdout, evaluate_targets(cfg, all));
  std::printf(
      "-------------------------------------------------------------------------------"
      "------------------------\n");
  const auto write = [&](const std::string& path, const std::string& body, const char* what) {
    if (path.empty()) return;
    std::ofstream f(path);
    f << body;
    if (!f) {
      std::fprintf(stderr, "roce-perf bench: cannot write %s\n", path.c_str());
      rc = 1;
      return;
    }
    std::printf(" %s: %s\n", what, path.c_str());
  };
  write(cfg.json, to_json(cfg, all), "JSON");
  write(cfg.svg, to_svg(cfg, all), "SVG plot");
  std::fflush(stdout);
  return rc;
}

int run_bench_peer(const PeerOptions& o) {
  const auto listen_ip = ctl::parse_ipv4(o.listen);
  if (!listen_ip) throw std::runtime_error("--listen: '" + o.listen + "' is not an IPv4 address");
  {  // the port options are checked before anyone connects (the MTU is known later)
    runtime::LinkOptions check = o.link;
    if (check.netdev_mtu == 0) check.netdev_mtu = 1500;
    runtime::link_vdev(check);
  }
  const int ls = ctl::tcp_listen(*listen_ip, o.port);
  std::printf("roce-perf bench peer: waiting for a benchmark on %s:%u (RoCE on %s, %s, %s)\n",
              o.listen.c_str(), o.port, o.link.iface.c_str(), o.link.pmd.c_str(),
              o.link.ip.c_str());
  std::fflush(stdout);
  sockaddr_in from{};
  socklen_t flen = sizeof from;
  const int fd = ::accept(ls, reinterpret_cast<sockaddr*>(&from), &flen);
  ::close(ls);
  if (fd < 0) throw std::runtime_error(std::string("accept failed: ") + std::strerror(errno));
  ctl::tcp_nodelay(fd);
  Msg m;
  if (!ctl::read_all(fd, &m, sizeof m) || m.type != MsgType::kConfig)
    throw std::runtime_error("the driver sent no benchmark configuration");
  if (m.a != kProtocolVersion)
    throw std::runtime_error("the driver speaks version " + std::to_string(m.a) +
                             " of the bench protocol, this peer " +
                             std::to_string(kProtocolVersion) + ": run the same roce-perf");
  if (m.b > kMaxConfigText)
    throw std::runtime_error("the driver's configuration is too long (" + std::to_string(m.b) +
                             " bytes)");
  std::string text(m.b, '\0');
  if (!ctl::read_all(fd, text.data(), text.size()))
    throw std::runtime_error("the driver closed the connection inside its configuration");
  const std::string driver = ctl::to_string(wire::Ipv4Addr{ntohl(from.sin_addr.s_addr)});
  const BenchConfig cfg = parse_bench_config(text, "the configuration from " + driver);
  runtime::LinkOptions lo = o.link;
  const std::uint32_t need = netdev_mtu_for(max_path_mtu(cfg));
  if (lo.netdev_mtu == 0) lo.netdev_mtu = need;
  if (lo.netdev_mtu < min_netdev_mtu(max_path_mtu(cfg)))
    throw std::runtime_error("--netdev-mtu " + std::to_string(lo.netdev_mtu) +
                             " is too small for the benchmark's path MTU " +
                             std::to_string(max_path_mtu(cfg)));
  std::printf("roce-perf bench peer: '%s' from %s, %zu workload%s\n", cfg.name.c_str(),
              driver.c_str(), cfg.workloads.size(), cfg.workloads.size() == 1 ? "" : "s");
  std::fflush(stdout);
  const double hz = calibrate_tsc();
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  BenchSide app(1, fd, -1, cfg, hz, Results{}, nullptr);
  const int rc = app.run(link_site(lo, o.lcore));
  ::close(fd);
  std::printf("roce-perf bench peer: '%s' done\n", cfg.name.c_str());
  return rc;
}

}  // namespace roce::bench
