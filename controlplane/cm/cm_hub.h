/// @file
/// One rdma_cm agent (QP1) per engine, shared by everyone on that engine who connects through
/// the CM: roced's hosted services (the accelerator RPC) and its attached client processes.
/// IBA allows one GSI QP per port, so they cannot each create their own. A hub hands out owner
/// tokens; listened service IDs and connections belong to an owner, and each CM event goes to
/// the owner of its connection (a connect request: the owner of its service ID). Requests for
/// services nobody listens to are rejected (invalid service ID).
///
/// Threads: like CmAgent, a hub is used only by the thread that owns its engine (an lcore's
/// poll loop); get() itself may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "controlplane/cm/cm_agent.h"

namespace roce::cm {

/// A CM agent's configuration for an engine with MAC `mac`: the CA GUID derived from it
/// (EUI-64), random transaction IDs and seed, the clock, and a neighbour lookup by IPv4 that
/// never waits: the cache's MAC, or nullopt with an ARP request sent when `ask`. The CM sends
/// to whatever source a frame names, so asks are budgeted: kCmArpAsks per 100 ms of `clock`.
inline constexpr int kCmArpAsks = 64;
CmAgentConfig agent_config(
    const wire::MacAddr& mac, std::uint32_t max_connections, std::function<std::uint64_t()> clock,
    std::function<std::optional<wire::MacAddr>(wire::Ipv4Addr, bool ask)> neighbour);

class CmHub {
 public:
  using Owner = std::uint32_t;

  /// The hub of `eng`, created (with `cfg`: the first user's configuration) if it has none.
  /// It lives while someone holds it. Throws std::runtime_error when QP1 cannot be created.
  static std::shared_ptr<CmHub> get(engine::Engine& eng, const CmAgentConfig& cfg);

  CmHub(engine::Engine& eng, CmAgentConfig cfg);
  ~CmHub();
  CmHub(const CmHub&) = delete;
  CmHub& operator=(const CmHub&) = delete;

  Owner add_owner(CmAgent::EventFn on_event);
  /// Stops the owner's listens and forgets its connections (their QPs must have been
  /// release()d or be released by the caller: a connection still up stays in the CM until its
  /// peer or timers end it, with nobody to tell).
  void remove_owner(Owner o);

  /// False when another owner listens to `service_id` (EADDRINUSE for the caller).
  bool listen(Owner o, std::uint64_t service_id);
  void unlisten(Owner o, std::uint64_t service_id);
  std::optional<ConnId> connect(Owner o, engine::Qp* qp, ConnectParams p);
  /// Active SIDR (rdma_cm's UDP port space): the SIDR_REQ; its reply goes to `o`.
  std::optional<ConnId> sidr_resolve(Owner o, const SidrParams& p);
  /// The connection's owner, if it has one.
  std::optional<Owner> owner_of(ConnId id) const;

  /// accept, reject, disconnect, release and the rest: the agent's own calls.
  CmAgent& agent() { return agent_; }
  void poll(std::uint64_t now_ns) { agent_.poll(now_ns); }

 private:
  void route(const CmEvent& ev);
  /// Files `id` under `o`, first forgetting connections the CM no longer has (those that
  /// ended without an event: rejected or refused by their owner, a connect error), once they
  /// outnumber the CM's own: conns_ stays within twice the CM's size.
  void own(ConnId id, Owner o);
  engine::Engine& eng_;
  CmAgent agent_;
  Owner next_owner_ = 1;
  std::map<Owner, CmAgent::EventFn> owners_;
  std::map<std::uint64_t, Owner> services_;  ///< service ID -> owner
  std::map<ConnId, Owner> conns_;
};

}  // namespace roce::cm
