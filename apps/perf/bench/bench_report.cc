/// @file
/// The benchmark's table, JSON and SVG. The SVG is three charts drawn by hand: throughput and
/// message rate against message size (log2 axis), and latency percentiles against size.
#include "apps/perf/bench/bench_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>

namespace roce::bench {

const char* to_string(Kind k) {
  switch (k) {
    case Kind::kOurs:
      return "roce";
    case Kind::kL2Blast:
      return "l2_blast";
    case Kind::kL2Echo:
      return "l2_echo";
    case Kind::kTcpStream:
      return "tcp_stream";
    case Kind::kTcpPingPong:
      return "tcp_pingpong";
  }
  return "?";
}

const Point* Results::find(Kind k, std::uint32_t size) const {
  for (const auto& p : points)
    if (p.kind == k && p.size == size && p.for_workload < 0) return &p;
  return nullptr;
}

const Point* Results::link_for(Kind k, const Point& row, std::uint32_t fp) const {
  for (const auto& p : points)
    if (p.kind == k && p.for_workload >= 0 && p.for_workload == row.workload &&
        p.for_size == row.size)
      return &p;
  return find(k, fp);
}

void summarize_latency(std::vector<double>& ns, Point& p) {
  if (ns.empty()) return;
  std::sort(ns.begin(), ns.end());
  const auto at = [&](double q) {
    const auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(ns.size()))) - 1;
    return ns[std::min(i, ns.size() - 1)];
  };
  p.has_lat = true;
  p.lat_min = ns.front();
  p.lat_max = ns.back();
  p.lat_p50 = at(0.5);
  p.lat_p99 = at(0.99);
  p.lat_p999 = at(0.999);
  p.lat_avg = std::accumulate(ns.begin(), ns.end(), 0.0) / static_cast<double>(ns.size());
}

namespace {

constexpr const char* kLine =
    "---------------------------------------------------------------------------------------------"
    "----------";

std::string ratio(double ours, const Point* base, double Point::*field) {
  if (!base || base->*field <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.3fx", ours / (base->*field));
  return b;
}

}  // namespace

void print_workload_header(std::FILE* out, const Workload& w) {
  char per[64];
  if (w.duration > 0)
    std::snprintf(per, sizeof per, "%g s per size", w.duration);
  else
    std::snprintf(per, sizeof per, "%llu iterations per size",
                  static_cast<unsigned long long>(w.iterations));
  std::fprintf(out, "%s\n", kLine);
  std::fprintf(out, " %s: RC %s %s, %u QP%s, depth %u, MTU %u, inline %u, drop %g, %s\n",
               w.name.c_str(), to_string(w.op), to_string(w.mode), w.qps, w.qps > 1 ? "s" : "",
               w.queue_depth, w.mtu, w.inline_size, w.drop_rate, per);
  if (w.mode == Mode::kBw)
    std::fprintf(out,
                 " #bytes     #iterations    BW average[MB/sec]  BW[Gb/sec]  MsgRate[Mpps]  "
                 "vs link(B/s)  vs link(pps)  vs TCP   retrans   busy A/B[%%]  c2c[ns]%s\n",
                 w.repeat > 1 ? "  runs (Mpps)" : "");
  else
    std::fprintf(out,
                 " #bytes #iterations  t_min[usec]  t_p50[usec]  t_avg[usec]  t_p99[usec]  "
                 "t_p99.9[usec]  t_max[usec]  vs L2 echo  vs TCP  retrans  busy A/B[%%]  "
                 "c2c[ns]%s\n",
                 w.repeat > 1 ? "  runs (t_p50)" : "");
  std::fflush(out);
}

namespace {
// The core-to-core round trip of a row, "-" when not measured.
std::string c2c(const Point& p) {
  if (p.c2c_ns < 0) return "-";
  char s[24];
  std::snprintf(s, sizeof s, "%.0f", p.c2c_ns);
  return s;
}

// "97/61": the share of each appliance's poll loop time that did work, in percent.
std::string busy(const Point& p) {
  if (p.busy_a < 0 || p.busy_b < 0) return "-";
  char s[24];
  std::snprintf(s, sizeof s, "%.0f/%.0f", p.busy_a * 100, p.busy_b * 100);
  return s;
}

// "1", or "3: lo-hi" for a baseline or row measured several times: M frames or messages/s, or
// median round trips in us (runs_are_rates).
std::string runs_text(const Point& p) {
  if (p.runs <= 1) return std::to_string(p.runs);
  const bool rate = runs_are_rates(p);
  const double unit = rate ? 1e6 : 1e3;
  const int decimals = rate ? 3 : 2;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%u: %.*f-%.*f", p.runs, decimals, p.runs_lo / unit, decimals,
                p.runs_hi / unit);
  return buf;
}

// "lost N B (A's dropped requests)", or on a lossless row "nothing lost": what was sent again
// there (ACK timeouts, probes under load) has no loss to be a multiple of (review 20 #12).
std::string lost_text(const Point& p) {
  if (p.lost_bytes == 0) return "nothing lost";
  return "lost " + std::to_string(p.lost_bytes) + " B (A's dropped requests)";
}

std::string resent_ratio(const Point& p) {
  if (p.lost_bytes == 0) return "(timeouts and probes, no loss)";
  char b[32];
  std::snprintf(b, sizeof b, "(%.2fx)",
                static_cast<double>(p.retransmitted_bytes) / static_cast<double>(p.lost_bytes));
  return b;
}

}  // namespace

void print_row(std::FILE* out, const Workload& w, const Point& p, const Results& b) {
  const Point* link = b.link_for(Kind::kL2Blast, p, frame_payload(p.size, w.mtu));
  if (w.mode == Mode::kBw) {
    // Against the link: our message bytes/s over the blast's payload bytes/s at the same frame
    // size, and our messages/s over its frames/s.
    std::fprintf(
        out, " %-10u %-14llu %-19.2f %-11.3f %-14.6f %-13s %-13s %-8s %-9llu %-13s %-8s %s\n",
        p.size, static_cast<unsigned long long>(p.iterations), p.bytes_per_s / 1048576.0,
        p.bytes_per_s * 8 / 1e9, p.msgs_per_s / 1e6,
        ratio(p.bytes_per_s, link, &Point::bytes_per_s).c_str(),
        ratio(p.msgs_per_s, link, &Point::msgs_per_s).c_str(),
        ratio(p.bytes_per_s, b.find(Kind::kTcpStream, p.size), &Point::bytes_per_s).c_str(),
        static_cast<unsigned long long>(p.retransmitted), busy(p).c_str(), c2c(p).c_str(),
        p.runs > 1 ? runs_text(p).c_str() : "");
    if (p.lost_bytes != 0 || p.retransmitted_bytes != 0)
      std::fprintf(out,
                   "   %s: %s, retransmitted %llu B %s, "
                   "%llu packets selectively (%llu found by a later SACK); %llu ACK timeouts, "
                   "%llu probes; window full %llu times for %.1f ms in all\n",
                   p.selective_repeat ? "selective repeat" : "go-back-N", lost_text(p).c_str(),
                   static_cast<unsigned long long>(p.retransmitted_bytes), resent_ratio(p).c_str(),
                   static_cast<unsigned long long>(p.sr_retransmits),
                   static_cast<unsigned long long>(p.sr_edge_resends),
                   static_cast<unsigned long long>(p.timeouts),
                   static_cast<unsigned long long>(p.probes),
                   static_cast<unsigned long long>(p.window_stalls),
                   static_cast<double>(p.window_stall_ns) / 1e6);
  } else {
    const Point* echo = b.link_for(Kind::kL2Echo, p, frame_payload(p.size, w.mtu));
    std::fprintf(out,
                 " %-6u %-12llu %-12.2f %-12.2f %-12.2f %-12.2f %-14.2f %-12.2f %-11s %-7s %-8llu "
                 "%-13s %-8s %s\n",
                 p.size, static_cast<unsigned long long>(p.iterations), p.lat_min / 1e3,
                 p.lat_p50 / 1e3, p.lat_avg / 1e3, p.lat_p99 / 1e3, p.lat_p999 / 1e3,
                 p.lat_max / 1e3, ratio(p.lat_p50, echo, &Point::lat_p50).c_str(),
                 ratio(p.lat_p50, b.find(Kind::kTcpPingPong, p.size), &Point::lat_p50).c_str(),
                 static_cast<unsigned long long>(p.retransmitted), busy(p).c_str(), c2c(p).c_str(),
                 p.runs > 1 ? runs_text(p).c_str() : "");
  }
  std::fflush(out);
}

std::string link_name(const BenchConfig& cfg) {
  const Topology& t = cfg.topology;
  if (!t.remote()) return "the memif link";
  return t.pmd + " on " + t.iface + " to " + t.peer;
}

void print_baselines(std::FILE* out, const BenchConfig& cfg, const Results& r) {
  const std::string link = link_name(cfg);
  bool any_bw = false, any_lat = false;
  for (const auto& p : r.points) {
    any_bw |= p.kind == Kind::kL2Blast || p.kind == Kind::kTcpStream;
    any_lat |= p.kind == Kind::kL2Echo || p.kind == Kind::kTcpPingPong;
  }
  if (any_bw) {
    std::fprintf(out,
                 "%s\n baselines: throughput (L2 blast on %s; kernel TCP stream on "
                 "loopback)\n",
                 kLine, link.c_str());
    std::fprintf(out,
                 " %-12s #bytes     frame[B]  #msgs          BW[MB/sec]   BW[Gb/sec]  "
                 "MsgRate[Mpps]  lost    c2c[ns]  runs (Mpps)\n",
                 "baseline");
    for (const auto& p : r.points)
      if (p.kind == Kind::kL2Blast || p.kind == Kind::kTcpStream)
        std::fprintf(out, " %-12s %-10u %-9u %-14llu %-12.2f %-11.3f %-14.6f %-7llu %-8s %s\n",
                     to_string(p.kind), p.size, p.frame,
                     static_cast<unsigned long long>(p.iterations), p.bytes_per_s / 1048576.0,
                     p.bytes_per_s * 8 / 1e9, p.msgs_per_s / 1e6,
                     static_cast<unsigned long long>(p.lost), c2c(p).c_str(), runs_text(p).c_str());
  }
  if (any_lat) {
    std::fprintf(out,
                 "%s\n baselines: round trips (L2 echo on %s; kernel TCP ping-pong on "
                 "loopback)\n",
                 kLine, link.c_str());
    std::fprintf(out,
                 " %-12s #bytes  #iterations  t_min[usec]  t_p50[usec]  t_avg[usec]  "
                 "t_p99[usec]  t_p99.9[usec]  t_max[usec]  c2c[ns]  runs (t_p50)\n",
                 "baseline");
    for (const auto& p : r.points)
      if (p.kind == Kind::kL2Echo || p.kind == Kind::kTcpPingPong)
        std::fprintf(
            out, " %-12s %-7u %-12llu %-12.2f %-12.2f %-12.2f %-12.2f %-14.2f %-12.2f %-8s %s\n",
            to_string(p.kind), p.size, static_cast<unsigned long long>(p.iterations),
            p.lat_min / 1e3, p.lat_p50 / 1e3, p.lat_avg / 1e3, p.lat_p99 / 1e3, p.lat_p999 / 1e3,
            p.lat_max / 1e3, c2c(p).c_str(), runs_text(p).c_str());
  }
  std::fflush(out);
}

// ---- JSON -----------------------------------------------------------------------------------

namespace {

std::string quote(const std::string& s) {
  std::string o = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\t':
        o += "\\t";
        break;
      case '\r':
        o += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += c;
        }
    }
  }
  return o + "\"";
}

std::string num(double d) {
  if (!std::isfinite(d)) return "null";
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", d);
  return b;
}

void point_json(std::ostringstream& j, const BenchConfig& cfg, const Point& p, const Results& r,
                const Workload* w) {
  j << "{\"kind\":" << quote(to_string(p.kind)) << ",\"bytes\":" << p.size;
  if (p.frame) j << ",\"frame_bytes\":" << p.frame;
  j << ",\"iterations\":" << p.iterations << ",\"seconds\":" << num(p.seconds)
    << ",\"bytes_per_sec\":" << num(p.bytes_per_s)
    << ",\"gbit_per_sec\":" << num(p.bytes_per_s * 8 / 1e9)
    << ",\"msg_rate_mpps\":" << num(p.msgs_per_s / 1e6);
  if (p.has_lat)
    j << ",\"latency_usec\":{\"min\":" << num(p.lat_min / 1e3)
      << ",\"p50\":" << num(p.lat_p50 / 1e3) << ",\"avg\":" << num(p.lat_avg / 1e3)
      << ",\"p99\":" << num(p.lat_p99 / 1e3) << ",\"p99_9\":" << num(p.lat_p999 / 1e3)
      << ",\"max\":" << num(p.lat_max / 1e3) << "}";
  if (p.kind == Kind::kL2Blast) j << ",\"lost\":" << p.lost;
  if (p.c2c_ns >= 0) j << ",\"c2c_ns\":" << num(p.c2c_ns);
  if (p.for_workload >= 0 && p.for_workload < static_cast<std::int32_t>(cfg.workloads.size()))
    j << ",\"for_workload\":" << quote(cfg.workloads[static_cast<std::size_t>(p.for_workload)].name)
      << ",\"for_bytes\":" << p.for_size;
  if (p.runs > 1) {  // the median of p.runs measurements; the range of them all
    const bool rate = runs_are_rates(p);
    const double unit = rate ? 1e6 : 1e3;
    j << ",\"runs\":{\"count\":" << p.runs << ",\"" << (rate ? "msg_rate_mpps" : "p50_usec")
      << "\":{\"min\":" << num(p.runs_lo / unit) << ",\"max\":" << num(p.runs_hi / unit) << "}}";
  }
  if (p.kind == Kind::kOurs) {
    j << ",\"counters\":{\"retransmitted_packets\":" << p.retransmitted
      << ",\"retransmit_timeouts\":" << p.timeouts << ",\"retransmit_probes\":" << p.probes
      << ",\"injected_drops\":" << p.injected_drops << ",\"rnr_naks_received\":" << p.rnr_naks
      << ",\"seq_naks_received\":" << p.seq_naks << ",\"read_rerequests\":" << p.read_rerequests
      << ",\"read_rerequest_bytes\":" << p.read_rerequest_bytes
      << ",\"peer_read_responses_sent\":" << p.peer_read_responses
      << ",\"retransmitted_bytes\":" << p.retransmitted_bytes << ",\"lost_bytes\":" << p.lost_bytes
      << ",\"sr_retransmits\":" << p.sr_retransmits << ",\"sr_edge_resends\":" << p.sr_edge_resends
      << ",\"window_stalls\":" << p.window_stalls << ",\"window_stall_ns\":" << p.window_stall_ns
      << "}"
      << ",\"selective_repeat\":" << (p.selective_repeat ? "true" : "false")
      << ",\"srtt_us\":" << num(static_cast<double>(p.srtt_ns) / 1e3);
    if (p.busy_a >= 0 || p.busy_b >= 0)
      j << ",\"busy\":{\"a\":" << (p.busy_a >= 0 ? num(p.busy_a) : "null")
        << ",\"b\":" << (p.busy_b >= 0 ? num(p.busy_b) : "null") << "}";
    if (w) {
      const std::uint32_t fp = frame_payload(p.size, w->mtu);
      const Point* link = r.link_for(Kind::kL2Blast, p, fp);
      const Point* echo = r.link_for(Kind::kL2Echo, p, fp);
      const Point* tcp = r.find(Kind::kTcpStream, p.size);
      const Point* tpp = r.find(Kind::kTcpPingPong, p.size);
      const auto rat = [](double a, const Point* b, double Point::*f) {
        return b && b->*f > 0 ? num(a / (b->*f)) : std::string("null");
      };
      j << ",\"ratios\":{";
      if (w->mode == Mode::kBw)
        j << "\"bytes_vs_link\":" << rat(p.bytes_per_s, link, &Point::bytes_per_s)
          << ",\"msgs_vs_link\":" << rat(p.msgs_per_s, link, &Point::msgs_per_s)
          << ",\"bytes_vs_tcp\":" << rat(p.bytes_per_s, tcp, &Point::bytes_per_s)
          << ",\"msgs_vs_tcp\":" << rat(p.msgs_per_s, tcp, &Point::msgs_per_s);
      else
        j << "\"p50_vs_l2_echo\":" << rat(p.lat_p50, echo, &Point::lat_p50)
          << ",\"p50_vs_tcp\":" << rat(p.lat_p50, tpp, &Point::lat_p50)
          << ",\"p99_vs_l2_echo\":" << rat(p.lat_p99, echo, &Point::lat_p99)
          << ",\"p99_vs_tcp\":" << rat(p.lat_p99, tpp, &Point::lat_p99);
      j << "}";
    }
  }
  j << "}";
}

}  // namespace

std::vector<TargetResult> evaluate_targets(const BenchConfig& cfg, const Results& r) {
  const auto ours = [&](const std::string& name, std::uint32_t size) -> const Point* {
    for (std::size_t i = 0; i < cfg.workloads.size(); ++i)
      if (cfg.workloads[i].name == name)
        for (const auto& p : r.points)
          if (p.kind == Kind::kOurs && p.workload == static_cast<std::int32_t>(i) && p.size == size)
            return &p;
    return nullptr;
  };
  const auto mtu_of = [&](const std::string& name) {
    for (const auto& w : cfg.workloads)
      if (w.name == name) return w.mtu;
    return 1024u;
  };
  const auto adjacent = [&](Kind k, const Point& row) -> const Point* {
    for (const auto& q : r.points)
      if (q.kind == k && q.for_workload >= 0 && q.for_workload == row.workload &&
          q.for_size == row.size)
        return &q;
    return nullptr;
  };
  std::vector<TargetResult> out;
  for (const Target& t : cfg.targets) {
    TargetResult tr;
    tr.target = &t;
    const Point* p = ours(t.workload, t.size);
    const std::uint32_t fp = frame_payload(t.size, mtu_of(t.workload));
    const Point* base = nullptr;
    double Point::*field = &Point::bytes_per_s;
    switch (t.metric) {
      case Target::Metric::kBytesVsLink:
        base = p ? r.link_for(Kind::kL2Blast, *p, fp) : nullptr;
        break;
      case Target::Metric::kMsgsVsLink:
        base = p ? r.link_for(Kind::kL2Blast, *p, fp) : nullptr;
        field = &Point::msgs_per_s;
        break;
      case Target::Metric::kP50VsL2Echo:
        base = p ? r.link_for(Kind::kL2Echo, *p, fp) : nullptr;
        field = &Point::lat_p50;
        break;
      case Target::Metric::kBytesVsWorkload:
        base = ours(t.of, t.size);
        break;
      case Target::Metric::kMsgsVsWorkload:
        base = ours(t.of, t.size);
        field = &Point::msgs_per_s;
        break;
    }
    if (p && base && base->*field > 0) {
      tr.value = p->*field / (base->*field);
      // Two workloads each measured right after a link baseline of its own
      // (baselines.adjacent): each against its own link, so that what the host did between
      // the two rows (the VM's cores move) does not enter the ratio.
      const bool of_workload = t.metric == Target::Metric::kBytesVsWorkload ||
                               t.metric == Target::Metric::kMsgsVsWorkload;
      const Point* lp = of_workload ? adjacent(Kind::kL2Blast, *p) : nullptr;
      const Point* lb = of_workload ? adjacent(Kind::kL2Blast, *base) : nullptr;
      if (lp && lb && lp->msgs_per_s > 0 && lb->msgs_per_s > 0) {
        tr.value = *tr.value * lb->msgs_per_s / lp->msgs_per_s;
        tr.link_normalized = true;
      }
      tr.met = t.is_max ? *tr.value <= t.bound : *tr.value >= t.bound;
      tr.c2c_row = p->c2c_ns;
      tr.c2c_ref = base->c2c_ns;
      tr.cores_moved = tr.c2c_row > 0 && tr.c2c_ref > 0 &&
                       std::max(tr.c2c_row, tr.c2c_ref) > 2 * std::min(tr.c2c_row, tr.c2c_ref);
      tr.runs = p->runs;
      // The row's spread: each metric here is its key times a factor fixed for the row (the
      // size, the payload per frame, the reference's median).
      if (p->runs > 1 && p->key_med > 0) {
        tr.lo = *tr.value * p->key_lo / p->key_med;
        tr.hi = *tr.value * p->key_hi / p->key_med;
      }
    }
    out.push_back(tr);
  }
  return out;
}

void print_targets(std::FILE* out, const std::vector<TargetResult>& ts) {
  if (ts.empty()) return;
  std::fprintf(
      out, "%s\n targets (the median of the runs, and their range)\n %-52s %-10s %-16s %-10s %s\n",
      kLine, "target", "measured", "runs: range", "required", "result");
  unsigned met = 0;
  for (const auto& tr : ts) {
    const Target& t = *tr.target;
    char need[32], got[32] = "n/a";
    std::snprintf(need, sizeof need, "%s %.2f", t.is_max ? "<=" : ">=", t.bound);
    if (tr.value) std::snprintf(got, sizeof got, "%.3f", *tr.value);
    char range[48] = "1";
    if (tr.lo && tr.hi)
      std::snprintf(range, sizeof range, "%u: %.3f-%.3f", tr.runs, *tr.lo, *tr.hi);
    else if (tr.runs > 1)
      std::snprintf(range, sizeof range, "%u", tr.runs);
    char moved[80] = "";
    if (tr.cores_moved)
      std::snprintf(moved, sizeof moved, " (cores moved: c2c %.0f ns, reference %.0f ns)",
                    tr.c2c_row, tr.c2c_ref);
    else if (tr.c2c_row >= 0)
      std::snprintf(moved, sizeof moved, " (c2c %.0f ns)", tr.c2c_row);
    std::fprintf(out, " %-52.52s %-10s %-16s %-10s %s%s\n", t.name.c_str(), got, range, need,
                 tr.met     ? "met"
                 : tr.value ? "MISSED"
                            : "NOT MEASURED",
                 moved);
    met += tr.met;
  }
  std::fprintf(out, " %u of %zu targets met\n", met, ts.size());
  std::fflush(out);
}

std::string to_json(const BenchConfig& cfg, const Results& r) {
  std::ostringstream j;
  j << "{\n\"name\":" << quote(cfg.name) << ",\n\"config_file\":" << quote(cfg.origin)
    << ",\n\"config_text\":" << quote(cfg.text) << ",\n\"tsc_hz\":" << num(r.tsc_hz)
    << ",\n\"config\":{\"timeout\":" << num(cfg.timeout) << ",\"topology\":";
  if (const Topology& t = cfg.topology; t.remote())
    j << "{\"kind\":\"remote\",\"peer\":" << quote(t.peer) << ",\"peer_port\":" << t.tcp_port()
      << ",\"iface\":" << quote(t.iface) << ",\"pmd\":" << quote(t.pmd) << ",\"ip\":" << quote(t.ip)
      << ",\"mac\":" << quote(t.mac) << ",\"netdev_mtu\":" << t.netdev_mtu
      << ",\"lcore\":" << t.lcore << "}";
  else
    j << "{\"kind\":\"memif\"}";
  j << ",\"baselines\":{\"link\":" << (cfg.baselines.link ? "true" : "false")
    << ",\"tcp\":" << (cfg.baselines.tcp ? "true" : "false")
    << ",\"duration\":" << num(cfg.baselines.duration)
    << ",\"iterations\":" << cfg.baselines.iterations << ",\"repeat\":" << cfg.baselines.repeat
    << ",\"adjacent\":" << (cfg.baselines.adjacent ? "true" : "false") << "}},\n\"workloads\":[";
  for (std::size_t i = 0; i < cfg.workloads.size(); ++i) {
    const Workload& w = cfg.workloads[i];
    j << (i ? ",\n" : "\n") << "{\"name\":" << quote(w.name)
      << ",\"operation\":" << quote(to_string(w.op)) << ",\"mode\":" << quote(to_string(w.mode))
      << ",\"sizes\":[";
    for (std::size_t s = 0; s < w.sizes.size(); ++s) j << (s ? "," : "") << w.sizes[s];
    j << "],\"iterations\":" << w.iterations << ",\"duration\":" << num(w.duration)
      << ",\"queue_depth\":" << w.queue_depth << ",\"qps\":" << w.qps << ",\"mtu\":" << w.mtu
      << ",\"inline\":" << w.inline_size << ",\"drop_rate\":" << num(w.drop_rate)
      << ",\"seed\":" << w.seed << ",\"retry_timeout\":" << w.retry_timeout
      << ",\"window\":" << w.window << ",\"loss_window\":" << w.loss_window
      << ",\"ack_req_every\":" << w.ack_req_every << ",\"probe_min_us\":" << w.probe_min_us
      << ",\"selective_repeat\":" << (w.selective_repeat ? "true" : "false")
      << ",\"peer_announces\":" << (w.peer_announces ? "true" : "false")
      << ",\"repeat\":" << w.repeat << ",\"results\":[";
    bool first = true;
    for (const auto& p : r.points)
      if (p.kind == Kind::kOurs && p.workload == static_cast<std::int32_t>(i)) {
        j << (first ? "" : ",") << "\n  ";
        point_json(j, cfg, p, r, &w);
        first = false;
      }
    j << "]}";
  }
  j << "],\n\"targets\":[";
  const auto ts = evaluate_targets(cfg, r);
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const Target& t = *ts[i].target;
    j << (i ? ",\n" : "\n") << "{\"name\":" << quote(t.name)
      << ",\"workload\":" << quote(t.workload) << ",\"bytes\":" << t.size
      << ",\"metric\":" << quote(to_string(t.metric));
    if (!t.of.empty()) j << ",\"of\":" << quote(t.of);
    j << (t.is_max ? ",\"max\":" : ",\"min\":") << num(t.bound)
      << ",\"value\":" << (ts[i].value ? num(*ts[i].value) : std::string("null"))
      << ",\"met\":" << (ts[i].met ? "true" : "false");
    if (ts[i].c2c_row >= 0 || ts[i].c2c_ref >= 0)
      j << ",\"c2c_ns\":{\"row\":" << (ts[i].c2c_row >= 0 ? num(ts[i].c2c_row) : "null")
        << ",\"reference\":" << (ts[i].c2c_ref >= 0 ? num(ts[i].c2c_ref) : "null") << "}";
    j << ",\"cores_moved\":" << (ts[i].cores_moved ? "true" : "false")
      << ",\"runs\":" << ts[i].runs;
    if (ts[i].link_normalized) j << ",\"each_against_its_link\":true";
    if (ts[i].lo && ts[i].hi)
      j << ",\"range\":{\"min\":" << num(*ts[i].lo) << ",\"max\":" << num(*ts[i].hi) << "}";
    j << "}";
  }
  j << "],\n\"baselines\":[";
  bool first = true;
  for (const auto& p : r.points)
    if (p.kind != Kind::kOurs) {
      j << (first ? "\n" : ",\n");
      point_json(j, cfg, p, r, nullptr);
      first = false;
    }
  j << "]\n}\n";
  return j.str();
}

// ---- SVG ------------------------------------------------------------------------------------

namespace {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> xy;  ///< x: bytes, y: value
  bool dashed = false;
  /// A baseline: drawn as a step line across the whole chart (each value holds until the next
  /// measured size, the first from the left edge, the last to the right edge), no markers.
  bool reference = false;
};

/// One bar group of the latency chart: an operation at one size, or a baseline.
struct BarGroup {
  std::string label;
  double v[4] = {0, 0, 0, 0};  ///< min, p50, p99, p99.9 in us
  double max = 0;              ///< us, drawn as a tick above the bars
  bool baseline = false;
};

constexpr std::size_t kMaxBarGroups = 12;
const char* const kPercentiles[] = {"min", "p50", "p99", "p99.9"};
const char* const kBarColours[] = {"#9ecae1", "#1f77b4", "#ff7f0e", "#d62728"};

const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string size_label(double b) {
  if (b >= 1 << 20) return std::to_string(static_cast<long>(b / (1 << 20))) + "M";
  if (b >= 1024) return std::to_string(static_cast<long>(b / 1024)) + "K";
  return std::to_string(static_cast<long>(b));
}

std::string value_label(double v) {
  char b[32];
  if (v >= 100 || v == std::floor(v))
    std::snprintf(b, sizeof b, "%g", v);
  else
    std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// One chart at (x0, y0) of w x h; x is log2 of the size, y is log10 of the value.
void chart(std::ostringstream& s, double x0, double y0, double w, double h,
           const std::string& title, const std::string& ylabel, const std::vector<Series>& series) {
  double xmin = 1e300, xmax = -1e300, ymin = 1e300, ymax = -1e300;
  for (const auto& se : series)
    for (const auto& [x, y] : se.xy) {
      if (x <= 0 || y <= 0) continue;
      xmin = std::min(xmin, x), xmax = std::max(xmax, x);
      ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  s << "<text x='" << x0 + w / 2 << "' y='" << y0 - 8
    << "' text-anchor='middle' font-size='15' font-weight='bold'>" << title << "</text>\n";
  s << "<rect x='" << x0 << "' y='" << y0 << "' width='" << w << "' height='" << h
    << "' fill='none' stroke='#444'/>\n";
  if (xmin > xmax) {
    s << "<text x='" << x0 + w / 2 << "' y='" << y0 + h / 2
      << "' text-anchor='middle' fill='#888'>no data</text>\n";
    return;
  }
  const double lx0 = std::floor(std::log2(xmin)),
               lx1 = std::max(lx0 + 1, std::ceil(std::log2(xmax)));
  const double ly0 = std::floor(std::log10(ymin)),
               ly1 = std::max(ly0 + 1, std::ceil(std::log10(ymax)));
  const auto px = [&](double x) { return x0 + (std::log2(x) - lx0) / (lx1 - lx0) * w; };
  const auto py = [&](double y) { return y0 + h - (std::log10(y) - ly0) / (ly1 - ly0) * h; };
  const int xstep = lx1 - lx0 > 12 ? 2 : 1;
  for (int e = static_cast<int>(lx0); e <= static_cast<int>(lx1); e += xstep) {
    const double X = px(std::exp2(e));
    s << "<line x1='" << X << "' y1='" << y0 << "' x2='" << X << "' y2='" << y0 + h
      << "' stroke='#ddd'/><text x='" << X << "' y='" << y0 + h + 15
      << "' text-anchor='middle' font-size='11'>" << size_label(std::exp2(e)) << "</text>\n";
  }
  for (int e = static_cast<int>(ly0); e <= static_cast<int>(ly1); ++e) {
    const double Y = py(std::pow(10.0, e));
    s << "<line x1='" << x0 << "' y1='" << Y << "' x2='" << x0 + w << "' y2='" << Y
      << "' stroke='#ddd'/><text x='" << x0 - 5 << "' y='" << Y + 4
      << "' text-anchor='end' font-size='11'>" << value_label(std::pow(10.0, e)) << "</text>\n";
  }
  s << "<text x='" << x0 + w / 2 << "' y='" << y0 + h + 32
    << "' text-anchor='middle' font-size='12'>message size (bytes)</text>\n";
  s << "<text transform='translate(" << x0 - 48 << "," << y0 + h / 2
    << ") rotate(-90)' text-anchor='middle' font-size='12'>" << ylabel << "</text>\n";
  std::size_t i = 0;
  for (const auto& se : series) {
    const char* colour = kColours[i % (sizeof kColours / sizeof kColours[0])];
    std::string pts;
    if (se.reference) {
      // A step line over the whole width: each measured value holds from its size on.
      std::vector<std::pair<double, double>> xy;
      for (const auto& [x, y] : se.xy)
        if (x > 0 && y > 0) xy.emplace_back(x, y);
      std::sort(xy.begin(), xy.end());
      for (std::size_t k = 0; k < xy.size(); ++k) {
        const double from = k == 0 ? x0 : px(xy[k].first);
        const double to = k + 1 < xy.size() ? px(xy[k + 1].first) : x0 + w;
        pts += value_label(from) + "," + value_label(py(xy[k].second)) + " " + value_label(to) +
               "," + value_label(py(xy[k].second)) + " ";
      }
    } else {
      for (const auto& [x, y] : se.xy)
        if (x > 0 && y > 0) pts += value_label(px(x)) + "," + value_label(py(y)) + " ";
    }
    s << "<polyline fill='none' stroke='" << colour << "' stroke-width='2'"
      << (se.dashed ? " stroke-dasharray='6,4'" : "") << " points='" << pts << "'/>\n";
    for (const auto& [x, y] : se.xy)
      if (x > 0 && y > 0 && !se.reference)
        s << "<circle cx='" << px(x) << "' cy='" << py(y) << "' r='3' fill='" << colour
          << "'><title>" << se.name << ": " << size_label(x) << " B, " << value_label(y)
          << "</title></circle>\n";
    const double ly = y0 + 14 + 15 * static_cast<double>(i);
    s << "<line x1='" << x0 + w + 12 << "' y1='" << ly - 4 << "' x2='" << x0 + w + 36 << "' y2='"
      << ly - 4 << "' stroke='" << colour << "' stroke-width='2'"
      << (se.dashed ? " stroke-dasharray='6,4'" : "") << "/><text x='" << x0 + w + 40 << "' y='"
      << ly << "' font-size='11'>" << se.name << "</text>\n";
    ++i;
  }
}

BarGroup bar_group(std::string label, const Point& p, bool baseline) {
  BarGroup g;
  g.label = std::move(label);
  g.v[0] = p.lat_min / 1e3, g.v[1] = p.lat_p50 / 1e3, g.v[2] = p.lat_p99 / 1e3,
  g.v[3] = p.lat_p999 / 1e3;
  g.max = p.lat_max / 1e3;
  g.baseline = baseline;
  return g;
}

// Grouped bars at (x0, y0) of w x h: one group per operation and size, a bar per percentile,
// y is log10 of the value; the max is a tick above each group.
void bars(std::ostringstream& s, double x0, double y0, double w, double h, const std::string& title,
          const std::string& ylabel, const std::vector<BarGroup>& groups) {
  double ymin = 1e300, ymax = -1e300;
  for (const auto& g : groups) {
    for (double v : g.v)
      if (v > 0) ymin = std::min(ymin, v), ymax = std::max(ymax, v);
    if (g.max > 0) ymax = std::max(ymax, g.max);
  }
  s << "<text x='" << x0 + w / 2 << "' y='" << y0 - 8
    << "' text-anchor='middle' font-size='15' font-weight='bold'>" << title << "</text>\n";
  s << "<rect x='" << x0 << "' y='" << y0 << "' width='" << w << "' height='" << h
    << "' fill='none' stroke='#444'/>\n";
  if (ymin > ymax) {
    s << "<text x='" << x0 + w / 2 << "' y='" << y0 + h / 2
      << "' text-anchor='middle' fill='#888'>no data</text>\n";
    return;
  }
  const double ly0 = std::floor(std::log10(ymin)),
               ly1 = std::max(ly0 + 1, std::ceil(std::log10(ymax)));
  const auto py = [&](double y) { return y0 + h - (std::log10(y) - ly0) / (ly1 - ly0) * h; };
  for (int e = static_cast<int>(ly0); e <= static_cast<int>(ly1); ++e) {
    const double Y = py(std::pow(10.0, e));
    s << "<line x1='" << x0 << "' y1='" << Y << "' x2='" << x0 + w << "' y2='" << Y
      << "' stroke='#ddd'/><text x='" << x0 - 5 << "' y='" << Y + 4
      << "' text-anchor='end' font-size='11'>" << value_label(std::pow(10.0, e)) << "</text>\n";
  }
  s << "<text transform='translate(" << x0 - 48 << "," << y0 + h / 2
    << ") rotate(-90)' text-anchor='middle' font-size='12'>" << ylabel << "</text>\n";
  const double gw = w / static_cast<double>(groups.size()), bw = gw * 0.8 / 4;
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const BarGroup& g = groups[gi];
    const double gx = x0 + gw * static_cast<double>(gi) + gw * 0.1;
    for (int k = 0; k < 4; ++k) {
      if (g.v[k] <= 0) continue;
      const double top = py(g.v[k]);
      s << "<rect x='" << gx + bw * k << "' y='" << top << "' width='" << bw * 0.9 << "' height='"
        << y0 + h - top << "' fill='" << kBarColours[k] << "'"
        << (g.baseline ? " fill-opacity='0.45'" : "") << "><title>" << g.label << " "
        << kPercentiles[k] << ": " << value_label(g.v[k]) << " us</title></rect>\n";
    }
    if (g.max > 0) {
      const double Y = py(g.max);
      s << "<line x1='" << gx << "' y1='" << Y << "' x2='" << gx + bw * 4 << "' y2='" << Y
        << "' stroke='#444' stroke-width='1.5'><title>" << g.label << " max: " << value_label(g.max)
        << " us</title></line>\n";
    }
    s << "<text transform='translate(" << gx + bw * 2 << "," << y0 + h + 12
      << ") rotate(25)' font-size='10'>" << g.label << "</text>\n";
  }
  for (int k = 0; k < 4; ++k) {
    const double ly = y0 + 14 + 15 * k;
    s << "<rect x='" << x0 + w + 12 << "' y='" << ly - 9 << "' width='24' height='9' fill='"
      << kBarColours[k] << "'/><text x='" << x0 + w + 40 << "' y='" << ly << "' font-size='11'>"
      << kPercentiles[k] << "</text>\n";
  }
  s << "<line x1='" << x0 + w + 12 << "' y1='" << y0 + 70 << "' x2='" << x0 + w + 36 << "' y2='"
    << y0 + 70 << "' stroke='#444' stroke-width='1.5'/><text x='" << x0 + w + 40 << "' y='"
    << y0 + 74 << "' font-size='11'>max</text>\n";
  s << "<text x='" << x0 + w + 12 << "' y='" << y0 + 92
    << "' font-size='11'>pale: baselines</text>\n";
}

}  // namespace

std::string to_svg(const BenchConfig& cfg, const Results& r) {
  std::vector<Series> gbps, mpps, lat;
  std::vector<BarGroup> groups;
  for (std::size_t i = 0; i < cfg.workloads.size(); ++i) {
    const Workload& w = cfg.workloads[i];
    Series a{w.name, {}, false}, m{w.name, {}, false};
    Series p50{w.name + " p50", {}, false}, p99{w.name + " p99", {}, true};
    for (const auto& p : r.points) {
      if (p.kind != Kind::kOurs || p.workload != static_cast<std::int32_t>(i)) continue;
      if (w.mode == Mode::kBw) {
        a.xy.emplace_back(p.size, p.bytes_per_s * 8 / 1e9);
        m.xy.emplace_back(p.size, p.msgs_per_s / 1e6);
      } else {
        p50.xy.emplace_back(p.size, p.lat_p50 / 1e3);
        p99.xy.emplace_back(p.size, p.lat_p99 / 1e3);
        groups.push_back(bar_group(w.name + " " + size_label(p.size) + "B", p, false));
      }
    }
    if (w.mode == Mode::kBw) {
      gbps.push_back(a), mpps.push_back(m);
    } else {
      lat.push_back(p50), lat.push_back(p99);
    }
  }
  // The baselines of the whole run: a ceiling drawn across every size (a frame's payload is
  // min(size, MTU), so the blast at the largest frame is the ceiling of every larger message).
  const auto base = [&](Kind k, const std::string& name, bool latency) {
    Series s{name, {}, true}, m{name, {}, true};
    s.reference = m.reference = true;
    for (const auto& p : r.points) {
      if (p.kind != k || p.for_workload >= 0) continue;  // those of one row: in the JSON
      if (latency) {
        s.xy.emplace_back(p.size, p.lat_p50 / 1e3);
        groups.push_back(bar_group(name + " " + size_label(p.size) + "B", p, true));
      } else {
        s.xy.emplace_back(p.size, p.bytes_per_s * 8 / 1e9);
        m.xy.emplace_back(p.size, p.msgs_per_s / 1e6);
      }
    }
    if (s.xy.empty()) return;
    if (latency) {
      s.name += " p50";
      lat.push_back(s);
    } else {
      gbps.push_back(s);
      mpps.push_back(m);
    }
  };
  base(Kind::kL2Blast, "link ceiling (L2 blast)", false);
  base(Kind::kTcpStream, "kernel TCP stream", false);
  base(Kind::kL2Echo, "link L2 echo", true);
  base(Kind::kTcpPingPong, "kernel TCP ping-pong", true);

  const double W = 1000, H = 1190;
  std::ostringstream s;
  s << "<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' width='"
    << W << "' height='" << H << "' viewBox='0 0 " << W << ' ' << H
    << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='" << W / 2
    << "' y='24' text-anchor='middle' font-size='18'>roce-perf: " << cfg.name << "</text>\n";
  chart(s, 90, 60, 560, 260, "Throughput", "Gb/s (log)", gbps);
  chart(s, 90, 420, 560, 260, "Message rate", "M msgs/s (log)", mpps);
  // Latency: percentile bars per operation and size while they fit, else p50/p99 against size.
  if (groups.size() <= kMaxBarGroups)
    bars(s, 90, 780, 560, 260, "Latency (round trip), percentiles", "usec (log)", groups);
  else
    chart(s, 90, 780, 560, 260, "Latency (round trip)", "usec (log)", lat);
  s << "</svg>\n";
  return s.str();
}

}  // namespace roce::bench
