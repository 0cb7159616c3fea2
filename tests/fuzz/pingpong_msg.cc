/// @file
/// Fuzz target: the QP address message of ibv_rc/ud/srq_pingpong (apps/common/pingpong_proto.cc),
/// 52 bytes from a peer that may send anything. An accepted message must survive re-encoding.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "apps/common/pingpong_proto.h"
#include "tests/fuzz/fuzz_target.h"

using namespace roce;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < pp::kMsgLen) return 0;
  std::vector<char> m(pp::kMsgLen);  // exact size: the parser must not look past it
  std::memcpy(m.data(), data, pp::kMsgLen);
  const auto d = pp::dest_of(std::span<const char, pp::kMsgLen>(m.data(), pp::kMsgLen));
  if (!d) return 0;
  // The LID field is "%04x" on the way out: only 16 bits of what was read survive.
  pp::Dest want = *d;
  want.lid &= 0xFFFF;
  const auto again = pp::dest_of(pp::msg(*d));
  if (!again || !(*again == want)) std::abort();
  return 0;
}
