/// @file
/// The NAA as a roced service (naa_service.h).
#include "apps/naa/naa_service.h"

#include <algorithm>
#include <stdexcept>

#include "dataplane/engine/engine.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/poll_loop.h"

namespace roce::naa {

namespace {

double number(const std::string& opt, const std::string& v, double lo, double hi) {
  std::size_t used = 0;
  double d = 0;
  try {
    d = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || d < lo || d > hi)
    throw std::runtime_error("service naa: " + opt + " must be a number in " +
                             std::to_string(static_cast<long long>(lo)) + ".." +
                             std::to_string(static_cast<long long>(hi)));
  return d;
}

/// libroce's in-process backend on the port's engine, and the stack's options with it.
LocalPort open_on(engine::Engine& eng, port::PollLoop& loop, wire::Ipv4Addr ip,
                  std::uint32_t cm_connections, const ctl::ServiceConfig& sc) {
  LocalPort p = open_local_port(eng, loop, ip, cm_connections);
  if (!p.ctx) throw std::runtime_error("service naa: cannot open the port's engine");
  p.stack.max_connections = std::max<std::size_t>(service_config(sc).max_hosts + 64, 1024);
  return p;
}

}  // namespace

NaaConfig service_config(const ctl::ServiceConfig& sc) {
  NaaConfig c;
  c.port = sc.listen_port;
  for (std::size_t i = 0; i < sc.args.size(); ++i) {
    const std::string& a = sc.args[i];
    if (a == "-v" || a == "--verbose") {
      c.verbose = true;
      continue;
    }
    if (i + 1 >= sc.args.size())
      throw std::runtime_error("service naa: " + a + " needs a value (or is not an option)");
    const std::string& v = sc.args[++i];
    if (a == "--max-hosts")
      c.max_hosts = static_cast<std::uint32_t>(number(a, v, 1, 4096));
    else if (a == "--memory-per-host")
      c.memory_per_host = static_cast<std::uint64_t>(number(a, v, 1, 1 << 20)) << 20;
    else if (a == "--max-regions")
      c.max_regions = static_cast<std::uint32_t>(number(a, v, 1, kMaxRegions));
    else if (a == "--host-idle-timeout")
      c.host_idle_timeout = number(a, v, 0, 1e9);
    else if (a == "--kernel-threads")
      c.kernel_threads = static_cast<std::uint32_t>(number(a, v, 1, 64));
    else if (a == "--kernel-queue")
      c.kernel_queue = static_cast<std::uint32_t>(number(a, v, 0, 4096));
    else if (a == "--functions") {
      if (std::string err; !KernelRegistry::builtin().configure(v, err))
        throw std::runtime_error("service naa: --functions: " + err);
      c.functions = v;
    } else
      throw std::runtime_error(
          "service naa: unknown option " + a +
          " (--max-hosts, --memory-per-host, --max-regions, "
          "--host-idle-timeout, --kernel-threads, --kernel-queue, --functions, -v)");
  }
  return c;
}

NaaService::NaaService(const ctl::ServiceConfig& sc, engine::Engine& eng, port::PollLoop& loop,
                       wire::Ipv4Addr ip, std::uint32_t cm_connections)
    : eng_(eng),
      loop_(loop),
      local_(open_on(eng, loop, ip, cm_connections, sc)),
      stack_(*local_.ctx, local_.stack),
      server_(stack_, service_config(sc), KernelRegistry::builtin()) {
  server_.start();
}

std::string NaaService::report() const { return server_.report() + transport_report(eng_, loop_); }

}  // namespace roce::naa
