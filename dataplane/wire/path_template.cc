/// @file
/// Hot-path frame writer (see the header). Field layouts: eth.h, ip.h, udp.h, bth.h and the
/// extension headers; masked fields: IBA Annex A17.3.3, as icrc.cc masks them.
#include "dataplane/wire/path_template.h"

#include <cstring>

#include "dataplane/wire/crc_fold.h"
#include "dataplane/wire/icrc.h"

namespace roce::wire {

namespace {
constexpr std::size_t kIpv4 = 20;
constexpr std::size_t kUdp = 8;
constexpr std::uint16_t kDf = 0x4000;

// Offsets from the IPv4 header of the fields the ICRC masks.
constexpr std::size_t kTos = 1, kTtl = 8, kIpSum = 10, kUdpSum = kIpv4 + 6;
constexpr std::size_t kBthEcn = kIpv4 + kUdp + 4;

std::uint32_t fold(std::uint32_t sum) {
  sum = (sum & 0xFFFF) + (sum >> 16);
  return (sum & 0xFFFF) + (sum >> 16);
}
}  // namespace

PathTemplate make_path_template(const FrameSpec& s) {
  PathTemplate t;
  if (s.ip_version != IpVersion::kV4) return t;
  // Any opcode will do: only the bytes up to the BTH are kept.
  FrameSpec m = s;
  m.opcode = Opcode::kRcSendOnly;
  m.ip_id = 0;
  std::array<std::uint8_t, 128> buf{};
  const std::size_t hdr = write_frame_headers(m, 0, buf);
  if (hdr == 0) return t;
  t.l3_off = static_cast<std::uint8_t>(hdr - kIpv4 - kUdp - BthView::kSize);
  t.len = static_cast<std::uint8_t>(t.l3_off + kIpv4 + kUdp);
  std::memcpy(t.bytes.data(), buf.data(), t.len);
  std::uint8_t* l3 = t.bytes.data() + t.l3_off;
  l3[kTos] = l3[kTtl] = 0xFF;
  l3[kIpSum] = l3[kIpSum + 1] = 0xFF;
  l3[kUdpSum] = l3[kUdpSum + 1] = 0xFF;
  t.tos = s.tos;
  t.ttl = s.ttl;
  t.ip_checksum = s.ip_checksum;
  t.ip_sum = (0x4500u | s.tos) + kDf + (std::uint32_t{s.ttl} << 8 | kIpProtoUdp) +
             (s.src_ip4.v >> 16) + (s.src_ip4.v & 0xFFFF) + (s.dst_ip4.v >> 16) +
             (s.dst_ip4.v & 0xFFFF);
  t.pkey = s.pkey;
  t.dest_qp = s.dest_qp;
  return t;
}

namespace {
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
}  // namespace

std::size_t write_masked_headers(const PathTemplate& t, const PacketFields& f,
                                 std::size_t payload_len, std::uint8_t* out) {
  return masked_headers(t, f, payload_len, out);
}

namespace {
// The real values of the masked fields, once the ICRC is known.
[[gnu::always_inline]] inline void unmask(const PathTemplate& t, std::uint8_t* l3) {
  l3[kTos] = t.tos;
  l3[kTtl] = t.ttl;
  const std::uint32_t sum = fold(t.ip_sum + load_be16(l3 + 2) + load_be16(l3 + 4));
  store_be16(l3 + kIpSum, t.ip_checksum ? static_cast<std::uint16_t>(~sum) : 0);
  store_be16(l3 + kUdpSum, 0);  // 0 over IPv4, as write_frame_headers sends it
  l3[kBthEcn] = 0;
}
}  // namespace

std::size_t finish_masked(const PathTemplate& t, std::size_t hdr_len, std::size_t payload_len,
                          std::uint8_t* out) {
  std::size_t off = hdr_len + payload_len;
  const unsigned pad = pad_for(payload_len);
  std::memset(out + off, 0, pad);
  off += pad;
  std::uint8_t* l3 = out + t.l3_off;
  store_le32(out + off, crc32_zlib(kIcrcSeed, l3, out + off - l3));
  unmask(t, l3);
  return off + kIcrcSize;
}

std::size_t write_masked_frame(const PathTemplate& t, const PacketFields& f,
                               const std::uint8_t* payload, std::size_t payload_len,
                               std::uint8_t* out) {
  const std::size_t hdr = masked_headers(t, f, payload_len, out);
  if (hdr == 0) return 0;
  std::size_t off = hdr;
  if (payload_len <= 16) {  // a small payload: two overlapping or eight-byte moves, no call
    std::uint8_t* d = out + off;
    if (payload_len >= 8) {
      std::uint64_t a, b;
      std::memcpy(&a, payload, 8);
      std::memcpy(&b, payload + payload_len - 8, 8);
      std::memcpy(d, &a, 8);
      std::memcpy(d + payload_len - 8, &b, 8);
    } else {
      for (std::size_t i = 0; i < payload_len; ++i) d[i] = payload[i];
    }
  } else {
    std::memcpy(out + off, payload, payload_len);
  }
  off += payload_len;
  const unsigned pad = pad_for(payload_len);
  store_le32(out + off, 0);  // the pad (up to 3 bytes), before the ICRC overwrites the rest
  off += pad;
  std::uint8_t* l3 = out + t.l3_off;
  const std::size_t n = static_cast<std::size_t>(out + off - l3);
  store_le32(out + off, n < kCrcFoldMax && kCrcFoldUsable ? crc32_fold(kIcrcSeed, l3, n)
                                                          : crc32_zlib(kIcrcSeed, l3, n));
  unmask(t, l3);
  return off + kIcrcSize;
}

std::size_t finish_masked_pieces(const PathTemplate& t, std::span<std::uint8_t> headers,
                                 std::span<const std::span<const std::uint8_t>> pieces,
                                 std::uint8_t* trailer) {
  std::uint8_t* l3 = headers.data() + t.l3_off;
  std::uint32_t crc = crc32_zlib(kIcrcSeed, l3, headers.size() - t.l3_off);
  std::size_t len = 0;
  for (const auto& p : pieces) {
    crc = crc32_zlib(crc, p.data(), p.size());
    len += p.size();
  }
  const unsigned pad = pad_for(len);
  std::memset(trailer, 0, pad);
  crc = crc32_zlib(crc, trailer, pad);
  store_le32(trailer + pad, crc);
  unmask(t, l3);
  return pad + kIcrcSize;
}

}  // namespace roce::wire
