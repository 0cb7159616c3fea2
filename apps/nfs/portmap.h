/// @file
/// The port mapper's answer for the NFS service (RFC 1833): PMAP v2 GETPORT and DUMP, RPCBIND
/// v3 and v4 GETADDR, so that mount.nfs finds MOUNT (and NFS) without mountport=, mountproto=
/// and mountvers=. Pure: a call in, a reply out, from a fixed table of what the service offers.
/// The listeners (kernel TCP and UDP, port 111 by default) are the service's (nfs_service.h).
#pragma once

#include <cstdint>
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
};

/// Answers one port mapper call (any version 2..4) from `table`; empty `reply` when the call
/// has not even an XID. Procedures that change the table (SET, UNSET) are refused (the table is
/// the service's own: false); others get PROC_UNAVAIL, other programs PROG_UNAVAIL, other
/// versions PROG_MISMATCH 2..4.
void portmap_reply(const std::vector<PortmapEntry>& table, std::span<const std::uint8_t> call,
                   std::vector<std::uint8_t>& reply);

}  // namespace roce::nfs
