/// @file
/// The NAA as a kind of service roced hosts (`services: - kind: naa`; runtime/service.h): the
/// registration and a thin adaptor over NaaService (naa_service.h). `listen_port` is the
/// rdma_cm port; `args` are roce-naa's server options.
#include <memory>

#include "apps/naa/naa_service.h"
#include "runtime/service.h"

namespace roce::naa {

namespace {

const runtime::RegisterService kNaa{{
    .name = "naa",
    .description = "the NAA accelerator RPC server (docs/naa.md; args: roce-naa's server "
                   "options --max-hosts, --memory-per-host, ...)",
    .keys = {},
    .default_port = 12345,  // NAAICE's, as roce-naa's and the NAAICE host library's
    .blocking = false,
    .check = [](const ctl::ServiceConfig& sc) { service_config(sc); },
    .make = [](runtime::ServiceEnv& env) -> std::unique_ptr<runtime::HostedService> {
      return std::make_unique<runtime::SteppedService<NaaService>>(env, "naa");
    },
}};

}  // namespace

}  // namespace roce::naa
