/// @file
/// fpga-predict: what the device model predicts for Coyote's RDMA benchmark (WRITE or READ,
/// sizes doubling from --min to --max) on a card of the given clock, datapath width and link:
/// one row per size with throughput and latency. tests/fpga/coyote_bench.sh prints it next to
/// the measured software and model-offloaded paths.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "fpga/model/device.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  std::uint32_t clock = 250, width = 64, line = 100, mtu = 4096;
  std::uint64_t min = 64, max = 1 << 20;
  std::string op = "write", mode = "icrc";
  po::options_description d("Usage: fpga-predict [options]\n\nOptions");
  d.add_options()("help,h", "print this help")("op,o", po::value(&op)->default_value(op),
                                               "write or read")(
      "mode", po::value(&mode)->default_value(mode), "offload mode: icrc or parse")(
      "min_size,x", po::value(&min)->default_value(min), "smallest message (bytes)")(
      "max_size,X", po::value(&max)->default_value(max), "largest message (bytes)")(
      "mtu", po::value(&mtu)->default_value(mtu), "path MTU")(
      "clock-mhz", po::value(&clock)->default_value(clock), "device clock")(
      "bytes-per-cycle", po::value(&width)->default_value(width), "datapath width")(
      "line-gbps", po::value(&line)->default_value(line), "link rate");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, d), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "fpga-predict: " << e.what() << '\n';
    return 2;
  }
  if (vm.count("help")) {
    std::cout << d << '\n';
    return 0;
  }
  const auto m = roce::fpga::parse_offload_mode(mode);
  if (!m || (op != "write" && op != "read") || min == 0 || min > max || mtu < 256 || mtu > 4096 ||
      clock == 0 || width == 0 || line == 0) {
    std::cerr << "fpga-predict: bad arguments (try --help)\n";
    return 2;
  }
  const roce::fpga::DeviceModel dev(roce::fpga::device_config(*m, clock, width, line));
  std::printf("# model: %u MHz x %u B/clock (%.1f Gb/s datapath), %u Gb/s link, MTU %u, %s\n",
              clock, width, clock * 1e6 * width * 8 / 1e9, line, mtu, mode.c_str());
  std::printf("# %-5s %10s %12s %12s %12s\n", "op", "size", "Gb/s", "MB/s", "latency_us");
  for (std::uint64_t s = min; s <= max; s *= 2) {
    const auto p = dev.predict(s, mtu, op == "read");
    std::printf("  %-5s %10llu %12.2f %12.2f %12.3f\n", op.c_str(),
                static_cast<unsigned long long>(s), p.gbps, p.gbps * 1e3 / 8, p.latency_us);
  }
  return 0;
}
