/// @file
/// CRC-32 (zlib convention) of short buffers with PCLMULQDQ, every 16-byte block folded
/// straight to the end of the buffer instead of block after block.
///
/// Notation: a 128-bit register holds 16 message bytes loaded little-endian; bit i stands for
/// x^(127 - i) (the reflected order of zlib's CRC, where a byte's least significant bit comes
/// first). A 64-bit operand's bit b stands for x^(63 - b); their carry-less product has bit i
/// for x^(126 - i), i.e. read as a 128-bit register it is x times the product, which every
/// constant below absorbs by carrying one power of x less. P = x^32 + 0x04C11DB7.
///
/// A block followed by 16m more bytes contributes B * x^(128m) mod P. With B = Bh x^64 + Bl
/// (Bh in the low half of the register, Bl in the high half) that is Bh (x^(128m+64) mod P) +
/// Bl (x^(128m) mod P), two independent products per block; their XOR with the last block is a
/// 128-bit Y congruent to the message M. The CRC is Y x^32 mod P: Y's high part is folded twice
/// (x^96, then x^64) down to a 64-bit A, and A mod P comes from Barrett reduction with
/// mu = floor(x^64 / P). The initial CRC value is XORed into the first four message bytes, as
/// in the bitwise algorithm; zero bytes in front of the first, partial block change nothing.
///
/// The constants are computed from P at start-up; tests compare against ISA-L for every length.
#include "dataplane/wire/crc_fold.h"

#include <immintrin.h>

#include "dataplane/wire/icrc.h"

namespace roce::wire {

namespace {

constexpr std::uint64_t kPoly = 0x1'04C1'1DB7ull;  // P, bit e for x^e

/// x^n mod P, bit e for x^e.
std::uint64_t x_pow_mod(unsigned n) {
  std::uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if (r & (std::uint64_t{1} << 32)) r ^= kPoly;
  }
  return r;
}

/// A polynomial of degree < 64 as a 64-bit operand (x^e at bit 63 - e).
std::uint64_t as_operand(std::uint64_t poly) {
  std::uint64_t r = 0;
  for (unsigned e = 0; e < 64; ++e)
    if ((poly >> e) & 1) r |= std::uint64_t{1} << (63 - e);
  return r;
}

struct Constants {
  /// fold[m]: for a block with 16m bytes after it, x^(128m+63) (low) and x^(128m-1) (high)
  std::uint64_t fold[kCrcFoldMax / 16 + 1][2] = {};
  std::uint64_t x95 = 0, x63 = 0;  ///< the two folds of Y's high part (x^96, x^64)
  std::uint64_t mu = 0, p = 0;     ///< Barrett: floor(x^64 / P), and P
  Constants() {
    for (unsigned m = 1; m <= kCrcFoldMax / 16; ++m) {
      fold[m][0] = as_operand(x_pow_mod(128 * m + 63));
      fold[m][1] = as_operand(x_pow_mod(128 * m - 1));
    }
    x95 = as_operand(x_pow_mod(95));
    x63 = as_operand(x_pow_mod(63));
    unsigned __int128 rem = static_cast<unsigned __int128>(1) << 64;
    std::uint64_t q = 0;
    for (int d = 64; d >= 32; --d) {
      if (((rem >> d) & 1) == 0) continue;
      q |= std::uint64_t{1} << (d - 32);
      rem ^= static_cast<unsigned __int128>(kPoly) << (d - 32);
    }
    mu = as_operand(q);
    p = as_operand(kPoly);
  }
};
const Constants kK;

// Byte shuffle that moves the first r bytes of a register to its top (mask at offset r).
alignas(16) constexpr std::uint8_t kHeadShuffle[32] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0,    1,    2,    3,    4,    5,    6,    7,    8,    9,    10,   11,   12,   13,   14,   15};

#define ROCE_CRC_TARGET __attribute__((target("avx,pclmul")))

ROCE_CRC_TARGET inline __m128i load(const std::uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// The contribution of block `b` followed by 16m bytes.
ROCE_CRC_TARGET inline __m128i fold(__m128i b, unsigned m) {
  const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kK.fold[m]));
  return _mm_xor_si128(_mm_clmulepi64_si128(b, k, 0x00), _mm_clmulepi64_si128(b, k, 0x11));
}

}  // namespace

// (A static initializer may run before libgcc's own: __builtin_cpu_init first.)
const bool kCrcFoldUsable = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx");
}();

namespace {
template <bool kOr>
ROCE_CRC_TARGET __attribute__((always_inline)) inline __m128i load_or(const std::uint8_t* p,
                                                                      const std::uint8_t* m) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kOr) return _mm_or_si128(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(m)));
  return v;
}

ROCE_CRC_TARGET __attribute__((always_inline)) inline std::uint32_t reduce(__m128i y);

// The kernel; with kOr, every byte p[i] is read as p[i] | m[i] (the ICRC's masked fields).
template <bool kOr>
ROCE_CRC_TARGET inline std::uint32_t crc32_fold_impl(std::uint32_t crc, const std::uint8_t* p,
                                                     std::size_t n, const std::uint8_t* m) {
  const std::size_t r = n & 15, q = n >> 4;  // a partial head of r bytes, then q whole blocks
  // The head as a block of its own, zeros in front, with the initial value in its first bytes;
  // what of the initial value the head does not hold (all of it without a head) goes to block 0.
  __m128i y = _mm_setzero_si128();
  if (r != 0) {
    const __m128i head =
        _mm_xor_si128(load_or<kOr>(p, m), _mm_cvtsi32_si128(static_cast<int>(~crc)));
    y = fold(_mm_shuffle_epi8(head, load(kHeadShuffle + r)), static_cast<unsigned>(q));
  }
  const std::uint32_t spill = r < 4 ? ~crc >> (8 * r) : 0;
  const __m128i b0 =
      _mm_xor_si128(load_or<kOr>(p + r, m + r), _mm_cvtsi32_si128(static_cast<int>(spill)));
  if (q == 1) {
    y = _mm_xor_si128(y, b0);  // the only block, as it is
  } else {
    // Every block folded to the end: the first (with the spill) by q - 1 blocks, then, without
    // a loop, the one with j blocks after it (at n - 16 (j + 1)) by j, constants and offsets
    // known in each case; the last block as it is.
    y = _mm_xor_si128(y, fold(b0, static_cast<unsigned>(q - 1)));
    const std::uint8_t* pe = p + n;
    const std::uint8_t* me = m + n;
#define ROCE_CRC_BLOCK(j)                                                                    \
  case (j) + 2:                                                                              \
    y = _mm_xor_si128(y, fold(load_or<kOr>(pe - 16 * ((j) + 1), me - 16 * ((j) + 1)), (j))); \
    [[fallthrough]]
    switch (q) {  // q <= 15: n < kCrcFoldMax
      ROCE_CRC_BLOCK(13);
      ROCE_CRC_BLOCK(12);
      ROCE_CRC_BLOCK(11);
      ROCE_CRC_BLOCK(10);
      ROCE_CRC_BLOCK(9);
      ROCE_CRC_BLOCK(8);
      ROCE_CRC_BLOCK(7);
      ROCE_CRC_BLOCK(6);
      ROCE_CRC_BLOCK(5);
      ROCE_CRC_BLOCK(4);
      ROCE_CRC_BLOCK(3);
      ROCE_CRC_BLOCK(2);
      ROCE_CRC_BLOCK(1);
      default:
        y = _mm_xor_si128(y, load_or<kOr>(pe - 16, me - 16));  // the last block, as it is
    }
#undef ROCE_CRC_BLOCK
  }

  return reduce(y);
}

// Y x^32 mod P. A1 = Yh (x^96 mod P) + Yl x^32, below x^96; A = A1h (x^64 mod P) + A1l, below
// x^64, in the high half of `a`; Barrett: q = floor(A mu / x^64), CRC = (A + q P) mod x^32.
ROCE_CRC_TARGET __attribute__((always_inline)) inline std::uint32_t reduce(__m128i y) {
  const __m128i folds =
      _mm_set_epi64x(static_cast<long long>(kK.x63), static_cast<long long>(kK.x95));
  const __m128i barrett =
      _mm_set_epi64x(static_cast<long long>(kK.p), static_cast<long long>(kK.mu));
  const __m128i a1 =
      _mm_xor_si128(_mm_clmulepi64_si128(y, folds, 0x00), _mm_slli_si128(_mm_srli_si128(y, 8), 4));
  const __m128i a = _mm_xor_si128(_mm_clmulepi64_si128(a1, folds, 0x10), a1);
  const __m128i quot = _mm_slli_epi64(_mm_clmulepi64_si128(a, barrett, 0x01), 1);
  const __m128i qp = _mm_clmulepi64_si128(quot, barrett, 0x10);
  const __m128i rem = _mm_xor_si128(_mm_srli_epi64(a, 32), _mm_srli_epi64(qp, 31));
  return ~static_cast<std::uint32_t>(_mm_extract_epi32(rem, 2));
}

// ---- the fast paths' ICRC: the seed and the block count known ------------------------------

// The fields the ICRC masks in an IPv4 frame from its IP header on (TOS, TTL, IP checksum, UDP
// checksum, BTH FECN/BECN/reserved), as icrc.cc's kIcrcOrMaskV4; zeros past them, to 80 bytes:
// a block that starts below 48 reads it whole.
alignas(16) constexpr std::uint8_t kV4Mask[80] = {
    0,   0xFF, 0, 0, 0, 0, 0, 0, 0xFF, 0, 0xFF, 0xFF, 0, 0, 0, 0,  // IPv4
    0,   0,    0, 0, 0, 0, 0, 0, 0,    0, 0xFF, 0xFF, 0, 0, 0, 0,  // IPv4, UDP, BTH
    0xFF};                                                         // BTH

// Block i of the q whole ones after a head of r bytes; only the first three can hold a masked
// field (the last one is at byte 32).
template <bool kOr, unsigned kI>
ROCE_CRC_TARGET __attribute__((always_inline)) inline __m128i block(const std::uint8_t* p,
                                                                    unsigned r) {
  return load_or < kOr && (kI < 3) > (p + r + 16 * kI, kV4Mask + r + 16 * kI);
}

// Blocks kI .. kQ - 2, each folded to the end.
template <bool kOr, unsigned kQ, unsigned kI>
ROCE_CRC_TARGET __attribute__((always_inline)) inline __m128i fold_blocks(const std::uint8_t* p,
                                                                          unsigned r, __m128i y) {
  if constexpr (kI + 1 >= kQ) {
    return y;
  } else {
    y = _mm_xor_si128(y, fold(block<kOr, kI>(p, r), kQ - 1 - kI));
    return fold_blocks<kOr, kQ, kI + 1>(p, r, y);
  }
}

// crc32_fold_impl with crc = kIcrcSeed and q = kQ known: every block's constant and offset
// fixed, no jump over the blocks.
template <bool kOr, unsigned kQ>
ROCE_CRC_TARGET __attribute__((always_inline)) inline std::uint32_t icrc_q(const std::uint8_t* p,
                                                                           unsigned r) {
  constexpr std::uint32_t kNotSeed = ~kIcrcSeed;
  __m128i y = _mm_setzero_si128();
  if (r != 0) {
    const __m128i head =
        _mm_xor_si128(load_or<kOr>(p, kV4Mask), _mm_cvtsi32_si128(static_cast<int>(kNotSeed)));
    y = fold(_mm_shuffle_epi8(head, load(kHeadShuffle + r)), kQ);
  }
  const std::uint32_t spill = r < 4 ? kNotSeed >> (8 * r) : 0;
  const __m128i b0 = _mm_xor_si128(block<kOr, 0>(p, r), _mm_cvtsi32_si128(static_cast<int>(spill)));
  if constexpr (kQ == 1) {
    y = _mm_xor_si128(y, b0);
  } else {
    y = _mm_xor_si128(y, fold(b0, kQ - 1));
    y = fold_blocks<kOr, kQ, 1>(p, r, y);
    y = _mm_xor_si128(y, block<kOr, kQ - 1>(p, r));
  }
  return reduce(y);
}

// One function per block count, so that a call goes straight to its straight-line code.
template <bool kOr, unsigned kQ>
ROCE_CRC_TARGET std::uint32_t icrc_fn(const std::uint8_t* l3, unsigned r) {
  return icrc_q<kOr, kQ>(l3, r);
}

template <bool kOr>
constexpr IcrcFoldFn kIcrcTable[16] = {
    nullptr,          icrc_fn<kOr, 1>,  icrc_fn<kOr, 2>,  icrc_fn<kOr, 3>,
    icrc_fn<kOr, 4>,  icrc_fn<kOr, 5>,  icrc_fn<kOr, 6>,  icrc_fn<kOr, 7>,
    icrc_fn<kOr, 8>,  icrc_fn<kOr, 9>,  icrc_fn<kOr, 10>, icrc_fn<kOr, 11>,
    icrc_fn<kOr, 12>, icrc_fn<kOr, 13>, icrc_fn<kOr, 14>, icrc_fn<kOr, 15>};
}  // namespace

const IcrcFoldFn* const kIcrcFoldV4 = kIcrcTable<false>;
const IcrcFoldFn* const kIcrcFoldV4Or = kIcrcTable<true>;

ROCE_CRC_TARGET std::uint32_t crc32_fold(std::uint32_t crc, const std::uint8_t* p, std::size_t n) {
  return crc32_fold_impl<false>(crc, p, n, p);  // (m unused)
}

ROCE_CRC_TARGET std::uint32_t crc32_fold_or(std::uint32_t crc, const std::uint8_t* p, std::size_t n,
                                            const std::uint8_t* m) {
  return crc32_fold_impl<true>(crc, p, n, m);
}

}  // namespace roce::wire
