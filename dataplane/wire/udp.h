/// @file
/// UDP header (RFC 768). RoCEv2 is UDP destination port 4791; the source port is flow entropy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dataplane/wire/bytes.h"
#include "dataplane/wire/view.h"

namespace roce::wire {

inline constexpr std::uint16_t kRoceV2Port = 4791;

template <class Byte>
class BasicUdpView : public ViewBase<Byte> {
  using ViewBase<Byte>::p_;
  static constexpr bool M = ViewBase<Byte>::kMutable;

 public:
  static constexpr std::size_t kSize = 8;
  using ViewBase<Byte>::ViewBase;

  std::uint16_t src_port() const { return load_be16(p_); }
  std::uint16_t dst_port() const { return load_be16(p_ + 2); }
  /// Header plus data, in bytes.
  std::uint16_t length() const { return load_be16(p_ + 4); }
  std::uint16_t checksum() const { return load_be16(p_ + 6); }

  void set_src_port(std::uint16_t v) requires M { store_be16(p_, v); }
  void set_dst_port(std::uint16_t v) requires M { store_be16(p_ + 2, v); }
  void set_length(std::uint16_t v) requires M { store_be16(p_ + 4, v); }
  void set_checksum(std::uint16_t v) requires M { store_be16(p_ + 6, v); }
};

using UdpView = BasicUdpView<std::uint8_t>;
using ConstUdpView = BasicUdpView<const std::uint8_t>;

}  // namespace roce::wire
