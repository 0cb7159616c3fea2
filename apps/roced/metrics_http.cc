#include "apps/roced/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace roce::apps {

namespace {

constexpr std::size_t kMaxRequest = 2048;
// Each scraper's socket holds at most this much of its answer in the kernel (Linux doubles it):
// 16 scrapers that never read pin 8 MiB, not the 64 MiB that loopback's autotuning (tcp_wmem's
// 4 MiB) would give them; the rest of an answer waits in the connection's string.
constexpr int kSendBuffer = 256 * 1024;

std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

struct Conn {
  int fd = -1;
  std::uint64_t deadline = 0;
  std::uint64_t accepted = 0;
  std::string in;   ///< the request so far
  std::string out;  ///< the answer, once the request is complete
  std::size_t sent = 0;
  bool answering = false;
};

}  // namespace

std::string resolve_listen(const std::string& configured, const std::string& management_host) {
  if (configured.empty()) return configured;
  if (configured.find(':') == std::string::npos) return management_host + ":" + configured;
  if (configured.front() == ':') return management_host + configured;
  return configured;
}

MetricsServer::MetricsServer(const Metrics& m, std::string appliance, const std::string& listen,
                             MetricsHttpLimits limits)
    : m_(m), appliance_(std::move(appliance)), limits_(limits) {
  if (limits_.max_connections == 0) limits_.max_connections = 1;
  const auto [host, port] = split_host_port(listen);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1)
    throw std::invalid_argument("prometheus: '" + host + "' is not an IPv4 address");
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) throw std::runtime_error(std::string("prometheus: socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd_, 64) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd_);
    throw std::runtime_error("prometheus: cannot listen on " + listen + ": " + err);
  }
  socklen_t len = sizeof sa;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  endpoint_ = "http://" + host + ":" + std::to_string(port_) + "/metrics";
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    ::close(fd_);
    throw std::runtime_error(std::string("prometheus: eventfd: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

MetricsServer::~MetricsServer() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(wake_fd_);
  ::close(fd_);
}

std::string MetricsServer::answer(const std::string& request) {
  std::string status = "200 OK", body;
  if (request.rfind("GET /metrics", 0) == 0 || request.rfind("GET / ", 0) == 0) {
    body = m_.prometheus(appliance_);
    const auto line = [&](const char* name, const std::atomic<std::uint64_t>& v) {
      body += "# TYPE roce_metrics_http_";
      body += name;
      body += " counter\nroce_metrics_http_";
      body += name;
      body += "{appliance=\"" + appliance_ + "\"} " + std::to_string(v.load()) + "\n";
    };
    line("requests_total", st_.requests);
    line("timeouts_total", st_.timeouts);
    line("evicted_total", st_.evicted);
    line("bad_requests_total", st_.bad);
    line("send_errors_total", st_.send_errors);
    line("accept_errors_total", st_.accept_errors);
  } else {
    status = "404 Not Found";
    body = "try /metrics\n";
  }
  ++st_.requests;
  std::ostringstream os;
  os << "HTTP/1.0 " << status
     << "\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " << body.size()
     << "\r\nConnection: close\r\n\r\n"
     << body;
  return os.str();
}

void MetricsServer::serve() {
  std::vector<Conn> conns;
  std::vector<pollfd> pfds;
  std::uint64_t listen_rest_until = 0;
  const auto close_at = [&](std::size_t i) {
    ::close(conns[i].fd);
    conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
  };
  for (;;) {
    const std::uint64_t now = now_ms();
    // Deadlines.
    for (std::size_t i = conns.size(); i-- > 0;)
      if (now >= conns[i].deadline) {
        ++st_.timeouts;
        close_at(i);
      }
    pfds.clear();
    pfds.push_back({wake_fd_, POLLIN, 0});
    const bool listening = now >= listen_rest_until;
    pfds.push_back({listening ? fd_ : -1, POLLIN, 0});
    std::uint64_t next_deadline = now + 1000;
    for (const Conn& c : conns) {
      pfds.push_back({c.fd, static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    if (!listening) next_deadline = std::min(next_deadline, listen_rest_until);
    const int wait = static_cast<int>(next_deadline > now ? next_deadline - now : 0);
    if (::poll(pfds.data(), pfds.size(), wait) < 0 && errno != EINTR) break;
    if (pfds[0].revents != 0) break;  // the destructor

    // Connections first (their indexes are pfds[2 + i]); walk backwards so erasing is safe.
    for (std::size_t i = conns.size(); i-- > 0;) {
      const short re = pfds[2 + i].revents;
      if (re == 0) continue;
      Conn& c = conns[i];
      if (!c.answering) {
        char buf[512];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0 && c.in.empty()) {  // closed without a request
          close_at(i);
          continue;
        }
        if (n > 0) c.in.append(buf, static_cast<std::size_t>(n));
        const bool complete = c.in.find("\r\n\r\n") != std::string::npos ||
                              c.in.find("\n\n") != std::string::npos || n == 0;
        if (c.in.size() > kMaxRequest) {
          ++st_.bad;
          close_at(i);
          continue;
        }
        if (!complete) continue;
        c.out = answer(c.in);
        c.answering = true;
      }
      // Answer as far as the socket takes it now.
      while (c.sent < c.out.size()) {
        const ssize_t w =
            ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
          c.sent += static_cast<std::size_t>(w);
          continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) break;
        ++st_.send_errors;
        c.sent = c.out.size() + 1;  // give up on it
      }
      if (c.sent >= c.out.size()) close_at(i);
    }

    // New connections.
    if (listening && (pfds[1].revents & POLLIN) != 0) {
      for (;;) {
        const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            ++st_.accept_errors;
            listen_rest_until = now_ms() + 100;
          }
          break;
        }
        if (conns.size() >= limits_.max_connections) {
          // Room for the newcomer: the oldest connection still sending its request, or else
          // the newcomer itself.
          std::size_t victim = conns.size();
          for (std::size_t i = 0; i < conns.size(); ++i)
            if (!conns[i].answering &&
                (victim == conns.size() || conns[i].accepted < conns[victim].accepted))
              victim = i;
          ++st_.evicted;
          if (victim == conns.size()) {
            ::close(fd);
            continue;
          }
          close_at(victim);
        }
        ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSendBuffer, sizeof kSendBuffer);
        const std::uint64_t t = now_ms();
        conns.push_back({fd, t + limits_.deadline_ms, t, {}, {}, 0, false});
      }
    }
  }
  for (Conn& c : conns) ::close(c.fd);
}

}  // namespace roce::apps
