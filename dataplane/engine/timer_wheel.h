/// @file
/// A hashed timing wheel (Varghese and Lauck's scheme 6) for the engine's per-QP timers: O(1)
/// to schedule, and expiry touches only the slots whose time has come, so a thousand QPs with
/// armed timers cost nothing until one of them is due. 1024 slots of 16.384 us span 16.8 ms;
/// a later deadline waits in its slot for the revolutions in between.
///
/// Entries are not cancelled: the owner keeps the time it last scheduled and ignores an entry
/// that does not match it (lazy deletion), so re-arming a timer on every ACK costs nothing
/// while the earlier entry is still pending. Only erase() (an object that goes away) searches.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace roce::engine {

template <class T>
class TimerWheel {
 public:
  static constexpr unsigned kSlotBits = 10;
  static constexpr std::uint64_t kSlots = 1u << kSlotBits;
  static constexpr unsigned kTickShift = 14;  ///< 16.384 us per slot

  /// Adds an entry for `obj` due at `at` (ns). A time already past lands in the current slot.
  void schedule(T* obj, std::uint64_t at) {
    std::uint64_t tick = at >> kTickShift;
    if (count_ == 0 && tick < cur_tick_) cur_tick_ = tick;
    if (tick < cur_tick_) tick = cur_tick_;
    slots_[tick & (kSlots - 1)].push_back({obj, at});
    ++count_;
    if (next_ == 0 || at < next_) next_ = at;
  }

  /// Removes every entry due by `now` and calls `f(obj, at)` for each (after removing them
  /// all, so `f` may schedule again).
  template <class F>
  void expire(std::uint64_t now, F&& f) {
    if (count_ == 0) {
      next_ = 0;
      return;
    }
    const std::uint64_t now_tick = now >> kTickShift;
    const std::uint64_t n = now_tick >= cur_tick_ ? std::min(now_tick - cur_tick_ + 1, kSlots) : 0;
    due_.clear();
    for (std::uint64_t i = 0; i < n; ++i) {
      auto& slot = slots_[(cur_tick_ + i) & (kSlots - 1)];
      std::size_t keep = 0;
      for (std::size_t j = 0; j < slot.size(); ++j) {
        if (slot[j].at <= now)
          due_.push_back(slot[j]);
        else
          slot[keep++] = slot[j];
      }
      slot.resize(keep);
    }
    if (now_tick > cur_tick_) cur_tick_ = now_tick;
    count_ -= due_.size();
    next_ = earliest();
    for (const Entry& e : due_) f(e.obj, e.at);
  }

  /// Removes every entry of `obj` (it is about to be freed).
  void erase(const T* obj) {
    for (auto& slot : slots_) {
      const std::size_t before = slot.size();
      std::erase_if(slot, [obj](const Entry& e) { return e.obj == obj; });
      count_ -= before - slot.size();
    }
    if (count_ == 0) next_ = 0;
  }

  /// A lower bound of the earliest entry's time (exact unless entries were erased), 0 when
  /// the wheel is empty.
  std::uint64_t next() const { return next_; }
  std::size_t size() const { return count_; }

 private:
  struct Entry {
    T* obj;
    std::uint64_t at;
  };

  // The earliest entry from the current slot on: the first slot holding an entry of this
  // revolution gives it; entries of later revolutions are only the answer when nothing else
  // is pending.
  std::uint64_t earliest() const {
    if (count_ == 0) return 0;
    std::uint64_t later = 0;
    for (std::uint64_t i = 0; i < kSlots; ++i) {
      const std::uint64_t tick = cur_tick_ + i;
      const std::uint64_t end = (tick + 1) << kTickShift;
      std::uint64_t best = 0;
      for (const Entry& e : slots_[tick & (kSlots - 1)]) {
        if (e.at < end) {
          if (best == 0 || e.at < best) best = e.at;
        } else if (later == 0 || e.at < later) {
          later = e.at;
        }
      }
      if (best != 0) return best;
    }
    return later;
  }

  std::array<std::vector<Entry>, kSlots> slots_;
  std::vector<Entry> due_;
  std::uint64_t cur_tick_ = 0;  ///< the slot expire() starts from
  std::size_t count_ = 0;
  std::uint64_t next_ = 0;
};

}  // namespace roce::engine
