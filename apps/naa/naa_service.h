/// @file
/// roced hosting the NAA as a configured service (`services: - test: naa`): the NAA server on
/// a port's engine and poll loop (lcore 0), stepped from roced's main loop. It serves every
/// host that connects to its rdma_cm port (`listen_port`) for as long as the daemon runs; its
/// `args` are roce-naa's server options (--max-hosts, --memory-per-host, --max-regions,
/// --host-idle-timeout, -v). The service owns the port's rdma_cm (QP1): perftest services with
/// -R cannot share that port.
#pragma once

#include <memory>
#include <string>

#include "apps/naa/engine_stack.h"
#include "apps/naa/naa_server.h"
#include "controlplane/config.h"

namespace roce::naa {

/// The NaaConfig of a `test: naa` service; throws std::runtime_error on a bad argument.
NaaConfig service_config(const ctl::ServiceConfig& sc);

class NaaService {
 public:
  NaaService(const ctl::ServiceConfig& sc, engine::Engine& eng, port::PollLoop& loop,
             wire::Ipv4Addr ip, std::uint32_t cm_connections);
  /// Serves what arrived (one poll of the port's loop included).
  void step() { server_.step(); }
  /// The counters, one line each, for roced's log at exit.
  std::string report() const { return server_.report() + stack_.transport_report(); }
  const NaaServer& server() const { return server_; }

 private:
  runtime::Env env_;
  EngineStack stack_;
  NaaServer server_;
};

}  // namespace roce::naa
