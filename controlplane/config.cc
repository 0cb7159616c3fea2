/// @file
/// YAML -> ApplianceConfig. Each section is read by one function that knows its keys, through
/// a YamlReader (controlplane/yaml_reader.h).
#include "controlplane/config.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "controlplane/address.h"
#include "controlplane/yaml_reader.h"

namespace roce::ctl {

namespace {

using Reader = YamlReader<ConfigError>;

// "192.0.2.1/24" -> address and prefix
template <class Addr, class Parse>
void parse_cidr(Reader& r, const std::string& key, Parse parse, unsigned max_prefix, Addr& addr,
                std::uint8_t& prefix) {
  const YAML::Node n = r.get(key);
  const std::string s = n.as<std::string>();
  const auto slash = s.find('/');
  const auto a = parse(s.substr(0, slash));
  if (!a) r.fail(n, r.where(key) + ": '" + s + "' is not an address");
  addr = *a;
  if (slash != std::string::npos) {
    unsigned p = 0;
    const std::string ps = s.substr(slash + 1);
    // At most 3 digits: stoul would throw past unsigned long, and a cast would wrap past 32 bits.
    if (ps.empty() || ps.size() > 3 || ps.find_first_not_of("0123456789") != std::string::npos ||
        (p = static_cast<unsigned>(std::stoul(ps))) > max_prefix)
      r.fail(n, r.where(key) + ": bad prefix length in '" + s + "'");
    prefix = static_cast<std::uint8_t>(p);
  }
}

FaultPolicy parse_fault(const YAML::Node& node, const std::string& origin,
                        const std::string& path) {
  Reader r(node, origin, path);
  FaultPolicy f;
  f.drop_rate = r.real("drop", 0, 0, 1);
  f.duplicate_rate = r.real("duplicate", 0, 0, 1);
  f.reorder_rate = r.real("reorder", 0, 0, 1);
  f.reorder_window =
      static_cast<std::uint32_t>(r.uint("reorder_window", f.reorder_rate > 0 ? 4 : 0, 0, 1024));
  f.corrupt_rate = r.real("corrupt", 0, 0, 1);
  f.delay_ns = r.uint("delay_us", 0, 0, 10'000'000) * 1000;
  f.jitter_ns = r.uint("jitter_us", 0, 0, 10'000'000) * 1000;
  f.seed = r.uint("seed", 1, 0, UINT64_MAX);
  if (f.reorder_rate > 0 && f.reorder_window == 0)
    r.fail(node, path + ": reorder needs reorder_window >= 1");
  r.finish();
  return f;
}

void parse_offload(Reader& port, PortConfig& p, const std::string& origin,
                   const std::string& path) {
  const YAML::Node n = port.get("offload");
  const auto check_mode = [&](const YAML::Node& at, const std::string& m) {
    if (m != "none" && m != "icrc" && m != "parse" && m != "datapath")
      port.fail(at, path + ": '" + m + "' is not an offload mode (none, icrc, parse, datapath)");
  };
  if (n.IsScalar()) {
    p.offload.mode = n.as<std::string>();
    check_mode(n, p.offload.mode);
    return;
  }
  Reader r(n, origin, path);
  p.offload.mode = r.str("mode", "icrc");
  if (r.has("mode")) check_mode(r.get("mode"), p.offload.mode);
  p.offload.clock_mhz = static_cast<std::uint32_t>(r.uint("clock_mhz", 250, 1, 2000));
  p.offload.bytes_per_cycle = static_cast<std::uint32_t>(r.uint("bytes_per_cycle", 64, 1, 256));
  p.offload.line_gbps = static_cast<std::uint32_t>(r.uint("line_gbps", 100, 1, 1600));
  r.finish();
}

// ports[i].congestion: the notification point, the algorithm and its parameters. Names as
// ConnectX RNICs expose them (mlx5's RP/NP knobs), with the unit as a suffix.
// A key of `node` (the `congestion` mapping, or its `dcqcn` one when `dcqcn`) spelt as ConnectX
// spells its parameters (sysfs roce_rp/roce_np, mlxconfig's RPG_TIME_RESET_P1, debugfs
// rp_time_reset), or spelt as ours but in the other mapping: an error that names our key, its
// unit and where it goes, instead of a bare "unknown key" (review 18 finding 11, review 20).
// Our own keys in their own mapping pass.
void connectx_hint(Reader& r, const YAML::Node& node, const std::string& path, bool dcqcn) {
  struct Name {
    const char* cx;    ///< ConnectX's name, lower case, no port suffix, rpg_ prefix
    const char* ours;  ///< null: not implemented here
    bool in_dcqcn;
    const char* unit;
  };
  static const Name kNames[] = {
      {"rpg_time_reset", "rpg_time_reset_us", true, "microseconds"},
      {"rpg_byte_reset", "rpg_byte_reset", true, "bytes"},
      {"rpg_threshold", "rpg_threshold", true, "increase events"},
      {"rpg_ai_rate", "rpg_ai_rate_mbps", true, "Mb/s"},
      {"rpg_hai_rate", "rpg_hai_rate_mbps", true, "Mb/s"},
      {"rpg_max_rate", "rpg_max_rate_mbps", true, "Mb/s"},
      {"rpg_min_rate", "rpg_min_rate_mbps", true, "Mb/s"},
      {"rpg_min_dec_fac", "rpg_min_dec_fac", true, "%"},
      {"dce_tcp_g", "dce_tcp_g", true, "alpha's gain in 1/1024"},
      {"dce_tcp_rtt", "dce_tcp_rtt_us", true, "microseconds"},
      {"initial_alpha_value", "initial_alpha_value", true, "1/1024"},
      {"rate_reduce_monitor_period", "rate_reduce_monitor_period_us", true, "microseconds"},
      {"min_time_between_cnps", "min_time_between_cnps_us", false, "microseconds, per QP"},
      {"cnp_dscp", "cnp_dscp", false, "DSCP"},
      {"rpg_gd", "rpg_gd", true, "log2 of the cut's divisor"},
      {"rate_to_set_on_first_cnp", "rate_to_set_on_first_cnp_mbps", true, "Mb/s"},
      {"clamp_tgt_rate", "clamp_tgt_rate", true, "true or false"},
      {"clamp_tgt_rate_after_time_inc", "clamp_tgt_rate_after_time_inc", true, "true or false"},
      // debugfs cc_params/rp_clamp_tgt_rate_ati (mlx5_ib's name for the same bit)
      {"clamp_tgt_rate_ati", "clamp_tgt_rate_after_time_inc", true, "true or false"},
      {"cnp_802p_prio", nullptr, false, "nothing we send has a VLAN priority"},
      {"cnp_prio", nullptr, false, "nothing we send has a VLAN priority"},       // debugfs np_
      {"cnp_prio_mode", nullptr, false, "nothing we send has a VLAN priority"},  // debugfs np_
  };
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) continue;
    const std::string key = kv.first.Scalar();
    std::string n = key;
    for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (n.size() > 3 && (n.ends_with("_p1") || n.ends_with("_p2"))) n.resize(n.size() - 3);
    if (n.starts_with("rp_") || n.starts_with("np_")) {
      n = n.substr(3);
      for (const char* s : {"time_reset", "byte_reset", "threshold", "ai_rate", "hai_rate",
                            "max_rate", "min_rate", "min_dec_fac", "gd"})
        if (n == s) n = std::string("rpg_") + s;
    }
    for (const Name& x : kNames) {
      // ConnectX's spelling, or ours in the other mapping (rpg_ai_rate_mbps beside algorithm,
      // min_time_between_cnps_us inside dcqcn).
      if (n != x.cx && (x.ours == nullptr || key != x.ours)) continue;
      if (x.ours == nullptr)
        r.fail(kv.first, "unknown key '" + key + "' in " + path + ": ConnectX's " + x.cx +
                             " has no key here: " + x.unit + " (docs/configuration.md)");
      if (key == x.ours && x.in_dcqcn == dcqcn) break;  // ours, where it belongs
      const std::string where = x.in_dcqcn == dcqcn ? ""
                                : x.in_dcqcn        ? "congestion.dcqcn."
                                                    : "congestion.";
      r.fail(kv.first, "unknown key '" + key + "' in " + path + ": did you mean " + where + x.ours +
                           " (" + x.unit + "; ConnectX's " + x.cx + ")?");
    }
  }
}

engine::cc::CongestionConfig parse_congestion(const YAML::Node& node, const std::string& origin,
                                              const std::string& path,
                                              std::vector<std::string>& unused) {
  namespace cc = engine::cc;
  Reader r(node, origin, path);
  if (node.IsMap()) connectx_hint(r, node, path, false);
  cc::CongestionConfig k;
  const std::string alg = r.str("algorithm", "none");
  if (alg == "none")
    k.algorithm = cc::Algorithm::kNone;
  else if (alg == "dcqcn")
    k.algorithm = cc::Algorithm::kDcqcn;
  else if (alg == "delay")
    k.algorithm = cc::Algorithm::kDelay;
  else
    r.fail(r.get("algorithm"),
           path + ".algorithm: '" + alg + "' is not an algorithm (none, dcqcn, delay)");
  // ECT(0) claims a sender that reacts to CE marks (RFC 3168): by default only with an
  // algorithm; `ecn: true` with `algorithm: none` is honoured (roced warns at start).
  if (r.has("ecn")) k.ecn = r.boolean("ecn", false) ? cc::Ecn::kOn : cc::Ecn::kOff;
  k.cnp = r.boolean("cnp", k.cnp);
  k.cnp_interval_ns = static_cast<std::uint32_t>(
      r.uint("min_time_between_cnps_us", k.cnp_interval_ns / 1000, 0, 1'000'000) * 1000);
  k.cnp_dscp = static_cast<std::uint8_t>(r.uint("cnp_dscp", k.cnp_dscp, 0, 63));
  k.burst_bytes = static_cast<std::uint32_t>(r.uint("burst_bytes", k.burst_bytes, 64, 16u << 20));
  const auto u32 = [](Reader& x, const char* key, std::uint32_t def, std::uint64_t lo,
                      std::uint64_t hi) {
    return static_cast<std::uint32_t>(x.uint(key, def, lo, hi));
  };
  if (r.has("dcqcn")) {
    Reader d(r.get("dcqcn"), origin, path + ".dcqcn");
    connectx_hint(d, r.get("dcqcn"), path + ".dcqcn", true);
    cc::DcqcnParams& p = k.dcqcn;
    // 0: the port's line rate (mlx5's default and meaning).
    p.max_rate_mbps = u32(d, "rpg_max_rate_mbps", p.max_rate_mbps, 0, 1'600'000);
    p.min_rate_mbps = u32(d, "rpg_min_rate_mbps", p.min_rate_mbps, 1,
                          p.max_rate_mbps != 0 ? p.max_rate_mbps : 1'600'000);
    // The increase steps must be positive: with 0 a QP cut twice never gets back to its
    // maximum, and its rate-increase timer never stops.
    for (const char* key : {"rpg_ai_rate_mbps", "rpg_hai_rate_mbps"})
      if (d.has(key) && d.uint(key, 1, 0, 1'600'000) == 0)
        d.fail(d.get(key), d.where(key) +
                               " = 0: a QP's rate would never recover from a cut (the "
                               "rate-increase timer would never end); at least 1");
    p.ai_rate_mbps = u32(d, "rpg_ai_rate_mbps", p.ai_rate_mbps, 1, 1'600'000);
    p.hai_rate_mbps = u32(d, "rpg_hai_rate_mbps", p.hai_rate_mbps, 1, 1'600'000);
    p.alpha_g = u32(d, "dce_tcp_g", p.alpha_g, 0, 1023);
    p.initial_alpha = u32(d, "initial_alpha_value", p.initial_alpha, 0, 1023);
    p.alpha_update_period_us = u32(d, "dce_tcp_rtt_us", p.alpha_update_period_us, 1, 131071);
    p.rate_increase_period_us = u32(d, "rpg_time_reset_us", p.rate_increase_period_us, 1, 1u << 24);
    p.byte_counter = d.uint("rpg_byte_reset", p.byte_counter, 0, 1ull << 40);
    p.threshold = u32(d, "rpg_threshold", p.threshold, 1, 31);
    p.rate_reduce_monitor_period_us =
        u32(d, "rate_reduce_monitor_period_us", p.rate_reduce_monitor_period_us, 0, 1u << 24);
    p.min_dec_factor_pct = u32(d, "rpg_min_dec_fac", p.min_dec_factor_pct, 0, 100);
    p.defer_cut = d.boolean("monitor_period_defers_cut", p.defer_cut);
    // mlx5's remaining RP knobs; the defaults keep the paper's cut (docs/configuration.md).
    p.gd_log2 = u32(d, "rpg_gd", p.gd_log2, 1, 15);
    p.first_cnp_rate_mbps =
        u32(d, "rate_to_set_on_first_cnp_mbps", p.first_cnp_rate_mbps, 0, 1'600'000);
    // At or above the maximum a CNP "sets" a QP at its maximum to the maximum: it is never
    // limited, so every CNP is a first CNP again and DCQCN never slows it (review 22). Against
    // the port's speed (rpg_max_rate_mbps 0) roced warns at start (warn_min_rate).
    if (p.max_rate_mbps != 0 && p.first_cnp_rate_mbps >= p.max_rate_mbps)
      d.fail(d.get("rate_to_set_on_first_cnp_mbps"),
             d.where("rate_to_set_on_first_cnp_mbps") + " = " +
                 std::to_string(p.first_cnp_rate_mbps) + " is not below rpg_max_rate_mbps " +
                 std::to_string(p.max_rate_mbps) +
                 ": a QP at its maximum would be set to the maximum on every CNP and never "
                 "slowed; give a lower rate (NVIDIA: up to 85% of the line rate), or 0 for the "
                 "cut by alpha");
    // mlx5's sysfs and debugfs take these two bits as 1 and 0; ours are YAML booleans, as
    // --check prints them.
    const auto bit = [](Reader& x, const char* key, bool def) {
      if (x.has(key) && x.get(key).IsScalar() &&
          (x.get(key).Scalar() == "0" || x.get(key).Scalar() == "1"))
        x.fail(x.get(key), x.where(key) + " must be true or false, not '" + x.get(key).Scalar() +
                               "' (ConnectX's 1 is true, 0 false)");
      return x.boolean(key, def);
    };
    p.clamp_target = bit(d, "clamp_tgt_rate", p.clamp_target);
    p.clamp_target_after_time_inc =
        bit(d, "clamp_tgt_rate_after_time_inc", p.clamp_target_after_time_inc);
    d.finish();
  }
  if (r.has("delay")) {
    Reader d(r.get("delay"), origin, path + ".delay");
    cc::DelayParams& p = k.delay;
    p.max_rate_mbps = u32(d, "max_rate_mbps", p.max_rate_mbps, 0, 1'600'000);  // 0: line rate
    p.min_rate_mbps = u32(d, "min_rate_mbps", p.min_rate_mbps, 1,
                          p.max_rate_mbps != 0 ? p.max_rate_mbps : 1'600'000);
    p.target_us = u32(d, "target_us", p.target_us, 0, 1'000'000);
    // As DCQCN's steps: with 0 a QP cut once (a CNP, a late round trip) never grows back.
    if (d.has("ai_rate_mbps") && d.uint("ai_rate_mbps", 1, 0, 1'600'000) == 0)
      d.fail(d.get("ai_rate_mbps"), d.where("ai_rate_mbps") +
                                        " = 0: a QP's rate would never recover from a cut; at "
                                        "least 1");
    p.ai_rate_mbps = u32(d, "ai_rate_mbps", p.ai_rate_mbps, 1, 1'600'000);
    p.beta_pct = u32(d, "beta_pct", p.beta_pct, 0, 100);
    p.max_decrease_pct = u32(d, "max_decrease_pct", p.max_decrease_pct, 0, 100);
    d.finish();
  }
  r.finish();
  // A mapping of parameters for an algorithm not selected is checked as any other, then used
  // by nothing: named, so that roced can say so (--check and at start).
  if (r.has("dcqcn") && k.algorithm != cc::Algorithm::kDcqcn) unused.push_back("dcqcn");
  if (r.has("delay") && k.algorithm != cc::Algorithm::kDelay) unused.push_back("delay");
  return k;
}

PortConfig parse_port(const YAML::Node& node, const std::string& origin, const std::string& path) {
  Reader r(node, origin, path);
  PortConfig p;
  if (!r.has("name")) r.fail(node, path + ": 'name' is required");
  p.name = r.str("name", "");
  if (!r.has("device")) r.fail(node, path + ": 'device' is required (PCI address or vdev name)");
  p.device = r.str("device", "");
  p.devargs = r.str("devargs", "");
  if (!r.has("mac")) r.fail(node, path + ": 'mac' is required");
  {
    const YAML::Node n = r.get("mac");
    if (!n.IsScalar()) r.fail(n, path + ".mac must be a MAC address");
    const auto m = parse_mac(n.as<std::string>());
    if (!m) r.fail(n, path + ".mac: '" + n.as<std::string>() + "' is not a MAC address");
    p.mac = *m;
  }
  if (!r.has("ipv4")) r.fail(node, path + ": 'ipv4' is required (address/prefix)");
  parse_cidr(r, "ipv4", parse_ipv4, 32, p.ipv4, p.ipv4_prefix);
  if (r.has("ipv6")) {
    wire::Ipv6Addr a;
    parse_cidr(r, "ipv6", parse_ipv6, 128, a, p.ipv6_prefix);
    p.ipv6 = a;
  }
  p.mtu = static_cast<std::uint16_t>(r.uint("mtu", 1500, 576, 9216));
  if (r.has("vlan")) p.vlan = static_cast<std::uint16_t>(r.uint("vlan", 0, 1, 4094));
  p.mbufs = static_cast<std::uint32_t>(r.uint("mbufs", 8192, 512, 1u << 20));
  p.zero_copy = r.boolean("zero_copy", true);
  p.zero_copy_min = static_cast<std::uint32_t>(r.uint("zero_copy_min", 512, 1, 9216));
  p.rx_desc = static_cast<std::uint16_t>(r.uint("rx_desc", 1024, 64, 16384));
  p.tx_desc = static_cast<std::uint16_t>(r.uint("tx_desc", 1024, 64, 16384));
  if (r.has("fault")) p.fault = parse_fault(r.get("fault"), origin, path + ".fault");
  if (r.has("offload")) parse_offload(r, p, origin, path + ".offload");
  if (r.has("congestion"))
    p.congestion =
        parse_congestion(r.get("congestion"), origin, path + ".congestion", p.congestion_unused);
  r.finish();
  return p;
}

// Who holds a listen_port: services[index], a kind holding [first, last].
struct PortHolder {
  std::size_t index = 0;
  std::string kind;
  std::uint32_t first = 0, last = 0;
};

// services[i]: what every kind has (kind, port, listen_port, listen_address, args), then the
// kind's own keys, each checked against the list its kind declared (the service registry's).
ServiceConfig parse_service(const YAML::Node& node, const std::string& origin, std::size_t i,
                            const ServiceKinds& kinds, const std::set<std::string>& ports,
                            wire::Ipv4Addr mgmt, std::map<std::uint32_t, PortHolder>& listen_ports,
                            const std::string& first_port) {
  const std::string path = "services[" + std::to_string(i) + "]";
  Reader k(node, origin, path);
  ServiceConfig s;
  // `kind:`; `test:` is its first spelling (perftest's tests were the first services).
  const bool has_kind = k.has("kind"), has_test = k.has("test");
  if (has_kind && has_test) k.fail(node, path + ": kind and test name the same thing; give one");
  if (!has_kind && !has_test) k.fail(node, path + ".kind is required");
  const std::string key = has_kind ? "kind" : "test";
  s.kind = k.str(key, "");
  std::string known;
  const ServiceKindKeys* kind = nullptr;
  for (const auto& x : kinds) {
    known += (known.empty() ? "" : ", ") + x.name;
    if (x.name == s.kind) kind = &x;
  }
  if (kind == nullptr)
    k.fail(k.get(key), path + "." + key + " '" + s.kind + "' is not a kind of service (" +
                           (known.empty() ? "this program hosts none" : known) + ")");
  s.port = k.str("port", first_port);
  if (!ports.count(s.port)) k.fail(k.get("port"), path + ".port '" + s.port + "' is not a port");
  s.listen_port = static_cast<std::uint16_t>(k.uint("listen_port", kind->default_port, 1, 65535));
  s.listen_address = mgmt;
  if (k.has("listen_address")) {
    const std::string a = k.str("listen_address", "");
    const auto ip = parse_ipv4(a);
    if (!ip)
      k.fail(k.get("listen_address"),
             path + ".listen_address '" + a + "' is not an IPv4 address (0.0.0.0: every one)");
    s.listen_address = *ip;
  }
  // The ports the service holds (NetFR: its primary and secondary channels), each once.
  const std::uint32_t first = s.listen_port, last = first + kind->ports - 1;
  const auto range = [](std::uint32_t a, std::uint32_t b) {
    return a == b ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b);
  };
  if (last > 65535)
    k.fail(node, path + ".listen_port " + std::to_string(first) + ": " + s.kind + " takes " +
                     std::to_string(kind->ports) + " ports from it, beyond 65535");
  for (std::uint32_t p = first; p <= last; ++p) {
    const auto [at, fresh] = listen_ports.emplace(p, PortHolder{i, s.kind, first, last});
    if (fresh) continue;
    const PortHolder& h = at->second;
    if (h.first == h.last && first == last)
      k.fail(node, path + ".listen_port " + std::to_string(p) + " is used twice" +
                       (k.has("listen_port") ? std::string()
                                             : " (" + s.kind +
                                                   "'s default; give each service its own "
                                                   "listen_port)"));
    k.fail(node, path + ".listen_port " +
                     (first == last ? std::string()
                                    : std::to_string(first) + ": " + s.kind + " takes " +
                                          range(first, last) + ", and ") +
                     std::to_string(p) + " is taken by services[" + std::to_string(h.index) +
                     "] (" + h.kind + ": " + range(h.first, h.last) + ")");
  }
  if (k.has("args")) {
    const YAML::Node a = k.get("args");
    if (!a.IsSequence()) k.fail(a, path + ".args must be a list of strings");
    for (const auto& x : a) {
      if (!x.IsScalar()) k.fail(x, path + ".args must be a list of strings");
      s.args.push_back(x.Scalar());
    }
  }
  // The kind's own keys: a scalar or a list of scalars each; any other key is a typo.
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) k.fail(kv.first, "a key in " + path + " is not a string");
    const std::string name = kv.first.Scalar();
    if (name == "kind" || name == "test" || name == "port" || name == "listen_port" ||
        name == "listen_address" || name == "args")
      continue;
    bool own = false;
    std::string keys;
    for (const auto& x : kind->keys) {
      keys += (keys.empty() ? "" : ", ") + x;
      own = own || x == name;
    }
    if (!own)
      k.fail(kv.first, "unknown key '" + name + "' in " + path + " (" + s.kind + " takes " +
                           (keys.empty() ? std::string("no keys of its own") : keys) +
                           "; every service: kind, port, listen_port, listen_address, args)");
    k.get(name);  // asked for: finish() lets it be
    ServiceOption o;
    const YAML::Mark m = kv.second.Mark();
    o.where = origin +
              (m.line >= 0 ? ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1)
                           : std::string()) +
              ": " + path + "." + name;
    if (kv.second.IsScalar()) {
      o.values.push_back(kv.second.Scalar());
    } else if (kv.second.IsSequence()) {
      o.list = true;
      for (const auto& x : kv.second) {
        if (!x.IsScalar()) k.fail(x, path + "." + name + " must be a scalar or a list of scalars");
        o.values.push_back(x.Scalar());
      }
    } else {
      k.fail(kv.second, path + "." + name + " must be a scalar or a list of scalars");
    }
    s.options.emplace(name, std::move(o));
  }
  k.finish();
  return s;
}

ApplianceConfig parse_document(const std::string& text, const std::string& origin,
                               const ServiceKinds& kinds) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(origin + ":" + std::to_string(e.mark.line + 1) + ":" +
                      std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
  }
  if (!root.IsMap()) throw ConfigError(origin + ": the configuration must be a YAML mapping");
  ApplianceConfig c;
  Reader r(root, origin, "config");
  c.name = r.str("name", c.name);
  if (r.has("eal")) {
    Reader eal(r.get("eal"), origin, "eal");
    if (eal.has("args")) {
      const YAML::Node a = eal.get("args");
      if (!a.IsSequence()) eal.fail(a, "eal.args must be a list of strings");
      for (const auto& x : a) {
        if (!x.IsScalar()) eal.fail(x, "eal.args must be a list of strings");
        c.eal_args.push_back(x.Scalar());
      }
    }
    if (eal.has("lcores")) {
      const YAML::Node l = eal.get("lcores");
      if (!l.IsSequence() || l.size() == 0)
        eal.fail(l, "eal.lcores must be a non-empty list of core numbers");
      c.lcores.clear();
      for (const auto& x : l) {
        unsigned v = 0;
        try {
          v = x.as<unsigned>();
        } catch (const YAML::Exception&) {
          eal.fail(x, "eal.lcores: '" + (x.IsScalar() ? x.Scalar() : std::string("?")) +
                          "' is not a core number");
        }
        c.lcores.push_back(v);
      }
    }
  }
  if (!r.has("ports")) r.fail(root, "at least one port is required under 'ports'");
  const YAML::Node ports = r.get("ports");
  if (!ports.IsSequence() || ports.size() == 0) r.fail(ports, "'ports' must be a non-empty list");
  std::set<std::string> names;
  for (std::size_t i = 0; i < ports.size(); ++i) {
    PortConfig p = parse_port(ports[i], origin, "ports[" + std::to_string(i) + "]");
    if (!names.insert(p.name).second) r.fail(ports[i], "port name '" + p.name + "' is used twice");
    // The card sits on the port's one queue: frames for its QPs are not steered between lcores.
    if (p.offload.mode == "datapath" && c.lcores.size() > 1)
      r.fail(ports[i], "ports[" + std::to_string(i) +
                           "].offload: 'datapath' needs one lcore (eal.lcores has " +
                           std::to_string(c.lcores.size()) + ")");
    c.ports.push_back(std::move(p));
  }
  if (r.has("limits")) {
    Reader l(r.get("limits"), origin, "limits");
    c.limits.max_qps = static_cast<std::uint32_t>(l.uint("max_qps", c.limits.max_qps, 1, 1u << 20));
    c.limits.max_mrs = static_cast<std::uint32_t>(l.uint("max_mrs", c.limits.max_mrs, 1, 1u << 23));
    c.limits.cq_depth =
        static_cast<std::uint32_t>(l.uint("cq_depth", c.limits.cq_depth, 1, 1u << 22));
    c.limits.tx_slots =
        static_cast<std::uint32_t>(l.uint("tx_slots", c.limits.tx_slots, 64, 65536));
    c.limits.neighbours =
        static_cast<std::uint32_t>(l.uint("neighbours", c.limits.neighbours, 16, 1u << 20));
    c.limits.cm_connections =
        static_cast<std::uint32_t>(l.uint("cm_connections", c.limits.cm_connections, 1, 1u << 20));
  }
  if (r.has("transport")) {
    Reader t(r.get("transport"), origin, "transport");
    c.transport.ack_req_every =
        static_cast<std::uint32_t>(t.uint("ack_req_every", c.transport.ack_req_every, 1, 4096));
    c.transport.max_inflight_psns = static_cast<std::uint32_t>(
        t.uint("max_inflight_psns", c.transport.max_inflight_psns, 1, 1u << 22));
    c.transport.max_inflight_bytes =
        t.uint("max_inflight_bytes", c.transport.max_inflight_bytes, 4096, 1ull << 32);
    c.transport.loss_window =
        static_cast<std::uint32_t>(t.uint("loss_window", c.transport.loss_window, 1, 1u << 22));
    c.transport.recovery_batch =
        static_cast<std::uint32_t>(t.uint("recovery_batch", c.transport.recovery_batch, 1, 4096));
    c.transport.probe_min_us =
        static_cast<std::uint32_t>(t.uint("probe_min_us", c.transport.probe_min_us, 0, 10'000'000));
    c.transport.selective_repeat = t.boolean("selective_repeat", c.transport.selective_repeat);
    if (t.has("sr_bdp_cap")) {
      // auto, off, or bytes (IRN's bandwidth-delay cap; docs/loss-recovery.md).
      const YAML::Node n = t.get("sr_bdp_cap");
      const std::string v = n.IsScalar() ? n.Scalar() : std::string();
      if (v == "auto")
        c.transport.sr_bdp_cap = ~std::uint64_t{0};
      else if (v == "off")
        c.transport.sr_bdp_cap = 0;
      else if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos)
        c.transport.sr_bdp_cap = t.uint_of(n, t.where("sr_bdp_cap"), 4096, 1ull << 32);
      else
        t.fail(n, t.where("sr_bdp_cap") + " must be auto, off or bytes (4096-4294967296), not '" +
                      v + "'");
    }
  }
  if (r.has("logging")) {
    Reader l(r.get("logging"), origin, "logging");
    c.logging.level = l.str("level", c.logging.level);
    if (c.logging.level != "error" && c.logging.level != "warning" && c.logging.level != "info" &&
        c.logging.level != "debug")
      l.fail(l.get("level"), "logging.level must be one of error, warning, info, debug");
  }
  if (r.has("counters")) {
    Reader k(r.get("counters"), origin, "counters");
    c.counters.prometheus = k.str("prometheus", "");
    c.counters.telemetry = k.boolean("telemetry", true);
  }
  if (r.has("poll")) {
    Reader k(r.get("poll"), origin, "poll");
    c.poll.idle_after_polls = static_cast<std::uint32_t>(
        k.uint("idle_after_polls", c.poll.idle_after_polls, 0, 1u << 30));
    c.poll.idle_sleep_us =
        static_cast<std::uint32_t>(k.uint("idle_sleep_us", c.poll.idle_sleep_us, 1, 100000));
  }
  if (r.has("control")) {
    Reader k(r.get("control"), origin, "control");
    c.control.listen = k.str("listen", c.control.listen);
  }
  // The management address: where the hosted services listen unless told otherwise.
  wire::Ipv4Addr mgmt{0x7F000001};
  {
    const std::string& l = c.control.listen;
    const auto colon = l.rfind(':');
    const auto ip = parse_ipv4(colon == std::string::npos ? l : l.substr(0, colon));
    if (!ip) {
      if (r.has("control")) {
        Reader k(r.get("control"), origin, "control");
        k.fail(k.get("listen"), "control.listen '" + l + "' is not IPV4:PORT");
      }
      throw ConfigError(origin + ": control.listen '" + l + "' is not IPV4:PORT");
    }
    mgmt = *ip;
  }
  if (r.has("services")) {
    const YAML::Node sv = r.get("services");
    if (!sv.IsSequence()) r.fail(sv, "'services' must be a list");
    std::map<std::uint32_t, PortHolder> tcp_ports;
    for (std::size_t i = 0; i < sv.size(); ++i)
      c.services.push_back(
          parse_service(sv[i], origin, i, kinds, names, mgmt, tcp_ports, c.ports.front().name));
  }
  if (r.has("attach")) {
    Reader a(r.get("attach"), origin, "attach");
    if (!a.has("socket")) a.fail(r.get("attach"), "attach.socket is required (a path)");
    c.attach.socket = a.str("socket", "");
    if (c.attach.socket.empty() || c.attach.socket.size() > 107)
      a.fail(a.get("socket"), "attach.socket must be a path of 1 to 107 characters");
    if (a.has("mode")) {
      const YAML::Node n = a.get("mode");
      const std::string m = n.as<std::string>();
      if (m.empty() || m.size() > 4 || m.find_first_not_of("01234567") != std::string::npos)
        a.fail(n, "attach.mode must be an octal file mode such as \"0660\"");
      c.attach.mode = static_cast<std::uint32_t>(std::stoul(m, nullptr, 8));
    }
    c.attach.group = a.str("group", "");
    c.attach.max_clients =
        static_cast<std::uint32_t>(a.uint("max_clients", c.attach.max_clients, 1, 4096));
    c.attach.max_clients_per_uid = static_cast<std::uint32_t>(
        a.uint("max_clients_per_uid", c.attach.max_clients_per_uid, 0, 4096));
    c.attach.hello_timeout_ms = static_cast<std::uint32_t>(
        a.uint("hello_timeout_ms", c.attach.hello_timeout_ms, 100, 600000));
    c.attach.resolve_timeout_ms = static_cast<std::uint32_t>(
        a.uint("resolve_timeout_ms", c.attach.resolve_timeout_ms, 100, 25000));
    c.attach.cm_backlog =
        static_cast<std::uint32_t>(a.uint("cm_backlog", c.attach.cm_backlog, 0, 1u << 16));
    if (a.has("privileged_uids")) {
      const YAML::Node n = a.get("privileged_uids");
      if (!n.IsSequence()) a.fail(n, "attach.privileged_uids must be a list of uids");
      c.attach.privileged_uids.clear();
      for (const auto& u : n)
        c.attach.privileged_uids.push_back(
            static_cast<std::uint32_t>(a.uint_of(u, "attach.privileged_uids[]", 0, 0xFFFFFFFEu)));
    }
    c.attach.test_handle_limit = static_cast<std::uint32_t>(
        a.uint("test_handle_limit", c.attach.test_handle_limit, 16, 0xFFFFFFFFu));
    if (a.has("quotas")) {
      Reader q(a.get("quotas"), origin, "attach.quotas");
      c.attach.max_qps =
          static_cast<std::uint32_t>(q.uint("max_qps", c.attach.max_qps, 1, 1u << 20));
      c.attach.max_mrs =
          static_cast<std::uint32_t>(q.uint("max_mrs", c.attach.max_mrs, 1, 1u << 24));
      c.attach.max_cqs =
          static_cast<std::uint32_t>(q.uint("max_cqs", c.attach.max_cqs, 1, 1u << 20));
      c.attach.max_srqs =
          static_cast<std::uint32_t>(q.uint("max_srqs", c.attach.max_srqs, 1, 1u << 20));
      c.attach.max_memory = q.uint("max_memory", c.attach.max_memory, 4096, 1ull << 40);
      c.attach.max_regions =
          static_cast<std::uint32_t>(q.uint("max_regions", c.attach.max_regions, 1, 1u << 16));
      c.attach.max_qp_wr =
          static_cast<std::uint32_t>(q.uint("max_qp_wr", c.attach.max_qp_wr, 1, 1u << 16));
      c.attach.max_srq_wr =
          static_cast<std::uint32_t>(q.uint("max_srq_wr", c.attach.max_srq_wr, 1, 1u << 16));
      c.attach.max_cqe =
          static_cast<std::uint32_t>(q.uint("max_cqe", c.attach.max_cqe, 1, 1u << 16));
      c.attach.max_inline_data =
          static_cast<std::uint32_t>(q.uint("max_inline_data", c.attach.max_inline_data, 0, 4096));
      c.attach.max_fds =
          static_cast<std::uint32_t>(q.uint("max_fds", c.attach.max_fds, 2, 1u << 20));
      c.attach.max_cm_conns =
          static_cast<std::uint32_t>(q.uint("max_cm_conns", c.attach.max_cm_conns, 1, 1u << 16));
      c.attach.max_listens =
          static_cast<std::uint32_t>(q.uint("max_listens", c.attach.max_listens, 1, 65535));
    }
  }
  r.finish();
  return c;
}

}  // namespace

ApplianceConfig parse_config(const std::string& text, const std::string& origin,
                             const ServiceKinds& kinds) {
  try {
    return parse_document(text, origin, kinds);
  } catch (const YAML::Exception& e) {
    // What the checks above did not foresee (a mapping where yaml-cpp is asked for a string,
    // a key that is not a scalar): an error with its place, never an uncaught exception.
    std::string where = origin;
    if (e.mark.line >= 0)
      where += ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    throw ConfigError(where + ": " + (e.msg.empty() ? std::string("invalid YAML") : e.msg));
  }
}

engine::cc::CongestionConfig parse_congestion_config(const std::string& text,
                                                     const std::string& origin,
                                                     std::vector<std::string>& unused) {
  try {
    const YAML::Node node = YAML::Load(text);
    return parse_congestion(node, origin, "congestion", unused);
  } catch (const YAML::Exception& e) {
    std::string where = origin;
    if (e.mark.line >= 0)
      where += ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    throw ConfigError(where + ": " + (e.msg.empty() ? std::string("invalid YAML") : e.msg));
  }
}

ApplianceConfig load_config(const std::string& path, const ServiceKinds& kinds) {
  std::ifstream f(path);
  if (!f) throw ConfigError(path + ": cannot open the configuration file");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_config(ss.str(), path, kinds);
}

// ---- a service's own keys, typed -------------------------------------------------------------

namespace {
const ServiceOption* scalar_option(const ServiceConfig& s, const std::string& key) {
  const auto it = s.options.find(key);
  if (it == s.options.end()) return nullptr;
  if (it->second.list) throw ConfigError(it->second.where + " must be a single value, not a list");
  return &it->second;
}
}  // namespace

std::string ServiceConfig::option(const std::string& key, const std::string& def) const {
  const ServiceOption* o = scalar_option(*this, key);
  return o ? o->values.front() : def;
}

std::uint64_t ServiceConfig::option_uint(const std::string& key, std::uint64_t def,
                                         std::uint64_t lo, std::uint64_t hi) const {
  const ServiceOption* o = scalar_option(*this, key);
  if (!o) return def;
  const std::string& v = o->values.front();
  std::uint64_t n = 0;
  std::size_t used = 0;
  try {
    if (v.empty() || v[0] == '-') throw std::invalid_argument(v);
    n = std::stoull(v, &used, 0);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size())
    throw ConfigError(o->where + " must be an unsigned integer, not '" + v + "'");
  if (n < lo || n > hi)
    throw ConfigError(o->where + " = " + v + " is out of range [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
  return n;
}

bool ServiceConfig::option_bool(const std::string& key, bool def) const {
  const ServiceOption* o = scalar_option(*this, key);
  if (!o) return def;
  const std::string& v = o->values.front();
  if (v == "true" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "no" || v == "off") return false;
  throw ConfigError(o->where + " must be true or false, not '" + v + "'");
}

std::vector<std::string> ServiceConfig::option_list(const std::string& key) const {
  const auto it = options.find(key);
  return it == options.end() ? std::vector<std::string>{} : it->second.values;
}

}  // namespace roce::ctl
