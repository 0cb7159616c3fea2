/// @file
/// roce-switch: the software switch (apps/switch/switch.h) between appliance processes, each
/// on a net_memif link of its own (the switch is the server end of every socket). One poll
/// loop: every port's received frames go into the switch at the time they arrive, and what
/// the output queues let out by now is sent. MACs are learnt (ARP is flooded). SIGUSR1 prints
/// the counters as JSON, SIGINT/SIGTERM print them and exit; --json writes them there too.
///
///   roce-switch --port /tmp/a.sock --port /tmp/b.sock [--port ...] [--rate-mbps 10000]
///               [--queue-kb 512] [--kmin-kb 10] [--kmax-kb 50] [--pmax 1] [--no-ecn]
///               [--mtu 1500] [--lcore -1] [--json FILE]
#include <unistd.h>

#include <boost/program_options.hpp>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "apps/switch/switch.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/pmd_frames.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_dump = 0;

void on_stop(int) { g_stop = 1; }
void on_dump(int) { g_dump = 1; }

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  using namespace roce;
  std::vector<std::string> socks;
  fabric::QueueConfig q;
  std::uint64_t queue_kb = 512, kmin_kb = 10, kmax_kb = 50;
  std::uint32_t mtu = 1500;
  int lcore = -1;
  std::string json;
  po::options_description d("roce-switch: a software switch between net_memif links");
  d.add_options()("help,h", "this help")(
      "port", po::value(&socks)->composing(),
      "a memif socket path (the switch is its server end); two or more")(
      "rate-mbps", po::value(&q.rate_mbps)->default_value(10'000), "every output's drain rate")(
      "queue-kb", po::value(&queue_kb)->default_value(512), "output queue depth")(
      "kmin-kb", po::value(&kmin_kb)->default_value(10))("kmax-kb",
                                                         po::value(&kmax_kb)->default_value(50))(
      "pmax", po::value(&q.pmax)->default_value(1.0))("no-ecn", "tail drop only")(
      "mtu", po::value(&mtu)->default_value(1500), "the links' MTU (both ends need the same)")(
      "lcore", po::value(&lcore)->default_value(-1), "CPU of the poll loop (-1: any)")(
      "json", po::value(&json), "write the counters here at exit");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, d), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "roce-switch: " << e.what() << '\n';
    return 2;
  }
  if (vm.count("help")) {
    std::cout << d;
    return 0;
  }
  if (socks.size() < 2 || socks.size() > 16) {
    std::cerr << "roce-switch: give 2 to 16 --port sockets\n";
    return 2;
  }
  q.depth_bytes = queue_kb * 1024;
  q.kmin_bytes = kmin_kb * 1024;
  q.kmax_bytes = kmax_kb * 1024;
  q.ecn = !vm.count("no-ecn");
  q.delay_ns = 0;
  try {
    std::vector<std::string> eal{"--no-huge",
                                 "--no-shconf",
                                 "-m",
                                 "512",
                                 "--no-pci",
                                 "--log-level=*:error",
                                 "--file-prefix=roce-switch" + std::to_string(getpid()),
                                 port::main_lcore_arg(lcore)};
    for (std::size_t i = 0; i < socks.size(); ++i)
      eal.push_back(port::vdev_arg("net_memif" + std::to_string(i),
                                   "role=server,id=0,socket-abstract=no,socket=" + socks[i], mtu));
    port::eal_init(eal);
    std::vector<std::unique_ptr<port::DpdkPort>> ports;
    for (std::size_t i = 0; i < socks.size(); ++i) {
      port::PortSpec ps;
      ps.device = "net_memif" + std::to_string(i);
      ps.mac = wire::MacAddr{{0x02, 0x00, 0x5e, 0x00, 0x53, static_cast<std::uint8_t>(i)}};
      ps.mtu = static_cast<std::uint16_t>(mtu);
      ps.zero_copy = false;
      ps.offloads = false;
      ports.push_back(std::make_unique<port::DpdkPort>(ps));
    }
    fabric::Switch sw(ports.size(), q, 1, true);
    std::signal(SIGINT, on_stop);
    std::signal(SIGTERM, on_stop);
    std::signal(SIGUSR1, on_dump);
    std::printf(
        "roce-switch: %zu ports, %llu Mb/s, queue %llu KiB, ECN %s (Kmin %llu, Kmax %llu "
        "KiB, Pmax %.2f)\n",
        ports.size(), static_cast<unsigned long long>(q.rate_mbps),
        static_cast<unsigned long long>(queue_kb), q.ecn ? "on" : "off",
        static_cast<unsigned long long>(kmin_kb), static_cast<unsigned long long>(kmax_kb), q.pmax);
    std::fflush(stdout);
    while (!g_stop) {
      const std::uint64_t now = port::now_ns();
      for (std::size_t i = 0; i < ports.size(); ++i)
        ports[i]->rx([&](std::span<const std::uint8_t> f) { sw.receive(i, f, now); });
      for (std::size_t i = 0; i < ports.size(); ++i) {
        sw.deliver(i, now, [&](std::span<const std::uint8_t> f) { ports[i]->tx(f); });
        ports[i]->flush();
      }
      if (g_dump) {
        g_dump = 0;
        std::printf("%s\n", sw.json().c_str());
        std::fflush(stdout);
      }
    }
    const std::string out = sw.json();
    std::printf("%s\n", out.c_str());
    if (!json.empty()) std::ofstream(json) << out << '\n';
    ports.clear();
    port::eal_cleanup();
  } catch (const std::exception& e) {
    std::cerr << "roce-switch: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
