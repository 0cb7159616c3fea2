/// @file
/// LinkOptions: the text form, the flags, and what a port, an EAL and an engine make of it.
#include "runtime/link.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "controlplane/address.h"
#include "dataplane/port/pmd_frames.h"
#include "runtime/env.h"

namespace roce::runtime {

namespace po = boost::program_options;

LinkOptions LinkOptions::text_defaults() {
  LinkOptions o;
  o.pmd = "memif-server";
  o.ip = "192.0.2.1";
  o.mac = "02:00:00:00:00:01";
  return o;
}

bool LinkOptions::set_memif(const std::string& socket, const std::string& role) {
  if (role != "server" && role != "client") return false;
  pmd = role == "server" ? "memif-server" : "memif";
  iface = socket;
  return true;
}

void LinkOptions::set_drops(double tx_drop, double rx_drop, std::uint64_t seed) {
  tx_faults.drop_rate = tx_drop;
  tx_faults.seed = seed;
  rx_faults.drop_rate = rx_drop;
  rx_faults.seed = seed + 1;
}

bool parse_link_text(const std::string& text, LinkOptions& c, std::string& err) {
  // The text names the memif end by pmd=memif plus role=, and its socket by socket=.
  std::string pmd = c.memif() ? "memif" : c.pmd;
  std::string role = c.pmd == "memif" ? "client" : "server";
  std::string socket = c.memif() ? c.iface : "";
  std::string iface = c.memif() ? "" : c.iface;
  double tx_drop = c.tx_faults.drop_rate, rx_drop = c.rx_faults.drop_rate,
         reorder = c.tx_faults.reorder_rate;
  std::uint64_t seed = c.tx_faults.seed;
  std::stringstream ss(text);
  std::string kv;
  while (std::getline(ss, kv, ',')) {
    if (kv.empty()) continue;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) {
      err = "'" + kv + "' is not key=value";
      return false;
    }
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    try {
      if (k == "pmd")
        pmd = v;
      else if (k == "socket")
        socket = v;
      else if (k == "role")
        role = v;
      else if (k == "iface")
        iface = v;
      else if (k == "ip")
        c.ip = v;
      else if (k == "mac")
        c.mac = v;
      else if (k == "gateway")
        c.gateway = v;
      else if (k == "prefix_len")
        c.prefix_len = static_cast<unsigned>(std::stoul(v));
      else if (k == "pcap")
        c.pcap = v;
      else if (k == "tx_drop")
        tx_drop = std::stod(v);
      else if (k == "rx_drop")
        rx_drop = std::stod(v);
      else if (k == "reorder")
        reorder = std::stod(v);
      else if (k == "seed")
        seed = std::stoull(v);
      else if (k == "window")
        c.window_bytes = std::stoull(v);
      else if (k == "lcore")
        c.lcore = std::stoi(v);
      else {
        err = "unknown key '" + k + "'";
        return false;
      }
    } catch (const std::exception&) {
      err = "bad number in '" + kv + "'";
      return false;
    }
  }
  if (pmd != "memif" && pmd != "af_packet") {
    err = "pmd must be memif or af_packet";
    return false;
  }
  if (pmd == "memif" && (socket.empty() || !c.set_memif(socket, role))) {
    err = "memif needs socket=PATH and role=server|client";
    return false;
  }
  if (pmd == "af_packet") {
    if (iface.empty()) {
      err = "af_packet needs iface=IF";
      return false;
    }
    c.pmd = pmd;
    c.iface = iface;
  }
  if (!ctl::parse_ipv4(c.ip) || !ctl::parse_mac(c.mac)) {
    err = "ip and mac must be an IPv4 address and a MAC address";
    return false;
  }
  if (!check_gateway(c, err)) return false;
  for (double p : {tx_drop, rx_drop, reorder})
    if (p < 0 || p >= 1) {
      err = "tx_drop, rx_drop and reorder must be in [0, 1)";
      return false;
    }
  c.set_drops(tx_drop, rx_drop, seed);
  if (reorder > 0) {
    c.tx_faults.reorder_rate = reorder;
    c.tx_faults.reorder_window = 4;
  }
  return true;
}

bool check_gateway(const LinkOptions& o, std::string& err) {
  if (o.prefix_len < 1 || o.prefix_len > 32) {
    err = "the prefix length must be 1..32, not " + std::to_string(o.prefix_len);
    return false;
  }
  if (o.gateway.empty()) return true;
  const auto gw = ctl::parse_ipv4(o.gateway);
  const auto ip = ctl::parse_ipv4(o.ip);
  if (!gw) {
    err = "gateway " + o.gateway + " is not an IPv4 address";
    return false;
  }
  const std::uint32_t mask = ~std::uint32_t{0} << (32 - o.prefix_len);
  if (!ip || ((gw->v ^ ip->v) & mask) != 0 || *gw == *ip) {
    err = "gateway " + o.gateway + " is not another address of " + o.ip + "/" +
          std::to_string(o.prefix_len);
    return false;
  }
  return true;
}

std::string link_vdev(const LinkOptions& o) {
  if (!ctl::parse_ipv4(o.ip) || !ctl::parse_mac(o.mac))
    fail("--ip and --mac must be an IPv4 address and a MAC address");
  if (std::string err; !check_gateway(o, err)) fail("--gateway: " + err);
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
  if (o.memif()) {
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

port::PortSpec link_port_spec(const LinkOptions& o) {
  port::PortSpec ps;
  ps.device = o.pmd == "af_xdp" ? "net_af_xdp0"
              : o.pmd == "tap"  ? "net_tap0"
              : o.memif()       ? "net_memif0"
                                : "net_af_packet0";
  ps.mac = *ctl::parse_mac(o.mac);
  ps.set_mac = o.pmd != "tap";
  ps.mtu = static_cast<std::uint16_t>(o.netdev_mtu);
  if (o.vlan != 0) ps.vlan = static_cast<std::uint16_t>(o.vlan);
  // The AF_XDP PMD registers the mbuf pool as UMEM, which counts against the locked-memory
  // limit (8 MiB here): 2048 mbufs of 2 KiB fit.
  ps.mbufs = o.pmd == "af_xdp" ? 2048 : o.memif() ? 8192 : 4096;
  return ps;
}

std::vector<std::string> link_eal_args(const LinkOptions& o, const std::string& prefix,
                                       unsigned mem_mb) {
  return {"--no-huge",
          "--no-shconf",
          "-m",
          std::to_string(mem_mb),
          "--no-pci",
          "--log-level=*:error",
          "--file-prefix=" + prefix + std::to_string(getpid()),
          port::main_lcore_arg(o.lcore),
          link_vdev(o)};
}

engine::EngineConfig link_engine_config(const LinkOptions& o) {
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
  auto& k = ec.congestion;
  k.algorithm = o.cc == "dcqcn"   ? engine::cc::Algorithm::kDcqcn
                : o.cc == "delay" ? engine::cc::Algorithm::kDelay
                                  : engine::cc::Algorithm::kNone;
  if (o.cc_max_rate_mbps != 0) k.dcqcn.max_rate_mbps = k.delay.max_rate_mbps = o.cc_max_rate_mbps;
  ec.selective_repeat = o.selective_repeat;
  return ec;
}

engine::Mtu link_path_mtu(unsigned netdev_mtu, unsigned room) {
  engine::Mtu m = engine::Mtu::k256;
  for (auto c : {engine::Mtu::k512, engine::Mtu::k1024, engine::Mtu::k2048, engine::Mtu::k4096})
    if (engine::mtu_bytes(c) + room <= netdev_mtu) m = c;
  return m;
}

po::typed_value<std::string>* vlan_value(unsigned* v) {
  return po::value<std::string>()->value_name("ID")->notifier([v](const std::string& s) {
    unsigned id = 0;
    for (const char c : s) {
      if (c < '0' || c > '9' || id > 4094) {
        id = 0;
        break;
      }
      id = id * 10 + static_cast<unsigned>(c - '0');
    }
    if (id == 0 || id > 4094)
      throw po::error("--vlan " + s + ": the VLAN ID must be a number between 1 and 4094");
    *v = id;
  });
}

void LinkFlags::add_to(po::options_description& d) {
  d.add_options()("iface", po::value(&link.iface), "kernel interface for the RoCE traffic")(
      "pmd", po::value(&link.pmd)->default_value(link.pmd),
      "DPDK driver on that interface: af_packet, af_xdp, tap (creates it), memif or "
      "memif-server (--iface is then the memif socket's path)")(
      "ip", po::value(&link.ip)->default_value(link.ip), "our RoCE IPv4 address (GID ::ffff:IP)")(
      "mac", po::value(&link.mac)->default_value(link.mac), "our MAC address")(
      "gateway", po::value(&link.gateway),
      "a router on the link: addresses outside our subnet (--prefix-len) go through it")(
      "prefix-len", po::value(&link.prefix_len)->default_value(link.prefix_len),
      "our subnet's prefix length (with --gateway)")(
      "netdev-mtu", po::value(&link.netdev_mtu)->default_value(link.netdev_mtu),
      "IP MTU of the link (9000 for path MTU 4096)")("vlan", vlan_value(&link.vlan),
                                                     "802.1Q VLAN of our port (1-4094)")(
      "lcore", po::value(&link.lcore)->default_value(link.lcore),
      "CPU our poll loop is pinned to (in-process); -1: any CPU of the process")(
      "pcap", po::value(&link.pcap), "capture every frame sent and received to this pcap file")(
      "offload", po::value(&link.offload),
      "the FPGA offload's device model on the port: icrc, parse, or datapath (the WRITE and READ "
      "tests' QPs on the card; docs/fpga.md); default: $ROCE_OFFLOAD, else none")(
      "tx-drop", po::value(&tx_drop), "drop this fraction of our transmitted frames")(
      "rx-drop", po::value(&rx_drop), "drop this fraction of our received frames")(
      "fault-seed", po::value(&seed)->default_value(seed), "seed of the fault injection")(
      "cc", po::value(&link.cc)->default_value(link.cc),
      "congestion control of our QPs: none, dcqcn or delay (docs/congestion.md)")(
      "cc-max-rate-mbps", po::value(&link.cc_max_rate_mbps),
      "with --cc: the rate a QP starts at and recovers to (default: the link's speed as its "
      "driver reports it, else 100000)");
}

void LinkFlags::finish() {
  if (link.cc != "none" && link.cc != "dcqcn" && link.cc != "delay")
    throw po::error("--cc must be none, dcqcn or delay, not '" + link.cc + "'");
  if (tx_drop < 0 || tx_drop >= 1 || rx_drop < 0 || rx_drop >= 1)
    throw po::error("--tx-drop and --rx-drop must be in [0, 1)");
  link.set_drops(tx_drop, rx_drop, seed);
}

}  // namespace roce::runtime
