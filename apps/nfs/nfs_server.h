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
#include <list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "apps/nfs/nfs3.h"
#include "apps/nfs/rpc.h"
#include "dataplane/wire/bytes.h"

namespace roce::nfs {

/// What the transport knows about a call: who sent it.
struct CallContext {
  wire::Ipv4Addr peer;
};

/// One entry of an export's client list: an address and a prefix (0.0.0.0/0 is everyone).
struct ClientNet {
  std::uint32_t addr = 0, mask = 0;
  std::string text;  ///< as written, for MOUNT's EXPORT list
};

/// An export's options, as exports(5) names them. The defaults are knfsd's: read-only, root
/// squashed to the anonymous uid and gid 65534, every client.
struct ExportOptions {
  bool rw = false;
  bool root_squash = true;
  bool all_squash = false;
  std::uint32_t anonuid = 65534, anongid = 65534;
  std::vector<ClientNet> clients{ClientNet{0, 0, "*"}};
  bool allows(wire::Ipv4Addr a) const;
};

/// Applies an exports(5)-like option string ("rw,root_squash,anonuid=1000") to `o`; false and
/// `err` on an unknown option or a bad value.
bool parse_export_options(std::string_view s, ExportOptions& o, std::string& err);
/// Parses a client list ("192.0.2.0/24,198.18.0.5", "*" for everyone) into `o.clients`; false
/// and `err` on a bad address or prefix.
bool parse_clients(std::string_view s, ExportOptions& o, std::string& err);

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
  NfsServer(std::string root, std::string export_path = "/", ExportOptions opts = {});
  ~NfsServer();
  NfsServer(const NfsServer&) = delete;
  NfsServer& operator=(const NfsServer&) = delete;

  /// One call of the NFS program (100003 v3); any other program is refused as RPC says.
  void handle(const CallContext& ctx, std::span<const std::uint8_t> call, RpcReply& out);
  /// One call of the MOUNT program (100005 v3).
  void handle_mount(const CallContext& ctx, std::span<const std::uint8_t> call, RpcReply& out);

  v3::Fh root_fh() const;
  const NfsServerStats& stats() const { return st_; }
  const ExportOptions& options() const { return opts_; }
  std::uint32_t max_io = 1u << 20;  ///< FSINFO rtmax and wtmax
  /// The file handles remembered (an inode and its path under the root); the least recently
  /// used is forgotten beyond either bound, and its handle is stale from then on.
  std::size_t max_handles = 65536;
  std::size_t max_handle_bytes = 16u << 20;  ///< the paths' bytes
  std::size_t handles() const { return paths_.size(); }

 private:
  bool path_of(const v3::Fh& fh, std::string& path) const;
  v3::Fh remember(const std::string& path, std::uint64_t ino);
  void dispatch(std::uint32_t proc, XdrDecoder& d, XdrEncoder& e, RpcReply& out);

  std::string root_, export_;
  ExportOptions opts_;
  std::uint64_t root_ino_ = 0;
  std::map<std::uint64_t, std::string> paths_;  ///< inode -> path under root_
  v3::Verf write_verf_{};
  NfsServerStats st_;
};

}  // namespace roce::nfs
