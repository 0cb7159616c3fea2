// ICRC against the three independent test vectors of the wire reference (section 1.9): a real
// ConnectX-4 Lx CNP capture, and scapy's IPv4 and IPv6 UC SEND vectors.
#include "dataplane/wire/icrc.h"

#include <gtest/gtest.h>
#include <isa-l/crc.h>

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/crc_fold.h"
#include "dataplane/wire/roce_frame.h"

namespace roce::wire {
namespace {

std::vector<std::uint8_t> hex(std::string_view s) {
  std::vector<std::uint8_t> out;
  auto nib = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  for (std::size_t i = 0; i + 1 < s.size();) {
    if (s[i] == ' ') {
      ++i;
      continue;
    }
    out.push_back(static_cast<std::uint8_t>(nib(s[i]) << 4 | nib(s[i + 1])));
    i += 2;
  }
  return out;
}

// Vector 1: CX-4 Lx CNP, 74 bytes, ICRC value 0x2A00FD82 (wire bytes 82 fd 00 2a).
const auto kCnpFrame =
    hex("e41d2dab2bc2 7cfe90643b32 0800"
        "45c2 003c 718c 4000 4011 9161 0a001101 0a001201"
        "0000 12b7 0028 0000"
        "81 00 ffff 40 000118 00 000000"
        "00000000000000000000000000000000"
        "82fd002a");

// Vector 2: IPv4 UC SEND Only (scapy roce.uts), ICRC wire bytes 78 f3 53 f3.
const auto kUcSendFrame =
    hex("248a07a8fa22248a07a8fa220800"
        "45010040047840004011b4d5c0a80007c0a80007"
        "c00012b7002c0000"
        "2460ffff000000d300cf1710"
        "4630818be28935d90e9a95505401be885e500000"
        "78f353f3");

TEST(Crc32, MatchesZlibCheckValue) {
  const std::string_view s = "123456789";
  EXPECT_EQ(crc32_zlib(0, reinterpret_cast<const std::uint8_t*>(s.data()), s.size()), 0xCBF43926u);
}

TEST(Icrc, SeedIsCrcOfEightOnesBytes) {
  const std::uint8_t ff[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  EXPECT_EQ(crc32_zlib(0, ff, 8), kIcrcSeed);
  EXPECT_EQ(~kIcrcSeed, 0xDEBB20E3u) << "the register value rxe starts from";
}

TEST(Icrc, Vector1RealCnpCapture) {
  ASSERT_EQ(kCnpFrame.size(), 74u);
  const std::uint8_t* l3 = kCnpFrame.data() + 14;
  EXPECT_EQ(compute_icrc(l3, kCnpFrame.size() - 14 - 4, IpVersion::kV4), 0x2A00FD82u);
  EXPECT_EQ(load_le32(kCnpFrame.data() + 70), 0x2A00FD82u);
}

TEST(Icrc, Vector2Ipv4UcSend) {
  const std::uint8_t* l3 = kUcSendFrame.data() + 14;
  const std::size_t len = kUcSendFrame.size() - 14 - 4;
  EXPECT_EQ(compute_icrc(l3, len, IpVersion::kV4), load_le32(kUcSendFrame.data() + 14 + len));
  EXPECT_EQ(compute_icrc(l3, len, IpVersion::kV4), 0xF353F378u);
}

TEST(Icrc, Vector2IsIndependentOfMaskedFields) {
  // TOS, TTL, IP checksum, UDP checksum and BTH byte 4 are masked: changing them keeps the ICRC.
  auto f = kUcSendFrame;
  std::uint8_t* l3 = f.data() + 14;
  const std::size_t len = f.size() - 14 - 4;
  l3[1] = 0xB8;       // TOS
  l3[8] = 1;          // TTL
  l3[10] = 0x12;      // IP checksum
  l3[20 + 6] = 0xAC;  // UDP checksum (0xaca2 is the real one; masked anyway)
  l3[20 + 7] = 0xA2;
  l3[28 + 4] = 0x40;  // BECN
  EXPECT_EQ(compute_icrc(l3, len, IpVersion::kV4), 0xF353F378u);
  // ...but AckReq (BTH byte 8) and the payload are covered.
  l3[28 + 8] = 0x80;
  EXPECT_NE(compute_icrc(l3, len, IpVersion::kV4), 0xF353F378u);
}

TEST(Icrc, Vector3Ipv6UcSend) {
  // The IPv6 variant of vector 2: traffic class 226, flow label 0x1FACE, hop limit 255,
  // 2022::1023 -> 2023::1024; same UDP, BTH and payload. ICRC wire bytes 3e 5b 74 3b.
  const auto l3 =
      hex("6e21face002c11ff"
          "20220000000000000000000000001023"
          "20230000000000000000000000001024"
          "c00012b7002c0000"
          "2460ffff000000d300cf1710"
          "4630818be28935d90e9a95505401be885e500000");
  const std::uint32_t icrc = compute_icrc(l3.data(), l3.size(), IpVersion::kV6);
  std::uint8_t wire[4];
  store_le32(wire, icrc);
  EXPECT_EQ(std::vector<std::uint8_t>(wire, wire + 4), hex("3e5b743b"));
  // Traffic class, flow label and hop limit are masked.
  auto masked = l3;
  masked[0] = 0x60;
  masked[1] = masked[2] = masked[3] = 0;
  masked[7] = 1;
  EXPECT_EQ(compute_icrc(masked.data(), masked.size(), IpVersion::kV6), icrc);
}

TEST(Icrc, IncrementalEqualsContiguous) {
  const std::uint8_t* l3 = kUcSendFrame.data() + 14;
  const std::size_t len = kUcSendFrame.size() - 14 - 4;
  for (std::size_t split = 40; split <= len; ++split) {
    Icrc c = Icrc::begin(l3, IpVersion::kV4);
    c.update(l3 + 40, split - 40);
    c.update(l3 + split, len - split);
    ASSERT_EQ(c.value(), 0xF353F378u) << "split at " << split;
  }
}

TEST(Icrc, DoesNotModifyTheFrame) {
  auto f = kCnpFrame;
  compute_icrc(f.data() + 14, f.size() - 18, IpVersion::kV4);
  EXPECT_EQ(f, kCnpFrame);
}

TEST(Icrc, BuilderReproducesVector2) {
  FrameSpec s;
  s.src_mac = s.dst_mac = MacAddr{{0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22}};
  s.src_ip4 = s.dst_ip4 = Ipv4Addr{0xC0A80007};
  s.tos = 0x01;
  s.ip_id = 1144;
  s.ttl = 64;
  s.udp_sport = 49152;
  s.opcode = Opcode::kUcSendOnly;
  s.mig_req = true;
  s.dest_qp = Qpn(211);
  s.psn = Psn(13571856);
  const auto payload = hex("4630818be28935d90e9a95505401be885e50");
  std::vector<std::uint8_t> out(128);
  const std::size_t n = build_frame(s, payload, out);
  out.resize(n);
  EXPECT_EQ(out, kUcSendFrame);
}

// The short-buffer kernel against ISA-L: every length it takes, every head length (n % 16,
// which decides how the initial value is split), unaligned starts, random bytes and states.
TEST(Crc32Fold, MatchesIsalForEveryLength) {
  if (!kCrcFoldUsable) GTEST_SKIP() << "no PCLMULQDQ on this CPU";
  std::mt19937_64 rng(7);
  std::vector<std::uint8_t> buf(kCrcFoldMax + 64);
  int mismatches = 0;
  for (std::size_t n = 16; n < kCrcFoldMax; ++n) {
    for (int trial = 0; trial < 40; ++trial) {
      for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
      const std::size_t off = rng() % 64;
      const auto state = trial == 0 ? 0u : trial == 1 ? ~0u : static_cast<std::uint32_t>(rng());
      const std::uint32_t want = crc32_gzip_refl(state, buf.data() + off, n);
      const std::uint32_t got = crc32_fold(state, buf.data() + off, n);
      if (got != want && ++mismatches <= 5)
        ADD_FAILURE() << "n=" << n << " off=" << off << " state=" << state << ": " << got
                      << " != " << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// The masked form (the ICRC read in place): the CRC of p[i] | m[i] equals ISA-L's over an ORed
// copy, for every length and head length, sparse and dense masks.
TEST(Crc32Fold, OrMaskMatchesAMaskedCopy) {
  if (!kCrcFoldUsable) GTEST_SKIP() << "no PCLMULQDQ on this CPU";
  std::mt19937_64 rng(11);
  std::vector<std::uint8_t> buf(kCrcFoldMax + 64), mask(kCrcFoldMax + 64), copy(kCrcFoldMax);
  int mismatches = 0;
  for (std::size_t n = 16; n < kCrcFoldMax; ++n) {
    for (int trial = 0; trial < 20; ++trial) {
      for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
      for (auto& b : mask) b = rng() % 4 == 0 ? static_cast<std::uint8_t>(rng()) : 0;
      const std::size_t off = rng() % 64, moff = rng() % 64;
      for (std::size_t i = 0; i < n; ++i) copy[i] = buf[off + i] | mask[moff + i];
      const auto state = static_cast<std::uint32_t>(rng());
      const std::uint32_t want = crc32_gzip_refl(state, copy.data(), n);
      const std::uint32_t got = crc32_fold_or(state, buf.data() + off, n, mask.data() + moff);
      if (got != want && ++mismatches <= 5)
        ADD_FAILURE() << "n=" << n << ": " << got << " != " << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// compute_icrc of every short length (the in-place form) against the masked copy of Icrc.
TEST(Crc32Fold, ComputeIcrcInPlaceMatchesIncremental) {
  std::mt19937_64 rng(5);
  std::vector<std::uint8_t> buf(kCrcFoldMax + 16);
  for (const IpVersion v : {IpVersion::kV4, IpVersion::kV6}) {
    const std::size_t hdr = (v == IpVersion::kV4 ? 20 : 40) + 8 + 12;
    for (std::size_t n = hdr; n < kCrcFoldMax + 16; ++n) {
      for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
      Icrc c = Icrc::begin(buf.data(), v);  // masks a copy of the headers
      c.update(buf.data() + hdr, n - hdr);
      ASSERT_EQ(compute_icrc(buf.data(), n, v), c.value()) << "n=" << n;
    }
  }
}

TEST(Crc32Fold, ZeroAndOnesBuffers) {
  if (!kCrcFoldUsable) GTEST_SKIP() << "no PCLMULQDQ on this CPU";
  for (const std::uint8_t fill : {std::uint8_t{0x00}, std::uint8_t{0xFF}}) {
    const std::vector<std::uint8_t> buf(kCrcFoldMax, fill);
    for (std::size_t n = 16; n < kCrcFoldMax; ++n)
      ASSERT_EQ(crc32_fold(kIcrcSeed, buf.data(), n), crc32_gzip_refl(kIcrcSeed, buf.data(), n))
          << "n=" << n << " fill=" << int{fill};
  }
}

}  // namespace
}  // namespace roce::wire
