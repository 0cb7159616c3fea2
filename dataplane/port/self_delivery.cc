/// @file
/// Self-delivery (self_delivery.h): the queue of frames for the port's own MAC.
#include "dataplane/port/self_delivery.h"

#include <algorithm>
#include <cstring>

namespace roce::port {

SelfDelivery::SelfDelivery(wire::MacAddr mac, std::uint32_t slots)
    : mac_(mac), slots_(std::max<std::uint32_t>(slots, 1)) {}

bool SelfDelivery::is_self(std::span<const std::uint8_t> frame) const {
  // The destination MAC leads the frame, tagged or not.
  return frame.size() >= 14 && std::memcmp(frame.data(), mac_.b.data(), mac_.b.size()) == 0;
}

std::vector<std::uint8_t>* SelfDelivery::slot() {
  if (count_ == slots_.size()) {
    ++stats_.dropped;
    return nullptr;
  }
  std::vector<std::uint8_t>* s = &slots_[(head_ + count_) % slots_.size()];
  ++count_;
  return s;
}

bool SelfDelivery::take(std::span<const std::uint8_t> frame) {
  std::vector<std::uint8_t>* s = slot();
  if (s == nullptr) return false;
  s->assign(frame.begin(), frame.end());  // reuses the slot's capacity after its first frame
  ++stats_.frames;
  stats_.bytes += frame.size();
  return true;
}

bool SelfDelivery::take(const engine::TxFrame& frame) {
  std::vector<std::uint8_t>* s = slot();
  if (s == nullptr) return false;
  frame.copy_to(*s);
  ++stats_.frames;
  stats_.bytes += s->size();
  return true;
}

}  // namespace roce::port
