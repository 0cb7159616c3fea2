/// @file
/// Text forms of the addresses a user types (MAC, IPv4, IPv6) and the RoCE GID derived from an
/// IP address (IPv4-mapped ::ffff:a.b.c.d, or the IPv6 address itself). Control-plane only:
/// these allocate and may be slow.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "dataplane/wire/bytes.h"

namespace roce::ctl {

std::optional<wire::MacAddr> parse_mac(std::string_view s);
std::optional<wire::Ipv4Addr> parse_ipv4(std::string_view s);
std::optional<wire::Ipv6Addr> parse_ipv6(std::string_view s);

std::string to_string(const wire::MacAddr& m);
std::string to_string(wire::Ipv4Addr a);
std::string to_string(const wire::Ipv6Addr& a);

/// GID of an IPv4 address: ::ffff:a.b.c.d (IBA Annex A17.4.4 / rdma_cm's iboe GIDs).
wire::Ipv6Addr gid_from_ipv4(wire::Ipv4Addr a);
/// The IPv4 address inside an IPv4-mapped GID, if it is one.
std::optional<wire::Ipv4Addr> ipv4_from_gid(const wire::Ipv6Addr& gid);

}  // namespace roce::ctl
