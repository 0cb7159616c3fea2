/// @file
/// The connection layer (include/roce/conn.h) on a libroce Context.
#include <roce/conn.h>

#include <cerrno>
#include <chrono>

namespace roce::conn {

namespace {
constexpr int kWcBatch = 32;
constexpr int kCmEventsPerPoll = 64;

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}
constexpr std::size_t kRejPrivateMax = 148;           ///< the private data a REJ carries
constexpr std::uint64_t kLookupEveryNs = 50'000'000;  ///< a waiting request's MAC looked up
constexpr std::uint64_t kArpEveryNs = 200'000'000;    ///< and ARP asked again (as the NFS server)
/// How long flushes wait for the kDisconnected that explains them: attached, the event comes
/// over roced's socket after the flushes are in the shared CQ. A QP that went to error with
/// no event (none comes) has them after this.
constexpr std::uint64_t kHoldFlushesNs = 500'000'000;
}  // namespace

Endpoint::Endpoint(client::Context& ctx, Options o) : ctx_(ctx), o_(o) {
  pd_ = ctx_.alloc_pd();
  wcs_.resize(kWcBatch);
}

Endpoint::~Endpoint() {
  // The exit-time drain: a DREQ for every connection that is up, then the CM's answers.
  bool waiting = false;
  for (auto& [id, c] : conns_) {
    if (c->up && !c->closing) {
      c->closing = ctx_.cm_disconnect(c->cm_id) == 0;
      waiting |= c->closing;
    } else if (c->requested && !c->up && !c->closing) {
      ctx_.cm_reject(c->cm_id);
    }
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(o_.drain_ms);
  while (waiting && std::chrono::steady_clock::now() < end) {
    client::CmEvent ev;
    const int rc = ctx_.cm_get_event(ev, 10);
    if (rc == ENOTCONN) break;
    if (rc == 0) {
      if (Conn* c = by_cm(ev.id); c && ev.type == client::CmEventType::kDisconnected) destroy(*c);
    }
    waiting = false;
    for (auto& [id, c] : conns_) waiting |= c->closing && c->qp != nullptr;
  }
  for (auto& [id, c] : conns_) destroy(*c);
  conns_.clear();
  for (client::Pd* p : retired_) ctx_.dealloc_pd(p);  // EBUSY: the application's MRs remain
  if (pd_ != nullptr) ctx_.dealloc_pd(pd_);
}

Endpoint::Conn* Endpoint::find(ConnId c) {
  auto it = conns_.find(c);
  return it == conns_.end() ? nullptr : it->second.get();
}

Endpoint::Conn* Endpoint::by_cm(std::uint32_t cm_id) {
  auto it = by_cm_.find(cm_id);
  return it == by_cm_.end() ? nullptr : find(it->second);
}

client::Pd* Endpoint::pd(ConnId c) {
  Conn* k = find(c);
  if (k == nullptr) return pd_;
  if (o_.pd_per_connection && k->pd == nullptr) k->pd = ctx_.alloc_pd();
  return k->pd != nullptr ? k->pd : pd_;
}

int Endpoint::dereg_mr(client::Mr* mr) {
  if (const int rc = ctx_.dereg_mr(mr)) return rc;
  std::erase_if(retired_, [this](client::Pd* p) { return ctx_.dealloc_pd(p) == 0; });
  return 0;
}

client::CmConnParam Endpoint::param(std::span<const std::uint8_t> private_data,
                                    bool passive) const {
  client::CmConnParam p;
  if (o_.selective_repeat) {  // our ECE: the REQ offers (0x524F0001), the REP accepts (0x...2)
    p.ece_vendor = 0xFFFFFF;
    p.ece_options = passive ? 0x524F0002u : 0x524F0001u;
  }
  p.responder_resources = o_.responder_resources;
  p.initiator_depth = o_.initiator_depth;
  p.rnr_retry = o_.rnr_retry;
  p.retry_count = o_.retry_count;
  p.private_data.assign(private_data.begin(), private_data.end());
  return p;
}

int Endpoint::make_qp(Conn& c, const QpSizes& s) {
  if (c.qp != nullptr) return EBUSY;
  if (pd_ == nullptr) return errno != 0 ? errno : ENOMEM;
  if (o_.pd_per_connection && c.pd == nullptr) {
    c.pd = ctx_.alloc_pd();
    if (c.pd == nullptr) return errno != 0 ? errno : ENOMEM;
  }
  c.cq = ctx_.create_cq(s.send + s.recv);
  if (c.cq == nullptr) return errno != 0 ? errno : ENOMEM;
  client::QpCap cap;
  cap.max_send_wr = s.send;
  cap.max_recv_wr = s.recv;
  cap.max_send_sge = s.send_sge;
  cap.max_recv_sge = s.recv_sge;
  c.qp = ctx_.create_qp(c.pd != nullptr ? c.pd : pd_, client::QpType::kRc, c.cq, c.cq, cap);
  if (c.qp == nullptr) {
    const int err = errno != 0 ? errno : ENOMEM;
    ctx_.destroy_cq(c.cq);
    c.cq = nullptr;
    return err;
  }
  // INIT, as rdma_create_qp leaves it: receives may be posted before the connection is up.
  client::QpAttr a;
  a.qp_state = client::QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = verbs::kAccessLocalWrite | verbs::kAccessRemoteWrite |
                      verbs::kAccessRemoteRead | verbs::kAccessRemoteAtomic;
  if (const int rc = ctx_.modify_qp(
          c.qp, a, verbs::kQpState | verbs::kQpPkeyIndex | verbs::kQpPort | verbs::kQpAccessFlags))
    return rc;
  return 0;
}

void Endpoint::destroy(Conn& c) {
  if (c.qp != nullptr) ctx_.destroy_qp(c.qp);
  c.qp = nullptr;
  if (c.cq != nullptr) ctx_.destroy_cq(c.cq);
  c.cq = nullptr;
  if (c.pd != nullptr && ctx_.dealloc_pd(c.pd) != 0) retired_.push_back(c.pd);  // MRs in it
  c.pd = nullptr;
  c.closing = false;
  c.up = false;
}

void Endpoint::forget(ConnId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  destroy(*it->second);
  if (auto b = by_cm_.find(it->second->cm_id); b != by_cm_.end() && b->second == id)
    by_cm_.erase(b);
  conns_.erase(it);
}

int Endpoint::listen(std::uint16_t port) { return ctx_.cm_listen(port); }

int Endpoint::prepare(ConnId id, const QpSizes& s) {
  Conn* c = find(id);
  if (c == nullptr || !c->requested || c->up) return ENOENT;
  return make_qp(*c, s);
}

int Endpoint::accept(ConnId id, std::span<const std::uint8_t> private_data) {
  Conn* c = find(id);
  if (c == nullptr || !c->requested || c->up) return ENOENT;
  if (c->qp == nullptr)
    if (const int rc = make_qp(*c, QpSizes{})) return rc;
  const int rc = ctx_.cm_accept(c->cm_id, c->qp, param(private_data, true));
  c->accepted = rc == 0;
  return rc;
}

int Endpoint::reject(ConnId id, std::span<const std::uint8_t> private_data) {
  Conn* c = find(id);
  if (c == nullptr || !c->requested || c->up) return ENOENT;
  // As rdma_reject: too much private data is refused and the request stays to be answered.
  if (private_data.size() > kRejPrivateMax) return EINVAL;
  const int rc = ctx_.cm_reject(c->cm_id, private_data);
  forget(id);
  return rc;
}

int Endpoint::refuse(ConnId id) {
  Conn* c = find(id);
  if (c == nullptr || !c->requested || c->up) return ENOENT;
  const int rc = ctx_.cm_refuse(c->cm_id);
  forget(id);
  return rc;
}

int Endpoint::close(ConnId id) {
  Conn* c = find(id);
  if (c == nullptr) return ENOENT;
  if (c->requested && !c->up && !c->accepted) return reject(id);
  if (!c->closing && (c->up || c->requested || c->active)) ctx_.cm_disconnect(c->cm_id);
  c->closing = true;  // its completions are dropped
  drain_cq(*c, nullptr, nullptr);
  forget(id);  // destroy_qp releases the QP from the CM, which goes on with the DREQ alone
  return 0;
}

ConnId Endpoint::connect(Ipv4Addr dst, std::uint16_t port, const QpSizes& s,
                         std::span<const std::uint8_t> private_data) {
  if (conns_.size() >= o_.max_connections) {
    errno = EDQUOT;
    return 0;
  }
  auto c = std::make_unique<Conn>();
  c->id = next_++;
  c->active = true;
  if (const int rc = make_qp(*c, s)) {
    destroy(*c);
    errno = rc;
    return 0;
  }
  if (const int rc = ctx_.cm_connect(c->qp, dst, port, param(private_data, false), c->cm_id)) {
    destroy(*c);
    errno = rc;
    return 0;
  }
  const ConnId id = c->id;
  by_cm_[c->cm_id] = id;
  conns_.emplace(id, std::move(c));
  return id;
}

int Endpoint::disconnect(ConnId id) {
  Conn* c = find(id);
  if (c == nullptr) return ENOENT;
  if (c->requested && !c->up && !c->accepted) return reject(id);
  // Up, or accepted and waiting for the RTU: a DREQ (the CM refuses it before the RTU; the QP's
  // release below then ends the connection).
  if ((c->up || c->accepted) && !c->closing && ctx_.cm_disconnect(c->cm_id) == 0) {
    c->closing = true;  // destroyed at kDisconnected (or by the destructor's drain)
    return 0;
  }
  if (c->closing) return 0;
  forget(id);
  return 0;
}

client::Qp* Endpoint::qp(ConnId id) {
  Conn* c = find(id);
  return c != nullptr && !c->closing ? c->qp : nullptr;
}

int Endpoint::post_send(ConnId id, const client::SendWr& wr) {
  Conn* c = find(id);
  if (c == nullptr || c->qp == nullptr || c->closing) return ENOTCONN;
  const client::SendWr* bad = nullptr;
  return ctx_.post_send(c->qp, &wr, &bad);
}

int Endpoint::post_recv(ConnId id, const client::RecvWr& wr) {
  Conn* c = find(id);
  if (c == nullptr || c->qp == nullptr || c->closing) return ENOTCONN;
  const client::RecvWr* bad = nullptr;
  return ctx_.post_recv(c->qp, &wr, &bad);
}

int Endpoint::post_recv(ConnId id, std::uint64_t wr_id, void* addr, std::uint32_t length,
                        std::uint32_t lkey) {
  client::Sge sge{reinterpret_cast<std::uint64_t>(addr), length, lkey};
  client::RecvWr wr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return post_recv(id, wr);
}

void Endpoint::on_cm(client::CmEvent& ev, std::vector<Event>& events,
                     std::vector<Completion>& completions) {
  Event out;
  out.peer = ev.peer;
  out.port = ev.port;
  out.reason = ev.reason;
  out.remote = ev.remote;
  if (ev.type == client::CmEventType::kConnectRequest) {
    if (conns_.size() >= o_.max_connections) {
      ctx_.cm_reject(ev.id);
      return;
    }
    auto c = std::make_unique<Conn>();
    c->id = next_++;
    c->cm_id = ev.id;
    c->requested = true;
    out.kind = Event::kConnectRequest;
    out.conn = c->id;
    out.private_data = std::move(ev.private_data);
    by_cm_[ev.id] = c->id;
    conns_.emplace(c->id, std::move(c));
    // accept() needs the peer's MAC: a source the port does not know is asked for it now and
    // reported when it answers (poll_resolving), so that a request from an address that never
    // answers holds nothing but this entry.
    const bool asked = o_.wait_for_mac && take_ask(now_ns());
    if (o_.wait_for_mac && ctx_.neighbour(ev.peer, asked) == EAGAIN) {
      // Full: the oldest waiting request gives way (REJ), not the newcomer. A segment host
      // keeps every slot for the price of max_resolving REQs per resolve_ms from addresses
      // that never answer; the newest is the one whose answer may still come, so a flood must
      // outpace a real ARP answer to turn a host away.
      if (o_.max_resolving == 0) {
        reject(out.conn);
        return;
      }
      if (resolving_.size() >= o_.max_resolving) {
        const ConnId oldest = resolving_.front().conn;
        resolving_.erase(resolving_.begin());
        reject(oldest);
      }
      const std::uint64_t now = now_ns();
      resolving_.push_back({out.conn, out.peer, out.port, std::move(out.private_data),
                            now + static_cast<std::uint64_t>(o_.resolve_ms) * 1000000,
                            now + kLookupEveryNs, asked ? now + kArpEveryNs : now});
      return;
    }
    events.push_back(std::move(out));
    return;
  }
  Conn* c = by_cm(ev.id);
  if (c == nullptr) return;  // a connection the application already let go
  if (std::erase_if(resolving_, [&](const Resolving& r) { return r.conn == c->id; }) != 0) {
    forget(c->id);  // the peer gave up before we told anyone of it
    return;
  }
  out.conn = c->id;
  switch (ev.type) {
    case client::CmEventType::kEstablished:
      if (c->up) return;  // already reported at its first completion (data before the RTU)
      c->up = true;
      out.kind = Event::kEstablished;
      out.private_data = std::move(ev.private_data);
      if (c->closing) return;
      events.push_back(std::move(out));
      return;
    case client::CmEventType::kRejected:
    case client::CmEventType::kUnreachable:
    case client::CmEventType::kConnectError:
      out.kind = ev.type == client::CmEventType::kRejected      ? Event::kRejected
                 : ev.type == client::CmEventType::kUnreachable ? Event::kUnreachable
                                                                : Event::kConnectError;
      out.private_data = std::move(ev.private_data);
      break;
    case client::CmEventType::kDisconnected:
      out.kind = Event::kDisconnected;
      break;
    default:
      return;
  }
  const bool reported = !c->closing;  // disconnect() promised no event
  // At kDisconnected, what the CQ holds came before the end (rdma_cm leaves the QP to the
  // application at DISCONNECTED, which polls it dry): the peer's last messages, then the
  // flushes. Handed over with the event; the QP goes now. After our own disconnect() nothing is
  // reported. A connection that never came up has only flushed receives: dropped with its QP.
  if (out.kind == Event::kDisconnected) {
    if (reported)
      for (const client::Wc& wc : c->held) completions.push_back(Completion{c->id, wc});
    c->held.clear();
    drain_cq(*c, &events, &completions);
  } else
    drain_cq(*c, nullptr, nullptr);
  forget(c->id);
  if (reported) events.push_back(std::move(out));
}

void Endpoint::drain_cq(Conn& c, std::vector<Event>* events, std::vector<Completion>* out,
                        bool hold) {
  if (c.cq == nullptr) return;
  for (;;) {
    const int n = ctx_.poll_cq(c.cq, kWcBatch, wcs_.data());
    if (n <= 0) return;
    if (out != nullptr && !c.closing) {
      // Data before the RTU (lost, or behind the data): IBA's communication established. The
      // CM hears it (cm_notify, as rdma_notify), and the connection is reported up now, once:
      // the CM's own event that follows is not reported again.
      if (c.accepted && !c.up && events != nullptr && wcs_[0].status == verbs::WcStatus::kSuccess) {
        if (!c.notified) ctx_.cm_notify(c.cm_id);
        c.notified = true;
        c.up = true;
        Event e;
        e.kind = Event::kEstablished;
        e.conn = c.id;
        events->push_back(std::move(e));
      }
      for (int i = 0; i < n; ++i) {
        const client::Wc& wc = wcs_[i];
        // A flush with no failure before it: the peer's DREQ (or our port) moved the QP to
        // error, and the event saying so may not have been read yet. It waits for it.
        if (hold && wc.status == verbs::WcStatus::kWrFlushErr && !c.failed) {
          if (c.held.empty()) c.held_since_ns = now_ns();
          c.held.push_back(wc);
          continue;
        }
        if (wc.status != verbs::WcStatus::kSuccess && wc.status != verbs::WcStatus::kWrFlushErr)
          c.failed = true;
        out->push_back(Completion{c.id, wc});
      }
    }
    if (n < kWcBatch) return;
  }
}

bool Endpoint::take_ask(std::uint64_t now) {
  if (now - ask_window_ns_ >= 100'000'000) {
    ask_window_ns_ = now;
    asks_ = 0;
  }
  if (asks_ >= o_.max_arp_asks) return false;
  ++asks_;
  return true;
}

void Endpoint::poll_resolving(std::vector<Event>& events) {
  if (resolving_.empty()) return;
  const std::uint64_t now = now_ns();
  for (auto r = resolving_.begin(); r != resolving_.end();) {
    // Looked up at a pace (attached, a lookup is a round trip to roced and a command on the
    // port's loop 0), ARP asked again every kArpEveryNs (a lost answer does not cost it).
    if (now < r->next_lookup_ns && now <= r->deadline_ns) {
      ++r;
      continue;
    }
    r->next_lookup_ns = now + kLookupEveryNs;
    const bool ask = now >= r->next_arp_ns && take_ask(now);  // else at a later turn
    if (ask) r->next_arp_ns = now + kArpEveryNs;
    if (ctx_.neighbour(r->peer, ask) != EAGAIN) {
      Event e;
      e.kind = Event::kConnectRequest;
      e.conn = r->conn;
      e.peer = r->peer;
      e.port = r->port;
      e.private_data = std::move(r->private_data);
      events.push_back(std::move(e));
      r = resolving_.erase(r);
    } else if (now > r->deadline_ns) {
      const ConnId c = r->conn;
      r = resolving_.erase(r);
      reject(c);  // no ARP answer: REJ, as a full backlog would
    } else {
      ++r;
    }
  }
}

bool Endpoint::poll(std::vector<Event>& events, std::vector<Completion>& completions) {
  const std::size_t e0 = events.size(), c0 = completions.size();
  for (int i = 0; i < kCmEventsPerPoll; ++i) {
    client::CmEvent ev;
    if (ctx_.cm_get_event(ev, 0) != 0) break;
    on_cm(ev, events, completions);
  }
  poll_resolving(events);
  for (auto& [id, c] : conns_) {
    drain_cq(*c, &events, &completions, true);
    if (!c->held.empty() && now_ns() - c->held_since_ns >= kHoldFlushesNs) {
      // No event came: the QP broke by itself. The flushes are the application's now.
      for (const client::Wc& wc : c->held) completions.push_back(Completion{c->id, wc});
      c->held.clear();
      c->failed = true;
    }
  }
  return events.size() != e0 || completions.size() != c0;
}

}  // namespace roce::conn
