// Micro-benchmarks of the wire codec: parse (with and without ICRC), build, and ICRC alone,
// per payload size. Run: build/bin/roce-wire-bench [--benchmark_format=json]
#include <benchmark/benchmark.h>
#include <isa-l/crc.h>

#include <cstring>
#include <vector>

#include "dataplane/wire/crc_fold.h"
#include "dataplane/wire/path_template.h"
#include "dataplane/wire/roce_frame.h"

namespace roce::wire {
namespace {

FrameSpec write_spec(std::size_t payload) {
  FrameSpec s;
  s.opcode = payload == 0 ? Opcode::kRcAcknowledge : Opcode::kRcWriteOnly;
  s.dest_qp = Qpn(0x11);
  s.psn = Psn(0x123456);
  s.reth = {0x7F0000001000ull, 0x1234, static_cast<std::uint32_t>(payload)};
  return s;
}

void set_counters(benchmark::State& state, std::size_t frame_bytes) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * frame_bytes));
}

void BM_Parse(benchmark::State& state) {
  const auto payload_len = static_cast<std::size_t>(state.range(0));
  const bool icrc = state.range(1) != 0;
  const FrameSpec s = write_spec(payload_len);
  std::vector<std::uint8_t> payload(payload_len, 0xAB);
  std::vector<std::uint8_t> frame(frame_len(s, payload_len));
  build_frame(s, payload, frame);
  ParseOptions opts;
  opts.verify_icrc = icrc;
  RxPkt p;
  for (auto _ : state) {
    benchmark::DoNotOptimize(parse_frame(frame, p, opts));
    benchmark::DoNotOptimize(p);
  }
  set_counters(state, frame.size());
}
BENCHMARK(BM_Parse)->ArgNames({"payload", "icrc"})->ArgsProduct({{0, 64, 256, 1024, 4096}, {0, 1}});

void BM_Build(benchmark::State& state) {
  const auto payload_len = static_cast<std::size_t>(state.range(0));
  FrameSpec s = write_spec(payload_len);
  std::vector<std::uint8_t> payload(payload_len, 0xAB);
  std::vector<std::uint8_t> frame(frame_len(s, payload_len));
  std::uint32_t psn = 0;
  for (auto _ : state) {
    s.psn = Psn(psn++);
    benchmark::DoNotOptimize(build_frame(s, payload, frame));
    benchmark::ClobberMemory();
  }
  set_counters(state, frame.size());
}
BENCHMARK(BM_Build)->ArgName("payload")->Arg(0)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);

// The same frames from a QP's path template (path_template.h), as the requester builds them.
void BM_BuildTemplate(benchmark::State& state) {
  const auto payload_len = static_cast<std::size_t>(state.range(0));
  const FrameSpec s = write_spec(payload_len);
  const PathTemplate t = make_path_template(s);
  PacketFields f;
  f.opcode = s.opcode;
  f.reth_va = s.reth.va;
  f.reth_rkey = s.reth.rkey;
  f.reth_len = s.reth.dma_len;
  f.ack_req = true;
  std::vector<std::uint8_t> payload(payload_len, 0xAB);
  std::vector<std::uint8_t> frame(frame_len(s, payload_len) + 64);
  std::uint32_t psn = 0;
  for (auto _ : state) {
    f.psn = Psn(psn++);
    const std::size_t hdr = write_masked_headers(t, f, payload_len, frame.data());
    if (payload_len) std::memcpy(frame.data() + hdr, payload.data(), payload_len);
    benchmark::DoNotOptimize(finish_masked(t, hdr, payload_len, frame.data()));
    benchmark::ClobberMemory();
  }
  set_counters(state, frame_len(s, payload_len));
}
BENCHMARK(BM_BuildTemplate)->ArgName("payload")->Arg(0)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);

void BM_Icrc(benchmark::State& state) {
  const auto payload_len = static_cast<std::size_t>(state.range(0));
  const FrameSpec s = write_spec(payload_len);
  std::vector<std::uint8_t> payload(payload_len, 0xAB);
  std::vector<std::uint8_t> frame(frame_len(s, payload_len));
  build_frame(s, payload, frame);
  const std::uint8_t* l3 = frame.data() + 14;
  const std::size_t len = frame.size() - 14 - kIcrcSize;
  for (auto _ : state) benchmark::DoNotOptimize(compute_icrc(l3, len, IpVersion::kV4));
  set_counters(state, len);
}
BENCHMARK(BM_Icrc)->ArgName("payload")->Arg(0)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);

// The plain CRC-32 of `bytes` by ISA-L (kernel 0) and by crc32_fold (kernel 1), each call
// seeded with the last one's result: the time until a CRC is known, as on the way from a
// frame to its answer (BM_Icrc lets calls overlap, as a stream of frames does).
void BM_Crc32Chained(benchmark::State& state) {
  const bool fold = state.range(0) == 1;
  const auto n = static_cast<std::size_t>(state.range(1));
  if (fold && !kCrcFoldUsable) {
    state.SkipWithError("no PCLMULQDQ");
    return;
  }
  std::vector<std::uint8_t> buf(n);
  for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<std::uint8_t>(i * 7);
  const bool avx = __builtin_cpu_supports("avx");
  std::uint32_t crc = 0;
  for (auto _ : state) {
    crc = fold ? crc32_fold(crc, buf.data(), n) : crc32_gzip_refl(crc, buf.data(), n);
    if (!fold && avx) asm volatile("vzeroupper" ::: "memory");  // as icrc.cc does after ISA-L
    benchmark::DoNotOptimize(crc);
  }
  set_counters(state, n);
}
BENCHMARK(BM_Crc32Chained)
    ->ArgNames({"fold", "bytes"})
    ->ArgsProduct({{0, 1}, {44, 52, 72, 128, 200}});

}  // namespace
}  // namespace roce::wire

BENCHMARK_MAIN();
