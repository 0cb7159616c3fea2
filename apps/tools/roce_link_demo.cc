/// @file
/// roce-link-demo: two appliance processes on a virtual DPDK link (net_memif by default, or
/// net_af_packet on a veth pair). Each runs the DPDK port layer, the poll loop and an engine;
/// they resolve each other with ARP, exchange QP information over a socket pair (a stand-in for
/// the out-of-band TCP exchange), and A runs RC WRITE, SEND, READ, fetch-and-add and
/// compare-and-swap against B. Both sides check every byte; A prints throughput and counters and
/// writes a capture of its traffic.
///
///   roce-link-demo --workdir DIR [--pmd memif|af_packet] [--iface-a IF --iface-b IF]
///                  [--size BYTES] [--loss P]
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/common/pattern.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/pmd_frames.h"
#include "dataplane/port/poll_loop.h"
#include "runtime/env.h"
#include "runtime/link.h"
#include "runtime/oob.h"
#include "runtime/port.h"

namespace po = boost::program_options;
using namespace roce;
using namespace roce::engine;

namespace {

struct Options {
  std::string workdir, pmd = "memif", iface[2], netns[2];
  double loss = 0;
  std::size_t size = 256 * 1024;
};

struct Info {  // what perftest exchanges, in binary
  std::uint32_t qpn, psn, rkey, counter_rkey;
  std::uint64_t addr, counter_addr;
};

constexpr std::size_t kSend = 4096;
std::size_t g_write = 256 * 1024;  // --size
std::size_t g_buf = 1 << 20;

[[noreturn]] void die(int side, const std::string& msg) {
  std::fprintf(stderr, "[%c] FAIL: %s\n", side ? 'B' : 'A', msg.c_str());
  std::fflush(stderr);
  _exit(1);
}

/// Runs `f` when it goes out of scope.
template <class F>
struct AtExit {
  F f;
  ~AtExit() { f(); }
};
template <class F>
AtExit(F) -> AtExit<F>;

int run_side(int side, int fd, const Options& opt) {
  if (!opt.netns[side].empty()) {
    // Each side may live in its own network namespace (its end of a veth pair). This also keeps
    // the af_packet PMDs' PACKET_FANOUT groups apart: they are per namespace, and the PMD derives
    // the group id from pid ^ ifindex, which two sibling processes can share.
    const std::string path = "/var/run/netns/" + opt.netns[side];
    const int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0)
      die(side, "cannot enter network namespace " + opt.netns[side]);
    ::close(ns);
  }
  const char who = side ? 'B' : 'A';
  // The link: A serves the memif socket (or takes its af_packet interface), B connects.
  runtime::LinkOptions link;
  if (opt.pmd == "memif")
    link.set_memif(opt.workdir + "/memif.sock", side ? "client" : "server");
  else
    link.iface = opt.iface[side];
  link.ip = side ? "192.0.2.2" : "192.0.2.1";
  link.mac = side ? "02:00:5e:00:02:02" : "02:00:5e:00:02:01";
  link.lcore = side;
  link.tx_faults.drop_rate = opt.loss;
  link.tx_faults.seed = 100 + static_cast<std::uint64_t>(side);
  if (side == 0) link.pcap = opt.workdir + "/a.pcap";
  // memif tears a connection down on its interrupt thread when the peer goes: a side still
  // polling its rings then can read memory that is being unmapped (B once died of SIGSEGV in
  // its last poll as A closed). So neither side polls at the end, B (the client) closes
  // first, and A closes only after B says its port is gone. Destruction runs in reverse:
  // B's `closed` after its port, A's `wait_peer` before its own.
  const AtExit closed{[&] {
    const char c = 'C';
    if (side == 1 && ::write(fd, &c, 1) != 1) std::fprintf(stderr, "[B] exchange write failed\n");
  }};
  runtime::Env env(link);
  const AtExit wait_peer{[&] {
    if (side != 0) return;
    pollfd p{fd, POLLIN, 0};  // with a bound: B may have failed already
    char c = 0;
    if (::poll(&p, 1, 5000) == 1) (void)::read(fd, &c, 1);
  }};
  Engine& eng = env.eng;
  port::PollLoop& loop = env.loop;
  port::DpdkPort* port = &env.port()->dev();
  if (!env.until([&] { return port->link_up_or_redial(); }, 20)) die(side, "link did not come up");
  std::fprintf(stderr, "[%c] %s up, %s\n", who, runtime::link_port_spec(link).device.c_str(),
               link.ip.c_str());
  const auto exchange_read = [&](void* buf, std::size_t n) {
    runtime::transfer(env, fd, buf, n, false, 60);
  };
  const auto exchange_write = [&](const void* buf, std::size_t n) {
    runtime::transfer(env, fd, const_cast<void*>(buf), n, true, 60);
  };

  // ARP: find the peer's MAC the way a host does.
  const wire::Ipv4Addr peer_ip{0xC0000201u + static_cast<std::uint32_t>(1 - side)};
  const auto found = port::resolve_wait(loop, peer_ip, 20);
  if (!found) die(side, "ARP for the peer got no answer");
  const wire::MacAddr peer_mac = *found;

  Pd* pd = eng.alloc_pd();
  Cq* cq = eng.create_cq(256);
  Qp* qp = eng.create_qp(pd, QpType::kRc, cq, cq, QpCap{64, 64, 2, 2, 64});
  std::vector<std::uint8_t> buf(g_buf, 0);
  std::uint64_t counter = 1000;
  const std::uint32_t acc =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  Mr* mr = eng.reg_mr(pd, buf.data(), buf.size(), acc);
  Mr* cmr = eng.reg_mr(pd, &counter, 8, acc);
  Info mine{qp->qpn,
            static_cast<std::uint32_t>(0x100000 * (side + 1)),
            mr->key,
            cmr->key,
            reinterpret_cast<std::uint64_t>(buf.data()),
            reinterpret_cast<std::uint64_t>(&counter)};
  exchange_write(&mine, sizeof mine);
  Info peer{};
  exchange_read(&peer, sizeof peer);

  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = acc;
  eng.modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
  a.qp_state = QpState::kRtr;
  a.path_mtu = Mtu::k1024;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah.dmac = peer_mac;
  a.ah.dgid = wire::ipv4_mapped(peer_ip);
  if (eng.modify_qp(qp, a,
                    kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                        kQpMinRnrTimer) != kOk)
    die(side, "RTR refused");
  a.qp_state = QpState::kRts;
  a.sq_psn = mine.psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  if (eng.modify_qp(
          qp, a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic) !=
      kOk)
    die(side, "RTS refused");

  std::vector<std::uint8_t> pattern(g_write);
  apps::fill_pattern(pattern, 77);
  if (side == 1) {
    // B: post a receive for A's SEND, tell A it is ready, then wait for A's verdict.
    Sge rs{reinterpret_cast<std::uint64_t>(buf.data()) + g_buf - kSend, kSend, mr->key};
    RecvWr r;
    r.wr_id = 1;
    r.sg_list = &rs;
    r.num_sge = 1;
    eng.post_recv(qp, &r, nullptr);
    const char ready = 'R';
    exchange_write(&ready, 1);
    Wc wc{};
    if (!port::poll_until(
            loop, [&] { return eng.poll_cq(cq, 1, &wc) == 1; }, 60))
      die(side, "the SEND never arrived");
    if (wc.status != WcStatus::kSuccess || wc.byte_len != kSend)
      die(side, "bad receive completion");
    if (std::memcmp(buf.data() + g_buf - kSend, pattern.data(), kSend) != 0)
      die(side, "SEND data differs");
    char verdict = 0;
    exchange_read(&verdict, 1);
    if (verdict != 'D') die(side, "A reported failure");
    if (std::memcmp(buf.data(), pattern.data(), g_write) != 0) die(side, "WRITE data differs");
    // 10 fetch-adds of 7 (1000 -> 1070), then a compare-and-swap 1070 -> 5000.
    if (counter != 5000) die(side, "atomics left " + std::to_string(counter) + ", expected 5000");
    // Keep answering (ACKs, duplicates) until A is done with us.
    port::poll_until(
        loop, [] { return false; }, 0.5);
    // B's READ responses are full-MTU payloads: where the port can, they leave zero-copy.
    if (port->offloads().tx_zero_copy && port->stats().tx_zero_copy == 0)
      die(side, "the port offers zero-copy transmit, yet no READ response used it");
    std::fprintf(stderr,
                 "[B] OK: WRITE, SEND and atomics verified; rx %llu frames, %llu NAKs sent, "
                 "%llu frames sent zero-copy (port offloads: %s)\n",
                 static_cast<unsigned long long>(port->stats().rx_frames),
                 static_cast<unsigned long long>(eng.stats().get(Counter::kSeqErrNakSent)),
                 static_cast<unsigned long long>(port->stats().tx_zero_copy),
                 port->offloads().to_string().c_str());
    return 0;
  }

  // A: wait for B's receive, then WRITE, SEND, READ back, atomics.
  char ready = 0;
  exchange_read(&ready, 1);
  std::memcpy(buf.data(), pattern.data(), g_write);
  std::vector<Sge> sg;
  std::vector<SendWr> wrs(14);
  Sge w_sge{reinterpret_cast<std::uint64_t>(buf.data()), static_cast<std::uint32_t>(g_write),
            mr->key};
  Sge s_sge{reinterpret_cast<std::uint64_t>(buf.data()), kSend, mr->key};
  Sge r_sge{reinterpret_cast<std::uint64_t>(buf.data()) + g_write,
            static_cast<std::uint32_t>(g_write), mr->key};
  std::vector<std::uint64_t> results(11, 0);
  Mr* res_mr = eng.reg_mr(pd, results.data(), results.size() * 8, kAccessLocalWrite);
  std::vector<Sge> a_sge(11);
  wrs[0].opcode = WrOpcode::kWrite;
  wrs[0].sg_list = &w_sge;
  wrs[0].rdma = {peer.addr, peer.rkey};
  wrs[1].opcode = WrOpcode::kSend;
  wrs[1].sg_list = &s_sge;
  wrs[2].opcode = WrOpcode::kRead;
  wrs[2].sg_list = &r_sge;
  wrs[2].rdma = {peer.addr, peer.rkey};
  for (int i = 0; i < 11; ++i) {
    a_sge[static_cast<std::size_t>(i)] = {
        reinterpret_cast<std::uint64_t>(&results[static_cast<std::size_t>(i)]), 8, res_mr->key};
    SendWr& w = wrs[3 + static_cast<std::size_t>(i)];
    w.opcode = i < 10 ? WrOpcode::kFetchAdd : WrOpcode::kCmpSwap;
    w.sg_list = &a_sge[static_cast<std::size_t>(i)];
    w.atomic = {peer.counter_addr, peer.counter_rkey, i < 10 ? 7u : 1070u, 5000};
  }
  for (std::size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = i;
    wrs[i].num_sge = 1;
    wrs[i].send_flags = kSendSignaled;
    if (i + 1 < wrs.size()) wrs[i].next = &wrs[i + 1];
  }
  const std::uint64_t t0 = port::now_ns();
  const SendWr* bad = nullptr;
  if (eng.post_send(qp, &wrs[0], &bad) != kOk) die(side, "post_send refused");
  std::vector<Wc> done;
  if (!port::poll_until(
          loop,
          [&] {
            Wc wc[16];
            const int n = eng.poll_cq(cq, 16, wc);
            done.insert(done.end(), wc, wc + n);
            return done.size() == wrs.size();
          },
          60))
    die(side, "only " + std::to_string(done.size()) + " of " + std::to_string(wrs.size()) +
                  " completions");
  const double ms = static_cast<double>(port::now_ns() - t0) / 1e6;
  for (std::size_t i = 0; i < done.size(); ++i)
    if (done[i].status != WcStatus::kSuccess || done[i].wr_id != i)
      die(side, "completion " + std::to_string(i) + ": " + std::string(to_string(done[i].status)));
  if (std::memcmp(buf.data() + g_write, pattern.data(), g_write) != 0)
    die(side, "READ data differs");
  for (int i = 0; i < 10; ++i)
    if (results[static_cast<std::size_t>(i)] != 1000u + 7u * static_cast<unsigned>(i))
      die(side, "fetch-add " + std::to_string(i) + " returned " +
                    std::to_string(results[static_cast<std::size_t>(i)]));
  if (results[10] != 1070) die(side, "compare-and-swap returned " + std::to_string(results[10]));
  const char verdict = 'D';
  exchange_write(&verdict, 1);
  port::poll_until(
      loop, [] { return false; }, 0.3);
  const auto& st = eng.stats();
  std::printf(
      "[A] OK: WRITE %zu KiB, SEND %zu B, READ %zu KiB, 10 fetch-add, 1 cmp-swap in %.2f ms "
      "(%.1f MB/s); tx %llu frames (%llu zero-copy), retransmitted %llu, timeouts %llu, "
      "injected drops %llu\n",
      g_write / 1024, kSend, g_write / 1024, ms, 2.0 * g_write / (ms * 1e3),
      static_cast<unsigned long long>(port->stats().tx_frames),
      static_cast<unsigned long long>(port->stats().tx_zero_copy),
      static_cast<unsigned long long>(st.get(Counter::kRetransmittedPackets)),
      static_cast<unsigned long long>(st.get(Counter::kRetransmitTimeouts)),
      static_cast<unsigned long long>(loop.faults() ? loop.faults()->stats().dropped : 0));
  if (port->offloads().tx_zero_copy && port->stats().tx_zero_copy == 0)
    die(side, "the port offers zero-copy transmit, yet no WRITE packet used it");
  std::printf("[A] counters:");
  int col = 0;
  for (std::size_t c = 0; c < kCounterCount; ++c) {
    const auto v = st.c[c];
    if (v == 0) continue;
    std::printf("%s%-24s %10llu", col++ % 3 == 0 ? "\n    " : "   ",
                std::string(to_string(static_cast<Counter>(c))).c_str(),
                static_cast<unsigned long long>(v));
  }
  std::printf("\n");
  std::fflush(stdout);
  if (opt.loss > 0 && st.get(Counter::kRetransmittedPackets) == 0)
    die(side, "loss injected but nothing retransmitted");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  po::options_description desc(
      "roce-link-demo: two appliance processes on a virtual DPDK link run RC WRITE, SEND, READ\n"
      "and atomics against each other and check every byte.\n\nOptions");
  desc.add_options()("help", "this help")("workdir", po::value(&opt.workdir)->required(),
                                          "directory for the memif socket and the capture")(
      "pmd", po::value(&opt.pmd)->default_value("memif"), "memif or af_packet")(
      "iface-a", po::value(&opt.iface[0]), "af_packet: A's interface")(
      "iface-b", po::value(&opt.iface[1]), "af_packet: B's interface")(
      "netns-a", po::value(&opt.netns[0]), "run A in this network namespace (ip netns name)")(
      "netns-b", po::value(&opt.netns[1]), "run B in this network namespace")(
      "loss", po::value(&opt.loss)->default_value(0), "drop probability injected on both ports")(
      "size", po::value(&opt.size)->default_value(256 * 1024),
      "bytes to WRITE and READ back (4 KiB to 64 MiB)");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << '\n';
      return 0;
    }
    po::notify(vm);
    if (opt.pmd != "memif" && opt.pmd != "af_packet")
      throw po::error("--pmd must be memif or af_packet");
    if (opt.size < 4096 || opt.size > (64u << 20))
      throw po::error("--size must be between 4096 and 67108864");
    if (opt.loss < 0 || opt.loss > 0.5) throw po::error("--loss must be between 0 and 0.5");
    g_write = opt.size;
    g_buf = 2 * opt.size + kSend;
    if (opt.pmd == "af_packet" && (opt.iface[0].empty() || opt.iface[1].empty()))
      throw po::error("af_packet needs --iface-a and --iface-b");
  } catch (const po::error& e) {
    std::cerr << "roce-link-demo: " << e.what() << '\n';
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(opt.workdir, ec);
  if (!ec) opt.workdir = std::filesystem::absolute(opt.workdir, ec).string();  // memif wants it
  if (ec) {
    std::cerr << "roce-link-demo: cannot create " << opt.workdir << ": " << ec.message() << '\n';
    return 1;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  pid_t pid[2];
  for (int side = 0; side < 2; ++side) {
    pid[side] = fork();
    if (pid[side] == 0) {
      ::close(sv[1 - side]);
      fcntl(sv[side], F_SETFL, O_NONBLOCK);
      alarm(120);
      int rc = 1;
      try {
        rc = run_side(side, sv[side], opt);
      } catch (const std::exception& e) {
        die(side, e.what());
      }
      _exit(rc);
    }
    if (side == 0 && opt.pmd == "memif") {
      // The memif client needs the server's socket: wait for it (a cold start of the EAL,
      // loading every PMD, can take a while on a busy machine).
      const std::string sock = opt.workdir + "/memif.sock";
      for (int i = 0; i < 300 && !std::filesystem::exists(sock); ++i) usleep(50'000);
    }
  }
  ::close(sv[0]);
  ::close(sv[1]);
  int rc = 0;
  for (int side = 0; side < 2; ++side) {
    int status = 0;
    waitpid(pid[side], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "side %c failed (status %d)\n", side ? 'B' : 'A', status);
      rc = 1;
    }
  }
  if (rc == 0) std::printf("roce-link-demo: both appliances passed\n");
  return rc;
}
