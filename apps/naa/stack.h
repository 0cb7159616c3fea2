/// @file
/// What the NAA server and the host library need from an RDMA stack, and nothing more: memory
/// to register, memory registration, rdma_cm connections (listen, accept, connect, disconnect),
/// SEND / RDMA WRITE / WRITE_WITH_IMM / RECV, and one poll that returns connection events and
/// completions. Two implementations: conn_stack.h on libroce and its connection layer (the
/// appliance's stack in-process, attached to a roced or hosted in one) and ibverbs_stack.h on
/// rdma-core.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace roce::naa {

using ConnId = std::uint64_t;

struct MrInfo {
  void* addr = nullptr;    ///< where the memory is in this process
  std::uint64_t iova = 0;  ///< the address peers use (== addr unless registered with an iova)
  std::uint64_t length = 0;
  std::uint32_t lkey = 0, rkey = 0;
  std::uint64_t handle = 0;  ///< the stack's own
};

/// Memory reg_mr takes: page-aligned, zero when allocated.
struct Memory {
  std::uint8_t* addr = nullptr;
  std::uint64_t length = 0;
  std::uint64_t handle = 0;  ///< the stack's own
};

enum class Op : std::uint8_t { kSend, kWrite, kWriteImm };

struct WorkRequest {
  std::uint64_t wr_id = 0;
  Op op = Op::kSend;
  /// The local buffer, as its MR addresses it (MrInfo::iova + offset: the pointer itself
  /// unless the MR was registered with an iova); length 0: a zero-length WRITE_WITH_IMM.
  std::uint64_t local = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t imm = 0;  ///< as a number; big-endian on the wire
  bool signaled = true;
  /// The Solicited Event bit on the message's last packet (SEND, WRITE_WITH_IMM): a peer whose
  /// CQ is armed for solicited completions only (ibv_req_notify_cq(cq, 1), as NAAICE's) is
  /// woken by this message.
  bool solicited = false;
};

struct ConnEvent {
  enum Kind : std::uint8_t {
    kConnectRequest,  ///< passive: answer with accept() or reject()
    kEstablished,
    kRejected,
    kUnreachable,
    kDisconnected,  ///< DREQ received or our DREQ done: the connection's QP is in error
  } kind;
  ConnId conn = 0;
  std::string peer;  ///< kConnectRequest: the peer's address, for logs
};

struct Completion {
  ConnId conn = 0;
  std::uint64_t wr_id = 0;
  bool ok = true;
  std::string status;  ///< when !ok: the work completion status, for errors
  enum Kind : std::uint8_t { kSend, kWrite, kRecv, kRecvImm } kind = kSend;
  std::uint32_t byte_len = 0;
  std::uint32_t imm = 0;
};

/// Queue sizes of a connection's QP.
struct QpSizes {
  std::uint32_t send = 64, recv = 16;
};

class Stack {
 public:
  virtual ~Stack() = default;

  /// `length` bytes of memory that reg_mr takes (libroce: shared memory that an attached
  /// roced maps too); nullopt when refused.
  virtual std::optional<Memory> alloc(std::uint64_t length) = 0;
  virtual void free(const Memory& m) = 0;

  /// Registers `length` bytes at `addr` (in memory from alloc()) for local writes and remote
  /// writes; with `iova` set, peers address it from there (ibv_reg_mr_iova). nullopt when the stack
  /// refuses. The MR is in connection `c`'s own protection domain, which its QP shares and no other
  /// connection's does: its rkey is refused (remote access error) on every other connection.
  /// `c` = 0: the stack's common PD, for a stack with one connection (the host library).
  virtual std::optional<MrInfo> reg_mr(ConnId c, void* addr, std::uint64_t length,
                                       std::optional<std::uint64_t> iova) = 0;
  virtual void dereg_mr(const MrInfo& mr) = 0;

  /// Passive side: accept connect requests for rdma_cm TCP port `port`.
  virtual bool listen(std::uint16_t port) = 0;
  /// Passive side: creates the QP of a requested connection (receives may be posted on it
  /// from now on), then accept() sends the REP.
  virtual bool prepare(ConnId c, const QpSizes& s) = 0;
  virtual bool accept(ConnId c) = 0;
  virtual void reject(ConnId c) = 0;
  /// Active side: resolves `ipv4` and connects to its `port` (the QP exists, and receives may
  /// be posted, when this returns); kEstablished, kRejected or kUnreachable follows.
  virtual std::optional<ConnId> connect(const std::string& ipv4, std::uint16_t port,
                                        const QpSizes& s) = 0;
  /// DREQ if still connected; the connection's QP is destroyed, later completions dropped.
  virtual void disconnect(ConnId c) = 0;

  virtual bool post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                         std::uint32_t lkey) = 0;
  virtual bool post_send(ConnId c, const WorkRequest& wr) = 0;

  /// Runs the stack a little; appends what happened. Returns true when there was anything.
  virtual bool poll(std::vector<ConnEvent>& events, std::vector<Completion>& completions) = 0;
  /// Keeps the stack running for `seconds` (answering the peer) without reporting anything.
  virtual void idle(double seconds) = 0;
};

}  // namespace roce::naa
