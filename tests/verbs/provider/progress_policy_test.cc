// The in-process progress thread's decisions (verbs/provider/progress_policy.h): issue 30's
// 4 KiB write_bw, where a server whose program blocks outside our verbs (ib_write_bw's) napped
// in every gap of its stream and, on Linux's EEVDF scheduler of a busy host, came back from
// each nap a slice late; and a client whose progress thread took the port whenever its program
// was preempted, spinning on the CPU that program was waiting for.
#include "verbs/provider/progress_policy.h"

#include <gtest/gtest.h>

namespace roce::verbs_compat {
namespace {

constexpr std::uint64_t kUs = 1000, kSpin = 50 * kUs, kYieldFor = 10'000 * kUs;

IdleAction act(IdleMode m, bool spins, unsigned polls, std::uint64_t quiet) {
  return idle_action(m, spins, polls, quiet, kSpin, kYieldFor);
}

TEST(ProgressPolicy, BlockedProgramYieldsAsRocePerfFromThe32ndIdlePoll) {
  EXPECT_EQ(act(IdleMode::kAuto, false, 31, 0), IdleAction::kPoll);
  // roce-perf's Poller: from the 32nd idle poll on, a sched_yield, however short the gap
  EXPECT_EQ(act(IdleMode::kAuto, false, 32, 1 * kUs), IdleAction::kYield);
  // a stream's gap of 60 us: yielded through, never a nap (the cause of the 4 KiB row)
  EXPECT_EQ(act(IdleMode::kAuto, false, 500, 60 * kUs), IdleAction::kYield);
  EXPECT_EQ(act(IdleMode::kAuto, false, 5000, 9'999 * kUs), IdleAction::kYield);
  // quiet for 10 ms: the naps and sleeps of an idle program (verbs_idle)
  EXPECT_EQ(act(IdleMode::kAuto, false, 5000, kYieldFor), IdleAction::kRest);
}

TEST(ProgressPolicy, ProgramSpinningOnItsMemoryGetsTheNaps) {
  // write_lat after a linger missed: gaps under 50 us spun through, then 10 us naps
  EXPECT_EQ(act(IdleMode::kAuto, true, 40, 10 * kUs), IdleAction::kPoll);
  EXPECT_EQ(act(IdleMode::kAuto, true, 40, kSpin), IdleAction::kRest);
}

TEST(ProgressPolicy, ExplicitModesKeepTheirMeaning) {
  EXPECT_EQ(act(IdleMode::kNap, false, 40, 60 * kUs), IdleAction::kRest);
  EXPECT_EQ(act(IdleMode::kNap, false, 40, 10 * kUs), IdleAction::kPoll);
  EXPECT_EQ(act(IdleMode::kSpin, false, 40, kYieldFor * 10), IdleAction::kPoll);
  EXPECT_EQ(act(IdleMode::kYield, false, 40, 10 * kUs), IdleAction::kPoll);
  EXPECT_EQ(act(IdleMode::kYield, false, 40, 60 * kUs), IdleAction::kYield);
}

TEST(ProgressPolicy, PreemptedProgramKeepsThePort) {
  // runnable, ran 5 us of a 100 us back-off: preempted, the thread backs off again
  EXPECT_EQ(verbs_stopped(5 * kUs, 100 * kUs, true), Stopped::kPreempted);
  EXPECT_EQ(verbs_stopped(0, 100 * kUs, true), Stopped::kPreempted);
  // ran a quarter of it and more without a verb: it spins on its memory
  EXPECT_EQ(verbs_stopped(25 * kUs, 100 * kUs, true), Stopped::kSpins);
  EXPECT_EQ(verbs_stopped(90 * kUs, 100 * kUs, false), Stopped::kSpins);
  // asleep in the kernel (ib_write_bw's TCP read, a condition variable): the port is ours
  EXPECT_EQ(verbs_stopped(0, 100 * kUs, false), Stopped::kBlocked);
  EXPECT_EQ(verbs_stopped(3 * kUs, 100 * kUs, false), Stopped::kBlocked);
}

TEST(ProgressPolicy, BackOffGrowsWhileTheProgramsVerbsKeepComing) {
  constexpr std::uint64_t base = 100 * kUs, max = 1600 * kUs;
  // a streaming program: 100, 200, 400, 800, 1600 us, then 1600 us on (issue 30: 10 000
  // wake-ups a second, each preempting the program or its peer, down to about 600)
  std::uint64_t b = base;
  unsigned wakeups_in_a_second = 0;
  for (std::uint64_t t = 0; t < 1'000'000 * kUs; t += b, b = next_backoff(b, true, base, max))
    ++wakeups_in_a_second;
  EXPECT_LT(wakeups_in_a_second, 700u);
  EXPECT_EQ(next_backoff(800 * kUs, true, base, max), max);
  EXPECT_EQ(next_backoff(max, true, base, max), max);
  // the calls stopped (the thread takes the port, or backs off for a preempted program): the
  // next streak starts at 100 us again (a program that stops is noticed within the back-off
  // running then, 1.6 ms at most; a linger's miss and ibv_req_notify_cq wake it at once)
  EXPECT_EQ(next_backoff(max, false, base, max), base);
  // ROCE_VERBS_BACKOFF_MAX_US at or below the base: a fixed back-off, as before
  EXPECT_EQ(next_backoff(base, true, base, base), base);
  EXPECT_EQ(next_backoff(base, true, base, 10 * kUs), base);
}

}  // namespace
}  // namespace roce::verbs_compat
