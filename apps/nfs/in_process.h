/// @file
/// The NFS transports in-process and hosted: a libroce Context (client::open_local) on an
/// engine this process drives (roce-nfs's and roce-nfsd's own port, or the port roced lends its
/// hosted NFS service), peers' MACs from the loop's ARP cache without waiting. Attached
/// programs need none of it (Context::attach).
#pragma once

#include <roce/client.h>

#include <cstdint>
#include <memory>

#include "dataplane/wire/bytes.h"

namespace roce::engine {
class Engine;
}
namespace roce::port {
class PollLoop;
}

namespace roce::nfs {

/// Every poll of the transports polls `loop` once; `ip` is the engine's RoCE address. A MAC not
/// in the cache sends an ARP request (the CM's retransmission, the client's next try or the
/// server's pending REQ finds the answer); Context::neighbour answers from the cache.
/// `cm_connections`: the CM's connection limit if this is the first user of the engine's CM.
/// Throws std::runtime_error when it cannot open the Context.
std::unique_ptr<client::Context> open_local_context(engine::Engine& eng, port::PollLoop& loop,
                                                    wire::Ipv4Addr ip,
                                                    std::uint32_t cm_connections = 4096);

}  // namespace roce::nfs
