/// @file
/// roce-perf: rdma-core's test tools, spoken by the appliance. The first subcommands are
/// `rc_pingpong` and `ud_pingpong`, wire- and exchange-compatible with ibv_rc_pingpong and
/// ibv_ud_pingpong (rdma-core libibverbs/examples): the TCP exchange on port 18515 of
/// "lid:qpn:psn:gid" (52 bytes with the NUL, then "done"), then a strict ping-pong of RC SENDs,
/// or of UD SENDs with Q_Key 0x11111111 received behind a 40-byte GRH. Our side runs the RoCE
/// traffic on a DPDK port and the exchange on a kernel TCP socket, like a management interface.
///
///   roce-perf rc_pingpong --iface IF --ip A.B.C.D [--mac M] [-p 18515] [-s 4096] [-n 1000]
///                         [-m 1024] [-r 500] [SERVER]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/common/pcap_writer.h"
#include "controlplane/address.h"
#include "dataplane/port/dpdk_port.h"

namespace po = boost::program_options;
using namespace roce;
using namespace roce::engine;

namespace {

struct Opts {
  std::string server, iface, json, pcap;
  std::string ip = "192.0.2.100", mac = "02:00:00:00:00:64";
  unsigned port = 18515, size = 4096, iters = 1000, mtu = 1024, rx_depth = 500;
  double timeout_s = 60;
};

[[noreturn]] void fail(const std::string& m) {
  std::fprintf(stderr, "roce-perf: %s\n", m.c_str());
  std::exit(1);
}

// Exact-length read/write on a non-blocking socket while the dataplane keeps running (the peer
// may ARP for us in the middle of the exchange).
void xfer(port::PollLoop& loop, int fd, void* buf, std::size_t n, bool write, double to) {
  std::size_t done = 0;
  const bool ok = poll_until(
      loop,
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

// Q_Key of ibv_ud_pingpong (and of perftest's UD tests).
constexpr std::uint32_t kPingpongQkey = 0x11111111;

Mtu mtu_enum(unsigned m) {
  switch (m) {
    case 256:
      return Mtu::k256;
    case 512:
      return Mtu::k512;
    case 1024:
      return Mtu::k1024;
    case 2048:
      return Mtu::k2048;
    case 4096:
      return Mtu::k4096;
  }
  fail("-m must be 256, 512, 1024, 2048 or 4096");
}

int pingpong(const Opts& o, bool ud) {
  const auto ip = ctl::parse_ipv4(o.ip);
  const auto mac = ctl::parse_mac(o.mac);
  if (!ip || !mac) fail("--ip and --mac must be an IPv4 address and a MAC address");
  if (o.iface.empty()) fail("--iface IF (the interface for the RoCE traffic) is required");
  port::eal_init({"--no-huge", "--no-shconf", "-m", "256", "--no-pci", "--log-level=*:error",
                  "--file-prefix=roceperf" + std::to_string(getpid()), "-l", "0",
                  "--vdev=net_af_packet0,iface=" + o.iface + ",qpairs=1"});
  EngineConfig ec;
  ec.mac = *mac;
  ec.ipv4 = *ip;
  ec.advertise_credits = false;  // as rxe
  Engine eng(ec);
  port::PortSpec ps;
  ps.device = "net_af_packet0";
  ps.mac = *mac;
  ps.mbufs = 4096;
  port::DpdkPort dev(ps);
  port::PollLoop loop(dev, eng);
  std::unique_ptr<apps::PcapWriter> capture;
  if (!o.pcap.empty()) {
    capture = std::make_unique<apps::PcapWriter>(o.pcap);
    loop.tap = [&](std::span<const std::uint8_t> f, bool) { capture->write(f, port::now_ns()); };
  }
  port::poll_until(
      loop, [&] { return dev.link_up(); }, 10);

  Pd* pd = eng.alloc_pd();
  Cq* cq = eng.create_cq(o.rx_depth + 16);
  Qp* qp =
      eng.create_qp(pd, ud ? QpType::kUd : QpType::kRc, cq, cq, QpCap{16, o.rx_depth, 1, 1, 0});
  // UD receive buffers start with 40 bytes for the GRH (ibv_ud_pingpong posts size + 40).
  const std::uint32_t grh = ud ? 40 : 0;
  std::vector<std::uint8_t> buf(o.size, 0x7b), rbuf(o.size + grh);
  Mr* mr = eng.reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  Mr* rmr = eng.reg_mr(pd, rbuf.data(), rbuf.size(), kAccessLocalWrite);
  if (!qp || !mr || !rmr) fail("cannot create the QP or register memory");
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = 0;
  a.qkey = kPingpongQkey;
  eng.modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | (ud ? kQpQkey : kQpAccessFlags));
  Sge rs{reinterpret_cast<std::uint64_t>(rbuf.data()), o.size + grh, rmr->key};
  RecvWr rwr;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  for (unsigned i = 0; i < o.rx_depth; ++i) eng.post_recv(qp, &rwr, nullptr);

  // "%04x:%06x:%06x:%s": lid, qpn, psn, and the GID as 32 hex digits, NUL included (52 bytes).
  std::srand(static_cast<unsigned>(port::now_ns()));
  const std::uint32_t my_psn = static_cast<std::uint32_t>(std::rand()) & 0xFFFFFF;
  const wire::Ipv6Addr my_gid = ctl::gid_from_ipv4(*ip);
  char mine[52] = {};
  std::string gid_hex;
  for (auto b : my_gid.b) {
    char h[3];
    std::snprintf(h, sizeof h, "%02x", b);
    gid_hex += h;
  }
  std::snprintf(mine, sizeof mine, "%04x:%06x:%06x:%s", 0, qp->qpn, my_psn, gid_hex.c_str());

  int fd = -1;
  if (o.server.empty()) {
    const int l = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(o.port));
    if (::bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(l, 1) != 0)
      fail("cannot listen on port " + std::to_string(o.port) + ": " + std::strerror(errno));
    fcntl(l, F_SETFL, O_NONBLOCK);
    std::printf("  local address:  LID 0x0000, QPN 0x%06x, PSN 0x%06x, GID %s\n", qp->qpn, my_psn,
                ctl::to_string(my_gid).c_str());
    std::fflush(stdout);
    if (!port::poll_until(
            loop, [&] { return (fd = ::accept(l, nullptr, nullptr)) >= 0; }, o.timeout_s))
      fail("no client connected");
    ::close(l);
  } else {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(o.server.c_str(), std::to_string(o.port).c_str(), &hints, &res) != 0)
      fail("cannot resolve " + o.server);
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, res->ai_addr, res->ai_addrlen) != 0)
      fail("couldn't connect to " + o.server + ":" + std::to_string(o.port) + ": " +
           std::strerror(errno));
    freeaddrinfo(res);
    std::printf("  local address:  LID 0x0000, QPN 0x%06x, PSN 0x%06x, GID %s\n", qp->qpn, my_psn,
                ctl::to_string(my_gid).c_str());
  }
  fcntl(fd, F_SETFL, O_NONBLOCK);
  char theirs[52] = {};
  const bool client = !o.server.empty();
  if (client) xfer(loop, fd, mine, sizeof mine, true, o.timeout_s);
  xfer(loop, fd, theirs, sizeof theirs, false, o.timeout_s);
  unsigned lid = 0, rqpn = 0, rpsn = 0;
  char rgid_hex[33] = {};
  if (std::sscanf(theirs, "%x:%x:%x:%32s", &lid, &rqpn, &rpsn, rgid_hex) != 4 ||
      std::strlen(rgid_hex) != 32)
    fail(std::string("malformed peer message '") +
         std::string(theirs, strnlen(theirs, sizeof theirs)) + "'");
  wire::Ipv6Addr rgid;
  for (int i = 0; i < 16; ++i) {
    unsigned v;
    std::sscanf(rgid_hex + 2 * i, "%2x", &v);
    rgid.b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v);
  }
  const auto rip = ctl::ipv4_from_gid(rgid);
  if (!rip)
    fail("the peer's GID " + ctl::to_string(rgid) +
         " is not IPv4-mapped (use its RoCEv2 IPv4 GID index)");
  std::printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", lid, rqpn, rpsn,
              ctl::to_string(rgid).c_str());
  // Resolve the peer's MAC with ARP, as the kernel would.
  const auto peer_mac = port::resolve_wait(loop, *rip, 10);
  if (!peer_mac) fail("no ARP answer from " + ctl::to_string(*rip));
  AddressVector av;  // UD: where every datagram goes
  av.dgid = rgid;
  av.dmac = *peer_mac;
  av.hop_limit = 64;
  if (ud) {
    a.qp_state = QpState::kRtr;
    if (eng.modify_qp(qp, a, kQpState) != kOk) fail("failed to modify QP to RTR");
    a.qp_state = QpState::kRts;
    a.sq_psn = my_psn;
    if (eng.modify_qp(qp, a, kQpState | kQpSqPsn) != kOk) fail("failed to modify QP to RTS");
  } else {
    a.qp_state = QpState::kRtr;
    a.path_mtu = mtu_enum(o.mtu);
    a.dest_qp_num = rqpn;
    a.rq_psn = rpsn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah.dgid = rgid;
    a.ah.dmac = *peer_mac;
    a.ah.hop_limit = 64;  // ibv_rc_pingpong uses 1; 64 keeps the frames routable
    if (eng.modify_qp(qp, a,
                      kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                          kQpMinRnrTimer) != kOk)
      fail("failed to modify QP to RTR");
    a.qp_state = QpState::kRts;
    a.sq_psn = my_psn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (eng.modify_qp(
            qp, a,
            kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic) != kOk)
      fail("failed to modify QP to RTS");
  }
  char done[5] = "done";
  if (!client) {
    xfer(loop, fd, mine, sizeof mine, true, o.timeout_s);
    xfer(loop, fd, done, sizeof done, false, o.timeout_s);
  } else {
    xfer(loop, fd, done, sizeof done, true, o.timeout_s);
  }
  ::close(fd);

  // Ping-pong: the client sends first; each side sends after it has received.
  Sge ss{reinterpret_cast<std::uint64_t>(buf.data()), o.size, mr->key};
  SendWr swr;
  swr.opcode = WrOpcode::kSend;
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.send_flags = kSendSignaled;
  swr.ud = {&av, rqpn, kPingpongQkey};
  unsigned scnt = 0, rcnt = 0;
  bool send_busy = false;
  bool may_send = client;
  const std::uint64_t t0 = port::now_ns();
  std::uint64_t bytes_ok = 0;
  const bool ok = poll_until(
      loop,
      [&] {
        if (may_send && !send_busy && scnt < o.iters) {
          if (eng.post_send(qp, &swr, nullptr) != kOk) fail("post_send failed");
          send_busy = true;
          may_send = false;
        }
        Wc wc[16];
        const int n = eng.poll_cq(cq, 16, wc);
        for (int i = 0; i < n; ++i) {
          if (wc[i].status != WcStatus::kSuccess)
            fail("completion with status " + std::string(to_string(wc[i].status)));
          if (wc[i].opcode == WcOpcode::kSend) {
            send_busy = false;
            ++scnt;
          } else {
            if (wc[i].byte_len != o.size + grh)
              fail("received " + std::to_string(wc[i].byte_len) + " bytes");
            bytes_ok += wc[i].byte_len;
            ++rcnt;
            eng.post_recv(qp, &rwr, nullptr);
            may_send = true;
          }
        }
        return scnt >= o.iters && rcnt >= o.iters;
      },
      o.timeout_s);
  if (!ok)
    fail("ping-pong timed out after " + std::to_string(scnt) + " sends and " +
         std::to_string(rcnt) + " receives");
  const double secs = static_cast<double>(port::now_ns() - t0) / 1e9;
  const double bytes = 2.0 * o.size * o.iters;
  std::printf("%.0f bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, secs, bytes * 8 / secs / 1e6);
  std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", o.iters, secs, secs * 1e6 / o.iters);
  const auto& st = eng.stats();
  std::printf("retransmitted %llu, timeouts %llu, RNR NAKs received %llu, rx drops %llu\n",
              static_cast<unsigned long long>(st.get(Counter::kRetransmittedPackets)),
              static_cast<unsigned long long>(st.get(Counter::kRetransmitTimeouts)),
              static_cast<unsigned long long>(st.get(Counter::kRnrNakRcvd)),
              static_cast<unsigned long long>(st.get(Counter::kRxDropVerdict) +
                                              st.get(Counter::kRxDropUnexpected)));
  if (!o.json.empty()) {
    std::ofstream j(o.json);
    j << "{\"test\":\"" << (ud ? "ud_pingpong" : "rc_pingpong") << "\",\"size\":" << o.size
      << ",\"iters\":" << o.iters << ",\"mtu\":" << o.mtu << ",\"seconds\":" << secs
      << ",\"mbit_per_sec\":" << bytes * 8 / secs / 1e6
      << ",\"usec_per_iter\":" << secs * 1e6 / o.iters
      << ",\"retransmitted\":" << st.get(Counter::kRetransmittedPackets) << "}\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  std::string cmd;
  po::options_description desc(
      "Usage: roce-perf rc_pingpong|ud_pingpong --iface IF [options] [SERVER]\n\n"
      "rdma-core test tools spoken by the appliance (rc_pingpong, ud_pingpong for "
      "now).\n\nOptions");
  desc.add_options()("help,h", "print this help")(
      "iface", po::value(&o.iface), "network interface for the RoCE traffic (net_af_packet)")(
      "ip", po::value(&o.ip)->default_value(o.ip), "our RoCE IPv4 address (GID ::ffff:IP)")(
      "mac", po::value(&o.mac)->default_value(o.mac), "our MAC address")(
      "port,p", po::value(&o.port)->default_value(o.port), "TCP port of the exchange")(
      "size,s", po::value(&o.size)->default_value(o.size), "message size")(
      "iters,n", po::value(&o.iters)->default_value(o.iters), "number of exchanges")(
      "mtu,m", po::value(&o.mtu)->default_value(o.mtu),
      "path MTU (not negotiated: use the peer's -m)")(
      "rx-depth,r", po::value(&o.rx_depth)->default_value(o.rx_depth), "receives to post")(
      "gid-idx,g", po::value<int>(), "accepted for compatibility (our GID is ::ffff:IP)")(
      "timeout", po::value(&o.timeout_s)->default_value(o.timeout_s), "seconds before giving up")(
      "json", po::value(&o.json), "write the results as JSON to this file")(
      "pcap", po::value(&o.pcap), "capture every frame sent and received to this pcap file")(
      "command", po::value(&cmd), "rc_pingpong or ud_pingpong")("server", po::value(&o.server),
                                                                "server to connect to");
  po::positional_options_description pos;
  pos.add("command", 1).add("server", 1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    po::notify(vm);
    if (vm.count("help") || cmd.empty()) {
      std::cout << desc << '\n';
      return cmd.empty() && !vm.count("help") ? 2 : 0;
    }
    if (cmd != "rc_pingpong" && cmd != "ud_pingpong")
      throw po::error("unknown test '" + cmd + "' (available: rc_pingpong, ud_pingpong)");
    if (cmd == "ud_pingpong" && o.size > o.mtu)
      throw po::error("ud_pingpong: -s must not exceed -m");
    if (o.size == 0 || o.size > (1u << 30)) throw po::error("-s must be between 1 and 1073741824");
    if (o.iters == 0) throw po::error("-n must be at least 1");
    if (o.rx_depth == 0 || o.rx_depth > 16384) throw po::error("-r must be between 1 and 16384");
  } catch (const po::error& e) {
    std::cerr << "roce-perf: " << e.what() << "\n(try --help)\n";
    return 2;
  }
  try {
    const int rc = pingpong(o, cmd == "ud_pingpong");  // ports and engines are gone on return
    port::eal_cleanup();
    return rc;
  } catch (const std::exception& e) {
    std::cerr << "roce-perf: " << e.what() << '\n';
    return 1;
  }
}
