/// @file
/// An NFSv3 server (RFC 1813) and MOUNT v3 over a directory of the host: RPC calls in, RPC
/// replies out, no transport. READ's data is returned apart from the reply (the reduced data
/// item of RFC 8166/8267), so that the transport can put it in the client's write chunk or
/// inline. File handles name inodes; the server remembers the path of every inode it handed out.
///
/// Procedures: NULL, GETATTR, SETATTR, LOOKUP, ACCESS, READ, WRITE, CREATE, MKDIR, REMOVE,
/// RMDIR, READDIR, READDIRPLUS, FSSTAT, FSINFO, PATHCONF, COMMIT; the others answer
/// NFS3ERR_NOTSUPP. Other programs get PROG_UNAVAIL, other versions PROG_MISMATCH.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "apps/nfs/nfs3.h"
#include "apps/nfs/rpc.h"

namespace roce::nfs {

struct RpcReply {
  std::vector<std::uint8_t> msg;      ///< the RPC reply without the payload
  std::vector<std::uint8_t> payload;  ///< READ's data: a write chunk, or inline after `msg`
  bool has_payload = false;
};

struct NfsServerStats {
  std::uint64_t calls = 0, errors = 0, garbage = 0, bytes_read = 0, bytes_written = 0;
  std::map<std::uint32_t, std::uint64_t> by_proc;
};

class NfsServer {
 public:
  /// Serves the directory `root` (which must exist) as export `export_path`.
  NfsServer(std::string root, std::string export_path = "/");

  /// One call of the NFS program (100003 v3); any other program is refused as RPC says.
  void handle(std::span<const std::uint8_t> call, RpcReply& out);
  /// One call of the MOUNT program (100005 v3).
  void handle_mount(std::span<const std::uint8_t> call, RpcReply& out);

  v3::Fh root_fh() const;
  const NfsServerStats& stats() const { return st_; }
  std::uint32_t max_io = 1u << 20;  ///< FSINFO rtmax and wtmax

 private:
  bool path_of(const v3::Fh& fh, std::string& path) const;
  v3::Fh remember(const std::string& path, std::uint64_t ino);
  void dispatch(std::uint32_t proc, XdrDecoder& d, XdrEncoder& e, RpcReply& out);

  std::string root_, export_;
  std::uint64_t root_ino_ = 0;
  std::map<std::uint64_t, std::string> paths_;  ///< inode -> path under root_
  v3::Verf write_verf_{};
  NfsServerStats st_;
};

}  // namespace roce::nfs
