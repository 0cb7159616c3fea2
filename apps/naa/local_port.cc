/// @file
/// The NAA on an engine and poll loop in this process (local_port.h).
#include "apps/naa/local_port.h"

#include <cstdlib>
#include <map>

#include "client/local/local_context.h"
#include "dataplane/engine/engine.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/poll_loop.h"

namespace roce::naa {

std::function<std::optional<MacAddr>(Ipv4Addr)> neighbour_lookup(port::PollLoop& loop) {
  auto asked = std::make_shared<std::map<std::uint32_t, std::uint64_t>>();
  return [&loop, asked](Ipv4Addr ip) -> std::optional<MacAddr> {
    if (const auto mac = loop.neighbour().lookup(ip)) {
      asked->erase(ip.v);
      return mac;
    }
    const std::uint64_t now = port::now_ns();
    std::uint64_t& next = (*asked)[ip.v];
    if (now >= next) {
      loop.resolve(ip);
      next = now + 200'000'000;
    }
    if (asked->size() > 4096) asked->clear();  // addresses that never answered
    return std::nullopt;
  };
}

LocalPort open_local_port(engine::Engine& eng, port::PollLoop& loop, Ipv4Addr ip,
                          std::uint32_t cm_connections) {
  client::LocalOptions o;
  o.engine = &eng;
  o.progress = [&loop] { loop.poll_once(); };
  o.resolve = neighbour_lookup(loop);
  o.port.mac = eng.config().mac;
  o.port.ipv4 = ip;
  o.port.gid = ipv4_mapped(ip);
  o.port.max_mtu = eng.config().max_mtu;
  o.cm_connections = cm_connections;
  LocalPort p;
  p.stack.neighbour = [r = o.resolve](Ipv4Addr a) { return r(a).has_value(); };
  p.ctx = client::open_local(std::move(o));
  return p;
}

std::string transport_report(const engine::Engine& eng, const port::PollLoop& loop) {
  using engine::Counter;
  const auto& st = eng.stats();
  std::uint64_t txd = 0, rxd = 0;
  if (loop.faults()) txd = loop.faults()->stats().dropped;
  if (loop.rx_faults()) rxd = loop.rx_faults()->stats().dropped;
  std::string out = "retransmitted " + std::to_string(st.get(Counter::kRetransmittedPackets)) +
                    ", timeouts " + std::to_string(st.get(Counter::kRetransmitTimeouts)) +
                    ", RNR NAKs sent " + std::to_string(st.get(Counter::kRnrNakSent)) +
                    " received " + std::to_string(st.get(Counter::kRnrNakRcvd)) +
                    ", injected drops tx " + std::to_string(txd) + " rx " + std::to_string(rxd) +
                    "\n";
  if (!std::getenv("NAAICE_ALL_COUNTERS")) return out;
  for (std::size_t i = 0; i < engine::kCounterCount; ++i) {
    const auto c = static_cast<Counter>(i);
    if (st.get(c)) out += "  " + std::string(to_string(c)) + " " + std::to_string(st.get(c)) + "\n";
  }
  return out;
}

}  // namespace roce::naa
