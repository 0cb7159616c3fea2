#include "dataplane/port/neighbour.h"

#include <algorithm>
#include <cstring>

#include "dataplane/wire/eth.h"
#include "dataplane/wire/ip.h"

namespace roce::port {

namespace {
constexpr std::size_t kArpLen = 28;
constexpr std::uint16_t kArpRequest = 1, kArpReply = 2;

void write_arp(std::uint8_t* p, std::uint16_t op, const wire::MacAddr& sha, wire::Ipv4Addr spa,
               const wire::MacAddr& tha, wire::Ipv4Addr tpa) {
  wire::store_be16(p, 1);       // hardware type Ethernet
  wire::store_be16(p + 2, wire::kEtherTypeIpv4);
  p[4] = 6;
  p[5] = 4;
  wire::store_be16(p + 6, op);
  std::memcpy(p + 8, sha.b.data(), 6);
  wire::store_be32(p + 14, spa.v);
  std::memcpy(p + 18, tha.b.data(), 6);
  wire::store_be32(p + 24, tpa.v);
}
// Ethernet frames are at least 60 bytes without FCS; pad with zeros.
std::size_t pad_to_min(std::span<std::uint8_t> out, std::size_t len) {
  if (len >= 60 || out.size() < 60) return len;
  std::memset(out.data() + len, 0, 60 - len);
  return 60;
}
}  // namespace

std::optional<std::size_t> Neighbour::on_frame(std::span<const std::uint8_t> f,
                                               std::span<std::uint8_t> out) {
  if (f.size() < wire::EthView::kSize) return std::nullopt;
  std::size_t off = wire::EthView::kSize;
  std::uint16_t type = wire::ConstEthView(f.data()).ether_type();
  if (type == wire::kEtherTypeVlan) {
    if (f.size() < off + 4) return std::nullopt;
    type = wire::load_be16(f.data() + off + 2);
    off += 4;
  }
  if (type == wire::kEtherTypeArp) return on_arp(f, off, out);
  if (type == wire::kEtherTypeIpv4 && f.size() >= off + 20 &&
      f[off + 9] == wire::kIpProtoIcmp)
    return on_icmp(f, off, out);
  return std::nullopt;
}

std::size_t Neighbour::on_arp(std::span<const std::uint8_t> f, std::size_t off,
                              std::span<std::uint8_t> out) {
  if (f.size() < off + kArpLen) return 0;
  const std::uint8_t* a = f.data() + off;
  if (wire::load_be16(a) != 1 || wire::load_be16(a + 2) != wire::kEtherTypeIpv4 || a[4] != 6 ||
      a[5] != 4)
    return 0;
  wire::MacAddr sha;
  std::memcpy(sha.b.data(), a + 8, 6);
  const wire::Ipv4Addr spa{wire::load_be32(a + 14)};
  const wire::Ipv4Addr tpa{wire::load_be32(a + 24)};
  const std::uint16_t op = wire::load_be16(a + 6);
  if (spa.v != 0) {
    if (op == kArpReply) ++stats_.arp_replies_learned;
    cache_[spa.v] = sha;  // RFC 826: learn the sender
  }
  if (op != kArpRequest || tpa != ip_) return 0;
  if (out.size() < off + kArpLen) return 0;
  // Reply with the same L2 framing (a VLAN tag is copied as it came).
  std::memcpy(out.data(), f.data(), off);
  wire::EthView e(out.data());
  e.set_dst(sha);
  e.set_src(mac_);
  write_arp(out.data() + off, kArpReply, mac_, ip_, sha, spa);
  ++stats_.arp_requests_answered;
  return pad_to_min(out, off + kArpLen);
}

std::size_t Neighbour::on_icmp(std::span<const std::uint8_t> f, std::size_t off,
                               std::span<std::uint8_t> out) {
  if (f.size() < off + 20) return 0;
  wire::ConstIpv4View ip(f.data() + off);
  const std::size_t ihl = ip.header_len();
  if (ip.version() != 4 || ihl < 20 || ip.protocol() != wire::kIpProtoIcmp || ip.dst() != ip_ ||
      ip.total_len() < ihl + 8 || f.size() < off + ip.total_len() || ip.is_fragment())
    return 0;
  const std::uint8_t* icmp = f.data() + off + ihl;
  if (icmp[0] != 8 || icmp[1] != 0) return 0;  // echo request only
  const std::size_t len = off + ip.total_len();
  if (out.size() < len) return 0;
  std::memcpy(out.data(), f.data(), len);
  wire::EthView e(out.data());
  e.set_dst(wire::ConstEthView(f.data()).src());
  e.set_src(mac_);
  wire::Ipv4View oip(out.data() + off);
  oip.set_dst(ip.src());
  oip.set_src(ip_);
  oip.set_ttl(64);
  oip.set_checksum(0);
  oip.set_checksum(wire::ipv4_header_checksum(out.data() + off, ihl));
  std::uint8_t* oicmp = out.data() + off + ihl;
  oicmp[0] = 0;  // echo reply
  wire::store_be16(oicmp + 2, 0);
  wire::store_be16(oicmp + 2, wire::ipv4_header_checksum(oicmp, ip.total_len() - ihl));
  ++stats_.icmp_echo_answered;
  return pad_to_min(out, len);
}

std::size_t Neighbour::make_arp_request(wire::Ipv4Addr target, std::span<std::uint8_t> out) {
  if (out.size() < 60) return 0;
  std::memset(out.data(), 0, 60);
  wire::EthView e(out.data());
  e.set_dst(wire::MacAddr{{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}});
  e.set_src(mac_);
  e.set_ether_type(wire::kEtherTypeArp);
  write_arp(out.data() + 14, kArpRequest, mac_, ip_, wire::MacAddr{}, target);
  ++stats_.arp_requests_sent;
  return 60;
}

std::optional<wire::MacAddr> Neighbour::lookup(wire::Ipv4Addr ip) const {
  const auto it = cache_.find(ip.v);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

}  // namespace roce::port
