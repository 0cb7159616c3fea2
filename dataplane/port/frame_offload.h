/// @file
/// Where a poll loop's frames cross into an offload device (fpga/: a model standing in for an
/// FPGA between the host and the wire): every frame received passes rx() before the neighbour
/// responder and the engine see it, every frame sent passes tx() before the port. A device
/// with a transport of its own (the `datapath` mode: RC QPs on the card) also takes frames for
/// its QPs in rx() and sends frames of its own through emit(). A loop without an offload pays
/// nothing; with one, transmit copies (no zero-copy frames: the device owns the bytes it
/// sends).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

namespace roce::port {

class FrameOffload {
 public:
  virtual ~FrameOffload() = default;
  /// A frame from the wire on its way to the host: false when the host is not to see it, because
  /// the device dropped it (and counted why) or took it for a QP of its own.
  virtual bool rx(std::span<const std::uint8_t> frame) = 0;
  /// A frame from the host on its way to the wire: the frame the device sends, valid until the
  /// next call.
  virtual std::span<const std::uint8_t> tx(std::span<const std::uint8_t> frame) = 0;
  /// Once per loop iteration: the device's own clock (its work requests, timers) and the frames
  /// it sends by itself, each handed to `send` (which puts it on the wire as it is). Returns
  /// the work done (frames sent, requests taken), counted as the iteration's activity.
  virtual std::size_t emit(std::uint64_t /*now_ns*/,
                           const std::function<void(std::span<const std::uint8_t>)>& /*send*/) {
    return 0;
  }
};

}  // namespace roce::port
