/// @file
/// The NAA's kernels, looked up by function code (the immediate of the host's final
/// WRITE_WITH_IMM). A kernel sees the parameter regions of one host in the order the host
/// advertised them (the metadata region, region 0, is not a parameter), checks their number
/// and sizes, computes in place and names the parameters it wrote (the NAA writes those back to
/// the host's regions). Pure: no stack, no I/O; unit-tested against references.
///
/// Element layout: the host's native little-endian integers (the NAAICE NAA and its hosts are
/// x86/ARM little-endian machines); documented per kernel in docs/naa.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace roce::naa {

/// One parameter: a region of NAA memory.
struct Param {
  std::uint8_t* data = nullptr;
  std::size_t size = 0;
};

struct KernelResult {
  std::uint32_t status = 0;          ///< RpcStatus (mrsp.h): 0 or 0x10-0x7f
  std::vector<std::size_t> outputs;  ///< parameters written, to be sent back (index into params)
};

using KernelFn = std::function<KernelResult(std::span<Param> params)>;

struct Kernel {
  std::string name;
  std::string signature;  ///< the parameters it expects, for --list and the docs
  KernelFn fn;
  /// Its time is proportional to its parameters' bytes, no more than a copy of them: with at
  /// most NaaConfig::inline_bytes of parameters it runs on the poll loop (a handoff to a
  /// kernel thread would cost more than the kernel). Others always run on the kernel threads.
  bool linear = false;
};

/// Function codes of the default table (1..127: upstream NAAICE carries the code in the low 7
/// bits of the immediate; 0 is the host's error message). 1..3 are upstream's software NAA
/// (kernels/swnaa_kernels.c); this NAA's own kernels follow. Each NAA may map codes otherwise
/// (KernelRegistry::configure, roce-naa --functions).
enum FnCode : std::uint8_t {
  kFnIncrement = 1,  ///< every byte of every parameter + 1 (upstream's custom_kernel_1)
  kFnAdd2 = 2,       ///< every byte of every parameter + 2 (upstream's custom_kernel_2)
  kFnUnchanged = 3,  ///< nothing: the parameters go back as they came (upstream's empty_kernel)
  kFnCrc32 = 4,      ///< out (u32) = CRC-32 (IEEE 802.3, zlib's) of in
  kFnMatMul = 5,     ///< C (m x n) = A (m x k) * B (k x n), u32 elements, wrapping
  kFnEcho = 6,       ///< p1 sent back unchanged: the transport's round trip (benchmarks)
  kFnVectorAdd = 7,  ///< c[i] = a[i] + b[i], u32 elements, wrapping (2 before issue 29)
  kFnReduceSum = 8,  ///< out (u64) = sum of the u32 elements of in (3 before issue 29)
};
constexpr std::uint32_t kMaxFnCode = 0x7F;

class KernelRegistry {
 public:
  /// The built-in kernels above, at their default codes.
  static KernelRegistry builtin();
  /// Maps codes to kernels: `list` is "CODE=NAME[,CODE=NAME...]", CODE 1..127, NAME a kernel of
  /// this table or a built-in one (--list-kernels), or "none" to remove the code. Codes not
  /// named keep their kernel. False (and the table unchanged, `err` saying why) on a bad list.
  bool configure(const std::string& list, std::string& err);
  /// Adds or replaces the kernel of `code` (0 is refused: false).
  bool add(std::uint32_t code, Kernel k);
  const Kernel* find(std::uint32_t code) const;
  const std::map<std::uint32_t, Kernel>& all() const { return kernels_; }
  /// Runs the kernel of `code`; an unknown code gives kRpcUnknownFunction.
  KernelResult run(std::uint32_t code, std::span<Param> params) const;

 private:
  std::map<std::uint32_t, Kernel> kernels_;
};

/// CRC-32 (reflected 0xEDB88320, initial and final XOR 0xFFFFFFFF), as zlib's crc32().
std::uint32_t crc32_ieee(const std::uint8_t* p, std::size_t n, std::uint32_t crc = 0);

}  // namespace roce::naa
