#include "dataplane/wire/ip.h"

#include <bit>
#include <cstring>

namespace roce::wire {

namespace {

// One's-complement sum of 16-bit words, not yet folded or inverted.
std::uint64_t ones_sum(const std::uint8_t* p, std::size_t len, std::uint64_t sum = 0) {
  for (std::size_t i = 0; i + 1 < len; i += 2) sum += load_be16(p + i);
  if (len & 1) sum += std::uint32_t{p[len - 1]} << 8;
  return sum;
}

std::uint16_t fold(std::uint64_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

}  // namespace

std::uint16_t ipv4_header_checksum(const std::uint8_t* hdr, std::size_t len) {
  if (len == 20) {
    // Every RoCE frame's header, built and checked: five native 32-bit words. The one's
    // complement sum does not depend on byte order (RFC 1071 2.B), so only the result is
    // swapped back on a little-endian host.
    std::uint32_t w[5];
    std::memcpy(w, hdr, sizeof w);
    std::uint64_t sum = std::uint64_t{w[0]} + w[1] + w[2] + w[3] + w[4];
    sum = (sum & 0xFFFFFFFF) + (sum >> 32);
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    const auto r = static_cast<std::uint16_t>(~sum);
    if constexpr (std::endian::native == std::endian::little)
      return static_cast<std::uint16_t>((r >> 8) | (r << 8));
    return r;
  }
  return fold(ones_sum(hdr, len));
}

std::uint16_t ipv6_l4_checksum(const std::uint8_t* ipv6_hdr, const std::uint8_t* l4,
                               std::size_t len, std::uint8_t next_header) {
  std::uint64_t sum = ones_sum(ipv6_hdr + 8, 32);  // source and destination addresses
  sum += (len >> 16) + (len & 0xFFFF) + next_header;
  return fold(ones_sum(l4, len, sum));
}

std::uint16_t udp6_checksum(const std::uint8_t* ipv6_hdr, const std::uint8_t* udp,
                            std::size_t udp_len) {
  const std::uint16_t c = ipv6_l4_checksum(ipv6_hdr, udp, udp_len, kIpProtoUdp);
  return c == 0 ? 0xFFFF : c;
}

}  // namespace roce::wire
