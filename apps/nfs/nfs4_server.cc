/// @file
/// The NFSv4.1 server (nfs4_server.h): COMPOUND, sessions, and the operations on files.
#include "apps/nfs/nfs4_server.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

namespace roce::nfs {

using namespace v4;

namespace {

Status from_errno(int e) {
  switch (e) {
    case EPERM:
      return kErrPerm;
    case ENOENT:
      return kErrNoent;
    case EACCES:
      return kErrAccess;
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
    case EOVERFLOW:
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
    case ESTALE:
      return kErrStale;
    case ELOOP:
      return kErrSymlink;
    case EOPNOTSUPP:
      return kErrNotsupp;
    default:
      return kErrIo;
  }
}

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

[[maybe_unused]] std::string proc_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

[[maybe_unused]] std::string join(const std::string& rel, const std::string& name) {
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
  std::optional<v3::Fh> cur, saved;
  Stateid cur_stateid{};
  bool has_cur_stateid = false;
  bool in_session = false;
  SessionId sid{};
  std::uint32_t slot = 0;
  std::uint64_t clientid = 0;                         ///< the session's client
  const std::vector<std::uint8_t>* replay = nullptr;  ///< SEQUENCE found a retry: its reply
};

Nfs4Server::Nfs4Server(NfsServer& files, Limits limits) : files_(files), lim_(limits) {
  now = [] {
    return std::chrono::duration_cast<std::chrono::seconds>(
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
  std::lock_guard g(mu_);
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
  const bool ran = files_.run_as(h.cred, [&] { compound(c, d, e, out); });
  if (!ran || (!d.ok() && out.msg.size() == body)) {
    // No identity to act as (roced lacks CAP_SETUID), or the COMPOUND's header did not decode.
    out.msg.resize(body - 4);
    out.payload.clear();
    out.has_payload = false;
    e.u32(ran ? rpc::kGarbageArgs : rpc::kSystemErr);
    ++(ran ? st_.garbage : st_.errors);
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
  (void)out;
  (void)last;
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
      if (const Status s = current(c, r)) return s;
      ::close(r.fd);
      if (!S_ISDIR(r.st.st_mode) && (opnum == kSecinfo || style == 1)) return kErrNotdir;
      if (style == 1 && r.st.st_ino == root_ino_ && r.st.st_dev == root_dev_) return kErrNoent;
      e.u32(1);
      e.u32(rpc::kAuthSys);
      c.cur.reset();  // RFC 8881 2.6.3.1.1.8: SECINFO consumes the current file handle
      return kOk;
    }
    case kPutrootfh:
    case kPutpubfh:
      c.cur = files_.root_fh();
      return kOk;
    case kPutfh: {
      const auto b = d.opaque(kFhSize);
      if (!d.ok()) return kErrBadxdr;
      if (b.empty()) return kErrBadhandle;
      v3::Fh fh;
      fh.data.assign(b.begin(), b.end());
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

void Nfs4Server::forget_client(std::uint64_t clientid) {
  std::erase_if(sessions_, [&](const auto& s) { return s.second.clientid == clientid; });
  for (auto it = states_.begin(); it != states_.end();) {
    if (it->second.clientid == clientid) {
      if (it->second.kind == State::kLock) {
        const auto l = locks_.find(it->second.file);
        if (l != locks_.end()) {
          l->second.drop(it->second.owner);
          if (l->second.empty()) locks_.erase(l);
        }
      }
      it = states_.erase(it);
    } else {
      ++it;
    }
  }
  clients_.erase(clientid);
}

Status Nfs4Server::exchange_id(Compound&, XdrDecoder& d, XdrEncoder& e) {
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
                                   kExchgidBindPrincStateid | kExchgidMaskPnfs |
                                   kExchgidUpdConfirmedRecA;
  if (flags & ~kValid) return kErrInval;
  Client* found = nullptr;
  for (auto& [id, cl] : clients_)
    if (cl.ownerid == ownerid && (!found || cl.confirmed)) found = &cl;
  Client* cl = nullptr;
  if (flags & kExchgidUpdConfirmedRecA) {
    if (!found || !found->confirmed) return kErrNoent;
    if (found->verifier != verf) return kErrNotSame;
    cl = found;
  } else if (found && found->confirmed && found->verifier == verf) {
    cl = found;  // the same client again
  } else {
    // New, or a client that rebooted (another verifier: its old record goes when the new one
    // is confirmed), or an unconfirmed one tried again (it is replaced).
    if (found && !found->confirmed) forget_client(found->clientid);
    if (clients_.size() >= lim_.clients) reap_expired();
    if (clients_.size() >= lim_.clients) return kErrResource;
    Client n;
    n.clientid = boot_ << 32 | next_client_++;
    n.ownerid = ownerid;
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

Status Nfs4Server::create_session(Compound&, XdrDecoder& d, XdrEncoder& e) {
  const std::uint64_t clientid = d.u64();
  const std::uint32_t seq = d.u32();
  const std::uint32_t flags = d.u32();
  const ChannelAttrs fore = decode_channel(d);
  const ChannelAttrs back = decode_channel(d);
  d.u32();  // the callback program: no backchannel yet
  const std::uint32_t nsec = d.u32();
  if (nsec > 16) d.fail();
  for (std::uint32_t i = 0; i < nsec && d.ok(); ++i) {
    const std::uint32_t flavor = d.u32();
    if (flavor == rpc::kAuthSys) {
      d.u32();
      d.string(rpc::kMaxMachineName);
      d.u32();
      d.u32();
      const std::uint32_t ng = d.u32();
      if (ng > rpc::kMaxGids) d.fail();
      for (std::uint32_t j = 0; j < ng && d.ok(); ++j) d.u32();
    } else if (flavor == 6) {  // RPCSEC_GSS: gss_cb_handles4
      d.u32();
      d.opaque(kOpaqueLimit);
      d.opaque(kOpaqueLimit);
    } else if (flavor != rpc::kAuthNone) {
      d.fail();
    }
  }
  if (!d.ok()) return kErrBadxdr;
  const auto it = clients_.find(clientid);
  if (it == clients_.end()) return kErrStaleClientid;
  Client& cl = it->second;
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
    std::vector<std::uint64_t> old;
    for (const auto& [id, o] : clients_)
      if (id != clientid && o.ownerid == cl.ownerid) old.push_back(id);
    for (auto id : old) forget_client(id);
    cl.confirmed = true;
  }
  Session s;
  s.clientid = clientid;
  for (int i = 0; i < 8; ++i)
    s.id[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(clientid >> (56 - 8 * i));
  const std::uint32_t n = next_session_++;
  for (int i = 0; i < 4; ++i)
    s.id[static_cast<std::size_t>(8 + i)] = static_cast<std::uint8_t>(n >> (24 - 8 * i));
  std::copy(boot_verf_.begin(), boot_verf_.begin() + 4, s.id.begin() + 12);
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
  s.flags = 0;  // not persistent, no backchannel on this connection (yet)
  (void)flags;
  sessions_.emplace(s.id, s);
  cl.cs_seqid = seq + 1;
  cl.renewed = now();
  std::vector<std::uint8_t> body;
  XdrEncoder b(body);
  b.fixed(s.id);
  b.u32(seq);
  b.u32(s.flags);
  encode_channel(b, f);
  encode_channel(b, back);
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
  if (seq == slot.seqid && slot.seqid != 0) {
    if (!slot.cached) return kErrRetryUncachedRep;
    c.replay = &slot.reply;
    return kOk;
  }
  if (seq != slot.seqid + 1) return kErrSeqMisordered;
  slot.seqid = seq;
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
  e.u32(0);                                               // status flags
  return kOk;
}

Status Nfs4Server::destroy_session(Compound& c, XdrDecoder& d) {
  SessionId sid{};
  if (const auto v = d.fixed(16); v.size() == 16) std::copy(v.begin(), v.end(), sid.begin());
  if (!d.ok()) return kErrBadxdr;
  const auto it = sessions_.find(sid);
  if (it == sessions_.end()) return kErrBadsession;
  sessions_.erase(it);
  if (c.in_session && c.sid == sid) c.in_session = false;
  return kOk;
}

Status Nfs4Server::destroy_clientid(Compound&, XdrDecoder& d) {
  const std::uint64_t id = d.u64();
  if (!d.ok()) return kErrBadxdr;
  if (!clients_.count(id)) return kErrStaleClientid;
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
  return from_v3(files_.resolve(*c.cur, r));
}

void Nfs4Server::encode_attrs(XdrEncoder& e, const Bitmap& want, const NfsServer::Resolved& r,
                              const v3::Fh* fh, std::uint32_t rdattr_error) {
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
        v.u64(0);
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
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd fd(r.fd);
  encode_attrs(e, want, r, &*c.cur);
  return kOk;
}

Status Nfs4Server::lookup(Compound& c, XdrDecoder& d) {
  const std::string name = d.string(kMaxNameWire);
  if (!d.ok()) return kErrBadxdr;
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
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd fd(r.fd);
  if (S_ISLNK(r.st.st_mode)) return kErrSymlink;
  if (!S_ISDIR(r.st.st_mode)) return kErrNotdir;
  if (r.st.st_ino == root_ino_ && r.st.st_dev == root_dev_) return kErrNoent;
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
  NfsServer::Resolved r;
  if (const Status s = current(c, r)) return s;
  Fd fd(r.fd);
  // Asked of the kernel as the caller (AT_EACCESS: the file system ids), as the v3 server does.
  const bool dir = S_ISDIR(r.st.st_mode), reg = S_ISREG(r.st.st_mode);
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
  } else if (reg) {
    if ((want & (kAccessModify | kAccessExtend)) && may(W_OK))
      got |= want & (kAccessModify | kAccessExtend);
    if ((want & kAccessExecute) && may(X_OK)) got |= kAccessExecute;
  }
  if (!files_.options().rw) got &= ~(kAccessModify | kAccessExtend | kAccessDelete);
  e.u32(want & kAll);
  e.u32(got);
  return kOk;
}

}  // namespace roce::nfs
