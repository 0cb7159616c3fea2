// Memory per QP (issue 33: "10,000 QPs ... memory per QP documented and <= 16 KiB"): heap bytes
// the engine takes for 10,000 RC QPs of depth 2 (the benchmark's many-QP shape), each with its
// share of the engine's per-QP tables (sized by max_qps) and of the CQ they complete on; and
// the QP's layout by path, which the scheduler's prefetch relies on.
#include <gtest/gtest.h>
#include <malloc.h>

#include <memory>

#include "dataplane/engine/engine.h"

namespace roce::engine {
namespace {

[[maybe_unused]] std::size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

TEST(QpMemory, TenThousandQpsTakeAtMostSixteenKiBEach) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the sanitizer's allocator is not glibc's: mallinfo2 does not see it";
#else
  constexpr std::uint32_t kQps = 10'000;
  const std::size_t before = heap_in_use();
  EngineConfig ec;
  ec.max_qps = kQps;
  ec.seed = 1;
  std::size_t qp_bytes = 0;
  {
    Engine eng(ec);
    Pd* pd = eng.alloc_pd();
    Cq* cq = eng.create_cq(kQps * 3 + 64);
    ASSERT_NE(cq, nullptr);
    const std::size_t tables = heap_in_use();
    for (std::uint32_t i = 0; i < kQps; ++i)
      ASSERT_NE(eng.create_qp(pd, QpType::kRc, cq, cq, QpCap{3, 1, 1, 1, 64}), nullptr) << i;
    qp_bytes = heap_in_use() - tables;
    const double per_qp = static_cast<double>(heap_in_use() - before) / kQps;
    RecordProperty("bytes_per_qp_with_tables", static_cast<int>(per_qp));
    RecordProperty("bytes_per_qp_alone", static_cast<int>(qp_bytes / kQps));
    std::printf("memory per QP: %.0f bytes with the engine's tables and the CQ, %zu alone\n",
                per_qp, qp_bytes / kQps);
    EXPECT_LE(per_qp, 16.0 * 1024);
  }
  EXPECT_GT(qp_bytes, 0u);
#endif
}

// The layout the scheduler's prefetch relies on (issue 33, many QPs; scheduler.cc): what a
// requester's turn and the completer read of a Qp ends within its first Qp::kHotBytes, and what
// the requester and the completer read of a SEND's or WRITE's WQE within its first two lines.
template <class S, class F>
std::size_t end_of(const S& s, const F& f) {
  return static_cast<std::size_t>(reinterpret_cast<const char*>(&f) + sizeof(F) -
                                  reinterpret_cast<const char*>(&s));
}

TEST(QpLayout, RequesterBlockFitsTheScheduledPrefetch) {
  EXPECT_EQ(alignof(Qp), 64u);
  EXPECT_EQ(alignof(SendWqe), 64u);
  EXPECT_EQ(sizeof(SendWqe), 192u);  // three lines: 200 bytes, unaligned, touched up to four
  const auto qp = std::make_unique<Qp>();
  for (const std::size_t end :
       {end_of(*qp, qp->timer_at), end_of(*qp, qp->send_cq), end_of(*qp, qp->srq),
        end_of(*qp, qp->sr), end_of(*qp, qp->sq), end_of(*qp, qp->sq_sges), end_of(*qp, qp->req),
        end_of(*qp, qp->comp), end_of(*qp, qp->hdr), end_of(*qp, qp->cap), end_of(*qp, qp->attr),
        end_of(*qp, qp->cc.ack_req_every)})
    EXPECT_LE(end, Qp::kHotBytes);
  EXPECT_GE(end_of(*qp, qp->cc.ack_req_every), Qp::kHotBytes - 64);  // no line fetched for naught
  const SendWqe w;
  for (const std::size_t end :
       {end_of(w, w.opcode), end_of(w, w.state), end_of(w, w.flags), end_of(w, w.num_sge),
        end_of(w, w.length), end_of(w, w.sent), end_of(w, w.remote_addr), end_of(w, w.rkey),
        end_of(w, w.imm), end_of(w, w.first_psn), end_of(w, w.last_psn), end_of(w, w.npkts),
        end_of(w, w.sge_range), end_of(w, w.inv_rkey), end_of(w, w.read_done), end_of(w, w.wr_id),
        end_of(w, w.status), end_of(w, w.is_inline)})
    EXPECT_LE(end, 128u);
}

}  // namespace
}  // namespace roce::engine
