/// @file
/// Fabric (fabric.h) on a libroce Context and the connection layer (<roce/conn.h>): whichever
/// backend the Context has (its own engine in-process, a roced attached to, or the engine a
/// roced lends a hosted service), NetFR's connections are conn::Endpoint's and its memory the
/// Context's buffers (shared memory when attached).
#pragma once

#include <roce/client.h>
#include <roce/conn.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "apps/netfr/fabric.h"

namespace roce::netfr {

class ContextFabric : public Fabric {
 public:
  /// On `ctx`, which must outlive the fabric.
  explicit ContextFabric(client::Context& ctx);
  /// Owns `ctx`, and `keep` (what the Context stands on, e.g. an in-process port), destroyed
  /// in that order after the connections are drained.
  ContextFabric(std::unique_ptr<client::Context> ctx, std::shared_ptr<void> keep);
  ~ContextFabric() override;

  /// What report() adds (e.g. the in-process engine's counters).
  void set_report(std::function<std::string()> f) { report_ = std::move(f); }
  client::Context& context() { return ctx_; }

  std::optional<MrInfo> alloc_mr(std::uint64_t length, bool remote_write) override;
  std::optional<MrInfo> reg_memfd(int fd, void* addr, std::uint64_t length,
                                  bool remote_write) override;
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
  struct Reg {
    client::Buffer* buf = nullptr;
    client::Mr* mr = nullptr;
  };
  std::optional<MrInfo> reg(client::Buffer* b, void* addr, std::uint64_t length, bool remote_write);

  std::shared_ptr<void> keep_;  ///< destroyed last
  std::unique_ptr<client::Context> own_;
  client::Context& ctx_;
  std::unique_ptr<conn::Endpoint> ep_;
  std::map<std::uint64_t, Reg> regs_;
  std::uint64_t next_reg_ = 1;
  std::vector<conn::Event> events_;
  std::vector<conn::Completion> wcs_;
  std::function<std::string()> report_;
};

}  // namespace roce::netfr
