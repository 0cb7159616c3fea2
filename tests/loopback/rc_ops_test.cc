// Every RC operation, at sizes 0, 1, MTU-1, MTU, MTU+1 and 1 MiB, for every path MTU, between
// two engines over the in-memory wire; payloads are verified byte for byte.
#include <gtest/gtest.h>

#include <tuple>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;

enum class Op { kSend, kSendImm, kWrite, kWriteImm, kRead };

const char* name(Op op) {
  switch (op) {
    case Op::kSend:
      return "send";
    case Op::kSendImm:
      return "send_imm";
    case Op::kWrite:
      return "write";
    case Op::kWriteImm:
      return "write_imm";
    case Op::kRead:
      return "read";
  }
  return "?";
}

enum class Size { kZero, kOne, kMtuMinus1, kMtu, kMtuPlus1, kOneMiB };

std::size_t bytes_of(Size s, std::uint32_t mtu) {
  switch (s) {
    case Size::kZero:
      return 0;
    case Size::kOne:
      return 1;
    case Size::kMtuMinus1:
      return mtu - 1;
    case Size::kMtu:
      return mtu;
    case Size::kMtuPlus1:
      return mtu + 1;
    case Size::kOneMiB:
      return 1 << 20;
  }
  return 0;
}

class RcOps : public ::testing::TestWithParam<std::tuple<Op, Size, Mtu, bool>> {};

TEST_P(RcOps, DeliversEveryByte) {
  const auto [op, size_kind, mtu, zero_copy] = GetParam();
  const std::uint32_t mtu_b = mtu_bytes(mtu);
  const std::size_t len = bytes_of(size_kind, mtu_b);
  LoopbackOptions lo;
  lo.zero_copy = zero_copy ? 1 : 0;  // every payload, down to 1 byte (3 bytes of pad)
  Loopback lb(lo);
  RcOptions o;
  o.mtu = mtu;
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, len + 16, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, len + 16, 2);
  const std::vector<std::uint8_t> dst_before = dst.bytes;

  // READ pulls B's buffer into A's; everything else pushes A's into B's.
  Buffer& from = op == Op::kRead ? dst : src;
  Buffer& to = op == Op::kRead ? src : dst;
  const std::vector<std::uint8_t> expect(from.bytes.begin(), from.bytes.begin() + len);

  const bool needs_recv = op == Op::kSend || op == Op::kSendImm || op == Op::kWriteImm;
  if (needs_recv) {
    Sge rs = dst.sge(0, len);
    RecvWr rwr;
    rwr.wr_id = 77;
    rwr.sg_list = &rs;
    rwr.num_sge = op == Op::kWriteImm ? 0 : 1;
    ASSERT_EQ(lb.b().post_recv(b.qp, &rwr, nullptr), kOk);
  }
  Sge s = op == Op::kRead ? src.sge(0, len) : src.sge(0, len);
  SendWr wr;
  wr.wr_id = 42;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  wr.imm_data = 0xC0FFEE01;
  wr.rdma.remote_addr = dst.addr();
  wr.rdma.rkey = dst.mr->key;
  switch (op) {
    case Op::kSend:
      wr.opcode = WrOpcode::kSend;
      break;
    case Op::kSendImm:
      wr.opcode = WrOpcode::kSendImm;
      break;
    case Op::kWrite:
      wr.opcode = WrOpcode::kWrite;
      break;
    case Op::kWriteImm:
      wr.opcode = WrOpcode::kWriteImm;
      break;
    case Op::kRead:
      wr.opcode = WrOpcode::kRead;
      break;
  }
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);

  const auto swc = wait_wcs(lb, a.scq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, WcStatus::kSuccess) << to_string(swc[0].status);
  EXPECT_EQ(swc[0].wr_id, 42u);
  if (needs_recv) {
    const auto rwc = wait_wcs(lb, b.rcq, 1);
    ASSERT_EQ(rwc.size(), 1u);
    EXPECT_EQ(rwc[0].status, WcStatus::kSuccess);
    EXPECT_EQ(rwc[0].wr_id, 77u);
    EXPECT_EQ(rwc[0].byte_len, len);
    EXPECT_EQ(rwc[0].opcode, op == Op::kWriteImm ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv);
    if (op != Op::kSend) {
      EXPECT_EQ(rwc[0].imm_data, 0xC0FFEE01u);
      EXPECT_TRUE(rwc[0].wc_flags & kWcWithImm);
    }
  }
  ASSERT_TRUE(std::equal(expect.begin(), expect.end(), to.bytes.begin())) << "payload differs";
  // Nothing beyond the message was touched.
  if (op != Op::kRead) {
    EXPECT_TRUE(std::equal(dst.bytes.begin() + static_cast<std::ptrdiff_t>(len), dst.bytes.end(),
                           dst_before.begin() + static_cast<std::ptrdiff_t>(len)));
  }
  lb.settle();
  EXPECT_EQ(lb.a().stats().get(Counter::kRetries), 0u);
  EXPECT_EQ(lb.b().stats().get(Counter::kRxDropVerdict), 0u);
  EXPECT_EQ(a.qp->state, QpState::kRts);
  EXPECT_EQ(b.qp->state, QpState::kRts);
  // The payload left from registered memory, not from a copy in the ring.
  Engine& sender = op == Op::kRead ? lb.b() : lb.a();
  if (zero_copy && len > 0) {
    EXPECT_EQ(sender.stats().get(Counter::kTxZeroCopyFrames), (len + mtu_b - 1) / mtu_b);
  } else {
    EXPECT_EQ(sender.stats().get(Counter::kTxZeroCopyFrames), 0u);
  }
}

std::string test_name(const testing::TestParamInfo<std::tuple<Op, Size, Mtu, bool>>& i) {
  static const char* kSizes[] = {"0", "1", "mtu_minus_1", "mtu", "mtu_plus_1", "1MiB"};
  return std::string(name(std::get<0>(i.param))) + "_" +
         kSizes[static_cast<int>(std::get<1>(i.param))] + "_mtu" +
         std::to_string(mtu_bytes(std::get<2>(i.param))) + (std::get<3>(i.param) ? "_zc" : "");
}

INSTANTIATE_TEST_SUITE_P(
    AllOpsSizesMtus, RcOps,
    testing::Combine(testing::Values(Op::kSend, Op::kSendImm, Op::kWrite, Op::kWriteImm, Op::kRead),
                     testing::Values(Size::kZero, Size::kOne, Size::kMtuMinus1, Size::kMtu,
                                     Size::kMtuPlus1, Size::kOneMiB),
                     testing::Values(Mtu::k256, Mtu::k512, Mtu::k1024, Mtu::k2048, Mtu::k4096),
                     testing::Bool()),
    test_name);

}  // namespace
}  // namespace roce::test
