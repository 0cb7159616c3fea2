/// @file
/// roce-memif-close: the teardown race of net_memif, many times over. Each round forks a
/// memif server and a client that exchange frames as fast as they poll; one side (alternating)
/// closes its port at a random moment while the other keeps polling for a while before it
/// closes too, with no coordination between them. memif takes a connection down on the EAL
/// interrupt thread when the peer leaves, unmapping the rings the survivor's poll reads: the
/// port layer must keep the survivor out of them (DpdkPort: no burst once the link is down, and
/// a close that lets the interrupt thread's teardown finish). A round fails when a side dies
/// of a signal or exits non-zero; DPDK's "Invalid memory" on stderr fails the test (CTest).
///
/// With --restart the client closes first in every round and a new client connects after it:
/// the server, which stopped polling at the first client's CLOSING, must take up the new
/// connection (as roced does when its peer restarts).
/// With --late-server the server's process is up (its socket exists from its EAL set-up on) but
/// starts its port only after the client dialled and was turned away ("ID not found"; DPDK
/// 22.11's client never dials again by itself): the client must dial again and come up
/// (DpdkPort::link_up_or_redial), as roce-perf's B beside a busy appliance had to (demo.sh).
/// With --bsize the memif buffer size is given as is instead of sized by the port layer for the
/// MTU: a port whose buffers cannot hold its frames must be refused with the reason.
///
///   roce-memif-close --workdir DIR [--rounds N] [--seed S] [--mtu M] [--bsize B] [--restart]
///                    [--late-server]
#include <execinfo.h>
#include <rte_interrupts.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/pmd_frames.h"

namespace po = boost::program_options;
using namespace roce;

namespace {

// A crash prints where it happened (and on which thread: the EAL interrupt thread or ours),
// then dies of the signal as before.
void on_crash(int sig) {
  void* frames[48];
  const int n = backtrace(frames, 48);
  dprintf(2, "signal %d on %s:\n", sig,
          rte_thread_is_intr() ? "the EAL interrupt thread" : "a poll thread");
  backtrace_symbols_fd(frames, n, 2);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

struct Link {
  std::string workdir;
  unsigned mtu = 1500;
  unsigned bsize = 0;  ///< given as is (0: sized by port::vdev_arg)
  /// --late-server: the client writes a byte on `dialled` once its port started (its one dial
  /// made); the server reads it before it starts its own port.
  int dialled[2] = {-1, -1};
};

// One side of one round: bring the link up, exchange frames for `close_after_us`, close. With
// `resume` (the server of --restart), poll instead until the link went down and frames came
// in again over a new connection (10 s at most).
int run_side(int side, const Link& l, unsigned round, std::uint64_t close_after_us,
             bool resume = false) {
  const std::string role = side == 0 ? "server" : "client";
  std::signal(SIGSEGV, on_crash);
  try {
    const std::string args =
        "role=" + role + ",id=0,socket-abstract=no,socket=" + l.workdir + "/memif.sock";
    port::eal_init({"--no-huge", "--no-shconf", "-m", "128", "--no-pci", "--log-level=*:error",
                    "--file-prefix=rocememifclose" + std::to_string(getpid()), "-l",
                    std::to_string(side),
                    l.bsize ? "--vdev=net_memif0," + args + ",bsize=" + std::to_string(l.bsize)
                            : port::vdev_arg("net_memif0", args, l.mtu)});
    if (side == 0 && l.dialled[0] >= 0) {
      char c = 0;
      if (::read(l.dialled[0], &c, 1) != 1) return 1;  // the client failed before its dial
      usleep(300'000);  // the refusal on its way back (the interrupt thread answers at once)
    }
    port::PortSpec ps;
    ps.mtu = static_cast<std::uint16_t>(l.mtu);
    ps.device = "net_memif0";
    ps.mac = wire::MacAddr{{0x02, 0, 0x5e, 0, 0x04, static_cast<std::uint8_t>(1 + side)}};
    ps.mbufs = 1024;
    ps.rx_desc = ps.tx_desc = 256;
    auto dev = std::make_unique<port::DpdkPort>(ps);
    if (side == 1 && l.dialled[1] >= 0 && ::write(l.dialled[1], "d", 1) != 1) return 1;
    const std::uint64_t up_by = port::now_ns() + 20'000'000'000ull;
    while (!dev->link_up_or_redial())
      if (port::now_ns() > up_by) {
        std::fprintf(stderr, "[%s %u] the link did not come up\n", role.c_str(), round);
        return 1;
      }
    std::vector<std::uint8_t> frame(256, 0xab);
    rte_mbuf* pkts[32];
    const std::uint64_t end = port::now_ns() + (resume ? 10'000'000'000ull : close_after_us * 1000);
    bool went_down = false;
    std::uint64_t again = 0;  // frames received after the link came back
    while (port::now_ns() < end && !(resume && again >= 16)) {
      dev->tx(frame);
      dev->flush();
      const std::uint16_t n = dev->rx_burst(pkts, 32);
      for (std::uint16_t i = 0; i < n; ++i) port::DpdkPort::free(pkts[i]);
      if (resume && !dev->link_up()) went_down = true;
      if (went_down) again += n;
    }
    if (side == 1 && l.dialled[1] >= 0)
      std::fprintf(stderr, "[client %u] up after %u more dial(s)\n", round, dev->redials());
    dev.reset();
    port::eal_cleanup();
    if (resume && again < 16) {
      std::fprintf(stderr, "[%s %u] no traffic over the new connection (link %s)\n", role.c_str(),
                   round, went_down ? "went down" : "never went down");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[%s %u] %s\n", role.c_str(), round, e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Link link;
  std::string& workdir = link.workdir;
  unsigned rounds = 20, seed = 1;
  bool restart = false, late = false;
  po::options_description desc("Usage: roce-memif-close --workdir DIR [options]\n\nOptions");
  desc.add_options()("help,h", "print this help")("workdir", po::value(&workdir),
                                                  "directory for the memif socket")(
      "rounds", po::value(&rounds)->default_value(rounds), "rounds (a pair of processes each)")(
      "seed", po::value(&seed)->default_value(seed), "seed of the closing moments")(
      "mtu", po::value(&link.mtu)->default_value(link.mtu), "MTU of both ports (576..9216)")(
      "bsize", po::value(&link.bsize), "memif buffer size, as given (default: from the MTU)")(
      "restart", po::bool_switch(&restart), "a new client after the first one closed")(
      "late-server", po::bool_switch(&late),
      "the server starts its port after the client's first dial");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << '\n';
      return 0;
    }
    if (workdir.empty()) throw po::error("--workdir is required");
    if (link.mtu < 576 || link.mtu > 9216) throw po::error("--mtu must be 576..9216");
  } catch (const po::error& e) {
    std::cerr << "roce-memif-close: " << e.what() << '\n';
    return 2;
  }
  std::filesystem::create_directories(workdir);
  workdir = std::filesystem::absolute(workdir).string();  // memif wants an absolute path
  std::mt19937 rng(seed);
  unsigned failed = 0;
  for (unsigned r = 0; r < rounds; ++r) {
    std::filesystem::remove(workdir + "/memif.sock");
    // The first to close: the server in even rounds, the client in odd ones, after 5-50 ms of
    // traffic; the other polls 100 ms more before it closes.
    const int first = restart ? 1 : static_cast<int>(r % 2);
    const std::uint64_t t = 5'000 + rng() % 45'000;
    const auto start = [&](int side, std::uint64_t us, bool resume) {
      const pid_t p = ::fork();
      if (p == 0) {
        if (link.dialled[0] >= 0) ::close(link.dialled[side == 0 ? 1 : 0]);
        link.dialled[side == 0 ? 1 : 0] = -1;
        if (side == 1) {  // the memif client needs the server's socket
          const std::string sock = workdir + "/memif.sock";
          for (int i = 0; i < 300 && !std::filesystem::exists(sock); ++i) usleep(20'000);
        }
        alarm(60);  // never hang a test run
        _exit(run_side(side, link, r, us, resume));
      }
      return p;
    };
    const auto reap = [&](pid_t p, const char* who) {
      int st = 0;
      ::waitpid(p, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        ++failed;
        std::fprintf(stderr, "round %u: the %s %s\n", r, who,
                     WIFSIGNALED(st) ? ("died of signal " + std::to_string(WTERMSIG(st))).c_str()
                                     : ("exited with " + std::to_string(WEXITSTATUS(st))).c_str());
      }
    };
    if (late && ::pipe(link.dialled) != 0) return 2;
    const pid_t server = start(0, first == 0 ? t : t + 100'000, restart);
    const pid_t client = start(1, first == 1 ? t : t + 100'000, false);
    for (int& fd : link.dialled) {  // the children's now: an end closes with its side
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
    reap(client, "client");
    if (restart) reap(start(1, 30'000, false), "second client");
    reap(server, "server");
  }
  std::printf("roce-memif-close: %u rounds, %u sides failed: %s\n", rounds, failed,
              failed == 0 ? "PASS" : "FAIL");
  return failed == 0 ? 0 : 1;
}
