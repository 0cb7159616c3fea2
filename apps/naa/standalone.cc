/// @file
/// The NAA's processes on a DPDK port of their own (standalone.h).
#include "apps/naa/standalone.h"

#include <sched.h>

#include "apps/naa/local_port.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "runtime/env.h"

namespace roce::naa {

struct Standalone::Env {
  explicit Env(const runtime::LinkOptions& l) : env(l) {}
  runtime::Env env;
};

Standalone::Standalone(const runtime::LinkOptions& link) : env_(std::make_unique<Env>(link)) {
  LocalPort p = open_local_port(env_->env.eng, env_->env.loop, env_->env.ip, 4096);
  if (!p.ctx) throw std::runtime_error("cannot open the engine's context");
  ctx_ = std::move(p.ctx);
  stack_ = std::move(p.stack);
}

Standalone::~Standalone() {
  ctx_.reset();  // its CM's DREQs answered, its resources gone, while the port still runs
  env_.reset();
}

std::string Standalone::transport_report() const {
  return naa::transport_report(env_->env.eng, env_->env.loop);
}

void Standalone::yield() { sched_yield(); }

void Standalone::cleanup() { port::eal_cleanup(); }

}  // namespace roce::naa
