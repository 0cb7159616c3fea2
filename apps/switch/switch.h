/// @file
/// A software switch for congestion tests: ports joined by destination MAC, and per output
/// port one queue that every input shares, of configurable depth and drain rate, with
/// RED-style ECN marking (Kmin/Kmax/Pmax on the instantaneous depth, as DCQCN deployments set
/// switches: ECT packets get CE, IPv4 and IPv6) and tail drop. Counters: frames, marks, drops
/// per output, and a histogram of the queue depth each arriving frame found.
///
/// No clock of its own and no I/O: the caller hands in frames with the time they arrive and
/// takes out those whose transmission has finished (a DPDK program between memif ports, or
/// the in-process fabric of the incast benchmark, apps/switch/fabric.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dataplane/wire/eth.h"

namespace roce::fabric {

struct QueueConfig {
  std::uint64_t rate_mbps = 10'000;        ///< drain rate of the output
  std::uint64_t depth_bytes = 512 * 1024;  ///< queue capacity: beyond it, tail drop
  bool ecn = true;                         ///< RED marking of ECT packets
  std::uint64_t kmin_bytes = 10 * 1024;    ///< no mark below
  std::uint64_t kmax_bytes = 50 * 1024;    ///< always mark above
  double pmax = 1.0;                       ///< mark probability at kmax (linear from kmin)
  std::uint64_t delay_ns = 1000;           ///< propagation after the queue
  std::uint64_t hist_bucket_bytes = 1024;  ///< queue depth histogram granularity
  /// Mark on dequeue (the depth behind a frame as it leaves), as DCTCP and DCQCN deployments
  /// prefer: the mark then reports the queue now, not the queue the frame found one queueing
  /// delay ago. False: on enqueue.
  bool mark_on_dequeue = true;
};

/// Sets CE in the IP header of an ECT frame (IPv4 checksum kept right, VLAN tag skipped).
/// False when the frame is not IP or is Not-ECT (ECN 0).
bool mark_ce(std::span<std::uint8_t> frame);
/// The frame's IP ECN field, or -1 when it is not IP.
int ecn_of(std::span<const std::uint8_t> frame);

/// One output: a FIFO drained at `rate_mbps`, each frame leaving once it has been sent.
class OutputQueue {
 public:
  explicit OutputQueue(const QueueConfig& c = {}, std::uint64_t seed = 1);
  enum class Verdict : std::uint8_t { kQueued, kMarked, kDropped };
  Verdict enqueue(std::vector<std::uint8_t> frame, std::uint64_t now);
  /// Hands out, in order, every frame whose transmission (and propagation) ended by `now`.
  template <class F>
  void deliver(std::uint64_t now, F&& f) {
    while (!q_.empty() && q_.front().at <= now) {
      Item it = std::move(q_.front());
      q_.pop_front();
      if (cfg_.mark_on_dequeue) red_mark(it.frame, depth(it.done));
      f(std::span<const std::uint8_t>(it.frame), it.at);
    }
  }
  /// Bytes queued or being sent at `now`.
  std::uint64_t depth(std::uint64_t now);
  /// When the next frame leaves (0: empty).
  std::uint64_t next_event() const { return q_.empty() ? 0 : q_.front().at; }

  struct Counters {
    std::uint64_t frames = 0, bytes = 0;  ///< accepted
    std::uint64_t marked = 0;
    std::uint64_t dropped = 0, dropped_bytes = 0;
    std::uint64_t max_depth = 0;
    std::vector<std::uint64_t> hist;  ///< frames that found the depth in [i, i+1) buckets
  };
  const Counters& counters() const { return c_; }
  /// Starts the depth histogram again (after a warmup).
  void clear_histogram() { std::fill(c_.hist.begin(), c_.hist.end(), 0); }
  /// The depth (bytes) below which fraction `p` of arriving frames found the queue.
  std::uint64_t depth_percentile(double p) const;
  const QueueConfig& config() const { return cfg_; }

 private:
  struct Item {
    std::vector<std::uint8_t> frame;
    std::uint64_t done = 0;  ///< transmission finished (leaves the queue's depth)
    std::uint64_t at = 0;    ///< delivered (done + propagation)
  };
  /// RED: marks `frame` with the probability the depth `d` gives.
  bool red_mark(std::vector<std::uint8_t>& frame, std::uint64_t d);

  QueueConfig cfg_;
  std::deque<Item> q_;
  std::deque<std::pair<std::uint64_t, std::uint32_t>> inflight_;  ///< (done, bytes)
  std::uint64_t bytes_ = 0;                                       ///< in inflight_
  std::uint64_t busy_until_ = 0;                                  ///< the output's serializer
  std::mt19937_64 rng_;
  Counters c_;
};

/// Ports joined by destination MAC, an OutputQueue each. A port's MAC is given (set_mac) or
/// learnt from the source of what arrives on it (`learn`); with learning, broadcast, multicast
/// and unknown destinations go to every other port (ARP and ND need it).
class Switch {
 public:
  Switch(std::size_t ports, const QueueConfig& c, std::uint64_t seed = 1, bool learn = false);
  void set_mac(std::size_t port, const wire::MacAddr& mac) { macs_.at(port) = mac; }
  /// A frame arrives on port `in` at `now`. Without learning, frames to an unknown MAC are
  /// dropped and counted.
  void receive(std::size_t in, std::span<const std::uint8_t> frame, std::uint64_t now);
  /// Frames that left output `port` by `now`: f(frame).
  template <class F>
  void deliver(std::size_t port, std::uint64_t now, F&& f) {
    out_.at(port).deliver(now, [&](std::span<const std::uint8_t> fr, std::uint64_t) { f(fr); });
  }
  std::uint64_t next_event() const;
  OutputQueue& output(std::size_t port) { return out_.at(port); }
  std::size_t ports() const { return out_.size(); }
  std::uint64_t unknown_dst() const { return unknown_; }
  std::uint64_t flooded() const { return flooded_; }
  /// Every output's counters and depth percentiles, as one JSON object.
  std::string json() const;

 private:
  std::vector<wire::MacAddr> macs_;
  std::vector<OutputQueue> out_;
  std::uint64_t unknown_ = 0;
  bool learn_ = false;
  std::uint64_t flooded_ = 0;
};

}  // namespace roce::fabric
