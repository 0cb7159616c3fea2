/// @file
/// Frame builder and parser. The parser checks the cheap things first and the ICRC last.
#include "dataplane/wire/roce_frame.h"

#include <array>
#include <cstring>

namespace roce::wire {

namespace {

constexpr std::size_t l2_len(const FrameSpec& s) {
  return EthView::kSize + (s.vlan_id ? VlanView::kSize : 0);
}
constexpr std::size_t l3_len(IpVersion v) {
  return v == IpVersion::kV4 ? Ipv4View::kSize : Ipv6View::kSize;
}

void udp6_checksum_fill(std::uint8_t* l3, std::uint8_t* udp, std::size_t udp_len) {
  UdpView u(udp);
  u.set_checksum(0);
  u.set_checksum(udp6_checksum(l3, udp, udp_len));
}

void write_ext_headers(const FrameSpec& s, const OpcodeInfo& info, std::uint8_t* bth) {
  if (info.has(Ext::kDeth)) {
    DethView d(bth + info.offset(Ext::kDeth));
    d.set_qkey(s.deth.qkey);
    d.set_src_qp(s.deth.src_qp);
  }
  if (info.has(Ext::kFeth)) {
    FethView(bth + info.offset(Ext::kFeth)).set(s.feth.selectivity, s.feth.placement_type);
  }
  if (info.has(Ext::kReth)) {
    RethView r(bth + info.offset(Ext::kReth));
    r.set_va(s.reth.va);
    r.set_rkey(s.reth.rkey);
    r.set_dma_len(s.reth.dma_len);
  }
  if (info.has(Ext::kAtomicEth)) {
    AtomicEthView a(bth + info.offset(Ext::kAtomicEth));
    a.set_va(s.atomic.va);
    a.set_rkey(s.atomic.rkey);
    a.set_swap_add(s.atomic.swap_add);
    a.set_compare(s.atomic.compare);
  }
  if (info.has(Ext::kAeth)) {
    AethView a(bth + info.offset(Ext::kAeth));
    a.set_syndrome(s.aeth.syndrome);
    a.set_msn(s.aeth.msn);
  }
  if (info.has(Ext::kAtomicAckEth)) {
    AtomicAckEthView(bth + info.offset(Ext::kAtomicAckEth)).set_orig(s.atomic_orig);
  }
  if (info.has(Ext::kImmDt)) ImmDtView(bth + info.offset(Ext::kImmDt)).set_imm(s.imm);
  if (info.has(Ext::kIeth)) IethView(bth + info.offset(Ext::kIeth)).set_rkey(s.ieth_rkey);
  if (info.has(Ext::kCnpPad)) CnpPadView(bth + info.offset(Ext::kCnpPad)).clear();
}

}  // namespace

std::size_t frame_header_len(const FrameSpec& spec) {
  return l2_len(spec) + l3_len(spec.ip_version) + UdpView::kSize + opcode_info(spec.opcode).hdr_len;
}

std::size_t frame_len(const FrameSpec& spec, std::size_t payload_len) {
  return frame_header_len(spec) + payload_len + pad_for(payload_len) + kIcrcSize;
}

std::size_t write_frame_headers(const FrameSpec& s, std::size_t payload_len,
                                std::span<std::uint8_t> out) {
  const OpcodeInfo& info = opcode_info(s.opcode);
  if (!info.valid() || !detail::payload_fits(info, payload_len)) return 0;
  const unsigned pad = pad_for(payload_len);
  const std::size_t total = frame_len(s, payload_len);
  const std::size_t l4_bytes = UdpView::kSize + info.hdr_len + payload_len + pad + kIcrcSize;
  if (total > out.size() || l4_bytes + Ipv6View::kSize > 0xFFFF) return 0;

  std::uint8_t* p = out.data();
  EthView eth(p);
  eth.set_dst(s.dst_mac);
  eth.set_src(s.src_mac);
  const std::uint16_t l3_type = s.ip_version == IpVersion::kV4 ? kEtherTypeIpv4 : kEtherTypeIpv6;
  std::size_t off = EthView::kSize;
  if (s.vlan_id) {
    eth.set_ether_type(kEtherTypeVlan);
    VlanView vlan(p + off);
    vlan.set_tci(s.vlan_pcp, false, *s.vlan_id);
    vlan.set_ether_type(l3_type);
    off += VlanView::kSize;
  } else {
    eth.set_ether_type(l3_type);
  }

  std::uint8_t* l3 = p + off;
  if (s.ip_version == IpVersion::kV4) {
    Ipv4View ip(l3);
    ip.set_version_ihl();
    ip.set_tos(s.tos);
    ip.set_total_len(static_cast<std::uint16_t>(Ipv4View::kSize + l4_bytes));
    ip.set_id(s.ip_id);
    ip.set_frag(Ipv4View::kFlagDf);
    ip.set_ttl(s.ttl);
    ip.set_protocol(kIpProtoUdp);
    ip.set_src(s.src_ip4);
    ip.set_dst(s.dst_ip4);
    // The checksum from the values just written, not from the bytes: reading back 32-bit
    // words that were stored a byte or two at a time stalls store forwarding (this was 9% of
    // the requester's time). Same sum as ipv4_header_checksum (tests check the bytes).
    std::uint32_t sum = (0x4500u | s.tos) + Ipv4View::kSize + l4_bytes + s.ip_id +
                        Ipv4View::kFlagDf + (std::uint32_t{s.ttl} << 8 | kIpProtoUdp) +
                        (s.src_ip4.v >> 16) + (s.src_ip4.v & 0xFFFF) + (s.dst_ip4.v >> 16) +
                        (s.dst_ip4.v & 0xFFFF);
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    ip.set_checksum(s.ip_checksum ? static_cast<std::uint16_t>(~sum) : 0);
  } else {
    Ipv6View ip(l3);
    ip.set_version_tc_flow(s.tos, s.flow_label);
    ip.set_payload_len(static_cast<std::uint16_t>(l4_bytes));
    ip.set_next_header(kIpProtoUdp);
    ip.set_hop_limit(s.ttl);
    ip.set_src(s.src_ip6);
    ip.set_dst(s.dst_ip6);
  }
  off += l3_len(s.ip_version);

  UdpView udp(p + off);
  udp.set_src_port(s.udp_sport);
  udp.set_dst_port(s.udp_dport);
  udp.set_length(static_cast<std::uint16_t>(l4_bytes));
  udp.set_checksum(0);  // stays 0 over IPv4, as rxe sends it; the ICRC protects the packet
  off += UdpView::kSize;

  std::uint8_t* bth_p = p + off;
  BthView bth(bth_p);
  bth.set_opcode(s.opcode);
  bth.set_flags(s.se, s.mig_req, pad);
  bth.set_pkey(s.pkey);
  bth.set_ecn_bits(s.fecn, s.becn);
  bth.set_dest_qp(s.dest_qp);
  bth.set_ack_req(s.ack_req);
  bth.set_psn(s.psn);
  write_ext_headers(s, info, bth_p);
  return off + info.hdr_len;
}

std::size_t finish_frame(const FrameSpec& s, std::size_t hdr_len, std::size_t payload_len,
                         std::span<std::uint8_t> out) {
  std::uint8_t* p = out.data();
  std::size_t off = hdr_len + payload_len;
  const unsigned pad = pad_for(payload_len);
  std::memset(p + off, 0, pad);
  off += pad;
  std::uint8_t* l3 = p + l2_len(s);
  store_le32(p + off, compute_icrc(l3, static_cast<std::size_t>(p + off - l3), s.ip_version));
  off += kIcrcSize;
  // The UDP checksum is masked by the ICRC, so it can be filled in last.
  if (s.ip_version == IpVersion::kV6) {
    std::uint8_t* udp = l3 + Ipv6View::kSize;
    udp6_checksum_fill(l3, udp, static_cast<std::size_t>(p + off - udp));
  }
  return off;
}

std::size_t finish_frame_pieces(const FrameSpec& s, std::span<const std::uint8_t> headers,
                                std::span<const std::span<const std::uint8_t>> payload,
                                std::uint8_t* trailer) {
  if (s.ip_version != IpVersion::kV4) return 0;
  const std::uint8_t* l3 = headers.data() + l2_len(s);
  Icrc c = Icrc::begin(l3, IpVersion::kV4);
  const std::size_t fixed = Ipv4View::kSize + UdpView::kSize + BthView::kSize;
  c.update(l3 + fixed, static_cast<std::size_t>(headers.data() + headers.size() - l3) - fixed);
  std::size_t len = 0;
  for (const auto& piece : payload) {
    c.update(piece);
    len += piece.size();
  }
  const unsigned pad = pad_for(len);
  std::memset(trailer, 0, pad);
  c.update(trailer, pad);
  store_le32(trailer + pad, c.value());
  return pad + kIcrcSize;
}

std::size_t build_frame(const FrameSpec& s, std::span<const std::uint8_t> payload,
                        std::span<std::uint8_t> out) {
  const std::size_t hdr = write_frame_headers(s, payload.size(), out);
  if (hdr == 0) return 0;
  if (!payload.empty()) std::memcpy(out.data() + hdr, payload.data(), payload.size());
  return finish_frame(s, hdr, payload.size(), out);
}

std::string_view to_string(Verdict v) {
  static constexpr std::array<std::string_view, kVerdictCount> kNames{"ok",
                                                                      "truncated",
                                                                      "not_ip",
                                                                      "bad_ip_version",
                                                                      "ip_options",
                                                                      "bad_ip_checksum",
                                                                      "bad_ip_length",
                                                                      "ip_fragment",
                                                                      "not_udp",
                                                                      "bad_udp_length",
                                                                      "wrong_udp_port",
                                                                      "bad_tver",
                                                                      "unknown_opcode",
                                                                      "bad_transport_length",
                                                                      "bad_pad_count",
                                                                      "bad_payload_length",
                                                                      "bad_icrc"};
  const auto i = static_cast<std::size_t>(v);
  return i < kNames.size() ? kNames[i] : std::string_view("invalid");
}

Verdict parse_frame(std::span<const std::uint8_t> frame, RxPkt& out, const ParseOptions& opts) {
  const std::uint8_t* p = frame.data();
  const std::size_t n = frame.size();
  out.frame = p;
  if (Verdict v; detail::parse_ipv4_fast(p, n, out, opts, v)) return v;

  // L2
  if (n < EthView::kSize) return Verdict::kTruncated;
  std::size_t off = EthView::kSize;
  std::uint16_t type = ConstEthView(p).ether_type();
  out.has_vlan = false;
  if (type == kEtherTypeVlan) {
    if (n < off + VlanView::kSize) return Verdict::kTruncated;
    ConstVlanView vlan(p + off);
    out.has_vlan = true;
    out.vlan_id = vlan.vid();
    type = vlan.ether_type();
    off += VlanView::kSize;
  }

  // L3: the IP length decides where the packet ends; bytes after it are Ethernet padding.
  out.l3_off = static_cast<std::uint16_t>(off);
  std::size_t l4_len = 0;
  if (type == kEtherTypeIpv4) {
    if (n < off + Ipv4View::kSize) return Verdict::kTruncated;
    ConstIpv4View ip(p + off);
    if (ip.version() != 4) return Verdict::kBadIpVersion;
    if (ip.header_len() != Ipv4View::kSize) return Verdict::kIpOptions;
    if (ip.total_len() < Ipv4View::kSize) return Verdict::kBadIpLength;
    if (n < off + ip.total_len()) return Verdict::kTruncated;
    if (opts.verify_ip_checksum && !ipv4_header_checksum_ok(p + off))
      return Verdict::kBadIpChecksum;
    if (ip.is_fragment()) return Verdict::kIpFragment;
    if (ip.protocol() != kIpProtoUdp) return Verdict::kNotUdp;
    out.ip_version = IpVersion::kV4;
    out.ecn = ip.ecn();
    l4_len = ip.total_len() - Ipv4View::kSize;
    off += Ipv4View::kSize;
  } else if (type == kEtherTypeIpv6) {
    if (n < off + Ipv6View::kSize) return Verdict::kTruncated;
    ConstIpv6View ip(p + off);
    if (ip.version() != 6) return Verdict::kBadIpVersion;
    if (n < off + Ipv6View::kSize + ip.payload_len()) return Verdict::kTruncated;
    if (ip.next_header() != kIpProtoUdp) return Verdict::kNotUdp;
    out.ip_version = IpVersion::kV6;
    out.ecn = ip.ecn();
    l4_len = ip.payload_len();
    off += Ipv6View::kSize;
  } else {
    return Verdict::kNotIp;
  }

  // L4
  out.l4_off = static_cast<std::uint16_t>(off);
  if (l4_len < UdpView::kSize) return Verdict::kBadUdpLength;
  ConstUdpView udp(p + off);
  if (udp.length() != l4_len) return Verdict::kBadUdpLength;
  if (udp.dst_port() != opts.udp_port) return Verdict::kWrongUdpPort;
  off += UdpView::kSize;
  const std::size_t end = off + l4_len - UdpView::kSize;  // one past the ICRC
  out.frame_len = static_cast<std::uint16_t>(end);

  // BTH and extension headers
  out.bth_off = static_cast<std::uint16_t>(off);
  if (end < off + kBthSize + kIcrcSize) return Verdict::kBadTransportLength;
  ConstBthView bth(p + off);
  if (bth.tver() != 0) return Verdict::kBadTver;
  const OpcodeInfo& info = opcode_info(raw(bth.opcode()));
  if (!info.valid()) return Verdict::kUnknownOpcode;
  if (end < off + info.hdr_len + kIcrcSize) return Verdict::kBadTransportLength;
  const std::size_t with_pad = end - kIcrcSize - off - info.hdr_len;
  const unsigned pad = bth.pad_cnt();
  if (pad > with_pad) return Verdict::kBadPadCount;
  const std::size_t payload_len = with_pad - pad;
  if (!info.mask.has(OpMask::kPayload) && pad != 0) return Verdict::kBadPadCount;
  if (!detail::payload_fits(info, payload_len)) return Verdict::kBadPayloadLength;

  out.opcode = bth.opcode();
  out.info = &info;
  out.dest_qp = bth.dest_qp();
  out.psn = bth.psn();
  out.ack_req = bth.ack_req();
  out.payload_off = static_cast<std::uint16_t>(off + info.hdr_len);
  out.payload_len = static_cast<std::uint16_t>(payload_len);
  out.pad = static_cast<std::uint8_t>(pad);
  out.icrc = load_le32(p + end - kIcrcSize);

  if (opts.verify_icrc &&
      compute_icrc(p + out.l3_off, end - kIcrcSize - out.l3_off, out.ip_version) != out.icrc)
    return Verdict::kBadIcrc;
  return Verdict::kOk;
}

}  // namespace roce::wire
