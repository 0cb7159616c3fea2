/// @file
/// The receive side's expected header (see the header).
#include "dataplane/wire/fast_frame.h"

namespace roce::wire {

RxExpect make_rx_expect(const FrameSpec& path, std::uint32_t qpn) {
  RxExpect e;
  if (path.ip_version != IpVersion::kV4 || path.vlan_id) return e;
  std::uint8_t* p = e.bytes.data();
  std::memcpy(p, path.src_mac.b.data(), 6);  // to us
  std::memcpy(p + 6, path.dst_mac.b.data(), 6);
  store_be16(p + 12, kEtherTypeIpv4);
  std::uint8_t* l3 = p + kFastL3;
  l3[0] = 0x45;
  l3[9] = kIpProtoUdp;
  store_be32(l3 + 12, path.dst_ip4.v);  // from the peer
  store_be32(l3 + 16, path.src_ip4.v);
  store_be16(p + kFastL4 + 2, kRoceV2Port);
  std::uint8_t* bth = p + kFastBth;
  store_be16(bth + 2, 0x7FFF);  // the low 15 bits a full member's P_Key matches (dispatch)
  bth[5] = static_cast<std::uint8_t>((qpn & kMask24) >> 16);
  for (std::size_t i = 0; i < RxExpect::kSize; ++i) p[i] &= kRxExpectMask[i];
  e.armed = true;
  return e;
}

}  // namespace roce::wire
