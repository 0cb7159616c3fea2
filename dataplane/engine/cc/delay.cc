/// @file
/// Delay-based reaction point (see delay.h).
#include "dataplane/engine/cc/delay.h"

#include <algorithm>

namespace roce::engine::cc {

void DelayCc::reset(const DelayParams& p) {
  p_ = p;
  max_ = p.max_rate_mbps != 0 ? p.max_rate_mbps : kUnknownLineRateMbps;  // 0: the engine resolves
  min_ = std::min<double>(std::max<double>(p.min_rate_mbps, 0.001), max_);
  rate_ = max_;
  min_rtt_ = 0;
  last_decrease_ = 0;
  last_sample_ = 0;
  last_rtt_ = 0;
  last_recover_ = 0;
  decreased_ = false;
}

bool DelayCc::on_cnp(std::uint64_t now) {
  // Once per round trip; before any sample (a QP that only answers READs), once per target.
  if (decreased_ && now - last_decrease_ < (last_rtt_ != 0 ? last_rtt_ : target_ns())) return false;
  rate_ = std::max(rate_ * (1.0 - std::min(p_.max_decrease_pct, 100u) / 100.0), min_);
  decreased_ = true;
  last_decrease_ = now;
  return true;
}

void DelayCc::recover(std::uint64_t now) {
  if (rate_ >= max_) {
    last_recover_ = now;
    return;
  }
  const std::uint64_t step = std::max<std::uint64_t>(target_ns(), 1);
  const std::uint64_t from = std::max({last_recover_, last_decrease_, last_sample_});
  if (now < from + step) return;
  const std::uint64_t n = (now - from) / step;
  rate_ = std::min(rate_ + p_.ai_rate_mbps * double(n), max_);
  last_recover_ = from + n * step;
}

std::uint64_t DelayCc::target_ns() const {
  if (p_.target_us != 0) return std::uint64_t{p_.target_us} * 1000;
  return std::max(2 * min_rtt_, min_rtt_ + 10'000);
}

void DelayCc::on_rtt(std::uint64_t rtt, std::uint64_t now) {
  if (rtt == 0) return;
  if (min_rtt_ == 0 || rtt < min_rtt_) min_rtt_ = rtt;
  const std::uint64_t target = target_ns();
  // Samples come one round trip apart while the QP sends, rarely when it is slow: the
  // increase is R_AI per round trip of time since the previous sample (at least one).
  const double trips =
      last_sample_ == 0 ? 1.0 : std::clamp(double(now - last_sample_) / double(rtt), 1.0, 1000.0);
  last_sample_ = now;
  last_rtt_ = rtt;
  if (rtt < target) {
    rate_ = std::min(rate_ + p_.ai_rate_mbps * trips, max_);
    return;
  }
  if (decreased_ && now - last_decrease_ < rtt) return;  // once per round trip
  const double excess = double(rtt - target) / double(rtt);
  const double floor = 1.0 - std::min(p_.max_decrease_pct, 100u) / 100.0;
  const double f = std::max(1.0 - (p_.beta_pct / 100.0) * excess, floor);
  rate_ = std::max(rate_ * f, min_);
  decreased_ = true;
  last_decrease_ = now;
}

}  // namespace roce::engine::cc
