/// @file
/// In-process on a kernel interface (`--pmd af_packet`): the link takes the interface's own
/// MAC and IPv4 address unless ROCE_LINK names others, as rxe takes its netdev's, so that a
/// program opening the device neither renames the host's interface nor invents an address;
/// and the interface's promiscuous flag, which the DPDK port turns on, goes back to what it
/// was when the program exits, and so does its MAC when ROCE_LINK named another.
#pragma once

#include <string>

#include "runtime/link.h"

namespace roce::verbs_compat {

/// Fills `link.mac` (when `!mac_given`) and `link.ip` (when `!ip_given`) from `link.iface`
/// when the link is af_packet. False with `err` when the interface is missing or has no IPv4
/// address and none was given.
bool netdev_defaults(runtime::LinkOptions& link, bool mac_given, bool ip_given, std::string& err);

/// Remembers whether `iface` is promiscuous now, and its MAC (call before the port starts).
void remember_promiscuous(const std::string& iface);
/// Puts the remembered flag and MAC back (at exit; nothing if nothing was remembered).
void restore_promiscuous();

}  // namespace roce::verbs_compat
