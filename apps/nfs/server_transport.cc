/// @file
/// RPC-over-RDMA v1 responder (server_transport.h).
#include "apps/nfs/server_transport.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace roce::nfs {

using client::Mr;
using client::RecvWr;
using client::SendWr;
using client::Sge;
using client::WcOpcode;
using client::WcStatus;
using client::WrOpcode;

namespace {
constexpr std::uint64_t kWrRecv = 1, kWrSend = 2, kWrRead = 3, kWrWrite = 4;
/// A work request's id: its kind, its index (receive or send slot, chunk buffer) and, for an
/// RDMA READ, the bytes it reads (given back to the READ window when it completes).
std::uint64_t wr_id(std::uint64_t kind, std::uint32_t idx, std::uint32_t bytes = 0) {
  return (std::uint64_t{bytes} << 32) | (kind << 24) | idx;
}
/// Receives posted beyond the credits: where a message beyond them lands (to be counted).
constexpr std::uint32_t kRecvExtra = 4;
/// Backward calls (RFC 8167) out on a connection at once: each one's REPLY takes one of the
/// spare receives above, never a credit's.
constexpr std::uint32_t kBackwardCalls = 2;
/// Chunk buffers of a connection at most (a bit each in Conn::slot_chunks).
constexpr std::uint64_t kMaxChunkBuffers = 8;

/// Whether `m` is an RDMA_MSG without chunks carrying an RPC REPLY (msg_type 1 after the XID).
bool backward_reply(std::span<const std::uint8_t> m) {
  rdma::Header h;
  std::size_t hl = 0;
  if (rdma::decode(m, h, hl) != rdma::DecodeError::kOk || h.proc != rdma::Proc::kMsg ||
      !h.reads.empty() || !h.writes.empty() || h.reply || m.size() < hl + 8)
    return false;
  const std::uint8_t* t = m.data() + hl + 4;
  return (std::uint32_t{t[0]} << 24 | std::uint32_t{t[1]} << 16 | std::uint32_t{t[2]} << 8 |
          t[3]) == 1;
}
/// ARP requests for a REQ's source, while it does not answer.
constexpr std::uint64_t kArpEveryNs = 200'000'000;

std::uint64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::uint64_t(t.tv_sec) * 1'000'000'000 + std::uint64_t(t.tv_nsec);
}

conn::Options endpoint_options(const ServerOptions& o) {
  conn::Options e;
  e.wait_for_mac = false;  // the server's own wait (pending_, resolve_timeout_ms, unresolved)
  // The caps are the server's (REJ 3 below); the Endpoint holds what they allow, the pending
  // REQs and the connections being closed.
  e.max_connections = std::size_t{o.max_connections} * 2 + o.max_half_open + 16;
  e.responder_resources = 16;
  e.initiator_depth = 16;  // we READ the client's read chunks
  e.drain_ms = 200;
  return e;
}
}  // namespace

/// One call of a connection, from its header to its reply.
struct RpcRdmaServer::Job {
  conn::ConnId conn = 0;
  rdma::Header hdr;                       ///< the call's transport header (its chunks)
  std::vector<std::uint8_t> inline_part;  ///< what came after the header in the SEND
  std::uint32_t read_total = 0, read_position = 0;
  std::vector<std::uint8_t> call;
  RpcReply reply;
  wire::Ipv4Addr peer;           ///< the connection's source, for the handler's authorization
  std::uint64_t charge = 0;      ///< what it counts in its connection's `held` until answered
  std::uint32_t reads_left = 0;  ///< RDMA READs of its read chunk not completed yet
  bool short_pull = false;       ///< a READ of its chunk could not be posted: ERR_CHUNK
  /// Its pull, piece by piece: the chunk buffer it goes into, the segment (of hdr.reads) and
  /// the bytes of it the next piece starts at, and where in the buffer that piece lands.
  std::uint32_t chunk = 0, seg = 0, seg_at = 0, buf_at = 0;
  bool all_posted() const { return seg >= hdr.reads.size(); }
};

struct RpcRdmaServer::Conn {
  conn::ConnId id = 0;
  wire::Ipv4Addr peer;  ///< the client's IPv4 address (the REQ's source GID)
  bool up = false;
  bool closing = false;  ///< an error completion came: being closed
  bool remote_inv = false;
  std::uint32_t peer_recv = rdma::kDefaultInline;  ///< what the client can receive inline
  /// One shared-memory buffer (Context::alloc_buffer), registered once in three MRs: the
  /// receives, the sends, and the chunk buffers.
  client::Buffer* buf = nullptr;
  std::span<std::uint8_t> recv_mem, send_mem, chunk_mem;
  Mr* recv_mr = nullptr;
  Mr* send_mr = nullptr;
  Mr* chunk_mr = nullptr;
  /// The chunk buffers (chunk_len bytes each, in chunk_mem): a read chunk is pulled into one
  /// (free again once the call is copied out of it), a reply's write chunk payload and its reply
  /// chunk are pushed from one each (free again when the reply's SEND completes: a
  /// retransmitted RDMA WRITE reads its source again). Several at once: several RDMA READs and
  /// WRITEs of the connection on the wire, the engine holding READs beyond the ORD.
  std::size_t chunk_len = 0;
  std::vector<bool> chunk_busy;
  /// Per send buffer: the chunk buffers (a bit each) its reply's RDMA WRITEs read.
  std::vector<std::uint32_t> slot_chunks;
  /// Calls whose read chunk is being pulled, by the chunk buffer it goes into.
  std::map<std::uint32_t, std::shared_ptr<Job>> pulls;
  std::uint32_t reads_out = 0;       ///< RDMA READs posted and not completed
  std::uint64_t read_bytes_out = 0;  ///< their bytes (in the server's READ window)
  /// RDMA READs it may have out: what its send queue holds for them (accept()).
  std::uint32_t max_reads = 0;
  /// Received messages not served yet, in order: (receive slot, length). They stay in their
  /// receive buffers, which are posted again once the message is read.
  std::deque<std::pair<std::uint32_t, std::uint32_t>> ready;
  /// Calls received and not answered yet: at most the credits granted (RFC 8166 3.3.1). The
  /// client sends a call only after the reply that freed its credit, which we count as answered
  /// when we post it: a message that finds in_flight at the credits is beyond them.
  std::uint32_t in_flight = 0;
  std::uint32_t calls_out = 0;  ///< backward calls (RFC 8167) sent and not answered
  std::uint64_t active_ns = 0;  ///< the last message received or reply sent (or the accept)
  /// Calls taken from `ready` and not answered yet: being pulled, waiting for room at the
  /// worker, at the worker, or waiting to send their reply. Each will take a send buffer: a
  /// call is taken only while more are free than this.
  std::uint32_t jobs = 0;
  /// The bytes those calls may hold on the heap (the call pulled, the reply's payload waiting
  /// for a chunk buffer): a call is taken only while this stays within max_held (one at least).
  std::uint64_t held = 0;
  /// Finished calls whose reply writes chunks and found too few chunk buffers free: sent in
  /// order as they free.
  std::deque<std::shared_ptr<Job>> replies;
  /// Replies in flight (a SEND completes when the client ACKs it): a ring of send buffers, so
  /// that the next call need not wait for the ACK.
  std::vector<bool> slot_busy;
  std::uint32_t next_slot = 0;

  std::uint32_t free_chunks() const {
    return static_cast<std::uint32_t>(std::count(chunk_busy.begin(), chunk_busy.end(), false));
  }
  /// A free chunk buffer, marked busy (there must be one).
  std::uint32_t take_chunk() {
    for (std::uint32_t k = 0; k < chunk_busy.size(); ++k)
      if (!chunk_busy[k]) {
        chunk_busy[k] = true;
        return k;
      }
    return 0;
  }
  std::uint8_t* chunk(std::uint32_t k) { return chunk_mem.data() + std::size_t{k} * chunk_len; }
  bool chunks_idle() const { return pulls.empty() && free_chunks() == chunk_busy.size(); }
};

RpcRdmaServer::RpcRdmaServer(client::Context& ctx, ServerOptions o, Handler h, CallWorker* worker)
    : ctx_(ctx), opt_(o), handler_(std::move(h)), ep_(ctx, endpoint_options(o)), worker_(worker) {
  opt_.credits = std::clamp<std::uint32_t>(opt_.credits, 1, 128);
  opt_.inline_size = std::clamp<std::uint32_t>(opt_.inline_size, 1024, 64 * 1024);
  opt_.max_connections = std::max<std::uint32_t>(opt_.max_connections, 1);
  opt_.max_half_open = std::clamp<std::uint32_t>(opt_.max_half_open, 1, opt_.max_connections);
  opt_.max_read_bytes =
      std::clamp<std::uint32_t>(opt_.max_read_bytes, kMinReadInflight, kMaxReadInflight);
  opt_.read_piece = std::clamp<std::uint32_t>(opt_.read_piece, 1024, opt_.max_read_bytes);
  if (!worker_) {
    own_worker_ = std::make_unique<CallWorker>();
    worker_ = own_worker_.get();
  }
  if (ep_.pd() == nullptr) throw std::runtime_error("cannot create the PD");
}

RpcRdmaServer::~RpcRdmaServer() {
  own_worker_.reset();  // the handler it may be running uses this server's handler_
  for (const Pending& p : pending_) ep_.refuse(p.id);
  pending_.clear();
  while (!conns_.empty()) close(conns_.begin()->first, true);
}

void RpcRdmaServer::listen(std::uint16_t port) {
  if (const int rc = ep_.listen(port))
    throw std::runtime_error("rdma_cm port " + std::to_string(port) + " is taken on this port (" +
                             std::strerror(rc) + ")");
}

void RpcRdmaServer::release(Conn& c) {
  for (Mr** m : {&c.recv_mr, &c.send_mr, &c.chunk_mr})
    if (*m) {
      ctx_.dereg_mr(*m);
      *m = nullptr;
    }
  if (c.buf) ctx_.free_buffer(c.buf);
  c.buf = nullptr;
}

void RpcRdmaServer::close(conn::ConnId conn, bool end) {
  const auto ci = conns_.find(conn);
  if (ci == conns_.end()) return;
  Conn& c = *ci->second;
  if (end) ep_.close(conn);  // DREQ (if up), the QP destroyed now, before its memory goes
  if (on_closed) on_closed(conn);
  release(c);
  std::erase_if(waiting_, [&](const std::shared_ptr<Job>& j) { return j->conn == conn; });
  // Its pieces not posted go (never posted on a dead connection), and its READs out leave the
  // window: they will not complete (the QP is gone). poll() serves the other pulls.
  std::erase_if(read_queue_, [&](const auto& q) { return q.first == conn; });
  read_bytes_out_ -= std::min(read_bytes_out_, c.read_bytes_out);
  conns_.erase(ci);  // a call at the worker finds no connection when it returns
  ++st_.closed;
}

std::size_t RpcRdmaServer::half_open() const {
  std::size_t n = pending_.size();
  for (const auto& [id, c] : conns_) n += !c->up;
  return n;
}

void RpcRdmaServer::on_connect_request(conn::Event& e) {
  const wire::Ipv4Addr peer = e.peer;
  if (opt_.allows && !opt_.allows(peer)) {
    // Not in the export's client list: refused before it holds a QP, buffers or a slot.
    ++st_.denied;
    ep_.reject(e.conn);  // REJ 28, consumer defined
    return;
  }
  if (const Room r = room(peer, 0); half_open() >= opt_.max_half_open || (!r.fits && !r.victim)) {
    ++st_.rejected_full;
    ep_.refuse(e.conn);  // REJ 3, no resources
    return;
  }
  // The QP's path needs the peer's MAC. Not known yet: ARP is asked (Context::neighbour, which
  // never waits) and we go on serving; resolve_pending() accepts the REQ when the answer is in
  // the cache (the CM answers a repeated REQ meanwhile). A backend that cannot tell: accepted
  // now (cm_accept resolves).
  if (ctx_.neighbour(peer, true) != EAGAIN) return accept(e.conn, peer, e.private_data);
  const std::uint64_t now = now_ns();
  pending_.push_back({e.conn, peer, std::move(e.private_data),
                      now + std::uint64_t{opt_.resolve_timeout_ms} * 1'000'000, now + kArpEveryNs});
}

RpcRdmaServer::Room RpcRdmaServer::room(wire::Ipv4Addr peer, conn::ConnId self) {
  // Only established connections count: a REQ proves nothing (its source address may be
  // forged), so nobody is closed for one before its RTU (then newcomer_established()).
  std::size_t same = 0, up = 0;
  Room r;
  for (const auto& [id, c] : conns_) {
    if (id == self || !c->up) continue;
    ++up;
    const bool idle =
        c->in_flight == 0 && c->jobs == 0 && c->ready.empty() && !c->closing && c->chunks_idle();
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
    if (r.any && now_ns() - r.any->active_ns >= std::uint64_t{opt_.reap_idle_ms} * 1'000'000)
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
    close(r.victim->id, true);
    return;
  }
  // Every candidate has a call under way: the newcomer goes.
  ++st_.rejected_full;
  close(c.id, true);
}

void RpcRdmaServer::resolve_pending() {
  if (pending_.empty()) return;
  const std::uint64_t now = now_ns();
  for (std::size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    const bool ask = now >= p.next_arp_ns;  // ARP asked again every 200 ms
    if (ask) p.next_arp_ns = now + kArpEveryNs;
    if (ctx_.neighbour(p.peer, ask) != EAGAIN) {
      const Pending q = std::move(p);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      accept(q.id, q.peer, q.private_data);
      continue;
    }
    if (now >= p.deadline_ns) {
      ++st_.unresolved;
      ep_.reject(p.id);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
}

void RpcRdmaServer::accept(conn::ConnId id, wire::Ipv4Addr peer,
                           std::span<const std::uint8_t> private_data) {
  auto c = std::make_unique<Conn>();
  c->id = id;
  c->peer = peer;
  // RFC 8797: the client's sizes and whether it takes SEND with invalidate; 1024 without.
  if (const auto pd = rdma::decode_private(private_data)) {
    c->remote_inv = pd->remote_invalidate;
    c->peer_recv = pd->receive_size;
  }
  const std::uint32_t nrecv = opt_.credits + kRecvExtra;
  const std::size_t recv_len = std::size_t{nrecv} * opt_.inline_size,
                    send_len = std::size_t{opt_.credits} * opt_.inline_size;
  c->chunk_len = chunk_len();
  const std::size_t chunks_len = c->chunk_len * chunk_count();
  c->slot_busy.assign(opt_.credits, false);
  c->slot_chunks.assign(opt_.credits, 0);
  c->chunk_busy.assign(chunk_count(), false);
  conn::QpSizes qs;
  // Every work request that can be out at once: a send per credit and per backward call, and
  // what the chunk buffers are the source or sink of (each at most one chunk's segments: a pull's
  // RDMA READs, a payload's or a reply chunk's RDMA WRITEs).
  // (The pieces of a pull: pump_reads keeps a connection's READs out within max_reads.)
  c->max_reads = chunk_count() * static_cast<std::uint32_t>(rdma::kMaxSegmentsPerChunk);
  qs.send = opt_.credits + kBackwardCalls + c->max_reads + 8;
  qs.recv = nrecv;
  qs.send_sge = 2;
  qs.recv_sge = 1;
  client::Pd* pd = ep_.pd(id);
  c->buf = ctx_.alloc_buffer(recv_len + send_len + chunks_len);
  if (c->buf) {
    auto* m = static_cast<std::uint8_t*>(c->buf->addr);
    c->recv_mem = {m, recv_len};
    c->send_mem = {m + recv_len, send_len};
    c->chunk_mem = {m + recv_len + send_len, chunks_len};
    const auto reg = [&](std::span<std::uint8_t> r) {
      return ctx_.reg_mr(pd, r.data(), r.size(), verbs::kAccessLocalWrite);
    };
    c->recv_mr = reg(c->recv_mem);
    c->send_mr = reg(c->send_mem);
    c->chunk_mr = reg(c->chunk_mem);
  }
  if (!c->buf || !c->recv_mr || !c->send_mr || !c->chunk_mr || ep_.prepare(id, qs) != 0) {
    ep_.refuse(id);
    release(*c);
    return;
  }
  conns_[id] = std::move(c);
  Conn& k = *conns_[id];
  for (std::uint32_t i = 0; i < nrecv; ++i) post_recv(k, i);
  rdma::ConnectPrivate mine;
  mine.send_size = opt_.inline_size;
  mine.receive_size = opt_.inline_size;
  if (ep_.accept(id, rdma::encode(mine)) != 0) {
    ep_.close(id);  // (the CM has answered REJ when it could not move the QP)
    release(k);
    conns_.erase(id);
    return;
  }
  k.active_ns = now_ns();
  ++st_.connections;
}

void RpcRdmaServer::on_event(conn::Event& e) {
  using K = conn::Event;
  if (e.kind == K::kConnectRequest) return on_connect_request(e);
  // A REQ given up while its source was being resolved.
  std::erase_if(pending_, [&](const Pending& p) { return p.id == e.conn; });
  const auto ci = conns_.find(e.conn);
  if (ci == conns_.end()) return;
  if (e.kind == K::kEstablished) {
    if (!ci->second->up) {
      ci->second->up = true;
      newcomer_established(*ci->second);  // room made now, if it must be
    }
    return;
  }
  // DREQ, REJ after our REP, REP or DREQ retries exhausted, half-open timeout: nothing more
  // will come on this connection (the Endpoint has destroyed its QP).
  close(e.conn, false);
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

void RpcRdmaServer::send_error(Conn& c, std::uint32_t xid, rdma::ErrorCode code,
                               std::uint32_t chunks) {
  rdma::Header h;
  h.xid = xid;
  h.credits = opt_.credits;
  h.proc = rdma::Proc::kError;
  h.error = code;
  (code == rdma::ErrorCode::kVers ? st_.err_vers : st_.err_chunk)++;
  std::vector<std::uint8_t> b;
  rdma::encode(h, b);
  const std::uint32_t slot = take_slot(c);
  c.slot_chunks[slot] = chunks;  // RDMA WRITEs posted before the error read them until it completes
  std::uint8_t* buf = c.send_mem.data() + std::size_t{slot} * opt_.inline_size;
  std::memcpy(buf, b.data(), b.size());
  Sge sge{reinterpret_cast<std::uint64_t>(buf), static_cast<std::uint32_t>(b.size()),
          c.send_mr->lkey};
  SendWr wr;
  wr.wr_id = wr_id(kWrSend, slot);
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = verbs::kSendSignaled;
  answered(c);
  ++st_.replies;
  ep_.post_send(c.id, wr);
}

std::uint64_t RpcRdmaServer::held_limit() const {
  return opt_.max_held ? opt_.max_held
                       : 4 * (std::uint64_t{opt_.max_io} + 8192) + std::uint64_t{opt_.max_reply};
}

std::size_t RpcRdmaServer::chunk_len() const {
  return std::max<std::size_t>(std::size_t{opt_.max_io} + 8192, opt_.max_reply);
}

std::uint32_t RpcRdmaServer::chunk_count() const {
  // As many as the heap budget would hold (a connection never has more chunk data under way
  // than its calls may hold), two at least (a reply may push a write chunk and a reply chunk).
  const std::uint64_t n = held_limit() / chunk_len();
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(n, 2, kMaxChunkBuffers));
}

bool RpcRdmaServer::send_call(std::uint64_t conn, std::span<const std::uint8_t> call) {
  const auto ci = conns_.find(conn);
  if (ci == conns_.end() || call.size() < 8) {
    ++st_.backward_dropped;
    return false;
  }
  Conn& c = *ci->second;
  rdma::Header h;
  h.xid = static_cast<std::uint32_t>(call[0]) << 24 | static_cast<std::uint32_t>(call[1]) << 16 |
          static_cast<std::uint32_t>(call[2]) << 8 | call[3];
  h.credits = kBackwardCalls;
  h.proc = rdma::Proc::kMsg;
  std::vector<std::uint8_t> hb;
  rdma::encode(h, hb);
  if (!c.up || c.closing || c.calls_out >= kBackwardCalls ||
      hb.size() + call.size() > std::min(c.peer_recv, opt_.inline_size) ||
      // every call taken (c.jobs) keeps a send buffer for its reply: a backward call takes
      // one only beyond those
      static_cast<std::uint32_t>(std::count(c.slot_busy.begin(), c.slot_busy.end(), false)) <=
          c.jobs) {
    ++st_.backward_dropped;
    return false;
  }
  const std::uint32_t slot = take_slot(c);
  std::uint8_t* buf = c.send_mem.data() + std::size_t{slot} * opt_.inline_size;
  std::memcpy(buf, hb.data(), hb.size());
  std::memcpy(buf + hb.size(), call.data(), call.size());
  Sge sge{reinterpret_cast<std::uint64_t>(buf), static_cast<std::uint32_t>(hb.size() + call.size()),
          c.send_mr->lkey};
  SendWr wr;
  wr.wr_id = wr_id(kWrSend, slot);
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = verbs::kSendSignaled;
  ++c.calls_out;
  ++st_.backward_calls;
  ep_.post_send(c.id, wr);
  return true;
}

void RpcRdmaServer::answered(Conn& c) {
  if (c.in_flight) --c.in_flight;
}

void RpcRdmaServer::post_recv(Conn& c, std::uint32_t slot) {
  Sge sge{reinterpret_cast<std::uint64_t>(c.recv_mem.data() + std::size_t{slot} * opt_.inline_size),
          opt_.inline_size, c.recv_mr->lkey};
  RecvWr wr;
  wr.wr_id = wr_id(kWrRecv, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ep_.post_recv(c.id, wr);
}

namespace {
/// The chunk buffers a reply to `call` may push from: its write chunk's payload and its reply
/// chunk (decided when it is sent; counted here as if both were used).
std::uint32_t reply_chunks_needed(const rdma::Header& call, const RpcReply& reply) {
  return (!call.writes.empty() && reply.has_payload && !reply.payload.empty() ? 1u : 0u) +
         (call.reply ? 1u : 0u);
}
}  // namespace

void RpcRdmaServer::next(Conn& c) {
  // The replies that waited for chunk buffers first, in the order they finished.
  while (!c.replies.empty() &&
         c.free_chunks() >= reply_chunks_needed(c.replies.front()->hdr, c.replies.front()->reply)) {
    const auto j = std::move(c.replies.front());
    c.replies.pop_front();
    send_reply(c, *j);
  }
  // Then the calls received, several at once up to the credits: each goes to the worker pool
  // as soon as it is whole. A read chunk is pulled into a chunk buffer of its own, several at
  // once. A call that cannot be taken yet (no chunk buffer free, or beyond the connection's
  // heap budget) stays in its receive buffer; the calls behind it without chunks are taken
  // meanwhile (a GETATTR does not wait for a WRITE's buffer), those with chunks keep their
  // order behind it.
  bool skipped = false;
  for (std::size_t i = 0; i < c.ready.size();) {
    // A free send buffer for each call taken (one per credit: the client never has more out).
    const auto free_slots =
        static_cast<std::uint32_t>(std::count(c.slot_busy.begin(), c.slot_busy.end(), false));
    if (free_slots <= c.jobs) return;
    const auto [slot, len] = c.ready[i];
    const std::span<const std::uint8_t> m(c.recv_mem.data() + std::size_t{slot} * opt_.inline_size,
                                          len);
    rdma::Header hdr;
    std::size_t hl = 0;
    const auto err = rdma::decode(m, hdr, hl);
    std::uint64_t charge = 0;
    if (err == rdma::DecodeError::kOk) {
      const bool chunked = !hdr.reads.empty() || !hdr.writes.empty() || hdr.reply;
      if (skipped && chunked) {
        ++i;
        continue;
      }
      // What it may hold until its reply is sent: the call with its read chunk, the payload
      // for its write chunk, the reply for its reply chunk. A client that never lets a reply
      // complete (no ACK) keeps replies waiting: it holds max_held, not credits x max_io.
      std::uint64_t in = 0, out = 0;
      for (const auto& r : hdr.reads) in += r.seg.length;
      for (const auto& w : hdr.writes) out += w.length();
      charge = len + opt_.inline_size + std::min<std::uint64_t>(in, c.chunk_len) +
               std::min<std::uint64_t>(out, c.chunk_len) +
               (hdr.reply ? std::min<std::uint64_t>(hdr.reply->length(), opt_.max_reply) : 0);
      // A read chunk needs a chunk buffer, and waits while replies wait for theirs (a reply
      // frees a credit; a pull only makes another reply).
      const bool no_buffer = !hdr.reads.empty() && (c.free_chunks() == 0 || !c.replies.empty());
      if (no_buffer || (c.jobs && c.held + charge > held_limit())) {
        skipped = true;
        ++i;
        continue;
      }
    }
    c.ready.erase(c.ready.begin() + static_cast<std::ptrdiff_t>(i));
    auto j = std::make_shared<Job>();
    j->conn = c.id;
    j->peer = c.peer;
    j->hdr = std::move(hdr);
    if (err == rdma::DecodeError::kOk)
      j->inline_part.assign(m.begin() + static_cast<std::ptrdiff_t>(hl), m.end());
    const std::size_t mlen = m.size();
    post_recv(c, slot);  // the message is read: its buffer takes the next one
    if (err == rdma::DecodeError::kBadVersion) {
      send_error(c, j->hdr.xid, rdma::ErrorCode::kVers);
      continue;
    }
    if (err != rdma::DecodeError::kOk || j->hdr.proc == rdma::Proc::kError) {
      if (mlen < 4) {  // not even an XID: nothing to answer
        answered(c);
        continue;
      }
      send_error(c, j->hdr.xid, rdma::ErrorCode::kChunk);
      continue;
    }
    ++st_.calls;
    if (j->hdr.reads.empty()) {
      if (j->hdr.proc != rdma::Proc::kMsg) {
        send_error(c, j->hdr.xid, rdma::ErrorCode::kChunk);
        continue;
      }
      ++c.jobs;
      j->charge = charge;
      c.held += charge;
      assemble_and_run(c, j, nullptr);
      continue;
    }
    // One read chunk (every segment at one position), pulled into a chunk buffer in order.
    j->read_position = j->hdr.reads.front().position;
    std::uint64_t total = 0;
    bool bad = false;
    for (const auto& r : j->hdr.reads) {
      bad = bad || r.position != j->read_position;
      total += r.seg.length;
    }
    if (bad || total > c.chunk_len || j->read_position > j->inline_part.size() ||
        (j->read_position == 0) != (j->hdr.proc == rdma::Proc::kNomsg)) {
      send_error(c, j->hdr.xid, rdma::ErrorCode::kChunk);
      continue;
    }
    // Pulled piece by piece through the server's READ window (pump_reads), behind the pulls
    // already waiting; on_wc assembles it when its last piece completes.
    j->chunk = c.take_chunk();
    j->read_total = static_cast<std::uint32_t>(total);
    j->seg = 0;
    while (j->seg < j->hdr.reads.size() && j->hdr.reads[j->seg].seg.length == 0) ++j->seg;
    ++c.jobs;
    j->charge = charge;
    c.held += charge;
    st_.chunk_buffers_peak =
        std::max<std::uint64_t>(st_.chunk_buffers_peak, c.chunk_busy.size() - c.free_chunks());
    const std::uint32_t b = j->chunk;
    const bool empty = j->all_posted();
    c.pulls[b] = std::move(j);
    if (empty) {  // a read chunk of no bytes: nothing to pull
      end_pull(c, b);
      continue;
    }
    read_queue_.emplace_back(c.id, b);
    const std::size_t queued = read_queue_.size();
    pump_reads();
    if (!read_queue_.empty() && read_queue_.back() == std::pair{c.id, b}) {
      ++st_.reads_queued;  // (not all of it posted at once: it waits for room)
      st_.reads_queued_peak = std::max<std::uint64_t>(st_.reads_queued_peak, queued);
    }
  }
}

void RpcRdmaServer::pump_reads() {
  while (!read_queue_.empty()) {
    const auto [id, b] = read_queue_.front();
    Conn* cp = nullptr;
    Job* jp = nullptr;
    if (const auto ci = conns_.find(id); ci != conns_.end() && !ci->second->closing) {
      cp = ci->second.get();
      if (const auto pi = cp->pulls.find(b); pi != cp->pulls.end() && !pi->second->all_posted())
        jp = pi->second.get();
    }
    if (!jp) {  // its connection closed, or nothing of it left to post
      read_queue_.pop_front();
      continue;
    }
    Conn& c = *cp;
    Job& j = *jp;
    const rdma::ReadSegment& r = j.hdr.reads[j.seg];
    const std::uint32_t n = std::min(r.seg.length - j.seg_at, opt_.read_piece);
    // The window full: the first pull waiting waits (in order), until a READ out completes. A
    // connection's READs beyond what its send queue holds wait for its own completions.
    if ((read_bytes_out_ && read_bytes_out_ + n > opt_.max_read_bytes) ||
        c.reads_out >= c.max_reads)
      return;
    Sge sge{reinterpret_cast<std::uint64_t>(c.chunk(b) + j.buf_at), n, c.chunk_mr->lkey};
    SendWr wr;
    wr.wr_id = wr_id(kWrRead, b, n);
    wr.opcode = WrOpcode::kRead;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = verbs::kSendSignaled;
    wr.rdma.remote_addr = r.seg.offset + j.seg_at;  // a piece: the segment's address + offset
    wr.rdma.rkey = r.seg.handle;
    if (ep_.post_send(c.id, wr) != 0) {
      // Those posted complete first; the call is never run short.
      j.short_pull = true;
      j.seg = static_cast<std::uint32_t>(j.hdr.reads.size());
      read_queue_.pop_front();
      if (j.reads_left == 0) {
        end_pull(c, b);
        kick_.push_back(c.id);  // its chunk buffer is free: poll() serves its next calls
      }
      continue;
    }
    if (n < r.seg.length) ++st_.read_pieces;
    ++j.reads_left;
    ++c.reads_out;
    ++st_.reads;
    st_.read_bytes += n;
    c.read_bytes_out += n;
    read_bytes_out_ += n;
    st_.reads_in_flight_peak = std::max<std::uint64_t>(st_.reads_in_flight_peak, c.reads_out);
    st_.read_bytes_in_flight_peak = std::max(st_.read_bytes_in_flight_peak, read_bytes_out_);
    j.buf_at += n;
    j.seg_at += n;
    if (j.seg_at == r.seg.length) {  // the next segment with bytes
      j.seg_at = 0;
      do ++j.seg;
      while (j.seg < j.hdr.reads.size() && j.hdr.reads[j.seg].seg.length == 0);
    }
    if (j.all_posted()) read_queue_.pop_front();
  }
}

void RpcRdmaServer::end_pull(Conn& c, std::uint32_t b) {
  const auto pi = c.pulls.find(b);
  if (pi == c.pulls.end()) return;
  const auto j = std::move(pi->second);
  c.pulls.erase(pi);
  if (j->short_pull) {
    if (c.jobs) --c.jobs;
    c.held -= std::min(c.held, std::exchange(j->charge, 0));
    send_error(c, j->hdr.xid, rdma::ErrorCode::kChunk);
  } else {
    assemble_and_run(c, j, c.chunk(b));
  }
  c.chunk_busy[b] = false;  // the call is copied out: the buffer takes the next chunk
}

void RpcRdmaServer::assemble_and_run(Conn& c, const std::shared_ptr<Job>& j,
                                     const std::uint8_t* data) {
  (void)c;
  // The call: inline up to the position, the chunk's data and its XDR pad, the rest inline.
  // Copied out of the chunk buffer: the pool works on it while the buffer takes the next chunk.
  std::vector<std::uint8_t> call;
  if (data) {
    const auto pos = static_cast<std::ptrdiff_t>(j->read_position);
    call.reserve(j->inline_part.size() + j->read_total + 4);
    call.assign(j->inline_part.begin(), j->inline_part.begin() + pos);
    call.insert(call.end(), data, data + j->read_total);
    if (j->read_position) call.insert(call.end(), xdr_pad(j->read_total), 0);
    call.insert(call.end(), j->inline_part.begin() + pos, j->inline_part.end());
  } else {
    call = std::move(j->inline_part);
  }
  j->call = std::move(call);
  if (!waiting_.empty() || !submit(j)) waiting_.push_back(j);  // in order behind those waiting
}

bool RpcRdmaServer::submit(const std::shared_ptr<Job>& j) {
  // The pool full: the call waits here (and the client, out of credits, waits too).
  return worker_->submit([this, j] { run_handler(*j); }, [this, j] { finish(j); });
}

// The one place the handler is called (on a worker thread). j.peer is the client's address,
// j.conn its connection (NFSv4.1 binds a session's back channel to it).
void RpcRdmaServer::run_handler(Job& j) { handler_(CallContext{j.peer, j.conn}, j.call, j.reply); }

void RpcRdmaServer::finish(const std::shared_ptr<Job>& j) {
  const auto ci = conns_.find(j->conn);
  if (ci == conns_.end()) return;  // closed while the handler ran
  Conn& c = *ci->second;
  if (c.closing) return;
  // A reply that writes chunks waits for free chunk buffers, behind those already waiting.
  const std::uint32_t need = reply_chunks_needed(j->hdr, j->reply);
  if (need && (!c.replies.empty() || c.free_chunks() < need)) {
    c.replies.push_back(j);
    return;
  }
  send_reply(c, *j);
  next(c);
}

void RpcRdmaServer::send_reply(Conn& c, Job& j) {
  if (c.jobs) --c.jobs;
  c.held -= std::min(c.held, std::exchange(j.charge, 0));
  RpcReply& reply = j.reply;
  const rdma::Header& call = j.hdr;
  if (reply.msg.empty()) {  // nothing to answer (no XID): the credit comes back anyway
    return send_error(c, call.xid, rdma::ErrorCode::kChunk);
  }
  rdma::Header h;
  h.xid = call.xid;
  h.credits = opt_.credits;
  h.proc = rdma::Proc::kMsg;
  std::uint32_t inv_rkey = 0;
  // The write list is echoed with what was written (RFC 8166 3.4.6): the payload goes to the
  // first write chunk; other chunks come back empty.
  // The chunk buffers its RDMA WRITEs read (a bit each): busy until its SEND completes.
  std::uint32_t used = 0;
  for (std::size_t w = 0; w < call.writes.size(); ++w) {
    rdma::WriteChunk echo = call.writes[w];
    std::uint64_t left = (w == 0 && reply.has_payload) ? reply.payload.size() : 0;
    std::uint8_t* src = nullptr;
    if (left) {
      if (left > echo.length() || left > c.chunk_len) {
        return send_error(c, call.xid, rdma::ErrorCode::kChunk, used);
      }
      const std::uint32_t b = c.take_chunk();
      used |= 1u << b;
      src = c.chunk(b);
      std::memcpy(src, reply.payload.data(), reply.payload.size());
    }
    std::uint64_t at = 0;
    for (auto& s : echo.segments) {
      const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::uint64_t>(left, s.length));
      if (n) {
        Sge sge{reinterpret_cast<std::uint64_t>(src + at), n, c.chunk_mr->lkey};
        SendWr wr;
        wr.wr_id = wr_id(kWrWrite, 0);
        wr.opcode = WrOpcode::kWrite;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.rdma.remote_addr = s.offset;
        wr.rdma.rkey = s.handle;
        ep_.post_send(c.id, wr);
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
  if (reply.has_payload && call.writes.empty()) {  // no write chunk: the data goes inline
    const std::size_t n = reply.payload.size();
    msg.insert(msg.end(), reply.payload.begin(), reply.payload.end());
    msg.insert(msg.end(), xdr_pad(n), 0);
  }
  std::vector<std::uint8_t> hb;
  rdma::encode(h, hb);
  if (hb.size() + msg.size() > std::min(c.peer_recv, opt_.inline_size)) {
    // Too large to send inline: the whole reply goes through the reply chunk (RDMA_NOMSG).
    if (!call.reply || msg.size() > call.reply->length() || msg.size() > opt_.max_reply ||
        msg.size() > c.chunk_len || c.free_chunks() == 0)
      return send_error(c, call.xid, rdma::ErrorCode::kChunk, used);
    const std::uint32_t b = c.take_chunk();
    used |= 1u << b;
    std::memcpy(c.chunk(b), msg.data(), msg.size());
    rdma::WriteChunk echo = *call.reply;
    std::uint64_t left = msg.size(), at = 0;
    for (auto& s : echo.segments) {
      const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::uint64_t>(left, s.length));
      if (n) {
        Sge sge{reinterpret_cast<std::uint64_t>(c.chunk(b) + at), n, c.chunk_mr->lkey};
        SendWr wr;
        wr.wr_id = wr_id(kWrWrite, 1);
        wr.opcode = WrOpcode::kWrite;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.rdma.remote_addr = s.offset;
        wr.rdma.rkey = s.handle;
        ep_.post_send(c.id, wr);
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
  if (!inv_rkey && !call.reads.empty()) inv_rkey = call.reads.front().seg.handle;
  if (!inv_rkey && call.reply)
    inv_rkey = call.reply->segments.empty() ? 0 : call.reply->segments.front().handle;
  const std::uint32_t slot = take_slot(c);
  c.slot_chunks[slot] = used;  // the WRITEs' sources until this SEND completes
  st_.chunk_buffers_peak =
      std::max<std::uint64_t>(st_.chunk_buffers_peak, c.chunk_busy.size() - c.free_chunks());
  std::uint8_t* buf = c.send_mem.data() + std::size_t{slot} * opt_.inline_size;
  std::memcpy(buf, hb.data(), hb.size());
  std::memcpy(buf + hb.size(), msg.data(), msg.size());
  Sge sge{reinterpret_cast<std::uint64_t>(buf), static_cast<std::uint32_t>(hb.size() + msg.size()),
          c.send_mr->lkey};
  SendWr wr;
  wr.wr_id = wr_id(kWrSend, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = verbs::kSendSignaled;
  if (c.remote_inv && inv_rkey) {
    wr.opcode = WrOpcode::kSendInv;  // the client invalidates nothing itself (RFC 8166 3.4.2)
    wr.invalidate_rkey = inv_rkey;
    ++st_.send_inv;
  } else {
    wr.opcode = WrOpcode::kSend;
  }
  answered(c);
  ++st_.replies;
  ep_.post_send(c.id, wr);
}

void RpcRdmaServer::on_wc(const conn::Completion& cw) {
  auto ci = conns_.find(cw.conn);
  if (ci == conns_.end()) return;
  Conn& c = *ci->second;
  const client::Wc& w = cw.wc;
  if (w.status != WcStatus::kSuccess) {
    // The connection is broken: the client reconnects (and re-registers). DREQ, and the
    // connection's QP and memory given back now.
    if (c.closing) return;
    c.closing = true;
    c.ready.clear();
    close(c.id, true);
    return;
  }
  if (c.closing) return;
  const std::uint64_t kind = (w.wr_id >> 24) & 0xff;
  const std::uint32_t idx = static_cast<std::uint32_t>(w.wr_id & 0xffffff);
  if (kind == kWrRecv) {
    // (Before the RTU, the Endpoint has told the CM: COMM_EST; kEstablished follows.)
    const std::span<const std::uint8_t> m(c.recv_mem.data() + std::size_t{idx} * opt_.inline_size,
                                          w.byte_len);
    if (c.calls_out && backward_reply(m)) {
      // RFC 8167: the REPLY to a call we sent. Not a call: no credit, handed on at once.
      --c.calls_out;
      ++st_.backward_replies;
      std::size_t hl = 0;
      rdma::Header h;
      rdma::decode(m, h, hl);
      const std::vector<std::uint8_t> reply(m.begin() + static_cast<std::ptrdiff_t>(hl), m.end());
      post_recv(c, idx);
      if (on_backward_reply) on_backward_reply(c.id, reply);
    } else if (c.in_flight >= opt_.credits) {
      // Beyond the credits granted: dropped, counted, its buffer posted again. (Linux svcrdma
      // keeps its sc_max_requests receives posted, refilled on every completion, and queues
      // whatever arrives for its threads without looking at the credits: a client beyond them
      // grows that queue. Here nothing queues beyond the credits.)
      ++st_.over_credit;
      post_recv(c, idx);
    } else {
      ++c.in_flight;
      c.ready.emplace_back(idx, w.byte_len);
      c.active_ns = now_ns();
    }
  } else if (kind == kWrRead) {
    if (c.reads_out) --c.reads_out;
    const std::uint64_t n = std::min<std::uint64_t>(w.wr_id >> 32, c.read_bytes_out);
    c.read_bytes_out -= n;
    read_bytes_out_ -= std::min(read_bytes_out_, n);
    const auto pi = c.pulls.find(idx);
    if (pi != c.pulls.end() && pi->second->reads_left) --pi->second->reads_left;
    if (pi != c.pulls.end() && pi->second->reads_left == 0 && pi->second->all_posted())
      end_pull(c, idx);
    pump_reads();  // room in the window: the next pieces, of this connection or another's
  } else if (kind == kWrSend) {
    c.active_ns = now_ns();
    if (idx < c.slot_busy.size()) {
      c.slot_busy[idx] = false;
      for (std::uint32_t b = 0; b < c.chunk_busy.size(); ++b)
        if (c.slot_chunks[idx] & (1u << b)) c.chunk_busy[b] = false;
      c.slot_chunks[idx] = 0;
    }
  }
  next(c);
}

bool RpcRdmaServer::poll() {
  events_.clear();
  wcs_.clear();
  bool any = ep_.poll(events_, wcs_);  // in-process: one poll of the port's loop too
  for (auto& e : events_) on_event(e);
  resolve_pending();
  // Replies of the pool (finish() answers and serves the connection's next calls), then calls
  // that waited for room at the pool, in the order they came.
  if (worker_->drain()) any = true;
  while (!waiting_.empty() && worker_->in_flight() < worker_->capacity()) {
    if (!submit(waiting_.front())) break;
    waiting_.pop_front();
    any = true;
  }
  for (const auto& w : wcs_) on_wc(w);
  // Room a closed connection left in the READ window; connections whose pull ended there.
  pump_reads();
  for (const conn::ConnId id : std::exchange(kick_, {}))
    if (const auto ci = conns_.find(id); ci != conns_.end() && !ci->second->closing)
      next(*ci->second);
  return any;
}

}  // namespace roce::nfs
