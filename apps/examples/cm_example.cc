/// @file
/// roce-cm-example: rdma_cm through libroce (Context::cm_*), the exchange of librdmacm's
/// rdma_server and rdma_client examples. The client posts a receive, connects, SENDs 16
/// bytes, waits for both completions and disconnects; the server listens, accepts with a
/// receive posted, answers the 16 bytes it got with a SEND of its own and waits for the
/// disconnect. No TCP: the QPs are set up by the connection manager of roced's port (or of
/// the in-process engine). Interoperates with rdma-core's rdma_server / rdma_client.
///
///   roce-cm-example --socket /run/roce/a.sock --listen 7471 [--reject] [--count N]
///   roce-cm-example --socket /run/roce/b.sock --connect 192.0.2.61:7471 [--private TEXT]
/// --echo: the server answers with the bytes it received (and the client checks them);
/// --expect-reject: the client succeeds only when the server refuses (a --reject server, or
/// a port nobody listens to). --hold: once connected, both sides only wait for the other to
/// end the connection (the test kills one of them).
#include <arpa/inet.h>
#include <roce/client.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

using namespace roce;
using namespace roce::client;

namespace {

constexpr std::uint32_t kMsg = 16;

struct Args {
  std::string socket, connect;
  std::uint16_t listen = 0;
  bool reject = false, echo = false, expect_reject = false, hold = false;
  unsigned count = 1;
  std::string priv;
};

int fail(const std::string& what, int err = 0) {
  std::fprintf(stderr, "FAIL: %s%s%s\n", what.c_str(), err ? ": " : "",
               err ? std::strerror(err) : "");
  return 1;
}

const char* name(CmEventType t) {
  switch (t) {
    case CmEventType::kConnectRequest:
      return "CONNECT_REQUEST";
    case CmEventType::kEstablished:
      return "ESTABLISHED";
    case CmEventType::kRejected:
      return "REJECTED";
    case CmEventType::kUnreachable:
      return "UNREACHABLE";
    case CmEventType::kConnectError:
      return "CONNECT_ERROR";
    case CmEventType::kDisconnected:
      return "DISCONNECTED";
    case CmEventType::kSidrRequest:
      return "SIDR_REQUEST";
    case CmEventType::kSidrReply:
      return "SIDR_REPLY";
    case CmEventType::kDeviceRemoval:
      return "DEVICE_REMOVAL";
  }
  return "?";
}

/// The next CM event (at most 20 s).
bool next_event(Context& ctx, CmEvent& ev) {
  const int rc = ctx.cm_get_event(ev, 20000);
  if (rc != 0) {
    fail("no CM event", rc);
    return false;
  }
  std::printf("cm event %s (id %u, peer %s)\n", name(ev.type), ev.id,
              inet_ntoa(in_addr{htonl(ev.peer.v)}));
  return true;
}

/// One completion of `cq` (at most 20 s); false on an error status.
bool complete(Context& ctx, Cq* cq, Wc& wc) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    const int n = ctx.poll_cq(cq, 1, &wc);
    if (n < 0) return fail("poll_cq", -n) == 0;
    if (n == 1) break;
    if (std::chrono::steady_clock::now() > end) return fail("no completion within 20 s") == 0;
    ctx.wait_cq(cq, 100);
  }
  if (wc.status != WcStatus::kSuccess)
    return fail(std::string("completion with ") + std::string(verbs::to_string(wc.status))) == 0;
  return true;
}

struct Res {
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  Qp* qp = nullptr;
  Buffer* buf = nullptr;
  Mr* mr = nullptr;
  std::uint8_t* send() { return static_cast<std::uint8_t*>(buf->addr); }
  std::uint8_t* recv() { return static_cast<std::uint8_t*>(buf->addr) + kMsg; }
};

bool make(Context& ctx, Res& r) {
  r.pd = r.pd ? r.pd : ctx.alloc_pd();
  r.cq = r.cq ? r.cq : ctx.create_cq(16);
  r.buf = r.buf ? r.buf : ctx.alloc_buffer(2 * kMsg);
  if (!r.mr && r.pd && r.buf)
    r.mr = ctx.reg_mr(r.pd, r.buf->addr, 2 * kMsg, verbs::kAccessLocalWrite);
  if (!r.pd || !r.cq || !r.buf || !r.mr) return false;
  QpCap cap;
  cap.max_send_wr = cap.max_recv_wr = 1;
  cap.max_send_sge = cap.max_recv_sge = 1;
  r.qp = ctx.create_qp(r.pd, QpType::kRc, r.cq, r.cq, cap, nullptr, true);
  return r.qp != nullptr;
}

int post_recv(Context& ctx, Res& r) {
  Sge sge{reinterpret_cast<std::uint64_t>(r.recv()), kMsg, r.mr->lkey};
  RecvWr wr;
  wr.wr_id = 2;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ctx.post_recv(r.qp, &wr, nullptr);
}

int post_send(Context& ctx, Res& r) {
  Sge sge{reinterpret_cast<std::uint64_t>(r.send()), kMsg, r.mr->lkey};
  SendWr wr;
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = WrOpcode::kSend;
  wr.send_flags = verbs::kSendSignaled;
  return ctx.post_send(r.qp, &wr, nullptr);
}

/// --hold: connected, waits (up to 60 s) for the peer to end the connection.
int hold(Context& ctx) {
  std::printf("holding the connection\n");
  CmEvent ev;
  const int rc = ctx.cm_get_event(ev, 60000);
  if (rc != 0) return fail("no CM event", rc);
  if (ev.type != CmEventType::kDisconnected || !ev.remote)
    return fail(std::string("expected the peer's disconnect, got ") + name(ev.type));
  std::printf("OK: the peer ended the connection\n");
  return 0;
}

int run_server(Context& ctx, const Args& a) {
  if (const int rc = ctx.cm_listen(a.listen)) return fail("cm_listen", rc);
  std::printf("listening on rdma_cm port %u\n", a.listen);
  std::fflush(stdout);
  Res r;
  for (unsigned n = 0; n < a.count; ++n) {
    CmEvent ev;
    if (!next_event(ctx, ev)) return 1;
    if (ev.type != CmEventType::kConnectRequest) return fail("expected a connect request");
    std::printf("request from %s, private data %zu bytes: '%.*s'\n",
                inet_ntoa(in_addr{htonl(ev.peer.v)}), ev.private_data.size(),
                static_cast<int>(ev.private_data.size()),
                reinterpret_cast<const char*>(ev.private_data.data()));
    if (a.reject) {
      const char why[] = "go away";
      if (const int rc =
              ctx.cm_reject(ev.id, {reinterpret_cast<const std::uint8_t*>(why), sizeof why}))
        return fail("cm_reject", rc);
      std::printf("OK: rejected\n");
      continue;
    }
    if (!make(ctx, r)) return fail("resources", errno);
    const std::uint32_t id = ev.id;
    if (const int rc = ctx.cm_accept(id, r.qp, CmConnParam{})) return fail("cm_accept", rc);
    // The CM moved the QP to RTS before its REP: the receive goes on before the client can
    // send (rdma_server posts it before rdma_accept, on a QP rdma_cm created in INIT).
    if (const int rc = post_recv(ctx, r)) return fail("post_recv", rc);
    CmEvent est;
    if (!next_event(ctx, est) || est.type != CmEventType::kEstablished)
      return fail("not established");
    if (a.hold) return hold(ctx);
    Wc wc;
    if (!complete(ctx, r.cq, wc)) return 1;
    if (wc.opcode != WcOpcode::kRecv || wc.byte_len != kMsg)
      return fail("expected a 16-byte message, got " + std::to_string(wc.byte_len));
    std::printf("received %u bytes\n", wc.byte_len);
    if (a.echo)
      std::memcpy(r.send(), r.recv(), kMsg);
    else
      std::memset(r.send(), 0x5a, kMsg);
    if (const int rc = post_send(ctx, r)) return fail("post_send", rc);
    if (!complete(ctx, r.cq, wc)) return 1;
    CmEvent end;
    if (!next_event(ctx, end) || end.type != CmEventType::kDisconnected)
      return fail("expected the client's disconnect");
    ctx.destroy_qp(r.qp);
    r.qp = nullptr;
    std::printf("OK: connection %u: request, accept, 16 bytes each way, disconnect\n", n + 1);
  }
  return 0;
}

int run_client(Context& ctx, const Args& a) {
  const auto colon = a.connect.rfind(':');
  in_addr ia{};
  if (colon == std::string::npos || ::inet_aton(a.connect.substr(0, colon).c_str(), &ia) == 0)
    return fail("--connect takes IPV4:PORT");
  const Ipv4Addr dst{ntohl(ia.s_addr)};
  const auto port = static_cast<std::uint16_t>(std::stoul(a.connect.substr(colon + 1)));
  Res r;
  if (!make(ctx, r)) return fail("resources", errno);
  for (std::uint32_t i = 0; i < kMsg; ++i) r.send()[i] = static_cast<std::uint8_t>(0xa0 + i);
  CmConnParam p;
  p.private_data.assign(a.priv.begin(), a.priv.end());
  std::uint32_t id = 0;
  int rc = 0;
  for (int tries = 0; tries < 100; ++tries) {  // the server may not listen yet
    if ((rc = ctx.cm_connect(r.qp, dst, port, p, id))) return fail("cm_connect", rc);
    CmEvent ev;
    if (!next_event(ctx, ev)) return 1;
    if (ev.type == CmEventType::kEstablished) break;
    if (ev.type == CmEventType::kRejected && a.expect_reject) {
      std::printf("OK: rejected (reason %u), private data '%.*s'\n", ev.reason,
                  static_cast<int>(ev.private_data.size()),
                  reinterpret_cast<const char*>(ev.private_data.data()));
      return 0;
    }
    if (ev.type != CmEventType::kRejected || ev.reason != 8)  // 8: invalid service ID
      return fail(std::string("connect ended with ") + name(ev.type));
    // Nobody listens yet: a new QP for the next try (the refused one stays in error).
    ctx.destroy_qp(r.qp);
    r.qp = nullptr;
    if (!make(ctx, r)) return fail("resources", errno);
    ::usleep(100000);
  }
  if (a.expect_reject) return fail("connected, but a reject was expected");
  if (a.hold) return hold(ctx);
  if ((rc = post_recv(ctx, r))) return fail("post_recv", rc);
  if ((rc = post_send(ctx, r))) return fail("post_send", rc);
  Wc wc;
  bool sent = false, got = false;
  while (!sent || !got) {
    if (!complete(ctx, r.cq, wc)) return 1;
    if (wc.opcode == WcOpcode::kSend) sent = true;
    if (wc.opcode == WcOpcode::kRecv) got = wc.byte_len == kMsg;
  }
  if (a.echo && std::memcmp(r.send(), r.recv(), kMsg) != 0) return fail("the echo differs");
  std::printf("received %u bytes%s\n", kMsg, a.echo ? ", our own echoed" : "");
  if ((rc = ctx.cm_disconnect(id))) return fail("cm_disconnect", rc);
  CmEvent ev;
  if (!next_event(ctx, ev) || ev.type != CmEventType::kDisconnected)
    return fail("expected the disconnect's end");
  std::printf("OK: connected by rdma_cm, 16 bytes each way, disconnected\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--socket")
      a.socket = next();
    else if (k == "--listen")
      a.listen = static_cast<std::uint16_t>(std::stoul(next()));
    else if (k == "--connect")
      a.connect = next();
    else if (k == "--reject")
      a.reject = true;
    else if (k == "--echo")
      a.echo = true;
    else if (k == "--expect-reject")
      a.expect_reject = true;
    else if (k == "--hold")
      a.hold = true;
    else if (k == "--count")
      a.count = static_cast<unsigned>(std::stoul(next()));
    else if (k == "--private")
      a.priv = next();
    else {
      std::fprintf(stderr,
                   "usage: roce-cm-example --socket PATH (--listen PORT [--reject] [--count N] | "
                   "--connect IPV4:PORT [--private TEXT] [--expect-reject]) [--echo]\n");
      return 2;
    }
  }
  if (a.socket.empty() || (a.listen == 0) == a.connect.empty()) {
    std::fprintf(stderr, "roce-cm-example: --socket and one of --listen/--connect (try --help)\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  auto ctx = Context::attach(a.socket);
  if (!ctx) return fail("attach " + a.socket, errno);
  return a.listen ? run_server(*ctx, a) : run_client(*ctx, a);
}
