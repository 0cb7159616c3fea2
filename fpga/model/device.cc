/// @file
/// The device model (device.h): frames through the kernels' streams, counters, timing.
#include "fpga/model/device.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "dataplane/wire/roce_frame.h"

namespace roce::fpga {

std::optional<OffloadMode> parse_offload_mode(std::string_view s) {
  if (s == "none") return OffloadMode::kNone;
  if (s == "icrc") return OffloadMode::kIcrc;
  if (s == "parse") return OffloadMode::kParse;
  return std::nullopt;
}

std::string_view to_string(OffloadMode m) {
  switch (m) {
    case OffloadMode::kNone:
      return "none";
    case OffloadMode::kIcrc:
      return "icrc";
    case OffloadMode::kParse:
      return "parse";
  }
  return "?";
}

DeviceModel::DeviceModel(const DeviceConfig& cfg) : cfg_(cfg) {
  rx_stages_[n_rx_stages_++] = {"cmac_rx", cfg.mac_latency_cycles};
  if (cfg.mode == OffloadMode::kParse)
    rx_stages_[n_rx_stages_++] = {"parse+icrc_check", cfg.parse_latency_cycles};
  else if (cfg.mode == OffloadMode::kIcrc)
    rx_stages_[n_rx_stages_++] = {"icrc_check", cfg.icrc_latency_cycles};
  if (cfg.mode != OffloadMode::kNone)
    tx_stages_[n_tx_stages_++] = {"icrc_insert", cfg.icrc_latency_cycles};
  tx_stages_[n_tx_stages_++] = {"cmac_tx", cfg.mac_latency_cycles};
}

bool DeviceModel::classify(std::span<const std::uint8_t> f, bool rx) {
  const auto be16 = [&](std::size_t at) {
    return at + 1 < f.size() ? static_cast<unsigned>(f[at] << 8 | f[at + 1]) : 0u;
  };
  inc(rx ? DevCounter::kRxPkgs : DevCounter::kTxPkgs);
  std::size_t l3 = 14;
  unsigned type = be16(12);
  if (type == 0x8100) {
    type = be16(16);
    l3 = 18;
  }
  unsigned proto = 0;
  std::size_t l4 = 0;
  if (type == 0x0806) {
    inc(rx ? DevCounter::kArpRxPkgs : DevCounter::kArpTxPkgs);
    return false;
  }
  if (type == 0x0800 && l3 + 20 <= f.size()) {
    proto = f[l3 + 9];
    l4 = l3 + static_cast<std::size_t>(f[l3] & 0x0F) * 4;
  } else if (type == 0x86DD && l3 + 40 <= f.size()) {
    proto = f[l3 + 6];
    l4 = l3 + 40;
  } else {
    return false;
  }
  if (proto == 1 || proto == 58) {  // ICMP, ICMPv6 (neighbour discovery among them)
    inc(rx ? DevCounter::kIcmpRxPkgs : DevCounter::kIcmpTxPkgs);
    return false;
  }
  if (proto != 17 || be16(l4 + 2) != wire::kRoceV2Port) return false;
  inc(rx ? DevCounter::kRoceRxPkgs : DevCounter::kRoceTxPkgs);
  return true;
}

bool DeviceModel::rx(std::span<const std::uint8_t> frame) {
  const bool roce = classify(frame, true);
  ++timing_.rx_frames;
  timing_.rx_bytes += frame.size();
  timing_.rx_busy_cycles += cycles(frame.size());
  std::uint64_t lat = cycles(frame.size());
  for (const StageTiming& s : rx_stages()) lat += s.latency_cycles;
  timing_.rx_latency_cycles_max = std::max(timing_.rx_latency_cycles_max, lat);
  if (!roce || cfg_.mode == OffloadMode::kNone) return true;
  if (frame.size() > out_.size()) {  // longer than the device's frame buffer
    inc(DevCounter::kRxParseDrop);
    return false;
  }
  // net2dev_rx: the frame as flits, through the stage, out on dev2host_rx.
  const std::size_t n = to_flits(frame, flits_);
  for (std::size_t i = 0; i < n; ++i) net2dev_rx_.write(flits_[i]);
  bool pass = true;
  if (cfg_.mode == OffloadMode::kIcrc) {
    hls::icrc_check(rx_icrc_, net2dev_rx_, dev2host_rx_, rx_icrc_res_);
    hls::IcrcResult r;
    rx_icrc_res_.read(r);
    // A frame whose lengths leave no room for an ICRC is the parser's (the host's) to drop.
    if (r.roce_len_ok && r.computed != r.received) {
      inc(DevCounter::kRxIcrcDrop);
      pass = false;
    }
  } else {
    hls::parse_kernel(parser_, net2dev_rx_, dev2host_rx_, dev2host_rx_meta_);
    RxMeta m;
    dev2host_rx_meta_.read(m);
    if (m.verdict == static_cast<std::uint8_t>(wire::Verdict::kBadIcrc)) {
      inc(DevCounter::kRxIcrcDrop);
      pass = false;
    } else if (m.verdict != 0) {
      inc(DevCounter::kRxParseDrop);
      pass = false;
    } else {
      last_meta_ = m;
    }
  }
  Flit f;  // the host's side of dev2host_rx: the same bytes, taken off the stream
  while (dev2host_rx_.read(f)) {
  }
  if (pass) inc(DevCounter::kIbvRxPkgs);
  return pass;
}

std::span<const std::uint8_t> DeviceModel::tx(std::span<const std::uint8_t> frame) {
  const bool roce = classify(frame, false);
  ++timing_.tx_frames;
  timing_.tx_bytes += frame.size();
  timing_.tx_busy_cycles += cycles(frame.size());
  std::uint64_t lat = cycles(frame.size());
  for (const StageTiming& s : tx_stages()) lat += s.latency_cycles;
  timing_.tx_latency_cycles_max = std::max(timing_.tx_latency_cycles_max, lat);
  if (!roce || cfg_.mode == OffloadMode::kNone || frame.size() > out_.size()) return frame;
  // host2dev_tx -> icrc_insert -> dev2net_tx: the ICRC the device sends is its own.
  const std::size_t n = to_flits(frame, flits_);
  for (std::size_t i = 0; i < n; ++i) host2dev_tx_.write(flits_[i]);
  hls::icrc_insert(tx_icrc_, host2dev_tx_, dev2net_tx_);
  std::size_t len = 0;
  Flit f;
  while (dev2net_tx_.read(f)) {
    const unsigned k = static_cast<unsigned>(__builtin_popcountll(f.keep));
    std::memcpy(out_.data() + len, f.data.data(), k);
    len += k;
  }
  inc(DevCounter::kTxIcrcGen);
  if (!std::equal(frame.begin(), frame.end(), out_.begin())) inc(DevCounter::kTxIcrcDiffer);
  inc(DevCounter::kIbvTxPkgs);
  return {out_.data(), len};
}

Prediction DeviceModel::predict(std::uint64_t size, std::uint32_t mtu, bool read) const {
  // Per packet on the wire: preamble + SFD 8, IFG 12, Ethernet 14, FCS 4, IPv4 20, UDP 8,
  // BTH 12, ICRC 4; RETH 16 on a WRITE's first packet, AETH 4 on READ responses' first/last.
  constexpr double kPerPacket = 8 + 12 + 14 + 4 + 20 + 8 + 12 + 4;
  const double clock_hz = cfg_.clock_mhz * 1e6;
  const double line_bps = cfg_.line_gbps * 1e9;
  Prediction p;
  p.pipeline_gbps = clock_hz * cfg_.bytes_per_cycle * 8 / 1e9;
  const std::uint64_t packets = size == 0 ? 1 : (size + mtu - 1) / mtu;
  double t = 0, first_pkt = 0;
  for (std::uint64_t i = 0; i < packets; ++i) {
    const double payload = static_cast<double>(std::min<std::uint64_t>(mtu, size - i * mtu));
    const double ext = read ? ((i == 0 || i + 1 == packets) ? 4 : 0) : (i == 0 ? 16 : 0);
    const double wire_bytes = payload + kPerPacket + ext;
    const double frame_bytes = wire_bytes - 20;  // what the datapath carries
    const double ser = wire_bytes * 8 / line_bps;
    const double pipe = std::ceil(frame_bytes / cfg_.bytes_per_cycle) / clock_hz;
    t += std::max(ser, pipe);
    if (i == 0) first_pkt = std::max(ser, pipe);
  }
  p.gbps = static_cast<double>(size) * 8 / t / 1e9;
  double tx_pipe = 0, rx_pipe = 0;
  for (const StageTiming& s : tx_stages()) tx_pipe += s.latency_cycles / clock_hz;
  for (const StageTiming& s : rx_stages()) rx_pipe += s.latency_cycles / clock_hz;
  const double dma = cfg_.host_dma_latency_ns * 1e-9;
  // WRITE: read from host memory, through the TX pipeline, onto the wire, through the remote
  // RX pipeline, into remote memory. READ: the request's way there, then the response's.
  double lat = dma + tx_pipe + t + rx_pipe + dma;
  if (read) {
    const double req = (kPerPacket + 16) * 8 / line_bps;
    lat += tx_pipe + req + rx_pipe;
  }
  (void)first_pkt;
  p.latency_us = lat * 1e6;
  return p;
}

std::string format_nstats(const std::array<std::uint64_t, kDevCounters>& c,
                          std::string_view title) {
  std::string out = " -- NET STATS " + std::string(title) + "\n\n";
  for (std::size_t i = 0; i < kDevCounters; ++i)
    out += std::string(kDevCounterNames[i]) + ": " + std::to_string(c[i]) + "\n";
  return out;
}

DeviceConfig device_config(OffloadMode mode, std::uint32_t clock_mhz, std::uint32_t bytes_per_cycle,
                           std::uint32_t line_gbps) {
  DeviceConfig d;
  d.mode = mode;
  d.clock_mhz = clock_mhz;
  d.bytes_per_cycle = bytes_per_cycle;
  d.line_gbps = line_gbps;
  return d;
}

}  // namespace roce::fpga
