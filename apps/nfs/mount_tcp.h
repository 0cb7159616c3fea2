/// @file
/// ONC RPC over TCP (RFC 5531 section 11: record marking) for the MOUNT protocol, which NFSv3
/// over RDMA still reaches over TCP (mountd does not listen on RDMA): one blocking call at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "apps/nfs/nfs3.h"
#include "apps/nfs/nfs_server.h"

namespace roce::nfs {

/// MNT of `path` at `server` (IPv4) on TCP `port`; the root file handle, or nullopt and `err`.
std::optional<v3::Fh> mount_tcp(const std::string& server, std::uint16_t port,
                                const std::string& path, std::string& err);

/// One RPC call over a fresh TCP connection: sends `call` as one record, returns the reply's
/// record (fragments joined), or nullopt and `err`.
std::optional<std::vector<std::uint8_t>> rpc_tcp_call(const std::string& server, std::uint16_t port,
                                                      const std::vector<std::uint8_t>& call,
                                                      std::string& err);

/// The server side: RPC over TCP for the MOUNT program (or any handler), non-blocking, polled
/// from the appliance's loop. Each complete record is one call; its reply goes back as one
/// record. A record larger than max_record closes the connection.
class RpcTcpServer {
 public:
  using Handler = std::function<void(const CallContext& ctx, std::span<const std::uint8_t> call,
                                     std::vector<std::uint8_t>& reply)>;
  explicit RpcTcpServer(Handler h) : handler_(std::move(h)) {}
  ~RpcTcpServer();
  RpcTcpServer(const RpcTcpServer&) = delete;
  RpcTcpServer& operator=(const RpcTcpServer&) = delete;
  /// Listens on `ipv4`:`port` (kernel TCP); false and `err` when it cannot.
  bool listen(const std::string& ipv4, std::uint16_t port, std::string& err);
  /// Accepts, reads and answers what is ready; never blocks. True when anything happened.
  bool poll();
  std::uint64_t calls() const { return calls_; }
  std::size_t max_record = 65536;

 private:
  struct Client {
    int fd;
    CallContext ctx;  ///< the peer's address
    std::vector<std::uint8_t> in, record;
  };
  Handler handler_;
  int fd_ = -1;
  std::vector<Client> clients_;
  std::uint64_t calls_ = 0;
};

}  // namespace roce::nfs
