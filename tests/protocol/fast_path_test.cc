// The engine's fast paths (issue 33; dataplane/engine/fast_path.{h,cc}) against its general
// path: two engine pairs built alike, one with EngineConfig::fast_paths and one without, are
// driven in lockstep with the same work requests and the same frames. Every frame either side
// sends must be the same bytes, and every effect the same: counters (but the two that count
// the fast paths), completions, memory, the QPs' sequence state. The receive side is then fed
// hostile frames (each a valid WRITE Only with one thing wrong, its ICRC and IP checksum made
// right again where that is what is being tested): the fast path may take only what the general
// path accepts, and must leave everything else to it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/icrc.h"
#include "dataplane/wire/ip.h"
#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using engine::Counter;
using engine::Engine;
using engine::Wc;
using engine::WrOpcode;

constexpr std::size_t kBuf = 1 << 20;  // (the hostile frames' pairs: kSmallBuf)
constexpr std::size_t kSmallBuf = 1 << 14;
constexpr std::uint64_t kSrcIova = 0x10'0000'0000ull;  // the same I/O addresses in both pairs
constexpr std::uint64_t kDstIova = 0x20'0000'0000ull;
constexpr std::uint64_t kRcvIova = 0x30'0000'0000ull;
constexpr std::uint32_t kRecvSlot = 4096;
constexpr std::uint32_t kAccess = engine::kAccessLocalWrite | engine::kAccessRemoteWrite |
                                  engine::kAccessRemoteRead | engine::kAccessRemoteAtomic;

LoopbackOptions quiet() {
  LoopbackOptions o;
  o.record = false;
  return o;
}

engine::EngineConfig config(int side, bool fast) {
  engine::EngineConfig c = Loopback::default_config(side);
  c.fast_paths = fast;
  c.tx_slots = 128;
  return c;
}

// One connected pair with its buffers, fast paths on or off.
struct Pair {
  explicit Pair(bool fast, std::size_t size = kBuf)
      : lb(quiet(), config(0, fast), config(1, fast)) {
    std::tie(a, b) = connect(lb);
    src.resize(size);
    dst.resize(size);
    rcv.resize(size);
    for (std::size_t i = 0; i < size; ++i) src[i] = static_cast<std::uint8_t>(i * 7 + 1);
    smr = a.eng->reg_mr(a.pd, src.data(), size, kSrcIova, kAccess);
    dmr = b.eng->reg_mr(b.pd, dst.data(), size, kDstIova, kAccess);
    rmr = b.eng->reg_mr(b.pd, rcv.data(), size, kRcvIova, kAccess);
    for (std::uint64_t i = 0; i < 128; ++i) post_recv(i);
  }
  void post_recv(std::uint64_t id) {
    const auto slots = rcv.size() / kRecvSlot;
    const engine::Sge s{kRcvIova + (id % slots) * kRecvSlot, kRecvSlot, rmr->key};
    engine::RecvWr r;
    r.wr_id = id;
    r.sg_list = &s;
    r.num_sge = 1;
    ASSERT_EQ(b.eng->post_recv(b.qp, &r, nullptr), engine::kOk);
  }
  Engine& ea() { return *a.eng; }
  Engine& eb() { return *b.eng; }
  Loopback lb;
  Endpoint a, b;
  std::vector<std::uint8_t> src, dst, rcv;
  engine::Mr *smr = nullptr, *dmr = nullptr, *rmr = nullptr;
  std::uint64_t next_recv = 128;
};

// A work request both pairs post: SGEs as offsets into `src`.
struct Req {
  WrOpcode op = WrOpcode::kWrite;
  std::uint32_t len = 8;
  std::uint64_t src_off = 0, dst_off = 0;
  bool inline_data = false, solicited = false, fence = false, two_sges = false;
  std::uint32_t imm = 0;
};

void post(Pair& p, const Req& r, std::uint64_t id) {
  engine::Sge sg[2];
  const std::uint32_t first = r.two_sges ? r.len / 2 : r.len;
  // Inline data is read at post_send from the poster's own address, not through a key.
  const std::uint64_t base =
      r.inline_data ? reinterpret_cast<std::uint64_t>(p.src.data()) : kSrcIova;
  sg[0] = {base + r.src_off, first, p.smr->key};
  sg[1] = {base + r.src_off + first, r.len - first, p.smr->key};
  engine::SendWr wr;
  wr.wr_id = id;
  wr.opcode = r.op;
  wr.sg_list = sg;
  wr.num_sge = r.two_sges ? 2 : 1;
  wr.send_flags = engine::kSendSignaled | (r.inline_data ? engine::kSendInline : 0u) |
                  (r.solicited ? engine::kSendSolicited : 0u) | (r.fence ? engine::kSendFence : 0u);
  wr.imm_data = r.imm;
  wr.rdma = {kDstIova + r.dst_off, p.dmr->key};
  ASSERT_EQ(p.ea().post_send(p.a.qp, &wr, nullptr), engine::kOk);
}

void expect_same_stats(const Engine& x, const Engine& y, const char* what) {
  for (std::size_t i = 0; i < engine::kCounterCount; ++i) {
    const auto k = static_cast<Counter>(i);
    if (k == Counter::kTxFastPath || k == Counter::kRxFastPath) continue;
    EXPECT_EQ(x.stats().get(k), y.stats().get(k)) << what << ": " << to_string(k);
  }
  EXPECT_EQ(x.stats().verdicts, y.stats().verdicts) << what;
}

void expect_same_wcs(Engine& pe, engine::Cq* pc, Engine& qe, engine::Cq* qc, std::vector<Wc>* out) {
  Wc a[64], b[64];
  for (;;) {
    const int n = pe.poll_cq(pc, 64, a);
    const int m = qe.poll_cq(qc, 64, b);
    ASSERT_EQ(n, m);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(a[i].wr_id, b[i].wr_id);
      EXPECT_EQ(a[i].status, b[i].status);
      EXPECT_EQ(a[i].opcode, b[i].opcode);
      EXPECT_EQ(a[i].byte_len, b[i].byte_len);
      EXPECT_EQ(a[i].imm_data, b[i].imm_data);
      EXPECT_EQ(a[i].wc_flags, b[i].wc_flags);
      EXPECT_EQ(a[i].qp_num, b[i].qp_num);
      if (out) out->push_back(a[i]);
    }
    if (n < 64) return;
  }
}

// Everything either pair shows: counters, completions, memory, sequence state.
void expect_same(Pair& p, Pair& q) {
  expect_same_stats(p.ea(), q.ea(), "requester");
  expect_same_stats(p.eb(), q.eb(), "responder");
  expect_same_wcs(p.ea(), p.a.scq, q.ea(), q.a.scq, nullptr);
  std::vector<Wc> recvs;
  expect_same_wcs(p.eb(), p.b.rcq, q.eb(), q.b.rcq, &recvs);
  for (std::size_t i = 0; i < recvs.size(); ++i) {
    p.post_recv(p.next_recv++);
    q.post_recv(q.next_recv++);
  }
  EXPECT_TRUE(p.dst == q.dst);
  EXPECT_TRUE(p.rcv == q.rcv);
  EXPECT_EQ(p.b.qp->resp.epsn, q.b.qp->resp.epsn);
  EXPECT_EQ(p.b.qp->resp.msn, q.b.qp->resp.msn);
  EXPECT_EQ(p.b.qp->state, q.b.qp->state);
  EXPECT_EQ(p.a.qp->req.next_psn, q.a.qp->req.next_psn);
  EXPECT_EQ(p.a.qp->comp.psn, q.a.qp->comp.psn);
  EXPECT_EQ(p.a.qp->state, q.a.qp->state);
}

// Which frames the wire loses (both pairs alike: their frames are the same): `request` for
// A's frames, `n` counting each direction's frames from 0. Null: none.
using Loss = std::function<bool(bool request, std::uint64_t n)>;

// Runs both pairs in lockstep until nothing moves, every frame compared byte for byte.
void lockstep(Pair& p, Pair& q, std::uint64_t& t, const Loss& lose = nullptr,
              std::uint64_t* counts = nullptr, int rounds = 2000) {
  std::uint64_t n[2] = {counts ? counts[0] : 0, counts ? counts[1] : 0};
  const auto carry = [&](const Frames& f, Engine& to, bool request) {
    for (const auto& x : f)
      if (!lose || !lose(request, n[request ? 0 : 1]++)) to.receive(x, t);
  };
  for (int round = 0; round < rounds; ++round) {
    t += 1000;
    const Frames fa = drain(p.ea(), t), ga = drain(q.ea(), t);
    ASSERT_EQ(fa, ga) << "request frames differ in round " << round;
    const std::uint64_t n0 = n[0];
    carry(fa, p.eb(), true);
    n[0] = n0;
    carry(ga, q.eb(), true);
    const Frames fb = drain(p.eb(), t), gb = drain(q.eb(), t);
    ASSERT_EQ(fb, gb) << "response frames differ in round " << round;
    const std::uint64_t n1 = n[1];
    carry(fb, p.ea(), false);
    n[1] = n1;
    carry(gb, q.ea(), false);
    expect_same(p, q);
    // With losses, quiet is also everything sent acknowledged (the timers recover the rest).
    const engine::Qp& a = *p.a.qp;
    const bool done = !lose || (a.comp.psn == a.req.high_psn && a.req.next_wqe == a.sq_tail);
    if (fa.empty() && fb.empty() && !p.ea().has_work() && !p.eb().has_work() && done) {
      if (counts) std::copy(n, n + 2, counts);
      return;
    }
  }
  FAIL() << "no quiet after " << rounds << " rounds";
}

TEST(FastPath, SameFramesAndEffectsAsTheGeneralPath) {
  Pair p(true), q(false);
  std::uint64_t t = p.lb.now();
  std::mt19937 rng(33);
  const std::uint32_t sizes[] = {0,   1,   3,   4,    5,    7,    8,    9,    15,   16,  17,
                                 31,  32,  33,  64,   100,  127,  128,  129,  255,  256, 257,
                                 511, 600, 999, 1000, 1023, 1024, 1025, 2047, 2500, 4096};
  const WrOpcode ops[] = {WrOpcode::kWrite, WrOpcode::kWriteImm, WrOpcode::kSend,
                          WrOpcode::kSendImm};
  std::uint64_t id = 0;
  for (int batch = 0; batch < 120; ++batch) {
    // A batch of up to 24 requests of every kind, posted at once: runs of one-packet messages
    // are the fast path's, broken by what is not (longer messages, two SGEs, READs, fences).
    const int n = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) {
      Req r;
      const std::uint32_t kind = rng() % 16;
      r.op = ops[rng() % 4];
      r.len = sizes[rng() % std::size(sizes)];
      r.src_off = rng() % (kBuf - 8192);
      r.dst_off = rng() % (kBuf - 8192);
      r.imm = static_cast<std::uint32_t>(rng());
      r.solicited = (rng() & 3) == 0;
      if (kind == 0) r.two_sges = r.len >= 2;
      if (kind == 1 && r.len <= 128) r.inline_data = true;
      if (kind == 2) r.op = WrOpcode::kRead;
      if (kind == 3) r.fence = true;
      if (r.op == WrOpcode::kRead && r.len == 0) r.len = 8;
      post(p, r, id);
      post(q, r, id);
      ++id;
    }
    lockstep(p, q, t);
    if (HasFatalFailure()) return;
  }
  // Not vacuous: both fast paths carried most of it.
  EXPECT_GT(p.ea().stats().get(Counter::kTxFastPath), id / 3);
  EXPECT_GT(p.eb().stats().get(Counter::kRxFastPath), id / 8);
  EXPECT_EQ(q.ea().stats().get(Counter::kTxFastPath), 0u);
  EXPECT_EQ(q.eb().stats().get(Counter::kRxFastPath), 0u);
  EXPECT_EQ(p.a.qp->state, engine::QpState::kRts);
}

// The zero-copy fast path (req_fast_zc): long SENDs and WRITEs whose packets after the first
// leave zero-copy, against the general path's zero-copy frames, for several zero-copy
// thresholds (a short last packet is copied; a threshold of 1 sends even 1-byte tails with
// their pad zero-copy) and lengths around the path MTU (1024). The frames are compared whole
// (drain_tx joins the pieces), so a wrong header, pad or ICRC fails here.
TEST(FastPath, ZeroCopyLongMessagesSameAsTheGeneralPath) {
  for (const std::uint32_t zc : {1u, 300u, 512u, 1024u}) {
    SCOPED_TRACE("zero_copy_min " + std::to_string(zc));
    Pair p(true), q(false);
    for (Pair* x : {&p, &q}) {
      x->ea().set_tx_zero_copy(zc);
      x->eb().set_tx_zero_copy(zc);
    }
    std::uint64_t t = p.lb.now();
    std::mt19937 rng(zc);
    const std::uint32_t sizes[] = {1025, 1027, 1536, 2047,  2048,  2049,  3071,  4096,
                                   4097, 5000, 8191, 16384, 65536, 65539, 131072};
    const WrOpcode ops[] = {WrOpcode::kWrite, WrOpcode::kWriteImm, WrOpcode::kSend,
                            WrOpcode::kSendImm};
    std::uint64_t id = 0;
    for (int batch = 0; batch < 30; ++batch) {
      const int n = 1 + static_cast<int>(rng() % 8);
      for (int i = 0; i < n; ++i) {
        Req r;
        r.op = ops[rng() % 4];
        r.len = sizes[rng() % std::size(sizes)];
        // A SEND lands in a receive slot of kRecvSlot bytes.
        if (r.op == WrOpcode::kSend || r.op == WrOpcode::kSendImm)
          r.len = std::min<std::uint32_t>(r.len, kRecvSlot - static_cast<std::uint32_t>(rng() % 3));
        r.src_off = rng() % (kBuf - 140000);
        r.dst_off = rng() % (kBuf - 140000);
        r.imm = static_cast<std::uint32_t>(rng());
        r.solicited = (rng() & 1) == 0;
        if (rng() % 8 == 0) r.op = WrOpcode::kRead;  // a READ between them
        post(p, r, id);
        post(q, r, id);
        ++id;
      }
      lockstep(p, q, t);
      if (HasFatalFailure()) return;
    }
    // Not vacuous: most packets of the long messages took the zero-copy fast path.
    EXPECT_GT(p.ea().stats().get(Counter::kTxFastPath), p.ea().stats().get(Counter::kTxFrames) / 2);
    EXPECT_GT(p.ea().stats().get(Counter::kTxZeroCopyFrames), 0u);
    EXPECT_EQ(q.ea().stats().get(Counter::kTxFastPath), 0u);
    EXPECT_EQ(p.a.qp->state, engine::QpState::kRts);
  }
}

// Memory deregistered while a long zero-copy WRITE is half sent: the next packet must not read
// it (MrTable::gen), so that the fast path ends the WQE with a local protection error exactly
// as the general path does, and no frame of either refers to memory the application may free.
TEST(FastPath, ZeroCopyStopsWhenTheSourceIsDeregisteredMidMessage) {
  Pair p(true), q(false);
  for (Pair* x : {&p, &q}) x->ea().set_tx_zero_copy(512);
  std::uint64_t t = p.lb.now();
  Req r;
  r.len = 512 * 1024;  // 512 packets: more than one run() sends with 128 slots
  post(p, r, 1);
  post(q, r, 1);
  t += 1000;
  const Frames fa = drain(p.ea(), t), ga = drain(q.ea(), t);
  ASSERT_EQ(fa, ga);
  ASSERT_GT(fa.size(), 10u);
  ASSERT_LT(fa.size(), 512u);
  EXPECT_GT(p.ea().stats().get(Counter::kTxFastPath), 0u);
  for (const auto& f : fa) p.eb().receive(f, t);
  for (const auto& f : ga) q.eb().receive(f, t);
  ASSERT_EQ(p.ea().dereg_mr(p.smr), engine::kOk);
  ASSERT_EQ(q.ea().dereg_mr(q.smr), engine::kOk);
  // The bytes are gone as far as the engine may know: anything still read from them shows.
  std::fill(p.src.begin(), p.src.end(), 0xEE);
  std::fill(q.src.begin(), q.src.end(), 0xEE);
  const std::uint64_t sent = p.ea().stats().get(Counter::kTxFrames);
  lockstep(p, q, t);
  if (HasFatalFailure()) return;
  // No request packet after the deregistration, and the WQE failed (lockstep compared its
  // completion with the general path's): the QP is in the error state.
  EXPECT_EQ(p.ea().stats().get(Counter::kTxFrames), sent);
  EXPECT_EQ(p.a.qp->state, engine::QpState::kErr);
}

// Selective repeat (issue 32): both pairs negotiate it; with the fast paths on, req_fast sends
// its one-packet WRITEs and req_fast_zc every packet of its long zero-copy WRITEs (WRITE Only,
// each with the RETH of its own bytes), while SENDs and WRITEs with immediate (SR opcodes),
// READs and every retransmission stay on the general path. The wire loses a fixed pattern of
// frames each way (requests and answers alike in both pairs), so that the SACKs, the resend
// queue, the probe and the window all work: the frames and every effect must be the general
// path's, each WRITE's bytes must land, and only what was lost may be sent again.
TEST(FastPath, SelectiveRepeatUnderLossSameAsTheGeneralPath) {
  for (const std::uint32_t zc : {0u, 512u}) {
    SCOPED_TRACE("zero_copy_min " + std::to_string(zc));
    Pair p(true), q(false);
    for (Pair* x : {&p, &q}) {
      ASSERT_EQ(set_selective_repeat(x->a, x->b, true), engine::kOk);
      x->ea().set_tx_zero_copy(zc);
      x->eb().set_tx_zero_copy(zc);
    }
    std::uint64_t t = p.lb.now();
    std::mt19937 rng(32 + zc);
    const std::uint32_t sizes[] = {0, 8, 600, 1023, 1024, 1025, 3000, 4096, 16384, 65536, 65539};
    // Requests: 1 in 29, and a run of 3 now and then; answers (ACKs, SACKs): 1 in 13.
    std::uint64_t lost_requests = 0;
    const Loss lose = [&](bool request, std::uint64_t n) {
      const bool l = request ? (n % 29 == 7 || n % 397 < 3) : n % 13 == 4;
      return l;
    };
    std::uint64_t counts[2] = {0, 0};
    std::uint64_t id = 0, writes = 0;
    for (int batch = 0; batch < 16; ++batch) {
      // WRITEs to places of their own in this batch, so that each one's bytes can be checked;
      // now and then a SEND, a WRITE with immediate or a READ between them.
      std::vector<Req> batch_writes;
      std::uint64_t dst_at = 0;
      const int n = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) {
        Req r;
        r.len = sizes[rng() % std::size(sizes)];
        r.src_off = rng() % (kBuf / 2 - 70000);
        r.dst_off = dst_at;
        dst_at += r.len + 64;
        const std::uint32_t kind = rng() % 10;
        if (kind == 0) {
          r.op = WrOpcode::kSend;
          r.len = std::min<std::uint32_t>(r.len, kRecvSlot);
        } else if (kind == 1) {
          r.op = WrOpcode::kWriteImm;
          r.imm = static_cast<std::uint32_t>(rng());
        } else if (kind == 2 && r.len != 0) {
          r.op = WrOpcode::kRead;  // into the upper half of `src`, which no WRITE sends
          r.src_off = kBuf / 2 + rng() % (kBuf / 2 - 70000);
        }
        if (r.op == WrOpcode::kWrite) {
          batch_writes.push_back(r);
          ++writes;
        }
        post(p, r, id);
        post(q, r, id);
        ++id;
      }
      // A loss pattern counted in frames: what the two pairs' wire drops.
      const std::uint64_t before = counts[0];
      lockstep(p, q, t, lose, counts, 20000);
      if (HasFatalFailure()) return;
      for (std::uint64_t k = before; k < counts[0]; ++k) lost_requests += lose(true, k);
      for (const Req& r : batch_writes)
        ASSERT_TRUE(std::equal(p.src.begin() + static_cast<std::ptrdiff_t>(r.src_off),
                               p.src.begin() + static_cast<std::ptrdiff_t>(r.src_off + r.len),
                               p.dst.begin() + static_cast<std::ptrdiff_t>(r.dst_off)))
            << "WRITE of " << r.len << " B in batch " << batch;
    }
    const auto& sa = p.ea().stats();
    EXPECT_EQ(p.a.qp->state, engine::QpState::kRts);
    EXPECT_EQ(p.b.qp->state, engine::QpState::kRts);
    // Not vacuous: the fast path carried the WRITEs, and the loss was recovered selectively.
    EXPECT_GT(sa.get(Counter::kTxFastPath), sa.get(Counter::kTxFrames) / 2);
    EXPECT_EQ(q.ea().stats().get(Counter::kTxFastPath), 0u);
    // The responder's (rx_fast): in-order WRITE Onlys while nothing is kept past a gap.
    EXPECT_GT(p.eb().stats().get(Counter::kRxFastPath), 0u);
    EXPECT_EQ(q.eb().stats().get(Counter::kRxFastPath), 0u);
    EXPECT_GT(p.eb().stats().get(Counter::kSrSacksSent), 0u);
    EXPECT_GT(sa.get(Counter::kSrRetransmits), 0u);
    EXPECT_GT(lost_requests, 10u);
    // What SACKs had sent again was lost. (The rest of the retransmissions: READs asked again
    // for lost responses, probes for lost ACKs, and the packets past a SEND's packet that the
    // responder could not place: the general path's, compared above.)
    EXPECT_LE(sa.get(Counter::kSrRetransmits), lost_requests);
    std::printf(
        "[ sr lockstep ] zero_copy %u: %llu writes, %llu frames, %llu fast, %llu lost "
        "requests, %llu retransmitted (%llu selective), %llu go-back-N\n",
        zc, static_cast<unsigned long long>(writes),
        static_cast<unsigned long long>(sa.get(Counter::kTxFrames)),
        static_cast<unsigned long long>(sa.get(Counter::kTxFastPath)),
        static_cast<unsigned long long>(lost_requests),
        static_cast<unsigned long long>(sa.get(Counter::kRetransmittedPackets)),
        static_cast<unsigned long long>(sa.get(Counter::kSrRetransmits)),
        static_cast<unsigned long long>(sa.get(Counter::kRetries)));
  }
}

// The fault injector (dataplane/fault_injector.h) on both pairs' wires, each way: the same
// policy and seed, so the same frames are dropped, duplicated, held back behind later ones and
// corrupted in both. Runs until quiet (everything sent acknowledged, nothing held), every frame
// and effect compared each round as lockstep() does.
struct FaultyWires {
  explicit FaultyWires(const FaultPolicy& pol)
      : req{FaultyLink(pol), FaultyLink(pol)}, resp{FaultyLink(pol), FaultyLink(pol)} {}
  FaultyLink req[2], resp[2];  // [0]: pair p's, [1]: pair q's
};

void lockstep_faulty(Pair& p, Pair& q, std::uint64_t& t, FaultyWires& w, int rounds) {
  const auto carry = [&](const Frames& f, FaultyLink& link, Engine& to) {
    const auto emit = [&](std::span<const std::uint8_t> b, std::uint64_t) { to.receive(b, t); };
    for (const auto& x : f) link.submit(x, emit);
    if (f.empty()) link.release_held(emit);  // the link went idle
  };
  for (int round = 0; round < rounds; ++round) {
    t += 1000;
    const Frames fa = drain(p.ea(), t), ga = drain(q.ea(), t);
    ASSERT_EQ(fa, ga) << "request frames differ in round " << round;
    carry(fa, w.req[0], p.eb());
    carry(ga, w.req[1], q.eb());
    const Frames fb = drain(p.eb(), t), gb = drain(q.eb(), t);
    ASSERT_EQ(fb, gb) << "response frames differ in round " << round;
    carry(fb, w.resp[0], p.ea());
    carry(gb, w.resp[1], q.ea());
    expect_same(p, q);
    if (::testing::Test::HasFailure()) return;
    const engine::Qp& a = *p.a.qp;
    const bool done = a.comp.psn == a.req.high_psn && a.req.next_wqe == a.sq_tail &&
                      !w.req[0].holding() && !w.resp[0].holding();
    if (fa.empty() && fb.empty() && !p.ea().has_work() && !p.eb().has_work() && done) return;
  }
  FAIL() << "no quiet after " << rounds << " rounds";
}

// Go-back-N WRITEs of several packets (issue 33): with the fast paths on, the responder takes
// each in-order WRITE First, Middle and Last in rx_fast_seq, and the general path everything
// else (a gap, a duplicate, a corrupted frame, a CE mark, a WRITE with immediate, SENDs,
// READs). The fault injector drops, duplicates, reorders and corrupts frames each way: the
// frames and every effect must be the general path's, round after round, and each WRITE's
// bytes must land.
TEST(FastPath, GoBackNMultiPacketWritesUnderFaultsSameAsTheGeneralPath) {
  struct Case {
    const char* name;
    FaultPolicy pol;
    std::uint32_t zc;
  };
  std::vector<Case> cases;
  {
    FaultPolicy none;
    cases.push_back({"no faults", none, 0});
    FaultPolicy loss;
    loss.drop_rate = 0.02;
    loss.seed = 33;
    cases.push_back({"loss", loss, 512});
    FaultPolicy mixed;
    mixed.drop_rate = 0.01;
    mixed.duplicate_rate = 0.03;
    mixed.reorder_rate = 0.03;
    mixed.reorder_window = 4;
    mixed.corrupt_rate = 0.01;
    mixed.seed = 38;
    cases.push_back({"loss, duplicates, reordering, corruption", mixed, 0});
    cases.push_back({"the same, zero-copy", mixed, 512});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Pair p(true), q(false);
    for (Pair* x : {&p, &q}) {
      x->ea().set_tx_zero_copy(c.zc);
      x->eb().set_tx_zero_copy(c.zc);
    }
    FaultyWires w(c.pol);
    std::uint64_t t = p.lb.now();
    std::mt19937 rng(static_cast<std::uint32_t>(c.pol.seed + c.zc));
    // Around the path MTU (1024): First and Last, First, Middles and Last, a short Last.
    const std::uint32_t sizes[] = {8,    1024, 1025, 1500, 2048,  2049,  3000,
                                   4096, 5000, 8192, 9000, 16384, 65536, 65539};
    std::uint64_t id = 0, writes = 0;
    for (int batch = 0; batch < 30; ++batch) {
      std::vector<Req> batch_writes;
      std::uint64_t dst_at = 0;
      const int n = 1 + static_cast<int>(rng() % 10);
      for (int i = 0; i < n; ++i) {
        Req r;
        r.len = sizes[rng() % std::size(sizes)];
        r.src_off = rng() % (kBuf / 2 - 70000);
        r.dst_off = dst_at;
        dst_at += r.len + 64;
        const std::uint32_t kind = rng() % 10;
        if (kind == 0) {
          r.op = WrOpcode::kSend;
          r.len = std::min<std::uint32_t>(r.len, kRecvSlot);
        } else if (kind == 1) {
          r.op = WrOpcode::kWriteImm;
          r.imm = static_cast<std::uint32_t>(rng());
        } else if (kind == 2) {
          r.op = WrOpcode::kRead;  // into the upper half of `src`, which no WRITE sends
          r.src_off = kBuf / 2 + rng() % (kBuf / 2 - 70000);
        }
        if (r.op == WrOpcode::kWrite) {
          batch_writes.push_back(r);
          ++writes;
        }
        post(p, r, id);
        post(q, r, id);
        ++id;
      }
      lockstep_faulty(p, q, t, w, 20000);
      if (HasFailure()) return;
      for (const Req& r : batch_writes)
        ASSERT_TRUE(std::equal(p.src.begin() + static_cast<std::ptrdiff_t>(r.src_off),
                               p.src.begin() + static_cast<std::ptrdiff_t>(r.src_off + r.len),
                               p.dst.begin() + static_cast<std::ptrdiff_t>(r.dst_off)))
            << "WRITE of " << r.len << " B in batch " << batch;
    }
    EXPECT_EQ(p.a.qp->state, engine::QpState::kRts);
    EXPECT_EQ(p.b.qp->state, engine::QpState::kRts);
    // Not vacuous: the responder's fast path took most request packets (the WRITEs' Firsts,
    // Middles and Lasts), the general path none, and the faults happened.
    const auto& sb = p.eb().stats();
    EXPECT_GT(sb.get(Counter::kRxFastPath), sb.get(Counter::kRxFrames) / 2);
    EXPECT_EQ(q.eb().stats().get(Counter::kRxFastPath), 0u);
    const FaultStats& f = w.req[0].stats();
    if (c.pol.drop_rate > 0) {
      EXPECT_GT(f.dropped, 10u);
      EXPECT_GT(p.ea().stats().get(Counter::kRetransmittedPackets), 0u);
      EXPECT_GT(sb.get(Counter::kSeqErrNakSent), 0u);
    }
    if (c.pol.duplicate_rate > 0) {
      EXPECT_GT(f.duplicated, 10u);
      EXPECT_GT(f.reordered, 10u);
      EXPECT_GT(f.corrupted, 0u);
      EXPECT_GT(sb.get(Counter::kDuplicateRequests), 0u);
      EXPECT_GT(sb.get(Counter::kRxDropVerdict), 0u);
    }
    std::printf(
        "[ gbn lockstep ] %s: %llu writes, %llu request frames received, %llu fast, %llu "
        "dropped, %llu duplicated, %llu reordered, %llu corrupted\n",
        c.name, static_cast<unsigned long long>(writes),
        static_cast<unsigned long long>(sb.get(Counter::kRxFrames)),
        static_cast<unsigned long long>(sb.get(Counter::kRxFastPath)),
        static_cast<unsigned long long>(f.dropped), static_cast<unsigned long long>(f.duplicated),
        static_cast<unsigned long long>(f.reordered), static_cast<unsigned long long>(f.corrupted));
  }
}

// The target region deregistered while a WRITE of several packets is arriving: rx_fast_seq
// must not write through the range its First checked (MrTable::gen moved), so that the next
// packet gets the general path's answer (a remote access NAK, the QP in error) and no byte of
// the region the application may free. A region registered meanwhile changes nothing.
TEST(FastPath, WriteTargetDeregisteredMidMessageTakesTheGeneralPath) {
  for (const bool dereg : {false, true}) {
    SCOPED_TRACE(dereg ? "deregistered" : "another region registered");
    Pair p(true), q(false);
    std::uint64_t t = p.lb.now();
    Req r;
    r.len = 8 * 1024;  // 8 packets
    r.dst_off = 4096;
    post(p, r, 1);
    post(q, r, 1);
    t += 1000;
    const Frames fp = drain(p.ea(), t), fq = drain(q.ea(), t);
    ASSERT_EQ(fp, fq);
    ASSERT_EQ(fp.size(), 8u);
    for (std::size_t k = 0; k < 3; ++k) {
      p.eb().receive(fp[k], t);
      q.eb().receive(fq[k], t);
    }
    const std::uint64_t fast = p.eb().stats().get(Counter::kRxFastPath);
    EXPECT_EQ(fast, 3u);
    std::vector<std::uint8_t> other(4096);
    if (dereg) {
      ASSERT_EQ(p.eb().dereg_mr(p.dmr), engine::kOk);
      ASSERT_EQ(q.eb().dereg_mr(q.dmr), engine::kOk);
    } else {
      ASSERT_NE(p.eb().reg_mr(p.b.pd, other.data(), other.size(), 0x40'0000'0000ull, kAccess),
                nullptr);
      ASSERT_NE(q.eb().reg_mr(q.b.pd, other.data(), other.size(), 0x40'0000'0000ull, kAccess),
                nullptr);
    }
    std::fill(p.dst.begin(), p.dst.end(), 0xEE);
    std::fill(q.dst.begin(), q.dst.end(), 0xEE);
    for (std::size_t k = 3; k < fp.size(); ++k) {
      p.eb().receive(fp[k], t);
      q.eb().receive(fq[k], t);
      expect_same(p, q);
    }
    lockstep(p, q, t);
    if (HasFatalFailure()) return;
    if (dereg) {
      // Nothing written after the deregistration, the NAK sent, the QP in error.
      EXPECT_EQ(p.eb().stats().get(Counter::kRxFastPath), fast);
      EXPECT_TRUE(
          std::all_of(p.dst.begin(), p.dst.end(), [](std::uint8_t b) { return b == 0xEE; }));
      EXPECT_EQ(p.eb().stats().get(Counter::kRemAccessNakSent), 1u);
      EXPECT_EQ(p.b.qp->state, engine::QpState::kErr);
    } else {
      EXPECT_EQ(p.eb().stats().get(Counter::kRxFastPath), fp.size());
      EXPECT_EQ(p.b.qp->state, engine::QpState::kRts);
    }
  }
}

// ---- hostile frames ---------------------------------------------------------------------------

constexpr std::size_t kL3 = 14, kL4 = 34, kBth = 42, kReth = 54, kPayload = 70;

std::size_t frame_end(const std::vector<std::uint8_t>& f) {
  return kL3 + wire::load_be16(f.data() + kL3 + 2);
}

// The IP checksum and the ICRC made right again after a field changed.
void fix_ip(std::vector<std::uint8_t>& f) {
  wire::store_be16(f.data() + kL3 + 10, 0);
  wire::store_be16(f.data() + kL3 + 10, wire::ipv4_header_checksum(f.data() + kL3, 20));
}
void fix_icrc(std::vector<std::uint8_t>& f) {
  const std::size_t end = frame_end(f);
  if (end > f.size() || end < kL3 + 48 + 4) return;
  wire::store_le32(f.data() + end - 4,
                   wire::compute_icrc(f.data() + kL3, end - 4 - kL3, wire::IpVersion::kV4));
}
void fix(std::vector<std::uint8_t>& f) {
  fix_ip(f);
  fix_icrc(f);
}
// Sets the IP and UDP lengths for `payload_and_pad` bytes after the WRITE Only's RETH.
void set_lengths(std::vector<std::uint8_t>& f, std::size_t payload_and_pad) {
  const std::size_t l4 = 8 + 28 + payload_and_pad + 4;
  wire::store_be16(f.data() + kL3 + 2, static_cast<std::uint16_t>(20 + l4));
  wire::store_be16(f.data() + kL4 + 4, static_cast<std::uint16_t>(l4));
}

struct Mutation {
  std::string name;
  std::function<void(std::vector<std::uint8_t>&)> apply;
  bool must_drop = false;  ///< the general path never accepts it (so neither may the fast one)
};

std::vector<Mutation> mutations() {
  std::vector<Mutation> m;
  using F = std::vector<std::uint8_t>;
  const auto add = [&](std::string name, std::function<void(F&)> f, bool drop) {
    m.push_back({std::move(name), std::move(f), drop});
  };
  add(
      "none", [](F&) {}, false);
  // Every bit of every byte in turn, nothing fixed: the ICRC or IP checksum catches most.
  for (std::size_t i = 0; i < 82; ++i)
    for (const std::uint8_t bit : {0x01, 0x10, 0x80})
      add(
          "flip byte " + std::to_string(i) + " bit " + std::to_string(bit),
          [i, bit](F& f) { f[i] ^= bit; }, false);
  add(
      "bad ICRC", [](F& f) { f[frame_end(f) - 1] ^= 1; }, true);
  add(
      "bad IP checksum", [](F& f) { f[kL3 + 11] ^= 1; }, true);
  const auto field = [&](std::string name, std::function<void(F&)> g, bool drop) {
    add(
        std::move(name),
        [g](F& f) {
          g(f);
          fix(f);
        },
        drop);
  };
  const auto psn = [](F& f, std::uint32_t d) {
    const std::uint32_t v = wire::load_be32(f.data() + kBth + 8);
    wire::store_be32(f.data() + kBth + 8, (v & 0xFF00'0000u) | ((v + d) & 0xFF'FFFFu));
  };
  field(
      "PSN ahead", [&](F& f) { psn(f, 1); }, false);
  field(
      "PSN behind (duplicate)", [&](F& f) { psn(f, 0xFF'FFFF); }, false);
  field(
      "PSN far", [&](F& f) { psn(f, 0x80'0000); }, false);
  field(
      "DestQP + 1 (no such QP)", [](F& f) { f[kBth + 7] ^= 1; }, true);
  field(
      "DestQP 0xFFFFFF", [](F& f) { std::memset(f.data() + kBth + 5, 0xFF, 3); }, true);
  field(
      "DestQP 1 (GSI)", [](F& f) { wire::store_be24(f.data() + kBth + 5, 1); }, true);
  for (const std::uint8_t op :
       {0x00, 0x04, 0x06, 0x07, 0x08, 0x0B, 0x0C, 0x10, 0x11, 0x2A, 0x81, 0x64, 0xFF})
    field(
        "opcode " + std::to_string(op), [op](F& f) { f[kBth] = op; }, false);
  field(
      "RETH length 7", [](F& f) { wire::store_be32(f.data() + kReth + 12, 7); }, false);
  field(
      "RETH length 9", [](F& f) { wire::store_be32(f.data() + kReth + 12, 9); }, false);
  field(
      "RETH length 0", [](F& f) { wire::store_be32(f.data() + kReth + 12, 0); }, false);
  field(
      "R_Key variant", [](F& f) { f[kReth + 11] ^= 1; }, false);
  field(
      "R_Key other", [](F& f) { f[kReth + 9] ^= 0x40; }, false);
  field(
      "VA past the region",
      [](F& f) { wire::store_be64(f.data() + kReth, kDstIova + kSmallBuf - 4); }, false);
  field(
      "VA below the region", [](F& f) { wire::store_be64(f.data() + kReth, kDstIova - 8); }, false);
  field(
      "VA wraps", [](F& f) { wire::store_be64(f.data() + kReth, ~0ull - 3); }, false);
  for (unsigned pad = 1; pad <= 3; ++pad)
    field(
        "pad " + std::to_string(pad),
        [pad](F& f) { f[kBth + 1] |= static_cast<std::uint8_t>(pad << 4); }, false);
  field(
      "TVer 1", [](F& f) { f[kBth + 1] |= 1; }, true);
  field(
      "P_Key 0x7FFE", [](F& f) { wire::store_be16(f.data() + kBth + 2, 0x7FFE); }, true);
  field(
      "P_Key 0x0001", [](F& f) { wire::store_be16(f.data() + kBth + 2, 0x0001); }, true);
  field(
      "P_Key limited member 0x7FFF", [](F& f) { wire::store_be16(f.data() + kBth + 2, 0x7FFF); },
      false);
  field(
      "SE", [](F& f) { f[kBth + 1] |= 0x80; }, false);
  field(
      "MigReq", [](F& f) { f[kBth + 1] |= 0x40; }, false);
  field(
      "no AckReq", [](F& f) { f[kBth + 8] &= 0x7F; }, false);
  field(
      "BTH reserved bits", [](F& f) { f[kBth + 8] |= 0x7F; }, false);
  field(
      "FECN/BECN", [](F& f) { f[kBth + 4] = 0xC0; }, false);
  field(
      "ECN CE", [](F& f) { f[kL3 + 1] |= 3; }, false);
  field(
      "ECN ECT(0)", [](F& f) { f[kL3 + 1] = (f[kL3 + 1] & 0xFC) | 2; }, false);
  field(
      "DSCP 46", [](F& f) { f[kL3 + 1] = 46 << 2; }, false);
  field(
      "TTL 1", [](F& f) { f[kL3 + 8] = 1; }, false);
  field(
      "no DF", [](F& f) { f[kL3 + 6] &= 0xBF; }, false);
  field(
      "MF", [](F& f) { f[kL3 + 6] |= 0x20; }, true);
  field(
      "fragment offset", [](F& f) { f[kL3 + 7] = 1; }, true);
  field(
      "IP reserved flag", [](F& f) { f[kL3 + 6] |= 0x80; }, false);
  field(
      "protocol TCP", [](F& f) { f[kL3 + 9] = 6; }, true);
  field(
      "source IP", [](F& f) { f[kL3 + 15] ^= 1; }, true);
  field(
      "destination IP", [](F& f) { f[kL3 + 19] ^= 1; }, true);
  field(
      "UDP destination port", [](F& f) { wire::store_be16(f.data() + kL4 + 2, 4792); }, true);
  field(
      "UDP source port", [](F& f) { wire::store_be16(f.data() + kL4, 0x1234); }, false);
  field(
      "UDP checksum", [](F& f) { wire::store_be16(f.data() + kL4 + 6, 0xBEEF); }, false);
  field(
      "UDP length + 1", [](F& f) { f[kL4 + 5] += 1; }, true);
  field(
      "UDP length - 4", [](F& f) { f[kL4 + 5] -= 4; }, true);
  field(
      "IP total length - 4 (payload 4)", [](F& f) { set_lengths(f, 4); }, false);
  field(
      "IP total length + 4 (past the frame)", [](F& f) { set_lengths(f, 12); }, true);
  field(
      "IP total length short of RETH",
      [](F& f) {
        set_lengths(f, 0);
        f[kL3 + 3] -= 8;
        f[kL4 + 5] -= 8;
      },
      true);
  add(
      "frame truncated", [](F& f) { f.pop_back(); }, true);
  add(
      "Ethernet padding", [](F& f) { f.resize(f.size() + 10, 0); }, false);
  add(
      "destination MAC", [](F& f) { f[5] ^= 1; }, false);
  add(
      "source MAC", [](F& f) { f[11] ^= 1; }, false);
  add(
      "EtherType IPv6", [](F& f) { wire::store_be16(f.data() + 12, 0x86DD); }, true);
  field(
      "IP version 6", [](F& f) { f[kL3] = 0x65; }, true);
  add(
      "IP options (IHL 6)",
      [](F& f) {
        f.insert(f.begin() + kL4, 4, 0);
        f[kL3] = 0x46;
        wire::store_be16(f.data() + kL3 + 2, wire::load_be16(f.data() + kL3 + 2) + 4);
        wire::store_be16(f.data() + kL3 + 10, 0);
        wire::store_be16(f.data() + kL3 + 10, wire::ipv4_header_checksum(f.data() + kL3, 24));
      },
      true);
  for (const std::uint16_t vid : {0, 5})
    add(
        "VLAN tag " + std::to_string(vid),
        [vid](F& f) {
          const std::uint8_t tag[4] = {0x81, 0x00, static_cast<std::uint8_t>(vid >> 8),
                                       static_cast<std::uint8_t>(vid)};
          f.insert(f.begin() + 12, tag, tag + 4);
        },
        vid != 0);
  field(
      "payload past the path MTU",
      [](F& f) {
        const std::size_t n = 1100;
        f.resize(kPayload + n + 4);
        for (std::size_t i = 0; i < n; ++i) f[kPayload + i] = static_cast<std::uint8_t>(i);
        wire::store_be32(f.data() + kReth + 12, static_cast<std::uint32_t>(n));
        set_lengths(f, n);
      },
      false);
  field(
      "zero-length WRITE, any key",
      [](F& f) {
        f.resize(kPayload + 4);
        wire::store_be32(f.data() + kReth + 12, 0);
        wire::store_be32(f.data() + kReth + 8, 0xDEAD);
        set_lengths(f, 0);
      },
      false);
  return m;
}

// Every mutation of the packet `which` of a WRITE of `len` bytes (path MTU 1024: 8 B is a
// WRITE Only, 3000 B a First, a Middle and a Last of 952 B, 2072 B a Last of 24 B: a frame of
// 82 bytes, as short as the mutations allow), the packets before it delivered intact first.
void hostile_frames(std::uint32_t len, std::size_t which, int min_taken, int min_refused) {
  int taken = 0, refused = 0;
  for (const Mutation& mu : mutations()) {
    SCOPED_TRACE(mu.name);
    Pair p(true, kSmallBuf), q(false, kSmallBuf);
    std::uint64_t t = p.lb.now();
    // One WRITE through first (key memo, ePSN), then the one to corrupt.
    Req r;
    r.dst_off = 64;
    post(p, r, 1);
    post(q, r, 1);
    lockstep(p, q, t);
    r.dst_off = 128;
    r.len = len;
    post(p, r, 2);
    post(q, r, 2);
    t += 1000;
    const Frames fp = drain(p.ea(), t), fq = drain(q.ea(), t);
    ASSERT_EQ(fp, fq);
    ASSERT_GT(fp.size(), which);
    for (std::size_t k = 0; k < which; ++k) {
      p.eb().receive(fp[k], t);
      q.eb().receive(fq[k], t);
    }
    std::vector<std::uint8_t> bad = fp[which];
    mu.apply(bad);
    const std::uint64_t fast0 = p.eb().stats().get(Counter::kRxFastPath);
    const wire::Psn epsn0 = q.b.qp->resp.epsn;
    p.eb().receive(bad, t);
    q.eb().receive(bad, t);
    const bool fast_took = p.eb().stats().get(Counter::kRxFastPath) != fast0;
    const bool general_took = q.b.qp->resp.epsn != epsn0;
    // The fast path takes nothing the general path does not.
    EXPECT_TRUE(!fast_took || general_took);
    if (mu.must_drop) {
      EXPECT_FALSE(general_took);
      EXPECT_FALSE(fast_took);
    }
    taken += fast_took;
    refused += !fast_took;
    expect_same(p, q);
    // What each then sends (ACKs, NAKs), then the good frame and those after it, then the rest.
    const Frames bp = drain(p.eb(), t), bq = drain(q.eb(), t);
    ASSERT_EQ(bp, bq);
    for (std::size_t k = which; k < fp.size(); ++k) {
      p.eb().receive(fp[k], t);
      q.eb().receive(fq[k], t);
      expect_same(p, q);
    }
    for (const auto& f : bp) p.ea().receive(f, t);
    for (const auto& f : bq) q.ea().receive(f, t);
    lockstep(p, q, t);
    if (::testing::Test::HasFatalFailure()) return;
    if (mu.name == "none") {
      EXPECT_TRUE(fast_took);  // the unharmed frame is the fast path's
    }
  }
  // Both kinds were seen: frames the fast path took (harmless changes) and ones it refused.
  EXPECT_GT(taken, min_taken);
  EXPECT_GT(refused, min_refused);
}

TEST(FastPath, HostileFramesTakeTheGeneralPathsVerdict) { hostile_frames(8, 0, 10, 200); }

// The same for each packet of a go-back-N WRITE of several packets (rx_fast_seq): its First
// (the RETH's fields are its own), a Middle, a Last (what the mutations of the RETH change
// there is payload), and a short Last. (Lasts of 1 to 3 bytes, frames shorter than any WRITE
// Only, are in GoBackNMultiPacketWritesUnderFaultsSameAsTheGeneralPath.)
TEST(FastPath, HostileWriteFirstMiddleLastTakeTheGeneralPathsVerdict) {
  for (const auto& [len, which] :
       {std::pair<std::uint32_t, std::size_t>{3000, 0}, {3000, 1}, {3000, 2}, {2072, 2}}) {
    SCOPED_TRACE("WRITE of " + std::to_string(len) + " B, packet " + std::to_string(which));
    hostile_frames(len, which, 10, 200);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace roce::test
