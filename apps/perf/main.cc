/// @file
/// roce-perf: rdma-core's and perftest's test tools, spoken by the appliance on a DPDK port.
///
///   roce-perf TEST --iface IF [options] [SERVER]
///
/// TEST is rc_pingpong, ud_pingpong, srq_pingpong (ibv_*_pingpong), or write_bw, read_bw,
/// send_bw, atomic_bw, write_lat, read_lat, send_lat, atomic_lat (perftest's ib_*). Without
/// SERVER we are the server and wait for the tool's client; with it we connect to the tool's
/// server. The exchange runs over the kernel's TCP, the RoCE traffic over the DPDK port. With
/// -R (perftest's rdma_cm mode, perftest_cm.h) there is no TCP: SERVER is the server's RoCE
/// IPv4 address, and the exchange and the tested QPs are rdma_cm connections.
///
///   roce-perf TEST --attach SOCKET [-e] [options] [SERVER]
///
/// runs perftest's tests in a process attached to a running roced (libroce): the QPs, CQs and
/// buffers live in roced's dataplane, the exchange is the same TCP one (apps/perf/attached_env.h).
///
///   roce-perf --config BENCH.yaml [--only WORKLOAD,...] [--repeat N]
///
/// runs a whole benchmark from a file instead (apps/perf/bench/, docs/benchmarks.md): with
/// --only, only the workloads named (and the targets on them); with --repeat, every row N
/// times (the median and the range). And
///
///   roce-perf --bench-peer --iface IF [--ip A] [--mac M] [--pmd P] [--lcore N] [--port N]
///
/// is the far side of such a benchmark on another host (its `topology.peer`).
///
///   roce-perf rping -s [-P] | -c [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-vV] --iface IF ...
///
/// is librdmacm's rping, connected by rdma_cm (see rping.cc); `roce-perf ucmatose [-s SERVER]`
/// is its ucmatose (ucmatose.cc), `roce-perf udaddy [-s SERVER]` its udaddy (udaddy.cc).
/// (The congestion benchmark, N:1 incast through the software switch, is `roce-incast` of
/// apps/switch: one application does not include another's files.)
#include <boost/program_options.hpp>
#include <iostream>

#include "apps/perf/bench/bench.h"
#include "apps/perf/cli.h"
#include "apps/perf/cm_tools.h"

using namespace roce::perf;

namespace {

// roce-perf --config FILE (or --config=FILE): the benchmark runner.
// Runs a benchmark step: a bad configuration exits 2, any other failure 1.
template <class F>
int bench_step(F&& body) {
  try {
    return body();
  } catch (const roce::bench::BenchConfigError& e) {
    std::cerr << "roce-perf: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "roce-perf: " << e.what() << '\n';
    return 1;
  }
}

int bench_main(const std::string& path, const std::string& only, const std::string& repeat) {
  return bench_step([&] {
    roce::bench::BenchConfig c = roce::bench::parse_bench_config_file(path);
    if (!only.empty()) roce::bench::select_workloads(c, only);
    if (!repeat.empty()) roce::bench::set_repeat(c, repeat);
    return roce::bench::run_bench(c);
  });
}

// roce-perf --bench-peer [options]: side B of a benchmark whose topology names this host.
int bench_peer_main(int argc, char** argv) {
  namespace po = boost::program_options;
  roce::bench::PeerOptions o;
  o.link.ip = "192.0.2.2";
  o.link.mac = "02:00:5e:00:03:02";
  o.link.netdev_mtu = 0;
  po::options_description d(
      "roce-perf --bench-peer: the far side of `roce-perf --config FILE` with topology.peer\n"
      "(waits for one benchmark, runs it, exits)");
  d.add_options()("help,h", "this help")("bench-peer", "serve as bench peer")(
      "iface", po::value(&o.link.iface), "interface of the DPDK port (the RoCE link)")(
      "pmd", po::value(&o.link.pmd)->default_value("af_packet"), "af_packet, af_xdp or tap")(
      "ip", po::value(&o.link.ip)->default_value(o.link.ip), "our RoCE IPv4 address")(
      "mac", po::value(&o.link.mac)->default_value(o.link.mac), "the port's MAC address")(
      "netdev-mtu", po::value(&o.link.netdev_mtu),
      "interface MTU (default: what the benchmark's path MTUs need)")(
      "lcore", po::value(&o.lcore)->default_value(0), "lcore of the poll loop")(
      "listen", po::value(&o.listen)->default_value(o.listen), "address of the control socket")(
      "port", po::value(&o.port)->default_value(o.port), "TCP port of the control socket");
  try {
    po::variables_map vm;
    if (!parse_args(argc, argv, d, vm)) return 0;
    if (o.link.iface.empty()) throw po::error("--iface IF is required");
  } catch (const po::error& e) {
    std::cerr << "roce-perf: " << e.what() << "\n(try --bench-peer --help)\n";
    return 2;
  }
  return bench_step([&] {
    const int rc = roce::bench::run_bench_peer(o);
    roce::port::eal_cleanup();
    return rc;
  });
}

}  // namespace

int main(int argc, char** argv) {
  // rdma_cm tools take their tool's flags (rping -s/-c/-a/-p/-C/-S/-v/-V): apps/perf/rping.cc
  if (argc > 1 && std::string(argv[1]) == "rping") return rping_main(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "ucmatose") return ucmatose_main(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "udaddy") return udaddy_main(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "--bench-peer") return bench_peer_main(argc, argv);
  if (argc >= 2 && std::string(argv[1]).rfind("--config", 0) == 0) {
    // --config FILE | --config=FILE, then --only LIST and --repeat N (or with '=')
    std::string path, only, repeat;
    bool ok = true;
    for (int i = 1; i < argc && ok; ++i) {
      const std::string a = argv[i];
      const auto take = [&](const std::string& flag, std::string& out) {
        if (a == flag && i + 1 < argc) {
          out = argv[++i];
          return true;
        }
        if (a.rfind(flag + "=", 0) == 0) {
          out = a.substr(flag.size() + 1);
          return true;
        }
        return false;
      };
      ok = take("--config", path) || take("--only", only) || take("--repeat", repeat);
    }
    if (!ok || path.empty()) {
      std::cerr << "roce-perf: usage: roce-perf --config BENCH.yaml [--only WORKLOAD,...] "
                   "[--repeat N]\n";
      return 2;
    }
    return bench_main(path, only, repeat);
  }
  std::optional<Invocation> inv;
  try {
    int help_status = 0;
    inv =
        parse_command_line(std::vector<std::string>(argv + 1, argv + argc), std::cout, help_status);
    if (!inv) return help_status;
  } catch (const CliError& e) {
    std::cerr << "roce-perf: " << e.what() << "\n(try --help)\n";
    return 2;
  }
  try {
    const int rc = run(*inv);
    roce::port::eal_cleanup();
    return rc;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "roce-perf: " << e.what() << '\n';
    return 1;
  }
}
