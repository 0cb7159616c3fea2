/// @file
/// ONC RPC over TCP (RFC 5531 section 11: record marking) for the MOUNT protocol, which NFSv3
/// over RDMA still reaches over TCP (mountd does not listen on RDMA): one blocking call at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/nfs/nfs3.h"

namespace roce::nfs {

/// MNT of `path` at `server` (IPv4) on TCP `port`; the root file handle, or nullopt and `err`.
std::optional<v3::Fh> mount_tcp(const std::string& server, std::uint16_t port,
                                const std::string& path, std::string& err);

/// One RPC call over a fresh TCP connection: sends `call` as one record, returns the reply's
/// record (fragments joined), or nullopt and `err`.
std::optional<std::vector<std::uint8_t>> rpc_tcp_call(const std::string& server,
                                                      std::uint16_t port,
                                                      const std::vector<std::uint8_t>& call,
                                                      std::string& err);

}  // namespace roce::nfs
