/// @file
/// ONC RPC over TCP (RFC 5531 section 11: record marking) for the MOUNT protocol, which NFSv3
/// over RDMA still reaches over TCP (mountd does not listen on RDMA): the client's one blocking
/// call, and the appliance's non-blocking server.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "apps/nfs/call_worker.h"
#include "apps/nfs/nfs3.h"
#include "apps/nfs/nfs_server.h"
#include "dataplane/wire/bytes.h"

namespace roce::nfs {

/// MNT of `path` at `server` (IPv4) on TCP `port`; the root file handle, or nullopt and `err`.
std::optional<v3::Fh> mount_tcp(const std::string& server, std::uint16_t port,
                                const std::string& path, std::string& err);

/// One RPC call over a fresh TCP connection: sends `call` as one record, returns the reply's
/// record (fragments joined), or nullopt and `err`.
std::optional<std::vector<std::uint8_t>> rpc_tcp_call(const std::string& server, std::uint16_t port,
                                                      const std::vector<std::uint8_t>& call,
                                                      std::string& err);

/// The server side: RPC over TCP for the MOUNT program (or any handler), polled from the
/// appliance's loop, never blocking it. Each complete record is one call, run by the handler on
/// a worker thread (call_worker.h); its reply goes back as one record. A connection serves one
/// call at a time, in order: it reads nothing more while its call runs or its reply waits to be
/// written, so what it holds is bounded (max_record in, one reply out) and a client that does
/// not read its replies stops itself (TCP's window). Limits: max_clients connections (beyond,
/// one is closed as soon as accepted), max_record bytes per call (beyond, the connection is
/// closed), and idle_timeout_ms without progress (a byte read or written, a call answered)
/// closes a connection, whether it is silent, sends half a record, or reads nothing.
class RpcTcpServer {
 public:
  /// Runs on the worker thread.
  using Handler = std::function<void(const CallContext& ctx, std::span<const std::uint8_t> call,
                                     std::vector<std::uint8_t>& reply)>;
  /// `worker`: shared with the other servers of the service (it must outlive this server's
  /// polls); null: a worker of its own.
  explicit RpcTcpServer(Handler h, CallWorker* worker = nullptr);
  ~RpcTcpServer();
  RpcTcpServer(const RpcTcpServer&) = delete;
  RpcTcpServer& operator=(const RpcTcpServer&) = delete;
  /// Listens on `ipv4`:`port` (kernel TCP); false and `err` when it cannot.
  bool listen(const std::string& ipv4, std::uint16_t port, std::string& err);
  /// Accepts, reads and answers what is ready; never blocks. True when anything happened.
  bool poll();
  std::uint64_t calls() const { return calls_; }
  std::size_t clients() const { return clients_.size(); }
  struct Stats {
    std::uint64_t refused = 0;    ///< connections closed at accept: max_clients
    std::uint64_t oversized = 0;  ///< connections closed: a record beyond max_record
    std::uint64_t timed_out = 0;  ///< connections closed: idle_timeout_ms without progress
  };
  const Stats& stats() const { return st_; }
  std::size_t max_record = 65536;
  std::size_t max_clients = 16;
  std::uint32_t idle_timeout_ms = 30000;

 private:
  struct Job;
  struct Client {
    int fd = -1;
    wire::Ipv4Addr peer;  ///< the client's address: for the handler's authorization
    std::vector<std::uint8_t> in, record, out;
    std::size_t out_off = 0;
    bool busy = false;  ///< a call at the worker (queued, running, or waiting for room)
    std::shared_ptr<Job> job;
    std::uint64_t deadline_ns = 0;
  };
  bool serve(std::uint64_t id, Client& c, std::uint64_t now);
  void submit(std::uint64_t id, Client& c);
  void run_handler(Job& j);
  void finish(std::uint64_t id, const std::shared_ptr<Job>& j);
  void close(std::uint64_t id);
  Handler handler_;
  int fd_ = -1;
  std::map<std::uint64_t, Client> clients_;  ///< by our number (never reused)
  std::uint64_t next_id_ = 1;
  std::deque<std::uint64_t> waiting_;  ///< clients whose call waits for room at the worker
  std::uint64_t calls_ = 0;
  Stats st_;
  CallWorker* worker_ = nullptr;
  std::unique_ptr<CallWorker> own_worker_;  ///< last: joined first
};

}  // namespace roce::nfs
