/// @file
/// The scheduler's work lists (Engine::send_list_, read_list_): a FIFO of pointers in a ring
/// that grows by doubling, O(1) at both ends. run() takes a QP from the front, sends a few of
/// its packets and puts it at the back if it still has work, so every QP waits at most one
/// round, and a run() that stops because the transmit ring is full leaves the next QP at the
/// front for the next run(): no pass over the QPs that did not get a turn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace roce::engine {

template <class T>
class WorkQueue {
 public:
  void reserve(std::size_t n) {
    if (n > buf_.size()) regrow(n);
  }
  bool empty() const { return head_ == tail_; }
  std::size_t size() const { return static_cast<std::size_t>(tail_ - head_); }
  T* front() const { return buf_[head_ & mask_]; }
  /// The i-th from the front (i < size()).
  T* operator[](std::size_t i) const { return buf_[(head_ + i) & mask_]; }
  void pop_front() { ++head_; }
  /// Puts `p` back at the front (a QP whose turn the full transmit ring cut short).
  void push_front(T* p) {
    if (size() == buf_.size()) regrow(buf_.size() * 2);
    buf_[--head_ & mask_] = p;
  }
  void push_back(T* p) {
    if (size() == buf_.size()) regrow(buf_.size() * 2);
    buf_[tail_++ & mask_] = p;
  }
  /// Removes every entry of `p`, keeping the order of the others (control path: searches).
  void erase(const T* p) {
    std::uint64_t out = head_;
    for (std::uint64_t i = head_; i != tail_; ++i)
      if (buf_[i & mask_] != p) buf_[out++ & mask_] = buf_[i & mask_];
    tail_ = out;
  }
  void clear() { head_ = tail_ = 0; }

 private:
  void regrow(std::size_t want) {
    std::size_t n = 16;
    while (n < want) n *= 2;
    std::vector<T*> b(n);
    for (std::size_t i = 0; i < size(); ++i) b[i] = (*this)[i];
    tail_ = size();
    head_ = 0;
    buf_.swap(b);
    mask_ = n - 1;
  }

  std::vector<T*> buf_;
  std::uint64_t head_ = 0, tail_ = 0;  ///< counters; the slot is counter & mask_
  std::uint64_t mask_ = 0;
};

}  // namespace roce::engine
