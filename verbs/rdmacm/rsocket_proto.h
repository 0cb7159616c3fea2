/// @file
/// The rsockets wire protocol (docs/verbs-compat.md "rsockets"), as rdma-core 44's
/// librdmacm/rsocket.c speaks it, and the checks every message of a peer passes before it
/// touches our state. No verbs calls: the unit test drives these directly.
///
/// Wire facts (all from rsocket.c; the structs below mirror its struct rs_sge, struct rs_iomap
/// and struct rs_conn_data):
///  - The connect private data (REQ and REP) is one ConnData: version 1, flags (bit 0: the
///    sender is big endian, bit 1: it has an iomap area), credits (its receive queue depth,
///    big endian), the scaled size of its iomap area, the SGL of its target area (address,
///    rkey, number of SGL entries) and the first half of its receive buffer, all big endian.
///  - Every message is an RDMA WRITE WITH IMMEDIATE; the immediate (big endian on the wire)
///    holds the operation in bits 31..29 and its argument in bits 28..0. A data message
///    writes its bytes into the peer's receive buffer at the place the peer last granted;
///    the immediate says how many. An SGL message writes one rs_sge (the next free half of
///    the writer's receive buffer, in the reader's byte order) into the reader's target SGL
///    and grants credits: the sequence number up to which the reader may send. A credit-only
///    SGL message and the control messages (disconnect, keepalive, shutdown) write nothing.
///    An IOMAP_SGL message writes one rs_iomap into the reader's iomap area at the index of
///    its argument. riowrite's data goes as a plain RDMA WRITE into such a mapping.
#pragma once

#include <cstddef>
#include <cstdint>

namespace roce::rsockets {

/// rsocket.c's struct rs_sge.
struct Sge {
  std::uint64_t addr;
  std::uint32_t key;
  std::uint32_t length;
};
static_assert(sizeof(Sge) == 16);

/// rsocket.c's struct rs_iomap.
struct IomapEntry {
  std::uint64_t offset;
  Sge sge;
};
static_assert(sizeof(IomapEntry) == 24);

/// rsocket.c's struct rs_conn_data: the private data of the REQ and the REP.
struct ConnData {
  std::uint8_t version;
  std::uint8_t flags;
  std::uint16_t credits;  ///< big endian
  std::uint8_t reserved[3];
  std::uint8_t iomap_scale;  ///< the iomap area's entries, scaled (scale_to_value)
  Sge target_sgl;            ///< big endian; `length` counts SGL entries
  Sge data_buf;              ///< big endian
};
static_assert(sizeof(ConnData) == 40);

constexpr std::uint8_t kVersion = 1;
constexpr std::uint8_t kFlagNet = 1;    ///< the sender is big endian
constexpr std::uint8_t kFlagIomap = 2;  ///< the sender has an iomap area after its SGL
constexpr int kSglSize = 2;             ///< entries of our target SGL

enum Op : std::uint32_t {
  kOpData = 0,
  kOpDataMore = 1,  ///< reserved, never sent by rdma-core 44
  kOpWrite = 2,     ///< riowrite's plain RDMA WRITE: never in an immediate
  kOpDraMore = 3,   ///< reserved
  kOpSgl = 4,
  kOpRsvd = 5,
  kOpIomapSgl = 6,
  kOpCtrl = 7,
};
enum Ctrl : std::uint32_t { kCtrlDisconnect = 0, kCtrlKeepalive = 1, kCtrlShutdown = 2 };

constexpr std::uint32_t make_msg(std::uint32_t op, std::uint32_t data) {
  return (op << 29) | (data & 0x1FFFFFFFu);
}
constexpr std::uint32_t msg_op(std::uint32_t m) { return m >> 29; }
constexpr std::uint32_t msg_data(std::uint32_t m) { return m & 0x1FFFFFFFu; }

/// rsocket.c's compact size encoding of the iomap area (8 bits: values up to 128 as they are,
/// larger ones as a multiple of 256).
int value_to_scale(int value, int bits);
int scale_to_value(int value, int bits);

constexpr bool host_is_net() { return __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__; }

/// What a peer's ConnData tells us, in host order.
struct Peer {
  std::uint64_t sgl_addr = 0;  ///< its target SGL (we write our SGL updates there)
  std::uint32_t sgl_key = 0;
  std::uint32_t sgl_count = 0;
  std::uint64_t iomap_addr = 0;  ///< its iomap area (0 entries: none)
  std::uint32_t iomap_count = 0;
  Sge first_buf{};  ///< the first half of its receive buffer: our first target
  std::uint16_t credits = 0;
  bool swap = false;  ///< its byte order differs: the SGEs we write into it are swapped
};

/// Parses a peer's private data: 0, ENOTSUP for another version, EPROTO for a short or
/// inconsistent one (no credits, no SGL entries, an empty or oversized first buffer).
int parse_conn(const void* data, std::size_t len, Peer& out);

/// Our ConnData: `target_sgl` is our target area (kSglSize SGL entries, then `iomap_entries`
/// rs_iomap entries), `rbuf` our receive buffer, of which the first half is granted.
ConnData format_conn(std::uint64_t target_addr, std::uint32_t target_rkey, int iomap_entries,
                     std::uint64_t rbuf_addr, std::uint32_t rbuf_rkey, std::uint32_t rbuf_size,
                     std::uint16_t rq_size);

/// The receive side's account of what the peer may still do: every immediate it sends is
/// checked against it. A data message must fit in what is left of the region (a half of our
/// receive buffer) the peer is filling, or start the next region granted (a sender never splits
/// a message across two: rdma-core clips it to its target SGE), and no more messages than our
/// receive queue's depth may be unread; credits may not go beyond the peer's receive queue; an
/// iomap index must be inside our iomap area. A message that breaks these is a protocol error:
/// the rsocket closes with EPROTO, its buffers stay untouched.
class Ledger {
 public:
  struct Effect {
    enum Kind : std::uint8_t {
      kNone,
      kData,
      kCredits,
      kIomap,
      kDisconnect,
      kShutdown
    } kind = kNone;
    std::uint32_t value = 0;
  };
  /// `first_grant`: the region the ConnData granted (every later grant is as large);
  /// `rq_size`: unread data messages allowed;
  /// `iomap_entries`: our iomap area; `peer_rq`: the peer's credits (its receive queue);
  /// `peer_chunk`: the largest region the peer may grant us (its first half buffer).
  void reset(std::uint32_t first_grant, std::uint32_t rq_size, std::uint32_t iomap_entries,
             std::uint16_t peer_rq, std::uint32_t peer_chunk);
  /// One receive completion's immediate (host order); `sseq_no`: the messages we have sent.
  /// 0 with its effect, or EPROTO.
  int accept(std::uint32_t imm, std::uint16_t sseq_no, Effect& out);
  /// A target SGE the peer wrote into our SGL, checked when we start to use it.
  bool target_ok(const Sge& s) const { return s.length <= peer_chunk_; }
  void granted() { ++regions_; }  ///< we sent an SGL update: one more region
  void consumed() { --unread_; }  ///< a data message fully read
  /// Bytes the peer may still write: the rest of its region and the regions after it.
  std::uint64_t grant() const { return left_ + std::uint64_t{regions_} * region_; }
  std::uint32_t unread() const { return unread_; }

 private:
  std::uint32_t region_ = 0, left_ = 0, regions_ = 0;
  std::uint32_t unread_ = 0, rq_ = 0, iomap_ = 0, peer_chunk_ = 0;
  std::uint16_t peer_rq_ = 0;
};

}  // namespace roce::rsockets
