// Attacker review of selective repeat's SENDs, congestion control and the receive fast path
// (session 20, review20-attacker). Each test is an attack on the engine as an off-path sender
// on the segment sees it (it knows a QPN, a PSN near ePSN and the receive message index, not an
// R_Key) and states the behaviour a safe responder must have. The tests that fail on the code
// they were written against are DISABLED_: run them with --gtest_also_run_disabled_tests; the
// fix removes the prefix. (Since the fix of finding 1, the message indices start at a value both
// ends agree on and the forger does not know, SrIndexBase: the forgers below still guess 0, as
// they did; the tests that play the real peer ask the engine for it, idx().)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "dataplane/wire/srh.h"
#include "tests/support/crafted_peer.h"

namespace roce::test {
namespace {

using namespace roce::engine;
using wire::Opcode;

constexpr std::uint32_t kE = CraftedPeer::kEpsn;

// A crafted peer with selective repeat on both ends (MTU 256, 8 KiB of registered memory).
struct SrPeer : CraftedPeer {
  SrPeer() : CraftedPeer(opts()) {
    EXPECT_EQ(eng.set_selective_repeat(qp, true), kOk);
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
  /// An SR packet without any key (a forger's): the SR header, then `len` bytes of `fill`.
  void sr(Opcode op, std::uint32_t psn, std::uint32_t index, std::uint32_t off, std::uint32_t total,
          std::uint32_t len, std::uint8_t fill, bool ack_req = false) {
    Req r;
    r.op = op;
    r.psn = psn;
    r.ack_req = ack_req;
    r.bytes.assign(wire::SrhView::kSize + len, fill);
    wire::SrhView(r.bytes.data()).set(index, off, total);
    r.payload_len = r.bytes.size();
    inject(r);
  }
  /// The same with the RETH a WRITE with immediate's packet carries (the peer's, keyed).
  void sr_keyed(std::uint32_t psn, std::uint32_t index, std::uint32_t off, std::uint32_t total,
                std::uint32_t len, std::uint8_t fill, bool ack_req = false) {
    Req r;
    r.op = Opcode::kSrWriteImm;
    r.psn = psn;
    r.ack_req = ack_req;
    r.bytes.assign(wire::SrhView::kSize + len, fill);
    wire::SrhView(r.bytes.data()).set(index, off, total);
    r.payload_len = r.bytes.size();
    r.va = mem_addr() + 6144 + off;
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
  /// The index of the peer's message `n` (the real peer knows where they start).
  std::uint32_t idx(std::uint32_t n) const { return eng.sr_index_base(qp)->rx + n; }
};

// The highest PSN a plain ACK in `out` covers (0: none).
std::uint32_t acked_to(const std::vector<Answer>& out) {
  std::uint32_t to = 0;
  for (const Answer& a : out)
    if (a.op == Opcode::kRcAcknowledge && (a.syndrome & 0x60) == 0) to = a.psn;
  return to;
}

// Finding 1. A keyless SR SEND placed past ePSN swallows the real peer's WRITE Only at the same
// PSN: the real packet finds the PSN's bit set and is dropped as a "second copy" (sr_keep), then
// ePSN steps over the PSN as the forged message, which completes into the receive WQE. The ACK
// covers the WRITE, whose bytes were never written: what SrAttack.ZeroLengthSpoofAhead... fixed
// for a zero-length WRITE (no key either), through a SEND. The forger needs the QPN, a PSN in the
// 1024 ahead of ePSN, the next message index (0 on a QP that has only received WRITEs so far)
// and one posted receive WQE; go-back-N gives it the same only at ePSN itself.
TEST(SrReview, ForgedSendAheadSwallowsARealWriteOnly) {
  for (const bool sr : {false, true}) {
    SCOPED_TRACE(sr ? "selective repeat" : "go-back-N");
    SrPeer t;
    ASSERT_EQ(t.eng.set_selective_repeat(t.qp, sr), kOk);
    t.post(7, 4096, 256);  // the application's receive, for a later control message
    // The forger: message 0, one packet of 16 bytes, at ePSN + 2. No R_Key.
    t.sr(Opcode::kSrSend, kE + 2, 0, 0, 16, 16, 0xEE);
    t.flush();
    // The real peer: four 256-byte WRITE Only packets, in order, AckReq on the last.
    for (std::uint32_t i = 0; i < 4; ++i)
      t.inject(Opcode::kRcWriteOnly, kE + i, 256, i == 3, i * 256, 256);
    const auto out = t.flush();
    const std::uint32_t to = acked_to(out);
    const bool written = t.mem[2 * 256] == static_cast<std::uint8_t>(kE + 2);
    const auto wcs = t.recvs();
    std::printf(
        "[%s] forged SEND placed: %llu; ACK up to PSN %u (last sent %u), WRITE at PSN %u "
        "written: %s, %zu receive completion(s) (first: %u bytes of 0x%02x)\n",
        sr ? "SR " : "GBN", static_cast<unsigned long long>(t.count(Counter::kSrOooPlaced)), to,
        kE + 3, kE + 2, written ? "yes" : "NO", wcs.size(), wcs.empty() ? 0u : wcs[0].byte_len,
        t.mem[4096]);
    if (to == kE + 3) {
      EXPECT_TRUE(written) << "the WRITE at PSN " << kE + 2 << " was acknowledged, never written";
    }
    EXPECT_TRUE(wcs.empty()) << "a receive completion for a SEND the peer never sent";
  }
}

// Finding 1 with a spray: 64 forged one-packet SENDs, indices 0..63 at PSNs ePSN + 1..64 (64
// guesses of the next message index at once: only the ones within rx_msg..rx_msg + 63 and with
// a posted WQE are placed). With 4 receive WQEs posted, 4 of the real peer's WRITEs in a row
// are acknowledged and never written.
TEST(SrReview, ForgedSprayAheadSwallowsAWriteBurst) {
  SrPeer t;
  for (std::uint32_t i = 0; i < 4; ++i) t.post(20 + i, 4096 + i * 256, 256);
  for (std::uint32_t i = 0; i < 64; ++i) t.sr(Opcode::kSrSend, kE + 1 + i, i, 0, 16, 16, 0xEE);
  t.flush();
  // The real peer: 65 WRITEs of 16 bytes, in order.
  for (std::uint32_t i = 0; i <= 64; ++i)
    t.inject(Opcode::kRcWriteOnly, kE + i, 16, i == 64, i * 16, 16);
  const auto out = t.flush();
  const std::uint32_t to = acked_to(out);
  std::uint32_t lost = 0;  // acknowledged (at or below the ACK's PSN) and not written
  for (std::uint32_t i = 0; i <= 64 && to != 0 && kE + i <= to; ++i)
    lost += t.mem[i * 16] != static_cast<std::uint8_t>(kE + i);
  std::printf(
      "forged placed %llu; ACK up to %u (last %u); WRITEs acknowledged, never written: %u; %zu "
      "receive completions\n",
      static_cast<unsigned long long>(t.count(Counter::kSrOooPlaced)), to, kE + 64, lost,
      t.recvs().size());
  EXPECT_EQ(lost, 0u) << "acknowledged WRITEs never written";
}

// Finding 1, the same with a READ request at the forged PSN: the real READ is dropped as a
// "second copy" and never executed, and the ACK past it tells the requester it was; its
// re-requests are duplicates without a resource (dropped), so the connection ends with its
// retry budget spent.
TEST(SrReview, ForgedSendAheadSwallowsARealRead) {
  for (const bool sr : {false, true}) {
    SCOPED_TRACE(sr ? "selective repeat" : "go-back-N");
    SrPeer t;
    ASSERT_EQ(t.eng.set_selective_repeat(t.qp, sr), kOk);
    t.post(7, 4096, 256);
    t.sr(Opcode::kSrSend, kE + 1, 0, 0, 16, 16, 0xEE);
    t.flush();
    // The real peer: the READ (two responses) at ePSN + 1 arrives before the WRITE at ePSN.
    t.inject(Opcode::kRcReadRequest, kE + 1, 0, true, 0, 512);
    t.inject(Opcode::kRcWriteOnly, kE, 256, true, 1024, 256);
    const auto out = t.flush();
    // The requester sends the READ again (after the sequence NAK, or its timeout).
    t.inject(Opcode::kRcReadRequest, kE + 1, 0, true, 0, 512);
    const auto again = t.flush();
    std::size_t responses = 0;
    for (const auto* v : {&out, &again})
      for (const Answer& a : *v)
        responses += a.op == Opcode::kRcReadResponseFirst || a.op == Opcode::kRcReadResponseLast;
    std::printf("[%s] READ at PSN %u: ACK up to %u before it was answered, %zu responses\n",
                sr ? "SR " : "GBN", kE + 1, acked_to(out), responses);
    EXPECT_NE(acked_to(out), kE + 1) << "acknowledged past a READ never executed";
    EXPECT_EQ(responses, 2u) << "the READ is never answered";
  }
}

// Finding 1, a third form: one keyless SR packet ends the connection. The forged first packet
// of a two-packet SEND (message 0) sits at ePSN + 1; the real peer's WRITE Only at ePSN + 2 is
// placed past the gap. When ePSN steps over the forged packet the forged message opens, and
// the real WRITE found next is "an opcode sequence error" (sr_advance): invalid request NAK,
// the QP in error. (SrAttack.SpoofInsideAMultiPacketSendKillsTheQp closed this for a
// zero-length WRITE spoof.) Go-back-N drops the forged packet and loses nothing.
TEST(SrReview, ForgedSendFirstAheadKillsTheQp) {
  for (const bool sr : {false, true}) {
    SCOPED_TRACE(sr ? "selective repeat" : "go-back-N");
    SrPeer t;
    ASSERT_EQ(t.eng.set_selective_repeat(t.qp, sr), kOk);
    t.post(7, 4096, 1024);
    t.sr(Opcode::kSrSend, kE + 1, 0, 0, 512, 256, 0xEE);
    t.flush();
    // The real peer's WRITEs; the one at ePSN arrives last.
    t.inject(Opcode::kRcWriteOnly, kE + 2, 256, true, 512, 256);
    t.inject(Opcode::kRcWriteOnly, kE + 1, 256, false, 256, 256);
    t.inject(Opcode::kRcWriteOnly, kE, 256, false, 0, 256);
    t.flush();
    std::printf("[%s] QP after three real WRITEs and one forged SR packet: %s\n",
                sr ? "SR " : "GBN", t.qp->state == QpState::kErr ? "ERROR" : "ok");
    EXPECT_NE(t.qp->state, QpState::kErr) << "one keyless forged packet ended the connection";
  }
}

// The fix of finding 1: the message indices start at a base both ends agreed on (SrIndexBase).
// An SR packet whose index is outside the next 64 from the one expected is no packet of the
// peer's: past ePSN or at it, SEND or keyed WRITE with immediate, it is counted
// (sr_forged_dropped), placed nowhere and answered with nothing (no sequence NAK sends the
// requester back, no NAK ends the QP); the peer's own message, with the right index, then
// arrives as if nothing had happened.
TEST(SrReview, IndexOutsideTheWindowIsDroppedUnanswered) {
  constexpr std::uint32_t kB = 0x00000010;  // near 0: indices below it wrap to the top
  SrPeer t;
  ASSERT_EQ(t.eng.set_selective_repeat(t.qp, true, {0, kB}), kOk);
  t.post(7, 4096, 256);
  t.sr(Opcode::kSrSend, kE + 1, kB - 1, 0, 16, 16, 0xEE);               // behind the window
  t.sr(Opcode::kSrSend, kE + 2, kB + SrState::kMsgs, 0, 16, 16, 0xEE);  // just past it
  t.sr(Opcode::kSrSendImm, kE + 3, 0, 0, 16, 16, 0xEE);                 // the old guess
  t.sr_keyed(kE + 4, kB + 0x80000000u, 0, 16, 16, 0xEE);                // keyed, far off
  t.sr(Opcode::kSrSend, kE, kB + 1000, 0, 16, 16, 0xEE, true);          // at ePSN
  t.sr(Opcode::kSrSend, kE, kB - 64, 0, 300, 256, 0xEE, true);          // at ePSN, first of 2
  EXPECT_EQ(t.count(Counter::kSrForgedDropped), 6u);
  EXPECT_EQ(t.count(Counter::kSrOooPlaced), 0u);
  EXPECT_EQ(t.count(Counter::kSrUnplaced), 0u);
  EXPECT_TRUE(t.flush().empty()) << "a forged packet draws no answer";
  EXPECT_EQ(std::count(t.mem.begin(), t.mem.end(), 0), static_cast<long>(t.mem.size()));
  EXPECT_EQ(t.qp->resp.epsn.raw(), kE);
  EXPECT_NE(t.qp->state, QpState::kErr);
  // The peer's message kB, then kB + 1 past a gap: both complete.
  t.post(8, 5120, 256);
  t.sr(Opcode::kSrSend, kE + 1, kB + 1, 0, 20, 20, 0x22);
  t.sr(Opcode::kSrSend, kE, kB, 0, 10, 10, 0x11, true);
  t.flush();
  const auto wcs = t.recvs();
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 7u);
  EXPECT_EQ(wcs[0].byte_len, 10u);
  EXPECT_EQ(wcs[1].wr_id, 8u);
  EXPECT_EQ(t.mem[4096], 0x11);
  EXPECT_EQ(t.mem[5120], 0x22);
  EXPECT_EQ(t.count(Counter::kSrForgedDropped), 6u);
}

// Without agreed values (set_selective_repeat without a base), each QP's bases are drawn from
// the keys' generator: not 0, and not the same twice.
TEST(SrReview, BasesAreDrawnWhenNotGiven) {
  SrPeer t;
  const SrIndexBase a = *t.eng.sr_index_base(t.qp);
  ASSERT_EQ(t.eng.set_selective_repeat(t.qp, true), kOk);
  const SrIndexBase b = *t.eng.sr_index_base(t.qp);
  EXPECT_NE(a.rx, b.rx);
  EXPECT_NE(a.tx, b.tx);
  EXPECT_NE(a.rx, a.tx);
  EXPECT_EQ(t.qp->sr->rx_msg, b.rx);
  EXPECT_EQ(t.qp->sr->tx_msg, b.tx);
}

// Finding 2. A standard SEND Only in order while an SR SEND is open (its first packet taken in
// order, its WQE held) passes the opcode sequence check (SR messages leave RespState::in_msg at
// kNone), lands in the SR message's WQE and completes it. The SR message's later packets still
// match its record and are scattered into that buffer after its completion was reported (the
// application may have reused it: another connection's data in a shared registered pool); the
// QP stops only at the message's last packet. A peer that negotiated selective repeat (or a
// forger who knows ePSN) writes into a buffer the application owns again.
TEST(SrReview, StandardSendInsideAnOpenSrMessageWritesAfterCompletion) {
  SrPeer t;
  t.post(1, 0, 1024);     // A
  t.post(2, 2048, 1024);  // B
  // SR message 0, three packets (768 bytes) from ePSN: the first in order takes A.
  t.sr(Opcode::kSrSend, kE, t.idx(0), 0, 768, 256, 0x11);
  // A standard SEND Only of 16 bytes at the next PSN.
  t.inject(Opcode::kRcSendOnly, kE + 1, 16, true);
  t.flush();
  // A completed (by the standard SEND; or flushed, if the QP refused it): the application takes
  // A back and reuses it.
  const auto wcs = t.recvs();
  ASSERT_TRUE(std::any_of(wcs.begin(), wcs.end(), [](const Wc& w) { return w.wr_id == 1; }));
  std::fill_n(t.mem.begin(), 1024, 0x55);
  // The SR message's third packet, in order: it matches the record (first ePSN, 768 bytes).
  t.sr(Opcode::kSrSend, kE + 2, t.idx(0), 512, 768, 256, 0x33, true);
  t.flush();
  const auto n55 = std::count(t.mem.begin(), t.mem.begin() + 1024, 0x55);
  std::printf("A after its completion: %ld of 1024 bytes still the application's; QP %s\n",
              static_cast<long>(n55), t.qp->state == QpState::kErr ? "in error" : "ok");
  EXPECT_EQ(n55, 1024) << "bytes written into A after its completion";
}

// Finding 2, its other form: a standard SEND Only in order while an SR WRITE with immediate is
// open takes the receive WQE that the WRITE with immediate was to take at its end. Every
// later message then completes one WQE further along the ring than the one its early packets
// were placed in (ring_wqe): SEND message 1, placed in W1, completes in W2, whose buffer holds
// nothing of it (a receive completion for data never received there), with its length, 100
// bytes, though W2 has 64 (checked against W1 when it was placed, never against W2).
TEST(SrReview, StandardSendInsideAnOpenSrWriteImmShiftsTheRing) {
  SrPeer t;
  t.post(10, 0, 512);                           // W0
  t.post(11, 1024, 512);                        // W1
  t.post(12, 2048, 64);                         // W2, smaller than message 1
  t.sr_keyed(kE, t.idx(0), 0, 768, 256, 0x11);  // WRITE with immediate, message 0 (3 packets)
  t.sr(Opcode::kSrSend, kE + 3, t.idx(1), 0, 100, 100, 0x44);  // SEND message 1, past the gap
  EXPECT_EQ(t.mem[1024], 0x44) << "placed in W1";
  t.inject(Opcode::kRcSendOnly, kE + 1, 16, false);         // takes W0
  t.sr_keyed(kE + 2, t.idx(0), 512, 768, 256, 0x22, true);  // message 0 ends: it takes W1
  t.flush();
  const auto wcs = t.recvs();
  for (const Wc& wc : wcs)
    std::printf("completion wr_id %llu, %u bytes, status %d; QP %s\n",
                static_cast<unsigned long long>(wc.wr_id), wc.byte_len, static_cast<int>(wc.status),
                t.qp->state == QpState::kErr ? "in error" : "ok");
  // Safe: the QP stops, or every successful completion holds its message. W2's, if any:
  for (const Wc& wc : wcs) {
    if (wc.wr_id != 12 || wc.status != WcStatus::kSuccess) continue;
    EXPECT_LE(wc.byte_len, 64u) << "a completion longer than its 64-byte buffer";
    EXPECT_EQ(t.mem[2048], 0x44) << "SEND message 1 completed in W2, its bytes are in W1";
  }
}

}  // namespace
}  // namespace roce::test
