// The rsockets wire format and the checks a peer's messages pass (verbs/rdmacm/rsocket_proto.h):
// what a hostile or broken peer sends must be refused before it touches an rsocket's buffers.
#include "verbs/rdmacm/rsocket_proto.h"

#include <endian.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

namespace {

using namespace roce::rsockets;

ConnData good() {
  return format_conn(0x7000'0000'1000ull, 0x1234, 2, 0x7000'0000'8000ull, 0x5678, 1 << 20, 384);
}

TEST(RsocketProto, ConnDataRoundTrip) {
  const ConnData c = good();
  EXPECT_EQ(c.version, 1);
  EXPECT_EQ(c.flags & kFlagIomap, kFlagIomap);
  EXPECT_EQ(c.flags & kFlagNet, 0);  // little-endian host
  EXPECT_EQ(be16toh(c.credits), 384);
  Peer p;
  ASSERT_EQ(parse_conn(&c, sizeof c, p), 0);
  EXPECT_EQ(p.sgl_addr, 0x7000'0000'1000ull);
  EXPECT_EQ(p.sgl_key, 0x1234u);
  EXPECT_EQ(p.sgl_count, 2u);
  EXPECT_EQ(p.iomap_addr, 0x7000'0000'1000ull + 2 * sizeof(Sge));
  EXPECT_EQ(p.iomap_count, 2u);
  EXPECT_EQ(p.first_buf.addr, 0x7000'0000'8000ull);
  EXPECT_EQ(p.first_buf.key, 0x5678u);
  EXPECT_EQ(p.first_buf.length, 1u << 19);  // the first half
  EXPECT_EQ(p.credits, 384);
  EXPECT_FALSE(p.swap);
  // The event reports the field's size (56 on connect): longer is fine.
  std::uint8_t field[56]{};
  std::memcpy(field, &c, sizeof c);
  EXPECT_EQ(parse_conn(field, sizeof field, p), 0);
}

TEST(RsocketProto, BadConnDataRefused) {
  Peer p;
  p.credits = 77;
  ConnData c = good();
  EXPECT_EQ(parse_conn(&c, sizeof c - 1, p), EPROTO);  // short
  EXPECT_EQ(parse_conn(nullptr, 0, p), EPROTO);
  c.version = 2;
  EXPECT_EQ(parse_conn(&c, sizeof c, p), ENOTSUP);
  c = good();
  c.credits = 0;
  EXPECT_EQ(parse_conn(&c, sizeof c, p), EPROTO);
  c = good();
  c.target_sgl.length = 0;  // no SGL entry to write credits into
  EXPECT_EQ(parse_conn(&c, sizeof c, p), EPROTO);
  c = good();
  c.target_sgl.length = htobe32(0x10000);
  EXPECT_EQ(parse_conn(&c, sizeof c, p), EPROTO);
  c = good();
  c.data_buf.length = 0;
  EXPECT_EQ(parse_conn(&c, sizeof c, p), EPROTO);
  c = good();
  c.data_buf.length = htobe32(1u << 29);  // beyond a data message's 29-bit length
  EXPECT_EQ(parse_conn(&c, sizeof c, p), EPROTO);
  EXPECT_EQ(p.credits, 77);  // untouched on failure
}

TEST(RsocketProto, ByteOrderFlag) {
  ConnData c = good();
  c.flags |= kFlagNet;  // a big-endian peer: the SGEs we write into it are swapped
  Peer p;
  ASSERT_EQ(parse_conn(&c, sizeof c, p), 0);
  EXPECT_TRUE(p.swap);
  c.flags = 0;  // no iomap area
  ASSERT_EQ(parse_conn(&c, sizeof c, p), 0);
  EXPECT_EQ(p.iomap_count, 0u);
}

TEST(RsocketProto, IomapScale) {
  for (int v : {0, 1, 64, 128}) EXPECT_EQ(scale_to_value(value_to_scale(v, 8), 8), v);
  EXPECT_EQ(scale_to_value(value_to_scale(512, 8), 8), 512);
  EXPECT_EQ(scale_to_value(value_to_scale(300, 8), 8), 256);  // rounded down to 256s
}

TEST(RsocketProto, MessageEncoding) {
  EXPECT_EQ(make_msg(kOpData, 4096), 4096u);
  EXPECT_EQ(make_msg(kOpSgl, 5), 0x8000'0005u);
  EXPECT_EQ(make_msg(kOpCtrl, kCtrlDisconnect), 0xE000'0000u);
  EXPECT_EQ(make_msg(kOpIomapSgl, 3), 0xC000'0003u);
  EXPECT_EQ(msg_op(0xE000'0002u), kOpCtrl);
  EXPECT_EQ(msg_data(0xE000'0002u), 2u);
}

TEST(RsocketProto, DataBeyondGrantRefused) {
  Ledger l;
  l.reset(1000, 4, 0, 384, 1000);  // regions of 1000 bytes, 4 unread messages at most
  Ledger::Effect e;
  ASSERT_EQ(l.accept(make_msg(kOpData, 600), 0, e), 0);
  EXPECT_EQ(e.kind, Ledger::Effect::kData);
  EXPECT_EQ(e.value, 600u);
  EXPECT_EQ(l.accept(make_msg(kOpData, 401), 0, e), EPROTO);  // 1 byte past the region
  ASSERT_EQ(l.accept(make_msg(kOpData, 400), 0, e), 0);
  EXPECT_EQ(l.accept(make_msg(kOpData, 1), 0, e), EPROTO);  // nothing more granted
  ASSERT_EQ(l.accept(make_msg(kOpData, 0), 0, e), 0);       // an empty message fits
  l.granted();                                              // an SGL update of ours
  ASSERT_EQ(l.accept(make_msg(kOpData, 1), 0, e), 0);
  EXPECT_EQ(l.accept(make_msg(kOpData, 1), 0, e), EPROTO);  // 4 unread: the queue is full
  l.consumed();
  ASSERT_EQ(l.accept(make_msg(kOpData, 999), 0, e), 0);
  EXPECT_EQ(l.grant(), 0u);
  // Two regions granted, yet one message may not cross from one into the next.
  l.granted();
  l.granted();
  l.consumed();
  EXPECT_EQ(l.grant(), 2000u);
  EXPECT_EQ(l.accept(make_msg(kOpData, 1001), 0, e), EPROTO);
  ASSERT_EQ(l.accept(make_msg(kOpData, 1000), 0, e), 0);
  l.consumed();
  // The largest length the immediate can say, far beyond any buffer.
  EXPECT_EQ(l.accept(make_msg(kOpData, 0x1FFF'FFFF), 0, e), EPROTO);
}

TEST(RsocketProto, CreditsBeyondPeerQueueRefused) {
  Ledger l;
  l.reset(1000, 16, 0, 384, 1000);
  Ledger::Effect e;
  ASSERT_EQ(l.accept(make_msg(kOpSgl, 384), 0, e), 0);
  EXPECT_EQ(e.kind, Ledger::Effect::kCredits);
  EXPECT_EQ(e.value, 384u);
  EXPECT_EQ(l.accept(make_msg(kOpSgl, 385), 0, e), EPROTO);
  // 16-bit sequence numbers wrap; rdma-core's grant may carry bit 16 (rseq_no + rq_size).
  ASSERT_EQ(l.accept(make_msg(kOpSgl, 0x1'0010), 0xFFF0, e), 0);
  EXPECT_EQ(e.value, 0x10u);
  EXPECT_EQ(l.accept(make_msg(kOpSgl, 0xFFEF), 0xFFF0, e), EPROTO);  // behind what we sent
}

TEST(RsocketProto, IomapIndexAndOpsChecked) {
  Ledger l;
  l.reset(1000, 16, 2, 384, 1000);
  Ledger::Effect e;
  ASSERT_EQ(l.accept(make_msg(kOpIomapSgl, 1), 0, e), 0);
  EXPECT_EQ(e.kind, Ledger::Effect::kIomap);
  EXPECT_EQ(l.accept(make_msg(kOpIomapSgl, 2), 0, e), EPROTO);
  for (std::uint32_t op : {kOpDataMore, kOpWrite, kOpDraMore, kOpRsvd})
    EXPECT_EQ(l.accept(make_msg(op, 1), 0, e), EPROTO) << op;
  ASSERT_EQ(l.accept(make_msg(kOpCtrl, kCtrlKeepalive), 0, e), 0);
  EXPECT_EQ(e.kind, Ledger::Effect::kNone);
  ASSERT_EQ(l.accept(make_msg(kOpCtrl, kCtrlShutdown), 0, e), 0);
  EXPECT_EQ(e.kind, Ledger::Effect::kShutdown);
  ASSERT_EQ(l.accept(make_msg(kOpCtrl, kCtrlDisconnect), 0, e), 0);
  EXPECT_EQ(e.kind, Ledger::Effect::kDisconnect);
  EXPECT_EQ(l.accept(make_msg(kOpCtrl, 3), 0, e), EPROTO);
}

TEST(RsocketProto, TargetLengthChecked) {
  Ledger l;
  l.reset(1000, 16, 0, 384, 4096);
  EXPECT_TRUE(l.target_ok({0x1000, 1, 4096}));
  EXPECT_FALSE(l.target_ok({0x1000, 1, 4097}));
}

}  // namespace
