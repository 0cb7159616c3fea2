// Memory per QP (issue 33: "10,000 QPs ... memory per QP documented and <= 16 KiB"): heap bytes
// the engine takes for 10,000 RC QPs of depth 2 (the benchmark's many-QP shape), each with its
// share of the engine's per-QP tables (sized by max_qps) and of the CQ they complete on.
#include <gtest/gtest.h>
#include <malloc.h>

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

}  // namespace
}  // namespace roce::engine
