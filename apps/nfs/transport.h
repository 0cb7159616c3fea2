/// @file
/// The RPC-over-RDMA v1 transport (RFC 8166) on the appliance's engine: one RC connection made
/// with rdma_cm (RFC 8797 private data: inline sizes and the send-with-invalidate flag), credits,
/// and the chunks of a call.
///
/// Requester (client): each call goes out in one SEND whose transport header offers, when the
/// call needs them, a read chunk (the payload of a WRITE: the server pulls it with RDMA READ), a
/// write chunk (where the server RDMA WRITEs a READ's data) or a reply chunk (a reply larger than
/// the inline threshold). Chunk memory is registered per call with FRWR (a REG_MR work request,
/// not signalled, with a fresh key variant) and invalidated when the reply arrives, by the
/// server's SEND with invalidate when it sent one, else by a LOCAL_INV that the call waits for.
/// The client never has more calls outstanding than the server's last credit grant.
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

#include "apps/nfs/rpcrdma.h"
#include "controlplane/cm/cm_hub.h"
#include "runtime/env.h"

namespace roce::nfs {

/// NFS over RDMA's well-known port (RFC 5666 section 12 / RFC 8267).
constexpr std::uint16_t kNfsRdmaPort = 20049;

struct TransportOptions {
  std::uint32_t credits = 32;          ///< requested from the server (and receives posted)
  std::uint32_t inline_size = 4096;    ///< what we send and receive inline (RFC 8797)
  std::uint32_t max_chunk = 1u << 20;  ///< the largest chunk one call registers
  bool remote_invalidate = true;       ///< offer the server SEND with invalidate
  double connect_timeout = 10;
  double call_timeout = 30;
  /// A broken connection (an error completion, the server's DREQ, a call without a reply) is
  /// made again this many times; the calls without a reply are sent again (same XIDs) with
  /// fresh registrations.
  unsigned max_reconnects = 3;
  /// Fault injection for tests: tear the connection down once, right after this many calls
  /// were sent (0: never), as if it had broken.
  std::uint64_t break_after_calls = 0;
};

/// One RPC call as the transport carries it.
struct RpcCall {
  std::vector<std::uint8_t> msg;  ///< the RPC call: header and arguments, without the payload
  /// A payload that goes in a read chunk at XDR position `read_position` of `msg` (the server
  /// pulls it with RDMA READ), for WRITE's data. Empty: none.
  std::span<const std::uint8_t> read_data;
  std::uint32_t read_position = 0;
  /// Where the server writes a reduced data item (READ's data) through a write chunk.
  std::span<std::uint8_t> write_target;
  /// The largest reply expected: past the inline threshold, a reply chunk is offered.
  std::uint32_t reply_max = 0;
  /// Sent as it is instead of the transport header the transport builds (no chunks then): how
  /// `roce-nfs errprobe` provokes RDMA_ERROR (another version, a retired procedure).
  std::vector<std::uint8_t> transport_header;
};

struct RpcResult {
  bool ok = false;
  std::string error;
  std::optional<rdma::ErrorCode> rdma_error;  ///< the server answered RDMA_ERROR
  std::vector<std::uint8_t> reply;            ///< the RPC reply (from the SEND or the reply chunk)
  std::uint64_t written = 0;                  ///< bytes the server put in the write chunk
};

/// Counters of a transport, for reports and tests.
struct TransportStats {
  std::uint64_t calls = 0, replies = 0, read_chunks = 0, write_chunks = 0, reply_chunks = 0;
  std::uint64_t remote_invalidations = 0, local_invalidations = 0, registrations = 0;
  std::uint64_t credit_waits = 0, bad_replies = 0, reconnects = 0, resent = 0, mrs_recovered = 0;
  std::uint32_t granted = 0, max_outstanding = 0;
};

/// What the NFS client needs from a transport: RPC-over-RDMA, or ONC RPC over TCP (the
/// benchmarks' baseline, rpc_tcp.h).
class RpcTransport {
 public:
  using Done = std::function<void(RpcResult&&)>;
  virtual ~RpcTransport() = default;
  virtual void submit(RpcCall c, Done done) = 0;
  virtual bool poll() = 0;
  virtual RpcResult call(RpcCall c) = 0;
  virtual bool drain(double seconds) = 0;
  virtual bool connected() const = 0;
};

class RpcRdmaClient : public RpcTransport {
 public:
  RpcRdmaClient(runtime::Env& env, TransportOptions o);
  ~RpcRdmaClient() override;
  RpcRdmaClient(const RpcRdmaClient&) = delete;
  RpcRdmaClient& operator=(const RpcRdmaClient&) = delete;

  /// Connects to `ipv4`:`port`; false and error() when it cannot.
  bool connect(const std::string& ipv4, std::uint16_t port = kNfsRdmaPort);
  void close();
  bool connected() const override { return qp_ != nullptr && up_; }

  /// Queues a call (sent when a credit is free); `done` runs from poll().
  void submit(RpcCall c, Done done) override;
  /// Runs the stack once; true when anything happened.
  bool poll() override;
  /// submit() and poll until its reply.
  RpcResult call(RpcCall c) override;
  /// Polls until no call is outstanding or queued (or the timeout); false on timeout.
  bool drain(double seconds) override;

  /// The inline sizes in force after the handshake, and the peer's flag.
  std::uint32_t send_inline() const { return send_inline_; }
  std::uint32_t recv_inline() const { return opt_.inline_size; }
  bool peer_private_seen() const { return peer_pd_; }
  const TransportStats& stats() const { return st_; }
  const std::string& error() const { return err_; }
  std::size_t outstanding() const { return pending_.size(); }
  runtime::Env& env() { return env_; }

 private:
  struct Frmr {
    engine::Mr* mr = nullptr;
    std::uint32_t rkey = 0;
    bool valid = false;  ///< registered and not yet invalidated
  };
  struct Pending {
    std::uint32_t xid = 0;
    Done done;
    RpcCall call;
    std::uint32_t slot = 0;               ///< send buffer and MR slot
    std::vector<std::uint8_t> reply_buf;  ///< reply chunk memory
    std::vector<std::uint32_t> rkeys;     ///< registered for this call
    std::uint32_t inv_outstanding = 0;
    RpcResult result;
    bool replied = false;
    std::uint64_t deadline = 0;
  };
  void on_cm(const cm::CmEvent& e);
  bool start(std::uint32_t xid, Pending& p);
  std::optional<std::uint32_t> reg(std::uint32_t slot, std::uint32_t which, std::uint8_t* p,
                                   std::size_t n, std::uint32_t access);
  void on_recv(const engine::Wc& wc);
  void finish(std::uint32_t xid);
  void fail_all(const std::string& why);
  void post_recv(std::uint32_t i);
  void pump_queue();
  /// The connection broke: reconnect and resend, or fail every call when out of attempts.
  void broken(const std::string& why);
  bool poll_stack();  ///< the port and the CM only
  void drop_qp();

  runtime::Env& env_;
  TransportOptions opt_;
  std::shared_ptr<cm::CmHub> hub_;
  cm::CmHub::Owner owner_ = 0;
  engine::Pd* pd_ = nullptr;
  engine::Cq* cq_ = nullptr;
  engine::Qp* qp_ = nullptr;
  std::optional<cm::ConnId> cm_id_;
  bool up_ = false, failed_ = false, peer_pd_ = false, peer_inv_ = false;
  std::uint32_t send_inline_ = rdma::kDefaultInline;
  std::vector<std::uint8_t> send_mem_, recv_mem_;
  engine::Mr* send_mr_ = nullptr;
  engine::Mr* recv_mr_ = nullptr;
  std::vector<std::array<Frmr, 3>> frmrs_;  ///< per slot: read, write, reply
  std::vector<std::uint32_t> free_slots_;
  std::map<std::uint32_t, Pending> pending_;  ///< by XID
  std::deque<std::pair<RpcCall, Done>> queue_;
  std::uint32_t granted_ = 1;
  std::uint32_t in_flight_ = 0;  ///< calls sent whose reply has not arrived
  std::string peer_ip_;
  std::uint16_t peer_port_ = 0;
  bool reconnecting_ = false, broke_once_ = false;
  TransportStats st_;
  std::string err_;
};

}  // namespace roce::nfs
