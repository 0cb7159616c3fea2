/// @file
/// The time-stamp counter as the benchmark's clock: rdtsc, calibrated once against
/// std::chrono::steady_clock. Invariant TSCs (every x86 CPU of the last decade) tick at a fixed
/// rate on every core, so stamps taken on one core compare with stamps taken on another.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace roce::bench {

inline std::uint64_t rdtsc() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

/// TSC ticks per second, measured against steady_clock over `ms` milliseconds.
inline double calibrate_tsc(int ms = 100) {
  using clk = std::chrono::steady_clock;
  const auto t0 = clk::now();
  const std::uint64_t c0 = rdtsc();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  const auto t1 = clk::now();
  const std::uint64_t c1 = rdtsc();
  const double secs = std::chrono::duration<double>(t1 - t0).count();
  return static_cast<double>(c1 - c0) / secs;
}

}  // namespace roce::bench
