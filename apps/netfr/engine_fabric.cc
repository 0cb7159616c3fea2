/// @file
/// Fabric on the appliance's engine (engine_fabric.h).
#include "apps/netfr/engine_fabric.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <stdexcept>

#include "controlplane/address.h"
#include "runtime/cm_agent.h"

namespace roce::netfr {

using namespace roce::engine;

EngineFabric::EngineFabric(const runtime::LinkOptions& l) {
  env_ = std::make_unique<runtime::Env>(l);
  agent_ = std::make_unique<cm::CmAgent>(env_->eng, runtime::cm_agent_config(*env_),
                                         [this](const cm::CmEvent& e) { on_cm(e); });
  pd_ = env_->eng.alloc_pd();
  cq_ = env_->eng.create_cq(std::min<std::uint32_t>(8192, env_->eng.config().max_cq_depth));
  if (!pd_ || !cq_) throw std::runtime_error("cannot create the PD and CQ");
}

EngineFabric::~EngineFabric() {
  for (auto& [id, c] : conns_) release(c);  // DREQs for those still up
  conns_.clear();
  // Their DREPs, and those of connections disconnected before, come back before the port goes.
  agent_->drain([&] {
    env_->loop.poll_once();
    agent_->poll(port::now_ns());
  });
  agent_.reset();
  if (cq_) env_->eng.destroy_cq(cq_);
  if (pd_) env_->eng.dealloc_pd(pd_);
  env_.reset();
}

std::optional<MrInfo> EngineFabric::reg_mr(void* addr, std::uint64_t length) {
  Mr* m = env_->eng.reg_mr(pd_, addr, length, kAccessLocalWrite | kAccessRemoteWrite);
  if (!m) return std::nullopt;
  MrInfo i;
  i.addr = addr;
  i.length = length;
  i.lkey = i.rkey = m->key;
  i.handle = reinterpret_cast<std::uint64_t>(m);
  return i;
}

void EngineFabric::dereg_mr(const MrInfo& mr) {
  if (mr.handle) env_->eng.dereg_mr(reinterpret_cast<Mr*>(mr.handle));
}

bool EngineFabric::listen(std::uint16_t port) {
  agent_->cm().listen(cm::service_id(cm::PortSpace::kTcp, port));
  return true;
}

Qp* EngineFabric::new_qp(std::uint32_t send_depth, std::uint32_t recv_depth) {
  Qp* qp = env_->eng.create_qp(pd_, QpType::kRc, cq_, cq_, QpCap{send_depth, recv_depth, 1, 1, 0});
  if (!qp) return nullptr;
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite;
  if (env_->eng.modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk) {
    env_->eng.destroy_qp(qp);
    return nullptr;
  }
  return qp;
}

bool EngineFabric::prepare(ConnId c, std::uint32_t send_depth, std::uint32_t recv_depth) {
  auto it = conns_.find(c);
  if (it == conns_.end() || it->second.qp || !it->second.peer) return false;
  if (!port::resolve_wait(env_->loop, *it->second.peer, 5)) return false;
  it->second.qp = new_qp(send_depth, recv_depth);
  if (!it->second.qp) return false;
  by_qpn_[it->second.qp->qpn] = c;
  return true;
}

bool EngineFabric::accept(ConnId c, const std::vector<std::uint8_t>& pd) {
  auto it = conns_.find(c);
  if (it == conns_.end() || !it->second.qp) return false;
  cm::AcceptParams ap;
  ap.starting_psn = wire::Psn(std::random_device{}());
  ap.responder_resources = 0;
  ap.initiator_depth = 0;
  ap.private_data = pd;
  return agent_->accept(it->second.cm, it->second.qp, ap) == cm::CmStatus::kOk;
}

void EngineFabric::reject(ConnId c, const std::vector<std::uint8_t>& pd) {
  auto it = conns_.find(c);
  if (it == conns_.end()) return;
  agent_->cm().reject(it->second.cm, cm::RejReason::kConsumerDefined, pd);
  release(it->second);
  by_cm_.erase(it->second.cm.v);
  conns_.erase(it);
}

std::optional<ConnId> EngineFabric::connect(const std::string& ipv4, std::uint16_t port,
                                            std::uint32_t send_depth, std::uint32_t recv_depth,
                                            const std::vector<std::uint8_t>& pd) {
  const auto ip = ctl::parse_ipv4(ipv4);
  if (!ip) return std::nullopt;
  if (!port::resolve_wait(env_->loop, *ip, 10)) return std::nullopt;
  Qp* qp = new_qp(send_depth, recv_depth);
  if (!qp) return std::nullopt;
  std::mt19937 rng(std::random_device{}());
  cm::ConnectParams p;
  p.peer.gid = ctl::gid_from_ipv4(*ip);
  p.service_id = cm::service_id(cm::PortSpace::kTcp, port);
  p.starting_psn = wire::Psn(rng());
  p.responder_resources = 0;
  p.initiator_depth = 0;
  p.cma = cm::CmaHeader::ipv4(env_->ip, static_cast<std::uint16_t>(32768 + rng() % 28000), *ip);
  p.private_data = pd;
  const auto id = agent_->connect(qp, p);
  if (!id) {
    env_->eng.destroy_qp(qp);
    return std::nullopt;
  }
  const ConnId c = next_++;
  conns_[c] = Conn{*id, qp, false, ip};
  by_cm_[id->v] = c;
  by_qpn_[qp->qpn] = c;
  return c;
}

void EngineFabric::release(Conn& c) {
  if (!c.qp) return;
  by_qpn_.erase(c.qp->qpn);
  agent_->release(c.qp);  // DREQ if still up
  env_->eng.destroy_qp(c.qp);
  c.qp = nullptr;
}

void EngineFabric::disconnect(ConnId c) {
  auto it = conns_.find(c);
  if (it == conns_.end()) return;
  release(it->second);
  by_cm_.erase(it->second.cm.v);
  conns_.erase(it);
}

void EngineFabric::on_cm(const cm::CmEvent& e) {
  if (e.type == cm::CmEventType::kConnectRequest) {
    Conn conn{e.id, nullptr, false, ctl::ipv4_from_gid(e.peer.gid)};
    if (!conn.peer || !e.cma || e.cma->ip_version != 4) {
      agent_->cm().reject(e.id, cm::RejReason::kInvalidServiceId);
      return;
    }
    const ConnId c = next_++;
    conns_[c] = conn;
    by_cm_[e.id.v] = c;
    FabricEvent fe{FabricEvent::kConnectRequest, c,
                   static_cast<std::uint16_t>(e.service_id & 0xFFFF), ctl::to_string(*conn.peer),
                   e.private_data};
    pending_.push_back(std::move(fe));
    return;
  }
  const auto it = by_cm_.find(e.id.v);
  if (it == by_cm_.end()) return;
  const ConnId c = it->second;
  FabricEvent fe{FabricEvent::kDisconnected, c, 0, {}, e.private_data};
  switch (e.type) {
    case cm::CmEventType::kEstablished:
      conns_[c].established = true;
      fe.kind = FabricEvent::kEstablished;
      break;
    case cm::CmEventType::kRejected:
      fe.kind = FabricEvent::kRejected;
      break;
    case cm::CmEventType::kUnreachable:
    case cm::CmEventType::kConnectError:
      fe.kind = FabricEvent::kUnreachable;
      break;
    case cm::CmEventType::kDisconnected:
      fe.kind = FabricEvent::kDisconnected;
      break;
    default:
      return;
  }
  pending_.push_back(std::move(fe));
}

bool EngineFabric::post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                             std::uint32_t lkey) {
  auto it = conns_.find(c);
  if (it == conns_.end() || !it->second.qp) return false;
  Sge sge{reinterpret_cast<std::uint64_t>(addr), length, lkey};
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return env_->eng.post_recv(it->second.qp, &wr, nullptr) == kOk;
}

bool EngineFabric::post_send(ConnId c, std::uint64_t wr_id, bool write, const void* local,
                             std::uint32_t length, std::uint32_t lkey, std::uint64_t remote_addr,
                             std::uint32_t rkey, bool signaled) {
  auto it = conns_.find(c);
  if (it == conns_.end() || !it->second.qp) return false;
  Sge sge{reinterpret_cast<std::uint64_t>(local), length, lkey};
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = write ? WrOpcode::kWrite : WrOpcode::kSend;
  wr.sg_list = length ? &sge : nullptr;
  wr.num_sge = length ? 1 : 0;
  wr.send_flags = signaled ? std::uint32_t{kSendSignaled} : 0u;
  wr.rdma.remote_addr = remote_addr;
  wr.rdma.rkey = rkey;
  return env_->eng.post_send(it->second.qp, &wr, nullptr) == kOk;
}

bool EngineFabric::poll(std::vector<FabricEvent>& events, std::vector<FabricCompletion>& wcs) {
  bool any = env_->loop.poll_once() != 0;
  agent_->poll(port::now_ns());
  Wc wc[32];
  int n;
  while ((n = env_->eng.poll_cq(cq_, 32, wc)) > 0) {
    any = true;
    for (int k = 0; k < n; ++k) {
      const auto q = by_qpn_.find(wc[k].qp_num);
      if (q == by_qpn_.end()) continue;  // a released QP's flushes
      Conn& conn = conns_[q->second];
      FabricCompletion c;
      c.conn = q->second;
      c.wr_id = wc[k].wr_id;
      c.ok = wc[k].status == WcStatus::kSuccess;
      if (!c.ok) c.status = std::string(to_string(wc[k].status));
      c.byte_len = wc[k].byte_len;
      c.kind = wc[k].opcode == WcOpcode::kRecv        ? FabricCompletion::kRecv
               : wc[k].opcode == WcOpcode::kRdmaWrite ? FabricCompletion::kWrite
                                                      : FabricCompletion::kSend;
      if (c.ok && c.kind == FabricCompletion::kRecv && !conn.established)
        agent_->cm().notify_established(conn.cm);  // COMM_EST: data before the RTU
      wcs.push_back(std::move(c));
    }
  }
  if (!pending_.empty()) {
    any = true;
    for (auto& e : pending_) events.push_back(std::move(e));
    pending_.clear();
  }
  return any || env_->eng.has_work();
}

void EngineFabric::idle(double seconds) {
  env_->until(
      [&] {
        agent_->poll(port::now_ns());
        return false;
      },
      seconds);
}

std::string EngineFabric::report() const {
  const auto& st = env_->eng.stats();
  std::uint64_t txd = 0, rxd = 0;
  if (env_->loop.faults()) txd = env_->loop.faults()->stats().dropped;
  if (env_->loop.rx_faults()) rxd = env_->loop.rx_faults()->stats().dropped;
  return "retransmitted " + std::to_string(st.get(Counter::kRetransmittedPackets)) + " timeouts " +
         std::to_string(st.get(Counter::kRetransmitTimeouts)) + " rnr_naks " +
         std::to_string(st.get(Counter::kRnrNakRcvd)) + " injected_drops_tx " +
         std::to_string(txd) + " rx " + std::to_string(rxd);
}

}  // namespace roce::netfr
