/// @file
/// The NAA on an engine and poll loop in this process, its own (standalone.h) or the one roced
/// lends it (naa_service.h): libroce's in-process backend opened on them, the neighbour lookup
/// that the CM and the connect requests' ARP wait use, and the transport's counters.
#pragma once

#include <roce/client.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "apps/naa/conn_stack.h"

namespace roce::engine {
class Engine;
}
namespace roce::port {
class PollLoop;
}

namespace roce::naa {

/// `ip`'s MAC from `loop`'s neighbour cache; when it is not there, an ARP request (at most one
/// per address every 200 ms). Never waits.
std::function<std::optional<MacAddr>(Ipv4Addr)> neighbour_lookup(port::PollLoop& loop);

/// A Context on `eng` whose calls drive `loop` (client::open_local), and the ConnStack options
/// that go with it.
struct LocalPort {
  std::unique_ptr<client::Context> ctx;
  ConnStackOptions stack;
};
LocalPort open_local_port(engine::Engine& eng, port::PollLoop& loop, Ipv4Addr ip,
                          std::uint32_t cm_connections);

/// Retransmissions, RNR NAKs and injected drops, one line; with NAAICE_ALL_COUNTERS set, every
/// non-zero engine counter after it.
std::string transport_report(const engine::Engine& eng, const port::PollLoop& loop);

}  // namespace roce::naa
