/// @file
/// NetFR's frame source (host_service.h) hosted in roced under the kind `netfr`:
///
///   services:
///     - kind: netfr
///       port: p0
///       listen_port: 5010   # rdma_cm port of the primary channel; the secondary is + 1
///       width: 320          # RGBA frames of width x height (+ a 64-byte header)
///       height: 180
///       frames: 0           # per client, then an end datagram; 0: until the client leaves
///       fps: 0              # 0: as fast as the client gives its buffers back
///
/// It serves one Looking Glass-like client at a time (roce-netfr-lg attached to a roced, or any
/// NetFR client) for as long as roced runs.
#include <roce/client.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/netfr/frames.h"
#include "apps/netfr/host_service.h"
#include "runtime/service.h"

namespace roce::netfr {

namespace {

HostServiceOptions options(const ctl::ServiceConfig& sc) {
  HostServiceOptions o;
  o.port = sc.listen_port;
  if (o.port == 65535)
    throw std::runtime_error("listen_port: the secondary channel needs port + 1");
  o.width = static_cast<std::uint32_t>(sc.option_uint("width", 320, 1, 8192));
  o.height = static_cast<std::uint32_t>(sc.option_uint("height", 180, 1, 8192));
  o.frames = sc.option_uint("frames", 0, 0, ~std::uint64_t{0});
  o.fps = static_cast<double>(sc.option_uint("fps", 0, 0, 1000));
  if (frames::frame_bytes(o.width, o.height) > NETFR_MAX_BUFFER_SIZE)
    throw std::runtime_error("width x height: a frame must fit 256 MiB");
  if (!sc.args.empty()) throw std::runtime_error("netfr takes no args (its keys instead)");
  return o;
}

class NetfrService final : public runtime::HostedService {
 public:
  explicit NetfrService(runtime::ServiceEnv& env) : env_(env), o_(options(env.config)) {}
  ~NetfrService() override { stop(); }

  void start() override {
    ctx_ = env_.open_context();
    svc_ = std::make_unique<HostService>(*ctx_, o_);  // listens; throws when it cannot
    std::printf("  service netfr: rdma_cm ports %u and %u on port %s, %ux%u frames\n", o_.port,
                o_.port + 1, env_.port_name.c_str(), o_.width, o_.height);
    std::fflush(stdout);
  }
  bool poll() override { return svc_ && svc_->poll(); }
  void stop() override {
    if (svc_) report_ = "  " + svc_->report() + "\n";
    svc_.reset();  // disconnects the client (DREQ answered), frees its memory
    ctx_.reset();
  }
  void counters(std::vector<runtime::ServiceCounter>& out) const override {
    if (!svc_) return;
    out.push_back(
        {"netfr_connected", "a NetFR client is connected", svc_->connected() ? 1u : 0u, true});
    out.push_back({"netfr_sessions", "clients served every frame", svc_->sessions(), false});
    out.push_back({"netfr_frames", "frames written", svc_->frames_sent(), false});
    out.push_back({"netfr_errors", "failed writes and datagrams", svc_->errors(), false});
  }
  std::string report() const override { return svc_ ? "  " + svc_->report() + "\n" : report_; }

 private:
  runtime::ServiceEnv& env_;
  HostServiceOptions o_;
  std::unique_ptr<client::Context> ctx_;
  std::unique_ptr<HostService> svc_;
  std::string report_;
};

const runtime::RegisterService kNetfr{{
    .name = "netfr",
    .description =
        "NetFR frame source: Looking Glass-like frames and cursors to one client at a time",
    .keys = {{"width", "frame width in pixels, 1..8192 (320)"},
             {"height", "frame height in pixels, 1..8192 (180)"},
             {"frames", "frames per client, then an end datagram; 0: until it leaves (0)"},
             {"fps", "frames per second, 0..1000; 0: as fast as buffers come back (0)"}},
    .default_port = 5010,
    .ports = 2,  // the primary channel's rdma_cm port and the secondary's, + 1
    .blocking = false,
    .check = [](const ctl::ServiceConfig& sc) { options(sc); },
    .make = [](runtime::ServiceEnv& env) -> std::unique_ptr<runtime::HostedService> {
      return std::make_unique<NetfrService>(env);
    },
}};

}  // namespace

}  // namespace roce::netfr
