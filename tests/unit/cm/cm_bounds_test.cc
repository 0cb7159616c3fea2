// The CM under a peer that sends whatever REQs and SIDR_REQs it likes: a cap on the
// connections it holds (REJ "no resources" beyond it), a deadline on every half-open exchange
// whatever timeouts the REQ asks for, and lookups by comm ID instead of scans.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <vector>

#include "controlplane/cm/cm.h"

namespace roce::cm {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr std::uint64_t kSid = 0x1234;  // not an IP CM service: no cma header needed

struct Harness {
  explicit Harness(std::uint32_t cap, Duration half_open = seconds(90)) {
    CmConfig c;
    c.ca_guid = 0xB;
    c.seed = 3;
    c.max_connections = cap;
    c.half_open_timeout = half_open;
    CmCallbacks cb;
    cb.send_mad = [this](std::span<const std::uint8_t> m, const MadAddr&) {
      sent.push_back(decode(m));
    };
    cb.on_event = [this](const CmEvent& e) { events.push_back(e); };
    cb.now = [this] { return now; };
    cm.emplace(c, cb);
    cm->listen(kSid);
  }
  MadError req(std::uint32_t comm_id, std::uint64_t guid, std::uint32_t qpn,
               std::uint8_t response_timeout = 20, std::uint64_t tid = 1) {
    ReqMsg m;
    m.local_comm_id = comm_id;
    m.service_id = kSid;
    m.local_ca_guid = guid;
    m.local_qpn = Qpn(qpn);
    m.path_mtu = 3;
    m.local_cm_response_timeout = response_timeout;
    m.remote_cm_response_timeout = response_timeout;
    m.max_cm_retries = 15;
    m.primary.local_ack_timeout = response_timeout;  // also the timewait Linux would keep
    MadHeader h;
    h.tid = tid;
    const MadBuf b = encode(h, m);
    return cm->on_mad(b, peer);
  }
  MadError sidr_req(std::uint32_t request_id) {
    SidrReqMsg m;
    m.request_id = request_id;
    m.service_id = kSid;
    const MadBuf b = encode(MadHeader{}, m);
    return cm->on_mad(b, peer);
  }
  std::size_t rejs(RejReason r) const {
    std::size_t n = 0;
    for (const auto& d : sent)
      if (const auto* rej = std::get_if<RejMsg>(&d.msg); rej && rej->reason == r) ++n;
    return n;
  }
  std::size_t count(CmEventType t) const {
    std::size_t n = 0;
    for (const auto& e : events) n += e.type == t;
    return n;
  }
  void advance(Duration d) {
    now += d;
    cm->on_timer(now);
  }

  TimePoint now{seconds(1000)};
  MadAddr peer{wire::ipv4_mapped(wire::Ipv4Addr{0xC0000202}), Qpn(Qpn::kGsi)};
  std::vector<DecodedMad> sent;
  std::vector<CmEvent> events;
  std::optional<Cm> cm;
};

TEST(CmBounds, ReqsBeyondTheCapGetNoResources) {
  Harness h(8);
  for (std::uint32_t i = 1; i <= 20; ++i) ASSERT_EQ(h.req(i, 0x100 + i, 0x40 + i), MadError::kOk);
  EXPECT_EQ(h.cm->size(), 8u);
  EXPECT_EQ(h.count(CmEventType::kConnectRequest), 8u);
  EXPECT_EQ(h.rejs(RejReason::kNoResources), 12u);
  EXPECT_EQ(h.cm->stats().rejected_full, 12u);
  // Our own connect() is refused too, without a MAD.
  ConnectParams p;
  p.peer = h.peer;
  p.qpn = Qpn(0x11);
  p.path_mtu = 3;
  const std::size_t before = h.sent.size();
  EXPECT_FALSE(h.cm->connect(p));
  EXPECT_EQ(h.sent.size(), before);
  // A duplicate of a held REQ is still recognised (by its comm ID and CA GUID): an MRA.
  h.req(3, 0x103, 0x43);
  ASSERT_TRUE(std::holds_alternative<MraMsg>(h.sent.back().msg));
  EXPECT_EQ(h.cm->stats().duplicates, 1u);
  // A new REQ from a QP a held connection names is stale.
  h.req(99, 0x103, 0x43);
  EXPECT_EQ(h.rejs(RejReason::kStaleConn), 1u);
}

TEST(CmBounds, HalfOpenExchangesExpireWhateverTheReqAsks) {
  Harness h(64, seconds(30));
  // Never answered by the application.
  h.req(1, 0x101, 0x41);
  // Accepted, but no RTU comes; the REQ asks us to wait 2^(31-8) ms between REP retries.
  h.req(2, 0x102, 0x42, 31);
  const ConnId accepted = h.events.back().id;
  AcceptParams a;
  a.qpn = Qpn(0x22);
  ASSERT_EQ(h.cm->accept(accepted, a), CmStatus::kOk);
  EXPECT_EQ(h.cm->size(), 2u);
  h.advance(seconds(29));
  EXPECT_EQ(h.cm->size(), 2u);
  EXPECT_EQ(h.rejs(RejReason::kTimeout), 0u);
  h.advance(seconds(2));
  EXPECT_EQ(h.rejs(RejReason::kTimeout), 2u) << "both peers are told";
  EXPECT_EQ(h.count(CmEventType::kUnreachable), 2u);
  EXPECT_EQ(h.cm->stats().half_open_expired, 2u);
  // The REQ's ACK timeout would keep the accepted one in timewait for hours: at most 30 s.
  EXPECT_EQ(h.cm->state(accepted), ConnState::kTimewait);
  h.advance(seconds(31));
  EXPECT_EQ(h.cm->size(), 0u);
  EXPECT_FALSE(h.cm->next_deadline());
  // A SIDR_REQ the application never answers goes the same way.
  h.sidr_req(7);
  h.advance(seconds(31));
  EXPECT_EQ(h.cm->size(), 0u);
}

TEST(CmBounds, AnsweredSidrExchangesGiveWayToNewOnes) {
  Harness h(4);
  for (std::uint32_t i = 1; i <= 4; ++i) {
    h.sidr_req(i);
    ASSERT_EQ(h.cm->sidr_accept(h.events.back().id, Qpn(0x30 + i), 7), CmStatus::kOk);
  }
  EXPECT_EQ(h.cm->size(), 4u);
  // Full of answered exchanges: a REQ still gets in, the oldest answer is forgotten.
  h.req(1, 0x101, 0x41);
  EXPECT_EQ(h.count(CmEventType::kConnectRequest), 1u);
  EXPECT_EQ(h.cm->stats().sidr_forgotten, 1u);
  EXPECT_EQ(h.cm->size(), 4u);
  // A repeat of a remembered one is answered by the CM; of the forgotten one, asked again.
  const std::size_t before = h.events.size();
  h.sidr_req(4);
  EXPECT_EQ(h.events.size(), before);
  ASSERT_TRUE(std::holds_alternative<SidrRepMsg>(h.sent.back().msg));
  EXPECT_EQ(std::get<SidrRepMsg>(h.sent.back().msg).qpn, Qpn(0x34));
  h.sidr_req(1);
  EXPECT_EQ(h.count(CmEventType::kSidrRequest), 5u);
}

TEST(CmBounds, AFloodOfRandomReqsStaysBounded) {
  Harness h(4096, seconds(5));
  std::mt19937_64 rng(9);
  for (int i = 0; i < 200000; ++i) {
    const auto r = rng();
    h.req(static_cast<std::uint32_t>(r), r >> 20, static_cast<std::uint32_t>(r >> 40) & 0xFFFFFF,
          static_cast<std::uint8_t>(r & 31));
    if (i % 1000 == 0) h.advance(milliseconds(100));
    ASSERT_LE(h.cm->size(), 4096u);
    if (h.sent.size() > 1024) h.sent.clear();
    if (h.events.size() > 1024) h.events.clear();
  }
  EXPECT_GT(h.cm->stats().rejected_full, 100000u);
  EXPECT_GT(h.cm->stats().half_open_expired, 4096u);
  h.advance(seconds(10));
  EXPECT_EQ(h.cm->size(), 0u);
}

}  // namespace
}  // namespace roce::cm
