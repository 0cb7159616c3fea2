// CommandQueue (port/command_queue.h): the commands of several producers run once each, in
// order per producer; a full queue refuses; nothing allocates; failures leave it consistent.
#include "dataplane/port/command_queue.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace roce::port {
namespace {

// The size check is a compile error at push; the predicate behind it, checked here.
struct Big {
  std::array<char, 65> b;
  void operator()() {}
};
static_assert(FitsCommandSlot<decltype([p = std::unique_ptr<int>()] {}), 64>);  // move-only
static_assert(!FitsCommandSlot<Big, 64>);
static_assert(FitsCommandSlot<Big, 128>);

TEST(CommandQueue, ManyProducersInOrderPerProducer) {
  constexpr unsigned kProducers = 4, kEach = 50000;
  CommandQueue<> q(256);  // small: the producers often find it full
  std::vector<std::uint32_t> next(kProducers, 0);
  std::uint64_t ran = 0, out_of_order = 0;
  std::vector<std::thread> producers;
  for (unsigned p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (std::uint32_t i = 0; i < kEach; ++i)
        while (!q.try_push([&, p, i] {
          if (next[p] != i) ++out_of_order;
          next[p] = i + 1;
          ++ran;
        }))
          std::this_thread::yield();
    });
  while (ran < kProducers * kEach)
    if (!q.run_one()) std::this_thread::yield();
  for (auto& t : producers) t.join();
  EXPECT_FALSE(q.run_one());
  EXPECT_EQ(out_of_order, 0u);
  for (unsigned p = 0; p < kProducers; ++p) EXPECT_EQ(next[p], kEach);
}

TEST(CommandQueue, FullRefusesAndKeepsTheCommand) {
  CommandQueue<> q(4);
  EXPECT_EQ(q.capacity(), 4u);
  int ran = 0;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(q.try_push([&] { ++ran; }));
  auto owned = std::make_unique<int>(7);
  auto cmd = [&ran, p = std::move(owned)] { ran += *p; };
  EXPECT_FALSE(q.try_push(std::move(cmd)));  // refused: not moved from
  EXPECT_TRUE(q.run_one());
  EXPECT_TRUE(q.try_push(std::move(cmd)));
  while (q.run_one()) {
  }
  EXPECT_EQ(ran, 4 + 7);
}

// Copying a command that throws while it is built: the claimed slot is published empty, and
// the commands behind it still run.
TEST(CommandQueue, ThrowingCopyLeavesItConsistent) {
  struct Boom {
    int* ran;
    Boom(int* r) : ran(r) {}
    Boom(const Boom&) { throw std::runtime_error("copy"); }
    void operator()() { ++*ran; }
  };
  CommandQueue<> q(4);
  int ran = 0;
  const Boom b(&ran);
  EXPECT_THROW(q.try_push(b), std::runtime_error);
  EXPECT_TRUE(q.try_push([&] { ran += 10; }));
  EXPECT_TRUE(q.run_one());  // the empty slot
  EXPECT_TRUE(q.run_one());
  EXPECT_FALSE(q.run_one());
  EXPECT_EQ(ran, 10);
}

// A command that throws is destroyed and its slot handed back; the exception reaches the
// consumer.
TEST(CommandQueue, ThrowingCommandIsReleased) {
  CommandQueue<> q(2);
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  EXPECT_TRUE(q.try_push([a = std::move(alive)] { throw std::runtime_error("run"); }));
  EXPECT_THROW(q.run_one(), std::runtime_error);
  EXPECT_TRUE(watch.expired());
  for (int lap = 0; lap < 5; ++lap) {
    EXPECT_TRUE(q.try_push([] {}));
    EXPECT_TRUE(q.try_push([] {}));
    EXPECT_TRUE(q.run_one());
    EXPECT_TRUE(q.run_one());
  }
}

// A command that runs the queue itself (a nested poll of its own loop) runs the next command,
// not itself again; every slot comes back.
TEST(CommandQueue, NestedRunTakesTheNext) {
  CommandQueue<> q(4);
  std::vector<int> order;
  EXPECT_TRUE(q.try_push([&] {
    order.push_back(1);
    EXPECT_TRUE(q.run_one());
    order.push_back(3);
  }));
  EXPECT_TRUE(q.try_push([&] { order.push_back(2); }));
  EXPECT_TRUE(q.run_one());
  EXPECT_FALSE(q.run_one());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(q.try_push([] {}));
  EXPECT_FALSE(q.try_push([] {}));
}

// Commands left in the queue are destroyed with it, unrun.
TEST(CommandQueue, DestroysWhatIsLeft) {
  auto alive = std::make_shared<int>(0);
  {
    CommandQueue<> q(8);
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(q.try_push([a = alive] {}));
    EXPECT_TRUE(q.run_one());
    EXPECT_EQ(alive.use_count(), 5);
  }
  EXPECT_EQ(alive.use_count(), 1);
}

}  // namespace
}  // namespace roce::port
