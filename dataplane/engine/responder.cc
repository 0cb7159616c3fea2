/// @file
/// Responder (IBA 9.7.5.1; rxe_resp.c): checks each request's PSN, opcode sequence, access
/// and resources, executes it against memory or a receive WQE, and answers: coalesced ACKs
/// (AckReq), one PSN-sequence NAK per gap, RNR NAKs, class C NAKs that move the QP to error,
/// READ responses and atomic ACKs, replayed for duplicates from the resource ring.
#include <algorithm>
#include <cstring>

#include "dataplane/engine/engine_loc.h"

namespace roce::engine {

using wire::Opcode;
using wire::OpMask;
using wire::Psn;
using wire::Syndrome;

namespace {
void take_recv(Qp& qp, RecvQueue& q);
bool release_recv(Qp& qp, std::uint64_t used, bool ok);
int alloc_res(Qp& qp);
void abandon_uc_message(Qp& qp);

// A CE-marked duplicate draws a CNP only this close behind ePSN (a retransmission of what is
// outstanding now: a 4 MiB message at 1 KiB MTU), not anywhere in the duplicate half.
constexpr std::int32_t kCnpDuplicateWindow = 4096;  // and ahead of ePSN (resp_check_psn)
}  // namespace

namespace {
// The ACK syndrome with the credits of the moment: the receive WQEs still posted, encoded as the
// largest credit code not above them (IBA 9.7.7.2.5); an SRQ gives no per-QP credits.
Syndrome ack_syndrome(const Qp& qp, bool advertise) {
  if (!advertise || qp.srq != nullptr) return Syndrome::ack(wire::kCreditInvalid);
  return Syndrome::ack(wire::credit_code_for(qp.rq.count()));
}

// Builds one ACK/NAK (opcode Acknowledge) or atomic ACK into a TX slot.
std::size_t build_ack(const Qp& qp, std::span<std::uint8_t> slot, std::uint16_t ip_id, Opcode op,
                      Syndrome syn, Psn psn, std::uint64_t orig, bool credits,
                      wire::Msn msn = wire::Msn{}, bool own_msn = false) {
  if (syn.type() == wire::AckType::kAck) syn = ack_syndrome(qp, credits);
  if (op == Opcode::kRcAcknowledge && qp.hdr.usable()) {  // the hot path: no FrameSpec
    wire::PacketFields f;
    f.opcode = op;
    f.psn = psn;
    f.ip_id = ip_id;
    f.aeth_syndrome = syn;
    f.aeth_msn = own_msn ? msn : qp.resp.msn;
    const std::size_t hdr = wire::write_masked_headers(qp.hdr, f, 0, slot.data());
    return hdr ? wire::finish_masked(qp.hdr, hdr, 0, slot.data()) : 0;
  }
  wire::FrameSpec s = qp.tx;
  s.ip_id = ip_id;
  s.opcode = op;
  s.psn = psn;
  s.aeth = {syn, own_msn ? msn : qp.resp.msn};
  s.atomic_orig = orig;
  return wire::build_frame(s, {}, slot);
}
}  // namespace

bool Engine::Stages::resp_ack_now(Engine& eng, Qp& qp, Psn psn) {
  return resp_emit(eng, qp, Syndrome::ack(), psn);
}

bool Engine::Stages::resp_emit(Engine& eng, Qp& qp, Syndrome syn, Psn psn) {
  RespState& rs = qp.resp;
  if (rs.out_empty()) {
    auto slot = tx_slot(eng, true);
    if (slot.empty()) return false;
    tx_commit(eng, build_ack(qp, slot, eng.ip_id_++, Opcode::kRcAcknowledge, syn, psn, 0,
                             eng.cfg_.advertise_credits));
    if (syn.type() == wire::AckType::kAck) eng.stats_.inc(Counter::kAckSent);
    return true;
  }
  // Behind streaming READ responses: coalesce with a queued plain ACK, else queue.
  auto& back = rs.out[(rs.out_tail - 1) % rs.out.size()];
  if (syn.type() == wire::AckType::kAck && back.kind == RespState::Item::Kind::kAck &&
      back.syn.type() == wire::AckType::kAck) {
    back.psn = psn;
    return true;
  }
  if (rs.out_tail - rs.out_head == rs.out.size()) {
    eng.stats_.inc(Counter::kRespQueueFull);  // the requester's timer or probe recovers
    return true;
  }
  rs.out[rs.out_tail++ % rs.out.size()] = {RespState::Item::Kind::kAck, 0, syn, psn};
  return true;
}

void Engine::Stages::resp_emit_atomic_ack(Engine& eng, Qp& qp, std::uint32_t res_idx) {
  RespState& rs = qp.resp;
  const RdAtomicRes& r = rs.res[res_idx];
  if (rs.out_empty()) {
    if (auto slot = tx_slot(eng, true); !slot.empty()) {
      tx_commit(eng,
                build_ack(qp, slot, eng.ip_id_++, Opcode::kRcAtomicAcknowledge, Syndrome::ack(),
                          r.first_psn, r.atomic_orig, eng.cfg_.advertise_credits));
      eng.stats_.inc(Counter::kAtomicAcksSent);
    }
    return;
  }
  if (rs.out_tail - rs.out_head == rs.out.size()) {
    eng.stats_.inc(Counter::kRespQueueFull);
    return;
  }
  // Duplicates of one atomic need one answer in the queue, not one each.
  for (std::uint32_t k = rs.out_head; k != rs.out_tail; ++k) {
    const auto& it = rs.out[k % rs.out.size()];
    if (it.kind == RespState::Item::Kind::kAtomicAck && it.res == res_idx) return;
  }
  rs.out[rs.out_tail++ % rs.out.size()] = {RespState::Item::Kind::kAtomicAck,
                                           static_cast<std::uint8_t>(res_idx), Syndrome::ack(),
                                           r.first_psn};
}

bool Engine::Stages::resp_nak(Engine& eng, Qp& qp, Syndrome syn, Psn psn, bool to_error) {
  // Counted as sent only when it went out or was queued; a full TX ring counts tx_ring_full
  // (tx_slot), and the requester's timer recovers.
  bool out = false;
  if (to_error) {
    // Class C errors end the connection: the NAK goes out at once.
    if (auto slot = tx_slot(eng, true); !slot.empty()) {
      tx_commit(eng, build_ack(qp, slot, eng.ip_id_++, Opcode::kRcAcknowledge, syn, psn, 0,
                               eng.cfg_.advertise_credits));
      out = true;
    }
  } else {
    out = resp_emit(eng, qp, syn, psn);
  }
  if (!out) {
    if (to_error) qp_to_error(eng, qp);
    return false;
  }
  if (syn.type() == wire::AckType::kRnrNak) {
    eng.stats_.inc(Counter::kRnrNakSent);
  } else {
    switch (syn.nak_code()) {
      case wire::NakCode::kPsnSeqError:
        eng.stats_.inc(Counter::kSeqErrNakSent);
        break;
      case wire::NakCode::kInvalidRequest:
        eng.stats_.inc(Counter::kInvReqNakSent);
        break;
      case wire::NakCode::kRemoteAccessError:
        eng.stats_.inc(Counter::kRemAccessNakSent);
        break;
      default:
        eng.stats_.inc(Counter::kRemOpNakSent);
        break;
    }
  }
  if (to_error) qp_to_error(eng, qp);
  return true;
}

void Engine::flush_acks(std::uint64_t now_ns) {
  now_ = now_ns;
  Stages::resp_flush_acks(*this);
}

// An ACK that finds the transmit ring full stays on the list, and so do the ones after it, in
// their order, for the next run() (after the port has drained the ring): a dropped ACK would
// cost its requester a probe or an ACK timeout. The list holds each QP at most once
// (in_ack_list), so it is bounded by the number of QPs; a later ACK of a waiting QP only
// moves its PSN on (defer_ack).
void Engine::Stages::resp_flush_acks(Engine& eng) {
  auto& list = eng.ack_list_;
  std::size_t i = 0;
  for (; i < list.size(); ++i) {
    Qp* qp = list[i];
    if (!qp->resp.ack_pending || qp->state == QpState::kErr) {
      qp->in_ack_list = false;
      continue;
    }
    if (!resp_ack_now(eng, *qp, qp->resp.ack_psn)) break;
    qp->in_ack_list = false;
    qp->resp.ack_pending = false;
  }
  if (i == list.size()) {
    list.clear();
    return;
  }
  eng.stats_.inc(Counter::kAckDeferred, list.size() - i);
  list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(i));
}

// Takes the next receive WQE, copying its SGEs: the slot may be reposted while the message is
// still arriving. An idle open multi-message buffer comes first (it was posted first); a
// multi-message WQE from the ring becomes an open buffer (recv_queue.h), or, when all kMaxOpen
// places are taken, receives one message only.
namespace {
void take_recv(Qp& qp, RecvQueue& q) {
  RespState& rs = qp.resp;
  rs.recv_q = &q;
  rs.have_recv = true;
  rs.recv_base = 0;
  rs.recv_open = -1;
  if (const int k = q.idle_open(); k >= 0) {
    RecvQueue::Open& o = q.open[static_cast<std::size_t>(k)];
    o.busy = true;
    rs.recv = o.wqe;
    std::copy_n(q.open_sges.begin() + o.wqe.sge_base, o.wqe.num_sge, rs.recv_sges.begin());
    rs.recv_base = o.used;
    rs.recv_open = static_cast<std::int8_t>(k);
    return;
  }
  rs.recv = q.wqes[q.slot(q.head++)];
  for (std::uint32_t i = 0; i < rs.recv.num_sge; ++i)
    rs.recv_sges[i] = q.sges[rs.recv.sge_base + i];
  if (rs.recv.min_free == 0) return;
  for (std::uint32_t k = 0; k < RecvQueue::kMaxOpen; ++k) {
    RecvQueue::Open& o = q.open[k];
    if (o.live) continue;
    o = {rs.recv, 0, 0, true, true};
    o.wqe.sge_base = k * q.max_sge;
    std::copy_n(rs.recv_sges.begin(), rs.recv.num_sge, q.open_sges.begin() + o.wqe.sge_base);
    rs.recv_open = static_cast<std::int8_t>(k);
    return;
  }
}
}  // namespace

// The message in the held WQE is complete (`used`: bytes it took): a multi-message buffer
// moves on and says whether it stays queued; any other WQE is done.
namespace {
bool release_recv(Qp& qp, std::uint64_t used, bool ok) {
  RespState& rs = qp.resp;
  rs.have_recv = false;
  if (rs.recv_open < 0) return false;
  RecvQueue::Open& o = rs.recv_q->open[static_cast<std::size_t>(rs.recv_open)];
  rs.recv_open = -1;
  o.busy = false;
  o.used = rs.recv_base + used;
  ++o.msgs;
  const bool stays = ok && o.wqe.length - o.used >= o.wqe.min_free &&
                     (o.wqe.max_msgs == 0 || o.msgs < o.wqe.max_msgs);
  if (!stays) o = {};
  return stays;
}
}  // namespace

void Engine::Stages::resp_take_recv(Qp& qp, RecvQueue& q) { take_recv(qp, q); }
bool Engine::Stages::resp_release_recv(Qp& qp, std::uint64_t used, bool ok) {
  return release_recv(qp, used, ok);
}

// A resource slot for a new READ or atomic: an unused one, else the idle one with the oldest
// PSN. A READ the requester has not finished is among the newest max_dest_rd_atomic, so it
// keeps its resource for a replay even when a replay of an older READ (a late duplicate) held
// the slot whose turn it was (a requester asking for part of it would otherwise be dropped for
// ever). -1 when all are busy.
namespace {
int alloc_res(Qp& qp) {
  RespState& rs = qp.resp;
  int best = -1;
  std::int32_t best_age = -1;
  for (std::uint32_t i = 0; i < rs.res.size(); ++i) {
    const RdAtomicRes& r = rs.res[i];
    if (r.active) continue;
    if (r.kind == RdAtomicRes::Kind::kNone) return static_cast<int>(i);
    const std::int32_t age = distance(rs.epsn, r.first_psn);
    if (age > best_age) {
      best_age = age;
      best = static_cast<int>(i);
    }
  }
  return best;
}
}  // namespace

void Engine::Stages::resp_schedule(Engine& eng, Qp& qp) {
  if (qp.in_read_list) return;
  // Paced (congestion.cc): responses that resume after the QP had none start its schedule
  // now; the time it had nothing to send is no credit for a burst.
  if (eng.cc_pacing_ && qp.cc.park_at == 0) [[unlikely]]
    qp.cc.next_send = std::max(qp.cc.next_send, eng.now_);
  qp.in_read_list = true;
  eng.read_list_.push_back(&qp);
}

bool Engine::Stages::resp_scatter(Engine& eng, Qp& qp, const RecvWqe& r, std::uint64_t offset,
                                  const std::uint8_t* src, std::size_t len) {
  const Pd* pd = qp.srq ? qp.srq->pd : qp.pd;
  std::size_t done = 0;
  for (std::uint32_t i = 0; i < r.num_sge && done < len; ++i) {
    const Sge& sge = qp.resp.recv_sges[i];
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    const std::size_t n = std::min<std::size_t>(sge.length - offset, len - done);
    std::uint8_t* dst = eng.mrs_.map(sge.lkey, pd, sge.addr + offset, n, kAccessLocalWrite);
    if (dst == nullptr) return false;
    std::memcpy(dst, src + done, n);
    done += n;
    offset = 0;
  }
  return done == len;
}

void Engine::Stages::resp_complete_recv(Engine& eng, Qp& qp, const wire::RxPkt& pkt,
                                        std::uint32_t byte_len) {
  const wire::OpcodeInfo& info = *pkt.info;
  Wc wc;
  wc.wr_id = qp.resp.recv.wr_id;
  wc.status = WcStatus::kSuccess;
  wc.opcode = info.mask.has(OpMask::kWrite) ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv;
  wc.byte_len = byte_len;
  wc.qp_num = qp.qpn;
  wc.src_qp = qp.attr.dest_qp_num;
  if (info.has(wire::Ext::kImmDt)) {
    wc.imm_data = pkt.immdt().imm();
    wc.wc_flags |= kWcWithImm;
  }
  if (info.has(wire::Ext::kIeth)) {
    wc.invalidated_rkey = pkt.ieth().rkey();
    wc.wc_flags |= kWcWithInv;
  }
  if (pkt.bth().se()) wc.wc_flags |= kWcSolicited;
  wc.offset = static_cast<std::uint32_t>(qp.resp.recv_base);
  if (release_recv(qp, info.mask.has(OpMask::kWrite) ? 0 : byte_len, true))
    wc.wc_flags |= kWcStillQueued;
  post_cqe(eng, qp.recv_cq, wc);
}

// Duplicate request (IBA 9.7.5.1.2): re-ACK SENDs and WRITEs, replay READs and atomics from
// the resource ring; never execute twice.
void Engine::Stages::resp_duplicate(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  eng.stats_.inc(Counter::kDuplicateRequests);
  const Psn p = pkt.psn;
  const std::uint32_t pmtu = qp.pmtu();
  if (pkt.opcode == Opcode::kRcReadRequest) {
    for (std::uint32_t i = 0; i < qp.resp.res.size(); ++i) {
      RdAtomicRes& r = qp.resp.res[i];
      if (r.kind != RdAtomicRes::Kind::kRead || before(p, r.first_psn) || after(p, r.last_psn))
        continue;
      const std::uint64_t off = std::uint64_t(distance(p, r.first_psn)) * pmtu;
      const auto reth = pkt.reth();
      // A retry asks for the rest of the READ from p, or for part of it (the responses a
      // selective requester is missing; rxe accepts any part of the original too).
      const std::uint64_t len = reth.dma_len();
      if (reth.rkey() != r.rkey || reth.va() != r.va + off || len > r.length - off ||
          (len == 0 && r.length != off)) {
        eng.stats_.inc(Counter::kRxDropDupRead);  // not a retry of that READ
        return;
      }
      RespState& rs = qp.resp;
      // Already on its way (the READ's own stream, or a replay queued before, sends those
      // responses still): nothing to add. Later READs stay queued: a requester that asks
      // again for them asks by their own PSNs.
      const std::uint64_t end = off + len;
      for (std::uint32_t k = rs.out_head; k != rs.out_tail && r.active; ++k) {
        const RespState::Item& it = rs.out[k % rs.out.size()];
        if (it.kind != RespState::Item::Kind::kRead || it.res != i) continue;
        const std::uint64_t from =
            it.started ? r.next_offset : std::uint64_t(distance(it.psn, r.first_psn)) * pmtu;
        const std::uint64_t to = it.started ? r.end_offset : from + it.len;
        if (from <= off && end <= to) return;
      }
      // The region may have been deregistered or invalidated since (rxe rechecks the MR on
      // replay too). Most such duplicates are stale copies of a READ the requester has
      // already completed (the application then freed the region): they are dropped, not
      // NAKed, since a class C NAK would end a healthy connection. A requester that really
      // still waits gets nothing and ends with its retry budget spent.
      if (len != 0 && eng.mrs_.check(r.rkey, qp.pd, r.va + off, len, kAccessRemoteRead, nullptr) !=
                          KeyCheck::kOk) {
        eng.stats_.inc(Counter::kRxDropDupRead);
        return;
      }
      if (rs.out_tail - rs.out_head == rs.out.size()) {
        eng.stats_.inc(Counter::kRespQueueFull);  // no room: drop the duplicate, it is asked again
        return;
      }
      // The replay goes before any queued ACK for a later PSN, which would otherwise tell the
      // requester that the READ had been answered in full (IBA 9.7.5.1.6: responses in PSN
      // order); it may not go before the stream being sent.
      std::uint32_t at = rs.out_tail;
      for (std::uint32_t k = rs.out_head; k != rs.out_tail; ++k) {
        const RespState::Item& it = rs.out[k % rs.out.size()];
        if (it.kind != RespState::Item::Kind::kRead && after(it.psn, p) &&
            (k != rs.out_head || !it.started)) {
          at = k;
          break;
        }
      }
      for (std::uint32_t k = rs.out_tail; k != at; --k)
        rs.out[k % rs.out.size()] = rs.out[(k - 1) % rs.out.size()];
      ++rs.out_tail;
      rs.out[at % rs.out.size()] = {RespState::Item::Kind::kRead,
                                    static_cast<std::uint8_t>(i),
                                    Syndrome::ack(),
                                    p,
                                    static_cast<std::uint32_t>(len),
                                    false,
                                    true};
      r.active = true;
      ++r.pending;
      ++rs.reads_queued;
      resp_schedule(eng, qp);
      return;
    }
    eng.stats_.inc(Counter::kRxDropDupRead);  // older than every READ the responder keeps
    return;
  }
  if (pkt.info->mask.has(OpMask::kAtomic)) {
    for (std::uint32_t i = 0; i < qp.resp.res.size(); ++i) {
      const RdAtomicRes& r = qp.resp.res[i];
      if (r.kind != RdAtomicRes::Kind::kAtomic || r.first_psn != p) continue;
      resp_emit_atomic_ack(eng, qp, i);
      return;
    }
    eng.stats_.inc(Counter::kRxDropDupRead);  // an atomic older than every resource kept
    return;
  }
  defer_ack(qp, qp.resp.epsn - 1, eng.ack_list_);
}

void Engine::Stages::resp_on_request(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  if (qp.state != QpState::kRtr && qp.state != QpState::kRts && qp.state != QpState::kSqd &&
      qp.state != QpState::kSqe) {
    eng.stats_.inc(Counter::kRxDropQpState);
    return;
  }
  // The IBA responder's steps in order (rxe_resp.c names them the same way); each either
  // lets the packet go on or has dealt with it (dropped, NAKed or answered).
  if (resp_check_psn(eng, qp, pkt) == Step::kDone) return;
  if (resp_check_op_seq(eng, qp, pkt) == Step::kDone) return;
  if (resp_check_op_valid(eng, qp, pkt) == Step::kDone) return;
  if (resp_get_recv_wqe(eng, qp, pkt) == Step::kDone) return;
  const OpMask m = pkt.info->mask;
  if (m.has(OpMask::kSend)) {
    if (resp_execute_send(eng, qp, pkt) == Step::kDone) return;
  } else if (m.has(OpMask::kWrite)) {
    if (resp_execute_write(eng, qp, pkt) == Step::kDone) return;
  } else if (m.has(OpMask::kRead)) {
    resp_execute_read(eng, qp, pkt);
    if (qp.sr != nullptr && qp.sr->nkept != 0) [[unlikely]] {
      // Its response PSNs were never requests: a bit placed there would stay behind and, 1024
      // PSNs later, stand for a packet that never came.
      SrState& s = *qp.sr;
      for (Psn q = pkt.psn + 1; before(q, qp.resp.epsn) && s.nkept != 0; q = q + 1)
        if (s.test(q)) {
          s.clear(q);
          --s.nkept;
        }
      sr_advance(eng, qp);
    }
    return;
  } else if (m.has(OpMask::kAtomic)) {
    resp_execute_atomic(eng, qp, pkt);
    if (qp.sr != nullptr && qp.sr->nkept != 0) [[unlikely]]
      sr_advance(eng, qp);
    return;
  }
  resp_acknowledge(eng, qp, pkt);
  if (qp.sr != nullptr && qp.sr->nkept != 0) [[unlikely]]
    sr_advance(eng, qp);
}

// ---- selective repeat (SrState) ----------------------------------------------------------

// A packet past ePSN on a selective-repeat QP. Only a WRITE Only without immediate is placed:
// it names its own place (RETH) and completes nothing at the responder, so placing it early
// changes nothing the application sees but the order bytes land in (docs/loss-recovery.md). Its
// key, the QP's access and its length are checked as in order; anything else (a SEND, an
// immediate, a READ, a key that does not hold, a packet beyond the bitmap) is left to the
// go-back-N path: not placed, it comes again.
bool Engine::Stages::sr_keep(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  SrState& s = *qp.sr;
  RespState& rs = qp.resp;
  const Psn p = pkt.psn;
  if (static_cast<std::uint32_t>(distance(p, rs.epsn)) >= SrState::kBits) return false;
  if (s.test(p)) {  // a second copy of what was placed
    eng.stats_.inc(Counter::kDuplicateRequests);
    return true;
  }
  if (pkt.info->mask.has(OpMask::kSr)) return sr_msg_keep(eng, qp, pkt);  // SEND, WRITE + imm
  if (pkt.opcode != Opcode::kRcWriteOnly || !(qp.attr.qp_access_flags & kAccessRemoteWrite))
    return false;
  const auto reth = pkt.reth();
  const std::uint32_t len = pkt.payload_len;
  // A zero-length WRITE needs no valid R_Key (C9-88): placed early, anyone who knows the QPN
  // and a PSN in the bitmap could mark a PSN as received. It waits for its turn instead.
  if (len == 0 || len > qp.pmtu() || reth.dma_len() != len) return false;
  {
    std::uint8_t* dst = eng.mrs_.map(reth.rkey(), qp.pd, reth.va(), len, kAccessRemoteWrite);
    if (dst == nullptr) return false;  // answered (NAKed) when it comes in order
    std::memcpy(dst, pkt.payload().data(), len);
  }
  sr_kept(eng, qp, pkt);
  return true;
}

void Engine::Stages::sr_kept(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  SrState& s = *qp.sr;
  RespState& rs = qp.resp;
  const Psn p = pkt.psn;
  if (pkt.ecn == 3) [[unlikely]]
    cc_on_ce(eng, qp, pkt);
  eng.stats_.inc(Counter::kSrOooPlaced);
  if (s.nkept == 0) {
    s.rx_high = s.rx_told = rs.epsn;
    s.gap_at = 0;
  }
  s.set(p);
  ++s.nkept;
  if (!before(p, s.rx_high)) s.rx_high = p + 1;
  if (s.gap_at == 0) {
    s.gap_at = eng.now_ | 1;  // 0 is "no window"
    s.gap_to = p;
    track_timer(eng, qp);  // the report is due at gap_at + kReorderNs at the latest
  } else if ((eng.now_ | 1) - s.gap_at >= SrState::kReorderNs) {
    sr_report(eng, qp);
  }
}

// The reorder window that started at gap_at has passed: the PSNs below the packet that started
// it (and at least kReorder below the highest placed one) that have not arrived are reported,
// once: one SACK per run of missing PSNs. What lies past them starts a window of its own.
void Engine::Stages::sr_report(Engine& eng, Qp& qp) {
  SrState& s = *qp.sr;
  RespState& rs = qp.resp;
  s.gap_at = 0;
  if (s.nkept == 0) return;
  Psn limit = s.rx_high - (SrState::kReorder + 1);
  if (before(s.gap_to, limit)) limit = s.gap_to;
  Psn q = after(s.rx_told, rs.epsn) ? s.rx_told : rs.epsn;
  bool acked = false;
  while (before(q, limit)) {
    if (s.test(q)) {
      q = q + 1;
      continue;
    }
    const Psn from = q;
    while (before(q, limit) && !s.test(q)) q = q + 1;
    if (!acked) {
      // The cumulative ACK first, whether or not AckReq asked for it: the requester then
      // knows that its oldest unacknowledged PSN is still missing here, and that a SACK for a
      // later gap means its copy was lost (comp_on_sack).
      acked = true;
      resp_ack_now(eng, qp, rs.epsn - 1);
      rs.ack_pending = false;
    }
    sr_emit_sack(eng, qp, from, q);
  }
  if (after(q, s.rx_told)) s.rx_told = q;
  if (before(s.rx_told, s.rx_high - 1)) {
    s.gap_at = eng.now_ | 1;
    s.gap_to = s.rx_high - 1;
  }
}

// ePSN has moved: it steps over every packet placed past it, each a whole message (MSN), and
// the cumulative ACK goes out with the next flush.
void Engine::Stages::sr_advance(Engine& eng, Qp& qp) {
  SrState& s = *qp.sr;
  RespState& rs = qp.resp;
  bool moved = false;
  while (s.nkept != 0 && s.test(rs.epsn)) {
    if (s.test_msg(rs.epsn)) [[unlikely]] {
      // A packet of a SEND or WRITE with immediate (sr_msg.cc): its message begins or ends.
      const SrStep st = sr_msg_step(eng, qp, rs.epsn);
      if (st == SrStep::kDead) return;
      if (st == SrStep::kStop) {
        s.clear(rs.epsn);
        if (--s.nkept == 0) s.gap_at = 0;
        eng.stats_.inc(Counter::kSrUnplaced);
        break;
      }
    } else if (rs.in_msg != RespState::InMsg::kNone || s.rx_msg_open) {
      // A WRITE Only placed where a multi-packet message was still under way: the peer broke
      // the opcode sequence (IBA 9.7.5.1.3), as resp_check_op_seq would have found in order.
      s = SrState{};
      resp_nak(eng, qp, Syndrome::nak(wire::NakCode::kInvalidRequest), rs.epsn, true);
      return;
    } else {
      rs.msn = rs.msn + 1;
    }
    s.clear(rs.epsn);
    if (--s.nkept == 0) s.gap_at = 0;
    rs.epsn = rs.epsn + 1;
    moved = true;
  }
  if (!moved) return;
  rs.nak_sent = false;
  defer_ack(qp, rs.epsn - 1, eng.ack_list_);
}

void Engine::Stages::sr_emit_sack(Engine& eng, Qp& qp, Psn from, Psn to) {
  RespState& rs = qp.resp;
  const Syndrome syn(SrState::kSackSyndrome);
  // Counted as sent only when it is on the wire or queued; a full TX ring counts tx_ring_full
  // (tx_slot) and a full answer queue resp_queue_full: the requester's probe finds the gap.
  if (rs.out_empty()) {
    if (auto slot = tx_slot(eng, true); !slot.empty()) {
      tx_commit(eng, build_ack(qp, slot, eng.ip_id_++, Opcode::kRcAcknowledge, syn, from, 0, false,
                               wire::Msn(to.raw()), true));
      eng.stats_.inc(Counter::kSrSacksSent);
    }
    return;
  }
  if (rs.out_tail - rs.out_head == rs.out.size()) {
    eng.stats_.inc(Counter::kRespQueueFull);
    return;
  }
  rs.out[rs.out_tail++ % rs.out.size()] = {RespState::Item::Kind::kAck, 0, syn, from, to.raw()};
  eng.stats_.inc(Counter::kSrSacksSent);
}

// PSN (IBA 9.7.5.1.1): the expected one goes on; an RC duplicate is answered from history, an
// RC packet ahead draws one sequence NAK per gap; UC loses the message in progress on a gap.
[[gnu::always_inline]] inline Engine::Stages::Step Engine::Stages::resp_check_psn(
    Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  RespState& rs = qp.resp;
  const Psn p = pkt.psn;
  const std::int32_t d = distance(p, rs.epsn);
  if (qp.type == QpType::kUc) {
    if (d != 0) {
      if (rs.in_msg != RespState::InMsg::kNone) abandon_uc_message(qp);
      rs.in_msg = RespState::InMsg::kNone;
      rs.recv_offset = 0;
      rs.epsn = p;
    }
    // Middle or Last of a message whose start was lost: wait for the next First/Only.
    if (rs.in_msg == RespState::InMsg::kNone && !pkt.info->mask.has(OpMask::kStart)) {
      eng.stats_.inc(Counter::kRxDropUcResync);
      rs.epsn = p + 1;
      return Step::kDone;
    }
    if (pkt.ecn == 3) [[unlikely]]
      cc_on_ce(eng, qp, pkt);
    return Step::kContinue;
  }
  if (d > 0) {
    // Selective repeat: a WRITE Only past a gap is placed now (SrState).
    if (qp.sr != nullptr && sr_keep(eng, qp, pkt)) [[unlikely]]
      return Step::kDone;
    // Marked behind a hole (a tail drop at a full queue): congestion all the same, within the
    // PSNs a requester can have in flight (a spoofer's guess far ahead draws nothing).
    if (pkt.ecn == 3 && d <= kCnpDuplicateWindow) [[unlikely]]
      cc_on_ce(eng, qp, pkt);
    if (!rs.nak_sent) {
      // Not sent (a full TX ring): the next packet past the gap tries again.
      rs.nak_sent = resp_nak(eng, qp, Syndrome::nak(wire::NakCode::kPsnSeqError), rs.epsn, false);
    } else {
      eng.stats_.inc(Counter::kRxDropAfterSeqNak);
    }
    return Step::kDone;
  }
  if (d < 0) {
    // A marked retransmission is congestion too, but only a recent one: the whole half of the
    // PSN space behind ePSN counts as "duplicate", which a spoofer hits by chance.
    if (pkt.ecn == 3 && d >= -kCnpDuplicateWindow) [[unlikely]]
      cc_on_ce(eng, qp, pkt);
    resp_duplicate(eng, qp, pkt);
    return Step::kDone;
  }
  rs.nak_sent = false;
  if (pkt.ecn == 3) [[unlikely]]
    cc_on_ce(eng, qp, pkt);  // ECN CE on an accepted packet: the notification point
  return Step::kContinue;
}

// A UC message in progress is lost (a gap, a missing receive WQE, a bad packet): the
// receive WQE it had taken stays with the QP, from its start, for the next message (as rxe
// keeps it).
namespace {
void abandon_uc_message(Qp& qp) { qp.resp.recv_offset = 0; }
}  // namespace

// A request the responder refuses: RC answers with a class C NAK (the QP goes to the error
// state and the application hears of it); UC drops the message and waits for the next one.
Engine::Stages::Step Engine::Stages::resp_error(Engine& eng, Qp& qp, const wire::RxPkt& pkt,
                                                wire::NakCode code) {
  RespState& rs = qp.resp;
  if (qp.type == QpType::kUc) {
    eng.stats_.inc(Counter::kRxDropUcError);
    if (rs.in_msg != RespState::InMsg::kNone) abandon_uc_message(qp);
    rs.in_msg = RespState::InMsg::kNone;
    rs.epsn = pkt.psn + 1;
    return Step::kDone;
  }
  resp_nak(eng, qp, Syndrome::nak(code), pkt.psn, true);
  async_event(eng, {code == wire::NakCode::kRemoteAccessError ? AsyncEventType::kQpAccessErr
                                                              : AsyncEventType::kQpReqErr,
                    qp.qpn, nullptr});
  return Step::kDone;
}

// The same, also completing the receive WQE the message had taken, in error.
Engine::Stages::Step Engine::Stages::resp_fail_recv(Engine& eng, Qp& qp, const wire::RxPkt& pkt,
                                                    WcStatus st, wire::NakCode code) {
  RespState& rs = qp.resp;
  if (rs.have_recv && qp.type != QpType::kUc) {
    Wc wc;
    wc.wr_id = rs.recv.wr_id;
    wc.status = st;
    wc.opcode = WcOpcode::kRecv;
    wc.qp_num = qp.qpn;
    wc.offset = static_cast<std::uint32_t>(rs.recv_base);
    release_recv(qp, 0, false);
    post_cqe(eng, qp.recv_cq, wc);
  }
  return resp_error(eng, qp, pkt, code);
}

// Opcode sequence (IBA 9.7.5.1.3; rxe check_op_seq): a message in progress continues with
// Middle/Last of its own kind; otherwise only a First or Only may come.
[[gnu::always_inline]] inline Engine::Stages::Step Engine::Stages::resp_check_op_seq(
    Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  const OpMask m = pkt.info->mask;
  bool ok = true;
  switch (qp.resp.in_msg) {
    case RespState::InMsg::kSend:
      ok = m.has(OpMask::kSend) && !m.has(OpMask::kStart);
      break;
    case RespState::InMsg::kWrite:
      ok = m.has(OpMask::kWrite) && !m.has(OpMask::kStart);
      break;
    case RespState::InMsg::kNone:
      ok = m.has(OpMask::kStart);
      break;
  }
  // Selective repeat: a standard request inside an SR message under way, or a standard
  // message that takes a receive WQE while SR messages hold places in the ring (ring_wqe),
  // breaks the sequence too: it would take their WQE (review 20, finding 2).
  if (ok && qp.sr != nullptr) [[unlikely]]
    ok = !qp.sr->rx_msg_open && !(m.has(OpMask::kRecvWqe) && sr_msgs_placed(*qp.sr));
  if (ok) return Step::kContinue;
  // Selective repeat's own opcodes (sr_msg.cc) are no continuation of IBA's sequence: they
  // come this way, on a QP that negotiated them (rx_dispatch lets them reach no other).
  if (m.has(OpMask::kSr) && qp.sr != nullptr) [[unlikely]] {
    sr_msg_in_order(eng, qp, pkt);
    return Step::kDone;
  }
  return resp_error(eng, qp, pkt, wire::NakCode::kInvalidRequest);
}

// The QP must allow the operation (rxe check_op_valid); FLUSH and ATOMIC WRITE are not
// supported.
[[gnu::always_inline]] inline Engine::Stages::Step Engine::Stages::resp_check_op_valid(
    Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  const OpMask m = pkt.info->mask;
  const std::uint32_t qacc = qp.attr.qp_access_flags;
  if ((m.has(OpMask::kWrite) && !(qacc & kAccessRemoteWrite)) ||
      (m.has(OpMask::kRead) && !(qacc & kAccessRemoteRead)) ||
      (m.has(OpMask::kAtomic) && !(qacc & kAccessRemoteAtomic)) ||
      m.any(OpMask::kFlush | OpMask::kAtomicWrite))
    return resp_error(eng, qp, pkt, wire::NakCode::kInvalidRequest);
  return Step::kContinue;
}

// SENDs and WRITE with immediate consume a receive WQE; without one, RC answers RNR NAK and
// UC drops the message.
[[gnu::always_inline]] inline Engine::Stages::Step Engine::Stages::resp_get_recv_wqe(
    Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  RespState& rs = qp.resp;
  if (!pkt.info->mask.has(OpMask::kRecvWqe) || rs.have_recv) return Step::kContinue;
  RecvQueue& q = qp.recv_queue();
  if (!q.has_wqe()) {
    if (qp.type == QpType::kUc) {
      eng.stats_.inc(Counter::kRxDropUcError);
      rs.in_msg = RespState::InMsg::kNone;
      rs.epsn = pkt.psn + 1;
      return Step::kDone;
    }
    resp_nak(eng, qp, Syndrome::rnr_nak(qp.attr.min_rnr_timer), pkt.psn, false);
    return Step::kDone;
  }
  take_recv(qp, q);
  rs.recv_offset = 0;
  return Step::kContinue;
}

// SEND: First/Middle carry exactly the path MTU, Last 1..MTU, Only 0..MTU (IBA 9.7.5.1.4);
// the payload goes to the receive WQE's buffers, whose keys are checked piece by piece.
[[gnu::always_inline]] inline Engine::Stages::Step Engine::Stages::resp_execute_send(
    Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  RespState& rs = qp.resp;
  const OpMask m = pkt.info->mask;
  const std::uint32_t len = pkt.payload_len;
  const std::uint32_t pmtu = qp.pmtu();
  const bool first = m.has(OpMask::kStart);
  const bool last = m.has(OpMask::kEnd);
  if ((!last && len != pmtu) || len > pmtu || (last && !first && len == 0))
    return resp_fail_recv(eng, qp, pkt, WcStatus::kRemInvReqErr, wire::NakCode::kInvalidRequest);
  if (rs.recv_base + rs.recv_offset + len > rs.recv.length)
    return resp_fail_recv(eng, qp, pkt, WcStatus::kLocLenErr, wire::NakCode::kInvalidRequest);
  if (len &&
      !resp_scatter(eng, qp, rs.recv, rs.recv_base + rs.recv_offset, pkt.payload().data(), len))
    return resp_fail_recv(eng, qp, pkt, WcStatus::kLocProtErr,
                          wire::NakCode::kRemoteOperationalError);
  rs.recv_offset += len;
  rs.in_msg = last ? RespState::InMsg::kNone : RespState::InMsg::kSend;
  if (!last) return Step::kContinue;
  if (m.has(OpMask::kInvalidate)) {
    // IBA 10.6.5: SEND with invalidate frees the named MR of this QP's PD.
    Mr* mr = eng.mrs_.find(pkt.ieth().rkey());
    if (mr == nullptr || mr->pd != qp.pd || !mr->fast_reg)
      return resp_fail_recv(eng, qp, pkt, WcStatus::kRemInvReqErr, wire::NakCode::kInvalidRequest);
    mr_invalidated(eng, *mr);
  }
  resp_complete_recv(eng, qp, pkt, static_cast<std::uint32_t>(rs.recv_offset));
  rs.msn = rs.msn + 1;
  return Step::kContinue;
}

// RDMA WRITE: the First packet names the region; every packet, not only the first, is checked
// against the key again, since the region may be deregistered or invalidated (locally, or by a
// SEND with invalidate) between two packets of one message.
[[gnu::always_inline]] inline Engine::Stages::Step Engine::Stages::resp_execute_write(
    Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  RespState& rs = qp.resp;
  const OpMask m = pkt.info->mask;
  const std::uint32_t len = pkt.payload_len;
  const std::uint32_t pmtu = qp.pmtu();
  const bool first = m.has(OpMask::kStart);
  const bool last = m.has(OpMask::kEnd);
  if (first) {
    const auto reth = pkt.reth();
    rs.write_va = reth.va();
    rs.write_rkey = reth.rkey();
    rs.write_total = rs.write_remaining = reth.dma_len();
    // IBA 9.7.5.1.5 / C9-88: a zero-length WRITE needs no valid R_Key.
    rs.write_range = {};
    // Later packets: a compare while the range holds; the next WRITE to the same MR: a few.
    if (rs.write_total != 0 &&
        eng.mrs_.check_memo(rs.write_memo, rs.write_rkey, qp.pd, rs.write_va, rs.write_total,
                            kAccessRemoteWrite, rs.write_range) != KeyCheck::kOk)
      return resp_fail_recv(eng, qp, pkt, WcStatus::kRemAccessErr,
                            wire::NakCode::kRemoteAccessError);
  }
  const bool len_ok = len <= pmtu && (last ? len == rs.write_remaining
                                           : (len == pmtu && rs.write_remaining > pmtu));
  if (!len_ok)
    return resp_fail_recv(eng, qp, pkt, WcStatus::kRemInvReqErr, wire::NakCode::kInvalidRequest);
  if (len) {
    std::uint8_t* dst =
        eng.mrs_.map(rs.write_range, rs.write_rkey, qp.pd, rs.write_va, len, kAccessRemoteWrite);
    if (dst == nullptr)
      return resp_fail_recv(eng, qp, pkt, WcStatus::kRemAccessErr,
                            wire::NakCode::kRemoteAccessError);
    wire::copy_payload(dst, pkt.payload().data(), len);
  }
  rs.write_va += len;
  rs.write_remaining -= len;
  rs.in_msg = last ? RespState::InMsg::kNone : RespState::InMsg::kWrite;
  if (last) {
    if (m.has(OpMask::kImm))
      resp_complete_recv(eng, qp, pkt, static_cast<std::uint32_t>(rs.write_total));
    rs.msn = rs.msn + 1;
  }
  return Step::kContinue;
}

// READ and atomic requests need a responder resource: at most max_dest_rd_atomic READs may
// be streaming (what was negotiated; a requester beyond it breaks the protocol), and the
// output queue needs a place. -1 after answering or dropping the request.
int Engine::Stages::resp_claim_resource(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  RespState& rs = qp.resp;
  // IBA 9.7.5.1.7: no READ/atomic resources at all means invalid request.
  if (qp.attr.max_dest_rd_atomic == 0 || rs.reads_active() >= qp.attr.max_dest_rd_atomic) {
    resp_error(eng, qp, pkt, wire::NakCode::kInvalidRequest);
    return -1;
  }
  const int slot = alloc_res(qp);
  if (slot < 0 || rs.out_tail - rs.out_head == rs.out.size()) {
    // Every slot is still replaying or the output queue is full (a peer flooding duplicates):
    // drop without executing; the requester retries.
    eng.stats_.inc(Counter::kRxDropRdAtomicBusy);
    return -1;
  }
  return slot;
}

void Engine::Stages::resp_execute_read(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  RespState& rs = qp.resp;
  const auto reth = pkt.reth();
  const std::uint64_t rlen = reth.dma_len();
  // IBA: a message is at most 2^31 bytes; a longer READ would also wrap the PSN space.
  if (rlen > (std::uint64_t{1} << 31)) {
    resp_error(eng, qp, pkt, wire::NakCode::kInvalidRequest);
    return;
  }
  Mr* mr = nullptr;
  if (rlen != 0 && eng.mrs_.check(reth.rkey(), qp.pd, reth.va(), rlen, kAccessRemoteRead, &mr) !=
                       KeyCheck::kOk) {
    resp_error(eng, qp, pkt, wire::NakCode::kRemoteAccessError);
    return;
  }
  const int slot = resp_claim_resource(eng, qp, pkt);
  if (slot < 0) return;
  const std::uint32_t npkts =
      rlen == 0 ? 1 : static_cast<std::uint32_t>((rlen + qp.pmtu() - 1) >> qp.pmtu_shift());
  const auto idx = static_cast<std::uint32_t>(slot);
  RdAtomicRes& r = rs.res[idx];
  r = RdAtomicRes{};
  r.kind = RdAtomicRes::Kind::kRead;
  r.first_psn = pkt.psn;
  r.last_psn = pkt.psn + (npkts - 1);
  r.va = reth.va();
  r.rkey = reth.rkey();
  r.length = rlen;
  r.active = true;
  r.pending = 1;
  r.next_psn = pkt.psn;
  r.end_offset = rlen;
  if (mr != nullptr) r.range = eng.mrs_.remember(mr);
  rs.out[rs.out_tail++ % rs.out.size()] = {RespState::Item::Kind::kRead,
                                           static_cast<std::uint8_t>(idx), Syndrome::ack(), pkt.psn,
                                           static_cast<std::uint32_t>(rlen)};
  ++rs.reads_queued;
  resp_schedule(eng, qp);
  rs.msn = rs.msn + 1;
  rs.epsn = pkt.psn + npkts;
}

void Engine::Stages::resp_execute_atomic(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  RespState& rs = qp.resp;
  const auto a = pkt.atomic_eth();
  if (a.va() % 8 != 0) {
    resp_error(eng, qp, pkt, wire::NakCode::kInvalidRequest);
    return;
  }
  std::uint8_t* host = eng.mrs_.map(a.rkey(), qp.pd, a.va(), 8, kAccessRemoteAtomic);
  if (host == nullptr) {
    resp_error(eng, qp, pkt, wire::NakCode::kRemoteAccessError);
    return;
  }
  const int slot = resp_claim_resource(eng, qp, pkt);
  if (slot < 0) return;
  auto* target = reinterpret_cast<std::uint64_t*>(host);
  std::uint64_t orig;
  if (pkt.opcode == Opcode::kRcCompareSwap) {
    orig = a.compare();
    __atomic_compare_exchange_n(target, &orig, a.swap_add(), false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
  } else {
    orig = __atomic_fetch_add(target, a.swap_add(), __ATOMIC_SEQ_CST);
  }
  const auto idx = static_cast<std::uint32_t>(slot);
  RdAtomicRes& r = rs.res[idx];
  r = RdAtomicRes{};
  r.kind = RdAtomicRes::Kind::kAtomic;
  r.first_psn = r.last_psn = pkt.psn;
  r.atomic_orig = orig;
  rs.msn = rs.msn + 1;
  rs.epsn = pkt.psn + 1;
  resp_emit_atomic_ack(eng, qp, idx);
}

// SEND and WRITE packets: the next PSN is expected, and an AckReq is answered (coalesced to
// the end of the receive burst).
[[gnu::always_inline]] inline void Engine::Stages::resp_acknowledge(Engine& eng, Qp& qp,
                                                                    const wire::RxPkt& pkt) {
  qp.resp.epsn = pkt.psn + 1;
  if (pkt.ack_req && qp.type != QpType::kUc) defer_ack(qp, pkt.psn, eng.ack_list_);
}

void Engine::Stages::resp_step_in_order(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  resp_acknowledge(eng, qp, pkt);
  if (qp.sr != nullptr && qp.sr->nkept != 0) sr_advance(eng, qp);
}

void Engine::Stages::resp_read_pump(Engine& eng, Qp& qp, std::uint32_t& budget) {
  RespState& rs = qp.resp;
  const std::uint32_t pmtu = qp.pmtu();
  while (budget > 0 && !rs.out_empty() && qp.state != QpState::kErr) {
    RespState::Item& it = rs.out[rs.out_head % rs.out.size()];
    if (it.kind != RespState::Item::Kind::kRead) {
      auto slot = tx_slot(eng, true);
      if (slot.empty()) return;
      const bool atomic = it.kind == RespState::Item::Kind::kAtomicAck;
      const bool sack = it.syn.type() == wire::AckType::kReserved;  // len: the MSN it carries
      tx_commit(eng, build_ack(qp, slot, eng.ip_id_++,
                               atomic ? Opcode::kRcAtomicAcknowledge : Opcode::kRcAcknowledge,
                               it.syn, it.psn, atomic ? rs.res[it.res].atomic_orig : 0,
                               eng.cfg_.advertise_credits, wire::Msn(it.len), sack));
      if (!sack) eng.stats_.inc(atomic ? Counter::kAtomicAcksSent : Counter::kAckSent);
      ++rs.out_head;
      --budget;
      continue;
    }
    RdAtomicRes& r = rs.res[it.res];
    if (!r.active) {
      ++rs.out_head;
      --rs.reads_queued;
      continue;
    }
    auto slot = tx_slot(eng, false);
    if (slot.empty()) return;
    if (!it.started) {  // this stream's cursor: the READ, or the part a duplicate asked for
      it.started = true;
      r.next_psn = it.psn;
      r.next_offset = std::uint64_t(distance(it.psn, r.first_psn)) * pmtu;
      r.start_offset = r.next_offset;
      r.end_offset = r.next_offset + it.len;
    }
    const std::uint64_t remaining = r.end_offset - r.next_offset;
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(pmtu, remaining));
    // The application may deregister or invalidate the region between polls: never read
    // memory the key no longer grants.
    const std::uint8_t* src = len == 0 ? nullptr
                                       : eng.mrs_.map(r.range, r.rkey, qp.pd, r.va + r.next_offset,
                                                      len, kAccessRemoteRead);
    if (len != 0 && src == nullptr && it.replay) {
      // A replay whose region was deregistered or invalidated since it was queued: dropped,
      // as resp_duplicate drops one asked for then (most are for a READ the requester has
      // completed, whose region the application then freed; a NAK would end the connection).
      eng.stats_.inc(Counter::kRxDropDupRead);
      r.active = --r.pending != 0;
      ++rs.out_head;
      --rs.reads_queued;
      continue;
    }
    if (len != 0 && src == nullptr) {
      r.active = false;
      r.pending = 0;
      ++rs.out_head;
      --rs.reads_queued;
      resp_nak(eng, qp, Syndrome::nak(wire::NakCode::kRemoteAccessError), r.next_psn, true);
      return;
    }
    const bool first = r.next_offset == r.start_offset;
    const bool last = len == remaining;
    wire::PacketFields f;
    f.ip_id = eng.ip_id_++;
    f.opcode = first && last ? Opcode::kRcReadResponseOnly
               : first       ? Opcode::kRcReadResponseFirst
               : last        ? Opcode::kRcReadResponseLast
                             : Opcode::kRcReadResponseMiddle;
    f.psn = r.next_psn;
    f.aeth_syndrome = ack_syndrome(qp, eng.cfg_.advertise_credits);
    f.aeth_msn = rs.msn;
    TxPacket p = tx_begin(eng, qp, slot, f, len);
    if (len && zero_copy_ok(eng, qp, len)) {
      const TxSeg ext{src, static_cast<std::uint32_t>(len)};
      tx_finish_ext(eng, qp, p, {&ext, 1});
    } else {
      if (len) std::memcpy(slot.data() + p.hdr, src, len);
      tx_finish(eng, qp, p, len);
    }
    eng.stats_.inc(Counter::kReadResponsesSent);
    --budget;
    r.next_offset += len;
    ++r.next_psn;
    if (last) {
      if (!it.replay) r.replay = true;  // the READ itself is answered; replays may follow
      r.active = --r.pending != 0;
      ++rs.out_head;
      --rs.reads_queued;
    }
  }
}

void Engine::Stages::resp_on_ud(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  if (qp.state != QpState::kRtr && qp.state != QpState::kRts) {
    eng.stats_.inc(Counter::kRxDropQpState);
    return;
  }
  if (pkt.deth().qkey() != qp.attr.qkey) {
    eng.stats_.inc(Counter::kRxDropQkey);
    return;
  }
  RecvQueue& q = qp.recv_queue();
  if (!q.has_wqe()) {
    eng.stats_.inc(Counter::kRxDropUnexpected);  // UD has no RNR: the datagram is lost
    return;
  }
  RespState& rs = qp.resp;
  take_recv(qp, q);
  // 40 bytes of GRH first: for IPv4, 20 zero bytes then the IPv4 header (as rxe fills it).
  std::uint8_t grh[40] = {};
  if (pkt.ip_version == wire::IpVersion::kV4)
    std::memcpy(grh + 20, pkt.frame + pkt.l3_off, 20);
  else
    std::memcpy(grh, pkt.frame + pkt.l3_off, 40);
  Wc wc;
  wc.wr_id = rs.recv.wr_id;
  wc.opcode = WcOpcode::kRecv;
  wc.qp_num = qp.qpn;
  wc.src_qp = pkt.deth().src_qp().raw();
  wc.wc_flags = kWcGrh;
  const std::uint64_t need = 40 + std::uint64_t{pkt.payload_len};
  const std::uint64_t base = rs.recv_base;
  wc.offset = static_cast<std::uint32_t>(base);
  if (base + need > rs.recv.length) {
    wc.status = WcStatus::kLocLenErr;
  } else if (!resp_scatter(eng, qp, rs.recv, base, grh, 40) ||
             !resp_scatter(eng, qp, rs.recv, base + 40, pkt.payload().data(), pkt.payload_len)) {
    wc.status = WcStatus::kLocProtErr;
  } else {
    wc.byte_len = static_cast<std::uint32_t>(need);
    if (pkt.info->has(wire::Ext::kImmDt)) {
      wc.imm_data = pkt.immdt().imm();
      wc.wc_flags |= kWcWithImm;
    }
    if (pkt.bth().se()) wc.wc_flags |= kWcSolicited;
  }
  if (release_recv(qp, wc.status == WcStatus::kSuccess ? need : 0, wc.status == WcStatus::kSuccess))
    wc.wc_flags |= kWcStillQueued;
  post_cqe(eng, qp.recv_cq, wc);
}

}  // namespace roce::engine
