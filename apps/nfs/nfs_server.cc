/// @file
/// NFSv3 and MOUNT over a host directory (nfs_server.h).
#include "apps/nfs/nfs_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

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

std::optional<Fattr> attr_of(const std::string& p) {
  struct stat s;
  if (::lstat(p.c_str(), &s) != 0) return std::nullopt;
  return to_fattr(s);
}

/// A directory itself, not a symbolic link to one (which could lead out of the export).
bool is_dir(const std::string& p) {
  struct stat s;
  return ::lstat(p.c_str(), &s) == 0 && S_ISDIR(s.st_mode);
}

bool bad_name(const std::string& n) {
  return n.empty() || n == "." || n == ".." || n.find('/') != std::string::npos ||
         n.find('\0') != std::string::npos;
}

/// Applies a sattr3 to `p`; 0 or an errno.
int set_attrs(const std::string& p, const Sattr& s) {
  struct stat st;
  // Never through a symbolic link (chmod and truncate follow them): it may point out of the
  // export.
  if (::lstat(p.c_str(), &st) != 0) return errno;
  if (S_ISLNK(st.st_mode)) return EINVAL;
  if (s.mode && ::chmod(p.c_str(), *s.mode & 07777) != 0) return errno;
  if ((s.uid || s.gid) && ::lchown(p.c_str(), s.uid ? *s.uid : static_cast<uid_t>(-1),
                                   s.gid ? *s.gid : static_cast<gid_t>(-1)) != 0)
    return errno;
  if (s.size && ::truncate(p.c_str(), static_cast<off_t>(*s.size)) != 0) return errno;
  if (s.atime_now || s.mtime_now) {
    timespec ts[2];
    ts[0].tv_nsec = s.atime_now ? UTIME_NOW : UTIME_OMIT;
    ts[1].tv_nsec = s.mtime_now ? UTIME_NOW : UTIME_OMIT;
    ts[0].tv_sec = ts[1].tv_sec = 0;
    if (::utimensat(AT_FDCWD, p.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) return errno;
  }
  return 0;
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

bool parse_export_options(std::string_view s, ExportOptions& o, std::string& err) {
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
    if (eq != std::string_view::npos && key != "anonuid" && key != "anongid") {
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
               key == "sec=sys") {
      // What knfsd exports commonly carry and this server does anyway.
    } else {
      err = "unknown export option '" + std::string(opt) +
            "' (ro, rw, root_squash, no_root_squash, all_squash, no_all_squash, anonuid=N, "
            "anongid=N)";
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
      if (ok && slash != std::string_view::npos) {
        const std::string_view p = c.substr(slash + 1);
        ok = !p.empty() && p.size() <= 2 &&
             std::all_of(p.begin(), p.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        if (ok) len = std::stoi(std::string(p));
        ok = ok && len <= 32;
      }
      if (!ok) {
        err = "bad client '" + std::string(c) + "': an IPv4 address, address/prefix or *";
        return false;
      }
      const std::uint32_t mask = len == 0 ? 0 : ~0u << (32 - len);
      out.push_back({ntohl(a.s_addr) & mask, mask, std::string(c)});
    }
    if (comma == std::string_view::npos) break;
    s = s.substr(comma + 1);
  }
  o.clients = std::move(out);
  return true;
}

NfsServer::NfsServer(std::string root, std::string export_path, ExportOptions opts)
    : root_(std::move(root)), export_(std::move(export_path)), opts_(std::move(opts)) {
  struct stat s;
  if (::stat(root_.c_str(), &s) != 0 || !S_ISDIR(s.st_mode))
    throw std::runtime_error("NFS export root " + root_ + " is not a directory");
  root_ino_ = s.st_ino;
  paths_[root_ino_] = root_;
  const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
  for (int i = 0; i < 8; ++i)
    write_verf_[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(t >> (8 * i));
}

Fh NfsServer::remember(const std::string& path, std::uint64_t ino) {
  paths_[ino] = path;
  Fh fh;
  fh.data.assign(kFhMagic, kFhMagic + 4);
  for (int i = 7; i >= 0; --i) fh.data.push_back(static_cast<std::uint8_t>(ino >> (8 * i)));
  return fh;
}

Fh NfsServer::root_fh() const { return const_cast<NfsServer*>(this)->remember(root_, root_ino_); }

bool NfsServer::path_of(const Fh& fh, std::string& path) const {
  if (fh.data.size() != 12 || !std::equal(kFhMagic, kFhMagic + 4, fh.data.begin())) return false;
  std::uint64_t ino = 0;
  for (int i = 4; i < 12; ++i) ino = (ino << 8) | fh.data[static_cast<std::size_t>(i)];
  const auto it = paths_.find(ino);
  if (it == paths_.end()) return false;
  struct stat s;
  // A path whose inode changed (removed, replaced) is stale.
  if (::lstat(it->second.c_str(), &s) != 0 || s.st_ino != ino) return false;
  path = it->second;
  return true;
}

NfsServer::~NfsServer() = default;

void NfsServer::handle(const CallContext&, std::span<const std::uint8_t> call, RpcReply& out) {
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
  if (h.cred.flavor != rpc::kAuthNone && h.cred.flavor != rpc::kAuthSys) {
    r.stat = rpc::kMsgDenied;
    r.reject = rpc::kAuthError;
    r.auth = rpc::kAuthRejectedCred;
    rpc::encode(e, r);
    return;
  }
  if (h.prog != kNfsProgram) {
    r.accept = rpc::kProgUnavail;
    rpc::encode(e, r);
    return;
  }
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
  rpc::encode(e, r);
  const std::size_t body = out.msg.size();
  dispatch(h.proc, d, e, out);
  if (!d.ok()) {  // the arguments did not decode: GARBAGE_ARGS instead of a result
    ++st_.garbage;
    out.msg.resize(body - 4);
    out.payload.clear();
    out.has_payload = false;
    e.u32(rpc::kGarbageArgs);
  }
}

void NfsServer::dispatch(std::uint32_t proc, XdrDecoder& d, XdrEncoder& e, RpcReply& out) {
  std::string p;
  const auto fail = [&](Status s) {
    ++st_.errors;
    e.u32(s);
  };
  switch (proc) {
    case kNull:
      return;
    case kGetattr: {
      const Fh fh = decode_fh(d);
      if (!d.ok()) return;
      if (!path_of(fh, p)) return fail(kErrStale);
      const auto a = attr_of(p);
      if (!a) return fail(from_errno(errno));
      e.u32(kOk);
      encode(e, *a);
      return;
    }
    case kSetattr: {
      const Fh fh = decode_fh(d);
      const Sattr s = decode_sattr(d);
      if (d.boolean()) d.fixed(8);  // guard: ctime (not checked)
      if (!d.ok()) return;
      if (!path_of(fh, p)) return fail(kErrStale);
      const auto before = attr_of(p);
      const int err = set_attrs(p, s);
      e.u32(err ? from_errno(err) : kOk);
      if (err) ++st_.errors;
      encode_wcc(e, before, attr_of(p));
      return;
    }
    case kLookup: {
      const Fh dir = decode_fh(d);
      const std::string name = d.string(kMaxName);
      if (!d.ok()) return;
      if (!path_of(dir, p)) return fail(kErrStale), encode_post_op(e, std::nullopt);
      if (!is_dir(p)) return fail(kErrNotdir), encode_post_op(e, std::nullopt);
      std::string target;
      if (name == ".")
        target = p;
      else if (name == "..")
        target = p == root_ ? p : p.substr(0, p.find_last_of('/'));
      else if (bad_name(name))
        return fail(kErrInval), encode_post_op(e, attr_of(p));
      else
        target = p + "/" + name;
      const auto a = attr_of(target);
      if (!a) return fail(from_errno(errno)), encode_post_op(e, attr_of(p));
      e.u32(kOk);
      encode(e, remember(target, a->fileid));
      encode_post_op(e, a);
      encode_post_op(e, attr_of(p));
      return;
    }
    case kAccess: {
      const Fh fh = decode_fh(d);
      const std::uint32_t want = d.u32();
      if (!d.ok()) return;
      if (!path_of(fh, p)) return fail(kErrStale), encode_post_op(e, std::nullopt);
      e.u32(kOk);
      encode_post_op(e, attr_of(p));
      e.u32(want & 0x3f);  // the export is rw and squashes nobody: everything asked for
      return;
    }
    case kRead: {
      const Fh fh = decode_fh(d);
      const std::uint64_t off = d.u64();
      std::uint32_t count = d.u32();
      if (!d.ok()) return;
      if (!path_of(fh, p)) return fail(kErrStale), encode_post_op(e, std::nullopt);
      count = std::min(count, max_io);
      const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW);
      if (fd < 0) return fail(from_errno(errno)), encode_post_op(e, std::nullopt);
      out.payload.resize(count);
      const ssize_t n = ::pread(fd, out.payload.data(), count, static_cast<off_t>(off));
      const int err = errno;
      struct stat s;
      ::fstat(fd, &s);
      ::close(fd);
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
      if (!path_of(fh, p)) return fail(kErrStale), encode_wcc(e, std::nullopt, std::nullopt);
      const auto before = attr_of(p);
      if (count > data.size() || how > kFileSync)
        return fail(kErrInval), encode_wcc(e, before, before);
      const int fd = ::open(p.c_str(), O_WRONLY | O_NOFOLLOW);
      if (fd < 0) return fail(from_errno(errno)), encode_wcc(e, before, before);
      const ssize_t n = ::pwrite(fd, data.data(), count, static_cast<off_t>(off));
      const int err = errno;
      if (n >= 0 && how != kUnstable) ::fdatasync(fd);
      ::close(fd);
      if (n < 0) return fail(from_errno(err)), encode_wcc(e, before, attr_of(p));
      st_.bytes_written += static_cast<std::uint64_t>(n);
      e.u32(kOk);
      encode_wcc(e, before, attr_of(p));
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
      if (!path_of(dir, p)) return fail(kErrStale), encode_wcc(e, std::nullopt, std::nullopt);
      if (!is_dir(p)) return fail(kErrNotdir), encode_wcc(e, std::nullopt, std::nullopt);
      const auto before = attr_of(p);
      if (bad_name(name)) return fail(kErrInval), encode_wcc(e, before, before);
      const std::string target = p + "/" + name;
      int err = 0;
      const mode_t m = s.mode ? (*s.mode & 07777) : (proc == kMkdir ? 0755 : 0644);
      if (proc == kMkdir) {
        if (::mkdir(target.c_str(), m) != 0) err = errno;
      } else {
        const int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | (mode == kUnchecked ? 0 : O_EXCL);
        const int fd = ::open(target.c_str(), flags, m);
        if (fd < 0)
          err = errno;
        else
          ::close(fd);
        // EXCLUSIVE retried with the same verifier finds its own file: fine for one client.
        if (err == EEXIST && mode == kExclusive) err = 0;
      }
      if (!err && proc == kCreate) {
        Sattr rest = s;
        rest.mode.reset();
        err = set_attrs(target, rest);
      }
      if (err) return fail(from_errno(err)), encode_wcc(e, before, attr_of(p));
      const auto a = attr_of(target);
      e.u32(kOk);
      encode_fh_opt(e, a ? std::optional<Fh>(remember(target, a->fileid)) : std::nullopt);
      encode_post_op(e, a);
      encode_wcc(e, before, attr_of(p));
      return;
    }
    case kRemove:
    case kRmdir: {
      const Fh dir = decode_fh(d);
      const std::string name = d.string(kMaxName);
      if (!d.ok()) return;
      if (!path_of(dir, p)) return fail(kErrStale), encode_wcc(e, std::nullopt, std::nullopt);
      if (!is_dir(p)) return fail(kErrNotdir), encode_wcc(e, std::nullopt, std::nullopt);
      const auto before = attr_of(p);
      if (bad_name(name)) return fail(kErrInval), encode_wcc(e, before, before);
      const std::string target = p + "/" + name;
      const int rc = proc == kRemove ? ::unlink(target.c_str()) : ::rmdir(target.c_str());
      if (rc != 0) return fail(from_errno(errno)), encode_wcc(e, before, attr_of(p));
      e.u32(kOk);
      encode_wcc(e, before, attr_of(p));
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
      if (!path_of(dir, p)) return fail(kErrStale), encode_post_op(e, std::nullopt);
      if (!is_dir(p)) return fail(kErrNotdir), encode_post_op(e, std::nullopt);
      DIR* dp = ::opendir(p.c_str());
      if (!dp) return fail(from_errno(errno)), encode_post_op(e, std::nullopt);
      std::vector<std::string> names;
      while (dirent* de = ::readdir(dp)) names.emplace_back(de->d_name);
      ::closedir(dp);
      std::sort(names.begin(), names.end());  // the cookie is an index into this order
      const std::size_t status_at = out.msg.size();
      e.u32(kOk);
      encode_post_op(e, attr_of(p));
      e.fixed(Verf{});
      const std::size_t limit = std::min<std::size_t>(maxcount, 1u << 20);
      const std::size_t start = out.msg.size();
      std::uint64_t i = cookie;
      bool any = false;
      for (; i < names.size(); ++i) {
        const std::string path = names[i] == "." ? p
                                 : names[i] == ".."
                                     ? (p == root_ ? p : p.substr(0, p.find_last_of('/')))
                                     : p + "/" + names[i];
        const auto a = attr_of(path);
        if (!a) continue;
        std::vector<std::uint8_t> ent;
        XdrEncoder x(ent);
        x.boolean(true);
        x.u64(a->fileid);
        x.string(names[i]);
        x.u64(i + 1);
        if (proc == kReaddirplus) {
          encode_post_op(x, a);
          encode_fh_opt(
              x, names[i] == ".." ? std::nullopt : std::optional<Fh>(remember(path, a->fileid)));
        }
        if (out.msg.size() - start + ent.size() + 8 + 120 > limit) break;
        out.msg.insert(out.msg.end(), ent.begin(), ent.end());
        any = true;
      }
      if (!any && i < names.size()) {  // not even one entry fits
        out.msg.resize(status_at);
        return fail(kErrToosmall), encode_post_op(e, attr_of(p));
      }
      e.boolean(false);
      e.boolean(i >= names.size());
      return;
    }
    case kFsstat: {
      const Fh fh = decode_fh(d);
      if (!d.ok()) return;
      struct statvfs v;
      if (!path_of(fh, p)) return fail(kErrStale), encode_post_op(e, std::nullopt);
      if (::statvfs(p.c_str(), &v) != 0)
        return fail(from_errno(errno)), encode_post_op(e, attr_of(p));
      e.u32(kOk);
      encode_post_op(e, attr_of(p));
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
      if (!path_of(fh, p)) return fail(kErrStale), encode_post_op(e, std::nullopt);
      e.u32(kOk);
      encode_post_op(e, attr_of(p));
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
      if (!path_of(fh, p)) return fail(kErrStale), encode_post_op(e, std::nullopt);
      e.u32(kOk);
      encode_post_op(e, attr_of(p));
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
      if (!path_of(fh, p)) return fail(kErrStale), encode_wcc(e, std::nullopt, std::nullopt);
      const auto before = attr_of(p);
      const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW);
      if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
      }
      e.u32(kOk);
      encode_wcc(e, before, attr_of(p));
      e.fixed(write_verf_);
      return;
    }
    default: {
      // READLINK, SYMLINK, MKNOD, RENAME, LINK: not served. Every result begins with the
      // status and (for these) an attribute or wcc block that may be empty.
      fail(kErrNotsupp);
      if (proc == kReadlink)
        encode_post_op(e, std::nullopt);
      else if (proc == kLink)
        encode_post_op(e, std::nullopt), encode_wcc(e, std::nullopt, std::nullopt);
      else if (proc == kRename)
        encode_wcc(e, std::nullopt, std::nullopt), encode_wcc(e, std::nullopt, std::nullopt);
      else
        encode_wcc(e, std::nullopt, std::nullopt);
      // The arguments are not decoded: consume them so that d stays ok().
      d.fixed(d.remaining() & ~std::size_t{3});
      return;
    }
  }
}

void NfsServer::handle_mount(const CallContext&, std::span<const std::uint8_t> call,
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
      e.boolean(false);  // no groups: everyone
      e.boolean(false);
      return;
    default:
      r.accept = rpc::kProcUnavail;
      rpc::encode(e, r);
      return;
  }
}

}  // namespace roce::nfs
