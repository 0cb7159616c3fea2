/// @file
/// roce-nfs's and roce-nfsd's link (link.h).
#include "apps/nfs/link.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "apps/nfs/in_process.h"
#include "apps/perf/env.h"

namespace roce::nfs {

LinkHolder::LinkHolder(const NfsLink& l) {
  if (!l.attach.empty()) {
    attached_ = true;
    ctx_ = client::Context::attach(l.attach, l.attach_port);
    if (!ctx_)
      throw std::runtime_error("cannot attach to roced at " + l.attach + ": " +
                               std::strerror(errno));
    return;
  }
  perf::LinkOpts o;
  o.iface = l.iface;
  o.pmd = l.pmd;
  o.ip = l.ip;
  o.mac = l.mac;
  o.pcap = l.pcap;
  if (l.tx_drop > 0) o.tx_faults.drop_rate = l.tx_drop, o.tx_faults.seed = l.tx_seed;
  if (l.rx_drop > 0) o.rx_faults.drop_rate = l.rx_drop, o.rx_faults.seed = l.rx_seed;
  if (!l.memif_socket.empty()) {  // perf::Env's memif link: the socket in place of an interface
    if (l.memif_role != "server" && l.memif_role != "client")
      throw std::runtime_error("memif role must be server or client");
    o.pmd = l.memif_role == "server" ? "memif-server" : "memif";
    o.iface = l.memif_socket;
  }
  env_ = std::make_unique<perf::Env>(o);
  ctx_ = open_local_context(env_->eng, env_->loop, env_->ip);
}

LinkHolder::~LinkHolder() {
  ctx_.reset();  // the Context before the engine it stands on
  env_.reset();
}

}  // namespace roce::nfs
