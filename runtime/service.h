/// @file
/// Applications hosted in roced: one interface (HostedService) and a registry of the kinds of
/// service a configuration may name (`services: - kind: echo`). Each application registers its
/// kinds from its own folder (apps/<app>/<app>_hosted.cc, a RegisterService object); roced's
/// main and the configuration reader know no kind by name. The walkthrough:
/// docs/new-application.md.
///
/// What roced lends a service (ServiceEnv): its entry of the configuration, the port it runs
/// on (lcore 0's engine and poll loop, and a libroce Context on that engine), the management
/// address its TCP listeners use, and, for a service that runs an exchange to completion, a way
/// to keep the rest of the appliance going meanwhile. What the service gives roced: check()
/// (roced --check, and before start), start, poll (on the port's loop thread, between its
/// polls), stop, its counters (Prometheus) and its state.
///
/// Threads: everything here runs on roced's main lcore (loop 0 of every port), one call at a
/// time. A service that needs a thread of its own (the NFS server's call worker) owns it.
///
/// Linking: a RegisterService object in a static library is dropped by the linker, as nothing
/// refers to it. The registration files are therefore built as CMake OBJECT libraries with
/// roce_hosted_service() (cmake/RoceTargets.cmake), whose objects roced links whole.
#pragma once

#include <roce/addr.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "controlplane/config.h"

namespace roce::engine {
class Engine;
}
namespace roce::port {
class PollLoop;
}
namespace roce::client {
class Context;
}

namespace roce::runtime {

/// One counter of a service, exported as roce_<name>{appliance, port} (Prometheus) and as
/// <port>.<name> (DPDK telemetry). Name it after the kind (echo_messages, nfs_calls): names are
/// per port, and two services on a port must not report the same one.
struct ServiceCounter {
  std::string name;  ///< snake_case, no prefix
  std::string help;  ///< one line for # HELP (empty: none)
  std::uint64_t value = 0;
  bool gauge = false;  ///< a level (connections now), not a count
};

enum class ServiceState : std::uint8_t {
  kStarting,  ///< made, not started
  kRunning,   ///< start() returned
  kFailed,    ///< poll() threw; roced polls it no more (state_reason() says why)
  kStopped,   ///< stop() returned
};
const char* to_string(ServiceState s);

/// Thrown by ServiceEnv::background when roced is asked to stop (SIGINT, SIGTERM) while a
/// service runs an exchange to completion: the service abandons it, and poll() returns. Not a
/// std::exception, so that a service's own `catch (const std::exception&)` lets it through.
struct HostShutdown {};

/// What roced lends a service. References stay valid until the service is destroyed.
struct ServiceEnv {
  const ctl::ServiceConfig& config;  ///< services[index]
  std::size_t index = 0;
  /// The port the service runs on: loop 0's engine and poll loop (roced's main lcore). roced
  /// polls the loop; poll() runs between its polls, on the same thread.
  std::string port_name;
  engine::Engine& engine;
  port::PollLoop& loop;
  MacAddr mac;
  Ipv4Addr ipv4;
  /// The management address (control.listen's): where the service's TCP listeners listen
  /// unless config.listen_address says otherwise (config.listen_address already says which).
  Ipv4Addr management;
  std::uint32_t cm_connections = 4096;  ///< limits.cm_connections: its CM agents' bound
  /// For a kind registered `blocking`: runs the rest of the appliance once (the other ports'
  /// loops, the non-blocking services, the counters), not this port's loop; throws
  /// HostShutdown when roced is asked to stop. Call it between polls of the port's loop.
  std::function<void()> background;
  /// The port's FPGA datapath card (`offload: datapath`) as a Context; null otherwise.
  std::function<std::unique_ptr<client::Context>()> open_card;

  /// A libroce Context on the port's engine (the in-process backend, client/local): what an
  /// application written on <roce/client.h> and <roce/conn.h> uses, hosted. Its progress is a
  /// poll of the port's loop; addresses resolve through the port's neighbour cache (an ARP
  /// request when one is missing, never a wait). Make it in start(), destroy it in stop().
  std::unique_ptr<client::Context> open_context() const;
  /// "services[i] (kind)": how roced's log and errors name the service.
  std::string name() const;
};

/// A hosted application. roced makes it (ServiceKind::make), calls start() once, poll() on
/// every turn of its main loop, counters() about ten times a second, and stop() then
/// report() when it stops; then destroys it. All on the same thread.
class HostedService {
 public:
  virtual ~HostedService() = default;
  /// Listens (rdma_cm ports, TCP listeners) and makes what it serves with; throws
  /// std::runtime_error when it cannot (roced then exits 1, naming services[i]).
  virtual void start() = 0;
  /// Serves what arrived; returns at once when nothing did. True when it did something. A
  /// `blocking` kind may run one exchange to completion here (calling env.background). A
  /// std::exception out of poll() fails the service alone (kFailed, logged).
  virtual bool poll() = 0;
  /// Closes its connections and listeners (the port's loop still runs). Called once.
  virtual void stop() = 0;
  /// Appends its counters (called on the loop thread; keep it cheap).
  virtual void counters(std::vector<ServiceCounter>& out) const { (void)out; }
  /// What roced logs when it stops: lines ending in '\n', each starting with two spaces.
  virtual std::string report() const { return {}; }
  /// SIGHUP to roced: read again what the service reads from files (an NFS exports file, say).
  /// Returns the line roced logs; empty when the service reads nothing again.
  virtual std::string reload() { return {}; }
  /// What roced prints on SIGUSR1 while it runs (the NFS service: its NFSv4 clients, as
  /// `nfsdclnts`): read-only, bounded, never waiting on the service's own work; lines ending
  /// in '\n'. Empty: nothing to say.
  virtual std::string status() const { return {}; }

  ServiceState state() const { return state_; }
  const std::string& state_reason() const { return reason_; }
  /// roced and the service itself report the state here (e.g. kFailed with a reason).
  void set_state(ServiceState s, std::string reason = {}) {
    state_ = s;
    reason_ = std::move(reason);
  }

 private:
  ServiceState state_ = ServiceState::kStarting;
  std::string reason_;
};

/// The hosted services' common shape, for an application class `T` that is made from the
/// port roced lends (`T(config, engine, loop, ipv4, cm_connections)`), does its work in `step()`
/// and says what it did in `report()`: start() makes it, poll() steps it, stop() keeps its
/// report and destroys it. `name` is the kind, for the log lines.
template <class T>
class SteppedService : public HostedService {
 public:
  SteppedService(ServiceEnv& env, std::string name) : env_(env), name_(std::move(name)) {}
  void start() override {
    svc_ = std::make_unique<T>(env_.config, env_.engine, env_.loop, env_.ipv4, env_.cm_connections);
    std::printf("  service %s: rdma_cm port %u on port %s\n", name_.c_str(),
                env_.config.listen_port, env_.config.port.c_str());
    std::fflush(stdout);
  }
  bool poll() override {
    svc_->step();
    return false;  // the work is the port loop's, which roced counts itself
  }
  void stop() override {
    if (svc_) report_ = "  service " + name_ + ":\n" + svc_->report();
    svc_.reset();
  }
  std::string report() const override { return report_; }

 protected:
  ServiceEnv& env_;
  std::string name_;
  std::unique_ptr<T> svc_;
  std::string report_;
};

/// One of the service's own YAML keys, for the registry's listing (roced --services).
struct ServiceKey {
  std::string name;
  std::string doc;  ///< one line: what it sets, its default and range
};

/// A kind of service: its name in `services[i].kind`, its keys, how to check and make one.
struct ServiceKind {
  std::string name;
  std::string description;  ///< one line
  std::vector<ServiceKey> keys;
  std::uint16_t default_port = 18515;  ///< listen_port when the configuration gives none
  /// listen_port and the next ports - 1 are the service's (NetFR: 2, its two channels): the
  /// configuration reader keeps them from other services.
  std::uint16_t ports = 1;
  /// poll() may run an exchange to completion (perftest's servers): roced does not poll such a
  /// service from another's env.background, so that two never nest.
  bool blocking = false;
  /// Checks services[i] as start() would take it, without starting anything (roced --check,
  /// and roced before make): args, own keys, files. Throws std::runtime_error (ctl::ConfigError
  /// included). May be empty.
  std::function<void(const ctl::ServiceConfig&)> check;
  /// Makes the service (not started yet).
  std::function<std::unique_ptr<HostedService>(ServiceEnv&)> make;
};

/// The kinds this program can host. Filled before main() by RegisterService objects; read
/// after (no locking).
class ServiceRegistry {
 public:
  static ServiceRegistry& instance();
  /// Adds a kind; a name registered twice (or a kind without make) is a programming error:
  /// the process says so and aborts.
  void add(ServiceKind k);
  const ServiceKind* find(const std::string& name) const;
  /// Every kind, by name.
  std::vector<const ServiceKind*> kinds() const;
  /// What the configuration reader needs: each kind's name, keys and default port.
  ctl::ServiceKinds catalog() const;
  /// The listing of roced --services: every kind, its description and keys.
  std::string describe() const;
  /// Checks every service of `cfg` with its kind's check(); throws std::runtime_error naming
  /// services[i] (kind).
  void check(const ctl::ApplianceConfig& cfg) const;

 private:
  std::vector<std::unique_ptr<ServiceKind>> kinds_;  ///< pointers stay valid
};

/// Registers a kind at static initialisation: `const RegisterService kEcho{{.name = "echo",
/// ...}};` at namespace scope in the application's registration file.
struct RegisterService {
  explicit RegisterService(ServiceKind k) { ServiceRegistry::instance().add(std::move(k)); }
};

/// "services[i] (kind): " + what, unless `what` already names a services[] entry.
std::string service_error(std::size_t index, const std::string& kind, const std::string& what);

}  // namespace roce::runtime
