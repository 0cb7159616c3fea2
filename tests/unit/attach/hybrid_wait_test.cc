// The attached backend's hybrid wait (client/src/hybrid_wait.h): the spin budget keeps its
// full length while spins find completions, halves to nothing while they do not (an idle
// client stops spinning after a few waits and never starts again on its own), comes back after
// a run of waits whose completion came soon after the sleep began, and retries ever less often
// when a retry fails (a client whose spin keeps roced from running on a shared CPU).
#include "client/src/hybrid_wait.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace roce::client {
namespace {

constexpr std::uint32_t kMax = 20'000;

// Misses until the budget is zero; returns how many it took.
int decay(SpinBudget& b) {
  int n = 0;
  while (b.budget() != 0 && n < 100) {
    b.slept(1'000'000, false);
    ++n;
  }
  return n;
}

TEST(HybridWait, HitsKeepTheFullBudget) {
  SpinBudget b(kMax);
  EXPECT_EQ(b.budget(), kMax);
  for (int i = 0; i < 100; ++i) b.hit();
  EXPECT_EQ(b.budget(), kMax);
  b.slept(1'000'000, true);  // one miss
  EXPECT_EQ(b.budget(), kMax / 2);
  b.hit();
  EXPECT_EQ(b.budget(), kMax);
}

TEST(HybridWait, MissesHalveItToNothing) {
  SpinBudget b(kMax);
  // 20 -> 10 -> 5 -> 2.5 -> 1.25 -> 0.625 -> (below 0.5 us) 0
  EXPECT_EQ(decay(b), 6);
  EXPECT_EQ(b.budget(), 0u);
}

TEST(HybridWait, AnIdleClientStopsSpinningAndStaysStopped) {
  // Nothing comes: every wait times out. The client spins for less than twice the bound in
  // all, then sleeps at once, however long it waits.
  SpinBudget b(kMax);
  std::uint64_t spun = 0;
  for (int i = 0; i < 100'000; ++i) {
    spun += b.budget();
    b.slept(1'000'000, false);
  }
  EXPECT_LT(spun, 2ull * kMax);
  EXPECT_EQ(b.budget(), 0u);
  // Completions long after the sleep began (a peer that thinks for a millisecond) do not bring
  // the spin back either.
  for (int i = 0; i < 1000; ++i) b.slept(1'000'000, true);
  EXPECT_EQ(b.budget(), 0u);
}

TEST(HybridWait, SoonCompletionsBringItBackAndFailedRetriesBackOff) {
  SpinBudget b(kMax);
  decay(b);
  // Four waits in a row whose completion came within the bound of the sleep: spin again.
  for (int i = 0; i < 3; ++i) b.slept(5'000, true);
  EXPECT_EQ(b.budget(), 0u);
  b.slept(5'000, true);
  EXPECT_EQ(b.budget(), kMax);
  // The retry fails (the spin never finds anything): next time it takes eight, then sixteen.
  decay(b);
  for (int i = 0; i < 7; ++i) b.slept(5'000, true);
  EXPECT_EQ(b.budget(), 0u);
  b.slept(5'000, true);
  EXPECT_EQ(b.budget(), kMax);
  decay(b);
  for (int i = 0; i < 15; ++i) b.slept(5'000, true);
  EXPECT_EQ(b.budget(), 0u);
  b.slept(5'000, true);
  EXPECT_EQ(b.budget(), kMax);
  // This retry works: back to four.
  b.hit();
  decay(b);
  for (int i = 0; i < 4; ++i) b.slept(5'000, true);
  EXPECT_EQ(b.budget(), kMax);
}

TEST(HybridWait, ARunIsBrokenByALongWait) {
  SpinBudget b(kMax);
  decay(b);
  for (int i = 0; i < 3; ++i) b.slept(5'000, true);
  b.slept(500'000, true);  // long: the run starts over
  for (int i = 0; i < 3; ++i) b.slept(5'000, true);
  EXPECT_EQ(b.budget(), 0u);
  b.slept(5'000, true);
  EXPECT_EQ(b.budget(), kMax);
}

TEST(HybridWait, ZeroNeverSpins) {
  SpinBudget b(0);
  EXPECT_EQ(b.budget(), 0u);
  for (int i = 0; i < 100; ++i) b.slept(1'000, true);
  EXPECT_EQ(b.budget(), 0u);
}

TEST(HybridWait, TheEnvironmentSetsTheBound) {
  ::unsetenv("ROCE_WAIT_SPIN_US");
  EXPECT_EQ(SpinBudget::max_from_env(), SpinBudget::kDefaultMaxNs);
  ::setenv("ROCE_WAIT_SPIN_US", "0", 1);
  EXPECT_EQ(SpinBudget::max_from_env(), 0u);
  ::setenv("ROCE_WAIT_SPIN_US", "7", 1);
  EXPECT_EQ(SpinBudget::max_from_env(), 7'000u);
  ::setenv("ROCE_WAIT_SPIN_US", "99999999999", 1);
  EXPECT_EQ(SpinBudget::max_from_env(), 1'000'000u);
  ::setenv("ROCE_WAIT_SPIN_US", "12us", 1);  // not a number: the default
  EXPECT_EQ(SpinBudget::max_from_env(), SpinBudget::kDefaultMaxNs);
  ::setenv("ROCE_WAIT_SPIN_US", "-3", 1);
  EXPECT_EQ(SpinBudget::max_from_env(), SpinBudget::kDefaultMaxNs);
  ::unsetenv("ROCE_WAIT_SPIN_US");
}

}  // namespace
}  // namespace roce::client
