/// @file
/// Channels, slots and credits shared by the host and the client (endpoint.h).
#include "apps/netfr/endpoint.h"

#include <arpa/inet.h>
#include <roce/client.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <unordered_set>

#include "apps/netfr/context_fabric.h"
#include "dataplane/port/eal.h"

namespace roce::netfr {
namespace {

LocalOpener g_local = nullptr;
std::unique_ptr<Fabric> g_fabric;
/// Every endpoint of the process: those on one fabric share it, and whoever polls it hands
/// each event and completion to the endpoint that owns its connection.
std::vector<Endpoint*> g_endpoints;

void at_exit() {
  if (!g_fabric) return;
  g_fabric->idle(0.05);
  if (std::getenv("NETFR_STATS")) std::fprintf(stderr, "netfr: %s\n", g_fabric->report().c_str());
  g_fabric.reset();
}

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

void set_local_opener(LocalOpener f) { g_local = f; }

std::recursive_mutex& api_mutex() {
  static std::recursive_mutex m;
  return m;
}

namespace {
int g_api_depth = 0;  ///< API calls in progress (under the lock)
std::vector<std::function<void()>> g_at_exit;
}  // namespace

ApiLock::ApiLock() : g_(api_mutex()) { ++g_api_depth; }
ApiLock::~ApiLock() {
  if (--g_api_depth != 0) return;
  ++g_api_depth;  // what runs now may call in again: its frees wait for this loop
  while (!g_at_exit.empty()) {
    auto fs = std::move(g_at_exit);
    g_at_exit.clear();
    for (auto& f : fs) f();
  }
  --g_api_depth;
}
void at_api_exit(std::function<void()> f) { g_at_exit.push_back(std::move(f)); }

namespace {
std::unordered_set<const NFRMemory*>& live_set() {
  static std::unordered_set<const NFRMemory*> s;
  return s;
}
}  // namespace

void remember_memory(const NFRMemory* m) { live_set().insert(m); }
void forget_memory(const NFRMemory* m) { live_set().erase(m); }
bool live_memory(const NFRMemory* m) { return m && live_set().count(m) != 0; }

bool debug_log() {
  static const bool env = std::getenv("NETFR_DEBUG") != nullptr;
  return env || nfr_LogLevel <= NFR_LOG_LEVEL_DEBUG;
}

int check_upstream_opts(const NFRInitOpts& o, bool ports) {
  for (const std::uint8_t t : o.transportTypes)
    if (t != 0 && t != NFR_TRANSPORT_RDMA) return -EPROTONOSUPPORT;
  if (!ports || o.port) return 0;  // ours set: upstream's addrs are not used
  const std::uint16_t p0 = ntohs(o.addrs[0].sin_port), p1 = ntohs(o.addrs[1].sin_port);
  if (p1 != 0 && p1 != static_cast<std::uint16_t>(p0 + 1)) return -EINVAL;
  return 0;
}

std::uint16_t primary_port(const NFRInitOpts& o) {
  if (o.port) return o.port;
  if (const std::uint16_t p = ntohs(o.addrs[0].sin_port)) return p;
  return kDefaultPort;
}

std::string upstream_peer(const NFRInitOpts& o) {
  if (o.addrs[0].sin_addr.s_addr == 0) return {};
  char text[INET_ADDRSTRLEN];
  if (!inet_ntop(AF_INET, &o.addrs[0].sin_addr, text, sizeof text)) return {};
  return text;
}

}  // namespace roce::netfr

extern "C" {
int nfr_LogLevel = NFR_LOG_LEVEL_INFO;

void nfrSetLogLevel(int level) {
  std::lock_guard<std::recursive_mutex> g(roce::netfr::api_mutex());
  nfr_LogLevel = level;
}
}  // extern "C"

namespace roce::netfr {

std::unique_ptr<Fabric> open_fabric(const std::string& link, std::string& err) {
  if (link.rfind("attach=", 0) == 0) {
    std::string sock = link.substr(7), port;
    if (const auto comma = sock.find(','); comma != std::string::npos) {
      const std::string rest = sock.substr(comma + 1);
      sock.resize(comma);
      if (rest.rfind("port=", 0) != 0) {
        err = "attach link: only port=NAME may follow the socket: " + rest;
        return nullptr;
      }
      port = rest.substr(5);
    }
    auto ctx = client::Context::attach(sock, port);
    if (!ctx) {
      err = "cannot attach to roced at " + sock + ": " + std::strerror(errno);
      return nullptr;
    }
    return std::make_unique<ContextFabric>(std::move(ctx), nullptr);
  }
  if (!g_local) {
    err = "link '" + link +
          "': this program has no in-process stack; attach to a roced (attach=SOCKET)";
    return nullptr;
  }
  return g_local(link, err);
}

Fabric* process_fabric(const char* link, std::string& err) {
  if (g_fabric) return g_fabric.get();
  const char* text = link ? link : std::getenv("NETFR_LINK");
  if (!text) {
    err = "no link: set NFRInitOpts.link or NETFR_LINK";
    return nullptr;
  }
  try {
    g_fabric = open_fabric(text, err);
  } catch (const std::exception& e) {
    err = std::string("cannot start the stack: ") + e.what();
    return nullptr;
  }
  if (!g_fabric) return nullptr;
  std::atexit(at_exit);
  return g_fabric.get();
}

std::string Stats::line() const {
  std::ostringstream o;
  o << "sent " << sent << " received " << received << " acks_sent " << acks_sent
    << " acks_received " << acks_received << " writes " << writes << " write_bytes " << write_bytes
    << " credit_waits " << credit_waits << " internal_queued " << internal_queued
    << " protocol_errors " << protocol_errors << " bad_messages " << bad_messages << " connects "
    << connects << " disconnects " << disconnects << " rejected " << rejected << " keepalives_sent "
    << keepalives_sent << " keepalives_received " << keepalives_received << " peers_silent "
    << peers_silent;
  return o.str();
}

Endpoint::Endpoint(Fabric& f) : fab_(f) { g_endpoints.push_back(this); }

Endpoint::~Endpoint() {
  close_channels();
  std::erase(g_endpoints, this);
  for (auto& c : ch_) {
    if (c.rx_mr.handle) fab_.dereg_mr(c.rx_mr);
    if (c.tx_mr.handle) fab_.dereg_mr(c.tx_mr);
  }
}

std::unique_ptr<NFRMemory> Endpoint::new_memory(void* user, std::uint64_t size,
                                                std::uint8_t channel) {
  auto mr = fab_.alloc_mr(size, advertises());
  if (!mr) return nullptr;
  auto m = std::make_unique<NFRMemory>();
  m->ptr = user ? user : mr->addr;
  m->size = size;
  m->mr = *mr;
  m->channel = channel;
  m->owner = this;
  return m;
}

std::unique_ptr<NFRMemory> Endpoint::new_memfd(int fd, void* addr, std::uint64_t size,
                                               std::uint8_t channel) {
  auto mr = fab_.reg_memfd(fd, addr, size, advertises());
  if (!mr) return nullptr;
  auto m = std::make_unique<NFRMemory>();
  m->ptr = addr;
  m->size = size;
  m->mr = *mr;
  m->channel = channel;
  m->owner = this;
  return m;
}

int Endpoint::channel_of(ConnId c) const {
  for (unsigned i = 0; i < NETFR_CHANNEL_COUNT; ++i)
    if (ch_[i].conn == c && c != 0) return static_cast<int>(i);
  return -1;
}

bool Endpoint::open_channel(unsigned i, ConnId conn) {
  Channel& c = ch_[i];
  if (!c.rx_mr.handle) {
    auto r = fab_.alloc_mr(std::uint64_t{kRxSlots} * NETFR_MESSAGE_MAX_SIZE, false);
    if (!r) return false;
    c.rx_mr = *r;
  }
  if (!c.tx_mr.handle) {
    auto t = fab_.alloc_mr(std::uint64_t{kTxSlots} * NETFR_MESSAGE_MAX_SIZE, false);
    if (!t) return false;
    c.tx_mr = *t;
  }
  c.conn = conn;
  c.credits = NETFR_CREDIT_COUNT;
  c.tx_channel_serial = c.rx_channel_serial = 0;
  c.free_tx.clear();
  for (std::uint32_t s = kTxSlots; s-- > 0;) c.free_tx.push_back(s);
  c.on_done.assign(kTxSlots, {});
  c.internal.clear();
  c.last_tx_ns = c.last_rx_ns = now_ns();
  for (std::uint32_t s = 0; s < kRxSlots; ++s)
    if (!fab_.post_recv(conn, make_wr(i, WrKind::kRecv, s), rx_slot(i, s), NETFR_MESSAGE_MAX_SIZE,
                        c.rx_mr.lkey))
      return false;
  c.open = true;
  c.up = false;
  return true;
}

void Endpoint::close_channels() {
  for (unsigned i = 0; i < NETFR_CHANNEL_COUNT; ++i) {
    Channel& c = ch_[i];
    if (c.conn) fab_.disconnect(c.conn);
    c.conn = 0;
    c.open = c.up = false;
    auto queued = std::move(c.internal);
    c.internal.clear();
    auto pending = std::move(c.on_done);
    c.on_done.clear();
    for (auto& f : pending)
      if (f) f(-ECONNRESET);
    for (auto& q : queued)
      if (q.on_done) q.on_done(-ECONNRESET);
  }
}

void Endpoint::repost(unsigned ch, std::uint32_t slot) {
  Channel& c = ch_[ch];
  if (!c.open) return;
  fab_.post_recv(c.conn, make_wr(ch, WrKind::kRecv, slot), rx_slot(ch, slot),
                 NETFR_MESSAGE_MAX_SIZE, c.rx_mr.lkey);
}

int Endpoint::send_message(unsigned ch, const std::uint8_t* msg, std::size_t len, bool user,
                           std::function<void(int)> on_done) {
  Channel& c = ch_[ch];
  if (!c.up) return -ENOTCONN;
  const bool ack =
      len >= kHeaderSize && (msg[9] == static_cast<std::uint8_t>(MsgType::kHostDataAck) ||
                             msg[9] == static_cast<std::uint8_t>(MsgType::kClientDataAck));
  if (user) {
    // Upstream's rule: a datagram goes while at least the reserve is left.
    while (c.credits < NETFR_RESERVED_CREDIT_COUNT || c.free_tx.empty()) {
      if (nonblocking_) return -EAGAIN;
      ++stats_.credit_waits;
      if (!wait_until([&] {
            return !c.up || (c.credits >= NETFR_RESERVED_CREDIT_COUNT && !c.free_tx.empty());
          }))
        return -ETIMEDOUT;
      if (!c.up) return -ENOTCONN;
    }
    --c.credits;
  } else if (c.free_tx.empty() || !c.internal.empty()) {
    if (c.internal.size() >= kMaxQueued) {
      ++stats_.protocol_errors;
      on_channel_error(ch, "peer takes no messages (" + std::to_string(kMaxQueued) + " waiting)");
      return -ECONNRESET;
    }
    // The callback goes with it (a buffer update waiting for a slot still tells its writer).
    c.internal.push_back({{msg, msg + len}, std::move(on_done)});
    ++stats_.internal_queued;
    return 0;
  }
  const std::uint32_t slot = c.free_tx.back();
  c.free_tx.pop_back();
  std::uint8_t* p = tx_slot(ch, slot);
  std::memcpy(p, msg, len);
  c.on_done[slot] = std::move(on_done);
  if (!fab_.post_send(c.conn, make_wr(ch, WrKind::kSend, slot), false, p,
                      static_cast<std::uint32_t>(len), c.tx_mr.lkey, 0, 0, true)) {
    c.free_tx.push_back(slot);
    if (user) ++c.credits;
    c.on_done[slot] = nullptr;
    return -EIO;
  }
  c.last_tx_ns = now_ns();
  if (ack)
    ++stats_.acks_sent;
  else
    ++stats_.sent;
  return 0;
}

int Endpoint::send_ack(unsigned ch, bool host_data) {
  std::uint8_t b[kAckSize];
  encode(b, Ack{host_data});
  return send_message(ch, b, sizeof b, false);
}

bool Endpoint::post_write(unsigned ch, const void* local, std::uint32_t len, std::uint32_t lkey,
                          std::uint64_t raddr, std::uint32_t rkey, bool signaled) {
  Channel& c = ch_[ch];
  return c.up && fab_.post_send(c.conn, make_wr(ch, WrKind::kWrite, 0), true, local, len, lkey,
                                raddr, rkey, signaled);
}

void Endpoint::flush_internal(unsigned ch) {
  Channel& c = ch_[ch];
  while (!c.internal.empty() && !c.free_tx.empty() && c.up) {
    Channel::Queued m = std::move(c.internal.front());
    c.internal.pop_front();
    const std::uint32_t slot = c.free_tx.back();
    c.free_tx.pop_back();
    std::uint8_t* p = tx_slot(ch, slot);
    std::memcpy(p, m.bytes.data(), m.bytes.size());
    if (!fab_.post_send(c.conn, make_wr(ch, WrKind::kSend, slot), false, p,
                        static_cast<std::uint32_t>(m.bytes.size()), c.tx_mr.lkey, 0, 0, true)) {
      c.free_tx.push_back(slot);
      if (m.on_done) m.on_done(-EIO);
      continue;
    }
    c.on_done[slot] = std::move(m.on_done);
    c.last_tx_ns = now_ns();
    ++stats_.sent;
  }
}

void Endpoint::keepalive_tick() {
  if (!(ext_ & kExtKeepalive)) return;
  const std::uint64_t now = now_ns();
  const auto every = static_cast<std::uint64_t>(keepalive_s_ * 1e9);
  for (unsigned i = 0; i < NETFR_CHANNEL_COUNT; ++i) {
    Channel& c = ch_[i];
    if (!c.up) continue;
    if (now - c.last_rx_ns > 10 * every) {
      ++stats_.peers_silent;
      on_channel_error(i, "peer silent for 10 keepalive periods");
      return;  // both channels are closed now
    }
    // Only on an idle channel: behind a backlog (a peer that takes nothing, its SENDs RNR
    // NAKed without end) one more keepalive tells it nothing, and one per poll piled up.
    if (now - c.last_tx_ns > every && c.internal.empty() && !c.free_tx.empty()) {
      std::uint8_t b[kKeepaliveSize];
      encode(b, Keepalive{});
      if (send_message(i, b, sizeof b, false) == 0) ++stats_.keepalives_sent;
    }
  }
}

void Endpoint::on_completion(const FabricCompletion& wc) {
  const int chi = channel_of(wc.conn);
  if (chi < 0) return;
  const unsigned ch = static_cast<unsigned>(chi);
  Channel& c = ch_[ch];
  const auto kind = static_cast<WrKind>((wc.wr_id >> 32) & 0xFF);
  const auto slot = static_cast<std::uint32_t>(wc.wr_id & 0xFFFFFFFF);
  if (kind == WrKind::kSend && slot < kTxSlots) {
    c.free_tx.push_back(slot);
    auto f = std::move(c.on_done[slot]);
    c.on_done[slot] = nullptr;
    if (f) f(wc.ok ? 0 : -EIO);
  }
  if (!wc.ok) {
    on_channel_error(ch, "work completion error: " + wc.status);
    return;
  }
  if (kind != WrKind::kRecv || slot >= kRxSlots) {
    flush_internal(ch);
    return;
  }
  if (!c.up && listens()) {
    // COMM_EST: the peer's data came before our established event (its RTU still on the
    // way, or the CM's event not polled yet): the peer is up, so are we.
    FabricEvent up;
    up.kind = FabricEvent::kEstablished;
    up.conn = wc.conn;
    on_event(up);
  }
  c.last_rx_ns = now_ns();
  const Decoded d = decode({rx_slot(ch, slot), wc.byte_len});
  if (d.error != DecodeError::kOk) {
    ++stats_.bad_messages;
    on_channel_error(ch, "bad message: " + std::string(to_string(d.error)));
    return;
  }
  if (d.type == MsgType::kHostDataAck || d.type == MsgType::kClientDataAck) {
    // The host takes HostDataAck (from the client), the client ClientDataAck (from the host).
    if ((d.type == MsgType::kHostDataAck) != listens()) {
      ++stats_.protocol_errors;
      on_channel_error(ch, "peer sent " + std::string(to_string(d.type)));
      return;
    }
    ++stats_.acks_received;
    if (c.credits < NETFR_CREDIT_COUNT)
      ++c.credits;
    else
      ++stats_.protocol_errors;  // more acks than messages
    repost(ch, slot);
    flush_internal(ch);
    return;
  }
  if (d.type == MsgType::kKeepalive) {
    if (!(ext_ & kExtKeepalive)) {
      ++stats_.protocol_errors;
      on_channel_error(ch, "keepalive without the extension");
      return;
    }
    ++stats_.keepalives_received;
    repost(ch, slot);
    return;
  }
  ++stats_.received;
  if (!on_message(ch, slot, d)) repost(ch, slot);
}

int Endpoint::pump() {
  std::vector<FabricEvent> ev;
  std::vector<FabricCompletion> wcs;
  const bool any = fab_.poll(ev, wcs);
  auto owner = [this](ConnId c) -> Endpoint* {
    for (Endpoint* e : g_endpoints)
      if (&e->fab_ == &fab_ && e->channel_of(c) >= 0) return e;
    return nullptr;
  };
  for (auto& e : ev) {
    Endpoint* o = owner(e.conn);
    if (!o && e.kind == FabricEvent::kConnectRequest)
      for (Endpoint* l : g_endpoints)
        if (&l->fab_ == &fab_ && l->listens()) o = l;
    if (o)
      o->on_event(e);
    else if (e.kind == FabricEvent::kConnectRequest)
      fab_.reject(e.conn, {});
  }
  for (auto& w : wcs)
    if (Endpoint* o = owner(w.conn)) o->on_completion(w);
  for (Endpoint* e : g_endpoints)
    if (&e->fab_ == &fab_) {
      e->keepalive_tick();
      e->on_tick();
    }
  return any ? 1 : 0;
}

bool Endpoint::wait_until(const std::function<bool()>& done) {
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(timeout_s_ * 1e9);
  unsigned idle = 0;
  while (!done()) {
    if (now_ns() > end) return false;
    if (pump())
      idle = 0;
    else if (++idle >= 64) {
      idle = 0;
      sched_yield();
    }
  }
  return true;
}

}  // namespace roce::netfr
