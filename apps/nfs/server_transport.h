/// @file
/// The responder side of RPC-over-RDMA v1 (RFC 8166) on a libroce Context and the connection
/// layer (<roce/conn.h>), so that it runs in-process, attached to a roced or hosted in one: accepts
/// rdma_cm connections (RFC 8797 private data both ways), receives calls, pulls read chunks with
/// RDMA READ and assembles the call, has the handler run it on a worker thread (call_worker.h),
/// pushes a reduced payload into the client's write chunk (or a reply larger than the client's
/// inline size into its reply chunk) with RDMA WRITE, then sends the reply, with SEND with
/// invalidate when the client allowed it. Each connection has several calls at the worker pool at
/// once, up to the credits granted; read chunks are pulled and write and reply chunks pushed
/// through a small pool of chunk buffers per connection (as many as its heap budget max_held
/// holds, 4 with the defaults, registered once), so that several RDMA READs and WRITEs of a
/// connection are on the wire at once; a call waiting for a chunk buffer holds up only the calls
/// with chunks behind it. The RDMA READs are bounded for the whole server (max_read_bytes): a
/// read chunk is pulled in pieces, posted as earlier ones complete, pulls served in the order
/// they came, so that the responses on the way never overrun the port's receive ring.
///
/// What a peer can hold (docs/nfs.md "Limits and binding"): the credits granted are what a
/// connection may have in flight; a message beyond them is dropped and counted (over_credit),
/// and received messages wait in their receive buffers, so a connection's memory is fixed when it
/// is accepted. Connections and half-open ones are capped (REJ 3 "no resources" beyond); every
/// terminal CM event (DREQ, REJ, timeouts) and every error completion releases a connection. The
/// source of a REQ is resolved with ARP without blocking the loop; no answer in
/// resolve_timeout_ms and the REQ is rejected. Malformed transport headers are answered with
/// RDMA_ERROR (ERR_VERS or ERR_CHUNK) and counted.
#pragma once

#include <roce/client.h>
#include <roce/conn.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "apps/nfs/call_worker.h"
#include "apps/nfs/nfs_server.h"
#include "apps/nfs/rpcrdma.h"

namespace roce::nfs {

struct ServerOptions {
  std::uint32_t credits = 32;
  std::uint32_t inline_size = 4096;
  std::uint32_t max_io = 1u << 20;        ///< the largest read chunk or write chunk payload
  std::uint32_t max_reply = 256u * 1024;  ///< the largest reply sent through a reply chunk
  /// Connections at once, half-open ones included (each holds a QP, three MRs and about
  /// credits x inline x 2 + its chunk buffers, 4 x (max_io + 8 KiB) with the defaults, of
  /// shared memory, touched as it is used): a REQ beyond gets REJ 3 "no resources".
  std::uint32_t max_connections = 64;
  /// Connections accepted or being accepted (ARP for the source) and not established yet.
  std::uint32_t max_half_open = 16;
  /// How long the source of a REQ may take to answer ARP before the REQ is rejected.
  std::uint32_t resolve_timeout_ms = 3000;
  /// Whether a source may connect at all (the export's client list): a REQ from one it refuses
  /// gets REJ 28 "consumer defined" before it holds anything. Unset: every source.
  std::function<bool(wire::Ipv4Addr)> allows;
  /// Connections of one source address. A REQ beyond closes that source's connection idle the
  /// longest (no call in flight: a client that rebooted left it behind), or gets REJ 3 when
  /// every one has a call in flight.
  std::uint32_t max_per_peer = 8;
  /// With max_connections reached, a REQ closes the connection idle the longest if it has been
  /// idle (no call in flight, nothing received) this long, as knfsd closes idle transports after
  /// 6 minutes; else it gets REJ 3.
  std::uint32_t reap_idle_ms = 360'000;
  /// The bytes one connection's calls may hold on the heap between being taken and their reply
  /// being sent (calls pulled, READ payloads waiting for a chunk buffer); beyond, its further
  /// calls wait in their receive buffers. 0: 4 x (max_io + 8 KiB) + max_reply. It also sets
  /// the connection's chunk buffers: max_held / max(max_io + 8 KiB, max_reply), 2 to 8.
  std::uint64_t max_held = 0;
  /// The bytes of RDMA READs (pulls of read chunks) the server has posted and not seen
  /// complete, all connections together: their responses come back at the client's wire speed
  /// into the port's one receive ring, which a burst beyond it overruns on a small ring
  /// (net_af_packet: 512 frames, 512 KiB at MTU 1024). A read chunk is pulled in pieces of at
  /// most read_piece bytes (a READ of part of a segment: its address plus an offset, same
  /// key), posted as earlier ones complete, pulls served in the order they came, whatever their
  /// connection. A piece always goes when nothing is out. 4 KiB to 64 MiB
  /// (roce-nfsd --max-read-inflight).
  std::uint32_t max_read_bytes = 256u * 1024;
  /// The largest RDMA READ posted (a segment longer is read in several), at most max_read_bytes.
  std::uint32_t read_piece = 64u * 1024;
};

/// The range ServerOptions::max_read_bytes (--max-read-inflight) accepts.
inline constexpr std::uint32_t kMinReadInflight = 4096, kMaxReadInflight = 64u << 20;

struct ServerStats {
  std::uint64_t connections = 0, calls = 0, reads = 0, read_bytes = 0, writes = 0, write_bytes = 0,
                reply_chunks = 0, send_inv = 0, err_vers = 0, err_chunk = 0;
  /// Answers posted (RDMA_MSG, RDMA_NOMSG or RDMA_ERROR SENDs), on the wire when the QP's
  /// window lets them go (not when the client has them).
  std::uint64_t replies = 0;
  std::uint64_t over_credit = 0;    ///< messages beyond the credits granted: dropped
  std::uint64_t rejected_full = 0;  ///< REQs refused: max_connections, max_half_open, max_per_peer
  std::uint64_t denied = 0;         ///< REQs refused: a source the export does not list
  std::uint64_t reaped = 0;         ///< idle connections closed to make room for a REQ
  std::uint64_t unresolved = 0;     ///< REQs refused: no ARP answer from the source in time
  std::uint64_t closed = 0;         ///< connections released (DREQ, REJ, timeouts, errors)
  /// The most RDMA READs one connection had posted and not completed at once, and the most
  /// chunk buffers one connection had in use at once (pulls and replies' WRITEs).
  std::uint64_t reads_in_flight_peak = 0, chunk_buffers_peak = 0;
  /// The READ window (ServerOptions::max_read_bytes): the most bytes of RDMA READs out at once
  /// (all connections), pulls that waited for room in it (all or part of their chunk), the most
  /// pulls waiting at once, and READs of part of a segment (a segment beyond read_piece).
  std::uint64_t read_bytes_in_flight_peak = 0, reads_queued = 0, reads_queued_peak = 0,
                read_pieces = 0;
  /// RFC 8167's backward direction: calls sent, REPLYs received, calls not sent (no such
  /// connection, two out already, too large to send inline, no free send buffer).
  std::uint64_t backward_calls = 0, backward_replies = 0, backward_dropped = 0;
};

class RpcRdmaServer {
 public:
  /// Runs on a worker thread, several at once (of one connection too): it may block (fsync)
  /// without stopping the poll loop.
  using Handler = std::function<void(const CallContext& ctx, std::span<const std::uint8_t> call,
                                     RpcReply& reply)>;

  /// `worker` runs the handler (the NFS service shares one with MOUNT; it must outlive the
  /// server's polls); null: a worker of the server's own.
  /// The Context must outlive the server.
  RpcRdmaServer(client::Context& ctx, ServerOptions o, Handler h, CallWorker* worker = nullptr);
  ~RpcRdmaServer();
  RpcRdmaServer(const RpcRdmaServer&) = delete;
  RpcRdmaServer& operator=(const RpcRdmaServer&) = delete;

  /// Throws std::runtime_error when someone else listens to `port` on the port's CM.
  void listen(std::uint16_t port);
  /// Runs the stack once; true when anything happened.
  bool poll();
  const ServerStats& stats() const { return st_; }
  /// The options in force (out-of-range values brought within their bounds).
  const ServerOptions& options() const { return opt_; }
  /// RFC 8167 (an NFSv4.1 back channel): sends the RPC call `call` to the client of `conn` (the
  /// CallContext's conn) in the connection's reverse direction, an RDMA_MSG without chunks;
  /// false (counted) when it cannot go now. Its REPLY goes to on_backward_reply.
  bool send_call(std::uint64_t conn, std::span<const std::uint8_t> call);
  /// Where the client's REPLYs to send_call go (on the poll loop: must not block), and which
  /// connections were released.
  std::function<void(std::uint64_t conn, std::span<const std::uint8_t> reply)> on_backward_reply;
  std::function<void(std::uint64_t conn)> on_closed;
  std::size_t connections() const { return conns_.size(); }

 private:
  struct Conn;
  struct Job;
  /// A REQ whose source is being resolved with ARP.
  struct Pending {
    conn::ConnId id = 0;
    wire::Ipv4Addr peer;
    std::vector<std::uint8_t> private_data;
    std::uint64_t deadline_ns = 0, next_arp_ns = 0;
  };
  void on_event(conn::Event& e);
  void on_connect_request(conn::Event& e);
  void accept(conn::ConnId id, wire::Ipv4Addr peer, std::span<const std::uint8_t> private_data);
  void resolve_pending();
  std::size_t half_open() const;
  /// Makes room for a REQ from `peer`: closes the connection idle the longest (of `peer` when it
  /// is at max_per_peer, of anyone idle beyond reap_idle_ms when the table is full); false when
  /// there is none to close and the REQ is to be refused.
  /// Whether a connection of `peer` fits beside the established ones (`self` not counted),
  /// and if not, which idle one would give way: its own oldest beyond max_per_peer, anyone's
  /// idle beyond reap_idle_ms when the table is full.
  struct Room {
    bool fits = true;
    Conn* own = nullptr;
    Conn* any = nullptr;
    Conn* victim = nullptr;
  };
  Room room(wire::Ipv4Addr peer, conn::ConnId self);
  /// At a connection's RTU: makes its room (closes the victim), or closes it when none.
  void newcomer_established(Conn& c);
  void on_wc(const conn::Completion& wc);
  void next(Conn& c);
  void post_recv(Conn& c, std::uint32_t slot);
  /// `data`: the chunk buffer its read chunk was pulled into (null: no read chunk).
  void assemble_and_run(Conn& c, const std::shared_ptr<Job>& j, const std::uint8_t* data);
  bool submit(const std::shared_ptr<Job>& j);
  void run_handler(Job& j);
  void finish(const std::shared_ptr<Job>& j);
  void send_reply(Conn& c, Job& j);
  /// `chunks`: the chunk buffers RDMA WRITEs posted for this call read (busy until it completes).
  void send_error(Conn& c, std::uint32_t xid, rdma::ErrorCode code, std::uint32_t chunks = 0);
  void answered(Conn& c);
  std::uint64_t held_limit() const;
  std::size_t chunk_len() const;      ///< one chunk buffer's bytes
  std::uint32_t chunk_count() const;  ///< a connection's chunk buffers
  void release(Conn& c);
  /// Posts the next pieces of the pulls waiting (read_queue_), in order, while the READ window
  /// has room; a pull whose piece cannot be posted ends short (ERR_CHUNK) once its READs out
  /// complete.
  void pump_reads();
  /// The pull into chunk buffer `b` of `c` is whole (or short): the call assembled and run
  /// (or ERR_CHUNK), the buffer free again.
  void end_pull(Conn& c, std::uint32_t b);
  /// Forgets connection `conn`; `end`: also ends it on the wire (DREQ) and frees its QP now.
  void close(conn::ConnId conn, bool end);

  client::Context& ctx_;
  ServerOptions opt_;
  Handler handler_;
  conn::Endpoint ep_;
  std::map<conn::ConnId, std::unique_ptr<Conn>> conns_;
  std::vector<Pending> pending_;
  std::deque<std::shared_ptr<Job>> waiting_;  ///< calls waiting for room at the worker pool
  /// Pulls with pieces not posted yet, in the order they came: (connection, chunk buffer).
  /// A connection closed is taken out of it with its pulls.
  std::deque<std::pair<conn::ConnId, std::uint32_t>> read_queue_;
  std::uint64_t read_bytes_out_ = 0;  ///< bytes of RDMA READs posted and not completed
  /// Connections whose pull ended in pump_reads (a piece not posted): served again in poll().
  std::vector<conn::ConnId> kick_;
  std::vector<conn::Event> events_;
  std::vector<conn::Completion> wcs_;
  ServerStats st_;
  CallWorker* worker_ = nullptr;
  std::unique_ptr<CallWorker> own_worker_;  ///< last: joined first, while the rest still exists
};

}  // namespace roce::nfs
