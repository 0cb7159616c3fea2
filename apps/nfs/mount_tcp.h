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
/// not read its replies stops itself (TCP's window).
///
/// Limits: max_record bytes per call (beyond, the connection is closed). Deadlines that progress
/// does not move: from the moment a connection is idle (accepted, or its last reply written) it
/// has idle_timeout_ms to deliver a whole record, and once its reply is ready, idle_timeout_ms to
/// take it; beyond, it is closed (a byte now and then buys nothing). The call's time at the
/// worker is ours and does not count. max_per_peer connections per client address (beyond, the
/// newcomer is closed at once). max_clients connections in all: a newcomer beyond evicts the
/// connection idle the longest (no call at the worker, no reply waiting: silent, or with part of
/// a record), and is itself closed only when every connection has a call or a reply under way.
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
    std::uint64_t refused = 0;       ///< closed at accept: max_clients, none evictable
    std::uint64_t refused_peer = 0;  ///< closed at accept: max_per_peer from that address
    std::uint64_t evicted = 0;       ///< closed for a newcomer: the one idle the longest
    std::uint64_t oversized = 0;     ///< connections closed: a record beyond max_record
    std::uint64_t timed_out = 0;     ///< closed: no whole record, or reply not taken, in time
  };
  const Stats& stats() const { return st_; }
  std::size_t max_record = 65536;
  std::size_t max_clients = 16;
  std::size_t max_per_peer = 8;
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
    std::uint64_t since_ns = 0;     ///< idle (or its reply ready) since: the eviction order
    std::uint64_t deadline_ns = 0;  ///< since_ns + idle_timeout_ms; not moved by progress
  };
  bool serve(std::uint64_t id, Client& c, std::uint64_t now);
  void submit(std::uint64_t id, Client& c);
  void run_handler(Job& j);
  void finish(std::uint64_t id, const std::shared_ptr<Job>& j);
  void close(std::uint64_t id);
  void admit(int fd, wire::Ipv4Addr peer, std::uint64_t now);
  void restart_clock(Client& c, std::uint64_t now) const;
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
