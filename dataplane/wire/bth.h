/// @file
/// Base Transport Header, 12 bytes (IBA Vol.1 9.2). Byte offsets as in the spec figure.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/opcode.h"
#include "dataplane/wire/psn.h"
#include "dataplane/wire/view.h"

namespace roce::wire {

inline constexpr std::uint16_t kDefaultPkey = 0xFFFF;

template <class Byte>
class BasicBthView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 12;
  using ViewBase<Byte>::ViewBase;

  Opcode opcode() const { return Opcode{p_[0]}; }
  bool se() const { return (p_[1] & 0x80) != 0; }
  bool mig_req() const { return (p_[1] & 0x40) != 0; }
  unsigned pad_cnt() const { return (p_[1] >> 4) & 0x3u; }
  unsigned tver() const { return p_[1] & 0x0Fu; }
  std::uint16_t pkey() const { return load_be16(p_ + 2); }
  bool fecn() const { return (p_[4] & 0x80) != 0; }
  bool becn() const { return (p_[4] & 0x40) != 0; }
  // 24-bit fields: one word load of the byte before them, masked (a byte-wise load of three
  // bytes costs three loads, two shifts and two ORs on every received packet).
  Qpn dest_qp() const { return Qpn{load_be32(p_ + 4) & 0xFFFFFFu}; }
  bool ack_req() const { return (p_[8] & 0x80) != 0; }
  Psn psn() const { return Psn{load_be32(p_ + 8) & 0xFFFFFFu}; }

  void set_opcode(Opcode op) requires M { p_[0] = raw(op); }
  /// Byte 1: SE, MigReq, PadCnt and TVer (always 0) in one store.
  void set_flags(bool se, bool mig_req, unsigned pad_cnt) requires M {
    p_[1] = static_cast<std::uint8_t>((se ? 0x80u : 0u) | (mig_req ? 0x40u : 0u) |
                                      ((pad_cnt & 0x3u) << 4));
  }
  void set_pkey(std::uint16_t v) requires M { store_be16(p_ + 2, v); }
  /// Byte 4: FECN, BECN; the six reserved bits are sent as 0.
  void set_ecn_bits(bool fecn, bool becn) requires M {
    p_[4] = static_cast<std::uint8_t>((fecn ? 0x80u : 0u) | (becn ? 0x40u : 0u));
  }
  void set_dest_qp(Qpn q) requires M { store_be24(p_ + 5, q.raw()); }
  /// Byte 8: AckReq; the seven reserved bits are sent as 0 (they are covered by the ICRC).
  void set_ack_req(bool a) requires M { p_[8] = a ? 0x80 : 0x00; }
  void set_psn(Psn v) requires M { store_be24(p_ + 9, v.raw()); }
};

using BthView = BasicBthView<std::uint8_t>;
using ConstBthView = BasicBthView<const std::uint8_t>;

}  // namespace roce::wire
