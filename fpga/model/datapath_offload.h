/// @file
/// The `datapath` offload mode on a poll loop's port: the card's stream stages (a DeviceModel in
/// `parse` mode: ICRC check and generation, the header parser) for every frame, and behind them
/// the DatapathCard, which takes the frames of the QPs it owns and sends its own. Everything
/// else (ARP, CM on QP1, the software engine's QPs) goes on to the host as in `parse` mode.
///
///   wire -> stream rx (ICRC, parser) -> card QPN? -> DatapathCard (net2dev_rx)
///                                          else  -> host (neighbour responder, engine)
///   host -> stream tx (ICRC) -> wire;  DatapathCard (dev2net_tx) -> wire
///
/// The host reaches the card only through its DatapathDriver (fpga/host/card_context.h gives
/// applications a libroce Context on it). Single-threaded: the loop that owns the port.
#pragma once

#include <array>
#include <cstdint>

#include "dataplane/port/frame_offload.h"
#include "fpga/model/datapath.h"
#include "fpga/model/device.h"

namespace roce::fpga {

/// QPNs of the card's QPs carry this lcore number (engine::lcore_of_qpn), which no roced lcore
/// uses: the host's and the card's QPNs never meet.
inline constexpr std::uint32_t kCardLcore = 15;

class DatapathOffload final : public port::FrameOffload {
 public:
  /// `stream`: the card's stream stages (parse mode), owned by the caller; `card`: the card's
  /// engine configuration (the port's MAC, IP, MTU; its lcore is set to kCardLcore here).
  DatapathOffload(DeviceModel& stream, DatapathCard::Config card);

  bool rx(std::span<const std::uint8_t> frame) override;
  std::span<const std::uint8_t> tx(std::span<const std::uint8_t> frame) override;
  std::size_t emit(std::uint64_t now_ns,
                   const std::function<void(std::span<const std::uint8_t>)>& send) override;

  DatapathDriver& driver() { return driver_; }
  /// The card's network statistics as one device: the stream stages' counts of every frame
  /// received and of the host's frames sent, plus what the card's transport sent, dropped by
  /// PSN, retransmitted, and its work requests and completions.
  std::array<std::uint64_t, kDevCounters> counters();
  /// Frames rx() handed to the card.
  std::uint64_t to_card() const { return to_card_; }

 private:
  DeviceModel& stream_;
  DatapathCard card_;
  DatapathDriver driver_{card_};
  /// The loop's clock at the last emit(), which runs at the start of each iteration: rx() has
  /// no clock of its own.
  std::uint64_t now_ = 0;
  std::uint64_t to_card_ = 0;
};

}  // namespace roce::fpga
