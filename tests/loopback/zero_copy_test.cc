// Zero-copy transmit (Engine::set_tx_zero_copy): frames leave in pieces whose payload points
// into registered memory; put together they are the frames the copying path builds, byte for
// byte; a payload in too many pieces is copied; dereg_mr leaves nothing queued pointing into
// memory the application may free; and go-back-N under loss still delivers every byte.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;

// The frames engine A queues for one WRITE of `sges` to B, taken in pieces.
struct Queued {
  std::vector<std::vector<std::uint8_t>> whole;  ///< each frame put together
  std::vector<std::vector<TxSeg>> ext;           ///< its payload pieces
};

Queued write_and_take(Loopback& lb, const Endpoint& a, const Buffer& dst,
                      std::span<const Sge> sges) {
  SendWr wr = make_wr(1, sges.data(), dst);
  wr.num_sge = static_cast<std::uint32_t>(sges.size());
  EXPECT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  lb.a().run(lb.now());
  Queued q;
  lb.a().drain_tx_frames([&](const TxFrame& f) {
    std::vector<std::uint8_t> w;
    f.copy_to(w);
    EXPECT_EQ(w.size(), f.size());
    q.whole.push_back(std::move(w));
    q.ext.emplace_back(f.ext.begin(), f.ext.end());
  });
  return q;
}

TEST(ZeroCopy, PiecesPointIntoRegisteredMemoryAndMatchTheCopiedFrames) {
  // The same WRITE (three pieces, odd lengths so that the last packet needs pad) once copied,
  // once zero-copy, from and to the same memory: the same engines' seeds give the same
  // headers, so the frames must match.
  std::vector<std::vector<std::uint8_t>> copied;
  Buffer s1, s2, s3, dst;
  s1.bytes.resize(700);
  s2.bytes.resize(901);
  s3.bytes.resize(1501);
  dst.bytes.resize(4096);
  fill_pattern(s1.bytes, 1);
  fill_pattern(s2.bytes, 2);
  fill_pattern(s3.bytes, 3);
  for (const std::uint32_t zc : {0u, 1u}) {
    LoopbackOptions lo;
    lo.zero_copy = zc;
    Loopback lb(lo);
    RcOptions o;
    o.mtu = Mtu::k1024;
    auto [a, b] = connect(lb, o);
    for (Buffer* buf : {&s1, &s2, &s3})
      buf->mr = lb.a().reg_mr(a.pd, buf->bytes.data(), buf->bytes.size(), kAccessLocalWrite);
    dst.mr = lb.b().reg_mr(b.pd, dst.bytes.data(), dst.bytes.size(),
                           kAccessLocalWrite | kAccessRemoteWrite);
    ASSERT_NE(dst.mr, nullptr);
    const Sge sges[] = {s1.sge(), s2.sge(), s3.sge()};
    const Queued q = write_and_take(lb, a, dst, sges);
    ASSERT_EQ(q.whole.size(), 4u);  // 3102 bytes at MTU 1024
    for (const auto& f : q.whole) {
      wire::RxPkt p;
      ASSERT_EQ(wire::parse_frame(f, p), wire::Verdict::kOk);  // ICRC verified
    }
    if (zc == 0) {
      for (const auto& e : q.ext) EXPECT_TRUE(e.empty());
      copied = q.whole;
      continue;
    }
    EXPECT_EQ(q.whole, copied);
    // Packet 1: 700 bytes of s1 and the first 324 of s2; packet 2: the rest of s2 and 447 of
    // s3; packets 3 and 4 come from s3 alone.
    ASSERT_EQ(q.ext[0].size(), 2u);
    EXPECT_EQ(q.ext[0][0].addr, s1.bytes.data());
    EXPECT_EQ(q.ext[0][0].len, 700u);
    EXPECT_EQ(q.ext[0][1].addr, s2.bytes.data());
    EXPECT_EQ(q.ext[0][1].len, 324u);
    ASSERT_EQ(q.ext[1].size(), 2u);
    EXPECT_EQ(q.ext[1][1].addr, s3.bytes.data());
    EXPECT_EQ(q.ext[3].size(), 1u);
    EXPECT_EQ(q.ext[3][0].addr, s3.bytes.data() + 1501 - 30);
    EXPECT_EQ(lb.a().stats().get(Counter::kTxZeroCopyFrames), 4u);
  }
}

TEST(ZeroCopy, SmallAndManyPiecePayloadsAreCopied) {
  LoopbackOptions lo;
  lo.zero_copy = 512;
  Loopback lb(lo);
  RcOptions o;
  o.cap.max_send_sge = 8;
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, 4096, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 4096, 2);
  // Below the threshold.
  const Sge small[] = {src.sge(0, 511)};
  Queued q = write_and_take(lb, a, dst, small);
  ASSERT_EQ(q.whole.size(), 1u);
  EXPECT_TRUE(q.ext[0].empty());
  // Five pieces in one packet: more than TxRing::kMaxExt.
  const Sge five[] = {src.sge(0, 200), src.sge(1000, 200), src.sge(2000, 200), src.sge(3000, 200),
                      src.sge(3500, 200)};
  q = write_and_take(lb, a, dst, five);
  ASSERT_EQ(q.whole.size(), 1u);
  EXPECT_TRUE(q.ext[0].empty());
  wire::RxPkt p;
  ASSERT_EQ(wire::parse_frame(q.whole[0], p), wire::Verdict::kOk);
  ASSERT_EQ(p.payload_len, 1000u);
  EXPECT_EQ(std::memcmp(p.payload().data() + 800, src.bytes.data() + 3500, 200), 0);
  EXPECT_EQ(lb.a().stats().get(Counter::kTxZeroCopyFrames), 0u);
}

TEST(ZeroCopy, DeregisteringMakesQueuedFramesWhole) {
  LoopbackOptions lo;
  lo.zero_copy = 1;
  Loopback lb(lo);
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 2048, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 2048, 2);
  const std::vector<std::uint8_t> original = src.bytes;
  int released = 0;
  lb.a().before_mr_release = [&] { ++released; };
  const Sge s = src.sge();
  SendWr wr = make_wr(1, &s, dst);
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  lb.a().run(lb.now());
  ASSERT_EQ(lb.a().tx_pending(), 2u);  // two 1024-byte packets, queued zero-copy
  ASSERT_EQ(lb.a().dereg_mr(src.mr), kOk);
  EXPECT_EQ(released, 1);
  // The application may now reuse the memory: what was queued keeps the old bytes.
  std::memset(src.bytes.data(), 0xEE, src.bytes.size());
  std::size_t at = 0;
  lb.a().drain_tx_frames([&](const TxFrame& f) {
    EXPECT_TRUE(f.ext.empty());
    EXPECT_TRUE(f.trailer.empty());
    wire::RxPkt p;
    ASSERT_EQ(wire::parse_frame(f.head, p), wire::Verdict::kOk);
    EXPECT_EQ(std::memcmp(p.payload().data(), original.data() + at, p.payload_len), 0);
    at += p.payload_len;
  });
  EXPECT_EQ(at, 2048u);
}

TEST(ZeroCopy, GoBackNUnderLossDeliversEveryByte) {
  LoopbackOptions lo;
  lo.zero_copy = 256;
  lo.a2b.drop_rate = 0.02;
  lo.b2a.drop_rate = 0.02;
  lo.a2b.seed = 7;
  lo.b2a.seed = 8;
  Loopback lb(lo);
  RcOptions o;
  o.mtu = Mtu::k4096;
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, 1 << 20, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 1 << 20, 2);
  Buffer back = make_buffer(lb.a(), a.pd, 1 << 20, 3);
  const Sge s = src.sge();
  SendWr wr = make_wr(1, &s, dst);
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  // And READ it back: READ responses leave B zero-copy too.
  const Sge r = back.sge();
  SendWr rd = make_wr(2, &r, dst, 0, WrOpcode::kRead);
  ASSERT_EQ(lb.a().post_send(a.qp, &rd, nullptr), kOk);
  const auto wcs = wait_wcs(lb, a.scq, 2, 60'000'000'000ull);
  ASSERT_EQ(wcs.size(), 2u);
  for (const Wc& wc : wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess) << to_string(wc.status);
  EXPECT_EQ(dst.bytes, src.bytes);
  EXPECT_EQ(back.bytes, src.bytes);
  EXPECT_GT(lb.a().stats().get(Counter::kRetransmittedPackets), 0u);
  EXPECT_GE(lb.a().stats().get(Counter::kTxZeroCopyFrames), 256u);
  EXPECT_GE(lb.b().stats().get(Counter::kTxZeroCopyFrames), 256u);
}

}  // namespace
}  // namespace roce::test
