/// @file
/// Fuzz target: perftest's out-of-band messages (apps/perf/perftest_proto.cc), what a perftest
/// client sends roced's hosted servers and roce-perf before any RoCE traffic. Input: a selector
/// byte, then the message. Decoders that accept a message must give back what their encoder
/// turns into the same message again.
#include "apps/perf/perftest_proto.h"

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace roce::perf::pt;

void check(bool ok) {
  if (!ok) std::abort();
}

template <class T, std::size_t N>
std::vector<T> exact(const std::uint8_t* p, std::size_t n) {
  if (n < N) return {};
  std::vector<T> v(N);
  std::memcpy(v.data(), p, N);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t* p = data + 1;
  const std::size_t n = size - 1;
  switch (data[0] % 7) {
    case 0: {
      auto m = exact<char, kVersionLen>(p, n);
      if (m.empty()) return 0;
      const std::string v = version_of(std::span<const char, kVersionLen>(m.data(), kVersionLen));
      check(v.size() <= kVersionLen);
      const int a = compare_versions(v, kMinVersion);
      const int b = compare_versions(v, kNegotiateVersion);
      check(a >= -1 && a <= 1 && b >= -1 && b <= 1);
      check(compare_versions(v, v) == 0);
      break;
    }
    case 1: {
      auto m = exact<std::uint8_t, 8>(p, n);
      if (m.empty()) return 0;
      const SysData s = decode_sys(std::span<const std::uint8_t, 8>(m.data(), 8));
      const auto again = encode(s);
      check(std::memcmp(again.data(), m.data(), 8) == 0);
      break;
    }
    case 2: {
      auto m = exact<char, 2>(p, n);
      if (m.empty()) return 0;
      if (const auto e = mtu_of(std::span<const char, 2>(m.data(), 2))) {
        const unsigned bytes = mtu_bytes_of_enum(*e);
        if (bytes != 0) check(mtu_enum_of_bytes(bytes) == *e);
      }
      break;
    }
    case 3: {
      auto m = exact<char, kDestLen>(p, n);
      if (m.empty()) return 0;
      if (const auto d = dest_of(std::span<const char, kDestLen>(m.data(), kDestLen))) {
        const auto again = dest_msg(*d);
        const auto d2 = dest_of(again);
        check(d2 && *d2 == *d);
      }
      break;
    }
    case 4: {
      auto m = exact<std::uint8_t, kDestBinLen>(p, n);
      if (m.empty()) return 0;
      if (const auto d =
              dest_of_bin(std::span<const std::uint8_t, kDestBinLen>(m.data(), kDestBinLen))) {
        const auto d2 = dest_of_bin(dest_bin(*d));
        check(d2 && *d2 == *d);
      }
      break;
    }
    case 5: {
      auto m = exact<std::uint8_t, kReportLen>(p, n);
      if (m.empty()) return 0;
      const Report r =
          decode_report(std::span<const std::uint8_t, kReportLen>(m.data(), kReportLen));
      const auto again = encode(r);
      check(std::memcmp(again.data(), m.data(), kReportLen) == 0);  // doubles bit for bit
      break;
    }
    default: {
      // The caller always reads the whole struct (kParamsLen, or 320 with mlx5dv): no shorter.
      if (n < kParamsLen) return 0;
      const std::vector<std::uint8_t> m(p, p + n);
      const Params a = decode_params(m);
      std::vector<std::uint8_t> out(kParamsLen);
      encode(a, out);
      check(decode_params(out) == a);
      check(params_mismatch(a, a).empty());
      break;
    }
  }
  return 0;
}
