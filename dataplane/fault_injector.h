/// @file
/// Deterministic, seeded fault injection for a link: drop (a rate, the Nth frame, or PSN p of
/// QP q), duplicate, reorder within a window, corrupt a byte, delay. The injector only decides;
/// whoever carries frames (the in-memory test wire, the DPDK port layer) applies the decision,
/// so the same policy runs in unit tests and on real ports.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace roce {

struct FaultPolicy {
  double drop_rate = 0;        ///< probability that a frame is dropped
  std::uint64_t drop_nth = 0;  ///< drop exactly the Nth frame (1-based); 0 = off
  struct PsnDrop {
    std::uint32_t qpn = 0;
    std::uint32_t psn = 0;
    std::uint32_t times = 1;  ///< how many frames matching (qpn, psn) to drop
    int opcode = -1;          ///< only frames with this BTH opcode; -1 = any
  };
  std::vector<PsnDrop> drop_psn;
  double duplicate_rate = 0;         ///< probability that a frame is delivered twice
  double reorder_rate = 0;           ///< probability that a frame is held back...
  std::uint32_t reorder_window = 0;  ///< ...behind 1..window later frames
  double corrupt_rate = 0;           ///< probability that one byte of the RoCE packet is flipped
  std::uint64_t delay_ns = 0;        ///< added to every frame
  std::uint64_t jitter_ns = 0;       ///< plus a uniform random 0..jitter (may reorder)
  std::uint64_t seed = 1;

  /// Only frames dropped at random or by number: the decision needs no frame bytes, so a frame
  /// may be sent in pieces (zero-copy) and need not be copied together first.
  bool drop_only() const {
    return drop_psn.empty() && duplicate_rate == 0 && (reorder_rate == 0 || reorder_window == 0) &&
           corrupt_rate == 0 && delay_ns == 0 && jitter_ns == 0;
  }
  bool any() const {
    return drop_rate > 0 || drop_nth > 0 || !drop_psn.empty() || duplicate_rate > 0 ||
           (reorder_rate > 0 && reorder_window > 0) || corrupt_rate > 0 || delay_ns > 0 ||
           jitter_ns > 0;
  }
};

struct FaultDecision {
  bool drop = false;
  std::uint8_t copies = 1;  ///< 2 when duplicated
  int corrupt_at = -1;      ///< byte offset to flip, -1 = none
  std::uint8_t corrupt_mask = 0;
  std::uint32_t hold = 0;  ///< deliver after this many later frames (reorder)
  std::uint64_t delay_ns = 0;
};

struct FaultStats {
  std::uint64_t frames = 0, dropped = 0, duplicated = 0, reordered = 0, corrupted = 0;
};

class FaultInjector {
 public:
  explicit FaultInjector(FaultPolicy policy);
  /// Decides what happens to one frame (Ethernet header first).
  FaultDecision decide(std::span<const std::uint8_t> frame);
  const FaultStats& stats() const { return stats_; }
  const FaultPolicy& policy() const { return policy_; }

 private:
  bool chance(double p);
  FaultPolicy policy_;
  std::mt19937_64 rng_;
  FaultStats stats_;
};

/// A FaultInjector and the frames it holds back for reordering: applies each decision (drop,
/// corrupt, duplicate, hold, delay) and hands the resulting frames to `emit(bytes, delay_ns)`.
/// The in-memory test wire and the DPDK port layer both carry frames through it. Copies a frame
/// only when it must (held or corrupted); used only when fault injection is configured.
class FaultyLink {
 public:
  explicit FaultyLink(FaultPolicy policy) : inj_(std::move(policy)) {}

  /// Passes one frame through the policy; returns the decision taken for it.
  template <class Emit>
  FaultDecision submit(std::span<const std::uint8_t> frame, Emit&& emit) {
    const FaultDecision d = inj_.decide(frame);
    // Frames held for reordering go out after `hold` later frames.
    for (auto it = held_.begin(); it != held_.end();) {
      if (--it->left == 0) {
        emit(std::span<const std::uint8_t>(it->bytes), std::uint64_t{0});
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    if (d.drop) return d;
    std::vector<std::uint8_t> copy;
    std::span<const std::uint8_t> out = frame;
    if (d.corrupt_at >= 0) {
      copy.assign(frame.begin(), frame.end());
      copy[static_cast<std::size_t>(d.corrupt_at)] ^= d.corrupt_mask;
      out = copy;
    }
    for (int c = 0; c < d.copies; ++c) {
      if (c == 0 && d.hold > 0) {
        held_.push_back({d.hold, std::vector<std::uint8_t>(out.begin(), out.end())});
        continue;
      }
      emit(out, d.delay_ns);
    }
    return d;
  }
  /// The decision for a frame under a drop_only() policy: true to drop it. `head` (its first
  /// bytes) is what the injector may look at.
  bool drop_next(std::span<const std::uint8_t> head) { return inj_.decide(head).drop; }
  /// Sends every held frame now (the link went idle, so no later frame will release them).
  template <class Emit>
  bool release_held(Emit&& emit) {
    const bool any = !held_.empty();
    for (auto& h : held_) emit(std::span<const std::uint8_t>(h.bytes), std::uint64_t{0});
    held_.clear();
    return any;
  }
  bool holding() const { return !held_.empty(); }
  const FaultPolicy& policy() const { return inj_.policy(); }
  const FaultStats& stats() const { return inj_.stats(); }

 private:
  struct Held {
    std::uint32_t left;
    std::vector<std::uint8_t> bytes;
  };
  FaultInjector inj_;
  std::vector<Held> held_;
};

}  // namespace roce
