/// @file
/// CRC-32 (zlib convention) of buffers of 16 to kCrcFoldMax - 1 bytes with PCLMULQDQ, for the
/// ICRC of small frames (ACKs, small requests): ISA-L folds such a buffer 16 bytes after 16
/// bytes, a chain of dependent multiplications; this folds every block at once (docs/
/// benchmarks.md: 12 against 16-18 ns for 52-72 bytes, one computation waiting for the last).
#pragma once

#include <cstddef>
#include <cstdint>

namespace roce::wire {

/// Buffers shorter than this (and at least 16 bytes) may use crc32_fold().
inline constexpr std::size_t kCrcFoldMax = 256;

/// True when the CPU has PCLMULQDQ and AVX (the kernel is VEX-encoded: legacy SSE code after
/// ISA-L's AVX-512 would pay the transition penalty, docs/benchmarks.md).
extern const bool kCrcFoldUsable;

/// The CRC-32 of `n` bytes (16 <= n < kCrcFoldMax) continuing from `crc`, as crc32_gzip_refl.
/// Only where kCrcFoldUsable.
std::uint32_t crc32_fold(std::uint32_t crc, const std::uint8_t* p, std::size_t n);

/// The same over the bytes p[i] | m[i] (`m`: n readable bytes): the ICRC over a frame whose
/// masked fields are ones in `m`, read in place, without a masked copy.
std::uint32_t crc32_fold_or(std::uint32_t crc, const std::uint8_t* p, std::size_t n,
                            const std::uint8_t* m);

/// The fast paths' ICRC kernels, one per block count q (index 1 to 15): (l3, r) with `r` the
/// bytes before the first whole block. Through icrc_fold_v4() and icrc_fold_v4_or().
using IcrcFoldFn = std::uint32_t (*)(const std::uint8_t* l3, unsigned r);
extern const IcrcFoldFn* const kIcrcFoldV4;
extern const IcrcFoldFn* const kIcrcFoldV4Or;

/// The ICRC of an IPv4 frame from its IP header, `n` bytes (16 <= n < kCrcFoldMax) up to its
/// ICRC: crc32_fold(kIcrcSeed, l3, n) over a frame whose masked fields are ones (the transmit
/// side writes them so), with the seed and the block count known in each kernel. Only where
/// kCrcFoldUsable.
[[gnu::always_inline]] inline std::uint32_t icrc_fold_v4(const std::uint8_t* l3, std::size_t n) {
  return kIcrcFoldV4[n >> 4](l3, static_cast<unsigned>(n & 15));
}
/// The same as crc32_fold_or(kIcrcSeed, l3, n, kIcrcOrMaskV4): the masked fields read as ones
/// in place (the receive side).
[[gnu::always_inline]] inline std::uint32_t icrc_fold_v4_or(const std::uint8_t* l3, std::size_t n) {
  return kIcrcFoldV4Or[n >> 4](l3, static_cast<unsigned>(n & 15));
}

}  // namespace roce::wire
