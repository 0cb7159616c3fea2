// The benchmark file of roce-perf --config: good files, and bad keys and values reported with
// file:line:col. Also the reports built from a hand-made result set.
#include "apps/perf/bench/bench_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "apps/perf/bench/bench_report.h"

namespace roce::bench {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_bench_config(text, "b.yaml");
  } catch (const BenchConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(BenchConfig, ExampleFilesParse) {
  for (const char* f :
       {"/bench/quick.yaml", "/bench/full.yaml", "/bench/targets.yaml", "/bench/loss-sweep.yaml",
        "/bench/zero-copy.yaml", "/bench/remote.yaml", "/bench/sr-loss.yaml",
        "/bench/sr-send-loss.yaml", "/bench/read-loss.yaml"}) {
    const BenchConfig c = parse_bench_config_file(std::string(ROCE_CONFIG_DIR) + f);
    EXPECT_FALSE(c.workloads.empty()) << f;
    EXPECT_FALSE(c.json.empty()) << f;
    EXPECT_NE(c.text.find("workloads:"), std::string::npos) << f;
  }
}

TEST(BenchConfig, EveryKey) {
  const BenchConfig c = parse_bench_config(R"(
name: t
workdir: /tmp/x
timeout: 30
output: {json: r.json, svg: r.svg}
baselines: {link: false, tcp: true, duration: 0.1, iterations: 50, repeat: 3, adjacent: true}
defaults: {mtu: 4096, queue_depth: 16, duration: 0.5, repeat: 3}
workloads:
  - name: a
    operation: write_imm
    mode: bw
    sizes: {min: 2, max: 64}
    qps: 4
    inline: 64
    drop_rate: 0.01
    seed: 7
    retry_timeout: 10
    selective_repeat: 1
    sr_bdp_cap: auto
  - operation: read
    sr_bdp_cap: 65536
    mode: lat
    sizes: [8, 4096]
    iterations: 100
    repeat: 1
  - operation: atomic
    sizes: [64]
)",
                                           "t.yaml");
  EXPECT_EQ(c.name, "t");
  EXPECT_EQ(c.workdir, "/tmp/x");
  EXPECT_EQ(c.timeout, 30);
  EXPECT_EQ(c.json, "r.json");
  EXPECT_EQ(c.svg, "r.svg");
  EXPECT_FALSE(c.baselines.link);
  EXPECT_EQ(c.baselines.iterations, 50u);
  EXPECT_EQ(c.baselines.repeat, 3u);
  EXPECT_TRUE(c.baselines.adjacent);
  EXPECT_FALSE(parse_bench_config("workloads: [{}]\n", "b.yaml").baselines.adjacent);
  ASSERT_EQ(c.workloads.size(), 3u);
  const Workload& a = c.workloads[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.op, Op::kWriteImm);
  EXPECT_EQ(a.sizes, (std::vector<std::uint32_t>{2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(a.qps, 4u);
  EXPECT_TRUE(a.selective_repeat);
  EXPECT_FALSE(c.workloads[1].selective_repeat);
  EXPECT_EQ(a.sr_bdp_cap, std::optional<std::uint64_t>(~std::uint64_t{0}));
  EXPECT_EQ(c.workloads[1].sr_bdp_cap, std::optional<std::uint64_t>(65536));
  EXPECT_FALSE(c.workloads[2].sr_bdp_cap) << "unset: the engine's";
  EXPECT_EQ(a.mtu, 4096u);  // from defaults
  EXPECT_EQ(a.queue_depth, 16u);
  EXPECT_EQ(a.duration, 0.5);
  EXPECT_EQ(a.inline_size, 64u);
  EXPECT_EQ(a.drop_rate, 0.01);
  EXPECT_EQ(a.seed, 7u);
  EXPECT_EQ(a.retry_timeout, 10u);
  EXPECT_EQ(a.repeat, 3u);  // from defaults
  const Workload& b = c.workloads[1];
  EXPECT_EQ(b.name, "read_lat_1");
  EXPECT_EQ(b.mode, Mode::kLat);
  EXPECT_EQ(b.queue_depth, 1u);  // latency: one at a time
  EXPECT_EQ(b.iterations, 100u);
  EXPECT_EQ(b.duration, 0);  // iterations given: the default duration does not apply
  EXPECT_EQ(b.repeat, 1u);
  EXPECT_EQ(c.workloads[2].sizes, (std::vector<std::uint32_t>{8}));  // atomics are 8 bytes
}

TEST(BenchConfig, UnknownKeysNameFileLineColumn) {
  EXPECT_EQ(error_of("workloads:\n  - operation: write\n    sise: [8]\n"),
            "b.yaml:3:5: unknown key 'sise' in workloads[0]");
  EXPECT_EQ(error_of("colour: red\nworkloads: [{operation: write}]\n"),
            "b.yaml:1:1: unknown key 'colour' in bench");
  EXPECT_EQ(error_of("baselines:\n  lnk: true\nworkloads: [{operation: write}]\n"),
            "b.yaml:2:3: unknown key 'lnk' in baselines");
  EXPECT_EQ(error_of("defaults: {depth: 3}\nworkloads: [{operation: write}]\n"),
            "b.yaml:1:12: unknown key 'depth' in defaults");
}

TEST(BenchConfig, BadValuesNameFileLineColumn) {
  EXPECT_EQ(error_of("workloads:\n  - operation: wrote\n"),
            "b.yaml:2:16: workloads[0].operation must be write, read, send, atomic or write_imm, "
            "not 'wrote'");
  EXPECT_EQ(error_of("workloads:\n  - mode: fast\n"),
            "b.yaml:2:11: workloads[0].mode must be bw or lat, not 'fast'");
  EXPECT_EQ(error_of("workloads:\n  - mtu: 1500\n"),
            "b.yaml:2:10: workloads[0].mtu must be 256, 512, 1024, 2048 or 4096");
  EXPECT_EQ(error_of("workloads:\n  - queue_depth: -1\n"),
            "b.yaml:2:18: workloads[0].queue_depth must be an unsigned integer, not '-1'");
  EXPECT_EQ(error_of("workloads:\n  - qps: 16385\n"),
            "b.yaml:2:10: workloads[0].qps = 16385 is out of range [1, 16384]");
  EXPECT_EQ(error_of("workloads:\n  - drop_rate: 0.9\n"),
            "b.yaml:2:16: workloads[0].drop_rate is out of range [0, 0.5]");
  EXPECT_EQ(error_of("workloads:\n  - sizes: [8, x]\n"),
            "b.yaml:2:16: workloads[0].sizes[] must be an unsigned integer, not 'x'");
  EXPECT_EQ(error_of("workloads:\n  - sizes: {min: 64, max: 8}\n"),
            "b.yaml:2:12: workloads[0].sizes: max is below min");
  EXPECT_EQ(error_of("workloads:\n  - {iterations: 5, duration: 1}\n"),
            "b.yaml:2:31: workloads[0].duration: give iterations or duration, not both");
  EXPECT_EQ(error_of("workloads:\n  - {name: a}\n  - {name: a}\n"),
            "b.yaml:3:5: workloads[1]: the name 'a' is used twice");
  EXPECT_EQ(error_of("baselines: {repeat: 10}\nworkloads: [{}]\n"),
            "b.yaml:1:21: baselines.repeat = 10 is out of range [1, 9]");
  EXPECT_EQ(error_of("workloads:\n  - repeat: 0\n"),
            "b.yaml:2:13: workloads[0].repeat = 0 is out of range [1, 9]");
  EXPECT_EQ(error_of("baselines: {tcp: maybe}\nworkloads: [{}]\n"),
            "b.yaml:1:18: baselines.tcp must be true or false, not 'maybe'");
  EXPECT_EQ(error_of("name: x\n"), "b.yaml:1:1: bench.workloads is missing");
  EXPECT_EQ(error_of("workloads: []\n"),
            "b.yaml:1:12: workloads must be a non-empty list of workloads");
  EXPECT_EQ(error_of("workloads: [\n"), "b.yaml:2:1: end of sequence flow not found");
  EXPECT_EQ(error_of(""), "b.yaml: the file is empty");
  EXPECT_THROW(parse_bench_config_file("/nonexistent/b.yaml"), BenchConfigError);
}

TEST(BenchConfig, Topology) {
  const BenchConfig memif = parse_bench_config("workloads: [{sizes: [8]}]\n", "b.yaml");
  EXPECT_FALSE(memif.topology.remote());
  const BenchConfig c = parse_bench_config(R"(
topology: {peer: "peer.example:4000", iface: eth1, pmd: af_xdp, ip: 198.18.0.1,
           mac: "02:00:00:00:00:07", lcore: 3}
workloads: [{sizes: [8], mtu: 2048}]
)",
                                           "b.yaml");
  const Topology& t = c.topology;
  EXPECT_TRUE(t.remote());
  EXPECT_EQ(t.peer, "peer.example");
  EXPECT_EQ(t.peer_port, 4000);
  EXPECT_EQ(t.iface, "eth1");
  EXPECT_EQ(t.pmd, "af_xdp");
  EXPECT_EQ(t.ip, "198.18.0.1");
  EXPECT_EQ(t.mac, "02:00:00:00:00:07");
  EXPECT_EQ(t.lcore, 3u);
  EXPECT_EQ(t.netdev_mtu, 2048u + 128);  // what path MTU 2048 needs
  const BenchConfig d =
      parse_bench_config("topology: {peer: h, iface: e}\nworkloads: [{sizes: [8]}]\n", "b.yaml");
  EXPECT_EQ(d.topology.peer_port, 0);  // kBenchPeerPort
  EXPECT_EQ(d.topology.pmd, "af_packet");
  EXPECT_EQ(d.topology.netdev_mtu, 1500u);
  EXPECT_NE(
      to_json(d, Results{}).find(R"("topology":{"kind":"remote","peer":"h","peer_port":18520)"),
      std::string::npos);
  EXPECT_NE(to_json(memif, Results{}).find(R"("topology":{"kind":"memif"})"), std::string::npos);
  EXPECT_EQ(link_name(d), "af_packet on e to h");

  const std::string w = "\nworkloads: [{sizes: [8], mtu: 4096}]\n";
  const std::pair<const char*, const char*> bad[] = {
      {"topology: {iface: eth1}",
       "b.yaml:1:19: topology.iface belongs to a remote topology: give topology.peer too"},
      {"topology: {peer: h}",
       "b.yaml:1:11: topology.iface is missing: the interface of this host's DPDK port"},
      {"topology: {peer: \"h:x\", iface: e}",
       "b.yaml:1:18: topology.peer: 'x' is not a TCP port (1..65535)"},
      {"topology: {peer: \"h:70000\", iface: e}",
       "b.yaml:1:18: topology.peer: '70000' is not a TCP port (1..65535)"},
      {"topology: {peer: h, iface: e, pmd: pcap}",
       "b.yaml:1:36: topology.pmd must be af_packet, af_xdp or tap, not 'pcap'"},
      {"topology: {peer: h, iface: e, ip: 300.1.1.1}",
       "b.yaml:1:35: topology.ip: '300.1.1.1' is not an IPv4 address"},
      {"topology: {peer: h, iface: e, mac: zz}",
       "b.yaml:1:36: topology.mac: 'zz' is not a MAC address"},
      {"topology: {peer: h, iface: e, netdev_mtu: 1500}",
       "b.yaml:1:43: topology.netdev_mtu: 1500 is too small for path MTU 4096 (needs 4156)"},
      {"topology: {peer: h, iface: e, colour: red}",
       "b.yaml:1:31: unknown key 'colour' in topology"},
  };
  for (const auto& [yaml, error] : bad) EXPECT_EQ(error_of(yaml + w), error) << yaml;
}

TEST(BenchConfig, TargetsNameFileLineColumn) {
  const std::string ws =
      "workloads:\n  - {name: w, sizes: [8, 64]}\n  - {name: v, sizes: [64]}\n"
      "  - {name: l, mode: lat, sizes: [8]}\ntargets:\n";
  EXPECT_EQ(error_of(ws + "  - {workload: x, metric: bytes_vs_link, min: 1}\n"),
            "b.yaml:6:16: targets[0].workload: no workload is named 'x'");
  EXPECT_EQ(error_of(ws + "  - {workload: w, metric: speed, min: 1}\n"),
            "b.yaml:6:27: targets[0].metric must be bytes_vs_link, msgs_vs_link, p50_vs_l2_echo, "
            "bytes_vs_workload or msgs_vs_workload, not 'speed'");
  EXPECT_EQ(error_of(ws + "  - {workload: w, metric: bytes_vs_link, size: 9, min: 1}\n"),
            "b.yaml:6:48: targets[0].size: workload 'w' has no size 9");
  EXPECT_EQ(error_of(ws + "  - {workload: w, metric: bytes_vs_workload, min: 1}\n"),
            "b.yaml:6:5: targets[0].of is missing: bytes_vs_workload needs a reference workload");
  EXPECT_EQ(error_of(ws + "  - {workload: w, metric: bytes_vs_workload, of: v, min: 1}\n"),
            "b.yaml:6:50: targets[0].of: workload 'v' has no size 8");
  EXPECT_EQ(error_of(ws + "  - {workload: w, metric: p50_vs_l2_echo, max: 1}\n"),
            "b.yaml:6:27: targets[0].metric: p50_vs_l2_echo needs a workload in lat mode");
  EXPECT_EQ(error_of(ws + "  - {workload: w, metric: bytes_vs_link, min: 1, max: 2}\n"),
            "b.yaml:6:5: targets[0]: give min or max (one of them)");
  EXPECT_EQ(error_of(ws + "  - {workload: w, metric: bytes_vs_link, min: 1, by: 2}\n"),
            "b.yaml:6:50: unknown key 'by' in targets[0]");
}

TEST(BenchConfig, OnlyAndRepeatFromTheCommandLine) {
  BenchConfig c = parse_bench_config(
      "workloads:\n  - {name: one, sizes: [4096]}\n  - {name: many, qps: 100, sizes: [4096]}\n"
      "  - {name: lat, mode: lat, sizes: [8]}\n"
      "targets:\n"
      "  - {name: qps, workload: many, metric: bytes_vs_workload, of: one, min: 0.8}\n"
      "  - {name: echo, workload: lat, metric: p50_vs_l2_echo, max: 1.5}\n",
      "t.yaml");
  select_workloads(c, "many,one");
  ASSERT_EQ(c.workloads.size(), 2u);
  EXPECT_EQ(c.workloads[0].name, "one") << "in the file's order";
  ASSERT_EQ(c.targets.size(), 1u);
  EXPECT_EQ(c.targets[0].name, "qps");
  BenchConfig d = c;
  select_workloads(d, "many");
  EXPECT_TRUE(d.targets.empty()) << "its reference workload is not run";
  EXPECT_THROW(select_workloads(c, "one,nope"), BenchConfigError);
  EXPECT_THROW(select_workloads(c, ","), BenchConfigError);
  set_repeat(c, "5");
  EXPECT_EQ(c.workloads[1].repeat, 5u);
  EXPECT_THROW(set_repeat(c, "0"), BenchConfigError);
  EXPECT_THROW(set_repeat(c, "10"), BenchConfigError);
  EXPECT_THROW(set_repeat(c, "5x"), BenchConfigError);
}

TEST(BenchReport, TargetsAreEvaluatedAgainstBaselinesAndOtherWorkloads) {
  const BenchConfig c = parse_bench_config(
      "workloads:\n  - {name: one, sizes: [4096]}\n  - {name: many, qps: 100, sizes: [4096]}\n"
      "  - {name: lat, mode: lat, sizes: [8]}\n"
      "targets:\n"
      "  - {name: link, workload: one, metric: bytes_vs_link, min: 0.9}\n"
      "  - {name: qps, workload: many, metric: bytes_vs_workload, of: one, min: 0.8}\n"
      "  - {name: echo, workload: lat, metric: p50_vs_l2_echo, max: 1.5}\n",
      "t.yaml");
  Results r;
  Point link;  // MTU 1024: a 4 KiB message's frames carry 1024 bytes
  link.kind = Kind::kL2Blast;
  link.size = 1024;
  link.bytes_per_s = 2000e6;
  link.c2c_ns = 60;
  r.points.push_back(link);
  Point one;
  one.workload = 0;
  one.size = 4096;
  one.bytes_per_s = 1900e6;
  one.c2c_ns = 100;  // within twice the baseline's: the same placement of the cores
  r.points.push_back(one);
  Point many = one;
  many.workload = 1;
  many.bytes_per_s = 1000e6;
  many.c2c_ns = 320;  // more than twice the reference's: the cores moved in between
  r.points.push_back(many);
  Point lat;
  lat.workload = 2;
  lat.size = 8;
  lat.lat_p50 = 2000;
  r.points.push_back(lat);
  {  // a blast measured right before row `one` (baselines.adjacent) is that row's reference
    Results adj = r;
    Point near = link;
    near.for_workload = 0;
    near.for_size = 4096;
    near.bytes_per_s = 3800e6;
    adj.points.push_back(near);
    EXPECT_EQ(adj.find(Kind::kL2Blast, 1024)->bytes_per_s, 2000e6) << "the run's own";
    EXPECT_EQ(adj.link_for(Kind::kL2Blast, one, 1024)->bytes_per_s, 3800e6);
    EXPECT_EQ(adj.link_for(Kind::kL2Blast, many, 1024)->bytes_per_s, 2000e6);
    const auto ta = evaluate_targets(c, adj);
    ASSERT_TRUE(ta[0].value);
    EXPECT_DOUBLE_EQ(*ta[0].value, 0.5);
    EXPECT_FALSE(ta[1].link_normalized) << "`many` has no link baseline of its own";
    Point near_many = near;  // the link was at half the rate when `many` ran
    near_many.for_workload = 1;
    near_many.msgs_per_s = 1e6;
    adj.points.push_back(near_many);
    adj.points.back().bytes_per_s = 1900e6;
    Point& n0 = adj.points[adj.points.size() - 2];
    n0.msgs_per_s = 2e6;
    const auto tb = evaluate_targets(c, adj);
    ASSERT_TRUE(tb[1].value);
    EXPECT_TRUE(tb[1].link_normalized);
    EXPECT_NEAR(*tb[1].value, (1000.0 / 1e6) / (1900.0 / 2e6), 1e-12)
        << "each row against its own link: (1000/1) / (1900/2)";
    EXPECT_NE(to_json(c, adj).find(R"("for_workload":"one","for_bytes":4096)"), std::string::npos);
  }
  const auto t = evaluate_targets(c, r);
  ASSERT_EQ(t.size(), 3u);
  ASSERT_TRUE(t[0].value);
  EXPECT_DOUBLE_EQ(*t[0].value, 0.95);
  EXPECT_TRUE(t[0].met);
  EXPECT_FALSE(t[0].cores_moved);
  EXPECT_TRUE(t[1].cores_moved);
  EXPECT_EQ(t[1].c2c_row, 320);
  EXPECT_EQ(t[1].c2c_ref, 100);
  ASSERT_TRUE(t[1].value);
  EXPECT_NEAR(*t[1].value, 1000.0 / 1900.0, 1e-12);
  EXPECT_FALSE(t[1].met);
  EXPECT_FALSE(t[2].value) << "no L2 echo was measured";
  EXPECT_FALSE(t[2].met);
  const std::string j = to_json(c, r);
  EXPECT_NE(j.find("\"name\":\"qps\",\"workload\":\"many\",\"bytes\":4096,"
                   "\"metric\":\"bytes_vs_workload\",\"of\":\"one\",\"min\":0.8,"
                   "\"value\":0.526315789,\"met\":false,"
                   "\"c2c_ns\":{\"row\":320,\"reference\":100},\"cores_moved\":true"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"value\":null,\"met\":false"), std::string::npos);
  EXPECT_NE(j.find("\"c2c_ns\":320"), std::string::npos) << "the row's own figure";
  char buf[4096] = {};
  std::FILE* f = fmemopen(buf, sizeof buf - 1, "w");
  print_targets(f, t);
  std::fclose(f);
  EXPECT_NE(std::string(buf).find("MISSED (cores moved: c2c 320 ns, reference 100 ns)"),
            std::string::npos)
      << buf;
  {  // a row measured 5 times: the median run's value and the range of the runs' ratios
    Results rr = r;
    Point& m = rr.points[2];
    m.runs = 5;
    m.key_lo = 0.4;
    m.key_med = 0.5;
    m.key_hi = 0.6;
    const auto tr = evaluate_targets(c, rr);
    ASSERT_TRUE(tr[1].lo && tr[1].hi);
    EXPECT_NEAR(*tr[1].lo, 0.8 * 1000.0 / 1900.0, 1e-12);
    EXPECT_NEAR(*tr[1].hi, 1.2 * 1000.0 / 1900.0, 1e-12);
    EXPECT_FALSE(tr[0].lo) << "one run: no range";
    char b2[4096] = {};
    std::FILE* f2 = fmemopen(b2, sizeof b2 - 1, "w");
    print_targets(f2, tr);
    std::fclose(f2);
    EXPECT_NE(std::string(b2).find("0.526      5: 0.421-0.632"), std::string::npos) << b2;
    EXPECT_NE(to_json(c, rr).find(R"("runs":5,"range":{"min":0.421052632,"max":0.631578947}})"),
              std::string::npos)
        << to_json(c, rr);
  }
}

// The loss line under a row: the multiple of the lost bytes sent again, or on a lossless row
// (retransmissions from timeouts or probes alone) "nothing lost", never "(0.00x)" (review 20
// finding 12).
TEST(BenchReport, LossLineSaysNothingLostOnALosslessRow) {
  const BenchConfig c = parse_bench_config(
      "name: r\nworkloads:\n  - {name: w, operation: write, sizes: [65536]}\n", "r.yaml");
  const auto row = [&](std::uint64_t lost, std::uint64_t resent) {
    Point p;
    p.kind = Kind::kOurs;
    p.size = 65536;
    p.iterations = 10;
    p.lost_bytes = lost;
    p.retransmitted_bytes = resent;
    char* buf = nullptr;
    std::size_t len = 0;
    std::FILE* f = open_memstream(&buf, &len);
    print_row(f, c.workloads[0], p, Results{});
    std::fclose(f);
    std::string out(buf, len);
    std::free(buf);
    return out;
  };
  const std::string lossless = row(0, 835'584);
  EXPECT_NE(lossless.find("go-back-N: nothing lost, retransmitted 835584 B (timeouts and probes, "
                          "no loss)"),
            std::string::npos)
      << lossless;
  EXPECT_EQ(lossless.find("0.00x"), std::string::npos);
  const std::string lossy = row(40'960, 61'440);
  EXPECT_NE(lossy.find("lost 40960 B (A's dropped requests), retransmitted 61440 B (1.50x)"),
            std::string::npos)
      << lossy;
  EXPECT_EQ(row(0, 0).find("retransmitted"), std::string::npos) << "no line without either";
}

TEST(BenchReport, JsonAndSvgCarryEveryFigure) {
  const BenchConfig c = parse_bench_config(
      "name: r\nworkloads:\n  - {name: w, operation: write, sizes: [64, 4096]}\n"
      "  - {name: l, operation: read, mode: lat, sizes: [8]}\n",
      "r.yaml");
  Results r;
  r.tsc_hz = 2.3e9;
  Point link;
  link.kind = Kind::kL2Blast;
  link.size = 64;
  link.frame = 122;
  link.bytes_per_s = 200e6;
  link.msgs_per_s = 3.125e6;
  r.points.push_back(link);
  Point w;
  w.kind = Kind::kOurs;
  w.workload = 0;
  w.size = 64;
  w.iterations = 1000;
  w.seconds = 0.01;
  w.bytes_per_s = 100e6;
  w.msgs_per_s = 1.5625e6;
  r.points.push_back(w);
  Point l;
  l.kind = Kind::kOurs;
  l.workload = 1;
  l.size = 8;
  std::vector<double> ns;
  for (int i = 1; i <= 1000; ++i) ns.push_back(i);
  summarize_latency(ns, l);
  EXPECT_EQ(l.lat_p50, 500);
  EXPECT_EQ(l.lat_p99, 990);
  EXPECT_EQ(l.lat_p999, 999);
  EXPECT_EQ(l.lat_max, 1000);
  r.points.push_back(l);
  const std::string j = to_json(c, r);
  for (const char* f :
       {"\"config_text\":", "\"tsc_hz\":", "\"bytes_vs_link\":0.5",
        "\"p99_9\":", "\"kind\":\"l2_blast\"", "\"frame_bytes\":122", "\"retransmitted_packets\""})
    EXPECT_NE(j.find(f), std::string::npos) << f;
  const std::string s = to_svg(c, r);
  EXPECT_EQ(s.rfind("<?xml", 0), 0u);
  EXPECT_NE(s.find("</svg>"), std::string::npos);
  EXPECT_NE(s.find("l 8B p99.9"), std::string::npos);  // the latency row as percentile bars
  EXPECT_NE(s.find("link ceiling (L2 blast)"), std::string::npos);
}

}  // namespace
}  // namespace roce::bench
