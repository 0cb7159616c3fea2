// Conformance checks in the style of Lumina (a testing framework for RNICs): inject one precise
// fault and check the exact packet sequence on the wire, not only the end result.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;
using wire::Opcode;

constexpr std::uint32_t kPsnA = 0x123456;  // RcOptions default for A's send queue

std::vector<WireRecord> from(const Loopback& lb, int side) {
  std::vector<WireRecord> out;
  for (const auto& r : lb.records())
    if (r.from == side) out.push_back(r);
  return out;
}

bool is_nak_seq(const WireRecord& r) {
  return r.opcode == Opcode::kRcAcknowledge && r.syndrome == 0x60;
}

// Connects A to B (`ends`: the two endpoints), WRITEs `bytes` once, and waits until the WRITE
// has completed and the wire is quiet; checks the completion and the data. Call it inside
// ASSERT_NO_FATAL_FAILURE.
void write_once(Loopback& lb, std::uint32_t bytes, std::pair<Endpoint, Endpoint>* ends = nullptr) {
  auto [a, b] = connect(lb);
  if (ends) *ends = {a, b};
  Buffer src = make_buffer(lb.a(), a.pd, bytes, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, bytes, 2);
  Sge s = src.sge();
  SendWr w = make_wr(1, &s, dst);
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1);
  lb.settle();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst.bytes, src.bytes);
}

TEST(Conformance, DroppedPacketGivesOneSeqNakAndGoBackNFromIt) {
  constexpr std::uint32_t kPkts = 20, kDrop = 5;
  LoopbackOptions lo;
  lo.a2b.drop_psn.push_back({Engine::kFirstQpn, kPsnA + kDrop, 1, -1});
  Loopback lb(lo);
  std::pair<Endpoint, Endpoint> ends;
  ASSERT_NO_FATAL_FAILURE(write_once(lb, kPkts * 1024, &ends));
  ASSERT_EQ(ends.second.qp->qpn, Engine::kFirstQpn);

  const auto nb = from(lb, 1);
  const auto naks = std::count_if(nb.begin(), nb.end(), is_nak_seq);
  EXPECT_EQ(naks, 1) << "exactly one PSN sequence error NAK for the gap";
  const auto nak = std::find_if(nb.begin(), nb.end(), is_nak_seq);
  ASSERT_NE(nak, nb.end());
  EXPECT_EQ(nak->psn, kPsnA + kDrop) << "the NAK names the missing PSN";

  // A's packets: 0..19 once, then the retransmission starts exactly at the dropped PSN.
  const auto na = from(lb, 0);
  ASSERT_GE(na.size(), kPkts + 1);
  for (std::uint32_t i = 0; i < kPkts; ++i) EXPECT_EQ(na[i].psn, kPsnA + i);
  EXPECT_EQ(na[kPkts].psn, kPsnA + kDrop) << "go-back-N restarts at p";
  EXPECT_EQ(na.size(), kPkts + (kPkts - kDrop)) << "p..end resent once, nothing before p";
  EXPECT_EQ(lb.b().stats().get(Counter::kDuplicateRequests), 0u) << "no duplicate delivery";
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitTimeouts), 0u) << "recovered without a timeout";
}

// Without probes (EngineConfig::probe_min_ns = 0) only IBA's local ACK timeout recovers what
// no NAK reports; the probe tests below run the same losses with probes on (the default).
engine::EngineConfig no_probes() {
  engine::EngineConfig c = Loopback::default_config(0);
  c.probe_min_ns = 0;
  return c;
}

TEST(Conformance, DroppedAckIsRecoveredByTimeoutAndReAck) {
  LoopbackOptions lo;
  // The ACK goes from B to A's QP (also kFirstQpn) with the PSN of the WRITE.
  lo.b2a.drop_psn.push_back({Engine::kFirstQpn, kPsnA, 1, wire::raw(Opcode::kRcAcknowledge)});
  Loopback lb(lo, no_probes());
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 512, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 512, 2);
  Sge s = src.sge();
  SendWr w = make_wr(1, &s, dst);
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1);
  lb.settle();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst.bytes, src.bytes);
  const auto na = from(lb, 0), nb = from(lb, 1);
  ASSERT_EQ(na.size(), 2u) << "the WRITE and its one retransmission";
  EXPECT_EQ(na[1].psn, kPsnA);
  ASSERT_EQ(nb.size(), 2u) << "the lost ACK and the re-ACK of the duplicate";
  EXPECT_TRUE(nb[0].dropped);
  EXPECT_EQ(nb[1].syndrome & 0x60, 0) << "an ACK (credit code in the low bits)";
  EXPECT_EQ(nb[1].psn, kPsnA);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitTimeouts), 1u);
  EXPECT_EQ(lb.b().stats().get(Counter::kDuplicateRequests), 1u);
  EXPECT_EQ(lb.b().stats().get(Counter::kSeqErrNakSent), 0u);
}

TEST(Conformance, DroppedReadResponseIsReRequestedFromTheGap) {
  constexpr std::uint32_t kPkts = 8, kDrop = 3;
  LoopbackOptions lo;
  lo.b2a.drop_psn.push_back({Engine::kFirstQpn, kPsnA + kDrop, 1, -1});
  Loopback lb(lo);
  auto [a, b] = connect(lb);
  Buffer remote = make_buffer(lb.b(), b.pd, kPkts * 1024, 1);
  Buffer local = make_buffer(lb.a(), a.pd, kPkts * 1024, 2);
  Sge s = local.sge();
  SendWr w = make_wr(1, &s, remote, 0, WrOpcode::kRead);
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1);
  lb.settle();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(local.bytes, remote.bytes);
  const auto na = from(lb, 0);
  ASSERT_EQ(na.size(), 2u) << "the READ and one re-request";
  EXPECT_EQ(na[0].opcode, Opcode::kRcReadRequest);
  EXPECT_EQ(na[1].opcode, Opcode::kRcReadRequest);
  EXPECT_EQ(na[1].psn, kPsnA + kDrop) << "re-requested from the first missing response";
  const auto nb = from(lb, 1);
  // Responses: 0..7 (3 dropped), then 3 alone: the responses after the gap were placed as
  // they came, and only the missing one is asked for again (selective READ retry).
  ASSERT_EQ(nb.size(), kPkts + 1);
  EXPECT_EQ(nb[kPkts].psn, kPsnA + kDrop);
  EXPECT_EQ(nb[kPkts].opcode, Opcode::kRcReadResponseOnly)
      << "a partial replay is a new response of its own";
  EXPECT_EQ(lb.b().stats().get(Counter::kDuplicateRequests), 1u);
  EXPECT_EQ(lb.a().stats().get(Counter::kReadReRequests), 1u);
  EXPECT_EQ(lb.a().stats().get(Counter::kReadReRequestBytes), 1024u);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetries), 0u) << "no go-back-N";
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitProbes), 0u)
      << "no probe while a READ is the oldest: its responses show their own gaps";
}

TEST(Conformance, DroppedLastPacketTakesTheTimeoutPath) {
  constexpr std::uint32_t kPkts = 4;
  LoopbackOptions lo;
  lo.a2b.drop_psn.push_back({Engine::kFirstQpn, kPsnA + kPkts - 1, 1, -1});
  Loopback lb(lo, no_probes());
  ASSERT_NO_FATAL_FAILURE(write_once(lb, kPkts * 1024));
  EXPECT_EQ(lb.b().stats().get(Counter::kSeqErrNakSent), 0u) << "no later packet, so no NAK";
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitTimeouts), 1u);
  const auto na = from(lb, 0);
  ASSERT_EQ(na.size(), 2 * kPkts) << "nothing was acknowledged: the whole message again";
  EXPECT_EQ(na[kPkts].psn, kPsnA) << "go-back-N from the oldest unacknowledged PSN";
  EXPECT_EQ(na.back().psn, kPsnA + kPkts - 1);
  EXPECT_TRUE(na.back().ack_req);
  EXPECT_EQ(lb.b().stats().get(Counter::kDuplicateRequests), kPkts - 1);
}

TEST(Probe, DroppedAckIsRecoveredByOneProbePacketWithoutATimeout) {
  LoopbackOptions lo;
  lo.b2a.drop_psn.push_back({Engine::kFirstQpn, kPsnA, 1, wire::raw(Opcode::kRcAcknowledge)});
  Loopback lb(lo);
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 512, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 512, 2);
  Sge s = src.sge();
  SendWr w = make_wr(1, &s, dst);
  const std::uint64_t t0 = lb.now();
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst.bytes, src.bytes);
  // No round trip measured yet: the first probe waits a millisecond, far below the 67 ms
  // local ACK timeout (exponent 14) of these QPs.
  const double us = static_cast<double>(lb.now() - t0) / 1000.0;
  EXPECT_GE(us, 1000.0);
  EXPECT_LT(us, 1500.0);
  lb.settle();
  const auto na = from(lb, 0), nb = from(lb, 1);
  ASSERT_EQ(na.size(), 2u) << "the WRITE and the probe";
  EXPECT_EQ(na[1].psn, kPsnA);
  EXPECT_TRUE(na[1].ack_req);
  ASSERT_EQ(nb.size(), 2u) << "the lost ACK and the re-ACK of the duplicate";
  EXPECT_EQ(nb[1].psn, kPsnA);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitProbes), 1u);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitTimeouts), 0u);
  EXPECT_EQ(a.qp->comp.retry_left, 7u) << "a probe does not spend the retry budget";
}

TEST(Probe, DroppedLastPacketCostsTwoProbesOnly) {
  constexpr std::uint32_t kPkts = 4;
  LoopbackOptions lo;
  lo.a2b.drop_psn.push_back({Engine::kFirstQpn, kPsnA + kPkts - 1, 1, -1});
  Loopback lb(lo);
  ASSERT_NO_FATAL_FAILURE(write_once(lb, kPkts * 1024));
  const auto na = from(lb, 0), nb = from(lb, 1);
  // 0 1 2 (3 lost) | probe: 0 again, alone, AckReq | B re-ACKs 2: 0 had arrived, so 3 may
  // still be in flight, and nothing is rewound | probe: 3, the oldest now | ACK 3.
  ASSERT_EQ(na.size(), kPkts + 2);
  EXPECT_EQ(na[kPkts].psn, kPsnA) << "the probe is the oldest unacknowledged packet";
  EXPECT_TRUE(na[kPkts].ack_req);
  EXPECT_EQ(na[kPkts + 1].psn, kPsnA + kPkts - 1) << "the second probe: what the answer left";
  EXPECT_TRUE(na[kPkts + 1].ack_req);
  ASSERT_GE(nb.size(), 2u);
  EXPECT_EQ(nb[0].psn, kPsnA + kPkts - 2) << "the answer to the first probe";
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitProbes), 2u);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetries), 0u) << "no go-back-N";
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitTimeouts), 0u);
  EXPECT_EQ(lb.b().stats().get(Counter::kDuplicateRequests), 1u);
}

TEST(Probe, LostSequenceNakIsRecoveredByAProbe) {
  constexpr std::uint32_t kPkts = 6, kDrop = 2;
  LoopbackOptions lo;
  lo.a2b.drop_psn.push_back({Engine::kFirstQpn, kPsnA + kDrop, 1, -1});
  lo.b2a.drop_psn.push_back(
      {Engine::kFirstQpn, kPsnA + kDrop, 1, wire::raw(Opcode::kRcAcknowledge)});
  Loopback lb(lo);
  ASSERT_NO_FATAL_FAILURE(write_once(lb, kPkts * 1024));
  EXPECT_EQ(lb.b().stats().get(Counter::kSeqErrNakSent), 1u);
  EXPECT_EQ(lb.a().stats().get(Counter::kSeqErrNakRcvd), 0u) << "the NAK was lost";
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitProbes), 2u);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitTimeouts), 0u);
  const auto na = from(lb, 0);
  // 0..5 (2 lost, its NAK lost) | probe 0 | ACK 1: 0 had arrived, resume | probe 2 | ACK 2,
  // exactly the probed packet: it had been lost, and B dropped 3..5 behind the gap |
  // go-back-N 3..5.
  ASSERT_EQ(na.size(), kPkts + 2 + (kPkts - kDrop - 1));
  EXPECT_EQ(na[kPkts].psn, kPsnA);
  EXPECT_EQ(na[kPkts + 1].psn, kPsnA + kDrop);
  EXPECT_EQ(na[kPkts + 2].psn, kPsnA + kDrop + 1);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetries), 1u);
}

TEST(Conformance, DuplicatedSendsAreDeliveredOnce) {
  LoopbackOptions lo;
  lo.a2b.duplicate_rate = 1.0;
  Loopback lb(lo);
  auto [a, b] = connect(lb);
  constexpr int kMsgs = 20;
  Buffer src = make_buffer(lb.a(), a.pd, kMsgs * 1500, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, kMsgs * 1500, 2);
  for (int i = 0; i < kMsgs; ++i) {
    Sge rs = dst.sge(static_cast<std::uint64_t>(i) * 1500, 1500);
    RecvWr r;
    r.wr_id = static_cast<std::uint64_t>(i);
    r.sg_list = &rs;
    r.num_sge = 1;
    ASSERT_EQ(lb.b().post_recv(b.qp, &r, nullptr), kOk);
    Sge ss = src.sge(static_cast<std::uint64_t>(i) * 1500, 1500);
    SendWr w = make_wr(1, &ss, dst, 0, WrOpcode::kSend);
    ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  }
  auto rwc = wait_wcs(lb, b.rcq, kMsgs);
  lb.settle();
  Wc extra;
  EXPECT_EQ(lb.b().poll_cq(b.rcq, 1, &extra), 0) << "no message delivered twice";
  ASSERT_EQ(rwc.size(), static_cast<std::size_t>(kMsgs));
  for (int i = 0; i < kMsgs; ++i)
    EXPECT_EQ(rwc[static_cast<std::size_t>(i)].wr_id, static_cast<std::uint64_t>(i));
  EXPECT_EQ(dst.bytes, src.bytes);
  EXPECT_EQ(lb.b().stats().get(Counter::kDuplicateRequests), 2u * kMsgs);
}

TEST(Conformance, CorruptedFramesAreCaughtByTheIcrc) {
  LoopbackOptions lo;
  lo.a2b.corrupt_rate = 0.05;
  lo.b2a.corrupt_rate = 0.05;
  lo.a2b.seed = 11;
  lo.b2a.seed = 12;
  Loopback lb(lo);
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 256 * 1024, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 256 * 1024, 2);
  Buffer back = make_buffer(lb.a(), a.pd, 256 * 1024, 3);
  Sge s = src.sge(), r = back.sge();
  SendWr w = make_wr(1, &s, dst), rd = make_wr(1, &r, dst, 0, WrOpcode::kRead);
  rd.wr_id = 2;
  w.next = &rd;
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 2, 60'000'000'000ull);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wc[1].status, WcStatus::kSuccess);
  EXPECT_EQ(dst.bytes, src.bytes);
  EXPECT_EQ(back.bytes, src.bytes);
  // Every corrupted frame is dropped by the parser: mostly as bad_icrc, or earlier when the
  // flipped bit makes the BTH itself invalid (TVer, opcode, pad count).
  const auto bad_icrc = static_cast<std::size_t>(wire::Verdict::kBadIcrc);
  EXPECT_EQ(lb.b().stats().get(Counter::kRxDropVerdict), lb.injector(0).stats().corrupted);
  EXPECT_EQ(lb.a().stats().get(Counter::kRxDropVerdict), lb.injector(1).stats().corrupted);
  EXPECT_GE(lb.b().stats().verdicts[bad_icrc] * 10, lb.injector(0).stats().corrupted * 8);
  EXPECT_GT(lb.injector(0).stats().corrupted, 5u);
}

}  // namespace
}  // namespace roce::test
