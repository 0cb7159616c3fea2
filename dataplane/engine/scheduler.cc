/// @file
/// The scheduler (run()): what one poll of the engine does besides receiving. Due timers
/// (retransmit.cc) first, unless received frames wait that may answer them; then the coalesced
/// ACKs (responder.cc); then, while the transmit ring has room beyond the ACK reserve, rounds
/// over the QPs with READ responses to send (responder.cc) and the QPs with send work
/// (requester.cc), a few packets each per round so that one long message does not starve the
/// others, and fewer for a QP recovering from a loss. With congestion control on, each QP is
/// paced to its rate (congestion.cc), its READ responses too: one over it waits on the pacing
/// wheel, not in the list.
#include <algorithm>

#include "dataplane/engine/engine_loc.h"

namespace roce::engine {

void Engine::run(std::uint64_t now_ns, bool rx_backlog) {
  now_ = now_ns;
  if (next_timer_ != 0 && now_ >= next_timer_) {
    // Bounded, so that a receiver that never catches up still retransmits.
    constexpr std::uint32_t kMaxDefer = 8;
    if (rx_backlog && timers_deferred_ < kMaxDefer) {
      ++timers_deferred_;
    } else {
      timers_deferred_ = 0;
      Stages::run_timers(*this);
    }
  }
  // Paced QPs whose send time has come (congestion.cc).
  if (next_pace_ != 0 && now_ >= next_pace_) Stages::cc_release(*this);
  Stages::resp_flush_acks(*this);
  // Round robin over the QPs with work, a few packets each per turn, so that one long message
  // does not starve the others. Each list is a FIFO: a QP takes its turn at the front and goes
  // to the back while it has work left. When the transmit ring is full the round stops where
  // it is, and the next run() goes on from there: a run() costs what it sends, however many
  // QPs wait (with 10,000 QPs, passing over all of them once per run() to send the 500
  // packets the ring takes made the requester 8x more expensive per packet).
  constexpr std::uint32_t kPerQp = 16;
  bool progress = true;
  ++run_gen_;
  while (progress && tx_.free() > kAckReserve) {
    progress = false;
    for (std::size_t n = read_list_.size(); n != 0 && tx_.free() > kAckReserve; --n) {
      Qp& qp = *read_list_.front();
      read_list_.pop_front();
      std::uint32_t budget = kPerQp;
      // READ responses take the QP's rate as its requests do (congestion.cc): the responder is
      // a READ's data sender.
      std::uint64_t paced_from = 0;
      if (cc_pacing_) [[unlikely]] {
        if (!Stages::cc_admit_responses(*this, qp, budget)) {
          qp.in_read_list = false;
          continue;
        }
        paced_from = stats_.get(Counter::kTxBytes);
      }
      const std::uint32_t budget0 = budget;
      Stages::resp_read_pump(*this, qp, budget);
      if (cc_pacing_) [[unlikely]]
        Stages::cc_sent(*this, qp, stats_.get(Counter::kTxBytes) - paced_from);
      progress |= budget != budget0;
      if (qp.resp.out_empty() || qp.state == QpState::kErr)
        qp.in_read_list = false;
      else
        read_list_.push_back(&qp);
    }
    for (std::size_t n = send_list_.size(); n != 0 && tx_.free() > kAckReserve; --n) {
      Qp& qp = *send_list_.front();
      send_list_.pop_front();
      // With many QPs, each one's state and payload is elsewhere in memory: ask for the next
      // QP's while this one is sent (its struct first, then, one QP later, its payload).
      if (send_list_.size() > 1) __builtin_prefetch(send_list_[1]);
      if (!send_list_.empty()) Stages::prefetch_next_packet(*this, *send_list_.front());
      std::uint32_t budget = kPerQp;
      if (qp.comp.cwnd != 0) {
        // Recovering from a loss: a few packets per call (EngineConfig::recovery_batch), so
        // that the loop soon reads the acknowledgements that move the window on.
        if (qp.run_gen != run_gen_) {
          qp.run_gen = run_gen_;
          qp.run_sent = 0;
        }
        budget = std::min(budget, cfg_.recovery_batch - std::min(qp.run_sent, cfg_.recovery_batch));
      }
      // Pacing (congestion control): a QP over its rate leaves the list until its next send
      // time. With `algorithm: none` this is the one branch it costs.
      std::uint64_t paced_from = 0;
      if (cc_pacing_) [[unlikely]] {
        if (!Stages::cc_admit(*this, qp, budget)) {
          qp.in_send_list = false;
          continue;
        }
        paced_from = stats_.get(Counter::kTxBytes);
      }
      const std::uint32_t budget0 = budget;
      const std::uint32_t before_next = qp.req.next_wqe;
      if (budget != 0) Stages::req_pump(*this, qp, budget);
      if (cc_pacing_) [[unlikely]]
        Stages::cc_sent(*this, qp, stats_.get(Counter::kTxBytes) - paced_from);
      qp.run_sent += budget0 - budget;
      progress |= budget != budget0 || qp.req.next_wqe != before_next;
      const bool idle = qp.state != QpState::kRts ||
                        (qp.req.next_wqe == qp.sq_tail && !qp.comp.retry_pending &&
                         qp.comp.read_rereqs == 0 && (!qp.req.sr || qp.sr->resend_empty()));
      if (idle)
        qp.in_send_list = false;
      else
        send_list_.push_back(&qp);
    }
  }
}

}  // namespace roce::engine
