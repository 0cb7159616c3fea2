/// @file
/// roce-lnet-ping: the messaging API (client/lnet, docs/client-api.md "The messaging API")
/// between two processes attached to roced. The server runs a transfer machine fed by a
/// receive buffer pool of multi-message buffers and delivers events asynchronously; the client
/// takes a dynamic address ("*") and delivers events synchronously (pending/deliver_all/notify).
///   1. the client sends 12 messages of 1000 bytes; the server's buffers take 4 each
///      (max_receive_msgs) and it checks every byte, offset, count and total;
///   2. passive bulk send on the client (2 segments), active bulk receive (RDMA READ) on the
///      server; passive bulk receive on the client, active bulk send (RDMA WRITE) on the server;
///      every byte checked on the receiving side;
///   3. N ping-pongs of 8-byte messages (the server answers the sender's end point).
///   roce-lnet-ping --socket A.sock --pid 0 --addr 192.0.2.61@roce:0:5:1 --oob-host 127.0.0.1
///   roce-lnet-ping --socket B.sock --pid 1 --addr 192.0.2.62@roce:1:5:*
///                  --peer 192.0.2.61@roce:0:5:1 --oob-host 127.0.0.1 [--pingpong N]
#include <poll.h>
#include <roce/lnet.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#ifdef ROCE_EXAMPLE_LOCAL
#include "apps/examples/number_arg.h"
#include "client/local/local_context.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/poll_loop.h"
#include "runtime/env.h"
#endif

using namespace roce;
using namespace roce::lnet;

namespace {

constexpr std::uint32_t kMsgs = 12, kMsgLen = 1000, kPerBuffer = 4;
constexpr std::uint64_t kBulk = 65536;

int fail(const char* what) {
  std::fprintf(stderr, "FAIL: %s\n", what);
  return 1;
}

std::uint8_t pattern(std::uint32_t seed, std::uint64_t i) {
  return static_cast<std::uint8_t>(i * seed + (i >> 8) + seed);
}

void fill(NetBuffer& nb, std::uint32_t seed) {
  std::uint64_t i = 0;
  for (const Segment& s : nb.segs)
    for (std::uint64_t k = 0; k < s.length; ++k, ++i)
      static_cast<std::uint8_t*>(s.addr)[k] = pattern(seed, i);
}
bool check(const NetBuffer& nb, std::uint32_t seed, std::uint64_t len) {
  std::uint64_t i = 0;
  for (const Segment& s : nb.segs)
    for (std::uint64_t k = 0; k < s.length && i < len; ++k, ++i)
      if (static_cast<const std::uint8_t*>(s.addr)[k] != pattern(seed, i)) return false;
  return i == len;
}

/// A message: a type byte, then the payload, in a one-segment send buffer.
struct Sender {
  Domain& dom;
  Tm& tm;
  std::vector<NetBuffer*> bufs;
  std::atomic<std::uint64_t> done{0}, failed{0};
  Sender(Domain& d, Tm& t) : dom(d), tm(t) {
    for (int i = 0; i < 16; ++i) {
      NetBuffer* nb = dom.alloc_buffer(1, 4096);
      nb->cb = [this](const BufferEvent& ev) {
        if (ev.status != 0) failed.fetch_add(1);
        done.fetch_add(1);
      };
      bufs.push_back(nb);
    }
  }
  ~Sender() {
    for (NetBuffer* nb : bufs) dom.free_buffer(nb);
  }
  int send(const EndPoint& to, char type, const void* p, std::size_t n) {
    for (NetBuffer* nb : bufs) {
      if (nb->flags & kBufQueued) continue;
      auto* b = static_cast<std::uint8_t*>(nb->segs[0].addr);
      b[0] = static_cast<std::uint8_t>(type);
      std::memcpy(b + 1, p, n);
      nb->length = n + 1;
      nb->ep = to;
      return tm.add(*nb, QueueType::kMsgSend);
    }
    return EBUSY;
  }
};

struct Args {
  std::string socket, local_memif, addr, peer, oob_host = "127.0.0.1";
  std::string metrics;  ///< HOST:PORT of the statistics endpoint (roce-ctl lnet), empty: none
  std::uint32_t pid = 0, pingpong = 100;
  std::uint16_t oob_base = kOobPortBase;
};

/// --metrics HOST:PORT: the Tm's per-queue statistics (m0_net_qstats) and connection counters
/// in Prometheus' format at http://HOST:PORT/metrics, for Prometheus and `roce-ctl lnet`.
bool serve_metrics(const Args& a, MetricsEndpoint& m, Tm& tm) {
  if (a.metrics.empty()) return true;
  const auto colon = a.metrics.rfind(':');
  const auto port = colon == std::string::npos
                        ? std::nullopt
                        : examples::number_arg<std::uint16_t>(a.metrics.substr(colon + 1));
  if (!port) {
    std::fprintf(stderr, "FAIL: --metrics %s: not HOST:PORT\n", a.metrics.c_str());
    return false;
  }
  const int rc =
      m.start(a.metrics.substr(0, colon), *port, [&tm] { return prometheus_text({&tm}); });
  if (rc != 0) {
    std::fprintf(stderr, "FAIL: --metrics %s: %s\n", a.metrics.c_str(), std::strerror(rc));
    return false;
  }
  std::printf("metrics: http://%s:%u/metrics\n", a.metrics.substr(0, colon).c_str(), m.port());
  return true;
}

// ---- server: asynchronous delivery, a pool of multi-message buffers --------------------------

int run_server(const Args& a, client::Context& ctx) {
  DomainOptions o;
  o.pid = a.pid;
  o.oob_host = a.oob_host;
  o.oob_port_base = a.oob_base;
  o.serialize_context = !a.local_memif.empty();  // the in-process engine is single threaded
  Domain dom(ctx, o);
  BufferPool pool(dom, 8, 2, 8192);  // 16 KiB buffers of two segments
  if (pool.size() != 8) return fail("pool allocation");
  pool.set_receive_limits(kMsgLen + 24, kPerBuffer);
  Tm tm(dom);
  Sender tx(dom, tm);
  NetBuffer* bulk = dom.alloc_buffer(4, kBulk / 4);  // four segments
  std::atomic<bool> finished{false};
  std::atomic<int> errors{0};
  std::uint32_t msgs = 0, bufs_done = 0, in_buf = 0;
  std::uint64_t bytes = 0, in_buf_bytes = 0, next_off = 0;
  std::uint32_t pings = 0;

  bulk->cb = [&](const BufferEvent& ev) {
    const bool read = ev.queue == QueueType::kActiveBulkRecv;
    if (ev.status != 0 || ev.length != kBulk || (read && !check(*bulk, 7, kBulk))) {
      std::printf("FAIL: active bulk %s status %d length %llu\n", read ? "recv" : "send", ev.status,
                  static_cast<unsigned long long>(ev.length));
      ++errors;
      return;
    }
    std::printf("OK: active bulk %s of %llu bytes%s\n",
                read ? "receive (RDMA READ)" : "send (RDMA WRITE)",
                static_cast<unsigned long long>(ev.length), read ? ", data verified" : "");
  };
  auto on_msg = [&](const BufferEvent& ev) {
    NetBuffer& nb = *ev.buf;
    if (ev.status != 0) {
      std::printf("FAIL: receive status %d\n", ev.status);
      ++errors;
    } else {
      // The message starts at ev.offset of the buffer vector (two segments of 8 KiB).
      std::vector<std::uint8_t> m(ev.length);
      std::uint64_t off = ev.offset, i = 0;
      for (const Segment& s : nb.segs) {
        for (std::uint64_t k = 0; k < s.length && i < ev.length; ++k)
          if (off == 0)
            m[i++] = static_cast<std::uint8_t*>(s.addr)[k];
          else
            --off;
      }
      const char type = static_cast<char>(m[0]);
      if (type == 'M') {
        const std::uint32_t seq = m[1];
        bool good = ev.length == kMsgLen && ev.offset == next_off && seq == msgs;
        for (std::uint32_t k = 2; good && k < kMsgLen; ++k) good = m[k] == pattern(seq + 1, k);
        if (!good) {
          std::printf("FAIL: message %u: length %llu offset %llu (want %llu)\n", seq,
                      static_cast<unsigned long long>(ev.length),
                      static_cast<unsigned long long>(ev.offset),
                      static_cast<unsigned long long>(next_off));
          ++errors;
        }
        ++msgs;
        ++in_buf;
        bytes += ev.length;
        in_buf_bytes += ev.length;
        next_off = ev.offset + ev.length;
        if (!(nb.flags & kBufQueued)) {  // the buffer's last message: it is ours again
          std::printf("buffer %u: %u messages, %llu bytes\n", bufs_done, in_buf,
                      static_cast<unsigned long long>(in_buf_bytes));
          if (in_buf != kPerBuffer) ++errors;
          ++bufs_done;
          in_buf = 0;
          in_buf_bytes = 0;
          next_off = 0;
        }
        if (msgs == kMsgs)
          std::printf("%s: %u messages in %u multi-message buffers, %llu bytes\n",
                      bufs_done == kMsgs / kPerBuffer ? "OK" : "FAIL", msgs, bufs_done,
                      static_cast<unsigned long long>(bytes));
      } else if (type == 'S' || type == 'R') {  // a peer's passive buffer: move the data
        bulk->desc.assign(m.begin() + 1, m.end());
        if (type == 'R') fill(*bulk, 13);
        bulk->length = 0;
        const int rc =
            tm.add(*bulk, type == 'S' ? QueueType::kActiveBulkRecv : QueueType::kActiveBulkSend);
        if (rc) {
          std::printf("FAIL: active bulk add: %s\n", std::strerror(rc));
          ++errors;
        }
      } else if (type == 'P') {
        ++pings;
        tx.send(*ev.ep, 'Q', m.data() + 1, ev.length - 1);  // answer the sender's end point
      } else if (type == 'E') {
        finished = true;
      }
    }
    // [r.m0.net.xprt.support-for-auto-provisioned-receive-queue]: a buffer still QUEUED
    // (room for more messages) is not returned; the rest go back to the pool.
    if (!(nb.flags & kBufQueued)) pool.put(&nb);
  };
  if (tm.pool_attach(pool, on_msg, 2) != 0) return fail("pool_attach");
  if (const int rc = tm.start(a.addr)) {
    std::fprintf(stderr, "FAIL: start %s: %s\n", a.addr.c_str(), std::strerror(rc));
    return 1;
  }
  MetricsEndpoint metrics;  // before tm goes
  if (!serve_metrics(a, metrics, tm)) return 1;
  std::printf("server: transfer machine %s, receive queue %zu\n", tm.ep().str().c_str(),
              tm.queue_length(QueueType::kMsgRecv));
  std::fflush(stdout);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!finished && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the last answers
  const TmStats st = tm.stats();
  tm.stop();
  std::printf(
      "server: %u pings answered, %llu messages received, %llu connections, %llu "
      "buffers provisioned, pool %u/%u free\n",
      pings, static_cast<unsigned long long>(st.msgs_received),
      static_cast<unsigned long long>(st.connections),
      static_cast<unsigned long long>(st.provisioned), pool.free_count(), pool.size());
  dom.free_buffer(bulk);
  if (!finished) return fail("no end message");
  if (pool.free_count() != pool.size()) return fail("pool buffers not returned on stop");
  return errors == 0 && msgs == kMsgs ? 0 : 1;
}

// ---- client: synchronous delivery ---------------------------------------------------------------

int run_client(const Args& a, client::Context& ctx) {
  const auto peer = EndPoint::parse(a.peer);
  if (!peer || !peer->tmid) return fail("--peer");
  DomainOptions o;
  o.pid = a.pid;
  o.oob_host = a.oob_host;
  o.oob_port_base = a.oob_base;
  o.serialize_context = !a.local_memif.empty();
  Domain dom(ctx, o);
  BufferPool pool(dom, 4, 1, 4096);
  Tm tm(dom);
  Sender tx(dom, tm);
  std::uint32_t pongs = 0;
  std::vector<std::uint8_t> last;
  tm.deliver_synchronously();
  tm.pool_attach(pool, [&](const BufferEvent& ev) {
    if (ev.status == 0) {
      auto* b = static_cast<std::uint8_t*>(ev.buf->segs[0].addr) + ev.offset;
      if (b[0] == 'Q') ++pongs, last.assign(b + 1, b + ev.length);
    }
    if (!(ev.buf->flags & kBufQueued)) pool.put(ev.buf);
  });
  if (const int rc = tm.start(a.addr)) {
    std::fprintf(stderr, "FAIL: start %s: %s\n", a.addr.c_str(), std::strerror(rc));
    return 1;
  }
  MetricsEndpoint metrics;  // before tm goes
  if (!serve_metrics(a, metrics, tm)) return 1;
  std::printf("client: transfer machine %s (dynamic TMID from the top: %u)\n",
              tm.ep().str().c_str(), *tm.ep().tmid);
  const int efd = eventfd(0, EFD_CLOEXEC);
  // The request-handler pattern of the seed: deliver what is pending, else ask for a
  // notification and sleep on the eventfd.
  auto wait_for = [&](auto pred, const char* what) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > until) {
        std::fprintf(stderr, "FAIL: timed out waiting for %s\n", what);
        return false;
      }
      if (tm.pending()) {
        tm.deliver_all();
        continue;
      }
      tm.notify(efd);
      pollfd p{efd, POLLIN, 0};
      if (poll(&p, 1, 100) == 1) {
        std::uint64_t v;
        (void)!read(efd, &v, sizeof v);
      }
    }
    return true;
  };

  // 1. messages for the server's multi-message buffers
  for (std::uint32_t i = 0; i < kMsgs; ++i) {
    std::uint8_t m[kMsgLen - 1];
    m[0] = static_cast<std::uint8_t>(i);
    for (std::uint32_t k = 2; k < kMsgLen; ++k) m[k - 1] = pattern(i + 1, k);
    while (tx.send(*peer, 'M', m, sizeof m) == EBUSY)
      if (!wait_for([&] { return tx.done.load() > i - 8; }, "send buffers")) return 1;
  }
  if (!wait_for([&] { return tx.done.load() == kMsgs; }, "message sends")) return 1;
  if (tx.failed) return fail("message send events");
  std::printf("OK: %u messages of %u bytes sent\n", kMsgs, kMsgLen);

  // 2. passive bulk send (the server reads), then passive bulk receive (the server writes)
  NetBuffer* bulk = dom.alloc_buffer(2, kBulk / 2);
  int bstatus = 1;
  std::uint64_t blen = 0;
  bulk->cb = [&](const BufferEvent& ev) {
    bstatus = ev.status;
    blen = ev.length;
  };
  fill(*bulk, 7);
  if (tm.add(*bulk, QueueType::kPassiveBulkSend)) return fail("passive send add");
  tx.send(*peer, 'S', bulk->desc.data(), bulk->desc.size());
  if (!wait_for([&] { return bstatus != 1; }, "passive bulk send")) return 1;
  if (bstatus != 0 || blen != kBulk) return fail("passive bulk send event");
  std::printf("OK: passive bulk send of %llu bytes (2 segments) read by the peer\n",
              static_cast<unsigned long long>(blen));
  bstatus = 1;
  std::memset(bulk->segs[0].addr, 0, kBulk / 2);
  std::memset(bulk->segs[1].addr, 0, kBulk / 2);
  if (tm.add(*bulk, QueueType::kPassiveBulkRecv)) return fail("passive recv add");
  tx.send(*peer, 'R', bulk->desc.data(), bulk->desc.size());
  if (!wait_for([&] { return bstatus != 1; }, "passive bulk receive")) return 1;
  if (bstatus != 0 || blen != kBulk || !check(*bulk, 13, kBulk))
    return fail("passive bulk receive data");
  std::printf("OK: passive bulk receive of %llu bytes written by the peer, data verified\n",
              static_cast<unsigned long long>(blen));

  // 3. ping-pong
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint32_t i = 0; i < a.pingpong; ++i) {
    std::uint64_t v = 0x5050000000000000ull + i;
    tx.send(*peer, 'P', &v, sizeof v);
    if (!wait_for([&] { return pongs == i + 1; }, "pong")) return 1;
    std::uint64_t got = 0;
    std::memcpy(&got, last.data(), std::min<std::size_t>(8, last.size()));
    if (got != v) return fail("pong payload");
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (a.pingpong)
    std::printf("OK: %u ping-pongs, %.1f us per round trip\n", a.pingpong, us / a.pingpong);
  tx.send(*peer, 'E', "", 0);
  wait_for([&] { return tx.done.load() >= kMsgs + 2 + a.pingpong + 1; }, "end message");
  tm.stop();
  dom.free_buffer(bulk);
  close(efd);
  std::printf("client: pool %u/%u free after stop\n", pool.free_count(), pool.size());
  return pool.free_count() == pool.size() ? 0 : fail("pool buffers not returned on stop");
}

#ifdef ROCE_EXAMPLE_LOCAL
// The in-process backend: an engine and poll loop of our own (runtime::Env) on one end of a
// memif link (192.0.2.81 for the server, .82 for the client), as roce-attach-example
// --local-memif.
std::unique_ptr<client::Context> open_local(std::unique_ptr<runtime::Env>& env,
                                            const std::string& memif, bool server) {
  const unsigned me = server ? 1 : 2;
  runtime::LinkOptions link;
  link.set_memif(memif, server ? "server" : "client");
  link.mac = "02:00:5e:00:0c:0" + std::to_string(me);
  link.ip = "192.0.2.8" + std::to_string(me);
  link.lcore = server ? 0 : 1;
  env = std::make_unique<runtime::Env>(link);
  return client::open_local(env->local_options("memif"));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--socket")
      a.socket = v;
    else if (k == "--local-memif")
      a.local_memif = v;
    else if (k == "--addr")
      a.addr = v;
    else if (k == "--peer")
      a.peer = v;
    else if (k == "--pid")
      if (const auto n = examples::number_arg<std::uint32_t>(v))
        a.pid = *n;
      else
        return std::fprintf(stderr, "%s: not a number: %s\n", k.c_str(), v.c_str()), 2;
    else if (k == "--oob-host")
      a.oob_host = v;
    else if (k == "--oob-base")
      if (const auto n = examples::number_arg<std::uint16_t>(v))
        a.oob_base = *n;
      else
        return std::fprintf(stderr, "%s: not a number: %s\n", k.c_str(), v.c_str()), 2;
    else if (k == "--pingpong")
      if (const auto n = examples::number_arg<std::uint32_t>(v))
        a.pingpong = *n;
      else
        return std::fprintf(stderr, "%s: not a number: %s\n", k.c_str(), v.c_str()), 2;
    else if (k == "--metrics")
      a.metrics = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (a.socket.empty() == a.local_memif.empty() || a.addr.empty()) {
    std::fprintf(stderr,
                 "usage: roce-lnet-ping (--socket PATH | --local-memif PATH) --pid N "
                 "--addr NID:PID:PORTAL:TMID "
                 "[--peer ADDR] [--oob-host IP] [--oob-base PORT] [--pingpong N] "
                 "[--metrics HOST:PORT]\n");
    return 2;
  }
  std::string err;
  if (!EndPoint::parse(a.addr, &err)) {
    std::fprintf(stderr, "FAIL: --addr %s: %s\n", a.addr.c_str(), err.c_str());
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::unique_ptr<client::Context> ctx;
#ifdef ROCE_EXAMPLE_LOCAL
  std::unique_ptr<runtime::Env> local;
  if (!a.local_memif.empty()) ctx = open_local(local, a.local_memif, a.peer.empty());
#else
  if (!a.local_memif.empty()) {
    std::fprintf(stderr, "FAIL: --local-memif: built without DPDK\n");
    return 2;
  }
#endif
  if (!a.socket.empty()) ctx = client::Context::attach(a.socket);
  if (!ctx) {
    std::fprintf(stderr, "FAIL: attach %s: %s\n", a.socket.c_str(), std::strerror(errno));
    return 1;
  }
  const int rc = a.peer.empty() ? run_server(a, *ctx) : run_client(a, *ctx);
  ctx.reset();
#ifdef ROCE_EXAMPLE_LOCAL
  if (local) {
    local.reset();
    port::eal_cleanup();
  }
#endif
  return rc;
}
