/// @file
/// DCQCN reaction point (see dcqcn.h for the equations).
#include "dataplane/engine/cc/dcqcn.h"

#include <algorithm>
#include <cmath>

namespace roce::engine::cc {

const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kNone:
      return "none";
    case Algorithm::kDcqcn:
      return "dcqcn";
    case Algorithm::kDelay:
      return "delay";
  }
  return "?";
}

void Dcqcn::reset(const DcqcnParams& p) {
  p_ = p;
  max_ = p.max_rate_mbps != 0 ? p.max_rate_mbps : kUnknownLineRateMbps;  // 0: the engine resolves
  min_ = std::min<double>(std::max<double>(p.min_rate_mbps, 0.001), max_);
  rc_ = rt_ = max_;
  alpha_ = std::min(p.initial_alpha, 1024u) / 1024.0;
  g_ = std::min(p.alpha_g, 1024u) / 1024.0;
  gd_ = std::ldexp(1.0, 10 - static_cast<int>(std::min(p.gd_log2, 30u)));  // 1024 / 2^rpg_gd
  t_ = bc_ = 0;
  bytes_ = 0;
  last_cut_ = 0;
  cut_once_ = false;
  cut_pending_ = false;
  pending_alpha_ = 0;
  cnp_in_period_ = false;
  alpha_next_ = timer_next_ = 0;
}

bool Dcqcn::on_cnp(std::uint64_t now) {
  advance(now);
  if (alpha_next_ == 0) alpha_next_ = now + std::uint64_t{p_.alpha_update_period_us} * 1000;
  // The alpha period's update with a CNP, taken now rather than at the period's end (which
  // then leaves alpha as it is): the cut below sees the CNP that called for it, as on ConnectX,
  // whose cuts come after the alpha update of their period (docs/congestion.md). One update
  // per period however many CNPs it holds, as ConnectX's cnp_received flag.
  if (!cnp_in_period_) alpha_ = (1 - g_) * alpha_ + g_;
  cnp_in_period_ = true;
  const std::uint64_t monitor = std::uint64_t{p_.rate_reduce_monitor_period_us} * 1000;
  if (cut_once_ && now - last_cut_ < monitor) {
    // ConnectX's way: cut at the period's end (advance), once for all the period's CNPs, by
    // alpha as the latest of them left it (alpha may decay before the period ends).
    if (p_.defer_cut) {
      cut_pending_ = true;
      pending_alpha_ = alpha_;
    }
    return false;
  }
  cut(now, alpha_);
  return true;
}

void Dcqcn::cut(std::uint64_t now, double alpha) {
  cut_once_ = true;
  cut_pending_ = false;
  last_cut_ = now;
  if (p_.first_cnp_rate_mbps != 0 && !limited()) {
    // rate_to_set_on_first_cnp: no limit in force yet, the new one starts at this rate.
    rc_ = std::clamp<double>(p_.first_cnp_rate_mbps, min_, max_);
    rt_ = rc_;
  } else {
    // clamp_tgt_rate, or clamp_tgt_rate_after_time_inc after an increase event since the last
    // cut (T or BC above 0), or without it after a byte-counter one: RT <- RC.
    if (p_.clamp_target || bc_ != 0 || (p_.clamp_target_after_time_inc && t_ != 0)) rt_ = rc_;
    const double keep = std::max(1.0 - alpha * gd_, std::min(p_.min_dec_factor_pct, 100u) / 100.0);
    rc_ = std::max(rc_ * std::max(keep, 0.0), min_);
  }
  t_ = bc_ = 0;
  bytes_ = 0;
  timer_next_ = now + std::uint64_t{p_.rate_increase_period_us} * 1000;
}

void Dcqcn::on_sent(std::uint64_t bytes, std::uint64_t now) {
  advance(now);
  if (!limited() || p_.byte_counter == 0) return;
  bytes_ += bytes;
  while (bytes_ >= p_.byte_counter && limited()) {
    // Many events at once (a small rpg_byte_reset: with 1 byte, 65,536 per 64 KiB turn): in
    // runs, as the timer's after an idle time (review 22).
    if (const std::uint64_t due = bytes_ / p_.byte_counter; due > kWalkEvents) {
      if (const std::uint64_t n = skip_events(due, true); n != 0) {
        bytes_ -= n * p_.byte_counter;
        continue;
      }
    }
    bytes_ -= p_.byte_counter;
    ++bc_;
    increase_event();
  }
}

void Dcqcn::advance(std::uint64_t now) {
  if (cut_pending_) {
    // A CNP came within the monitor period of the last cut: the timers up to the period's
    // end, the cut then, the timers from there.
    const std::uint64_t at = last_cut_ + std::uint64_t{p_.rate_reduce_monitor_period_us} * 1000;
    if (at > now) return run_timers(now);
    run_timers(at);
    cut(at, pending_alpha_);
  }
  run_timers(now);
}

void Dcqcn::run_timers(std::uint64_t now) {
  const std::uint64_t ak = std::max<std::uint64_t>(p_.alpha_update_period_us, 1) * 1000;
  // Alpha: one update per period; without CNPs it decays towards 0, and once it is there the
  // timer stops (the next CNP starts it again).
  while (alpha_next_ != 0 && alpha_next_ <= now) {
    if (!cnp_in_period_) alpha_ *= 1 - g_;  // a period with a CNP had its update at the CNP
    cnp_in_period_ = false;
    alpha_next_ += ak;
    if (alpha_ < 1e-6) {
      alpha_ = 0;
      alpha_next_ = 0;
    } else if (alpha_next_ + 64 * ak <= now) {
      // Idle for long: the remaining periods without CNPs in one step, in closed form (a walk
      // never ended early with a gain of 0, whose alpha stays: 3.6e9 periods after an idle
      // hour at 1 us, review 21). Below 1e-6 the next period's test above stops the timer.
      const std::uint64_t n = (now - alpha_next_) / ak;
      alpha_ *= std::pow(1 - g_, double(n));
      alpha_next_ += n * ak;
    }
  }
  const std::uint64_t tk = std::max<std::uint64_t>(p_.rate_increase_period_us, 1) * 1000;
  while (timer_next_ != 0 && timer_next_ <= now) {
    // Idle for long (no bytes sent, so BC stands still): the events in runs, not one by one.
    const std::uint64_t due = (now - timer_next_) / tk + 1;
    if (due > kWalkEvents) {
      if (const std::uint64_t n = skip_events(due, false); n != 0) {
        timer_next_ += n * tk;
        if (!limited()) timer_next_ = 0;
        continue;
      }
    }
    timer_next_ += tk;
    ++t_;
    increase_event();
    if (!limited()) timer_next_ = 0;
  }
}

// Up to `k` timer events (or byte-counter events: `bytes`) at once, as long as each raises RT
// by the same step s. For timer events: fast recovery (s = 0) until T reaches F, additive
// (s = R_AI) with BC below F, hyper once T has passed BC (s = (BC - F + 1) R_HAI); for byte
// events the same with T and BC exchanged; nothing once RT is at the maximum. Per event RT
// grows by s and D = RT - RC becomes (D + s) / 2, so after n events D = s + (D - s) / 2^n.
// Stops one event short of RT reaching the maximum (that event, with its shorter step, is
// walked). Returns the events applied; 0 when the next event's step differs from its
// successor's (hyper with the moving count not yet past the other: walked, at most
// ~sqrt(2 max / R_HAI) events before RT is at the maximum).
std::uint64_t Dcqcn::skip_events(std::uint64_t k, bool bytes) {
  const std::uint64_t f = p_.threshold;
  std::uint32_t& moving = bytes ? bc_ : t_;  // the stage count these events move
  const std::uint64_t other = bytes ? t_ : bc_;
  const std::uint64_t m1 = std::uint64_t{moving} + 1;  // its value at the next event
  double step = 0;
  std::uint64_t run = k;
  if (m1 < f) {
    step = other >= f ? p_.ai_rate_mbps : 0;
    run = f - m1;
  } else if (other < f) {
    step = p_.ai_rate_mbps;
  } else if (m1 > other || p_.hai_rate_mbps == 0) {
    step = double(other - f + 1) * p_.hai_rate_mbps;
  } else {
    return 0;
  }
  if (rt_ >= max_) step = 0;
  std::uint64_t n = std::min(k, run);
  if (step > 0) {
    const double to_cap = std::ceil((max_ - rt_) / step);  // events until RT is at the maximum
    n = std::min<std::uint64_t>(n, to_cap > double(n) ? n : std::uint64_t(to_cap) - 1);
  }
  if (n == 0) return 0;
  const double d = rt_ - rc_;
  rt_ = std::min(rt_ + double(n) * step, max_);
  rc_ = std::min(rt_ - (step + std::ldexp(d - step, -int(std::min<std::uint64_t>(n, 2000)))), max_);
  moving = static_cast<std::uint32_t>(std::min<std::uint64_t>(moving + n, 0xFFFFFFFFu));
  if (rt_ >= max_ && max_ - rc_ < max_ * 1e-4) rc_ = max_;
  return n;
}

void Dcqcn::increase_event() {
  const std::uint32_t f = p_.threshold;
  if (t_ >= f && bc_ >= f) {
    rt_ += (std::min(t_, bc_) - f + 1) * double(p_.hai_rate_mbps);
  } else if (t_ >= f || bc_ >= f) {
    rt_ += p_.ai_rate_mbps;
  }
  rt_ = std::min(rt_, max_);
  rc_ = std::min((rt_ + rc_) / 2, max_);
  // Within a hair of the target at the maximum: there.
  if (rt_ >= max_ && max_ - rc_ < max_ * 1e-4) rc_ = max_;
}

}  // namespace roce::engine::cc
