/// @file
/// How large a frame the virtual PMDs we drive carry, and their device arguments sized for a
/// port's MTU. net_af_packet copies every frame into a slot of a kernel ring (`framesz`, 2 KiB
/// by default): a longer received frame is cut to the slot without a word, a longer frame to
/// send is dropped and only counted in the PMD's oerrors. net_memif copies into shared buffers
/// (`bsize`, 2 KiB by default) and chains a longer frame over several, a path on which DPDK
/// 22.11's receive side crashes. Both are sized here from the MTU (vdev_arg), and a port whose
/// PMD was opened with sizes too small is refused (DpdkPort, with pmd_frames). No DPDK here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace roce::port {

/// The longest frame of a port of `mtu`: Ethernet header, one 802.1Q tag and the IP packet
/// (the FCS is not in an mbuf).
constexpr std::uint32_t max_frame_len(std::uint32_t mtu) { return mtu + 14 + 4; }

/// What a PMD opened with given device arguments carries.
struct PmdFrames {
  std::uint32_t max_frame = 0;  ///< longest frame it sends and receives whole
  std::uint32_t mbuf_room = 0;  ///< mbuf data room its receive queues need (0: any)
  std::string sizing;           ///< the arguments that decide it, for error texts ("framesz=2048")
};

/// For net_af_packet and net_memif devices (`driver` as DPDK names it, or a vdev name such as
/// "net_af_packet0"): what `devargs` (the vdev's arguments, "iface=veth0,framesz=4096") lets it
/// carry. nullopt for other PMDs (a NIC, net_tap, net_ring), whose limit is the MTU itself.
std::optional<PmdFrames> pmd_frames(std::string_view driver, std::string_view devargs);

/// The EAL argument "--vdev=DEVICE,DEVARGS" with the sizes a port of `mtu` needs added where
/// DEVARGS does not give them: net_af_packet's framesz and blocksz (also for the kernel
/// interface's own MTU when that is larger: it would deliver frames that long), net_memif's
/// bsize. memif's buffers are those of the client end for both directions: both ends of a link
/// need the same MTU (a server of a larger MTU than its client would chain its frames over the
/// client's buffers; its received frames in several mbufs count as rx_multiseg). Other devices are
/// passed as they are. Throws std::invalid_argument when DEVARGS sets a size too small for the MTU,
/// or larger than the PMD takes.
std::string vdev_arg(const std::string& device, const std::string& devargs, std::uint32_t mtu);

/// The MTU of kernel interface `iface` (SIOCGIFMTU), or nullopt when there is none by that name.
std::optional<std::uint32_t> kernel_mtu(const std::string& iface);

/// The value of `key` in a vdev's "k1=v1,k2=v2" arguments, or nullopt.
std::optional<std::string> devarg(std::string_view devargs, std::string_view key);

}  // namespace roce::port
