// The engine's timing wheel: due entries come out exactly once, at or after their time, in
// any order of scheduling; entries of later revolutions wait; erase() forgets an object.
#include "dataplane/engine/timer_wheel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

namespace roce::engine {
namespace {

struct Obj {
  int id = 0;
};
using Wheel = TimerWheel<Obj>;
constexpr std::uint64_t kTick = std::uint64_t{1} << Wheel::kTickShift;
constexpr std::uint64_t kT0 = 1'000'000'000'000ull;  // an arbitrary steady-clock origin

std::vector<std::pair<int, std::uint64_t>> expire(Wheel& w, std::uint64_t now) {
  std::vector<std::pair<int, std::uint64_t>> out;
  w.expire(now, [&](Obj* o, std::uint64_t at) { out.emplace_back(o->id, at); });
  return out;
}

TEST(TimerWheel, EntriesFireAtTheirTimeNotBefore) {
  Wheel w;
  Obj a{1}, b{2};
  w.schedule(&a, kT0 + 100);
  w.schedule(&b, kT0 + 5 * kTick + 7);
  EXPECT_EQ(w.next(), kT0 + 100);
  EXPECT_TRUE(expire(w, kT0 + 99).empty());
  EXPECT_EQ(expire(w, kT0 + 100), (std::vector<std::pair<int, std::uint64_t>>{{1, kT0 + 100}}));
  EXPECT_EQ(w.next(), kT0 + 5 * kTick + 7) << "the next entry, exactly";
  EXPECT_TRUE(expire(w, kT0 + 5 * kTick + 6).empty());
  EXPECT_EQ(expire(w, kT0 + 6 * kTick).size(), 1u);
  EXPECT_EQ(w.size(), 0u);
  EXPECT_EQ(w.next(), 0u);
}

TEST(TimerWheel, LaterRevolutionsWaitAndPastTimesFireAtOnce) {
  Wheel w;
  Obj far{1}, near{2}, past{3};
  expire(w, kT0);  // the wheel's position is now kT0
  // Same slot as `near`, one revolution later.
  w.schedule(&far, kT0 + 3 * kTick + Wheel::kSlots * kTick);
  w.schedule(&near, kT0 + 3 * kTick);
  EXPECT_EQ(w.next(), kT0 + 3 * kTick);
  EXPECT_EQ(expire(w, kT0 + 4 * kTick).size(), 1u);
  EXPECT_EQ(w.next(), kT0 + 3 * kTick + Wheel::kSlots * kTick) << "only the far one is left";
  w.schedule(&past, kT0);  // already due: lands in the current slot
  const auto got = expire(w, kT0 + 4 * kTick + 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, 3);
  EXPECT_TRUE(expire(w, kT0 + (Wheel::kSlots + 2) * kTick).empty());
  EXPECT_EQ(expire(w, kT0 + (Wheel::kSlots + 4) * kTick).size(), 1u);
}

TEST(TimerWheel, EraseForgetsAnObject) {
  Wheel w;
  Obj a{1}, b{2};
  w.schedule(&a, kT0 + 10);
  w.schedule(&a, kT0 + 20 * kTick);
  w.schedule(&b, kT0 + 30);
  w.erase(&a);
  EXPECT_EQ(w.size(), 1u);
  EXPECT_EQ(w.next(), kT0 + 30) << "the earliest entry left";
  const auto got = expire(w, kT0 + 100 * kTick);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, 2);
}

TEST(TimerWheel, RandomScheduleMatchesAReferenceModel) {
  // Against a multimap: every entry fires once, never early, and within one expire() call of
  // its time, whatever the spacing of the calls (also gaps longer than a revolution).
  std::mt19937_64 rng(7);
  Wheel w;
  std::vector<Obj> objs(64);
  for (int i = 0; i < 64; ++i) objs[static_cast<std::size_t>(i)].id = i;
  std::multimap<std::uint64_t, int> model;
  std::uint64_t now = kT0;
  for (int step = 0; step < 20000; ++step) {
    const int k = static_cast<int>(rng() % 4);
    for (int i = 0; i < k; ++i) {
      const int id = static_cast<int>(rng() % 64);
      const std::uint64_t span = rng() % 8 == 0 ? 40 * Wheel::kSlots * kTick : 300 * kTick;
      const std::uint64_t at = now + rng() % span;
      w.schedule(&objs[static_cast<std::size_t>(id)], at);
      model.emplace(at, id);
    }
    now += rng() % 16 == 0 ? rng() % (3 * Wheel::kSlots * kTick) : rng() % (2 * kTick);
    auto got = expire(w, now);
    std::vector<std::pair<int, std::uint64_t>> want;
    for (auto it = model.begin(); it != model.end() && it->first <= now;) {
      want.emplace_back(it->second, it->first);
      it = model.erase(it);
    }
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    ASSERT_EQ(got, want) << "at step " << step;
    ASSERT_EQ(w.size(), model.size());
    if (!model.empty()) {
      ASSERT_EQ(w.next(), model.begin()->first) << "next() is the earliest entry, exactly";
    }
  }
}

TEST(TimerWheel, NextIsExactWithManyEntriesOfLaterRevolutions) {
  // 10,000 QPs: every slot holds ACK-timeout entries a few revolutions ahead, and one probe
  // entry of this revolution sits far along; next() finds it, and then the later ones.
  Wheel w;
  expire(w, kT0);
  std::vector<Obj> objs(10000);
  for (std::size_t i = 0; i < objs.size(); ++i)
    w.schedule(&objs[i], kT0 + 4 * Wheel::kSlots * kTick + (i % Wheel::kSlots) * kTick + i);
  Obj probe{-1};
  w.schedule(&probe, kT0 + 900 * kTick + 5);
  EXPECT_EQ(w.next(), kT0 + 900 * kTick + 5);
  EXPECT_EQ(expire(w, kT0 + 900 * kTick + 5).size(), 1u);
  EXPECT_EQ(w.next(), kT0 + 4 * Wheel::kSlots * kTick) << "the earliest of a later revolution";
  // The wheel has moved to slot 900: slots 0..899 hold entries of revolution 4 (from the
  // position's point of view, 3 revolutions on), and they still come in time order.
  EXPECT_EQ(expire(w, kT0 + 4 * Wheel::kSlots * kTick).size(), 1u);
  EXPECT_EQ(w.next(), kT0 + 4 * Wheel::kSlots * kTick + 1024) << "object 1024, same slot";
}

}  // namespace
}  // namespace roce::engine
