/// @file
/// ICRC with ISA-L's reflected CRC-32 (crc32_gzip_refl: the zlib CRC, hardware-accelerated with
/// PCLMULQDQ where the CPU has it); buffers under 256 bytes with crc32_fold (crc_fold.h).
#include "dataplane/wire/icrc.h"

#include <isa-l/crc.h>

#include <cstring>

#include "dataplane/wire/crc_fold.h"
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
  if (n >= 16 && n < kCrcFoldMax && kCrcFoldUsable) return crc32_fold(crc, p, n);
  crc = crc32_gzip_refl(crc, p, n);
  if (kCpuHasAvx) asm volatile("vzeroupper" ::: "memory");
  return crc;
}
}  // namespace

std::uint32_t crc32_zlib(std::uint32_t crc, const std::uint8_t* p, std::size_t n) {
  return crc32(crc, p, n);
}

namespace {
// Sets the fields the ICRC does not cover (IBA Annex A17.3.3) to ones in a copy of the
// headers; returns the length of those headers (IP, UDP and BTH).
constexpr std::size_t mask_variant_fields(std::uint8_t* m, IpVersion v) {
  const std::size_t ip_len = v == IpVersion::kV4 ? 20 : 40;
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
  return ip_len + kUdpSize + kBthSize;
}

// Frames up to this many bytes from L3 on are copied whole and CRC'd in one call: each ISA-L
// call has a fixed cost (about 15 ns) that a 60-byte ACK would otherwise pay twice.
constexpr std::size_t kOneCallMax = 256;
}  // namespace

namespace {
// The fields the ICRC masks as an OR mask over a frame from its IP header on (ones where a
// field is masked, zeros elsewhere and beyond the headers), for crc32_fold_or.
// (constexpr: no static initialiser, so that no ICRC computed before it ever sees zeros)
struct OrMasks {
  std::uint8_t v4[kCrcFoldMax] = {}, v6[kCrcFoldMax] = {};
  constexpr OrMasks() {
    mask_variant_fields(v4, IpVersion::kV4);
    mask_variant_fields(v6, IpVersion::kV6);
  }
};
constexpr OrMasks kOrMasks;
}  // namespace

const std::uint8_t* const kIcrcOrMaskV4 = kOrMasks.v4;

Icrc Icrc::begin(const std::uint8_t* l3, IpVersion v) {
  const std::size_t n = (v == IpVersion::kV4 ? 20 : 40) + kUdpSize + kBthSize;
  if (kCrcFoldUsable)
    return Icrc(crc32_fold_or(kIcrcSeed, l3, n, v == IpVersion::kV4 ? kOrMasks.v4 : kOrMasks.v6));
  std::uint8_t m[kMaxMasked];
  std::memcpy(m, l3, n);
  mask_variant_fields(m, v);
  return Icrc(crc32(kIcrcSeed, m, n));
}

void Icrc::update(const std::uint8_t* p, std::size_t n) { crc_ = crc32(crc_, p, n); }

namespace {
// compute_icrc without the fold kernel, or for a frame too long for it.
[[gnu::noinline]] std::uint32_t compute_icrc_copy(const std::uint8_t* l3, std::size_t len,
                                                  IpVersion v) {
  const std::size_t masked = (v == IpVersion::kV4 ? 20 : 40) + kUdpSize + kBthSize;
  if (len <= kOneCallMax && len >= masked) {
    std::uint8_t m[kOneCallMax];
    std::memcpy(m, l3, len);
    mask_variant_fields(m, v);
    return crc32(kIcrcSeed, m, len);
  }
  Icrc c = Icrc::begin(l3, v);
  c.update(l3 + masked, len - masked);
  return c.value();
}
}  // namespace

std::uint32_t compute_icrc(const std::uint8_t* l3, std::size_t len, IpVersion v) {
  // Short frames: one pass over the frame in place, the masked fields ORed in as they load.
  const bool v4 = v == IpVersion::kV4;
  if (len < kCrcFoldMax && len >= (v4 ? 48u : 68u) && kCrcFoldUsable)
    return crc32_fold_or(kIcrcSeed, l3, len, v4 ? kOrMasks.v4 : kOrMasks.v6);
  return compute_icrc_copy(l3, len, v);
}

}  // namespace roce::wire
