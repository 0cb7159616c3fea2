// Frames of every length from the smallest (60 bytes, Ethernet's minimum) to a full MTU 4096
// packet plus headers, over IPv4, IPv6 and 802.1Q: shared by the kernels' C simulation, the
// Verilator testbench and the device model's tests.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "dataplane/wire/roce_frame.h"

namespace roce::fpga::test {

struct SweepVariant {
  std::string_view name;
  wire::IpVersion ip;
  bool vlan;
  wire::Opcode opcode;
};

inline std::array<SweepVariant, 4> sweep_variants() {
  return {{{"ipv4", wire::IpVersion::kV4, false, wire::Opcode::kRcWriteOnly},
           {"ipv6", wire::IpVersion::kV6, false, wire::Opcode::kRcSendOnly},
           {"vlan", wire::IpVersion::kV4, true, wire::Opcode::kRcSendOnly},
           {"ipv6-vlan", wire::IpVersion::kV6, true, wire::Opcode::kRcWriteOnly}}};
}

inline wire::FrameSpec sweep_spec(const SweepVariant& v) {
  wire::FrameSpec s;
  s.src_mac = wire::MacAddr{{0x02, 0, 0, 0, 0, 1}};
  s.dst_mac = wire::MacAddr{{0x02, 0, 0, 0, 0, 2}};
  if (v.vlan) s.vlan_id = 100;
  s.ip_version = v.ip;
  s.src_ip4 = wire::Ipv4Addr{0xC0000201};
  s.dst_ip4 = wire::Ipv4Addr{0xC0000202};
  s.src_ip6 = wire::Ipv6Addr{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
  s.dst_ip6 = wire::Ipv6Addr{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}};
  s.tos = 0x02;
  s.opcode = v.opcode;
  s.dest_qp = wire::Qpn{0x000123};
  s.psn = wire::Psn{0xFFFFF0};
  s.ack_req = true;
  s.reth = {0x00007F0012340000, 0x1234ABCD, 0};
  return s;
}

/// Calls f(frame, icrc offset) for payloads of 0..4096 bytes. A payload of p bytes is
/// followed by p % 4 bytes of Ethernet padding after the ICRC, so that the frames take every
/// byte length (and every last-flit fill) in the range; frames under 60 bytes are padded to 60.
template <class F>
void for_each_length(const SweepVariant& v, F&& f) {
  wire::FrameSpec s = sweep_spec(v);
  std::vector<std::uint8_t> payload(4096), buf(4096 + 256);
  for (std::size_t i = 0; i < payload.size(); ++i)
    payload[i] = static_cast<std::uint8_t>(i * 7 + 3);
  for (std::size_t p = 0; p <= 4096; ++p) {
    s.reth.dma_len = static_cast<std::uint32_t>(p);
    s.psn = wire::Psn{static_cast<std::uint32_t>(0xFFFFF0 + p)};
    const std::size_t n = wire::build_frame(s, {payload.data(), p}, buf);
    if (n == 0) continue;
    const std::size_t total = std::max<std::size_t>(n + p % 4, 60);
    std::fill(buf.begin() + static_cast<std::ptrdiff_t>(n),
              buf.begin() + static_cast<std::ptrdiff_t>(total), 0);
    f(std::span<const std::uint8_t>(buf.data(), total), n - 4);
  }
}

}  // namespace roce::fpga::test
