/// @file
/// Fuzz target: Coyote's benchmark exchange (apps/perf/coyote_proto.cc) from a peer that may
/// send anything: the first 4 bytes as a server reads them (a cLib function id or the start of a
/// queue), a 64-byte queue, a 12-byte cLib close request. An accepted queue must survive
/// re-encoding with the same fields.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "apps/perf/coyote_proto.h"
#include "tests/fuzz/fuzz_target.h"

using namespace roce::perf;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < coyote::kQueueLen + 4) return 0;
  std::uint8_t first[coyote::kFidLen];
  std::memcpy(first, data, sizeof first);
  (void)coyote::looks_like_fid(first);
  std::array<std::uint8_t, coyote::kClibCloseLen> close{};
  std::memcpy(close.data(), data, close.size());
  (void)coyote::is_clib_close(close);
  std::array<std::uint8_t, coyote::kQueueLen> b{};
  std::memcpy(b.data(), data + 4, b.size());
  std::uint32_t need = 0;
  std::memcpy(&need, data, sizeof need);
  coyote::Queue q;
  std::string err;
  if (!coyote::decode(b, need, q, err)) {
    if (err.empty()) std::abort();
    return 0;
  }
  if (q.qpn > 0xFFFFFF || q.psn > 0xFFFFFF || q.ip_addr == 0 || q.vaddr == 0) std::abort();
  (void)coyote::describe("Remote: ", q);
  coyote::Queue again;
  if (!coyote::decode(coyote::encode(q), need, again, err) || again.qpn != q.qpn ||
      again.psn != q.psn || again.rkey != q.rkey || again.vaddr != q.vaddr ||
      again.size != q.size || again.ip_addr != q.ip_addr || again.gid != q.gid)
    std::abort();
  return 0;
}
