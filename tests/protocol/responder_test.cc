// One engine, crafted request packets, captured responses: the responder's rules one by one
// (PSN checks, opcode sequence, RNR, ACK coalescing, credits, length rules) and the receive
// dispatch's drop counters.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dataplane/engine/engine.h"
#include "tests/support/crafted_peer.h"

namespace roce::test {
namespace {

using namespace roce::engine;
using wire::Opcode;
using wire::Psn;

constexpr std::uint32_t kPeerQpn = CraftedPeer::kPeerQpn;
constexpr std::uint32_t kEpsn = CraftedPeer::kEpsn;

// The crafted peer (tests/support/crafted_peer.h) with the QP granting remote write and read.
CraftedOptions responder_options() {
  CraftedOptions o;
  o.access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  return o;
}

class ResponderTest : public ::testing::Test {
 protected:
  void inject(Opcode op, std::uint32_t psn, std::size_t payload_len, bool ack_req,
              std::uint64_t va_off = 0, std::uint32_t dma_len = 0) {
    t_.inject(op, psn, payload_len, ack_req, va_off, dma_len);
  }
  void raw_inject(std::vector<std::uint8_t> frame) { eng_.receive(frame, t_.now); }
  std::vector<Answer> flush() { return t_.flush(); }
  void post_recvs(int n) { t_.post_recvs(n); }

  CraftedPeer t_{responder_options()};
  Engine& eng_ = t_.eng;
  EngineConfig& peer_ = t_.peer;
  Cq*& cq_ = t_.cq;
  Qp*& qp_ = t_.qp;
  std::vector<std::uint8_t>& mem_ = t_.mem;
};

TEST_F(ResponderTest, AckOnlyWhenRequestedAndCoalesced) {
  inject(Opcode::kRcWriteFirst, kEpsn, 256, false, 0, 768);
  inject(Opcode::kRcWriteMiddle, kEpsn + 1, 256, false);
  EXPECT_TRUE(flush().empty()) << "no AckReq, no ACK";
  inject(Opcode::kRcWriteLast, kEpsn + 2, 256, true);
  inject(Opcode::kRcWriteOnly, kEpsn + 3, 10, true, 1000, 10);
  const auto out = flush();
  ASSERT_EQ(out.size(), 1u) << "two AckReqs in one burst: one ACK for the later PSN";
  EXPECT_EQ(out[0].op, Opcode::kRcAcknowledge);
  EXPECT_EQ(out[0].psn, kEpsn + 3);
  EXPECT_EQ(out[0].msn, 2u) << "two messages completed";
  EXPECT_EQ(mem_[0], static_cast<std::uint8_t>(kEpsn));
  EXPECT_EQ(mem_[1000], static_cast<std::uint8_t>(kEpsn + 3));
}

TEST_F(ResponderTest, GapGivesOneSequenceNakUntilFilled) {
  inject(Opcode::kRcWriteOnly, kEpsn + 2, 8, true, 0, 8);
  inject(Opcode::kRcWriteOnly, kEpsn + 3, 8, true, 0, 8);
  inject(Opcode::kRcWriteOnly, kEpsn + 4, 8, true, 0, 8);
  auto out = flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome, 0x60);
  EXPECT_EQ(out[0].psn, kEpsn) << "the NAK carries the expected PSN";
  inject(Opcode::kRcWriteOnly, kEpsn, 8, true, 0, 8);
  inject(Opcode::kRcWriteOnly, kEpsn + 2, 8, true, 0, 8);  // a new gap (kEpsn + 1 missing)
  out = flush();
  ASSERT_EQ(out.size(), 2u) << "ACK for the in-order packet, one NAK for the new gap";
  EXPECT_EQ(out[0].syndrome, 0x60);
  EXPECT_EQ(out[0].psn, kEpsn + 1);
  EXPECT_EQ(out[1].syndrome & 0x60, 0);
  EXPECT_EQ(out[1].psn, kEpsn);
  EXPECT_EQ(eng_.stats().get(Counter::kSeqErrNakSent), 2u);
}

// A sequence NAK that finds the transmit ring full is not counted as sent (tx_ring_full counts
// it) and the next packet past the gap tries again: before, it was counted, marked sent and
// never went out, and every later packet was dropped after a NAK nobody saw.
TEST(ResponderRing, SequenceNakAtAFullRingIsSentByTheNextPacket) {
  CraftedOptions o = responder_options();
  o.tx_slots = 1;
  CraftedPeer t(o);
  t.inject(Opcode::kRcWriteOnly, kEpsn, 8, true, 0, 8);
  t.now += 1000;
  t.eng.run(t.now);  // its ACK takes the ring's one slot, left undrained
  const auto full = t.eng.stats().get(Counter::kTxRingFull);
  t.inject(Opcode::kRcWriteOnly, kEpsn + 2, 8, true, 0, 8);  // kEpsn + 1 lost
  EXPECT_EQ(t.eng.stats().get(Counter::kSeqErrNakSent), 0u) << "not sent: not counted";
  EXPECT_GT(t.eng.stats().get(Counter::kTxRingFull), full);
  auto out = t.flush();
  ASSERT_EQ(out.size(), 1u) << "the ACK only";
  EXPECT_EQ(out[0].syndrome & 0x60, 0);
  t.inject(Opcode::kRcWriteOnly, kEpsn + 3, 8, true, 0, 8);
  out = t.flush();
  ASSERT_EQ(out.size(), 1u) << "the NAK, now that there is room";
  EXPECT_EQ(out[0].syndrome, 0x60);
  EXPECT_EQ(out[0].psn, kEpsn + 1);
  EXPECT_EQ(t.eng.stats().get(Counter::kSeqErrNakSent), 1u);
  EXPECT_EQ(t.eng.stats().get(Counter::kRxDropAfterSeqNak), 0u);
}

TEST_F(ResponderTest, DuplicateSendIsReAckedNotRedelivered) {
  post_recvs(2);
  inject(Opcode::kRcSendOnly, kEpsn, 100, true);
  flush();
  Wc wc[4];
  ASSERT_EQ(eng_.poll_cq(cq_, 4, wc), 1);
  inject(Opcode::kRcSendOnly, kEpsn, 100, true);
  const auto out = flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn, kEpsn) << "re-ACK with ePSN - 1";
  EXPECT_EQ(eng_.poll_cq(cq_, 4, wc), 0) << "not delivered again";
  EXPECT_EQ(eng_.stats().get(Counter::kDuplicateRequests), 1u);
}

TEST_F(ResponderTest, EmptyReceiveQueueGivesRnrNakWithMinRnrTimer) {
  inject(Opcode::kRcSendOnly, kEpsn, 100, true);
  auto out = flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome, 0x20 | 12) << "RNR NAK with min_rnr_timer 12 (0.64 ms)";
  EXPECT_EQ(out[0].psn, kEpsn);
  post_recvs(1);
  inject(Opcode::kRcSendOnly, kEpsn, 100, true);
  out = flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome & 0x60, 0) << "accepted once a WQE is posted";
}

TEST_F(ResponderTest, CreditsAdvertiseRemainingReceiveWqes) {
  post_recvs(7);
  inject(Opcode::kRcSendOnly, kEpsn, 10, true);
  auto out = flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome, wire::credit_code_for(6)) << "6 WQEs left: credit code 5";
}

TEST_F(ResponderTest, OpcodeSequenceViolationsAreInvalidRequests) {
  post_recvs(2);
  inject(Opcode::kRcWriteMiddle, kEpsn, 256, true);  // Middle without First
  const auto out = flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome, 0x61);
  EXPECT_EQ(qp_->state, QpState::kErr);
  Wc wc[4];
  EXPECT_EQ(eng_.poll_cq(cq_, 4, wc), 2) << "posted receives flushed";
  EXPECT_EQ(wc[0].status, WcStatus::kWrFlushErr);
}

TEST_F(ResponderTest, SendInsideWriteIsInvalidRequest) {
  post_recvs(1);
  inject(Opcode::kRcWriteFirst, kEpsn, 256, false, 0, 1024);
  inject(Opcode::kRcSendLast, kEpsn + 1, 10, true);
  const auto out = flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome, 0x61);
  EXPECT_EQ(out[0].psn, kEpsn + 1);
}

TEST_F(ResponderTest, WrongPacketLengthIsInvalidRequest) {
  inject(Opcode::kRcWriteFirst, kEpsn, 200, false, 0, 1024);  // First must carry the path MTU
  const auto out = flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome, 0x61);
}

TEST_F(ResponderTest, ReadRespondsWithEnoughPacketsAndPsns) {
  inject(Opcode::kRcReadRequest, kEpsn, 0, true, 0, 600);
  const auto out = flush();
  ASSERT_EQ(out.size(), 3u) << "600 bytes at MTU 256";
  EXPECT_EQ(out[0].op, Opcode::kRcReadResponseFirst);
  EXPECT_EQ(out[1].op, Opcode::kRcReadResponseMiddle);
  EXPECT_EQ(out[2].op, Opcode::kRcReadResponseLast);
  for (std::uint32_t i = 0; i < 3; ++i) EXPECT_EQ(out[i].psn, kEpsn + i);
  // The READ consumed three PSNs: the next request is expected at kEpsn + 3.
  inject(Opcode::kRcWriteOnly, kEpsn + 3, 4, true, 0, 4);
  const auto ack = flush();
  ASSERT_EQ(ack.size(), 1u);
  EXPECT_EQ(ack[0].psn, kEpsn + 3);
  EXPECT_EQ(ack[0].syndrome & 0x60, 0);
}

TEST_F(ResponderTest, DropsAreCountedByReason) {
  // Unknown QP
  wire::FrameSpec s;
  s.src_mac = peer_.mac;
  s.src_ip4 = peer_.ipv4;
  s.dst_ip4 = eng_.config().ipv4;
  s.opcode = Opcode::kRcSendOnly;
  s.dest_qp = wire::Qpn(0x777777);
  std::vector<std::uint8_t> f(wire::frame_len(s, 0));
  wire::build_frame(s, {}, f);
  raw_inject(f);
  EXPECT_EQ(eng_.stats().get(Counter::kRxDropUnknownQp), 1u);
  // Wrong source address for this QP
  s.dest_qp = wire::Qpn(qp_->qpn);
  s.src_ip4 = wire::Ipv4Addr{0xC6120063};
  wire::build_frame(s, {}, f);
  raw_inject(f);
  EXPECT_EQ(eng_.stats().get(Counter::kRxDropAddress), 1u);
  // UD opcode to an RC QP
  s.src_ip4 = peer_.ipv4;
  s.opcode = Opcode::kUdSendOnly;
  f.resize(wire::frame_len(s, 0));
  wire::build_frame(s, {}, f);
  raw_inject(f);
  EXPECT_EQ(eng_.stats().get(Counter::kRxDropWrongTransport), 1u);
  // A corrupted frame
  s.opcode = Opcode::kRcSendOnly;
  f.resize(wire::frame_len(s, 0));
  wire::build_frame(s, {}, f);
  f[50] ^= 1;
  raw_inject(f);
  EXPECT_EQ(eng_.stats().verdicts[static_cast<std::size_t>(wire::Verdict::kBadIcrc)], 1u);
  // Garbage of every length up to 100 bytes
  for (std::size_t n = 0; n < 100; ++n) raw_inject(std::vector<std::uint8_t>(n, 0x45));
  EXPECT_TRUE(flush().empty()) << "nothing is answered";
  EXPECT_EQ(qp_->state, QpState::kRtr);
}

}  // namespace
}  // namespace roce::test
