/// @file
/// The port mapper's answer for the NFS service (RFC 1833): PMAP v2 GETPORT and DUMP, RPCBIND
/// v3 and v4 GETADDR and DUMP (v4 GETVERSADDR too), so that mount.nfs finds MOUNT (and NFS)
/// without mountport=, mountproto= and mountvers=, and `rpcinfo` lists NFS on netid "rdma".
/// Pure: a call in, a reply out, from a fixed table of what the service offers. The listeners
/// (kernel TCP and UDP, port 111 by default) are the service's (nfs_service.h).
///
/// Where the host runs rpcbind on port 111 already (Debian and RHEL do whenever nfs-common or
/// nfs-utils is installed), the service registers its programs with it instead, as mountd
/// does (RpcbindClient: RPCBPROC_SET and UNSET over its local socket or loopback TCP).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
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

/// A client of the host's rpcbind (RPCBIND version 4 over a stream): registers entries with
/// RPCBPROC_SET and takes them away again with RPCBPROC_UNSET when destroyed. It speaks to
/// rpcbind's local socket (`unix_path`, the owner then the caller's uid) or, when that is
/// missing, to loopback TCP `tcp_port` from a reserved source port (rpcbind accepts SET and
/// UNSET only from those). Each call waits at most `timeout_ms`: it runs when the service starts
/// and stops, never on the poll loop's path.
class RpcbindClient {
 public:
  std::string unix_path = "/run/rpcbind.sock";
  std::uint16_t tcp_port = 111;
  int timeout_ms = 1000;
  std::function<void(const std::string&)> log;

  RpcbindClient() = default;
  ~RpcbindClient() { unregister_all(); }
  RpcbindClient(const RpcbindClient&) = delete;
  RpcbindClient& operator=(const RpcbindClient&) = delete;

  /// Registers `e`. An entry of the same program, version and netid already there is replaced
  /// when its address is `e`'s (left behind by an earlier run that was killed), else kept (and
  /// false: someone else serves it). False with a logged reason when rpcbind does not answer.
  bool register_entry(const PortmapEntry& e);
  /// UNSET of every entry registered here, in reverse order.
  void unregister_all();
  const std::vector<PortmapEntry>& registered() const { return done_; }
  /// One RPCBIND v4 call (procedure, XDR arguments); the reply's results, or nothing.
  std::optional<std::vector<std::uint8_t>> call(std::uint32_t proc,
                                                const std::vector<std::uint8_t>& args);

 private:
  int connect_rpcbind();
  std::vector<PortmapEntry> done_;
  std::uint32_t xid_ = 0x52424e44;
};

}  // namespace roce::nfs
