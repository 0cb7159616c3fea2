/// @file
/// The NAA's Stack (stack.h) on libroce: a client::Context and the connection layer
/// (<roce/conn.h>), one PD per connection (its QP and its MRs, so that no connection's rkey
/// works on another), memory from the Context (shared with roced when attached). The same code
/// serves the three ways a Context comes: in-process on an engine of the process's own
/// (standalone.h), attached to a running roced (Context::attach), hosted in roced
/// (naa_service.h).
///
/// Connect requests from an address whose MAC is not known yet wait for the ARP answer here
/// (at most kMaxResolving at once, kResolveSeconds each) without holding up the poll, when the
/// Context's owner can tell (ConnStackOptions::neighbour, in-process and hosted). Attached,
/// roced resolves the requester when the server accepts.
#pragma once

#include <roce/client.h>
#include <roce/conn.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/naa/stack.h"

namespace roce::naa {

struct ConnStackOptions {
  /// True when `ip`'s MAC is known; otherwise asks ARP for it (not more often than every
  /// 200 ms). Unset: every address counts as known (the Context resolves).
  std::function<bool(Ipv4Addr)> neighbour;
  /// rdma_cm connections at once (conn::Options::max_connections).
  std::size_t max_connections = 1024;
  /// Each connection in a PD of its own, reg_mr(c, ...) there (the NAA: no host's rkey works
  /// on another host's connection); false: every MR and QP in one PD (a host's library).
  bool pd_per_connection = true;
};

class ConnStack : public Stack {
 public:
  /// The Context must outlive the stack.
  explicit ConnStack(client::Context& ctx, ConnStackOptions o = {});
  ~ConnStack() override;

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

  client::Context& context() { return ctx_; }
  std::size_t connections() const { return ep_.connections(); }
  /// Connect requests given up: the requester's address did not answer ARP (or too many
  /// waited at once).
  std::uint64_t unresolved() const { return unresolved_; }

  static constexpr double kResolveSeconds = 5;
  static constexpr std::size_t kMaxResolving = 64;

 private:
  /// Runs the endpoint once; what it reports waits in pending_ and done_.
  bool pump();
  void on_event(const conn::Event& e);
  void poll_resolving();

  client::Context& ctx_;
  ConnStackOptions o_;
  conn::Endpoint ep_;
  std::map<std::uint64_t, client::Buffer*> buffers_;  ///< Memory::handle -> its Buffer
  std::uint64_t next_buffer_ = 1;
  struct Resolving {
    ConnId conn;
    Ipv4Addr ip;
    std::uint64_t deadline_ns;
  };
  std::vector<Resolving> resolving_;  ///< connect requests waiting for their ARP answer
  std::uint64_t unresolved_ = 0;
  std::vector<ConnEvent> pending_;
  std::vector<Completion> done_;
  std::vector<conn::Event> ev_;
  std::vector<conn::Completion> wc_;
};

/// The NAA's Completion of the connection layer's.
Completion to_completion(const conn::Completion& c);

}  // namespace roce::naa
