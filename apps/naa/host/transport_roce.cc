/// @file
/// The host library's transport on the appliance's own stack, in-process (naaice_transport.h):
/// one EngineStack per process (one DPDK port), shared by every connection the process opens,
/// configured by the environment variable NAAICE_ROCE ("pmd=memif,socket=PATH,role=client,
/// ip=192.0.2.2,mac=02:00:00:00:00:02", see perf::parse_link_text). Completions and events are
/// sorted by connection, so that several contexts (several "hosts") can run at once. Idle polls
/// yield the CPU now and then (NAAICE_ROCE_BUSY=1: never, for benchmarks on dedicated cores).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "apps/naa/engine_stack.h"
#include "apps/naa/host/naaice_transport.h"
#include "dataplane/port/eal.h"

namespace roce::naa {
namespace {

struct Shared {
  std::unique_ptr<EngineStack> stack;
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

struct RoceTransport {
  std::optional<ConnId> conn;
  bool broken = false;
  std::string error = "no error";
  unsigned idle = 0;
};

RoceTransport* self(void* p) { return static_cast<RoceTransport*>(p); }

int t_connect(void* p, const char* ip, std::uint16_t port, std::uint32_t send_depth,
              std::uint32_t recv_depth, double timeout_s) {
  RoceTransport* t = self(p);
  const auto c = g_shared.stack->connect(ip, port, QpSizes{send_depth, recv_depth});
  if (!c) {
    t->error = std::string("cannot reach ") + ip + " (no ARP answer or no QP)";
    return -1;
  }
  t->conn = c;
  const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(timeout_s * 1e9);
  for (;;) {
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
    if (port::now_ns() > end) {
      t->error = "timed out";
      return -1;
    }
  }
}

int t_reg_mr(void* p, void* addr, std::uint64_t length, naaice_mr_handle* out) {
  const auto m = g_shared.stack->reg_mr(0, addr, length, std::nullopt);  // the common PD
  if (!m) {
    self(p)->error = "the engine refused the registration";
    return -1;
  }
  out->addr = addr;
  out->length = length;
  out->lkey = m->lkey;
  out->rkey = m->rkey;
  out->priv = reinterpret_cast<void*>(m->handle);
  return 0;
}

void t_dereg_mr(void*, naaice_mr_handle* h) {
  MrInfo m;
  m.handle = reinterpret_cast<std::uint64_t>(h->priv);
  g_shared.stack->dereg_mr(m);
}

int t_post_recv(void* p, std::uint64_t wr_id, void* addr, std::uint32_t len, std::uint32_t lkey) {
  RoceTransport* t = self(p);
  if (!t->conn || !g_shared.stack->post_recv(*t->conn, wr_id, addr, len, lkey)) {
    t->error = "post_recv failed";
    return -1;
  }
  return 0;
}

int t_post_send(void* p, naaice_op op, std::uint64_t wr_id, const void* local, std::uint32_t len,
                std::uint32_t lkey, std::uint64_t raddr, std::uint32_t rkey, std::uint32_t imm,
                int signaled) {
  RoceTransport* t = self(p);
  WorkRequest wr;
  wr.wr_id = wr_id;
  wr.op = op == NAAICE_OP_SEND ? Op::kSend : op == NAAICE_OP_WRITE ? Op::kWrite : Op::kWriteImm;
  wr.local = reinterpret_cast<std::uint64_t>(local);
  wr.length = len;
  wr.lkey = lkey;
  wr.remote_addr = raddr;
  wr.rkey = rkey;
  wr.imm = imm;
  wr.signaled = signaled != 0;
  if (!t->conn || !g_shared.stack->post_send(*t->conn, wr)) {
    t->error = "post_send failed";
    return -1;
  }
  return 0;
}

int t_poll(void* p, naaice_wc* out, int max) {
  RoceTransport* t = self(p);
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
  // Share the CPU when nothing happens (two busy processes on few cores).
  static const bool busy = std::getenv("NAAICE_ROCE_BUSY") != nullptr;
  if (n == 0 && !busy && ++t->idle >= perf::Env::kYieldAfterIdlePolls) {
    t->idle = 0;
    perf::Env::yield();
  } else if (n) {
    t->idle = 0;
  }
  return n;
}

void t_disconnect(void* p) {
  RoceTransport* t = self(p);
  if (!t->conn) return;
  // Let the last ACKs go out, then DREQ; the CM answers the DREP while we idle.
  g_shared.stack->idle(0.01);
  g_shared.stack->disconnect(*t->conn);
  g_shared.stack->idle(0.1);
  g_shared.wcs.erase(*t->conn);
  g_shared.events.erase(*t->conn);
  t->conn.reset();
}

void t_destroy(void* p) {
  RoceTransport* t = self(p);
  if (t->conn) t_disconnect(p);
  delete t;
  --g_shared.users;
}

/// The stack lives as long as the process: DPDK's EAL cannot start twice.
void at_exit() {
  if (!g_shared.stack) return;
  g_shared.stack->idle(0.05);
  if (std::getenv("NAAICE_ROCE_STATS"))
    std::fprintf(stderr, "naaice: %s", g_shared.stack->transport_report().c_str());
  g_shared.stack.reset();
  port::eal_cleanup();
}

const char* t_error(void* p) { return self(p)->error.c_str(); }

}  // namespace
}  // namespace roce::naa

extern "C" naaice_transport* naaice_transport_open(void) {
  using namespace roce::naa;
  if (!g_shared.stack) {
    const char* env = std::getenv("NAAICE_ROCE");
    LinkConfig link;
    link.memif_role = "client";
    link.ip = "192.0.2.2";
    link.mac = "02:00:00:00:00:02";
    std::string err;
    if (!env || !roce::perf::parse_link_text(env, link, err)) {
      std::fprintf(stderr,
                   "naaice: set NAAICE_ROCE to the appliance stack's link, e.g. "
                   "pmd=memif,socket=/tmp/naa.sock,role=client,ip=192.0.2.2,"
                   "mac=02:00:00:00:00:02 (%s)\n",
                   env ? err.c_str() : "NAAICE_ROCE is not set");
      return nullptr;
    }
    try {
      g_shared.stack = std::make_unique<EngineStack>(link);
      std::atexit(at_exit);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "naaice: cannot start the appliance stack: %s\n", e.what());
      return nullptr;
    }
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
  t->disconnect = t_disconnect;
  t->destroy = t_destroy;
  t->error = t_error;
  return t;
}
