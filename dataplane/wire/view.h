/// @file
/// Common shape of every header view: a pointer to the first byte of the header, const or
/// mutable. Setters exist only on the mutable flavour (`requires kMutable`).
#pragma once

#include <cstdint>
#include <type_traits>

namespace roce::wire {

template <class Byte>
class ViewBase {
  static_assert(std::is_same_v<std::remove_const_t<Byte>, std::uint8_t>,
                "views are over std::uint8_t or const std::uint8_t");

 public:
  static constexpr bool kMutable = !std::is_const_v<Byte>;
  explicit ViewBase(Byte* p) : p_(p) {}
  Byte* data() const { return p_; }

 protected:
  Byte* p_;
};

}  // namespace roce::wire
