/// @file
/// The NFSv3 server as a kind of service roced hosts (`services: - kind: nfs`;
/// runtime/service.h): the registration and a thin adaptor over HostedNfsService
/// (nfs_service.h). `listen_port` is the rdma_cm port (20049 for mount.nfs); `args` are
/// parse_service_args()'s; MOUNT listens on `listen_address` unless --mount-address says
/// otherwise.
#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <stdexcept>

#include "apps/nfs/nfs_service.h"
#include "runtime/service.h"

namespace roce::nfs {

namespace {

// The NFS server's counters besides the common shape (runtime::SteppedService).
class HostedNfs final : public runtime::SteppedService<HostedNfsService> {
 public:
  explicit HostedNfs(runtime::ServiceEnv& env) : SteppedService(env, "nfs") {}
  void counters(std::vector<runtime::ServiceCounter>& out) const override {
    if (!svc_) return;
    for (auto& [name, value] : svc_->stats()) {
      const bool level = name.size() > 4 && name.compare(name.size() - 4, 4, "_now") == 0;
      out.push_back({name, {}, value, level});
    }
  }
  std::string reload() override { return svc_ ? svc_->reload_exports() : std::string{}; }
  std::string status() const override { return svc_ ? svc_->clients_report() : std::string(); }
};

const runtime::RegisterService kNfs{{
    .name = "nfs",
    .description = "the NFSv3 server over RPC-over-RDMA, MOUNT over TCP (docs/nfs.md; args: "
                   "--root DIR, --export-options, --clients, ...)",
    .keys = {},
    .default_port = kNfsRdmaPort,  // 20049, where mount.nfs looks
    .blocking = false,
    .check =
        [](const ctl::ServiceConfig& sc) {
          NfsServiceConfig c;
          parse_service_args(sc.args, c);
          struct stat st {};
          if (::stat(c.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
            throw std::runtime_error("--root " + c.root + " is not a directory");
          if (!c.exports_file.empty()) read_exports_file(c.exports_file, c.exports);
        },
    .make = [](runtime::ServiceEnv& env) -> std::unique_ptr<runtime::HostedService> {
      return std::make_unique<HostedNfs>(env);
    },
}};

}  // namespace

}  // namespace roce::nfs
