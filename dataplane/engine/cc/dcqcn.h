/// @file
/// The DCQCN reaction point of one QP (Zhu et al., "Congestion Control for Large-Scale RDMA
/// Deployments", SIGCOMM 2015), as a state machine of its own: no engine, no clock of its own.
/// The caller reports CNPs and bytes sent with the time, and asks for the rate to pace at.
///
///   CNP:            alpha <- (1 - g) alpha + g  (the update of the alpha period it falls in,
///                   taken at once; once per period), then
///                   RT <- RC;  RC <- RC (1 - alpha/2)   (at most one cut per monitor period;
///                   with defer_cut, CNPs within the period of the last cut make one cut at
///                   its end, as ConnectX's rate_reduce_monitor_period, by alpha as the last of
///                   them left it, else they only feed alpha; never below min_dec_factor of RC
///                   nor below the minimum rate); the timer, the byte counter and both stage
///                   counts T, BC restart. mlx5's knobs (DcqcnParams): rpg_gd makes alpha/2
///                   alpha 2^10/2^rpg_gd (11, the default, is alpha/2); clamp_tgt_rate false
///                   keeps RT unless an increase event came since the last cut;
///                   rate_to_set_on_first_cnp sets RC = RT to that rate instead of the cut for
///                   a QP at its maximum (no limit in force)
///   alpha period:   alpha <- (1 - g) alpha  at the end of a period without a CNP (one with a
///                   CNP had its update at the CNP)                   (g = dce_tcp_g/1024)
///
/// The paper cuts by the alpha from before the CNP and raises it after; we raise it first, as
/// ConnectX's cut follows the alpha update of its period. With the paper's g (1/256) that
/// cuts at most g/2 more; with ConnectX's (1019/1024) it is what makes a cut (docs/congestion.md).
///   increase event: each rate_increase_period (T += 1) and each byte_counter bytes (BC += 1):
///                   fast recovery   max(T, BC) < F:  RC <- (RT + RC) / 2
///                   additive        one of them >= F: RT += R_AI,           RC <- (RT + RC) / 2
///                   hyper           both >= F:        RT += i R_HAI,        RC <- (RT + RC) / 2
///                                   with i = min(T, BC) - F + 1
///
/// Timers are evaluated lazily: advance(now) runs every period that ended before `now`, so a
/// QP with nothing to send costs nothing, and a QP at its maximum rate has no timer at all.
/// After a long idle time the rate-increase events are applied in closed form, a run of
/// events with the same step at once, so one advance() costs the same after an hour as after
/// a millisecond.
#pragma once

#include <cstdint>

#include "dataplane/engine/cc/config.h"

namespace roce::engine::cc {

class Dcqcn {
 public:
  Dcqcn() { reset({}); }
  explicit Dcqcn(const DcqcnParams& p) { reset(p); }
  void reset(const DcqcnParams& p);

  /// A CNP for this QP arrived at `now_ns`. True when it cut the rate now; false when it fell
  /// in the monitor period of the previous cut: with defer_cut the cut comes at that period's
  /// end (advance), one for all the CNPs of the period. Either way it counts for alpha.
  bool on_cnp(std::uint64_t now_ns);
  /// `bytes` were sent at `now_ns` (the byte counter; timers up to now first).
  void on_sent(std::uint64_t bytes, std::uint64_t now_ns);
  /// Runs the alpha and rate-increase timers for every period that ended by `now_ns`.
  void advance(std::uint64_t now_ns);

  double rate_mbps() const { return rc_; }
  double target_mbps() const { return rt_; }
  double alpha() const { return alpha_; }
  /// True while the rate is below the maximum (the QP must be paced).
  bool limited() const { return rc_ < max_; }
  std::uint32_t timer_stage() const { return t_; }
  std::uint32_t byte_stage() const { return bc_; }

 private:
  void increase_event();
  void cut(std::uint64_t now, double alpha);
  void run_timers(std::uint64_t now);
  std::uint64_t skip_events(std::uint64_t k, bool bytes);

  /// advance() and on_sent() walk up to this many due increase events one by one, more in runs.
  static constexpr std::uint64_t kWalkEvents = 64;

  DcqcnParams p_;
  double max_ = 0, min_ = 0;
  double rc_ = 0, rt_ = 0, alpha_ = 1;
  double g_ = 0;   ///< the gain, dce_tcp_g/1024
  double gd_ = 0;  ///< a cut's share of alpha, 2^10 / 2^rpg_gd (1/2 with rpg_gd 11)
  std::uint32_t t_ = 0, bc_ = 0;
  std::uint64_t bytes_ = 0;     ///< since the last byte-counter event
  std::uint64_t last_cut_ = 0;  ///< when the rate was last cut
  bool cut_once_ = false;
  bool cut_pending_ = false;      ///< a CNP came within the monitor period of the last cut
  double pending_alpha_ = 0;      ///< alpha as the latest of those CNPs left it, for that cut
  bool cnp_in_period_ = false;    ///< a CNP arrived in the current alpha period
  std::uint64_t alpha_next_ = 0;  ///< end of the current alpha period (0: alpha timer idle)
  std::uint64_t timer_next_ = 0;  ///< next rate-increase timer event (0: idle)
};

}  // namespace roce::engine::cc
