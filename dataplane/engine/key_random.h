/// @file
/// Random numbers for keys and QPNs: what a peer must not guess. Drawn from the kernel's CSPRNG
/// (getrandom(2)) a batch at a time, so a control-path call costs a copy, not a system call. A
/// non-zero seed gives a reproducible sequence instead (tests, fuzzing), never for production.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>

namespace roce::engine {

class KeyRandom {
 public:
  /// `seed` 0: the kernel's generator; otherwise a seeded, reproducible one.
  explicit KeyRandom(std::uint64_t seed);
  std::uint64_t next();
  bool cryptographic() const { return seed_ == 0; }

 private:
  void refill();
  std::uint64_t seed_;
  std::mt19937_64 det_;
  std::array<std::uint64_t, 64> batch_{};
  std::size_t used_ = 64;
};

}  // namespace roce::engine
