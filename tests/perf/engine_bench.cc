// Engine benchmarks: two engines joined directly (A's transmit ring is handed to B's receive and
// back, no copies, no faults), both driven by the benchmark thread, so every figure is "two
// stacks on one core". Run: build/bin/roce-engine-bench [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "dataplane/engine/timer_wheel.h"
#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;

struct Direct {
  Loopback lb;  // used for its engines and connect(); the wire itself is bypassed
  std::uint64_t now = 1'000'000;
  // Time spent in each side: A is the requester (builds requests, consumes ACKs), B the
  // responder (consumes requests, builds ACKs and responses).
  std::chrono::nanoseconds t_req{0}, t_resp{0};
  void pump() {
    using Clock = std::chrono::steady_clock;
    now += 100;
    const auto t0 = Clock::now();
    lb.a().run(now);
    const auto t1 = Clock::now();
    lb.a().drain_tx([&](std::span<const std::uint8_t> f) { lb.b().receive(f, now); });
    lb.b().run(now);
    const auto t2 = Clock::now();
    lb.b().drain_tx([&](std::span<const std::uint8_t> f) { lb.a().receive(f, now); });
    const auto t3 = Clock::now();
    t_req += (t1 - t0) + (t3 - t2);
    t_resp += t2 - t1;
  }
  // Per-packet costs of each side, as benchmark counters.
  void report(benchmark::State& state) {
    const auto sent = static_cast<double>(lb.a().stats().get(Counter::kTxFrames));
    const auto got = static_cast<double>(lb.b().stats().get(Counter::kRxFrames));
    if (sent > 0) state.counters["req_ns_per_pkt"] = static_cast<double>(t_req.count()) / sent;
    if (got > 0) state.counters["resp_ns_per_pkt"] = static_cast<double>(t_resp.count()) / got;
  }
};

// RDMA WRITE of `size` bytes, `depth` WQEs in flight, path MTU 4096.
void BM_Write(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const auto depth = static_cast<int>(state.range(1));
  LoopbackOptions lo;
  lo.record = false;
  Direct d{Loopback(lo)};
  RcOptions o;
  o.mtu = Mtu::k4096;
  o.cap = {256, 16, 1, 1, 0};
  auto [a, b] = connect(d.lb, o);
  Buffer src = make_buffer(d.lb.a(), a.pd, size, 1);
  Buffer dst = make_buffer(d.lb.b(), b.pd, size, 2);
  Sge s = src.sge();
  std::vector<SendWr> wrs(static_cast<std::size_t>(depth));
  for (auto& w : wrs) {
    w.opcode = WrOpcode::kWrite;
    w.sg_list = &s;
    w.num_sge = 1;
    w.send_flags = kSendSignaled;
    w.rdma = {dst.addr(), dst.mr->key};
  }
  Wc wc[64];
  std::int64_t done = 0;
  int outstanding = 0;
  for (auto _ : state) {
    while (outstanding < depth) {
      if (d.lb.a().post_send(a.qp, &wrs[static_cast<std::size_t>(outstanding)], nullptr) != kOk)
        break;
      ++outstanding;
    }
    d.pump();
    const int n = d.lb.a().poll_cq(a.scq, 64, wc);
    outstanding -= n;
    done += n;
  }
  state.SetItemsProcessed(done);
  state.SetBytesProcessed(done * static_cast<std::int64_t>(size));
  state.counters["msgs"] = static_cast<double>(done);
  d.report(state);
}
BENCHMARK(BM_Write)
    ->ArgNames({"size", "depth"})
    ->Args({8, 128})
    ->Args({4096, 64})
    ->Args({65536, 16})
    ->Args({1 << 20, 4});

// 4 KiB RDMA WRITEs over `qps` QPs (path MTU 1024, 4 packets each), `depth` in flight on each,
// every QP with buffers and MRs of its own and every WRITE signaled, as roce-perf's 1000-QP
// target runs them: what grows with the number of QPs (per-QP state and buffers leaving the
// cache, an ACK and a completion per message) shows as ns per packet against qps:1.
void BM_WriteQps(benchmark::State& state) {
  const auto nqp = static_cast<std::size_t>(state.range(0));
  const auto depth = static_cast<std::uint32_t>(state.range(1));
  constexpr std::size_t kSize = 4096;
  LoopbackOptions lo;
  lo.record = false;
  EngineConfig ca = Loopback::default_config(0), cb = Loopback::default_config(1);
  ca.max_qps = cb.max_qps =
      std::max<std::uint32_t>(ca.max_qps, static_cast<std::uint32_t>(nqp) + 16);
  Direct d{Loopback(lo, ca, cb)};
  RcOptions o;
  o.cap = {depth * 2, 16, 1, 1, 0};
  auto [a0, b0] = connect(d.lb, o);
  struct Q {
    Endpoint a;
    Buffer src, dst;
    Sge sge;
    SendWr wr;
    std::uint32_t outstanding = 0;
  };
  std::vector<Q> qs(nqp);
  for (std::size_t i = 0; i < nqp; ++i) {
    Q& q = qs[i];
    q.a = i == 0 ? a0 : connect_on(d.lb, a0, b0, o).first;
    q.src = make_buffer(d.lb.a(), a0.pd, kSize, static_cast<std::uint8_t>(i));
    q.dst = make_buffer(d.lb.b(), b0.pd, kSize, static_cast<std::uint8_t>(i + 1));
    q.sge = q.src.sge();
    q.wr.opcode = WrOpcode::kWrite;
    q.wr.sg_list = &q.sge;
    q.wr.num_sge = 1;
    q.wr.send_flags = kSendSignaled;
    q.wr.wr_id = i;
    q.wr.rdma = {q.dst.addr(), q.dst.mr->key};
  }
  Wc wc[64];
  std::int64_t done = 0;
  std::vector<std::uint32_t> ready(nqp);
  for (std::uint32_t i = 0; i < nqp; ++i) ready[i] = i;
  for (auto _ : state) {
    for (const std::uint32_t i : ready) {
      Q& q = qs[i];
      while (q.outstanding < depth && d.lb.a().post_send(q.a.qp, &q.wr, nullptr) == kOk)
        ++q.outstanding;
    }
    ready.clear();
    d.pump();
    for (int n = 64; n == 64;) {
      n = d.lb.a().poll_cq(a0.scq, 64, wc);
      for (int k = 0; k < n; ++k) {
        Q& q = qs[wc[k].wr_id];
        if (q.outstanding-- == depth) ready.push_back(static_cast<std::uint32_t>(wc[k].wr_id));
      }
      done += n;
    }
  }
  state.SetItemsProcessed(done);
  state.SetBytesProcessed(done * static_cast<std::int64_t>(kSize));
  state.counters["msgs"] = static_cast<double>(done);
  d.report(state);
}
BENCHMARK(BM_WriteQps)
    ->ArgNames({"qps", "depth"})
    ->Args({1, 64})
    ->Args({1000, 2})
    ->Args({10000, 2});

// 8-byte WRITE ping-pong: one message in flight, time per round trip through both stacks.
void BM_WritePingPong(benchmark::State& state) {
  LoopbackOptions lo;
  lo.record = false;
  Direct d{Loopback(lo)};
  auto [a, b] = connect(d.lb);
  Buffer src = make_buffer(d.lb.a(), a.pd, 8, 1);
  Buffer dst = make_buffer(d.lb.b(), b.pd, 8, 2);
  Sge s = src.sge();
  SendWr w;
  w.opcode = WrOpcode::kWrite;
  w.sg_list = &s;
  w.num_sge = 1;
  w.send_flags = kSendSignaled;
  w.rdma = {dst.addr(), dst.mr->key};
  Wc wc;
  for (auto _ : state) {
    d.lb.a().post_send(a.qp, &w, nullptr);
    while (d.lb.a().poll_cq(a.scq, 1, &wc) == 0) d.pump();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  d.report(state);
}
BENCHMARK(BM_WritePingPong);

// The timing wheel with `pending` armed timers (QPs with probe timers): per iteration the
// clock moves 250 ns, one timer is armed, and expire() runs when the earliest is due (as
// Engine::run does), so that about as many entries fall due as are added.
void BM_TimerWheel(benchmark::State& state) {
  struct Obj {
    int id;
  };
  const auto pending = static_cast<std::size_t>(state.range(0));
  TimerWheel<Obj> w;
  std::vector<Obj> objs(pending);
  std::mt19937_64 rng(1);
  std::uint64_t now = 1'000'000'000;
  const std::uint64_t step = 250, spread = 1'000'000;
  std::size_t i = 0, fired = 0;
  w.expire(now, [](Obj*, std::uint64_t) {});
  for (std::size_t k = 0; k < pending; ++k) w.schedule(&objs[k], now + rng() % spread);
  for (auto _ : state) {
    now += step;
    w.schedule(&objs[i++ % pending], now + rng() % (2 * pending * step));
    if (now >= w.next()) w.expire(now, [&](Obj*, std::uint64_t) { ++fired; });
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.counters["fired"] = static_cast<double>(fired);
  state.counters["pending_end"] = static_cast<double>(w.size());
}
BENCHMARK(BM_TimerWheel)->ArgName("pending")->Arg(16)->Arg(1000)->Arg(100000);

}  // namespace
}  // namespace roce::test

BENCHMARK_MAIN();
