/// @file
/// The Tms' statistics in Prometheus' text format and a minimal HTTP/1.0 endpoint serving them:
/// the route by which a program using the messaging API publishes m0_net_qstats (roced's own
/// endpoint serves roced's counters; the Tms live in the program).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <vector>

#include "client/lnet/src/lnet_internal.h"

namespace roce::lnet {

namespace {

void series(std::string& out, const char* name, const std::string& labels, std::uint64_t v) {
  out += name;
  out += '{';
  out += labels;
  out += "} ";
  out += std::to_string(v);
  out += '\n';
}

void head(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

}  // namespace

std::string prometheus_text(const std::vector<Tm*>& tms) {
  struct Q {
    const char* name;
    const char* type;
    const char* help;
    std::uint64_t QueueStats::*field;
  };
  static constexpr Q kQueue[] = {
      {"roce_lnet_queue_adds_total", "counter", "buffers added to the queue (nqs_num_adds)",
       &QueueStats::adds},
      {"roce_lnet_queue_dels_total", "counter", "buffers cancelled on the queue (nqs_num_dels)",
       &QueueStats::dels},
      {"roce_lnet_queue_successes_total", "counter", "successful buffer events (nqs_num_s_events)",
       &QueueStats::successes},
      {"roce_lnet_queue_failures_total", "counter",
       "failed buffer events and unprovisioned receive buffers (nqs_num_f_events)",
       &QueueStats::failures},
      {"roce_lnet_queue_bytes_total", "counter", "bytes of successful events (nqs_total_bytes)",
       &QueueStats::bytes},
      {"roce_lnet_queue_max_bytes", "gauge", "the largest single event (nqs_max_bytes)",
       &QueueStats::max_bytes},
  };
  struct Row {
    std::string tm;
    QueueStats q[static_cast<int>(QueueType::kCount_)];
    TmStats st;
  };
  std::vector<Row> rows;
  for (Tm* tm : tms) {
    Row r;
    r.tm = tm->ep().str();
    tm->qstats(QueueType::kCount_, r.q, false);
    r.st = tm->stats();
    rows.push_back(std::move(r));
  }
  auto labels = [](const Row& r, int q) {
    return "tm=\"" + r.tm + "\",queue=\"" + to_string(static_cast<QueueType>(q)) + "\"";
  };
  std::string out;
  for (const Q& k : kQueue) {
    head(out, k.name, k.type, k.help);
    for (const Row& r : rows)
      for (int q = 0; q < static_cast<int>(QueueType::kCount_); ++q)
        series(out, k.name, labels(r, q), r.q[q].*k.field);
  }
  head(out, "roce_lnet_queue_time_in_queue_seconds_total", "counter",
       "time buffers spent queued, add to completion (nqs_time_in_queue)");
  for (const Row& r : rows)
    for (int q = 0; q < static_cast<int>(QueueType::kCount_); ++q) {
      char v[64];
      std::snprintf(v, sizeof v, "%" PRIu64 ".%09" PRIu64, r.q[q].time_in_queue_ns / 1000000000,
                    r.q[q].time_in_queue_ns % 1000000000);
      out += "roce_lnet_queue_time_in_queue_seconds_total{" + labels(r, q) + "} " + v + "\n";
    }
  struct T {
    const char* name;
    const char* type;
    const char* help;
    std::uint64_t TmStats::*field;
  };
  static constexpr T kTm[] = {
      {"roce_lnet_connections_live", "gauge", "connections set up now (at most 64)",
       &TmStats::conns_live},
      {"roce_lnet_connections_total", "counter", "connections set up", &TmStats::connections},
      {"roce_lnet_connections_released_total", "counter",
       "connections released (goodbye, QP error, peer restart, room needed)",
       &TmStats::conns_released},
      {"roce_lnet_connections_reclaimed_total", "counter",
       "connections that carried nothing, closed to make room", &TmStats::conns_reclaimed},
      {"roce_lnet_hellos_refused_total", "counter", "connection hellos refused",
       &TmStats::hellos_refused},
      {"roce_lnet_late_cancel_delivered_total", "counter",
       "messages delivered into a receive whose cancel had not taken effect",
       &TmStats::late_cancel_delivered},
      {"roce_lnet_async_errors_total", "counter", "asynchronous errors (CQ overrun, QP errors)",
       &TmStats::async_errors},
  };
  for (const T& k : kTm) {
    head(out, k.name, k.type, k.help);
    for (const Row& r : rows) series(out, k.name, "tm=\"" + r.tm + "\"", r.st.*k.field);
  }
  return out;
}

MetricsEndpoint::~MetricsEndpoint() { stop(); }

int MetricsEndpoint::start(const std::string& host, std::uint16_t port,
                           std::function<std::string()> render) {
  if (fd_ >= 0) return EBUSY;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) return EINVAL;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof sa;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 8) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const int e = errno;
    close(fd);
    return e;
  }
  wake_ = eventfd(0, EFD_CLOEXEC);
  if (wake_ < 0) {
    const int e = errno;
    close(fd);
    return e;
  }
  fd_ = fd;
  port_ = ntohs(sa.sin_port);
  render_ = std::move(render);
  thread_ = std::thread([this] { serve(); });
  return 0;
}

void MetricsEndpoint::stop() {
  if (fd_ < 0) return;
  const std::uint64_t one = 1;
  (void)!write(wake_, &one, sizeof one);
  thread_.join();
  close(fd_);
  close(wake_);
  fd_ = wake_ = -1;
}

// Up to kMaxClients connections at once, each given kClientMs in all to send its request line
// (GET /metrics, else 404; at most kMaxRequest bytes are read, the rest of the request is
// ignored) and take the answer; then it is closed. A connection beyond kMaxClients evicts the
// oldest one. So a client that dribbles its request, or many that say nothing, cost a scrape
// nothing but their own slots for a second.
namespace {
constexpr std::size_t kMaxClients = 16;
constexpr std::size_t kMaxRequest = 4096;
constexpr auto kClientTime = std::chrono::seconds(1);
}  // namespace

void MetricsEndpoint::serve() {
  struct Client {
    int fd;
    std::chrono::steady_clock::time_point deadline;
    std::string in, out;
    std::size_t off = 0;
    bool answering = false;
  };
  std::vector<Client> cs;
  auto drop = [&cs](std::size_t i) {
    close(cs[i].fd);
    cs.erase(cs.begin() + static_cast<std::ptrdiff_t>(i));
  };
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    for (std::size_t i = cs.size(); i-- > 0;)
      if (now >= cs[i].deadline) drop(i);
    int timeout = -1;
    for (const Client& c : cs) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now).count() + 1;
      if (timeout < 0 || ms < timeout) timeout = static_cast<int>(ms);
    }
    std::vector<pollfd> pf{{wake_, POLLIN, 0}, {fd_, POLLIN, 0}};
    for (const Client& c : cs)
      pf.push_back({c.fd, static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
    if (poll(pf.data(), pf.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (pf[0].revents) break;
    // Clients first (their indices are pf's), new connections after.
    for (std::size_t i = cs.size(); i-- > 0;) {
      const short ev = pf[i + 2].revents;
      if (!ev) continue;
      Client& c = cs[i];
      if (!c.answering) {
        char buf[512];
        const ssize_t n = recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n > 0) c.in.append(buf, std::min(static_cast<std::size_t>(n), kMaxRequest));
        if (n > 0 && c.in.find("\r\n") == std::string::npos && c.in.size() < kMaxRequest) continue;
        const bool ok = c.in.find("\r\n") != std::string::npos &&
                        (c.in.rfind("GET /metrics ", 0) == 0 || c.in.rfind("GET / ", 0) == 0);
        const std::string body = ok ? render_() : "not found\n";
        c.out = std::string(ok ? "HTTP/1.0 200 OK\r\n" : "HTTP/1.0 404 Not Found\r\n") +
                "Content-Type: text/plain; version=0.0.4\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body;
        c.in.clear();
        c.answering = true;
      }
      const ssize_t n =
          send(c.fd, c.out.data() + c.off, c.out.size() - c.off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n > 0) c.off += static_cast<std::size_t>(n);
      if (n <= 0 || c.off == c.out.size()) drop(i);
    }
    if (pf[1].revents & POLLIN) {
      for (int k = 0; k < 64; ++k) {
        const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) break;
        if (cs.size() >= kMaxClients) drop(0);  // the oldest
        cs.push_back(Client{c, std::chrono::steady_clock::now() + kClientTime, {}, {}});
      }
    }
  }
  for (const Client& c : cs) close(c.fd);
}

}  // namespace roce::lnet
