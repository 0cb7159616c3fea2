/// @file
/// Writes classic libpcap files (LINKTYPE_ETHERNET, microsecond timestamps) that tshark,
/// tcpdump and scapy read.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

namespace roce::apps {

class PcapWriter {
 public:
  /// Opens (truncates) `path` and writes the file header. Throws std::runtime_error on failure.
  explicit PcapWriter(const std::string& path, std::uint32_t snaplen = 65535);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  /// Appends one frame (Ethernet header first, no FCS) with the given timestamp.
  void write(std::span<const std::uint8_t> frame, std::uint64_t timestamp_ns);
  std::size_t frames() const { return frames_; }

 private:
  std::FILE* f_;
  std::uint32_t snaplen_;
  std::size_t frames_ = 0;
};

}  // namespace roce::apps
