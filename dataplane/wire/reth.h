/// @file
/// RDMA Extended Transport Header, 16 bytes (IBA Vol.1 9.3.3): in WRITE First/Only and READ
/// requests. DMA length is the length of the whole message, not of this packet.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/view.h"

namespace roce::wire {

template <class Byte>
class BasicRethView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 16;
  using ViewBase<Byte>::ViewBase;

  std::uint64_t va() const { return load_be64(p_); }
  std::uint32_t rkey() const { return load_be32(p_ + 8); }
  std::uint32_t dma_len() const { return load_be32(p_ + 12); }

  void set_va(std::uint64_t v) requires M { store_be64(p_, v); }
  void set_rkey(std::uint32_t v) requires M { store_be32(p_ + 8, v); }
  void set_dma_len(std::uint32_t v) requires M { store_be32(p_ + 12, v); }
};

/// FLUSH Extended Transport Header, 4 bytes (IBA 1.5 Memory Placement Extensions):
/// bits 5..4 selectivity level, bits 3..0 placement type, in the last byte.
template <class Byte>
class BasicFethView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 4;
  using ViewBase<Byte>::ViewBase;

  unsigned selectivity() const { return (p_[3] >> 4) & 0x3u; }
  unsigned placement_type() const { return p_[3] & 0xFu; }
  void set(unsigned selectivity, unsigned placement_type) requires M {
    store_be32(p_, ((selectivity & 0x3u) << 4) | (placement_type & 0xFu));
  }
};

using RethView = BasicRethView<std::uint8_t>;
using ConstRethView = BasicRethView<const std::uint8_t>;
using FethView = BasicFethView<std::uint8_t>;
using ConstFethView = BasicFethView<const std::uint8_t>;

}  // namespace roce::wire
