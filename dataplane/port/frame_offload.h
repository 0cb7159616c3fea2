/// @file
/// Where a poll loop's frames cross into an offload device (fpga/: a model standing in for an
/// FPGA between the host and the wire): every frame received passes rx() before the neighbour
/// responder and the engine see it, every frame sent passes tx() before the port. A loop
/// without an offload pays nothing; with one, transmit copies (no zero-copy frames: the device
/// owns the bytes it sends).
#pragma once

#include <cstdint>
#include <span>

namespace roce::port {

class FrameOffload {
 public:
  virtual ~FrameOffload() = default;
  /// A frame from the wire on its way to the host: false when the device dropped it (and
  /// counted why).
  virtual bool rx(std::span<const std::uint8_t> frame) = 0;
  /// A frame from the host on its way to the wire: the frame the device sends, valid until the
  /// next call.
  virtual std::span<const std::uint8_t> tx(std::span<const std::uint8_t> frame) = 0;
};

}  // namespace roce::port
