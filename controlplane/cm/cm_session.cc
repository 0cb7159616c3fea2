/// @file
/// CmSession: rdma_cm's port space TCP on a CM hub (cm_session.h).
#include "controlplane/cm/cm_session.h"

#include <algorithm>
#include <cerrno>
#include <random>

namespace roce::cm {

namespace {
constexpr std::size_t kReqPrivate = kReqUserPrivateSize;  // after the cma header
constexpr std::size_t kRepPrivate = 196;
constexpr std::size_t kRejPrivate = 148;

std::uint32_t random24() {
  static thread_local std::mt19937 rng(std::random_device{}());
  return rng() & 0xFFFFFF;
}
}  // namespace

CmSession::CmSession(std::shared_ptr<CmHub> hub, wire::Ipv4Addr local, std::uint8_t path_mtu,
                     EventFn fn)
    : hub_(std::move(hub)), local_(local), path_mtu_(path_mtu), fn_(std::move(fn)) {
  owner_ = hub_->add_owner([this](const CmEvent& e) { on_event(e); });
}

CmSession::~CmSession() {
  for (const std::uint32_t id : sidr_requests_) {
    auto it = ids_.find(id);
    if (it != ids_.end()) hub_->agent().cm().sidr_reject(it->second, SidrStatus::kReject);
  }
  for (auto& [id, c] : ids_) {
    engine::Qp* qp = hub_->agent().qp_of(c);
    if (qp) hub_->agent().release(qp);
  }
  hub_->remove_owner(owner_);
}

int CmSession::may_listen(std::uint16_t port) const {
  if (port == 0) return EINVAL;
  if (port < 1024 && !limits_.low_ports) return EACCES;
  if (ports_.size() + udp_ports_.size() >= limits_.max_listens) return EDQUOT;
  return 0;
}

int CmSession::listen(std::uint16_t port) {
  if (std::find(ports_.begin(), ports_.end(), port) != ports_.end()) return 0;  // already
  if (const int rc = may_listen(port)) return rc;
  if (!hub_->listen(owner_, service_id(PortSpace::kTcp, port))) return EADDRINUSE;
  if (std::find(ports_.begin(), ports_.end(), port) == ports_.end()) ports_.push_back(port);
  return 0;
}

int CmSession::sidr_listen(std::uint16_t port) {
  if (std::find(udp_ports_.begin(), udp_ports_.end(), port) != udp_ports_.end()) return 0;
  if (const int rc = may_listen(port)) return rc;
  if (!hub_->listen(owner_, service_id(PortSpace::kUdp, port))) return EADDRINUSE;
  if (std::find(udp_ports_.begin(), udp_ports_.end(), port) == udp_ports_.end())
    udp_ports_.push_back(port);
  return 0;
}

int CmSession::unlisten(std::uint16_t port, bool udp) {
  // Only our own listens: another owner's port (a client's, a hosted service's) stays.
  std::vector<std::uint16_t>& ours = udp ? udp_ports_ : ports_;
  auto it = std::find(ours.begin(), ours.end(), port);
  if (it == ours.end()) return ENOENT;
  ours.erase(it);
  hub_->unlisten(owner_, service_id(udp ? PortSpace::kUdp : PortSpace::kTcp, port));
  return 0;
}

int CmSession::sidr_resolve(wire::Ipv4Addr dst, std::uint16_t port,
                            std::span<const std::uint8_t> private_data, std::uint32_t& id) {
  if (port == 0 || private_data.size() > kSidrReqPrivateSize - kCmaHeaderSize) return EINVAL;
  if (ids_.size() >= limits_.max_conns) return EDQUOT;
  SidrParams p;
  p.peer.gid = wire::ipv4_mapped(dst);
  p.service_id = service_id(PortSpace::kUdp, port);
  p.cma = CmaHeader::ipv4(local_, ephemeral_port(), dst);
  p.private_data.assign(private_data.begin(), private_data.end());
  const auto cid = hub_->sidr_resolve(owner_, p);
  if (!cid) return ENOMEM;  // the CM is full
  id = new_id();
  ids_[id] = *cid;
  by_cm_[*cid] = id;
  peers_[id] = dst;
  resolving_.insert(id);
  return 0;
}

int CmSession::sidr_accept(std::uint32_t id, std::uint32_t qpn, std::uint32_t qkey,
                           std::span<const std::uint8_t> private_data) {
  auto it = ids_.find(id);
  if (it == ids_.end()) return ENOENT;
  if (private_data.size() > kSidrRepPrivateSize) return EINVAL;
  const CmStatus st =
      hub_->agent().cm().sidr_accept(it->second, wire::Qpn(qpn), qkey, private_data);
  if (st == CmStatus::kNoSuchConn) return ENOENT;
  if (st != CmStatus::kOk) return EINVAL;
  forget(id);  // answered: the CM repeats the SIDR_REP itself, no event follows
  return 0;
}

int CmSession::sidr_reject(std::uint32_t id) {
  auto it = ids_.find(id);
  if (it == ids_.end()) return ENOENT;
  if (hub_->agent().cm().sidr_reject(it->second, SidrStatus::kReject) != CmStatus::kOk)
    return EINVAL;
  forget(id);
  return 0;
}

int CmSession::connect(engine::Qp* qp, wire::Ipv4Addr dst, std::uint16_t port,
                       const SessionParam& p, std::uint32_t& id) {
  if (qp == nullptr || port == 0 || p.private_data.size() > kReqPrivate) return EINVAL;
  if (hub_->agent().busy(qp)) return EINVAL;
  if (ids_.size() >= limits_.max_conns) return EDQUOT;
  ConnectParams c;
  c.peer.gid = wire::ipv4_mapped(dst);
  c.service_id = service_id(PortSpace::kTcp, port);
  c.starting_psn = wire::Psn(random24());
  c.responder_resources = p.responder_resources;
  c.initiator_depth = p.initiator_depth;
  c.rnr_retry_count = p.rnr_retry;
  c.retry_count = p.retry_count;
  c.path_mtu = path_mtu_;
  c.cma = CmaHeader::ipv4(local_, ephemeral_port(), dst);
  c.private_data = p.private_data;
  c.ece = p.ece;
  const auto cid = hub_->connect(owner_, qp, std::move(c));
  if (!cid) return ENOMEM;  // the CM is full (max_connections) or the QP cannot be bound
  id = new_id();
  ids_[id] = *cid;
  by_cm_[*cid] = id;
  peers_[id] = dst;
  return 0;
}

int CmSession::accept(std::uint32_t id, engine::Qp* qp, const SessionParam& p) {
  auto it = ids_.find(id);
  if (it == ids_.end()) return ENOENT;
  if (qp == nullptr || p.private_data.size() > kRepPrivate || hub_->agent().busy(qp)) return EINVAL;
  AcceptParams a;
  a.starting_psn = wire::Psn(random24());
  a.responder_resources = p.responder_resources;
  a.initiator_depth = p.initiator_depth;
  a.rnr_retry_count = p.rnr_retry;
  a.private_data = p.private_data;
  a.ece = p.ece;
  switch (hub_->agent().accept(it->second, qp, std::move(a))) {
    case CmStatus::kOk:
      return 0;
    case CmStatus::kNoSuchConn:
      return ENOENT;
    case CmStatus::kQpTransitionFailed:
      // No MAC for the peer, or the QP in a wrong state: the CM sent a REJ and forgot the
      // request (no event follows), so the session forgets it too. Otherwise every REQ from
      // an address that never answers ARP would leave its id here for the session's life.
      forget(id);
      return EHOSTUNREACH;
    default:
      return EINVAL;
  }
}

int CmSession::reject(std::uint32_t id, std::span<const std::uint8_t> private_data) {
  auto it = ids_.find(id);
  if (it == ids_.end()) return ENOENT;
  if (private_data.size() > kRejPrivate) return EINVAL;
  if (hub_->agent().reject(it->second, RejReason::kConsumerDefined, private_data) != CmStatus::kOk)
    return EINVAL;
  forget(id);  // the CM forgot it too (no event follows a REJ we send)
  return 0;
}

int CmSession::refuse(std::uint32_t id) {
  if (sidr_requests_.count(id)) return sidr_reject(id);
  auto it = ids_.find(id);
  if (it == ids_.end()) return ENOENT;
  if (hub_->agent().cm().reject(it->second, RejReason::kNoResources) != CmStatus::kOk)
    return EINVAL;
  forget(id);
  return 0;
}

void CmSession::forget(std::uint32_t id) {
  auto it = ids_.find(id);
  if (it == ids_.end()) return;
  by_cm_.erase(it->second);
  peers_.erase(id);
  sidr_requests_.erase(id);
  resolving_.erase(id);
  ids_.erase(it);
}

std::uint32_t CmSession::new_id() {
  // At most ids_.size() + 1 tries: the ids in use are far fewer than 2^32.
  for (;;) {
    const std::uint32_t id = next_id_++;
    if (id != 0 && !ids_.count(id)) return id;
  }
}

int CmSession::disconnect(std::uint32_t id) {
  auto it = ids_.find(id);
  if (it == ids_.end()) return ENOENT;
  return hub_->agent().cm().disconnect(it->second) == CmStatus::kOk ? 0 : EINVAL;
}

int CmSession::notify(std::uint32_t id) {
  auto it = ids_.find(id);
  if (it == ids_.end()) return ENOENT;
  return hub_->agent().cm().notify_established(it->second) == CmStatus::kOk ? 0 : EINVAL;
}

void CmSession::release(engine::Qp* qp) { hub_->agent().release(qp); }

void CmSession::established_by_data(engine::Qp* qp) {
  for (const auto& [id, cid] : ids_)
    if (hub_->agent().qp_of(cid) == qp) hub_->agent().cm().notify_established(cid);
}

std::optional<wire::Ipv4Addr> CmSession::peer_of(std::uint32_t id) const {
  auto it = peers_.find(id);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

void CmSession::on_event(const CmEvent& e) {
  SessionEvent s;
  // The CM listens to a service ID for both kinds of request; rdma_cm's port space says which
  // one it takes (the kernel's cma_check_req_qp_type): SIDR for UDP ports, REQ for TCP ones.
  // A request of the other kind is refused here: an attached owner could not answer a SIDR
  // request at all, and each would hold a CM slot for the half-open timeout.
  if (e.type == CmEventType::kSidrRequest) {
    if (!e.cma || e.cma->ip_version != 4 || port_space_of(e.service_id) != PortSpace::kUdp) {
      hub_->agent().cm().sidr_reject(e.id, SidrStatus::kReject);
      return;
    }
    if (ids_.size() >= limits_.max_conns) {  // the owner's quota
      hub_->agent().cm().sidr_reject(e.id, SidrStatus::kReject);
      return;
    }
    s.id = new_id();
    ids_[s.id] = e.id;
    by_cm_[e.id] = s.id;
    s.type = SessionEventType::kSidrRequest;
    s.peer = e.cma->src_ipv4();
    peers_[s.id] = s.peer;
    sidr_requests_.insert(s.id);
    s.port = port_of(e.service_id);
    s.private_data = e.private_data;
    fn_(std::move(s));
    return;
  }
  if (e.type == CmEventType::kConnectRequest) {
    // rdma_cm's IPv4 port space only: its header names both addresses.
    if (!e.cma || e.cma->ip_version != 4 || port_space_of(e.service_id) != PortSpace::kTcp) {
      hub_->agent().cm().reject(e.id, RejReason::kInvalidServiceId);
      return;
    }
    if (ids_.size() >= limits_.max_conns) {  // the owner's quota: as a full listen backlog
      hub_->agent().cm().reject(e.id, RejReason::kNoResources);
      return;
    }
    s.id = new_id();
    ids_[s.id] = e.id;
    by_cm_[e.id] = s.id;
    s.type = SessionEventType::kConnectRequest;
    s.peer = e.cma->src_ipv4();
    peers_[s.id] = s.peer;
    s.port = port_of(e.service_id);
    s.responder_resources = e.qp.max_rd_atomic;   // the peer's Responder Resources
    s.initiator_depth = e.qp.max_dest_rd_atomic;  // the peer's Initiator Depth
    s.private_data = e.private_data;
    s.ece = e.qp.remote_ece;
    fn_(std::move(s));
    return;
  }
  auto it = by_cm_.find(e.id);
  if (it == by_cm_.end()) return;
  s.id = it->second;
  s.peer = wire::Ipv4Addr{wire::load_be32(e.peer.gid.b.data() + 12)};
  s.private_data = e.private_data;
  switch (e.type) {
    case CmEventType::kEstablished:
      s.type = SessionEventType::kEstablished;
      s.qp_num = e.qp.local_qpn.raw();
      s.ece = e.qp.remote_ece;
      if (const engine::Qp* qp = hub_->agent().qp_of(e.id)) s.selective_repeat = qp->req.sr;
      break;
    case CmEventType::kRejected:
      s.type = SessionEventType::kRejected;
      s.reason = static_cast<std::uint32_t>(e.reason);
      break;
    case CmEventType::kUnreachable:
      s.type = SessionEventType::kUnreachable;
      break;
    case CmEventType::kConnectError:
      s.type = SessionEventType::kConnectError;
      break;
    case CmEventType::kDisconnected:
      s.type = SessionEventType::kDisconnected;
      s.remote = e.remote;
      break;
    case CmEventType::kSidrReply:
      s.type = SessionEventType::kSidrReply;
      s.sidr_status = static_cast<std::uint8_t>(e.sidr_status);
      s.sidr_qpn = e.sidr_qpn.raw();
      s.sidr_qkey = e.sidr_qkey;
      break;
    case CmEventType::kTimewaitExit:
      forget(it->second);
      return;
    default:
      return;
  }
  if (s.type == SessionEventType::kRejected || s.type == SessionEventType::kUnreachable ||
      s.type == SessionEventType::kConnectError || s.type == SessionEventType::kSidrReply) {
    forget(s.id);  // the connection is over: nothing more will come for it
  }
  fn_(std::move(s));
}

}  // namespace roce::cm
