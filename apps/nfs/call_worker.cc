/// @file
/// The NFS service's handler threads (call_worker.h).
#include "apps/nfs/call_worker.h"

#include <algorithm>
#include <utility>

namespace roce::nfs {

namespace {
/// The worker and the held job of the `work` running on this thread (run() sets them).
struct Current {
  CallWorker* worker = nullptr;
  std::shared_ptr<void> held;  ///< CallWorker::Held, made by hold_done()
};
thread_local Current t_current;
}  // namespace

CallWorker::CallWorker(std::size_t capacity, std::size_t threads)
    : capacity_(std::max<std::size_t>(capacity, 1)), gate_(std::make_shared<Gate>()) {
  gate_->w = this;
  threads = std::clamp<std::size_t>(threads, 1, 256);
  for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

void CallWorker::stop() {
  {
    std::lock_guard g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  std::lock_guard g(gate_->mu);  // held jobs are never released into a worker that went
  gate_->w = nullptr;
}

std::function<void()> CallWorker::hold_done() {
  if (!t_current.worker) return {};
  auto h = std::make_shared<Held>();
  t_current.held = h;
  return [gate = t_current.worker->gate_, h] {
    std::lock_guard g(gate->mu);
    if (gate->w) gate->w->release(h);
  };
}

void CallWorker::release(const std::shared_ptr<Held>& h) {
  {
    std::lock_guard g(mu_);
    if (h->released) return;
    h->released = true;
    if (!h->parked) return;  // its worker thread pushes it on when it parks it
    --held_now_;
    worker2loop_done_.push_back(std::move(h->job));
    any_done_.store(true, std::memory_order_release);
  }
}

std::size_t CallWorker::held_now() const {
  std::lock_guard g(mu_);
  return held_now_;
}

std::uint64_t CallWorker::held() const {
  std::lock_guard g(mu_);
  return held_;
}

bool CallWorker::submit(std::function<void()> work, std::function<void()> done) {
  if (in_flight_ >= capacity_) return false;
  {
    std::lock_guard g(mu_);
    if (stop_) return false;
    loop2worker_jobs_.push_back({std::move(work), std::move(done)});
  }
  ++in_flight_;
  cv_.notify_one();
  return true;
}

std::size_t CallWorker::drain() {
  // acquire: pairs with the worker's release store after it queued a finished job.
  if (!any_done_.load(std::memory_order_acquire)) return 0;
  std::deque<Job> done;
  {
    std::lock_guard g(mu_);
    done.swap(worker2loop_done_);
    any_done_.store(false, std::memory_order_relaxed);
  }
  for (Job& j : done) {
    --in_flight_;
    if (j.done) j.done();
  }
  return done.size();
}

void CallWorker::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return stop_ || !loop2worker_jobs_.empty(); });
    if (stop_) return;
    Job j = std::move(loop2worker_jobs_.front());
    loop2worker_jobs_.pop_front();
    lk.unlock();  // the work runs unlocked: the poll loop submits and drains meanwhile
    t_current.worker = this;
    t_current.held.reset();
    try {
      if (j.work) j.work();
    } catch (...) {
      // The job's result stays empty: its done() answers with an error. The loop goes on.
    }
    j.work = nullptr;
    const auto held = std::static_pointer_cast<Held>(std::exchange(t_current.held, nullptr));
    t_current.worker = nullptr;
    lk.lock();
    if (held && !held->released) {  // its done waits for the release
      held->job = std::move(j);
      held->parked = true;
      ++held_now_;
      ++held_;
      continue;
    }
    if (held) ++held_;
    worker2loop_done_.push_back(std::move(j));
    any_done_.store(true, std::memory_order_release);
  }
}

}  // namespace roce::nfs
