/// @file
/// Commands for one thread from any other (PollLoop::post): a bounded multi-producer,
/// single-consumer queue whose slots hold the callables themselves. A command is constructed in
/// its slot, run there by the consumer and destroyed; posting one never allocates. A callable
/// larger than a slot (kBytes) does not compile: capture a pointer to what it needs instead.
///
/// The queue is D. Vyukov's bounded queue: each slot carries a sequence number that says whose
/// turn it is. A producer claims the next position with a CAS on `tail_`, builds the command,
/// then publishes it (release); the consumer takes positions in order and hands each slot back
/// for the next lap (release). Commands run in the order their positions were claimed, so those
/// of one producer run in the order it posted them. Like rte_ring's multi-producer mode, a
/// producer stalled between its claim and its publish holds back the commands claimed after it.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace roce::port {

/// Whether a callable fits a command slot of `Bytes` bytes.
template <class F, std::size_t Bytes>
concept FitsCommandSlot = std::is_invocable_r_v < void,
        std::decay_t<F>
& > &&sizeof(std::decay_t<F>) <= Bytes && alignof(std::decay_t<F>) <= alignof(std::max_align_t);

template <std::size_t Bytes = 64>
class CommandQueue {
 public:
  static constexpr std::size_t kBytes = Bytes;

  /// Room for `capacity` commands (rounded up to a power of two, at least 2).
  explicit CommandQueue(std::size_t capacity)
      : mask_(std::bit_ceil(std::max<std::size_t>(capacity, 2)) - 1),
        slots_(std::make_unique<Slot[]>(mask_ + 1)) {
    for (std::size_t i = 0; i <= mask_; ++i) slots_[i].seq.store(i, std::memory_order_relaxed);
  }
  /// Commands still queued are destroyed without running (as a poll loop that stops drops
  /// them).
  ~CommandQueue() {
    while (pop_destroy()) {
    }
  }
  CommandQueue(const CommandQueue&) = delete;
  CommandQueue& operator=(const CommandQueue&) = delete;

  std::size_t capacity() const { return mask_ + 1; }

  /// Queues `f` (from any thread); false, with `f` untouched, when the queue is full. An
  /// exception from building the command (copying `f`) leaves the queue as it was.
  template <class F>
  bool try_push(F&& f) {
    using Fn = std::decay_t<F>;
    static_assert(std::is_invocable_r_v<void, Fn&>, "a command is a void() callable");
    static_assert(sizeof(Fn) <= Bytes,
                  "this command does not fit a slot of the command queue: capture less (a "
                  "pointer or a reference to what it needs) instead of copying it in");
    static_assert(alignof(Fn) <= alignof(std::max_align_t), "over-aligned command");
    std::size_t pos = tail_.load(std::memory_order_relaxed);
    Slot* s;
    for (;;) {
      s = &slots_[pos & mask_];
      const std::size_t seq = s->seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::intptr_t>(seq) - static_cast<std::intptr_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (diff < 0) {
        return false;  // the slot still holds the command of the previous lap: full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
    // The position is ours: whatever happens, it must be published, or the consumer would
    // wait at it for good. A command that could not be built is published empty.
    try {
      ::new (static_cast<void*>(s->buf)) Fn(std::forward<F>(f));
      s->ops = &kOps<Fn>;
    } catch (...) {
      s->ops = nullptr;
      s->seq.store(pos + 1, std::memory_order_release);
      throw;
    }
    s->seq.store(pos + 1, std::memory_order_release);
    return true;
  }

  /// Runs the oldest command (on the consumer's thread only); false when there is none. When
  /// the command throws, it is destroyed and its slot handed back before the exception goes
  /// on to the caller. A command may run the queue again itself (a poll of its own loop): the
  /// inner call takes the commands after it.
  bool run_one() {
    const std::size_t pos = head_;
    Slot& s = slots_[pos & mask_];
    if (s.seq.load(std::memory_order_acquire) != pos + 1) return false;
    ++head_;
    Release release{s, pos + mask_ + 1};
    if (s.ops != nullptr) s.ops->run(s.buf);
    return true;
  }

 private:
  struct Ops {
    void (*run)(void*);
    void (*destroy)(void*);
  };
  template <class Fn>
  static constexpr Ops kOps{[](void* p) { (*static_cast<Fn*>(p))(); },
                            [](void* p) { static_cast<Fn*>(p)->~Fn(); }};
  struct Slot {
    std::atomic<std::size_t> seq{0};
    const Ops* ops = nullptr;
    alignas(std::max_align_t) std::byte buf[Bytes];
  };
  /// Destroys the command of slot `s` and hands the slot to the producers' lap `next`.
  struct Release {
    Slot& s;
    std::size_t next;
    ~Release() {
      if (s.ops != nullptr) s.ops->destroy(s.buf);
      s.ops = nullptr;
      s.seq.store(next, std::memory_order_release);
    }
  };
  bool pop_destroy() {
    const std::size_t pos = head_;
    Slot& s = slots_[pos & mask_];
    if (s.seq.load(std::memory_order_acquire) != pos + 1) return false;
    ++head_;
    Release release{s, pos + mask_ + 1};
    return true;
  }

  const std::size_t mask_;
  std::unique_ptr<Slot[]> slots_;
  alignas(64) std::atomic<std::size_t> tail_{0};  ///< next position to claim (producers)
  alignas(64) std::size_t head_ = 0;              ///< next position to run (the consumer)
};

}  // namespace roce::port
