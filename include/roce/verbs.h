/// @file
/// The verbs vocabulary of the public API: access flags, work requests, work completions, QP
/// attributes and the QP state machine, shaped after libibverbs (verbs.h) so that rdma-core
/// users recognise every name and value. Numeric values of statuses and opcodes match
/// libibverbs where libibverbs defines them. The engine (dataplane/engine/verbs.h) and the
/// attach layout take these types from here.
#pragma once

#include <roce/addr.h>

#include <cstdint>
#include <optional>
#include <string_view>

namespace roce::verbs {

/// Memory and QP access flags (IBV_ACCESS_*).
enum Access : std::uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
  kAccessRemoteAtomic = 1u << 3,
};

enum class QpType : std::uint8_t { kRc = 2, kUc = 3, kUd = 4 };  // IBV_QPT_* values

/// IBV_QPS_* values.
enum class QpState : std::uint8_t { kReset = 0, kInit, kRtr, kRts, kSqd, kSqe, kErr };
std::string_view to_string(QpState s);

/// Path MTU enum of IBA (1 = 256 ... 5 = 4096).
enum class Mtu : std::uint8_t { k256 = 1, k512 = 2, k1024 = 3, k2048 = 4, k4096 = 5 };
constexpr std::uint32_t mtu_bytes(Mtu m) { return 128u << static_cast<unsigned>(m); }
/// The path MTU of `bytes` (256, 512, 1024, 2048 or 4096); nullopt for anything else.
constexpr std::optional<Mtu> mtu_of_bytes(std::uint32_t bytes) {
  for (Mtu m : {Mtu::k256, Mtu::k512, Mtu::k1024, Mtu::k2048, Mtu::k4096})
    if (mtu_bytes(m) == bytes) return m;
  return std::nullopt;
}

/// Work request opcodes (IBV_WR_* values where they exist).
enum class WrOpcode : std::uint8_t {
  kWrite = 0,
  kWriteImm = 1,
  kSend = 2,
  kSendImm = 3,
  kRead = 4,
  kCmpSwap = 5,
  kFetchAdd = 6,
  kLocalInv = 7,
  kSendInv = 9,
  kRegMr = 16,  ///< fast-register a memory region (kernel IB_WR_REG_MR)
};

enum SendFlags : std::uint32_t {
  kSendFence = 1u << 0,
  kSendSignaled = 1u << 1,
  kSendSolicited = 1u << 2,
  kSendInline = 1u << 3,
};

/// IBV_WC_* status values.
enum class WcStatus : std::uint8_t {
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kBadRespErr = 7,
  kLocAccessErr = 8,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kFatalErr = 19,
  kGeneralErr = 21,
};
std::string_view to_string(WcStatus s);

/// IBV_WC_* opcode values.
enum class WcOpcode : std::uint8_t {
  kSend = 0,
  kRdmaWrite = 1,
  kRdmaRead = 2,
  kCompSwap = 3,
  kFetchAdd = 4,
  kLocalInv = 6,
  kRegMr = 9,  ///< (kernel IB_WC_REG_MR)
  kRecv = 128,
  kRecvRdmaWithImm = 129,
};
/// The completion opcode of a work request's opcode (IBV_WC_* of IBV_WR_*).
WcOpcode wc_opcode(WrOpcode op);

enum WcFlags : std::uint32_t {
  kWcGrh = 1u << 0,
  kWcWithImm = 1u << 1,
  kWcWithInv = 1u << 3,
  /// A message into a multi-message buffer that stays posted for more (LNet's QUEUED flag):
  /// the application must not reuse the buffer until a completion without it.
  kWcStillQueued = 1u << 16,
  /// The message's last packet had the Solicited Event bit (BTH SE, IBA 9.2.4): a CQ armed
  /// for solicited completions only (ibv_req_notify_cq(cq, 1)) wakes for it.
  kWcSolicited = 1u << 17,
};

struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

/// Where a UD datagram goes (an address handle), or the RC/UC path of a QP.
struct AddressVector {
  Ipv6Addr dgid;  ///< destination GID: ::ffff:a.b.c.d for IPv4
  MacAddr dmac;   ///< resolved next-hop MAC
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
  std::uint32_t flow_label = 0;
  std::uint16_t udp_sport = 0;  ///< 0: derived from the QPNs as Linux does
};

struct SendWr {
  std::uint64_t wr_id = 0;
  const SendWr* next = nullptr;
  const Sge* sg_list = nullptr;
  std::uint32_t num_sge = 0;
  WrOpcode opcode = WrOpcode::kSend;
  std::uint32_t send_flags = 0;
  std::uint32_t imm_data = 0;         ///< as a number; sent big-endian
  std::uint32_t invalidate_rkey = 0;  ///< SEND with invalidate
  struct {
    std::uint64_t remote_addr = 0;
    std::uint32_t rkey = 0;
  } rdma;
  struct {
    std::uint64_t remote_addr = 0;
    std::uint32_t rkey = 0;
    std::uint64_t compare_add = 0;  ///< compare (CmpSwap) or addend (FetchAdd)
    std::uint64_t swap = 0;
  } atomic;
  struct {
    const AddressVector* ah = nullptr;
    std::uint32_t remote_qpn = 0;
    std::uint32_t remote_qkey = 0;
  } ud;
  struct {
    std::uint32_t mr_key = 0;          ///< a key of the MR to register (any variant of it)
    std::uint8_t new_key_variant = 0;  ///< low 8 bits of the key after registration
    std::uint64_t addr = 0;            ///< I/O virtual address of the region
    std::uint64_t length = 0;
    std::uint32_t access = 0;
    std::uint64_t host = 0;  ///< where the engine reaches `addr`; 0: at `addr` itself
  } reg;
};

struct RecvWr {
  std::uint64_t wr_id = 0;
  const RecvWr* next = nullptr;
  const Sge* sg_list = nullptr;
  std::uint32_t num_sge = 0;
  /// Non-zero: a multi-message buffer (recv_queue.h) that stays posted after a message while
  /// at least this many bytes remain; 0: one message, as in verbs.
  std::uint32_t min_free = 0;
  std::uint32_t max_msgs = 0;  ///< multi-message: at most this many messages (0: no limit)
};

struct Wc {
  std::uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  std::uint32_t byte_len = 0;
  std::uint32_t imm_data = 0;
  std::uint32_t invalidated_rkey = 0;
  std::uint32_t qp_num = 0;
  std::uint32_t src_qp = 0;
  std::uint32_t wc_flags = 0;
  std::uint32_t offset = 0;  ///< receive: where in the WQE's buffer the message starts
};

struct QpCap {
  std::uint32_t max_send_wr = 128;
  std::uint32_t max_recv_wr = 128;
  std::uint32_t max_send_sge = 4;
  std::uint32_t max_recv_sge = 4;
  std::uint32_t max_inline_data = 64;
};

/// IBV_QP_* attribute mask bits.
enum QpAttrMask : std::uint32_t {
  kQpState = 1u << 0,
  kQpAccessFlags = 1u << 3,
  kQpPkeyIndex = 1u << 4,
  kQpPort = 1u << 5,
  kQpQkey = 1u << 6,
  kQpAv = 1u << 7,
  kQpPathMtu = 1u << 8,
  kQpTimeout = 1u << 9,
  kQpRetryCnt = 1u << 10,
  kQpRnrRetry = 1u << 11,
  kQpRqPsn = 1u << 12,
  kQpMaxQpRdAtomic = 1u << 13,
  kQpMinRnrTimer = 1u << 15,
  kQpSqPsn = 1u << 16,
  kQpMaxDestRdAtomic = 1u << 17,
  kQpDestQpn = 1u << 20,
};

struct QpAttr {
  QpState qp_state = QpState::kReset;
  std::uint32_t qp_access_flags = 0;
  std::uint16_t pkey_index = 0;
  std::uint8_t port_num = 1;
  std::uint32_t qkey = 0;
  AddressVector ah;
  Mtu path_mtu = Mtu::k1024;
  std::uint8_t timeout = 14;  ///< 4.096 us x 2^timeout; 0 = infinite
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;  ///< 7 = infinite
  std::uint32_t rq_psn = 0;
  std::uint32_t sq_psn = 0;
  std::uint8_t max_rd_atomic = 1;
  std::uint8_t max_dest_rd_atomic = 1;
  std::uint8_t min_rnr_timer = 12;
  std::uint32_t dest_qp_num = 0;
};

/// Asynchronous event types (IBV_EVENT_* values).
enum class AsyncEventType : std::uint8_t {
  kCqErr = 0,              ///< IBV_EVENT_CQ_ERR: the CQ overran and stopped
  kQpFatal = 1,            ///< IBV_EVENT_QP_FATAL: the QP went to the error state
  kQpReqErr = 2,           ///< IBV_EVENT_QP_REQ_ERR: the peer broke the protocol (NAK sent)
  kQpAccessErr = 3,        ///< IBV_EVENT_QP_ACCESS_ERR: a remote access the keys did not grant
  kQpLastWqeReached = 16,  ///< IBV_EVENT_QP_LAST_WQE_REACHED (SRQ)
};
std::string_view to_string(AsyncEventType t);

struct AsyncEvent {
  AsyncEventType type = AsyncEventType::kQpFatal;
  std::uint32_t qp_num = 0;  ///< the QP's number (QP events)
  const void* cq = nullptr;  ///< the Cq (kCqErr)
};

/// Errno-style results of the verbs calls (0 = success), as libibverbs returns them.
enum VerbsErr : int {
  kOk = 0,
  kErrInval = 22,  ///< EINVAL
  kErrNoMem = 12,  ///< ENOMEM
  kErrBusy = 16,   ///< EBUSY (e.g. deregistering an MR that is still in use)
};

}  // namespace roce::verbs
