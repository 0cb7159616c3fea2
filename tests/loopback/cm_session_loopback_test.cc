// rdma_cm's port spaces on a CmSession (the CM hub's owner roced gives each attached client):
// a SIDR_REQ to a TCP port, or a REQ to a UDP port, is refused by the session at once, never
// handed to the owner as a request of the other kind. An attached client cannot answer a SIDR
// request (EOPNOTSUPP), so each one used to hold a CM slot for the half-open timeout (90 s)
// and two entries of the client's event backlog, which has no bound for them: a segment host
// filled the port's CM (max_connections, shared by every owner) with a few thousand MADs.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "controlplane/cm/cm_agent.h"
#include "controlplane/cm/cm_hub.h"
#include "controlplane/cm/cm_session.h"
#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::cm;

constexpr std::uint16_t kPort = 7174;

struct Rig {
  Loopback lb;
  std::vector<CmEvent> ev_a;
  std::vector<SessionEvent> ev_b;
  CmAgent a{lb.a(), config(0xA), [this](const CmEvent& e) { ev_a.push_back(e); }};
  std::shared_ptr<CmHub> hub = std::make_shared<CmHub>(lb.b(), config(0xB));
  CmSession session{hub, lb.b().config().ipv4, 3, [this](SessionEvent e) { ev_b.push_back(e); }};

  CmAgentConfig config(std::uint64_t guid) {
    CmAgentConfig cfg;
    cfg.cm.ca_guid = guid;
    cfg.cm.seed = static_cast<std::uint32_t>(guid * 7919);
    cfg.resolve_mac = [this](const Ipv6Addr& gid) -> std::optional<wire::MacAddr> {
      for (int i = 0; i < 2; ++i)
        if (gid == wire::ipv4_mapped(lb.side(i).config().ipv4)) return lb.side(i).config().mac;
      return std::nullopt;
    };
    return cfg;
  }
  bool run(const std::function<bool()>& done, std::uint64_t limit_ns = 2'000'000'000ull) {
    const std::uint64_t end = lb.now() + limit_ns;
    auto poll_and_check = [&] {
      a.poll(lb.now());
      hub->poll(lb.now());
      return done();
    };
    while (lb.now() <= end)
      if (lb.run_until(poll_and_check, end - lb.now())) return true;
    return false;
  }
  CmaHeader cma() {
    return CmaHeader::ipv4(lb.a().config().ipv4, 0xC001, lb.b().config().ipv4);
  }
  const CmEvent* find(CmEventType t) const {
    for (const CmEvent& e : ev_a)
      if (e.type == t) return &e;
    return nullptr;
  }
};

TEST(CmSessionPortSpace, SidrRequestToATcpPortIsRefusedAtOnce) {
  Rig r;
  ASSERT_EQ(r.session.listen(kPort), 0);
  for (int i = 0; i < 8; ++i) {
    SidrParams p;
    p.peer.gid = wire::ipv4_mapped(r.lb.b().config().ipv4);
    p.service_id = service_id(PortSpace::kTcp, kPort);
    p.cma = r.cma();
    ASSERT_TRUE(r.a.cm().sidr_resolve(p));
  }
  ASSERT_TRUE(r.run([&] {
    std::size_t n = 0;
    for (const CmEvent& e : r.ev_a) n += e.type == CmEventType::kSidrReply;
    return n == 8;
  })) << "no SIDR_REP: the request waits for an answer the owner cannot give";
  EXPECT_NE(r.find(CmEventType::kSidrReply)->sidr_status, SidrStatus::kSuccess);
  EXPECT_TRUE(r.ev_b.empty()) << "the owner was handed a SIDR request on its TCP listen";
}

TEST(CmSessionPortSpace, ConnectRequestToAUdpPortIsRefused) {
  Rig r;
  ASSERT_EQ(r.session.sidr_listen(kPort), 0);
  auto pd = r.lb.a().alloc_pd();
  auto cq = r.lb.a().create_cq(16);
  auto qp = r.lb.a().create_qp(pd, engine::QpType::kRc, cq, cq, engine::QpCap{4, 4, 1, 1, 0});
  ConnectParams p;
  p.peer.gid = wire::ipv4_mapped(r.lb.b().config().ipv4);
  p.service_id = service_id(PortSpace::kUdp, kPort);
  p.starting_psn = Psn(0x010203);
  p.cma = r.cma();
  ASSERT_TRUE(r.a.connect(qp, p));
  ASSERT_TRUE(r.run([&] { return r.find(CmEventType::kRejected) != nullptr; }));
  EXPECT_EQ(r.find(CmEventType::kRejected)->reason, RejReason::kInvalidServiceId);
  EXPECT_TRUE(r.ev_b.empty()) << "the owner was handed a connect request on its UDP listen";
}

}  // namespace
}  // namespace roce::test
