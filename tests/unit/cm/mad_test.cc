// Golden-byte tests of the CM MAD codec: each layout is checked byte by byte against the
// offsets of roce-wire-reference section 5 (IBTA "byte[bit]" notation, bit 0 = MSB), every
// message survives encode -> decode with all bit fields at their maximum (which catches
// overlapping fields), and malformed MADs are refused with a named error.
#include "controlplane/cm/mad.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace roce::cm {
namespace {

using Bytes = std::vector<std::uint8_t>;

constexpr std::size_t D = kMadHeaderSize;  // offset of the CM data in the MAD

Ipv6Addr v4_gid(std::uint32_t ip) { return wire::ipv4_mapped(Ipv4Addr{ip}); }

Bytes slice(const MadBuf& b, std::size_t off, std::size_t n) {
  return Bytes(b.begin() + static_cast<std::ptrdiff_t>(off),
               b.begin() + static_cast<std::ptrdiff_t>(off + n));
}

template <class T>
T roundtrip(const T& m, std::uint64_t tid = 0x0102030405060708ull) {
  MadHeader h;
  h.tid = tid;
  const MadBuf b = encode(h, m);
  const DecodedMad d = decode(b);
  EXPECT_TRUE(d.ok()) << to_string(d.error);
  EXPECT_EQ(d.hdr.tid, tid);
  EXPECT_EQ(d.hdr.attr_id, attr_id_of(CmMsg{m}));
  return std::get<T>(d.msg);
}

// A REQ as rping -c sends it to 192.0.2.2:7174 from 192.0.2.1 (values of roce-wire-reference 5.9).
ReqMsg rping_req() {
  ReqMsg r;
  r.local_comm_id = 0x11223344;
  r.service_id = service_id(PortSpace::kTcp, 7174);
  r.local_ca_guid = 0x02005EFFFE000201ull;
  r.local_qpn = Qpn(0x000011);
  r.responder_resources = 1;
  r.initiator_depth = 1;
  r.remote_cm_response_timeout = 20;
  r.transport_type = TransportType::kRc;
  r.e2e_flow_control = true;
  r.starting_psn = Psn(0xABCDEF);
  r.local_cm_response_timeout = 20;
  r.retry_count = 7;
  r.pkey = 0xFFFF;
  r.path_mtu = 3;
  r.rnr_retry_count = 7;
  r.max_cm_retries = 15;
  r.primary.local_lid = r.primary.remote_lid = 0xFFFF;
  r.primary.local_gid = v4_gid(0xC0000201);
  r.primary.remote_gid = v4_gid(0xC0000202);
  r.primary.flow_label = 0xABCDE;
  r.primary.packet_rate = 0;
  r.primary.traffic_class = 0;
  r.primary.hop_limit = 64;
  r.primary.sl = 0;
  r.primary.local_ack_timeout = 18;
  r.alternate.local_lid = r.alternate.remote_lid = 0;
  r.alternate.hop_limit = 0;
  const CmaHeader cma = CmaHeader::ipv4(Ipv4Addr{0xC0000201}, 0xD431, Ipv4Addr{0xC0000202});
  encode_cma_header(cma, std::span<std::uint8_t, kCmaHeaderSize>(r.private_data.data(), 36));
  return r;
}

TEST(CmServiceId, RdmaCmPortSpaces) {
  EXPECT_EQ(service_id(PortSpace::kTcp, 7174), 0x0000000001061C06ull);
  EXPECT_EQ(service_id(PortSpace::kUdp, 7174), 0x0000000001111C06ull);
  EXPECT_EQ(service_id(PortSpace::kTcp, 0xFFFF), 0x000000000106FFFFull);
  EXPECT_TRUE(is_ip_cm_service(0x0000000001061C06ull));
  EXPECT_TRUE(is_ip_cm_service(service_id(PortSpace::kIb, 1)));
  EXPECT_FALSE(is_ip_cm_service(0x1000000000000001ull));
  EXPECT_EQ(port_of(0x0000000001061C06ull), 7174);
  EXPECT_EQ(port_space_of(0x0000000001111C06ull), PortSpace::kUdp);
  EXPECT_EQ(kRdmaUdpQkey, 0x01234567u);
}

TEST(CmMad, CommonHeaderGoldenBytes) {
  MadHeader h;
  h.tid = 0x0000000A11223344ull;
  const MadBuf b = encode(h, RtuMsg{});
  EXPECT_EQ(slice(b, 0, 24),
            (Bytes{0x01, 0x07, 0x02, 0x03, 0,    0,    0, 0, 0x00, 0x00, 0x00, 0x0A,
                   0x11, 0x22, 0x33, 0x44, 0x00, 0x14, 0, 0, 0,    0,    0,    0}));
}

TEST(CmMad, RpingReqGoldenBytes) {
  MadHeader h;
  h.tid = 0x0000000A11223344ull;
  const MadBuf b = encode(h, rping_req());
  Bytes want(kMadSize, 0);
  auto put = [&want](std::size_t off, Bytes v) {
    std::copy(v.begin(), v.end(), want.begin() + static_cast<std::ptrdiff_t>(off));
  };
  put(0, {0x01, 0x07, 0x02, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x0A, 0x11, 0x22, 0x33, 0x44, 0x00, 0x10});
  put(D + 0, {0x11, 0x22, 0x33, 0x44});                           // local comm ID
  put(D + 8, {0x00, 0x00, 0x00, 0x00, 0x01, 0x06, 0x1C, 0x06});   // service ID
  put(D + 16, {0x02, 0x00, 0x5E, 0xFF, 0xFE, 0x00, 0x02, 0x01});  // CA GUID
  put(D + 32, {0x00, 0x00, 0x11, 0x01});                          // local QPN, responder resources
  put(D + 36, {0x00, 0x00, 0x00, 0x01});                          // local EECN, initiator depth
  put(D + 40, {0x00, 0x00, 0x00, 0xA1});  // remote EECN; 20 << 3 | RC << 1 | E2E
  put(D + 44, {0xAB, 0xCD, 0xEF, 0xA7});  // starting PSN; 20 << 3 | retry 7
  put(D + 48, {0xFF, 0xFF, 0x37, 0xF0});  // P_Key; MTU 3, RNR 7; max CM retries 15
  put(D + 52, {0xFF, 0xFF, 0xFF, 0xFF});  // LIDs
  put(D + 56, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xC0, 0x00, 0x02, 0x01});
  put(D + 72, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xC0, 0x00, 0x02, 0x02});
  put(D + 88, {0xAB, 0xCD, 0xE0, 0x00, 0x00, 0x40, 0x00, 18 << 3});  // flow label ... ACK timeout
  put(D + 140, {0x00, 0x40, 0xD4, 0x31});                            // cma: version, IPv4, port
  put(D + 140 + 16, {0xC0, 0x00, 0x02, 0x01});
  put(D + 140 + 32, {0xC0, 0x00, 0x02, 0x02});
  EXPECT_EQ(Bytes(b.begin(), b.end()), want);
  EXPECT_EQ(roundtrip(rping_req()), rping_req());
}

TEST(CmMad, ReqBitFieldsDoNotOverlap) {
  ReqMsg r;
  r.local_comm_id = 0xFFFFFFFF;
  r.vendor_id = 0xFFFFFF;
  r.local_qpn = Qpn(0xFFFFFF);
  r.responder_resources = 0xFF;
  r.local_eecn = r.remote_eecn = 0xFFFFFF;
  r.initiator_depth = 0xFF;
  r.remote_cm_response_timeout = r.local_cm_response_timeout = 31;
  r.transport_type = TransportType::kXrc;
  r.e2e_flow_control = r.rdc_exists = r.srq = true;
  r.starting_psn = Psn(0xFFFFFF);
  r.retry_count = r.rnr_retry_count = r.ext_transport_type = 7;
  r.path_mtu = r.max_cm_retries = 15;
  for (CmPath* p : {&r.primary, &r.alternate}) {
    p->flow_label = 0xFFFFF;
    p->packet_rate = 63;
    p->traffic_class = p->hop_limit = 0xFF;
    p->sl = 15;
    p->subnet_local = true;
    p->local_ack_timeout = 31;
  }
  EXPECT_EQ(roundtrip(r), r);
  // Only the reserved bits stay clear: byte 4, 24..27 and the path's reserved bits.
  const MadBuf b = encode({}, r);
  EXPECT_EQ(b[D + 4], 0);
  EXPECT_EQ(slice(b, D + 24, 4), (Bytes{0, 0, 0, 0}));
  EXPECT_EQ(slice(b, D + 88, 8), (Bytes{0xFF, 0xFF, 0xF0, 0x3F, 0xFF, 0xFF, 0xF8, 0xF8}));
  // One field alone lands where the table says: Subnet Local is 94[4].
  ReqMsg one;
  one.primary = CmPath{};
  one.primary.local_lid = one.primary.remote_lid = 0;
  one.primary.hop_limit = 0;
  one.primary.subnet_local = true;
  one.pkey = 0;
  one.alternate = one.primary;
  one.alternate.subnet_local = false;
  const MadBuf b1 = encode({}, one);
  for (std::size_t i = D; i < kMadSize; ++i)
    EXPECT_EQ(b1[i], i == D + 94 ? 0x08 : 0) << "byte " << i - D;
}

TEST(CmMad, RepGoldenBytes) {
  RepMsg m;
  m.local_comm_id = 0xA1A2A3A4;
  m.remote_comm_id = 0xB1B2B3B4;
  m.local_qkey = 0;
  m.local_qpn = Qpn(0x000012);
  m.starting_psn = Psn(0x123456);
  m.vendor_id = 0xC1C2C3;
  m.responder_resources = 2;
  m.initiator_depth = 4;
  m.target_ack_delay = 15;
  m.failover_accepted = 0;
  m.e2e_flow_control = true;
  m.rnr_retry_count = 7;
  m.srq = true;
  m.local_ca_guid = 0x0102030405060708ull;
  m.private_data[0] = 0xEE;
  const MadBuf b = encode({}, m);
  EXPECT_EQ(b[17], 0x13);
  EXPECT_EQ(slice(b, D, 36),
            (Bytes{0xA1, 0xA2, 0xA3,        0xA4, 0xB1, 0xB2, 0xB3, 0xB4, 0,    0,    0,    0,
                   0x00, 0x00, 0x12,        0xC1, 0,    0,    0,    0xC2, 0x12, 0x34, 0x56, 0xC3,
                   0x02, 0x04, 15 << 3 | 1, 0xF0, 1,    2,    3,    4,    5,    6,    7,    8}));
  EXPECT_EQ(b[D + 36], 0xEE);
  EXPECT_EQ(roundtrip(m), m);
  m.failover_accepted = 3;
  m.target_ack_delay = 31;
  EXPECT_EQ(roundtrip(m), m);
}

TEST(CmMad, MraGoldenBytes) {
  MraMsg m;
  m.local_comm_id = 1;
  m.remote_comm_id = 2;
  m.message_mraed = MsgKind::kRep;
  m.service_timeout = 24;
  m.private_data[221] = 0x5A;
  const MadBuf b = encode({}, m);
  EXPECT_EQ(b[17], 0x11);
  EXPECT_EQ(slice(b, D, 10), (Bytes{0, 0, 0, 1, 0, 0, 0, 2, 0x40, 24 << 3}));
  EXPECT_EQ(b[kMadSize - 1], 0x5A);
  EXPECT_EQ(roundtrip(m), m);
}

TEST(CmMad, RejGoldenBytes) {
  RejMsg m;
  m.local_comm_id = 0;
  m.remote_comm_id = 0x11223344;
  m.message_rejected = MsgKind::kOther;
  m.reject_info_length = 72;
  m.reason = RejReason::kInvalidServiceId;
  m.ari[0] = 0xAA;
  m.ari[71] = 0xAB;
  m.private_data[0] = 0xCC;
  const MadBuf b = encode({}, m);
  EXPECT_EQ(b[17], 0x12);
  EXPECT_EQ(slice(b, D, 13),
            (Bytes{0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 0x80, 72 << 1, 0x00, 0x08, 0xAA}));
  EXPECT_EQ(b[D + 83], 0xAB);
  EXPECT_EQ(b[D + 84], 0xCC);
  EXPECT_EQ(roundtrip(m), m);
}

TEST(CmMad, RtuDreqDrepGoldenBytes) {
  RtuMsg rtu;
  rtu.local_comm_id = 0x01020304;
  rtu.remote_comm_id = 0x05060708;
  rtu.private_data[0] = 9;
  MadBuf b = encode({}, rtu);
  EXPECT_EQ(b[17], 0x14);
  EXPECT_EQ(slice(b, D, 9), (Bytes{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(roundtrip(rtu), rtu);

  DreqMsg dreq;
  dreq.local_comm_id = 0x01020304;
  dreq.remote_comm_id = 0x05060708;
  dreq.remote_qpn = Qpn(0xABCDEF);
  dreq.private_data[0] = 9;
  b = encode({}, dreq);
  EXPECT_EQ(b[17], 0x15);
  EXPECT_EQ(slice(b, D, 13), (Bytes{1, 2, 3, 4, 5, 6, 7, 8, 0xAB, 0xCD, 0xEF, 0, 9}));
  EXPECT_EQ(roundtrip(dreq), dreq);

  DrepMsg drep;
  drep.local_comm_id = 0x05060708;
  drep.remote_comm_id = 0x01020304;
  drep.private_data[223] = 1;
  b = encode({}, drep);
  EXPECT_EQ(b[17], 0x16);
  EXPECT_EQ(slice(b, D, 8), (Bytes{5, 6, 7, 8, 1, 2, 3, 4}));
  EXPECT_EQ(b[kMadSize - 1], 1);
  EXPECT_EQ(roundtrip(drep), drep);
}

TEST(CmMad, SidrGoldenBytes) {
  SidrReqMsg q;
  q.request_id = 0xDEADBEEF;
  q.pkey = 0xFFFF;
  q.service_id = service_id(PortSpace::kUdp, 7174);
  q.private_data[0] = 0x00;
  q.private_data[1] = 0x40;
  MadBuf b = encode({}, q);
  EXPECT_EQ(b[17], 0x17);
  EXPECT_EQ(slice(b, D, 18), (Bytes{0xDE, 0xAD, 0xBE, 0xEF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0x01,
                                    0x11, 0x1C, 0x06, 0x00, 0x40}));
  EXPECT_EQ(roundtrip(q), q);

  SidrRepMsg r;
  r.request_id = 0xDEADBEEF;
  r.status = SidrStatus::kSuccess;
  r.additional_info_length = 0;
  r.vendor_id = 0xA1A2A3;
  r.qpn = Qpn(0x000022);
  r.service_id = service_id(PortSpace::kUdp, 7174);
  r.qkey = kRdmaUdpQkey;
  r.private_data[0] = 0x77;
  b = encode({}, r);
  EXPECT_EQ(b[17], 0x18);
  EXPECT_EQ(slice(b, D, 24),
            (Bytes{0xDE, 0xAD, 0xBE, 0xEF, 0x00, 0x00, 0xA1, 0xA2, 0x00, 0x00, 0x22, 0xA3,
                   0,    0,    0,    0,    0x01, 0x11, 0x1C, 0x06, 0x01, 0x23, 0x45, 0x67}));
  EXPECT_EQ(b[D + 96], 0x77);
  EXPECT_EQ(roundtrip(r), r);
}

TEST(CmMad, CmaHeaderIpv4AndIpv6) {
  std::array<std::uint8_t, kCmaHeaderSize> buf{};
  const CmaHeader h4 = CmaHeader::ipv4(Ipv4Addr{0x0A000001}, 7174, Ipv4Addr{0x0A000002});
  encode_cma_header(h4, buf);
  Bytes want(36, 0);
  want[1] = 0x40;
  want[2] = 0x1C;
  want[3] = 0x06;
  want[16] = 10, want[19] = 1;
  want[32] = 10, want[35] = 2;
  EXPECT_EQ(Bytes(buf.begin(), buf.end()), want);
  ASSERT_TRUE(decode_cma_header(buf));
  EXPECT_EQ(*decode_cma_header(buf), h4);
  EXPECT_EQ(decode_cma_header(buf)->src_ipv4().v, 0x0A000001u);
  EXPECT_EQ(decode_cma_header(buf)->dst_ipv4().v, 0x0A000002u);

  Ipv6Addr a{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
  Ipv6Addr z{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}};
  const CmaHeader h6 = CmaHeader::ipv6(a, 1, z);
  encode_cma_header(h6, buf);
  EXPECT_EQ(buf[1], 0x60);
  EXPECT_EQ(buf[4], 0x20);
  EXPECT_EQ(buf[35], 0x02);
  EXPECT_EQ(*decode_cma_header(buf), h6);

  buf[0] = 1;  // unknown cma version
  EXPECT_FALSE(decode_cma_header(buf));
  buf[0] = 0;
  buf[1] = 0x50;  // neither IPv4 nor IPv6
  EXPECT_FALSE(decode_cma_header(buf));
}

TEST(CmMad, MalformedMadsAreRefused) {
  const MadBuf good = encode({}, rping_req());
  EXPECT_EQ(decode(std::span<const std::uint8_t>{}).error, MadError::kTruncated);
  EXPECT_EQ(decode(std::span(good).first(255)).error, MadError::kTruncated);
  EXPECT_EQ(decode(std::span(good).first(24)).error, MadError::kTruncated);
  Bytes longer(good.begin(), good.end());
  longer.push_back(0);
  EXPECT_EQ(decode(longer).error, MadError::kTooLong);

  auto with = [&good](std::size_t off, std::uint8_t v) {
    MadBuf b = good;
    b[off] = v;
    return decode(b).error;
  };
  EXPECT_EQ(with(0, 2), MadError::kBadBaseVersion);
  EXPECT_EQ(with(1, 0x04), MadError::kNotCm);
  EXPECT_EQ(with(2, 1), MadError::kBadClassVersion);
  EXPECT_EQ(with(3, 0x81), MadError::kBadMethod);
  EXPECT_EQ(with(17, 0x19), MadError::kUnsupportedAttribute);  // LAP
  EXPECT_EQ(with(17, 0x01), MadError::kUnsupportedAttribute);  // ClassPortInfo
  EXPECT_EQ(with(17, 0x20), MadError::kUnknownAttribute);
  EXPECT_EQ(with(16, 0x01), MadError::kUnknownAttribute);

  RejMsg rej;
  rej.reject_info_length = 73;
  EXPECT_EQ(decode(encode({}, rej)).error, MadError::kBadField);
  MraMsg mra;
  mra.message_mraed = static_cast<MsgKind>(3);
  EXPECT_EQ(decode(encode({}, mra)).error, MadError::kBadField);
  SidrRepMsg sr;
  sr.additional_info_length = 73;
  EXPECT_EQ(decode(encode({}, sr)).error, MadError::kBadField);
  EXPECT_FALSE(to_string(MadError::kBadField).empty());
}

// Any 256 bytes with a valid header decode, and encoding the result gives bytes that decode to
// the same message (reserved bits are the only thing allowed to differ). Any length decodes
// without reading past the span.
TEST(CmMad, ArbitraryBodiesRoundTrip) {
  std::uint32_t x = 0x12345678;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return static_cast<std::uint8_t>(x);
  };
  const std::uint16_t attrs[] = {0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18};
  int decoded = 0;
  for (int round = 0; round < 2000; ++round) {
    MadBuf b;
    for (auto& v : b) v = next();
    b[0] = 1, b[1] = 0x07, b[2] = 2, b[3] = 3;
    b[16] = 0;
    b[17] = static_cast<std::uint8_t>(attrs[round % 9]);
    const DecodedMad d = decode(b);
    if (!d.ok()) {
      EXPECT_EQ(d.error, MadError::kBadField);
      continue;
    }
    ++decoded;
    const DecodedMad again = decode(encode(d.hdr, d.msg));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again.hdr, d.hdr);
    EXPECT_TRUE(again.msg == d.msg) << "attribute " << attrs[round % 9];
  }
  EXPECT_GT(decoded, 1000);
  std::vector<std::uint8_t> any(600);
  for (std::size_t n = 0; n <= any.size(); n += 7)
    EXPECT_FALSE(decode(std::span<const std::uint8_t>(any.data(), n)).ok());
}

TEST(CmMad, MtuEnum) {
  EXPECT_EQ(mtu_enum(1024), 3);
  EXPECT_EQ(mtu_enum(4096), 5);
  EXPECT_EQ(mtu_enum(1500), 0);
  EXPECT_EQ(mtu_bytes(1), 256u);
  EXPECT_EQ(mtu_bytes(6), 0u);
}

}  // namespace
}  // namespace roce::cm
