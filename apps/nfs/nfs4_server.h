/// @file
/// An NFSv4.1 server (RFC 8881, a minimal one) over the same export as the NFSv3 server: RPC
/// calls of program 100003 version 4 in, replies out, no transport (the RPC-over-RDMA transport
/// of server_transport.h carries it as it carries v3, RFC 8267's reduced READ data included).
///
/// File handles, their checks (beneath the export's root, MAC'd, persistent) and each call's
/// identity are the v3 server's (NfsServer::resolve, handle_in, run_as): one export, one kind of
/// handle. State (clients, sessions, slots and their reply cache, opens, locks) is this server's
/// alone, bounded by v4::Limits.
///
/// The back channel (RFC 8881 2.10.3.1; over RDMA, RFC 8167's reverse direction of the same
/// connection): when the transport can carry calls to the client (`backchannel`), CREATE_SESSION
/// and BIND_CONN_TO_SESSION bind the session's back channel to the call's connection, and OPEN
/// for reading grants a read delegation. A conflicting OPEN (another client's, for writing)
/// starts its recall: the server queues a CB_COMPOUND (CB_SEQUENCE + CB_RECALL) for the
/// transport to take (take_callbacks), answers the OPEN NFS4ERR_DELAY until DELEGRETURN, and
/// revokes the delegation when a lease passes without it (tick). The transport hands the
/// client's REPLYs back (callback_reply), matched by xid and connection.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>

#include "apps/nfs/nfs4.h"
#include "apps/nfs/nfs4_state.h"
#include "apps/nfs/nfs_server.h"

namespace roce::nfs {

struct Nfs4Stats {
  std::uint64_t compounds = 0, ops = 0, errors = 0, garbage = 0, replays = 0;
  std::uint64_t delegations = 0, recalls = 0, revoked = 0;  ///< granted, CB_RECALLs sent, revoked
  /// Delegations: recalls begun (a conflicting change, or the kernel broke the lease), lease
  /// breaks seen (a writer on the host, local or NFSv3's open), the NFS4ERR_DELAY (v4) and
  /// NFS3ERR_JUKEBOX (v3) answers a recall made a caller wait with, and DELEGRETURNs.
  std::uint64_t recalls_begun = 0, lease_breaks = 0, recall_delays = 0, recall_jukebox = 0,
                delegreturns = 0;
  /// CB_NOTIFY_LOCKs sent (a blocked waiter's lock was let go), waiters remembered now, and
  /// waiters not remembered (a client's kMaxLockWaiters were already).
  std::uint64_t notify_locks = 0, lock_waiters_now = 0, lock_waiters_dropped = 0;
  /// Host lock look-ups for waiters a host process refused (tick), the files found free (their
  /// waiters told), and such waiters not watched (kMaxHostWaitFiles, or the file did not open).
  std::uint64_t host_wait_checks = 0, host_wait_freed = 0, host_wait_unwatched = 0;
  /// Recalls begun by a host metadata change of a delegated file (inotify: chmod, chown,
  /// rename, unlink, link), delegations refused for want of a watch (Limits::watches reached, or
  /// the host's fs.inotify.max_user_watches), and inotify queue overflows (each recalls every
  /// watched file's delegations: events were lost).
  std::uint64_t meta_recalls = 0, unwatched = 0, watch_overflows = 0;
  /// CB_NOTIFY_LOCKs lost: a waiter's notice beyond its client's queue of kMaxLockWaiters, one
  /// never sent (the client's back channel never came back before its lease ran out), one sent
  /// and never answered (the client retries on its own, up to 30 s later).
  std::uint64_t notify_lost = 0;
  std::uint64_t cb_replies = 0, cb_bad_replies = 0, cb_timeouts = 0;
  std::uint64_t resource = 0;  ///< NFS4ERR_RESOURCE answers: a table was full
  /// Locks granted in the server's table alone (no host OFD lock: the lock owner would have
  /// passed Limits::host_fds), so host processes do not see them.
  std::uint64_t locks_table_only = 0;
  /// The grace period: whether in it now, how many began, GRACE answers (new state refused).
  std::uint64_t grace_now = 0, grace_periods = 0, grace_answers = 0;
  /// Grace periods extended (a recorded client was still reclaiming at their end).
  std::uint64_t grace_extensions = 0;
  /// Courteous clients forgotten after Limits::courtesy_seconds unrenewed (records with them).
  std::uint64_t courtesy_expired = 0;
  std::uint64_t pump_visits = 0;     ///< recall queues and sessions looked at by pump() (its cost)
  std::uint64_t lease_checks = 0;    ///< F_GETLEASE calls (a lease break's cost)
  std::uint64_t records_writes = 0;  ///< the records file rewritten (by its writer thread)
  std::uint64_t records_waits =
      0;  ///< RECLAIM_COMPLETE replies held until their record was written
  std::uint64_t records_error = 0;  ///< 1 while the records cannot be read or written
  /// Records given a client's new principal when the grace period ended (it came back from
  /// another address than its record named, and finished reclaiming).
  std::uint64_t records_rewritten = 0;
  /// ... and not given: the client at the new address had another flavor, uid or gid.
  std::uint64_t records_refused = 0;
  std::map<std::uint32_t, std::uint64_t> by_op;
};

/// A CB_COMPOUND call (RFC 8881 20): CB_SEQUENCE on slot 0 with sequence id `seq`, then
/// CB_RECALL of the delegation `deleg` on the file `fh`, for the client's program `program`.
void encode_cb_recall(std::vector<std::uint8_t>& msg, std::uint32_t xid, std::uint32_t program,
                      const rpc::OpaqueAuth& cred, const v4::SessionId& session, std::uint32_t seq,
                      const v4::Stateid& deleg, std::span<const std::uint8_t> fh);
/// The same with CB_NOTIFY_LOCK (RFC 8881 20.11): the lock owner `owner` may retry its lock
/// of the file `fh`.
void encode_cb_notify_lock(std::vector<std::uint8_t>& msg, std::uint32_t xid, std::uint32_t program,
                           const rpc::OpaqueAuth& cred, const v4::SessionId& session,
                           std::uint32_t seq, std::span<const std::uint8_t> fh,
                           const v4::Owner& owner);

class Nfs4Server {
 public:
  /// `state_dir` (empty: none) keeps the stable client records: which clients (by their
  /// co_ownerid) held state, so that after a restart they may reclaim it (RFC 8881 8.4.2). With
  /// records from a previous run the server starts in a grace period (Limits::grace_seconds): those
  /// clients reclaim opens (CLAIM_PREVIOUS) and locks (LOCK reclaim) until their
  /// RECLAIM_COMPLETE, and anything that would make new state gets NFS4ERR_GRACE; after it,
  /// reclaims get NFS4ERR_NO_GRACE. The grace period ends early once every recorded client has
  /// sent RECLAIM_COMPLETE, is extended once (by up to a lease) while a recorded client is still
  /// reclaiming at its end, and the records of clients that did not come back go at its end.
  explicit Nfs4Server(NfsServer& files, v4::Limits limits = {}, std::string state_dir = {});
  /// Closes the descriptors of the delegations' leases and of the lock owners (their host
  /// locks go with them) and takes itself out of the v3 server's before_change (one v4 server
  /// per v3 server: the last one made is asked).
  ~Nfs4Server();
  Nfs4Server(const Nfs4Server&) = delete;
  Nfs4Server& operator=(const Nfs4Server&) = delete;

  /// One call of the NFS program version 4 (NULL or COMPOUND).
  void handle(const CallContext& ctx, std::span<const std::uint8_t> call, RpcReply& out);
  /// Whether `call` is an RPC call of program 100003 version 4 (for the transport's dispatch).
  static bool is_v4(std::span<const std::uint8_t> call);

  Nfs4Stats stats() const {
    std::lock_guard g(mu_);
    Nfs4Stats s = st_;
    std::lock_guard w(rec_mu_);
    s.records_writes = rec_writes_;
    s.records_waits = rec_waits_;
    s.records_error = !state_error_.empty() || !rec_error_.empty();
    return s;
  }
  /// The counts and the tables' sizes without waiting (for a poll loop): false, and nothing
  /// read, while a COMPOUND holds the server.
  bool try_stats(Nfs4Stats& s, std::size_t& clients, std::size_t& sessions,
                 std::size_t& states) const {
    std::unique_lock g(mu_, std::try_to_lock);
    if (!g.owns_lock()) return false;
    s = st_;
    {
      std::lock_guard w(rec_mu_);
      s.records_writes = rec_writes_;
      s.records_waits = rec_waits_;
      s.records_error = !state_error_.empty() || !rec_error_.empty();
    }
    clients = clients_.size();
    sessions = sessions_.size();
    states = states_.size();
    return true;
  }
  std::size_t clients() const {
    std::lock_guard g(mu_);
    return clients_.size();
  }
  /// One client as an administrator lists it (knfsd's /proc/fs/nfsd/clients/*/info and states,
  /// which `nfsdclnts` prints).
  struct ClientInfo {
    std::uint64_t clientid = 0;
    std::vector<std::uint8_t> ownerid;  ///< co_ownerid, at most kListOwnerBytes of it
    v4::Principal principal;
    bool confirmed = false, reclaim_complete = false, back_channel = false;
    std::size_t sessions = 0, opens = 0, locks = 0, delegations = 0, revoked = 0;
    std::int64_t renewed_ago = 0;  ///< seconds since its lease was last renewed
  };
  static constexpr std::size_t kListOwnerBytes = 64;
  /// Every client (at most `max`, the longest-renewed last; `total` says how many there are)
  /// without waiting: false, nothing read, while a COMPOUND holds the server.
  bool try_client_list(std::vector<ClientInfo>& out, std::size_t& total,
                       std::size_t max = 256) const;
  /// The list as lines of text (a header, a line per client, a line when some were left out).
  static std::string format_clients(const std::vector<ClientInfo>& list, std::size_t total);
  std::size_t sessions() const {
    std::lock_guard g(mu_);
    return sessions_.size();
  }
  std::size_t states() const {
    std::lock_guard g(mu_);
    return states_.size();
  }
  /// A CB_COMPOUND for the transport to send on connection `conn` (RFC 8167: an RPC call in the
  /// forward connection's reverse direction).
  struct Callback {
    std::uint64_t conn = 0;
    std::uint32_t xid = 0;
    std::vector<std::uint8_t> msg;
  };
  /// The calls to send now (at most one per session: its back channel has one slot). Never
  /// waits (for a poll loop): nothing while a COMPOUND holds the server.
  std::vector<Callback> take_callbacks();
  /// For a poll loop, which must not wait for a COMPOUND: a REPLY (or a closed connection) kept
  /// for the next COMPOUND, take_callbacks or tick to act on (at most kInbox; beyond: dropped,
  /// counted as a bad reply, and the recall's timeout covers it).
  void post_reply(std::uint64_t conn, std::span<const std::uint8_t> reply);
  void post_closed(std::uint64_t conn);
  static constexpr std::size_t kInbox = 64;
  /// Blocked lock waiters (LOCK DENIED for READW_LT/WRITEW_LT) remembered per client, for
  /// CB_NOTIFY_LOCK when the conflicting range goes; beyond, not remembered (the client polls).
  static constexpr std::size_t kMaxLockWaiters = 64;
  /// Files with waiters a host process's lock refused, watched (one descriptor each) at most,
  /// and how many of them tick asks the host about each second. Beyond: the waiter is
  /// remembered for v4 releases alone (counted), and the client retries on its own (Linux:
  /// after 30 s when OPEN said OPEN4_RESULT_MAY_NOTIFY_LOCK).
  static constexpr std::size_t kMaxHostWaitFiles = 256;
  static constexpr std::size_t kHostChecksPerTick = 64;
  /// Delegated files watched (inotify) for host metadata changes at most (v4::Limits::watches).
  static constexpr std::size_t kMaxWatches = 8192;
  /// A recall is revoked (and a back channel call given up) after a lease, but never more than
  /// this (--lease-time 3600 would have writers wait an hour for a silent client).
  static constexpr std::int64_t kRecallMaxSeconds = 90;
  /// A REPLY the client sent on `conn`; false (counted, dropped) when no call of that xid is out
  /// on that connection or the reply does not decode.
  bool callback_reply(std::uint64_t conn, std::span<const std::uint8_t> reply);
  /// Timeouts: a recall unanswered for a lease revokes its delegation; a CB_COMPOUND unanswered
  /// for a lease marks its back channel down (CB_PATH_DOWN until the client binds one again).
  /// Never waits: false, nothing done, while a COMPOUND holds the server.
  bool tick();
  /// The connection closed: the back channels bound to it are down, their calls lost.
  void connection_closed(std::uint64_t conn);
  /// Whether the transport carries calls to the client (set before the first call). Without it
  /// no back channel is granted, no delegation either, and SEQUENCE reports no CB_PATH_DOWN (the
  /// client could not mend it).
  bool backchannel = false;
  /// Whether OPEN grants read delegations at all (`--delegations off`: never). Even when on, one
  /// is granted only where the host gives a read lease on the file (leases_usable(), the file
  /// not open for writing anywhere, the caller its owner or the process holding CAP_LEASE): a
  /// writer anywhere (a local process, NFSv3, another v4 client) breaks the lease and the
  /// server recalls the delegation.
  bool delegations = true;
  /// Whether the host gives file leases at all (fs.leases-enable, and the lease-break signal's
  /// handler installed); without, no delegation is granted.
  static bool leases_usable();
  /// The signal a lease break is reported with (F_SETSIG); its handler only counts.
  static int lease_signal();
  /// Whether the server is in its grace period now (it may end it: time, or all reclaimed).
  bool in_grace() {
    std::lock_guard g(mu_);
    return grace_locked();
  }
  /// The clients the records name (co_ownerids): kept, and from the previous run.
  std::size_t records() const {
    std::lock_guard g(mu_);
    return records_.size();
  }
  /// Why the records could not be read or written (empty: fine).
  std::string state_error() const {
    std::lock_guard g(mu_);
    std::lock_guard w(rec_mu_);
    return state_error_.empty() ? rec_error_ : state_error_;
  }
  /// Waits until the records as they are now are on disk (tests; a shutdown does it itself).
  void sync_records();
  /// The records file is rewritten by a thread of its own, never under the server's lock nor
  /// on the caller's (a poll loop's tick) thread, at most once per this many milliseconds: what
  /// changed meanwhile goes in the next rewrite (the last text wins), so that clients churning
  /// their ids cost one rewrite per interval, not an fsync each.
  std::atomic<std::uint32_t> records_interval_ms{200};
  /// A RECLAIM_COMPLETE is answered only once its client's record is on disk (a client told
  /// RECLAIM_COMPLETE that then sees the server crash must be able to reclaim after the
  /// restart): its reply is held (CallWorker::hold_done: the worker thread goes on; called
  /// elsewhere, the caller waits) and its rewrite comes no later than this many milliseconds
  /// after the one before (every RECLAIM_COMPLETE waiting then goes in one rewrite), so that
  /// the rewrites stay bounded (50 a second) and a churning client waits for its own.
  std::atomic<std::uint32_t> records_urgent_ms{20};
  /// Tests: runs on the writer thread before each rewrite.
  std::function<void()> records_hook;
  /// Where the grace period's start and end are told (the service: stderr); none: untold.
  std::function<void(const std::string&)> log;
  /// Seconds of a monotonic clock (leases); tests replace it.
  std::function<std::int64_t()> now;
  /// Milliseconds of a monotonic clock (the CB_RECALL resend back-off); tests replace it.
  std::function<std::int64_t()> now_ms;
  std::uint32_t max_io = 1u << 20;  ///< maxread, maxwrite
  /// Tests: runs in each READ, WRITE and COMMIT where the file I/O runs, without the server's
  /// lock (a slow disk's stand-in).
  std::function<void()> io_hook;

 private:
  struct Compound;
  using Other = std::array<std::uint8_t, 12>;
  void compound(Compound& c, XdrDecoder& d, XdrEncoder& e, RpcReply& out);
  v4::Status op(Compound& c, std::uint32_t op, XdrDecoder& d, XdrEncoder& e, RpcReply& out,
                bool last);
  // Sessions and clients.
  v4::Status exchange_id(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status create_session(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status sequence(Compound& c, XdrDecoder& d, XdrEncoder& e, std::uint32_t nops);
  v4::Status destroy_session(Compound& c, XdrDecoder& d);
  v4::Status destroy_clientid(Compound& c, XdrDecoder& d);
  void forget_client(std::uint64_t clientid);
  /// Whether a client record holds state or a live lease (another principal may not take it).
  bool in_use(const v4::Client& cl) const;
  /// Counts `delta` bytes of state to the client (and the total); room(): whether `more` fit.
  void charge(std::uint64_t clientid, std::ptrdiff_t delta);
  bool room(const v4::Client& cl, std::size_t more) const;
  /// Forgets clients whose lease ran out (a courteous server keeps them until room is needed).
  void reap_expired();
  /// Forgets clients unrenewed for Limits::courtesy_seconds (once a minute, from tick()).
  void reap_courteous(std::int64_t t);
  // Files.
  v4::Status current(Compound& c, NfsServer::Resolved& r);
  v4::Status getattr(Compound& c, XdrDecoder& d, XdrEncoder& e);
  void encode_attrs(XdrEncoder& e, const v4::Bitmap& want, const NfsServer::Resolved& r,
                    const v3::Fh* fh, std::uint32_t rdattr_error = 0, bool pseudo = false);
  // The pseudo-root (RFC 8881 7.3): with --export /srv/export, PUTROOTFH is a read-only
  // directory "/" holding "srv" holding the export, so that a client mounts ADDR:/srv/export
  // (as over v3) or ADDR:/. Its handles are depth-numbered and name no file of the host.
  v3::Fh pseudo_fh(std::size_t depth) const;
  /// The depth of a pseudo-root handle (0: "/"), or nullopt for any other handle.
  std::optional<std::size_t> pseudo_depth(const v3::Fh& fh) const;
  /// A directory's attributes for the pseudo directory at `depth`.
  NfsServer::Resolved pseudo_attrs(std::size_t depth) const;
  /// The handle below pseudo directory `depth` named `name`: the next one, or the export's root.
  std::optional<v3::Fh> pseudo_lookup(std::size_t depth, const std::string& name) const;
  std::vector<std::string> export_parts_;  ///< "/srv/export": {"srv", "export"}
  v4::Status lookup(Compound& c, XdrDecoder& d);
  v4::Status lookupp(Compound& c);
  v4::Status access(Compound& c, XdrDecoder& d, XdrEncoder& e);
  // Opens, I/O and the name space.
  struct SetAttrs;
  v4::Status decode_sattr(XdrDecoder& d, SetAttrs& a);
  v4::Status apply(const NfsServer::Resolved& r, const SetAttrs& a, v4::Bitmap& set);
  /// The state `sid` names for I/O on `file` (nullptr for the anonymous and bypass stateids).
  v4::Status check_stateid(Compound& c, v4::Stateid sid, const NfsServer::Resolved* file,
                           v4::State** out);
  v4::Stateid new_state(v4::State st);
  /// Whether a v4 open for writing of `file` lives; when none does any more, the open-file
  /// cache lets its descriptor for writing go (write_open_gone).
  bool write_open(const v4::FileKey& file) const;
  void write_open_gone(const v4::FileKey& file);
  void drop_state(const Other& o);
  /// Forgets the client holding a conflicting range when its lease ran out (a courteous
  /// server keeps an expired client's locks only until somebody else wants them).
  bool expired_holder(const v4::Owner& holder);
  v4::Status open(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status close(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status open_downgrade(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status read(Compound& c, XdrDecoder& d, XdrEncoder& e, RpcReply& out, bool last);
  v4::Status write(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status commit(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status create(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status remove(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status rename(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status link(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status readdir(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status readlink(Compound& c, XdrEncoder& e);
  v4::Status setattr(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status lock(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status lockt(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status locku(Compound& c, XdrDecoder& d, XdrEncoder& e);
  /// The lock owner's range as a host OFD lock on its own open file description (so that local
  /// processes, and anything else locking the file on the host, and v4 clients exclude each
  /// other): kOk, kErrDenied (the holder encoded, a host process's as client 0), DELAY...
  v4::Status host_lock(v4::State& ls, const NfsServer::Resolved& r, bool write, std::uint64_t start,
                       std::uint64_t end, XdrEncoder& e);
  /// Puts the owner's host locks over [start, end] back as its table says.
  void host_resync(v4::State& ls, std::uint64_t start, std::uint64_t end);
  /// A host lock (not a v4 client's, which the table knows) conflicting with the range, as the
  /// owner `who` sees it; encoded when there is one.
  bool host_conflict(const v4::Owner& who, const NfsServer::Resolved& r, bool write,
                     std::uint64_t start, std::uint64_t end, XdrEncoder& e);
  v4::Status free_stateid(Compound& c, XdrDecoder& d);
  v4::Status test_stateid(Compound& c, XdrDecoder& d, XdrEncoder& e);
  // The back channel and delegations.
  v4::Status bind_conn(Compound& c, XdrDecoder& d, XdrEncoder& e);
  v4::Status backchannel_ctl(Compound& c, XdrDecoder& d);
  v4::Status delegreturn(Compound& c, XdrDecoder& d);
  /// Starts the recall of the delegations on `file` that `clientid` conflicts with (0: every
  /// client's); true when one is still out (the caller answers NFS4ERR_DELAY).
  bool recall_conflicting(const v4::FileKey& file, std::uint64_t clientid);
  /// The same for a v4 operation, which then answers NFS4ERR_DELAY (counted).
  bool recall_delays(const v4::FileKey& file, std::uint64_t clientid) {
    const bool wait = recall_conflicting(file, clientid);
    st_.recall_delays += wait;
    return wait;
  }
  /// The v3 server's before_change: recalls every delegation of the file.
  bool v3_change(std::uint64_t dev, std::uint64_t ino);
  /// A read lease on `file` for a delegation: its descriptor, or -1 (no delegation then).
  int take_lease(const NfsServer::Resolved& file, std::uint64_t clientid);
  /// Whether the client's state may hold one more host descriptor (Limits::host_fds); taken:
  /// counts it.
  bool fd_room(std::uint64_t clientid) const;
  void fd_taken(std::uint64_t clientid, std::ptrdiff_t n);
  std::size_t host_fds_ = 0;
  std::map<std::uint32_t, std::size_t> host_fds_by_peer_;  ///< by the clients' source address
  /// Recalls the delegations whose lease the kernel broke since the last look: when the
  /// signal's count moved, or always (`force`: tick(), once a second, in case no thread of the
  /// process could take the signal).
  void poll_leases(bool force = false);
  /// Closes what the state holds on the host (lease, lock descriptor).
  void release(v4::State& st);
  // The grace period and the stable client records.
  bool grace_locked();
  /// Whether this client may reclaim now (in grace, recorded, before its RECLAIM_COMPLETE).
  bool may_reclaim(std::uint64_t clientid);
  /// Whether no previous run's record of the client's co_ownerid names another principal.
  bool owns_record(const v4::Client& cl) const;
  /// Whether `caller` is the principal the previous run's record of `ownerid` names, and
  /// `holder` (who holds the id now) is not.
  bool rightful(const std::vector<std::uint8_t>& ownerid, const v4::Principal& caller,
                const v4::Principal& holder) const {
    const auto p = previous_.find(ownerid);
    return p != previous_.end() && p->second && *p->second == caller && !(*p->second == holder);
  }
  void record(const v4::Client& cl, bool add);
  void write_records();  ///< marks them to be written
  /// Builds the records' text (under mu_) and hands it to the writer thread: no file I/O here.
  void flush_records();
  bool records_dirty_ = false;
  /// The writer thread (started when there is a state directory) and what it is handed: the
  /// latest text and its generation; it writes the newest one, the older ones are skipped.
  void records_writer();
  bool write_records_file(const std::string& text, std::string& err);
  mutable std::mutex rec_mu_;  ///< only around these: never held while mu_ is wanted
  std::condition_variable rec_cv_;
  std::string rec_text_, rec_error_;
  std::uint64_t rec_gen_ = 0, rec_written_ = 0, rec_writes_ = 0;
  bool rec_stop_ = false;
  std::thread rec_thread_;
  /// A reply held until the records of generation `first` are written: its release.
  std::uint64_t rec_urgent_ = 0;  ///< the newest generation somebody waits for
  std::vector<std::pair<std::uint64_t, std::function<void()>>> rec_waiters_;
  std::uint64_t rec_waits_ = 0;  ///< replies that waited for the records' disk
  /// The generation of the records text handed over last, if it is not on disk yet (else 0).
  std::uint64_t records_pending() const;
  /// Holds the caller's reply (or waits) until the records of generation `gen` are written.
  void await_records(std::uint64_t gen);
  /// Queues the CB_RECALLs that can go now (a session with a free back channel slot): visits
  /// only the clients with recalls waiting, each one's few sessions, and the first due recall.
  void pump();
  /// A recall to be sent (again): into its client's queue, by when it is due.
  void queue_recall(const Other& id, v4::State& st);
  void unqueue_recall(const Other& id, v4::State& st);
  /// A CB_RECALL that was out is lost (DELAY, timeout, closed or moved connection, destroyed
  /// session): sent again.
  void resend_recall(const Other& id);
  /// The CB_COMPOUNDs out for which `lost` holds are forgotten, their recalls sent again.
  template <class Pred>
  void resend_lost_recalls(Pred lost) {
    for (auto p = pending_.begin(); p != pending_.end();) {
      if (!lost(p->second)) {
        ++p;
        continue;
      }
      const Other deleg = p->second.deleg;
      if (deleg == Other{}) ++st_.notify_lost;  // a CB_NOTIFY_LOCK: not sent again
      p = pending_.erase(p);
      resend_recall(deleg);
    }
  }
  /// Blocked lock waiters: by file, the owner (its client inside) and the file's handle; the
  /// count of each client's; and the CB_NOTIFY_LOCKs waiting for a free back channel slot.
  struct Waiter {
    v4::Owner owner;
    std::vector<std::uint8_t> fh;
    /// A host lock refused it (not one in the table): tick asks the host for its range.
    bool host = false;
    bool write = false;
    std::uint64_t start = 0, end = 0;
  };
  std::multimap<v4::FileKey, Waiter> lock_waiters_;
  std::map<std::uint64_t, std::size_t> waiters_of_;
  std::map<std::uint64_t, std::deque<Waiter>> notify_;
  /// The waiter remembered (or already), or null: beyond its client's kMaxLockWaiters.
  Waiter* add_waiter(const v4::FileKey& file, const v4::Owner& owner,
                     const std::vector<std::uint8_t>& fh);
  /// Files with waiters a host lock refused: a descriptor of each (its own open file
  /// description, holding no lock) for F_OFD_GETLK, at most kMaxHostWaitFiles; `host_next_`:
  /// where the next tick's checks begin (kHostChecksPerTick files a tick, in turn).
  std::map<v4::FileKey, int> host_wait_fd_;
  v4::FileKey host_next_{};
  /// A waiter a host lock refused on `r` (the LOCK's file): remembered with its range and the
  /// file's descriptor opened when none is yet.
  void add_host_waiter(const v4::FileKey& file, const v4::Owner& owner,
                       const std::vector<std::uint8_t>& fh, const NfsServer::Resolved& r,
                       bool write, std::uint64_t start, std::uint64_t end);
  /// tick: the host asked (F_OFD_GETLK, an in-kernel lock table look-up as F_GETLEASE is) for
  /// the ranges of host-refused waiters; a file where one is free has its waiters told.
  void check_host_waiters();
  /// The file's locks changed (a range went): its waiters are told.
  void wake_waiters(const v4::FileKey& file);
  void drop_waiters(std::uint64_t clientid);
  /// Host metadata changes of delegated files (inotify on each delegated file, by its lease
  /// descriptor): watched while a delegation of the file lives; an event recalls them, but for
  /// a change the server made itself for the holder (`self_change_`, a second).
  int inotify_fd_ = -1;
  std::map<int, v4::FileKey> watch_file_;
  std::map<v4::FileKey, std::pair<int, std::size_t>> watch_of_;  ///< its wd, delegations
  std::map<v4::FileKey, std::pair<std::uint64_t, std::int64_t>> self_change_;
  /// False (counted: `unwatched`) when no watch could be added: then no delegation.
  bool watch(const v4::FileKey& file, int lease_fd);
  void unwatch(const v4::FileKey& file);
  void poll_watches();
  void mark_self(const v4::FileKey& file, std::uint64_t clientid);
  /// The recalls waiting to be sent, by client, by when due (ms); and each client's sessions.
  std::map<std::uint64_t, std::multimap<std::int64_t, Other>> waiting_;
  std::multimap<std::uint64_t, v4::SessionId> client_sessions_;
  void unindex_session(std::uint64_t clientid, const v4::SessionId& sid);
  /// The delegation each lease descriptor stands for (the lease-break signal names the fd).
  std::map<int, Other> lease_index_;
  void revoke(const Other& id, v4::State& st);
  std::uint32_t seq_flags(const v4::Session& s) const;

  struct PendingCb {
    std::uint64_t conn = 0;
    v4::SessionId session{};
    Other deleg{};
    std::int64_t sent = 0;
  };
  std::map<std::uint32_t, PendingCb> pending_;  ///< CB_COMPOUNDs out, by xid
  std::map<Other, std::uint64_t> recalls_;      ///< delegations being recalled: their client
  std::vector<Callback> outbox_;
  bool reply_locked(std::uint64_t conn, std::span<const std::uint8_t> reply);
  void closed_locked(std::uint64_t conn);
  void drain_inbox();
  std::mutex inbox_mu_;  ///< only around inbox_: never held while mu_ is wanted
  std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> inbox_;  ///< empty: closed
  std::uint64_t inbox_dropped_ = 0;
  std::uint32_t next_cb_xid_ = 1;
  std::uint64_t lease_breaks_seen_ = 0;  ///< the lease-break signal count last looked at
  std::int64_t lease_break_s_ = 45;      ///< fs.lease-break-time
  bool leases_ok_ = false;               ///< leases_usable() when made
  /// Files whose delegations were recalled lately (when): no new one for kNoRegrantSeconds, so
  /// that a writer waiting out a recall is not starved by new readers (knfsd's bloom filter).
  std::map<v4::FileKey, std::int64_t> recalled_;
  static constexpr std::int64_t kNoRegrantSeconds = 30;
  /// A client that let a delegation be revoked gets none until it has freed every revoked one
  /// and this long has passed (knfsd stops delegating while a client's callbacks fail).
  static constexpr std::int64_t kRevokedNoDelegSeconds = 300;
  static constexpr std::int64_t kCbBackoffFirstMs = 100, kCbBackoffMaxMs = 10000;
  /// Stamps `file` recalled now (no new delegation of it for kNoRegrantSeconds).
  void mark_recalled(const v4::FileKey& file);
  static constexpr std::size_t kMaxRecalled = 4096;
  std::atomic<std::size_t> delegs_{0};  ///< delegation states held (the v3 check's fast path)
  std::string state_dir_, state_error_;
  int state_fd_ = -1;  ///< the state directory, opened once (O_NOFOLLOW, checked)
  void open_state_dir();
  /// The co_ownerids of clients holding state, and who made each (nullopt: an older server's
  /// record, without one); a line each in the file, after the id: kRecordTail bytes at most.
  using Records = std::map<std::vector<std::uint8_t>, std::optional<v4::Principal>>;
  static constexpr std::size_t kRecordTail = 48;
  Records records_;
  Records previous_;             ///< the previous run's, not yet reclaimed
  std::int64_t grace_end_ = -1;  ///< -1: starts at the first call
  bool grace_extended_ = false;  ///< its one extension given
  std::int64_t courtesy_checked_ = 0;
  /// Whether a recorded client is back and reclaiming (confirmed, its lease live, no
  /// RECLAIM_COMPLETE yet): what extends the grace period.
  bool still_reclaiming() const;
  std::size_t grace_clients_ = 0;  ///< recorded clients when it began

  NfsServer& files_;
  v4::Limits lim_;
  mutable std::mutex mu_;
  Nfs4Stats st_;
  std::map<std::uint64_t, v4::Client> clients_;
  std::map<v4::SessionId, v4::Session> sessions_;
  std::map<Other, v4::State> states_;
  std::map<v4::FileKey, v4::FileLocks> locks_;
  /// The stateids of each file (OPEN, LOCK and CLOSE look at one file's, not every state).
  std::multimap<v4::FileKey, Other> by_file_;
  std::size_t bytes_ = 0;   ///< every client's charged state bytes
  std::uint64_t boot_ = 0;  ///< the high half of client ids: this server instance
  std::uint32_t next_client_ = 1, next_session_ = 1;
  std::uint64_t next_state_ = 1;
  v4::Verifier boot_verf_{};
  std::uint64_t root_dev_ = 0, root_ino_ = 0;  ///< the export's root
};

}  // namespace roce::nfs
