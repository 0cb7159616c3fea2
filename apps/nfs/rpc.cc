/// @file
/// ONC RPC headers (rpc.h).
#include "apps/nfs/rpc.h"

namespace roce::nfs::rpc {

namespace {

void encode_auth(XdrEncoder& e, const OpaqueAuth& a) {
  e.u32(a.flavor);
  e.opaque(a.body);
}

void decode_auth(XdrDecoder& d, OpaqueAuth& a) {
  a.flavor = d.u32();
  const auto b = d.opaque(kMaxAuthBody);
  a.body.assign(b.begin(), b.end());
}

}  // namespace

OpaqueAuth auth_sys(const AuthSys& a) {
  OpaqueAuth o;
  o.flavor = kAuthSys;
  XdrEncoder e(o.body);
  e.u32(a.stamp);
  e.string(a.machine);
  e.u32(a.uid);
  e.u32(a.gid);
  e.u32(static_cast<std::uint32_t>(a.gids.size()));
  for (auto g : a.gids) e.u32(g);
  return o;
}

std::optional<AuthSys> parse_auth_sys(const OpaqueAuth& o) {
  if (o.flavor != kAuthSys) return std::nullopt;
  XdrDecoder d(o.body);
  AuthSys a;
  a.stamp = d.u32();
  a.machine = d.string(kMaxMachineName);
  a.uid = d.u32();
  a.gid = d.u32();
  const std::uint32_t n = d.u32();
  if (n > kMaxGids) return std::nullopt;
  for (std::uint32_t i = 0; i < n; ++i) a.gids.push_back(d.u32());
  if (!d.ok() || d.remaining()) return std::nullopt;
  return a;
}

void encode(XdrEncoder& e, const CallHeader& h) {
  e.u32(h.xid);
  e.u32(kCall);
  e.u32(h.rpcvers);
  e.u32(h.prog);
  e.u32(h.vers);
  e.u32(h.proc);
  encode_auth(e, h.cred);
  encode_auth(e, h.verf);
}

void encode(XdrEncoder& e, const ReplyHeader& h) {
  e.u32(h.xid);
  e.u32(kReply);
  e.u32(h.stat);
  if (h.stat == kMsgAccepted) {
    encode_auth(e, h.verf);
    e.u32(h.accept);
    if (h.accept == kProgMismatch) {
      e.u32(h.low);
      e.u32(h.high);
    }
  } else {
    e.u32(h.reject);
    if (h.reject == kRpcMismatch) {
      e.u32(h.low);
      e.u32(h.high);
    } else {
      e.u32(h.auth);
    }
  }
}

bool decode(XdrDecoder& d, CallHeader& h) {
  h.xid = d.u32();
  if (d.u32() != kCall) return false;
  h.rpcvers = d.u32();
  h.prog = d.u32();
  h.vers = d.u32();
  h.proc = d.u32();
  decode_auth(d, h.cred);
  decode_auth(d, h.verf);
  return d.ok();
}

bool decode(XdrDecoder& d, ReplyHeader& h) {
  h.xid = d.u32();
  if (d.u32() != kReply) return false;
  const std::uint32_t stat = d.u32();
  if (stat == kMsgAccepted) {
    h.stat = kMsgAccepted;
    decode_auth(d, h.verf);
    const std::uint32_t a = d.u32();
    if (a > kSystemErr) return false;
    h.accept = static_cast<AcceptStat>(a);
    if (h.accept == kProgMismatch) {
      h.low = d.u32();
      h.high = d.u32();
    }
  } else if (stat == kMsgDenied) {
    h.stat = kMsgDenied;
    const std::uint32_t r = d.u32();
    if (r == kRpcMismatch) {
      h.reject = kRpcMismatch;
      h.low = d.u32();
      h.high = d.u32();
    } else if (r == kAuthError) {
      h.reject = kAuthError;
      h.auth = static_cast<AuthStat>(d.u32());
    } else {
      return false;
    }
  } else {
    return false;
  }
  return d.ok();
}

std::optional<std::uint32_t> peek_xid(std::span<const std::uint8_t> msg) {
  if (msg.size() < 4) return std::nullopt;
  XdrDecoder d(msg);
  return d.u32();
}

std::string to_string(const ReplyHeader& h) {
  static const char* const acc[] = {"SUCCESS",      "PROG_UNAVAIL", "PROG_MISMATCH",
                                    "PROC_UNAVAIL", "GARBAGE_ARGS", "SYSTEM_ERR"};
  if (h.stat == kMsgAccepted) return std::string("accepted: ") + acc[h.accept];
  if (h.reject == kRpcMismatch)
    return "denied: RPC_MISMATCH " + std::to_string(h.low) + ".." + std::to_string(h.high);
  return "denied: AUTH_ERROR " + std::to_string(h.auth);
}

}  // namespace roce::nfs::rpc
