/// @file
/// Coyote's RDMA benchmark on libroce's Context (coyote.h): its exchange, its barrier, its
/// reflect pattern and its output. Coyote counts the operations that completed into local
/// memory (LOCAL_WRITE): READ responses on the client, arriving WRITEs on either side. Here READs
/// count by their completions and arriving WRITEs by the responder's MSN, which the engine
/// advances when a WRITE message has been placed.
#include "apps/perf/coyote.h"

#include <roce/client.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>

#include "apps/perf/coyote_proto.h"
#include "apps/perf/tools.h"
#include "client/local/local_context.h"
#include "controlplane/address.h"
#include "dataplane/engine/engine.h"
#include "runtime/attached.h"

namespace roce::perf {

namespace po = boost::program_options;
namespace rc = roce::client;
using namespace roce::engine;
using namespace roce::runtime;

std::optional<Invocation> parse_coyote_command_line(const std::vector<std::string>& args,
                                                    std::ostream& out, int& help_status) {
  Opts o;
  o.port = coyote::kDefaultPort;
  std::string op = "0";
  po::options_description d(
      "Usage: roce-perf coyote [-t SERVER] [-o 1|0] [-x MIN] [-X MAX] [-r RUNS] "
      "(--iface IF | --attach SOCKET) [options]\n"
      "Coyote's RDMA benchmark (its example 8): without -t we are the server");
  d.add_options()("help,h", "print this help")("tcpaddr,t", po::value(&o.server),
                                               "the server's TCP address (we are the client)")(
      "ip_address,i", po::value(&o.server), "the same (Coyote's newer spelling)")(
      "operation,o", po::value(&op)->default_value("0"), "WRITE (1) or READ (0)")(
      "min_size,x", po::value(&o.coyote_min)->default_value(o.coyote_min), "smallest transfer")(
      "max_size,X", po::value(&o.coyote_max)->default_value(o.coyote_max), "largest transfer")(
      "reps_thr,r", po::value(&o.coyote_runs)->default_value(o.coyote_runs),
      "runs of each test (give both sides the same)")("runs", po::value(&o.coyote_runs),
                                                      "the same (Coyote's newer spelling)")(
      "batch", po::value(&o.coyote_batch)->default_value(o.coyote_batch),
      "operations per throughput run (Coyote's N_THROUGHPUT_REPS)")(
      "fid", po::value(&o.coyote_fid),
      "client: frame the exchange as the seed's cLib does (this function id before the queue, "
      "a 12-byte close); a server tells the two framings apart itself")(
      "port,p", po::value(&o.port)->default_value(o.port), "TCP port of the exchange")(
      "attach", po::value(&o.attach), "run attached to the roced on this Unix socket (READ only)")(
      "attach-port", po::value(&o.attach_port), "with --attach: roced's port by name")(
      "timeout", po::value(&o.timeout_s)->default_value(o.timeout_s),
      "seconds before a stalled exchange or run gives up");
  runtime::LinkFlags lf;  // the in-process port's flags, into o.link once parsed
  lf.add_to(d);
  po::options_description hidden;
  hidden.add_options()("command", po::value<std::string>());
  po::options_description all;
  all.add(d).add(hidden);
  po::positional_options_description pos;
  pos.add("command", 1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
      out << d << '\n';
      help_status = 0;
      return std::nullopt;
    }
    // Coyote reads -o as a boost bool: 1/0, true/false, yes/no, on/off
    if (op == "1" || op == "true" || op == "yes" || op == "on")
      o.coyote_write = true;
    else if (op != "0" && op != "false" && op != "no" && op != "off")
      throw po::error("-o must be 1 (WRITE) or 0 (READ)");
    if (o.coyote_min == 0) throw po::error("-x must be at least 1");
    if (o.coyote_max < o.coyote_min || o.coyote_max > (1u << 28))
      throw po::error("-X must be between -x and 268435456");
    if (o.coyote_runs == 0) throw po::error("-r must be at least 1");
    if (vm.count("fid") && (o.coyote_fid < 0 || o.coyote_fid >= 0x01000000))
      throw po::error("--fid must be from 0 to 16777215 (cLib's function ids are small)");
    if (vm.count("fid") && o.server.empty())
      throw po::error("--fid is the client's framing; a server recognises it by itself");
    if (o.coyote_batch == 0 || o.coyote_batch > 1024)
      throw po::error("--batch must be between 1 and 1024");
    if (!o.attach.empty() && o.coyote_write)
      throw po::error(
          "-o 1 (WRITE) is not available with --attach: counting the WRITEs that arrive needs "
          "the engine's responder state, which libroce does not expose (run in-process or as "
          "a roced service)");
    lf.finish();
    o.link = lf.link;
    if (!o.attach.empty() &&
        (!o.link.iface.empty() || !o.link.pcap.empty() || !o.link.offload.empty() || lf.faults()))
      throw po::error(
          "--iface, --pcap, --offload and fault injection belong to an in-process port, not "
          "to --attach (roced's port has its own)");
  } catch (const po::error& e) {
    throw CliError(e.what());
  }
  Invocation inv;
  inv.test = "coyote";
  inv.coyote = true;
  inv.opts = o;
  return inv;
}

namespace {

struct Stack {
  Poller& poller;
  rc::Context& ctx;
  Env* env = nullptr;  ///< in-process: ARP and the engine's QPs (to count arriving WRITEs)
};

void header(const char* msg) {
  std::cout << "\n-- " << msg << '\n' << std::string(47, '-') << '\n';
}

class Coyote {
 public:
  Coyote(Stack st, Exchange& oob, const Opts& o) : st_(st), ctx_(st.ctx), oob_(oob), o_(o) {}
  ~Coyote() {
    if (qp_) ctx_.destroy_qp(qp_);
    if (mr_) ctx_.dereg_mr(mr_);
    if (mem_) ctx_.free_buffer(mem_);
    if (cq_) ctx_.destroy_cq(cq_);
    if (pd_) ctx_.dealloc_pd(pd_);
  }
  int run();

 private:
  bool client() const { return oob_.client(); }
  void setup();
  void exchange_queues();
  void connect();
  void barrier();
  double run_bench(std::uint32_t size, unsigned transfers);
  void fill(std::uint32_t size, bool pattern);
  void check_pattern(std::uint32_t size);
  std::uint32_t arrived_writes() const;
  void post(WrOpcode op, std::uint32_t size);
  void reap(unsigned& completed);

  Stack st_;
  rc::Context& ctx_;
  Exchange& oob_;
  const Opts& o_;
  rc::Pd* pd_ = nullptr;
  rc::Cq* cq_ = nullptr;
  rc::Qp* qp_ = nullptr;
  rc::Buffer* mem_ = nullptr;
  rc::Mr* mr_ = nullptr;
  std::uint32_t* words_ = nullptr;
  const Qp* eqp_ = nullptr;  ///< the engine's QP (in-process)
  coyote::Queue mine_, peer_;
  bool clib_ = false;  ///< the peer frames the exchange as the seed's cLib
  unsigned posted_ = 0;
};

void Coyote::setup() {
  pd_ = ctx_.alloc_pd();
  const unsigned depth = o_.coyote_batch + 1;
  cq_ = ctx_.create_cq(2 * depth + 16);
  if (!pd_ || !cq_) fail(std::string("cannot create a PD or CQ: ") + std::strerror(errno));
  qp_ = ctx_.create_qp(pd_, QpType::kRc, cq_, cq_, QpCap{depth, 1, 1, 1, 0});
  if (!qp_) fail(std::string("cannot create a QP: ") + std::strerror(errno));
  mem_ = ctx_.alloc_buffer(o_.coyote_max);
  if (!mem_) fail(std::string("cannot allocate the buffer: ") + std::strerror(errno));
  words_ = static_cast<std::uint32_t*>(mem_->addr);
  const std::uint32_t access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  mr_ = ctx_.reg_mr(pd_, mem_->addr, o_.coyote_max, access);
  if (!mr_) fail(std::string("cannot register the buffer: ") + std::strerror(errno));
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = access;
  if (ctx_.modify_qp(qp_, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk)
    fail("failed to modify the QP to INIT");
  if (st_.env) eqp_ = st_.env->eng.find_qp(qp_->qp_num);
  if (o_.coyote_write && !eqp_)
    fail("WRITE (-o 1) needs the engine's QP to count arriving WRITEs (in-process or hosted)");
  std::mt19937 rng(static_cast<unsigned>(port::now_ns()));
  mine_ = coyote::make_queue(ctx_.port().ipv4.v, qp_->qp_num, rng() & 0xFFFFFF, mr_->rkey,
                             mr_->iova, o_.coyote_max);
}

void Coyote::exchange_queues() {
  const auto b = coyote::encode(mine_);
  std::array<std::uint8_t, coyote::kQueueLen> theirs{};
  if (client()) {
    if (o_.coyote_fid >= 0) {
      const auto fid = coyote::encode_fid(o_.coyote_fid);
      oob_.send(fid.data(), fid.size());
      clib_ = true;
    }
    oob_.exchange(b.data(), theirs.data(), theirs.size());
  } else {
    // The seed's cLib sends a function id first; a queue starts with an IPv4 address.
    std::uint8_t first[coyote::kFidLen];
    oob_.recv(first, sizeof first);
    if (coyote::looks_like_fid(first)) {
      clib_ = true;
      std::uint32_t fid = 0;
      std::memcpy(&fid, first, sizeof fid);
      std::cout << "cLib client, function id " << fid << std::endl;
      oob_.recv(theirs.data(), theirs.size());
    } else {
      std::memcpy(theirs.data(), first, sizeof first);
      oob_.recv(theirs.data() + sizeof first, theirs.size() - sizeof first);
    }
    oob_.send(b.data(), b.size());
  }
  std::string err;
  if (!coyote::decode(theirs, o_.coyote_max, peer_, err))
    fail("the peer's queue is not what Coyote sends: " + err);
  std::cout << "Queue pair: \n"
            << coyote::describe("Local: ", mine_) << '\n'
            << coyote::describe("Remote: ", peer_) << '\n'
            << (client() ? "Client registered" : "Server registered") << std::endl;
}

void Coyote::connect() {
  const wire::Ipv4Addr rip{peer_.ip_addr};
  // In-process we resolve the peer here; attached, roced does (an address vector without MAC).
  const wire::MacAddr mac = st_.env ? st_.env->resolve(rip, 10) : wire::MacAddr{};
  QpAttr a;
  a.qp_state = QpState::kRtr;
  // Coyote's stack runs a path MTU of 4096 (a build parameter); ours is what the port carries.
  a.path_mtu = std::min(ctx_.port().max_mtu, Mtu::k4096);
  a.dest_qp_num = peer_.qpn;
  a.rq_psn = peer_.psn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.ah.dgid = ctl::gid_from_ipv4(rip);
  a.ah.dmac = mac;
  a.ah.hop_limit = 0xFF;
  if (ctx_.modify_qp(qp_, a,
                     kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                         kQpMinRnrTimer) != kOk)
    fail("failed to modify the QP to RTR");
  a.qp_state = QpState::kRts;
  a.sq_psn = mine_.psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  if (ctx_.modify_qp(
          qp_, a,
          kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic) != kOk)
    fail("failed to modify the QP to RTS");
}

// connSync: the client sends a 4-byte 0 and reads 4 bytes; the server the other way round.
void Coyote::barrier() {
  const std::uint32_t zero = 0;
  std::uint32_t got = 0;
  oob_.exchange(&zero, &got, sizeof got);
  if (got != 0)
    fail("barrier: the peer sent 0x" + [&] {
      char s[12];
      std::snprintf(s, sizeof s, "%08x", got);
      return std::string(s);
    }() + ", not Coyote's 0 (out of step)");
}

// Coyote's pattern: the side whose data travels holds word i = i, the other zeros.
void Coyote::fill(std::uint32_t size, bool pattern) {
  for (std::uint32_t i = 0; i < size / 4; ++i) words_[i] = pattern ? i : 0;
}

void Coyote::check_pattern(std::uint32_t size) {
  for (std::uint32_t i = 0; i < size / 4; ++i)
    if (words_[i] != i)
      fail("data check: word " + std::to_string(i) + " of the " + std::to_string(size) +
           "-byte transfer holds " + std::to_string(words_[i]) + ", not " + std::to_string(i));
}

std::uint32_t Coyote::arrived_writes() const { return eqp_->resp.msn.raw(); }

void Coyote::post(WrOpcode op, std::uint32_t size) {
  Sge sge{reinterpret_cast<std::uint64_t>(words_), size, mr_->lkey};
  SendWr wr;
  wr.wr_id = posted_++;
  wr.opcode = op;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  wr.rdma = {peer_.vaddr, peer_.rkey};
  if (const int rc = ctx_.post_send(qp_, &wr, nullptr); rc != kOk)
    fail(std::string("post_send failed: ") + std::strerror(rc));
}

void Coyote::reap(unsigned& completed) {
  Wc wc[16];
  const int n = ctx_.poll_cq(cq_, 16, wc);
  if (n < 0) fail("the CQ failed: " + std::string(std::strerror(-n)));
  for (int i = 0; i < n; ++i) {
    if (wc[i].status != WcStatus::kSuccess)
      fail("completion with error: " + std::string(to_string(wc[i].status)));
    ++completed;
  }
}

// One of Coyote's run_bench: -r runs of `transfers` operations, each after a barrier; returns
// the client's average time per run in ns (WRITE: halved, it went both ways).
double Coyote::run_bench(std::uint32_t size, unsigned transfers) {
  const bool write = o_.coyote_write;
  fill(size, client() == write);
  double total_ns = 0;
  for (unsigned run = 0; run < o_.coyote_runs; ++run) {
    const std::uint32_t base = write ? arrived_writes() : 0;  // clearCompleted
    barrier();
    unsigned completed = 0;
    const auto arrived = [&] { return (arrived_writes() - base) & 0xFFFFFF; };
    bool ok = true;
    std::string what;
    const std::uint64_t t0 = port::now_ns();
    if (client()) {
      for (unsigned i = 0; i < transfers; ++i)
        post(write ? WrOpcode::kWrite : WrOpcode::kRead, size);
      ok = st_.poller.until(
          [&] {
            reap(completed);
            return completed == transfers && (!write || arrived() >= transfers);
          },
          o_.timeout_s);
      what = write ? std::to_string(arrived()) + " of " + std::to_string(transfers) +
                         " WRITEs back from the server"
                   : std::to_string(completed) + " of " + std::to_string(transfers) + " READs";
    } else if (write) {
      ok = st_.poller.until([&] { return arrived() >= transfers; }, o_.timeout_s);
      what = std::to_string(arrived()) + " of " + std::to_string(transfers) +
             " WRITEs from the client";
      if (ok) {
        for (unsigned i = 0; i < transfers; ++i) post(WrOpcode::kWrite, size);
        ok = st_.poller.until(
            [&] {
              reap(completed);
              return completed == transfers;
            },
            o_.timeout_s);
        what = std::to_string(completed) + " of " + std::to_string(transfers) +
               " WRITEs back acknowledged";
      }
    }
    const std::uint64_t t1 = port::now_ns();
    if (!ok)
      fail("run " + std::to_string(run + 1) + " of " + std::to_string(size) +
           " bytes stalled: " + what);
    total_ns += static_cast<double>(t1 - t0);
  }
  // Coyote checks what travelled on the side it travelled to.
  if (client() != write) check_pattern(size);
  return total_ns / o_.coyote_runs / (write ? 2.0 : 1.0);
}

int Coyote::run() {
  header("CLI PARAMETERS:");
  if (client()) std::cout << "Server's TCP address: " << o_.server << '\n';
  std::cout << "Benchmark operation: " << (o_.coyote_write ? "WRITE" : "READ") << '\n'
            << "Number of test runs: " << o_.coyote_runs << '\n'
            << "Starting transfer size: " << o_.coyote_min << '\n'
            << "Ending transfer size: " << o_.coyote_max << "\n\n"
            << std::flush;
  setup();
  oob_.open();
  exchange_queues();
  connect();
  header(client() ? "RDMA BENCHMARK: CLIENT" : "RDMA BENCHMARK: SERVER");
  std::cout << std::flush;
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a of what travelled, for the record
  for (std::uint64_t size = o_.coyote_min; size <= o_.coyote_max; size *= 2) {
    const auto sz = static_cast<std::uint32_t>(size);
    const double thr_ns = run_bench(sz, o_.coyote_batch);
    const double lat_ns = run_bench(sz, coyote::kLatencyReps);
    if (client())
      std::cout << coyote::result_row(sz, coyote::throughput_mbps(o_.coyote_batch, sz, thr_ns),
                                      lat_ns / 1e3)
                << std::endl;
    const auto* p = reinterpret_cast<const std::uint8_t*>(words_);
    for (std::uint32_t i = 0; i < sz; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  }
  barrier();  // Coyote's final sync
  // The client's close request (DEF_OP_CLOSE_CONN), which the server reads before closing.
  std::uint32_t req = coyote::kCloseConn;
  if (clib_) {  // the seed's cLib: 12 bytes, defOpClose first
    auto close = coyote::encode_clib_close();
    if (client()) {
      oob_.send(close.data(), close.size());
    } else {
      oob_.recv(close.data(), close.size());
      if (!coyote::is_clib_close(close))
        fail("the cLib client's close request does not start with defOpClose (0)");
    }
  } else if (client()) {
    oob_.send(&req, sizeof req);
  } else {
    oob_.recv(&req, sizeof req);
    if (req != coyote::kCloseConn)
      fail("the client's close request is " + std::to_string(req) + ", not 0");
  }
  oob_.close();
  char line[96];
  std::snprintf(line, sizeof line, "Buffer after the sweep: FNV-1a 0x%016llx (%s)",
                static_cast<unsigned long long>(hash),
                client() != o_.coyote_write ? "checked word by word" : "sent");
  std::cout << line << std::endl;
  return 0;
}

}  // namespace

int run_coyote(Env& env, Exchange& oob, const Opts& o) {
  rc::LocalOptions lo = env.local_options();
  lo.progress = nullptr;  // the test polls the loop itself
  // roced's `datapath` port: READ runs on the card (the server only answers). WRITE stays on
  // the engine: arrivals are counted from the engine QP's messages, which the card has not.
  std::unique_ptr<rc::Context> ctx;
  if (env.open_card && !o.coyote_write) {
    ctx = env.open_card();
    if (!ctx) fail(std::string("cannot open the datapath card: ") + std::strerror(errno));
    std::cout << "QPs on the FPGA datapath card (offload: datapath)" << std::endl;
  } else {
    ctx = rc::open_local(std::move(lo));
  }
  Coyote t(Stack{env, *ctx, &env}, oob, o);
  return t.run();
}

int run_coyote_attached(const Opts& o) {
  AttachedEnv env(o.attach, o.attach_port, o.events);
  Oob oob(env, o.server, o.port, o.timeout_s);
  Coyote t(Stack{env, env.ctx(), nullptr}, oob, o);
  return t.run();
}

int run_coyote(const Opts& o) {
  if (!o.attach.empty()) return run_coyote_attached(o);
  Env env(o.link);
  Oob oob(env, o.server, o.port, o.timeout_s);
  return run_coyote(env, oob, o);
}

}  // namespace roce::perf
