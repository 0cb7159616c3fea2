/// @file
/// ICRC with ISA-L's reflected CRC-32 (crc32_gzip_refl: the zlib CRC, hardware-accelerated with
/// PCLMULQDQ where the CPU has it).
#include "dataplane/wire/icrc.h"

#include <isa-l/crc.h>

#include <cstring>

#include "dataplane/wire/opcode_table.h"

namespace roce::wire {

namespace {
constexpr std::size_t kUdpSize = 8;
constexpr std::size_t kMaxMasked = 40 + kUdpSize + kBthSize;

// ISA-L picks its AVX-512 (VPCLMULQDQ) CRC kernel where the CPU has one and returns with the
// upper vector state dirty. The SSE code that runs next (ours, libc's) then pays a transition
// penalty on every instruction: measured here, a 4 KiB ICRC took 240 ns instead of 74 ns and
// a 64-byte frame's parse+ICRC 190 ns instead of 50 ns (docs/benchmarks.md). Clearing the upper
// state after each call costs a cycle. vzeroupper faults without AVX, hence the CPU check.
const bool kCpuHasAvx = __builtin_cpu_supports("avx");

inline std::uint32_t crc32(std::uint32_t crc, const std::uint8_t* p, std::size_t n) {
  crc = crc32_gzip_refl(crc, p, n);
  if (kCpuHasAvx) asm volatile("vzeroupper" ::: "memory");
  return crc;
}
}  // namespace

std::uint32_t crc32_zlib(std::uint32_t crc, const std::uint8_t* p, std::size_t n) {
  return crc32(crc, p, n);
}

Icrc Icrc::begin(const std::uint8_t* l3, IpVersion v) {
  const std::size_t ip_len = v == IpVersion::kV4 ? 20 : 40;
  const std::size_t n = ip_len + kUdpSize + kBthSize;
  std::uint8_t m[kMaxMasked];
  std::memcpy(m, l3, n);
  if (v == IpVersion::kV4) {
    m[1] = 0xFF;           // TOS (DSCP + ECN)
    m[8] = 0xFF;           // TTL
    m[10] = m[11] = 0xFF;  // header checksum
  } else {
    m[0] |= 0x0F;               // traffic class, high nibble
    m[1] = m[2] = m[3] = 0xFF;  // traffic class, low nibble, and flow label
    m[7] = 0xFF;                // hop limit
  }
  std::uint8_t* udp = m + ip_len;
  udp[6] = udp[7] = 0xFF;  // UDP checksum
  std::uint8_t* bth = udp + kUdpSize;
  bth[4] = 0xFF;  // FECN, BECN and the six reserved bits
  return Icrc(crc32(kIcrcSeed, m, n));
}

void Icrc::update(const std::uint8_t* p, std::size_t n) { crc_ = crc32(crc_, p, n); }

std::uint32_t compute_icrc(const std::uint8_t* l3, std::size_t len, IpVersion v) {
  const std::size_t masked = (v == IpVersion::kV4 ? 20 : 40) + kUdpSize + kBthSize;
  Icrc c = Icrc::begin(l3, v);
  c.update(l3 + masked, len - masked);
  return c.value();
}

}  // namespace roce::wire
