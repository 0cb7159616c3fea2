/// @file
/// RPC-over-RDMA v1 client transport (transport.h).
#include "apps/nfs/transport.h"

#include <arpa/inet.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "apps/nfs/rpc.h"

namespace roce::nfs {

namespace {
constexpr double kDrepWait = 2.0;  ///< seconds drop_conn waits for the server's DREP
}  // namespace

using client::Mr;
using client::RecvWr;
using client::SendWr;
using client::Sge;
using client::Wc;
using client::WcOpcode;
using client::WcStatus;
using client::WrOpcode;

namespace {
// wr_id: kind in the top byte, a slot or receive index below.
constexpr std::uint64_t kWrRecv = 1ull << 56, kWrSend = 2ull << 56;
constexpr std::uint64_t kKindMask = 0xffull << 56;
constexpr std::uint32_t kRecvExtra = 4;  ///< receives beyond the credits (a late or extra reply)
constexpr int kConnectAttempts = 4;      ///< a reconnect: tries, 0.5, 1 and 2 s apart

std::uint64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::uint64_t(t.tv_sec) * 1'000'000'000 + std::uint64_t(t.tv_nsec);
}

conn::Options endpoint_options() {
  conn::Options e;
  // The server READs our read chunks: we answer its READs (responder resources), and it may
  // have as many outstanding.
  e.responder_resources = 16;
  e.initiator_depth = 16;
  e.max_connections = 4;
  e.drain_ms = 500;
  return e;
}
}  // namespace

RpcRdmaClient::RpcRdmaClient(client::Context& ctx, TransportOptions o)
    : ctx_(ctx), opt_(o), ep_(ctx, endpoint_options()) {
  opt_.credits = std::clamp<std::uint32_t>(opt_.credits, 1, 128);
  opt_.inline_size = std::clamp<std::uint32_t>(opt_.inline_size, 1024, 64 * 1024);
  opt_.max_chunk = std::max<std::uint32_t>(opt_.max_chunk, 4096);
  opt_.remote_invalidate = false;
  if (ep_.pd() == nullptr) throw std::runtime_error("cannot create the PD");
  const std::size_t slots = opt_.credits, recvs = opt_.credits + kRecvExtra;
  const std::size_t msgs = (slots + recvs) * opt_.inline_size;
  mem_ = ctx_.alloc_buffer(msgs + slots * 2 * std::size_t{opt_.max_chunk});
  if (!mem_) throw std::runtime_error("cannot allocate the transport's memory");
  msg_mr_ = ctx_.reg_mr(ep_.pd(), mem_->addr, msgs, verbs::kAccessLocalWrite);
  if (!msg_mr_) throw std::runtime_error("cannot register the message buffers");
  ++st_.registrations;
  for (std::uint32_t i = 0; i < slots; ++i)
    free_slots_.push_back(static_cast<std::uint32_t>(slots - 1 - i));
}

RpcRdmaClient::~RpcRdmaClient() {
  close();
  for (auto& [xid, p] : pending_) unreg(p);
  if (msg_mr_) ctx_.dereg_mr(msg_mr_);
  if (mem_) ctx_.free_buffer(mem_);
}

std::uint8_t* RpcRdmaClient::send_buf(std::uint32_t slot) {
  return static_cast<std::uint8_t*>(mem_->addr) + std::size_t{slot} * opt_.inline_size;
}
std::uint8_t* RpcRdmaClient::recv_buf(std::uint32_t i) {
  return send_buf(opt_.credits) + std::size_t{i} * opt_.inline_size;
}
std::uint8_t* RpcRdmaClient::data_area(std::uint32_t slot) {
  return recv_buf(opt_.credits + kRecvExtra) + std::size_t{slot} * 2 * opt_.max_chunk;
}
std::uint8_t* RpcRdmaClient::reply_area(std::uint32_t slot) {
  return data_area(slot) + opt_.max_chunk;
}

template <class F>
bool RpcRdmaClient::until(F&& done, double seconds) {
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(seconds * 1e9);
  unsigned idle = 0;
  while (!done()) {
    if (now_ns() > end) return false;
    if (poll_events())
      idle = 0;
    else if (++idle >= 32 && opt_.yield_when_idle)
      sched_yield();  // leave the CPU to roced, or to the kernel's softirq work
  }
  return true;
}

void RpcRdmaClient::drop_conn() {
  if (conn_ == 0) return;
  const conn::ConnId c = conn_;
  conn_ = 0;
  up_ = false;
  // DREQ if still up, and the QP stays until the server's DREP (at most kDrepWait): Linux's
  // svcrdma drains its QP before it answers, and a QP of ours gone at once leaves the server's
  // last sends retrying into nothing, its DREP and its next accepts (MRA only) held meanwhile
  // (found against the kernel's nfsd: the reconnect after --break-after got no REP). Then the
  // QP goes (its completions with it: the next connection's are told apart by their ConnId).
  const std::size_t before = ep_.connections();
  if (ep_.disconnect(c) == 0 && ep_.connections() == before)
    until([&] { return ep_.connections() < before; }, kDrepWait);
  ep_.close(c);
  wcs_.clear();
}

void RpcRdmaClient::close() {
  if (conn_ == 0) return;
  peer_ip_.clear();  // the DREP's disconnect event must not make the connection again
  fail_all("transport closed");
  drop_conn();
}

void RpcRdmaClient::unreg(Pending& p) {
  for (Mr* m : p.mrs)
    if (ctx_.dereg_mr(m) == 0) ++st_.local_invalidations;
  p.mrs.clear();
}

void RpcRdmaClient::broken(const std::string& why) {
  if (reconnecting_) return;
  if (st_.reconnects >= opt_.max_reconnects || peer_ip_.empty()) {
    err_ = why;
    up_ = false;
    fail_all(why);
    return;
  }
  reconnecting_ = true;
  ++st_.reconnects;
  drop_conn();
  // Registrations do not survive the connection: a call's MRs are dropped, and the call
  // registers anew when it goes out again, as xprtrdma recovers its MRs after a reconnect.
  // Calls already answered are done; the others go out again, in XID order, first.
  std::vector<std::pair<RpcCall, Done>> again;
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = it->second;
    if (!p.mrs.empty()) ++st_.mrs_recovered;
    unreg(p);
    free_slots_.push_back(p.slot);
    if (p.replied) {
      Done d = std::move(p.done);
      RpcResult r = std::move(p.result);
      it = pending_.erase(it);
      d(std::move(r));
      continue;
    }
    again.emplace_back(std::move(p.call), std::move(p.done));
    it = pending_.erase(it);
  }
  for (auto it = again.rbegin(); it != again.rend(); ++it) {
    queue_.emplace_front(std::move(it->first), std::move(it->second));
    ++st_.resent;
  }
  in_flight_ = 0;
  granted_ = 1;  // a new connection starts with one credit
  // The server may still hold the old connection for a moment (its DREQ, its QP's flush):
  // try again after a pause, as xprtrdma backs off between reconnects.
  bool ok = connect(peer_ip_, peer_port_);
  for (int attempt = 1; !ok && attempt < kConnectAttempts; ++attempt) {
    drop_conn();
    const double pause = 0.25 * (1 << attempt);
    until([] { return false; }, pause);
    ok = connect(peer_ip_, peer_port_);
  }
  reconnecting_ = false;
  if (!ok) {
    fail_all("reconnect failed: " + err_);
    return;
  }
  pump_queue();
}

bool RpcRdmaClient::connect(const std::string& ipv4, std::uint16_t port) {
  peer_ip_ = ipv4;
  peer_port_ = port;
  err_.clear();
  in_addr a{};
  if (inet_pton(AF_INET, ipv4.c_str(), &a) != 1) {
    err_ = "bad IPv4 address " + ipv4;
    return false;
  }
  const Ipv4Addr ip{ntohl(a.s_addr)};
  conn::QpSizes qs;
  qs.send = opt_.credits * 8 + 16;
  qs.recv = opt_.credits + kRecvExtra;
  qs.send_sge = 2;
  qs.recv_sge = 1;
  rdma::ConnectPrivate mine;
  mine.remote_invalidate = false;
  mine.send_size = opt_.inline_size;
  mine.receive_size = opt_.inline_size;
  const auto priv = rdma::encode(mine);
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(opt_.connect_timeout * 1e9);
  up_ = failed_ = false;
  // The CM needs the server's MAC: in-process a first try asks ARP and fails (EHOSTUNREACH)
  // until the answer is in; attached, roced asks and waits itself.
  for (;;) {
    conn_ = ep_.connect(ip, port, qs, priv);
    if (conn_ != 0) break;
    const int err = errno;
    if (err != EHOSTUNREACH || now_ns() > end) {
      err_ = err == EHOSTUNREACH ? "no ARP answer from " + ipv4
                                 : "rdma_cm connect failed: " + std::string(std::strerror(err));
      return false;
    }
    const std::uint64_t retry = now_ns() + 100'000'000;
    until([&] { return now_ns() > retry; }, 1);
  }
  for (std::uint32_t i = 0; i < opt_.credits + kRecvExtra; ++i) post_recv(i);
  const double left = std::max(0.0, static_cast<double>(end - std::min(end, now_ns())) / 1e9);
  until([&] { return up_ || failed_; }, left);
  if (!up_) {
    if (err_.empty()) err_ = "no connection to " + ipv4 + ":" + std::to_string(port);
    drop_conn();
    return false;
  }
  return true;
}

void RpcRdmaClient::on_event(const conn::Event& e) {
  if (conn_ == 0 || e.conn != conn_) return;
  switch (e.kind) {
    case conn::Event::kEstablished: {
      up_ = true;
      // RFC 8797: without the peer's private data both directions use 1024 bytes.
      const auto pd = rdma::decode_private(e.private_data);
      peer_pd_ = pd.has_value();
      send_inline_ = pd ? std::min(opt_.inline_size, pd->receive_size) : rdma::kDefaultInline;
      break;
    }
    case conn::Event::kRejected:
      err_ = "connection rejected";
      failed_ = true;
      conn_ = 0;  // the Endpoint has let it go
      break;
    case conn::Event::kUnreachable:
    case conn::Event::kConnectError:
      err_ = "server unreachable";
      failed_ = true;
      conn_ = 0;
      break;
    case conn::Event::kDisconnected:
      up_ = false;
      failed_ = true;
      conn_ = 0;
      broken("disconnected by the server");
      break;
    default:
      break;
  }
}

void RpcRdmaClient::post_recv(std::uint32_t i) {
  Sge sge{reinterpret_cast<std::uint64_t>(recv_buf(i)), opt_.inline_size, msg_mr_->lkey};
  RecvWr wr;
  wr.wr_id = kWrRecv | i;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ep_.post_recv(conn_, wr);
}

void RpcRdmaClient::submit(RpcCall c, Done done) {
  queue_.emplace_back(std::move(c), std::move(done));
  pump_queue();
}

void RpcRdmaClient::pump_queue() {
  while (!queue_.empty()) {
    if (!connected()) {
      auto [c, d] = std::move(queue_.front());
      queue_.pop_front();
      RpcResult r;
      r.error = err_.empty() ? "not connected" : err_;
      d(std::move(r));
      continue;
    }
    // Credits (RFC 8166 3.3.1): never more calls in flight than granted; a slot stays busy
    // until its chunks are deregistered.
    if (in_flight_ >= granted_ || free_slots_.empty()) {
      ++st_.credit_waits;
      return;
    }
    auto [c, d] = std::move(queue_.front());
    queue_.pop_front();
    const auto xid = rpc::peek_xid(c.msg);
    if (!xid || pending_.count(*xid)) {
      RpcResult r;
      r.error = "call without a fresh XID";
      d(std::move(r));
      continue;
    }
    Pending& p = pending_[*xid];
    p.xid = *xid;
    p.call = std::move(c);
    p.done = std::move(d);
    p.slot = free_slots_.back();
    free_slots_.pop_back();
    if (!start(*xid, p)) {
      RpcResult r;
      r.error = err_;
      auto done = std::move(p.done);
      unreg(p);
      free_slots_.push_back(p.slot);
      pending_.erase(*xid);
      done(std::move(r));
    }
  }
}

std::optional<std::uint32_t> RpcRdmaClient::reg(Pending& p, std::uint8_t* at, std::size_t n,
                                                std::uint32_t access) {
  // A registration of the call alone: a fresh rkey, gone (deregistered) with the reply.
  Mr* m = ctx_.reg_mr(ep_.pd(), at, std::max<std::size_t>(n, 1), access | verbs::kAccessLocalWrite);
  if (m == nullptr) {
    err_ = "cannot register a chunk: " + std::string(std::strerror(errno));
    return std::nullopt;
  }
  p.mrs.push_back(m);
  ++st_.registrations;
  return m->rkey;
}

bool RpcRdmaClient::start(std::uint32_t xid, Pending& p) {
  rdma::Header h;
  h.xid = xid;
  h.credits = opt_.credits;
  h.proc = rdma::Proc::kMsg;
  RpcCall& c = p.call;
  const auto remote = [&](const std::uint8_t* at) {
    const Mr* m = p.mrs.back();
    return m->iova + static_cast<std::uint64_t>(at - static_cast<const std::uint8_t*>(m->addr));
  };
  if (c.read_data.size() > opt_.max_chunk || c.write_target.size() > opt_.max_chunk) {
    err_ = "chunk of " + std::to_string(std::max(c.read_data.size(), c.write_target.size())) +
           " bytes exceeds max_chunk";
    return false;
  }
  if (!c.read_data.empty() && !c.write_target.empty()) {
    err_ = "a call with both a read chunk and a write chunk";
    return false;
  }
  std::uint8_t* data = data_area(p.slot);
  if (!c.read_data.empty()) {
    // WRITE's data: copied into the slot's shared memory, which the server READs.
    std::memcpy(data, c.read_data.data(), c.read_data.size());
    const auto k = reg(p, data, c.read_data.size(), verbs::kAccessRemoteRead);
    if (!k) return false;
    h.reads.push_back(
        {c.read_position, {*k, static_cast<std::uint32_t>(c.read_data.size()), remote(data)}});
    ++st_.read_chunks;
  }
  if (!c.write_target.empty()) {
    const auto k = reg(p, data, c.write_target.size(), verbs::kAccessRemoteWrite);
    if (!k) return false;
    h.writes.push_back({{{*k, static_cast<std::uint32_t>(c.write_target.size()), remote(data)}}});
    ++st_.write_chunks;
  }
  // RFC 8166 3.5.3: a reply that may exceed our receive size needs a reply chunk.
  p.reply_len = 0;
  if (c.reply_max + rdma::kMinHeader + 64 > opt_.inline_size) {
    p.reply_len = std::min<std::uint32_t>(c.reply_max, opt_.max_chunk);
    std::uint8_t* at = reply_area(p.slot);
    const auto k = reg(p, at, p.reply_len, verbs::kAccessRemoteWrite);
    if (!k) return false;
    h.reply = rdma::WriteChunk{{{*k, p.reply_len, remote(at)}}};
    ++st_.reply_chunks;
  }
  std::vector<std::uint8_t> hdr;
  if (c.transport_header.empty())
    rdma::encode(h, hdr);
  else
    hdr = c.transport_header;
  if (hdr.size() + c.msg.size() > send_inline_) {
    err_ = "call of " + std::to_string(hdr.size() + c.msg.size()) +
           " bytes exceeds the inline threshold " + std::to_string(send_inline_);
    return false;
  }
  std::uint8_t* buf = send_buf(p.slot);
  std::memcpy(buf, hdr.data(), hdr.size());
  std::memcpy(buf + hdr.size(), c.msg.data(), c.msg.size());
  Sge sge{reinterpret_cast<std::uint64_t>(buf),
          static_cast<std::uint32_t>(hdr.size() + c.msg.size()), msg_mr_->lkey};
  SendWr wr;
  wr.wr_id = kWrSend | p.slot;
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = verbs::kSendSignaled;
  if (ep_.post_send(conn_, wr) != 0) {
    err_ = "cannot post SEND";
    return false;
  }
  p.deadline = now_ns() + static_cast<std::uint64_t>(opt_.call_timeout * 1e9);
  ++in_flight_;
  ++st_.calls;
  st_.max_outstanding = std::max(st_.max_outstanding, in_flight_);
  return true;
}

void RpcRdmaClient::on_recv(const Wc& wc) {
  const std::uint32_t i = static_cast<std::uint32_t>(wc.wr_id & ~kKindMask);
  const std::uint8_t* m = recv_buf(i);
  rdma::Header h;
  std::size_t hl = 0;
  const auto e = rdma::decode({m, wc.byte_len}, h, hl);
  std::vector<std::uint8_t> body;
  if (e == rdma::DecodeError::kOk && h.proc == rdma::Proc::kMsg)
    body.assign(m + hl, m + wc.byte_len);
  post_recv(i);  // the buffer is copied out: give it back at once
  if (e != rdma::DecodeError::kOk) {
    ++st_.bad_replies;
    return;
  }
  auto it = pending_.find(h.xid);
  if (it == pending_.end() || it->second.replied) {
    ++st_.bad_replies;
    return;
  }
  // The grant of every reply (RFC 8166 3.3.1): at least one, never more than we asked for.
  granted_ = std::clamp<std::uint32_t>(h.credits, 1, opt_.credits);
  st_.granted = granted_;
  Pending& p = it->second;
  p.replied = true;
  --in_flight_;
  ++st_.replies;
  RpcResult& r = p.result;
  if (h.proc == rdma::Proc::kError) {
    r.error = h.error == rdma::ErrorCode::kVers ? "RDMA_ERROR ERR_VERS" : "RDMA_ERROR ERR_CHUNK";
    r.rdma_error = h.error;
  } else if (h.proc == rdma::Proc::kNomsg) {
    if (!h.reply || p.reply_len == 0) {
      r.error = "RDMA_NOMSG without a reply chunk";
    } else {
      const auto n = std::min<std::uint64_t>(h.reply->length(), p.reply_len);
      const std::uint8_t* at = reply_area(p.slot);
      r.reply.assign(at, at + n);
      r.ok = true;
    }
  } else {
    r.reply = std::move(body);
    r.ok = true;
  }
  if (!h.writes.empty()) {
    r.written = std::min<std::uint64_t>(h.writes.front().length(), p.call.write_target.size());
    // READ's data: out of the slot's shared memory into the caller's buffer.
    std::memcpy(p.call.write_target.data(), data_area(p.slot), r.written);
  }
  if (wc.wc_flags & verbs::kWcWithInv) ++st_.remote_invalidations;  // (never offered)
  finish(h.xid);
}

void RpcRdmaClient::finish(std::uint32_t xid) {
  auto it = pending_.find(xid);
  if (it == pending_.end()) return;
  Pending p = std::move(it->second);
  pending_.erase(it);
  unreg(p);  // the server's access to the call's chunks ends here
  free_slots_.push_back(p.slot);
  p.done(std::move(p.result));
}

void RpcRdmaClient::fail_all(const std::string& why) {
  while (!pending_.empty()) {
    auto it = pending_.begin();
    Pending p = std::move(it->second);
    pending_.erase(it);
    unreg(p);
    free_slots_.push_back(p.slot);
    RpcResult r;
    r.error = why;
    p.done(std::move(r));
  }
  in_flight_ = 0;
  while (!queue_.empty()) {
    auto [c, d] = std::move(queue_.front());
    queue_.pop_front();
    RpcResult r;
    r.error = why;
    d(std::move(r));
  }
}

bool RpcRdmaClient::poll_events() {
  events_.clear();
  const bool any = ep_.poll(events_, wcs_);
  for (const auto& e : events_) on_event(e);
  return any;
}

bool RpcRdmaClient::poll() {
  bool any = poll_events();
  std::vector<conn::Completion> batch;
  batch.swap(wcs_);
  for (const auto& c : batch) {
    if (conn_ == 0 || c.conn != conn_) continue;  // a connection dropped by a reconnect
    const Wc& w = c.wc;
    if (w.status != WcStatus::kSuccess) {
      if (w.status == WcStatus::kWrFlushErr && !up_) continue;
      broken("work completion " + std::string(verbs::to_string(w.status)));
      break;  // the rest of this batch belongs to the connection just dropped
    }
    if ((w.wr_id & kKindMask) == kWrRecv) on_recv(w);
  }
  // Calls without a reply past their deadline fail (the connection is then unusable).
  const auto now = now_ns();
  for (auto& [xid, p] : pending_)
    if (!p.replied && p.deadline && now > p.deadline) {
      broken("call timed out");
      break;
    }
  if (opt_.break_after_calls && !broke_once_ && st_.calls >= opt_.break_after_calls) {
    broke_once_ = true;
    broken("injected connection loss");
  }
  pump_queue();
  return any;
}

RpcResult RpcRdmaClient::call(RpcCall c) {
  std::optional<RpcResult> out;
  submit(std::move(c), [&](RpcResult&& r) { out = std::move(r); });
  until([&] { return out.has_value() || (poll(), false); }, opt_.call_timeout + 5);
  if (!out) {
    RpcResult r;
    r.error = "call timed out";
    return r;
  }
  return std::move(*out);
}

bool RpcRdmaClient::drain(double seconds) {
  return until([&] { return (pending_.empty() && queue_.empty()) || (poll(), false); }, seconds);
}

}  // namespace roce::nfs
