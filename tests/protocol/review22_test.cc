// Attacker review of session 21's packet-path code (review22-attacker): selective repeat on the
// fast paths (srfast37: req_fast, req_fast_zc from a message's first packet, rx_fast for an SR
// QP's in-order WRITE Only), the QP layout and the scheduler's prefetch pipeline (qp37), mlx5's
// DCQCN knobs (cc37). Each test states what a safe engine does against a forger on the segment,
// a hostile peer or a hostile local program. Tests that fail on the code they were written
// against are DISABLED_ (run them with --gtest_also_run_disabled_tests); the fix removes the
// prefix.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dataplane/engine/cc/dcqcn.h"
#include "dataplane/wire/bytes.h"
#include "dataplane/wire/icrc.h"
#include "dataplane/wire/ip.h"
#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;

constexpr std::size_t kBuf = 1 << 16;
constexpr std::uint64_t kSrcIova = 0x10'0000'0000ull;  // the same I/O addresses in both pairs
constexpr std::uint64_t kDstIova = 0x20'0000'0000ull;
constexpr std::uint64_t kRcvIova = 0x30'0000'0000ull;
constexpr std::uint32_t kRecvSlot = 4096;
constexpr std::uint32_t kAccess =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
constexpr std::size_t kL3 = 14, kL4 = 34, kBth = 42, kReth = 54;

LoopbackOptions quiet() {
  LoopbackOptions o;
  o.record = false;
  return o;
}

EngineConfig config(int side, bool fast) {
  EngineConfig c = Loopback::default_config(side);
  c.fast_paths = fast;
  c.tx_slots = 256;
  return c;
}

// One connected pair, selective repeat on or off, fast paths on or off, its buffers at the same
// I/O addresses as every other pair's.
struct Pair {
  Pair(bool fast, bool sr) : lb(quiet(), config(0, fast), config(1, fast)) {
    std::tie(a, b) = connect(lb);
    if (sr) {
      EXPECT_EQ(set_selective_repeat(a, b, true), kOk);
    }
    src.resize(kBuf);
    dst.resize(kBuf);
    rcv.resize(kBuf);
    for (std::size_t i = 0; i < kBuf; ++i) src[i] = static_cast<std::uint8_t>(i * 7 + 1);
    smr = a.eng->reg_mr(a.pd, src.data(), kBuf, kSrcIova, kAccess);
    dmr = b.eng->reg_mr(b.pd, dst.data(), kBuf, kDstIova, kAccess);
    rmr = b.eng->reg_mr(b.pd, rcv.data(), kBuf, kRcvIova, kAccess);
    for (std::uint64_t i = 0; i < 64; ++i) {
      const Sge s{kRcvIova + (i % (kBuf / kRecvSlot)) * kRecvSlot, kRecvSlot, rmr->key};
      RecvWr r;
      r.wr_id = i;
      r.sg_list = &s;
      r.num_sge = 1;
      EXPECT_EQ(b.eng->post_recv(b.qp, &r, nullptr), kOk);
    }
  }
  void post(WrOpcode op, std::uint32_t len, std::uint64_t src_off, std::uint64_t dst_off,
            std::uint64_t id) {
    const Sge s{kSrcIova + src_off, len, smr->key};
    SendWr wr;
    wr.wr_id = id;
    wr.opcode = op;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.send_flags = kSendSignaled;
    wr.rdma = {kDstIova + dst_off, dmr->key};
    ASSERT_EQ(a.eng->post_send(a.qp, &wr, nullptr), kOk);
  }
  Engine& ea() { return *a.eng; }
  Engine& eb() { return *b.eng; }
  Loopback lb;
  Endpoint a, b;
  std::vector<std::uint8_t> src, dst, rcv;
  Mr *smr = nullptr, *dmr = nullptr, *rmr = nullptr;
};

void fix(std::vector<std::uint8_t>& f) {
  if (f.size() < kL3 + 20) return;
  wire::store_be16(f.data() + kL3 + 10, 0);
  wire::store_be16(f.data() + kL3 + 10, wire::ipv4_header_checksum(f.data() + kL3, 20));
  const std::size_t end = kL3 + wire::load_be16(f.data() + kL3 + 2);
  if (end > f.size() || end < kL3 + 48 + 4) return;
  wire::store_le32(f.data() + end - 4,
                   wire::compute_icrc(f.data() + kL3, end - 4 - kL3, wire::IpVersion::kV4));
}

// The responder's side of two pairs after the same frames: the same effects.
void expect_same_responder(Pair& p, Pair& q, const std::string& what) {
  for (std::size_t i = 0; i < kCounterCount; ++i) {
    const auto k = static_cast<Counter>(i);
    if (k == Counter::kTxFastPath || k == Counter::kRxFastPath) continue;
    ASSERT_EQ(p.eb().stats().get(k), q.eb().stats().get(k)) << what << ": " << to_string(k);
  }
  const Qp& x = *p.b.qp;
  const Qp& y = *q.b.qp;
  ASSERT_EQ(x.resp.epsn, y.resp.epsn) << what;
  ASSERT_EQ(x.resp.msn, y.resp.msn) << what;
  ASSERT_EQ(x.resp.nak_sent, y.resp.nak_sent) << what;
  ASSERT_EQ(x.resp.in_msg, y.resp.in_msg) << what;
  // The WRITE in progress (a fast path for First, Middle and Last must keep it as the general
  // path does).
  ASSERT_EQ(x.resp.write_va, y.resp.write_va) << what;
  ASSERT_EQ(x.resp.write_remaining, y.resp.write_remaining) << what;
  ASSERT_EQ(x.resp.write_total, y.resp.write_total) << what;
  ASSERT_EQ(x.resp.write_rkey, y.resp.write_rkey) << what;
  ASSERT_EQ(x.resp.ack_pending, y.resp.ack_pending) << what;
  ASSERT_EQ(x.state, y.state) << what;
  ASSERT_EQ(x.sr != nullptr, y.sr != nullptr) << what;
  if (x.sr != nullptr) {
    ASSERT_EQ(x.sr->nkept, y.sr->nkept) << what;
    ASSERT_EQ(x.sr->kept, y.sr->kept) << what;
    ASSERT_EQ(x.sr->rx_msg, y.sr->rx_msg) << what;
    ASSERT_EQ(x.sr->rx_msg_open, y.sr->rx_msg_open) << what;
  }
  ASSERT_TRUE(p.dst == q.dst) << what;
  ASSERT_TRUE(p.rcv == q.rcv) << what;
  Wc a[64], b[64];
  const int n = p.eb().poll_cq(p.b.rcq, 64, a);
  const int m = q.eb().poll_cq(q.b.rcq, 64, b);
  ASSERT_EQ(n, m) << what;
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(a[i].wr_id, b[i].wr_id) << what;
    ASSERT_EQ(a[i].status, b[i].status) << what;
  }
}

// ---- the receive fast path against the general path on a selective-repeat QP ---------------

// A forger (or a broken peer) on the segment replays, reorders, drops and corrupts a
// selective-repeat QP's requests: PSNs ahead (a gap, packets kept past it) and behind, RETHs of
// other lengths, addresses and keys, opcodes of other positions (First, Middle, Last, the SR
// opcodes), pads; each corrupted frame's checksums made right again. rx_fast may take only
// what the general path takes, and leave the same state: two responders, one with the fast
// paths and one without, are fed the same frames, and after each the state, the counters, the
// memory, the completions and the frames they answer with must be the same.
//
// Run for go-back-N as well (the fast path for a WRITE's First, Middle and Last packets is the
// next one to compare, issue 33): there every frame past ePSN draws the sequence NAK.
void responder_under_hostile_frames(bool sr) {
  std::uint64_t fast = 0, kept = 0, errors = 0;
  for (std::uint32_t seed = 1; seed <= 100; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Pair p(true, sr), q(false, sr);
    std::uint64_t t = p.lb.now();
    std::mt19937 rng(seed);
    // The requests: WRITEs of one and several packets (each packet a WRITE Only with its own
    // RETH), now and then a SEND or a WRITE with immediate (SR opcodes).
    std::uint64_t id = 0;
    for (int i = 0; i < 24; ++i) {
      const std::uint32_t sizes[] = {0, 8, 100, 1024, 1025, 3000};
      const std::uint32_t len = sizes[rng() % std::size(sizes)];
      const std::uint32_t kind = rng() % 8;
      const WrOpcode op = kind == 0   ? WrOpcode::kSend
                          : kind == 1 ? WrOpcode::kWriteImm
                                      : WrOpcode::kWrite;
      const std::uint64_t off = (rng() % 8) * 4096;
      p.post(op, len, off, off, id);
      q.post(op, len, off, off, id);
      ++id;
    }
    t += 1000;
    const Frames fa = drain(p.ea(), t), ga = drain(q.ea(), t);
    ASSERT_EQ(fa, ga);
    ASSERT_GT(fa.size(), 20u);
    // In order now and then, else any frame of the set, often changed.
    std::size_t next = 0;
    for (int step = 0; step < 600; ++step) {
      std::vector<std::uint8_t> f;
      const std::uint32_t pick = rng() % 8;
      if (pick < 6 && next < fa.size()) {
        f = fa[next++];
      } else {
        f = fa[rng() % fa.size()];
      }
      std::string what = "step " + std::to_string(step);
      if (rng() % 10 == 0) {
        const std::uint32_t m = rng() % 11;
        const bool reth = f[kBth] == 0x0A || f[kBth] == 0x06;  // WRITE Only, First
        switch (m) {
          case 0: {  // PSN moved
            const std::uint32_t v = wire::load_be32(f.data() + kBth + 8);
            const std::uint32_t d = rng() % 5 - 2;
            wire::store_be32(f.data() + kBth + 8, (v & 0xFF00'0000u) | ((v + d) & 0xFF'FFFFu));
            what += " psn";
            break;
          }
          case 1:  // RETH length
            if (reth) wire::store_be32(f.data() + kReth + 12, rng() % 1100);
            what += " reth len";
            break;
          case 2:  // RETH address
            if (reth) wire::store_be64(f.data() + kReth, kDstIova + rng() % (kBuf + 64));
            what += " reth va";
            break;
          case 3:  // R_Key
            if (reth) f[kReth + 11] ^= 1;
            what += " rkey";
            break;
          case 4: {  // opcode
            const std::uint8_t ops[] = {0x06, 0x07, 0x08, 0x0A, 0x0B, 0x00,
                                        0x04, 0xE0, 0xE1, 0xE3, 0x0C, 0x11};
            f[kBth] = ops[rng() % std::size(ops)];
            what += " opcode";
            break;
          }
          case 5:  // pad
            f[kBth + 1] = static_cast<std::uint8_t>((f[kBth + 1] & 0xCF) | ((rng() % 4) << 4));
            what += " pad";
            break;
          case 6:  // ECN CE
            f[kL3 + 1] |= 3;
            what += " ce";
            break;
          case 7:  // AckReq off
            f[kBth + 8] &= 0x7F;
            what += " noack";
            break;
          case 9:     // the payload shorter, or longer, than it was: a Middle or Last of the
          case 10: {  // wrong length, an Only whose RETH no longer says it
            const std::size_t end = kL3 + wire::load_be16(f.data() + kL3 + 2);
            if (end > f.size() || end < kReth + 16 + 4 + 8) break;
            const std::size_t k = 1 + rng() % 8;
            const std::size_t to = m == 9 ? end - k : end + k;
            f.resize(std::max(f.size(), to));
            f.resize(to);
            wire::store_be16(f.data() + kL3 + 2, static_cast<std::uint16_t>(to - kL3));
            wire::store_be16(f.data() + kL4 + 4, static_cast<std::uint16_t>(to - kL4));
            f[kBth + 1] &= 0xCF;  // no pad: the length is what it is
            what += m == 9 ? " shorter" : " longer";
            break;
          }
          default:  // a zero-length WRITE Only with any key
            if (f[kBth] == 0x0A) {
              wire::store_be32(f.data() + kReth + 12, 0);
              const std::size_t end = kReth + 16 + 4;
              f.resize(end);
              f[kBth + 1] &= 0xCF;
              wire::store_be16(f.data() + kL3 + 2, static_cast<std::uint16_t>(end - kL3));
              wire::store_be16(f.data() + kL4 + 4, static_cast<std::uint16_t>(end - kL4));
            }
            what += " zero";
            break;
        }
        fix(f);
      }
      p.eb().receive(f, t);
      q.eb().receive(f, t);
      if (rng() % 4 == 0) t += 2000 + rng() % 20000;  // reorder windows pass, SACKs go
      const Frames bp = drain(p.eb(), t), bq = drain(q.eb(), t);
      ASSERT_EQ(bp, bq) << what;
      expect_same_responder(p, q, what);
      if (::testing::Test::HasFatalFailure()) return;
      if (p.b.qp->state == QpState::kErr) {
        ++errors;
        break;
      }
    }
    fast += p.eb().stats().get(Counter::kRxFastPath);
    kept += p.eb().stats().get(Counter::kSrOooPlaced);
  }
  std::printf("[ %s hostile ] %llu fast, %llu kept out of order, %llu episodes ended in error\n",
              sr ? "sr" : "gbn", static_cast<unsigned long long>(fast),
              static_cast<unsigned long long>(kept), static_cast<unsigned long long>(errors));
  // Not vacuous: both paths were exercised.
  EXPECT_GT(fast, 100u);
  if (sr) {
    EXPECT_GT(kept, 100u);
  }
}

TEST(Review22, SelectiveRepeatResponderSameUnderHostileFrames) {
  responder_under_hostile_frames(true);
}

TEST(Review22, GoBackNResponderSameUnderHostileFrames) { responder_under_hostile_frames(false); }

// ---- the transmit fast paths against the general path under hostile answers ----------------

// The requester's side of the same: the answers a selective-repeat requester gets are forged
// or corrupted (ACKs, SACKs and NAKs with other PSNs, MSNs and syndromes, replayed, dropped),
// which moves what the fast paths start from (the oldest unacknowledged PSN, rewinds, the SR
// resend queue, the window); WRITEs of one and several packets keep coming, now and then a
// SEND or a READ. Every request frame and the requester's state must be the general path's.
TEST(Review22, SelectiveRepeatRequesterSameUnderHostileAnswers) {
  std::uint64_t fast = 0, frames = 0;
  for (const bool sr : {true, false}) {
    for (std::uint32_t seed = 1; seed <= 30; ++seed) {
      SCOPED_TRACE("seed " + std::to_string(seed) + (sr ? " sr" : " gbn"));
      Pair p(true, sr), q(false, sr);
      for (Pair* x : {&p, &q}) x->ea().set_tx_zero_copy(seed % 2 ? 512 : 0);
      std::uint64_t t = p.lb.now();
      std::mt19937 rng(seed);
      std::uint64_t id = 0;
      Frames answers;
      for (int step = 0; step < 300; ++step) {
        if (rng() % 3 == 0) {
          const std::uint32_t sizes[] = {0, 8, 100, 1024, 1025, 3000, 9000};
          const std::uint32_t len = sizes[rng() % std::size(sizes)];
          const std::uint32_t kind = rng() % 10;
          const WrOpcode op = kind == 0   ? WrOpcode::kSend
                              : kind == 1 ? WrOpcode::kRead
                                          : WrOpcode::kWrite;
          const std::uint64_t off = (rng() % 4) * 16384;
          const std::uint32_t l = op == WrOpcode::kSend ? std::min(len, kRecvSlot) : len;
          p.post(op, l, off, off, id);
          q.post(op, l, off, off, id);
          ++id;
        }
        t += 1000 + (rng() % 8 == 0 ? 5'000'000 : 0);  // now and then past the ACK timeout
        const Frames fa = drain(p.ea(), t), ga = drain(q.ea(), t);
        ASSERT_EQ(fa, ga) << "step " << step;
        frames += fa.size();
        // B answers what arrives (a loss now and then), then the answers are tampered with.
        for (const auto& f : fa)
          if (rng() % 10 != 0) q.eb().receive(f, t);
        Frames b = drain(q.eb(), t);
        for (auto f : b) {
          const std::uint32_t m = rng() % 12;
          if (m == 0) continue;  // lost
          if (m < 4 && f.size() >= 62) {
            const std::uint32_t v = wire::load_be32(f.data() + kBth + 8);
            const std::uint32_t d = rng() % 7 - 3;
            wire::store_be32(f.data() + kBth + 8, (v & 0xFF00'0000u) | ((v + d) & 0xFF'FFFFu));
            if (m == 2) f[kReth] = 0x60;  // NAK: PSN sequence error
            if (m == 3) {                 // SACK of some gap
              f[kReth] = 0x40;
              wire::store_be24(f.data() + kReth + 1, (v + d + 1 + rng() % 4) & 0xFF'FFFFu);
            }
            fix(f);
          }
          answers.push_back(f);
        }
        // Delivered late and replayed now and then.
        std::shuffle(answers.begin(), answers.end(), rng);
        const std::size_t n = answers.size() - std::min<std::size_t>(answers.size(), rng() % 3);
        for (std::size_t i = 0; i < n; ++i) {
          p.ea().receive(answers[i], t);
          q.ea().receive(answers[i], t);
        }
        answers.erase(answers.begin(), answers.begin() + static_cast<std::ptrdiff_t>(n));
        const Qp& x = *p.a.qp;
        const Qp& y = *q.a.qp;
        ASSERT_EQ(x.state, y.state) << "step " << step;
        ASSERT_EQ(x.req.next_psn, y.req.next_psn) << "step " << step;
        ASSERT_EQ(x.req.high_psn, y.req.high_psn) << "step " << step;
        ASSERT_EQ(x.comp.psn, y.comp.psn) << "step " << step;
        ASSERT_EQ(x.req.next_wqe, y.req.next_wqe) << "step " << step;
        for (std::size_t i = 0; i < kCounterCount; ++i) {
          const auto k = static_cast<Counter>(i);
          if (k == Counter::kTxFastPath || k == Counter::kRxFastPath ||
              k == Counter::kTxZeroCopyFrames)
            continue;
          ASSERT_EQ(p.ea().stats().get(k), q.ea().stats().get(k))
              << "step " << step << ": " << to_string(k);
        }
        Wc a[64], c[64];
        const int na = p.ea().poll_cq(p.a.scq, 64, a);
        const int nc = q.ea().poll_cq(q.a.scq, 64, c);
        ASSERT_EQ(na, nc) << "step " << step;
        for (int i = 0; i < na; ++i) {
          ASSERT_EQ(a[i].wr_id, c[i].wr_id);
          ASSERT_EQ(a[i].status, c[i].status);
        }
        if (x.state == QpState::kErr) break;
      }
      fast += p.ea().stats().get(Counter::kTxFastPath);
    }
  }
  std::printf("[ hostile answers ] %llu request frames, %llu fast\n",
              static_cast<unsigned long long>(frames), static_cast<unsigned long long>(fast));
  EXPECT_GT(fast, frames / 4);
}

// ---- DCQCN with every knob an operator or roce-incast may set ------------------------------

// roced's configuration accepts rpg_gd 1-15, rate_to_set_on_first_cnp_mbps 0-1,600,000 and
// either clamp bit beside the older knobs at the ends of their ranges (rpg_min_dec_fac 0,
// dce_tcp_g 0 or 1023, periods of 1 us, a byte counter of 1 byte); a spoofed CNP stream picks
// the times. Whatever they are, a QP's rate stays a number between the minimum and the
// maximum, RC never above RT, alpha within [0, 1], and the closed form of an idle time lands
// where walking every period does.
TEST(Review22, DcqcnKnobsAtTheirLimitsKeepTheRateSane) {
  std::mt19937_64 rng(22);
  const auto pick = [&](std::initializer_list<std::uint64_t> v) {
    return *(v.begin() + static_cast<std::ptrdiff_t>(rng() % v.size()));
  };
  for (int round = 0; round < 400; ++round) {
    cc::DcqcnParams p;
    p.max_rate_mbps = static_cast<std::uint32_t>(pick({0, 1, 1000, 100'000, 1'600'000}));
    const std::uint32_t max = p.max_rate_mbps != 0 ? p.max_rate_mbps : cc::kUnknownLineRateMbps;
    p.min_rate_mbps = static_cast<std::uint32_t>(std::min<std::uint64_t>(pick({1, 10, 1000}), max));
    p.ai_rate_mbps = static_cast<std::uint32_t>(pick({1, 5, 40, 1'600'000}));
    p.hai_rate_mbps = static_cast<std::uint32_t>(pick({1, 100, 1'600'000}));
    p.alpha_g = static_cast<std::uint32_t>(pick({0, 1, 5, 1019, 1023}));
    p.initial_alpha = static_cast<std::uint32_t>(pick({0, 1, 1023}));
    p.alpha_update_period_us = static_cast<std::uint32_t>(pick({1, 55, 131071}));
    p.rate_increase_period_us = static_cast<std::uint32_t>(pick({1, 55, 300, 1u << 24}));
    p.byte_counter = pick({0, 1, 10'000'000, 1ull << 40});
    p.threshold = static_cast<std::uint32_t>(pick({1, 5, 31}));
    p.rate_reduce_monitor_period_us = static_cast<std::uint32_t>(pick({0, 4, 50, 1u << 24}));
    p.min_dec_factor_pct = static_cast<std::uint32_t>(pick({0, 1, 50, 100}));
    p.defer_cut = rng() % 2 == 0;
    p.gd_log2 = static_cast<std::uint32_t>(pick({1, 2, 10, 11, 15}));
    p.first_cnp_rate_mbps = static_cast<std::uint32_t>(pick({0, 0, 1, 500, 100'000, 1'600'000}));
    p.clamp_target = rng() % 2 == 0;
    p.clamp_target_after_time_inc = rng() % 2 == 0;
    if (const char* e = std::getenv("R22_DEFAULT_KNOBS"); e != nullptr) {
      p.gd_log2 = 11;
      p.first_cnp_rate_mbps = 0;
      p.clamp_target = true;
      p.clamp_target_after_time_inc = true;
    }
    SCOPED_TRACE(
        "round " + std::to_string(round) + ": max " + std::to_string(p.max_rate_mbps) + " min " +
        std::to_string(p.min_rate_mbps) + " ai " + std::to_string(p.ai_rate_mbps) + " hai " +
        std::to_string(p.hai_rate_mbps) + " g " + std::to_string(p.alpha_g) + " a0 " +
        std::to_string(p.initial_alpha) + " ak " + std::to_string(p.alpha_update_period_us) +
        " tk " + std::to_string(p.rate_increase_period_us) + " bc " +
        std::to_string(p.byte_counter) + " F " + std::to_string(p.threshold) + " mon " +
        std::to_string(p.rate_reduce_monitor_period_us) + " dec " +
        std::to_string(p.min_dec_factor_pct) + " defer " + std::to_string(p.defer_cut) + " gd " +
        std::to_string(p.gd_log2) + " first " + std::to_string(p.first_cnp_rate_mbps) + " clamp " +
        std::to_string(p.clamp_target) + std::to_string(p.clamp_target_after_time_inc));
    cc::Dcqcn walked(p), skipped(p);
    const double lo = std::min<double>(std::max<double>(p.min_rate_mbps, 0.001), max);
    const auto sane = [&](const cc::Dcqcn& d, const char* when) {
      const double rc = d.rate_mbps(), rt = d.target_mbps(), a = d.alpha();
      ASSERT_TRUE(std::isfinite(rc) && std::isfinite(rt) && std::isfinite(a)) << when;
      ASSERT_GE(rc, lo * (1 - 1e-12)) << when;
      ASSERT_LE(rc, max) << when;
      ASSERT_LE(rt, max) << when;
      ASSERT_LE(rc, rt * (1 + 1e-9)) << when;
      ASSERT_GE(a, 0.0) << when;
      ASSERT_LE(a, 1.0) << when;
    };
    std::uint64_t t = 1'000'000;
    for (int e = 0; e < 40; ++e) {
      t += pick({1, 1000, 4000, 60'000, 1'000'000});
      const std::uint32_t what = rng() % 4;
      const std::uint64_t bytes = pick({64, 4096, 1'000'000});
      for (cc::Dcqcn* d : {&walked, &skipped}) {
        if (what < 2) {
          d->on_cnp(t);
        } else if (what == 2) {
          d->on_sent(bytes, t);
        } else {
          d->advance(t);
        }
      }
      sane(walked, "events");
      if (HasFatalFailure()) return;
    }
    // Idle: one walks every rate-increase period, the other jumps.
    const std::uint64_t tk = std::uint64_t{p.rate_increase_period_us} * 1000;
    const std::uint64_t n = std::min<std::uint64_t>(pick({3, 70, 2000}), 4'000'000'000ull / tk + 1);
    const std::uint64_t end = t + n * tk;
    for (std::uint64_t x = t + tk; x <= end; x += tk) walked.advance(x);
    skipped.advance(end);
    sane(walked, "walked");
    sane(skipped, "skipped");
    if (HasFatalFailure()) return;
    EXPECT_NEAR(skipped.rate_mbps(), walked.rate_mbps(), walked.rate_mbps() * 1e-6);
    EXPECT_NEAR(skipped.target_mbps(), walked.target_mbps(), walked.target_mbps() * 1e-6);
    EXPECT_EQ(skipped.limited(), walked.limited());
  }
}

// ---- finding 1: a small byte counter walks one increase event per byte -----------------------

// rpg_byte_reset is accepted from 1 byte (roced's configuration, 0..2^40; ConnectX counts it in
// bytes too). Each packet a limited QP sends then makes one increase event per byte: on_sent
// walked them one by one (the timer's events run in closed form after an idle time, the byte
// counter's did not), 65,536 per 64 KiB turn. With rpg_ai_rate 1 Mb/s a QP cut to 1 Mb/s
// (rate_to_set_on_first_cnp_mbps 1, or a few cuts) needs 1.6 million events to recover to
// 1.6 Tb/s: about 14 ms of the lcore's time per CNP, in 0.5 ms pieces per turn, and a spoofed
// CNP (docs/security.md: plausible while the QP has requests out) buys that again each time
// the QP is back at its maximum. Ten cuts and recoveries: 140 ms before the fix.
TEST(Review22, ASmallByteCounterCostsNoWalkPerByte) {
  cc::DcqcnParams p;
  p.max_rate_mbps = 1'600'000;
  p.byte_counter = 1;
  p.ai_rate_mbps = 1;
  p.rate_increase_period_us = 300;
  p.first_cnp_rate_mbps = 1;
  cc::Dcqcn d(p);
  std::uint64_t t = 1'000'000, calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int cut = 0; cut < 10; ++cut) {
    d.on_cnp(t);
    ASSERT_DOUBLE_EQ(d.rate_mbps(), 1.0);
    for (int turn = 0; turn < 1000 && d.limited(); ++turn) {
      t += 1000;  // a 64 KiB turn every microsecond
      d.on_sent(65536, t);
      ++calls;
    }
    ASSERT_FALSE(d.limited()) << "cut " << cut;
    t += 1'000'000;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ byte counter 1 ] 10 recoveries from 1 Mb/s: %llu turns, %.1f ms\n",
              static_cast<unsigned long long>(calls), ms);
  EXPECT_LT(ms, 20.0) << "one increase event per byte sent, walked";
}

// The same events in one call or byte by byte: the closed form of a run of byte-counter events
// lands where walking them does, through fast recovery, the additive stage, hyper increase
// and the cap.
TEST(Review22, ByteCounterEventsInOneCallMatchWalkedOnes) {
  for (const std::uint32_t ai : {1u, 40u}) {
    for (const std::uint32_t first : {0u, 1u, 5000u}) {
      cc::DcqcnParams p;
      p.max_rate_mbps = 100'000;
      p.byte_counter = 1;
      p.ai_rate_mbps = ai;
      p.hai_rate_mbps = 100;
      p.rate_increase_period_us = 300;
      p.first_cnp_rate_mbps = first;
      cc::Dcqcn walked(p), skipped(p);
      std::uint64_t t = 1'000'000;
      for (cc::Dcqcn* d : {&walked, &skipped}) {
        d->on_cnp(t);
        d->on_cnp(t + 100'000);  // a second cut past the monitor period
      }
      t += 200'000;
      for (const std::uint64_t n : {3u, 40u, 300u, 5000u, 200'000u}) {
        SCOPED_TRACE("ai " + std::to_string(ai) + " first " + std::to_string(first) + " n " +
                     std::to_string(n));
        // Timer events between the bursts too (T moves past F), so every stage is crossed.
        t += 700'000;
        for (std::uint64_t i = 0; i < n; ++i) walked.on_sent(1, t);
        skipped.on_sent(n, t);
        EXPECT_NEAR(skipped.rate_mbps(), walked.rate_mbps(), walked.rate_mbps() * 1e-9);
        EXPECT_NEAR(skipped.target_mbps(), walked.target_mbps(), walked.target_mbps() * 1e-9);
        EXPECT_EQ(skipped.limited(), walked.limited());
        if (walked.limited()) {  // (at the maximum the stages no longer count)
          EXPECT_EQ(skipped.byte_stage(), walked.byte_stage());
          EXPECT_EQ(skipped.timer_stage(), walked.timer_stage());
        }
      }
    }
  }
}

// The same with random knobs (as DcqcnKnobsAtTheirLimitsKeepTheRateSane draws them): bursts of
// byte-counter events between CNPs and timer events, in one call against one call per event.
TEST(Review22, ByteCounterRunsMatchWalkedOnesForAnyKnobs) {
  std::mt19937_64 rng(2222);
  const auto pick = [&](std::initializer_list<std::uint64_t> v) {
    return *(v.begin() + static_cast<std::ptrdiff_t>(rng() % v.size()));
  };
  for (int round = 0; round < 300; ++round) {
    cc::DcqcnParams p;
    p.max_rate_mbps = static_cast<std::uint32_t>(pick({1000, 100'000, 1'600'000}));
    p.min_rate_mbps = static_cast<std::uint32_t>(pick({1, 10}));
    p.ai_rate_mbps = static_cast<std::uint32_t>(pick({1, 5, 40}));
    p.hai_rate_mbps = static_cast<std::uint32_t>(pick({1, 100, 1000}));
    p.alpha_g = static_cast<std::uint32_t>(pick({0, 5, 1019}));
    p.initial_alpha = static_cast<std::uint32_t>(pick({1, 1023}));
    p.rate_increase_period_us = static_cast<std::uint32_t>(pick({1, 55, 300}));
    p.byte_counter = pick({1, 64, 1000});
    p.threshold = static_cast<std::uint32_t>(pick({1, 5, 31}));
    p.rate_reduce_monitor_period_us = static_cast<std::uint32_t>(pick({0, 50}));
    p.min_dec_factor_pct = static_cast<std::uint32_t>(pick({0, 50}));
    p.gd_log2 = static_cast<std::uint32_t>(pick({1, 11, 15}));
    p.first_cnp_rate_mbps = static_cast<std::uint32_t>(pick({0, 1, 500}));
    p.clamp_target = rng() % 2 == 0;
    p.clamp_target_after_time_inc = rng() % 2 == 0;
    SCOPED_TRACE("round " + std::to_string(round));
    cc::Dcqcn walked(p), skipped(p);
    std::uint64_t t = 1'000'000;
    for (int e = 0; e < 30; ++e) {
      t += pick({1, 1000, 60'000});
      if (rng() % 3 == 0) {
        walked.on_cnp(t);
        skipped.on_cnp(t);
        continue;
      }
      const std::uint64_t events = pick({1, 65, 300, 5000});
      for (std::uint64_t i = 0; i < events; ++i) walked.on_sent(p.byte_counter, t);
      skipped.on_sent(events * p.byte_counter, t);
      ASSERT_NEAR(skipped.rate_mbps(), walked.rate_mbps(), walked.rate_mbps() * 1e-9) << e;
      ASSERT_NEAR(skipped.target_mbps(), walked.target_mbps(), walked.target_mbps() * 1e-9) << e;
      ASSERT_EQ(skipped.limited(), walked.limited()) << e;
      if (walked.limited()) {
        ASSERT_EQ(skipped.byte_stage(), walked.byte_stage()) << e;
        ASSERT_EQ(skipped.timer_stage(), walked.timer_stage()) << e;
      }
    }
  }
}

// ---- memory that goes away: the prefetch pipeline and the zero-copy first packet -------------

// A source region deregistered and unmapped while WQEs that name it wait in several QPs' send
// queues, their key memos warm: the scheduler's prefetch pipeline (qp37) computes their
// payload addresses through the memo, and req_fast_zc starts them through it (srfast37). A
// prefetch never faults, but a load through a stale memo would: after the unmap it is a
// SIGSEGV, not a wrong byte. The WQEs must end with a local protection error, the others go on.
TEST(Review22, UnmappedSourceBehindWarmKeyMemosIsNeverRead) {
  for (const std::uint32_t zc : {0u, 512u}) {
    SCOPED_TRACE("zero_copy_min " + std::to_string(zc));
    Loopback lb;
    lb.a().set_tx_zero_copy(zc);
    auto [a0, b0] = connect(lb);
    std::vector<std::pair<Endpoint, Endpoint>> qps{{a0, b0}};
    for (int i = 0; i < 4; ++i) qps.push_back(connect_on(lb, a0, b0, {}));
    constexpr std::size_t kLen = 1 << 16;
    void* m = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    std::memset(m, 0x5A, kLen);
    Mr* gone = lb.a().reg_mr(a0.pd, m, kLen, kAccessLocalWrite);
    Buffer keep = make_buffer(lb.a(), a0.pd, kLen, 3);
    Buffer dst = make_buffer(lb.b(), b0.pd, kLen, 0);
    // Warm every QP's memo on `gone` with one WRITE each, acknowledged.
    for (std::size_t q = 0; q < qps.size(); ++q) {
      const Sge s{reinterpret_cast<std::uint64_t>(m), 4096, gone->key};
      SendWr wr = make_wr(q, &s, dst, q * 4096);
      ASSERT_EQ(lb.a().post_send(qps[q].first.qp, &wr, nullptr), kOk);
    }
    ASSERT_EQ(wait_wcs(lb, a0.scq, qps.size()).size(), qps.size());
    // Then each QP posts a long WRITE from `gone` (several packets, zero-copy with zc 512) and
    // one from `keep`: nothing runs before the region goes.
    for (std::size_t q = 0; q < qps.size(); ++q) {
      const Sge s{reinterpret_cast<std::uint64_t>(m) + 1024, 12000, gone->key};
      SendWr wr = make_wr(100 + q, &s, dst, q * 4096);
      ASSERT_EQ(lb.a().post_send(qps[q].first.qp, &wr, nullptr), kOk);
    }
    ASSERT_EQ(lb.a().dereg_mr(gone), kOk);
    ASSERT_EQ(::munmap(m, kLen), 0);
    lb.settle();
    std::size_t errors = 0;
    Wc wc[64];
    for (int n; (n = lb.a().poll_cq(a0.scq, 64, wc)) > 0;)
      for (int i = 0; i < n; ++i) errors += wc[i].status == WcStatus::kLocProtErr;
    EXPECT_EQ(errors, qps.size());
  }
}

// A long zero-copy WRITE whose first packets (req_fast_zc, srfast37) wait in the transmit ring
// when its region is deregistered and unmapped: dereg_mr copies them into the ring first, so
// the frames that then leave are whole and right, and nothing reads the unmapped pages.
TEST(Review22, ZeroCopyFirstPacketsSurviveTheirRegionsUnmap) {
  for (const bool sr : {false, true}) {
    SCOPED_TRACE(sr ? "selective repeat" : "go-back-N");
    Loopback lb;
    lb.a().set_tx_zero_copy(512);
    auto [a, b] = connect(lb);
    if (sr) {
      ASSERT_EQ(set_selective_repeat(a, b, true), kOk);
    }
    constexpr std::size_t kLen = 1 << 16;
    void* m = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    auto* bytes = static_cast<std::uint8_t*>(m);
    for (std::size_t i = 0; i < kLen; ++i) bytes[i] = static_cast<std::uint8_t>(i * 13 + 5);
    const std::vector<std::uint8_t> want(bytes, bytes + 8192);
    Mr* mr = lb.a().reg_mr(a.pd, m, kLen, kAccessLocalWrite);
    Buffer dst = make_buffer(lb.b(), b.pd, kLen, 0);
    const Sge s{reinterpret_cast<std::uint64_t>(m), 8192, mr->key};
    SendWr wr = make_wr(1, &s, dst);
    ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
    std::uint64_t t = lb.now() + 1000;
    lb.a().run(t);  // the frames are in the ring, zero-copy, not yet taken by the port
    const std::uint64_t zc_frames = lb.a().stats().get(Counter::kTxZeroCopyFrames);
    EXPECT_GE(zc_frames, 8u);
    EXPECT_GT(lb.a().stats().get(Counter::kTxFastPath), 0u);
    ASSERT_EQ(lb.a().dereg_mr(mr), kOk);
    ASSERT_EQ(::munmap(m, kLen), 0);
    Frames f;
    lb.a().drain_tx([&](std::span<const std::uint8_t> x) { f.emplace_back(x.begin(), x.end()); });
    ASSERT_EQ(f.size(), 8u);
    for (const auto& x : f) lb.b().receive(x, t);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), dst.bytes.begin()))
        << "the frames carried the bytes from before the unmap";
    EXPECT_EQ(lb.b().stats().verdicts[static_cast<std::size_t>(wire::Verdict::kBadIcrc)], 0u);
  }
}

// ---- finding 2: a local invalidation leaves zero-copy frames pointing into what it unbound ---

// dereg_mr and rereg_mr copy every queued zero-copy frame into the ring before the memory may
// go (flatten_all, before_mr_release); LOCAL_INV (and so REG_MR, which needs the MR free) and a
// peer's SEND with invalidate changed the table only. A fast-registered MR's WRITE, resent at
// its ACK timeout into a ring the port has not emptied (a busy link), then acknowledged (the
// first copy arrived), then the MR invalidated: the LOCAL_INV completes, the application frees
// the buffer the MR no longer covers, and the ring's copy still points there (the port reads
// it at its next burst: a use after free). Counted here without reading: no queued frame may
// point into the unbound buffer once the invalidation has completed.
TEST(Review22, NoZeroCopyFrameOutlivesALocalInvalidate) {
  Loopback lb;
  lb.a().set_tx_zero_copy(512);
  auto [a, b] = connect(lb);
  constexpr std::size_t kLen = 1 << 16;
  std::vector<std::uint8_t> m(kLen, 0x3C);
  const auto base = reinterpret_cast<std::uint64_t>(m.data());
  Mr* fr = lb.a().alloc_mr(a.pd, kLen);
  ASSERT_NE(fr, nullptr);
  Buffer dst = make_buffer(lb.b(), b.pd, kLen, 0);
  Sge none{};
  SendWr reg;
  reg.opcode = WrOpcode::kRegMr;
  reg.sg_list = &none;
  reg.reg = {fr->key, 1, base, kLen, kAccessLocalWrite, 0};
  ASSERT_EQ(lb.a().post_send(a.qp, &reg, nullptr), kOk);
  std::uint64_t t = lb.now() + 1000;
  drain(lb.a(), t);
  const std::uint32_t key = fr->key;
  const Sge s{base, 2048, key};
  SendWr wr = make_wr(1, &s, dst);
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  t += 1000;
  const Frames first = drain(lb.a(), t);  // the first copies, held on the wire
  ASSERT_EQ(first.size(), 2u);
  t += 50'000'000;  // past the ACK timeout: the copies go into the ring again, zero-copy
  const std::uint64_t zc0 = lb.a().stats().get(Counter::kTxZeroCopyFrames);
  lb.a().run(t);
  ASSERT_GT(lb.a().stats().get(Counter::kTxZeroCopyFrames), zc0);
  SendWr inv;
  inv.opcode = WrOpcode::kLocalInv;
  inv.invalidate_rkey = key;
  inv.sg_list = &none;
  inv.wr_id = 2;
  inv.send_flags = kSendSignaled;
  ASSERT_EQ(lb.a().post_send(a.qp, &inv, nullptr), kOk);
  for (const auto& f : first) lb.b().receive(f, t);
  for (const auto& f : drain(lb.b(), t)) lb.a().receive(f, t);  // the ACK
  lb.a().run(t);                                                // the LOCAL_INV
  Wc wc[8];
  std::vector<std::uint64_t> done;
  for (int n; (n = lb.a().poll_cq(a.scq, 8, wc)) > 0;)
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(wc[i].status, WcStatus::kSuccess) << wc[i].wr_id;
      done.push_back(wc[i].wr_id);
    }
  ASSERT_EQ(done, (std::vector<std::uint64_t>{1, 2})) << "the WRITE, then the invalidation";
  // The application may free `m` now. What still points into it:
  std::size_t into = 0, frames = 0;
  lb.a().drain_tx_frames([&](const TxFrame& f) {
    ++frames;
    for (const TxSeg& x : f.ext) into += x.addr >= m.data() && x.addr < m.data() + kLen;
  });
  EXPECT_GT(frames, 0u) << "the resent copies were still queued";
  EXPECT_EQ(into, 0u) << "queued frames read the unbound buffer at the port's next burst";
}

}  // namespace
}  // namespace roce::test
