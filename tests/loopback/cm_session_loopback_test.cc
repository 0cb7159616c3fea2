// rdma_cm's port spaces on a CmSession (the CM hub's owner roced gives each attached client):
// a SIDR_REQ to a TCP port, or a REQ to a UDP port, is refused by the session at once, never
// handed to the owner as a request of the other kind. An attached client cannot answer a SIDR
// request (EOPNOTSUPP), so each one used to hold a CM slot for the half-open timeout (90 s)
// and two entries of the client's event backlog, which has no bound for them: a segment host
// filled the port's CM (max_connections, shared by every owner) with a few thousand MADs.
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "client/local/local_context.h"
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
  CmaHeader cma() { return CmaHeader::ipv4(lb.a().config().ipv4, 0xC001, lb.b().config().ipv4); }
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

// A session's UDP listens and SIDR requests are its own (attach protocol 7 gives them to
// attached clients): another session cannot end the listen (ENOENT), a request refused for want
// of room (the lane's full event backlog: CmSession::refuse) and the requests still unanswered
// when a session ends (a client that died) get SIDR_REP "rejected" at once; the port is then
// free for another owner.
TEST(CmSessionSidr, OwnershipRefusalAndTheEndOfASession) {
  Rig r;
  std::vector<SessionEvent> ev2;
  auto other = std::make_unique<CmSession>(r.hub, r.lb.b().config().ipv4, 3,
                                           [&](SessionEvent e) { ev2.push_back(e); });
  ASSERT_EQ(other->sidr_listen(kPort + 1), 0);
  EXPECT_EQ(r.session.unlisten(kPort + 1, true), ENOENT) << "another owner's UDP listen";
  EXPECT_EQ(r.session.sidr_listen(kPort + 1), EADDRINUSE);
  auto ask = [&](std::uint16_t port) {
    SidrParams p;
    p.peer.gid = wire::ipv4_mapped(r.lb.b().config().ipv4);
    p.service_id = service_id(PortSpace::kUdp, port);
    p.cma = r.cma();
    ASSERT_TRUE(r.a.cm().sidr_resolve(p));
  };
  auto replies = [&] {
    std::vector<SidrStatus> v;
    for (const CmEvent& e : r.ev_a)
      if (e.type == CmEventType::kSidrReply) v.push_back(e.sidr_status);
    return v;
  };
  ask(kPort + 1);
  ask(kPort + 1);
  ASSERT_TRUE(r.run([&] { return ev2.size() == 2; })) << "the listen of the other owner ended";
  ASSERT_EQ(ev2[0].type, SessionEventType::kSidrRequest);
  EXPECT_EQ(r.session.sidr_accept(ev2[0].id, 0x100, 0x01234567, {}), ENOENT)
      << "a request delivered to another owner";
  EXPECT_EQ(other->refuse(ev2[0].id), 0);
  ASSERT_TRUE(r.run([&] { return replies().size() == 1; }));
  EXPECT_EQ(replies()[0], SidrStatus::kReject);
  const std::uint64_t t0 = r.lb.now();
  other.reset();  // the second request unanswered
  ASSERT_TRUE(r.run([&] { return replies().size() == 2; }, 100'000'000ull))
      << "the requester waits for its retries to run out";
  EXPECT_EQ(replies()[1], SidrStatus::kReject);
  EXPECT_LT(r.lb.now() - t0, 100'000'000ull);
  EXPECT_EQ(r.session.sidr_listen(kPort + 1), 0) << "the port is free again";
  EXPECT_EQ(r.session.unlisten(kPort + 1, true), 0);
  EXPECT_EQ(r.session.unlisten(kPort + 1, true), ENOENT);
}

// An in-process Context's CM (runtime::Env's, the one an unmodified program gets from
// roce-run --link) sends MADs from inside its poll to whatever source a frame names. Its
// LocalOptions::resolve waits for ARP (port::resolve_wait, 10 s in Env): a segment host's REQ
// from an address that never answers stalled the program 10 s and had the port broadcast 50
// ARP requests, per REQ. The CM asks the cache without waiting (LocalOptions::lookup, which
// Env sets) and drops the MAD for now (the CM retransmits) instead.
TEST(LocalCm, AMadToAnUnknownSourceNeverWaitsForArp) {
  Loopback lb;
  std::vector<CmEvent> ev_a;
  CmAgentConfig ca;
  ca.cm.ca_guid = 0xA;
  ca.cm.seed = 7;
  ca.resolve_mac = [&lb](const Ipv6Addr& gid) -> std::optional<wire::MacAddr> {
    if (gid == wire::ipv4_mapped(lb.b().config().ipv4)) return lb.b().config().mac;
    return std::nullopt;
  };
  CmAgent a(lb.a(), ca, [&](const CmEvent& e) { ev_a.push_back(e); });
  int waits = 0, asks = 0;
  client::LocalOptions o;
  o.engine = &lb.b();
  o.progress = [&] {
    lb.run_until([] { return false; }, 2000);
    a.poll(lb.now());
  };
  o.resolve = [&](Ipv4Addr) -> std::optional<MacAddr> {
    ++waits;  // runtime::Env's would poll here for up to 10 s
    return std::nullopt;
  };
  o.lookup = [&](Ipv4Addr, bool ask) -> std::optional<MacAddr> {
    asks += ask ? 1 : 0;
    return std::nullopt;  // the source never answers ARP
  };
  o.port.mac = lb.b().config().mac;
  o.port.ipv4 = lb.b().config().ipv4;
  o.port.gid = wire::ipv4_mapped(o.port.ipv4);
  auto ctx = client::open_local(std::move(o));
  ASSERT_EQ(ctx->cm_listen(kPort), 0);
  // The peer connects to a port nobody listens on: the in-process CM answers REJ 8.
  auto* pd = lb.a().alloc_pd();
  auto* cq = lb.a().create_cq(16);
  auto* qp = lb.a().create_qp(pd, engine::QpType::kRc, cq, cq, engine::QpCap{4, 4, 1, 1, 0});
  ConnectParams p;
  p.peer.gid = wire::ipv4_mapped(lb.b().config().ipv4);
  p.service_id = service_id(PortSpace::kTcp, kPort + 1);
  p.starting_psn = Psn(0x010203);
  p.cma = CmaHeader::ipv4(lb.a().config().ipv4, 0xC001, lb.b().config().ipv4);
  ASSERT_TRUE(a.connect(qp, p));
  client::CmEvent ev;
  for (int i = 0; i < 200; ++i) (void)ctx->cm_get_event(ev, 0);
  EXPECT_EQ(waits, 0) << "the CM waited for ARP inside its poll";
  EXPECT_GE(asks, 1) << "the unknown source was not asked for";
}

// roced's CM (and an Env's) asks ARP for the destination of every MAD whose MAC its cache
// lacks: REQs from ever new forged sources (each answered, REJ 8 to a port nobody listens on)
// had the port broadcast one ARP request per REQ, at the sender's rate. agent_config's lookup
// asks at most kCmArpAsks (64) times per 100 ms of the CM's clock; the rest is looked up only.
TEST(CmHubArp, AsksForMadDestinationsAreBudgeted) {
  Loopback lb;
  CmAgentConfig ca;
  ca.cm.ca_guid = 0xA;
  ca.cm.seed = 7;
  ca.resolve_mac = [&lb](const Ipv6Addr& gid) -> std::optional<wire::MacAddr> {
    if (gid == wire::ipv4_mapped(lb.b().config().ipv4)) return lb.b().config().mac;
    return std::nullopt;
  };
  std::vector<CmEvent> ev_a;
  CmAgent a(lb.a(), ca, [&](const CmEvent& e) { ev_a.push_back(e); });
  int asks = 0, lookups = 0;
  std::uint64_t clock = 1'000'000'000;
  auto hub = std::make_shared<CmHub>(
      lb.b(), agent_config(
                  lb.b().config().mac, 4096, [&] { return clock; },
                  [&](wire::Ipv4Addr, bool ask) -> std::optional<wire::MacAddr> {
                    ++lookups;
                    asks += ask ? 1 : 0;
                    return std::nullopt;  // nobody answers
                  }));
  auto* pd = lb.a().alloc_pd();
  auto* cq = lb.a().create_cq(256);
  auto* qp = lb.a().create_qp(pd, engine::QpType::kRc, cq, cq, engine::QpCap{4, 4, 1, 1, 0});
  constexpr int kReqs = 200;
  for (int i = 0; i < kReqs; ++i) {
    ConnectParams p;
    p.peer.gid = wire::ipv4_mapped(lb.b().config().ipv4);
    p.service_id = service_id(PortSpace::kTcp, kPort);  // nobody listens: REJ 8
    p.starting_psn = Psn(0x010203);
    p.cma = CmaHeader::ipv4(lb.a().config().ipv4, static_cast<std::uint16_t>(0xC000 + i),
                            lb.b().config().ipv4);
    ASSERT_TRUE(a.connect(qp, p));
    a.release(qp);  // one QP carries one connection at a time: free it for the next REQ
    for (int k = 0; k < 4; ++k) {
      lb.run_until([] { return false; }, 2000);
      a.poll(lb.now());
      hub->poll(clock);
    }
  }
  std::printf("%d REQs answered, %d lookups, %d ARP asks in one 100 ms window\n", kReqs, lookups,
              asks);
  EXPECT_GE(lookups, kReqs);
  EXPECT_LE(asks, 64) << "one ARP request per MAD";
  EXPECT_GE(asks, 1);
  clock += 100'000'000;  // the next window asks again
  const int before = asks;
  ConnectParams p;
  p.peer.gid = wire::ipv4_mapped(lb.b().config().ipv4);
  p.service_id = service_id(PortSpace::kTcp, kPort);
  p.starting_psn = Psn(0x010203);
  p.cma = CmaHeader::ipv4(lb.a().config().ipv4, 0xBFFF, lb.b().config().ipv4);
  ASSERT_TRUE(a.connect(qp, p));
  for (int k = 0; k < 4; ++k) {
    lb.run_until([] { return false; }, 2000);
    a.poll(lb.now());
    hub->poll(clock);
  }
  EXPECT_EQ(asks, before + 1);
}

}  // namespace
}  // namespace roce::test
