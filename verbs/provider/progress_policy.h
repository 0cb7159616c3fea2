/// @file
/// The in-process progress thread's two decisions (mode.cc, progress_thread; docs/verbs-compat.md,
/// "The progress thread and what the verbs cost"), as pure functions so that a unit test holds
/// them (tests/verbs/progress_policy_test.cc):
///  - when the program's verbs stop for a back-off, whether the thread takes the port, and
///    how it then rests (a program spinning on its memory, one blocked, one preempted);
///  - what it does between polls of an idle port;
///  - how long it backs off while the program's verbs drive the port.
#pragma once

#include <cstdint>

namespace roce::verbs_compat {

/// ROCE_VERBS_PROGRESS: what the thread does between polls of an idle port.
///   kAuto (the default): roce-perf's Poller rule, sched_yield from the 32nd idle poll on (for
///         `yield_ns`, then the naps and sleeps below), except while the program spins on its
///         memory: then as kNap;
///   kNap: spin through gaps shorter than `spin_ns`, then nap 10 us between polls (the default
///         of issue 30's second round);
///   kSpin: never rest; kYield: sched_yield once the port has been idle `spin_ns`.
enum class IdleMode { kAuto, kSpin, kYield, kNap };

/// What the thread does after a poll of the port that moved nothing.
enum class IdleAction {
  kPoll,   ///< poll again at once
  kYield,  ///< sched_yield, then poll
  kRest,   ///< a nap (10 us) or, quiet for 10 ms and more, a longer sleep (deep_nap)
};

/// `idle_polls` polls in a row moved nothing, the port quiet for `quiet_ns`; `spins`: the program
/// is believed to spin on its memory (a linger missed, or its thread ran without a verb).
constexpr IdleAction idle_action(IdleMode mode, bool spins, unsigned idle_polls,
                                 std::uint64_t quiet_ns, std::uint64_t spin_ns,
                                 std::uint64_t yield_ns) {
  constexpr unsigned kYieldAfterIdlePolls = 32;  // runtime::Poller::kYieldAfterIdlePolls
  if (idle_polls < kYieldAfterIdlePolls) return IdleAction::kPoll;
  if (mode == IdleMode::kAuto && !spins)
    return quiet_ns < yield_ns ? IdleAction::kYield : IdleAction::kRest;
  if (quiet_ns < spin_ns || mode == IdleMode::kSpin) return IdleAction::kPoll;
  return mode == IdleMode::kYield ? IdleAction::kYield : IdleAction::kRest;
}

/// When the program's verbs stopped for a back-off of `wall_ns`.
enum class Stopped {
  kSpins,      ///< its thread ran (spins on its memory or computes): take the port, nap when idle
  kBlocked,    ///< its thread did not run and is not runnable: take the port, yield when idle
  kPreempted,  ///< runnable but did not run (another thread had its CPU): back off again
};

/// `cpu_ns`: the CPU time the program's thread ran in those `wall_ns` (unknown: 0);
/// `runnable`: its state is R.
constexpr Stopped verbs_stopped(std::uint64_t cpu_ns, std::uint64_t wall_ns, bool runnable) {
  if (cpu_ns * 4 >= wall_ns && cpu_ns != 0) return Stopped::kSpins;
  return runnable ? Stopped::kPreempted : Stopped::kBlocked;
}

/// The next back-off while the program's verbs drive the port: `cur_ns` was the last one;
/// `calls_kept_coming`: the program's calls moved through it. Doubling up to `max_ns` (a
/// streaming program is woken about 600 times a second at 1.6 ms, not 10 000 at 100 us);
/// back to `base_ns` whenever the calls stopped (the thread took the port, or found the
/// program preempted) or something woke it (a linger's takeover, ibv_req_notify_cq).
constexpr std::uint64_t next_backoff(std::uint64_t cur_ns, bool calls_kept_coming,
                                     std::uint64_t base_ns, std::uint64_t max_ns) {
  if (!calls_kept_coming) return base_ns;
  const std::uint64_t twice = cur_ns * 2;
  return twice < max_ns ? twice : (max_ns > base_ns ? max_ns : base_ns);
}

}  // namespace roce::verbs_compat
