/// @file
/// CmHub: one CM agent per engine, events routed to their owners (cm_hub.h).
#include "controlplane/cm/cm_hub.h"

#include <algorithm>
#include <mutex>
#include <random>

namespace roce::cm {

namespace {
std::mutex g_mu;
std::map<const engine::Engine*, std::weak_ptr<CmHub>> g_hubs;
}  // namespace

CmAgentConfig agent_config(
    const wire::MacAddr& m, std::uint32_t max_connections, std::function<std::uint64_t()> clock,
    std::function<std::optional<wire::MacAddr>(wire::Ipv4Addr, bool ask)> neighbour) {
  CmAgentConfig c;
  const std::uint8_t g[8] = {
      static_cast<std::uint8_t>(m.b[0] ^ 2), m.b[1], m.b[2], 0xFF, 0xFE, m.b[3], m.b[4], m.b[5]};
  c.cm.ca_guid = wire::load_be64(g);
  std::random_device rd;
  c.cm.hi_tid = rd();
  c.cm.seed = rd();
  c.cm.max_connections = max_connections;
  c.clock = clock;
  // The agent calls it on its own thread only: the budget needs no lock.
  struct Budget {
    std::uint64_t window_ns = 0;
    int asks = 0;
  };
  c.resolve_mac =
      [n = std::move(neighbour), clock = std::move(clock),
       b = std::make_shared<Budget>()](const Ipv6Addr& gid) -> std::optional<wire::MacAddr> {
    static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    if (!n || !std::equal(kMapped, kMapped + 12, gid.b.begin())) return std::nullopt;
    const std::uint64_t now = clock ? clock() : 0;
    if (now - b->window_ns >= 100'000'000) {
      b->window_ns = now;
      b->asks = 0;
    }
    const bool ask = b->asks < kCmArpAsks;
    auto mac = n(wire::Ipv4Addr{wire::load_be32(gid.b.data() + 12)}, ask);
    if (!mac && ask) ++b->asks;
    return mac;
  };
  return c;
}

std::shared_ptr<CmHub> CmHub::get(engine::Engine& eng, const CmAgentConfig& cfg) {
  std::lock_guard<std::mutex> g(g_mu);
  if (auto h = g_hubs[&eng].lock()) return h;
  auto h = std::make_shared<CmHub>(eng, cfg);
  g_hubs[&eng] = h;
  return h;
}

CmHub::CmHub(engine::Engine& eng, CmAgentConfig cfg)
    : eng_(eng), agent_(eng, std::move(cfg), [this](const CmEvent& e) { route(e); }) {}

CmHub::~CmHub() {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_hubs.find(&eng_);
  if (it != g_hubs.end() && it->second.expired()) g_hubs.erase(it);
}

CmHub::Owner CmHub::add_owner(CmAgent::EventFn on_event) {
  const Owner o = next_owner_++;
  owners_[o] = std::move(on_event);
  return o;
}

void CmHub::remove_owner(Owner o) {
  owners_.erase(o);
  std::erase_if(services_, [&](const auto& kv) {
    if (kv.second != o) return false;
    agent_.cm().unlisten(kv.first);
    return true;
  });
  std::erase_if(conns_, [&](const auto& kv) { return kv.second == o; });
}

bool CmHub::listen(Owner o, std::uint64_t service_id) {
  auto it = services_.find(service_id);
  if (it != services_.end()) return it->second == o;
  services_[service_id] = o;
  agent_.cm().listen(service_id);
  return true;
}

void CmHub::unlisten(Owner o, std::uint64_t service_id) {
  auto it = services_.find(service_id);
  if (it == services_.end() || it->second != o) return;
  services_.erase(it);
  agent_.cm().unlisten(service_id);
}

std::optional<ConnId> CmHub::connect(Owner o, engine::Qp* qp, ConnectParams p) {
  const auto id = agent_.connect(qp, std::move(p));
  if (id) own(*id, o);
  return id;
}

std::optional<ConnId> CmHub::sidr_resolve(Owner o, const SidrParams& p) {
  const auto id = agent_.cm().sidr_resolve(p);
  if (id) own(*id, o);
  return id;
}

void CmHub::own(ConnId id, Owner o) {
  if (conns_.size() >= 2 * agent_.cm().size() + 64)
    std::erase_if(
        conns_, [this](const auto& kv) { return agent_.cm().state(kv.first) == ConnState::kIdle; });
  conns_[id] = o;
}

std::optional<CmHub::Owner> CmHub::owner_of(ConnId id) const {
  auto it = conns_.find(id);
  if (it == conns_.end()) return std::nullopt;
  return it->second;
}

void CmHub::route(const CmEvent& ev) {
  Owner o = 0;
  if (ev.type == CmEventType::kConnectRequest || ev.type == CmEventType::kSidrRequest) {
    auto s = services_.find(ev.service_id);
    if (s == services_.end() || !owners_.count(s->second)) {
      if (ev.type == CmEventType::kConnectRequest)
        agent_.cm().reject(ev.id, RejReason::kInvalidServiceId);
      else
        agent_.cm().sidr_reject(ev.id, SidrStatus::kUnsupported);
      return;
    }
    o = s->second;
    own(ev.id, o);
  } else {
    auto c = conns_.find(ev.id);
    if (c == conns_.end()) return;  // its owner left
    o = c->second;
    // The end of a connection (its timewait) or of an active SIDR exchange (its reply).
    if (ev.type == CmEventType::kTimewaitExit || ev.type == CmEventType::kSidrReply)
      conns_.erase(c);
  }
  auto f = owners_.find(o);
  if (f != owners_.end() && f->second) {
    const auto fn = f->second;  // the callback may add or remove owners
    fn(ev);
  }
}

}  // namespace roce::cm
