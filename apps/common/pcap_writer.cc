#include "apps/common/pcap_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace roce::apps {

namespace {
constexpr std::uint32_t kMagicMicros = 0xA1B2C3D4;
constexpr std::uint32_t kLinkTypeEthernet = 1;

// libpcap files are written in the writer's byte order; readers detect it from the magic.
template <class T>
void put(std::FILE* f, T v) {
  if (std::fwrite(&v, sizeof v, 1, f) != 1) throw std::runtime_error("pcap: write failed");
}
}  // namespace

PcapWriter::PcapWriter(const std::string& path, std::uint32_t snaplen)
    : f_(std::fopen(path.c_str(), "wb")), snaplen_(snaplen) {
  if (f_ == nullptr) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  put<std::uint32_t>(f_, kMagicMicros);
  put<std::uint16_t>(f_, 2);  // version 2.4
  put<std::uint16_t>(f_, 4);
  put<std::int32_t>(f_, 0);   // thiszone
  put<std::uint32_t>(f_, 0);  // sigfigs
  put<std::uint32_t>(f_, snaplen_);
  put<std::uint32_t>(f_, kLinkTypeEthernet);
}

PcapWriter::~PcapWriter() { std::fclose(f_); }

void PcapWriter::write(std::span<const std::uint8_t> frame, std::uint64_t timestamp_ns) {
  const auto caplen = static_cast<std::uint32_t>(std::min<std::size_t>(frame.size(), snaplen_));
  put<std::uint32_t>(f_, static_cast<std::uint32_t>(timestamp_ns / 1'000'000'000));
  put<std::uint32_t>(f_, static_cast<std::uint32_t>(timestamp_ns / 1000 % 1'000'000));
  put<std::uint32_t>(f_, caplen);
  put<std::uint32_t>(f_, static_cast<std::uint32_t>(frame.size()));
  if (caplen != 0 && std::fwrite(frame.data(), caplen, 1, f_) != 1)
    throw std::runtime_error("pcap: write failed");
  ++frames_;
}

}  // namespace roce::apps
