/// @file
/// runtime::AttachedEnv (attached.h).
#include "runtime/attached.h"

#include <time.h>

#include <cerrno>
#include <cstring>

namespace roce::runtime {

AttachedEnv::AttachedEnv(const std::string& socket, const std::string& port_name,
                         bool sleep_when_idle)
    : ctx_(client::Context::attach(socket, port_name)), sleep_(sleep_when_idle) {
  if (!ctx_) {
    const int e = errno;
    std::string why = std::strerror(e);
    if (e == ENOENT || e == ECONNREFUSED) why += " (is roced running with attach.socket there?)";
    if (e == ENODEV) why = "roced has no port '" + port_name + "'";
    fail("cannot attach to " + socket + ": " + why);
  }
}

bool AttachedEnv::step() {
  if (!ctx_->connected()) fail("roced went away (the attach socket closed)");
  return false;
}

}  // namespace roce::runtime

namespace roce::runtime {
void AttachedEnv::rest() {
  if (!sleep_) return yield();
  const timespec t{0, 50'000};
  nanosleep(&t, nullptr);
}
}  // namespace roce::runtime
