#include "dataplane/engine/key_random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace roce::engine {

KeyRandom::KeyRandom(std::uint64_t seed) : seed_(seed), det_(seed) {}

std::uint64_t KeyRandom::next() {
  if (seed_ != 0) return det_();
  if (used_ == batch_.size()) refill();
  return batch_[used_++];
}

void KeyRandom::refill() {
  auto* p = reinterpret_cast<unsigned char*>(batch_.data());
  std::size_t left = sizeof(batch_);
  while (left > 0) {
    const ssize_t n = getrandom(p, left, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  used_ = 0;
}

}  // namespace roce::engine
