// State-machine tests of the CM: two Cm instances, an active node A and a passive node B, joined
// by a hand-driven wire. Each test decides which queued MAD is delivered, dropped or repeated,
// and moves a fake clock, so loss, duplication and timeouts are exact.
#include "controlplane/cm/cm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <vector>

namespace roce::cm {
namespace {

using std::chrono::milliseconds;

constexpr std::uint64_t kSid = service_id(PortSpace::kTcp, 7174);
constexpr std::uint64_t kUdpSid = service_id(PortSpace::kUdp, 7174);
constexpr Ipv4Addr kIpA{0xC0000201};
constexpr Ipv4Addr kIpB{0xC0000202};

// Defaults: REQ every 2 x 2^(16-8) + 2^(20-8) ms; REP every 2^(20-8) ms; 15 retries.
constexpr milliseconds kReqInterval{2 * 256 + 4096};
constexpr milliseconds kRepInterval{4096};

struct Sent {
  MadBuf bytes;
  MadAddr to;
  AttrId attr() const { return decode(bytes).hdr.attr_id; }
  std::uint64_t tid() const { return decode(bytes).hdr.tid; }
  template <class T>
  T as() const {
    const DecodedMad d = decode(bytes);
    EXPECT_TRUE(d.ok());
    return std::get<T>(d.msg);
  }
};

struct Mod {
  ConnId id;
  QpTransition t;
  QpAttrs qp;
};

class Node {
 public:
  Node(std::uint64_t guid, Ipv4Addr ip, const TimePoint* clock, std::uint32_t seed)
      : addr{wire::ipv4_mapped(ip), Qpn(Qpn::kGsi)}, cm(config(guid, seed), callbacks(clock)) {}

  MadAddr addr;
  std::deque<Sent> out;  // MADs on the wire, oldest first
  std::vector<CmEvent> events;
  std::vector<Mod> mods;
  bool fail_modify = false;
  std::function<void(Cm&, const CmEvent&)> on_event;  // optional reaction
  Cm cm;

  std::size_t count(CmEventType t) const {
    return static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(), [t](const CmEvent& e) { return e.type == t; }));
  }
  const CmEvent& last(CmEventType t) const {
    for (auto it = events.rbegin(); it != events.rend(); ++it)
      if (it->type == t) return *it;
    ADD_FAILURE() << "no event " << to_string(t);
    return events.front();
  }
  Sent pop() {
    EXPECT_FALSE(out.empty());
    Sent s = out.front();
    out.pop_front();
    return s;
  }

 private:
  static CmConfig config(std::uint64_t guid, std::uint32_t seed) {
    CmConfig c;
    c.ca_guid = guid;
    c.hi_tid = static_cast<std::uint32_t>(guid);
    c.seed = seed;
    c.timewait = milliseconds(1000);
    return c;
  }
  CmCallbacks callbacks(const TimePoint* clock) {
    CmCallbacks cb;
    cb.send_mad = [this](std::span<const std::uint8_t> m, const MadAddr& to) {
      Sent s;
      std::copy(m.begin(), m.end(), s.bytes.begin());
      s.to = to;
      out.push_back(s);
    };
    cb.on_event = [this](const CmEvent& e) {
      events.push_back(e);
      if (on_event) on_event(cm, e);
    };
    cb.modify_qp = [this](ConnId id, QpTransition t, const QpAttrs& qp) {
      mods.push_back({id, t, qp});
      return !fail_modify || t == QpTransition::kError;
    };
    cb.now = [clock] { return *clock; };
    return cb;
  }
};

class CmTest : public ::testing::Test {
 protected:
  TimePoint now_{milliseconds(1'000'000)};
  Node a_{0x0A0A0A0A0A0A0A0Aull, kIpA, &now_, 11};
  Node b_{0x0B0B0B0B0B0B0B0Bull, kIpB, &now_, 22};

  void SetUp() override { b_.cm.listen(kSid); }

  // Delivers the oldest MAD `from` has queued to `to`; returns its attribute.
  AttrId deliver(Node& from, Node& to) {
    const Sent s = from.pop();
    EXPECT_EQ(s.to, to.addr);
    EXPECT_EQ(to.cm.on_mad(s.bytes, from.addr), MadError::kOk);
    return s.attr();
  }
  AttrId drop(Node& from) { return from.pop().attr(); }
  void advance(Duration d) {
    now_ += d;
    a_.cm.on_timer(now_);
    b_.cm.on_timer(now_);
  }

  ConnectParams params(Qpn qpn = Qpn(0x11), Psn psn = Psn(0xABCDEF)) {
    ConnectParams p;
    p.peer = b_.addr;
    p.service_id = kSid;
    p.qpn = qpn;
    p.starting_psn = psn;
    p.responder_resources = 4;
    p.initiator_depth = 2;
    p.path.local_gid = a_.addr.gid;
    p.path.remote_gid = b_.addr.gid;
    p.path.hop_limit = 64;
    p.path.flow_label = 0x12345;
    p.cma = CmaHeader::ipv4(kIpA, 0xD431, kIpB);
    p.private_data = {1, 2, 3};
    return p;
  }
  AcceptParams accept_params() {
    AcceptParams p;
    p.qpn = Qpn(0x22);
    p.starting_psn = Psn(0x123456);
    p.responder_resources = 8;
    p.initiator_depth = 8;
    p.rnr_retry_count = 6;
    p.private_data = {9, 8, 7};
    return p;
  }

  // REQ -> connect request -> accept -> REP -> RTU: returns (active id, passive id).
  std::pair<ConnId, ConnId> establish() {
    const ConnId ia = *a_.cm.connect(params());
    EXPECT_EQ(deliver(a_, b_), AttrId::kReq);
    const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
    EXPECT_EQ(b_.cm.accept(ib, accept_params()), CmStatus::kOk);
    EXPECT_EQ(deliver(b_, a_), AttrId::kRep);
    EXPECT_EQ(deliver(a_, b_), AttrId::kRtu);
    EXPECT_EQ(a_.cm.state(ia), ConnState::kEstablished);
    EXPECT_EQ(b_.cm.state(ib), ConnState::kEstablished);
    return {ia, ib};
  }
};

// ---- happy paths -------------------------------------------------------------------------------

TEST_F(CmTest, ConnectAcceptDisconnect) {
  const ConnId ia = *a_.cm.connect(params());
  EXPECT_EQ(a_.cm.state(ia), ConnState::kReqSent);
  const Sent req_mad = a_.out.front();
  const ReqMsg req = req_mad.as<ReqMsg>();
  EXPECT_EQ(req.local_comm_id, ia.v);
  EXPECT_EQ(req.service_id, 0x0000000001061C06ull);
  EXPECT_EQ(req.local_qpn, Qpn(0x11));
  EXPECT_EQ(req.starting_psn, Psn(0xABCDEF));
  EXPECT_EQ(req.responder_resources, 4);
  EXPECT_EQ(req.initiator_depth, 2);
  EXPECT_EQ(req.remote_cm_response_timeout, 20);
  EXPECT_EQ(req.local_cm_response_timeout, 20);
  EXPECT_EQ(req.max_cm_retries, 15);
  EXPECT_EQ(req.retry_count, 7);
  EXPECT_EQ(req.rnr_retry_count, 7);
  EXPECT_TRUE(req.e2e_flow_control);
  EXPECT_EQ(req.path_mtu, 3);
  EXPECT_EQ(req.primary.local_lid, 0xFFFF);
  EXPECT_FALSE(req.primary.subnet_local);
  EXPECT_EQ(req.primary.local_ack_timeout, ack_timeout(15, 16));
  EXPECT_EQ(req.primary.local_gid, a_.addr.gid);
  EXPECT_EQ(req.primary.remote_gid, b_.addr.gid);
  EXPECT_EQ(req_mad.tid() >> 32, 0x0A0A0A0Au);  // our hi_tid

  EXPECT_EQ(deliver(a_, b_), AttrId::kReq);
  ASSERT_EQ(b_.count(CmEventType::kConnectRequest), 1u);
  const CmEvent& creq = b_.last(CmEventType::kConnectRequest);
  const ConnId ib = creq.id;
  EXPECT_EQ(creq.service_id, kSid);
  ASSERT_TRUE(creq.cma);
  EXPECT_EQ(creq.cma->src_port, 0xD431);
  EXPECT_EQ(creq.cma->src_ipv4(), kIpA);
  EXPECT_EQ(creq.cma->dst_ipv4(), kIpB);
  ASSERT_EQ(creq.private_data.size(), kReqUserPrivateSize);
  EXPECT_EQ(creq.private_data[0], 1);
  EXPECT_EQ(creq.private_data[2], 3);
  EXPECT_EQ(creq.peer, a_.addr);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kReqRcvd);
  EXPECT_TRUE(b_.out.empty());  // nothing until the application answers

  ASSERT_EQ(b_.cm.accept(ib, accept_params()), CmStatus::kOk);
  // The passive QP is in RTS before the REP leaves.
  ASSERT_EQ(b_.mods.size(), 2u);
  EXPECT_EQ(b_.mods[0].t, QpTransition::kRtr);
  EXPECT_EQ(b_.mods[1].t, QpTransition::kRts);
  const QpAttrs& qb = b_.mods[1].qp;
  EXPECT_EQ(qb.local_qpn, Qpn(0x22));
  EXPECT_EQ(qb.remote_qpn, Qpn(0x11));
  // Starting PSNs name the sender's receive PSN (Linux cm.c).
  EXPECT_EQ(qb.sq_psn, Psn(0xABCDEF));
  EXPECT_EQ(qb.rq_psn, Psn(0x123456));
  EXPECT_EQ(qb.path_mtu, 3);
  EXPECT_EQ(qb.retry_cnt, 7);
  EXPECT_EQ(qb.rnr_retry, 7);  // the REQ's RNR Retry Count
  EXPECT_EQ(qb.min_rnr_timer, 0);
  EXPECT_EQ(qb.timeout, req.primary.local_ack_timeout);
  EXPECT_EQ(qb.max_dest_rd_atomic, 2);  // min(our 8, their initiator depth 2)
  EXPECT_EQ(qb.max_rd_atomic, 4);       // min(our 8, their responder resources 4)
  EXPECT_EQ(qb.local_gid, b_.addr.gid);
  EXPECT_EQ(qb.remote_gid, a_.addr.gid);
  EXPECT_EQ(qb.flow_label, 0x12345u);

  const Sent rep_mad = b_.out.front();
  const RepMsg rep = rep_mad.as<RepMsg>();
  EXPECT_EQ(rep_mad.tid(), req_mad.tid());  // REP reuses the REQ's TID
  EXPECT_EQ(rep.local_comm_id, ib.v);
  EXPECT_EQ(rep.remote_comm_id, ia.v);
  EXPECT_EQ(rep.local_qpn, Qpn(0x22));
  EXPECT_EQ(rep.starting_psn, Psn(0x123456));
  EXPECT_EQ(rep.responder_resources, 2);
  EXPECT_EQ(rep.initiator_depth, 4);
  EXPECT_EQ(rep.target_ack_delay, 15);
  EXPECT_EQ(rep.rnr_retry_count, 6);
  EXPECT_TRUE(rep.e2e_flow_control);
  EXPECT_EQ(rep.local_ca_guid, 0x0B0B0B0B0B0B0B0Bull);
  EXPECT_EQ(rep.private_data[0], 9);

  EXPECT_EQ(deliver(b_, a_), AttrId::kRep);
  ASSERT_EQ(a_.mods.size(), 2u);
  EXPECT_EQ(a_.mods[0].t, QpTransition::kRtr);
  EXPECT_EQ(a_.mods[1].t, QpTransition::kRts);
  const CmEvent& est = a_.last(CmEventType::kEstablished);
  EXPECT_EQ(est.id, ia);
  const QpAttrs& qa = est.qp;
  EXPECT_EQ(qa.local_qpn, Qpn(0x11));
  EXPECT_EQ(qa.remote_qpn, Qpn(0x22));
  EXPECT_EQ(qa.sq_psn, Psn(0x123456));
  EXPECT_EQ(qa.rq_psn, Psn(0xABCDEF));
  EXPECT_EQ(qa.max_dest_rd_atomic, 4);  // = REP initiator depth
  EXPECT_EQ(qa.max_rd_atomic, 2);       // = REP responder resources
  EXPECT_EQ(qa.rnr_retry, 6);           // the REP's RNR Retry Count
  EXPECT_EQ(qa.retry_cnt, 7);
  EXPECT_EQ(qa.min_rnr_timer, 0);
  EXPECT_EQ(qa.timeout, ack_timeout(15, 16));
  EXPECT_EQ(qa, a_.mods[1].qp);
  EXPECT_EQ(est.private_data[0], 9);
  // Each side's atomics fit the other's resources.
  EXPECT_LE(qa.max_rd_atomic, qb.max_dest_rd_atomic);
  EXPECT_LE(qb.max_rd_atomic, qa.max_dest_rd_atomic);

  const Sent rtu = a_.out.front();
  EXPECT_EQ(rtu.tid(), req_mad.tid());  // the RTU reuses the REQ's TID too
  EXPECT_EQ(rtu.as<RtuMsg>().local_comm_id, ia.v);
  EXPECT_EQ(rtu.as<RtuMsg>().remote_comm_id, ib.v);
  EXPECT_EQ(deliver(a_, b_), AttrId::kRtu);
  EXPECT_EQ(b_.count(CmEventType::kEstablished), 1u);
  EXPECT_FALSE(a_.cm.next_deadline());
  EXPECT_FALSE(b_.cm.next_deadline());

  // Disconnect from the active side.
  const std::uint8_t bye[] = {0x42};
  ASSERT_EQ(a_.cm.disconnect(ia, bye), CmStatus::kOk);
  EXPECT_EQ(a_.mods.back().t, QpTransition::kError);
  const Sent dreq = a_.out.front();
  EXPECT_NE(dreq.tid(), req_mad.tid());  // a fresh transaction
  EXPECT_EQ(dreq.as<DreqMsg>().remote_qpn, Qpn(0x22));
  EXPECT_EQ(deliver(a_, b_), AttrId::kDreq);
  const CmEvent& disc_b = b_.last(CmEventType::kDisconnected);
  EXPECT_TRUE(disc_b.remote);
  EXPECT_EQ(disc_b.private_data[0], 0x42);
  EXPECT_EQ(b_.mods.back().t, QpTransition::kError);
  EXPECT_EQ(b_.out.front().tid(), dreq.tid());  // the DREP echoes the DREQ's TID
  EXPECT_EQ(deliver(b_, a_), AttrId::kDrep);
  EXPECT_FALSE(a_.last(CmEventType::kDisconnected).remote);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kTimewait);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kTimewait);

  advance(milliseconds(999));
  EXPECT_EQ(a_.cm.size(), 1u);
  advance(milliseconds(1));
  EXPECT_EQ(a_.count(CmEventType::kTimewaitExit), 1u);
  EXPECT_EQ(b_.count(CmEventType::kTimewaitExit), 1u);
  EXPECT_EQ(a_.cm.size(), 0u);
  EXPECT_EQ(b_.cm.size(), 0u);
  EXPECT_TRUE(a_.out.empty());
  EXPECT_TRUE(b_.out.empty());
}

// ECE (Enhanced Connection Establishment): the vendor ID in the REQ/REP, the options in the MAD
// header's AttributeModifier (bytes 20-23), as the kernel CM puts them. Without ECE both stay 0,
// as before (and as rxe sends); a REP carries ECE only to a REQ of the same vendor, with the
// passive side's own options (rdma-core's ucma_copy_ece_param_to_kern_rep).
TEST_F(CmTest, EceIsCarriedOnlyBetweenTheSameVendor) {
  const Ece offer{kEceVendorId, kEceSignature | kEceSrOffer};
  const Ece accept{kEceVendorId, kEceSignature | kEceSrAccept};
  auto attr_mod = [](const Sent& s) { return decode(s.bytes).hdr.attr_mod; };
  struct Case {
    Ece a, b;
    Ece req, rep;  ///< on the wire
    bool sr;       ///< ece_sr_on for both QPs
  };
  const Case cases[] = {
      {{}, {}, {}, {}, false},                                // neither: nothing changes
      {offer, {}, offer, {}, false},                          // the passive side has none
      {{}, accept, {}, {}, false},                            // the active side has none (rxe)
      {offer, accept, offer, accept, true},                   // offered and accepted
      {offer, offer, offer, offer, false},                    // an echo of the offer
      {{0x0015B3, 0x7}, accept, {0x0015B3, 0x7}, {}, false},  // another vendor's REQ
      {offer, {kEceVendorId, kEceSignature}, offer, {kEceVendorId, kEceSignature}, false},
  };
  std::uint32_t qpn = 0x100;  // a new QP each time: the last one's connection is in timewait
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message() << std::hex << k.a.options << "/" << k.b.options);
    ConnectParams p = params(Qpn(++qpn));
    p.ece = k.a;
    const ConnId ia = *a_.cm.connect(p);
    const Sent req = a_.out.front();
    EXPECT_EQ(req.as<ReqMsg>().vendor_id, k.req.vendor_id);
    EXPECT_EQ(attr_mod(req), k.req.options);
    EXPECT_EQ(req.bytes[kMadHeaderSize + 5], k.req.vendor_id >> 16);
    deliver(a_, b_);
    const CmEvent& creq = b_.last(CmEventType::kConnectRequest);
    EXPECT_EQ(creq.qp.remote_ece, k.req);
    AcceptParams ap = accept_params();
    ap.qpn = Qpn(qpn + 0x1000);
    ap.ece = k.b;
    ASSERT_EQ(b_.cm.accept(creq.id, ap), CmStatus::kOk);
    const Sent rep = b_.out.front();
    EXPECT_EQ(rep.as<RepMsg>().vendor_id, k.rep.vendor_id);
    EXPECT_EQ(attr_mod(rep), k.rep.options);
    const QpAttrs& qb = b_.mods.back().qp;
    EXPECT_EQ(qb.local_ece, k.rep);
    EXPECT_EQ(ece_sr_on(qb.local_ece, qb.remote_ece), k.sr);
    deliver(b_, a_);
    EXPECT_EQ(a_.last(CmEventType::kEstablished).qp.remote_ece, k.rep);
    const QpAttrs& qa = a_.mods.back().qp;
    EXPECT_EQ(qa.local_ece, k.req);
    EXPECT_EQ(ece_sr_on(qa.local_ece, qa.remote_ece), k.sr);
    deliver(a_, b_);  // RTU
    ASSERT_EQ(a_.cm.disconnect(ia), CmStatus::kOk);
    deliver(a_, b_);
    deliver(b_, a_);
  }
}

// The selective-repeat negotiation (cm.h): the passive side's answer and whether each side turns
// it on, for an offer, an acceptance, an echo, no ECE and garbage.
TEST(EceNegotiation, OnlyAnOfferAndADistinctAcceptanceTurnItOn) {
  const Ece offer{kEceVendorId, kEceSignature | kEceSrOffer};
  const Ece accept{kEceVendorId, kEceSignature | kEceSrAccept};
  const Ece plain{kEceVendorId, kEceSignature};
  // The passive side: accepts only an offer it wants and is allowed.
  EXPECT_EQ(ece_answer(offer, accept, true), accept);
  EXPECT_EQ(ece_answer(offer, accept, false), plain) << "not allowed: ours, without the bit";
  EXPECT_EQ(ece_answer(offer, plain, true), plain) << "the program did not accept";
  EXPECT_EQ(ece_answer(offer, offer, true), plain) << "an echo of the offer accepts nothing";
  EXPECT_EQ(ece_answer(plain, accept, true), plain) << "nothing offered";
  EXPECT_EQ(ece_answer({}, accept, true), Ece{}) << "no ECE in the REQ (rxe): none in the REP";
  EXPECT_EQ(ece_answer(offer, {}, true), Ece{}) << "the program has none: none";
  const Ece other{0x0015B3, kEceSignature | kEceSrOffer};
  EXPECT_EQ(ece_answer(other, accept, true), Ece{}) << "another vendor: none";
  EXPECT_EQ(ece_answer(other, Ece{0x0015B3, 0x5}, true), (Ece{0x0015B3, 0x5}))
      << "another vendor's options are passed through untouched";
  const Ece garbage_sig{kEceVendorId, 0x12340003};
  EXPECT_EQ(ece_answer(garbage_sig, accept, true), plain) << "no signature: no offer";

  // Either side: on only for an offer answered by an acceptance.
  EXPECT_TRUE(ece_sr_on(offer, accept));  // active
  EXPECT_TRUE(ece_sr_on(accept, offer));  // passive
  EXPECT_FALSE(ece_sr_on(offer, offer)) << "rdma-core's passive side echoing the REQ";
  EXPECT_FALSE(ece_sr_on(offer, plain));
  EXPECT_FALSE(ece_sr_on(offer, Ece{})) << "rxe, an RNIC: no ECE of ours";
  EXPECT_FALSE(ece_sr_on(offer, (Ece{kEceVendorId, 0})))
      << "our vendor, options 0 (rxe via librdmacm)";
  EXPECT_FALSE(ece_sr_on(offer, (Ece{0x0015B3, kEceSignature | kEceSrAccept}))) << "another vendor";
  EXPECT_FALSE(ece_sr_on(offer, (Ece{kEceVendorId, 0x12340000 | kEceSrAccept}))) << "no signature";
  EXPECT_FALSE(ece_sr_on(plain, accept)) << "accepted what was never offered";
  EXPECT_FALSE(ece_sr_on(Ece{}, accept));
  EXPECT_FALSE(ece_sr_on(accept, accept)) << "both accept, nobody offered";
  EXPECT_FALSE(ece_sr_on(Ece{}, Ece{}));
}

TEST_F(CmTest, AcceptFromTheEventCallbackAndPassiveDisconnect) {
  b_.on_event = [this](Cm& cm, const CmEvent& e) {
    if (e.type == CmEventType::kConnectRequest) {
      EXPECT_EQ(cm.accept(e.id, accept_params()), CmStatus::kOk);
    }
  };
  const ConnId ia = *a_.cm.connect(params());
  deliver(a_, b_);
  EXPECT_EQ(deliver(b_, a_), AttrId::kRep);
  EXPECT_EQ(deliver(a_, b_), AttrId::kRtu);
  const ConnId ib = b_.last(CmEventType::kEstablished).id;
  ASSERT_EQ(b_.cm.disconnect(ib), CmStatus::kOk);
  EXPECT_EQ(deliver(b_, a_), AttrId::kDreq);
  EXPECT_TRUE(a_.last(CmEventType::kDisconnected).remote);
  EXPECT_EQ(deliver(a_, b_), AttrId::kDrep);
  EXPECT_FALSE(b_.last(CmEventType::kDisconnected).remote);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kTimewait);
}

TEST_F(CmTest, ApiMisuseIsRefused) {
  EXPECT_EQ(b_.cm.accept(ConnId{12345}, accept_params()), CmStatus::kNoSuchConn);
  ConnectParams p = params();
  p.private_data.assign(57, 0);  // 56 bytes fit after the cma header
  EXPECT_FALSE(a_.cm.connect(p));
  p.path_mtu = 6;
  p.private_data.clear();
  EXPECT_FALSE(a_.cm.connect(p));
  const ConnId ia = *a_.cm.connect(params());
  EXPECT_EQ(a_.cm.accept(ia, accept_params()), CmStatus::kBadState);
  EXPECT_EQ(a_.cm.disconnect(ia), CmStatus::kBadState);
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  AcceptParams ap = accept_params();
  ap.private_data.assign(197, 0);
  EXPECT_EQ(b_.cm.accept(ib, ap), CmStatus::kPrivateDataTooLong);
  EXPECT_EQ(b_.cm.notify_established(ib), CmStatus::kBadState);
}

// ---- loss and duplication ----------------------------------------------------------------------

TEST_F(CmTest, LostReqIsRetransmittedUnchanged) {
  const ConnId ia = *a_.cm.connect(params());
  const Sent first = a_.pop();  // lost
  EXPECT_EQ(a_.cm.next_deadline(), now_ + kReqInterval);
  advance(kReqInterval - milliseconds(1));
  EXPECT_TRUE(a_.out.empty());
  advance(milliseconds(1));
  ASSERT_EQ(a_.out.size(), 1u);
  EXPECT_EQ(a_.out.front().bytes, first.bytes);  // same TID, same comm ID
  EXPECT_EQ(a_.cm.stats().retransmits, 1u);
  deliver(a_, b_);
  b_.cm.accept(b_.last(CmEventType::kConnectRequest).id, accept_params());
  deliver(b_, a_);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kEstablished);
}

TEST_F(CmTest, ReqRetriesExhaustedIsUnreachable) {
  const ConnId ia = *a_.cm.connect(params());
  drop(a_);
  for (int i = 0; i < 15; ++i) {
    advance(kReqInterval);
    ASSERT_EQ(drop(a_), AttrId::kReq);
  }
  EXPECT_EQ(a_.count(CmEventType::kUnreachable), 0u);
  advance(kReqInterval);
  EXPECT_TRUE(a_.out.empty());
  EXPECT_EQ(a_.count(CmEventType::kUnreachable), 1u);
  EXPECT_EQ(a_.last(CmEventType::kUnreachable).id, ia);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kIdle);
  EXPECT_FALSE(a_.cm.next_deadline());
}

TEST_F(CmTest, LostRepIsRepeatedByTimerAndOnDuplicateReq) {
  const ConnId ia = *a_.cm.connect(params());
  const Sent req = a_.out.front();
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  b_.cm.accept(ib, accept_params());
  const Sent rep = b_.pop();  // lost
  // The passive side repeats its REP after 2^(REQ local CM response timeout - 8) ms.
  advance(kRepInterval);
  ASSERT_EQ(b_.out.size(), 1u);
  EXPECT_EQ(b_.out.front().bytes, rep.bytes);
  drop(b_);  // lost again
  // A duplicate REQ while the REP is outstanding: the REP is repeated at once.
  ASSERT_EQ(b_.cm.on_mad(req.bytes, a_.addr), MadError::kOk);
  ASSERT_EQ(b_.out.size(), 1u);
  EXPECT_EQ(b_.out.front().bytes, rep.bytes);
  EXPECT_EQ(b_.count(CmEventType::kConnectRequest), 1u);  // no second connection
  EXPECT_EQ(b_.cm.size(), 1u);
  deliver(b_, a_);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kEstablished);
  deliver(a_, b_);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kEstablished);
}

TEST_F(CmTest, DuplicateReqBeforeAcceptGetsMra) {
  const ConnId ia = *a_.cm.connect(params());
  const Sent req = a_.out.front();
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  now_ += kReqInterval;
  a_.cm.on_timer(now_);
  EXPECT_EQ(deliver(a_, b_), AttrId::kReq);  // the retransmission
  ASSERT_EQ(b_.out.size(), 1u);
  const MraMsg mra = b_.out.front().as<MraMsg>();
  EXPECT_EQ(b_.out.front().tid(), req.tid());
  EXPECT_EQ(mra.message_mraed, MsgKind::kReq);
  EXPECT_EQ(mra.service_timeout, 24);
  EXPECT_EQ(mra.local_comm_id, ib.v);
  EXPECT_EQ(mra.remote_comm_id, ia.v);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kMraReqSent);
  EXPECT_EQ(deliver(b_, a_), AttrId::kMra);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kMraReqRcvd);
  // The active side now waits for the service timeout (2^(24-8) ms) plus a round trip.
  EXPECT_EQ(a_.cm.next_deadline(), now_ + milliseconds(65536 + 512));
  advance(milliseconds(60000));
  EXPECT_TRUE(a_.out.empty());
  ASSERT_EQ(b_.cm.accept(ib, accept_params()), CmStatus::kOk);
  deliver(b_, a_);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kEstablished);
}

TEST_F(CmTest, LostRtuIsRepeatedOnDuplicateRep) {
  const ConnId ia = *a_.cm.connect(params());
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  b_.cm.accept(ib, accept_params());
  deliver(b_, a_);
  const Sent rtu = a_.pop();  // lost
  advance(kRepInterval);
  EXPECT_EQ(deliver(b_, a_), AttrId::kRep);  // REP timer
  ASSERT_EQ(a_.out.size(), 1u);
  EXPECT_EQ(a_.out.front().bytes, rtu.bytes);
  EXPECT_EQ(a_.count(CmEventType::kEstablished), 1u);  // not twice
  deliver(a_, b_);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kEstablished);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kEstablished);
}

TEST_F(CmTest, LostRtuFirstDataEstablishes) {
  a_.cm.connect(params());
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  b_.cm.accept(ib, accept_params());
  deliver(b_, a_);
  const Sent rtu = a_.pop();  // lost
  ASSERT_EQ(b_.cm.notify_established(ib), CmStatus::kOk);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kEstablished);
  EXPECT_EQ(b_.count(CmEventType::kEstablished), 1u);
  EXPECT_FALSE(b_.cm.next_deadline());  // the REP timer is gone
  // The late RTU changes nothing.
  b_.cm.on_mad(rtu.bytes, a_.addr);
  EXPECT_EQ(b_.count(CmEventType::kEstablished), 1u);
  EXPECT_EQ(b_.cm.notify_established(ib), CmStatus::kOk);
}

TEST_F(CmTest, RepRetriesExhaustedRejectsWithTimeout) {
  a_.cm.connect(params());
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  b_.cm.accept(ib, accept_params());
  a_.out.clear();
  drop(b_);
  for (int i = 0; i < 15; ++i) {
    advance(kRepInterval);
    ASSERT_EQ(drop(b_), AttrId::kRep);
    a_.out.clear();  // the active side's retransmitted REQs are lost too
  }
  advance(kRepInterval);
  ASSERT_EQ(b_.out.size(), 1u);
  const RejMsg rej = b_.out.front().as<RejMsg>();
  EXPECT_EQ(rej.reason, RejReason::kTimeout);
  EXPECT_EQ(rej.message_rejected, MsgKind::kRep);
  EXPECT_EQ(b_.count(CmEventType::kUnreachable), 1u);
  EXPECT_EQ(b_.mods.back().t, QpTransition::kError);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kTimewait);
}

TEST_F(CmTest, LostDreqIsRetransmitted) {
  auto [ia, ib] = establish();
  ASSERT_EQ(a_.cm.disconnect(ia), CmStatus::kOk);
  const Sent dreq = a_.pop();  // lost
  advance(kReqInterval);
  ASSERT_EQ(a_.out.size(), 1u);
  EXPECT_EQ(a_.out.front().bytes, dreq.bytes);
  deliver(a_, b_);
  deliver(b_, a_);
  EXPECT_EQ(a_.count(CmEventType::kDisconnected), 1u);
  EXPECT_EQ(b_.count(CmEventType::kDisconnected), 1u);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kTimewait);
}

TEST_F(CmTest, ExitResendsUnansweredDreqsAtOnce) {
  // A process about to exit cannot wait the DREQ timer out: it sends unanswered DREQs again now.
  auto [ia, ib] = establish();
  EXPECT_EQ(a_.cm.disconnecting(), 0u);
  EXPECT_EQ(a_.cm.resend_dreqs(), 0u);
  ASSERT_EQ(a_.cm.disconnect(ia), CmStatus::kOk);
  EXPECT_EQ(a_.cm.disconnecting(), 1u);
  const Sent dreq = a_.pop();  // lost
  const auto retx = a_.cm.stats().retransmits;
  ASSERT_EQ(a_.cm.resend_dreqs(), 1u);
  EXPECT_EQ(a_.cm.stats().retransmits, retx + 1);
  ASSERT_EQ(a_.out.size(), 1u);
  EXPECT_EQ(a_.out.front().bytes, dreq.bytes);
  EXPECT_EQ(deliver(a_, b_), AttrId::kDreq);
  EXPECT_EQ(deliver(b_, a_), AttrId::kDrep);
  EXPECT_EQ(a_.cm.disconnecting(), 0u);
  EXPECT_EQ(b_.count(CmEventType::kDisconnected), 1u);
  EXPECT_EQ(a_.cm.resend_dreqs(), 0u);  // answered: nothing left to send
}

TEST_F(CmTest, LostDrepIsAnsweredFromTimewait) {
  auto [ia, ib] = establish();
  a_.cm.disconnect(ia);
  deliver(a_, b_);
  drop(b_);  // the DREP is lost
  advance(kReqInterval);
  EXPECT_EQ(deliver(a_, b_), AttrId::kDreq);
  EXPECT_EQ(deliver(b_, a_), AttrId::kDrep);  // answered from timewait
  EXPECT_EQ(b_.count(CmEventType::kDisconnected), 1u);
  EXPECT_EQ(a_.count(CmEventType::kDisconnected), 1u);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kTimewait);
  // A DREP that arrives late is ignored.
  DrepMsg late;
  late.local_comm_id = ib.v;
  late.remote_comm_id = ia.v;
  a_.cm.on_mad(encode({}, late), b_.addr);
  EXPECT_EQ(a_.count(CmEventType::kDisconnected), 1u);
}

TEST_F(CmTest, DreqRetriesExhaustedStillDisconnects) {
  auto [ia, ib] = establish();
  a_.cm.disconnect(ia);
  drop(a_);
  for (int i = 0; i < 15; ++i) {
    advance(kReqInterval);
    ASSERT_EQ(drop(a_), AttrId::kDreq);
  }
  advance(kReqInterval);
  EXPECT_EQ(a_.count(CmEventType::kDisconnected), 1u);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kTimewait);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kEstablished);
}

TEST_F(CmTest, SimultaneousDisconnect) {
  auto [ia, ib] = establish();
  a_.cm.disconnect(ia);
  b_.cm.disconnect(ib);
  EXPECT_EQ(deliver(a_, b_), AttrId::kDreq);
  EXPECT_EQ(deliver(b_, a_), AttrId::kDreq);
  EXPECT_EQ(deliver(b_, a_), AttrId::kDrep);
  EXPECT_EQ(deliver(a_, b_), AttrId::kDrep);
  EXPECT_EQ(a_.count(CmEventType::kDisconnected), 1u);
  EXPECT_EQ(b_.count(CmEventType::kDisconnected), 1u);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kTimewait);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kTimewait);
  EXPECT_FALSE(a_.cm.next_deadline() > now_ + milliseconds(1000));  // no DREQ timer left
}

TEST_F(CmTest, DreqForUnknownConnectionGetsDrep) {
  DreqMsg dreq;
  dreq.local_comm_id = 0x1111;
  dreq.remote_comm_id = 0x2222;
  dreq.remote_qpn = Qpn(5);
  MadHeader h;
  h.tid = 77;
  b_.cm.on_mad(encode(h, dreq), a_.addr);
  ASSERT_EQ(b_.out.size(), 1u);
  EXPECT_EQ(b_.out.front().tid(), 77u);
  const DrepMsg drep = b_.out.front().as<DrepMsg>();
  EXPECT_EQ(drep.local_comm_id, 0x2222u);
  EXPECT_EQ(drep.remote_comm_id, 0x1111u);
  EXPECT_EQ(b_.out.front().to, a_.addr);
}

TEST_F(CmTest, DreqNamingAnotherQpIsIgnored) {
  auto [ia, ib] = establish();
  DreqMsg dreq;
  dreq.local_comm_id = ia.v;
  dreq.remote_comm_id = ib.v;
  dreq.remote_qpn = Qpn(0x99);  // not B's QP
  b_.cm.on_mad(encode({}, dreq), a_.addr);
  EXPECT_TRUE(b_.out.empty());
  EXPECT_EQ(b_.cm.state(ib), ConnState::kEstablished);
}

TEST_F(CmTest, MraForRepExtendsTheRepTimer) {
  a_.cm.connect(params());
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  b_.cm.accept(ib, accept_params());
  const RepMsg rep = b_.pop().as<RepMsg>();
  MraMsg mra;
  mra.local_comm_id = rep.remote_comm_id;
  mra.remote_comm_id = ib.v;
  mra.message_mraed = MsgKind::kRep;
  mra.service_timeout = 20;
  b_.cm.on_mad(encode({}, mra), a_.addr);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kMraRepRcvd);
  EXPECT_EQ(b_.cm.next_deadline(), now_ + milliseconds(4096 + 512));
  advance(kRepInterval);
  EXPECT_TRUE(b_.out.empty());  // the plain REP interval no longer applies
  advance(milliseconds(512));
  EXPECT_EQ(drop(b_), AttrId::kRep);
  // An MRA naming the wrong message is ignored.
  mra.message_mraed = MsgKind::kReq;
  b_.cm.on_mad(encode({}, mra), a_.addr);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kMraRepRcvd);
}

TEST_F(CmTest, DuplicateReqAfterEstablishmentIsIgnored) {
  const Sent req = [&] {
    a_.cm.connect(params());
    return a_.out.front();
  }();
  deliver(a_, b_);
  b_.cm.accept(b_.last(CmEventType::kConnectRequest).id, accept_params());
  deliver(b_, a_);
  deliver(a_, b_);
  b_.cm.on_mad(req.bytes, a_.addr);
  EXPECT_TRUE(b_.out.empty());
  EXPECT_EQ(b_.count(CmEventType::kConnectRequest), 1u);
  EXPECT_EQ(b_.cm.stats().duplicates, 1u);
}

TEST_F(CmTest, RejWhileEstablishedEntersTimewait) {
  auto [ia, ib] = establish();
  RejMsg rej;
  rej.local_comm_id = ib.v;
  rej.remote_comm_id = ia.v;
  rej.message_rejected = MsgKind::kOther;
  rej.reason = RejReason::kTimeout;
  a_.cm.on_mad(encode({}, rej), b_.addr);
  EXPECT_EQ(a_.last(CmEventType::kRejected).reason, RejReason::kTimeout);
  EXPECT_EQ(a_.mods.back().t, QpTransition::kError);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kTimewait);
  // A REJ naming another remote ID is not ours.
  rej.local_comm_id = 0x12345678;
  rej.remote_comm_id = ib.v;
  b_.cm.on_mad(encode({}, rej), a_.addr);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kEstablished);
}

TEST_F(CmTest, ActiveSideCancelWhilePassiveWaits) {
  // A REJ from the active side while the application still thinks drops the request.
  const ConnId ia = *a_.cm.connect(params());
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  RejMsg rej;
  rej.local_comm_id = ia.v;
  rej.remote_comm_id = ib.v;
  rej.message_rejected = MsgKind::kOther;  // (Linux's cm_format_rej for an id past REQ_SENT)
  rej.reason = RejReason::kTimeout;
  b_.cm.on_mad(encode({}, rej), a_.addr);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kIdle);
  EXPECT_EQ(b_.cm.accept(ib, accept_params()), CmStatus::kNoSuchConn);
  EXPECT_TRUE(b_.mods.empty());  // no QP was touched
}

// ---- rejects ------------------------------------------------------------------------------------

TEST_F(CmTest, NoListenerIsRejectedWithReason8) {
  ConnectParams p = params();
  p.service_id = service_id(PortSpace::kTcp, 9999);
  const ConnId ia = *a_.cm.connect(p);
  const std::uint64_t tid = a_.out.front().tid();
  deliver(a_, b_);
  ASSERT_EQ(b_.out.size(), 1u);
  EXPECT_EQ(b_.out.front().tid(), tid);
  const RejMsg rej = b_.out.front().as<RejMsg>();
  EXPECT_EQ(rej.reason, RejReason::kInvalidServiceId);
  EXPECT_EQ(rej.message_rejected, MsgKind::kReq);
  EXPECT_EQ(rej.local_comm_id, 0u);
  EXPECT_EQ(rej.remote_comm_id, ia.v);
  EXPECT_EQ(b_.cm.size(), 0u);
  deliver(b_, a_);
  EXPECT_EQ(a_.last(CmEventType::kRejected).reason, RejReason::kInvalidServiceId);
  EXPECT_EQ(a_.cm.size(), 0u);
  EXPECT_FALSE(a_.cm.next_deadline());
}

TEST_F(CmTest, ConsumerRejectCarriesPrivateData) {
  const ConnId ia = *a_.cm.connect(params());
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  const std::uint8_t why[] = {0xDE, 0xAD};
  ASSERT_EQ(b_.cm.reject(ib, RejReason::kConsumerDefined, why), CmStatus::kOk);
  EXPECT_EQ(b_.cm.size(), 0u);
  const RejMsg rej = b_.out.front().as<RejMsg>();
  EXPECT_EQ(rej.local_comm_id, ib.v);
  EXPECT_EQ(rej.remote_comm_id, ia.v);
  deliver(b_, a_);
  const CmEvent& ev = a_.last(CmEventType::kRejected);
  EXPECT_EQ(ev.reason, RejReason::kConsumerDefined);
  EXPECT_EQ(ev.private_data[0], 0xDE);
  EXPECT_EQ(ev.private_data[1], 0xAD);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kIdle);
}

TEST_F(CmTest, GivingUpAnUnansweredReqRejectsWithTimeoutAndOurGuid) {
  // rdma_destroy_id of a connecting id: Linux's cm_destroy_id sends REJ "timeout" (4) with
  // its CA GUID as the ARI; the passive side finds its request by that GUID and the comm ID.
  const ConnId ia = *a_.cm.connect(params());
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  ASSERT_EQ(a_.cm.reject(ia), CmStatus::kOk);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kIdle);
  ASSERT_EQ(a_.out.size(), 1u);
  const RejMsg rej = a_.out.front().as<RejMsg>();
  EXPECT_EQ(rej.reason, RejReason::kTimeout);
  EXPECT_EQ(rej.message_rejected, MsgKind::kOther);
  EXPECT_EQ(rej.local_comm_id, ia.v);
  EXPECT_EQ(rej.remote_comm_id, 0u);
  ASSERT_EQ(rej.reject_info_length, 8u);
  std::uint64_t guid = 0;
  for (std::size_t i = 0; i < 8; ++i) guid = guid << 8 | rej.ari[i];
  EXPECT_EQ(guid, 0x0A0A0A0A0A0A0A0Aull);  // A's CA GUID, as its REQ carried it
  deliver(a_, b_);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kIdle);
  EXPECT_EQ(b_.count(CmEventType::kRejected), 1u);
  // No REQ follows: the connection is gone on the active side.
  advance(kReqInterval);
  advance(kReqInterval);
  EXPECT_TRUE(a_.out.empty());
  // A REJ "timeout" naming another GUID ends nothing.
  const ConnId ia2 = *a_.cm.connect(params(Qpn(0x12)));
  deliver(a_, b_);
  const ConnId ib2 = b_.last(CmEventType::kConnectRequest).id;
  RejMsg forged = rej;
  forged.local_comm_id = ia2.v;
  forged.ari[7] ^= 1;
  b_.cm.on_mad(encode({}, forged), a_.addr);
  EXPECT_EQ(b_.cm.state(ib2), ConnState::kReqRcvd);
  // Nor may a connection that is up be given up this way: disconnect() is for that.
  auto [ea, eb] = establish();
  EXPECT_EQ(a_.cm.reject(ea), CmStatus::kBadState);
  (void)eb;
}

TEST_F(CmTest, ReqWithTooLargeMtuOrBadCmaHeaderIsRejected) {
  // A passive CM limited to 1024-byte paths refuses a REQ for 4096.
  CmConfig cfg;
  cfg.ca_guid = 0x0E;
  cfg.max_path_mtu = 3;
  CmCallbacks cb;
  cb.send_mad = [this](std::span<const std::uint8_t> m, const MadAddr& to) {
    Sent s;
    std::copy(m.begin(), m.end(), s.bytes.begin());
    s.to = to;
    b_.out.push_back(s);
  };
  cb.now = [this] { return now_; };
  Cm limited(cfg, cb);
  limited.listen(kSid);
  ConnectParams p = params();
  p.path_mtu = 5;
  a_.cm.connect(p);
  limited.on_mad(a_.pop().bytes, a_.addr);
  EXPECT_EQ(b_.pop().as<RejMsg>().reason, RejReason::kInvalidMtu);
  EXPECT_EQ(limited.size(), 0u);

  // A broken cma header on an IP CM service ID: REJ 28, as rdma_cm's refusal becomes.
  a_.cm.connect(params());
  ReqMsg req = a_.pop().as<ReqMsg>();
  req.private_data[1] = 0x50;  // IP version 5
  b_.cm.on_mad(encode({}, req), a_.addr);
  EXPECT_EQ(b_.pop().as<RejMsg>().reason, RejReason::kConsumerDefined);
  EXPECT_EQ(b_.count(CmEventType::kConnectRequest), 0u);

  req.private_data[1] = 0x40;
  req.transport_type = TransportType::kRd;
  b_.cm.on_mad(encode({}, req), a_.addr);
  EXPECT_EQ(b_.pop().as<RejMsg>().reason, RejReason::kInvalidTransportType);
}

TEST_F(CmTest, ActiveSideQpFailureRejectsTheRep) {
  const ConnId ia = *a_.cm.connect(params());
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  b_.cm.accept(ib, accept_params());
  a_.fail_modify = true;
  deliver(b_, a_);
  EXPECT_EQ(a_.count(CmEventType::kConnectError), 1u);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kIdle);
  const RejMsg rej = a_.out.front().as<RejMsg>();
  EXPECT_EQ(rej.message_rejected, MsgKind::kRep);
  deliver(a_, b_);
  EXPECT_EQ(b_.last(CmEventType::kRejected).reason, RejReason::kConsumerDefined);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kIdle);
}

// ---- timewait -----------------------------------------------------------------------------------

TEST_F(CmTest, TimewaitRejectsStaleReqsAndForgetsAfterwards) {
  const Sent old_req = [&] {
    a_.cm.connect(params());
    return a_.out.front();
  }();
  deliver(a_, b_);
  const ConnId ib = b_.last(CmEventType::kConnectRequest).id;
  b_.cm.accept(ib, accept_params());
  deliver(b_, a_);
  deliver(a_, b_);
  const ConnId ia = a_.last(CmEventType::kEstablished).id;
  a_.cm.disconnect(ia);
  deliver(a_, b_);
  deliver(b_, a_);
  ASSERT_EQ(b_.cm.state(ib), ConnState::kTimewait);

  // The old REQ (same comm ID) arrives late: REJ 10.
  b_.cm.on_mad(old_req.bytes, a_.addr);
  EXPECT_EQ(b_.pop().as<RejMsg>().reason, RejReason::kStaleConn);
  // A new connection from the same QP while B still remembers it: REJ 10 too.
  const ConnId ia2 = *a_.cm.connect(params());
  deliver(a_, b_);
  const RejMsg rej = b_.out.front().as<RejMsg>();
  EXPECT_EQ(rej.reason, RejReason::kStaleConn);
  EXPECT_EQ(rej.remote_comm_id, ia2.v);
  deliver(b_, a_);
  EXPECT_EQ(a_.last(CmEventType::kRejected).reason, RejReason::kStaleConn);
  EXPECT_EQ(a_.cm.state(ia2), ConnState::kTimewait);  // the active side remembers it as well
  // A late DREQ in timewait is answered.
  DreqMsg dreq;
  dreq.local_comm_id = ia.v;
  dreq.remote_comm_id = ib.v;
  dreq.remote_qpn = Qpn(0x22);
  b_.cm.on_mad(encode({}, dreq), a_.addr);
  EXPECT_EQ(b_.pop().attr(), AttrId::kDrep);
  EXPECT_EQ(b_.count(CmEventType::kDisconnected), 1u);

  advance(milliseconds(1000));
  EXPECT_EQ(b_.cm.size(), 0u);
  EXPECT_EQ(a_.cm.size(), 0u);
  // After timewait the same QP may connect again.
  a_.cm.connect(params());
  deliver(a_, b_);
  EXPECT_EQ(b_.count(CmEventType::kConnectRequest), 2u);
}

// ---- malformed input ----------------------------------------------------------------------------

TEST_F(CmTest, MalformedMadsAreCountedAndIgnored) {
  MadBuf m = encode({}, RtuMsg{});
  EXPECT_EQ(b_.cm.on_mad(std::span(m).first(100), a_.addr), MadError::kTruncated);
  m[1] = 0x81;
  EXPECT_EQ(b_.cm.on_mad(m, a_.addr), MadError::kNotCm);
  EXPECT_EQ(b_.cm.stats().mads_rx_bad, 2u);
  EXPECT_EQ(b_.cm.on_mad(encode({}, RtuMsg{}), a_.addr), MadError::kOk);  // unknown IDs
  EXPECT_EQ(b_.cm.on_mad(encode({}, RepMsg{}), a_.addr), MadError::kOk);
  EXPECT_EQ(b_.cm.on_mad(encode({}, MraMsg{}), a_.addr), MadError::kOk);
  EXPECT_EQ(b_.cm.on_mad(encode({}, RejMsg{}), a_.addr), MadError::kOk);
  EXPECT_EQ(b_.cm.on_mad(encode({}, DrepMsg{}), a_.addr), MadError::kOk);
  EXPECT_EQ(b_.cm.on_mad(encode({}, SidrRepMsg{}), a_.addr), MadError::kOk);
  EXPECT_EQ(b_.cm.stats().mads_rx_ignored, 6u);
  EXPECT_TRUE(b_.out.empty());
  EXPECT_TRUE(b_.events.empty());
}

// ---- SIDR (UD services) -------------------------------------------------------------------------

TEST_F(CmTest, SidrResolvesQpnAndQkey) {
  b_.cm.listen(kUdpSid);
  SidrParams p;
  p.peer = b_.addr;
  p.service_id = kUdpSid;
  p.cma = CmaHeader::ipv4(kIpA, 0xD432, kIpB);
  p.private_data = {5};
  const ConnId ia = *a_.cm.sidr_resolve(p);
  const Sent req = a_.out.front();
  EXPECT_EQ(req.as<SidrReqMsg>().request_id, ia.v);
  EXPECT_EQ(req.as<SidrReqMsg>().pkey, 0xFFFF);
  drop(a_);
  advance(kReqInterval);  // lost: retransmitted
  EXPECT_EQ(a_.out.front().bytes, req.bytes);
  deliver(a_, b_);
  const CmEvent& sreq = b_.last(CmEventType::kSidrRequest);
  ASSERT_TRUE(sreq.cma);
  EXPECT_EQ(sreq.cma->src_port, 0xD432);
  EXPECT_EQ(sreq.private_data[0], 5);
  // A duplicate while the application thinks is dropped.
  b_.cm.on_mad(req.bytes, a_.addr);
  EXPECT_EQ(b_.count(CmEventType::kSidrRequest), 1u);
  ASSERT_EQ(b_.cm.sidr_accept(sreq.id, Qpn(0x33), kRdmaUdpQkey), CmStatus::kOk);
  EXPECT_EQ(b_.out.front().tid(), req.tid());
  const SidrRepMsg rep = b_.out.front().as<SidrRepMsg>();
  EXPECT_EQ(rep.request_id, ia.v);
  EXPECT_EQ(rep.service_id, kUdpSid);
  deliver(b_, a_);
  const CmEvent& ev = a_.last(CmEventType::kSidrReply);
  EXPECT_EQ(ev.sidr_status, SidrStatus::kSuccess);
  EXPECT_EQ(ev.sidr_qpn, Qpn(0x33));
  EXPECT_EQ(ev.sidr_qkey, 0x01234567u);
  EXPECT_EQ(a_.cm.size(), 0u);
  // B keeps the answered exchange (as Linux does): a repeated SIDR_REQ (our SIDR_REP was lost)
  // gets the same SIDR_REP from the CM, and the application sees no second request.
  EXPECT_EQ(b_.cm.size(), 1u);
  EXPECT_EQ(b_.cm.state(sreq.id), ConnState::kSidrRepSent);
  b_.cm.on_mad(req.bytes, a_.addr);
  EXPECT_EQ(b_.count(CmEventType::kSidrRequest), 1u);
  ASSERT_EQ(b_.out.size(), 1u);
  const SidrRepMsg again = b_.pop().as<SidrRepMsg>();
  EXPECT_EQ(again.request_id, ia.v);
  EXPECT_EQ(again.qpn, Qpn(0x33));
  // Forgotten after two REQ retransmission intervals.
  advance(2 * kReqInterval);
  EXPECT_EQ(b_.cm.size(), 0u);
  EXPECT_FALSE(b_.cm.next_deadline());
}

TEST_F(CmTest, SidrWithoutListenerAndTimeout) {
  SidrParams p;
  p.peer = b_.addr;
  p.service_id = kUdpSid;  // B does not listen on it
  a_.cm.sidr_resolve(p);
  deliver(a_, b_);
  EXPECT_EQ(b_.out.front().as<SidrRepMsg>().status, SidrStatus::kUnsupported);
  deliver(b_, a_);
  EXPECT_EQ(a_.last(CmEventType::kSidrReply).sidr_status, SidrStatus::kUnsupported);

  a_.cm.sidr_resolve(p);
  for (int i = 0; i < 16; ++i) {
    drop(a_);
    advance(kReqInterval);
  }
  EXPECT_EQ(a_.count(CmEventType::kUnreachable), 1u);
  EXPECT_EQ(a_.cm.size(), 0u);
}

TEST(CmTiming, AckTimeoutAndIbaTime) {
  EXPECT_EQ(ack_timeout(15, 16), 17);
  EXPECT_EQ(ack_timeout(17, 16), 18);
  EXPECT_EQ(ack_timeout(18, 16), 19);
  EXPECT_EQ(ack_timeout(20, 16), 20);
  EXPECT_EQ(ack_timeout(0, 16), 17);
  EXPECT_EQ(ack_timeout(31, 31), 31);
  EXPECT_EQ(iba_time(20), milliseconds(4096));
  EXPECT_EQ(iba_time(8), milliseconds(1));
  EXPECT_EQ(iba_time(0), milliseconds(1));
  EXPECT_EQ(iba_time(24), milliseconds(65536));
}

// ---- off-path peers
// ------------------------------------------------------------------------------ A REJ with
// local_comm_id 0 skipped the check of the peer's comm ID in every state, and no MAD's source was
// compared with the connection's peer: with one of our comm IDs (they were the xorshift32 sequence:
// one seen in a REP of the attacker's own connection, the next known), any host tore down any
// established connection with one REJ.

TEST_F(CmTest, RejWithoutThePeersCommIdOnlyRejectsARequest) {
  auto [ia, ib] = establish();
  RejMsg rej;
  rej.local_comm_id = 0;  // "not known yet": only for the REJ of a REQ
  rej.remote_comm_id = ib.v;
  rej.reason = RejReason::kConsumerDefined;
  for (const MsgKind k : {MsgKind::kReq, MsgKind::kRep, MsgKind::kOther}) {
    rej.message_rejected = k;
    ASSERT_EQ(b_.cm.on_mad(encode({}, rej), a_.addr), MadError::kOk);
    EXPECT_EQ(b_.cm.state(ib), ConnState::kEstablished) << "REJ of message " << int(k);
  }
  EXPECT_EQ(b_.count(CmEventType::kRejected), 0u);
  // Nor does a REJ of a REQ reach a connection past its REQ, whatever comm ID it names.
  rej.local_comm_id = ia.v;
  rej.message_rejected = MsgKind::kReq;
  b_.cm.on_mad(encode({}, rej), a_.addr);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kEstablished);
  // The REJ of our REQ (the passive side's ID is new to us) still ends it.
  const ConnId i2 = *a_.cm.connect(params(Qpn(0x12)));
  drop(a_);
  rej.local_comm_id = 0;
  rej.remote_comm_id = i2.v;
  a_.cm.on_mad(encode({}, rej), b_.addr);
  EXPECT_EQ(a_.cm.state(i2), ConnState::kIdle);
  EXPECT_EQ(a_.count(CmEventType::kRejected), 1u);
}

TEST_F(CmTest, MadsFromAnotherAddressThanThePeerAreIgnored) {
  auto [ia, ib] = establish();
  const MadAddr m{wire::ipv4_mapped(Ipv4Addr{0xC0000209}), Qpn(Qpn::kGsi)};
  RejMsg rej;
  rej.local_comm_id = ia.v;  // every ID right, the source wrong
  rej.remote_comm_id = ib.v;
  rej.message_rejected = MsgKind::kOther;
  b_.cm.on_mad(encode({}, rej), m);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kEstablished);
  DreqMsg dreq;
  dreq.local_comm_id = ia.v;
  dreq.remote_comm_id = ib.v;
  dreq.remote_qpn = Qpn(0x22);
  b_.cm.on_mad(encode({}, dreq), m);
  EXPECT_EQ(b_.cm.state(ib), ConnState::kEstablished);
  EXPECT_EQ(b_.count(CmEventType::kDisconnected), 0u);
  // A DREP from elsewhere does not finish our DREQ either.
  ASSERT_EQ(a_.cm.disconnect(ia), CmStatus::kOk);
  DrepMsg drep;
  drep.local_comm_id = ib.v;
  drep.remote_comm_id = ia.v;
  a_.cm.on_mad(encode({}, drep), m);
  EXPECT_EQ(a_.cm.state(ia), ConnState::kDreqSent);
  // A REP for a REQ, from elsewhere: the REQ stays unanswered.
  const ConnId i2 = *a_.cm.connect(params(Qpn(0x13)));
  RepMsg rep;
  rep.local_comm_id = 0x77;
  rep.remote_comm_id = i2.v;
  rep.local_qpn = Qpn(0x44);
  a_.cm.on_mad(encode({}, rep), m);
  EXPECT_EQ(a_.cm.state(i2), ConnState::kReqSent);
  EXPECT_EQ(a_.count(CmEventType::kEstablished), 1u);
}

TEST_F(CmTest, CommIdsAreNotPredictableFromOneSeen) {
  auto xorshift = [](std::uint32_t x) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return x;
  };
  std::vector<std::uint32_t> ids;
  for (int i = 0; i < 64; ++i) ids.push_back(a_.cm.connect(params(Qpn(0x100 + i)))->v);
  int follows = 0;
  for (std::size_t i = 1; i < ids.size(); ++i) follows += ids[i] == xorshift(ids[i - 1]);
  EXPECT_EQ(follows, 0);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "an ID given twice";
  // Two CMs configured alike (the same seed) give different IDs.
  Node twin{0x0A0A0A0A0A0A0A0Aull, kIpA, &now_, 11};
  int same = 0;
  for (int i = 0; i < 8; ++i)
    same += std::binary_search(ids.begin(), ids.end(), twin.cm.connect(params())->v);
  EXPECT_LT(same, 8);
}

}  // namespace
}  // namespace roce::cm
