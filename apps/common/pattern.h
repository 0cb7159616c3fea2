/// @file
/// A seeded, recognisable byte pattern (xorshift32) for demos and tests that check every byte.
#pragma once

#include <cstdint>
#include <vector>

namespace roce::apps {

inline void fill_pattern(std::vector<std::uint8_t>& v, std::uint32_t seed) {
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<std::uint8_t>(x);
  }
}

}  // namespace roce::apps
