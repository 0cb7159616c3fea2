// Two engines joined by the in-memory wire, each with a CM agent on QP1: rdma_cm-style
// connection setup (REQ/REP/RTU as UD SENDs to QP1), an RC SEND over the connected QPs, and
// teardown (DREQ/DREP, timewait), with loss of the REQ or the RTU on the way.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "controlplane/cm/cm_agent.h"
#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::cm;
using engine::QpState;

constexpr std::uint64_t kSid = service_id(PortSpace::kTcp, 7174);

class Rig {
 public:
  /// `sr_a`, `sr_b`: the agents allow selective repeat (CmAgentConfig::selective_repeat).
  /// `sr_engines`: both engines' EngineConfig::selective_repeat (roced's `transport:` key),
  /// which their agents read. What the owners ask for is `ece_a` (connect) and `ece_b` (accept).
  explicit Rig(const LoopbackOptions& opts = {}, CmConfig cm_cfg = {}, bool ipv6 = false,
               bool sr_a = false, bool sr_b = false, bool sr_engines = false)
      : ipv6_(ipv6),
        lb(opts, engine_config(0, ipv6, sr_engines), engine_config(1, ipv6, sr_engines)),
        a(lb.a(), agent_config(cm_cfg, 0xA, sr_a), [this](const CmEvent& e) { ev_a.push_back(e); }),
        b(lb.b(), agent_config(cm_cfg, 0xB, sr_b), [this](const CmEvent& e) { on_b(e); }) {
    for (int i = 0; i < 2; ++i) {
      Endpoint& ep = i == 0 ? ep_a : ep_b;
      ep.eng = &lb.side(i);
      ep.pd = ep.eng->alloc_pd();
      ep.scq = ep.eng->create_cq(64);
      ep.rcq = ep.eng->create_cq(64);
      ep.qp = ep.eng->create_qp(ep.pd, engine::QpType::kRc, ep.scq, ep.rcq,
                                engine::QpCap{16, 16, 1, 1, 0});
    }
    buf_a = make_buffer(lb.a(), ep_a.pd, 4096, 1);
    buf_b = make_buffer(lb.b(), ep_b.pd, 4096, 2);
  }

  bool ipv6_;
  Loopback lb;
  std::vector<CmEvent> ev_a, ev_b;
  Endpoint ep_a, ep_b;
  Buffer buf_a, buf_b;
  CmAgent a;
  CmAgent b;
  bool auto_accept = true;
  Ece ece_a, ece_b;  ///< the owners' ECE: given to connect() and accept()

  static std::size_t count(const std::vector<CmEvent>& v, CmEventType t) {
    std::size_t n = 0;
    for (const CmEvent& e : v) n += e.type == t;
    return n;
  }
  const CmEvent* find(const std::vector<CmEvent>& v, CmEventType t) const {
    for (const CmEvent& e : v)
      if (e.type == t) return &e;
    return nullptr;
  }

  /// Steps the wire, polling both agents, until `done` (or 10 s of simulated time). The wire's
  /// run_until() stops when it sees nothing to do; CM timers are invisible to it, so keep going.
  bool run(const std::function<bool()>& done, std::uint64_t limit_ns = 10'000'000'000ull) {
    const std::uint64_t end = lb.now() + limit_ns;
    auto poll_and_check = [&] {
      a.poll(lb.now());
      b.poll(lb.now());
      return done();
    };
    while (lb.now() <= end)
      if (lb.run_until(poll_and_check, end - lb.now())) return true;
    return false;
  }

  std::optional<ConnId> connect(std::uint64_t sid = kSid) {
    ConnectParams p;
    p.peer.gid = b.local_gid();
    p.service_id = sid;
    p.starting_psn = Psn(0x010203);
    p.cma = ipv6_ ? CmaHeader::ipv6(ip6(0), 0xC001, ip6(1))
                  : CmaHeader::ipv4(lb.a().config().ipv4, 0xC001, lb.b().config().ipv4);
    p.ece = ece_a;
    return a.connect(ep_a.qp, p);
  }

  void post_b_recv() {
    const engine::Sge s = buf_b.sge(0, 4096);
    engine::RecvWr r;
    r.wr_id = 7;
    r.sg_list = &s;
    r.num_sge = 1;
    const engine::RecvWr* bad = nullptr;
    ASSERT_EQ(lb.b().post_recv(ep_b.qp, &r, &bad), engine::kOk);
  }

  void send_a(std::uint32_t len) {
    const engine::Sge s = buf_a.sge(0, len);
    engine::SendWr w;
    w.wr_id = 9;
    w.opcode = engine::WrOpcode::kSend;
    w.sg_list = &s;
    w.num_sge = 1;
    w.send_flags = engine::kSendSignaled;
    const engine::SendWr* bad = nullptr;
    ASSERT_EQ(lb.a().post_send(ep_a.qp, &w, &bad), engine::kOk);
  }

 private:
  static Ipv6Addr ip6(int side) {
    Ipv6Addr a{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
    a.b[15] = static_cast<std::uint8_t>(1 + side);
    return a;
  }
  static engine::EngineConfig engine_config(int side, bool ipv6, bool sr = false) {
    engine::EngineConfig c = Loopback::default_config(side);
    c.selective_repeat = sr;
    if (ipv6) c.ipv6 = ip6(side);
    return c;
  }
  Ipv6Addr gid_of(int side) {
    return ipv6_ ? ip6(side) : wire::ipv4_mapped(lb.side(side).config().ipv4);
  }

  CmAgentConfig agent_config(CmConfig c, std::uint64_t guid, bool sr) {
    CmAgentConfig cfg;
    cfg.cm = c;
    cfg.selective_repeat = sr;
    cfg.cm.ca_guid = guid;
    cfg.cm.seed = static_cast<std::uint32_t>(guid * 7919);
    cfg.cm.timewait = std::chrono::milliseconds(1);
    if (ipv6_) cfg.gid = ip6(guid == 0xA ? 0 : 1);
    cfg.resolve_mac = [this](const Ipv6Addr& gid) -> std::optional<wire::MacAddr> {
      for (int i = 0; i < 2; ++i)
        if (gid == gid_of(i)) return lb.side(i).config().mac;
      return std::nullopt;
    };
    return cfg;
  }

  void on_b(const CmEvent& e) {
    ev_b.push_back(e);
    if (e.type == CmEventType::kConnectRequest && auto_accept) {
      AcceptParams p;
      p.starting_psn = Psn(0x0A0B0C);
      p.ece = ece_b;
      EXPECT_EQ(b.accept(e.id, ep_b.qp, p), CmStatus::kOk);
      post_b_recv();  // the QP is in RTS now
    }
  }
};

class CmLoopbackIp : public ::testing::TestWithParam<bool> {};

TEST_P(CmLoopbackIp, ConnectSendDisconnect) {
  const bool ipv6 = GetParam();
  Rig r({}, {}, ipv6);
  r.b.cm().listen(kSid);
  const std::optional<ConnId> ia = r.connect();
  ASSERT_TRUE(ia);
  ASSERT_TRUE(r.run([&] {
    return Rig::count(r.ev_a, CmEventType::kEstablished) == 1 &&
           Rig::count(r.ev_b, CmEventType::kEstablished) == 1;
  }));
  const CmEvent& creq = *r.find(r.ev_b, CmEventType::kConnectRequest);
  ASSERT_TRUE(creq.cma);
  EXPECT_EQ(creq.cma->src_port, 0xC001);
  EXPECT_EQ(creq.cma->ip_version, ipv6 ? 6 : 4);
  if (!ipv6) {
    EXPECT_EQ(creq.cma->src_ipv4(), r.lb.a().config().ipv4);
  }
  EXPECT_EQ(creq.peer.gid, r.a.local_gid());  // the sender's address, from the GRH
  EXPECT_EQ(r.ep_a.qp->attr.ah.dgid, r.b.local_gid());
  EXPECT_EQ(r.ep_b.qp->attr.ah.dgid, r.a.local_gid());
  EXPECT_EQ(r.ep_a.qp->state, QpState::kRts);
  EXPECT_EQ(r.ep_b.qp->state, QpState::kRts);
  EXPECT_EQ(r.ep_a.qp->attr.dest_qp_num, r.ep_b.qp->qpn);
  EXPECT_EQ(r.ep_b.qp->attr.dest_qp_num, r.ep_a.qp->qpn);
  // A Starting PSN names the PSN its sender expects (Linux cm.c): the peer sends from it.
  EXPECT_EQ(r.ep_a.qp->attr.rq_psn, 0x010203u);
  EXPECT_EQ(r.ep_b.qp->attr.sq_psn, 0x010203u);
  EXPECT_EQ(r.ep_b.qp->attr.rq_psn, 0x0A0B0Cu);
  EXPECT_EQ(r.ep_a.qp->attr.sq_psn, 0x0A0B0Cu);
  EXPECT_EQ(r.ep_a.qp->attr.min_rnr_timer, 0);
  EXPECT_EQ(r.ep_b.qp->attr.rnr_retry, 7);

  // An RC SEND over the connection the CM set up.
  r.send_a(100);
  std::vector<engine::Wc> got_b, got_a;
  ASSERT_TRUE(r.run([&] {
    engine::Wc wc[4];
    int n;
    while ((n = r.lb.b().poll_cq(r.ep_b.rcq, 4, wc)) > 0) got_b.insert(got_b.end(), wc, wc + n);
    while ((n = r.lb.a().poll_cq(r.ep_a.scq, 4, wc)) > 0) got_a.insert(got_a.end(), wc, wc + n);
    return !got_a.empty() && !got_b.empty();
  }));
  EXPECT_EQ(got_b[0].status, engine::WcStatus::kSuccess);
  EXPECT_EQ(got_b[0].byte_len, 100u);
  EXPECT_EQ(got_a[0].status, engine::WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(r.buf_a.bytes.data(), r.buf_b.bytes.data(), 100), 0);

  ASSERT_EQ(r.a.cm().disconnect(*ia), CmStatus::kOk);
  ASSERT_TRUE(r.run([&] {
    return Rig::count(r.ev_a, CmEventType::kDisconnected) == 1 &&
           Rig::count(r.ev_b, CmEventType::kDisconnected) == 1;
  }));
  EXPECT_TRUE(r.find(r.ev_b, CmEventType::kDisconnected)->remote);
  EXPECT_EQ(r.ep_a.qp->state, QpState::kErr);
  EXPECT_EQ(r.ep_b.qp->state, QpState::kErr);
  ASSERT_TRUE(r.run([&] {
    return Rig::count(r.ev_a, CmEventType::kTimewaitExit) == 1 &&
           Rig::count(r.ev_b, CmEventType::kTimewaitExit) == 1;
  }));
  EXPECT_EQ(r.a.cm().size(), 0u);
  EXPECT_EQ(r.b.cm().size(), 0u);
  EXPECT_EQ(r.a.stats().tx_dropped + r.b.stats().tx_dropped, 0u);
  EXPECT_EQ(r.a.cm().stats().mads_rx_bad + r.b.cm().stats().mads_rx_bad, 0u);
}

INSTANTIATE_TEST_SUITE_P(IpVersions, CmLoopbackIp, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Ipv6" : "Ipv4";
                         });

// Selective repeat negotiated through ECE (docs/loss-recovery.md "Negotiation"): a 16-packet
// WRITE over connected QPs with its 6th packet lost. Both agents announcing it: the responder
// reports the gap and the requester sends that one packet again. One of them silent (as rxe or
// an RNIC, which send no ECE or another vendor's): go-back-N, a sequence NAK and the rest of
// the message again.
struct CmSrRun {
  Ece remote_ece_a, remote_ece_b;         ///< what each side's established QP saw of the other
  bool sr_qp_a = false, sr_qp_b = false;  ///< the QPs run selective repeat
  std::uint64_t sr_connections = 0;       ///< both agents' Stats::sr_connections
  std::uint64_t sr_retransmits = 0, sr_sacks_sent = 0, seq_naks = 0, retransmitted = 0;
  bool data_ok = false;
  /// Selective repeat's message index bases at each end (Engine::sr_index_base), and what
  /// sr_index_base gives A from the two comm IDs.
  std::optional<engine::SrIndexBase> base_a, base_b;
  engine::SrIndexBase derived_a;
  bool send_ok = false;  ///< a SEND from A after the WRITE arrived whole at B
};

constexpr Ece kOffer{kEceVendorId, kEceSignature | kEceSrOffer};
constexpr Ece kAccept{kEceVendorId, kEceSignature | kEceSrAccept};

/// `sr_a`, `sr_b`: the agents allow it; `ece_a`, `ece_b`: what the owners ask for (by default
/// the active one offers and the passive one accepts).
CmSrRun write_over_cm(bool sr_a, bool sr_b, bool sr_engines = false, Ece ece_a = kOffer,
                      Ece ece_b = kAccept) {
  LoopbackOptions o;
  o.a2b.drop_nth = 8;  // A sends the REQ, the RTU, then the WRITE: its 6th packet
  Rig r(o, {}, false, sr_a, sr_b, sr_engines);
  r.ece_a = ece_a;
  r.ece_b = ece_b;
  r.b.cm().listen(kSid);
  CmSrRun out;
  EXPECT_TRUE(r.connect());
  EXPECT_TRUE(r.run([&] {
    return Rig::count(r.ev_a, CmEventType::kEstablished) == 1 &&
           Rig::count(r.ev_b, CmEventType::kConnectRequest) == 1;
  }));
  out.remote_ece_a = r.find(r.ev_a, CmEventType::kEstablished)->qp.remote_ece;
  out.remote_ece_b = r.find(r.ev_b, CmEventType::kConnectRequest)->qp.remote_ece;
  out.sr_qp_a = r.ep_a.qp->req.sr;
  out.sr_qp_b = r.ep_b.qp->req.sr;
  out.sr_connections = r.a.stats().sr_connections + r.b.stats().sr_connections;
  out.base_a = r.lb.a().sr_index_base(r.ep_a.qp);
  out.base_b = r.lb.b().sr_index_base(r.ep_b.qp);
  out.derived_a = sr_index_base(r.find(r.ev_a, CmEventType::kEstablished)->id.v,
                                r.find(r.ev_b, CmEventType::kConnectRequest)->id.v);
  Buffer src = make_buffer(r.lb.a(), r.ep_a.pd, 16384, 5);
  Buffer dst = make_buffer(r.lb.b(), r.ep_b.pd, 16384, 0);
  const engine::Sge s = src.sge();
  const engine::SendWr wr = make_wr(1, &s, dst);
  EXPECT_EQ(r.lb.a().post_send(r.ep_a.qp, &wr, nullptr), engine::kOk);
  engine::Wc wc{};
  EXPECT_TRUE(r.run([&] { return r.lb.a().poll_cq(r.ep_a.scq, 1, &wc) == 1; }));
  EXPECT_EQ(wc.status, engine::WcStatus::kSuccess);
  EXPECT_EQ(r.lb.injector(0).stats().dropped, 1u);
  out.data_ok = dst.bytes == src.bytes;
  const auto& sa = r.lb.a().stats();
  const auto& sb = r.lb.b().stats();
  out.sr_retransmits = sa.get(engine::Counter::kSrRetransmits);
  out.retransmitted = sa.get(engine::Counter::kRetransmittedPackets);
  out.sr_sacks_sent = sb.get(engine::Counter::kSrSacksSent);
  out.seq_naks = sb.get(engine::Counter::kSeqErrNakSent);
  // A SEND (an SR SEND with selective repeat: B places it only with the index A numbered it
  // with, from the base both derived).
  r.post_b_recv();
  std::memset(r.buf_a.bytes.data(), 0x5C, 100);
  r.send_a(100);
  EXPECT_TRUE(r.run([&] { return r.lb.b().poll_cq(r.ep_b.rcq, 1, &wc) == 1; }));
  out.send_ok =
      wc.status == engine::WcStatus::kSuccess && wc.byte_len == 100 && r.buf_b.bytes[99] == 0x5C;
  EXPECT_EQ(sb.get(engine::Counter::kSrForgedDropped), 0u);
  return out;
}

TEST(CmLoopback, SelectiveRepeatWhenOfferedAndAccepted) {
  const CmSrRun k = write_over_cm(true, true);
  EXPECT_EQ(k.remote_ece_b, kOffer);
  EXPECT_EQ(k.remote_ece_a, kAccept);
  EXPECT_TRUE(k.sr_qp_a);
  EXPECT_TRUE(k.sr_qp_b);
  EXPECT_EQ(k.sr_connections, 2u);
  EXPECT_TRUE(k.data_ok);
  EXPECT_EQ(k.sr_sacks_sent, 1u);
  EXPECT_EQ(k.sr_retransmits, 1u) << "only the lost packet again";
  EXPECT_EQ(k.retransmitted, 1u);
  EXPECT_EQ(k.seq_naks, 0u);
  // The message index bases: each end's tx is the other's rx, both from the comm IDs.
  ASSERT_TRUE(k.base_a && k.base_b);
  EXPECT_EQ(k.base_a->tx, k.base_b->rx);
  EXPECT_EQ(k.base_a->rx, k.base_b->tx);
  EXPECT_EQ(k.base_a->tx, k.derived_a.tx);
  EXPECT_EQ(k.base_a->rx, k.derived_a.rx);
  EXPECT_NE(k.base_a->tx, k.base_a->rx) << "each direction its own";
  EXPECT_TRUE(k.send_ok);
}

// sr_index_base: each end's tx is the other's rx, and every comm ID bit moves both bases.
TEST(CmLoopback, SrIndexBaseFromTheCommIds) {
  const engine::SrIndexBase a = sr_index_base(0x12345678, 0x9ABCDEF0);
  const engine::SrIndexBase b = sr_index_base(0x9ABCDEF0, 0x12345678);
  EXPECT_EQ(a.tx, b.rx);
  EXPECT_EQ(a.rx, b.tx);
  EXPECT_NE(a.tx, a.rx);
  for (int bit = 0; bit < 64; ++bit) {
    const std::uint32_t l = 0x12345678 ^ (bit < 32 ? 1u << bit : 0);
    const std::uint32_t r = 0x9ABCDEF0 ^ (bit >= 32 ? 1u << (bit - 32) : 0);
    const engine::SrIndexBase c = sr_index_base(l, r);
    EXPECT_NE(c.tx, a.tx) << bit;
    EXPECT_NE(c.rx, a.rx) << bit;
  }
}

// roced's `transport: selective_repeat: true` sets EngineConfig::selective_repeat: the agents on
// that engine allow it, and the owners that ask get it.
TEST(CmLoopback, SelectiveRepeatAllowedByTheEngineConfig) {
  const CmSrRun k = write_over_cm(false, false, true);
  EXPECT_TRUE(k.sr_qp_a);
  EXPECT_TRUE(k.sr_qp_b);
  EXPECT_TRUE(k.data_ok);
  EXPECT_EQ(k.sr_retransmits, 1u);
  EXPECT_EQ(k.seq_naks, 0u);
  EXPECT_TRUE(k.send_ok);
}

// Allowed is not asked for (finding 1 of review 18): an owner that gives no ECE gets none on
// the wire and go-back-N; a passive side that echoes the offer (rdma-core's passive side
// returns the REQ's vendor, a program may copy its options too) turns nothing on (finding 2).
TEST(CmLoopback, GoBackNUnlessOfferedAndAcceptedByTheOwners) {
  struct Case {
    bool sr_a, sr_b;
    Ece ece_a, ece_b;
  };
  const Case cases[] = {
      {true, false, kOffer, kAccept},   // B not allowed
      {false, true, kOffer, kAccept},   // A not allowed: its REQ offers no SR
      {false, false, kOffer, kAccept},  // neither allowed
      {true, true, {}, kAccept},        // A's owner did not ask: no ECE at all
      {true, true, kOffer, {}},         // B's owner did not ask
      {true, true, kOffer, kOffer},     // B echoes the offer
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "A " << c.sr_a << " " << std::hex << c.ece_a.options
                                      << ", B " << c.sr_b << " " << c.ece_b.options);
    const CmSrRun k = write_over_cm(c.sr_a, c.sr_b, false, c.ece_a, c.ece_b);
    EXPECT_FALSE(k.sr_qp_a);
    EXPECT_FALSE(k.sr_qp_b);
    EXPECT_EQ(k.sr_connections, 0u);
    EXPECT_TRUE(k.data_ok);
    EXPECT_EQ(k.sr_sacks_sent, 0u);
    EXPECT_EQ(k.sr_retransmits, 0u);
    EXPECT_EQ(k.seq_naks, 1u);
    EXPECT_GE(k.retransmitted, 10u) << "go-back-N: the lost packet and those after it";
    EXPECT_FALSE(k.base_a);
    EXPECT_FALSE(k.base_b);
    EXPECT_TRUE(k.send_ok);
  }
}

TEST(CmLoopback, NoListenerIsRejected) {
  Rig r;
  ASSERT_TRUE(r.connect());
  ASSERT_TRUE(r.run([&] { return Rig::count(r.ev_a, CmEventType::kRejected) == 1; }));
  EXPECT_EQ(r.find(r.ev_a, CmEventType::kRejected)->reason, RejReason::kInvalidServiceId);
  EXPECT_EQ(r.a.cm().size(), 0u);
  EXPECT_TRUE(r.ev_b.empty());
}

TEST(CmLoopback, LostReqIsRetransmitted) {
  LoopbackOptions o;
  o.a2b.drop_nth = 1;  // the first REQ
  CmConfig c;
  c.packet_life_time = 8;      // 1 ms
  c.cm_response_timeout = 10;  // 4 ms: the REQ is repeated after 6 ms
  Rig r(o, c);
  r.b.cm().listen(kSid);
  ASSERT_TRUE(r.connect());
  ASSERT_TRUE(r.run([&] {
    return Rig::count(r.ev_a, CmEventType::kEstablished) == 1 &&
           Rig::count(r.ev_b, CmEventType::kEstablished) == 1;
  }));
  EXPECT_EQ(r.a.cm().stats().retransmits, 1u);
  EXPECT_EQ(r.lb.injector(0).stats().dropped, 1u);
}

TEST(CmLoopback, LostRtuFirstDataEstablishes) {
  LoopbackOptions o;
  o.a2b.drop_nth = 2;  // REQ goes through, the RTU is lost
  Rig r(o);
  r.b.cm().listen(kSid);
  ASSERT_TRUE(r.connect());
  ASSERT_TRUE(r.run([&] { return Rig::count(r.ev_a, CmEventType::kEstablished) == 1; }));
  const ConnId ib = r.find(r.ev_b, CmEventType::kConnectRequest)->id;
  ASSERT_TRUE(r.run([&] { return r.lb.injector(0).stats().dropped == 1; }));
  for (const WireRecord& w : r.lb.records()) {
    if (w.dropped) {
      EXPECT_EQ(w.dest_qp, 1u);  // a MAD: the RTU
    }
  }
  EXPECT_EQ(r.b.cm().state(ib), ConnState::kRepSent);
  r.send_a(64);
  // The first receive completion is the passive side's COMM_EST: tell the CM.
  ASSERT_TRUE(r.run([&] {
    engine::Wc wc;
    if (r.lb.b().poll_cq(r.ep_b.rcq, 1, &wc) == 1) {
      EXPECT_EQ(wc.status, engine::WcStatus::kSuccess);
      EXPECT_EQ(r.b.cm().notify_established(ib), CmStatus::kOk);
    }
    return Rig::count(r.ev_b, CmEventType::kEstablished) == 1;
  }));
  EXPECT_EQ(r.b.cm().state(ib), ConnState::kEstablished);
  EXPECT_EQ(r.b.cm().stats().retransmits, 0u);  // no REP had to be repeated
  EXPECT_FALSE(r.b.next_deadline_ns());
}

// A QP destroyed while its connection is up (the application gave up on a peer that vanished,
// or tears down without rdma_disconnect): release() disconnects it and drops the binding, so
// nothing the CM does later reaches the QP the engine creates in the same slot, with the same
// QPN.
TEST(CmLoopback, ReleasedQpIsDisconnectedAndForgotten) {
  Rig r;
  r.b.cm().listen(kSid);
  const std::optional<ConnId> ia = r.connect();
  ASSERT_TRUE(ia);
  ASSERT_TRUE(r.run([&] {
    return Rig::count(r.ev_a, CmEventType::kEstablished) == 1 &&
           Rig::count(r.ev_b, CmEventType::kEstablished) == 1;
  }));
  const ConnId ib = r.find(r.ev_b, CmEventType::kConnectRequest)->id;
  ASSERT_EQ(r.b.qp_of(ib), r.ep_b.qp);
  const std::uint32_t old_qpn = r.ep_b.qp->qpn;
  const std::size_t qps_before = r.lb.b().qp_count();

  EXPECT_EQ(r.b.release(r.ep_b.qp), 1u);
  EXPECT_EQ(r.ep_b.qp->state, QpState::kErr);  // moved while still bound
  EXPECT_EQ(r.b.cm().state(ib), ConnState::kDreqSent);
  EXPECT_EQ(r.b.qp_of(ib), nullptr);
  EXPECT_EQ(r.b.bound(), 0u);
  EXPECT_EQ(r.b.release(r.ep_b.qp), 0u);
  ASSERT_EQ(r.lb.b().destroy_qp(r.ep_b.qp), engine::kOk);
  EXPECT_EQ(r.lb.b().qp_count(), qps_before - 1);

  // A new QP with the old QPN, in INIT. The engine hands QPNs out cyclically, so the number
  // comes back only after a full cycle: go round it (the hazard is the same).
  engine::Qp* fresh = nullptr;
  std::vector<engine::Qp*> others;
  for (;;) {
    fresh = r.lb.b().create_qp(r.ep_b.pd, engine::QpType::kRc, r.ep_b.scq, r.ep_b.rcq,
                               engine::QpCap{16, 16, 1, 1, 0});
    ASSERT_NE(fresh, nullptr);
    if (fresh->qpn == old_qpn) break;
    others.push_back(fresh);
  }
  for (engine::Qp* q : others) ASSERT_EQ(r.lb.b().destroy_qp(q), engine::kOk);
  engine::QpAttr init;
  init.qp_state = QpState::kInit;
  ASSERT_EQ(r.lb.b().modify_qp(
                fresh, init,
                engine::kQpState | engine::kQpPkeyIndex | engine::kQpPort | engine::kQpAccessFlags),
            engine::kOk);
  r.ep_b.qp = fresh;

  // The peer hears the DREQ and answers; both ends go through timewait. A DREQ of the peer's
  // crossing ours, or a repeated one, must not touch the fresh QP.
  ASSERT_EQ(r.a.cm().disconnect(*ia), CmStatus::kOk);
  ASSERT_TRUE(r.run([&] {
    return Rig::count(r.ev_a, CmEventType::kTimewaitExit) == 1 &&
           Rig::count(r.ev_b, CmEventType::kTimewaitExit) == 1;
  }));
  EXPECT_EQ(Rig::count(r.ev_b, CmEventType::kDisconnected), 1u);
  EXPECT_EQ(fresh->state, QpState::kInit);
  EXPECT_EQ(r.b.cm().size(), 0u);
  EXPECT_EQ(r.lb.b().qp_count(), qps_before);
}

}  // namespace
}  // namespace roce::test
