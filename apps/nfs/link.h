/// @file
/// Where roce-nfs and roce-nfsd get their libroce Context: attached to a running roced
/// (--attach SOCKET), or in-process on a DPDK port of their own: net_af_packet on a kernel
/// interface (the VM and the namespaces) or net_memif between two appliances on one host (the
/// benchmarks), with a capture and injected loss either way. link.cc is the one file of the
/// two programs that stands on the in-process host (perf::Env).
#pragma once

#include <roce/client.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dataplane/wire/bytes.h"

namespace roce::perf {
class Env;
}

namespace roce::nfs {

struct NfsLink {
  std::string attach;       ///< set: attach to the roced listening on this socket
  std::string attach_port;  ///< attached: the roced port by name (empty: its first)
  std::string iface;        ///< in-process: kernel interface (net_af_packet or net_af_xdp)
  std::string pmd = "af_packet";
  std::string ip = "192.0.2.100";
  std::string mac = "02:00:00:00:01:00";
  std::string pcap;          ///< in-process: capture every frame here
  std::string memif_socket;  ///< set: net_memif on this control socket instead of --iface
  std::string memif_role = "server";
  double tx_drop = 0, rx_drop = 0;  ///< in-process: injected loss
  std::uint64_t tx_seed = 11, rx_seed = 12;
};

/// The Context of the link: attached, or open_local on an in-process port (EAL, port, engine,
/// loop), which it owns.
class LinkHolder {
 public:
  /// Throws std::runtime_error when it cannot attach or open the port.
  explicit LinkHolder(const NfsLink& l);
  ~LinkHolder();
  client::Context& context() { return *ctx_; }
  bool attached() const { return attached_; }

 private:
  bool attached_ = false;
  std::unique_ptr<perf::Env> env_;
  std::unique_ptr<client::Context> ctx_;  ///< before env_ in destruction
};

}  // namespace roce::nfs
