/// @file
/// Fabric (fabric.h) on the appliance's own engine, in-process: a DPDK port of its own
/// (net_memif or net_af_packet, no hugepages), the CM agent on QP1 for rdma_cm, one PD and one
/// CQ for every connection's RC QP. The link comes from a "key=value,..." string.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "apps/netfr/fabric.h"
#include "controlplane/cm/cm_agent.h"
#include "runtime/env.h"
#include "runtime/link.h"

namespace roce::netfr {

class EngineFabric : public Fabric {
 public:
  /// Throws std::runtime_error on a bad link.
  explicit EngineFabric(const runtime::LinkOptions& link);
  ~EngineFabric() override;

  std::optional<MrInfo> reg_mr(void* addr, std::uint64_t length) override;
  void dereg_mr(const MrInfo& mr) override;
  bool listen(std::uint16_t port) override;
  bool prepare(ConnId c, std::uint32_t send_depth, std::uint32_t recv_depth) override;
  bool accept(ConnId c, const std::vector<std::uint8_t>& private_data) override;
  void reject(ConnId c, const std::vector<std::uint8_t>& private_data) override;
  std::optional<ConnId> connect(const std::string& ipv4, std::uint16_t port,
                                std::uint32_t send_depth, std::uint32_t recv_depth,
                                const std::vector<std::uint8_t>& private_data) override;
  void disconnect(ConnId c) override;
  bool post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                 std::uint32_t lkey) override;
  bool post_send(ConnId c, std::uint64_t wr_id, bool write, const void* local, std::uint32_t length,
                 std::uint32_t lkey, std::uint64_t remote_addr, std::uint32_t rkey,
                 bool signaled) override;
  bool poll(std::vector<FabricEvent>& events, std::vector<FabricCompletion>& wcs) override;
  void idle(double seconds) override;
  std::string report() const override;

 private:
  struct Conn {
    cm::ConnId cm;
    engine::Qp* qp = nullptr;
    bool established = false;
    std::optional<wire::Ipv4Addr> peer;
  };
  void on_cm(const cm::CmEvent& e);
  engine::Qp* new_qp(std::uint32_t send_depth, std::uint32_t recv_depth);
  void release(Conn& c);

  std::unique_ptr<runtime::Env> env_;
  std::unique_ptr<cm::CmAgent> agent_;
  engine::Pd* pd_ = nullptr;
  engine::Cq* cq_ = nullptr;
  std::map<ConnId, Conn> conns_;
  std::map<std::uint32_t, ConnId> by_cm_;
  std::map<std::uint32_t, ConnId> by_qpn_;
  std::vector<FabricEvent> pending_;
  ConnId next_ = 1;
};

}  // namespace roce::netfr
