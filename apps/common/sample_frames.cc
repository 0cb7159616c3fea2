#include "apps/common/sample_frames.h"

#include <stdexcept>

namespace roce::apps {

namespace {

using wire::Ext;
using wire::OpMask;

// Documentation addresses (RFC 5737 TEST-NET-1, RFC 3849) and locally administered MACs.
constexpr wire::MacAddr kMacA{{0x02, 0x00, 0x5e, 0x00, 0x02, 0x01}};
constexpr wire::MacAddr kMacB{{0x02, 0x00, 0x5e, 0x00, 0x02, 0x02}};
constexpr wire::Ipv4Addr kIpA{0xC0000201};  // 192.0.2.1
constexpr wire::Ipv4Addr kIpB{0xC0000202};  // 192.0.2.2
constexpr wire::Ipv6Addr kIp6A{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
constexpr wire::Ipv6Addr kIp6B{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}};
constexpr std::uint32_t kQpnA = 0x000011;  // requester QP
constexpr std::uint32_t kQpnB = 0x000012;  // responder QP
constexpr std::uint32_t kUdQpnA = 0x000021;
constexpr std::uint32_t kUdQpnB = 0x000022;
constexpr std::uint32_t kUdQkey = 0x11111111;

std::size_t payload_len_for(const wire::OpcodeInfo& info, std::uint32_t pmtu) {
  if (!info.mask.has(OpMask::kPayload)) return 0;
  if (info.fixed_payload != 0) return info.fixed_payload;
  if (info.mask.has(OpMask::kStart) && info.mask.has(OpMask::kEnd)) return 61;  // Only: pad 3
  if (info.mask.has(OpMask::kEnd)) return pmtu / 2 + 2;                         // Last: pad 2
  return pmtu;                                                                  // First, Middle
}

}  // namespace

std::vector<SampleFrame> make_sample_frames(const SampleOptions& opts) {
  std::vector<SampleFrame> out;
  std::uint32_t psn = 0x5A3C10;
  std::uint16_t ip_id = 0x1000;
  for (const wire::Opcode op : wire::kKnownOpcodes) {
    const wire::OpcodeInfo& info = wire::opcode_info(op);
    SampleFrame f;
    wire::FrameSpec& s = f.spec;
    // Requests flow A -> B, responses B -> A, CNPs from the notification point B to A.
    const bool from_b = info.mask.any(OpMask::kResponse | OpMask::kCnp);
    s.src_mac = from_b ? kMacB : kMacA;
    s.dst_mac = from_b ? kMacA : kMacB;
    s.vlan_id = opts.vlan_id;
    s.vlan_pcp = opts.vlan_id ? 3 : 0;
    s.ip_version = opts.ip_version;
    s.src_ip4 = from_b ? kIpB : kIpA;
    s.dst_ip4 = from_b ? kIpA : kIpB;
    s.src_ip6 = from_b ? kIp6B : kIp6A;
    s.dst_ip6 = from_b ? kIp6A : kIp6B;
    s.tos = info.mask.has(OpMask::kCnp) ? 0xC2 : 0x02;  // ECT(0); CNPs at DSCP 48
    s.ttl = 64;
    s.ip_id = ip_id++;
    s.flow_label = opts.ip_version == wire::IpVersion::kV6 ? 0x1F00D : 0;
    s.udp_sport = static_cast<std::uint16_t>(0xC000 | ((kQpnA * 0x9E37u + kQpnB) & 0x3FFF));
    s.opcode = op;
    s.dest_qp = wire::Qpn(from_b ? kQpnA : kQpnB);
    // UD sends go to an ordinary UD QP (QP1 would make them MADs) with perftest's Q_Key.
    if (info.mask.has(OpMask::kDeth)) s.dest_qp = wire::Qpn(kUdQpnB);
    s.psn = info.mask.has(OpMask::kCnp) ? wire::Psn(0) : wire::Psn(psn++);
    s.se = info.mask.has(OpMask::kEnd) && info.mask.any(OpMask::kSend | OpMask::kImm) &&
           info.mask.has(OpMask::kRequest);
    s.ack_req = info.mask.has(OpMask::kRequest) && info.mask.has(OpMask::kEnd);
    s.becn = info.mask.has(OpMask::kCnp);
    s.reth = {0x00007F3A'12340000ull, 0x1A2B3C4D, info.mask.has(OpMask::kRead) ? 8192u : 4096u};
    s.aeth = {wire::Syndrome::ack(), wire::Msn(0x000102)};
    s.atomic = {0x00007F3A'12341000ull, 0x1A2B3C4D, 5, 0x1122334455667788ull};
    s.atomic_orig = 0x1122334455667788ull;
    s.imm = 0xDEADBEEF;
    s.ieth_rkey = 0x0BADF00D;
    s.deth = {kUdQkey, wire::Qpn(kUdQpnA)};
    s.feth = {1, 1};

    f.payload.resize(payload_len_for(info, opts.pmtu));
    for (std::size_t i = 0; i < f.payload.size(); ++i)
      f.payload[i] = static_cast<std::uint8_t>(i * 7 + raw(op));
    f.bytes.resize(wire::frame_len(s, f.payload.size()));
    if (wire::build_frame(s, f.payload, f.bytes) != f.bytes.size())
      throw std::logic_error("sample frame does not build");
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace roce::apps
