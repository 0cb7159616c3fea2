/// @file
/// An NFSv3 server (RFC 1813) and MOUNT v3 over a directory of the host: RPC calls in, RPC
/// replies out, no transport. READ's data is returned apart from the reply (the reduced data
/// item of RFC 8166/8267), so that the transport can put it in the client's write chunk or
/// inline.
///
/// File handles are the file system's own (name_to_handle_at), with the export's id and a keyed
/// MAC (SipHash-2-4, the key kept in a trusted xattr on the export's root): they survive a
/// restart, a forged one is refused, and what one opens (open_by_handle_at, which needs
/// CAP_DAC_READ_SEARCH) is checked to be beneath the export's root before it is used. Without
/// that capability (or on a file system without handles) the server falls back to a bounded
/// table of the paths it handed out, resolved beneath the root with openat2 (RESOLVE_BENEATH |
/// RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV), whose handles do not survive a restart.
///
/// Authorization is exports(5)'s: a client address list, ro or rw, root_squash or all_squash to
/// anonuid/anongid. Each call runs with the caller's uid, gid and groups as the calling thread's
/// file system identity (setfsuid, setfsgid, setgroups: per thread), so that the kernel makes
/// every permission decision as for a local user; the previous identity is back when handle()
/// returns. handle() and handle_mount() may run on several threads at once.
///
/// Procedures: all 22 of NFSv3. Other programs get PROG_UNAVAIL, other versions PROG_MISMATCH.
#pragma once

#include <sys/stat.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "apps/nfs/nfs3.h"
#include "apps/nfs/rpc.h"
#include "dataplane/wire/bytes.h"

namespace roce::nfs {

/// What the transport knows about a call: who sent it, and on which connection (0: unknown; an
/// NFSv4.1 back channel is bound to a connection the transport names here).
struct CallContext {
  wire::Ipv4Addr peer;
  std::uint64_t conn = 0;
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
/// `err` on an unknown option or a bad value. exports(5)'s other common options are accepted
/// (docs/nfs.md "Export options"): those that ask for what this server does not do (secure,
/// async, wdelay, subtree_check, nohide, crossmnt, fsid=) add a line to `warnings` saying so.
bool parse_export_options(std::string_view s, ExportOptions& o, std::string& err,
                          std::vector<std::string>* warnings = nullptr);
/// Parses a client list ("192.0.2.0/24,192.0.2.0/255.255.255.0,198.18.0.5", "*" for everyone)
/// into `o.clients`; false and `err` on a bad address, prefix or netmask.
bool parse_clients(std::string_view s, ExportOptions& o, std::string& err);

struct RpcReply {
  std::vector<std::uint8_t> msg;      ///< the RPC reply without the payload
  std::vector<std::uint8_t> payload;  ///< READ's data: a write chunk, or inline after `msg`
  bool has_payload = false;
};

struct NfsServerStats {
  std::uint64_t calls = 0, errors = 0, garbage = 0, bytes_read = 0, bytes_written = 0;
  std::uint64_t denied = 0;  ///< AUTH_ERROR: a bad credential, a client not listed
  std::map<std::uint32_t, std::uint64_t> by_proc;
};

/// How file handles are resolved: the file system's own handles when the process may open them
/// (CAP_DAC_READ_SEARCH), else a table of paths; kPathTable forces the table (tests).
enum class HandleMode { kAuto, kPathTable };

class NfsServer {
 public:
  /// Serves the directory `root` (which must exist) as export `export_path` (trailing slashes
  /// dropped): MNT of that path or of a directory beneath it.
  NfsServer(std::string root, std::string export_path = "/", ExportOptions opts = {},
            HandleMode mode = HandleMode::kAuto);
  ~NfsServer();
  NfsServer(const NfsServer&) = delete;
  NfsServer& operator=(const NfsServer&) = delete;

  /// One call of the NFS program (100003 v3); any other program is refused as RPC says.
  void handle(const CallContext& ctx, std::span<const std::uint8_t> call, RpcReply& out);
  /// One call of the MOUNT program (100005 v3). Reads only what the constructor set (and counts
  /// its refusals atomically): it may run on another thread than handle().
  void handle_mount(const CallContext& ctx, std::span<const std::uint8_t> call, RpcReply& out);

  v3::Fh root_fh() const { return root_fh_; }
  /// What MOUNT calls the export ("/srv/export"); NFSv4's pseudo-root leads to it.
  const std::string& export_path() const { return export_; }
  NfsServerStats stats() const {
    std::lock_guard g(stats_mu_);
    return st_;
  }
  /// Whether handles are the file system's own (they survive a restart of the server); when
  /// not, handle_note() says why.
  bool persistent_handles() const { return kernel_handles_ && key_persistent_; }
  const std::string& handle_note() const { return handle_note_; }
  /// Whether READDIR cookies stay valid while the directory changes (else the verifier names
  /// the directory's mtime too).
  bool stable_cookies() const { return stable_cookies_; }
  std::uint64_t mount_denied() const { return mount_denied_.load(std::memory_order_relaxed); }
  /// The export's options now (a copy: set_options() may replace them meanwhile).
  ExportOptions options() const { return *opts(); }
  /// Replaces the export's options (a reload): calls that start after it use them; a call
  /// under way finishes with those it started with or the new ones, field by field.
  void set_options(ExportOptions o) {
    auto p = std::make_shared<const ExportOptions>(std::move(o));
    std::lock_guard g(opts_mu_);
    opts_ = std::move(p);
  }
  /// Whether the export lists `peer` now (the transport's door, the port mapper's UDP).
  bool allows(wire::Ipv4Addr peer) const { return opts()->allows(peer); }
  /// False when the process may not take other ids (no CAP_SETUID/CAP_SETGID): a call whose
  /// identity is not the process's own then gets SYSTEM_ERR.
  bool acts_as_callers() const { return acts_as_callers_; }
  std::uint32_t max_io = 1u << 20;  ///< FSINFO rtmax and wtmax
  /// The NFS versions the service serves (--versions): a call of NFS v3 when v3 is not served,
  /// and of any version neither is (the service hands v4 calls here when v4 is not served), get
  /// PROG_MISMATCH naming the served ones (knfsd's vers3=n: 4..4).
  bool v3_served = true, v4_served = true;
  /// The path table's bounds (fallback mode only: an inode and its path under the root); the
  /// least recently used is forgotten beyond either, and its handle is stale from then on.
  std::size_t max_handles = 65536;
  std::size_t max_handle_bytes = 16u << 20;  ///< the paths' bytes
  std::size_t handles() const {
    std::lock_guard g(table_mu_);
    return paths_.size();
  }
  /// MOUNT's list of who mounted what (DUMP), at most this many entries (the oldest goes).
  std::size_t max_mount_entries = 1024;
  /// Keeps MOUNT's list in file `path` (mountd's rmtab: "client:path" lines), so that DUMP
  /// (`showmount -a`) still lists the clients after a restart: reads what is there (at most
  /// max_mount_entries lines, malformed ones skipped), and rewrites it whole (a temporary file
  /// renamed over it) at each change. Empty: in memory only. False when the file cannot be
  /// read or written (the list then lives in memory only).
  bool keep_mounts_in(const std::string& path);
  /// Open-file cache for READ, WRITE and COMMIT (a descriptor per file, opened once, shared by
  /// the calls and threads): at most this many; one unused for `file_idle_ms` is closed, and a
  /// file's entry goes when the file is removed or renamed over through the server.
  std::size_t max_open_files = 1024;
  std::uint32_t file_idle_ms = 2000;
  std::size_t open_files() const {
    std::lock_guard g(files_mu_);
    return files_.size();
  }
  /// Closes every cached descriptor now (the fuzz target counts descriptors between calls).
  void close_files() {
    std::lock_guard g(files_mu_);
    files_.clear();
  }

  // The NFSv4 server's way in (nfs4_server.h): the same handles, checks and identities as v3.
  struct Resolved {
    int fd = -1;  ///< O_PATH, the caller's to close
    struct stat st {};
    std::string rel;  ///< path-table mode: the path under the root
  };
  /// What `fh` names, opened O_PATH beneath the export's root; kOk, kErrStale or why not.
  v3::Status resolve(const v3::Fh& fh, Resolved& r);
  /// The handle of `name` in `dir` (of `dir` itself when empty); nullopt when it has none.
  std::optional<v3::Fh> handle_in(const Resolved& dir, const std::string& name,
                                  const struct stat& st);
  /// `r` opened again for I/O with `flags`, as READ and WRITE do (with the owner's override
  /// unless `owner_override` is false: NFSv4.1's OPEN of an existing file).
  v3::Status open_for_io(const Resolved& r, int flags, int& fd, bool owner_override = true);
  /// NFSv4's READ, WRITE and COMMIT: a descriptor of the regular file `r` from the open-file
  /// cache (v3's), the caller's permission asked as v3 asks it. `keep` false: a descriptor
  /// opened for writing is used for this call alone, not cached (while cached it keeps the
  /// host's read leases, hence delegations, away). `hold` keeps `fd` open while used.
  v3::Status io_file(const Resolved& r, bool write, bool keep, std::shared_ptr<const void>& hold,
                     int& fd);
  /// Lets the cache's descriptor of the file go if it is open for writing (the last NFSv4 open
  /// for writing of it closed).
  void drop_write_file(std::uint64_t dev, std::uint64_t ino);
  /// A rename in the export (path-table mode keeps its paths right).
  void moved(const std::string& from, const std::string& to) { renamed(from, to); }
  /// Runs `fn` as the credential's identity (the export's squash applied, as handle() does);
  /// false when the credential is malformed or the identity cannot be taken. resolve() and
  /// open_for_io() within `fn` act as handle()'s do.
  bool run_as(const rpc::OpaqueAuth& cred, const std::function<void()>& fn);
  const v3::Verf& write_verf() const { return write_verf_; }
  /// Asked before a call changes a regular file's data, attributes or names (WRITE, SETATTR,
  /// REMOVE, RENAME of it or over it, LINK, CREATE truncating it) with its device and inode:
  /// true while the change must wait (an NFSv4 read delegation of it is being recalled), and
  /// the call gets NFS3ERR_JUKEBOX, as knfsd answers. Set once before the first call (the v4
  /// server sets it); may run on several threads at once.
  std::function<bool(std::uint64_t dev, std::uint64_t ino)> before_change;

 private:
  struct Obj;
  struct Call;
  class Identity;
  struct Cred {
    std::uint32_t uid = 0, gid = 0;
    std::vector<std::uint32_t> groups;
  };
  /// The identity a credential maps to under the export's squash options; false when the
  /// credential is malformed.
  bool credential(const rpc::OpaqueAuth& a, Cred& c) const;
  /// The handle's body (the file system's handle, or an inode number in path-table mode) once
  /// its export id and MAC are checked; false for a handle this server did not make.
  bool open_fh(const v3::Fh& fh, std::uint32_t& type, std::vector<std::uint8_t>& body) const;
  v3::Fh seal(std::uint32_t type, std::span<const std::uint8_t> body) const;
  /// Opens what `fh` names beneath the root (O_PATH); kOk, kErrStale, or kErrJukebox when out
  /// of descriptors or memory.
  v3::Status find(Call& c, const v3::Fh& fh, Obj& o);
  /// Whether MOUNT's `path` is the export or beneath it; `rel` the rest, normalised ("" for the
  /// export itself).
  bool beneath_export(const std::string& path, std::string& rel) const;
  /// The MOUNT path of `rel` beneath the export.
  std::string join_export(const std::string& rel) const;
  /// Whether `fd` (opened from a handle) is beneath the export's root: kOk, kErrStale, or
  /// kErrJukebox when out of descriptors to tell.
  v3::Status beneath(int fd, const struct stat& st) const;
  /// Opens `o` again for I/O with `flags` (the same inode or kErrStale); the owner of a file may
  /// read and write it whatever its mode says, as knfsd allows (NFSD_MAY_OWNER_OVERRIDE).
  v3::Status reopen(Call& c, const Obj& o, int flags, bool owner_override, int& fd);
  /// The handle of `name` in `dir` (st its attributes), or of `dir` itself when name is empty.
  std::optional<v3::Fh> handle_of(const Obj& dir, const std::string& name, const struct stat& st);
  v3::Fh remember(const std::string& rel, std::uint64_t ino);
  bool rel_of(std::uint64_t ino, std::string& rel);
  void renamed(const std::string& from, const std::string& to);
  void dispatch(Call& c, std::uint32_t proc, XdrDecoder& d, XdrEncoder& e, RpcReply& out);
  v3::Verf cookie_verf(const Obj& dir) const;
  struct OpenFile;
  /// A descriptor of the regular file `o` from the cache (opened by the server if not there),
  /// for reading or also writing; the caller's permission is asked of the kernel first
  /// (faccessat2 as the caller), with knfsd's owner override. kOk, kErrAcces, kErrStale...
  v3::Status open_file(Call& c, const Obj& o, bool write, std::shared_ptr<const OpenFile>& f,
                       bool keep = true);
  /// Drops the cached descriptor of `name` in `dir` (before it is removed or replaced).
  void forget_file(int dirfd, const std::string& name);
  static thread_local Call* v4_call_;  ///< run_as()'s call, for resolve() and open_for_io()

  std::string root_, export_;
  std::string root_real_;  ///< the root's absolute path, as /proc/self/fd shows it
  std::shared_ptr<const ExportOptions> opts() const {
    std::lock_guard g(opts_mu_);
    return opts_;
  }
  mutable std::mutex opts_mu_;
  std::shared_ptr<const ExportOptions> opts_;  ///< replaced whole by set_options()
  int root_fd_ = -1;                           ///< O_PATH; every path is resolved beneath it
  int mount_fd_ = -1;  ///< the root opened for open_by_handle_at (which refuses O_PATH)
  std::uint64_t root_ino_ = 0, root_dev_ = 0;
  bool kernel_handles_ = false, key_persistent_ = false;
  bool stable_cookies_ = true;  ///< the file system's d_off survive changes (cookie_verf)
  std::string handle_note_;
  std::array<std::uint8_t, 16> key_{};
  std::uint32_t export_id_ = 0;
  v3::Fh root_fh_;
  struct Remembered {
    std::string rel;
    std::list<std::uint64_t>::iterator lru;
  };
  mutable std::mutex table_mu_;
  std::unordered_map<std::uint64_t, Remembered> paths_;  ///< inode -> path under the root
  std::list<std::uint64_t> lru_;                         ///< most recently used first
  std::size_t path_bytes_ = 0;
  bool acts_as_callers_ = false;
  v3::Verf write_verf_{};
  mutable std::mutex stats_mu_;
  NfsServerStats st_;
  std::atomic<std::uint64_t> mount_denied_{0};  ///< MNT3ERR_ACCES answers
  /// Directories a walk up ".." found beneath the root (inode -> until when, steady ns), for
  /// those whose path is too long for the kernel to name (beneath()).
  mutable std::mutex walked_mu_;
  mutable std::unordered_map<std::uint64_t, std::uint64_t> walked_;
  static constexpr std::size_t kMaxWalked = 65536;
  mutable std::mutex files_mu_;
  struct FileKey {
    std::uint64_t dev, ino;
    friend bool operator==(const FileKey&, const FileKey&) = default;
  };
  struct FileKeyHash {
    std::size_t operator()(const FileKey& k) const { return k.ino * 0x9e3779b97f4a7c15ull ^ k.dev; }
  };
  struct CachedFile {
    std::shared_ptr<const OpenFile> file;
    std::uint64_t used_ns = 0;
  };
  std::unordered_map<FileKey, CachedFile, FileKeyHash> files_;
  std::uint64_t files_swept_ns_ = 0;
  std::mutex mount_mu_;
  std::list<std::pair<std::string, std::string>> mounts_;  ///< (client, path) for DUMP
  std::string rmtab_;  ///< where mounts_ is kept (keep_mounts_in); empty: nowhere
  /// Rewrites rmtab_ from mounts_ (mount_mu_ held).
  void save_mounts();
};

}  // namespace roce::nfs
