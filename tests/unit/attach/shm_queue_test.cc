// The shared-memory queue rules of the Motr LNet transport HLD (controlplane/attach/
// shm_queue.h): empty and full told apart by the indices alone (N slots hold N - 1), wrap
// around the end, many entries per publication, the wake-up handshake with an eventfd, a
// hostile index, and two processes on one memfd.
#include "controlplane/attach/shm_queue.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>
#include <vector>

namespace roce::attach {
namespace {

struct Entry {
  std::uint64_t seq;
  std::uint32_t check;
  std::uint32_t pad;
};
using Layout = ShmQueueLayout<Entry>;

// A queue in anonymous shared memory (fork keeps it shared).
struct Mem {
  explicit Mem(std::uint32_t n)
      : bytes(Layout::bytes(n)),
        p(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)),
        h(Layout::init(p, n)),
        slots(n) {}
  ~Mem() { ::munmap(p, bytes); }
  std::size_t bytes;
  void* p;
  ShmQueueHeader* h;
  std::uint32_t slots;
};

Entry e(std::uint64_t i) { return {i, static_cast<std::uint32_t>(i * 2654435761u), 0}; }

TEST(ShmQueue, EmptyAndFullAreToldApartByTheIndices) {
  Mem m(Layout::slots_for(4));  // room for exactly 4 pending
  ShmProducer<Entry> prod(m.h, m.slots);
  ShmConsumer<Entry> cons(m.h, m.slots);
  EXPECT_TRUE(cons.empty());
  EXPECT_EQ(prod.room(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(prod.push(e(i)));
  EXPECT_FALSE(prod.push(e(4))) << "N slots hold N - 1 entries";
  EXPECT_EQ(prod.room(), 0u);
  EXPECT_FALSE(cons.empty());
  Entry out;
  ASSERT_TRUE(cons.pop(out));
  EXPECT_EQ(out.seq, 0u);
  EXPECT_EQ(prod.room(), 1u);
  EXPECT_TRUE(prod.push(e(4)));
  Entry all[8];
  EXPECT_EQ(cons.pop_n(all, 8), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(all[i].seq, static_cast<std::uint64_t>(i + 1));
  EXPECT_TRUE(cons.empty());
}

TEST(ShmQueue, WrapsAroundTheEndManyTimes) {
  Mem m(5);
  ShmProducer<Entry> prod(m.h, m.slots);
  ShmConsumer<Entry> cons(m.h, m.slots);
  std::uint64_t next_in = 0, next_out = 0;
  for (int round = 0; round < 1000; ++round) {
    const int k = 1 + round % 4;
    for (int i = 0; i < k; ++i) ASSERT_TRUE(prod.push(e(next_in++)));
    Entry out[4];
    const std::size_t n = cons.pop_n(out, 4);
    ASSERT_EQ(n, static_cast<std::size_t>(k));
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(out[i].seq, next_out);
      EXPECT_EQ(out[i].check, e(next_out).check);
      ++next_out;
    }
  }
  EXPECT_LT(m.h->head.load(), m.slots);
  EXPECT_LT(m.h->tail.load(), m.slots);
}

TEST(ShmQueue, StagedEntriesAreInvisibleUntilOnePublish) {
  Mem m(64);
  ShmProducer<Entry> prod(m.h, m.slots);
  ShmConsumer<Entry> cons(m.h, m.slots);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(prod.stage(e(i)));
  EXPECT_TRUE(cons.empty()) << "nothing is visible before publish()";
  prod.publish();
  Entry out[64];
  EXPECT_EQ(cons.pop_n(out, 64), 40u) << "one publication carries the whole batch";
  std::vector<Entry> batch;
  for (int i = 0; i < 100; ++i) batch.push_back(e(i));
  EXPECT_EQ(prod.push_n(batch.data(), batch.size()), 63u) << "a batch stops at full";
}

TEST(ShmQueue, PeekLeavesEntriesUntilConsumed) {
  Mem m(8);
  ShmProducer<Entry> prod(m.h, m.slots);
  ShmConsumer<Entry> cons(m.h, m.slots);
  for (int i = 0; i < 5; ++i) prod.push(e(i));
  Entry out[8];
  EXPECT_EQ(cons.peek_n(out, 8), 5u);
  cons.consume(2);  // the consumer could take only two (an engine queue was full)
  EXPECT_EQ(cons.peek_n(out, 8), 3u);
  EXPECT_EQ(out[0].seq, 2u);
  EXPECT_EQ(prod.room(), 7u - 3u);
}

TEST(ShmQueue, AnIndexOutOfRangeBreaksTheQueueInsteadOfOverrunning) {
  Mem m(8);
  ShmProducer<Entry> prod(m.h, m.slots);
  ShmConsumer<Entry> cons(m.h, m.slots);
  prod.push(e(1));
  m.h->tail.store(1000);  // a hostile producer
  Entry out[8];
  EXPECT_EQ(cons.pop_n(out, 8), 0u);
  EXPECT_TRUE(cons.broken());
  m.h->head.store(77);  // a hostile consumer
  EXPECT_EQ(prod.room(), 0u);
  for (int i = 0; i < 10; ++i) prod.push(e(i));
  EXPECT_TRUE(prod.broken());
}

TEST(ShmQueue, OpenRefusesForeignOrShortMemory) {
  Mem m(8);
  EXPECT_NE(Layout::open(m.p, m.bytes), nullptr);
  EXPECT_EQ(Layout::open(m.p, m.bytes - 1), nullptr);
  EXPECT_EQ(ShmQueueLayout<std::uint64_t>::open(m.p, m.bytes), nullptr) << "entry size differs";
  m.h->magic = 0;
  EXPECT_EQ(Layout::open(m.p, m.bytes), nullptr);
}

TEST(ShmQueue, ArmReturnsAtOnceWhenEntriesArePending) {
  Mem m(8);
  ShmProducer<Entry> prod(m.h, m.slots);
  ShmConsumer<Entry> cons(m.h, m.slots);
  prod.push(e(1));
  EXPECT_FALSE(cons.arm()) << "non-empty: the consumer must not sleep";
  EXPECT_FALSE(prod.should_wake()) << "and the producer need not signal";
  Entry out;
  cons.pop(out);
  EXPECT_TRUE(cons.arm());
  prod.push(e(2));
  EXPECT_TRUE(prod.should_wake());
  EXPECT_FALSE(prod.should_wake()) << "one signal per arming";
}

// The consumer sleeps on an eventfd only after arming and finding the queue empty; the
// producer signals only when armed. Over many rounds no wake-up is lost (the test would hang,
// bounded by the poll timeout, and count a miss).
TEST(ShmQueue, NoWakeUpIsLostBetweenArmAndSleep) {
  Mem m(Layout::slots_for(16));
  const int efd = ::eventfd(0, EFD_NONBLOCK);
  ASSERT_GE(efd, 0);
  constexpr int kItems = 20000;
  std::thread producer([&] {
    ShmProducer<Entry> prod(m.h, m.slots);
    for (int i = 0; i < kItems;) {
      if (!prod.push(e(static_cast<std::uint64_t>(i)))) {
        std::this_thread::yield();
        continue;
      }
      ++i;
      if (prod.should_wake()) {
        const std::uint64_t one = 1;
        ASSERT_EQ(::write(efd, &one, sizeof one), 8);
      }
    }
  });
  ShmConsumer<Entry> cons(m.h, m.slots);
  int got = 0, sleeps = 0, missed = 0;
  while (got < kItems) {
    Entry out[16];
    const std::size_t n = cons.pop_n(out, 16);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i].seq, static_cast<std::uint64_t>(got++));
    if (n != 0 || !cons.arm()) continue;
    pollfd p{efd, POLLIN, 0};
    ++sleeps;
    if (::poll(&p, 1, 2000) == 0) ++missed;
    std::uint64_t v;
    [[maybe_unused]] const ssize_t r = ::read(efd, &v, sizeof v);
  }
  producer.join();
  ::close(efd);
  EXPECT_EQ(missed, 0) << "a sleeping consumer was not woken";
  EXPECT_GT(sleeps, 0);
}

// Two processes, one memfd: a child produces, the parent consumes and checks every entry.
TEST(ShmQueue, TwoProcessesThroughAMemfd) {
  const std::uint32_t slots = 33;
  const std::size_t bytes = Layout::bytes(slots);
  const int fd = ::memfd_create("shm-queue-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
  void* mine = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(mine, MAP_FAILED);
  ShmQueueHeader* h = Layout::init(mine, slots);
  constexpr std::uint64_t kItems = 100000;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child maps the memfd again, at an address of its own: only indices are shared.
    void* theirs = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ShmQueueHeader* ch = Layout::open(theirs, bytes);
    if (ch == nullptr) _exit(2);
    ShmProducer<Entry> prod(ch, slots);
    for (std::uint64_t i = 0; i < kItems;)
      if (prod.push(e(i)))
        ++i;
      else
        sched_yield();
    _exit(0);
  }
  ShmConsumer<Entry> cons(h, slots);
  std::uint64_t got = 0;
  bool ok = true, child_done = false;
  int status = 0;
  while (got < kItems && ok) {
    Entry out[32];
    const std::size_t n = cons.pop_n(out, 32);
    for (std::size_t i = 0; i < n; ++i, ++got)
      ok = ok && out[i].seq == got && out[i].check == e(got).check;
    if (n == 0 && !child_done && ::waitpid(pid, &status, WNOHANG) == pid) child_done = true;
    if (n == 0 && child_done && cons.empty()) break;  // the child stopped early
    if (n == 0) sched_yield();
  }
  if (!child_done) ::waitpid(pid, &status, 0);
  EXPECT_TRUE(ok);
  EXPECT_EQ(got, kItems);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::munmap(mine, bytes);
  ::close(fd);
}

}  // namespace
}  // namespace roce::attach
