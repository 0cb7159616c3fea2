#include "dataplane/port/neighbour.h"

#include <gtest/gtest.h>

#include <vector>

#include "dataplane/wire/eth.h"
#include "dataplane/wire/ip.h"
#include "dataplane/wire/roce_frame.h"

namespace roce::port {
namespace {

const wire::MacAddr kUs{{0x02, 0, 0, 0, 0, 1}};
const wire::MacAddr kPeer{{0x02, 0, 0, 0, 0, 2}};
const wire::Ipv4Addr kUsIp{0xC0000201}, kPeerIp{0xC0000202};

TEST(Neighbour, AnswersArpForOurAddressAndLearnsTheAsker) {
  Neighbour asker(kPeer, kPeerIp), us(kUs, kUsIp);
  std::vector<std::uint8_t> req(64), reply(64), out(64);
  const std::size_t n = asker.make_arp_request(kUsIp, req);
  ASSERT_EQ(n, 60u);
  const auto r = us.on_frame({req.data(), n}, reply);
  ASSERT_TRUE(r);
  ASSERT_EQ(*r, 60u);
  EXPECT_EQ(wire::ConstEthView(reply.data()).dst(), kPeer);
  EXPECT_EQ(wire::load_be16(reply.data() + 20), 2) << "ARP reply";
  EXPECT_EQ(us.lookup(kPeerIp), std::optional<wire::MacAddr>(kPeer)) << "learned the sender";
  // The asker learns our MAC from the reply, and sends nothing back.
  const auto r2 = asker.on_frame({reply.data(), *r}, out);
  ASSERT_TRUE(r2);
  EXPECT_EQ(*r2, 0u);
  EXPECT_EQ(asker.lookup(kUsIp), std::optional<wire::MacAddr>(kUs));
  // A request for another address is not answered.
  const std::size_t n3 = asker.make_arp_request(wire::Ipv4Addr{0xC0000209}, req);
  EXPECT_EQ(us.on_frame({req.data(), n3}, reply), std::optional<std::size_t>(0));
}

// A gateway (runtime::LinkOptions::gateway): an address off our /24 is asked for as the
// gateway, and takes the gateway's MAC; the subnet's own addresses are asked for themselves.
TEST(Neighbour, OffSubnetAddressesGoThroughTheGateway) {
  const wire::Ipv4Addr far{0xC6120009};  // 198.18.0.9
  Neighbour asker(kPeer, kPeerIp), gw(kUs, kUsIp);
  EXPECT_EQ(asker.next_hop(far), far) << "no gateway: every address is asked for itself";
  asker.set_gateway(kUsIp, 24);
  EXPECT_EQ(asker.next_hop(far), kUsIp);
  EXPECT_EQ(asker.next_hop(wire::Ipv4Addr{0xC0000209}), (wire::Ipv4Addr{0xC0000209}));
  std::vector<std::uint8_t> req(64), reply(64), out(64);
  const std::size_t n = asker.make_arp_request(far, req);
  ASSERT_EQ(n, 60u);
  EXPECT_EQ(wire::load_be32(req.data() + 38), kUsIp.v) << "the ARP asks for the gateway";
  const auto r = gw.on_frame({req.data(), n}, reply);
  ASSERT_TRUE(r && *r == 60u) << "the gateway answers";
  ASSERT_TRUE(asker.on_frame({reply.data(), *r}, out));
  EXPECT_EQ(asker.lookup(far), std::optional<wire::MacAddr>(kUs));
  EXPECT_EQ(asker.lookup(wire::Ipv4Addr{0xC6120010}), std::optional<wire::MacAddr>(kUs));
  EXPECT_FALSE(asker.lookup(wire::Ipv4Addr{0xC0000209})) << "on the link: its own ARP";
  EXPECT_EQ(asker.lookup(kPeerIp), std::optional<wire::MacAddr>(kPeer)) << "our own address";
}

TEST(Neighbour, AnswersIcmpEchoWithValidChecksums) {
  Neighbour us(kUs, kUsIp);
  std::vector<std::uint8_t> f(14 + 20 + 8 + 32, 0);
  wire::EthView e(f.data());
  e.set_dst(kUs);
  e.set_src(kPeer);
  e.set_ether_type(wire::kEtherTypeIpv4);
  wire::Ipv4View ip(f.data() + 14);
  ip.set_version_ihl();
  ip.set_total_len(60);
  ip.set_ttl(64);
  ip.set_protocol(wire::kIpProtoIcmp);
  ip.set_src(kPeerIp);
  ip.set_dst(kUsIp);
  ip.set_checksum(wire::ipv4_header_checksum(f.data() + 14, 20));
  std::uint8_t* icmp = f.data() + 34;
  icmp[0] = 8;
  wire::store_be16(icmp + 4, 0x1234);
  wire::store_be16(icmp + 6, 7);
  for (int i = 0; i < 32; ++i) icmp[8 + i] = static_cast<std::uint8_t>(i);
  wire::store_be16(icmp + 2, wire::ipv4_header_checksum(icmp, 40));
  std::vector<std::uint8_t> out(128);
  const auto r = us.on_frame(f, out);
  ASSERT_TRUE(r);
  ASSERT_EQ(*r, f.size());
  EXPECT_EQ(out[34], 0) << "echo reply";
  EXPECT_EQ(wire::ipv4_header_checksum(out.data() + 14, 20), 0);
  EXPECT_EQ(wire::ipv4_header_checksum(out.data() + 34, 40), 0);
  EXPECT_EQ(wire::ConstIpv4View(out.data() + 14).dst(), kPeerIp);
  EXPECT_EQ(us.stats().icmp_echo_answered, 1u);
}

TEST(Neighbour, LeavesRoceAndGarbageToTheEngine) {
  Neighbour us(kUs, kUsIp);
  wire::FrameSpec s;
  std::vector<std::uint8_t> f(wire::frame_len(s, 0)), out(128);
  wire::build_frame(s, {}, f);
  EXPECT_FALSE(us.on_frame(f, out));
  for (std::size_t n = 0; n < 40; ++n) {
    std::vector<std::uint8_t> g(n, 0x08);
    us.on_frame(g, out);  // must not crash or read past the buffer
  }
}

}  // namespace
}  // namespace roce::port
