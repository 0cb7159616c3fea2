/// @file
/// NFSv4.1 XDR shapes and names (nfs4.h).
#include "apps/nfs/nfs4.h"

#include <algorithm>

namespace roce::nfs::v4 {

std::uint32_t Bitmap::end() const {
  for (std::size_t i = w.size(); i-- > 0;)
    if (w[i]) return static_cast<std::uint32_t>(i * 32 + 32 - __builtin_clz(w[i]));
  return 0;
}

void encode(XdrEncoder& e, const Bitmap& b) {
  std::size_t n = b.w.size();
  while (n && !b.w[n - 1]) --n;  // no trailing empty words
  e.u32(static_cast<std::uint32_t>(n));
  for (std::size_t i = 0; i < n; ++i) e.u32(b.w[i]);
}

Bitmap decode_bitmap(XdrDecoder& d) {
  Bitmap b;
  const std::uint32_t n = d.u32();
  if (n > kMaxBitmapWords) {
    d.fail();
    return b;
  }
  for (std::uint32_t i = 0; i < n && d.ok(); ++i) b.w.push_back(d.u32());
  return b;
}

bool Stateid::anonymous() const {
  return seqid == 0 && std::all_of(other.begin(), other.end(), [](auto b) { return b == 0; });
}
bool Stateid::bypass() const {
  return seqid == 0xffffffffu &&
         std::all_of(other.begin(), other.end(), [](auto b) { return b == 0xff; });
}
bool Stateid::current() const {
  return seqid == 1 && std::all_of(other.begin(), other.end(), [](auto b) { return b == 0; });
}

void encode(XdrEncoder& e, const Stateid& s) {
  e.u32(s.seqid);
  e.fixed(s.other);
}

Stateid decode_stateid(XdrDecoder& d) {
  Stateid s;
  s.seqid = d.u32();
  const auto o = d.fixed(12);
  if (o.size() == 12) std::copy(o.begin(), o.end(), s.other.begin());
  return s;
}

const char* to_string(Status s) {
  switch (s) {
    case kOk:
      return "NFS4_OK";
    case kErrNoent:
      return "NFS4ERR_NOENT";
    case kErrAccess:
      return "NFS4ERR_ACCESS";
    case kErrExist:
      return "NFS4ERR_EXIST";
    case kErrStale:
      return "NFS4ERR_STALE";
    case kErrBadhandle:
      return "NFS4ERR_BADHANDLE";
    case kErrNotsupp:
      return "NFS4ERR_NOTSUPP";
    case kErrDenied:
      return "NFS4ERR_DENIED";
    case kErrBadStateid:
      return "NFS4ERR_BAD_STATEID";
    case kErrOldStateid:
      return "NFS4ERR_OLD_STATEID";
    case kErrBadxdr:
      return "NFS4ERR_BADXDR";
    case kErrBadname:
      return "NFS4ERR_BADNAME";
    case kErrOpIllegal:
      return "NFS4ERR_OP_ILLEGAL";
    case kErrBadsession:
      return "NFS4ERR_BADSESSION";
    case kErrBadslot:
      return "NFS4ERR_BADSLOT";
    case kErrSeqMisordered:
      return "NFS4ERR_SEQ_MISORDERED";
    case kErrTooManyOps:
      return "NFS4ERR_TOO_MANY_OPS";
    case kErrOpNotInSession:
      return "NFS4ERR_OP_NOT_IN_SESSION";
    case kErrResource:
      return "NFS4ERR_RESOURCE";
    case kErrStaleClientid:
      return "NFS4ERR_STALE_CLIENTID";
    default:
      return "NFS4ERR";
  }
}

const char* op_name(std::uint32_t op) {
  static const char* const names[] = {nullptr,
                                      nullptr,
                                      nullptr,
                                      "ACCESS",
                                      "CLOSE",
                                      "COMMIT",
                                      "CREATE",
                                      "DELEGPURGE",
                                      "DELEGRETURN",
                                      "GETATTR",
                                      "GETFH",
                                      "LINK",
                                      "LOCK",
                                      "LOCKT",
                                      "LOCKU",
                                      "LOOKUP",
                                      "LOOKUPP",
                                      "NVERIFY",
                                      "OPEN",
                                      "OPENATTR",
                                      "OPEN_CONFIRM",
                                      "OPEN_DOWNGRADE",
                                      "PUTFH",
                                      "PUTPUBFH",
                                      "PUTROOTFH",
                                      "READ",
                                      "READDIR",
                                      "READLINK",
                                      "REMOVE",
                                      "RENAME",
                                      "RENEW",
                                      "RESTOREFH",
                                      "SAVEFH",
                                      "SECINFO",
                                      "SETATTR",
                                      "SETCLIENTID",
                                      "SETCLIENTID_CONFIRM",
                                      "VERIFY",
                                      "WRITE",
                                      "RELEASE_LOCKOWNER",
                                      "BACKCHANNEL_CTL",
                                      "BIND_CONN_TO_SESSION",
                                      "EXCHANGE_ID",
                                      "CREATE_SESSION",
                                      "DESTROY_SESSION",
                                      "FREE_STATEID",
                                      "GET_DIR_DELEGATION",
                                      "GETDEVICEINFO",
                                      "GETDEVICELIST",
                                      "LAYOUTCOMMIT",
                                      "LAYOUTGET",
                                      "LAYOUTRETURN",
                                      "SECINFO_NO_NAME",
                                      "SEQUENCE",
                                      "SET_SSV",
                                      "TEST_STATEID",
                                      "WANT_DELEGATION",
                                      "DESTROY_CLIENTID",
                                      "RECLAIM_COMPLETE"};
  if (op < sizeof names / sizeof names[0] && names[op]) return names[op];
  return "ILLEGAL";
}

std::optional<bool> parse_switch(std::string_view v) {
  std::string low;
  for (const char ch : v) low += static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  if (low == "on" || low == "yes" || low == "1" || low == "true") return true;
  if (low == "off" || low == "no" || low == "0" || low == "false") return false;
  return std::nullopt;
}

}  // namespace roce::nfs::v4
