// NetFR's message codec (apps/netfr/protocol.h): upstream's layouts byte for byte, round trips,
// and every malformed message refused with its reason.
//
// The golden messages are facts of telescope-proj/netfr at 45b215f: its message structs
// (netfr/src/common/nfr_protocol.h, #pragma pack(1)) filled by a throwaway program compiled
// against that header (nfr_SetHeader and the fields below) and dumped byte by byte, and the
// messages its test programs sent in the interop VM, captured (kCap*). Nothing of upstream's code
// is in this repository; the bytes are what its programs put on the wire.
#include "apps/netfr/protocol.h"

#include <gtest/gtest.h>

#include <cstring>

namespace roce::netfr {
namespace {

using Bytes = std::vector<std::uint8_t>;

// nfr_SetHeader(&hello.header, NFR_MSG_CLIENT_HELLO): sizeof(struct NFRMsgClientHello) == 10.
const Bytes kUpClientHello = {0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01, 0x01};
// NFRMsgServerHello, status NFR_MSG_STATUS_REJECTED (3): 11 bytes.
const Bytes kUpServerHelloRejected = {0x4e, 0x65, 0x74, 0x46, 0x72, 0x61,
                                      0x6d, 0x65, 0x01, 0x02, 0x03};
// NFRMsgBufferState {pageSize 0, addr 0x7f1234567000, size 128 MiB, rkey 0x1a2b3c, index 1}:
// 39 bytes; pageSize at 10, addr at 14, size at 22, rkey at 30, index at 38.
const Bytes kUpBufferState = {0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01, 0x05,
                              0x00, 0x00, 0x00, 0x00, 0x00, 0x70, 0x56, 0x34, 0x12, 0x7f,
                              0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00,
                              0x3c, 0x2b, 0x1a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01};
// NFRMsgBufferUpdate {bufferIndex 1, payloadSize 128 MiB, payloadOffset 0x10, writeSerial 7,
// channelSerial 9, udata 0x1122334455667788}: 40 bytes; bufferIndex at 10 (one byte, then 5 of
// padding), payloadSize 16, payloadOffset 20, writeSerial 24, channelSerial 28, udata 32.
const Bytes kUpBufferUpdate = {0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01, 0x04,
                               0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08,
                               0x10, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x09, 0x00,
                               0x00, 0x00, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
// NFRMsgClientData {length 13, udata 0x0102030405060708, msgSerial 1, channelSerial 1,
// data "Hello server"} as nfrClientSendData sends it (offsetof(data) + length = 45 bytes):
// length at 10, udata 14, msgSerial 22, channelSerial 26, data at 32.
const Bytes kUpClientData = {0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01, 0x06, 0x0d, 0x00,
                             0x00, 0x00, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x01, 0x00,
                             0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x48, 0x65, 0x6c, 0x6c,
                             0x6f, 0x20, 0x73, 0x65, 0x72, 0x76, 0x65, 0x72, 0x00};
const Bytes kUpHostDataAck = {0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01, 0x09};
const Bytes kUpClientDataAck = {0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01, 0x07};

// Captured from upstream's own programs (test/host and test/client of 45b215f, built by
// tests/interop/netfr_upstream_lib.sh) on Linux rxe in the interop VM, by our side's pcap=
// (NETFR_UPSTREAM_PCAP): the NetFR bytes of the packets, as facts.
//
// test/host's ServerHello in its REP's private data: libfabric's verbs provider puts one byte of
// length (11) before it; the rest of the private data is zero.
const Bytes kCapHostRepPrivateData = {0x0b, 0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01,
                                      0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
// test/client's ClientHello in its REQ's private data (length byte 10).
const Bytes kCapClientReqPrivateData = {0x0a, 0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65,
                                        0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
// test/client's BufferState for its 128 MiB buffer (index 1: its index 0 is its own message
// buffer), 39 bytes.
const Bytes kCapBufferState = {0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01, 0x05,
                               0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0xdf, 0xbf, 0xcc, 0x7f,
                               0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00,
                               0xaa, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01};
// test/client's "Hello server" datagram (udata: its clock in ms). Its 2 bytes of padding are
// whatever its message buffer held: 0xbe, ASan's malloc fill.
const Bytes kCapClientData = {
    0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01, 0x06, 0x0d, 0x00, 0x00, 0x00, 0x96,
    0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0xbe, 0xbe, 0x48, 0x65, 0x6c, 0x6c, 0x6f, 0x20, 0x73, 0x65, 0x72, 0x76, 0x65, 0x72, 0x00};
// test/host's BufferUpdate after its 128 MiB write into our client's buffer 0. It never sets
// the padding, writeSerial and channelSerial: they are what its send slot held (0xa5, the
// allocator fill the interop test asks ASan for); udata 0.
const Bytes kCapBufferUpdate = {0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01, 0x04,
                                0x00, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0x00, 0x00, 0x00, 0x08,
                                0x00, 0x00, 0x00, 0x00, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5,
                                0xa5, 0xa5, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
// test/host's acknowledgement of our datagram.
const Bytes kCapClientDataAck = {0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01, 0x07};

TEST(NetfrProtocol, CapturedFromUpstreamsPrograms) {
  const Decoded sh = decode(unwrap_cm_data(kCapHostRepPrivateData));
  ASSERT_EQ(sh.error, DecodeError::kOk);
  EXPECT_EQ(sh.type, MsgType::kServerHello);
  EXPECT_EQ(std::get<ServerHello>(sh.msg).status, HelloStatus::kOk);
  EXPECT_EQ(std::get<ServerHello>(sh.msg).ext, 0);  // upstream's host takes no extension
  // Ours frames its hellos the same way.
  EXPECT_EQ(wrap_cm_data(encode_vec(ServerHello{HelloStatus::kOk})),
            Bytes(kCapHostRepPrivateData.begin(), kCapHostRepPrivateData.begin() + 12));
  EXPECT_EQ(wrap_cm_data(encode_vec(ClientHello{})),
            Bytes(kCapClientReqPrivateData.begin(), kCapClientReqPrivateData.begin() + 11));
  const Decoded ch = decode(unwrap_cm_data(kCapClientReqPrivateData));
  ASSERT_EQ(ch.error, DecodeError::kOk);
  EXPECT_EQ(std::get<ClientHello>(ch.msg).ext, 0);

  const Decoded bs = decode(kCapBufferState);
  ASSERT_EQ(bs.error, DecodeError::kOk);
  const auto& st = std::get<BufferState>(bs.msg);
  EXPECT_EQ(st.index, 1u);
  EXPECT_EQ(st.addr, 0x7fccbfdff000ull);
  EXPECT_EQ(st.size, 128u << 20);
  EXPECT_EQ(st.rkey, 0x4aau);
  EXPECT_EQ(st.page_size, 0u);
  EXPECT_EQ(encode_vec(st), kCapBufferState);  // ours, byte for byte

  const Decoded cd = decode(kCapClientData);
  ASSERT_EQ(cd.error, DecodeError::kOk);
  const auto& dm = std::get<Data>(cd.msg);
  EXPECT_FALSE(dm.from_host);
  EXPECT_EQ(dm.udata, 0x2d96u);
  EXPECT_EQ(dm.msg_serial, 1u);
  EXPECT_EQ(dm.channel_serial, 1u);
  ASSERT_EQ(dm.payload.size(), 13u);
  EXPECT_EQ(std::memcmp(dm.payload.data(), "Hello server", 13), 0);
  auto ours = encode_vec(dm);  // the same but for the padding, which ours zeroes
  ASSERT_EQ(ours.size(), kCapClientData.size());
  ours[30] = ours[31] = 0xbe;
  EXPECT_EQ(ours, kCapClientData);

  const Decoded bu = decode(kCapBufferUpdate);
  ASSERT_EQ(bu.error, DecodeError::kOk);
  const auto& up = std::get<BufferUpdate>(bu.msg);
  EXPECT_EQ(up.buffer_index, 0u);
  EXPECT_EQ(up.payload_size, 128u << 20);
  EXPECT_EQ(up.payload_offset, 0u);
  EXPECT_EQ(up.write_serial, 0xa5a5a5a5u);  // unset upstream
  EXPECT_EQ(up.udata, 0u);

  EXPECT_EQ(decode(kCapClientDataAck).type, MsgType::kClientDataAck);
  EXPECT_EQ(encode_vec(Ack{false}), kCapClientDataAck);
}

TEST(NetfrProtocol, LimitsAreUpstreams) {
  EXPECT_EQ(NETFR_MESSAGE_MAX_PAYLOAD_SIZE, 4064);
  EXPECT_EQ(NETFR_MAX_BUFFER_SIZE, 256u << 20);
  EXPECT_EQ(NETFR_CREDIT_COUNT, 60);
  EXPECT_EQ(NETFR_RESERVED_CREDIT_COUNT, 8);
  EXPECT_EQ(NETFR_CM_MESSAGE_MAX_SIZE, 16);
  EXPECT_EQ(NETFR_MAX_MEM_REGIONS, 32);  // upstream's netfr_constants.h
  EXPECT_EQ(kRecvDepth, 60u);            // upstream's rxSlots (nfr_GetDefaultCommBufInfo)
}

TEST(NetfrProtocol, MessageTypesAreUpstreams) {
  // enum NFRMessageType: 1 .. 9, 3 is BUFFER_HINT (defined, never sent, no layout).
  EXPECT_EQ(static_cast<int>(MsgType::kClientHello), 1);
  EXPECT_EQ(static_cast<int>(MsgType::kServerHello), 2);
  EXPECT_EQ(static_cast<int>(MsgType::kBufferHint), 3);
  EXPECT_EQ(static_cast<int>(MsgType::kBufferUpdate), 4);
  EXPECT_EQ(static_cast<int>(MsgType::kBufferState), 5);
  EXPECT_EQ(static_cast<int>(MsgType::kClientData), 6);
  EXPECT_EQ(static_cast<int>(MsgType::kClientDataAck), 7);
  EXPECT_EQ(static_cast<int>(MsgType::kHostData), 8);
  EXPECT_EQ(static_cast<int>(MsgType::kHostDataAck), 9);
}

TEST(NetfrProtocol, HellosAreUpstreams) {
  EXPECT_EQ(encode_vec(ClientHello{}), kUpClientHello);
  EXPECT_EQ(encode_vec(ServerHello{HelloStatus::kRejected}), kUpServerHelloRejected);
  const Decoded d = decode(kUpServerHelloRejected);
  ASSERT_EQ(d.error, DecodeError::kOk);
  EXPECT_EQ(std::get<ServerHello>(d.msg).status, HelloStatus::kRejected);
  EXPECT_EQ(std::get<ServerHello>(d.msg).ext, 0);
  const Decoded c = decode(kUpClientHello);
  ASSERT_EQ(c.error, DecodeError::kOk);
  EXPECT_EQ(std::get<ClientHello>(c.msg).ext, 0);  // upstream offers no extension
}

TEST(NetfrProtocol, HelloExtensionsFollowUpstreamsBytes) {
  // Ours offer extensions in one byte after upstream's hello (upstream's host and client do not
  // read past the header and status, so they see a plain hello).
  const auto c = encode_vec(ClientHello{kExtKeepalive | kExtTotalOrder});
  ASSERT_EQ(c.size(), 11u);
  EXPECT_EQ(Bytes(c.begin(), c.begin() + 10), kUpClientHello);
  EXPECT_EQ(c[10], kExtKeepalive | kExtTotalOrder);
  EXPECT_EQ(std::get<ClientHello>(decode(c).msg).ext, kExtKeepalive | kExtTotalOrder);
  const auto s = encode_vec(ServerHello{HelloStatus::kOk, kExtKeepalive});
  ASSERT_EQ(s.size(), 12u);
  EXPECT_EQ(s[10], 1);
  EXPECT_EQ(std::get<ServerHello>(decode(s).msg).ext, kExtKeepalive);
}

TEST(NetfrProtocol, BufferStateIsUpstreams) {
  BufferState s;
  s.page_size = 0;
  s.addr = 0x00007f1234567000ull;
  s.size = 134217728;
  s.rkey = 0x1a2b3c;
  s.index = 1;
  EXPECT_EQ(encode_vec(s), kUpBufferState);
  const Decoded d = decode(kUpBufferState);
  ASSERT_EQ(d.error, DecodeError::kOk);
  const auto& m = std::get<BufferState>(d.msg);
  EXPECT_EQ(m.index, 1u);
  EXPECT_EQ(m.addr, 0x00007f1234567000ull);
  EXPECT_EQ(m.size, 134217728u);
  EXPECT_EQ(m.rkey, 0x1a2b3cu);
  // Size 0 releases the index (upstream's host forgets the region).
  auto r = kUpBufferState;
  for (int i = 22; i < 30; ++i) r[static_cast<std::size_t>(i)] = 0;
  ASSERT_EQ(decode(r).error, DecodeError::kOk);
  EXPECT_EQ(std::get<BufferState>(decode(r).msg).size, 0u);
}

TEST(NetfrProtocol, BufferUpdateIsUpstreams) {
  BufferUpdate u{1, 134217728, 0x10, 7, 9, 0x1122334455667788ull};
  EXPECT_EQ(encode_vec(u), kUpBufferUpdate);
  const Decoded d = decode(kUpBufferUpdate);
  ASSERT_EQ(d.error, DecodeError::kOk);
  const auto& m = std::get<BufferUpdate>(d.msg);
  EXPECT_EQ(m.buffer_index, 1u);
  EXPECT_EQ(m.payload_size, 134217728u);
  EXPECT_EQ(m.payload_offset, 0x10u);
  EXPECT_EQ(m.write_serial, 7u);
  EXPECT_EQ(m.channel_serial, 9u);
  EXPECT_EQ(m.udata, 0x1122334455667788ull);
}

TEST(NetfrProtocol, DataIsUpstreams) {
  const char hello[] = "Hello server";
  Data m{false,
         1,
         1,
         0x0102030405060708ull,
         {reinterpret_cast<const std::uint8_t*>(hello), sizeof hello}};
  EXPECT_EQ(encode_vec(m), kUpClientData);
  const Decoded d = decode(kUpClientData);
  ASSERT_EQ(d.error, DecodeError::kOk);
  EXPECT_EQ(d.type, MsgType::kClientData);
  const auto& r = std::get<Data>(d.msg);
  EXPECT_FALSE(r.from_host);
  EXPECT_EQ(r.udata, 0x0102030405060708ull);
  ASSERT_EQ(r.payload.size(), 13u);
  EXPECT_EQ(std::memcmp(r.payload.data(), hello, 13), 0);
  // HostData: the same layout, type 8.
  m.from_host = true;
  auto h = encode_vec(m);
  auto want = kUpClientData;
  want[9] = 8;
  EXPECT_EQ(h, want);
}

TEST(NetfrProtocol, AcksAreUpstreams) {
  EXPECT_EQ(encode_vec(Ack{true}), kUpHostDataAck);
  EXPECT_EQ(encode_vec(Ack{false}), kUpClientDataAck);
  EXPECT_TRUE(std::get<Ack>(decode(kUpHostDataAck).msg).host_data);
  EXPECT_FALSE(std::get<Ack>(decode(kUpClientDataAck).msg).host_data);
}

TEST(NetfrProtocol, MaxPayloadFitsTheMessage) {
  std::vector<std::uint8_t> payload(NETFR_MESSAGE_MAX_PAYLOAD_SIZE, 0x5A);
  const auto v = encode_vec(Data{false, 0, 0, 0, payload});
  EXPECT_EQ(v.size(), std::size_t{NETFR_MESSAGE_MAX_SIZE});
  EXPECT_EQ(decode(v).error, DecodeError::kOk);
}

TEST(NetfrProtocol, ExtensionsAreOutsideUpstreamsTypes) {
  const auto k = encode_vec(Keepalive{});
  ASSERT_EQ(k.size(), 10u);
  EXPECT_GT(k[9], 9);
  EXPECT_EQ(decode(k).type, MsgType::kKeepalive);
  HostBufferSizes s{{4096, 1 << 20}};
  const auto v = encode_vec(s);
  EXPECT_GT(v[9], 9);
  const Decoded d = decode(v);
  ASSERT_EQ(d.error, DecodeError::kOk);
  EXPECT_EQ(std::get<HostBufferSizes>(d.msg).sizes, (std::vector<std::uint64_t>{4096, 1 << 20}));
  auto full = v;
  for (std::size_t i = 0; i <= NETFR_MAX_MEM_REGIONS; ++i) full[16 + 8 * i] = 1;  // no 0
  EXPECT_EQ(decode(full).error, DecodeError::kBadField);
  // A size no host memory can have (over 256 MiB): a client allocating what it is told would
  // allocate anything a hostile host names.
  const Decoded huge = decode(encode_vec(HostBufferSizes{{4096, (1ull << 28) + 1}}));
  EXPECT_EQ(huge.error, DecodeError::kBadField);
  EXPECT_EQ(decode(encode_vec(HostBufferSizes{{1ull << 28}})).error, DecodeError::kOk);
}

TEST(NetfrProtocol, MalformedMessagesAreRefused) {
  auto v = kUpBufferUpdate;
  EXPECT_EQ(decode({v.data(), 9}).error, DecodeError::kTooShort);
  EXPECT_EQ(decode({v.data(), 39}).error, DecodeError::kTooShort);
  EXPECT_EQ(decode({kUpBufferState.data(), 38}).error, DecodeError::kTooShort);
  auto bad = v;
  bad[0] = 'n';
  EXPECT_EQ(decode(bad).error, DecodeError::kBadMagic);
  bad = v;
  bad[8] = 2;
  EXPECT_EQ(decode(bad).error, DecodeError::kBadVersion);
  for (std::uint8_t t : {0, 3, 10, 12, 255}) {  // 3: BUFFER_HINT has no layout upstream
    bad = v;
    bad[9] = t;
    EXPECT_EQ(decode(bad).error, DecodeError::kBadType) << int(t);
  }
  bad = v;
  bad[10] = NETFR_MAX_MEM_REGIONS;  // buffer index out of range
  EXPECT_EQ(decode(bad).error, DecodeError::kBadField);
  bad = kUpBufferState;
  bad[38] = NETFR_MAX_MEM_REGIONS;
  EXPECT_EQ(decode(bad).error, DecodeError::kBadField);
  bad = kUpBufferState;
  bad[34] = 1;  // a 64-bit rkey: no RoCE rkey is
  EXPECT_EQ(decode(bad).error, DecodeError::kBadField);
  std::vector<std::uint8_t> big(NETFR_MESSAGE_MAX_SIZE + 1, 0);
  std::memcpy(big.data(), v.data(), 10);
  EXPECT_EQ(decode(big).error, DecodeError::kTooLong);
  // Data: longer than the message, longer than the maximum.
  auto z = kUpClientData;
  z[10] = 14;
  EXPECT_EQ(decode(z).error, DecodeError::kBadLength);
  z = kUpClientData;
  z[10] = 0xFF;
  z[11] = 0x0F;  // 4095 > 4064
  EXPECT_EQ(decode(z).error, DecodeError::kBadLength);
  // ServerHello status 0 and 4.
  auto h = kUpServerHelloRejected;
  h[10] = 0;
  EXPECT_EQ(decode(h).error, DecodeError::kBadField);
  h[10] = 4;
  EXPECT_EQ(decode(h).error, DecodeError::kBadField);
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
