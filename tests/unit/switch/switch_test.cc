// The software switch (apps/switch/switch.h): CE marking of IPv4 (checksum kept right), IPv6
// and VLAN-tagged frames, the output queue's rate, tail drop and RED marking, the depth
// histogram; and the incast fabric (apps/switch/fabric.h) with and without DCQCN.
#include "apps/switch/switch.h"

#include <gtest/gtest.h>

#include <vector>

#include "apps/switch/fabric.h"
#include "dataplane/wire/roce_frame.h"

namespace roce::fabric {
namespace {

std::vector<std::uint8_t> roce_frame(std::uint8_t tos, bool v6 = false, bool vlan = false,
                                     std::size_t payload = 64, std::uint8_t last_mac = 2) {
  wire::FrameSpec s;
  s.src_mac = wire::MacAddr{{2, 0, 0, 0, 0, 1}};
  s.dst_mac = wire::MacAddr{{2, 0, 0, 0, 0, last_mac}};
  s.src_ip4 = wire::Ipv4Addr{0xC6120001};
  s.dst_ip4 = wire::Ipv4Addr{0xC6120002};
  if (v6) {
    s.ip_version = wire::IpVersion::kV6;
    s.src_ip6.b[15] = 1;
    s.dst_ip6.b[15] = 2;
  }
  if (vlan) s.vlan_id = 7;
  s.tos = tos;
  s.opcode = wire::Opcode::kRcWriteOnly;
  s.reth.dma_len = static_cast<std::uint32_t>(payload);
  std::vector<std::uint8_t> p(payload, 0xAB), f(wire::frame_len(s, payload));
  EXPECT_EQ(wire::build_frame(s, p, f), f.size());
  return f;
}

TEST(Switch, MarksCeOnIpv4AndKeepsTheChecksumAndIcrcRight) {
  auto f = roce_frame(0xC2);  // DSCP 48, ECT(0)
  ASSERT_TRUE(mark_ce(f));
  EXPECT_EQ(ecn_of(f), 3);
  wire::RxPkt p;
  ASSERT_EQ(wire::parse_frame(f, p), wire::Verdict::kOk) << "IP checksum and ICRC still check";
  EXPECT_EQ(p.ecn, 3);
  EXPECT_EQ(p.ipv4().tos(), 0xC3) << "DSCP untouched";
}

TEST(Switch, MarksCeOnIpv6AndVlanTaggedFrames) {
  for (bool vlan : {false, true}) {
    auto f6 = roce_frame(0x02, true, vlan);
    ASSERT_TRUE(mark_ce(f6));
    wire::RxPkt p;
    ASSERT_EQ(wire::parse_frame(f6, p), wire::Verdict::kOk);
    EXPECT_EQ(p.ecn, 3);
    auto f4 = roce_frame(0x01, false, vlan);
    ASSERT_TRUE(mark_ce(f4));
    ASSERT_EQ(wire::parse_frame(f4, p), wire::Verdict::kOk);
    EXPECT_EQ(p.ecn, 3);
  }
}

TEST(Switch, NotEctIsNeverMarked) {
  auto f = roce_frame(0x00);
  const auto before = f;
  EXPECT_FALSE(mark_ce(f));
  EXPECT_EQ(f, before);
  std::vector<std::uint8_t> junk(10, 0);
  EXPECT_FALSE(mark_ce(junk));
  EXPECT_EQ(ecn_of(junk), -1);
}

TEST(Switch, OutputDrainsAtItsRate) {
  QueueConfig c;
  c.rate_mbps = 1000;
  c.delay_ns = 0;
  c.ecn = false;
  OutputQueue q(c);
  const auto f = roce_frame(0x02, false, false, 1000);
  for (int i = 0; i < 10; ++i) q.enqueue(f, 0);
  std::vector<std::uint64_t> at;
  q.deliver(1'000'000'000,
            [&](std::span<const std::uint8_t>, std::uint64_t t) { at.push_back(t); });
  ASSERT_EQ(at.size(), 10u);
  const std::uint64_t per = (f.size() + 24) * 8;  // ns per frame at 1 Gb/s
  for (std::size_t i = 0; i < at.size(); ++i) EXPECT_EQ(at[i], (i + 1) * per);
}

TEST(Switch, TailDropBeyondTheDepth) {
  QueueConfig c;
  c.depth_bytes = 10'000;
  c.ecn = false;
  OutputQueue q(c);
  const auto f = roce_frame(0x02, false, false, 1000);
  int dropped = 0;
  for (int i = 0; i < 20; ++i) dropped += q.enqueue(f, 0) == OutputQueue::Verdict::kDropped;
  EXPECT_EQ(q.counters().frames, 10000 / (f.size() + 24));
  EXPECT_EQ(q.counters().dropped, static_cast<std::uint64_t>(dropped));
  EXPECT_GT(dropped, 0);
  EXPECT_LE(q.counters().max_depth, c.depth_bytes);
}

TEST(Switch, RedMarksNothingBelowKminAndEverythingAboveKmax) {
  QueueConfig c;
  c.kmin_bytes = 5'000;
  c.kmax_bytes = 10'000;
  c.pmax = 0.5;
  c.depth_bytes = 1 << 20;
  c.delay_ns = 0;
  c.mark_on_dequeue = false;
  OutputQueue q(c);
  const auto f = roce_frame(0x02, false, false, 1000);  // 1082 B with preamble and gap
  int marked_low = 0, marked_high = 0;
  for (int i = 0; i < 4; ++i) marked_low += q.enqueue(f, 0) == OutputQueue::Verdict::kMarked;
  for (int i = 0; i < 6; ++i) q.enqueue(f, 0);
  for (int i = 0; i < 20; ++i) marked_high += q.enqueue(f, 0) == OutputQueue::Verdict::kMarked;
  EXPECT_EQ(marked_low, 0) << "below Kmin";
  EXPECT_EQ(marked_high, 20) << "above Kmax";
  std::size_t ce = 0, n = 0;
  q.deliver(UINT64_MAX, [&](std::span<const std::uint8_t> fr, std::uint64_t) {
    ++n;
    ce += ecn_of(fr) == 3;
  });
  EXPECT_EQ(n, 30u);
  EXPECT_EQ(ce, q.counters().marked);
  EXPECT_GT(q.depth_percentile(0.99), 20'000u);
  EXPECT_LT(q.depth_percentile(0.01), 2'000u);
}

TEST(Switch, ForwardsByDestinationMacAndCountsTheUnknown) {
  QueueConfig c;
  c.delay_ns = 0;
  Switch sw(3, c);
  for (std::uint8_t p = 0; p < 3; ++p) sw.set_mac(p, wire::MacAddr{{2, 0, 0, 0, 0, p}});
  sw.receive(0, roce_frame(0x02, false, false, 64, 2), 0);
  sw.receive(0, roce_frame(0x02, false, false, 64, 9), 0);
  int got = 0;
  sw.deliver(2, UINT64_MAX, [&](std::span<const std::uint8_t>) { ++got; });
  EXPECT_EQ(got, 1);
  EXPECT_EQ(sw.unknown_dst(), 1u);
  EXPECT_NE(sw.json().find("\"unknown_dst\":1"), std::string::npos);
}

// A short incast: without congestion control the bottleneck drops, with DCQCN it does not.
TEST(Fabric, IncastDropsWithoutCcAndNotWithDcqcn) {
  IncastOptions o;
  o.senders = 4;
  o.duration_ns = 8'000'000;
  o.warmup_ns = 2'000'000;
  o.sw.depth_bytes = 256 * 1024;
  IncastResult none = run_incast(o);
  EXPECT_GT(none.drops, 0u);
  o.cc.algorithm = engine::cc::Algorithm::kDcqcn;
  o.cc.dcqcn.max_rate_mbps = static_cast<std::uint32_t>(o.link_mbps);
  IncastResult d = run_incast(o);
  EXPECT_EQ(d.drops, 0u);
  EXPECT_GT(d.cnp_sent, 0u);
  EXPECT_GT(d.cnp_handled, 0u);
  EXPECT_GT(d.of_output, 0.85);
  EXPECT_GT(d.jain, 0.9);
  EXPECT_EQ(d.errors, 0u);
  EXPECT_LT(d.p99_depth, o.sw.kmax_bytes);
}

}  // namespace
}  // namespace roce::fabric
