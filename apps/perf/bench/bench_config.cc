/// @file
/// YAML -> BenchConfig with the appliance configuration's reader (controlplane/yaml_reader.h).
/// Workload keys may also appear under `defaults`.
#include "apps/perf/bench/bench_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "controlplane/address.h"
#include "controlplane/yaml_reader.h"

namespace roce::bench {

const char* to_string(Op op) {
  switch (op) {
    case Op::kWrite:
      return "write";
    case Op::kRead:
      return "read";
    case Op::kSend:
      return "send";
    case Op::kAtomic:
      return "atomic";
    case Op::kWriteImm:
      return "write_imm";
  }
  return "?";
}

const char* to_string(Mode m) { return m == Mode::kBw ? "bw" : "lat"; }

namespace {

using Reader = ctl::YamlReader<BenchConfigError>;

constexpr std::uint32_t kMaxSize = 1u << 24;  // 16 MiB per message

std::vector<std::uint32_t> parse_sizes(Reader& r, const std::vector<std::uint32_t>& def) {
  if (!r.has("sizes")) return def;
  const YAML::Node n = r.get("sizes");
  const std::string what = r.where("sizes");
  std::vector<std::uint32_t> out;
  if (n.IsSequence()) {
    if (n.size() == 0) r.fail(n, what + " must not be empty");
    for (const auto& e : n)
      out.push_back(static_cast<std::uint32_t>(r.uint_of(e, what + "[]", 1, kMaxSize)));
  } else if (n.IsMap()) {
    Reader m(n, r.origin(), what);
    const auto lo = static_cast<std::uint32_t>(m.uint("min", 2, 1, kMaxSize));
    const auto hi = static_cast<std::uint32_t>(m.uint("max", lo, 1, kMaxSize));
    if (hi < lo) m.fail(n, what + ": max is below min");
    for (std::uint64_t s = lo; s <= hi; s *= 2) out.push_back(static_cast<std::uint32_t>(s));
  } else {
    r.fail(n, what + " must be a list of sizes or {min: N, max: M} (doubling)");
  }
  return out;
}

// Every workload key, read into `w` (which holds the defaults).
void parse_workload_keys(Reader& r, Workload& w) {
  static const std::pair<const char*, Op> ops[] = {{"write", Op::kWrite},
                                                   {"read", Op::kRead},
                                                   {"send", Op::kSend},
                                                   {"atomic", Op::kAtomic},
                                                   {"write_imm", Op::kWriteImm}};
  w.name = r.str("name", w.name);
  if (r.has("operation")) {
    const YAML::Node n = r.get("operation");
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    bool found = false;
    for (const auto& [name, op] : ops)
      if (s == name) w.op = op, found = true;
    if (!found)
      r.fail(n, r.where("operation") + " must be write, read, send, atomic or write_imm, not '" +
                    s + "'");
  }
  if (r.has("mode")) {
    const YAML::Node n = r.get("mode");
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    if (s == "bw")
      w.mode = Mode::kBw;
    else if (s == "lat")
      w.mode = Mode::kLat;
    else
      r.fail(n, r.where("mode") + " must be bw or lat, not '" + s + "'");
  }
  w.sizes = parse_sizes(r, w.sizes);
  const bool iters_given = r.has("iterations"), duration_given = r.has("duration");
  if (iters_given && duration_given)
    r.fail(r.get("duration"), r.where("duration") + ": give iterations or duration, not both");
  w.iterations = r.uint("iterations", w.iterations, 1, 1'000'000'000);
  w.duration = r.real("duration", iters_given ? 0 : w.duration, 0.01, 3600);
  w.queue_depth = static_cast<std::uint32_t>(r.uint("queue_depth", w.queue_depth, 1, 1024));
  w.qps = static_cast<std::uint32_t>(r.uint("qps", w.qps, 1, 16384));
  if (r.has("mtu")) {
    const YAML::Node n = r.get("mtu");
    const auto v = r.uint_of(n, r.where("mtu"), 256, 4096);
    if (v != 256 && v != 512 && v != 1024 && v != 2048 && v != 4096)
      r.fail(n, r.where("mtu") + " must be 256, 512, 1024, 2048 or 4096");
    w.mtu = static_cast<std::uint32_t>(v);
  }
  w.inline_size = static_cast<std::uint32_t>(r.uint("inline", w.inline_size, 0, 256));
  w.drop_rate = r.real("drop_rate", w.drop_rate, 0, 0.5);
  w.seed = r.uint("seed", w.seed, 0, UINT64_MAX);
  w.retry_timeout = static_cast<std::uint32_t>(r.uint("retry_timeout", w.retry_timeout, 1, 31));
  w.window = static_cast<std::uint32_t>(r.uint("window", w.window, 0, 1u << 22));
  w.window_bytes = r.uint("window_bytes", w.window_bytes, 0, 1ull << 32);
  w.sr_window_bytes = r.uint("sr_window_bytes", w.sr_window_bytes, 0, 1ull << 32);
  if (r.has("sr_bdp_cap")) {
    // roced's transport.sr_bdp_cap: auto, off or bytes (docs/loss-recovery.md).
    const YAML::Node n = r.get("sr_bdp_cap");
    const std::string v = n.IsScalar() ? n.Scalar() : std::string();
    if (v == "auto")
      w.sr_bdp_cap = ~std::uint64_t{0};
    else if (v == "off")
      w.sr_bdp_cap = 0;
    else if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos)
      w.sr_bdp_cap = r.uint_of(n, r.where("sr_bdp_cap"), 4096, 1ull << 32);
    else
      r.fail(n, r.where("sr_bdp_cap") + " must be auto, off or bytes (4096-4294967296), not '" + v +
                    "'");
  }
  w.loss_window = static_cast<std::uint32_t>(r.uint("loss_window", w.loss_window, 0, 1u << 22));
  w.recovery_batch =
      static_cast<std::uint32_t>(r.uint("recovery_batch", w.recovery_batch, 0, 4096));
  if (r.has("zero_copy_min"))
    w.zero_copy_min = static_cast<int>(r.uint("zero_copy_min", 512, 0, 65536));
  w.ack_req_every = static_cast<std::uint32_t>(r.uint("ack_req_every", w.ack_req_every, 0, 4096));
  if (r.has("probe_min_us"))
    w.probe_min_us = static_cast<std::int64_t>(r.uint("probe_min_us", 0, 0, 10'000'000));
  w.repeat = static_cast<std::uint32_t>(r.uint("repeat", w.repeat, 1, 9));
  if (r.has("selective_repeat")) w.selective_repeat = r.uint("selective_repeat", 0, 0, 1) != 0;
  if (r.has("peer_announces")) w.peer_announces = r.uint("peer_announces", 1, 0, 1) != 0;
}

const std::pair<const char*, Target::Metric> kMetrics[] = {
    {"bytes_vs_link", Target::Metric::kBytesVsLink},
    {"msgs_vs_link", Target::Metric::kMsgsVsLink},
    {"p50_vs_l2_echo", Target::Metric::kP50VsL2Echo},
    {"bytes_vs_workload", Target::Metric::kBytesVsWorkload},
    {"msgs_vs_workload", Target::Metric::kMsgsVsWorkload}};

Target parse_target(Reader& r, const YAML::Node& node, const std::string& path,
                    const BenchConfig& c) {
  const auto workload = [&](const std::string& key) -> const Workload& {
    const YAML::Node n = r.get(key);
    const std::string name = n.IsScalar() ? n.Scalar() : "";
    for (const auto& w : c.workloads)
      if (w.name == name) return w;
    r.fail(n, r.where(key) + ": no workload is named '" + name + "'");
  };
  Target t;
  if (!r.has("workload")) r.fail(node, path + ".workload is missing");
  const Workload& w = workload("workload");
  t.workload = w.name;
  t.name = r.str("name", w.name);
  if (!r.has("metric")) r.fail(node, path + ".metric is missing");
  const YAML::Node m = r.get("metric");
  const std::string ms = m.IsScalar() ? m.Scalar() : "";
  bool found = false;
  for (const auto& [name, metric] : kMetrics)
    if (ms == name) t.metric = metric, found = true;
  if (!found)
    r.fail(m, r.where("metric") +
                  " must be bytes_vs_link, msgs_vs_link, p50_vs_l2_echo, bytes_vs_workload or "
                  "msgs_vs_workload, not '" +
                  ms + "'");
  t.size = static_cast<std::uint32_t>(r.uint("size", w.sizes.front(), 1, kMaxSize));
  if (std::find(w.sizes.begin(), w.sizes.end(), t.size) == w.sizes.end())
    r.fail(r.get("size"),
           r.where("size") + ": workload '" + w.name + "' has no size " + std::to_string(t.size));
  const bool vs_workload =
      t.metric == Target::Metric::kBytesVsWorkload || t.metric == Target::Metric::kMsgsVsWorkload;
  if (vs_workload) {
    if (!r.has("of")) r.fail(node, path + ".of is missing: " + ms + " needs a reference workload");
    const Workload& ref = workload("of");
    t.of = ref.name;
    if (std::find(ref.sizes.begin(), ref.sizes.end(), t.size) == ref.sizes.end())
      r.fail(r.get("of"),
             r.where("of") + ": workload '" + ref.name + "' has no size " + std::to_string(t.size));
  } else if (r.has("of")) {
    r.fail(r.get("of"), r.where("of") + " only goes with bytes_vs_workload or msgs_vs_workload");
  }
  if (t.metric == Target::Metric::kP50VsL2Echo && w.mode != Mode::kLat)
    r.fail(m, r.where("metric") + ": p50_vs_l2_echo needs a workload in lat mode");
  if (t.metric != Target::Metric::kP50VsL2Echo && w.mode != Mode::kBw)
    r.fail(m, r.where("metric") + ": " + ms + " needs a workload in bw mode");
  if (r.has("min") == r.has("max")) r.fail(node, path + ": give min or max (one of them)");
  t.is_max = r.has("max");
  t.bound = r.real(t.is_max ? "max" : "min", 0, 0, 1e6);
  return t;
}

}  // namespace

const char* to_string(Target::Metric m) {
  for (const auto& [name, metric] : kMetrics)
    if (metric == m) return name;
  return "?";
}

std::uint32_t netdev_mtu_for(std::uint32_t path_mtu) {
  return path_mtu <= 1024 ? 1500 : path_mtu + 128;
}

std::uint32_t max_path_mtu(const BenchConfig& c) {
  std::uint32_t m = 1024;
  for (const auto& w : c.workloads) m = std::max(m, w.mtu);
  return m;
}

namespace {

// topology: {peer, iface, pmd, ip, mac, netdev_mtu, lcore}; after the workloads (the MTU
// check needs their path MTUs).
void parse_topology(Reader& r, BenchConfig& c) {
  if (!r.has("topology")) return;
  const YAML::Node n = r.get("topology");
  Reader t(n, c.origin, "topology");
  Topology& to = c.topology;
  to.peer = t.str("peer", "");
  if (to.peer.empty()) {
    for (const char* k : {"iface", "pmd", "ip", "mac", "netdev_mtu", "lcore"})
      if (t.has(k))
        t.fail(t.get(k), t.where(k) + " belongs to a remote topology: give topology.peer too");
  } else {
    if (const auto colon = to.peer.rfind(':'); colon != std::string::npos) {
      const std::string port = to.peer.substr(colon + 1);
      char* end = nullptr;
      const unsigned long v = std::strtoul(port.c_str(), &end, 10);
      if (port.empty() || *end != '\0' || v == 0 || v > 65535)
        t.fail(t.get("peer"), t.where("peer") + ": '" + port + "' is not a TCP port (1..65535)");
      to.peer_port = static_cast<std::uint16_t>(v);
      to.peer.resize(colon);
    }
    if (to.peer.empty()) t.fail(t.get("peer"), t.where("peer") + " names no host");
    if (!t.has("iface"))
      t.fail(n, "topology.iface is missing: the interface of this host's DPDK port");
    to.iface = t.str("iface", "");
    if (t.has("pmd")) {
      to.pmd = t.str("pmd", to.pmd);
      if (to.pmd != "af_packet" && to.pmd != "af_xdp" && to.pmd != "tap")
        t.fail(t.get("pmd"),
               t.where("pmd") + " must be af_packet, af_xdp or tap, not '" + to.pmd + "'");
    }
    to.ip = t.str("ip", to.ip);
    if (!ctl::parse_ipv4(to.ip))
      t.fail(t.get("ip"), t.where("ip") + ": '" + to.ip + "' is not an IPv4 address");
    to.mac = t.str("mac", to.mac);
    if (!ctl::parse_mac(to.mac))
      t.fail(t.get("mac"), t.where("mac") + ": '" + to.mac + "' is not a MAC address");
    to.lcore = static_cast<std::uint32_t>(t.uint("lcore", 0, 0, 1023));
    const std::uint32_t pmtu = max_path_mtu(c);
    to.netdev_mtu =
        static_cast<std::uint32_t>(t.uint("netdev_mtu", netdev_mtu_for(pmtu), 576, 9000));
    if (const std::uint32_t min = min_netdev_mtu(pmtu); to.netdev_mtu < min)
      t.fail(t.get("netdev_mtu"), t.where("netdev_mtu") + ": " + std::to_string(to.netdev_mtu) +
                                      " is too small for path MTU " + std::to_string(pmtu) +
                                      " (needs " + std::to_string(min) + ")");
  }
}

void parse_targets(Reader& r, const YAML::Node& root, BenchConfig& c) {
  if (!r.has("targets")) return;
  const YAML::Node ts = r.get("targets");
  if (!ts.IsSequence()) r.fail(ts, "targets must be a list");
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const std::string path = "targets[" + std::to_string(i) + "]";
    Reader tr(ts[i], c.origin, path);
    c.targets.push_back(parse_target(tr, ts[i], path, c));
  }
  (void)root;
}
}  // namespace

BenchConfig parse_bench_config(const std::string& text, const std::string& origin) {
  BenchConfig c;
  c.origin = origin;
  c.text = text;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    std::ostringstream os;
    os << origin << ':' << e.mark.line + 1 << ':' << e.mark.column + 1 << ": " << e.msg;
    throw BenchConfigError(os.str());
  }
  if (!root.IsDefined() || root.IsNull()) throw BenchConfigError(origin + ": the file is empty");
  Reader r(root, origin, "bench");
  c.name = r.str("name", c.name);
  c.workdir = r.str("workdir", c.workdir);
  c.timeout = r.real("timeout", c.timeout, 1, 3600);
  if (r.has("output")) {
    Reader o(r.get("output"), origin, "output");
    c.json = o.str("json", c.json);
    c.svg = o.str("svg", c.svg);
  }
  if (r.has("baselines")) {
    Reader b(r.get("baselines"), origin, "baselines");
    c.baselines.link = b.boolean("link", c.baselines.link);
    c.baselines.tcp = b.boolean("tcp", c.baselines.tcp);
    c.baselines.duration = b.real("duration", c.baselines.duration, 0.01, 60);
    c.baselines.iterations = b.uint("iterations", c.baselines.iterations, 10, 10'000'000);
    c.baselines.repeat = static_cast<std::uint32_t>(b.uint("repeat", c.baselines.repeat, 1, 9));
    c.baselines.adjacent = b.boolean("adjacent", c.baselines.adjacent);
  }
  Workload def;
  def.sizes = {4096};
  if (r.has("defaults")) {
    Reader d(r.get("defaults"), origin, "defaults");
    parse_workload_keys(d, def);
  }
  if (!r.has("workloads")) r.fail(root, "bench.workloads is missing");
  const YAML::Node ws = r.get("workloads");
  if (!ws.IsSequence() || ws.size() == 0)
    r.fail(ws, "workloads must be a non-empty list of workloads");
  std::set<std::string> names;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const std::string path = "workloads[" + std::to_string(i) + "]";
    Reader wr(ws[i], origin, path);
    Workload w = def;
    w.name.clear();
    parse_workload_keys(wr, w);
    if (w.name.empty())
      w.name = std::string(to_string(w.op)) + "_" + to_string(w.mode) + "_" + std::to_string(i);
    if (!names.insert(w.name).second)
      wr.fail(ws[i], path + ": the name '" + w.name + "' is used twice");
    if (w.op == Op::kAtomic) w.sizes = {8};
    if (w.mode == Mode::kLat) w.queue_depth = 1;
    c.workloads.push_back(std::move(w));
  }
  parse_topology(r, c);
  parse_targets(r, root, c);
  r.finish();
  return c;
}

void select_workloads(BenchConfig& c, const std::string& names) {
  std::vector<std::string> keep;
  for (std::size_t at = 0; at <= names.size();) {
    const std::size_t end = std::min(names.find(',', at), names.size());
    if (end > at) keep.push_back(names.substr(at, end - at));
    at = end + 1;
  }
  if (keep.empty()) throw BenchConfigError("--only: no workload named");
  const auto kept = [&](const std::string& n) {
    return std::find(keep.begin(), keep.end(), n) != keep.end();
  };
  for (const std::string& n : keep)
    if (std::none_of(c.workloads.begin(), c.workloads.end(),
                     [&](const Workload& w) { return w.name == n; }))
      throw BenchConfigError("--only: " + c.origin + " has no workload '" + n + "'");
  std::erase_if(c.workloads, [&](const Workload& w) { return !kept(w.name); });
  std::erase_if(c.targets, [&](const Target& t) {
    return !kept(t.workload) || (!t.of.empty() && !kept(t.of));
  });
}

void set_repeat(BenchConfig& c, const std::string& n) {
  char* end = nullptr;
  const unsigned long v = std::strtoul(n.c_str(), &end, 10);
  if (n.empty() || *end != '\0' || v < 1 || v > 9)
    throw BenchConfigError("--repeat: a count from 1 to 9, not '" + n + "'");
  for (Workload& w : c.workloads) w.repeat = static_cast<std::uint32_t>(v);
}

BenchConfig parse_bench_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw BenchConfigError(path + ": cannot open the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_bench_config(ss.str(), path);
}

}  // namespace roce::bench
