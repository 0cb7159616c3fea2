/// @file
/// Completer (IBA 9.7.5.2; rxe_comp.c): consumes ACKs, NAKs, READ responses and atomic ACKs,
/// completes send WQEs in order, and decides retries: a PSN sequence NAK or a hole before a
/// READ/atomic response means go-back-N, an RNR NAK means wait then retry, a class C NAK
/// completes the WQE in error and moves the QP to the error state.
#include <algorithm>
#include <cstring>

#include "dataplane/engine/engine_loc.h"

namespace roce::engine {

using wire::OpMask;
using wire::Psn;

void Engine::Stages::comp_retire(Engine& eng, Qp& qp) {
  while (qp.sq_head != qp.sq_tail) {
    SendWqe& w = qp.wqe(qp.sq_head);
    if (w.state == WqeState::kFailed) {
      // Everything before the failed WQE has completed: report it and stop the QP.
      qp_to_error(eng, qp);
      return;
    }
    if (w.state == WqeState::kExecuted) {
      comp_wqe_done(eng, qp, w, WcStatus::kSuccess);
    } else if (w.state != WqeState::kDone) {
      break;
    }
    ++qp.sq_head;
  }
}

void Engine::Stages::comp_progress(Engine& eng, Qp& qp) {
  // The answer to a probe. If it acknowledges exactly the probed packet, that packet had been
  // lost, and the responder dropped what followed it (a gap): go back to them. If it goes
  // further, or comes sooner than half a round trip after the probe (the original's ACK), the
  // packets are in flight: resume, and probe later next time.
  if (qp.comp.probing) {
    qp.comp.probing = qp.comp.probe_sent = false;
    constexpr std::uint8_t kMaxPtoShift = 3;
    const bool early = eng.now_ - qp.comp.probe_sent_at < qp.comp.srtt_ns / 2;
    const bool filled = !early && qp.comp.psn == qp.comp.probe_psn + 1;
    if (filled)
      qp.comp.pto_shift = 0;  // the probe was needed, and is again at once
    else if (qp.comp.pto_shift < kMaxPtoShift)
      ++qp.comp.pto_shift;
    if (filled && before(qp.comp.psn, qp.req.high_psn)) {
      qp.comp.retry_left = qp.attr.retry_cnt;
      qp.comp.rnr_left = qp.attr.rnr_retry;
      qp.comp.retrans_deadline = 0;
      qp.comp.probe_backoff = 0;
      arm_retransmit(eng, qp);
      on_loss(eng, qp);
      order_retry(eng, qp, qp.comp.psn, false);
      return;
    }
  }
  if (qp.req.sr && qp.sr->probe_out) [[unlikely]]
    sr_probe_answer(eng, qp);  // selective repeat: what the probe's answer shows lost
  // Something this QP sent at its first_turn or later arrived: the path has carried the turns
  // up to there (the probe's RACK test, fire_timers); up to the last one when all has.
  {
    const std::uint32_t t = qp.comp.psn == qp.req.high_psn ? qp.comp.last_turn : qp.comp.first_turn;
    if (static_cast<std::int32_t>(t - eng.acked_turn_) > 0) eng.acked_turn_ = t;
  }
  // Forward progress resets the retry budgets (rxe reset_retry_counters) and the timer.
  qp.comp.retry_left = qp.attr.retry_cnt;
  qp.comp.rnr_left = qp.attr.rnr_retry;
  qp.comp.retried = false;
  qp.comp.retrans_deadline = 0;
  rtt_sample(eng, qp);
  grow_window(eng, qp);
  qp.comp.probe_deadline = 0;
  qp.comp.probe_backoff = 0;
  arm_retransmit(eng, qp);
  arm_probe(eng, qp);
  schedule_send(eng, qp);
}

namespace {
// The sent WQE whose PSNs hold `p`; null when none does.
SendWqe* wqe_of_psn(Qp& qp, Psn p) {
  for (std::uint32_t i = qp.sq_head; i != qp.sq_tail; ++i) {
    SendWqe& w = qp.wqe(i);
    if (w.state == WqeState::kPosted) return nullptr;
    if (w.npkts == 0) continue;
    if (before(p, w.first_psn)) return nullptr;
    if (!after(p, w.last_psn)) return &w;
  }
  return nullptr;
}

bool finished(const SendWqe& w) {
  return w.state == WqeState::kExecuted || w.state == WqeState::kDone;
}
}  // namespace

// Moves the oldest unacknowledged PSN on: past every finished WQE at the head of the send
// queue, to the first missing response of the oldest unfinished READ, the request of an
// unanswered atomic, or the first packet (`upto`, when an ACK ends inside it) of an
// unacknowledged SEND/WRITE. A READ that finished before older ones does not move it.
void Engine::Stages::comp_advance(Engine& eng, Qp& qp, Psn upto) {
  Psn psn = qp.comp.psn;
  for (std::uint32_t i = qp.sq_head; i != qp.sq_tail; ++i) {
    const SendWqe& w = qp.wqe(i);
    if (w.state == WqeState::kPosted || w.state == WqeState::kFailed) break;
    if (w.npkts == 0) continue;
    if (finished(w)) {
      psn = w.last_psn + 1;
      continue;
    }
    if (w.opcode == WrOpcode::kRead)
      psn = w.read_resume_psn(qp.pmtu_shift());
    else if (w.is_rd_atomic())
      psn = w.first_psn;
    else
      psn = after(upto, w.first_psn) ? upto : w.first_psn;
    break;
  }
  if (after(psn, qp.req.high_psn)) psn = qp.req.high_psn;
  if (after(psn, qp.comp.psn)) {
    qp.comp.psn = psn;
    comp_progress(eng, qp);
  }
}

// Every request whose PSNs all come before `upto` has been executed by the responder (an ACK,
// NAK or response with PSN `upto` says so: IBA 9.7.5.1.1 implied acknowledgement). A SEND or
// WRITE among them is acknowledged. A READ among them whose responses did not all come lost
// them: only the missing ones are asked for again (read_gap), and the later WQEs go on. An
// atomic whose ACK was lost is sent again by go-back-N from it: returns false.
bool Engine::Stages::comp_implied_ack(Engine& eng, Qp& qp, Psn upto) {
  for (std::uint32_t i = qp.sq_head; i != qp.sq_tail; ++i) {
    SendWqe& w = qp.wqe(i);
    if (w.state == WqeState::kPosted) break;
    if (finished(w) || w.state == WqeState::kFailed || w.npkts == 0) continue;
    if (!before(w.last_psn, upto)) break;
    if (w.opcode == WrOpcode::kRead) {
      read_gap(eng, qp, w, w.npkts);
      continue;
    }
    if (w.is_rd_atomic()) {
      comp_advance(eng, qp, upto);
      order_retry(eng, qp, w.first_psn, true);
      return false;
    }
    // Acknowledged: it completes in post order (comp_retire), after any local operation
    // posted before it; if the requester was re-sending it, req_pump steps over it.
    w.state = WqeState::kExecuted;
  }
  comp_advance(eng, qp, upto);
  comp_retire(eng, qp);
  return true;
}

void Engine::Stages::comp_on_response(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  if (qp.type != QpType::kRc ||
      (qp.state != QpState::kRts && qp.state != QpState::kSqd && qp.state != QpState::kSqe)) {
    eng.stats_.inc(Counter::kRxDropQpState);
    return;
  }
  const Psn p = pkt.psn;
  // Responses older than the oldest unacknowledged PSN, or for PSNs never sent, are dropped.
  if (before(p, qp.comp.psn) || !before(p, qp.req.high_psn)) {
    eng.stats_.inc(Counter::kRxDropUnexpected);
    return;
  }
  if (pkt.ecn == 3) [[unlikely]]
    cc_on_ce(eng, qp, pkt);  // within the window: the notification point (congestion.cc)
  if (pkt.opcode == wire::Opcode::kRcAcknowledge) {
    comp_on_ack(eng, qp, pkt);
    return;
  }
  // READ response or atomic ACK: it belongs to the READ or atomic whose PSNs hold it, not
  // necessarily the oldest (a READ whose responses were lost waits for them while later READs
  // go on), and everything before that WQE was executed by the responder.
  SendWqe* w = wqe_of_psn(qp, p);
  if (w == nullptr || !w->is_rd_atomic()) {
    eng.stats_.inc(Counter::kRxDropUnexpected);
    return;
  }
  if (!comp_implied_ack(eng, qp, w->first_psn)) return;
  if (finished(*w) || w->state == WqeState::kFailed) {
    eng.stats_.inc(Counter::kRxDupReadResponses);  // late, or a replay of what arrived
    return;
  }
  if (pkt.opcode == wire::Opcode::kRcAtomicAcknowledge)
    comp_on_atomic_ack(eng, qp, *w, pkt);
  else
    comp_on_read_response(eng, qp, *w, pkt);
}

// ACK, RNR NAK or NAK (IBA 9.7.5.2.1-9.7.5.2.8).
[[gnu::always_inline]] inline void Engine::Stages::comp_on_ack(Engine& eng, Qp& qp,
                                                               const wire::RxPkt& pkt) {
  const Psn p = pkt.psn;
  const wire::Syndrome syn = pkt.aeth().syndrome();
  switch (syn.type()) {
    case wire::AckType::kAck:
      eng.stats_.inc(Counter::kAckRcvd);
      comp_implied_ack(eng, qp, p + 1);
      break;
    case wire::AckType::kRnrNak: {
      eng.stats_.inc(Counter::kRnrNakRcvd);
      if (!comp_implied_ack(eng, qp, p)) break;
      if (qp.comp.rnr_left == 0) {
        eng.stats_.inc(Counter::kRnrRetryExceeded);
        qp_to_error(eng, qp, WcStatus::kRnrRetryExcErr);
        break;
      }
      if (qp.attr.rnr_retry != 7) --qp.comp.rnr_left;
      // IBA 9.7.5.2.8: wait at least the advertised RNR timer, then resend from p.
      qp.comp.rnr_deadline = eng.now_ + std::uint64_t{wire::kRnrTimerUs[syn.value()]} * 1000;
      qp.comp.rnr_psn = p;
      qp.comp.retrans_deadline = 0;
      qp.comp.probe_deadline = 0;
      qp.comp.probing = qp.comp.probe_sent = false;
      track_timer(eng, qp);
      break;
    }
    case wire::AckType::kNak: {
      if (!comp_implied_ack(eng, qp, p)) break;
      if (syn.nak_code() == wire::NakCode::kPsnSeqError) {
        eng.stats_.inc(Counter::kSeqErrNakRcvd);
        order_retry(eng, qp, p, true);
        break;
      }
      eng.stats_.inc(Counter::kErrNakRcvd);
      WcStatus st = WcStatus::kRemOpErr;
      if (syn.nak_code() == wire::NakCode::kInvalidRequest) st = WcStatus::kRemInvReqErr;
      if (syn.nak_code() == wire::NakCode::kRemoteAccessError) st = WcStatus::kRemAccessErr;
      qp_to_error(eng, qp, st);
      break;
    }
    case wire::AckType::kReserved:
      // Selective repeat's SACK (SrState::kSackSyndrome), only on a QP that negotiated it.
      if (qp.req.sr && syn.raw() == SrState::kSackSyndrome) {
        comp_on_sack(eng, qp, p, Psn(pkt.aeth().msn().raw()));
        break;
      }
      eng.stats_.inc(Counter::kRxDropUnexpected);
      break;
  }
}

// Atomic ACK (IBA 9.7.5.2.4): the original value goes to the WQE's buffer, through its key.
void Engine::Stages::comp_on_atomic_ack(Engine& eng, Qp& qp, SendWqe& w, const wire::RxPkt& pkt) {
  if (w.opcode != WrOpcode::kCmpSwap && w.opcode != WrOpcode::kFetchAdd) {
    eng.stats_.inc(Counter::kRxDropUnexpected);
    return;
  }
  eng.stats_.inc(Counter::kAckRcvd);
  const std::uint64_t orig = pkt.atomic_ack_eth().orig();
  const Sge& sge = qp.sq_sges[(&w - qp.sq.data()) * qp.cap.max_send_sge];
  // The result buffer may have been deregistered since the request went out.
  std::uint8_t* dst = eng.mrs_.map(sge.lkey, qp.pd, sge.addr, 8, kAccessLocalWrite);
  if (dst == nullptr) {
    eng.stats_.inc(Counter::kRxDropLocalAccess);
    req_fail(eng, qp, w, WcStatus::kLocProtErr);
    return;
  }
  std::memcpy(dst, &orig, 8);
  w.state = WqeState::kExecuted;  // completes in post order
  comp_advance(eng, qp, pkt.psn + 1);
  comp_retire(eng, qp);
}

// READ response (IBA 9.7.5.2.3). Each response packet has its place in the READ's buffer by
// its PSN (every packet but the last carries exactly the path MTU), so one that comes after a
// lost one is placed at once and remembered (SendWqe::read_ooo); the gap is asked for again
// (read_gap). The READ completes when every response has arrived, in post order.
[[gnu::always_inline]] inline void Engine::Stages::comp_on_read_response(Engine& eng, Qp& qp,
                                                                         SendWqe& w,
                                                                         const wire::RxPkt& pkt) {
  if (w.opcode != WrOpcode::kRead) {
    eng.stats_.inc(Counter::kRxDropUnexpected);
    return;
  }
  const unsigned shift = qp.pmtu_shift();
  const std::uint32_t pmtu = qp.pmtu();
  const auto idx = static_cast<std::uint32_t>(distance(pkt.psn, w.first_psn));
  const std::uint32_t done = w.read_done_pkts(shift);
  const std::uint32_t ooo_bit = idx - done - 1;  // when idx > done
  if (idx < done || (idx > done && ooo_bit < 64 && ((w.read_ooo >> ooo_bit) & 1))) {
    eng.stats_.inc(Counter::kRxDupReadResponses);  // late, or a replay of what arrived
    return;
  }
  // Its length must be the bytes of its place: the opcode's First/Middle/Last is not
  // enforced, since a partial replay starts again with First (ours) or Middle (rxe). A
  // response that does not fit is dropped (a stale duplicate), not fatal.
  const std::uint64_t off = std::uint64_t{idx} << shift;
  const std::uint64_t want = std::min<std::uint64_t>(pmtu, w.length - off);
  if (off > w.length || pkt.payload_len != want) {
    eng.stats_.inc(Counter::kRxDropUnexpected);
    return;
  }
  if (idx > done && ooo_bit >= 64) {
    // Further past the gap than can be remembered: asked for again with the gap.
    read_gap(eng, qp, w, idx + 1);
    return;
  }
  // Scatter into the WQE's SGEs at its place, through their keys: a buffer deregistered
  // while the READ was outstanding ends it with a local protection error.
  const Sge* sge = qp.sq_sges.data() + (&w - qp.sq.data()) * qp.cap.max_send_sge;
  std::uint64_t at = off;
  std::size_t copied = 0;
  const std::uint8_t* src = pkt.payload().data();
  for (std::uint32_t i = 0; i < w.num_sge && copied < pkt.payload_len; ++i) {
    if (at >= sge[i].length) {
      at -= sge[i].length;
      continue;
    }
    const std::size_t n = std::min<std::size_t>(sge[i].length - at, pkt.payload_len - copied);
    std::uint8_t* dst = eng.mrs_.map(sge[i].lkey, qp.pd, sge[i].addr + at, n, kAccessLocalWrite);
    if (dst == nullptr) {
      eng.stats_.inc(Counter::kRxDropLocalAccess);
      req_fail(eng, qp, w, WcStatus::kLocProtErr);
      return;
    }
    std::memcpy(dst, src + copied, n);
    copied += n;
    at = 0;
  }
  if (idx == done) {
    // In order: take it and every response after it that came early.
    w.read_done += pkt.payload_len;
    for (; w.read_ooo & 1; w.read_ooo >>= 1)
      w.read_done += std::min<std::uint64_t>(pmtu, w.length - w.read_done);
    w.read_ooo >>= 1;
    // A go-back-N ordered for this response, not yet carried out, is no longer needed.
    qp.comp.retry_pending = qp.comp.retry_pending && after(qp.comp.retry_psn, pkt.psn);
    read_rereq_answered(eng, qp, w);
  } else {
    w.read_ooo |= std::uint64_t{1} << ooo_bit;
    read_gap(eng, qp, w, idx);
  }
  if (w.read_asked < idx + 1) w.read_asked = idx + 1;
  if (w.read_done == w.length) {
    w.state = WqeState::kExecuted;  // completes in post order (comp_retire)
    if (w.rereq_to != 0) {
      w.rereq_to = 0;
      --qp.comp.read_rereqs;
    }
  }
  const Psn oldest = qp.comp.psn;
  comp_advance(eng, qp, w.first_psn);
  if (qp.comp.psn == oldest) {
    // A response for a later READ (or past a gap) while an older one waits for a replay: the
    // responder is alive, and the replay comes after what it had queued before it (rxe in a
    // busy VM took longer than the ACK timeout for that). The timers count from now.
    qp.comp.retrans_deadline = 0;
    qp.comp.probe_deadline = 0;
    qp.comp.probe_backoff = 0;
    arm_retransmit(eng, qp);
    arm_probe(eng, qp);
  }
  comp_retire(eng, qp);
}

}  // namespace roce::engine
