/// @file
/// `roce-perf --config FILE`: runs a whole benchmark (bench_config.h) and writes its reports.
#pragma once

#include "apps/perf/bench/bench_config.h"

namespace roce::bench {

/// Measures the baselines and every workload of `cfg`, prints the table, writes the JSON and
/// SVG files it names. Returns the process exit status (0: every step completed).
int run_bench(const BenchConfig& cfg);

}  // namespace roce::bench
