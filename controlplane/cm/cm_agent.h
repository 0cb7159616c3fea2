/// @file
/// Binds the CM state machine (cm.h) to an engine: creates the GSI QP (QP1, UD, Q_Key
/// 0x80010000), feeds the MADs it receives to the Cm with the sender's GID taken from the GRH,
/// sends the Cm's MADs as UD SENDs to the peer's QP1, and applies the Cm's QP transitions to the
/// RC/UC QP bound to each connection. Control path only; call poll() from the thread that owns
/// the engine.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "controlplane/cm/cm.h"
#include "dataplane/engine/engine.h"

namespace roce::cm {

/// Where selective repeat's message indices start on a connection (engine::SrIndexBase), from
/// the two comm IDs, which both ends hold after the REQ/REP exchange and an off-path host cannot
/// guess (Cm::new_id draws them from a keyed permutation): each end's `tx` is the other's `rx`.
/// An on-path observer of the exchange learns them, as it learns every index from the packets.
engine::SrIndexBase sr_index_base(std::uint32_t local_comm_id, std::uint32_t remote_comm_id);

struct CmAgentConfig {
  CmConfig cm;
  /// MAD receive buffers kept posted on QP1: a burst of MADs beyond them between two polls is
  /// lost (UD), and waits for its retransmission (a REQ's 4.6 s). librdmacm's cmtime sends a
  /// REQ, then a DREQ, per connection at once for hundreds of them.
  std::uint32_t recv_depth = 512;
  /// QP1's send queue and send CQ; MADs beyond it wait in the agent for its completions.
  std::uint32_t send_depth = 64;
  /// Access flags given to connected QPs on their way to INIT.
  std::uint32_t qp_access = engine::kAccessLocalWrite | engine::kAccessRemoteWrite |
                            engine::kAccessRemoteRead | engine::kAccessRemoteAtomic;
  /// Selective repeat (docs/loss-recovery.md) allowed for the RC QPs this agent connects
  /// (roced's `transport: selective_repeat`). A QP gets it only when its owner asks (the ECE it
  /// gives connect() offers it, kEceSrOffer; the one it gives accept() accepts it,
  /// kEceSrAccept) and the peer agrees (ece_sr_on). Not allowed, the SR bits are taken out of
  /// what the REQ/REP announce. The agent adds no ECE of its own: an owner that gives none
  /// sends none.
  bool selective_repeat = false;
  /// Our GID in REQs; unset: ::ffff:IPv4 of the engine. Set it to the engine's IPv6 address
  /// to connect over IPv6.
  std::optional<Ipv6Addr> gid;
  /// Next-hop MAC of a peer GID (ARP/ND cache); nullopt: the MAD or transition fails.
  std::function<std::optional<wire::MacAddr>(const Ipv6Addr& gid)> resolve_mac;
  /// The owner's monotonic clock in ns (the one poll() is given). Unset: the time of the last
  /// poll(), so that a connect() before the first poll() arms its REQ timer at time 0 and the
  /// REQ is repeated at once.
  std::function<std::uint64_t()> clock;
};

class CmAgent {
 public:
  using EventFn = std::function<void(const CmEvent&)>;

  /// Creates QP1 on `eng`; throws std::runtime_error when the engine refuses.
  CmAgent(engine::Engine& eng, CmAgentConfig cfg, EventFn on_event);
  ~CmAgent();
  CmAgent(const CmAgent&) = delete;
  CmAgent& operator=(const CmAgent&) = delete;

  Cm& cm() { return *cm_; }
  const Cm& cm() const { return *cm_; }
  /// Our GID: CmAgentConfig::gid, or ::ffff:IPv4 of the engine.
  Ipv6Addr local_gid() const;

  /// Active side: sends a REQ for `qp` (RC or UC, in RESET or INIT, not busy()). Fills in the
  /// QPN, the transport and our GID; `p.peer` and `p.path.remote_gid` name the passive side.
  std::optional<ConnId> connect(engine::Qp* qp, ConnectParams p);
  /// Passive side: binds `qp` to the request and accepts it (QP to RTR and RTS, then REP);
  /// kInvalidParam for a busy() QP.
  CmStatus accept(ConnId id, engine::Qp* qp, AcceptParams p);
  /// Cm::reject, and the connection's QP binding dropped with it (an active connection's REQ
  /// given up: rdma_destroy_id of a connecting id).
  CmStatus reject(ConnId id, RejReason reason, std::span<const std::uint8_t> private_data = {});
  /// The QP bound to a connection, if any.
  engine::Qp* qp_of(ConnId id) const;
  /// Call before destroying a QP bound to a connection (rdma_destroy_qp): a connection still
  /// up is disconnected (QP to ERROR, DREQ), then every binding to `qp` is dropped, so that no
  /// later MAD (a repeated DREQ, a late REP) reaches the destroyed QP or a new QP the engine
  /// creates in its slot with the same QPN. The connection itself lives on in the CM (DREQ
  /// retransmission, timewait). Returns how many connections were bound to `qp`.
  std::size_t release(engine::Qp* qp);
  /// Connections with a QP bound.
  std::size_t bound() const { return qps_.size(); }
  /// Whether `qp` is bound to a connection not yet over (any state but timewait): connect()
  /// and accept() refuse it, one QP carries one connection.
  bool busy(const engine::Qp* qp) const;

  /// Receives the MADs waiting on QP1, runs the CM's timers, reposts receive buffers.
  void poll(std::uint64_t now_ns);
  /// The CM's next deadline in ns, if any.
  std::optional<std::uint64_t> next_deadline_ns() const;

  /// For a process about to exit, whose CM timers go with it: waits for the DREPs of the
  /// connections it disconnected, sending unanswered DREQs again every `every` (a lost DREQ
  /// would otherwise leave the peer's connection up, as nothing else tells it), for at most
  /// `budget`. `pump` runs the port once (frames in and out) and this agent's poll(). True when
  /// every DREQ was answered.
  bool drain(const std::function<void()>& pump,
             std::chrono::milliseconds budget = std::chrono::milliseconds(1000),
             std::chrono::milliseconds every = std::chrono::milliseconds(100));

  struct Stats {
    std::uint64_t mads_rx = 0, mads_tx = 0, rx_dropped = 0, tx_dropped = 0, qp_errors = 0;
    /// RC connections that reached RTR with selective repeat on (ece_sr_on), and with it off.
    std::uint64_t sr_connections = 0, gbn_connections = 0;
    std::uint64_t tx_queued = 0;  ///< MADs that waited for room in QP1's send queue
  };
  const Stats& stats() const { return stats_; }

 private:
  static constexpr std::size_t kGrhSize = 40;
  static constexpr std::size_t kRecvSlot = kGrhSize + kMadSize;

  /// At most this many MADs wait for room in QP1's send queue; beyond, they are dropped (the
  /// CM retransmits).
  static constexpr std::size_t kMaxTxBacklog = 4096;
  struct PendingMad {
    std::array<std::uint8_t, kMadSize> mad;
    MadAddr to;
  };

  void send(std::span<const std::uint8_t> mad, const MadAddr& to);
  /// Posts one MAD on QP1: false when the send queue is full (nothing done).
  bool post_mad(std::span<const std::uint8_t> mad, const MadAddr& to);
  bool modify(ConnId id, QpTransition t, const QpAttrs& a);
  void on_cm_event(const CmEvent& ev);
  bool post_recv(std::uint32_t slot);

  engine::Engine& eng_;
  CmAgentConfig cfg_;
  EventFn on_event_;
  engine::Pd* pd_ = nullptr;
  engine::Cq* scq_ = nullptr;
  engine::Cq* rcq_ = nullptr;
  engine::Qp* qp1_ = nullptr;
  engine::Mr* mr_ = nullptr;
  std::vector<std::uint8_t> rx_buf_;
  std::deque<PendingMad> tx_backlog_;  ///< in order, sent as QP1's send queue drains
  /// MADs posted whose completions poll() has not reaped yet: at most send_depth, so that the
  /// send CQ (send_depth deep) never overruns, even when the engine runs between two polls
  /// (an overrun would put QP1 in the error state for good).
  std::uint32_t tx_outstanding_ = 0;
  std::map<ConnId, engine::Qp*> qps_;
  std::uint64_t now_ns_ = 0;
  Stats stats_;
  std::unique_ptr<Cm> cm_;
};

}  // namespace roce::cm
