/// @file
/// Software steering for several lcores on one port: which lcore owns a received frame. RoCEv2
/// frames go to the lcore that owns their destination QP (encoded in the QPN's top bits, see
/// engine::lcore_of_qpn); the GSI QP, everything that is not RoCEv2 (ARP, ICMP, ND) and QPNs of
/// lcores that do not exist go to lcore 0, where the neighbour responder runs and the engine
/// counts what it cannot place. Reads only the headers it needs and never past the span.
#pragma once

#include <cstdint>
#include <span>

#include "dataplane/engine/engine.h"

namespace roce::port {

/// The destination QPN of a RoCEv2 frame (Ethernet, optional 802.1Q, IPv4 or IPv6, UDP to
/// 4791, BTH), or -1 for anything else.
std::int64_t roce_dest_qpn(std::span<const std::uint8_t> frame);

/// The lcore (0 .. lcores-1) that processes `frame`.
inline unsigned owner_lcore(std::span<const std::uint8_t> frame, unsigned lcores) {
  const std::int64_t qpn = roce_dest_qpn(frame);
  if (qpn < 0) return 0;
  const unsigned l = engine::lcore_of_qpn(static_cast<std::uint32_t>(qpn));
  return l < lcores ? l : 0;
}

}  // namespace roce::port
