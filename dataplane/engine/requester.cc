/// @file
/// Requester (IBA 9.7.4; rxe_req.c): turns send-queue WQEs into request packets, in order,
/// within the PSN window and the READ/atomic credit (max_rd_atomic), honouring fences. It
/// carries out the go-back-N rewinds the completer and the timers order (retransmit.cc).
#include <algorithm>
#include <cstring>

#include "dataplane/engine/engine_loc.h"

namespace roce::engine {

using wire::Opcode;
using wire::Psn;

namespace {

// Opcode of a SEND or WRITE packet from its position in the message (IBA 9.4 Table 38).
Opcode pick_opcode(const SendWqe& w, bool first, bool last, bool uc) {
  const std::uint8_t base = uc ? 0x20 : 0x00;
  Opcode op{};
  switch (w.opcode) {
    case WrOpcode::kSend:
    case WrOpcode::kSendImm:
    case WrOpcode::kSendInv: {
      const bool imm = w.opcode == WrOpcode::kSendImm;
      const bool inv = w.opcode == WrOpcode::kSendInv;
      if (first && last)
        op = inv ? Opcode::kRcSendOnlyInv : imm ? Opcode::kRcSendOnlyImm : Opcode::kRcSendOnly;
      else if (first)
        op = Opcode::kRcSendFirst;
      else if (last)
        op = inv ? Opcode::kRcSendLastInv : imm ? Opcode::kRcSendLastImm : Opcode::kRcSendLast;
      else
        op = Opcode::kRcSendMiddle;
      break;
    }
    default: {
      const bool imm = w.opcode == WrOpcode::kWriteImm;
      if (first && last)
        op = imm ? Opcode::kRcWriteOnlyImm : Opcode::kRcWriteOnly;
      else if (first)
        op = Opcode::kRcWriteFirst;
      else if (last)
        op = imm ? Opcode::kRcWriteLastImm : Opcode::kRcWriteLast;
      else
        op = Opcode::kRcWriteMiddle;
      break;
    }
  }
  return static_cast<Opcode>(raw(op) + base);
}

}  // namespace

void Engine::Stages::schedule_send(Engine& eng, Qp& qp) {
  if (qp.in_send_list) return;
  qp.in_send_list = true;
  eng.send_list_.push_back(&qp);
}

namespace {
// Walks the payload bytes [offset, offset + len) of a WQE's scatter/gather list, piece by
// piece: `f(sge, address within it, bytes)` returns false to stop. Returns the bytes walked.
template <class F>
std::size_t walk_sges(const Sge* sge, std::uint32_t num_sge, std::uint64_t offset, std::size_t len,
                      F&& f) {
  std::size_t done = 0;
  for (std::uint32_t i = 0; i < num_sge && done < len; ++i) {
    if (offset >= sge[i].length) {
      offset -= sge[i].length;
      continue;
    }
    const std::size_t n = std::min<std::size_t>(sge[i].length - offset, len - done);
    if (!f(sge[i], sge[i].addr + offset, n)) break;
    done += n;
    offset = 0;
  }
  return done;
}
}  // namespace

// The engine address of [offset, offset + len) of a one-SGE WQE whose checked range still holds
// (MrTable::gen unchanged); null otherwise (the caller walks the SGEs through their keys).
[[gnu::always_inline]] inline const std::uint8_t* Engine::Stages::one_sge_addr(
    const Engine& eng, const Qp& qp, const SendWqe& w, std::uint64_t offset, std::size_t len) {
  if (w.num_sge != 1 || w.sge_range.gen != eng.mrs_.gen()) return nullptr;
  const Sge& sge = qp.sq_sges[static_cast<std::size_t>(&w - qp.sq.data()) * qp.cap.max_send_sge];
  if (offset + len > sge.length) return nullptr;
  return reinterpret_cast<const std::uint8_t*>(sge.addr + offset + w.sge_range.delta);
}

void Engine::Stages::prefetch_payload(const Engine& eng, const Qp& qp, const SendWqe& w,
                                      std::uint64_t offset, std::size_t len) {
  if (w.is_inline || len == 0) return;
  const std::size_t idx = &w - qp.sq.data();
  if (const std::uint8_t* p = one_sge_addr(eng, qp, w, offset, len)) {
    for (auto a = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{63};
         a < reinterpret_cast<std::uintptr_t>(p) + len; a += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 2);
    return;
  }
  walk_sges(qp.sq_sges.data() + idx * qp.cap.max_send_sge, w.num_sge, offset, len,
            [&](const Sge& sge, std::uint64_t addr, std::size_t n) {
              // A prefetch never faults, but only the engine's own address is worth fetching.
              const Mr* mr = eng.mrs_.find(sge.lkey);
              if (mr == nullptr) return false;
              const std::uint64_t host = addr + mr->host_delta;
              for (std::uint64_t a = host & ~std::uint64_t{63}; a < host + n; a += 64)
                __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 2);
              return true;
            });
}

// Every packet reads the WQE's buffers through their keys again: a region deregistered
// while its message is being sent (or re-sent after a loss) ends the WQE with a local
// protection error instead of being read after it was freed.
std::size_t Engine::Stages::gather(Engine& eng, Qp& qp, const SendWqe& w, std::uint64_t offset,
                                   std::uint8_t* dst, std::size_t len, WcStatus& err) {
  const std::size_t idx = &w - qp.sq.data();
  if (w.is_inline) {
    std::memcpy(dst, qp.sq_inline.data() + idx * qp.cap.max_inline_data + offset, len);
    return len;
  }
  const Sge* sge = qp.sq_sges.data() + idx * qp.cap.max_send_sge;
  if (w.num_sge == 1 && offset + len <= sge->length) {  // the common case: one piece
    const std::uint8_t* src =
        eng.mrs_.map(w.sge_range, sge->lkey, qp.pd, sge->addr + offset, len, 0);
    if (src == nullptr) {
      err = WcStatus::kLocProtErr;
      return 0;
    }
    std::memcpy(dst, src, len);
    return len;
  }
  bool prot = false;
  const std::size_t done =
      walk_sges(sge, w.num_sge, offset, len, [&](const Sge& s, std::uint64_t addr, std::size_t n) {
        const std::uint8_t* src = eng.mrs_.map(s.lkey, qp.pd, addr, n, 0);
        if (src == nullptr) {
          prot = true;
          return false;
        }
        std::memcpy(dst, src, n);
        dst += n;
        return true;
      });
  if (prot)
    err = WcStatus::kLocProtErr;
  else if (done != len)
    err = WcStatus::kLocLenErr;
  return done;
}

std::size_t Engine::Stages::gather_ext(Engine& eng, Qp& qp, const SendWqe& w, std::uint64_t offset,
                                       std::size_t len, TxSeg* out) {
  if (w.is_inline) return 0;
  const std::size_t idx = &w - qp.sq.data();
  if (const std::uint8_t* p = one_sge_addr(eng, qp, w, offset, len)) {
    out[0] = {p, static_cast<std::uint32_t>(len)};
    return 1;
  }
  std::size_t n = 0;
  const std::size_t done =
      walk_sges(qp.sq_sges.data() + idx * qp.cap.max_send_sge, w.num_sge, offset, len,
                [&](const Sge& s, std::uint64_t addr, std::size_t k) {
                  if (n == TxRing::kMaxExt) return false;
                  const std::uint8_t* p = eng.mrs_.map(s.lkey, qp.pd, addr, k, 0);
                  if (p == nullptr) return false;
                  out[n++] = {p, static_cast<std::uint32_t>(k)};
                  return true;
                });
  // Too many pieces, a key no longer valid, or a list shorter than the WQE: gather() copies
  // or reports the error.
  return done == len ? n : 0;
}

// Checks the local keys of a WQE's scatter/gather list before its first packet, so that a bad
// list fails before anything is sent; every packet checks again (gather), through the range
// a one-SGE WQE keeps. A READ or atomic writes into them, so they need local write.
[[gnu::always_inline]] inline bool Engine::Stages::req_check_sges(Engine& eng, Qp& qp, SendWqe& w) {
  w.sge_range = {};
  if (w.is_inline) return true;
  const Sge* sge =
      qp.sq_sges.data() + static_cast<std::size_t>(&w - qp.sq.data()) * qp.cap.max_send_sge;
  const std::uint32_t access = w.is_rd_atomic() ? std::uint32_t{kAccessLocalWrite} : 0u;
  if (w.num_sge == 1) {  // the common case, without the loop
    if (sge->length == 0) return true;
    return eng.mrs_.check_memo(qp.req.sge_memo, sge->lkey, qp.pd, sge->addr, sge->length, access,
                               w.sge_range) == KeyCheck::kOk;
  }
  for (std::uint32_t i = 0; i < w.num_sge; ++i) {
    if (sge[i].length == 0) continue;
    Mr* mr = nullptr;
    if (eng.mrs_.check(sge[i].lkey, qp.pd, sge[i].addr, sge[i].length, access, &mr) !=
        KeyCheck::kOk)
      return false;
  }
  return true;
}

bool Engine::Stages::req_local_op(Engine& eng, Qp& qp, SendWqe& w) {
  WcStatus status = WcStatus::kSuccess;
  if (w.opcode == WrOpcode::kLocalInv) {
    Mr* mr = eng.mrs_.find(w.inv_rkey);
    if (mr == nullptr || mr->pd != qp.pd)
      status = WcStatus::kLocQpOpErr;
    else
      mr_invalidated(eng, *mr);
  } else {  // REG_MR: give a fast-reg MR its memory, access and new key variant
    Mr* mr = eng.mrs_.find_any_variant(w.reg_key);
    if (mr == nullptr || !mr->fast_reg || mr->pd != qp.pd || mr->state != MrState::kFree ||
        w.length > mr->max_len) {
      status = WcStatus::kLocQpOpErr;
    } else {
      mr->addr = w.remote_addr;
      mr->host_delta = w.compare_add - w.remote_addr;  // post_send put the engine's address there
      mr->length = w.length;
      mr->access = w.reg_access;
      mr->key = (mr->key & ~0xFFu) | w.reg_variant;
      mr->state = MrState::kValid;
      eng.mrs_.changed();
    }
  }
  if (status != WcStatus::kSuccess) {
    req_fail(eng, qp, w, status);
    return false;
  }
  w.state = WqeState::kExecuted;
  ++qp.req.next_wqe;
  comp_retire(eng, qp);
  return true;
}

// A local error on `w`: nothing more is sent; `w` completes with `status` once everything
// before it has completed, and then the QP moves to the error state (comp_retire).
void Engine::Stages::req_fail(Engine& eng, Qp& qp, SendWqe& w, WcStatus status) {
  w.state = WqeState::kFailed;
  w.status = status;
  qp.req.failed = true;
  comp_retire(eng, qp);
}

bool Engine::Stages::req_send_ud(Engine& eng, Qp& qp, SendWqe& w) {
  auto slot = tx_slot(eng, false);
  if (slot.empty()) return false;
  if (!req_check_sges(eng, qp, w)) {
    req_fail(eng, qp, w, WcStatus::kLocProtErr);
    return false;
  }
  const AddressVector& ah = qp.sq_ah[static_cast<std::size_t>(&w - qp.sq.data())];
  wire::FrameSpec s = path_spec(eng, ah);
  // UD and GSI QPs keep the source port chosen at creation (rxe: 0xC000 + hash of the QPN).
  s.udp_sport = ah.udp_sport ? ah.udp_sport
                             : static_cast<std::uint16_t>(0xC000 | ((qp.qpn * 0x9E37u) & 0x3FFF));
  s.opcode = w.opcode == WrOpcode::kSendImm ? Opcode::kUdSendOnlyImm : Opcode::kUdSendOnly;
  s.se = (w.flags & kSendSolicited) != 0;
  s.dest_qp = wire::Qpn(w.ud_qpn);
  s.psn = qp.req.next_psn;
  // IBA 10.2.5: a Q_Key with the high bit set means "use the QP's own Q_Key".
  s.deth = {(w.ud_qkey & 0x8000'0000u) ? qp.attr.qkey : w.ud_qkey, wire::Qpn(qp.qpn)};
  s.imm = w.imm;
  s.ip_id = eng.ip_id_++;
  const std::size_t hdr = wire::write_frame_headers(s, w.length, slot);
  TxSeg ext[TxRing::kMaxExt];
  const std::size_t n_ext =
      zero_copy_ok(eng, s, w.length) ? gather_ext(eng, qp, w, 0, w.length, ext) : 0;
  if (n_ext != 0) {
    tx_commit_ext(eng, s, slot, hdr, {ext, n_ext});
  } else {
    WcStatus err = WcStatus::kSuccess;
    gather(eng, qp, w, 0, slot.data() + hdr, w.length, err);
    if (err != WcStatus::kSuccess) {
      req_fail(eng, qp, w, err);
      return false;
    }
    tx_commit(eng, wire::finish_frame(s, hdr, w.length, slot));
  }
  ++qp.req.next_psn;
  w.state = WqeState::kExecuted;
  ++qp.req.next_wqe;
  comp_retire(eng, qp);
  return true;
}

// A WQE's first packet: its keys are checked, and its PSN range fixed (rxe req_next_wqe).
[[gnu::always_inline]] inline bool Engine::Stages::req_start_wqe(Engine& eng, Qp& qp, SendWqe& w) {
  // Selective repeat: a SEND's message index, when the peer has room for its record (else it
  // waits, kPosted: the requester stops until an ACK).
  if (qp.req.sr && !sr_start_wqe(qp, w)) [[unlikely]]
    return false;
  if (!req_check_sges(eng, qp, w)) {
    req_fail(eng, qp, w, WcStatus::kLocProtErr);
    return false;
  }
  const std::uint32_t pmtu = qp.pmtu();
  w.first_psn = qp.req.next_psn;
  w.npkts =
      w.length == 0 ? 1 : static_cast<std::uint32_t>((w.length + pmtu - 1) >> qp.pmtu_shift());
  if (w.opcode == WrOpcode::kCmpSwap || w.opcode == WrOpcode::kFetchAdd) w.npkts = 1;
  w.last_psn = w.first_psn + (w.npkts - 1);
  w.sent = 0;
  w.read_done = 0;
  if (w.is_rd_atomic()) ++qp.req.rd_atomic_out;
  w.state = WqeState::kSending;
  return true;
}

// The fields of the WQE's next packet (rxe init_req_packet): opcode by position, PSN, RETH,
// AckReq. Returns the payload bytes; `last` and `psn_span` (PSNs the packet takes) are set.
[[gnu::always_inline]] inline std::size_t Engine::Stages::req_fields(
    Engine& eng, Qp& qp, SendWqe& w, wire::PacketFields& f, bool& last, std::uint32_t& psn_span) {
  const bool uc = qp.type == QpType::kUc;
  const std::uint32_t pmtu = qp.pmtu();
  last = true;
  psn_span = 1;
  switch (w.opcode) {
    case WrOpcode::kRead: {
      // A READ request covers every response PSN; a retry asks for the part not yet received.
      f.opcode = Opcode::kRcReadRequest;
      f.psn = w.read_resume_psn(qp.pmtu_shift());
      // Responses that arrived after a rewind and before this re-request already moved
      // read_done on: ask only for the rest.
      if (before(qp.req.next_psn, f.psn)) qp.req.next_psn = f.psn;
      f.reth_va = w.remote_addr + w.read_done;
      f.reth_rkey = w.rkey;
      f.reth_len = static_cast<std::uint32_t>(w.length - w.read_done);
      psn_span = w.npkts - static_cast<std::uint32_t>(w.read_done >> qp.pmtu_shift());
      w.read_resume = w.read_done;
      f.ack_req = true;
      return 0;
    }
    case WrOpcode::kCmpSwap:
    case WrOpcode::kFetchAdd:
      f.opcode = w.opcode == WrOpcode::kCmpSwap ? Opcode::kRcCompareSwap : Opcode::kRcFetchAdd;
      f.psn = w.first_psn;
      f.ack_req = true;
      return 0;
    default: {
      const bool first = w.sent == 0;
      const auto payload =
          static_cast<std::size_t>(std::min<std::uint64_t>(pmtu, w.length - w.sent));
      last = w.sent + payload == w.length;
      f.opcode = pick_opcode(w, first, last, uc);
      f.psn = w.first_psn + static_cast<std::uint32_t>(w.sent >> qp.pmtu_shift());
      f.reth_va = w.remote_addr;
      f.reth_rkey = w.rkey;
      f.reth_len = static_cast<std::uint32_t>(w.length);
      f.imm = w.imm;
      f.ieth_rkey = w.inv_rkey;
      f.se = last && (w.flags & kSendSolicited) &&
             (w.opcode == WrOpcode::kSend || w.opcode == WrOpcode::kSendImm ||
              w.opcode == WrOpcode::kSendInv || w.opcode == WrOpcode::kWriteImm);
      // IBA 9.7.6.1.3: AckReq on the last packet, and often enough within long messages.
      // A window-limited QP (delay-based congestion control) asks more often: its window may
      // close mid-message, and an unacknowledged window would wait for the probe timer.
      f.ack_req = !uc && (last ||
                          qp.req.pkts_since_ack_req + 1 >=
                              std::min(eng.cfg_.ack_req_every, qp.cc.ack_req_every) ||
                          qp.comp.probing);
      if (qp.req.sr) [[unlikely]] {
        // Selective repeat: packets the peer can place wherever they arrive. A WRITE's are
        // WRITE Only with their own RETH (SrState); a SEND's or a WRITE with immediate's, SR
        // opcodes (sr_msg.cc), each saying whether its message is solicited. Completion is by
        // PSN, as before.
        f.opcode = SrState::opcode_for(w.opcode);
        f.reth_va = w.remote_addr + w.sent;
        f.reth_len = static_cast<std::uint32_t>(payload);
        if (w.opcode != WrOpcode::kWrite) f.se = (w.flags & kSendSolicited) != 0;
      }
      return payload;
    }
  }
}

// Writes the packet into `slot` and commits it: headers from the path template (or the
// FrameSpec for atomics), the payload gathered through the keys, or zero-copy. False after
// failing the WQE.
[[gnu::always_inline]] inline bool Engine::Stages::req_emit(Engine& eng, Qp& qp, SendWqe& w,
                                                            std::span<std::uint8_t> slot,
                                                            const wire::PacketFields& f,
                                                            std::size_t payload) {
  if (w.opcode == WrOpcode::kCmpSwap || w.opcode == WrOpcode::kFetchAdd) {
    wire::FrameSpec s = qp.tx;  // the path template has no AtomicETH
    s.ip_id = f.ip_id;
    s.opcode = f.opcode;
    s.psn = f.psn;
    s.ack_req = true;
    s.atomic = {w.remote_addr, w.rkey, w.opcode == WrOpcode::kCmpSwap ? w.swap : w.compare_add,
                w.compare_add};
    tx_commit(eng, wire::build_frame(s, {}, slot));
    return true;
  }
  // The hot path: a SEND or WRITE packet over the path template whose payload is inline or in
  // the WQE's one checked range, copied: the whole frame in one call.
  if (qp.hdr.usable() && !(payload && zero_copy_ok(eng, qp, payload))) {
    const std::uint8_t* src =
        w.is_inline
            ? qp.sq_inline.data() +
                  static_cast<std::size_t>(&w - qp.sq.data()) * qp.cap.max_inline_data + w.sent
            : one_sge_addr(eng, qp, w, w.sent, payload);
    if (src != nullptr || payload == 0) {
      if (const std::size_t len = wire::write_masked_frame(qp.hdr, f, src, payload, slot.data())) {
        tx_commit(eng, len);
        return true;
      }
    }
  }
  // (Selective repeat's opcodes are no template's: write_masked_frame left them here.)
  if (raw(f.opcode) >= raw(Opcode::kSrSend)) [[unlikely]]
    return sr_emit(eng, qp, w, slot, f, payload);
  TxPacket p = tx_begin(eng, qp, slot, f, payload);
  if (p.hdr == 0) {
    req_fail(eng, qp, w, WcStatus::kGeneralErr);
    return false;
  }
  TxSeg ext[TxRing::kMaxExt];
  const std::size_t n_ext =
      payload && zero_copy_ok(eng, qp, payload) ? gather_ext(eng, qp, w, w.sent, payload, ext) : 0;
  if (n_ext != 0) {
    tx_finish_ext(eng, qp, p, {ext, n_ext});
    return true;
  }
  WcStatus err = WcStatus::kSuccess;
  if (payload) gather(eng, qp, w, w.sent, slot.data() + p.hdr, payload, err);
  if (err != WcStatus::kSuccess) {
    req_fail(eng, qp, w, err);
    return false;
  }
  tx_finish(eng, qp, p, payload);
  return true;
}

// One request packet of `w` (rxe rxe_requester): start the WQE, fill the fields, emit, then
// move the PSN, the WQE and the timers on.
bool Engine::Stages::req_packet(Engine& eng, Qp& qp, SendWqe& w) {
  if (w.state == WqeState::kPosted && !req_start_wqe(eng, qp, w)) return false;
  auto slot = tx_slot(eng, false);
  if (slot.empty()) return false;

  wire::PacketFields f;
  f.ip_id = eng.ip_id_++;
  bool last = true;
  std::uint32_t psn_span = 1;
  const std::size_t payload = req_fields(eng, qp, w, f, last, psn_span);
  if (f.psn != qp.req.next_psn) {
    // The rewind and the WQE disagree: a bug, not a wire event. Stop this QP loudly.
    req_fail(eng, qp, w, WcStatus::kGeneralErr);
    return false;
  }
  if (!req_emit(eng, qp, w, slot, f, payload)) return false;

  const bool uc = qp.type == QpType::kUc;
  qp.req.pkts_since_ack_req = f.ack_req ? 0 : qp.req.pkts_since_ack_req + 1;
  if (before(f.psn, qp.req.high_psn)) {
    eng.stats_.inc(Counter::kRetransmittedPackets);
    eng.stats_.inc(Counter::kRetransmittedBytes, payload);
    if (f.opcode == Opcode::kRcReadRequest) {  // a READ asked again, and the bytes it costs
      eng.stats_.inc(Counter::kReadReRequests);
      eng.stats_.inc(Counter::kReadReRequestBytes, f.reth_len);
    }
  } else if (!qp.comp.rtt_timing && !uc) {
    qp.comp.rtt_timing = true;  // time this packet's acknowledgement
    qp.comp.rtt_psn = f.psn;
    qp.comp.rtt_start = eng.now_;
  }
  qp.req.next_psn = f.psn + psn_span;
  if (!before(qp.req.next_psn, qp.req.high_psn)) qp.req.high_psn = qp.req.next_psn;
  w.sent += payload;
  if (last) {
    ++qp.req.next_wqe;
    w.state = uc ? WqeState::kExecuted : WqeState::kSent;
    if (uc) comp_retire(eng, qp);
  }
  if (!uc) {
    // (Each returns at once when its timer is armed, as it is for all but the first packet
    // of a burst: that test here saves two calls per packet.)
    if (qp.comp.retrans_deadline == 0) arm_retransmit(eng, qp);
    if (qp.comp.probe_deadline == 0) arm_probe(eng, qp);
    if (qp.comp.probing) qp.comp.probe_sent = true;
  }
  return true;
}

void Engine::Stages::req_pump(Engine& eng, Qp& qp, std::uint32_t& budget) {
  if (qp.state != QpState::kRts) return;
  if (qp.comp.rnr_deadline != 0) return;  // waiting out an RNR NAK
  if (qp.comp.retry_pending) do_retry(eng, qp);
  std::uint32_t wmax = 0;
  if (qp.comp.read_rereqs != 0 && qp.state == QpState::kRts) send_read_rereqs(eng, qp, budget);
  if (qp.req.sr && !qp.sr->resend_empty()) [[unlikely]]
    sr_resend(eng, qp, budget);
  if (budget > 0) req_fast(eng, qp, budget, wmax);  // fast_path.cc: what it can, then the rest
  while (budget > 0 && qp.state == QpState::kRts && !qp.req.failed &&
         qp.req.next_wqe != qp.sq_tail) {
    SendWqe& w = qp.wqe(qp.req.next_wqe);
    if (w.state == WqeState::kExecuted || w.state == WqeState::kDone) {
      // Finished while the requester was rewound to it (a local op, or a WQE acknowledged or
      // answered before its retransmission): never send or execute it again.
      if (w.npkts != 0 && !before(w.last_psn, qp.req.next_psn)) qp.req.next_psn = w.last_psn + 1;
      ++qp.req.next_wqe;
      continue;
    }
    if (w.state == WqeState::kPosted) {
      // IBA 10.8.3.3: a fenced WQE waits for every earlier READ and atomic to complete.
      if ((w.flags & kSendFence) && qp.req.rd_atomic_out > 0) return;
      if (w.is_rd_atomic() &&
          qp.req.rd_atomic_out >= std::max<std::uint8_t>(qp.attr.max_rd_atomic, 1))
        return;
    }
    if (w.opcode == WrOpcode::kLocalInv || w.opcode == WrOpcode::kRegMr) {
      if (!req_local_op(eng, qp, w)) return;
      continue;
    }
    if (qp.type == QpType::kUd) {
      if (!req_send_ud(eng, qp, w)) return;
      --budget;
      continue;
    }
    if (qp.comp.probe_sent) return;  // a probe is out: wait for its answer
    // The window bounds what a go-back-N resends. READ and atomic requests are bounded by
    // max_rd_atomic instead: a READ spans all its response PSNs, and its retry asks again only
    // for the responses not received.
    if (qp.type == QpType::kRc && !w.is_rd_atomic()) {
      if (wmax == 0) wmax = window_max(eng, qp);  // once per call: it depends on the path only
      if (distance(qp.req.next_psn, qp.comp.psn) >=
          static_cast<std::int32_t>(qp.comp.cwnd ? qp.comp.cwnd : wmax)) {
        if (qp.comp.stall_since == 0) [[unlikely]] {
          eng.stats_.inc(Counter::kWindowStalls);
          qp.comp.stall_since = eng.now_ | 1;
        }
        return;
      }
      if (qp.comp.stall_since != 0) [[unlikely]] {
        eng.stats_.inc(Counter::kWindowStallNs, (eng.now_ | 1) - qp.comp.stall_since);
        qp.comp.stall_since = 0;
      }
    }
    // A new message after one of the general path's: the fast path's again when it can.
    if (w.state == WqeState::kPosted && req_fast(eng, qp, budget, wmax)) continue;
    // A message of several packets or sent zero-copy, from its first packet or the next:
    // fast_path.cc, when it can (with selective repeat too).
    if (req_fast_zc(eng, qp, w, budget, wmax)) continue;
    if (!req_packet(eng, qp, w)) return;
    --budget;
  }
}

}  // namespace roce::engine
