/// @file
/// What roce-perf's rdma_cm tools (rping, ucmatose, udaddy) share: the CM agent's configuration
/// on an Env, the link options of their command lines, and the whole main of the cmatose family
/// (ucmatose, udaddy).
#pragma once

#include <boost/program_options.hpp>
#include <functional>
#include <string>

#include "apps/perf/env.h"
#include "controlplane/cm/cm_hub.h"

namespace roce::perf {

/// A CM agent for `env`: the CA GUID is the EUI-64 of our MAC, TIDs and communication IDs are
/// seeded at random (a peer remembers old ones in timewait), and peer MACs come from the
/// port's ARP cache (a miss sends an ARP request; the CM's retransmission finds the answer).
cm::CmAgentConfig cm_agent_config(Env& env);

/// The value of --vlan (into `v`): a VLAN ID between 1 and 4094, else a program_options::error.
boost::program_options::typed_value<std::string>* vlan_value(unsigned* v);

/// Parses argv[1..] by `d` into `vm` (throws program_options::error); with --help prints `d`
/// and returns false: the tool then exits 0.
bool parse_args(int argc, char** argv, const boost::program_options::options_description& d,
                boost::program_options::variables_map& vm);

/// The options every tool shares (--iface, --ip, --mac, --netdev-mtu, --vlan, --timeout, --json,
/// --pcap, --tx-drop, --rx-drop, --fault-seed), written to `link`, `timeout_s` and `json`.
struct LinkFlags {
  LinkOpts link;
  double timeout_s = 60;
  std::string json;
  double tx_drop = 0, rx_drop = 0;
  std::uint64_t seed = 1;

  void add_to(boost::program_options::options_description& d);
  /// Checks the values and sets up the fault policies; throws program_options::error.
  void finish();
};

/// The flags of librdmacm's cmatose family (ucmatose, udaddy).
struct CmatoseOpts {
  LinkFlags lf;
  std::string server;  ///< -s: the server's address (we are the client); empty: we serve
  std::string bind;    ///< -b
  unsigned port = 7471, connections = 1, count = 10, size = 100;
};

/// What a cmatose-family test reports: the messages each way per connection as printed, and
/// as written to the JSON file, and the seconds the test took.
struct CmatoseResult {
  unsigned printed = 0, recorded = 0;
  double seconds = 0;
};

/// The description of one cmatose-family tool for cmatose_main.
struct CmatoseTool {
  const char* name;          ///< "ucmatose"
  const char* usage;         ///< the usage text of --help
  const char* size_help;     ///< the help of -S
  const char* port_help;     ///< the help of -p
  unsigned port;             ///< default rdma_cm port
  unsigned max_size;         ///< the largest -S
  const char* max_size_why;  ///< the error when -S is larger
  /// Runs the test on `env` (server or client by `o.server`), times it, and keeps polling a
  /// moment longer while its CM agent still exists (a peer's repeated MAD is answered).
  std::function<CmatoseResult(Env& env, const CmatoseOpts& o)> run;
};

/// The whole main of a cmatose-family tool: its command line, the test, its report.
int cmatose_main(int argc, char** argv, const CmatoseTool& tool);

}  // namespace roce::perf
