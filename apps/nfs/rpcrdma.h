/// @file
/// RPC-over-RDMA version 1 (RFC 8166): the transport header that precedes every RPC message on
/// an RDMA connection, and the connection parameters of RFC 8797 carried in the rdma_cm private
/// data. Pure codec: what the chunks mean to a transport is in transport.h.
///
/// Transport header (XDR, RFC 8166 section 4.2): xid, version (1), credits, procedure; for
/// RDMA_MSG and RDMA_NOMSG the chunk lists: the read list (a list of position + segment), the
/// write list (a list of write chunks, each a counted array of segments) and the optional reply
/// chunk (one write chunk); for RDMA_ERROR an error code (ERR_VERS with the supported version
/// range, or ERR_CHUNK). RDMA_MSGP and RDMA_DONE are refused (RFC 8166 section 4.5 retires them).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace roce::nfs::rdma {

constexpr std::uint32_t kVersion = 1;
/// RFC 8166 section 3.3.3: the inline threshold without RFC 8797 private data.
constexpr std::uint32_t kDefaultInline = 1024;
/// An RDMA_MSG/NOMSG header without chunks: xid, vers, credits, proc, three empty lists.
constexpr std::size_t kMinHeader = 28;

enum class Proc : std::uint32_t { kMsg = 0, kNomsg = 1, kMsgp = 2, kDone = 3, kError = 4 };
enum class ErrorCode : std::uint32_t { kVers = 1, kChunk = 2 };

/// A registered region of the requester: its handle (rkey), length and offset (address).
struct Segment {
  std::uint32_t handle = 0;
  std::uint32_t length = 0;
  std::uint64_t offset = 0;
  friend bool operator==(const Segment&, const Segment&) = default;
};

/// One entry of the read list: a segment that belongs at `position` of the RPC message (0: the
/// whole message, a Position-Zero read chunk).
struct ReadSegment {
  std::uint32_t position = 0;
  Segment seg;
  friend bool operator==(const ReadSegment&, const ReadSegment&) = default;
};

/// A write chunk (or the reply chunk): segments the responder writes in order.
struct WriteChunk {
  std::vector<Segment> segments;
  std::uint64_t length() const;
  friend bool operator==(const WriteChunk&, const WriteChunk&) = default;
};

struct Header {
  std::uint32_t xid = 0;
  std::uint32_t vers = kVersion;
  std::uint32_t credits = 0;
  Proc proc = Proc::kMsg;
  std::vector<ReadSegment> reads;
  std::vector<WriteChunk> writes;
  std::optional<WriteChunk> reply;
  // RDMA_ERROR
  ErrorCode error = ErrorCode::kChunk;
  std::uint32_t vers_low = kVersion, vers_high = kVersion;  ///< ERR_VERS
  friend bool operator==(const Header&, const Header&) = default;
};

/// Limits a decoder applies so that a hostile header cannot make it allocate without bound.
constexpr std::size_t kMaxReadSegments = 64;
constexpr std::size_t kMaxWriteChunks = 8;
constexpr std::size_t kMaxSegmentsPerChunk = 64;

enum class DecodeError : std::uint8_t {
  kOk,
  kShort,        ///< the header runs past the message
  kBadVersion,   ///< not version 1: answer ERR_VERS
  kRetiredProc,  ///< RDMA_MSGP or RDMA_DONE (RFC 8166 4.5): answer ERR_CHUNK
  kUnknownProc,
  kBadList,        ///< a list discriminator other than 0 or 1
  kTooManyChunks,  ///< past the limits above: answer ERR_CHUNK
  kBadError,       ///< RDMA_ERROR with an unknown code
};
std::string_view to_string(DecodeError e);

/// Appends the header of `h` to `out`; returns its length.
std::size_t encode(const Header& h, std::vector<std::uint8_t>& out);
/// Decodes the header at the start of `msg` into `h`; on kOk `header_len` is where the RPC
/// message (RDMA_MSG) starts. On kBadVersion `h.xid` and `h.vers` are set (for ERR_VERS); on
/// other errors after the fixed part, `h.xid` is set. An RDMA_ERROR decodes whatever its version
/// field says (a peer's ERR_VERS may echo the refused version).
DecodeError decode(std::span<const std::uint8_t> msg, Header& h, std::size_t& header_len);

/// RFC 8797 section 5: the 8 bytes an RPC-over-RDMA v1 peer puts in the rdma_cm private data.
struct ConnectPrivate {
  static constexpr std::uint32_t kMagic = 0xf6ab0e18;
  static constexpr std::size_t kSize = 8;
  std::uint8_t version = 1;
  bool remote_invalidate = false;               ///< flags bit 0: send SEND with invalidate to me
  std::uint32_t send_size = kDefaultInline;     ///< the largest message I send (inline)
  std::uint32_t receive_size = kDefaultInline;  ///< the largest message I can receive
  friend bool operator==(const ConnectPrivate&, const ConnectPrivate&) = default;
};
/// Sizes travel as (size / 1024) - 1 in one byte: 1 KiB .. 256 KiB, rounded down.
std::vector<std::uint8_t> encode(const ConnectPrivate& p);
/// nullopt when the private data does not start with the magic (a peer without RFC 8797: use
/// kDefaultInline both ways) or is shorter than 8 bytes.
std::optional<ConnectPrivate> decode_private(std::span<const std::uint8_t> pd);

}  // namespace roce::nfs::rdma
