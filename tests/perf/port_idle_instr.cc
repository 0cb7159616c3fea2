/// @file
/// roce-port-idle-instr: the instructions of an idle poll loop on net_memif (issue 33), for
/// callgrind. One process, two net_memif ports on one socket (the server's and the client's),
/// each with an engine and a poll loop. Once both links are up it polls the server's loop
/// --polls times in idle_connected() (nothing to receive or send: the connected idle round),
/// then closes the client's port on another thread while polling on (its CLOSING is answered,
/// the link goes down) and polls --polls times more in idle_peer_gone() (a port whose peer has
/// left, waiting for the next connection, as roced's after its client exits). Each function is
/// never inlined, so that
///
///   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*idle_connected*'
///       --toggle-collect='*idle_peer_gone*' roce-port-idle-instr --workdir DIR  (one command)
///   callgrind_annotate --inclusive=yes callgrind.out.* | grep -E 'idle_|poll_once|rx_burst'
///
/// (noipa: identical, the two would be folded into one) gives each state's instructions per
/// poll_once (inclusive / --polls) and the share of DpdkPort::rx_burst in it. Prints the polls and
/// the link state of each phase.
///
///   roce-port-idle-instr --workdir DIR [--polls N]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "dataplane/engine/engine.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/pmd_frames.h"
#include "dataplane/port/poll_loop.h"

using namespace roce;

namespace {

[[gnu::noipa]] std::size_t idle_connected(port::PollLoop& l, unsigned polls) {
  std::size_t moved = 0;
  for (unsigned i = 0; i < polls; ++i) moved += l.poll_once();
  return moved;
}

[[gnu::noipa]] std::size_t idle_peer_gone(port::PollLoop& l, unsigned polls) {
  std::size_t moved = 0;
  for (unsigned i = 0; i < polls; ++i) moved += l.poll_once();
  return moved;
}

port::PortSpec spec(int side) {
  port::PortSpec ps;
  ps.device = side == 0 ? "net_memif0" : "net_memif1";
  ps.mac = wire::MacAddr{{0x02, 0, 0x5e, 0, 0x21, static_cast<std::uint8_t>(1 + side)}};
  ps.mbufs = 1024;
  ps.rx_desc = ps.tx_desc = 256;
  return ps;
}

engine::EngineConfig config(int side) {
  engine::EngineConfig c;
  c.mac = spec(side).mac;
  c.ipv4 = wire::Ipv4Addr{0xC6120000u + 0x2100u + static_cast<std::uint32_t>(1 + side)};
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  unsigned polls = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--workdir") {
      dir = argv[i + 1];
    } else if (k == "--polls") {
      polls = static_cast<unsigned>(std::strtoul(argv[i + 1], nullptr, 10));
    } else {
      std::fprintf(stderr, "usage: %s --workdir DIR [--polls N]\n", argv[0]);
      return 2;
    }
  }
  if (dir.empty() || polls == 0) {
    std::fprintf(stderr, "usage: %s --workdir DIR [--polls N]\n", argv[0]);
    return 2;
  }
  std::filesystem::create_directories(dir);
  const std::string sock = "socket-abstract=no,socket=" + dir + "/memif.sock";
  port::eal_init({"--no-huge", "--no-shconf", "-m", "256", "--no-pci", "--log-level=*:error",
                  "--file-prefix=roceidle" + std::to_string(getpid()), "-l", "0",
                  port::vdev_arg("net_memif0", "role=server,id=0," + sock, 1500),
                  port::vdev_arg("net_memif1", "role=client,id=0," + sock, 1500)});
  port::DpdkPort a(spec(0));
  auto b = std::make_unique<port::DpdkPort>(spec(1));
  engine::Engine ea(config(0)), eb(config(1));
  port::PollLoop la(a, ea);
  auto lb = std::make_unique<port::PollLoop>(*b, eb);
  const std::uint64_t up_by = port::now_ns() + 20'000'000'000ull;
  while (!a.link_up() || !b->link_up()) {
    la.poll_once();
    lb->poll_once();
    if (port::now_ns() > up_by) {
      std::fprintf(stderr, "roce-port-idle-instr: the link did not come up\n");
      return 1;
    }
  }
  for (int i = 0; i < 1000; ++i) la.poll_once();
  const std::size_t moved = idle_connected(la, polls);
  std::printf("connected: %u polls, %zu frames moved, link %s\n", polls, moved,
              a.link_up() ? "up" : "down");
  // The client closes (CLOSING, answered by the server's loop polled here), the link goes down.
  lb.reset();
  std::thread closer([&] { b.reset(); });
  const std::uint64_t down_by = port::now_ns() + 20'000'000'000ull;
  while (a.link_up() && port::now_ns() < down_by) la.poll_once();
  closer.join();
  for (int i = 0; i < 1000; ++i) la.poll_once();
  const std::size_t moved2 = idle_peer_gone(la, polls);
  std::printf("peer gone: %u polls, %zu frames moved, link %s\n", polls, moved2,
              a.link_up() ? "up" : "down");
  return 0;
}
