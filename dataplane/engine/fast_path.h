/// @file
/// The receive fast path (issue 33), inline in Engine::receive: the next in-order RDMA WRITE
/// Only of a connected RC QP, taken in one pass. The frame's DestQP, at its fixed offset in an
/// untagged IPv4 frame, finds the QP; one masked compare of the first 48 bytes against the QP's
/// expected header (Qp::rx_expect: addresses, EtherType, IP version and protocol, no fragment,
/// the RoCEv2 port, TVer, P_Key) stands for the checks of parse_frame, receive and dispatch
/// that do not change from packet to packet; what does (lengths, IP checksum, opcode, ECN, PSN,
/// the QP's state and access, the RETH and its key, ICRC) is checked here as the general path
/// checks it. Anything else, or any check that fails, returns false with nothing changed, and
/// the frame takes the general path, which names the drop or the answer. Tests feed the same
/// frames, good and corrupted, to an engine with and without the fast paths and compare every
/// effect (tests/protocol/fast_path_test.cc).
///
/// A selective-repeat QP's in-order WRITE Only is the same packet to the general path while
/// nothing is placed past ePSN (SrState::nkept) and no SR message is open: resp_check_op_seq
/// lets it through, and resp_step_in_order has nothing to step over. Otherwise (packets kept
/// beyond a gap, which this one may fill) it is the general path's.
#pragma once

#include "dataplane/engine/engine_loc.h"
#include "dataplane/wire/fast_frame.h"

namespace roce::engine {

/// The ICRC of an untagged IPv4 frame on the fast paths: `icrc_len` bytes from the IP header
/// (`l3`), of which the first `hdr_len` are headers. A short frame all with the fold kernel; a
/// long one with the kernel over the headers, read in place with their masked fields as ones,
/// then ISA-L over payload and pad (compute_icrc copies the headers to mask them first).
[[gnu::always_inline]] inline std::uint32_t fast_icrc_v4(const std::uint8_t* l3,
                                                         std::size_t icrc_len,
                                                         std::size_t hdr_len) {
  using namespace wire;
  if (!kCrcFoldUsable) [[unlikely]]
    return compute_icrc(l3, icrc_len, IpVersion::kV4);
  if (icrc_len < kCrcFoldMax) return icrc_fold_v4_or(l3, icrc_len);
  return crc32_zlib(icrc_fold_v4_or(l3, hdr_len), l3 + hdr_len, icrc_len - hdr_len);
}

[[gnu::always_inline]] inline bool Engine::Stages::rx_fast(Engine& eng,
                                                           std::span<const std::uint8_t> frame,
                                                           bool ip_checksum_ok) {
  using namespace wire;
  constexpr std::size_t kHdr = kBthSize + kRethSize;  // WRITE Only
  constexpr std::size_t kReth = kFastBth + kBthSize;
  const std::uint8_t* p = frame.data();
  const std::size_t n = frame.size();
  if (n < kFastBth + kBthSize + kIcrcSize) return false;  // (a WRITE Last: no RETH)
  Qp* qp = eng.find_qp(load_be32(p + kFastBth + 4) & kMask24);
  if (qp == nullptr || !qp->rx_expect.armed || !rx_expect_match(qp->rx_expect, p)) return false;
  // The opcode, and no CE mark (the general path counts it and may answer with a CNP). A WRITE
  // First, Middle or Last is rx_fast_seq's.
  if (p[kFastBth] != raw(Opcode::kRcWriteOnly) || (p[kFastL3 + 1] & 3) == 3) [[unlikely]]
    return rx_fast_seq(eng, *qp, frame, ip_checksum_ok);
  const std::size_t total = load_be16(p + kFastL3 + 2);
  const std::size_t end = kFastL3 + total;  // one past the ICRC
  if (end > n || end < kFastBth + kHdr + kIcrcSize ||
      load_be16(p + kFastL4 + 4) != total - Ipv4View::kSize)
    return false;
  if (!ip_checksum_ok && !ipv4_header_checksum_ok(p + kFastL3)) return false;
  const std::size_t with_pad = end - kIcrcSize - kFastBth - kHdr;
  const unsigned pad = (p[kFastBth + 1] >> 4) & 0x3u;
  if (pad > with_pad) return false;
  const auto len = static_cast<std::uint32_t>(with_pad - pad);
  Qp& q = *qp;
  RespState& rs = q.resp;
  const Psn psn(load_be32(p + kFastBth + 8));
  // dispatch's state test and resp_on_request's: RTR, RTS, SQD or SQE.
  if (static_cast<unsigned>(q.state) - static_cast<unsigned>(QpState::kRtr) > 3u ||
      psn != rs.epsn || rs.in_msg != RespState::InMsg::kNone ||
      (q.sr != nullptr && (q.sr->nkept != 0 || q.sr->rx_msg_open)) ||
      !(q.attr.qp_access_flags & kAccessRemoteWrite))
    return false;
  if (load_be32(p + kReth + 12) != len || len > q.pmtu()) return false;
  const std::size_t icrc_len = end - kIcrcSize - kFastL3;
  // (A long one: a selective-repeat QP's 4 KiB WRITE Only.)
  if (fast_icrc_v4(p + kFastL3, icrc_len, kFastBth + kHdr - kFastL3) !=
      load_le32(p + end - kIcrcSize))
    return false;
  const std::uint64_t va = load_be64(p + kReth);
  const std::uint32_t rkey = load_be32(p + kReth + 8);
  // C9-88: a zero-length WRITE needs no valid R_Key.
  CheckedRange range;
  if (len != 0 && eng.mrs_.check_memo(rs.write_memo, rkey, q.pd, va, len, kAccessRemoteWrite,
                                      range) != KeyCheck::kOk)
    return false;
  // Accepted: what parse_frame, receive, dispatch, resp_check_psn, resp_execute_write and
  // resp_acknowledge leave behind for a WRITE Only.
  ++eng.stats_.verdicts[0];
  eng.stats_.inc(Counter::kRxFastPath);
  rs.nak_sent = false;
  rs.write_rkey = rkey;
  rs.write_total = len;
  rs.write_range = range;
  if (len != 0)
    copy_payload(reinterpret_cast<std::uint8_t*>(va + range.delta), p + kReth + 16, len);
  rs.write_va = va + len;
  rs.write_remaining = 0;
  rs.msn = rs.msn + 1;
  rs.epsn = psn + 1;
  if (p[kFastBth + 8] & 0x80) defer_ack(q, psn, eng.ack_list_);
  return true;
}

}  // namespace roce::engine
