/// @file
/// roce-nfs's and roce-nfsd's link (link.h).
#include "apps/nfs/link.h"

#include <stdexcept>

namespace roce::nfs {

LinkHolder::LinkHolder(const NfsLink& l) {
  perf::LinkOpts o = l.opts;
  if (!l.memif_socket.empty()) {  // perf::Env's memif link: the socket in place of an interface
    if (l.memif_role != "server" && l.memif_role != "client")
      throw std::runtime_error("memif role must be server or client");
    o.pmd = l.memif_role == "server" ? "memif-server" : "memif";
    o.iface = l.memif_socket;
  }
  env_ = std::make_unique<perf::Env>(o);
}

}  // namespace roce::nfs
