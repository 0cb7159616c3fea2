/// @file
/// roce-naa: the appliance as a NAAICE network-attached accelerator, standalone on a DPDK port
/// of its own (net_memif or net_af_packet, no hugepages), or attached to a running roced
/// (--attach SOCKET: roced's port, no DPDK here). Hosts connect with rdma_cm to --port
/// (12345), set up memory regions with MRSP and call the kernels by function code.
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "apps/naa/conn_stack.h"
#include "apps/naa/naa_server.h"
#include "apps/naa/standalone.h"
#include "dataplane/port/eal.h"

namespace po = boost::program_options;
using namespace roce::naa;

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

}  // namespace

int main(int argc, char** argv) {
  roce::runtime::LinkOptions link = roce::runtime::LinkOptions::text_defaults();
  std::string pmd = "memif", memif_socket, memif_role = "server", iface;
  double tx_drop = 0, rx_drop = 0;
  std::uint64_t seed = 1;
  NaaConfig cfg;
  unsigned port = cfg.port, exit_after = 0;
  std::uint64_t mem_mib = cfg.memory_per_host >> 20;
  double timeout = 0;
  std::string attach, attach_port;
  po::options_description d(
      "Usage: roce-naa [--pmd memif --memif-socket PATH | --pmd af_packet --iface IF |\n"
      "                 --attach SOCKET] [options]\n\n"
      "A NAAICE network-attached accelerator on the appliance's RoCEv2 stack");
  d.add_options()("help,h", "print this help")(
      "attach", po::value(&attach),
      "attach to the roced listening on this socket and serve on its port (no DPDK port here)")(
      "attach-port", po::value(&attach_port), "with --attach: roced's port by name (its first)")(
      "pmd", po::value(&pmd)->default_value(pmd), "memif or af_packet")(
      "memif-socket", po::value(&memif_socket), "memif: the control socket")(
      "memif-role", po::value(&memif_role)->default_value(memif_role), "memif: server or client")(
      "iface", po::value(&iface), "af_packet: the interface")(
      "ip", po::value(&link.ip)->default_value(link.ip), "our RoCE IPv4 address")(
      "mac", po::value(&link.mac)->default_value(link.mac), "our MAC address")(
      "pcap", po::value(&link.pcap), "capture every frame to this file")(
      "tx-drop", po::value(&tx_drop)->default_value(0), "drop this fraction of frames sent")(
      "rx-drop", po::value(&rx_drop)->default_value(0), "drop this fraction of frames received")(
      "fault-seed", po::value(&seed)->default_value(1), "seed of the fault injection")(
      "window-bytes", po::value(&link.window_bytes)->default_value(0),
      "memif: requester window per QP in bytes (0: the engine's, 1 MiB)")(
      "port,p", po::value(&port)->default_value(port), "rdma_cm port to listen on")(
      "max-hosts", po::value(&cfg.max_hosts)->default_value(cfg.max_hosts),
      "hosts connected at once (more are rejected)")(
      "memory-per-host", po::value(&mem_mib)->default_value(mem_mib),
      "MiB of NAA memory (FPGA address space) per host")(
      "max-regions", po::value(&cfg.max_regions)->default_value(cfg.max_regions),
      "memory regions per host (at most 32)")(
      "host-idle-timeout", po::value(&cfg.host_idle_timeout)->default_value(cfg.host_idle_timeout),
      "seconds a host may be silent before it is dropped (0: never)")(
      "exit-after", po::value(&exit_after)->default_value(0),
      "exit once this many hosts have come and gone (0: run until SIGINT/SIGTERM)")(
      "timeout", po::value(&timeout)->default_value(0),
      "exit with status 1 after this many seconds")("list-kernels", "print the kernels and exit")(
      "late-receives-ms", po::value(&cfg.late_receives_ms)->default_value(0),
      "test: post a new host's receives this many ms after the REP (its first SEND meets an "
      "RNR NAK)")("kernel-threads",
                  po::value(&cfg.kernel_threads)->default_value(cfg.kernel_threads),
                  "threads that run the kernels, off the poll loop (1..64)")(
      "kernel-queue", po::value(&cfg.kernel_queue)->default_value(cfg.kernel_queue),
      "calls queued or running at once, over all hosts; one more is answered with status 0x01 "
      "(0: --max-hosts, so that no host is turned away; at most 4096)")(
      "kernel-delay-ms", po::value(&cfg.kernel_delay_ms)->default_value(0),
      "test: every kernel takes at least this many ms (a long kernel without the CPU)")(
      "busy-poll", "never yield the CPU when idle (benchmarks on a dedicated core)")(
      "functions", po::value(&cfg.functions),
      "function codes: CODE=KERNEL[,CODE=KERNEL...] over the default table (--list-kernels), "
      "KERNEL 'none' removes a code; e.g. 2=vector_add,3=reduce_sum")("verbose,v",
                                                                      "log every MRSP and call");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, d), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << d << '\n';
      return 0;
    }
    if (port == 0 || port > 65535) throw po::error("--port must be 1..65535");
    if (cfg.max_regions == 0 || cfg.max_regions > kMaxRegions)
      throw po::error("--max-regions must be 1..32");
    if (mem_mib == 0 || mem_mib > (1ull << 20))
      throw po::error("--memory-per-host must be 1..2^20 MiB");
    if (cfg.max_hosts == 0) throw po::error("--max-hosts must be at least 1");
    if (cfg.kernel_threads == 0 || cfg.kernel_threads > 64)
      throw po::error("--kernel-threads must be 1..64");
    if (cfg.kernel_queue > 4096) throw po::error("--kernel-queue must be 0..4096");
    if (cfg.kernel_delay_ms < 0 || cfg.kernel_delay_ms > 600000)
      throw po::error("--kernel-delay-ms must be 0..600000");
    if (std::string err; !KernelRegistry::builtin().configure(cfg.functions, err))
      throw po::error("--functions: " + err);
    if (!attach.empty()) {
      // attached: roced's port, no link of our own
    } else if (pmd == "memif") {
      if (!link.set_memif(memif_socket, memif_role))
        throw po::error("memif needs socket=PATH and role=server|client");
    } else {
      link.pmd = pmd;
      link.iface = iface;
    }
    link.set_drops(tx_drop, rx_drop, seed);
    std::string err;
    roce::runtime::LinkOptions check = link;
    if (!vm.count("list-kernels") && attach.empty() &&
        !roce::runtime::parse_link_text("", check, err))
      throw po::error(err);
  } catch (const po::error& e) {
    std::cerr << "roce-naa: " << e.what() << "\n(try roce-naa --help)\n";
    return 2;
  }
  cfg.port = static_cast<std::uint16_t>(port);
  cfg.memory_per_host = mem_mib << 20;
  cfg.verbose = vm.count("verbose") != 0;
  KernelRegistry kernels = KernelRegistry::builtin();
  if (vm.count("list-kernels")) {
    std::string err;
    kernels.configure(cfg.functions, err);
    for (const auto& [code, k] : kernels.all())
      std::printf("%3u  %-12s %s\n", code, k.name.c_str(), k.signature.c_str());
    return 0;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  int rc = 0;
  try {
    // In-process (a port of our own) or attached to roced: the same stack on either Context.
    std::unique_ptr<Standalone> local;
    std::unique_ptr<roce::client::Context> attached;
    roce::client::Context* ctx = nullptr;
    ConnStackOptions so;
    std::string ip = link.ip;
    if (!attach.empty()) {
      attached = roce::client::Context::attach(attach, attach_port);
      if (!attached) {
        std::fprintf(stderr, "roce-naa: cannot attach to %s: %s\n", attach.c_str(),
                     std::strerror(errno));
        return 1;
      }
      ctx = attached.get();
      const std::uint32_t be = htonl(ctx->port().ipv4.v);
      char b[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &be, b, sizeof b);
      ip = b;
    } else {
      local = std::make_unique<Standalone>(link);
      ctx = &local->context();
      so = local->stack_options();
    }
    so.max_connections = std::max<std::size_t>(cfg.max_hosts + 64, 1024);
    {
      ConnStack stack(*ctx, so);
      NaaServer server(stack, cfg, std::move(kernels));
      server.start();
      std::printf(
          "roce-naa: %s listening on rdma_cm port %u (%u hosts, %llu MiB each, %u regions)%s\n",
          ip.c_str(), port, cfg.max_hosts, static_cast<unsigned long long>(mem_mib),
          cfg.max_regions, attached ? (" attached to " + attach).c_str() : "");
      std::fflush(stdout);
      const bool busy = vm.count("busy-poll") != 0;
      const bool in_process = local != nullptr;
      if (!server.run(g_stop, exit_after, timeout, [busy, in_process] {
            // Attached, roced drives the port: a short sleep leaves it the CPU.
            if (busy) return;
            if (in_process)
              Standalone::yield();
            else
              ::usleep(50);
          })) {
        std::fprintf(stderr, "roce-naa: timed out\n");
        rc = 1;
      }
      // A DREP or ACK the last host may still wait for.
      stack.idle(0.2);
      std::printf("%s%s", server.report().c_str(), local ? local->transport_report().c_str() : "");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "roce-naa: %s\n", e.what());
    return 1;
  }
  Standalone::cleanup();
  return rc;
}
