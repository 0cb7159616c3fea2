/// @file
/// roced's side of the attachment: client processes connect to a Unix SOCK_SEQPACKET socket
/// and create PDs, MRs, CQs, QPs and SRQs on roced's engines (protocol.h); their work requests
/// and completions then travel through shared-memory queues (shm_queue.h) that a Poller on
/// the owning lcore (attach_lane.h) moves into and out of the engine.
///
/// Threads: one control thread serves every socket. What touches an engine runs on the lcore
/// that owns it, as a command posted to its poll loop with the reply awaited; nothing else
/// crosses threads. The thread never waits on the network: a request that needs an ARP
/// answer is deferred (its client's next requests wait behind it) and run again by tick(). Each
/// client lives on one port and one lcore of it (its "home", chosen at hello, round robin over the
/// port's lcores): its PD, MRs, CQs and QPs are that engine's.
///
/// Isolation: a client names resources only by handles of its own table (validated on every
/// request; anything else is EINVAL), within its quotas (EDQUOT). The socket's file mode and
/// group decide who may attach; max_clients, max_clients_per_uid and the hello deadline bound
/// the connections, quotas.max_fds the descriptors roced holds for each. A client whose socket
/// closes (exit, kill -9) has its QPs moved to the error state and destroyed first, then its SRQs,
/// MRs (no frame can touch them any more), CQs and PDs, and its memory unmapped; other clients are
/// not involved.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/port/poll_loop.h"

namespace roce::attach {

/// What one client may hold and ask for (docs/client-api.md "Limits"): EDQUOT beyond a count
/// or the memory, EINVAL beyond a size.
struct AttachQuotas {
  std::uint32_t max_qps = 256;
  std::uint32_t max_mrs = 1024;
  std::uint32_t max_cqs = 256;
  std::uint32_t max_srqs = 64;
  /// Bytes roced holds for the client: its regions (each mapping rounded up to pages) and every
  /// ring, queue and array roced and the engine allocate for its QPs, CQs, SRQs and events.
  std::uint64_t max_memory = 1ull << 30;
  std::uint32_t max_regions = 128;  ///< memfds registered at once (one mapping each)
  std::uint32_t max_qp_wr = 16384;  ///< max_send_wr, max_recv_wr of a QP
  std::uint32_t max_srq_wr = 16384;
  std::uint32_t max_cqe = 65536;        ///< CQ depth
  std::uint32_t max_inline_data = 512;  ///< a QP's max_inline_data (rxe's)
  /// Descriptors roced holds for a client besides its socket: the event ring's eventfd, the
  /// CM's, one eventfd per CQ (CQs beyond: EDQUOT).
  std::uint32_t max_fds = 64;
  /// rdma_cm connections (and SIDR exchanges) held at once, in any state up to the end of
  /// their timewait: its own and those of peers' requests to its ports (EDQUOT; a peer's
  /// request beyond it gets REJ 3 "no resources"). At most max_qps by default (config.cc).
  std::uint32_t max_cm_conns = 256;
  /// rdma_cm ports listened on at once, both port spaces (EDQUOT). Ports below 1024 only for
  /// uids in privileged_uids (EACCES), as the kernel's need CAP_NET_BIND_SERVICE.
  std::uint32_t max_listens = 64;
};

struct AttachConfig {
  std::string socket;         ///< path of the Unix socket
  std::uint32_t mode = 0660;  ///< its file mode: who may attach
  std::string group;          ///< its group (a name); empty: roced's
  std::uint32_t max_clients = 64;
  /// Connections of one uid (SO_PEERCRED) at once; 0: no cap but max_clients (a cap for shared
  /// login nodes: an MPI job's ranks are all one uid).
  std::uint32_t max_clients_per_uid = 0;
  std::uint32_t hello_timeout_ms = 5000;     ///< a connection silent this long is closed
  std::uint32_t resolve_timeout_ms = 10000;  ///< ARP for an address a request names
  /// CM events a client leaves unread beyond its ring before its connect requests are refused
  /// (REJ, no resources), as a full listen backlog refuses them.
  std::uint32_t cm_backlog = 256;
  /// uids whose clients may set privileged Q_Keys (the high bit set), as CAP_NET_RAW may, and
  /// listen on rdma_cm ports below 1024, as CAP_NET_BIND_SERVICE may.
  std::vector<std::uint32_t> privileged_uids = {0};
  std::uint32_t cm_connections = 4096;  ///< the CM agent's max_connections, if attach makes it
  /// Test hook: the largest handle before the counter wraps (tests reach the wrap quickly).
  std::uint32_t handle_limit = 0xFFFFFFFFu;
  /// Descriptors clients passed (not memfds) and sockets with descriptors still queued that
  /// wait for the Closer (their close may block): beyond closing_per_uid of one uid its
  /// connections are refused (EAGAIN) and a client of it passing more is disconnected; beyond
  /// closing_total of everyone no connection is accepted (they wait in the backlog).
  std::uint32_t closing_per_uid = 64;
  std::uint32_t closing_total = 256;
  AttachQuotas quotas;
};

/// A port clients may use: its addresses and its poll loops (loop i owns lcore i's engine).
struct AttachPort {
  std::string name;
  wire::MacAddr mac;
  wire::Ipv4Addr ipv4;
  std::vector<port::PollLoop*> loops;
};

/// Counts of one port's attached clients and what they hold (read from any thread).
struct AttachCounts {
  std::uint64_t clients = 0, qps = 0, mrs = 0, cqs = 0;
  std::uint64_t memory_bytes = 0;   ///< charged to the clients (AttachQuotas::max_memory)
  std::uint64_t clients_total = 0;  ///< ever attached
  std::uint64_t clients_lost = 0;   ///< socket closed with resources still held (cleaned up)
  std::uint64_t requests = 0, bad_requests = 0;
  /// Requests answered ENOMEM because an allocation failed (on the control thread or in a
  /// command on an lcore); roced goes on.
  std::uint64_t alloc_failures = 0;
  /// Work requests the lanes refused (completed with an error, or dropped with no CQ to
  /// complete on), and rings they stopped reading (an index out of range).
  std::uint64_t refused_wrs = 0, broken_rings = 0;
  /// Connections turned away (max_clients, max_clients_per_uid, no descriptor left), closed
  /// for not saying hello in time, and accept() failures for want of descriptors: the
  /// server's, reported with the first port.
  std::uint64_t refused = 0, silent = 0, out_of_fds = 0;
  std::uint64_t cm_refused = 0;  ///< connect requests refused: their client's events unread
};

/// One attached client as roce-ctl lists it.
struct ClientInfo {
  std::uint32_t id = 0;
  std::int32_t pid = 0;
  std::uint32_t uid = 0;
  std::string port;
  std::uint32_t lcore = 0;
  std::uint64_t qps = 0, mrs = 0, cqs = 0;
  std::uint64_t memory_bytes = 0;  ///< what roced holds for it, charged to max_memory
};

class Lane;
struct Client;
struct Request;
class Closer;
struct Ops;

class AttachServer {
 public:
  /// Binds the socket (replacing a stale one), registers a Poller with every loop. Construct
  /// before the loops run on their lcores (add_poller is not thread-safe). Throws
  /// std::runtime_error when the socket cannot be set up.
  AttachServer(const AttachConfig& cfg, std::vector<AttachPort> ports);
  /// stop(), then destroys every client's resources directly (the loops must not run any more).
  ~AttachServer();
  AttachServer(const AttachServer&) = delete;
  AttachServer& operator=(const AttachServer&) = delete;
  /// Stops the control thread and closes the socket; clients' calls then fail with ENOTCONN.
  void stop();
  AttachCounts counts(std::size_t port_index) const;
  std::vector<ClientInfo> clients() const;
  const std::string& socket_path() const { return cfg_.socket; }

 private:
  void serve();
  void accept_client();
  /// Reads and answers one request; false when the client is gone.
  bool handle(Client& c);
  /// Answers `rq` (`whole`: it came in one piece), unless it waits for ARP (Client::pending).
  void execute(Client& c, const Request& rq, bool whole, std::vector<int>& passed);
  /// Hello deadlines, deferred requests whose ARP answered or timed out.
  void tick();
  int next_timeout_ms() const;
  /// Closes the descriptors a request brought (those whose close may block: on closer_).
  void release(Client& c, std::vector<int>& passed);
  void drop(Client& c, bool lost);
  /// Closes a client's socket, on the Closer when messages with descriptors are still queued.
  void close_socket(int fd, const std::shared_ptr<std::atomic<int>>& uid);
  void refuse_connection(int fd, int err, const std::shared_ptr<std::atomic<int>>& uid);
  /// The Closer's count of `uid` (made on first use).
  std::shared_ptr<std::atomic<int>> uid_closing(std::uint32_t uid);
  bool closing_full() const;
  AttachConfig cfg_;
  std::vector<AttachPort> ports_;
  std::vector<std::vector<std::unique_ptr<Lane>>> lanes_;  ///< [port][lcore]
  int listen_fd_ = -1;
  int wake_fd_ = -1;     ///< eventfd: stop()
  int reserve_fd_ = -1;  ///< closed to make room for refusing a connection at EMFILE
  std::uint64_t accept_after_ns_ = 0;
  std::atomic<std::uint64_t> refused_{0}, silent_{0}, out_of_fds_{0};
  std::unique_ptr<Closer> closer_;
  std::map<std::uint32_t, std::shared_ptr<std::atomic<int>>> uid_closing_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> loops_stopped_{false};
  std::thread thread_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::uint32_t next_id_ = 1;
  mutable std::mutex mu_;  ///< clients_ for clients(), counts
  struct PortCounts {
    std::atomic<std::uint64_t> clients{0}, qps{0}, mrs{0}, cqs{0}, memory{0}, total{0}, lost{0},
        requests{0}, bad{0}, alloc_failures{0};
  };
  std::unique_ptr<PortCounts[]> counts_;

  friend struct Client;
  friend struct Ops;
};

}  // namespace roce::attach
