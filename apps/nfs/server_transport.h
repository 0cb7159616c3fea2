/// @file
/// The responder side of RPC-over-RDMA v1 (RFC 8166) on the appliance's engine: accepts rdma_cm
/// connections (RFC 8797 private data both ways), receives calls, pulls read chunks with RDMA
/// READ and assembles the call, runs the handler, pushes a reduced payload into the client's
/// write chunk (or a reply larger than the client's inline size into its reply chunk) with RDMA
/// WRITE, then sends the reply, with SEND with invalidate when the client allowed it. Each
/// connection serves one call at a time, in order; the credits granted equal the receives posted.
/// Malformed transport headers are answered with RDMA_ERROR (ERR_VERS or ERR_CHUNK) and counted.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "apps/nfs/nfs_server.h"
#include "apps/nfs/rpcrdma.h"
#include "apps/perf/env.h"
#include "controlplane/cm/cm_hub.h"

namespace roce::nfs {

struct ServerOptions {
  std::uint32_t credits = 32;
  std::uint32_t inline_size = 4096;
  std::uint32_t max_io = 1u << 20;        ///< the largest read chunk or write chunk payload
  std::uint32_t max_reply = 256u * 1024;  ///< the largest reply sent through a reply chunk
};

struct ServerStats {
  std::uint64_t connections = 0, calls = 0, reads = 0, read_bytes = 0, writes = 0, write_bytes = 0,
                reply_chunks = 0, send_inv = 0, err_vers = 0, err_chunk = 0;
};

class RpcRdmaServer {
 public:
  using Handler = std::function<void(const CallContext& ctx, std::span<const std::uint8_t> call,
                                     RpcReply& reply)>;

  RpcRdmaServer(perf::Env& env, ServerOptions o, Handler h);
  ~RpcRdmaServer();
  RpcRdmaServer(const RpcRdmaServer&) = delete;
  RpcRdmaServer& operator=(const RpcRdmaServer&) = delete;

  /// Throws std::runtime_error when another owner of the engine's CM listens to `port`.
  void listen(std::uint16_t port);
  /// Runs the stack once; true when anything happened.
  bool poll();
  const ServerStats& stats() const { return st_; }
  std::size_t connections() const { return conns_.size(); }

 private:
  struct Conn;
  void on_cm(const cm::CmEvent& e);
  void on_wc(const engine::Wc& wc);
  void next(Conn& c);
  void assemble_and_run(Conn& c);
  void send_error(Conn& c, std::uint32_t xid, rdma::ErrorCode code);
  void release(Conn& c);

  perf::Env& env_;
  ServerOptions opt_;
  Handler handler_;
  std::shared_ptr<cm::CmHub> hub_;
  cm::CmHub::Owner owner_ = 0;
  engine::Pd* pd_ = nullptr;
  engine::Cq* cq_ = nullptr;
  std::map<std::uint32_t, std::unique_ptr<Conn>> conns_;  ///< by our number
  std::map<std::uint32_t, std::uint32_t> by_cm_, by_qpn_;
  std::uint32_t next_id_ = 1;
  ServerStats st_;
};

}  // namespace roce::nfs
