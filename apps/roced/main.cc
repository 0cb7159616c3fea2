/// @file
/// roced: the appliance daemon. Reads the YAML configuration, starts the DPDK EAL (no
/// hugepages needed), brings up every port with its engine and poll loop, answers ARP and
/// ping, publishes counters (Prometheus text endpoint and DPDK telemetry /roce/counters), and
/// shuts down cleanly on SIGINT or SIGTERM.
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

#include "apps/naa/naa_service.h"
#include "apps/nfs/nfs_service.h"
#include "apps/perf/cli.h"
#include "apps/roced/metrics.h"
#include "apps/roced/metrics_http.h"
#include "apps/roced/services.h"
#include "controlplane/address.h"
#include "controlplane/attach/attach_server.h"
#include "controlplane/config.h"
#include "controlplane/tcp.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/pmd_frames.h"
#include "dataplane/port/poll_loop.h"
#include "fpga/host/card_context.h"
#include "fpga/model/datapath_offload.h"
#include "fpga/model/device.h"

namespace po = boost::program_options;
using namespace roce;

namespace {

struct Shutdown {};  // thrown out of a running service when a signal arrives

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

// The RoCE path MTU a link MTU allows: the largest of 256..4096 not above MTU - 96 (rdma_cm's
// iboe_get_mtu: GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4).
engine::Mtu path_mtu_for(std::uint16_t mtu) {
  const int room = mtu - 96;
  engine::Mtu m = engine::Mtu::k256;
  for (auto c : {engine::Mtu::k512, engine::Mtu::k1024, engine::Mtu::k2048, engine::Mtu::k4096})
    if (static_cast<int>(engine::mtu_bytes(c)) <= room) m = c;
  return m;
}

// A port: one RX/TX queue, engine and poll loop per lcore. Loop 0 runs on the main lcore
// (with the neighbour responder, the hosted services and the counters); the others on workers.
struct PortRuntime {
  ctl::PortConfig cfg;
  std::unique_ptr<port::DpdkPort> dev;
  std::vector<std::unique_ptr<engine::Engine>> engines;
  std::vector<std::unique_ptr<port::PollLoop>> loops;
  /// The FPGA offload's device model of each loop (`offload:`; fpga/model), when configured.
  std::vector<std::unique_ptr<fpga::DeviceModel>> devices;
  /// `offload: datapath`: the card behind devices[0] (the stream stages), on the one lcore.
  std::unique_ptr<fpga::DatapathOffload> card;
  /// The device's counters: the card's, or the stream stages' of lcore 0.
  std::array<std::uint64_t, fpga::kDevCounters> device_counters() {
    return card ? card->counters() : devices[0]->counters();
  }
  // What the worker lcores last reported (they copy it on request: no shared counters).
  struct Snapshot {
    engine::Stats stats;
    std::size_t qps = 0, mrs = 0;
    std::array<std::uint64_t, fpga::kDevCounters> dev{};
    std::atomic<bool> asked{false};
  };
  std::vector<std::unique_ptr<Snapshot>> snaps;
  engine::Engine& eng() { return *engines[0]; }
  port::PollLoop& loop() { return *loops[0]; }
};

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
    for (std::size_t l = 1; l < p.engines.size(); ++l) {
      PortRuntime::Snapshot& s = *p.snaps[l];
      add(c.engine, s.stats);
      c.qps += s.qps;
      c.mrs += s.mrs;
      // Ask lcore l for a fresh copy, read next time (one request in flight at a time).
      if (!s.asked.exchange(true))
        p.loops[l]->post(
            [&s, e = p.engines[l].get(), d = p.devices.empty() ? nullptr : p.devices[l].get()] {
              s.stats = e->stats();
              if (d) s.dev = d->counters();
              s.qps = e->qp_count();
              s.mrs = e->mr_count();
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
    if (!p.devices.empty()) {
      c.fpga_on = true;
      c.fpga = p.device_counters();
      for (std::size_t l = 1; l < p.devices.size(); ++l)
        for (std::size_t k = 0; k < c.fpga.size(); ++k) c.fpga[k] += p.snaps[l]->dev[k];
    }
    c.port = p.dev->stats();
    c.neighbour = p.loop().neighbour().stats();
    if (const FaultyLink* f = p.loop().faults()) {
      c.faults_on = true;
      c.faults = f->stats();
    }
  }
}

// The accelerator RPC services (`test: naa`, apps/naa/naa_service.h), on lcore 0 of their port.
std::vector<std::unique_ptr<naa::NaaService>> open_naa_services(const ctl::ApplianceConfig& cfg,
                                                                std::vector<PortRuntime>& ports) {
  std::vector<std::unique_ptr<naa::NaaService>> out;
  for (const auto& sc : cfg.services) {
    if (sc.test != "naa") continue;
    for (auto& p : ports) {
      if (p.cfg.name != sc.port) continue;
      out.push_back(std::make_unique<naa::NaaService>(sc, p.eng(), p.loop(), p.cfg.ipv4,
                                                      cfg.limits.cm_connections));
      std::printf("  service naa: rdma_cm port %u on port %s\n", sc.listen_port, sc.port.c_str());
    }
  }
  std::fflush(stdout);
  return out;
}

// The NFSv3 services (`test: nfs`, apps/nfs/nfs_service.h), on lcore 0 of their port.
std::vector<std::unique_ptr<nfs::HostedNfsService>> open_nfs_services(
    const ctl::ApplianceConfig& cfg, std::vector<PortRuntime>& ports) {
  std::vector<std::unique_ptr<nfs::HostedNfsService>> out;
  for (const auto& sc : cfg.services) {
    if (sc.test != "nfs") continue;
    for (auto& p : ports) {
      if (p.cfg.name != sc.port) continue;
      out.push_back(std::make_unique<nfs::HostedNfsService>(sc, p.eng(), p.loop(), p.cfg.ipv4,
                                                            cfg.limits.cm_connections));
      std::printf("  service nfs: rdma_cm port %u on port %s\n", sc.listen_port, sc.port.c_str());
    }
  }
  std::fflush(stdout);
  return out;
}

int run(const ctl::ApplianceConfig& cfg) {
  std::vector<std::string> eal = cfg.eal_args;
  std::string lcores;
  for (unsigned l : cfg.lcores) lcores += (lcores.empty() ? "" : ",") + std::to_string(l);
  eal.push_back("-l");
  eal.push_back(lcores);
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
    PortRuntime& rt = ports.emplace_back();
    rt.cfg = pc;
    engine::EngineConfig ec;
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
    ec.loss_window = cfg.transport.loss_window;
    ec.recovery_batch = cfg.transport.recovery_batch;
    ec.max_mtu = path_mtu_for(pc.mtu);
    port::PortSpec ps;
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
    ps.queues = static_cast<std::uint16_t>(nl);
    rt.dev = std::make_unique<port::DpdkPort>(ps);
    std::vector<port::PollLoop*> loops;
    for (unsigned l = 0; l < nl; ++l) {
      ec.lcore = l;
      rt.engines.push_back(std::make_unique<engine::Engine>(ec));
      rt.loops.push_back(std::make_unique<port::PollLoop>(
          *rt.dev, *rt.engines[l], pc.fault, FaultPolicy{}, static_cast<std::uint16_t>(l)));
      if (pc.offload.mode == "datapath") {
        // The card's stream stages as in `parse` mode, its transport behind them (one lcore:
        // the configuration says so).
        rt.devices.push_back(std::make_unique<fpga::DeviceModel>(
            fpga::device_config(fpga::OffloadMode::kParse, pc.offload.clock_mhz,
                                pc.offload.bytes_per_cycle, pc.offload.line_gbps)));
        fpga::DatapathCard::Config cc;
        cc.net = ec;
        rt.card = std::make_unique<fpga::DatapathOffload>(*rt.devices.back(), cc);
        rt.loops[l]->set_offload(rt.card.get());
      } else if (pc.offload.mode != "none") {
        rt.devices.push_back(std::make_unique<fpga::DeviceModel>(
            fpga::device_config(*fpga::parse_offload_mode(pc.offload.mode), pc.offload.clock_mhz,
                                pc.offload.bytes_per_cycle, pc.offload.line_gbps)));
        rt.loops[l]->set_offload(rt.devices.back().get());
      }
      rt.snaps.push_back(std::make_unique<PortRuntime::Snapshot>());
      loops.push_back(rt.loops[l].get());
    }
    if (nl > 1) port::connect_loops(loops);
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
    std::vector<attach::AttachPort> aps;
    for (auto& p : ports) {
      attach::AttachPort ap{p.cfg.name, p.cfg.mac, p.cfg.ipv4, {}};
      for (auto& l : p.loops) ap.loops.push_back(l.get());
      aps.push_back(std::move(ap));
    }
    att = std::make_unique<attach::AttachServer>(ac, std::move(aps));
  }
  // Worker lcores: each runs its loop of every port.
  const port::IdlePolicy idle_policy{cfg.poll.idle_after_polls, cfg.poll.idle_sleep_us};
  std::atomic<bool> stop_workers{false};
  for (unsigned l = 1; l < nl; ++l) {
    std::vector<port::PollLoop*> mine;
    for (auto& p : ports) mine.push_back(p.loops[l].get());
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
    if (!p.devices.empty())
      std::printf("  port %s: FPGA offload '%s' on a device model (%u MHz x %u B/clock, %u G)%s\n",
                  p.cfg.name.c_str(), p.cfg.offload.mode.c_str(), p.cfg.offload.clock_mhz,
                  p.cfg.offload.bytes_per_cycle, p.cfg.offload.line_gbps,
                  p.card ? "; hosted WRITE/READ tests' QPs on the card" : "");
  if (server) std::printf("  counters: %s\n", server->endpoint().c_str());
  if (cfg.counters.telemetry) std::printf("  telemetry: /roce/counters (dpdk-telemetry.py)\n");
  if (att) std::printf("  attach: %s (mode %04o)\n", att->socket_path().c_str(), cfg.attach.mode);
  std::fflush(stdout);

  appliance::ServiceHost services(cfg);
  std::vector<std::unique_ptr<naa::NaaService>> naas = open_naa_services(cfg, ports);
  std::vector<std::unique_ptr<nfs::HostedNfsService>> nfss = open_nfs_services(cfg, ports);
  // The port of each NFS service (open_nfs_services' order), for its counters.
  std::vector<std::size_t> nfs_port;
  for (const auto& sc : cfg.services)
    for (std::size_t i = 0; sc.test == "nfs" && i < ports.size(); ++i)
      if (ports[i].cfg.name == sc.port) nfs_port.push_back(i);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::uint64_t next_publish = 0, next_accept = 0;
  // Work besides the ports' poll loops: counters, signals.
  const auto housekeeping = [&](std::uint64_t now) {
    if (now >= next_publish) {
      collect(ports, counters, att.get());
      for (auto& c : counters) c.services.clear();
      for (std::size_t k = 0; k < nfss.size(); ++k)
        for (auto& kv : nfss[k]->stats()) counters[nfs_port[k]].services.push_back(std::move(kv));
      metrics.publish(counters);
      next_publish = now + 100'000'000;
    }
  };
  // One test against a client that has spoken; the other ports and the counters keep going.
  const auto run_test = [&](appliance::Service& svc, int fd) {
    PortRuntime& home = ports[svc.port_index];
    perf::Env env(home.eng(), home.loop(), home.cfg.ipv4, [&] {
      for (std::size_t i = 0; i < ports.size(); ++i)
        if (i != svc.port_index) ports[i].loop().poll_once();
      housekeeping(port::now_ns());
      for (auto& n : naas) n->step();
      for (auto& n : nfss) n->step();
      if (g_signal != 0) throw Shutdown{};
    });
    env.cm_connections = cfg.limits.cm_connections;
    if (home.card)
      env.open_card = [&home, &env] {
        fpga::CardContextOptions co;
        co.driver = &home.card->driver();
        co.port.name = home.cfg.name;
        co.port.mac = home.cfg.mac;
        co.port.ipv4 = env.ip;
        co.port.gid = env.gid;
        co.port.max_mtu = home.eng().config().max_mtu;
        return fpga::open_card_context(std::move(co));
      };
    std::printf("roced: service %s on port %s, TCP %u: a client connected\n", svc.cfg.test.c_str(),
                svc.cfg.port.c_str(), svc.cfg.listen_port);
    std::fflush(stdout);
    ++svc.runs;
    try {
      perf::Oob oob(env, fd, svc.inv.opts.timeout_s);
      perf::run(svc.inv, env, oob);
      std::printf("roced: service %s: done\n", svc.cfg.test.c_str());
    } catch (const perf::TestFailure& e) {
      ++svc.failures;
      std::printf("roced: service %s failed: %s\n", svc.cfg.test.c_str(), e.what());
    } catch (const Shutdown&) {
      std::printf("roced: service %s abandoned\n", svc.cfg.test.c_str());
    }
    std::fflush(stdout);
  };
  port::IdleBackoff idle(idle_policy);
  while (g_signal == 0) {
    std::size_t moved = 0;
    for (auto& p : ports) moved += p.loop().poll_once();
    for (auto& n : naas) n->step();
    for (auto& n : nfss) n->step();
    idle.after_poll(moved);
    const std::uint64_t now = port::now_ns();
    housekeeping(now);
    if (services.empty() || now < next_accept) continue;
    next_accept = now + 1'000'000;  // look for a tool's client every millisecond
    services.poll(now, run_test);
  }
  if (att) att->stop();  // no new requests; the workers still run what was posted
  for (auto& n : naas) std::printf("  service naa:\n%s", n->report().c_str());
  naas.clear();
  for (auto& n : nfss) std::printf("  service nfs:\n%s", n->report().c_str());
  nfss.clear();
  for (const auto& svc : services.services())
    std::printf("  service %s (TCP %u): %u runs, %u failed, %u silent clients dropped\n",
                svc.cfg.test.c_str(), svc.cfg.listen_port, svc.runs, svc.failures,
                svc.dropped_silent);
  stop_workers = true;
  for (unsigned l = 1; l < nl; ++l) rte_eal_wait_lcore(cfg.lcores[l]);
  server.reset();  // it lists the clients
  att.reset();     // every client's resources, released on this thread (no loop runs now)
  std::printf("roced: %s stopping (%s)\n", cfg.name.c_str(),
              g_signal == SIGINT ? "SIGINT" : "SIGTERM");
  for (auto& p : ports) {
    std::uint64_t steered = 0;
    for (auto& l : p.loops) steered += l->steer_stats().steered_out;
    if (nl > 1)
      std::printf("  port %s: %llu frames steered to another lcore\n", p.cfg.name.c_str(),
                  static_cast<unsigned long long>(steered));
  }
  for (auto& p : ports)
    std::printf("  port %s: rx %llu tx %llu frames, %llu ARP answered, %llu pings answered\n",
                p.cfg.name.c_str(), static_cast<unsigned long long>(p.dev->stats().rx_frames),
                static_cast<unsigned long long>(p.dev->stats().tx_frames),
                static_cast<unsigned long long>(p.loop().neighbour().stats().arp_requests_answered),
                static_cast<unsigned long long>(p.loop().neighbour().stats().icmp_echo_answered));
  for (auto& p : ports) {
    if (p.devices.empty()) continue;
    std::array<std::uint64_t, fpga::kDevCounters> sum = p.device_counters();
    for (std::size_t l = 1; l < p.devices.size(); ++l)
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += p.devices[l]->counters()[i];
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
  if (config.empty()) {
    std::cerr << "roced: --config FILE is required\n(try --help)\n";
    return 2;
  }
  try {
    ctl::ApplianceConfig cfg = ctl::load_config(config);
    if (!name.empty()) cfg.name = name;
    if (!level.empty()) {
      if (level != "error" && level != "warning" && level != "info" && level != "debug")
        throw ctl::ConfigError("--log-level must be one of error, warning, info, debug");
      cfg.logging.level = level;
    }
    if (!prometheus.empty()) cfg.counters.prometheus = prometheus == "off" ? "" : prometheus;
    // ROCE_OFFLOAD: the offload mode of ports that set none (a test suite run with the offload
    // on, docs/fpga.md).
    if (const char* env = std::getenv("ROCE_OFFLOAD"); env != nullptr && *env != '\0') {
      const std::string m = env;
      if (m != "none" && m != "datapath" && !fpga::parse_offload_mode(m))
        throw ctl::ConfigError("ROCE_OFFLOAD='" + m +
                               "' is not an offload mode (none, icrc, parse, datapath)");
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
      appliance::check_services(cfg);
      if (!cfg.attach.group.empty() && ::getgrnam(cfg.attach.group.c_str()) == nullptr)
        throw ctl::ConfigError("attach.group: no group '" + cfg.attach.group + "'");
      std::printf("%s: OK: appliance %s, %zu port(s), lcores", config.c_str(), cfg.name.c_str(),
                  cfg.ports.size());
      for (unsigned l : cfg.lcores) std::printf(" %u", l);
      std::printf("\n");
      return 0;
    }
    return run(cfg);
  } catch (const std::exception& e) {
    std::cerr << "roced: " << e.what() << '\n';
    return 1;
  }
}
