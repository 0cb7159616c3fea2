/// @file
/// The NAA's Stack (stack.h) on rdma-core: librdmacm for the connections, libibverbs for the
/// rest. With it the same NaaServer runs where rdma-core runs (an RNIC, Linux rxe): the
/// interop test drives such an NAA in the rxe VM with the appliance's host library.
#pragma once

#include <map>
#include <set>
#include <string>

#include "apps/naa/stack.h"

struct rdma_event_channel;
struct rdma_cm_id;
struct ibv_pd;
struct ibv_cq;

namespace roce::naa {

class IbverbsStack : public Stack {
 public:
  /// Throws std::runtime_error when librdmacm cannot start (no RDMA device).
  IbverbsStack();
  ~IbverbsStack() override;
  IbverbsStack(const IbverbsStack&) = delete;
  IbverbsStack& operator=(const IbverbsStack&) = delete;

  std::optional<Memory> alloc(std::uint64_t length) override;
  void free(const Memory& m) override;
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

 private:
  bool ensure_device(rdma_cm_id* id);
  ibv_pd* pd_for(ConnId c);
  void drain_events(std::vector<ConnEvent>* out);

  rdma_event_channel* ch_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  ibv_pd* pd_ = nullptr;  ///< the common PD: reg_mr(0, ...) and the active side's connections
  std::map<ConnId, ibv_pd*> pds_;  ///< a passive connection's own PD (its QP and its MRs)
  std::vector<ibv_pd*> retired_;   ///< PDs of connections gone, MRs still registered
  std::set<ConnId> active_;        ///< connections this side made (connect)
  /// One CQ for every connection: each QP may fill it with as many completions as it has
  /// entries (a QP in error flushes them all), so prepare() refuses a QP whose entries no longer
  /// fit (the host is rejected) instead of letting many hosts overflow it (a CQ overflow is an
  /// asynchronous error that breaks every connection).
  ibv_cq* cq_ = nullptr;
  std::uint64_t cq_depth_ = 0, cq_used_ = 0;
  std::map<ConnId, std::uint64_t> cq_share_;  ///< a connection's QP entries, counted in cq_used_
  std::map<ConnId, rdma_cm_id*> conns_;
  std::map<rdma_cm_id*, ConnId> by_id_;
  std::map<std::uint32_t, ConnId> by_qpn_;
  std::vector<ConnEvent> pending_;
  ConnId next_ = 1;
};

}  // namespace roce::naa
