/// @file
/// What congestion control keeps per QP (Qp::cc): the notification point's last CNP, the
/// reaction point's algorithm state and the pacing schedule it sets. Written by
/// dataplane/engine/congestion.cc only; untouched with `algorithm: none` and no CE marks.
#pragma once

#include <cstdint>

#include "dataplane/engine/cc/dcqcn.h"
#include "dataplane/engine/cc/delay.h"

namespace roce::engine::cc {

struct QpCc {
  // Notification point
  std::uint64_t last_cnp_ns = 0;  ///< when the last CNP for this QP's peer went out
  bool cnp_sent = false;
  // Reaction point: pacing
  double ns_per_byte = 0;          ///< 8000 / rate in Mb/s; 0: not paced (at the maximum rate)
  std::uint64_t next_send = 0;     ///< earliest time (ns) of the QP's next packet
  std::uint64_t park_at = 0;       ///< its entry on the pacing wheel (0: not parked)
  std::uint64_t paced_bytes = 0;   ///< wire bytes sent while paced
  std::uint64_t last_sent_ns = 0;  ///< when the QP last sent a request or READ response (0: never)
  /// AckReq at least every this many packets (besides the engine's ack_req_every): set by a
  /// window (delay-based) so that a window closing mid-message is acknowledged.
  std::uint32_t ack_req_every = 0xFFFFFFFFu;
  Dcqcn dcqcn;
  DelayCc delay;
};

}  // namespace roce::engine::cc
