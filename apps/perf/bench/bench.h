/// @file
/// `roce-perf --config FILE`: runs a whole benchmark (bench_config.h) and writes its reports.
#pragma once

#include "apps/perf/bench/bench_config.h"
#include "runtime/link.h"

namespace roce::bench {

/// Measures the baselines and every workload of `cfg`, prints the table, writes the JSON and
/// SVG files it names. Returns the process exit status (0: every step completed).
int run_bench(const BenchConfig& cfg);

/// `roce-perf --bench-peer`: side B of a remote topology (bench_config.h, Topology). Waits for
/// one driver on `listen:port`, takes the benchmark configuration it sends, answers every
/// baseline and workload on a port of `link`, and returns when the driver is done.
struct PeerOptions {
  runtime::LinkOptions link;  ///< netdev_mtu 0: what the benchmark's path MTUs need
  std::string listen = "0.0.0.0";
  std::uint16_t port = kBenchPeerPort;
  std::uint32_t lcore = 0;
};
int run_bench_peer(const PeerOptions& o);

}  // namespace roce::bench
