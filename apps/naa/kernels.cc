/// @file
/// The built-in kernels (kernels.h).
#include "apps/naa/kernels.h"

#include <array>
#include <cstring>

#include "apps/naa/mrsp.h"

namespace roce::naa {

namespace {

std::uint32_t ld32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void st32(std::uint8_t* p, std::uint32_t v) { std::memcpy(p, &v, 4); }

KernelResult status(std::uint32_t s) { return KernelResult{s, {}}; }

KernelResult increment(std::span<Param> ps) {
  if (ps.empty()) return status(kRpcBadParamCount);
  KernelResult r;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    for (std::size_t j = 0; j < ps[i].size; ++j) ++ps[i].data[j];
    r.outputs.push_back(i);
  }
  return r;
}

/// Upstream's custom_kernel_2: every byte of every region + 2; any number of regions.
KernelResult add2(std::span<Param> ps) {
  KernelResult r;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    for (std::size_t j = 0; j < ps[i].size; ++j) ps[i].data[j] += 2;
    r.outputs.push_back(i);
  }
  return r;
}

/// Upstream's empty_kernel: nothing; the regions go back as they came.
KernelResult unchanged(std::span<Param> ps) {
  KernelResult r;
  for (std::size_t i = 0; i < ps.size(); ++i) r.outputs.push_back(i);
  return r;
}

/// a, b, c: equal sizes, a multiple of 4.
KernelResult vector_add(std::span<Param> ps) {
  if (ps.size() != 3) return status(kRpcBadParamCount);
  const std::size_t n = ps[0].size;
  if (n % 4 != 0 || ps[1].size != n || ps[2].size != n) return status(kRpcBadParamSize);
  for (std::size_t i = 0; i < n; i += 4)
    st32(ps[2].data + i, ld32(ps[0].data + i) + ld32(ps[1].data + i));
  return KernelResult{0, {2}};
}

/// in (u32 elements), out (8 bytes: u64 sum).
KernelResult reduce_sum(std::span<Param> ps) {
  if (ps.size() != 2) return status(kRpcBadParamCount);
  if (ps[0].size % 4 != 0 || ps[1].size != 8) return status(kRpcBadParamSize);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < ps[0].size; i += 4) sum += ld32(ps[0].data + i);
  std::memcpy(ps[1].data, &sum, 8);
  return KernelResult{0, {1}};
}

/// in (any size), out (4 bytes: u32 CRC).
KernelResult crc(std::span<Param> ps) {
  if (ps.size() != 2) return status(kRpcBadParamCount);
  if (ps[1].size != 4) return status(kRpcBadParamSize);
  st32(ps[1].data, crc32_ieee(ps[0].data, ps[0].size));
  return KernelResult{0, {1}};
}

/// dims (12 bytes: u32 m, k, n), A (m*k u32), B (k*n u32), C (m*n u32), row-major.
KernelResult matmul(std::span<Param> ps) {
  if (ps.size() != 4) return status(kRpcBadParamCount);
  if (ps[0].size != 12) return status(kRpcBadParamSize);
  const std::uint64_t m = ld32(ps[0].data), k = ld32(ps[0].data + 4), n = ld32(ps[0].data + 8);
  if (m == 0 || k == 0 || n == 0 || m > (1u << 16) || k > (1u << 16) || n > (1u << 16))
    return status(kRpcBadParamSize);
  if (ps[1].size != m * k * 4 || ps[2].size != k * n * 4 || ps[3].size != m * n * 4)
    return status(kRpcBadParamSize);
  const std::uint8_t *a = ps[1].data, *b = ps[2].data;
  std::uint8_t* c = ps[3].data;
  for (std::uint64_t i = 0; i < m; ++i)
    for (std::uint64_t j = 0; j < n; ++j) {
      std::uint32_t acc = 0;
      for (std::uint64_t x = 0; x < k; ++x)
        acc += ld32(a + (i * k + x) * 4) * ld32(b + (x * n + j) * 4);
      st32(c + (i * n + j) * 4, acc);
    }
  return KernelResult{0, {3}};
}

/// p1: any bytes, written back as they are.
KernelResult echo(std::span<Param> ps) {
  if (ps.size() != 1) return status(kRpcBadParamCount);
  return KernelResult{0, {0}};
}

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int b = 0; b < 8; ++b) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    t[i] = c;
  }
  return t;
}

}  // namespace

std::uint32_t crc32_ieee(const std::uint8_t* p, std::size_t n, std::uint32_t crc) {
  static const auto table = make_crc_table();
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

KernelRegistry KernelRegistry::builtin() {
  KernelRegistry r;
  r.add(kFnIncrement,
        {"increment", "p1..pn: bytes, each + 1 in place (upstream's function 1)", increment, true});
  r.add(kFnAdd2, {"add2", "p1..pn: bytes, each + 2 in place (upstream's function 2)", add2, true});
  r.add(kFnUnchanged,
        {"unchanged", "p1..pn: bytes, left as they are (upstream's function 3)", unchanged, true});
  r.add(kFnCrc32, {"crc32", "in: bytes, out: u32; out = CRC-32 (zlib) of in", crc, true});
  r.add(kFnMatMul,
        {"matmul", "dims: u32 m,k,n; A: u32[m*k], B: u32[k*n], C: u32[m*n]; C = A*B", matmul});
  r.add(kFnEcho, {"echo", "p1: bytes, sent back unchanged (round-trip benchmarks)", echo, true});
  r.add(kFnVectorAdd, {"vector_add", "a, b, c: u32[n]; c = a + b", vector_add, true});
  r.add(kFnReduceSum, {"reduce_sum", "in: u32[n], out: u64; out = sum(in)", reduce_sum, true});
  return r;
}

bool KernelRegistry::configure(const std::string& list, std::string& err) {
  const KernelRegistry builtins = builtin();
  auto by_name = [&](const std::string& n) -> const Kernel* {
    for (const KernelRegistry* t : {static_cast<const KernelRegistry*>(this), &builtins})
      for (const auto& [code, k] : t->kernels_)
        if (k.name == n) return &k;
    return nullptr;
  };
  std::map<std::uint32_t, Kernel> next = kernels_;
  std::size_t at = 0;
  while (at < list.size()) {
    std::size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(at, end - at);
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size() ||
        item.find_first_not_of("0123456789") != eq) {
      err = "function table: \"" + item + "\" is not CODE=NAME";
      return false;
    }
    const unsigned long code = eq > 4 ? 0 : std::stoul(item.substr(0, eq));
    if (code == 0 || code > kMaxFnCode) {
      err = "function table: code " + item.substr(0, eq) + " is not in 1..127";
      return false;
    }
    const std::string name = item.substr(eq + 1);
    if (name == "none") {
      next.erase(static_cast<std::uint32_t>(code));
    } else if (const Kernel* k = by_name(name)) {
      next[static_cast<std::uint32_t>(code)] = *k;
    } else {
      err = "function table: no kernel named \"" + name + "\" (roce-naa --list-kernels)";
      return false;
    }
    at = end + 1;
    if (end + 1 == list.size()) {  // a trailing comma
      err = "function table: \"" + list + "\" ends in a comma";
      return false;
    }
  }
  kernels_ = std::move(next);
  return true;
}

bool KernelRegistry::add(std::uint32_t code, Kernel k) {
  if (code == 0 || !k.fn) return false;
  kernels_[code] = std::move(k);
  return true;
}

const Kernel* KernelRegistry::find(std::uint32_t code) const {
  const auto it = kernels_.find(code);
  return it == kernels_.end() ? nullptr : &it->second;
}

KernelResult KernelRegistry::run(std::uint32_t code, std::span<Param> params) const {
  const Kernel* k = find(code);
  if (!k) return KernelResult{kRpcUnknownFunction, {}};
  KernelResult r = k->fn(params);
  if (r.status != 0) {
    r.outputs.clear();
    return r;
  }
  for (std::size_t o : r.outputs)
    if (o >= params.size()) return KernelResult{kRpcBadParamCount, {}};
  return r;
}

}  // namespace roce::naa
