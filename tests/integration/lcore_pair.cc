/// @file
/// roce-lcore-pair: two appliance processes on net_memif, each with several lcores on one port
/// (one RX/TX queue pair, one engine and one poll loop per lcore, joined by steering rings).
/// Every lcore owns one QP; the QPs are paired across lcores (A's lcore i talks to B's lcore
/// n-1-i), so frames arriving on one lcore's queue must be steered to another. All verbs run
/// on the owning lcore, handed over through the loop's command ring. A WRITEs a pattern over
/// each QP and READs it back; B checks what landed, on the owning lcore. Both print the
/// steering counters, and each side fails unless frames were steered in both directions.
///
///   roce-lcore-pair --workdir DIR [--lcores 2] [--size BYTES]
#include <fcntl.h>
#include <rte_launch.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/common/pattern.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/pmd_frames.h"
#include "dataplane/port/poll_loop.h"
#include "runtime/port.h"

namespace po = boost::program_options;
using namespace roce;
using namespace roce::engine;

namespace {

[[noreturn]] void die(int side, const std::string& m) {
  std::fprintf(stderr, "[%c] FAIL: %s\n", side ? 'B' : 'A', m.c_str());
  std::fflush(stderr);
  _exit(1);
}

// What one lcore owns, built and used only on that lcore.
struct Owned {
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  Qp* qp = nullptr;
  Mr* mr = nullptr;
  std::vector<std::uint8_t> buf;  // A: source then READ target; B: WRITE target
};

// QP information sent over the socket pair (a stand-in for the out-of-band exchange).
struct Info {
  std::uint32_t qpn, psn, rkey;
  std::uint64_t addr;
};

class Side {
 public:
  Side(int side, unsigned lcores, std::size_t size, const std::string& workdir)
      : side_(side), n_(lcores), size_(size) {
    std::string l = "0";
    for (unsigned i = 1; i < n_; ++i) l += "," + std::to_string(i);
    try {
      port::eal_init(
          {"--no-huge", "--no-shconf", "-m", "256", "--no-pci",
           "--file-prefix=rocelcore" + std::to_string(getpid()), "--log-level=*:error", "-l", l,
           port::vdev_arg("net_memif0",
                          "role=" + std::string(side ? "client" : "server") +
                              ",id=0,socket-abstract=no,socket=" + workdir + "/memif.sock",
                          port::PortSpec{}.mtu)});
      // One queue pair, engine and poll loop per lcore, joined by steering rings.
      runtime::PortOptions po;
      po.spec.device = "net_memif0";
      po.spec.mac = mac(side);
      po.spec.mbufs = 8192;
      po.engine.mac = mac(side);
      po.engine.ipv4 = ip(side);
      po.engine.max_qps = 64;
      po.lcores = n_;
      port_ = std::make_unique<runtime::Port>(po);
    } catch (const std::exception& e) {
      die(side, e.what());
    }
    for (unsigned i = 1; i < n_; ++i) port::launch_loop(i, port_->loop(i), stop_);
    owned_.resize(n_);
  }
  ~Side() {
    stop_ = true;
    for (unsigned i = 1; i < n_; ++i) rte_eal_wait_lcore(i);
  }

  static wire::MacAddr mac(int side) {
    return wire::MacAddr{{0x02, 0x00, 0x5e, 0x00, 0x03, static_cast<std::uint8_t>(1 + side)}};
  }
  static wire::Ipv4Addr ip(int side) {
    return wire::Ipv4Addr{0xC0000201u + static_cast<std::uint32_t>(side)};
  }
  port::PollLoop& loop0() { return port_->loop(0); }
  port::DpdkPort& port() { return port_->dev(); }

  // Runs `fn(engine, owned)` on lcore i and waits for it, keeping lcore 0's loop running.
  template <class F>
  void on(unsigned i, F&& fn) {
    if (i == 0) {
      fn(port_->eng(0), owned_[0]);
      return;
    }
    std::atomic<bool> done{false};
    if (!port_->loop(i).post([&] {
          fn(port_->eng(i), owned_[i]);
          done.store(true, std::memory_order_release);
        }))
      die(side_, "command ring full");
    if (!port::poll_until(
            loop0(), [&] { return done.load(std::memory_order_acquire); }, 30))
      die(side_, "lcore " + std::to_string(i) + " did not run its command");
  }

  // Creates lcore i's QP and buffer; returns what the peer needs.
  Info create(unsigned i) {
    Info info{};
    on(i, [&](Engine& e, Owned& o) {
      o.pd = e.alloc_pd();
      o.cq = e.create_cq(64);
      o.qp = e.create_qp(o.pd, QpType::kRc, o.cq, o.cq, QpCap{16, 16, 1, 1, 0});
      o.buf.assign(size_, 0);
      o.mr = e.reg_mr(o.pd, o.buf.data(), o.buf.size(),
                      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
      QpAttr a;
      a.qp_state = QpState::kInit;
      a.qp_access_flags = kAccessRemoteWrite | kAccessRemoteRead;
      if (!o.qp || !o.mr ||
          e.modify_qp(o.qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk)
        die(side_, "cannot create a QP on lcore " + std::to_string(i));
      info = Info{o.qp->qpn, 0x1000u * (i + 1) + static_cast<std::uint32_t>(side_), o.mr->key,
                  reinterpret_cast<std::uint64_t>(o.buf.data())};
    });
    return info;
  }

  void connect(unsigned i, const Info& mine, const Info& peer, const wire::MacAddr& peer_mac) {
    on(i, [&](Engine& e, Owned& o) {
      QpAttr a;
      a.qp_state = QpState::kRtr;
      a.path_mtu = Mtu::k1024;
      a.dest_qp_num = peer.qpn;
      a.rq_psn = peer.psn;
      a.max_dest_rd_atomic = 4;
      a.min_rnr_timer = 1;
      a.ah.dgid = wire::ipv4_mapped(ip(1 - side_));
      a.ah.dmac = peer_mac;
      a.ah.hop_limit = 64;
      bool ok = e.modify_qp(o.qp, a,
                            kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                kQpMaxDestRdAtomic | kQpMinRnrTimer) == kOk;
      a.qp_state = QpState::kRts;
      a.sq_psn = mine.psn;
      a.timeout = 10;
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.max_rd_atomic = 4;
      ok = ok && e.modify_qp(o.qp, a,
                             kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry |
                                 kQpMaxQpRdAtomic) == kOk;
      if (!ok) die(side_, "cannot connect the QP of lcore " + std::to_string(i));
    });
  }

  // A: WRITE the pattern of lcore i to the peer's buffer, then READ it back into ours.
  void write_then_read(unsigned i, const Info& peer) {
    on(i, [&](Engine& e, Owned& o) {
      apps::fill_pattern(o.buf, 77 + i);
      Sge s{reinterpret_cast<std::uint64_t>(o.buf.data()), static_cast<std::uint32_t>(size_),
            o.mr->key};
      SendWr w;
      w.wr_id = 1;
      w.opcode = WrOpcode::kWrite;
      w.sg_list = &s;
      w.num_sge = 1;
      w.send_flags = kSendSignaled;
      w.rdma = {peer.addr, peer.rkey};
      if (e.post_send(o.qp, &w, nullptr) != kOk) die(side_, "post WRITE failed");
    });
    wait_completion(i, "WRITE");
    on(i, [&](Engine& e, Owned& o) {
      std::fill(o.buf.begin(), o.buf.end(), 0);
      Sge s{reinterpret_cast<std::uint64_t>(o.buf.data()), static_cast<std::uint32_t>(size_),
            o.mr->key};
      SendWr r;
      r.wr_id = 2;
      r.opcode = WrOpcode::kRead;
      r.sg_list = &s;
      r.num_sge = 1;
      r.send_flags = kSendSignaled;
      r.rdma = {peer.addr, peer.rkey};
      if (e.post_send(o.qp, &r, nullptr) != kOk) die(side_, "post READ failed");
    });
    wait_completion(i, "READ");
  }

  void wait_completion(unsigned i, const char* what) {
    for (int tries = 0; tries < 3000; ++tries) {
      int got = 0;
      Wc wc;
      on(i, [&](Engine& e, Owned& o) { got = e.poll_cq(o.cq, 1, &wc); });
      if (got == 1) {
        if (wc.status != WcStatus::kSuccess)
          die(side_, std::string(what) + " on lcore " + std::to_string(i) +
                         " failed: " + std::string(to_string(wc.status)));
        return;
      }
      port::poll_until(
          loop0(), [] { return false; }, 0.01);
    }
    die(side_, std::string(what) + " on lcore " + std::to_string(i) + " did not complete");
  }

  // Checks lcore i's buffer against the pattern `seed`, on lcore i.
  bool check(unsigned i, std::uint32_t seed) {
    bool same = false;
    on(i, [&](Engine&, Owned& o) {
      std::vector<std::uint8_t> want(size_);
      apps::fill_pattern(want, seed);
      same = o.buf == want;
    });
    return same;
  }

  port::PollLoop::SteerStats steering(unsigned i) {
    port::PollLoop::SteerStats s;
    on(i, [&](Engine&, Owned&) { s = port_->loop(i).steer_stats(); });
    return s;
  }
  unsigned lcores() const { return n_; }

 private:
  int side_;
  unsigned n_;
  std::size_t size_;
  std::unique_ptr<runtime::Port> port_;
  std::vector<Owned> owned_;
  std::atomic<bool> stop_{false};
};

void xfer(int side, Side& s, int fd, void* buf, std::size_t n, bool write) {
  std::size_t done = 0;
  if (!port::poll_until(
          s.loop0(),
          [&] {
            const ssize_t r = write ? ::write(fd, static_cast<char*>(buf) + done, n - done)
                                    : ::read(fd, static_cast<char*>(buf) + done, n - done);
            if (r > 0) done += static_cast<std::size_t>(r);
            if (r == 0) die(side, "the peer closed the exchange socket");
            return done == n;
          },
          60))
    die(side, "timed out in the exchange");
}

int run_side(int side, int fd, unsigned lcores, std::size_t size, const std::string& workdir) {
  Side s(side, lcores, size, workdir);
  if (!port::poll_until(
          s.loop0(), [&] { return s.port().link_up(); }, 20))
    die(side, "link did not come up");
  const auto peer_mac = port::resolve_wait(s.loop0(), Side::ip(1 - side), 20);
  if (!peer_mac) die(side, "no ARP answer from the peer");
  std::vector<Info> mine(lcores), theirs(lcores);
  for (unsigned i = 0; i < lcores; ++i) mine[i] = s.create(i);
  xfer(side, s, fd, mine.data(), sizeof(Info) * lcores, true);
  xfer(side, s, fd, theirs.data(), sizeof(Info) * lcores, false);
  // Our lcore i talks to the peer's lcore n-1-i.
  for (unsigned i = 0; i < lcores; ++i) s.connect(i, mine[i], theirs[lcores - 1 - i], *peer_mac);
  char ready = 'r';
  xfer(side, s, fd, &ready, 1, true);
  xfer(side, s, fd, &ready, 1, false);
  bool ok = true;
  if (side == 0) {
    for (unsigned i = 0; i < lcores; ++i) {
      s.write_then_read(i, theirs[lcores - 1 - i]);
      if (!s.check(i, 77 + i)) {
        std::fprintf(stderr, "[A] FAIL: lcore %u read back other bytes than it wrote\n", i);
        ok = false;
      }
    }
    char done = ok ? 'd' : 'x';
    xfer(side, s, fd, &done, 1, true);
  } else {
    char done = 0;
    xfer(side, s, fd, &done, 1, false);
    if (done != 'd') ok = false;
    for (unsigned i = 0; i < lcores; ++i)
      if (!s.check(i, 77 + (lcores - 1 - i))) {
        std::fprintf(stderr, "[B] FAIL: lcore %u holds other bytes than A wrote\n", i);
        ok = false;
      }
  }
  // Let the last ACKs and READ responses go out before the loops stop.
  port::poll_until(
      s.loop0(), [] { return false; }, 0.2);
  std::uint64_t in = 0, out = 0;
  for (unsigned i = 0; i < lcores; ++i) {
    const auto st = s.steering(i);
    std::fprintf(stderr, "[%c] lcore %u: steered out %llu, steered in %llu, ring full %llu\n",
                 side ? 'B' : 'A', i, static_cast<unsigned long long>(st.steered_out),
                 static_cast<unsigned long long>(st.steered_in),
                 static_cast<unsigned long long>(st.ring_full));
    in += st.steered_in;
    out += st.steered_out;
  }
  if (lcores > 1 && (in == 0 || out == 0)) {
    std::fprintf(stderr, "[%c] FAIL: no frame was steered between lcores\n", side ? 'B' : 'A');
    ok = false;
  }
  std::fprintf(stderr, "[%c] %s: %u lcores, %zu bytes per QP\n", side ? 'B' : 'A',
               ok ? "PASS" : "FAIL", lcores, size);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string workdir;
  unsigned lcores = 2;
  std::size_t size = 1 << 20;
  po::options_description desc("Usage: roce-lcore-pair --workdir DIR [options]\n\nOptions");
  desc.add_options()("help,h", "print this help")("workdir", po::value(&workdir),
                                                  "directory for the memif socket")(
      "lcores", po::value(&lcores)->default_value(lcores), "lcores per appliance (1..8)")(
      "size", po::value(&size)->default_value(size), "bytes per QP");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << '\n';
      return 0;
    }
    if (workdir.empty()) throw po::error("--workdir is required");
    if (lcores == 0 || lcores > 8) throw po::error("--lcores must be 1..8");
    if (size == 0 || size > (64u << 20)) throw po::error("--size must be 1..67108864");
  } catch (const po::error& e) {
    std::cerr << "roce-lcore-pair: " << e.what() << '\n';
    return 2;
  }
  std::filesystem::create_directories(workdir);
  std::filesystem::remove(workdir + "/memif.sock");
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  pid_t pids[2];
  for (int side = 0; side < 2; ++side) {
    pids[side] = ::fork();
    if (pids[side] == 0) {
      if (side == 1) {  // the memif client needs the server's socket
        const std::string sock = workdir + "/memif.sock";
        for (int i = 0; i < 300 && !std::filesystem::exists(sock); ++i) usleep(50'000);
      }
      ::close(sv[1 - side]);
      fcntl(sv[side], F_SETFL, O_NONBLOCK);
      alarm(150);  // never hang a test run
      _exit(run_side(side, sv[side], lcores, size, workdir));
    }
  }
  ::close(sv[0]);
  ::close(sv[1]);
  int rc = 0;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  std::printf("roce-lcore-pair: %s\n", rc == 0 ? "PASS" : "FAIL");
  return rc;
}
