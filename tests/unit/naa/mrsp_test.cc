// MRSP codec: golden bytes of each message as the NAAICE figures lay them out, round trips,
// and malformed input (truncated, count too large for the buffer, bad type) rejected with a
// named reason.
#include "apps/naa/mrsp.h"

#include <gtest/gtest.h>

#include <random>

namespace roce::naa {
namespace {

TEST(Mrsp, AdvertiseRequestGoldenBytes) {
  AdvertiseRequest m;
  m.regions.push_back({0x01, 0x0000123456789AULL, 0x1122334455667788ULL, 0xA1B2C3D4, 0x00001000});
  m.regions.push_back({0x00, 0, 0x0102030405060708ULL, 7, 8});
  std::vector<std::uint8_t> b;
  ASSERT_EQ(encode(m, b), 52u);
  const std::vector<std::uint8_t> want = {
      0x01, 0x02, 0x00, 0x00,                          // type, count, padding
      0x01, 0x00, 0x00, 0x12, 0x34, 0x56, 0x78, 0x9A,  // flags, FPGA address (56 bits)
      0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,  // published addr
      0xA1, 0xB2, 0xC3, 0xD4,                          // rkey
      0x00, 0x00, 0x10, 0x00,                          // size
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  //
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,  //
      0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x08};
  EXPECT_EQ(b, want);
  const auto d = decode(b);
  ASSERT_TRUE(d.ok()) << d.detail;
  EXPECT_EQ(std::get<AdvertiseRequest>(d.message()).regions, m.regions);
  EXPECT_TRUE(std::get<AdvertiseRequest>(d.message()).regions[0].internal());
}

TEST(Mrsp, AdvertiseGoldenBytes) {
  Advertise m;
  m.regions.push_back({0xCAFEBABE00001000ULL, 0x00ABCDEF, 4096});
  std::vector<std::uint8_t> b;
  ASSERT_EQ(encode(m, b), 20u);
  const std::vector<std::uint8_t> want = {0x02, 0x01, 0x00, 0x00, 0xCA, 0xFE, 0xBA,
                                          0xBE, 0x00, 0x00, 0x10, 0x00, 0x00, 0xAB,
                                          0xCD, 0xEF, 0x00, 0x00, 0x10, 0x00};
  EXPECT_EQ(b, want);
  const auto d = decode(b);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(std::get<Advertise>(d.message()).regions, m.regions);
}

TEST(Mrsp, ErrorMessages) {
  for (auto e :
       {MrspError::kNotEnoughMemory, MrspError::kInvalidAddress, MrspError::kTooManyRegions}) {
    std::vector<std::uint8_t> b;
    ASSERT_EQ(encode(ErrorMsg{static_cast<std::uint8_t>(e)}, b), 4u);
    EXPECT_EQ(b, (std::vector<std::uint8_t>{0x00, static_cast<std::uint8_t>(e), 0, 0}));
    const auto d = decode(b);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(std::get<ErrorMsg>(d.message()).code, static_cast<std::uint8_t>(e));
    EXPECT_FALSE(to_string(e).empty());
  }
}

TEST(Mrsp, Limits) {
  EXPECT_EQ(kExchangeBufferSize, 4u + 32u * 24u);
  EXPECT_EQ(encoded_size(MsgType::kAdvertiseRequest, 255), 4u + 255u * 24u);
  AdvertiseRequest m;
  m.regions.resize(256);
  std::vector<std::uint8_t> b;
  EXPECT_EQ(encode(m, b), 0u);  // 256 regions do not fit the 8-bit count
  EXPECT_TRUE(b.empty());
  m.regions.resize(255);
  EXPECT_EQ(encode(m, b), 4u + 255u * 24u);
  m.regions.resize(1);
  m.regions[0].fpga_addr = 1ull << 56;
  b.clear();
  EXPECT_EQ(encode(m, b), 0u);
  EXPECT_EQ(encode(AdvertiseRequest{}, b), 0u);
}

TEST(Mrsp, Truncated) {
  for (std::size_t n = 0; n < 4; ++n) {
    std::vector<std::uint8_t> b(n, 0x01);
    const auto d = decode(b);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.error(), DecodeError::kTruncatedHeader);
    EXPECT_NE(d.detail.find("header"), std::string::npos);
  }
  AdvertiseRequest m;
  m.regions.resize(3);
  std::vector<std::uint8_t> b;
  encode(m, b);
  for (std::size_t n = 4; n < b.size(); ++n) {
    const auto d = decode(std::span(b).first(n));
    ASSERT_FALSE(d.ok()) << n;
    EXPECT_EQ(d.error(), DecodeError::kTruncatedEntries);
  }
  EXPECT_TRUE(decode(b).ok());
}

TEST(Mrsp, CountLargerThanBuffer) {
  // Count 255 in a 32-region exchange buffer: rejected, nothing read beyond it.
  std::vector<std::uint8_t> b(kExchangeBufferSize, 0);
  b[0] = 0x01;
  b[1] = 0xFF;
  const auto d = decode(b);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error(), DecodeError::kTruncatedEntries);
  EXPECT_NE(d.detail.find("255"), std::string::npos) << d.detail;
  b[0] = 0x02;
  b[1] = 0x31;  // 49 * 16 + 4 = 788 > 772
  EXPECT_EQ(decode(b).error(), DecodeError::kTruncatedEntries);
  b[1] = 0;
  EXPECT_EQ(decode(b).error(), DecodeError::kZeroCount);
}

TEST(Mrsp, BadType) {
  for (unsigned t : {0x03u, 0x04u, 0x7Fu, 0xFFu}) {
    std::vector<std::uint8_t> b(64, 0);
    b[0] = static_cast<std::uint8_t>(t);
    b[1] = 1;
    const auto d = decode(b);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.error(), DecodeError::kBadType);
    EXPECT_NE(d.detail.find("unknown type"), std::string::npos);
  }
}

TEST(Mrsp, RandomBytesNeverCrash) {
  std::mt19937 rng(42);
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::uint8_t> b(rng() % 900);
    for (auto& x : b) x = static_cast<std::uint8_t>(rng());
    if (!b.empty() && rng() % 2) b[0] = static_cast<std::uint8_t>(rng() % 3);
    const auto d = decode(b);
    if (d.ok()) {
      // Whatever decoded encodes back to the same leading bytes (padding aside).
      std::vector<std::uint8_t> e;
      std::visit([&](const auto& m) { encode(m, e); }, d.message());
      ASSERT_LE(e.size(), b.size());
      for (std::size_t k = 0; k < e.size(); ++k) {
        if (k != 2 && k != 3) {
          ASSERT_EQ(e[k], b[k]) << k;
        }
      }
    } else {
      EXPECT_FALSE(d.detail.empty());
    }
  }
}

TEST(Mrsp, RpcStatusRanges) {
  EXPECT_EQ(rpc_status_string(0), "success");
  EXPECT_EQ(rpc_status_string(1), "socket not available");
  EXPECT_NE(rpc_status_string(2).find("timeout"), std::string::npos);
  EXPECT_EQ(rpc_status_string(0x05), "reserved (0x05)");
  EXPECT_EQ(rpc_status_string(0x42), "application error 0x42");
  EXPECT_NE(rpc_status_string(0x80).find("undefined"), std::string::npos);
}

}  // namespace
}  // namespace roce::naa
