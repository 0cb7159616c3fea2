/// @file
/// The NAA's Stack on libroce and the connection layer (conn_stack.h).
#include "apps/naa/conn_stack.h"

#include <arpa/inet.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace roce::naa {

namespace {

constexpr std::uint32_t kAccess = verbs::kAccessLocalWrite | verbs::kAccessRemoteWrite;

std::uint64_t mono_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::string text(Ipv4Addr a) {
  const std::uint32_t be = htonl(a.v);
  char b[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &be, b, sizeof b);
  return b;
}

conn::Options endpoint_options(const ConnStackOptions& o) {
  conn::Options e;
  e.pd_per_connection = o.pd_per_connection;
  e.max_connections = o.max_connections;
  // The NAA neither issues nor takes RDMA READs or atomics.
  e.responder_resources = 0;
  e.initiator_depth = 0;
  return e;
}

}  // namespace

// The NAA's words for events and completions are the connection layer's first ones.
static_assert(ConnEvent::kDisconnected == static_cast<int>(conn::Event::kDisconnected) &&
              Completion::kRecvImm == static_cast<int>(conn::Completion::kRecvImm));

Completion to_completion(const conn::Completion& c) {
  Completion out;
  out.conn = c.conn;
  out.wr_id = c.wc.wr_id;
  out.ok = c.ok();
  out.status = c.status_text();
  out.byte_len = c.wc.byte_len;
  out.imm = c.wc.imm_data;
  const conn::Completion::What w = c.what();
  out.kind = w <= conn::Completion::kRecvImm ? static_cast<Completion::Kind>(w) : Completion::kSend;
  return out;
}

ConnStack::ConnStack(client::Context& ctx, ConnStackOptions o)
    : ctx_(ctx), o_(std::move(o)), ep_(ctx, endpoint_options(o_)) {}

ConnStack::~ConnStack() {
  // The endpoint's exit-time drain runs in its destructor; what the server never gave back
  // goes with the Context.
}

std::optional<Memory> ConnStack::alloc(std::uint64_t length) {
  client::Buffer* b = ctx_.alloc_buffer(length);
  if (b == nullptr) return std::nullopt;
  const std::uint64_t h = next_buffer_++;
  buffers_[h] = b;
  return Memory{static_cast<std::uint8_t*>(b->addr), length, h};
}

void ConnStack::free(const Memory& m) {
  const auto it = buffers_.find(m.handle);
  if (it == buffers_.end()) return;
  ctx_.free_buffer(it->second);
  buffers_.erase(it);
}

std::optional<MrInfo> ConnStack::reg_mr(ConnId c, void* addr, std::uint64_t length,
                                        std::optional<std::uint64_t> iova) {
  client::Pd* pd = ep_.pd(c);
  if (pd == nullptr) return std::nullopt;
  client::Mr* m = ctx_.reg_mr_iova(pd, addr, length,
                                   iova.value_or(reinterpret_cast<std::uint64_t>(addr)), kAccess);
  if (m == nullptr) return std::nullopt;
  MrInfo i;
  i.addr = addr;
  i.iova = m->iova;
  i.length = length;
  i.lkey = m->lkey;
  i.rkey = m->rkey;
  i.handle = reinterpret_cast<std::uint64_t>(m);
  return i;
}

void ConnStack::dereg_mr(const MrInfo& mr) {
  if (mr.handle) ep_.dereg_mr(reinterpret_cast<client::Mr*>(mr.handle));
}

bool ConnStack::listen(std::uint16_t port) { return ep_.listen(port) == 0; }

bool ConnStack::prepare(ConnId c, const QpSizes& s) {
  conn::QpSizes q;
  q.send = s.send;
  q.recv = s.recv;
  return ep_.prepare(c, q) == 0;
}

bool ConnStack::accept(ConnId c) { return ep_.accept(c) == 0; }

void ConnStack::reject(ConnId c) {
  std::erase_if(resolving_, [c](const Resolving& r) { return r.conn == c; });
  ep_.reject(c);
}

std::optional<ConnId> ConnStack::connect(const std::string& ipv4, std::uint16_t port,
                                         const QpSizes& s) {
  std::uint32_t be = 0;
  if (inet_pton(AF_INET, ipv4.c_str(), &be) != 1) return std::nullopt;
  const Ipv4Addr ip{ntohl(be)};
  // The peer's MAC first (in-process: the poll loop's ARP); attached, roced resolves it.
  const std::uint64_t end = mono_ns() + 10'000'000'000ull;
  if (o_.neighbour) {
    unsigned idle = 0;
    while (!o_.neighbour(ip)) {
      if (mono_ns() > end) return std::nullopt;
      if (!pump() && ++idle >= 32) {
        idle = 0;
        sched_yield();
      }
    }
  }
  conn::QpSizes q;
  q.send = s.send;
  q.recv = s.recv;
  const ConnId c = ep_.connect(ip, port, q);
  if (c == 0) return std::nullopt;
  return c;
}

void ConnStack::disconnect(ConnId c) {
  std::erase_if(resolving_, [c](const Resolving& r) { return r.conn == c; });
  ep_.disconnect(c);
  std::erase_if(done_, [c](const Completion& x) { return x.conn == c; });
}

bool ConnStack::post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                          std::uint32_t lkey) {
  return ep_.post_recv(c, wr_id, addr, length, lkey) == 0;
}

bool ConnStack::post_send(ConnId c, const WorkRequest& w) {
  client::Sge sge{w.local, w.length, w.lkey};
  client::SendWr wr;
  wr.wr_id = w.wr_id;
  wr.opcode = w.op == Op::kSend    ? verbs::WrOpcode::kSend
              : w.op == Op::kWrite ? verbs::WrOpcode::kWrite
                                   : verbs::WrOpcode::kWriteImm;
  wr.sg_list = w.length ? &sge : nullptr;
  wr.num_sge = w.length ? 1 : 0;
  wr.send_flags = (w.signaled ? std::uint32_t{verbs::kSendSignaled} : 0u) |
                  (w.solicited ? std::uint32_t{verbs::kSendSolicited} : 0u);
  wr.imm_data = w.imm;
  wr.rdma.remote_addr = w.remote_addr;
  wr.rdma.rkey = w.rkey;
  return ep_.post_send(c, wr) == 0;
}

void ConnStack::on_event(const conn::Event& e) {
  const auto waiting = std::find_if(resolving_.begin(), resolving_.end(),
                                    [&](const Resolving& r) { return r.conn == e.conn; });
  if (waiting != resolving_.end()) {
    // Not told to the server yet: the endpoint has let it go.
    resolving_.erase(waiting);
    return;
  }
  switch (e.kind) {
    case conn::Event::kConnectRequest:
      if (!o_.neighbour || o_.neighbour(e.peer)) {
        pending_.push_back({ConnEvent::kConnectRequest, e.conn, text(e.peer)});
        return;
      }
      // An address we have no MAC for: ARP is asked, the poll goes on; the request is told
      // to the server when the answer is there (poll_resolving). A REQ from an address that
      // never answers must not hold up the other hosts.
      if (resolving_.size() >= kMaxResolving) {
        ++unresolved_;
        ep_.reject(e.conn);
        return;
      }
      resolving_.push_back(
          {e.conn, e.peer, mono_ns() + static_cast<std::uint64_t>(kResolveSeconds * 1e9)});
      return;
    default:  // the connection's other events, in the NAA's words
      pending_.push_back({static_cast<ConnEvent::Kind>(conn::coarse(e.kind)), e.conn, {}});
      return;
  }
}

void ConnStack::poll_resolving() {
  if (resolving_.empty()) return;
  const std::uint64_t now = mono_ns();
  for (auto r = resolving_.begin(); r != resolving_.end();) {
    if (o_.neighbour(r->ip)) {
      pending_.push_back({ConnEvent::kConnectRequest, r->conn, text(r->ip)});
      r = resolving_.erase(r);
    } else if (now > r->deadline_ns) {
      ++unresolved_;
      std::printf("naa: connect request from %s dropped: no ARP answer in %g s\n",
                  text(r->ip).c_str(), kResolveSeconds);
      std::fflush(stdout);
      const ConnId c = r->conn;
      r = resolving_.erase(r);
      ep_.reject(c);
    } else {
      ++r;
    }
  }
}

bool ConnStack::pump() {
  ev_.clear();
  wc_.clear();
  bool any = ep_.poll(ev_, wc_);
  // A peer's DREQ moves the QP to the error state while the endpoint drains the CQs: the
  // flushed receives come before the connection's end is told. One more poll brings the
  // kDisconnected along, so that the server drops the host rather than count a transport
  // error.
  const auto ended = [&](ConnId c) {
    return std::any_of(ev_.begin(), ev_.end(), [c](const conn::Event& e) {
      return e.conn == c && e.kind == conn::Event::kDisconnected;
    });
  };
  if (std::any_of(wc_.begin(), wc_.end(),
                  [&](const conn::Completion& w) { return !w.ok() && !ended(w.conn); }))
    any |= ep_.poll(ev_, wc_);
  for (const auto& e : ev_) on_event(e);
  for (const auto& w : wc_) done_.push_back(to_completion(w));
  poll_resolving();
  return any;
}

bool ConnStack::poll(std::vector<ConnEvent>& events, std::vector<Completion>& completions) {
  bool any = pump();
  if (!done_.empty()) {
    any = true;
    completions.insert(completions.end(), done_.begin(), done_.end());
    done_.clear();
  }
  if (!pending_.empty()) {
    any = true;
    events.insert(events.end(), pending_.begin(), pending_.end());
    pending_.clear();
  }
  return any;
}

void ConnStack::idle(double seconds) {
  const std::uint64_t end = mono_ns() + static_cast<std::uint64_t>(seconds * 1e9);
  unsigned idle = 0;
  while (mono_ns() < end) {
    if (pump())
      idle = 0;
    else if (++idle >= 32) {
      idle = 0;
      sched_yield();
    }
  }
}

}  // namespace roce::naa
