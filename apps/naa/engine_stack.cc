/// @file
/// Stack on the appliance's engine (engine_stack.h).
#include "apps/naa/engine_stack.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <stdexcept>

#include "controlplane/address.h"
#include "runtime/cm_agent.h"

namespace roce::naa {

using namespace roce::engine;

EngineStack::EngineStack(const runtime::LinkOptions& l) {
  own_env_ = std::make_unique<runtime::Env>(l);
  env_ = own_env_.get();
  init();
}

EngineStack::EngineStack(runtime::Env& env) : env_(&env) { init(); }

void EngineStack::init() {
  // The engine's one CM (QP1), shared with roced's attached clients when hosted there.
  hub_ = cm::CmHub::get(env_->eng, runtime::cm_agent_config(*env_));
  owner_ = hub_->add_owner([this](const cm::CmEvent& e) { on_cm(e); });
  pd_ = env_->eng.alloc_pd();
  cq_ = env_->eng.create_cq(std::min<std::uint32_t>(8192, env_->eng.config().max_cq_depth));
  if (!pd_ || !cq_) throw std::runtime_error("cannot create the PD and CQ");
}

EngineStack::~EngineStack() {
  for (auto& [id, c] : conns_) release(c);  // DREQs for those still up
  conns_.clear();
  // A process of its own: its DREQs are answered (or given up) before the port goes away. Hosted
  // in roced, the engine and its CM live on.
  if (own_env_) {
    hub_->agent().drain([&] {
      env_->loop.poll_once();
      hub_->poll(port::now_ns());
    });
  }
  hub_->remove_owner(owner_);
  hub_.reset();
  if (cq_) env_->eng.destroy_cq(cq_);
  if (pd_) env_->eng.dealloc_pd(pd_);
  for (Pd* pd : retired_) env_->eng.dealloc_pd(pd);  // MRs the server never gave back: busy
  own_env_.reset();
}

Pd* EngineStack::pd_of(Conn& c) {
  if (!c.pd) c.pd = env_->eng.alloc_pd();
  return c.pd;
}

void EngineStack::retire_pd(Pd* pd) {
  if (pd && env_->eng.dealloc_pd(pd) != kOk) retired_.push_back(pd);  // MRs left: later
}

std::optional<MrInfo> EngineStack::reg_mr(ConnId c, void* addr, std::uint64_t length,
                                          std::optional<std::uint64_t> iova) {
  Pd* pd = pd_;
  if (c != 0) {
    const auto it = conns_.find(c);
    pd = it == conns_.end() ? nullptr : pd_of(it->second);
  }
  if (!pd) return std::nullopt;
  const std::uint32_t access = kAccessLocalWrite | kAccessRemoteWrite;
  Mr* m = iova ? env_->eng.reg_mr(pd, addr, length, *iova, access)
               : env_->eng.reg_mr(pd, addr, length, access);
  if (!m) return std::nullopt;
  MrInfo i;
  i.addr = addr;
  i.iova = m->addr;
  i.length = length;
  i.lkey = i.rkey = m->key;
  i.handle = reinterpret_cast<std::uint64_t>(m);
  return i;
}

void EngineStack::dereg_mr(const MrInfo& mr) {
  if (!mr.handle) return;
  Mr* m = reinterpret_cast<Mr*>(mr.handle);
  Pd* pd = m->pd;
  env_->eng.dereg_mr(m);
  const auto it = std::find(retired_.begin(), retired_.end(), pd);
  if (it != retired_.end() && env_->eng.dealloc_pd(pd) == kOk) retired_.erase(it);
}

bool EngineStack::listen(std::uint16_t port) {
  return hub_->listen(owner_, cm::service_id(cm::PortSpace::kTcp, port));
}

Qp* EngineStack::new_qp(Pd* pd, const QpSizes& s) {
  if (!pd) return nullptr;
  Qp* qp = env_->eng.create_qp(pd, QpType::kRc, cq_, cq_, QpCap{s.send, s.recv, 1, 1, 0});
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

bool EngineStack::prepare(ConnId c, const QpSizes& s) {
  auto it = conns_.find(c);
  if (it == conns_.end() || it->second.qp || !it->second.peer) return false;
  // The QP's path needs the peer's MAC before the REP: known by now (poll_resolving), unless
  // the cache forgot it meanwhile.
  if (!env_->loop.neighbour().lookup(*it->second.peer)) return false;
  it->second.qp = new_qp(pd_of(it->second), s);
  if (!it->second.qp) return false;
  by_qpn_[it->second.qp->qpn] = c;
  return true;
}

bool EngineStack::accept(ConnId c) {
  auto it = conns_.find(c);
  if (it == conns_.end() || !it->second.qp) return false;
  cm::AcceptParams ap;
  ap.starting_psn = wire::Psn(std::random_device{}());
  ap.responder_resources = 0;
  ap.initiator_depth = 0;
  return hub_->agent().accept(it->second.cm, it->second.qp, ap) == cm::CmStatus::kOk;
}

void EngineStack::reject(ConnId c) {
  auto it = conns_.find(c);
  if (it == conns_.end()) return;
  hub_->agent().cm().reject(it->second.cm);
  release(it->second);
  conns_.erase(it);
}

std::optional<ConnId> EngineStack::connect(const std::string& ipv4, std::uint16_t port,
                                           const QpSizes& s) {
  const auto ip = ctl::parse_ipv4(ipv4);
  if (!ip) return std::nullopt;
  if (!port::resolve_wait(env_->loop, *ip, 10)) return std::nullopt;
  // The active side (the host library): its QP in the common PD, with the MRs that
  // reg_mr(0, ...) made before it connected.
  Pd* pd = pd_;
  Qp* qp = new_qp(pd, s);
  if (!qp) return std::nullopt;
  std::mt19937 rng(std::random_device{}());
  cm::ConnectParams p;
  p.peer.gid = ctl::gid_from_ipv4(*ip);
  p.service_id = cm::service_id(cm::PortSpace::kTcp, port);
  p.starting_psn = wire::Psn(rng());
  p.responder_resources = 0;
  p.initiator_depth = 0;
  p.cma = cm::CmaHeader::ipv4(env_->ip, static_cast<std::uint16_t>(32768 + rng() % 28000), *ip);
  const auto id = hub_->connect(owner_, qp, p);
  if (!id) {
    env_->eng.destroy_qp(qp);
    return std::nullopt;
  }
  const ConnId c = next_++;
  conns_[c] = Conn{*id, qp, false, ip, pd};
  by_cm_[id->v] = c;
  by_qpn_[qp->qpn] = c;
  return c;
}

void EngineStack::release(Conn& c) {
  if (c.qp) {
    by_qpn_.erase(c.qp->qpn);
    hub_->agent().release(c.qp);  // DREQ if still up
    env_->eng.destroy_qp(c.qp);
    c.qp = nullptr;
  }
  if (c.pd != pd_) retire_pd(c.pd);
  c.pd = nullptr;
}

void EngineStack::disconnect(ConnId c) {
  auto it = conns_.find(c);
  if (it == conns_.end()) return;
  release(it->second);
  // The CM keeps the connection for its DREQ retransmissions and timewait.
  by_cm_.erase(it->second.cm.v);
  conns_.erase(it);
}

void EngineStack::on_cm(const cm::CmEvent& e) {
  if (e.type == cm::CmEventType::kConnectRequest) {
    const ConnId c = next_++;
    Conn conn{e.id, nullptr, false, ctl::ipv4_from_gid(e.peer.gid)};
    if (!conn.peer || !e.cma || e.cma->ip_version != 4) {
      hub_->agent().cm().reject(e.id, cm::RejReason::kInvalidServiceId);
      return;
    }
    conns_[c] = conn;
    by_cm_[e.id.v] = c;
    if (env_->loop.neighbour().lookup(*conn.peer)) {
      pending_.push_back({ConnEvent::kConnectRequest, c, ctl::to_string(*conn.peer)});
      return;
    }
    // An address we have no MAC for: ask ARP and go on polling; the request is told to the
    // server when the answer is there (poll_resolving). No wait here: a REQ from an address
    // that never answers must not hold up the other hosts.
    if (resolving_.size() >= kMaxResolving) {
      ++unresolved_;
      refuse(c, cm::RejReason::kNoResources);
      return;
    }
    env_->loop.resolve(*conn.peer);
    const std::uint64_t now = port::now_ns();
    resolving_.push_back({c, *conn.peer, now + static_cast<std::uint64_t>(kResolveSeconds * 1e9),
                          now + 200'000'000});
    return;
  }
  const auto it = by_cm_.find(e.id.v);
  if (it == by_cm_.end()) return;
  const ConnId c = it->second;
  if (std::any_of(resolving_.begin(), resolving_.end(),
                  [c](const Resolving& r) { return r.conn == c; })) {
    // Not told to the server yet: a CM failure meanwhile just ends it.
    if (e.type != cm::CmEventType::kEstablished) {
      std::erase_if(resolving_, [c](const Resolving& r) { return r.conn == c; });
      by_cm_.erase(e.id.v);
      conns_.erase(c);
    }
    return;
  }
  switch (e.type) {
    case cm::CmEventType::kEstablished:
      conns_[c].established = true;
      pending_.push_back({ConnEvent::kEstablished, c, {}});
      break;
    case cm::CmEventType::kRejected:
      pending_.push_back({ConnEvent::kRejected, c, {}});
      break;
    case cm::CmEventType::kUnreachable:
    case cm::CmEventType::kConnectError:
      pending_.push_back({ConnEvent::kUnreachable, c, {}});
      break;
    case cm::CmEventType::kDisconnected:
      pending_.push_back({ConnEvent::kDisconnected, c, {}});
      break;
    default:
      break;
  }
}

bool EngineStack::post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
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

bool EngineStack::post_send(ConnId c, const WorkRequest& w) {
  auto it = conns_.find(c);
  if (it == conns_.end() || !it->second.qp) return false;
  Sge sge{w.local, w.length, w.lkey};
  SendWr wr;
  wr.wr_id = w.wr_id;
  wr.opcode = w.op == Op::kSend    ? WrOpcode::kSend
              : w.op == Op::kWrite ? WrOpcode::kWrite
                                   : WrOpcode::kWriteImm;
  wr.sg_list = w.length ? &sge : nullptr;
  wr.num_sge = w.length ? 1 : 0;
  wr.send_flags = w.signaled ? std::uint32_t{kSendSignaled} : 0u;
  wr.imm_data = w.imm;
  wr.rdma.remote_addr = w.remote_addr;
  wr.rdma.rkey = w.rkey;
  return env_->eng.post_send(it->second.qp, &wr, nullptr) == kOk;
}

void EngineStack::refuse(ConnId c, cm::RejReason why) {
  auto it = conns_.find(c);
  if (it == conns_.end()) return;
  hub_->agent().cm().reject(it->second.cm, why);
  by_cm_.erase(it->second.cm.v);
  release(it->second);
  conns_.erase(it);
}

void EngineStack::poll_resolving() {
  if (resolving_.empty()) return;
  const std::uint64_t now = port::now_ns();
  for (auto r = resolving_.begin(); r != resolving_.end();) {
    if (!conns_.count(r->conn)) {
      r = resolving_.erase(r);
    } else if (env_->loop.neighbour().lookup(r->ip)) {
      pending_.push_back({ConnEvent::kConnectRequest, r->conn, ctl::to_string(r->ip)});
      r = resolving_.erase(r);
    } else if (now > r->deadline_ns) {
      ++unresolved_;
      std::printf("naa: connect request from %s dropped: no ARP answer in %g s\n",
                  ctl::to_string(r->ip).c_str(), kResolveSeconds);
      std::fflush(stdout);
      const ConnId c = r->conn;
      r = resolving_.erase(r);
      refuse(c, cm::RejReason::kTimeout);
    } else {
      if (now > r->next_arp_ns) {
        env_->loop.resolve(r->ip);
        r->next_arp_ns = now + 200'000'000;
      }
      ++r;
    }
  }
}

bool EngineStack::poll(std::vector<ConnEvent>& events, std::vector<Completion>& completions) {
  bool any = env_->loop.poll_once() != 0;
  hub_->poll(port::now_ns());
  poll_resolving();
  Wc wc[32];
  int n;
  while ((n = env_->eng.poll_cq(cq_, 32, wc)) > 0) {
    any = true;
    for (int k = 0; k < n; ++k) {
      const auto q = by_qpn_.find(wc[k].qp_num);
      if (q == by_qpn_.end()) continue;  // a QP already released (flushes)
      Conn& conn = conns_[q->second];
      Completion c;
      c.conn = q->second;
      c.wr_id = wc[k].wr_id;
      c.ok = wc[k].status == WcStatus::kSuccess;
      if (!c.ok) c.status = std::string(to_string(wc[k].status));
      c.byte_len = wc[k].byte_len;
      c.imm = wc[k].imm_data;
      switch (wc[k].opcode) {
        case WcOpcode::kRecv:
          c.kind = Completion::kRecv;
          break;
        case WcOpcode::kRecvRdmaWithImm:
          c.kind = Completion::kRecvImm;
          break;
        case WcOpcode::kRdmaWrite:
          c.kind = Completion::kWrite;
          break;
        default:
          c.kind = Completion::kSend;
          break;
      }
      // The first data on a connection whose RTU is late: COMM_EST.
      if (c.ok && (c.kind == Completion::kRecv || c.kind == Completion::kRecvImm) &&
          !conn.established) {
        hub_->agent().cm().notify_established(conn.cm);
      }
      completions.push_back(c);
    }
  }
  if (!pending_.empty()) {
    any = true;
    events.insert(events.end(), pending_.begin(), pending_.end());
    pending_.clear();
  }
  return any || env_->eng.has_work();
}

std::string EngineStack::transport_report() const {
  const auto& st = env_->eng.stats();
  std::uint64_t txd = 0, rxd = 0;
  if (env_->loop.faults()) txd = env_->loop.faults()->stats().dropped;
  if (env_->loop.rx_faults()) rxd = env_->loop.rx_faults()->stats().dropped;
  return "retransmitted " + std::to_string(st.get(Counter::kRetransmittedPackets)) + ", timeouts " +
         std::to_string(st.get(Counter::kRetransmitTimeouts)) + ", RNR NAKs sent " +
         std::to_string(st.get(Counter::kRnrNakSent)) + " received " +
         std::to_string(st.get(Counter::kRnrNakRcvd)) + ", injected drops tx " +
         std::to_string(txd) + " rx " + std::to_string(rxd) + "\n" + all_counters();
}

std::string EngineStack::all_counters() const {
  if (!std::getenv("NAAICE_ALL_COUNTERS")) return {};
  std::string out;
  const auto& st = env_->eng.stats();
  for (std::size_t i = 0; i < kCounterCount; ++i) {
    const auto c = static_cast<Counter>(i);
    if (st.get(c)) out += "  " + std::string(to_string(c)) + " " + std::to_string(st.get(c)) + "\n";
  }
  return out;
}

void EngineStack::idle(double seconds) {
  env_->until(
      [&] {
        hub_->poll(port::now_ns());
        return false;
      },
      seconds);
}

}  // namespace roce::naa
