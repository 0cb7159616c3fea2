/// @file
/// SerializedContext's waits: one turn of the inner wait (a poll-loop pass on the in-process
/// backend) per lock, so that other threads' calls interleave.
#include "client/lnet/src/serialized_context.h"

#include <cerrno>
#include <chrono>
#include <thread>

namespace roce::lnet {

int SerializedContext::wait_cq(client::Cq* cq, int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const int rc = locked([&] { return in_.wait_cq(cq, 0); });
    if (rc != ETIMEDOUT) return rc;
    if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= until) return ETIMEDOUT;
    std::this_thread::yield();
  }
}

namespace {
/// One turn of a wait `f(0)` per lock, until it has something or `timeout_ms` passes.
template <class F>
int waiting(int timeout_ms, F&& f) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const int rc = f();
    if (rc != ETIMEDOUT) return rc;
    if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= until) return ETIMEDOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
}  // namespace

int SerializedContext::cm_get_event(client::CmEvent& ev, int timeout_ms) {
  return waiting(timeout_ms, [&] { return locked([&] { return in_.cm_get_event(ev, 0); }); });
}

int SerializedContext::get_async_event(client::AsyncEvent& ev, int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const int rc = locked([&] { return in_.get_async_event(ev, 0); });
    if (rc != ETIMEDOUT) return rc;
    if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= until) return ETIMEDOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace roce::lnet
