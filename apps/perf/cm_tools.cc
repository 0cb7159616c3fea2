/// @file
/// roce-perf's rdma_cm tools: shared set-up.
#include "apps/perf/cm_tools.h"

#include <cstdio>
#include <iostream>
#include <random>

#include "controlplane/address.h"

namespace roce::perf {

namespace po = boost::program_options;

cm::CmAgentConfig cm_agent_config(Env& env) {
  return cm::agent_config(
      env.eng.config().mac, env.cm_connections, [] { return port::now_ns(); },
      [&env](wire::Ipv4Addr ip) {
        auto mac = env.loop.neighbour().lookup(ip);
        if (!mac) env.loop.resolve(ip);
        return mac;
      });
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

bool parse_args(int argc, char** argv, const po::options_description& d, po::variables_map& vm) {
  po::store(po::command_line_parser(argc - 1, argv + 1).options(d).run(), vm);
  po::notify(vm);
  if (vm.count("help") == 0) return true;
  std::cout << d << '\n';
  return false;
}

void LinkFlags::add_to(po::options_description& d) {
  d.add_options()("iface", po::value(&link.iface), "kernel interface for the RoCE traffic")(
      "pmd", po::value(&link.pmd)->default_value(link.pmd),
      "DPDK driver on that interface: af_packet, af_xdp or tap (creates it)")(
      "ip", po::value(&link.ip)->default_value(link.ip), "our RoCE IPv4 address (GID ::ffff:IP)")(
      "mac", po::value(&link.mac)->default_value(link.mac), "our MAC address")(
      "netdev-mtu", po::value(&link.netdev_mtu)->default_value(link.netdev_mtu),
      "IP MTU of the link")("vlan", vlan_value(&link.vlan), "802.1Q VLAN of our port (1-4094)")(
      "timeout", po::value(&timeout_s)->default_value(timeout_s),
      "seconds before a stalled step gives up")("json", po::value(&json),
                                                "write the results as JSON to this file")(
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

int cmatose_main(int argc, char** argv, const CmatoseTool& tool) {
  namespace po = boost::program_options;
  CmatoseOpts o;
  o.port = tool.port;
  po::options_description d(tool.usage);
  d.add_options()("help,h", "print this help")("server,s", po::value(&o.server),
                                               "the server's RoCE IP (we are the client)")(
      "bind,b", po::value(&o.bind), "server: address to bind to")(
      "connections,c", po::value(&o.connections)->default_value(o.connections), "connections")(
      "count,C", po::value(&o.count)->default_value(o.count), "messages per connection")(
      "size,S", po::value(&o.size)->default_value(o.size), tool.size_help)(
      "port,p", po::value(&o.port)->default_value(o.port), tool.port_help);
  o.lf.add_to(d);
  try {
    po::variables_map vm;
    if (!parse_args(argc, argv, d, vm)) return 0;
    if (o.connections == 0 || o.connections > 64) throw po::error("-c must be 1..64");
    if (o.count > 1024) throw po::error("-C must be at most 1024");
    if (o.size > tool.max_size) throw po::error(tool.max_size_why);
    if (o.port == 0 || o.port > 65535) throw po::error("-p must be 1..65535");
    o.lf.finish();
  } catch (const po::error& e) {
    std::cerr << "roce-perf: " << e.what() << "\n(try roce-perf " << tool.name << " --help)\n";
    return 2;
  }
  try {
    {
      Env env(o.lf.link);
      const CmatoseResult r = tool.run(env, o);
      const double secs = r.seconds;
      std::printf("test complete\n");
      std::printf("%u connections, %u messages of %u bytes each way in %.2f seconds\n",
                  o.connections, r.printed, o.size, secs);
      std::printf("return status 0\n");
      if (!o.lf.json.empty()) {
        std::FILE* j = std::fopen(o.lf.json.c_str(), "w");
        if (j) {
          std::fprintf(j,
                       "{\"test\":\"%s\",\"role\":\"%s\",\"connections\":%u,\"count\":%u,"
                       "\"size\":%u,\"seconds\":%g}\n",
                       tool.name, o.server.empty() ? "server" : "client", o.connections, r.recorded,
                       o.size, secs);
          std::fclose(j);
        }
      }
    }
    port::eal_cleanup();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "roce-perf: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace roce::perf
