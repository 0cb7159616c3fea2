/// @file
/// The threads that run the NFS service's handlers away from the poll loop: a bounded pool. A
/// handler may block on the file system (fsync, fdatasync, a slow disk) for as long as the kernel
/// likes; the poll loop it would otherwise run on also answers ARP, runs the CM and serves every
/// other connection. Calls of the RDMA responder and of the MOUNT listener go to one pool
/// through a bounded queue; each job's completion runs back on the poll loop when it calls
/// drain(), in the order the jobs finished (not the order they came: a job's `done` must not
/// assume the jobs before it are done).
///
/// Threads: submit() and drain() belong to the poll loop's thread; `work` runs on the worker.
/// Beyond `capacity` jobs (queued, running, or finished and not yet drained) submit() refuses:
/// the caller keeps the call in its connection and tries again (RPC-over-RDMA: the client's
/// credits stop it; TCP: the socket's buffers do), so nothing grows without bound.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace roce::nfs {

class CallWorker {
 public:
  static constexpr std::size_t kDefaultCapacity = 64;
  /// `threads` workers (at least one, at most 256).
  explicit CallWorker(std::size_t capacity = kDefaultCapacity, std::size_t threads = 1);
  /// Finishes the jobs running, drops those queued (their `done` never runs), joins.
  ~CallWorker() { stop(); }
  /// The same, now: for an owner whose handlers go before the worker would. submit() fails from
  /// then on.
  void stop();
  CallWorker(const CallWorker&) = delete;
  CallWorker& operator=(const CallWorker&) = delete;

  /// Runs `work` on a worker thread, then `done` on the caller's thread at a later drain().
  /// False (nothing queued) when `capacity` jobs are in flight.
  bool submit(std::function<void()> work, std::function<void()> done);
  /// Runs the `done` of every finished job, in order; returns how many.
  std::size_t drain();
  /// For `work` running on a worker thread: its job's `done` (the call's reply) waits until the
  /// returned function is called (once, from any thread: the NFSv4 client records' writer when
  /// they are on disk), while the worker thread goes on with the next job. Empty when the caller
  /// is not a job's `work` (it then waits itself, if it must). A held job stays in flight
  /// (capacity); stop() drops it (its `done` never runs) and a release after stop() does nothing.
  static std::function<void()> hold_done();
  /// Jobs whose `done` is held now (hold_done) and held in all.
  std::size_t held_now() const;
  std::uint64_t held() const;
  /// Jobs submitted and not drained yet.
  std::size_t in_flight() const { return in_flight_; }
  std::size_t capacity() const { return capacity_; }
  std::size_t threads() const { return threads_.size(); }

 private:
  struct Job {
    std::function<void()> work, done;
  };
  /// A job whose `done` is held: parked by its worker thread, released by hold_done's function
  /// (whichever comes first waits for the other). `gate` outlives the worker: a release after
  /// stop() finds no worker.
  struct Held {
    Job job;
    bool parked = false, released = false;
  };
  struct Gate {
    std::mutex mu;
    CallWorker* w = nullptr;
  };
  void run();
  void release(const std::shared_ptr<Held>& h);

  const std::size_t capacity_;
  std::size_t in_flight_ = 0;  ///< poll loop only
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> loop2worker_jobs_;   ///< under mu_
  std::deque<Job> worker2loop_done_;   ///< under mu_
  std::atomic<bool> any_done_{false};  ///< worker2loop_done_ is not empty (drain without locking)
  bool stop_ = false;                  ///< under mu_
  std::vector<std::thread> threads_;
  std::shared_ptr<Gate> gate_;
  std::size_t held_now_ = 0;  ///< under mu_
  std::uint64_t held_ = 0;    ///< under mu_
};

}  // namespace roce::nfs
