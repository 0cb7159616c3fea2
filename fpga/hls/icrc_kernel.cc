/// @file
/// The ICRC unit, one flit per step (icrc_kernel.h).
#include "fpga/hls/icrc_kernel.h"

namespace roce::fpga::hls {
namespace {

std::uint16_t be16(const Flit& f, unsigned at) {
  return static_cast<std::uint16_t>(f.data[at] << 8 | f.data[at + 1]);
}

/// The byte the CRC sees at offset `r` from the IP header: variant fields as ones.
std::uint8_t masked(std::uint8_t b, unsigned r, bool ipv6) {
  if (!ipv6) {
    // IPv4: TOS, TTL, header checksum; UDP checksum (20 + 6); BTH byte 4 (28 + 4).
    if (r == 1 || r == 8 || r == 10 || r == 11 || r == 26 || r == 27 || r == 32) return 0xFF;
    return b;
  }
  // IPv6: traffic class and flow label, hop limit; UDP checksum (40 + 6); BTH byte 4 (48 + 4).
  if (r == 0) return static_cast<std::uint8_t>(b | 0x0F);
  if (r == 1 || r == 2 || r == 3 || r == 7 || r == 46 || r == 47 || r == 52) return 0xFF;
  return b;
}

}  // namespace

void IcrcUnit::start(const Flit& f) {
  pos_ = 0;
  crc_ = kIcrcStart;
  rx_icrc_ = 0;
  std::uint16_t type = be16(f, 12);
  l3_ = 14;
  if (type == 0x8100) {
    type = be16(f, 16);
    l3_ = 18;
  }
  valid_ = false;
  if (type == 0x0800) {
    const unsigned total = be16(f, l3_ + 2);
    ipv6_ = false;
    valid_ = total >= 20 + 8 + 12 + 4;
    end_ = static_cast<std::uint16_t>(l3_ + total - 4);
  } else if (type == 0x86DD) {
    const unsigned payload = be16(f, l3_ + 4);
    ipv6_ = true;
    valid_ = payload >= 8 + 12 + 4;
    end_ = static_cast<std::uint16_t>(l3_ + 40 + payload - 4);
  }
}

bool IcrcUnit::step(Flit& f, bool insert, IcrcResult& out) {
  if (first_) start(f);
  first_ = false;
  // One flit = one clock: in RTL the 64 byte updates are one combinational chain.
  for (unsigned i = 0; i < kFlitBytes; ++i) {
    if (!((f.keep >> i) & 1)) continue;
    const unsigned p = pos_ + i;
    if (!valid_) continue;
    if (p >= l3_ && p < end_) {
      const std::uint8_t b = masked(f.data[i], p - l3_, ipv6_);
      crc_ = (crc_ >> 8) ^ kCrcTable[(crc_ ^ b) & 0xFF];
    } else if (p >= end_ && p < end_ + 4u) {
      const unsigned k = p - end_;
      rx_icrc_ |= std::uint32_t{f.data[i]} << (8 * k);  // the ICRC is stored little-endian
      if (insert) f.data[i] = static_cast<std::uint8_t>(~crc_ >> (8 * k));
    }
  }
  pos_ = static_cast<std::uint16_t>(pos_ + kFlitBytes);
  if (!f.last) return false;
  // A frame that ended before its ICRC (shorter than its IP length says) is not valid.
  out.roce_len_ok =
      valid_ &&
      pos_ - kFlitBytes + static_cast<unsigned>(__builtin_popcountll(f.keep)) >= end_ + 4u;
  out.computed = ~crc_;
  out.received = rx_icrc_;
  first_ = true;
  return true;
}

}  // namespace roce::fpga::hls
