// The requester and completer against a peer that exists only as crafted responses: what each
// kind of answer does to the send queue (IBA 9.7.5.2), one rule at a time, with the frames the
// requester sends checked as well. The responder has its own file (responder_test.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/support/crafted_peer.h"

namespace roce::test {
namespace {

using namespace roce::engine;
using wire::Opcode;
constexpr std::uint32_t kS = CraftedPeer::kSpsn;

// One signalled work request of `op` from t.mem (len bytes) to a made-up remote address.
SendWr wr(WrOpcode op, const Sge& s, std::uint64_t id) {
  SendWr w;
  w.wr_id = id;
  w.opcode = op;
  w.sg_list = &s;
  w.num_sge = 1;
  w.send_flags = kSendSignaled;
  w.rdma = {0x10000, 0x77};
  w.atomic = {0x10000, 0x77, 5, 0};
  return w;
}

std::vector<Wc> poll(CraftedPeer& t) {
  Wc wc[16];
  const int n = t.eng.poll_cq(t.cq, 16, wc);
  return {wc, wc + n};
}

TEST(Completer, AckCompletesEverythingUpToItsPsn) {
  CraftedPeer t;
  t.to_rts();
  Sge s{t.mem_addr(), 600, t.mr->key};  // 3 packets at MTU 256
  SendWr a = wr(WrOpcode::kWrite, s, 1), b = wr(WrOpcode::kWrite, s, 2);
  a.next = &b;
  ASSERT_EQ(t.eng.post_send(t.qp, &a, nullptr), kOk);
  const auto sent = t.flush();
  ASSERT_EQ(sent.size(), 6u);
  EXPECT_EQ(sent[0].op, Opcode::kRcWriteFirst);
  EXPECT_EQ(sent[5].psn, kS + 5);
  t.respond(Opcode::kRcAcknowledge, kS + 2, 0x1F);  // the first WRITE's last PSN
  auto wcs = poll(t);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::kRdmaWrite);
  t.respond(Opcode::kRcAcknowledge, kS + 5, 0x1F);
  wcs = poll(t);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 2u);
  t.respond(Opcode::kRcAcknowledge, kS + 5, 0x1F);  // a duplicate ACK changes nothing
  EXPECT_TRUE(poll(t).empty());
  EXPECT_EQ(t.eng.stats().get(Counter::kRxDropUnexpected), 1u) << "older than the oldest unacked";
}

TEST(Completer, RemoteAccessNakFailsTheWqeAndFlushesTheRest) {
  CraftedPeer t;
  t.to_rts();
  Sge s{t.mem_addr(), 8, t.mr->key};
  SendWr a = wr(WrOpcode::kWrite, s, 1), b = wr(WrOpcode::kSend, s, 2);
  a.next = &b;
  ASSERT_EQ(t.eng.post_send(t.qp, &a, nullptr), kOk);
  t.flush();
  t.respond(Opcode::kRcAcknowledge, kS, 0x62);
  const auto wcs = poll(t);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(wcs[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(t.qp->state, QpState::kErr);
}

TEST(Completer, SequenceNakResendsFromItsPsn) {
  CraftedPeer t;
  t.to_rts();
  Sge s{t.mem_addr(), 1024, t.mr->key};  // 4 packets
  SendWr a = wr(WrOpcode::kWrite, s, 1);
  ASSERT_EQ(t.eng.post_send(t.qp, &a, nullptr), kOk);
  ASSERT_EQ(t.flush().size(), 4u);
  t.respond(Opcode::kRcAcknowledge, kS + 2, 0x60);  // PSN sequence error: resend from kS + 2
  const auto again = t.flush();
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].psn, kS + 2);
  EXPECT_EQ(again[0].op, Opcode::kRcWriteMiddle);
  EXPECT_EQ(again[1].op, Opcode::kRcWriteLast);
  EXPECT_EQ(t.eng.stats().get(Counter::kSeqErrNakRcvd), 1u);
}

TEST(Completer, RnrNakWaitsItsTimerThenResends) {
  CraftedPeer t;
  t.to_rts();
  Sge s{t.mem_addr(), 8, t.mr->key};
  SendWr a = wr(WrOpcode::kSend, s, 1);
  ASSERT_EQ(t.eng.post_send(t.qp, &a, nullptr), kOk);
  ASSERT_EQ(t.flush().size(), 1u);
  t.respond(Opcode::kRcAcknowledge, kS, 0x20 | 14);  // RNR NAK, 1.28 ms
  EXPECT_TRUE(t.flush().empty()) << "not before the RNR timer";
  t.now += 1'300'000;
  const auto again = t.flush();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].psn, kS);
  EXPECT_EQ(again[0].op, Opcode::kRcSendOnly);
}

TEST(Completer, ReadResponsesArePlacedInOrderAndBadOnesDropped) {
  CraftedPeer t;
  t.to_rts();
  std::fill(t.mem.begin(), t.mem.end(), 0);
  Sge s{t.mem_addr(), 600, t.mr->key};
  SendWr r = wr(WrOpcode::kRead, s, 9);
  ASSERT_EQ(t.eng.post_send(t.qp, &r, nullptr), kOk);
  const auto req = t.flush();
  ASSERT_EQ(req.size(), 1u);
  EXPECT_EQ(req[0].op, Opcode::kRcReadRequest);
  t.respond(Opcode::kRcReadResponseFirst, kS, 0x1F, 200);  // First must carry the path MTU
  EXPECT_EQ(t.eng.stats().get(Counter::kRxDropUnexpected), 1u);
  t.respond(Opcode::kRcReadResponseFirst, kS, 0x1F, 256);
  t.respond(Opcode::kRcReadResponseMiddle, kS + 1, 0x1F, 256);
  EXPECT_TRUE(poll(t).empty());
  t.respond(Opcode::kRcReadResponseLast, kS + 2, 0x1F, 88);
  const auto wcs = poll(t);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::kRdmaRead);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(t.mem[0], 0xD5);
  EXPECT_EQ(t.mem[599], 0xD5);
  EXPECT_EQ(t.mem[600], 0) << "nothing beyond the WQE's buffer";
}

TEST(Completer, AtomicAckWritesTheOriginalValue) {
  CraftedPeer t;
  t.to_rts();
  Sge s{t.mem_addr() + 64, 8, t.mr->key};
  SendWr a = wr(WrOpcode::kFetchAdd, s, 4);
  ASSERT_EQ(t.eng.post_send(t.qp, &a, nullptr), kOk);
  ASSERT_EQ(t.flush().size(), 1u);
  t.respond(Opcode::kRcAtomicAcknowledge, kS, 0x1F, 0, 0x1122334455667788ull);
  const auto wcs = poll(t);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::kFetchAdd);
  std::uint64_t v;
  std::memcpy(&v, t.mem.data() + 64, 8);
  EXPECT_EQ(v, 0x1122334455667788ull);
}

TEST(Completer, ResponsesForPsnsNeverSentAreDropped) {
  CraftedPeer t;
  t.to_rts();
  t.respond(Opcode::kRcAcknowledge, kS + 10, 0x1F);
  t.respond(Opcode::kRcReadResponseOnly, kS, 0x1F, 8);
  EXPECT_EQ(t.eng.stats().get(Counter::kRxDropUnexpected), 2u);
  EXPECT_TRUE(poll(t).empty());
  EXPECT_EQ(t.qp->state, QpState::kRts);
}

}  // namespace
}  // namespace roce::test
