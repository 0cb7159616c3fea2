/// @file
/// A delay-based reaction point (Swift, Kumar et al., SIGCOMM 2020, applied to a rate instead
/// of a window; Timely's use of RDMA round trips). The engine's round-trip samples (one per
/// QP at a time, retransmit.cc) drive it:
///
///   rtt <  target:  R <- R + R_AI x (round trips since the previous sample, at least 1)
///   rtt >= target:  R <- R max(1 - beta (rtt - target)/rtt, 1 - max_decrease)
///                   at most once per round trip
///   CNP:            R <- R (1 - max_decrease), at most once per round trip with the above
///                   (per target before the first sample): its packets go out ECT(0), and a
///                   marked ECT sender must slow down (RFC 3168; docs/congestion.md "ECN on
///                   what we send")
///   no sample:      R <- R + R_AI per target of time since the last cut or sample (recover(),
///                   for READ responses, which no round trip of the responder's times: the
///                   READ requester holds the delay loop for them, the responder only obeys
///                   CNPs and must get back up without samples)
///
/// The target is `target_us`, or, when 0, twice the smallest round trip seen (at least 10 us
/// above it): the queueing the path may add.
#pragma once

#include <cstdint>

#include "dataplane/engine/cc/config.h"

namespace roce::engine::cc {

class DelayCc {
 public:
  DelayCc() { reset({}); }
  explicit DelayCc(const DelayParams& p) { reset(p); }
  void reset(const DelayParams& p);
  /// A round-trip sample of `rtt_ns`, taken at `now_ns`.
  void on_rtt(std::uint64_t rtt_ns, std::uint64_t now_ns);
  /// A CNP at `now_ns`: true when it cut the rate (not within a round trip of the last cut).
  bool on_cnp(std::uint64_t now_ns);
  /// Before READ responses are paced: the increase that no round-trip sample gives them.
  void recover(std::uint64_t now_ns);
  double rate_mbps() const { return rate_; }
  bool limited() const { return rate_ < max_; }
  std::uint64_t target_ns() const;
  std::uint64_t min_rtt_ns() const { return min_rtt_; }

 private:
  DelayParams p_;
  double max_ = 0, min_ = 0, rate_ = 0;
  std::uint64_t min_rtt_ = 0;
  std::uint64_t last_decrease_ = 0;
  std::uint64_t last_sample_ = 0;
  std::uint64_t last_rtt_ = 0;  ///< the latest sample (0: none yet)
  std::uint64_t last_recover_ = 0;
  bool decreased_ = false;
};

}  // namespace roce::engine::cc
