/// @file
/// What NetFR needs from an RDMA stack: registered memory, rdma_cm connections whose
/// requests, replies and rejections carry private data (the hellos), and per-connection RC QPs
/// with SEND, RDMA WRITE and RECV. The appliance implements it on a libroce Context and the
/// connection layer (context_fabric.h), so NetFR runs in-process, attached to a roced or
/// hosted in one alike; the host and client state machines (host.h, client.h) only see this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace roce::netfr {

using ConnId = std::uint64_t;

/// Registered memory: `addr` in this process; a peer writes it at `iova` (+ offset) with `rkey`.
struct MrInfo {
  void* addr = nullptr;
  std::uint64_t length = 0;
  std::uint32_t lkey = 0, rkey = 0;
  std::uint64_t iova = 0;
  std::uint64_t handle = 0;  ///< the fabric's; 0: none
};

struct FabricEvent {
  enum Kind : std::uint8_t {
    kConnectRequest,  ///< passive: answer with accept() or reject()
    kEstablished,
    kRejected,  ///< private_data: the passive side's reason (a ServerHello)
    kUnreachable,
    kDisconnected,
  } kind;
  ConnId conn = 0;
  std::uint16_t port = 0;  ///< kConnectRequest: the rdma_cm port asked for
  std::string peer;        ///< kConnectRequest: the peer's IPv4 address
  std::vector<std::uint8_t> private_data;
};

struct FabricCompletion {
  ConnId conn = 0;
  std::uint64_t wr_id = 0;
  bool ok = true;
  std::string status;
  enum Kind : std::uint8_t { kSend, kWrite, kRecv } kind = kSend;
  std::uint32_t byte_len = 0;
};

class Fabric {
 public:
  virtual ~Fabric() = default;
  /// `length` zero-filled bytes of the stack's memory (shared with roced when attached),
  /// registered for local writes, and for remote writes with `remote_write` (only the buffers
  /// a client advertises: nothing else of ours is written from afar).
  virtual std::optional<MrInfo> alloc_mr(std::uint64_t length, bool remote_write) = 0;
  /// The application's memfd `fd`, mapped at `addr` for `length` bytes, registered likewise
  /// (zero copy: e.g. Looking Glass's shared frame memory).
  virtual std::optional<MrInfo> reg_memfd(int fd, void* addr, std::uint64_t length,
                                          bool remote_write) = 0;
  /// Deregisters, and frees what alloc_mr allocated.
  virtual void dereg_mr(const MrInfo& mr) = 0;
  virtual bool listen(std::uint16_t port) = 0;
  /// Passive: creates the QP (receives may be posted), then accept() sends the REP.
  virtual bool prepare(ConnId c, std::uint32_t send_depth, std::uint32_t recv_depth) = 0;
  virtual bool accept(ConnId c, const std::vector<std::uint8_t>& private_data) = 0;
  virtual void reject(ConnId c, const std::vector<std::uint8_t>& private_data) = 0;
  /// Active: the QP exists (receives may be posted) when this returns.
  virtual std::optional<ConnId> connect(const std::string& ipv4, std::uint16_t port,
                                        std::uint32_t send_depth, std::uint32_t recv_depth,
                                        const std::vector<std::uint8_t>& private_data) = 0;
  virtual void disconnect(ConnId c) = 0;
  virtual bool post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                         std::uint32_t lkey) = 0;
  /// SEND (remote_addr 0, rkey 0, write false) or RDMA WRITE.
  virtual bool post_send(ConnId c, std::uint64_t wr_id, bool write, const void* local,
                         std::uint32_t length, std::uint32_t lkey, std::uint64_t remote_addr,
                         std::uint32_t rkey, bool signaled) = 0;
  virtual bool poll(std::vector<FabricEvent>& events, std::vector<FabricCompletion>& wcs) = 0;
  /// Runs the stack for `seconds` without reporting.
  virtual void idle(double seconds) = 0;
  virtual std::string report() const = 0;
};

}  // namespace roce::netfr
