/// @file
/// The appliance configuration: parsed once from YAML (yaml-cpp) into plain structs, validated
/// here, and never seen as YAML by the dataplane. Every error names the file, the line and the
/// key; unknown keys are errors, so a typo cannot silently fall back to a default.
/// Reference of every key: docs/configuration.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dataplane/engine/cc/config.h"
#include "dataplane/fault_injector.h"
#include "dataplane/wire/bytes.h"

namespace roce::ctl {

struct PortConfig {
  std::string name;
  std::string device;   ///< DPDK device: a PCI address or a vdev name (net_memif0, net_ring0, ...)
  std::string devargs;  ///< vdev arguments, e.g. "role=server,socket=/run/roce/memif.sock"
  wire::MacAddr mac;
  wire::Ipv4Addr ipv4;
  std::uint8_t ipv4_prefix = 24;
  std::optional<wire::Ipv6Addr> ipv6;
  std::uint8_t ipv6_prefix = 64;
  std::uint16_t mtu = 1500;
  std::optional<std::uint16_t> vlan;
  std::uint32_t mbufs = 8192;
  bool zero_copy = true;              ///< payloads from registered memory where the PMD allows
  std::uint32_t zero_copy_min = 512;  ///< smallest payload sent zero-copy
  std::uint16_t rx_desc = 1024;
  std::uint16_t tx_desc = 1024;
  FaultPolicy fault;
  /// The FPGA offload of this port's frames (fpga/model stands in for the card; docs/fpga.md):
  /// `offload: icrc` or `offload: {mode: parse, clock_mhz: 250, bytes_per_cycle: 64}`.
  struct {
    std::string mode = "none";  ///< none, icrc, parse
    std::uint32_t clock_mhz = 250;
    std::uint32_t bytes_per_cycle = 64;
    std::uint32_t line_gbps = 100;
  } offload;
  /// ECN, CNPs and rate control of this port's engines (`congestion:`, docs/congestion.md).
  engine::cc::CongestionConfig congestion;
  /// The parameter mappings of `congestion:` given for an algorithm the port does not run
  /// ("dcqcn", "delay"): accepted, used by nothing; roced warns (`dcqcn:` without
  /// `algorithm: dcqcn` is what a ConnectX user who only copied mlxconfig's values writes).
  std::vector<std::string> congestion_unused;
};

/// One of a hosted service's own keys (`services[i].<key>`, declared by its kind in the service
/// registry, runtime/service.h): the value as written, a scalar or a list of scalars, and where.
struct ServiceOption {
  std::vector<std::string> values;  ///< a scalar: one value; a list: its items
  bool list = false;
  std::string where;  ///< "file:line:column: services[i].key", for the kind's errors
};

/// A service the appliance hosts (`services[]`; docs/new-application.md): its kind (one the
/// service registry knows: perftest's and pingpong's tests, coyote, naa, nfs, echo, ...), the
/// port whose engine and loop it runs on, where it listens, its args and its kind's own keys.
struct ServiceConfig {
  std::string kind;                   ///< `kind:` (or `test:`, its first spelling)
  std::string port;                   ///< name of the port under `ports`
  std::uint16_t listen_port = 18515;  ///< TCP or rdma_cm, as the kind says; its default if unset
  /// Where its TCP listeners listen: the management address (`control.listen`'s) unless
  /// given; 0.0.0.0 (every kernel address) only when asked for.
  wire::Ipv4Addr listen_address{0x7F000001};
  std::vector<std::string> args;                 ///< the kind's command-line style options
  std::map<std::string, ServiceOption> options;  ///< the kind's own keys, as written

  // The kind's own keys, typed; a bad value throws ConfigError naming file, line and key.
  bool has(const std::string& key) const { return options.count(key) != 0; }
  std::string option(const std::string& key, const std::string& def) const;
  std::uint64_t option_uint(const std::string& key, std::uint64_t def, std::uint64_t lo,
                            std::uint64_t hi) const;
  bool option_bool(const std::string& key, bool def) const;
  std::vector<std::string> option_list(const std::string& key) const;
};

/// What the configuration reader knows of a kind of hosted service. The service registry
/// (runtime/service.h) hands the reader these; the reader links no service.
struct ServiceKindKeys {
  std::string name;
  std::vector<std::string> keys;       ///< its own keys under services[i]
  std::uint16_t default_port = 18515;  ///< listen_port when unset
  std::uint16_t ports = 1;             ///< listen_port and the next ports - 1 are the service's
};
using ServiceKinds = std::vector<ServiceKindKeys>;

struct ApplianceConfig {
  std::string name = "roce";
  std::vector<std::string> eal_args;  ///< extra EAL arguments
  std::vector<unsigned> lcores{0};
  std::vector<PortConfig> ports;
  struct {
    std::uint32_t max_qps = 4096;
    std::uint32_t max_mrs = 65536;
    std::uint32_t cq_depth = 4096;
    std::uint32_t tx_slots = 512;
    std::uint32_t neighbours = 4096;      ///< entries of each neighbour cache (ARP, ND) per loop
    std::uint32_t cm_connections = 4096;  ///< CM connections and SIDR exchanges per CM agent
  } limits;
  struct {
    std::uint32_t ack_req_every = 16;
    std::uint32_t max_inflight_psns = 1024;
    std::uint64_t max_inflight_bytes = 1 << 20;  ///< the window in bytes
    std::uint32_t loss_window = 64;              ///< requester window after a loss, growing back
    std::uint32_t recovery_batch = 4;            ///< packets per poll of a QP in loss recovery
    std::uint32_t probe_min_us = 50;             ///< fast-retransmit probe floor; 0: off
    bool selective_repeat = false;  ///< announced in the CM's ECE; used with peers that do too
    /// Selective repeat's bandwidth-delay cap on packets in flight (EngineConfig::sr_bdp_cap):
    /// bytes, kSrBdpAuto (`auto`: each port's speed x the smallest round trip measured), 0 off.
    std::uint64_t sr_bdp_cap = 0;
  } transport;
  struct {
    std::string level = "info";  ///< error, warning, info, debug
  } logging;
  /// Idle mode of the poll loops (dataplane/port/idle.h): after this many empty polls in a
  /// row, sleep idle_sleep_us between polls; 0 (the default): busy polling.
  struct {
    std::uint32_t idle_after_polls = 0;
    std::uint32_t idle_sleep_us = 50;
  } poll;
  struct {
    std::string prometheus;  ///< "127.0.0.1:9464"; empty = off
    bool telemetry = true;   ///< DPDK telemetry socket
  } counters;
  struct {
    std::string listen = "127.0.0.1:18515";  ///< control/out-of-band TCP endpoint
  } control;
  std::vector<ServiceConfig> services;
  /// Client processes attaching through a Unix socket and shared memory (docs/client-api.md).
  struct {
    std::string socket;         ///< path of the Unix socket; empty: no attachment
    std::uint32_t mode = 0660;  ///< the socket's file mode: who may attach
    std::string group;          ///< the socket's group (a name); empty: roced's
    std::uint32_t max_clients = 64;
    std::uint32_t max_clients_per_uid = 0;  ///< 0: no cap but max_clients
    std::uint32_t hello_timeout_ms = 5000;
    std::uint32_t resolve_timeout_ms = 10000;
    std::uint32_t cm_backlog = 256;
    std::vector<std::uint32_t> privileged_uids = {0};
    std::uint32_t test_handle_limit = 0xFFFFFFFFu;  ///< a test hook (the handle counter's wrap)
    std::uint32_t max_qps = 256;                    ///< per client
    std::uint32_t max_mrs = 1024;
    std::uint32_t max_cqs = 256;
    std::uint32_t max_srqs = 64;
    /// Bytes roced holds per client: its regions and the rings and queues of its resources.
    std::uint64_t max_memory = 1ull << 30;
    std::uint32_t max_regions = 128;  ///< memfds registered at once, per client
    // What a client may ask (as ibv_device_attr's fields; EINVAL beyond):
    std::uint32_t max_qp_wr = 16384;
    std::uint32_t max_srq_wr = 16384;
    std::uint32_t max_cqe = 65536;
    std::uint32_t max_inline_data = 512;  ///< as rxe
    std::uint32_t max_fds = 64;           ///< roced's descriptors per client (eventfds)
    /// rdma_cm connections per client at once; 0 (unset): max_qps.
    std::uint32_t max_cm_conns = 0;
    std::uint32_t max_listens = 64;  ///< rdma_cm ports a client listens on at once
  } attach;
};

/// A configuration error: "file:line:column: message".
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Parses and validates a YAML document. `origin` names it in error messages. `kinds`: the
/// kinds of service `services[]` may name, with their own keys (none: no service allowed).
ApplianceConfig parse_config(const std::string& yaml_text, const std::string& origin,
                             const ServiceKinds& kinds = {});
/// Reads and parses a file.
ApplianceConfig load_config(const std::string& path, const ServiceKinds& kinds = {});
/// A port's `congestion:` mapping alone, as YAML text ("{algorithm: dcqcn, dcqcn: {rpg_gd:
/// 12}}"): the keys, ranges and errors of the configuration's (roce-incast --congestion).
/// `unused` gets the mappings given for an algorithm not chosen, as PortConfig's.
engine::cc::CongestionConfig parse_congestion_config(const std::string& yaml_text,
                                                     const std::string& origin,
                                                     std::vector<std::string>& unused);

}  // namespace roce::ctl
