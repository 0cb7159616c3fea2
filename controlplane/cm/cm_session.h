/// @file
/// One user's rdma_cm on an engine's CM hub, in rdma_cm's terms: the port space TCP over
/// IPv4 (service IDs, the cma header with both addresses), small connection ids, the QPs
/// bound to connections (released before they are destroyed), and events carrying the peer's
/// address, its offer and the private data. Used by the attached clients' lanes (roced) and by
/// libroce's in-process backend, on the thread that owns the engine.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "controlplane/cm/cm_hub.h"

namespace roce::cm {

/// The values of client::CmEventType.
enum class SessionEventType : std::uint8_t {
  kConnectRequest = 1,
  kEstablished,
  kRejected,
  kUnreachable,
  kConnectError,
  kDisconnected,
  kSidrRequest,  ///< a SIDR_REQ to a port of the UDP port space (sidr_listen)
  kSidrReply,    ///< the SIDR_REP of our sidr_resolve (status, QPN, Q_Key)
};

struct SessionEvent {
  SessionEventType type = SessionEventType::kConnectRequest;
  std::uint32_t id = 0;
  std::uint32_t qp_num = 0;
  wire::Ipv4Addr peer;
  std::uint16_t port = 0;
  std::uint8_t responder_resources = 0, initiator_depth = 0;
  std::uint32_t reason = 0;
  bool remote = false;
  std::vector<std::uint8_t> private_data;
  std::uint8_t sidr_status = 0;  ///< kSidrReply: IBA SIDR_REP status (0: success)
  std::uint32_t sidr_qpn = 0, sidr_qkey = 0;
  /// kConnectRequest: the REQ's ECE; kEstablished: the peer's (REQ or REP), zero: none.
  Ece ece;
  bool selective_repeat = false;  ///< kEstablished: the QP runs selective repeat
};

struct SessionParam {
  std::uint8_t responder_resources = 1, initiator_depth = 1, rnr_retry = 7;
  std::vector<std::uint8_t> private_data;
  std::uint8_t retry_count = 7;  ///< connect: the REQ's Retry Count
  /// The owner's ECE (rdma_set_local_ece): what the REQ offers, what the REP answers
  /// (CmAgent::accept makes the answer); zero: none.
  Ece ece;
};

/// What one session may hold (an attached client's quotas); unlimited by default.
struct SessionLimits {
  /// Connections and SIDR exchanges at once, from the first REQ to the end of the timewait:
  /// connect() and sidr_resolve() answer EDQUOT beyond, a peer's REQ gets REJ 3 "no
  /// resources", a SIDR_REQ a SIDR_REP "rejected".
  std::size_t max_conns = SIZE_MAX;
  /// Ports listened on at once, TCP and UDP port spaces together (listen, sidr_listen: EDQUOT).
  std::size_t max_listens = SIZE_MAX;
  /// Ports below 1024 may be listened on (else EACCES, as the kernel's rdma_cm refuses them
  /// without CAP_NET_BIND_SERVICE).
  bool low_ports = true;
};

class CmSession {
 public:
  using EventFn = std::function<void(SessionEvent)>;
  /// `local`: the engine's IPv4 address (the cma header's source); `path_mtu`: the IBA enum
  /// our REQs offer (the port's largest).
  CmSession(std::shared_ptr<CmHub> hub, wire::Ipv4Addr local, std::uint8_t path_mtu, EventFn fn);
  /// Disconnects what is still up (DREQ), answers the SIDR requests still unanswered
  /// (SIDR_REP "rejected", as the kernel when a UD id goes), leaves the hub.
  ~CmSession();
  CmSession(const CmSession&) = delete;
  CmSession& operator=(const CmSession&) = delete;

  void set_limits(const SessionLimits& l) { limits_ = l; }
  /// Connections and SIDR exchanges the session holds (SessionLimits::max_conns).
  std::size_t conns() const { return ids_.size(); }

  /// 0 or an errno value (EADDRINUSE, EINVAL, ENOENT for an unknown id, ENOMEM, EBUSY, EDQUOT
  /// beyond the limits). EINVAL also for a QP that has a connection not yet over (connect,
  /// accept: one connection per QP, as rdma-core refuses a second QP on an id and the kernel a
  /// connected QP's way back to INIT).
  int listen(std::uint16_t port);
  int connect(engine::Qp* qp, wire::Ipv4Addr dst, std::uint16_t port, const SessionParam& p,
              std::uint32_t& id);
  int accept(std::uint32_t id, engine::Qp* qp, const SessionParam& p);
  int reject(std::uint32_t id, std::span<const std::uint8_t> private_data);
  /// A connect request refused by roced, not the application: REJ "no resources" (IBA
  /// 12.6.7.2, as a full listen backlog). Not from inside the session's event callback.
  int refuse(std::uint32_t id);
  int disconnect(std::uint32_t id);
  /// COMM_EST (rdma_notify): data arrived before the RTU; the connection is established.
  int notify(std::uint32_t id);
  /// rdma_cm's UDP port space (UD ids, SIDR): listen on `port`, resolve a peer's port to its
  /// QPN and Q_Key, answer a kSidrRequest. The exchange is over at the reply or the answer.
  int sidr_listen(std::uint16_t port);
  int sidr_resolve(wire::Ipv4Addr dst, std::uint16_t port,
                   std::span<const std::uint8_t> private_data, std::uint32_t& id);
  int sidr_accept(std::uint32_t id, std::uint32_t qpn, std::uint32_t qkey,
                  std::span<const std::uint8_t> private_data);
  int sidr_reject(std::uint32_t id);
  /// Stops listening on `port` of the TCP (or, `udp`, the UDP) port space. ENOENT: not ours.
  int unlisten(std::uint16_t port, bool udp);
  /// Our sidr_resolve exchanges still waiting for their reply (a client's budget).
  std::size_t sidr_resolving() const { return resolving_.size(); }
  /// Before `qp` is destroyed: a connection on it still up is disconnected, and the CM no
  /// longer touches it.
  void release(engine::Qp* qp);
  /// The first data arrived on `qp`, accepted and its RTU still outstanding (IBA's
  /// communication established, rdma-core's IBV_EVENT_COMM_EST and rdma_notify): the CM
  /// stops repeating the REP and reports the connection established.
  void established_by_data(engine::Qp* qp);
  /// The peer of connection `id` (a connect request's requester), if known.
  std::optional<wire::Ipv4Addr> peer_of(std::uint32_t id) const;
  void poll(std::uint64_t now_ns) { hub_->poll(now_ns); }
  CmHub& hub() { return *hub_; }
  std::shared_ptr<CmHub> share_hub() const { return hub_; }

 private:
  void on_event(const CmEvent& e);
  /// An id for a new connection: never 0, never one in use (the counter wraps).
  std::uint32_t new_id();
  void forget(std::uint32_t id);
  std::shared_ptr<CmHub> hub_;
  CmHub::Owner owner_;
  wire::Ipv4Addr local_;
  std::uint8_t path_mtu_;
  EventFn fn_;
  std::uint32_t next_id_ = 1;
  std::map<std::uint32_t, ConnId> ids_;
  std::map<ConnId, std::uint32_t> by_cm_;
  std::map<std::uint32_t, wire::Ipv4Addr> peers_;
  /// 0 or why `port` may not be listened on (SessionLimits).
  int may_listen(std::uint16_t port) const;
  std::vector<std::uint16_t> ports_;
  std::vector<std::uint16_t> udp_ports_;  ///< sidr_listen's
  /// SIDR requests delivered and not yet answered (rejected when the session ends), and our
  /// own SIDR exchanges waiting for their reply.
  std::set<std::uint32_t> sidr_requests_, resolving_;
  SessionLimits limits_;
};

}  // namespace roce::cm
