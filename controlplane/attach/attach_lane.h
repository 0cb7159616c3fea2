/// @file
/// The data path of attached clients on one lcore: a port::Poller that, at the start of every
/// poll-loop iteration, moves the work requests clients put in their QPs' shared send and
/// receive rings into the engine (post_send / post_recv / post_srq_recv), and the completions
/// of their CQs from the engine into the CQs' shared rings, signalling a CQ's eventfd only when
/// its client waits (armed). Everything here runs on the lcore that owns the engine; the
/// control thread (attach_server.cc) adds and removes entries with posted commands.
///
/// What a client writes is not trusted: entries are copied out of shared memory before they
/// are looked at, SGE counts are bounded, inline data and fast registration (which would make
/// the engine touch addresses no MR covers) are refused, and a ring whose index goes out of
/// range is "broken" and no longer read. Addresses in SGEs are the client's own: its MRs are
/// registered with those as I/O virtual addresses (Engine::reg_mr with an iova), so they go to
/// the engine as they are, and its key checks keep a client inside its own MRs.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "controlplane/attach/protocol.h"
#include "controlplane/cm/cm_session.h"
#include "dataplane/engine/engine.h"
#include "dataplane/port/poller.h"

namespace roce::attach {

/// A client's asynchronous event ring (one per client, on its lane).
struct LaneEvents {
  ShmProducer<EventEntry> ring;
  int event_fd = -1;
  std::uint64_t dropped = 0;  ///< the client did not read its events in time
  /// MACs of IPv4 peers the client's kNeighbour found, for its UD sends by GID (an address
  /// vector without MAC). The client's own (another client's lookups never fill it), at most
  /// kMaxUdNeighbours (the oldest gives way), charged to the client, gone with it.
  std::map<std::uint32_t, wire::MacAddr> ud_macs;
  std::deque<std::uint32_t> ud_order;  ///< ud_macs' keys, oldest first
  static constexpr std::size_t kMaxUdNeighbours = 4096;
  /// What an entry costs the client's max_memory (the map node and the order slot).
  static constexpr std::size_t kUdNeighbourCost = 64;
};

struct LaneCq {
  engine::Cq* cq = nullptr;
  std::uint32_t handle = 0;  ///< the client's name for it
  LaneEvents* events = nullptr;
  ShmProducer<CqEntry> ring;
  int event_fd = -1;        ///< made when the client first waits on the CQ (Op::kCqNotify)
  std::uint32_t depth = 0;  ///< the client's CQ depth
  /// Completions the lane made itself (a work request the engine refused) waiting for room:
  /// at most `depth` (reserved at creation), then the lane stops taking work requests whose
  /// completions go here until the client polls (back-pressure, as a full CQ).
  std::vector<engine::Wc> local;
};

struct LaneSrq;

struct LaneQp {
  engine::Qp* qp = nullptr;
  LaneEvents* events = nullptr;
  ShmConsumer<SendEntry> sq;
  ShmConsumer<RecvEntry> rq;  ///< not valid on an SRQ
  LaneCq* send_cq = nullptr;
  LaneCq* recv_cq = nullptr;
  LaneSrq* srq = nullptr;  ///< the SRQ it receives from, if any
};

struct LaneSrq {
  engine::Srq* srq = nullptr;
  ShmConsumer<RecvEntry> rq;
  /// Where refused receive requests complete: the receive CQ of a QP that uses the SRQ (set by
  /// the first, moved to another when that one goes, null while none does). A CQ only QPs
  /// hold may be destroyed once they are gone, as in rdma-core, so the SRQ never holds one.
  LaneCq* error_cq = nullptr;
};

/// A client's rdma_cm (kCmOpen): its session on the engine's CM hub and its event ring.
/// Events the ring has no room for wait in `backlog` (never dropped), charged to the client's
/// max_memory while they wait (`waiting_bytes`). A connect request that finds `backlog_limit`
/// events waiting there is refused instead (REJ, no resources), as a full listen backlog
/// refuses one, and the client's own cm_connect and cm_accept answer EAGAIN (backlog_full()):
/// the backlog then only grows by the last events of connections the client already has (at
/// most three each: request, established, disconnected), and those are bounded by its
/// max_cm_conns.
struct LaneCm {
  std::unique_ptr<cm::CmSession> session;
  ShmProducer<CmEventEntry> ring;
  int event_fd = -1;
  std::deque<CmEventEntry> backlog;
  std::size_t backlog_limit = 256;
  std::vector<std::uint32_t> refusing;  ///< connect requests to refuse (outside the CM's call)
  /// backlog's bytes (kWaitingCost each), kept by the lcore, read by the control thread.
  std::atomic<std::uint64_t> waiting_bytes{0};
  /// What an event waiting in the backlog costs its client (the entry and its deque slot).
  static constexpr std::uint64_t kWaitingCost = sizeof(CmEventEntry) + 8;
  /// No new connection of the client while this holds (lcore only).
  bool backlog_full() const { return !backlog.empty() && backlog.size() >= backlog_limit; }
};

struct LaneStats {
  std::uint64_t send_wrs = 0, recv_wrs = 0, completions = 0, wakeups = 0;
  // Rare (a client's mistakes), read by any thread (AttachServer::counts):
  std::atomic<std::uint64_t> refused_wrs{0};  ///< completed with an error by the lane (or
                                              ///< dropped: an SRQ no QP uses)
  std::atomic<std::uint64_t> broken_rings{0};
  std::uint64_t events = 0, events_dropped = 0;
};

class Lane : public port::Poller {
 public:
  explicit Lane(engine::Engine& e) : eng_(e) {}
  std::size_t poll(std::uint64_t now_ns) override;
  /// The engine's asynchronous event (Engine::on_async_event, on this lcore): to the event
  /// ring of the client that owns the QP or CQ; nothing when no client does.
  void on_async(const engine::AsyncEvent& ev);
  /// What Engine::on_async_event did before the lane took it (called after the lane).
  std::function<void(const engine::AsyncEvent&)> next_async;
  engine::Engine& engine() { return eng_; }
  // ---- lcore only (posted commands) ----
  void add(LaneQp* q) { qps_.push_back(q); }
  void add(LaneCq* c) { cqs_.push_back(c); }
  void add(LaneSrq* s) { srqs_.push_back(s); }
  /// Also moves the error CQ of q's SRQ to another QP's receive CQ when it was q's.
  void remove(LaneQp* q);
  /// Also clears the error CQ of any SRQ that names `c`.
  void remove(LaneCq* c);
  void remove(LaneSrq* s) { std::erase(srqs_, s); }
  void add(LaneCm* c) { cms_.push_back(c); }
  /// (Its waiting events leave the lane's count: they go with the client.)
  void remove(LaneCm* c);
  /// The engine's CM hub for clients' sessions (created at the first, with QP1). The lane
  /// keeps it from then on: a client that goes away leaves DREQs, their retransmissions and
  /// timewaits in the CM, which must outlive the last session (as the kernel's CM outlives a
  /// process), and QP1 keeps answering the port's MADs.
  std::shared_ptr<cm::CmHub> cm_hub();
  /// Lets the hub go (the attach server's end, on a stopped loop, before the engines go).
  void drop_cm_hub() { hub_.reset(); }
  /// A neighbour's MAC the control thread resolved (ARP on the port's first loop), for the
  /// CM's QP transitions on this lcore.
  void learn(wire::Ipv4Addr ip, wire::MacAddr mac) { macs_[ip.v] = mac; }
  /// A MAC the control thread found for `ip` at the client's kNeighbour, for its UD sends
  /// (LaneEvents::ud_macs). True when the table holds one more entry than before.
  static bool learn_ud(LaneEvents& c, wire::Ipv4Addr ip, wire::MacAddr mac);
  /// An event of `c`'s session into its ring (or its backlog).
  void push(LaneCm& c, const cm::SessionEvent& ev);
  /// The CM agent's configuration for this engine: set by the attach server.
  std::function<cm::CmAgentConfig()> cm_config;
  const LaneStats& stats() const { return stats_; }
  /// Connect requests refused because their client left too many CM events unread (read
  /// from any thread).
  std::uint64_t cm_refused() const { return cm_refused_.load(std::memory_order_relaxed); }
  /// Bytes of CM events waiting in the backlogs of this lane's clients (read from any thread).
  std::uint64_t cm_waiting_bytes() const { return cm_waiting_.load(std::memory_order_relaxed); }

 private:
  std::size_t drain_send(LaneQp& q);
  std::size_t drain_recv(ShmConsumer<RecvEntry>& ring, engine::Qp* qp, engine::Srq* srq,
                         LaneCq* cq);
  std::size_t deliver(LaneCq& c);
  std::size_t flush(LaneCm& c);
  /// Brings c.waiting_bytes (and the lane's sum) to c.backlog's size.
  void account(LaneCm& c);
  void refuse_requests(LaneCm& c);
  void refuse(LaneCq* cq, std::uint64_t wr_id, engine::WcOpcode op, std::uint32_t qpn);
  /// No room for another refused completion on `cq` (null: none is made, nothing is full).
  static bool full(const LaneCq* cq) { return cq != nullptr && cq->local.size() >= cq->depth; }
  engine::Engine& eng_;
  std::vector<LaneQp*> qps_;
  std::vector<LaneCq*> cqs_;
  std::vector<LaneSrq*> srqs_;
  std::vector<LaneCm*> cms_;
  std::shared_ptr<cm::CmHub> hub_;  ///< from the first cm_hub() on
  std::map<std::uint32_t, wire::MacAddr> macs_;
  /// The CM's MADs and timers want milliseconds, not every pass of the loop.
  static constexpr std::uint64_t kCmPollNs = 20'000;
  std::uint64_t last_cm_poll_ = 0;
  LaneStats stats_;
  std::atomic<std::uint64_t> cm_refused_{0};
  std::atomic<std::uint64_t> cm_waiting_{0};
};

}  // namespace roce::attach
