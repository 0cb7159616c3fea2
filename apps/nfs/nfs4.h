/// @file
/// NFS version 4.1 (RFC 8881): the numbers of its operations, errors and attributes, and the few
/// XDR shapes every operation shares (bitmap4, nfstime4, stateid4). Pure: no file system.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/nfs/xdr.h"

namespace roce::nfs::v4 {

constexpr std::uint32_t kNfsVersion = 4;
constexpr std::uint32_t kMinorVersion = 1;
enum Proc : std::uint32_t { kNull = 0, kCompound = 1 };

constexpr std::size_t kFhSize = 128;         ///< NFS4_FHSIZE
constexpr std::size_t kOpaqueLimit = 1024;   ///< NFS4_OPAQUE_LIMIT
constexpr std::size_t kMaxName = 255;        ///< what the server's names may be
constexpr std::size_t kMaxNameWire = 4096;   ///< longer is BADXDR, shorter NAMETOOLONG
constexpr std::size_t kMaxTag = 1024;        ///< a COMPOUND's tag
constexpr std::size_t kMaxBitmapWords = 8;   ///< more is BADXDR
constexpr std::size_t kMaxAttrVals = 65536;  ///< an fattr4's attr_vals

enum Op : std::uint32_t {
  kAccess = 3,
  kClose = 4,
  kCommit = 5,
  kCreate = 6,
  kDelegpurge = 7,
  kDelegreturn = 8,
  kGetattr = 9,
  kGetfh = 10,
  kLink = 11,
  kLock = 12,
  kLockt = 13,
  kLocku = 14,
  kLookup = 15,
  kLookupp = 16,
  kNverify = 17,
  kOpen = 18,
  kOpenattr = 19,
  kOpenConfirm = 20,
  kOpenDowngrade = 21,
  kPutfh = 22,
  kPutpubfh = 23,
  kPutrootfh = 24,
  kRead = 25,
  kReaddir = 26,
  kReadlink = 27,
  kRemove = 28,
  kRename = 29,
  kRenew = 30,
  kRestorefh = 31,
  kSavefh = 32,
  kSecinfo = 33,
  kSetattr = 34,
  kSetclientid = 35,
  kSetclientidConfirm = 36,
  kVerify = 37,
  kWrite = 38,
  kReleaseLockowner = 39,
  kBackchannelCtl = 40,
  kBindConnToSession = 41,
  kExchangeId = 42,
  kCreateSession = 43,
  kDestroySession = 44,
  kFreeStateid = 45,
  kGetDirDelegation = 46,
  kGetdeviceinfo = 47,
  kGetdevicelist = 48,
  kLayoutcommit = 49,
  kLayoutget = 50,
  kLayoutreturn = 51,
  kSecinfoNoName = 52,
  kSequence = 53,
  kSetSsv = 54,
  kTestStateid = 55,
  kWantDelegation = 56,
  kDestroyClientid = 57,
  kReclaimComplete = 58,
  kIllegal = 10044,
};

enum Status : std::uint32_t {
  kOk = 0,
  kErrPerm = 1,
  kErrNoent = 2,
  kErrIo = 5,
  kErrNxio = 6,
  kErrAccess = 13,
  kErrExist = 17,
  kErrXdev = 18,
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
  kErrBadhandle = 10001,
  kErrBadCookie = 10003,
  kErrNotsupp = 10004,
  kErrToosmall = 10005,
  kErrServerfault = 10006,
  kErrBadtype = 10007,
  kErrDelay = 10008,
  kErrSame = 10009,
  kErrDenied = 10010,
  kErrExpired = 10011,
  kErrLocked = 10012,
  kErrGrace = 10013,
  kErrShareDenied = 10015,
  kErrWrongsec = 10016,
  kErrClidInuse = 10017,
  kErrResource = 10018,
  kErrNofilehandle = 10020,
  kErrMinorVersMismatch = 10021,
  kErrStaleClientid = 10022,
  kErrStaleStateid = 10023,
  kErrOldStateid = 10024,
  kErrBadStateid = 10025,
  kErrBadSeqid = 10026,
  kErrNotSame = 10027,
  kErrLockRange = 10028,
  kErrSymlink = 10029,
  kErrRestorefh = 10030,
  kErrAttrnotsupp = 10032,
  kErrNoGrace = 10033,
  kErrBadxdr = 10036,
  kErrLocksHeld = 10037,
  kErrOpenmode = 10038,
  kErrBadowner = 10039,
  kErrBadchar = 10040,
  kErrBadname = 10041,
  kErrBadRange = 10042,
  kErrLockNotsupp = 10043,
  kErrOpIllegal = 10044,
  kErrDeadlock = 10045,
  kErrFileOpen = 10046,
  kErrBadsession = 10052,
  kErrBadslot = 10053,
  kErrCompleteAlready = 10054,
  kErrConnNotBoundToSession = 10055,
  kErrSeqMisordered = 10063,
  kErrSequencePos = 10064,
  kErrReqTooBig = 10065,
  kErrRepTooBig = 10066,
  kErrRepTooBigToCache = 10067,
  kErrRetryUncachedRep = 10068,
  kErrTooManyOps = 10070,
  kErrOpNotInSession = 10071,
  kErrClientidBusy = 10074,
  kErrSeqFalseRetry = 10076,
  kErrBadHighSlot = 10077,
  kErrDeadsession = 10078,
  kErrEncrAlgUnsupp = 10079,
  kErrNotOnlyOp = 10081,
  kErrWrongCred = 10082,
  kErrWrongType = 10083,
  kErrDelegRevoked = 10087,
};

/// fattr4's attribute numbers (RFC 8881 5.6, 5.7, 5.8).
enum Attr : std::uint32_t {
  kSupportedAttrs = 0,
  kType = 1,
  kFhExpireType = 2,
  kChange = 3,
  kSize = 4,
  kLinkSupport = 5,
  kSymlinkSupport = 6,
  kNamedAttr = 7,
  kFsid = 8,
  kUniqueHandles = 9,
  kLeaseTime = 10,
  kRdattrError = 11,
  kAclSupport = 13,
  kCansettime = 15,
  kCaseInsensitive = 16,
  kCasePreserving = 17,
  kChownRestricted = 18,
  kFilehandle = 19,
  kFileid = 20,
  kFilesAvail = 21,
  kFilesFree = 22,
  kFilesTotal = 23,
  kHomogeneous = 26,
  kMaxfilesize = 27,
  kMaxlink = 28,
  kMaxname = 29,
  kMaxread = 30,
  kMaxwrite = 31,
  kMode = 33,
  kNoTrunc = 34,
  kNumlinks = 35,
  kOwner = 36,
  kOwnerGroup = 37,
  kRawdev = 41,
  kSpaceAvail = 42,
  kSpaceFree = 43,
  kSpaceTotal = 44,
  kSpaceUsed = 45,
  kTimeAccess = 47,
  kTimeAccessSet = 48,
  kTimeDelta = 51,
  kTimeMetadata = 52,
  kTimeModify = 53,
  kTimeModifySet = 54,
  kMountedOnFileid = 55,
  kSuppattrExclcreat = 75,
};

enum FileType : std::uint32_t {
  kReg = 1,
  kDir = 2,
  kBlk = 3,
  kChr = 4,
  kLnk = 5,
  kSock = 6,
  kFifo = 7
};

// EXCHANGE_ID's flags, CREATE_SESSION's, SEQUENCE's status flags.
constexpr std::uint32_t kExchgidSuppMovedRefer = 0x1, kExchgidSuppMovedMigr = 0x2,
                        kExchgidSuppFenceOps = 0x4;
constexpr std::uint32_t kExchgidBindPrincStateid = 0x100;
constexpr std::uint32_t kExchgidUseNonPnfs = 0x10000, kExchgidMaskPnfs = 0x70000;
constexpr std::uint32_t kExchgidUpdConfirmedRecA = 0x40000000, kExchgidConfirmedR = 0x80000000;
constexpr std::uint32_t kSessionPersist = 0x1, kSessionConnBackChan = 0x2, kSessionConnRdma = 0x4;
// SEQUENCE's sr_status_flags.
constexpr std::uint32_t kSeqCbPathDown = 0x1, kSeqRecallableStateRevoked = 0x40,
                        kSeqCbPathDownSession = 0x200;
// BIND_CONN_TO_SESSION's directions asked (CDFC4) and granted (CDFS4).
constexpr std::uint32_t kCdfc4Fore = 1, kCdfc4Back = 2, kCdfc4ForeOrBoth = 3, kCdfc4BackOrBoth = 7;
constexpr std::uint32_t kCdfs4Fore = 1, kCdfs4Back = 2, kCdfs4Both = 3;
// The callback program (its number is the client's, CREATE_SESSION's csa_cb_program): version
// 1 as every implementation sends it (RFC 8881's XDR), procedure CB_COMPOUND, two operations.
constexpr std::uint32_t kCbVersion = 1, kCbCompound = 1;
enum CbOp : std::uint32_t { kCbRecall = 4, kCbSequence = 11, kCbNotifyLock = 13 };
enum DelegType : std::uint32_t { kDelegNone = 0, kDelegRead = 1 };
constexpr std::uint32_t kShareWantNoDeleg = 0x400, kShareWantMask = 0xff00;

enum StateProtect : std::uint32_t { kSp4None = 0, kSp4MachCred = 1, kSp4Ssv = 2 };

// OPEN.
enum OpenType : std::uint32_t { kNoCreate = 0, kCreate4 = 1 };
enum CreateMode : std::uint32_t { kUnchecked = 0, kGuarded = 1, kExclusive4 = 2, kExclusive41 = 3 };
enum Claim : std::uint32_t {
  kClaimNull = 0,
  kClaimPrevious = 1,
  kClaimDelegateCur = 2,
  kClaimDelegatePrev = 3,
  kClaimFh = 4,
  kClaimDelegCurFh = 5,
  kClaimDelegPrevFh = 6
};
constexpr std::uint32_t kShareAccessRead = 1, kShareAccessWrite = 2, kShareAccessBoth = 3;
constexpr std::uint32_t kOpenResultLocktypePosix = 4;
constexpr std::uint32_t kOpenResultMayNotifyLock = 0x20;
enum Stable : std::uint32_t { kUnstable = 0, kDataSync = 1, kFileSync = 2 };
enum LockType : std::uint32_t { kReadLt = 1, kWriteLt = 2, kReadwLt = 3, kWritewLt = 4 };
constexpr std::uint32_t kAccessRead = 1, kAccessLookup = 2, kAccessModify = 4, kAccessExtend = 8,
                        kAccessDelete = 0x10, kAccessExecute = 0x20;

/// bitmap4: words of 32 attribute bits, word 0 first.
struct Bitmap {
  std::vector<std::uint32_t> w;
  bool has(std::uint32_t bit) const {
    return bit / 32 < w.size() && (w[bit / 32] >> (bit % 32)) & 1;
  }
  void set(std::uint32_t bit) {
    if (w.size() <= bit / 32) w.resize(bit / 32 + 1);
    w[bit / 32] |= 1u << (bit % 32);
  }
  /// The highest bit set plus one (0 when none).
  std::uint32_t end() const;
};
void encode(XdrEncoder& e, const Bitmap& b);
Bitmap decode_bitmap(XdrDecoder& d);

/// stateid4: a sequence number and 12 bytes naming the state.
struct Stateid {
  std::uint32_t seqid = 0;
  std::array<std::uint8_t, 12> other{};
  friend bool operator==(const Stateid&, const Stateid&) = default;
  bool anonymous() const;  ///< all zeros
  bool bypass() const;     ///< all ones
  bool current() const;    ///< seqid 1, other all zeros: the COMPOUND's current stateid
};
void encode(XdrEncoder& e, const Stateid& s);
Stateid decode_stateid(XdrDecoder& d);

const char* to_string(Status s);
const char* op_name(std::uint32_t op);

/// An on/off option's value as nfs.conf and exports habits write it: on, yes, 1, true (any
/// case) or off, no, 0, false; nullopt for anything else.
std::optional<bool> parse_switch(std::string_view v);

}  // namespace roce::nfs::v4
