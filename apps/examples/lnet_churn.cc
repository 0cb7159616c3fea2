// roce-lnet-churn: a long-running server transfer machine and short-lived clients (the
// messaging API, client/lnet). The server answers every message "C<n>" with "R<n>" to its sender
// and keeps no reference to anyone, so a client that is gone leaves a connection nobody holds:
// the server must release those (tests/integration/lnet_churn.sh runs many clients in turn,
// some stopping cleanly, some killed). A client sends one message, waits for the answer and
// stops its Tm (goodbyes), or with --kill exits without stopping.
//   roce-lnet-churn --socket PATH --pid N --addr ADDR --serve COUNT [--metrics HOST:PORT]
//   roce-lnet-churn --socket PATH --pid N --addr ADDR --peer ADDR --id N [--kill]
//   (both: [--oob-host IP] [--oob-base PORT])
#include <roce/lnet.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "apps/examples/number_arg.h"

using namespace roce;
using namespace roce::lnet;

namespace {

struct Args {
  std::string socket, addr, peer, oob_host = "127.0.0.1", metrics;
  std::uint32_t pid = 0, serve = 0, id = 0;
  std::uint16_t oob_base = kOobPortBase;
  bool kill = false;
};

DomainOptions domain_options(const Args& a) {
  DomainOptions o;
  o.pid = a.pid;
  o.oob_host = a.oob_host;
  o.oob_port_base = a.oob_base;
  return o;
}

int serve(const Args& a, client::Context& ctx) {
  Domain dom(ctx, domain_options(a));
  BufferPool pool(dom, 16, 1, 256);
  Tm tm(dom);
  // Reply buffers: one per message in flight, reused when their send completes.
  std::mutex mu;
  std::vector<NetBuffer*> free_tx;
  std::vector<NetBuffer*> all_tx;
  for (int i = 0; i < 16; ++i) {
    NetBuffer* nb = dom.alloc_buffer(1, 64);
    if (!nb) return std::fprintf(stderr, "FAIL: alloc_buffer: %s\n", std::strerror(errno)), 1;
    nb->cb = [&, nb](const BufferEvent& ev) {
      if (ev.status != 0)
        std::printf("reply to %s: status %d\n", nb->ep ? nb->ep->str().c_str() : "?", ev.status);
      std::lock_guard<std::mutex> g(mu);
      free_tx.push_back(nb);
    };
    free_tx.push_back(nb);
    all_tx.push_back(nb);
  }
  std::atomic<std::uint32_t> served{0}, failed{0};
  std::uint64_t max_live = 0;
  if (tm.pool_attach(
          pool,
          [&](const BufferEvent& ev) {
            if (ev.status == 0 && ev.ep && ev.length > 1) {
              const auto* p = static_cast<const char*>(ev.buf->segs[0].addr) + ev.offset;
              NetBuffer* tx = nullptr;
              {
                std::lock_guard<std::mutex> g(mu);
                if (!free_tx.empty()) tx = free_tx.back(), free_tx.pop_back();
              }
              if (tx) {
                auto* q = static_cast<char*>(tx->segs[0].addr);
                q[0] = 'R';
                std::memcpy(q + 1, p + 1, std::min<std::uint64_t>(ev.length - 1, 63));
                tx->length = std::min<std::uint64_t>(ev.length, 64);
                tx->ep = ev.ep;  // no reference kept: the send holds one
                if (tm.add(*tx, QueueType::kMsgSend) == 0)
                  ++served;
                else
                  ++failed;
              } else {
                ++failed;
              }
            }
            if (!(ev.buf->flags & kBufQueued)) pool.put(ev.buf);
          },
          4) != 0)
    return std::fprintf(stderr, "FAIL: pool_attach\n"), 1;
  if (const int rc = tm.start(a.addr))
    return std::fprintf(stderr, "FAIL: start %s: %s\n", a.addr.c_str(), std::strerror(rc)), 1;
  MetricsEndpoint metrics;
  if (!a.metrics.empty()) {
    const auto colon = a.metrics.rfind(':');
    const auto port = colon == std::string::npos
                          ? std::nullopt
                          : examples::number_arg<std::uint16_t>(a.metrics.substr(colon + 1));
    if (!port)
      return std::fprintf(stderr, "FAIL: --metrics %s: not HOST:PORT\n", a.metrics.c_str()), 2;
    metrics.start(a.metrics.substr(0, colon), *port, [&tm] { return prometheus_text({&tm}); });
  }
  std::printf("server: transfer machine %s\n", tm.ep().str().c_str());
  std::fflush(stdout);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (served < a.serve && std::chrono::steady_clock::now() < until) {
    max_live = std::max(max_live, tm.stats().conns_live);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the last reply completes
  const TmStats st = tm.stats();
  std::printf(
      "server: served %u, failed %u, connections %llu, released %llu, live now %llu, live at "
      "most %llu, hellos refused %llu\n",
      served.load(), failed.load(), static_cast<unsigned long long>(st.connections),
      static_cast<unsigned long long>(st.conns_released),
      static_cast<unsigned long long>(st.conns_live), static_cast<unsigned long long>(max_live),
      static_cast<unsigned long long>(st.hellos_refused));
  QueueStats q[6];
  tm.qstats(QueueType::kCount_, q, false);
  for (int i = 0; i < 2; ++i)
    std::printf("queue %s: adds %llu successes %llu failures %llu bytes %llu\n",
                to_string(static_cast<QueueType>(i)), static_cast<unsigned long long>(q[i].adds),
                static_cast<unsigned long long>(q[i].successes),
                static_cast<unsigned long long>(q[i].failures),
                static_cast<unsigned long long>(q[i].bytes));
  metrics.stop();
  tm.stop();
  for (NetBuffer* nb : all_tx) dom.free_buffer(nb);
  const bool ok = served >= a.serve && failed == 0;
  std::printf("%s: served %u clients\n", ok ? "OK" : "FAIL", served.load());
  return ok ? 0 : 1;
}

int client_once(const Args& a, client::Context& ctx) {
  const auto peer = EndPoint::parse(a.peer);
  if (!peer || !peer->tmid) return std::fprintf(stderr, "FAIL: --peer\n"), 1;
  Domain dom(ctx, domain_options(a));
  Tm tm(dom);
  NetBuffer* rx = dom.alloc_buffer(1, 256);
  NetBuffer* tx = dom.alloc_buffer(1, 64);
  if (!rx || !tx) return std::fprintf(stderr, "FAIL: alloc_buffer\n"), 1;
  std::atomic<int> got{0}, sent{1};
  std::string answer;
  rx->cb = [&](const BufferEvent& ev) {
    if (ev.status == 0)
      answer.assign(static_cast<const char*>(rx->segs[0].addr) + ev.offset, ev.length);
    got = ev.status == 0 ? 1 : -1;
  };
  tx->cb = [&](const BufferEvent& ev) { sent = ev.status; };
  if (const int rc = tm.start(a.addr))
    return std::fprintf(stderr, "FAIL: start %s: %s\n", a.addr.c_str(), std::strerror(rc)), 1;
  if (tm.add(*rx, QueueType::kMsgRecv) != 0) return std::fprintf(stderr, "FAIL: add rx\n"), 1;
  const std::string msg = "C" + std::to_string(a.id);
  std::memcpy(tx->segs[0].addr, msg.data(), msg.size());
  tx->length = msg.size();
  tx->ep = peer;
  if (const int rc = tm.add(*tx, QueueType::kMsgSend))
    return std::fprintf(stderr, "FAIL: add tx: %s\n", std::strerror(rc)), 1;
  for (int i = 0; i < 5000 && got == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool ok = got == 1 && sent == 0 && answer == "R" + std::to_string(a.id);
  if (!ok)
    std::fprintf(stderr, "FAIL: client %u: answer '%s' (%d), send status %d\n", a.id,
                 answer.c_str(), got.load(), sent.load());
  if (a.kill) _exit(ok ? 0 : 1);  // no stop, no goodbye: as if killed
  tm.stop();
  dom.free_buffer(rx);
  dom.free_buffer(tx);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--kill") {
      a.kill = true;
      continue;
    }
    if (i + 1 >= argc) return std::fprintf(stderr, "%s needs a value\n", k.c_str()), 2;
    const std::string v = argv[++i];
    if (k == "--socket")
      a.socket = v;
    else if (k == "--addr")
      a.addr = v;
    else if (k == "--peer")
      a.peer = v;
    else if (k == "--pid")
      if (const auto n = examples::number_arg<std::uint32_t>(v))
        a.pid = *n;
      else
        return std::fprintf(stderr, "%s: not a number: %s\n", k.c_str(), v.c_str()), 2;
    else if (k == "--serve")
      if (const auto n = examples::number_arg<std::uint32_t>(v))
        a.serve = *n;
      else
        return std::fprintf(stderr, "%s: not a number: %s\n", k.c_str(), v.c_str()), 2;
    else if (k == "--id")
      if (const auto n = examples::number_arg<std::uint32_t>(v))
        a.id = *n;
      else
        return std::fprintf(stderr, "%s: not a number: %s\n", k.c_str(), v.c_str()), 2;
    else if (k == "--oob-host")
      a.oob_host = v;
    else if (k == "--oob-base")
      if (const auto n = examples::number_arg<std::uint16_t>(v))
        a.oob_base = *n;
      else
        return std::fprintf(stderr, "%s: not a number: %s\n", k.c_str(), v.c_str()), 2;
    else if (k == "--metrics")
      a.metrics = v;
    else
      return std::fprintf(stderr, "unknown option %s\n", k.c_str()), 2;
  }
  if (a.socket.empty() || a.addr.empty() || (a.serve == 0) == a.peer.empty()) {
    std::fprintf(stderr,
                 "usage: roce-lnet-churn --socket PATH --pid N --addr ADDR (--serve COUNT | "
                 "--peer ADDR --id N [--kill]) [--oob-host IP] [--oob-base PORT] "
                 "[--metrics HOST:PORT]\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  auto ctx = client::Context::attach(a.socket);
  if (!ctx)
    return std::fprintf(stderr, "FAIL: attach %s: %s\n", a.socket.c_str(), std::strerror(errno)), 1;
  return a.serve ? serve(a, *ctx) : client_once(a, *ctx);
}
