// The built-in kernels against straightforward references, and their parameter checks.
#include "apps/naa/kernels.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "apps/naa/mrsp.h"

namespace roce::naa {
namespace {

std::vector<std::uint32_t> rand_u32(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint32_t> v(n);
  for (auto& x : v) x = rng();
  return v;
}
Param param(void* p, std::size_t n) { return Param{static_cast<std::uint8_t*>(p), n}; }

TEST(Kernels, Crc32KnownValues) {
  const char* s = "123456789";
  EXPECT_EQ(crc32_ieee(reinterpret_cast<const std::uint8_t*>(s), 9), 0xCBF43926u);
  EXPECT_EQ(crc32_ieee(nullptr, 0), 0u);
}

TEST(Kernels, Increment) {
  auto reg = KernelRegistry::builtin();
  std::vector<std::uint8_t> a = {0, 1, 255}, b = {7};
  std::vector<Param> ps = {param(a.data(), a.size()), param(b.data(), b.size())};
  const auto r = reg.run(kFnIncrement, ps);
  EXPECT_EQ(r.status, 0u);
  EXPECT_EQ(r.outputs, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(a, (std::vector<std::uint8_t>{1, 2, 0}));
  EXPECT_EQ(b, (std::vector<std::uint8_t>{8}));
}

TEST(Kernels, VectorAddReduceMatmul) {
  auto reg = KernelRegistry::builtin();
  auto a = rand_u32(100, 1), b = rand_u32(100, 2);
  std::vector<std::uint32_t> c(100);
  std::vector<Param> ps = {param(a.data(), 400), param(b.data(), 400), param(c.data(), 400)};
  auto r = reg.run(kFnVectorAdd, ps);
  ASSERT_EQ(r.status, 0u);
  EXPECT_EQ(r.outputs, (std::vector<std::size_t>{2}));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(c[i], a[i] + b[i]);

  std::uint64_t sum = 0, want = 0;
  for (auto x : a) want += x;
  std::vector<Param> rs = {param(a.data(), 400), param(&sum, 8)};
  ASSERT_EQ(reg.run(kFnReduceSum, rs).status, 0u);
  EXPECT_EQ(sum, want);

  const std::uint32_t m = 3, k = 5, n = 4;
  std::uint32_t dims[3] = {m, k, n};
  auto A = rand_u32(m * k, 3), B = rand_u32(k * n, 4);
  std::vector<std::uint32_t> C(m * n);
  std::vector<Param> mp = {param(dims, 12), param(A.data(), A.size() * 4),
                           param(B.data(), B.size() * 4), param(C.data(), C.size() * 4)};
  ASSERT_EQ(reg.run(kFnMatMul, mp).status, 0u);
  for (std::uint32_t i = 0; i < m; ++i)
    for (std::uint32_t j = 0; j < n; ++j) {
      std::uint32_t acc = 0;
      for (std::uint32_t x = 0; x < k; ++x) acc += A[i * k + x] * B[x * n + j];
      EXPECT_EQ(C[i * n + j], acc);
    }
}

TEST(Kernels, Echo) {
  auto reg = KernelRegistry::builtin();
  std::uint8_t buf[16] = {1, 2, 3};
  std::vector<Param> one = {param(buf, 16)};
  const auto r = reg.run(kFnEcho, one);
  EXPECT_EQ(r.status, 0u);
  EXPECT_EQ(r.outputs, (std::vector<std::size_t>{0}));
  EXPECT_EQ(buf[2], 3);
  std::vector<Param> two = {param(buf, 8), param(buf + 8, 8)};
  EXPECT_EQ(reg.run(kFnEcho, two).status, kRpcBadParamCount);
}

TEST(Kernels, BadParameters) {
  auto reg = KernelRegistry::builtin();
  std::uint8_t buf[64] = {};
  std::vector<Param> two = {param(buf, 8), param(buf + 8, 8)};
  EXPECT_EQ(reg.run(kFnVectorAdd, two).status, kRpcBadParamCount);
  std::vector<Param> three = {param(buf, 8), param(buf + 8, 4), param(buf + 16, 8)};
  EXPECT_EQ(reg.run(kFnVectorAdd, three).status, kRpcBadParamSize);
  std::vector<Param> odd = {param(buf, 3), param(buf + 8, 8)};
  EXPECT_EQ(reg.run(kFnReduceSum, odd).status, kRpcBadParamSize);
  std::vector<Param> crc = {param(buf, 3), param(buf + 8, 8)};
  EXPECT_EQ(reg.run(kFnCrc32, crc).status, kRpcBadParamSize);
  std::uint32_t dims[3] = {2, 2, 2};
  std::vector<Param> mm = {param(dims, 12), param(buf, 16), param(buf + 16, 16),
                           param(buf + 32, 12)};
  EXPECT_EQ(reg.run(kFnMatMul, mm).status, kRpcBadParamSize);
  dims[1] = 0;
  EXPECT_EQ(reg.run(kFnMatMul, mm).status, kRpcBadParamSize);
  EXPECT_EQ(reg.run(99, two).status, kRpcUnknownFunction);
  EXPECT_TRUE(reg.run(99, two).outputs.empty());
}

TEST(Kernels, RegistryAdd) {
  auto reg = KernelRegistry::builtin();
  EXPECT_FALSE(reg.add(0, {"zero", "", [](std::span<Param>) { return KernelResult{}; }}));
  EXPECT_TRUE(reg.add(0x42, {"fail", "", [](std::span<Param>) {
                               return KernelResult{0x20, {0}};
                             }}));
  std::vector<Param> none;
  const auto r = reg.run(0x42, none);
  EXPECT_EQ(r.status, 0x20u);
  EXPECT_TRUE(r.outputs.empty());
  // A kernel naming an output it was not given is caught.
  reg.add(0x43, {"bad", "", [](std::span<Param>) { return KernelResult{0, {5}}; }});
  EXPECT_EQ(reg.run(0x43, none).status, kRpcBadParamCount);
}

// Upstream's software NAA (kernels/swnaa_kernels.c match_function_code): 1 adds 1 to every byte
// of every region, 2 adds 2, 3 changes nothing. They are the default table's 1..3; this NAA's
// own kernels sit beside them.
TEST(Kernels, UpstreamSoftwareNaaFunctions) {
  const auto reg = KernelRegistry::builtin();
  ASSERT_NE(reg.find(1), nullptr);
  ASSERT_NE(reg.find(2), nullptr);
  ASSERT_NE(reg.find(3), nullptr);
  EXPECT_EQ(reg.find(1)->name, "increment");
  EXPECT_EQ(reg.find(2)->name, "add2");
  EXPECT_EQ(reg.find(3)->name, "unchanged");
  std::vector<std::uint8_t> a = {0, 1, 255}, b = {7, 254};
  std::vector<Param> ps = {param(a.data(), 3), param(b.data(), 2)};
  EXPECT_EQ(reg.run(1, ps).status, 0u);
  EXPECT_EQ(a, (std::vector<std::uint8_t>{1, 2, 0}));
  EXPECT_EQ(reg.run(2, ps).status, 0u);
  EXPECT_EQ(a, (std::vector<std::uint8_t>{3, 4, 2}));
  EXPECT_EQ(b, (std::vector<std::uint8_t>{10, 1}));
  EXPECT_EQ(reg.run(3, ps).status, 0u);
  EXPECT_EQ(b, (std::vector<std::uint8_t>{10, 1}));
  // The empty kernel takes any number of regions, as upstream's does.
  std::vector<Param> none;
  EXPECT_EQ(reg.run(3, none).status, 0u);
  // Ours beside them.
  for (const char* n : {"vector_add", "reduce_sum", "crc32", "matmul", "echo"}) {
    bool found = false;
    for (const auto& [code, k] : reg.all()) found |= k.name == n;
    EXPECT_TRUE(found) << n;
  }
  EXPECT_EQ(reg.find(kFnVectorAdd)->name, "vector_add");
  EXPECT_EQ(reg.find(kFnReduceSum)->name, "reduce_sum");
}

TEST(Kernels, FunctionTableConfigurable) {
  auto reg = KernelRegistry::builtin();
  std::string err;
  ASSERT_TRUE(reg.configure("2=vector_add,3=reduce_sum,9=none,100=unchanged", err)) << err;
  EXPECT_EQ(reg.find(2)->name, "vector_add");
  EXPECT_EQ(reg.find(3)->name, "reduce_sum");
  EXPECT_EQ(reg.find(100)->name, "unchanged");
  EXPECT_EQ(reg.find(9), nullptr);
  EXPECT_TRUE(reg.configure("", err));
  // Refused, with a reason, the table unchanged: code 0 (the host's error), codes beyond the
  // 7 bits upstream carries, unknown names, bad syntax.
  for (const char* bad : {"0=add2", "128=add2", "2=nosuch", "x=add2", "2", "2=", "=add2", "2=add2,",
                          "2=add2;3=echo"}) {
    err.clear();
    auto copy = reg;
    EXPECT_FALSE(copy.configure(bad, err)) << bad;
    EXPECT_FALSE(err.empty()) << bad;
    EXPECT_EQ(copy.find(2)->name, "vector_add") << bad;
  }
}

}  // namespace
}  // namespace roce::naa
