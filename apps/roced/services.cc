#include "apps/roced/services.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>

#include "apps/naa/naa_service.h"
#include "apps/nfs/nfs_service.h"
#include "controlplane/address.h"
#include "controlplane/tcp.h"

namespace roce::appliance {

perf::Invocation parse_test_service(std::size_t i, const ctl::ServiceConfig& sc) {
  std::vector<std::string> args{sc.test};
  args.insert(args.end(), sc.args.begin(), sc.args.end());
  int help = 0;
  std::ostringstream ignored;
  perf::Invocation out;
  try {
    auto inv = perf::parse_command_line(args, ignored, help);
    if (!inv) throw perf::CliError("--help is not an option of a service");
    out = *inv;
  } catch (const perf::CliError& e) {
    throw std::runtime_error("services[" + std::to_string(i) + "] (" + sc.test + "): " + e.what());
  }
  if (!out.opts.server.empty())
    throw std::runtime_error("services[" + std::to_string(i) +
                             "]: a service is a server; its args name no peer");
  return out;
}

void check_services(const ctl::ApplianceConfig& cfg) {
  for (std::size_t i = 0; i < cfg.services.size(); ++i) {
    const ctl::ServiceConfig& sc = cfg.services[i];
    const std::string where = "services[" + std::to_string(i) + "] (" + sc.test + "): ";
    try {
      if (sc.test == "naa") {
        naa::service_config(sc);
      } else if (sc.test == "nfs") {
        nfs::NfsServiceConfig c;
        nfs::parse_service_args(sc.args, c);
        struct stat st {};
        if (::stat(c.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
          throw std::runtime_error("--root " + c.root + " is not a directory");
      } else {
        parse_test_service(i, sc);
        continue;
      }
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      throw std::runtime_error(m.rfind("services[", 0) == 0 ? m : where + m);
    }
  }
}

ServiceHost::ServiceHost(const ctl::ApplianceConfig& cfg) {
  for (std::size_t i = 0; i < cfg.services.size(); ++i) {
    const ctl::ServiceConfig& sc = cfg.services[i];
    if (sc.test == "naa") continue;  // not a perftest server: roced's open_naa_services
    if (sc.test == "nfs") continue;  // nor is the NFS server: roced's open_nfs_services
    Service svc;
    svc.cfg = sc;
    svc.inv = parse_test_service(i, sc);
    for (std::size_t p = 0; p < cfg.ports.size(); ++p)
      if (cfg.ports[p].name == sc.port) svc.port_index = p;
    try {
      svc.listen_fd = ctl::tcp_listen(sc.listen_address, sc.listen_port, 16);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("service " + sc.test + ": " + e.what());
    }
    ::fcntl(svc.listen_fd, F_SETFL, O_NONBLOCK);
    std::printf("  service %s: TCP %u on %s (out-of-band exchange), RoCE on port %s\n",
                sc.test.c_str(), sc.listen_port, ctl::to_string(sc.listen_address).c_str(),
                sc.port.c_str());
    services_.push_back(std::move(svc));
  }
  std::fflush(stdout);
}

ServiceHost::~ServiceHost() {
  for (auto& svc : services_) {
    for (const auto& w : svc.waiting) ::close(w.fd);
    if (svc.listen_fd >= 0) ::close(svc.listen_fd);
  }
}

void ServiceHost::poll(std::uint64_t now_ns, const std::function<void(Service&, int)>& run) {
  for (auto& svc : services_) {
    // New clients join the queue; beyond its bound they are refused at once.
    for (;;) {
      const int fd = ::accept4(svc.listen_fd, nullptr, nullptr, SOCK_NONBLOCK);
      if (fd < 0) break;
      if (svc.waiting.size() >= kMaxWaiting) {
        ++svc.refused_busy;
        ::close(fd);
        std::printf("roced: service %s: %zu clients already waiting, one refused\n",
                    svc.cfg.test.c_str(), svc.waiting.size());
        continue;
      }
      const auto wait_ns = static_cast<std::uint64_t>(svc.inv.opts.timeout_s * 1e9);
      svc.waiting.push_back({fd, now_ns + wait_ns});
    }
    // The first client that has spoken (or hung up: the test reports it) is served; silent
    // ones past their deadline go.
    for (auto it = svc.waiting.begin(); it != svc.waiting.end();) {
      pollfd p{it->fd, POLLIN, 0};
      if (::poll(&p, 1, 0) > 0) {
        const int fd = it->fd;
        svc.waiting.erase(it);
        run(svc, fd);
        return;  // one test per call: the caller's loop keeps the rest of the appliance going
      }
      if (now_ns >= it->deadline_ns) {
        ++svc.dropped_silent;
        ::close(it->fd);
        std::printf("roced: service %s: a client sent nothing within %.0f s, dropped\n",
                    svc.cfg.test.c_str(), svc.inv.opts.timeout_s);
        it = svc.waiting.erase(it);
        continue;
      }
      ++it;
    }
  }
  std::fflush(stdout);
}

}  // namespace roce::appliance
