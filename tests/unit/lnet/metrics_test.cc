// Per-queue statistics (Motr's m0_net_qstats) published: Prometheus' text format, served by
// MetricsEndpoint, and `roce-ctl lnet` reading it (ROCE_CTL names the binary; skipped without).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <roce/lnet.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/lnet/fake_context.h"
#include "tests/unit/lnet/test_net.h"

namespace roce::lnet {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::read_within;
using test::tcp_connect;

std::string http_get(std::uint16_t port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    close(fd);
    return {};
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
  (void)!send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string resp;
  char b[4096];
  ssize_t n;
  while ((n = recv(fd, b, sizeof b, 0)) > 0) resp.append(b, static_cast<std::size_t>(n));
  close(fd);
  return resp;
}

class LnetMetrics : public ::testing::Test {
 protected:
  FakeContext ctx;
  DomainOptions opts() { return test::loopback_options(17); }
  Domain dom{ctx, opts()};
  Tm tm{dom};
  NetBuffer* nb = nullptr;
  void SetUp() override {
    ASSERT_EQ(tm.start("192.0.2.1@roce:0:1:9"), 0);
    nb = dom.alloc_buffer(1, 4096);
    std::atomic<int> n{0};
    nb->cb = [&n](const BufferEvent&) { ++n; };
    ASSERT_EQ(tm.add(*nb, QueueType::kMsgRecv), 0);
    ctx.deliver(ctx.oldest_recv(), 1500, 0, false);
    for (int i = 0; i < 1000 && n.load() == 0; ++i) std::this_thread::sleep_for(2ms);
    ASSERT_EQ(n.load(), 1);
    nb->cb = nullptr;
  }
  void TearDown() override {
    tm.stop();
    EXPECT_EQ(dom.free_buffer(nb), 0);
  }
};

TEST_F(LnetMetrics, PrometheusTextHasMotrsQueueCountersPerQueue) {
  const std::string t = prometheus_text({&tm});
  const std::string l = "{tm=\"192.0.2.1@roce:0:1:9\",queue=\"msg-recv\"} ";
  EXPECT_NE(t.find("# TYPE roce_lnet_queue_adds_total counter\n"), std::string::npos);
  EXPECT_NE(t.find("roce_lnet_queue_adds_total" + l + "1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("roce_lnet_queue_dels_total" + l + "0\n"), std::string::npos);
  EXPECT_NE(t.find("roce_lnet_queue_successes_total" + l + "1\n"), std::string::npos);
  EXPECT_NE(t.find("roce_lnet_queue_failures_total" + l + "0\n"), std::string::npos);
  EXPECT_NE(t.find("roce_lnet_queue_bytes_total" + l + "1500\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE roce_lnet_queue_max_bytes gauge\n"), std::string::npos);
  EXPECT_NE(t.find("roce_lnet_queue_max_bytes" + l + "1500\n"), std::string::npos);
  EXPECT_NE(t.find("roce_lnet_queue_time_in_queue_seconds_total" + l + "0."), std::string::npos);
  // Every queue has its series, the idle ones at zero.
  EXPECT_NE(t.find("roce_lnet_queue_adds_total{tm=\"192.0.2.1@roce:0:1:9\",queue=\"active-bulk-"
                   "send\"} 0\n"),
            std::string::npos);
  EXPECT_NE(t.find("roce_lnet_connections_live{tm=\"192.0.2.1@roce:0:1:9\"} 0\n"),
            std::string::npos);
}

TEST_F(LnetMetrics, TheEndpointServesThemAndRoceCtlPrintsThem) {
  MetricsEndpoint m;
  ASSERT_EQ(m.start("127.0.0.1", 0, [this] { return prometheus_text({&tm}); }), 0);
  ASSERT_NE(m.port(), 0);
  const std::string r = http_get(m.port(), "/metrics");
  EXPECT_EQ(r.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("roce_lnet_queue_bytes_total{tm=\"192.0.2.1@roce:0:1:9\",queue=\"msg-recv\"} "
                   "1500\n"),
            std::string::npos);
  EXPECT_EQ(http_get(m.port(), "/other").rfind("HTTP/1.0 404", 0), 0u);
  const char* ctl = std::getenv("ROCE_CTL");
  if (!ctl) GTEST_SKIP() << "ROCE_CTL (the roce-ctl binary) not given";
  const std::string cmd =
      std::string(ctl) + " --prometheus 127.0.0.1:" + std::to_string(m.port()) + " lnet";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char b[512];
  while (fgets(b, sizeof b, p)) out += b;
  EXPECT_EQ(pclose(p), 0) << out;
  // One row: the receive queue (idle queues are left out without --all).
  EXPECT_NE(out.find("adds"), std::string::npos) << out;
  std::string row;
  for (std::size_t i = 0, j; i < out.size(); i = j + 1) {
    j = out.find('\n', i);
    if (j == std::string::npos) j = out.size();
    const std::string line = out.substr(i, j - i);
    if (line.find("msg-recv") != std::string::npos) row = line;
  }
  ASSERT_FALSE(row.empty()) << out;
  char tmname[64], q[32], tiq[32];
  unsigned long adds, dels, succ, fail, bytes, maxb;
  ASSERT_EQ(std::sscanf(row.c_str(), "%63s %31s %lu %lu %lu %lu %lu %lu %31s", tmname, q, &adds,
                        &dels, &succ, &fail, &bytes, &maxb, tiq),
            9)
      << row;
  EXPECT_STREQ(tmname, "192.0.2.1@roce:0:1:9");
  EXPECT_EQ(adds, 1u);
  EXPECT_EQ(dels, 0u);
  EXPECT_EQ(succ, 1u);
  EXPECT_EQ(fail, 0u);
  EXPECT_EQ(bytes, 1500u);
  EXPECT_EQ(maxb, 1500u);
  EXPECT_EQ(out.find("active-bulk-send"), std::string::npos);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A client that sends its request a byte at a time, never finishing the line (slowloris):
// before, each recv() had a second of its own, so 4096 bytes held the only serving thread for
// over an hour and a scrape waited behind it.
TEST_F(LnetMetrics, ADribblingClientDoesNotHoldTheEndpoint) {
  MetricsEndpoint m;
  ASSERT_EQ(m.start("127.0.0.1", 0, [this] { return prometheus_text({&tm}); }), 0);
  std::atomic<bool> done{false};
  std::thread slow([&] {
    const int fd = tcp_connect(m.port());
    for (int i = 0; i < 40 && !done.load(); ++i) {
      if (send(fd, "G", 1, MSG_NOSIGNAL) != 1) break;
      std::this_thread::sleep_for(100ms);
    }
    close(fd);
  });
  std::this_thread::sleep_for(150ms);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string r = http_get(m.port(), "/metrics");
  const double took = seconds_since(t0);
  done = true;
  slow.join();
  EXPECT_EQ(r.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << r;
  EXPECT_LT(took, 2.0);
}

// Many connections that say nothing: each used to hold the endpoint for a second in turn.
TEST_F(LnetMetrics, IdleConnectionsDoNotQueueAScrapeBehindThem) {
  MetricsEndpoint m;
  ASSERT_EQ(m.start("127.0.0.1", 0, [this] { return prometheus_text({&tm}); }), 0);
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i)
    if (const int fd = tcp_connect(m.port()); fd >= 0) idle.push_back(fd);
  std::this_thread::sleep_for(100ms);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string r = http_get(m.port(), "/metrics");
  const double took = seconds_since(t0);
  for (int fd : idle) close(fd);
  EXPECT_EQ(r.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << r;
  EXPECT_LT(took, 1.0);
}

// A request longer than the endpoint reads is refused, not buffered.
TEST_F(LnetMetrics, AHugeRequestIsRefused) {
  MetricsEndpoint m;
  ASSERT_EQ(m.start("127.0.0.1", 0, [this] { return prometheus_text({&tm}); }), 0);
  const std::string r = http_get(m.port(), "/metrics" + std::string(100000, 'x'));
  EXPECT_EQ(r.rfind("HTTP/1.0 404", 0), 0u) << r.substr(0, 64);
}

// A hostile metrics server, for roce-ctl: `serve(fd)` runs on each accepted connection.
class HostileServer {
 public:
  explicit HostileServer(std::function<void(int)> serve) : serve_(std::move(serve)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    thread_ = std::thread([this] {
      pollfd pf{fd_, POLLIN, 0};
      while (!stop_.load()) {
        if (poll(&pf, 1, 100) <= 0) continue;
        const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        serve_(c);
        close(c);
      }
    });
  }
  ~HostileServer() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  std::uint16_t port() const { return port_; }
  std::atomic<bool> stop_{false};

 private:
  std::function<void(int)> serve_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

// Runs roce-ctl lnet against `port` under timeout(1): its exit status (124: it hung) and output.
std::pair<int, std::string> roce_ctl_lnet(std::uint16_t port, const char* extra = "") {
  const char* ctl = std::getenv("ROCE_CTL");
  const std::string cmd = std::string("timeout 30 ") + ctl +
                          " --prometheus 127.0.0.1:" + std::to_string(port) + " lnet " + extra +
                          " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char b[512];
  while (p && fgets(b, sizeof b, p))
    if (out.size() < 65536) out += b;
  const int st = p ? pclose(p) : -1;
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// A server that answers 64 MiB (it could go on for ever): roce-ctl used to read it all into
// memory, however long.
TEST(LnetRoceCtl, AnEndlessAnswerIsCutOff) {
  if (!std::getenv("ROCE_CTL")) GTEST_SKIP() << "ROCE_CTL (the roce-ctl binary) not given";
  HostileServer s([](int fd) {
    const std::string head = "HTTP/1.0 200 OK\r\n\r\n";
    (void)!send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    std::string chunk;
    for (int i = 0; i < 1000; ++i) chunk += "roce_lnet_x{tm=\"a\"} 1\n";
    for (std::size_t sent = 0; sent < (64u << 20);) {
      const ssize_t n = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto [rc, out] = roce_ctl_lnet(s.port());
  EXPECT_NE(rc, 124) << "roce-ctl hung";
  EXPECT_NE(rc, 0) << out.substr(0, 256);
  EXPECT_NE(out.find("too long"), std::string::npos) << out.substr(0, 256);
  EXPECT_LT(seconds_since(t0), 20.0);
}

// A server that accepts and says nothing: roce-ctl used to wait for ever.
TEST(LnetRoceCtl, ASilentServerTimesOut) {
  if (!std::getenv("ROCE_CTL")) GTEST_SKIP() << "ROCE_CTL (the roce-ctl binary) not given";
  HostileServer* sp = nullptr;
  HostileServer s([&sp](int) {
    for (int i = 0; i < 400 && !sp->stop_.load(); ++i) std::this_thread::sleep_for(100ms);
  });
  sp = &s;
  const auto [rc, out] = roce_ctl_lnet(s.port());
  EXPECT_NE(rc, 124) << "roce-ctl hung";
  EXPECT_NE(rc, 0) << out;
  s.stop_ = true;
}

// Labels with terminal control characters and lines cut short: printed harmlessly.
TEST(LnetRoceCtl, ControlCharactersInLabelsAreNotPrinted) {
  if (!std::getenv("ROCE_CTL")) GTEST_SKIP() << "ROCE_CTL (the roce-ctl binary) not given";
  HostileServer s([](int fd) {
    char req[256];
    (void)!recv(fd, req, sizeof req, 0);
    const std::string r =
        "HTTP/1.0 200 OK\r\n\r\n"
        "roce_lnet_queue_adds_total{tm=\"\x1b]0;owned\x07\x1b[2J\",queue=\"q\"} 5\n"
        "roce_lnet_connections_live{tm=\"\x1b[31m\"}\n"
        "roce_lnet_queue_}{\n";
    (void)!send(fd, r.data(), r.size(), MSG_NOSIGNAL);
  });
  const auto [rc, out] = roce_ctl_lnet(s.port(), "--all");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(out.find('\x07'), std::string::npos) << out;
}

}  // namespace
}  // namespace roce::lnet
