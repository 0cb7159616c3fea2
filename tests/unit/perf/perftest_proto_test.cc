// perftest's out-of-band messages: golden bytes from the wire reference and perftest's formats.
#include "apps/perf/perftest_proto.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace roce::perf::pt {
namespace {

wire::Ipv6Addr mapped(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  wire::Ipv6Addr g{};
  g.b[10] = g.b[11] = 0xFF;
  g.b[12] = a;
  g.b[13] = b;
  g.b[14] = c;
  g.b[15] = d;
  return g;
}

TEST(PerftestProto, DestMessageMatchesTheReferenceExample) {
  Dest d;
  d.out_reads = 1;
  d.qpn = 0x123;
  d.psn = 0xabcdef;
  d.rkey = 0x1234;
  d.vaddr = 0x7f0000001000;
  d.gid = mapped(10, 0, 0, 1);
  const auto m = dest_msg(d);
  const std::string want =
      "0000:0001:000123:abcdef:00001234:00007f0000001000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:"
      "00:00:01:00000000:";
  EXPECT_EQ(std::string(m.data()), want);
  EXPECT_EQ(want.size() + 1, kDestLen);  // sent with its NUL
  EXPECT_EQ(m[kDestLen - 1], '\0');
  const auto back = dest_of(m);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, d);
}

TEST(PerftestProto, DestRoundTripsExtremeValues) {
  Dest d;
  d.lid = 0xFFFF;
  d.out_reads = 0xFFFF;
  d.qpn = 0xFFFFFF;
  d.psn = 0xFFFFFF;
  d.rkey = 0xFFFFFFFF;
  d.vaddr = ~0ull;
  for (auto& b : d.gid.b) b = 0xFE;
  d.srqn = 0xFFFFFFFF;
  const auto back = dest_of(dest_msg(d));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, d);
}

// perftest -R: struct pingpong_dest, big-endian fields at their C offsets (x86-64 layout).
TEST(PerftestProto, BinaryDestOverRdmaCmLayout) {
  Dest d;
  d.lid = 0x0102;
  d.out_reads = 16;
  d.qpn = 0x000011;
  d.psn = 0xabcdef;
  d.rkey = 0x11223344;
  d.vaddr = 0x00007f0012345678;
  d.gid = mapped(192, 0, 2, 1);
  d.srqn = 0x55;
  const auto m = dest_bin(d, 3);
  ASSERT_EQ(m.size(), 56u);
  const std::uint8_t want[56] = {
      0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x11,
      0x00, 0xab, 0xcd, 0xef, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x00, 0x00,  // padding
      0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x56, 0x78,                          // vaddr
      0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0xff, 0xff,
      192,  0,    2,    1,                              // GID
      0x00, 0x00, 0x00, 0x55, 0x00, 0x00, 0x00, 0x03};  // srqn, gid_index
  EXPECT_EQ(std::memcmp(m.data(), want, 56), 0);
  auto back = dest_of_bin(m);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, d);
  // The padding carries the sender's garbage; the reader ignores it.
  auto garbage = m;
  garbage[20] = garbage[21] = garbage[22] = garbage[23] = 0xA5;
  back = dest_of_bin(garbage);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, d);
}

TEST(PerftestProto, BinaryDestWithWideQpnOrPsnIsRejected) {
  auto m = dest_bin(Dest{});
  m[8] = 0x01;  // QPN 0x01000000
  EXPECT_FALSE(dest_of_bin(m));
  m = dest_bin(Dest{});
  m[12] = 0x80;  // PSN 0x80000000
  EXPECT_FALSE(dest_of_bin(m));
  EXPECT_TRUE(dest_of_bin(dest_bin(Dest{})));
}

TEST(PerftestProto, MalformedDestIsRejected) {
  auto m = dest_msg(Dest{});
  auto bad = m;
  bad[4] = '-';  // a separator
  EXPECT_FALSE(dest_of(bad));
  bad = m;
  bad[0] = 'g';  // not hex
  EXPECT_FALSE(dest_of(bad));
  bad = m;
  bad[kDestLen - 1] = 'x';  // no NUL
  EXPECT_FALSE(dest_of(bad));
  bad = m;
  bad[50] = '\0';  // short
  EXPECT_FALSE(dest_of(bad));
}

TEST(PerftestProto, VersionsCompareNumericallyByField) {
  EXPECT_LT(compare_versions("6.06", "6.28"), 0);
  EXPECT_LT(compare_versions("5.70", "6.06"), 0);
  EXPECT_GT(compare_versions("6.29", "6.28"), 0);
  EXPECT_EQ(compare_versions("6.06", "6.06"), 0);
  EXPECT_LT(compare_versions("5.9", "5.70"), 0);  // 9 < 70, as atof would not say
  EXPECT_LT(compare_versions("", kMinVersion), 0);
  const auto m = version_msg("6.06");
  EXPECT_EQ(std::memcmp(m.data(), "6.06\0\0\0\0\0\0\0\0\0\0\0\0", 16), 0);
  EXPECT_EQ(version_of(m), "6.06");
}

// roce-perf --selective-repeat asks in the version message's padding, past the NUL, where
// perftest sends zeros and reads nothing (it compares the version as a C string).
TEST(PerftestProto, SelectiveRepeatMarkSitsPastTheVersionsNul) {
  const auto plain = version_msg("6.06");
  EXPECT_EQ(sr_mark_of(plain), SrMark::kNone) << "perftest's own message: zeros past the NUL";
  const auto offer = version_msg("6.06", SrMark::kOffer);
  EXPECT_EQ(std::memcmp(offer.data(), "6.06\0\0\0\0\0\0RoSRo\0", 16), 0);
  EXPECT_EQ(version_of(offer), "6.06") << "what perftest reads of it";
  EXPECT_EQ(compare_versions(version_of(offer), "6.06"), 0);
  EXPECT_EQ(sr_mark_of(offer), SrMark::kOffer);
  EXPECT_EQ(sr_mark_of(version_msg("6.06", SrMark::kAccept)), SrMark::kAccept);
  // A version long enough to reach the mark's bytes is cut before them; one received that
  // runs into them carries no mark (it is somebody's version text).
  EXPECT_EQ(version_of(version_msg("6.06.0.123456", SrMark::kOffer)), "6.06.0.12");
  std::array<char, kVersionLen> longer{};
  std::memcpy(longer.data(), "6.06.0.12RoSRo", 14);
  EXPECT_EQ(sr_mark_of(longer), SrMark::kNone);
  std::array<char, kVersionLen> noise = plain;
  std::memcpy(noise.data() + kSrMarkAt, "RoSRx", 5);
  EXPECT_EQ(sr_mark_of(noise), SrMark::kNone);
}

TEST(PerftestProto, SysDataAndMtu) {
  const auto b = encode(SysData{4096, 64});
  const std::uint8_t want[] = {0, 0, 0x10, 0, 0, 0, 0, 0x40};
  EXPECT_EQ(std::memcmp(b.data(), want, 8), 0);
  const SysData s = decode_sys(b);
  EXPECT_EQ(s.cycle_buffer, 4096u);
  EXPECT_EQ(s.cache_line, 64u);
  const auto m = mtu_msg(mtu_enum_of_bytes(1024));
  EXPECT_EQ(m[0], '3');
  EXPECT_EQ(m[1], '\0');
  EXPECT_EQ(mtu_of(m), 3);
  EXPECT_EQ(mtu_bytes_of_enum(5), 4096u);
  EXPECT_EQ(mtu_enum_of_bytes(1500), 0);
  const std::array<char, 2> bad{'9', '\0'};
  EXPECT_FALSE(mtu_of(bad));
}

TEST(PerftestProto, ReportIsBigEndianIntegersAndDoubles) {
  Report r{65536, 5000, 1.5, 1.25, 0.0175};
  const auto b = encode(r);
  EXPECT_EQ(b[5], 0x01);  // 65536 = 0x10000, big-endian
  EXPECT_EQ(b[6], 0x00);
  EXPECT_EQ(b[14], 0x13);  // 5000 = 0x1388
  EXPECT_EQ(b[15], 0x88);
  EXPECT_EQ(b[16], 0x3F);  // 1.5 = 0x3FF8000000000000
  EXPECT_EQ(b[17], 0xF8);
  const Report back = decode_report(b);
  EXPECT_EQ(back.size, r.size);
  EXPECT_EQ(back.iters, r.iters);
  EXPECT_DOUBLE_EQ(back.bw_peak, r.bw_peak);
  EXPECT_DOUBLE_EQ(back.bw_avg, r.bw_avg);
  EXPECT_DOUBLE_EQ(back.msg_rate, r.msg_rate);
}

TEST(PerftestProto, NegotiateParamsLayout) {
  Params p;
  p.verb = 2;
  p.tst = 1;
  p.size = 65536;
  p.iters = 5000;
  p.num_of_qps = 3;
  p.max_qp_rd_atom = 16;
  std::array<std::uint8_t, kParamsLen> b{};
  encode(p, b);
  EXPECT_EQ(b[11], 2);                                           // verb, the third int32
  EXPECT_EQ(b[15], 1);                                           // tst
  EXPECT_EQ(b[37], 0x01);                                        // size @32, big-endian
  EXPECT_EQ(b[47], 0x88);                                        // iters @40
  EXPECT_EQ(b[55], 3);                                           // num_of_qps @52
  EXPECT_EQ(b[kParamsOffDevAttr + kDevAttrOffMaxQpRdAtom], 16);  // host order (x86)
  const Params back = decode_params(b);
  EXPECT_EQ(back, p);
  EXPECT_EQ(params_mismatch(p, back), "");
  Params other = p;
  other.iters = 1000;
  EXPECT_EQ(params_mismatch(p, other), "iters");
}

}  // namespace
}  // namespace roce::perf::pt
