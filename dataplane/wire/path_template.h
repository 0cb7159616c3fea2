/// @file
/// The hot-path frame writer. A QP's Ethernet, IPv4 and UDP headers are the same for every
/// packet but for three lengths, the IP ID and the IP checksum, so they are built once per
/// path (make_path_template) and each packet starts as a copy of them. The headers are first
/// written with the fields the ICRC masks set to ones, so that the ICRC is computed over the
/// frame in place (no masked copy), and the real values go in afterwards. The bytes on the
/// wire are exactly those of write_frame_headers() + finish_frame() (tests compare them).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "dataplane/wire/roce_frame.h"

namespace roce::wire {

struct PathTemplate {
  /// Ethernet (with the 802.1Q tag when there is one), IPv4 and UDP, masked fields as ones.
  std::array<std::uint8_t, 48> bytes{};
  std::uint8_t len = 0;  ///< 0: this path cannot use the template (IPv6)
  std::uint8_t l3_off = 0;
  std::uint8_t tos = 0;
  std::uint8_t ttl = 0;
  bool ip_checksum = true;
  std::uint32_t ip_sum = 0;  ///< one's-complement sum of the IPv4 words that never change
  std::uint16_t pkey = 0;
  Qpn dest_qp;

  bool usable() const { return len != 0; }
};

/// The template of `path` (FrameSpec's L2, L3, L4 and BTH P_Key/DestQP); unusable for IPv6.
PathTemplate make_path_template(const FrameSpec& path);

/// What changes from packet to packet.
struct PacketFields {
  Opcode opcode{};
  bool se = false;
  bool ack_req = false;
  Psn psn;
  std::uint16_t ip_id = 0;
  std::uint64_t reth_va = 0;
  std::uint32_t reth_rkey = 0;
  std::uint32_t reth_len = 0;
  std::uint32_t imm = 0;
  std::uint32_t ieth_rkey = 0;
  Syndrome aeth_syndrome = Syndrome::ack();
  Msn aeth_msn;
};

/// Extension headers the template writer leaves to write_frame_headers().
inline constexpr std::uint32_t kSlowExts =
    OpMask::kAtomicEth | OpMask::kAtomicAckEth | OpMask::kDeth | OpMask::kFeth | OpMask::kCnpPad;

/// Whether write_masked_headers() can write `op` (BTH with RETH, ImmDt, IETH or AETH).
inline bool fast_opcode(Opcode op) {
  const OpcodeInfo& info = opcode_info(op);
  return info.valid() && !info.mask.any(kSlowExts);
}

/// Writes the headers of a packet of `payload_len` bytes from the template, the ICRC-masked
/// fields still set to ones. Returns the header length, or 0 when the opcode is not a
/// fast_opcode(), the payload does not fit it, or the template is unusable.
std::size_t write_masked_headers(const PathTemplate& t, const PacketFields& f,
                                 std::size_t payload_len, std::uint8_t* out);

/// After the payload was put at out[hdr_len]: writes pad and ICRC (computed in place) and the
/// masked fields' real values. Returns the frame length.
std::size_t finish_masked(const PathTemplate& t, std::size_t hdr_len, std::size_t payload_len,
                          std::uint8_t* out);

/// A whole frame in one call (the requester's hot path): write_masked_headers(), then the
/// payload copied from `payload` (`payload_len` bytes), then finish_masked(). Returns the frame
/// length, or 0 when write_masked_headers() would (nothing is written then but headers).
std::size_t write_masked_frame(const PathTemplate& t, const PacketFields& f,
                               const std::uint8_t* payload, std::size_t payload_len,
                               std::uint8_t* out);

/// The zero-copy form: the payload is `pieces`, wherever they live; pad and ICRC go to
/// `trailer` (8 bytes of room). Fills in the masked fields of `headers` and returns the
/// trailer's length.
std::size_t finish_masked_pieces(const PathTemplate& t, std::span<std::uint8_t> headers,
                                 std::span<const std::span<const std::uint8_t>> pieces,
                                 std::uint8_t* trailer);

}  // namespace roce::wire
