/// @file
/// runtime::Env (env.h).
#include "runtime/env.h"

#include <errno.h>  // program_invocation_short_name
#include <sched.h>

#include <cstdio>
#include <stdexcept>

#include "controlplane/address.h"
#include "dataplane/port/pmd_frames.h"
#include "fpga/model/device.h"
#include "runtime/port.h"

namespace roce::runtime {

void fail(const std::string& msg) { throw TestFailure(msg); }

namespace {

PortOptions port_options(const LinkOptions& o) {
  PortOptions po;
  po.spec = link_port_spec(o);
  po.engine = link_engine_config(o);
  po.tx_faults = o.tx_faults;
  po.rx_faults = o.rx_faults;
  if (!o.offload.empty()) {
    po.offload.mode = o.offload;
  } else {
    try {
      if (auto e = env_offload()) po.offload.mode = *e;
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
  }
  if (!is_offload_mode(po.offload.mode))
    fail("offload '" + po.offload.mode + "' is not a mode (icrc, parse, datapath)");
  return po;
}

std::unique_ptr<Port> open_port(const LinkOptions& o) {
  port::eal_init(link_eal_args(o, "roceperf"));  // checks the options (link_vdev)
  return std::make_unique<Port>(port_options(o));
}

}  // namespace

Env::Env(const LinkOptions& o)
    : own_port_(open_port(o)), eng(own_port_->eng()), loop(own_port_->loop()) {
  ip = *ctl::parse_ipv4(o.ip);  // checked by link_vdev
  gid = ctl::gid_from_ipv4(ip);
  if (!o.gateway.empty())  // checked by link_vdev too; the loop is not polled yet
    loop.neighbour().set_gateway(*ctl::parse_ipv4(o.gateway), o.prefix_len);
  if (!o.pcap.empty()) {
    capture = std::make_unique<apps::PcapWriter>(o.pcap);
    loop.tap = [this](std::span<const std::uint8_t> f, bool) { capture->write(f, port::now_ns()); };
  }
  if (own_port_->card()) open_card = [this] { return own_port_->open_card(); };
  port::DpdkPort& dev = own_port_->dev();
  if (dev.offloads().to_string() != "none")
    std::fprintf(stderr, "%s: %s offloads: %s\n", program_invocation_short_name, o.iface.c_str(),
                 dev.offloads().to_string().c_str());
  // A memif server's link comes up when its client connects, which may be much later.
  if (o.pmd != "memif-server")
    until([&] { return dev.link_up_or_redial(); }, o.pmd == "memif" ? 30 : 10);
}

Env::Env(engine::Engine& e, port::PollLoop& l, wire::Ipv4Addr a, std::function<void()> between)
    : between_polls_(std::move(between)), ip(a), gid(ctl::gid_from_ipv4(a)), eng(e), loop(l) {}

Env::~Env() {
  if (!own_port_) return;
  loop.tap = nullptr;
  if (own_port_->offload().on()) {
    const auto all = own_port_->device_counters();
    const auto c = [&](fpga::DevCounter d) {
      return static_cast<unsigned long long>(all[static_cast<std::size_t>(d)]);
    };
    std::fprintf(stderr,
                 "roce-perf: offload %s: %llu RoCE frames in, %llu out, %llu ICRCs written (%llu "
                 "differing), %llu dropped for the ICRC, %llu by the parser; %llu work requests "
                 "on the card, %llu sent again\n",
                 own_port_->offload().mode.c_str(), c(fpga::DevCounter::kRoceRxPkgs),
                 c(fpga::DevCounter::kRoceTxPkgs), c(fpga::DevCounter::kTxIcrcGen),
                 c(fpga::DevCounter::kTxIcrcDiffer), c(fpga::DevCounter::kRxIcrcDrop),
                 c(fpga::DevCounter::kRxParseDrop), c(fpga::DevCounter::kWqIn),
                 c(fpga::DevCounter::kRetransCnt));
  }
  own_port_.reset();
}

client::LocalOptions Env::local_options(const std::string& name) {
  client::LocalOptions o;
  o.engine = &eng;
  o.progress = [this] { loop.poll_once(); };
  o.resolve = [this](wire::Ipv4Addr peer) { return port::resolve_wait(loop, peer, 10); };
  // Context::neighbour, the non-blocking half (librdmacm's rdma_resolve_addr): the ARP cache,
  // a request sent when asked.
  o.neighbour = [this](wire::Ipv4Addr peer, bool ask) {
    if (loop.neighbour().lookup(peer)) return true;
    if (ask) loop.resolve(peer);
    return false;
  };
  // The CM's MADs: the same, never the 10 s wait of `resolve` (a forged REQ's answer stalled
  // the program that long, and had the port ask ARP 50 times).
  o.lookup = [this](wire::Ipv4Addr peer, bool ask) {
    auto mac = loop.neighbour().lookup(peer);
    if (!mac && ask) loop.resolve(peer);
    return mac;
  };
  o.port.name = name;
  o.port.mac = eng.config().mac;
  o.port.ipv4 = ip;
  o.port.gid = gid;
  o.port.max_mtu = eng.config().max_mtu;
  return o;
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

}  // namespace roce::runtime
