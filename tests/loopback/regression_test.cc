// Regression tests for bugs found in review of the engine: each reproduces one scenario that
// used to corrupt data, complete out of order or kill the connection, and checks the fixed
// behaviour.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {
using namespace roce::engine;
using wire::Opcode;
using wire::Psn;

wire::RxPkt parse(const std::vector<std::uint8_t>& f) {
  wire::RxPkt p;
  EXPECT_EQ(wire::parse_frame(f, p), wire::Verdict::kOk);
  return p;
}

// F1: a multi-packet SEND keeps using the receive WQE's SGEs from the queue slot after the
// slot was released; a post_recv into that slot redirects the rest of the message.
TEST(Regression, ReceiveSlotReusedDuringMultiPacketSend) {
  Loopback lb;
  RcOptions o;
  o.cap = QpCap{16, 4, 4, 4, 0};
  auto [a, b] = connect(lb, o);
  std::vector<Buffer> rb;
  for (int i = 0; i < 5; ++i) rb.push_back(make_buffer(lb.b(), b.pd, 4096, 0));
  for (auto& x : rb) std::fill(x.bytes.begin(), x.bytes.end(), 0);
  for (int i = 0; i < 4; ++i) {
    Sge s = rb[i].sge();
    RecvWr r;
    r.wr_id = 100 + i;
    r.sg_list = &s;
    r.num_sge = 1;
    ASSERT_EQ(lb.b().post_recv(b.qp, &r, nullptr), kOk);
  }
  Buffer src = make_buffer(lb.a(), a.pd, 4096, 7);
  Sge s = src.sge();
  SendWr w;
  w.wr_id = 1;
  w.opcode = WrOpcode::kSend;
  w.sg_list = &s;
  w.num_sge = 1;
  w.send_flags = kSendSignaled;
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  std::uint64_t t = lb.now();
  Frames f = drain(lb.a(), t);
  ASSERT_EQ(f.size(), 4u);  // 4 x 1024
  lb.b().receive(f[0], t);  // SEND First consumes WQE 100 (slot 0)
  // The application keeps its RQ full: one new WQE (slot 0 is free again).
  Sge s4 = rb[4].sge();
  RecvWr r4;
  r4.wr_id = 104;
  r4.sg_list = &s4;
  r4.num_sge = 1;
  ASSERT_EQ(lb.b().post_recv(b.qp, &r4, nullptr), kOk);
  for (int i = 1; i < 4; ++i) lb.b().receive(f[i], t);
  Wc wc[4];
  ASSERT_EQ(lb.b().poll_cq(b.rcq, 4, wc), 1);
  EXPECT_EQ(wc[0].wr_id, 100u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rb[0].bytes, src.bytes) << "the whole message lands in WQE 100's buffer";
  EXPECT_EQ(rb[4].bytes, std::vector<std::uint8_t>(4096, 0)) << "WQE 104's buffer is untouched";
}

// The poll loop skips run() and the transmit path while Engine::idle_at says so: it must say
// so only when run() would really do nothing (no WQE to send, no frame queued, no ACK owed, no
// timer due), or sends, ACKs and retransmissions would wait for the next frame to arrive.
TEST(Regression, IdleOnlyWhenRunWouldDoNothing) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 64, 3);
  Buffer dst = make_buffer(lb.b(), b.pd, 64, 0);
  Sge sge = src.sge();
  SendWr wr = make_wr(1, &sge, dst);
  std::uint64_t t = 1000;
  lb.a().run(t);  // the move to RTS scheduled the QP: one run() finds it has nothing to send
  EXPECT_TRUE(lb.a().idle_at(t));
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  EXPECT_FALSE(lb.a().idle_at(t)) << "a posted WQE waits for run()";
  lb.a().run(t);
  EXPECT_FALSE(lb.a().idle_at(t)) << "a frame waits in the transmit ring";
  Frames f;
  lb.a().drain_tx([&](std::span<const std::uint8_t> x) { f.emplace_back(x.begin(), x.end()); });
  ASSERT_EQ(f.size(), 1u);
  EXPECT_TRUE(lb.a().idle_at(t)) << "sent; its timers are not due yet";
  ASSERT_NE(lb.a().next_deadline(), 0u);
  EXPECT_FALSE(lb.a().idle_at(lb.a().next_deadline())) << "a timer is due";
  lb.b().receive(f[0], t);
  EXPECT_FALSE(lb.b().idle_at(t)) << "the responder owes an ACK";
  const Frames ack = drain(lb.b(), t);
  ASSERT_EQ(ack.size(), 1u);
  EXPECT_TRUE(lb.b().idle_at(t));
  lb.a().receive(ack[0], t + 100);
  lb.a().run(t + 100);
  EXPECT_TRUE(lb.a().idle_at(t + 100));
}

// F2: a local operation between two RC WQEs completes after the later WQE.
TEST(Regression, LocalOpCompletesInPostOrder) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 64, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 64, 0);
  Buffer inv = make_buffer(lb.a(), a.pd, 64, 2);
  Sge s = src.sge();
  SendWr w1 = make_wr(1, &s, dst);
  SendWr w2;
  w2.wr_id = 2;
  w2.opcode = WrOpcode::kLocalInv;
  w2.invalidate_rkey = inv.mr->key;
  w2.send_flags = kSendSignaled;
  SendWr w3 = w1;
  w3.wr_id = 3;
  w1.next = &w2;
  w2.next = &w3;
  ASSERT_EQ(lb.a().post_send(a.qp, &w1, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 3);
  ASSERT_EQ(wc.size(), 3u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[1].wr_id, 2u) << "completions out of post order";
  EXPECT_EQ(wc[2].wr_id, 3u);
}

// F3: go-back-N across a REG_MR WQE executes it again: the QP fails.
TEST(Regression, RetryDoesNotReExecuteRegMr) {
  LoopbackOptions lo;
  RcOptions o;
  lo.a2b.drop_psn.push_back({0x11, o.psn_a, 1, -1});
  Loopback lb(lo);
  auto [a, b] = connect(lb, o);
  Mr* fr = lb.a().alloc_mr(a.pd, 4096);
  std::vector<std::uint8_t> region(4096);
  Buffer src = make_buffer(lb.a(), a.pd, 64, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 64, 0);
  Sge s = src.sge();
  SendWr w1 = make_wr(1, &s, dst);
  SendWr w2;
  w2.wr_id = 2;
  w2.opcode = WrOpcode::kRegMr;
  w2.send_flags = kSendSignaled;
  w2.reg = {fr->key, 0x11, reinterpret_cast<std::uint64_t>(region.data()), region.size(),
            kAccessLocalWrite | kAccessRemoteWrite};
  SendWr w3 = w1;
  w3.wr_id = 3;
  w1.next = &w2;
  w2.next = &w3;
  ASSERT_EQ(lb.a().post_send(a.qp, &w1, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 3);
  ASSERT_EQ(wc.size(), 3u);
  for (auto& c : wc)
    EXPECT_EQ(c.status, WcStatus::kSuccess) << c.wr_id << " " << to_string(c.status);
  EXPECT_EQ(a.qp->state, QpState::kRts);
}

// F5: a local protection error on WQE 2 is reported on WQE 1 (already sent, fine).
TEST(Regression, LocalErrorIsReportedOnTheFailingWqe) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 64, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 64, 0);
  Sge s = src.sge();
  Sge bad{src.addr(), 64, src.mr->key ^ 0x100};
  SendWr w1 = make_wr(1, &s, dst);
  SendWr w2 = w1;
  w2.wr_id = 2;
  w2.sg_list = &bad;
  w1.next = &w2;
  ASSERT_EQ(lb.a().post_send(a.qp, &w1, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess) << to_string(wc[0].status);
  EXPECT_EQ(wc[1].status, WcStatus::kLocProtErr) << to_string(wc[1].status);
}

// F7: the original READ response arrives after do_retry() rewound but before the READ request
// was re-sent (TX ring back-pressure): the requester fails itself with GENERAL_ERR.
TEST(Regression, ReadResponseBeforeReRequestIsAccepted) {
  auto ca = Loopback::default_config(0);
  ca.tx_slots = 48;        // 16 usable request slots per run
  ca.recovery_batch = 64;  // the ring, not the recovery batch, holds the READ back
  Loopback lb({}, ca);
  RcOptions o;
  o.timeout = 8;
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, 20 * 1024, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 20 * 1024, 0);
  Buffer rd = make_buffer(lb.a(), a.pd, 1024, 0);
  Sge s = src.sge(), r = rd.sge();
  SendWr w1 = make_wr(1, &s, dst);
  SendWr w2 = make_wr(2, &r, dst, 0, WrOpcode::kRead);
  w1.next = &w2;
  ASSERT_EQ(lb.a().post_send(a.qp, &w1, nullptr), kOk);
  std::uint64_t t = lb.now();
  Frames held;
  for (int i = 0; i < 4; ++i) {
    for (auto& f : drain(lb.a(), t)) lb.b().receive(f, t);
    for (auto& f : drain(lb.b(), t)) held.push_back(f);  // B's ACK and READ response: delayed
    t += 100;
  }
  ASSERT_FALSE(held.empty());
  t += 10'000'000;                   // retransmit timeout
  Frames resent = drain(lb.a(), t);  // go-back-N: 16 WRITE packets, READ not yet re-sent
  EXPECT_EQ(resent.size(), 16u);
  for (auto& f : held) lb.a().receive(f, t);  // the delayed originals arrive
  Wc wc[4];
  int n = lb.a().poll_cq(a.scq, 4, wc);
  EXPECT_EQ(n, 2);
  drain(lb.a(), t + 100);
  EXPECT_EQ(a.qp->state, QpState::kRts) << "QP went to " << to_string(a.qp->state);
}

// F8: a sequence NAK whose PSN lies inside an outstanding READ skips the bytes before it; the
// READ completes successfully with a hole.
wire::FrameSpec from_b(Loopback& lb, Qp* aqp, Opcode op, std::uint32_t psn) {
  wire::FrameSpec sp;
  sp.src_mac = lb.b().config().mac;
  sp.dst_mac = lb.a().config().mac;
  sp.src_ip4 = lb.b().config().ipv4;
  sp.dst_ip4 = lb.a().config().ipv4;
  sp.opcode = op;
  sp.dest_qp = wire::Qpn(aqp->qpn);
  sp.psn = Psn(psn);
  return sp;
}
void send_spec(Engine& e, const wire::FrameSpec& sp, std::span<const std::uint8_t> pl,
               std::uint64_t t) {
  std::vector<std::uint8_t> fr(wire::frame_len(sp, pl.size()));
  ASSERT_EQ(wire::build_frame(sp, pl, fr), fr.size());
  e.receive(fr, t);
}
TEST(Regression, NakInsideReadLeavesNoHole) {
  Loopback lb;
  RcOptions o;
  auto [a, b] = connect(lb, o);
  Buffer remote = make_buffer(lb.b(), b.pd, 4096, 9);
  Buffer rd = make_buffer(lb.a(), a.pd, 4096, 0);
  std::fill(rd.bytes.begin(), rd.bytes.end(), 0xEE);
  Sge r = rd.sge();
  SendWr w = make_wr(1, &r, remote, 0, WrOpcode::kRead);
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  std::uint64_t t = lb.now();
  Frames req = drain(lb.a(), t);
  ASSERT_EQ(req.size(), 1u);
  lb.b().receive(req[0], t);
  Frames resp = drain(lb.b(), t);
  ASSERT_EQ(resp.size(), 4u);
  lb.a().receive(resp[0], t);  // First: bytes 0..1023
  auto nak = from_b(lb, a.qp, Opcode::kRcAcknowledge, o.psn_a + 3);
  nak.aeth = {wire::Syndrome::nak(wire::NakCode::kPsnSeqError), wire::Msn(1)};
  send_spec(lb.a(), nak, {}, t);
  Frames re = drain(lb.a(), t + 10);
  ASSERT_EQ(re.size(), 1u);
  auto rp = parse(re[0]);
  EXPECT_EQ(rp.psn.raw(), (o.psn_a + 1) & 0xFFFFFF) << "resumes at the first missing response";
  EXPECT_EQ(rp.reth().dma_len(), 3072u) << "asks again for everything not received";
  lb.b().receive(re[0], t);  // B: duplicate READ from first+1: replays it
  for (auto& f : drain(lb.b(), t + 20)) lb.a().receive(f, t + 20);
  Wc wc[2];
  ASSERT_EQ(lb.a().poll_cq(a.scq, 2, wc), 1);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rd.bytes, remote.bytes) << "no hole";
}

// Responder harness: one engine, crafted requests.
struct Resp {
  Engine eng{Loopback::default_config(1)};
  EngineConfig peer = Loopback::default_config(0);
  Pd* pd;
  Cq* cq;
  Qp* qp;
  Mr* mr;
  std::vector<std::uint8_t> mem = std::vector<std::uint8_t>(8192, 0x42);
  std::uint64_t now = 1'000'000;
  static constexpr std::uint32_t kE = 1000;
  explicit Resp(std::uint8_t nres) {
    pd = eng.alloc_pd();
    cq = eng.create_cq(64);
    qp = eng.create_qp(pd, QpType::kRc, cq, cq, QpCap{16, 16, 2, 2, 0});
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qp_access_flags =
        kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    eng.modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
    a.qp_state = QpState::kRtr;
    a.path_mtu = Mtu::k256;
    a.dest_qp_num = 0x99;
    a.rq_psn = kE;
    a.max_dest_rd_atomic = nres;
    a.ah.dmac = peer.mac;
    a.ah.dgid = wire::ipv4_mapped(peer.ipv4);
    EXPECT_EQ(eng.modify_qp(qp, a,
                            kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                kQpMaxDestRdAtomic | kQpMinRnrTimer),
              kOk);
    mr = eng.reg_mr(
        pd, mem.data(), mem.size(),
        kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic);
  }
  void read(std::uint32_t psn, std::uint32_t len, std::uint32_t rkey) {
    wire::FrameSpec s;
    s.src_mac = peer.mac;
    s.dst_mac = eng.config().mac;
    s.src_ip4 = peer.ipv4;
    s.dst_ip4 = eng.config().ipv4;
    s.opcode = Opcode::kRcReadRequest;
    s.dest_qp = wire::Qpn(qp->qpn);
    s.psn = Psn(psn);
    s.ack_req = true;
    s.reth = {reinterpret_cast<std::uint64_t>(mem.data()), rkey, len};
    std::vector<std::uint8_t> fr(wire::frame_len(s, 0));
    wire::build_frame(s, {}, fr);
    eng.receive(fr, now);
  }
  std::vector<wire::RxPkt> out;
  Frames raw;
  std::vector<wire::RxPkt>& flush() {
    now += 1000;
    eng.run(now);
    out.clear();
    raw.clear();
    eng.drain_tx([&](std::span<const std::uint8_t> f) { raw.emplace_back(f.begin(), f.end()); });
    for (auto& f : raw) out.push_back(parse(f));
    return out;
  }
};

// F4: after the MR is deregistered (or invalidated), a duplicate READ still streams its bytes.
TEST(Regression, NewReadAfterDeregIsRefused) {
  Resp r(4);
  const std::uint32_t key = r.mr->key;
  r.read(Resp::kE, 256, key);
  ASSERT_EQ(r.flush().size(), 1u);
  r.eng.dereg_mr(r.mr);
  r.read(Resp::kE + 1, 256, key);  // a new READ with that key: rejected
  auto& o1 = r.flush();
  ASSERT_EQ(o1.size(), 1u);
  EXPECT_EQ(o1[0].opcode, Opcode::kRcAcknowledge);
  EXPECT_EQ(o1[0].aeth().syndrome().raw(), 0x62) << "remote access error NAK";
}
TEST(Regression, ReadReplayAfterDeregIsRefused) {
  Resp r(4);
  const std::uint32_t key = r.mr->key;
  r.read(Resp::kE, 256, key);
  ASSERT_EQ(r.flush().size(), 1u);
  r.eng.dereg_mr(r.mr);
  std::fill(r.mem.begin(), r.mem.end(), 0x5A);  // memory reused for something private
  r.read(Resp::kE, 256, key);                   // duplicate of the first READ
  auto& o = r.flush();
  // Not the region's new contents. Nor a NAK: such a duplicate is most often a stale copy of a
  // READ the requester completed before the application freed the region, and a class C NAK
  // would end a healthy connection (the soak's re-registrations found it). Dropped, counted.
  EXPECT_TRUE(o.empty()) << "nothing is sent for it";
  EXPECT_EQ(r.eng.stats().get(Counter::kRxDropDupRead), 1u);
  EXPECT_EQ(r.qp->state, QpState::kRtr);
}

// F6: a duplicate READ replay (from a requester timeout) still queued when the requester's next
// READ arrives: with max_dest_rd_atomic = 1 the responder NAKs it and kills the connection.
TEST(Regression, ReplayDoesNotStarveTheNextRead) {
  Resp r(1);
  r.read(Resp::kE, 4096, r.mr->key);  // 16 responses
  ASSERT_EQ(r.flush().size(), 16u);
  r.read(Resp::kE, 4096, r.mr->key);      // duplicate (requester timed out)
  r.read(Resp::kE + 16, 256, r.mr->key);  // next READ, after the original completed
  auto& o = r.flush();
  ASSERT_FALSE(o.empty());
  EXPECT_EQ(r.qp->state, QpState::kRtr)
      << "responder QP went to error; first out opcode " << int(wire::raw(o[0].opcode)) << " syn 0x"
      << std::hex << int(o[0].info->has(wire::Ext::kAeth) ? o[0].aeth().syndrome().raw() : 0);
}

// F9: resp_duplicate() queues a READ replay without checking that RespState::out has room.
TEST(Regression, DuplicateReadCannotOverflowTheOutputQueue) {
  Resp r(4);
  auto atomic = [&](std::uint32_t psn) {
    wire::FrameSpec s;
    s.src_mac = r.peer.mac;
    s.dst_mac = r.eng.config().mac;
    s.src_ip4 = r.peer.ipv4;
    s.dst_ip4 = r.eng.config().ipv4;
    s.opcode = Opcode::kRcFetchAdd;
    s.dest_qp = wire::Qpn(r.qp->qpn);
    s.psn = Psn(psn);
    s.ack_req = true;
    s.atomic = {reinterpret_cast<std::uint64_t>(r.mem.data()) + 4096, r.mr->key, 1, 0};
    std::vector<std::uint8_t> fr(wire::frame_len(s, 0));
    wire::build_frame(s, {}, fr);
    r.eng.receive(fr, r.now);
  };
  atomic(Resp::kE);
  ASSERT_EQ(r.flush().size(), 1u);
  r.read(Resp::kE + 1, 4096, r.mr->key);          // READ A, 16 responses, queued
  for (int i = 0; i < 31; ++i) atomic(Resp::kE);  // duplicate atomics: 31 queued ACKs
  EXPECT_LE(r.qp->resp.out_tail - r.qp->resp.out_head, 2u)
      << "duplicate answers of one atomic are queued once";
  r.read(Resp::kE + 1, 4096, r.mr->key);  // duplicate READ A
  EXPECT_LE(r.qp->resp.out_tail - r.qp->resp.out_head, 32u) << "queue holds more than its 32 slots";
  r.read(Resp::kE + 17, 256, r.mr->key);  // new READ B: the full check no longer fires
  r.flush();
  EXPECT_LT(r.qp->resp.reads_queued, 16u)
      << "reads_queued underflowed: " << r.qp->resp.reads_queued;
  r.read(Resp::kE + 18, 256, r.mr->key);  // READ C
  auto& o = r.flush();
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].opcode, Opcode::kRcReadResponseOnly)
      << "READ C answered with opcode " << int(wire::raw(o[0].opcode));
}
}  // namespace
}  // namespace roce::test

namespace roce::test {
namespace {

// An engine owned by lcore 2 (QPNs 0x200011...) talks RC to an engine of lcore 0: WRITE, READ
// and SEND work end to end with the high QPNs on the wire.
TEST(Lcores, EnginesOfDifferentLcoresTalkRc) {
  auto ca = Loopback::default_config(0);
  ca.lcore = 2;
  Loopback lb({}, ca, Loopback::default_config(1));
  auto [a, b] = connect(lb);
  EXPECT_EQ(engine::lcore_of_qpn(a.qp->qpn), 2u);
  EXPECT_EQ(engine::lcore_of_qpn(b.qp->qpn), 0u);
  Buffer src = make_buffer(lb.a(), a.pd, 8192, 3);
  Buffer dst = make_buffer(lb.b(), b.pd, 8192, 0);
  engine::Sge s = src.sge();
  engine::SendWr w = make_wr(1, &s, dst);
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), engine::kOk);
  auto wcs = wait_wcs(lb, a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, engine::WcStatus::kSuccess);
  EXPECT_EQ(dst.bytes, src.bytes);
  Buffer back = make_buffer(lb.a(), a.pd, 8192, 0);
  engine::Sge bs = back.sge();
  engine::SendWr r = make_wr(2, &bs, dst, 0, engine::WrOpcode::kRead);
  ASSERT_EQ(lb.a().post_send(a.qp, &r, nullptr), engine::kOk);
  wcs = wait_wcs(lb, a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(back.bytes, src.bytes);
}

// After a loss the requester sends at most EngineConfig::recovery_batch packets of the QP per
// run(), so that the acknowledgements moving its window are read between them; before it, and
// with a large batch, a run() sends many.
std::pair<std::uint32_t, std::uint32_t> packets_per_run(std::uint32_t recovery_batch) {
  LoopbackOptions lo;
  const std::uint32_t psn_a = RcOptions{}.psn_a;
  lo.a2b.drop_psn.push_back({Engine::kFirstQpn, psn_a + 1, 1, -1});
  auto ca = Loopback::default_config(0);
  ca.recovery_batch = recovery_batch;
  Loopback lb(lo, ca);
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 256 * 1024, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 256 * 1024, 2);
  const Sge s = src.sge();
  SendWr wr = make_wr(1, &s, dst);
  EXPECT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  EXPECT_EQ(wait_wcs(lb, a.scq, 1).size(), 1u);
  EXPECT_EQ(dst.bytes, src.bytes);
  EXPECT_GT(lb.a().stats().get(Counter::kRetransmittedPackets), 0u);
  // A's request packets per step (one run() each), before and after the sequence NAK.
  std::map<std::uint64_t, std::uint32_t> before, after;
  std::uint64_t nak_at = UINT64_MAX;
  for (const WireRecord& r : lb.records()) {
    if (r.from == 1 && r.syndrome >= 0 && (r.syndrome & 0x60) == 0x60)
      nak_at = std::min(nak_at, r.t);
    if (r.from == 0) ++(r.t <= nak_at ? before : after)[r.t];
  }
  EXPECT_NE(nak_at, UINT64_MAX) << "no sequence NAK";
  std::uint32_t max_before = 0, max_after = 0;
  for (const auto& [t, n] : before) max_before = std::max(max_before, n);
  for (const auto& [t, n] : after) max_after = std::max(max_after, n);
  return {max_before, max_after};
}

TEST(Regression, RecoveryBatchBoundsPacketsPerRun) {
  const auto [before, after] = packets_per_run(3);
  EXPECT_GT(before, 3u);
  EXPECT_LE(after, 3u);
  const auto [before_big, after_big] = packets_per_run(512);
  EXPECT_GT(after_big, 3u) << "the go-back-N goes out in one batch without the bound";
}

// The requester window is capped in bytes (EngineConfig::max_inflight_bytes): at MTU 4096 the
// default 1 MiB allows 256 packets in flight, not max_inflight_psns (1024).
std::size_t sent_before_first_answer(std::uint64_t max_inflight_bytes) {
  LoopbackOptions lo;
  lo.link_delay_ns = 200'000;  // nothing comes back for a while
  auto ca = Loopback::default_config(0);
  ca.max_inflight_bytes = max_inflight_bytes;
  ca.tx_slots = 2048;
  Loopback lb(lo, ca);
  RcOptions o;
  o.mtu = Mtu::k4096;
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, 8 << 20, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 8 << 20, 2);
  const Sge s = src.sge();
  SendWr wr = make_wr(1, &s, dst);
  EXPECT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  const auto answered = [&] {
    return std::any_of(lb.records().begin(), lb.records().end(),
                       [](const WireRecord& r) { return r.from == 1; });
  };
  EXPECT_TRUE(lb.run_until(answered, 1'000'000'000));
  const auto n = std::count_if(lb.records().begin(), lb.records().end(),
                               [](const WireRecord& r) { return r.from == 0; });
  EXPECT_EQ(wait_wcs(lb, a.scq, 1).size(), 1u);
  EXPECT_EQ(dst.bytes, src.bytes);
  return static_cast<std::size_t>(n);
}

TEST(Regression, WindowIsCappedInBytes) {
  EXPECT_EQ(sent_before_first_answer(1 << 20), 256u);
  EXPECT_EQ(sent_before_first_answer(1ull << 40), 1024u);  // then max_inflight_psns limits
}

}  // namespace
}  // namespace roce::test
