/// @file
/// Ethernet II header (14 bytes) and the optional 802.1Q tag (4 bytes) that sits between the
/// source address and the EtherType.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/view.h"

namespace roce::wire {

inline constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr std::uint16_t kEtherTypeArp = 0x0806;
inline constexpr std::uint16_t kEtherTypeVlan = 0x8100;
inline constexpr std::uint16_t kEtherTypeIpv6 = 0x86DD;

template <class Byte>
class BasicEthView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;

 public:
  static constexpr std::size_t kSize = 14;
  using ViewBase<Byte>::ViewBase;

  MacAddr dst() const { return mac_at(0); }
  MacAddr src() const { return mac_at(6); }
  /// The EtherType (or 0x8100 when a VLAN tag follows) at bytes 12-13.
  std::uint16_t ether_type() const { return load_be16(p_ + 12); }

  void set_dst(const MacAddr& m) requires ViewBase<Byte>::kMutable {
    std::memcpy(p_, m.b.data(), 6);
  }
  void set_src(const MacAddr& m) requires ViewBase<Byte>::kMutable {
    std::memcpy(p_ + 6, m.b.data(), 6);
  }
  void set_ether_type(std::uint16_t t) requires ViewBase<Byte>::kMutable { store_be16(p_ + 12, t); }

 private:
  MacAddr mac_at(std::size_t off) const {
    MacAddr m;
    std::memcpy(m.b.data(), p_ + off, 6);
    return m;
  }
};

/// 802.1Q tag control information plus the inner EtherType; the view starts at the TCI, i.e.
/// right after the 0x8100 TPID that EthView::ether_type() returned.
template <class Byte>
class BasicVlanView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;

 public:
  static constexpr std::size_t kSize = 4;  ///< TCI (2) + inner EtherType (2)
  using ViewBase<Byte>::ViewBase;

  std::uint8_t pcp() const { return static_cast<std::uint8_t>(p_[0] >> 5); }
  bool dei() const { return (p_[0] & 0x10) != 0; }
  std::uint16_t vid() const { return load_be16(p_) & 0x0FFF; }
  std::uint16_t ether_type() const { return load_be16(p_ + 2); }

  void set_tci(std::uint8_t pcp, bool dei, std::uint16_t vid) requires ViewBase<Byte>::kMutable {
    store_be16(p_, static_cast<std::uint16_t>(((pcp & 0x7u) << 13) | (dei ? 0x1000u : 0u) |
                                              (vid & 0x0FFFu)));
  }
  void set_ether_type(std::uint16_t t) requires ViewBase<Byte>::kMutable { store_be16(p_ + 2, t); }
};

using EthView = BasicEthView<std::uint8_t>;
using ConstEthView = BasicEthView<const std::uint8_t>;
using VlanView = BasicVlanView<std::uint8_t>;
using ConstVlanView = BasicVlanView<const std::uint8_t>;

}  // namespace roce::wire
