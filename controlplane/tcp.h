/// @file
/// The kernel TCP sockets of the control plane: out-of-band exchanges, hosted services, the
/// benchmark's control channel. Small helpers so that each caller does not set them up anew.
#pragma once

#include <cstdint>

#include "dataplane/wire/bytes.h"

namespace roce::ctl {

/// A TCP socket listening on `addr`:`port` (0.0.0.0: every address) with SO_REUSEADDR; throws
/// std::runtime_error naming the address and the reason when it cannot.
int tcp_listen(wire::Ipv4Addr addr, std::uint16_t port, int backlog = 1);

/// TCP_NODELAY: exchanges of small messages, each waited for, must not sit in Nagle's buffer.
void tcp_nodelay(int fd);

}  // namespace roce::ctl
