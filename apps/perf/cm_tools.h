/// @file
/// What roce-perf's rdma_cm tools (rping, ucmatose) share: the CM agent's configuration on an
/// Env, and the link options of their command lines.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "apps/perf/env.h"
#include "controlplane/cm/cm_agent.h"

namespace roce::perf {

/// A CM agent for `env`: the CA GUID is the EUI-64 of our MAC, TIDs and communication IDs are
/// seeded at random (a peer remembers old ones in timewait), and peer MACs come from the
/// port's ARP cache (a miss sends an ARP request; the CM's retransmission finds the answer).
cm::CmAgentConfig cm_agent_config(Env& env);

/// The options every tool shares (--iface, --ip, --mac, --netdev-mtu, --timeout, --json,
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

}  // namespace roce::perf
