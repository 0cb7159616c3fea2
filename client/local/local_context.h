/// @file
/// libroce's in-process backend: a client::Context on an engine the process drives itself (its
/// own DPDK port and poll loop, runtime/), or on the engine of a roced port that hosts the
/// application. Not part of the public API (include/roce/): it names the engine, and only
/// programs that link the dataplane use it.
#pragma once

#include <roce/client.h>

#include <functional>
#include <memory>
#include <optional>

namespace roce::engine {
class Engine;
}

namespace roce::client {

/// How open_local() reaches the application's own engine.
struct LocalOptions {
  engine::Engine* engine = nullptr;
  /// One poll of the application's loop (e.g. [&]{ loop.poll_once(); }): called by poll_cq and
  /// wait_cq, which drive the dataplane in-process.
  std::function<void()> progress;
  /// The MAC of an IPv4 neighbour (e.g. port::resolve_wait); used by modify_qp when an
  /// address vector carries no MAC.
  std::function<std::optional<MacAddr>(Ipv4Addr)> resolve;
  PortInfo port;
  /// Context::neighbour: whether the port's ARP cache has the address (an ARP request sent
  /// when not and `ask`), without waiting. Unset: EOPNOTSUPP.
  std::function<bool(Ipv4Addr, bool ask)> neighbour;
  /// The MAC of an IPv4 neighbour when the port's cache has it (an ARP request sent when not
  /// and `ask`), without waiting: what the CM uses for its MADs, which it sends from inside
  /// its poll to whatever source a frame names. Unset: `resolve` (which may wait).
  std::function<std::optional<MacAddr>(Ipv4Addr, bool ask)> lookup;
  /// CmConfig::max_connections of the engine's CM, when this context is the first to use it
  /// (roced: limits.cm_connections); otherwise the CM's own stays.
  std::uint32_t cm_connections = 4096;
};

/// A Context whose calls go straight to `opts.engine`.
std::unique_ptr<Context> open_local(LocalOptions opts);

}  // namespace roce::client
