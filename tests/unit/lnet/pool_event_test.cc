// Conformance with the seed's buffer-pool rules and event-delivery rules, on a fake Context whose
// CQ the test fills (no network): a completion for a posted receive is a message arriving.
#include <gtest/gtest.h>
#include <poll.h>
#include <roce/lnet.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <deque>
#include <thread>

#include "tests/unit/lnet/fake_context.h"
#include "tests/unit/lnet/test_net.h"

namespace roce::lnet {
namespace {

using namespace std::chrono_literals;

template <class F>
bool eventually(F f) {
  for (int i = 0; i < 500; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return false;
}

class LnetTm : public ::testing::Test {
 protected:
  FakeContext ctx;
  Domain dom{ctx, test::loopback_options(0)};
};

// ---- buffer pool: the coloured get ([r.m0.net.network-buffer-pool]) ----------------------------

TEST_F(LnetTm, ColouredGetPrefersThisTmsMostRecentThenUnaffiliatedThenLeastRecent) {
  BufferPool pool(dom, 4, 1, 256);
  ASSERT_EQ(pool.size(), 4u);
  Tm t1(dom), t2(dom);
  t1.colour_set(1);
  t2.colour_set(2);
  NetBuffer* a = pool.get(1);
  NetBuffer* b = pool.get(1);
  NetBuffer* c = pool.get(2);
  NetBuffer* d = pool.get(2);
  EXPECT_EQ(pool.get(1), nullptr);  // non-blocking: empty is null
  a->tm = &t1, b->tm = &t1, c->tm = &t2, d->tm = &t2;
  pool.put(a);  // put order: a (oldest), c, b, d (most recent)
  pool.put(c);
  pool.put(b);
  pool.put(d);
  EXPECT_EQ(pool.get(1), b);  // the most recently used of colour 1
  EXPECT_EQ(pool.get(1), a);
  EXPECT_EQ(pool.get(7), c);  // no colour 7, none unaffiliated: the least recently used
  EXPECT_EQ(pool.get(7), d);
  pool.put(a);
  pool.put(b);
  pool.put(c);
  pool.put(d);
}

TEST_F(LnetTm, ColouredGetTakesAnUnaffiliatedBufferBeforeAnotherTmsBuffer) {
  BufferPool pool(dom, 2, 1, 256);
  Tm t2(dom);
  t2.colour_set(2);
  NetBuffer* x = pool.get(2);
  x->tm = &t2;
  pool.put(x);  // coloured 2, most recent; the other one has no colour yet
  NetBuffer* y = pool.get(1);
  EXPECT_NE(y, x);
  pool.put(y);
}

TEST_F(LnetTm, NotEmptyCallbackOnlyWhenAnEmptyPoolGetsABuffer) {
  BufferPool pool(dom, 2, 1, 256);
  int calls = 0;
  pool.set_not_empty([&](BufferPool&) { ++calls; });
  NetBuffer* a = pool.get(0);
  pool.put(a);
  EXPECT_EQ(calls, 0);  // was not empty
  a = pool.get(0);
  NetBuffer* b = pool.get(0);
  pool.put(a);
  EXPECT_EQ(calls, 1);  // empty -> not empty
  pool.put(b);
  EXPECT_EQ(calls, 1);
  pool.put(b);  // a double put changes nothing
  EXPECT_EQ(pool.free_count(), 2u);
}

// ---- automatic provisioning ([r.m0.net.xprt.support-for-auto-provisioned-receive-queue]) ------

TEST_F(LnetTm, StartProvisionsToTheMinimumAndReprovisionsBeforeTheCallback) {
  BufferPool pool(dom, 4, 1, 4096);
  Tm tm(dom);
  std::atomic<int> events{0};
  std::size_t queue_in_cb = 0;
  bool queued_in_cb = true;
  ASSERT_EQ(tm.pool_attach(pool,
                           [&](const BufferEvent& ev) {
                             queue_in_cb = tm.queue_length(QueueType::kMsgRecv);
                             queued_in_cb = ev.buf->flags & kBufQueued;
                             pool.put(ev.buf);
                             ++events;
                           }),
            0);  // default minimum length 2
  ASSERT_EQ(tm.start("192.0.2.1@roce:0:9:*"), 0);
  EXPECT_EQ(tm.ep().tmid, kMaxTmid);  // from the top down
  EXPECT_EQ(tm.queue_length(QueueType::kMsgRecv), 2u);
  EXPECT_EQ(pool.free_count(), 2u);
  EXPECT_EQ(tm.recv_pool_deficit(), 0u);
  ctx.deliver(ctx.oldest_recv(), 100, 0, false);
  ASSERT_TRUE(eventually([&] { return events == 1; }));
  EXPECT_EQ(queue_in_cb, 2u);  // back at the minimum before the application saw the event
  EXPECT_FALSE(queued_in_cb);
  tm.stop();
  EXPECT_EQ(pool.free_count(), 4u);  // put back on stop
}

TEST_F(LnetTm, MultiMessageBufferStaysQueuedUntilTheLastMessage) {
  BufferPool pool(dom, 2, 1, 4096);
  pool.set_receive_limits(1024, 3);
  Tm tm(dom);
  std::vector<std::pair<std::uint64_t, bool>> seen;  // offset, QUEUED
  std::mutex m;
  tm.pool_attach(
      pool,
      [&](const BufferEvent& ev) {
        std::lock_guard<std::mutex> g(m);
        seen.emplace_back(ev.offset, (ev.buf->flags & kBufQueued) != 0);
        if (!(ev.buf->flags & kBufQueued)) pool.put(ev.buf);  // only once it is dequeued
      },
      1);
  ASSERT_EQ(tm.start("192.0.2.1@roce:0:9:3"), 0);
  const std::uint64_t w = ctx.oldest_recv();
  ctx.deliver(w, 1000, 0, true);
  ctx.deliver(w, 1000, 1000, true);
  ctx.deliver(w, 1000, 2000, false);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> g(m);
    return seen.size() == 3;
  }));
  EXPECT_EQ(seen[0], std::make_pair(std::uint64_t{0}, true));
  EXPECT_EQ(seen[1], std::make_pair(std::uint64_t{1000}, true));
  EXPECT_EQ(seen[2], std::make_pair(std::uint64_t{2000}, false));
  EXPECT_EQ(tm.stats().msgs_received, 3u);
  tm.stop();
}

TEST_F(LnetTm, DeficitIsRecordedAndTheNotEmptyCallbackRefillsIt) {
  BufferPool pool(dom, 2, 1, 4096);
  Tm tm(dom);
  std::vector<NetBuffer*> held;
  std::mutex m;
  tm.pool_attach(pool, [&](const BufferEvent& ev) {
    std::lock_guard<std::mutex> g(m);
    held.push_back(ev.buf);  // the application keeps them for now
  });
  ASSERT_EQ(tm.start("192.0.2.1@roce:0:9:4"), 0);
  ctx.deliver(ctx.oldest_recv(), 10, 0, false);
  ctx.deliver(ctx.oldest_recv(), 10, 0, false);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> g(m);
    return held.size() == 2;
  }));
  EXPECT_EQ(tm.queue_length(QueueType::kMsgRecv), 0u);
  EXPECT_EQ(tm.recv_pool_deficit(), 2u);  // the pool was empty
  pool.put(held[0]);                      // not-empty -> the domain's thread provisions
  ASSERT_TRUE(eventually([&] { return tm.queue_length(QueueType::kMsgRecv) == 1; }));
  EXPECT_EQ(tm.recv_pool_deficit(), 1u);
  pool.put(held[1]);
  ASSERT_TRUE(eventually([&] { return tm.recv_pool_deficit() == 0; }));
  // A longer minimum with an empty pool: the shortfall is the deficit again.
  ASSERT_EQ(tm.pool_length_set(3), 0);
  EXPECT_EQ(tm.recv_pool_deficit(), 1u);
  EXPECT_EQ(tm.queue_length(QueueType::kMsgRecv), 2u);
  tm.stop();
  EXPECT_EQ(tm.recv_pool_deficit(), 0u);  // zero when not operable
  EXPECT_EQ(pool.free_count(), 2u);
}

TEST_F(LnetTm, PoolBuffersAreBackBeforeTheStateChangeIsTold) {
  BufferPool pool(dom, 3, 1, 4096);
  Tm tm(dom);
  tm.pool_attach(
      pool, [](const BufferEvent&) {}, 3);
  std::uint32_t free_at_stop = 99;
  tm.on_state([&](TmState s) {
    if (s == TmState::kStopped) free_at_stop = pool.free_count();
  });
  ASSERT_EQ(tm.start("192.0.2.1@roce:0:9:5"), 0);
  EXPECT_EQ(pool.free_count(), 0u);
  tm.stop();
  EXPECT_EQ(free_at_stop, 3u);
}

// ---- event delivery ([r.m0.net.synchronous-buffer-event-delivery]) -----------------------------

TEST_F(LnetTm, SynchronousDeliveryWaitsForDeliverAllOnTheCallersThread) {
  BufferPool pool(dom, 4, 1, 4096);
  Tm tm(dom);
  std::thread::id cb_thread;
  int events = 0;
  ASSERT_EQ(tm.deliver_synchronously(), 0);
  tm.pool_attach(pool, [&](const BufferEvent& ev) {
    cb_thread = std::this_thread::get_id();
    ++events;
    pool.put(ev.buf);
  });
  ASSERT_EQ(tm.start("192.0.2.1@roce:0:9:6"), 0);
  EXPECT_EQ(tm.deliver_synchronously(), EINVAL);  // only before start
  EXPECT_FALSE(tm.pending());
  tm.deliver_all();  // not an error with nothing pending
  const int efd = eventfd(0, EFD_CLOEXEC);
  tm.notify(efd);
  ctx.deliver(ctx.oldest_recv(), 10, 0, false);
  pollfd p{efd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 2000), 1);  // the background thread signalled the channel
  EXPECT_TRUE(tm.pending());
  EXPECT_EQ(events, 0);  // nothing delivered until asked
  tm.deliver_all();
  EXPECT_EQ(events, 1);
  EXPECT_EQ(cb_thread, std::this_thread::get_id());
  EXPECT_FALSE(tm.pending());
  // One signal per notify(): a second event without a new notify() does not signal.
  std::uint64_t v;
  ASSERT_EQ(read(efd, &v, sizeof v), 8);
  ctx.deliver(ctx.oldest_recv(), 10, 0, false);
  ASSERT_TRUE(eventually([&] { return tm.pending(); }));
  EXPECT_EQ(poll(&p, 1, 50), 0);
  tm.notify(efd);  // pending already: signalled at once
  EXPECT_EQ(poll(&p, 1, 0), 1);
  tm.deliver_all();
  EXPECT_EQ(events, 2);
  close(efd);
  tm.stop();
}

TEST_F(LnetTm, AsynchronousCallbacksRunOnTheConfinedCpu) {
  BufferPool pool(dom, 2, 1, 4096);
  Tm tm(dom);
  std::atomic<int> cpu{-1};
  ASSERT_EQ(tm.confine({0}), 0);
  tm.pool_attach(pool, [&](const BufferEvent& ev) {
    cpu = sched_getcpu();
    pool.put(ev.buf);
  });
  ASSERT_EQ(tm.start("192.0.2.1@roce:0:9:7"), 0);
  EXPECT_EQ(tm.confine({0}), EINVAL);  // only before start
  ctx.deliver(ctx.oldest_recv(), 10, 0, false);
  ASSERT_TRUE(eventually([&] { return cpu.load() != -1; }));
  EXPECT_EQ(cpu.load(), 0);
  tm.stop();
}

// ---- timeouts and cancellation ----------------------------------------------------------------

TEST_F(LnetTm, QueuedBuffersTimeOutOrAreCancelledWithTheirEvents) {
  Tm tm(dom);
  ASSERT_EQ(tm.start("192.0.2.1@roce:0:9:8"), 0);
  NetBuffer* a = dom.alloc_buffer(2, 1024);
  NetBuffer* b = dom.alloc_buffer(1, 1024);
  std::atomic<int> sa{1}, sb{1};
  a->cb = [&](const BufferEvent& ev) { sa = ev.status; };
  b->cb = [&](const BufferEvent& ev) { sb = ev.status; };
  a->deadline = std::chrono::steady_clock::now() + 30ms;
  ASSERT_EQ(tm.add(*a, QueueType::kPassiveBulkSend), 0);
  EXPECT_FALSE(a->desc.empty());
  EXPECT_EQ(tm.add(*a, QueueType::kPassiveBulkSend), EINVAL);  // already queued
  ASSERT_EQ(tm.add(*b, QueueType::kPassiveBulkRecv), 0);
  EXPECT_EQ(tm.queue_length(QueueType::kPassiveBulkRecv), 1u);
  ASSERT_EQ(tm.del(*b), 0);
  // Delivered by the Tm's event thread (asynchronous mode), not on this thread.
  ASSERT_TRUE(eventually([&] { return sb.load() != 1; }));
  EXPECT_EQ(sb.load(), -ECANCELED);
  EXPECT_FALSE(b->flags & kBufQueued);
  EXPECT_EQ(tm.queue_length(QueueType::kPassiveBulkRecv), 0u);
  EXPECT_EQ(tm.del(*b), EINVAL);  // no longer queued
  ASSERT_TRUE(eventually([&] { return sa.load() != 1; }));
  EXPECT_EQ(sa.load(), -ETIMEDOUT);
  EXPECT_FALSE(a->flags & kBufQueued);
  // A descriptor of the wrong kind is refused: an active receive needs a passive send's.
  b->desc = a->desc;
  EXPECT_EQ(tm.add(*b, QueueType::kActiveBulkSend), EINVAL);
  b->desc = {1, 2, 3};
  EXPECT_EQ(tm.add(*b, QueueType::kActiveBulkRecv), EINVAL);
  // Still queued at stop: -ECANCELED.
  sb = 1;
  ASSERT_EQ(tm.add(*b, QueueType::kPassiveBulkRecv), 0);
  tm.stop();
  EXPECT_EQ(sb.load(), -ECANCELED);
  EXPECT_EQ(tm.add(*b, QueueType::kPassiveBulkRecv), ENOTCONN);
  dom.free_buffer(a);
  dom.free_buffer(b);
}

TEST_F(LnetTm, StartChecksTheAddress) {
  Tm t1(dom), t2(dom), t3(dom);
  EXPECT_EQ(t1.start("192.0.2.9@roce:0:9:1"), EINVAL);  // not this domain's NID
  EXPECT_EQ(t1.start("192.0.2.1@roce:1:9:1"), EINVAL);  // not this domain's PID
  EXPECT_EQ(t1.start("192.0.2.1@roce:0:9"), EINVAL);    // malformed
  ASSERT_EQ(t1.start("192.0.2.1@roce:0:10:*"), 0);
  ASSERT_EQ(t2.start("192.0.2.1@roce:0:10:*"), 0);
  EXPECT_EQ(*t1.ep().tmid, kMaxTmid);
  EXPECT_EQ(*t2.ep().tmid, kMaxTmid - 1);          // the next one down
  EXPECT_EQ(t3.start(t1.ep().str()), EADDRINUSE);  // in use on this host
}

}  // namespace
}  // namespace roce::lnet
