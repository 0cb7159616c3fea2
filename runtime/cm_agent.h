/// @file
/// The rdma_cm agent's configuration on a runtime::Env: what every in-process program that
/// speaks the connection manager on its own engine gives cm::CmAgent (or cm::CmHub::get).
#pragma once

#include "controlplane/cm/cm_hub.h"
#include "runtime/env.h"

namespace roce::runtime {

/// A CM agent for `env`: the CA GUID is the EUI-64 of our MAC, TIDs and communication IDs are
/// seeded at random (a peer remembers old ones in timewait), at most `env.cm_connections`
/// connections, and peer MACs come from the port's ARP cache (a miss sends an ARP request; the
/// CM's retransmission finds the answer).
cm::CmAgentConfig cm_agent_config(Env& env);

}  // namespace roce::runtime
