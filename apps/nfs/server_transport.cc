/// @file
/// RPC-over-RDMA v1 responder (server_transport.h).
#include "apps/nfs/server_transport.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "controlplane/address.h"
#include "controlplane/cm/cm_hub.h"
#include "runtime/cm_agent.h"

namespace roce::nfs {

using namespace roce::engine;

namespace {
constexpr std::uint64_t kWrRecv = 1, kWrSend = 2, kWrRead = 3, kWrWrite = 4;
std::uint64_t wr_id(std::uint32_t conn, std::uint64_t kind, std::uint32_t idx) {
  return (std::uint64_t{conn} << 32) | (kind << 24) | idx;
}
/// Receives posted beyond the credits: where a message beyond them lands (to be counted).
constexpr std::uint32_t kRecvExtra = 4;
/// ARP requests for a REQ's source, while it does not answer.
constexpr std::uint64_t kArpEveryNs = 200'000'000;
}  // namespace

struct RpcRdmaServer::Job {
  std::vector<std::uint8_t> call;
  RpcReply reply;
  wire::Ipv4Addr peer;  ///< the connection's source, for the handler's authorization
};

struct RpcRdmaServer::Conn {
  std::uint32_t id = 0;
  cm::ConnId cm;
  wire::Ipv4Addr peer;  ///< the client's IPv4 address (the REQ's source GID)
  Qp* qp = nullptr;
  bool up = false;
  bool closing = false;  ///< an error completion came: disconnected, waiting for the CM's event
  bool remote_inv = false;
  std::uint32_t peer_recv = rdma::kDefaultInline;  ///< what the client can receive inline
  std::vector<std::uint8_t> recv_mem, send_mem, data_mem, reply_mem;
  Mr* recv_mr = nullptr;
  Mr* send_mr = nullptr;
  Mr* data_mr = nullptr;
  Mr* reply_mr = nullptr;
  /// Received messages not served yet, in order: (receive slot, length). They stay in their
  /// receive buffers, which are posted again once the message is read.
  std::deque<std::pair<std::uint32_t, std::uint32_t>> ready;
  /// Calls received and not answered yet: at most the credits granted (RFC 8166 3.3.1). The
  /// client sends a call only after the reply that freed its credit, which we count as answered
  /// when we post it: a message that finds in_flight at the credits is beyond them.
  std::uint32_t in_flight = 0;
  std::uint64_t active_ns = 0;  ///< the last message received or reply sent (or the accept)
  /// kReading: RDMA READs of a read chunk outstanding; kQueued: the call waits for room at the
  /// worker; kRunning: the handler has it.
  enum State { kIdle, kReading, kQueued, kRunning } state = kIdle;
  std::shared_ptr<Job> job;  ///< kQueued, kRunning
  /// Replies in flight (a SEND completes when the client ACKs it): a ring of send buffers, so
  /// that the next call need not wait for the ACK. data_mem and reply_mem are the source of a
  /// reply's RDMA WRITEs, which a retransmission reads again: a call that needs them waits
  /// until the reply that used them has completed.
  std::vector<bool> slot_busy;
  std::uint32_t next_slot = 0;
  bool data_busy = false;
  std::uint32_t data_slot = 0;
  // the call being served
  rdma::Header hdr;
  std::vector<std::uint8_t> inline_part;
  std::uint32_t read_total = 0, reads_left = 0, read_position = 0;
};

RpcRdmaServer::RpcRdmaServer(runtime::Env& env, ServerOptions o, Handler h, CallWorker* worker)
    : env_(env), opt_(o), handler_(std::move(h)), worker_(worker) {
  opt_.credits = std::clamp<std::uint32_t>(opt_.credits, 1, 128);
  opt_.inline_size = std::clamp<std::uint32_t>(opt_.inline_size, 1024, 64 * 1024);
  opt_.max_connections = std::max<std::uint32_t>(opt_.max_connections, 1);
  opt_.max_half_open = std::clamp<std::uint32_t>(opt_.max_half_open, 1, opt_.max_connections);
  if (!worker_) {
    own_worker_ = std::make_unique<CallWorker>();
    worker_ = own_worker_.get();
  }
  // The engine's one CM (QP1), shared with roced's other services and attached clients.
  hub_ = cm::CmHub::get(env_.eng, runtime::cm_agent_config(env_));
  owner_ = hub_->add_owner([this](const cm::CmEvent& e) { on_cm(e); });
  pd_ = env_.eng.alloc_pd();
  cq_ = env_.eng.create_cq(std::min<std::uint32_t>(8192, env_.eng.config().max_cq_depth));
  if (!pd_ || !cq_) throw std::runtime_error("cannot create the PD and CQ");
}

RpcRdmaServer::~RpcRdmaServer() {
  own_worker_.reset();  // the handler it may be running uses this server's handler_
  for (const Pending& p : pending_) hub_->agent().cm().reject(p.id, cm::RejReason::kNoResources);
  for (auto& [id, c] : conns_) release(*c);
  conns_.clear();
  hub_->remove_owner(owner_);
  hub_.reset();
  if (cq_) env_.eng.destroy_cq(cq_);
  if (pd_) env_.eng.dealloc_pd(pd_);
}

void RpcRdmaServer::listen(std::uint16_t port) {
  if (!hub_->listen(owner_, cm::service_id(cm::PortSpace::kTcp, port)))
    throw std::runtime_error("rdma_cm port " + std::to_string(port) + " is taken on this port");
}

void RpcRdmaServer::release(Conn& c) {
  if (c.qp) {
    by_qpn_.erase(c.qp->qpn);
    hub_->agent().release(c.qp);
    env_.eng.destroy_qp(c.qp);
    c.qp = nullptr;
  }
  for (Mr* m : {c.recv_mr, c.send_mr, c.data_mr, c.reply_mr})
    if (m) env_.eng.dereg_mr(m);
  c.recv_mr = c.send_mr = c.data_mr = c.reply_mr = nullptr;
}

void RpcRdmaServer::close(std::uint32_t conn) {
  const auto ci = conns_.find(conn);
  if (ci == conns_.end()) return;
  Conn& c = *ci->second;
  release(c);
  by_cm_.erase(c.cm.v);
  std::erase(waiting_, conn);
  conns_.erase(ci);  // a call at the worker finds no connection when it returns
  ++st_.closed;
}

std::size_t RpcRdmaServer::half_open() const {
  std::size_t n = pending_.size();
  for (const auto& [id, c] : conns_) n += !c->up;
  return n;
}

void RpcRdmaServer::on_connect_request(const cm::CmEvent& e) {
  const auto peer = ctl::ipv4_from_gid(e.peer.gid);
  if (!peer) {
    hub_->agent().cm().reject(e.id, cm::RejReason::kConsumerDefined);
    return;
  }
  if (opt_.allows && !opt_.allows(*peer)) {
    // Not in the export's client list: refused before it holds a QP, buffers or a slot.
    ++st_.denied;
    hub_->agent().cm().reject(e.id, cm::RejReason::kConsumerDefined);
    return;
  }
  if (const Room r = room(*peer, 0); half_open() >= opt_.max_half_open || (!r.fits && !r.victim)) {
    ++st_.rejected_full;
    hub_->agent().cm().reject(e.id, cm::RejReason::kNoResources);
    return;
  }
  if (env_.loop.neighbour().lookup(*peer)) return accept(e.id, *peer, e.private_data);
  // The QP's path needs the peer's MAC: ask, and go on serving; resolve_pending() accepts the
  // REQ when the answer is in the cache (the CM answers a repeated REQ meanwhile).
  const std::uint64_t now = port::now_ns();
  env_.loop.resolve(*peer);
  pending_.push_back({e.id, *peer, e.private_data,
                      now + std::uint64_t{opt_.resolve_timeout_ms} * 1'000'000, now + kArpEveryNs});
}

RpcRdmaServer::Room RpcRdmaServer::room(wire::Ipv4Addr peer, std::uint32_t self) {
  // Only established connections count: a REQ proves nothing (its source address may be
  // forged), so nobody is closed for one before its RTU (then newcomer_established()).
  std::size_t same = 0, up = 0;
  Room r;
  for (const auto& [id, c] : conns_) {
    if (id == self || !c->up) continue;
    ++up;
    const bool idle = c->in_flight == 0 && c->state == Conn::kIdle && c->ready.empty() &&
                      !c->closing && !c->data_busy;
    if (c->peer == peer) {
      ++same;
      if (idle && (!r.own || c->active_ns < r.own->active_ns)) r.own = c.get();
    }
    if (idle && (!r.any || c->active_ns < r.any->active_ns)) r.any = c.get();
  }
  const bool full = up >= opt_.max_connections;
  if (same >= opt_.max_per_peer) {
    r.fits = false;
    r.victim = r.own;
  } else if (full) {
    r.fits = false;
    if (r.any && port::now_ns() - r.any->active_ns >= std::uint64_t{opt_.reap_idle_ms} * 1'000'000)
      r.victim = r.any;
  }
  return r;
}

void RpcRdmaServer::newcomer_established(Conn& c) {
  const Room r = room(c.peer, c.id);
  if (r.fits) return;
  if (r.victim) {
    // DREQ to the client idle the longest (which reconnects when it needs to).
    ++st_.reaped;
    hub_->agent().cm().disconnect(r.victim->cm);
    close(r.victim->id);
    return;
  }
  // Every candidate has a call under way: the newcomer goes.
  ++st_.rejected_full;
  hub_->agent().cm().disconnect(c.cm);
  close(c.id);
}

void RpcRdmaServer::resolve_pending() {
  if (pending_.empty()) return;
  const std::uint64_t now = port::now_ns();
  for (std::size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    if (env_.loop.neighbour().lookup(p.peer)) {
      const Pending q = std::move(p);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      accept(q.id, q.peer, q.private_data);
      continue;
    }
    if (now >= p.deadline_ns) {
      ++st_.unresolved;
      hub_->agent().cm().reject(p.id, cm::RejReason::kConsumerDefined);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (now >= p.next_arp_ns) {
      env_.loop.resolve(p.peer);
      p.next_arp_ns = now + kArpEveryNs;
    }
    ++i;
  }
}

void RpcRdmaServer::accept(cm::ConnId id, wire::Ipv4Addr peer,
                           std::span<const std::uint8_t> private_data) {
  auto c = std::make_unique<Conn>();
  c->id = next_id_++;
  c->cm = id;
  c->peer = peer;
  // RFC 8797: the client's sizes and whether it takes SEND with invalidate; 1024 without.
  if (const auto pd = rdma::decode_private(private_data)) {
    c->remote_inv = pd->remote_invalidate;
    c->peer_recv = pd->receive_size;
  }
  const std::uint32_t nrecv = opt_.credits + kRecvExtra;
  c->recv_mem.resize(std::size_t{nrecv} * opt_.inline_size);
  c->send_mem.resize(std::size_t{opt_.credits} * opt_.inline_size);
  c->slot_busy.assign(opt_.credits, false);
  c->data_mem.resize(opt_.max_io + 8192);
  c->reply_mem.resize(opt_.max_reply);
  c->recv_mr = env_.eng.reg_mr(pd_, c->recv_mem.data(), c->recv_mem.size(), kAccessLocalWrite);
  c->send_mr = env_.eng.reg_mr(pd_, c->send_mem.data(), c->send_mem.size(), kAccessLocalWrite);
  c->data_mr = env_.eng.reg_mr(pd_, c->data_mem.data(), c->data_mem.size(), kAccessLocalWrite);
  c->reply_mr = env_.eng.reg_mr(pd_, c->reply_mem.data(), c->reply_mem.size(), kAccessLocalWrite);
  c->qp = env_.eng.create_qp(pd_, QpType::kRc, cq_, cq_, QpCap{256, nrecv, 2, 1, 0});
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = kAccessLocalWrite;
  if (!c->recv_mr || !c->send_mr || !c->data_mr || !c->reply_mr || !c->qp ||
      env_.eng.modify_qp(c->qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk) {
    hub_->agent().cm().reject(id, cm::RejReason::kNoResources);
    release(*c);
    return;
  }
  for (std::uint32_t i = 0; i < nrecv; ++i) post_recv(*c, i);
  cm::AcceptParams ap;
  ap.starting_psn = wire::Psn(std::random_device{}());
  ap.responder_resources = 16;
  ap.initiator_depth = 16;  // we READ the client's read chunks
  rdma::ConnectPrivate mine;
  mine.send_size = opt_.inline_size;
  mine.receive_size = opt_.inline_size;
  ap.private_data = rdma::encode(mine);
  if (hub_->agent().accept(id, c->qp, ap) != cm::CmStatus::kOk) {
    release(*c);
    return;
  }
  by_cm_[id.v] = c->id;
  by_qpn_[c->qp->qpn] = c->id;
  c->active_ns = port::now_ns();
  ++st_.connections;
  conns_[c->id] = std::move(c);
}

void RpcRdmaServer::on_cm(const cm::CmEvent& e) {
  using T = cm::CmEventType;
  if (e.type == T::kConnectRequest) return on_connect_request(e);
  const bool terminal = e.type == T::kDisconnected || e.type == T::kUnreachable ||
                        e.type == T::kRejected || e.type == T::kConnectError ||
                        e.type == T::kTimewaitExit;
  if (terminal)  // a REQ given up while its source was being resolved
    std::erase_if(pending_, [&](const Pending& p) { return p.id == e.id; });
  const auto it = by_cm_.find(e.id.v);
  if (it == by_cm_.end()) return;
  if (e.type == T::kEstablished) {
    if (auto ci = conns_.find(it->second); ci != conns_.end() && !ci->second->up) {
      ci->second->up = true;
      newcomer_established(*ci->second);  // room made now, if it must be
    }
  } else if (terminal) {
    // DREQ, REJ after our REP, REP or DREQ retries exhausted, half-open timeout: nothing more
    // will come on this connection.
    close(it->second);
  }
}

namespace {
/// A free send buffer of `c` (the ring never fills: there are as many as credits).
template <class C>
std::uint32_t take_slot(C& c) {
  for (std::size_t k = 0; k < c.slot_busy.size(); ++k) {
    const std::uint32_t s = (c.next_slot + static_cast<std::uint32_t>(k)) %
                            static_cast<std::uint32_t>(c.slot_busy.size());
    if (!c.slot_busy[s]) {
      c.slot_busy[s] = true;
      c.next_slot = s + 1;
      return s;
    }
  }
  return 0;
}
}  // namespace

void RpcRdmaServer::send_error(Conn& c, std::uint32_t xid, rdma::ErrorCode code) {
  rdma::Header h;
  h.xid = xid;
  h.credits = opt_.credits;
  h.proc = rdma::Proc::kError;
  h.error = code;
  (code == rdma::ErrorCode::kVers ? st_.err_vers : st_.err_chunk)++;
  std::vector<std::uint8_t> b;
  rdma::encode(h, b);
  const std::uint32_t slot = take_slot(c);
  std::uint8_t* buf = c.send_mem.data() + std::size_t{slot} * opt_.inline_size;
  std::memcpy(buf, b.data(), b.size());
  Sge sge{reinterpret_cast<std::uint64_t>(buf), static_cast<std::uint32_t>(b.size()),
          c.send_mr->key};
  SendWr wr;
  wr.wr_id = wr_id(c.id, kWrSend, slot);
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  c.state = Conn::kIdle;
  answered(c);
  env_.eng.post_send(c.qp, &wr, nullptr);
}

void RpcRdmaServer::answered(Conn& c) {
  if (c.in_flight) --c.in_flight;
}

void RpcRdmaServer::post_recv(Conn& c, std::uint32_t slot) {
  Sge sge{reinterpret_cast<std::uint64_t>(c.recv_mem.data() + std::size_t{slot} * opt_.inline_size),
          opt_.inline_size, c.recv_mr->key};
  RecvWr wr;
  wr.wr_id = wr_id(c.id, kWrRecv, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  env_.eng.post_recv(c.qp, &wr, nullptr);
}

void RpcRdmaServer::next(Conn& c) {
  while (c.state == Conn::kIdle && !c.ready.empty()) {
    // A free send buffer for the reply (one per credit: the client never has more calls out).
    if (std::find(c.slot_busy.begin(), c.slot_busy.end(), false) == c.slot_busy.end()) return;
    const auto [slot, len] = c.ready.front();
    const std::span<const std::uint8_t> m(c.recv_mem.data() + std::size_t{slot} * opt_.inline_size,
                                          len);
    if (c.data_busy) {
      // A call with chunks needs data_mem/reply_mem: wait for the reply that still uses them.
      rdma::Header peek;
      std::size_t hl = 0;
      if (rdma::decode(m, peek, hl) == rdma::DecodeError::kOk &&
          (!peek.reads.empty() || !peek.writes.empty() || peek.reply))
        return;
    }
    c.ready.pop_front();
    std::size_t hl = 0;
    const auto err = rdma::decode(m, c.hdr, hl);
    if (err == rdma::DecodeError::kOk)
      c.inline_part.assign(m.begin() + static_cast<std::ptrdiff_t>(hl), m.end());
    const std::size_t mlen = m.size();
    post_recv(c, slot);  // the message is read: its buffer takes the next one
    if (err == rdma::DecodeError::kBadVersion)
      return send_error(c, c.hdr.xid, rdma::ErrorCode::kVers);
    if (err != rdma::DecodeError::kOk || c.hdr.proc == rdma::Proc::kError) {
      if (mlen < 4) {  // not even an XID: nothing to answer
        answered(c);
        continue;
      }
      return send_error(c, c.hdr.xid, rdma::ErrorCode::kChunk);
    }
    ++st_.calls;
    c.read_total = 0;
    c.reads_left = 0;
    if (c.hdr.reads.empty()) {
      if (c.hdr.proc != rdma::Proc::kMsg) return send_error(c, c.hdr.xid, rdma::ErrorCode::kChunk);
      assemble_and_run(c);
      return;
    }
    // One read chunk (every segment at one position), pulled into data_mem in order.
    c.read_position = c.hdr.reads.front().position;
    std::uint64_t total = 0;
    for (const auto& r : c.hdr.reads) {
      if (r.position != c.read_position) return send_error(c, c.hdr.xid, rdma::ErrorCode::kChunk);
      total += r.seg.length;
    }
    if (total > c.data_mem.size() || c.read_position > c.inline_part.size() ||
        (c.read_position == 0) != (c.hdr.proc == rdma::Proc::kNomsg))
      return send_error(c, c.hdr.xid, rdma::ErrorCode::kChunk);
    std::uint32_t at = 0, k = 0;
    for (const auto& r : c.hdr.reads) {
      if (r.seg.length == 0) continue;
      Sge sge{reinterpret_cast<std::uint64_t>(c.data_mem.data() + at), r.seg.length,
              c.data_mr->key};
      SendWr wr;
      wr.wr_id = wr_id(c.id, kWrRead, k++);
      wr.opcode = WrOpcode::kRead;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.send_flags = kSendSignaled;
      wr.rdma.remote_addr = r.seg.offset;
      wr.rdma.rkey = r.seg.handle;
      if (env_.eng.post_send(c.qp, &wr, nullptr) != kOk)
        return send_error(c, c.hdr.xid, rdma::ErrorCode::kChunk);
      ++c.reads_left;
      ++st_.reads;
      at += r.seg.length;
    }
    c.read_total = at;
    st_.read_bytes += at;
    if (c.reads_left == 0) {
      assemble_and_run(c);
      return;
    }
    c.state = Conn::kReading;
  }
}

void RpcRdmaServer::assemble_and_run(Conn& c) {
  // The call: inline up to the position, the chunk's data and its XDR pad, the rest inline.
  std::vector<std::uint8_t> call;
  if (c.read_total || !c.hdr.reads.empty()) {
    const auto pos = static_cast<std::ptrdiff_t>(c.read_position);
    call.assign(c.inline_part.begin(), c.inline_part.begin() + pos);
    call.insert(call.end(), c.data_mem.begin(), c.data_mem.begin() + c.read_total);
    if (c.read_position) call.insert(call.end(), xdr_pad(c.read_total), 0);
    call.insert(call.end(), c.inline_part.begin() + pos, c.inline_part.end());
  } else {
    call = std::move(c.inline_part);
  }
  c.job = std::make_shared<Job>();
  c.job->call = std::move(call);
  c.job->peer = c.peer;
  c.state = Conn::kQueued;
  submit(c);
}

void RpcRdmaServer::submit(Conn& c) {
  auto job = c.job;
  if (!worker_->submit([this, job] { run_handler(*job); },
                       [this, id = c.id, job] { finish(id, job); })) {
    // The worker is full: the call waits here (and the client, out of credits, waits too).
    if (std::find(waiting_.begin(), waiting_.end(), c.id) == waiting_.end())
      waiting_.push_back(c.id);
    return;
  }
  c.state = Conn::kRunning;
}

// The one place the handler is called (on the worker thread). j.peer is the client's address.
void RpcRdmaServer::run_handler(Job& j) { handler_(CallContext{j.peer}, j.call, j.reply); }

void RpcRdmaServer::finish(std::uint32_t conn, const std::shared_ptr<Job>& j) {
  const auto ci = conns_.find(conn);
  if (ci == conns_.end()) return;  // closed while the handler ran
  Conn& c = *ci->second;
  if (c.job != j || c.state != Conn::kRunning) return;
  c.job.reset();
  c.state = Conn::kIdle;
  if (c.closing) return;
  send_reply(c, j->reply);
  next(c);
}

void RpcRdmaServer::send_reply(Conn& c, RpcReply& reply) {
  if (reply.msg.empty()) {  // nothing to answer (no XID): the credit comes back anyway
    c.state = Conn::kIdle;
    return send_error(c, c.hdr.xid, rdma::ErrorCode::kChunk);
  }
  rdma::Header h;
  h.xid = c.hdr.xid;
  h.credits = opt_.credits;
  h.proc = rdma::Proc::kMsg;
  std::uint32_t inv_rkey = 0;
  // The write list is echoed with what was written (RFC 8166 3.4.6): the payload goes to the
  // first write chunk; other chunks come back empty.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> writes;  // (data offset, segment index)
  for (std::size_t w = 0; w < c.hdr.writes.size(); ++w) {
    rdma::WriteChunk echo = c.hdr.writes[w];
    std::uint64_t left = (w == 0 && reply.has_payload) ? reply.payload.size() : 0;
    if (w == 0 && reply.has_payload) {
      if (left > echo.length() || left > c.data_mem.size()) {
        return send_error(c, c.hdr.xid, rdma::ErrorCode::kChunk);
      }
      std::memcpy(c.data_mem.data(), reply.payload.data(), reply.payload.size());
    }
    std::uint64_t at = 0;
    for (auto& s : echo.segments) {
      const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::uint64_t>(left, s.length));
      if (n) {
        Sge sge{reinterpret_cast<std::uint64_t>(c.data_mem.data() + at), n, c.data_mr->key};
        SendWr wr;
        wr.wr_id = wr_id(c.id, kWrWrite, 0);
        wr.opcode = WrOpcode::kWrite;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.rdma.remote_addr = s.offset;
        wr.rdma.rkey = s.handle;
        env_.eng.post_send(c.qp, &wr, nullptr);
        ++st_.writes;
        st_.write_bytes += n;
        if (!inv_rkey) inv_rkey = s.handle;
      }
      s.length = n;
      left -= n;
      at += n;
    }
    h.writes.push_back(std::move(echo));
  }
  std::vector<std::uint8_t> msg = std::move(reply.msg);
  if (reply.has_payload && c.hdr.writes.empty()) {  // no write chunk: the data goes inline
    const std::size_t n = reply.payload.size();
    msg.insert(msg.end(), reply.payload.begin(), reply.payload.end());
    msg.insert(msg.end(), xdr_pad(n), 0);
  }
  std::vector<std::uint8_t> hb;
  rdma::encode(h, hb);
  if (hb.size() + msg.size() > std::min(c.peer_recv, opt_.inline_size)) {
    // Too large to send inline: the whole reply goes through the reply chunk (RDMA_NOMSG).
    if (!c.hdr.reply || msg.size() > c.hdr.reply->length() || msg.size() > c.reply_mem.size())
      return send_error(c, c.hdr.xid, rdma::ErrorCode::kChunk);
    std::memcpy(c.reply_mem.data(), msg.data(), msg.size());
    rdma::WriteChunk echo = *c.hdr.reply;
    std::uint64_t left = msg.size(), at = 0;
    for (auto& s : echo.segments) {
      const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::uint64_t>(left, s.length));
      if (n) {
        Sge sge{reinterpret_cast<std::uint64_t>(c.reply_mem.data() + at), n, c.reply_mr->key};
        SendWr wr;
        wr.wr_id = wr_id(c.id, kWrWrite, 1);
        wr.opcode = WrOpcode::kWrite;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.rdma.remote_addr = s.offset;
        wr.rdma.rkey = s.handle;
        env_.eng.post_send(c.qp, &wr, nullptr);
        ++st_.writes;
        if (!inv_rkey) inv_rkey = s.handle;
      }
      s.length = n;
      left -= n;
      at += n;
    }
    h.proc = rdma::Proc::kNomsg;
    h.reply = std::move(echo);
    msg.clear();
    hb.clear();
    rdma::encode(h, hb);
    ++st_.reply_chunks;
  }
  if (!inv_rkey && !c.hdr.reads.empty()) inv_rkey = c.hdr.reads.front().seg.handle;
  if (!inv_rkey && c.hdr.reply)
    inv_rkey = c.hdr.reply->segments.empty() ? 0 : c.hdr.reply->segments.front().handle;
  const std::uint32_t slot = take_slot(c);
  if (!c.hdr.reads.empty() || !c.hdr.writes.empty() || c.hdr.reply) {
    c.data_busy = true;
    c.data_slot = slot;
  }
  std::uint8_t* buf = c.send_mem.data() + std::size_t{slot} * opt_.inline_size;
  std::memcpy(buf, hb.data(), hb.size());
  std::memcpy(buf + hb.size(), msg.data(), msg.size());
  Sge sge{reinterpret_cast<std::uint64_t>(buf), static_cast<std::uint32_t>(hb.size() + msg.size()),
          c.send_mr->key};
  SendWr wr;
  wr.wr_id = wr_id(c.id, kWrSend, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  if (c.remote_inv && inv_rkey) {
    wr.opcode = WrOpcode::kSendInv;  // the client invalidates nothing itself (RFC 8166 3.4.2)
    wr.invalidate_rkey = inv_rkey;
    ++st_.send_inv;
  } else {
    wr.opcode = WrOpcode::kSend;
  }
  c.state = Conn::kIdle;
  answered(c);
  env_.eng.post_send(c.qp, &wr, nullptr);
}

void RpcRdmaServer::on_wc(const Wc& w) {
  const auto q = by_qpn_.find(w.qp_num);
  if (q == by_qpn_.end()) return;
  auto ci = conns_.find(q->second);
  if (ci == conns_.end()) return;
  Conn& c = *ci->second;
  if (w.status != WcStatus::kSuccess) {
    // The connection is broken: the client reconnects (and re-registers). The CM's event for
    // the DREQ releases it; without a connection to disconnect, release it now.
    if (c.closing) return;
    c.closing = true;
    c.ready.clear();
    if (hub_->agent().cm().disconnect(c.cm) != cm::CmStatus::kOk) close(c.id);
    return;
  }
  if (c.closing) return;
  const std::uint64_t kind = (w.wr_id >> 24) & 0xff;
  const std::uint32_t idx = static_cast<std::uint32_t>(w.wr_id & 0xffffff);
  if (kind == kWrRecv) {
    if (!c.up) {
      hub_->agent().cm().notify_established(c.cm);
      c.up = true;
    }
    if (c.in_flight >= opt_.credits) {
      // Beyond the credits granted: dropped, counted, its buffer posted again. (Linux svcrdma
      // keeps its sc_max_requests receives posted, refilled on every completion, and queues
      // whatever arrives for its threads without looking at the credits: a client beyond them
      // grows that queue. Here nothing queues beyond the credits.)
      ++st_.over_credit;
      post_recv(c, idx);
    } else {
      ++c.in_flight;
      c.ready.emplace_back(idx, w.byte_len);
      c.active_ns = port::now_ns();
    }
  } else if (kind == kWrRead) {
    if (c.state == Conn::kReading && --c.reads_left == 0) {
      c.state = Conn::kIdle;
      assemble_and_run(c);
    }
  } else if (kind == kWrSend) {
    c.active_ns = port::now_ns();
    if (idx < c.slot_busy.size()) c.slot_busy[idx] = false;
    if (c.data_busy && idx == c.data_slot) c.data_busy = false;
  }
  next(c);
}

bool RpcRdmaServer::poll() {
  bool any = env_.loop.poll_once() != 0;
  hub_->poll(port::now_ns());
  resolve_pending();
  // Replies of the worker (finish() answers and serves the connection's next call), then calls
  // that waited for room at the worker.
  if (worker_->drain()) any = true;
  while (!waiting_.empty()) {
    const auto ci = conns_.find(waiting_.front());
    if (ci == conns_.end() || ci->second->state != Conn::kQueued) {
      waiting_.pop_front();
      continue;
    }
    if (worker_->in_flight() >= worker_->capacity()) break;
    waiting_.pop_front();
    submit(*ci->second);
    any = true;
  }
  Wc wc[32];
  int n;
  while ((n = env_.eng.poll_cq(cq_, 32, wc)) > 0) {
    any = true;
    for (int k = 0; k < n; ++k) on_wc(wc[k]);
  }
  return any || env_.eng.has_work();
}

}  // namespace roce::nfs
