/// @file
/// What a host answers besides RoCE: ARP (RFC 826) requests for our address, ARP replies that
/// fill the neighbour cache, ICMP echo (RFC 792), and for IPv6 neighbour solicitations and
/// advertisements (RFC 4861) and ICMPv6 echo (RFC 4443). Pure functions over frames, no DPDK: the
/// poll loop hands every non-RoCE frame here and transmits what comes back.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dataplane/wire/bytes.h"

namespace roce::port {

struct NeighbourStats {
  std::uint64_t arp_requests_answered = 0, arp_replies_learned = 0, arp_requests_sent = 0;
  std::uint64_t icmp_echo_answered = 0, ignored = 0;
  std::uint64_t nd_solicitations_answered = 0, nd_advertisements_learned = 0;
  std::uint64_t icmp6_echo_answered = 0;
};

class Neighbour {
 public:
  Neighbour(wire::MacAddr mac, wire::Ipv4Addr ip, std::optional<wire::Ipv6Addr> ip6 = {})
      : mac_(mac), ip_(ip), ip6_(ip6) {}

  /// Handles one received frame if it is ARP or ICMP for us: returns the length of the answer
  /// written into `out` (0: consumed, no answer). Returns nullopt for every other frame (RoCE
  /// among them), which the caller hands to the engine.
  std::optional<std::size_t> on_frame(std::span<const std::uint8_t> frame,
                                      std::span<std::uint8_t> out);
  /// Builds an ARP request for `target` into `out`; returns its length.
  std::size_t make_arp_request(wire::Ipv4Addr target, std::span<std::uint8_t> out);
  /// Builds a neighbour solicitation for `target` (to its solicited-node multicast group).
  std::size_t make_neighbour_solicitation(const wire::Ipv6Addr& target,
                                          std::span<std::uint8_t> out);
  std::optional<wire::MacAddr> lookup(wire::Ipv4Addr ip) const;
  std::optional<wire::MacAddr> lookup(const wire::Ipv6Addr& ip) const;
  const NeighbourStats& stats() const { return stats_; }

 private:
  std::size_t on_arp(std::span<const std::uint8_t> frame, std::size_t off,
                     std::span<std::uint8_t> out);
  std::size_t on_icmp(std::span<const std::uint8_t> frame, std::size_t off,
                      std::span<std::uint8_t> out);
  std::size_t on_icmp6(std::span<const std::uint8_t> frame, std::size_t off,
                       std::span<std::uint8_t> out);
  wire::MacAddr mac_;
  wire::Ipv4Addr ip_;
  std::optional<wire::Ipv6Addr> ip6_;
  std::unordered_map<std::uint32_t, wire::MacAddr> cache_;
  std::vector<std::pair<wire::Ipv6Addr, wire::MacAddr>> cache6_;
  NeighbourStats stats_;
};

}  // namespace roce::port
