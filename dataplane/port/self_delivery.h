/// @file
/// Self-delivery: a frame the engine sends to the port's own MAC is handed back to the
/// port's receive path instead of the wire, as a kernel loops traffic for a local address
/// and a NIC (mlx5's local loopback, rxe's `rxe_loopback`) loops a packet for its own GID.
/// RDMA programs and test suites (rdma-core's `tests/`, MPI ranks on one host) connect two
/// QPs of one device to each other through the port's own GID; without this the engine would
/// put those frames on the wire, where no switch returns a frame to the port it came from.
///
/// Two parts: the neighbour cache answers the port's own address with its own MAC
/// (neighbour.h: no ARP for it), and the poll loop gives every frame whose destination MAC
/// is the port's to a SelfDelivery queue, which it delivers to the engine at its next
/// receive step, after the frames of the transmit burst (poll_loop.cc). Copies only: a
/// zero-copy frame's payload is read out of registered memory when it is taken, so the
/// frame does not depend on the memory once take() returns. Bounded: a full queue drops the
/// frame (counted; RC retransmits it, as after a loss on the wire). Pure code, no DPDK.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dataplane/engine/tx_ring.h"
#include "dataplane/wire/bytes.h"

namespace roce::port {

struct SelfDeliveryStats {
  std::uint64_t frames = 0;   ///< frames taken for delivery to this port
  std::uint64_t bytes = 0;    ///< their bytes
  std::uint64_t dropped = 0;  ///< frames for this port refused: the queue was full
};

class SelfDelivery {
 public:
  /// Frames queued at once: a transmit burst of one iteration (the port's TX room) fits.
  static constexpr std::uint32_t kDefaultSlots = 1024;
  /// `mac`: the port's own address. Slots are allocated on first use, then reused.
  explicit SelfDelivery(wire::MacAddr mac, std::uint32_t slots = kDefaultSlots);

  /// True when `frame` (Ethernet, as the engine builds it, untagged or 802.1Q) is addressed
  /// to this port's MAC.
  bool is_self(std::span<const std::uint8_t> frame) const;
  /// Queues a copy of `frame`; false (counted in `dropped`) when the queue is full.
  bool take(std::span<const std::uint8_t> frame);
  bool take(const engine::TxFrame& frame);
  /// Hands the frames queued before this call to `fn(std::span<const std::uint8_t>)`, oldest
  /// first, and returns how many. Frames `fn` causes to be taken wait for the next call.
  template <class F>
  std::size_t deliver(F&& fn) {
    const std::size_t n = count_;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<std::uint8_t>& s = slots_[head_];
      head_ = (head_ + 1) % slots_.size();
      --count_;
      fn(std::span<const std::uint8_t>(s));
    }
    return n;
  }
  bool empty() const { return count_ == 0; }
  std::size_t queued() const { return count_; }
  const SelfDeliveryStats& stats() const { return stats_; }

 private:
  std::vector<std::uint8_t>* slot();
  wire::MacAddr mac_;
  std::vector<std::vector<std::uint8_t>> slots_;
  std::size_t head_ = 0, count_ = 0;
  SelfDeliveryStats stats_;
};

}  // namespace roce::port
