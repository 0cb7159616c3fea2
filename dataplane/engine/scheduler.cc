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
  // One turn of a QP with send work: up to kPerQp packets (fewer while it recovers from a
  // loss, or when the transmit ring fills); says what it left.
  enum class Left : std::uint8_t { kIdle, kCut, kMore, kParked };
  const auto turn = [ this, &progress ](Qp & qp) __attribute__((always_inline)) {
    // (A turn the full ring cut short goes on first with what it has left, no more: review 21,
    // a stream cut in every run() kept the front and starved every other QP.)
    std::uint32_t budget = qp.turn_left != 0 ? qp.turn_left : kPerQp;
    qp.turn_left = 0;
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
      if (!Stages::cc_admit(*this, qp, budget)) return Left::kParked;
      paced_from = stats_.get(Counter::kTxBytes);
    }
    const std::uint32_t budget0 = budget;
    const std::uint32_t before_next = qp.req.next_wqe;
    const bool had_outstanding = qp.comp.psn != qp.req.high_psn;
    if (budget != 0) Stages::req_pump(*this, qp, budget);
    if (budget != budget0) {
      // A turn that sent: its number orders this QP's packets against the other QPs' for the
      // probe (CompState::first_turn).
      qp.comp.last_turn = ++tx_turn_;
      if (!had_outstanding) qp.comp.first_turn = tx_turn_;
    }
    if (cc_pacing_) [[unlikely]]
      Stages::cc_sent(*this, qp, stats_.get(Counter::kTxBytes) - paced_from);
    qp.run_sent += budget0 - budget;
    progress |= budget != budget0 || qp.req.next_wqe != before_next;
    const bool idle = qp.state != QpState::kRts ||
                      (qp.req.next_wqe == qp.sq_tail && !qp.comp.retry_pending &&
                       qp.comp.read_rereqs == 0 && (!qp.req.sr || qp.sr->resend_empty()));
    if (idle) return Left::kIdle;
    if (budget != 0 && budget != budget0 && tx_.free() <= kAckReserve) {
      qp.turn_left = static_cast<std::uint8_t>(budget);
      return Left::kCut;
    }
    return Left::kMore;
  };
  // The send list's prefetch pipeline (below): a QP two turns ahead gets its requester block
  // (Qp::kHotBytes) fetched; one turn ahead, the two cache lines of its next WQE that a SEND or
  // WRITE reads and its SGE (reading the block fetched a turn before); the next QP, its next
  // packet's payload (reading the WQE and SGE fetched a turn before). A new WQE's buffer is
  // found through the QP's key memo (ReqState::sge_memo), not the MR table: with 10,000 QPs a
  // table lookup was one more miss. A prefetch never faults; a stale memo only fetches the
  // wrong lines.
  const auto prefetch_qp = [](const Qp& qp) __attribute__((always_inline)) {
    const auto* p = reinterpret_cast<const char*>(&qp);
    for (std::size_t off = 0; off < Qp::kHotBytes; off += 64) __builtin_prefetch(p + off, 1, 3);
  };
  const auto prefetch_wqe = [](const Qp& qp) __attribute__((always_inline)) {
    if (qp.req.next_wqe == qp.sq_tail) return;
    const std::uint32_t i = qp.sq_slot(qp.req.next_wqe);
    const auto* w = reinterpret_cast<const char*>(&qp.sq[i]);
    __builtin_prefetch(w, 1, 3);
    __builtin_prefetch(w + 64, 1, 3);
    if (i * qp.cap.max_send_sge < qp.sq_sges.size())
      __builtin_prefetch(&qp.sq_sges[std::size_t{i} * qp.cap.max_send_sge]);
  };
  const auto prefetch_payload = [this](const Qp& qp) __attribute__((always_inline)) {
    if (qp.req.next_wqe == qp.sq_tail) return;
    const std::uint32_t i = qp.sq_slot(qp.req.next_wqe);
    const SendWqe& w = qp.sq[i];
    if (w.is_inline || w.num_sge != 1 || w.is_rd_atomic()) return;
    const std::uint64_t off = w.state == WqeState::kPosted ? 0 : w.sent;
    if (off >= w.length) return;
    const Sge& sge = qp.sq_sges[std::size_t{i} * qp.cap.max_send_sge];
    std::uint64_t delta;
    if (w.state != WqeState::kPosted && w.sge_range.gen == mrs_.gen())
      delta = w.sge_range.delta;
    else if (const KeyMemo& m = qp.req.sge_memo; m.gen == mrs_.gen() && m.key == sge.lkey)
      delta = m.delta;
    else
      return;
    const std::uint64_t from = sge.addr + off + delta;
    const std::uint64_t to = from + std::min<std::uint64_t>(qp.pmtu(), w.length - off);
    for (std::uint64_t a = from & ~std::uint64_t{63}; a < to; a += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 2);
  };
  // Whether what a QP has to send is still recovery: a retry not yet started, PSNs sent before
  // being sent again (a go-back-N), a SACK's or a READ's retransmissions.
  const auto recovering = [](const Qp& qp) {
    return qp.comp.retry_pending || before(qp.req.next_psn, qp.req.high_psn) ||
           qp.comp.read_rereqs != 0 || (qp.req.sr && !qp.sr->resend_empty());
  };
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
    // Loss recovery first: the QPs with a go-back-N, a SACK's or a probe's retransmission or
    // a READ's re-request to send (Stages::schedule_recovery) take a turn ahead of the send
    // list, where they also wait. Behind 10,000 QPs with new work, a retransmission that a
    // probe ordered waited longer than the ACK timeout. (Not with pacing: the pacing wheel
    // orders those turns.)
    for (std::size_t n = retry_list_.size(); n != 0 && tx_.free() > kAckReserve; --n) {
      Qp& qp = *retry_list_.front();
      retry_list_.pop_front();
      qp.in_retry_list = false;
      if (cc_pacing_ || !qp.in_send_list) continue;
      const Left left = turn(qp);
      if (left == Left::kCut || (left == Left::kMore && recovering(qp))) {
        qp.in_retry_list = true;
        if (left == Left::kCut)
          retry_list_.push_front(&qp);
        else
          retry_list_.push_back(&qp);
      }
      // Idle or not, it stays in the send list: its turn there finds what is left.
    }
    for (std::size_t n = send_list_.size(); n != 0 && tx_.free() > kAckReserve; --n) {
      Qp& qp = *send_list_.front();
      send_list_.pop_front();
      // With many QPs, each one's state, WQE and payload is elsewhere in memory (with 10,000
      // QPs, in DRAM): a pipeline three QPs deep asks for them while this one is sent, each
      // stage reading only what the stage before fetched a turn earlier.
      if (const std::size_t waiting = send_list_.size(); waiting != 0) {
        if (waiting > 2) prefetch_qp(*send_list_[2]);
        if (waiting > 1) prefetch_wqe(*send_list_[1]);
        prefetch_payload(*send_list_.front());
      }
      switch (turn(qp)) {
        case Left::kIdle:
        case Left::kParked:
          qp.in_send_list = false;
          break;
        case Left::kCut:
          // The ring filled in the middle of this QP's turn, most likely in the middle of a
          // message, whose packets so far ask for no ACK: at the back of the list, the rest
          // would wait for every other QP's turn (with 10,000 QPs, tens of milliseconds), and
          // the probe timer fire for packets that had arrived. It goes on first next run().
          send_list_.push_front(&qp);
          break;
        case Left::kMore:
          send_list_.push_back(&qp);
          break;
      }
    }
  }
}

}  // namespace roce::engine
