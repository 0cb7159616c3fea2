/// @file
/// The NFS transports in-process and hosted: a libroce Context on an engine this process drives
/// (roce-nfs's and roce-nfsd's own port, or the port roced lends its hosted NFS service), with
/// the neighbour lookup the server's pending connect requests use. Attached programs need none
/// of it (Context::attach).
#pragma once

#include <roce/client.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "dataplane/wire/bytes.h"

namespace roce::engine {
class Engine;
}
namespace roce::port {
class PollLoop;
}

namespace roce::nfs {

struct LocalStack {
  /// client::open_local on the engine: every poll of the transports polls `loop` once.
  std::unique_ptr<client::Context> ctx;
  /// ServerOptions::neighbour: whether the loop's ARP cache has the address, an ARP request
  /// sent when it has not and `ask`.
  std::function<bool(wire::Ipv4Addr, bool ask)> neighbour;
};

/// `ip`: the engine's RoCE address. Peers' MACs come from the loop's ARP cache without waiting
/// (a miss sends an ARP request; the CM's retransmission, or the client's next try, finds the
/// answer).
/// `cm_connections`: the CM's connection limit if this is the first user of the engine's CM.
LocalStack open_local_stack(engine::Engine& eng, port::PollLoop& loop, wire::Ipv4Addr ip,
                            std::uint32_t cm_connections = 4096);

}  // namespace roce::nfs
