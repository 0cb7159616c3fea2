/// @file
/// Where roce-nfs and roce-nfsd get their libroce Context: attached to a running roced
/// (--attach SOCKET), or in-process on a DPDK port of their own: net_af_packet on a kernel
/// interface (the VM and the namespaces) or net_memif between two appliances on one host (the
/// benchmarks), with a capture and injected loss either way (runtime::LinkOptions, on a
/// runtime::Env).
#pragma once

#include <roce/client.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/link.h"

namespace roce::runtime {
class Env;
}
namespace roce::port {
class PollLoop;
class DpdkPort;
}  // namespace roce::port

namespace roce::nfs {

struct NfsLink {
  std::string attach;         ///< set: attach to the roced listening on this socket
  std::string attach_port;    ///< attached: the roced port by name (empty: its first)
  runtime::LinkOptions link;  ///< not attached: the program's own port
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
  /// The program's own poll loop (its busy and idle time: PollLoop::time_stats); null attached.
  const port::PollLoop* loop() const;
  /// The program's own port (its counters: DpdkPort::stats); null attached.
  const port::DpdkPort* port() const;

 private:
  bool attached_ = false;
  std::unique_ptr<runtime::Env> env_;
  std::unique_ptr<client::Context> ctx_;  ///< before env_ in destruction
};

}  // namespace roce::nfs
