/// @file
/// IPv4 (RFC 791) and IPv6 (RFC 8200) headers as RoCEv2 uses them: the IP header plays the role
/// of the GRH; RoCE frames carry no IPv4 options and no IPv6 extension headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/view.h"

namespace roce::wire {

inline constexpr std::uint8_t kIpProtoUdp = 17;
inline constexpr std::uint8_t kIpProtoIcmp = 1;
inline constexpr std::uint8_t kIpProtoIcmpv6 = 58;

template <class Byte>
class BasicIpv4View : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 20;  ///< without options
  static constexpr std::uint16_t kFlagDf = 0x4000;
  static constexpr std::uint16_t kFlagMf = 0x2000;
  static constexpr std::uint16_t kFragOffsetMask = 0x1FFF;
  using ViewBase<Byte>::ViewBase;

  std::uint8_t version() const { return static_cast<std::uint8_t>(p_[0] >> 4); }
  /// Header length in bytes (IHL x 4).
  std::size_t header_len() const { return std::size_t{p_[0] & 0x0Fu} * 4; }
  std::uint8_t tos() const { return p_[1]; }
  std::uint8_t dscp() const { return static_cast<std::uint8_t>(p_[1] >> 2); }
  std::uint8_t ecn() const { return p_[1] & 0x3; }
  std::uint16_t total_len() const { return load_be16(p_ + 2); }
  std::uint16_t id() const { return load_be16(p_ + 4); }
  /// Flags (DF, MF) and fragment offset, as one 16-bit field.
  std::uint16_t frag() const { return load_be16(p_ + 6); }
  bool is_fragment() const { return (frag() & (kFlagMf | kFragOffsetMask)) != 0; }
  std::uint8_t ttl() const { return p_[8]; }
  std::uint8_t protocol() const { return p_[9]; }
  std::uint16_t checksum() const { return load_be16(p_ + 10); }
  Ipv4Addr src() const { return Ipv4Addr{load_be32(p_ + 12)}; }
  Ipv4Addr dst() const { return Ipv4Addr{load_be32(p_ + 16)}; }

  /// Writes version 4 and IHL 5 (no options).
  void set_version_ihl() requires M { p_[0] = 0x45; }
  void set_tos(std::uint8_t v) requires M { p_[1] = v; }
  void set_total_len(std::uint16_t v) requires M { store_be16(p_ + 2, v); }
  void set_id(std::uint16_t v) requires M { store_be16(p_ + 4, v); }
  void set_frag(std::uint16_t v) requires M { store_be16(p_ + 6, v); }
  void set_ttl(std::uint8_t v) requires M { p_[8] = v; }
  void set_protocol(std::uint8_t v) requires M { p_[9] = v; }
  void set_checksum(std::uint16_t v) requires M { store_be16(p_ + 10, v); }
  void set_src(Ipv4Addr a) requires M { store_be32(p_ + 12, a.v); }
  void set_dst(Ipv4Addr a) requires M { store_be32(p_ + 16, a.v); }
};

/// RFC 1071 one's-complement sum over an IPv4 header of `len` bytes. Writing the result into
/// the checksum field (zeroed first) makes the header verify; verifying a good header gives 0.
std::uint16_t ipv4_header_checksum(const std::uint8_t* hdr, std::size_t len);

/// True when a 20-byte IPv4 header verifies (ipv4_header_checksum() == 0), inline for the
/// receive path: the one's-complement sum of its five 32-bit words, in any byte order, folds
/// to all ones exactly when the checksum is right (RFC 1071).
inline bool ipv4_header_checksum_ok(const std::uint8_t* hdr) {
  std::uint32_t w[5];
  std::memcpy(w, hdr, sizeof w);
  std::uint64_t sum = std::uint64_t{w[0]} + w[1] + w[2] + w[3] + w[4];
  sum = (sum & 0xFFFFFFFF) + (sum >> 32);
  sum = (sum & 0xFFFF) + (sum >> 16);
  sum = (sum & 0xFFFF) + (sum >> 16);
  sum = (sum & 0xFFFF) + (sum >> 16);
  return sum == 0xFFFF;
}

/// UDP checksum over IPv6 (RFC 8200 8.1): the pseudo-header (addresses, upper-layer length,
/// next header 17) and `udp_len` bytes starting at the UDP header, whose checksum field must be
/// zero. A computed 0 is sent as 0xFFFF. IPv6 forbids the zero checksum RoCE uses over IPv4.
std::uint16_t udp6_checksum(const std::uint8_t* ipv6_hdr, const std::uint8_t* udp,
                            std::size_t udp_len);
/// The same one's-complement sum for any upper layer over IPv6 (ICMPv6: next header 58). The
/// checksum field inside `l4` must be zero. Returns the value to store (0 is not remapped).
std::uint16_t ipv6_l4_checksum(const std::uint8_t* ipv6_hdr, const std::uint8_t* l4,
                               std::size_t len, std::uint8_t next_header);

template <class Byte>
class BasicIpv6View : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 40;
  using ViewBase<Byte>::ViewBase;

  std::uint8_t version() const { return static_cast<std::uint8_t>(p_[0] >> 4); }
  std::uint8_t traffic_class() const {
    return static_cast<std::uint8_t>(((p_[0] & 0x0Fu) << 4) | (p_[1] >> 4));
  }
  std::uint8_t ecn() const { return traffic_class() & 0x3; }
  std::uint32_t flow_label() const { return load_be32(p_) & 0xF'FFFF; }
  std::uint16_t payload_len() const { return load_be16(p_ + 4); }
  std::uint8_t next_header() const { return p_[6]; }
  std::uint8_t hop_limit() const { return p_[7]; }
  Ipv6Addr src() const { return addr_at(8); }
  Ipv6Addr dst() const { return addr_at(24); }

  void set_version_tc_flow(std::uint8_t tc, std::uint32_t flow) requires M {
    store_be32(p_, (6u << 28) | (std::uint32_t{tc} << 20) | (flow & 0xF'FFFF));
  }
  void set_payload_len(std::uint16_t v) requires M { store_be16(p_ + 4, v); }
  void set_next_header(std::uint8_t v) requires M { p_[6] = v; }
  void set_hop_limit(std::uint8_t v) requires M { p_[7] = v; }
  void set_src(const Ipv6Addr& a) requires M { std::memcpy(p_ + 8, a.b.data(), 16); }
  void set_dst(const Ipv6Addr& a) requires M { std::memcpy(p_ + 24, a.b.data(), 16); }

 private:
  Ipv6Addr addr_at(std::size_t off) const {
    Ipv6Addr a;
    std::memcpy(a.b.data(), p_ + off, 16);
    return a;
  }
};

using Ipv4View = BasicIpv4View<std::uint8_t>;
using ConstIpv4View = BasicIpv4View<const std::uint8_t>;
using Ipv6View = BasicIpv6View<std::uint8_t>;
using ConstIpv6View = BasicIpv6View<const std::uint8_t>;

}  // namespace roce::wire
