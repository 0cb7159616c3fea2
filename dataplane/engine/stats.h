/// @file
/// Engine counters, named like an RNIC's (rxe's RXE_CNT_*, mlx5's hw counters). One array per
/// engine, incremented on the owning poll loop only.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "dataplane/wire/roce_frame.h"

namespace roce::engine {

enum class Counter : std::uint8_t {
  kRxFrames,
  kRxBytes,
  kTxFrames,
  kTxBytes,
  kRxDropVerdict,  ///< parser verdict other than ok (detail in verdict counters)
  kRxDropUnknownQp,
  kRxDropQpState,  ///< QP not in a state that accepts this packet
  kRxDropWrongTransport,
  kRxDropAddress,  ///< RC/UC packet from an address that is not the QP's peer
  kRxDropPkey,
  kRxDropQkey,
  kRxDropUnexpected,  ///< response with nothing outstanding, or out of window
  kRxCnp,
  kDuplicateRequests,
  kSeqErrNakSent,
  kRnrNakSent,
  kInvReqNakSent,
  kRemAccessNakSent,
  kRemOpNakSent,
  kAckSent,
  kReadResponsesSent,
  kAtomicAcksSent,
  kAckRcvd,
  kSeqErrNakRcvd,
  kRnrNakRcvd,
  kErrNakRcvd,
  kRetransmitTimeouts,
  kRetransmitProbes,  ///< fast retransmissions from the RTT-based probe timer
  kRetries,           ///< go-back-N episodes
  kRetransmittedPackets,
  kRetryExceeded,
  kRnrRetryExceeded,
  kTxRingFull,
  kTxZeroCopyFrames,    ///< frames whose payload the port sends from registered memory
  kCqOverflow,          ///< completions a full or stopped CQ could not take
  kAsyncEvents,         ///< asynchronous events raised (CQ error, QP errors)
  kAsyncEventsLost,     ///< events pushed out of a full event queue before being read
  kRxDropUcResync,      ///< UC packets of a message whose start was lost (IBA 9.8.3.1)
  kRxDropUcError,       ///< UC packets dropped by an error (no receive WQE, bad opcode/length)
  kRxDropAfterSeqNak,   ///< RC packets still ahead of the expected PSN after its sequence NAK
  kRxDropDupRead,       ///< duplicate READ requests that match no READ the responder holds
  kRxDropRdAtomicBusy,  ///< READ/atomic requests with every responder resource in use
  kRespQueueFull,       ///< ACKs/NAKs not queued: the responder's output queue was full
  kRxDropLocalAccess,   ///< READ responses/atomic ACKs whose local buffer lost its key
  kRxDropVlan,          ///< a frame of another VLAN (or tagged on an untagged port)
  kTxSelfDelivered,     ///< frames to the port's own MAC, handed back to its receive path
  kTxSelfDropped,       ///< such frames lost: the self-delivery queue (or an mbuf) was short
  kRxEcnCe,             ///< packets of connected QPs received with ECN CE (mlx5 np_ecn_marked)
  kCnpSent,             ///< CNPs sent (mlx5 np_cnp_sent)
  kCnpHandled,          ///< CNPs the reaction point took, cutting or not (rp_cnp_handled)
  kCnpIgnored,          ///< CNPs refused (rp_cnp_ignored): the sum of the four reasons below
  /// ... with `algorithm: none` (no reaction point)
  kCnpIgnoredNoCc,
  /// ... for no connected QP of ours, or not from its peer, or of another partition
  kCnpIgnoredUnmatched,
  /// ... for a QP not in RTS (a responder left in RTR has no rate yet, or one in error)
  kCnpIgnoredNotRts,
  /// ... implausible: the QP has nothing in flight or queued and sent nothing lately
  kCnpIgnoredIdle,
  kCcParked,            ///< times a QP over its rate was parked until its next send time
  kReadReRequests,      ///< READ requests sent again (selective or go-back-N), for part or all
  kReadReRequestBytes,  ///< the response bytes those READ requests asked for again
  kRxDupReadResponses,  ///< READ responses (and atomic ACKs) for what had arrived: dropped
  kRetransmittedBytes,  ///< payload bytes of kRetransmittedPackets
  kSrOooPlaced,         ///< selective repeat: packets placed past a gap (responder)
  kSrSacksSent,         ///< selective repeat: gaps reported (responder)
  kSrSacksRcvd,         ///< selective repeat: gap reports received (requester)
  kSrRetransmits,       ///< selective repeat: packets sent again because a SACK named them
  kSrRetransmitBytes,   ///< their payload bytes
  kAckDeferred,         ///< coalesced ACKs kept for the next run() (the TX ring was full), per run
  kWindowStalls,        ///< times an RC requester with packets to send found its window full
  kWindowStallNs,       ///< the time they waited for the window to open (ns)
  kSrEdgeResends,       ///< selective repeat: oldest packet sent again, a later SACK or a probe's
                        ///< answer showing it lost
  kSrConnections,       ///< RC connections the CM set up with selective repeat on (ece_sr_on)
  kTxFastPath,          ///< request frames the requester's fast path wrote (req_fast)
  kRxFastPath,          ///< received frames the receive fast path took (rx_fast)
  kSrUnplaced,          ///< selective repeat: SEND packets past ePSN not placed (sr_msg.cc)
  kProbesDeferred,      ///< probe deadlines passed while nothing sent later was acknowledged
  kSrForgedDropped,     ///< selective repeat: SR packets whose message index is outside the
                        ///< window (SrIndexBase): dropped unanswered, never placed (sr_msg.cc)
  kCount_
};
inline constexpr std::size_t kCounterCount = static_cast<std::size_t>(Counter::kCount_);
std::string_view to_string(Counter c);

struct Stats {
  std::array<std::uint64_t, kCounterCount> c{};
  std::array<std::uint64_t, wire::kVerdictCount> verdicts{};
  void inc(Counter k, std::uint64_t n = 1) { c[static_cast<std::size_t>(k)] += n; }
  std::uint64_t get(Counter k) const { return c[static_cast<std::size_t>(k)]; }
};

}  // namespace roce::engine
