// The fast paths' wire side (fast_frame.h, issue 33): write_request_only() must put on the wire
// exactly the bytes of the template writer and of the generic builder for every one-packet
// request it writes; the ICRC kernels with the seed and block count known must give
// crc32_fold's and crc32_fold_or's values for every length; the expected header must match
// the frames a peer sends and miss whenever a byte it covers differs.
#include "dataplane/wire/fast_frame.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dataplane/wire/icrc.h"

namespace roce::wire {
namespace {

FrameSpec path(bool ip_checksum, std::uint8_t tos, std::uint8_t ttl) {
  FrameSpec s;
  s.src_mac = MacAddr{{0x02, 0, 0, 0, 0, 0x01}};
  s.dst_mac = MacAddr{{0x02, 0, 0, 0, 0, 0x02}};
  s.src_ip4 = Ipv4Addr{0xC0000201};  // 192.0.2.1
  s.dst_ip4 = Ipv4Addr{0xC0000202};
  s.tos = tos;
  s.ttl = ttl;
  s.ip_checksum = ip_checksum;
  s.udp_sport = 0xC123;
  s.pkey = 0xFFFF;
  s.dest_qp = Qpn(0x000123);
  return s;
}

template <Opcode kOp>
std::size_t write_fast(const PathTemplate& t, const PacketFields& f, const std::uint8_t* payload,
                       std::uint32_t len, std::uint8_t* out) {
  OnlyFields o;
  o.ip_id = f.ip_id;
  o.se = f.se;
  o.psn = f.psn.raw();
  o.reth_va = f.reth_va;
  o.reth_rkey = f.reth_rkey;
  o.reth_len = f.reth_len;
  o.imm = kOp == Opcode::kRcSendOnlyInv ? f.ieth_rkey : f.imm;
  return write_request_only<kOp>(t, o, payload, len, out);
}

std::size_t write_fast(Opcode op, const PathTemplate& t, const PacketFields& f,
                       const std::uint8_t* payload, std::uint32_t len, std::uint8_t* out) {
  switch (op) {
    case Opcode::kRcWriteOnly:
      return write_fast<Opcode::kRcWriteOnly>(t, f, payload, len, out);
    case Opcode::kRcWriteOnlyImm:
      return write_fast<Opcode::kRcWriteOnlyImm>(t, f, payload, len, out);
    case Opcode::kRcSendOnly:
      return write_fast<Opcode::kRcSendOnly>(t, f, payload, len, out);
    case Opcode::kRcSendOnlyImm:
      return write_fast<Opcode::kRcSendOnlyImm>(t, f, payload, len, out);
    default:
      return write_fast<Opcode::kRcSendOnlyInv>(t, f, payload, len, out);
  }
}

TEST(FastFrame, RequestOnlyMatchesTheTemplateWriterAndTheGenericBuilder) {
  std::mt19937 rng(33);
  std::vector<std::uint8_t> payload(4096);
  for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
  std::vector<std::uint32_t> lens;
  for (std::uint32_t n = 0; n <= 300; ++n) lens.push_back(n);
  for (std::uint32_t n : {511u, 1023u, 1024u, 1025u, 2048u, 4093u, 4096u}) lens.push_back(n);
  int frames = 0;
  for (const Opcode op : {Opcode::kRcWriteOnly, Opcode::kRcWriteOnlyImm, Opcode::kRcSendOnly,
                          Opcode::kRcSendOnlyImm, Opcode::kRcSendOnlyInv}) {
    for (const bool csum : {true, false}) {
      const FrameSpec s = path(csum, static_cast<std::uint8_t>(rng()), 64);
      const PathTemplate t = make_path_template(s);
      ASSERT_TRUE(fast_tx_path(t));
      for (const std::uint32_t len : lens) {
        PacketFields f;
        f.opcode = op;
        f.se = (rng() & 1) != 0;
        f.ack_req = true;
        f.psn = Psn(static_cast<std::uint32_t>(rng()));
        f.ip_id = static_cast<std::uint16_t>(rng());
        f.reth_va = (std::uint64_t{rng()} << 32) | rng();
        f.reth_rkey = static_cast<std::uint32_t>(rng());
        f.reth_len = len;
        f.imm = static_cast<std::uint32_t>(rng());
        f.ieth_rkey = static_cast<std::uint32_t>(rng());
        std::vector<std::uint8_t> a(4400, 0xEE), b(4400, 0x11), c(4400);
        const std::size_t na = write_masked_frame(t, f, payload.data(), len, a.data());
        const std::size_t nb = write_fast(op, t, f, payload.data(), len, b.data());
        ASSERT_NE(na, 0u);
        ASSERT_EQ(na, nb) << opcode_info(op).name << " len " << len;
        ASSERT_TRUE(std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(na), b.begin()))
            << opcode_info(op).name << " len " << len;
        // The generic builder, field by field.
        FrameSpec g = s;
        g.opcode = op;
        g.se = f.se;
        g.ack_req = true;
        g.psn = f.psn;
        g.ip_id = f.ip_id;
        g.reth = {f.reth_va, f.reth_rkey, f.reth_len};
        g.imm = f.imm;
        g.ieth_rkey = f.ieth_rkey;
        const std::size_t nc = build_frame(g, {payload.data(), len}, c);
        ASSERT_EQ(nc, nb);
        ASSERT_TRUE(std::equal(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(nc), b.begin()))
            << opcode_info(op).name << " len " << len;
        RxPkt pkt;
        ParseOptions po;
        po.verify_ip_checksum = csum;  // (without: left 0 for the NIC)
        ASSERT_EQ(parse_frame({b.data(), nb}, pkt, po), Verdict::kOk);
        ++frames;
      }
    }
  }
  EXPECT_EQ(frames, 5 * 2 * 308);
}

// The zero-copy writer (write_zero_copy_headers + finish_zero_copy, the requester's
// req_fast_zc) against the template writer's pieces form (write_masked_headers +
// finish_masked_pieces, req_packet's zero-copy path) and the generic builder over the whole
// frame: every First, Middle, Last and Only opcode (those with a RETH through
// write_zero_copy_headers_reth), AckReq and SE both ways, every pad, both IP checksum
// settings, with and without the fold kernel.
TEST(FastFrame, ZeroCopyPacketMatchesTheTemplateWriterAndTheGenericBuilder) {
  std::mt19937 rng(34);
  std::vector<std::uint8_t> payload(4096 + 3);
  for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
  int frames = 0;
  for (const Opcode op :
       {Opcode::kRcWriteMiddle, Opcode::kRcWriteLast, Opcode::kRcWriteLastImm,
        Opcode::kRcSendMiddle, Opcode::kRcSendLast, Opcode::kRcSendLastImm, Opcode::kRcSendLastInv,
        Opcode::kRcWriteFirst, Opcode::kRcWriteOnly, Opcode::kRcWriteOnlyImm, Opcode::kRcSendFirst,
        Opcode::kRcSendOnly, Opcode::kRcSendOnlyImm, Opcode::kRcSendOnlyInv}) {
    const bool reth = opcode_info(op).has(Ext::kReth);
    for (const bool csum : {true, false}) {
      const FrameSpec s = path(csum, static_cast<std::uint8_t>(rng()), 64);
      const PathTemplate t = make_path_template(s);
      ASSERT_TRUE(fast_tx_path(t));
      for (const std::uint32_t len : {1u, 2u, 3u, 4u, 5u, 255u, 256u, 511u, 512u, 1023u, 1024u,
                                      2049u, 4093u, 4094u, 4095u, 4096u}) {
        for (const bool fold : {true, false}) {
          if (fold && !kCrcFoldUsable) continue;
          PacketFields f;
          f.opcode = op;
          f.se = (rng() & 1) != 0;
          f.ack_req = (rng() & 1) != 0;
          f.psn = Psn(static_cast<std::uint32_t>(rng()));
          f.ip_id = static_cast<std::uint16_t>(rng());
          f.imm = static_cast<std::uint32_t>(rng());
          f.ieth_rkey = static_cast<std::uint32_t>(rng());
          f.reth_va = (std::uint64_t{rng()} << 32) | rng();
          f.reth_rkey = static_cast<std::uint32_t>(rng());
          f.reth_len = static_cast<std::uint32_t>(rng());
          const std::uint8_t* p = payload.data() + (rng() % 4);  // any alignment
          // The template writer's zero-copy form.
          std::vector<std::uint8_t> a(128, 0xEE), b(128, 0x11);
          std::uint8_t ta[8] = {}, tb[8];
          std::memset(tb, 0x5A, sizeof tb);
          const std::size_t ha = write_masked_headers(t, f, len, a.data());
          ASSERT_NE(ha, 0u);
          const std::span<const std::uint8_t> piece(p, len);
          const std::size_t na = finish_masked_pieces(t, {a.data(), ha}, {&piece, 1}, ta);
          const std::uint32_t ext =
              op == Opcode::kRcSendLastInv || op == Opcode::kRcSendOnlyInv ? f.ieth_rkey : f.imm;
          const std::size_t hb = reth ? write_zero_copy_headers_reth(
                                            t, op, f.se, f.ack_req, f.psn.raw(), f.ip_id, f.reth_va,
                                            f.reth_rkey, f.reth_len, ext, len, b.data())
                                      : write_zero_copy_headers(t, op, f.se, f.ack_req, f.psn.raw(),
                                                                f.ip_id, ext, len, b.data());
          const std::size_t nb = finish_zero_copy(t, b.data(), hb, p, len, tb, fold);
          const std::string what = std::string(opcode_info(op).name) + " len " +
                                   std::to_string(len) + (fold ? " fold" : " isa-l");
          ASSERT_EQ(ha, hb) << what;
          ASSERT_EQ(na, nb) << what;
          ASSERT_TRUE(std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(ha), b.begin()))
              << what;
          ASSERT_TRUE(std::equal(ta, ta + na, tb)) << what;
          // The generic builder over the whole frame.
          std::vector<std::uint8_t> whole(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(hb));
          whole.insert(whole.end(), p, p + len);
          whole.insert(whole.end(), tb, tb + nb);
          FrameSpec g = s;
          g.opcode = op;
          g.se = f.se;
          g.ack_req = f.ack_req;
          g.psn = f.psn;
          g.ip_id = f.ip_id;
          g.imm = f.imm;
          g.ieth_rkey = f.ieth_rkey;
          g.reth = {f.reth_va, f.reth_rkey, f.reth_len};
          std::vector<std::uint8_t> c(4400);
          const std::size_t nc = build_frame(g, {p, len}, c);
          ASSERT_EQ(nc, whole.size()) << what;
          ASSERT_TRUE(std::equal(whole.begin(), whole.end(), c.begin())) << what;
          RxPkt pkt;
          ParseOptions po;
          po.verify_ip_checksum = csum;
          ASSERT_EQ(parse_frame(whole, pkt, po), Verdict::kOk) << what;
          ++frames;
        }
      }
    }
  }
  EXPECT_GE(frames, 14 * 2 * 16);
}

TEST(FastFrame, IcrcKernelsMatchTheGeneralFold) {
  if (!kCrcFoldUsable) GTEST_SKIP() << "no PCLMULQDQ/AVX";
  std::mt19937 rng(7);
  std::array<std::uint8_t, kCrcFoldMax> buf{};
  for (int round = 0; round < 8; ++round) {
    for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
    if (round == 0) buf.fill(0);
    if (round == 1) buf.fill(0xFF);
    for (std::size_t n = 16; n < kCrcFoldMax; ++n) {
      ASSERT_EQ(icrc_fold_v4(buf.data(), n), crc32_fold(kIcrcSeed, buf.data(), n)) << n;
      ASSERT_EQ(icrc_fold_v4_or(buf.data(), n),
                crc32_fold_or(kIcrcSeed, buf.data(), n, kIcrcOrMaskV4))
          << n;
      if (n >= 48) {  // (compute_icrc's frames hold IPv4, UDP and BTH at least)
        ASSERT_EQ(icrc_fold_v4_or(buf.data(), n), compute_icrc(buf.data(), n, IpVersion::kV4)) << n;
      }
    }
  }
}

// A frame the peer sends to the QP whose path is `s` (addresses reversed).
std::vector<std::uint8_t> from_peer(const FrameSpec& s, std::uint32_t qpn, std::uint8_t tos) {
  FrameSpec p = s;
  std::swap(p.src_mac, p.dst_mac);
  std::swap(p.src_ip4, p.dst_ip4);
  p.dest_qp = Qpn(qpn);
  p.opcode = Opcode::kRcWriteOnly;
  p.tos = tos;
  p.ttl = 17;
  p.udp_sport = 0xD00D;
  p.ack_req = true;
  p.psn = Psn(5);
  p.reth = {0x1000, 0x1234, 8};
  std::vector<std::uint8_t> out(256);
  const std::uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  out.resize(build_frame(p, payload, out));
  return out;
}

TEST(FastFrame, ExpectedHeaderMatchesThePeerAndMissesAnyCoveredByte) {
  const FrameSpec s = path(true, 0, 64);
  constexpr std::uint32_t kQpn = 0x10011;
  const RxExpect e = make_rx_expect(s, kQpn);
  ASSERT_TRUE(e.armed);
  for (const std::uint8_t tos : {0, 1, 2, 3, 0xB8}) {
    const auto f = from_peer(s, kQpn, tos);
    ASSERT_GE(f.size(), RxExpect::kSize);
    EXPECT_TRUE(rx_expect_match(e, f.data()));
    for (std::size_t i = 0; i < RxExpect::kSize; ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        auto g = f;
        g[i] ^= static_cast<std::uint8_t>(1u << bit);
        EXPECT_EQ(rx_expect_match(e, g.data()), ((kRxExpectMask[i] >> bit) & 1) == 0)
            << "byte " << i << " bit " << bit;
      }
    }
  }
  // The P_Key's membership bit and DF are not looked at; the other QP is not this one.
  auto f = from_peer(s, kQpn, 0);
  f[kFastBth + 2] &= 0x7F;
  f[kFastL3 + 6] ^= 0x40;
  EXPECT_TRUE(rx_expect_match(e, f.data()));
  EXPECT_FALSE(rx_expect_match(e, from_peer(s, kQpn + 0x10000, 0).data()));
  // IPv6 and VLAN paths are never armed.
  FrameSpec v = s;
  v.vlan_id = 7;
  EXPECT_FALSE(make_rx_expect(v, kQpn).armed);
  v = s;
  v.ip_version = IpVersion::kV6;
  EXPECT_FALSE(make_rx_expect(v, kQpn).armed);
}

}  // namespace
}  // namespace roce::wire
