// Software steering by destination QPN, and the lcore encoded in an engine's QPNs.
#include "dataplane/port/steering.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "dataplane/engine/engine.h"
#include "dataplane/wire/roce_frame.h"

namespace roce::port {
namespace {

std::vector<std::uint8_t> frame(std::uint32_t qpn, wire::IpVersion v, bool vlan) {
  wire::FrameSpec s;
  s.ip_version = v;
  if (vlan) s.vlan_id = 7;
  s.opcode = wire::Opcode::kRcSendOnly;
  s.dest_qp = wire::Qpn{qpn};
  std::vector<std::uint8_t> out(256);
  const std::uint8_t payload[8] = {};
  out.resize(wire::build_frame(s, payload, out));
  return out;
}

TEST(Steering, FindsTheDestinationQpnBehindEveryHeaderLayout) {
  for (auto v : {wire::IpVersion::kV4, wire::IpVersion::kV6})
    for (bool vlan : {false, true}) {
      const auto f = frame(0x123456, v, vlan);
      ASSERT_FALSE(f.empty());
      EXPECT_EQ(roce_dest_qpn(f), 0x123456);
    }
}

TEST(Steering, OwnerIsTheLcoreInTheQpn) {
  const std::uint32_t lcore1 = (1u << engine::kQpnLcoreShift) + 0x11;
  const std::uint32_t lcore3 = (3u << engine::kQpnLcoreShift) + 0x40;
  EXPECT_EQ(owner_lcore(frame(0x11, wire::IpVersion::kV4, false), 2), 0u);
  EXPECT_EQ(owner_lcore(frame(lcore1, wire::IpVersion::kV4, false), 2), 1u);
  EXPECT_EQ(owner_lcore(frame(lcore1, wire::IpVersion::kV6, true), 2), 1u);
  EXPECT_EQ(owner_lcore(frame(wire::Qpn::kGsi, wire::IpVersion::kV4, false), 2), 0u);
  // an lcore that does not exist: lcore 0 drops and counts it
  EXPECT_EQ(owner_lcore(frame(lcore3, wire::IpVersion::kV4, false), 2), 0u);
  EXPECT_EQ(owner_lcore(frame(lcore3, wire::IpVersion::kV4, false), 4), 3u);
}

TEST(Steering, NotRoceGoesToLcoreZeroAndTruncationIsSafe) {
  auto f = frame((1u << engine::kQpnLcoreShift) + 0x11, wire::IpVersion::kV4, false);
  for (std::size_t n = 0; n < 14 + 20 + 8 + 12; ++n)  // every truncation before the whole BTH
    EXPECT_EQ(roce_dest_qpn(std::span(f.data(), n)), -1) << n;
  auto arp = f;
  arp[12] = 0x08;
  arp[13] = 0x06;
  EXPECT_EQ(owner_lcore(arp, 2), 0u);
  auto other_port = f;
  other_port[14 + 20 + 2] = 0x12;  // UDP destination port 4791 (0x12b7) becomes 0x1200
  other_port[14 + 20 + 3] = 0x00;
  EXPECT_EQ(roce_dest_qpn(other_port), -1);
  auto fragment = f;
  fragment[14 + 6] = 0x20;  // more fragments
  EXPECT_EQ(roce_dest_qpn(fragment), -1);
}

TEST(EngineLcore, QpnsCarryTheOwningLcore) {
  engine::EngineConfig c;
  c.lcore = 1;
  c.max_qps = 4;
  c.first_qp_index = 0;
  engine::Engine e(c);
  engine::Pd* pd = e.alloc_pd();
  engine::Cq* cq = e.create_cq(16);
  engine::Qp* a = e.create_qp(pd, engine::QpType::kRc, cq, cq, engine::QpCap{});
  engine::Qp* b = e.create_qp(pd, engine::QpType::kRc, cq, cq, engine::QpCap{});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->qpn, (1u << engine::kQpnLcoreShift) + engine::Engine::kFirstQpn);
  EXPECT_EQ(engine::lcore_of_qpn(b->qpn), 1u);
  EXPECT_EQ(e.find_qp(b->qpn), b);
  EXPECT_EQ(e.find_qp(engine::Engine::kFirstQpn), nullptr);  // lcore 0's first QPN
  c.lcore = engine::kMaxLcores;
  EXPECT_THROW(engine::Engine bad(c), std::invalid_argument);
}

TEST(EngineLcore, QpnsAreRandomPerQpAndReproducibleFromASeed) {
  const auto qpns = [](std::uint64_t seed, int n, bool destroy_first,
                       std::optional<std::uint32_t> first = std::nullopt) {
    engine::EngineConfig c;
    c.seed = seed;
    c.max_qps = 1000;
    c.first_qp_index = first;
    engine::Engine e(c);
    engine::Pd* pd = e.alloc_pd();
    engine::Cq* cq = e.create_cq(16);
    std::vector<std::uint32_t> out;
    for (int i = 0; i < n; ++i) {
      engine::Qp* q = e.create_qp(pd, engine::QpType::kRc, cq, cq, engine::QpCap{});
      out.push_back(q->qpn);
      if (destroy_first && i == 0) e.destroy_qp(q);
    }
    return out;
  };
  const auto a = qpns(1, 8, false), b = qpns(2, 8, false);
  EXPECT_NE(a[0], b[0]) << "another seed (a restarted process), other QPNs";
  EXPECT_EQ(a, qpns(1, 8, false)) << "the same seed, the same QPNs";
  int consecutive = 0;
  for (int i = 1; i < 8; ++i) consecutive += a[i] == a[i - 1] + 1;
  EXPECT_LT(consecutive, 3) << "not handed out in sequence";
  const auto d = qpns(1, 2, true);
  EXPECT_NE(d[1], d[0]) << "a destroyed QP's number is not handed out again at once";
  // first_qp_index: cyclic from there (reproducible numbers for tests).
  const auto f = qpns(1, 3, false, 10);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(f[i], engine::Engine::kFirstQpn + 10 + static_cast<std::uint32_t>(i));
}

}  // namespace
}  // namespace roce::port
