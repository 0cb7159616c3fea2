/// @file
/// One constexpr table describing every opcode the stack knows: its name, which extension
/// headers follow the BTH and at which offsets, where it sits in a message, and whether it is a
/// request or a response (rxe keeps the same facts in rxe_opcode.c). Stages ask the table
/// questions (`info.mask.has(OpMask::kRead)`) instead of listing opcodes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dataplane/wire/opcode.h"

namespace roce::wire {

/// Sizes of the BTH and of every extension header (IBA Vol.1 9.3, 9.4; Linux ib_pack.h).
inline constexpr std::size_t kBthSize = 12;
inline constexpr std::size_t kRethSize = 16;
inline constexpr std::size_t kAethSize = 4;
inline constexpr std::size_t kAtomicEthSize = 28;
inline constexpr std::size_t kAtomicAckEthSize = 8;
inline constexpr std::size_t kImmDtSize = 4;
inline constexpr std::size_t kIethSize = 4;
inline constexpr std::size_t kDethSize = 8;
inline constexpr std::size_t kFethSize = 4;
inline constexpr std::size_t kCnpPadSize = 16;
inline constexpr std::size_t kIcrcSize = 4;

/// Extension headers, in the order IBA places them after the BTH.
enum class Ext : std::uint8_t {
  kDeth,
  kFeth,
  kReth,
  kAtomicEth,
  kAeth,
  kAtomicAckEth,
  kImmDt,
  kIeth,
  kCnpPad,
  kCount_
};
inline constexpr std::size_t kExtCount = static_cast<std::size_t>(Ext::kCount_);

constexpr std::size_t ext_size(Ext e) {
  switch (e) {
    case Ext::kDeth:
      return kDethSize;
    case Ext::kFeth:
      return kFethSize;
    case Ext::kReth:
      return kRethSize;
    case Ext::kAtomicEth:
      return kAtomicEthSize;
    case Ext::kAeth:
      return kAethSize;
    case Ext::kAtomicAckEth:
      return kAtomicAckEthSize;
    case Ext::kImmDt:
      return kImmDtSize;
    case Ext::kIeth:
      return kIethSize;
    case Ext::kCnpPad:
      return kCnpPadSize;
    case Ext::kCount_:
      break;
  }
  return 0;
}

/// Properties of an opcode, as a bit set.
class OpMask {
 public:
  enum Bit : std::uint32_t {
    kReth = 1u << 0,
    kAeth = 1u << 1,
    kAtomicEth = 1u << 2,
    kAtomicAckEth = 1u << 3,
    kImmDt = 1u << 4,
    kIeth = 1u << 5,
    kDeth = 1u << 6,
    kFeth = 1u << 7,
    kCnpPad = 1u << 8,
    kPayload = 1u << 9,    ///< may carry payload bytes
    kRequest = 1u << 10,   ///< sent by a requester
    kResponse = 1u << 11,  ///< sent by a responder (ACK, read response, atomic ACK)
    kStart = 1u << 12,     ///< first packet of a message (First or Only)
    kMiddle = 1u << 13,
    kEnd = 1u << 14,  ///< last packet of a message (Last or Only)
    kSend = 1u << 15,
    kWrite = 1u << 16,
    kRead = 1u << 17,
    kAtomic = 1u << 18,   ///< compare-and-swap or fetch-and-add
    kAck = 1u << 19,      ///< Acknowledge or Atomic Acknowledge
    kRecvWqe = 1u << 20,  ///< consumes a receive WQE (SEND, WRITE with immediate)
    kImm = 1u << 21,
    kInvalidate = 1u << 22,
    kFlush = 1u << 23,
    kAtomicWrite = 1u << 24,
    kCnp = 1u << 25,
    /// Selective repeat's own opcodes (0xE0-0xE3): the payload opens with the SR header
    /// (srh.h). No kStart/kMiddle/kEnd and no kSend/kWrite: the in-order responder's opcode
    /// sequence check turns them away from the standard path (responder.cc, sr_recv.cc).
    kSr = 1u << 26,
  };
  constexpr OpMask() = default;
  constexpr OpMask(std::uint32_t bits) : bits_(bits) {}  // NOLINT: built from Bit ors
  constexpr bool has(std::uint32_t bits) const { return (bits_ & bits) == bits; }
  constexpr bool any(std::uint32_t bits) const { return (bits_ & bits) != 0; }
  constexpr std::uint32_t bits() const { return bits_; }
  friend constexpr bool operator==(OpMask, OpMask) = default;

 private:
  std::uint32_t bits_ = 0;
};

struct OpcodeInfo {
  std::string_view name;  ///< IBA-style name, e.g. "RC_SEND_FIRST"; empty for unknown opcodes
  OpMask mask;
  std::uint8_t hdr_len = 0;                   ///< BTH + extension headers, in bytes
  std::array<std::uint8_t, kExtCount> off{};  ///< offset of each extension from the BTH; 0 = absent
  std::uint8_t fixed_payload = 0;  ///< exact payload length when nonzero (ATOMIC WRITE: 8)

  constexpr bool valid() const { return !name.empty(); }
  constexpr bool has(Ext e) const { return off[static_cast<std::size_t>(e)] != 0; }
  constexpr std::uint8_t offset(Ext e) const { return off[static_cast<std::size_t>(e)]; }
};

namespace detail {

constexpr OpcodeInfo make_info(std::string_view name, std::uint32_t mask) {
  OpcodeInfo info;
  info.name = name;
  info.mask = OpMask(mask);
  // Extension headers follow the BTH in Ext order; an opcode's mask says which are present.
  constexpr std::array<std::pair<Ext, std::uint32_t>, kExtCount> kOrder{{
      {Ext::kDeth, OpMask::kDeth},
      {Ext::kFeth, OpMask::kFeth},
      {Ext::kReth, OpMask::kReth},
      {Ext::kAtomicEth, OpMask::kAtomicEth},
      {Ext::kAeth, OpMask::kAeth},
      {Ext::kAtomicAckEth, OpMask::kAtomicAckEth},
      {Ext::kImmDt, OpMask::kImmDt},
      {Ext::kIeth, OpMask::kIeth},
      {Ext::kCnpPad, OpMask::kCnpPad},
  }};
  std::size_t at = kBthSize;
  for (const auto& [ext, bit] : kOrder) {
    if (mask & bit) {
      info.off[static_cast<std::size_t>(ext)] = static_cast<std::uint8_t>(at);
      at += ext_size(ext);
    }
  }
  info.hdr_len = static_cast<std::uint8_t>(at);
  if (mask & OpMask::kAtomicWrite) info.fixed_payload = 8;
  return info;
}

consteval std::array<OpcodeInfo, 256> make_opcode_table() {
  using M = OpMask;
  constexpr std::uint32_t kReq = M::kRequest;
  constexpr std::uint32_t kRsp = M::kResponse;
  constexpr std::uint32_t kOnly = M::kStart | M::kEnd;
  constexpr std::uint32_t kP = M::kPayload;
  constexpr std::uint32_t kSendR = kReq | M::kSend | M::kRecvWqe | kP;
  constexpr std::uint32_t kWriteR = kReq | M::kWrite | kP;
  std::array<OpcodeInfo, 256> t{};
  auto set = [&t](Opcode op, std::string_view name, std::uint32_t mask) {
    t[raw(op)] = make_info(name, mask);
  };
  // RC and UC share operations 0x00-0x0B; UC = 0x20 + op (IBA 9.2 Table 38).
  struct Common {
    std::uint8_t op;
    std::string_view rc, uc;
    std::uint32_t mask;
  };
  constexpr std::array<Common, 12> kCommon{{
      {0x00, "RC_SEND_FIRST", "UC_SEND_FIRST", kSendR | M::kStart},
      {0x01, "RC_SEND_MIDDLE", "UC_SEND_MIDDLE", kSendR | M::kMiddle},
      {0x02, "RC_SEND_LAST", "UC_SEND_LAST", kSendR | M::kEnd},
      {0x03, "RC_SEND_LAST_WITH_IMMEDIATE", "UC_SEND_LAST_WITH_IMMEDIATE",
       kSendR | M::kEnd | M::kImmDt | M::kImm},
      {0x04, "RC_SEND_ONLY", "UC_SEND_ONLY", kSendR | kOnly},
      {0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", "UC_SEND_ONLY_WITH_IMMEDIATE",
       kSendR | kOnly | M::kImmDt | M::kImm},
      {0x06, "RC_RDMA_WRITE_FIRST", "UC_RDMA_WRITE_FIRST", kWriteR | M::kStart | M::kReth},
      {0x07, "RC_RDMA_WRITE_MIDDLE", "UC_RDMA_WRITE_MIDDLE", kWriteR | M::kMiddle},
      {0x08, "RC_RDMA_WRITE_LAST", "UC_RDMA_WRITE_LAST", kWriteR | M::kEnd},
      {0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
       kWriteR | M::kEnd | M::kImmDt | M::kImm | M::kRecvWqe},
      {0x0A, "RC_RDMA_WRITE_ONLY", "UC_RDMA_WRITE_ONLY", kWriteR | kOnly | M::kReth},
      {0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
       kWriteR | kOnly | M::kReth | M::kImmDt | M::kImm | M::kRecvWqe},
  }};
  for (const auto& c : kCommon) {
    t[c.op] = make_info(c.rc, c.mask);
    t[0x20u + c.op] = make_info(c.uc, c.mask);
  }
  set(Opcode::kRcReadRequest, "RC_RDMA_READ_REQUEST", kReq | M::kRead | kOnly | M::kReth);
  set(Opcode::kRcReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST",
      kRsp | M::kRead | M::kStart | M::kAeth | kP);
  set(Opcode::kRcReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE",
      kRsp | M::kRead | M::kMiddle | kP);
  set(Opcode::kRcReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST",
      kRsp | M::kRead | M::kEnd | M::kAeth | kP);
  set(Opcode::kRcReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY",
      kRsp | M::kRead | kOnly | M::kAeth | kP);
  set(Opcode::kRcAcknowledge, "RC_ACKNOWLEDGE", kRsp | M::kAck | kOnly | M::kAeth);
  set(Opcode::kRcAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE",
      kRsp | M::kAck | M::kAtomic | kOnly | M::kAeth | M::kAtomicAckEth);
  set(Opcode::kRcCompareSwap, "RC_CMP_SWAP", kReq | M::kAtomic | kOnly | M::kAtomicEth);
  set(Opcode::kRcFetchAdd, "RC_FETCH_ADD", kReq | M::kAtomic | kOnly | M::kAtomicEth);
  set(Opcode::kRcSendLastInv, "RC_SEND_LAST_WITH_INVALIDATE",
      kSendR | M::kEnd | M::kIeth | M::kInvalidate);
  set(Opcode::kRcSendOnlyInv, "RC_SEND_ONLY_WITH_INVALIDATE",
      kSendR | kOnly | M::kIeth | M::kInvalidate);
  // FLUSH and ATOMIC WRITE (IBA 1.5 Memory Placement Extensions; chains as in rxe_opcode.c).
  set(Opcode::kRcFlush, "RC_FLUSH", kReq | M::kFlush | kOnly | M::kFeth | M::kReth);
  set(Opcode::kRcAtomicWrite, "RC_ATOMIC_WRITE", kReq | M::kAtomicWrite | kOnly | M::kReth | kP);
  set(Opcode::kUdSendOnly, "UD_SEND_ONLY", kSendR | kOnly | M::kDeth);
  set(Opcode::kUdSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE",
      kSendR | kOnly | M::kDeth | M::kImmDt | M::kImm);
  set(Opcode::kCnp, "CNP", M::kCnp | kOnly | M::kCnpPad);
  // Selective repeat (manufacturer specific, only between two of our stacks that agreed on it).
  constexpr std::uint32_t kSrR = kReq | M::kSr | M::kRecvWqe | kP;
  set(Opcode::kSrSend, "SR_SEND", kSrR);
  set(Opcode::kSrSendImm, "SR_SEND_WITH_IMMEDIATE", kSrR | M::kImmDt | M::kImm);
  set(Opcode::kSrSendInv, "SR_SEND_WITH_INVALIDATE", kSrR | M::kIeth | M::kInvalidate);
  set(Opcode::kSrWriteImm, "SR_RDMA_WRITE_WITH_IMMEDIATE", kSrR | M::kReth | M::kImmDt | M::kImm);
  return t;
}

}  // namespace detail

inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::make_opcode_table();

constexpr const OpcodeInfo& opcode_info(Opcode op) { return kOpcodeTable[raw(op)]; }
constexpr const OpcodeInfo& opcode_info(std::uint8_t op) { return kOpcodeTable[op]; }

/// Every opcode with a table entry, in numeric order.
consteval std::size_t count_known_opcodes() {
  std::size_t n = 0;
  for (const auto& i : kOpcodeTable) n += i.valid() ? 1 : 0;
  return n;
}
inline constexpr std::size_t kKnownOpcodeCount = count_known_opcodes();
constexpr std::array<Opcode, kKnownOpcodeCount> make_known_opcodes() {
  std::array<Opcode, kKnownOpcodeCount> out{};
  std::size_t n = 0;
  for (std::size_t i = 0; i < kOpcodeTable.size(); ++i)
    if (kOpcodeTable[i].valid()) out[n++] = static_cast<Opcode>(i);
  return out;
}
inline constexpr std::array<Opcode, kKnownOpcodeCount> kKnownOpcodes = make_known_opcodes();

static_assert(opcode_info(Opcode::kRcWriteFirst).mask.has(OpMask::kReth | OpMask::kStart));
static_assert(opcode_info(Opcode::kRcWriteOnlyImm).offset(Ext::kImmDt) == kBthSize + kRethSize);
static_assert(opcode_info(Opcode::kUdSendOnlyImm).hdr_len == kBthSize + kDethSize + kImmDtSize);
static_assert(opcode_info(Opcode::kRcAtomicAcknowledge).offset(Ext::kAtomicAckEth) ==
              kBthSize + kAethSize);
static_assert(opcode_info(Opcode::kRcFlush).offset(Ext::kReth) == kBthSize + kFethSize);
static_assert(!opcode_info(std::uint8_t{0x15}).valid());

}  // namespace roce::wire
