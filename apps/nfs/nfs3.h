/// @file
/// NFS version 3 (RFC 1813) and its MOUNT protocol: the XDR of the arguments and results the
/// client uses (and a server answers). Pure: encoders append to an XdrEncoder, decoders read from
/// an XdrDecoder and leave !ok() on malformed input.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/nfs/xdr.h"

namespace roce::nfs::v3 {

constexpr std::uint32_t kNfsProgram = 100003, kNfsVersion = 3;
constexpr std::uint32_t kMountProgram = 100005, kMountVersion = 3;
constexpr std::size_t kFhSize = 64;    ///< NFS3_FHSIZE
constexpr std::size_t kMaxName = 255;  ///< what the server's names may be (PATHCONF)
constexpr std::size_t kMaxNameWire =
    4096;  ///< a longer name is GARBAGE_ARGS, a shorter NAMETOOLONG
constexpr std::size_t kMaxSymlinkData = 4095;  ///< a symbolic link's target (PATH_MAX less the NUL)
constexpr std::size_t kMaxPath = 1024;         ///< MNTPATHLEN

enum Proc : std::uint32_t {
  kNull = 0,
  kGetattr = 1,
  kSetattr = 2,
  kLookup = 3,
  kAccess = 4,
  kReadlink = 5,
  kRead = 6,
  kWrite = 7,
  kCreate = 8,
  kMkdir = 9,
  kSymlink = 10,
  kMknod = 11,
  kRemove = 12,
  kRmdir = 13,
  kRename = 14,
  kLink = 15,
  kReaddir = 16,
  kReaddirplus = 17,
  kFsstat = 18,
  kFsinfo = 19,
  kPathconf = 20,
  kCommit = 21,
};
enum MountProc : std::uint32_t {
  kMountNull = 0,
  kMnt = 1,
  kDump = 2,
  kUmnt = 3,
  kUmntAll = 4,
  kExport = 5
};

enum Status : std::uint32_t {
  kOk = 0,
  kErrPerm = 1,
  kErrNoent = 2,
  kErrIo = 5,
  kErrNxio = 6,
  kErrAcces = 13,
  kErrExist = 17,
  kErrXdev = 18,
  kErrNodev = 19,
  kErrNotdir = 20,
  kErrIsdir = 21,
  kErrInval = 22,
  kErrFbig = 27,
  kErrNospc = 28,
  kErrRofs = 30,
  kErrMlink = 31,
  kErrNametoolong = 63,
  kErrNotempty = 66,
  kErrDquot = 69,
  kErrStale = 70,
  kErrRemote = 71,
  kErrBadhandle = 10001,
  kErrNotSync = 10002,
  kErrBadCookie = 10003,
  kErrNotsupp = 10004,
  kErrToosmall = 10005,
  kErrServerfault = 10006,
  kErrBadtype = 10007,
  kErrJukebox = 10008,
};
const char* to_string(Status s);

enum FileType : std::uint32_t {
  kReg = 1,
  kDir = 2,
  kBlk = 3,
  kChr = 4,
  kLnk = 5,
  kSock = 6,
  kFifo = 7
};
enum StableHow : std::uint32_t { kUnstable = 0, kDataSync = 1, kFileSync = 2 };
enum CreateMode : std::uint32_t { kUnchecked = 0, kGuarded = 1, kExclusive = 2 };

struct Fh {
  std::vector<std::uint8_t> data;
  friend bool operator==(const Fh&, const Fh&) = default;
  friend auto operator<=>(const Fh&, const Fh&) = default;
};
struct Time {
  std::uint32_t sec = 0, nsec = 0;
  friend bool operator==(const Time&, const Time&) = default;
};
struct Fattr {
  std::uint32_t type = kReg, mode = 0, nlink = 0, uid = 0, gid = 0;
  std::uint64_t size = 0, used = 0;
  std::uint32_t rdev1 = 0, rdev2 = 0;
  std::uint64_t fsid = 0, fileid = 0;
  Time atime, mtime, ctime;
  friend bool operator==(const Fattr&, const Fattr&) = default;
};
/// sattr3: what SETATTR, CREATE and MKDIR set (nullopt: leave).
struct Sattr {
  std::optional<std::uint32_t> mode, uid, gid;
  std::optional<std::uint64_t> size;
  bool atime_now = false, mtime_now = false;  ///< SET_TO_SERVER_TIME (or the client's, below)
  std::optional<Time> atime, mtime;           ///< SET_TO_CLIENT_TIME
};
using Verf = std::array<std::uint8_t, 8>;

void encode(XdrEncoder& e, const Fh& fh);
Fh decode_fh(XdrDecoder& d);
void encode(XdrEncoder& e, const Fattr& a);
Fattr decode_fattr(XdrDecoder& d);
void encode(XdrEncoder& e, const Sattr& s);
Sattr decode_sattr(XdrDecoder& d);
/// post_op_attr: a boolean, then the attributes when true.
void encode_post_op(XdrEncoder& e, const std::optional<Fattr>& a);
std::optional<Fattr> decode_post_op(XdrDecoder& d);
/// wcc_data: pre_op_attr (size, mtime, ctime) and post_op_attr; the client skips the former.
void encode_wcc(XdrEncoder& e, const std::optional<Fattr>& before,
                const std::optional<Fattr>& after);
std::optional<Fattr> decode_wcc(XdrDecoder& d);

// ---- results the client reads (status first; the rest only on kOk unless noted) ----
struct LookupRes {
  Status status = kOk;
  Fh fh;
  std::optional<Fattr> attr;
};
LookupRes decode_lookup(XdrDecoder& d);

/// READ's result up to the data: status, attributes, count, eof and the data's length. The
/// data follows inline, or went to the write chunk (the RPC-over-RDMA reduced data item).
struct ReadRes {
  Status status = kOk;
  std::optional<Fattr> attr;
  std::uint32_t count = 0;
  bool eof = false;
  std::uint32_t data_len = 0;
};
ReadRes decode_read_head(XdrDecoder& d);

struct WriteRes {
  Status status = kOk;
  std::optional<Fattr> attr;
  std::uint32_t count = 0;
  StableHow committed = kUnstable;
  Verf verf{};
};
WriteRes decode_write(XdrDecoder& d);

struct CreateRes {
  Status status = kOk;
  std::optional<Fh> fh;
  std::optional<Fattr> attr;
};
CreateRes decode_create(XdrDecoder& d);

struct DirEntry {
  std::uint64_t fileid = 0, cookie = 0;
  std::string name;
  std::optional<Fattr> attr;
  std::optional<Fh> fh;
};
struct ReaddirplusRes {
  Status status = kOk;
  Verf verf{};
  std::vector<DirEntry> entries;
  bool eof = false;
};
ReaddirplusRes decode_readdirplus(XdrDecoder& d);

struct FsinfoRes {
  Status status = kOk;
  std::uint32_t rtmax = 0, rtpref = 0, rtmult = 0, wtmax = 0, wtpref = 0, wtmult = 0, dtpref = 0;
  std::uint64_t maxfilesize = 0;
  Time time_delta;
  std::uint32_t properties = 0;
};
FsinfoRes decode_fsinfo(XdrDecoder& d);
void encode(XdrEncoder& e, const FsinfoRes& r);

struct MountRes {
  std::uint32_t status = 0;  ///< mountstat3: 0 OK, else an errno-like code
  Fh fh;
  std::vector<std::uint32_t> flavors;
};
MountRes decode_mount(XdrDecoder& d);

/// The status for a file system call's errno: EMFILE, ENFILE and ENOMEM are JUKEBOX (the client
/// tries again later), anything unknown IO.
Status from_errno(int e);

}  // namespace roce::nfs::v3
