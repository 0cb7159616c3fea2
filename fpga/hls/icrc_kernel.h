/// @file
/// The ICRC unit as an HLS-style kernel: fixed-width state, one 64-byte flit per call (one
/// clock of a 512-bit datapath), no allocation. It finds the IP header and the end of the
/// transport packet from the first flit (EtherType, optional 802.1Q tag, IPv4 total length or
/// IPv6 payload length), runs CRC-32 over [IP header, ICRC) with IBA's variant fields masked to
/// ones (Annex A17.3.3, as wire/icrc.cc), and captures the four ICRC bytes as they pass. In
/// insert mode it writes the computed ICRC over those bytes. rtl/icrc_unit.sv is the same
/// machine in SystemVerilog; both are checked against wire::compute_icrc.
#pragma once

#include <array>
#include <cstdint>

#include "fpga/hls/stream.h"
#include "fpga/iface/ports.h"

namespace roce::fpga::hls {

/// Reflected CRC-32 (poly 0xEDB88320), one byte per table lookup: a 256 x 32 ROM.
inline constexpr std::array<std::uint32_t, 256> kCrcTable = [] {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    t[i] = c;
  }
  return t;
}();

/// The CRC register after 8 bytes of 0xFF from the all-ones start (the ICRC's prefix).
inline constexpr std::uint32_t kIcrcStart = 0xDEBB20E3u;

/// The unit's verdict on one frame, at its last flit.
struct IcrcResult {
  bool roce_len_ok = false;  ///< an IP frame whose lengths leave room for an ICRC
  std::uint32_t computed = 0;
  std::uint32_t received = 0;
  bool ok() const { return roce_len_ok && computed == received; }
};

class IcrcUnit {
 public:
  /// Consumes one flit; `insert`: also writes the computed ICRC into `f`. Returns true at the
  /// frame's last flit, with `out` filled.
  bool step(Flit& f, bool insert, IcrcResult& out);

 private:
  void start(const Flit& f);
  std::uint16_t pos_ = 0;  ///< frame offset of the flit's byte 0
  std::uint16_t l3_ = 0;   ///< where the IP header starts
  std::uint16_t end_ = 0;  ///< where the ICRC starts
  bool ipv6_ = false;
  bool valid_ = false;  ///< the first flit described an IP frame with room for an ICRC
  bool first_ = true;
  std::uint32_t crc_ = kIcrcStart;
  std::uint32_t rx_icrc_ = 0;
};

/// Check kernel: flits in, the same flits out, one result per frame.
template <std::size_t D1, std::size_t D2, std::size_t D3>
void icrc_check(IcrcUnit& u, Stream<Flit, D1>& in, Stream<Flit, D2>& out,
                Stream<IcrcResult, D3>& res) {
  Flit f;
  while (!out.full() && !res.full() && in.read(f)) {
    IcrcResult r;
    if (u.step(f, false, r)) res.write(r);
    out.write(f);
  }
}

/// Generate kernel: flits in, the same with the ICRC written, out.
template <std::size_t D1, std::size_t D2>
void icrc_insert(IcrcUnit& u, Stream<Flit, D1>& in, Stream<Flit, D2>& out) {
  Flit f;
  while (!out.full() && in.read(f)) {
    IcrcResult r;
    u.step(f, true, r);
    out.write(f);
  }
}

}  // namespace roce::fpga::hls
