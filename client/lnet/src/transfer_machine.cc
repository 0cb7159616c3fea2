/// @file
/// Transfer machines: their queues, connections (RC QPs set up lazily, QP numbers exchanged on
/// TCP), message and bulk operations, and buffer event delivery after the Motr LNet transport
/// HLD. One event thread per Tm polls its CQ (shared by every QP of the Tm), turns completions
/// into buffer events and either posts them (asynchronous delivery) or keeps them for
/// deliver_all() (synchronous delivery); one listener thread answers connection requests.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <random>
#include <system_error>

#include "client/lnet/src/lnet_internal.h"

namespace roce::lnet {
namespace {

constexpr std::uint64_t kTagShift = 62;
constexpr std::uint64_t kTagBuf = 0, kTagCtlRecv = 1, kTagCtlSend = 2;
constexpr std::uint64_t kCtlBye = 1;  ///< the value of a goodbye's kTagCtlSend wr_id
/// A released connection waits this long at most for its goodbye and its operations.
constexpr auto kCloseWait = std::chrono::milliseconds(500);
constexpr std::uint32_t kCtlSlot = 32;       ///< bytes per control-message slot
constexpr std::uint32_t kCtlRecvSlots = 16;  ///< per connection
constexpr std::uint32_t kCtlSendSlots = 16;  ///< per connection
constexpr std::uint32_t kCtlBytes = 64 * 1024;
constexpr std::uint32_t kCtlBlock = kCtlRecvSlots + kCtlSendSlots;        ///< slots of a connection
constexpr std::uint32_t kCtlBlocks = kCtlBytes / (kCtlBlock * kCtlSlot);  ///< connections per Tm
static_assert(kCtlBlocks == 64, "one bit of Tm::ctl_blocks_ per connection");
static_assert(CtlMsg::kSize <= kCtlSlot);
/// Hellos being read at once; one more evicts the oldest (a complete hello arrives in one
/// segment right after the connect, so only a stalled peer stays half-open).
constexpr std::size_t kMaxHalfOpen = 8;
constexpr int kHelloDeadlineMs = 2000;  ///< a whole hello, from accept to its last byte
/// Connections with one peer: the first, and the second of a simultaneous connect.
constexpr std::size_t kMaxConnsPerPeer = 2;
/// QP set-ups in flight (on their own threads: moving a QP to RTR waits for roced to resolve the
/// peer's address, up to its resolve_timeout_ms when nobody answers ARP), in all and per /24 of
/// the NIDs the hellos claim. One more is answered EAGAIN at once.
constexpr std::size_t kMaxSetups = 16;
constexpr std::size_t kMaxSetupsPerSubnet = 4;
constexpr std::uint32_t kCqDepth = 2048;
constexpr int kPollMs = 10;  ///< the event thread's wait: the granularity of deadlines
using Clock = std::chrono::steady_clock;

std::uint64_t tag(std::uint64_t kind, std::uint64_t v) { return kind << kTagShift | v; }

/// Moves `n` bytes by `deadline` (a whole exchange, not each read: a peer that trickles one
/// byte at a time gets no more time than one that sends nothing). False with `*why` (when
/// given) ETIMEDOUT at the deadline, EPROTO when the peer closed or reset.
bool io_all(int fd, void* p, std::size_t n, bool wr, Clock::time_point deadline,
            int* why = nullptr) {
  auto* b = static_cast<std::uint8_t*>(p);
  int dummy;
  int& e = why ? *why : dummy;
  while (n != 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd pf{fd, static_cast<short>(wr ? POLLOUT : POLLIN), 0};
    const int pr = left <= 0 ? 0 : poll(&pf, 1, static_cast<int>(left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) {
      e = ETIMEDOUT;
      return false;
    }
    const ssize_t k =
        wr ? send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, b, n, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (k <= 0) {
      e = EPROTO;
      return false;
    }
    b += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

void put_str(char (&dst)[48], const std::string& s) {
  std::memset(dst, 0, sizeof dst);
  std::memcpy(dst, s.data(), std::min(s.size(), sizeof dst - 1));
}

}  // namespace

// ---- connections
// ----------------------------------------------------------------------------------

struct Tm::Conn {
  EndPoint peer;
  client::Qp* qp = nullptr;   ///< messages and RDMA (receives on the Tm's SRQ)
  client::Qp* cqp = nullptr;  ///< control messages
  std::uint32_t slot0 = 0;    ///< first control slot in the Tm's control buffer
  int block = -1;             ///< its block of slots (Tm::ctl_blocks_), -1: none
  std::uint32_t send_next = 0;
  enum class State { kConnecting, kUp, kFailed, kClosing } state = State::kConnecting;
  std::vector<NetBuffer*> waiting;  ///< operations added while connecting
  bool foreign = false;             ///< a plain verbs peer (foreign_open): no control QP
  std::uint32_t psn = 0;            ///< foreign: our first PSN
  bool used = false;                ///< a completion on its QPs, or an operation started on it
  std::chrono::steady_clock::time_point since;     ///< made, or failed
  std::chrono::steady_clock::time_point last_use;  ///< its last operation or completion
  std::uint32_t inflight = 0;  ///< send-side work requests on its message QP not yet complete
  bool bye_done = false;       ///< kClosing: its goodbye left (or could not be sent)
  std::chrono::steady_clock::time_point close_by;  ///< kClosing: destroyed by then at the latest
  /// Set up by a hello while the peer's connection had carried something: it replaces that one
  /// at its first receive (supersede_locked), which needs the peer's end of it. A hello alone
  /// (anyone's, without oob_key) does not take a working connection away.
  bool unproven = false;
};

std::shared_ptr<Tm::Conn> Tm::make_conn() {
  client::Context& ctx = dom_.ctx();
  auto c = std::make_shared<Conn>();
  c->since = c->last_use = std::chrono::steady_clock::now();
  if (~ctl_blocks_ == 0) reap_closing_locked(true);
  if (~ctl_blocks_ == 0 && !reclaim_one_locked()) {
    errno = ENOSPC;  // the control buffer's slots are spent: too many peers for one Tm
    return nullptr;
  }
  c->block = std::countr_one(ctl_blocks_);
  c->slot0 = static_cast<std::uint32_t>(c->block) * kCtlBlock;
  client::QpCap cap;
  cap.max_send_wr = 256;
  cap.max_recv_wr = 1;
  c->qp = ctx.create_qp(dom_.pd(), client::QpType::kRc, cq_, cq_, cap, srq_);
  client::QpCap ccap;
  ccap.max_send_wr = kCtlSendSlots;
  ccap.max_recv_wr = kCtlRecvSlots;
  ccap.max_send_sge = ccap.max_recv_sge = 1;
  c->cqp = c->qp ? ctx.create_qp(dom_.pd(), client::QpType::kRc, cq_, cq_, ccap) : nullptr;
  if (!c->cqp && c->block >= 0) {
    // No QPs left (roced's quota, max_qps): released connections give theirs back, then the
    // least recently used one nothing holds, and once more.
    if (c->qp) ctx.destroy_qp(c->qp);
    c->qp = nullptr;
    const bool had_closing = !closing_.empty();
    reap_closing_locked(true);
    if (had_closing || reclaim_one_locked()) {
      c->qp = ctx.create_qp(dom_.pd(), client::QpType::kRc, cq_, cq_, cap, srq_);
      c->cqp = c->qp ? ctx.create_qp(dom_.pd(), client::QpType::kRc, cq_, cq_, ccap) : nullptr;
    }
  }
  if (!c->cqp) {
    const int e = errno;
    if (c->qp) ctx.destroy_qp(c->qp);
    errno = e ? e : ENOMEM;
    return nullptr;
  }
  ctl_blocks_ |= std::uint64_t{1} << c->block;
  return c;
}

// A Tm full of connections makes room. First choice, the one that carried nothing since its
// hello (a bogus peer, or one that died at once) or failed longest ago, if that is longer than
// DomainOptions::conn_reclaim_after (a flood of fresh hellos does not evict each other). Then
// the least recently used one whose end point nobody references and that nothing uses: its
// peer has gone, or will connect again when it has something to say.
bool Tm::reclaim_one_locked() {
  const auto now = std::chrono::steady_clock::now();
  std::shared_ptr<Conn> best, idle;
  auto consider = [&](const std::shared_ptr<Conn>& k) {
    if (k->foreign || k->block < 0 || !k->waiting.empty()) return;
    const bool unused = k->state == Conn::State::kUp && !k->used;
    if ((unused || k->state == Conn::State::kFailed) &&
        now - k->since >= dom_.options().conn_reclaim_after) {
      if (!best || k->since < best->since) best = k;
      return;
    }
    if (k->state == Conn::State::kUp && k->used && releasable_locked(*k))
      if (!idle || k->last_use < idle->last_use) idle = k;
  };
  for (const auto& [ep, k] : conns_) consider(k);
  for (const auto& k : parked_) consider(k);
  if (!best && !idle) return false;
  if (best) {
    ++stats_.conns_reclaimed;
    close_conn_locked(best, best->state == Conn::State::kUp);
  } else {
    close_conn_locked(idle, true);
  }
  reap_closing_locked(true);
  return ~ctl_blocks_ != 0;
}

// Nothing holds `c`: no reference on its peer's end point, no operation on it, none waiting.
bool Tm::releasable_locked(const Conn& c) const {
  if (c.inflight != 0 || !c.waiting.empty()) return false;
  auto r = ep_refs_.find(c.peer);
  if (r != ep_refs_.end() && r->second != 0 && conns_.count(c.peer) &&
      conns_.at(c.peer).get() == &c)
    return false;
  return true;
}

// `c` (unproven) received something from its peer: the peer has its end, so it restarted and
// the connection it had before is dead. `c` becomes the peer's connection, the old one goes.
void Tm::supersede_locked(Conn& c) {
  c.unproven = false;
  auto sp = conn_ptr_locked(&c);
  if (!sp || c.state != Conn::State::kUp) return;
  std::shared_ptr<Conn> old;
  if (auto it = conns_.find(c.peer); it != conns_.end() && it->second != sp) old = it->second;
  std::erase(parked_, sp);
  conns_[c.peer] = sp;
  if (old) close_conn_locked(old, false);
}

std::shared_ptr<Tm::Conn> Tm::conn_ptr_locked(Conn* c) const {
  for (const auto& [ep, k] : conns_)
    if (k.get() == c) return k;
  for (const auto& k : parked_)
    if (k.get() == c) return k;
  return nullptr;
}

// Releases `c`: it is no longer anyone's connection; with `bye` its peer is told on the control
// QP (a goodbye: a control message with token 0, a token never handed out) so that it drops
// its end too and connects afresh next time. Its QPs go once the goodbye and its operations
// are done (reap_closing_locked), kCloseWait at most.
void Tm::close_conn_locked(const std::shared_ptr<Conn>& c, bool bye) {
  auto it = conns_.find(c->peer);
  if (it != conns_.end() && it->second == c) conns_.erase(it);
  std::erase(parked_, c);
  if (c->state == Conn::State::kClosing) return;
  const bool was_live = c->state == Conn::State::kUp;
  c->state = Conn::State::kClosing;
  c->close_by = std::chrono::steady_clock::now() + kCloseWait;
  c->bye_done = true;
  if (bye && was_live && c->cqp && !c->foreign) {
    send_ctl_locked(*c, 0, 0, ECONNRESET, kCtlBye);
    c->bye_done = false;
  }
  ++stats_.conns_released;
  closing_.push_back(c);
}

void Tm::reap_closing_locked(bool force) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<BufferEvent> evs;
  for (auto it = closing_.begin(); it != closing_.end();) {
    Conn& c = **it;
    if (force || now >= c.close_by || (c.bye_done && c.inflight == 0)) {
      if (c.inflight != 0) {
        // Operations still on its QPs will never complete once they are gone: they end now.
        for (auto& q : queues_)
          for (auto b = q.begin(); b != q.end();) {
            NetBuffer& nb = **b++;  // finish_locked removes nb from q
            if (nb.impl->conn == &c) finish_locked(nb, -ECONNRESET, evs);
          }
      }
      unmake_conn_locked(c);
      it = closing_.erase(it);
    } else {
      ++it;
    }
  }
  if (!evs.empty()) {  // for the event thread (or deliver_all), as queue_events does
    for (const BufferEvent& e : evs) pending_.push_back(e);
    npending_.store(pending_.size(), std::memory_order_release);
  }
}

// A connection that never carried an operation (its set-up failed): its QPs and slots go back.
void Tm::unmake_conn_locked(Conn& c) {
  if (c.qp) by_qpn_.erase(c.qp->qp_num);
  if (c.cqp) by_qpn_.erase(c.cqp->qp_num);
  if (c.qp) dom_.ctx().destroy_qp(c.qp);
  if (c.cqp) dom_.ctx().destroy_qp(c.cqp);
  c.qp = c.cqp = nullptr;
  if (c.block >= 0) ctl_blocks_ &= ~(std::uint64_t{1} << c.block);
  c.block = -1;
}

int Tm::foreign_open(const EndPoint& peer, std::uint32_t& qpn, std::uint32_t& psn) {
  if (state() != TmState::kStarted) return ENOTCONN;
  client::Context& ctx = dom_.ctx();
  std::lock_guard<std::mutex> g(mu_);
  if (conns_.count(peer)) return EEXIST;
  auto c = std::make_shared<Conn>();
  client::QpCap cap;
  cap.max_send_wr = 256;
  cap.max_recv_wr = 1;
  c->qp = ctx.create_qp(dom_.pd(), client::QpType::kRc, cq_, cq_, cap, srq_);
  if (!c->qp) return errno ? errno : ENOMEM;
  c->peer = peer;
  c->foreign = true;
  c->psn = std::mt19937(std::random_device{}())() & 0xFFFFFF;
  conns_[peer] = c;
  by_qpn_[c->qp->qp_num] = c.get();
  qpn = c->qp->qp_num;
  psn = c->psn;
  return 0;
}

int Tm::foreign_connect(const EndPoint& peer, const client::RcPeer& far, client::Mtu mtu) {
  std::shared_ptr<Conn> c;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = conns_.find(peer);
    if (it == conns_.end() || !it->second->foreign) return ENOENT;
    c = it->second;
  }
  // No Tm lock across the QP transitions (an address resolution may take a while).
  const int rc = dom_.ctx().connect_rc(c->qp, far, c->psn, mtu);
  std::vector<BufferEvent> evs;
  {
    std::lock_guard<std::mutex> g(mu_);
    c->state = rc == 0 ? Conn::State::kUp : Conn::State::kFailed;
    if (rc == 0) ++stats_.connections;
    for (NetBuffer* nb : c->waiting) {
      if (rc == 0)
        start_op_locked(*nb, *c, evs);
      else
        finish_locked(*nb, -rc, evs);
    }
    c->waiting.clear();
  }
  queue_events(evs);
  return rc;
}

// Receives can be posted once a QP is past RESET: after connect_rc.
void Tm::post_ctl_recvs(Conn& c) {
  client::Context& ctx = dom_.ctx();
  for (std::uint32_t i = 0; i < kCtlRecvSlots; ++i) {
    client::Sge sge{reinterpret_cast<std::uint64_t>(static_cast<std::uint8_t*>(ctl_buf_->addr) +
                                                    (c.slot0 + i) * kCtlSlot),
                    kCtlSlot, ctl_mr_->lkey};
    client::RecvWr wr;
    wr.wr_id = tag(kTagCtlRecv, c.slot0 + i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ctx.post_recv(c.cqp, &wr, nullptr);
  }
}

// Connection set-up ("lazily on first send"): the Tm that first has something for a peer
// creates its two QPs, sends their numbers on TCP to the peer's listener, and the listener
// answers with its own after moving its QPs to RTS; both ends then keep the connection.
void Tm::conn_for(const EndPoint& ep, NetBuffer& first) {
  std::shared_ptr<Conn> c;
  std::vector<BufferEvent> evs;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = conns_.find(ep);
    if (it != conns_.end()) {  // made meanwhile by another thread or by the peer
      if (it->second->state == Conn::State::kConnecting)
        it->second->waiting.push_back(&first);
      else
        start_op_locked(first, *it->second, evs);
    } else {
      c = make_conn();
      if (!c) {
        finish_locked(first, -(errno ? errno : ENOMEM), evs);
      } else {
        c->peer = ep;
        c->waiting.push_back(&first);
        conns_[ep] = c;
        by_qpn_[c->qp->qp_num] = c.get();
        by_qpn_[c->cqp->qp_num] = c.get();
      }
    }
  }
  if (c) {
    const auto [host, port] = dom_.oob_locate(ep);
    const int rc = connect_conn(*c, host, port);  // no lock held across the TCP exchange
    std::lock_guard<std::mutex> g(mu_);
    c->state = rc == 0 ? Conn::State::kUp : Conn::State::kFailed;
    if (rc == 0) ++stats_.connections;
    for (NetBuffer* nb : c->waiting) {
      if (rc == 0 && !(nb->flags & (kBufCancelled | kBufTimedOut)))
        start_op_locked(*nb, *c, evs);
      else if (rc != 0)  // why the set-up failed (connect_conn's errno values)
        finish_locked(*nb, -rc, evs);
      else
        finish_locked(*nb, nb->flags & kBufCancelled ? -ECANCELED : -ETIMEDOUT, evs);
    }
    c->waiting.clear();
    if (rc != 0) {  // the next operation tries again, on new QPs
      conns_.erase(ep);
      unmake_conn_locked(*c);
    }
  }
  queue_events(evs);
}

int Tm::connect_conn(Conn& c, const std::string& host, std::uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) return EINVAL;
  // The whole exchange, TCP connect included, within oob_timeout: add() (or the callback
  // that called it) waits no longer for a peer host that drops SYNs or a listener that stalls.
  const auto deadline = Clock::now() + dom_.options().oob_timeout;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    int e = errno;
    if (e == EINPROGRESS) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd pf{fd, POLLOUT, 0};
      socklen_t len = sizeof e;
      if (poll(&pf, 1, static_cast<int>(std::max<long>(left, 0))) <= 0)
        e = ETIMEDOUT;
      else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
        e = errno;
    }
    if (e != 0) {
      close(fd);
      return e == ECONNREFUSED ? EHOSTUNREACH : e;
    }
  }
  // The listener speaks first: magic and version (another version: EPROTO at once, not a
  // timeout), then the nonce our hello's tag covers. Closed early: EPROTO; silent: ETIMEDOUT.
  int why = 0;
  std::array<std::uint8_t, OobGreeting::kSize> greeting;
  if (!io_all(fd, greeting.data(), OobGreeting::kHead, false, deadline, &why)) {
    close(fd);
    return why;
  }
  if (OobGreeting::check_head(greeting)) {
    close(fd);
    return EPROTO;
  }
  OobNonce nonce;
  if (!io_all(fd, nonce.data(), nonce.size(), false, deadline, &why)) {
    close(fd);
    return why;
  }
  std::mt19937 rng(std::random_device{}());
  OobHello h;
  put_str(h.src, ep_.str());
  put_str(h.dst, c.peer.str());
  h.qpn = c.qp->qp_num;
  h.psn = rng() & 0xFFFFFF;
  h.cqpn = c.cqp->qp_num;
  h.cpsn = rng() & 0xFFFFFF;
  std::memcpy(h.gid, dom_.ctx().port().gid.b.data(), 16);
  sign_hello(h, nonce, dom_.options().oob_key);
  OobHello r;
  int rc = io_all(fd, &h, sizeof h, true, deadline, &why) &&
                   io_all(fd, &r, sizeof r, false, deadline, &why)
               ? 0
               : why;
  close(fd);
  if (rc == 0 && (r.magic != OobHello::kMagic || r.version != OobHello::kVersion)) rc = EPROTO;
  // A listener without our key (or an impostor) cannot sign its reply.
  if (rc == 0 && r.status != EACCES && !hello_tag_ok(r, nonce, dom_.options().oob_key)) rc = EACCES;
  if (rc == 0 && r.status != 0) rc = r.status;
  if (rc != 0) return rc;
  client::RcPeer p;
  std::memcpy(p.gid.b.data(), r.gid, 16);
  const client::Mtu mtu = dom_.ctx().port().max_mtu;
  p.qpn = r.qpn;
  p.psn = r.psn;
  if ((rc = dom_.ctx().connect_rc(c.qp, p, h.psn, mtu))) return rc;
  p.qpn = r.cqpn;
  p.psn = r.cpsn;
  if ((rc = dom_.ctx().connect_rc(c.cqp, p, h.cpsn, mtu))) return rc;
  post_ctl_recvs(c);
  return 0;
}

// The listener: reads up to kMaxHalfOpen hellos at once without blocking, each within
// kHelloDeadlineMs, and spends QPs and slots only on a hello that check_hello() accepts.
void Tm::oob_loop() {
  struct HalfOpen {
    int fd;
    std::chrono::steady_clock::time_point deadline;
    std::size_t got = 0;
    std::array<std::uint8_t, sizeof(OobHello)> buf{};
    OobNonce nonce{};
  };
  std::deque<HalfOpen> half;  // oldest first
  auto refuse = [&](HalfOpen& h, bool other_version = false) {
    close(h.fd);
    std::lock_guard<std::mutex> g(mu_);
    ++stats_.hellos_refused;
    if (other_version) ++stats_.hellos_version;
  };
  std::chrono::steady_clock::time_point accept_pause{};
  std::vector<pollfd> pf;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    pf.clear();
    pf.push_back({wake_fd_, POLLIN, 0});
    pf.push_back({now >= accept_pause ? listen_fd_ : -1, POLLIN, 0});
    int timeout = now >= accept_pause ? -1 : 100;
    for (const HalfOpen& h : half) {
      pf.push_back({h.fd, POLLIN, 0});
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(h.deadline - now).count() + 1;
      timeout = timeout < 0 ? static_cast<int>(std::max<long>(left, 0))
                            : std::min(timeout, static_cast<int>(std::max<long>(left, 0)));
    }
    if (poll(pf.data(), pf.size(), timeout) < 0 && errno != EINTR) break;
    if (stopping_.load(std::memory_order_acquire) || (pf[0].revents & POLLIN)) break;
    // Hellos in progress: read what is there; a complete one is served, a dead or late one
    // closed.
    const auto t = std::chrono::steady_clock::now();
    for (std::size_t i = 0, k = 2; i < half.size(); ++k) {
      HalfOpen& h = half[i];
      bool done = false, bad = false, other_version = false;
      if (pf[k].revents) {
        const ssize_t n = recv(h.fd, h.buf.data() + h.got, h.buf.size() - h.got, MSG_DONTWAIT);
        if (n > 0) {
          const bool had_head = h.got >= OobGreeting::kHead;
          h.got += static_cast<std::size_t>(n);
          done = h.got == h.buf.size();
          // Magic and version come first: another version's hello (or junk) is closed as soon
          // as they are in, not at the hello's deadline (an older peer may send a shorter one).
          if (!had_head && h.got >= OobGreeting::kHead && OobGreeting::check_head(h.buf)) {
            std::uint32_t magic;
            std::memcpy(&magic, h.buf.data(), 4);
            other_version = magic == OobHello::kMagic;
            done = false;
            bad = true;
          }
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          bad = true;
        }
      }
      if (!done && !bad && t >= h.deadline) bad = true;
      if (done) {
        if (!serve_hello(h.fd, h.buf, h.nonce)) close(h.fd);  // else a set-up thread's
      } else if (bad) {
        refuse(h, other_version);
      } else {
        ++i;
        continue;
      }
      half.erase(half.begin() + static_cast<std::ptrdiff_t>(i));
    }
    reap_setups(false);
    if (!(pf[1].revents & POLLIN)) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of fds (EMFILE, ENFILE): the pending connection stays readable, so stop
      // listening for a moment instead of spinning on it.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_pause = t + std::chrono::milliseconds(100);
      continue;
    }
    if (half.size() >= kMaxHalfOpen) {  // the oldest half-open hello makes room
      refuse(half.front());
      half.pop_front();
    }
    HalfOpen ho{fd, t + std::chrono::milliseconds(kHelloDeadlineMs)};
    const std::uint64_t n0 = random_token(), n1 = random_token();
    std::memcpy(ho.nonce.data(), &n0, 8);
    std::memcpy(ho.nonce.data() + 8, &n1, 8);
    // 24 bytes into a fresh socket's empty buffer: never blocks.
    const auto greeting = OobGreeting::encode(ho.nonce);
    if (send(fd, greeting.data(), greeting.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
        static_cast<ssize_t>(greeting.size())) {
      refuse(ho);
      continue;
    }
    half.push_back(ho);
  }
  for (HalfOpen& h : half) close(h.fd);
  reap_setups(true);  // before stop() destroys the QPs they work on
}

void Tm::reap_setups(bool all) {
  for (auto it = setup_threads_.begin(); it != setup_threads_.end();) {
    if (all || it->second->load(std::memory_order_acquire)) {
      it->first.join();
      it = setup_threads_.erase(it);
    } else {
      ++it;
    }
  }
}

// The checks, on the listener's thread: nothing is spent on a hello they refuse. The QP
// transitions of an accepted one run on a thread of their own (finish_setup), so that an
// address nobody answers ARP for holds up no one else's hello. True: `fd` is that thread's.
bool Tm::serve_hello(int fd, std::span<const std::uint8_t> bytes, const OobNonce& nonce) {
  const auto h = OobHello::decode(bytes);
  if (!h) {  // not one of ours: nothing to answer
    std::lock_guard<std::mutex> g(mu_);
    ++stats_.hellos_refused;
    return false;
  }
  OobHello r;
  EndPoint src;
  const auto& key = dom_.options().oob_key;
  // Without the domains' shared key nothing else is looked at.
  r.status =
      !hello_tag_ok(*h, nonce, key) ? EACCES : check_hello(*h, ep_, !dom_.options().nid, src);
  std::shared_ptr<Conn> c;
  if (r.status == 0) {
    std::lock_guard<std::mutex> g(mu_);
    // A hello from a peer we have a connection with, while we are not connecting to it
    // ourselves (that would be a simultaneous connect): the peer no longer has its end (it
    // restarted with the same address, or released it). Its old connections are dead: release
    // them, and the hello gets a fresh one.
    // A connection that carried something stays until the fresh one has received something;
    // an earlier fresh one that has not goes now (one at most per peer).
    auto old = conns_.find(src);
    bool unproven = false;
    if (old != conns_.end() && old->second->state != Conn::State::kConnecting) {
      unproven = old->second->state == Conn::State::kUp && old->second->used;
      std::vector<std::shared_ptr<Conn>> dead;
      if (!unproven) dead.push_back(old->second);
      for (const auto& k : parked_)
        if (k->peer == src && (!unproven || k->unproven)) dead.push_back(k);
      for (const auto& k : dead) close_conn_locked(k, false);
    }
    std::size_t with_peer = 0, in_subnet = 0;
    for (const auto& [ep, k] : conns_)
      if (ep == src && k->state != Conn::State::kFailed) ++with_peer;
    for (const auto& k : parked_)
      if (k->peer == src && k->qp && k->state == Conn::State::kUp) ++with_peer;
    for (const EndPoint& e : setups_) {
      if (e == src) ++with_peer;
      if ((e.ip.v >> 8) == (src.ip.v >> 8)) ++in_subnet;
    }
    if (with_peer >= kMaxConnsPerPeer) {
      r.status = EBUSY;
    } else if (setups_.size() >= kMaxSetups || in_subnet >= kMaxSetupsPerSubnet) {
      r.status = EAGAIN;  // set-ups waiting for addresses: try again later
    } else {
      c = make_conn();
      if (!c) {
        r.status = errno ? errno : ENOMEM;
      } else {
        c->unproven = unproven;
        setups_.push_back(src);
      }
    }
  }
  if (c) {
    c->peer = src;
    auto done = std::make_shared<std::atomic<bool>>(false);
    try {
      std::thread t([this, fd, h = *h, c, nonce, src, done] {
        finish_setup(fd, h, c, nonce, src);
        close(fd);
        done->store(true, std::memory_order_release);
      });
      setup_threads_.emplace_back(std::move(t), std::move(done));
      return true;
    } catch (const std::system_error&) {  // no thread: as if over the bound
      std::lock_guard<std::mutex> g(mu_);
      unmake_conn_locked(*c);
      setups_.erase(std::find(setups_.begin(), setups_.end(), src));
      r.status = EAGAIN;
    }
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    ++stats_.hellos_refused;
  }
  send_reply(fd, r, src, nonce);
  return false;
}

void Tm::send_reply(int fd, OobHello& r, const EndPoint& src, const OobNonce& nonce) {
  put_str(r.src, ep_.str());
  put_str(r.dst, r.status == 0 ? src.str() : std::string());
  std::memcpy(r.gid, dom_.ctx().port().gid.b.data(), 16);
  sign_hello(r, nonce, dom_.options().oob_key);
  io_all(fd, &r, sizeof r, true, Clock::now() + std::chrono::seconds(1));
}

// A set-up thread: the QP transitions towards the hello's QPs (an address resolution may take
// a while; no Tm lock is held across them: the connection is not known to anyone until it is
// registered below), then the reply.
void Tm::finish_setup(int fd, const OobHello& h, std::shared_ptr<Conn> c, const OobNonce& nonce,
                      const EndPoint& src) {
  OobHello r;
  std::mt19937 rng(std::random_device{}());
  r.psn = rng() & 0xFFFFFF;
  r.cpsn = rng() & 0xFFFFFF;
  client::RcPeer p;
  std::memcpy(p.gid.b.data(), h.gid, 16);
  const client::Mtu mtu = dom_.ctx().port().max_mtu;
  p.qpn = h.qpn;
  p.psn = h.psn;
  int rc = dom_.ctx().connect_rc(c->qp, p, r.psn, mtu);
  p.qpn = h.cqpn;
  p.psn = h.cpsn;
  if (rc == 0) rc = dom_.ctx().connect_rc(c->cqp, p, r.cpsn, mtu);
  if (rc == 0) post_ctl_recvs(*c);
  r.status = rc;
  r.qpn = c->qp->qp_num;
  r.cqpn = c->cqp->qp_num;
  {
    std::lock_guard<std::mutex> g(mu_);
    setups_.erase(std::find(setups_.begin(), setups_.end(), src));
    if (rc != 0) {
      unmake_conn_locked(*c);
      ++stats_.hellos_refused;
    } else {
      by_qpn_[c->qp->qp_num] = c.get();
      by_qpn_[c->cqp->qp_num] = c.get();
      c->state = Conn::State::kUp;
      ++stats_.connections;
      // Both ends may have connected at once: keep the first, the other stays known by
      // its QP numbers (its messages still arrive and are attributed to the peer).
      if (!conns_.count(src)) {
        conns_[src] = c;
        c->unproven = false;
      } else {
        parked_.push_back(c);
      }
    }
  }
  send_reply(fd, r, src, nonce);
}

// ---- operations
// -----------------------------------------------------------------------------------

namespace {

/// SGEs covering [off, off + len) of the buffer vector (at most 4).
bool carve(const NetBuffer& nb, std::uint64_t off, std::uint64_t len,
           std::vector<client::Sge>& out) {
  out.clear();
  for (std::size_t i = 0; i < nb.segs.size() && len != 0; ++i) {
    const Segment& s = nb.segs[i];
    if (off >= s.length) {
      off -= s.length;
      continue;
    }
    const std::uint64_t k = std::min(len, s.length - off);
    out.push_back(client::Sge{reinterpret_cast<std::uint64_t>(s.addr) + off,
                              static_cast<std::uint32_t>(k), nb.impl->mrs[i]->lkey});
    len -= k;
    off = 0;
  }
  return len == 0 && out.size() <= 4;
}

}  // namespace

void Tm::start_op_locked(NetBuffer& nb, Conn& c, std::vector<BufferEvent>& evs) {
  client::Context& ctx = dom_.ctx();
  c.used = true;
  c.last_use = Clock::now();
  nb.impl->conn = &c;
  std::vector<client::Sge> sges;
  if (nb.queue == QueueType::kMsgSend) {
    const std::uint64_t len = nb.length ? nb.length : nb.capacity();
    carve(nb, 0, len, sges);
    client::SendWr wr;
    wr.wr_id = tag(kTagBuf, next_wr_++);
    wr.opcode = client::WrOpcode::kSend;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<std::uint32_t>(sges.size());
    wr.send_flags = verbs::kSendSignaled;
    nb.impl->wr_ids = {wr.wr_id};
    nb.impl->bulk_len = len;
    by_wr_[wr.wr_id] = &nb;
    nb.flags |= kBufInProgress;
    if (const int rc = ctx.post_send(c.qp, &wr, nullptr)) {
      by_wr_.erase(wr.wr_id);
      finish_locked(nb, -rc, evs);
    } else {
      ++c.inflight;
    }
    ++stats_.msgs_sent;
  } else {  // active bulk: one RDMA work request per segment of the passive buffer
    const auto d = BulkDesc::decode(nb.desc);
    const bool read = nb.queue == QueueType::kActiveBulkRecv;
    std::uint64_t remote_total = 0;
    for (const auto& s : d->segs) remote_total += s.length;
    const std::uint64_t total =
        read ? std::min(remote_total, nb.capacity()) : (nb.length ? nb.length : nb.capacity());
    nb.impl->bulk_token = d->token;
    nb.impl->bulk_len = total;
    nb.impl->peer = d->owner;
    nb.impl->ops_left = 0;
    nb.impl->wr_ids.clear();
    nb.flags |= kBufInProgress;
    std::uint64_t off = 0;
    for (const auto& s : d->segs) {
      if (off == total) break;
      const std::uint64_t k = std::min<std::uint64_t>(s.length, total - off);
      if (!carve(nb, off, k, sges)) {
        nb.impl->bulk_failed = true;
        break;
      }
      client::SendWr wr;
      wr.wr_id = tag(kTagBuf, next_wr_++);
      wr.opcode = read ? client::WrOpcode::kRead : client::WrOpcode::kWrite;
      wr.sg_list = sges.data();
      wr.num_sge = static_cast<std::uint32_t>(sges.size());
      wr.send_flags = verbs::kSendSignaled;
      wr.rdma.remote_addr = s.iova;
      wr.rdma.rkey = s.rkey;
      if (ctx.post_send(c.qp, &wr, nullptr) != 0) {
        nb.impl->bulk_failed = true;
        break;
      }
      by_wr_[wr.wr_id] = &nb;
      nb.impl->wr_ids.push_back(wr.wr_id);
      ++nb.impl->ops_left;
      ++c.inflight;
      off += k;
    }
    ++stats_.bulk_ops;
    if (nb.impl->ops_left == 0) finish_locked(nb, -EIO, evs);
  }
}

int Tm::add(NetBuffer& nb, QueueType q) {
  if (state() != TmState::kStarted) return ENOTCONN;
  if (!(nb.flags & kBufRegistered) || (nb.flags & kBufQueued) || !nb.impl ||
      q >= QueueType::kCount_)
    return EINVAL;
  if (nb.deadline && *nb.deadline <= std::chrono::steady_clock::now()) return ETIMEDOUT;
  std::optional<EndPoint> target;
  switch (q) {
    case QueueType::kMsgRecv:
      if (nb.min_receive_size > nb.capacity()) return EINVAL;
      break;
    case QueueType::kMsgSend:
      if (!nb.ep || !nb.ep->tmid) return EINVAL;
      if (nb.length > nb.capacity()) return EMSGSIZE;
      target = nb.ep;
      break;
    case QueueType::kPassiveBulkRecv:
    case QueueType::kPassiveBulkSend:
      break;
    case QueueType::kActiveBulkRecv:
    case QueueType::kActiveBulkSend: {
      const auto d = BulkDesc::decode(nb.desc);
      // An active receive reads a passive send buffer; an active send writes a passive receive.
      if (!d || d->kind != (q == QueueType::kActiveBulkRecv ? QueueType::kPassiveBulkSend
                                                            : QueueType::kPassiveBulkRecv))
        return EINVAL;
      std::uint64_t remote = 0;
      for (const auto& s : d->segs) remote += s.length;
      if (q == QueueType::kActiveBulkSend && (nb.length ? nb.length : nb.capacity()) > remote)
        return EMSGSIZE;
      target = d->owner;
      break;
    }
    case QueueType::kCount_:
      return EINVAL;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    nb.queue = q;
    nb.tm = this;
    nb.flags &= ~(kBufCancelled | kBufTimedOut | kBufInProgress);
    nb.impl->bulk_failed = false;
    if (q == QueueType::kMsgRecv) {
      if (!post_recv_locked(nb)) return EIO;
    } else if (q == QueueType::kPassiveBulkRecv || q == QueueType::kPassiveBulkSend) {
      // The descriptor: a fresh MR per segment with remote access for this operation only
      // (deregistered when it ends, so a late or cancelled peer finds no rkey).
      BulkDesc d;
      d.kind = q;
      d.owner = ep_;
      do d.token = random_token();
      while (passive_.count(d.token));
      const std::uint32_t access =
          verbs::kAccessLocalWrite |
          (q == QueueType::kPassiveBulkRecv ? verbs::kAccessRemoteWrite : verbs::kAccessRemoteRead);
      for (const Segment& s : nb.segs) {
        client::Mr* mr = dom_.ctx().reg_mr(dom_.pd(), s.addr, s.length, access);
        if (!mr) {
          for (client::Mr* m : nb.impl->bulk_mrs) dom_.ctx().dereg_mr(m);
          nb.impl->bulk_mrs.clear();
          return errno ? errno : ENOMEM;
        }
        nb.impl->bulk_mrs.push_back(mr);
        d.segs.push_back(BulkDesc::Seg{mr->iova, mr->rkey, static_cast<std::uint32_t>(s.length)});
      }
      nb.impl->bulk_token = d.token;
      nb.impl->allowed = nb.ep;
      nb.desc = d.encode();
      passive_[d.token] = &nb;
    }
    nb.flags |= kBufQueued;
    queues_[static_cast<int>(q)].push_back(&nb);
    nb.impl->add_time = Clock::now();
    ++qstats_[static_cast<int>(q)].adds;
    // The operation references its peer's end point until its event is posted.
    nb.impl->ref_ep = target ? target
                      : (q == QueueType::kPassiveBulkRecv || q == QueueType::kPassiveBulkSend)
                          ? nb.ep
                          : std::nullopt;
    if (nb.impl->ref_ep) ep_ref_locked(*nb.impl->ref_ep, +1);
  }
  if (!target) return 0;
  // Operations towards a peer go on its connection, set up now if this is the first.
  std::vector<BufferEvent> evs;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = conns_.find(*target);
    if (it != conns_.end()) {
      if (it->second->state == Conn::State::kConnecting)
        it->second->waiting.push_back(&nb);
      else
        start_op_locked(nb, *it->second, evs);
      target.reset();
    }
  }
  if (target) conn_for(*target, nb);
  queue_events(evs);
  return 0;
}

bool Tm::post_recv_locked(NetBuffer& nb) {
  std::vector<client::Sge> sges;
  carve(nb, 0, nb.capacity(), sges);
  client::RecvWr wr;
  wr.wr_id = tag(kTagBuf, next_wr_++);
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<std::uint32_t>(sges.size());
  // nb_min_receive_size: 0 means one message (the seed forbids 0 and has all other users set it
  // to the buffer length, which is the same thing).
  if (nb.min_receive_size != 0 && nb.min_receive_size < nb.capacity()) {
    wr.min_free = static_cast<std::uint32_t>(nb.min_receive_size);
    wr.max_msgs = nb.max_receive_msgs;
  }
  if (dom_.ctx().post_srq_recv(srq_, &wr, nullptr) != 0) return false;
  by_wr_[wr.wr_id] = &nb;
  nb.impl->wr_ids = {wr.wr_id};
  nb.impl->posted = true;
  return true;
}

void Tm::finish_locked(NetBuffer& nb, int status, std::vector<BufferEvent>& out,
                       std::uint64_t length) {
  auto& q = queues_[static_cast<int>(nb.queue)];
  q.remove(&nb);
  for (const std::uint64_t w : nb.impl->wr_ids) by_wr_.erase(w);
  nb.impl->wr_ids.clear();
  nb.impl->posted = false;
  if (nb.queue == QueueType::kPassiveBulkRecv || nb.queue == QueueType::kPassiveBulkSend) {
    passive_.erase(nb.impl->bulk_token);
    for (client::Mr* m : nb.impl->bulk_mrs) dom_.ctx().dereg_mr(m);
    nb.impl->bulk_mrs.clear();
  }
  nb.flags &= ~kBufInProgress;
  if (nb.impl->ref_ep) {
    ep_ref_locked(*nb.impl->ref_ep, -1);
    nb.impl->ref_ep.reset();
  }
  nb.impl->conn = nullptr;
  BufferEvent ev;
  ev.buf = &nb;
  ev.queue = nb.queue;
  ev.status = status;
  ev.length = length;
  out.push_back(ev);
}

void Tm::send_ctl_locked(Conn& c, std::uint64_t token, std::uint64_t length, int status,
                         std::uint64_t what) {
  if (c.cqp == nullptr) return;  // a foreign peer: no bulk transfers
  auto* slot = static_cast<std::uint8_t*>(ctl_buf_->addr) +
               (c.slot0 + kCtlRecvSlots + c.send_next++ % kCtlSendSlots) * kCtlSlot;
  CtlMsg m;
  m.token = token;
  m.length = length;
  m.status = status;
  m.encode(slot);
  client::Sge sge{reinterpret_cast<std::uint64_t>(slot), CtlMsg::kSize, ctl_mr_->lkey};
  client::SendWr wr;
  wr.wr_id = tag(kTagCtlSend, what);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = verbs::kSendSignaled;
  dom_.ctx().post_send(c.cqp, &wr, nullptr);
}

void Tm::handle_wc(const client::Wc& wc, std::vector<BufferEvent>& out) {
  std::lock_guard<std::mutex> g(mu_);
  const std::uint64_t kind = wc.wr_id >> kTagShift;
  auto ci = by_qpn_.find(wc.qp_num);
  Conn* c = ci == by_qpn_.end() ? nullptr : ci->second;
  if (c) {
    c->used = true;
    c->last_use = Clock::now();
  }
  if (kind == kTagCtlSend) {
    if (c && (wc.wr_id & ((1ull << kTagShift) - 1)) == kCtlBye) c->bye_done = true;
    return;
  }
  if (kind == kTagCtlRecv) {
    if (wc.status != client::WcStatus::kSuccess || !c) return;
    const std::uint64_t slot = wc.wr_id & ((1ull << kTagShift) - 1);
    auto* p = static_cast<std::uint8_t*>(ctl_buf_->addr) + slot * kCtlSlot;
    const auto bye = CtlMsg::decode({p, std::min<std::size_t>(wc.byte_len, kCtlSlot)});
    if (bye && bye->token == 0) {  // the peer's goodbye: its end is gone, ours goes too
      if (auto sp = conn_ptr_locked(c)) close_conn_locked(sp, false);
      return;
    }
    if (c->unproven) supersede_locked(*c);
    // The passive buffer's operation is over: the active side moved the data. A message
    // for a buffer no longer there (cancelled, timed out) or a token never handed out finds
    // nothing; a token of a buffer bound to another peer, or a length beyond the buffer, is
    // refused. Either way the buffer of another transfer is left alone.
    const auto m = CtlMsg::decode({p, std::min<std::size_t>(wc.byte_len, kCtlSlot)});
    auto it = m ? passive_.find(m->token) : passive_.end();
    PassiveEntry pe;
    if (it != passive_.end())
      pe = PassiveEntry{it->second, it->second->impl->allowed, it->second->capacity()};
    const CtlVerdict v =
        m ? judge_ctl(*m, it != passive_.end() ? &pe : nullptr, c->peer) : CtlVerdict::kUnknown;
    if (v == CtlVerdict::kUnknown) ++stats_.ctl_dropped;
    if (v == CtlVerdict::kWrongPeer || v == CtlVerdict::kTooLong) ++stats_.ctl_refused;
    if (v == CtlVerdict::kComplete) {
      NetBuffer& nb = *it->second;
      const int st = nb.flags & kBufCancelled  ? -ECANCELED
                     : nb.flags & kBufTimedOut ? -ETIMEDOUT
                                               : (m->status ? -EIO : 0);
      finish_locked(nb, st, out, m->length);
    }
    client::Sge sge{reinterpret_cast<std::uint64_t>(p), kCtlSlot, ctl_mr_->lkey};
    client::RecvWr wr;
    wr.wr_id = wc.wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    dom_.ctx().post_recv(c->cqp, &wr, nullptr);
    return;
  }
  auto bi = by_wr_.find(wc.wr_id);
  if (bi == by_wr_.end()) return;
  NetBuffer& nb = *bi->second;
  const bool ok = wc.status == client::WcStatus::kSuccess;
  if (c && nb.queue != QueueType::kMsgRecv && c->inflight != 0) --c->inflight;
  if (!ok && c && nb.queue != QueueType::kMsgRecv && c->state == Conn::State::kUp) {
    // The connection broke (the peer vanished, retries exhausted): release it, so that the
    // next operation towards that address connects afresh.
    if (auto sp = conn_ptr_locked(c)) close_conn_locked(sp, false);
  }
  const int cancel = nb.flags & kBufCancelled  ? -ECANCELED
                     : nb.flags & kBufTimedOut ? -ETIMEDOUT
                                               : 0;
  switch (nb.queue) {
    case QueueType::kMsgRecv: {
      const bool still = ok && (wc.wc_flags & verbs::kWcStillQueued);
      if (!ok) {
        finish_locked(nb, cancel ? cancel : stopping_.load() ? -ECANCELED : -EIO, out);
        return;
      }
      // A message into a buffer whose del() or deadline had not taken effect (the buffer was
      // still the engine's): the operation completed first, as Motr allows for
      // m0_net_buffer_del, so the message is delivered, never dropped.
      if (cancel) ++stats_.late_cancel_delivered;
      if (c && c->unproven) supersede_locked(*c);
      ++stats_.msgs_received;
      stats_.bytes_received += wc.byte_len;
      BufferEvent ev;
      if (!still) {
        finish_locked(nb, 0, out, wc.byte_len);
      } else {
        ev.buf = &nb;
        ev.queue = nb.queue;
        ev.length = wc.byte_len;
        out.push_back(ev);
      }
      BufferEvent& e = out.back();
      e.offset = wc.offset;
      e.keep_queued = still;
      if (c) e.ep = c->peer;
      return;
    }
    case QueueType::kMsgSend:
      finish_locked(nb, cancel ? cancel : ok ? 0 : -EIO, out, ok ? nb.impl->bulk_len : 0);
      return;
    case QueueType::kActiveBulkRecv:
    case QueueType::kActiveBulkSend: {
      by_wr_.erase(bi);
      if (!ok) nb.impl->bulk_failed = true;
      if (--nb.impl->ops_left != 0) return;
      // Every RDMA work request is done: tell the passive side (control QP), then complete.
      auto pc = conns_.find(*nb.impl->peer);
      if (pc != conns_.end())
        send_ctl_locked(*pc->second, nb.impl->bulk_token, nb.impl->bulk_len,
                        nb.impl->bulk_failed ? EIO : 0);
      finish_locked(nb, nb.impl->bulk_failed ? -EIO : cancel, out,
                    nb.impl->bulk_failed ? 0 : nb.impl->bulk_len);
      return;
    }
    default:
      return;
  }
}

void Tm::check_deadlines(std::vector<BufferEvent>& out) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> g(mu_);
  for (auto& q : queues_) {
    for (auto it = q.begin(); it != q.end();) {
      NetBuffer& nb = **it++;  // finish_locked removes nb from q
      if (!nb.deadline || *nb.deadline > now || (nb.flags & (kBufTimedOut | kBufCancelled)))
        continue;
      nb.flags |= kBufTimedOut;
      // On the wire (an RDMA or SEND in flight, a receive buffer in the SRQ): the status is
      // applied when the engine gives the buffer back. Otherwise it ends now.
      if (!(nb.flags & kBufInProgress) && !nb.impl->posted) finish_locked(nb, -ETIMEDOUT, out);
    }
  }
}

int Tm::del(NetBuffer& nb) {
  std::vector<BufferEvent> evs;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (nb.tm != this || !(nb.flags & kBufQueued)) return EINVAL;
    if (nb.flags & (kBufCancelled | kBufTimedOut)) return 0;
    nb.flags |= kBufCancelled;
    ++qstats_[static_cast<int>(nb.queue)].dels;
    bool waiting = false;
    for (auto& [ep, c] : conns_)
      if (std::erase(c->waiting, &nb)) waiting = true;
    if (waiting || (!(nb.flags & kBufInProgress) && !nb.impl->posted))
      finish_locked(nb, -ECANCELED, evs);
  }
  queue_events(evs);
  return 0;
}

// ---- event delivery
// -------------------------------------------------------------------------------

void Tm::queue_events(std::vector<BufferEvent>& evs, bool event_thread) {
  if (evs.empty()) return;
  if (!sync_ && event_thread) {  // asynchronous delivery: post here, on the (confined) thread
    drain_pending();             // what other threads queued comes first
    for (const BufferEvent& e : evs) buffer_event_post(e);
    evs.clear();
    return;
  }
  // Synchronous delivery, or an event that arose on an application thread (an add() whose
  // connection failed): kept for deliver_all(), or for the event thread's next pass, so that
  // callbacks never run on a thread the application did not choose.
  int fd = -1;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const BufferEvent& e : evs) pending_.push_back(e);
    npending_.store(pending_.size(), std::memory_order_release);
    if (sync_) std::swap(fd, notify_fd_);  // one signal per notify() call
  }
  evs.clear();
  if (fd >= 0) {
    const std::uint64_t one = 1;
    (void)!write(fd, &one, sizeof one);
  }
}

// m0_net_buffer_event_post: re-provision the receive queue from the pool first, then clear the
// QUEUED flag (unless the transport says the buffer stays queued) and call the application.
// No Tm lock is held across the callback.
void Tm::buffer_event_post(const BufferEvent& ev) {
  BufferCallback cb;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (ev.queue == QueueType::kMsgRecv && pool_ && state() == TmState::kStarted)
      reprovision_locked();
    account_event_locked(ev);
    if (!ev.keep_queued) ev.buf->flags &= ~kBufQueued;
    // Cleared before the callback, as m0_net_buffer_event_post does (the status says it).
    ev.buf->flags &= ~(kBufCancelled | kBufTimedOut);
    cb = ev.buf->cb;
    // The sender of a received message is referenced while the callback runs.
    if (ev.ep) ep_ref_locked(*ev.ep, +1);
  }
  if (cb) cb(ev);
  if (ev.ep) {
    std::lock_guard<std::mutex> g(mu_);
    ep_ref_locked(*ev.ep, -1);
  }
}

void Tm::account_event_locked(const BufferEvent& ev) {
  if (ev.queue >= QueueType::kCount_) return;
  QueueStats& q = qstats_[static_cast<int>(ev.queue)];
  if (ev.status == 0) {
    ++q.successes;
    q.bytes += ev.length;
    q.max_bytes = std::max(q.max_bytes, ev.length);
  } else {
    ++q.failures;
  }
  if (!ev.keep_queued && ev.buf && ev.buf->impl) {
    const auto d = Clock::now() - ev.buf->impl->add_time;
    q.time_in_queue_ns += static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
  }
}

void Tm::reprovision_locked() {
  auto& q = queues_[static_cast<int>(QueueType::kMsgRecv)];
  while (q.size() < min_length_) {
    NetBuffer* nb = pool_->get(colour_);  // the coloured get
    if (!nb) {  // Motr counts the buffers it could not provision as receive failures
      qstats_[static_cast<int>(QueueType::kMsgRecv)].failures += min_length_ - q.size();
      break;
    }
    nb->cb = pool_cb_;
    nb->queue = QueueType::kMsgRecv;
    nb->tm = this;
    nb->flags &= ~(kBufCancelled | kBufTimedOut | kBufInProgress);
    nb->deadline.reset();
    if (!post_recv_locked(*nb)) {
      pool_->put(nb);
      break;
    }
    nb->flags |= kBufQueued;
    q.push_back(nb);
    nb->impl->add_time = Clock::now();
    ++qstats_[static_cast<int>(QueueType::kMsgRecv)].adds;
    ++stats_.provisioned;
  }
  const std::uint32_t len = static_cast<std::uint32_t>(q.size());
  deficit_.store(len < min_length_ ? min_length_ - len : 0, std::memory_order_release);
}

void Tm::provision_from_pool() {
  std::lock_guard<std::mutex> g(mu_);
  if (state() == TmState::kStarted && pool_) reprovision_locked();
}

bool Tm::pending() const {
  // Asynchronous delivery never signals pending events (as the seed's transports without
  // synchronous delivery): the event thread delivers them.
  return sync_ && npending_.load(std::memory_order_acquire) != 0;
}

void Tm::deliver_all() {
  if (sync_) drain_pending();
}

void Tm::drain_pending() {
  for (;;) {
    BufferEvent ev;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (pending_.empty()) return;
      ev = pending_.front();
      pending_.pop_front();
      npending_.store(pending_.size(), std::memory_order_release);
    }
    buffer_event_post(ev);  // the lock is not held across the post
  }
}

void Tm::notify(int efd) {
  bool now = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!pending_.empty())
      now = true;
    else
      notify_fd_ = efd;  // the event thread signals when it queues the next event
  }
  if (now) {
    const std::uint64_t one = 1;
    (void)!write(efd, &one, sizeof one);
  }
}

void Tm::event_loop() {
  if (!cpus_.empty()) {  // m0_net_tm_confine: callbacks only on these processors
    cpu_set_t set;
    CPU_ZERO(&set);
    for (const int c : cpus_) CPU_SET(c, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  std::vector<BufferEvent> evs;
  client::Wc wc[32];
  auto failed = [&](int status) {
    std::vector<NetBuffer*> to_pool;
    {
      std::lock_guard<std::mutex> g(mu_);
      take_pool_buffers_locked(to_pool);
    }
    state_.store(TmState::kFailed, std::memory_order_release);
    // [State]: pool buffers back in their pool before the state change is told.
    for (NetBuffer* nb : to_pool) pool_->put(nb);
    TmEvent te;
    te.next_state = TmState::kFailed;
    te.status = status;
    emit(te);
  };
  while (!stopping_.load(std::memory_order_acquire)) {
    // roced gone (nothing will touch the buffers any more), or the CQ overran (completions
    // were lost: no queue can be trusted): the Tm has failed.
    if (const int f = fail_status_.load(std::memory_order_acquire)) return failed(f);
    const int w = dom_.ctx().wait_cq(cq_, kPollMs);
    if (w == ENOTCONN) return failed(-ENOTCONN);
    const int n = dom_.ctx().poll_cq(cq_, 32, wc);
    if (n == -ENOTCONN) return failed(-ENOTCONN);
    if (n < 0) return failed(n);  // the CQ is in error (an overrun)
    for (int i = 0; i < n; ++i) handle_wc(wc[i], evs);
    check_deadlines(evs);
    std::vector<TmEvent> tevs;
    {
      std::lock_guard<std::mutex> g(mu_);
      reap_closing_locked(false);
      tevs.swap(tm_events_);
    }
    queue_events(evs, true);
    if (!sync_ && npending_.load(std::memory_order_acquire) != 0) drain_pending();
    for (const TmEvent& te : tevs) emit(te);
  }
}

void Tm::fail(int status) {
  int expected = 0;
  fail_status_.compare_exchange_strong(expected, status, std::memory_order_acq_rel);
  std::lock_guard<std::mutex> g(mu_);
  ++stats_.async_errors;
}

// A QP of one of our connections went to the error state: the peer is gone. The connection is
// released and the error told on the event thread (a callback may stop the Tm).
bool Tm::async_qp_error(std::uint32_t qpn) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_qpn_.find(qpn);
  if (it == by_qpn_.end()) return false;
  ++stats_.async_errors;
  if (auto c = conn_ptr_locked(it->second)) {
    TmEvent te;
    te.type = TmEvent::Type::kError;
    te.status = -EIO;
    te.ep = c->peer;
    tm_events_.push_back(te);
    close_conn_locked(c, false);
  }
  return true;
}

void Tm::emit(const TmEvent& ev) {
  if (ev.type == TmEvent::Type::kStateChange && state_cb_) state_cb_(ev.next_state);
  if (event_cb_) event_cb_(ev);
}

void Tm::ep_ref_locked(const EndPoint& ep, int delta) {
  auto it = ep_refs_.find(ep);
  if (delta > 0) {
    if (it == ep_refs_.end()) it = ep_refs_.emplace(ep, 0).first;
    it->second += static_cast<std::uint32_t>(delta);
    return;
  }
  if (it == ep_refs_.end()) return;
  const auto d = static_cast<std::uint32_t>(-delta);
  it->second = it->second > d ? it->second - d : 0;
  if (it->second == 0) ep_refs_.erase(it);  // the end point is released
}

int Tm::end_point_create(const std::string& addr, EndPoint& out) {
  if (state() != TmState::kStarted) return ENOTCONN;
  auto ep = EndPoint::parse(addr);
  if (!ep || !ep->tmid) return EINVAL;
  std::lock_guard<std::mutex> g(mu_);
  ep_ref_locked(*ep, +1);
  out = *ep;
  return 0;
}

int Tm::end_point_get(const EndPoint& ep) {
  std::lock_guard<std::mutex> g(mu_);
  if (!ep_refs_.count(ep)) return EINVAL;
  ep_ref_locked(ep, +1);
  return 0;
}

int Tm::end_point_put(const EndPoint& ep) {
  std::lock_guard<std::mutex> g(mu_);
  if (!ep_refs_.count(ep)) return EINVAL;
  ep_ref_locked(ep, -1);
  return 0;
}

std::uint32_t Tm::end_point_refs(const EndPoint& ep) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = ep_refs_.find(ep);
  return it == ep_refs_.end() ? 0 : it->second;
}

bool Tm::connected_to(const EndPoint& ep) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = conns_.find(ep);
  return it != conns_.end() && it->second->state == Conn::State::kUp;
}

int Tm::qstats(QueueType q, QueueStats* out, bool reset) {
  if (q > QueueType::kCount_) return EINVAL;
  std::lock_guard<std::mutex> g(mu_);
  const int lo = q == QueueType::kCount_ ? 0 : static_cast<int>(q);
  const int hi = q == QueueType::kCount_ ? static_cast<int>(QueueType::kCount_) : lo + 1;
  for (int i = lo; i < hi; ++i) {
    if (out) out[i - lo] = qstats_[i];
    if (reset) qstats_[i] = QueueStats{};
  }
  return 0;
}

// ---- life cycle
// -----------------------------------------------------------------------------------

Tm::Tm(Domain& dom) : dom_(dom) {
  static std::atomic<std::uint64_t> next_colour{1};
  colour_ = next_colour.fetch_add(1);
}

Tm::~Tm() {
  if (state() == TmState::kStarted || state() == TmState::kFailed) stop();
}

int Tm::confine(const std::vector<int>& cpus) {
  if (state() != TmState::kInitialized || cpus.empty()) return EINVAL;
  for (const int c : cpus)
    if (c < 0 || c >= CPU_SETSIZE) return EINVAL;
  cpus_ = cpus;
  return 0;
}

int Tm::deliver_synchronously() {
  if (state() != TmState::kInitialized) return EINVAL;
  sync_ = true;
  return 0;
}

int Tm::pool_attach(BufferPool& pool, BufferCallback cb, std::uint32_t min_length) {
  if (state() != TmState::kInitialized || pool_ || &pool.domain() != &dom_ || min_length == 0)
    return EINVAL;
  pool_ = &pool;
  pool_cb_ = std::move(cb);
  min_length_ = min_length;
  return 0;
}

int Tm::pool_length_set(std::uint32_t min_length) {
  if (!pool_ || min_length == 0) return EINVAL;
  std::lock_guard<std::mutex> g(mu_);
  min_length_ = min_length;
  if (state() == TmState::kStarted) reprovision_locked();
  return 0;
}

int Tm::start(const std::string& addr) {
  if (state() != TmState::kInitialized) return EINVAL;
  auto ep = EndPoint::parse(addr);
  if (!ep || ep->ip != dom_.nid() || ep->pid != dom_.options().pid) return EINVAL;
  // The listener's port is the address's reservation on this host; "*" takes the highest free
  // TMID ([r.m0.net.xprt.lnet.dynamic-address-assignment]: "from higher numbers downward").
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc = EADDRINUSE;
  for (int t = static_cast<int>(ep->tmid.value_or(kMaxTmid)); t >= 0; --t) {
    EndPoint cand = *ep;
    cand.tmid = static_cast<std::uint32_t>(t);
    const auto [host, port] = dom_.oob_locate(cand);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
      rc = EINVAL;
      break;
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      ep_ = cand;
      rc = 0;
      break;
    }
    rc = errno;
    if (ep->tmid || rc != EADDRINUSE) break;  // a fixed TMID has no second choice
  }
  if (rc == 0 && listen(fd, 16) != 0) rc = errno;
  if (rc != 0) {
    close(fd);
    return rc;
  }
  listen_fd_ = fd;
  client::Context& ctx = dom_.ctx();
  cq_ = ctx.create_cq(kCqDepth);
  srq_ = cq_ ? ctx.create_srq(dom_.pd(), 256, 4) : nullptr;
  ctl_buf_ = srq_ ? ctx.alloc_buffer(kCtlBytes) : nullptr;
  ctl_mr_ = ctl_buf_ ? ctx.reg_mr(dom_.pd(), ctl_buf_->addr, kCtlBytes, verbs::kAccessLocalWrite)
                     : nullptr;
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (!ctl_mr_ || wake_fd_ < 0) {
    rc = errno ? errno : ENOMEM;
    if (ctl_buf_) ctx.free_buffer(ctl_buf_);
    if (srq_) ctx.destroy_srq(srq_);
    if (cq_) ctx.destroy_cq(cq_);
    if (wake_fd_ >= 0) close(wake_fd_);
    close(listen_fd_);
    ctl_buf_ = nullptr, srq_ = nullptr, cq_ = nullptr, wake_fd_ = listen_fd_ = -1;
    return rc;
  }
  state_.store(TmState::kStarted, std::memory_order_release);
  if (pool_) {  // "an attempt is made to fill the M0_NET_QT_MSG_RECV queue" at start
    std::lock_guard<std::mutex> g(mu_);
    reprovision_locked();
  }
  {
    std::lock_guard<std::mutex> g(dom_.tms_mu_);
    dom_.tms_.push_back(this);
  }
  event_thread_ = std::thread([this] { event_loop(); });
  oob_thread_ = std::thread([this] { oob_loop(); });
  TmEvent te;
  te.next_state = TmState::kStarted;
  te.ep = ep_;
  emit(te);
  return 0;
}

int Tm::stop() {
  if (state() != TmState::kStarted && state() != TmState::kFailed) return EINVAL;
  {
    std::lock_guard<std::mutex> g(dom_.tms_mu_);
    std::erase(dom_.tms_, this);
  }
  // Goodbyes: every peer drops its end of our connections now, instead of finding out when
  // its next operation fails (or holding a connection slot for a Tm that is gone).
  std::vector<std::shared_ptr<Conn>> byes;
  if (state() == TmState::kStarted) {
    std::lock_guard<std::mutex> g(mu_);
    auto bye = [&](const std::shared_ptr<Conn>& c) {
      if (c->state != Conn::State::kUp || !c->cqp || c->foreign) return;
      c->bye_done = false;
      send_ctl_locked(*c, 0, 0, ECONNRESET, kCtlBye);
      byes.push_back(c);
    };
    for (auto& [ep, c] : conns_) bye(c);
    for (auto& c : parked_) bye(c);
  }
  stopping_.store(true, std::memory_order_release);
  const std::uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  event_thread_.join();
  oob_thread_.join();
  client::Context& ctx = dom_.ctx();
  // Wait a little for the goodbyes to leave (their completions; others are dropped: everything
  // queued ends with -ECANCELED below).
  // (The event thread may have seen some of them already.)
  for (const auto until = Clock::now() + std::chrono::milliseconds(200); Clock::now() < until;) {
    std::erase_if(byes, [](const std::shared_ptr<Conn>& c) { return c->bye_done; });
    if (byes.empty()) break;
    client::Wc wc[16];
    const int n = ctx.poll_cq(cq_, 16, wc);
    if (n < 0) break;
    for (int i = 0; i < n; ++i) {
      if (wc[i].wr_id != tag(kTagCtlSend, kCtlBye)) continue;
      for (auto& c : byes)
        if (c->cqp && c->cqp->qp_num == wc[i].qp_num) c->bye_done = true;
    }
    if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Destroying the QPs and the SRQ first: from then on the engine touches no buffer.
  std::vector<BufferEvent> evs;
  std::vector<NetBuffer*> to_pool;
  {
    std::lock_guard<std::mutex> g(mu_);
    // Every buffer still queued is cancelled: a del each, as Motr's stop with abort counts them
    // (those del() had cancelled already were counted then).
    for (int i = 0; i < static_cast<int>(QueueType::kCount_); ++i)
      for (const NetBuffer* nb : queues_[i])
        if (!(nb->flags & kBufCancelled)) ++qstats_[i].dels;
    for (auto& [ep, c] : conns_) parked_.push_back(c);
    for (auto& c : closing_) parked_.push_back(c);
    closing_.clear();
    for (auto& c : parked_) {
      if (c->qp) ctx.destroy_qp(c->qp);
      if (c->cqp) ctx.destroy_qp(c->cqp);
      c->qp = c->cqp = nullptr;
      for (NetBuffer* nb : c->waiting) finish_locked(*nb, -ECANCELED, evs);
      c->waiting.clear();
    }
    conns_.clear();
    parked_.clear();
    by_qpn_.clear();
    ctl_blocks_ = 0;
    ctx.destroy_srq(srq_);
    srq_ = nullptr;
    take_pool_buffers_locked(to_pool);
    for (auto& q : queues_)
      while (!q.empty()) finish_locked(*q.front(), -ECANCELED, evs);
    deficit_.store(0, std::memory_order_release);               // the invariant of a stopped Tm
    evs.insert(evs.begin(), pending_.begin(), pending_.end());  // older events first
    pending_.clear();
    npending_.store(0, std::memory_order_release);
  }
  // Pool buffers go back to their pool before the state change is told ([State]).
  for (NetBuffer* nb : to_pool) pool_->put(nb);
  state_.store(TmState::kStopped, std::memory_order_release);
  for (const BufferEvent& e : evs) {  // on the stopping thread, in both delivery modes
    {
      std::lock_guard<std::mutex> g(mu_);
      account_event_locked(e);
    }
    if (!e.keep_queued) e.buf->flags &= ~kBufQueued;
    e.buf->flags &= ~(kBufCancelled | kBufTimedOut);
    if (e.buf->cb) e.buf->cb(e);
  }
  ctx.destroy_cq(cq_);
  cq_ = nullptr;
  ctx.dereg_mr(ctl_mr_);
  ctx.free_buffer(ctl_buf_);
  ctl_mr_ = nullptr;
  ctl_buf_ = nullptr;
  close(listen_fd_);
  close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
  TmEvent te;
  te.next_state = TmState::kStopped;
  emit(te);
  return 0;
}

void Tm::take_pool_buffers_locked(std::vector<NetBuffer*>& to_pool) {
  auto& q = queues_[static_cast<int>(QueueType::kMsgRecv)];
  for (auto it = q.begin(); it != q.end();) {
    NetBuffer* nb = *it;
    if (!pool_ || nb->pool != pool_) {
      ++it;
      continue;
    }
    it = q.erase(it);
    for (const std::uint64_t w : nb->impl->wr_ids) by_wr_.erase(w);
    nb->impl->wr_ids.clear();
    nb->impl->posted = false;
    nb->flags &= ~(kBufQueued | kBufInProgress);
    to_pool.push_back(nb);
  }
  deficit_.store(0, std::memory_order_release);  // the invariant of an inoperable Tm
}

std::size_t Tm::queue_length(QueueType q) const {
  std::lock_guard<std::mutex> g(mu_);
  return q < QueueType::kCount_ ? queues_[static_cast<int>(q)].size() : 0;
}

TmStats Tm::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  TmStats s = stats_;
  s.conns_live = 0;
  for (const auto& [ep, c] : conns_) s.conns_live += c->state == Conn::State::kUp;
  for (const auto& c : parked_) s.conns_live += c->state == Conn::State::kUp;
  return s;
}

}  // namespace roce::lnet
