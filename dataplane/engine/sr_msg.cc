/// @file
/// Selective repeat for the messages that consume a receive WQE: SEND (with immediate, with
/// invalidate) and RDMA WRITE with immediate, between two of our stacks that negotiated it
/// (docs/loss-recovery.md, "SENDs and WRITE with immediate"; IRN, SIGCOMM 2018). The requester
/// sends every packet of such a message with an SR opcode (0xE0-0xE3) whose payload opens with
/// the SR header (wire/srh.h): the message's index among these messages, the packet's offset
/// in it and its length. The responder places a packet past ePSN in the receive WQE the index
/// names (the n-th posted one, counted from the oldest message not complete), keeps a record of
/// the message, and completes it, in order, when ePSN passes its last packet (sr_msg_step).
/// The PSN bitmap, the SACKs and the retransmissions are WRITE's (responder.cc, retransmit.cc).
#include <algorithm>
#include <cstring>

#include "dataplane/engine/engine_loc.h"
#include "dataplane/wire/srh.h"

namespace roce::engine {

using wire::Opcode;
using wire::OpMask;
using wire::Psn;
using wire::Syndrome;

namespace {

bool consumes_recv(WrOpcode op) {
  return op == WrOpcode::kSend || op == WrOpcode::kSendImm || op == WrOpcode::kSendInv ||
         op == WrOpcode::kWriteImm;
}

bool finished(const SendWqe& w) {
  return w.state == WqeState::kExecuted || w.state == WqeState::kDone ||
         w.state == WqeState::kFailed;
}

// What one SR packet says of its message, checked against itself and the path MTU.
struct Geometry {
  std::uint32_t index = 0;
  std::uint32_t offset = 0;
  std::uint32_t length = 0;  ///< the message's
  std::uint32_t len = 0;     ///< this packet's data
  std::uint32_t imm = 0;
  Psn first, last;
  const std::uint8_t* data = nullptr;
};

// False for a packet no requester of ours sends: too short for the header, an offset that is
// not a packet boundary or lies past the message, a data length other than its place's, a
// message longer than IBA allows or than half the PSN space.
bool parse(const Qp& qp, const wire::RxPkt& pkt, Geometry& g) {
  constexpr std::uint32_t kH = wire::SrhView::kSize;
  if (pkt.payload_len < kH) return false;
  const wire::ConstSrhView h(pkt.payload().data());
  g.index = h.index();
  g.offset = h.offset();
  g.length = h.length();
  g.len = pkt.payload_len - kH;
  g.data = pkt.payload().data() + kH;
  const unsigned shift = qp.pmtu_shift();
  const std::uint32_t pmtu = qp.pmtu();
  if (g.length > (std::uint32_t{1} << 31) || (g.offset & (pmtu - 1)) != 0) return false;
  if (g.offset >= g.length && !(g.offset == 0 && g.length == 0)) return false;
  const std::uint32_t npkts = g.length == 0 ? 1 : ((g.length - 1) >> shift) + 1;
  g.first = pkt.psn - (g.offset >> shift);
  g.last = g.first + (npkts - 1);
  const bool is_last = pkt.psn == g.last;
  if (g.len != (is_last ? g.length - g.offset : pmtu)) return false;
  const wire::OpcodeInfo& info = *pkt.info;
  if (info.has(wire::Ext::kImmDt)) g.imm = pkt.immdt().imm();
  if (info.has(wire::Ext::kIeth)) g.imm = pkt.ieth().rkey();
  return true;
}

// Whether an SR packet's message index is among the next kMsgs from rx_msg, the only ones the
// peer sends: its requester starts no message further ahead, and the packets of every earlier
// one lie behind ePSN. The indices start where both ends agreed (SrIndexBase), so a packet
// outside is no packet of the peer's: a blind forger's, who had to guess 32 bits. A payload
// too short for the header is left to parse().
bool in_window(const SrState& s, const wire::RxPkt& pkt) {
  if (pkt.payload_len < wire::SrhView::kSize) return true;
  return wire::ConstSrhView(pkt.payload().data()).index() - s.rx_msg < SrState::kMsgs;
}

bool same(const SrState::RecvMsg& r, const Geometry& g, Opcode op) {
  return r.index == g.index && r.first == g.first && r.length == g.length && r.imm == g.imm &&
         r.op == op;
}

// Scatters `len` bytes at `offset` of a receive WQE's buffers, through their keys.
bool scatter(const MrTable& mrs, const Pd* pd, const Sge* sges, std::uint32_t num_sge,
             std::uint64_t offset, const std::uint8_t* src, std::size_t len) {
  std::size_t done = 0;
  for (std::uint32_t i = 0; i < num_sge && done < len; ++i) {
    if (offset >= sges[i].length) {
      offset -= sges[i].length;
      continue;
    }
    const std::size_t n = std::min<std::size_t>(sges[i].length - offset, len - done);
    std::uint8_t* dst = mrs.map(sges[i].lkey, pd, sges[i].addr + offset, n, kAccessLocalWrite);
    if (dst == nullptr) return false;
    std::memcpy(dst, src + done, n);
    done += n;
    offset = 0;
  }
  return done == len;
}

// The receive WQE of a message `k` places past the next one to be taken from the ring, when
// the ring alone decides it: the QP's own queue (an SRQ's WQEs go to whichever QP comes first),
// no multi-message buffer open (it would take the next message), and none among the WQEs up
// to it (it would open). Null otherwise, or when fewer are posted (RNR when its turn comes).
const RecvWqe* ring_wqe(const Qp& qp, std::uint32_t k) {
  if (qp.srq != nullptr) return nullptr;
  const RecvQueue& q = qp.rq;
  if (k >= q.count()) return nullptr;
  for (const RecvQueue::Open& o : q.open)
    if (o.live) return nullptr;
  for (std::uint32_t j = 0; j <= k; ++j)
    if (q.wqes[q.slot(q.head + j)].min_free != 0) return nullptr;
  return &q.wqes[q.slot(q.head + k)];
}

// Whether message `index` may hold PSNs [first, last]: the live records' ranges never overlap
// and follow their indices (messages go out in order), so that ePSN, stepping over a placed
// packet, finds it inside the record of the message it was placed for (sr_msg_step).
bool fits(SrState& s, std::uint32_t index, Psn first, Psn last, SrState::RecvMsg** clash) {
  for (SrState::RecvMsg& o : s.msgs) {
    if (!o.live || o.index == index) continue;
    const bool older = o.index - s.rx_msg < index - s.rx_msg;
    if (older ? before(o.last, first) : after(o.first, last)) continue;
    if (clash != nullptr) *clash = &o;
    return false;
  }
  return true;
}

// Forgets the packets placed for record `r` past ePSN (the packet in order says the message is
// another: what was placed for it was forged); the requester sends them again if they were
// real (a later SACK, the probe). Returns how many.
std::uint32_t forget(SrState& s, SrState::RecvMsg& r, Psn epsn) {
  std::uint32_t n = 0;
  Psn q = before(r.first, epsn) ? epsn : r.first;
  for (; !after(q, r.last) && static_cast<std::uint32_t>(distance(q, epsn)) < SrState::kBits;
       q = q + 1) {
    if (s.test(q) && s.test_msg(q)) {
      s.clear(q);
      if (--s.nkept == 0) s.gap_at = 0;
      ++n;
    }
  }
  r.live = false;
  return n;
}

}  // namespace

// ---- requester -----------------------------------------------------------------------------

bool Engine::Stages::sr_start_wqe(Qp& qp, SendWqe& w) {
  if (!consumes_recv(w.opcode)) return true;
  SrState& s = *qp.sr;
  if (s.tx_msg - s.tx_floor >= SrState::kMsgs) {
    // The floor moves to the oldest message not yet acknowledged: only then is the window full.
    s.tx_floor = s.tx_msg;
    for (std::uint32_t i = qp.sq_head; i != qp.req.next_wqe; ++i) {
      const SendWqe& o = qp.wqe(i);
      if (consumes_recv(o.opcode) && o.state != WqeState::kPosted && !finished(o)) {
        s.tx_floor = o.sr_msg;
        break;
      }
    }
    if (s.tx_msg - s.tx_floor >= SrState::kMsgs) return false;
  }
  w.sr_msg = s.tx_msg++;
  return true;
}

// The packet's headers (the path template's), the SR header, then the payload (copied, or
// zero-copy behind the headers).
bool Engine::Stages::sr_emit(Engine& eng, Qp& qp, SendWqe& w, std::span<std::uint8_t> slot,
                             const wire::PacketFields& f, std::size_t payload) {
  constexpr std::size_t kH = wire::SrhView::kSize;
  TxPacket p = tx_begin(eng, qp, slot, f, kH + payload);
  if (p.hdr == 0) {
    req_fail(eng, qp, w, WcStatus::kGeneralErr);
    return false;
  }
  wire::SrhView(slot.data() + p.hdr)
      .set(w.sr_msg, static_cast<std::uint32_t>(w.sent), static_cast<std::uint32_t>(w.length));
  TxSeg ext[TxRing::kMaxExt];
  const std::size_t n_ext =
      payload && zero_copy_ok(eng, qp, payload) ? gather_ext(eng, qp, w, w.sent, payload, ext) : 0;
  if (n_ext != 0) {
    p.hdr += kH;  // the SR header goes with the headers, the payload behind them
    tx_finish_ext(eng, qp, p, {ext, n_ext});
    return true;
  }
  WcStatus err = WcStatus::kSuccess;
  if (payload) gather(eng, qp, w, w.sent, slot.data() + p.hdr + kH, payload, err);
  if (err != WcStatus::kSuccess) {
    req_fail(eng, qp, w, err);
    return false;
  }
  tx_finish(eng, qp, p, kH + payload);
  return true;
}

// ---- responder -----------------------------------------------------------------------------

// A packet past ePSN: placed when its message's record agrees (or it starts one), its index
// is within kMsgs of the next message to complete, and its receive WQE is known and large
// enough (a SEND: the WQE the open message took, or the ring's; a WRITE with immediate: its
// RETH's key, and a WQE posted for its completion). An index outside that window is forged:
// counted and dropped, unanswered (true: handled). Anything else is counted and left to the
// go-back-N path (not placed: it comes again).
bool Engine::Stages::sr_msg_keep(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  SrState& s = *qp.sr;
  RespState& rs = qp.resp;
  if (!in_window(s, pkt)) {
    eng.stats_.inc(Counter::kSrForgedDropped);
    return true;
  }
  const auto unplaced = [&eng] {
    eng.stats_.inc(Counter::kSrUnplaced);
    return false;
  };
  Geometry g;
  if (rs.in_msg != RespState::InMsg::kNone || !parse(qp, pkt, g)) return unplaced();
  // A message without data waits for its turn, as a zero-length WRITE does: nothing to place.
  if (g.len == 0) return unplaced();
  const std::uint32_t dm = g.index - s.rx_msg;
  SrState::RecvMsg& r = s.msgs[g.index % SrState::kMsgs];
  const bool open = dm == 0 && s.rx_msg_open;
  if (r.live ? !same(r, g, pkt.opcode)
             : open || before(g.first, rs.epsn) || !fits(s, g.index, g.first, g.last, nullptr))
    return unplaced();
  const Pd* pd = qp.srq ? qp.srq->pd : qp.pd;
  // WQEs the ring gives out before this message's: the open SEND holds one already.
  const std::uint32_t k = dm - (rs.have_recv ? 1u : 0u);
  if (pkt.opcode == Opcode::kSrWriteImm) {
    const auto reth = pkt.reth();
    if (!(qp.attr.qp_access_flags & kAccessRemoteWrite) || reth.dma_len() != g.len ||
        ring_wqe(qp, k) == nullptr)
      return unplaced();
    std::uint8_t* dst = eng.mrs_.map(reth.rkey(), qp.pd, reth.va(), g.len, kAccessRemoteWrite);
    if (dst == nullptr) return unplaced();  // answered (NAKed) when it comes in order
    std::memcpy(dst, g.data, g.len);
  } else if (open) {
    if (!rs.have_recv || rs.recv_base + g.length > rs.recv.length ||
        !scatter(eng.mrs_, pd, rs.recv_sges.data(), rs.recv.num_sge, rs.recv_base + g.offset,
                 g.data, g.len))
      return unplaced();
  } else {
    const RecvWqe* wqe = ring_wqe(qp, k);
    if (wqe == nullptr || g.length > wqe->length ||
        !scatter(eng.mrs_, pd, qp.rq.sges.data() + wqe->sge_base, wqe->num_sge, g.offset, g.data,
                 g.len))
      return unplaced();
  }
  if (!r.live) r = {g.first, g.last, g.index, g.length, g.imm, pkt.opcode, pkt.bth().se(), true};
  s.set_msg(pkt.psn);
  sr_kept(eng, qp, pkt);
  return true;
}

// A failed message: its WQE (if it took one) completes in error, and the QP stops (class C).
void Engine::Stages::sr_msg_fail(Engine& eng, Qp& qp, Psn psn, WcStatus st, wire::NakCode code) {
  RespState& rs = qp.resp;
  if (rs.have_recv) {
    Wc wc;
    wc.wr_id = rs.recv.wr_id;
    wc.status = st;
    wc.opcode = WcOpcode::kRecv;
    wc.qp_num = qp.qpn;
    wc.offset = static_cast<std::uint32_t>(rs.recv_base);
    resp_release_recv(qp, 0, false);
    post_cqe(eng, qp.recv_cq, wc);
  }
  resp_nak(eng, qp, Syndrome::nak(code), psn, true);
  async_event(eng, {code == wire::NakCode::kRemoteAccessError ? AsyncEventType::kQpAccessErr
                                                              : AsyncEventType::kQpReqErr,
                    qp.qpn, nullptr});
}

// Message rx_msg is whole (ePSN has passed `psn`, its last packet): it completes. A WRITE with
// immediate takes its receive WQE now. False when it could not: RNR (no WQE; the caller keeps
// ePSN at `psn`) or an error (the QP has stopped).
bool Engine::Stages::sr_msg_done(Engine& eng, Qp& qp, SrState::RecvMsg& r, Psn psn) {
  SrState& s = *qp.sr;
  RespState& rs = qp.resp;
  const bool write = r.op == Opcode::kSrWriteImm;
  if (!write && !rs.have_recv) {  // cannot happen: a SEND takes its WQE where it begins
    resp_nak(eng, qp, Syndrome::nak(wire::NakCode::kInvalidRequest), psn, true);
    return false;
  }
  if (write) {
    RecvQueue& q = qp.recv_queue();
    if (!q.has_wqe()) {  // only on an SRQ, which another QP emptied meanwhile
      resp_nak(eng, qp, Syndrome::rnr_nak(qp.attr.min_rnr_timer), psn, false);
      return false;
    }
    resp_take_recv(qp, q);
  }
  Wc wc;
  if (r.op == Opcode::kSrSendInv) {
    // IBA 10.6.5: SEND with invalidate frees the named MR of this QP's PD.
    Mr* mr = eng.mrs_.find(r.imm);
    if (mr == nullptr || mr->pd != qp.pd || !mr->fast_reg) {
      sr_msg_fail(eng, qp, psn, WcStatus::kRemInvReqErr, wire::NakCode::kInvalidRequest);
      return false;
    }
    mr_invalidated(eng, *mr);
    wc.invalidated_rkey = r.imm;
    wc.wc_flags |= kWcWithInv;
  }
  wc.wr_id = rs.recv.wr_id;
  wc.status = WcStatus::kSuccess;
  wc.opcode = write ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv;
  wc.byte_len = r.length;
  wc.qp_num = qp.qpn;
  wc.src_qp = qp.attr.dest_qp_num;
  if (r.op == Opcode::kSrSendImm || write) {
    wc.imm_data = r.imm;
    wc.wc_flags |= kWcWithImm;
  }
  if (r.se) wc.wc_flags |= kWcSolicited;
  wc.offset = static_cast<std::uint32_t>(rs.recv_base);
  if (resp_release_recv(qp, write ? 0 : r.length, true)) wc.wc_flags |= kWcStillQueued;
  post_cqe(eng, qp.recv_cq, wc);
  rs.msn = rs.msn + 1;
  ++s.rx_msg;
  s.rx_msg_open = false;
  r.live = false;
  return true;
}

// The packet at ePSN. In order it is the peer's word, as on the go-back-N path: it must belong
// to the next message to complete (else the QP stops, class C, as an opcode out of sequence
// would), a record that disagrees with it was forged and is dropped with what it placed, a
// message begins with its first packet, a SEND takes its receive WQE there (RNR NAK if none),
// and the message completes at its last packet. An index outside the window is no word of the
// peer's (in_window): counted and dropped, ePSN stays for the real packet.
void Engine::Stages::sr_msg_in_order(Engine& eng, Qp& qp, const wire::RxPkt& pkt) {
  SrState& s = *qp.sr;
  RespState& rs = qp.resp;
  if (!in_window(s, pkt)) {
    eng.stats_.inc(Counter::kSrForgedDropped);
    return;
  }
  Geometry g;
  if (rs.in_msg != RespState::InMsg::kNone || !parse(qp, pkt, g) || g.index != s.rx_msg) {
    resp_error(eng, qp, pkt, wire::NakCode::kInvalidRequest);
    return;
  }
  SrState::RecvMsg& r = s.msgs[g.index % SrState::kMsgs];
  const bool write = pkt.opcode == Opcode::kSrWriteImm;
  if (write && !(qp.attr.qp_access_flags & kAccessRemoteWrite)) {
    resp_error(eng, qp, pkt, wire::NakCode::kInvalidRequest);
    return;
  }
  if (r.live && !same(r, g, pkt.opcode)) {
    if (s.rx_msg_open) {  // the message began in order: this packet is not of it
      sr_msg_fail(eng, qp, pkt.psn, WcStatus::kRemInvReqErr, wire::NakCode::kInvalidRequest);
      return;
    }
    eng.stats_.inc(Counter::kSrUnplaced, forget(s, r, rs.epsn));
  }
  if (!s.rx_msg_open) {
    if (pkt.psn != g.first) {
      resp_error(eng, qp, pkt, wire::NakCode::kInvalidRequest);
      return;
    }
    RecvQueue& q = qp.recv_queue();
    if (!q.has_wqe()) {  // RNR: a SEND needs its WQE now, a WRITE with immediate at its end
      resp_nak(eng, qp, Syndrome::rnr_nak(qp.attr.min_rnr_timer), pkt.psn, false);
      return;
    }
    if (!write) {
      resp_take_recv(qp, q);
      rs.recv_offset = 0;
      if (rs.recv_base + g.length > rs.recv.length) {
        sr_msg_fail(eng, qp, pkt.psn, WcStatus::kLocLenErr, wire::NakCode::kInvalidRequest);
        return;
      }
    }
    if (!r.live) {
      // In order, the message is the peer's: records placed where it lies were forged.
      for (SrState::RecvMsg* o = nullptr; !fits(s, g.index, g.first, g.last, &o);)
        eng.stats_.inc(Counter::kSrUnplaced, forget(s, *o, rs.epsn));
      r = {g.first, g.last, g.index, g.length, g.imm, pkt.opcode, pkt.bth().se(), true};
    }
    s.rx_msg_open = true;
  }
  if (write) {
    const auto reth = pkt.reth();
    if (reth.dma_len() != g.len) {
      resp_error(eng, qp, pkt, wire::NakCode::kInvalidRequest);
      return;
    }
    if (g.len != 0) {
      std::uint8_t* dst = eng.mrs_.map(reth.rkey(), qp.pd, reth.va(), g.len, kAccessRemoteWrite);
      if (dst == nullptr) {
        sr_msg_fail(eng, qp, pkt.psn, WcStatus::kRemAccessErr, wire::NakCode::kRemoteAccessError);
        return;
      }
      std::memcpy(dst, g.data, g.len);
    }
  } else if (!rs.have_recv) {  // its WQE is no longer held (cannot happen: review 20)
    sr_msg_fail(eng, qp, pkt.psn, WcStatus::kRemInvReqErr, wire::NakCode::kInvalidRequest);
    return;
  } else if (g.len != 0 &&
             !resp_scatter(eng, qp, rs.recv, rs.recv_base + g.offset, g.data, g.len)) {
    sr_msg_fail(eng, qp, pkt.psn, WcStatus::kLocProtErr, wire::NakCode::kRemoteOperationalError);
    return;
  }
  if (pkt.psn == g.last && !sr_msg_done(eng, qp, r, pkt.psn)) return;
  resp_step_in_order(eng, qp, pkt);
}

// ePSN reaches `q`, a packet placed for a message: the message it belongs to must be the next
// to complete; it begins there (a SEND takes the WQE it was placed in: the ring's next) and
// completes at its last packet. kStop leaves ePSN at q with its bit cleared (a packet placed
// for another message, forged: the real one comes again), kDead when the QP stopped.
Engine::Stages::SrStep Engine::Stages::sr_msg_step(Engine& eng, Qp& qp, Psn q) {
  SrState& s = *qp.sr;
  RespState& rs = qp.resp;
  SrState::RecvMsg& r = s.msgs[s.rx_msg % SrState::kMsgs];
  const bool ok = r.live && r.index == s.rx_msg && !before(q, r.first) && !after(q, r.last) &&
                  (s.rx_msg_open || q == r.first);
  if (!ok) return SrStep::kStop;
  if (!s.rx_msg_open) {
    if (r.op != Opcode::kSrWriteImm) {
      // Placed in the ring's next WQE (ring_wqe): nothing else can have taken it since.
      if (qp.srq != nullptr || !qp.rq.has_wqe() || qp.rq.idle_open() >= 0) return SrStep::kStop;
      resp_take_recv(qp, qp.rq);
      rs.recv_offset = 0;
      if (rs.recv_base + r.length > rs.recv.length) {  // not the WQE it was placed in
        sr_msg_fail(eng, qp, q, WcStatus::kLocLenErr, wire::NakCode::kInvalidRequest);
        return SrStep::kDead;
      }
    }
    s.rx_msg_open = true;
  }
  if (q == r.last && !sr_msg_done(eng, qp, r, q))
    return qp.state == QpState::kErr ? SrStep::kDead : SrStep::kStop;
  return SrStep::kStep;
}

}  // namespace roce::engine
