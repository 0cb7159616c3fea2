/// @file
/// The attached backend's hybrid completion wait (docs/client-api.md, "Completions: polling and
/// waiting"): wait_cq first spins on the CQ's ring for a bounded time, and only then arms the
/// CQ and sleeps on its eventfd. A completion that comes within the spin costs neither side a
/// system call (roced writes the eventfd only for an armed CQ) nor the client a wake-up, which
/// on a VM is most of an attached round trip (perf bench sched pipe: 4 us on one CPU, 21 us
/// across two).
///
/// The spin adapts, as adaptive interrupt moderation does: a wait that the spin ends keeps the
/// full budget; one that had to sleep halves it (down to nothing: a pure sleep), so a client
/// whose completions come seldom (an idle one, or one that waits for a peer that thinks for a
/// while) spends at most a few budgets spinning before it sleeps at once. A budget of zero is
/// tried again after a run of waits whose completion came soon after the sleep began, with a
/// run that doubles each time the retry fails: when the spin itself delays the completion
/// (the client shares its CPU with the roced lcore it waits for, which cannot run while the
/// client spins) it is retried ever less often.
#pragma once

#include <time.h>

#include <cstdint>
#include <cstdlib>

namespace roce::client {

inline std::uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000 +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// How long the next wait may spin; one per CQ (not thread-safe: under the CQ's lock).
class SpinBudget {
 public:
  /// The default bound of one spin.
  static constexpr std::uint32_t kDefaultMaxNs = 20'000;
  /// ROCE_WAIT_SPIN_US from the environment (0: never spin, at most 1000), else the default.
  static std::uint32_t max_from_env() {
    const char* v = std::getenv("ROCE_WAIT_SPIN_US");
    if (v == nullptr || *v < '0' || *v > '9') return kDefaultMaxNs;
    char* end = nullptr;
    const unsigned long us = std::strtoul(v, &end, 10);
    if (end == v || *end != '\0') return kDefaultMaxNs;
    return static_cast<std::uint32_t>(us > 1000 ? 1000 : us) * 1000;
  }
  explicit SpinBudget(std::uint32_t max_ns = kDefaultMaxNs) : max_(max_ns), budget_(max_ns) {}
  std::uint32_t max() const { return max_; }
  /// Nanoseconds the next wait spins before it sleeps.
  std::uint32_t budget() const { return budget_; }
  /// The spin found a completion.
  void hit() {
    budget_ = max_;
    retry_after_ = kFirstRetry;
    retrying_ = false;
    soon_ = 0;
  }
  /// The wait slept (after a spin of budget() or none); `sleep_ns` later it was woken with
  /// something to poll (`got`) or gave up.
  void slept(std::uint64_t sleep_ns, bool got) {
    if (budget_ != 0) {
      budget_ /= 2;
      if (budget_ < kMinNs) {
        budget_ = 0;
        if (retrying_ && retry_after_ < kMaxRetry) retry_after_ *= 2;  // the retry failed
        retrying_ = false;
      }
      soon_ = 0;
      return;
    }
    if (max_ == 0) return;
    // Would a spin have caught it? Only a completion that came within the budget says so.
    if (got && sleep_ns <= max_) {
      if (++soon_ >= retry_after_) {
        budget_ = max_;
        retrying_ = true;
        soon_ = 0;
      }
    } else {
      soon_ = 0;
    }
  }

 private:
  static constexpr std::uint32_t kMinNs = 500;
  static constexpr std::uint32_t kFirstRetry = 4;
  static constexpr std::uint32_t kMaxRetry = 4096;
  std::uint32_t max_;
  std::uint32_t budget_;
  std::uint32_t soon_ = 0;  ///< waits in a row whose completion came within max_ of sleeping
  std::uint32_t retry_after_ = kFirstRetry;
  bool retrying_ = false;  ///< a retry's spins, since the budget went back to max_
};

}  // namespace roce::client
