// The hot-path writer (path_template.h) must put on the wire exactly the bytes of the generic
// builder (write_frame_headers + finish_frame), for every opcode it takes, every pad count,
// with and without a VLAN tag and the IP checksum, and in its zero-copy form.
#include "dataplane/wire/path_template.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

#include "dataplane/wire/icrc.h"

namespace roce::wire {
namespace {

FrameSpec path(bool vlan, bool ip_checksum, std::uint8_t tos) {
  FrameSpec s;
  s.src_mac = MacAddr{{0x02, 0, 0, 0, 0, 0x01}};
  s.dst_mac = MacAddr{{0x02, 0, 0, 0, 0, 0x02}};
  if (vlan) {
    s.vlan_id = 100;
    s.vlan_pcp = 3;
  }
  s.src_ip4 = Ipv4Addr{0xC0000201};  // 192.0.2.1
  s.dst_ip4 = Ipv4Addr{0xC0000202};
  s.tos = tos;
  s.ttl = 63;
  s.ip_checksum = ip_checksum;
  s.udp_sport = 0xC123;
  s.pkey = 0xFFFF;
  s.dest_qp = Qpn(0x000123);
  return s;
}

constexpr Opcode kOpcodes[] = {
    Opcode::kRcSendFirst,        Opcode::kRcSendMiddle,        Opcode::kRcSendLast,
    Opcode::kRcSendLastImm,      Opcode::kRcSendOnly,          Opcode::kRcSendOnlyImm,
    Opcode::kRcWriteFirst,       Opcode::kRcWriteMiddle,       Opcode::kRcWriteLast,
    Opcode::kRcWriteLastImm,     Opcode::kRcWriteOnly,         Opcode::kRcWriteOnlyImm,
    Opcode::kRcReadRequest,      Opcode::kRcReadResponseFirst, Opcode::kRcReadResponseMiddle,
    Opcode::kRcReadResponseLast, Opcode::kRcReadResponseOnly,  Opcode::kRcAcknowledge,
    Opcode::kRcSendLastInv,      Opcode::kRcSendOnlyInv,
};

TEST(PathTemplate, SameBytesAsTheGenericBuilder) {
  auto rng = [g = std::mt19937(7)]() mutable { return static_cast<std::uint32_t>(g()); };
  std::vector<std::uint8_t> payload(300);
  for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
  int compared = 0;
  for (const bool vlan : {false, true}) {
    for (const bool csum : {true, false}) {
      const FrameSpec base = path(vlan, csum, 0x02);
      const PathTemplate t = make_path_template(base);
      ASSERT_TRUE(t.usable());
      for (const Opcode op : kOpcodes) {
        ASSERT_TRUE(fast_opcode(op)) << raw(op);
        const bool has_payload = opcode_info(op).mask.has(OpMask::kPayload);
        for (const std::size_t len : {0, 1, 2, 3, 4, 5, 8, 12, 16, 17, 61, 256}) {
          if (!has_payload && len != 0) continue;
          FrameSpec s = base;
          s.opcode = op;
          s.se = (rng() & 1) != 0;
          s.ack_req = (rng() & 1) != 0;
          s.psn = Psn(rng() & 0xFFFFFF);
          s.ip_id = static_cast<std::uint16_t>(rng());
          s.reth = {(std::uint64_t{rng()} << 32) | rng(), rng(), rng()};
          s.imm = rng();
          s.ieth_rkey = rng();
          s.aeth = {Syndrome::ack(static_cast<std::uint8_t>(rng() & 0x1F)), Msn(rng() & 0xFFFFFF)};
          std::array<std::uint8_t, 512> want{}, got{};
          const std::size_t want_len = build_frame(s, {payload.data(), len}, want);
          ASSERT_NE(want_len, 0u);

          PacketFields f;
          f.opcode = op;
          f.se = s.se;
          f.ack_req = s.ack_req;
          f.psn = s.psn;
          f.ip_id = s.ip_id;
          f.reth_va = s.reth.va;
          f.reth_rkey = s.reth.rkey;
          f.reth_len = s.reth.dma_len;
          f.imm = s.imm;
          f.ieth_rkey = s.ieth_rkey;
          f.aeth_syndrome = s.aeth.syndrome;
          f.aeth_msn = s.aeth.msn;
          got.fill(0xEE);
          const std::size_t hdr = write_masked_headers(t, f, len, got.data());
          ASSERT_EQ(hdr, frame_header_len(s));
          std::memcpy(got.data() + hdr, payload.data(), len);
          const std::size_t got_len = finish_masked(t, hdr, len, got.data());
          ASSERT_EQ(got_len, want_len);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want_len))
              << "opcode " << int{raw(op)} << " len " << len << " vlan " << vlan;

          // The one-call form (the requester's hot path).
          std::array<std::uint8_t, 512> one{};
          one.fill(0xEE);
          ASSERT_EQ(write_masked_frame(t, f, payload.data(), len, one.data()), want_len);
          ASSERT_EQ(0, std::memcmp(one.data(), want.data(), want_len))
              << "write_masked_frame: opcode " << int{raw(op)} << " len " << len;

          // Zero-copy: headers in one place, the payload in up to three pieces elsewhere.
          if (len != 0) {
            std::array<std::uint8_t, 128> head{};
            std::array<std::uint8_t, 8> trailer{};
            ASSERT_EQ(write_masked_headers(t, f, len, head.data()), hdr);
            const std::size_t cut1 = len / 3, cut2 = 2 * len / 3;
            const std::span<const std::uint8_t> pieces[] = {{payload.data(), cut1},
                                                            {payload.data() + cut1, cut2 - cut1},
                                                            {payload.data() + cut2, len - cut2}};
            const std::size_t tl =
                finish_masked_pieces(t, {head.data(), hdr}, pieces, trailer.data());
            ASSERT_EQ(hdr + len + tl, want_len);
            EXPECT_EQ(0, std::memcmp(head.data(), want.data(), hdr));
            EXPECT_EQ(0, std::memcmp(trailer.data(), want.data() + hdr + len, tl));
          }
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 300);
}

TEST(PathTemplate, ParsesWithAValidIcrcAndChecksum) {
  const PathTemplate t = make_path_template(path(false, true, 0));
  PacketFields f;
  f.opcode = Opcode::kRcWriteOnly;
  f.psn = Psn(5);
  f.reth_len = 8;
  std::array<std::uint8_t, 128> buf{};
  const std::size_t hdr = write_masked_headers(t, f, 8, buf.data());
  const std::size_t n = finish_masked(t, hdr, 8, buf.data());
  RxPkt pkt;
  ASSERT_EQ(parse_frame({buf.data(), n}, pkt), Verdict::kOk);
  EXPECT_EQ(pkt.psn, Psn(5));
  EXPECT_EQ(pkt.payload_len, 8);
}

TEST(PathTemplate, RefusesWhatItCannotWrite) {
  FrameSpec v6 = path(false, true, 0);
  v6.ip_version = IpVersion::kV6;
  EXPECT_FALSE(make_path_template(v6).usable());
  const PathTemplate t = make_path_template(path(false, true, 0));
  std::array<std::uint8_t, 128> buf{};
  PacketFields f;
  for (const Opcode op : {Opcode::kRcCompareSwap, Opcode::kRcFetchAdd, Opcode::kUdSendOnly,
                          Opcode::kRcAtomicAcknowledge, Opcode{0x81}}) {
    f.opcode = op;
    EXPECT_FALSE(fast_opcode(op)) << int{raw(op)};
    EXPECT_EQ(write_masked_headers(t, f, 0, buf.data()), 0u) << int{raw(op)};
  }
  f.opcode = Opcode::kRcAcknowledge;  // an ACK carries no payload
  EXPECT_EQ(write_masked_headers(t, f, 4, buf.data()), 0u);
  f.opcode = static_cast<Opcode>(0x1F);  // unknown
  EXPECT_EQ(write_masked_headers(t, f, 0, buf.data()), 0u);
}

}  // namespace
}  // namespace roce::wire
