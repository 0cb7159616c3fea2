/// @file
/// Congestion control (docs/congestion.md): the notification point (a CNP for the peer's QP
/// when a packet arrives with ECN CE, at most one per QP per cnp_interval_ns), the reaction
/// point (a CNP or a round-trip sample moves the QP's rate: dataplane/engine/cc/dcqcn.h,
/// delay.h), and the pacing that holds each QP to its rate: the scheduler asks cc_admit()
/// before it sends a QP's packets and reports the bytes to cc_sent(); a QP whose next send
/// time is still ahead is parked on the pacing wheel (pace_) and comes back to the send list
/// when its time comes (cc_release, from run()). READ responses take the same schedule
/// (cc_admit_responses): the responder is a READ's data sender, and its CNPs come from the
/// READ requester. Nothing here runs with `algorithm: none` except the notification point,
/// which only CE-marked packets reach.
#include <algorithm>
#include <cmath>

#include "dataplane/engine/engine_loc.h"

namespace roce::engine {

namespace {

// Frame bytes around a packet's payload (Ethernet, IPv4, UDP, BTH, RETH, ICRC): the pacing
// estimate of one full packet.
constexpr std::uint32_t kPacketOverhead = 14 + 20 + 8 + 12 + 16 + 4;

// A CNP counts up to this long (or four round trips, if longer) after the QP's last request
// packet once everything is acknowledged: a CNP trails the marked packet by a switch queue
// and a one-way trip, far less than this on any fabric DCQCN is meant for.
constexpr std::uint64_t kCnpRecentNs = 1'000'000;

// The QP's rate now; 0 without an algorithm. At its maximum (rpg_max_rate, the line rate) a
// QP is still paced: as an RNIC's, it never sends faster than its link, so what it sends
// waits in no queue of the host (the engine's ring, the port's) where a rate cut could not
// reach it.
double current_rate(const Engine& eng, const Qp& qp) {
  switch (eng.config().congestion.algorithm) {
    case cc::Algorithm::kDcqcn:
      return qp.cc.dcqcn.rate_mbps();
    case cc::Algorithm::kDelay:
      return qp.cc.delay.rate_mbps();
    case cc::Algorithm::kNone:
      break;
  }
  return 0;
}

// Pacing follows the rate: ns per byte.
void set_pace(const Engine& eng, Qp& qp, std::uint64_t now) {
  const double r = current_rate(eng, qp);
  cc::QpCc& c = qp.cc;
  if (r <= 0) {
    c.ns_per_byte = 0;
    c.next_send = 0;
    return;
  }
  if (c.ns_per_byte == 0 && c.next_send < now) c.next_send = now;
  c.ns_per_byte = 8000.0 / r;
}

}  // namespace

double Engine::cc_rate_mbps(const Qp& qp) const { return current_rate(*this, qp); }

std::size_t Engine::cc_rates(std::span<QpRate> out) const {
  if (cfg_.congestion.algorithm == cc::Algorithm::kNone) return 0;
  const bool dcqcn = cfg_.congestion.algorithm == cc::Algorithm::kDcqcn;
  std::size_t n = 0, kept = 0;
  for (std::uint32_t i = 0; i < cfg_.max_qps; ++i) {
    const Qp* qp = find_qp(first_qpn_ + i);
    if (qp == nullptr || qp->type == QpType::kUd || qp->state != QpState::kRts) continue;
    double rate = qp->cc.delay.rate_mbps();
    bool limited = qp->cc.delay.limited();
    if (dcqcn) {
      // The timers run lazily, on the QP's next packet: the rate as they would make it now.
      cc::Dcqcn d = qp->cc.dcqcn;
      d.advance(now_);
      rate = d.rate_mbps();
      limited = d.limited();
    }
    if (!limited) continue;
    ++n;
    // Keep the lowest rates: insertion into a sorted prefix of `out`. Rounded down, so that a
    // QP listed as held below its maximum never shows the maximum (199.6 of 200 read "200").
    const QpRate r{qp->qpn, static_cast<std::uint32_t>(std::floor(rate))};
    if (kept < out.size())
      out[kept++] = r;
    else if (kept == 0 || out[kept - 1].rate_mbps <= r.rate_mbps)
      continue;
    else
      out[kept - 1] = r;
    for (std::size_t j = kept - 1; j > 0 && out[j - 1].rate_mbps > out[j].rate_mbps; --j)
      std::swap(out[j - 1], out[j]);
  }
  return n;
}

std::size_t Engine::sr_qps(std::span<std::uint32_t> out) const {
  std::size_t n = 0;
  for (std::uint32_t i = 0; i < cfg_.max_qps; ++i) {
    const Qp* qp = find_qp(first_qpn_ + i);
    if (qp == nullptr || qp->type != QpType::kRc || !qp->req.sr) continue;
    if (qp->state != QpState::kRtr && qp->state != QpState::kRts) continue;
    if (n < out.size()) out[n] = qp->qpn;
    ++n;
  }
  return n;
}

void Engine::Stages::cc_start(Engine& eng, Qp& qp) {
  cc::QpCc& c = qp.cc;
  c = cc::QpCc{};
  const cc::CongestionConfig& k = eng.cfg_.congestion;
  // rpg_max_rate 0: the port's line rate (as mlx5's).
  cc::DcqcnParams d = k.dcqcn;
  d.max_rate_mbps = k.max_rate(d.max_rate_mbps);
  d.min_rate_mbps = std::min(d.min_rate_mbps, d.max_rate_mbps);
  c.dcqcn.reset(d);
  cc::DelayParams y = k.delay;
  y.max_rate_mbps = k.max_rate(y.max_rate_mbps);
  y.min_rate_mbps = std::min(y.min_rate_mbps, y.max_rate_mbps);
  c.delay.reset(y);
}

void Engine::Stages::cc_on_ce(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  (void)pkt;
  const cc::CongestionConfig& k = eng.cfg_.congestion;
  if (!k.cnp) return;
  cc::QpCc& c = qp.cc;
  if (c.cnp_sent && eng.now_ - c.last_cnp_ns < k.cnp_interval_ns) return;
  // A normal slot: the ACK reserve stays for acknowledgements.
  auto slot = tx_slot(eng, false);
  if (slot.empty()) return;  // the next marked packet asks again
  // To the QP that sent the marked packet (IBTA A17.9.3, wire reference 3.2): BTH opcode
  // 0x81, BECN set, PSN 0, 16 reserved bytes. The QP's path (addresses, UDP source port) so
  // that it follows the data's; the IP DSCP is cnp_dscp.
  wire::FrameSpec s = qp.tx;
  s.opcode = wire::Opcode::kCnp;
  s.se = false;
  s.becn = true;
  s.fecn = false;
  s.ack_req = false;
  s.psn = wire::Psn(0);
  s.ip_id = eng.ip_id_++;
  // ECT(0) as the captured ConnectX CNP (TOS 0xC2), unless `ecn: false`: a CNP is not rate
  // controlled, so ECT on it claims nothing about our data's senders.
  s.tos = static_cast<std::uint8_t>((k.cnp_dscp << 2) | (k.ecn != cc::Ecn::kOff ? 2 : 0));
  const std::size_t len = wire::build_frame(s, {}, slot);
  if (len == 0) return;
  tx_commit(eng, len);
  eng.stats_.inc(Counter::kCnpSent);
  c.cnp_sent = true;
  c.last_cnp_ns = eng.now_;
}

// A CNP answers a packet of ours that met a congested queue: it can only be genuine while the
// QP has requests unacknowledged or READ responses queued, or sent either within a few round
// trips (a CNP may overtake nothing, but may trail the last ACK or response). RoCE has no
// authentication, so anyone who knows the peer's address and the QPN can send one
// (docs/security.md); this keeps such CNPs from pinning an idle QP at the minimum rate ahead of
// its next transfer.
static bool cnp_plausible(const Qp& qp, std::uint64_t now) {
  if (wire::before(qp.comp.psn, qp.req.high_psn)) return true;  // requests in flight
  if (qp.resp.reads_queued != 0) return true;                   // READ responses to send
  const std::uint64_t last = qp.cc.last_sent_ns;
  if (last == 0) return false;
  const std::uint64_t rtt = qp.comp.srtt_ns + 4 * qp.comp.rttvar_ns;
  const std::uint64_t window = std::max(kCnpRecentNs, 4 * rtt);
  return now - last <= window;
}

void Engine::Stages::cc_ignore_cnp(Engine& eng, Counter why) {
  eng.stats_.inc(Counter::kCnpIgnored);  // mlx5's rp_cnp_ignored: every reason
  eng.stats_.inc(why);
}

void Engine::Stages::cc_on_cnp(Engine& eng, Qp& qp) {
  const cc::Algorithm a = eng.cfg_.congestion.algorithm;
  // Refused, by reason (review 20 finding 8): no reaction point; a QP without a rate (a
  // responder never moved to RTS, cc_start runs at RTS; or one in error); a QP that cannot
  // have earned it. READ responders in RTS are paced, so their CNPs are taken.
  if (a == cc::Algorithm::kNone) return cc_ignore_cnp(eng, Counter::kCnpIgnoredNoCc);
  if (qp.state != QpState::kRts) return cc_ignore_cnp(eng, Counter::kCnpIgnoredNotRts);
  if (!cnp_plausible(qp, eng.now_)) return cc_ignore_cnp(eng, Counter::kCnpIgnoredIdle);
  // Handled whether it cuts now or at the end of the monitor period (mlx5's rp_cnp_handled);
  // ignored are only those refused above (rp_cnp_ignored). `delay` sends ECT(0) too, so it
  // slows down for CNPs as well (delay.h).
  if (a == cc::Algorithm::kDcqcn)
    qp.cc.dcqcn.on_cnp(eng.now_);
  else
    qp.cc.delay.on_cnp(eng.now_);
  eng.stats_.inc(Counter::kCnpHandled);
  set_pace(eng, qp, eng.now_);
}

void Engine::Stages::cc_on_rtt(Engine& eng, Qp& qp, std::uint64_t rtt_ns) {
  qp.cc.delay.on_rtt(rtt_ns, eng.now_);
  set_pace(eng, qp, eng.now_);
}

bool Engine::Stages::cc_admit(Engine& eng, Qp& qp, std::uint32_t& budget) {
  cc::QpCc& c = qp.cc;
  const std::uint64_t now = eng.now_;
  if (eng.cfg_.congestion.algorithm == cc::Algorithm::kDcqcn) c.dcqcn.advance(now);
  set_pace(eng, qp, now);
  if (c.ns_per_byte == 0) return true;
  if (eng.cc_delay_ && qp.type == QpType::kRc) {
    // Delay-based: a window as well as a rate (Swift's), rate x target round trip and at least
    // two packets, so that the queue a burst builds before the first late sample is bounded.
    const double cap = std::max(double(eng.cfg_.congestion.delay.target_us == 0
                                           ? c.delay.target_ns()
                                           : eng.cfg_.congestion.delay.target_us * 1000ull) /
                                    c.ns_per_byte,
                                2.0 * qp.pmtu());
    const auto inflight = double(distance(qp.req.next_psn, qp.comp.psn)) * qp.pmtu();
    const auto cap_pkts = static_cast<std::uint32_t>(cap / qp.pmtu());
    if (inflight >= cap) {
      // Closed: an ACK reopens it, if one was asked for. The last packet sent asked for one
      // (pkts_since_ack_req 0), or the window shrank (a lower rate) past packets that did
      // not: then one more packet, past the window, asks, or the QP would wait for the probe
      // timer.
      if (qp.req.pkts_since_ack_req == 0) return false;  // an ACK puts the QP back in the list
      c.ack_req_every = 1;
      budget = std::min(budget, 1u);
    } else {
      // Open: this call sends at most what fits, and the packet that fills the window asks for
      // an ACK (also one every half window, so ACKs reopen it as it drains).
      const auto left = static_cast<std::uint32_t>(std::ceil((cap - inflight) / qp.pmtu()));
      budget = std::min(budget, left);
      c.ack_req_every =
          std::max<std::uint32_t>(std::min(cap_pkts / 2, qp.req.pkts_since_ack_req + left), 1);
    }
  }
  return pace(eng, qp, budget);
}

bool Engine::Stages::cc_admit_responses(Engine& eng, Qp& qp, std::uint32_t& budget) {
  // No window here: the delay-based window counts request PSNs, and a READ's responses are
  // bounded by the READ (the requester's window holds its PSNs).
  const std::uint64_t now = eng.now_;
  if (eng.cfg_.congestion.algorithm == cc::Algorithm::kDcqcn)
    qp.cc.dcqcn.advance(now);
  else
    qp.cc.delay.recover(now);  // no round trip of ours times a READ's responses
  set_pace(eng, qp, now);
  if (qp.cc.ns_per_byte == 0) return true;
  return pace(eng, qp, budget);
}

// The schedule: park the QP until its next send time, or cut `budget` to the packets it
// allows now.
bool Engine::Stages::pace(Engine& eng, Qp& qp, std::uint32_t& budget) {
  cc::QpCc& c = qp.cc;
  const std::uint64_t now = eng.now_;
  // A QP that fell behind (a late poll) may catch up by burst_bytes, no more.
  const auto lag = static_cast<std::uint64_t>(eng.cfg_.congestion.burst_bytes * c.ns_per_byte);
  const std::uint64_t t = std::max(c.next_send, now > lag ? now - lag : 0);
  if (t > now) {
    if (c.park_at != t) {
      c.park_at = t;
      eng.pace_.schedule(&qp, t);
      eng.next_pace_ = eng.pace_.next();
      eng.stats_.inc(Counter::kCcParked);
    }
    return false;
  }
  c.next_send = t;
  const double pkt_ns = (qp.pmtu() + kPacketOverhead) * c.ns_per_byte;
  const auto allowed = static_cast<std::uint64_t>(double(now - t) / pkt_ns) + 1;
  budget = static_cast<std::uint32_t>(std::min<std::uint64_t>(budget, allowed));
  return true;
}

void Engine::Stages::cc_sent(Engine& eng, Qp& qp, std::uint64_t bytes) {
  cc::QpCc& c = qp.cc;
  if (bytes == 0) return;
  c.last_sent_ns = eng.now_;
  if (eng.cfg_.congestion.algorithm == cc::Algorithm::kDcqcn) c.dcqcn.on_sent(bytes, eng.now_);
  if (c.ns_per_byte == 0) return;
  c.next_send += static_cast<std::uint64_t>(double(bytes) * c.ns_per_byte);
  c.paced_bytes += bytes;
}

void Engine::Stages::cc_release(Engine& eng) {
  eng.pace_.expire(eng.now_, [&eng](Qp* qp, std::uint64_t at) {
    if (at != qp->cc.park_at) return;  // parked again since, for another time
    if (qp->state == QpState::kRts) schedule_send(eng, *qp);
    // Parked from the READ list (or from both): responses go on in any state but Error, on
    // the schedule they were parked on (park_at still set: resp_schedule keeps next_send).
    if (!qp->resp.out_empty() && qp->state != QpState::kErr) resp_schedule(eng, *qp);
    qp->cc.park_at = 0;
  });
  eng.next_pace_ = eng.pace_.next();
}

}  // namespace roce::engine
