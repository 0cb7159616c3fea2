/// @file
/// Big-endian loads and stores at explicit byte offsets. Every wire header view goes through
/// these; nothing on the wire is read through a bitfield or a cast struct.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace roce::wire {

inline std::uint16_t load_be16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>((p[0] << 8) | p[1]);
}
inline std::uint32_t load_be24(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 16) | (std::uint32_t{p[1]} << 8) | p[2];
}
inline std::uint32_t load_be32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return __builtin_bswap32(v);
}
inline std::uint64_t load_be64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return __builtin_bswap64(v);
}
inline void store_be16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}
inline void store_be24(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 16);
  p[1] = static_cast<std::uint8_t>(v >> 8);
  p[2] = static_cast<std::uint8_t>(v);
}
inline void store_be32(std::uint8_t* p, std::uint32_t v) {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}
inline void store_be64(std::uint8_t* p, std::uint64_t v) {
  v = __builtin_bswap64(v);
  std::memcpy(p, &v, 8);
}
/// The ICRC is the one little-endian field on the wire (it is sent like an Ethernet FCS).
inline std::uint32_t load_le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) |
         (std::uint32_t{p[3]} << 24);
}
inline void store_le32(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
  p[2] = static_cast<std::uint8_t>(v >> 16);
  p[3] = static_cast<std::uint8_t>(v >> 24);
}

/// 48-bit Ethernet address, stored in wire order.
struct MacAddr {
  std::array<std::uint8_t, 6> b{};
  friend bool operator==(const MacAddr&, const MacAddr&) = default;
};

/// IPv4 address as a host-order integer (192.0.2.1 == 0xC0000201).
struct Ipv4Addr {
  std::uint32_t v = 0;
  friend bool operator==(const Ipv4Addr&, const Ipv4Addr&) = default;
};

/// IPv6 address (and RoCE GID), stored in wire order.
struct Ipv6Addr {
  std::array<std::uint8_t, 16> b{};
  friend bool operator==(const Ipv6Addr&, const Ipv6Addr&) = default;
};

/// The IPv4-mapped address ::ffff:a.b.c.d (RoCEv2's GID of an IPv4 address).
inline Ipv6Addr ipv4_mapped(Ipv4Addr a) {
  Ipv6Addr g;
  g.b[10] = g.b[11] = 0xFF;
  store_be32(g.b.data() + 12, a.v);
  return g;
}
/// The IPv4 address inside an IPv4-mapped address, if it is one.
inline std::optional<Ipv4Addr> ipv4_of_mapped(const Ipv6Addr& g) {
  static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  if (std::memcmp(g.b.data(), kPrefix, sizeof kPrefix) != 0) return std::nullopt;
  return Ipv4Addr{load_be32(g.b.data() + 12)};
}

}  // namespace roce::wire
