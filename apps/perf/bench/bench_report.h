/// @file
/// What a benchmark run measured, and its three reports: the perftest-style table on the
/// terminal (our figures next to the baselines, as ratios), the JSON file (every figure and the
/// exact configuration) and the SVG plot (written directly). No DPDK here.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "apps/perf/bench/bench_config.h"

namespace roce::bench {

enum class Kind : std::uint32_t { kOurs, kL2Blast, kL2Echo, kTcpStream, kTcpPingPong };
const char* to_string(Kind k);

/// One measured row. Plain data: the appliance process that measures it sends it to the parent
/// down a pipe, byte for byte.
struct Point {
  Kind kind = Kind::kOurs;
  std::int32_t workload = -1;  ///< index into BenchConfig::workloads (kOurs only)
  std::uint32_t size = 0;      ///< message bytes (link baselines: RoCE payload bytes per frame)
  std::uint32_t frame = 0;     ///< link baselines: Ethernet frame bytes
  std::uint64_t iterations = 0;
  double seconds = 0;
  double bytes_per_s = 0;  ///< payload bytes (ours: message bytes)
  double msgs_per_s = 0;   ///< messages (link: frames)
  bool has_lat = false;
  double lat_min = 0, lat_p50 = 0, lat_avg = 0, lat_p99 = 0, lat_p999 = 0, lat_max = 0;  ///< ns
  std::uint64_t retransmitted = 0, timeouts = 0, probes = 0, injected_drops = 0, rnr_naks = 0,
                seq_naks = 0;
  /// READ rows: READ requests A sent again and the bytes they asked for; READ response frames
  /// B sent for the row (the frames needed are messages x packets per message).
  std::uint64_t read_rerequests = 0, read_rerequest_bytes = 0, peer_read_responses = 0;
  /// Loss rows: payload bytes A sent again (selective repeat or go-back-N), the payload bytes
  /// of the request frames A's injector dropped (frames x payload per frame: exact for
  /// messages of whole MTUs), and the packets selective repeat sent again.
  std::uint64_t retransmitted_bytes = 0, lost_bytes = 0, sr_retransmits = 0;
  /// A's requester: times it found its window full with packets to send, the time it waited
  /// (ns), and oldest packets a later SACK showed lost (selective repeat, docs/loss-recovery.md).
  std::uint64_t window_stalls = 0, window_stall_ns = 0, sr_edge_resends = 0;
  bool selective_repeat = false;  ///< the QPs used it (both sides announced it)
  /// Ours: the engine's smoothed round trip (request to acknowledgement) at the end, in ns.
  std::uint64_t srtt_ns = 0;
  std::uint64_t lost = 0;  ///< link blast: frames sent and not received
  /// Ours: the fraction of each appliance's poll loop time that did work while this size ran
  /// (port::PollLoop::TimeStats); -1 when not measured. The side near 1 limits the run.
  double busy_a = -1, busy_b = -1;
  /// Link baselines measured baselines.repeat times, and rows measured their workload's
  /// `repeat` times: this is the median run; the lowest and highest figure of the runs
  /// (runs_are_rates(): frames or messages/s; else the median round trip, ns).
  std::uint32_t runs = 1;
  double runs_lo = 0, runs_hi = 0;
  /// Ours, runs > 1: the figure the median run was chosen by (each run against its own link
  /// baseline with baselines.adjacent, else its own rate or median round trip), lowest,
  /// median and highest. A target's range scales its value by these (TargetResult::lo, hi).
  double key_lo = 0, key_med = 0, key_hi = 0;
  /// Cache-line round trip between the two appliances' cores, measured just before this row
  /// (ns; -1: not measured, as on a remote topology). A VM's cores can move on the host: here
  /// it reads 70-90 ns or 320-340 ns, and every figure that crosses cores moves with it.
  double c2c_ns = -1;
  /// A link baseline measured right before one row (baselines.adjacent): the row's workload
  /// index and message size; -1 for the baselines of the whole run.
  std::int32_t for_workload = -1;
  std::uint32_t for_size = 0;
};

struct Results {
  double tsc_hz = 0;
  std::vector<Point> points;
  /// A baseline of the whole run (not one measured for a row).
  const Point* find(Kind k, std::uint32_t size) const;
  /// The link baseline (kL2Blast, kL2Echo) that `row` is compared with: the one measured right
  /// before it if there is one, else the run's at frame payload `fp`.
  const Point* link_for(Kind k, const Point& row, std::uint32_t fp) const;
};

/// RoCEv2 over IPv4 without RETH: Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4.
inline constexpr std::uint32_t kFrameOverhead = 58;
/// Payload bytes in the largest frame of a message of `size` at path MTU `mtu`.
inline std::uint32_t frame_payload(std::uint32_t size, std::uint32_t mtu) {
  return size < mtu ? size : mtu;
}

/// Whether the runs of `p` (runs_lo, runs_hi) are rates (blasts, our bandwidth rows) rather
/// than median round trips (echoes, our latency rows).
inline bool runs_are_rates(const Point& p) {
  return p.kind == Kind::kL2Blast || (p.kind == Kind::kOurs && !p.has_lat);
}

/// Sorts `ns` and fills the latency fields of `p` (min, p50, avg, p99, p99.9, max).
void summarize_latency(std::vector<double>& ns, Point& p);

/// Terminal table: a header per workload, then one row per size as it is measured.
void print_workload_header(std::FILE* out, const Workload& w);
void print_row(std::FILE* out, const Workload& w, const Point& p, const Results& baselines);
void print_baselines(std::FILE* out, const BenchConfig& cfg, const Results& r);
/// The link the baselines ran on, for people ("the memif link", "af_packet on eth1 to host").
std::string link_name(const BenchConfig& cfg);

/// A target checked against the results: `value` is nullopt when a figure it needs was not
/// measured (a baseline turned off, a failed size).
struct TargetResult {
  const Target* target = nullptr;
  std::optional<double> value;
  bool met = false;
  /// The core-to-core round trips (Point::c2c_ns) before the row and before its reference
  /// (baseline or workload); -1 when not measured. `cores_moved`: they differ more than twice,
  /// so the two were measured with the VM's cores placed differently and the ratio mixes them.
  double c2c_row = -1, c2c_ref = -1;
  bool cores_moved = false;
  /// The row was measured `runs` times: `value` is its median run's, and [lo, hi] the range
  /// of its runs (each against its own link baseline when measured with one; a ratio to
  /// another workload takes that workload's median as it is).
  std::uint32_t runs = 1;
  std::optional<double> lo, hi;
  /// A ratio of two workloads each measured right after its own link baseline: each was
  /// taken against its link first ((row / its link) / (reference / its link)).
  bool link_normalized = false;
};
std::vector<TargetResult> evaluate_targets(const BenchConfig& cfg, const Results& r);
void print_targets(std::FILE* out, const std::vector<TargetResult>& t);

std::string to_json(const BenchConfig& cfg, const Results& r);
std::string to_svg(const BenchConfig& cfg, const Results& r);

}  // namespace roce::bench
