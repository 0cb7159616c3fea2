/// @file
/// NetFR's in-process stack (local_stack.h).
#include "apps/netfr/local_stack.h"

#include <stdexcept>

#include "apps/netfr/context_fabric.h"
#include "apps/netfr/endpoint.h"
#include "client/local/local_context.h"
#include "runtime/env.h"
#include "runtime/link.h"

namespace roce::netfr {

LocalContext open_local_context(const std::string& link, std::string& err) {
  LocalContext out;
  runtime::LinkOptions lt = runtime::LinkOptions::text_defaults();
  if (!runtime::parse_link_text(link, lt, err)) return out;
  std::shared_ptr<runtime::Env> env;
  try {
    env = std::shared_ptr<runtime::Env>(new runtime::Env(lt), [](runtime::Env* e) {
      delete e;
      port::eal_cleanup();
    });
  } catch (const std::exception& e) {
    err = std::string("cannot start the stack: ") + e.what();
    return out;
  }
  runtime::Env* e = env.get();
  client::LocalOptions o;
  o.engine = &e->eng;
  o.progress = [e] { e->loop.poll_once(); };
  o.resolve = [e](Ipv4Addr ip) { return port::resolve_wait(e->loop, ip, 5); };
  o.port.name = "netfr";
  o.port.mac = e->eng.config().mac;
  o.port.ipv4 = e->ip;
  o.port.gid = e->gid;
  o.port.max_mtu = e->eng.config().max_mtu;
  out.ctx = client::open_local(std::move(o));
  if (!out.ctx) {
    err = "cannot open the in-process context";
    return out;
  }
  out.report = [e] {
    const auto& st = e->eng.stats();
    std::uint64_t txd = 0, rxd = 0;
    if (e->loop.faults()) txd = e->loop.faults()->stats().dropped;
    if (e->loop.rx_faults()) rxd = e->loop.rx_faults()->stats().dropped;
    using engine::Counter;
    return "retransmitted " + std::to_string(st.get(Counter::kRetransmittedPackets)) +
           " timeouts " + std::to_string(st.get(Counter::kRetransmitTimeouts)) + " rnr_naks " +
           std::to_string(st.get(Counter::kRnrNakRcvd)) + " injected_drops_tx " +
           std::to_string(txd) + " rx " + std::to_string(rxd);
  };
  out.keep = std::move(env);
  return out;
}

namespace {

std::unique_ptr<Fabric> open_local_fabric(const std::string& link, std::string& err) {
  LocalContext lc = open_local_context(link, err);
  if (!lc.ctx) return nullptr;
  auto f = std::make_unique<ContextFabric>(std::move(lc.ctx), std::move(lc.keep));
  f->set_report(std::move(lc.report));
  return f;
}

}  // namespace

void use_local_stack() { set_local_opener(&open_local_fabric); }

}  // namespace roce::netfr
