/// @file
/// The hot-path frame writer. A QP's Ethernet, IPv4 and UDP headers are the same for every
/// packet but for three lengths, the IP ID and the IP checksum, so they are built once per
/// path (make_path_template) and each packet starts as a copy of them. The headers are first
/// written with the fields the ICRC masks set to ones, so that the ICRC is computed over the
/// frame in place (no masked copy), and the real values go in afterwards. The bytes on the
/// wire are exactly those of write_frame_headers() + finish_frame() (tests compare them).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "dataplane/wire/crc_fold.h"
#include "dataplane/wire/icrc.h"
#include "dataplane/wire/roce_frame.h"

namespace roce::wire {

struct PathTemplate {
  /// Ethernet (with the 802.1Q tag when there is one), IPv4 and UDP, masked fields as ones.
  std::array<std::uint8_t, 48> bytes{};
  std::uint8_t len = 0;  ///< 0: this path cannot use the template (IPv6)
  std::uint8_t l3_off = 0;
  std::uint8_t tos = 0;
  std::uint8_t ttl = 0;
  bool ip_checksum = true;
  std::uint32_t ip_sum = 0;  ///< one's-complement sum of the IPv4 words that never change
  std::uint16_t pkey = 0;
  Qpn dest_qp;

  bool usable() const { return len != 0; }
};

/// The template of `path` (FrameSpec's L2, L3, L4 and BTH P_Key/DestQP); unusable for IPv6.
PathTemplate make_path_template(const FrameSpec& path);

/// What changes from packet to packet.
struct PacketFields {
  Opcode opcode{};
  bool se = false;
  bool ack_req = false;
  Psn psn;
  std::uint16_t ip_id = 0;
  std::uint64_t reth_va = 0;
  std::uint32_t reth_rkey = 0;
  std::uint32_t reth_len = 0;
  std::uint32_t imm = 0;
  std::uint32_t ieth_rkey = 0;
  Syndrome aeth_syndrome = Syndrome::ack();
  Msn aeth_msn;
};

/// Extension headers the template writer leaves to write_frame_headers(), and selective
/// repeat's opcodes (their SR header opens the payload: sr_msg.cc writes it).
inline constexpr std::uint32_t kSlowExts = OpMask::kAtomicEth | OpMask::kAtomicAckEth |
                                           OpMask::kDeth | OpMask::kFeth | OpMask::kCnpPad |
                                           OpMask::kSr;

/// Whether write_masked_headers() can write `op` (BTH with RETH, ImmDt, IETH or AETH).
inline bool fast_opcode(Opcode op) {
  const OpcodeInfo& info = opcode_info(op);
  return info.valid() && !info.mask.any(kSlowExts);
}

/// Writes the headers of a packet of `payload_len` bytes from the template, the ICRC-masked
/// fields still set to ones. Returns the header length, or 0 when the opcode is not a
/// fast_opcode(), the payload does not fit it, or the template is unusable.
std::size_t write_masked_headers(const PathTemplate& t, const PacketFields& f,
                                 std::size_t payload_len, std::uint8_t* out);

/// After the payload was put at out[hdr_len]: writes pad and ICRC (computed in place) and the
/// masked fields' real values. Returns the frame length.
std::size_t finish_masked(const PathTemplate& t, std::size_t hdr_len, std::size_t payload_len,
                          std::uint8_t* out);

namespace detail {
// The pieces of write_masked_frame, inline: it is the requester's per-packet call.
constexpr std::size_t kIpv4 = 20;
constexpr std::size_t kUdp = 8;
constexpr std::uint16_t kDf = 0x4000;

// Offsets from the IPv4 header of the fields the ICRC masks.
constexpr std::size_t kTos = 1, kTtl = 8, kIpSum = 10, kUdpSum = kIpv4 + 6;
constexpr std::size_t kBthEcn = kIpv4 + kUdp + 4;

inline std::uint32_t fold(std::uint32_t sum) {
  sum = (sum & 0xFFFF) + (sum >> 16);
  return (sum & 0xFFFF) + (sum >> 16);
}

[[gnu::always_inline]] inline std::size_t masked_headers(const PathTemplate& t,
                                                         const PacketFields& f,
                                                         std::size_t payload_len,
                                                         std::uint8_t* out) {
  const OpcodeInfo& info = opcode_info(f.opcode);
  if (!t.usable() || !info.valid() || info.mask.any(kSlowExts)) return 0;
  if (!info.mask.has(OpMask::kPayload) ? payload_len != 0
                                       : info.fixed_payload && payload_len != info.fixed_payload)
    return 0;
  const unsigned pad = pad_for(payload_len);
  const std::size_t l4 = kUdp + info.hdr_len + payload_len + pad + kIcrcSize;
  if (l4 + Ipv6View::kSize > 0xFFFF) return 0;
  std::memcpy(out, t.bytes.data(), sizeof(t.bytes));  // whole array: one fixed-size copy
  std::uint8_t* l3 = out + t.l3_off;
  store_be16(l3 + 2, static_cast<std::uint16_t>(kIpv4 + l4));
  store_be16(l3 + 4, f.ip_id);
  store_be16(l3 + kIpv4 + 4, static_cast<std::uint16_t>(l4));
  std::uint8_t* bth = l3 + kIpv4 + kUdp;
  store_be32(bth, std::uint32_t{raw(f.opcode)} << 24 |
                      std::uint32_t{(f.se ? 0x80u : 0u) | (pad << 4)} << 16 | t.pkey);
  store_be32(bth + 4, 0xFF00'0000u | t.dest_qp.raw());  // FECN, BECN, reserved: masked
  store_be32(bth + 8, (f.ack_req ? 0x8000'0000u : 0u) | f.psn.raw());
  if (info.has(Ext::kReth)) {
    std::uint8_t* r = bth + info.offset(Ext::kReth);
    store_be64(r, f.reth_va);
    store_be32(r + 8, f.reth_rkey);
    store_be32(r + 12, f.reth_len);
  }
  if (info.has(Ext::kAeth)) {
    std::uint8_t* a = bth + info.offset(Ext::kAeth);
    store_be32(a, std::uint32_t{f.aeth_syndrome.raw()} << 24 | f.aeth_msn.raw());
  }
  if (info.has(Ext::kImmDt)) store_be32(bth + info.offset(Ext::kImmDt), f.imm);
  if (info.has(Ext::kIeth)) store_be32(bth + info.offset(Ext::kIeth), f.ieth_rkey);
  return t.l3_off + kIpv4 + kUdp + info.hdr_len;
}

// The real values of the masked fields, once the ICRC is known.
[[gnu::always_inline]] inline void unmask(const PathTemplate& t, std::uint8_t* l3) {
  l3[kTos] = t.tos;
  l3[kTtl] = t.ttl;
  const std::uint32_t sum = fold(t.ip_sum + load_be16(l3 + 2) + load_be16(l3 + 4));
  store_be16(l3 + kIpSum, t.ip_checksum ? static_cast<std::uint16_t>(~sum) : 0);
  store_be16(l3 + kUdpSum, 0);  // 0 over IPv4, as write_frame_headers sends it
  l3[kBthEcn] = 0;
}
}  // namespace detail

/// A whole frame in one call (the requester's hot path): write_masked_headers(), then the
/// payload copied from `payload` (`payload_len` bytes), then finish_masked(). Returns the frame
/// length, or 0 when write_masked_headers() would (nothing is written then but headers).
/// Inline: the caller's knowledge of the opcode and the template removes some of its tests.
[[gnu::always_inline]] inline std::size_t write_masked_frame(const PathTemplate& t,
                                                             const PacketFields& f,
                                                             const std::uint8_t* payload,
                                                             std::size_t payload_len,
                                                             std::uint8_t* out) {
  const std::size_t hdr = detail::masked_headers(t, f, payload_len, out);
  if (hdr == 0) return 0;
  std::size_t off = hdr;
  copy_payload(out + off, payload, payload_len);
  off += payload_len;
  const unsigned pad = pad_for(payload_len);
  store_le32(out + off, 0);  // the pad (up to 3 bytes), before the ICRC overwrites the rest
  off += pad;
  std::uint8_t* l3 = out + t.l3_off;
  const std::size_t n = static_cast<std::size_t>(out + off - l3);
  store_le32(out + off, n < kCrcFoldMax && kCrcFoldUsable ? crc32_fold(kIcrcSeed, l3, n)
                                                          : crc32_zlib(kIcrcSeed, l3, n));
  detail::unmask(t, l3);
  return off + kIcrcSize;
}

/// The zero-copy form: the payload is `pieces`, wherever they live; pad and ICRC go to
/// `trailer` (8 bytes of room). Fills in the masked fields of `headers` and returns the
/// trailer's length.
std::size_t finish_masked_pieces(const PathTemplate& t, std::span<std::uint8_t> headers,
                                 std::span<const std::span<const std::uint8_t>> pieces,
                                 std::uint8_t* trailer);

}  // namespace roce::wire
