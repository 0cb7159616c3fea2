/// @file
/// Compile-time knobs of the dataplane, in one place (eRPC tweakme.h). Runtime settings live in
/// the YAML configuration instead.
#pragma once

#include <bit>
#include <cstdint>

namespace roce {

inline constexpr std::uint16_t kRxBurst = 32;
inline constexpr std::uint16_t kTxBudget = 64;
inline constexpr std::uint32_t kMaxQpsPerLcore = 4096;
inline constexpr bool kDatapathStats = true;
#ifdef ROCE_TESTING
inline constexpr bool kTesting = true;
#else
inline constexpr bool kTesting = false;
#endif

static_assert(std::has_single_bit(kMaxQpsPerLcore), "QP tables are indexed by mask");

}  // namespace roce
