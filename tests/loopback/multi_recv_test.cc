// Multi-message receive buffers (recv_queue.h): one posted buffer takes several messages one
// after another, each completion says where its message starts and whether the buffer stays
// queued (LNet's QUEUED flag), for RC (single and multi-packet SENDs), an SRQ shared by two
// QPs, and UD.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {
using namespace roce::engine;

void post_multi(Engine& e, Qp* qp, Srq* srq, const Buffer& b, std::uint64_t id,
                std::uint32_t min_free, std::uint32_t max_msgs) {
  Sge s = b.sge();
  RecvWr r;
  r.wr_id = id;
  r.sg_list = &s;
  r.num_sge = 1;
  r.min_free = min_free;
  r.max_msgs = max_msgs;
  ASSERT_EQ(srq ? e.post_srq_recv(srq, &r, nullptr) : e.post_recv(qp, &r, nullptr), kOk);
}

void send(Engine& e, Qp* qp, const Buffer& src, std::uint64_t off, std::uint32_t len,
          std::uint64_t id) {
  Sge s = src.sge(off, len);
  SendWr w;
  w.wr_id = id;
  w.opcode = WrOpcode::kSend;
  w.sg_list = &s;
  w.num_sge = 1;
  w.send_flags = kSendSignaled;
  ASSERT_EQ(e.post_send(qp, &w, nullptr), kOk);
}

TEST(MultiRecv, SeveralSendsLandInOneBufferInOrder) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 8192, 5);
  Buffer dst = make_buffer(lb.b(), b.pd, 4096, 0);
  std::fill(dst.bytes.begin(), dst.bytes.end(), 0);
  post_multi(lb.b(), b.qp, nullptr, dst, 77, 1024, 0);
  for (int i = 0; i < 4; ++i) send(lb.a(), a.qp, src, 1000 * i, 1000, i);
  const auto wcs = wait_wcs(lb, b.rcq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess);
    EXPECT_EQ(wcs[i].wr_id, 77u) << "every message completes the same buffer";
    EXPECT_EQ(wcs[i].byte_len, 1000u);
    EXPECT_EQ(wcs[i].offset, 1000u * i);
    // 3096, 2096, 1096 bytes left after the first three (>= 1024): still queued; 96 after
    // the fourth: the buffer is given back.
    EXPECT_EQ((wcs[i].wc_flags & kWcStillQueued) != 0, i < 3) << "message " << i;
  }
  EXPECT_TRUE(std::equal(src.bytes.begin(), src.bytes.begin() + 4000, dst.bytes.begin()));
  EXPECT_EQ(dst.bytes[4000], 0);
  // The buffer is gone: the next SEND waits for a new receive (RNR), then lands there.
  Buffer next = make_buffer(lb.b(), b.pd, 4096, 0);
  send(lb.a(), a.qp, src, 0, 100, 9);
  lb.run_until([] { return false; }, 2'000'000);
  Wc none[2];
  EXPECT_EQ(lb.b().poll_cq(b.rcq, 2, none), 0);
  post_multi(lb.b(), b.qp, nullptr, next, 78, 0, 0);
  const auto w2 = wait_wcs(lb, b.rcq, 1);
  ASSERT_EQ(w2.size(), 1u);
  EXPECT_EQ(w2[0].wr_id, 78u);
  EXPECT_EQ(w2[0].offset, 0u);
  EXPECT_EQ(w2[0].wc_flags & kWcStillQueued, 0u);
}

TEST(MultiRecv, MaxMsgsEndsTheBufferAndMultiPacketMessagesFit) {
  Loopback lb;
  auto [a, b] = connect(lb);  // MTU 1024
  Buffer src = make_buffer(lb.a(), a.pd, 16384, 9);
  Buffer dst = make_buffer(lb.b(), b.pd, 16384, 0);
  post_multi(lb.b(), b.qp, nullptr, dst, 1, 256, 2);
  Buffer second = make_buffer(lb.b(), b.pd, 16384, 0);
  post_multi(lb.b(), b.qp, nullptr, second, 2, 256, 0);
  send(lb.a(), a.qp, src, 0, 3000, 10);     // three packets
  send(lb.a(), a.qp, src, 3000, 2500, 11);  // three packets
  send(lb.a(), a.qp, src, 5500, 700, 12);   // into the second buffer
  const auto wcs = wait_wcs(lb, b.rcq, 3);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].offset, 0u);
  EXPECT_NE(wcs[0].wc_flags & kWcStillQueued, 0u);
  EXPECT_EQ(wcs[1].wr_id, 1u);
  EXPECT_EQ(wcs[1].offset, 3000u);
  EXPECT_EQ(wcs[1].wc_flags & kWcStillQueued, 0u) << "max_msgs 2 reached";
  EXPECT_EQ(wcs[2].wr_id, 2u);
  EXPECT_EQ(wcs[2].offset, 0u);
  EXPECT_TRUE(std::equal(src.bytes.begin(), src.bytes.begin() + 5500, dst.bytes.begin()));
  EXPECT_TRUE(std::equal(src.bytes.begin() + 5500, src.bytes.begin() + 6200, second.bytes.begin()));
}

TEST(MultiRecv, ASharedReceiveQueueServesTwoQpsFromOneBuffer) {
  Loopback lb;
  RcOptions o;
  o.use_srq_b = true;
  auto [a1, b1] = connect(lb, o);
  auto [a2, b2] = connect_on(lb, a1, b1, o);
  ASSERT_NE(b1.srq, nullptr);
  Buffer src = make_buffer(lb.a(), a1.pd, 4096, 3);
  Buffer dst = make_buffer(lb.b(), b1.pd, 8192, 0);
  post_multi(lb.b(), nullptr, b1.srq, dst, 5, 512, 0);
  for (int i = 0; i < 6; ++i) send(lb.a(), i % 2 ? a2.qp : a1.qp, src, 100 * i, 600, i);
  const auto wcs = wait_wcs(lb, b1.rcq, 6);
  ASSERT_EQ(wcs.size(), 6u);
  std::vector<bool> seen(8192 / 600 + 1, false);
  for (const Wc& w : wcs) {
    EXPECT_EQ(w.wr_id, 5u);
    EXPECT_EQ(w.byte_len, 600u);
    EXPECT_EQ(w.offset % 600, 0u) << "messages follow each other";
    seen[w.offset / 600] = true;
  }
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(seen[i]) << "slot " << i;
}

TEST(MultiRecv, FlushedWhenTheQpFails) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 4096, 3);
  Buffer dst = make_buffer(lb.b(), b.pd, 4096, 0);
  post_multi(lb.b(), b.qp, nullptr, dst, 7, 1024, 0);
  send(lb.a(), a.qp, src, 0, 100, 1);
  auto wcs = wait_wcs(lb, b.rcq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_NE(wcs[0].wc_flags & kWcStillQueued, 0u);
  QpAttr e;
  e.qp_state = QpState::kErr;
  ASSERT_EQ(lb.b().modify_qp(b.qp, e, kQpState), kOk);
  Wc wc[4];
  ASSERT_EQ(lb.b().poll_cq(b.rcq, 4, wc), 1);
  EXPECT_EQ(wc[0].wr_id, 7u);
  EXPECT_EQ(wc[0].status, WcStatus::kWrFlushErr) << "the open buffer is given back, flushed";
}

TEST(MultiRecv, RejectsABufferSmallerThanItsMinimum) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer dst = make_buffer(lb.b(), b.pd, 100, 0);
  Sge s = dst.sge();
  RecvWr r;
  r.sg_list = &s;
  r.num_sge = 1;
  r.min_free = 101;
  EXPECT_EQ(lb.b().post_recv(b.qp, &r, nullptr), kErrInval);
}

}  // namespace
}  // namespace roce::test
