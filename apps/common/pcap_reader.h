/// @file
/// Reads classic libpcap files (either byte order, micro- or nanosecond stamps) written by
/// tcpdump, tshark -F pcap, DPDK's pdump or PcapWriter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace roce::apps {

struct PcapRecord {
  std::uint64_t timestamp_ns = 0;
  std::uint32_t orig_len = 0;
  std::vector<std::uint8_t> data;  ///< captured bytes (may be shorter than orig_len)
};

/// Reads every record. Throws std::runtime_error naming the file and the problem when the
/// file is not a pcap file or ends inside a record.
std::vector<PcapRecord> read_pcap(const std::string& path);

}  // namespace roce::apps
