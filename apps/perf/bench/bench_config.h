/// @file
/// The benchmark file of `roce-perf --config FILE`: a topology (two appliances on a net_memif
/// link the tool starts itself, or this host's port and a remote peer running
/// `roce-perf --bench-peer`), the baselines to measure next to our figures, and a matrix of
/// workloads. Parsed with yaml-cpp; errors name file:line:col and unknown keys are rejected,
/// as in controlplane/config.cc. No DPDK here, so the parser is unit-tested on its own.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace roce::bench {

struct BenchConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Op { kWrite, kRead, kSend, kAtomic, kWriteImm };
enum class Mode { kBw, kLat };
const char* to_string(Op op);
const char* to_string(Mode m);

struct Workload {
  std::string name;
  Op op = Op::kWrite;
  Mode mode = Mode::kBw;
  std::vector<std::uint32_t> sizes;  ///< message sizes in bytes (atomics: always 8)
  std::uint64_t iterations = 1000;   ///< per size; ignored when duration > 0
  double duration = 0;               ///< seconds per size (0: iterations)
  std::uint32_t queue_depth = 64;    ///< operations in flight per QP (lat: 1)
  std::uint32_t qps = 1;
  std::uint32_t mtu = 1024;           ///< path MTU: 256, 512, 1024, 2048 or 4096
  std::uint32_t inline_size = 0;      ///< messages up to this size are posted inline
  double drop_rate = 0;               ///< injected on both appliances' transmit
  std::uint64_t seed = 1;             ///< of the fault injection
  std::uint32_t retry_timeout = 14;   ///< local ACK timeout exponent: 4.096 us x 2^n (perftest: 14)
  std::uint32_t window = 0;           ///< requester window in packets per QP (0: the engine's)
  std::uint64_t window_bytes = 0;     ///< the window in bytes (0: the engine's, 1 MiB)
  std::uint64_t sr_window_bytes = 0;  ///< with selective repeat (0: the engine's, 4 MiB)
  std::uint32_t loss_window = 0;      ///< the window after a loss (0: the engine's)
  std::uint32_t recovery_batch = 0;   ///< packets per run() while recovering (0: the engine's)
  /// Smallest payload sent zero-copy; 0: copy every payload; -1: the port's default (512).
  int zero_copy_min = -1;
  /// Selective repeat's bandwidth-delay cap (EngineConfig::sr_bdp_cap): `auto`, `off` or bytes;
  /// unset: the engine's (off).
  std::optional<std::uint64_t> sr_bdp_cap;
  std::uint32_t ack_req_every = 0;  ///< AckReq at least every N packets (0: the engine's)
  std::int64_t probe_min_us = -1;   ///< fast-retransmit probe floor (0: off, -1: the engine's)
  /// Announce selective repeat in the QP exchange (issue 32); a QP uses it when both sides
  /// announced it (Engine::set_selective_repeat).
  bool selective_repeat = false;
  /// Tests of the negotiation: B (the answering side) does not announce it (`peer_announces:
  /// 0`), so no QP may use it.
  bool peer_announces = true;
  /// Measurements of each size (with baselines.adjacent, each after its own link baseline);
  /// the median one is reported, with the range of them all.
  std::uint32_t repeat = 1;
};

struct Baselines {
  bool link = true;                 ///< L2 blast and echo on the same memif link
  bool tcp = true;                  ///< kernel TCP stream and ping-pong over loopback
  double duration = 0.5;            ///< seconds per size for the blasts and streams
  std::uint64_t iterations = 2000;  ///< round trips per size for the echoes and ping-pongs
  /// Link baselines: measurements per size; the median one is reported with the spread (the
  /// link's rate varies from run to run on a shared machine, and every ratio divides by it).
  std::uint32_t repeat = 1;
  /// Also measure the link baseline of every row right before the row, and compare the row
  /// with that one (the run's own baselines are still measured and printed).
  bool adjacent = false;
};

/// A figure the run is checked against (the benchmark issue's targets): the value of `metric`
/// for `workload` at message size `size` must be at least `min` or at most `max`. Reported,
/// not asserted: a missed target is printed and written to the JSON, the run still succeeds.
struct Target {
  enum class Metric {
    kBytesVsLink,      ///< our bytes/s over the L2 blast's payload bytes/s at our frame size
    kMsgsVsLink,       ///< our messages/s over the L2 blast's frames/s
    kP50VsL2Echo,      ///< our median round trip over the L2 echo's
    kBytesVsWorkload,  ///< our bytes/s over workload `of`'s at the same size
    kMsgsVsWorkload,   ///< our messages/s over workload `of`'s at the same size
  };
  std::string name;
  std::string workload;
  std::uint32_t size = 0;  ///< 0: the workload's first size
  Metric metric = Metric::kBytesVsLink;
  std::string of;       ///< the reference workload of the *_vs_workload metrics
  bool is_max = false;  ///< true: value <= bound; false: value >= bound
  double bound = 0;
};
const char* to_string(Target::Metric m);

/// The TCP port `roce-perf --bench-peer` listens on unless told otherwise.
constexpr std::uint16_t kBenchPeerPort = 18520;

/// Where the two appliances run. Without `peer`, the tool forks both on a net_memif link of its
/// own. With it, this host runs appliance A on a DPDK port of its interface `iface`, and B is
/// `roce-perf --bench-peer` on the host `peer` names: the control channel (configuration, QP
/// addresses, baseline steps) is a TCP connection to it, the measured traffic crosses the link.
struct Topology {
  std::string peer;               ///< "host" or "host:port" of the bench peer; "": memif pair here
  std::uint16_t peer_port = 0;    ///< from `peer` (0: kBenchPeerPort)
  std::string iface;              ///< this host's interface for the DPDK port (with peer)
  std::string pmd = "af_packet";  ///< af_packet, af_xdp or tap
  std::string ip = "192.0.2.1";   ///< our RoCE address on that link
  std::string mac = "02:00:5e:00:03:01";
  std::uint32_t netdev_mtu = 0;  ///< the interface MTU (0: 1500, or path MTU + 128 above 1024)
  std::uint32_t lcore = 0;       ///< the lcore of appliance A
  bool remote() const { return !peer.empty(); }
  /// The peer's control port: the one `peer` names, else kBenchPeerPort.
  std::uint16_t tcp_port() const { return peer_port ? peer_port : kBenchPeerPort; }
};
/// The interface MTU a run needs: 1500, or the largest path MTU plus headers above that.
std::uint32_t netdev_mtu_for(std::uint32_t path_mtu);
/// The smallest interface MTU that carries packets of `path_mtu` bytes of payload (IPv4, UDP,
/// BTH, RETH and ICRC around them).
constexpr std::uint32_t min_netdev_mtu(std::uint32_t path_mtu) { return path_mtu + 60; }

struct BenchConfig {
  std::string origin;  ///< the file it came from
  std::string text;    ///< the file as read, copied into the JSON report
  std::string name = "bench";
  std::string json;     ///< report file ("" : none)
  std::string svg;      ///< plot file ("" : none)
  std::string workdir;  ///< memif socket directory ("" : a fresh one under /tmp)
  double timeout = 60;  ///< seconds before a stalled step fails the run
  Topology topology;
  Baselines baselines;
  std::vector<Workload> workloads;
  std::vector<Target> targets;
};

/// The largest path MTU of the workloads (at least 1024).
std::uint32_t max_path_mtu(const BenchConfig& c);

/// `roce-perf --config FILE --only A,B`: keeps the workloads named in `names` (comma
/// separated), and the targets whose workload and reference are among them; throws
/// BenchConfigError for a name the file does not have.
void select_workloads(BenchConfig& c, const std::string& names);
/// `--repeat N`: every workload measured N times (1..9; the median and the range reported).
void set_repeat(BenchConfig& c, const std::string& n);

/// Parses a benchmark file; throws BenchConfigError("file:line:col: what").
BenchConfig parse_bench_config_file(const std::string& path);
/// The same from text; `origin` names it in errors.
BenchConfig parse_bench_config(const std::string& text, const std::string& origin);

}  // namespace roce::bench
