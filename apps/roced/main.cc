/// @file
/// roced: the appliance daemon. Reads the YAML configuration, starts the DPDK EAL (no
/// hugepages needed), brings up every port with its engine and poll loop, answers ARP and
/// ping, hosts the configured services (`services:`; their kinds come from the applications
/// through the registry of runtime/service.h, never by name here), publishes counters
/// (Prometheus text endpoint and DPDK telemetry /roce/counters), prints what its services say
/// of themselves on SIGUSR1 (the NFS service: its NFSv4 clients), asks them to read their files
/// again on SIGHUP (an NFS exports file; the daemon goes on), and shuts down cleanly on SIGINT
/// or SIGTERM.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <rte_launch.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/roced/metrics.h"
#include "apps/roced/metrics_http.h"
#include "controlplane/address.h"
#include "controlplane/attach/attach_server.h"
#include "controlplane/config.h"
#include "controlplane/tcp.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/pmd_frames.h"
#include "dataplane/port/poll_loop.h"
#include "fpga/model/device.h"
#include "runtime/env.h"
#include "runtime/link.h"
#include "runtime/oob.h"
#include "runtime/port.h"
#include "runtime/service.h"

namespace po = boost::program_options;
using namespace roce;

namespace {

volatile std::sig_atomic_t g_signal = 0, g_status = 0;
void on_signal(int sig) { g_signal = sig; }
void on_status(int) { g_status = 1; }  // SIGUSR1: the hosted services' status()
volatile std::sig_atomic_t g_hangup = 0;
void on_hangup(int) { g_hangup = 1; }

// A configured port (runtime::Port: one RX/TX queue, engine and poll loop per lcore). Loop 0
// runs on the main lcore (with the neighbour responder, the hosted services and the
// counters); the others on workers.
struct PortRuntime {
  ctl::PortConfig cfg;
  std::unique_ptr<runtime::Port> rt;
  // What the worker lcores last reported (they copy it on request: no shared counters).
  struct Snapshot {
    engine::Stats stats;
    std::size_t qps = 0, mrs = 0;
    std::array<std::uint64_t, fpga::kDevCounters> dev{};
    std::array<engine::Engine::QpRate, apps::kQpRateSeries> rates{};
    std::size_t rates_n = 0, limited = 0;
    std::array<std::uint32_t, apps::kQpRateSeries> sr_qpns{};
    std::size_t sr_qps = 0;
    std::atomic<bool> asked{false};
  };
  std::vector<std::unique_ptr<Snapshot>> snaps;
  engine::Engine& eng() { return rt->eng(); }
  port::PollLoop& loop() { return rt->loop(); }
};

// The runtime port of `pc`: roced's limits and transport settings on every lcore's engine.
runtime::PortOptions port_options(const ctl::ApplianceConfig& cfg, const ctl::PortConfig& pc) {
  runtime::PortOptions o;
  engine::EngineConfig& ec = o.engine;
  ec.mac = pc.mac;
  ec.ipv4 = pc.ipv4;
  ec.ipv6 = pc.ipv6;
  ec.vlan_id = pc.vlan;
  ec.max_qps = cfg.limits.max_qps;
  ec.tx_slots = cfg.limits.tx_slots;
  ec.max_mrs = cfg.limits.max_mrs;
  ec.max_cq_depth = cfg.limits.cq_depth;
  ec.ack_req_every = cfg.transport.ack_req_every;
  ec.max_inflight_psns = cfg.transport.max_inflight_psns;
  ec.max_inflight_bytes = cfg.transport.max_inflight_bytes;
  ec.probe_min_ns = std::uint64_t{cfg.transport.probe_min_us} * 1000;
  ec.selective_repeat = cfg.transport.selective_repeat;
  ec.sr_bdp_cap = cfg.transport.sr_bdp_cap;
  ec.loss_window = cfg.transport.loss_window;
  ec.recovery_batch = cfg.transport.recovery_batch;
  ec.max_mtu = runtime::link_path_mtu(pc.mtu, runtime::kIboeHeaderRoom);
  ec.congestion = pc.congestion;
  port::PortSpec& ps = o.spec;
  ps.device = pc.device;
  ps.mac = pc.mac;
  ps.mtu = pc.mtu;
  ps.mbufs = pc.mbufs;
  ps.zero_copy = pc.zero_copy;
  ps.vlan = pc.vlan;
  ps.neighbours = cfg.limits.neighbours;
  ps.zero_copy_min = pc.zero_copy_min;
  ps.rx_desc = pc.rx_desc;
  ps.tx_desc = pc.tx_desc;
  o.lcores = static_cast<unsigned>(cfg.lcores.size());
  o.tx_faults = pc.fault;
  o.offload = {pc.offload.mode, pc.offload.clock_mhz, pc.offload.bytes_per_cycle,
               pc.offload.line_gbps};
  return o;
}

// A `dcqcn:` or `delay:` mapping under a port's `congestion:` for an algorithm the port does
// not run is accepted and used by nothing: say so (--check's layout, or the daemon's).
void warn_unused_congestion(const ctl::PortConfig& pc, bool daemon) {
  for (const std::string& m : pc.congestion_unused)
    std::printf(
        "%sport %s: %scongestion.%s is given but algorithm is %s: its parameters are not used "
        "(set algorithm: %s; docs/configuration.md)\n",
        daemon ? "roced: warning: " : "  ", pc.name.c_str(), daemon ? "" : "warning: ", m.c_str(),
        engine::cc::to_string(pc.congestion.algorithm), m.c_str());
}

// rpg_min_rate_mbps (delay.min_rate_mbps) above the maximum rate stops every cut: the engine
// lowers it to the maximum, so a QP is never slowed. An explicit maximum below it is refused
// by the configuration; against the port's speed (rpg_max_rate_mbps 0) it can only be judged
// once the driver reports the speed: the daemon warns with that speed (review 20 finding 11).
// --check, without a port, warns from 10 Gb/s on, the slowest RoCE ports' speed.
void warn_min_rate(const ctl::PortConfig& pc, const engine::cc::CongestionConfig& k, bool daemon) {
  using engine::cc::Algorithm;
  const bool dcqcn = k.algorithm == Algorithm::kDcqcn;
  if (!dcqcn && k.algorithm != Algorithm::kDelay) return;
  const std::uint32_t max = dcqcn ? k.dcqcn.max_rate_mbps : k.delay.max_rate_mbps;
  const std::uint32_t min = dcqcn ? k.dcqcn.min_rate_mbps : k.delay.min_rate_mbps;
  const char* key = dcqcn ? "dcqcn.rpg_min_rate_mbps" : "delay.min_rate_mbps";
  if (max != 0) return;  // the configuration refused min > max (and a first-CNP rate >= max)
  // rate_to_set_on_first_cnp_mbps at or above the speed: a QP at its maximum is set to the
  // maximum by every CNP, never limited, so never slowed (review 22).
  const std::uint32_t first = dcqcn ? k.dcqcn.first_cnp_rate_mbps : 0;
  if (first != 0 && daemon && first >= k.max_rate(0))
    std::printf(
        "roced: warning: port %s: congestion.dcqcn.rate_to_set_on_first_cnp_mbps %u is not "
        "below the port's speed, %u Mb/s%s: every CNP sets a QP to its maximum, so DCQCN never "
        "slows a QP on this port\n",
        pc.name.c_str(), first, k.max_rate(0),
        k.line_rate_mbps != 0 ? "" : " (the driver reports none)");
  else if (first != 0 && !daemon && first >= 10'000)
    std::printf(
        "  port %s: warning: congestion.dcqcn.rate_to_set_on_first_cnp_mbps %u with the port's "
        "speed as the maximum: on a port of %u Mb/s or slower every CNP sets a QP to its "
        "maximum and DCQCN never slows it (roced warns at start)\n",
        pc.name.c_str(), first, first);
  if (daemon && min >= k.max_rate(0))
    std::printf(
        "roced: warning: port %s: congestion.%s %u is not below the port's speed, %u Mb/s%s: "
        "lowered to it, so congestion control never slows a QP on this port\n",
        pc.name.c_str(), key, min, k.max_rate(0),
        k.line_rate_mbps != 0 ? "" : " (the driver reports none)");
  else if (!daemon && min >= 10'000)
    std::printf(
        "  port %s: warning: congestion.%s %u with the port's speed as the maximum: on a port "
        "of %u Mb/s or slower it is lowered to the speed and congestion control never slows a "
        "QP (roced warns at start)\n",
        pc.name.c_str(), key, min, min);
}

// Selective repeat has no loss response of its own (go-back-N shrinks its window after a
// loss): with no congestion algorithm on the port, a QP running it keeps its window (up to
// transport's 4 MiB) in flight through losses, and at a queue that drops rather than marks it
// holds the queue full and starves the QPs beside it (review 22: roce-incast --sr --cc none,
// one sender 6.5 of 9 Gb/s, Jain 0.228 against go-back-N's 0.531; with 2 senders one got
// nothing for 19 ms, its copies dropped at the full queue).
void warn_sr_without_cc(const ctl::ApplianceConfig& cfg, const ctl::PortConfig& pc, bool daemon) {
  if (!cfg.transport.selective_repeat || pc.congestion.algorithm != engine::cc::Algorithm::kNone)
    return;
  std::printf(
      "%sport %s: %sselective repeat with congestion none: its QPs do not slow down for "
      "losses, and where a queue drops rather than marks they can keep it full and starve "
      "other QPs (congestion.algorithm: dcqcn%s; docs/loss-recovery.md)\n",
      daemon ? "roced: warning: " : "  ", pc.name.c_str(), daemon ? "" : "warning: ",
      cfg.transport.sr_bdp_cap == 0
          ? ", or transport.sr_bdp_cap: the fabric's bandwidth-delay product in bytes, or auto"
          : "");
}

// A hosted service that asks for selective repeat (its `selective_repeat: true`, or
// --selective-repeat in its args) on an appliance that does not allow it gets go-back-N: say
// so (--check's layout, or the daemon's).
void warn_sr_services(const ctl::ApplianceConfig& cfg, bool daemon) {
  if (cfg.transport.selective_repeat) return;
  for (std::size_t i = 0; i < cfg.services.size(); ++i) {
    const ctl::ServiceConfig& sc = cfg.services[i];
    bool asks = false;
    for (const std::string& a : sc.args) asks = asks || a == "--selective-repeat";
    if (sc.has("selective_repeat")) asks = sc.option_bool("selective_repeat", false);
    if (asks)
      std::printf(
          "%sservices[%zu] (%s) asks for selective repeat, but transport.selective_repeat is "
          "false: its connections run go-back-N\n",
          daemon ? "roced: warning: " : "  warning: ", i, sc.kind.c_str());
  }
}

// What --check resolves for a port's congestion control and loss recovery, each value with its
// unit and ConnectX's name where it has one: what an operator diffs against `mlxconfig q`.
void print_transport(const ctl::ApplianceConfig& cfg, const ctl::PortConfig& pc) {
  const engine::cc::CongestionConfig& k = pc.congestion;
  const char* ecn = k.ecn == engine::cc::Ecn::kOn    ? "on (ecn: true)"
                    : k.ecn == engine::cc::Ecn::kOff ? "off (ecn: false)"
                    : k.ect_on()                     ? "on (with the algorithm)"
                                                     : "off (no algorithm)";
  std::printf(
      "  port %s: congestion %s, ECT(0) %s; CNPs %s, min_time_between_cnps %u us, "
      "cnp_dscp %u\n",
      pc.name.c_str(), engine::cc::to_string(k.algorithm), ecn, k.cnp ? "on" : "off",
      k.cnp_interval_ns / 1000, k.cnp_dscp);
  if (!k.ect_on())
    std::printf(
        "  port %s: Not-ECT: a switch that marks ECN (WRED/ECN) drops this port's packets where "
        "it would mark ECT ones%s\n",
        pc.name.c_str(),
        k.algorithm == engine::cc::Algorithm::kNone ? " (algorithm: dcqcn sends ECT(0))" : "");
  if (k.algorithm == engine::cc::Algorithm::kNone && k.ect_on())
    std::printf(
        "  port %s: warning: ecn: true with algorithm: none: every packet is sent "
        "ECN-capable, but CNPs do not slow it down (docs/congestion.md)\n",
        pc.name.c_str());
  warn_unused_congestion(pc, false);
  warn_min_rate(pc, k, false);
  if (k.algorithm == engine::cc::Algorithm::kDcqcn) {
    const engine::cc::DcqcnParams& d = k.dcqcn;
    std::printf(
        "    dcqcn: rpg_max_rate %u Mb/s%s, rpg_min_rate %u Mb/s, rpg_ai_rate %u Mb/s, "
        "rpg_hai_rate %u Mb/s, dce_tcp_g %u (gain %u/1024), initial_alpha_value %u, "
        "dce_tcp_rtt %u us, rpg_time_reset %u us, rpg_byte_reset %llu bytes, "
        "rpg_threshold %u, rate_reduce_monitor_period %u us (%s), rpg_min_dec_fac %u %%, "
        "rpg_gd %u, rate_to_set_on_first_cnp %u Mb/s%s, clamp_tgt_rate %s, "
        "clamp_tgt_rate_after_time_inc %s\n",
        d.max_rate_mbps, d.max_rate_mbps == 0 ? " (the link's speed)" : "", d.min_rate_mbps,
        d.ai_rate_mbps, d.hai_rate_mbps, d.alpha_g, d.alpha_g, d.initial_alpha,
        d.alpha_update_period_us, d.rate_increase_period_us,
        static_cast<unsigned long long>(d.byte_counter), d.threshold,
        d.rate_reduce_monitor_period_us,
        d.defer_cut ? "CNPs within it cut at its end" : "CNPs within it feed alpha only",
        d.min_dec_factor_pct, d.gd_log2, d.first_cnp_rate_mbps,
        d.first_cnp_rate_mbps == 0 ? " (cut by alpha)" : "",
        d.clamp_target ? "true" : "false",  // as the configuration takes them (not mlx5's 1/0)
        d.clamp_target_after_time_inc ? "true" : "false");
  } else if (k.algorithm == engine::cc::Algorithm::kDelay) {
    const engine::cc::DelayParams& y = k.delay;
    std::printf(
        "    delay: target %u us%s, max_rate %u Mb/s%s, min_rate %u Mb/s, ai_rate %u Mb/s, "
        "beta %u %%, max_decrease %u %% (also per CNP)\n",
        y.target_us, y.target_us == 0 ? " (2 x the smallest round trip)" : "", y.max_rate_mbps,
        y.max_rate_mbps == 0 ? " (the link's speed)" : "", y.min_rate_mbps, y.ai_rate_mbps,
        y.beta_pct, y.max_decrease_pct);
  }
  std::printf("  port %s: loss recovery go-back-N%s", pc.name.c_str(),
              cfg.transport.selective_repeat
                  ? "; selective repeat allowed for the connections whose applications offer "
                    "and accept it in ECE (docs/configuration.md \"transport\")"
                  : "; selective repeat not allowed (transport.selective_repeat: false)");
  if (!cfg.transport.selective_repeat)
    std::printf("\n");
  else if (cfg.transport.sr_bdp_cap == 0)
    std::printf(", bandwidth-delay cap off\n");
  else if (cfg.transport.sr_bdp_cap == engine::EngineConfig::kSrBdpAuto)
    std::printf(", bandwidth-delay cap auto (the port's speed x the smallest round trip)\n");
  else
    std::printf(", bandwidth-delay cap %llu bytes\n",
                static_cast<unsigned long long>(cfg.transport.sr_bdp_cap));
  warn_sr_without_cc(cfg, pc, false);
}

// Adds every counter of `b` to `a`.
void add(engine::Stats& a, const engine::Stats& b) {
  for (std::size_t i = 0; i < a.c.size(); ++i) a.c[i] += b.c[i];
  for (std::size_t i = 0; i < a.verdicts.size(); ++i) a.verdicts[i] += b.verdicts[i];
}

// Copies the raw counters of every port into `out` (sized and named once): plain copies, no
// allocation, cheap enough for the poll loop.
void collect(std::vector<PortRuntime>& ports, std::vector<apps::PortCounters>& out,
             const attach::AttachServer* att) {
  for (std::size_t i = 0; i < ports.size(); ++i) {
    PortRuntime& p = ports[i];
    apps::PortCounters& c = out[i];
    c.engine = p.eng().stats();
    c.qps = p.eng().qp_count();
    c.mrs = p.eng().mr_count();
    // The QPs held below their maximum rate, every lcore's, the lowest rates kept.
    c.cc_on = p.eng().config().congestion.algorithm != engine::cc::Algorithm::kNone;
    std::array<engine::Engine::QpRate, apps::kQpRateSeries> rates{};
    c.cc_limited_qps = p.eng().cc_rates(rates);
    c.cc_rates_n = 0;
    const auto keep = [&c](std::span<const engine::Engine::QpRate> rs) {
      for (const auto& r : rs) {
        std::size_t j = c.cc_rates_n;
        if (j == c.cc_rates.size()) {
          if (c.cc_rates[j - 1].rate_mbps <= r.rate_mbps) continue;
          --j;
        } else {
          ++c.cc_rates_n;
        }
        for (; j > 0 && c.cc_rates[j - 1].rate_mbps > r.rate_mbps; --j)
          c.cc_rates[j] = c.cc_rates[j - 1];
        c.cc_rates[j] = {r.qpn, r.rate_mbps};
      }
    };
    keep(std::span(rates).first(std::min(rates.size(), c.cc_limited_qps)));
    // The QPs running selective repeat, every lcore's; the first kQpRateSeries QPNs kept.
    c.sr_qps = p.eng().sr_qps(c.sr_qpns);
    c.sr_qpns_n = std::min<std::size_t>(c.sr_qps, c.sr_qpns.size());
    for (unsigned l = 1; l < p.rt->lcores(); ++l) {
      PortRuntime::Snapshot& s = *p.snaps[l];
      add(c.engine, s.stats);
      c.qps += s.qps;
      c.mrs += s.mrs;
      c.cc_limited_qps += s.limited;
      keep(std::span(s.rates).first(s.rates_n));
      c.sr_qps += s.sr_qps;
      for (std::size_t k = 0; k < std::min(s.sr_qps, s.sr_qpns.size()); ++k)
        if (c.sr_qpns_n < c.sr_qpns.size()) c.sr_qpns[c.sr_qpns_n++] = s.sr_qpns[k];
      // Ask lcore l for a fresh copy, read next time (one request in flight at a time).
      if (!s.asked.exchange(true))
        p.rt->loop(l).post([&s, e = &p.rt->eng(l), d = p.rt->device(l)] {
          s.stats = e->stats();
          if (d) s.dev = d->counters();
          s.qps = e->qp_count();
          s.mrs = e->mr_count();
          s.limited = e->cc_rates(s.rates);
          s.rates_n = std::min(s.limited, s.rates.size());
          s.sr_qps = e->sr_qps(s.sr_qpns);
          s.asked.store(false, std::memory_order_release);
        });
    }
    if (att) {
      const attach::AttachCounts a = att->counts(i);
      c.attach_on = true;
      c.attach_clients = a.clients;
      c.attach_clients_total = a.clients_total;
      c.attach_clients_lost = a.clients_lost;
      c.attach_qps = a.qps;
      c.attach_mrs = a.mrs;
      c.attach_cqs = a.cqs;
      c.attach_memory_bytes = a.memory_bytes;
      c.attach_bad_requests = a.bad_requests;
      c.attach_alloc_failures = a.alloc_failures;
      c.attach_refused_wrs = a.refused_wrs;
      c.attach_broken_rings = a.broken_rings;
      c.attach_refused = a.refused;
      c.attach_silent = a.silent;
      c.attach_out_of_fds = a.out_of_fds;
      c.attach_cm_refused = a.cm_refused;
    }
    if (p.rt->offload().on()) {
      c.fpga_on = true;
      c.fpga = p.rt->device_counters();
      for (unsigned l = 1; l < p.rt->lcores(); ++l)
        for (std::size_t k = 0; k < c.fpga.size(); ++k) c.fpga[k] += p.snaps[l]->dev[k];
    }
    c.port = p.rt->dev().stats();
    c.neighbour = p.loop().neighbour().stats();
    if (const FaultyLink* f = p.loop().faults()) {
      c.faults_on = true;
      c.faults = f->stats();
    }
  }
}

// A hosted service (runtime/service.h) and what roced lends it.
struct Hosted {
  const runtime::ServiceKind* kind = nullptr;
  std::size_t port = 0;  ///< index in the ports
  std::unique_ptr<runtime::ServiceEnv> env;
  std::unique_ptr<runtime::HostedService> svc;
  bool stopped = false;  ///< stop() was called (a failed service is stopped at once)
};

// A service that failed stops at once: its listeners close, so that requests to its ports are
// refused rather than left to the CM's timeouts, and its connections and memory go back.
void stop_failed(Hosted& h) {
  if (h.stopped) return;
  h.stopped = true;
  try {
    h.svc->stop();
  } catch (const std::exception& e) {
    std::printf("roced: %s: stopping it failed too: %s\n", h.env->name().c_str(), e.what());
  }
}

int run(const ctl::ApplianceConfig& cfg) {
  std::vector<std::string> eal = cfg.eal_args;
  // The lcores on the CPUs this process may use (a container's cpuset may not hold them).
  std::string placed;
  eal.push_back(port::lcores_arg(cfg.lcores, placed));
  if (!placed.empty()) std::printf("roced: %s\n", placed.c_str());
  if (!cfg.counters.telemetry) eal.push_back("--no-telemetry");
  for (const auto& p : cfg.ports)
    if (p.device.rfind("net_", 0) == 0) try {
        // Ring slots and buffers sized for the port's MTU (net_af_packet, net_memif).
        eal.push_back(port::vdev_arg(p.device, p.devargs, p.mtu));
      } catch (const std::invalid_argument& e) {
        throw std::runtime_error("port " + p.name + ": " + e.what());
      }
  port::eal_init(eal);

  const unsigned nl = static_cast<unsigned>(cfg.lcores.size());
  std::vector<PortRuntime> ports;
  ports.reserve(cfg.ports.size());
  for (const auto& pc : cfg.ports) {
    PortRuntime& p = ports.emplace_back();
    p.cfg = pc;
    p.rt = std::make_unique<runtime::Port>(port_options(cfg, pc));
    for (unsigned l = 0; l < nl; ++l) p.snaps.push_back(std::make_unique<PortRuntime::Snapshot>());
  }
  // Client attachment: its pollers join the loops before they run on their lcores.
  std::unique_ptr<attach::AttachServer> att;
  if (!cfg.attach.socket.empty()) {
    attach::AttachConfig ac;
    ac.socket = cfg.attach.socket;
    ac.mode = cfg.attach.mode;
    ac.group = cfg.attach.group;
    ac.max_clients = cfg.attach.max_clients;
    ac.max_clients_per_uid = cfg.attach.max_clients_per_uid;
    ac.hello_timeout_ms = cfg.attach.hello_timeout_ms;
    ac.resolve_timeout_ms = cfg.attach.resolve_timeout_ms;
    ac.cm_backlog = cfg.attach.cm_backlog;
    ac.privileged_uids = cfg.attach.privileged_uids;
    ac.handle_limit = cfg.attach.test_handle_limit;
    ac.quotas.max_qps = cfg.attach.max_qps;
    ac.quotas.max_mrs = cfg.attach.max_mrs;
    ac.quotas.max_cqs = cfg.attach.max_cqs;
    ac.quotas.max_srqs = cfg.attach.max_srqs;
    ac.quotas.max_memory = cfg.attach.max_memory;
    ac.quotas.max_regions = cfg.attach.max_regions;
    ac.quotas.max_qp_wr = cfg.attach.max_qp_wr;
    ac.quotas.max_srq_wr = cfg.attach.max_srq_wr;
    ac.quotas.max_cqe = cfg.attach.max_cqe;
    ac.quotas.max_inline_data = cfg.attach.max_inline_data;
    ac.quotas.max_fds = cfg.attach.max_fds;
    ac.quotas.max_cm_conns =
        cfg.attach.max_cm_conns != 0 ? cfg.attach.max_cm_conns : cfg.attach.max_qps;
    ac.quotas.max_listens = cfg.attach.max_listens;
    std::vector<attach::AttachPort> aps;
    for (auto& p : ports) {
      attach::AttachPort ap{p.cfg.name, p.cfg.mac, p.cfg.ipv4, {}};
      for (unsigned l = 0; l < nl; ++l) ap.loops.push_back(&p.rt->loop(l));
      aps.push_back(std::move(ap));
    }
    att = std::make_unique<attach::AttachServer>(ac, std::move(aps));
  }
  // Worker lcores: each runs its loop of every port.
  const port::IdlePolicy idle_policy{cfg.poll.idle_after_polls, cfg.poll.idle_sleep_us};
  std::atomic<bool> stop_workers{false};
  for (unsigned l = 1; l < nl; ++l) {
    std::vector<port::PollLoop*> mine;
    for (auto& p : ports) mine.push_back(&p.rt->loop(l));
    port::launch_loops(cfg.lcores[l], mine, stop_workers, idle_policy);
  }

  apps::Metrics metrics;
  std::vector<apps::PortCounters> counters(ports.size());
  for (std::size_t i = 0; i < ports.size(); ++i) counters[i].name = ports[i].cfg.name;
  collect(ports, counters, att.get());
  metrics.publish(counters);
  if (att)
    metrics.clients = [a = att.get()] {
      std::vector<apps::ClientSample> out;
      for (const attach::ClientInfo& c : a->clients())
        out.push_back({c.id, c.pid, c.uid, c.port, c.lcore, c.qps, c.mrs, c.cqs, c.memory_bytes});
      return out;
    };
  std::unique_ptr<apps::MetricsServer> server;
  if (!cfg.counters.prometheus.empty())
    server = std::make_unique<apps::MetricsServer>(metrics, cfg.name, cfg.counters.prometheus);
  if (cfg.counters.telemetry) apps::register_telemetry(&metrics);

  std::string workers;
  for (unsigned l = 1; l < nl; ++l) workers += (l > 1 ? ", " : "") + std::to_string(cfg.lcores[l]);
  if (idle_policy.on())
    std::printf("roced: idle mode: after %u empty polls, %u us sleeps between polls\n",
                idle_policy.after_polls, idle_policy.sleep_us);
  std::printf("roced: %s up on lcore %u%s%s%s\n", cfg.name.c_str(), cfg.lcores.front(),
              nl > 1 ? " (workers: " : "", workers.c_str(),
              nl > 1 ? "; frames steered to the lcore of their QP)" : "");
  for (auto& p : ports)
    std::printf("  port %s: %s %s %s/%u mtu %u (RoCE path MTU %u)%s%s\n", p.cfg.name.c_str(),
                p.cfg.device.c_str(), ctl::to_string(p.cfg.mac).c_str(),
                ctl::to_string(p.cfg.ipv4).c_str(), p.cfg.ipv4_prefix, p.cfg.mtu,
                engine::mtu_bytes(p.eng().config().max_mtu),
                p.cfg.vlan ? (" vlan " + std::to_string(*p.cfg.vlan)).c_str() : "",
                p.cfg.fault.any() ? " [fault injection on]" : "");
  for (auto& p : ports)
    if (p.rt->offload().on())
      std::printf("  port %s: FPGA offload '%s' on a device model (%u MHz x %u B/clock, %u G)%s\n",
                  p.cfg.name.c_str(), p.cfg.offload.mode.c_str(), p.cfg.offload.clock_mhz,
                  p.cfg.offload.bytes_per_cycle, p.cfg.offload.line_gbps,
                  p.rt->card() ? "; hosted WRITE/READ tests' QPs on the card" : "");
  for (auto& p : ports) {
    const engine::cc::CongestionConfig& k = p.eng().config().congestion;
    warn_unused_congestion(p.cfg, true);
    warn_min_rate(p.cfg, k, true);
    if (k.algorithm != engine::cc::Algorithm::kNone) {
      // The running algorithm's own maximum (delay's is not dcqcn's).
      const bool dcqcn = k.algorithm == engine::cc::Algorithm::kDcqcn;
      const std::uint32_t max = dcqcn ? k.dcqcn.max_rate_mbps : k.delay.max_rate_mbps;
      std::printf("  port %s: congestion %s, ECT(0) %s, rate limit %u Mb/s (%s)\n",
                  p.cfg.name.c_str(), engine::cc::to_string(k.algorithm), k.ect_on() ? "on" : "off",
                  k.max_rate(max),
                  max != 0                ? (dcqcn ? "rpg_max_rate_mbps" : "delay.max_rate_mbps")
                  : k.line_rate_mbps != 0 ? "the link's speed"
                                          : "the driver reports no speed");
    } else if (k.ect_on()) {
      // ECT claims a sender that reacts to CE marks (RFC 3168); this one ignores the CNPs.
      std::printf(
          "roced: warning: port %s: congestion ecn: true with algorithm: none: every packet "
          "is sent ECN-capable, but CNPs do not slow it down (docs/congestion.md)\n",
          p.cfg.name.c_str());
    } else {
      // The default: Not-ECT, as rxe. A fabric of marking switches (WRED/ECN, as ConnectX
      // fabrics are set up) drops such packets where it would mark ECT ones (review 20 #10).
      std::printf(
          "  port %s: congestion none, ECT off: a switch that marks ECN drops these packets "
          "instead (congestion.algorithm: dcqcn on such a fabric; docs/congestion.md)\n",
          p.cfg.name.c_str());
    }
  }
  for (const ctl::PortConfig& pc : cfg.ports) warn_sr_without_cc(cfg, pc, true);
  warn_sr_services(cfg, true);
  if (cfg.transport.selective_repeat)
    std::printf(
        "  selective repeat: allowed, for the connections whose applications offer and "
        "accept it (roce-ctl sr lists them)\n");
  if (server) std::printf("  counters: %s\n", server->endpoint().c_str());
  if (cfg.counters.telemetry) std::printf("  telemetry: /roce/counters (dpdk-telemetry.py)\n");
  if (att) std::printf("  attach: %s (mode %04o)\n", att->socket_path().c_str(), cfg.attach.mode);
  std::fflush(stdout);

  // The hosted services, in the configuration's order: made by their kind (the registry), on
  // loop 0 of their port, polled from this loop.
  std::vector<Hosted> hosted;
  hosted.reserve(cfg.services.size());
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // SIGHUP: the hosted services read their files again (its default action would end the
  // daemon, which an administrator's `kill -HUP` or `systemctl reload` never means).
  std::signal(SIGHUP, on_hangup);
  std::signal(SIGUSR1, on_status);
  std::uint64_t next_publish = 0;
  // Every running service once; from a blocking service's background, the non-blocking ones.
  const auto poll_services = [&](bool from_background) {
    std::size_t work = 0;
    for (Hosted& h : hosted) {
      if (h.svc->state() != runtime::ServiceState::kRunning) continue;
      if (from_background && h.kind->blocking) continue;
      try {
        work += h.svc->poll() ? 1 : 0;
      } catch (const std::exception& e) {
        h.svc->set_state(runtime::ServiceState::kFailed, e.what());
        std::printf("roced: %s failed: %s\n", h.env->name().c_str(), e.what());
        std::fflush(stdout);
        stop_failed(h);
      }
    }
    return work;
  };
  std::vector<runtime::ServiceCounter> service_counters;
  // Work besides the ports' poll loops: counters, signals.
  const auto housekeeping = [&](std::uint64_t now) {
    if (g_hangup != 0) {
      g_hangup = 0;
      std::size_t n = 0;
      for (Hosted& h : hosted) {
        if (h.svc->state() != runtime::ServiceState::kRunning) continue;
        const std::string line = h.svc->reload();
        if (line.empty()) continue;
        ++n;
        std::printf("roced: SIGHUP: %s: %s\n", h.env->name().c_str(), line.c_str());
      }
      if (n == 0) std::printf("roced: SIGHUP: no hosted service reads a file again; going on\n");
      std::fflush(stdout);
    }
    if (g_status) {  // SIGUSR1 (only root or roced's user may send it): what each service says
      g_status = 0;
      for (const Hosted& h : hosted)
        if (h.svc->state() == runtime::ServiceState::kRunning)
          if (const std::string st = h.svc->status(); !st.empty())
            std::printf("roced: %s:\n%s", h.env->name().c_str(), st.c_str());
      std::fflush(stdout);
    }
    if (now >= next_publish) {
      // A memif client turned away by a server that had not started its port yet dials again
      // (DpdkPort::link_up_or_redial). One lcore only: a dial stops and starts the device,
      // which a worker lcore's burst must not meet.
      if (nl == 1)
        for (auto& p : ports) {
          port::DpdkPort& dev = p.rt->dev();
          const std::uint32_t dials = dev.redials();
          dev.link_up_or_redial();
          if (dev.redials() != dials) {
            std::printf("roced: port %s: memif link still down: dialled the server again\n",
                        p.cfg.name.c_str());
            std::fflush(stdout);
          }
        }
      collect(ports, counters, att.get());
      for (auto& c : counters) c.services.clear();
      std::vector<std::uint64_t> running(ports.size()), failed(ports.size());
      for (const Hosted& h : hosted) {
        const runtime::ServiceState st = h.svc->state();
        running[h.port] += st == runtime::ServiceState::kRunning;
        failed[h.port] += st == runtime::ServiceState::kFailed;
        if (st != runtime::ServiceState::kRunning) continue;
        service_counters.clear();
        h.svc->counters(service_counters);
        for (auto& sc : service_counters)
          counters[h.port].services.push_back(
              {std::move(sc.name), std::move(sc.help), sc.value, sc.gauge});
      }
      for (const Hosted& h : hosted)
        if (running[h.port] + failed[h.port] != 0) {
          counters[h.port].services.push_back({"services_running_now",
                                               "hosted services running on the port",
                                               running[h.port], true});
          counters[h.port].services.push_back(
              {"services_failed_now", "hosted services stopped by an error", failed[h.port], true});
          running[h.port] = failed[h.port] = 0;  // once per port
        }
      metrics.publish(counters);
      next_publish = now + 100'000'000;
    }
  };
  const runtime::ServiceRegistry& registry = runtime::ServiceRegistry::instance();
  const wire::Ipv4Addr mgmt = ctl::parse_ipv4(apps::split_host_port(cfg.control.listen).first)
                                  .value_or(wire::Ipv4Addr{0x7F000001});
  for (std::size_t i = 0; i < cfg.services.size(); ++i) {
    const ctl::ServiceConfig& sc = cfg.services[i];
    Hosted& h = hosted.emplace_back();
    h.kind = registry.find(sc.kind);  // the reader checked the name against the registry
    for (std::size_t p = 0; p < ports.size(); ++p)
      if (ports[p].cfg.name == sc.port) h.port = p;
    PortRuntime& home = ports[h.port];
    h.env = std::make_unique<runtime::ServiceEnv>(runtime::ServiceEnv{
        .config = sc,
        .index = i,
        .port_name = home.cfg.name,
        .engine = home.eng(),
        .loop = home.loop(),
        .mac = home.cfg.mac,
        .ipv4 = home.cfg.ipv4,
        .management = mgmt,
        .cm_connections = cfg.limits.cm_connections,
        // The rest of the appliance while a blocking service runs an exchange on its port.
        .background =
            [&, self = h.port] {
              for (std::size_t k = 0; k < ports.size(); ++k)
                if (k != self) ports[k].loop().poll_once();
              housekeeping(port::now_ns());
              poll_services(true);
              if (g_signal != 0) throw runtime::HostShutdown{};
            },
        .open_card = nullptr,
    });
    if (home.rt->card()) h.env->open_card = [&home] { return home.rt->open_card(home.cfg.name); };
    try {
      if (h.kind->check) h.kind->check(sc);
      h.svc = h.kind->make(*h.env);
      h.svc->start();
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(runtime::service_error(i, sc.kind, e.what()));
    }
    h.svc->set_state(runtime::ServiceState::kRunning);
  }
  std::fflush(stdout);
  port::IdleBackoff idle(idle_policy);
  while (g_signal == 0) {
    std::size_t moved = 0;
    for (auto& p : ports) moved += p.loop().poll_once();
    try {
      moved += poll_services(false);
    } catch (const runtime::HostShutdown&) {
      break;  // a blocking service let it through: the signal ends the loop anyway
    }
    idle.after_poll(moved);
    housekeeping(port::now_ns());
  }
  if (att) att->stop();  // no new requests; the workers still run what was posted
  for (Hosted& h : hosted) {
    if (!h.stopped) h.svc->stop();
    if (h.svc->state() == runtime::ServiceState::kFailed)
      std::printf("  %s failed: %s\n", h.env->name().c_str(), h.svc->state_reason().c_str());
    h.svc->set_state(runtime::ServiceState::kStopped);
    std::printf("%s", h.svc->report().c_str());
  }
  hosted.clear();
  stop_workers = true;
  for (unsigned l = 1; l < nl; ++l) rte_eal_wait_lcore(cfg.lcores[l]);
  server.reset();  // it lists the clients
  att.reset();     // every client's resources, released on this thread (no loop runs now)
  std::printf("roced: %s stopping (%s)\n", cfg.name.c_str(),
              g_signal == SIGINT ? "SIGINT" : "SIGTERM");
  for (auto& p : ports) {
    std::uint64_t steered = 0;
    for (unsigned l = 0; l < nl; ++l) steered += p.rt->loop(l).steer_stats().steered_out;
    if (nl > 1)
      std::printf("  port %s: %llu frames steered to another lcore\n", p.cfg.name.c_str(),
                  static_cast<unsigned long long>(steered));
  }
  for (auto& p : ports)
    std::printf("  port %s: rx %llu tx %llu frames, %llu ARP answered, %llu pings answered\n",
                p.cfg.name.c_str(), static_cast<unsigned long long>(p.rt->dev().stats().rx_frames),
                static_cast<unsigned long long>(p.rt->dev().stats().tx_frames),
                static_cast<unsigned long long>(p.loop().neighbour().stats().arp_requests_answered),
                static_cast<unsigned long long>(p.loop().neighbour().stats().icmp_echo_answered));
  for (auto& p : ports) {
    if (!p.rt->offload().on()) continue;
    std::array<std::uint64_t, fpga::kDevCounters> sum = p.rt->device_counters();
    for (unsigned l = 1; l < p.rt->lcores(); ++l)
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += p.rt->device(l)->counters()[i];
    std::printf("%s", fpga::format_nstats(sum, p.cfg.name).c_str());
  }
  std::fflush(stdout);
  server.reset();
  ports.clear();
  port::eal_cleanup();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that resets a management connection (metrics, MOUNT, out-of-band TCP) while roced
  // writes to it must cost an EPIPE, not the process (docs/security.md).
  std::signal(SIGPIPE, SIG_IGN);
  po::options_description desc(
      "Usage: roced --config FILE [options]\n\nThe RoCEv2 appliance daemon.\n\nOptions");
  std::string config, name, level, prometheus;
  desc.add_options()("help,h", "print this help")("version", "print the version")(
      "config,c", po::value(&config), "YAML configuration (see docs/configuration.md)")(
      "check", "validate the configuration, print it in short and exit")(
      "name", po::value(&name), "override the appliance name")(
      "log-level", po::value(&level), "override logging.level (error, warning, info, debug)")(
      "services", "list the kinds of service this roced can host, with their keys, and exit")(
      "prometheus", po::value(&prometheus),
      "override counters.prometheus (host:port, a port alone for the management address, or "
      "'off')")("no-telemetry", "do not register with DPDK telemetry");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "roced: " << e.what() << "\n(try --help)\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << '\n';
    return 0;
  }
  if (vm.count("version")) {
    std::cout << "roced 0.1.0\n";
    return 0;
  }
  if (vm.count("services")) {
    std::cout << runtime::ServiceRegistry::instance().describe();
    return 0;
  }
  if (config.empty()) {
    std::cerr << "roced: --config FILE is required\n(try --help)\n";
    return 2;
  }
  try {
    ctl::ApplianceConfig cfg =
        ctl::load_config(config, runtime::ServiceRegistry::instance().catalog());
    if (!name.empty()) cfg.name = name;
    if (!level.empty()) {
      if (level != "error" && level != "warning" && level != "info" && level != "debug")
        throw ctl::ConfigError("--log-level must be one of error, warning, info, debug");
      cfg.logging.level = level;
    }
    if (!prometheus.empty()) cfg.counters.prometheus = prometheus == "off" ? "" : prometheus;
    // ROCE_OFFLOAD: the offload mode of ports that set none (a test suite run with the offload
    // on, docs/fpga.md).
    std::optional<std::string> env_offload;
    try {
      env_offload = runtime::env_offload();
    } catch (const std::invalid_argument& e) {
      throw ctl::ConfigError(e.what());
    }
    if (env_offload) {
      const std::string& m = *env_offload;
      for (auto& pc : cfg.ports) {
        if (pc.offload.mode != "none") continue;
        if (m == "datapath" && cfg.lcores.size() > 1)
          throw ctl::ConfigError("ROCE_OFFLOAD=datapath: port " + pc.name + " runs on " +
                                 std::to_string(cfg.lcores.size()) + " lcores; the card needs one");
        pc.offload.mode = m;
      }
    }
    if (vm.count("no-telemetry")) cfg.counters.telemetry = false;
    if (!cfg.counters.prometheus.empty()) {
      // A port alone listens on the management address (control.listen's).
      cfg.counters.prometheus = apps::resolve_listen(
          cfg.counters.prometheus, apps::split_host_port(cfg.control.listen).first);
      apps::split_host_port(cfg.counters.prometheus);
    }
    if (vm.count("check")) {
      // What the daemon would refuse at start, refused here too.
      runtime::ServiceRegistry::instance().check(cfg);
      if (!cfg.attach.group.empty() && ::getgrnam(cfg.attach.group.c_str()) == nullptr)
        throw ctl::ConfigError("attach.group: no group '" + cfg.attach.group + "'");
      std::printf("%s: OK: appliance %s, %zu port(s), lcores", config.c_str(), cfg.name.c_str(),
                  cfg.ports.size());
      for (unsigned l : cfg.lcores) std::printf(" %u", l);
      std::printf("\n");
      for (const ctl::PortConfig& pc : cfg.ports) print_transport(cfg, pc);
      warn_sr_services(cfg, false);
      for (std::size_t i = 0; i < cfg.services.size(); ++i) {
        const ctl::ServiceConfig& s = cfg.services[i];
        std::printf("  services[%zu] %s on %s, listen_port %u at %s\n", i, s.kind.c_str(),
                    s.port.c_str(), s.listen_port, ctl::to_string(s.listen_address).c_str());
      }
      return 0;
    }
    return run(cfg);
  } catch (const std::exception& e) {
    std::cerr << "roced: " << e.what() << '\n';
    return 1;
  }
}
