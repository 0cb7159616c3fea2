/// @file
/// ONC RPC version 2 (RFC 5531): call and reply headers, AUTH_NONE and AUTH_SYS credentials.
/// The procedure's arguments or results follow the header in the same XDR stream.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/nfs/xdr.h"

namespace roce::nfs::rpc {

constexpr std::uint32_t kRpcVersion = 2;
enum MsgType : std::uint32_t { kCall = 0, kReply = 1 };
enum AuthFlavor : std::uint32_t { kAuthNone = 0, kAuthSys = 1 };
enum ReplyStat : std::uint32_t { kMsgAccepted = 0, kMsgDenied = 1 };
enum AcceptStat : std::uint32_t {
  kSuccess = 0,
  kProgUnavail = 1,
  kProgMismatch = 2,
  kProcUnavail = 3,
  kGarbageArgs = 4,
  kSystemErr = 5,
};
enum RejectStat : std::uint32_t { kRpcMismatch = 0, kAuthError = 1 };
enum AuthStat : std::uint32_t {
  kAuthOk = 0,
  kAuthBadCred = 1,
  kAuthRejectedCred = 2,
  kAuthBadVerf = 3,
  kAuthRejectedVerf = 4,
  kAuthTooWeak = 5
};

constexpr std::size_t kMaxAuthBody = 400;  ///< RFC 5531: opaque body<400>
constexpr std::size_t kMaxMachineName = 255;
constexpr std::size_t kMaxGids = 16;

/// AUTH_SYS (RFC 5531 appendix A).
struct AuthSys {
  std::uint32_t stamp = 0;
  std::string machine;
  std::uint32_t uid = 0, gid = 0;
  std::vector<std::uint32_t> gids;
  friend bool operator==(const AuthSys&, const AuthSys&) = default;
};

/// A credential or verifier: its flavor and body; AUTH_SYS bodies decoded.
struct OpaqueAuth {
  std::uint32_t flavor = kAuthNone;
  std::vector<std::uint8_t> body;
  friend bool operator==(const OpaqueAuth&, const OpaqueAuth&) = default;
};
OpaqueAuth auth_sys(const AuthSys& a);
/// The AUTH_SYS credential in `a`; nullopt when the flavor differs or the body is malformed.
std::optional<AuthSys> parse_auth_sys(const OpaqueAuth& a);

struct CallHeader {
  std::uint32_t xid = 0;
  std::uint32_t rpcvers = kRpcVersion;
  std::uint32_t prog = 0, vers = 0, proc = 0;
  OpaqueAuth cred, verf;
  friend bool operator==(const CallHeader&, const CallHeader&) = default;
};

struct ReplyHeader {
  std::uint32_t xid = 0;
  ReplyStat stat = kMsgAccepted;
  OpaqueAuth verf;                   ///< accepted
  AcceptStat accept = kSuccess;      ///< accepted
  std::uint32_t low = 0, high = 0;   ///< kProgMismatch / kRpcMismatch
  RejectStat reject = kRpcMismatch;  ///< denied
  AuthStat auth = kAuthOk;           ///< denied with kAuthError
  friend bool operator==(const ReplyHeader&, const ReplyHeader&) = default;
};

void encode(XdrEncoder& e, const CallHeader& h);
void encode(XdrEncoder& e, const ReplyHeader& h);
/// Reads a call header; false when the message is not a version-2 call or is malformed (the
/// decoder then says which: !ok() for malformed).
bool decode(XdrDecoder& d, CallHeader& h);
bool decode(XdrDecoder& d, ReplyHeader& h);

/// The XID of a message, or nullopt when shorter than four bytes.
std::optional<std::uint32_t> peek_xid(std::span<const std::uint8_t> msg);
/// "accepted: SUCCESS", "denied: AUTH_ERROR 5", ... for errors.
std::string to_string(const ReplyHeader& h);

}  // namespace roce::nfs::rpc
