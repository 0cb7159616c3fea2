/// @file
/// hls::stream's shape without its library: a bounded FIFO of fixed depth, no allocation. A
/// kernel reads and writes only through these, so the C simulation has the dataflow a
/// synthesised design has (a full FIFO is back-pressure: write() refuses, the caller stalls).
#pragma once

#include <array>
#include <cstddef>

namespace roce::fpga::hls {

template <class T, std::size_t Depth>
class Stream {
  static_assert(Depth > 0 && (Depth & (Depth - 1)) == 0, "depth is a power of two");

 public:
  bool empty() const { return head_ == tail_; }
  bool full() const { return tail_ - head_ == Depth; }
  std::size_t size() const { return tail_ - head_; }
  /// False (nothing written) when full.
  bool write(const T& v) {
    if (full()) return false;
    buf_[tail_++ & (Depth - 1)] = v;
    return true;
  }
  /// False (nothing read) when empty.
  bool read(T& v) {
    if (empty()) return false;
    v = buf_[head_++ & (Depth - 1)];
    return true;
  }

 private:
  std::array<T, Depth> buf_{};
  std::size_t head_ = 0, tail_ = 0;
};

}  // namespace roce::fpga::hls
