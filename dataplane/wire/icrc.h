/// @file
/// Invariant CRC of RoCEv2 (IBA Annex A17.3.3; masking as in rxe_icrc.c): CRC-32 (as Ethernet
/// and zlib) over 8 bytes of 0xFF, the IP, UDP and BTH headers with their variant fields set to
/// ones, then the remaining transport headers, payload and pad. Computed with ISA-L and
/// incremental, so headers and payload need not be contiguous.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace roce::wire {

enum class IpVersion : std::uint8_t { kV4 = 4, kV6 = 6 };

/// CRC state after the 8 x 0xFF prefix (zlib form, i.e. after the final XOR): ~0xDEBB20E3.
inline constexpr std::uint32_t kIcrcSeed = 0x2144DF1C;

class Icrc {
 public:
  /// Starts a computation over the IP header (20 bytes for IPv4, 40 for IPv6; no options),
  /// the UDP header and the BTH, which must follow each other at `l3`. Masks a copy, never
  /// the frame.
  static Icrc begin(const std::uint8_t* l3, IpVersion v);
  /// Adds the next bytes (extension headers, payload, pad), in wire order.
  void update(const std::uint8_t* p, std::size_t n);
  void update(std::span<const std::uint8_t> s) { update(s.data(), s.size()); }
  /// The CRC value; store it with store_le32() to put it on the wire.
  std::uint32_t value() const { return crc_; }

 private:
  explicit Icrc(std::uint32_t crc) : crc_(crc) {}
  std::uint32_t crc_;
};

/// ICRC of a contiguous packet: `l3` points to the IP header and `len` bytes run up to, not
/// including, the ICRC trailer.
std::uint32_t compute_icrc(const std::uint8_t* l3, std::size_t len, IpVersion v);

/// The fields the ICRC masks of an IPv4 frame from its IP header on, as an OR mask of
/// kCrcFoldMax bytes (crc_fold.h: crc32_fold_or over a frame in place).
extern const std::uint8_t* const kIcrcOrMaskV4;

/// Plain CRC-32 (zlib convention) continuing from `crc`; exposed for tests and benchmarks.
std::uint32_t crc32_zlib(std::uint32_t crc, const std::uint8_t* p, std::size_t n);

}  // namespace roce::wire
