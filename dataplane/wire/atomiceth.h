/// @file
/// Atomic Extended Transport Header, 28 bytes (IBA Vol.1 9.3.4), and Atomic ACK Extended
/// Transport Header, 8 bytes (9.3.6). The 64-bit fields of the AtomicETH are only 4-byte
/// aligned in a frame, hence the memcpy-based loads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/view.h"

namespace roce::wire {

template <class Byte>
class BasicAtomicEthView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 28;
  using ViewBase<Byte>::ViewBase;

  std::uint64_t va() const { return load_be64(p_); }
  std::uint32_t rkey() const { return load_be32(p_ + 8); }
  /// New value (compare-and-swap) or addend (fetch-and-add).
  std::uint64_t swap_add() const { return load_be64(p_ + 12); }
  /// Compare value (compare-and-swap); ignored by fetch-and-add.
  std::uint64_t compare() const { return load_be64(p_ + 20); }

  void set_va(std::uint64_t v) requires M { store_be64(p_, v); }
  void set_rkey(std::uint32_t v) requires M { store_be32(p_ + 8, v); }
  void set_swap_add(std::uint64_t v) requires M { store_be64(p_ + 12, v); }
  void set_compare(std::uint64_t v) requires M { store_be64(p_ + 20, v); }
};

template <class Byte>
class BasicAtomicAckEthView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 8;
  using ViewBase<Byte>::ViewBase;

  /// The remote value before the atomic operation.
  std::uint64_t orig() const { return load_be64(p_); }
  void set_orig(std::uint64_t v) requires M { store_be64(p_, v); }
};

using AtomicEthView = BasicAtomicEthView<std::uint8_t>;
using ConstAtomicEthView = BasicAtomicEthView<const std::uint8_t>;
using AtomicAckEthView = BasicAtomicAckEthView<std::uint8_t>;
using ConstAtomicAckEthView = BasicAtomicAckEthView<const std::uint8_t>;

}  // namespace roce::wire
