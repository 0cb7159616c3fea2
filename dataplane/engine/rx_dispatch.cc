/// @file
/// Receive dispatch (rxe_recv.c): parse and validate the frame, check that it is addressed to
/// this engine, find the QP, check transport, P_Key and peer address, then hand it to exactly
/// one stage: the responder for requests, the completer for responses. Also run(), the
/// per-poll driver of timers, ACKs, READ responses and the send queues.
#include <algorithm>
#include <array>

#include "dataplane/engine/engine.h"

namespace roce::engine {

using wire::OpMask;

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
                                                                 "rx_drop_vlan"};
  return k[static_cast<std::size_t>(c)];
}

bool Engine::check_address(const Qp& qp, const wire::RxPkt& pkt) const {
  // rxe check_addr: RC/UC packets must come from the QP's peer and be sent to us.
  const wire::FrameSpec& t = qp.tx;
  if (pkt.ip_version != t.ip_version) return false;
  if (pkt.ip_version == wire::IpVersion::kV4) return pkt.ipv4().src() == t.dst_ip4;
  return pkt.ipv6().src() == t.dst_ip6;
}

void Engine::receive(std::span<const std::uint8_t> frame, std::uint64_t now_ns,
                     bool ip_checksum_ok) {
  now_ = now_ns;
  stats_.inc(Counter::kRxFrames);
  stats_.inc(Counter::kRxBytes, frame.size());
  wire::RxPkt pkt;
  wire::ParseOptions opts;
  opts.verify_ip_checksum = !ip_checksum_ok;
  const wire::Verdict v = wire::parse_frame(frame, pkt, opts);
  if (v != wire::Verdict::kOk) {
    ++stats_.verdicts[static_cast<std::size_t>(v)];
    stats_.inc(Counter::kRxDropVerdict);
    return;
  }
  ++stats_.verdicts[0];
  // The port filters VLANs first; the engine checks again, so that no port (a PMD that does
  // not filter, the test wire, an FPGA model) can hand it another VLAN's traffic.
  // VID 0 (priority tag only) counts as untagged, as in Linux.
  const std::uint16_t vid = pkt.has_vlan ? pkt.vlan_id & 0x0FFF : 0;
  if (cfg_.vlan_id ? !pkt.has_vlan || vid != *cfg_.vlan_id : vid != 0) {
    stats_.inc(Counter::kRxDropVlan);
    return;
  }
  const bool to_us = pkt.ip_version == wire::IpVersion::kV4
                         ? pkt.ipv4().dst() == cfg_.ipv4
                         : cfg_.ipv6 && pkt.ipv6().dst() == *cfg_.ipv6;
  if (!to_us) {
    stats_.inc(Counter::kRxDropAddress);
    return;
  }
  dispatch(pkt);
}

void Engine::dispatch(const wire::RxPkt& pkt) {
  const wire::OpcodeInfo& info = *pkt.info;
  if (info.mask.has(OpMask::kCnp)) {
    stats_.inc(Counter::kRxCnp);  // congestion control consumes these (DCQCN issue)
    return;
  }
  Qp* qp = find_qp(pkt.dest_qp.raw());
  if (qp == nullptr) {
    stats_.inc(Counter::kRxDropUnknownQp);
    return;
  }
  const wire::Transport t = wire::transport_of(pkt.opcode);
  const bool match = (qp->type == QpType::kRc && t == wire::Transport::kRc) ||
                     (qp->type == QpType::kUc && t == wire::Transport::kUc) ||
                     (qp->type == QpType::kUd && t == wire::Transport::kUd);
  if (!match) {
    stats_.inc(Counter::kRxDropWrongTransport);
    return;
  }
  // P_Key: low 15 bits equal, and one side a full member (we are 0xFFFF, a full member).
  if ((pkt.bth().pkey() & 0x7FFF) != 0x7FFF) {
    stats_.inc(Counter::kRxDropPkey);
    return;
  }
  if (qp->type == QpType::kUd) {
    resp_on_ud(*qp, pkt);
    return;
  }
  if (qp->state == QpState::kReset || qp->state == QpState::kInit || qp->state == QpState::kErr) {
    stats_.inc(Counter::kRxDropQpState);
    return;
  }
  if (!check_address(*qp, pkt)) {
    stats_.inc(Counter::kRxDropAddress);
    return;
  }
  if (info.mask.has(OpMask::kResponse))
    comp_on_response(*qp, pkt);
  else
    resp_on_request(*qp, pkt);
}

void Engine::run(std::uint64_t now_ns, bool rx_backlog) {
  now_ = now_ns;
  if (next_timer_ != 0 && now_ >= next_timer_) {
    // Bounded, so that a receiver that never catches up still retransmits.
    constexpr std::uint32_t kMaxDefer = 8;
    if (rx_backlog && timers_deferred_ < kMaxDefer) {
      ++timers_deferred_;
    } else {
      timers_deferred_ = 0;
      run_timers();
    }
  }
  resp_flush_acks();
  // Round-robin over the QPs with work, a few packets each per pass, so that one long
  // message does not starve the others.
  constexpr std::uint32_t kPerQp = 16;
  bool progress = true;
  ++run_gen_;
  while (progress && tx_.free() > kAckReserve) {
    progress = false;
    for (std::size_t i = 0; i < read_list_.size();) {
      Qp& qp = *read_list_[i];
      std::uint32_t budget = kPerQp;
      resp_read_pump(qp, budget);
      progress |= budget != kPerQp;
      if (qp.resp.out_empty() || qp.state == QpState::kErr) {
        qp.in_read_list = false;
        read_list_[i] = read_list_.back();
        read_list_.pop_back();
        continue;
      }
      ++i;
    }
    for (std::size_t i = 0; i < send_list_.size();) {
      Qp& qp = *send_list_[i];
      // With many QPs, each one's state and payload is elsewhere in memory: ask for the next
      // QP's while this one is sent (its struct first, then, one QP later, its payload).
      if (i + 2 < send_list_.size()) __builtin_prefetch(send_list_[i + 2]);
      if (i + 1 < send_list_.size()) prefetch_next_packet(*send_list_[i + 1]);
      std::uint32_t budget = kPerQp;
      if (qp.comp.cwnd != 0) {
        // Recovering from a loss: a few packets per call (EngineConfig::recovery_batch), so
        // that the loop soon reads the acknowledgements that move the window on.
        if (qp.run_gen != run_gen_) {
          qp.run_gen = run_gen_;
          qp.run_sent = 0;
        }
        budget = std::min(budget, cfg_.recovery_batch - std::min(qp.run_sent, cfg_.recovery_batch));
      }
      const std::uint32_t budget0 = budget;
      const std::uint32_t before_next = qp.req.next_wqe;
      if (budget != 0) req_pump(qp, budget);
      qp.run_sent += budget0 - budget;
      progress |= budget != budget0 || qp.req.next_wqe != before_next;
      const bool idle =
          qp.state != QpState::kRts || (qp.req.next_wqe == qp.sq_tail && !qp.comp.retry_pending);
      if (idle) {
        qp.in_send_list = false;
        send_list_[i] = send_list_.back();
        send_list_.pop_back();
        continue;
      }
      ++i;
    }
  }
}

}  // namespace roce::engine
