/// @file
/// Queue pair state, split by the stage that writes it (rxe's qp->req, qp->comp, qp->resp):
///   ReqState   written by requester.cc (rewound by completer.cc when it orders a retry)
///   CompState  written by completer.cc and the retransmit timers
///   RespState  written by responder.cc
/// Everything a QP needs on the packet path is allocated when the QP is created.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <memory>
#include <vector>

#include "dataplane/engine/cc/qp_cc.h"
#include "dataplane/engine/cq.h"
#include "dataplane/engine/memory.h"
#include "dataplane/engine/recv_queue.h"
#include "dataplane/engine/verbs.h"
#include "dataplane/wire/fast_frame.h"
#include "dataplane/wire/path_template.h"
#include "dataplane/wire/roce_frame.h"

namespace roce::engine {

struct Srq;

enum class WqeState : std::uint8_t {
  kPosted,    ///< nothing sent yet
  kSending,   ///< some packets sent
  kSent,      ///< every packet sent (a READ: its request), waiting for acknowledgement/responses
  kExecuted,  ///< finished (acknowledged, UD/UC send or local op); completes in post order
  kFailed,    ///< a local error stopped it; completes with `status` when its turn comes
  kDone,      ///< finished; completion written if signaled
};

/// A send queue entry. Laid out for the requester's and the completer's path of a SEND or
/// WRITE: what they read and write per packet sits in the first two cache lines (the entry is
/// aligned to them), the fields of READs, atomics, UD and local operations after. With 10,000
/// QPs each WQE read is a miss; the 200-byte entry it was touched up to four lines.
struct alignas(64) SendWqe {
  // --- copied from the work request by post_send (the SEND/WRITE path's first) ---
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  // --- progress, owned by requester and completer ---
  WqeState state = WqeState::kPosted;
  bool is_inline = false;
  WcStatus status = WcStatus::kSuccess;  ///< kFailed: the error to report
  std::uint32_t flags = 0;
  std::uint32_t num_sge = 0;  ///< 0 with inline data
  std::uint32_t npkts = 0;
  std::uint64_t length = 0;  ///< total bytes of the message
  std::uint64_t sent = 0;    ///< bytes packetized (SEND/WRITE)
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t imm = 0;
  wire::Psn first_psn;
  wire::Psn last_psn;
  CheckedRange sge_range;  ///< a one-SGE WQE: its SGE, checked at the WQE's first packet
  std::uint32_t inv_rkey = 0;
  union {
    /// Response packets below this index have arrived or have been asked for again since they
    /// went missing: a gap below it is not reported twice.
    std::uint32_t read_asked = 0;
    /// Selective repeat, a SEND or WRITE with immediate: its message index (SrState::tx_msg),
    /// the receive WQE it lands in at the peer (wire/srh.h). (A field of its own grew
    /// post_send's copy of a fresh WQE by 5 instructions.)
    std::uint32_t sr_msg;
  };
  std::uint64_t read_done = 0;  ///< READ response bytes received
  // --- READ, atomic, UD and local operations ---
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  std::uint64_t atomic_orig = 0;
  std::uint64_t read_resume = 0;  ///< read_done when the READ request was last (re)sent
  // Selective READ retry: responses past the first missing one are placed as they come, and
  // only the missing ones are asked for again (retransmit.cc, read_rerequest).
  std::uint64_t read_ooo = 0;  ///< bit i: response packet read_done_pkts + 1 + i has arrived
  // Every re-request starts at the READ's first missing response, and one is outstanding at
  // a time: rxe moves the start of a READ's resource to each replay's start and refuses a later
  // request that starts before it, so a response left behind could never be asked for again.
  std::uint32_t rereq_to = 0;    ///< a re-request is due for packets [first missing, rereq_to)
  std::uint32_t rereq_out = 0;   ///< the outstanding one asked up to here (0: none)
  std::uint32_t rereq_wait = 0;  ///< gaps seen meanwhile reach up to here (asked for after it)
  // UD: the address vector is in Qp::sq_ah (its non-zero defaults would make clearing every
  // WQE at post_send a field-by-field copy instead of a few vector stores)
  std::uint32_t ud_qpn = 0;
  std::uint32_t ud_qkey = 0;
  std::uint32_t reg_key = 0;  ///< REG_MR: key of the MR; new key = (key & ~0xFF) | variant
  std::uint32_t reg_access = 0;
  std::uint8_t reg_variant = 0;

  bool is_rd_atomic() const {
    return opcode == WrOpcode::kRead || opcode == WrOpcode::kCmpSwap ||
           opcode == WrOpcode::kFetchAdd;
  }
  /// READ: the PSN of the first response not yet received (where a retry must resume), with
  /// responses of 2^pmtu_shift bytes (Qp::pmtu_shift).
  wire::Psn read_resume_psn(unsigned pmtu_shift) const {
    return first_psn + static_cast<std::uint32_t>(read_done >> pmtu_shift);
  }
  /// READ: response packets received in order from the first (read_done in packets).
  std::uint32_t read_done_pkts(unsigned pmtu_shift) const {
    return static_cast<std::uint32_t>(read_done >> pmtu_shift);
  }
};

struct Srq {
  Pd* pd = nullptr;
  RecvQueue rq;
  std::uint32_t use_count = 0;
};

/// Responder resource of an RDMA READ or atomic, kept for duplicate requests (rxe resources).
struct RdAtomicRes {
  enum class Kind : std::uint8_t { kNone, kRead, kAtomic } kind = Kind::kNone;
  wire::Psn first_psn;
  wire::Psn last_psn;
  std::uint64_t va = 0;  ///< READ: start of the original request
  std::uint32_t rkey = 0;
  std::uint64_t length = 0;  ///< READ: original length
  std::uint64_t atomic_orig = 0;
  // READ responses still to send (a replay may restart them)
  bool active = false;
  wire::Psn next_psn;
  std::uint64_t next_offset = 0;
  std::uint64_t start_offset = 0;  ///< where the current (re)play started: its First packet
  std::uint64_t end_offset = 0;    ///< where the current (re)play ends
  std::uint8_t pending = 0;        ///< its kRead items in RespState::out (active: > 0)
  bool replay = false;  ///< only replays for duplicates left (the requester counts it no more)
  CheckedRange range;   ///< [va, va + length), checked when the READ arrived
};

struct ReqState {
  wire::Psn next_psn;               ///< PSN of the next request packet
  std::uint32_t next_wqe = 0;       ///< SQ index of the WQE being packetized
  std::uint32_t rd_atomic_out = 0;  ///< READ/atomic WQEs sent and not complete
  std::uint32_t pkts_since_ack_req = 0;
  wire::Psn high_psn;   ///< one past the highest PSN ever sent
  bool failed = false;  ///< a WQE failed locally: send nothing more
  bool sr = false;      ///< selective repeat negotiated (Qp::sr holds its state)
  KeyMemo sge_memo;     ///< the last one-SGE WQE's key check (req_check_sges)
};

struct CompState {
  wire::Psn psn;  ///< oldest PSN not yet acknowledged
  std::uint8_t retry_left = 7;
  std::uint8_t rnr_left = 7;
  std::uint64_t retrans_deadline = 0;  ///< ns; 0 = not armed
  std::uint64_t rnr_deadline = 0;      ///< ns; 0 = not waiting
  wire::Psn rnr_psn;
  bool retry_pending = false;  ///< a go-back-N was ordered and not yet carried out
  wire::Psn retry_psn;
  bool retried = false;  ///< a retry from `retried_psn` ran and no progress came since
  wire::Psn retried_psn;
  // Round-trip time of the path (RFC 6298's estimator), sampled on one packet at a time and
  // never on a retransmitted one (Karn), and the fast-retransmit probe it times.
  std::uint64_t srtt_ns = 0;  ///< 0: no sample yet
  std::uint64_t rttvar_ns = 0;
  bool rtt_timing = false;  ///< a sample is running on `rtt_psn`, sent at `rtt_start`
  wire::Psn rtt_psn;
  std::uint64_t rtt_start = 0;
  std::uint64_t probe_deadline = 0;  ///< ns; 0 = not armed
  std::uint8_t probe_backoff = 0;    ///< probes since the last progress
  /// A probe is out: the oldest unacknowledged packet was sent again, alone and with AckReq,
  /// and the requester holds everything after it until the answer shows what is missing.
  bool probing = false;
  bool probe_sent = false;
  wire::Psn probe_psn;  ///< the packet the probe sent again
  /// READs of the send queue with a selective re-request due (SendWqe::rereq_to != 0).
  std::uint32_t read_rereqs = 0;
  std::uint64_t probe_sent_at = 0;
  /// The probe timer is scaled by 2^pto_shift: raised when an answer shows the probed packet
  /// had arrived (the probe was early: queues longer than the estimate, or only an ACK lost),
  /// lowered when it had not (the probe found a loss). Under load, where a thousand QPs share
  /// one queue and round trips vary by milliseconds, this keeps probes from adding load.
  std::uint8_t pto_shift = 0;
  /// The requester window now (PSNs): EngineConfig::max_inflight_psns until a loss, then
  /// loss_window growing back (cwnd_frac counts acknowledged PSNs towards the next step).
  std::uint32_t cwnd = 0;  ///< 0: the maximum
  std::uint32_t cwnd_frac = 0;
  wire::Psn cwnd_psn;  ///< the oldest unacknowledged PSN when the window last grew
  /// When the requester last found the window full with packets to send (0: not waiting):
  /// counted as window_stalls and window_stall_ns.
  std::uint64_t stall_since = 0;
  /// The scheduler's turn (Engine::tx_turn_) that sent the oldest packet outstanding, at most:
  /// set by a turn that found nothing outstanding. A probe whose deadline comes while later
  /// turns (other QPs') were sent and none of them has been acknowledged waits: the path is
  /// behind, nothing shows a loss (retransmit.cc, fire_timers).
  std::uint32_t first_turn = 0;
  std::uint32_t last_turn = 0;  ///< the last turn that sent
  /// The earliest armed timer of this QP, 0 = none.
  std::uint64_t deadline() const {
    if (rnr_deadline) return rnr_deadline;
    if (probe_deadline && (!retrans_deadline || probe_deadline < retrans_deadline))
      return probe_deadline;
    return retrans_deadline;
  }
};

/// Laid out for the responder's path of a WRITE or SEND packet: the PSN, the coalesced ACK,
/// the out-queue's ends and the WRITE in progress first; the SEND's receive WQE, the READ
/// resources and the out-queue's 32 items after.
struct RespState {
  wire::Psn epsn;  ///< expected PSN
  wire::Msn msn;
  bool nak_sent = false;  ///< a PSN sequence error NAK was sent for the current gap
  enum class InMsg : std::uint8_t { kNone, kSend, kWrite } in_msg = InMsg::kNone;
  // coalesced acknowledgement, sent at the end of a receive burst
  bool ack_pending = false;
  wire::Psn ack_psn;
  std::uint32_t out_head = 0;  ///< `out`, below
  std::uint32_t out_tail = 0;
  std::uint32_t reads_queued = 0;  ///< kRead items in `out`
  std::uint32_t res_next = 0;      ///< `res`, below
  // WRITE in progress (write_va apart from write_remaining: side by side, the compiler made
  // their per-packet add and subtract one vector operation, 5 instructions more per packet)
  std::uint64_t write_va = 0;
  std::uint32_t write_rkey = 0;  ///< checked again on every packet of the message
  CheckedRange write_range;      ///< the whole message, checked at its First packet
  std::uint64_t write_remaining = 0;
  std::uint64_t write_total = 0;
  KeyMemo write_memo;  ///< the last WRITE's R_Key check (resp_execute_write)
  // SEND in progress
  // The receive WQE of the SEND in progress, with a copy of its SGEs: the queue slot may be
  // reused by post_recv while the message is still arriving.
  bool have_recv = false;
  std::int8_t recv_open = -1;  ///< the WQE is open multi-message buffer recv_q->open[i]
  RecvWqe recv;
  std::vector<Sge> recv_sges;
  RecvQueue* recv_q = nullptr;
  std::uint64_t recv_offset = 0;  ///< bytes of the current message so far
  std::uint64_t recv_base = 0;    ///< where the message starts in the WQE's buffer
  // READ/atomic resources (max_dest_rd_atomic of them)
  std::vector<RdAtomicRes> res;
  // Everything the responder sends goes out in PSN order (IBA 9.7.5.1.6): while READ responses
  // are still streaming, later ACKs, NAKs and atomic ACKs wait behind them in this queue;
  // otherwise they would implicitly acknowledge the unfinished READ at the requester.
  struct Item {
    enum class Kind : std::uint8_t { kRead, kAck, kAtomicAck } kind = Kind::kAck;
    std::uint8_t res = 0;                        ///< resource index (kRead, kAtomicAck)
    wire::Syndrome syn = wire::Syndrome::ack();  ///< kAck: ACK, RNR NAK or sequence NAK
    wire::Psn psn;
    /// kRead: the bytes this stream sends from `psn` (the READ, or the part a duplicate asks
    /// for again), whether it has begun (its cursor is in the resource), and whether it is a
    /// replay.
    std::uint32_t len = 0;
    bool started = false;
    bool replay = false;
  };
  std::array<Item, 32> out;
  /// New READs whose responses are still being sent: at most max_dest_rd_atomic (what the
  /// requester may have outstanding). A replay for a duplicate is not counted: its READ may
  /// have completed at the requester already (the responses were late, not lost), which may
  /// then rightly send the next one; replays are bounded by the resource slots.
  std::uint32_t reads_active() const {
    std::uint32_t n = 0;
    for (const RdAtomicRes& r : res) n += r.active && !r.replay;
    return n;
  }
  bool out_empty() const { return out_head == out_tail; }
};

/// Where the message indices of a selective-repeat QP's SENDs and WRITEs with immediate start
/// (wire/srh.h), one per direction: agreed by both ends when selective repeat is turned on
/// (the CM derives them from the two comm IDs, roce-perf announces the one it receives with)
/// and known to no one else. A packet of a SEND carries no key: the responder places it only
/// when its index is among the next SrState::kMsgs of this sequence, so a blind forger has to
/// guess a 32-bit value besides the PSN (docs/loss-recovery.md, "Against spoofed and forged
/// packets").
struct SrIndexBase {
  std::uint32_t tx = 0;  ///< index of the first message this end sends (the peer's rx)
  std::uint32_t rx = 0;  ///< index of the first message the peer sends (the peer's tx)
};

/// Selective repeat between two of our stacks (issue 32; Engine::set_selective_repeat,
/// responder.cc and retransmit.cc), allocated only on a QP both of whose ends announced it.
/// The requester sends every packet of an RDMA WRITE (without immediate) as a WRITE Only with
/// its own RETH, so the responder can place any of them out of order; it keeps a bitmap of
/// what it placed past ePSN and reports each new gap once (a SACK, kSackSyndrome); the
/// requester sends again only the PSNs a SACK names.
struct SrState {
  static constexpr std::uint32_t kBits = 1024;  ///< PSNs past ePSN the responder can keep
  /// The SACK: an Acknowledge whose AETH syndrome has IBA's reserved type (010), BTH PSN the
  /// first missing PSN of a gap and AETH MSN the PSN after it (which arrived). It implies no
  /// acknowledgement; ACKs carry that as before.
  static constexpr std::uint8_t kSackSyndrome = 0x40;
  // --- responder ---
  std::array<std::uint64_t, kBits / 64> kept{};  ///< bit psn % kBits: placed out of order
  std::uint32_t nkept = 0;
  wire::Psn rx_high;  ///< one past the highest PSN placed out of order (when nkept != 0)
  wire::Psn rx_told;  ///< PSNs below it (from ePSN) were placed or reported missing
  /// A PSN is reported missing once packets this far past it were placed (TCP's duplicate
  /// threshold, in PSNs): a packet only overtaken by a few later ones is not sent twice.
  static constexpr std::uint32_t kReorder = 3;
  /// ...and once the first packet placed past an unreported gap is this old (RACK's reorder
  /// window, fixed): a burst shuffled by a few microseconds of jitter is not sent twice.
  static constexpr std::uint64_t kReorderNs = 5'000;
  std::uint64_t gap_at = 0;  ///< when a packet was first placed past what is reported (0: none)
  wire::Psn gap_to;          ///< that packet: the missing PSNs below it are due at gap_at + window
  // --- requester: PSN ranges SACKs reported missing, still to send again ---
  struct Range {
    wire::Psn from;
    std::uint32_t n = 0;
  };
  std::array<Range, 32> resend{};
  /// PSNs below it (from the oldest unacknowledged) were already queued by a SACK: the
  /// responder reports each gap once, so a second report of them is not believed.
  wire::Psn sacked_to;
  std::uint32_t resend_head = 0;
  std::uint32_t resend_tail = 0;
  /// PSNs sent again and not yet acknowledged, with `high`: one past the highest PSN sent when
  /// they last were. A SACK names a packet that arrived; when that packet went out at least
  /// kRackMargin PSNs after the oldest unacknowledged one was last sent, and that one is still
  /// unacknowledged (the responder sends its cumulative ACK before every SACK), its last copy
  /// was lost, or the SACK that named it (RACK, RFC 8985, by PSN instead of time).
  struct Sent {
    wire::Psn psn;
    wire::Psn high;
  };
  std::array<Sent, 32> resent{};
  std::uint32_t nresent = 0;
  static constexpr std::uint32_t kRackMargin = 8;
  /// The probe (or the copy its answer asked for) is out: it sent `probe_psn` again at
  /// `probe_at`, when PSNs below `probe_high` had been sent. Its answer, an ACK that stops at
  /// a PSN below probe_high, shows that PSN lost too (it went out before the probe).
  bool probe_out = false;
  /// The bandwidth-delay cap on PSNs in flight (EngineConfig::sr_bdp_cap; sr_bdp_refresh at RTS
  /// and at each round-trip sample); 0: none.
  std::uint32_t bdp_psns = 0;
  /// The cap's floor: RACK's margin (a 4-packet cap found 1% loss by the probe alone and kept
  /// 0.84 of the lossless goodput in wire time, 8 kept 0.97; docs/loss-recovery.md).
  static constexpr std::uint32_t kBdpMin = kRackMargin;
  wire::Psn probe_psn;
  wire::Psn probe_high;
  std::uint64_t probe_at = 0;

  // --- SENDs and WRITE with immediate (sr_recv.cc; wire/srh.h) ---
  /// Messages that consume a receive WQE, by index, that may be under way at once: the
  /// responder keeps one record each (a packet further ahead is not placed), the requester
  /// starts no message this far past the oldest one not acknowledged.
  static constexpr std::uint32_t kMsgs = 64;
  /// A message some of whose packets were placed, and what its completion needs.
  struct RecvMsg {
    wire::Psn first;  ///< PSN of its first packet
    wire::Psn last;   ///< and of its last one
    std::uint32_t index = 0;
    std::uint32_t length = 0;
    std::uint32_t imm = 0;  ///< immediate data, or the R_Key to invalidate
    wire::Opcode op{};
    bool se = false;
    bool live = false;
  };
  std::array<RecvMsg, kMsgs> msgs{};                ///< message i at msgs[i % kMsgs]
  std::array<std::uint64_t, kBits / 64> msg_pkt{};  ///< bit psn % kBits: a kept packet of a message
  /// responder: index of the next message to complete (from SrIndexBase::rx)
  std::uint32_t rx_msg = 0;
  /// Message rx_msg has begun in PSN order (its first packet is behind ePSN): a SEND has taken
  /// its receive WQE (RespState::recv).
  bool rx_msg_open = false;
  std::uint32_t tx_msg = 0;    ///< requester: index of the next message to start (from tx)
  std::uint32_t tx_floor = 0;  ///< the oldest message not acknowledged (at most; lazily moved)
  SrIndexBase base;            ///< where rx_msg and tx_msg started (Engine::sr_index_base)

  /// The opcode of every packet of a message of `op` (a WRITE or a message that consumes a
  /// receive WQE) on a QP with selective repeat.
  static wire::Opcode opcode_for(WrOpcode op) {
    switch (op) {
      case WrOpcode::kSend:
        return wire::Opcode::kSrSend;
      case WrOpcode::kSendImm:
        return wire::Opcode::kSrSendImm;
      case WrOpcode::kSendInv:
        return wire::Opcode::kSrSendInv;
      case WrOpcode::kWriteImm:
        return wire::Opcode::kSrWriteImm;
      default:
        return wire::Opcode::kRcWriteOnly;
    }
  }

  static std::uint32_t bit(wire::Psn p) { return p.raw() & (kBits - 1); }
  bool test(wire::Psn p) const { return (kept[bit(p) / 64] >> (bit(p) % 64)) & 1; }
  void set(wire::Psn p) { kept[bit(p) / 64] |= std::uint64_t{1} << (bit(p) % 64); }
  void clear(wire::Psn p) {
    kept[bit(p) / 64] &= ~(std::uint64_t{1} << (bit(p) % 64));
    msg_pkt[bit(p) / 64] &= ~(std::uint64_t{1} << (bit(p) % 64));
  }
  bool test_msg(wire::Psn p) const { return (msg_pkt[bit(p) / 64] >> (bit(p) % 64)) & 1; }
  void set_msg(wire::Psn p) { msg_pkt[bit(p) / 64] |= std::uint64_t{1} << (bit(p) % 64); }
  bool resend_empty() const { return resend_head == resend_tail; }
  /// Some message record is live (packets placed by message index).
  friend bool sr_msgs_placed(const SrState& s) {
    for (const RecvMsg& r : s.msgs)
      if (r.live) return true;
    return false;
  }
  /// When the responder's report of missing PSNs is due (0: nothing waits).
  std::uint64_t report_at() const { return gap_at ? gap_at + kReorderNs : 0; }
};

struct alignas(64) Qp {
  // Laid out by path (issue 33, many QPs): with 10,000 QPs every visit to a QP misses the
  // cache, so what one path reads sits together and the scheduler can prefetch it (kHotBytes)
  // before the QP's turn. First the requester's and completer's block (the scheduler's flags,
  // send queue, ReqState, CompState, the header template, caps and attributes, the first line
  // of the congestion state with ack_req_every), then the responder's (RxExpect, the peer's
  // address, the receive queue's ends, RespState's first lines), then what no packet reads.
  std::uint32_t qpn = 0;
  QpType type = QpType::kRc;
  QpState state = QpState::kReset;
  bool sq_sig_all = false;
  bool in_send_list = false;
  bool in_ack_list = false;
  bool in_read_list = false;
  bool in_retry_list = false;
  /// What is left of a turn the full transmit ring cut short (scheduler.cc): the QP goes on
  /// first in the next run() with this many packets at most, then to the back (0: a new turn).
  std::uint8_t turn_left = 0;
  std::uint32_t run_gen = 0;   ///< the Engine::run() call run_sent counts for
  std::uint32_t run_sent = 0;  ///< packets sent in that call (EngineConfig::recovery_batch)
  // Send queue: monotonically increasing counters, index = counter % depth.
  std::uint32_t sq_head = 0;   ///< oldest WQE not done
  std::uint32_t sq_tail = 0;   ///< next free slot
  std::uint64_t timer_at = 0;  ///< when its timer wheel entry is due (0: none)
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  std::unique_ptr<SrState> sr;  ///< selective repeat, when negotiated (null: go-back-N)
  std::vector<SendWqe> sq;
  std::vector<Sge> sq_sges;  ///< cap.max_send_sge per WQE

  ReqState req;
  CompState comp;
  wire::PathTemplate hdr;  ///< the same as bytes, for the hot path (IPv4 only)
  QpCap cap;
  QpAttr attr;
  cc::QpCc cc;  ///< congestion control (congestion.cc); its first line holds ack_req_every

  // The responder's block, each part from a cache line of its own: RxExpect (one line), the
  // header template's first line (the peer's address, which every received packet but a fast
  // one is checked against), the receive queue's first line (its rings and ends), RespState's
  // first two.
  /// What the next request from the peer looks like up to its DestQP (Engine::Stages::rx_fast);
  /// unarmed but on an RC QP with an untagged IPv4 path, connected (build_tx_template).
  alignas(64) wire::RxExpect rx_expect;
  alignas(64) wire::FrameSpec tx;  ///< header template for this QP's packets
  alignas(64) RecvQueue rq;
  alignas(64) RespState resp;

  // What no packet of an RC WRITE or SEND reads.
  std::vector<std::uint8_t> sq_inline;  ///< cap.max_inline_data per WQE
  std::vector<AddressVector> sq_ah;     ///< UD: the address vector of each WQE (else empty)

  /// The bytes from the start of the struct that a requester's turn reads (the scheduler
  /// prefetches them for the QPs next in its list): up to and including the first cache line
  /// of `cc`.
  static constexpr std::size_t kHotBytes = 64 * 9;

  /// The send queue entry of counter `i`: `sq` has a power of two of entries, at least
  /// sq_depth(), so this is a mask, not a division.
  std::uint32_t sq_slot(std::uint32_t i) const {
    return i & static_cast<std::uint32_t>(sq.size() - 1);
  }
  SendWqe& wqe(std::uint32_t i) { return sq[sq_slot(i)]; }
  const SendWqe& wqe(std::uint32_t i) const { return sq[sq_slot(i)]; }
  std::uint32_t sq_depth() const { return cap.max_send_wr; }
  std::uint32_t pmtu() const { return mtu_bytes(attr.path_mtu); }
  /// log2 of pmtu(): packets of a message by shifting (a 64-bit division per packet is tens
  /// of cycles on some CPUs).
  unsigned pmtu_shift() const { return 7u + static_cast<unsigned>(attr.path_mtu); }
  RecvQueue& recv_queue() { return srq ? srq->rq : rq; }
};

}  // namespace roce::engine
