/// @file
/// parse_link_text, link_opts (link_text.h).
#include "apps/perf/link_text.h"

#include <sstream>

#include "controlplane/address.h"

namespace roce::perf {

bool parse_link_text(const std::string& text, LinkText& c, std::string& err) {
  std::stringstream ss(text);
  std::string kv;
  while (std::getline(ss, kv, ',')) {
    if (kv.empty()) continue;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) {
      err = "'" + kv + "' is not key=value";
      return false;
    }
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    try {
      if (k == "pmd")
        c.pmd = v;
      else if (k == "socket")
        c.memif_socket = v;
      else if (k == "role")
        c.memif_role = v;
      else if (k == "iface")
        c.iface = v;
      else if (k == "ip")
        c.ip = v;
      else if (k == "mac")
        c.mac = v;
      else if (k == "pcap")
        c.pcap = v;
      else if (k == "tx_drop")
        c.tx_drop = std::stod(v);
      else if (k == "rx_drop")
        c.rx_drop = std::stod(v);
      else if (k == "reorder")
        c.reorder = std::stod(v);
      else if (k == "seed")
        c.seed = std::stoull(v);
      else if (k == "window")
        c.window_bytes = std::stoull(v);
      else if (k == "lcore")
        c.lcore = std::stoi(v);
      else {
        err = "unknown key '" + k + "'";
        return false;
      }
    } catch (const std::exception&) {
      err = "bad number in '" + kv + "'";
      return false;
    }
  }
  if (c.pmd != "memif" && c.pmd != "af_packet") {
    err = "pmd must be memif or af_packet";
    return false;
  }
  if (c.pmd == "memif" &&
      (c.memif_socket.empty() || (c.memif_role != "server" && c.memif_role != "client"))) {
    err = "memif needs socket=PATH and role=server|client";
    return false;
  }
  if (c.pmd == "af_packet" && c.iface.empty()) {
    err = "af_packet needs iface=IF";
    return false;
  }
  if (!ctl::parse_ipv4(c.ip) || !ctl::parse_mac(c.mac)) {
    err = "ip and mac must be an IPv4 address and a MAC address";
    return false;
  }
  for (double p : {c.tx_drop, c.rx_drop, c.reorder})
    if (p < 0 || p >= 1) {
      err = "tx_drop, rx_drop and reorder must be in [0, 1)";
      return false;
    }
  return true;
}

LinkOpts link_opts(const LinkText& l) {
  LinkOpts o;
  o.pmd = l.pmd == "af_packet" ? "af_packet" : l.memif_role == "server" ? "memif-server" : "memif";
  o.iface = l.pmd == "af_packet" ? l.iface : l.memif_socket;
  o.ip = l.ip;
  o.mac = l.mac;
  o.pcap = l.pcap;
  o.lcore = l.lcore;  // -1: the poll loop may run on any CPU of the process
  o.window_bytes = l.window_bytes;
  o.tx_faults.seed = l.seed;
  o.rx_faults.seed = l.seed + 1;
  o.tx_faults.drop_rate = l.tx_drop;
  o.rx_faults.drop_rate = l.rx_drop;
  if (l.reorder > 0) {
    o.tx_faults.reorder_rate = l.reorder;
    o.tx_faults.reorder_window = 4;
  }
  return o;
}

}  // namespace roce::perf
