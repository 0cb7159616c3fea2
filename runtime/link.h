/// @file
/// A link written as one "key=value,..." string, as applications take it from a single flag or
/// environment variable (the NAA host library's NAAICE_ROCE, roce-naa's flags, NetFR's link):
/// "pmd=memif,socket=PATH,role=server|client,ip=A,mac=M" or "pmd=af_packet,iface=IF,ip=A,mac=M",
/// then optionally pcap=FILE, tx_drop=P, rx_drop=P, reorder=P (a sent frame held back behind
/// 1..4 later ones), seed=N, window=BYTES (the requester window per QP), lcore=CPU.
#pragma once

#include <cstdint>
#include <string>

#include "apps/perf/env.h"

namespace roce::perf {

struct LinkText {
  std::string pmd = "memif";          ///< memif or af_packet
  std::string memif_socket;           ///< memif: the control socket's path
  std::string memif_role = "server";  ///< memif: server (creates the socket) or client
  std::string iface;                  ///< af_packet: the kernel interface
  std::string ip = "192.0.2.1";
  std::string mac = "02:00:00:00:00:01";
  std::string pcap;  ///< capture every frame here
  double tx_drop = 0, rx_drop = 0;
  double reorder = 0;
  std::uint64_t seed = 1;
  std::uint64_t window_bytes = 0;  ///< 0: the engine's
  int lcore = -1;                  ///< the CPU the poll loop runs on (-1: any of the process's)
};

/// Parses `text` into `c` (keys not given keep their value); false and `err` on a bad pair or
/// an incomplete link.
bool parse_link_text(const std::string& text, LinkText& c, std::string& err);
/// The Env options of `l` (Env(link_opts(l)) opens the link).
LinkOpts link_opts(const LinkText& l);

}  // namespace roce::perf
