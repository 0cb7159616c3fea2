// Engine benchmarks: two engines joined directly (A's transmit ring is handed to B's receive and
// back, no copies, no faults), both driven by the benchmark thread, so every figure is "two
// stacks on one core". Run: build/bin/roce-engine-bench [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <vector>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;

struct Direct {
  Loopback lb;  // used for its engines and connect(); the wire itself is bypassed
  std::uint64_t now = 1'000'000;
  void pump() {
    now += 100;
    lb.a().run(now);
    lb.a().drain_tx([&](std::span<const std::uint8_t> f) { lb.b().receive(f, now); });
    lb.b().run(now);
    lb.b().drain_tx([&](std::span<const std::uint8_t> f) { lb.a().receive(f, now); });
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
}
BENCHMARK(BM_Write)
    ->ArgNames({"size", "depth"})
    ->Args({8, 128})
    ->Args({4096, 64})
    ->Args({65536, 16})
    ->Args({1 << 20, 4});

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
}
BENCHMARK(BM_WritePingPong);

}  // namespace
}  // namespace roce::test

BENCHMARK_MAIN();
