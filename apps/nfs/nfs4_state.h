/// @file
/// The NFSv4.1 server's state (RFC 8881): client records made by EXCHANGE_ID, sessions with
/// their slot tables and reply cache, open and lock stateids, and each file's byte-range locks.
/// Every table is bounded (Limits): a request beyond gets NFS4ERR_RESOURCE, never growth.
/// Not thread-safe: the server holds its lock around it.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/nfs/nfs4.h"
#include "apps/nfs/rpc.h"

namespace roce::nfs::v4 {

struct Limits {
  std::size_t clients = 256;          ///< client records (confirmed or not)
  std::size_t sessions = 4;           ///< sessions of one client
  std::uint32_t slots = 32;           ///< a session's fore channel slots
  std::uint32_t max_ops = 32;         ///< operations of one COMPOUND
  std::size_t cached_reply = 4096;    ///< the largest reply a slot keeps for a retry
  std::size_t states = 4096;          ///< open and lock stateids of one client
  std::size_t locks_per_file = 1024;  ///< byte ranges held on one file
  /// Bytes of one client's stateids and byte ranges, their owner names counted (an owner name
  /// may be 1 KiB): what one client can make the server hold.
  std::size_t client_bytes = 1u << 20;
  std::size_t total_bytes = 64u << 20;  ///< the same, of every client together
  std::size_t clients_per_peer = 16;    ///< client records made from one address
  /// The lease: knfsd's nfsv4leasetime, 90 s by default, 10 s at least (--lease-time).
  std::uint32_t lease_seconds = 90;
  static constexpr std::uint32_t kMinLeaseSeconds = 10, kMaxLeaseSeconds = 3600;
  /// The grace period after a restart, apart from the lease as knfsd's nfsv4gracetime
  /// (--grace-time): 90 s by default, so that a Linux client's RDMA reconnect after a restart
  /// (14.7-20 s measured) and its reclaims fit whatever the lease. While a recorded client is
  /// still reclaiming at its end it is extended once, by up to one lease.
  std::uint32_t grace_seconds = 90;
  static constexpr std::uint32_t kMinGraceSeconds = 10, kMaxGraceSeconds = 3600;
  /// A courteous client (its lease ran out, its state kept until it conflicts or room is
  /// needed) is forgotten after this long unrenewed, and its stable record with it: knfsd's
  /// NFSD_COURTESY_CLIENT_TIMEOUT, 24 h.
  std::uint32_t courtesy_seconds = 24 * 3600;
  /// Descriptors the state holds on the host (a delegation's lease, a lock owner's open file
  /// description): of all clients (and at most a quarter of RLIMIT_NOFILE), and of one client.
  /// Beyond: no delegation, and LOCK of a new owner is NFS4ERR_RESOURCE. The clients of one
  /// source address together hold at most 1/host_fds_peer_share of the whole (so that one host
  /// cannot take every descriptor and leave the others no lock).
  std::size_t host_fds = 8192;
  std::size_t host_fds_per_client = 1024;
  std::size_t host_fds_peer_share = 8;
  /// Delegated files watched (inotify) for host metadata changes at most: a file beyond gets
  /// no delegation (Nfs4Server::kMaxWatches).
  std::size_t watches = 8192;
};

using SessionId = std::array<std::uint8_t, 16>;
using Verifier = std::array<std::uint8_t, 8>;

struct Slot {
  std::uint32_t seqid = 0;
  bool in_use = false;
  bool cached = false;              ///< false: a retry gets NFS4ERR_RETRY_UNCACHED_REP
  std::vector<std::uint8_t> reply;  ///< the COMPOUND's results as sent
  /// Its reply waits for the client records of this generation to be on disk (a retry
  /// meanwhile is DELAY, not the cached reply); 0: none.
  std::uint64_t durable_gen = 0;
};

struct Session {
  SessionId id{};
  std::uint64_t clientid = 0;
  std::vector<Slot> slots;
  std::uint32_t max_ops = 0, max_request = 0, max_response = 0, max_cached = 0;
  std::uint32_t flags = 0;
  // The back channel (RFC 8881 2.10.3.1, RFC 8167 over RDMA): the client's callback program and
  // credential, the connection it is bound to (0: none, CB_PATH_DOWN), its one slot's sequence
  // id and whether a CB_COMPOUND is out on it.
  /// Asked for by CREATE_SESSION, BIND_CONN_TO_SESSION or BACKCHANNEL_CTL.
  bool back_wanted = false;
  /// A CREATE_SESSION or BIND_CONN_TO_SESSION of it came on a connection that can carry one.
  bool back_capable = false;
  std::uint32_t cb_program = 0;
  std::optional<rpc::OpaqueAuth> cb_cred;  ///< nullopt: no flavor the server can send
  std::uint64_t back_conn = 0;
  std::uint32_t cb_seqid = 0;  ///< the last CB_SEQUENCE id the client answered
  bool cb_busy = false;
};

/// A file of the export: its device and inode.
struct FileKey {
  std::uint64_t dev = 0, ino = 0;
  friend auto operator<=>(const FileKey&, const FileKey&) = default;
};

/// An open-owner's or lock-owner's name: its client and the client's opaque bytes.
struct Owner {
  std::uint64_t clientid = 0;
  std::vector<std::uint8_t> name;
  friend auto operator<=>(const Owner&, const Owner&) = default;
};

struct State {
  enum Kind { kOpenState, kLockState, kDelegState } kind = kOpenState;
  std::uint32_t seqid = 1;
  std::uint64_t clientid = 0;
  FileKey file;
  Owner owner;
  std::uint32_t access = 0, deny = 0;   ///< kOpen: share access and deny
  std::array<std::uint8_t, 12> open{};  ///< kLock: the open stateid's other it came from
  // kDelegState (a read delegation): the file's handle (for CB_RECALL), when its recall began (-1:
  // not recalled), whether the CB_RECALL is out, and whether the recall timed out (revoked: kept
  // for TEST_STATEID and FREE_STATEID, NFS4ERR_DELEG_REVOKED elsewhere).
  std::vector<std::uint8_t> fh;
  std::int64_t recall_at = -1;
  bool recall_sent = false;
  bool revoked = false;
  /// The client answered CB_RECALL with NFS4ERR_DELAY: sent again no sooner than `cb_next_ms`,
  /// the wait doubling from 100 ms up to 10 s.
  std::int64_t cb_backoff_ms = 0, cb_next_ms = 0;
  bool cb_queued = false;  ///< waiting in its client's queue of recalls to send (by cb_next_ms)
  /// kDelegState: the descriptor holding the host's read lease that stands for it (closed,
  /// and the lease with it, when the delegation goes); `broken`: the kernel broke the lease (a
  /// writer on the host), so the recall has the kernel's lease-break-time, not a lease.
  int lease_fd = -1;
  bool broken = false;
  /// kLockState: the lock owner's own open file description, holding its ranges as host OFD
  /// locks (so that local processes and other servers' clients see them).
  int lock_fd = -1;
  bool lock_rw = false;  ///< lock_fd is open for writing (a write lock needs it)
};

/// One byte range held: [start, end] inclusive.
struct Range {
  Owner owner;
  bool write = false;
  std::uint64_t start = 0, end = 0;
};

/// The byte-range locks of one file. POSIX semantics within an owner: a new range replaces what
/// it overlaps of the owner's own, an unlock splits.
class FileLocks {
 public:
  /// The first range of another owner that conflicts with [start, end] (write or not).
  std::optional<Range> conflict(const Owner& who, bool write, std::uint64_t start,
                                std::uint64_t end) const;
  /// Takes [start, end] for `who`; false when that would exceed `max` ranges.
  bool lock(const Owner& who, bool write, std::uint64_t start, std::uint64_t end, std::size_t max);
  void unlock(const Owner& who, std::uint64_t start, std::uint64_t end);
  bool holds(const Owner& who) const;
  void drop(const Owner& who) { unlock(who, 0, ~std::uint64_t{0}); }
  bool empty() const { return ranges_.empty(); }
  const std::vector<Range>& ranges() const { return ranges_; }
  std::size_t size() const { return ranges_.size(); }

 private:
  std::vector<Range> ranges_;
};

/// Who made a client record (RFC 8881 18.35.5: another principal naming the same co_ownerid is
/// another client): the call's credential flavor, its AUTH_SYS uid and gid, the peer's address.
struct Principal {
  std::uint32_t flavor = 0, uid = 0, gid = 0, peer = 0;
  friend bool operator==(const Principal&, const Principal&) = default;
};

struct Client {
  std::uint64_t clientid = 0;
  Principal principal;  ///< of its EXCHANGE_ID; CREATE_SESSION must come from the same
  std::vector<std::uint8_t> ownerid;
  Verifier verifier{};
  bool confirmed = false;
  bool reclaim_complete = false;
  std::uint32_t cs_seqid = 1;  ///< the CREATE_SESSION sequence id expected next
  /// The last CREATE_SESSION's reply, for a retry of it.
  std::vector<std::uint8_t> cs_reply;
  std::int64_t renewed = 0;  ///< seconds, when SEQUENCE last renewed the lease
  std::size_t states = 0;
  std::size_t bytes = 0;     ///< its stateids and byte ranges, as charged (Limits::client_bytes)
  std::size_t revoked = 0;   ///< its revoked delegations (SEQ4_STATUS_RECALLABLE_STATE_REVOKED)
  std::size_t host_fds = 0;  ///< descriptors its state holds (Limits::host_fds_per_client)
  /// No new delegation before this (seconds): a client that let one be revoked gets none while
  /// it holds revoked ones, and for a while after it freed the last.
  std::int64_t no_deleg_until = 0;
};

}  // namespace roce::nfs::v4
