/// @file
/// The attachment protocol between a client process (client/, libroce) and roced
/// (controlplane/attach/attach_server): control messages on a Unix SOCK_SEQPACKET socket (one
/// fixed-size request, one fixed-size reply, file descriptors passed with SCM_RIGHTS) and the
/// entries of the shared-memory queues (shm_queue.h) that carry the data path.
///
/// Both sides are built from this one header; kVersion changes whenever a layout does, and the
/// hello exchange refuses a mismatch.
#pragma once

#include <roce/verbs.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "controlplane/attach/shm_queue.h"

namespace roce::attach {

// 3: RecvEntry min_free/max_msgs; 4: rdma_cm; 5: a CQ's eventfd on demand (kCqNotify), the
// device's limits in the hello reply; 6: RegRegionReq::file_offset (a region anywhere in a memfd);
// 7: rdma_cm's UDP port space (SIDR: kCmSidr*, CmReq::qpn/qkey, CmEventEntry::sidr_*) and
// kCmUnlisten; 8: kReregMr (ibv_rereg_mr keeping the keys)
inline constexpr std::uint32_t kVersion = 8;
/// The oldest client version roced still answers: every message and ring of it has this
/// version's layout (8 only added a request). Raise it with any change of a layout. A client
/// of this library meeting an older roced says hello again with that roced's version, down to
/// this one, and does without what came later (Context::rereg_mr: EOPNOTSUPP).
inline constexpr std::uint32_t kOldestVersion = 7;
inline constexpr std::uint32_t kMaxSge = 4;  ///< SGEs per work request in a queue entry

enum class Op : std::uint32_t {
  kHello = 1,  ///< reply passes the client's event ring (memfd) and its eventfd
  kAllocPd,
  kDeallocPd,
  kRegRegion,  ///< a memfd of the client (fd passed), mapped by roced
  kDeregRegion,
  kRegMr,
  kDeregMr,
  kCreateCq,  ///< reply passes the completion ring's memfd
  kDestroyCq,
  kCreateQp,  ///< reply passes the memfd of the QP's send and receive rings
  kDestroyQp,
  kModifyQp,
  kCreateSrq,  ///< reply passes the memfd of the SRQ's receive ring
  kDestroySrq,
  // rdma_cm (port space TCP, IPv4) on the CM of the client's engine (cm_hub.h):
  kCmOpen,        ///< reply passes the CM event ring's memfd and its eventfd
  kCmListen,      ///< CmReq::port; EADDRINUSE: another client or a hosted service has it
  kCmConnect,     ///< CmReq qp, dst, port, parameters; reply: handle = the connection's id
  kCmAccept,      ///< CmReq id, qp, parameters
  kCmReject,      ///< CmReq id, private data
  kCmDisconnect,  ///< CmReq id
  /// handle = a CQ: reply passes its eventfd, made on the first request (a CQ nobody waits on
  /// costs roced no descriptor; one waited on counts against quotas.max_fds)
  kCqNotify,
  kCmRefuse,  ///< CmReq id: REJ 3 "no resources" to a connect request (Context::cm_refuse)
  kCmNotify,  ///< CmReq id: COMM_EST, data before the RTU (Context::cm_notify, rdma_notify)
  /// CmReq dst: whether the port's ARP cache has it (reply handle 1, else 0); request handle 1:
  /// ARP for it when not (Context::neighbour). Never waits. When found, the client's lane
  /// keeps the MAC for its UD sends by GID (SendEntry::ah).
  kNeighbour,
  // rdma_cm's UDP port space (UD ids, SIDR: IBA 12.11) and the end of a listen:
  kCmSidrListen,   ///< CmReq::port; EADDRINUSE as kCmListen
  kCmSidrResolve,  ///< CmReq dst, port, private data (<= 180 bytes); reply: handle = the id
  kCmSidrAccept,   ///< CmReq id, qpn (one of the client's UD QPs), qkey, private data
  kCmSidrReject,   ///< CmReq id
  kCmUnlisten,     ///< CmReq port, udp: the client's own listen only (ENOENT otherwise)
  /// handle = the MR; RegMrReq: its new PD, region, offset, length, IOVA and access (the
  /// whole of them, the unchanged ones too). The MR keeps its key (reply: key, iova). Version 8.
  kReregMr,
};

// ---- control messages ----

struct HelloReq {
  std::uint32_t version = kVersion;
  char port[32] = {};  ///< roced port name; empty: the first port
};
struct HelloRep {
  std::uint32_t version = kVersion;
  std::uint32_t client_id = 0;
  std::uint32_t lcore = 0;  ///< the lcore that owns this client's QPs
  MacAddr mac;
  Ipv4Addr ipv4;
  Ipv6Addr gid;  ///< ::ffff:ipv4
  verbs::Mtu max_mtu = verbs::Mtu::k1024;
  char port[32] = {};
  std::uint32_t max_qps = 0, max_mrs = 0, max_cqs = 0;
  std::uint64_t max_memory = 0;
  std::uint32_t event_slots = 0;  ///< the asynchronous event ring (Reply::bytes: its memfd)
  // The rest of the client's limits (Context::query_device, ibv_device_attr's names):
  std::uint32_t max_pds = 0, max_srqs = 0;
  std::uint32_t max_qp_wr = 0, max_srq_wr = 0, max_sge = 0;
  std::uint32_t max_cqe = 0;  ///< the quota's and the engine's CQ depth, the lower
  std::uint32_t max_inline_data = 0;
};
struct RegRegionReq {
  std::uint64_t length = 0;
  std::uint64_t client_addr = 0;  ///< where the client mapped it (the default IOVA of its MRs)
  /// Where in the memfd the region starts (page aligned): several regions may share one memfd
  /// (verbs/memory keeps a program's adopted pages in one, at file offset = address).
  std::uint64_t file_offset = 0;
};
struct RegMrReq {
  std::uint32_t pd = 0;
  std::uint32_t region = 0;
  std::uint64_t offset = 0;  ///< into the region
  std::uint64_t length = 0;
  std::uint64_t iova = 0;  ///< the address peers (and the client's SGEs) use for byte 0
  std::uint32_t access = 0;
};
struct CreateCqReq {
  std::uint32_t depth = 0;
};
struct CreateQpReq {
  std::uint32_t pd = 0;
  verbs::QpType type = verbs::QpType::kRc;
  std::uint32_t send_cq = 0, recv_cq = 0;
  std::uint32_t srq = 0;  ///< 0: none
  std::uint8_t sq_sig_all = 0;
  verbs::QpCap cap;
};
struct ModifyQpReq {
  std::uint32_t qp = 0;
  std::uint32_t mask = 0;
  verbs::QpAttr attr;
};
struct CreateSrqReq {
  std::uint32_t pd = 0;
  std::uint32_t max_wr = 0;
  std::uint32_t max_sge = 0;
};

/// Bytes of private data a CM message carries for the application (REP's 196 is the most).
inline constexpr std::size_t kCmPrivateMax = 196;

struct CmReq {
  std::uint32_t qp = 0;  ///< connect, accept: the QP's handle
  std::uint32_t id = 0;  ///< accept, reject, disconnect: the connection's id
  Ipv4Addr dst;          ///< connect
  std::uint16_t port = 0;
  std::uint8_t responder_resources = 1, initiator_depth = 1, rnr_retry = 7;
  std::uint8_t private_len = 0;
  std::uint8_t private_data[kCmPrivateMax] = {};
  std::uint8_t udp = 0;  ///< unlisten: of the UDP port space (kCmSidrListen's)
  // SIDR accept's words carry connect's and accept's ECE (CmConnParam::ece_*): a client that
  // does not know them sends 0 (no ECE), a roced that does not ignores them.
  union {
    std::uint32_t qpn = 0;     ///< SIDR accept: the UD QP the peer is to send to
    std::uint32_t ece_vendor;  ///< connect, accept
  };
  union {
    std::uint32_t qkey = 0;     ///< SIDR accept: its Q_Key
    std::uint32_t ece_options;  ///< connect, accept
  };
};

struct Request {
  Op op = Op::kHello;
  std::uint32_t seq = 0;
  std::uint32_t handle = 0;  ///< the resource a destroy/dealloc/dereg names
  union {
    HelloReq hello;
    RegRegionReq region;
    RegMrReq mr;
    CreateCqReq cq;
    CreateQpReq qp;
    ModifyQpReq modify;
    CreateSrqReq srq;
    CmReq cm;
  };
  /// Every byte zero (padding and the union's unused tail included), then a hello.
  Request() {
    std::memset(static_cast<void*>(this), 0, sizeof *this);
    new (&hello) HelloReq();
  }
};

struct Reply {
  /// The request's; 0 (never a request's) when roced turns the connection away before or
  /// instead of an answer (max_clients, max_clients_per_uid, out of descriptors, no hello in
  /// time): `err` says why, and the socket closes.
  std::uint32_t seq = 0;
  std::int32_t err = 0;  ///< 0 or an errno value (EINVAL, ENOMEM, EDQUOT, EBUSY, ...)
  std::uint32_t handle = 0;
  std::uint32_t key = 0;      ///< MR: lkey == rkey; QP: its QPN
  std::uint64_t iova = 0;     ///< MR: the address peers use for its first byte
  std::uint32_t slots = 0;    ///< CQ ring; QP send ring; SRQ ring
  std::uint32_t slots2 = 0;   ///< QP receive ring
  std::uint64_t bytes = 0;    ///< size of the memfd passed
  std::uint64_t offset2 = 0;  ///< QP: where the receive ring starts in it
  union {
    HelloRep hello;
  };
  Reply() {
    std::memset(static_cast<void*>(this), 0, sizeof *this);
    new (&hello) HelloRep();
  }
};
static_assert(std::is_trivially_copyable_v<Request> && std::is_trivially_copyable_v<Reply>);

// ---- queue entries (shared memory) ----

/// A send work request as it travels client -> lcore: verbs::SendWr with its SGEs inline and
/// no pointers. Addresses are the client's (IOVAs of its MRs).
struct SendEntry {
  std::uint64_t wr_id = 0;
  verbs::WrOpcode opcode = verbs::WrOpcode::kSend;
  std::uint8_t num_sge = 0;
  std::uint32_t send_flags = 0;
  std::uint32_t imm_data = 0;
  std::uint32_t invalidate_rkey = 0;
  std::uint64_t remote_addr = 0;  ///< RDMA and atomics
  std::uint32_t rkey = 0;
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  std::uint32_t remote_qpn = 0;  ///< UD
  std::uint32_t remote_qkey = 0;
  /// UD. A zero MAC: the one the client's lane learned when a kNeighbour found it (else the
  /// request is refused).
  verbs::AddressVector ah;
  verbs::Sge sge[kMaxSge];
};

/// A receive work request client -> lcore.
struct RecvEntry {
  std::uint64_t wr_id = 0;
  std::uint32_t num_sge = 0;
  std::uint32_t min_free = 0;  ///< multi-message receive buffer (verbs::RecvWr)
  std::uint32_t max_msgs = 0;
  verbs::Sge sge[kMaxSge];
};

/// A completion lcore -> client: the engine's work completion as it is.
using CqEntry = verbs::Wc;

/// An asynchronous event lcore -> client (ibv_async_event): a QP's by its number, a CQ's by
/// the client's handle.
struct EventEntry {
  verbs::AsyncEventType type = verbs::AsyncEventType::kQpFatal;
  std::uint32_t qp_num = 0;
  std::uint32_t cq = 0;
};

/// A CM event lcore -> client (rdma_cm_event). `type` is client::CmEventType's value.
struct CmEventEntry {
  std::uint8_t type = 0;
  std::uint8_t remote = 0;                                    ///< disconnected: the peer ended it
  std::uint8_t responder_resources = 0, initiator_depth = 0;  ///< connect request: the offer
  std::uint32_t id = 0;
  std::uint32_t qp_num = 0;  ///< established: our QP
  std::uint32_t reason = 0;  ///< rejected: the REJ reason
  Ipv4Addr peer;
  std::uint16_t port = 0;  ///< connect request: the listened port
  std::uint16_t private_len = 0;
  std::uint8_t private_data[kCmPrivateMax] = {};
  // The SIDR reply's fields carry a connect request's and an established connection's ECE
  // (client::CmEvent::ece_*, selective_repeat) in the same layout.
  union {
    std::uint8_t sidr_status = 0;   ///< SIDR reply: IBA SIDR_REP status (0: success)
    std::uint8_t selective_repeat;  ///< established: the QP runs selective repeat
  };
  union {
    std::uint32_t sidr_qpn = 0;  ///< SIDR reply: the peer's UD QP
    std::uint32_t ece_vendor;    ///< connect request, established: the peer's ECE
  };
  union {
    std::uint32_t sidr_qkey = 0;  ///< SIDR reply: its Q_Key
    std::uint32_t ece_options;
  };
};
/// Entries of a client's CM event ring: events wait on the lane when it is full (never lost).
inline constexpr std::uint32_t kCmEventSlots = 64;

static_assert(std::is_trivially_copyable_v<SendEntry> && std::is_trivially_copyable_v<RecvEntry> &&
              std::is_trivially_copyable_v<CqEntry> && std::is_trivially_copyable_v<EventEntry> &&
              std::is_trivially_copyable_v<CmEventEntry>);

/// Bytes of the memfd holding a QP's send ring (first) and receive ring (at a 4 KiB boundary).
struct QpRings {
  std::uint32_t sq_slots = 0, rq_slots = 0;
  std::uint64_t rq_offset() const {
    return (ShmQueueLayout<SendEntry>::bytes(sq_slots) + 4095) & ~std::uint64_t{4095};
  }
  std::uint64_t bytes() const {
    return (rq_offset() + ShmQueueLayout<RecvEntry>::bytes(rq_slots) + 4095) & ~std::uint64_t{4095};
  }
};

}  // namespace roce::attach
