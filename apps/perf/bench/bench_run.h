/// @file
/// Pieces of the benchmark runner shared between its files (not an interface).
#pragma once

#include <functional>
#include <set>
#include <string>

#include "apps/perf/bench/bench_config.h"
#include "apps/perf/bench/bench_report.h"

namespace roce::bench {

/// Shows what runs now (a progress line on a terminal; nothing otherwise).
using Progress = std::function<void(const std::string& what, std::size_t done, std::size_t total)>;

/// Kernel TCP over loopback: a stream per size in `stream_sizes`, a ping-pong per size in
/// `pingpong_sizes`.
void tcp_baselines(const BenchConfig& cfg, const std::set<std::uint32_t>& stream_sizes,
                   const std::set<std::uint32_t>& pingpong_sizes, double tsc_hz, Results& out,
                   const Progress& progress);

}  // namespace roce::bench
