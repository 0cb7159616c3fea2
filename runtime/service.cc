/// @file
/// The registry of hosted service kinds and the Context roced lends a service (service.h).
#include "runtime/service.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "client/local/local_context.h"
#include "dataplane/engine/engine.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/poll_loop.h"

namespace roce::runtime {

const char* to_string(ServiceState s) {
  switch (s) {
    case ServiceState::kStarting:
      return "starting";
    case ServiceState::kRunning:
      return "running";
    case ServiceState::kFailed:
      return "failed";
    case ServiceState::kStopped:
      return "stopped";
  }
  return "?";
}

std::unique_ptr<client::Context> ServiceEnv::open_context() const {
  client::LocalOptions o;
  o.engine = &engine;
  port::PollLoop* l = &loop;
  o.progress = [l] { l->poll_once(); };
  // A hosted service never waits for ARP: the answer arrives while roced polls, and the
  // caller (the CM, modify_qp) tries again.
  o.resolve = [l](Ipv4Addr ip) -> std::optional<MacAddr> {
    if (auto known = l->neighbour().lookup(ip)) return known;
    l->resolve(ip);
    return std::nullopt;
  };
  o.neighbour = [l](Ipv4Addr ip, bool ask) {
    if (l->neighbour().lookup(ip)) return true;
    if (ask) l->resolve(ip);
    return false;
  };
  o.cm_connections = cm_connections;  // roced's limits.cm_connections, if the first on the CM
  o.port.name = port_name;
  o.port.mac = mac;
  o.port.ipv4 = ipv4;
  o.port.gid = ipv4_mapped(ipv4);
  o.port.max_mtu = engine.config().max_mtu;
  return client::open_local(std::move(o));
}

std::string ServiceEnv::name() const {
  return "services[" + std::to_string(index) + "] (" + config.kind + ")";
}

ServiceRegistry& ServiceRegistry::instance() {
  static ServiceRegistry r;  // made at first use: registration objects run before main()
  return r;
}

void ServiceRegistry::add(ServiceKind k) {
  if (k.name.empty() || !k.make || find(k.name) != nullptr) {
    std::fprintf(stderr, "service registry: kind '%s' %s\n", k.name.c_str(),
                 k.name.empty() ? "has no name"
                 : !k.make      ? "has no make()"
                                : "is registered twice");
    std::abort();
  }
  kinds_.push_back(std::make_unique<ServiceKind>(std::move(k)));
}

const ServiceKind* ServiceRegistry::find(const std::string& name) const {
  for (const auto& k : kinds_)
    if (k->name == name) return k.get();
  return nullptr;
}

std::vector<const ServiceKind*> ServiceRegistry::kinds() const {
  std::vector<const ServiceKind*> out;
  for (const auto& k : kinds_) out.push_back(k.get());
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->name < b->name; });
  return out;
}

ctl::ServiceKinds ServiceRegistry::catalog() const {
  ctl::ServiceKinds out;
  for (const ServiceKind* k : kinds()) {
    ctl::ServiceKindKeys x;
    x.name = k->name;
    for (const auto& key : k->keys) x.keys.push_back(key.name);
    x.default_port = k->default_port;
    x.ports = k->ports;
    out.push_back(std::move(x));
  }
  return out;
}

std::string ServiceRegistry::describe() const {
  std::ostringstream os;
  for (const ServiceKind* k : kinds()) {
    os << k->name << ": " << k->description << " (listen_port " << k->default_port;
    if (k->ports > 1) os << "-" << k->default_port + k->ports - 1;
    os << ")\n";
    for (const auto& key : k->keys) os << "    " << key.name << ": " << key.doc << '\n';
  }
  return os.str();
}

void ServiceRegistry::check(const ctl::ApplianceConfig& cfg) const {
  for (std::size_t i = 0; i < cfg.services.size(); ++i) {
    const ctl::ServiceConfig& sc = cfg.services[i];
    const ServiceKind* k = find(sc.kind);
    if (k == nullptr)  // the reader checked it against catalog(); another catalog was used
      throw std::runtime_error(service_error(i, sc.kind, "not a kind this program hosts"));
    if (!k->check) continue;
    try {
      k->check(sc);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(service_error(i, sc.kind, e.what()));
    }
  }
}

std::string service_error(std::size_t index, const std::string& kind, const std::string& what) {
  if (what.find("services[") != std::string::npos) return what;
  return "services[" + std::to_string(index) + "] (" + kind + "): " + what;
}

}  // namespace roce::runtime
