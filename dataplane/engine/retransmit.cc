/// @file
/// Retransmission (IBA 9.7.6.1; rxe_comp.c retry paths, rxe_req.c req_retry): the local ACK
/// timeout (4.096 us x 2^timeout, microsecond-granular), the RNR wait, the retry budgets, and
/// the go-back-N rewind of the requester to a PSN, and the fast-retransmit probe timed from
/// the measured round-trip time (EngineConfig::probe_min_ns).
#include <algorithm>

#include "dataplane/engine/engine_loc.h"

namespace roce::engine {

using wire::Psn;

namespace {
// Whether response packet `k` of READ `w` has arrived (k at or after its first missing one).
bool read_has(const SendWqe& w, std::uint32_t k, unsigned shift) {
  const std::uint32_t done = w.read_done_pkts(shift);
  if (k < done) return true;
  if (k == done || k - done - 1 >= 64) return false;
  return ((w.read_ooo >> (k - done - 1)) & 1) != 0;
}
}  // namespace

namespace {
SendWqe* oldest_unacked(Qp& qp);
void sr_note_resent(Qp& qp, Psn p, Psn high);
// A READ some of whose responses went missing after later ones arrived (or were asked for again).
bool read_gap_known(const Qp& qp, const SendWqe& w) {
  return w.opcode == WrOpcode::kRead && w.read_done < w.length &&
         w.read_done_pkts(qp.pmtu_shift()) < w.read_asked;
}
}  // namespace

// Work that recovers a loss (a go-back-N, packets a SACK or a probe's answer named, a READ's
// re-request) takes the QP's next turn ahead of the QPs waiting with new work: behind 10,000
// of them, a retransmission the probe ordered waited longer than the ACK timeout.
void Engine::Stages::schedule_recovery(Engine& eng, Qp& qp) {
  schedule_send(eng, qp);
  if (qp.in_retry_list) return;
  qp.in_retry_list = true;
  eng.retry_list_.push_back(&qp);
}

void Engine::Stages::track_timer(Engine& eng, Qp& qp) {
  std::uint64_t d = qp.comp.deadline();
  if (qp.req.sr) [[unlikely]] {
    // The responder's reorder window (selective repeat) shares the QP's wheel entry.
    if (const std::uint64_t r = qp.sr->report_at(); r != 0 && (d == 0 || r < d)) d = r;
  }
  if (d == 0) return;
  // An earlier entry is still in the wheel: when it comes, fire_timers finds nothing due and
  // schedules the QP again for its deadline then.
  if (qp.timer_at != 0 && qp.timer_at <= d) return;
  qp.timer_at = d;
  eng.timers_.schedule(&qp, d);
  eng.next_timer_ = eng.timers_.next();
}

void Engine::Stages::arm_retransmit(Engine& eng, Qp& qp) {
  if (qp.attr.timeout == 0 || qp.comp.retrans_deadline != 0 || qp.comp.rnr_deadline != 0) return;
  if (!before(qp.comp.psn, qp.req.high_psn)) return;  // nothing outstanding
  qp.comp.retrans_deadline = eng.now_ + (std::uint64_t{4096} << qp.attr.timeout);
  track_timer(eng, qp);
}

void Engine::Stages::arm_probe(Engine& eng, Qp& qp) {
  CompState& c = qp.comp;
  if (eng.cfg_.probe_min_ns == 0 || qp.type != QpType::kRc || c.probe_deadline != 0 ||
      c.rnr_deadline != 0 || c.retry_pending)
    return;
  if (!before(c.psn, qp.req.high_psn)) return;  // nothing outstanding
  // A READ or atomic is answered by its own responses, whose gaps the completer sees; asking
  // again for responses that may still be coming would make the responder send them twice.
  // Only a READ with a known gap is probed (its re-request or the replay may have been lost),
  // and only for the part known missing; a lost last response is the ACK timeout's.
  if (const SendWqe* w = oldest_unacked(qp);
      w == nullptr || (w->is_rd_atomic() && !read_gap_known(qp, *w)))
    return;
  // As TLP (RFC 8985 7.2): at least twice the smoothed round trip, which absorbs the ACK
  // coalescing of the responder and queues that vary from burst to burst. Before the QP's
  // first sample, the engine's estimate; before any sample, a millisecond: long enough for
  // any LAN, far below the timeout.
  const auto pto = [](std::uint64_t srtt, std::uint64_t var) {
    return std::max(2 * srtt, srtt + 4 * var);
  };
  std::uint64_t rto = c.srtt_ns      ? pto(c.srtt_ns, c.rttvar_ns)
                      : eng.srtt_ns_ ? pto(eng.srtt_ns_, eng.rttvar_ns_)
                                     : 1'000'000;
  rto = std::max(rto, eng.cfg_.probe_min_ns)
        << std::min<unsigned>(unsigned{c.probe_backoff} + c.pto_shift, 20);
  const std::uint64_t at = eng.now_ + rto;
  if (c.retrans_deadline != 0 && at >= c.retrans_deadline) return;  // the timeout comes first
  c.probe_deadline = at;
  track_timer(eng, qp);
}

namespace {
SendWqe* oldest_unacked(Qp& qp) {
  for (std::uint32_t i = qp.sq_head; i != qp.sq_tail; ++i) {
    SendWqe& w = qp.wqe(i);
    if (w.state == WqeState::kSending || w.state == WqeState::kSent) {
      if (w.npkts == 0 || before(w.last_psn, qp.comp.psn)) continue;
      return &w;
    }
    if (w.state == WqeState::kPosted) return nullptr;
  }
  return nullptr;
}
}  // namespace

// Builds the packet at the oldest unacknowledged PSN from its WQE, with AckReq, and puts the
// requester back exactly where it was: the probe moves nothing but one frame.
bool Engine::Stages::send_probe(Engine& eng, Qp& qp) {
  SendWqe* w = oldest_unacked(qp);
  if (w != nullptr && read_gap_known(qp, *w)) {
    // The oldest READ still misses responses it has asked for again: ask once more, for
    // those only (the re-request or its replay was lost). The requester does not stop.
    const std::uint64_t sent = eng.stats_.get(Counter::kReadReRequests);
    read_ask_again(eng, qp, *w, std::min(w->read_asked, w->npkts), true);
    if (eng.stats_.get(Counter::kReadReRequests) == sent) return false;  // no room now
    arm_probe(eng, qp);
    return true;
  }
  if (w == nullptr || w->is_rd_atomic() || before(qp.comp.psn, w->first_psn)) return false;
  const ReqState saved_req = qp.req;
  const std::uint64_t saved_sent = w->sent;
  const WqeState saved_state = w->state;
  qp.req.next_psn = qp.comp.psn;
  w->sent =
      std::uint64_t{static_cast<std::uint32_t>(distance(qp.comp.psn, w->first_psn))} * qp.pmtu();
  w->state = WqeState::kSending;
  qp.comp.probing = true;  // AckReq on the packet, and the hold once it is out
  qp.comp.probe_sent = false;
  const Psn probed = qp.comp.psn;
  const bool ok = req_packet(eng, qp, *w);
  qp.req = saved_req;
  w->sent = saved_sent;
  w->state = saved_state;
  if (qp.req.sr && ok) {
    // Selective repeat: the responder kept what followed the probed packet, so its answer
    // needs no go-back-N and the requester need not wait for it. (AckReq was set.)
    // A probe that was not needed costs one packet; one that comes late stalls the window
    // behind the missing packet, so the timer does not stay backed off (pto_shift): it
    // doubles only while probes go unanswered (probe_backoff, reset by progress).
    qp.comp.probing = qp.comp.probe_sent = false;
    qp.comp.rtt_timing = false;
    sr_note_resent(qp, probed, qp.req.high_psn);
    SrState& s = *qp.sr;
    s.probe_out = true;
    s.probe_psn = probed;
    s.probe_high = qp.req.high_psn;
    s.probe_at = eng.now_;
    return true;
  }
  if (!ok || !qp.comp.probe_sent) {
    qp.comp.probing = qp.comp.probe_sent = false;
    return false;
  }
  qp.comp.probe_psn = probed;
  qp.comp.probe_sent_at = eng.now_;
  qp.comp.rtt_timing = false;  // Karn: an ACK now may answer the probe or the original
  return true;
}

// The responder sends a READ's responses in order, and those of one request after another:
// a response that arrives past ones that did not (or a later READ's response, or an ACK
// after the READ) means they were lost. They are asked for again by a READ request of their
// own (read_rerequest), once; later READs are not touched.
void Engine::Stages::read_gap(Engine& eng, Qp& qp, SendWqe& w, std::uint32_t upto) {
  const unsigned shift = qp.pmtu_shift();
  std::uint32_t from = std::max(w.read_done_pkts(shift), w.read_asked);
  while (from < upto && read_has(w, from, shift)) ++from;
  if (w.read_asked < upto) w.read_asked = upto;
  if (from >= upto) return;
  read_ask_again(eng, qp, w, upto, false);
}

// Asks again for the responses of `w` from its first missing one up to `to` (what arrived at
// the end is left out). While a re-request is outstanding, a new gap waits for its answer
// (then the first missing response is past it), unless `force` (the probe and the timeout:
// the outstanding one was lost).
void Engine::Stages::read_ask_again(Engine& eng, Qp& qp, SendWqe& w, std::uint32_t to, bool force) {
  const unsigned shift = qp.pmtu_shift();
  const std::uint32_t done = w.read_done_pkts(shift);
  if (force) to = std::max({to, w.rereq_wait, w.rereq_to});
  while (to > done && read_has(w, to - 1, shift)) --to;
  if (to <= done) return;
  if (!force && w.rereq_out > done) {
    w.rereq_wait = std::max(w.rereq_wait, to);
    return;
  }
  w.rereq_wait = 0;
  // Sent at once when the transmit ring has room: gaps seen in one receive burst each get a
  // request of their own instead of one that spans the responses between them.
  if (qp.state == QpState::kRts && !qp.req.failed && read_rerequest(eng, qp, w, done, to)) {
    w.rereq_out = to;
    if (w.rereq_to != 0) {
      w.rereq_to = 0;
      --qp.comp.read_rereqs;
    }
    return;
  }
  if (w.rereq_to == 0) ++qp.comp.read_rereqs;
  w.rereq_to = std::max(w.rereq_to, to);
  schedule_recovery(eng, qp);
}

// The READ's first missing response has passed the outstanding re-request: what waited for
// it is asked for now.
void Engine::Stages::read_rereq_answered(Engine& eng, Qp& qp, SendWqe& w) {
  if (w.rereq_out == 0 || w.read_done_pkts(qp.pmtu_shift()) < w.rereq_out) return;
  w.rereq_out = 0;
  if (const std::uint32_t to = w.rereq_wait; to != 0) {
    w.rereq_wait = 0;
    read_ask_again(eng, qp, w, to, false);
  }
}

// Sends the re-request due for `w`, without what arrived since the gap was seen (a late
// response); false when the transmit ring has no room.
bool Engine::Stages::send_read_rereq(Engine& eng, Qp& qp, SendWqe& w, std::uint32_t& budget) {
  const unsigned shift = qp.pmtu_shift();
  const std::uint32_t from = w.read_done_pkts(shift);
  std::uint32_t to = w.rereq_to;
  while (to > from && read_has(w, to - 1, shift)) --to;
  if (from < to) {
    if (budget == 0 || !read_rerequest(eng, qp, w, from, to)) return false;
    --budget;
    w.rereq_out = to;
  }
  w.rereq_to = 0;
  --qp.comp.read_rereqs;
  return true;
}

void Engine::Stages::send_read_rereqs(Engine& eng, Qp& qp, std::uint32_t& budget) {
  for (std::uint32_t i = qp.sq_head; i != qp.sq_tail && qp.comp.read_rereqs != 0; ++i) {
    SendWqe& w = qp.wqe(i);
    if (w.state == WqeState::kPosted) break;
    if (w.rereq_to != 0 && !send_read_rereq(eng, qp, w, budget)) return;
  }
}

// A READ request for response packets [from, to) of `w`: the PSN of the first of them, the VA
// advanced and the length of the part (a duplicate READ request for part of the original is
// replayed from the responder's resource: rxe's duplicate_request checks only that VA and
// length lie within it). The requester stays where it was: like a probe, this moves nothing
// but one frame.
bool Engine::Stages::read_rerequest(Engine& eng, Qp& qp, SendWqe& w, std::uint32_t from,
                                    std::uint32_t to) {
  const unsigned shift = qp.pmtu_shift();
  const ReqState saved_req = qp.req;
  const WqeState saved_state = w.state;
  const std::uint64_t saved_done = w.read_done;
  const std::uint64_t saved_length = w.length;
  const std::uint64_t saved_resume = w.read_resume;
  w.read_done = std::uint64_t{from} << shift;
  w.length = std::min(saved_length, std::uint64_t{to} << shift);
  w.state = WqeState::kSending;
  qp.req.next_psn = w.first_psn + from;
  const bool ok = req_packet(eng, qp, w);
  const bool failed = qp.req.failed;
  qp.req = saved_req;
  qp.req.failed = failed;
  w.read_done = saved_done;
  w.length = saved_length;
  w.read_resume = saved_resume;
  if (w.state != WqeState::kFailed) w.state = saved_state;
  return ok;
}

// ---- selective repeat (SrState) ----------------------------------------------------------

int Engine::set_selective_repeat(Qp* qp, bool on) {
  const std::uint64_t r = qpn_rng_.next();
  return set_selective_repeat(qp, on,
                              {static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(r >> 32)});
}

std::optional<SrIndexBase> Engine::sr_index_base(const Qp* qp) const {
  if (qp == nullptr || qp->sr == nullptr) return std::nullopt;
  return qp->sr->base;
}

int Engine::set_selective_repeat(Qp* qp, bool on, SrIndexBase base) {
  if (qp == nullptr || qp->type != QpType::kRc) return kErrInval;
  // Before traffic: before RTS, or in RTS with nothing posted, in flight or half received.
  const bool idle = qp->sq_head == qp->sq_tail && qp->comp.psn == qp->req.high_psn &&
                    qp->resp.in_msg == RespState::InMsg::kNone;
  if (qp->state != QpState::kReset && qp->state != QpState::kInit && qp->state != QpState::kRtr &&
      !(qp->state == QpState::kRts && idle))
    return kErrInval;
  qp->req.sr = on;
  if (!on) {
    qp->sr.reset();
  } else {
    qp->sr = std::make_unique<SrState>();
    qp->sr->base = base;
    qp->sr->rx_msg = base.rx;
    qp->sr->tx_msg = qp->sr->tx_floor = base.tx;
    if (qp->state == QpState::kRts) Stages::sr_bdp_refresh(*this, *qp);
  }
  return kOk;
}

namespace {
// Selective repeat: remembers that `p` was sent again with PSNs up to `high` (exclusive) out.
void sr_note_resent(Qp& qp, Psn p, Psn high) {
  SrState& s = *qp.sr;
  for (std::uint32_t i = 0; i < s.nresent; ++i) {
    if (s.resent[i].psn == p) {
      s.resent[i].high = high;
      return;
    }
  }
  if (s.nresent == s.resent.size()) {  // forget the acknowledged ones, then the oldest entry
    std::uint32_t k = 0;
    for (std::uint32_t i = 0; i < s.nresent; ++i)
      if (!before(s.resent[i].psn, qp.comp.psn)) s.resent[k++] = s.resent[i];
    s.nresent = k;
    if (k == s.resent.size()) {
      std::copy(s.resent.begin() + 1, s.resent.end(), s.resent.begin());
      --s.nresent;
    }
  }
  s.resent[s.nresent++] = {p, high};
}

// One past the highest PSN out when `p` was last sent (p + 1: never sent again).
Psn sr_sent_high(const SrState& s, Psn p) {
  for (std::uint32_t i = 0; i < s.nresent; ++i)
    if (s.resent[i].psn == p) return s.resent[i].high;
  return p + 1;
}

bool sr_queued(const SrState& s, Psn p) {
  for (std::uint32_t i = s.resend_head; i != s.resend_tail; ++i) {
    const SrState::Range& r = s.resend[i % s.resend.size()];
    if (r.n != 0 && !before(p, r.from) && before(p, r.from + r.n)) return true;
  }
  return false;
}
}  // namespace

// The responder reports PSNs [from, to) missing (and `to` arrived). They are queued to be sent
// again, each once per report; the responder reports each gap once, so a retransmission that
// is lost too is the probe's (fire_timers), which sends the oldest unacknowledged packet again.
void Engine::Stages::comp_on_sack(Engine& eng, Qp& qp, Psn from, Psn to) {
  eng.stats_.inc(Counter::kSrSacksRcvd);
  const std::int32_t n = distance(to, from);
  if (n <= 0 || n > static_cast<std::int32_t>(SrState::kBits) || !before(to, qp.req.high_psn)) {
    eng.stats_.inc(Counter::kRxDropUnexpected);
    return;
  }
  SrState& s = *qp.sr;
  // The responder acknowledged what it had before this SACK: the oldest unacknowledged PSN,
  // below the gap reported, is still missing there. If the packet that arrived (`to`) went
  // out well after that PSN's last copy, the copy was lost, or the SACK that named it: send it
  // again now rather than when the probe timer fires with the window stalled behind it.
  const Psn edge = qp.comp.psn;
  bool edge_queued = false;
  if (before(edge, from) &&
      distance(to, sr_sent_high(s, edge)) >= static_cast<std::int32_t>(SrState::kRackMargin)) {
    if (s.resend_tail - s.resend_head < s.resend.size() && !sr_queued(s, edge)) {
      s.resend[s.resend_tail++ % s.resend.size()] = {edge, 1};
      eng.stats_.inc(Counter::kSrEdgeResends);
      edge_queued = true;
    }
  }
  // Only what no SACK named before (sacked_to is meaningful within [comp.psn, high_psn]).
  if (before(s.sacked_to, qp.comp.psn) || after(s.sacked_to, qp.req.high_psn))
    s.sacked_to = qp.comp.psn;
  if (before(from, s.sacked_to)) from = s.sacked_to;
  const std::int32_t left = distance(to, from);
  if (left <= 0) {
    eng.stats_.inc(Counter::kRxDropUnexpected);  // reported before: the probe covers a loss
    if (edge_queued) schedule_recovery(eng, qp);
    return;
  }
  if (s.resend_tail - s.resend_head == s.resend.size()) {
    eng.stats_.inc(Counter::kRespQueueFull);  // the probe finds it
    if (edge_queued) schedule_recovery(eng, qp);
    return;
  }
  s.resend[s.resend_tail++ % s.resend.size()] = {from, static_cast<std::uint32_t>(left)};
  s.sacked_to = to;
  qp.comp.rtt_timing = false;  // Karn: no sample across a retransmission
  // The probe waits for the retransmission's answer, not for the gap it fills.
  qp.comp.probe_deadline = 0;
  arm_probe(eng, qp);
  schedule_recovery(eng, qp);
}

// The oldest unacknowledged PSN moved past the probed one. When the ACK stops right after it,
// the responder's ePSN is the next PSN: one that went out before the probe, so it was lost too
// (a burst at the tail, which no later packet shows). It is sent again at once, and its answer
// is read the same way. (An ACK of the original, late, would rarely stop there: it covers what
// arrived with it. A wrong guess costs one packet.)
void Engine::Stages::sr_probe_answer(Engine& eng, Qp& qp) {
  SrState& s = *qp.sr;
  if (!after(qp.comp.psn, s.probe_psn)) return;
  s.probe_out = false;
  const Psn p = qp.comp.psn;
  if (p != s.probe_psn + 1 || !before(p, s.probe_high) || !before(p, qp.req.high_psn)) return;
  if (sr_queued(s, p) || s.resend_tail - s.resend_head == s.resend.size()) return;
  s.resend[s.resend_tail++ % s.resend.size()] = {p, 1};
  eng.stats_.inc(Counter::kSrEdgeResends);
  qp.comp.rtt_timing = false;  // Karn
  s.probe_out = true;
  s.probe_psn = p;
  s.probe_at = eng.now_;
  schedule_recovery(eng, qp);
}

namespace {
// The SEND or WRITE WQE whose PSNs hold `p`, from `i` on (the search goes forward); null when
// none is still unacknowledged.
SendWqe* sr_wqe_of(Qp& qp, Psn p, std::uint32_t& i) {
  for (; i != qp.sq_tail; ++i) {
    SendWqe& w = qp.wqe(i);
    if (w.state == WqeState::kPosted) return nullptr;
    if (w.npkts == 0 || w.state == WqeState::kFailed) continue;
    if (before(p, w.first_psn)) return nullptr;
    if (!after(p, w.last_psn)) return &w;
  }
  return nullptr;
}
}  // namespace

// Sends again the PSNs the SACKs named, oldest first, each alone: the requester's position is
// not moved (as a probe). A PSN acknowledged meanwhile, or of a READ or atomic (their own
// retry covers them), is skipped.
void Engine::Stages::sr_resend(Engine& eng, Qp& qp, std::uint32_t& budget) {
  SrState& s = *qp.sr;
  const std::uint32_t pmtu = qp.pmtu();
  while (!s.resend_empty() && budget > 0 && qp.state == QpState::kRts && !qp.req.failed) {
    SrState::Range& r = s.resend[s.resend_head % s.resend.size()];
    std::uint32_t i = qp.sq_head;
    while (r.n != 0 && budget > 0) {
      const Psn p = r.from;
      if (before(p, qp.comp.psn) || !before(p, qp.req.high_psn)) {
        r.from = r.from + 1;
        --r.n;
        continue;
      }
      SendWqe* w = sr_wqe_of(qp, p, i);
      if (w == nullptr || w->is_rd_atomic() || w->state == WqeState::kExecuted ||
          w->state == WqeState::kDone) {
        r.from = r.from + 1;
        --r.n;
        continue;
      }
      const ReqState saved_req = qp.req;
      const std::uint64_t saved_sent = w->sent;
      const WqeState saved_state = w->state;
      qp.req.next_psn = p;
      w->sent = std::uint64_t{static_cast<std::uint32_t>(distance(p, w->first_psn))} * pmtu;
      w->state = WqeState::kSending;
      const std::uint64_t bytes0 = eng.stats_.get(Counter::kRetransmittedBytes);
      // With AckReq, as a probe: when nothing past it was placed (a burst lost at the tail),
      // only this packet's own ACK tells the requester it arrived.
      const bool probing = qp.comp.probing;
      qp.comp.probing = true;
      const bool ok = req_packet(eng, qp, *w);
      qp.comp.probing = probing;
      qp.comp.probe_sent = false;
      const bool failed = qp.req.failed;
      qp.req = saved_req;
      qp.req.failed = failed;
      if (w->state != WqeState::kFailed) {
        w->sent = saved_sent;
        w->state = saved_state;
      }
      if (!ok) return;  // no room now: run() comes back (the QP stays on the send list)
      sr_note_resent(qp, p, qp.req.high_psn);
      eng.stats_.inc(Counter::kSrRetransmits);
      eng.stats_.inc(Counter::kSrRetransmitBytes,
                     eng.stats_.get(Counter::kRetransmittedBytes) - bytes0);
      --budget;
      r.from = r.from + 1;
      --r.n;
    }
    if (r.n != 0) return;
    ++s.resend_head;
  }
}

namespace {
// RFC 6298's smoothed round-trip time and its mean deviation (gains 1/8 and 1/4).
void rtt_update(std::uint64_t& srtt, std::uint64_t& rttvar, std::uint64_t r) {
  if (srtt == 0) {
    srtt = std::max<std::uint64_t>(r, 1);
    rttvar = r / 2;
    return;
  }
  const std::uint64_t diff = srtt > r ? srtt - r : r - srtt;
  rttvar = (3 * rttvar + diff) / 4;
  srtt = std::max<std::uint64_t>((7 * srtt + r) / 8, 1);
}
}  // namespace

void Engine::Stages::on_loss(Engine& eng, Qp& qp) {
  CompState& c = qp.comp;
  const std::uint32_t w = c.cwnd ? c.cwnd : window_max(eng, qp);
  c.cwnd = std::max<std::uint32_t>(std::min(w, eng.cfg_.loss_window), 1);
  c.cwnd_frac = 0;
  c.cwnd_psn = c.psn;
}

std::uint32_t Engine::Stages::window_max(const Engine& eng, const Qp& qp) {
  if (qp.req.sr) [[unlikely]] {
    // Selective repeat: a loss costs the lost packet, not the window after it, and the oldest
    // missing packet holds the window's edge for about two round trips (the SACK, then its
    // copy behind what was sent meanwhile): a go-back-N-sized window stalled the sender at
    // every loss. At most the responder's bitmap.
    const std::uint64_t by_bytes =
        std::max<std::uint64_t>(eng.cfg_.sr_inflight_bytes >> qp.pmtu_shift(), 1);
    const std::uint64_t bdp = qp.sr->bdp_psns != 0 ? qp.sr->bdp_psns : SrState::kBits;
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(
        {eng.cfg_.max_inflight_psns, by_bytes, std::uint64_t{SrState::kBits}, bdp}));
  }
  const std::uint64_t by_bytes =
      std::max<std::uint64_t>(eng.cfg_.max_inflight_bytes >> qp.pmtu_shift(), 1);
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(eng.cfg_.max_inflight_psns, by_bytes));
}

void Engine::Stages::grow_window(Engine& eng, Qp& qp) {
  CompState& c = qp.comp;
  if (c.cwnd == 0) return;
  c.cwnd_frac += static_cast<std::uint32_t>(distance(c.psn, c.cwnd_psn));
  c.cwnd_psn = c.psn;
  c.cwnd += c.cwnd_frac / 8;
  c.cwnd_frac %= 8;
  if (c.cwnd >= window_max(eng, qp)) c.cwnd = 0;  // back at the maximum
}

void Engine::Stages::rtt_sample(Engine& eng, Qp& qp) {
  CompState& c = qp.comp;
  if (!c.rtt_timing || !after(c.psn, c.rtt_psn)) return;
  c.rtt_timing = false;
  const std::uint64_t r = eng.now_ > c.rtt_start ? eng.now_ - c.rtt_start : 0;
  // The caller's clock did not move between send and answer (one `now` for a whole poll):
  // not a round trip. Taken as one, it pulls the estimate, and the probe timer, towards 0.
  if (r == 0) return;
  rtt_update(c.srtt_ns, c.rttvar_ns, r);
  rtt_update(eng.srtt_ns_, eng.rttvar_ns_, r);
  if (eng.min_rtt_ns_ == 0 || r < eng.min_rtt_ns_) eng.min_rtt_ns_ = r;
  if (qp.req.sr) [[unlikely]]
    sr_bdp_refresh(eng, qp);
  if (eng.cc_delay_) cc_on_rtt(eng, qp, r);  // the delay-based rate (congestion.cc)
}

namespace {
// What one full packet of `pmtu` bytes of payload takes on the wire (Ethernet, IPv4, UDP, BTH,
// RETH, ICRC), for turning the bandwidth-delay product into packets.
constexpr std::uint64_t kSrWireOverhead = 14 + 20 + 8 + 12 + 16 + 4;
}  // namespace

void Engine::Stages::sr_bdp_refresh(Engine& eng, Qp& qp) {
  // IRN's BDP flow control: at most a bandwidth-delay product of packets in flight, so that a
  // QP without congestion control does not hold a dropping queue full with its whole window
  // (review 22, finding 9). A loss costs the lost packet only, so the cap, not a cut, is what
  // bounds the queue a selective-repeat sender builds.
  std::uint64_t bytes = eng.cfg_.sr_bdp_cap;
  if (bytes == EngineConfig::kSrBdpAuto) {
    const std::uint64_t mbps = eng.cfg_.congestion.line_rate_mbps;
    bytes = mbps == 0 ? 0 : eng.min_rtt_ns_ != 0 ? mbps * eng.min_rtt_ns_ / 8000 : 1;
  }
  std::uint32_t psns = 0;
  if (bytes != 0) {
    // At least kBdpMin: with fewer out, the packets past a loss are too few for the SACK
    // (kReorder) and the edge rule (kRackMargin), and every loss waits for the probe.
    const std::uint64_t pkt = qp.pmtu() + kSrWireOverhead;
    psns = static_cast<std::uint32_t>(
        std::clamp<std::uint64_t>((bytes + pkt - 1) / pkt, SrState::kBdpMin, SrState::kBits));
  }
  qp.sr->bdp_psns = psns;
  // The window can close mid-message: AckReq at least every half of it, so that an ACK
  // reopens it while it drains (as the delay-based window does, congestion.cc).
  if (psns != 0) qp.cc.ack_req_every = std::max<std::uint32_t>(psns / 2, 1);
}

std::uint32_t Engine::sr_bdp_psns(const Qp* qp) const {
  return qp != nullptr && qp->sr != nullptr ? qp->sr->bdp_psns : 0;
}

void Engine::Stages::order_retry(Engine& eng, Qp& qp, Psn from, bool count_retry) {
  // Packets still in flight from before a go-back-N (more sequence NAKs, READ responses past a
  // gap) must not start another one from the same PSN: wait for progress or the timer.
  if (count_retry && (qp.comp.retry_pending || (qp.comp.retried && qp.comp.retried_psn == from)))
    return;
  if (count_retry) {
    on_loss(eng, qp);
    if (qp.comp.retry_left == 0) {
      eng.stats_.inc(Counter::kRetryExceeded);
      qp_to_error(eng, qp, WcStatus::kRetryExcErr);
      return;
    }
    // rxe treats 7 as infinite; IBA does not. We follow rxe, the peer we are measured against.
    if (qp.attr.retry_cnt != 7) --qp.comp.retry_left;
  }
  eng.stats_.inc(Counter::kRetries);
  qp.comp.retry_pending = true;
  qp.comp.retry_psn = from;
  // A counted retry restarts the ACK timeout; an uncounted one (after an RNR wait, or the
  // go-back-N a probe's answer orders) leaves it running.
  if (count_retry) qp.comp.retrans_deadline = 0;
  qp.comp.probe_deadline = 0;
  qp.comp.rtt_timing = false;  // Karn: no sample across a retransmission
  schedule_recovery(eng, qp);
}

// Rewinds the requester to PSN `from`: the WQE that holds it restarts at that packet, every
// later WQE that was (partly) sent restarts from its first packet with its original PSNs.
void Engine::Stages::do_retry(Engine& eng, Qp& qp) {
  qp.comp.retry_pending = false;
  const Psn from = after(qp.comp.retry_psn, qp.comp.psn) ? qp.comp.retry_psn : qp.comp.psn;
  qp.comp.retried = true;
  qp.comp.retried_psn = from;
  const std::uint32_t pmtu = qp.pmtu();
  bool found = false;
  for (std::uint32_t i = qp.sq_head; i != qp.sq_tail; ++i) {
    SendWqe& w = qp.wqe(i);
    if (w.state == WqeState::kPosted) break;
    if (w.state == WqeState::kExecuted || w.state == WqeState::kDone ||
        w.state == WqeState::kFailed)
      continue;
    if (!found) {
      if (before(w.last_psn, from)) continue;
      found = true;
      qp.req.next_wqe = i;
      Psn at = before(from, w.first_psn) ? w.first_psn : from;
      // A READ is only acknowledged by its own responses: whatever the NAK said, resume at
      // the first response not received (rxe req_retry: VA and length adjusted); the
      // responses that arrived after it stay where they were placed.
      if (w.opcode == WrOpcode::kRead) at = w.read_resume_psn(qp.pmtu_shift());
      qp.req.next_psn = at;
      const std::uint32_t k = static_cast<std::uint32_t>(distance(qp.req.next_psn, w.first_psn));
      if (!w.is_rd_atomic()) w.sent = std::uint64_t{k} * pmtu;
    } else if (!w.is_rd_atomic()) {
      w.sent = 0;
    }
    // A later READ asks again for what it has not received (its remainder), never for a
    // response that arrived; one whose responses all arrived is finished and skipped above.
    if (w.opcode == WrOpcode::kRead) {
      // Its remainder is asked for again as a new stream: a gap in that is a new loss.
      w.read_asked = w.read_done_pkts(qp.pmtu_shift());
      if (w.rereq_to != 0) {
        w.rereq_to = 0;
        --qp.comp.read_rereqs;
      }
      w.rereq_wait = 0;
      w.rereq_out = w.npkts;  // the remainder, once the requester gets to it
    }
    w.state = WqeState::kSending;
  }
  if (!found) return;
  qp.req.pkts_since_ack_req = 0;
  arm_retransmit(eng, qp);
  arm_probe(eng, qp);
}

void Engine::Stages::run_timers(Engine& eng) {
  eng.timers_.expire(eng.now_, [&eng](Qp* qp, std::uint64_t at) {
    if (at != qp->timer_at) return;  // re-armed earlier, or reset, since: a stale entry
    qp->timer_at = 0;
    fire_timers(eng, *qp);
    track_timer(eng, *qp);
  });
  eng.next_timer_ = eng.timers_.next();
}

void Engine::Stages::fire_timers(Engine& eng, Qp& qp) {
  if (qp.req.sr && qp.sr->report_at() != 0 && eng.now_ >= qp.sr->report_at() &&
      qp.state != QpState::kErr) [[unlikely]]
    sr_report(eng, qp);
  if (qp.comp.rnr_deadline != 0 && eng.now_ >= qp.comp.rnr_deadline) {
    qp.comp.rnr_deadline = 0;
    order_retry(eng, qp, qp.comp.rnr_psn, false);
  }
  if (qp.comp.retrans_deadline != 0 && eng.now_ >= qp.comp.retrans_deadline) {
    qp.comp.retrans_deadline = 0;
    if (before(qp.comp.psn, qp.req.high_psn) && qp.state == QpState::kRts) {
      eng.stats_.inc(Counter::kRetransmitTimeouts);
      qp.comp.retried = false;                       // a timeout always retries
      qp.comp.probing = qp.comp.probe_sent = false;  // and resends everything
      SendWqe* w = oldest_unacked(qp);
      if (w != nullptr && w->opcode == WrOpcode::kRead && !qp.comp.retry_pending) {
        // The oldest request is a READ: ask again for what it misses, from its first missing
        // response, and for nothing else. The later READs' responses may only be slow (rxe in
        // a busy VM pauses for longer than the timeout): asking for them again made the
        // responder send them twice, which made it slower still. If theirs were lost, each
        // READ's own timeout (or a later READ's response) finds it when its turn comes.
        if (qp.comp.retry_left == 0) {
          eng.stats_.inc(Counter::kRetryExceeded);
          qp_to_error(eng, qp, WcStatus::kRetryExcErr);
          return;
        }
        if (qp.attr.retry_cnt != 7) --qp.comp.retry_left;
        on_loss(eng, qp);
        qp.comp.probe_deadline = 0;
        qp.comp.rtt_timing = false;  // Karn
        // (read_asked stays: the probe is for gaps seen, not for a responder that paused)
        read_ask_again(eng, qp, *w, w->npkts, true);
        arm_retransmit(eng, qp);
      } else if (qp.req.sr && w != nullptr && !w->is_rd_atomic() && !qp.comp.retry_pending &&
                 qp.sr->resend_tail - qp.sr->resend_head < qp.sr->resend.size()) {
        // Selective repeat: the responder kept what arrived after the oldest unacknowledged
        // packet, so only that one is sent again (a lost SACK's other gaps are found by the
        // probes that follow); the retry budget is spent as for any timeout. On a host that
        // stalls the peer for longer than the timeout nothing was lost, and a go-back-N
        // resent a whole window for nothing.
        if (qp.comp.retry_left == 0) {
          eng.stats_.inc(Counter::kRetryExceeded);
          qp_to_error(eng, qp, WcStatus::kRetryExcErr);
          return;
        }
        if (qp.attr.retry_cnt != 7) --qp.comp.retry_left;
        qp.comp.probe_deadline = 0;
        qp.comp.rtt_timing = false;  // Karn
        SrState& sr = *qp.sr;
        sr.resend[sr.resend_tail++ % sr.resend.size()] = {qp.comp.psn, 1};
        schedule_recovery(eng, qp);
        arm_retransmit(eng, qp);
      } else {
        order_retry(eng, qp, qp.comp.psn, true);
      }
    }
  }
  if (qp.comp.probe_deadline != 0 && eng.now_ >= qp.comp.probe_deadline) {
    qp.comp.probe_deadline = 0;
    if (before(qp.comp.psn, qp.req.high_psn) && qp.state == QpState::kRts &&
        !qp.comp.retry_pending && qp.comp.rnr_deadline == 0) {
      // Tail-loss probe: send the oldest unacknowledged packet again, alone, and hold the
      // requester where it is (no rewind). The answer tells what was lost (comp_progress).
      //
      // Unless the path is behind (RACK, RFC 8985, across QPs): other QPs sent after this one's
      // last packet, and nothing sent at or after its oldest outstanding one has been
      // acknowledged since. Then nothing shows a loss, only a queue: with 10,000 QPs a
      // QP's round trip is sampled once per turn of the scheduler, and a queue that grew since
      // (the peer's loop lost the CPU for a few milliseconds) made every QP with packets in
      // flight probe. The probe waits for another probe time; the QP that sent last probes
      // as before, so a tail lost at the end of everything, or a path that lost all, is found
      // at its time, and each of its answers moves acked_turn_ on for the others.
      // (first_turn is set by a turn that found nothing outstanding: a QP that never drains
      // its window keeps an old one, which after 2^31 turns the serial compare takes for one
      // in the future. It must lie behind tx_turn_, or it says nothing: review 21.)
      const CompState& c = qp.comp;
      if (static_cast<std::int32_t>(eng.tx_turn_ - c.last_turn) > 0 &&
          static_cast<std::int32_t>(eng.tx_turn_ - c.first_turn) > 0 &&
          static_cast<std::int32_t>(c.first_turn - eng.acked_turn_) > 0) {
        eng.stats_.inc(Counter::kProbesDeferred);
        arm_probe(eng, qp);
        return;
      }
      if (qp.comp.probe_backoff < 255) ++qp.comp.probe_backoff;
      if (send_probe(eng, qp)) {
        eng.stats_.inc(Counter::kRetransmitProbes);
      } else {
        arm_probe(eng, qp);  // no room to send now (or a READ is oldest): later
      }
    }
  }
}

}  // namespace roce::engine
