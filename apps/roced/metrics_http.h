/// @file
/// The Prometheus endpoint of roced: GET /metrics over HTTP/1.0, in a thread of its own.
///
/// It serves several scrapers at once and none of them can hold it: sockets are non-blocking
/// and multiplexed with poll(2); at most `max_connections` are open (beyond that the oldest
/// one that has not finished sending its request is closed); each connection has `deadline_ms`
/// from accept to the last byte of the answer; a request is at most 2 KiB; answers are sent
/// with MSG_NOSIGNAL, so a scraper that resets its connection costs an EPIPE, not roced; each
/// socket's send buffer is 256 KiB, so scrapers that never read pin little kernel memory; at
/// EMFILE/ENFILE the listener rests for 100 ms instead of spinning. What it refused is counted
/// and shown in its own answer (roce_metrics_http_*).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "apps/roced/metrics.h"

namespace roce::apps {

struct MetricsHttpLimits {
  std::uint32_t max_connections = 16;
  std::uint32_t deadline_ms = 5000;
};

struct MetricsHttpStats {
  std::atomic<std::uint64_t> requests{0};       ///< answered (200 or 404)
  std::atomic<std::uint64_t> timeouts{0};       ///< closed at the deadline
  std::atomic<std::uint64_t> evicted{0};        ///< closed to make room for a new connection
  std::atomic<std::uint64_t> bad{0};            ///< over-long or not HTTP
  std::atomic<std::uint64_t> send_errors{0};    ///< the peer went away while we answered
  std::atomic<std::uint64_t> accept_errors{0};  ///< EMFILE, ENFILE, ENOBUFS, ...
};

class MetricsServer {
 public:
  /// Listens on `listen` ("IPv4:port"); throws std::invalid_argument for a bad address and
  /// std::runtime_error when it cannot listen.
  MetricsServer(const Metrics& m, std::string appliance, const std::string& listen,
                MetricsHttpLimits limits = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  std::string endpoint() const { return endpoint_; }
  std::uint16_t port() const { return port_; }  ///< the bound port (useful with port 0)
  const MetricsHttpStats& stats() const { return st_; }

 private:
  void serve();
  std::string answer(const std::string& request);
  const Metrics& m_;
  std::string appliance_;
  MetricsHttpLimits limits_;
  std::string endpoint_;
  std::uint16_t port_ = 0;
  int fd_ = -1;
  int wake_fd_ = -1;  ///< eventfd: the destructor
  MetricsHttpStats st_;
  std::thread thread_;
};

/// The Prometheus listen address as configured: "IPv4:port", or only a port (":9464" or
/// "9464"), which listens on `management_host` (control.listen's address).
std::string resolve_listen(const std::string& configured, const std::string& management_host);

}  // namespace roce::apps
