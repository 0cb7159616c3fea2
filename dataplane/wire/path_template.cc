/// @file
/// Hot-path frame writer (see the header). Field layouts: eth.h, ip.h, udp.h, bth.h and the
/// extension headers; masked fields: IBA Annex A17.3.3, as icrc.cc masks them.
#include "dataplane/wire/path_template.h"

#include <cstring>

#include "dataplane/wire/crc_fold.h"
#include "dataplane/wire/icrc.h"

namespace roce::wire {

using namespace detail;  // the inline pieces the header shares with this file

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

std::size_t write_masked_headers(const PathTemplate& t, const PacketFields& f,
                                 std::size_t payload_len, std::uint8_t* out) {
  return masked_headers(t, f, payload_len, out);
}

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
