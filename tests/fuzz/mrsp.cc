/// @file
/// Fuzz target: the NAAICE memory region setup protocol decoder (apps/naa/mrsp.cc), what a
/// host sends the NAA (and the NAA the host) before any function call. A message the decoder
/// accepts must encode back to the same bytes (up to its last entry; padding is zero).
#include "apps/naa/mrsp.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <variant>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace roce::naa;
  const DecodeResult r = decode(std::span<const std::uint8_t>(data, size));
  if (!r.ok()) {
    (void)to_string(r.error());
    return 0;
  }
  std::vector<std::uint8_t> again;
  const std::size_t n = std::visit([&](const auto& m) { return encode(m, again); }, r.message());
  if (n == 0 || n > size) std::abort();
  // Padding is not kept, so compare encodings: decoding what was encoded must encode the same.
  const DecodeResult back = decode(again);
  if (!back.ok()) std::abort();
  std::vector<std::uint8_t> third;
  std::visit([&](const auto& m) { encode(m, third); }, back.message());
  if (third != again) std::abort();
  return 0;
}
