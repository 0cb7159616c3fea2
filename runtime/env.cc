/// @file
/// roce-perf's dataplane and out-of-band connection.
#include "apps/perf/env.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "controlplane/address.h"
#include "controlplane/tcp.h"
#include "dataplane/port/pmd_frames.h"
#include "fpga/host/card_context.h"
#include "fpga/model/datapath_offload.h"
#include "fpga/model/device.h"

namespace roce::perf {

void fail(const std::string& msg) { throw TestFailure(msg); }

std::string hex_gid(const wire::Ipv6Addr& g) {
  std::string s;
  char h[3];
  for (auto b : g.b) {
    std::snprintf(h, sizeof h, "%02x", b);
    s += h;
  }
  return s;
}

std::string printable(const char* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n && p[i] != '\0'; ++i)
    s += (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : '.';
  return s;
}

std::string link_vdev(const LinkOpts& o) {
  if (!ctl::parse_ipv4(o.ip) || !ctl::parse_mac(o.mac))
    fail("--ip and --mac must be an IPv4 address and a MAC address");
  if (o.iface.empty()) fail("--iface IF (the interface for the RoCE traffic) is required");
  if (o.netdev_mtu < 576 || o.netdev_mtu > 9000) fail("--netdev-mtu must be 576..9000");
  if (o.vlan > 4094)
    fail("--vlan " + std::to_string(o.vlan) + ": the VLAN ID must be a number between 1 and 4094");
  if (o.pmd == "af_xdp") {
    // An AF_XDP socket on queue 0 of the interface (the PMD loads its own XDP program). Its
    // frames are 4 KiB UMEM chunks: IP MTU up to about 3.5 KiB, so path MTU 2048 at most.
    if (o.netdev_mtu > 3000) fail("--pmd af_xdp carries IP MTUs up to 3000 (path MTU 2048)");
    return "--vdev=net_af_xdp0,iface=" + o.iface + ",start_queue=0,queue_count=1";
  }
  if (o.pmd == "tap") {
    // net_tap creates the kernel interface `iface` itself (bridge it to reach a peer); it
    // offers the IPv4 checksum offloads, which the port then uses.
    return "--vdev=net_tap0,iface=" + o.iface;
  }
  if (o.pmd == "memif" || o.pmd == "memif-server") {
    // One end of a net_memif link (another process, e.g. roced, has the other): --iface is
    // the socket's path. Buffers sized for the MTU; both ends need the same.
    try {
      return port::vdev_arg("net_memif0",
                            "role=" + std::string(o.pmd == "memif" ? "client" : "server") +
                                ",id=0,socket-abstract=no,socket=" + o.iface,
                            o.netdev_mtu);
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
  }
  if (o.pmd == "af_packet") {
    // af_packet copies each frame into a ring slot: the port layer sizes them for the MTU.
    try {
      return port::vdev_arg("net_af_packet0", "iface=" + o.iface + ",qpairs=1", o.netdev_mtu);
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
  }
  fail("--pmd must be af_packet, af_xdp, tap, memif or memif-server, not '" + o.pmd + "'");
}

port::PortSpec link_port_spec(const LinkOpts& o) {
  port::PortSpec ps;
  ps.device = o.pmd == "af_xdp"              ? "net_af_xdp0"
              : o.pmd == "tap"               ? "net_tap0"
              : o.pmd.rfind("memif", 0) == 0 ? "net_memif0"
                                             : "net_af_packet0";
  ps.mac = *ctl::parse_mac(o.mac);
  ps.set_mac = o.pmd != "tap";
  ps.mtu = static_cast<std::uint16_t>(o.netdev_mtu);
  if (o.vlan != 0) ps.vlan = static_cast<std::uint16_t>(o.vlan);
  // The AF_XDP PMD registers the mbuf pool as UMEM, which counts against the locked-memory
  // limit (8 MiB here): 2048 mbufs of 2 KiB fit.
  ps.mbufs = o.pmd == "af_xdp" ? 2048 : o.pmd.rfind("memif", 0) == 0 ? 8192 : 4096;
  return ps;
}

engine::Mtu link_path_mtu(unsigned netdev_mtu) {
  engine::Mtu m = engine::Mtu::k256;
  for (auto c : {engine::Mtu::k512, engine::Mtu::k1024, engine::Mtu::k2048, engine::Mtu::k4096})
    if (engine::mtu_bytes(c) + 80 <= netdev_mtu) m = c;
  return m;
}

namespace {

std::unique_ptr<engine::Engine> make_engine(const LinkOpts& o) {
  const std::string vdev = link_vdev(o);
  port::eal_init({"--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--log-level=*:error",
                  "--file-prefix=roceperf" + std::to_string(getpid()),
                  port::main_lcore_arg(o.lcore), vdev});
  engine::EngineConfig ec;
  ec.mac = *ctl::parse_mac(o.mac);  // checked by link_vdev
  ec.ipv4 = *ctl::parse_ipv4(o.ip);
  ec.advertise_credits = false;  // as rxe
  ec.max_mtu = link_path_mtu(o.netdev_mtu);
  if (o.window_bytes) {
    ec.max_inflight_bytes = o.window_bytes;
    ec.max_inflight_psns = static_cast<std::uint32_t>(
        std::max<std::uint64_t>(ec.max_inflight_psns, o.window_bytes / 1024));
  }
  if (o.vlan != 0) ec.vlan_id = static_cast<std::uint16_t>(o.vlan);
  return std::make_unique<engine::Engine>(ec);
}

std::unique_ptr<port::DpdkPort> make_port(const LinkOpts& o) {
  return std::make_unique<port::DpdkPort>(link_port_spec(o));
}

}  // namespace

Env::Env(const LinkOpts& o)
    : own_eng_(make_engine(o)),
      own_dev_(make_port(o)),
      own_loop_(std::make_unique<port::PollLoop>(*own_dev_, *own_eng_, o.tx_faults, o.rx_faults)),
      eng(*own_eng_),
      loop(*own_loop_) {
  ip = *ctl::parse_ipv4(o.ip);  // checked by make_engine
  gid = ctl::gid_from_ipv4(ip);
  if (!o.pcap.empty()) {
    capture = std::make_unique<apps::PcapWriter>(o.pcap);
    loop.tap = [this](std::span<const std::uint8_t> f, bool) { capture->write(f, port::now_ns()); };
  }
  std::string off = o.offload;
  if (off.empty())
    if (const char* e = std::getenv("ROCE_OFFLOAD")) off = e;
  if (!off.empty() && off != "none") {
    const bool datapath = off == "datapath";
    const auto mode =
        datapath ? std::optional(fpga::OffloadMode::kParse) : fpga::parse_offload_mode(off);
    if (!mode) fail("offload '" + off + "' is not a mode (icrc, parse, datapath)");
    offload_ = std::make_unique<fpga::DeviceModel>(fpga::DeviceConfig{.mode = *mode});
    if (datapath) {
      // The card behind the parse stages; the WRITE and READ tests open a Context on it.
      fpga::DatapathCard::Config cc;
      cc.net = eng.config();
      card_ = std::make_unique<fpga::DatapathOffload>(*offload_, cc);
      loop.set_offload(card_.get());
      open_card = [this, o] {
        fpga::CardContextOptions co;
        co.driver = &card_->driver();
        co.port.mac = *ctl::parse_mac(o.mac);
        co.port.ipv4 = ip;
        co.port.gid = gid;
        co.port.max_mtu = eng.config().max_mtu;
        return fpga::open_card_context(std::move(co));
      };
    } else {
      loop.set_offload(offload_.get());
    }
  }
  if (own_dev_->offloads().to_string() != "none")
    std::fprintf(stderr, "roce-perf: %s offloads: %s\n", o.iface.c_str(),
                 own_dev_->offloads().to_string().c_str());
  // A memif server's link comes up when its client connects, which may be much later.
  if (o.pmd != "memif-server")
    until([&] { return own_dev_->link_up(); }, o.pmd == "memif" ? 30 : 10);
}

Env::Env(engine::Engine& e, port::PollLoop& l, wire::Ipv4Addr a, std::function<void()> between)
    : between_polls_(std::move(between)), ip(a), gid(ctl::gid_from_ipv4(a)), eng(e), loop(l) {}

Env::~Env() {
  if (own_loop_) loop.tap = nullptr;
  own_loop_.reset();
  if (offload_) {
    const auto all = card_ ? card_->counters() : offload_->counters();
    const auto c = [&](fpga::DevCounter d) {
      return static_cast<unsigned long long>(all[static_cast<std::size_t>(d)]);
    };
    std::fprintf(stderr,
                 "roce-perf: offload %s: %llu RoCE frames in, %llu out, %llu ICRCs written (%llu "
                 "differing), %llu dropped for the ICRC, %llu by the parser; %llu work requests "
                 "on the card, %llu sent again\n",
                 card_ ? "datapath" : std::string(fpga::to_string(offload_->config().mode)).c_str(),
                 c(fpga::DevCounter::kRoceRxPkgs), c(fpga::DevCounter::kRoceTxPkgs),
                 c(fpga::DevCounter::kTxIcrcGen), c(fpga::DevCounter::kTxIcrcDiffer),
                 c(fpga::DevCounter::kRxIcrcDrop), c(fpga::DevCounter::kRxParseDrop),
                 c(fpga::DevCounter::kWqIn), c(fpga::DevCounter::kRetransCnt));
  }
  card_.reset();
  offload_.reset();
  own_dev_.reset();
  own_eng_.reset();
}

Resources::~Resources() {
  for (auto* q : qps)
    if (q) eng.destroy_qp(q);
  for (auto* s : srqs)
    if (s) eng.destroy_srq(s);
  for (auto* m : mrs)
    if (m) eng.dereg_mr(m);
  for (auto* c : cqs)
    if (c) eng.destroy_cq(c);
  for (auto* p : pds)
    if (p) eng.dealloc_pd(p);
}

void Poller::yield() { sched_yield(); }

wire::MacAddr Env::resolve(wire::Ipv4Addr peer, double seconds) {
  const auto mac = port::resolve_wait(loop, peer, seconds);
  if (!mac) fail("no ARP answer from " + ctl::to_string(peer));
  return *mac;
}

Oob::Oob(Poller& env, std::string server, unsigned port, double timeout_s)
    : env_(env), server_(std::move(server)), port_(port), timeout_s_(timeout_s) {
  if (client()) return;
  try {
    listen_fd_ = ctl::tcp_listen(wire::Ipv4Addr{}, static_cast<std::uint16_t>(port_));
  } catch (const std::runtime_error& e) {
    fail(e.what());
  }
  fcntl(listen_fd_, F_SETFL, O_NONBLOCK);
}

Oob::Oob(Poller& env, int connected_fd, double timeout_s)
    : env_(env), port_(0), timeout_s_(timeout_s), fd_(connected_fd) {
  ctl::tcp_nodelay(fd_);
  fcntl(fd_, F_SETFL, O_NONBLOCK);
}

Oob::~Oob() {
  close();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void Oob::open() {
  if (fd_ >= 0) return;  // accepted elsewhere
  if (!client()) {
    if (!env_.until([&] { return (fd_ = ::accept(listen_fd_, nullptr, nullptr)) >= 0; },
                    timeout_s_))
      fail("no client connected to port " + std::to_string(port_));
    ::close(listen_fd_);
    listen_fd_ = -1;
  } else {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(server_.c_str(), std::to_string(port_).c_str(), &hints, &res) != 0)
      fail("cannot resolve " + server_);
    int err = 0;
    const bool ok = env_.until(
        [&] {
          fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
          if (::connect(fd_, res->ai_addr, res->ai_addrlen) == 0) return true;
          err = errno;
          ::close(fd_);
          fd_ = -1;
          if (err != ECONNREFUSED) return true;
          ::usleep(100000);  // the server may not listen yet
          return false;
        },
        timeout_s_);
    freeaddrinfo(res);
    if (!ok || fd_ < 0)
      fail("couldn't connect to " + server_ + ":" + std::to_string(port_) + ": " +
           std::strerror(err ? err : ETIMEDOUT));
  }
  ctl::tcp_nodelay(fd_);
  fcntl(fd_, F_SETFL, O_NONBLOCK);
}

namespace {
void xfer(Poller& env, int fd, void* buf, std::size_t n, bool write, double to) {
  std::size_t done = 0;
  const bool ok = env.until(
      [&] {
        const ssize_t r = write ? ::send(fd, static_cast<char*>(buf) + done, n - done, MSG_NOSIGNAL)
                                : ::recv(fd, static_cast<char*>(buf) + done, n - done, 0);
        if (r > 0) done += static_cast<std::size_t>(r);
        if (r == 0 && !write) fail("the peer closed the exchange connection");
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
          fail(std::string("exchange: ") + std::strerror(errno));
        return done == n;
      },
      to);
  if (!ok) fail("timed out in the out-of-band exchange");
}
}  // namespace

void Oob::send(const void* buf, std::size_t n) {
  xfer(env_, fd_, const_cast<void*>(buf), n, true, timeout_s_);
}
void Oob::recv(void* buf, std::size_t n) { xfer(env_, fd_, buf, n, false, timeout_s_); }

bool Oob::readable() {
  char c;
  return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) >= 0 ||
         (errno != EAGAIN && errno != EWOULDBLOCK);
}

void Oob::drain_until_closed(double seconds) {
  if (fd_ < 0) return;
  env_.until(
      [&] {
        char b[64];
        const ssize_t r = ::recv(fd_, b, sizeof b, 0);
        return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
      },
      seconds);
}

void Oob::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace roce::perf
