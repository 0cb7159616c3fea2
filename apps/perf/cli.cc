/// @file
/// roce-perf's command line, shared by the tool and by roced's hosted services.
#include "apps/perf/cli.h"

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <map>

#include "apps/perf/cm_tools.h"
#include "apps/perf/coyote.h"
#include "apps/perf/perftest_proto.h"
#include "controlplane/address.h"

namespace roce::perf {

namespace po = boost::program_options;
using namespace roce::runtime;

namespace {

struct Test {
  bool pingpong;
  Pingpong pp;
  Verb verb;
  Mode mode;
};

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> t = {
      {"rc_pingpong", {true, Pingpong::kRc, Verb::kSend, Mode::kLat}},
      {"ud_pingpong", {true, Pingpong::kUd, Verb::kSend, Mode::kLat}},
      {"srq_pingpong", {true, Pingpong::kSrq, Verb::kSend, Mode::kLat}},
      {"write_bw", {false, Pingpong::kRc, Verb::kWrite, Mode::kBw}},
      {"read_bw", {false, Pingpong::kRc, Verb::kRead, Mode::kBw}},
      {"send_bw", {false, Pingpong::kRc, Verb::kSend, Mode::kBw}},
      {"atomic_bw", {false, Pingpong::kRc, Verb::kAtomic, Mode::kBw}},
      {"write_lat", {false, Pingpong::kRc, Verb::kWrite, Mode::kLat}},
      {"read_lat", {false, Pingpong::kRc, Verb::kRead, Mode::kLat}},
      {"send_lat", {false, Pingpong::kRc, Verb::kSend, Mode::kLat}},
      {"atomic_lat", {false, Pingpong::kRc, Verb::kAtomic, Mode::kLat}},
  };
  return t;
}

std::string test_list() {
  std::string s;
  for (const auto& [name, t] : tests()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

}  // namespace

bool is_test_name(const std::string& name) { return name == "coyote" || tests().count(name) > 0; }

std::optional<Invocation> parse_command_line(const std::vector<std::string>& args,
                                             std::ostream& out, int& help_status) {
  Opts o;
  const std::string cmd = args.empty() ? "" : args[0];
  if (cmd == "coyote") return parse_coyote_command_line(args, out, help_status);
  const auto it = tests().find(cmd);
  const bool known = it != tests().end();
  const Test t = known ? it->second : Test{};

  po::options_description common("Common options");
  runtime::LinkFlags lf;  // the in-process port's flags, into o.link once parsed
  common.add_options()("help,h", "print this help")(
      "attach", po::value(&o.attach),
      "run attached to the roced listening on this Unix socket (its attach.socket): "
      "the test's QPs live in roced's dataplane, --iface and the link options do not apply")(
      "attach-port", po::value(&o.attach_port),
      "with --attach: roced's port by name "
      "(default: its first)")(
      "events,e", po::bool_switch(&o.events),
      "with --attach: sleep on the CQ's event (eventfd) instead of polling it")(
      "port,p", po::value(&o.port)->default_value(o.port), "TCP port of the exchange")(
      "size,s", po::value(&o.size), "message size")("iters,n", po::value(&o.iters),
                                                    "number of iterations")(
      "mtu,m", po::value(&o.mtu),
      "path MTU (256..4096); perftest's tools: the largest the link carries, pingpong: 1024")(
      "rx-depth,r", po::value(&o.rx_depth), "receive queue depth")(
      "ib-dev,d", po::value<std::string>(), "accepted for compatibility (ignored)")(
      "ib-port,i", po::value<int>(), "accepted for compatibility (ignored)")(
      "timeout", po::value(&o.timeout_s)->default_value(o.timeout_s),
      "seconds before a stalled exchange or test gives up")(
      "json", po::value(&o.json), "write the results as JSON to this file");
  lf.add_to(common);
  po::options_description pp("ibv_*_pingpong options");
  pp.add_options()("gid-idx,g", po::value<int>(), "accepted for compatibility (GID is ::ffff:IP)")(
      "num_qp,q", po::value(&o.num_qp)->default_value(o.num_qp), "srq_pingpong: number of QPs");
  po::options_description pt("perftest options");
  std::string atomic_type = "FETCH_AND_ADD", conn = "RC";
  pt.add_options()("all,a", po::bool_switch(&o.all_sizes), "run sizes from 2 to 2^23 bytes")(
      "qp,q", po::value(&o.num_qp), "number of QPs")("tx-depth,t", po::value(&o.tx_depth),
                                                     "send queue depth")(
      "cq-mod,Q", po::value(&o.cq_mod)->default_value(o.cq_mod),
      "signal one completion every this many sends")("duration,D", po::value(&o.duration),
                                                     "run for this many seconds instead of -n")(
      "outs,o", po::value(&o.out_reads), "outstanding READs/atomics")(
      "inline_size,I", po::value(&o.inline_size), "largest message sent inline")(
      "atomic_type,A", po::value(&atomic_type)->default_value(atomic_type),
      "CMP_AND_SWAP or FETCH_AND_ADD")("connection,c", po::value(&conn)->default_value(conn),
                                       "connection type (RC)")(
      "report_gbits", po::bool_switch(&o.report_gbits), "report Gbit/s instead of MB/s")(
      "gid-index,x", po::value<int>(), "accepted for compatibility (GID is ::ffff:IP)")(
      "CPU-freq,F", "accepted for compatibility")("rdma_cm,R", "connect with rdma_cm")(
      "perftest-version", po::value(&o.version)->default_value(o.version),
      "perftest version we announce (>= 6.28 adds the parameter negotiation)")(
      "selective-repeat", po::bool_switch(&o.selective_repeat),
      "offer selective repeat (docs/loss-recovery.md); used when the peer is another roce-perf "
      "or roced that accepts it, go-back-N with any other (perftest, rxe, RNICs)");
  po::options_description hidden;
  hidden.add_options()("command", po::value<std::string>())("server", po::value(&o.server));
  po::positional_options_description pos;
  pos.add("command", 1).add("server", 1);

  po::options_description all;
  all.add(common).add(hidden);
  if (!known || t.pingpong) all.add(pp);
  if (!known || !t.pingpong) {
    if (!known) {  // help: show both sets, without the duplicate -q
      po::options_description pt_help("perftest options");
      for (const auto& opt : pt.options())
        if (opt->long_name() != "qp") pt_help.add(opt);
      all.add(pt_help);
    } else {
      all.add(pt);
    }
  }
  po::options_description visible(
      "Usage: roce-perf TEST --iface IF [options] [SERVER]\n"
      "       roce-perf TEST --attach SOCKET [options] [SERVER]   (perftest's tests, on roced)\n"
      "       roce-perf --config BENCH.yaml   "
      "(a whole benchmark: docs/benchmarks.md)\n       roce-perf coyote [-t SERVER] ...   "
      "(Coyote's RDMA benchmark: roce-perf coyote --help)\n\nTESTs: " +
      test_list() + "\n");
  visible.add(common);
  if (!known || t.pingpong) visible.add(pp);
  if (!known || !t.pingpong) visible.add(pt);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    po::notify(vm);
    if (vm.count("help") || cmd.empty() || cmd == "--help" || cmd == "-h") {
      out << visible << '\n';
      help_status = vm.count("help") || cmd == "--help" || cmd == "-h" ? 0 : 2;
      return std::nullopt;
    }
    if (!known) throw po::error("unknown test '" + cmd + "' (available: " + test_list() + ")");
    o.num_qp_given = vm.count("qp") > 0 || vm.count("num_qp") > 0;
    o.size_given = vm.count("size") > 0;
    o.cq_mod_given = !vm["cq-mod"].defaulted();
    o.iters_given = vm.count("iters") > 0;
    o.mtu_given = vm.count("mtu") > 0;
    o.rx_depth_given = vm.count("rx-depth") > 0;
    o.rdma_cm = vm.count("rdma_cm") > 0;
    if (o.rdma_cm && pt::compare_versions(o.version, pt::kNegotiateVersion) >= 0)
      throw po::error("-R with --perftest-version " + o.version +
                      ": the parameter negotiation of perftest >= 6.28 is not supported over "
                      "rdma_cm (announce an older version)");
    if (o.rdma_cm && !o.server.empty() && !ctl::parse_ipv4(o.server))
      throw po::error("-R: name the server by its RoCE IPv4 address ('" + o.server +
                      "' is not one)");
    if (conn != "RC") throw po::error("-c " + conn + ": only RC connections are supported");
    if (atomic_type == "CMP_AND_SWAP")
      o.cmp_and_swap = true;
    else if (atomic_type != "FETCH_AND_ADD")
      throw po::error("-A must be CMP_AND_SWAP or FETCH_AND_ADD");
    if (o.size_given && (o.size == 0 || o.size > (1u << 30)))
      throw po::error("-s must be between 1 and 1073741824");
    if (o.iters_given && o.iters == 0) throw po::error("-n must be at least 1");
    if (o.rx_depth_given && (o.rx_depth == 0 || o.rx_depth > 16384))
      throw po::error("-r must be between 1 and 16384");
    if (o.num_qp == 0 || o.num_qp > 1024) throw po::error("-q must be between 1 and 1024");
    if (o.cq_mod == 0 || o.cq_mod > 1024) throw po::error("-Q must be between 1 and 1024");
    if (o.mtu_given && o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 &&
        o.mtu != 4096)
      throw po::error("-m must be 256, 512, 1024, 2048 or 4096");
    if (!t.pingpong && o.duration && (t.mode == Mode::kLat || t.verb == Verb::kSend))
      throw po::error("-D is supported by write_bw, read_bw and atomic_bw; use -n here");
    if (!t.pingpong && t.mode == Mode::kLat && o.num_qp_given && o.num_qp != 1)
      throw po::error("latency tests run one QP (-q 1)");
    if (!t.pingpong && t.verb == Verb::kAtomic && o.all_sizes)
      throw po::error("-a is not available for atomic tests (they move 8 bytes)");
    if (!t.pingpong && t.verb == Verb::kAtomic && o.size_given && o.size != 8)
      throw po::error("atomic tests move 8 bytes (-s 8)");
    if (o.selective_repeat && !t.pingpong && !o.rdma_cm && o.version.size() >= pt::kSrMarkAt)
      throw po::error("--selective-repeat with --perftest-version " + o.version +
                      ": the offer needs a version of at most " +
                      std::to_string(pt::kSrMarkAt - 1) + " characters");
    lf.finish();
    o.link = lf.link;
    o.link.selective_repeat = o.selective_repeat;  // the engine allows it (its CM agent: -R)
    if (!o.attach.empty()) {
      if (t.pingpong)
        throw po::error(cmd + " is not available with --attach (perftest's tools are)");
      if (o.rdma_cm)
        throw po::error(
            "-R is not available with --attach (the connection manager does not go "
            "through the attach socket yet)");
      if (o.selective_repeat)
        throw po::error(
            "--selective-repeat is not available with --attach: roced turns it on only for "
            "connections its CM sets up (ECE), and -R does not go through the attach socket");
      if (!o.link.iface.empty() || !o.link.pcap.empty() || !o.link.offload.empty() || lf.faults())
        throw po::error(
            "--iface, --pcap, --offload and fault injection belong to an in-process port, not "
            "to --attach (roced's port has its own)");
    } else if (o.events) {
      throw po::error("-e needs --attach (in-process, the test polls its own dataplane)");
    }
    if (t.pingpong) {
      if (t.pp == Pingpong::kUd && o.size_given && o.size > o.mtu)
        throw po::error("ud_pingpong: -s must not exceed -m");
      if (t.pp == Pingpong::kSrq && (o.num_qp > o.rx_depth || o.num_qp >= 256))
        throw po::error("srq_pingpong: -q must be below 256 and not exceed -r");
    }
  } catch (const po::error& e) {
    throw CliError(e.what());
  }
  return Invocation{cmd, t.pingpong, t.pp, t.verb, t.mode, o};
}

int run(const Invocation& inv) {
  if (inv.coyote) return run_coyote(inv.opts);
  if (!inv.opts.attach.empty()) return run_perftest_attached(inv.opts, inv.verb, inv.mode);
  return inv.pingpong ? run_pingpong(inv.opts, inv.pp) : run_perftest(inv.opts, inv.verb, inv.mode);
}

int run(const Invocation& inv, Env& env, Oob& oob) {
  if (inv.coyote) return run_coyote(env, oob, inv.opts);
  if (inv.opts.rdma_cm) fail("-R (rdma_cm) is not available for hosted services");
  return inv.pingpong ? run_pingpong(env, oob, inv.opts, inv.pp)
                      : run_perftest(env, oob, inv.opts, inv.verb, inv.mode);
}

std::string hex_gid(const wire::Ipv6Addr& g) {
  std::string s;
  char h[3];
  for (auto b : g.b) {
    std::snprintf(h, sizeof h, "%02x", b);
    s += h;
  }
  return s;
}

std::string printable(const char* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n && p[i] != '\0'; ++i)
    s += (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : '.';
  return s;
}

}  // namespace roce::perf
