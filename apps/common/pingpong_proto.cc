/// @file
/// The pingpong tools' QP address message.
#include "apps/common/pingpong_proto.h"

#include <cstdio>
#include <cstring>

namespace roce::pp {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::array<char, kMsgLen> msg(const Dest& d) {
  std::array<char, kMsgLen> out{};
  char gid[33];
  for (std::size_t i = 0; i < 16; ++i) std::snprintf(gid + 2 * i, 3, "%02x", d.gid.b[i]);
  std::snprintf(out.data(), kMsgLen, "%04x:%06x:%06x:%s", d.lid & 0xFFFF, d.qpn & 0xFFFFFF,
                d.psn & 0xFFFFFF, gid);
  return out;
}

std::optional<Dest> dest_of(std::span<const char, kMsgLen> m) {
  char s[kMsgLen + 1] = {};  // a peer may leave out the NUL: never scan past the message
  std::memcpy(s, m.data(), kMsgLen);
  unsigned lid = 0, qpn = 0, psn = 0;
  char hex[33] = {};
  if (std::sscanf(s, "%x:%x:%x:%32s", &lid, &qpn, &psn, hex) != 4 || std::strlen(hex) != 32)
    return std::nullopt;
  if (qpn > 0xFFFFFF || psn > 0xFFFFFF) return std::nullopt;
  Dest d{lid, qpn, psn, {}};
  for (std::size_t i = 0; i < 16; ++i) {
    const int hi = hex_digit(hex[2 * i]);
    const int lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    d.gid.b[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return d;
}

}  // namespace roce::pp
