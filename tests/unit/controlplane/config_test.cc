#include "controlplane/config.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

namespace roce::ctl {
namespace {

const char* kGood = R"(name: t
eal:
  args: [--no-huge]
  lcores: [0, 1]
ports:
  - name: p0
    device: net_ring0
    mac: 02:00:00:00:00:01
    ipv4: 192.0.2.1/24
    ipv6: 2001:db8::1/64
    mtu: 9000
    vlan: 7
    zero_copy: false
    zero_copy_min: 1024
    fault: {drop: 0.01, reorder: 0.1, reorder_window: 3, seed: 5}
limits: {max_qps: 100, neighbours: 1024, cm_connections: 64}
transport: {ack_req_every: 16, selective_repeat: true, sr_bdp_cap: 32768}
logging: {level: debug}
counters: {prometheus: "127.0.0.1:9464", telemetry: false}
)";

TEST(Config, ParsesEveryField) {
  const ApplianceConfig c = parse_config(kGood, "good.yaml");
  EXPECT_EQ(c.name, "t");
  EXPECT_EQ(c.eal_args, std::vector<std::string>{"--no-huge"});
  EXPECT_EQ(c.lcores, (std::vector<unsigned>{0, 1}));
  ASSERT_EQ(c.ports.size(), 1u);
  const PortConfig& p = c.ports[0];
  EXPECT_EQ(p.device, "net_ring0");
  EXPECT_EQ(p.mac.b[5], 1);
  EXPECT_EQ(p.ipv4.v, 0xC0000201u);
  EXPECT_EQ(p.ipv4_prefix, 24);
  ASSERT_TRUE(p.ipv6);
  EXPECT_EQ(p.ipv6_prefix, 64);
  EXPECT_EQ(p.mtu, 9000);
  EXPECT_EQ(p.vlan, std::optional<std::uint16_t>(7));
  EXPECT_FALSE(p.zero_copy);
  EXPECT_EQ(p.zero_copy_min, 1024u);
  EXPECT_DOUBLE_EQ(p.fault.drop_rate, 0.01);
  EXPECT_EQ(p.fault.reorder_window, 3u);
  EXPECT_EQ(p.fault.seed, 5u);
  EXPECT_EQ(c.limits.max_qps, 100u);
  EXPECT_EQ(c.limits.neighbours, 1024u);
  EXPECT_EQ(c.limits.cm_connections, 64u);
  EXPECT_EQ(c.limits.cq_depth, 4096u) << "defaults stay where nothing was said";
  EXPECT_EQ(c.transport.ack_req_every, 16u);
  EXPECT_TRUE(c.transport.selective_repeat);
  EXPECT_FALSE(ApplianceConfig{}.transport.selective_repeat) << "go-back-N unless asked";
  EXPECT_EQ(c.transport.sr_bdp_cap, 32768u);
  EXPECT_EQ(ApplianceConfig{}.transport.sr_bdp_cap, 0u) << "the cap is off unless asked";
  EXPECT_EQ(parse_config(std::string(kGood).replace(std::string(kGood).find("32768"), 5, "auto"),
                         "auto.yaml")
                .transport.sr_bdp_cap,
            ~std::uint64_t{0});
  EXPECT_EQ(c.logging.level, "debug");
  EXPECT_FALSE(c.counters.telemetry);
}

// The kinds of service these tests may name, as the service registry (runtime/service.h) would
// hand them to the reader: a few of roce-perf's tests, and one with keys of its own.
const ServiceKinds kKinds = {{"write_bw", {}, 18515},
                             {"read_bw", {}, 18515},
                             {"rc_pingpong", {}, 18515},
                             {"send_lat", {}, 18515},
                             {"echo", {"max_connections", "message_size"}, 7471},
                             {"pair", {}, 5010, 2}};  // listens on listen_port and the next

std::string error_of(const std::string& yaml) {
  try {
    parse_config(yaml, "bad.yaml", kKinds);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Config, CongestionDefaultsAndEveryKey) {
  const std::string base =
      "ports:\n  - name: p0\n    device: x\n    mac: 02:00:00:00:00:01\n    ipv4: 192.0.2.1/24\n";
  const engine::cc::CongestionConfig d = parse_config(base, "d.yaml").ports[0].congestion;
  EXPECT_EQ(d.algorithm, engine::cc::Algorithm::kNone) << "no rate control unless asked";
  EXPECT_EQ(d.ecn, engine::cc::Ecn::kAuto);
  EXPECT_FALSE(d.ect_on()) << "Not-ECT without an algorithm that reacts (review finding 8)";
  EXPECT_EQ(d.dcqcn.max_rate_mbps, 0u) << "0: the line rate, as mlx5";
  EXPECT_EQ(d.delay.max_rate_mbps, 0u);
  EXPECT_TRUE(parse_config(base + "    congestion: {algorithm: dcqcn}\n", "e.yaml")
                  .ports[0]
                  .congestion.ect_on());
  const auto on =
      parse_config(base + "    congestion: {ecn: true}\n", "o.yaml").ports[0].congestion;
  EXPECT_EQ(on.ecn, engine::cc::Ecn::kOn);
  EXPECT_TRUE(on.ect_on()) << "asked for explicitly (roced warns)";
  EXPECT_EQ(parse_config(base + "    congestion: {dcqcn: {rpg_max_rate_mbps: 0}}\n", "z.yaml")
                .ports[0]
                .congestion.dcqcn.max_rate_mbps,
            0u)
      << "0 accepted as the line rate";
  EXPECT_TRUE(d.cnp);
  EXPECT_EQ(d.cnp_interval_ns, 4000u);
  EXPECT_EQ(d.cnp_dscp, 48);
  const std::string yaml = base +
                           "    congestion:\n"
                           "      algorithm: dcqcn\n"
                           "      ecn: false\n"
                           "      cnp: false\n"
                           "      min_time_between_cnps_us: 50\n"
                           "      cnp_dscp: 26\n"
                           "      burst_bytes: 8192\n"
                           "      dcqcn: {rpg_max_rate_mbps: 25000, rpg_min_rate_mbps: 10, "
                           "rpg_ai_rate_mbps: 40, rpg_hai_rate_mbps: 400, dce_tcp_g: 1020, "
                           "initial_alpha_value: 512, dce_tcp_rtt_us: 50, rpg_time_reset_us: 100, "
                           "rpg_byte_reset: 65536, rpg_threshold: 3, "
                           "rate_reduce_monitor_period_us: 8, rpg_min_dec_fac: 20, rpg_gd: 12, "
                           "rate_to_set_on_first_cnp_mbps: 3000, clamp_tgt_rate: false, "
                           "clamp_tgt_rate_after_time_inc: false}\n"
                           "      delay: {max_rate_mbps: 9000, min_rate_mbps: 20, target_us: 30, "
                           "ai_rate_mbps: 50, beta_pct: 70, max_decrease_pct: 40}\n";
  const engine::cc::CongestionConfig k = parse_config(yaml, "k.yaml").ports[0].congestion;
  EXPECT_EQ(k.algorithm, engine::cc::Algorithm::kDcqcn);
  EXPECT_EQ(k.ecn, engine::cc::Ecn::kOff);
  EXPECT_FALSE(k.ect_on());
  EXPECT_FALSE(k.cnp);
  EXPECT_EQ(k.cnp_interval_ns, 50'000u);
  EXPECT_EQ(k.cnp_dscp, 26);
  EXPECT_EQ(k.burst_bytes, 8192u);
  EXPECT_EQ(k.dcqcn.max_rate_mbps, 25'000u);
  EXPECT_EQ(k.dcqcn.min_rate_mbps, 10u);
  EXPECT_EQ(k.dcqcn.ai_rate_mbps, 40u);
  EXPECT_EQ(k.dcqcn.hai_rate_mbps, 400u);
  EXPECT_EQ(k.dcqcn.alpha_g, 1020u);
  EXPECT_EQ(k.dcqcn.initial_alpha, 512u);
  EXPECT_EQ(k.dcqcn.alpha_update_period_us, 50u);
  EXPECT_EQ(k.dcqcn.rate_increase_period_us, 100u);
  EXPECT_EQ(k.dcqcn.byte_counter, 65536u);
  EXPECT_EQ(k.dcqcn.threshold, 3u);
  EXPECT_EQ(k.dcqcn.rate_reduce_monitor_period_us, 8u);
  EXPECT_EQ(k.dcqcn.min_dec_factor_pct, 20u);
  EXPECT_EQ(k.dcqcn.gd_log2, 12u);
  EXPECT_EQ(k.dcqcn.first_cnp_rate_mbps, 3000u);
  EXPECT_FALSE(k.dcqcn.clamp_target);
  EXPECT_FALSE(k.dcqcn.clamp_target_after_time_inc);
  // The defaults keep the paper's cut: rpg_gd 11 (alpha/2), no first-CNP rate, RT <- RC at
  // every cut (ConnectX's own default clamps only after an increase event).
  EXPECT_EQ(d.dcqcn.gd_log2, 11u);
  EXPECT_EQ(d.dcqcn.first_cnp_rate_mbps, 0u);
  EXPECT_TRUE(d.dcqcn.clamp_target);
  EXPECT_TRUE(d.dcqcn.clamp_target_after_time_inc);
  EXPECT_EQ(k.delay.max_rate_mbps, 9000u);
  EXPECT_EQ(k.delay.min_rate_mbps, 20u);
  EXPECT_EQ(k.delay.target_us, 30u);
  EXPECT_EQ(k.delay.ai_rate_mbps, 50u);
  EXPECT_EQ(k.delay.beta_pct, 70u);
  EXPECT_EQ(k.delay.max_decrease_pct, 40u);
  EXPECT_EQ(parse_config(base + "    congestion: {algorithm: delay}\n", "x.yaml")
                .ports[0]
                .congestion.algorithm,
            engine::cc::Algorithm::kDelay);
  // A mapping for an algorithm the port does not run is named, for roced's warning (review 20):
  // `dcqcn:` without `algorithm: dcqcn` is no DCQCN at all.
  EXPECT_EQ(parse_config(yaml, "k.yaml").ports[0].congestion_unused,
            std::vector<std::string>{"delay"});
  EXPECT_EQ(parse_config(base + "    congestion: {dcqcn: {rpg_time_reset_us: 300}}\n", "u.yaml")
                .ports[0]
                .congestion_unused,
            std::vector<std::string>{"dcqcn"});
  EXPECT_TRUE(
      parse_config(base + "    congestion: {algorithm: delay, delay: {target_us: 20}}\n", "v.yaml")
          .ports[0]
          .congestion_unused.empty());
}

TEST(Config, ErrorsNameFileLineAndKey) {
  const std::string base =
      "ports:\n  - name: p0\n    device: x\n    mac: 02:00:00:00:00:01\n    ipv4: 192.0.2.1/24\n";
  struct Case {
    std::string yaml, expect;
  } cases[] = {
      {base + "limitz: {max_qps: 1}\n", "bad.yaml:6:1: unknown key 'limitz' in config"},
      {base + "transport: {sr_bdp_cap: fast}\n",
       "bad.yaml:6:25: transport.sr_bdp_cap must be auto, off or bytes (4096-4294967296), not "
       "'fast'"},
      {base + "transport: {sr_bdp_cap: 100}\n",
       "transport.sr_bdp_cap = 100 is out of range [4096, 4294967296]"},
      {base + "transport: {sr_bdp_cap: -1}\n", "transport.sr_bdp_cap must be auto, off or bytes"},
      {base + "    mtuu: 1500\n", "bad.yaml:6:5: unknown key 'mtuu' in ports[0]"},
      {base + "    mtu: 100\n", "bad.yaml:6:10: ports[0].mtu = 100 is out of range [576, 9216]"},
      {base + "    mtu: big\n",
       "bad.yaml:6:10: ports[0].mtu must be an unsigned integer, not 'big'"},
      {base + "    mtu: -5\n", "must be an unsigned integer, not '-5'"},
      {base + "    vlan: 4095\n", "ports[0].vlan = 4095 is out of range [1, 4094]"},
      {base + "    zero_copy: maybe\n", "ports[0].zero_copy"},
      {base + "    zero_copy_min: 0\n", "ports[0].zero_copy_min = 0 is out of range [1, 9216]"},
      {base + "    fault: {drop: 2}\n", "ports[0].fault.drop is out of range [0, 1]"},
      {base + "    fault: {droop: 0.1}\n", "unknown key 'droop' in ports[0].fault"},
      {base + "    congestion: {algorithm: timely}\n",
       "ports[0].congestion.algorithm: 'timely' is not an algorithm (none, dcqcn, delay)"},
      {base + "    congestion: {algo: dcqcn}\n", "unknown key 'algo' in ports[0].congestion"},
      {base + "    congestion: {dcqcn: {dce_tcp_g: 1024}}\n",
       "ports[0].congestion.dcqcn.dce_tcp_g = 1024 is out of range [0, 1023]"},
      {base + "    congestion: {dcqcn: {rpg_max_rate_mbps: 100, rpg_min_rate_mbps: 200}}\n",
       "rpg_min_rate_mbps = 200 is out of range [1, 100]"},
      {base + "    congestion: {delay: {beta: 1}}\n",
       "unknown key 'beta' in ports[0].congestion.delay"},
      {base + "    congestion: {cnp_dscp: 64}\n", "cnp_dscp = 64 is out of range [0, 63]"},
      // ConnectX's spellings (sysfs, mlxconfig, debugfs) get our key named (review 18 #11)
      {base + "    congestion: {dcqcn: {rpg_time_reset: 300}}\n",
       "unknown key 'rpg_time_reset' in ports[0].congestion.dcqcn: did you mean "
       "rpg_time_reset_us (microseconds; ConnectX's rpg_time_reset)?"},
      {base + "    congestion: {dcqcn: {RPG_AI_RATE_P1: 5}}\n",
       "did you mean rpg_ai_rate_mbps (Mb/s; ConnectX's rpg_ai_rate)?"},
      {base + "    congestion: {min_time_between_cnps: 4}\n",
       "did you mean min_time_between_cnps_us (microseconds"},
      {base + "    congestion: {dcqcn: {np_min_time_between_cnps: 4}}\n",
       "did you mean congestion.min_time_between_cnps_us"},
      {base + "    congestion: {cnp_802p_prio: 3}\n",
       "ConnectX's cnp_802p_prio has no key here: nothing we send has a VLAN priority"},
      // mlx5's RP knobs implemented in session 21: ConnectX's spelling names ours
      {base + "    congestion: {dcqcn: {RATE_TO_SET_ON_FIRST_CNP_P1: 100}}\n",
       "did you mean rate_to_set_on_first_cnp_mbps (Mb/s; ConnectX's rate_to_set_on_first_cnp)?"},
      {base + "    congestion: {rpg_gd: 11}\n", "did you mean congestion.dcqcn.rpg_gd"},
      {base + "    congestion: {dcqcn: {rpg_gd: 0}}\n",
       "ports[0].congestion.dcqcn.rpg_gd = 0 is out of range [1, 15]"},
      {base + "    congestion: {dcqcn: {clamp_tgt_rate: 2}}\n",
       "ports[0].congestion.dcqcn.clamp_tgt_rate"},
      // Review 22: mlx5's 1/0 for the two bits, told what to write; debugfs's short spelling
      // of the second bit and its CNP priority knobs named; a first-CNP rate at or above the
      // maximum (never a cut) refused.
      {base + "    congestion: {dcqcn: {clamp_tgt_rate: 1}}\n",
       "ports[0].congestion.dcqcn.clamp_tgt_rate must be true or false, not '1' (ConnectX's 1 is "
       "true, 0 false)"},
      {base + "    congestion: {dcqcn: {clamp_tgt_rate_after_time_inc: 0}}\n",
       "clamp_tgt_rate_after_time_inc must be true or false, not '0' (ConnectX's 1"},
      {base + "    congestion: {dcqcn: {rp_clamp_tgt_rate_ati: 1}}\n",
       "unknown key 'rp_clamp_tgt_rate_ati' in ports[0].congestion.dcqcn: did you mean "
       "clamp_tgt_rate_after_time_inc (true or false"},
      {base + "    congestion: {np_cnp_prio: 6}\n",
       "unknown key 'np_cnp_prio' in ports[0].congestion: ConnectX's cnp_prio has no key here"},
      {base + "    congestion: {np_cnp_prio_mode: 1}\n",
       "ConnectX's cnp_prio_mode has no key here"},
      {base + "    congestion: {dcqcn: {rpg_max_rate_mbps: 1000, rate_to_set_on_first_cnp_mbps: "
              "1000}}\n",
       "ports[0].congestion.dcqcn.rate_to_set_on_first_cnp_mbps = 1000 is not below "
       "rpg_max_rate_mbps 1000: a QP at its maximum would be set to the maximum on every CNP"},
      // Our own key in the other mapping names where it goes (review 20)
      {base + "    congestion: {algorithm: dcqcn, rpg_ai_rate_mbps: 5}\n",
       "unknown key 'rpg_ai_rate_mbps' in ports[0].congestion: did you mean "
       "congestion.dcqcn.rpg_ai_rate_mbps (Mb/s; ConnectX's rpg_ai_rate)?"},
      {base + "    congestion: {dcqcn: {min_time_between_cnps_us: 50}}\n",
       "unknown key 'min_time_between_cnps_us' in ports[0].congestion.dcqcn: did you mean "
       "congestion.min_time_between_cnps_us"},
      {base + "    congestion: {dcqcn: {rpg_ai_rate_mbps: 0}}\n",
       "bad.yaml:6:44: ports[0].congestion.dcqcn.rpg_ai_rate_mbps = 0: a QP's rate would never "
       "recover from a cut (the rate-increase timer would never end); at least 1"},
      {base + "    congestion: {delay: {ai_rate_mbps: 0}}\n",
       "ports[0].congestion.delay.ai_rate_mbps = 0: a QP's rate would never recover from a cut"},
      {base + "    congestion: {dcqcn: {rpg_hai_rate_mbps: 0}}\n",
       "ports[0].congestion.dcqcn.rpg_hai_rate_mbps = 0: a QP's rate would never recover"},
      {base + "logging: {level: loud}\n",
       "logging.level must be one of error, warning, info, debug"},
      {base + "  - name: p0\n    device: y\n    mac: 02:00:00:00:00:02\n    ipv4: 192.0.2.2\n",
       "port name 'p0' is used twice"},
      {"ports:\n  - name: p0\n    device: x\n    mac: 02:00:00:00:00\n    ipv4: 192.0.2.1\n",
       "bad.yaml:4:10: ports[0].mac: '02:00:00:00:00' is not a MAC address"},
      {"ports:\n  - name: p0\n    device: x\n    mac: 02:00:00:00:00:01\n    ipv4: 192.0.2.1/33\n",
       "bad prefix length in '192.0.2.1/33'"},
      // stoul threw out_of_range past 20 digits (the fuzzer's find); a 32-bit wrap made 2^32+24
      // pass
      {"ports:\n  - name: p0\n    device: x\n    mac: 02:00:00:00:00:01\n    ipv4: "
       "192.0.2.1/158888888888888888888888888\n",
       "bad prefix length in '192.0.2.1/158888888888888888888888888'"},
      {"ports:\n  - name: p0\n    device: x\n    mac: 02:00:00:00:00:01\n    ipv4: "
       "192.0.2.1/4294967320\n",
       "bad prefix length in '192.0.2.1/4294967320'"},
      {"ports:\n  - name: p0\n    device: x\n    mac: 02:00:00:00:00:01\n",
       "ports[0]: 'ipv4' is required"},
      {"ports: []\n", "'ports' must be a non-empty list"},
      {"name: x\n", "at least one port is required"},
      {"ports: [\n", "bad.yaml:2:1: YAML syntax error"},
      {"- just\n- a list\n", "the configuration must be a YAML mapping"},
      {base + "eal: {lcores: [zero]}\n", "eal.lcores: 'zero' is not a core number"},
      {base + "services:\n  - test: write_bandwidth\n",
       "bad.yaml:7:11: services[0].test 'write_bandwidth' is not a kind of service (write_bw, "
       "read_bw, rc_pingpong, send_lat, echo, pair)"},
      {base + "services:\n  - test: write_bw\n    port: p9\n",
       "bad.yaml:8:11: services[0].port 'p9' is not a port"},
      {base + "services:\n  - {test: write_bw}\n  - {test: read_bw}\n",
       "services[1].listen_port 18515 is used twice"},
      // A port nobody wrote: the kind's default, and the way out named.
      {base + "services:\n  - {kind: write_bw}\n  - {kind: read_bw}\n",
       "services[1].listen_port 18515 is used twice (read_bw's default; give each service its "
       "own listen_port)"},
      {base + "services:\n  - {test: write_bw, args: -n}\n", "services[0].args must be a list"},
      {base + "services:\n  - {port: p0}\n", "services[0].kind is required"},
      {base + "services:\n  - {kind: echo, test: echo}\n", "kind and test name the same thing"},
      {base + "services:\n  - {kind: echo, mesage_size: 64}\n",
       "bad.yaml:7:18: unknown key 'mesage_size' in services[0] (echo takes max_connections, "
       "message_size; every service: kind, port, listen_port, listen_address, args)"},
      {base + "services:\n  - {kind: write_bw, message_size: 64}\n",
       "unknown key 'message_size' in services[0] (write_bw takes no keys of its own"},
      {base + "services:\n  - {kind: echo, message_size: {a: 1}}\n",
       "services[0].message_size must be a scalar or a list of scalars"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(c.yaml);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "got: " << e << "\nwanted: " << c.expect;
  }
}

TEST(Config, Services) {
  const auto c = parse_config(std::string(kGood) +
                                  "services:\n  - {test: write_bw, args: [-n, '100']}\n"
                                  "  - {test: rc_pingpong, port: p0, listen_port: 18600}\n",
                              "good.yaml", kKinds);
  ASSERT_EQ(c.services.size(), 2u);
  EXPECT_EQ(c.services[0].kind, "write_bw");
  EXPECT_EQ(c.services[0].port, "p0");
  EXPECT_EQ(c.services[0].listen_port, 18515);
  EXPECT_EQ(c.services[0].args, (std::vector<std::string>{"-n", "100"}));
  EXPECT_EQ(c.services[1].listen_port, 18600);
  EXPECT_EQ(c.services[0].listen_address, wire::Ipv4Addr{0x7F000001})
      << "the management address (control.listen's), not every address";
}

TEST(Config, ServiceKindsOwnKeys) {
  const auto c = parse_config(std::string(kGood) +
                                  "services:\n  - kind: echo\n    message_size: 256\n"
                                  "  - {kind: echo, listen_port: 7472, max_connections: [1, 2]}\n",
                              "good.yaml", kKinds);
  ASSERT_EQ(c.services.size(), 2u);
  EXPECT_EQ(c.services[0].kind, "echo");
  EXPECT_EQ(c.services[0].listen_port, 7471) << "the kind's default port";
  EXPECT_EQ(c.services[0].option_uint("message_size", 4096, 64, 65536), 256u);
  EXPECT_EQ(c.services[0].option_uint("max_connections", 16, 1, 1024), 16u) << "unset: default";
  try {
    c.services[0].option_uint("message_size", 4096, 1024, 65536);
    ADD_FAILURE() << "no range error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "good.yaml:22:19: services[0].message_size = 256 is out of range [1024, 65536]");
  }
  EXPECT_EQ(c.services[1].option_list("max_connections"), (std::vector<std::string>{"1", "2"}));
  EXPECT_THROW(c.services[1].option_uint("max_connections", 16, 1, 1024), ConfigError)
      << "a list where one value is wanted";
  EXPECT_NE(error_of(std::string(kGood) + "services:\n  - {kind: echo}\n  - {kind: echo}\n")
                .find("services[1].listen_port 7471 is used twice"),
            std::string::npos);
  // A kind that takes two ports (NetFR's primary and secondary channels) holds both.
  const std::string second = error_of(
      std::string(kGood) + "services:\n  - {kind: pair}\n  - {kind: echo, listen_port: 5011}\n");
  EXPECT_NE(second.find("services[1].listen_port 5011 is taken by services[0] (pair: 5010-5011)"),
            std::string::npos)
      << second;
  EXPECT_NE(error_of(std::string(kGood) + "services:\n  - {kind: pair, listen_port: 65535}\n")
                .find("services[0].listen_port 65535: pair takes 2 ports from it, beyond 65535"),
            std::string::npos);
  EXPECT_EQ(parse_config(std::string(kGood) +
                             "services:\n  - {kind: pair}\n  - {kind: echo, listen_port: 5012}\n",
                         "good.yaml", kKinds)
                .services.size(),
            2u);
  // Given explicitly, the port is the writer's: no word of a default.
  const std::string given =
      error_of(std::string(kGood) +
               "services:\n  - {kind: write_bw}\n  - {kind: echo, listen_port: 18515}\n");
  EXPECT_NE(given.find("services[1].listen_port 18515 is used twice"), std::string::npos) << given;
  EXPECT_EQ(given.find("default"), std::string::npos) << given;
  // A reader given no kinds hosts none.
  try {
    parse_config(std::string(kGood) + "services:\n  - {kind: echo}\n", "t.yaml");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("this program hosts none"), std::string::npos) << e.what();
  }
}

TEST(Config, ServicesListenOnTheManagementAddress) {
  const auto c =
      parse_config(std::string(kGood) +
                       "control: {listen: '192.0.2.11:18500'}\n"
                       "services:\n  - {test: write_bw}\n"
                       "  - {test: read_bw, listen_port: 18600, listen_address: 0.0.0.0}\n",
                   "good.yaml", kKinds);
  EXPECT_EQ(c.services[0].listen_address, wire::Ipv4Addr{0xC000020B});
  EXPECT_EQ(c.services[1].listen_address, wire::Ipv4Addr{0});
  EXPECT_NE(error_of(std::string(kGood) + "services:\n  - {test: write_bw, listen_address: x}\n")
                .find("services[0].listen_address 'x' is not an IPv4 address"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kGood) + "control: {listen: 'nowhere'}\n")
                .find("control.listen 'nowhere' is not IPV4:PORT"),
            std::string::npos);
}

TEST(Config, Attach) {
  EXPECT_TRUE(parse_config(kGood, "good.yaml").attach.socket.empty()) << "off unless configured";
  const auto c = parse_config(std::string(kGood) +
                                  "attach:\n  socket: /run/roce/r.sock\n  mode: \"0600\"\n"
                                  "  quotas: {max_qps: 8, max_memory: 65536}\n",
                              "good.yaml");
  EXPECT_EQ(c.attach.socket, "/run/roce/r.sock");
  EXPECT_EQ(c.attach.mode, 0600u);
  EXPECT_EQ(c.attach.max_qps, 8u);
  EXPECT_EQ(c.attach.max_mrs, 1024u) << "defaults stay where nothing was said";
  EXPECT_EQ(c.attach.max_memory, 65536u);
  const std::string base = std::string(kGood) + "attach:\n";
  EXPECT_NE(error_of(base + "  mode: \"0660\"\n").find("attach.socket is required"),
            std::string::npos);
  EXPECT_NE(error_of(base + "  socket: /s\n  mode: \"0680\"\n").find("octal file mode"),
            std::string::npos);
  EXPECT_NE(error_of(base + "  socket: /s\n  quotas: {max_qps: 0}\n").find("max_qps"),
            std::string::npos);
  EXPECT_NE(error_of(base + "  socket: /s\n  qoutas: {}\n").find("unknown key 'qoutas'"),
            std::string::npos);
}

TEST(Config, AttachLimits) {
  const auto d = parse_config(std::string(kGood) + "attach:\n  socket: /s\n", "good.yaml");
  EXPECT_EQ(d.attach.max_regions, 128u);
  EXPECT_EQ(d.attach.max_qp_wr, 16384u);
  EXPECT_EQ(d.attach.max_srq_wr, 16384u);
  EXPECT_EQ(d.attach.max_cqe, 65536u);
  EXPECT_EQ(d.attach.max_inline_data, 512u) << "as rxe";
  const auto c = parse_config(std::string(kGood) +
                                  "attach:\n  socket: /s\n  quotas: {max_regions: 16, "
                                  "max_qp_wr: 1024, max_srq_wr: 512, max_cqe: 2048, "
                                  "max_inline_data: 0}\n",
                              "good.yaml");
  EXPECT_EQ(c.attach.max_regions, 16u);
  EXPECT_EQ(c.attach.max_qp_wr, 1024u);
  EXPECT_EQ(c.attach.max_srq_wr, 512u);
  EXPECT_EQ(c.attach.max_cqe, 2048u);
  EXPECT_EQ(c.attach.max_inline_data, 0u);
  const std::string base = std::string(kGood) + "attach:\n  socket: /s\n  quotas: ";
  for (const char* bad : {"{max_regions: 0}", "{max_qp_wr: 65537}", "{max_srq_wr: 0}",
                          "{max_cqe: 100000}", "{max_inline_data: 4097}"})
    EXPECT_NE(error_of(base + bad + "\n")
                  .find(std::string(bad).substr(1, std::strchr(bad, ':') - bad - 1)),
              std::string::npos)
        << bad;
}

TEST(Config, AttachControlLimits) {
  const std::string base = std::string(kGood) + "attach:\n  socket: /s\n";
  const auto d = parse_config(base, "good.yaml");
  EXPECT_EQ(d.attach.max_clients_per_uid, 0u) << "off: an MPI job's ranks are one uid";
  EXPECT_EQ(
      parse_config(base + "  max_clients_per_uid: 0\n", "good.yaml").attach.max_clients_per_uid,
      0u);
  EXPECT_EQ(d.attach.hello_timeout_ms, 5000u);
  EXPECT_EQ(d.attach.resolve_timeout_ms, 10000u);
  EXPECT_EQ(d.attach.cm_backlog, 256u);
  EXPECT_EQ(d.attach.privileged_uids, std::vector<std::uint32_t>{0});
  EXPECT_EQ(d.attach.max_fds, 64u);
  EXPECT_EQ(d.attach.max_cm_conns, 0u) << "unset: roced takes max_qps";
  EXPECT_EQ(d.attach.max_listens, 64u);
  const auto c = parse_config(
      base +
          "  max_clients_per_uid: 2\n  hello_timeout_ms: 1000\n"
          "  resolve_timeout_ms: 500\n  cm_backlog: 0\n"
          "  privileged_uids: [0, 1000]\n  quotas: {max_fds: 8, max_cm_conns: 16, max_listens: 2}\n"
          "  group: rdma\n",
      "good.yaml");
  EXPECT_EQ(c.attach.max_clients_per_uid, 2u);
  EXPECT_EQ(c.attach.hello_timeout_ms, 1000u);
  EXPECT_EQ(c.attach.resolve_timeout_ms, 500u);
  EXPECT_EQ(c.attach.cm_backlog, 0u);
  EXPECT_EQ(c.attach.privileged_uids, (std::vector<std::uint32_t>{0, 1000}));
  EXPECT_EQ(c.attach.max_fds, 8u);
  EXPECT_EQ(c.attach.max_cm_conns, 16u);
  EXPECT_EQ(c.attach.max_listens, 2u);
  EXPECT_EQ(c.attach.group, "rdma");
  EXPECT_TRUE(
      parse_config(base + "  privileged_uids: []\n", "g.yaml").attach.privileged_uids.empty());
  EXPECT_NE(error_of(base + "  privileged_uids: 0\n").find("list of uids"), std::string::npos);
  EXPECT_NE(error_of(base + "  privileged_uids: [-1]\n").find("privileged_uids"),
            std::string::npos);
  EXPECT_NE(error_of(base + "  max_clients_per_uid: 4097\n").find("max_clients_per_uid"),
            std::string::npos);
  EXPECT_NE(error_of(base + "  quotas: {max_fds: 1}\n").find("max_fds"), std::string::npos);
}

TEST(Config, MissingFileIsAClearError) {
  try {
    load_config("does-not-exist.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "does-not-exist.yaml: cannot open the configuration file");
  }
}

TEST(Config, ShippedExamplesParse) {
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(ROCE_CONFIG_DIR)) {
    if (f.path().extension() != ".yaml") continue;
    SCOPED_TRACE(f.path().string());
    EXPECT_NO_THROW(load_config(f.path().string(), kKinds));
    ++n;
  }
  EXPECT_GE(n, 3);
}

}  // namespace
}  // namespace roce::ctl
