/// @file
/// The dataplane of roce-nfs and roce-nfsd: net_af_packet on a kernel interface (perf::Env's own
/// link, for the VM and the namespaces), or net_memif between two appliances on one host (the
/// benchmarks), with a capture and injected loss either way.
#pragma once

#include <memory>
#include <string>

#include "apps/perf/env.h"

namespace roce::nfs {

struct NfsLink {
  perf::LinkOpts opts;       ///< iface (af_packet), ip, mac, pcap, faults
  std::string memif_socket;  ///< set: net_memif on this control socket instead
  std::string memif_role = "server";
};

/// The Env of the link (perf::Env owns its EAL, port, engine and loop).
class LinkHolder {
 public:
  explicit LinkHolder(const NfsLink& l);
  perf::Env& env() { return *env_; }

 private:
  std::unique_ptr<perf::Env> env_;
};

}  // namespace roce::nfs
