/// @file
/// The NFSv4.1 server (nfs4_server.h): COMPOUND, sessions, and the operations on files.
#include "apps/nfs/nfs4_server.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <utility>

#include "apps/nfs/call_worker.h"

namespace roce::nfs {

using namespace v4;

namespace {

/// A v3 status from the shared handle code: the POSIX ones are the same numbers in v4.
Status from_v3(v3::Status s) {
  switch (s) {
    case v3::kOk:
      return kOk;
    case v3::kErrBadhandle:
      return kErrBadhandle;
    case v3::kErrNotsupp:
      return kErrNotsupp;
    case v3::kErrServerfault:
      return kErrServerfault;
    case v3::kErrJukebox:
      return kErrDelay;
    default:
      return s < 10000 ? static_cast<Status>(s) : kErrServerfault;
  }
}

/// A v4 status for a file system call's errno: v3's mapping (the POSIX statuses are the same
/// numbers, JUKEBOX becomes DELAY), and SYMLINK for ELOOP, which v3 has not; ENODEV stays IO.
Status from_errno(int e) {
  if (e == ELOOP) return kErrSymlink;
  if (e == ENODEV) return kErrIo;
  return from_v3(v3::from_errno(e));
}

/// RFC 8881 18.*: a component name the server takes (knfsd's check_filename).
Status check_name(const std::string& n) {
  if (n.empty()) return kErrInval;
  if (n.size() > kMaxName) return kErrNametoolong;
  if (n == "." || n == ".." || n.find('/') != std::string::npos ||
      n.find('\0') != std::string::npos)
    return kErrBadname;
  return kOk;
}

FileType type_of(mode_t m) {
  return S_ISDIR(m)    ? kDir
         : S_ISLNK(m)  ? kLnk
         : S_ISBLK(m)  ? kBlk
         : S_ISCHR(m)  ? kChr
         : S_ISSOCK(m) ? kSock
         : S_ISFIFO(m) ? kFifo
                       : kReg;
}

std::uint64_t change_of(const struct stat& s) {
  return static_cast<std::uint64_t>(s.st_ctim.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(s.st_ctim.tv_nsec);
}

void encode_time(XdrEncoder& e, const timespec& t) {
  e.u64(static_cast<std::uint64_t>(static_cast<std::int64_t>(t.tv_sec)));
  e.u32(static_cast<std::uint32_t>(t.tv_nsec));
}

/// A descriptor closed at the end of its scope.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

/// What the server supports: GETATTR answers these, SETATTR sets the writable ones.
Bitmap supported() {
  Bitmap b;
  for (std::uint32_t a : {kSupportedAttrs,
                          kType,
                          kFhExpireType,
                          kChange,
                          kSize,
                          kLinkSupport,
                          kSymlinkSupport,
                          kNamedAttr,
                          kFsid,
                          kUniqueHandles,
                          kLeaseTime,
                          kRdattrError,
                          kAclSupport,
                          kCansettime,
                          kCaseInsensitive,
                          kCasePreserving,
                          kChownRestricted,
                          kFilehandle,
                          kFileid,
                          kFilesAvail,
                          kFilesFree,
                          kFilesTotal,
                          kHomogeneous,
                          kMaxfilesize,
                          kMaxlink,
                          kMaxname,
                          kMaxread,
                          kMaxwrite,
                          kMode,
                          kNoTrunc,
                          kNumlinks,
                          kOwner,
                          kOwnerGroup,
                          kRawdev,
                          kSpaceAvail,
                          kSpaceFree,
                          kSpaceTotal,
                          kSpaceUsed,
                          kTimeAccess,
                          kTimeAccessSet,
                          kTimeDelta,
                          kTimeMetadata,
                          kTimeModify,
                          kTimeModifySet,
                          kMountedOnFileid,
                          kSuppattrExclcreat})
    b.set(a);
  return b;
}

std::string proc_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// Lease breaks (fcntl(2) F_SETLEASE, F_SETSIG): the kernel signals the process when a writer
// opens a file a delegation's lease is on. The handler, on whichever thread takes it, counts
// and notes the descriptor; the server asks those leases (F_GETLEASE) when the count moved.
std::atomic<std::uint64_t> g_lease_breaks{0};
// The broken leases' descriptors (si_fd), the last kBreakRing of them: entry n holds
// n << 32 | (fd + 1), so that a reader tells an entry not yet written (or overwritten) from the
// one it wants and falls back to asking every lease. Lock-free, async-signal safe.
constexpr std::uint64_t kBreakRing = 256;
std::atomic<std::uint64_t> g_break_fds[kBreakRing];
extern "C" void on_lease_break(int, siginfo_t* si, void*) {
  const std::uint64_t n = g_lease_breaks.fetch_add(1, std::memory_order_acq_rel);
  const std::uint64_t fd = si && si->si_fd >= 0 ? static_cast<std::uint64_t>(si->si_fd) + 1 : 0;
  g_break_fds[n % kBreakRing].store((n & 0xffffffffu) << 32 | fd, std::memory_order_release);
}

// When the real-time signal cannot be queued (RLIMIT_SIGPENDING) the kernel sends SIGIO instead,
// whose default action ends the process: counted as a break of unknown descriptor, so that the
// server asks every lease (the ring's entry for it is never written).
extern "C" void on_sigio(int) { g_lease_breaks.fetch_add(1, std::memory_order_acq_rel); }

/// The handler installed once; false when the signal belongs to somebody else. SIGIO's too,
/// unless somebody else handles (or ignores) it already.
bool lease_handler() {
  static const bool ok = [] {
    if (struct sigaction io{}; ::sigaction(SIGIO, nullptr, &io) == 0 &&
                               !(io.sa_flags & SA_SIGINFO) && io.sa_handler == SIG_DFL) {
      struct sigaction sa {};
      sa.sa_handler = on_sigio;
      sa.sa_flags = SA_RESTART;
      sigemptyset(&sa.sa_mask);
      ::sigaction(SIGIO, &sa, nullptr);
    }
    struct sigaction old {};
    if (::sigaction(Nfs4Server::lease_signal(), nullptr, &old) != 0) return false;
    if ((old.sa_flags & SA_SIGINFO) ? old.sa_sigaction != on_lease_break
                                    : old.sa_handler != SIG_DFL)
      return false;
    struct sigaction sa {};
    sa.sa_sigaction = on_lease_break;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return ::sigaction(Nfs4Server::lease_signal(), &sa, nullptr) == 0;
  }();
  return ok;
}

std::int64_t read_proc_number(const char* path, std::int64_t fallback) {
  std::ifstream f(path);
  std::int64_t v = fallback;
  if (!(f >> v)) return fallback;
  return v;
}

std::string join(const std::string& rel, const std::string& name) {
  return rel.empty() ? name : rel + "/" + name;
}
std::string parent_of(const std::string& rel) {
  const auto p = rel.rfind('/');
  return p == std::string::npos ? std::string() : rel.substr(0, p);
}

}  // namespace

/// One COMPOUND being served.
struct Nfs4Server::Compound {
  const CallContext* ctx = nullptr;
  /// The server's lock, held but for file I/O (Unlocked): the state is checked and changed with
  /// it, pread, pwrite and fsync run without, so that one client's slow disk stalls nobody else.
  std::unique_lock<std::mutex>* lock = nullptr;
  std::optional<v3::Fh> cur, saved;
  Stateid cur_stateid{};
  bool has_cur_stateid = false;
  bool in_session = false;
  SessionId sid{};
  std::uint32_t slot = 0;
  std::uint64_t clientid = 0;                         ///< the session's client
  Principal principal;                                ///< the call's credential and peer
  const std::vector<std::uint8_t>* replay = nullptr;  ///< SEQUENCE found a retry: its reply
  bool durable = false;  ///< RECLAIM_COMPLETE recorded the client: answered once on disk
};

int Nfs4Server::lease_signal() { return SIGRTMIN + 6; }

bool Nfs4Server::leases_usable() {
  return read_proc_number("/proc/sys/fs/leases-enable", 1) != 0 && lease_handler();
}

Nfs4Server::~Nfs4Server() {
  files_.before_change = nullptr;
  {
    std::lock_guard g(mu_);
    flush_records();  // the last text: written before the thread ends
  }
  if (rec_thread_.joinable()) {
    {
      std::lock_guard w(rec_mu_);
      rec_stop_ = true;
    }
    rec_cv_.notify_all();
    rec_thread_.join();
  }
  for (auto& [id, st] : states_) release(st);
  if (state_fd_ >= 0) ::close(state_fd_);
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  for (const auto& [f, fd] : host_wait_fd_) ::close(fd);
}

void Nfs4Server::open_state_dir() {
  // The directory is the server's alone: not a symbolic link, owned by the server's user,
  // writable by nobody else (as sshd judges ~/.ssh). Anything else and there are no records: no
  // grace period, said once in state_error().
  const int dir = ::open(state_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat ds {};
  std::string why;
  if (dir < 0)
    why = std::strerror(errno);
  else if (::fstat(dir, &ds) != 0)
    why = std::strerror(errno);
  else if (ds.st_uid != ::geteuid())
    why = "owned by uid " + std::to_string(ds.st_uid) + ", not this process's";
  else if (ds.st_mode & (S_IWGRP | S_IWOTH))
    why = "writable by group or others";
  if (!why.empty()) {
    if (dir >= 0) ::close(dir);
    state_error_ = "state directory " + state_dir_ + " not used (" + why +
                   "): no client records, no grace period";
    state_dir_.clear();
    return;
  }
  // One server per directory: a second one (two services, or roced and roce-nfsd, on the same
  // --state-dir) would rewrite the other's records away.
  if (::flock(dir, LOCK_EX | LOCK_NB) != 0) {
    ::close(dir);
    state_error_ = "state directory " + state_dir_ +
                   " is in use by another NFS server: no client records, no grace period";
    state_dir_.clear();
    return;
  }
  state_fd_ = dir;
  // One co_ownerid a line, in hex (written by flush_records()): a regular file only (no link,
  // FIFO or device), read up to what the table could have written.
  const int fd = ::openat(dir, "clients", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT)
      state_error_ = "cannot read " + state_dir_ + "/clients: " + std::strerror(errno);
    return;
  }
  struct stat fs {};
  std::string text;
  const std::size_t cap = lim_.clients * 4 * (2 * kOpaqueLimit + kRecordTail);
  if (::fstat(fd, &fs) != 0 || !S_ISREG(fs.st_mode)) {
    state_error_ = state_dir_ + "/clients is not a regular file: ignored";
  } else {
    text.resize(
        std::min<std::size_t>(static_cast<std::size_t>(std::max<off_t>(fs.st_size, 0)), cap));
    std::size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    text.resize(got);
  }
  ::close(fd);
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t j = std::min(text.find('\n', i), text.size());
    std::string_view line(text.data() + i, j - i);
    i = j + 1;
    // "<co_ownerid in hex> <flavor> <uid> <gid> <address>" (decimal), or the hex alone (an
    // older server's record: any principal may reclaim it, this once).
    std::optional<Principal> who;
    if (const auto sp = line.find(' '); sp != std::string_view::npos) {
      std::uint32_t v[4];
      std::size_t at = sp, k = 0;
      for (; k < 4 && at < line.size() && line[at] == ' '; ++k) {
        const char* b = line.data() + at + 1;
        const auto [p, ec] = std::from_chars(b, line.data() + line.size(), v[k]);
        if (ec != std::errc() || p == b) break;
        at = static_cast<std::size_t>(p - line.data());
      }
      if (k != 4 || at != line.size()) continue;
      who = Principal{v[0], v[1], v[2], v[3]};
      line = line.substr(0, sp);
    }
    if (line.empty() || line.size() % 2 || line.size() > 2 * kOpaqueLimit) continue;
    std::vector<std::uint8_t> id;
    for (std::size_t k = 0; k < line.size(); k += 2) {
      const auto hex = [](char ch) {
        return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
      };
      const int hi = hex(line[k]), lo = hex(line[k + 1]);
      if (hi < 0 || lo < 0) {
        id.clear();
        break;
      }
      id.push_back(static_cast<std::uint8_t>(hi << 4 | lo));
    }
    if (!id.empty() && records_.size() < lim_.clients * 4) records_.emplace(id, who);
  }
  previous_ = records_;
}

Nfs4Server::Nfs4Server(NfsServer& files, Limits limits, std::string state_dir)
    : state_dir_(std::move(state_dir)), files_(files), lim_(limits) {
  if (!state_dir_.empty()) open_state_dir();
  // Made by the server itself (not inside a caller's run_as): it writes as the server.
  if (state_fd_ >= 0) rec_thread_ = std::thread([this] { records_writer(); });
  lease_break_s_ = std::max<std::int64_t>(read_proc_number("/proc/sys/fs/lease-break-time", 45), 1);
  leases_ok_ = leases_usable();
  files_.before_change = [this](std::uint64_t dev, std::uint64_t ino) {
    return v3_change(dev, ino);
  };
  now = [] {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  std::uint32_t r = 0;
  if (::getrandom(&r, sizeof r, 0) != sizeof r)
    r = static_cast<std::uint32_t>(std::chrono::system_clock::now().time_since_epoch().count());
  const auto t = static_cast<std::uint32_t>(::time(nullptr));
  boot_ = (std::uint64_t{t} << 32 | r) & 0xffffffffu;
  if (!boot_) boot_ = 1;
  for (int i = 0; i < 4; ++i)
    boot_verf_[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(t >> (8 * i));
  for (int i = 0; i < 4; ++i)
    boot_verf_[static_cast<std::size_t>(4 + i)] = static_cast<std::uint8_t>(r >> (8 * i));
  NfsServer::Resolved root;
  if (files_.resolve(files_.root_fh(), root) == v3::kOk) {
    root_dev_ = root.st.st_dev;
    root_ino_ = root.st.st_ino;
    ::close(root.fd);
  }
  // The export's path as MOUNT names it: the pseudo-root's directories on the way to it.
  const std::string& ex = files_.export_path();
  for (std::size_t i = 0; i < ex.size();) {
    const std::size_t j = std::min(ex.find('/', i), ex.size());
    if (j > i && ex.compare(i, j - i, ".") != 0 && export_parts_.size() < 255)
      export_parts_.push_back(ex.substr(i, j - i));
    i = j + 1;
  }
}

bool Nfs4Server::is_v4(std::span<const std::uint8_t> call) {
  XdrDecoder d(call);
  rpc::CallHeader h;
  return rpc::decode(d, h) && h.prog == v3::kNfsProgram && h.vers == kNfsVersion;
}

void Nfs4Server::handle(const CallContext& ctx, std::span<const std::uint8_t> call, RpcReply& out) {
  out = RpcReply{};
  XdrDecoder d(call);
  rpc::CallHeader h;
  XdrEncoder e(out.msg);
  rpc::ReplyHeader r;
  std::unique_lock g(mu_);
  drain_inbox();
  poll_leases();
  if (!rpc::decode(d, h)) {
    ++st_.garbage;
    if (!d.ok() || call.size() < 8) return;
    r.xid = h.xid;
    r.stat = rpc::kMsgDenied;
    r.reject = rpc::kRpcMismatch;
    r.low = r.high = rpc::kRpcVersion;
    rpc::encode(e, r);
    return;
  }
  r.xid = h.xid;
  if (h.rpcvers != rpc::kRpcVersion) {
    r.stat = rpc::kMsgDenied;
    r.reject = rpc::kRpcMismatch;
    r.low = r.high = rpc::kRpcVersion;
    rpc::encode(e, r);
    return;
  }
  const auto deny = [&] {
    r.stat = rpc::kMsgDenied;
    r.reject = rpc::kAuthError;
    r.auth = rpc::kAuthBadCred;
    rpc::encode(e, r);
  };
  const bool flavor_ok = h.cred.flavor == rpc::kAuthNone ||
                         (h.cred.flavor == rpc::kAuthSys && rpc::parse_auth_sys(h.cred));
  if (!flavor_ok) return deny();
  if (h.prog != v3::kNfsProgram) {
    r.accept = rpc::kProgUnavail;
    rpc::encode(e, r);
    return;
  }
  if (h.vers != kNfsVersion) {
    r.accept = rpc::kProgMismatch;
    r.low = 3;
    r.high = 4;
    rpc::encode(e, r);
    return;
  }
  if (h.proc == kNull) {
    rpc::encode(e, r);
    return;
  }
  if (!files_.options().allows(ctx.peer)) return deny();
  if (h.proc != kCompound) {
    r.accept = rpc::kProcUnavail;
    rpc::encode(e, r);
    return;
  }
  rpc::encode(e, r);
  const std::size_t body = out.msg.size();
  Compound c;
  c.ctx = &ctx;
  c.lock = &g;
  c.principal.flavor = h.cred.flavor;
  c.principal.peer = ctx.peer.v;
  if (const auto sys = rpc::parse_auth_sys(h.cred)) {
    c.principal.uid = sys->uid;
    c.principal.gid = sys->gid;
  }
  const bool ran = files_.run_as(h.cred, [&] { compound(c, d, e, out); });
  flush_records();  // as the server itself, not as the caller
  if (!ran || (!d.ok() && out.msg.size() == body)) {
    // No identity to act as (roced lacks CAP_SETUID), or the COMPOUND's header did not decode.
    out.msg.resize(body - 4);
    out.payload.clear();
    out.has_payload = false;
    e.u32(ran ? rpc::kGarbageArgs : rpc::kSystemErr);
    ++(ran ? st_.garbage : st_.errors);
  }
  if (c.durable) {
    // RECLAIM_COMPLETE answered once the client's record is on disk: the reply is held (the
    // slot answers a retry DELAY meanwhile), never the server's lock.
    if (const std::uint64_t gen = records_pending()) {
      const auto s = sessions_.find(c.sid);
      if (c.in_session && s != sessions_.end() && c.slot < s->second.slots.size())
        s->second.slots[c.slot].durable_gen = gen;
      g.unlock();
      await_records(gen);
    }
  }
}

void Nfs4Server::compound(Compound& c, XdrDecoder& d, XdrEncoder& e, RpcReply& out) {
  const std::string tag = d.string(kMaxTag);
  const std::uint32_t minor = d.u32();
  const std::uint32_t n = d.u32();
  if (!d.ok()) return;  // GARBAGE_ARGS
  ++st_.compounds;
  const std::size_t start = e.size();
  e.u32(kOk);
  e.string(tag);
  const std::size_t count_at = e.size();
  e.u32(0);
  if (minor != kMinorVersion) {
    e.patch_u32(start, kErrMinorVersMismatch);
    ++st_.errors;
    return;
  }
  Status status = kOk;
  std::uint32_t done = 0;
  // The slot is free again however this COMPOUND ends (an exception included).
  struct SlotFree {
    Nfs4Server& s;
    Compound& c;
    ~SlotFree() {
      if (!c.in_session) return;
      const auto it = s.sessions_.find(c.sid);
      if (it != s.sessions_.end() && c.slot < it->second.slots.size())
        it->second.slots[c.slot].in_use = false;
    }
  } slot_free{*this, c};
  for (std::uint32_t i = 0; i < n && status == kOk; ++i) {
    std::uint32_t opnum = d.u32();
    if (!d.ok()) {  // fewer operations than the count said
      opnum = kIllegal;
      status = kErrBadxdr;
    } else if (opnum < kAccess || opnum > kReclaimComplete) {
      opnum = kIllegal;
      status = kErrOpIllegal;
    } else {
      const bool sessionless = opnum == kExchangeId || opnum == kCreateSession ||
                               opnum == kDestroyClientid || opnum == kBindConnToSession ||
                               opnum == kDestroySession;
      if (i == 0 && opnum != kSequence && !sessionless)
        status = kErrOpNotInSession;
      else if (i == 0 && sessionless && n > 1)
        status = kErrNotOnlyOp;
      else if (i > 0 && opnum == kSequence)
        status = kErrSequencePos;
    }
    e.u32(opnum);
    const std::size_t status_at = e.size();
    e.u32(kOk);
    ++st_.ops;
    ++st_.by_op[opnum];
    if (status == kOk) {
      if (opnum == kSequence) {
        status = sequence(c, d, e, n);
        if (status == kOk && c.replay) {  // a retry: the reply it got, word for word
          ++st_.replays;
          out.msg.resize(start);
          out.msg.insert(out.msg.end(), c.replay->begin(), c.replay->end());
          return;
        }
      } else {
        status = op(c, opnum, d, e, out, i + 1 == n);
      }
      if (!d.ok()) {
        status = kErrBadxdr;
        out.msg.resize(status_at + 4);
        out.payload.clear();
        out.has_payload = false;
      }
    }
    e.patch_u32(status_at, status);
    ++done;
  }
  if (status != kOk) ++st_.errors;
  if (status == kErrGrace) ++st_.grace_answers;
  if (status == kErrResource) ++st_.resource;
  e.patch_u32(start, status);
  e.patch_u32(count_at, done);
  // The reply cache: what this slot answers a retry with (small replies without a READ payload).
  if (c.in_session) {
    const auto s = sessions_.find(c.sid);
    if (s != sessions_.end() && c.slot < s->second.slots.size()) {
      Slot& slot = s->second.slots[c.slot];
      const std::size_t size = out.msg.size() - start;
      slot.cached = !out.has_payload && size <= lim_.cached_reply;
      if (slot.cached)
        slot.reply.assign(out.msg.begin() + static_cast<std::ptrdiff_t>(start), out.msg.end());
      else
        slot.reply.clear();
      slot.in_use = false;
    }
  }
}

Status Nfs4Server::op(Compound& c, std::uint32_t opnum, XdrDecoder& d, XdrEncoder& e, RpcReply& out,
                      bool last) {
  switch (opnum) {
    case kExchangeId:
      return exchange_id(c, d, e);
    case kCreateSession:
      return create_session(c, d, e);
    case kDestroySession:
      return destroy_session(c, d);
    case kDestroyClientid:
      return destroy_clientid(c, d);
    case kReclaimComplete: {
      const bool one_fs = d.boolean();
      if (!d.ok()) return kErrBadxdr;
      const auto cl = clients_.find(c.clientid);
      if (cl == clients_.end()) return kErrStaleClientid;
      if (one_fs) return c.cur ? kOk : kErrNofilehandle;
      if (cl->second.reclaim_complete) return kErrCompleteAlready;
      cl->second.reclaim_complete = true;
      // Recorded from now on (it may reclaim after a restart), and done reclaiming this time;
      // not so another principal naming a recorded id (it is a new client, the id's owner
      // may still come back and reclaim).
      if (owns_record(cl->second)) {
        previous_.erase(cl->second.ownerid);
        record(cl->second, true);
        c.durable = !state_dir_.empty();
      }
      grace_locked();  // the last one to finish ends the grace period
      return kOk;
    }
    case kSecinfoNoName:
    case kSecinfo: {
      std::uint32_t style = 0;
      if (opnum == kSecinfo) {
        const std::string name = d.string(kMaxNameWire);
        if (!d.ok()) return kErrBadxdr;
        if (const Status s = check_name(name)) return s;
      } else {
        style = d.u32();
        if (!d.ok()) return kErrBadxdr;
        if (style > 1) return kErrInval;
      }
      NfsServer::Resolved r;
      if (const auto depth = c.cur ? pseudo_depth(*c.cur) : std::nullopt) {
        if (style == 1 && *depth == 0) return kErrNoent;
      } else {
        if (const Status s = current(c, r)) return s;
        ::close(r.fd);
        if (!S_ISDIR(r.st.st_mode) && (opnum == kSecinfo || style == 1)) return kErrNotdir;
        if (style == 1 && r.st.st_ino == root_ino_ && r.st.st_dev == root_dev_ &&
            export_parts_.empty())
          return kErrNoent;
      }
      e.u32(1);
      e.u32(rpc::kAuthSys);
      c.cur.reset();  // RFC 8881 2.6.3.1.1.8: SECINFO consumes the current file handle
      return kOk;
    }
    case kPutrootfh:
    case kPutpubfh:
      c.cur = export_parts_.empty() ? files_.root_fh() : pseudo_fh(0);
      return kOk;
    case kPutfh: {
      const auto b = d.opaque(kFhSize);
      if (!d.ok()) return kErrBadxdr;
      if (b.empty()) return kErrBadhandle;
      v3::Fh fh;
      fh.data.assign(b.begin(), b.end());
      if (pseudo_depth(fh)) {
        c.cur = std::move(fh);
        return kOk;
      }
      NfsServer::Resolved r;
      if (const v3::Status s = files_.resolve(fh, r)) return from_v3(s);
      ::close(r.fd);
      c.cur = std::move(fh);
      return kOk;
    }
    case kGetfh:
      if (!c.cur) return kErrNofilehandle;
      e.opaque(c.cur->data);
      return kOk;
    case kSavefh:
      if (!c.cur) return kErrNofilehandle;
      c.saved = c.cur;
      return kOk;
    case kRestorefh:
      if (!c.saved) return kErrRestorefh;
      c.cur = c.saved;
      return kOk;
    case kGetattr:
      return getattr(c, d, e);
    case kLookup:
      return lookup(c, d);
    case kLookupp:
      return lookupp(c);
    case kAccess:
      return access(c, d, e);
    case kOpen:
      return open(c, d, e);
    case kClose:
      return close(c, d, e);
    case kOpenDowngrade:
      return open_downgrade(c, d, e);
    case kRead:
      return read(c, d, e, out, last);
    case kWrite:
      return write(c, d, e);
    case kCommit:
      return commit(c, d, e);
    case kCreate:
      return create(c, d, e);
    case kRemove:
      return remove(c, d, e);
    case kRename:
      return rename(c, d, e);
    case kLink:
      return link(c, d, e);
    case kReaddir:
      return readdir(c, d, e);
    case kReadlink:
      return readlink(c, e);
    case kSetattr:
      return setattr(c, d, e);
    case kLock:
      return lock(c, d, e);
    case kLockt:
      return lockt(c, d, e);
    case kLocku:
      return locku(c, d, e);
    case kFreeStateid:
      return free_stateid(c, d);
    case kTestStateid:
      return test_stateid(c, d, e);
    case kDelegreturn:
      return delegreturn(c, d);
    case kBindConnToSession:
      return bind_conn(c, d, e);
    case kBackchannelCtl:
      return backchannel_ctl(c, d);
    case kOpenConfirm:
    case kRenew:
    case kSetclientid:
    case kSetclientidConfirm:
    case kReleaseLockowner:
      return kErrNotsupp;  // NFSv4.0's: RFC 8881 says NOTSUPP in a minor version 1 COMPOUND
    default:
      return kErrNotsupp;
  }
}

// --- Clients and sessions ----------------------------------------------------------------

void Nfs4Server::reap_expired() {
  const std::int64_t t = now();
  std::vector<std::uint64_t> gone;
  for (const auto& [id, cl] : clients_)
    if (t - cl.renewed > static_cast<std::int64_t>(lim_.lease_seconds)) gone.push_back(id);
  for (auto id : gone) forget_client(id);
}

void Nfs4Server::reap_courteous(std::int64_t t) {
  if (t - courtesy_checked_ < 60) return;
  courtesy_checked_ = t;
  std::vector<std::uint64_t> gone;
  for (const auto& [id, cl] : clients_)
    if (t - cl.renewed > static_cast<std::int64_t>(lim_.courtesy_seconds)) gone.push_back(id);
  for (auto id : gone) forget_client(id);  // its record goes too (forget_client: record())
  st_.courtesy_expired += gone.size();
}

bool Nfs4Server::still_reclaiming() const {
  const std::int64_t t = now();
  for (const auto& [id, cl] : clients_)
    if (cl.confirmed && !cl.reclaim_complete && previous_.contains(cl.ownerid) && owns_record(cl) &&
        t - cl.renewed <= static_cast<std::int64_t>(lim_.lease_seconds))
      return true;
  return false;
}

bool Nfs4Server::grace_locked() {
  const auto say = [this](const std::string& m) {
    if (log) log(m);
  };
  if (previous_.empty()) {
    if (st_.grace_now) {  // the last recorded client sent RECLAIM_COMPLETE
      st_.grace_now = 0;
      say("NFSv4.1 grace period over early: all " + std::to_string(grace_clients_) +
          " recorded clients reclaimed");
    }
    return false;
  }
  if (grace_end_ < 0) {
    grace_end_ = now() + static_cast<std::int64_t>(lim_.grace_seconds);
    grace_clients_ = previous_.size();
    st_.grace_now = 1;
    ++st_.grace_periods;
    say("NFSv4.1 grace period: " + std::to_string(grace_clients_) +
        " recorded clients may reclaim for up to " + std::to_string(lim_.grace_seconds) +
        " s; new opens and locks, REMOVE and RENAME answer GRACE meanwhile");
  }
  // Extended (knfsd's clients_still_reclaiming()): once, by up to a lease (never more than the
  // grace period itself), and only while a recorded client is mid-reclaim; over as soon as
  // none is, so that a client that never comes back does not hold it.
  if (now() < grace_end_ && (!grace_extended_ || still_reclaiming())) return true;
  if (!grace_extended_ && still_reclaiming()) {
    grace_extended_ = true;
    const auto more = std::min(lim_.lease_seconds, lim_.grace_seconds);
    grace_end_ = now() + static_cast<std::int64_t>(more);
    ++st_.grace_extensions;
    say("NFSv4.1 grace period extended by " + std::to_string(more) +
        " s: a recorded client is still reclaiming");
    return true;
  }
  // Over: who did not reclaim in time has nothing to reclaim any more.
  say("NFSv4.1 grace period over: " + std::to_string(previous_.size()) + " of " +
      std::to_string(grace_clients_) + " recorded clients did not come back in time");
  st_.grace_now = 0;
  for (const auto& [id, who] : previous_) records_.erase(id);
  // A client that came back as another principal than its record names (its address changed:
  // it could reclaim nothing, the record's owner might still have come) and finished with
  // RECLAIM_COMPLETE holds its state by right now: recorded with its own principal. Only when
  // the address alone changed (same flavor, uid and gid): another credential naming a guessable
  // co_ownerid would otherwise take the record over from a client that was down for the grace
  // period (review19-attacker 3); that client is a new one, and the record is erased as above.
  for (const auto& [cid, cl] : clients_) {
    const auto p = previous_.find(cl.ownerid);
    if (!cl.confirmed || !cl.reclaim_complete || p == previous_.end() || state_dir_.empty())
      continue;
    const v4::Principal& was = p->second ? *p->second : cl.principal;
    if (was.flavor != cl.principal.flavor || was.uid != cl.principal.uid ||
        was.gid != cl.principal.gid) {
      ++st_.records_refused;
      say("NFSv4.1 client record not given to a client of another credential (flavor " +
          std::to_string(cl.principal.flavor) + ", uid " + std::to_string(cl.principal.uid) +
          ", gid " + std::to_string(cl.principal.gid) + ") naming a recorded co_ownerid");
      continue;
    }
    records_[cl.ownerid] = cl.principal;
    ++st_.records_rewritten;
  }
  previous_.clear();
  write_records();
  return false;
}

bool Nfs4Server::may_reclaim(std::uint64_t clientid) {
  if (!grace_locked()) return false;
  const auto cl = clients_.find(clientid);
  return cl != clients_.end() && !cl->second.reclaim_complete &&
         previous_.contains(cl->second.ownerid) && owns_record(cl->second);
}

bool Nfs4Server::owns_record(const Client& cl) const {
  const auto p = previous_.find(cl.ownerid);
  return p == previous_.end() || !p->second || *p->second == cl.principal;
}

void Nfs4Server::record(const Client& cl, bool add) {
  if (state_dir_.empty()) return;
  if (add) {
    const auto [r, added] = records_.try_emplace(cl.ownerid, cl.principal);
    if (!added && r->second == cl.principal) return;
    r->second = cl.principal;
  } else {
    for (const auto& [id, o] : clients_)
      if (o.ownerid == cl.ownerid && o.reclaim_complete) return;  // another instance keeps it
    const auto r = records_.find(cl.ownerid);
    if (previous_.contains(cl.ownerid) || r == records_.end() ||
        (r->second && *r->second != cl.principal))
      return;
    records_.erase(r);
  }
  write_records();
}

void Nfs4Server::write_records() { records_dirty_ = state_fd_ >= 0; }

void Nfs4Server::flush_records() {
  if (!records_dirty_) return;
  records_dirty_ = false;
  // The text is built here (under mu_: the table may not change meanwhile); the file is the
  // writer thread's, so that neither a COMPOUND nor the poll loop's tick waits for the disk.
  std::string text;
  static const char* const kHex = "0123456789abcdef";
  for (const auto& [id, who] : records_) {
    for (const std::uint8_t b : id) {
      text += kHex[b >> 4];
      text += kHex[b & 15];
    }
    if (who)
      for (const std::uint32_t v : {who->flavor, who->uid, who->gid, who->peer})
        text += ' ' + std::to_string(v);
    text += '\n';
  }
  {
    std::lock_guard w(rec_mu_);
    rec_text_ = std::move(text);
    ++rec_gen_;
  }
  rec_cv_.notify_all();
}

void Nfs4Server::sync_records() {
  {
    std::lock_guard g(mu_);
    flush_records();
  }
  if (!rec_thread_.joinable()) return;
  std::unique_lock w(rec_mu_);
  const std::uint64_t want = rec_gen_;
  rec_cv_.wait(w, [&] { return rec_written_ >= want; });
}

std::uint64_t Nfs4Server::records_pending() const {
  if (!rec_thread_.joinable()) return 0;
  std::lock_guard w(rec_mu_);
  return rec_written_ < rec_gen_ ? rec_gen_ : 0;
}

void Nfs4Server::await_records(std::uint64_t gen) {
  std::unique_lock w(rec_mu_);
  if (rec_written_ >= gen) return;
  ++rec_waits_;
  rec_urgent_ = std::max(rec_urgent_, gen);
  rec_cv_.notify_all();
  if (auto release = CallWorker::hold_done()) {  // on a worker: the reply waits, not the thread
    rec_waiters_.emplace_back(gen, std::move(release));
    return;
  }
  rec_cv_.wait(w, [&] { return rec_written_ >= gen || rec_stop_; });
}

void Nfs4Server::records_writer() {
  std::unique_lock w(rec_mu_);
  std::chrono::steady_clock::time_point last{};
  const auto release_written = [&] {
    // The held replies whose records are on disk now go (released without the lock).
    std::vector<std::function<void()>> go;
    std::erase_if(rec_waiters_, [&](auto& x) {
      if (x.first > rec_written_ && !rec_stop_) return false;
      go.push_back(std::move(x.second));
      return true;
    });
    if (go.empty()) return;
    w.unlock();
    for (auto& f : go) f();
    w.lock();
  };
  for (;;) {
    rec_cv_.wait(w, [&] { return rec_stop_ || rec_gen_ != rec_written_; });
    if (rec_gen_ == rec_written_) {  // stopping, nothing left to write
      release_written();
      return;
    }
    // At most one rewrite per interval: what changes meanwhile goes in this one (the newest
    // text wins); records_urgent_ms when a reply waits for it. A stop writes at once.
    const auto pace = [&] {
      return std::chrono::milliseconds(rec_urgent_ > rec_written_ ? records_urgent_ms.load()
                                                                  : records_interval_ms.load());
    };
    while (!rec_stop_) {
      const auto due = last + pace();
      if (std::chrono::steady_clock::now() >= due) break;
      rec_cv_.wait_until(w, due);
    }
    const std::string text = rec_text_;
    const std::uint64_t gen = rec_gen_;
    w.unlock();
    if (records_hook) records_hook();
    std::string err;
    const bool ok = write_records_file(text, err);
    last = std::chrono::steady_clock::now();
    w.lock();
    const bool was_ok = rec_error_.empty();
    rec_error_ = ok ? std::string() : err;
    rec_written_ = gen;
    ++rec_writes_;
    if (was_ok && !ok && log) log(err + " (reclaims after a restart will fail)");
    rec_cv_.notify_all();
    release_written();
  }
}

bool Nfs4Server::write_records_file(const std::string& text, std::string& err) {
  // Whole or not at all: a new file, flushed, then renamed over the old one. Relative to the
  // directory opened at start, never through a link: whatever sits at clients.new is removed,
  // and the new file must be made afresh.
  ::unlinkat(state_fd_, "clients.new", 0);
  const int fd = ::openat(state_fd_, "clients.new",
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  for (std::size_t done = 0; ok && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int e = errno;
  if (fd >= 0) ::close(fd);
  ok = ok && ::renameat(state_fd_, "clients.new", state_fd_, "clients") == 0;
  if (ok) {
    ::fsync(state_fd_);
    return true;
  }
  err = "cannot write " + state_dir_ + "/clients: " + std::strerror(fd < 0 ? e : errno);
  return false;
}

void Nfs4Server::forget_client(std::uint64_t clientid) {
  std::erase_if(sessions_, [&](const auto& s) { return s.second.clientid == clientid; });
  client_sessions_.erase(clientid);
  waiting_.erase(clientid);
  std::erase_if(by_file_, [&](const auto& f) {
    const auto s = states_.find(f.second);
    return s == states_.end() || s->second.clientid == clientid;
  });
  std::erase_if(pending_, [&](const auto& p) { return !sessions_.count(p.second.session); });
  std::vector<FileKey> written, unlocked;
  drop_waiters(clientid);
  for (auto it = states_.begin(); it != states_.end();) {
    if (it->second.clientid == clientid) {
      if (it->second.kind == State::kOpenState && (it->second.access & kShareAccessWrite))
        written.push_back(it->second.file);
      release(it->second);
      if (it->second.kind == State::kDelegState) delegs_.fetch_sub(1, std::memory_order_relaxed);
      recalls_.erase(it->first);
      if (it->second.kind == State::kLockState) {
        const auto l = locks_.find(it->second.file);
        if (l != locks_.end()) {
          const std::size_t before = l->second.size();
          l->second.drop(it->second.owner);
          if (before != l->second.size()) unlocked.push_back(it->second.file);
          if (l->second.empty()) locks_.erase(l);
        }
      }
      it = states_.erase(it);
    } else {
      ++it;
    }
  }
  for (const FileKey& f : written) write_open_gone(f);
  for (const FileKey& f : unlocked) wake_waiters(f);
  if (const auto cl = clients_.find(clientid); cl != clients_.end()) {
    bytes_ -= std::min(bytes_, cl->second.bytes);
    const Client gone = std::move(cl->second);
    clients_.erase(cl);
    if (gone.reclaim_complete) record(gone, false);
  }
}

namespace {
/// What a stateid or a byte range is charged: its record, its map node, its owner's name.
std::size_t state_cost(const State& s) { return sizeof(State) + 64 + s.owner.name.size(); }
std::size_t range_cost(const Owner& o) { return sizeof(Range) + o.name.size(); }
}  // namespace

void Nfs4Server::charge(std::uint64_t clientid, std::ptrdiff_t delta) {
  const auto cl = clients_.find(clientid);
  if (cl == clients_.end()) return;
  if (delta >= 0) {
    cl->second.bytes += static_cast<std::size_t>(delta);
    bytes_ += static_cast<std::size_t>(delta);
  } else {
    const auto d = std::min(cl->second.bytes, static_cast<std::size_t>(-delta));
    cl->second.bytes -= d;
    bytes_ -= std::min(bytes_, d);
  }
}

bool Nfs4Server::room(const Client& cl, std::size_t more) const {
  return cl.bytes + more <= lim_.client_bytes && bytes_ + more <= lim_.total_bytes;
}

bool Nfs4Server::in_use(const Client& cl) const {
  return cl.states > 0 || now() - cl.renewed <= static_cast<std::int64_t>(lim_.lease_seconds);
}

Status Nfs4Server::exchange_id(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  Verifier verf{};
  if (const auto v = d.fixed(8); v.size() == 8) std::copy(v.begin(), v.end(), verf.begin());
  const auto owner = d.opaque(kOpaqueLimit);
  const std::vector<std::uint8_t> ownerid(owner.begin(), owner.end());
  const std::uint32_t flags = d.u32();
  const std::uint32_t how = d.u32();
  if (how == kSp4MachCred) {
    decode_bitmap(d);
    decode_bitmap(d);
  } else if (how != kSp4None) {
    return d.ok() ? kErrEncrAlgUnsupp : kErrBadxdr;  // SP4_SSV: not offered
  }
  const std::uint32_t impls = d.u32();
  if (impls > 1) d.fail();
  for (std::uint32_t i = 0; i < impls && d.ok(); ++i) {
    d.string(kOpaqueLimit);
    d.string(kOpaqueLimit);
    d.u64();
    d.u32();
  }
  if (!d.ok()) return kErrBadxdr;
  constexpr std::uint32_t kValid = kExchgidSuppMovedRefer | kExchgidSuppMovedMigr |
                                   kExchgidSuppFenceOps | kExchgidBindPrincStateid |
                                   kExchgidMaskPnfs | kExchgidUpdConfirmedRecA;
  if (flags & ~kValid) return kErrInval;
  Client* found = nullptr;
  for (auto& [id, cl] : clients_)
    if (cl.ownerid == ownerid && (!found || cl.confirmed)) found = &cl;
  Client* cl = nullptr;
  // Another principal naming a confirmed client's co_ownerid: a collision while that client
  // holds state or a live lease (RFC 8881 18.35.5 case 3), never a takeover.
  const bool foreign = found && found->confirmed && found->principal != c.principal;
  if (flags & kExchgidUpdConfirmedRecA) {
    if (!found || !found->confirmed) return kErrNoent;
    if (foreign) return kErrPerm;
    if (found->verifier != verf) return kErrNotSame;
    cl = found;
  } else if (foreign && in_use(*found) && !rightful(ownerid, c.principal, found->principal)) {
    return kErrClidInuse;
  } else if (found && found->confirmed && found->verifier == verf && !foreign) {
    cl = found;  // the same client again
  } else {
    // New, or a client that rebooted (another verifier: its old record goes when the new one
    // is confirmed), or an unconfirmed one tried again (it is replaced).
    // The principal a previous run's record names, coming back after another took its id
    // during the grace period: the other client goes (it could reclaim nothing anyway).
    if (found && (!found->confirmed || foreign)) forget_client(found->clientid);
    const auto of_peer = [&] {
      return static_cast<std::size_t>(std::count_if(clients_.begin(), clients_.end(), [&](auto& x) {
        return x.second.principal.peer == c.principal.peer;
      }));
    };
    if (clients_.size() >= lim_.clients || of_peer() >= lim_.clients_per_peer) reap_expired();
    if (clients_.size() >= lim_.clients || of_peer() >= lim_.clients_per_peer) return kErrResource;
    Client n;
    n.clientid = boot_ << 32 | next_client_++;
    n.ownerid = ownerid;
    n.principal = c.principal;
    n.verifier = verf;
    n.renewed = now();
    cl = &clients_.emplace(n.clientid, std::move(n)).first->second;
  }
  e.u64(cl->clientid);
  e.u32(cl->cs_seqid);
  e.u32(kExchgidUseNonPnfs | (cl->confirmed ? kExchgidConfirmedR : 0));
  e.u32(kSp4None);
  static const std::string kMajor = "roce-nfs";
  e.u64(0);  // server_owner: so_minor_id
  e.string(kMajor);
  e.string(kMajor);  // server scope
  e.u32(1);          // the implementation
  e.string("roce");
  e.string("roce-nfs NFSv4.1");
  e.u64(0);
  e.u32(0);
  return kOk;
}

namespace {

struct ChannelAttrs {
  std::uint32_t headerpad = 0, max_request = 0, max_response = 0, max_cached = 0, max_ops = 0,
                max_reqs = 0;
  std::vector<std::uint32_t> ird;
};

/// callback_sec_parms4<>: the first flavor the server can send calls with (AUTH_NONE, or
/// AUTH_SYS with the client's parameters); nullopt when none (RPCSEC_GSS only).
std::optional<rpc::OpaqueAuth> decode_cb_sec(XdrDecoder& d) {
  std::optional<rpc::OpaqueAuth> out;
  const std::uint32_t nsec = d.u32();
  if (nsec > 16) d.fail();
  for (std::uint32_t i = 0; i < nsec && d.ok(); ++i) {
    const std::uint32_t flavor = d.u32();
    if (flavor == rpc::kAuthSys) {
      rpc::AuthSys a;
      a.stamp = d.u32();
      a.machine = d.string(rpc::kMaxMachineName);
      a.uid = d.u32();
      a.gid = d.u32();
      const std::uint32_t ng = d.u32();
      if (ng > rpc::kMaxGids) d.fail();
      for (std::uint32_t j = 0; j < ng && d.ok(); ++j) a.gids.push_back(d.u32());
      if (d.ok() && !out) out = rpc::auth_sys(a);
    } else if (flavor == 6) {  // RPCSEC_GSS: gss_cb_handles4
      d.u32();
      d.opaque(kOpaqueLimit);
      d.opaque(kOpaqueLimit);
    } else if (flavor == rpc::kAuthNone) {
      if (!out) out = rpc::OpaqueAuth{};
    } else {
      d.fail();
    }
  }
  return out;
}

}  // namespace

/// A CB_COMPOUND of CB_SEQUENCE (slot 0, sequence `seq`) and CB_RECALL of `deleg` on `fh`.
void encode_cb_recall(std::vector<std::uint8_t>& msg, std::uint32_t xid, std::uint32_t program,
                      const rpc::OpaqueAuth& cred, const SessionId& session, std::uint32_t seq,
                      const Stateid& deleg, std::span<const std::uint8_t> fh) {
  msg.clear();
  XdrEncoder e(msg);
  rpc::CallHeader h;
  h.xid = xid;
  h.prog = program;
  h.vers = kCbVersion;
  h.proc = kCbCompound;
  h.cred = cred;
  rpc::encode(e, h);
  e.string("");  // tag
  e.u32(kMinorVersion);
  e.u32(0);  // callback_ident: unused in minor version 1
  e.u32(2);
  e.u32(kCbSequence);
  e.fixed(session);
  e.u32(seq);
  e.u32(0);  // slot
  e.u32(0);  // highest slot
  e.boolean(false);
  e.u32(0);  // referring call lists
  e.u32(kCbRecall);
  encode(e, deleg);
  e.boolean(false);  // truncate
  e.opaque(fh);
}

void encode_cb_notify_lock(std::vector<std::uint8_t>& msg, std::uint32_t xid, std::uint32_t program,
                           const rpc::OpaqueAuth& cred, const SessionId& session, std::uint32_t seq,
                           std::span<const std::uint8_t> fh, const Owner& owner) {
  // CB_SEQUENCE as for a recall, then CB_NOTIFY_LOCK in CB_RECALL's place.
  encode_cb_recall(msg, xid, program, cred, session, seq, Stateid{}, {});
  msg.resize(msg.size() - 4 - 16 - 4 - 4);  // CB_RECALL, its stateid, truncate, empty fh
  XdrEncoder e(msg);
  e.u32(kCbNotifyLock);
  e.opaque(fh);
  e.u64(owner.clientid);
  e.opaque(owner.name);
}

namespace {

ChannelAttrs decode_channel(XdrDecoder& d) {
  ChannelAttrs a;
  a.headerpad = d.u32();
  a.max_request = d.u32();
  a.max_response = d.u32();
  a.max_cached = d.u32();
  a.max_ops = d.u32();
  a.max_reqs = d.u32();
  const std::uint32_t n = d.u32();
  if (n > 1) d.fail();
  for (std::uint32_t i = 0; i < n && d.ok(); ++i) a.ird.push_back(d.u32());
  return a;
}

void encode_channel(XdrEncoder& e, const ChannelAttrs& a) {
  e.u32(a.headerpad);
  e.u32(a.max_request);
  e.u32(a.max_response);
  e.u32(a.max_cached);
  e.u32(a.max_ops);
  e.u32(a.max_reqs);
  e.u32(static_cast<std::uint32_t>(a.ird.size()));
  for (auto v : a.ird) e.u32(v);
}

}  // namespace

Status Nfs4Server::create_session(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const std::uint64_t clientid = d.u64();
  const std::uint32_t seq = d.u32();
  const std::uint32_t flags = d.u32();
  const ChannelAttrs fore = decode_channel(d);
  const ChannelAttrs back = decode_channel(d);
  const std::uint32_t cb_program = d.u32();
  const std::optional<rpc::OpaqueAuth> cb_cred = decode_cb_sec(d);
  if (!d.ok()) return kErrBadxdr;
  const auto it = clients_.find(clientid);
  if (it == clients_.end()) return kErrStaleClientid;
  Client& cl = it->second;
  // Only the principal of the EXCHANGE_ID creates (or replays) a session of the client.
  if (cl.principal != c.principal) return kErrClidInuse;
  if (seq + 1 == cl.cs_seqid && !cl.cs_reply.empty()) {  // a retry: the same answer
    std::vector<std::uint8_t>& out = cl.cs_reply;
    for (std::size_t i = 0; i + 4 <= out.size(); i += 4)
      e.u32(std::uint32_t{out[i]} << 24 | std::uint32_t{out[i + 1]} << 16 |
            std::uint32_t{out[i + 2]} << 8 | out[i + 3]);
    return kOk;
  }
  if (seq != cl.cs_seqid) return kErrSeqMisordered;
  if (fore.max_reqs == 0 || fore.max_ops == 0) return kErrInval;
  std::size_t mine = 0;
  for (const auto& [sid, s] : sessions_) mine += s.clientid == clientid;
  if (mine >= lim_.sessions) return kErrResource;
  if (!cl.confirmed) {
    // Confirmed now: the record of the same client before it rebooted goes, with its state.
    // Another principal's record that gained state or renewed meanwhile stays, and this
    // one is refused.
    std::vector<std::uint64_t> old;
    for (const auto& [id, o] : clients_) {
      if (id == clientid || o.ownerid != cl.ownerid) continue;
      if (o.confirmed && o.principal != cl.principal && in_use(o)) return kErrClidInuse;
      old.push_back(id);
    }
    for (auto id : old) forget_client(id);
    cl.confirmed = true;
  }
  Session s;
  s.clientid = clientid;
  // Random, so that no other host can guess a session's id (and act on it with SEQUENCE);
  // a counter and the boot verifier only if the kernel has no randomness to give.
  do {
    if (::getrandom(s.id.data(), s.id.size(), 0) != static_cast<ssize_t>(s.id.size())) {
      for (int i = 0; i < 8; ++i)
        s.id[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(clientid >> (56 - 8 * i));
      const std::uint32_t n = next_session_++;
      for (int i = 0; i < 4; ++i)
        s.id[static_cast<std::size_t>(8 + i)] = static_cast<std::uint8_t>(n >> (24 - 8 * i));
      std::copy(boot_verf_.begin(), boot_verf_.begin() + 4, s.id.begin() + 12);
    }
  } while (sessions_.contains(s.id));
  ChannelAttrs f = fore;
  const std::uint32_t io = max_io + 8192;  // the largest READ or WRITE and its COMPOUND around it
  f.headerpad = 0;
  f.max_request = std::min(fore.max_request, io);
  f.max_response = std::min(fore.max_response, io);
  f.max_cached =
      std::min<std::uint32_t>(fore.max_cached, static_cast<std::uint32_t>(lim_.cached_reply));
  f.max_ops = std::min(fore.max_ops, lim_.max_ops);
  f.max_reqs = std::min(fore.max_reqs, lim_.slots);
  f.ird.clear();
  s.max_ops = f.max_ops;
  s.max_request = f.max_request;
  s.max_response = f.max_response;
  s.max_cached = f.max_cached;
  s.slots.resize(f.max_reqs);
  s.flags = 0;  // not persistent
  s.cb_program = cb_program;
  s.cb_cred = cb_cred;
  s.back_wanted = flags & kSessionConnBackChan;
  s.back_capable = backchannel && c.ctx && c.ctx->conn;
  ChannelAttrs bk = back;
  bk.headerpad = 0;
  bk.max_reqs = std::min<std::uint32_t>(back.max_reqs, 1);  // one CB_COMPOUND out at a time
  bk.ird.clear();
  if (s.back_wanted && backchannel && c.ctx && c.ctx->conn && s.cb_cred && back.max_reqs >= 1 &&
      back.max_ops >= 2) {
    s.flags |= kSessionConnBackChan;  // this connection carries the back channel too
    s.back_conn = c.ctx->conn;
  }
  sessions_.emplace(s.id, s);
  client_sessions_.emplace(s.clientid, s.id);
  cl.cs_seqid = seq + 1;
  cl.renewed = now();
  std::vector<std::uint8_t> body;
  XdrEncoder b(body);
  b.fixed(s.id);
  b.u32(seq);
  b.u32(s.flags);
  encode_channel(b, f);
  encode_channel(b, bk);
  cl.cs_reply = body;
  e.fixed(body);
  return kOk;
}

Status Nfs4Server::sequence(Compound& c, XdrDecoder& d, XdrEncoder& e, std::uint32_t nops) {
  SessionId sid{};
  if (const auto v = d.fixed(16); v.size() == 16) std::copy(v.begin(), v.end(), sid.begin());
  const std::uint32_t seq = d.u32();
  const std::uint32_t slotid = d.u32();
  const std::uint32_t highest = d.u32();
  d.boolean();  // sa_cachethis: every small reply is kept
  if (!d.ok()) return kErrBadxdr;
  const auto it = sessions_.find(sid);
  if (it == sessions_.end()) return kErrBadsession;
  Session& s = it->second;
  if (nops > s.max_ops) return kErrTooManyOps;
  if (slotid >= s.slots.size()) return kErrBadslot;
  (void)highest;
  Slot& slot = s.slots[slotid];
  // Its COMPOUND still running (its file I/O without the lock): the retry waits (RFC 8881
  // 2.10.6.2).
  if (slot.in_use) return kErrDelay;
  if (seq == slot.seqid && slot.seqid != 0) {
    if (!slot.cached) return kErrRetryUncachedRep;
    if (slot.durable_gen) {  // its reply is held until the records are on disk
      std::lock_guard w(rec_mu_);
      if (rec_written_ < slot.durable_gen) return kErrDelay;
    }
    c.replay = &slot.reply;
    return kOk;
  }
  if (seq != slot.seqid + 1) return kErrSeqMisordered;
  slot.seqid = seq;
  slot.durable_gen = 0;
  slot.in_use = true;
  slot.cached = false;
  slot.reply.clear();
  c.in_session = true;
  c.sid = sid;
  c.slot = slotid;
  c.clientid = s.clientid;
  if (const auto cl = clients_.find(s.clientid); cl != clients_.end()) cl->second.renewed = now();
  e.fixed(sid);
  e.u32(seq);
  e.u32(slotid);
  e.u32(static_cast<std::uint32_t>(s.slots.size() - 1));  // highest slot
  e.u32(static_cast<std::uint32_t>(s.slots.size() - 1));  // target highest slot
  e.u32(seq_flags(s));
  return kOk;
}

Status Nfs4Server::destroy_session(Compound& c, XdrDecoder& d) {
  SessionId sid{};
  if (const auto v = d.fixed(16); v.size() == 16) std::copy(v.begin(), v.end(), sid.begin());
  if (!d.ok()) return kErrBadxdr;
  const auto it = sessions_.find(sid);
  if (it == sessions_.end()) return kErrBadsession;
  unindex_session(it->second.clientid, sid);
  sessions_.erase(it);
  for (auto p = pending_.begin(); p != pending_.end();) {  // its calls out: sent on another
    if (p->second.session != sid) {
      ++p;
      continue;
    }
    const Other deleg = p->second.deleg;
    p = pending_.erase(p);
    resend_recall(deleg);
  }
  if (c.in_session && c.sid == sid) c.in_session = false;
  return kOk;
}

Status Nfs4Server::destroy_clientid(Compound& c, XdrDecoder& d) {
  const std::uint64_t id = d.u64();
  if (!d.ok()) return kErrBadxdr;
  const auto cl = clients_.find(id);
  if (cl == clients_.end()) return kErrStaleClientid;
  // Only the principal that made it (with or without a session: client ids can be guessed).
  if (cl->second.principal != c.principal) return kErrWrongCred;
  for (const auto& [sid, s] : sessions_)
    if (s.clientid == id) return kErrClientidBusy;
  for (const auto& [o, st] : states_)
    if (st.clientid == id) return kErrClientidBusy;
  forget_client(id);
  return kOk;
}

// --- Files ------------------------------------------------------------------------------

Status Nfs4Server::current(Compound& c, NfsServer::Resolved& r) {
  if (!c.cur) return kErrNofilehandle;
  if (pseudo_depth(*c.cur)) return kErrRofs;  // the pseudo-root: nothing to open or change
  return from_v3(files_.resolve(*c.cur, r));
}

namespace {
constexpr std::string_view kPseudoMagic = "roce-nfs4-pseudo";
}  // namespace

v3::Fh Nfs4Server::pseudo_fh(std::size_t depth) const {
  v3::Fh fh;
  fh.data.assign(kPseudoMagic.begin(), kPseudoMagic.end());
  fh.data.push_back(static_cast<std::uint8_t>(depth));
  return fh;
}

std::optional<std::size_t> Nfs4Server::pseudo_depth(const v3::Fh& fh) const {
  if (export_parts_.empty() || fh.data.size() != kPseudoMagic.size() + 1 ||
      !std::equal(kPseudoMagic.begin(), kPseudoMagic.end(), fh.data.begin()) ||
      fh.data.back() >= export_parts_.size())
    return std::nullopt;
  return fh.data.back();
}

NfsServer::Resolved Nfs4Server::pseudo_attrs(std::size_t depth) const {
  NfsServer::Resolved r;
  r.fd = -1;
  r.st.st_mode = S_IFDIR | 0555;
  r.st.st_nlink = 2;
  r.st.st_ino = depth + 1;  // its own fsid: no clash with the export's inodes
  r.st.st_size = 4096;
  r.st.st_blksize = 4096;
  r.st.st_ctim.tv_sec = r.st.st_mtim.tv_sec = r.st.st_atim.tv_sec = 1;
  return r;
}

std::optional<v3::Fh> Nfs4Server::pseudo_lookup(std::size_t depth, const std::string& name) const {
  if (depth >= export_parts_.size() || name != export_parts_[depth]) return std::nullopt;
  return depth + 1 == export_parts_.size() ? files_.root_fh() : pseudo_fh(depth + 1);
}

void Nfs4Server::encode_attrs(XdrEncoder& e, const Bitmap& want, const NfsServer::Resolved& r,
                              const v3::Fh* fh, std::uint32_t rdattr_error, bool pseudo) {
  static const Bitmap kSupported = supported();
  Bitmap got;
  std::vector<std::uint8_t> vals;
  XdrEncoder v(vals);
  const struct stat& st = r.st;
  std::optional<struct statvfs> fs;
  const auto vfs = [&]() -> const struct statvfs& {
    if (!fs) {
      fs.emplace();
      if (::fstatvfs(r.fd, &*fs) != 0) *fs = {};
    }
    return *fs;
  };
  const std::uint32_t end = std::min<std::uint32_t>(want.end(), kSuppattrExclcreat + 1);
  for (std::uint32_t a = 0; a < end; ++a) {
    if (!want.has(a) || !kSupported.has(a)) continue;
    switch (a) {
      case kSupportedAttrs:
        encode(v, kSupported);
        break;
      case kType:
        v.u32(type_of(st.st_mode));
        break;
      case kFhExpireType:
        v.u32(files_.persistent_handles() ? 0 : 2);  // FH4_PERSISTENT or FH4_VOLATILE_ANY
        break;
      case kChange:
        v.u64(change_of(st));
        break;
      case kSize:
        v.u64(static_cast<std::uint64_t>(st.st_size));
        break;
      case kLinkSupport:
      case kSymlinkSupport:
      case kUniqueHandles:
      case kCansettime:
      case kCasePreserving:
      case kChownRestricted:
      case kHomogeneous:
      case kNoTrunc:
        v.boolean(true);
        break;
      case kNamedAttr:
      case kCaseInsensitive:
        v.boolean(false);
        break;
      case kFsid:
        v.u64(root_dev_);
        v.u64(pseudo ? 1 : 0);  // the pseudo-root is a file system of its own
        break;
      case kLeaseTime:
        v.u32(lim_.lease_seconds);
        break;
      case kRdattrError:
        v.u32(rdattr_error);
        break;
      case kAclSupport:
        v.u32(0);
        break;
      case kFilehandle:
        if (!fh) continue;
        v.opaque(fh->data);
        break;
      case kFileid:
      case kMountedOnFileid:
        v.u64(st.st_ino);
        break;
      case kFilesAvail:
        v.u64(vfs().f_favail);
        break;
      case kFilesFree:
        v.u64(vfs().f_ffree);
        break;
      case kFilesTotal:
        v.u64(vfs().f_files);
        break;
      case kMaxfilesize:
        v.u64(0x7fffffffffffffffull);
        break;
      case kMaxlink: {
        const long l = ::fpathconf(r.fd, _PC_LINK_MAX);
        v.u32(l > 0 ? static_cast<std::uint32_t>(std::min<long>(l, 0x7fffffff)) : 1);
        break;
      }
      case kMaxname:
        v.u32(vfs().f_namemax ? static_cast<std::uint32_t>(vfs().f_namemax) : kMaxName);
        break;
      case kMaxread:
      case kMaxwrite:
        v.u64(max_io);
        break;
      case kMode:
        v.u32(st.st_mode & 07777);
        break;
      case kNumlinks:
        v.u32(static_cast<std::uint32_t>(st.st_nlink));
        break;
      case kOwner:
        v.string(std::to_string(st.st_uid));
        break;
      case kOwnerGroup:
        v.string(std::to_string(st.st_gid));
        break;
      case kRawdev:
        v.u32(major(st.st_rdev));
        v.u32(minor(st.st_rdev));
        break;
      case kSpaceAvail:
        v.u64(std::uint64_t{vfs().f_bavail} * vfs().f_frsize);
        break;
      case kSpaceFree:
        v.u64(std::uint64_t{vfs().f_bfree} * vfs().f_frsize);
        break;
      case kSpaceTotal:
        v.u64(std::uint64_t{vfs().f_blocks} * vfs().f_frsize);
        break;
      case kSpaceUsed:
        v.u64(static_cast<std::uint64_t>(st.st_blocks) * 512);
        break;
      case kTimeAccess:
        encode_time(v, st.st_atim);
        break;
      case kTimeMetadata:
        encode_time(v, st.st_ctim);
        break;
      case kTimeModify:
        encode_time(v, st.st_mtim);
        break;
      case kTimeDelta:
        v.u64(0);
        v.u32(1);
        break;
      case kSuppattrExclcreat: {
        Bitmap x;
        x.set(kMode);
        encode(v, x);
        break;
      }
      default:
        continue;  // write-only (time_*_set): never read back
    }
    got.set(a);
  }
  encode(e, got);
  e.opaque(vals);
}

Status Nfs4Server::getattr(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const Bitmap want = decode_bitmap(d);
  if (!d.ok()) return kErrBadxdr;
  if (const auto depth = c.cur ? pseudo_depth(*c.cur) : std::nullopt) {
    encode_attrs(e, want, pseudo_attrs(*depth), &*c.cur, 0, true);
    return kOk;
  }
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd fd(r.fd);
  encode_attrs(e, want, r, &*c.cur);
  return kOk;
}

Status Nfs4Server::lookup(Compound& c, XdrDecoder& d) {
  const std::string name = d.string(kMaxNameWire);
  if (!d.ok()) return kErrBadxdr;
  if (const auto depth = c.cur ? pseudo_depth(*c.cur) : std::nullopt) {
    if (const Status s = check_name(name)) return s;
    const auto next = pseudo_lookup(*depth, name);
    if (!next) return kErrNoent;
    c.cur = *next;
    return kOk;
  }
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd fd(r.fd);
  if (S_ISLNK(r.st.st_mode)) return kErrSymlink;
  if (!S_ISDIR(r.st.st_mode)) return kErrNotdir;
  if (const Status s = check_name(name)) return s;
  struct stat st;
  if (::fstatat(r.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return from_errno(errno);
  const auto fh = files_.handle_in(r, name, st);
  if (!fh) return kErrNoent;  // another file system mounted there: not exported
  c.cur = *fh;
  return kOk;
}

Status Nfs4Server::lookupp(Compound& c) {
  if (const auto depth = c.cur ? pseudo_depth(*c.cur) : std::nullopt) {
    if (*depth == 0) return kErrNoent;
    c.cur = pseudo_fh(*depth - 1);
    return kOk;
  }
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd fd(r.fd);
  if (S_ISLNK(r.st.st_mode)) return kErrSymlink;
  if (!S_ISDIR(r.st.st_mode)) return kErrNotdir;
  if (r.st.st_ino == root_ino_ && r.st.st_dev == root_dev_) {
    if (export_parts_.empty()) return kErrNoent;
    c.cur = pseudo_fh(export_parts_.size() - 1);  // up into the pseudo-root
    return kOk;
  }
  NfsServer::Resolved p;
  p.fd = ::openat(r.fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (p.fd < 0) return from_errno(errno);
  Fd pfd(p.fd);
  if (::fstat(p.fd, &p.st) != 0) return from_errno(errno);
  p.rel = parent_of(r.rel);
  const auto fh = files_.handle_in(p, "", p.st);
  if (!fh) return kErrNoent;
  c.cur = *fh;
  return kOk;
}

Status Nfs4Server::access(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const std::uint32_t want = d.u32();
  if (!d.ok()) return kErrBadxdr;
  if (c.cur && pseudo_depth(*c.cur)) {  // read and look up, nothing else
    e.u32(want & (kAccessRead | kAccessLookup | kAccessModify | kAccessExtend | kAccessDelete |
                  kAccessExecute));
    e.u32(want & (kAccessRead | kAccessLookup));
    return kOk;
  }
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd fd(r.fd);
  // Asked of the kernel as the caller (AT_EACCESS: the file system ids), as the v3 server does.
  const bool dir = S_ISDIR(r.st.st_mode);
  const auto may = [&](int mode) {
    return ::syscall(SYS_faccessat2, r.fd, "", mode, AT_EACCESS | AT_EMPTY_PATH) == 0;
  };
  constexpr std::uint32_t kAll =
      kAccessRead | kAccessLookup | kAccessModify | kAccessExtend | kAccessDelete | kAccessExecute;
  std::uint32_t got = 0;
  if ((want & kAccessRead) && may(R_OK)) got |= kAccessRead;
  if (dir) {
    if ((want & kAccessLookup) && may(X_OK)) got |= kAccessLookup;
    if ((want & (kAccessModify | kAccessExtend | kAccessDelete)) && may(W_OK | X_OK))
      got |= want & (kAccessModify | kAccessExtend | kAccessDelete);
  } else {
    // Any other object, FIFOs and devices too (the client opens those itself, after asking
    // here), as knfsd maps it: a FIFO's MODIFY is its write permission.
    if ((want & (kAccessModify | kAccessExtend)) && may(W_OK))
      got |= want & (kAccessModify | kAccessExtend);
    if ((want & kAccessExecute) && may(X_OK)) got |= kAccessExecute;
  }
  if (!files_.options().rw) got &= ~(kAccessModify | kAccessExtend | kAccessDelete);
  e.u32(want & kAll);
  e.u32(got);
  return kOk;
}

// --- Opens, I/O and the name space ---------------------------------------------------------

/// What SETATTR, CREATE and OPEN's createattrs ask to set.
struct Nfs4Server::SetAttrs {
  Bitmap mask;
  std::optional<std::uint64_t> size;
  std::optional<std::uint32_t> mode, uid, gid;
  std::optional<timespec> atime, mtime;
};

namespace {

/// A numeric owner or group string ("1000"); nullopt for a name (no id mapping here).
std::optional<std::uint32_t> numeric_id(const std::string& s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  std::uint64_t v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(ch - '0');
  }
  if (v > 0xfffffffeu) return std::nullopt;
  return static_cast<std::uint32_t>(v);
}

void encode_cinfo(XdrEncoder& e, std::uint64_t before, std::uint64_t after) {
  e.boolean(false);  // not atomic: another process may change the directory in between
  e.u64(before);
  e.u64(after);
}

std::uint64_t change_now(int fd) {
  struct stat s;
  return ::fstat(fd, &s) == 0 ? change_of(s) : 0;
}

bool range_end(std::uint64_t offset, std::uint64_t length, std::uint64_t& end) {
  if (length == 0) return false;
  if (length == ~std::uint64_t{0}) {
    end = ~std::uint64_t{0};
    return true;
  }
  if (offset + length < offset) return false;  // past 2^64
  end = offset + length - 1;
  return true;
}

void encode_denied(XdrEncoder& e, const Range& r) {
  e.u64(r.start);
  e.u64(r.end == ~std::uint64_t{0} ? ~std::uint64_t{0} : r.end - r.start + 1);
  e.u32(r.write ? kWriteLt : kReadLt);
  e.u64(r.owner.clientid);
  e.opaque(r.owner.name);
}

/// `f` for the range [start, end] (end ~0: to any end); false when it starts beyond off_t.
bool to_flock(short type, std::uint64_t start, std::uint64_t end, struct flock& f) {
  constexpr std::uint64_t kMax = 0x7fffffffffffffffull;
  if (start > kMax) return false;
  f = {};
  f.l_type = type;
  f.l_whence = SEEK_SET;
  f.l_start = static_cast<off_t>(start);
  f.l_len = end >= kMax ? 0 : static_cast<off_t>(end - start + 1);
  return true;
}

/// LOCK4denied for a host lock F_OFD_GETLK found (its owner is no client: 0 and "pid N").
void encode_host_denied(XdrEncoder& e, const struct flock& f) {
  e.u64(static_cast<std::uint64_t>(f.l_start));
  e.u64(f.l_len == 0 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(f.l_len));
  e.u32(f.l_type == F_WRLCK ? kWriteLt : kReadLt);
  e.u64(0);
  const std::string who = "host pid " + std::to_string(f.l_pid);
  e.opaque(std::span(reinterpret_cast<const std::uint8_t*>(who.data()), who.size()));
}

FileKey key_of(const struct stat& st) {
  return FileKey{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

}  // namespace

Status Nfs4Server::decode_sattr(XdrDecoder& d, SetAttrs& a) {
  static const Bitmap kSupported = supported();
  a.mask = decode_bitmap(d);
  const auto vals = d.opaque(kMaxAttrVals);
  if (!d.ok()) return kErrBadxdr;
  XdrDecoder v(vals);
  const std::uint32_t end = a.mask.end();
  for (std::uint32_t bit = 0; bit < end; ++bit) {
    if (!a.mask.has(bit)) continue;
    switch (bit) {
      case kSize:
        a.size = v.u64();
        break;
      case kMode:
        a.mode = v.u32() & 07777;
        break;
      case kOwner:
      case kOwnerGroup: {
        const auto id = numeric_id(v.string(kOpaqueLimit));
        if (!v.ok()) return kErrBadxdr;
        if (!id) return kErrBadowner;
        (bit == kOwner ? a.uid : a.gid) = *id;
        break;
      }
      case kTimeAccessSet:
      case kTimeModifySet: {
        timespec t{0, UTIME_NOW};
        if (v.u32() == 1) {  // SET_TO_CLIENT_TIME4
          t.tv_sec = static_cast<time_t>(static_cast<std::int64_t>(v.u64()));
          const std::uint32_t ns = v.u32();
          if (ns >= 1'000'000'000u) return kErrInval;
          t.tv_nsec = ns;
        }
        (bit == kTimeAccessSet ? a.atime : a.mtime) = t;
        break;
      }
      default:
        return kSupported.has(bit) ? kErrInval : kErrAttrnotsupp;  // read-only, or unknown
    }
  }
  if (!v.ok() || v.remaining()) return kErrBadxdr;
  return kOk;
}

Status Nfs4Server::apply(const NfsServer::Resolved& r, const SetAttrs& a, Bitmap& set) {
  if (!files_.options().rw && (a.size || a.mode || a.uid || a.gid || a.atime || a.mtime))
    return kErrRofs;
  if (a.uid || a.gid) {
    if (::fchownat(r.fd, "", a.uid ? *a.uid : ~0u, a.gid ? *a.gid : ~0u, AT_EMPTY_PATH) != 0)
      return from_errno(errno);
    if (a.uid) set.set(kOwner);
    if (a.gid) set.set(kOwnerGroup);
  }
  if (a.mode) {
    if (S_ISLNK(r.st.st_mode)) return kErrInval;
    if (::chmod(proc_path(r.fd).c_str(), *a.mode) != 0) return from_errno(errno);
    set.set(kMode);
  }
  if (a.size) {
    if (S_ISDIR(r.st.st_mode)) return kErrIsdir;
    if (!S_ISREG(r.st.st_mode)) return kErrInval;
    int fd = -1;
    if (const v3::Status s = files_.open_for_io(r, O_WRONLY, fd)) return from_v3(s);
    Fd f(fd);
    if (::ftruncate(fd, static_cast<off_t>(*a.size)) != 0) return from_errno(errno);
    set.set(kSize);
  }
  if (a.atime || a.mtime) {
    const timespec ts[2] = {a.atime ? *a.atime : timespec{0, UTIME_OMIT},
                            a.mtime ? *a.mtime : timespec{0, UTIME_OMIT}};
    if (::utimensat(r.fd, "", ts, AT_EMPTY_PATH) != 0 &&
        (S_ISLNK(r.st.st_mode) || ::utimensat(AT_FDCWD, proc_path(r.fd).c_str(), ts, 0) != 0))
      return from_errno(errno);
    if (a.atime) set.set(kTimeAccessSet);
    if (a.mtime) set.set(kTimeModifySet);
  }
  return kOk;
}

Stateid Nfs4Server::new_state(State st) {
  Stateid id;
  id.seqid = st.seqid;
  const std::uint64_t n = next_state_++;
  for (int i = 0; i < 4; ++i)
    id.other[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(boot_ >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i)
    id.other[static_cast<std::size_t>(4 + i)] = static_cast<std::uint8_t>(n >> (56 - 8 * i));
  if (auto cl = clients_.find(st.clientid); cl != clients_.end()) ++cl->second.states;
  charge(st.clientid, static_cast<std::ptrdiff_t>(state_cost(st)));
  by_file_.emplace(st.file, id.other);
  if (st.kind == State::kDelegState) delegs_.fetch_add(1, std::memory_order_relaxed);
  states_.emplace(id.other, std::move(st));
  return id;
}

void Nfs4Server::drop_state(const Other& o) {
  const auto it = states_.find(o);
  if (it == states_.end()) return;
  if (auto cl = clients_.find(it->second.clientid); cl != clients_.end() && cl->second.states) {
    --cl->second.states;
    if (it->second.revoked && cl->second.revoked && !--cl->second.revoked)  // the last freed
      cl->second.no_deleg_until = now() + kRevokedNoDelegSeconds;
  }
  // A recall ends (returned): the writer it was for goes on from now, new readers wait.
  if (it->second.kind == State::kDelegState && it->second.recall_at >= 0 && !it->second.revoked)
    mark_recalled(it->second.file);
  charge(it->second.clientid, -static_cast<std::ptrdiff_t>(state_cost(it->second)));
  recalls_.erase(o);
  unqueue_recall(o, it->second);
  release(it->second);
  if (it->second.kind == State::kDelegState) delegs_.fetch_sub(1, std::memory_order_relaxed);
  if (it->second.kind == State::kLockState) {
    const auto l = locks_.find(it->second.file);
    if (l != locks_.end()) {
      const std::size_t before = l->second.size();
      l->second.drop(it->second.owner);
      charge(it->second.clientid, -static_cast<std::ptrdiff_t>((before - l->second.size()) *
                                                               range_cost(it->second.owner)));
      const bool went = before != l->second.size();
      if (l->second.empty()) locks_.erase(l);
      if (went) wake_waiters(it->second.file);
    }
  }
  for (auto [f, last] = by_file_.equal_range(it->second.file); f != last; ++f)
    if (f->second == o) {
      by_file_.erase(f);
      break;
    }
  const bool wrote =
      it->second.kind == State::kOpenState && (it->second.access & kShareAccessWrite);
  const FileKey file = it->second.file;
  states_.erase(it);
  if (wrote) write_open_gone(file);
}

bool Nfs4Server::write_open(const FileKey& file) const {
  for (auto [f, fe] = by_file_.equal_range(file); f != fe; ++f) {
    const auto si = states_.find(f->second);
    if (si != states_.end() && si->second.kind == State::kOpenState &&
        (si->second.access & kShareAccessWrite))
      return true;
  }
  return false;
}

void Nfs4Server::write_open_gone(const FileKey& file) {
  if (!write_open(file)) files_.drop_write_file(file.dev, file.ino);
}

bool Nfs4Server::expired_holder(const Owner& holder) {
  const auto cl = clients_.find(holder.clientid);
  if (cl == clients_.end() ||
      now() - cl->second.renewed <= static_cast<std::int64_t>(lim_.lease_seconds))
    return false;
  forget_client(holder.clientid);
  return true;
}

Status Nfs4Server::check_stateid(Compound& c, Stateid sid, const NfsServer::Resolved* file,
                                 State** out) {
  *out = nullptr;
  if (sid.current()) {
    if (!c.has_cur_stateid) return kErrBadStateid;
    sid = c.cur_stateid;
  }
  if (sid.anonymous() || sid.bypass()) return kOk;
  const auto it = states_.find(sid.other);
  if (it == states_.end() || it->second.clientid != c.clientid) return kErrBadStateid;
  if (sid.seqid != 0 && sid.seqid > it->second.seqid) return kErrBadStateid;
  if (sid.seqid != 0 && sid.seqid < it->second.seqid) return kErrOldStateid;
  if (file && it->second.file != key_of(file->st)) return kErrBadStateid;
  if (it->second.revoked) return kErrDelegRevoked;
  *out = &it->second;
  return kOk;
}

Status Nfs4Server::open(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  d.u32();  // seqid: not used in minor version 1
  const std::uint32_t share_access = d.u32();
  const std::uint32_t share_deny = d.u32();
  Owner owner;
  owner.clientid = d.u64();
  const auto on = d.opaque(kOpaqueLimit);
  owner.name.assign(on.begin(), on.end());
  const std::uint32_t opentype = d.u32();
  std::uint32_t how = kUnchecked;
  SetAttrs attrs;
  Verifier verf{};
  if (opentype == kCreate4) {
    how = d.u32();
    if (how == kUnchecked || how == kGuarded) {
      if (const Status s = decode_sattr(d, attrs)) return d.ok() ? s : kErrBadxdr;
    } else if (how == kExclusive4 || how == kExclusive41) {
      if (const auto v = d.fixed(8); v.size() == 8) std::copy(v.begin(), v.end(), verf.begin());
      if (how == kExclusive41)
        if (const Status s = decode_sattr(d, attrs)) return d.ok() ? s : kErrBadxdr;
    } else {
      return d.ok() ? kErrInval : kErrBadxdr;
    }
  } else if (opentype != kNoCreate) {
    return d.ok() ? kErrInval : kErrBadxdr;
  }
  const std::uint32_t claim = d.u32();
  std::string name;
  std::optional<Stateid> by_deleg;  // CLAIM_DELEGATE_CUR, CLAIM_DELEG_CUR_FH: an open the
                                    // client made under its delegation, now told to the server
  if (claim == kClaimNull) {
    name = d.string(kMaxNameWire);
  } else if (claim == kClaimDelegateCur || claim == kClaimDelegCurFh) {
    by_deleg = decode_stateid(d);
    if (claim == kClaimDelegateCur) name = d.string(kMaxNameWire);
  } else if (claim == kClaimPrevious) {
    d.u32();  // the delegation it held: not given again (none survives a restart's leases)
  } else if (claim != kClaimFh) {
    return d.ok() ? kErrNotsupp : kErrBadxdr;  // the other delegation claims
  }
  if (!d.ok()) return kErrBadxdr;
  // After a restart: reclaims while the grace period lasts (from clients the records name,
  // until their RECLAIM_COMPLETE), and nothing new meanwhile.
  const bool reclaim = claim == kClaimPrevious;
  if (reclaim && !may_reclaim(c.clientid)) return kErrNoGrace;
  if (!reclaim && grace_locked()) return kErrGrace;
  if (reclaim && opentype != kNoCreate) return kErrInval;
  const std::uint32_t access = share_access & kShareAccessBoth;
  if (access == 0 || share_deny > kShareAccessBoth) return kErrInval;
  if (owner.clientid != c.clientid) return kErrStaleClientid;
  if (attrs.size && *attrs.size != 0) return kErrInval;
  if (by_deleg && opentype != kNoCreate) return kErrInval;
  NfsServer::Resolved cur;
  if (const Status s = current(c, cur)) return s;
  Fd cur_fd(cur.fd);
  NfsServer::Resolved file;
  std::uint64_t before = 0, after = 0;
  Bitmap attrset;
  bool created = false, retried = false;
  std::optional<v3::Fh> fh;
  if (claim == kClaimNull || claim == kClaimDelegateCur) {
    if (S_ISLNK(cur.st.st_mode)) return kErrSymlink;
    if (!S_ISDIR(cur.st.st_mode)) return kErrNotdir;
    if (const Status s = check_name(name)) return s;
    before = change_of(cur.st);
    if (opentype == kCreate4) {
      if (!files_.options().rw) return kErrRofs;
      const mode_t mode =
          how == kExclusive4 ? 0 : static_cast<mode_t>(attrs.mode ? *attrs.mode : 0644);
      const int fd =
          ::openat(cur.fd, name.c_str(),
                   O_CREAT | O_EXCL | O_NOFOLLOW | O_RDONLY | O_NONBLOCK | O_CLOEXEC, mode);
      if (fd >= 0) {
        created = true;
        ::close(fd);
        if (attrs.mode) attrset.set(kMode);
      } else if (errno != EEXIST) {
        return from_errno(errno);
      } else if (how == kGuarded) {
        return kErrExist;
      }
    }
    struct stat st;
    if (::fstatat(cur.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return from_errno(errno);
    fh = files_.handle_in(cur, name, st);
    if (!fh) return kErrNoent;
    if (const v3::Status s = files_.resolve(*fh, file)) return from_v3(s);
    after = change_now(cur.fd);
  } else {
    fh = *c.cur;
    file = cur;
    file.fd = ::fcntl(cur.fd, F_DUPFD_CLOEXEC, 0);
    if (file.fd < 0) return from_errno(errno);
  }
  Fd file_fd(file.fd);
  if (S_ISDIR(file.st.st_mode)) return kErrIsdir;
  if (S_ISLNK(file.st.st_mode)) return kErrSymlink;
  if (!S_ISREG(file.st.st_mode)) return kErrWrongType;
  if (by_deleg) {  // the client's own delegation of this very file, still valid
    State* dl = nullptr;
    if (const Status s = check_stateid(c, *by_deleg, &file, &dl)) return s;
    if (!dl || dl->kind != State::kDelegState) return kErrBadStateid;
  }
  // A read delegation conflicts with opening for writing (the holder's own too: the lease that
  // stands for it would keep the client's own writes out): recalled, and this OPEN waits (DELAY)
  // until it is returned or revoked.
  if ((access & kShareAccessWrite) && recall_delays(key_of(file.st), 0)) return kErrDelay;
  if (opentype == kCreate4 && (how == kExclusive4 || how == kExclusive41)) {
    // The verifier lives in the new file's times (as the v3 server keeps it): a retry of the
    // same create finds it and succeeds, another client's create of the same name does not.
    const std::uint32_t v0 = std::uint32_t{verf[0]} << 24 | std::uint32_t{verf[1]} << 16 |
                             std::uint32_t{verf[2]} << 8 | verf[3];
    const std::uint32_t v1 = std::uint32_t{verf[4]} << 24 | std::uint32_t{verf[5]} << 16 |
                             std::uint32_t{verf[6]} << 8 | verf[7];
    if (created) {
      const timespec ts[2] = {{static_cast<time_t>(v0), 0}, {static_cast<time_t>(v1), 0}};
      if (::utimensat(file.fd, "", ts, AT_EMPTY_PATH) != 0 &&
          ::utimensat(AT_FDCWD, proc_path(file.fd).c_str(), ts, 0) != 0)
        return from_errno(errno);
      ::fstat(file.fd, &file.st);
    } else if (static_cast<std::uint32_t>(file.st.st_atim.tv_sec) != v0 ||
               static_cast<std::uint32_t>(file.st.st_mtim.tv_sec) != v1) {
      return kErrExist;
    } else {
      retried = true;  // the same create again (its reply lost): it made the file
    }
    // The attributes holding the verifier are named in attrset (RFC 8881 18.16.3), as knfsd
    // names them: the client then sets the times it wants with a SETATTR (Linux: the server's
    // time), or the file keeps the verifier as its times (pjdfstest utimensat/01.t on v4.1).
    attrset.set(kTimeAccess);
    attrset.set(kTimeModify);
  }
  if (!created) {
    // The caller's permission to open it so, as open(2) decides it: the mode binds the owner
    // too. knfsd lets the owner past the mode only for a file this OPEN created and for a
    // delegation's claim (an open the client made locally already); READ and WRITE later keep
    // the owner's override (the v3 server's).
    const int flags = access == kShareAccessBoth    ? O_RDWR
                      : access == kShareAccessWrite ? O_WRONLY
                                                    : O_RDONLY;
    // A retried exclusive create with the verifier it stored counts as the create, as knfsd
    // counts it: EXCLUSIVE4 made the file mode 0, so without the override the retry would get
    // ACCESS where the first try succeeded.
    const bool owner_override = retried || claim == kClaimDelegateCur || claim == kClaimDelegCurFh;
    int fd = -1;
    if (const v3::Status s = files_.open_for_io(file, flags, fd, owner_override)) return from_v3(s);
    ::close(fd);
    if (opentype == kCreate4 && how == kUnchecked && attrs.size) {
      SetAttrs t;
      t.size = 0;
      if (const Status s = apply(file, t, attrset)) return s;
    }
  }
  // Share reservations: another owner's deny against this access, this deny against theirs.
  const FileKey key = key_of(file.st);
  State* mine = nullptr;
  Other mine_id{};
  for (auto [f, last] = by_file_.equal_range(key); f != last; ++f) {
    const Other& id = f->second;
    const auto si = states_.find(id);
    if (si == states_.end()) continue;  // (every erase keeps by_file_; none left behind)
    State& st = si->second;
    if (st.kind != State::kOpenState) continue;
    if (st.owner == owner) {
      mine = &st;
      mine_id = id;
      continue;
    }
    if ((st.deny & access) || (share_deny & st.access)) return kErrShareDenied;
  }
  Stateid sid;
  if (mine) {
    mine->access |= access;
    mine->deny |= share_deny;
    ++mine->seqid;
    sid.seqid = mine->seqid;
    sid.other = mine_id;
  } else {
    const auto cl = clients_.find(c.clientid);
    if (cl == clients_.end()) return kErrStaleClientid;
    State st;
    st.owner = owner;
    if (cl->second.states >= lim_.states || !room(cl->second, state_cost(st))) return kErrResource;
    st.kind = State::kOpenState;
    st.clientid = c.clientid;
    st.file = key;
    st.access = access;
    st.deny = share_deny;
    sid = new_state(std::move(st));
  }
  c.cur = *fh;
  c.cur_stateid = sid;
  c.has_cur_stateid = true;
  encode(e, sid);
  encode_cinfo(e, before, after);
  // Blocked lock waiters are told when to retry (CB_NOTIFY_LOCK) where a back channel is up.
  bool may_notify = backchannel;
  if (may_notify) {
    const auto ses = sessions_.find(c.sid);
    may_notify = ses != sessions_.end() && ses->second.back_conn != 0;
  }
  e.u32(kOpenResultLocktypePosix | (may_notify ? kOpenResultMayNotifyLock : 0));
  encode(e, attrset);
  // A read delegation: asked for reading only, over a session whose back channel is up, and
  // nobody has the file open for writing or is having a delegation of it recalled.
  bool deleg = delegations && backchannel && !by_deleg && !reclaim && access == kShareAccessRead &&
               !(share_access & kShareWantNoDeleg);
  if (deleg) {
    const auto ses = sessions_.find(c.sid);
    deleg = ses != sessions_.end() && ses->second.back_conn != 0;
  }
  if (deleg) {  // not while a writer may still be waiting out a recall of it
    const auto r = recalled_.find(key);
    deleg = r == recalled_.end() || now() - r->second >= kNoRegrantSeconds;
  }
  if (deleg) {  // nor to a client that sat out a recall lately
    const auto cl = clients_.find(c.clientid);
    deleg = cl != clients_.end() && cl->second.revoked == 0 && now() >= cl->second.no_deleg_until;
  }
  for (auto [f, fe] = by_file_.equal_range(key); deleg && f != fe; ++f) {
    const auto si = states_.find(f->second);
    if (si == states_.end()) continue;
    const State& st = si->second;
    if (st.kind == State::kOpenState && (st.access & kShareAccessWrite)) deleg = false;
    if (st.kind == State::kDelegState && (st.clientid == c.clientid || st.recall_at >= 0))
      deleg = false;
  }
  const auto cl = clients_.find(c.clientid);
  // The host's read lease on the file stands for the delegation: no lease, no delegation.
  int lease = deleg && cl != clients_.end() && cl->second.states < lim_.states
                  ? take_lease(file, c.clientid)
                  : -1;
  // No watch, no delegation: a host chmod or rename of the file would go unseen (the watches
  // are bounded: Limits::watches, and the host's fs.inotify.max_user_watches).
  if (lease >= 0 && !watch(key, lease)) {
    ::close(lease);
    fd_taken(c.clientid, -1);
    lease = -1;
  }
  if (lease >= 0) {
    State dl;
    dl.lease_fd = lease;
    dl.kind = State::kDelegState;
    dl.clientid = c.clientid;
    dl.file = key;
    dl.owner.clientid = c.clientid;
    dl.access = kShareAccessRead;
    dl.fh = fh->data;
    const Stateid ds = new_state(std::move(dl));
    lease_index_[lease] = ds.other;
    ++st_.delegations;
    e.u32(kDelegRead);
    encode(e, ds);
    e.boolean(false);  // recall: not already being recalled
    e.u32(0);          // nfsace4: ACCESS_ALLOWED, no flags, no mask, nobody named
    e.u32(0);
    e.u32(0);
    e.string("");
  } else {
    e.u32(kDelegNone);
  }
  return kOk;
}

Status Nfs4Server::close(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  d.u32();
  const Stateid sid = decode_stateid(d);
  if (!d.ok()) return kErrBadxdr;
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd fd(r.fd);
  State* st = nullptr;
  if (const Status s = check_stateid(c, sid, &r, &st)) return s;
  if (!st || st->kind != State::kOpenState) return kErrBadStateid;
  const Other open_id = sid.current() ? c.cur_stateid.other : sid.other;
  std::vector<Other> locks;
  for (auto [f, last] = by_file_.equal_range(st->file); f != last; ++f) {
    const Other& id = f->second;
    const auto li = states_.find(id);
    if (li == states_.end()) continue;
    const State& l = li->second;
    if (l.kind != State::kLockState || l.open != open_id) continue;
    const auto fl = locks_.find(l.file);
    if (fl != locks_.end() && fl->second.holds(l.owner)) return kErrLocksHeld;
    locks.push_back(id);
  }
  for (const auto& id : locks) drop_state(id);
  drop_state(open_id);
  c.has_cur_stateid = false;
  Stateid invalid;  // RFC 8881 18.2.4: the special invalid stateid
  invalid.seqid = 0xffffffffu;
  encode(e, invalid);
  return kOk;
}

Status Nfs4Server::open_downgrade(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const Stateid sid = decode_stateid(d);
  d.u32();
  const std::uint32_t access = d.u32() & kShareAccessBoth;
  const std::uint32_t deny = d.u32();
  if (!d.ok()) return kErrBadxdr;
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd fd(r.fd);
  State* st = nullptr;
  if (const Status s = check_stateid(c, sid, &r, &st)) return s;
  if (!st || st->kind != State::kOpenState) return kErrBadStateid;
  if (access == 0 || (access & ~st->access) || (deny & ~st->deny)) return kErrInval;
  const bool wrote = (st->access & kShareAccessWrite) && !(access & kShareAccessWrite);
  st->access = access;
  st->deny = deny;
  if (wrote) write_open_gone(st->file);
  ++st->seqid;
  Stateid out;
  out.seqid = st->seqid;
  out.other = sid.current() ? c.cur_stateid.other : sid.other;
  c.cur_stateid = out;
  c.has_cur_stateid = true;
  encode(e, out);
  return kOk;
}

namespace {
/// The server's lock let go for a file system call and taken again after it. What the caller
/// found under the lock (a State*, an iterator) may be gone after: look it up again.
class Unlocked {
 public:
  Unlocked(std::unique_lock<std::mutex>* l, const std::function<void()>& hook) : l_(l) {
    if (l_) l_->unlock();
    if (hook) hook();
  }
  ~Unlocked() {
    if (l_) l_->lock();
  }
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;

 private:
  std::unique_lock<std::mutex>* l_;
};
}  // namespace

Status Nfs4Server::read(Compound& c, XdrDecoder& d, XdrEncoder& e, RpcReply& out, bool last) {
  const Stateid sid = decode_stateid(d);
  const std::uint64_t off = d.u64();
  std::uint32_t count = d.u32();
  if (!d.ok()) return kErrBadxdr;
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd f(r.fd);
  if (S_ISDIR(r.st.st_mode)) return kErrIsdir;
  if (S_ISLNK(r.st.st_mode)) return kErrSymlink;
  if (!S_ISREG(r.st.st_mode)) return kErrInval;
  State* st = nullptr;
  if (const Status s = check_stateid(c, sid, &r, &st)) return s;
  // No open behind it (a special stateid): in the grace period a reclaim of a conflicting
  // share or lock may be on its way (RFC 8881 9.6).
  if (!st && grace_locked()) return kErrGrace;
  count = std::min(count, max_io);
  // The open-file cache's descriptor (the v3 server's): no open and close per READ.
  int fd = -1;
  std::shared_ptr<const void> io;
  if (const v3::Status s = files_.io_file(r, false, true, io, fd)) return from_v3(s);
  std::vector<std::uint8_t> data(count);
  ssize_t n = 0;
  int err = 0;
  std::uint64_t size = 0;
  {
    const Unlocked unlocked(c.lock, io_hook);
    n = count ? ::pread(fd, data.data(), count,
                        static_cast<off_t>(std::min<std::uint64_t>(off, 0x7fffffffffffffffull)))
              : 0;
    err = errno;
    struct stat now_st;
    if (n >= 0 && ::fstat(fd, &now_st) == 0) size = static_cast<std::uint64_t>(now_st.st_size);
  }
  if (n < 0) return from_errno(err);
  data.resize(static_cast<std::size_t>(n));
  e.boolean(off + static_cast<std::uint64_t>(n) >= size);
  if (last && n > 0) {
    // The reduced data item (RFC 8267 for NFSv4): the length here, the bytes in the client's
    // write chunk, or inline after the reply when it gave none. Nothing follows a last READ.
    e.u32(static_cast<std::uint32_t>(n));
    out.payload = std::move(data);
    out.has_payload = true;
  } else {
    e.opaque(data);
  }
  return kOk;
}

Status Nfs4Server::write(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const Stateid sid = decode_stateid(d);
  const std::uint64_t off = d.u64();
  const std::uint32_t stable = d.u32();
  const auto data = d.opaque(max_io);
  if (!d.ok()) return kErrBadxdr;
  if (stable > kFileSync) return kErrInval;
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd f(r.fd);
  if (S_ISDIR(r.st.st_mode)) return kErrIsdir;
  if (S_ISLNK(r.st.st_mode)) return kErrSymlink;
  if (!S_ISREG(r.st.st_mode)) return kErrInval;
  State* st = nullptr;
  if (const Status s = check_stateid(c, sid, &r, &st)) return s;
  if (st) {
    std::uint32_t acc = st->access;
    if (st->kind == State::kLockState) {
      const auto o = states_.find(st->open);
      acc = o == states_.end() ? 0 : o->second.access;
    }
    if (!(acc & kShareAccessWrite)) return kErrOpenmode;
  }
  if (!files_.options().rw) return kErrRofs;
  if (!st && grace_locked()) return kErrGrace;  // as READ
  if (off > 0x7fffffffffffffffull || off + data.size() > 0x7fffffffffffffffull) return kErrFbig;
  // Without an open (the anonymous stateid): no OPEN recalled the file's delegations, so here.
  if (!st && recall_delays(key_of(r.st), 0)) return kErrDelay;
  // The open-file cache's descriptor; one opened for writing is kept there only while a v4
  // open for writing of the file lives (CLOSE of the last lets it go: it would keep the host's
  // read leases, so delegations, away). An open's stateid has write access (checked above).
  int fd = -1;
  std::shared_ptr<const void> io;
  const bool keep = st || write_open(key_of(r.st));
  if (const v3::Status s = files_.io_file(r, true, keep, io, fd)) return from_v3(s);
  ssize_t n = 0;
  int err = 0;
  {
    const Unlocked unlocked(c.lock, io_hook);
    n = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(off));
    if (n < 0)
      err = errno;
    else if (stable != kUnstable && (stable == kDataSync ? ::fdatasync(fd) : ::fsync(fd)) != 0)
      err = errno;
  }
  if (err) return from_errno(err);
  const std::uint32_t committed = stable;
  e.u32(static_cast<std::uint32_t>(n));
  e.u32(committed);
  e.fixed(files_.write_verf());
  return kOk;
}

Status Nfs4Server::commit(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  d.u64();
  d.u32();
  if (!d.ok()) return kErrBadxdr;
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd f(r.fd);
  if (S_ISDIR(r.st.st_mode)) return kErrIsdir;
  if (!S_ISREG(r.st.st_mode)) return kErrInval;
  int fd = -1;
  std::shared_ptr<const void> io;  // the writes' cached descriptor, or one for reading
  if (const v3::Status s = files_.io_file(r, false, true, io, fd)) return from_v3(s);
  int err = 0;
  {
    const Unlocked sync(c.lock, io_hook);
    if (::fsync(fd) != 0) err = errno;
  }
  if (err) return from_errno(err);
  e.fixed(files_.write_verf());
  return kOk;
}

Status Nfs4Server::create(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const std::uint32_t type = d.u32();
  std::string target;
  std::uint32_t major_no = 0, minor_no = 0;
  if (type == kLnk) {
    target = d.string(4095);
  } else if (type == kBlk || type == kChr) {
    major_no = d.u32();
    minor_no = d.u32();
  }
  const std::string name = d.string(kMaxNameWire);
  SetAttrs attrs;
  const Status as = d.ok() ? decode_sattr(d, attrs) : kErrBadxdr;
  if (!d.ok()) return kErrBadxdr;
  if (as) return as;
  NfsServer::Resolved dir;
  if (const Status s = current(c, dir)) return s;
  Fd dfd(dir.fd);
  if (S_ISLNK(dir.st.st_mode)) return kErrSymlink;
  if (!S_ISDIR(dir.st.st_mode)) return kErrNotdir;
  if (const Status s = check_name(name)) return s;
  if (type == kLnk && (target.empty() || target.find('\0') != std::string::npos)) return kErrInval;
  if (!files_.options().rw) return kErrRofs;
  const std::uint64_t before = change_of(dir.st);
  const mode_t mode = static_cast<mode_t>(attrs.mode ? *attrs.mode : (type == kDir ? 0755 : 0644));
  int rc = 0;
  switch (type) {
    case kDir:
      rc = ::mkdirat(dir.fd, name.c_str(), mode);
      break;
    case kLnk:
      rc = ::symlinkat(target.c_str(), dir.fd, name.c_str());
      break;
    case kFifo:
      rc = ::mknodat(dir.fd, name.c_str(), S_IFIFO | mode, 0);
      break;
    case kSock:
      rc = ::mknodat(dir.fd, name.c_str(), S_IFSOCK | mode, 0);
      break;
    case kBlk:
    case kChr:
      rc = ::mknodat(dir.fd, name.c_str(), (type == kBlk ? S_IFBLK : S_IFCHR) | mode,
                     makedev(major_no, minor_no));
      break;
    default:
      return kErrBadtype;  // a regular file is OPEN's
  }
  if (rc != 0) return from_errno(errno);
  struct stat st;
  if (::fstatat(dir.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return from_errno(errno);
  const auto fh = files_.handle_in(dir, name, st);
  if (!fh) return kErrServerfault;
  Bitmap set;
  if (attrs.mode && type != kLnk) set.set(kMode);
  NfsServer::Resolved obj;
  if (const v3::Status s = files_.resolve(*fh, obj)) return from_v3(s);
  Fd ofd(obj.fd);
  SetAttrs rest = attrs;
  rest.mode.reset();
  rest.size.reset();
  if (const Status s = apply(obj, rest, set)) return s;
  c.cur = *fh;
  encode_cinfo(e, before, change_now(dir.fd));
  encode(e, set);
  return kOk;
}

Status Nfs4Server::remove(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const std::string name = d.string(kMaxNameWire);
  if (!d.ok()) return kErrBadxdr;
  NfsServer::Resolved dir;
  if (const Status s = current(c, dir)) return s;
  Fd dfd(dir.fd);
  if (!S_ISDIR(dir.st.st_mode)) return kErrNotdir;
  if (const Status s = check_name(name)) return s;
  if (!files_.options().rw) return kErrRofs;
  // In the grace period another client may be about to reclaim an open of it (knfsd answers
  // GRACE to every REMOVE and RENAME then).
  if (grace_locked()) return kErrGrace;
  struct stat st;
  if (::fstatat(dir.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return from_errno(errno);
  // Another client's delegation of the file: recalled first (its attributes change).
  if (S_ISREG(st.st_mode) && recall_delays(key_of(st), c.clientid)) return kErrDelay;
  const std::uint64_t before = change_of(dir.st);
  if (::unlinkat(dir.fd, name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0)
    return errno == EEXIST ? kErrNotempty : from_errno(errno);
  if (S_ISREG(st.st_mode)) mark_self(key_of(st), c.clientid);
  encode_cinfo(e, before, change_now(dir.fd));
  return kOk;
}

Status Nfs4Server::rename(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const std::string from = d.string(kMaxNameWire);
  const std::string to = d.string(kMaxNameWire);
  if (!d.ok()) return kErrBadxdr;
  if (!c.saved) return kErrNofilehandle;
  NfsServer::Resolved src, dst;
  if (const Status s = from_v3(files_.resolve(*c.saved, src))) return s;
  Fd sfd(src.fd);
  if (const Status s = current(c, dst)) return s;
  Fd tfd(dst.fd);
  if (!S_ISDIR(src.st.st_mode) || !S_ISDIR(dst.st.st_mode)) return kErrNotdir;
  if (const Status s = check_name(from)) return s;
  if (const Status s = check_name(to)) return s;
  if (!files_.options().rw) return kErrRofs;
  if (grace_locked()) return kErrGrace;  // as REMOVE
  for (const auto& [dfd, nm] : {std::pair{src.fd, &from}, std::pair{dst.fd, &to}}) {
    struct stat st;
    if (::fstatat(dfd, nm->c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        recall_delays(key_of(st), c.clientid))
      return kErrDelay;
  }
  const std::uint64_t sb = change_of(src.st), tb = change_of(dst.st);
  if (::renameat(src.fd, from.c_str(), dst.fd, to.c_str()) != 0)
    return errno == EEXIST ? kErrExist : from_errno(errno);
  files_.moved(join(src.rel, from), join(dst.rel, to));
  encode_cinfo(e, sb, change_now(src.fd));
  encode_cinfo(e, tb, change_now(dst.fd));
  return kOk;
}

Status Nfs4Server::link(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const std::string name = d.string(kMaxNameWire);
  if (!d.ok()) return kErrBadxdr;
  if (!c.saved) return kErrNofilehandle;
  NfsServer::Resolved src, dir;
  if (const Status s = from_v3(files_.resolve(*c.saved, src))) return s;
  Fd sfd(src.fd);
  if (const Status s = current(c, dir)) return s;
  Fd dfd(dir.fd);
  if (!S_ISDIR(dir.st.st_mode)) return kErrNotdir;
  if (S_ISDIR(src.st.st_mode)) return kErrIsdir;
  if (const Status s = check_name(name)) return s;
  if (!files_.options().rw) return kErrRofs;
  if (grace_locked()) return kErrGrace;  // as REMOVE: a name another client may reclaim by
  if (S_ISREG(src.st.st_mode) && recall_delays(key_of(src.st), c.clientid)) return kErrDelay;
  const std::uint64_t before = change_of(dir.st);
  if (::linkat(AT_FDCWD, proc_path(src.fd).c_str(), dir.fd, name.c_str(), AT_SYMLINK_FOLLOW) != 0)
    return from_errno(errno);
  if (S_ISREG(src.st.st_mode)) mark_self(key_of(src.st), c.clientid);
  encode_cinfo(e, before, change_now(dir.fd));
  return kOk;
}

Status Nfs4Server::readdir(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const std::uint64_t cookie = d.u64();
  d.fixed(8);  // the cookie verifier: cookies are the file system's offsets, always valid
  d.u32();     // dircount: a hint
  const std::uint32_t maxcount = d.u32();
  const Bitmap want = decode_bitmap(d);
  if (!d.ok()) return kErrBadxdr;
  if (cookie == 1 || cookie == 2) return kErrBadCookie;  // reserved (RFC 8881 18.23.3)
  if (const auto depth = c.cur ? pseudo_depth(*c.cur) : std::nullopt) {
    // One entry: the next name on the way to the export (cookie 3), then the end.
    std::vector<std::uint8_t> entries;
    XdrEncoder en(entries);
    if (cookie == 0) {
      const std::string& nm = export_parts_[*depth];
      const v3::Fh next = *pseudo_lookup(*depth, nm);
      en.boolean(true);
      en.u64(3);
      en.string(nm);
      if (const auto nd = pseudo_depth(next)) {
        encode_attrs(en, want, pseudo_attrs(*nd), &next, 0, true);
      } else {
        NfsServer::Resolved root;
        if (const v3::Status s = files_.resolve(next, root)) return from_v3(s);
        Fd rfd(root.fd);
        encode_attrs(en, want, root, &next);
      }
      if (entries.size() + 64 > maxcount) return kErrToosmall;
    }
    const std::uint8_t verf[8] = {};
    e.fixed(verf);
    e.fixed(entries);
    e.boolean(false);
    e.boolean(true);
    return kOk;
  }
  NfsServer::Resolved dir;
  if (const Status s = current(c, dir)) return s;
  Fd dfd(dir.fd);
  if (!S_ISDIR(dir.st.st_mode)) return kErrNotdir;
  int fd = -1;
  if (const v3::Status s = files_.open_for_io(dir, O_RDONLY | O_DIRECTORY, fd)) return from_v3(s);
  Fd io(fd);
  if (cookie && ::lseek(fd, static_cast<off_t>(cookie), SEEK_SET) < 0) return kErrBadCookie;
  // The reply's bound: what the client takes, and what a reply chunk carries.
  const std::size_t limit = std::min<std::size_t>(maxcount, 128 * 1024);
  std::vector<std::uint8_t> entries;
  XdrEncoder en(entries);
  std::size_t count = 0;
  bool eof = false, full = false;
  alignas(8) char buf[16384];
  const std::size_t fixed_part = 8 + 4 + 4 + 4 + 16;  // status area, verifier, the two bools
  while (!full) {
    const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n < 0) return from_errno(errno);
    if (n == 0) {
      eof = true;
      break;
    }
    for (long pos = 0; pos < n;) {
      struct Dirent {
        std::uint64_t ino;
        std::int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      const auto* de = reinterpret_cast<const Dirent*>(buf + pos);
      pos += de->reclen;
      const std::string nm = de->name;
      if (nm == "." || nm == "..") continue;
      struct stat st;
      std::vector<std::uint8_t> one;
      XdrEncoder oe(one);
      oe.boolean(true);
      oe.u64(static_cast<std::uint64_t>(de->off));
      oe.string(nm);
      NfsServer::Resolved ent;
      std::optional<v3::Fh> efh;
      if (::fstatat(dir.fd, nm.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (!want.has(kRdattrError)) continue;  // gone meanwhile
        Bitmap only;
        only.set(kRdattrError);
        ent.fd = -1;
        encode_attrs(oe, only, ent, nullptr, from_errno(errno));
      } else {
        if (want.has(kFilehandle)) efh = files_.handle_in(dir, nm, st);
        ent.st = st;
        ent.rel = join(dir.rel, nm);
        // statvfs-based attributes are the directory's file system's.
        ent.fd = dir.fd;
        encode_attrs(oe, want, ent, efh ? &*efh : nullptr);
      }
      if (fixed_part + entries.size() + one.size() > limit) {
        full = true;
        if (count == 0) return kErrToosmall;
        break;
      }
      entries.insert(entries.end(), one.begin(), one.end());
      ++count;
    }
  }
  const std::uint8_t verf[8] = {};
  e.fixed(verf);
  e.fixed(entries);
  e.boolean(false);  // no more entries
  e.boolean(eof);
  return kOk;
}

Status Nfs4Server::readlink(Compound& c, XdrEncoder& e) {
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd f(r.fd);
  if (!S_ISLNK(r.st.st_mode)) return kErrInval;
  std::string t(4096, '\0');
  const ssize_t n = ::readlinkat(r.fd, "", t.data(), t.size());
  if (n < 0) return from_errno(errno);
  t.resize(static_cast<std::size_t>(n));
  e.string(t);
  return kOk;
}

Status Nfs4Server::setattr(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const Stateid sid = decode_stateid(d);
  SetAttrs a;
  Status s = d.ok() ? decode_sattr(d, a) : kErrBadxdr;
  if (!d.ok()) return kErrBadxdr;  // (SETATTR's result has its bitmap even on error)
  Bitmap set;
  NfsServer::Resolved r;
  if (s == kOk) s = current(c, r);
  Fd f(s == kOk ? r.fd : -1);
  if (s == kOk && a.size) {
    State* st = nullptr;
    s = check_stateid(c, sid, &r, &st);
    if (s == kOk && st && st->kind == State::kOpenState && !(st->access & kShareAccessWrite))
      s = kErrOpenmode;
    if (s == kOk && !st && grace_locked()) s = kErrGrace;  // a truncation without an open
  }
  // Other clients' delegations of the file (every one's for a size: the holder's own lease
  // would keep the truncation out).
  if (s == kOk && S_ISREG(r.st.st_mode) &&
      (a.size || a.mode || a.uid || a.gid || a.atime || a.mtime) &&
      recall_delays(key_of(r.st), a.size ? 0 : c.clientid))
    s = kErrDelay;
  if (s == kOk) s = apply(r, a, set);
  if (s == kOk && S_ISREG(r.st.st_mode)) mark_self(key_of(r.st), c.clientid);
  encode(e, set);
  return s;
}

Status Nfs4Server::lock(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const std::uint32_t type = d.u32();
  const bool reclaim = d.boolean();
  const std::uint64_t off = d.u64();
  const std::uint64_t len = d.u64();
  const bool new_owner = d.boolean();
  Stateid sid;
  Owner owner;
  if (new_owner) {
    d.u32();
    sid = decode_stateid(d);
    d.u32();
    owner.clientid = d.u64();
    const auto n = d.opaque(kOpaqueLimit);
    owner.name.assign(n.begin(), n.end());
  } else {
    sid = decode_stateid(d);
    d.u32();
  }
  if (!d.ok()) return kErrBadxdr;
  if (type < kReadLt || type > kWritewLt) return kErrInval;
  std::uint64_t end = 0;
  if (!range_end(off, len, end)) return kErrInval;
  if (reclaim ? !may_reclaim(c.clientid) : grace_locked()) return reclaim ? kErrNoGrace : kErrGrace;
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd f(r.fd);
  if (S_ISDIR(r.st.st_mode)) return kErrIsdir;
  if (!S_ISREG(r.st.st_mode)) return kErrInval;
  State* st = nullptr;
  if (const Status s = check_stateid(c, sid, &r, &st)) return s;
  if (!st || st->kind != (new_owner ? State::kOpenState : State::kLockState)) return kErrBadStateid;
  const bool write = type == kWriteLt || type == kWritewLt;
  const FileKey key = key_of(r.st);
  Other lock_id{};
  State* ls = nullptr;
  if (new_owner) {
    if (owner.clientid != c.clientid) return kErrStaleClientid;
    const Other open_id = sid.current() ? c.cur_stateid.other : sid.other;
    for (auto [b, last] = by_file_.equal_range(key); b != last; ++b) {
      const auto xi = states_.find(b->second);
      if (xi == states_.end()) continue;
      State& x = xi->second;
      if (x.kind == State::kLockState && x.owner == owner) {
        ls = &x;
        lock_id = b->second;
      }
    }
    if (!ls) {
      const auto cl = clients_.find(c.clientid);
      if (cl == clients_.end()) return kErrStaleClientid;
      State n;
      n.owner = owner;
      if (cl->second.states >= lim_.states || !room(cl->second, state_cost(n))) return kErrResource;
      n.kind = State::kLockState;
      n.seqid = 0;  // the first LOCK makes it 1
      n.clientid = c.clientid;
      n.file = key;
      n.open = open_id;
      lock_id = new_state(std::move(n)).other;
      ls = &states_.at(lock_id);
    }
  } else {
    ls = st;
    lock_id = sid.current() ? c.cur_stateid.other : sid.other;
  }
  // Any open may take either kind of lock (RFC 8881 lets the server refuse a write lock on a
  // read-only open with OPENMODE; knfsd grants it when the file is open for writing anywhere.
  // Linux 6.1's v4 client itself refuses flock(LOCK_EX) on an O_RDONLY descriptor with EBADF;
  // util-linux flock(1) reopens the file read-write).
  for (;;) {
    const auto fl = locks_.find(key);
    const auto held =
        fl == locks_.end() ? std::nullopt : fl->second.conflict(ls->owner, write, off, end);
    if (!held) break;
    // Its client is gone (and its ranges with it; the table may have changed): look again.
    if (expired_holder(held->owner)) continue;
    // A blocking lock type: told (CB_NOTIFY_LOCK) when a range of the file goes.
    if (type == kReadwLt || type == kWritewLt) add_waiter(key, ls->owner, c.cur->data);
    if (ls->seqid == 0) drop_state(lock_id);  // a lock owner made for nothing
    encode_denied(e, *held);
    return kErrDenied;
  }
  // A lock adds two ranges at most (splitting one of the owner's own): room for them first.
  const std::size_t rc = range_cost(ls->owner);
  const auto cl = clients_.find(c.clientid);
  if (cl == clients_.end() || !room(cl->second, 2 * rc)) {
    if (ls->seqid == 0) drop_state(lock_id);
    return kErrResource;
  }
  // The host's word next: a local process (or anything else locking on the host) may hold it.
  if (const Status s = host_lock(*ls, r, write, off, end, e)) {
    // A blocking lock type refused by a host process: tick asks the host when it is free.
    if (s == kErrDenied && (type == kReadwLt || type == kWritewLt))
      add_host_waiter(key, ls->owner, c.cur->data, r, write, off, end);
    if (ls->seqid == 0) drop_state(lock_id);
    return s;
  }
  FileLocks& fl = locks_[key];
  const std::size_t before = fl.size();
  if (!fl.lock(ls->owner, write, off, end, lim_.locks_per_file)) {
    if (fl.empty()) locks_.erase(key);
    host_resync(*ls, off, end);
    if (ls->seqid == 0) drop_state(lock_id);
    return kErrResource;
  }
  charge(c.clientid,
         (static_cast<std::ptrdiff_t>(fl.size()) - static_cast<std::ptrdiff_t>(before)) *
             static_cast<std::ptrdiff_t>(rc));
  ++ls->seqid;
  // Waiting no more: forgotten (it would be told for nothing and count against the cap).
  for (auto [w, we] = lock_waiters_.equal_range(key); w != we; ++w)
    if (w->second.owner == ls->owner) {
      if (auto n = waiters_of_.find(ls->owner.clientid); n != waiters_of_.end() && !--n->second)
        waiters_of_.erase(n);
      lock_waiters_.erase(w);
      st_.lock_waiters_now = lock_waiters_.size();
      break;
    }
  Stateid out;
  out.seqid = ls->seqid;
  out.other = lock_id;
  c.cur_stateid = out;
  c.has_cur_stateid = true;
  encode(e, out);
  return kOk;
}

Status Nfs4Server::lockt(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const std::uint32_t type = d.u32();
  const std::uint64_t off = d.u64();
  const std::uint64_t len = d.u64();
  Owner owner;
  owner.clientid = d.u64();
  const auto n = d.opaque(kOpaqueLimit);
  owner.name.assign(n.begin(), n.end());
  if (!d.ok()) return kErrBadxdr;
  if (type < kReadLt || type > kWritewLt) return kErrInval;
  std::uint64_t end = 0;
  if (!range_end(off, len, end)) return kErrInval;
  if (owner.clientid != c.clientid) return kErrStaleClientid;  // another client's owner
  if (grace_locked()) return kErrGrace;  // a lock being reclaimed may not be back yet
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd f(r.fd);
  if (S_ISDIR(r.st.st_mode)) return kErrIsdir;
  if (!S_ISREG(r.st.st_mode)) return kErrInval;
  const bool write = type == kWriteLt || type == kWritewLt;
  const auto fl = locks_.find(key_of(r.st));
  const auto held = fl == locks_.end() ? std::nullopt : fl->second.conflict(owner, write, off, end);
  if (held) {
    encode_denied(e, *held);
    return kErrDenied;
  }
  return host_conflict(owner, r, write, off, end, e) ? kErrDenied : kOk;
}

Status Nfs4Server::host_lock(State& ls, const NfsServer::Resolved& r, bool write,
                             std::uint64_t start, std::uint64_t end, XdrEncoder& e) {
  struct flock f;
  if (!to_flock(write ? F_WRLCK : F_RDLCK, start, end, f)) return kOk;  // beyond off_t: ours alone
  if (ls.lock_fd < 0 || (write && !ls.lock_rw)) {
    // The owner's own open file description: read-write when its open is or a write lock is
    // asked for (a write lock needs it), else read-only (which keeps delegations possible).
    const auto o = states_.find(ls.open);
    const bool open_w = o != states_.end() && (o->second.access & kShareAccessWrite);
    const bool rw = write || open_w;
    if (ls.lock_fd < 0 && !fd_room(ls.clientid)) {
      // Beyond the descriptor allowance: granted in the table alone (v4 clients are excluded
      // by it; host processes do not see it), as ranges beyond off_t are, and counted. Never
      // over a host process's lock: that is asked first, through a description opened for the
      // question alone (closed again), as LOCKT does.
      if (host_conflict(ls.owner, r, write, start, end, e)) return kErrDenied;
      ++st_.locks_table_only;
      return kOk;
    }
    int fd = -1;
    if (const v3::Status s = files_.open_for_io(r, rw ? O_RDWR : O_RDONLY, fd)) {
      if (s == v3::kErrAcces && !open_w) return kErrOpenmode;  // may not write it at all
      return from_v3(s);
    }
    // Moving from a read-only description: the owner's (read) ranges go over first.
    if (ls.lock_fd >= 0) {
      if (const auto fl = locks_.find(ls.file); fl != locks_.end())
        for (const Range& x : fl->second.ranges()) {
          struct flock g;
          if (x.owner == ls.owner && to_flock(F_RDLCK, x.start, x.end, g))
            ::fcntl(fd, F_OFD_SETLK, &g);
        }
      ::close(ls.lock_fd);
    } else {
      fd_taken(ls.clientid, 1);
      // Ranges it was granted in the table alone while no descriptor was free: on the host too.
      if (const auto fl = locks_.find(ls.file); fl != locks_.end())
        for (const Range& x : fl->second.ranges()) {
          struct flock g;
          if (x.owner == ls.owner && to_flock(x.write ? F_WRLCK : F_RDLCK, x.start, x.end, g))
            ::fcntl(fd, F_OFD_SETLK, &g);
        }
    }
    ls.lock_fd = fd;
    ls.lock_rw = rw;
  }
  if (::fcntl(ls.lock_fd, F_OFD_SETLK, &f) == 0) return kOk;
  if (errno != EAGAIN && errno != EACCES) return kOk;  // no locks on this file system: ours alone
  struct flock held;
  to_flock(write ? F_WRLCK : F_RDLCK, start, end, held);
  if (::fcntl(ls.lock_fd, F_OFD_GETLK, &held) != 0 || held.l_type == F_UNLCK) held = f;
  encode_host_denied(e, held);
  return kErrDenied;
}

void Nfs4Server::host_resync(State& ls, std::uint64_t start, std::uint64_t end) {
  struct flock f;
  if (ls.lock_fd < 0 || !to_flock(F_UNLCK, start, end, f)) return;
  ::fcntl(ls.lock_fd, F_OFD_SETLK, &f);
  const auto fl = locks_.find(ls.file);
  if (fl == locks_.end()) return;
  for (const Range& x : fl->second.ranges()) {
    if (x.owner != ls.owner || x.end < start || end < x.start) continue;
    struct flock g;
    if (to_flock(x.write ? F_WRLCK : F_RDLCK, std::max(x.start, start), std::min(x.end, end), g))
      ::fcntl(ls.lock_fd, F_OFD_SETLK, &g);
  }
}

bool Nfs4Server::host_conflict(const Owner& who, const NfsServer::Resolved& r, bool write,
                               std::uint64_t start, std::uint64_t end, XdrEncoder& e) {
  struct flock f;
  if (!to_flock(write ? F_WRLCK : F_RDLCK, start, end, f)) return false;
  // Asked through the owner's own description where it has one (its ranges are no conflict),
  // else through a new one (every v4 owner's ranges the table already answered for).
  int fd = -1;
  for (auto [b, last] = by_file_.equal_range(key_of(r.st)); b != last && fd < 0; ++b) {
    const auto x = states_.find(b->second);
    if (x != states_.end() && x->second.kind == State::kLockState && x->second.owner == who)
      fd = x->second.lock_fd;
  }
  Fd mine;
  if (fd < 0) {
    if (files_.open_for_io(r, O_RDONLY, mine.fd) != v3::kOk) return false;
    fd = mine.fd;
  }
  if (::fcntl(fd, F_OFD_GETLK, &f) != 0 || f.l_type == F_UNLCK) return false;
  // A v4 owner's range the table knows is no conflict for this owner (it was asked first).
  if (f.l_pid == -1) {
    const auto fl = locks_.find(key_of(r.st));
    if (fl != locks_.end())
      for (const Range& x : fl->second.ranges())
        if (x.owner == who && x.start <= static_cast<std::uint64_t>(f.l_start) &&
            (f.l_len == 0 ? x.end == ~std::uint64_t{0}
                          : static_cast<std::uint64_t>(f.l_start + f.l_len - 1) <= x.end))
          return false;
  }
  encode_host_denied(e, f);
  return true;
}

Status Nfs4Server::locku(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const std::uint32_t type = d.u32();
  d.u32();
  const Stateid sid = decode_stateid(d);
  const std::uint64_t off = d.u64();
  const std::uint64_t len = d.u64();
  if (!d.ok()) return kErrBadxdr;
  if (type < kReadLt || type > kWritewLt) return kErrInval;
  std::uint64_t end = 0;
  if (!range_end(off, len, end)) return kErrInval;
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd f(r.fd);
  State* st = nullptr;
  if (const Status s = check_stateid(c, sid, &r, &st)) return s;
  if (!st || st->kind != State::kLockState) return kErrBadStateid;
  if (struct flock u; st->lock_fd >= 0 && to_flock(F_UNLCK, off, end, u))
    ::fcntl(st->lock_fd, F_OFD_SETLK, &u);
  const auto fl = locks_.find(st->file);
  if (fl != locks_.end()) {
    const std::size_t before = fl->second.size();
    fl->second.unlock(st->owner, off, end);
    charge(st->clientid,
           (static_cast<std::ptrdiff_t>(fl->second.size()) - static_cast<std::ptrdiff_t>(before)) *
               static_cast<std::ptrdiff_t>(range_cost(st->owner)));
    if (fl->second.empty()) locks_.erase(fl);
    wake_waiters(st->file);
  }
  ++st->seqid;
  Stateid out;
  out.seqid = st->seqid;
  out.other = sid.current() ? c.cur_stateid.other : sid.other;
  c.cur_stateid = out;
  c.has_cur_stateid = true;
  encode(e, out);
  return kOk;
}

Status Nfs4Server::free_stateid(Compound& c, XdrDecoder& d) {
  const Stateid sid = decode_stateid(d);
  if (!d.ok()) return kErrBadxdr;
  if (const auto it = states_.find(sid.other);  // a revoked delegation: freed at last
      !sid.current() && it != states_.end() && it->second.clientid == c.clientid &&
      it->second.revoked) {
    drop_state(sid.other);
    return kOk;
  }
  State* st = nullptr;
  if (const Status s = check_stateid(c, sid, nullptr, &st)) return s;
  if (!st) return kErrBadStateid;
  if (st->kind != State::kLockState) return kErrLocksHeld;
  const auto fl = locks_.find(st->file);
  if (fl != locks_.end() && fl->second.holds(st->owner)) return kErrLocksHeld;
  drop_state(sid.current() ? c.cur_stateid.other : sid.other);
  return kOk;
}

Status Nfs4Server::test_stateid(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  const std::uint32_t n = d.u32();
  if (n > 1024) d.fail();
  std::vector<Stateid> ids;
  for (std::uint32_t i = 0; i < n && d.ok(); ++i) ids.push_back(decode_stateid(d));
  if (!d.ok()) return kErrBadxdr;
  e.u32(n);
  for (const auto& id : ids) {
    State* st = nullptr;
    const Status s = id.anonymous() || id.bypass() || id.current()
                         ? kErrBadStateid
                         : check_stateid(c, id, nullptr, &st);
    e.u32(s);
  }
  return kOk;
}

// --- The back channel and delegations ---------------------------------------------------

std::uint32_t Nfs4Server::seq_flags(const Session& s) const {
  std::uint32_t f = 0;
  if (backchannel) {
    bool wanted = false, up = false;
    // The client's sessions (ids are random: a scan of the bounded table, not a range).
    for (const auto& [id, o] : sessions_) {
      if (o.clientid != s.clientid) continue;
      wanted |= o.back_wanted && o.back_capable;
      up |= o.back_conn != 0;
    }
    // Only where the client could mend it: a session over TCP here has no back channel to bind.
    if (wanted && !up) f |= kSeqCbPathDown;
    if (s.back_wanted && s.back_capable && s.back_conn == 0) f |= kSeqCbPathDownSession;
  }
  if (const auto cl = clients_.find(s.clientid); cl != clients_.end() && cl->second.revoked)
    f |= kSeqRecallableStateRevoked;
  return f;
}

Status Nfs4Server::bind_conn(Compound& c, XdrDecoder& d, XdrEncoder& e) {
  SessionId sid{};
  if (const auto v = d.fixed(16); v.size() == 16) std::copy(v.begin(), v.end(), sid.begin());
  const std::uint32_t dir = d.u32();
  d.boolean();  // use_conn_in_rdma_mode: an RDMA connection already is in it
  if (!d.ok()) return kErrBadxdr;
  const auto it = sessions_.find(sid);
  if (it == sessions_.end()) return kErrBadsession;
  if (dir != kCdfc4Fore && dir != kCdfc4Back && dir != kCdfc4ForeOrBoth && dir != kCdfc4BackOrBoth)
    return kErrInval;
  Session& s = it->second;
  std::uint32_t got = kCdfs4Fore;
  if (backchannel && c.ctx && c.ctx->conn) s.back_capable = true;
  if (dir != kCdfc4Fore) {
    s.back_wanted = true;
    if (backchannel && c.ctx && c.ctx->conn && s.cb_cred) {
      if (s.back_conn != c.ctx->conn) {
        // Moved: what was out on the old connection is lost; its recall goes again on this one.
        resend_lost_recalls([&](const PendingCb& p) { return p.session == sid; });
        s.cb_busy = false;
      }
      s.back_conn = c.ctx->conn;
      got = dir == kCdfc4Back ? kCdfs4Back : kCdfs4Both;
    } else if (dir == kCdfc4Back || dir == kCdfc4BackOrBoth) {
      return kErrInval;  // a back channel is required and this connection cannot carry one
    }
  }
  if (const auto cl = clients_.find(s.clientid); cl != clients_.end()) cl->second.renewed = now();
  e.fixed(sid);
  e.u32(got);
  e.boolean(false);
  return kOk;
}

Status Nfs4Server::backchannel_ctl(Compound& c, XdrDecoder& d) {
  const std::uint32_t program = d.u32();
  const std::optional<rpc::OpaqueAuth> cred = decode_cb_sec(d);
  if (!d.ok()) return kErrBadxdr;
  const auto it = sessions_.find(c.sid);
  if (!c.in_session || it == sessions_.end()) return kErrBadsession;
  if (!cred) return kErrEncrAlgUnsupp;  // RPCSEC_GSS alone: no flavor to call back with
  it->second.cb_program = program;
  it->second.cb_cred = cred;
  it->second.back_wanted = true;
  return kOk;
}

Status Nfs4Server::delegreturn(Compound& c, XdrDecoder& d) {
  const Stateid sid = decode_stateid(d);
  if (!d.ok()) return kErrBadxdr;
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd f(r.fd);
  State* st = nullptr;
  if (const Status s = check_stateid(c, sid, &r, &st)) return s;  // another client's: BAD_STATEID
  if (!st || st->kind != State::kDelegState) return kErrBadStateid;
  ++st_.delegreturns;
  drop_state(sid.current() ? c.cur_stateid.other : sid.other);
  return kOk;
}

bool Nfs4Server::recall_conflicting(const FileKey& file, std::uint64_t clientid) {
  bool out = false;
  for (auto [f, fe] = by_file_.equal_range(file); f != fe; ++f) {
    const auto si = states_.find(f->second);
    if (si == states_.end()) continue;
    State& st = si->second;
    if (st.kind != State::kDelegState || st.clientid == clientid || st.revoked) continue;
    if (st.recall_at < 0) {
      ++st_.recalls_begun;
      st.recall_at = now();
      recalls_[si->first] = st.clientid;
      queue_recall(si->first, st);
    }
    out = true;
  }
  if (out) {
    mark_recalled(file);
    pump();
  }
  return out;
}

void Nfs4Server::mark_recalled(const FileKey& file) {
  if (!recalled_.contains(file) && recalled_.size() >= kMaxRecalled) {  // the oldest go first
    std::erase_if(recalled_, [&](const auto& r) { return now() - r.second >= kNoRegrantSeconds; });
    if (recalled_.size() >= kMaxRecalled) recalled_.erase(recalled_.begin());
  }
  recalled_[file] = now();
}

bool Nfs4Server::v3_change(std::uint64_t dev, std::uint64_t ino) {
  if (delegs_.load(std::memory_order_relaxed) == 0) return false;  // the common case: no lock
  std::lock_guard g(mu_);
  poll_leases();
  const bool wait = recall_conflicting(FileKey{dev, ino}, 0);
  st_.recall_jukebox += wait;
  return wait;
}

bool Nfs4Server::fd_room(std::uint64_t clientid) const {
  std::size_t cap = lim_.host_fds;
  if (rlimit r{}; ::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
    cap = std::min<std::size_t>(cap, static_cast<std::size_t>(r.rlim_cur / 4));
  const auto cl = clients_.find(clientid);
  if (host_fds_ >= cap || cl == clients_.end() || cl->second.host_fds >= lim_.host_fds_per_client)
    return false;
  const auto p = host_fds_by_peer_.find(cl->second.principal.peer);
  const std::size_t share =
      std::max<std::size_t>(cap / std::max<std::size_t>(lim_.host_fds_peer_share, 1), 1);
  return p == host_fds_by_peer_.end() || p->second < share;
}

void Nfs4Server::fd_taken(std::uint64_t clientid, std::ptrdiff_t n) {
  const auto step = [n](std::size_t& v) { v = n > 0 ? v + 1 : v - std::min<std::size_t>(v, 1); };
  step(host_fds_);
  if (const auto cl = clients_.find(clientid); cl != clients_.end()) {
    step(cl->second.host_fds);
    const auto p = host_fds_by_peer_.try_emplace(cl->second.principal.peer, 0).first;
    step(p->second);
    if (!p->second) host_fds_by_peer_.erase(p);
  }
}

int Nfs4Server::take_lease(const NfsServer::Resolved& file, std::uint64_t clientid) {
  if (!leases_ok_ || !fd_room(clientid)) return -1;
  int fd = -1;
  if (files_.open_for_io(file, O_RDONLY, fd) != v3::kOk) return -1;
  // The break is reported with our signal (and si_fd); F_SETLEASE fails while anybody has the
  // file open for writing (EAGAIN), for a caller who is not its owner without CAP_LEASE
  // (EACCES), and where the file system has no leases (EINVAL).
  if (::fcntl(fd, F_SETSIG, lease_signal()) != 0 || ::fcntl(fd, F_SETLEASE, F_RDLCK) != 0) {
    ::close(fd);
    return -1;
  }
  fd_taken(clientid, 1);
  return fd;
}

void Nfs4Server::poll_leases(bool force) {
  poll_watches();
  const std::uint64_t n = g_lease_breaks.load(std::memory_order_acquire);
  if (n == lease_breaks_seen_ && (!force || delegs_.load(std::memory_order_relaxed) == 0)) return;
  const std::uint64_t from = std::exchange(lease_breaks_seen_, n);
  std::vector<FileKey> broken;
  const auto check = [&](State& st) {
    if (st.kind != State::kDelegState || st.lease_fd < 0 || st.revoked || st.recall_at >= 0) return;
    ++st_.lease_checks;
    if (::fcntl(st.lease_fd, F_GETLEASE) == F_RDLCK) return;  // not this one
    st.broken = true;
    ++st_.lease_breaks;
    broken.push_back(st.file);
  };
  // The signals name their descriptors: ask those leases alone. Every lease only when told to
  // (tick, once a second, in case no thread could take the signal), or when the ring lost some.
  bool all = force || n - from > kBreakRing;
  for (std::uint64_t i = from; !all && i != n; ++i) {
    const std::uint64_t v = g_break_fds[i % kBreakRing].load(std::memory_order_acquire);
    if (v >> 32 != (i & 0xffffffffu) || (v & 0xffffffffu) == 0) {
      all = true;  // not written yet, or overwritten
      break;
    }
    const auto l = lease_index_.find(static_cast<int>((v & 0xffffffffu) - 1));
    if (l == lease_index_.end()) continue;  // another server's, or gone
    if (const auto st = states_.find(l->second); st != states_.end()) check(st->second);
  }
  if (all) {
    broken.clear();
    for (auto& [id, st] : states_) check(st);
  }
  for (const auto& f : broken) recall_conflicting(f, 0);
}

bool Nfs4Server::watch(const FileKey& file, int lease_fd) {
  if (const auto w = watch_of_.find(file); w != watch_of_.end()) {
    ++w->second.second;
    return true;
  }
  if (inotify_fd_ < 0) inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  // By the lease's descriptor (the inode itself, whatever its names now).
  const int wd = watch_of_.size() < lim_.watches && inotify_fd_ >= 0
                     ? ::inotify_add_watch(inotify_fd_, proc_path(lease_fd).c_str(),
                                           IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF)
                     : -1;
  if (wd < 0) {
    ++st_.unwatched;
    return false;
  }
  watch_of_[file] = {wd, 1};
  watch_file_[wd] = file;
  return true;
}

void Nfs4Server::unwatch(const FileKey& file) {
  const auto w = watch_of_.find(file);
  if (w == watch_of_.end() || --w->second.second) return;
  ::inotify_rm_watch(inotify_fd_, w->second.first);
  watch_file_.erase(w->second.first);
  watch_of_.erase(w);
}

void Nfs4Server::mark_self(const FileKey& file, std::uint64_t clientid) {
  if (!watch_of_.contains(file)) return;
  if (self_change_.size() >= kMaxWatches) self_change_.clear();
  self_change_[file] = {clientid, now()};
}

void Nfs4Server::poll_watches() {
  if (inotify_fd_ < 0 || watch_file_.empty()) return;
  alignas(inotify_event) char buf[4096];
  std::vector<std::pair<FileKey, std::uint64_t>> changed;
  bool overflow = false;
  for (int round = 0; round < 16; ++round) {
    const ssize_t n = ::read(inotify_fd_, buf, sizeof buf);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + i);
      i += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      overflow |= (ev->mask & IN_Q_OVERFLOW) != 0;
      if (!(ev->mask & (IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF))) continue;
      const auto f = watch_file_.find(ev->wd);
      if (f == watch_file_.end()) continue;
      // A change the server made for a client: that client's delegations stay.
      std::uint64_t self = 0;
      if (const auto sc = self_change_.find(f->second);
          sc != self_change_.end() && now() - sc->second.second <= 1)
        self = sc->second.first;
      changed.emplace_back(f->second, self);
    }
  }
  self_change_.clear();
  if (overflow) {
    // The kernel's queue overflowed (fs.inotify.max_queued_events): events were lost, so any
    // delegated file may have changed unseen. Every watched file's delegations are recalled.
    ++st_.watch_overflows;
    changed.clear();
    for (const auto& [file, wd] : watch_of_) changed.emplace_back(file, 0);
  }
  for (const auto& [file, self] : changed)
    if (recall_conflicting(file, self)) ++st_.meta_recalls;
}

void Nfs4Server::release(State& st) {
  if (st.kind == State::kDelegState && st.lease_fd >= 0) unwatch(st.file);
  for (const int fd : {st.lease_fd, st.lock_fd})
    if (fd >= 0) fd_taken(st.clientid, -1);
  if (st.lease_fd >= 0) lease_index_.erase(st.lease_fd);
  if (st.lease_fd >= 0) ::close(st.lease_fd);  // the lease goes with its descriptor
  if (st.lock_fd >= 0) ::close(st.lock_fd);    // and the owner's host locks with theirs
  st.lease_fd = st.lock_fd = -1;
}

void Nfs4Server::queue_recall(const Other& id, State& st) {
  if (st.cb_queued) return;
  waiting_[st.clientid].emplace(st.cb_next_ms, id);
  st.cb_queued = true;
}

void Nfs4Server::unqueue_recall(const Other& id, State& st) {
  if (!st.cb_queued) return;
  st.cb_queued = false;
  const auto w = waiting_.find(st.clientid);
  if (w == waiting_.end()) return;
  for (auto [q, qe] = w->second.equal_range(st.cb_next_ms); q != qe; ++q)
    if (q->second == id) {
      w->second.erase(q);
      break;
    }
  if (w->second.empty()) waiting_.erase(w);
}

void Nfs4Server::resend_recall(const Other& id) {
  const auto st = states_.find(id);
  if (st == states_.end() || st->second.kind != State::kDelegState || st->second.revoked ||
      st->second.recall_at < 0)
    return;
  st->second.recall_sent = false;
  queue_recall(id, st->second);
}

void Nfs4Server::unindex_session(std::uint64_t clientid, const SessionId& sid) {
  for (auto [i, ie] = client_sessions_.equal_range(clientid); i != ie; ++i)
    if (i->second == sid) {
      client_sessions_.erase(i);
      return;
    }
}

void Nfs4Server::pump() {
  // CB_NOTIFY_LOCKs first (a waiter retries at once); a recall takes the next free slot.
  for (auto w = notify_.begin(); w != notify_.end();) {
    auto& q = w->second;
    for (auto [i, ie] = client_sessions_.equal_range(w->first); i != ie && !q.empty(); ++i) {
      const auto ss = sessions_.find(i->second);
      if (ss == sessions_.end() || !ss->second.back_conn || ss->second.cb_busy ||
          !ss->second.cb_cred)
        continue;
      Session& s = ss->second;
      std::uint32_t xid = next_cb_xid_++;
      while (pending_.count(xid) || xid == 0) xid = next_cb_xid_++;
      Callback cb;
      cb.conn = s.back_conn;
      cb.xid = xid;
      encode_cb_notify_lock(cb.msg, xid, s.cb_program, *s.cb_cred, s.id, s.cb_seqid + 1,
                            q.front().fh, q.front().owner);
      outbox_.push_back(std::move(cb));
      pending_[xid] = PendingCb{s.back_conn, s.id, Other{}, now()};  // no delegation: no resend
      s.cb_busy = true;
      q.pop_front();
      ++st_.notify_locks;
    }
    if (q.empty())
      w = notify_.erase(w);
    else
      ++w;
  }
  const std::int64_t t = waiting_.empty() ? 0 : now_ms();
  for (auto w = waiting_.begin(); w != waiting_.end();) {
    auto& q = w->second;
    // A session of the holder with its back channel free (a client has a few).
    const auto free_session = [&]() -> Session* {
      for (auto [i, ie] = client_sessions_.equal_range(w->first); i != ie; ++i) {
        ++st_.pump_visits;
        const auto ss = sessions_.find(i->second);
        if (ss != sessions_.end() && ss->second.back_conn && !ss->second.cb_busy &&
            ss->second.cb_cred)
          return &ss->second;
      }
      return nullptr;
    };
    ++st_.pump_visits;
    for (Session* s = free_session(); s && !q.empty() && q.begin()->first <= t;) {
      const Other id = q.begin()->second;
      q.erase(q.begin());
      const auto st = states_.find(id);
      if (st == states_.end()) continue;
      State& dl = st->second;
      dl.cb_queued = false;
      if (dl.kind != State::kDelegState || dl.revoked || dl.recall_sent) continue;
      std::uint32_t xid = next_cb_xid_++;
      while (pending_.count(xid) || xid == 0) xid = next_cb_xid_++;
      Callback cb;
      cb.conn = s->back_conn;
      cb.xid = xid;
      Stateid sid;
      sid.seqid = dl.seqid;
      sid.other = id;
      encode_cb_recall(cb.msg, xid, s->cb_program, *s->cb_cred, s->id, s->cb_seqid + 1, sid, dl.fh);
      outbox_.push_back(std::move(cb));
      pending_[xid] = PendingCb{s->back_conn, s->id, id, now()};
      s->cb_busy = true;
      dl.recall_sent = true;
      ++st_.recalls;
      s = free_session();
    }
    if (q.empty())
      w = waiting_.erase(w);
    else
      ++w;
  }
}

Nfs4Server::Waiter* Nfs4Server::add_waiter(const FileKey& file, const Owner& owner,
                                           const std::vector<std::uint8_t>& fh) {
  for (auto [w, we] = lock_waiters_.equal_range(file); w != we; ++w)
    if (w->second.owner == owner) return &w->second;  // already waiting
  std::size_t& n = waiters_of_[owner.clientid];
  if (n >= kMaxLockWaiters) {
    ++st_.lock_waiters_dropped;
    return nullptr;
  }
  ++n;
  Waiter& w = lock_waiters_.emplace(file, Waiter{owner, fh})->second;
  st_.lock_waiters_now = lock_waiters_.size();
  return &w;
}

void Nfs4Server::add_host_waiter(const FileKey& file, const Owner& owner,
                                 const std::vector<std::uint8_t>& fh, const NfsServer::Resolved& r,
                                 bool write, std::uint64_t start, std::uint64_t end) {
  Waiter* w = add_waiter(file, owner, fh);
  if (!w) return;
  if (!host_wait_fd_.contains(file)) {
    // A description of its own, holding no lock: the host's answer for it names every holder
    // (the server's own v4 owners' too; those are in the table and wake the waiter themselves).
    int fd = -1;
    if (host_wait_fd_.size() >= kMaxHostWaitFiles || files_.open_for_io(r, O_RDONLY, fd)) {
      ++st_.host_wait_unwatched;
      return;
    }
    host_wait_fd_.emplace(file, fd);
  }
  w->host = true;
  w->write = write;
  w->start = start;
  w->end = end;
}

void Nfs4Server::check_host_waiters() {
  // Files none of whose waiters a host lock refuses any more (told, granted, or their client
  // gone): their descriptors go.
  for (auto h = host_wait_fd_.begin(); h != host_wait_fd_.end();) {
    const auto [w, we] = lock_waiters_.equal_range(h->first);
    if (std::any_of(w, we, [](const auto& x) { return x.second.host; })) {
      ++h;
      continue;
    }
    ::close(h->second);
    h = host_wait_fd_.erase(h);
  }
  std::vector<FileKey> freed;
  auto h = host_wait_fd_.upper_bound(host_next_);
  for (std::size_t n = std::min(kHostChecksPerTick, host_wait_fd_.size()); n; --n, ++h) {
    if (h == host_wait_fd_.end()) h = host_wait_fd_.begin();
    host_next_ = h->first;
    for (auto [w, we] = lock_waiters_.equal_range(h->first); w != we; ++w) {
      const Waiter& x = w->second;
      struct flock f;
      if (!x.host || !to_flock(x.write ? F_WRLCK : F_RDLCK, x.start, x.end, f)) continue;
      // Asked on the owner's own description where it has one (its own ranges are no
      // conflict), else on the file's.
      int fd = h->second;
      for (auto [b, be] = by_file_.equal_range(h->first); b != be; ++b)
        if (const auto s = states_.find(b->second);
            s != states_.end() && s->second.kind == State::kLockState &&
            s->second.owner == x.owner && s->second.lock_fd >= 0)
          fd = s->second.lock_fd;
      ++st_.host_wait_checks;
      if (::fcntl(fd, F_OFD_GETLK, &f) == 0 && f.l_type == F_UNLCK) {
        freed.push_back(h->first);
        break;
      }
    }
  }
  st_.host_wait_freed += freed.size();
  for (const FileKey& f : freed) wake_waiters(f);
}

void Nfs4Server::wake_waiters(const FileKey& file) {
  const auto [w, we] = lock_waiters_.equal_range(file);
  if (w == we) return;
  for (auto i = w; i != we; ++i) {
    const std::uint64_t cl = i->second.owner.clientid;
    if (auto n = waiters_of_.find(cl); n != waiters_of_.end() && !--n->second) waiters_of_.erase(n);
    auto& q = notify_[cl];
    if (q.size() < kMaxLockWaiters)
      q.push_back(std::move(i->second));
    else
      ++st_.notify_lost;  // the client retries on its own
  }
  lock_waiters_.erase(w, we);
  st_.lock_waiters_now = lock_waiters_.size();
  pump();
}

void Nfs4Server::drop_waiters(std::uint64_t clientid) {
  if (waiters_of_.erase(clientid))
    std::erase_if(lock_waiters_,
                  [&](const auto& w) { return w.second.owner.clientid == clientid; });
  notify_.erase(clientid);
  st_.lock_waiters_now = lock_waiters_.size();
}

void Nfs4Server::revoke(const Other& id, State& st) {
  unqueue_recall(id, st);
  release(st);  // a writer waiting on the host goes on
  st.revoked = true;
  st.recall_sent = false;
  ++st_.revoked;
  if (auto cl = clients_.find(st.clientid); cl != clients_.end()) ++cl->second.revoked;
  mark_recalled(st.file);  // the recall ends now: the no-regrant window starts here
}

std::vector<Nfs4Server::Callback> Nfs4Server::take_callbacks() {
  std::unique_lock g(mu_, std::try_to_lock);
  if (!g.owns_lock()) return {};
  drain_inbox();
  poll_leases();
  pump();
  return std::exchange(outbox_, {});
}

void Nfs4Server::post_reply(std::uint64_t conn, std::span<const std::uint8_t> reply) {
  std::lock_guard g(inbox_mu_);
  if (inbox_.size() >= kInbox || reply.empty()) {
    ++inbox_dropped_;
    return;
  }
  inbox_.emplace_back(conn, std::vector<std::uint8_t>(reply.begin(), reply.end()));
}

void Nfs4Server::post_closed(std::uint64_t conn) {
  std::lock_guard g(inbox_mu_);
  if (inbox_.size() >= kInbox) inbox_.erase(inbox_.begin());  // a close outranks a reply
  inbox_.emplace_back(conn, std::vector<std::uint8_t>{});
}

void Nfs4Server::drain_inbox() {
  std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> in;
  {
    std::lock_guard g(inbox_mu_);
    in.swap(inbox_);
    st_.cb_bad_replies += std::exchange(inbox_dropped_, 0);
  }
  for (const auto& [conn, msg] : in) {
    if (msg.empty())
      closed_locked(conn);
    else
      reply_locked(conn, msg);
  }
}

bool Nfs4Server::callback_reply(std::uint64_t conn, std::span<const std::uint8_t> reply) {
  std::lock_guard g(mu_);
  drain_inbox();
  return reply_locked(conn, reply);
}

bool Nfs4Server::reply_locked(std::uint64_t conn, std::span<const std::uint8_t> reply) {
  XdrDecoder d(reply);
  rpc::ReplyHeader h;
  if (!rpc::decode(d, h)) {
    ++st_.cb_bad_replies;
    return false;
  }
  const auto p = pending_.find(h.xid);
  if (p == pending_.end() || p->second.conn != conn) {
    ++st_.cb_bad_replies;
    return false;
  }
  const PendingCb pc = p->second;
  pending_.erase(p);
  ++st_.cb_replies;
  bool seq_ok = false;
  std::uint32_t recall = kErrServerfault;
  if (h.stat == rpc::kMsgAccepted && h.accept == rpc::kSuccess) {
    d.u32();  // the CB_COMPOUND's status: each operation's says more
    d.string(kMaxTag);
    const std::uint32_t n = d.u32();
    if (n >= 1 && d.u32() == kCbSequence && d.u32() == kOk) {
      const auto echoed = d.fixed(16);
      d.u32();
      d.u32();
      d.u32();
      d.u32();
      seq_ok = d.ok() && std::equal(echoed.begin(), echoed.end(), pc.session.begin());
      if (seq_ok && n >= 2 && d.u32() == kCbRecall) recall = d.u32();
      if (!d.ok()) recall = kErrServerfault;
    }
  }
  const auto s = sessions_.find(pc.session);
  if (s != sessions_.end()) {
    s->second.cb_busy = false;
    if (seq_ok) ++s->second.cb_seqid;
  }
  // DELAY: the client asks for the recall again; anything else but OK leaves it to the timeout.
  // Sent again after a back-off that doubles (100 ms to 10 s), not on the next 1 ms pump.
  if (auto st = states_.find(pc.deleg); st != states_.end() && recall == kErrDelay) {
    State& dl = st->second;
    unqueue_recall(pc.deleg, dl);
    dl.cb_backoff_ms =
        dl.cb_backoff_ms ? std::min(dl.cb_backoff_ms * 2, kCbBackoffMaxMs) : kCbBackoffFirstMs;
    dl.cb_next_ms = now_ms() + dl.cb_backoff_ms;
    resend_recall(pc.deleg);
  }
  return true;
}

bool Nfs4Server::tick() {
  std::unique_lock g(mu_, std::try_to_lock);
  if (!g.owns_lock()) return false;
  drain_inbox();
  poll_leases(true);
  grace_locked();
  const std::int64_t t = now();
  reap_courteous(t);
  flush_records();
  const auto lease = static_cast<std::int64_t>(lim_.lease_seconds);
  // Blocked lock waiters of a client whose lease ran out go (it waits for nothing any more).
  for (auto w = waiters_of_.begin(); w != waiters_of_.end();) {
    const auto cl = clients_.find(w->first);
    const std::uint64_t id = w->first;
    ++w;
    if (cl == clients_.end() || t - cl->second.renewed > lease) drop_waiters(id);
  }
  // Waiters a host process's lock refused: told when the host says their range is free.
  check_host_waiters();
  for (auto n = notify_.begin(); n != notify_.end();) {
    const auto cl = clients_.find(n->first);
    if (cl == clients_.end() || t - cl->second.renewed > lease) {
      st_.notify_lost += n->second.size();  // never sent: no back channel before it expired
      n = notify_.erase(n);
    } else {
      ++n;
    }
  }
  // A recall (and a call on the back channel) is waited for a lease, but never longer than
  // kRecallMaxSeconds: with --lease-time 3600 a writer would otherwise wait an hour for a
  // client that does not answer (knfsd's laundromat revokes after one lease).
  const std::int64_t recall_limit = std::min(lease, kRecallMaxSeconds);
  for (auto p = pending_.begin(); p != pending_.end();) {
    if (t - p->second.sent <= recall_limit) {
      ++p;
      continue;
    }
    ++st_.cb_timeouts;
    if (p->second.deleg == Other{}) ++st_.notify_lost;  // a CB_NOTIFY_LOCK, never answered
    if (auto s = sessions_.find(p->second.session); s != sessions_.end()) {
      s->second.cb_busy = false;
      s->second.back_conn = 0;  // down until the client binds a connection again
    }
    const Other deleg = p->second.deleg;
    p = pending_.erase(p);
    resend_recall(deleg);
  }
  for (auto it = recalls_.begin(); it != recalls_.end();) {
    const auto st = states_.find(it->first);
    // A lease the kernel broke is taken away at its lease-break-time whatever the server does
    // (the writer then goes on): revoked by then, so that the client knows its data is stale.
    const std::int64_t limit = st != states_.end() && st->second.broken
                                   ? std::min(recall_limit, lease_break_s_ - 1)
                                   : recall_limit;
    if (st != states_.end() && st->second.recall_at >= 0 && t - st->second.recall_at > limit) {
      revoke(st->first, st->second);
      it = recalls_.erase(it);
    } else {
      ++it;
    }
  }
  pump();
  return true;
}

bool Nfs4Server::try_client_list(std::vector<ClientInfo>& out, std::size_t& total,
                                 std::size_t max) const {
  std::unique_lock g(mu_, std::try_to_lock);
  if (!g.owns_lock()) return false;
  out.clear();
  total = clients_.size();
  std::map<std::uint64_t, ClientInfo> by_id;
  const std::int64_t t = now();
  for (const auto& [id, cl] : clients_) {
    ClientInfo& i = by_id[id];
    i.clientid = id;
    i.ownerid.assign(cl.ownerid.begin(),
                     cl.ownerid.begin() +
                         static_cast<std::ptrdiff_t>(std::min(cl.ownerid.size(), kListOwnerBytes)));
    i.principal = cl.principal;
    i.confirmed = cl.confirmed;
    i.reclaim_complete = cl.reclaim_complete;
    i.revoked = cl.revoked;
    i.renewed_ago = std::max<std::int64_t>(t - cl.renewed, 0);
  }
  for (const auto& [sid, ss] : sessions_)
    if (const auto i = by_id.find(ss.clientid); i != by_id.end()) {
      ++i->second.sessions;
      i->second.back_channel |= ss.back_conn != 0;
    }
  for (const auto& [o, st] : states_) {
    const auto i = by_id.find(st.clientid);
    if (i == by_id.end()) continue;
    if (st.kind == State::kOpenState) ++i->second.opens;
    if (st.kind == State::kLockState) ++i->second.locks;
    if (st.kind == State::kDelegState && !st.revoked) ++i->second.delegations;
  }
  for (auto& [id, i] : by_id) out.push_back(std::move(i));
  std::stable_sort(out.begin(), out.end(), [](const ClientInfo& a, const ClientInfo& b) {
    return a.renewed_ago < b.renewed_ago;
  });
  if (out.size() > max) out.resize(max);
  return true;
}

std::string Nfs4Server::format_clients(const std::vector<ClientInfo>& list, std::size_t total) {
  std::string s = "nfs4 clients: " + std::to_string(total) + "\n";
  if (list.empty()) return s;
  s += "  clientid         address          principal            minor state       sessions "
       "opens locks delegs renewed  owner\n";
  static const char* const kHex = "0123456789abcdef";
  for (const ClientInfo& c : list) {
    char id[24];
    std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(c.clientid));
    const std::uint32_t a = c.principal.peer;
    const std::string addr = std::to_string(a >> 24) + "." + std::to_string(a >> 16 & 255) + "." +
                             std::to_string(a >> 8 & 255) + "." + std::to_string(a & 255);
    const std::string who =
        c.principal.flavor == rpc::kAuthSys
            ? "sys " + std::to_string(c.principal.uid) + ":" + std::to_string(c.principal.gid)
            : "none";
    const std::string state = !c.confirmed          ? "unconfirmed"
                              : !c.reclaim_complete ? "confirmed"
                              : c.back_channel      ? "active"
                                                    : "no-callback";
    // The co_ownerid as the client wrote it (Linux: "Linux NFSv4.1 host"), bytes that are not
    // printable as \xNN: no escape sequence of a client's reaches the terminal.
    std::string owner = "\"";
    for (const std::uint8_t b : c.ownerid) {
      if (b >= 0x20 && b < 0x7f && b != '"' && b != '\\') {
        owner += static_cast<char>(b);
      } else {
        owner += "\\x";
        owner += kHex[b >> 4];
        owner += kHex[b & 15];
      }
    }
    owner += "\"";
    char line[256];
    std::snprintf(line, sizeof line, "  %-16s %-16s %-20s 4.1   %-11s %8zu %5zu %5zu %6zu %6llds ",
                  id, addr.c_str(), who.c_str(), state.c_str(), c.sessions, c.opens, c.locks,
                  c.delegations, static_cast<long long>(c.renewed_ago));
    s += line + owner;
    if (c.revoked) s += " (" + std::to_string(c.revoked) + " delegations revoked)";
    s += "\n";
  }
  if (total > list.size()) s += "  (" + std::to_string(total - list.size()) + " more not listed)\n";
  return s;
}

void Nfs4Server::connection_closed(std::uint64_t conn) {
  std::lock_guard g(mu_);
  drain_inbox();
  closed_locked(conn);
}

void Nfs4Server::closed_locked(std::uint64_t conn) {
  if (!conn) return;
  for (auto& [id, s] : sessions_)
    if (s.back_conn == conn) {
      s.back_conn = 0;
      s.cb_busy = false;
    }
  resend_lost_recalls([conn](const PendingCb& p) { return p.conn == conn; });
}

}  // namespace roce::nfs
