/// @file
/// The NAA's Stack (stack.h) on the appliance's own engine, in-process: a DPDK port of its own
/// (net_memif or net_af_packet, no hugepages) or a poll loop lent by roced, the CM agent on
/// QP1 for rdma_cm, one CQ shared by every connection's RC QP, and one PD per connection (its QP
/// and its MRs), so that no connection's rkey works on another.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "apps/naa/stack.h"
#include "controlplane/cm/cm_hub.h"
#include "runtime/env.h"
#include "runtime/link.h"

namespace roce::naa {

class EngineStack : public Stack {
 public:
  /// Own EAL, port, engine and poll loop (throws std::runtime_error on a bad link): a standalone
  /// process (roce-naa, the host library on the appliance's stack).
  explicit EngineStack(const runtime::LinkOptions& link);
  /// On a borrowed dataplane (roced's services).
  explicit EngineStack(runtime::Env& env);
  ~EngineStack() override;

  std::optional<MrInfo> reg_mr(ConnId c, void* addr, std::uint64_t length,
                               std::optional<std::uint64_t> iova) override;
  void dereg_mr(const MrInfo& mr) override;
  bool listen(std::uint16_t port) override;
  bool prepare(ConnId c, const QpSizes& s) override;
  bool accept(ConnId c) override;
  void reject(ConnId c) override;
  std::optional<ConnId> connect(const std::string& ipv4, std::uint16_t port,
                                const QpSizes& s) override;
  void disconnect(ConnId c) override;
  bool post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                 std::uint32_t lkey) override;
  bool post_send(ConnId c, const WorkRequest& wr) override;
  bool poll(std::vector<ConnEvent>& events, std::vector<Completion>& completions) override;
  void idle(double seconds) override;

  runtime::Env& env() { return *env_; }
  /// Retransmissions, RNR NAKs and injected drops, one line.
  std::string transport_report() const;
  /// Every non-zero engine counter, when NAAICE_ALL_COUNTERS is set.
  std::string all_counters() const;
  std::size_t connections() const { return conns_.size(); }
  /// Connect requests given up: the requester's address did not answer ARP (or too many
  /// waited at once).
  std::uint64_t unresolved() const { return unresolved_; }

  /// Connect requests from an address not in the neighbour cache wait this long for its ARP
  /// answer, at most kMaxResolving at once, without holding up the poll.
  static constexpr double kResolveSeconds = 5;
  static constexpr std::size_t kMaxResolving = 64;

 private:
  struct Conn {
    cm::ConnId cm;
    engine::Qp* qp = nullptr;
    bool established = false;
    std::optional<wire::Ipv4Addr> peer;
    engine::Pd* pd = nullptr;  ///< its own, made on first use
  };
  void init();
  void on_cm(const cm::CmEvent& e);
  engine::Qp* new_qp(engine::Pd* pd, const QpSizes& s);
  engine::Pd* pd_of(Conn& c);
  void release(Conn& c);
  /// Forgets connection `c`: its CM id goes with a REJ of `why`.
  void refuse(ConnId c, cm::RejReason why);
  void poll_resolving();
  /// Frees the PD of a connection that is gone once its last MR is deregistered.
  void retire_pd(engine::Pd* pd);

  std::unique_ptr<runtime::Env> own_env_;
  runtime::Env* env_ = nullptr;
  std::shared_ptr<cm::CmHub> hub_;
  cm::CmHub::Owner owner_ = 0;
  engine::Pd* pd_ = nullptr;  ///< reg_mr(0, ...): a stack with one connection (the host side)
  std::vector<engine::Pd*> retired_;  ///< PDs of connections gone, MRs still registered
  engine::Cq* cq_ = nullptr;
  std::map<ConnId, Conn> conns_;
  std::map<std::uint32_t, ConnId> by_cm_;   ///< cm::ConnId.v -> ours
  std::map<std::uint32_t, ConnId> by_qpn_;  ///< QPN -> ours
  std::vector<ConnEvent> pending_;
  struct Resolving {
    ConnId conn;
    wire::Ipv4Addr ip;
    std::uint64_t deadline_ns, next_arp_ns;
  };
  std::vector<Resolving> resolving_;  ///< connect requests waiting for their ARP answer
  std::uint64_t unresolved_ = 0;
  ConnId next_ = 1;
};

}  // namespace roce::naa
