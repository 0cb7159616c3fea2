/// @file
/// NFSv3 and MOUNT XDR (nfs3.h).
#include "apps/nfs/nfs3.h"

#include <cerrno>
#include <utility>

namespace roce::nfs::v3 {

const char* to_string(Status s) {
  switch (s) {
    case kOk:
      return "NFS3_OK";
    case kErrPerm:
      return "NFS3ERR_PERM";
    case kErrNoent:
      return "NFS3ERR_NOENT";
    case kErrIo:
      return "NFS3ERR_IO";
    case kErrAcces:
      return "NFS3ERR_ACCES";
    case kErrExist:
      return "NFS3ERR_EXIST";
    case kErrNotdir:
      return "NFS3ERR_NOTDIR";
    case kErrIsdir:
      return "NFS3ERR_ISDIR";
    case kErrInval:
      return "NFS3ERR_INVAL";
    case kErrFbig:
      return "NFS3ERR_FBIG";
    case kErrNospc:
      return "NFS3ERR_NOSPC";
    case kErrRofs:
      return "NFS3ERR_ROFS";
    case kErrNametoolong:
      return "NFS3ERR_NAMETOOLONG";
    case kErrNotempty:
      return "NFS3ERR_NOTEMPTY";
    case kErrStale:
      return "NFS3ERR_STALE";
    case kErrXdev:
      return "NFS3ERR_XDEV";
    case kErrNodev:
      return "NFS3ERR_NODEV";
    case kErrMlink:
      return "NFS3ERR_MLINK";
    case kErrDquot:
      return "NFS3ERR_DQUOT";
    case kErrNotSync:
      return "NFS3ERR_NOT_SYNC";
    case kErrBadtype:
      return "NFS3ERR_BADTYPE";
    case kErrNxio:
      return "NFS3ERR_NXIO";
    case kErrBadhandle:
      return "NFS3ERR_BADHANDLE";
    case kErrBadCookie:
      return "NFS3ERR_BAD_COOKIE";
    case kErrNotsupp:
      return "NFS3ERR_NOTSUPP";
    case kErrToosmall:
      return "NFS3ERR_TOOSMALL";
    case kErrServerfault:
      return "NFS3ERR_SERVERFAULT";
    case kErrJukebox:
      return "NFS3ERR_JUKEBOX";
    default:
      return "NFS3ERR_?";
  }
}

void encode(XdrEncoder& e, const Fh& fh) { e.opaque(fh.data); }

Fh decode_fh(XdrDecoder& d) {
  const auto b = d.opaque(kFhSize);
  return Fh{{b.begin(), b.end()}};
}

namespace {
void put_time(XdrEncoder& e, const Time& t) {
  e.u32(t.sec);
  e.u32(t.nsec);
}
Time get_time(XdrDecoder& d) {
  Time t;
  t.sec = d.u32();
  t.nsec = d.u32();
  return t;
}
}  // namespace

void encode(XdrEncoder& e, const Fattr& a) {
  e.u32(a.type);
  e.u32(a.mode);
  e.u32(a.nlink);
  e.u32(a.uid);
  e.u32(a.gid);
  e.u64(a.size);
  e.u64(a.used);
  e.u32(a.rdev1);
  e.u32(a.rdev2);
  e.u64(a.fsid);
  e.u64(a.fileid);
  put_time(e, a.atime);
  put_time(e, a.mtime);
  put_time(e, a.ctime);
}

Fattr decode_fattr(XdrDecoder& d) {
  Fattr a;
  a.type = d.u32();
  a.mode = d.u32();
  a.nlink = d.u32();
  a.uid = d.u32();
  a.gid = d.u32();
  a.size = d.u64();
  a.used = d.u64();
  a.rdev1 = d.u32();
  a.rdev2 = d.u32();
  a.fsid = d.u64();
  a.fileid = d.u64();
  a.atime = get_time(d);
  a.mtime = get_time(d);
  a.ctime = get_time(d);
  if (a.type < kReg || a.type > kFifo) d.fail();
  return a;
}

void encode(XdrEncoder& e, const Sattr& s) {
  e.boolean(s.mode.has_value());
  if (s.mode) e.u32(*s.mode);
  e.boolean(s.uid.has_value());
  if (s.uid) e.u32(*s.uid);
  e.boolean(s.gid.has_value());
  if (s.gid) e.u32(*s.gid);
  e.boolean(s.size.has_value());
  if (s.size) e.u64(*s.size);
  // DONT_CHANGE, SET_TO_SERVER_TIME or SET_TO_CLIENT_TIME and the time.
  for (const auto& [now, t] : {std::pair{s.atime_now, s.atime}, std::pair{s.mtime_now, s.mtime}}) {
    e.u32(t ? 2 : now ? 1 : 0);
    if (t) put_time(e, *t);
  }
}

Sattr decode_sattr(XdrDecoder& d) {
  Sattr s;
  if (d.boolean()) s.mode = d.u32();
  if (d.boolean()) s.uid = d.u32();
  if (d.boolean()) s.gid = d.u32();
  if (d.boolean()) s.size = d.u64();
  for (auto [now, t] : {std::pair{&s.atime_now, &s.atime}, std::pair{&s.mtime_now, &s.mtime}}) {
    const std::uint32_t how = d.u32();
    if (how == 2)
      *t = get_time(d);  // SET_TO_CLIENT_TIME
    else if (how > 2)
      d.fail();
    *now = how == 1;
  }
  return s;
}

void encode_post_op(XdrEncoder& e, const std::optional<Fattr>& a) {
  e.boolean(a.has_value());
  if (a) encode(e, *a);
}

std::optional<Fattr> decode_post_op(XdrDecoder& d) {
  if (!d.boolean()) return std::nullopt;
  return decode_fattr(d);
}

void encode_wcc(XdrEncoder& e, const std::optional<Fattr>& before,
                const std::optional<Fattr>& after) {
  e.boolean(before.has_value());
  if (before) {
    e.u64(before->size);
    put_time(e, before->mtime);
    put_time(e, before->ctime);
  }
  encode_post_op(e, after);
}

std::optional<Fattr> decode_wcc(XdrDecoder& d) {
  if (d.boolean()) d.fixed(24);
  return decode_post_op(d);
}

LookupRes decode_lookup(XdrDecoder& d) {
  LookupRes r;
  r.status = static_cast<Status>(d.u32());
  if (r.status != kOk) {
    decode_post_op(d);
    return r;
  }
  r.fh = decode_fh(d);
  r.attr = decode_post_op(d);
  decode_post_op(d);
  return r;
}

ReadRes decode_read_head(XdrDecoder& d) {
  ReadRes r;
  r.status = static_cast<Status>(d.u32());
  r.attr = decode_post_op(d);
  if (r.status != kOk) return r;
  r.count = d.u32();
  r.eof = d.boolean();
  r.data_len = d.u32();
  return r;
}

WriteRes decode_write(XdrDecoder& d) {
  WriteRes r;
  r.status = static_cast<Status>(d.u32());
  r.attr = decode_wcc(d);
  if (r.status != kOk) return r;
  r.count = d.u32();
  r.committed = static_cast<StableHow>(d.u32());
  const auto v = d.fixed(8);
  if (v.size() == 8) std::copy(v.begin(), v.end(), r.verf.begin());
  return r;
}

CreateRes decode_create(XdrDecoder& d) {
  CreateRes r;
  r.status = static_cast<Status>(d.u32());
  if (r.status == kOk) {
    if (d.boolean()) r.fh = decode_fh(d);
    r.attr = decode_post_op(d);
  }
  decode_wcc(d);
  return r;
}

ReaddirplusRes decode_readdirplus(XdrDecoder& d) {
  ReaddirplusRes r;
  r.status = static_cast<Status>(d.u32());
  decode_post_op(d);
  if (r.status != kOk) return r;
  const auto v = d.fixed(8);
  if (v.size() == 8) std::copy(v.begin(), v.end(), r.verf.begin());
  while (d.ok() && d.boolean()) {
    DirEntry e;
    e.fileid = d.u64();
    e.name = d.string(kMaxName);
    e.cookie = d.u64();
    e.attr = decode_post_op(d);
    if (d.boolean()) e.fh = decode_fh(d);
    if (r.entries.size() > 100000) d.fail();
    r.entries.push_back(std::move(e));
  }
  r.eof = d.boolean();
  return r;
}

FsinfoRes decode_fsinfo(XdrDecoder& d) {
  FsinfoRes r;
  r.status = static_cast<Status>(d.u32());
  decode_post_op(d);
  if (r.status != kOk) return r;
  r.rtmax = d.u32();
  r.rtpref = d.u32();
  r.rtmult = d.u32();
  r.wtmax = d.u32();
  r.wtpref = d.u32();
  r.wtmult = d.u32();
  r.dtpref = d.u32();
  r.maxfilesize = d.u64();
  r.time_delta = get_time(d);
  r.properties = d.u32();
  return r;
}

void encode(XdrEncoder& e, const FsinfoRes& r) {
  e.u32(r.status);
  e.boolean(false);
  if (r.status != kOk) return;
  for (auto v : {r.rtmax, r.rtpref, r.rtmult, r.wtmax, r.wtpref, r.wtmult, r.dtpref}) e.u32(v);
  e.u64(r.maxfilesize);
  put_time(e, r.time_delta);
  e.u32(r.properties);
}

MountRes decode_mount(XdrDecoder& d) {
  MountRes r;
  r.status = d.u32();
  if (r.status != 0) return r;
  r.fh = decode_fh(d);
  const std::uint32_t n = d.u32();
  if (n > 16) {
    d.fail();
    return r;
  }
  for (std::uint32_t i = 0; i < n; ++i) r.flavors.push_back(d.u32());
  return r;
}

/// The NFSv3 status for a file system call's errno (RFC 1813 2.6; NFSv4.1 maps through it).
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
    case ESTALE:
      return kErrStale;
    case ENODEV:
      return kErrNodev;
    case EOPNOTSUPP:
      return kErrNotsupp;
    case EOVERFLOW:
      return kErrFbig;
    case EMFILE:  // out of descriptors or memory: for now, the client tries again later
    case ENFILE:
    case ENOMEM:
    case EWOULDBLOCK:  // an open for writing broke a lease (an NFSv4 delegation being recalled)
      return kErrJukebox;
    default:
      return kErrIo;
  }
}

}  // namespace roce::nfs::v3
