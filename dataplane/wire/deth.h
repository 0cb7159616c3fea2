/// @file
/// The small extension headers: DETH (8 bytes, IBA 9.3.2, UD), ImmDt (4 bytes, 9.3.7) and
/// IETH (4 bytes, 9.3.8, SEND with invalidate); and the CNP payload (16 reserved bytes,
/// IBA Annex A17.9.3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/psn.h"
#include "dataplane/wire/view.h"

namespace roce::wire {

/// Q_Key of the GSI QP (QP1), IBA 13.4.6.
inline constexpr std::uint32_t kGsiQkey = 0x8001'0000;

template <class Byte>
class BasicDethView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 8;
  using ViewBase<Byte>::ViewBase;

  std::uint32_t qkey() const { return load_be32(p_); }
  Qpn src_qp() const { return Qpn{load_be24(p_ + 5)}; }

  void set_qkey(std::uint32_t v) requires M { store_be32(p_, v); }
  /// Writes the reserved byte as 0 and the 24-bit source QP.
  void set_src_qp(Qpn q) requires M {
    p_[4] = 0;
    store_be24(p_ + 5, q.raw());
  }
};

/// Immediate data: 32 opaque bits, delivered to the receiver as they are on the wire.
template <class Byte>
class BasicImmDtView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 4;
  using ViewBase<Byte>::ViewBase;

  /// Immediate value as a big-endian number (libibverbs hands it to the user in network order).
  std::uint32_t imm() const { return load_be32(p_); }
  void set_imm(std::uint32_t v) requires M { store_be32(p_, v); }
};

template <class Byte>
class BasicIethView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 4;
  using ViewBase<Byte>::ViewBase;

  /// R_Key the responder invalidates after the SEND completes.
  std::uint32_t rkey() const { return load_be32(p_); }
  void set_rkey(std::uint32_t v) requires M { store_be32(p_, v); }
};

/// CNP payload: two reserved 64-bit words, sent as zero.
template <class Byte>
class BasicCnpPadView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 16;
  using ViewBase<Byte>::ViewBase;

  bool all_zero() const {
    for (std::size_t i = 0; i < kSize; ++i)
      if (p_[i] != 0) return false;
    return true;
  }
  void clear() requires M { std::memset(p_, 0, kSize); }
};

using DethView = BasicDethView<std::uint8_t>;
using ConstDethView = BasicDethView<const std::uint8_t>;
using ImmDtView = BasicImmDtView<std::uint8_t>;
using ConstImmDtView = BasicImmDtView<const std::uint8_t>;
using IethView = BasicIethView<std::uint8_t>;
using ConstIethView = BasicIethView<const std::uint8_t>;
using CnpPadView = BasicCnpPadView<std::uint8_t>;
using ConstCnpPadView = BasicCnpPadView<const std::uint8_t>;

}  // namespace roce::wire
