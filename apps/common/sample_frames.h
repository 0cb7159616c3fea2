/// @file
/// A catalogue of realistic RoCEv2 frames: one per opcode of the opcode table, with the field
/// values a live RC/UD exchange would carry. Used by roce-pcap, the demo and the benchmarks.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dataplane/wire/roce_frame.h"

namespace roce::apps {

struct SampleOptions {
  wire::IpVersion ip_version = wire::IpVersion::kV4;
  std::optional<std::uint16_t> vlan_id;
  std::uint32_t pmtu = 1024;  ///< First/Middle packets carry exactly this many payload bytes
};

struct SampleFrame {
  wire::FrameSpec spec;
  std::vector<std::uint8_t> payload;
  std::vector<std::uint8_t> bytes;  ///< the built frame
};

/// One frame for every opcode in kOpcodeTable, in opcode order.
std::vector<SampleFrame> make_sample_frames(const SampleOptions& opts);

}  // namespace roce::apps
