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

// Completes every WQE whose PSNs all come before `upto` (an ACK, a NAK or a response with PSN
// `upto` acknowledges them: IBA 9.7.5.1.1 implied acknowledgement). A READ or atomic among them
// whose response never came means its responses were lost: order a retry from it and return
// false.
bool Engine::Stages::comp_implied_ack(Engine& eng, Qp& qp, Psn upto) {
  for (std::uint32_t i = qp.sq_head; i != qp.sq_tail; ++i) {
    SendWqe& w = qp.wqe(i);
    if (w.state == WqeState::kPosted) break;
    if (w.state == WqeState::kExecuted || w.state == WqeState::kDone ||
        w.state == WqeState::kFailed)
      continue;
    if (!before(w.last_psn, upto)) {
      // A READ/atomic in progress is only acknowledged by its own responses, in order: the
      // oldest unacknowledged PSN stops at its first missing response.
      if (w.is_rd_atomic()) {
        const Psn missing = w.read_resume_psn(qp.pmtu_shift());
        if (before(missing, upto)) upto = missing;
      }
      break;
    }
    if (w.is_rd_atomic()) {
      const Psn missing = w.read_resume_psn(qp.pmtu_shift());
      if (after(missing, qp.comp.psn)) qp.comp.psn = missing;
      order_retry(eng, qp, missing, true);
      return false;
    }
    // Acknowledged: it completes in post order (comp_retire), after any local operation
    // posted before it; if the requester was re-sending it, req_pump steps over it.
    w.state = WqeState::kExecuted;
  }
  if (after(upto, qp.comp.psn)) {
    qp.comp.psn = upto;
    comp_progress(eng, qp);
  }
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
  // READ response or atomic ACK: everything before it is implicitly acknowledged, and it
  // belongs to the oldest WQE.
  if (!comp_implied_ack(eng, qp, p)) return;
  if (qp.sq_head == qp.sq_tail) {
    eng.stats_.inc(Counter::kRxDropUnexpected);
    return;
  }
  SendWqe& w = qp.wqe(qp.sq_head);
  if (w.state == WqeState::kPosted || before(p, w.first_psn) || after(p, w.last_psn)) {
    eng.stats_.inc(Counter::kRxDropUnexpected);
    return;
  }
  if (pkt.opcode == wire::Opcode::kRcAtomicAcknowledge)
    comp_on_atomic_ack(eng, qp, w, pkt);
  else
    comp_on_read_response(eng, qp, w, pkt);
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
  comp_wqe_done(eng, qp, w, WcStatus::kSuccess);
  qp.comp.psn = pkt.psn + 1;
  comp_progress(eng, qp);
  comp_retire(eng, qp);
}

// READ response (IBA 9.7.5.2.3): in order only; a gap means lost responses.
[[gnu::always_inline]] inline void Engine::Stages::comp_on_read_response(Engine& eng, Qp& qp,
                                                                         SendWqe& w,
                                                                         const wire::RxPkt& pkt) {
  const Psn p = pkt.psn;
  if (w.opcode != WrOpcode::kRead) {
    eng.stats_.inc(Counter::kRxDropUnexpected);
    return;
  }
  const Psn expected = w.read_resume_psn(qp.pmtu_shift());
  if (p != expected) {
    if (after(p, expected) && !qp.comp.retry_pending) order_retry(eng, qp, expected, true);
    return;
  }
  // Position and length must fit the bytes still expected: First/Middle carry exactly the
  // path MTU, Last/Only the rest. The First-vs-Middle distinction is not enforced: after a
  // retry a delayed Middle of the first attempt carries the same bytes as the replay's First.
  // A response that does not fit is dropped (a stale duplicate), not fatal.
  const std::uint64_t remaining = w.length - w.read_done;
  const bool last = pkt.info->mask.has(OpMask::kEnd);
  const std::uint32_t pmtu = qp.pmtu();
  const bool len_ok =
      last ? pkt.payload_len == remaining : pkt.payload_len == pmtu && remaining > pmtu;
  if (!len_ok) {
    eng.stats_.inc(Counter::kRxDropUnexpected);
    return;
  }
  // Scatter into the WQE's SGEs at read_done, through their keys: a buffer deregistered
  // while the READ was outstanding ends it with a local protection error.
  const Sge* sge = qp.sq_sges.data() + (&w - qp.sq.data()) * qp.cap.max_send_sge;
  std::uint64_t off = w.read_done;
  std::size_t done = 0;
  const std::uint8_t* src = pkt.payload().data();
  for (std::uint32_t i = 0; i < w.num_sge && done < pkt.payload_len; ++i) {
    if (off >= sge[i].length) {
      off -= sge[i].length;
      continue;
    }
    const std::size_t n = std::min<std::size_t>(sge[i].length - off, pkt.payload_len - done);
    std::uint8_t* dst = eng.mrs_.map(sge[i].lkey, qp.pd, sge[i].addr + off, n, kAccessLocalWrite);
    if (dst == nullptr) {
      eng.stats_.inc(Counter::kRxDropLocalAccess);
      req_fail(eng, qp, w, WcStatus::kLocProtErr);
      return;
    }
    std::memcpy(dst, src + done, n);
    done += n;
    off = 0;
  }
  w.read_done += pkt.payload_len;
  qp.comp.psn = p + 1;
  qp.comp.retry_pending = qp.comp.retry_pending && after(qp.comp.retry_psn, p);
  if (last) comp_wqe_done(eng, qp, w, WcStatus::kSuccess);
  comp_progress(eng, qp);
  comp_retire(eng, qp);
}

}  // namespace roce::engine
