/// @file
/// What a host answers besides RoCE: ARP (RFC 826) requests for our address, ARP replies that
/// fill the neighbour cache, ICMP echo (RFC 792), and for IPv6 neighbour solicitations and
/// advertisements (RFC 4861) and ICMPv6 echo (RFC 4443). Pure functions over frames, no DPDK: the
/// poll loop hands every non-RoCE frame here and transmits what comes back.
///
/// The caches are bounded and allocated at construction (neighbour_table.h): a peer on the
/// segment may send any frames, but learns nothing into them except in answer to a request of
/// ours or by asking for our own address (Linux's arp_accept=0), and never moves a known peer.
/// Every frame refused is counted in NeighbourStats.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>

#include "dataplane/port/neighbour_table.h"
#include "dataplane/wire/bytes.h"

namespace roce::port {

struct NeighbourStats {
  std::uint64_t arp_requests_answered = 0, arp_replies_learned = 0, arp_requests_sent = 0;
  std::uint64_t icmp_echo_answered = 0, ignored = 0;
  std::uint64_t nd_solicitations_answered = 0, nd_advertisements_learned = 0;
  std::uint64_t icmp6_echo_answered = 0;
  // Refused, each by reason (the frame is consumed; nothing is learned from it)
  std::uint64_t arp_unsolicited = 0;       ///< a reply (or gratuitous ARP) we did not ask for
  std::uint64_t arp_not_for_us = 0;        ///< a request for another address: not learned from
  std::uint64_t arp_conflicts = 0;         ///< a request to us naming another MAC for a known peer
  std::uint64_t arp_malformed = 0;         ///< short, not Ethernet/IPv4, unknown opcode, bad sender
  std::uint64_t nd_unsolicited = 0;        ///< an advertisement we did not solicit
  std::uint64_t nd_not_for_us = 0;         ///< a solicitation for another address
  std::uint64_t nd_conflicts = 0;          ///< a solicitation naming another MAC for a known peer
  std::uint64_t nd_malformed = 0;          ///< short, hop limit not 255, bad checksum, bad option
  std::uint64_t neighbour_cache_full = 0;  ///< no room and nothing cold to evict (both caches)
  std::uint64_t neighbour_evicted = 0;     ///< cold entries evicted for new ones (both caches)
  std::uint64_t arp_entries = 0, nd_entries = 0;  ///< gauges: entries held now
};

class Neighbour {
 public:
  static constexpr std::uint32_t kDefaultCapacity = 4096;
  /// `capacity`: entries of each cache (ARP and ND), allocated here.
  Neighbour(wire::MacAddr mac, wire::Ipv4Addr ip, std::optional<wire::Ipv6Addr> ip6 = {},
            std::uint32_t capacity = kDefaultCapacity);

  /// Handles one received frame if it is ARP or ICMP for us: returns the length of the answer
  /// written into `out` (0: consumed, no answer). Returns nullopt for every other frame (RoCE
  /// among them), which the caller hands to the engine.
  std::optional<std::size_t> on_frame(std::span<const std::uint8_t> frame,
                                      std::span<std::uint8_t> out);
  /// Builds an ARP request for `target` into `out`; returns its length. The reply is expected
  /// from then on (the only ARP reply the cache takes).
  std::size_t make_arp_request(wire::Ipv4Addr target, std::span<std::uint8_t> out);
  /// Builds a neighbour solicitation for `target` (to its solicited-node multicast group); the
  /// advertisement is expected from then on.
  std::size_t make_neighbour_solicitation(const wire::Ipv6Addr& target,
                                          std::span<std::uint8_t> out);
  /// The MAC of a neighbour; the entry is in use from then on and never evicted. The port's
  /// own address is its own MAC, without ARP: the poll loop delivers frames to it back to the
  /// engine (self_delivery.h).
  std::optional<wire::MacAddr> lookup(wire::Ipv4Addr ip) {
    if (ip == ip_) return mac_;
    return cache_.lookup(next_hop(ip));
  }
  /// A route: addresses outside our /`prefix_len` subnet are reached through `gateway` (one
  /// of the subnet): lookup() and make_arp_request() of them take the gateway's MAC, as the
  /// kernel's default route gives rxe's packets. prefix_len 32 or no call: every address is
  /// asked for itself (the link's hosts only).
  void set_gateway(wire::Ipv4Addr gateway, unsigned prefix_len) {
    mask_ = prefix_len == 0 ? 0 : ~std::uint32_t{0} << (32 - std::min(prefix_len, 32u));
    gateway_ = gateway;
  }
  /// Where a frame to `ip` goes: `ip` itself on our subnet (or without a gateway), else the
  /// gateway.
  wire::Ipv4Addr next_hop(wire::Ipv4Addr ip) const {
    if (!gateway_ || ((ip.v ^ ip_.v) & mask_) == 0) return ip;
    return *gateway_;
  }
  std::optional<wire::MacAddr> lookup(const wire::Ipv6Addr& ip) {
    if (ip6_ && ip == *ip6_) return mac_;
    return cache6_.lookup(ip);
  }
  const NeighbourStats& stats() const;
  std::size_t capacity() const { return cache_.capacity(); }
  /// Bytes the two caches hold (all allocated by the constructor).
  std::size_t footprint() const { return cache_.footprint() + cache6_.footprint(); }

 private:
  std::size_t on_arp(std::span<const std::uint8_t> frame, std::size_t off,
                     std::span<std::uint8_t> out);
  std::size_t on_icmp(std::span<const std::uint8_t> frame, std::size_t off,
                      std::span<std::uint8_t> out);
  std::size_t on_icmp6(std::span<const std::uint8_t> frame, std::size_t off,
                       std::span<std::uint8_t> out);
  wire::MacAddr mac_;
  wire::Ipv4Addr ip_;
  std::optional<wire::Ipv4Addr> gateway_;  ///< set_gateway
  std::uint32_t mask_ = ~std::uint32_t{0};
  std::optional<wire::Ipv6Addr> ip6_;
  void count(LearnResult r, std::uint64_t& conflicts);
  NeighbourTable<wire::Ipv4Addr> cache_;
  NeighbourTable<wire::Ipv6Addr> cache6_;
  mutable NeighbourStats stats_;
};

}  // namespace roce::port
