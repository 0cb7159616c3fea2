// The scheduler (Engine::run, scheduler.cc) with more QPs waiting than the transmit ring
// takes: QPs are served in the order their work arrived, a run() that fills the ring leaves
// the next QP for the next run(), and no QP waits longer than one round (issue 33: with
// 10,000 QPs a QP in the middle of the list waited past the ACK timeout).
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {
using namespace roce::engine;

TEST(Scheduler, QpsAreServedInTheOrderTheirWorkArrivedAcrossFullRings) {
  EngineConfig ca = Loopback::default_config(0);
  ca.tx_slots = 64;  // 32 beyond the ACK reserve: 8 QPs' 4-packet messages per run()
  Loopback lb({}, ca);
  RcOptions o;
  o.cap = {4, 4, 1, 1, 0};
  auto [a0, b0] = connect(lb, o);
  constexpr int kQps = 100;
  std::vector<Endpoint> as;
  std::map<std::uint32_t, int> index_of;  // B's QPN -> index
  std::vector<Buffer> src, dst;
  for (int i = 0; i < kQps; ++i) {
    auto [a, b] = i == 0 ? std::pair{a0, b0} : connect_on(lb, a0, b0, o);
    as.push_back(a);
    index_of[b.qp->qpn] = i;
    src.push_back(make_buffer(lb.a(), a0.pd, 4096, static_cast<std::uint8_t>(i)));
    dst.push_back(make_buffer(lb.b(), b0.pd, 4096, 0));
  }
  // One 4 KiB WRITE (4 packets at MTU 1024) per QP, posted in the order 0, 1, ..., 99.
  for (int i = 0; i < kQps; ++i) {
    const Sge s = src[static_cast<std::size_t>(i)].sge();
    const SendWr wr = make_wr(static_cast<std::uint64_t>(i), &s, dst[static_cast<std::size_t>(i)]);
    ASSERT_EQ(lb.a().post_send(as[static_cast<std::size_t>(i)].qp, &wr, nullptr), kOk);
  }
  std::vector<int> order;  // the QP of each frame sent, run after run, nothing acknowledged
  std::uint64_t t = lb.now();
  std::size_t runs = 0;
  for (; runs < 100 && order.size() < 4u * kQps; ++runs) {
    const Frames fs = drain(lb.a(), t += 1000);
    EXPECT_LE(fs.size(), 32u) << "the ACK reserve stays free";
    for (const auto& f : fs) {
      wire::RxPkt p;
      ASSERT_EQ(wire::parse_frame(f, p), wire::Verdict::kOk);
      order.push_back(index_of.at(p.dest_qp.raw()));
    }
  }
  ASSERT_EQ(order.size(), 4u * kQps);
  EXPECT_EQ(runs, 13u) << "32 frames per run()";
  for (int i = 0; i < kQps; ++i)
    for (int k = 0; k < 4; ++k)
      ASSERT_EQ(order[static_cast<std::size_t>(4 * i + k)], i)
          << "frame " << 4 * i + k << ": QPs in the order their work was posted";
}

}  // namespace
}  // namespace roce::test
