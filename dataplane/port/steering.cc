/// @file
/// Software steering by destination QPN.
#include "dataplane/port/steering.h"

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/eth.h"
#include "dataplane/wire/udp.h"

namespace roce::port {

std::int64_t roce_dest_qpn(std::span<const std::uint8_t> f) {
  std::size_t off = 12;
  if (f.size() < off + 2) return -1;
  std::uint16_t type = wire::load_be16(f.data() + off);
  off += 2;
  if (type == wire::kEtherTypeVlan) {
    if (f.size() < off + 4) return -1;
    type = wire::load_be16(f.data() + off + 2);
    off += 4;
  }
  std::uint8_t proto = 0;
  if (type == wire::kEtherTypeIpv4) {
    if (f.size() < off + 20) return -1;
    const std::size_t ihl = (f[off] & 0x0F) * 4u;
    // fragments never carry RoCE (DF is set); a fragment's bytes are not a UDP header
    if ((f[off] >> 4) != 4 || ihl < 20 || (wire::load_be16(f.data() + off + 6) & 0x3FFF) != 0)
      return -1;
    proto = f[off + 9];
    off += ihl;
  } else if (type == wire::kEtherTypeIpv6) {
    if (f.size() < off + 40) return -1;
    proto = f[off + 6];
    off += 40;
  } else {
    return -1;
  }
  if (proto != 17 || f.size() < off + 8 + 12) return -1;  // UDP and a whole BTH
  if (wire::load_be16(f.data() + off + 2) != wire::kRoceV2Port) return -1;
  return wire::load_be24(f.data() + off + 8 + 5);  // BTH bytes 5-7: destination QP
}

}  // namespace roce::port
