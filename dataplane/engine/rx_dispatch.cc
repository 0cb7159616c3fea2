/// @file
/// Receive dispatch (rxe_recv.c): parse and validate the frame, check that it is addressed to
/// this engine, find the QP, check transport, P_Key and peer address, then hand it to exactly
/// one stage: the responder for requests, the completer for responses. (The per-poll driver of
/// the other direction, run(), is scheduler.cc.)
#include <algorithm>
#include <array>

#include "dataplane/engine/engine_loc.h"
#include "dataplane/engine/fast_path.h"

namespace roce::engine {

using wire::OpMask;

namespace {
[[gnu::always_inline]] inline bool check_address(const Qp& qp, const wire::RxPkt& pkt);
}  // namespace

std::string_view to_string(Counter c) {
  static constexpr std::array<std::string_view, kCounterCount> k{"rx_frames",
                                                                 "rx_bytes",
                                                                 "tx_frames",
                                                                 "tx_bytes",
                                                                 "rx_drop_verdict",
                                                                 "rx_drop_unknown_qp",
                                                                 "rx_drop_qp_state",
                                                                 "rx_drop_wrong_transport",
                                                                 "rx_drop_address",
                                                                 "rx_drop_pkey",
                                                                 "rx_drop_qkey",
                                                                 "rx_drop_unexpected",
                                                                 "rx_cnp",
                                                                 "duplicate_requests",
                                                                 "seq_err_nak_sent",
                                                                 "rnr_nak_sent",
                                                                 "inv_req_nak_sent",
                                                                 "rem_access_nak_sent",
                                                                 "rem_op_nak_sent",
                                                                 "ack_sent",
                                                                 "read_responses_sent",
                                                                 "atomic_acks_sent",
                                                                 "ack_rcvd",
                                                                 "seq_err_nak_rcvd",
                                                                 "rnr_nak_rcvd",
                                                                 "err_nak_rcvd",
                                                                 "retransmit_timeouts",
                                                                 "retransmit_probes",
                                                                 "retries",
                                                                 "retransmitted_packets",
                                                                 "retry_exceeded",
                                                                 "rnr_retry_exceeded",
                                                                 "tx_ring_full",
                                                                 "tx_zero_copy_frames",
                                                                 "cq_overflow",
                                                                 "async_events",
                                                                 "async_events_lost",
                                                                 "rx_drop_uc_resync",
                                                                 "rx_drop_uc_error",
                                                                 "rx_drop_after_seq_nak",
                                                                 "rx_drop_dup_read",
                                                                 "rx_drop_rd_atomic_busy",
                                                                 "resp_queue_full",
                                                                 "rx_drop_local_access",
                                                                 "rx_drop_vlan",
                                                                 "tx_self_delivered",
                                                                 "tx_self_dropped",
                                                                 "rx_ecn_ce",
                                                                 "cnp_sent",
                                                                 "cnp_handled",
                                                                 "cnp_ignored",
                                                                 "cnp_ignored_no_cc",
                                                                 "cnp_ignored_unmatched",
                                                                 "cnp_ignored_not_rts",
                                                                 "cnp_ignored_idle",
                                                                 "cc_parked",
                                                                 "read_rerequests",
                                                                 "read_rerequest_bytes",
                                                                 "rx_dup_read_responses",
                                                                 "retransmitted_bytes",
                                                                 "sr_ooo_placed",
                                                                 "sr_sacks_sent",
                                                                 "sr_sacks_rcvd",
                                                                 "sr_retransmits",
                                                                 "sr_retransmit_bytes",
                                                                 "ack_deferred",
                                                                 "window_stalls",
                                                                 "window_stall_ns",
                                                                 "sr_edge_resends",
                                                                 "sr_connections",
                                                                 "tx_fast_path",
                                                                 "rx_fast_path",
                                                                 "sr_unplaced",
                                                                 "probes_deferred",
                                                                 "sr_forged_dropped"};
  return k[static_cast<std::size_t>(c)];
}

namespace {
[[gnu::always_inline]] inline bool check_address(const Qp& qp, const wire::RxPkt& pkt) {
  // rxe check_addr: RC/UC packets must come from the QP's peer and be sent to us.
  const wire::FrameSpec& t = qp.tx;
  if (pkt.ip_version != t.ip_version) return false;
  if (pkt.ip_version == wire::IpVersion::kV4) return pkt.ipv4().src() == t.dst_ip4;
  return pkt.ipv6().src() == t.dst_ip6;
}
}  // namespace

// Inline in receive(), its one caller.
[[gnu::always_inline]] inline void Engine::Stages::dispatch(Engine& eng, const wire::RxPkt& pkt) {
  const wire::OpcodeInfo& info = *pkt.info;
  if (info.mask.has(OpMask::kCnp)) [[unlikely]] {
    eng.stats_.inc(Counter::kRxCnp);
    // The reaction point's (congestion.cc): only for a connected QP, from its peer, in our
    // partition (the P_Key check of the data path below).
    Qp* qp = eng.find_qp(pkt.dest_qp.raw());
    if (qp != nullptr && qp->type != QpType::kUd && (pkt.bth().pkey() & 0x7FFF) == 0x7FFF &&
        check_address(*qp, pkt))
      cc_on_cnp(eng, *qp);
    else
      cc_ignore_cnp(eng, Counter::kCnpIgnoredUnmatched);
    return;
  }
  Qp* qp = eng.find_qp(pkt.dest_qp.raw());
  if (qp == nullptr) {
    eng.stats_.inc(Counter::kRxDropUnknownQp);
    return;
  }
  const wire::Transport t = wire::transport_of(pkt.opcode);
  const bool match = (qp->type == QpType::kRc && t == wire::Transport::kRc) ||
                     (qp->type == QpType::kUc && t == wire::Transport::kUc) ||
                     (qp->type == QpType::kUd && t == wire::Transport::kUd);
  // Selective repeat's own opcodes (manufacturer specific) reach only an RC QP that negotiated
  // it (Qp::sr); anywhere else they are dropped like any other transport's.
  if (!match && !(t == wire::Transport::kVendor && qp->sr != nullptr)) {
    eng.stats_.inc(Counter::kRxDropWrongTransport);
    return;
  }
  // P_Key: low 15 bits equal, and one side a full member (we are 0xFFFF, a full member).
  if ((pkt.bth().pkey() & 0x7FFF) != 0x7FFF) {
    eng.stats_.inc(Counter::kRxDropPkey);
    return;
  }
  if (qp->type == QpType::kUd) {
    resp_on_ud(eng, *qp, pkt);
    return;
  }
  if (qp->state == QpState::kReset || qp->state == QpState::kInit || qp->state == QpState::kErr) {
    eng.stats_.inc(Counter::kRxDropQpState);
    return;
  }
  if (!check_address(*qp, pkt)) {
    eng.stats_.inc(Counter::kRxDropAddress);
    return;
  }
  // ECN CE is counted here; the CNP (congestion.cc) goes out only once the responder or the
  // completer has accepted the packet's PSN, so that a frame spoofed with the peer's address
  // and a PSN out of the window cannot make us send the peer a CNP.
  if (pkt.ecn == 3) [[unlikely]]
    eng.stats_.inc(Counter::kRxEcnCe);
  if (info.mask.has(OpMask::kResponse))
    comp_on_response(eng, *qp, pkt);
  else
    resp_on_request(eng, *qp, pkt);
}

void Engine::receive(std::span<const std::uint8_t> frame, std::uint64_t now_ns,
                     bool ip_checksum_ok) {
  now_ = now_ns;
  stats_.inc(Counter::kRxFrames);
  stats_.inc(Counter::kRxBytes, frame.size());
  if (Stages::rx_fast(*this, frame, ip_checksum_ok)) return;  // fast_path.h
  Stages::rx_general(*this, frame, ip_checksum_ok);
}

// Not inline: the fast path's caller then saves only the registers the fast path needs.
[[gnu::noinline]] void Engine::Stages::rx_general(Engine& eng, std::span<const std::uint8_t> frame,
                                                  bool ip_checksum_ok) {
  wire::RxPkt pkt;
  wire::ParseOptions opts;
  opts.verify_ip_checksum = !ip_checksum_ok;
  const wire::Verdict v = wire::parse_frame_inline(frame, pkt, opts);
  if (v != wire::Verdict::kOk) {
    ++eng.stats_.verdicts[static_cast<std::size_t>(v)];
    eng.stats_.inc(Counter::kRxDropVerdict);
    return;
  }
  ++eng.stats_.verdicts[0];
  // The port filters VLANs first; the engine checks again, so that no port (a PMD that does
  // not filter, the test wire, an FPGA model) can hand it another VLAN's traffic.
  // VID 0 (priority tag only) counts as untagged, as in Linux.
  const std::uint16_t vid = pkt.has_vlan ? pkt.vlan_id & 0x0FFF : 0;
  if (eng.cfg_.vlan_id ? !pkt.has_vlan || vid != *eng.cfg_.vlan_id : vid != 0) {
    eng.stats_.inc(Counter::kRxDropVlan);
    return;
  }
  const bool to_us = pkt.ip_version == wire::IpVersion::kV4
                         ? pkt.ipv4().dst() == eng.cfg_.ipv4
                         : eng.cfg_.ipv6 && pkt.ipv6().dst() == *eng.cfg_.ipv6;
  if (!to_us) {
    eng.stats_.inc(Counter::kRxDropAddress);
    return;
  }
  dispatch(eng, pkt);
}

}  // namespace roce::engine
