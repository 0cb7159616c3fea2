/// @file
/// roce-perf's rdma_cm tools: shared set-up.
#include "apps/perf/cm_tools.h"

#include <random>

#include "controlplane/address.h"

namespace roce::perf {

namespace po = boost::program_options;

cm::CmAgentConfig cm_agent_config(Env& env) {
  cm::CmAgentConfig c;
  const wire::MacAddr m = env.eng.config().mac;
  const std::uint8_t g[8] = {
      static_cast<std::uint8_t>(m.b[0] ^ 2), m.b[1], m.b[2], 0xFF, 0xFE, m.b[3], m.b[4], m.b[5]};
  c.cm.ca_guid = wire::load_be64(g);
  std::random_device rd;
  c.cm.hi_tid = rd();
  c.cm.seed = rd();
  c.clock = [] { return port::now_ns(); };
  c.resolve_mac = [&env](const wire::Ipv6Addr& gid) -> std::optional<wire::MacAddr> {
    const auto ip = ctl::ipv4_from_gid(gid);
    if (!ip) return std::nullopt;
    auto mac = env.loop.neighbour().lookup(*ip);
    if (!mac) env.loop.resolve(*ip);
    return mac;
  };
  return c;
}

void LinkFlags::add_to(po::options_description& d) {
  d.add_options()("iface", po::value(&link.iface),
                  "kernel interface for the RoCE traffic (net_af_packet)")(
      "ip", po::value(&link.ip)->default_value(link.ip), "our RoCE IPv4 address (GID ::ffff:IP)")(
      "mac", po::value(&link.mac)->default_value(link.mac), "our MAC address")(
      "netdev-mtu", po::value(&link.netdev_mtu)->default_value(link.netdev_mtu),
      "IP MTU of the link")("timeout", po::value(&timeout_s)->default_value(timeout_s),
                            "seconds before a stalled step gives up")(
      "json", po::value(&json), "write the results as JSON to this file")(
      "pcap", po::value(&link.pcap), "capture every frame sent and received to this pcap file")(
      "tx-drop", po::value(&tx_drop), "drop this fraction of our transmitted frames")(
      "rx-drop", po::value(&rx_drop), "drop this fraction of our received frames")(
      "fault-seed", po::value(&seed)->default_value(seed), "seed of the fault injection");
}

void LinkFlags::finish() {
  if (tx_drop < 0 || tx_drop >= 1 || rx_drop < 0 || rx_drop >= 1)
    throw po::error("--tx-drop and --rx-drop must be in [0, 1)");
  if (tx_drop > 0) {
    link.tx_faults.drop_rate = tx_drop;
    link.tx_faults.seed = seed;
  }
  if (rx_drop > 0) {
    link.rx_faults.drop_rate = rx_drop;
    link.rx_faults.seed = seed + 1;
  }
}

}  // namespace roce::perf
