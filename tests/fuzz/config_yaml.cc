/// @file
/// Fuzz target: the appliance's YAML configuration reader (controlplane/config.cc) on top of
/// yaml-cpp. Any text must give a configuration or a ConfigError ("file:line:column:
/// message"), never another exception, a crash or a hang.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "controlplane/config.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Kinds of service as the service registry would hand them over: one without keys of its
  // own, one with (read back typed, as a kind's check() reads them).
  static const roce::ctl::ServiceKinds kinds = {
      {"write_bw", {}, 18515}, {"echo", {"max_connections", "message_size"}, 7471}};
  try {
    const roce::ctl::ApplianceConfig c = roce::ctl::parse_config(text, "fuzz.yaml", kinds);
    for (const auto& s : c.services) {
      s.option_uint("max_connections", 16, 1, 1024);
      (void)s.option_list("message_size");
      (void)s.option_bool("message_size", false);
    }
  } catch (const roce::ctl::ConfigError& e) {
    if (std::string(e.what()).rfind("fuzz.yaml", 0) != 0) std::abort();  // names its origin
  }
  return 0;
}
