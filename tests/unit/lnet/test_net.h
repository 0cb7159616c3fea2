/// @file
/// Helpers of the LNet unit tests that talk to a transfer machine's TCP listener on loopback:
/// domain options on loopback, wait for a condition, connect, read with a deadline, build the
/// fixed-size fields and control messages a peer sends.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <roce/lnet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "client/lnet/src/lnet_internal.h"

namespace roce::lnet::test {

/// Domain options whose listeners are on 127.0.0.1, at a port base picked by pid and `salt`
/// below the kernel's ephemeral range (so that no outgoing connection holds one).
inline DomainOptions loopback_options(int salt) {
  DomainOptions o;
  o.oob_host = "127.0.0.1";
  o.oob_port_base = static_cast<std::uint16_t>(12000 + (getpid() + salt) % 9 * 2000);
  return o;
}

/// A NUL-padded fixed-size text field of a hello.
inline void set_str(char (&dst)[48], const std::string& s) {
  std::memset(dst, 0, sizeof dst);
  std::memcpy(dst, s.data(), std::min(s.size(), sizeof dst - 1));
}

/// A control message as a peer sends it.
inline std::vector<std::uint8_t> ctl(std::uint64_t token, std::uint64_t length,
                                     std::int32_t status = 0) {
  CtlMsg m;
  m.token = token;
  m.length = length;
  m.status = status;
  std::vector<std::uint8_t> b(CtlMsg::kSize);
  m.encode(b.data());
  return b;
}

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
