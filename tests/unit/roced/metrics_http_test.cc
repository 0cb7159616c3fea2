// The Prometheus endpoint under hostile scrapers: silent connections, a reader that never
// reads, resets in the middle of an answer, floods of connections. Every case ends with a
// well-behaved GET that must be answered.
#include "apps/roced/metrics_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace {

using roce::apps::Metrics;
using roce::apps::MetricsServer;
using roce::apps::PortCounters;

std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  ::close(fd);
  return ntohs(sa.sin_port);
}

int connect_to(std::uint16_t port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf != 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A GET; the whole answer, or "" when it did not come within `ms`.
std::string scrape(std::uint16_t port, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  const int fd = connect_to(port);
  if (fd < 0) return "";
  const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
  if (::send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != sizeof req - 1) return ::close(fd), "";
  std::string out;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          until - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      ::close(fd);
      return out;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return "";
}

// Counters of `ports` ports: about 5 KiB of text each.
void publish(Metrics& m, std::size_t ports) {
  std::vector<PortCounters> pc(ports);
  for (std::size_t i = 0; i < ports; ++i) pc[i].name = "port" + std::to_string(i);
  m.publish(pc);
}

TEST(MetricsHttp, SilentConnectionsDoNotHoldTheScraper) {
  Metrics m;
  publish(m, 1);
  const std::uint16_t port = free_port();
  MetricsServer srv(m, "t", "127.0.0.1:" + std::to_string(port));
  std::vector<int> silent;
  for (int i = 0; i < 12; ++i) silent.push_back(connect_to(port));
  const std::string a = scrape(port, 2000);
  EXPECT_NE(a.find("200 OK"), std::string::npos) << "no answer within 2 s beside 12 silent peers";
  for (int fd : silent) ::close(fd);
}

TEST(MetricsHttp, AReaderThatNeverReadsDoesNotBlockOthers) {
  Metrics m;
  publish(m, 1000);  // 5 MB of answer: more than the socket buffers take, even autotuned (4 MiB)
  const std::uint16_t port = free_port();
  // The stuck reader may hold its connection for a minute: an answer to the second scraper
  // within 20 s can only come from a server that serves both at once, however slowly a
  // sanitizer build on a loaded host renders the megabytes (CI took over 5 s).
  roce::apps::MetricsHttpLimits limits;
  limits.deadline_ms = 60'000;
  MetricsServer srv(m, "t", "127.0.0.1:" + std::to_string(port), limits);
  const int stuck = connect_to(port, 4096);
  const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
  ASSERT_EQ(::send(stuck, req, sizeof req - 1, 0), static_cast<ssize_t>(sizeof req - 1));
  ::usleep(200'000);
  const std::string a = scrape(port, 20'000);
  EXPECT_NE(a.find("200 OK"), std::string::npos) << "a reader that never reads held the server";
  ::close(stuck);
}

TEST(MetricsHttp, ResetsDuringTheAnswerCostNoSignal) {
  Metrics m;
  publish(m, 300);  // 1.5 MB of answer: written in many pieces through a 256 KiB buffer
  const std::uint16_t port = free_port();
  MetricsServer srv(m, "t", "127.0.0.1:" + std::to_string(port));
  const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
  for (int i = 0; i < 12; ++i) {
    const int fd = connect_to(port, 4096);
    ASSERT_GE(fd, 0);
    ::send(fd, req, sizeof req - 1, MSG_NOSIGNAL);
    if (i % 2 == 0) {
      // Gone before the answer: the server's first bytes draw an RST, the next ones EPIPE.
      ::close(fd);
      continue;
    }
    // Read a little of the answer, so the server is in the middle of sending, then reset.
    char buf[256];
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) > 0) [[maybe_unused]]
      auto n = ::recv(fd, buf, sizeof buf, 0);
    const linger lg{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    ::close(fd);
  }
  // Before the fix the process died of SIGPIPE above.
  const std::string a = scrape(port, 10000);  // renders queued behind it under ASan
  EXPECT_NE(a.find("200 OK"), std::string::npos);
}

TEST(MetricsHttp, AFloodOfConnectionsIsBounded) {
  Metrics m;
  publish(m, 1);
  const std::uint16_t port = free_port();
  MetricsServer srv(m, "t", "127.0.0.1:" + std::to_string(port), {8, 5000});
  std::vector<int> flood;
  for (int i = 0; i < 100; ++i) flood.push_back(connect_to(port));
  const std::string a = scrape(port, 2000);
  EXPECT_NE(a.find("200 OK"), std::string::npos);
  EXPECT_GE(srv.stats().evicted.load(), 90u);
  EXPECT_NE(a.find("roce_metrics_http_evicted_total"), std::string::npos);
  // Every family typed: the server's own counters, levels as gauges.
  EXPECT_NE(a.find("# TYPE roce_metrics_http_evicted_total counter\n"), std::string::npos);
  EXPECT_NE(a.find("# TYPE roce_qps gauge\n"), std::string::npos);
  EXPECT_NE(a.find("# TYPE roce_port_rx_frames counter\n"), std::string::npos);
  for (int fd : flood) ::close(fd);
}

TEST(MetricsHttp, OverlongRequestsAreDroppedAndCounted) {
  Metrics m;
  publish(m, 1);
  const std::uint16_t port = free_port();
  MetricsServer srv(m, "t", "127.0.0.1:" + std::to_string(port));
  const int fd = connect_to(port);
  const std::string junk(8192, 'x');
  ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
  char buf[64];
  pollfd p{fd, POLLIN, 0};
  ASSERT_GT(::poll(&p, 1, 2000), 0);
  EXPECT_LE(::recv(fd, buf, sizeof buf, 0), 0);  // closed, no answer
  ::close(fd);
  EXPECT_EQ(srv.stats().bad.load(), 1u);
  EXPECT_NE(scrape(port, 2000).find("200 OK"), std::string::npos);
}

TEST(MetricsHttp, APortAloneListensOnTheManagementAddress) {
  EXPECT_EQ(roce::apps::resolve_listen("9464", "192.0.2.1"), "192.0.2.1:9464");
  EXPECT_EQ(roce::apps::resolve_listen(":9464", "192.0.2.1"), "192.0.2.1:9464");
  EXPECT_EQ(roce::apps::resolve_listen("0.0.0.0:9464", "192.0.2.1"), "0.0.0.0:9464");
  EXPECT_EQ(roce::apps::resolve_listen("", "192.0.2.1"), "");
}

}  // namespace

namespace {

// Congestion control's per-QP rates (roce-ctl rates): a gauge per QP below its maximum rate,
// and the count of them, only on a port with an algorithm.
TEST(MetricsRates, LimitedQpsAreGaugesWithTheirQpn) {
  Metrics m;
  std::vector<PortCounters> ports(2);
  ports[0].name = "p0";
  ports[0].cc_on = true;
  ports[0].cc_limited_qps = 3;
  ports[0].cc_rates[0] = {17, 1250};
  ports[0].cc_rates[1] = {18, 2500};
  ports[0].cc_rates_n = 2;
  ports[1].name = "p1";  // algorithm: none
  m.publish(ports);
  const std::string text = m.prometheus("a");
  EXPECT_NE(text.find("# TYPE roce_cc_qp_rate_mbps gauge"), std::string::npos) << text;
  EXPECT_NE(text.find("roce_cc_qp_rate_mbps{appliance=\"a\",port=\"p0\",qpn=\"17\"} 1250\n"),
            std::string::npos);
  EXPECT_NE(text.find("roce_cc_qp_rate_mbps{appliance=\"a\",port=\"p0\",qpn=\"18\"} 2500\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE roce_cc_limited_qps_now gauge"), std::string::npos);
  EXPECT_NE(text.find("roce_cc_limited_qps_now{appliance=\"a\",port=\"p0\"} 3\n"),
            std::string::npos);
  EXPECT_EQ(text.find("roce_cc_limited_qps_now{appliance=\"a\",port=\"p1\"}"), std::string::npos)
      << "no congestion control on p1";
}

}  // namespace
