// Selective repeat for SENDs and WRITE with immediate between two of our engines (issue 32;
// sr_msg.cc, wire/srh.h, docs/loss-recovery.md "SENDs and WRITE with immediate"): every packet
// carries its message's index, its offset and the message's length, the responder places it in
// the receive WQE the index names and completes the messages in order once whole; the requester
// sends again only what a SACK names. Two engines over the in-memory wire with the injector's
// faults (seeded), and a crafted peer for the responder's rules and the attacks on them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "dataplane/wire/srh.h"
#include "tests/support/crafted_peer.h"
#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;
using wire::Opcode;

constexpr std::uint32_t kPsnA = 0x123456;  // RcOptions' psn_a: A's send queue

bool is_sr_msg(Opcode op) {
  return op == Opcode::kSrSend || op == Opcode::kSrSendImm || op == Opcode::kSrSendInv ||
         op == Opcode::kSrWriteImm;
}

// The standard RC opcodes of messages that consume a receive WQE.
bool is_std_msg(Opcode op) {
  const auto v = wire::raw(op);
  return v <= 0x05 || v == 0x09 || v == 0x0B || v == 0x16 || v == 0x17;
}

struct MsgSpec {
  std::uint32_t msgs = 200;
  std::uint32_t size = 65536;
  std::uint32_t depth = 16;      ///< messages A keeps posted
  std::uint32_t recv_depth = 0;  ///< receive WQEs B keeps posted (0: depth)
  Mtu mtu = Mtu::k4096;
  WrOpcode op = WrOpcode::kSend;  ///< kSend, kSendImm or kWriteImm
  bool sr = true;                 ///< both ends turn selective repeat on
  bool srq = false;               ///< B receives through an SRQ
  std::uint8_t retry_cnt = 7;
  std::uint64_t bytes_per_us = 0;
  std::uint64_t link_delay_ns = 1000;
};

struct MsgResult {
  std::size_t completed = 0;  ///< A's send completions
  std::size_t received = 0;   ///< B's receive completions
  bool data_ok = false;
  bool a_failed = false;  ///< a send completion with an error (A's QP stopped)
  std::uint64_t lost_bytes = 0, lost_packets = 0;
  std::uint64_t retrans_bytes = 0, retrans_packets = 0;
  std::uint64_t sr_frames = 0, std_frames = 0, sacks = 0;
  std::uint64_t ns = 0;
  Stats a, b;
};

MsgResult msg_stream(const MsgSpec& s, const FaultPolicy& a2b, const FaultPolicy& b2a = {}) {
  LoopbackOptions lo;
  lo.a2b = a2b;
  lo.b2a = b2a;
  lo.bytes_per_us = s.bytes_per_us;
  lo.link_delay_ns = s.link_delay_ns;
  Loopback lb(lo);
  RcOptions o;
  o.mtu = s.mtu;
  o.retry_cnt = s.retry_cnt;
  const std::uint32_t rd = s.recv_depth ? s.recv_depth : s.depth;
  o.cap = {s.depth + 1, rd + 1, 1, 1, 64};
  o.use_srq_b = s.srq;
  auto ab = connect(lb, o);  // not a structured binding: clang 14 cannot capture those
  Endpoint& a = ab.first;
  Endpoint& b = ab.second;
  EXPECT_EQ(set_selective_repeat(a, b, s.sr), kOk);
  const bool write = s.op == WrOpcode::kWriteImm;
  const bool imm = s.op != WrOpcode::kSend;
  Buffer src = make_buffer(lb.a(), a.pd, std::size_t{s.msgs} * s.size, 7);
  Buffer dst = make_buffer(lb.b(), b.pd, std::size_t{s.msgs} * s.size, 9);
  MsgResult r;
  std::uint32_t posted = 0, recvs = 0;
  std::vector<Sge> rsge(s.msgs);
  const auto post_recvs = [&] {
    while (recvs < s.msgs && recvs - r.received < rd) {
      RecvWr rw;
      rw.wr_id = recvs;
      if (!write) {
        rsge[recvs] = dst.sge(std::uint64_t{recvs} * s.size, s.size);
        rw.sg_list = &rsge[recvs];
        rw.num_sge = 1;
      }
      const int rc =
          s.srq ? lb.b().post_srq_recv(b.srq, &rw, nullptr) : lb.b().post_recv(b.qp, &rw, nullptr);
      if (rc != kOk) break;
      ++recvs;
    }
  };
  const auto post_more = [&] {
    while (posted < s.msgs && posted - r.completed < s.depth && !r.a_failed) {
      Sge sg = src.sge(std::uint64_t{posted} * s.size, s.size);
      SendWr w = make_wr(posted, &sg, dst, std::uint64_t{posted} * s.size, s.op);
      w.imm_data = posted;
      if (lb.a().post_send(a.qp, &w, nullptr) != kOk) break;
      ++posted;
    }
  };
  Wc wc[16];
  const std::uint64_t t0 = lb.now();
  post_recvs();
  post_more();
  lb.run_until(
      [&] {
        for (int n; (n = a.scq->poll(16, wc)) > 0;) {
          for (int i = 0; i < n; ++i) {
            if (wc[i].status != WcStatus::kSuccess) r.a_failed = true;
            ++r.completed;
          }
        }
        for (int n; (n = b.rcq->poll(16, wc)) > 0;) {
          for (int i = 0; i < n; ++i) {
            EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
            EXPECT_EQ(wc[i].wr_id, r.received) << "receive completions in order";
            EXPECT_EQ(wc[i].byte_len, s.size);
            EXPECT_EQ(wc[i].opcode, write ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv);
            if (imm) {
              EXPECT_TRUE(wc[i].wc_flags & kWcWithImm);
              EXPECT_EQ(wc[i].imm_data, r.received) << "immediates in order";
            }
            ++r.received;
          }
        }
        post_recvs();
        post_more();
        return r.a_failed || (r.completed >= s.msgs && r.received >= s.msgs);
      },
      60'000'000'000ull);
  r.ns = lb.now() - t0;
  lb.settle();
  r.data_ok = src.bytes == dst.bytes;
  for (const auto& rec : lb.records()) {
    if (rec.from == 0 && (is_sr_msg(rec.opcode) || is_std_msg(rec.opcode))) {
      const bool sr = is_sr_msg(rec.opcode);
      (sr ? r.sr_frames : r.std_frames) += 1;
      if (rec.dropped) {
        ++r.lost_packets;
        r.lost_bytes += rec.payload_len - (sr ? wire::SrhView::kSize : 0);
      }
    }
    if (rec.from == 1 && rec.syndrome == SrState::kSackSyndrome) ++r.sacks;
  }
  r.lost_bytes += lb.injector(0).stats().corrupted * mtu_bytes(s.mtu);
  r.a = lb.a().stats();
  r.b = lb.b().stats();
  r.retrans_bytes = r.a.get(Counter::kRetransmittedBytes);
  r.retrans_packets = r.a.get(Counter::kRetransmittedPackets);
  const auto u = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf(
      "[ msg stream ] %u x %u B op %d, SR %s%s: lost %llu packets (%llu B), retransmitted %llu "
      "(%llu B, %.2fx lost; %llu selective), %llu go-back-N, %llu probes, %llu timeouts, %llu "
      "RNR; B placed %llu out of order, %llu unplaced, %llu SACKs; %.3f ms\n",
      s.msgs, s.size, static_cast<int>(s.op), s.sr ? "on" : "off", s.srq ? " (SRQ)" : "",
      u(r.lost_packets), u(r.lost_bytes), u(r.retrans_packets), u(r.retrans_bytes),
      r.lost_bytes ? static_cast<double>(r.retrans_bytes) / static_cast<double>(r.lost_bytes) : 0.0,
      u(r.a.get(Counter::kSrRetransmits)), u(r.a.get(Counter::kRetries)),
      u(r.a.get(Counter::kRetransmitProbes)), u(r.a.get(Counter::kRetransmitTimeouts)),
      u(r.a.get(Counter::kRnrNakRcvd)), u(r.b.get(Counter::kSrOooPlaced)),
      u(r.b.get(Counter::kSrUnplaced)), u(r.sacks), static_cast<double>(r.ns) / 1e6);
  return r;
}

FaultPolicy policy(double drop, double dup, double reorder, double corrupt, std::uint64_t delay,
                   std::uint64_t jitter, std::uint64_t seed = 3202) {
  FaultPolicy f;
  f.drop_rate = drop;
  f.duplicate_rate = dup;
  f.reorder_rate = reorder;
  f.reorder_window = reorder > 0 ? 4 : 0;
  f.corrupt_rate = corrupt;
  f.delay_ns = delay;
  f.jitter_ns = jitter;
  f.seed = seed;
  return f;
}

// ---- streams ---------------------------------------------------------------------------------

// No loss: every packet an SR packet, nothing placed out of order, reported or sent twice.
TEST(SrSend, LosslessSendsNothingTwice) {
  MsgSpec s;
  const MsgResult r = msg_stream(s, {});
  EXPECT_EQ(r.received, s.msgs);
  EXPECT_TRUE(r.data_ok);
  EXPECT_EQ(r.retrans_packets, 0u);
  EXPECT_EQ(r.sacks, 0u);
  EXPECT_EQ(r.std_frames, 0u);
  EXPECT_EQ(r.sr_frames, std::uint64_t{s.msgs} * 16);
  EXPECT_EQ(r.b.get(Counter::kSrUnplaced), 0u);
}

// Three given packets lost (two in one SEND, the first packet of another): exactly those are
// sent again, without go-back-N, and what came after them was placed.
TEST(SrSend, OnlyTheLostPacketsAreSentAgain) {
  FaultPolicy f;
  for (std::uint32_t psn : {16u + 3, 16u + 5, 64u})
    f.drop_psn.push_back({Engine::kFirstQpn, kPsnA + psn, 1, -1});
  MsgSpec s;
  s.msgs = 8;
  s.depth = 8;
  const MsgResult r = msg_stream(s, f);
  EXPECT_EQ(r.received, 8u);
  EXPECT_TRUE(r.data_ok);
  EXPECT_EQ(r.lost_packets, 3u);
  EXPECT_EQ(r.retrans_packets, 3u) << "each lost packet once more, nothing else";
  EXPECT_EQ(r.a.get(Counter::kRetries), 0u) << "no go-back-N";
  EXPECT_EQ(r.b.get(Counter::kSeqErrNakSent), 0u);
  EXPECT_GT(r.b.get(Counter::kSrOooPlaced), 0u);
  EXPECT_EQ(r.b.get(Counter::kSrUnplaced), 0u);
}

class SrSendOps : public ::testing::TestWithParam<WrOpcode> {};

// The bound, for each kind of message: retransmitted bytes <= 2x the bytes lost, at 1%
// loss each way.
TEST_P(SrSendOps, OnePercentLossRetransmitsAtMostTwiceWhatWasLost) {
  MsgSpec s;
  s.op = GetParam();
  s.msgs = 300;
  const MsgResult r =
      msg_stream(s, policy(0.01, 0, 0, 0, 0, 0, 32), policy(0.01, 0, 0, 0, 0, 0, 33));
  EXPECT_EQ(r.received, s.msgs);
  EXPECT_TRUE(r.data_ok);
  ASSERT_GT(r.lost_bytes, 0u);
  EXPECT_LE(r.retrans_bytes, 2 * r.lost_bytes);
  EXPECT_GT(r.b.get(Counter::kSrOooPlaced), 0u);
  EXPECT_EQ(r.b.get(Counter::kSrUnplaced), 0u);
  EXPECT_EQ(r.a.get(Counter::kRetries), 0u) << "no go-back-N";
}

INSTANTIATE_TEST_SUITE_P(Ops, SrSendOps,
                         ::testing::Values(WrOpcode::kSend, WrOpcode::kSendImm,
                                           WrOpcode::kWriteImm),
                         [](const ::testing::TestParamInfo<WrOpcode>& i) {
                           return std::string(i.param == WrOpcode::kSend      ? "Send"
                                              : i.param == WrOpcode::kSendImm ? "SendImm"
                                                                              : "WriteImm");
                         });

// The comparison the bound rests on: go-back-N, on the same faults, resends far more.
TEST(SrSend, GoBackNResendsFarMoreOnTheSameLoss) {
  MsgSpec s;
  s.msgs = 300;
  s.sr = false;
  const MsgResult r =
      msg_stream(s, policy(0.01, 0, 0, 0, 0, 0, 32), policy(0.01, 0, 0, 0, 0, 0, 33));
  EXPECT_EQ(r.received, s.msgs);
  EXPECT_TRUE(r.data_ok);
  EXPECT_EQ(r.sr_frames, 0u) << "not negotiated: standard SENDs";
  EXPECT_GT(r.retrans_bytes, 4 * r.lost_bytes);
}

// Goodput in wire time (the WRITE row's twin, SelectiveRepeat.SimulatedGoodputAtOnePercentLoss):
// a 10 Gb/s wire each way, 2 us, 64 KiB SENDs at MTU 4096, 64 outstanding, 1% dropped each way.
TEST(SrSend, SimulatedGoodputAtOnePercentLoss) {
  MsgSpec s;
  s.msgs = 400;
  s.depth = 64;
  s.bytes_per_us = 1250;
  s.link_delay_ns = 2000;
  const MsgResult clean = msg_stream(s, {});
  const MsgResult sr =
      msg_stream(s, policy(0.01, 0, 0, 0, 0, 0, 32), policy(0.01, 0, 0, 0, 0, 0, 33));
  MsgSpec g = s;
  g.sr = false;
  const MsgResult gbn =
      msg_stream(g, policy(0.01, 0, 0, 0, 0, 0, 32), policy(0.01, 0, 0, 0, 0, 0, 33));
  ASSERT_EQ(clean.received, s.msgs);
  ASSERT_EQ(sr.received, s.msgs);
  ASSERT_EQ(gbn.received, s.msgs);
  EXPECT_TRUE(sr.data_ok);
  const double r_sr = static_cast<double>(clean.ns) / static_cast<double>(sr.ns);
  const double r_gbn = static_cast<double>(clean.ns) / static_cast<double>(gbn.ns);
  std::printf(
      "[ SEND goodput ] lossless %.3f ms; 1%% loss: selective repeat %.3f ms (%.3f of lossless, "
      "%.2fx the lost bytes sent again), go-back-N %.3f ms (%.3f, %.2fx)\n",
      static_cast<double>(clean.ns) / 1e6, static_cast<double>(sr.ns) / 1e6, r_sr,
      static_cast<double>(sr.retrans_bytes) / static_cast<double>(sr.lost_bytes),
      static_cast<double>(gbn.ns) / 1e6, r_gbn,
      static_cast<double>(gbn.retrans_bytes) / static_cast<double>(gbn.lost_bytes));
  EXPECT_GE(r_sr, 0.85) << "the issue's goodput target, in wire time";
  EXPECT_LE(sr.retrans_bytes, 2 * sr.lost_bytes);
}

// Small SENDs, many under way: the requester keeps at most SrState::kMsgs of them in flight
// (the responder's records), so none arrives beyond them.
TEST(SrSend, ManySmallSendsStayWithinTheMessageWindow) {
  MsgSpec s;
  s.msgs = 2000;
  s.size = 1000;
  s.depth = 200;
  s.mtu = Mtu::k1024;
  const MsgResult r =
      msg_stream(s, policy(0.02, 0, 0.02, 0, 0, 0, 41), policy(0.02, 0, 0, 0, 0, 0, 42));
  EXPECT_EQ(r.received, s.msgs);
  EXPECT_TRUE(r.data_ok);
  EXPECT_EQ(r.b.get(Counter::kSrUnplaced), 0u);
  EXPECT_LE(r.retrans_bytes, 2 * r.lost_bytes);
}

// ---- every fault kind of the injector ----------------------------------------------------------

struct FaultCase {
  const char* name;
  FaultPolicy a2b;
  FaultPolicy b2a;
  double max_ratio;  ///< retransmitted / lost bytes at most
};

class SrSendFaults : public ::testing::TestWithParam<FaultCase> {};

TEST_P(SrSendFaults, StreamCompletesInOrderWithTheRightData) {
  const FaultCase& c = GetParam();
  MsgSpec s;
  s.op = WrOpcode::kSendImm;
  const MsgResult r = msg_stream(s, c.a2b, c.b2a);
  EXPECT_EQ(r.received, s.msgs);
  EXPECT_EQ(r.completed, s.msgs);
  EXPECT_TRUE(r.data_ok);
  EXPECT_EQ(r.std_frames, 0u);
  EXPECT_LE(static_cast<double>(r.retrans_bytes), c.max_ratio * static_cast<double>(r.lost_bytes));
}

INSTANTIATE_TEST_SUITE_P(
    Sends, SrSendFaults,
    ::testing::Values(
        FaultCase{"drop", policy(0.02, 0, 0, 0, 0, 0), policy(0.02, 0, 0, 0, 0, 0, 9), 1.2},
        FaultCase{"duplicate", policy(0, 0.05, 0, 0, 0, 0), policy(0, 0.05, 0, 0, 0, 0, 9), 0},
        FaultCase{"reorder", policy(0, 0, 0.05, 0, 0, 0), policy(0, 0, 0.05, 0, 0, 0, 9), 0},
        FaultCase{"corrupt", policy(0, 0, 0, 0.02, 0, 0), policy(0, 0, 0, 0.02, 0, 0, 9), 1.5},
        FaultCase{"delay", policy(0, 0, 0, 0, 20'000, 0), policy(0, 0, 0, 0, 20'000, 0, 9), 0},
        FaultCase{"jitter", policy(0, 0, 0, 0, 1'000, 3'000), policy(0, 0, 0, 0, 1'000, 3'000, 9),
                  0},
        FaultCase{"all", policy(0.01, 0.01, 0.01, 0.01, 1'000, 500),
                  policy(0.01, 0.01, 0.01, 0.01, 1'000, 500, 9), 2.0}),
    [](const ::testing::TestParamInfo<FaultCase>& i) { return std::string(i.param.name); });

// ---- receive queues ----------------------------------------------------------------------------

// No receive WQE: the SEND at ePSN draws an RNR NAK (those after it are not placed), and once
// the application posts, every message arrives, in order.
TEST(SrSend, RnrUntilReceivesArePosted) {
  Loopback lb;
  RcOptions o;
  o.cap = {17, 17, 1, 1, 64};
  auto ab = connect(lb, o);
  Endpoint& a = ab.first;
  Endpoint& b = ab.second;
  ASSERT_EQ(set_selective_repeat(a, b, true), kOk);
  constexpr std::uint32_t kN = 8, kSize = 16384;
  Buffer src = make_buffer(lb.a(), a.pd, kN * kSize, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, kN * kSize, 2);
  std::vector<Sge> sg(kN);
  for (std::uint32_t i = 0; i < kN; ++i) {
    sg[i] = src.sge(i * kSize, kSize);
    SendWr w = make_wr(i, &sg[i], dst, 0, WrOpcode::kSend);
    ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  }
  lb.run_until([] { return false; }, 200'000);
  EXPECT_GT(lb.b().stats().get(Counter::kRnrNakSent), 0u);
  std::vector<Sge> rs(kN);
  for (std::uint32_t i = 0; i < kN; ++i) {
    rs[i] = dst.sge(i * kSize, kSize);
    RecvWr rw;
    rw.wr_id = i;
    rw.sg_list = &rs[i];
    rw.num_sge = 1;
    ASSERT_EQ(lb.b().post_recv(b.qp, &rw, nullptr), kOk);
  }
  const auto wcs = wait_wcs(lb, b.rcq, kN);
  ASSERT_EQ(wcs.size(), kN);
  for (std::uint32_t i = 0; i < kN; ++i) {
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess);
    EXPECT_EQ(wcs[i].wr_id, i);
    EXPECT_EQ(wcs[i].byte_len, kSize);
  }
  EXPECT_EQ(wait_wcs(lb, a.scq, kN).size(), kN);
  EXPECT_TRUE(src.bytes == dst.bytes);
  EXPECT_GT(lb.a().stats().get(Counter::kRnrNakRcvd), 0u);
}

// An SRQ's WQEs go to whichever of its QPs takes one first, so a message is placed early only
// into the WQE it took when it began: later messages wait for their turn (go-back-N between
// messages), and everything arrives, in order.
TEST(SrSend, SrqPlacesWithinTheMessageUnderWay) {
  MsgSpec s;
  s.srq = true;
  s.msgs = 100;
  const MsgResult r = msg_stream(s, policy(0.02, 0, 0, 0, 0, 0, 5), policy(0.02, 0, 0, 0, 0, 0, 6));
  EXPECT_EQ(r.received, s.msgs);
  EXPECT_TRUE(r.data_ok);
  EXPECT_GT(r.b.get(Counter::kSrOooPlaced), 0u);
}

// Selective repeat at one end only (an application that skipped the exchange): the SR packets
// of A are a transport B does not speak, dropped and counted, and A's QP ends with its retry
// budget spent instead of B taking them for something else. B alone: A's standard SENDs work.
TEST(SrSend, OneSidedFailsClearlyOrWorks) {
  {
    LoopbackOptions lo;
    Loopback lb(lo);
    RcOptions o;
    o.retry_cnt = 2;
    o.cap = {5, 5, 1, 1, 64};
    auto ab = connect(lb, o);
    Endpoint& a = ab.first;
    Endpoint& b = ab.second;
    ASSERT_EQ(lb.a().set_selective_repeat(a.qp, true), kOk);
    Buffer src = make_buffer(lb.a(), a.pd, 4096, 1);
    Buffer dst = make_buffer(lb.b(), b.pd, 4096, 2);
    Sge rsg = dst.sge();
    RecvWr rw;
    rw.sg_list = &rsg;
    rw.num_sge = 1;
    ASSERT_EQ(lb.b().post_recv(b.qp, &rw, nullptr), kOk);
    Sge sg = src.sge();
    SendWr w = make_wr(1, &sg, dst, 0, WrOpcode::kSend);
    ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
    const auto wcs = wait_wcs(lb, a.scq, 1, 1'000'000'000ull);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
    EXPECT_GT(lb.b().stats().get(Counter::kRxDropWrongTransport), 0u);
    Wc wc;
    EXPECT_EQ(b.rcq->poll(1, &wc), 0) << "nothing delivered";
  }
  LoopbackOptions lo;
  Loopback lb(lo);
  RcOptions o;
  auto ab = connect(lb, o);
  ASSERT_EQ(lb.b().set_selective_repeat(ab.second.qp, true), kOk);
  Buffer src = make_buffer(lb.a(), ab.first.pd, 4096, 1);
  Buffer dst = make_buffer(lb.b(), ab.second.pd, 4096, 2);
  Sge rsg = dst.sge();
  RecvWr rw;
  rw.sg_list = &rsg;
  rw.num_sge = 1;
  ASSERT_EQ(lb.b().post_recv(ab.second.qp, &rw, nullptr), kOk);
  Sge sg = src.sge();
  SendWr w = make_wr(1, &sg, dst, 0, WrOpcode::kSend);
  ASSERT_EQ(lb.a().post_send(ab.first.qp, &w, nullptr), kOk);
  const auto wcs = wait_wcs(lb, ab.second.rcq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(src.bytes == dst.bytes);
}

// SEND with invalidate whose first packet is lost: its other packets are placed, and when it
// is whole it completes with the key and frees the fast-registered MR; one naming an MR that is
// not fast-registered is a remote invalid request (class C), as on the go-back-N path.
TEST(SrSend, SendWithInvalidateFreesTheMrWhenWhole) {
  LoopbackOptions lo;
  lo.a2b.drop_psn.push_back({Engine::kFirstQpn, kPsnA, 1, -1});
  Loopback lb(lo);
  RcOptions o;
  o.retry_cnt = 3;
  auto ab = connect(lb, o);
  Endpoint& a = ab.first;
  Endpoint& b = ab.second;
  ASSERT_EQ(set_selective_repeat(a, b, true), kOk);
  std::vector<std::uint8_t> region(8192, 0);
  Mr* fr = lb.b().alloc_mr(b.pd, 1 << 20);
  ASSERT_NE(fr, nullptr);
  SendWr reg;
  reg.opcode = WrOpcode::kRegMr;
  reg.send_flags = kSendSignaled;
  reg.reg = {fr->key, 0x5A, reinterpret_cast<std::uint64_t>(region.data()), region.size(),
             kAccessLocalWrite | kAccessRemoteWrite};
  ASSERT_EQ(lb.b().post_send(b.qp, &reg, nullptr), kOk);
  ASSERT_EQ(wait_wcs(lb, b.scq, 1).at(0).status, WcStatus::kSuccess);
  const std::uint32_t rkey = fr->key;
  Buffer src = make_buffer(lb.a(), a.pd, 8192, 3);
  Buffer dst = make_buffer(lb.b(), b.pd, 2 * 8192, 4);
  for (std::uint64_t i = 0; i < 2; ++i) {
    Sge rs = dst.sge(i * 8192, 8192);
    RecvWr rw;
    rw.wr_id = 60 + i;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ASSERT_EQ(lb.b().post_recv(b.qp, &rw, nullptr), kOk);
  }
  Sge s = src.sge();
  SendWr inv = make_wr(2, &s, dst, 0, WrOpcode::kSendInv);
  inv.invalidate_rkey = rkey;
  ASSERT_EQ(lb.a().post_send(a.qp, &inv, nullptr), kOk);
  ASSERT_EQ(wait_wcs(lb, a.scq, 1).at(0).status, WcStatus::kSuccess);
  auto rw = wait_wcs(lb, b.rcq, 1);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(rw[0].wc_flags & kWcWithInv);
  EXPECT_EQ(rw[0].invalidated_rkey, rkey);
  EXPECT_EQ(rw[0].byte_len, 8192u);
  EXPECT_EQ(fr->state, MrState::kFree);
  EXPECT_TRUE(std::equal(src.bytes.begin(), src.bytes.end(), dst.bytes.begin()));
  EXPECT_GT(lb.b().stats().get(Counter::kSrOooPlaced), 0u) << "placed past the lost first";
  inv.invalidate_rkey = dst.mr->key;  // not a fast-registered MR: not B's to invalidate
  ASSERT_EQ(lb.a().post_send(a.qp, &inv, nullptr), kOk);
  EXPECT_EQ(wait_wcs(lb, a.scq, 1).at(0).status, WcStatus::kRemInvReqErr);
  rw = wait_wcs(lb, b.rcq, 1);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].status, WcStatus::kRemInvReqErr);
}

// WRITEs, READs, SENDs (with and without immediate, of every size from 0 up), WRITEs with
// immediate and atomics on one QP, loss, duplication and reordering both ways: every receive
// completes in order with its length and immediate, every byte lands where it should.
class SrSendMixed : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(SrSendMixed, OperationsUnderLoss) {
  LoopbackOptions lo;
  lo.b2a = policy(0.03, 0.01, 0.01, 0, 0, 0, GetParam());
  lo.a2b = policy(0.03, 0.01, 0.01, 0.01, 0, 0, GetParam() + 1);
  Loopback lb(lo);
  RcOptions o;
  o.cap = {65, 80, 1, 1, 64};
  auto ab = connect(lb, o);
  Endpoint& a = ab.first;
  Endpoint& b = ab.second;
  ASSERT_EQ(set_selective_repeat(a, b, true), kOk);
  constexpr std::uint32_t kOps = 300, kSize = 16384;
  Buffer remote = make_buffer(lb.b(), b.pd, std::size_t{kOps} * kSize, 3);
  Buffer local = make_buffer(lb.a(), a.pd, std::size_t{kOps} * kSize, 4);
  Buffer inbox = make_buffer(lb.b(), b.pd, std::size_t{kOps} * kSize, 5);
  Buffer counter = make_buffer(lb.b(), b.pd, 8, 0);
  std::fill(counter.bytes.begin(), counter.bytes.end(), 0);
  std::vector<std::uint8_t> expect_remote = remote.bytes, expect_local = local.bytes;
  std::vector<std::uint8_t> expect_inbox = inbox.bytes;
  struct Expect {
    std::uint32_t len;
    std::uint32_t imm;
    bool has_imm;
    bool write;
  };
  std::vector<Expect> expect_recv;
  std::uint32_t posted = 0, atomics = 0, recv_posted = 0, recv_done = 0;
  std::vector<Wc> wcs;
  Wc wc[16];
  std::vector<Sge> rsges(kOps);
  const auto post_recvs = [&] {
    while (recv_posted < kOps && recv_posted - recv_done < 64) {
      rsges[recv_posted] = inbox.sge(std::uint64_t{recv_posted} * kSize, kSize);
      RecvWr rw;
      rw.wr_id = recv_posted;
      rw.sg_list = &rsges[recv_posted];
      rw.num_sge = 1;
      ASSERT_EQ(lb.b().post_recv(b.qp, &rw, nullptr), kOk);
      ++recv_posted;
    }
  };
  post_recvs();
  const auto post_more = [&] {
    while (posted < kOps && posted - wcs.size() < 64) {
      const std::uint64_t off = std::uint64_t{posted} * kSize;
      const std::uint32_t kind =
          posted % 6;  // 0 WRITE, 1 READ, 2 SEND, 3 SEND+imm, 4 WRITE+imm, 5 atomic
      // SENDs of every size: 0, 1, one packet, a packet and a byte, ..., the whole 16 KiB
      const std::uint32_t len = kind == 2 || kind == 3 ? (posted * 2477u) % (kSize + 1) : kSize;
      Sge sg = local.sge(off, len);
      SendWr w;
      if (kind == 1) {
        w = make_wr(posted, &sg, remote, off, WrOpcode::kRead);
        std::copy_n(expect_remote.begin() + static_cast<std::ptrdiff_t>(off), kSize,
                    expect_local.begin() + static_cast<std::ptrdiff_t>(off));
      } else if (kind == 2 || kind == 3) {
        w = make_wr(posted, &sg, remote, 0, kind == 2 ? WrOpcode::kSend : WrOpcode::kSendImm);
        w.imm_data = 0xABC00000u + posted;
        const std::size_t slot = expect_recv.size();
        std::copy_n(expect_local.begin() + static_cast<std::ptrdiff_t>(off), len,
                    expect_inbox.begin() + static_cast<std::ptrdiff_t>(slot * kSize));
        expect_recv.push_back({len, w.imm_data, kind == 3, false});
      } else if (kind == 5) {
        sg = local.sge(off, 8);
        w = make_wr(posted, &sg, counter, 0, WrOpcode::kFetchAdd);
        w.atomic = {counter.addr(), counter.mr->key, 1, 0};
        const std::uint64_t before = atomics++;
        std::memcpy(expect_local.data() + off, &before, 8);
      } else {
        w = make_wr(posted, &sg, remote, off, kind == 0 ? WrOpcode::kWrite : WrOpcode::kWriteImm);
        w.imm_data = 0xDEF00000u + posted;
        std::copy_n(expect_local.begin() + static_cast<std::ptrdiff_t>(off), kSize,
                    expect_remote.begin() + static_cast<std::ptrdiff_t>(off));
        if (kind == 4) expect_recv.push_back({kSize, w.imm_data, true, true});
      }
      if (lb.a().post_send(a.qp, &w, nullptr) != kOk) break;
      ++posted;
    }
  };
  post_more();
  lb.run_until(
      [&] {
        for (int n; (n = a.scq->poll(16, wc)) > 0;)
          for (int i = 0; i < n; ++i) wcs.push_back(wc[i]);
        for (int n; (n = b.rcq->poll(16, wc)) > 0;) {
          for (int i = 0; i < n; ++i) {
            EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
            EXPECT_EQ(wc[i].wr_id, recv_done) << "receives in order";
            if (recv_done < expect_recv.size()) {
              const Expect& e = expect_recv[recv_done];
              EXPECT_EQ(wc[i].byte_len, e.len) << recv_done;
              EXPECT_EQ(wc[i].opcode, e.write ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv);
              EXPECT_EQ((wc[i].wc_flags & kWcWithImm) != 0, e.has_imm) << recv_done;
              if (e.has_imm) {
                EXPECT_EQ(wc[i].imm_data, e.imm) << recv_done;
              }
            }
            ++recv_done;
          }
          post_recvs();
        }
        post_more();
        return wcs.size() >= kOps;
      },
      60'000'000'000ull);
  lb.settle();
  ASSERT_EQ(wcs.size(), kOps);
  for (std::size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess) << i;
    EXPECT_EQ(wcs[i].wr_id, i);
  }
  EXPECT_EQ(recv_done, expect_recv.size());
  EXPECT_TRUE(local.bytes == expect_local);
  EXPECT_TRUE(remote.bytes == expect_remote);
  // A SEND's receive slot holds its bytes (the rest of the slot is the WQE's to keep).
  for (std::size_t k = 0; k < expect_recv.size(); ++k) {
    if (expect_recv[k].write) continue;
    const auto at = static_cast<std::ptrdiff_t>(k * kSize);
    EXPECT_TRUE(std::equal(expect_inbox.begin() + at,
                           expect_inbox.begin() + at + expect_recv[k].len,
                           inbox.bytes.begin() + at))
        << "SEND " << k;
  }
  std::uint64_t final_count = 0;
  std::memcpy(&final_count, counter.bytes.data(), 8);
  EXPECT_EQ(final_count, atomics) << "each atomic executed once";
  EXPECT_GT(lb.b().stats().get(Counter::kSrOooPlaced), 0u);
  EXPECT_GT(lb.a().stats().get(Counter::kSrRetransmits), 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, SrSendMixed, ::testing::Values(11, 21, 31, 41, 51));

// ---- the responder's rules and the attacks on them (a crafted peer, MTU 256) -------------------

constexpr std::uint32_t kE = CraftedPeer::kEpsn;

// Where the peer's message indices start (SrIndexBase::rx): the crafted peer knows it, as our
// requester does. 4 below the 32-bit wrap, so the indices of these tests cross it.
constexpr std::uint32_t kBase = 0xFFFFFFFCu;

struct SrPeer : CraftedPeer {
  SrPeer() : CraftedPeer(opts()) {
    EXPECT_EQ(eng.set_selective_repeat(qp, true, {0, kBase}), kOk);
    std::fill(mem.begin(), mem.end(), 0);
  }
  static CraftedOptions opts() {
    CraftedOptions o;
    o.mem_size = 8192;
    return o;
  }
  /// Receive WQE `id` of `len` bytes at mem + off.
  void post(std::uint64_t id, std::uint64_t off, std::uint32_t len) {
    Sge s{mem_addr() + off, len, mr->key};
    RecvWr r;
    r.wr_id = id;
    r.sg_list = &s;
    r.num_sge = 1;
    ASSERT_EQ(eng.post_recv(qp, &r, nullptr), kOk);
  }
  /// An SR packet of message `index` (from the base): the SR header, then `len` bytes of `fill`.
  void sr(Opcode op, std::uint32_t psn, std::uint32_t index, std::uint32_t off, std::uint32_t total,
          std::uint32_t len, std::uint8_t fill, bool ack_req = false, std::uint32_t imm = 0) {
    Req r;
    r.op = op;
    r.psn = psn;
    r.ack_req = ack_req;
    r.imm = imm;
    r.ieth_rkey = imm;
    r.bytes.assign(wire::SrhView::kSize + len, fill);
    wire::SrhView(r.bytes.data()).set(kBase + index, off, total);
    r.payload_len = r.bytes.size();
    r.va = mem_addr() + 4096 + off;
    r.rkey = mr->key;
    r.dma_len = len;
    inject(r);
  }
  std::vector<Wc> recvs() {
    std::vector<Wc> out;
    Wc wc[8];
    for (int n; (n = cq->poll(8, wc)) > 0;) out.insert(out.end(), wc, wc + n);
    return out;
  }
  std::uint64_t count(Counter c) const { return eng.stats().get(c); }
};

// In order and past a gap, with an immediate: the message lands in its WQE, completes once, in
// order, with its length and immediate, and the ACK covers it.
TEST(SrSendResponder, PlacesPastAGapAndCompletesWhenWhole) {
  SrPeer t;
  t.post(7, 0, 1024);
  t.post(8, 1024, 1024);
  t.sr(Opcode::kSrSendImm, kE + 2, 0, 512, 600, 88, 0x33, false, 0x1234);  // last of message 0
  t.sr(Opcode::kSrSendImm, kE + 1, 0, 256, 600, 256, 0x22, false, 0x1234);
  t.sr(Opcode::kSrSend, kE + 3, 1, 0, 10, 10, 0x44, true);  // message 1, alone
  EXPECT_EQ(t.count(Counter::kSrOooPlaced), 3u);
  EXPECT_TRUE(t.recvs().empty()) << "nothing completes before the first packet";
  t.sr(Opcode::kSrSendImm, kE, 0, 0, 600, 256, 0x11, false, 0x1234);
  const auto out = t.flush();
  const auto wcs = t.recvs();
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 7u);
  EXPECT_EQ(wcs[0].byte_len, 600u);
  EXPECT_EQ(wcs[0].imm_data, 0x1234u);
  EXPECT_TRUE(wcs[0].wc_flags & kWcWithImm);
  EXPECT_EQ(wcs[1].wr_id, 8u);
  EXPECT_EQ(wcs[1].byte_len, 10u);
  EXPECT_FALSE(wcs[1].wc_flags & kWcWithImm);
  EXPECT_EQ(t.mem[0], 0x11);
  EXPECT_EQ(t.mem[256], 0x22);
  EXPECT_EQ(t.mem[599], 0x33);
  EXPECT_EQ(t.mem[600], 0) << "nothing past the message";
  EXPECT_EQ(t.mem[1024], 0x44);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().psn, kE + 3);
  EXPECT_EQ(t.qp->sr->nkept, 0u);
}

// A WRITE with immediate: its bytes land through its RETH as they come, its receive WQE is
// consumed and completes when it is whole; a key that does not hold is not placed.
TEST(SrSendResponder, WriteWithImmediateCompletesWhenWhole) {
  SrPeer t;
  t.post(5, 0, 0);
  CraftedPeer::Req bad;
  bad.op = Opcode::kSrWriteImm;
  bad.psn = kE + 1;
  bad.bytes.assign(wire::SrhView::kSize + 256, 0x66);
  wire::SrhView(bad.bytes.data()).set(kBase, 256, 512);
  bad.payload_len = bad.bytes.size();
  bad.va = t.mem_addr() + 4096 + 256;
  bad.rkey = t.mr->key ^ 0x100;
  bad.dma_len = 256;
  t.inject(bad);
  EXPECT_EQ(t.count(Counter::kSrUnplaced), 1u);
  EXPECT_EQ(t.mem[4096 + 256], 0);
  t.sr(Opcode::kSrWriteImm, kE + 1, 0, 256, 512, 256, 0x22, false, 99);
  EXPECT_EQ(t.mem[4096 + 256], 0x22) << "placed early";
  t.sr(Opcode::kSrWriteImm, kE, 0, 0, 512, 256, 0x11, false, 99);
  t.flush();
  const auto wcs = t.recvs();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(wcs[0].byte_len, 512u);
  EXPECT_EQ(wcs[0].imm_data, 99u);
  EXPECT_EQ(t.mem[4096], 0x11);
}

// Hostile or broken packets past ePSN are counted and not placed, and write nothing: an index
// beyond the records (outside the window: counted as forged), a message longer than its WQE, an
// index with no WQE posted, an offset that is not a packet boundary, a data length other than its
// place's, a payload shorter than the SR header, a zero-length message.
TEST(SrSendAttack, MalformedOrUnplaceablePacketsWriteNothing) {
  SrPeer t;
  t.post(1, 0, 512);
  t.sr(Opcode::kSrSend, kE + 1, SrState::kMsgs, 0, 256, 256, 0xEE);  // beyond the records
  t.sr(Opcode::kSrSend, kE + 2, 0, 256, 1024, 256, 0xEE);            // longer than its WQE
  t.sr(Opcode::kSrSend, kE + 3, 1, 0, 256, 256, 0xEE);               // no WQE for message 1
  t.sr(Opcode::kSrSend, kE + 4, 0, 100, 512, 256, 0xEE);             // offset mid-packet
  t.sr(Opcode::kSrSend, kE + 5, 0, 256, 512, 200, 0xEE);             // short for its place
  t.sr(Opcode::kSrSend, kE + 6, 0, 0, 0, 0, 0xEE);                   // zero-length
  CraftedPeer::Req runt;
  runt.op = Opcode::kSrSend;
  runt.psn = kE + 7;
  runt.payload_len = 8;  // shorter than the SR header
  t.inject(runt);
  EXPECT_EQ(t.count(Counter::kSrForgedDropped), 1u);
  EXPECT_EQ(t.count(Counter::kSrUnplaced), 6u);
  EXPECT_EQ(t.count(Counter::kSrOooPlaced), 0u);
  EXPECT_EQ(std::count(t.mem.begin(), t.mem.end(), 0), static_cast<long>(t.mem.size()));
  EXPECT_EQ(t.qp->sr->nkept, 0u);
  const auto out = t.flush();
  ASSERT_EQ(out.size(), 1u) << "one sequence NAK for the gap";
  EXPECT_EQ(out[0].syndrome, 0x60);
  EXPECT_NE(t.qp->state, QpState::kErr);
}

// In order, the same packets are the peer's word: a message longer than its WQE completes it
// with a length error and stops the QP (as on the go-back-N path); no WQE is an RNR NAK.
TEST(SrSendAttack, InOrderTooLongIsALengthErrorAndNoWqeIsRnr) {
  {
    SrPeer t;
    t.sr(Opcode::kSrSend, kE, 0, 0, 256, 256, 0x11, true);
    const auto out = t.flush();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].syndrome & 0x60, 0x20) << "RNR NAK";
    EXPECT_EQ(out[0].psn, kE);
    t.post(3, 0, 256);
    t.sr(Opcode::kSrSend, kE, 0, 0, 256, 256, 0x11, true);
    t.flush();
    const auto wcs = t.recvs();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  }
  SrPeer t;
  t.post(1, 0, 512);
  t.sr(Opcode::kSrSend, kE, 0, 0, 1024, 256, 0x11);
  const auto wcs = t.recvs();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kLocLenErr);
  EXPECT_EQ(t.qp->state, QpState::kErr);
  EXPECT_EQ(t.mem[512], 0) << "nothing past the WQE";
}

// A forged packet for message 1 at a PSN that the real message 0 spans, placed first: when
// message 0 arrives in order, the forged record is dropped with what it placed, and the real
// packet at that PSN is placed, not taken for a second copy of the forged one. (Without the
// rule, message 0 completed with the forged packet's place empty: "acknowledged, never written".)
TEST(SrSendAttack, AForgedRecordLosesToThePacketInOrder) {
  SrPeer t;
  t.post(10, 0, 1024);
  t.post(11, 1024, 1024);
  t.sr(Opcode::kSrSend, kE + 1, 1, 0, 256, 256, 0xEE);
  EXPECT_EQ(t.count(Counter::kSrOooPlaced), 1u) << "placed: its bytes went to WQE 11";
  t.sr(Opcode::kSrSend, kE, 0, 0, 768, 256, 0x11);
  t.sr(Opcode::kSrSend, kE + 1, 0, 256, 768, 256, 0x22);
  t.sr(Opcode::kSrSend, kE + 2, 0, 512, 768, 256, 0x33, true);
  t.sr(Opcode::kSrSend, kE + 3, 1, 0, 100, 100, 0x44, true);
  t.flush();
  const auto wcs = t.recvs();
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 10u);
  EXPECT_EQ(wcs[0].byte_len, 768u);
  EXPECT_EQ(t.mem[256], 0x22) << "the real packet, not swallowed";
  EXPECT_EQ(wcs[1].wr_id, 11u);
  EXPECT_EQ(wcs[1].byte_len, 100u);
  EXPECT_EQ(t.mem[1024], 0x44);
  EXPECT_NE(t.qp->state, QpState::kErr);
}

// A forged packet that claims message 1 begins at ePSN (where the real message 0 begins): placed
// in WQE 11 past the gap; when message 0 arrives in order, the forged record is dropped with what
// it placed (counted), and the real message 1 is taken when it comes.
TEST(SrSendAttack, AnOverlappingForgedRecordIsForgotten) {
  SrPeer t;
  t.post(10, 0, 1024);
  t.post(11, 1024, 1024);
  t.sr(Opcode::kSrSend, kE + 1, 1, 256, 512, 256, 0xEE);
  EXPECT_EQ(t.count(Counter::kSrOooPlaced), 1u);
  t.sr(Opcode::kSrSend, kE, 0, 0, 100, 100, 0x11, true);
  t.flush();
  EXPECT_EQ(t.recvs().size(), 1u);
  EXPECT_EQ(t.qp->resp.epsn.raw(), kE + 1) << "the forged packet is not stepped over";
  EXPECT_EQ(t.qp->sr->nkept, 0u);
  EXPECT_EQ(t.count(Counter::kSrUnplaced), 1u);
  t.sr(Opcode::kSrSend, kE + 1, 1, 0, 50, 50, 0x22, true);
  t.flush();
  const auto wcs = t.recvs();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 11u);
  EXPECT_EQ(wcs[0].byte_len, 50u);
  EXPECT_EQ(t.mem[1024], 0x22);
}

// Six real SENDs (lengths drawn, packets shuffled, some twice) with random SR packets among
// them (index, offset, length, PSN, opcode and AckReq drawn near what is valid; WRITEs with
// immediate keyless), against receive WQEs with guard bytes around them, then the real packets
// again in order (the requester's copies): nothing is written outside the WQEs, every receive
// completion names a posted WQE with a length within it. The QP may end in error (a forged
// packet in order is the peer's word).
TEST(SrSendAttack, RandomPacketsNeverWriteOutsideTheWqes) {
  std::mt19937 rng(20261129);
  const auto R = [&rng] { return static_cast<std::uint32_t>(rng()); };
  std::uint64_t placed = 0, unplaced = 0, completed = 0, errors = 0, dead = 0;
  constexpr std::uint32_t kWqes = 6, kLen = 1024, kGap = 256;
  const Opcode ops[] = {Opcode::kSrSend, Opcode::kSrSendImm, Opcode::kSrSendInv,
                        Opcode::kSrWriteImm};
  for (int round = 0; round < 60; ++round) {
    SrPeer t;
    std::fill(t.mem.begin(), t.mem.end(), 0xA5);  // guards everywhere but the WQEs
    for (std::uint32_t i = 0; i < kWqes; ++i) {
      std::fill_n(t.mem.begin() + kGap + i * (kLen + kGap), kLen, 0);
      t.post(100 + i, kGap + i * (kLen + kGap), kLen);
    }
    struct P {
      Opcode op;
      std::uint32_t psn, index, off, total, len;
    };
    std::vector<P> real;
    std::uint32_t psn = kE;
    for (std::uint32_t m = 0; m < kWqes; ++m) {
      const std::uint32_t total = 1 + R() % kLen;
      const Opcode op = R() % 2 ? Opcode::kSrSend : Opcode::kSrSendImm;
      for (std::uint32_t off = 0; off < total; off += 256)
        real.push_back({op, psn++, m, off, total, std::min(256u, total - off)});
    }
    std::vector<P> order = real;
    std::shuffle(order.begin(), order.end(), rng);
    const auto send = [&t, &R](const P& p, bool junk) {
      CraftedPeer::Req r;
      r.op = p.op;
      r.psn = p.psn & 0xFFFFFF;
      r.ack_req = R() % 4 == 0;
      r.bytes.assign(wire::SrhView::kSize + p.len, static_cast<std::uint8_t>(p.psn));
      wire::SrhView(r.bytes.data()).set(kBase + p.index, p.off, p.total);
      if (junk && R() % 32 == 0) r.bytes.resize(R() % wire::SrhView::kSize);
      r.payload_len = r.bytes.size();
      r.va = t.mem_addr() + R() % 8192;
      r.rkey = t.mr->key ^ 0x100;  // never the MR's: a WRITE with immediate places nothing
      r.dma_len = p.len;
      r.imm = p.op == Opcode::kSrSendImm && !junk ? 7 : R();
      r.ieth_rkey = r.imm;
      t.inject(r);
    };
    for (std::size_t k = 0; k < order.size() && t.qp->state != QpState::kErr; ++k) {
      if (R() % 10 < 4) {  // a forged or broken packet first
        const std::uint32_t total = R() % 4 == 0 ? R() : R() % 2048;
        const std::uint32_t off = R() % 8 == 0 ? R() % 4096 : (R() % 8) * 256;
        const std::uint32_t len =
            R() % 4 == 0 ? R() % 300 : std::min<std::uint32_t>(256, total > off ? total - off : 0);
        send({ops[R() % 4], kE + R() % 30, R() % 8, off, total, len}, true);
      }
      send(order[k], false);
      if (R() % 8 == 0) send(order[R() % order.size()], false);
      if (k % 8 == 0) t.flush();
    }
    for (const P& p : real) {
      if (t.qp->state == QpState::kErr) break;
      send(p, false);
    }
    t.flush();
    dead += t.qp->state == QpState::kErr;
    for (const Wc& wc : t.recvs()) {
      ++completed;
      if (wc.status != WcStatus::kSuccess && wc.status != WcStatus::kWrFlushErr) ++errors;
      EXPECT_GE(wc.wr_id, 100u);
      EXPECT_LT(wc.wr_id, 100u + kWqes);
      if (wc.status == WcStatus::kSuccess) {
        EXPECT_LE(wc.byte_len, kLen);
      }
    }
    for (std::uint32_t i = 0; i <= kWqes; ++i) {
      const std::size_t g = i * (kLen + kGap);
      const std::size_t n = i == kWqes ? t.mem.size() - g : kGap;
      EXPECT_EQ(std::count(t.mem.begin() + static_cast<std::ptrdiff_t>(g),
                           t.mem.begin() + static_cast<std::ptrdiff_t>(g + n), 0xA5),
                static_cast<long>(n))
          << "round " << round << ": a guard before WQE " << i << " was written";
    }
    placed += t.count(Counter::kSrOooPlaced);
    unplaced += t.count(Counter::kSrUnplaced);
  }
  std::printf(
      "[ random SR packets ] placed %llu, unplaced %llu, %llu receive completions (%llu in "
      "error), %llu of 60 QPs stopped\n",
      static_cast<unsigned long long>(placed), static_cast<unsigned long long>(unplaced),
      static_cast<unsigned long long>(completed), static_cast<unsigned long long>(errors),
      static_cast<unsigned long long>(dead));
  EXPECT_GT(placed, 100u);
  EXPECT_GT(unplaced, 100u);
}

// SR opcodes at a QP that did not negotiate selective repeat are another transport: dropped,
// counted, nothing written, the QP unharmed.
TEST(SrSendAttack, SrOpcodesWithoutSelectiveRepeatAreDropped) {
  CraftedPeer t;
  ASSERT_EQ(t.eng.set_selective_repeat(t.qp, false), kOk);
  std::fill(t.mem.begin(), t.mem.end(), 0);
  t.post_recvs(1, 1024);
  CraftedPeer::Req r;
  r.op = Opcode::kSrSend;
  r.psn = kE;
  r.bytes.assign(wire::SrhView::kSize + 64, 0x55);
  wire::SrhView(r.bytes.data()).set(0, 0, 64);
  r.payload_len = r.bytes.size();
  t.inject(r);
  EXPECT_TRUE(t.flush().empty());
  EXPECT_EQ(t.eng.stats().get(Counter::kRxDropWrongTransport), 1u);
  EXPECT_EQ(std::count(t.mem.begin(), t.mem.end(), 0), static_cast<long>(t.mem.size()));
  EXPECT_NE(t.qp->state, QpState::kErr);
}

}  // namespace
}  // namespace roce::test
