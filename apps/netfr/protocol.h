/// @file
/// NetFR's messages, as telescope-proj/netfr (45b215f) puts them on the wire: a 10-byte header
/// (magic "NetFrame", version 1, type) and, per type, the fields of upstream's structs packed
/// (#pragma pack(1): no padding but what the structs declare), little-endian (upstream runs on
/// little-endian machines only). Hellos travel in the rdma_cm
/// private data (<= NETFR_CM_MESSAGE_MAX_SIZE bytes), everything else as SENDs of at most
/// NETFR_MESSAGE_MAX_SIZE bytes. Pure: encode into a buffer, decode with every length and field
/// checked (a bad message is an error value, never a crash).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "apps/netfr/include/netfr/netfr.h"

namespace roce::netfr {

enum class MsgType : std::uint8_t {
  kClientHello = 1,
  kServerHello = 2,
  kBufferHint = 3,  ///< defined upstream, never sent, no layout: refused
  kBufferUpdate = 4,
  kBufferState = 5,  ///< client -> host: a buffer (again) free for writes
  kClientData = 6,
  kClientDataAck = 7,
  kHostData = 8,
  kHostDataAck = 9,
  // Ours, outside upstream's 1..9, sent only to a peer whose hello offered them.
  kHostBufferSizes = 0x81,
  kKeepalive = 0x82,
};
std::string_view to_string(MsgType t);

enum class HelloStatus : std::uint8_t { kInvalid = 0, kOk = 1, kError = 2, kRejected = 3 };

/// Extensions, offered in one byte after upstream's hello (upstream's peers do not read it and
/// answer without it, so they never see an extension). The host answers with what it takes.
inline constexpr std::uint8_t kExtKeepalive = 0x01;   ///< Keepalive messages both ways
inline constexpr std::uint8_t kExtHostSizes = 0x02;   ///< HostBufferSizes after connect
inline constexpr std::uint8_t kExtTotalOrder = 0x04;  ///< connection-wide serials, total order
inline constexpr std::uint8_t kExtAll = kExtKeepalive | kExtHostSizes | kExtTotalOrder;

// Sizes and offsets (bytes from the start of the message): upstream's structs, pack(1).
inline constexpr std::size_t kHeaderSize = 10;
inline constexpr std::size_t kClientHelloSize = 10;
inline constexpr std::size_t kServerHelloSize = 11;
inline constexpr std::size_t kBufferUpdateSize = 40;
inline constexpr std::size_t kBufferStateSize = 39;
inline constexpr std::size_t kDataHeaderSize = 32;  ///< ClientData / HostData before the payload
inline constexpr std::size_t kAckSize = 10;
inline constexpr std::size_t kKeepaliveSize = 10;
inline constexpr std::size_t kHostBufferSizesSize = 16 + (NETFR_MAX_MEM_REGIONS + 1) * 8;
/// Receives upstream keeps posted per channel (its rxSlots): what a sender may count on.
inline constexpr std::uint32_t kRecvDepth = 60;
static_assert(kDataHeaderSize == NETFR_MESSAGE_INTERNAL_MAX_SIZE);
static_assert(kServerHelloSize + 1 <= NETFR_CM_MESSAGE_MAX_SIZE);
static_assert(kHostBufferSizesSize <= NETFR_MESSAGE_MAX_SIZE);

struct ClientHello {
  std::uint8_t ext = 0;  ///< extensions offered (0: upstream's 10-byte hello)
};
struct ServerHello {
  HelloStatus status = HelloStatus::kOk;
  std::uint8_t ext = 0;  ///< extensions taken (0: upstream's 11-byte hello)
};
/// Host -> client: a buffer write landed (RDMA WRITE before it on the same QP).
struct BufferUpdate {
  std::uint32_t buffer_index = 0;  ///< one byte on the wire
  std::uint32_t payload_size = 0;
  std::uint32_t payload_offset = 0;
  std::uint32_t write_serial = 0;    ///< total order: the connection-wide serial
  std::uint32_t channel_serial = 0;  ///< the channel's serial
  std::uint64_t udata = 0;
};
/// Client -> host: buffer `index` is (again) free for writes; size 0 releases the index.
struct BufferState {
  std::uint32_t index = 0;  ///< one byte on the wire
  std::uint32_t page_size = 0;
  std::uint64_t addr = 0, size = 0, rkey = 0;
};
/// Host -> client (extension): the sizes of the host's attached memory.
struct HostBufferSizes {
  std::vector<std::uint64_t> sizes;  ///< <= NETFR_MAX_MEM_REGIONS, none 0 or > 256 MiB
};
/// ClientData and HostData: a datagram.
struct Data {
  bool from_host = true;  ///< HostData, else ClientData
  std::uint32_t msg_serial = 0, channel_serial = 0;
  std::uint64_t udata = 0;
  std::span<const std::uint8_t> payload;  ///< into the decoded buffer
};
struct Ack {
  bool host_data = true;  ///< HostDataAck (client -> host), else ClientDataAck
};
struct Keepalive {};

using Message = std::variant<ClientHello, ServerHello, BufferUpdate, BufferState, HostBufferSizes,
                             Data, Ack, Keepalive>;

enum class DecodeError : std::uint8_t {
  kOk,
  kTooShort,  ///< shorter than the header or than its type's fields
  kTooLong,   ///< longer than its type allows (or than NETFR_MESSAGE_MAX_SIZE)
  kBadMagic,
  kBadVersion,
  kBadType,
  kBadLength,  ///< a data message whose length field is past its size or the maximum
  kBadField,   ///< a field out of range (hello status, buffer index, rkey, region sizes)
};
std::string_view to_string(DecodeError e);

struct Decoded {
  DecodeError error = DecodeError::kOk;
  MsgType type{};
  Message msg;
};

/// Decodes one message; Data::payload points into `bytes`.
Decoded decode(std::span<const std::uint8_t> bytes);

// Encoders: write the message at `out` (which must hold its size) and return its size.
std::size_t encode(std::uint8_t* out, const ClientHello& m);
std::size_t encode(std::uint8_t* out, const ServerHello& m);
std::size_t encode(std::uint8_t* out, const BufferUpdate& m);
std::size_t encode(std::uint8_t* out, const BufferState& m);
std::size_t encode(std::uint8_t* out, const HostBufferSizes& m);
/// The payload is copied after the 32-byte header; at most NETFR_MESSAGE_MAX_PAYLOAD_SIZE.
std::size_t encode(std::uint8_t* out, const Data& m);
std::size_t encode(std::uint8_t* out, const Ack& m);
std::size_t encode(std::uint8_t* out, const Keepalive&);

template <class M>
std::vector<std::uint8_t> encode_vec(const M& m) {
  std::vector<std::uint8_t> v(NETFR_MESSAGE_MAX_SIZE);
  v.resize(encode(v.data(), m));
  return v;
}

/// The hellos in the rdma_cm private data as libfabric's verbs provider frames its CM data
/// (the seed's implementation and the programs that connect to it use it): one byte of length,
/// then the message. wrap_cm_data() makes that; unwrap_cm_data() accepts it, or a bare message
/// (a peer on plain rdma_cm), and returns the message (empty when it is neither).
std::vector<std::uint8_t> wrap_cm_data(std::span<const std::uint8_t> msg);
std::span<const std::uint8_t> unwrap_cm_data(std::span<const std::uint8_t> pd);

/// Serials on the 32-bit circle (they wrap): a before b.
constexpr bool serial_before(std::uint32_t a, std::uint32_t b) {
  return static_cast<std::int32_t>(a - b) < 0;
}

}  // namespace roce::netfr
