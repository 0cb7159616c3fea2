// The neighbour caches under hostile input: bounded, O(1), and learning like Linux with
// arp_accept=0 (only what answers our request or asks for our address), so that an unsolicited
// ARP or ND frame never moves a resolved peer.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <vector>

#include "dataplane/port/neighbour.h"
#include "dataplane/port/neighbour_table.h"
#include "dataplane/wire/eth.h"
#include "dataplane/wire/ip.h"

namespace roce::port {
namespace {

const wire::MacAddr kUs{{0x02, 0, 0, 0, 0, 1}};
const wire::MacAddr kPeer{{0x02, 0, 0, 0, 0, 2}};
const wire::MacAddr kEvil{{0x02, 0xEE, 0, 0, 0, 3}};
const wire::Ipv4Addr kUsIp{0xC0000201}, kPeerIp{0xC0000202};

std::vector<std::uint8_t> arp(std::uint16_t op, const wire::MacAddr& sha, wire::Ipv4Addr spa,
                              wire::Ipv4Addr tpa) {
  std::vector<std::uint8_t> f(60, 0);
  wire::EthView e(f.data());
  e.set_dst(op == 1 ? wire::MacAddr{{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}} : kUs);
  e.set_src(sha);
  e.set_ether_type(wire::kEtherTypeArp);
  std::uint8_t* a = f.data() + 14;
  wire::store_be16(a, 1);
  wire::store_be16(a + 2, wire::kEtherTypeIpv4);
  a[4] = 6;
  a[5] = 4;
  wire::store_be16(a + 6, op);
  std::memcpy(a + 8, sha.b.data(), 6);
  wire::store_be32(a + 14, spa.v);
  wire::store_be32(a + 24, tpa.v);
  return f;
}

std::size_t feed(Neighbour& n, const std::vector<std::uint8_t>& f) {
  std::vector<std::uint8_t> out(128);
  return n.on_frame(f, out).value_or(~std::size_t{0});
}

TEST(NeighbourBounds, UnsolicitedArpNeverMovesAResolvedPeer) {
  Neighbour us(kUs, kUsIp);
  std::vector<std::uint8_t> req(64);
  // Nothing is learned from a reply we did not ask for.
  feed(us, arp(2, kEvil, kPeerIp, kUsIp));
  EXPECT_FALSE(us.lookup(kPeerIp));
  EXPECT_EQ(us.stats().arp_unsolicited, 1u);
  // We ask; the peer answers: resolved.
  us.make_arp_request(kPeerIp, req);
  feed(us, arp(2, kPeer, kPeerIp, kUsIp));
  ASSERT_EQ(us.lookup(kPeerIp), std::optional(kPeer));
  EXPECT_EQ(us.stats().arp_replies_learned, 1u);
  // A second reply (the request is answered), a gratuitous ARP request and reply, a request
  // for another address, and a request to us naming another MAC: the peer stays.
  feed(us, arp(2, kEvil, kPeerIp, kUsIp));
  feed(us, arp(1, kEvil, kPeerIp, kPeerIp));
  feed(us, arp(2, kEvil, kPeerIp, kPeerIp));
  feed(us, arp(1, kEvil, kPeerIp, wire::Ipv4Addr{0xC0000209}));
  EXPECT_EQ(feed(us, arp(1, kEvil, kPeerIp, kUsIp)), 60u) << "a request to us is still answered";
  EXPECT_EQ(us.lookup(kPeerIp), std::optional(kPeer));
  const NeighbourStats& s = us.stats();
  EXPECT_EQ(s.arp_unsolicited, 3u);
  EXPECT_EQ(s.arp_not_for_us, 2u);
  EXPECT_EQ(s.arp_conflicts, 1u);
  EXPECT_EQ(s.arp_entries, 1u);
  // Broadcast senders and other opcodes are malformed.
  feed(us, arp(1, wire::MacAddr{{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}}, kPeerIp, kUsIp));
  feed(us, arp(3, kEvil, kPeerIp, kUsIp));
  EXPECT_EQ(us.stats().arp_malformed, 2u);
  // When we ask again, the answer may move it (the peer changed its NIC).
  us.make_arp_request(kPeerIp, req);
  feed(us, arp(2, kEvil, kPeerIp, kUsIp));
  EXPECT_EQ(us.lookup(kPeerIp), std::optional(kEvil));
}

TEST(NeighbourBounds, LearnsTheAskerOfARequestForOurAddress) {
  Neighbour us(kUs, kUsIp);
  EXPECT_EQ(feed(us, arp(1, kPeer, kPeerIp, kUsIp)), 60u);
  EXPECT_EQ(us.lookup(kPeerIp), std::optional(kPeer));
  // A DAD probe (sender 0.0.0.0) is answered and learns nothing.
  EXPECT_EQ(feed(us, arp(1, kEvil, wire::Ipv4Addr{0}, kUsIp)), 60u);
  EXPECT_EQ(us.stats().arp_entries, 1u);
}

TEST(NeighbourBounds, AFloodStaysWithinTheCapacityAndKeepsPeersInUse) {
  constexpr std::uint32_t kCap = 64;
  Neighbour us(kUs, kUsIp, {}, kCap);
  std::vector<std::uint8_t> req(64);
  const std::size_t footprint = us.footprint();
  // A resolved peer (we asked) and one learned from its request and in use.
  us.make_arp_request(kPeerIp, req);
  feed(us, arp(2, kPeer, kPeerIp, kUsIp));
  const wire::Ipv4Addr used{0xC0000203};
  feed(us, arp(1, kPeer, used, kUsIp));
  ASSERT_TRUE(us.lookup(used));
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    wire::MacAddr m{{0x02, static_cast<std::uint8_t>(rng()), static_cast<std::uint8_t>(rng()),
                     static_cast<std::uint8_t>(rng()), static_cast<std::uint8_t>(rng()), 9}};
    const wire::Ipv4Addr ip{static_cast<std::uint32_t>(rng())};
    feed(us, arp(i % 2 ? 1 : 2, m, ip, kUsIp));
  }
  const NeighbourStats& s = us.stats();
  EXPECT_EQ(s.arp_entries, kCap);
  EXPECT_GT(s.neighbour_evicted, 40000u);
  EXPECT_EQ(s.neighbour_cache_full, 0u) << "cold entries were there to evict";
  EXPECT_GT(s.arp_unsolicited, 40000u);
  EXPECT_EQ(us.lookup(kPeerIp), std::optional(kPeer));
  EXPECT_EQ(us.lookup(used), std::optional(kPeer));
  EXPECT_EQ(us.footprint(), footprint) << "nothing allocated per frame";
  // With every entry in use, a new one is refused and counted (never a peer in use evicted).
  for (std::uint32_t i = 0; i < 2 * kCap; ++i) {
    const wire::Ipv4Addr ip{0x0A000000 + i};
    feed(us, arp(1, kPeer, ip, kUsIp));
    us.lookup(ip);
  }
  EXPECT_EQ(us.stats().arp_entries, kCap);
  EXPECT_GT(us.stats().neighbour_cache_full, 0u);
  EXPECT_EQ(us.lookup(kPeerIp), std::optional(kPeer));
  EXPECT_EQ(us.lookup(used), std::optional(kPeer));
  // A request of ours still gets room: the least recently used entry gives way (a peer that
  // makes us look its addresses up cannot lock us out).
  const std::uint64_t full = us.stats().neighbour_cache_full;
  us.make_arp_request(wire::Ipv4Addr{0xC0000299}, req);
  EXPECT_EQ(us.stats().neighbour_cache_full, full);
  EXPECT_TRUE(us.lookup(kPeerIp)) << "recently used: kept";
  EXPECT_FALSE(us.lookup(wire::Ipv4Addr{0x0A000000})) << "least recently used: evicted";
  feed(us, arp(2, kPeer, wire::Ipv4Addr{0xC0000299}, kUsIp));
  EXPECT_TRUE(us.lookup(wire::Ipv4Addr{0xC0000299}));
}

TEST(NeighbourBounds, AFloodCannotKeepUsFromResolving) {
  constexpr std::uint32_t kCap = 16;
  Neighbour us(kUs, kUsIp, {}, kCap);
  std::vector<std::uint8_t> req(64);
  us.make_arp_request(kPeerIp, req);  // our request is out; the flood comes before the reply
  for (std::uint32_t i = 0; i < 1000; ++i)
    feed(us, arp(1, kEvil, wire::Ipv4Addr{0x0A000000 + i}, kUsIp));
  EXPECT_EQ(us.stats().arp_entries, kCap);
  feed(us, arp(2, kPeer, kPeerIp, kUsIp));
  EXPECT_EQ(us.lookup(kPeerIp), std::optional(kPeer));
  EXPECT_EQ(us.stats().arp_replies_learned, 1u);
  // Requests of ours do give way to newer requests of ours (a peer may make us ask: a CM REQ
  // from an unknown address), but never to an entry in use.
  for (std::uint32_t i = 0; i < 100; ++i) us.make_arp_request(wire::Ipv4Addr{0x0B000000 + i}, req);
  EXPECT_EQ(us.stats().arp_entries, kCap);
  EXPECT_EQ(us.stats().neighbour_cache_full, 0u);
  EXPECT_EQ(us.lookup(kPeerIp), std::optional(kPeer));
}

// The table against a model, through many evictions (checks the backward-shift deletion).
TEST(NeighbourBounds, TableMatchesAModelThroughEvictions) {
  constexpr std::uint32_t kCap = 100;
  NeighbourTable<wire::Ipv4Addr> t(kCap, 12345);
  std::map<std::uint32_t, wire::MacAddr> model;
  std::deque<std::uint32_t> order;  // insertion order: all entries are cold, oldest evicted
  std::mt19937 rng(3);
  for (int i = 0; i < 50000; ++i) {
    const std::uint32_t k = rng() % 400;  // few keys: many hits, clustered probes
    const wire::MacAddr m{
        {0x02, 0, 0, 0, static_cast<std::uint8_t>(k >> 8), static_cast<std::uint8_t>(k)}};
    const LearnResult r = t.learn(wire::Ipv4Addr{k}, m);
    if (model.contains(k)) {
      ASSERT_EQ(r, LearnResult::kUnchanged);
    } else {
      ASSERT_EQ(r, LearnResult::kLearned);
      if (model.size() == kCap) {
        model.erase(order.front());
        order.pop_front();
      }
      model[k] = m;
      order.push_back(k);
    }
    ASSERT_EQ(t.size(), model.size());
    if (i % 97 == 0)
      for (std::uint32_t q = 0; q < 400; ++q) {
        const auto it = model.find(q);
        ASSERT_EQ(t.peek(wire::Ipv4Addr{q}),
                  it == model.end() ? std::nullopt : std::optional(it->second))
            << "key " << q << " after " << i;
      }
  }
}

// ---- IPv6 ND ------------------------------------------------------------------------------

const wire::Ipv6Addr kUs6{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
const wire::Ipv6Addr kPeer6{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}};

std::vector<std::uint8_t> nd(std::uint8_t type, const wire::MacAddr& src_mac,
                             const wire::Ipv6Addr& src, const wire::Ipv6Addr& target,
                             const wire::MacAddr& opt_mac, std::uint8_t hop_limit = 255) {
  std::vector<std::uint8_t> f(14 + 40 + 32, 0);
  wire::EthView e(f.data());
  e.set_dst(kUs);
  e.set_src(src_mac);
  e.set_ether_type(wire::kEtherTypeIpv6);
  wire::Ipv6View ip(f.data() + 14);
  ip.set_version_tc_flow(0, 0);
  ip.set_payload_len(32);
  ip.set_next_header(wire::kIpProtoIcmpv6);
  ip.set_hop_limit(hop_limit);
  ip.set_src(src);
  ip.set_dst(kUs6);
  std::uint8_t* icmp = f.data() + 54;
  icmp[0] = type;
  std::memcpy(icmp + 8, target.b.data(), 16);
  icmp[24] = type == 135 ? 1 : 2;
  icmp[25] = 1;
  std::memcpy(icmp + 26, opt_mac.b.data(), 6);
  wire::store_be16(icmp + 2, wire::ipv6_l4_checksum(f.data() + 14, icmp, 32, wire::kIpProtoIcmpv6));
  return f;
}

TEST(NeighbourBounds, UnsolicitedNdNeverMovesAResolvedPeer) {
  Neighbour us(kUs, kUsIp, kUs6);
  std::vector<std::uint8_t> ns(128);
  feed(us, nd(136, kEvil, kPeer6, kPeer6, kEvil));
  EXPECT_FALSE(us.lookup(kPeer6));
  EXPECT_EQ(us.stats().nd_unsolicited, 1u);
  ASSERT_GT(us.make_neighbour_solicitation(kPeer6, ns), 0u);
  feed(us, nd(136, kPeer, kPeer6, kPeer6, kPeer, 64));  // not from the link
  EXPECT_EQ(us.stats().nd_malformed, 1u);
  feed(us, nd(136, kPeer, kPeer6, kPeer6, kPeer));
  ASSERT_EQ(us.lookup(kPeer6), std::optional(kPeer));
  feed(us, nd(136, kEvil, kPeer6, kPeer6, kEvil));  // a second advertisement
  feed(us, nd(135, kEvil, kPeer6, kPeer6, kEvil));  // a solicitation for another address
  EXPECT_GT(feed(us, nd(135, kEvil, kPeer6, kUs6, kEvil)), 0u) << "answered";
  EXPECT_EQ(us.lookup(kPeer6), std::optional(kPeer));
  const NeighbourStats& s = us.stats();
  EXPECT_EQ(s.nd_unsolicited, 2u);
  EXPECT_EQ(s.nd_not_for_us, 1u);
  EXPECT_EQ(s.nd_conflicts, 1u);
  EXPECT_EQ(s.nd_advertisements_learned, 1u);
}

TEST(NeighbourBounds, AnNdFloodStaysWithinTheCapacity) {
  constexpr std::uint32_t kCap = 32;
  Neighbour us(kUs, kUsIp, kUs6, kCap);
  std::mt19937 rng(5);
  for (int i = 0; i < 20000; ++i) {
    wire::Ipv6Addr src = kPeer6;
    for (int b = 8; b < 16; ++b) src.b[b] = static_cast<std::uint8_t>(rng());
    const wire::MacAddr m{{0x02, 1, 2, 3, static_cast<std::uint8_t>(rng()), 5}};
    feed(us, nd(i % 2 ? 135 : 136, m, src, i % 2 ? kUs6 : src, m));
  }
  EXPECT_EQ(us.stats().nd_entries, kCap);
  EXPECT_EQ(us.stats().nd_unsolicited, 10000u);
  EXPECT_EQ(us.stats().nd_solicitations_answered, 10000u);
}

}  // namespace
}  // namespace roce::port
