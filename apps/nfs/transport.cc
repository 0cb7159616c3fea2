/// @file
/// RPC-over-RDMA v1 client transport (transport.h).
#include "apps/nfs/transport.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "apps/nfs/rpc.h"
#include "controlplane/address.h"
#include "controlplane/cm/cm_hub.h"
#include "runtime/cm_agent.h"

namespace roce::nfs {

using namespace roce::engine;

namespace {
// wr_id: kind in the top byte, a slot or receive index below.
constexpr std::uint64_t kWrRecv = 1ull << 56, kWrSend = 2ull << 56, kWrInv = 3ull << 56;
constexpr std::uint64_t kKindMask = 0xffull << 56;
constexpr std::uint32_t kRecvExtra = 4;  ///< receives beyond the credits (a late or extra reply)
}  // namespace

RpcRdmaClient::RpcRdmaClient(runtime::Env& env, TransportOptions o) : env_(env), opt_(o) {
  opt_.credits = std::clamp<std::uint32_t>(opt_.credits, 1, 128);
  opt_.inline_size = std::clamp<std::uint32_t>(opt_.inline_size, 1024, 64 * 1024);
  // The engine's one CM (QP1), shared with roced's other services and attached clients.
  hub_ = cm::CmHub::get(env_.eng, runtime::cm_agent_config(env_));
  owner_ = hub_->add_owner([this](const cm::CmEvent& e) { on_cm(e); });
  pd_ = env_.eng.alloc_pd();
  cq_ = env_.eng.create_cq(std::min<std::uint32_t>(4096, env_.eng.config().max_cq_depth));
  if (!pd_ || !cq_) throw std::runtime_error("cannot create the PD and CQ");
  const std::size_t slots = opt_.credits, recvs = opt_.credits + kRecvExtra;
  send_mem_.resize(slots * opt_.inline_size);
  recv_mem_.resize(recvs * opt_.inline_size);
  send_mr_ = env_.eng.reg_mr(pd_, send_mem_.data(), send_mem_.size(), kAccessLocalWrite);
  recv_mr_ = env_.eng.reg_mr(pd_, recv_mem_.data(), recv_mem_.size(), kAccessLocalWrite);
  if (!send_mr_ || !recv_mr_) throw std::runtime_error("cannot register the message buffers");
  frmrs_.resize(slots);
  for (auto& s : frmrs_)
    for (auto& f : s) {
      f.mr = env_.eng.alloc_mr(pd_, opt_.max_chunk + 4096);
      if (!f.mr) throw std::runtime_error("cannot allocate the FRWR memory regions");
      f.rkey = f.mr->key;
    }
  for (std::uint32_t i = 0; i < slots; ++i) free_slots_.push_back(slots - 1 - i);
}

RpcRdmaClient::~RpcRdmaClient() {
  close();
  hub_->agent().drain([&] {
    env_.loop.poll_once();
    hub_->poll(port::now_ns());
  });
  for (auto& s : frmrs_)
    for (auto& f : s)
      if (f.mr) env_.eng.dereg_mr(f.mr);
  if (send_mr_) env_.eng.dereg_mr(send_mr_);
  if (recv_mr_) env_.eng.dereg_mr(recv_mr_);
  hub_->remove_owner(owner_);
  hub_.reset();
  if (cq_) env_.eng.destroy_cq(cq_);
  if (pd_) env_.eng.dealloc_pd(pd_);
}

void RpcRdmaClient::drop_qp() {
  if (!qp_) return;
  hub_->agent().release(qp_);  // DREQ if still up
  // Let the DREQ go out before the QP goes.
  env_.until(
      [&] {
        hub_->poll(port::now_ns());
        return false;
      },
      0.05);
  env_.eng.destroy_qp(qp_);
  qp_ = nullptr;
  up_ = false;
  // Its completions (flushes) must not reach the next QP, which may get the same QPN.
  Wc wc[32];
  while (env_.eng.poll_cq(cq_, 32, wc) > 0) {
  }
}

void RpcRdmaClient::close() {
  if (!qp_) return;
  peer_ip_.clear();  // the DREP's disconnect event must not make the connection again
  fail_all("transport closed");
  drop_qp();
}

namespace {
constexpr int kConnectAttempts = 4;  ///< a reconnect: tries, 0.5, 1 and 2 s apart
}  // namespace

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
  drop_qp();
  // Registrations do not survive the QP: an MR still valid (its call's invalidation never
  // completed) is replaced, as xprtrdma recovers its MRs after a reconnect.
  for (auto& slot : frmrs_)
    for (auto& f : slot)
      if (f.valid) {
        env_.eng.dereg_mr(f.mr);
        f.mr = env_.eng.alloc_mr(pd_, opt_.max_chunk + 4096);
        if (f.mr) f.rkey = f.mr->key;
        f.valid = false;
        ++st_.mrs_recovered;
      }
  // Calls already answered are done; the others go out again, in XID order, first.
  std::vector<std::pair<RpcCall, Done>> again;
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = it->second;
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
    drop_qp();
    const double pause = 0.25 * (1 << attempt);
    env_.until([] { return false; }, pause);
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
  const auto ip = ctl::parse_ipv4(ipv4);
  if (!ip) {
    err_ = "bad IPv4 address " + ipv4;
    return false;
  }
  if (!port::resolve_wait(env_.loop, *ip, opt_.connect_timeout)) {
    err_ = "no ARP answer from " + ipv4;
    return false;
  }
  qp_ = env_.eng.create_qp(pd_, QpType::kRc, cq_, cq_,
                           QpCap{opt_.credits * 8 + 16, opt_.credits + kRecvExtra, 2, 1, 0});
  if (!qp_) {
    err_ = "cannot create the QP";
    return false;
  }
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  if (env_.eng.modify_qp(qp_, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk) {
    err_ = "cannot move the QP to INIT";
    return false;
  }
  for (std::uint32_t i = 0; i < opt_.credits + kRecvExtra; ++i) post_recv(i);
  std::mt19937 rng(std::random_device{}());
  cm::ConnectParams p;
  p.peer.gid = ctl::gid_from_ipv4(*ip);
  p.service_id = cm::service_id(cm::PortSpace::kTcp, port);
  p.starting_psn = wire::Psn(rng());
  // The server READs our read chunks: we answer its READs (responder resources), and it may
  // have as many outstanding.
  p.responder_resources = 16;
  p.initiator_depth = 16;
  p.cma = cm::CmaHeader::ipv4(env_.ip, static_cast<std::uint16_t>(32768 + rng() % 28000), *ip);
  rdma::ConnectPrivate mine;
  mine.remote_invalidate = opt_.remote_invalidate;
  mine.send_size = opt_.inline_size;
  mine.receive_size = opt_.inline_size;
  p.private_data = rdma::encode(mine);
  failed_ = false;
  cm_id_ = hub_->connect(owner_, qp_, p);
  if (!cm_id_) {
    err_ = "rdma_cm connect failed";
    return false;
  }
  env_.until([&] { return up_ || failed_ || (poll_stack(), false); }, opt_.connect_timeout);
  if (!up_) {
    if (err_.empty()) err_ = "no connection to " + ipv4 + ":" + std::to_string(port);
    return false;
  }
  return true;
}

void RpcRdmaClient::on_cm(const cm::CmEvent& e) {
  if (!cm_id_ || e.id.v != cm_id_->v) return;
  switch (e.type) {
    case cm::CmEventType::kEstablished: {
      up_ = true;
      // RFC 8797: without the peer's private data both directions use 1024 bytes.
      const auto pd = rdma::decode_private(e.private_data);
      peer_pd_ = pd.has_value();
      peer_inv_ = pd && pd->remote_invalidate;
      send_inline_ = pd ? std::min(opt_.inline_size, pd->receive_size) : rdma::kDefaultInline;
      break;
    }
    case cm::CmEventType::kRejected:
      err_ = "connection rejected";
      failed_ = true;
      break;
    case cm::CmEventType::kUnreachable:
    case cm::CmEventType::kConnectError:
      err_ = "server unreachable";
      failed_ = true;
      break;
    case cm::CmEventType::kDisconnected:
      up_ = false;
      failed_ = true;
      broken("disconnected by the server");
      break;
    default:
      break;
  }
}

void RpcRdmaClient::post_recv(std::uint32_t i) {
  Sge sge{reinterpret_cast<std::uint64_t>(recv_mem_.data() + std::size_t{i} * opt_.inline_size),
          opt_.inline_size, recv_mr_->key};
  RecvWr wr;
  wr.wr_id = kWrRecv | i;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  env_.eng.post_recv(qp_, &wr, nullptr);
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
    // until its chunks are invalidated.
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
      free_slots_.push_back(p.slot);
      pending_.erase(*xid);
      done(std::move(r));
    }
  }
}

std::optional<std::uint32_t> RpcRdmaClient::reg(std::uint32_t slot, std::uint32_t which,
                                                std::uint8_t* p, std::size_t n,
                                                std::uint32_t access) {
  Frmr& f = frmrs_[slot][which];
  if (n > opt_.max_chunk) {
    err_ = "chunk of " + std::to_string(n) + " bytes exceeds max_chunk";
    return std::nullopt;
  }
  // A fresh key variant for every registration: a late access with the old key fails.
  const std::uint8_t variant = static_cast<std::uint8_t>(f.rkey + 1);
  SendWr wr;
  wr.wr_id = 0;
  wr.opcode = WrOpcode::kRegMr;
  wr.send_flags = 0;  // not signalled (as xprtrdma's frwr_map)
  wr.reg.mr_key = f.rkey;
  wr.reg.new_key_variant = variant;
  wr.reg.addr = reinterpret_cast<std::uint64_t>(p);
  wr.reg.length = std::max<std::size_t>(n, 1);
  wr.reg.access = access | kAccessLocalWrite;
  if (env_.eng.post_send(qp_, &wr, nullptr) != kOk) {
    err_ = "cannot post REG_MR";
    return std::nullopt;
  }
  f.rkey = (f.rkey & ~0xffu) | variant;
  f.valid = true;
  ++st_.registrations;
  return f.rkey;
}

bool RpcRdmaClient::start(std::uint32_t xid, Pending& p) {
  rdma::Header h;
  h.xid = xid;
  h.credits = opt_.credits;
  h.proc = rdma::Proc::kMsg;
  RpcCall& c = p.call;
  if (!c.read_data.empty()) {
    const auto k = reg(p.slot, 0, const_cast<std::uint8_t*>(c.read_data.data()), c.read_data.size(),
                       kAccessRemoteRead);
    if (!k) return false;
    p.rkeys.push_back(*k);
    h.reads.push_back({c.read_position,
                       {*k, static_cast<std::uint32_t>(c.read_data.size()),
                        reinterpret_cast<std::uint64_t>(c.read_data.data())}});
    ++st_.read_chunks;
  }
  if (!c.write_target.empty()) {
    const auto k = reg(p.slot, 1, c.write_target.data(), c.write_target.size(), kAccessRemoteWrite);
    if (!k) return false;
    p.rkeys.push_back(*k);
    h.writes.push_back({{{*k, static_cast<std::uint32_t>(c.write_target.size()),
                          reinterpret_cast<std::uint64_t>(c.write_target.data())}}});
    ++st_.write_chunks;
  }
  // RFC 8166 3.5.3: a reply that may exceed our receive size needs a reply chunk.
  if (c.reply_max + rdma::kMinHeader + 64 > opt_.inline_size) {
    p.reply_buf.resize(std::min<std::size_t>(c.reply_max, opt_.max_chunk));
    const auto k = reg(p.slot, 2, p.reply_buf.data(), p.reply_buf.size(), kAccessRemoteWrite);
    if (!k) return false;
    p.rkeys.push_back(*k);
    h.reply = rdma::WriteChunk{{{*k, static_cast<std::uint32_t>(p.reply_buf.size()),
                                 reinterpret_cast<std::uint64_t>(p.reply_buf.data())}}};
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
  std::uint8_t* buf = send_mem_.data() + std::size_t{p.slot} * opt_.inline_size;
  std::memcpy(buf, hdr.data(), hdr.size());
  std::memcpy(buf + hdr.size(), c.msg.data(), c.msg.size());
  Sge sge{reinterpret_cast<std::uint64_t>(buf),
          static_cast<std::uint32_t>(hdr.size() + c.msg.size()), send_mr_->key};
  SendWr wr;
  wr.wr_id = kWrSend | p.slot;
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  if (env_.eng.post_send(qp_, &wr, nullptr) != kOk) {
    err_ = "cannot post SEND";
    return false;
  }
  p.deadline = port::now_ns() + static_cast<std::uint64_t>(opt_.call_timeout * 1e9);
  ++in_flight_;
  ++st_.calls;
  st_.max_outstanding = std::max(st_.max_outstanding, in_flight_);
  return true;
}

void RpcRdmaClient::on_recv(const Wc& wc) {
  const std::uint32_t i = static_cast<std::uint32_t>(wc.wr_id & ~kKindMask);
  const std::uint8_t* m = recv_mem_.data() + std::size_t{i} * opt_.inline_size;
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
    if (!h.reply || p.reply_buf.empty()) {
      r.error = "RDMA_NOMSG without a reply chunk";
    } else {
      const auto n = std::min<std::uint64_t>(h.reply->length(), p.reply_buf.size());
      r.reply.assign(p.reply_buf.begin(), p.reply_buf.begin() + static_cast<std::ptrdiff_t>(n));
      r.ok = true;
    }
  } else {
    r.reply = std::move(body);
    r.ok = true;
  }
  if (!h.writes.empty()) r.written = h.writes.front().length();
  // Invalidate what the call registered, unless the server's SEND with invalidate already did.
  for (std::uint32_t k : p.rkeys) {
    if ((wc.wc_flags & kWcWithInv) && wc.invalidated_rkey == k) {
      ++st_.remote_invalidations;
      for (auto& f : frmrs_[p.slot])
        if (f.rkey == k) f.valid = false;
      continue;
    }
    SendWr inv;
    inv.wr_id = kWrInv | p.slot;
    inv.opcode = WrOpcode::kLocalInv;
    inv.invalidate_rkey = k;
    inv.send_flags = kSendSignaled;
    if (env_.eng.post_send(qp_, &inv, nullptr) == kOk) {
      ++p.inv_outstanding;
      ++st_.local_invalidations;
    }
  }
  if (p.inv_outstanding == 0) finish(h.xid);
}

void RpcRdmaClient::finish(std::uint32_t xid) {
  auto it = pending_.find(xid);
  if (it == pending_.end()) return;
  Pending p = std::move(it->second);
  pending_.erase(it);
  for (auto& f : frmrs_[p.slot]) f.valid = false;
  free_slots_.push_back(p.slot);
  p.done(std::move(p.result));
}

void RpcRdmaClient::fail_all(const std::string& why) {
  while (!pending_.empty()) {
    auto it = pending_.begin();
    Pending p = std::move(it->second);
    pending_.erase(it);
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

bool RpcRdmaClient::poll_stack() {
  const bool any = env_.loop.poll_once() != 0;
  hub_->poll(port::now_ns());
  return any;
}

bool RpcRdmaClient::poll() {
  bool any = poll_stack();
  Wc wc[32];
  int n;
  while ((n = env_.eng.poll_cq(cq_, 32, wc)) > 0) {
    any = true;
    for (int k = 0; k < n; ++k) {
      const Wc& w = wc[k];
      if (!qp_ || w.qp_num != qp_->qpn) continue;  // a QP dropped by a reconnect (flushes)
      if (w.status != WcStatus::kSuccess) {
        if (w.status == WcStatus::kWrFlushErr && !up_) continue;
        broken("work completion " + std::string(to_string(w.status)));
        break;  // the rest of this batch belongs to the QP just dropped
      }
      // The first data before the RTU is the connection's COMM_EST.
      if (w.opcode == WcOpcode::kRecv && cm_id_) hub_->agent().cm().notify_established(*cm_id_);
      switch (w.wr_id & kKindMask) {
        case kWrRecv:
          on_recv(w);
          break;
        case kWrInv: {
          const std::uint32_t slot = static_cast<std::uint32_t>(w.wr_id & ~kKindMask);
          for (auto& [xid, p] : pending_)
            if (p.slot == slot && p.inv_outstanding && --p.inv_outstanding == 0) {
              finish(xid);
              break;
            }
          break;
        }
        default:
          break;
      }
    }
  }
  // Calls without a reply past their deadline fail (the connection is then unusable).
  const auto now = port::now_ns();
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
  return any || env_.eng.has_work();
}

RpcResult RpcRdmaClient::call(RpcCall c) {
  std::optional<RpcResult> out;
  submit(std::move(c), [&](RpcResult&& r) { out = std::move(r); });
  env_.until([&] { return out.has_value() || (poll(), false); }, opt_.call_timeout + 5);
  if (!out) {
    RpcResult r;
    r.error = "call timed out";
    return r;
  }
  return std::move(*out);
}

bool RpcRdmaClient::drain(double seconds) {
  return env_.until([&] { return (pending_.empty() && queue_.empty()) || (poll(), false); },
                    seconds);
}

}  // namespace roce::nfs
