#include "dataplane/port/neighbour.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "dataplane/wire/eth.h"
#include "dataplane/wire/ip.h"

namespace roce::port {

namespace {
constexpr std::size_t kArpLen = 28;
constexpr std::uint16_t kArpRequest = 1, kArpReply = 2;

void write_arp(std::uint8_t* p, std::uint16_t op, const wire::MacAddr& sha, wire::Ipv4Addr spa,
               const wire::MacAddr& tha, wire::Ipv4Addr tpa) {
  wire::store_be16(p, 1);  // hardware type Ethernet
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
  if (type == wire::kEtherTypeIpv4 && f.size() >= off + 20 && f[off + 9] == wire::kIpProtoIcmp)
    return on_icmp(f, off, out);
  if (type == wire::kEtherTypeIpv6 && f.size() >= off + 40 && f[off + 6] == wire::kIpProtoIcmpv6)
    return on_icmp6(f, off, out);
  return std::nullopt;
}

static std::uint64_t random_seed() {
  std::random_device rd;
  return (std::uint64_t{rd()} << 32) ^ rd();
}

Neighbour::Neighbour(wire::MacAddr mac, wire::Ipv4Addr ip, std::optional<wire::Ipv6Addr> ip6,
                     std::uint32_t capacity)
    : mac_(mac),
      ip_(ip),
      ip6_(ip6),
      cache_(capacity, random_seed()),
      cache6_(capacity, random_seed()) {}

const NeighbourStats& Neighbour::stats() const {
  stats_.arp_entries = cache_.size();
  stats_.nd_entries = cache6_.size();
  stats_.neighbour_evicted = cache_.evicted() + cache6_.evicted();
  return stats_;
}

void Neighbour::count(LearnResult r, std::uint64_t& conflicts) {
  if (r == LearnResult::kConflict) ++conflicts;
  if (r == LearnResult::kFull) ++stats_.neighbour_cache_full;
}

std::size_t Neighbour::on_arp(std::span<const std::uint8_t> f, std::size_t off,
                              std::span<std::uint8_t> out) {
  if (f.size() < off + kArpLen) {
    ++stats_.arp_malformed;
    return 0;
  }
  const std::uint8_t* a = f.data() + off;
  const std::uint16_t op = wire::load_be16(a + 6);
  if (wire::load_be16(a) != 1 || wire::load_be16(a + 2) != wire::kEtherTypeIpv4 || a[4] != 6 ||
      a[5] != 4 || (op != kArpRequest && op != kArpReply)) {
    ++stats_.arp_malformed;
    return 0;
  }
  wire::MacAddr sha;
  std::memcpy(sha.b.data(), a + 8, 6);
  const wire::Ipv4Addr spa{wire::load_be32(a + 14)};
  const wire::Ipv4Addr tpa{wire::load_be32(a + 24)};
  if (sha.b[0] & 1) {  // a group address cannot be a station's
    ++stats_.arp_malformed;
    return 0;
  }
  // Learn like Linux with arp_accept=0, and never let an unsolicited frame move a known peer:
  // a reply only while our request for its sender is pending; a request only when it asks for
  // our address (a gratuitous ARP asks for the sender's own). 0.0.0.0 is an RFC 5227 probe.
  if (op == kArpReply) {
    if (tpa != ip_ || spa == ip_ || cache_.answer(spa, sha) == LearnResult::kUnsolicited)
      ++stats_.arp_unsolicited;
    else
      ++stats_.arp_replies_learned;
    return 0;
  }
  if (tpa != ip_) {
    ++stats_.arp_not_for_us;
    return 0;
  }
  if (spa.v != 0 && spa != ip_) count(cache_.learn(spa, sha), stats_.arp_conflicts);
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

std::size_t Neighbour::make_arp_request(wire::Ipv4Addr to, std::span<std::uint8_t> out) {
  if (out.size() < 60) return 0;
  const wire::Ipv4Addr target = next_hop(to);
  std::memset(out.data(), 0, 60);
  wire::EthView e(out.data());
  e.set_dst(wire::MacAddr{{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}});
  e.set_src(mac_);
  e.set_ether_type(wire::kEtherTypeArp);
  write_arp(out.data() + 14, kArpRequest, mac_, ip_, wire::MacAddr{}, target);
  ++stats_.arp_requests_sent;
  if (!cache_.expect(target)) ++stats_.neighbour_cache_full;  // sent, but its reply is refused
  return 60;
}

}  // namespace roce::port

namespace roce::port {

namespace {
constexpr std::uint8_t kNs = 135, kNa = 136, kEchoRequest6 = 128, kEchoReply6 = 129;

// Writes an Ethernet + IPv6 header (hop limit 255, as ND requires) for an ICMPv6 body of
// `len` bytes already placed at out + off + 40, then fills the ICMPv6 checksum.
std::size_t finish_icmp6(std::span<std::uint8_t> out, std::size_t off, const wire::MacAddr& src_mac,
                         const wire::MacAddr& dst_mac, const wire::Ipv6Addr& src,
                         const wire::Ipv6Addr& dst, std::size_t len) {
  wire::EthView e(out.data());
  e.set_dst(dst_mac);
  e.set_src(src_mac);
  if (off == 14) e.set_ether_type(wire::kEtherTypeIpv6);
  wire::Ipv6View ip(out.data() + off);
  ip.set_version_tc_flow(0, 0);
  ip.set_payload_len(static_cast<std::uint16_t>(len));
  ip.set_next_header(wire::kIpProtoIcmpv6);
  ip.set_hop_limit(255);
  ip.set_src(src);
  ip.set_dst(dst);
  std::uint8_t* icmp = out.data() + off + 40;
  wire::store_be16(icmp + 2, 0);
  wire::store_be16(icmp + 2,
                   wire::ipv6_l4_checksum(out.data() + off, icmp, len, wire::kIpProtoIcmpv6));
  return off + 40 + len;
}
}  // namespace

std::size_t Neighbour::on_icmp6(std::span<const std::uint8_t> f, std::size_t off,
                                std::span<std::uint8_t> out) {
  wire::ConstIpv6View ip(f.data() + off);
  const std::size_t len = ip.payload_len();
  if (ip.version() != 6 || len < 8 || f.size() < off + 40 + len) {
    ++stats_.nd_malformed;
    return 0;
  }
  const std::uint8_t* icmp = f.data() + off + 40;
  // A bad checksum is dropped like the kernel does.
  if (wire::ipv6_l4_checksum(f.data() + off, icmp, len, wire::kIpProtoIcmpv6) != 0) {
    ++stats_.nd_malformed;
    return 0;
  }
  const wire::MacAddr src_mac = wire::ConstEthView(f.data()).src();
  if (icmp[0] == kNs || icmp[0] == kNa) {
    // RFC 4861 7.1: hop limit 255 (it came from the link), code 0, room for the target, and
    // no option of length 0; the link-layer address option of the frame's type is the MAC.
    const std::uint8_t want_opt = icmp[0] == kNs ? 1 : 2;
    wire::MacAddr mac = src_mac;
    bool ok = ip.hop_limit() == 255 && icmp[1] == 0 && len >= 24;
    for (std::size_t o = 24; ok && o < len;) {
      if (o + 8 > len || icmp[o + 1] == 0 || o + icmp[o + 1] * 8u > len) {
        ok = false;
        break;
      }
      if (icmp[o] == want_opt) std::memcpy(mac.b.data(), icmp + o + 2, 6);
      o += icmp[o + 1] * 8u;
    }
    if (!ok || (mac.b[0] & 1)) {
      ++stats_.nd_malformed;
      return 0;
    }
    wire::Ipv6Addr target;
    std::memcpy(target.b.data(), icmp + 8, 16);
    if (icmp[0] == kNa) {
      // Taken only as the answer to a solicitation of ours (Linux does not create entries from
      // unsolicited advertisements either); then it may replace an older MAC.
      if (cache6_.answer(target, mac) == LearnResult::kUnsolicited)
        ++stats_.nd_unsolicited;
      else
        ++stats_.nd_advertisements_learned;
      return 0;
    }
    if (!ip6_ || target != *ip6_) {
      ++stats_.nd_not_for_us;
      return 0;
    }
    // A solicitation for our address: learn the asker (not from DAD's unspecified source).
    if (ip.src() != wire::Ipv6Addr{} && ip.src().b[0] != 0xff)
      count(cache6_.learn(ip.src(), mac), stats_.nd_conflicts);
    if (out.size() < off + 40 + 32) return 0;

    std::memcpy(out.data(), f.data(), off);  // keeps a VLAN tag as it came
    std::uint8_t* na = out.data() + off + 40;
    std::memset(na, 0, 32);
    na[0] = kNa;
    na[4] = 0x60;  // Solicited, Override
    std::memcpy(na + 8, ip6_->b.data(), 16);
    na[24] = 2;  // target link-layer address option
    na[25] = 1;
    std::memcpy(na + 26, mac_.b.data(), 6);
    ++stats_.nd_solicitations_answered;
    return finish_icmp6(out, off, mac_, src_mac, *ip6_, ip.src(), 32);
  }
  if (icmp[0] == kEchoRequest6 && ip6_ && ip.dst() == *ip6_ && out.size() >= off + 40 + len) {
    std::memcpy(out.data(), f.data(), off);
    std::memcpy(out.data() + off + 40, icmp, len);
    out[off + 40] = kEchoReply6;
    ++stats_.icmp6_echo_answered;
    return std::max<std::size_t>(finish_icmp6(out, off, mac_, src_mac, *ip6_, ip.src(), len), 60);
  }
  ++stats_.ignored;
  return 0;
}

std::size_t Neighbour::make_neighbour_solicitation(const wire::Ipv6Addr& target,
                                                   std::span<std::uint8_t> out) {
  if (!ip6_ || out.size() < 14 + 40 + 32) return 0;
  // Solicited-node multicast group ff02::1:ffXX:XXXX and its MAC 33:33:ff:XX:XX:XX.
  wire::Ipv6Addr group{
      {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, target.b[13], target.b[14], target.b[15]}};
  const wire::MacAddr mcast{{0x33, 0x33, 0xff, target.b[13], target.b[14], target.b[15]}};
  std::uint8_t* ns = out.data() + 14 + 40;
  std::memset(ns, 0, 32);
  ns[0] = kNs;
  std::memcpy(ns + 8, target.b.data(), 16);
  ns[24] = 1;  // source link-layer address option
  ns[25] = 1;
  std::memcpy(ns + 26, mac_.b.data(), 6);
  if (!cache6_.expect(target)) ++stats_.neighbour_cache_full;  // sent, but its answer is refused
  return finish_icmp6(out, 14, mac_, mcast, *ip6_, group, 32);
}

}  // namespace roce::port
