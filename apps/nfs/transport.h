/// @file
/// The RPC-over-RDMA v1 transport (RFC 8166) on a libroce Context and the connection layer
/// (<roce/conn.h>), so that it runs in-process, attached to a roced or hosted in one: one RC
/// connection made with rdma_cm (RFC 8797 private data: inline sizes), credits, and the chunks
/// of a call.
///
/// Requester (client): each call goes out in one SEND whose transport header offers, when the
/// call needs them, a read chunk (the payload of a WRITE: the server pulls it with RDMA READ), a
/// write chunk (where the server RDMA WRITEs a READ's data) or a reply chunk (a reply larger than
/// the inline threshold). A chunk lives in the call's slot of shared memory (Context::
/// alloc_buffer: roced maps it too when attached), copied in (WRITE's data) or out (READ's data,
/// the reply), registered for that call alone (reg_mr: a fresh rkey per call, as FRWR gives)
/// and deregistered when the reply arrives: the server reaches it only while the call is out,
/// and never the caller's own memory. Remote invalidation is not offered (RFC 8797's flag
/// clear): a SEND with invalidate may only name a fast-registered MR, which libroce does not
/// make; the deregistrations are counted as local invalidations. The client never has more
/// calls outstanding than the server's last credit grant.
#pragma once

#include <roce/client.h>
#include <roce/conn.h>

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

namespace roce::nfs {

/// NFS over RDMA's well-known port (RFC 5666 section 12 / RFC 8267).
constexpr std::uint16_t kNfsRdmaPort = 20049;

struct TransportOptions {
  std::uint32_t credits = 32;          ///< requested from the server (and receives posted)
  std::uint32_t inline_size = 4096;    ///< what we send and receive inline (RFC 8797)
  std::uint32_t max_chunk = 1u << 20;  ///< the largest chunk one call registers
  /// Kept for the command line: remote invalidation is never offered (the chunks' MRs are
  /// not fast-registered), every registration ends with the client's own deregistration.
  bool remote_invalidate = false;
  /// Idle waits leave the CPU now and then (false: spin, a core of its own).
  bool yield_when_idle = true;
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
  /// local_invalidations: chunk registrations ended by deregistration (every one, since remote
  /// invalidation is not offered); registrations: the message buffers' and every chunk's.
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
  /// The Context must outlive the transport. Throws std::runtime_error when it cannot get its
  /// memory.
  RpcRdmaClient(client::Context& ctx, TransportOptions o);
  ~RpcRdmaClient() override;
  RpcRdmaClient(const RpcRdmaClient&) = delete;
  RpcRdmaClient& operator=(const RpcRdmaClient&) = delete;

  /// Connects to `ipv4`:`port`; false and error() when it cannot.
  bool connect(const std::string& ipv4, std::uint16_t port = kNfsRdmaPort);
  void close();
  bool connected() const override { return conn_ != 0 && up_; }

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

 private:
  struct Pending {
    std::uint32_t xid = 0;
    Done done;
    RpcCall call;
    std::uint32_t slot = 0;        ///< send buffer and chunk memory slot
    std::uint32_t reply_len = 0;   ///< reply chunk offered (in the slot's reply area)
    std::vector<client::Mr*> mrs;  ///< registered for this call
    RpcResult result;
    bool replied = false;
    std::uint64_t deadline = 0;
  };
  void on_event(const conn::Event& e);
  bool start(std::uint32_t xid, Pending& p);
  std::optional<std::uint32_t> reg(Pending& p, std::uint8_t* at, std::size_t n,
                                   std::uint32_t access);
  void unreg(Pending& p);
  void on_recv(const client::Wc& wc);
  void finish(std::uint32_t xid);
  void fail_all(const std::string& why);
  void post_recv(std::uint32_t i);
  void pump_queue();
  /// The connection broke: reconnect and resend, or fail every call when out of attempts.
  void broken(const std::string& why);
  /// The CM's events (completions kept for poll()); true when anything happened.
  bool poll_events();
  void drop_conn();
  /// Polls (poll_events, or `done` itself) until `done()` or `seconds`; false on timeout.
  template <class F>
  bool until(F&& done, double seconds);
  std::uint8_t* send_buf(std::uint32_t slot);
  std::uint8_t* recv_buf(std::uint32_t i);
  std::uint8_t* data_area(std::uint32_t slot);
  std::uint8_t* reply_area(std::uint32_t slot);

  client::Context& ctx_;
  TransportOptions opt_;
  conn::Endpoint ep_;
  conn::ConnId conn_ = 0;
  bool up_ = false, failed_ = false, peer_pd_ = false;
  std::uint32_t send_inline_ = rdma::kDefaultInline;
  /// One shared-memory buffer: send slots, receive slots, then per slot a data area
  /// (max_chunk: a read or write chunk) and a reply area (max_chunk).
  client::Buffer* mem_ = nullptr;
  client::Mr* msg_mr_ = nullptr;  ///< the send and receive slots (local access only)
  std::vector<std::uint32_t> free_slots_;
  std::map<std::uint32_t, Pending> pending_;  ///< by XID
  std::deque<std::pair<RpcCall, Done>> queue_;
  std::uint32_t granted_ = 1;
  std::uint32_t in_flight_ = 0;  ///< calls sent whose reply has not arrived
  std::string peer_ip_;
  std::uint16_t peer_port_ = 0;
  bool reconnecting_ = false, broke_once_ = false;
  std::vector<conn::Event> events_;
  std::vector<conn::Completion> wcs_;  ///< completions not handled yet
  TransportStats st_;
  std::string err_;
};

}  // namespace roce::nfs
