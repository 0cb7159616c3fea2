/// @file
/// A hashed timing wheel (Varghese and Lauck's scheme 6) for the engine's per-QP timers: O(1)
/// to schedule, and expiry touches only the slots whose time has come, so a thousand QPs with
/// armed timers cost nothing until one of them is due. 1024 slots of 16.384 us span 16.8 ms;
/// a later deadline waits in its slot for the revolutions in between.
///
/// Entries are not cancelled: the owner keeps the time it last scheduled and ignores an entry
/// that does not match it (lazy deletion), so re-arming a timer on every ACK costs nothing
/// while the earlier entry is still pending. Only erase() (an object that goes away) searches.
///
/// The earliest deadline (next()) is found from a bitmap of the slots that hold entries and
/// each slot's earliest time: a look at 16 words and at the occupied slots up to the first
/// entry of this revolution, whatever the number of entries (with 10,000 QPs, each slot holds
/// about ten ACK-timeout entries of later revolutions; with one QP the wheel is nearly empty
/// and a walk over all 1024 slots cost 14,000 instructions per expiry).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
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
    const std::size_t i = tick & (kSlots - 1);
    Slot& slot = slots_[i];
    if (slot.entries.empty()) {
      slot.min = at;
      occupied_[i / 64] |= std::uint64_t{1} << (i % 64);
    } else if (at < slot.min) {
      slot.min = at;
    }
    slot.entries.push_back({obj, at});
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
      const std::size_t si = (cur_tick_ + i) & (kSlots - 1);
      Slot& slot = slots_[si];
      if (slot.entries.empty() || slot.min > now) continue;
      std::size_t keep = 0;
      std::uint64_t min = UINT64_MAX;
      for (std::size_t j = 0; j < slot.entries.size(); ++j) {
        const Entry e = slot.entries[j];
        if (e.at <= now) {
          due_.push_back(e);
        } else {
          slot.entries[keep++] = e;
          min = std::min(min, e.at);
        }
      }
      slot.entries.resize(keep);
      slot.min = min;
      if (keep == 0) occupied_[si / 64] &= ~(std::uint64_t{1} << (si % 64));
    }
    if (now_tick > cur_tick_) cur_tick_ = now_tick;
    count_ -= due_.size();
    next_ = earliest();
    // With many QPs each entry's object is a cache miss (its owner's check of the entry reads
    // it): ask for those a few entries ahead, so that the misses overlap.
    constexpr std::size_t kAhead = 4;
    for (std::size_t i = 0; i < due_.size(); ++i) {
      if (i + kAhead < due_.size()) __builtin_prefetch(due_[i + kAhead].obj, 1, 3);
      f(due_[i].obj, due_[i].at);
    }
  }

  /// Removes every entry of `obj` (it is about to be freed).
  void erase(const T* obj) {
    for (std::size_t i = 0; i < kSlots; ++i) {
      Slot& slot = slots_[i];
      if (slot.entries.empty()) continue;
      const std::size_t before = slot.entries.size();
      std::erase_if(slot.entries, [obj](const Entry& e) { return e.obj == obj; });
      if (slot.entries.size() == before) continue;
      count_ -= before - slot.entries.size();
      slot.min = UINT64_MAX;
      for (const Entry& e : slot.entries) slot.min = std::min(slot.min, e.at);
      if (slot.entries.empty()) occupied_[i / 64] &= ~(std::uint64_t{1} << (i % 64));
    }
    next_ = earliest();
  }

  /// The earliest entry's time, 0 when the wheel is empty.
  std::uint64_t next() const { return next_; }
  std::size_t size() const { return count_; }

 private:
  struct Entry {
    T* obj;
    std::uint64_t at;
  };

  struct Slot {
    std::vector<Entry> entries;
    std::uint64_t min = UINT64_MAX;  ///< the earliest of `entries`
  };
  static constexpr std::size_t kWords = kSlots / 64;

  // The earliest entry: the occupied slots from the current one on, in order; the first whose
  // earliest entry falls in this revolution of the slot gives it (an entry of a later
  // revolution in an earlier slot is later still). Entries of later revolutions only are the
  // answer when no slot holds one of this revolution.
  std::uint64_t earliest() const {
    if (count_ == 0) return 0;
    std::uint64_t later = UINT64_MAX;
    const std::size_t start = cur_tick_ & (kSlots - 1);
    for (std::size_t k = 0; k <= kWords; ++k) {
      const std::size_t w = (start / 64 + k) % kWords;
      std::uint64_t bits = occupied_[w];
      if (k == 0)
        bits &= ~std::uint64_t{0} << (start % 64);
      else if (k == kWords)  // back in the first word: the slots before the current one
        bits &= ~(~std::uint64_t{0} << (start % 64));
      while (bits != 0) {
        const std::size_t i = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
        bits &= bits - 1;
        const std::uint64_t tick = cur_tick_ + ((i - start) & (kSlots - 1));
        const std::uint64_t m = slots_[i].min;
        if (m < (tick + 1) << kTickShift) return m;
        later = std::min(later, m);
      }
    }
    return later;
  }

  std::array<Slot, kSlots> slots_;
  std::array<std::uint64_t, kWords> occupied_{};  ///< bit i: slots_[i] holds entries
  std::vector<Entry> due_;
  std::uint64_t cur_tick_ = 0;  ///< the slot expire() starts from
  std::size_t count_ = 0;
  std::uint64_t next_ = 0;
};

}  // namespace roce::engine
