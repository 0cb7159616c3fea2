/// @file
/// Selective repeat header, 12 bytes: opens the payload of the SR opcodes (0xE0-0xE3, opcode.h)
/// that two of our stacks exchange on an RC QP where both agreed on selective repeat
/// (docs/loss-recovery.md, "SENDs and WRITE with immediate"). It lets the responder place a
/// packet of a SEND (or WRITE with immediate) without the packets before it, as IRN's
/// per-packet extension does: which receive WQE, where in it, and how long the message is.
///   0  message index: the message's place among those of the QP that consume a receive WQE,
///      counted (modulo 2^32) from the direction's base, which both ends agreed on when
///      selective repeat was turned on and no one else knows (engine::SrIndexBase): base + n
///      for the n-th posted receive WQE. The responder drops, unanswered, a packet whose index
///      is not among the next 64 it expects (counted sr_forged_dropped): a SEND carries no key,
///      and the base is what a blind forger would have to guess.
///   4  offset of this packet's data in the message (a multiple of the path MTU)
///   8  length of the whole message (byte_len of the receive completion)
/// The data follows. ImmDt, IETH and (WRITE with immediate) RETH sit where IBA puts them,
/// between the BTH and this header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/view.h"

namespace roce::wire {

template <class Byte>
class BasicSrhView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 12;
  using ViewBase<Byte>::ViewBase;

  std::uint32_t index() const { return load_be32(p_); }
  std::uint32_t offset() const { return load_be32(p_ + 4); }
  std::uint32_t length() const { return load_be32(p_ + 8); }

  void set(std::uint32_t index, std::uint32_t offset, std::uint32_t length) requires M {
    store_be32(p_, index);
    store_be32(p_ + 4, offset);
    store_be32(p_ + 8, length);
  }
};

using SrhView = BasicSrhView<std::uint8_t>;
using ConstSrhView = BasicSrhView<const std::uint8_t>;

}  // namespace roce::wire
