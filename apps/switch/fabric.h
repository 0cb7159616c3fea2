/// @file
/// The incast benchmark's fabric, in one process on a simulated clock: N sending engines and
/// one receiving engine, each on its own host link (a serializer at the link rate), joined by
/// the software switch (switch.h) whose output to the receiver is the bottleneck. Every sender
/// keeps `queue_depth` WRITEs of `message` bytes posted to its own QP on the receiver; with
/// `read`, the receiver keeps `queue_depth` READs of `message` bytes posted to each sender
/// instead, whose READ responses are then the data converging on it (the senders are the READ
/// responders and the reaction points; the receiver, the READ requester, sends the CNPs). The
/// clock is simulated, so the result does not depend on the load of the machine running it:
/// every packet is still built, ICRC'd, parsed and executed by the real engines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/switch/switch.h"
#include "dataplane/engine/cc/config.h"

namespace roce::fabric {

struct IncastOptions {
  std::uint32_t senders = 8;
  std::uint32_t message = 65536;     ///< bytes per WRITE (READ)
  std::uint32_t queue_depth = 8;     ///< WRITEs (READs) in flight per sender
  bool read = false;                 ///< the receiver READs from the senders
  std::uint32_t mtu = 4096;          ///< path MTU
  std::uint64_t link_mbps = 10'000;  ///< every host link and the switch's outputs
  QueueConfig sw;                    ///< the switch's output queues (rate_mbps = link_mbps)
  engine::cc::CongestionConfig cc;   ///< every engine's (senders: RP; receiver: NP)
  std::uint64_t duration_ns = 50'000'000;
  std::uint64_t warmup_ns = 5'000'000;  ///< not counted in goodput and fairness
  std::uint64_t sample_ns = 100'000;    ///< rate samples (the plot)
  std::uint64_t join_at_ns = 0;         ///< the last sender starts this late (0: with the rest)
  std::uint64_t tick_ns = 200;          ///< the simulation's step
  std::uint64_t nic_fifo_bytes = 32 * 1024;  ///< what a host's NIC takes ahead of its link
  std::uint32_t tx_slots = 512;              ///< the engines' transmit rings (roced's default)
  std::uint64_t seed = 1;
  /// The data QPs run selective repeat, both ends (as when both offered it; the engines' window
  /// is then EngineConfig::sr_inflight_bytes): go-back-N's and its recovery side by side
  /// under tail drop (review 22).
  bool selective_repeat = false;
  /// Every engine's EngineConfig::sr_bdp_cap (selective repeat's bandwidth-delay cap): bytes,
  /// 0 off (roced's default), ~0 auto (the link rate x the smallest round trip measured).
  std::uint64_t sr_bdp_cap = 0;
};

struct IncastSample {
  std::uint64_t t_ns = 0;
  /// each sender's rate as its engine's counter reports it (Engine::cc_rates, roce-ctl rates):
  /// the link rate when not held below it
  std::vector<double> rate_mbps;
  std::vector<double> goodput_mbps;  ///< each sender's bytes completed in the interval
  std::uint64_t depth = 0;           ///< the bottleneck queue's depth
};

struct IncastResult {
  double goodput_mbps = 0;             ///< all senders' completed WRITE (READ) bytes, after warmup
  std::vector<double> sender_mbps;     ///< each sender's
  double jain = 0;                     ///< Jain's fairness index over sender_mbps
  double of_output = 0;                ///< goodput / the output's rate
  double of_payload_max = 0;           ///< goodput / the most payload the output can carry
  std::uint64_t drops = 0, marks = 0;  ///< at the bottleneck
  std::uint64_t p50_depth = 0, p99_depth = 0, max_depth = 0;
  std::uint64_t cnp_sent = 0, cnp_handled = 0;
  std::uint64_t retransmitted = 0, timeouts = 0, probes = 0;  ///< the data's requesters'
  std::uint64_t read_rerequests = 0;  ///< READ: re-requests the receiver sent
  std::uint64_t errors = 0;           ///< completions with an error status
  /// Selective repeat: the data requesters' bandwidth-delay caps at the end (PSNs; 0: none),
  /// the smallest and the largest, and the smallest round trip their engines measured.
  std::uint32_t sr_bdp_min = 0, sr_bdp_max = 0;
  std::uint64_t min_rtt_ns = 0;
  std::vector<IncastSample> samples;
  std::string switch_json;
};

IncastResult run_incast(const IncastOptions& o);
/// The result as JSON (with the options that produced it); `samples`: include the time series.
std::string to_json(const IncastOptions& o, const IncastResult& r, bool samples);

}  // namespace roce::fabric
