/// @file
/// roce-nfs's and roce-nfsd's link (link.h).
#include "apps/nfs/link.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "apps/nfs/in_process.h"
#include "runtime/env.h"
#include "runtime/port.h"

namespace roce::nfs {

LinkHolder::LinkHolder(const NfsLink& l) {
  if (!l.attach.empty()) {
    attached_ = true;
    ctx_ = client::Context::attach(l.attach, l.attach_port);
    if (!ctx_)
      throw std::runtime_error("cannot attach to roced at " + l.attach + ": " +
                               std::strerror(errno));
    return;
  }
  env_ = std::make_unique<runtime::Env>(l.link);
  ctx_ = open_local_context(env_->eng, env_->loop, env_->ip);
}

const port::PollLoop* LinkHolder::loop() const { return env_ ? &env_->loop : nullptr; }

const port::DpdkPort* LinkHolder::port() const {
  return env_ && env_->port() ? &env_->port()->dev() : nullptr;
}

LinkHolder::~LinkHolder() {
  ctx_.reset();  // the Context before the engine it stands on
  env_.reset();
}

}  // namespace roce::nfs
