/// @file
/// A per-loop hook: work a poll loop runs on its own lcore once per iteration, besides its
/// port and engine. roced's attachment (controlplane/attach) registers one per loop to move
/// attached clients' work requests into the engine and completions out to their shared
/// memory. A loop with no poller pays nothing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace roce::port {

class Poller {
 public:
  virtual ~Poller() = default;
  /// Runs on the loop's lcore at the start of each iteration; returns the work it did (work
  /// requests and completions moved), counted as the iteration's activity.
  virtual std::size_t poll(std::uint64_t now_ns) = 0;
};

}  // namespace roce::port
