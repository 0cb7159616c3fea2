// Golden-byte tests for every header view: the setters produce exactly the bytes of the spec
// layout, and the getters read them back. Expected bytes are written out by hand from the IBA
// figures (and, for the CNP, from a real ConnectX-4 Lx capture).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "dataplane/wire/aeth.h"
#include "dataplane/wire/atomiceth.h"
#include "dataplane/wire/bth.h"
#include "dataplane/wire/bytes.h"
#include "dataplane/wire/deth.h"
#include "dataplane/wire/eth.h"
#include "dataplane/wire/ip.h"
#include "dataplane/wire/reth.h"
#include "dataplane/wire/udp.h"

namespace roce::wire {
namespace {

using Bytes = std::vector<std::uint8_t>;

TEST(Bytes, BigEndianLoadsAndStores) {
  std::array<std::uint8_t, 8> b{};
  store_be16(b.data(), 0x1234);
  EXPECT_EQ(b[0], 0x12);
  EXPECT_EQ(b[1], 0x34);
  store_be24(b.data(), 0xABCDEF);
  EXPECT_EQ((Bytes{b[0], b[1], b[2]}), (Bytes{0xAB, 0xCD, 0xEF}));
  EXPECT_EQ(load_be24(b.data()), 0xABCDEFu);
  store_be32(b.data(), 0x01020304);
  EXPECT_EQ((Bytes{b[0], b[1], b[2], b[3]}), (Bytes{1, 2, 3, 4}));
  store_be64(b.data(), 0x0102030405060708ull);
  EXPECT_EQ(Bytes(b.begin(), b.end()), (Bytes{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(load_be64(b.data()), 0x0102030405060708ull);
  store_le32(b.data(), 0x2A00FD82);
  EXPECT_EQ((Bytes{b[0], b[1], b[2], b[3]}), (Bytes{0x82, 0xFD, 0x00, 0x2A}));
  EXPECT_EQ(load_le32(b.data()), 0x2A00FD82u);
}

TEST(EthView, GoldenBytes) {
  Bytes b(14);
  EthView e(b.data());
  e.set_dst(MacAddr{{0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2}});
  e.set_src(MacAddr{{0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32}});
  e.set_ether_type(kEtherTypeIpv4);
  EXPECT_EQ(b, (Bytes{0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08,
                      0x00}));
  ConstEthView c(b.data());
  EXPECT_EQ(c.src().b[5], 0x32);
  EXPECT_EQ(c.ether_type(), 0x0800);
}

TEST(VlanView, GoldenBytes) {
  Bytes b(4);
  VlanView v(b.data());
  v.set_tci(5, true, 0x123);
  v.set_ether_type(kEtherTypeIpv6);
  EXPECT_EQ(b, (Bytes{0xB1, 0x23, 0x86, 0xDD}));
  EXPECT_EQ(v.pcp(), 5);
  EXPECT_TRUE(v.dei());
  EXPECT_EQ(v.vid(), 0x123);
}

// The IPv4 header of the CX-4 Lx CNP capture (wire reference 1.9, vector 1).
const Bytes kCnpIpv4{0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11,
                     0x91, 0x61, 0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00, 0x12, 0x01};

TEST(Ipv4View, ReadsRealHeader) {
  ConstIpv4View ip(kCnpIpv4.data());
  EXPECT_EQ(ip.version(), 4);
  EXPECT_EQ(ip.header_len(), 20u);
  EXPECT_EQ(ip.tos(), 0xC2);
  EXPECT_EQ(ip.dscp(), 48);
  EXPECT_EQ(ip.ecn(), 2);
  EXPECT_EQ(ip.total_len(), 60);
  EXPECT_EQ(ip.id(), 0x718C);
  EXPECT_FALSE(ip.is_fragment());
  EXPECT_EQ(ip.ttl(), 64);
  EXPECT_EQ(ip.protocol(), kIpProtoUdp);
  EXPECT_EQ(ip.checksum(), 0x9161);
  EXPECT_EQ(ip.src().v, 0x0A001101u);
  EXPECT_EQ(ip.dst().v, 0x0A001201u);
  EXPECT_EQ(ipv4_header_checksum(kCnpIpv4.data(), kCnpIpv4.size()), 0) << "real header verifies";
}

TEST(Ipv4View, WritesSameBytes) {
  Bytes b(20);
  Ipv4View ip(b.data());
  ip.set_version_ihl();
  ip.set_tos(0xC2);
  ip.set_total_len(60);
  ip.set_id(0x718C);
  ip.set_frag(Ipv4View::kFlagDf);
  ip.set_ttl(64);
  ip.set_protocol(kIpProtoUdp);
  ip.set_src(Ipv4Addr{0x0A001101});
  ip.set_dst(Ipv4Addr{0x0A001201});
  ip.set_checksum(ipv4_header_checksum(b.data(), b.size()));
  EXPECT_EQ(b, kCnpIpv4);
}

TEST(Ipv4View, ChecksumOfRandomHeadersMatchesTheBigEndianDefinition) {
  // The 20-byte fast path against RFC 791's definition, word by word in network order.
  std::uint32_t x = 12345;
  for (int n = 0; n < 1000; ++n) {
    Bytes b(20);
    for (auto& v : b) v = static_cast<std::uint8_t>((x = x * 1103515245u + 12345u) >> 16);
    b[10] = b[11] = 0;
    std::uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(b[i] << 8 | b[i + 1]);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    ASSERT_EQ(ipv4_header_checksum(b.data(), b.size()), static_cast<std::uint16_t>(~sum & 0xFFFF));
  }
}

TEST(Ipv4View, FragmentBits) {
  Bytes b = kCnpIpv4;
  Ipv4View ip(b.data());
  ip.set_frag(Ipv4View::kFlagMf);
  EXPECT_TRUE(ip.is_fragment());
  ip.set_frag(0x0001);
  EXPECT_TRUE(ip.is_fragment());
  ip.set_frag(Ipv4View::kFlagDf);
  EXPECT_FALSE(ip.is_fragment());
}

TEST(Ipv6View, GoldenBytes) {
  // Traffic class 226 (0xE2), flow label 0x1FACE, as in the scapy IPv6 vector.
  Bytes b(40);
  Ipv6View ip(b.data());
  ip.set_version_tc_flow(226, 0x1FACE);
  ip.set_payload_len(44);
  ip.set_next_header(kIpProtoUdp);
  ip.set_hop_limit(255);
  Ipv6Addr src{{0x20, 0x22, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x23}};
  Ipv6Addr dst{{0x20, 0x23, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x24}};
  ip.set_src(src);
  ip.set_dst(dst);
  EXPECT_EQ((Bytes(b.begin(), b.begin() + 8)),
            (Bytes{0x6E, 0x21, 0xFA, 0xCE, 0x00, 0x2C, 0x11, 0xFF}));
  EXPECT_EQ(ip.version(), 6);
  EXPECT_EQ(ip.traffic_class(), 226);
  EXPECT_EQ(ip.ecn(), 2);
  EXPECT_EQ(ip.flow_label(), 0x1FACEu);
  EXPECT_EQ(ip.payload_len(), 44);
  EXPECT_EQ(ip.src(), src);
  EXPECT_EQ(ip.dst(), dst);
  EXPECT_EQ(b[8], 0x20);
  EXPECT_EQ(b[39], 0x24);
}

TEST(UdpView, GoldenBytes) {
  Bytes b(8);
  UdpView u(b.data());
  u.set_src_port(49152);
  u.set_dst_port(kRoceV2Port);
  u.set_length(44);
  u.set_checksum(0);
  EXPECT_EQ(b, (Bytes{0xC0, 0x00, 0x12, 0xB7, 0x00, 0x2C, 0x00, 0x00}));
  EXPECT_EQ(u.src_port(), 49152);
  EXPECT_EQ(u.dst_port(), 4791);
  EXPECT_EQ(u.length(), 44);
}

TEST(BthView, ReadsRealCnp) {
  const Bytes b{0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00};
  ConstBthView bth(b.data());
  EXPECT_EQ(bth.opcode(), Opcode::kCnp);
  EXPECT_FALSE(bth.se());
  EXPECT_EQ(bth.pad_cnt(), 0u);
  EXPECT_EQ(bth.tver(), 0u);
  EXPECT_EQ(bth.pkey(), 0xFFFF);
  EXPECT_FALSE(bth.fecn());
  EXPECT_TRUE(bth.becn());
  EXPECT_EQ(bth.dest_qp(), Qpn(0x118));
  EXPECT_FALSE(bth.ack_req());
  EXPECT_EQ(bth.psn(), Psn(0));
}

TEST(BthView, GoldenBytes) {
  // UC SEND Only, M=1, PadCnt=2, DestQP 211, PSN 0xCF1710 (scapy vector), plus SE and AckReq.
  Bytes b(12);
  BthView bth(b.data());
  bth.set_opcode(Opcode::kUcSendOnly);
  bth.set_flags(true, true, 2);
  bth.set_pkey(0xFFFF);
  bth.set_ecn_bits(true, false);
  bth.set_dest_qp(Qpn(211));
  bth.set_ack_req(true);
  bth.set_psn(Psn(0xCF1710));
  EXPECT_EQ(b, (Bytes{0x24, 0xE0, 0xFF, 0xFF, 0x80, 0x00, 0x00, 0xD3, 0x80, 0xCF, 0x17, 0x10}));
  EXPECT_TRUE(bth.se());
  EXPECT_TRUE(bth.mig_req());
  EXPECT_EQ(bth.pad_cnt(), 2u);
  EXPECT_TRUE(bth.fecn());
  EXPECT_TRUE(bth.ack_req());
  EXPECT_EQ(bth.psn(), Psn(0xCF1710));
}

TEST(RethView, GoldenBytes) {
  Bytes b(16);
  RethView r(b.data());
  r.set_va(0x00007F3A12345678ull);
  r.set_rkey(0x1A2B3C4D);
  r.set_dma_len(65536);
  EXPECT_EQ(b, (Bytes{0x00, 0x00, 0x7F, 0x3A, 0x12, 0x34, 0x56, 0x78, 0x1A, 0x2B, 0x3C, 0x4D, 0x00,
                      0x01, 0x00, 0x00}));
  EXPECT_EQ(r.va(), 0x00007F3A12345678ull);
  EXPECT_EQ(r.rkey(), 0x1A2B3C4Du);
  EXPECT_EQ(r.dma_len(), 65536u);
}

TEST(FethView, GoldenBytes) {
  Bytes b(4);
  FethView f(b.data());
  f.set(2, 1);
  EXPECT_EQ(b, (Bytes{0, 0, 0, 0x21}));
  EXPECT_EQ(f.selectivity(), 2u);
  EXPECT_EQ(f.placement_type(), 1u);
}

TEST(AethView, GoldenBytesAndSyndromes) {
  Bytes b(4);
  AethView a(b.data());
  a.set_syndrome(Syndrome::nak(NakCode::kPsnSeqError));
  a.set_msn(Msn(0x010203));
  EXPECT_EQ(b, (Bytes{0x60, 0x01, 0x02, 0x03}));
  EXPECT_EQ(a.syndrome().type(), AckType::kNak);
  EXPECT_EQ(a.syndrome().nak_code(), NakCode::kPsnSeqError);
  EXPECT_EQ(a.msn(), Msn(0x010203));

  EXPECT_EQ(Syndrome::ack().raw(), 0x1F);
  EXPECT_EQ(Syndrome::ack().type(), AckType::kAck);
  EXPECT_EQ(Syndrome::rnr_nak(12).raw(), 0x2C);
  EXPECT_EQ(Syndrome::rnr_nak(12).type(), AckType::kRnrNak);
  EXPECT_EQ(Syndrome::rnr_nak(12).value(), 12);
  EXPECT_EQ(Syndrome::nak(NakCode::kInvalidRequest).raw(), 0x61);
  EXPECT_EQ(Syndrome::nak(NakCode::kRemoteAccessError).raw(), 0x62);
  EXPECT_EQ(Syndrome::nak(NakCode::kRemoteOperationalError).raw(), 0x63);
  EXPECT_EQ(Syndrome(0x40).type(), AckType::kReserved);
}

TEST(AethView, CreditAndRnrTables) {
  EXPECT_EQ(kCreditTable[0], 0);
  EXPECT_EQ(kCreditTable[5], 6);
  EXPECT_EQ(kCreditTable[30], 32768);
  EXPECT_EQ(credit_code_for(0), 0);
  EXPECT_EQ(credit_code_for(7), 5);
  EXPECT_EQ(credit_code_for(1 << 20), 30);
  for (std::uint32_t c = 0; c < 40000; ++c) {  // the largest code not above c, every c
    std::uint8_t want = 0;
    for (std::uint8_t i = 0; i < kCreditTable.size(); ++i)
      if (kCreditTable[i] <= c) want = i;
    ASSERT_EQ(credit_code_for(c), want) << c;
  }
  EXPECT_EQ(kRnrTimerUs[0], 655360u) << "code 0 is the longest delay";
  EXPECT_EQ(kRnrTimerUs[12], 640u);
  EXPECT_EQ(kRnrTimerUs[25], 61440u);
  EXPECT_EQ(kRnrTimerUs[31], 491520u);
}

TEST(AtomicEthView, GoldenBytesAtUnalignedOffset) {
  // In a frame the AtomicETH follows the 12-byte BTH, so its 64-bit fields are 4-byte aligned
  // only; put it at an odd offset to make sure nothing assumes alignment.
  Bytes b(29);
  AtomicEthView a(b.data() + 1);
  a.set_va(0x1122334455667788ull);
  a.set_rkey(0xA0B0C0D0);
  a.set_swap_add(0x0102030405060708ull);
  a.set_compare(0xF0E0D0C0B0A09080ull);
  EXPECT_EQ(b, (Bytes{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xA0,
                      0xB0, 0xC0, 0xD0, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                      0x08, 0xF0, 0xE0, 0xD0, 0xC0, 0xB0, 0xA0, 0x90, 0x80}));
  EXPECT_EQ(a.va(), 0x1122334455667788ull);
  EXPECT_EQ(a.rkey(), 0xA0B0C0D0u);
  EXPECT_EQ(a.swap_add(), 0x0102030405060708ull);
  EXPECT_EQ(a.compare(), 0xF0E0D0C0B0A09080ull);
}

TEST(AtomicAckEthView, GoldenBytes) {
  Bytes b(8);
  AtomicAckEthView a(b.data());
  a.set_orig(0xCAFEBABE00000001ull);
  EXPECT_EQ(b, (Bytes{0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 1}));
  EXPECT_EQ(a.orig(), 0xCAFEBABE00000001ull);
}

TEST(DethView, GoldenBytes) {
  Bytes b(8, 0xEE);
  DethView d(b.data());
  d.set_qkey(kGsiQkey);
  d.set_src_qp(Qpn(1));
  EXPECT_EQ(b, (Bytes{0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01}));
  EXPECT_EQ(d.qkey(), 0x80010000u);
  EXPECT_EQ(d.src_qp(), Qpn(1));
}

TEST(ImmDtAndIeth, GoldenBytes) {
  Bytes b(4);
  ImmDtView(b.data()).set_imm(0xDEADBEEF);
  EXPECT_EQ(b, (Bytes{0xDE, 0xAD, 0xBE, 0xEF}));
  EXPECT_EQ(ConstImmDtView(b.data()).imm(), 0xDEADBEEFu);
  IethView(b.data()).set_rkey(0x0BADF00D);
  EXPECT_EQ(b, (Bytes{0x0B, 0xAD, 0xF0, 0x0D}));
  EXPECT_EQ(ConstIethView(b.data()).rkey(), 0x0BADF00Du);
}

TEST(CnpPadView, ClearAndCheck) {
  Bytes b(16, 0x5A);
  CnpPadView c(b.data());
  EXPECT_FALSE(c.all_zero());
  c.clear();
  EXPECT_TRUE(c.all_zero());
  EXPECT_EQ(b, Bytes(16, 0));
}

}  // namespace
}  // namespace roce::wire

namespace roce::wire {
namespace {

TEST(Udp6Checksum, VerifiesToZeroAndNeverSendsZero) {
  Bytes ip(40);
  Ipv6View v6(ip.data());
  v6.set_version_tc_flow(0, 0);
  v6.set_src(Ipv6Addr{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}});
  v6.set_dst(Ipv6Addr{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}});
  Bytes udp{0xC0, 0x00, 0x12, 0xB7, 0x00, 0x0D, 0x00, 0x00, 'h', 'e', 'l', 'l', 'o'};
  const std::uint16_t c = udp6_checksum(ip.data(), udp.data(), udp.size());
  EXPECT_NE(c, 0);
  store_be16(udp.data() + 6, c);
  // Summing again with the checksum in place gives all ones, i.e. a computed value of 0,
  // which is sent as 0xFFFF.
  EXPECT_EQ(udp6_checksum(ip.data(), udp.data(), udp.size()), 0xFFFF);
}

}  // namespace
}  // namespace roce::wire
