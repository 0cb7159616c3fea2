/// @file
/// One DPDK port brought up for RoCE: the port, an engine and a poll loop per lcore (loop i on
/// queue i, joined so that frames reach the lcore of their QP), and the FPGA offload's device
/// model in front of each loop when one is asked for. roced makes one per configured port;
/// runtime::Env makes one on a single lcore. Call port::eal_init first (the EAL and its
/// arguments are the program's: roced's come from its configuration, Env's from its link).
#pragma once

#include <roce/client.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/engine/engine.h"
#include "dataplane/fault_injector.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/poll_loop.h"
#include "fpga/model/device.h"

namespace roce::fpga {
class DatapathOffload;
}

namespace roce::runtime {

/// The FPGA offload on a port: none, icrc, parse (fpga/model's stream stages in front of the
/// engine), or datapath (the parse stages with the card's transport behind them, on one lcore).
struct Offload {
  std::string mode = "none";
  std::uint32_t clock_mhz = 250, bytes_per_cycle = 64, line_gbps = 100;
  bool on() const { return mode != "none" && !mode.empty(); }
};
/// True for none, icrc, parse and datapath.
bool is_offload_mode(const std::string& mode);
/// ROCE_OFFLOAD: the offload a test suite asks every port for (docs/fpga.md); nullopt when
/// unset or empty; throws std::invalid_argument when it names no mode.
std::optional<std::string> env_offload();

struct PortOptions {
  port::PortSpec spec;               ///< spec.queues is set to `lcores`
  engine::EngineConfig engine;       ///< engine.lcore is set per loop
  FaultPolicy tx_faults, rx_faults;  ///< every loop's
  unsigned lcores = 1;
  Offload offload;
};

class Port {
 public:
  /// Brings the port up (not waiting for its link); throws std::runtime_error from the port
  /// layer, std::invalid_argument for an offload mode that is none of the four or a datapath
  /// on more than one lcore.
  explicit Port(const PortOptions& o);
  ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  unsigned lcores() const { return static_cast<unsigned>(loops_.size()); }
  port::DpdkPort& dev() { return *dev_; }
  engine::Engine& eng(unsigned lcore = 0) { return *engines_[lcore]; }
  port::PollLoop& loop(unsigned lcore = 0) { return *loops_[lcore]; }
  const Offload& offload() const { return offload_; }
  /// The device model in front of `lcore`'s loop; null without an offload.
  fpga::DeviceModel* device(unsigned lcore = 0) {
    return devices_.empty() ? nullptr : devices_[lcore].get();
  }
  /// The datapath card (offload datapath); null otherwise.
  fpga::DatapathOffload* card() { return card_.get(); }
  /// The device's counters: the card's, or lcore 0's stream stages' (read on lcore 0).
  std::array<std::uint64_t, fpga::kDevCounters> device_counters();
  /// A Context whose RC QPs live on the datapath card (fpga/host/card_context.h), named
  /// `name`; null with errno EINVAL without a card.
  std::unique_ptr<client::Context> open_card(const std::string& name = {});

 private:
  Offload offload_;
  std::unique_ptr<port::DpdkPort> dev_;
  std::vector<std::unique_ptr<engine::Engine>> engines_;
  std::vector<std::unique_ptr<port::PollLoop>> loops_;
  std::vector<std::unique_ptr<fpga::DeviceModel>> devices_;
  std::unique_ptr<fpga::DatapathOffload> card_;
};

}  // namespace roce::runtime
