/// @file
/// The port mapper's answer for the NFS service (RFC 1833): PMAP v2 GETPORT and DUMP, RPCBIND
/// v3 and v4 GETADDR and DUMP (v4 GETVERSADDR too), so that mount.nfs finds MOUNT (and NFS)
/// without mountport=, mountproto= and mountvers=, and `rpcinfo` lists NFS on netid "rdma".
/// Pure: a call in, a reply out, from a fixed table of what the service offers. The listeners
/// (kernel TCP and UDP, port 111 by default) are the service's (nfs_service.h).
///
/// Where the host runs rpcbind on port 111 already (Debian and RHEL do whenever nfs-common or
/// nfs-utils is installed), the service registers its programs with it instead, as mountd
/// does (RpcbindClient: RPCBPROC_SET and UNSET over its local socket or loopback TCP), from a
/// thread of its own that tries again while rpcbind is not up yet (RpcbindRegistrar).
#pragma once

#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace roce::nfs {

constexpr std::uint32_t kPortmapProgram = 100000;
constexpr std::uint16_t kPortmapPort = 111;

/// One program the service offers: on netid "tcp", "udp" or "rdma", at `address`:`port`.
struct PortmapEntry {
  std::uint32_t prog = 0, vers = 0;
  std::string netid;
  std::string address;  ///< dotted IPv4
  std::uint16_t port = 0;
  std::string owner = "superuser";  ///< RPCBIND's r_owner in DUMP
};

/// RFC 1833's universal address of `e`: "h1.h2.h3.h4.p1.p2".
std::string universal_address(const PortmapEntry& e);

/// Answers one port mapper call (any version 2..4) from `table`; empty `reply` when the call
/// has not even an XID. Procedures that change the table (SET, UNSET) are refused (the table is
/// the service's own: false); others get PROC_UNAVAIL, other programs PROG_UNAVAIL, other
/// versions PROG_MISMATCH 2..4.
void portmap_reply(const std::vector<PortmapEntry>& table, std::span<const std::uint8_t> call,
                   std::vector<std::uint8_t>& reply);

/// One entry of the host's rpcbind as RPCBPROC_DUMP lists it.
struct RpcbEntry {
  std::uint32_t prog = 0, vers = 0;
  std::string netid, addr, owner;  ///< addr: a universal address
};

/// A client of the host's rpcbind (RPCBIND version 4 over a stream): registers entries with
/// RPCBPROC_SET and takes them away again with RPCBPROC_UNSET when destroyed. It speaks to
/// rpcbind's local socket (`unix_path`, the owner then the caller's uid) or, when that is
/// missing, to loopback TCP `tcp_port` (0: never) from a reserved source port (rpcbind accepts
/// SET and UNSET only from those). Each call waits at most `timeout_ms`: it runs when the
/// service starts and stops, or on the registrar's thread, never on the poll loop's path.
///
/// rpcbind's UNSET takes away every entry of the program, version and netid, whatever its
/// address (and from root, whoever's): before each UNSET the client asks rpcbind (DUMP) and
/// takes an entry away only while it is the one this client registered (same program, version,
/// netid, universal address and owner), never a host mountd's or knfsd's that replaced it.
class RpcbindClient {
 public:
  std::string unix_path = "/run/rpcbind.sock";
  std::uint16_t tcp_port = 111;
  int timeout_ms = 1000;
  std::function<void(const std::string&)> log;
  /// DUMP's reply is read up to this many bytes (fragment by fragment); beyond, "the table is
  /// larger than N" (failure_text()).
  std::size_t max_reply = std::size_t{4} << 20;
  /// Root: an entry of another uid (a squat, not a host mountd) is taken away (UNSET) and ours
  /// registered. Otherwise it is only warned about (kTaken).
  bool privileged = ::geteuid() == 0;

  RpcbindClient() = default;
  ~RpcbindClient() { unregister_all(); }
  RpcbindClient(const RpcbindClient&) = delete;
  RpcbindClient& operator=(const RpcbindClient&) = delete;

  enum class Result {
    kRegistered,  ///< ours now (or already: left by an earlier run at the same address)
    kTaken,       ///< somebody else's entry of that program, version and netid is there
    kRefused,     ///< rpcbind said no (SET from an unreserved port, not root...)
    kNoAnswer,    ///< rpcbind did not answer (not running, or starting)
  };
  /// Registers `e` unless rpcbind holds another address for its program, version and netid
  /// (kTaken: `holder` is that entry). An entry at `e`'s own address (left behind by an earlier
  /// run that was killed) is taken over. An entry at another address whose owner is neither
  /// "superuser" nor this process's uid (any user may SET over rpcbind's local socket: a squat)
  /// is taken away first when `privileged` (counted: squats_removed()), else kTaken with a
  /// warning. When DUMP's reply is larger than max_reply, SET is tried without looking. Says
  /// what happened through `log`.
  Result register_entry(const PortmapEntry& e, RpcbEntry* holder = nullptr);
  /// UNSET of every entry registered here that rpcbind still holds as registered (reverse order);
  /// of every entry registered here when rpcbind's DUMP fails (too large, no answer).
  void unregister_all();
  /// Entries of other uids taken away (register_entry).
  std::uint64_t squats_removed() const { return squats_removed_; }
  /// Why the last call failed, for a log line: no answer, a reply over max_reply, a bad reply.
  std::string failure_text() const;
  /// The owner rpcbind records for this process over its local socket.
  static std::string self_owner();
  const std::vector<PortmapEntry>& registered() const { return done_; }
  /// RPCBPROC_DUMP: every entry rpcbind holds; nothing when it does not answer.
  std::optional<std::vector<RpcbEntry>> dump();
  /// Whether rpcbind answers a NULL call.
  bool answers() { return call(0, {}).has_value(); }
  /// One RPCBIND v4 call (procedure, XDR arguments); the reply's results, or nothing.
  std::optional<std::vector<std::uint8_t>> call(std::uint32_t proc,
                                                const std::vector<std::uint8_t>& args);

 private:
  int connect_rpcbind();
  bool unset(const PortmapEntry& x);
  enum class Failure { kNone, kNoAnswer, kTooLarge, kBadReply } failure_ = Failure::kNone;
  std::uint64_t squats_removed_ = 0;
  std::vector<PortmapEntry> done_;  ///< owner: rpcbind's r_owner of it after SET
  std::uint32_t xid_ = 0x52424e44;
};

/// A one-line "program 100005 version 3 tcp 127.0.0.1.78.80" for logs.
std::string describe(const PortmapEntry& e);
/// The entry of `e`'s program, version and netid in `list`, if any.
const RpcbEntry* find_entry(const std::vector<RpcbEntry>& list, const PortmapEntry& e);

/// Registers a service's entries with the host's rpcbind on a thread of its own, for a bounded
/// time: the first try is made by start() itself (the caller learns of a taken entry at once);
/// those rpcbind did not answer for are tried again every `retry_ms` until `wait_ms` has passed
/// since start() (rpcbind starting after the service: boot order, a restart). With `watch`
/// (the service answers as its own port mapper) nothing is tried until rpcbind's local socket
/// answers within the window, then everything is (a host rpcbind that came up later, or that
/// listens on IPv6 or its local socket only). Destroying it stops the thread and unregisters
/// what it registered (RpcbindClient's check: only entries still its own).
class RpcbindRegistrar {
 public:
  struct Options {
    std::string unix_path = "/run/rpcbind.sock";
    std::uint16_t tcp_port = 111;  ///< 0: the local socket only
    int timeout_ms = 1000;
    int retry_ms = 1000;
    int wait_ms = 60000;
    bool watch = false;
  };
  RpcbindRegistrar(Options o, std::vector<PortmapEntry> entries,
                   std::function<void(const std::string&)> log);
  ~RpcbindRegistrar();
  RpcbindRegistrar(const RpcbindRegistrar&) = delete;
  RpcbindRegistrar& operator=(const RpcbindRegistrar&) = delete;
  /// Makes the first try (unless `watch`) and starts the thread when anything is left to try.
  /// Returns the entries somebody else holds (the caller decides: fail or warn).
  std::vector<std::pair<PortmapEntry, RpcbEntry>> start();
  /// Counts for the service's stats: registered now, taken by others, given up (no answer in
  /// the window), tries made.
  struct Counts {
    std::uint64_t registered = 0, taken = 0, given_up = 0, tries = 0;
    std::uint64_t squats_removed = 0;  ///< other uids' entries taken away (root only)
  };
  Counts counts() const;
  /// Waits until the thread has nothing left to try (tests).
  void wait_idle();

 private:
  void run();
  /// One try of every entry still pending; true when none is left.
  bool try_all(std::vector<std::pair<PortmapEntry, RpcbEntry>>* taken);
  Options o_;
  std::function<void(const std::string&)> log_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, idle_ = false;
  std::vector<PortmapEntry> pending_;
  Counts counts_;
  RpcbindClient client_;  ///< its thread's while it runs; the destructor's after
  std::thread thread_;
};

}  // namespace roce::nfs
