/// @file
/// A link: how an in-process host reaches the wire (runtime::Env opens it). One type, written
/// three ways: built in code, parsed from one "key=value,..." string (an application's single
/// flag or environment variable: the NAA host library's NAAICE_ROCE, NetFR's link), or from
/// command-line flags (roce-perf's tools). All three meet in LinkOptions.
///
/// The text form: "pmd=memif,socket=PATH,role=server|client,ip=A,mac=M" or
/// "pmd=af_packet,iface=IF,ip=A,mac=M", then optionally gateway=G, prefix_len=N, pcap=FILE,
/// tx_drop=P, rx_drop=P, reorder=P (a sent frame held back behind 1..4 later ones), seed=N,
/// window=BYTES (the requester window per QP), lcore=CPU.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "dataplane/engine/engine.h"
#include "dataplane/fault_injector.h"
#include "dataplane/port/dpdk_port.h"

namespace roce::runtime {

struct LinkOptions {
  /// af_packet (net_af_packet on `iface`), af_xdp (net_af_xdp), tap (net_tap creates `iface`),
  /// memif (the client end of a net_memif link) or memif-server (its server end).
  std::string pmd = "af_packet";
  std::string iface;  ///< the kernel interface; memif, memif-server: the control socket's path
  std::string ip = "192.0.2.100";
  std::string mac = "02:00:00:00:00:64";
  /// A router on the link: addresses outside our subnet (`prefix_len` bits of `ip`) are
  /// reached through it (its MAC, by ARP); empty: none, peers must be on the link.
  std::string gateway;
  unsigned prefix_len = 24;
  unsigned netdev_mtu = 1500;      ///< largest IP packet on the link (9000 for path MTU 4096)
  std::string pcap;                ///< capture every frame sent and received here
  unsigned vlan = 0;               ///< 802.1Q VLAN of the port (1-4094); 0: untagged
  int lcore = -1;                  ///< the CPU the poll loop runs on; -1: any of the process's
  std::uint64_t window_bytes = 0;  ///< the engine's requester window per QP (0: its default)
  FaultPolicy tx_faults, rx_faults;
  /// The FPGA offload's device model on the port (fpga/model: icrc, parse, or datapath: the
  /// card runs the WRITE and READ tests' QPs); empty: the environment's ROCE_OFFLOAD, else none.
  std::string offload;
  /// Congestion control of the engine (docs/congestion.md): none, dcqcn or delay, and the
  /// rate a QP starts at and recovers to (0: the default, 100 Gb/s).
  std::string cc = "none";
  std::uint32_t cc_max_rate_mbps = 0;
  /// The engine allows selective repeat (EngineConfig::selective_repeat, roced's
  /// `transport: selective_repeat`): roce-perf --selective-repeat.
  bool selective_repeat = false;

  /// The defaults of the text form: a memif server at 192.0.2.1.
  static LinkOptions text_defaults();
  /// One end of a net_memif link on `socket`, `role` server or client (else false).
  bool set_memif(const std::string& socket, const std::string& role);
  bool memif() const { return pmd == "memif" || pmd == "memif-server"; }
  /// Drops this fraction of the frames sent and received, seeded `seed` and `seed` + 1.
  void set_drops(double tx_drop, double rx_drop, std::uint64_t seed);
};

/// Parses `text` into `o` (keys not given keep their value); false and `err` on a bad pair or
/// an incomplete link. Start from LinkOptions::text_defaults() for the text form's defaults.
bool parse_link_text(const std::string& text, LinkOptions& o, std::string& err);

/// Checks `o`'s gateway (an IPv4 address in its subnet) and prefix length (1..32): false and
/// `err` otherwise; true without a gateway.
bool check_gateway(const LinkOptions& o, std::string& err);

/// The EAL --vdev argument for `o`'s interface and PMD; fails (TestFailure) on a bad option.
std::string link_vdev(const LinkOptions& o);
/// The port of `o` (call link_vdev first: it checks the options).
port::PortSpec link_port_spec(const LinkOptions& o);
/// The EAL arguments of a process with one port on `o`: no hugepages, `mem_mb` of memory,
/// `o.lcore` (or any CPU of the process), the vdev; `prefix` and the pid make the file prefix.
std::vector<std::string> link_eal_args(const LinkOptions& o, const std::string& prefix,
                                       unsigned mem_mb = 512);
/// The engine of `o`: its addresses, VLAN, requester window, no credits (as rxe), and the
/// path MTU the link carries.
engine::EngineConfig link_engine_config(const LinkOptions& o);

/// Headers a path MTU leaves room for in the IP MTU. rxe reckons its active MTU as the netdev
/// MTU less 80 bytes; rdma_cm's iboe_get_mtu takes 96 (GRH 40 + UDP 8 + BTH 12 + XRC 4 +
/// AtomicETH 28 + ICRC 4), which roced follows.
inline constexpr unsigned kRxeHeaderRoom = 80;
inline constexpr unsigned kIboeHeaderRoom = 96;
/// The largest path MTU (256..4096) a link of `netdev_mtu` carries with `room` bytes of headers.
engine::Mtu link_path_mtu(unsigned netdev_mtu, unsigned room = kRxeHeaderRoom);

/// The value of --vlan (into `v`): a VLAN ID between 1 and 4094, else a program_options::error.
boost::program_options::typed_value<std::string>* vlan_value(unsigned* v);

/// A link's command-line flags: --iface, --pmd, --ip, --mac, --gateway, --prefix-len,
/// --netdev-mtu, --vlan, --lcore, --pcap, --offload, --tx-drop, --rx-drop, --fault-seed,
/// written into `link`.
struct LinkFlags {
  LinkOptions link;
  double tx_drop = 0, rx_drop = 0;
  std::uint64_t seed = 1;

  void add_to(boost::program_options::options_description& d);
  /// Checks the values and sets up the fault policies; throws program_options::error.
  void finish();
  bool faults() const { return tx_drop > 0 || rx_drop > 0; }
};

}  // namespace roce::runtime
