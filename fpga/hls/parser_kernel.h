/// @file
/// The header parser as an HLS-style kernel: the first two flits of a frame (a 128-byte header
/// window: Ethernet, 802.1Q, IPv6, UDP, BTH and the longest extension headers take 106) are
/// kept in registers while the ICRC unit runs over every flit; at the last flit it emits one
/// RxMeta with the verdict and the fields every stage needs. The checks and their order are
/// wire::parse_frame's, so that hardware and software drop the same frames with the same
/// reason (tests/fpga/kernels_csim_test.cc compares them on every sample frame and on every
/// single-byte corruption of their headers).
#pragma once

#include <array>
#include <cstdint>

#include "fpga/hls/icrc_kernel.h"
#include "fpga/hls/stream.h"
#include "fpga/iface/ports.h"

namespace roce::fpga::hls {

struct ParserConfig {
  bool verify_icrc = true;
  bool verify_ip_checksum = true;
  std::uint16_t udp_port = 4791;
};

class HeaderParser {
 public:
  explicit HeaderParser(const ParserConfig& cfg = {}) : cfg_(cfg) {}
  /// Consumes one flit (passed on unchanged); true at the last one, with `meta` filled.
  bool step(Flit& f, RxMeta& meta);

 private:
  RxMeta decide(const IcrcResult& icrc) const;
  ParserConfig cfg_;
  IcrcUnit icrc_;
  std::array<std::uint8_t, 2 * kFlitBytes> win_{};
  std::uint32_t n_ = 0;  ///< frame bytes so far (at most 64 KiB + a flit)
};

/// Parser kernel: flits in, the same flits out, one RxMeta per frame.
template <std::size_t D1, std::size_t D2, std::size_t D3>
void parse_kernel(HeaderParser& p, Stream<Flit, D1>& in, Stream<Flit, D2>& out,
                  Stream<RxMeta, D3>& meta) {
  Flit f;
  while (!out.full() && !meta.full() && in.read(f)) {
    RxMeta m;
    if (p.step(f, m)) meta.write(m);
    out.write(f);
  }
}

}  // namespace roce::fpga::hls
