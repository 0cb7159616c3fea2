#include "controlplane/address.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>

namespace roce::ctl {

namespace {
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::optional<wire::MacAddr> parse_mac(std::string_view s) {
  // Exactly six pairs of hex digits separated by ':' or '-'.
  if (s.size() != 17) return std::nullopt;
  wire::MacAddr m;
  for (std::size_t i = 0; i < 6; ++i) {
    const int hi = hex_digit(s[i * 3]);
    const int lo = hex_digit(s[i * 3 + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    if (i < 5 && s[i * 3 + 2] != ':' && s[i * 3 + 2] != '-') return std::nullopt;
    m.b[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return m;
}

std::optional<wire::Ipv4Addr> parse_ipv4(std::string_view s) {
  const std::string z(s);
  in_addr a{};
  if (inet_pton(AF_INET, z.c_str(), &a) != 1) return std::nullopt;
  return wire::Ipv4Addr{ntohl(a.s_addr)};
}

std::optional<wire::Ipv6Addr> parse_ipv6(std::string_view s) {
  const std::string z(s);
  wire::Ipv6Addr a;
  if (inet_pton(AF_INET6, z.c_str(), a.b.data()) != 1) return std::nullopt;
  return a;
}

std::string to_string(const wire::MacAddr& m) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m.b[0], m.b[1], m.b[2], m.b[3],
                m.b[4], m.b[5]);
  return buf;
}

std::string to_string(wire::Ipv4Addr a) {
  char buf[INET_ADDRSTRLEN];
  const in_addr n{htonl(a.v)};
  return inet_ntop(AF_INET, &n, buf, sizeof buf);
}

std::string to_string(const wire::Ipv6Addr& a) {
  char buf[INET6_ADDRSTRLEN];
  return inet_ntop(AF_INET6, a.b.data(), buf, sizeof buf);
}

wire::Ipv6Addr gid_from_ipv4(wire::Ipv4Addr a) { return wire::ipv4_mapped(a); }

std::optional<wire::Ipv4Addr> ipv4_from_gid(const wire::Ipv6Addr& gid) {
  return wire::ipv4_of_mapped(gid);
}

}  // namespace roce::ctl
