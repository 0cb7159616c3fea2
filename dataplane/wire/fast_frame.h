/// @file
/// The per-packet fast paths' wire side (issue 33): a one-packet request (SEND Only, WRITE Only
/// and their immediate and invalidate forms) written straight from its fields over an untagged
/// IPv4 path template, and the expected header of what a connected QP receives, compared in a
/// few vector operations instead of field by field.
///
/// Both cover the common case only and say so: write_request_only() is write_masked_frame()
/// with the opcode known at compile time (the bytes are the same: tests compare them), and a
/// frame that matches an RxExpect still has its lengths, IP checksum, opcode, PSN and ICRC
/// checked by the caller; anything else takes the general path.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "dataplane/wire/crc_fold.h"
#include "dataplane/wire/icrc.h"
#include "dataplane/wire/path_template.h"

namespace roce::wire {

/// Offsets of an untagged IPv4 RoCEv2 frame, the only shape the fast paths handle.
inline constexpr std::size_t kFastL3 = 14;
inline constexpr std::size_t kFastL4 = kFastL3 + 20;
inline constexpr std::size_t kFastBth = kFastL4 + 8;

/// A one-packet request's per-packet fields. `reth_*` are used when the opcode has a RETH,
/// `imm` as its ImmDt or IETH.
struct OnlyFields {
  std::uint16_t ip_id = 0;
  bool se = false;
  std::uint32_t psn = 0;  ///< 24 bits
  std::uint64_t reth_va = 0;
  std::uint32_t reth_rkey = 0;
  std::uint32_t reth_len = 0;
  std::uint32_t imm = 0;
};

/// The template's Ethernet, IPv4 and UDP headers (and 6 bytes more) into `out`, as three
/// 16-byte moves.
[[gnu::always_inline]] inline void copy_template_headers(const PathTemplate& t, std::uint8_t* out) {
  static_assert(sizeof(t.bytes) == 48);
#if defined(__SSE2__)
  for (int i = 0; i < 3; ++i)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out) + i,
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(t.bytes.data()) + i));
#else
  std::memcpy(out, t.bytes.data(), sizeof(t.bytes));
#endif
}

/// Whether `t` is a path write_request_only() writes: IPv4 and untagged.
inline bool fast_tx_path(const PathTemplate& t) { return t.usable() && t.l3_off == kFastL3; }

/// Writes the whole frame of a one-packet request with opcode `kOp` (AckReq set: it is the
/// last packet of its message) and `len` payload bytes from `payload`, over a template for which
/// fast_tx_path() holds; `len` is at most 4096. Returns the frame length. The bytes are those of
/// write_masked_frame() with the same fields (tests/unit/wire/fast_frame_test.cc).
/// `fold_usable`: kCrcFoldUsable, read once by a caller that writes many frames.
template <Opcode kOp>
[[gnu::always_inline]] inline std::size_t write_request_only(const PathTemplate& t,
                                                             const OnlyFields& f,
                                                             const std::uint8_t* payload,
                                                             std::uint32_t len, std::uint8_t* out,
                                                             bool fold_usable = kCrcFoldUsable) {
  constexpr const OpcodeInfo& info = kOpcodeTable[raw(kOp)];
  static_assert(info.valid() && !info.mask.any(kSlowExts) && info.mask.has(OpMask::kPayload) &&
                info.mask.has(OpMask::kStart) && info.mask.has(OpMask::kEnd));
  constexpr std::size_t hdr = info.hdr_len;
  const unsigned pad = pad_for(len);
  const std::size_t l4 = detail::kUdp + hdr + len + pad + kIcrcSize;
  copy_template_headers(t, out);
  std::uint8_t* l3 = out + kFastL3;
  const auto total = static_cast<std::uint32_t>(detail::kIpv4 + l4);
  store_be32(l3 + 2, total << 16 | f.ip_id);  // total length, ID
  store_be16(l3 + detail::kIpv4 + 4, static_cast<std::uint16_t>(l4));
  std::uint8_t* bth = out + kFastBth;
  store_be32(bth, std::uint32_t{raw(kOp)} << 24 |
                      std::uint32_t{(f.se ? 0x80u : 0u) | (pad << 4)} << 16 | t.pkey);
  store_be32(bth + 4, 0xFF00'0000u | t.dest_qp.raw());  // FECN, BECN, reserved: masked
  store_be32(bth + 8, 0x8000'0000u | f.psn);
  if constexpr (info.has(Ext::kReth)) {
    std::uint8_t* r = bth + info.offset(Ext::kReth);
    store_be64(r, f.reth_va);
    store_be32(r + 8, f.reth_rkey);
    store_be32(r + 12, f.reth_len);
  }
  if constexpr (info.has(Ext::kImmDt)) store_be32(bth + info.offset(Ext::kImmDt), f.imm);
  if constexpr (info.has(Ext::kIeth)) store_be32(bth + info.offset(Ext::kIeth), f.imm);
  std::size_t off = kFastBth + hdr;
  copy_payload(out + off, payload, len);
  off += len;
  store_le32(out + off, 0);  // the pad, before the ICRC overwrites the rest
  off += pad;
  const std::size_t n = off - kFastL3;
  store_le32(out + off,
             n < kCrcFoldMax && fold_usable ? icrc_fold_v4(l3, n) : crc32_zlib(kIcrcSeed, l3, n));
  // detail::unmask(), the checksum from the values just written.
  l3[detail::kTos] = t.tos;
  l3[detail::kTtl] = t.ttl;
  const std::uint32_t sum = detail::fold(t.ip_sum + total + f.ip_id);
  store_be16(l3 + detail::kIpSum, t.ip_checksum ? static_cast<std::uint16_t>(~sum) : 0);
  store_be16(l3 + detail::kUdpSum, 0);
  l3[detail::kBthEcn] = 0;
  return off + kIcrcSize;
}

/// The headers of a zero-copy request packet that is not the first of its message (SEND or
/// WRITE Middle or Last, their immediate and invalidate forms: a BTH and at most a 4-byte
/// ImmDt or IETH, `ext`), with `len` payload bytes that stay in registered memory, over a
/// template for which fast_tx_path() holds. The ICRC-masked fields are ones until
/// finish_zero_copy(). Returns the header length. The bytes are those of
/// write_masked_headers() with the same fields (tests/unit/wire/fast_frame_test.cc).
[[gnu::always_inline]] inline std::size_t write_zero_copy_headers(
    const PathTemplate& t, Opcode op, bool se, bool ack_req, std::uint32_t psn, std::uint16_t ip_id,
    std::uint32_t ext, std::uint32_t len, std::uint8_t* out) {
  const OpcodeInfo& info = kOpcodeTable[raw(op)];
  const std::size_t hdr = info.hdr_len;  // 12, or 16 with ImmDt or IETH
  const unsigned pad = pad_for(len);
  const std::size_t l4 = detail::kUdp + hdr + len + pad + kIcrcSize;
  copy_template_headers(t, out);
  std::uint8_t* l3 = out + kFastL3;
  store_be32(l3 + 2, static_cast<std::uint32_t>(detail::kIpv4 + l4) << 16 | ip_id);
  store_be16(l3 + detail::kIpv4 + 4, static_cast<std::uint16_t>(l4));
  std::uint8_t* bth = out + kFastBth;
  store_be32(bth, std::uint32_t{raw(op)} << 24 |
                      std::uint32_t{(se ? 0x80u : 0u) | (pad << 4)} << 16 | t.pkey);
  store_be32(bth + 4, 0xFF00'0000u | t.dest_qp.raw());  // FECN, BECN, reserved: masked
  store_be32(bth + 8, (ack_req ? 0x8000'0000u : 0u) | psn);
  if (hdr > kBthSize) store_be32(bth + kBthSize, ext);
  return kFastBth + hdr;
}

/// write_zero_copy_headers() for an opcode with a RETH (WRITE First, WRITE Only, WRITE Only
/// with Immediate: `ext` its ImmDt): the first packet of a WRITE, or with selective repeat any
/// packet of one (each a WRITE Only with its own RETH). The bytes are those of
/// write_masked_headers() with the same fields (tests/unit/wire/fast_frame_test.cc).
[[gnu::always_inline]] inline std::size_t write_zero_copy_headers_reth(
    const PathTemplate& t, Opcode op, bool se, bool ack_req, std::uint32_t psn, std::uint16_t ip_id,
    std::uint64_t va, std::uint32_t rkey, std::uint32_t dma_len, std::uint32_t ext,
    std::uint32_t len, std::uint8_t* out) {
  const std::size_t end = write_zero_copy_headers(t, op, se, ack_req, psn, ip_id, 0, len, out);
  std::uint8_t* r = out + kFastBth + kBthSize;
  store_be64(r, va);
  store_be32(r + 8, rkey);
  store_be32(r + 12, dma_len);
  if (end > kFastBth + kBthSize + kRethSize) store_be32(r + kRethSize, ext);
  return end;
}

/// After write_zero_copy_headers(): the ICRC over the headers (`hdr` bytes at `out`) and the
/// `len` payload bytes at `payload`, in one pass over each; pad and ICRC to `trailer` (8 bytes
/// of room), the masked fields' real values into the headers. Returns the trailer's length.
[[gnu::always_inline]] inline std::size_t finish_zero_copy(const PathTemplate& t, std::uint8_t* out,
                                                           std::size_t hdr,
                                                           const std::uint8_t* payload,
                                                           std::uint32_t len, std::uint8_t* trailer,
                                                           bool fold_usable = kCrcFoldUsable) {
  std::uint8_t* l3 = out + kFastL3;
  const std::size_t n = hdr - kFastL3;  // 40 or 44: the fold kernel's sizes
  std::uint32_t crc = fold_usable ? icrc_fold_v4(l3, n) : crc32_zlib(kIcrcSeed, l3, n);
  crc = crc32_zlib(crc, payload, len);
  const unsigned pad = pad_for(len);
  store_le32(trailer, 0);
  if (pad != 0) crc = crc32_zlib(crc, trailer, pad);
  store_le32(trailer + pad, crc);
  detail::unmask(t, l3);
  return pad + kIcrcSize;
}

/// What the next request to a connected QP looks like up to its BTH's DestQP, as far as the
/// receive path checks it: Ethernet addressed from the peer's MAC to ours, untagged, IPv4
/// without options or fragments from the peer's address to ours, UDP to the RoCEv2 port, BTH
/// TVer 0, a full-member P_Key, this QP. The fields a sender or the path may vary (TOS, total
/// length, ID, DF, TTL, IP and UDP checksums, UDP source port, the opcode, SE, MigReq, pad,
/// FECN/BECN) are masked out; the caller checks the ones that matter.
struct RxExpect {
  static constexpr std::size_t kSize = 48;
  alignas(16) std::array<std::uint8_t, kSize> bytes{};
  bool armed = false;  ///< false: every frame to this QP takes the general path
};

/// The bits of the first RxExpect::kSize bytes the compare looks at.
alignas(16) inline constexpr std::array<std::uint8_t, RxExpect::kSize> kRxExpectMask = {
    // Ethernet: destination, source, EtherType
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    // IPv4: version/IHL, (TOS), (total length), (ID), MF and fragment offset (not DF), (TTL),
    // protocol, (checksum), source, destination
    0xFF, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3F, 0xFF, 0x00, 0xFF, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 0xFF, 0xFF, 0xFF,
    // UDP: (source port), destination port, (length), (checksum)
    0x00, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00,
    // BTH: (opcode), TVer (not SE, MigReq, pad), P_Key's low 15 bits, (FECN, BECN), DestQP's
    // high byte
    0x00, 0x0F, 0x7F, 0xFF, 0x00, 0xFF};

/// The expected header of requests to QP `qpn` from `peer` to `self` (addresses as FrameSpec
/// names them: src_* ours, dst_* the peer's).
RxExpect make_rx_expect(const FrameSpec& path, std::uint32_t qpn);

/// True when the first RxExpect::kSize bytes of `p` (which must be readable) match `e` under
/// kRxExpectMask.
[[gnu::always_inline]] inline bool rx_expect_match(const RxExpect& e, const std::uint8_t* p) {
#if defined(__SSE2__)
  const auto* m = reinterpret_cast<const __m128i*>(kRxExpectMask.data());
  const auto* x = reinterpret_cast<const __m128i*>(e.bytes.data());
  const auto* v = reinterpret_cast<const __m128i*>(p);
  const auto diff = [&](int i) {
    return _mm_and_si128(_mm_xor_si128(_mm_loadu_si128(v + i), _mm_load_si128(x + i)),
                         _mm_load_si128(m + i));
  };
  const __m128i d = _mm_or_si128(_mm_or_si128(diff(0), diff(1)), diff(2));
  return _mm_movemask_epi8(_mm_cmpeq_epi8(d, _mm_setzero_si128())) == 0xFFFF;
#else
  std::uint64_t d = 0;
  for (std::size_t i = 0; i < RxExpect::kSize; i += 8) {
    std::uint64_t v, x, m;
    std::memcpy(&v, p + i, 8);
    std::memcpy(&x, e.bytes.data() + i, 8);
    std::memcpy(&m, kRxExpectMask.data() + i, 8);
    d |= (v ^ x) & m;
  }
  return d == 0;
#endif
}

}  // namespace roce::wire
