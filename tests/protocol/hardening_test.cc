// What a peer's frames may and may not do to the responder's memory and state: every packet
// of a WRITE is checked against its key, READ length and READ/atomic resources are bounded by
// IBA and by what was negotiated, a CQ overrun stops the QP instead of losing a completion
// silently, and every drop has a counter. Run under ASan (the sanitize preset) these also
// prove that nothing touches freed memory.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "tests/support/crafted_peer.h"
#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;
using wire::Opcode;
constexpr std::uint32_t kE = CraftedPeer::kEpsn;
constexpr std::uint8_t kNakInvReq = 0x61;
constexpr std::uint8_t kNakRemAccess = 0x62;

TEST(Hardening, WriteMiddleAfterDeregIsRemoteAccessNakNotUseAfterFree) {
  CraftedPeer t;
  // A region of its own, freed after deregistration.
  auto buf = std::make_unique<std::uint8_t[]>(1024);
  Mr* mr = t.eng.reg_mr(t.pd, buf.get(), 1024, kAccessLocalWrite | kAccessRemoteWrite);
  ASSERT_NE(mr, nullptr);
  const std::uint32_t key = mr->key;
  const auto va = reinterpret_cast<std::uint64_t>(buf.get());
  t.inject({Opcode::kRcWriteFirst, kE, 256, false, va, key, 768});
  EXPECT_TRUE(t.flush().empty());
  ASSERT_EQ(t.eng.dereg_mr(mr), kOk);
  buf.reset();  // ASan: any later write into it is a heap-use-after-free
  t.inject({Opcode::kRcWriteMiddle, kE + 1, 256, false});
  t.inject({Opcode::kRcWriteLast, kE + 2, 256, true});
  const auto out = t.flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome, kNakRemAccess);
  EXPECT_EQ(out[0].psn, kE + 1) << "the packet that found the key gone";
  EXPECT_EQ(t.qp->state, QpState::kErr);
  AsyncEvent ev;
  ASSERT_TRUE(t.eng.get_async_event(ev));
  EXPECT_EQ(ev.type, AsyncEventType::kQpAccessErr);
  EXPECT_EQ(ev.qp_num, t.qp->qpn);
}

TEST(Hardening, WriteMiddleAfterLocalInvalidateIsRemoteAccessNak) {
  CraftedPeer t;
  Mr* fr = t.eng.alloc_mr(t.pd, 4096);
  t.qp->state = QpState::kRts;
  t.qp->attr.qp_state = QpState::kRts;
  Sge none{};
  SendWr wr;
  wr.opcode = WrOpcode::kRegMr;
  wr.sg_list = &none;
  wr.reg = {fr->key, 3, t.mem_addr(), 1024, kAccessLocalWrite | kAccessRemoteWrite, 0};
  ASSERT_EQ(t.eng.post_send(t.qp, &wr, nullptr), kOk);
  t.flush();
  const std::uint32_t key = fr->key;
  t.inject({Opcode::kRcWriteFirst, kE, 256, false, t.mem_addr(), key, 768});
  SendWr inv;
  inv.opcode = WrOpcode::kLocalInv;
  inv.invalidate_rkey = key;
  inv.sg_list = &none;
  ASSERT_EQ(t.eng.post_send(t.qp, &inv, nullptr), kOk);
  t.flush();
  std::fill(t.mem.begin(), t.mem.end(), 0);
  t.inject({Opcode::kRcWriteMiddle, kE + 1, 256, false});
  const auto out = t.flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome, kNakRemAccess);
  EXPECT_EQ(t.mem[256], 0) << "nothing written after the invalidation";
}

// The responder remembers the last WRITE's key check (KeyMemo): a later WRITE through the
// same key is granted by a few compares, but only inside the region, and not once the table
// changed (deregistration, re-registration).
TEST(Hardening, RememberedWriteKeyGrantsOnlyItsRegionAndOnlyUntilTheTableChanges) {
  enum class Then { kPastTheEnd, kRereg, kDereg };
  for (Then then : {Then::kPastTheEnd, Then::kRereg, Then::kDereg}) {
    SCOPED_TRACE(static_cast<int>(then));
    CraftedPeer t;
    auto buf = std::make_unique<std::uint8_t[]>(1024);
    Mr* mr = t.eng.reg_mr(t.pd, buf.get(), 1024, kAccessLocalWrite | kAccessRemoteWrite);
    ASSERT_NE(mr, nullptr);
    const std::uint32_t key = mr->key;
    const auto va = reinterpret_cast<std::uint64_t>(buf.get());
    t.inject({Opcode::kRcWriteOnly, kE, 64, true, va, key, 64});
    t.inject({Opcode::kRcWriteOnly, kE + 1, 64, true, va + 960, key, 64});  // the last 64 bytes
    auto out = t.flush();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].syndrome >> 5, 0) << "ACK";
    EXPECT_EQ(out[0].psn, kE + 1);
    std::uint64_t at = va;
    if (then == Then::kPastTheEnd) at = va + 961;
    if (then == Then::kRereg) {
      ASSERT_EQ(t.eng.rereg_mr(mr, t.pd, buf.get(), 1024, va, kAccessLocalWrite), kOk);
    }
    if (then == Then::kDereg) {
      ASSERT_EQ(t.eng.dereg_mr(mr), kOk);
    }
    buf[0] = 0;
    t.inject({Opcode::kRcWriteOnly, kE + 2, 64, true, at, key, 64});
    out = t.flush();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].syndrome, kNakRemAccess);
    EXPECT_EQ(out[0].psn, kE + 2);
    if (then != Then::kDereg) {
      EXPECT_EQ(buf[0], 0) << "nothing written";
    }
  }
}

TEST(Hardening, ReadLongerThanTwoGibIsInvalidRequest) {
  CraftedPeer t;
  t.inject({Opcode::kRcReadRequest, kE, 0, true, t.mem_addr(), t.mr->key, 0x8000'0001u});
  const auto out = t.flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome, kNakInvReq) << "IBA: at most 2^31 bytes, checked before the key";
}

TEST(Hardening, MoreReadsThanMaxDestRdAtomicIsInvalidRequest) {
  CraftedOptions o;
  o.max_dest_rd_atomic = 2;
  CraftedPeer t(o);
  // Three READs in one burst, none answered yet: the third exceeds what was negotiated.
  t.inject({Opcode::kRcReadRequest, kE, 0, true, t.mem_addr(), t.mr->key, 1024});
  t.inject({Opcode::kRcReadRequest, kE + 4, 0, true, t.mem_addr(), t.mr->key, 1024});
  t.inject({Opcode::kRcReadRequest, kE + 8, 0, true, t.mem_addr(), t.mr->key, 1024});
  const auto out = t.flush();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().syndrome, kNakInvReq);
  EXPECT_EQ(out.back().psn, kE + 8);
  EXPECT_EQ(t.qp->state, QpState::kErr);
}

TEST(Hardening, ReadsWithinMaxDestRdAtomicAreServed) {
  CraftedOptions o;
  o.max_dest_rd_atomic = 2;
  CraftedPeer t(o);
  t.inject({Opcode::kRcReadRequest, kE, 0, true, t.mem_addr(), t.mr->key, 512});
  t.inject({Opcode::kRcReadRequest, kE + 2, 0, true, t.mem_addr(), t.mr->key, 512});
  EXPECT_EQ(t.flush().size(), 4u);
  t.inject({Opcode::kRcReadRequest, kE + 4, 0, true, t.mem_addr(), t.mr->key, 512});
  EXPECT_EQ(t.flush().size(), 2u) << "the first two finished: their resources are free again";
  EXPECT_NE(t.qp->state, QpState::kErr);
}

TEST(Hardening, CqOverrunStopsTheQpAndRaisesEvents) {
  CraftedOptions o;
  o.cq_depth = 2;
  CraftedPeer t(o);
  t.post_recvs(4);
  for (std::uint32_t i = 0; i < 3; ++i) t.inject(Opcode::kRcSendOnly, kE + i, 8, true);
  t.flush();
  EXPECT_EQ(t.qp->state, QpState::kErr) << "its completions can no longer be reported";
  EXPECT_GE(t.eng.stats().get(Counter::kCqOverflow), 1u);
  AsyncEvent ev;
  ASSERT_TRUE(t.eng.get_async_event(ev));
  EXPECT_EQ(ev.type, AsyncEventType::kCqErr);
  EXPECT_EQ(ev.cq, t.cq);
  ASSERT_TRUE(t.eng.get_async_event(ev));
  EXPECT_EQ(ev.type, AsyncEventType::kQpFatal);
  EXPECT_EQ(ev.qp_num, t.qp->qpn);
  Wc wc[4];
  EXPECT_EQ(t.eng.poll_cq(t.cq, 4, wc), 2) << "what fitted is still there";
  EXPECT_EQ(t.eng.poll_cq(t.cq, 4, wc), 0) << "a stopped CQ takes nothing more";
}

TEST(Hardening, EveryDropHasACounter) {
  CraftedPeer t;
  // RC: packets still ahead after the one sequence NAK.
  t.inject(Opcode::kRcWriteOnly, kE + 2, 8, true, 0, 8);
  t.inject(Opcode::kRcWriteOnly, kE + 3, 8, true, 0, 8);
  t.flush();
  EXPECT_EQ(t.eng.stats().get(Counter::kSeqErrNakSent), 1u);
  EXPECT_EQ(t.eng.stats().get(Counter::kRxDropAfterSeqNak), 1u);
  // A duplicate READ that matches no READ the responder holds.
  t.inject(Opcode::kRcWriteOnly, kE, 8, true, 0, 8);
  t.inject({Opcode::kRcReadRequest, kE - 5, 0, true, t.mem_addr(), t.mr->key, 64});
  t.flush();
  EXPECT_EQ(t.eng.stats().get(Counter::kRxDropDupRead), 1u);

  CraftedOptions uc;
  uc.type = QpType::kUc;
  CraftedPeer u(uc);
  u.inject(Opcode::kUcWriteMiddle, kE, 256, false);  // start lost: resync
  EXPECT_EQ(u.eng.stats().get(Counter::kRxDropUcResync), 1u);
  u.inject(Opcode::kUcSendOnly, kE + 1, 8, false);  // no receive WQE
  EXPECT_EQ(u.eng.stats().get(Counter::kRxDropUcError), 1u);
  EXPECT_TRUE(u.flush().empty()) << "UC never answers";
}

TEST(Hardening, IovaIsWhatPeersAndWorkRequestsName) {
  CraftedPeer t;
  // The registering code sees the memory at a made-up I/O address; the engine at its own.
  std::vector<std::uint8_t> host(2048, 0);
  constexpr std::uint64_t kIova = 0x7000'0000'0000ull;
  Mr* mr = t.eng.reg_mr(t.pd, host.data(), host.size(), kIova,
                        kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->addr, kIova);
  t.inject({Opcode::kRcWriteOnly, kE, 100, true, kIova + 10, mr->key, 100});
  auto out = t.flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome & 0x60, 0);
  EXPECT_EQ(host[10], static_cast<std::uint8_t>(kE));
  EXPECT_EQ(host[109], static_cast<std::uint8_t>(kE));
  EXPECT_EQ(host[110], 0);
  // The engine's own address is not a valid I/O address of that MR.
  t.inject({Opcode::kRcWriteOnly, kE + 1, 8, true, reinterpret_cast<std::uint64_t>(host.data()),
            mr->key, 8});
  out = t.flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].syndrome, kNakRemAccess);
}

TEST(Hardening, IovaReadAndAtomicTranslate) {
  CraftedPeer t;
  std::vector<std::uint8_t> host(1024);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::uint8_t>(i * 7);
  constexpr std::uint64_t kIova = 0x10'0000;
  Mr* mr = t.eng.reg_mr(t.pd, host.data(), host.size(), kIova,
                        kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteAtomic);
  ASSERT_NE(mr, nullptr);
  t.inject({Opcode::kRcReadRequest, kE, 0, true, kIova + 256, mr->key, 256});
  auto out = t.flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, Opcode::kRcReadResponseOnly);
  EXPECT_EQ(out[0].payload_len, 256u);
  t.inject({Opcode::kRcFetchAdd, kE + 1, 0, true, kIova + 512, mr->key, 0, 5, 0});
  out = t.flush();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, Opcode::kRcAtomicAcknowledge);
  std::uint64_t v;
  std::memcpy(&v, host.data() + 512, 8);
  std::uint64_t before;
  std::vector<std::uint8_t> orig(8);
  for (int i = 0; i < 8; ++i) orig[i] = static_cast<std::uint8_t>((512 + i) * 7);
  std::memcpy(&before, orig.data(), 8);
  EXPECT_EQ(v, before + 5);
}

TEST(Hardening, LimitsAreEnforced) {
  EngineConfig c = Loopback::default_config(0);
  c.max_mrs = 3;
  c.max_cq_depth = 100;
  Engine e(c);
  Pd* pd = e.alloc_pd();
  std::vector<std::uint8_t> m(64);
  EXPECT_NE(e.reg_mr(pd, m.data(), 64, kAccessLocalWrite), nullptr);
  EXPECT_NE(e.reg_mr(pd, m.data(), 64, kAccessLocalWrite), nullptr);
  EXPECT_NE(e.alloc_mr(pd, 64), nullptr);
  EXPECT_EQ(e.reg_mr(pd, m.data(), 64, kAccessLocalWrite), nullptr) << "max_mrs";
  EXPECT_EQ(e.alloc_mr(pd, 64), nullptr) << "max_mrs";
  EXPECT_NE(e.create_cq(100), nullptr);
  EXPECT_EQ(e.create_cq(101), nullptr) << "max_cq_depth";
}

TEST(Hardening, QpnsAreRandomAndNotReusedAtOnce) {
  EngineConfig c = Loopback::default_config(0);
  c.first_qp_index.reset();
  c.seed = 0;  // the kernel's generator, as in production
  c.max_qps = 4096;
  Engine e(c);
  Pd* pd = e.alloc_pd();
  Cq* cq = e.create_cq(16);
  std::vector<Qp*> qps;
  int consecutive = 0;
  for (int i = 0; i < 32; ++i) {
    qps.push_back(e.create_qp(pd, QpType::kRc, cq, cq, QpCap{4, 4, 1, 1, 0}));
    ASSERT_NE(qps.back(), nullptr);
    if (i > 0 && qps[i]->qpn == qps[i - 1]->qpn + 1) ++consecutive;
  }
  EXPECT_LT(consecutive, 4) << "QPNs are not handed out in sequence";
  // A destroyed QP's number does not come back at once.
  std::set<std::uint32_t> freed;
  for (int i = 0; i < 16; ++i) {
    freed.insert(qps[i]->qpn);
    ASSERT_EQ(e.destroy_qp(qps[i]), kOk);
  }
  for (int i = 0; i < 64; ++i) {
    Qp* q = e.create_qp(pd, QpType::kRc, cq, cq, QpCap{4, 4, 1, 1, 0});
    ASSERT_NE(q, nullptr);
    EXPECT_FALSE(freed.contains(q->qpn)) << "QPN " << q->qpn << " reused at once";
  }
}

TEST(Hardening, KeysComeFromTheKernelGenerator) {
  KeyRandom a(0), b(0);
  EXPECT_TRUE(a.cryptographic());
  EXPECT_NE(a.next(), b.next()) << "two generators never agree (2^-64)";
  KeyRandom s1(42), s2(42);
  EXPECT_FALSE(s1.cryptographic());
  EXPECT_EQ(s1.next(), s2.next()) << "a seed reproduces (tests only)";
}

TEST(Hardening, FramesOfAnotherVlanAreDroppedAndCounted) {
  for (const std::optional<std::uint16_t> port_vlan :
       {std::optional<std::uint16_t>{100}, std::optional<std::uint16_t>{}}) {
    EngineConfig c = Loopback::default_config(1);
    c.vlan_id = port_vlan;
    Engine e(c);
    const EngineConfig peer = Loopback::default_config(0);
    auto frame = [&](std::optional<std::uint16_t> vlan) {
      wire::FrameSpec s;
      s.src_mac = peer.mac;
      s.dst_mac = c.mac;
      s.src_ip4 = peer.ipv4;
      s.dst_ip4 = c.ipv4;
      s.vlan_id = vlan;
      s.opcode = Opcode::kRcSendOnly;
      s.dest_qp = wire::Qpn(0x777777);
      std::vector<std::uint8_t> f(wire::frame_len(s, 0));
      wire::build_frame(s, {}, f);
      return f;
    };
    e.receive(frame(200), 0);
    EXPECT_EQ(e.stats().get(Counter::kRxDropVlan), 1u) << "VLAN 200";
    e.receive(frame(port_vlan ? std::optional<std::uint16_t>{} : std::optional<std::uint16_t>{100}),
              0);
    EXPECT_EQ(e.stats().get(Counter::kRxDropVlan), 2u) << "untagged on a VLAN port, or tagged";
    e.receive(frame(port_vlan), 0);
    EXPECT_EQ(e.stats().get(Counter::kRxDropVlan), 2u) << "its own VLAN goes on";
    EXPECT_EQ(e.stats().get(Counter::kRxDropUnknownQp), 1u);
  }
}

}  // namespace
}  // namespace roce::test
