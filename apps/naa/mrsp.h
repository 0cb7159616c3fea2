/// @file
/// The NAAICE memory region setup protocol (MRSP): the messages a host and a network-attached
/// accelerator (NAA) exchange over RC SEND/RECV before the data phase. All fields big-endian,
/// no gaps, as the NAAICE low-level API document lays them out:
///
///   header (4 bytes, every message)    type u8 | count (or error code) u8 | padding u16 (zero)
///   type 0x01 advertisement+request, per region (24 bytes):
///       MR flags u8 | requested FPGA address u56 | published addr u64 | rkey u32 | size u32
///   type 0x02 advertisement, per region (16 bytes):
///       published addr u64 | rkey u32 | size u32
///   type 0x00 error: the header alone, its second byte the error code
///
/// The count is 8 bits (up to 255 regions on the wire); the NAA handles at most 32 regions
/// (kMaxRegions) and answers more with error 0x03. A region holds at most 1 GiB. Pure functions:
/// no allocation beyond the returned vectors, never a read past the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace roce::naa {

enum class MsgType : std::uint8_t {
  kError = 0x00,
  kAdvertiseRequest = 0x01,  ///< host -> NAA: its regions and the NAA regions it wants
  kAdvertise = 0x02,         ///< NAA -> host: the regions it allocated
  kRequest = 0x03,           ///< defined by NAAICE, unused (decoding it is an error)
};

/// MRSP error codes (the error message's second byte).
enum class MrspError : std::uint8_t {
  kNotEnoughMemory = 0x01,  ///< address + size exceeds the memory boundary
  kInvalidAddress = 0x02,   ///< address is out of bounds
  kTooManyRegions = 0x03,   ///< more regions requested than the NAA handles
};
std::string_view to_string(MrspError e);

/// MR flags of an advertisement+request entry, as upstream NAAICE (lib/naaice.h
/// naaice_mrflags_value) defines them; other bits are ignored.
enum MrFlags : std::uint8_t {
  kMrFlagInternal = 0x01,    ///< a region on the NAA only: no host address, never transferred
  kMrFlagSingleSend = 0x02,  ///< the host writes it on its first call only (the NAA keeps it)
  kMrFlagInput = 0x04,       ///< the host writes it before each call
  kMrFlagOutput = 0x08,      ///< the NAA writes it back after each call
};

constexpr std::size_t kHeaderSize = 4;
constexpr std::size_t kAdvReqEntrySize = 24;
constexpr std::size_t kAdvEntrySize = 16;
constexpr std::size_t kMaxCount = 255;                ///< what the 8-bit count can carry
constexpr std::size_t kMaxRegions = 32;               ///< regions an NAA handles (the FPGA's limit)
constexpr std::uint64_t kMaxRegionSize = 1ull << 30;  ///< 1 GiB: largest region and message
constexpr std::uint64_t kMaxFpgaAddress = (1ull << 56) - 1;  ///< the 56-bit address field
/// The MRSP exchange buffer: header plus kMaxRegions advertisement+request entries. A message
/// of more regions does not fit a receive of this size (the NAA then cannot read it at all).
constexpr std::size_t kExchangeBufferSize = kHeaderSize + kMaxRegions * kAdvReqEntrySize;
/// The largest message the 8-bit count allows (255 advertisement+request entries). The NAA's
/// receives are this large, so that it can read a request of too many regions and answer it
/// with error 0x03 instead of failing the receive (which would break the connection).
constexpr std::size_t kMaxMessageSize = kHeaderSize + kMaxCount * kAdvReqEntrySize;

/// One region of an advertisement+request (type 0x01).
struct AdvReqEntry {
  std::uint8_t flags = 0;
  std::uint64_t fpga_addr = 0;  ///< requested NAA address (56 bits; 0: anywhere)
  std::uint64_t addr = 0;       ///< the host region's address (where results go)
  std::uint32_t rkey = 0;
  std::uint32_t size = 0;
  bool internal() const { return flags & kMrFlagInternal; }
  bool single_send() const { return flags & kMrFlagSingleSend; }
  bool input() const { return flags & kMrFlagInput; }
  bool output() const { return flags & kMrFlagOutput; }
  friend bool operator==(const AdvReqEntry&, const AdvReqEntry&) = default;
};

/// One region of an advertisement (type 0x02).
struct AdvEntry {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t size = 0;
  friend bool operator==(const AdvEntry&, const AdvEntry&) = default;
};

struct AdvertiseRequest {
  std::vector<AdvReqEntry> regions;
};
struct Advertise {
  std::vector<AdvEntry> regions;
};
struct ErrorMsg {
  std::uint8_t code = 0;
};

using Message = std::variant<AdvertiseRequest, Advertise, ErrorMsg>;

/// Why a buffer is not an MRSP message.
enum class DecodeError : std::uint8_t {
  kTruncatedHeader,   ///< fewer than 4 bytes
  kBadType,           ///< not 0x00, 0x01 or 0x02
  kZeroCount,         ///< an advertisement (+request) of no region
  kTruncatedEntries,  ///< count entries do not fit the buffer
  kBadFpgaAddress,    ///< (encode only) requested address beyond 56 bits
  kTooManyEntries,    ///< (encode only) more than 255 regions
};
std::string_view to_string(DecodeError e);

/// The result of decode(): a message, or why not (with a human-readable detail).
struct DecodeResult {
  std::variant<Message, DecodeError> v;
  std::string detail;
  bool ok() const { return v.index() == 0; }
  const Message& message() const { return std::get<0>(v); }
  DecodeError error() const { return std::get<1>(v); }
};

/// Decodes one message. Bytes after the last entry are ignored (a receive buffer is larger
/// than the message), as are the padding bytes.
DecodeResult decode(std::span<const std::uint8_t> buf);

/// Encoders: append the message to `out`; the size appended, or 0 (and `out` untouched) when
/// the message cannot be encoded (more than 255 regions, an FPGA address beyond 56 bits).
std::size_t encode(const AdvertiseRequest& m, std::vector<std::uint8_t>& out);
std::size_t encode(const Advertise& m, std::vector<std::uint8_t>& out);
std::size_t encode(const ErrorMsg& m, std::vector<std::uint8_t>& out);

/// The encoded size of a message of `n` regions of type `t` (header included).
constexpr std::size_t encoded_size(MsgType t, std::size_t n) {
  return kHeaderSize + n * (t == MsgType::kAdvertiseRequest ? kAdvReqEntrySize
                            : t == MsgType::kAdvertise      ? kAdvEntrySize
                                                            : 0);
}

/// How a host lays out its regions and immediates.
///   kUpstream: upstream NAAICE (naa-communication-library f7b72fc): every region is data,
///     flagged INPUT / OUTPUT / SINGLESEND; the call immediate is fncode | 0x80 with 24 user bits
///     above it; the NAA writes the OUTPUT regions back and the status sits in bits 8..15 of its
///     immediate.
///   kSeed: the seed document's layout, as this project's host library spoke it before: region 0
///     is the metadata region (the big-endian return address), the immediate is the function
///     code, and the status is the whole immediate.
enum class Layout : std::uint8_t { kUpstream, kSeed };
/// kUpstream when any region is flagged INPUT or OUTPUT (an upstream host always has an input:
/// it has nothing to write otherwise); kSeed otherwise.
Layout layout_of(const AdvertiseRequest& m);

/// The host's call immediate (upstream naaice_write_data: htonl(immediate | 0x80), the function
/// code in the low 7 bits, naaice_set_immediate's bytes in the upper 24), as a number.
constexpr std::uint32_t kImmHostToNaa = 0x80;
struct CallImm {
  std::uint32_t fncode = 0;  ///< 0: the host's error message (nothing to run)
  std::uint32_t user = 0;    ///< the upper 24 bits
};
constexpr CallImm decode_call_imm(std::uint32_t imm) { return {imm & 0x7F, imm >> 8}; }
constexpr std::uint32_t encode_call_imm(std::uint32_t fncode, std::uint32_t user) {
  return (user << 8) | (fncode & 0x7F) | kImmHostToNaa;
}
/// The NAA's answer immediate for `status` (upstream's host: ntohl(imm_data) >> 8).
constexpr unsigned kStatusShift = 8;
constexpr std::uint32_t status_imm(std::uint32_t status) { return status << kStatusShift; }

/// Completion status of a function call: the immediate of the NAA's final WRITE_WITH_IMM.
enum RpcStatus : std::uint32_t {
  kRpcSuccess = 0x00,
  kRpcSocketNotAvailable = 0x01,
  kRpcKernelTimeout = 0x02,
  // 0x03-0x0f reserved
  kRpcFirstAppError = 0x10,
  // Application errors of this NAA (0x10-0x7f):
  kRpcUnknownFunction = 0x10,   ///< no kernel for the function code
  kRpcBadReturnAddress = 0x11,  ///< the metadata's return address names no host region
  kRpcBadParamCount = 0x12,     ///< the kernel wants another number of parameters
  kRpcBadParamSize = 0x13,      ///< a parameter's size does not fit the kernel
  kRpcLastAppError = 0x7f,
};
/// "success", "socket not available", "reserved (0x05)", "application error 0x12 (...)".
std::string rpc_status_string(std::uint32_t status);

}  // namespace roce::naa
