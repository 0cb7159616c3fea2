/// @file
/// runtime::Port (port.h).
#include "runtime/port.h"

#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include "controlplane/address.h"
#include "fpga/host/card_context.h"
#include "fpga/model/datapath_offload.h"

namespace roce::runtime {

bool is_offload_mode(const std::string& m) {
  return m == "none" || m == "datapath" || fpga::parse_offload_mode(m).has_value();
}

std::optional<std::string> env_offload() {
  const char* e = std::getenv("ROCE_OFFLOAD");
  if (e == nullptr || *e == '\0') return std::nullopt;
  if (!is_offload_mode(e))
    throw std::invalid_argument("ROCE_OFFLOAD='" + std::string(e) +
                                "' is not an offload mode (none, icrc, parse, datapath)");
  return std::string(e);
}

Port::Port(const PortOptions& o) : offload_(o.offload) {
  if (offload_.mode.empty()) offload_.mode = "none";
  const bool datapath = offload_.mode == "datapath";
  std::optional<fpga::OffloadMode> mode;
  if (offload_.on()) {
    mode = datapath ? std::optional(fpga::OffloadMode::kParse)
                    : fpga::parse_offload_mode(offload_.mode);
    if (!mode)
      throw std::invalid_argument("offload '" + offload_.mode +
                                  "' is not a mode (icrc, parse, datapath)");
    if (datapath && o.lcores > 1)
      throw std::invalid_argument("the datapath offload runs on one lcore, not " +
                                  std::to_string(o.lcores));
  }
  port::PortSpec ps = o.spec;
  ps.queues = static_cast<std::uint16_t>(o.lcores);
  dev_ = std::make_unique<port::DpdkPort>(ps);
  engine::EngineConfig ec = o.engine;
  // What `rpg_max_rate_mbps: 0` (the default) means: the port's speed, as the driver reports it.
  if (ec.congestion.line_rate_mbps == 0) ec.congestion.line_rate_mbps = dev_->link_speed_mbps();
  std::vector<port::PollLoop*> loops;
  for (unsigned l = 0; l < o.lcores; ++l) {
    ec.lcore = l;
    engines_.push_back(std::make_unique<engine::Engine>(ec));
    loops_.push_back(std::make_unique<port::PollLoop>(*dev_, *engines_[l], o.tx_faults, o.rx_faults,
                                                      static_cast<std::uint16_t>(l)));
    if (mode) {
      devices_.push_back(std::make_unique<fpga::DeviceModel>(fpga::device_config(
          *mode, offload_.clock_mhz, offload_.bytes_per_cycle, offload_.line_gbps)));
      if (datapath) {
        // The card behind the parse stages; its RC QPs are opened with open_card().
        fpga::DatapathCard::Config cc;
        cc.net = ec;
        card_ = std::make_unique<fpga::DatapathOffload>(*devices_.back(), cc);
        loops_[l]->set_offload(card_.get());
      } else {
        loops_[l]->set_offload(devices_.back().get());
      }
    }
    loops.push_back(loops_[l].get());
  }
  if (o.lcores > 1) port::connect_loops(loops);
}

Port::~Port() {
  // The loops go before what they hand frames to (engines, offload), the port last.
  loops_.clear();
  card_.reset();
  devices_.clear();
  engines_.clear();
  dev_.reset();
}

std::array<std::uint64_t, fpga::kDevCounters> Port::device_counters() {
  if (card_) return card_->counters();
  if (!devices_.empty()) return devices_[0]->counters();
  return {};
}

std::unique_ptr<client::Context> Port::open_card(const std::string& name) {
  if (!card_) {
    errno = EINVAL;
    return nullptr;
  }
  const engine::EngineConfig& ec = eng().config();
  fpga::CardContextOptions co;
  co.driver = &card_->driver();
  co.port.name = name;
  co.port.mac = ec.mac;
  co.port.ipv4 = ec.ipv4;
  co.port.gid = ctl::gid_from_ipv4(ec.ipv4);
  co.port.max_mtu = ec.max_mtu;
  return fpga::open_card_context(std::move(co));
}

}  // namespace roce::runtime
