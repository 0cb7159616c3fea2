/// @file
/// The NFS transports' in-process Context (in_process.h).
#include "apps/nfs/in_process.h"

#include <stdexcept>

#include "client/local/local_context.h"
#include "dataplane/engine/engine.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/poll_loop.h"

namespace roce::nfs {

std::unique_ptr<client::Context> open_local_context(engine::Engine& eng, port::PollLoop& loop,
                                                    wire::Ipv4Addr ip,
                                                    std::uint32_t cm_connections) {
  client::LocalOptions o;
  o.cm_connections = cm_connections;
  o.engine = &eng;
  o.progress = [&loop] { loop.poll_once(); };
  o.resolve = [&loop](Ipv4Addr peer) -> std::optional<MacAddr> {
    auto mac = loop.neighbour().lookup(peer);
    if (!mac) loop.resolve(peer);
    return mac;
  };
  o.neighbour = [&loop](Ipv4Addr peer, bool ask) {
    if (loop.neighbour().lookup(peer)) return true;
    if (ask) loop.resolve(peer);
    return false;
  };
  o.port.name = "nfs";
  o.port.mac = eng.config().mac;
  o.port.ipv4 = ip;
  o.port.gid = wire::ipv4_mapped(ip);
  o.port.max_mtu = eng.config().max_mtu;
  auto ctx = client::open_local(std::move(o));
  if (!ctx) throw std::runtime_error("cannot open the in-process context");
  return ctx;
}

}  // namespace roce::nfs
