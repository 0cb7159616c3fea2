/// @file
/// 24-bit sequence types of the BTH and AETH. A Psn lives on a circle of 2^24 values, so it has
/// no operator<: callers ask distance() or before(), as rxe's psn_compare() does (IBA 9.7.1).
#pragma once

#include <cstdint>

namespace roce::wire {

inline constexpr std::uint32_t kMask24 = 0xFF'FFFF;

/// Signed distance a - b on a 24-bit circle, in [-2^23, 2^23).
constexpr std::int32_t distance24(std::uint32_t a, std::uint32_t b) {
  return static_cast<std::int32_t>((a - b) << 8) >> 8;
}

/// Packet sequence number (BTH bits 23..0 of bytes 9-11).
class Psn {
 public:
  static constexpr std::uint32_t kMask = kMask24;
  constexpr Psn() = default;
  constexpr explicit Psn(std::uint32_t v) : v_(v & kMask) {}
  constexpr std::uint32_t raw() const { return v_; }
  constexpr Psn operator+(std::uint32_t n) const { return Psn(v_ + n); }
  constexpr Psn operator-(std::uint32_t n) const { return Psn(v_ - n); }
  constexpr Psn& operator+=(std::uint32_t n) { return *this = *this + n; }
  constexpr Psn& operator++() { return *this += 1; }
  friend constexpr std::int32_t distance(Psn a, Psn b) { return distance24(a.v_, b.v_); }
  friend constexpr bool operator==(Psn, Psn) = default;

 private:
  std::uint32_t v_ = 0;
};

/// True when a comes strictly before b on the circle.
constexpr bool before(Psn a, Psn b) { return distance(a, b) < 0; }
/// True when a comes strictly after b on the circle.
constexpr bool after(Psn a, Psn b) { return distance(a, b) > 0; }

/// Message sequence number carried in the AETH (counts completed inbound messages mod 2^24).
class Msn {
 public:
  constexpr Msn() = default;
  constexpr explicit Msn(std::uint32_t v) : v_(v & kMask24) {}
  constexpr std::uint32_t raw() const { return v_; }
  constexpr Msn operator+(std::uint32_t n) const { return Msn(v_ + n); }
  friend constexpr std::int32_t distance(Msn a, Msn b) { return distance24(a.v_, b.v_); }
  friend constexpr bool operator==(Msn, Msn) = default;

 private:
  std::uint32_t v_ = 0;
};

/// Queue pair number: a 24-bit name, not an integer to compute with.
class Qpn {
 public:
  static constexpr std::uint32_t kSmi = 0;
  static constexpr std::uint32_t kGsi = 1;
  static constexpr std::uint32_t kMulticast = kMask24;
  constexpr Qpn() = default;
  constexpr explicit Qpn(std::uint32_t v) : v_(v & kMask24) {}
  constexpr std::uint32_t raw() const { return v_; }
  friend constexpr bool operator==(Qpn, Qpn) = default;

 private:
  std::uint32_t v_ = 0;
};

static_assert(before(Psn(0xFF'FFFF), Psn(0)), "wrap: the last PSN precedes 0");
static_assert(distance(Psn(0), Psn(0xFF'FFFF)) == 1);
static_assert(distance(Psn(0x80'0000), Psn(0)) == -0x80'0000, "half the circle is 'before'");
static_assert(Psn(0xFF'FFFF) + 2 == Psn(1));

}  // namespace roce::wire
