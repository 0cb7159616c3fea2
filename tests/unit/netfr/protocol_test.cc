// NetFR's message codec (apps/netfr/protocol.h): the seed's layouts byte for byte, round trips,
// and every malformed message refused with its reason.
#include "apps/netfr/protocol.h"

#include <gtest/gtest.h>

#include <cstring>

namespace roce::netfr {
namespace {

std::vector<std::uint8_t> header_bytes(std::uint8_t type) {
  return {'N', 'e', 't', 'F', 'r', 'a', 'm', 'e', 1, type};
}

TEST(NetfrProtocol, LimitsAreTheSeeds) {
  EXPECT_EQ(NETFR_MESSAGE_MAX_PAYLOAD_SIZE, 4064);
  EXPECT_EQ(NETFR_MAX_BUFFER_SIZE, 256u << 20);
  EXPECT_EQ(NETFR_CREDIT_COUNT, 60);
  EXPECT_EQ(NETFR_RESERVED_CREDIT_COUNT, 8);
  EXPECT_EQ(NETFR_CM_MESSAGE_MAX_SIZE, 16);
  EXPECT_EQ(kHostBufferStateSize, 16u + 41 * 8);
}

TEST(NetfrProtocol, HellosFitThePrivateData) {
  std::uint8_t b[16] = {};
  EXPECT_EQ(encode(b, ClientHello{}), 10u);
  EXPECT_EQ(std::vector<std::uint8_t>(b, b + 10), header_bytes(1));
  EXPECT_EQ(encode(b, ServerHello{HelloStatus::kRejected}), 11u);
  EXPECT_EQ(std::vector<std::uint8_t>(b, b + 10), header_bytes(2));
  EXPECT_EQ(b[10], 3);
  const Decoded d = decode({b, 11});
  ASSERT_EQ(d.error, DecodeError::kOk);
  EXPECT_EQ(std::get<ServerHello>(d.msg).status, HelloStatus::kRejected);
}

TEST(NetfrProtocol, BufferUpdateLayout) {
  BufferUpdate u{3, 0x01020304, 0x10, 0xAABBCCDD, 7, 0x1122334455667788ull};
  const auto v = encode_vec(u);
  ASSERT_EQ(v.size(), 40u);
  EXPECT_EQ(std::vector<std::uint8_t>(v.begin(), v.begin() + 10), header_bytes(4));
  EXPECT_EQ(v[10], 0);
  EXPECT_EQ(v[11], 0);
  EXPECT_EQ(v[12], 3);     // bufferIndex at 12
  EXPECT_EQ(v[16], 0x04);  // payloadSize at 16, little-endian
  EXPECT_EQ(v[19], 0x01);
  EXPECT_EQ(v[20], 0x10);  // payloadOffset at 20
  EXPECT_EQ(v[24], 0xDD);  // writeSerial at 24
  EXPECT_EQ(v[28], 7);     // channelSerial at 28
  EXPECT_EQ(v[32], 0x88);  // udata at 32
  EXPECT_EQ(v[39], 0x11);
  const Decoded d = decode(v);
  ASSERT_EQ(d.error, DecodeError::kOk);
  const auto& m = std::get<BufferUpdate>(d.msg);
  EXPECT_EQ(m.buffer_index, 3u);
  EXPECT_EQ(m.payload_size, 0x01020304u);
  EXPECT_EQ(m.write_serial, 0xAABBCCDDu);
  EXPECT_EQ(m.udata, 0x1122334455667788ull);
}

TEST(NetfrProtocol, ClientBufferStateLayout) {
  ClientBufferState s{5, 4096, 0x7F0000001000ull, 1 << 20, 0x1234};
  const auto v = encode_vec(s);
  ASSERT_EQ(v.size(), 48u);
  EXPECT_EQ(v[9], 5);      // type ClientBufferState
  EXPECT_EQ(v[12], 5);     // index at 12
  EXPECT_EQ(v[17], 0x10);  // pageSize 4096 at 16
  EXPECT_EQ(v[25], 0x10);  // addr at 24
  EXPECT_EQ(v[34], 0x10);  // size at 32
  EXPECT_EQ(v[40], 0x34);  // rkey at 40
  const Decoded d = decode(v);
  ASSERT_EQ(d.error, DecodeError::kOk);
  EXPECT_EQ(std::get<ClientBufferState>(d.msg).addr, 0x7F0000001000ull);
}

TEST(NetfrProtocol, DataLayoutAndRoundTrip) {
  std::vector<std::uint8_t> payload(100);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i);
  Data m{true, 9, 4, 0xCAFE, payload};
  const auto v = encode_vec(m);
  ASSERT_EQ(v.size(), 132u);
  EXPECT_EQ(v[9], 8);      // HostData
  EXPECT_EQ(v[12], 100);   // length at 12
  EXPECT_EQ(v[16], 9);     // msgSerial at 16
  EXPECT_EQ(v[20], 4);     // channelSerial at 20
  EXPECT_EQ(v[24], 0xFE);  // udata at 24
  EXPECT_EQ(v[32], 0);     // payload at 32
  EXPECT_EQ(v[131], 99);
  const Decoded d = decode(v);
  ASSERT_EQ(d.error, DecodeError::kOk);
  const auto& r = std::get<Data>(d.msg);
  EXPECT_TRUE(r.from_host);
  EXPECT_EQ(std::vector<std::uint8_t>(r.payload.begin(), r.payload.end()), payload);
  m.from_host = false;
  EXPECT_EQ(encode_vec(m)[9], 6);  // ClientData
}

TEST(NetfrProtocol, MaxPayloadFitsTheMessage) {
  std::vector<std::uint8_t> payload(NETFR_MESSAGE_MAX_PAYLOAD_SIZE, 0x5A);
  const auto v = encode_vec(Data{false, 0, 0, 0, payload});
  EXPECT_EQ(v.size(), std::size_t{NETFR_MESSAGE_MAX_SIZE});
  EXPECT_EQ(decode(v).error, DecodeError::kOk);
}

TEST(NetfrProtocol, HostBufferStateEndsWithZero) {
  HostBufferState s{{4096, 1 << 20}};
  const auto v = encode_vec(s);
  ASSERT_EQ(v.size(), kHostBufferStateSize);
  const Decoded d = decode(v);
  ASSERT_EQ(d.error, DecodeError::kOk);
  EXPECT_EQ(std::get<HostBufferState>(d.msg).sizes, (std::vector<std::uint64_t>{4096, 1 << 20}));
  auto full = v;
  for (std::size_t i = 0; i <= NETFR_MAX_MEM_REGIONS; ++i) full[16 + 8 * i] = 1;  // no 0
  EXPECT_EQ(decode(full).error, DecodeError::kBadField);
}

TEST(NetfrProtocol, AcksAndSubscribe) {
  auto a = encode_vec(Ack{true});
  EXPECT_EQ(a, header_bytes(9));
  EXPECT_EQ(encode_vec(Ack{false}), header_bytes(7));
  const auto s = encode_vec(Subscribe{true, 77});
  EXPECT_EQ(s.size(), 16u);
  EXPECT_EQ(std::get<Subscribe>(decode(s).msg).queue_id, 77u);
}

TEST(NetfrProtocol, MalformedMessagesAreRefused) {
  auto v = encode_vec(BufferUpdate{});
  EXPECT_EQ(decode({v.data(), 9}).error, DecodeError::kTooShort);
  EXPECT_EQ(decode({v.data(), 39}).error, DecodeError::kTooShort);
  auto bad = v;
  bad[0] = 'n';
  EXPECT_EQ(decode(bad).error, DecodeError::kBadMagic);
  bad = v;
  bad[8] = 2;
  EXPECT_EQ(decode(bad).error, DecodeError::kBadVersion);
  for (std::uint8_t t : {0, 12, 255}) {
    bad = v;
    bad[9] = t;
    EXPECT_EQ(decode(bad).error, DecodeError::kBadType) << int(t);
  }
  bad = v;
  bad[12] = NETFR_MAX_MEM_REGIONS;  // buffer index out of range
  EXPECT_EQ(decode(bad).error, DecodeError::kBadField);
  std::vector<std::uint8_t> big(NETFR_MESSAGE_MAX_SIZE + 1, 0);
  std::memcpy(big.data(), v.data(), 10);
  EXPECT_EQ(decode(big).error, DecodeError::kTooLong);
  // Data: length 0, longer than the message, longer than the maximum.
  std::vector<std::uint8_t> p(8, 1);
  auto d = encode_vec(Data{true, 0, 0, 0, p});
  auto z = d;
  z[12] = 0;
  EXPECT_EQ(decode(z).error, DecodeError::kBadLength);
  z = d;
  z[12] = 9;
  EXPECT_EQ(decode(z).error, DecodeError::kBadLength);
  z = d;
  z[12] = 0xFF;
  z[13] = 0x0F;  // 4095 > 4064
  EXPECT_EQ(decode(z).error, DecodeError::kBadLength);
  // ServerHello status 0 and 4; buffer state of size 0 and with a 64-bit rkey.
  auto h = encode_vec(ServerHello{});
  h[10] = 0;
  EXPECT_EQ(decode(h).error, DecodeError::kBadField);
  h[10] = 4;
  EXPECT_EQ(decode(h).error, DecodeError::kBadField);
  auto s = encode_vec(ClientBufferState{1, 4096, 0x1000, 0, 1});
  EXPECT_EQ(decode(s).error, DecodeError::kBadField);
  s = encode_vec(ClientBufferState{1, 4096, 0x1000, 4096, 0x100000000ull});
  EXPECT_EQ(decode(s).error, DecodeError::kBadField);
}

TEST(NetfrProtocol, CmDataAsLibfabricFramesIt) {
  std::uint8_t h[16];
  const std::size_t n = encode(h, ClientHello{});
  auto w = wrap_cm_data({h, n});
  ASSERT_EQ(w.size(), 11u);
  EXPECT_EQ(w[0], 10);
  w.resize(56, 0);  // the REQ's private data is padded
  auto m = unwrap_cm_data(w);
  ASSERT_EQ(m.size(), 10u);
  EXPECT_EQ(decode(m).type, MsgType::kClientHello);
  // A bare hello (plain rdma_cm peer), padded.
  std::vector<std::uint8_t> bare(h, h + n);
  bare.resize(40, 0);
  EXPECT_EQ(decode(unwrap_cm_data(bare)).type, MsgType::kClientHello);
  // Neither.
  std::vector<std::uint8_t> junk(56, 0x42);
  EXPECT_TRUE(unwrap_cm_data(junk).empty());
  EXPECT_TRUE(unwrap_cm_data({}).empty());
  EXPECT_EQ(decode(unwrap_cm_data(junk)).error, DecodeError::kTooShort);
}

TEST(NetfrProtocol, SerialsWrap) {
  EXPECT_TRUE(serial_before(0xFFFFFFFFu, 0));
  EXPECT_TRUE(serial_before(1, 2));
  EXPECT_FALSE(serial_before(2, 2));
}

}  // namespace
}  // namespace roce::netfr
