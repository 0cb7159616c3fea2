#include "controlplane/cm/mad.h"

#include <algorithm>
#include <cstring>
#include <random>

namespace roce::cm {

namespace {

using wire::load_be16;
using wire::load_be24;
using wire::load_be32;
using wire::load_be64;
using wire::store_be16;
using wire::store_be24;
using wire::store_be32;
using wire::store_be64;

// IBTA bit notation "byte[bit]": bit 0 is the most significant bit of `byte`, and a w-bit field
// runs over bits bit..bit+w-1 of the big-endian bit string that starts there (roce-wire-reference
// 5.3). These two read and write such a field through the few bytes it covers.
std::uint32_t get_bits(const std::uint8_t* d, std::size_t byte, unsigned bit, unsigned width) {
  const unsigned nbytes = (bit + width + 7) / 8;
  std::uint64_t acc = 0;
  for (unsigned i = 0; i < nbytes; ++i) acc = (acc << 8) | d[byte + i];
  const unsigned shift = nbytes * 8 - bit - width;
  return static_cast<std::uint32_t>((acc >> shift) & ((std::uint64_t{1} << width) - 1));
}

void set_bits(std::uint8_t* d, std::size_t byte, unsigned bit, unsigned width, std::uint32_t v) {
  const unsigned nbytes = (bit + width + 7) / 8;
  std::uint64_t acc = 0;
  for (unsigned i = 0; i < nbytes; ++i) acc = (acc << 8) | d[byte + i];
  const unsigned shift = nbytes * 8 - bit - width;
  const std::uint64_t mask = ((std::uint64_t{1} << width) - 1) << shift;
  acc = (acc & ~mask) | ((std::uint64_t{v} << shift) & mask);
  for (unsigned i = nbytes; i-- > 0;) {
    d[byte + i] = static_cast<std::uint8_t>(acc);
    acc >>= 8;
  }
}

template <std::size_t N>
void put_bytes(std::uint8_t* d, std::size_t off, const std::array<std::uint8_t, N>& a) {
  std::memcpy(d + off, a.data(), N);
}
template <std::size_t N>
void get_bytes(const std::uint8_t* d, std::size_t off, std::array<std::uint8_t, N>& a) {
  std::memcpy(a.data(), d + off, N);
}

std::uint8_t u8(std::uint32_t v) { return static_cast<std::uint8_t>(v); }

// ---- paths (REQ data offsets 52 and 96, 44 bytes) -------------------------------------------

constexpr std::size_t kPrimaryPathOff = 52;
constexpr std::size_t kAlternatePathOff = 96;

void put_path(std::uint8_t* d, std::size_t o, const CmPath& p) {
  store_be16(d + o + 0, p.local_lid);
  store_be16(d + o + 2, p.remote_lid);
  put_bytes(d, o + 4, p.local_gid.b);
  put_bytes(d, o + 20, p.remote_gid.b);
  set_bits(d, o + 36, 0, 20, p.flow_label);
  set_bits(d, o + 39, 2, 6, p.packet_rate);
  d[o + 40] = p.traffic_class;
  d[o + 41] = p.hop_limit;
  set_bits(d, o + 42, 0, 4, p.sl);
  set_bits(d, o + 42, 4, 1, p.subnet_local);
  set_bits(d, o + 43, 0, 5, p.local_ack_timeout);
}

CmPath get_path(const std::uint8_t* d, std::size_t o) {
  CmPath p;
  p.local_lid = load_be16(d + o + 0);
  p.remote_lid = load_be16(d + o + 2);
  get_bytes(d, o + 4, p.local_gid.b);
  get_bytes(d, o + 20, p.remote_gid.b);
  p.flow_label = get_bits(d, o + 36, 0, 20);
  p.packet_rate = u8(get_bits(d, o + 39, 2, 6));
  p.traffic_class = d[o + 40];
  p.hop_limit = d[o + 41];
  p.sl = u8(get_bits(d, o + 42, 0, 4));
  p.subnet_local = get_bits(d, o + 42, 4, 1) != 0;
  p.local_ack_timeout = u8(get_bits(d, o + 43, 0, 5));
  return p;
}

// ---- message bodies: `d` is the 232-byte CM data area ---------------------------------------

void put(std::uint8_t* d, const ReqMsg& m) {
  store_be32(d + 0, m.local_comm_id);
  store_be24(d + 5, m.vendor_id);
  store_be64(d + 8, m.service_id);
  store_be64(d + 16, m.local_ca_guid);
  store_be32(d + 28, m.local_qkey);
  store_be24(d + 32, m.local_qpn.raw());
  d[35] = m.responder_resources;
  store_be24(d + 36, m.local_eecn);
  d[39] = m.initiator_depth;
  store_be24(d + 40, m.remote_eecn);
  set_bits(d, 43, 0, 5, m.remote_cm_response_timeout);
  set_bits(d, 43, 5, 2, static_cast<std::uint32_t>(m.transport_type));
  set_bits(d, 43, 7, 1, m.e2e_flow_control);
  store_be24(d + 44, m.starting_psn.raw());
  set_bits(d, 47, 0, 5, m.local_cm_response_timeout);
  set_bits(d, 47, 5, 3, m.retry_count);
  store_be16(d + 48, m.pkey);
  set_bits(d, 50, 0, 4, m.path_mtu);
  set_bits(d, 50, 4, 1, m.rdc_exists);
  set_bits(d, 50, 5, 3, m.rnr_retry_count);
  set_bits(d, 51, 0, 4, m.max_cm_retries);
  set_bits(d, 51, 4, 1, m.srq);
  set_bits(d, 51, 5, 3, m.ext_transport_type);
  put_path(d, kPrimaryPathOff, m.primary);
  put_path(d, kAlternatePathOff, m.alternate);
  put_bytes(d, 140, m.private_data);
}

ReqMsg get_req(const std::uint8_t* d) {
  ReqMsg m;
  m.local_comm_id = load_be32(d + 0);
  m.vendor_id = load_be24(d + 5);
  m.service_id = load_be64(d + 8);
  m.local_ca_guid = load_be64(d + 16);
  m.local_qkey = load_be32(d + 28);
  m.local_qpn = Qpn(load_be24(d + 32));
  m.responder_resources = d[35];
  m.local_eecn = load_be24(d + 36);
  m.initiator_depth = d[39];
  m.remote_eecn = load_be24(d + 40);
  m.remote_cm_response_timeout = u8(get_bits(d, 43, 0, 5));
  m.transport_type = static_cast<TransportType>(get_bits(d, 43, 5, 2));
  m.e2e_flow_control = get_bits(d, 43, 7, 1) != 0;
  m.starting_psn = Psn(load_be24(d + 44));
  m.local_cm_response_timeout = u8(get_bits(d, 47, 0, 5));
  m.retry_count = u8(get_bits(d, 47, 5, 3));
  m.pkey = load_be16(d + 48);
  m.path_mtu = u8(get_bits(d, 50, 0, 4));
  m.rdc_exists = get_bits(d, 50, 4, 1) != 0;
  m.rnr_retry_count = u8(get_bits(d, 50, 5, 3));
  m.max_cm_retries = u8(get_bits(d, 51, 0, 4));
  m.srq = get_bits(d, 51, 4, 1) != 0;
  m.ext_transport_type = u8(get_bits(d, 51, 5, 3));
  m.primary = get_path(d, kPrimaryPathOff);
  m.alternate = get_path(d, kAlternatePathOff);
  get_bytes(d, 140, m.private_data);
  return m;
}

void put(std::uint8_t* d, const MraMsg& m) {
  store_be32(d + 0, m.local_comm_id);
  store_be32(d + 4, m.remote_comm_id);
  set_bits(d, 8, 0, 2, static_cast<std::uint32_t>(m.message_mraed));
  set_bits(d, 9, 0, 5, m.service_timeout);
  put_bytes(d, 10, m.private_data);
}

MraMsg get_mra(const std::uint8_t* d) {
  MraMsg m;
  m.local_comm_id = load_be32(d + 0);
  m.remote_comm_id = load_be32(d + 4);
  m.message_mraed = static_cast<MsgKind>(get_bits(d, 8, 0, 2));
  m.service_timeout = u8(get_bits(d, 9, 0, 5));
  get_bytes(d, 10, m.private_data);
  return m;
}

void put(std::uint8_t* d, const RejMsg& m) {
  store_be32(d + 0, m.local_comm_id);
  store_be32(d + 4, m.remote_comm_id);
  set_bits(d, 8, 0, 2, static_cast<std::uint32_t>(m.message_rejected));
  set_bits(d, 9, 0, 7, m.reject_info_length);
  store_be16(d + 10, static_cast<std::uint16_t>(m.reason));
  put_bytes(d, 12, m.ari);
  put_bytes(d, 84, m.private_data);
}

RejMsg get_rej(const std::uint8_t* d) {
  RejMsg m;
  m.local_comm_id = load_be32(d + 0);
  m.remote_comm_id = load_be32(d + 4);
  m.message_rejected = static_cast<MsgKind>(get_bits(d, 8, 0, 2));
  m.reject_info_length = u8(get_bits(d, 9, 0, 7));
  m.reason = static_cast<RejReason>(load_be16(d + 10));
  get_bytes(d, 12, m.ari);
  get_bytes(d, 84, m.private_data);
  return m;
}

void put(std::uint8_t* d, const RepMsg& m) {
  store_be32(d + 0, m.local_comm_id);
  store_be32(d + 4, m.remote_comm_id);
  store_be32(d + 8, m.local_qkey);
  store_be24(d + 12, m.local_qpn.raw());
  d[15] = u8(m.vendor_id >> 16);
  store_be24(d + 16, m.local_eecn);
  d[19] = u8(m.vendor_id >> 8);
  store_be24(d + 20, m.starting_psn.raw());
  d[23] = u8(m.vendor_id);
  d[24] = m.responder_resources;
  d[25] = m.initiator_depth;
  set_bits(d, 26, 0, 5, m.target_ack_delay);
  set_bits(d, 26, 5, 2, m.failover_accepted);
  set_bits(d, 26, 7, 1, m.e2e_flow_control);
  set_bits(d, 27, 0, 3, m.rnr_retry_count);
  set_bits(d, 27, 3, 1, m.srq);
  store_be64(d + 28, m.local_ca_guid);
  put_bytes(d, 36, m.private_data);
}

RepMsg get_rep(const std::uint8_t* d) {
  RepMsg m;
  m.local_comm_id = load_be32(d + 0);
  m.remote_comm_id = load_be32(d + 4);
  m.local_qkey = load_be32(d + 8);
  m.local_qpn = Qpn(load_be24(d + 12));
  m.local_eecn = load_be24(d + 16);
  m.starting_psn = Psn(load_be24(d + 20));
  m.vendor_id = (std::uint32_t{d[15]} << 16) | (std::uint32_t{d[19]} << 8) | d[23];
  m.responder_resources = d[24];
  m.initiator_depth = d[25];
  m.target_ack_delay = u8(get_bits(d, 26, 0, 5));
  m.failover_accepted = u8(get_bits(d, 26, 5, 2));
  m.e2e_flow_control = get_bits(d, 26, 7, 1) != 0;
  m.rnr_retry_count = u8(get_bits(d, 27, 0, 3));
  m.srq = get_bits(d, 27, 3, 1) != 0;
  m.local_ca_guid = load_be64(d + 28);
  get_bytes(d, 36, m.private_data);
  return m;
}

void put(std::uint8_t* d, const RtuMsg& m) {
  store_be32(d + 0, m.local_comm_id);
  store_be32(d + 4, m.remote_comm_id);
  put_bytes(d, 8, m.private_data);
}

RtuMsg get_rtu(const std::uint8_t* d) {
  RtuMsg m;
  m.local_comm_id = load_be32(d + 0);
  m.remote_comm_id = load_be32(d + 4);
  get_bytes(d, 8, m.private_data);
  return m;
}

void put(std::uint8_t* d, const DreqMsg& m) {
  store_be32(d + 0, m.local_comm_id);
  store_be32(d + 4, m.remote_comm_id);
  store_be24(d + 8, m.remote_qpn.raw());
  put_bytes(d, 12, m.private_data);
}

DreqMsg get_dreq(const std::uint8_t* d) {
  DreqMsg m;
  m.local_comm_id = load_be32(d + 0);
  m.remote_comm_id = load_be32(d + 4);
  m.remote_qpn = Qpn(load_be24(d + 8));
  get_bytes(d, 12, m.private_data);
  return m;
}

void put(std::uint8_t* d, const DrepMsg& m) {
  store_be32(d + 0, m.local_comm_id);
  store_be32(d + 4, m.remote_comm_id);
  put_bytes(d, 8, m.private_data);
}

DrepMsg get_drep(const std::uint8_t* d) {
  DrepMsg m;
  m.local_comm_id = load_be32(d + 0);
  m.remote_comm_id = load_be32(d + 4);
  get_bytes(d, 8, m.private_data);
  return m;
}

void put(std::uint8_t* d, const SidrReqMsg& m) {
  store_be32(d + 0, m.request_id);
  store_be16(d + 4, m.pkey);
  store_be64(d + 8, m.service_id);
  put_bytes(d, 16, m.private_data);
}

SidrReqMsg get_sidr_req(const std::uint8_t* d) {
  SidrReqMsg m;
  m.request_id = load_be32(d + 0);
  m.pkey = load_be16(d + 4);
  m.service_id = load_be64(d + 8);
  get_bytes(d, 16, m.private_data);
  return m;
}

void put(std::uint8_t* d, const SidrRepMsg& m) {
  store_be32(d + 0, m.request_id);
  d[4] = static_cast<std::uint8_t>(m.status);
  d[5] = m.additional_info_length;
  store_be16(d + 6, static_cast<std::uint16_t>(m.vendor_id >> 8));
  store_be24(d + 8, m.qpn.raw());
  d[11] = u8(m.vendor_id);
  store_be64(d + 12, m.service_id);
  store_be32(d + 20, m.qkey);
  put_bytes(d, 24, m.additional_info);
  put_bytes(d, 96, m.private_data);
}

SidrRepMsg get_sidr_rep(const std::uint8_t* d) {
  SidrRepMsg m;
  m.request_id = load_be32(d + 0);
  m.status = static_cast<SidrStatus>(d[4]);
  m.additional_info_length = d[5];
  m.vendor_id = (std::uint32_t{load_be16(d + 6)} << 8) | d[11];
  m.qpn = Qpn(load_be24(d + 8));
  m.service_id = load_be64(d + 12);
  m.qkey = load_be32(d + 20);
  get_bytes(d, 24, m.additional_info);
  get_bytes(d, 96, m.private_data);
  return m;
}

}  // namespace

std::string_view to_string(AttrId a) {
  switch (a) {
    case AttrId::kClassPortInfo:
      return "ClassPortInfo";
    case AttrId::kReq:
      return "REQ";
    case AttrId::kMra:
      return "MRA";
    case AttrId::kRej:
      return "REJ";
    case AttrId::kRep:
      return "REP";
    case AttrId::kRtu:
      return "RTU";
    case AttrId::kDreq:
      return "DREQ";
    case AttrId::kDrep:
      return "DREP";
    case AttrId::kSidrReq:
      return "SIDR_REQ";
    case AttrId::kSidrRep:
      return "SIDR_REP";
    case AttrId::kLap:
      return "LAP";
    case AttrId::kApr:
      return "APR";
  }
  return "unknown";
}

std::string_view to_string(MadError e) {
  switch (e) {
    case MadError::kOk:
      return "ok";
    case MadError::kTruncated:
      return "MAD shorter than 256 bytes";
    case MadError::kTooLong:
      return "MAD longer than 256 bytes";
    case MadError::kBadBaseVersion:
      return "base version is not 1";
    case MadError::kNotCm:
      return "management class is not CM (0x07)";
    case MadError::kBadClassVersion:
      return "CM class version is not 2";
    case MadError::kBadMethod:
      return "method is not Send (0x03)";
    case MadError::kUnsupportedAttribute:
      return "CM attribute not supported";
    case MadError::kUnknownAttribute:
      return "unknown CM attribute";
    case MadError::kBadField:
      return "field out of range";
  }
  return "unknown";
}

AttrId attr_id_of(const CmMsg& msg) {
  static constexpr AttrId kIds[] = {AttrId::kReq,  AttrId::kMra,     AttrId::kRej,
                                    AttrId::kRep,  AttrId::kRtu,     AttrId::kDreq,
                                    AttrId::kDrep, AttrId::kSidrReq, AttrId::kSidrRep};
  static_assert(std::size(kIds) == std::variant_size_v<CmMsg>);
  return kIds[msg.index()];
}

MadBuf encode(const MadHeader& hdr, const CmMsg& msg) {
  MadBuf b{};
  std::uint8_t* p = b.data();
  p[0] = hdr.base_version;
  p[1] = hdr.mgmt_class;
  p[2] = hdr.class_version;
  p[3] = hdr.method;
  store_be16(p + 4, hdr.status);
  store_be16(p + 6, hdr.class_specific);
  store_be64(p + 8, hdr.tid);
  store_be16(p + 16, static_cast<std::uint16_t>(attr_id_of(msg)));
  store_be32(p + 20, hdr.attr_mod);
  std::visit([d = p + kMadHeaderSize](const auto& m) { put(d, m); }, msg);
  return b;
}

MadError decode_header(std::span<const std::uint8_t> mad, MadHeader& out) {
  if (mad.size() < kMadSize) return MadError::kTruncated;
  if (mad.size() > kMadSize) return MadError::kTooLong;
  const std::uint8_t* p = mad.data();
  out.base_version = p[0];
  out.mgmt_class = p[1];
  out.class_version = p[2];
  out.method = p[3];
  out.status = load_be16(p + 4);
  out.class_specific = load_be16(p + 6);
  out.tid = load_be64(p + 8);
  out.attr_id = static_cast<AttrId>(load_be16(p + 16));
  out.attr_mod = load_be32(p + 20);
  if (out.base_version != kMadBaseVersion) return MadError::kBadBaseVersion;
  if (out.mgmt_class != kMgmtClassCm) return MadError::kNotCm;
  if (out.class_version != kCmClassVersion) return MadError::kBadClassVersion;
  if (out.method != kMethodSend) return MadError::kBadMethod;
  return MadError::kOk;
}

DecodedMad decode(std::span<const std::uint8_t> mad) {
  DecodedMad r;
  r.error = decode_header(mad, r.hdr);
  if (r.error != MadError::kOk) return r;
  const std::uint8_t* d = mad.data() + kMadHeaderSize;
  switch (r.hdr.attr_id) {
    case AttrId::kReq:
      r.msg = get_req(d);
      break;
    case AttrId::kMra: {
      MraMsg m = get_mra(d);
      if (static_cast<unsigned>(m.message_mraed) > 2) r.error = MadError::kBadField;
      r.msg = m;
      break;
    }
    case AttrId::kRej: {
      RejMsg m = get_rej(d);
      if (static_cast<unsigned>(m.message_rejected) > 2 || m.reject_info_length > kRejAriSize)
        r.error = MadError::kBadField;
      r.msg = m;
      break;
    }
    case AttrId::kRep:
      r.msg = get_rep(d);
      break;
    case AttrId::kRtu:
      r.msg = get_rtu(d);
      break;
    case AttrId::kDreq:
      r.msg = get_dreq(d);
      break;
    case AttrId::kDrep:
      r.msg = get_drep(d);
      break;
    case AttrId::kSidrReq:
      r.msg = get_sidr_req(d);
      break;
    case AttrId::kSidrRep: {
      SidrRepMsg m = get_sidr_rep(d);
      if (m.additional_info_length > kSidrRepInfoSize) r.error = MadError::kBadField;
      r.msg = m;
      break;
    }
    case AttrId::kClassPortInfo:
    case AttrId::kLap:
    case AttrId::kApr:
      r.error = MadError::kUnsupportedAttribute;
      break;
    default:
      r.error = MadError::kUnknownAttribute;
      break;
  }
  return r;
}

std::uint16_t ephemeral_port() {
  static thread_local std::mt19937 rng(std::random_device{}());
  return static_cast<std::uint16_t>(32768 + rng() % (60999 - 32768 + 1));
}

CmaHeader CmaHeader::ipv4(Ipv4Addr src, std::uint16_t sport, Ipv4Addr dst) {
  CmaHeader h;
  h.ip_version = 4;
  h.src_port = sport;
  store_be32(h.src_ip.b.data() + 12, src.v);
  store_be32(h.dst_ip.b.data() + 12, dst.v);
  return h;
}

CmaHeader CmaHeader::ipv6(const Ipv6Addr& src, std::uint16_t sport, const Ipv6Addr& dst) {
  CmaHeader h;
  h.ip_version = 6;
  h.src_port = sport;
  h.src_ip = src;
  h.dst_ip = dst;
  return h;
}

void encode_cma_header(const CmaHeader& h, std::span<std::uint8_t, kCmaHeaderSize> out) {
  std::uint8_t* p = out.data();
  p[0] = h.version;
  p[1] = static_cast<std::uint8_t>(h.ip_version << 4);
  store_be16(p + 2, h.src_port);
  put_bytes(p, 4, h.src_ip.b);
  put_bytes(p, 20, h.dst_ip.b);
}

std::optional<CmaHeader> decode_cma_header(std::span<const std::uint8_t, kCmaHeaderSize> in) {
  const std::uint8_t* p = in.data();
  CmaHeader h;
  h.version = p[0];
  h.ip_version = p[1] >> 4;
  if (h.version != 0 || (h.ip_version != 4 && h.ip_version != 6)) return std::nullopt;
  h.src_port = load_be16(p + 2);
  get_bytes(p, 4, h.src_ip.b);
  get_bytes(p, 20, h.dst_ip.b);
  return h;
}

}  // namespace roce::cm
