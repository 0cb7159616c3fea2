/// @file
/// The engine's transmit queue: preallocated frame slots filled by the stages and handed to
/// the port (DPDK, the in-memory test wire, an FPGA model) by Engine::drain_tx().
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace roce::engine {

class TxRing {
 public:
  /// Large enough for a 4096-byte payload with every header (VLAN, IPv6, RETH+ImmDt) and ICRC.
  static constexpr std::size_t kSlotSize = 4352;

  explicit TxRing(std::uint32_t slots) : buf_(std::size_t{slots} * kSlotSize), len_(slots) {}
  std::uint32_t capacity() const { return static_cast<std::uint32_t>(len_.size()); }
  std::uint32_t size() const { return tail_ - head_; }
  std::uint32_t free() const { return capacity() - size(); }

  /// The next free slot, or an empty span when the ring is full.
  std::span<std::uint8_t> reserve() {
    if (free() == 0) return {};
    return {buf_.data() + std::size_t{tail_ % capacity()} * kSlotSize, kSlotSize};
  }
  void commit(std::size_t len) { len_[tail_++ % capacity()] = static_cast<std::uint32_t>(len); }

  template <class F>
  std::size_t drain(F&& f, std::size_t max) {
    std::size_t n = 0;
    while (head_ != tail_ && n < max) {
      const std::uint32_t i = head_ % capacity();
      f(std::span<const std::uint8_t>(buf_.data() + std::size_t{i} * kSlotSize, len_[i]));
      ++head_;
      ++n;
    }
    return n;
  }

 private:
  std::vector<std::uint8_t> buf_;
  std::vector<std::uint32_t> len_;
  std::uint32_t head_ = 0;
  std::uint32_t tail_ = 0;
};

}  // namespace roce::engine
