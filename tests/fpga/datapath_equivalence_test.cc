// The `datapath` offload mode against the software path: the same seeded WRITE/READ workload
// (1 B to 100 KB, multi-packet at path MTU 1024) from A to B, once with A a software engine and
// once with A's QP on the datapath card (fpga/model/datapath.h), which the host reaches only
// through the ports: QP path and state writes, MR/TLB writes, packed work-request descriptors
// in, packed completion descriptors out. Frames on the wire, completions and both memories
// must be identical (no normalising: the card's QPN and PSNs are the ones the software picks
// with the same seeds); a frame dropped on the wire either way is resent by the card and
// counted under Coyote's names.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "dataplane/engine/engine.h"
#include "fpga/model/datapath.h"
#include "fpga/model/device.h"
#include "tests/support/loopback.h"

namespace roce::fpga {
namespace {

using namespace roce::engine;

struct Outcome {
  std::vector<std::vector<std::uint8_t>> frames;  ///< every frame on the wire, both directions
  std::vector<std::tuple<std::uint64_t, int, int, std::uint32_t>> wcs;  ///< A's completions
  std::vector<std::uint8_t> mem_a, mem_b;
  std::array<std::uint64_t, kDevCounters> card{};
  std::uint64_t b_seq_naks = 0;
  std::uint64_t a_bad_icrc = 0;  ///< software A: frames its parser dropped for the ICRC
};

constexpr std::size_t kBuf = 1 << 18;
constexpr std::uint64_t kIovaA = 0x10000000, kIovaB = 0x20000000;
constexpr std::uint64_t kBWrite = 0x38000;  ///< B's WRITE into A: offset and length 20000
constexpr std::uint32_t kPsnA = 0x123456, kPsnB = 0xABCDEF;
constexpr std::uint32_t kAcc = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;

struct Op {
  WqOpcode op;
  std::uint32_t len;
};
const Op kOps[] = {{WqOpcode::kWrite, 1},     {WqOpcode::kWrite, 1000}, {WqOpcode::kWrite, 4096},
                   {WqOpcode::kWrite, 65536}, {WqOpcode::kRead, 4096},  {WqOpcode::kRead, 100000},
                   {WqOpcode::kWrite, 0},     {WqOpcode::kRead, 1},     {WqOpcode::kWrite, 20000},
                   {WqOpcode::kRead, 3000}};

/// `card`: A's QP on the datapath card; `drop_a2b` / `drop_b2a`: the nth frame in that
/// direction is lost on the wire (0: none); `corrupt_b2a`: a payload bit of that frame from B
/// flips on the wire.
Outcome run(bool card, std::size_t drop_a2b = 0, std::size_t drop_b2a = 0,
            std::size_t corrupt_b2a = 0) {
  const EngineConfig ca = test::Loopback::default_config(0);
  Engine eb(test::Loopback::default_config(1));
  std::vector<std::uint8_t> ma(kBuf), mb(kBuf);
  test::fill_pattern(ma, 1);
  test::fill_pattern(mb, 2);

  // B: the software engine, as test::connect brings it up.
  Pd* pdb = eb.alloc_pd();
  Cq* cqb = eb.create_cq(4096);
  Qp* qpb = eb.create_qp(pdb, QpType::kRc, cqb, cqb, QpCap{256, 256, 4, 4, 128});
  EXPECT_NE(qpb, nullptr);
  Mr* mrb = eb.reg_mr(pdb, mb.data(), kBuf, kIovaB, kAcc);  // its addresses go on the wire
  EXPECT_NE(mrb, nullptr);

  // A: software engine or the card behind its driver.
  std::unique_ptr<Engine> ea;
  std::unique_ptr<DatapathCard> dev;
  std::unique_ptr<DatapathDriver> drv;
  Cq* cqa = nullptr;
  Qp* qpa = nullptr;
  std::uint32_t qpn_a = 0, lkey_a = 0;
  if (!card) {
    ea = std::make_unique<Engine>(ca);
    Pd* pda = ea->alloc_pd();
    cqa = ea->create_cq(4096);
    qpa = ea->create_qp(pda, QpType::kRc, cqa, cqa, QpCap{256, 256, 4, 4, 128});
    Mr* mra = ea->reg_mr(pda, ma.data(), kBuf, kIovaA, kAcc);
    EXPECT_NE(mra, nullptr);
    qpn_a = qpa->qpn;
    lkey_a = mra->key;
  } else {
    DatapathCard::Config cc;
    cc.net = ca;
    dev = std::make_unique<DatapathCard>(cc);
    drv = std::make_unique<DatapathDriver>(*dev);
    QpPath p;
    p.pd = 1;
    std::memcpy(p.dgid.data(), wire::ipv4_mapped(eb.config().ipv4).b.data(), 16);
    std::memcpy(p.dmac.data(), eb.config().mac.b.data(), 6);
    p.path_mtu = static_cast<std::uint8_t>(Mtu::k1024);
    p.timeout = 10;
    p.retry_cnt = 7;
    p.rnr_retry = 7;
    p.min_rnr_timer = 1;
    p.max_rd_atomic = 16;
    p.access = kAcc;
    qpn_a = drv->create_qp(p);
    lkey_a = drv->reg_mr(1, ma.data(), kBuf, kAcc, kIovaA);
    EXPECT_NE(qpn_a, 0u);
    EXPECT_NE(lkey_a, 0u);
  }

  // Connect: A's side by verbs or by one host2qp_wr; B's by verbs.
  auto up = [](Engine& e, Qp* qp, const EngineConfig& peer, std::uint32_t peer_qpn,
               std::uint32_t my_psn, std::uint32_t peer_psn) {
    QpAttr a;
    a.qp_state = engine::QpState::kInit;
    a.qp_access_flags = kAcc;
    EXPECT_EQ(e.modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags), kOk);
    a.qp_state = engine::QpState::kRtr;
    a.path_mtu = Mtu::k1024;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = peer_psn;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 1;
    a.ah.dmac = peer.mac;
    a.ah.dgid = wire::ipv4_mapped(peer.ipv4);
    EXPECT_EQ(e.modify_qp(qp, a,
                          kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                              kQpMaxDestRdAtomic | kQpMinRnrTimer),
              kOk);
    a.qp_state = engine::QpState::kRts;
    a.sq_psn = my_psn;
    a.timeout = 10;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 16;
    EXPECT_EQ(
        e.modify_qp(
            qp, a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic),
        kOk);
  };
  if (card)
    EXPECT_TRUE(drv->connect(qpn_a, qpb->qpn, kPsnA, kPsnB));
  else
    up(*ea, qpa, eb.config(), qpb->qpn, kPsnA, kPsnB);
  up(eb, qpb, ca, qpn_a, kPsnB, kPsnA);

  // The work, as descriptors (the software side gets the same as SendWrs).
  std::uint64_t off = 0;
  std::vector<Sge> sges(std::size(kOps));
  std::vector<SendWr> wrs(std::size(kOps));
  for (std::size_t i = 0; i < std::size(kOps); ++i) {
    WorkRequest d;
    d.wr_id = i + 1;
    d.qpn = qpn_a;
    d.opcode = kOps[i].op;
    d.flags = 1;  // signaled
    d.laddr = kIovaA + off;
    d.lkey = lkey_a;
    d.raddr = kIovaB + off;
    d.rkey = mrb->key;
    d.len = kOps[i].len;
    off += (kOps[i].len + 63) & ~std::uint64_t{63};
    if (card) {
      EXPECT_TRUE(drv->post(d));
    } else {
      sges[i] = {d.laddr, d.len, d.lkey};
      SendWr& w = wrs[i];
      w.wr_id = d.wr_id;
      w.sg_list = &sges[i];
      w.num_sge = d.len > 0 ? 1 : 0;
      w.opcode = d.opcode == WqOpcode::kRead ? WrOpcode::kRead : WrOpcode::kWrite;
      w.send_flags = kSendSignaled;
      w.rdma.remote_addr = d.raddr;
      w.rdma.rkey = d.rkey;
      EXPECT_EQ(ea->post_send(qpa, &w, nullptr), kOk);
    }
  }

  // And B writes into A (the card is then the responder: PSN checks, ACKs, sequence NAKs).
  Sge sb{kIovaB + kBWrite, 20000, mrb->key};
  SendWr wb;
  wb.wr_id = 1000;
  wb.sg_list = &sb;
  wb.num_sge = 1;
  wb.opcode = WrOpcode::kWrite;
  wb.send_flags = kSendSignaled;
  wb.rdma.remote_addr = kIovaA + kBWrite;
  wb.rdma.rkey = lkey_a;
  EXPECT_EQ(eb.post_send(qpb, &wb, nullptr), kOk);

  Outcome out;
  std::size_t a2b = 0, b2a = 0;
  std::uint64_t t = 2'000'000;
  std::size_t idle = 0;
  while (idle < 20000 && t < 2'000'000'000) {
    t += 1000;
    bool moved = false;
    std::vector<std::vector<std::uint8_t>> from_a, from_b;
    auto take = [&](std::span<const std::uint8_t> f) { from_a.emplace_back(f.begin(), f.end()); };
    if (card) {
      dev->run(t, take);
    } else {
      ea->run(t);
      ea->drain_tx(take);
    }
    from_b = test::drain(eb, t);
    for (auto& f : from_a) {
      moved = true;
      out.frames.push_back(f);
      if (++a2b == drop_a2b) continue;
      eb.receive(f, t);
    }
    for (auto& f : from_b) {
      moved = true;
      out.frames.push_back(f);
      if (++b2a == drop_b2a) continue;
      if (b2a == corrupt_b2a) f[f.size() - 9] ^= 0x04;
      if (card)
        EXPECT_TRUE(dev->net2dev_rx(f, t));
      else
        ea->receive(f, t);
    }
    if (card) {
      for (const Completion& c : drv->poll()) {
        out.wcs.emplace_back(c.wr_id, c.status, c.opcode, c.byte_len);
        moved = true;
      }
    } else {
      Wc wc[16];
      const int n = cqa->poll(16, wc);
      for (int i = 0; i < n; ++i)
        out.wcs.emplace_back(wc[i].wr_id, static_cast<int>(wc[i].status),
                             static_cast<int>(wc[i].opcode), wc[i].byte_len);
      moved |= n > 0;
    }
    Wc wcb[4];
    const int nb = cqb->poll(4, wcb);
    for (int i = 0; i < nb; ++i)
      out.wcs.emplace_back(wcb[i].wr_id, static_cast<int>(wcb[i].status),
                           static_cast<int>(wcb[i].opcode), wcb[i].byte_len);
    moved |= nb > 0;
    idle = moved ? 0 : idle + 1;
  }
  out.mem_a = ma;
  out.mem_b = mb;
  if (dev) out.card = dev->counters();
  if (ea) out.a_bad_icrc = ea->stats().verdicts[static_cast<std::size_t>(wire::Verdict::kBadIcrc)];
  out.b_seq_naks = eb.stats().get(Counter::kSeqErrNakSent);
  return out;
}

std::uint64_t cnt(const Outcome& o, DevCounter c) { return o.card[static_cast<std::size_t>(c)]; }

void expect_identical(const Outcome& sw, const Outcome& hw) {
  ASSERT_EQ(hw.frames.size(), sw.frames.size());
  for (std::size_t i = 0; i < sw.frames.size(); ++i) {
    if (hw.frames[i] == sw.frames[i]) continue;
    std::size_t at = 0;
    while (at < hw.frames[i].size() && at < sw.frames[i].size() &&
           hw.frames[i][at] == sw.frames[i][at])
      ++at;
    FAIL() << "frame " << i << " differs from byte " << at << " (lengths " << hw.frames[i].size()
           << ", " << sw.frames[i].size() << ")";
  }
  EXPECT_EQ(hw.wcs, sw.wcs);
  EXPECT_EQ(hw.mem_a, sw.mem_a);
  EXPECT_EQ(hw.mem_b, sw.mem_b);
}

void expect_all_done(const Outcome& o) {
  ASSERT_EQ(o.wcs.size(), std::size(kOps) + 1);
  for (const auto& w : o.wcs) EXPECT_EQ(std::get<1>(w), 0) << "wr " << std::get<0>(w);
}

TEST(DatapathEquivalence, SameFramesCompletionsAndMemory) {
  const Outcome sw = run(false);
  const Outcome hw = run(true);
  expect_all_done(sw);
  expect_identical(sw, hw);
  // The card counted what crossed it: every frame it sent and received is RoCE and passed.
  std::size_t a_frames = 0;
  for (const auto& f : hw.frames) a_frames += f[11] == 0x0A;  // source MAC ...:0a is A
  EXPECT_EQ(cnt(hw, DevCounter::kTxPkgs), a_frames);
  EXPECT_EQ(cnt(hw, DevCounter::kRoceTxPkgs), a_frames);
  EXPECT_EQ(cnt(hw, DevCounter::kRxPkgs), hw.frames.size() - a_frames);
  EXPECT_EQ(cnt(hw, DevCounter::kRoceRxPkgs), cnt(hw, DevCounter::kRxPkgs));
  EXPECT_EQ(cnt(hw, DevCounter::kIbvRxPkgs), cnt(hw, DevCounter::kRxPkgs));
  EXPECT_GE(a_frames, 95u);  // WRITE packets at MTU 1024 (64 + 20 + 4 + 3) and 4 READ requests
  EXPECT_EQ(cnt(hw, DevCounter::kWqIn), std::size(kOps));
  EXPECT_EQ(cnt(hw, DevCounter::kCqOut), std::size(kOps));
  // Nothing lost: nothing resent. One PSN drop even so: B's coalesced ACK arrives after a
  // READ response has acknowledged its PSNs implicitly, and is dropped as stale.
  EXPECT_LE(cnt(hw, DevCounter::kPsnDropCnt), 1u);
  EXPECT_EQ(cnt(hw, DevCounter::kRetransCnt), 0u);
  std::printf("%s", format_nstats(hw.card, "datapath card (A)").c_str());
}

TEST(DatapathEquivalence, ALostRequestIsResentByTheCard) {
  // The 10th frame from A is part of the 64 KiB WRITE: B NAKs the gap, the card goes back.
  const Outcome sw = run(false, 10, 0);
  const Outcome hw = run(true, 10, 0);
  expect_all_done(hw);
  expect_identical(sw, hw);
  EXPECT_GT(hw.b_seq_naks, 0u);
  EXPECT_GT(cnt(hw, DevCounter::kRetransCnt), 0u);
  const Outcome clean = run(false);
  EXPECT_EQ(hw.mem_a, clean.mem_a);
  EXPECT_EQ(hw.mem_b, clean.mem_b);
}

/// The position among B's frames of the nth packet of B's WRITE into A (BTH opcodes 6-8).
std::size_t nth_b_write_packet(const Outcome& o, std::size_t n) {
  std::size_t b2a = 0;
  for (const auto& f : o.frames) {
    if (f[11] != 0x0B) continue;  // source MAC ...:0b is B
    ++b2a;
    if (f[42] >= 0x06 && f[42] <= 0x08 && --n == 0) return b2a;
  }
  return 0;
}

TEST(DatapathEquivalence, ALostWriteEachWay) {
  const Outcome clean = run(false);
  const std::size_t at = nth_b_write_packet(clean, 5);
  ASSERT_GT(at, 0u);
  // B's 5th WRITE packet into A is lost: the card, as responder, drops what follows by PSN
  // and NAKs the gap; B goes back. The 40th frame A sends is lost too (a WRITE packet): the
  // card resends.
  const Outcome sw = run(false, 40, at);
  const Outcome hw = run(true, 40, at);
  expect_all_done(hw);
  expect_identical(sw, hw);
  EXPECT_EQ(hw.mem_a, clean.mem_a);  // the data arrived whole all the same
  EXPECT_EQ(hw.mem_b, clean.mem_b);
  EXPECT_GT(cnt(hw, DevCounter::kPsnDropCnt), 2u);
  EXPECT_GT(cnt(hw, DevCounter::kRetransCnt), 0u);
  std::printf("%s", format_nstats(hw.card, "datapath card (A), two frames lost").c_str());
}

TEST(DatapathEquivalence, ACorruptFrameIsDroppedAndCountedByTheCard) {
  // The 20th frame from B arrives with a flipped payload bit: the card drops it for its ICRC
  // (counted as `ICRC drop cnt`) as the software engine does, and recovers the same way.
  const Outcome clean = run(false);
  const Outcome sw = run(false, 0, 0, 20);
  const Outcome hw = run(true, 0, 0, 20);
  EXPECT_EQ(sw.a_bad_icrc, 1u);
  EXPECT_EQ(cnt(hw, DevCounter::kRxIcrcDrop), 1u);
  EXPECT_EQ(cnt(hw, DevCounter::kIbvRxPkgs) + 1, cnt(hw, DevCounter::kRoceRxPkgs));
  expect_all_done(hw);
  expect_identical(sw, hw);
  EXPECT_EQ(hw.mem_a, clean.mem_a);
  EXPECT_EQ(hw.mem_b, clean.mem_b);
}

TEST(DatapathCard, RefusesWhatNoMrEntryAllowsAndWhatItDoesNotRun) {
  DatapathCard::Config cc;
  cc.net = test::Loopback::default_config(0);
  DatapathCard dev(cc);
  DatapathDriver drv(dev);
  QpPath p;
  p.pd = 1;
  const std::uint32_t qpn = drv.create_qp(p);
  ASSERT_NE(qpn, 0u);
  ASSERT_TRUE(drv.connect(qpn, 0x11, 1, 2));
  std::vector<std::uint8_t> buf(4096);
  const std::uint32_t ro = drv.reg_mr(1, buf.data(), buf.size(), 0);  // no local write
  const std::uint32_t other_pd = drv.reg_mr(2, buf.data(), buf.size(), kAccessLocalWrite);
  ASSERT_NE(ro, 0u);
  ASSERT_NE(other_pd, 0u);
  const auto base = reinterpret_cast<std::uint64_t>(buf.data());
  auto wr = [&](std::uint64_t id, WqOpcode op, std::uint32_t key, std::uint64_t a,
                std::uint32_t len) {
    WorkRequest d;
    d.wr_id = id;
    d.qpn = qpn;
    d.opcode = op;
    d.flags = 1;
    d.laddr = a;
    d.lkey = key;
    d.len = len;
    return d;
  };
  EXPECT_TRUE(drv.post(wr(1, WqOpcode::kRead, ro, base, 64)));           // READ into read-only
  EXPECT_TRUE(drv.post(wr(2, WqOpcode::kWrite, ro, base + 4000, 200)));  // past its end
  EXPECT_TRUE(drv.post(wr(3, WqOpcode::kWrite, other_pd, base, 64)));    // another PD's MR
  EXPECT_TRUE(drv.post(wr(4, WqOpcode::kWrite, 0x1234, base, 64)));      // no such key
  EXPECT_TRUE(drv.post(wr(5, WqOpcode::kSend, ro, base, 64)));           // the software's
  dev.run(1000, [](std::span<const std::uint8_t>) { ADD_FAILURE() << "nothing may be sent"; });
  const auto c = drv.poll();
  ASSERT_EQ(c.size(), 5u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(c[i].status, kWcStatusLocProtErr) << i;
  EXPECT_EQ(c[4].status, kWcStatusLocQpOpErr);
  EXPECT_EQ(dev.counter(DevCounter::kWqIn), 5u);
  EXPECT_EQ(dev.counter(DevCounter::kCqOut), 5u);
  // A frame for a QP the card does not own goes to the host's software path.
  std::vector<std::uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  EXPECT_FALSE(dev.net2dev_rx(arp, 2000));
  EXPECT_TRUE(drv.dereg_mr(ro));
  EXPECT_FALSE(drv.dereg_mr(ro));
  EXPECT_TRUE(drv.destroy_qp(qpn));
}

}  // namespace
}  // namespace roce::fpga
