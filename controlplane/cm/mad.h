/// @file
/// Codec of the InfiniBand Communication Manager MADs (IBA Vol.1 ch.12, "CM messages") as
/// rdma_cm sends them over RoCEv2: the 24-byte MAD common header and the REQ, MRA,
/// REJ, REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP bodies, plus rdma_cm's service IDs and the
/// 36-byte cma private-data header. Plain value structs in, 256 bytes out; decoding checks the
/// length and the header and never reads outside the span. The state machine is in cm.h.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include "dataplane/engine/verbs.h"
#include "dataplane/wire/bytes.h"
#include "dataplane/wire/psn.h"

namespace roce::cm {

using wire::Ipv4Addr;
using wire::Ipv6Addr;
using wire::Psn;
using wire::Qpn;

inline constexpr std::size_t kMadSize = 256;       ///< every CM MAD, UD payload of QP1
inline constexpr std::size_t kMadHeaderSize = 24;  ///< common MAD header
inline constexpr std::size_t kCmDataSize = kMadSize - kMadHeaderSize;  ///< 232

inline constexpr std::uint8_t kMadBaseVersion = 1;
inline constexpr std::uint8_t kMgmtClassCm = 0x07;
inline constexpr std::uint8_t kCmClassVersion = 2;
inline constexpr std::uint8_t kMethodSend = 0x03;  ///< every CM message is a Send

using MadBuf = std::array<std::uint8_t, kMadSize>;

/// AttributeID of each CM message (roce-wire-reference 5.2).
enum class AttrId : std::uint16_t {
  kClassPortInfo = 0x0001,
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001A,
};
std::string_view to_string(AttrId a);

/// The 24-byte common MAD header. The encoder takes `attr_id` from the message it encodes.
struct MadHeader {
  std::uint8_t base_version = kMadBaseVersion;
  std::uint8_t mgmt_class = kMgmtClassCm;
  std::uint8_t class_version = kCmClassVersion;
  std::uint8_t method = kMethodSend;
  std::uint16_t status = 0;
  std::uint16_t class_specific = 0;
  std::uint64_t tid = 0;
  AttrId attr_id = AttrId::kReq;
  std::uint32_t attr_mod = 0;
  friend bool operator==(const MadHeader&, const MadHeader&) = default;
};

/// Which message an MRA or a REJ refers to (2-bit "Message MRAed" / "Message REJected").
enum class MsgKind : std::uint8_t { kReq = 0, kRep = 1, kOther = 2 };

/// REJ reasons (roce-wire-reference 5.4; the names of include/rdma/ib_cm.h).
enum class RejReason : std::uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupportedReq = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,  ///< nobody listens on the service ID
  kInvalidTransportType = 9,
  kStaleConn = 10,  ///< the peer still remembers this QP in timewait
  kRdcNotExist = 11,
  kInvalidGid = 12,
  kInvalidLid = 13,
  kInvalidSl = 14,
  kInvalidTrafficClass = 15,
  kInvalidHopLimit = 16,
  kInvalidPacketRate = 17,
  kInvalidMtu = 26,
  kInsufficientRespResources = 27,
  kConsumerDefined = 28,  ///< rdma_reject() by the application
  kInvalidRnrRetry = 29,
  kDuplicateLocalCommId = 30,
  kInvalidClassVersion = 31,
  kInvalidFlowLabel = 32,
  kInvalidAltFlowLabel = 33,
};

/// SIDR_REP status values (include/rdma/ib_cm.h `ib_cm_sidr_status`).
enum class SidrStatus : std::uint8_t {
  kSuccess = 0,
  kUnsupported = 1,  ///< no listener on the service ID
  kReject = 2,
  kNoQp = 3,
  kRedirect = 4,
  kUnsupportedVersion = 5,
};

/// Transport Service Type of a REQ.
enum class TransportType : std::uint8_t { kRc = 0, kUc = 1, kRd = 2, kXrc = 3 };

/// One path of a REQ (primary at data offset 52, alternate at 96; 44 bytes each).
struct CmPath {
  std::uint16_t local_lid = 0xFFFF;  ///< permissive LID: RoCE, routed
  std::uint16_t remote_lid = 0xFFFF;
  Ipv6Addr local_gid;
  Ipv6Addr remote_gid;
  std::uint32_t flow_label = 0;  ///< 20 bits
  std::uint8_t packet_rate = 0;  ///< 6 bits
  std::uint8_t traffic_class = 0;
  std::uint8_t hop_limit = 64;
  std::uint8_t sl = 0;  ///< 4 bits
  bool subnet_local = false;
  std::uint8_t local_ack_timeout = 0;  ///< 5 bits, 4.096 us x 2^n
  friend bool operator==(const CmPath&, const CmPath&) = default;
};

// Private data sizes of each message (roce-wire-reference 5.5).
inline constexpr std::size_t kReqPrivateSize = 92;
inline constexpr std::size_t kMraPrivateSize = 222;
inline constexpr std::size_t kRejPrivateSize = 148;
inline constexpr std::size_t kRepPrivateSize = 196;
inline constexpr std::size_t kRtuPrivateSize = 224;
inline constexpr std::size_t kDreqPrivateSize = 220;
inline constexpr std::size_t kDrepPrivateSize = 224;
inline constexpr std::size_t kSidrReqPrivateSize = 216;
inline constexpr std::size_t kSidrRepPrivateSize = 136;
inline constexpr std::size_t kRejAriSize = 72;
inline constexpr std::size_t kSidrRepInfoSize = 72;

template <std::size_t N>
using PrivateData = std::array<std::uint8_t, N>;

struct ReqMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t vendor_id = 0;  ///< 24 bits (ECE)
  std::uint64_t service_id = 0;
  std::uint64_t local_ca_guid = 0;
  std::uint32_t local_qkey = 0;
  Qpn local_qpn;
  std::uint8_t responder_resources = 0;
  std::uint32_t local_eecn = 0;  ///< 24 bits
  std::uint8_t initiator_depth = 0;
  std::uint32_t remote_eecn = 0;                      ///< 24 bits
  std::uint8_t remote_cm_response_timeout = 0;        ///< 5 bits
  TransportType transport_type = TransportType::kRc;  ///< 2 bits
  bool e2e_flow_control = false;
  Psn starting_psn;
  std::uint8_t local_cm_response_timeout = 0;  ///< 5 bits
  std::uint8_t retry_count = 0;                ///< 3 bits
  std::uint16_t pkey = 0xFFFF;
  std::uint8_t path_mtu = 0;  ///< 4 bits, IB enum (3 = 1024)
  bool rdc_exists = false;
  std::uint8_t rnr_retry_count = 0;  ///< 3 bits
  std::uint8_t max_cm_retries = 0;   ///< 4 bits
  bool srq = false;
  std::uint8_t ext_transport_type = 0;  ///< 3 bits
  CmPath primary;
  CmPath alternate;  ///< all zero on RoCE
  PrivateData<kReqPrivateSize> private_data{};
  friend bool operator==(const ReqMsg&, const ReqMsg&) = default;
};

struct MraMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  MsgKind message_mraed = MsgKind::kReq;
  std::uint8_t service_timeout = 0;  ///< 5 bits, 4.096 us x 2^n
  PrivateData<kMraPrivateSize> private_data{};
  friend bool operator==(const MraMsg&, const MraMsg&) = default;
};

struct RejMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  MsgKind message_rejected = MsgKind::kReq;
  std::uint8_t reject_info_length = 0;  ///< 7 bits, <= 72
  RejReason reason = RejReason::kConsumerDefined;
  std::array<std::uint8_t, kRejAriSize> ari{};
  PrivateData<kRejPrivateSize> private_data{};
  friend bool operator==(const RejMsg&, const RejMsg&) = default;
};

struct RepMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::uint32_t local_qkey = 0;
  Qpn local_qpn;
  std::uint32_t local_eecn = 0;  ///< 24 bits
  Psn starting_psn;
  std::uint32_t vendor_id = 0;  ///< 24 bits, split over bytes 15, 19 and 23 (ECE)
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t target_ack_delay = 0;   ///< 5 bits
  std::uint8_t failover_accepted = 0;  ///< 2 bits
  bool e2e_flow_control = false;
  std::uint8_t rnr_retry_count = 0;  ///< 3 bits
  bool srq = false;
  std::uint64_t local_ca_guid = 0;
  PrivateData<kRepPrivateSize> private_data{};
  friend bool operator==(const RepMsg&, const RepMsg&) = default;
};

struct RtuMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  PrivateData<kRtuPrivateSize> private_data{};
  friend bool operator==(const RtuMsg&, const RtuMsg&) = default;
};

struct DreqMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  Qpn remote_qpn;  ///< the receiver's QPN (24 bits)
  PrivateData<kDreqPrivateSize> private_data{};
  friend bool operator==(const DreqMsg&, const DreqMsg&) = default;
};

struct DrepMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  PrivateData<kDrepPrivateSize> private_data{};
  friend bool operator==(const DrepMsg&, const DrepMsg&) = default;
};

struct SidrReqMsg {
  std::uint32_t request_id = 0;
  std::uint16_t pkey = 0xFFFF;
  std::uint64_t service_id = 0;
  PrivateData<kSidrReqPrivateSize> private_data{};
  friend bool operator==(const SidrReqMsg&, const SidrReqMsg&) = default;
};

struct SidrRepMsg {
  std::uint32_t request_id = 0;
  SidrStatus status = SidrStatus::kSuccess;
  std::uint8_t additional_info_length = 0;  ///< <= 72
  std::uint32_t vendor_id = 0;              ///< 24 bits, bytes 6-7 and 11 (ECE)
  Qpn qpn;
  std::uint64_t service_id = 0;
  std::uint32_t qkey = 0;
  std::array<std::uint8_t, kSidrRepInfoSize> additional_info{};
  PrivateData<kSidrRepPrivateSize> private_data{};
  friend bool operator==(const SidrRepMsg&, const SidrRepMsg&) = default;
};

using CmMsg =
    std::variant<ReqMsg, MraMsg, RejMsg, RepMsg, RtuMsg, DreqMsg, DrepMsg, SidrReqMsg, SidrRepMsg>;
/// The AttributeID that carries `msg`.
AttrId attr_id_of(const CmMsg& msg);

/// Why a MAD was not decoded.
enum class MadError : std::uint8_t {
  kOk,
  kTruncated,             ///< fewer than 256 bytes
  kTooLong,               ///< more than 256 bytes
  kBadBaseVersion,        ///< BaseVersion != 1
  kNotCm,                 ///< MgmtClass != 0x07
  kBadClassVersion,       ///< ClassVersion != 2
  kBadMethod,             ///< Method != Send
  kUnsupportedAttribute,  ///< a CM attribute we do not implement (ClassPortInfo, LAP, APR)
  kUnknownAttribute,      ///< not a CM attribute at all
  kBadField,              ///< a length field out of range (REJ info length, SIDR info length)
};
std::string_view to_string(MadError e);

struct DecodedMad {
  MadError error = MadError::kOk;
  MadHeader hdr;  ///< valid when error is kOk, or an attribute error
  CmMsg msg;      ///< valid when error is kOk
  bool ok() const { return error == MadError::kOk; }
};

/// 256 bytes of MAD: `hdr` (its attr_id replaced by the message's) followed by `msg`.
MadBuf encode(const MadHeader& hdr, const CmMsg& msg);
/// Checks the header fields and decodes the body. Never reads past `mad`.
DecodedMad decode(std::span<const std::uint8_t> mad);
/// Header only, with the same checks as decode() except the attribute.
MadError decode_header(std::span<const std::uint8_t> mad, MadHeader& out);

// ---- rdma_cm service IDs and the cma header (roce-wire-reference 5.6) -------------------------

/// rdma_cm port spaces (enum rdma_ucm_port_space).
enum class PortSpace : std::uint16_t {
  kIpoib = 0x0002,
  kIb = 0x013F,
  kTcp = 0x0106,
  kUdp = 0x0111
};

/// Service ID of (port space, port): 0x0000000001PPpppp for TCP and UDP.
constexpr std::uint64_t service_id(PortSpace ps, std::uint16_t port) {
  return (std::uint64_t{static_cast<std::uint16_t>(ps)} << 16) | port;
}
/// True for the IBTA "IP CM" service IDs (prefix 0x0000000001), which carry a cma header.
constexpr bool is_ip_cm_service(std::uint64_t sid) { return (sid >> 24) == 0x01; }
constexpr std::uint16_t port_of(std::uint64_t sid) { return static_cast<std::uint16_t>(sid); }
constexpr PortSpace port_space_of(std::uint64_t sid) {
  return static_cast<PortSpace>(static_cast<std::uint16_t>(sid >> 16));
}
static_assert(service_id(PortSpace::kTcp, 7174) == 0x0000000001061C06ull, "rping's default port");

/// Q_Key that rdma_cm gives UD QPs of RDMA_PS_UDP (RDMA_UDP_QKEY).
inline constexpr std::uint32_t kRdmaUdpQkey = 0x0123'4567;

inline constexpr std::size_t kCmaHeaderSize = 36;
/// Bytes of REQ private data left to the application after the cma header.
inline constexpr std::size_t kReqUserPrivateSize = kReqPrivateSize - kCmaHeaderSize;

/// The first 36 bytes of an rdma_cm REQ's (and SIDR_REQ's) private data. IPv4 addresses are
/// carried as 12 zero bytes + the address, not IPv4-mapped.
struct CmaHeader {
  std::uint8_t version = 0;
  std::uint8_t ip_version = 4;  ///< 4 or 6 (high nibble of byte 1)
  std::uint16_t src_port = 0;   ///< the active side's port
  Ipv6Addr src_ip;              ///< the 16 bytes as on the wire
  Ipv6Addr dst_ip;

  /// With sport = ephemeral_port() for an active side that has none of its own.
  static CmaHeader ipv4(Ipv4Addr src, std::uint16_t sport, Ipv4Addr dst);
  static CmaHeader ipv6(const Ipv6Addr& src, std::uint16_t sport, const Ipv6Addr& dst);
  Ipv4Addr src_ipv4() const { return Ipv4Addr{wire::load_be32(src_ip.b.data() + 12)}; }
  Ipv4Addr dst_ipv4() const { return Ipv4Addr{wire::load_be32(dst_ip.b.data() + 12)}; }
  friend bool operator==(const CmaHeader&, const CmaHeader&) = default;
};

/// The active side's port in the cma header: an ephemeral port, as Linux picks one for
/// rdma_cm's TCP port space (32768-60999, ip_local_port_range's default). The one place that
/// chooses it.
std::uint16_t ephemeral_port();

void encode_cma_header(const CmaHeader& h, std::span<std::uint8_t, kCmaHeaderSize> out);
/// nullopt when the version is not 0 or the IP version is neither 4 nor 6.
std::optional<CmaHeader> decode_cma_header(std::span<const std::uint8_t, kCmaHeaderSize> in);

// ---- IBA time and MTU encodings -------------------------------------------------------------

/// Path MTU enum of IBA (1 = 256 ... 5 = 4096); 0 for anything else (engine::Mtu's values).
constexpr std::uint8_t mtu_enum(std::uint32_t bytes) {
  const auto m = engine::mtu_of_bytes(bytes);
  return m ? static_cast<std::uint8_t>(*m) : 0;
}
constexpr std::uint32_t mtu_bytes(std::uint8_t e) {
  return e >= 1 && e <= 5 ? engine::mtu_bytes(static_cast<engine::Mtu>(e)) : 0;
}

}  // namespace roce::cm
