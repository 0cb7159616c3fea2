// The per-port `offload:` key (controlplane/config): a mode as a scalar or a map with the
// device model's clock and width; unknown modes and keys are errors that name the line, and so
// is the datapath mode on more than one lcore.
#include <gtest/gtest.h>

#include <string>

#include "controlplane/config.h"
#include "fpga/model/device.h"

namespace roce::fpga {
namespace {

std::string yaml(const std::string& offload) {
  return "name: t\nports:\n  - name: p0\n    device: net_ring0\n    mac: 02:00:00:00:00:01\n"
         "    ipv4: 192.0.2.1/24\n" +
         (offload.empty() ? "" : "    offload: " + offload + "\n");
}

TEST(OffloadConfig, DefaultIsNone) {
  const auto c = ctl::parse_config(yaml(""), "t.yaml");
  EXPECT_EQ(c.ports[0].offload.mode, "none");
}

TEST(OffloadConfig, ScalarAndMap) {
  EXPECT_EQ(ctl::parse_config(yaml("icrc"), "t.yaml").ports[0].offload.mode, "icrc");
  const auto c =
      ctl::parse_config(yaml("{mode: parse, clock_mhz: 322, bytes_per_cycle: 32}"), "t.yaml");
  EXPECT_EQ(c.ports[0].offload.mode, "parse");
  EXPECT_EQ(c.ports[0].offload.clock_mhz, 322u);
  EXPECT_EQ(c.ports[0].offload.bytes_per_cycle, 32u);
  EXPECT_EQ(c.ports[0].offload.line_gbps, 100u);
  // Every mode the configuration accepts is one the device model runs.
  for (const char* m : {"none", "icrc", "parse"}) EXPECT_TRUE(parse_offload_mode(m)) << m;
  // datapath: the card behind the parse mode's stream stages.
  EXPECT_EQ(ctl::parse_config(yaml("datapath"), "t.yaml").ports[0].offload.mode, "datapath");
}

TEST(OffloadConfig, DatapathNeedsOneLcore) {
  try {
    ctl::parse_config("eal:\n  lcores: [0, 1]\n" + yaml("datapath"), "t.yaml");
    ADD_FAILURE() << "datapath on two lcores accepted";
  } catch (const ctl::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'datapath' needs one lcore"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(ctl::parse_config("eal:\n  lcores: [1]\n" + yaml("datapath"), "t.yaml"));
}

TEST(OffloadConfig, Errors) {
  const auto fails = [](const std::string& o, const std::string& what) {
    try {
      ctl::parse_config(yaml(o), "t.yaml");
      ADD_FAILURE() << o << " accepted";
    } catch (const ctl::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("t.yaml:7"), std::string::npos) << e.what();
    }
  };
  fails("crc", "'crc' is not an offload mode");
  fails("{mode: icrc, clock: 250}", "clock");
  fails("{mode: icrc, bytes_per_cycle: 0}", "bytes_per_cycle");
}

}  // namespace
}  // namespace roce::fpga
