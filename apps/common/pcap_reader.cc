#include "apps/common/pcap_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace roce::apps {

std::vector<PcapRecord> read_pcap(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  std::uint8_t hdr[24];
  if (std::fread(hdr, sizeof hdr, 1, f.get()) != 1)
    throw std::runtime_error(path + ": too short for a pcap header");
  std::uint32_t magic;
  std::memcpy(&magic, hdr, 4);
  bool swap = false;
  bool nanos = false;
  switch (magic) {
    case 0xA1B2C3D4:
      break;
    case 0xD4C3B2A1:
      swap = true;
      break;
    case 0xA1B23C4D:
      nanos = true;
      break;
    case 0x4D3CB2A1:
      swap = nanos = true;
      break;
    default:
      throw std::runtime_error(path + ": not a pcap file (pcapng is not supported)");
  }
  auto u32 = [swap](const std::uint8_t* p) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return swap ? __builtin_bswap32(v) : v;
  };
  const std::uint32_t snaplen = u32(hdr + 16);
  std::vector<PcapRecord> out;
  std::uint8_t rec[16];
  while (std::fread(rec, sizeof rec, 1, f.get()) == 1) {
    PcapRecord r;
    const std::uint32_t caplen = u32(rec + 8);
    if (caplen > snaplen || caplen > (1u << 18))
      throw std::runtime_error(path + ": record " + std::to_string(out.size()) +
                               " has an impossible length " + std::to_string(caplen));
    r.timestamp_ns =
        std::uint64_t{u32(rec)} * 1'000'000'000 + std::uint64_t{u32(rec + 4)} * (nanos ? 1 : 1000);
    r.orig_len = u32(rec + 12);
    r.data.resize(caplen);
    if (caplen != 0 && std::fread(r.data.data(), caplen, 1, f.get()) != 1)
      throw std::runtime_error(path + ": ends inside record " + std::to_string(out.size()));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace roce::apps
