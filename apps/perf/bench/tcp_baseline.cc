/// @file
/// The kernel TCP baseline: a stream and a ping-pong of the benchmark's message sizes over
/// loopback, between two threads of this process (TCP_NODELAY, blocking sockets).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "apps/perf/bench/bench_run.h"
#include "apps/perf/bench/tsc.h"
#include "controlplane/tcp.h"

namespace roce::bench {

namespace {

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// A connected pair of loopback TCP sockets.
void tcp_pair(int& a, int& b) {
  const int l = ::socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0) throw std::runtime_error("socket() failed");
  Fd lg(l);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (::bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(l, 1) != 0 ||
      ::getsockname(l, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    throw std::runtime_error("cannot listen on loopback");
  a = ::socket(AF_INET, SOCK_STREAM, 0);
  if (a < 0 || ::connect(a, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    throw std::runtime_error("cannot connect on loopback");
  b = ::accept(l, nullptr, nullptr);
  if (b < 0) throw std::runtime_error("accept() failed");
  const int one = 1;
  ::setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Point stream(std::uint32_t size, double duration, double tsc_hz) {
  int a = -1, b = -1;
  tcp_pair(a, b);
  Fd fa(a), fb(b);
  std::atomic<bool> stop{false};
  std::vector<char> out(size, 0x5a);
  std::thread writer([&] {
    while (!stop.load(std::memory_order_relaxed))
      if (!ctl::write_all(a, out.data(), size)) break;
    ::shutdown(a, SHUT_WR);
  });
  // The reader measures: bytes received between its first and last read.
  std::vector<char> in(std::max<std::uint32_t>(size, 256 * 1024));
  std::uint64_t bytes = 0;
  std::uint64_t t0 = 0, t1 = 0;
  const auto limit = static_cast<std::uint64_t>(duration * tsc_hz);
  for (;;) {
    const ssize_t r = ::read(b, in.data(), in.size());
    if (r <= 0) break;
    const std::uint64_t now = rdtsc();
    if (t0 == 0) t0 = now;
    t1 = now;
    bytes += static_cast<std::uint64_t>(r);
    if (now - t0 > limit) stop.store(true, std::memory_order_relaxed);
  }
  writer.join();
  Point p;
  p.kind = Kind::kTcpStream;
  p.size = size;
  p.seconds = static_cast<double>(t1 - t0) / tsc_hz;
  p.iterations = bytes / size;
  if (p.seconds > 0) {
    p.bytes_per_s = static_cast<double>(bytes) / p.seconds;
    p.msgs_per_s = p.bytes_per_s / size;
  }
  return p;
}

Point pingpong(std::uint32_t size, std::uint64_t iters, double tsc_hz) {
  int a = -1, b = -1;
  tcp_pair(a, b);
  Fd fa(a), fb(b);
  const std::uint64_t warmup = 16;
  std::thread echo([&] {
    std::vector<char> buf(size);
    for (std::uint64_t i = 0; i < iters + warmup; ++i)
      if (!ctl::read_all(b, buf.data(), size) || !ctl::write_all(b, buf.data(), size)) break;
  });
  std::vector<char> buf(size, 0x3c);
  std::vector<double> ns;
  ns.reserve(iters);
  const std::uint64_t start = rdtsc();
  for (std::uint64_t i = 0; i < iters + warmup; ++i) {
    const std::uint64_t t = rdtsc();
    if (!ctl::write_all(a, buf.data(), size) || !ctl::read_all(a, buf.data(), size)) break;
    if (i >= warmup) ns.push_back(static_cast<double>(rdtsc() - t) / tsc_hz * 1e9);
  }
  const double secs = static_cast<double>(rdtsc() - start) / tsc_hz;
  echo.join();
  Point p;
  p.kind = Kind::kTcpPingPong;
  p.size = size;
  p.iterations = ns.size();
  p.seconds = secs;
  p.msgs_per_s = static_cast<double>(ns.size()) / secs;
  p.bytes_per_s = p.msgs_per_s * size;
  summarize_latency(ns, p);
  return p;
}

}  // namespace

void tcp_baselines(const BenchConfig& cfg, const std::set<std::uint32_t>& stream_sizes,
                   const std::set<std::uint32_t>& pingpong_sizes, double tsc_hz, Results& out,
                   const Progress& progress) {
  std::size_t i = 0;
  const std::size_t n = stream_sizes.size() + pingpong_sizes.size();
  for (const auto s : stream_sizes) {
    progress("kernel TCP stream " + std::to_string(s) + " B", i++, n);
    out.points.push_back(stream(s, cfg.baselines.duration, tsc_hz));
  }
  for (const auto s : pingpong_sizes) {
    progress("kernel TCP ping-pong " + std::to_string(s) + " B", i++, n);
    out.points.push_back(pingpong(s, cfg.baselines.iterations, tsc_hz));
  }
}

}  // namespace roce::bench
