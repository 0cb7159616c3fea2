/// @file
/// Fuzz target: Engine::receive with the responder and completer behind it, on a seeded engine
/// (RC, UC and UD QPs, MRs, posted receives, sends waiting for answers). The input format is in
/// engine_harness.h. Every frame the engine sends must parse (the harness aborts otherwise).
#include <cstdlib>

#include "tests/fuzz/engine_harness.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The fuzzer deregisters and invalidates MRs between frames (ASan poisons their memory),
  // unless ROCE_FUZZ_DEREG=0.
  static const bool allow_dereg = [] {
    const char* e = std::getenv("ROCE_FUZZ_DEREG");
    return !(e && *e == '0');
  }();
  roce::fuzz::Reader in(data, size);
  if (in.empty()) return 0;
  roce::fuzz::EngineHarness h(in.u8(), allow_dereg);
  h.run(in);
  return 0;
}
