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
/// range is "broken" and no longer read.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "controlplane/attach/protocol.h"
#include "dataplane/engine/engine.h"
#include "dataplane/port/poller.h"

namespace roce::attach {

/// Whether the engine registers MRs with an I/O virtual address distinct from where it reads
/// (Engine::reg_mr(pd, host_addr, length, iova, access)). Without it (the temporary shim),
/// MRs are registered at roced's address, the IOVA a client is told is roced's, and the
/// lane translates the client's SGE addresses.
template <class E>
concept EngineHasIova = requires(E& e, engine::Pd* pd, void* p) {
  e.reg_mr(pd, p, std::uint64_t{}, std::uint64_t{}, std::uint32_t{});
};
inline constexpr bool kEngineIova = EngineHasIova<engine::Engine>;

/// Registers `length` bytes at roced's `host` as the client's `iova` (shim: at `host`).
template <class E = engine::Engine>
engine::Mr* reg_mr_iova(E& eng, engine::Pd* pd, void* host, std::uint64_t length,
                        std::uint64_t iova, std::uint32_t access) {
  if constexpr (EngineHasIova<E>)
    return eng.reg_mr(pd, host, length, iova, access);
  else
    return (void)iova, eng.reg_mr(pd, host, length, access);
}

/// Shim only: the client address range an MR's key covers and where roced maps it.
struct Xlate {
  std::uint64_t client = 0, host = 0, length = 0;
};
/// Per client, on its lane: key -> translation (empty with an IOVA engine).
struct LaneClient {
  std::unordered_map<std::uint32_t, Xlate> mrs;
};

struct LaneCq {
  engine::Cq* cq = nullptr;
  ShmProducer<CqEntry> ring;
  int event_fd = -1;
  /// Completions the lane made itself (a work request the engine refused) waiting for room.
  std::vector<engine::Wc> local;
};

struct LaneQp {
  engine::Qp* qp = nullptr;
  ShmConsumer<SendEntry> sq;
  ShmConsumer<RecvEntry> rq;  ///< not valid on an SRQ
  LaneClient* client = nullptr;
  LaneCq* send_cq = nullptr;
  LaneCq* recv_cq = nullptr;
};

struct LaneSrq {
  engine::Srq* srq = nullptr;
  ShmConsumer<RecvEntry> rq;
  LaneClient* client = nullptr;
  LaneCq* error_cq = nullptr;  ///< where refused receive requests complete (set by the first QP)
};

struct LaneStats {
  std::uint64_t send_wrs = 0, recv_wrs = 0, completions = 0, wakeups = 0;
  std::uint64_t refused_wrs = 0;  ///< completed with an error by the lane
  std::uint64_t broken_rings = 0;
};

class Lane : public port::Poller {
 public:
  explicit Lane(engine::Engine& e) : eng_(e) {}
  std::size_t poll(std::uint64_t now_ns) override;
  engine::Engine& engine() { return eng_; }
  // ---- lcore only (posted commands) ----
  void add(LaneQp* q) { qps_.push_back(q); }
  void add(LaneCq* c) { cqs_.push_back(c); }
  void add(LaneSrq* s) { srqs_.push_back(s); }
  void remove(LaneQp* q) { std::erase(qps_, q); }
  void remove(LaneCq* c) { std::erase(cqs_, c); }
  void remove(LaneSrq* s) { std::erase(srqs_, s); }
  const LaneStats& stats() const { return stats_; }

 private:
  std::size_t drain_send(LaneQp& q);
  std::size_t drain_recv(ShmConsumer<RecvEntry>& ring, LaneClient* client, engine::Qp* qp,
                         engine::Srq* srq, LaneCq* cq);
  std::size_t deliver(LaneCq& c);
  /// The engine's view of a client's SGEs (shim: translated to roced's addresses).
  void translate(const LaneClient* client, const engine::Sge* in, std::uint32_t n,
                 engine::Sge* out) const;
  void refuse(LaneCq* cq, std::uint64_t wr_id, engine::WcOpcode op, std::uint32_t qpn);
  engine::Engine& eng_;
  std::vector<LaneQp*> qps_;
  std::vector<LaneCq*> cqs_;
  std::vector<LaneSrq*> srqs_;
  LaneStats stats_;
};

}  // namespace roce::attach
