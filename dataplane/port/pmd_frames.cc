/// @file
/// Frame sizes of net_af_packet and net_memif, from their device arguments and the MTU.
#include "dataplane/port/pmd_frames.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <stdexcept>

namespace roce::port {

namespace {

// net_af_packet (TPACKET_V2 rings): a received frame starts 66 bytes into its slot (the kernel
// puts it at TPACKET_ALIGN(tpacket2_hdr 32 + sockaddr_ll 20 + 16 bytes of MAC room) minus the
// 14-byte Ethernet header) and is cut at the slot's end; a frame to send may take the slot but
// for 32 bytes (the PMD's frame_data_size), and the PMD wants an mbuf to hold that much.
constexpr std::uint32_t kAfPacketRxOffset = 66;
constexpr std::uint32_t kAfPacketTxOffset = 32;
constexpr std::uint32_t kAfPacketDefaultFrame = 2048;  // DPDK's DFLT_FRAME_SIZE
// net_memif: one descriptor's buffer (DPDK's ETH_MEMIF_DEFAULT_PKT_BUFFER_SIZE); a uint16_t.
// Ours are a multiple of 128 bytes (whole cache lines) that holds the longest frame.
constexpr std::uint32_t kMemifDefaultBuffer = 2048;
constexpr std::uint32_t kMemifBufferAlign = 128;
constexpr std::uint32_t kMemifMaxBuffer = 65535;

bool is_af_packet(std::string_view d) { return d.starts_with("net_af_packet"); }
bool is_memif(std::string_view d) { return d.starts_with("net_memif"); }

std::optional<std::uint32_t> number(std::string_view devargs, std::string_view key) {
  const auto v = devarg(devargs, key);
  if (!v) return std::nullopt;
  std::uint32_t n = 0;
  const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc{} || end != v->data() + v->size())
    throw std::invalid_argument(std::string(key) + "=" + *v + " is not a number");
  return n;
}

PmdFrames af_packet_frames(std::uint32_t framesz) {
  const std::uint32_t rx = framesz > kAfPacketRxOffset ? framesz - kAfPacketRxOffset : 0;
  const std::uint32_t tx = framesz > kAfPacketTxOffset ? framesz - kAfPacketTxOffset : 0;
  return {std::min(rx, tx), tx, "framesz=" + std::to_string(framesz)};
}

}  // namespace

std::optional<std::string> devarg(std::string_view devargs, std::string_view key) {
  while (!devargs.empty()) {
    const std::size_t comma = devargs.find(',');
    const std::string_view kv = devargs.substr(0, comma);
    const std::size_t eq = kv.find('=');
    if (eq != std::string_view::npos && kv.substr(0, eq) == key)
      return std::string(kv.substr(eq + 1));
    if (comma == std::string_view::npos) break;
    devargs.remove_prefix(comma + 1);
  }
  return std::nullopt;
}

std::optional<PmdFrames> pmd_frames(std::string_view driver, std::string_view devargs) {
  if (is_af_packet(driver))
    return af_packet_frames(number(devargs, "framesz").value_or(kAfPacketDefaultFrame));
  if (is_memif(driver)) {
    // A frame from one buffer must fit one mbuf too: memif's receive chains mbufs otherwise.
    const std::uint32_t b = number(devargs, "bsize").value_or(kMemifDefaultBuffer);
    return PmdFrames{b, b, "bsize=" + std::to_string(b)};
  }
  return std::nullopt;
}

std::optional<std::uint32_t> kernel_mtu(const std::string& iface) {
  if (iface.empty() || iface.size() >= IFNAMSIZ) return std::nullopt;
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return std::nullopt;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, iface.data(), iface.size());
  const int rc = ::ioctl(s, SIOCGIFMTU, &ifr);
  ::close(s);
  if (rc != 0 || ifr.ifr_mtu <= 0) return std::nullopt;
  return static_cast<std::uint32_t>(ifr.ifr_mtu);
}

std::string vdev_arg(const std::string& device, const std::string& devargs, std::uint32_t mtu) {
  std::string args = devargs;
  const auto add = [&](const std::string& kv) { args += (args.empty() ? "" : ",") + kv; };
  const auto too_small = [&](const PmdFrames& f, std::uint32_t frame, const std::string& fix) {
    return std::invalid_argument(device + ": " + f.sizing + " carries frames of up to " +
                                 std::to_string(f.max_frame) + " bytes; MTU " +
                                 std::to_string(mtu) + " needs " + std::to_string(frame) + " (" +
                                 fix + ")");
  };
  if (is_af_packet(device)) {
    // The kernel interface delivers frames of its own MTU, whatever the port's.
    std::uint32_t frame = max_frame_len(mtu);
    if (const auto iface = devarg(devargs, "iface"))
      if (const auto k = kernel_mtu(*iface)) frame = std::max(frame, max_frame_len(*k));
    const std::uint32_t want =
        std::max(kAfPacketDefaultFrame, std::bit_ceil(frame + kAfPacketRxOffset));
    if (const auto given = number(devargs, "framesz")) {
      const PmdFrames f = af_packet_frames(*given);
      if (f.max_frame < frame)
        throw too_small(f, frame, "framesz=" + std::to_string(want) + " or more");
    } else {
      add("framesz=" + std::to_string(want));
      const auto block = number(devargs, "blocksz");
      const auto page = static_cast<std::uint32_t>(::sysconf(_SC_PAGESIZE));
      if (block && *block < want)
        throw std::invalid_argument(device + ": blocksz=" + std::to_string(*block) +
                                    " is smaller than the frames MTU " + std::to_string(mtu) +
                                    " needs (framesz=" + std::to_string(want) + ")");
      if (!block && want > page) add("blocksz=" + std::to_string(want));
    }
  } else if (is_memif(device)) {
    const std::uint32_t frame = max_frame_len(mtu);
    const std::uint32_t want =
        std::max(kMemifDefaultBuffer,
                 (frame + kMemifBufferAlign - 1) / kMemifBufferAlign * kMemifBufferAlign);
    if (want > kMemifMaxBuffer)
      throw std::invalid_argument(device + ": MTU " + std::to_string(mtu) +
                                  " needs memif buffers larger than the PMD's 65535 bytes");
    if (const auto given = number(devargs, "bsize")) {
      if (*given > kMemifMaxBuffer)
        throw std::invalid_argument(device + ": bsize=" + std::to_string(*given) +
                                    " is larger than the PMD's 65535 bytes");
      if (*given < frame)
        throw too_small(*pmd_frames(device, devargs), frame,
                        "bsize=" + std::to_string(want) + ": a frame over several buffers " +
                            "takes a path of the PMD that crashes in DPDK 22.11");
    } else {
      add("bsize=" + std::to_string(want));
    }
  }
  return "--vdev=" + device + (args.empty() ? "" : "," + args);
}

}  // namespace roce::port
