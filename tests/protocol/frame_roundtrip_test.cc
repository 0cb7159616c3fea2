// Builder and parser agree on every opcode, address family, VLAN setting and payload size,
// field by field and byte for byte.
#include <gtest/gtest.h>

#include <optional>
#include <tuple>
#include <vector>

#include "dataplane/wire/roce_frame.h"

namespace roce::wire {
namespace {

struct Variant {
  IpVersion ip;
  std::optional<std::uint16_t> vlan;
};

FrameSpec spec_for(Opcode op, const Variant& v, std::uint32_t seed) {
  FrameSpec s;
  s.src_mac = MacAddr{{0x02, 0, 0, 0, 0, 0x01}};
  s.dst_mac = MacAddr{{0x02, 0, 0, 0, 0, 0x02}};
  s.vlan_id = v.vlan;
  s.vlan_pcp = 5;
  s.ip_version = v.ip;
  s.src_ip4 = Ipv4Addr{0xC0000201};
  s.dst_ip4 = Ipv4Addr{0xC0000202};
  s.src_ip6.b = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  s.dst_ip6.b = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  s.tos = 0x03;  // CE, so the parser's ECN field is visibly filled
  s.ttl = 17;
  s.ip_id = static_cast<std::uint16_t>(seed);
  s.flow_label = 0xABCDE;
  s.udp_sport = static_cast<std::uint16_t>(0xC000 | (seed & 0x3FFF));
  s.opcode = op;
  s.se = seed & 1;
  s.ack_req = seed & 2;
  s.mig_req = seed & 4;
  s.becn = opcode_info(op).mask.has(OpMask::kCnp);
  s.pkey = 0x8001;
  s.dest_qp = Qpn(0xABC000 + seed);
  s.psn = Psn(0xFFFFF0 + seed);
  s.reth = {0x1122334455667788ull + seed, 0x01020304u + seed, 0x10000u + seed};
  s.aeth = {Syndrome::nak(NakCode::kRemoteAccessError), Msn(seed * 3)};
  s.atomic = {0x8000ull * seed, 0xAABBCC00u + seed, 0xDEADull + seed, 0xBEEFull + seed};
  s.atomic_orig = 0x0F0F0F0F0F0F0F0Full ^ seed;
  s.imm = 0x12345678u ^ seed;
  s.ieth_rkey = 0x87654321u ^ seed;
  s.deth = {0x11223344u ^ seed, Qpn(0x000100 + seed)};
  s.feth = {2, 1};
  return s;
}

std::vector<std::size_t> payload_sizes(const OpcodeInfo& info) {
  if (!info.mask.has(OpMask::kPayload)) return {0};
  if (info.fixed_payload) return {info.fixed_payload};
  return {0, 1, 2, 3, 4, 5, 255, 256, 1023, 1024, 1025, 4095, 4096};
}

void expect_same(const FrameSpec& s, std::span<const std::uint8_t> payload, const RxPkt& p) {
  const OpcodeInfo& info = opcode_info(s.opcode);
  EXPECT_EQ(p.opcode, s.opcode);
  EXPECT_EQ(p.info, &info);
  EXPECT_EQ(p.dest_qp, s.dest_qp);
  EXPECT_EQ(p.psn, s.psn);
  EXPECT_EQ(p.ack_req, s.ack_req);
  EXPECT_EQ(p.ip_version, s.ip_version);
  EXPECT_EQ(p.has_vlan, s.vlan_id.has_value());
  if (s.vlan_id) {
    EXPECT_EQ(p.vlan_id, *s.vlan_id);
  }
  EXPECT_EQ(p.ecn, 3);
  EXPECT_EQ(p.eth().src(), s.src_mac);
  EXPECT_EQ(p.eth().dst(), s.dst_mac);
  if (s.ip_version == IpVersion::kV4) {
    EXPECT_EQ(p.ipv4().src(), s.src_ip4);
    EXPECT_EQ(p.ipv4().dst(), s.dst_ip4);
    EXPECT_EQ(p.ipv4().ttl(), s.ttl);
    EXPECT_EQ(p.ipv4().id(), s.ip_id);
    EXPECT_EQ(p.ipv4().frag(), Ipv4View::kFlagDf);
  } else {
    EXPECT_EQ(p.ipv6().src(), s.src_ip6);
    EXPECT_EQ(p.ipv6().dst(), s.dst_ip6);
    EXPECT_EQ(p.ipv6().hop_limit(), s.ttl);
    EXPECT_EQ(p.ipv6().flow_label(), s.flow_label);
  }
  EXPECT_EQ(p.udp().src_port(), s.udp_sport);
  EXPECT_EQ(p.udp().dst_port(), kRoceV2Port);
  EXPECT_EQ(p.bth().se(), s.se);
  EXPECT_EQ(p.bth().mig_req(), s.mig_req);
  EXPECT_EQ(p.bth().pkey(), s.pkey);
  EXPECT_EQ(p.bth().becn(), s.becn);
  EXPECT_EQ(p.bth().pad_cnt(), pad_for(payload.size()));
  EXPECT_EQ(p.pad, pad_for(payload.size()));
  if (info.has(Ext::kReth)) {
    EXPECT_EQ(p.reth().va(), s.reth.va);
    EXPECT_EQ(p.reth().rkey(), s.reth.rkey);
    EXPECT_EQ(p.reth().dma_len(), s.reth.dma_len);
  }
  if (info.has(Ext::kAeth)) {
    EXPECT_EQ(p.aeth().syndrome(), s.aeth.syndrome);
    EXPECT_EQ(p.aeth().msn(), s.aeth.msn);
  }
  if (info.has(Ext::kAtomicEth)) {
    EXPECT_EQ(p.atomic_eth().va(), s.atomic.va);
    EXPECT_EQ(p.atomic_eth().rkey(), s.atomic.rkey);
    EXPECT_EQ(p.atomic_eth().swap_add(), s.atomic.swap_add);
    EXPECT_EQ(p.atomic_eth().compare(), s.atomic.compare);
  }
  if (info.has(Ext::kAtomicAckEth)) {
    EXPECT_EQ(p.atomic_ack_eth().orig(), s.atomic_orig);
  }
  if (info.has(Ext::kImmDt)) {
    EXPECT_EQ(p.immdt().imm(), s.imm);
  }
  if (info.has(Ext::kIeth)) {
    EXPECT_EQ(p.ieth().rkey(), s.ieth_rkey);
  }
  if (info.has(Ext::kDeth)) {
    EXPECT_EQ(p.deth().qkey(), s.deth.qkey);
    EXPECT_EQ(p.deth().src_qp(), s.deth.src_qp);
  }
  if (info.has(Ext::kFeth)) {
    EXPECT_EQ(p.feth().selectivity(), s.feth.selectivity);
    EXPECT_EQ(p.feth().placement_type(), s.feth.placement_type);
  }
  if (info.has(Ext::kCnpPad)) {
    EXPECT_TRUE(p.cnp_pad().all_zero());
  }
  ASSERT_EQ(p.payload_len, payload.size());
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), p.payload().begin()));
}

class FrameRoundTrip : public ::testing::TestWithParam<std::tuple<Opcode, int>> {};

TEST_P(FrameRoundTrip, EveryFieldSurvives) {
  const auto [op, variant_index] = GetParam();
  const Variant variants[] = {{IpVersion::kV4, std::nullopt},
                              {IpVersion::kV6, std::nullopt},
                              {IpVersion::kV4, std::uint16_t{100}},
                              {IpVersion::kV6, std::uint16_t{4094}}};
  const Variant& v = variants[variant_index];
  std::uint32_t seed = 1;
  for (std::size_t len : payload_sizes(opcode_info(op))) {
    SCOPED_TRACE(testing::Message() << "payload " << len);
    const FrameSpec s = spec_for(op, v, seed++);
    std::vector<std::uint8_t> payload(len);
    for (std::size_t i = 0; i < len; ++i) payload[i] = static_cast<std::uint8_t>(i * 31 + seed);
    // Exactly sized buffer: the builder must use all of it, and the parser none beyond it.
    std::vector<std::uint8_t> frame(frame_len(s, len));
    ASSERT_EQ(build_frame(s, payload, frame), frame.size());
    EXPECT_EQ(frame_header_len(s) + len + pad_for(len) + kIcrcSize, frame.size());
    RxPkt p;
    ASSERT_EQ(parse_frame(frame, p), Verdict::kOk);
    EXPECT_EQ(p.frame_len, frame.size());
    expect_same(s, payload, p);
    // The pad bytes are zero.
    for (unsigned i = 0; i < p.pad; ++i) EXPECT_EQ(frame[p.payload_off + len + i], 0);
  }
}

std::string name_of(const testing::TestParamInfo<std::tuple<Opcode, int>>& info) {
  static const char* kVariant[] = {"ipv4", "ipv6", "ipv4_vlan", "ipv6_vlan"};
  return std::string(opcode_info(std::get<0>(info.param)).name) + "_" +
         kVariant[std::get<1>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(AllOpcodes, FrameRoundTrip,
                         testing::Combine(testing::ValuesIn(kKnownOpcodes), testing::Range(0, 4)),
                         name_of);

TEST(FrameBuilder, RefusesWhatCannotBeBuilt) {
  FrameSpec s;
  s.opcode = Opcode::kRcSendOnly;
  std::vector<std::uint8_t> payload(100, 0xAB);
  std::vector<std::uint8_t> out(frame_len(s, payload.size()) - 1);
  EXPECT_EQ(build_frame(s, payload, out), 0u) << "one byte too small";
  out.resize(out.size() + 1);
  EXPECT_EQ(build_frame(s, payload, out), out.size());

  s.opcode = static_cast<Opcode>(0x15);
  EXPECT_EQ(build_frame(s, payload, out), 0u) << "unknown opcode";
  s.opcode = Opcode::kRcAcknowledge;
  EXPECT_EQ(build_frame(s, payload, out), 0u) << "payload on an ACK";
  s.opcode = Opcode::kRcAtomicWrite;
  EXPECT_EQ(build_frame(s, payload, out), 0u) << "ATOMIC WRITE carries exactly 8 bytes";
  std::vector<std::uint8_t> huge(70000);
  std::vector<std::uint8_t> big_out(80000);
  s.opcode = Opcode::kRcSendOnly;
  EXPECT_EQ(build_frame(s, huge, big_out), 0u) << "longer than an IP packet can be";
}

TEST(FrameParser, IgnoresEthernetPaddingAfterTheIpPacket) {
  FrameSpec s;
  s.opcode = Opcode::kRcAcknowledge;
  std::vector<std::uint8_t> frame(frame_len(s, 0));
  ASSERT_EQ(build_frame(s, {}, frame), frame.size());
  const std::size_t real = frame.size();
  frame.resize(real + 10, 0);  // a NIC padding a short frame, or a trailing FCS
  RxPkt p;
  ASSERT_EQ(parse_frame(frame, p), Verdict::kOk);
  EXPECT_EQ(p.frame_len, real);
}

TEST(FrameParser, AcceptsAnyUdpChecksumAndMigReq) {
  FrameSpec s;
  s.opcode = Opcode::kRcSendOnly;
  s.mig_req = true;  // Mellanox hardware sends M=1; the ICRC covers it, receivers ignore it
  std::vector<std::uint8_t> frame(frame_len(s, 4));
  const std::uint8_t payload[4] = {1, 2, 3, 4};
  ASSERT_EQ(build_frame(s, payload, frame), frame.size());
  RxPkt p;
  ASSERT_EQ(parse_frame(frame, p), Verdict::kOk);
  frame[p.l4_off + 6] = 0x12;  // nonzero UDP checksum: masked by the ICRC, not verified
  frame[p.l4_off + 7] = 0x34;
  EXPECT_EQ(parse_frame(frame, p), Verdict::kOk);
}

}  // namespace
}  // namespace roce::wire
