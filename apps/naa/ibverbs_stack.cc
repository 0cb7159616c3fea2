/// @file
/// Stack on rdma-core (ibverbs_stack.h).
#include "apps/naa/ibverbs_stack.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace roce::naa {

IbverbsStack::IbverbsStack() {
  ch_ = rdma_create_event_channel();
  if (!ch_) throw std::runtime_error("rdma_create_event_channel failed (no RDMA device?)");
  fcntl(ch_->fd, F_SETFL, fcntl(ch_->fd, F_GETFL) | O_NONBLOCK);
}

IbverbsStack::~IbverbsStack() {
  while (!conns_.empty()) disconnect(conns_.begin()->first);
  if (listen_id_) rdma_destroy_id(listen_id_);
  if (cq_) ibv_destroy_cq(cq_);
  for (ibv_pd* pd : retired_) ibv_dealloc_pd(pd);
  if (pd_) ibv_dealloc_pd(pd_);
  if (ch_) rdma_destroy_event_channel(ch_);
}

bool IbverbsStack::ensure_device(rdma_cm_id* id) {
  if (pd_) return true;
  if (!id || !id->verbs) return false;
  pd_ = ibv_alloc_pd(id->verbs);
  // As large as the device allows (rxe: 32767), up to 64 Ki entries: about 960 hosts' QPs of
  // the NAA's sizes (64 + 4 entries); prepare() refuses QPs beyond it.
  ibv_device_attr attr{};
  const int max_cqe =
      ibv_query_device(id->verbs, &attr) == 0 && attr.max_cqe > 0 ? attr.max_cqe : 4096;
  cq_depth_ = static_cast<std::uint64_t>(std::min(max_cqe, 65536));
  cq_ = pd_ ? ibv_create_cq(id->verbs, static_cast<int>(cq_depth_), nullptr, nullptr, 0) : nullptr;
  if (cq_) cq_depth_ = static_cast<std::uint64_t>(cq_->cqe);
  return pd_ && cq_;
}

ibv_pd* IbverbsStack::pd_for(ConnId c) {
  if (c == 0 || active_.count(c)) return pd_;  // the common PD (a stack with one connection)
  const auto p = pds_.find(c);
  if (p != pds_.end()) return p->second;
  const auto it = conns_.find(c);
  if (it == conns_.end() || !ensure_device(it->second)) return nullptr;
  ibv_pd* pd = ibv_alloc_pd(it->second->verbs);
  if (pd) pds_[c] = pd;
  return pd;
}

std::optional<Memory> IbverbsStack::alloc(std::uint64_t length) {
  // Anonymous pages: any memory registers with rdma-core.
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return std::nullopt;
  return Memory{static_cast<std::uint8_t*>(p), length, 0};
}

void IbverbsStack::free(const Memory& m) {
  if (m.addr) ::munmap(m.addr, m.length);
}

std::optional<MrInfo> IbverbsStack::reg_mr(ConnId c, void* addr, std::uint64_t length,
                                           std::optional<std::uint64_t> iova) {
  ibv_pd* pd = pd_for(c);
  if (!pd) return std::nullopt;
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* mr = iova ? ibv_reg_mr_iova(pd, addr, length, *iova, access)
                    : ibv_reg_mr(pd, addr, length, access);
  if (!mr) return std::nullopt;
  MrInfo i;
  i.addr = addr;
  i.iova = iova ? *iova : reinterpret_cast<std::uint64_t>(addr);
  i.length = length;
  i.lkey = mr->lkey;
  i.rkey = mr->rkey;
  i.handle = reinterpret_cast<std::uint64_t>(mr);
  return i;
}

void IbverbsStack::dereg_mr(const MrInfo& mr) {
  if (!mr.handle) return;
  ibv_mr* m = reinterpret_cast<ibv_mr*>(mr.handle);
  ibv_pd* pd = m->pd;
  ibv_dereg_mr(m);
  // The last MR of a connection that is gone: its PD goes too.
  const auto it = std::find(retired_.begin(), retired_.end(), pd);
  if (it != retired_.end() && ibv_dealloc_pd(pd) == 0) retired_.erase(it);
}

bool IbverbsStack::listen(std::uint16_t port) {
  if (listen_id_) return false;
  if (rdma_create_id(ch_, &listen_id_, nullptr, RDMA_PS_TCP)) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (rdma_bind_addr(listen_id_, reinterpret_cast<sockaddr*>(&a)) || rdma_listen(listen_id_, 16))
    return false;
  return true;
}

bool IbverbsStack::prepare(ConnId c, const QpSizes& s) {
  const auto it = conns_.find(c);
  if (it == conns_.end() || it->second->qp || !ensure_device(it->second)) return false;
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq_;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = s.send;
  qa.cap.max_recv_wr = s.recv;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if (cq_used_ + s.send + s.recv > cq_depth_) return false;  // the CQ is spoken for
  ibv_pd* pd = pd_for(c);
  if (!pd || rdma_create_qp(it->second, pd, &qa)) return false;
  // The provider may round the queues up: count what it made.
  const std::uint64_t share = std::uint64_t{qa.cap.max_send_wr} + qa.cap.max_recv_wr;
  if (cq_used_ + share > cq_depth_) {
    rdma_destroy_qp(it->second);
    return false;
  }
  cq_used_ += share;
  cq_share_[c] = share;
  by_qpn_[it->second->qp->qp_num] = c;
  return true;
}

bool IbverbsStack::accept(ConnId c) {
  const auto it = conns_.find(c);
  if (it == conns_.end() || !it->second->qp) return false;
  rdma_conn_param cp{};
  cp.rnr_retry_count = 7;
  cp.retry_count = 7;
  return rdma_accept(it->second, &cp) == 0;
}

void IbverbsStack::reject(ConnId c) {
  const auto it = conns_.find(c);
  if (it == conns_.end()) return;
  rdma_reject(it->second, nullptr, 0);
  disconnect(c);
}

std::optional<ConnId> IbverbsStack::connect(const std::string& ipv4, std::uint16_t port,
                                            const QpSizes& s) {
  // Blocking: waits for each step's event on the (non-blocking) channel.
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ipv4.c_str(), &a.sin_addr) != 1) return std::nullopt;
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(ch_, &id, nullptr, RDMA_PS_TCP)) return std::nullopt;
  auto wait_for = [&](rdma_cm_event_type want) {
    for (int i = 0; i < 500; ++i) {
      rdma_cm_event* ev = nullptr;
      if (rdma_get_cm_event(ch_, &ev) == 0) {
        const bool ok = ev->id == id && ev->event == want;
        const bool mine = ev->id == id;
        rdma_ack_cm_event(ev);
        if (mine) return ok;
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&a), 2000) ||
      !wait_for(RDMA_CM_EVENT_ADDR_RESOLVED) || rdma_resolve_route(id, 2000) ||
      !wait_for(RDMA_CM_EVENT_ROUTE_RESOLVED)) {
    rdma_destroy_id(id);
    return std::nullopt;
  }
  const ConnId c = next_++;
  conns_[c] = id;
  by_id_[id] = c;
  active_.insert(c);
  rdma_conn_param cp{};
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  if (!prepare(c, s) || rdma_connect(id, &cp)) {
    disconnect(c);
    return std::nullopt;
  }
  return c;
}

void IbverbsStack::disconnect(ConnId c) {
  const auto it = conns_.find(c);
  if (it == conns_.end()) return;
  rdma_cm_id* id = it->second;
  rdma_disconnect(id);  // fails harmlessly when the peer disconnected first
  if (id->qp) {
    by_qpn_.erase(id->qp->qp_num);
    rdma_destroy_qp(id);
  }
  if (const auto sh = cq_share_.find(c); sh != cq_share_.end()) {
    cq_used_ -= sh->second;
    cq_share_.erase(sh);
  }
  by_id_.erase(id);
  conns_.erase(it);
  active_.erase(c);
  rdma_destroy_id(id);
  const auto p = pds_.find(c);
  if (p != pds_.end()) {
    if (ibv_dealloc_pd(p->second) != 0) retired_.push_back(p->second);  // MRs left: later
    pds_.erase(p);
  }
}

bool IbverbsStack::post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                             std::uint32_t lkey) {
  const auto it = conns_.find(c);
  if (it == conns_.end() || !it->second->qp) return false;
  ibv_sge sge{reinterpret_cast<std::uint64_t>(addr), length, lkey};
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ibv_post_recv(it->second->qp, &wr, &bad) == 0;
}

bool IbverbsStack::post_send(ConnId c, const WorkRequest& w) {
  const auto it = conns_.find(c);
  if (it == conns_.end() || !it->second->qp) return false;
  ibv_sge sge{w.local, w.length, w.lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = w.wr_id;
  wr.sg_list = w.length ? &sge : nullptr;
  wr.num_sge = w.length ? 1 : 0;
  wr.opcode = w.op == Op::kSend    ? IBV_WR_SEND
              : w.op == Op::kWrite ? IBV_WR_RDMA_WRITE
                                   : IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = (w.signaled ? unsigned{IBV_SEND_SIGNALED} : 0u) |
                  (w.solicited ? unsigned{IBV_SEND_SOLICITED} : 0u);
  wr.imm_data = htonl(w.imm);
  wr.wr.rdma.remote_addr = w.remote_addr;
  wr.wr.rdma.rkey = w.rkey;
  return ibv_post_send(it->second->qp, &wr, &bad) == 0;
}

void IbverbsStack::drain_events(std::vector<ConnEvent>* out) {
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(ch_, &ev) == 0) {
    ConnEvent e{};
    bool report = true;
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      const ConnId c = next_++;
      conns_[c] = ev->id;
      by_id_[ev->id] = c;
      ensure_device(ev->id);  // the PD, for the registrations before accept
      e.kind = ConnEvent::kConnectRequest;
      e.conn = c;
      const sockaddr* pa = rdma_get_peer_addr(ev->id);
      char buf[INET_ADDRSTRLEN] = "?";
      if (pa && pa->sa_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(pa)->sin_addr, buf, sizeof buf);
      e.peer = buf;
    } else {
      const auto it = by_id_.find(ev->id);
      if (it == by_id_.end()) {
        report = false;
      } else {
        e.conn = it->second;
        switch (ev->event) {
          case RDMA_CM_EVENT_ESTABLISHED:
            e.kind = ConnEvent::kEstablished;
            break;
          case RDMA_CM_EVENT_REJECTED:
            e.kind = ConnEvent::kRejected;
            break;
          case RDMA_CM_EVENT_DISCONNECTED:
            e.kind = ConnEvent::kDisconnected;
            break;
          case RDMA_CM_EVENT_UNREACHABLE:
          case RDMA_CM_EVENT_CONNECT_ERROR:
          case RDMA_CM_EVENT_ADDR_ERROR:
          case RDMA_CM_EVENT_ROUTE_ERROR:
            e.kind = ConnEvent::kUnreachable;
            break;
          default:
            report = false;
            break;
        }
      }
    }
    rdma_ack_cm_event(ev);
    if (report && out) out->push_back(e);
    if (report && !out) pending_.push_back(e);
  }
}

bool IbverbsStack::poll(std::vector<ConnEvent>& events, std::vector<Completion>& completions) {
  const std::size_t before = events.size() + completions.size();
  events.insert(events.end(), pending_.begin(), pending_.end());
  pending_.clear();
  drain_events(&events);
  if (!cq_) return events.size() + completions.size() > before;
  ibv_wc wc[32];
  int n;
  while ((n = ibv_poll_cq(cq_, 32, wc)) > 0) {
    for (int k = 0; k < n; ++k) {
      const auto q = by_qpn_.find(wc[k].qp_num);
      if (q == by_qpn_.end()) continue;
      Completion c;
      c.conn = q->second;
      c.wr_id = wc[k].wr_id;
      c.ok = wc[k].status == IBV_WC_SUCCESS;
      if (!c.ok) c.status = ibv_wc_status_str(wc[k].status);
      c.byte_len = wc[k].byte_len;
      switch (wc[k].opcode) {
        case IBV_WC_RECV:
          c.kind = Completion::kRecv;
          break;
        case IBV_WC_RECV_RDMA_WITH_IMM:
          c.kind = Completion::kRecvImm;
          c.imm = ntohl(wc[k].imm_data);
          break;
        case IBV_WC_RDMA_WRITE:
          c.kind = Completion::kWrite;
          break;
        default:
          c.kind = Completion::kSend;
          break;
      }
      completions.push_back(c);
    }
  }
  return events.size() + completions.size() > before;
}

void IbverbsStack::idle(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    drain_events(nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace roce::naa
