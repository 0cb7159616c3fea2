/// @file
/// The address values every layer shares: an Ethernet MAC, an IPv4 address and an IPv6
/// address (a RoCE GID). Part of the public API (<roce/client.h> uses them); the wire layer
/// (dataplane/wire/bytes.h) takes them from here.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>

namespace roce {

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
  for (int i = 0; i < 4; ++i) g.b[12 + i] = static_cast<std::uint8_t>(a.v >> (24 - 8 * i));
  return g;
}
/// The IPv4 address inside an IPv4-mapped address, if it is one.
inline std::optional<Ipv4Addr> ipv4_of_mapped(const Ipv6Addr& g) {
  static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  if (std::memcmp(g.b.data(), kPrefix, sizeof kPrefix) != 0) return std::nullopt;
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | g.b[12 + i];
  return Ipv4Addr{v};
}

}  // namespace roce
