// The scheduler (Engine::run, scheduler.cc) with more QPs waiting than the transmit ring
// takes: QPs are served in the order their work arrived, a run() that fills the ring leaves
// the next QP for the next run(), and no QP waits longer than one round (issue 33: with
// 10,000 QPs a QP in the middle of the list waited past the ACK timeout).
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {
using namespace roce::engine;

TEST(Scheduler, QpsAreServedInTheOrderTheirWorkArrivedAcrossFullRings) {
  EngineConfig ca = Loopback::default_config(0);
  ca.tx_slots = 64;  // 32 beyond the ACK reserve: 8 QPs' 4-packet messages per run()
  Loopback lb({}, ca);
  RcOptions o;
  o.cap = {4, 4, 1, 1, 0};
  auto [a0, b0] = connect(lb, o);
  constexpr int kQps = 100;
  std::vector<Endpoint> as;
  std::map<std::uint32_t, int> index_of;  // B's QPN -> index
  std::vector<Buffer> src, dst;
  for (int i = 0; i < kQps; ++i) {
    auto [a, b] = i == 0 ? std::pair{a0, b0} : connect_on(lb, a0, b0, o);
    as.push_back(a);
    index_of[b.qp->qpn] = i;
    src.push_back(make_buffer(lb.a(), a0.pd, 4096, static_cast<std::uint8_t>(i)));
    dst.push_back(make_buffer(lb.b(), b0.pd, 4096, 0));
  }
  // One 4 KiB WRITE (4 packets at MTU 1024) per QP, posted in the order 0, 1, ..., 99.
  for (int i = 0; i < kQps; ++i) {
    const Sge s = src[static_cast<std::size_t>(i)].sge();
    const SendWr wr = make_wr(static_cast<std::uint64_t>(i), &s, dst[static_cast<std::size_t>(i)]);
    ASSERT_EQ(lb.a().post_send(as[static_cast<std::size_t>(i)].qp, &wr, nullptr), kOk);
  }
  std::vector<int> order;  // the QP of each frame sent, run after run, nothing acknowledged
  std::uint64_t t = lb.now();
  std::size_t runs = 0;
  for (; runs < 100 && order.size() < 4u * kQps; ++runs) {
    const Frames fs = drain(lb.a(), t += 1000);
    EXPECT_LE(fs.size(), 32u) << "the ACK reserve stays free";
    for (const auto& f : fs) {
      wire::RxPkt p;
      ASSERT_EQ(wire::parse_frame(f, p), wire::Verdict::kOk);
      order.push_back(index_of.at(p.dest_qp.raw()));
    }
  }
  ASSERT_EQ(order.size(), 4u * kQps);
  EXPECT_EQ(runs, 13u) << "32 frames per run()";
  for (int i = 0; i < kQps; ++i)
    for (int k = 0; k < 4; ++k)
      ASSERT_EQ(order[static_cast<std::size_t>(4 * i + k)], i)
          << "frame " << 4 * i + k << ": QPs in the order their work was posted";
}

// Issue 32: more QPs owe an ACK than the responder's transmit ring has room for. The ACKs
// that do not fit wait on the ACK list for the next run() (counted as ack_deferred) instead
// of being dropped, so that no requester waits for a probe or its ACK timeout.
TEST(Scheduler, AcksBeyondAFullTxRingWaitForTheNextRun) {
  EngineConfig cb = Loopback::default_config(1);
  cb.tx_slots = 40;  // fewer slots than QPs owe ACKs
  Loopback lb({}, Loopback::default_config(0), cb);
  RcOptions o;
  o.cap = {2, 2, 1, 1, 0};  // depth 2
  auto [a0, b0] = connect(lb, o);
  constexpr int kQps = 100;
  std::vector<Endpoint> as;
  std::vector<Buffer> src, dst;
  for (int i = 0; i < kQps; ++i) {
    auto [a, b] = i == 0 ? std::pair{a0, b0} : connect_on(lb, a0, b0, o);
    as.push_back(a);
    src.push_back(make_buffer(lb.a(), a0.pd, 256, static_cast<std::uint8_t>(i)));
    dst.push_back(make_buffer(lb.b(), b0.pd, 256, 0));
  }
  for (int i = 0; i < kQps; ++i)
    for (int k = 0; k < 2; ++k) {
      const auto u = static_cast<std::size_t>(i);
      const Sge s = src[u].sge(128 * static_cast<std::uint64_t>(k), 128);
      const SendWr wr = make_wr(static_cast<std::uint64_t>(2 * i + k), &s, dst[u], 128 * k);
      ASSERT_EQ(lb.a().post_send(as[u].qp, &wr, nullptr), kOk);
    }
  std::uint64_t t = lb.now();
  Frames reqs;
  for (int r = 0; r < 10 && reqs.size() < 2u * kQps; ++r)
    for (auto& f : drain(lb.a(), t += 1000)) reqs.push_back(std::move(f));
  ASSERT_EQ(reqs.size(), 2u * kQps);
  // One receive burst at B: every QP owes one coalesced ACK.
  t += 1000;
  for (const auto& f : reqs) lb.b().receive(f, t);
  std::size_t acks = 0;
  for (int r = 0; r < 10; ++r) {
    const Frames fs = drain(lb.b(), t += 1000);
    EXPECT_LE(fs.size(), cb.tx_slots);
    for (const auto& f : fs) {
      ++acks;
      lb.a().receive(f, t + 500);
    }
  }
  EXPECT_EQ(acks, std::size_t{kQps}) << "one ACK per QP, none lost to the full ring";
  // 60 wait after the first run(), 20 of them again after the second.
  EXPECT_EQ(lb.b().stats().get(Counter::kAckDeferred), 60u + 20u);
  EXPECT_EQ(lb.b().stats().get(Counter::kAckSent), std::size_t{kQps});
  // Every WRITE completes at A on those ACKs alone: no probe, no timeout, no retransmission.
  std::vector<Wc> wcs(4 * kQps);
  const int n = lb.a().poll_cq(a0.scq, static_cast<int>(wcs.size()), wcs.data());
  EXPECT_EQ(n, 2 * kQps);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitProbes), 0u);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitTimeouts), 0u);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmittedPackets), 0u);
}

}  // namespace
}  // namespace roce::test
