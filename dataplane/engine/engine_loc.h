/// @file
/// What the engine's stages call of each other (rxe's rxe_loc.h): the prototypes of
/// rx_dispatch.cc, requester.cc, responder.cc, completer.cc, retransmit.cc and the helpers of
/// verbs.cc, each taking the engine whose state it works on (Engine::Stages may read and write
/// every private member of Engine). Internal to dataplane/engine/: only its .cc files include
/// it; everyone else sees engine.h.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "dataplane/engine/engine.h"

namespace roce::engine {

struct Engine::Stages {
  // rx_dispatch.cc
  /// Engine::receive's work for a frame the fast path did not take.
  static void rx_general(Engine& eng, std::span<const std::uint8_t> frame, bool ip_checksum_ok);
  static void dispatch(Engine& eng, const wire::RxPkt& pkt);
  // requester.cc
  static void req_pump(Engine& eng, Qp& qp, std::uint32_t& budget);
  static bool req_local_op(Engine& eng, Qp& qp, SendWqe& w);
  static bool req_send_ud(Engine& eng, Qp& qp, SendWqe& w);
  static bool req_packet(Engine& eng, Qp& qp, SendWqe& w);
  static bool req_start_wqe(Engine& eng, Qp& qp, SendWqe& w);
  static bool req_check_sges(Engine& eng, Qp& qp, SendWqe& w);
  static const std::uint8_t* one_sge_addr(const Engine& eng, const Qp& qp, const SendWqe& w,
                                          std::uint64_t offset, std::size_t len);
  static std::size_t req_fields(Engine& eng, Qp& qp, SendWqe& w, wire::PacketFields& f, bool& last,
                                std::uint32_t& psn_span);
  static bool req_emit(Engine& eng, Qp& qp, SendWqe& w, std::span<std::uint8_t> slot,
                       const wire::PacketFields& f, std::size_t payload);
  static void req_fail(Engine& eng, Qp& qp, SendWqe& w, WcStatus status);
  /// An MR was invalidated (LOCAL_INV, a peer's SEND with invalidate): what it granted is
  /// checked again (MrTable::changed), and, as dereg_mr does, no queued zero-copy frame points
  /// into the memory it covered any more (the ring copies them in, the port its pending ones):
  /// once the invalidation completes the application may free that memory (review 22).
  static void mr_invalidated(Engine& eng, Mr& mr) {
    mr.state = MrState::kFree;
    eng.mrs_.changed();
    eng.tx_.flatten_all();
    if (eng.before_mr_release) eng.before_mr_release();
  }
  /// Prefetches the payload bytes [offset, offset + len) of `w` (a packet's worth, read by the
  /// next gather or ICRC: with many QPs each message's buffer is elsewhere in memory).
  static void prefetch_payload(const Engine& eng, const Qp& qp, const SendWqe& w,
                               std::uint64_t offset, std::size_t len);
  static std::size_t gather(Engine& eng, Qp& qp, const SendWqe& w, std::uint64_t offset,
                            std::uint8_t* dst, std::size_t len, WcStatus& err);
  /// The pieces of a WQE's payload for zero-copy transmit; 0 when it must be copied.
  static std::size_t gather_ext(Engine& eng, Qp& qp, const SendWqe& w, std::uint64_t offset,
                                std::size_t len, TxSeg* out);
  /// Whether a payload of `len` bytes of a frame like `s` goes out zero-copy.
  static bool zero_copy_ok(const Engine& eng, const wire::FrameSpec& s, std::size_t len) {
    return eng.tx_zero_copy_min_ != 0 && len >= eng.tx_zero_copy_min_ &&
           s.ip_version == wire::IpVersion::kV4;
  }
  static bool zero_copy_ok(const Engine& eng, const Qp& qp, std::size_t len) {
    return zero_copy_ok(eng, qp.tx, len);
  }
  /// Commits a frame whose headers are in `slot` (`hdr` bytes) and whose payload is `ext`.
  static void tx_commit_ext(Engine& eng, const wire::FrameSpec& s, std::span<std::uint8_t> slot,
                            std::size_t hdr, std::span<const TxSeg> ext);
  /// tx_commit_ext's work, the ICRC from the path template `t` or else from `s`.
  static void tx_commit_pieces(Engine& eng, const wire::PathTemplate* t, const wire::FrameSpec* s,
                               std::span<std::uint8_t> slot, std::size_t hdr,
                               std::span<const TxSeg> ext);
  /// A packet of a QP being written into a TX slot. Its headers come from the QP's path
  /// template when the template covers the path and the opcode (the hot path: SEND, WRITE,
  /// READ request, ACK, READ response over IPv4), else from a FrameSpec (`spec`: the engine's
  /// scratch, one packet at a time).
  struct TxPacket {
    std::span<std::uint8_t> slot;
    std::size_t hdr = 0;  ///< 0: the headers could not be written
    /// The slow path's headers (tx_spec_), null on the template's path. (An optional
    /// FrameSpec here cost 31 instructions per packet just to construct empty.)
    const wire::FrameSpec* spec = nullptr;
  };
  static TxPacket tx_begin(Engine& eng, const Qp& qp, std::span<std::uint8_t> slot,
                           const wire::PacketFields& f, std::size_t payload);
  /// The payload was copied to slot[hdr]: pad, ICRC, commit.
  static void tx_finish(Engine& eng, const Qp& qp, TxPacket& p, std::size_t payload);
  /// The payload is `ext`, in registered memory: pad and ICRC to the trailer, commit.
  static void tx_finish_ext(Engine& eng, const Qp& qp, TxPacket& p, std::span<const TxSeg> ext);
  static void schedule_send(Engine& eng, Qp& qp);
  /// schedule_send, and the QP's next turn before those of the send list (retransmit.cc).
  static void schedule_recovery(Engine& eng, Qp& qp);
  // fast_path.cc, fast_path.h (issue 33): the common case of each direction in one pass, with
  // the general path for anything else.
  /// Sends the one-packet SEND and WRITE messages at the head of an RC QP's send queue (new,
  /// not resent, one buffer or inline, an untagged IPv4 path; with selective repeat, WRITEs
  /// only), each frame written straight from its WQE; stops at the first WQE that is not one,
  /// leaving it to req_pump's loop. `wmax`: window_max(), computed here when 0. Returns
  /// whether it sent anything.
  static bool req_fast(Engine& eng, Qp& qp, std::uint32_t& budget, std::uint32_t& wmax);
  /// Sends the next packets of `w`, a SEND or WRITE of one SGE (with selective repeat, a
  /// WRITE), from its first packet (starting the WQE as req_start_wqe does) or from where it
  /// is, each written from the path template: zero-copy (payloads of at least
  /// tx_zero_copy_min_ bytes, the ICRC over the payload where it is) or copied. Stops where
  /// req_packet would do anything else (the window, the ring, a resend, a range no longer
  /// held). Returns whether it sent anything.
  static bool req_fast_zc(Engine& eng, Qp& qp, SendWqe& w, std::uint32_t& budget,
                          std::uint32_t& wmax);
  /// Takes a received frame that is the next in-order WRITE Only of an RC QP armed for it
  /// (Qp::rx_expect), with every check the general path makes; false (nothing changed) for
  /// anything else, which then takes the general path.
  static bool rx_fast(Engine& eng, std::span<const std::uint8_t> frame, bool ip_checksum_ok);
  /// rx_fast for a frame that is no WRITE Only (its expected header checked by the caller
  /// through Qp::rx_expect): a WRITE First, Middle or Last, the next in-order packet of a
  /// go-back-N WRITE of several packets, First with its RETH, Middle and Last through the
  /// responder's running WRITE state (RespState::write_va, write_range). False (nothing
  /// changed) for anything else.
  static bool rx_fast_seq(Engine& eng, Qp& qp, std::span<const std::uint8_t> frame,
                          bool ip_checksum_ok);
  // responder.cc
  /// A responder step's outcome: go on to the next step, or the packet has been dealt with.
  enum class Step : std::uint8_t { kContinue, kDone };
  static void resp_on_request(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static Step resp_check_psn(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static Step resp_check_op_seq(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static Step resp_check_op_valid(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static Step resp_get_recv_wqe(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static Step resp_execute_send(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static Step resp_execute_write(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static void resp_execute_read(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static void resp_execute_atomic(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static void resp_acknowledge(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static int resp_claim_resource(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static Step resp_error(Engine& eng, Qp& qp, const wire::RxPkt& pkt, wire::NakCode code);
  static Step resp_fail_recv(Engine& eng, Qp& qp, const wire::RxPkt& pkt, WcStatus st,
                             wire::NakCode code);
  static void resp_on_ud(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static void resp_duplicate(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static bool resp_nak(Engine& eng, Qp& qp, wire::Syndrome syn, wire::Psn psn, bool to_error);
  /// Sends (or queues behind READ responses) an ACK/NAK; false when the transmit ring had no
  /// slot for it and nothing was sent or queued.
  static bool resp_emit(Engine& eng, Qp& qp, wire::Syndrome syn, wire::Psn psn);
  static void resp_emit_atomic_ack(Engine& eng, Qp& qp, std::uint32_t res_idx);
  static void resp_schedule(Engine& eng, Qp& qp);
  static bool resp_ack_now(Engine& eng, Qp& qp, wire::Psn psn);
  static void resp_flush_acks(Engine& eng);
  static void resp_read_pump(Engine& eng, Qp& qp, std::uint32_t& budget);
  static bool resp_scatter(Engine& eng, Qp& qp, const RecvWqe& r, std::uint64_t offset,
                           const std::uint8_t* src, std::size_t len);
  static void resp_complete_recv(Engine& eng, Qp& qp, const wire::RxPkt& pkt,
                                 std::uint32_t byte_len);
  /// The responder's receive WQE handling, for sr_msg.cc: take the next WQE (copying its
  /// SGEs), give it back when its message is complete; and the end of an in-order packet
  /// (ePSN, the coalesced ACK, what selective repeat had placed past it).
  static void resp_take_recv(Qp& qp, RecvQueue& q);
  static bool resp_release_recv(Qp& qp, std::uint64_t used, bool ok);
  static void resp_step_in_order(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  // completer.cc
  static void comp_on_response(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static void comp_on_ack(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static void comp_on_atomic_ack(Engine& eng, Qp& qp, SendWqe& w, const wire::RxPkt& pkt);
  static void comp_on_read_response(Engine& eng, Qp& qp, SendWqe& w, const wire::RxPkt& pkt);
  static bool comp_implied_ack(Engine& eng, Qp& qp, wire::Psn upto);
  static void comp_advance(Engine& eng, Qp& qp, wire::Psn upto);
  static void comp_wqe_done(Engine& eng, Qp& qp, SendWqe& w, WcStatus status);
  static void comp_retire(Engine& eng, Qp& qp);
  static void comp_progress(Engine& eng, Qp& qp);
  // retransmit.cc
  static void order_retry(Engine& eng, Qp& qp, wire::Psn from, bool count_retry);
  static void do_retry(Engine& eng, Qp& qp);
  static void arm_retransmit(Engine& eng, Qp& qp);
  static void run_timers(Engine& eng);
  static void fire_timers(Engine& eng, Qp& qp);
  static void track_timer(Engine& eng, Qp& qp);
  static void arm_probe(Engine& eng, Qp& qp);
  static void on_loss(Engine& eng, Qp& qp);
  static bool send_probe(Engine& eng, Qp& qp);
  /// Selective READ retry: response packets of `w` below `upto` (an index) that neither
  /// arrived nor were asked for again are lost; a re-request for them is due.
  static void read_gap(Engine& eng, Qp& qp, SendWqe& w, std::uint32_t upto);
  static void read_ask_again(Engine& eng, Qp& qp, SendWqe& w, std::uint32_t to, bool force);
  /// Sends the READ re-requests that are due (at most `budget`).
  static void send_read_rereqs(Engine& eng, Qp& qp, std::uint32_t& budget);
  static void read_rereq_answered(Engine& eng, Qp& qp, SendWqe& w);
  static bool send_read_rereq(Engine& eng, Qp& qp, SendWqe& w, std::uint32_t& budget);
  static bool read_rerequest(Engine& eng, Qp& qp, SendWqe& w, std::uint32_t from, std::uint32_t to);
  // Selective repeat (SrState): the responder places a WRITE Only past a gap (false: not
  // placeable, the caller goes on as go-back-N), moves ePSN over what it placed, reports a
  // gap; the requester queues the PSNs a SACK names and sends them again.
  static bool sr_keep(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static void sr_advance(Engine& eng, Qp& qp);
  static void sr_report(Engine& eng, Qp& qp);
  static void sr_emit_sack(Engine& eng, Qp& qp, wire::Psn from, wire::Psn to);
  static void comp_on_sack(Engine& eng, Qp& qp, wire::Psn from, wire::Psn to);
  static void sr_resend(Engine& eng, Qp& qp, std::uint32_t& budget);
  static void sr_probe_answer(Engine& eng, Qp& qp);
  /// The bookkeeping of a packet placed past ePSN (its bit, the reorder window).
  static void sr_kept(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  // sr_msg.cc: selective repeat for SEND and WRITE with immediate (wire/srh.h). Requester: the
  // message index of a WQE (within the window of messages), each packet's SR header (the
  // opcode: SrState::opcode_for, in req_fields).
  /// False: SrState::kMsgs messages are under way, `w` waits (nothing is failed).
  static bool sr_start_wqe(Qp& qp, SendWqe& w);
  static bool sr_emit(Engine& eng, Qp& qp, SendWqe& w, std::span<std::uint8_t> slot,
                      const wire::PacketFields& f, std::size_t payload);
  // Responder: a packet past ePSN (false: not placed), the packet at ePSN, ePSN reaching a
  // placed packet (kStop: it stays there), a message's completion and its failure.
  static bool sr_msg_keep(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  static void sr_msg_in_order(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  enum class SrStep : std::uint8_t { kStep, kStop, kDead };
  static SrStep sr_msg_step(Engine& eng, Qp& qp, wire::Psn q);
  static bool sr_msg_done(Engine& eng, Qp& qp, SrState::RecvMsg& r, wire::Psn psn);
  static void sr_msg_fail(Engine& eng, Qp& qp, wire::Psn psn, WcStatus st, wire::NakCode code);
  static void grow_window(Engine& eng, Qp& qp);
  /// The QP's full window in PSNs: max_inflight_psns, capped by max_inflight_bytes.
  static std::uint32_t window_max(const Engine& eng, const Qp& qp);
  static void rtt_sample(Engine& eng, Qp& qp);
  /// A selective-repeat QP's bandwidth-delay cap (SrState::bdp_psns) from the configuration
  /// and the engine's smallest round trip, and the AckReq cadence that keeps it moving.
  static void sr_bdp_refresh(Engine& eng, Qp& qp);
  // congestion.cc
  /// Notification point: `pkt`, received on connected QP `qp`, carries CE: count it and send
  /// the peer's QP a CNP unless one went out within cnp_interval_ns.
  static void cc_on_ce(Engine& eng, Qp& qp, const wire::RxPkt& pkt);
  /// Reaction point: a CNP for `qp` arrived.
  static void cc_on_cnp(Engine& eng, Qp& qp);
  /// A CNP refused: cnp_ignored and the counter of its reason (kCnpIgnored*).
  static void cc_ignore_cnp(Engine& eng, Counter why);
  /// A round-trip sample of `rtt_ns` for `qp` (the delay-based algorithm).
  static void cc_on_rtt(Engine& eng, Qp& qp, std::uint64_t rtt_ns);
  /// Pacing, before the scheduler sends packets of `qp`: false when the QP is over its rate
  /// (it is parked until its next send time and must leave the send list); otherwise `budget`
  /// is cut to what the schedule allows now.
  static bool cc_admit(Engine& eng, Qp& qp, std::uint32_t& budget);
  /// The same for the QP's READ responses (and what queues behind them), before the scheduler
  /// sends them: a READ's data sender is its responder, so they take the QP's rate too (one
  /// rate limiter per QP, as an RNIC's); false: parked, the QP must leave the READ list.
  static bool cc_admit_responses(Engine& eng, Qp& qp, std::uint32_t& budget);
  /// The shared part of both: the QP's next send time against now.
  static bool pace(Engine& eng, Qp& qp, std::uint32_t& budget);
  /// Pacing, after: `bytes` (on the wire) of `qp` were sent.
  static void cc_sent(Engine& eng, Qp& qp, std::uint64_t bytes);
  /// Puts the parked QPs whose send time has come back on the send list, and on the READ list
  /// those with responses waiting.
  static void cc_release(Engine& eng);
  /// A QP enters RTS: its algorithm starts at the maximum rate.
  static void cc_start(Engine& eng, Qp& qp);
  // verbs.cc
  static void qp_to_error(Engine& eng, Qp& qp, std::optional<WcStatus> head_status = std::nullopt);
  static void flush_recvs(Engine& eng, Qp& qp);
  static void build_tx_template(Engine& eng, Qp& qp);
  /// Ethernet and IP fields of a frame to `av` (IPv4 when its GID is IPv4-mapped).
  static wire::FrameSpec path_spec(const Engine& eng, const AddressVector& av);
  static void post_cqe(Engine& eng, Cq* cq, const Wc& wc);
  static void async_event(Engine& eng, const AsyncEvent& ev);
  /// A CQ overran: it stops, and every QP that completes into it goes to the error state.
  static void cq_overrun(Engine& eng, Cq* cq);
  // frame output
  // (inline, below: called once per packet)
  static std::span<std::uint8_t> tx_slot(Engine& eng, bool reserved_for_acks);
  static void tx_commit(Engine& eng, std::size_t len);
  static std::uint32_t pick_qp_index(Engine& eng);
};

// A request's acknowledgement, coalesced: sent at the end of the receive burst
// (resp_flush_acks), or moved on by a later one of the same QP (responder.cc, fast_path.h).
[[gnu::always_inline]] inline void defer_ack(Qp& qp, wire::Psn psn, std::vector<Qp*>& list) {
  if (!qp.resp.ack_pending || after(psn, qp.resp.ack_psn)) qp.resp.ack_psn = psn;
  qp.resp.ack_pending = true;
  if (!qp.in_ack_list) {
    qp.in_ack_list = true;
    list.push_back(&qp);
  }
}

inline std::span<std::uint8_t> Engine::Stages::tx_slot(Engine& eng, bool for_ack) {
  if (!for_ack && eng.tx_.free() <= kAckReserve) return {};
  auto s = eng.tx_.reserve();
  if (s.empty()) eng.stats_.inc(Counter::kTxRingFull);
  return s;
}

inline void Engine::Stages::tx_commit(Engine& eng, std::size_t len) {
  eng.tx_.commit(len);
  eng.stats_.inc(Counter::kTxFrames);
  eng.stats_.inc(Counter::kTxBytes, len);
}

}  // namespace roce::engine
