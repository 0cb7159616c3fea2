/// @file
/// The kernel TCP sockets of the control plane: out-of-band exchanges, hosted services, the
/// benchmark's control channel. Small helpers so that each caller does not set them up anew.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "dataplane/wire/bytes.h"

namespace roce::ctl {

/// A TCP socket listening on `addr`:`port` (0.0.0.0: every address) with SO_REUSEADDR; throws
/// std::runtime_error naming the address and the reason when it cannot.
int tcp_listen(wire::Ipv4Addr addr, std::uint16_t port, int backlog = 1);

/// TCP_NODELAY: exchanges of small messages, each waited for, must not sit in Nagle's buffer.
void tcp_nodelay(int fd);

/// Reads exactly `n` bytes from the blocking `fd` (a socket or a pipe), again after EINTR;
/// false at end of file or on an error (errno). Inline: programs that do not link the control
/// plane (examples on libroce) use it too.
inline bool read_all(int fd, void* buf, std::size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

/// Writes exactly `n` bytes to the blocking `fd`, again after EINTR; false on an error (errno).
inline bool write_all(int fd, const void* buf, std::size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace roce::ctl
