/// @file
/// Whole RoCEv2 frames: a builder that writes Ethernet [802.1Q] | IPv4 or IPv6 | UDP | BTH |
/// extension headers | payload | pad | ICRC into a caller's buffer, and a parser that checks a
/// received frame layer by layer and returns a named Verdict. The parser never throws, never
/// allocates and never reads outside the span it is given.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include "dataplane/wire/aeth.h"
#include "dataplane/wire/atomiceth.h"
#include "dataplane/wire/bth.h"
#include "dataplane/wire/bytes.h"
#include "dataplane/wire/crc_fold.h"
#include "dataplane/wire/deth.h"
#include "dataplane/wire/eth.h"
#include "dataplane/wire/icrc.h"
#include "dataplane/wire/ip.h"
#include "dataplane/wire/opcode_table.h"
#include "dataplane/wire/reth.h"
#include "dataplane/wire/udp.h"

namespace roce::wire {

/// Everything the builder needs to know about one frame. Extension-header fields are used only
/// when the opcode's table entry says the header is present.
struct FrameSpec {
  // L2
  MacAddr src_mac, dst_mac;
  std::optional<std::uint16_t> vlan_id;  ///< adds an 802.1Q tag when set
  std::uint8_t vlan_pcp = 0;
  // L3
  IpVersion ip_version = IpVersion::kV4;
  Ipv4Addr src_ip4, dst_ip4;
  Ipv6Addr src_ip6, dst_ip6;
  std::uint8_t tos = 0;   ///< IPv4 TOS or IPv6 traffic class (DSCP << 2 | ECN)
  std::uint8_t ttl = 64;  ///< IPv4 TTL or IPv6 hop limit
  std::uint16_t ip_id = 0;
  bool ip_checksum = true;       ///< false: the IPv4 checksum is left 0 for the NIC (TX offload)
  std::uint32_t flow_label = 0;  ///< IPv6 only
  // L4
  std::uint16_t udp_sport = 0xC000;
  std::uint16_t udp_dport = kRoceV2Port;
  // BTH
  Opcode opcode = Opcode::kRcSendOnly;
  bool se = false;
  bool mig_req = false;
  std::uint16_t pkey = kDefaultPkey;
  bool fecn = false;
  bool becn = false;
  Qpn dest_qp;
  bool ack_req = false;
  Psn psn;
  // Extension headers
  struct {
    std::uint64_t va = 0;
    std::uint32_t rkey = 0;
    std::uint32_t dma_len = 0;
  } reth;
  struct {
    Syndrome syndrome = Syndrome::ack();
    Msn msn;
  } aeth;
  struct {
    std::uint64_t va = 0;
    std::uint32_t rkey = 0;
    std::uint64_t swap_add = 0;
    std::uint64_t compare = 0;
  } atomic;
  std::uint64_t atomic_orig = 0;
  std::uint32_t imm = 0;
  std::uint32_t ieth_rkey = 0;
  struct {
    std::uint32_t qkey = 0;
    Qpn src_qp;
  } deth;
  struct {
    std::uint8_t selectivity = 0;
    std::uint8_t placement_type = 0;
  } feth;
};

/// Bytes from the start of the frame to the end of the last extension header.
std::size_t frame_header_len(const FrameSpec& spec);
/// Pad bytes after a payload of `payload_len` (IBA 9.2: PadCnt = (-len) mod 4).
constexpr unsigned pad_for(std::size_t payload_len) {
  return static_cast<unsigned>((4 - (payload_len & 3)) & 3);
}
/// Whole frame length (no Ethernet FCS) for a payload of `payload_len` bytes.
std::size_t frame_len(const FrameSpec& spec, std::size_t payload_len);

/// Writes every header (Ethernet to the last extension header) of a frame that will carry
/// `payload_len` bytes. Returns the header length, or 0 under the same conditions as
/// build_frame(). The caller puts the payload at out[header length] (from wherever it lives)
/// and then calls finish_frame().
std::size_t write_frame_headers(const FrameSpec& spec, std::size_t payload_len,
                                std::span<std::uint8_t> out);
/// Writes the pad and the ICRC (and, over IPv6, the UDP checksum) after a payload placed by the
/// caller. Returns the frame length.
std::size_t finish_frame(const FrameSpec& spec, std::size_t hdr_len, std::size_t payload_len,
                         std::span<std::uint8_t> out);

/// Zero-copy form of finish_frame(), IPv4 only (over IPv6 the UDP checksum covers the payload):
/// `headers` are the frame's headers as write_frame_headers() left them, `payload` the pieces
/// of the payload wherever they live. Writes the pad and the ICRC to `trailer` (room for 8
/// bytes) and returns how many bytes it wrote there; 0 for an IPv6 frame.
std::size_t finish_frame_pieces(const FrameSpec& spec, std::span<const std::uint8_t> headers,
                                std::span<const std::span<const std::uint8_t>> payload,
                                std::uint8_t* trailer);

/// Writes a complete frame into `out`. Returns its length, or 0 when `out` is too small, the
/// opcode is unknown, or the payload does not fit the opcode (e.g. payload on an ACK).
std::size_t build_frame(const FrameSpec& spec, std::span<const std::uint8_t> payload,
                        std::span<std::uint8_t> out);

/// What the parser concluded. Every drop reason has its own value so that counters can name it.
enum class Verdict : std::uint8_t {
  kOk,
  kTruncated,     ///< the buffer ends inside a header, or before the IP length says
  kNotIp,         ///< EtherType is neither IPv4 nor IPv6
  kBadIpVersion,  ///< version nibble disagrees with the EtherType
  kIpOptions,     ///< IPv4 IHL != 5 (RoCE carries no options; the ICRC assumes 20 bytes)
  kBadIpChecksum,
  kBadIpLength,   ///< IPv4 total length below the header length
  kIpFragment,    ///< MF set or nonzero fragment offset
  kNotUdp,        ///< protocol / next header is not UDP (IPv6 extension headers included)
  kBadUdpLength,  ///< UDP length disagrees with the IP length
  kWrongUdpPort,  ///< destination port is not the RoCEv2 port
  kBadTver,       ///< BTH transport header version != 0
  kUnknownOpcode,
  kBadTransportLength,  ///< UDP payload too short for BTH + extension headers + ICRC
  kBadPadCount,         ///< more pad than payload bytes, or pad on an opcode without payload
  kBadPayloadLength,    ///< payload on an opcode that has none, or not the opcode's fixed size
  kBadIcrc,
  kCount_
};
inline constexpr std::size_t kVerdictCount = static_cast<std::size_t>(Verdict::kCount_);
std::string_view to_string(Verdict v);

struct ParseOptions {
  bool verify_icrc = true;
  bool verify_ip_checksum = true;  ///< off when the NIC already checked it
  std::uint16_t udp_port = kRoceV2Port;
};

/// A parsed frame: where each layer starts and the BTH fields every stage needs (rxe_pkt_info).
/// Valid only while the frame's bytes are.
struct RxPkt {
  const std::uint8_t* frame = nullptr;
  std::uint16_t frame_len = 0;  ///< bytes covered by the IP length (Ethernet padding excluded)
  std::uint16_t l3_off = 0;
  std::uint16_t l4_off = 0;
  std::uint16_t bth_off = 0;
  std::uint16_t payload_off = 0;
  std::uint16_t payload_len = 0;  ///< without pad
  std::uint8_t pad = 0;
  IpVersion ip_version = IpVersion::kV4;
  bool has_vlan = false;
  std::uint16_t vlan_id = 0;
  std::uint8_t ecn = 0;
  Opcode opcode{};
  const OpcodeInfo* info = nullptr;
  Qpn dest_qp;
  Psn psn;
  bool ack_req = false;
  std::uint32_t icrc = 0;  ///< as received

  ConstEthView eth() const { return ConstEthView(frame); }
  ConstIpv4View ipv4() const { return ConstIpv4View(frame + l3_off); }
  ConstIpv6View ipv6() const { return ConstIpv6View(frame + l3_off); }
  ConstUdpView udp() const { return ConstUdpView(frame + l4_off); }
  ConstBthView bth() const { return ConstBthView(frame + bth_off); }
  const std::uint8_t* ext(Ext e) const { return frame + bth_off + info->offset(e); }
  ConstRethView reth() const { return ConstRethView(ext(Ext::kReth)); }
  ConstAethView aeth() const { return ConstAethView(ext(Ext::kAeth)); }
  ConstAtomicEthView atomic_eth() const { return ConstAtomicEthView(ext(Ext::kAtomicEth)); }
  ConstAtomicAckEthView atomic_ack_eth() const {
    return ConstAtomicAckEthView(ext(Ext::kAtomicAckEth));
  }
  ConstImmDtView immdt() const { return ConstImmDtView(ext(Ext::kImmDt)); }
  ConstIethView ieth() const { return ConstIethView(ext(Ext::kIeth)); }
  ConstDethView deth() const { return ConstDethView(ext(Ext::kDeth)); }
  ConstFethView feth() const { return ConstFethView(ext(Ext::kFeth)); }
  ConstCnpPadView cnp_pad() const { return ConstCnpPadView(ext(Ext::kCnpPad)); }
  std::span<const std::uint8_t> payload() const { return {frame + payload_off, payload_len}; }
};

/// Checks `frame` (starting at the Ethernet header, no FCS) and fills `out` when the verdict
/// is kOk. `out` may be partly filled otherwise.
Verdict parse_frame(std::span<const std::uint8_t> frame, RxPkt& out, const ParseOptions& opts = {});

namespace detail {
// Payload rules that do not depend on the path MTU (that check belongs to the transport).
inline bool payload_fits(const OpcodeInfo& info, std::size_t payload_len) {
  if (!info.mask.has(OpMask::kPayload)) return payload_len == 0;
  if (info.fixed_payload != 0) return payload_len == info.fixed_payload;
  return true;
}

inline std::uint64_t load_le64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// The common frame, untagged IPv4 without options or fragments carrying UDP to the RoCE port,
// checked in a few word compares: the same checks as the field-by-field path (parse_frame),
// in one pass without its branches for VLAN and IPv6. False (`out` untouched) when any of them
// fails or the frame is of another kind: the caller takes that path, which names the drop's
// verdict; so whichever path a frame takes, its verdict and `out` are the same.
[[gnu::always_inline]] inline bool parse_ipv4_fast(const std::uint8_t* p, std::size_t n, RxPkt& out,
                                                   const ParseOptions& opts, Verdict& v) {
  if constexpr (std::endian::native != std::endian::little) return false;
  constexpr std::size_t kL3 = EthView::kSize, kL4 = kL3 + Ipv4View::kSize;
  constexpr std::size_t kBth = kL4 + UdpView::kSize;
  if (n < kBth + kBthSize + kIcrcSize) return false;
  // Bytes 12-19: EtherType, version and IHL, (TOS, total length, ID); 20-27: flags and
  // fragment offset (DF not looked at), (TTL), protocol, (checksum, source address).
  const std::uint64_t a = load_le64(p + 12), b = load_le64(p + 20);
  if ((a & 0xFF'FFFFu) != 0x45'0008u || (b & 0xFF00'FF3Fu) != 0x1100'0000u) return false;
  const std::size_t total = load_be16(p + kL3 + 2);
  // Room for UDP, BTH and ICRC (shorter ones get their verdict from the slow path).
  if (total < Ipv4View::kSize + UdpView::kSize + kBthSize + kIcrcSize || n < kL3 + total)
    return false;
  if (opts.verify_ip_checksum && !ipv4_header_checksum_ok(p + kL3)) return false;
  // UDP length, destination port; BTH TVer.
  if (load_be16(p + kL4 + 4) != total - Ipv4View::kSize ||
      load_be16(p + kL4 + 2) != opts.udp_port || (p[kBth + 1] & 0x0F) != 0)
    return false;
  const OpcodeInfo& info = opcode_info(p[kBth]);
  const std::size_t end = kL3 + total;  // one past the ICRC
  if (!info.valid() || end < kBth + info.hdr_len + kIcrcSize) return false;
  const std::size_t with_pad = end - kIcrcSize - kBth - info.hdr_len;
  const unsigned pad = (p[kBth + 1] >> 4) & 0x3u;
  if (pad > with_pad) return false;
  const std::size_t payload_len = with_pad - pad;
  if (!info.mask.has(OpMask::kPayload) && pad != 0) return false;
  if (!payload_fits(info, payload_len)) return false;
  out.has_vlan = false;
  out.l3_off = kL3;
  out.ip_version = IpVersion::kV4;
  out.ecn = static_cast<std::uint8_t>(p[kL3 + 1] & 0x3);
  out.l4_off = kL4;
  out.frame_len = static_cast<std::uint16_t>(end);
  out.bth_off = kBth;
  out.opcode = Opcode{p[kBth]};
  out.info = &info;
  const ConstBthView bth(p + kBth);
  out.dest_qp = bth.dest_qp();
  out.psn = bth.psn();
  out.ack_req = bth.ack_req();
  out.payload_off = static_cast<std::uint16_t>(kBth + info.hdr_len);
  out.payload_len = static_cast<std::uint16_t>(payload_len);
  out.pad = static_cast<std::uint8_t>(pad);
  out.icrc = load_le32(p + end - kIcrcSize);
  // (compute_icrc's short-frame case, without its call and tests)
  const std::size_t icrc_len = end - kIcrcSize - kL3;
  v = opts.verify_icrc && (icrc_len < kCrcFoldMax && kCrcFoldUsable
                               ? crc32_fold_or(kIcrcSeed, p + kL3, icrc_len, kIcrcOrMaskV4)
                               : compute_icrc(p + kL3, icrc_len, IpVersion::kV4)) != out.icrc
          ? Verdict::kBadIcrc
          : Verdict::kOk;
  return true;
}
}  // namespace detail

/// parse_frame() with its common case inline (Engine::receive: one call less per frame).
[[gnu::always_inline]] inline Verdict parse_frame_inline(std::span<const std::uint8_t> frame,
                                                         RxPkt& out, const ParseOptions& opts) {
  if (Verdict v; detail::parse_ipv4_fast(frame.data(), frame.size(), out, opts, v)) {
    out.frame = frame.data();
    return v;
  }
  return parse_frame(frame, out, opts);
}

}  // namespace roce::wire
