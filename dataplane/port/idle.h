/// @file
/// Idle mode of a poll loop. A poll-mode core never yields: on a machine with fewer cores than
/// busy processes (a small VM, a laptop, roced sharing cores with its own attached clients) it
/// takes a core from someone who needs it. With an IdlePolicy, after `after_polls` polls in a
/// row that moved nothing the loop sleeps `sleep_us` between polls until one moves something
/// again. The cost: a frame that arrives while the loop sleeps waits up to `sleep_us` (plus the
/// timer's and the scheduler's wake-up latency: the loop's thread sets its timer slack to 1 us,
/// from the default 50 us, so that a sleep is not stretched to tens of microseconds more) before it
/// is seen; under load nothing changes, since busy polls never sleep. Busy polling (after_polls 0)
/// is the default.
#pragma once

#include <sys/prctl.h>
#include <time.h>

#include <cstdint>

namespace roce::port {

struct IdlePolicy {
  std::uint32_t after_polls = 0;  ///< empty polls before sleeping; 0: never sleep
  std::uint32_t sleep_us = 50;    ///< one sleep
  bool on() const { return after_polls != 0; }
};

class IdleBackoff {
 public:
  explicit IdleBackoff(IdlePolicy p = {}) : p_(p) {}
  /// After each poll: `moved` is what it did (frames, commands). May sleep.
  void after_poll(std::size_t moved) {
    if (!p_.on()) return;
    if (moved != 0) {
      empty_ = 0;
      return;
    }
    if (++empty_ < p_.after_polls) return;
    if (sleeps_ == 0) {
      // The thread's timer slack (50 us by default) would stretch every sleep: a 20 us one
      // took 95 us on a KVM guest, 42 us with a slack of 1 us. The lcore's thread only.
      prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    }
    const timespec ts{0, static_cast<long>(p_.sleep_us) * 1000};
    nanosleep(&ts, nullptr);
    ++sleeps_;
  }
  std::uint64_t sleeps() const { return sleeps_; }

 private:
  IdlePolicy p_;
  std::uint32_t empty_ = 0;
  std::uint64_t sleeps_ = 0;
};

}  // namespace roce::port
