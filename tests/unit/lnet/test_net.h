/// @file
/// Helpers of the LNet unit tests that talk to a transfer machine's TCP listener on loopback:
/// wait for a condition, connect, read with a deadline.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>

namespace roce::lnet::test {

/// True once `f()` is, polled every 2 ms for at most `ms`.
template <typename F>
bool eventually(F f, int ms = 3000) {
  for (int i = 0; i < ms / 2; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return f();
}

/// A TCP connection to 127.0.0.1:`port`, or -1.
inline int tcp_connect(std::uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/// Reads `n` bytes within `ms`; false on EOF, error or timeout.
inline bool read_within(int fd, void* p, std::size_t n, int ms) {
  auto* b = static_cast<std::uint8_t*>(p);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          end - std::chrono::steady_clock::now())
                          .count();
    pollfd pf{fd, POLLIN, 0};
    if (left <= 0 || poll(&pf, 1, static_cast<int>(left)) <= 0) return false;
    const ssize_t k = recv(fd, b, n, 0);
    if (k <= 0) return false;
    b += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

}  // namespace roce::lnet::test
