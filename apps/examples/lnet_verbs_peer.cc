/// @file
/// roce-lnet-verbs-peer: a transfer machine of the messaging API (client/lnet), owned by a
/// process attached to roced, as the server of rdma-core's ibv_rc_pingpong or
/// ibv_srq_pingpong. The pingpong client (an rdma-core program, e.g. on Linux rxe) connects
/// over TCP and exchanges its QP numbers the pingpong way (apps/common/pingpong_proto.h); each
/// of its QPs becomes a foreign connection of the Tm (Tm::foreign_open/foreign_connect). Its
/// SENDs land in the Tm's receive pool of multi-message buffers, several to a buffer, and
/// every message is answered on the QP it came from with a message of the same size, as the
/// pingpong server does. At the end it prints how many messages and bytes arrived, in how many
/// buffers, and checks the bytes (the tools send 0x7b bytes, srq_pingpong zeros).
///
///   roce-lnet-verbs-peer --socket /run/roce/roced.sock [--kind rc|srq] [--qps 16]
///                        [--size 4096] [--iters 1000] [--per-buffer 8] [--tcp-port 18515]
/// then, on the peer: ibv_rc_pingpong -s 4096 -n 1000 -g GID_INDEX HOST
#include <arpa/inet.h>
#include <netinet/in.h>
#include <roce/lnet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "apps/common/pingpong_proto.h"
#include "controlplane/tcp.h"

using namespace roce;
using namespace roce::lnet;

namespace {

struct Args {
  std::string socket, kind = "rc";
  std::uint32_t qps = 1, size = 4096, iters = 1000, per_buffer = 8, buffers = 8;
  std::uint16_t tcp_port = 18515;
  bool qps_given = false;
};

using pp::kSrqMaxQp;                          ///< srq_pingpong's table of QP addresses
constexpr std::uint32_t kSrqDefaultQps = 16;  ///< its -q
constexpr std::uint32_t kMaxQps = 64;         ///< foreign connections of one Tm, here

int fail(const std::string& what) {
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  return 1;
}

int run(const Args& a, client::Context& ctx) {
  const bool srq = a.kind == "srq";
  const std::uint8_t fill = srq ? 0 : 0x7b;  // what the tools' buffers hold
  DomainOptions o;
  o.pid = 0;
  o.oob_host = "127.0.0.1";
  Domain dom(ctx, o);
  // Multi-message receive buffers: room for per_buffer messages of the peer's size each.
  BufferPool pool(dom, a.buffers, 1, std::uint64_t{a.size} * a.per_buffer);
  if (pool.size() != a.buffers) return fail("pool allocation");
  pool.set_receive_limits(a.size, a.per_buffer);
  Tm tm(dom);

  // Replies: one buffer per message in flight (the peer has at most one per QP).
  std::mutex mu;
  std::vector<NetBuffer*> replies;
  for (std::uint32_t i = 0; i < a.qps * 2; ++i) {
    NetBuffer* nb = dom.alloc_buffer(1, a.size);
    if (!nb) return fail("reply buffer");
    std::memset(nb->segs[0].addr, fill, a.size);
    replies.push_back(nb);
  }
  std::atomic<std::uint32_t> received{0}, sent{0}, errors{0}, late{0};
  std::atomic<std::uint64_t> bytes{0};
  std::map<const NetBuffer*, std::uint32_t> in_buffer;  // messages in the buffer being filled
  std::map<std::uint32_t, std::uint32_t> per_buffer;    // buffers by their message count
  std::vector<EndPoint> backlog;                        // replies waiting for a buffer

  const auto reply = [&](const EndPoint& to) {  // under mu
    for (NetBuffer* nb : replies) {
      if (nb->flags & kBufQueued) continue;
      nb->length = a.size;
      nb->ep = to;
      if (const int rc = tm.add(*nb, QueueType::kMsgSend)) {
        std::printf("FAIL: reply: %s\n", std::strerror(rc));
        ++errors;
      }
      return;
    }
    backlog.push_back(to);
  };
  for (NetBuffer* nb : replies)
    nb->cb = [&](const BufferEvent& ev) {
      std::lock_guard<std::mutex> g(mu);
      if (ev.status != 0 && received >= a.iters) {
        // srq_pingpong stops once it has its -n, with answers to its last messages still on
        // the way: they find its QPs gone.
        ++late;
      } else if (ev.status != 0) {
        std::printf("FAIL: reply completed with %d\n", ev.status);
        ++errors;
      }
      ++sent;
      if (!backlog.empty()) {
        const EndPoint to = backlog.front();
        backlog.erase(backlog.begin());
        reply(to);
      }
    };
  const auto on_msg = [&](const BufferEvent& ev) {
    NetBuffer& nb = *ev.buf;
    std::lock_guard<std::mutex> g(mu);
    if (ev.status != 0) {
      if (ev.status != -ECANCELED) {
        std::printf("FAIL: receive status %d\n", ev.status);
        ++errors;
      }
    } else {
      const auto* p = static_cast<const std::uint8_t*>(nb.segs[0].addr) + ev.offset;
      bool good = ev.length == a.size && ev.ep.has_value();
      for (std::uint64_t i = 0; good && i < ev.length; ++i) good = p[i] == fill;
      if (!good) {
        std::printf("FAIL: message %u: %llu bytes at offset %llu, contents %s\n", received.load(),
                    static_cast<unsigned long long>(ev.length),
                    static_cast<unsigned long long>(ev.offset), good ? "ok" : "wrong");
        ++errors;
      }
      ++received;
      bytes += ev.length;
      ++in_buffer[&nb];
      if (ev.ep) reply(*ev.ep);
    }
    if (!(nb.flags & kBufQueued)) {  // the buffer's last message: back to the pool
      if (in_buffer[&nb]) ++per_buffer[in_buffer[&nb]];
      in_buffer.erase(&nb);
      pool.put(&nb);
    }
  };
  if (tm.pool_attach(pool, on_msg, a.buffers / 2)) return fail("pool_attach");
  const std::uint32_t ip = ctx.port().ipv4.v;
  const std::string me = std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." +
                         std::to_string((ip >> 8) & 255) + "." + std::to_string(ip & 255);
  if (const int rc = tm.start(me + "@roce:0:7:*"))  // the port's address, a dynamic TMID
    return fail(std::string("Tm start: ") + std::strerror(rc));
  std::printf("transfer machine %s: %u buffers of %u bytes, up to %u messages each\n",
              tm.ep().str().c_str(), a.buffers, a.size * a.per_buffer, a.per_buffer);

  // The pingpong exchange: the client writes its addresses, we connect and answer, it says
  // "done".
  const int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(a.tcp_port);
  if (::bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa) || ::listen(ls, 1))
    return fail("cannot listen on TCP " + std::to_string(a.tcp_port));
  std::printf("waiting for ibv_%s_pingpong on TCP %u\n", a.kind.c_str(), a.tcp_port);
  const int fd = ::accept(ls, nullptr, nullptr);
  ::close(ls);
  if (fd < 0) return fail("accept");
  const std::uint32_t nmsg = srq ? kSrqMaxQp : 1;
  std::vector<pp::Dest> peer(nmsg);
  for (std::uint32_t i = 0; i < nmsg; ++i) {
    std::array<char, pp::kMsgLen> m{};
    if (!ctl::read_all(fd, m.data(), m.size())) return fail("the peer closed the exchange");
    if (i >= a.qps) continue;
    const auto d = pp::dest_of(m);
    if (!d) return fail("malformed QP address from the peer");
    peer[i] = *d;
  }
  const auto& g = peer[0].gid.b;
  const std::string nid = std::to_string(g[12]) + "." + std::to_string(g[13]) + "." +
                          std::to_string(g[14]) + "." + std::to_string(g[15]);
  std::vector<std::array<char, pp::kMsgLen>> mine(nmsg);
  for (std::uint32_t i = 0; i < nmsg; ++i) {
    pp::Dest d;
    if (i < a.qps) {
      // Each of the peer's QPs is an end point of its own in the Tm's events.
      const auto ep = EndPoint::parse(nid + "@roce:3:7:" + std::to_string(i));
      if (!ep) return fail("the peer's GID " + nid + " is not IPv4-mapped");
      std::uint32_t qpn = 0, psn = 0;
      if (const int rc = tm.foreign_open(*ep, qpn, psn))
        return fail(std::string("foreign_open: ") + std::strerror(rc));
      client::RcPeer far;
      far.qpn = peer[i].qpn;
      far.psn = peer[i].psn;
      far.gid = peer[i].gid;
      if (const int rc = tm.foreign_connect(*ep, far, client::Mtu::k1024))
        return fail(std::string("foreign_connect: ") + std::strerror(rc));
      d.qpn = qpn;
      d.psn = psn;
      d.gid = ctx.port().gid;
      std::printf("  QP 0x%06x <-> the peer's QP 0x%06x as %s\n", qpn, peer[i].qpn,
                  ep->str().c_str());
    }
    mine[i] = pp::msg(d);
  }
  for (auto& m : mine)
    if (!ctl::write_all(fd, m.data(), m.size())) return fail("the peer closed the exchange");
  char done[5];
  if (!ctl::read_all(fd, done, sizeof done)) return fail("no 'done' from the peer");

  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while ((received < a.iters || sent < received) && std::chrono::steady_clock::now() < end &&
         !errors)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::close(fd);
  // The peer's last messages may still be coming in (srq_pingpong counts over all QPs).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const TmStats st = tm.stats();
  tm.stop();
  std::lock_guard<std::mutex> lk(mu);
  std::uint32_t full = 0, total_bufs = 0;
  for (auto [count, n] : per_buffer) {
    std::printf("buffers holding %u messages: %u\n", count, n);
    total_bufs += n;
    if (count > 1) full += n;
  }
  std::printf(
      "%u messages (%llu bytes) from %u QPs in %u receive buffers, %u replies (%u after "
      "the peer finished, failed), Tm counters: %llu messages, %llu bytes\n",
      received.load(), static_cast<unsigned long long>(bytes.load()), a.qps, total_bufs,
      sent.load(), late.load(), static_cast<unsigned long long>(st.msgs_received),
      static_cast<unsigned long long>(st.bytes_received));
  if (errors) return fail(std::to_string(errors.load()) + " errors");
  if (received < a.iters) return fail("fewer messages than -n");
  if (bytes != std::uint64_t{received} * a.size || st.bytes_received != bytes)
    return fail("byte counts differ");
  if (full == 0) return fail("no buffer took more than one message");
  std::printf("OK: %u messages of %u bytes from the verbs peer, several to a buffer\n",
              received.load(), a.size);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    const auto num = [&] { return static_cast<std::uint32_t>(std::stoul(v)); };
    if (k == "--socket")
      a.socket = v;
    else if (k == "--kind")
      a.kind = v;
    else if (k == "--qps")
      a.qps = num(), a.qps_given = true;
    else if (k == "--size")
      a.size = num();
    else if (k == "--iters")
      a.iters = num();
    else if (k == "--per-buffer")
      a.per_buffer = num();
    else if (k == "--buffers")
      a.buffers = num();
    else if (k == "--tcp-port")
      a.tcp_port = static_cast<std::uint16_t>(num());
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (a.kind == "srq" && !a.qps_given) a.qps = kSrqDefaultQps;
  if (a.socket.empty() || (a.kind != "rc" && a.kind != "srq") || a.qps == 0 || a.qps > kMaxQps ||
      (a.kind == "rc" && a.qps != 1) || a.size == 0 || a.size > (1u << 20) || a.per_buffer == 0 ||
      a.buffers < 2) {
    std::fprintf(stderr,
                 "usage: roce-lnet-verbs-peer --socket PATH [--kind rc|srq] [--qps N (srq, <= 64)] "
                 "[--size BYTES] [--iters N] [--per-buffer N] [--buffers N >= 2] [--tcp-port P]\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  auto ctx = client::Context::attach(a.socket);
  if (!ctx) {
    std::fprintf(stderr, "FAIL: attach %s: %s\n", a.socket.c_str(), std::strerror(errno));
    return 1;
  }
  return run(a, *ctx);
}
