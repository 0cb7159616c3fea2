// The requester and completer never touch local memory whose key is gone: a buffer
// deregistered (and freed) while a READ, an atomic or a WRITE is outstanding ends the work
// request with a local protection error when the engine next needs the memory (a READ
// response to place, an atomic result to write, a packet to send again). Under ASan (the
// sanitize preset) a use-after-free would abort the test.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {
using namespace roce::engine;

void deliver(Engine& e, const Frames& f, std::uint64_t t) {
  for (const auto& x : f) e.receive(x, t);
}

// A local buffer the test can free: registered on `e`, released by reset().
struct LocalBuf {
  std::unique_ptr<std::uint8_t[]> mem;
  std::size_t len = 0;
  Mr* mr = nullptr;
  Sge sge() const {
    return {reinterpret_cast<std::uint64_t>(mem.get()), std::uint32_t(len), mr->key};
  }
};
LocalBuf local(Engine& e, Pd* pd, std::size_t len) {
  LocalBuf b;
  b.mem = std::make_unique<std::uint8_t[]>(len);
  b.len = len;
  b.mr = e.reg_mr(pd, b.mem.get(), len, kAccessLocalWrite);
  return b;
}

Wc one_wc(Engine& e, Cq* cq) {
  Wc wc[4];
  EXPECT_EQ(e.poll_cq(cq, 4, wc), 1);
  return wc[0];
}

TEST(RequesterHardening, ReadResponseForDeregisteredBufferIsLocalProtectionError) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer remote = make_buffer(lb.b(), b.pd, 8192, 3);
  LocalBuf dst = local(lb.a(), a.pd, 8192);
  Sge s = dst.sge();
  SendWr wr = make_wr(1, &s, remote, 0, WrOpcode::kRead);
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  std::uint64_t t = lb.now();
  const Frames req = drain(lb.a(), t);
  ASSERT_EQ(req.size(), 1u);
  deliver(lb.b(), req, t);
  const Frames resp = drain(lb.b(), t);
  ASSERT_EQ(resp.size(), 8u) << "8 KiB at MTU 1024";
  deliver(lb.a(), {resp[0], resp[1]}, t);  // the first two land
  ASSERT_EQ(lb.a().dereg_mr(dst.mr), kOk);
  dst.mem.reset();
  deliver(lb.a(), {resp.begin() + 2, resp.end()}, t);
  drain(lb.a(), t);
  const Wc wc = one_wc(lb.a(), a.scq);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, WcStatus::kLocProtErr);
  EXPECT_EQ(a.qp->state, QpState::kErr);
  EXPECT_GE(lb.a().stats().get(Counter::kRxDropLocalAccess), 1u);
}

TEST(RequesterHardening, AtomicResultForDeregisteredBufferIsLocalProtectionError) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer remote = make_buffer(lb.b(), b.pd, 64, 0);
  LocalBuf res = local(lb.a(), a.pd, 8);
  Sge s = res.sge();
  SendWr wr;
  wr.wr_id = 2;
  wr.opcode = WrOpcode::kFetchAdd;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  wr.atomic = {remote.addr(), remote.mr->key, 1, 0};
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  std::uint64_t t = lb.now();
  deliver(lb.b(), drain(lb.a(), t), t);
  const Frames ack = drain(lb.b(), t);
  ASSERT_EQ(ack.size(), 1u);
  ASSERT_EQ(lb.a().dereg_mr(res.mr), kOk);
  res.mem.reset();
  deliver(lb.a(), ack, t);
  const Wc wc = one_wc(lb.a(), a.scq);
  EXPECT_EQ(wc.status, WcStatus::kLocProtErr);
}

TEST(RequesterHardening, RetransmissionFromDeregisteredBufferIsLocalProtectionError) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer remote = make_buffer(lb.b(), b.pd, 8192, 0);
  LocalBuf src = local(lb.a(), a.pd, 8192);
  Sge s = src.sge();
  SendWr wr = make_wr(3, &s, remote, 0, WrOpcode::kWrite);
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  std::uint64_t t = lb.now();
  const Frames lost = drain(lb.a(), t);  // every packet lost on the wire
  ASSERT_EQ(lost.size(), 8u);
  ASSERT_EQ(lb.a().dereg_mr(src.mr), kOk);
  src.mem.reset();
  // The probe and then the ACK timeout want the packets again: the key is gone.
  for (int i = 0; i < 50 && a.qp->state != QpState::kErr; ++i) {
    t += 1'000'000;
    drain(lb.a(), t);
  }
  const Wc wc = one_wc(lb.a(), a.scq);
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, WcStatus::kLocProtErr);
}

TEST(RequesterHardening, SendOfALaterPacketChecksTheKeyAgain) {
  // A long SEND whose buffer goes away after its first window: the rest is not read.
  Loopback lb;
  RcOptions o;
  auto [a, b] = connect(lb, o);
  LocalBuf src = local(lb.a(), a.pd, 1 << 20);
  Buffer rb = make_buffer(lb.b(), b.pd, 1 << 20, 0);
  Sge rs = rb.sge();
  RecvWr r;
  r.wr_id = 9;
  r.sg_list = &rs;
  r.num_sge = 1;
  ASSERT_EQ(lb.b().post_recv(b.qp, &r, nullptr), kOk);
  Sge s = src.sge();
  SendWr wr;
  wr.wr_id = 4;
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  std::uint64_t t = lb.now();
  const Frames first = drain(lb.a(), t);
  ASSERT_LT(first.size(), 1024u) << "the window stops the requester before the end";
  ASSERT_EQ(lb.a().dereg_mr(src.mr), kOk);
  src.mem.reset();
  deliver(lb.b(), first, t);
  deliver(lb.a(), drain(lb.b(), t), t);  // ACKs open the window
  drain(lb.a(), t);
  const Wc wc = one_wc(lb.a(), a.scq);
  EXPECT_EQ(wc.status, WcStatus::kLocProtErr);
}

}  // namespace
}  // namespace roce::test
