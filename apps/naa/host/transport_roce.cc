/// @file
/// The host library's transport on the appliance's stack through libroce (naaice_transport.h):
/// one Context and one ConnStack (conn_stack.h) per process, shared by every connection the
/// process opens. The Context is
///   - attached to a running roced when NAAICE_ROCE_ATTACH names its socket (and
///     NAAICE_ROCE_ATTACH_PORT one of its ports; naaice_client --attach sets them), or when
///     NAAICE_ROCE is "attach=SOCKET[,port=NAME]" (NetFR's spelling of the same), or
///   - in-process on a DPDK port of the process's own, configured by NAAICE_ROCE
///     ("pmd=memif,socket=PATH,role=client,ip=192.0.2.2,mac=02:00:00:00:00:02", see
///     runtime::parse_link_text).
/// Completions and events are sorted by connection, so that several contexts (several "hosts")
/// can run at once, from any threads: every entry point holds one process-wide lock (the stack
/// and its port are driven by whichever thread calls), as upstream's contexts on rdma-core may
/// each be used by a thread of their own. Idle polls give the CPU away now and then
/// (NAAICE_ROCE_BUSY=1: never, for benchmarks on dedicated cores).
///
/// Built with NAAICE_ATTACHED_ONLY (libnaaice_attached), only the first: no DPDK, no engine.
///
/// The NAAICE API registers the application's own buffers; libroce registers only its memory
/// (shared with roced when attached). Each region is therefore shadowed: a piece of the
/// Context's memory registered at the application's address as its IOVA (reg_mr_iova), so
/// that the addresses and keys the NAA sees are the application's. What the host sends is
/// copied in when it is posted; what arrives is copied out when its receive completes, and a
/// call's result when the NAA's WRITE_WITH_IMM has arrived (sync_in: the output regions only,
/// so that the application's other buffers are never overwritten).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "apps/naa/conn_stack.h"
#include "apps/naa/host/naaice_transport.h"
#ifndef NAAICE_ATTACHED_ONLY
#include "apps/naa/standalone.h"
#endif
#include "dataplane/port/eal.h"

namespace roce::naa {
namespace {

constexpr unsigned kYieldAfterIdlePolls = 32;
constexpr std::uint64_t kPage = 4096;

struct Shared {
#ifndef NAAICE_ATTACHED_ONLY
  std::unique_ptr<Standalone> local;
#endif
  std::unique_ptr<client::Context> attached;
  std::unique_ptr<ConnStack> stack;
  unsigned users = 0;
  std::map<ConnId, std::deque<Completion>> wcs;
  std::map<ConnId, std::deque<ConnEvent>> events;

  void pump() {
    std::vector<ConnEvent> ev;
    std::vector<Completion> wc;
    stack->poll(ev, wc);
    for (auto& e : ev) events[e.conn].push_back(e);
    for (auto& c : wc) wcs[c.conn].push_back(c);
  }
};
Shared g_shared;
/// Held by every entry point (the file's comment): the Context, the stack, g_shared.
std::mutex g_lock;

/// A region of the application's, and the registered memory that stands for it.
struct Shadow {
  std::uint8_t* app = nullptr;
  std::uint64_t length = 0;
  Memory mem;
  std::uint8_t* copy = nullptr;  ///< in mem, at app's page offset
  MrInfo mr;
  bool covers(const void* p, std::uint64_t n) const {
    const auto* b = static_cast<const std::uint8_t*>(p);
    return b >= app && b + n <= app + length;
  }
};

struct RoceTransport {
  std::optional<ConnId> conn;
  bool broken = false;
  std::string error = "no error";
  unsigned idle = 0;
  std::map<Shadow*, std::unique_ptr<Shadow>> shadows;
  struct Posted {
    std::uint8_t* addr;
    std::uint32_t length;
  };
  std::deque<Posted> recvs;  ///< posted receives, in the order they complete

  Shadow* shadow_of(const void* p, std::uint64_t n) {
    for (auto& [k, s] : shadows)
      if (s->covers(p, n)) return s.get();
    return nullptr;
  }
  void copy_out(const void* p, std::uint64_t n) {
    if (Shadow* s = shadow_of(p, n))
      std::memcpy(const_cast<void*>(p), s->copy + (static_cast<const std::uint8_t*>(p) - s->app),
                  n);
  }
};

RoceTransport* self(void* p) { return static_cast<RoceTransport*>(p); }

int t_connect(void* p, const char* local_ip, const char* ip, std::uint16_t port,
              std::uint32_t send_depth, std::uint32_t recv_depth, std::uint8_t /*retry_count*/,
              double timeout_s) {
  // The link's address is the local one (NAAICE_ROCE's ip=, or the attached roced's port);
  // the engine's QPs retry as an RNIC with retry count 7.
  (void)local_ip;
  RoceTransport* t = self(p);
  std::unique_lock<std::mutex> lock(g_lock);
  const auto c = g_shared.stack->connect(ip, port, QpSizes{send_depth, recv_depth});
  if (!c) {
    t->error = std::string("cannot reach ") + ip + " (no ARP answer or no QP)";
    return -1;
  }
  t->conn = c;
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::microseconds(static_cast<std::int64_t>(timeout_s * 1e6));
  for (;;) {
    if (!lock.owns_lock()) lock.lock();
    g_shared.pump();
    auto& q = g_shared.events[*c];
    while (!q.empty()) {
      const ConnEvent e = q.front();
      q.pop_front();
      if (e.kind == ConnEvent::kEstablished) return 0;
      t->error = e.kind == ConnEvent::kRejected ? "rejected (no NAA listening, or it is full)"
                                                : "unreachable";
      g_shared.stack->disconnect(*c);
      t->conn.reset();
      return -1;
    }
    if (std::chrono::steady_clock::now() > end) {
      t->error = "timed out";
      return -1;
    }
    lock.unlock();  // the other threads' connections meanwhile
  }
}

int t_reg_mr(void* p, void* addr, std::uint64_t length, naaice_mr_handle* out) {
  const std::lock_guard<std::mutex> lock(g_lock);
  RoceTransport* t = self(p);
  auto s = std::make_unique<Shadow>();
  s->app = static_cast<std::uint8_t*>(addr);
  s->length = length;
  const std::uint64_t off = reinterpret_cast<std::uint64_t>(addr) % kPage;
  const auto mem = g_shared.stack->alloc(off + length);
  if (!mem) {
    t->error = std::string("no memory from the stack: ") + std::strerror(errno);
    return -1;
  }
  s->mem = *mem;
  s->copy = mem->addr + off;
  std::memcpy(s->copy, addr, length);
  // The common PD (the host's connections share it), addressed as the application's buffer.
  const auto m = g_shared.stack->reg_mr(0, s->copy, length, reinterpret_cast<std::uint64_t>(addr));
  if (!m) {
    g_shared.stack->free(s->mem);
    t->error = std::string("the stack refused the registration: ") + std::strerror(errno);
    return -1;
  }
  s->mr = *m;
  out->addr = addr;
  out->length = length;
  out->lkey = m->lkey;
  out->rkey = m->rkey;
  out->priv = s.get();
  t->shadows[s.get()] = std::move(s);
  return 0;
}

void t_dereg_mr(void* p, naaice_mr_handle* h) {
  const std::lock_guard<std::mutex> lock(g_lock);
  RoceTransport* t = self(p);
  const auto it = t->shadows.find(static_cast<Shadow*>(h->priv));
  if (it == t->shadows.end()) return;
  g_shared.stack->dereg_mr(it->second->mr);
  g_shared.stack->free(it->second->mem);
  t->shadows.erase(it);
}

int t_post_recv(void* p, std::uint64_t wr_id, void* addr, std::uint32_t len, std::uint32_t lkey) {
  const std::lock_guard<std::mutex> lock(g_lock);
  RoceTransport* t = self(p);
  if (!t->conn || !g_shared.stack->post_recv(*t->conn, wr_id, addr, len, lkey)) {
    t->error = "post_recv failed";
    return -1;
  }
  t->recvs.push_back({static_cast<std::uint8_t*>(addr), len});
  return 0;
}

int t_post_send(void* p, naaice_op op, std::uint64_t wr_id, const void* local, std::uint32_t len,
                std::uint32_t lkey, std::uint64_t raddr, std::uint32_t rkey, std::uint32_t imm,
                unsigned flags) {
  const std::lock_guard<std::mutex> lock(g_lock);
  RoceTransport* t = self(p);
  if (len != 0)
    if (Shadow* s = t->shadow_of(local, len))
      std::memcpy(s->copy + (static_cast<const std::uint8_t*>(local) - s->app), local, len);
  WorkRequest wr;
  wr.wr_id = wr_id;
  wr.op = op == NAAICE_OP_SEND ? Op::kSend : op == NAAICE_OP_WRITE ? Op::kWrite : Op::kWriteImm;
  wr.local = reinterpret_cast<std::uint64_t>(local);  // the MR's IOVA: the application's address
  wr.length = len;
  wr.lkey = lkey;
  wr.remote_addr = raddr;
  wr.rkey = rkey;
  wr.imm = imm;
  wr.signaled = (flags & NAAICE_SEND_SIGNALED) != 0;
  wr.solicited = (flags & NAAICE_SEND_SOLICITED) != 0;
  if (!t->conn || !g_shared.stack->post_send(*t->conn, wr)) {
    t->error = "post_send failed";
    return -1;
  }
  // The stack moves only when it is polled: send the request now (a call's last WRITE, an
  // MRSP message), as an RNIC does, so that the NAA works while the program does other things
  // before it waits (naa_invoke, then naa_wait). What the poll finds stays queued for t_poll.
  if (op != NAAICE_OP_WRITE) g_shared.pump();
  return 0;
}

int t_poll(void* p, naaice_wc* out, int max) {
  RoceTransport* t = self(p);
  std::unique_lock<std::mutex> lock(g_lock);
  if (!t->conn) return -1;
  g_shared.pump();
  auto& ev = g_shared.events[*t->conn];
  while (!ev.empty()) {
    if (ev.front().kind == ConnEvent::kDisconnected) {
      t->broken = true;
      t->error = "the NAA disconnected";
    }
    ev.pop_front();
  }
  auto& q = g_shared.wcs[*t->conn];
  int n = 0;
  while (n < max && !q.empty()) {
    const Completion& c = q.front();
    if ((c.kind == Completion::kRecv || c.kind == Completion::kRecvImm) && !t->recvs.empty()) {
      const RoceTransport::Posted r = t->recvs.front();
      t->recvs.pop_front();
      if (c.ok && c.kind == Completion::kRecv)
        t->copy_out(r.addr, std::min<std::uint64_t>(c.byte_len, r.length));
    }
    naaice_wc& w = out[n++];
    std::memset(&w, 0, sizeof w);
    w.wr_id = c.wr_id;
    w.ok = c.ok ? 1 : 0;
    w.kind = c.kind == Completion::kSend    ? NAAICE_WC_SEND
             : c.kind == Completion::kWrite ? NAAICE_WC_WRITE
             : c.kind == Completion::kRecv  ? NAAICE_WC_RECV
                                            : NAAICE_WC_RECV_IMM;
    w.byte_len = c.byte_len;
    w.imm = c.imm;
    std::snprintf(w.status, sizeof w.status, "%s", c.status.c_str());
    q.pop_front();
  }
  if (n == 0 && t->broken) return -1;
  const bool attached = g_shared.attached != nullptr;
  lock.unlock();
  // Share the CPU when nothing happens (two busy processes on few cores; attached, roced
  // drives the port).
  static const bool busy = std::getenv("NAAICE_ROCE_BUSY") != nullptr;
  if (n == 0 && !busy && ++t->idle >= kYieldAfterIdlePolls) {
    t->idle = 0;
    if (attached)
      ::usleep(20);
    else
      sched_yield();
  } else if (n) {
    t->idle = 0;
  }
  return n;
}

/// The peer wrote the shadow: copy [addr, addr + n) out to the application.
void t_sync_in(void* p, void* addr, std::uint64_t n) {
  const std::lock_guard<std::mutex> lock(g_lock);
  self(p)->copy_out(addr, n);
}

/// With g_lock held.
void disconnect_locked(RoceTransport* t) {
  if (!t->conn) return;
  // Let the last ACKs go out, then DREQ; the CM answers the DREP while we idle.
  g_shared.stack->idle(0.01);
  g_shared.stack->disconnect(*t->conn);
  g_shared.stack->idle(0.1);
  g_shared.wcs.erase(*t->conn);
  g_shared.events.erase(*t->conn);
  t->conn.reset();
  t->recvs.clear();
}

void t_disconnect(void* p) {
  const std::lock_guard<std::mutex> lock(g_lock);
  disconnect_locked(self(p));
}

void t_destroy(void* p) {
  const std::lock_guard<std::mutex> lock(g_lock);
  RoceTransport* t = self(p);
  if (t->conn) disconnect_locked(t);
  for (auto& [k, s] : t->shadows) {
    g_shared.stack->dereg_mr(s->mr);
    g_shared.stack->free(s->mem);
  }
  delete t;
  --g_shared.users;
}

/// The stack lives as long as the process: DPDK's EAL cannot start twice.
void at_exit() {
  const std::lock_guard<std::mutex> lock(g_lock);
  if (!g_shared.stack) return;
  g_shared.stack->idle(0.05);
  g_shared.stack.reset();
  g_shared.attached.reset();
#ifndef NAAICE_ATTACHED_ONLY
  if (std::getenv("NAAICE_ROCE_STATS") && g_shared.local)
    std::fprintf(stderr, "naaice: %s", g_shared.local->transport_report().c_str());
  g_shared.local.reset();
  Standalone::cleanup();
#endif
}

const char* t_error(void* p) {
  const std::lock_guard<std::mutex> lock(g_lock);
  return self(p)->error.c_str();
}

/// The process's Context and stack, attached or in-process (the file's comment).
bool open_shared() {
  ConnStackOptions so;
  so.pd_per_connection = false;  // one host: its regions serve each of its connections
  // Attached: NAAICE_ROCE_ATTACH (and NAAICE_ROCE_ATTACH_PORT), or NAAICE_ROCE in NetFR's
  // spelling of an attached link, "attach=SOCKET[,port=NAME]".
  std::string sock, port;
  if (const char* s = std::getenv("NAAICE_ROCE_ATTACH"); s && *s) {
    sock = s;
    if (const char* p = std::getenv("NAAICE_ROCE_ATTACH_PORT")) port = p;
  } else if (const char* l = std::getenv("NAAICE_ROCE"); l && std::strncmp(l, "attach=", 7) == 0) {
    sock = l + 7;
    if (const auto comma = sock.find(','); comma != std::string::npos) {
      const std::string rest = sock.substr(comma + 1);
      sock.resize(comma);
      if (rest.rfind("port=", 0) != 0) {
        std::fprintf(stderr, "naaice: NAAICE_ROCE: only port=NAME may follow attach=SOCKET: %s\n",
                     rest.c_str());
        return false;
      }
      port = rest.substr(5);
    }
  }
  if (!sock.empty()) {
    g_shared.attached = client::Context::attach(sock, port);
    if (!g_shared.attached) {
      std::fprintf(stderr, "naaice: cannot attach to roced at %s: %s\n", sock.c_str(),
                   std::strerror(errno));
      return false;
    }
    g_shared.stack = std::make_unique<ConnStack>(*g_shared.attached, so);
    return true;
  }
#ifdef NAAICE_ATTACHED_ONLY
  std::fprintf(stderr,
               "naaice: set NAAICE_ROCE_ATTACH (or NAAICE_ROCE=attach=SOCKET) to the socket of a "
               "running roced (this build attaches only)\n");
  return false;
#else
  const char* env = std::getenv("NAAICE_ROCE");
  roce::runtime::LinkOptions link = roce::runtime::LinkOptions::text_defaults();
  link.pmd = "memif";  // the client end
  link.ip = "192.0.2.2";
  link.mac = "02:00:00:00:00:02";
  std::string err;
  if (!env || !roce::runtime::parse_link_text(env, link, err)) {
    std::fprintf(
        stderr,
        "naaice: set NAAICE_ROCE to the appliance stack's link, e.g. "
        "pmd=memif,socket=/tmp/naa.sock,role=client,ip=192.0.2.2,"
        "mac=02:00:00:00:00:02 (%s), or attach=SOCKET (a roced's; or NAAICE_ROCE_ATTACH)\n",
        env ? err.c_str() : "NAAICE_ROCE is not set");
    return false;
  }
  try {
    g_shared.local = std::make_unique<Standalone>(link);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "naaice: cannot start the appliance stack: %s\n", e.what());
    return false;
  }
  const ConnStackOptions& lo = g_shared.local->stack_options();
  so.neighbour = lo.neighbour;
  g_shared.stack = std::make_unique<ConnStack>(g_shared.local->context(), so);
  return true;
#endif
}

}  // namespace
}  // namespace roce::naa

extern "C" naaice_transport* naaice_transport_open(void) {
  using namespace roce::naa;
  const std::lock_guard<std::mutex> lock(g_lock);
  if (!g_shared.stack) {
    if (!open_shared()) return nullptr;
    std::atexit(at_exit);
  }
  ++g_shared.users;
  auto* t = static_cast<naaice_transport*>(std::calloc(1, sizeof(naaice_transport)));
  if (!t) return nullptr;
  t->priv = new RoceTransport;
  t->connect = t_connect;
  t->reg_mr = t_reg_mr;
  t->dereg_mr = t_dereg_mr;
  t->post_recv = t_post_recv;
  t->post_send = t_post_send;
  t->poll = t_poll;
  t->sync_in = t_sync_in;
  t->disconnect = t_disconnect;
  t->destroy = t_destroy;
  t->error = t_error;
  return t;
}
