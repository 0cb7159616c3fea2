/// @file
/// The NFS transports' in-process Context (local_stack.h).
#include "apps/nfs/local_stack.h"

#include <stdexcept>

#include "client/local/local_context.h"
#include "dataplane/engine/engine.h"
#include "dataplane/port/dpdk_port.h"

namespace roce::nfs {

LocalStack open_local_stack(engine::Engine& eng, port::PollLoop& loop, wire::Ipv4Addr ip,
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
  o.port.name = "nfs";
  o.port.mac = eng.config().mac;
  o.port.ipv4 = ip;
  o.port.gid = wire::ipv4_mapped(ip);
  o.port.max_mtu = eng.config().max_mtu;
  LocalStack s;
  s.ctx = client::open_local(std::move(o));
  if (!s.ctx) throw std::runtime_error("cannot open the in-process context");
  s.neighbour = [&loop](wire::Ipv4Addr peer, bool ask) {
    if (loop.neighbour().lookup(peer)) return true;
    if (ask) loop.resolve(peer);
    return false;
  };
  return s;
}

}  // namespace roce::nfs
