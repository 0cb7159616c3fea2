/// @file
/// ONC RPC over kernel TCP (RFC 5531 section 11, record marking) as an RpcTransport: the
/// baseline the benchmarks compare RPC-over-RDMA with. Calls are pipelined on one connection
/// and matched to replies by XID; chunks do not exist here, so a read_data payload travels
/// inline (with its XDR pad) and READ's data comes back inline.
#pragma once

#include <map>
#include <string>

#include "apps/nfs/transport.h"

namespace roce::nfs {

class RpcTcpClient : public RpcTransport {
 public:
  RpcTcpClient() = default;
  ~RpcTcpClient() override;
  RpcTcpClient(const RpcTcpClient&) = delete;
  RpcTcpClient& operator=(const RpcTcpClient&) = delete;

  bool connect(const std::string& ipv4, std::uint16_t port);
  const std::string& error() const { return err_; }

  void submit(RpcCall c, Done done) override;
  bool poll() override;
  RpcResult call(RpcCall c) override;
  bool drain(double seconds) override;
  bool connected() const override { return fd_ >= 0; }

 private:
  void fail_all(const std::string& why);
  int fd_ = -1;
  std::map<std::uint32_t, Done> pending_;
  std::vector<std::uint8_t> in_, record_;
  std::string err_;
};

}  // namespace roce::nfs
