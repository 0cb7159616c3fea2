/// @file
/// The RC/UC/UD transport engine of one poll loop: the verbs-like API (control path) and the
/// three calls that drive it (dataplane): receive() a frame, run() at a time, drain_tx() the
/// frames it wants sent. Nothing here knows about DPDK; the port layer, the in-memory test wire
/// and an FPGA model all drive the engine through those three calls.
///
/// Stages, one file each (rxe's decomposition):
///   rx_dispatch.cc  parse, QPN lookup, request vs response
///   scheduler.cc    run(): timers, ACKs, then READ responses and send queues, round robin
///   requester.cc    SQ WQEs -> request packets
///   responder.cc    requests -> memory / receive queue, ACK/NAK, READ and atomic responses
///   completer.cc    ACK/NAK/responses -> completions, retry and RNR decisions
///   retransmit.cc   retransmit and RNR timers, go-back-N
///   verbs.cc        resources, QP state machine, post/poll
/// What the stages call of each other is in engine_loc.h (rxe's rxe_loc.h), internal to
/// dataplane/engine/: this header is the engine's surface, its private state included.
///
/// Threading: every call on one engine comes from the thread that owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "dataplane/engine/cc/config.h"
#include "dataplane/engine/cq.h"
#include "dataplane/engine/memory.h"
#include "dataplane/engine/qp.h"
#include "dataplane/engine/stats.h"
#include "dataplane/engine/timer_wheel.h"
#include "dataplane/engine/tx_ring.h"
#include "dataplane/engine/verbs.h"
#include "dataplane/engine/work_queue.h"
#include "dataplane/wire/roce_frame.h"

namespace roce::engine {

struct EngineConfig {
  wire::MacAddr mac;
  wire::Ipv4Addr ipv4;
  std::optional<wire::Ipv6Addr> ipv6;
  std::optional<std::uint16_t> vlan_id;
  std::uint32_t max_qps = 4096;
  std::uint32_t tx_slots = 512;
  std::uint32_t max_inflight_psns = 1024;  ///< requester window per QP (READ/atomic: max_rd_atomic)
  /// The same window in bytes: at most this / path MTU packets (1 MiB: 1024 at MTU 1024, 256
  /// at MTU 4096). What a peer must absorb in one burst is then the same at every MTU; a slow
  /// receiver (Linux rxe in a VM) dropped most of a 4 MiB burst at MTU 4096 and the go-back-N
  /// that followed resent a thousand packets.
  std::uint64_t max_inflight_bytes = 1 << 20;
  /// The window of a selective-repeat QP in bytes (also at most max_inflight_psns and the
  /// responder's bitmap, SrState::kBits PSNs): a loss there costs the lost packet only, and the
  /// window must cover the round trips a missing packet holds its oldest edge for
  /// (docs/loss-recovery.md).
  std::uint64_t sr_inflight_bytes = 4 << 20;
  /// IRN's bandwidth-delay cap on a selective-repeat QP's packets in flight (Mittal et al.,
  /// SIGCOMM 2018; docs/loss-recovery.md, "The bandwidth-delay cap"): at most this many bytes
  /// (in packets of the path MTU with their headers, at least SrState::kBdpMin = 8) besides
  /// sr_inflight_bytes.
  /// kSrBdpAuto: the port's line rate (congestion.line_rate_mbps) x the smallest round trip
  /// the engine has measured on any QP, none before the first sample or without a line rate;
  /// 0 (the default): off.
  static constexpr std::uint64_t kSrBdpAuto = ~std::uint64_t{0};
  std::uint64_t sr_bdp_cap = 0;
  /// After a loss (a go-back-N from a sequence NAK, a probe's answer or a timeout) the window
  /// drops to this, and grows back by one PSN per 8 acknowledged: on a lossy path a go-back-N
  /// then resends at most about this much, on a clean one the window stays at its maximum.
  std::uint32_t loss_window = 64;
  std::uint32_t ack_req_every = 16;  ///< AckReq at least this often within a message
  /// While a QP's window is reduced after a loss, run() sends at most this many of its packets
  /// per call. The poll loop then reads the acknowledgements (and sequence NAKs) that move the
  /// window on every few packets instead of after a batch of hundreds: the round trip, and with
  /// it what a go-back-N throws away, stays short. A clean QP sends in large batches.
  std::uint32_t recovery_batch = 4;
  /// Announce selective repeat in the CM's REQ/REP (ECE) and use it on the RC QPs whose peer
  /// announced it too (docs/loss-recovery.md): the CM agents on this engine read it.
  bool selective_repeat = false;
  Mtu max_mtu = Mtu::k4096;               ///< UD payload limit and largest path MTU accepted
  std::uint32_t max_mrs = 1u << 20;       ///< MRs at once (reg_mr/alloc_mr: ENOMEM beyond)
  std::uint32_t max_cq_depth = 1u << 22;  ///< largest CQ (create_cq: EINVAL beyond)
  std::uint32_t max_async_events = 1024;  ///< queued asynchronous events (oldest kept)
  std::uint64_t seed = 0;                 ///< 0: keys from std::random_device
  /// nullopt (the default): every QP gets a random free QPN (from the kernel's CSPRNG, or from
  /// `seed`), never one of the last max_qps/2 (at most 1024) destroyed while another is free:
  /// a restarted process does not reuse its predecessor's QPNs, which a peer's CM may still
  /// hold in timewait, and a peer cannot predict the next number. Set: QPNs are handed out
  /// cyclically from this index (QPN kFirstQpn + index), as rxe does; for reproducible tests.
  std::optional<std::uint32_t> first_qp_index;
  /// The lcore that owns this engine (one engine per poll loop). Its QPNs carry it in their
  /// top bits (lcore_of_qpn), so that any lcore can steer a received frame to the owner by
  /// its destination QPN alone. The GSI QP (QPN 1) belongs to lcore 0.
  std::uint32_t lcore = 0;
  /// Advertise end-to-end credits (posted receive WQEs) in every ACK's AETH (IBA 9.7.7.2);
  /// off: always "no credit information" (0x1F), as rxe does. QPs on an SRQ never advertise.
  bool advertise_credits = true;
  /// Fast retransmission (a tail-loss probe): besides IBA's local ACK timeout, which counts
  /// against retry_cnt, a probe timer runs from the measured round-trip time: max(2 srtt,
  /// srtt + 4 rttvar), at least `probe_min_ns`, doubling while unanswered, never beyond the
  /// ACK timeout. When it fires, the oldest unacknowledged packet is sent again, alone and with
  /// AckReq, without spending the retry budget; the ACK that answers it shows what is still
  /// missing, and only that is resent. It recovers a lost tail packet, a lost sequence NAK or a
  /// lost retransmission in microseconds instead of the ACK timeout's milliseconds. The peer
  /// sees a duplicate, which every responder handles (IBA 9.7.5.1.4). 0 turns it off.
  std::uint64_t probe_min_ns = 50'000;
  /// ECN marking, CNPs and the rate control of the requester (docs/congestion.md).
  cc::CongestionConfig congestion;
  /// The per-packet fast paths (issue 33; Engine::Stages::req_fast and rx_fast): a one-packet
  /// SEND/WRITE written straight from its WQE, an in-order WRITE Only received in one pass.
  /// Off, every packet takes the general path; the wire bytes and every effect are the same
  /// (tests run both and compare).
  bool fast_paths = true;
};

/// QPNs of lcore L are (L << kQpnLcoreShift) + kFirstQpn + n: up to 16 lcores, 2^20 - 17 QPs each.
constexpr unsigned kQpnLcoreShift = 20;
constexpr unsigned kMaxLcores = 1u << (24 - kQpnLcoreShift);
constexpr std::uint32_t lcore_of_qpn(std::uint32_t qpn) {
  return (qpn & 0xFFFFFF) >> kQpnLcoreShift;
}

class Engine {
 public:
  explicit Engine(const EngineConfig& cfg);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- verbs (control path; may allocate) ----
  Pd* alloc_pd();
  int dealloc_pd(Pd* pd);
  Mr* reg_mr(Pd* pd, void* addr, std::uint64_t length, std::uint32_t access);
  /// An MR whose I/O virtual address (what work requests, keys and peers name) is `iova`
  /// while the engine reaches the memory at `host_addr` (ibv_reg_mr_iova): an attached client
  /// registers its own addresses over memory the engine maps elsewhere.
  Mr* reg_mr(Pd* pd, void* host_addr, std::uint64_t length, std::uint64_t iova,
             std::uint32_t access);
  /// An MR for fast registration: no memory until a REG_MR work request registers it.
  Mr* alloc_mr(Pd* pd, std::uint64_t max_len);
  int dereg_mr(Mr* mr);
  /// ibv_rereg_mr in place: the MR takes `pd`, [iova, iova + length) reached at `host_addr`,
  /// and `access`, and keeps its key (peers hold the rkey). kErrInval for a fast-reg MR or the
  /// access or range reg_mr refuses. Queued zero-copy frames are made whole first.
  int rereg_mr(Mr* mr, Pd* pd, void* host_addr, std::uint64_t length, std::uint64_t iova,
               std::uint32_t access);
  Cq* create_cq(std::uint32_t depth);
  int destroy_cq(Cq* cq);
  Srq* create_srq(Pd* pd, std::uint32_t max_wr, std::uint32_t max_sge);
  int destroy_srq(Srq* srq);
  /// `qpn`: a fixed number (1 for the GSI QP); otherwise one is allocated.
  Qp* create_qp(Pd* pd, QpType type, Cq* send_cq, Cq* recv_cq, const QpCap& cap, Srq* srq = nullptr,
                bool sq_sig_all = false, std::optional<std::uint32_t> qpn = std::nullopt);
  int destroy_qp(Qp* qp);
  int modify_qp(Qp* qp, const QpAttr& attr, std::uint32_t mask);
  /// Selective repeat (issue 32, docs/congestion.md "Selective repeat"): RDMA WRITEs of `qp`
  /// go out as WRITE Only packets, each with its RETH, are placed out of order by the peer and
  /// sent again only where the peer's SACKs say. Only between two of our stacks: both ends must
  /// turn it on, each after learning that the other announced it (roce-perf's out-of-band QP
  /// exchange); a standard peer never sees it. RC, before traffic (before RTS, or in RTS with
  /// nothing posted or in flight); kErrInval otherwise. `base`: where the message indices of
  /// each direction start, which both ends must agree on and no one else know (SrIndexBase:
  /// the CM derives them from the comm IDs, cm::sr_index_base). Without it, both are drawn at
  /// random (the keys' generator): for one end alone, or a test that reads them back
  /// (sr_index_base) to play the peer.
  int set_selective_repeat(Qp* qp, bool on);
  int set_selective_repeat(Qp* qp, bool on, SrIndexBase base);
  /// The bases `qp` runs selective repeat with (set_selective_repeat); nullopt without it.
  std::optional<SrIndexBase> sr_index_base(const Qp* qp) const;
  int post_send(Qp* qp, const SendWr* wr, const SendWr** bad_wr);
  int post_recv(Qp* qp, const RecvWr* wr, const RecvWr** bad_wr);
  int post_srq_recv(Srq* srq, const RecvWr* wr, const RecvWr** bad_wr);
  int poll_cq(Cq* cq, int max, Wc* out) { return cq->poll(max, out); }
  /// The next asynchronous event (ibv_get_async_event without the wait); false when none.
  /// Events: a CQ overrun (the CQ and every QP on it stop: an RNIC cannot take back data it
  /// placed and acknowledged), a QP that went to the error state on its own (a fatal NAK, a
  /// retry budget spent, a local error), an SRQ QP's last WQE reached.
  bool get_async_event(AsyncEvent& ev);
  /// Called for each asynchronous event as it happens (on the engine's thread), besides the
  /// queue get_async_event() reads.
  std::function<void(const AsyncEvent&)> on_async_event;
  Qp* find_qp(std::uint32_t qpn) const {  // inline: once per received frame
    if (qpn == wire::Qpn::kGsi) return gsi_;
    const std::uint32_t i = qpn - first_qpn_;
    return i < cfg_.max_qps ? qps_[i].get() : nullptr;
  }
  std::size_t qp_count() const { return live_qps_; }
  std::size_t mr_count() const { return mrs_.size(); }

  // ---- dataplane drive ----
  /// Processes one received frame (Ethernet header first, no FCS).
  /// `ip_checksum_ok`: the NIC verified the IPv4 header checksum (RX offload), so the parser
  /// need not.
  void receive(std::span<const std::uint8_t> frame, std::uint64_t now_ns,
               bool ip_checksum_ok = false);
  /// The port computes the IPv4 header checksum of what we send (TX offload): frames leave
  /// it 0. Set by the poll loop that joins the engine to its port, before QPs are created.
  void set_tx_ip_checksum_offload(bool on) { tx_ip_checksum_offload_ = on; }
  /// Zero-copy transmit: the payload of a SEND, WRITE, UD datagram or READ response of at
  /// least `min_payload` bytes stays in registered memory (up to TxRing::kMaxExt pieces, IPv4
  /// only) and drain_tx_frames() hands it out in pieces; 0 (the default) copies every payload
  /// into the ring. Set by the poll loop of a port that can chain external buffers.
  void set_tx_zero_copy(std::uint32_t min_payload) { tx_zero_copy_min_ = min_payload; }
  std::uint32_t tx_zero_copy() const { return tx_zero_copy_min_; }
  /// Called by dereg_mr() before it returns, after the engine has copied every queued frame
  /// together: a port that still holds frames pointing into registered memory (queued behind
  /// a full TX ring) makes them whole, so that the application may free that memory.
  std::function<void()> before_mr_release;
  /// Runs timers, sends coalesced ACKs, and fills the transmit ring from the send queues and
  /// the pending READ responses.
  /// `rx_backlog`: received frames are still waiting (the port's last burst was full). Timers
  /// then wait a few calls: the acknowledgement a probe or timeout would give up on may be
  /// among those frames.
  void run(std::uint64_t now_ns, bool rx_backlog = false);
  /// Sends the coalesced ACKs now (run() does too): a loop that receives in several bursts
  /// calls it after each, so that an ACK does not wait for the whole batch to be processed.
  void flush_acks(std::uint64_t now_ns);
  /// Hands every queued frame to `f(std::span<const std::uint8_t>)`; returns how many.
  template <class F>
  std::size_t drain_tx(F&& f, std::size_t max = SIZE_MAX) {
    return tx_.drain(std::forward<F>(f), max);
  }
  /// The same, in pieces (TxFrame): head, payload in registered memory, trailer.
  template <class F>
  std::size_t drain_tx_frames(F&& f, std::size_t max = SIZE_MAX) {
    return tx_.drain_frames(std::forward<F>(f), max);
  }
  std::uint32_t tx_pending() const { return tx_.size(); }
  /// Earliest armed timer (retransmit, probe or RNR), in ns, or a little earlier; 0 when none
  /// is armed.
  std::uint64_t next_deadline() const {
    return next_pace_ == 0 || (next_timer_ != 0 && next_timer_ < next_pace_) ? next_timer_
                                                                             : next_pace_;
  }
  /// True when run() would have something to send (queued WQEs, READ responses, ACKs).
  /// Work requests wait to be sent (a post_send since the last run()).
  bool has_send_work() const { return !send_list_.empty(); }
  bool has_work() const { return !send_list_.empty() || !read_list_.empty() || !ack_list_.empty(); }
  /// True when run() at `now_ns` would do nothing: no work, no frame queued, no timer due.
  bool idle_at(std::uint64_t now_ns) const {
    return !has_work() && tx_.size() == 0 && (next_timer_ == 0 || now_ns < next_timer_) &&
           (next_pace_ == 0 || now_ns < next_pace_);
  }
  const Stats& stats() const { return stats_; }
  /// Counts what the port's loop does for the engine (self-delivery, port/self_delivery.h).
  void count(Counter k, std::uint64_t n = 1) { stats_.inc(k, n); }
  /// The smoothed round trip over every RC QP of this engine (request to acknowledgement), ns.
  std::uint64_t srtt_ns() const { return srtt_ns_; }
  /// The smallest round trip measured on any RC QP of this engine, ns (0: none yet).
  std::uint64_t min_rtt_ns() const { return min_rtt_ns_; }
  /// A selective-repeat QP's bandwidth-delay cap now, in PSNs (0: none; EngineConfig::sr_bdp_cap).
  std::uint32_t sr_bdp_psns(const Qp* qp) const;
  const EngineConfig& config() const { return cfg_; }
  /// The rate `qp` is paced at now, in Mb/s; 0 without congestion control.
  double cc_rate_mbps(const Qp& qp) const;
  /// A QP held below its maximum rate by congestion control (cc_rates).
  struct QpRate {
    std::uint32_t qpn = 0;
    std::uint32_t rate_mbps = 0;
  };
  /// The QPs congestion control holds below their maximum rate now, lowest rate first, at
  /// most out.size() of them; returns how many there are (the counters' cc_limited_qps_now).
  /// Walks every QP: for a metrics reader's period, not the data path.
  std::size_t cc_rates(std::span<QpRate> out) const;
  /// The QPNs of the connected RC QPs that run selective repeat (set_selective_repeat), the
  /// lowest first, at most out.size() of them; returns how many there are (sr_qps_now). For a
  /// metrics reader's period, as cc_rates.
  std::size_t sr_qps(std::span<std::uint32_t> out) const;

 private:
  /// What the stages (rx_dispatch, scheduler, requester, responder, completer, retransmit and
  /// verbs.cc) call of each other: dataplane/engine/engine_loc.h, rxe's rxe_loc.h.
  struct Stages;

  EngineConfig cfg_;
  std::uint64_t now_ = 0;
  Stats stats_;
  TxRing tx_;
  MrTable mrs_;
  std::vector<std::unique_ptr<Pd>> pds_;
  std::vector<std::unique_ptr<Cq>> cqs_;
  std::vector<std::unique_ptr<Srq>> srqs_;
  std::vector<std::unique_ptr<Qp>> qps_;  ///< index = qpn - first_qpn_
  std::uint32_t first_qpn_ = kFirstQpn;   ///< (lcore << kQpnLcoreShift) + kFirstQpn
  Qp* gsi_ = nullptr;
  std::size_t live_qps_ = 0;
  std::uint32_t next_qp_index_ = 0;  ///< first_qp_index: where the search for a free QPN starts
  KeyRandom qpn_rng_{cfg_.seed ? cfg_.seed ^ 0x9E3779B97F4A7C15ull : 0};
  std::vector<std::uint32_t> qp_freed_at_;  ///< per QPN index: qp_destroyed_ when it was freed
  std::uint32_t qp_destroyed_ = 0;
  bool tx_ip_checksum_offload_ = false;
  std::uint32_t tx_zero_copy_min_ = 0;
  std::uint32_t timers_deferred_ = 0;
  std::uint32_t run_gen_ = 0;  ///< counts run() calls (Qp::run_sent)  ///< consecutive run() calls
                               ///< that skipped due timers
  std::uint32_t next_pd_ = 1;
  std::uint16_t ip_id_ = 0;
  std::vector<AsyncEvent> async_;  ///< ring of max_async_events
  std::uint32_t async_head_ = 0, async_tail_ = 0;
  bool in_overrun_ = false;
  // work lists (QPs that need attention in run())
  WorkQueue<Qp> send_list_;  ///< FIFO, round robin (scheduler.cc)
  std::vector<Qp*> ack_list_;
  WorkQueue<Qp> read_list_;
  WorkQueue<Qp> retry_list_;  ///< QPs with loss recovery to send, served first (also in send_list_)
  TimerWheel<Qp> timers_;     ///< retransmit, probe and RNR deadlines (Qp::timer_at)
  std::uint64_t next_timer_ = 0;  ///< earliest armed deadline, 0 = none
  // Congestion control (congestion.cc): the reaction point's pacing parks a QP over its rate
  // on this wheel until its next send time (Qp::cc.park_at); both flags are false with
  // `algorithm: none`, and the scheduler's hook is then one predictable branch.
  bool cc_pacing_ = cfg_.congestion.algorithm != cc::Algorithm::kNone;
  bool cc_delay_ = cfg_.congestion.algorithm == cc::Algorithm::kDelay;
  TimerWheel<Qp> pace_;
  std::uint64_t next_pace_ = 0;  ///< earliest parked QP's send time, 0 = none
  wire::FrameSpec tx_spec_;      ///< TxPacket::spec of the packet being built (slow path)
  // Round-trip time over all QPs (same estimator): the probe timer of a QP without its own
  // sample starts from it, so that a thousand new QPs behind one long queue do not all probe
  // after the 1 ms guess.
  std::uint64_t srtt_ns_ = 0, rttvar_ns_ = 0;
  /// The smallest round trip measured on any QP (0: none yet): the base round trip of
  /// EngineConfig::sr_bdp_cap's kSrBdpAuto.
  std::uint64_t min_rtt_ns_ = 0;
  // The path's progress across QPs (the probe's RACK test, retransmit.cc fire_timers): each
  // turn of a QP that sent request packets takes the next number (CompState::first_turn);
  // acked_turn_ is the latest turn known to have had a packet acknowledged. Compared serially.
  std::uint32_t tx_turn_ = 0, acked_turn_ = 0;

 public:
  static constexpr std::uint32_t kFirstQpn = 0x11;
  static constexpr std::uint32_t kAckReserve = 32;  ///< TX slots kept for ACKs and NAKs
};

}  // namespace roce::engine
