/// @file
/// Congestion control settings of one engine (YAML `congestion:` of a port, docs/congestion.md):
/// the notification point (ECN-capable transmit, CNPs for CE-marked packets), and the reaction
/// point's algorithm with its parameters. The parameter names follow what ConnectX RNICs expose
/// (mlx5's RP/NP knobs: rpg_*, dce_tcp_*, min_time_between_cnps, cnp_dscp), so that a value read
/// off an RNIC's configuration means the same here. Plain values, no behaviour.
#pragma once

#include <cstdint>

namespace roce::engine::cc {

enum class Algorithm : std::uint8_t {
  kNone,   ///< no rate control: the scheduler sends as the window allows (the default)
  kDcqcn,  ///< DCQCN (Zhu et al., SIGCOMM 2015): rate cuts on CNPs, timer and byte recovery
  kDelay,  ///< delay-based (Swift-style): the rate follows the measured round trip to a target
};
const char* to_string(Algorithm a);

/// The rate a QP starts at and recovers to when neither the configuration nor the port gives
/// one (`rpg_max_rate_mbps: 0`, "the line rate", on a port whose driver reports no speed).
inline constexpr std::uint32_t kUnknownLineRateMbps = 100'000;

/// ECT(0) on what we send: `ecn:` in YAML.
enum class Ecn : std::uint8_t {
  kAuto,  ///< with an algorithm that reacts to congestion (dcqcn, delay); Not-ECT with none
  kOn,    ///< always (with `algorithm: none` a non-responsive ECN sender: roced warns)
  kOff,   ///< never, as rxe
};

/// DCQCN reaction point. Rates in Mb/s, periods in microseconds, gains in 1/1024.
struct DcqcnParams {
  /// rpg_max_rate: the rate a QP starts at and recovers to; 0 (the default, as mlx5's): the
  /// port's line rate (CongestionConfig::line_rate_mbps).
  std::uint32_t max_rate_mbps = 0;
  std::uint32_t min_rate_mbps = 1;    ///< rpg_min_rate
  std::uint32_t ai_rate_mbps = 40;    ///< rpg_ai_rate: additive increase step (R_AI)
  std::uint32_t hai_rate_mbps = 100;  ///< rpg_hai_rate: hyper increase step (R_HAI)
  /// dce_tcp_g, the gain in 1/1024: alpha <- (1 - g/1024) alpha (+ g/1024 with a CNP), as
  /// NVIDIA's PRM defines it (mstflint's RoCE ECN layout, field dce_tcp_g: "Alpha =
  /// (cnp_received * dceTcpG) + (1 - dceTcpG) * alpha. dceTcpG is divided by 2^10"). 5 is 1/205,
  /// near the paper's 1/256 (4), which gives the same 8:1 incast (0.975-0.977 of the output,
  /// p99 queue 25-29 KiB, seeds 1-3); ConnectX's default 1019 is a gain of 0.995: alpha ~ "a
  /// CNP in the last period".
  std::uint32_t alpha_g = 5;
  std::uint32_t initial_alpha = 1023;          ///< initial_alpha_value (1023 ~ 1.0)
  std::uint32_t alpha_update_period_us = 55;   ///< dce_tcp_rtt: alpha decays once per period
  std::uint32_t rate_increase_period_us = 55;  ///< rpg_time_reset: the rate-increase timer
  std::uint64_t byte_counter = 10'000'000;     ///< rpg_byte_reset: bytes per increase event
  std::uint32_t threshold = 5;                 ///< rpg_threshold: F, the fast recovery stages
  /// A CNP within rate_reduce_monitor_period of the last cut: true, as ConnectX, it is kept and
  /// cuts at the period's end; false (the default), it feeds alpha but cuts nothing. With our
  /// 55 us alpha period and 50 us monitor period, keeping them cuts again for CNPs that still
  /// reflect the queue before the last cut: the 8:1 incast fell from 0.973 of the output
  /// (Jain 0.997) to 0.474 (Jain 0.247). docs/congestion.md.
  bool defer_cut = false;
  /// At most one rate cut per period. 50 us, not ConnectX's 4: with a CNP every 4 us each
  /// cut lands before the previous one can show in the queue; 8:1 incast then dropped 312
  /// frames and reached 0.92 of the output, fairness 0.93 (docs/congestion.md).
  std::uint32_t rate_reduce_monitor_period_us = 50;
  std::uint32_t min_dec_factor_pct = 50;  ///< rpg_min_dec_fac: one cut keeps >= this % of the rate
  /// rpg_gd: a cut is RC (1 - alpha 2^10 / 2^rpg_gd), alpha in [0, 1] (the PRM's
  /// (1 - Alpha/Gd) with Alpha in 1/1024 and Gd = 2^rpg_gd). 11, ConnectX's default, is the
  /// paper's RC (1 - alpha/2); 12 cuts half as deep, 10 by alpha itself.
  std::uint32_t gd_log2 = 11;
  /// rate_to_set_on_first_cnp (Mb/s): a CNP for a QP at its maximum rate (no limit in force:
  /// its first CNP, or the first since it recovered) sets RC and RT to this instead of cutting
  /// by alpha, as ConnectX sets a flow's new rate limiter; 0 (the default, as ConnectX's): the
  /// cut by alpha. Above the maximum rate: the maximum (no cut).
  std::uint32_t first_cnp_rate_mbps = 0;
  /// clamp_tgt_rate: RT <- RC at every cut (the paper's; true, our default). false, as
  /// ConnectX's default: only when clamp_target_after_time_inc says so; otherwise RT stays,
  /// and the recovery heads back to the rate from before the cuts.
  bool clamp_target = true;
  /// clamp_tgt_rate_after_time_inc (ConnectX's default true): with clamp_target false, RT <- RC
  /// at a cut that follows an increase event (timer or byte counter) since the previous cut;
  /// false: only one of the byte counter. (The published DCQCN model's rule for the two bits.)
  bool clamp_target_after_time_inc = true;
};

/// Delay-based reaction point (Swift, SIGCOMM 2020, on rates): below the target round trip the
/// rate grows additively, above it the rate shrinks in proportion to the excess, at most once
/// per round trip.
struct DelayParams {
  std::uint32_t max_rate_mbps = 0;  ///< 0: the port's line rate, as rpg_max_rate
  std::uint32_t min_rate_mbps = 10;
  std::uint32_t target_us = 50;         ///< target round trip; 0: 2 x the smallest round trip seen
  std::uint32_t ai_rate_mbps = 100;     ///< additive increase per round trip below target
  std::uint32_t beta_pct = 80;          ///< multiplicative decrease gain (of the relative excess)
  std::uint32_t max_decrease_pct = 50;  ///< one decrease keeps >= this % of the rate
};

struct CongestionConfig {
  /// Transmit ECT(0) in the IP ECN field of RoCE packets whose traffic class leaves it 0, as
  /// ConnectX RNICs do with ECN enabled (rxe sends Not-ECT). Marking switches only mark ECT
  /// packets; Not-ECT packets are dropped instead. ECT claims a sender that reacts to marks
  /// (RFC 3168), so by default only with an algorithm (ect_on()).
  Ecn ecn = Ecn::kAuto;
  /// Notification point: answer CE-marked packets of a connected QP with CNPs.
  bool cnp = true;
  std::uint32_t cnp_interval_ns = 4'000;  ///< min_time_between_cnps: per QP
  std::uint8_t cnp_dscp = 48;             ///< cnp_dscp: the CNP's IP DSCP
  Algorithm algorithm = Algorithm::kNone;
  /// Pacing lets a QP that fell behind its schedule (a late poll) catch up by at most this
  /// many bytes at once; beyond, the lost time is forgotten, never sent as a burst.
  std::uint32_t burst_bytes = 16'384;
  DcqcnParams dcqcn;
  DelayParams delay;
  /// The port's speed in Mb/s, what `max_rate_mbps: 0` means; set by the runtime from the
  /// driver (rte_eth_link_get); 0: unknown, kUnknownLineRateMbps.
  std::uint32_t line_rate_mbps = 0;

  bool ect_on() const {
    return ecn == Ecn::kOn || (ecn == Ecn::kAuto && algorithm != Algorithm::kNone);
  }
  /// A configured maximum rate, 0 resolved to the line rate.
  std::uint32_t max_rate(std::uint32_t configured) const {
    if (configured != 0) return configured;
    return line_rate_mbps != 0 ? line_rate_mbps : kUnknownLineRateMbps;
  }
};

}  // namespace roce::engine::cc
