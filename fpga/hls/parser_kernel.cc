/// @file
/// The header parser (parser_kernel.h). Verdict values are wire::Verdict's.
#include "fpga/hls/parser_kernel.h"

#include "dataplane/wire/opcode_table.h"
#include "dataplane/wire/roce_frame.h"

namespace roce::fpga::hls {
namespace {

using wire::Verdict;

constexpr std::uint8_t v(Verdict x) { return static_cast<std::uint8_t>(x); }

}  // namespace

bool HeaderParser::step(Flit& f, RxMeta& meta) {
  const unsigned k = static_cast<unsigned>(__builtin_popcountll(f.keep));
  for (unsigned i = 0; i < kFlitBytes; ++i)
    if (n_ + i < win_.size()) win_[n_ + i] = (f.keep >> i) & 1 ? f.data[i] : 0;
  n_ += k;
  IcrcResult r;
  if (!icrc_.step(f, false, r)) return false;
  meta = decide(r);
  n_ = 0;
  return true;
}

RxMeta HeaderParser::decide(const IcrcResult& icrc) const {
  RxMeta m;
  const std::uint8_t* p = win_.data();
  const std::uint32_t n = n_;
  const auto be16 = [&](unsigned at) { return static_cast<std::uint32_t>(p[at] << 8 | p[at + 1]); };
  const auto be24 = [&](unsigned at) {
    return static_cast<std::uint32_t>(p[at] << 16 | p[at + 1] << 8 | p[at + 2]);
  };
  const auto be32 = [&](unsigned at) { return be16(at) << 16 | be16(at + 2); };
  const auto fail = [&](Verdict x) {
    m.verdict = v(x);
    return m;
  };

  if (n < 14) return fail(Verdict::kTruncated);
  unsigned off = 14;
  std::uint32_t type = be16(12);
  if (type == 0x8100) {
    if (n < 18) return fail(Verdict::kTruncated);
    m.has_vlan = true;
    m.vlan_id = static_cast<std::uint16_t>(be16(14) & 0x0FFF);
    type = be16(16);
    off = 18;
  }
  m.l3_off = static_cast<std::uint8_t>(off);
  std::uint32_t l4_len = 0;
  if (type == 0x0800) {
    if (n < off + 20) return fail(Verdict::kTruncated);
    if (p[off] >> 4 != 4) return fail(Verdict::kBadIpVersion);
    if ((p[off] & 0x0F) != 5) return fail(Verdict::kIpOptions);
    const std::uint32_t total = be16(off + 2);
    if (total < 20) return fail(Verdict::kBadIpLength);
    if (n < off + total) return fail(Verdict::kTruncated);
    if (cfg_.verify_ip_checksum) {
      std::uint32_t sum = 0;  // ones' complement sum of ten 16-bit words: an adder tree
      for (unsigned i = 0; i < 20; i += 2) sum += be16(off + i);
      sum = (sum & 0xFFFF) + (sum >> 16);
      sum = (sum & 0xFFFF) + (sum >> 16);
      if (sum != 0xFFFF) return fail(Verdict::kBadIpChecksum);
    }
    if ((be16(off + 6) & 0x3FFF) != 0) return fail(Verdict::kIpFragment);
    if (p[off + 9] != 17) return fail(Verdict::kNotUdp);
    m.ecn = p[off + 1] & 3;
    l4_len = total - 20;
    off += 20;
  } else if (type == 0x86DD) {
    if (n < off + 40) return fail(Verdict::kTruncated);
    if (p[off] >> 4 != 6) return fail(Verdict::kBadIpVersion);
    const std::uint32_t payload = be16(off + 4);
    if (n < off + 40 + payload) return fail(Verdict::kTruncated);
    if (p[off + 6] != 17) return fail(Verdict::kNotUdp);
    m.ipv6 = true;
    m.ecn = (p[off + 1] >> 4) & 3;
    l4_len = payload;
    off += 40;
  } else {
    return fail(Verdict::kNotIp);
  }

  if (l4_len < 8) return fail(Verdict::kBadUdpLength);
  if (be16(off + 4) != l4_len) return fail(Verdict::kBadUdpLength);
  if (be16(off + 2) != cfg_.udp_port) return fail(Verdict::kWrongUdpPort);
  off += 8;
  const std::uint32_t end = off + l4_len - 8;
  m.frame_len = static_cast<std::uint16_t>(end);
  m.bth_off = static_cast<std::uint8_t>(off);
  if (end < off + 12 + 4) return fail(Verdict::kBadTransportLength);
  if ((p[off + 1] & 0x0F) != 0) return fail(Verdict::kBadTver);
  const wire::OpcodeInfo& info = wire::opcode_info(p[off]);  // a 256-entry ROM
  if (!info.valid()) return fail(Verdict::kUnknownOpcode);
  if (end < off + info.hdr_len + 4) return fail(Verdict::kBadTransportLength);
  const std::uint32_t with_pad = end - 4 - off - info.hdr_len;
  const unsigned pad = (p[off + 1] >> 4) & 3;
  if (pad > with_pad) return fail(Verdict::kBadPadCount);
  const std::uint32_t payload_len = with_pad - pad;
  const bool has_payload = info.mask.has(wire::OpMask::kPayload);
  if (!has_payload && pad != 0) return fail(Verdict::kBadPadCount);
  if (has_payload ? info.fixed_payload != 0 && payload_len != info.fixed_payload : payload_len != 0)
    return fail(Verdict::kBadPayloadLength);

  m.opcode = p[off];
  m.dest_qp = be24(off + 5);
  m.psn = be24(off + 9);
  m.ack_req = (p[off + 8] & 0x80) != 0;
  m.pad = static_cast<std::uint8_t>(pad);
  m.payload_off = static_cast<std::uint16_t>(off + info.hdr_len);
  m.payload_len = static_cast<std::uint16_t>(payload_len);
  if (info.has(wire::Ext::kReth)) {
    const unsigned r = off + info.offset(wire::Ext::kReth);
    m.reth_va = std::uint64_t{be32(r)} << 32 | be32(r + 4);
    m.reth_rkey = be32(r + 8);
    m.reth_len = be32(r + 12);
  }
  if (info.has(wire::Ext::kAeth)) {
    const unsigned a = off + info.offset(wire::Ext::kAeth);
    m.aeth_syndrome = p[a];
    m.aeth_msn = be24(a + 1);
  }
  m.icrc = icrc.received;
  if (cfg_.verify_icrc && !icrc.ok()) return fail(Verdict::kBadIcrc);
  m.verdict = v(Verdict::kOk);
  return m;
}

}  // namespace roce::fpga::hls
