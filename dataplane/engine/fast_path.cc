/// @file
/// The requester's fast path (issue 33): a run of one-packet SEND and WRITE messages at the
/// head of an RC QP's send queue, each frame written straight from its WQE into the transmit
/// ring (wire::write_request_only: the path template, then the BTH and its extension headers
/// with the opcode known, the payload, the ICRC). The general path (req_packet) fills a
/// PacketFields by the message's position, looks its opcode up in the opcode table and writes
/// the frame from that; here the WQE's opcode picks the writer, and the tests the general path
/// makes per packet that cannot fail in such a run (a resend, a probe, the window, the ring)
/// are made once for the run. The frames and every effect are the general path's (tests run
/// both and compare: tests/protocol/fast_path_test.cc).
///
/// req_fast_zc does the same for the packets of a SEND or WRITE of several packets or sent
/// zero-copy (issue 33, 64 KiB WRITE against the link), its first (First or Only, a WRITE's with
/// its RETH) included: headers from the template, the ICRC over them and over the payload
/// where it is (one pass), the payload left in registered memory for the port to attach (or,
/// shorter than the zero-copy threshold, copied behind the headers).
///
/// Selective repeat (issue 32) changes nothing a new WRITE packet needs but its opcode and
/// RETH: every packet is a WRITE Only with the RETH of its own bytes (req_fields), and the SR
/// state (SACKs, the resend queue, the RACK record, the message indices of SENDs) is touched
/// only by what comes back and by retransmissions, which stay on the general path; the window
/// is window_max()'s SR cap. So both fast paths take a selective-repeat QP's WRITEs (req_fast
/// its one-packet ones, the same frame either way); SENDs and WRITEs with immediate carry SR
/// opcodes and a message index (sr_emit) and stay on the general path.
#include "dataplane/engine/fast_path.h"

#include <algorithm>

namespace roce::engine {

using wire::Opcode;
using wire::Psn;

bool Engine::Stages::req_fast(Engine& eng, Qp& qp, std::uint32_t& budget, std::uint32_t& wmax) {
  // What holds for the whole run, or it is the general path's: a new message on a connected
  // RC QP in RTS that is not resending, probing or failed, over an untagged IPv4 path.
  if (!eng.cfg_.fast_paths || qp.type != QpType::kRc || qp.state != QpState::kRts ||
      qp.req.failed || qp.comp.probe_sent || qp.comp.probing || qp.comp.stall_since != 0 ||
      qp.req.next_psn != qp.req.high_psn || !wire::fast_tx_path(qp.hdr))
    return false;
  // SEND, WRITE, with immediate, SEND with invalidate (WrOpcode 0-3 and 9). With selective
  // repeat only WRITE: a one-packet WRITE is the same WRITE Only either way (req_fields), and
  // sr_start_wqe has nothing to do for it; the others carry SR opcodes (sr_emit).
  constexpr std::uint32_t kOps = 0x20F;
  const unsigned max_op = qp.req.sr ? 0 : 9;  // WrOpcode::kWrite is 0
  const std::uint32_t pmtu = qp.pmtu();
  // A payload this long goes out zero-copy (req_emit, req_fast_zc), or takes several packets.
  const std::uint64_t zc = eng.tx_zero_copy_min_ != 0 ? eng.tx_zero_copy_min_ : ~0ull;
  const std::uint64_t max_len = std::min<std::uint64_t>(pmtu, zc - 1);
  // A head that is no such message (a long one, new or under way) is told before the run is
  // set up: req_pump asks at every turn and at every new message.
  if (qp.req.next_wqe == qp.sq_tail) return false;
  if (const SendWqe& h = qp.wqe(qp.req.next_wqe);
      h.state != WqeState::kPosted || h.length > max_len)
    return false;
  if (wmax == 0) wmax = window_max(eng, qp);
  const std::int32_t room = static_cast<std::int32_t>(qp.comp.cwnd ? qp.comp.cwnd : wmax) -
                            distance(qp.req.next_psn, qp.comp.psn);
  const std::uint32_t tx_free = eng.tx_.free();
  if (room <= 0 || tx_free <= kAckReserve) return false;
  const std::uint32_t n =
      std::min({budget, static_cast<std::uint32_t>(room), tx_free - kAckReserve});
  // The QP's key memo (req_check_sges, MrTable::check_memo), held in locals for the run: the
  // frames written are bytes the compiler cannot tell from it, and nothing in the run changes
  // the MR table. Empty (length 0) when it does not hold for this table and PD.
  const KeyMemo& memo = qp.req.sge_memo;
  const auto load_memo = [&](std::uint32_t& key, std::uint64_t& addr, std::uint64_t& length,
                             std::uint64_t& delta) {
    const bool ok = memo.gen == eng.mrs_.gen() && memo.pd == qp.pd;
    key = memo.key;
    addr = memo.addr;
    length = ok ? memo.length : 0;
    delta = memo.delta;
  };
  std::uint32_t m_key;
  std::uint64_t m_addr, m_length, m_delta;
  load_memo(m_key, m_addr, m_length, m_delta);
  const auto sq_mask = static_cast<std::uint32_t>(qp.sq.size() - 1);  // Qp::sq_slot
  const bool fold = wire::kCrcFoldUsable;
  TxRing::Run ring(eng.tx_);
  std::uint64_t bytes = 0;
  std::uint32_t sent = 0;
  while (sent < n && qp.req.next_wqe != qp.sq_tail) {
    const std::uint32_t idx = qp.req.next_wqe & sq_mask;
    SendWqe& w = qp.sq[idx];
    const auto op = static_cast<unsigned>(w.opcode);
    if (w.state != WqeState::kPosted || op > max_op || !((kOps >> op) & 1) || w.length > max_len ||
        ((w.flags & kSendFence) && qp.req.rd_atomic_out > 0))
      break;
    std::uint8_t* out = ring.slot();
    if (out == nullptr) break;  // reserve()'s case: the general path's
    // The payload: inline, or the one SGE through the QP's key memo (req_check_sges). A list
    // of several, or a key that does not grant it, is the general path's (which fails the WQE).
    const std::uint8_t* src = nullptr;
    CheckedRange range;
    if (w.is_inline) {
      src = qp.sq_inline.data() + std::size_t{idx} * qp.cap.max_inline_data;
    } else if (w.num_sge == 1) {
      const Sge& sge = qp.sq_sges[std::size_t{idx} * qp.cap.max_send_sge];
      if (sge.length != w.length) break;
      if (sge.length != 0) {
        if (sge.lkey == m_key && sge.addr >= m_addr && sge.length <= m_length &&
            sge.addr - m_addr <= m_length - sge.length) {
          range = {eng.mrs_.gen(), m_delta};
        } else {
          if (eng.mrs_.check_memo(qp.req.sge_memo, sge.lkey, qp.pd, sge.addr, sge.length, 0,
                                  range) != KeyCheck::kOk)
            break;
          load_memo(m_key, m_addr, m_length, m_delta);
        }
        src = reinterpret_cast<const std::uint8_t*>(sge.addr + range.delta);
      }
    } else if (w.num_sge != 0) {
      break;
    }
    // req_start_wqe, req_fields and write_masked_frame for a message of one packet.
    const Psn psn = qp.req.next_psn;
    w.sge_range = range;
    w.first_psn = w.last_psn = psn;
    w.npkts = 1;
    w.read_done = 0;
    wire::OnlyFields f;
    f.ip_id = eng.ip_id_++;
    f.psn = psn.raw();
    f.se = (w.flags & kSendSolicited) != 0 && w.opcode != WrOpcode::kWrite;
    f.reth_va = w.remote_addr;
    f.reth_rkey = w.rkey;
    f.reth_len = static_cast<std::uint32_t>(w.length);
    const auto len = static_cast<std::uint32_t>(w.length);
    std::size_t flen;
    switch (w.opcode) {
      case WrOpcode::kWrite:
        flen = wire::write_request_only<Opcode::kRcWriteOnly>(qp.hdr, f, src, len, out, fold);
        break;
      case WrOpcode::kWriteImm:
        f.imm = w.imm;
        flen = wire::write_request_only<Opcode::kRcWriteOnlyImm>(qp.hdr, f, src, len, out, fold);
        break;
      case WrOpcode::kSend:
        flen = wire::write_request_only<Opcode::kRcSendOnly>(qp.hdr, f, src, len, out, fold);
        break;
      case WrOpcode::kSendImm:
        f.imm = w.imm;
        flen = wire::write_request_only<Opcode::kRcSendOnlyImm>(qp.hdr, f, src, len, out, fold);
        break;
      default:  // kSendInv
        f.imm = w.inv_rkey;
        flen = wire::write_request_only<Opcode::kRcSendOnlyInv>(qp.hdr, f, src, len, out, fold);
        break;
    }
    ring.commit(flen);  // tx_commit, its counters after the run
    bytes += flen;
    // req_packet's bookkeeping: AckReq went out, the RTT sample, the PSNs, the WQE sent.
    qp.req.pkts_since_ack_req = 0;
    if (!qp.comp.rtt_timing) {
      qp.comp.rtt_timing = true;
      qp.comp.rtt_psn = psn;
      qp.comp.rtt_start = eng.now_;
    }
    qp.req.next_psn = qp.req.high_psn = psn + 1;
    w.sent = w.length;
    w.state = WqeState::kSent;
    ++qp.req.next_wqe;
    ++sent;
  }
  ring.finish();
  if (sent == 0) return false;
  eng.stats_.inc(Counter::kTxFrames, sent);
  eng.stats_.inc(Counter::kTxBytes, bytes);
  eng.stats_.inc(Counter::kTxFastPath, sent);
  budget -= sent;
  // req_packet arms the timers after each packet; the first of the run found them unarmed.
  if (qp.comp.retrans_deadline == 0) arm_retransmit(eng, qp);
  if (qp.comp.probe_deadline == 0) arm_probe(eng, qp);
  return true;
}

bool Engine::Stages::req_fast_zc(Engine& eng, Qp& qp, SendWqe& w, std::uint32_t& budget,
                                 std::uint32_t& wmax) {
  // What holds for the whole run, or it is req_packet's: a message of one SGE, on a connected
  // RC QP in RTS that is not resending, probing, stalled or failed, over an untagged IPv4
  // path. With selective repeat, a WRITE (its packets are WRITE Only, each with its own RETH:
  // req_fields); the SR opcodes of the others are sr_emit's.
  constexpr std::uint32_t kOps = 0x20F;  // SEND, WRITE, with immediate, SEND with invalidate
  const auto op = static_cast<unsigned>(w.opcode);
  // Payloads this long go out zero-copy (zero_copy_ok), shorter ones are copied.
  const std::uint64_t zc = eng.tx_zero_copy_min_ != 0 ? eng.tx_zero_copy_min_ : ~0ull;
  const bool sr = qp.req.sr;
  if (!eng.cfg_.fast_paths || qp.type != QpType::kRc || qp.state != QpState::kRts ||
      qp.req.failed || qp.comp.probe_sent || qp.comp.probing || qp.comp.stall_since != 0 ||
      qp.req.next_psn != qp.req.high_psn || w.is_inline || w.num_sge != 1 || op > 9 ||
      !(((sr ? 1u : kOps) >> op) & 1) || !wire::fast_tx_path(qp.hdr))
    return false;
  const std::size_t idx = &w - qp.sq.data();
  const Sge& sge = qp.sq_sges[idx * qp.cap.max_send_sge];
  const std::uint32_t pmtu = qp.pmtu();
  const unsigned shift = qp.pmtu_shift();
  if (wmax == 0) wmax = window_max(eng, qp);
  const auto window = static_cast<std::int32_t>(qp.comp.cwnd ? qp.comp.cwnd : wmax);
  if (w.state == WqeState::kPosted) {
    // req_start_wqe for a message whose first packet goes out now: req_pump's window and
    // fence, req_packet's ring slot, req_check_sges' key check (through the QP's memo), all
    // before anything changes; else the general path starts it. (A message of one packet that
    // is copied is req_fast's; one without data, the general path's.)
    if (w.length == 0 || sge.length != w.length ||
        distance(qp.req.next_psn, qp.comp.psn) >= window ||
        ((w.flags & kSendFence) && qp.req.rd_atomic_out > 0) || eng.tx_.free() <= kAckReserve)
      return false;
    CheckedRange range;
    if (eng.mrs_.check_memo(qp.req.sge_memo, sge.lkey, qp.pd, sge.addr, sge.length, 0, range) !=
        KeyCheck::kOk)
      return false;
    w.sge_range = range;
    w.first_psn = qp.req.next_psn;
    w.npkts = static_cast<std::uint32_t>((w.length + pmtu - 1) >> shift);
    w.last_psn = w.first_psn + (w.npkts - 1);
    w.sent = 0;
    w.read_done = 0;
    w.state = WqeState::kSending;
  } else if (w.state != WqeState::kSending || w.sge_range.gen != eng.mrs_.gen()) {
    return false;  // (a range no longer held: MrTable::gen, something deregistered meanwhile)
  }
  const auto* base = reinterpret_cast<const std::uint8_t*>(sge.addr + w.sge_range.delta);
  const std::uint32_t every = std::min(eng.cfg_.ack_req_every, qp.cc.ack_req_every);
  const bool send = w.opcode != WrOpcode::kWrite && w.opcode != WrOpcode::kWriteImm;
  // The opcodes by position (pick_opcode) and the 4 bytes after the BTH, or after the RETH,
  // of the last packet (req_fields).
  const Opcode middle = send ? Opcode::kRcSendMiddle : Opcode::kRcWriteMiddle;
  Opcode last_op = send ? Opcode::kRcSendLast : Opcode::kRcWriteLast;
  std::uint32_t last_ext = 0;
  if (w.opcode == WrOpcode::kWriteImm || w.opcode == WrOpcode::kSendImm) {
    last_op = send ? Opcode::kRcSendLastImm : Opcode::kRcWriteLastImm;
    last_ext = w.imm;
  } else if (w.opcode == WrOpcode::kSendInv) {
    last_op = Opcode::kRcSendLastInv;
    last_ext = w.inv_rkey;
  }
  const bool last_se = (w.flags & kSendSolicited) && w.opcode != WrOpcode::kWrite;
  const bool fold = wire::kCrcFoldUsable;
  std::uint32_t sent = 0, zc_sent = 0;
  std::uint64_t bytes = 0;
  while (budget > 0) {
    // req_pump's window, req_packet's ring slot (tx_slot), req_fields' packet.
    if (distance(qp.req.next_psn, qp.comp.psn) >= window) break;
    const std::uint64_t left = w.length - w.sent;
    const auto len = static_cast<std::uint32_t>(std::min<std::uint64_t>(pmtu, left));
    // A payload past the SGE is one_sge_addr's (req_packet fails the WQE).
    if (w.sent + len > sge.length) break;
    const Psn psn = w.first_psn + static_cast<std::uint32_t>(w.sent >> shift);
    if (psn != qp.req.next_psn || eng.tx_.free() <= kAckReserve) break;
    const std::span<std::uint8_t> slot = eng.tx_.reserve();
    if (slot.empty()) break;
    const bool last = len == left;
    // IBA 9.7.6.1.3: AckReq on the last packet and every ack_req_every.
    const bool ack_req = last || qp.req.pkts_since_ack_req + 1 >= every;
    std::uint8_t* out = slot.data();
    std::size_t hdr;
    if (sr) [[unlikely]] {
      // Selective repeat: every packet a WRITE Only with the RETH of its own bytes.
      hdr = wire::write_zero_copy_headers_reth(qp.hdr, Opcode::kRcWriteOnly, false, ack_req,
                                               psn.raw(), eng.ip_id_++, w.remote_addr + w.sent,
                                               w.rkey, len, 0, len, out);
    } else if (w.sent == 0) [[unlikely]] {
      // The first packet: First or Only, a WRITE's with the RETH of the whole message.
      const Opcode first_op =
          !last ? (send ? Opcode::kRcSendFirst : Opcode::kRcWriteFirst)
                : static_cast<Opcode>(raw(last_op) + (w.opcode == WrOpcode::kSendInv ? 1 : 2));
      const std::uint32_t ext = last ? last_ext : 0;
      hdr = send ? wire::write_zero_copy_headers(qp.hdr, first_op, last && last_se, ack_req,
                                                 psn.raw(), eng.ip_id_++, ext, len, out)
                 : wire::write_zero_copy_headers_reth(
                       qp.hdr, first_op, last && last_se, ack_req, psn.raw(), eng.ip_id_++,
                       w.remote_addr, w.rkey, static_cast<std::uint32_t>(w.length), ext, len, out);
    } else {
      hdr = wire::write_zero_copy_headers(qp.hdr, last ? last_op : middle, last && last_se, ack_req,
                                          psn.raw(), eng.ip_id_++, last_ext, len, out);
    }
    const std::uint8_t* payload = base + w.sent;
    std::size_t trailer;
    if (len >= zc) {
      trailer =
          wire::finish_zero_copy(qp.hdr, out, hdr, payload, len, out + TxRing::kTrailerOff, fold);
      const TxSeg seg{payload, len};
      eng.tx_.commit_ext(hdr, {&seg, 1}, trailer);  // tx_commit_pieces, its counters below
      ++zc_sent;
    } else {
      // Copied (write_masked_frame's bytes): the payload behind the headers, pad and ICRC
      // behind it.
      wire::copy_payload(out + hdr, payload, len);
      trailer = wire::finish_zero_copy(qp.hdr, out, hdr, payload, len, out + hdr + len, fold);
      eng.tx_.commit(hdr + len + trailer);  // tx_commit, its counters below
    }
    bytes += hdr + len + trailer;
    // req_packet's bookkeeping of a new packet.
    qp.req.pkts_since_ack_req = ack_req ? 0 : qp.req.pkts_since_ack_req + 1;
    if (!qp.comp.rtt_timing) {
      qp.comp.rtt_timing = true;
      qp.comp.rtt_psn = psn;
      qp.comp.rtt_start = eng.now_;
    }
    qp.req.next_psn = qp.req.high_psn = psn + 1;
    w.sent += len;
    --budget;
    ++sent;
    if (last) {
      ++qp.req.next_wqe;
      w.state = WqeState::kSent;
      break;
    }
  }
  if (sent == 0) return false;
  eng.stats_.inc(Counter::kTxFrames, sent);
  eng.stats_.inc(Counter::kTxBytes, bytes);
  eng.stats_.inc(Counter::kTxZeroCopyFrames, zc_sent);
  eng.stats_.inc(Counter::kTxFastPath, sent);
  // req_packet arms the timers after each packet; the first of the run found them unarmed.
  if (qp.comp.retrans_deadline == 0) arm_retransmit(eng, qp);
  if (qp.comp.probe_deadline == 0) arm_probe(eng, qp);
  return true;
}

// The responder's fast path for the packets of a go-back-N WRITE of several packets (issue 33,
// 64 KiB WRITE against the link): what parse_frame, receive, dispatch and resp_on_request's
// steps (resp_check_psn, resp_check_op_seq, resp_check_op_valid, resp_execute_write,
// resp_acknowledge) check and leave behind for an in-order WRITE First, Middle or Last, in one
// pass; rx_fast has checked the frame's expected header and its ECN. A First carries exactly
// the path MTU and a RETH for more; a Middle exactly the path MTU of more than that still to
// come; a Last the rest, at most the path MTU. A Middle or Last goes on through the range
// its First checked, while the MR table is unchanged (MrTable::gen): after a change the
// general path checks the key again (MrTable::map), and names the NAK when it no longer holds.
// Immediate data (a receive WQE to take), a CE mark, any gap, duplicate or broken sequence,
// and a selective-repeat QP with packets kept past ePSN are the general path's.
bool Engine::Stages::rx_fast_seq(Engine& eng, Qp& q, std::span<const std::uint8_t> frame,
                                 bool ip_checksum_ok) {
  using namespace wire;
  const std::uint8_t* p = frame.data();
  const std::size_t n = frame.size();
  const unsigned op = p[kFastBth];
  if (op - raw(Opcode::kRcWriteFirst) > 2u || (p[kFastL3 + 1] & 3) == 3) return false;
  const bool first = op == raw(Opcode::kRcWriteFirst);
  const bool last = op == raw(Opcode::kRcWriteLast);
  const std::size_t hdr = first ? kBthSize + kRethSize : kBthSize;
  const std::size_t total = load_be16(p + kFastL3 + 2);
  const std::size_t end = kFastL3 + total;  // one past the ICRC
  if (end > n || end < kFastBth + hdr + kIcrcSize ||
      load_be16(p + kFastL4 + 4) != total - Ipv4View::kSize)
    return false;
  if (!ip_checksum_ok && !ipv4_header_checksum_ok(p + kFastL3)) return false;
  const std::size_t with_pad = end - kIcrcSize - kFastBth - hdr;
  const unsigned pad = (p[kFastBth + 1] >> 4) & 0x3u;
  if (pad > with_pad) return false;
  const auto len = static_cast<std::uint32_t>(with_pad - pad);
  RespState& rs = q.resp;
  const Psn psn(load_be32(p + kFastBth + 8));
  // dispatch's state test and resp_on_request's (RTR, RTS, SQD or SQE), resp_check_psn's,
  // resp_check_op_seq's (a First starts a message, a Middle or Last goes on with a WRITE) and
  // resp_check_op_valid's.
  const RespState::InMsg in = first ? RespState::InMsg::kNone : RespState::InMsg::kWrite;
  if (static_cast<unsigned>(q.state) - static_cast<unsigned>(QpState::kRtr) > 3u ||
      psn != rs.epsn || rs.in_msg != in ||
      (q.sr != nullptr && (q.sr->nkept != 0 || q.sr->rx_msg_open)) ||
      !(q.attr.qp_access_flags & kAccessRemoteWrite))
    return false;
  // resp_execute_write's lengths, and its range.
  const std::uint32_t pmtu = q.pmtu();
  std::uint64_t va, remaining;
  std::uint32_t rkey = 0;
  CheckedRange range;
  if (first) {
    va = load_be64(p + kFastBth + kBthSize);
    rkey = load_be32(p + kFastBth + kBthSize + 8);
    remaining = load_be32(p + kFastBth + kBthSize + 12);
    if (len != pmtu || remaining <= pmtu) return false;
  } else {
    va = rs.write_va;
    remaining = rs.write_remaining;
    range = rs.write_range;
    if (last ? len != remaining || len > pmtu : len != pmtu || remaining <= pmtu) return false;
    if (range.gen != eng.mrs_.gen()) return false;
  }
  // The ICRC over the headers (40 or 56 bytes from the IP header), payload and pad.
  if (fast_icrc_v4(p + kFastL3, end - kIcrcSize - kFastL3, kFastBth + hdr - kFastL3) !=
      load_le32(p + end - kIcrcSize))
    return false;
  // The First's key over the whole message (its length is more than the path MTU, so never 0).
  if (first && eng.mrs_.check_memo(rs.write_memo, rkey, q.pd, va, remaining, kAccessRemoteWrite,
                                   range) != KeyCheck::kOk)
    return false;
  // Accepted: what the general path leaves behind.
  ++eng.stats_.verdicts[0];
  eng.stats_.inc(Counter::kRxFastPath);
  rs.nak_sent = false;
  if (first) {
    rs.write_rkey = rkey;
    rs.write_total = remaining;
    rs.write_range = range;
  }
  copy_payload(reinterpret_cast<std::uint8_t*>(va + range.delta), p + kFastBth + hdr, len);
  rs.write_va = va + len;
  rs.write_remaining = remaining - len;
  if (last) {
    rs.in_msg = RespState::InMsg::kNone;
    rs.msn = rs.msn + 1;
  } else {
    rs.in_msg = RespState::InMsg::kWrite;
  }
  rs.epsn = psn + 1;
  if (p[kFastBth + 8] & 0x80) defer_ack(q, psn, eng.ack_list_);
  return true;
}

}  // namespace roce::engine
