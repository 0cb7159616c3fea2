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

// ---- upstream NAAICE (naaice-greenhpc/naa-communication-library f7b72fc) ------------------------
// Facts from upstream's structs and encoders (lib/naaice.h, lib/naaice.c naaice_send_message,
// naaice_write_data, naaice_handle_work_completion; lib/naaice_swnaa.c): derived from the code,
// and the request bytes checked against the upstream client's traffic in
// tests/interop/naa_upstream_client.sh.

TEST(MrspUpstream, FlagValues) {
  // enum naaice_mrflags_value
  EXPECT_EQ(kMrFlagInternal, 0x01);
  EXPECT_EQ(kMrFlagSingleSend, 0x02);
  EXPECT_EQ(kMrFlagInput, 0x04);
  EXPECT_EQ(kMrFlagOutput, 0x08);
}

// What upstream's examples/naaice_client sends for `naaice_client IP 2 '1024 64'`: region 0 is
// input and single-send (0x06), region 1 input and output (0x0C); requested NAA addresses from
// get_sequential_naa_addresses (0, then 1024 rounded up to the 4 KiB page: 0x1000). mr_info is
// htonll((flags << 56) | address): the flags byte first, then the address in 7 bytes.
TEST(MrspUpstream, UpstreamClientRequestBytes) {
  const std::vector<std::uint8_t> wire = {
      0x01, 0x02, 0x00, 0x00,                          // MSG_MR_AAR, count 2, padding
      0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // SINGLESEND|INPUT, NAA address 0
      0x00, 0x00, 0x55, 0x55, 0x66, 0x77, 0x80, 0x00,  // the host's buffer
      0x00, 0x00, 0x01, 0x23,                          // rkey
      0x00, 0x00, 0x04, 0x00,                          // size 1024
      0x0C, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00,  // INPUT|OUTPUT, NAA address 0x1000
      0x00, 0x00, 0x55, 0x55, 0x66, 0x77, 0x90, 0x00,  //
      0x00, 0x00, 0x04, 0x56,                          //
      0x00, 0x00, 0x00, 0x40};                         // size 64
  const auto d = decode(wire);
  ASSERT_TRUE(d.ok()) << d.detail;
  const auto& r = std::get<AdvertiseRequest>(d.message());
  ASSERT_EQ(r.regions.size(), 2u);
  EXPECT_EQ(r.regions[0], (AdvReqEntry{0x06, 0, 0x555566778000ULL, 0x123, 1024}));
  EXPECT_EQ(r.regions[1], (AdvReqEntry{0x0C, 0x1000, 0x555566779000ULL, 0x456, 64}));
  EXPECT_TRUE(r.regions[0].input() && r.regions[0].single_send() && !r.regions[0].output());
  EXPECT_TRUE(r.regions[1].input() && r.regions[1].output() && !r.regions[1].single_send());
  EXPECT_EQ(layout_of(r), Layout::kUpstream);
  std::vector<std::uint8_t> again;
  encode(r, again);
  EXPECT_EQ(again, wire);
  // The seed's layout (this project's host library before): no INPUT or OUTPUT anywhere.
  AdvertiseRequest seed;
  seed.regions = {{0, 0, 0x1000, 1, 8}, {0, 0, 0x2000, 2, 64}};
  EXPECT_EQ(layout_of(seed), Layout::kSeed);
  seed.regions.push_back({kMrFlagInternal, 0x100000, 0, 0, 64});
  EXPECT_EQ(layout_of(seed), Layout::kSeed);
  seed.regions[1].flags = kMrFlagOutput;
  EXPECT_EQ(layout_of(seed), Layout::kUpstream);
}

// naaice_write_data: imm_data = htonl(immediate | 0x80), immediate's lowest byte the function
// code, its upper three the bytes of naaice_set_immediate; the software NAA takes
// ntohl(imm) & 0x7F as the function code. Stack::Completion::imm is ntohl(imm_data).
TEST(MrspUpstream, CallImmediate) {
  // FNCODE 3 of examples/naaice_client, immediate bytes {0, 0, 0}: 00 00 00 83 on the wire.
  EXPECT_EQ(decode_call_imm(0x00000083).fncode, 3u);
  EXPECT_EQ(decode_call_imm(0x00000083).user, 0u);
  // naaice_set_immediate({1, 2, 3}) with function code 1: 03 02 01 81 on the wire.
  EXPECT_EQ(decode_call_imm(0x03020181).fncode, 1u);
  EXPECT_EQ(decode_call_imm(0x03020181).user, 0x030201u);
  EXPECT_EQ(encode_call_imm(3, 0), 0x83u);
  EXPECT_EQ(encode_call_imm(1, 0x030201), 0x03020181u);
  // Function code 0 (the host's error message: imm_data = htonl(0)).
  EXPECT_EQ(decode_call_imm(0).fncode, 0u);
}

// naaice_handle_work_completion: naa_return_code = ntohl(imm_data) >> IMMEDIATE_OFFSET (8).
TEST(MrspUpstream, StatusImmediate) {
  EXPECT_EQ(status_imm(0), 0u);
  EXPECT_EQ(status_imm(kRpcUnknownFunction), 0x1000u);  // 00 00 10 00 on the wire
  EXPECT_EQ(status_imm(kRpcSocketNotAvailable) >> 8, 1u);
  for (std::uint32_t s = 0; s < 0x80; ++s) EXPECT_EQ(status_imm(s) >> 8, s);
}

}  // namespace
}  // namespace roce::naa
