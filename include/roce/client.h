/// @file
/// libroce: the verbs-like API of the RoCE stack for application processes. One interface,
/// two backends:
///   - Context::attach(): the process attaches to a running roced through its Unix socket;
///     resources are created by roced on its engine, work requests and completions travel
///     through shared memory (docs/client-api.md);
///   - client::open_local() (client/local/local_context.h, not part of this API): the process
///     drives an engine of its own (its own DPDK port and poll loop) and the calls go straight
///     to it.
/// Applications written against Context run unchanged on either.
///
/// The vocabulary is <roce/verbs.h> (SendWr, RecvWr, Wc, QpAttr, ...), shaped after
/// libibverbs; the engine speaks the same types. Errors are rdma-core's: calls that create return
/// null and set errno; the others return 0 or an errno value; poll_cq returns a count or -errno.
/// Memory used in work requests must be registered (reg_mr) and come from alloc_buffer() or
/// register_memfd(): shared memory that an attached roced maps too, so that its dataplane
/// reads and writes it directly (zero copy). Addresses in SGEs are the process's own; the
/// address a peer uses for an MR is Mr::iova (+ offset).
///
/// Threads: a Context may be used from several threads; posts to one QP and polls of one CQ
/// are serialised per QP and CQ.
#pragma once

#include <roce/addr.h>
#include <roce/verbs.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace roce::client {

using verbs::AddressVector;
using verbs::Mtu;
using verbs::QpAttr;
using verbs::QpCap;
using verbs::QpState;
using verbs::QpType;
using verbs::RecvWr;
using verbs::SendWr;
using verbs::Sge;
using verbs::Wc;
using verbs::WcOpcode;
using verbs::WcStatus;
using verbs::WrOpcode;

/// The port the context sends on.
struct PortInfo {
  std::string name;
  MacAddr mac;
  Ipv4Addr ipv4;
  Ipv6Addr gid;  ///< ::ffff:ipv4, what a peer puts in its address vector
  Mtu max_mtu = Mtu::k1024;
  std::uint32_t lcore = 0;  ///< attached: the roced lcore that owns this context's QPs
};

/// What a client may create and ask for, as ibv_device_attr's fields of the same names
/// (Context::query_device; docs/client-api.md "Limits"). Counts beyond are EDQUOT, sizes
/// beyond EINVAL.
struct DeviceAttr {
  std::uint32_t max_qp = 0;     ///< QPs at once
  std::uint32_t max_qp_wr = 0;  ///< a QP's max_send_wr, max_recv_wr
  std::uint32_t max_sge = 0;    ///< a QP's max_send_sge, max_recv_sge (and per work request)
  std::uint32_t max_cq = 0;     ///< CQs at once
  std::uint32_t max_cqe = 0;    ///< a CQ's depth (the quota and roced's limits.cq_depth)
  std::uint32_t max_mr = 0;     ///< MRs at once
  std::uint32_t max_pd = 0;     ///< PDs at once
  std::uint32_t max_srq = 0;    ///< SRQs at once
  std::uint32_t max_srq_wr = 0;
  std::uint32_t max_srq_sge = 0;
  std::uint32_t max_inline_data = 0;  ///< a QP's max_inline_data
  std::uint64_t max_mr_size = 0;      ///< memory roced holds for the client (max_memory)
};

/// Resources: created and destroyed by the Context, read-only for the application.
struct Pd {
  virtual ~Pd() = default;
};
struct Buffer {
  virtual ~Buffer() = default;
  void* addr = nullptr;
  std::size_t length = 0;
  int fd = -1;  ///< the memfd behind it
};
struct Mr {
  virtual ~Mr() = default;
  void* addr = nullptr;
  std::uint64_t length = 0;
  std::uint32_t lkey = 0, rkey = 0;
  /// What a peer uses as remote_addr for the MR's first byte (with rkey). With an engine
  /// that registers I/O virtual addresses this is `addr` itself.
  std::uint64_t iova = 0;
};
struct Cq {
  virtual ~Cq() = default;
  std::uint32_t depth = 0;
};
struct Srq {
  virtual ~Srq() = default;
};
struct Qp {
  virtual ~Qp() = default;
  std::uint32_t qp_num = 0;
  QpType type = QpType::kRc;
};

/// An asynchronous event (ibv_async_event): a QP that went to the error state (kQpFatal, e.g.
/// its peer stopped answering), a remote access it refused, a CQ that overran (kCqErr).
struct AsyncEvent {
  verbs::AsyncEventType type = verbs::AsyncEventType::kQpFatal;
  std::uint32_t qp_num = 0;  ///< QP events
  Cq* cq = nullptr;          ///< kCqErr
};

/// rdma_cm events (struct rdma_cm_event), for connections made with cm_connect/cm_listen.
enum class CmEventType : std::uint8_t {
  kConnectRequest = 1,  ///< a peer connects to a listened port: cm_accept() or cm_reject()
  kEstablished,         ///< the QP is in RTS and the peer knows it
  kRejected,            ///< the peer refused (`reason`, `private_data`)
  kUnreachable,         ///< no answer (retries exhausted)
  kConnectError,        ///< the peer's reply could not be applied to the QP
  kDisconnected,        ///< the connection ended (`remote`: the peer ended it); QP in error
  kSidrRequest,         ///< a SIDR request to a port of cm_sidr_listen: cm_sidr_accept or _reject
  kSidrReply,           ///< the answer to cm_sidr_resolve (`sidr_status`, `sidr_qpn`, `sidr_qkey`)
  /// Not from the CM: the device went away (attached: roced ended); every connection and
  /// listen on it is gone. libibverbs-compatible layers turn it into DEVICE_REMOVAL.
  kDeviceRemoval,
};
struct CmEvent {
  CmEventType type = CmEventType::kConnectRequest;
  std::uint32_t id = 0;      ///< the connection
  std::uint32_t qp_num = 0;  ///< kEstablished: our QP
  Ipv4Addr peer;
  std::uint16_t port = 0;  ///< kConnectRequest: the listened port
  std::uint8_t responder_resources = 0, initiator_depth = 0;  ///< kConnectRequest: the offer
  std::uint32_t reason = 0;                                   ///< kRejected: IBA REJ reason
  bool remote = false;
  std::vector<std::uint8_t> private_data;
  std::uint8_t sidr_status = 0;  ///< kSidrReply: IBA SIDR_REP status, 0 success, 1 no listener
  std::uint32_t sidr_qpn = 0, sidr_qkey = 0;  ///< kSidrReply: the peer's UD QP and Q_Key
  /// kConnectRequest: the REQ's ECE (struct ibv_ece's vendor ID and options); kEstablished:
  /// the peer's (its REQ or REP). Vendor 0: none (rdma_get_remote_ece).
  std::uint32_t ece_vendor = 0, ece_options = 0;
  /// kEstablished: the QP runs selective repeat (offered, accepted and allowed by roced's
  /// `transport: selective_repeat`; docs/loss-recovery.md).
  bool selective_repeat = false;
};
/// struct rdma_conn_param's part that matters here.
struct CmConnParam {
  std::uint8_t responder_resources = 1;  ///< READs/atomics we take at once
  std::uint8_t initiator_depth = 1;      ///< READs/atomics we issue at once
  std::uint8_t rnr_retry = 7;
  /// connect: the REQ's Retry Count (the transport retries the peer should use towards us;
  /// rdma_conn_param.retry_count). In-process only: attached, roced's CM sends 7 (the attach
  /// protocol does not carry it).
  std::uint8_t retry_count = 7;
  /// connect: <= 56 bytes (after rdma_cm's header); accept: <= 196; reject: <= 148.
  std::vector<std::uint8_t> private_data;
  /// ECE (rdma_set_local_ece): what the REQ offers or the REP answers; vendor 0: none. Our
  /// vendor 0xFFFFFF with options 0x524F0001 offers selective repeat (connect), 0x524F0002
  /// accepts it (accept); docs/configuration.md "transport".
  std::uint32_t ece_vendor = 0, ece_options = 0;
};

/// What connect_rc() needs to know of the far end (exchanged out of band).
struct RcPeer {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;  ///< the far end's send PSN: our expected receive PSN
  Ipv6Addr gid;
  std::optional<MacAddr> mac;  ///< nullopt: resolved by ARP on the port
};

class Context {
 public:
  /// Attaches to the roced listening on `socket_path`; `port`: one of its ports by name, empty
  /// for the first. Null with errno set (ENOENT, ECONNREFUSED: no roced; EACCES: the socket's
  /// mode; EPROTO: another protocol version).
  static std::unique_ptr<Context> attach(const std::string& socket_path,
                                         const std::string& port = {});
  virtual ~Context() = default;

  virtual const PortInfo& port() const = 0;
  /// The limits of this client (ibv_query_device): attached, those roced told it at hello.
  /// The in-process backend has none of its own (all zero: the engine's sizes apply).
  virtual DeviceAttr query_device() const { return {}; }
  /// False once an attached roced is gone (every call then fails with ENOTCONN).
  virtual bool connected() const = 0;

  virtual Pd* alloc_pd() = 0;
  virtual int dealloc_pd(Pd* pd) = 0;

  /// `length` bytes of zero-filled shared memory (a sealed memfd, mapped here and by roced).
  virtual Buffer* alloc_buffer(std::size_t length) = 0;
  /// A memfd of the application's own, mapped at `addr` for `length` bytes (sealed against
  /// shrinking here, so that roced's mapping stays valid). The fd stays the application's.
  /// Attached, it must be a memfd made with MFD_ALLOW_SEALING (or already sealed against
  /// shrinking): EPERM otherwise (a file of /dev/shm too), EINVAL for a file that is not
  /// shared memory (a device).
  /// The in-process backend takes any mapping, and fd -1 for memory that is no memfd.
  virtual Buffer* register_memfd(int fd, void* addr, std::size_t length) = 0;
  /// register_memfd of the memfd's bytes [offset, offset + length), mapped at `addr`: several
  /// Buffers may share one memfd (verbs/memory keeps the pages it adopts from a program in one,
  /// at file offset = address). `offset` page aligned, else EINVAL. Backends without it:
  /// EOPNOTSUPP unless `offset` is 0.
  virtual Buffer* register_memfd_at(int fd, std::uint64_t offset, void* addr, std::size_t length);
  /// EBUSY while MRs cover it.
  virtual int free_buffer(Buffer* b) = 0;

  /// [addr, addr + length) must lie in one Buffer.
  virtual Mr* reg_mr(Pd* pd, void* addr, std::size_t length, std::uint32_t access) = 0;
  /// ibv_reg_mr_iova: the MR's first byte is `iova` for peers and for this process's own SGEs
  /// (both address the MR from `iova` on), while the memory is [addr, addr + length), which
  /// must lie in one Buffer. `iova` and `addr` must have the same offset in their page. A
  /// backend without it: EOPNOTSUPP unless `iova` is `addr` itself.
  virtual Mr* reg_mr_iova(Pd* pd, void* addr, std::size_t length, std::uint64_t iova,
                          std::uint32_t access);
  virtual int dereg_mr(Mr* mr) = 0;
  /// ibv_rereg_mr in place: `mr` takes `pd`, [addr, addr + length) (in one Buffer) at
  /// `iova`, and `access`, and keeps its keys. 0 or an errno value; EOPNOTSUPP from a backend
  /// without it (the caller registers anew: new keys).
  virtual int rereg_mr(Mr* mr, Pd* pd, void* addr, std::size_t length, std::uint64_t iova,
                       std::uint32_t access);

  virtual Cq* create_cq(std::uint32_t depth) = 0;
  virtual int destroy_cq(Cq* cq) = 0;
  virtual Srq* create_srq(Pd* pd, std::uint32_t max_wr, std::uint32_t max_sge) = 0;
  virtual int destroy_srq(Srq* srq) = 0;
  virtual Qp* create_qp(Pd* pd, QpType type, Cq* send_cq, Cq* recv_cq, const QpCap& cap,
                        Srq* srq = nullptr, bool sq_sig_all = false) = 0;
  virtual int destroy_qp(Qp* qp) = 0;
  /// An address vector without a MAC (all zero) is resolved by ARP on the port.
  virtual int modify_qp(Qp* qp, const QpAttr& attr, std::uint32_t mask) = 0;

  /// At most 4 SGEs per work request when attached; the inline flag is ignored (the SGEs
  /// must be registered). ENOMEM: the send queue is full (`bad_wr` and the rest not posted).
  virtual int post_send(Qp* qp, const SendWr* wr, const SendWr** bad_wr) = 0;
  virtual int post_recv(Qp* qp, const RecvWr* wr, const RecvWr** bad_wr) = 0;
  virtual int post_srq_recv(Srq* srq, const RecvWr* wr, const RecvWr** bad_wr) = 0;
  /// Up to `max` completions, without blocking; -ENOTCONN once roced is gone.
  virtual int poll_cq(Cq* cq, int max, Wc* out) = 0;
  /// Blocks until `cq` has a completion (at once if it has one), `timeout_ms` passes
  /// (ETIMEDOUT; -1: no limit) or roced goes away (ENOTCONN). 0: poll_cq has something.
  virtual int wait_cq(Cq* cq, int timeout_ms) = 0;
  /// For a thread that serves several waits at once (libroce-verbs' progress thread): sleeps
  /// until one of `cqs` has a completion, the asynchronous event queue has an event (the CM's
  /// too, once the CM is in use), `wake_fd` (when >= 0) is readable, `timeout_ms` passes
  /// (ETIMEDOUT; -1: no limit) or roced goes away (ENOTCONN). 0 at once when one of them
  /// already holds something; 0 also means "look again" (the caller reads `wake_fd`). Each
  /// queue is armed as wait_cq arms it: roced signals its eventfd once, no spin. Backends
  /// without it (in-process): EOPNOTSUPP.
  virtual int wait_any(std::span<Cq* const> cqs, int wake_fd, int timeout_ms);
  /// The next asynchronous event: 0 with `ev` filled, ETIMEDOUT after `timeout_ms` (0: do not
  /// wait; -1: no limit), ENOTCONN when roced is gone.
  virtual int get_async_event(AsyncEvent& ev, int timeout_ms) = 0;

  // ---- rdma_cm (port space TCP, IPv4, RC QPs), on the CM of roced's port (shared with its
  // ---- hosted services) or of the in-process engine. The CM moves the QP through its states.
  /// rdma_listen on `port`. EADDRINUSE: someone else listens there.
  virtual int cm_listen(std::uint16_t port) = 0;
  /// rdma_connect: a REQ for `qp` (in RESET or INIT) to `dst`:`port`; `id` names the
  /// connection in its events. EHOSTUNREACH: no ARP answer from `dst`.
  virtual int cm_connect(Qp* qp, Ipv4Addr dst, std::uint16_t port, const CmConnParam& p,
                         std::uint32_t& id) = 0;
  /// rdma_accept of a kConnectRequest with `qp` (RESET or INIT).
  virtual int cm_accept(std::uint32_t id, Qp* qp, const CmConnParam& p) = 0;
  virtual int cm_reject(std::uint32_t id, std::span<const std::uint8_t> private_data = {}) = 0;
  /// rdma_disconnect: DREQ; the QP goes to the error state.
  virtual int cm_disconnect(std::uint32_t id) = 0;
  /// A connect request refused for want of room: REJ reason 3 "no resources" (IBA 12.6.7.2,
  /// as a full listen backlog refuses one; the kernel's rdma_reject with a reason), where
  /// cm_reject sends 28 "consumer defined". Backends without it send cm_reject's REJ.
  virtual int cm_refuse(std::uint32_t id) { return cm_reject(id); }
  /// rdma_notify(IBV_EVENT_COMM_EST): a message arrived on an accepted connection before its
  /// RTU (lost, or still on the way): the CM takes the connection as established
  /// (kEstablished follows). Backends without it: EOPNOTSUPP (the RTU that answers the REP's
  /// retransmission establishes it).
  virtual int cm_notify(std::uint32_t id) {
    (void)id;
    return EOPNOTSUPP;
  }
  /// Whether the port knows the MAC of `ip` (its ARP cache): 0, else EAGAIN, with an ARP request
  /// sent when `ask`; never waits (the non-blocking half of rdma_resolve_addr). Attached, once
  /// it answered 0, UD sends to `ip` may leave the address vector's MAC zero (roced fills it). A
  /// server asks before cm_accept, which needs the MAC: a connect request from a source that does
  /// not answer ARP then holds nothing but a pending entry. EOPNOTSUPP: the backend cannot tell
  /// (cm_accept resolves, waiting).
  virtual int neighbour(Ipv4Addr ip, bool ask) {
    (void)ip;
    (void)ask;
    return EOPNOTSUPP;
  }
  /// rdma_get_cm_event: 0 with `ev` filled, ETIMEDOUT after `timeout_ms` (0: do not wait;
  /// -1: no limit), ENOTCONN when roced is gone.
  virtual int cm_get_event(CmEvent& ev, int timeout_ms) = 0;

  // ---- rdma_cm's UDP port space (UD QPs, SIDR: IBA 12.11), in-process and attached (attach
  // ---- protocol 7); backends without it: EOPNOTSUPP. Attached, cm_sidr_accept's `qpn` must be
  // ---- one of the Context's UD QPs (EINVAL), and roced allows a client as many SIDR
  // ---- exchanges in flight as CM events unread (64 + attach.cm_backlog; beyond: EDQUOT).
  /// rdma_listen of a UD id on `port`. EADDRINUSE: someone else listens there.
  virtual int cm_sidr_listen(std::uint16_t port) {
    (void)port;
    return EOPNOTSUPP;
  }
  /// rdma_connect of a UD id: a SIDR request to `dst`:`port` (private data <= 180 bytes);
  /// kSidrReply or kUnreachable follows, naming `id`.
  virtual int cm_sidr_resolve(Ipv4Addr dst, std::uint16_t port,
                              std::span<const std::uint8_t> private_data, std::uint32_t& id) {
    (void)dst;
    (void)port;
    (void)private_data;
    (void)id;
    return EOPNOTSUPP;
  }
  /// rdma_accept of a kSidrRequest: our UD QP `qpn` and its Q_Key (private data <= 136 bytes).
  virtual int cm_sidr_accept(std::uint32_t id, std::uint32_t qpn, std::uint32_t qkey,
                             std::span<const std::uint8_t> private_data = {}) {
    (void)id;
    (void)qpn;
    (void)qkey;
    (void)private_data;
    return EOPNOTSUPP;
  }
  virtual int cm_sidr_reject(std::uint32_t id) {
    (void)id;
    return EOPNOTSUPP;
  }
  /// Stops listening on `port` (of cm_listen, or of cm_sidr_listen when `udp`): requests to it
  /// get the CM's "invalid service ID" again (REJ 8, SIDR status 1), as the kernel answers once
  /// rdma_cm's listen id is destroyed. ENOENT: not a port this Context listens on. Backends
  /// without it: EOPNOTSUPP.
  virtual int cm_unlisten(std::uint16_t port, bool udp = false) {
    (void)port;
    (void)udp;
    return EOPNOTSUPP;
  }

  /// Convenience: RESET -> INIT -> RTR -> RTS of an RC QP towards `peer` (`sq_psn`: ours).
  int connect_rc(Qp* qp, const RcPeer& peer, std::uint32_t sq_psn, Mtu mtu,
                 std::uint32_t access = verbs::kAccessLocalWrite | verbs::kAccessRemoteWrite |
                                        verbs::kAccessRemoteRead | verbs::kAccessRemoteAtomic);
};

}  // namespace roce::client
