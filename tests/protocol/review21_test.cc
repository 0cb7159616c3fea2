// Attacker review of session 20's packet-path code (review21-attacker): the scheduler's ring-cut
// turns and retry list (qp36), READ responses under the QP's rate (sr36), DCQCN's alpha
// (dcq36), selective repeat's message index bases (srkey36) and the zero-copy fast transmit path
// (zc36). Each test states what a safe engine does against a hostile local program, a hostile
// peer or a forger on the segment. Tests that fail on the code they were written against are
// DISABLED_ (run them with --gtest_also_run_disabled_tests); the fix removes the prefix.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <vector>

#include "dataplane/engine/cc/dcqcn.h"
#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;

// ---- finding 1: a QP whose turns the full ring cuts keeps the front of the send list -------

// One QP streams long WRITEs (a program with a deep send queue, or one that never stops
// posting) while the link, not the engine, is the bottleneck: each run() finds room for only a
// few frames (the port drained that many since). Another QP then posts one small WRITE. The
// scheduler's promise (scheduler.cc: "a few packets each per round so that one long message
// does not starve the others") is that it waits at most one turn of the stream (kPerQp = 16
// packets). A turn the full ring cuts short goes back to the FRONT of the list (qp36,
// b8f4d20), and in this regime every turn is cut: the stream keeps the front until its send
// queue is empty or its window full (with prompt ACKs, never), and the small WRITE waits for
// all of it.
TEST(Review21, AStreamCutByAFullRingDoesNotStarveTheOtherQps) {
  EngineConfig ca = Loopback::default_config(0);
  ca.tx_slots = 64;  // 32 beyond the ACK reserve
  Loopback lb({}, ca);
  RcOptions o;
  o.cap = {64, 4, 1, 1, 0};
  auto [a0, b0] = connect(lb, o);
  auto [a1, b1] = connect_on(lb, a0, b0, o);
  const std::map<std::uint32_t, int> index_of{{b0.qp->qpn, 0}, {b1.qp->qpn, 1}};
  constexpr std::size_t kChunk = 64 * 1024;  // 64 packets at MTU 1024
  constexpr int kWrites = 32;                // 2,048 packets in all
  Buffer src0 = make_buffer(lb.a(), a0.pd, kChunk, 1);
  Buffer dst0 = make_buffer(lb.b(), b0.pd, kChunk, 0);
  Buffer src1 = make_buffer(lb.a(), a0.pd, 1024, 2);
  Buffer dst1 = make_buffer(lb.b(), b0.pd, 1024, 0);
  for (int i = 0; i < kWrites; ++i) {
    const Sge s = src0.sge();
    SendWr wr = make_wr(static_cast<std::uint64_t>(i), &s, dst0);
    wr.send_flags = 0;  // unsignaled: the CQ is not the test's concern
    ASSERT_EQ(lb.a().post_send(a0.qp, &wr, nullptr), kOk);
  }
  // The link takes 4 frames between two run()s; B answers at once (no window stall).
  constexpr std::size_t kPerRun = 4;
  std::uint64_t t = lb.now();
  std::size_t stream_before = 0;  // the stream's frames after the small WRITE was posted
  bool posted = false, served = false;
  for (int tick = 0; tick < 2000 && !served; ++tick) {
    if (tick == 20) {
      const Sge s = src1.sge();
      const SendWr wr = make_wr(1000, &s, dst1);
      ASSERT_EQ(lb.a().post_send(a1.qp, &wr, nullptr), kOk);
      posted = true;
    }
    t += 1000;
    lb.a().run(t);
    Frames to_b;
    lb.a().drain_tx([&](std::span<const std::uint8_t> f) { to_b.emplace_back(f.begin(), f.end()); },
                    kPerRun);
    for (const auto& f : to_b) {
      wire::RxPkt p;
      ASSERT_EQ(wire::parse_frame(f, p), wire::Verdict::kOk);
      const int q = index_of.at(p.dest_qp.raw());
      if (q == 1) served = true;
      if (q == 0 && posted && !served) ++stream_before;
      lb.b().receive(f, t + 100);
    }
    for (const auto& f : drain(lb.b(), t + 200)) lb.a().receive(f, t + 300);
  }
  ASSERT_TRUE(served) << "the small WRITE never left";
  // At most the rest of the stream's turn (16 packets) and the frames already in the ring.
  EXPECT_LE(stream_before, 16u + 32u)
      << "the small WRITE waited for " << stream_before << " packets of the stream";
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitTimeouts), 0u);
}

// ---- finding 2: DCQCN's alpha walks every period of an idle QP when the gain is 0 -----------

// dce_tcp_g 0 is accepted (config.cc: 0..1023): alpha then never decays, so the alpha timer a
// CNP started never stops (it stops only once alpha is below 1e-6), and run_timers' catch-up
// for an idle QP ("the remaining periods without CNPs in one step") multiplies alpha by 1 once
// per period: one CNP (a spoofed one will do, on a QP with requests out), then an hour without
// packets at dce_tcp_rtt 1 us is 3.6e9 multiplications in the next packet's advance(), on the
// poll loop. roce-ctl's `rates` walks them again on a copy per QP per query (cc_rates). The rate
// timer has a closed form for the same case (Dcqcn.IdleHoursCostNoWalk); alpha has none.
TEST(Review21, AlphaWithAZeroGainCostsNoWalkOverIdleTime) {
  cc::DcqcnParams p;
  p.max_rate_mbps = 40'000;
  p.min_rate_mbps = 10;
  p.alpha_g = 0;
  p.initial_alpha = 1024;
  p.alpha_update_period_us = 1;
  cc::Dcqcn d(p);
  d.on_cnp(1'000);
  const auto t0 = std::chrono::steady_clock::now();
  d.advance(1'000 + 3'600'000'000'000ull);  // an hour later
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 100.0) << "3.6e9 alpha periods walked one by one";
  EXPECT_DOUBLE_EQ(d.alpha(), 1.0) << "a gain of 0 leaves alpha where it is";
}

// ---- finding 3: a QP that always has packets outstanding keeps its first_turn for good -------

// The probe's RACK test across QPs (retransmit.cc fire_timers, qp36) compares the turn of a
// QP's oldest outstanding packet (CompState::first_turn) with the latest turn acknowledged,
// serially in 32 bits. first_turn is set only by a turn that found nothing outstanding, so a QP
// that streams without ever draining its window keeps the one from its first burst; 2^31 turns
// later (about an hour at 600,000 turns a second) the serial compare flips and says nothing
// at or after its oldest packet was acknowledged, although everything up to its last ACK was.
// Then a tail the QP loses while another QP sends is found by the ACK timeout, not the probe.
// The wrap is simulated here by moving first_turn back by 2^31 once the QP has sent; the same
// run without it (Review21.ATailLostBesideAnAcknowledgedQpIsProbed) is probed.
struct TailLossRun {
  std::uint64_t probes = 0, deferred = 0, timeouts = 0;
  bool completed = false;
};
TailLossRun tail_loss_beside_another_qp(bool stale_first_turn) {
  Loopback lb;
  RcOptions o;
  o.cap = {16, 4, 1, 1, 0};
  auto [v, bv] = connect(lb, o);
  auto [w, bw] = connect_on(lb, v, bv, o);
  Buffer srcv = make_buffer(lb.a(), v.pd, 2048, 1);
  Buffer dstv = make_buffer(lb.b(), bv.pd, 2048, 0);
  Buffer srcw = make_buffer(lb.a(), v.pd, 1024, 2);
  Buffer dstw = make_buffer(lb.b(), bv.pd, 1024, 0);
  TailLossRun r;
  const Sge sv = srcv.sge();
  const SendWr wv = make_wr(1, &sv, dstv);  // 2 packets at MTU 1024
  EXPECT_EQ(lb.a().post_send(v.qp, &wv, nullptr), kOk);
  std::uint64_t t = lb.now();
  const Frames fv = drain(lb.a(), t += 1000);
  EXPECT_EQ(fv.size(), 2u);
  if (fv.size() != 2) return r;
  lb.b().receive(fv[0], t + 100);  // the second, V's tail, is lost
  if (stale_first_turn) v.qp->comp.first_turn += 0x8000'0000u;
  // W sends after V, and is acknowledged.
  const Sge sw = srcw.sge();
  const SendWr ww = make_wr(2, &sw, dstw);
  EXPECT_EQ(lb.a().post_send(w.qp, &ww, nullptr), kOk);
  for (const auto& f : drain(lb.a(), t += 1000)) lb.b().receive(f, t + 100);
  for (const auto& f : drain(lb.b(), t + 200)) lb.a().receive(f, t + 300);
  for (int i = 0; i < 20000 && !r.completed; ++i) {
    t += 1000;
    for (const auto& f : drain(lb.a(), t)) lb.b().receive(f, t + 100);
    for (const auto& f : drain(lb.b(), t + 200)) lb.a().receive(f, t + 300);
    Wc wc[4];
    for (int n = lb.a().poll_cq(v.scq, 4, wc), k = 0; k < n; ++k)
      r.completed |= wc[k].wr_id == 1 && wc[k].status == WcStatus::kSuccess;
  }
  r.probes = lb.a().stats().get(Counter::kRetransmitProbes);
  r.deferred = lb.a().stats().get(Counter::kProbesDeferred);
  r.timeouts = lb.a().stats().get(Counter::kRetransmitTimeouts);
  return r;
}

TEST(Review21, ATailLostBesideAnAcknowledgedQpIsProbed) {
  const TailLossRun r = tail_loss_beside_another_qp(false);
  EXPECT_TRUE(r.completed);
  EXPECT_GE(r.probes, 1u);
  EXPECT_EQ(r.timeouts, 0u);
}

TEST(Review21, AStreamsTailIsProbedAfter2To31Turns) {
  const TailLossRun r = tail_loss_beside_another_qp(true);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.timeouts, 0u) << "probes deferred " << r.deferred << " times, then the timeout";
  EXPECT_GE(r.probes, 1u);
}

}  // namespace
}  // namespace roce::test
