// Selective repeat as an attacker on the segment sees it: each test states the behaviour a safe
// responder or requester must have against spoofed frames (an off-path sender who knows a QPN
// and a PSN in the window but no R_Key) and forged SACKs or CNPs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "dataplane/engine/cc/dcqcn.h"
#include "tests/support/crafted_peer.h"

namespace roce::test {
namespace {

using namespace roce::engine;
using wire::Opcode;

constexpr std::uint32_t kE = CraftedPeer::kEpsn;

// An off-path spoofer who knows the QPN and a PSN anywhere in the 1024 ahead of ePSN, but no
// R_Key: a zero-length WRITE Only needs no key (IBA C9-88), and sr_keep places it (sets its
// bit) without one. The real packet with that PSN then finds its bit set and is dropped as a
// "second copy", or ePSN steps over it; either way the ACK covers it: the requester completes
// the WRITE successfully while the responder's memory never got those bytes.
TEST(SrAttack, ZeroLengthSpoofAheadSwallowsTheRealPacket) {
  for (const bool sr : {false, true}) {
    SCOPED_TRACE(sr ? "selective repeat" : "go-back-N");
    CraftedPeer t;
    ASSERT_EQ(t.eng.set_selective_repeat(t.qp, sr), kOk);
    std::fill(t.mem.begin(), t.mem.end(), 0);
    CraftedPeer::Req spoof;  // no key, no address: only QPN + a PSN in the window
    spoof.op = Opcode::kRcWriteOnly;
    spoof.psn = kE + 2;
    spoof.payload_len = 0;
    spoof.va = 0;
    spoof.rkey = 0;
    spoof.dma_len = 0;
    t.inject(spoof);
    t.flush();  // go-back-N: one sequence NAK to the real peer (it resends; harmless)
    // The real requester's four packets, in order, each 256 bytes to its own place.
    for (std::uint32_t i = 0; i < 4; ++i)
      t.inject(Opcode::kRcWriteOnly, kE + i, 256, i == 3, i * 256, 256);
    const auto out = t.flush();
    std::uint32_t acked_to = 0;
    for (const Answer& a : out)
      if (a.op == Opcode::kRcAcknowledge && (a.syndrome & 0x60) == 0) acked_to = a.psn;
    const bool written = t.mem[2 * 256] == static_cast<std::uint8_t>(kE + 2);
    std::printf("[%s] ACK up to PSN %u (last sent %u), packet %u's bytes written: %s\n",
                sr ? "SR " : "GBN", acked_to, kE + 3, kE + 2, written ? "yes" : "NO");
    // Safe: whatever the responder acknowledged, it wrote.
    if (acked_to == kE + 3) {
      EXPECT_TRUE(written) << "acknowledged, never written";
    }
  }
}

// The same spoofed zero-length WRITE Only, aimed at a PSN inside a READ the real peer sends
// next: the READ moves ePSN over the whole response range and the bit stays behind (nkept
// stays 1). 1024 PSNs later it aliases (bit = PSN % 1024) and swallows an ordinary in-order
// WRITE of the real peer: ePSN steps over it as "placed", the ACK covers it, nothing written.
TEST(SrAttack, StaleBitLeftInsideAReadSwallowsAWrite1024PsnsLater) {
  CraftedPeer t;
  ASSERT_EQ(t.eng.set_selective_repeat(t.qp, true), kOk);
  std::fill(t.mem.begin(), t.mem.end(), 0);
  CraftedPeer::Req spoof;
  spoof.op = Opcode::kRcWriteOnly;
  spoof.psn = kE + 1;
  t.inject(spoof);
  // The real peer: a READ of 4 responses (PSNs kE..kE+3), then WRITEs from kE+4 on.
  t.inject(Opcode::kRcReadRequest, kE, 0, true, 0, 4 * 256);
  t.flush();
  std::printf("after the READ: ePSN %u, nkept %u (stale bit for PSN %u)\n", t.qp->resp.epsn.raw(),
              t.qp->sr->nkept, kE + 1);
  const std::uint32_t victim = kE + 1 + SrState::kBits;
  for (std::uint32_t p = kE + 4; p < victim; ++p) t.inject(Opcode::kRcWriteOnly, p, 0, false);
  t.flush();
  // The victim: 256 bytes at offset 2048, with AckReq, arriving in order.
  t.inject(Opcode::kRcWriteOnly, victim, 256, true, 2048, 256);
  const auto out = t.flush();
  std::uint32_t acked_to = 0;
  for (const Answer& a : out)
    if (a.op == Opcode::kRcAcknowledge && (a.syndrome & 0x60) == 0) acked_to = a.psn;
  const bool written = t.mem[2048] == static_cast<std::uint8_t>(victim);
  std::printf("victim PSN %u: ACK up to %u, written: %s, duplicates counted %llu\n", victim,
              acked_to, written ? "yes" : "NO",
              static_cast<unsigned long long>(t.eng.stats().get(Counter::kDuplicateRequests)));
  EXPECT_EQ(acked_to, victim);
  EXPECT_TRUE(written) << "acknowledged in order, never written";
}

// The same with a keyed 256-byte WRITE Only inside the READ's PSNs (a peer that breaks the
// protocol, or a spoofer who learnt a key): zero-length placement refused or not, the bit must
// not outlive the READ.
TEST(SrAttack, KeyedBitInsideAReadDoesNotOutliveIt) {
  CraftedPeer t;
  ASSERT_EQ(t.eng.set_selective_repeat(t.qp, true), kOk);
  std::fill(t.mem.begin(), t.mem.end(), 0);
  t.inject(Opcode::kRcWriteOnly, kE + 1, 256, false, 3072, 256);
  t.inject(Opcode::kRcReadRequest, kE, 0, true, 0, 4 * 256);
  t.flush();
  std::printf("keyed: after the READ ePSN %u, nkept %u\n", t.qp->resp.epsn.raw(), t.qp->sr->nkept);
  EXPECT_EQ(t.qp->sr->nkept, 0u) << "a bit left behind inside the READ";
  const std::uint32_t victim = kE + 1 + SrState::kBits;
  for (std::uint32_t p = kE + 4; p < victim; ++p) t.inject(Opcode::kRcWriteOnly, p, 0, false);
  t.inject(Opcode::kRcWriteOnly, victim, 256, true, 2048, 256);
  t.flush();
  EXPECT_EQ(t.mem[2048], static_cast<std::uint8_t>(victim)) << "acknowledged, never written";
}

// A spoofed zero-length WRITE Only at a PSN that the real peer's next SEND spans: when the
// SEND's First arrives in order, sr_advance finds the bit with a message under way and ends
// the connection (class C NAK, QP in error). go-back-N: the spoof is not placed.
TEST(SrAttack, SpoofInsideAMultiPacketSendKillsTheQp) {
  for (const bool sr : {false, true}) {
    SCOPED_TRACE(sr ? "selective repeat" : "go-back-N");
    CraftedPeer t;
    ASSERT_EQ(t.eng.set_selective_repeat(t.qp, sr), kOk);
    t.post_recvs(2);
    CraftedPeer::Req spoof;
    spoof.op = Opcode::kRcWriteOnly;
    spoof.psn = kE + 1;
    t.inject(spoof);
    t.flush();
    t.inject(Opcode::kRcSendFirst, kE, 256, false);
    t.inject(Opcode::kRcSendMiddle, kE + 1, 256, false);
    t.inject(Opcode::kRcSendLast, kE + 2, 16, true);
    t.flush();
    std::printf("[%s] QP state after a real 3-packet SEND: %s\n", sr ? "SR " : "GBN",
                t.qp->state == QpState::kErr ? "ERROR" : "ok");
    EXPECT_NE(t.qp->state, QpState::kErr) << "a spoofed bodiless packet ended the connection";
  }
}

// Requester: one forged SACK (BTH PSN in the window, as a forged NAK needs) makes it send the
// named packets again; the same SACK repeated makes it send them again each time, without
// limit and without spending the retry budget. (A forged sequence NAK repeated causes one
// go-back-N until progress: CompState::retried.)
TEST(SrAttack, RepeatedForgedSackResendsTheWindowEachTime) {
  constexpr std::uint32_t kS = CraftedPeer::kSpsn;
  CraftedOptions o;
  o.mem_size = 16384;
  CraftedPeer t(o);
  ASSERT_EQ(t.eng.set_selective_repeat(t.qp, true), kOk);
  t.to_rts();
  Sge s{t.mem_addr(), 4096, t.mr->key};  // 16 packets at MTU 256
  SendWr w;
  w.opcode = WrOpcode::kWrite;
  w.sg_list = &s;
  w.num_sge = 1;
  w.send_flags = kSendSignaled;
  w.rdma = {0x10000, 0x77};
  ASSERT_EQ(t.eng.post_send(t.qp, &w, nullptr), kOk);
  ASSERT_EQ(t.flush().size(), 16u);
  std::size_t resent = 0;
  constexpr int kForged = 20;
  for (int i = 0; i < kForged; ++i) {
    t.respond(Opcode::kRcAcknowledge, kS, SrState::kSackSyndrome, 0, 0, kS + 15);
    resent += t.flush().size();
  }
  std::printf(
      "%d forged SACKs of 70 bytes each: %zu packets (%zu payload bytes) sent again, "
      "retries %llu\n",
      kForged, resent, resent * 256,
      static_cast<unsigned long long>(t.eng.stats().get(Counter::kRetries)));
  EXPECT_LE(resent, 15u) << "each PSN sent again at most once per loss report";
}

// Sound: the bitmap index is PSN % 1024 and 2^24 is a multiple of 1024, so placement across the
// PSN wrap lands and advances as anywhere else.
TEST(SrAttack, PlacementAcrossThePsnWrapIsExact) {
  CraftedPeer t;
  // Move ePSN to just below the wrap: RESET and back with rq_psn 0xFFFFFE.
  QpAttr a;
  a.qp_state = QpState::kReset;
  ASSERT_EQ(t.eng.modify_qp(t.qp, a, kQpState), kOk);
  a.qp_state = QpState::kInit;
  a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  ASSERT_EQ(t.eng.modify_qp(t.qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags), kOk);
  ASSERT_EQ(t.eng.set_selective_repeat(t.qp, true), kOk);
  a.qp_state = QpState::kRtr;
  a.path_mtu = Mtu::k256;
  a.dest_qp_num = CraftedPeer::kPeerQpn;
  a.rq_psn = 0xFFFFFE;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah.dmac = t.peer.mac;
  a.ah.dgid = wire::ipv4_mapped(t.peer.ipv4);
  ASSERT_EQ(t.eng.modify_qp(t.qp, a,
                            kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                kQpMaxDestRdAtomic | kQpMinRnrTimer),
            kOk);
  std::fill(t.mem.begin(), t.mem.end(), 0);
  for (std::uint32_t i = 1; i <= 5; ++i)
    t.inject(Opcode::kRcWriteOnly, (0xFFFFFE + i) & 0xFFFFFF, 256, false, i * 256, 256);
  EXPECT_EQ(t.eng.stats().get(Counter::kSrOooPlaced), 5u);
  t.inject(Opcode::kRcWriteOnly, 0xFFFFFE, 256, true, 0, 256);
  const auto out = t.flush();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().psn, 3u) << "ePSN stepped over the wrap to 4";
  EXPECT_EQ(t.qp->sr->nkept, 0u);
  for (std::uint32_t i = 1; i <= 5; ++i)
    EXPECT_EQ(t.mem[i * 256], static_cast<std::uint8_t>((0xFFFFFE + i) & 0xFF));
}

}  // namespace
}  // namespace roce::test

namespace roce::test {
namespace {

// Forged CNPs (QPN + the peer's IP address; nothing else is checked or checkable): with the
// defaults, one CNP per monitor period pins a sending QP at rpg_min_rate. How long to get there,
// and how long the QP needs to recover once the CNPs stop (the state machine alone).
TEST(SrAttack, ForgedCnpsPinAQpAtTheMinimumRate) {
  engine::cc::DcqcnParams p;
  p.max_rate_mbps = 100'000;
  engine::cc::Dcqcn d(p);
  std::uint64_t t = 1'000'000, cnps = 0;
  while (d.rate_mbps() > p.min_rate_mbps + 1e-9 && cnps < 100000) {
    d.on_cnp(t);
    ++cnps;
    t += std::uint64_t{p.rate_reduce_monitor_period_us} * 1000;
  }
  const std::uint64_t pinned_at = t - 1'000'000;
  std::uint64_t r = t;
  while (d.rate_mbps() < 0.9 * p.max_rate_mbps && r - t < 60'000'000'000ull) {
    r += 1'000'000;
    d.advance(r);
  }
  std::printf(
      "100 Gb/s -> %u Mb/s after %llu CNPs in %.2f ms (one per %u us); back to 90%% "
      "after %.1f ms without CNPs (timer only, no bytes)\n",
      p.min_rate_mbps, static_cast<unsigned long long>(cnps), pinned_at / 1e6,
      p.rate_reduce_monitor_period_us, (r - t) / 1e6);
  EXPECT_GT(cnps, 1u);
}

// Selective repeat set on one connection must not outlive it: a QP taken back to RESET and
// connected to another (perhaps standard) peer would otherwise SACK a peer that treats the
// reserved AETH type as an error.
TEST(SrAttack, ResetEndsSelectiveRepeat) {
  CraftedPeer t;
  ASSERT_EQ(t.eng.set_selective_repeat(t.qp, true), kOk);
  ASSERT_TRUE(t.qp->req.sr);
  QpAttr at;
  at.qp_state = QpState::kReset;
  ASSERT_EQ(t.eng.modify_qp(t.qp, at, kQpState), kOk);
  EXPECT_FALSE(t.qp->req.sr);
  EXPECT_EQ(t.qp->sr, nullptr);
}

}  // namespace
}  // namespace roce::test
