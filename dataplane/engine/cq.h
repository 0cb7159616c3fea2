/// @file
/// Completion queue: a fixed ring of work completions, written by the owning poll loop and
/// read by poll_cq(). A completion that finds it full overruns it: the engine stops the CQ
/// (nothing more is written), raises a CQ error event and moves its QPs to the error state
/// (Engine::cq_overrun).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "dataplane/engine/verbs.h"

namespace roce::engine {

class Cq {
 public:
  /// Room for `depth` completions, in a ring of a power of two (indexed by mask).
  explicit Cq(std::uint32_t depth)
      : ring_(std::bit_ceil(std::max<std::uint32_t>(depth, 1))),
        depth_(depth),
        mask_(static_cast<std::uint32_t>(ring_.size() - 1)) {}
  std::uint32_t depth() const { return depth_; }
  std::uint32_t size() const { return tail_ - head_; }
  bool overflowed() const { return overflowed_; }

  /// False when the CQ is full or stopped: the caller reports the overrun.
  bool push(const Wc& wc) {
    if (overflowed_ || size() == depth()) return false;
    ring_[tail_++ & mask_] = wc;
    return true;
  }
  void set_overflowed() { overflowed_ = true; }
  /// Drops the completions of QP `qpn` still in the ring, keeping the others in order (a QP
  /// moved to RESET: IBA 10.3.1's Reset leaves no work of the QP; mlx4/mlx5 clean its CQEs).
  /// Returns how many went.
  std::uint32_t remove_qp(std::uint32_t qpn) {
    std::uint32_t out = head_;
    for (std::uint32_t i = head_; i != tail_; ++i) {
      const Wc& wc = ring_[i & mask_];
      if (wc.qp_num == qpn) continue;
      if (out != i) ring_[out & mask_] = wc;
      ++out;
    }
    const std::uint32_t removed = tail_ - out;
    tail_ = out;
    return removed;
  }
  int poll(int max, Wc* out) {
    int n = 0;
    while (n < max && head_ != tail_) out[n++] = ring_[head_++ & mask_];
    return n;
  }

 private:
  std::vector<Wc> ring_;
  std::uint32_t depth_;
  std::uint32_t mask_;
  std::uint32_t head_ = 0;
  std::uint32_t tail_ = 0;
  bool overflowed_ = false;
};

}  // namespace roce::engine
