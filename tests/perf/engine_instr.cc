// A fixed-iteration driver for counting the engine's instructions per packet under callgrind
// (tests/perf/engine_instructions.sh): the loop of roce-engine-bench's BM_Write (two engines
// joined in memory, A posts RDMA WRITEs of --size bytes with --depth in flight, path MTU 4096),
// without the benchmark library, for a fixed number of messages. Each side's share of an
// iteration is one non-inlined function (instr_*), so that their inclusive costs split the
// instructions between the requester, the responder and the completer exactly; the measured
// loop is instr_measure (run callgrind with --collect-atstart=no
// --toggle-collect=instr_measure), after a warm-up (instr_warmup) that is not collected.
//
// With --qps N the WRITEs go over N QPs, each with a source and a destination buffer of its
// own and --depth in flight, posted as roce-perf's many-QP rows post them (only the QPs that
// completed something since the last pass); --mtu sets the path MTU (roce-perf's rows: 1024).
// What grows with the number of QPs then shows as instructions per packet against --qps 1
// (tests/perf/engine_instructions.sh --qps). --wire-ns N moves the clock on by N ns per frame
// carried, as a link of that frame rate would (default 0: 100 ns per iteration only), so that
// round trips grow with what is queued and the timers (probe, ACK timeout) run as on a wire.
// --zero-copy N sends A's payloads of N bytes or more zero-copy (Engine::set_tx_zero_copy, as a
// DPDK port that chains external buffers does): the hand-over then takes A's frames in pieces
// and copies each together, as the PMD would (the harness's cost, not the requester's).
// --sr 1 turns selective repeat on for the pair (Engine::set_selective_repeat, one QP only):
// every packet of a WRITE then goes out as a WRITE Only with its own RETH (issue 32).
//
// Usage: roce-engine-instr [--messages N] [--size B] [--depth D] [--warmup N] [--qps N]
//            [--mtu B] [--wire-ns N] [--zero-copy N] [--sr 0|1]
// Prints one JSON line of the packet counts of the measured loop.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "tests/support/loopback.h"

using namespace roce::engine;
using roce::test::Buffer;
using roce::test::Endpoint;
using roce::test::Loopback;
using roce::test::LoopbackOptions;
using roce::test::RcOptions;

namespace instr {

// One QP of the many-QP mode and the WRITE it posts.
struct QpRun {
  Endpoint a;
  Buffer src, dst;
  Sge sge{};
  SendWr wr{};
  int outstanding = 0;
};

struct Run {
  Run(const LoopbackOptions& lo, const EngineConfig& ca, const EngineConfig& cb) : lb(lo, ca, cb) {}
  Loopback lb;
  Endpoint a, b;
  std::vector<SendWr> wrs;
  std::vector<std::span<const std::uint8_t>> frames;
  std::vector<std::vector<std::uint8_t>> whole;  ///< --zero-copy: A's frames copied together
  Sge sge{};
  std::uint64_t now = 1'000'000;
  std::uint64_t wire_ns = 0;  ///< --wire-ns: the clock's advance per frame carried
  int outstanding = 0;
  std::uint64_t done = 0;
  Wc wc[64]{};
  std::vector<QpRun> qps;            ///< --qps: every QP (empty: the one QP `a`)
  std::vector<std::uint32_t> ready;  ///< --qps: those with room to post
};

}  // namespace instr
using instr::QpRun;
using instr::Run;

// One function per share of an iteration (external linkage, never inlined: callgrind names
// them as they are written here).
extern "C" {
void instr_post(Run& r, int depth);
void instr_requester_run(Run& r);
void instr_hand_over(Run& r, Engine& from);
void instr_responder_receive(Run& r);
void instr_responder_run(Run& r);
void instr_completer_receive(Run& r);
void instr_poll(Run& r);
void instr_iteration(Run& r, int depth);
void instr_warmup(Run& r, int depth, std::uint64_t messages);
void instr_measure(Run& r, int depth, std::uint64_t messages);
[[gnu::noinline]] void instr_post(Run& r, int depth) {
  if (!r.qps.empty()) {
    for (const std::uint32_t i : r.ready) {
      QpRun& q = r.qps[i];
      while (q.outstanding < depth && r.lb.a().post_send(q.a.qp, &q.wr, nullptr) == kOk)
        ++q.outstanding;
    }
    r.ready.clear();
    return;
  }
  while (r.outstanding < depth) {
    if (r.lb.a().post_send(r.a.qp, &r.wrs[static_cast<std::size_t>(r.outstanding)], nullptr) != kOk)
      break;
    ++r.outstanding;
  }
}
[[gnu::noinline]] void instr_requester_run(Run& r) { r.lb.a().run(r.now); }
// The port's part: the frames an engine queued, taken from its ring (they stay in place until
// that engine's next run()), so that the receiving side's share is receive() alone.
[[gnu::noinline]] void instr_hand_over(Run& r, Engine& from) {
  r.frames.clear();
  if (from.tx_zero_copy() == 0) {
    from.drain_tx([&](std::span<const std::uint8_t> f) { r.frames.push_back(f); });
    return;
  }
  std::size_t n = 0;
  from.drain_tx_frames([&](const TxFrame& f) {
    if (n == r.whole.size()) r.whole.emplace_back();
    f.copy_to(r.whole[n]);
    r.frames.push_back(r.whole[n++]);
  });
}
[[gnu::noinline]] void instr_responder_receive(Run& r) {
  for (const auto f : r.frames) {
    r.now += r.wire_ns;
    r.lb.b().receive(f, r.now);
  }
}
[[gnu::noinline]] void instr_responder_run(Run& r) { r.lb.b().run(r.now); }
[[gnu::noinline]] void instr_completer_receive(Run& r) {
  for (const auto f : r.frames) {
    r.now += r.wire_ns;
    r.lb.a().receive(f, r.now);
  }
}
[[gnu::noinline]] void instr_poll(Run& r) {
  if (r.qps.empty()) {
    const int n = r.lb.a().poll_cq(r.a.scq, 64, r.wc);
    r.outstanding -= n;
    r.done += static_cast<std::uint64_t>(n);
    return;
  }
  for (int n = 64; n == 64;) {
    n = r.lb.a().poll_cq(r.a.scq, 64, r.wc);
    for (int k = 0; k < n; ++k) {
      const auto i = static_cast<std::uint32_t>(r.wc[k].wr_id);
      if (r.qps[i].outstanding-- == static_cast<int>(r.wrs.size())) r.ready.push_back(i);
    }
    r.done += static_cast<std::uint64_t>(n);
  }
}
[[gnu::noinline]] void instr_iteration(Run& r, int depth) {
  instr_post(r, depth);
  r.now += 100;
  instr_requester_run(r);
  instr_hand_over(r, r.lb.a());
  instr_responder_receive(r);
  instr_responder_run(r);
  instr_hand_over(r, r.lb.b());
  instr_completer_receive(r);
  instr_poll(r);
}
[[gnu::noinline]] void instr_warmup(Run& r, int depth, std::uint64_t messages) {
  const std::uint64_t until = r.done + messages;
  while (r.done < until) instr_iteration(r, depth);
}
[[gnu::noinline]] void instr_measure(Run& r, int depth, std::uint64_t messages) {
  const std::uint64_t until = r.done + messages;
  while (r.done < until) instr_iteration(r, depth);
}
}

int main(int argc, char** argv) {
  std::uint64_t messages = 20000, warmup = 2000, nqps = 0, wire_ns = 0, zero_copy = 0, sr = 0;
  std::size_t size = 8, mtu = 4096;
  int depth = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view k = argv[i];
    const std::uint64_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (k == "--messages")
      messages = v;
    else if (k == "--size")
      size = v;
    else if (k == "--depth")
      depth = static_cast<int>(v);
    else if (k == "--warmup")
      warmup = v;
    else if (k == "--qps")
      nqps = v;
    else if (k == "--mtu")
      mtu = v;
    else if (k == "--wire-ns")
      wire_ns = v;
    else if (k == "--zero-copy")
      zero_copy = v;
    else if (k == "--sr")
      sr = v;
    else {
      std::fprintf(stderr,
                   "usage: %s [--messages N] [--size B] [--depth D] [--warmup N] [--qps N] "
                   "[--mtu B] [--wire-ns N] [--zero-copy N] [--sr 0|1]\n",
                   argv[0]);
      return 2;
    }
  }
  const Mtu mtu_enum = mtu == 256    ? Mtu::k256
                       : mtu == 512  ? Mtu::k512
                       : mtu == 1024 ? Mtu::k1024
                       : mtu == 2048 ? Mtu::k2048
                                     : Mtu::k4096;
  if (depth < 1 || depth > 256 || messages == 0 || nqps > 65536 || mtu_bytes(mtu_enum) != mtu ||
      sr > 1 || (sr && nqps != 0)) {
    std::fprintf(stderr,
                 "--depth 1..256, --messages > 0, --qps up to 65536, --mtu 256..4096, "
                 "--sr 0 or 1 (one QP)\n");
    return 2;
  }
  LoopbackOptions lo;
  lo.record = false;
  EngineConfig ca = Loopback::default_config(0), cb = Loopback::default_config(1);
  ca.max_qps = cb.max_qps =
      std::max<std::uint32_t>(ca.max_qps, static_cast<std::uint32_t>(nqps) + 16);
  Run r(lo, ca, cb);
  r.wire_ns = wire_ns;
  r.lb.a().set_tx_zero_copy(static_cast<std::uint32_t>(zero_copy));
  RcOptions o;
  o.mtu = mtu_enum;
  if (nqps == 0) {
    o.cap = {256, 16, 1, 1, 0};
    std::tie(r.a, r.b) = connect(r.lb, o);
    if (sr && roce::test::set_selective_repeat(r.a, r.b, true) != kOk) {
      std::fprintf(stderr, "selective repeat refused\n");
      return 1;
    }
  } else {
    // The CQs take every QP's completions at once (connect()'s 4096 would overrun); the ACK
    // timeout is roce-perf's (67 ms).
    o.timeout = 14;
    o.cap = {static_cast<std::uint32_t>(depth) + 1, 16, 1, 1, 0};
    const auto cq_depth =
        static_cast<std::uint32_t>(nqps * (static_cast<std::uint64_t>(depth) + 1) + 64);
    r.a = {&r.lb.a(), r.lb.a().alloc_pd(), nullptr, nullptr, nullptr, nullptr};
    r.b = {&r.lb.b(), r.lb.b().alloc_pd(), nullptr, nullptr, nullptr, nullptr};
    r.a.scq = r.lb.a().create_cq(cq_depth);
    r.a.rcq = r.lb.a().create_cq(64);
    r.b.scq = r.lb.b().create_cq(64);
    r.b.rcq = r.lb.b().create_cq(64);
  }
  Buffer src = roce::test::make_buffer(r.lb.a(), r.a.pd, size, 1);
  Buffer dst = roce::test::make_buffer(r.lb.b(), r.b.pd, size, 2);
  r.sge = src.sge();
  r.wrs.resize(static_cast<std::size_t>(depth));
  r.frames.reserve(4096);
  for (auto& w : r.wrs) {
    w.opcode = WrOpcode::kWrite;
    w.sg_list = &r.sge;
    w.num_sge = 1;
    w.send_flags = kSendSignaled;
    w.rdma = {dst.addr(), dst.mr->key};
  }
  r.qps.resize(nqps);
  for (std::uint32_t i = 0; i < nqps; ++i) {
    QpRun& q = r.qps[i];
    q.a = roce::test::connect_on(r.lb, r.a, r.b, o).first;
    q.src = roce::test::make_buffer(r.lb.a(), r.a.pd, size, static_cast<std::uint8_t>(i));
    q.dst = roce::test::make_buffer(r.lb.b(), r.b.pd, size, static_cast<std::uint8_t>(i + 1));
    q.sge = q.src.sge();
    q.wr.opcode = WrOpcode::kWrite;
    q.wr.sg_list = &q.sge;
    q.wr.num_sge = 1;
    q.wr.send_flags = kSendSignaled;
    q.wr.wr_id = i;
    q.wr.rdma = {q.dst.addr(), q.dst.mr->key};
    r.ready.push_back(i);
  }
  instr_warmup(r, depth, warmup);  // not collected (callgrind --toggle-collect=instr_measure)
  const Stats& sa = r.lb.a().stats();
  const Stats& sb = r.lb.b().stats();
  const std::uint64_t a_tx = sa.get(Counter::kTxFrames), b_rx = sb.get(Counter::kRxFrames);
  const std::uint64_t b_tx = sb.get(Counter::kTxFrames), a_rx = sa.get(Counter::kRxFrames);
  const std::uint64_t done0 = r.done, retx0 = sa.get(Counter::kRetransmittedPackets);
  const std::uint64_t probes0 = sa.get(Counter::kRetransmitProbes);
  const std::uint64_t timeouts0 = sa.get(Counter::kRetransmitTimeouts);
  const std::uint64_t t0 = r.now;
  instr_measure(r, depth, messages);
  const std::uint64_t retx = sa.get(Counter::kRetransmittedPackets) - retx0;
  std::printf(
      "{\"messages\": %llu, \"size\": %zu, \"depth\": %d, \"qps\": %llu, \"mtu\": %zu, "
      "\"requests_sent\": %llu, \"requests_received\": %llu, \"acks_sent\": %llu, "
      "\"acks_received\": %llu, \"retransmitted\": %llu, \"probes\": %llu, \"timeouts\": %llu, "
      "\"simulated_ns\": %llu, \"warmup_messages\": %llu, \"zero_copy\": %llu, \"sr\": %llu}\n",
      static_cast<unsigned long long>(r.done - done0), size, depth,
      static_cast<unsigned long long>(nqps == 0 ? 1 : nqps), mtu,
      static_cast<unsigned long long>(sa.get(Counter::kTxFrames) - a_tx),
      static_cast<unsigned long long>(sb.get(Counter::kRxFrames) - b_rx),
      static_cast<unsigned long long>(sb.get(Counter::kTxFrames) - b_tx),
      static_cast<unsigned long long>(sa.get(Counter::kRxFrames) - a_rx),
      static_cast<unsigned long long>(retx),
      static_cast<unsigned long long>(sa.get(Counter::kRetransmitProbes) - probes0),
      static_cast<unsigned long long>(sa.get(Counter::kRetransmitTimeouts) - timeouts0),
      static_cast<unsigned long long>(r.now - t0), static_cast<unsigned long long>(done0),
      static_cast<unsigned long long>(zero_copy), static_cast<unsigned long long>(sr));
  return 0;
}
