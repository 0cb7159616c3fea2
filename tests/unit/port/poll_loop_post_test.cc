// PollLoop::post: commands from other threads run on the loop, in order per producer, and
// posting one allocates nothing (the command queue stores each callable in its slot).
#include <gtest/gtest.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_ring.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/engine/engine.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/poll_loop.h"

// Every operator new of the process is counted while `g_counting` is set.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<std::uint64_t> g_allocs{0};
void* counted_alloc(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace
void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace roce::port {
namespace {

const wire::MacAddr kMac{{0x02, 0, 0, 0, 0x28, 1}};
const wire::Ipv4Addr kIp{0xC000021C};  // 192.0.2.28

// One EAL, one net_ring port, one engine and its poll loop for the whole test binary.
class PostTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    eal_init({"--no-huge", "--no-shconf", "-m", "128", "--no-pci",
              "--file-prefix=looppost" + std::to_string(getpid()), "--log-level=*:error", "-l",
              "0"});
    rte_ring* rx = rte_ring_create("lp_rx", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    rte_ring* tx = rte_ring_create("lp_tx", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    ASSERT_TRUE(rx && tx);
    const int id = rte_eth_from_rings("lp", &rx, 1, &tx, 1, 0);
    char dev[RTE_ETH_NAME_MAX_LEN];
    ASSERT_TRUE(id >= 0 && rte_eth_dev_get_name_by_port(static_cast<std::uint16_t>(id), dev) == 0);
    engine::EngineConfig ec;
    ec.mac = kMac;
    ec.ipv4 = kIp;
    ec.max_qps = 16;
    eng_ = new engine::Engine(ec);
    PortSpec ps;
    ps.device = dev;
    ps.mac = kMac;
    ps.mbufs = 1024;
    port_ = new DpdkPort(ps);
    loop_ = new PollLoop(*port_, *eng_);
  }
  static void TearDownTestSuite() {
    delete loop_;
    delete port_;
    delete eng_;
  }
  static engine::Engine* eng_;
  static DpdkPort* port_;
  static PollLoop* loop_;
};
engine::Engine* PostTest::eng_ = nullptr;
DpdkPort* PostTest::port_ = nullptr;
PollLoop* PostTest::loop_ = nullptr;

// Four threads post 20000 commands each (retrying while the queue is full) while this thread
// polls: every command runs once, and each producer's run in the order it posted them.
TEST_F(PostTest, ManyProducersInOrderPerProducer) {
  constexpr unsigned kProducers = 4, kEach = 20000;
  std::vector<std::uint32_t> next(kProducers, 0);  // touched on the loop's thread only
  std::uint64_t ran = 0, out_of_order = 0;
  std::atomic<unsigned> started{0};
  std::vector<std::thread> producers;
  for (unsigned p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      started.fetch_add(1);
      for (std::uint32_t i = 0; i < kEach; ++i)
        while (!loop_->post([&, p, i] {
          if (next[p] != i) ++out_of_order;
          next[p] = i + 1;
          ++ran;
        }))
          std::this_thread::yield();
    });
  const bool all = poll_until(
      *loop_, [&] { return ran == kProducers * kEach; }, 60);
  for (auto& t : producers) t.join();
  EXPECT_TRUE(all) << ran << " of " << kProducers * kEach << " ran";
  EXPECT_EQ(out_of_order, 0u);
  for (unsigned p = 0; p < kProducers; ++p) EXPECT_EQ(next[p], kEach) << "producer " << p;
}

// A full queue refuses a command (false) without running or losing the ones it holds.
TEST_F(PostTest, FullQueueRefuses) {
  unsigned ran = 0;
  unsigned taken = 0;
  while (loop_->post([&] { ++ran; })) ++taken;
  EXPECT_GE(taken, 512u);
  EXPECT_EQ(ran, 0u);
  poll_until(
      *loop_, [&] { return ran == taken; }, 10);
  EXPECT_EQ(ran, taken);
  EXPECT_TRUE(loop_->post([&] { ++ran; }));
  poll_until(
      *loop_, [&] { return ran == taken + 1; }, 10);
}

// A command that throws does not end the loop, and the ones behind it still run.
TEST_F(PostTest, ThrowingCommandIsContained) {
  int ran = 0;
  ASSERT_TRUE(loop_->post([] { throw std::runtime_error("test: a failing command"); }));
  ASSERT_TRUE(loop_->post([&] { ++ran; }));
  EXPECT_TRUE(poll_until(
      *loop_, [&] { return ran == 1; }, 10));
}

// Heap allocations of posting and running a command that carries 48 bytes (a typical
// capture: a few pointers and a shared_ptr), counted with the operator new above.
TEST_F(PostTest, AllocationsPerCommand) {
  constexpr unsigned kN = 10000;
  std::uint64_t sum = 0;
  for (int i = 0; i < 100; ++i) loop_->poll_once();  // the loop's own first-time allocations
  g_allocs = 0;
  g_counting = true;
  for (unsigned i = 0; i < kN; ++i) {
    const std::array<std::uint64_t, 6> payload{i, 1, 2, 3, 4, 5};
    while (!loop_->post([&sum, payload] { sum += payload[0]; })) loop_->poll_once();
    if (i % 256 == 255) loop_->poll_once();
  }
  poll_until(
      *loop_, [&] { return sum == std::uint64_t{kN} * (kN - 1) / 2; }, 10);
  g_counting = false;
  const std::uint64_t allocs = g_allocs.load();
  std::printf("post+run of %u commands (48-byte capture): %llu heap allocations (%.2f each)\n", kN,
              static_cast<unsigned long long>(allocs), double(allocs) / kN);
  EXPECT_EQ(sum, std::uint64_t{kN} * (kN - 1) / 2);
  EXPECT_EQ(allocs, 0u);
}

}  // namespace
}  // namespace roce::port
