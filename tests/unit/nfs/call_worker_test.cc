// The NFS service's worker pool (apps/nfs/call_worker.h): a job whose reply must wait (the
// NFSv4 client records on disk before RECLAIM_COMPLETE's answer) holds its `done`, not its
// worker thread; released before or after its work ends, or after the pool stopped.
#include "apps/nfs/call_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

namespace roce::nfs {
namespace {

/// Drains `w` until `pred` holds (at most 5 s).
template <class P>
bool drain_until(CallWorker& w, P pred) {
  for (int i = 0; i < 5000 && !pred(); ++i) {
    w.drain();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

TEST(CallWorker, HeldDoneWaitsForItsReleaseNotTheThread) {
  CallWorker w(8, 1);
  std::function<void()> release;
  std::mutex mu;
  std::atomic<bool> held_done{false}, other_done{false};
  ASSERT_TRUE(w.submit(
      [&] {
        std::lock_guard g(mu);
        release = CallWorker::hold_done();
      },
      [&] { held_done = true; }));
  // The one thread runs the next job while the first one's done is held.
  ASSERT_TRUE(w.submit([] {}, [&] { other_done = true; }));
  ASSERT_TRUE(drain_until(w, [&] { return other_done.load(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  w.drain();
  EXPECT_FALSE(held_done);
  EXPECT_EQ(w.held_now(), 1u);
  EXPECT_EQ(w.in_flight(), 1u);  // still counts against the capacity
  {
    std::lock_guard g(mu);
    ASSERT_TRUE(release);
    std::thread([r = release] { r(); }).join();  // released from another thread
    release();                                   // a second call does nothing
  }
  ASSERT_TRUE(drain_until(w, [&] { return held_done.load(); }));
  EXPECT_EQ(w.held_now(), 0u);
  EXPECT_EQ(w.held(), 1u);
  EXPECT_EQ(w.in_flight(), 0u);
}

TEST(CallWorker, ReleasedBeforeItsWorkEndsOrAfterTheStop) {
  EXPECT_FALSE(CallWorker::hold_done()) << "not on a worker: nothing to hold";
  std::function<void()> late;
  {
    CallWorker w(8, 2);
    std::atomic<bool> done{false};
    ASSERT_TRUE(w.submit(
        [&] {
          auto r = CallWorker::hold_done();
          r();  // released at once (the records were on disk already)
        },
        [&] { done = true; }));
    ASSERT_TRUE(drain_until(w, [&] { return done.load(); }));
    EXPECT_EQ(w.held_now(), 0u);
    std::atomic<bool> never{false}, taken{false};
    ASSERT_TRUE(w.submit(
        [&] {
          late = CallWorker::hold_done();
          taken = true;
        },
        [&] { never = true; }));
    for (int i = 0; i < 5000 && !taken; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    w.stop();
    late();  // after stop: nothing runs, nothing crashes
    w.drain();
    EXPECT_FALSE(never);
  }
  late();  // after the pool is gone too
}

}  // namespace
}  // namespace roce::nfs
