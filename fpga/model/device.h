/// @file
/// The device model: what an FPGA between the host and the wire does to frames, computed by
/// the HLS-style kernels themselves (hls/: bit-accurate by construction) behind the typed ports
/// of iface/ports.h, with a timing model per stage (clock, bytes per clock, pipeline depth) so
/// that it also predicts what a card would achieve. It runs in the appliance in place of a real
/// card (port::FrameOffload) and in the tests.
///
/// Offload modes (YAML `offload:` of a port; docs/fpga.md):
///   icrc   the device checks the ICRC of every received RoCE frame (a bad one is dropped and
///          counted) and writes the ICRC of every RoCE frame sent
///   parse  icrc, plus the header parser: malformed RoCE frames are dropped with their reason
///          and the parser's RxMeta goes with every frame to the host (dev2host_rx_meta)
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "dataplane/port/frame_offload.h"
#include "fpga/hls/icrc_kernel.h"
#include "fpga/hls/parser_kernel.h"
#include "fpga/hls/stream.h"
#include "fpga/iface/ports.h"

namespace roce::fpga {

enum class OffloadMode : std::uint8_t { kNone, kIcrc, kParse };
std::optional<OffloadMode> parse_offload_mode(std::string_view s);
std::string_view to_string(OffloadMode m);

/// One pipeline stage: its depth in clocks (the latency a frame's first flit sees).
struct StageTiming {
  std::string_view name;
  unsigned latency_cycles;
};

struct DeviceConfig {
  OffloadMode mode = OffloadMode::kIcrc;
  double clock_mhz = 250;              ///< U55C user clock for the network stack
  unsigned bytes_per_cycle = 64;       ///< 512-bit datapath
  double line_gbps = 100;              ///< the card's link
  unsigned mac_latency_cycles = 40;    ///< CMAC + FIFO, each direction
  unsigned icrc_latency_cycles = 2;    ///< rtl/icrc_unit: one register stage + output
  unsigned parse_latency_cycles = 4;   ///< header window (2 flits) + decide + meta
  unsigned host_dma_latency_ns = 900;  ///< PCIe DMA, host memory to the card (an assumption)
};

/// Timing of the frames a model has seen: what the stages were busy with, in clocks.
struct DeviceTiming {
  std::uint64_t rx_frames = 0, tx_frames = 0;
  std::uint64_t rx_bytes = 0, tx_bytes = 0;
  std::uint64_t rx_busy_cycles = 0, tx_busy_cycles = 0;  ///< flits: one per clock
  std::uint64_t rx_latency_cycles_max = 0, tx_latency_cycles_max = 0;
};

/// What the model predicts for a transfer on a card of its configuration.
struct Prediction {
  double gbps = 0;           ///< payload throughput of back-to-back messages
  double latency_us = 0;     ///< one message, host to remote host memory (half a ping-pong)
  double pipeline_gbps = 0;  ///< what the datapath alone could carry (clock x width)
};

class DeviceModel final : public port::FrameOffload {
 public:
  explicit DeviceModel(const DeviceConfig& cfg);

  // ---- port::FrameOffload: net2dev_rx -> dev2host_rx, host2dev_tx -> dev2net_tx ----
  bool rx(std::span<const std::uint8_t> frame) override;
  std::span<const std::uint8_t> tx(std::span<const std::uint8_t> frame) override;

  /// The parser's meta of the last frame rx() passed (parse mode; verdict 0).
  const RxMeta& last_rx_meta() const { return last_meta_; }
  const std::array<std::uint64_t, kDevCounters>& counters() const { return cnt_; }
  std::uint64_t counter(DevCounter c) const { return cnt_[static_cast<std::size_t>(c)]; }
  const DeviceTiming& timing() const { return timing_; }
  const DeviceConfig& config() const { return cfg_; }
  /// The stages a frame goes through in this mode, per direction.
  std::span<const StageTiming> rx_stages() const { return {rx_stages_.data(), n_rx_stages_}; }
  std::span<const StageTiming> tx_stages() const { return {tx_stages_.data(), n_tx_stages_}; }

  /// Predicted throughput and latency of a RoCE WRITE or READ of `size` bytes at path MTU
  /// `mtu` on a card of this configuration (both ends offloaded the same way).
  Prediction predict(std::uint64_t size, std::uint32_t mtu, bool read) const;

 private:
  void inc(DevCounter c) { ++cnt_[static_cast<std::size_t>(c)]; }
  /// Counts ARP, ICMP and RoCE frames by their headers; true for a RoCE frame.
  bool classify(std::span<const std::uint8_t> f, bool rx);
  std::uint64_t cycles(std::size_t bytes) const {
    return (bytes + cfg_.bytes_per_cycle - 1) / cfg_.bytes_per_cycle;
  }

  static constexpr std::size_t kMaxFlits = 160;  ///< 9216-byte jumbo frames + a flit
  DeviceConfig cfg_;
  hls::IcrcUnit rx_icrc_, tx_icrc_;
  hls::HeaderParser parser_;
  hls::Stream<Flit, 256> net2dev_rx_, dev2host_rx_, host2dev_tx_, dev2net_tx_;
  hls::Stream<hls::IcrcResult, 4> rx_icrc_res_;
  hls::Stream<RxMeta, 4> dev2host_rx_meta_;
  std::array<std::uint8_t, kMaxFlits * kFlitBytes> out_{};
  std::array<Flit, kMaxFlits> flits_{};
  RxMeta last_meta_;
  std::array<std::uint64_t, kDevCounters> cnt_{};
  DeviceTiming timing_;
  std::array<StageTiming, 3> rx_stages_{}, tx_stages_{};
  std::size_t n_rx_stages_ = 0, n_tx_stages_ = 0;
};

/// Counters in the layout of Coyote's network statistics (cyt_attr_nstats): " -- NET STATS
/// <title>" and one "Name: value" line per counter, Coyote's names first.
std::string format_nstats(const std::array<std::uint64_t, kDevCounters>& c, std::string_view title);

/// DeviceConfig from a port's `offload:` settings (controlplane/config.h PortConfig::offload).
DeviceConfig device_config(OffloadMode mode, std::uint32_t clock_mhz, std::uint32_t bytes_per_cycle,
                           std::uint32_t line_gbps);

}  // namespace roce::fpga
