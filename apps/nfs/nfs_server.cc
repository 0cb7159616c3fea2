/// @file
/// NFSv3 and MOUNT over a host directory (nfs_server.h).
#include "apps/nfs/nfs_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace roce::nfs {

using namespace v3;

namespace {

constexpr std::uint8_t kFhMagic[4] = {'R', 'N', 'F', '3'};

Status from_errno(int e) {
  switch (e) {
    case EPERM:
      return kErrPerm;
    case ENOENT:
      return kErrNoent;
    case EACCES:
      return kErrAcces;
    case EEXIST:
      return kErrExist;
    case EXDEV:
      return kErrXdev;
    case ENOTDIR:
      return kErrNotdir;
    case ENXIO:
      return kErrNxio;
    case EISDIR:
      return kErrIsdir;
    case EINVAL:
      return kErrInval;
    case EFBIG:
      return kErrFbig;
    case ENOSPC:
      return kErrNospc;
    case EROFS:
      return kErrRofs;
    case EMLINK:
      return kErrMlink;
    case ENAMETOOLONG:
      return kErrNametoolong;
    case ENOTEMPTY:
      return kErrNotempty;
    case EDQUOT:
      return kErrDquot;
    default:
      return kErrIo;
  }
}

Fattr to_fattr(const struct stat& s) {
  Fattr a;
  a.type = S_ISDIR(s.st_mode)    ? kDir
           : S_ISLNK(s.st_mode)  ? kLnk
           : S_ISBLK(s.st_mode)  ? kBlk
           : S_ISCHR(s.st_mode)  ? kChr
           : S_ISSOCK(s.st_mode) ? kSock
           : S_ISFIFO(s.st_mode) ? kFifo
                                 : kReg;
  a.mode = s.st_mode & 07777;
  a.nlink = static_cast<std::uint32_t>(s.st_nlink);
  a.uid = s.st_uid;
  a.gid = s.st_gid;
  a.size = static_cast<std::uint64_t>(s.st_size);
  a.used = static_cast<std::uint64_t>(s.st_blocks) * 512;
  a.rdev1 = major(s.st_rdev);
  a.rdev2 = minor(s.st_rdev);
  a.fsid = s.st_dev;
  a.fileid = s.st_ino;
  a.atime = {static_cast<std::uint32_t>(s.st_atim.tv_sec),
             static_cast<std::uint32_t>(s.st_atim.tv_nsec)};
  a.mtime = {static_cast<std::uint32_t>(s.st_mtim.tv_sec),
             static_cast<std::uint32_t>(s.st_mtim.tv_nsec)};
  a.ctime = {static_cast<std::uint32_t>(s.st_ctim.tv_sec),
             static_cast<std::uint32_t>(s.st_ctim.tv_nsec)};
  return a;
}

bool bad_name(const std::string& n) {
  return n.empty() || n == "." || n == ".." || n.find('/') != std::string::npos ||
         n.find('\0') != std::string::npos;
}

constexpr std::size_t kMaxRel = 4095;       ///< PATH_MAX less its NUL
constexpr std::size_t kEntryOverhead = 64;  ///< what a remembered handle costs besides its path
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452  // Linux 6.6; glibc 2.36 does not name it
#endif

/// A descriptor closed at the end of its scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

/// `rel` ("" is the root) opened beneath `root`: no symbolic link in any component, no "..",
/// no other mount (openat2). -1 and errno on failure.
int open_beneath(int root, const std::string& rel, int flags) {
  open_how how{};
  how.flags = static_cast<std::uint64_t>(flags | O_NOFOLLOW | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  const char* p = rel.empty() ? "." : rel.c_str();
  for (int i = 0;; ++i) {  // EAGAIN: a rename raced the walk; the kernel asks to retry
    const long fd = ::syscall(SYS_openat2, root, p, &how, sizeof how);
    if (fd >= 0 || errno != EAGAIN || i == 3) return static_cast<int>(fd);
  }
}

/// A handle's path that no longer opens: gone, or a component is now a symbolic link, not a
/// directory or another file system, is stale; the rest (EACCES, EISDIR, ENXIO...) say why.
Status path_error(int err) {
  return err == ENOENT || err == ELOOP || err == EXDEV || err == ENOTDIR ? kErrStale
                                                                         : from_errno(err);
}

std::string proc_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

/// chmod of what `fd` (maybe O_PATH) refers to.
int chmod_fd(int fd, mode_t m) {
  if (::fchmod(fd, m) == 0) return 0;
  if (errno != EBADF) return errno;
  if (::syscall(SYS_fchmodat2, fd, "", m, AT_EMPTY_PATH) == 0) return 0;
  if (errno != ENOSYS && errno != EINVAL) return errno;
  return ::chmod(proc_path(fd).c_str(), m) == 0 ? 0 : errno;
}

int utimes_fd(int fd, const timespec ts[2]) {
  if (::utimensat(fd, "", ts, AT_EMPTY_PATH) == 0) return 0;
  if (errno != EINVAL) return errno;
  return ::utimensat(AT_FDCWD, proc_path(fd).c_str(), ts, 0) == 0 ? 0 : errno;
}

std::optional<Fattr> attr_of(int fd) {
  struct stat s;
  if (::fstat(fd, &s) != 0) return std::nullopt;
  return to_fattr(s);
}

std::string parent_of(const std::string& rel) {
  const std::size_t slash = rel.rfind('/');
  return slash == std::string::npos ? std::string() : rel.substr(0, slash);
}

std::string join(const std::string& rel, const std::string& name) {
  return rel.empty() ? name : rel + "/" + name;
}

void encode_fh_opt(XdrEncoder& e, const std::optional<Fh>& fh) {
  e.boolean(fh.has_value());
  if (fh) encode(e, *fh);
}

}  // namespace

bool ExportOptions::allows(wire::Ipv4Addr a) const {
  return std::any_of(clients.begin(), clients.end(),
                     [&](const ClientNet& c) { return (a.v & c.mask) == c.addr; });
}

bool parse_export_options(std::string_view s, ExportOptions& o, std::string& err,
                          std::vector<std::string>* warnings) {
  const auto warn = [&](std::string w) {
    if (warnings) warnings->push_back(std::move(w));
  };
  while (!s.empty()) {
    const std::size_t comma = s.find(',');
    const std::string_view opt = s.substr(0, comma);
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
    const std::size_t eq = opt.find('=');
    const std::string_view key = opt.substr(0, eq);
    const std::string_view val = eq == std::string_view::npos ? "" : opt.substr(eq + 1);
    const auto id = [&](std::uint32_t& out) {
      std::uint64_t n = 0;
      if (val.empty() || val.size() > 10) return false;
      for (char c : val) {
        if (c < '0' || c > '9') return false;
        n = n * 10 + static_cast<std::uint64_t>(c - '0');
      }
      if (n >= 0xffffffffu) return false;  // (uid_t)-1 is no id
      out = static_cast<std::uint32_t>(n);
      return true;
    };
    if (eq != std::string_view::npos && key != "anonuid" && key != "anongid" && key != "fsid" &&
        key != "sec") {
      err = "export option " + std::string(key) + " takes no value";
      return false;
    }
    if (key == "ro")
      o.rw = false;
    else if (key == "rw")
      o.rw = true;
    else if (key == "root_squash")
      o.root_squash = true;
    else if (key == "no_root_squash")
      o.root_squash = false;
    else if (key == "all_squash")
      o.all_squash = true;
    else if (key == "no_all_squash")
      o.all_squash = false;
    else if (key == "anonuid" || key == "anongid") {
      if (!id(key == "anonuid" ? o.anonuid : o.anongid)) {
        err = "export option " + std::string(key) + " needs a number in 0..4294967294, not '" +
              std::string(val) + "'";
        return false;
      }
    } else if (key == "sync" || key == "no_subtree_check" || key == "insecure" ||
               key == "no_wdelay" || key == "hide") {
      // What this server does anyway (docs/nfs.md "Export options").
    } else if (key == "sec") {
      if (val != "sys") {
        err = "export option sec=" + std::string(val) + ": only sec=sys (AUTH_SYS) is served";
        return false;
      }
    } else if (key == "secure") {
      warn(
          "export option secure: source ports are not checked (RDMA connections have none); "
          "--clients is the only address check");
    } else if (key == "async") {
      warn(
          "export option async: writes are still made stable as the client asks (FILE_SYNC, "
          "DATA_SYNC, COMMIT); async's early answer is not offered");
    } else if (key == "wdelay") {
      warn("export option wdelay: writes are not delayed to be gathered; each is done as it comes");
    } else if (key == "subtree_check") {
      warn(
          "export option subtree_check: handles name inodes; every call is resolved beneath the "
          "export's root anyway");
    } else if (key == "nohide" || key == "crossmnt") {
      warn("export option " + std::string(key) +
           ": file systems mounted inside the export are not served (NFS3ERR_ACCES)");
    } else if (key == "fsid") {
      if (val.empty()) {
        err = "export option fsid needs a value";
        return false;
      }
      warn("export option fsid=" + std::string(val) +
           ": ignored; file handles carry the inode number of the export's one file system");
    } else {
      err = "unknown export option '" + std::string(opt) +
            "' (ro, rw, root_squash, no_root_squash, all_squash, no_all_squash, anonuid=N, "
            "anongid=N; accepted with no effect here: sync, async, secure, insecure, wdelay, "
            "no_wdelay, subtree_check, no_subtree_check, hide, nohide, crossmnt, fsid=N, "
            "sec=sys; docs/nfs.md)";
      return false;
    }
  }
  return true;
}

bool parse_clients(std::string_view s, ExportOptions& o, std::string& err) {
  std::vector<ClientNet> out;
  while (true) {
    const std::size_t comma = s.find(',');
    const std::string_view c = s.substr(0, comma);
    if (c == "*") {
      out.push_back({0, 0, "*"});
    } else {
      const std::size_t slash = c.find('/');
      const std::string addr(c.substr(0, slash));
      in_addr a{};
      int len = 32;
      bool ok = ::inet_pton(AF_INET, addr.c_str(), &a) == 1;
      std::uint32_t netmask = 0;
      bool dotted = false;
      if (ok && slash != std::string_view::npos) {
        const std::string_view p = c.substr(slash + 1);
        if (p.find('.') != std::string_view::npos) {
          // addr/255.255.255.0, as exports(5) also writes it: a contiguous mask.
          in_addr m{};
          dotted = true;
          ok = ::inet_pton(AF_INET, std::string(p).c_str(), &m) == 1;
          netmask = ntohl(m.s_addr);
          ok = ok && (netmask & (~netmask >> 1)) == 0;  // ones then zeros
        } else {
          ok = !p.empty() && p.size() <= 2 &&
               std::all_of(p.begin(), p.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
          if (ok) len = std::stoi(std::string(p));
          ok = ok && len <= 32;
        }
      }
      if (!ok) {
        err = "bad client '" + std::string(c) +
              "': an IPv4 address, address/prefix, address/netmask or *";
        return false;
      }
      const std::uint32_t mask = dotted ? netmask : len == 0 ? 0 : ~0u << (32 - len);
      out.push_back({ntohl(a.s_addr) & mask, mask, std::string(c)});
    }
    if (comma == std::string_view::npos) break;
    s = s.substr(comma + 1);
  }
  o.clients = std::move(out);
  return true;
}

/// The calling thread's file system identity: switched to a caller's for one call, then back.
/// setfsuid, setfsgid and the raw setgroups are per thread on Linux (glibc's setgroups would
/// change every thread of roced). A file system uid other than 0 drops CAP_DAC_OVERRIDE,
/// CAP_FOWNER, CAP_CHOWN, CAP_FSETID and the other file capabilities, as for knfsd's threads.
class NfsServer::Identity {
 public:
  ~Identity() { restore(); }
  /// False (and nothing changed) when the kernel refuses: no CAP_SETUID/CAP_SETGID. The groups
  /// count as much as the ids: a caller with the thread's uid and gid but other groups is
  /// switched too (else it would borrow the server's groups).
  bool become(std::uint32_t uid, std::uint32_t gid, const std::vector<std::uint32_t>& groups) {
    restore();
    uid_ = static_cast<std::uint32_t>(::syscall(SYS_setfsuid, -1));
    gid_ = static_cast<std::uint32_t>(::syscall(SYS_setfsgid, -1));
    const long n = ::syscall(SYS_getgroups, 0, nullptr);
    groups_.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    if (n > 0 && ::syscall(SYS_getgroups, n, groups_.data()) != n) return false;
    // Already (an unprivileged roced, root): the same ids and the same groups, a list holding
    // the gid itself being the same as one without it.
    if (uid == uid_ && gid == gid_ && same_groups(groups, groups_, gid)) return true;
    groups_set_ = !same_groups(groups, groups_, ~0u);  // each change costs the kernel a few us
    if (groups_set_ && ::syscall(SYS_setgroups, groups.size(), groups.data()) != 0) return false;
    switched_ = true;
    ::syscall(SYS_setfsgid, gid);
    ::syscall(SYS_setfsuid, uid);
    if (static_cast<std::uint32_t>(::syscall(SYS_setfsgid, -1)) != gid ||
        static_cast<std::uint32_t>(::syscall(SYS_setfsuid, -1)) != uid) {
      restore();
      return false;
    }
    return true;
  }
  /// Whether `a` and `b` are the same set of groups, `but` left out of both.
  static bool same_groups(std::vector<std::uint32_t> a, std::vector<std::uint32_t> b,
                          std::uint32_t but) {
    for (auto* v : {&a, &b}) {
      std::erase(*v, but);
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    return a == b;
  }
  void restore() {
    if (!switched_) return;
    switched_ = false;
    ::syscall(SYS_setfsuid, uid_);
    ::syscall(SYS_setfsgid, gid_);
    if (groups_set_) ::syscall(SYS_setgroups, groups_.size(), groups_.data());
  }

 private:
  bool switched_ = false, groups_set_ = false;
  std::uint32_t uid_ = 0, gid_ = 0;
  std::vector<std::uint32_t> groups_;
};

/// What a handle names, opened O_PATH beneath the root, and its path and attributes.
struct NfsServer::Obj {
  Fd fd;
  std::string rel;
  struct stat st {};
  Fattr attr() const { return to_fattr(st); }
};

NfsServer::NfsServer(std::string root, std::string export_path, ExportOptions opts)
    : root_(std::move(root)), export_(std::move(export_path)), opts_(std::move(opts)) {
  root_fd_ = ::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct stat s;
  if (root_fd_ < 0 || ::fstat(root_fd_, &s) != 0 || !S_ISDIR(s.st_mode)) {
    if (root_fd_ >= 0) ::close(root_fd_);
    throw std::runtime_error("NFS export root " + root_ + " is not a directory");
  }
  root_ino_ = s.st_ino;
  root_dev_ = s.st_dev;
  {
    Identity probe;  // another uid and gid than ours, back at the end of the scope
    const std::uint32_t other = ::geteuid() == 12345 ? 12346 : 12345;
    acts_as_callers_ = probe.become(other, other, {});
  }
  const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
  for (int i = 0; i < 8; ++i)
    write_verf_[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(t >> (8 * i));
}

NfsServer::~NfsServer() { ::close(root_fd_); }

Fh NfsServer::remember(const std::string& rel, std::uint64_t ino) {
  Fh fh;
  fh.data.assign(kFhMagic, kFhMagic + 4);
  for (int i = 7; i >= 0; --i) fh.data.push_back(static_cast<std::uint8_t>(ino >> (8 * i)));
  if (ino == root_ino_ && rel.empty()) return fh;  // the root is always known
  auto it = paths_.find(ino);
  if (it != paths_.end()) {
    path_bytes_ -= it->second.rel.size();
    it->second.rel = rel;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  } else {
    lru_.push_front(ino);
    paths_.emplace(ino, Remembered{rel, lru_.begin()});
    path_bytes_ += kEntryOverhead;
  }
  path_bytes_ += rel.size();
  // Forget the least recently used beyond either bound: their handles are stale from now on.
  while (lru_.size() > 1 && (lru_.size() > max_handles || path_bytes_ > max_handle_bytes)) {
    const auto old = paths_.find(lru_.back());
    path_bytes_ -= old->second.rel.size() + kEntryOverhead;
    paths_.erase(old);
    lru_.pop_back();
  }
  return fh;
}

Fh NfsServer::root_fh() const { return const_cast<NfsServer*>(this)->remember("", root_ino_); }

bool NfsServer::rel_of(const Fh& fh, std::uint64_t& ino, std::string& rel) {
  if (fh.data.size() != 12 || !std::equal(kFhMagic, kFhMagic + 4, fh.data.begin())) return false;
  ino = 0;
  for (int i = 4; i < 12; ++i) ino = (ino << 8) | fh.data[static_cast<std::size_t>(i)];
  if (ino == root_ino_) {
    rel.clear();
    return true;
  }
  const auto it = paths_.find(ino);
  if (it == paths_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  rel = it->second.rel;
  return true;
}

Status NfsServer::find(const Fh& fh, Obj& o) {
  std::uint64_t ino = 0;
  if (!rel_of(fh, ino, o.rel)) return kErrStale;
  const int fd =
      o.rel.empty() ? ::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0) : open_beneath(root_fd_, o.rel, O_PATH);
  if (fd < 0) return path_error(errno);
  o.fd.reset(fd);
  if (::fstat(fd, &o.st) != 0 || o.st.st_ino != ino || o.st.st_dev != root_dev_) return kErrStale;
  return kOk;
}

Status NfsServer::reopen(const Obj& o, int flags, bool owner_override, int& fd) {
  fd = open_beneath(root_fd_, o.rel, flags | O_NONBLOCK);  // a FIFO must not block the server
  if (fd < 0 && errno == EACCES && owner_override && id_ && o.st.st_uid == cred_.uid) {
    // knfsd lets a file's owner read and write it whatever the mode (a file made 0444 by
    // open(O_CREAT) is written through the descriptor the client got). Only the open is the
    // server's: the I/O is the caller's again (a write still clears the setuid bit).
    id_->restore();
    fd = open_beneath(root_fd_, o.rel, flags | O_NONBLOCK);
    const int err = errno;
    if (!id_->become(cred_.uid, cred_.gid, cred_.groups)) {
      if (fd >= 0) ::close(fd);
      fd = -1;
      return kErrAcces;
    }
    errno = err;
  }
  if (fd < 0) return path_error(errno);
  struct stat s;
  if (::fstat(fd, &s) != 0 || s.st_ino != o.st.st_ino || s.st_dev != o.st.st_dev) {
    ::close(fd);
    fd = -1;
    return kErrStale;
  }
  return kOk;
}

bool NfsServer::credential(const rpc::OpaqueAuth& a, Cred& c) const {
  c = Cred{opts_.anonuid, opts_.anongid, {}};
  if (a.flavor == rpc::kAuthNone) return true;  // AUTH_NONE is the anonymous ids
  const auto s = rpc::parse_auth_sys(a);
  if (!s) return false;
  if (opts_.all_squash) return true;
  const auto squash = [&](std::uint32_t id, std::uint32_t anon) {
    // (uid_t)-1 is no id (setfsuid(-1) only asks); root_squash maps 0 to the anonymous id.
    return id == 0xffffffffu || (id == 0 && opts_.root_squash) ? anon : id;
  };
  c.uid = squash(s->uid, opts_.anonuid);
  c.gid = squash(s->gid, opts_.anongid);
  for (std::uint32_t g : s->gids) c.groups.push_back(squash(g, opts_.anongid));
  return true;
}

void NfsServer::handle(const CallContext& ctx, std::span<const std::uint8_t> call, RpcReply& out) {
  out = RpcReply{};
  XdrDecoder d(call);
  rpc::CallHeader h;
  XdrEncoder e(out.msg);
  rpc::ReplyHeader r;
  if (!rpc::decode(d, h)) {
    ++st_.garbage;
    if (!d.ok() || call.size() < 8) return;  // not even an XID: no reply
    r.xid = h.xid;
    r.stat = rpc::kMsgDenied;
    r.reject = rpc::kRpcMismatch;
    r.low = r.high = rpc::kRpcVersion;
    rpc::encode(e, r);
    return;
  }
  ++st_.calls;
  r.xid = h.xid;
  if (h.rpcvers != rpc::kRpcVersion) {
    r.stat = rpc::kMsgDenied;
    r.reject = rpc::kRpcMismatch;
    r.low = r.high = rpc::kRpcVersion;
    rpc::encode(e, r);
    return;
  }
  const auto deny = [&] {
    ++st_.denied;
    r.stat = rpc::kMsgDenied;
    r.reject = rpc::kAuthError;
    r.auth = rpc::kAuthBadCred;
    rpc::encode(e, r);
  };
  // Another flavor, a malformed AUTH_SYS, or (but for NULL) a client the export does not list:
  // AUTH_BADCRED, as knfsd answers (svcauth_unix_set_client).
  if (!credential(h.cred, cred_)) return deny();
  if (h.prog != kNfsProgram) {
    r.accept = rpc::kProgUnavail;
    rpc::encode(e, r);
    return;
  }
  if (h.proc != kNull && !opts_.allows(ctx.peer)) return deny();
  if (h.vers != kNfsVersion) {
    r.accept = rpc::kProgMismatch;
    r.low = r.high = kNfsVersion;
    rpc::encode(e, r);
    return;
  }
  if (h.proc > kCommit) {
    r.accept = rpc::kProcUnavail;
    rpc::encode(e, r);
    return;
  }
  ++st_.by_proc[h.proc];
  Identity id;
  if (h.proc != kNull && !id.become(cred_.uid, cred_.gid, cred_.groups)) {
    // roced lacks CAP_SETUID/CAP_SETGID: nothing is done as anybody else (docs/nfs.md).
    ++st_.errors;
    r.accept = rpc::kSystemErr;
    rpc::encode(e, r);
    return;
  }
  id_ = &id;
  rpc::encode(e, r);
  const std::size_t body = out.msg.size();
  dispatch(h.proc, d, e, out);
  id_ = nullptr;
  if (!d.ok()) {  // the arguments did not decode: GARBAGE_ARGS instead of a result
    ++st_.garbage;
    out.msg.resize(body - 4);
    out.payload.clear();
    out.has_payload = false;
    e.u32(rpc::kGarbageArgs);
  }
}

void NfsServer::dispatch(std::uint32_t proc, XdrDecoder& d, XdrEncoder& e, RpcReply& out) {
  const auto fail = [&](Status s) {
    ++st_.errors;
    e.u32(s);
  };
  const auto none = std::optional<Fattr>{};
  switch (proc) {
    case kNull:
      return;
    case kGetattr: {
      const Fh fh = decode_fh(d);
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(fh, o)) return fail(s);
      e.u32(kOk);
      encode(e, o.attr());
      return;
    }
    case kSetattr: {
      const Fh fh = decode_fh(d);
      const Sattr s = decode_sattr(d);
      if (d.boolean()) d.fixed(8);  // guard: ctime (not checked)
      if (!d.ok()) return;
      Obj o;
      if (const Status st = find(fh, o)) return fail(st), encode_wcc(e, none, none);
      const Fattr before = o.attr();
      if (!opts_.rw) return fail(kErrRofs), encode_wcc(e, before, before);
      // Never through a symbolic link: it may point out of the export.
      if (S_ISLNK(o.st.st_mode)) return fail(kErrInval), encode_wcc(e, before, before);
      // Each change as the caller: the kernel says who may chmod, chown and truncate.
      int err = s.mode ? chmod_fd(o.fd.get(), *s.mode & 07777) : 0;
      if (!err && (s.uid || s.gid) &&
          ::fchownat(o.fd.get(), "", s.uid ? *s.uid : static_cast<uid_t>(-1),
                     s.gid ? *s.gid : static_cast<gid_t>(-1), AT_EMPTY_PATH) != 0)
        err = errno;
      if (!err && s.size) {
        int fd = -1;
        if (const Status st = reopen(o, O_WRONLY, true, fd))
          return fail(st), encode_wcc(e, before, attr_of(o.fd.get()));
        Fd w(fd);
        if (::ftruncate(w.get(), static_cast<off_t>(*s.size)) != 0) err = errno;
      }
      if (!err && (s.atime_now || s.mtime_now)) {
        timespec ts[2];
        ts[0].tv_nsec = s.atime_now ? UTIME_NOW : UTIME_OMIT;
        ts[1].tv_nsec = s.mtime_now ? UTIME_NOW : UTIME_OMIT;
        ts[0].tv_sec = ts[1].tv_sec = 0;
        err = utimes_fd(o.fd.get(), ts);
      }
      if (err) ++st_.errors;
      e.u32(err ? from_errno(err) : kOk);
      encode_wcc(e, before, attr_of(o.fd.get()));
      return;
    }
    case kLookup: {
      const Fh dir = decode_fh(d);
      const std::string name = d.string(kMaxName);
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(dir, o)) return fail(s), encode_post_op(e, none);
      if (!S_ISDIR(o.st.st_mode)) return fail(kErrNotdir), encode_post_op(e, none);
      std::string rel;
      struct stat s;
      if (name == ".") {
        rel = o.rel, s = o.st;
      } else if (name == "..") {
        rel = parent_of(o.rel);
        Fd p(rel.empty() ? ::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0)
                         : open_beneath(root_fd_, rel, O_PATH));
        if (p.get() < 0 || ::fstat(p.get(), &s) != 0)
          return fail(kErrStale), encode_post_op(e, o.attr());
      } else if (bad_name(name)) {
        return fail(kErrInval), encode_post_op(e, o.attr());
      } else {
        rel = join(o.rel, name);
        if (rel.size() > kMaxRel) return fail(kErrNametoolong), encode_post_op(e, o.attr());
        if (::fstatat(o.fd.get(), name.c_str(), &s, AT_SYMLINK_NOFOLLOW) != 0)
          return fail(from_errno(errno)), encode_post_op(e, o.attr());
        // A file system mounted inside the export is not part of it (no crossmnt).
        if (s.st_dev != root_dev_) return fail(kErrAcces), encode_post_op(e, o.attr());
      }
      e.u32(kOk);
      encode(e, remember(rel, s.st_ino));
      encode_post_op(e, to_fattr(s));
      encode_post_op(e, o.attr());
      return;
    }
    case kAccess: {
      const Fh fh = decode_fh(d);
      const std::uint32_t want = d.u32();
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(fh, o)) return fail(s), encode_post_op(e, none);
      // What the caller may really do, asked of the kernel as the caller (AT_EACCESS: the
      // file system ids), mapped as knfsd maps ACCESS bits to permissions.
      constexpr std::uint32_t kRd = 1, kLook = 2, kMod = 4, kExt = 8, kDel = 0x10, kExec = 0x20;
      const bool dir = S_ISDIR(o.st.st_mode), reg = S_ISREG(o.st.st_mode);
      const auto may = [&](int mode) {
        return ::syscall(SYS_faccessat2, o.fd.get(), "", mode, AT_EACCESS | AT_EMPTY_PATH) == 0;
      };
      std::uint32_t got = 0;
      if ((want & kRd) && may(R_OK)) got |= kRd;
      if (dir) {
        if ((want & kLook) && may(X_OK)) got |= kLook;
        if ((want & (kMod | kExt | kDel)) && may(W_OK | X_OK)) got |= want & (kMod | kExt | kDel);
      } else if (reg) {
        if ((want & (kMod | kExt)) && may(W_OK)) got |= want & (kMod | kExt);
        if ((want & kExec) && may(X_OK)) got |= kExec;
      }
      if (!opts_.rw) got &= ~(kMod | kExt | kDel);
      e.u32(kOk);
      encode_post_op(e, o.attr());
      e.u32(got);
      return;
    }
    case kRead: {
      const Fh fh = decode_fh(d);
      const std::uint64_t off = d.u64();
      std::uint32_t count = d.u32();
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(fh, o)) return fail(s), encode_post_op(e, none);
      if (!S_ISREG(o.st.st_mode))
        return fail(S_ISDIR(o.st.st_mode) ? kErrIsdir : kErrInval), encode_post_op(e, o.attr());
      int fd = -1;
      if (const Status s = reopen(o, O_RDONLY, true, fd))
        return fail(s), encode_post_op(e, o.attr());
      Fd r(fd);
      count = std::min(count, max_io);
      out.payload.resize(count);
      const ssize_t n = ::pread(r.get(), out.payload.data(), count, static_cast<off_t>(off));
      const int err = errno;
      struct stat s;
      if (::fstat(r.get(), &s) != 0) s = o.st;
      if (n < 0) {
        out.payload.clear();
        return fail(from_errno(err)), encode_post_op(e, to_fattr(s));
      }
      out.payload.resize(static_cast<std::size_t>(n));
      out.has_payload = true;
      st_.bytes_read += static_cast<std::uint64_t>(n);
      e.u32(kOk);
      encode_post_op(e, to_fattr(s));
      e.u32(static_cast<std::uint32_t>(n));
      e.boolean(off + static_cast<std::uint64_t>(n) >= static_cast<std::uint64_t>(s.st_size));
      e.u32(static_cast<std::uint32_t>(n));  // the data's length; the data is the payload
      return;
    }
    case kWrite: {
      const Fh fh = decode_fh(d);
      const std::uint64_t off = d.u64();
      const std::uint32_t count = d.u32();
      const std::uint32_t how = d.u32();
      const auto data = d.opaque(max_io);
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(fh, o)) return fail(s), encode_wcc(e, none, none);
      const Fattr before = o.attr();
      if (!opts_.rw) return fail(kErrRofs), encode_wcc(e, before, before);
      if (count > data.size() || how > kFileSync)
        return fail(kErrInval), encode_wcc(e, before, before);
      if (!S_ISREG(o.st.st_mode))
        return fail(S_ISDIR(o.st.st_mode) ? kErrIsdir : kErrInval), encode_wcc(e, before, before);
      int fd = -1;
      if (const Status s = reopen(o, O_WRONLY, true, fd))
        return fail(s), encode_wcc(e, before, before);
      Fd w(fd);
      const ssize_t n = ::pwrite(w.get(), data.data(), count, static_cast<off_t>(off));
      const int err = errno;
      // Synchronous (the transport calls the server off the poll loop).
      if (n >= 0 && how != kUnstable) ::fdatasync(w.get());
      if (n < 0) return fail(from_errno(err)), encode_wcc(e, before, attr_of(w.get()));
      st_.bytes_written += static_cast<std::uint64_t>(n);
      e.u32(kOk);
      encode_wcc(e, before, attr_of(w.get()));
      e.u32(static_cast<std::uint32_t>(n));
      e.u32(how);
      e.fixed(write_verf_);
      return;
    }
    case kCreate:
    case kMkdir: {
      const Fh dir = decode_fh(d);
      const std::string name = d.string(kMaxName);
      Sattr s;
      std::uint32_t mode = kUnchecked;
      if (proc == kCreate) {
        mode = d.u32();
        if (mode == kExclusive)
          d.fixed(8);
        else if (mode <= kGuarded)
          s = decode_sattr(d);
        else
          d.fail();
      } else {
        s = decode_sattr(d);
      }
      if (!d.ok()) return;
      Obj o;
      if (const Status st = find(dir, o)) return fail(st), encode_wcc(e, none, none);
      if (!S_ISDIR(o.st.st_mode)) return fail(kErrNotdir), encode_wcc(e, none, none);
      const Fattr before = o.attr();
      if (!opts_.rw) return fail(kErrRofs), encode_wcc(e, before, before);
      if (bad_name(name)) return fail(kErrInval), encode_wcc(e, before, before);
      const std::string rel = join(o.rel, name);
      if (rel.size() > kMaxRel) return fail(kErrNametoolong), encode_wcc(e, before, before);
      int err = 0;
      // Made by the caller: owned by the caller's ids, with the kernel's rules for the mode.
      const mode_t m = s.mode ? (*s.mode & 07777) : (proc == kMkdir ? 0755 : 0644);
      Fd f;
      if (proc == kMkdir) {
        if (::mkdirat(o.fd.get(), name.c_str(), m) != 0) err = errno;
      } else {
        const int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                          (mode == kUnchecked ? 0 : O_EXCL);
        f.reset(::openat(o.fd.get(), name.c_str(), flags, m));
        if (f.get() < 0) err = errno;
        // EXCLUSIVE retried with the same verifier finds its own file: fine for one client.
        if (err == EEXIST && mode == kExclusive) err = 0;
        if (!err && f.get() >= 0) {
          if ((s.uid || s.gid) && ::fchown(f.get(), s.uid ? *s.uid : static_cast<uid_t>(-1),
                                           s.gid ? *s.gid : static_cast<gid_t>(-1)) != 0)
            err = errno;
          else if (s.size && ::ftruncate(f.get(), static_cast<off_t>(*s.size)) != 0)
            err = errno;
        }
      }
      if (err) return fail(from_errno(err)), encode_wcc(e, before, attr_of(o.fd.get()));
      struct stat a;
      const bool have = ::fstatat(o.fd.get(), name.c_str(), &a, AT_SYMLINK_NOFOLLOW) == 0;
      e.u32(kOk);
      encode_fh_opt(e, have ? std::optional<Fh>(remember(rel, a.st_ino)) : std::nullopt);
      encode_post_op(e, have ? std::optional<Fattr>(to_fattr(a)) : std::nullopt);
      encode_wcc(e, before, attr_of(o.fd.get()));
      return;
    }
    case kRemove:
    case kRmdir: {
      const Fh dir = decode_fh(d);
      const std::string name = d.string(kMaxName);
      if (!d.ok()) return;
      Obj o;
      if (const Status st = find(dir, o)) return fail(st), encode_wcc(e, none, none);
      if (!S_ISDIR(o.st.st_mode)) return fail(kErrNotdir), encode_wcc(e, none, none);
      const Fattr before = o.attr();
      if (!opts_.rw) return fail(kErrRofs), encode_wcc(e, before, before);
      if (bad_name(name)) return fail(kErrInval), encode_wcc(e, before, before);
      if (::unlinkat(o.fd.get(), name.c_str(), proc == kRmdir ? AT_REMOVEDIR : 0) != 0)
        return fail(from_errno(errno)), encode_wcc(e, before, attr_of(o.fd.get()));
      e.u32(kOk);
      encode_wcc(e, before, attr_of(o.fd.get()));
      return;
    }
    case kReaddir:
    case kReaddirplus: {
      const Fh dir = decode_fh(d);
      const std::uint64_t cookie = d.u64();
      d.fixed(8);
      std::uint32_t maxcount = d.u32();
      if (proc == kReaddirplus) maxcount = d.u32();  // dircount, then maxcount
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(dir, o)) return fail(s), encode_post_op(e, none);
      if (!S_ISDIR(o.st.st_mode)) return fail(kErrNotdir), encode_post_op(e, none);
      int fd = -1;
      if (const Status s = reopen(o, O_RDONLY | O_DIRECTORY, false, fd))
        return fail(s), encode_post_op(e, o.attr());
      DIR* dp = ::fdopendir(fd);
      if (!dp) {
        ::close(fd);
        return fail(from_errno(errno)), encode_post_op(e, o.attr());
      }
      std::vector<std::string> names;
      while (dirent* de = ::readdir(dp)) names.emplace_back(de->d_name);
      std::sort(names.begin(), names.end());  // the cookie is an index into this order
      const std::size_t status_at = out.msg.size();
      e.u32(kOk);
      encode_post_op(e, o.attr());
      e.fixed(Verf{});
      const std::size_t limit = std::min<std::size_t>(maxcount, 1u << 20);
      const std::size_t start = out.msg.size();
      std::uint64_t i = cookie;
      bool any = false;
      for (; i < names.size(); ++i) {
        const std::string& n = names[i];
        std::string rel;
        struct stat s;
        if (n == ".") {
          rel = o.rel, s = o.st;
        } else if (n == "..") {
          rel = parent_of(o.rel);
          Fd p(rel.empty() ? ::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0)
                           : open_beneath(root_fd_, rel, O_PATH));
          if (p.get() < 0 || ::fstat(p.get(), &s) != 0) continue;
        } else {
          rel = join(o.rel, n);
          if (::fstatat(::dirfd(dp), n.c_str(), &s, AT_SYMLINK_NOFOLLOW) != 0) continue;
        }
        const auto a = to_fattr(s);
        std::vector<std::uint8_t> ent;
        XdrEncoder x(ent);
        x.boolean(true);
        x.u64(a.fileid);
        x.string(n);
        x.u64(i + 1);
        if (proc == kReaddirplus) {
          encode_post_op(x, a);
          const bool handle = n != ".." && s.st_dev == root_dev_ && rel.size() <= kMaxRel;
          encode_fh_opt(x, handle ? std::optional<Fh>(remember(rel, a.fileid)) : std::nullopt);
        }
        if (out.msg.size() - start + ent.size() + 8 + 120 > limit) break;
        out.msg.insert(out.msg.end(), ent.begin(), ent.end());
        any = true;
      }
      ::closedir(dp);
      if (!any && i < names.size()) {  // not even one entry fits
        out.msg.resize(status_at);
        return fail(kErrToosmall), encode_post_op(e, o.attr());
      }
      e.boolean(false);
      e.boolean(i >= names.size());
      return;
    }
    case kFsstat: {
      const Fh fh = decode_fh(d);
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(fh, o)) return fail(s), encode_post_op(e, none);
      struct statvfs v;
      if (::fstatvfs(o.fd.get(), &v) != 0)
        return fail(from_errno(errno)), encode_post_op(e, o.attr());
      e.u32(kOk);
      encode_post_op(e, o.attr());
      e.u64(std::uint64_t{v.f_blocks} * v.f_frsize);
      e.u64(std::uint64_t{v.f_bfree} * v.f_frsize);
      e.u64(std::uint64_t{v.f_bavail} * v.f_frsize);
      e.u64(v.f_files);
      e.u64(v.f_ffree);
      e.u64(v.f_favail);
      e.u32(0);  // invarsec
      return;
    }
    case kFsinfo: {
      const Fh fh = decode_fh(d);
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(fh, o)) return fail(s), encode_post_op(e, none);
      e.u32(kOk);
      encode_post_op(e, o.attr());
      for (std::uint32_t v : {max_io, max_io, 4096u, max_io, max_io, 4096u, 32768u}) e.u32(v);
      e.u64(~0ull >> 1);
      e.u32(0);
      e.u32(1);     // time_delta 1 ns
      e.u32(0x1b);  // FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME
      return;
    }
    case kPathconf: {
      const Fh fh = decode_fh(d);
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(fh, o)) return fail(s), encode_post_op(e, none);
      e.u32(kOk);
      encode_post_op(e, o.attr());
      e.u32(32000);      // linkmax
      e.u32(255);        // name_max
      e.boolean(true);   // no_trunc
      e.boolean(true);   // chown_restricted
      e.boolean(false);  // case_insensitive
      e.boolean(true);   // case_preserving
      return;
    }
    case kCommit: {
      const Fh fh = decode_fh(d);
      d.u64();
      d.u32();
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(fh, o)) return fail(s), encode_wcc(e, none, none);
      const Fattr before = o.attr();
      if (!opts_.rw) return fail(kErrRofs), encode_wcc(e, before, before);
      if (!S_ISREG(o.st.st_mode)) return fail(kErrInval), encode_wcc(e, before, before);
      int fd = -1;
      if (const Status s = reopen(o, O_WRONLY, true, fd))
        return fail(s), encode_wcc(e, before, before);
      Fd w(fd);
      ::fsync(w.get());  // synchronous: the transport calls the server off the poll loop
      e.u32(kOk);
      encode_wcc(e, before, attr_of(w.get()));
      e.fixed(write_verf_);
      return;
    }
    default: {
      // READLINK, SYMLINK, MKNOD, RENAME, LINK: not served. Every result begins with the
      // status and (for these) an attribute or wcc block that may be empty.
      fail(kErrNotsupp);
      if (proc == kReadlink)
        encode_post_op(e, none);
      else if (proc == kLink)
        encode_post_op(e, none), encode_wcc(e, none, none);
      else if (proc == kRename)
        encode_wcc(e, none, none), encode_wcc(e, none, none);
      else
        encode_wcc(e, none, none);
      // The arguments are not decoded: consume them so that d stays ok().
      d.fixed(d.remaining() & ~std::size_t{3});
      return;
    }
  }
}

void NfsServer::handle_mount(const CallContext& ctx, std::span<const std::uint8_t> call,
                             RpcReply& out) {
  out = RpcReply{};
  XdrDecoder d(call);
  rpc::CallHeader h;
  XdrEncoder e(out.msg);
  rpc::ReplyHeader r;
  if (!rpc::decode(d, h)) return;
  r.xid = h.xid;
  if (h.prog != kMountProgram) {
    r.accept = rpc::kProgUnavail;
    rpc::encode(e, r);
    return;
  }
  if (h.vers != kMountVersion) {
    r.accept = rpc::kProgMismatch;
    r.low = r.high = kMountVersion;
    rpc::encode(e, r);
    return;
  }
  switch (h.proc) {
    case kMountNull:
      rpc::encode(e, r);
      return;
    case kMnt: {
      const std::string path = d.string(kMaxPath);
      if (!d.ok()) {
        r.accept = rpc::kGarbageArgs;
        rpc::encode(e, r);
        return;
      }
      rpc::encode(e, r);
      if (path != export_ && !(export_ == "/" && path.empty())) {
        e.u32(2);  // MNT3ERR_NOENT
        return;
      }
      if (!opts_.allows(ctx.peer)) {
        mount_denied_.fetch_add(1, std::memory_order_relaxed);
        e.u32(13);  // MNT3ERR_ACCES, as mountd answers a host the export does not list
        return;
      }
      e.u32(0);
      encode(e, root_fh());
      e.u32(1);
      e.u32(rpc::kAuthSys);
      return;
    }
    case kUmnt:
      rpc::encode(e, r);
      return;
    case kExport:
      rpc::encode(e, r);
      e.boolean(true);
      e.string(export_);
      for (const auto& c : opts_.clients) {  // groups: who may mount (showmount -e)
        e.boolean(true);
        e.string(c.text);
      }
      e.boolean(false);
      e.boolean(false);
      return;
    default:
      r.accept = rpc::kProcUnavail;
      rpc::encode(e, r);
      return;
  }
}

}  // namespace roce::nfs
