/// @file
/// The NAA as a kind of service roced hosts (`services: - kind: naa`; runtime/service.h): the
/// registration and a thin adaptor over NaaService (naa_service.h). `listen_port` is the
/// rdma_cm port; `args` are roce-naa's server options.
#include <cstdio>
#include <memory>

#include "apps/naa/naa_service.h"
#include "runtime/service.h"

namespace roce::naa {

namespace {

class HostedNaa final : public runtime::HostedService {
 public:
  explicit HostedNaa(runtime::ServiceEnv& env) : env_(env) {}
  void start() override {
    svc_ = std::make_unique<NaaService>(env_.config, env_.engine, env_.loop, env_.ipv4,
                                        env_.cm_connections);
    std::printf("  service naa: rdma_cm port %u on port %s\n", env_.config.listen_port,
                env_.config.port.c_str());
    std::fflush(stdout);
  }
  bool poll() override {
    svc_->step();
    return false;  // the server's step says no more; roced's own loop poll counts the work
  }
  void stop() override {
    if (svc_) report_ = "  service naa:\n" + svc_->report();
    svc_.reset();
  }
  std::string report() const override { return report_; }

 private:
  runtime::ServiceEnv& env_;
  std::unique_ptr<NaaService> svc_;
  std::string report_;
};

const runtime::RegisterService kNaa{{
    .name = "naa",
    .description = "the NAA accelerator RPC server (docs/naa.md; args: roce-naa's server "
                   "options --max-hosts, --memory-per-host, ...)",
    .keys = {},
    .default_port = 12345,  // NAAICE's, as roce-naa's and the NAAICE host library's
    .blocking = false,
    .check = [](const ctl::ServiceConfig& sc) { service_config(sc); },
    .make = [](runtime::ServiceEnv& env) -> std::unique_ptr<runtime::HostedService> {
      return std::make_unique<HostedNaa>(env);
    },
}};

}  // namespace

}  // namespace roce::naa
