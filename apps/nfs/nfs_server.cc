/// @file
/// NFSv3 and MOUNT over a host directory (nfs_server.h).
#include "apps/nfs/nfs_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <utility>

namespace roce::nfs {

using namespace v3;

namespace {

/// Modes are the client's, its umask applied already (knfsd applies none): the thread serving a
/// call (NFSv3's and NFSv4.1's alike: they share the worker threads) gets a umask of its own, 0
/// (CLONE_FS unshared: the process's, other threads', stay as they are).
void no_umask() {
  static thread_local const bool own_umask = [] {
    if (::unshare(CLONE_FS) != 0) return false;
    ::umask(0);
    return true;
  }();
  (void)own_umask;
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
bool out_of_resources(int err) { return err == EMFILE || err == ENFILE || err == ENOMEM; }

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
          "export option subtree_check: handles name objects; what each opens is checked to be "
          "beneath the export's root anyway");
    } else if (key == "nohide" || key == "crossmnt") {
      warn("export option " + std::string(key) +
           ": file systems mounted inside the export are not served (NFS3ERR_ACCES)");
    } else if (key == "fsid") {
      if (val.empty()) {
        err = "export option fsid needs a value";
        return false;
      }
      warn("export option fsid=" + std::string(val) +
           ": ignored; file handles carry the export's own id");
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

namespace {

/// SipHash-2-4 (Aumasson and Bernstein): a 64-bit MAC of `data` under a 128-bit key.
std::uint64_t siphash(const std::array<std::uint8_t, 16>& key, std::span<const std::uint8_t> data) {
  const auto le64 = [](const std::uint8_t* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  };
  const auto rotl = [](std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); };
  const std::uint64_t k0 = le64(key.data()), k1 = le64(key.data() + 8);
  std::uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  std::uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  const auto round = [&] {
    v0 += v1, v1 = rotl(v1, 13), v1 ^= v0, v0 = rotl(v0, 32);
    v2 += v3, v3 = rotl(v3, 16), v3 ^= v2;
    v0 += v3, v3 = rotl(v3, 21), v3 ^= v0;
    v2 += v1, v1 = rotl(v1, 17), v1 ^= v2, v2 = rotl(v2, 32);
  };
  const std::size_t n = data.size(), whole = n & ~std::size_t{7};
  for (std::size_t i = 0; i < whole; i += 8) {
    const std::uint64_t m = le64(data.data() + i);
    v3 ^= m, round(), round(), v0 ^= m;
  }
  std::uint64_t last = std::uint64_t{n & 0xff} << 56;
  for (std::size_t i = whole; i < n; ++i) last |= std::uint64_t{data[i]} << (8 * (i - whole));
  v3 ^= last, round(), round(), v0 ^= last;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

/// The handle: magic, export id, the file system's handle type, the body's length, three bytes
/// of padding, the body (the file system's handle, or the inode number in path-table mode), and
/// the MAC of all that. NFS3_FHSIZE (64) bounds the body to 40 bytes.
constexpr std::uint8_t kFhMagic[4] = {'R', 'N', 'H', '1'};
constexpr std::size_t kFhHead = 16, kFhMac = 8, kMaxFhBody = kFhSize - kFhHead - kFhMac;
constexpr std::uint32_t kPathTableType = 0xffffffffu;
constexpr const char* kKeyXattr = "trusted.roce_nfs.fh_key";

void put32(std::vector<std::uint8_t>& v, std::uint32_t x) {
  for (int i = 3; i >= 0; --i) v.push_back(static_cast<std::uint8_t>(x >> (8 * i)));
}
std::uint32_t get32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

/// A struct file_handle with room for any file system's.
struct KernelHandle {
  alignas(file_handle) unsigned char raw[sizeof(file_handle) + MAX_HANDLE_SZ] = {};
  file_handle& h() { return *reinterpret_cast<file_handle*>(raw); }
};

/// name_to_handle_at of `name` in `dirfd` (the descriptor itself when empty), not following a
/// final symbolic link; false when the file system has none or it is too long for NFSv3.
bool kernel_handle(int dirfd, const std::string& name, std::uint32_t& type,
                   std::vector<std::uint8_t>& body) {
  KernelHandle k;
  file_handle& h = k.h();
  h.handle_bytes = MAX_HANDLE_SZ;
  int mnt = 0;
  if (::name_to_handle_at(dirfd, name.c_str(), &h, &mnt, name.empty() ? AT_EMPTY_PATH : 0) != 0)
    return false;
  if (h.handle_bytes > kMaxFhBody) return false;
  type = static_cast<std::uint32_t>(h.handle_type);
  body.assign(h.f_handle, h.f_handle + h.handle_bytes);
  return true;
}

int open_kernel_handle(int mount_fd, std::uint32_t type, std::span<const std::uint8_t> body) {
  KernelHandle k;
  file_handle& h = k.h();
  h.handle_bytes = static_cast<unsigned>(body.size());
  h.handle_type = static_cast<int>(type);
  std::memcpy(h.f_handle, body.data(), body.size());
  return ::open_by_handle_at(mount_fd, &h, O_PATH | O_CLOEXEC);
}

std::string read_link(const std::string& p) {
  std::string s(4096, '\0');
  const ssize_t n = ::readlink(p.c_str(), s.data(), s.size());
  s.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return s;
}

/// getdents64's record.
struct Dirent64 {
  std::uint64_t ino;
  std::int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

bool same_time(const Time& a, const Time& b) { return a.sec == b.sec && a.nsec == b.nsec; }

}  // namespace

/// The calling thread's file system identity: switched to a caller's for one call, then back.
/// setfsuid, setfsgid and the raw setgroups are per thread on Linux (glibc's setgroups would
/// change every thread of roced). A file system uid other than 0 drops CAP_DAC_OVERRIDE,
/// CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_CHOWN, CAP_FSETID and the other file capabilities, as
/// for knfsd's threads; suspend() gives them back for a moment (the server's own uid: opening a
/// handle and walking up to the root are the server's acts, not the caller's).
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
    caller_uid_ = uid;
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
  /// The server's file system uid (and with it its file capabilities) until resume().
  void suspend() {
    if (switched_) ::syscall(SYS_setfsuid, uid_);
  }
  void resume() {
    if (switched_) ::syscall(SYS_setfsuid, caller_uid_);
  }

 private:
  bool switched_ = false, groups_set_ = false;
  std::uint32_t uid_ = 0, gid_ = 0, caller_uid_ = 0;
  std::vector<std::uint32_t> groups_;
};

/// One call being served: who, and what it did (merged into the statistics at its end).
struct NfsServer::Call {
  Cred cred;
  Identity* id = nullptr;
  std::uint64_t errors = 0, bytes_read = 0, bytes_written = 0;
  /// The server's own file system identity in this scope.
  struct AsServer {
    Identity* id;
    explicit AsServer(Identity* i) : id(i) {
      if (id) id->suspend();
    }
    ~AsServer() {
      if (id) id->resume();
    }
  };
};

/// What a handle names, opened O_PATH, its path under the root (path-table mode), attributes.
struct NfsServer::Obj {
  Fd fd;
  std::string rel;
  struct stat st {};
  Fattr attr() const { return to_fattr(st); }
};

NfsServer::NfsServer(std::string root, std::string export_path, ExportOptions opts, HandleMode mode)
    : root_(std::move(root)),
      export_(std::move(export_path)),
      opts_(std::make_shared<const ExportOptions>(std::move(opts))) {
  // "/srv/export/" and "/srv/export" are one export (what MNT and NFSv4's pseudo-root compare).
  while (export_.size() > 1 && export_.back() == '/') export_.pop_back();
  if (export_.empty() || export_.front() != '/') export_.insert(export_.begin(), '/');
  root_fd_ = ::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct stat s;
  if (root_fd_ < 0 || ::fstat(root_fd_, &s) != 0 || !S_ISDIR(s.st_mode)) {
    if (root_fd_ >= 0) ::close(root_fd_);
    throw std::runtime_error("NFS export root " + root_ + " is not a directory");
  }
  root_ino_ = s.st_ino;
  root_dev_ = s.st_dev;
  root_real_ = read_link(proc_path(root_fd_));
  mount_fd_ = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  {
    Identity probe;  // another uid and gid than ours, back at the end of the scope
    const std::uint32_t other = ::geteuid() == 12345 ? 12346 : 12345;
    acts_as_callers_ = probe.become(other, other, {});
  }
  // The MAC key: kept on the root (a trusted xattr: root's alone to read), so that handles
  // outlive the process; else a key of this process alone.
  const std::string rp = proc_path(root_fd_);
  if (::getxattr(rp.c_str(), kKeyXattr, key_.data(), key_.size()) ==
      static_cast<ssize_t>(key_.size())) {
    key_persistent_ = true;
  } else {
    if (::getrandom(key_.data(), key_.size(), 0) != static_cast<ssize_t>(key_.size()))
      throw std::runtime_error("NFS export: no random key for file handles");
    if (::setxattr(rp.c_str(), kKeyXattr, key_.data(), key_.size(), XATTR_CREATE) == 0)
      key_persistent_ = true;
    else if (errno == EEXIST && ::getxattr(rp.c_str(), kKeyXattr, key_.data(), key_.size()) ==
                                    static_cast<ssize_t>(key_.size()))
      key_persistent_ = true;  // another server on the same root made it first
  }
  std::uint32_t type = 0;
  std::vector<std::uint8_t> body;
  if (mode == HandleMode::kAuto && mount_fd_ >= 0 && kernel_handle(root_fd_, "", type, body)) {
    const int fd = open_kernel_handle(mount_fd_, type, body);
    struct stat t;
    kernel_handles_ = fd >= 0 && ::fstat(fd, &t) == 0 && t.st_ino == root_ino_;
    if (fd >= 0) ::close(fd);
    if (!kernel_handles_)
      handle_note_ =
          "open_by_handle_at refused (it needs CAP_DAC_READ_SEARCH): file handles are a table of "
          "paths and go stale when the server restarts";
  } else {
    handle_note_ = mode == HandleMode::kAuto
                       ? "the export's file system has no file handles (name_to_handle_at): file "
                         "handles are a table of paths and go stale when the server restarts"
                       : "file handles are a table of paths (asked for)";
  }
  if (kernel_handles_ && !key_persistent_)
    handle_note_ = std::string("no ") + kKeyXattr +
                   " on the export's root (it needs CAP_SYS_ADMIN and a file system with "
                   "trusted xattrs): file handles go stale when the server restarts";
  // The export's id: the MAC of its root's handle and its path, the same after a restart.
  {
    std::vector<std::uint8_t> id(body);
    id.insert(id.end(), export_.begin(), export_.end());
    export_id_ = static_cast<std::uint32_t>(siphash(key_, id));
  }
  if (kernel_handles_) {
    root_fh_ = seal(type, body);
  } else {
    std::vector<std::uint8_t> ino;
    for (int i = 7; i >= 0; --i) ino.push_back(static_cast<std::uint8_t>(root_ino_ >> (8 * i)));
    root_fh_ = seal(kPathTableType, ino);
  }
  const auto t = std::chrono::system_clock::now().time_since_epoch().count();
  for (int i = 0; i < 8; ++i)
    write_verf_[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(t >> (8 * i));
  // Directory offsets that are positions (dcache_readdir's cursor): ramfs, and tmpfs before
  // Linux 6.6 (which gave it stable offsets).
  struct statfs f;
  if (::fstatfs(root_fd_, &f) == 0) {
    constexpr long kRamfs = 0x858458f6, kTmpfs = 0x01021994;
    utsname u{};
    int major = 0, minor = 0;
    if (::uname(&u) == 0) std::sscanf(u.release, "%d.%d", &major, &minor);
    const bool old_kernel = major < 6 || (major == 6 && minor < 6);
    stable_cookies_ = !(static_cast<long>(f.f_type) == kRamfs ||
                        (static_cast<long>(f.f_type) == kTmpfs && old_kernel));
  }
}

bool NfsServer::beneath_export(const std::string& path, std::string& rel) const {
  // export_ has no trailing slash (but "/"); "" names the root when the export is "/".
  rel.clear();
  std::string_view rest(path);
  if (export_ == "/") {
    if (!rest.empty() && rest.front() != '/') return false;
  } else {
    if (rest.substr(0, export_.size()) != export_) return false;
    rest.remove_prefix(export_.size());
    if (!rest.empty() && rest.front() != '/') return false;  // "/srv/exported" is not beneath
  }
  while (!rest.empty()) {
    const std::size_t n = std::min(rest.find('/'), rest.size());
    const std::string_view part = rest.substr(0, n);
    rest.remove_prefix(std::min(n + 1, rest.size()));
    if (part.empty() || part == ".") continue;
    if (part == "..") return false;
    if (!rel.empty()) rel += '/';
    rel.append(part);
  }
  return rel.size() <= kMaxRel;
}

std::string NfsServer::join_export(const std::string& rel) const {
  return export_ == "/" ? "/" + rel : export_ + "/" + rel;
}

bool NfsServer::keep_mounts_in(const std::string& path) {
  std::lock_guard g(mount_mu_);
  rmtab_ = path;
  if (path.empty()) return true;
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return errno == ENOENT;
  char line[kMaxPath + 64];
  while (std::fgets(line, sizeof line, f) && mounts_.size() < max_mount_entries) {
    std::string l(line);
    if (l.empty() || l.back() != '\n') break;  // cut short: the rest is not trusted
    l.pop_back();
    const std::size_t colon = l.find(':');
    in_addr a{};
    if (colon == std::string::npos || colon + 1 >= l.size() || l[colon + 1] != '/' ||
        ::inet_pton(AF_INET, l.substr(0, colon).c_str(), &a) != 1)
      continue;  // a client is an IPv4 address, a path absolute
    auto entry = std::pair<std::string, std::string>(l.substr(0, colon), l.substr(colon + 1));
    if (std::find(mounts_.begin(), mounts_.end(), entry) == mounts_.end())
      mounts_.push_back(std::move(entry));
  }
  std::fclose(f);
  return true;
}

void NfsServer::save_mounts() {
  if (rmtab_.empty()) return;
  const std::string tmp = rmtab_ + ".new";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  std::string all;
  for (const auto& [who, path] : mounts_)
    if (path.find('\n') == std::string::npos) all += who + ":" + path + "\n";
  const bool ok = ::write(fd, all.data(), all.size()) == static_cast<ssize_t>(all.size());
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), rmtab_.c_str()) != 0) ::unlink(tmp.c_str());
}

NfsServer::~NfsServer() {
  ::close(root_fd_);
  if (mount_fd_ >= 0) ::close(mount_fd_);
}

Fh NfsServer::seal(std::uint32_t type, std::span<const std::uint8_t> body) const {
  Fh fh;
  fh.data.assign(kFhMagic, kFhMagic + 4);
  put32(fh.data, export_id_);
  put32(fh.data, type);
  fh.data.push_back(static_cast<std::uint8_t>(body.size()));
  fh.data.insert(fh.data.end(), 3, 0);
  fh.data.insert(fh.data.end(), body.begin(), body.end());
  const std::uint64_t mac = siphash(key_, fh.data);
  for (int i = 7; i >= 0; --i) fh.data.push_back(static_cast<std::uint8_t>(mac >> (8 * i)));
  return fh;
}

bool NfsServer::open_fh(const Fh& fh, std::uint32_t& type, std::vector<std::uint8_t>& body) const {
  const auto& b = fh.data;
  if (b.size() < kFhHead + kFhMac || !std::equal(kFhMagic, kFhMagic + 4, b.begin())) return false;
  const std::size_t n = b[12];
  if (n > kMaxFhBody || b.size() != kFhHead + n + kFhMac || get32(&b[4]) != export_id_ || b[13] ||
      b[14] || b[15])
    return false;
  std::uint64_t mac = 0;
  for (std::size_t i = kFhHead + n; i < b.size(); ++i) mac = (mac << 8) | b[i];
  if (mac != siphash(key_, std::span(b).first(kFhHead + n))) return false;
  type = get32(&b[8]);
  body.assign(b.begin() + kFhHead, b.begin() + static_cast<std::ptrdiff_t>(kFhHead + n));
  return true;
}

Fh NfsServer::remember(const std::string& rel, std::uint64_t ino) {
  std::vector<std::uint8_t> body;
  for (int i = 7; i >= 0; --i) body.push_back(static_cast<std::uint8_t>(ino >> (8 * i)));
  const Fh fh = seal(kPathTableType, body);
  if (ino == root_ino_ && rel.empty()) return fh;  // the root is always known
  std::lock_guard g(table_mu_);
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

bool NfsServer::rel_of(std::uint64_t ino, std::string& rel) {
  if (ino == root_ino_) {
    rel.clear();
    return true;
  }
  std::lock_guard g(table_mu_);
  const auto it = paths_.find(ino);
  if (it == paths_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  rel = it->second.rel;
  return true;
}

void NfsServer::renamed(const std::string& from, const std::string& to) {
  std::lock_guard g(table_mu_);
  for (auto& [ino, r] : paths_) {
    if (r.rel == from ||
        (r.rel.size() > from.size() && r.rel.starts_with(from) && r.rel[from.size()] == '/')) {
      path_bytes_ -= r.rel.size();
      r.rel = to + r.rel.substr(from.size());
      path_bytes_ += r.rel.size();
    }
  }
}

Status NfsServer::beneath(int fd, const struct stat& st) const {
  if (st.st_dev != root_dev_) return kErrStale;
  const auto under_root = [&](const std::string& p) {
    return root_real_ == "/" || (p.size() > root_real_.size() && p.starts_with(root_real_) &&
                                 p[root_real_.size()] == '/');
  };
  if (S_ISDIR(st.st_mode)) {
    if (st.st_ino == root_ino_) return kOk;
    if (st.st_nlink == 0) return kErrStale;  // removed
    // A directory from open_by_handle_at is connected (exportfs reconnects directories), so
    // the kernel's name for it is its path: one readlink, whatever the depth. Only a name
    // outside the root's path is walked: up through ".." to the root; the top of the file
    // system first means outside.
    // A path longer than a page has no name from the kernel: those are walked, and what a walk
    // found beneath the root is believed for a second (a walk stops at such a directory), so
    // that a deep tree costs one walk per second, not one per call.
    // The name is checked to be this very directory, opened beneath the root (no symbolic
    // link, no other mount): a directory outside a bind-mounted export is named relative to
    // its file system's root, which may read like a path beneath ours.
    if (const std::string p = read_link(proc_path(fd)); under_root(p)) {
      const std::string rel =
          p.substr(std::min(p.size(), root_real_ == "/" ? std::size_t{1} : root_real_.size() + 1));
      Fd same(open_beneath(root_fd_, rel, O_PATH | O_DIRECTORY));
      struct stat s2;
      if (same.get() >= 0 && ::fstat(same.get(), &s2) == 0 && s2.st_ino == st.st_ino &&
          s2.st_dev == st.st_dev)
        return kOk;
      if (same.get() < 0 && out_of_resources(errno)) return kErrJukebox;
    }
    const auto now =
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    const auto known = [&](std::uint64_t ino) {
      std::lock_guard g(walked_mu_);
      const auto it = walked_.find(ino);
      return it != walked_.end() && it->second > now;
    };
    Fd cur(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (cur.get() < 0) return from_errno(errno);
    struct stat s = st;
    std::vector<std::uint64_t> seen;
    for (int depth = 0; depth < 4096; ++depth) {
      if (s.st_dev != root_dev_) return kErrStale;
      if (s.st_ino == root_ino_ || known(s.st_ino)) {
        std::lock_guard g(walked_mu_);
        if (walked_.size() + seen.size() > kMaxWalked) walked_.clear();
        for (auto ino : seen) walked_[ino] = now + 1'000'000'000ull;
        return kOk;
      }
      seen.push_back(s.st_ino);
      Fd up(::openat(cur.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
      struct stat u;
      if (up.get() < 0) return out_of_resources(errno) ? kErrJukebox : kErrStale;
      if (::fstat(up.get(), &u) != 0) return kErrStale;
      if (u.st_ino == s.st_ino && u.st_dev == s.st_dev) return kErrStale;
      cur = std::move(up);
      s = u;
    }
    return kErrStale;
  }
  // Not a directory: the kernel's name for it. Beneath the root's path is beneath the root; a
  // name elsewhere that is this very file is outside (moved out, or linked out); a file whose
  // dentry the kernel could not connect to a path (cold, after a restart) is taken on the MAC's
  // word, as knfsd takes its handles with no_subtree_check.
  if (st.st_nlink == 0) return kErrStale;
  if (root_real_ == "/") return kOk;
  const std::string p = read_link(proc_path(fd));
  if (under_root(p)) return kOk;
  struct stat o;
  return ::lstat(p.c_str(), &o) == 0 && o.st_ino == st.st_ino && o.st_dev == st.st_dev ? kErrStale
                                                                                       : kOk;
}

Status NfsServer::find(Call& c, const Fh& fh, Obj& o) {
  std::uint32_t type = 0;
  std::vector<std::uint8_t> body;
  if (!open_fh(fh, type, body)) return kErrStale;
  if (type == kPathTableType) {
    if (kernel_handles_ || body.size() != 8) return kErrStale;
    std::uint64_t ino = 0;
    for (std::uint8_t b : body) ino = (ino << 8) | b;
    if (!rel_of(ino, o.rel)) return kErrStale;
    const int fd = o.rel.empty() ? ::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0)
                                 : open_beneath(root_fd_, o.rel, O_PATH);
    if (fd < 0) return path_error(errno);
    o.fd.reset(fd);
    if (::fstat(fd, &o.st) != 0 || o.st.st_ino != ino || o.st.st_dev != root_dev_) return kErrStale;
    return kOk;
  }
  if (!kernel_handles_) return kErrStale;
  // open_by_handle_at needs CAP_DAC_READ_SEARCH, which the caller's identity dropped; so does
  // the walk up to the root (the caller's search permission on the way is not asked, as knfsd
  // does not ask it with no_subtree_check).
  // Out of descriptors or memory is JUKEBOX (try again), never STALE: a client takes ESTALE
  // on an open file as the file gone.
  Call::AsServer server(c.id);
  o.fd.reset(open_kernel_handle(mount_fd_, type, body));
  if (o.fd.get() < 0) return out_of_resources(errno) ? kErrJukebox : kErrStale;
  if (::fstat(o.fd.get(), &o.st) != 0) return kErrStale;
  return beneath(o.fd.get(), o.st);
}

std::optional<Fh> NfsServer::handle_of(const Obj& dir, const std::string& name,
                                       const struct stat& st) {
  if (st.st_dev != root_dev_) return std::nullopt;  // another file system mounted inside
  if (!kernel_handles_) {
    const std::string rel = name.empty() ? dir.rel : join(dir.rel, name);
    if (rel.size() > kMaxRel) return std::nullopt;
    return remember(rel, st.st_ino);
  }
  std::uint32_t type = 0;
  std::vector<std::uint8_t> body;
  if (!kernel_handle(dir.fd.get(), name, type, body)) return std::nullopt;
  return seal(type, body);
}

Status NfsServer::reopen(Call& c, const Obj& o, int flags, bool owner_override, int& fd) {
  // The same inode again through /proc: the kernel checks the caller's permission to open it
  // (not its search permission on the way, which knfsd does not ask either).
  const std::string p = proc_path(o.fd.get());
  flags |= O_NONBLOCK | O_CLOEXEC;  // a FIFO must not block the server
  fd = ::open(p.c_str(), flags);
  if (fd < 0 && errno == EACCES && owner_override && c.id && o.st.st_uid == c.cred.uid) {
    // knfsd lets a file's owner read and write it whatever the mode (a file made 0444 by
    // open(O_CREAT) is written through the descriptor the client got). Only the open is the
    // server's: the I/O is the caller's again (a write still clears the setuid bit).
    Call::AsServer server(c.id);
    fd = ::open(p.c_str(), flags);
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

/// A cached descriptor: closed when the cache and every call using it let go.
struct NfsServer::OpenFile {
  Fd fd;
  bool rw = false;
};

Status NfsServer::open_file(Call& c, const Obj& o, bool write, std::shared_ptr<const OpenFile>& f,
                            bool keep) {
  // The caller's permission, asked of the kernel as the caller (ACLs, capabilities, LSMs
  // included); knfsd lets a file's owner read and write it whatever its mode (a file made 0444
  // by open(O_CREAT) is written through the descriptor the client got).
  const int want = write ? W_OK : R_OK;
  if (::syscall(SYS_faccessat2, o.fd.get(), "", want, AT_EACCESS | AT_EMPTY_PATH) != 0) {
    const int err = errno;
    if (!(err == EACCES && c.id && o.st.st_uid == c.cred.uid)) return from_errno(err);
  }
  const FileKey key{o.st.st_dev, o.st.st_ino};
  const auto now =
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  {
    std::lock_guard g(files_mu_);
    if (now - files_swept_ns_ > 500'000'000ull) {  // close what nobody used for a while
      files_swept_ns_ = now;
      std::erase_if(files_, [&](const auto& kv) {
        return now - kv.second.used_ns > std::uint64_t{file_idle_ms} * 1'000'000;
      });
    }
    const auto it = files_.find(key);
    if (it != files_.end() && (it->second.file->rw || !write)) {
      it->second.used_ns = now;
      f = it->second.file;
      return kOk;
    }
  }
  // Opened by the server (the permission was the caller's, above): read-write when the export
  // is, so that one descriptor serves both; read-only where that is refused (a running binary).
  auto nf = std::make_shared<OpenFile>();
  const std::string p = proc_path(o.fd.get());
  {
    Call::AsServer server(c.id);
    // Writing only for a write: an open for writing breaks the leases that stand for NFSv4
    // read delegations (and a descriptor open for writing keeps any from being taken).
    if (opts()->rw && write) {
      nf->fd.reset(::open(p.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
      nf->rw = nf->fd.get() >= 0;
    }
    if (nf->fd.get() < 0 && !write)
      nf->fd.reset(::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  }
  if (nf->fd.get() < 0) {
    const int err = errno;
    if (out_of_resources(err)) {  // let go of the cached descriptors no call is using
      std::lock_guard g(files_mu_);
      std::erase_if(files_, [](const auto& kv) { return kv.second.file.use_count() == 1; });
    }
    return path_error(err);
  }
  struct stat s;
  if (::fstat(nf->fd.get(), &s) != 0 || s.st_ino != o.st.st_ino || s.st_dev != o.st.st_dev)
    return kErrStale;
  f = nf;
  if (!keep) return kOk;  // used once (NFSv4's write without an open for writing)
  // At most a quarter of the descriptors this process may have (RLIMIT_NOFILE, read now: it
  // may be lowered while running), so that handles, sockets and directories always find one.
  std::size_t cap = max_open_files;
  if (rlimit r{}; ::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
    cap = std::min<std::size_t>(cap, static_cast<std::size_t>(r.rlim_cur / 4));
  cap = std::max<std::size_t>(cap, 1);
  std::lock_guard g(files_mu_);
  files_[key] = CachedFile{nf, now};
  while (files_.size() > cap) {  // the least recently used goes
    auto oldest = files_.begin();
    for (auto i = files_.begin(); i != files_.end(); ++i)
      if (i->second.used_ns < oldest->second.used_ns) oldest = i;
    files_.erase(oldest);
  }
  return kOk;
}

void NfsServer::forget_file(int dirfd, const std::string& name) {
  struct stat s;
  if (::fstatat(dirfd, name.c_str(), &s, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(s.st_mode)) return;
  std::lock_guard g(files_mu_);
  files_.erase(FileKey{s.st_dev, s.st_ino});
}

Verf NfsServer::cookie_verf(const Obj& dir) const {
  // The cookies are the file system's own directory offsets (getdents64's d_off), which stay
  // valid while entries come and go on most (ext4's hashes, xfs, btrfs, tmpfs since 6.6); they
  // belong to this directory of this export alone. Where they are positions that shift when an
  // entry goes (ramfs, tmpfs before 6.6), the verifier also names the directory's mtime: any
  // change makes the old cookies BAD_COOKIE and the client lists again.
  std::vector<std::uint8_t> b;
  put32(b, export_id_);
  for (int i = 7; i >= 0; --i) b.push_back(static_cast<std::uint8_t>(dir.st.st_ino >> (8 * i)));
  if (!stable_cookies_) {
    const auto t = static_cast<std::uint64_t>(dir.st.st_mtim.tv_sec) * 1'000'000'000ull +
                   static_cast<std::uint64_t>(dir.st.st_mtim.tv_nsec);
    for (int i = 7; i >= 0; --i) b.push_back(static_cast<std::uint8_t>(t >> (8 * i)));
  }
  const std::uint64_t h = siphash(key_, b);
  Verf v;
  for (int i = 0; i < 8; ++i)
    v[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h >> (8 * i));
  return v;
}

bool NfsServer::credential(const rpc::OpaqueAuth& a, Cred& c) const {
  const auto o = opts();  // one set of options for the whole credential (a reload)
  c = Cred{o->anonuid, o->anongid, {}};
  if (a.flavor == rpc::kAuthNone) return true;  // AUTH_NONE is the anonymous ids
  const auto s = rpc::parse_auth_sys(a);
  if (!s) return false;
  if (o->all_squash) return true;
  const auto squash = [&](std::uint32_t id, std::uint32_t anon) {
    // (uid_t)-1 is no id (setfsuid(-1) only asks); root_squash maps 0 to the anonymous id.
    return id == 0xffffffffu || (id == 0 && o->root_squash) ? anon : id;
  };
  c.uid = squash(s->uid, o->anonuid);
  c.gid = squash(s->gid, o->anongid);
  for (std::uint32_t g : s->gids) c.groups.push_back(squash(g, o->anongid));
  return true;
}

void NfsServer::handle(const CallContext& ctx, std::span<const std::uint8_t> call, RpcReply& out) {
  out = RpcReply{};
  XdrDecoder d(call);
  rpc::CallHeader h;
  XdrEncoder e(out.msg);
  rpc::ReplyHeader r;
  const auto count = [&](auto f) {
    std::lock_guard g(stats_mu_);
    f(st_);
  };
  if (!rpc::decode(d, h)) {
    count([](NfsServerStats& s) { ++s.garbage; });
    if (!d.ok() || call.size() < 8) return;  // not even an XID: no reply
    r.xid = h.xid;
    r.stat = rpc::kMsgDenied;
    r.reject = rpc::kRpcMismatch;
    r.low = r.high = rpc::kRpcVersion;
    rpc::encode(e, r);
    return;
  }
  count([](NfsServerStats& s) { ++s.calls; });
  r.xid = h.xid;
  if (h.rpcvers != rpc::kRpcVersion) {
    r.stat = rpc::kMsgDenied;
    r.reject = rpc::kRpcMismatch;
    r.low = r.high = rpc::kRpcVersion;
    rpc::encode(e, r);
    return;
  }
  const auto deny = [&] {
    count([](NfsServerStats& s) { ++s.denied; });
    r.stat = rpc::kMsgDenied;
    r.reject = rpc::kAuthError;
    r.auth = rpc::kAuthBadCred;
    rpc::encode(e, r);
  };
  Call c;
  // Another flavor, a malformed AUTH_SYS, or (but for NULL) a client the export does not list:
  // AUTH_BADCRED, as knfsd answers (svcauth_unix_set_client).
  if (!credential(h.cred, c.cred)) return deny();
  if (h.prog != kNfsProgram) {
    r.accept = rpc::kProgUnavail;
    rpc::encode(e, r);
    return;
  }
  if (h.proc != kNull && !opts()->allows(ctx.peer)) return deny();
  if (h.vers != kNfsVersion || !v3_served) {
    r.accept = rpc::kProgMismatch;
    r.low = v3_served ? kNfsVersion : 4;
    r.high = v4_served ? 4 : kNfsVersion;
    rpc::encode(e, r);
    return;
  }
  if (h.proc > kCommit) {
    r.accept = rpc::kProcUnavail;
    rpc::encode(e, r);
    return;
  }
  count([&](NfsServerStats& s) { ++s.by_proc[h.proc]; });
  no_umask();
  Identity id;
  if (h.proc != kNull && !id.become(c.cred.uid, c.cred.gid, c.cred.groups)) {
    // roced lacks CAP_SETUID/CAP_SETGID: nothing is done as anybody else (docs/nfs.md).
    count([](NfsServerStats& s) { ++s.errors; });
    r.accept = rpc::kSystemErr;
    rpc::encode(e, r);
    return;
  }
  c.id = &id;
  rpc::encode(e, r);
  const std::size_t body = out.msg.size();
  dispatch(c, h.proc, d, e, out);
  id.restore();
  const bool garbage = !d.ok();
  if (garbage) {  // the arguments did not decode: GARBAGE_ARGS instead of a result
    out.msg.resize(body - 4);
    out.payload.clear();
    out.has_payload = false;
    e.u32(rpc::kGarbageArgs);
  }
  count([&](NfsServerStats& s) {
    s.garbage += garbage;
    s.errors += c.errors;
    s.bytes_read += c.bytes_read;
    s.bytes_written += c.bytes_written;
  });
}

void NfsServer::dispatch(Call& c, std::uint32_t proc, XdrDecoder& d, XdrEncoder& e, RpcReply& out) {
  const auto fail = [&](Status s) {
    ++c.errors;
    e.u32(s);
  };
  const auto none = std::optional<Fattr>{};
  // A regular file about to change while an NFSv4 delegation of it is out: JUKEBOX until the
  // delegation is returned (before_change starts its recall).
  const auto held = [&](const struct stat& st) {
    return before_change && S_ISREG(st.st_mode) && before_change(st.st_dev, st.st_ino);
  };
  const auto held_at = [&](int dirfd, const std::string& name) {
    struct stat st;
    return ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && held(st);
  };
  // A name to make or look up: NAMETOOLONG beyond NAME_MAX, INVAL for what would leave the
  // directory ('/', ".", "..") or cannot be a name (empty, NUL).
  const auto name_error = [](const std::string& n) -> Status {
    if (n.size() > kMaxName) return kErrNametoolong;
    return bad_name(n) ? kErrInval : kOk;
  };
  // The attributes of a SETATTR, or those a CREATE, MKDIR, SYMLINK or MKNOD asks for besides the
  // mode it was made with, applied as the caller: the kernel says who may truncate, chown, chmod
  // and set times. A symbolic link is never followed (its mode is left, as knfsd leaves it).
  const auto apply = [&](const Obj& t, const Sattr& s, bool with_mode) -> int {
    const bool link = S_ISLNK(t.st.st_mode);
    if (s.size) {
      if (!S_ISREG(t.st.st_mode)) return S_ISDIR(t.st.st_mode) ? EISDIR : EINVAL;
      int fd = -1;
      if (const Status st = reopen(c, t, O_WRONLY, true, fd))
        return st == kErrStale ? ESTALE : EACCES;
      Fd w(fd);
      if (::ftruncate(w.get(), static_cast<off_t>(*s.size)) != 0) return errno;
    }
    if ((s.uid || s.gid) && ::fchownat(t.fd.get(), "", s.uid ? *s.uid : static_cast<uid_t>(-1),
                                       s.gid ? *s.gid : static_cast<gid_t>(-1), AT_EMPTY_PATH) != 0)
      return errno;
    if (with_mode && s.mode && !link) {
      if (const int err = chmod_fd(t.fd.get(), *s.mode & 07777)) return err;
    }
    if (s.atime_now || s.mtime_now || s.atime || s.mtime) {
      timespec ts[2];
      for (int i = 0; i < 2; ++i) {
        const bool now = i == 0 ? s.atime_now : s.mtime_now;
        const auto& given = i == 0 ? s.atime : s.mtime;
        ts[i].tv_sec = given ? given->sec : 0;
        ts[i].tv_nsec = given ? given->nsec : now ? UTIME_NOW : UTIME_OMIT;
        if (given && given->nsec >= 1000000000u) return EINVAL;
      }
      if (link) {
        if (::utimensat(t.fd.get(), "", ts, AT_EMPTY_PATH) != 0) return errno;
      } else if (const int err = utimes_fd(t.fd.get(), ts)) {
        return err;
      }
    }
    return 0;
  };
  // `name` in `dir` as an object of its own (O_PATH, never through a final symbolic link).
  const auto child = [&](const Obj& dir, const std::string& name, Obj& o) -> int {
    o.fd.reset(::openat(dir.fd.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (o.fd.get() < 0 || ::fstat(o.fd.get(), &o.st) != 0) return errno ? errno : EIO;
    o.rel = join(dir.rel, name);
    return 0;
  };
  // CREATE, MKDIR, SYMLINK, MKNOD's answer: the new object's handle and attributes, the
  // directory's wcc data.
  const auto made = [&](const Obj& dir, const Fattr& before, const Obj& o) {
    e.u32(kOk);
    encode_fh_opt(e, handle_of(o, "", o.st));
    encode_post_op(e, attr_of(o.fd.get()));
    encode_wcc(e, before, attr_of(dir.fd.get()));
  };
  switch (proc) {
    case kNull:
      return;
    case kGetattr: {
      const Fh fh = decode_fh(d);
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(c, fh, o)) return fail(s);
      e.u32(kOk);
      encode(e, o.attr());
      return;
    }
    case kSetattr: {
      const Fh fh = decode_fh(d);
      const Sattr s = decode_sattr(d);
      std::optional<Time> guard;
      if (d.boolean()) guard = Time{d.u32(), d.u32()};
      if (!d.ok()) return;
      Obj o;
      if (const Status st = find(c, fh, o)) return fail(st), encode_wcc(e, none, none);
      const Fattr before = o.attr();
      if (!opts()->rw) return fail(kErrRofs), encode_wcc(e, before, before);
      // The guard: the client's idea of the ctime must still hold (RFC 1813 3.3.2).
      if (guard && !same_time(*guard, before.ctime))
        return fail(kErrNotSync), encode_wcc(e, before, before);
      if (held(o.st)) return fail(kErrJukebox), encode_wcc(e, before, before);
      const int err = apply(o, s, true);
      if (err) ++c.errors;
      e.u32(err ? (err == ESTALE ? kErrStale : from_errno(err)) : kOk);
      encode_wcc(e, before, attr_of(o.fd.get()));
      return;
    }
    case kLookup: {
      const Fh dir = decode_fh(d);
      const std::string name = d.string(kMaxNameWire);
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(c, dir, o)) return fail(s), encode_post_op(e, none);
      if (!S_ISDIR(o.st.st_mode)) return fail(kErrNotdir), encode_post_op(e, none);
      Obj t;
      if (name == ".") {
        t.fd.reset(::fcntl(o.fd.get(), F_DUPFD_CLOEXEC, 0));
        t.rel = o.rel, t.st = o.st;
      } else if (name == "..") {
        // Never above the export's root: its ".." is itself.
        const bool top = o.st.st_ino == root_ino_ && o.st.st_dev == root_dev_;
        if (!kernel_handles_) {
          t.rel = parent_of(o.rel);
          t.fd.reset(t.rel.empty() ? ::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0)
                                   : open_beneath(root_fd_, t.rel, O_PATH));
        } else {
          t.fd.reset(top ? ::fcntl(o.fd.get(), F_DUPFD_CLOEXEC, 0)
                         : ::openat(o.fd.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
        }
        if (t.fd.get() < 0 || ::fstat(t.fd.get(), &t.st) != 0)
          return fail(kErrStale), encode_post_op(e, o.attr());
      } else if (const Status s = name_error(name)) {
        return fail(s), encode_post_op(e, o.attr());
      } else {
        if (!kernel_handles_ && join(o.rel, name).size() > kMaxRel)
          return fail(kErrNametoolong), encode_post_op(e, o.attr());
        if (const int err = child(o, name, t))
          return fail(from_errno(err)), encode_post_op(e, o.attr());
        // A file system mounted inside the export is not part of it (no crossmnt).
        if (t.st.st_dev != root_dev_) return fail(kErrAcces), encode_post_op(e, o.attr());
      }
      const auto fh = handle_of(t, "", t.st);
      if (!fh) return fail(kErrAcces), encode_post_op(e, o.attr());
      e.u32(kOk);
      encode(e, *fh);
      encode_post_op(e, t.attr());
      encode_post_op(e, o.attr());
      return;
    }
    case kAccess: {
      const Fh fh = decode_fh(d);
      const std::uint32_t want = d.u32();
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(c, fh, o)) return fail(s), encode_post_op(e, none);
      // What the caller may really do, asked of the kernel as the caller (AT_EACCESS: the
      // file system ids), mapped as knfsd maps ACCESS bits to permissions.
      constexpr std::uint32_t kRd = 1, kLook = 2, kMod = 4, kExt = 8, kDel = 0x10, kExec = 0x20;
      const bool dir = S_ISDIR(o.st.st_mode);
      const auto may = [&](int mode) {
        return ::syscall(SYS_faccessat2, o.fd.get(), "", mode, AT_EACCESS | AT_EMPTY_PATH) == 0;
      };
      std::uint32_t got = 0;
      if ((want & kRd) && may(R_OK)) got |= kRd;
      if (dir) {
        if ((want & kLook) && may(X_OK)) got |= kLook;
        if ((want & (kMod | kExt | kDel)) && may(W_OK | X_OK)) got |= want & (kMod | kExt | kDel);
      } else {
        // Any other object, FIFOs and devices included (the client opens those itself and asks
        // here whether it may), as knfsd maps it.
        if ((want & (kMod | kExt)) && may(W_OK)) got |= want & (kMod | kExt);
        if ((want & kExec) && may(X_OK)) got |= kExec;
      }
      if (!opts()->rw) got &= ~(kMod | kExt | kDel);
      e.u32(kOk);
      encode_post_op(e, o.attr());
      e.u32(got);
      return;
    }
    case kReadlink: {
      const Fh fh = decode_fh(d);
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(c, fh, o)) return fail(s), encode_post_op(e, none);
      if (!S_ISLNK(o.st.st_mode)) return fail(kErrInval), encode_post_op(e, o.attr());
      std::string target(kMaxSymlinkData + 1, '\0');
      const ssize_t n = ::readlinkat(o.fd.get(), "", target.data(), target.size());
      if (n < 0) return fail(from_errno(errno)), encode_post_op(e, o.attr());
      target.resize(static_cast<std::size_t>(n));
      e.u32(kOk);
      encode_post_op(e, o.attr());
      e.string(target);
      return;
    }
    case kRead: {
      const Fh fh = decode_fh(d);
      const std::uint64_t off = d.u64();
      std::uint32_t count = d.u32();
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(c, fh, o)) return fail(s), encode_post_op(e, none);
      if (!S_ISREG(o.st.st_mode))
        return fail(S_ISDIR(o.st.st_mode) ? kErrIsdir : kErrInval), encode_post_op(e, o.attr());
      if (off > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()))
        return fail(kErrInval), encode_post_op(e, o.attr());
      std::shared_ptr<const OpenFile> r;
      if (const Status s = open_file(c, o, false, r)) return fail(s), encode_post_op(e, o.attr());
      count = std::min(count, max_io);
      out.payload.resize(count);
      const ssize_t n = ::pread(r->fd.get(), out.payload.data(), count, static_cast<off_t>(off));
      const int err = errno;
      struct stat s;
      if (::fstat(r->fd.get(), &s) != 0) s = o.st;
      if (n < 0) {
        out.payload.clear();
        return fail(from_errno(err)), encode_post_op(e, to_fattr(s));
      }
      out.payload.resize(static_cast<std::size_t>(n));
      out.has_payload = true;
      c.bytes_read += static_cast<std::uint64_t>(n);
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
      if (const Status s = find(c, fh, o)) return fail(s), encode_wcc(e, none, none);
      const Fattr before = o.attr();
      if (!opts()->rw) return fail(kErrRofs), encode_wcc(e, before, before);
      if (count > data.size() || how > kFileSync ||
          off > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()) - count)
        return fail(kErrInval), encode_wcc(e, before, before);
      if (!S_ISREG(o.st.st_mode))
        return fail(S_ISDIR(o.st.st_mode) ? kErrIsdir : kErrInval), encode_wcc(e, before, before);
      if (held(o.st)) return fail(kErrJukebox), encode_wcc(e, before, before);
      std::shared_ptr<const OpenFile> w;
      if (const Status s = open_file(c, o, true, w)) return fail(s), encode_wcc(e, before, before);
      const ssize_t n = ::pwrite(w->fd.get(), data.data(), count, static_cast<off_t>(off));
      const int err = errno;
      // Synchronous (the transport calls the server off the poll loop, on its worker pool).
      if (n >= 0 && how != kUnstable) ::fdatasync(w->fd.get());
      if (n < 0) return fail(from_errno(err)), encode_wcc(e, before, attr_of(w->fd.get()));
      c.bytes_written += static_cast<std::uint64_t>(n);
      e.u32(kOk);
      encode_wcc(e, before, attr_of(w->fd.get()));
      e.u32(static_cast<std::uint32_t>(n));
      e.u32(how);
      e.fixed(write_verf_);
      return;
    }
    case kCreate:
    case kMkdir:
    case kSymlink:
    case kMknod: {
      const Fh dir = decode_fh(d);
      const std::string name = d.string(kMaxNameWire);
      Sattr s;
      std::uint32_t mode = kUnchecked, type = kReg;
      Verf verf{};
      std::string target;
      dev_t rdev = 0;
      if (proc == kCreate) {
        mode = d.u32();
        if (mode == kExclusive) {
          const auto v = d.fixed(8);
          if (v.size() == 8) std::copy(v.begin(), v.end(), verf.begin());
        } else if (mode <= kGuarded) {
          s = decode_sattr(d);
        } else {
          d.fail();
        }
      } else if (proc == kMkdir) {
        s = decode_sattr(d);
      } else if (proc == kSymlink) {
        s = decode_sattr(d);
        target = d.string(kMaxNameWire);
      } else {
        type = d.u32();
        if (type == kChr || type == kBlk) {
          s = decode_sattr(d);
          const std::uint32_t ma = d.u32(), mi = d.u32();
          rdev = ::makedev(ma, mi);
        } else if (type == kSock || type == kFifo) {
          s = decode_sattr(d);
        } else if (type < kReg || type > kFifo) {
          d.fail();
        }
      }
      if (!d.ok()) return;
      Obj o;
      if (const Status st = find(c, dir, o)) return fail(st), encode_wcc(e, none, none);
      if (!S_ISDIR(o.st.st_mode)) return fail(kErrNotdir), encode_wcc(e, none, none);
      const Fattr before = o.attr();
      const auto refuse = [&](Status st) { fail(st), encode_wcc(e, before, attr_of(o.fd.get())); };
      if (!opts()->rw) return refuse(kErrRofs);
      if (const Status st = name_error(name))
        return refuse(name == "." || name == ".." ? kErrExist : st);
      if (!kernel_handles_ && join(o.rel, name).size() > kMaxRel) return refuse(kErrNametoolong);
      // Made by the caller: owned by the caller's ids, with the kernel's rules for the mode.
      const mode_t m = s.mode ? (*s.mode & 07777) : (proc == kMkdir ? 0755 : 0644);
      Obj n;
      int err = 0;
      if (proc == kMkdir) {
        if (::mkdirat(o.fd.get(), name.c_str(), m) != 0) err = errno;
      } else if (proc == kSymlink) {
        if (target.empty() || target.find('\0') != std::string::npos) return refuse(kErrInval);
        if (target.size() > kMaxSymlinkData) return refuse(kErrNametoolong);
        if (::symlinkat(target.c_str(), o.fd.get(), name.c_str()) != 0) err = errno;
      } else if (proc == kMknod) {
        if (type != kChr && type != kBlk && type != kSock && type != kFifo)
          return refuse(kErrBadtype);
        // Device nodes as on a local file system: for root alone (no_root_squash), whatever
        // capabilities the server keeps for itself.
        if ((type == kChr || type == kBlk) && c.cred.uid != 0) return refuse(kErrPerm);
        const mode_t t = type == kChr    ? S_IFCHR
                         : type == kBlk  ? S_IFBLK
                         : type == kSock ? S_IFSOCK
                                         : S_IFIFO;
        if (::mknodat(o.fd.get(), name.c_str(), t | m, rdev) != 0) err = errno;
      } else {
        // EXCLUSIVE makes the file with no mode (the client sets it next) and keeps the
        // verifier in its times, as knfsd does: mtime's seconds the first four bytes, atime's
        // the last four. A retry with the same verifier finds its file; anything else is EXIST.
        const mode_t cm = mode == kExclusive ? 0 : m;
        Fd f(::openat(o.fd.get(), name.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, cm));
        if (f.get() < 0) err = errno;
        const std::uint32_t v0 = get32(verf.data()), v1 = get32(verf.data() + 4);
        if (!err && mode == kExclusive) {
          const timespec ts[2] = {{static_cast<time_t>(v1), 0}, {static_cast<time_t>(v0), 0}};
          if (::futimens(f.get(), ts) != 0) err = errno;
        }
        if (err == EEXIST && mode != kGuarded) {
          if (const int e2 = child(o, name, n)) return refuse(from_errno(e2));
          if (mode == kExclusive) {
            const bool mine = S_ISREG(n.st.st_mode) && n.st.st_size == 0 &&
                              n.st.st_mtim.tv_sec == static_cast<time_t>(v0) &&
                              n.st.st_atim.tv_sec == static_cast<time_t>(v1);
            if (!mine) return refuse(kErrExist);
            return made(o, before, n);
          }
          // UNCHECKED on a file that is there: only its size is set (knfsd does the same).
          if (!S_ISREG(n.st.st_mode)) return refuse(kErrExist);
          Sattr size_only;
          size_only.size = s.size;
          if (s.size && held(n.st)) return refuse(kErrJukebox);
          if (const int e2 = apply(n, size_only, false))
            return refuse(e2 == ESTALE ? kErrStale : from_errno(e2));
          return made(o, before, n);
        }
      }
      if (err) return refuse(from_errno(err));
      if (const int e2 = child(o, name, n)) return refuse(from_errno(e2));
      // The rest of what was asked, as the caller; the object stays made if it is refused (as
      // knfsd leaves it), and the answer says why.
      Sattr rest = s;
      if (proc == kCreate && rest.size && *rest.size == 0) rest.size.reset();
      if (proc == kSymlink) rest.mode.reset();
      if (const int e2 = apply(n, rest, false)) return refuse(from_errno(e2));
      return made(o, before, n);
    }
    case kRemove:
    case kRmdir: {
      const Fh dir = decode_fh(d);
      const std::string name = d.string(kMaxNameWire);
      if (!d.ok()) return;
      Obj o;
      if (const Status st = find(c, dir, o)) return fail(st), encode_wcc(e, none, none);
      if (!S_ISDIR(o.st.st_mode)) return fail(kErrNotdir), encode_wcc(e, none, none);
      const Fattr before = o.attr();
      if (!opts()->rw) return fail(kErrRofs), encode_wcc(e, before, before);
      if (proc == kRmdir && name == "..") return fail(kErrNotempty), encode_wcc(e, before, before);
      if (const Status st = name_error(name)) return fail(st), encode_wcc(e, before, before);
      if (proc == kRemove && held_at(o.fd.get(), name))
        return fail(kErrJukebox), encode_wcc(e, before, before);
      if (proc == kRemove) forget_file(o.fd.get(), name);  // its space freed when it goes
      if (::unlinkat(o.fd.get(), name.c_str(), proc == kRmdir ? AT_REMOVEDIR : 0) != 0)
        return fail(from_errno(errno)), encode_wcc(e, before, attr_of(o.fd.get()));
      e.u32(kOk);
      encode_wcc(e, before, attr_of(o.fd.get()));
      return;
    }
    case kRename: {
      const Fh from = decode_fh(d);
      const std::string from_name = d.string(kMaxNameWire);
      const Fh to = decode_fh(d);
      const std::string to_name = d.string(kMaxNameWire);
      if (!d.ok()) return;
      Obj f, t;
      const auto both = [&](Status st, const std::optional<Fattr>& fb,
                            const std::optional<Fattr>& tb) {
        fail(st);
        encode_wcc(e, fb, f.fd.get() >= 0 ? attr_of(f.fd.get()) : none);
        encode_wcc(e, tb, t.fd.get() >= 0 ? attr_of(t.fd.get()) : none);
      };
      if (const Status st = find(c, from, f)) return both(st, none, none);
      if (const Status st = find(c, to, t)) return both(st, f.attr(), none);
      const Fattr fb = f.attr(), tb = t.attr();
      if (!S_ISDIR(f.st.st_mode) || !S_ISDIR(t.st.st_mode)) return both(kErrNotdir, fb, tb);
      if (!opts()->rw) return both(kErrRofs, fb, tb);
      if (const Status st = name_error(from_name)) return both(st, fb, tb);
      if (const Status st = name_error(to_name)) return both(st, fb, tb);
      if (!kernel_handles_ && join(t.rel, to_name).size() > kMaxRel)
        return both(kErrNametoolong, fb, tb);
      if (held_at(f.fd.get(), from_name) || held_at(t.fd.get(), to_name))
        return both(kErrJukebox, fb, tb);
      forget_file(t.fd.get(), to_name);  // a file renamed over is removed
      if (::renameat(f.fd.get(), from_name.c_str(), t.fd.get(), to_name.c_str()) != 0)
        return both(from_errno(errno), fb, tb);
      if (!kernel_handles_) renamed(join(f.rel, from_name), join(t.rel, to_name));
      e.u32(kOk);
      encode_wcc(e, fb, attr_of(f.fd.get()));
      encode_wcc(e, tb, attr_of(t.fd.get()));
      return;
    }
    case kLink: {
      const Fh file = decode_fh(d);
      const Fh dir = decode_fh(d);
      const std::string name = d.string(kMaxNameWire);
      if (!d.ok()) return;
      Obj o, l;
      if (const Status st = find(c, file, o))
        return fail(st), encode_post_op(e, none), encode_wcc(e, none, none);
      if (const Status st = find(c, dir, l))
        return fail(st), encode_post_op(e, o.attr()), encode_wcc(e, none, none);
      const Fattr before = l.attr();
      const auto refuse = [&](Status st) {
        fail(st), encode_post_op(e, attr_of(o.fd.get())),
            encode_wcc(e, before, attr_of(l.fd.get()));
      };
      if (!S_ISDIR(l.st.st_mode)) return refuse(kErrNotdir);
      if (!opts()->rw) return refuse(kErrRofs);
      if (S_ISDIR(o.st.st_mode)) return refuse(kErrIsdir);
      if (const Status st = name_error(name))
        return refuse(name == "." || name == ".." ? kErrExist : st);
      if (!kernel_handles_ && join(l.rel, name).size() > kMaxRel) return refuse(kErrNametoolong);
      if (held(o.st)) return refuse(kErrJukebox);
      // The object itself through its descriptor (/proc's link to it, never a path that could
      // have changed); the kernel checks the caller's write permission on the directory and
      // its protected_hardlinks rules.
      if (::linkat(AT_FDCWD, proc_path(o.fd.get()).c_str(), l.fd.get(), name.c_str(),
                   AT_SYMLINK_FOLLOW) != 0)
        return refuse(from_errno(errno));
      e.u32(kOk);
      encode_post_op(e, attr_of(o.fd.get()));
      encode_wcc(e, before, attr_of(l.fd.get()));
      return;
    }
    case kReaddir:
    case kReaddirplus: {
      const Fh dir = decode_fh(d);
      const std::uint64_t cookie = d.u64();
      Verf verf{};
      if (const auto v = d.fixed(8); v.size() == 8) std::copy(v.begin(), v.end(), verf.begin());
      std::uint32_t maxcount = d.u32();
      if (proc == kReaddirplus) maxcount = d.u32();  // dircount, then maxcount
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(c, dir, o)) return fail(s), encode_post_op(e, none);
      if (!S_ISDIR(o.st.st_mode)) return fail(kErrNotdir), encode_post_op(e, none);
      // The cookies are the directory's own offsets (d_off), stable while entries come and go;
      // the verifier names the directory, so that a cookie of another is refused.
      const Verf mine = cookie_verf(o);
      if (cookie != 0 && verf != mine) return fail(kErrBadCookie), encode_post_op(e, o.attr());
      int fd = -1;
      if (const Status s = reopen(c, o, O_RDONLY | O_DIRECTORY, false, fd))
        return fail(s), encode_post_op(e, o.attr());
      Fd dfd(fd);
      if (cookie != 0 && ::lseek(dfd.get(), static_cast<off_t>(cookie), SEEK_SET) < 0)
        return fail(kErrBadCookie), encode_post_op(e, o.attr());
      const bool top = o.st.st_ino == root_ino_ && o.st.st_dev == root_dev_;
      const std::size_t status_at = out.msg.size();
      e.u32(kOk);
      encode_post_op(e, o.attr());
      e.fixed(mine);
      const std::size_t limit = std::min<std::size_t>(maxcount, 1u << 20);
      const std::size_t start = out.msg.size();
      bool any = false, eof = false, full = false;
      std::vector<std::uint8_t> ent;
      alignas(8) static thread_local std::uint8_t buf[32768];
      while (!full) {
        const long got = ::syscall(SYS_getdents64, dfd.get(), buf, sizeof buf);
        if (got < 0) {
          if (!any) {
            out.msg.resize(status_at);
            return fail(errno == EINVAL || errno == ENOENT ? kErrBadCookie : from_errno(errno)),
                   encode_post_op(e, o.attr());
          }
          break;
        }
        if (got == 0) {
          eof = true;
          break;
        }
        for (long at = 0; at < got;) {
          const auto* de = reinterpret_cast<const Dirent64*>(buf + at);
          at += de->reclen;
          const std::string n(de->name);
          std::uint64_t fileid = de->ino;
          std::optional<Fattr> attr;
          std::optional<Fh> fh;
          if (proc == kReaddirplus || n == ".." || n == ".") {
            struct stat s;
            bool have = false;
            if (n == "." || (n == ".." && top)) {
              s = o.st, have = true;
            } else {
              have = ::fstatat(dfd.get(), n.c_str(), &s, AT_SYMLINK_NOFOLLOW) == 0;
            }
            if (have) {
              fileid = s.st_ino;
              attr = to_fattr(s);
              if (proc == kReaddirplus && n != ".." && s.st_dev == root_dev_)
                fh = handle_of(o, n == "." ? std::string() : n, s);
            }
          }
          ent.clear();
          XdrEncoder x(ent);
          x.boolean(true);
          x.u64(fileid);
          x.string(n);
          x.u64(static_cast<std::uint64_t>(de->off));
          if (proc == kReaddirplus) {
            encode_post_op(x, attr);
            encode_fh_opt(x, fh);
          }
          if (out.msg.size() - start + ent.size() + 8 + 120 > limit) {
            full = true;
            break;
          }
          out.msg.insert(out.msg.end(), ent.begin(), ent.end());
          any = true;
        }
      }
      if (!any && !eof) {  // not even one entry fits
        out.msg.resize(status_at);
        return fail(kErrToosmall), encode_post_op(e, o.attr());
      }
      e.boolean(false);
      e.boolean(eof);
      return;
    }
    case kFsstat: {
      const Fh fh = decode_fh(d);
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(c, fh, o)) return fail(s), encode_post_op(e, none);
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
    case kFsinfo:
    case kPathconf: {
      const Fh fh = decode_fh(d);
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(c, fh, o)) return fail(s), encode_post_op(e, none);
      // What the file system says (pathconf of the object, statfs's name length).
      const std::string p = proc_path(o.fd.get());
      const long link_max = ::pathconf(p.c_str(), _PC_LINK_MAX);
      const long size_bits = ::pathconf(p.c_str(), _PC_FILESIZEBITS);
      const long symlinks = ::pathconf(p.c_str(), _PC_2_SYMLINKS);
      struct statvfs v;
      const std::uint32_t name_max =
          ::fstatvfs(o.fd.get(), &v) == 0 && v.f_namemax > 0
              ? static_cast<std::uint32_t>(std::min<unsigned long>(v.f_namemax, kMaxName))
              : static_cast<std::uint32_t>(kMaxName);
      e.u32(kOk);
      encode_post_op(e, o.attr());
      if (proc == kPathconf) {
        e.u32(link_max > 0 ? static_cast<std::uint32_t>(std::min<long>(link_max, 0xffffffffL)) : 1);
        e.u32(name_max);
        e.boolean(true);   // no_trunc: a longer name is NAMETOOLONG
        e.boolean(true);   // chown_restricted
        e.boolean(false);  // case_insensitive
        e.boolean(true);   // case_preserving
        return;
      }
      for (std::uint32_t x : {max_io, max_io, 4096u, max_io, max_io, 4096u, 32768u}) e.u32(x);
      e.u64(size_bits > 1 && size_bits < 64 ? (std::uint64_t{1} << (size_bits - 1)) - 1
                                            : ~0ull >> 1);
      e.u32(0);
      e.u32(1);  // time_delta 1 ns
      constexpr std::uint32_t kLinks = 1, kSymlinks = 2, kHomogeneous = 8, kCanSetTime = 0x10;
      e.u32((link_max > 1 ? kLinks : 0) | (symlinks != 0 ? kSymlinks : 0) | kHomogeneous |
            kCanSetTime);
      return;
    }
    case kCommit: {
      const Fh fh = decode_fh(d);
      d.u64();
      d.u32();
      if (!d.ok()) return;
      Obj o;
      if (const Status s = find(c, fh, o)) return fail(s), encode_wcc(e, none, none);
      const Fattr before = o.attr();
      if (!opts()->rw) return fail(kErrRofs), encode_wcc(e, before, before);
      if (!S_ISREG(o.st.st_mode))
        return fail(S_ISDIR(o.st.st_mode) ? kErrIsdir : kErrInval), encode_wcc(e, before, before);
      // The cached descriptor (the writes' own) if there is one, else one the server opens:
      // COMMIT only makes written data stable, it reads and writes none.
      std::shared_ptr<const OpenFile> w;
      Fd own;
      int fd = -1;
      {
        std::lock_guard g(files_mu_);
        const auto it = files_.find(FileKey{o.st.st_dev, o.st.st_ino});
        if (it != files_.end()) w = it->second.file;
      }
      if (w) {
        fd = w->fd.get();
      } else {
        Call::AsServer server(c.id);
        own.reset(::open(proc_path(o.fd.get()).c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
        fd = own.get();
      }
      struct stat s;
      if (fd < 0 || ::fstat(fd, &s) != 0 || s.st_ino != o.st.st_ino)
        return fail(kErrStale), encode_wcc(e, before, before);
      if (::fsync(fd) != 0) return fail(from_errno(errno)), encode_wcc(e, before, attr_of(fd));
      e.u32(kOk);
      encode_wcc(e, before, attr_of(fd));
      e.fixed(write_verf_);
      return;
    }
    default:
      d.fail();
      return;
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
  char host[INET_ADDRSTRLEN] = {};
  const in_addr a{htonl(ctx.peer.v)};
  ::inet_ntop(AF_INET, &a, host, sizeof host);
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
      // The export or a directory beneath it, as mountd mounts any (trailing slashes and "."
      // dropped; ".." refused): its path under the root, normalised.
      std::string rel;
      // A NUL is in no path: each tail after one would be a mount list entry of its own.
      if (path.find('\0') != std::string::npos || !beneath_export(path, rel)) {
        e.u32(2);  // MNT3ERR_NOENT
        return;
      }
      if (!opts()->allows(ctx.peer)) {
        mount_denied_.fetch_add(1, std::memory_order_relaxed);
        e.u32(13);  // MNT3ERR_ACCES, as mountd answers a host the export does not list
        return;
      }
      Fh fh = root_fh();
      if (!rel.empty()) {
        // Resolved beneath the root as every path is (no symbolic link, no "..", no other
        // file system), as the server: mountd answers a directory's handle without the
        // caller's search permission too (the NFS calls that follow are the caller's).
        Obj o;
        o.fd.reset(open_beneath(root_fd_, rel, O_PATH | O_DIRECTORY));
        if (o.fd.get() < 0 || ::fstat(o.fd.get(), &o.st) != 0) {
          const int err = errno;
          e.u32(err == ENOTDIR ? 20 : err == EACCES ? 13 : 2);  // NOTDIR, ACCES, NOENT
          return;
        }
        o.rel = rel;
        const auto sub = handle_of(o, "", o.st);
        if (!sub) {
          e.u32(2);
          return;
        }
        fh = *sub;
      }
      const std::string named = rel.empty() ? export_ : join_export(rel);
      {
        // Who mounted what, for DUMP (showmount -a): once per client and path, the oldest
        // forgotten beyond the bound.
        std::lock_guard g(mount_mu_);
        const auto entry = std::pair<std::string, std::string>(host, named);
        if (std::find(mounts_.begin(), mounts_.end(), entry) == mounts_.end()) {
          mounts_.push_back(entry);
          while (mounts_.size() > max_mount_entries) mounts_.pop_front();
          save_mounts();
        }
      }
      e.u32(0);
      encode(e, fh);
      e.u32(1);
      e.u32(rpc::kAuthSys);
      return;
    }
    case kUmnt:
    case kUmntAll: {
      std::string path;
      if (h.proc == kUmnt) path = d.string(kMaxPath);
      if (!d.ok()) {
        r.accept = rpc::kGarbageArgs;
        rpc::encode(e, r);
        return;
      }
      if (std::string rel; h.proc == kUmnt && beneath_export(path, rel))
        path = rel.empty() ? export_ : join_export(rel);  // as MNT recorded it
      {
        std::lock_guard g(mount_mu_);
        const std::size_t before = mounts_.size();
        mounts_.remove_if([&](const auto& m) {
          return m.first == host && (h.proc == kUmntAll || m.second == path);
        });
        if (mounts_.size() != before) save_mounts();
      }
      rpc::encode(e, r);
      return;
    }
    case kDump: {
      rpc::encode(e, r);
      std::lock_guard g(mount_mu_);
      for (const auto& [who, path] : mounts_) {
        e.boolean(true);
        e.string(who);
        e.string(path);
      }
      e.boolean(false);
      return;
    }
    case kExport: {
      rpc::encode(e, r);
      e.boolean(true);
      e.string(export_);
      const auto o = opts();
      for (const auto& cl : o->clients) {  // groups: who may mount (showmount -e)
        e.boolean(true);
        e.string(cl.text);
      }
      e.boolean(false);
      e.boolean(false);
      return;
    }
    default:
      r.accept = rpc::kProcUnavail;
      rpc::encode(e, r);
      return;
  }
}

thread_local NfsServer::Call* NfsServer::v4_call_ = nullptr;

bool NfsServer::run_as(const rpc::OpaqueAuth& cred, const std::function<void()>& fn) {
  Call c;
  if (!credential(cred, c.cred)) return false;
  no_umask();
  Identity id;
  if (!id.become(c.cred.uid, c.cred.gid, c.cred.groups)) return false;
  c.id = &id;
  // Put back on every way out (an exception from fn too): a later resolve() on this thread
  // must not use this frame's call and identity.
  struct Restore {
    Call* outer;
    ~Restore() { v4_call_ = outer; }
  } restore{std::exchange(v4_call_, &c)};
  fn();
  return true;
}

Status NfsServer::resolve(const Fh& fh, Resolved& r) {
  Call none;
  Call& c = v4_call_ ? *v4_call_ : none;
  Obj o;
  const Status s = find(c, fh, o);
  if (s != kOk) return s;
  r.st = o.st;
  r.rel = std::move(o.rel);
  r.fd = o.fd.release();
  return kOk;
}

namespace {
/// An Obj lent the caller's descriptor: given back (never closed) on every way out, an
/// exception's too, so that the caller's own close is the only one.
template <class O>
struct Lent {
  O& o;
  Lent(O& obj, int fd) : o(obj) { o.fd.reset(fd); }
  ~Lent() { o.fd.release(); }
  Lent(const Lent&) = delete;
  Lent& operator=(const Lent&) = delete;
};
}  // namespace

std::optional<Fh> NfsServer::handle_in(const Resolved& dir, const std::string& name,
                                       const struct stat& st) {
  Obj o;
  const Lent<Obj> lent(o, dir.fd);
  o.rel = dir.rel;
  o.st = dir.st;
  return handle_of(o, name, st);
}

Status NfsServer::io_file(const Resolved& r, bool write, bool keep,
                          std::shared_ptr<const void>& hold, int& fd) {
  Call none;
  Call& c = v4_call_ ? *v4_call_ : none;
  Obj o;
  const Lent<Obj> lent(o, r.fd);
  o.st = r.st;
  std::shared_ptr<const OpenFile> f;
  const Status s = open_file(c, o, write, f, keep);
  if (s != kOk) return s;
  fd = f->fd.get();
  hold = std::move(f);
  return kOk;
}

void NfsServer::drop_write_file(std::uint64_t dev, std::uint64_t ino) {
  std::lock_guard g(files_mu_);
  const auto it = files_.find(FileKey{dev, ino});
  if (it != files_.end() && it->second.file->rw) files_.erase(it);
}

Status NfsServer::open_for_io(const Resolved& r, int flags, int& fd, bool owner_override) {
  Call none;
  Call& c = v4_call_ ? *v4_call_ : none;
  Obj o;
  const Lent<Obj> lent(o, r.fd);
  o.st = r.st;
  return reopen(c, o, flags, owner_override, fd);
}

}  // namespace roce::nfs
