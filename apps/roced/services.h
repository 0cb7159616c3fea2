/// @file
/// roced's hosted test servers (`services[]`): each listens for a perftest/pingpong client's
/// out-of-band TCP connection on the management address (or its own `listen_address`) and runs
/// the RoCE test against it, as perftest's own server would. A client is only served once it
/// has spoken (perftest's client sends first): a client that connects and stays silent waits in
/// a bounded queue and is dropped at its deadline, so it cannot hold the others up. The test
/// itself runs to completion on the port's poll loop, one at a time, as a perftest server
/// serves one client.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "apps/perf/cli.h"
#include "controlplane/config.h"

namespace roce::appliance {

struct Service {
  ctl::ServiceConfig cfg;
  perf::Invocation inv;
  std::size_t port_index = 0;
  int listen_fd = -1;
  struct Waiting {
    int fd = -1;
    std::uint64_t deadline_ns = 0;
  };
  std::deque<Waiting> waiting;  ///< accepted, not yet spoken (at most kMaxWaiting)
  unsigned runs = 0, failures = 0, dropped_silent = 0, refused_busy = 0;
};

/// A perftest/pingpong/Coyote service's options, parsed as roce-perf parses them; throws
/// std::runtime_error naming services[i].
perf::Invocation parse_test_service(std::size_t i, const ctl::ServiceConfig& sc);
/// Every service's args as the service will take them at start (roced --check): perftest's,
/// the NAA's, the NFS server's (its root a directory); throws std::runtime_error naming the
/// service.
void check_services(const ctl::ApplianceConfig& cfg);

class ServiceHost {
 public:
  static constexpr std::size_t kMaxWaiting = 8;
  /// Parses each service's options (as roce-perf would) and listens on its TCP port, at
  /// `services[i].listen_address` (from the configuration: the management address unless set).
  explicit ServiceHost(const ctl::ApplianceConfig& cfg);
  ~ServiceHost();
  ServiceHost(const ServiceHost&) = delete;
  ServiceHost& operator=(const ServiceHost&) = delete;
  bool empty() const { return services_.empty(); }
  /// Accepts new clients, drops silent ones past their deadline, and hands each client that
  /// has spoken to `run(service, fd)` (which owns the fd from then on). Non-blocking.
  void poll(std::uint64_t now_ns, const std::function<void(Service&, int)>& run);
  const std::vector<Service>& services() const { return services_; }

 private:
  std::vector<Service> services_;
};

}  // namespace roce::appliance
