/// @file
/// Lane: attached clients' rings <-> the engine of one lcore (attach_lane.h).
#include "controlplane/attach/attach_lane.h"

#include <unistd.h>

#include <algorithm>

namespace roce::attach {

namespace {

constexpr std::size_t kBatch = 32;  ///< entries taken from one ring per iteration

bool allowed(engine::WrOpcode op) {
  using engine::WrOpcode;
  switch (op) {
    case WrOpcode::kWrite:
    case WrOpcode::kWriteImm:
    case WrOpcode::kSend:
    case WrOpcode::kSendImm:
    case WrOpcode::kRead:
    case WrOpcode::kCmpSwap:
    case WrOpcode::kFetchAdd:
    case WrOpcode::kLocalInv:
    case WrOpcode::kSendInv:
      return true;
    default:  // kRegMr: would let a client describe memory no MR of its own covers
      return false;
  }
}

}  // namespace

std::size_t Lane::poll(std::uint64_t now_ns) {
  if (qps_.empty() && cqs_.empty() && srqs_.empty() && cms_.empty()) [[likely]]
    return 0;
  std::size_t moved = 0;
  if (!cms_.empty() && now_ns - last_cm_poll_ >= kCmPollNs) {
    last_cm_poll_ = now_ns;
    cms_.front()->session->poll(now_ns);  // the engine's one CM: MADs, timers
    for (LaneCm* c : cms_) {
      refuse_requests(*c);
      moved += flush(*c);
    }
  }
  for (LaneQp* q : qps_) {
    moved += drain_send(*q);
    if (q->rq.valid()) moved += drain_recv(q->rq, q->qp, nullptr, q->recv_cq);
  }
  for (LaneSrq* s : srqs_) moved += drain_recv(s->rq, nullptr, s->srq, s->error_cq);
  for (LaneCq* c : cqs_) moved += deliver(*c);
  return moved;
}

void Lane::on_async(const engine::AsyncEvent& ev) {
  EventEntry e;
  e.type = ev.type;
  LaneEvents* to = nullptr;
  if (ev.type == engine::AsyncEventType::kCqErr) {
    for (LaneCq* c : cqs_)
      if (c->cq == ev.cq) {
        to = c->events;
        e.cq = c->handle;
      }
  } else {
    for (LaneQp* q : qps_)
      if (q->qp->qpn == ev.qp_num) to = q->events;
    e.qp_num = ev.qp_num;
  }
  if (next_async) next_async(ev);
  if (to == nullptr) return;
  ++stats_.events;
  if (!to->ring.push(e)) {
    ++to->dropped;
    ++stats_.events_dropped;
    return;
  }
  if (to->ring.should_wake()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(to->event_fd, &one, sizeof one);
  }
}

void Lane::remove(LaneQp* q) {
  std::erase(qps_, q);
  LaneSrq* s = q->srq;
  if (s == nullptr || s->error_cq != q->recv_cq) return;
  s->error_cq = nullptr;
  for (LaneQp* o : qps_)
    if (o->srq == s) {
      s->error_cq = o->recv_cq;
      break;
    }
}

void Lane::remove(LaneCq* c) {
  std::erase(cqs_, c);
  for (LaneSrq* s : srqs_)
    if (s->error_cq == c) s->error_cq = nullptr;
}

void Lane::refuse(LaneCq* cq, std::uint64_t wr_id, engine::WcOpcode op, std::uint32_t qpn) {
  ++stats_.refused_wrs;
  if (cq == nullptr) return;  // an SRQ no QP uses any more: counted, nowhere to complete
  engine::Wc wc;
  wc.wr_id = wr_id;
  wc.status = engine::WcStatus::kLocQpOpErr;
  wc.opcode = op;
  wc.qp_num = qpn;
  cq->local.push_back(wc);
}

std::size_t Lane::drain_send(LaneQp& q) {
  if (q.sq.broken()) return 0;
  SendEntry e[kBatch];
  const std::size_t n = q.sq.peek_n(e, kBatch);
  if (q.sq.broken()) {
    ++stats_.broken_rings;
    return 0;
  }
  std::size_t taken = 0;
  for (; taken < n; ++taken) {
    if (full(q.send_cq)) break;  // the client does not poll: the rest waits in the ring
    const SendEntry& s = e[taken];
    // A UD destination is a unicast MAC (or none: roced's): never broadcast or a group.
    const bool group_mac = q.qp->type == engine::QpType::kUd && (s.ah.dmac.b[0] & 1) != 0;
    if (s.num_sge > kMaxSge || !allowed(s.opcode) || group_mac) {
      refuse(q.send_cq, s.wr_id, engine::wc_opcode(s.opcode), q.qp->qpn);
      continue;
    }
    engine::SendWr wr;
    wr.wr_id = s.wr_id;
    wr.sg_list = s.sge;  // a copy out of shared memory (peek_n)
    wr.num_sge = s.num_sge;
    wr.opcode = s.opcode;
    // Inline data is copied by the engine from the SGE address without a key check: a client
    // address means nothing here, so its SGEs go the registered way.
    wr.send_flags = s.send_flags & ~std::uint32_t{engine::kSendInline};
    wr.imm_data = s.imm_data;
    wr.invalidate_rkey = s.invalidate_rkey;
    wr.rdma.remote_addr = s.remote_addr;
    wr.rdma.rkey = s.rkey;
    wr.atomic.remote_addr = s.remote_addr;
    wr.atomic.rkey = s.rkey;
    wr.atomic.compare_add = s.compare_add;
    wr.atomic.swap = s.swap;
    wr.ud.ah = &s.ah;
    engine::AddressVector av;
    if (q.qp->type == engine::QpType::kUd && s.ah.dmac == wire::MacAddr{}) {
      // A UD address vector by GID only: the MAC the control thread found for the client
      // (Ops::neighbour, which the client asks before it uses the address).
      // Unknown (the client never asked), or not an IPv4 GID: refused, never a frame to
      // 00:00:00:00:00:00 or to another address's MAC.
      const std::uint32_t ip = wire::load_be32(s.ah.dgid.b.data() + 12);
      const auto& mine = q.events->ud_macs;
      const auto it =
          s.ah.dgid == wire::ipv4_mapped(wire::Ipv4Addr{ip}) ? mine.find(ip) : mine.end();
      if (it == mine.end()) {
        refuse(q.send_cq, s.wr_id, engine::wc_opcode(s.opcode), q.qp->qpn);
        continue;
      }
      av = s.ah;
      av.dmac = it->second;
      wr.ud.ah = &av;
    }
    wr.ud.remote_qpn = s.remote_qpn;
    wr.ud.remote_qkey = s.remote_qkey;
    const int rc = eng_.post_send(q.qp, &wr, nullptr);
    if (rc == engine::kErrNoMem) break;  // the send queue is full: the rest waits in the ring
    if (rc != engine::kOk) refuse(q.send_cq, s.wr_id, engine::wc_opcode(s.opcode), q.qp->qpn);
    ++stats_.send_wrs;
  }
  q.sq.consume(taken);
  return taken;
}

std::size_t Lane::drain_recv(ShmConsumer<RecvEntry>& ring, engine::Qp* qp, engine::Srq* srq,
                             LaneCq* cq) {
  if (ring.broken()) return 0;
  RecvEntry e[kBatch];
  const std::size_t n = ring.peek_n(e, kBatch);
  if (ring.broken()) {
    ++stats_.broken_rings;
    return 0;
  }
  std::size_t taken = 0;
  const std::uint32_t qpn = qp ? qp->qpn : 0;
  for (; taken < n; ++taken) {
    if (full(cq)) break;
    const RecvEntry& r = e[taken];
    if (r.num_sge > kMaxSge) {
      refuse(cq, r.wr_id, engine::WcOpcode::kRecv, qpn);
      continue;
    }
    engine::RecvWr wr;
    wr.wr_id = r.wr_id;
    wr.sg_list = r.sge;
    wr.num_sge = r.num_sge;
    wr.min_free = r.min_free;  // the engine bounds-checks both against the buffer
    wr.max_msgs = r.max_msgs;
    const int rc = qp ? eng_.post_recv(qp, &wr, nullptr) : eng_.post_srq_recv(srq, &wr, nullptr);
    if (rc == engine::kErrNoMem) break;
    if (rc != engine::kOk) refuse(cq, r.wr_id, engine::WcOpcode::kRecv, qpn);
    ++stats_.recv_wrs;
  }
  ring.consume(taken);
  return taken;
}

std::size_t Lane::deliver(LaneCq& c) {
  if (c.ring.broken()) return 0;
  std::size_t moved = 0;
  std::uint32_t room = c.ring.room();
  if (!c.local.empty() && room != 0) {
    const std::size_t k = std::min<std::size_t>(room, c.local.size());
    c.ring.push_n(c.local.data(), k);
    c.local.erase(c.local.begin(), c.local.begin() + static_cast<std::ptrdiff_t>(k));
    room -= static_cast<std::uint32_t>(k);
    moved += k;
  }
  // Only what fits: the rest stays in the engine's CQ (the ring has depth + 1 slots, the CQ
  // depth entries, so nothing is dropped here that the engine would have kept).
  while (room != 0 && c.cq->size() != 0) {
    engine::Wc wc[kBatch];
    const int k = eng_.poll_cq(c.cq, static_cast<int>(std::min<std::uint32_t>(room, kBatch)), wc);
    for (int i = 0; i < k; ++i) c.ring.stage(wc[i]);
    room -= static_cast<std::uint32_t>(k);
    moved += static_cast<std::size_t>(k);
  }
  if (moved == 0) return 0;
  c.ring.publish();
  stats_.completions += moved;
  if (c.ring.should_wake() && c.event_fd >= 0) {  // (no eventfd: nobody waits on it yet)
    ++stats_.wakeups;
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(c.event_fd, &one, sizeof one);
  }
  return moved;
}

}  // namespace roce::attach

namespace roce::attach {

bool Lane::learn_ud(LaneEvents& c, wire::Ipv4Addr ip, wire::MacAddr mac) {
  const auto [it, added] = c.ud_macs.try_emplace(ip.v, mac);
  if (!added) {
    it->second = mac;
    return false;
  }
  c.ud_order.push_back(ip.v);
  if (c.ud_macs.size() <= LaneEvents::kMaxUdNeighbours) return true;
  c.ud_macs.erase(c.ud_order.front());
  c.ud_order.pop_front();
  return false;
}

std::shared_ptr<cm::CmHub> Lane::cm_hub() {
  if (hub_) return hub_;
  cm::CmAgentConfig cfg = cm_config ? cm_config() : cm::CmAgentConfig{};
  auto fallback = cfg.resolve_mac;
  cfg.resolve_mac = [this, fallback](const wire::Ipv6Addr& gid) -> std::optional<wire::MacAddr> {
    auto it = macs_.find(wire::load_be32(gid.b.data() + 12));
    if (it != macs_.end()) return it->second;
    return fallback ? fallback(gid) : std::nullopt;
  };
  hub_ = cm::CmHub::get(eng_, cfg);
  return hub_;
}

void Lane::push(LaneCm& c, const cm::SessionEvent& ev) {
  CmEventEntry e;
  e.type = static_cast<std::uint8_t>(ev.type);
  e.remote = ev.remote ? 1 : 0;
  e.responder_resources = ev.responder_resources;
  e.initiator_depth = ev.initiator_depth;
  e.id = ev.id;
  e.qp_num = ev.qp_num;
  e.reason = ev.reason;
  e.peer = ev.peer;
  e.port = ev.port;
  e.private_len = static_cast<std::uint16_t>(std::min(ev.private_data.size(), kCmPrivateMax));
  std::copy_n(ev.private_data.begin(), e.private_len, e.private_data);
  if (ev.type == cm::SessionEventType::kSidrReply) {
    e.sidr_status = ev.sidr_status;
    e.sidr_qpn = ev.sidr_qpn;
    e.sidr_qkey = ev.sidr_qkey;
  } else if (ev.type == cm::SessionEventType::kConnectRequest ||
             ev.type == cm::SessionEventType::kEstablished) {
    e.selective_repeat = ev.selective_repeat ? 1 : 0;
    e.ece_vendor = ev.ece.vendor_id;
    e.ece_options = ev.ece.options;
  }
  const bool request = ev.type == cm::SessionEventType::kConnectRequest ||
                       ev.type == cm::SessionEventType::kSidrRequest;
  c.backlog.push_back(e);
  flush(c);
  if (request && c.backlog.size() > c.backlog_limit) {
    // The client does not read its events: its ring is full and `backlog_limit` more wait
    // behind it (with 0, none may). Refuse the request (after the CM's call that made it
    // returns) rather than queue it without bound (a SIDR request: SIDR_REP "rejected").
    c.backlog.pop_back();  // still waiting, so the newest
    c.refusing.push_back(ev.id);
    cm_refused_.fetch_add(1, std::memory_order_relaxed);
  }
  account(c);
}

void Lane::account(LaneCm& c) {
  const std::uint64_t now = c.backlog.size() * LaneCm::kWaitingCost;
  const std::uint64_t was = c.waiting_bytes.load(std::memory_order_relaxed);
  if (now == was) return;
  c.waiting_bytes.store(now, std::memory_order_relaxed);
  cm_waiting_.fetch_add(now - was, std::memory_order_relaxed);  // (wraps for a decrease)
}

void Lane::remove(LaneCm* c) {
  std::erase(cms_, c);
  c->backlog.clear();
  account(*c);
}

void Lane::refuse_requests(LaneCm& c) {
  for (const std::uint32_t id : c.refusing) c.session->refuse(id);
  c.refusing.clear();
}

std::size_t Lane::flush(LaneCm& c) {
  if (c.backlog.empty() || c.ring.broken()) return 0;
  std::size_t n = 0;
  while (!c.backlog.empty() && c.ring.stage(c.backlog.front())) {
    c.backlog.pop_front();
    ++n;
  }
  if (n == 0) return 0;
  c.ring.publish();
  account(c);
  if (c.ring.should_wake()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(c.event_fd, &one, sizeof one);
  }
  return n;
}

}  // namespace roce::attach
