// A table of malformed frames and the verdict each must get; plus every truncation and random
// corruption of valid frames, which must never crash, never read past the buffer (run the
// Sanitize build to prove it) and never be accepted when a covered byte changed.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dataplane/wire/roce_frame.h"

namespace roce::wire {
namespace {

using Frame = std::vector<std::uint8_t>;

struct Layout {
  std::size_t l3, l4, bth;
  IpVersion ip;
};

Frame build(Opcode op, std::size_t payload_len, IpVersion ip = IpVersion::kV4, bool vlan = false) {
  FrameSpec s;
  s.opcode = op;
  s.ip_version = ip;
  if (vlan) s.vlan_id = 7;
  s.src_ip4 = Ipv4Addr{0xC6120001};  // 198.18.0.1
  s.dst_ip4 = Ipv4Addr{0xC6120002};
  s.dest_qp = Qpn(0x42);
  s.psn = Psn(1000);
  Frame payload(payload_len, 0x5A);
  Frame f(frame_len(s, payload_len));
  EXPECT_EQ(build_frame(s, payload, f), f.size());
  return f;
}

Layout layout_of(const Frame& f) {
  const bool vlan = f[12] == 0x81 && f[13] == 0x00;
  const std::size_t l3 = vlan ? 18 : 14;
  const IpVersion ip = (f[l3] >> 4) == 6 ? IpVersion::kV6 : IpVersion::kV4;
  const std::size_t l4 = l3 + (ip == IpVersion::kV4 ? 20 : 40);
  return {l3, l4, l4 + 8, ip};
}

// Makes the IPv4 header checksum and the ICRC right again after a mutation, so that the
// verdict names the mutation and not its side effects.
void refix(Frame& f) {
  const Layout l = layout_of(f);
  if (l.ip == IpVersion::kV4) {
    store_be16(f.data() + l.l3 + 10, 0);
    store_be16(f.data() + l.l3 + 10, ipv4_header_checksum(f.data() + l.l3, 20));
  }
  const std::size_t end = f.size() - 4;
  store_le32(f.data() + end, compute_icrc(f.data() + l.l3, end - l.l3, l.ip));
}

// Inserts `n` bytes before the ICRC and grows the IP and UDP lengths to match.
void grow_payload(Frame& f, std::size_t n) {
  const Layout l = layout_of(f);
  f.insert(f.end() - 4, n, 0xA5);
  if (l.ip == IpVersion::kV4)
    store_be16(f.data() + l.l3 + 2, static_cast<std::uint16_t>(load_be16(f.data() + l.l3 + 2) + n));
  else
    store_be16(f.data() + l.l3 + 4, static_cast<std::uint16_t>(load_be16(f.data() + l.l3 + 4) + n));
  store_be16(f.data() + l.l4 + 4, static_cast<std::uint16_t>(load_be16(f.data() + l.l4 + 4) + n));
  refix(f);
}

struct Case {
  std::string name;
  std::function<Frame()> make;
  Verdict expect;
};

std::vector<Case> cases() {
  const Opcode send = Opcode::kRcSendOnly;
  return {
      {"ethernet_header_cut",
       [=] {
         auto f = build(send, 16);
         f.resize(10);
         return f;
       },
       Verdict::kTruncated},
      {"vlan_tag_cut",
       [=] {
         auto f = build(send, 16, IpVersion::kV4, true);
         f.resize(16);
         return f;
       },
       Verdict::kTruncated},
      {"ipv4_header_cut",
       [=] {
         auto f = build(send, 16);
         f.resize(30);
         return f;
       },
       Verdict::kTruncated},
      {"ipv6_header_cut",
       [=] {
         auto f = build(send, 16, IpVersion::kV6);
         f.resize(50);
         return f;
       },
       Verdict::kTruncated},
      {"ipv4_total_length_beyond_frame",
       [=] {
         auto f = build(send, 16);
         f.resize(f.size() - 1);
         return f;
       },
       Verdict::kTruncated},
      {"ipv6_payload_length_beyond_frame",
       [=] {
         auto f = build(send, 16, IpVersion::kV6);
         f.resize(f.size() - 3);
         return f;
       },
       Verdict::kTruncated},
      {"arp_ethertype",
       [=] {
         auto f = build(send, 16);
         f[12] = 0x08;
         f[13] = 0x06;
         return f;
       },
       Verdict::kNotIp},
      {"ipv4_ethertype_with_version_6",
       [=] {
         auto f = build(send, 16);
         f[14] = 0x65;
         return f;
       },
       Verdict::kBadIpVersion},
      {"ipv6_ethertype_with_version_4",
       [=] {
         auto f = build(send, 16, IpVersion::kV6);
         f[14] = 0x45;
         return f;
       },
       Verdict::kBadIpVersion},
      {"ipv4_options",
       [=] {
         auto f = build(send, 16);
         f.insert(f.begin() + 34, {1, 1, 1, 0});  // NOP NOP NOP EOL
         f[14] = 0x46;
         store_be16(f.data() + 16, static_cast<std::uint16_t>(load_be16(f.data() + 16) + 4));
         store_be16(f.data() + 24, 0);
         store_be16(f.data() + 24, ipv4_header_checksum(f.data() + 14, 24));
         return f;
       },
       Verdict::kIpOptions},
      {"ipv4_bad_header_checksum",
       [=] {
         auto f = build(send, 16);
         f[25] ^= 1;
         return f;
       },
       Verdict::kBadIpChecksum},
      {"ipv4_total_length_below_header",
       [=] {
         auto f = build(send, 16);
         store_be16(f.data() + 16, 12);
         refix(f);
         return f;
       },
       Verdict::kBadIpLength},
      {"ipv4_more_fragments",
       [=] {
         auto f = build(send, 16);
         f[20] = 0x20;
         refix(f);
         return f;
       },
       Verdict::kIpFragment},
      {"ipv4_fragment_offset",
       [=] {
         auto f = build(send, 16);
         f[21] = 0x08;
         refix(f);
         return f;
       },
       Verdict::kIpFragment},
      {"ipv4_protocol_tcp",
       [=] {
         auto f = build(send, 16);
         f[23] = 6;
         refix(f);
         return f;
       },
       Verdict::kNotUdp},
      {"ipv6_hop_by_hop_header",
       [=] {
         auto f = build(send, 16, IpVersion::kV6);
         f[20] = 0;
         refix(f);
         return f;
       },
       Verdict::kNotUdp},
      {"udp_length_short",
       [=] {
         auto f = build(send, 16);
         f[38] = 0;
         f[39] = 20;
         refix(f);
         return f;
       },
       Verdict::kBadUdpLength},
      {"udp_length_below_header",
       [=] {
         auto f = build(send, 16);
         f[38] = 0;
         f[39] = 4;
         refix(f);
         return f;
       },
       Verdict::kBadUdpLength},
      {"udp_port_4792",
       [=] {
         auto f = build(send, 16);
         f[37] = 0xB8;
         refix(f);
         return f;
       },
       Verdict::kWrongUdpPort},
      {"bth_tver_1",
       [=] {
         auto f = build(send, 16);
         f[43] |= 1;
         refix(f);
         return f;
       },
       Verdict::kBadTver},
      {"opcode_reserved_0x15",
       [=] {
         auto f = build(send, 16);
         f[42] = 0x15;
         refix(f);
         return f;
       },
       Verdict::kUnknownOpcode},
      {"opcode_rd_send_only",
       [=] {
         auto f = build(send, 16);
         f[42] = 0x44;
         refix(f);
         return f;
       },
       Verdict::kUnknownOpcode},
      {"opcode_vendor_0xf0",  // 0xE0-0xE3 are selective repeat's (opcode.h)
       [=] {
         auto f = build(send, 16);
         f[42] = 0xF0;
         refix(f);
         return f;
       },
       Verdict::kUnknownOpcode},
      {"udp_payload_shorter_than_bth",
       [=] {
         auto f = build(Opcode::kRcAcknowledge, 0);
         f.resize(14 + 20 + 8 + 8);
         store_be16(f.data() + 16, 20 + 8 + 8);
         store_be16(f.data() + 38, 16);
         refix(f);
         return f;
       },
       Verdict::kBadTransportLength},
      {"ack_without_room_for_aeth",
       [=] {
         auto f = build(Opcode::kRcAcknowledge, 0);
         f.erase(f.begin() + 54, f.begin() + 58);  // drop the AETH
         store_be16(f.data() + 16, static_cast<std::uint16_t>(load_be16(f.data() + 16) - 4));
         store_be16(f.data() + 38, static_cast<std::uint16_t>(load_be16(f.data() + 38) - 4));
         refix(f);
         return f;
       },
       Verdict::kBadTransportLength},
      {"pad_count_exceeds_payload",
       [=] {
         auto f = build(send, 0);
         f[43] = 0x30;
         refix(f);
         return f;
       },
       Verdict::kBadPadCount},
      {"pad_count_on_ack",
       [=] {
         auto f = build(Opcode::kRcAcknowledge, 0);
         grow_payload(f, 2);
         f[43] = 0x20;
         refix(f);
         return f;
       },
       Verdict::kBadPadCount},
      {"payload_on_read_request",
       [=] {
         auto f = build(Opcode::kRcReadRequest, 0);
         grow_payload(f, 4);
         return f;
       },
       Verdict::kBadPayloadLength},
      {"payload_on_compare_swap",
       [=] {
         auto f = build(Opcode::kRcCompareSwap, 0);
         grow_payload(f, 8);
         return f;
       },
       Verdict::kBadPayloadLength},
      {"atomic_write_with_12_bytes",
       [=] {
         auto f = build(Opcode::kRcAtomicWrite, 8);
         grow_payload(f, 4);
         return f;
       },
       Verdict::kBadPayloadLength},
      {"payload_byte_flipped",
       [=] {
         auto f = build(send, 16);
         f[60] ^= 0x10;
         return f;
       },
       Verdict::kBadIcrc},
      {"icrc_byte_flipped",
       [=] {
         auto f = build(send, 16);
         f.back() ^= 1;
         return f;
       },
       Verdict::kBadIcrc},
      {"ack_req_flipped",
       [=] {
         auto f = build(send, 16);
         f[50] ^= 0x80;
         return f;
       },
       Verdict::kBadIcrc},
      {"psn_changed_ipv6",
       [=] {
         auto f = build(send, 16, IpVersion::kV6);
         f[74] ^= 1;
         return f;
       },
       Verdict::kBadIcrc},
      {"ip_address_changed_with_fixed_checksum",
       [=] {
         auto f = build(send, 16);
         f[33] ^= 1;
         store_be16(f.data() + 24, 0);
         store_be16(f.data() + 24, ipv4_header_checksum(f.data() + 14, 20));
         return f;
       },
       Verdict::kBadIcrc},
  };
}

TEST(FrameMalformed, EachCaseGetsItsVerdict) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Frame f = c.make();
    RxPkt p;
    EXPECT_EQ(to_string(parse_frame(f, p)), to_string(c.expect));
  }
}

TEST(FrameMalformed, GoodFramesOfTheSameShapesParse) {
  // The cases above start from these frames; make sure the starting points are good.
  for (Opcode op : {Opcode::kRcSendOnly, Opcode::kRcAcknowledge, Opcode::kRcReadRequest,
                    Opcode::kRcCompareSwap}) {
    for (IpVersion ip : {IpVersion::kV4, IpVersion::kV6}) {
      const Frame f = build(op, op == Opcode::kRcSendOnly ? 16 : 0, ip);
      RxPkt p;
      EXPECT_EQ(parse_frame(f, p), Verdict::kOk) << opcode_info(op).name;
    }
  }
}

TEST(FrameMalformed, VerdictsHaveDistinctNames) {
  std::set<std::string_view> names;
  for (std::size_t v = 0; v < kVerdictCount; ++v)
    EXPECT_TRUE(names.insert(to_string(static_cast<Verdict>(v))).second);
  EXPECT_EQ(to_string(Verdict::kCount_), "invalid");
}

TEST(FrameMalformed, EveryTruncationIsRejected) {
  // Each prefix is copied into its own exactly sized heap buffer, so that reading one byte
  // too far is a heap overflow that ASan reports.
  for (Opcode op : kKnownOpcodes) {
    for (IpVersion ip : {IpVersion::kV4, IpVersion::kV6}) {
      const auto& info = opcode_info(op);
      const std::size_t len = info.fixed_payload                ? info.fixed_payload
                              : info.mask.has(OpMask::kPayload) ? 37
                                                                : 0;
      const Frame f = build(op, len, ip, true);
      for (std::size_t n = 0; n < f.size(); ++n) {
        const Frame cut(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n));
        RxPkt p;
        ASSERT_NE(parse_frame(cut, p), Verdict::kOk) << info.name << " cut at " << n;
      }
    }
  }
}

TEST(FrameMalformed, RandomCorruptionIsNeverAcceptedWhenCovered) {
  std::mt19937 rng(20261122);
  const Opcode ops[] = {Opcode::kRcSendOnly,          Opcode::kRcWriteFirst,
                        Opcode::kRcAtomicAcknowledge, Opcode::kUdSendOnlyImm,
                        Opcode::kRcReadRequest,       Opcode::kCnp};
  std::size_t accepted_masked = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    const Opcode op = ops[rng() % std::size(ops)];
    const IpVersion ip = rng() & 1 ? IpVersion::kV4 : IpVersion::kV6;
    const auto& info = opcode_info(op);
    Frame f = build(op, info.mask.has(OpMask::kPayload) ? 1 + rng() % 300 : 0, ip);
    const Layout l = layout_of(f);
    const std::size_t pos = rng() % f.size();
    const auto flip = static_cast<std::uint8_t>(1u << (rng() % 8));
    f[pos] ^= flip;
    RxPkt p;
    const Verdict v = parse_frame(f, p);
    // Bytes the ICRC does not protect: Ethernet header, and the masked fields.
    const bool masked = pos < l.l3 ||
                        (l.ip == IpVersion::kV4 && (pos == l.l3 + 1 || pos == l.l3 + 8 ||
                                                    pos == l.l3 + 10 || pos == l.l3 + 11)) ||
                        (l.ip == IpVersion::kV6 && (pos <= l.l3 + 3 || pos == l.l3 + 7)) ||
                        pos == l.l4 + 6 || pos == l.l4 + 7 || pos == l.bth + 4;
    if (!masked) {
      ASSERT_NE(v, Verdict::kOk) << "byte " << pos << " of " << info.name;
    } else if (v == Verdict::kOk) {
      ++accepted_masked;
    }
  }
  EXPECT_GT(accepted_masked, 0u) << "masked fields (TTL, TOS, BECN...) may change in flight";
}

// parse_frame checks an untagged IPv4 frame in a few word compares and anything else field by
// field (roce_frame.cc). The same frame with an 802.1Q tag takes the second way only, so each
// byte of an untagged frame changed (with the IP checksum and the ICRC made right again, and
// not) must get the verdict and the fields its tagged twin gets.
TEST(FrameMalformed, UntaggedIpv4VerdictsMatchTheFieldByFieldPath) {
  const auto tagged = [](const Frame& f) {
    Frame t(f.begin(), f.begin() + 12);
    for (std::uint8_t b : {0x81, 0x00, 0x00, 0x07}) t.push_back(b);
    t.insert(t.end(), f.begin() + 12, f.end());
    return t;
  };
  std::size_t ok = 0, compared = 0;
  for (Opcode op : {Opcode::kRcWriteOnly, Opcode::kRcSendOnly, Opcode::kRcWriteMiddle,
                    Opcode::kRcAcknowledge, Opcode::kRcReadRequest, Opcode::kRcCompareSwap,
                    Opcode::kUdSendOnly, Opcode::kUcSendOnlyImm, Opcode::kCnp}) {
    const auto& info = opcode_info(op);
    const std::size_t len = info.fixed_payload                ? info.fixed_payload
                            : info.mask.has(OpMask::kPayload) ? 8
                                                              : 0;
    const Frame good = build(op, len);
    for (std::size_t pos = 12; pos < good.size(); ++pos) {
      for (std::uint8_t flip : {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xFF}) {
        for (bool fix : {false, true}) {
          Frame f = good;
          f[pos] ^= flip;
          // (not when the version nibble now says IPv6: refix would take the IPv6 layout,
          // longer than a short IPv4 frame)
          if (fix && pos >= 14 && layout_of(f).ip == IpVersion::kV4) refix(f);
          for (bool icrc : {true, false}) {
            ParseOptions o;
            o.verify_icrc = icrc;
            RxPkt a, b;
            const Frame t = tagged(f);
            const Verdict va = parse_frame(f, a, o), vb = parse_frame(t, b, o);
            ++compared;
            ASSERT_EQ(to_string(va), to_string(vb))
                << info.name << " byte " << pos << " ^ " << int{flip} << (fix ? " fixed" : "");
            if (va != Verdict::kOk) continue;
            ++ok;
            ASSERT_FALSE(a.has_vlan);
            EXPECT_EQ(a.l3_off + 4, b.l3_off);
            EXPECT_EQ(a.l4_off + 4, b.l4_off);
            EXPECT_EQ(a.bth_off + 4, b.bth_off);
            EXPECT_EQ(a.payload_off + 4, b.payload_off);
            EXPECT_EQ(a.frame_len + 4, b.frame_len);
            EXPECT_EQ(a.payload_len, b.payload_len);
            EXPECT_EQ(a.pad, b.pad);
            EXPECT_EQ(a.ip_version, b.ip_version);
            EXPECT_EQ(a.ecn, b.ecn);
            EXPECT_EQ(a.opcode, b.opcode);
            EXPECT_EQ(a.info, b.info);
            EXPECT_EQ(a.dest_qp, b.dest_qp);
            EXPECT_EQ(a.psn, b.psn);
            EXPECT_EQ(a.ack_req, b.ack_req);
            EXPECT_EQ(a.icrc, b.icrc);
          }
        }
      }
    }
  }
  EXPECT_GT(ok, 1000u);
  EXPECT_GT(compared, ok);
}

}  // namespace
}  // namespace roce::wire
