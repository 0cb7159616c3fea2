/// @file
/// Counter publication for the appliance: the poll loop copies its raw counters (plain structs,
/// no allocation) into a snapshot under a try-lock, so the dataplane never waits; the control
/// side names them, renders Prometheus text, serves it over HTTP, and answers the DPDK telemetry
/// command /roce/counters.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dataplane/engine/stats.h"
#include "dataplane/fault_injector.h"
#include "dataplane/port/dpdk_port.h"
#include "fpga/iface/ports.h"

namespace roce::apps {

/// A QP that congestion control holds below its maximum rate (Engine::cc_rates).
struct QpRate {
  std::uint32_t qpn = 0;
  std::uint32_t rate_mbps = 0;
};
/// At most this many per-QP rate series per port (the lowest rates); the count is complete.
inline constexpr std::size_t kQpRateSeries = 64;

/// The raw counters of one port, as the poll loop copies them.
struct PortCounters {
  std::string name;  ///< port name, set once
  engine::Stats engine;
  port::PortStats port;
  port::NeighbourStats neighbour;
  FaultStats faults;
  bool faults_on = false;
  /// Counters of the services hosted on the port (runtime/service.h), as they name them; two
  /// services reporting the same name on one port add up.
  struct Service {
    std::string name, help;
    std::uint64_t value = 0;
    bool gauge = false;  ///< a level; a name ending in `_now` is one too
  };
  std::vector<Service> services;
  /// The FPGA offload's device counters (port `offload:`), summed over the port's loops;
  /// exported as fpga_<Coyote's nstats name>.
  bool fpga_on = false;
  std::array<std::uint64_t, fpga::kDevCounters> fpga{};
  std::uint64_t qps = 0;
  std::uint64_t mrs = 0;
  /// Congestion control on (an algorithm): cc_limited_qps_now and the per-QP rate gauges.
  bool cc_on = false;
  std::uint64_t cc_limited_qps = 0;
  std::array<QpRate, kQpRateSeries> cc_rates{};  ///< lowest first, cc_rates_n of them
  std::size_t cc_rates_n = 0;
  /// The QPs running selective repeat (sr_qps_now) and the QPNs of the first kQpRateSeries.
  std::uint64_t sr_qps = 0;
  std::array<std::uint32_t, kQpRateSeries> sr_qpns{};
  std::size_t sr_qpns_n = 0;
  // attached client processes (controlplane/attach), when attach.socket is configured
  bool attach_on = false;
  std::uint64_t attach_clients = 0, attach_clients_total = 0, attach_clients_lost = 0;
  std::uint64_t attach_qps = 0, attach_mrs = 0, attach_cqs = 0, attach_memory_bytes = 0;
  std::uint64_t attach_bad_requests = 0;
  std::uint64_t attach_alloc_failures = 0;  ///< requests answered ENOMEM (roced went on)
  std::uint64_t attach_refused_wrs = 0, attach_broken_rings = 0;
  std::uint64_t attach_refused = 0, attach_silent = 0, attach_out_of_fds = 0;
  std::uint64_t attach_cm_refused = 0;
};

/// One attached client (controlplane/attach), as roce-ctl clients lists it.
struct ClientSample {
  std::uint32_t id = 0;
  std::int32_t pid = 0;
  std::uint32_t uid = 0;
  std::string port;
  std::uint32_t lcore = 0;
  std::uint64_t qps = 0, mrs = 0, cqs = 0, memory_bytes = 0;
};

struct CounterSample {
  CounterSample(std::string n, std::string p, std::uint64_t v, std::string h = {}, bool g = false)
      : name(std::move(n)), port(std::move(p)), value(v), help(std::move(h)), gauge(g) {}
  std::string name;  ///< e.g. "rx_frames"
  std::string port;  ///< label
  std::uint64_t value = 0;
  std::string help;    ///< # HELP line (hosted services' counters; empty: none)
  bool gauge = false;  ///< besides the names Metrics knows as levels and `_now`
};

class Metrics {
 public:
  /// Dataplane side: copies the counters unless the control side is reading them right now.
  /// With the same number of ports each time, this allocates nothing.
  void publish(const std::vector<PortCounters>& ports);
  /// Control side: every counter, named.
  std::vector<CounterSample> snapshot() const;
  /// Prometheus text exposition format (version 0.0.4).
  std::string prometheus(const std::string& appliance) const;
  /// The attached clients, asked for by the control side when it renders (set once, before
  /// the server starts; thread-safe).
  std::function<std::vector<ClientSample>()> clients;

 private:
  mutable std::mutex mu_;
  std::vector<PortCounters> ports_;
};

/// Registers /roce/counters with DPDK telemetry (call after EAL init).
void register_telemetry(const Metrics* m);

/// Splits "host:port"; throws std::invalid_argument with a clear message.
std::pair<std::string, std::uint16_t> split_host_port(const std::string& s);

}  // namespace roce::apps
