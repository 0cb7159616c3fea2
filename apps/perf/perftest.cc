/// @file
/// perftest's ib_{write,read,send,atomic}_{bw,lat}, spoken by the appliance (RC). The exchange
/// (perftest_proto.h): versions, system data, MTU, the parameter negotiation when both sides
/// are >= 6.28, one QP address per QP, a hand-shake once every QP is ready, the traffic, a
/// hand-shake when it is over, the bandwidth report (bw tests), and a closing hand-shake. The
/// hand-shakes re-send the first QP's address message. It runs on TCP, or with -R on perftest's
/// rdma_cm communication connection, which also connects the tested QPs (perftest_cm.h).
///
/// Traffic, as the tools do it:
///  - write/read/atomic bw: the client keeps -t operations in flight per QP, signals one in -Q,
///    and steps the remote address by the cache-line-rounded size within the peer's cycle
///    buffer; the server is passive.
///  - send bw: the server pre-posts receives before the start hand-shake and re-posts them.
///  - write lat: both sides RDMA-WRITE the message into the other's buffer; the last byte
///    carries the iteration number, and each side writes after it saw the peer's write. The
///    client starts. send lat: the same ping-pong with SENDs. read/atomic lat: the client issues
///    one operation at a time; the server is passive.
#include <roce/client.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "apps/perf/perftest_cm.h"
#include "apps/perf/perftest_proto.h"
#include "apps/perf/tools.h"
#include "client/local/local_context.h"
#include "controlplane/address.h"
#include "runtime/attached.h"
#include "runtime/port.h"

namespace roce::perf {

using namespace roce::engine;
using namespace roce::runtime;

namespace {

constexpr std::uint32_t kOurMaxRdAtomic = 16;
constexpr std::uint32_t kMaxCycleBuffer = 1u << 20;

const char* verb_name(Verb v) {
  switch (v) {
    case Verb::kWrite:
      return "RDMA_Write";
    case Verb::kRead:
      return "RDMA_Read";
    case Verb::kSend:
      return "Send";
    case Verb::kAtomic:
      return "Atomic";
  }
  return "?";
}

Mtu mtu_of_enum(int e) { return static_cast<Mtu>(e); }

namespace rc = roce::client;

struct QpCtx {
  rc::Qp* qp = nullptr;
  rc::Buffer* mem = nullptr;  ///< what the peer writes to / reads from, and our source
  std::uint8_t* buf = nullptr;
  rc::Mr* mr = nullptr;
  pt::Dest mine, peer;  ///< with selective repeat, srqn: the message index each side receives from
  std::uint64_t posted = 0, completed = 0;
  std::uint64_t recv_posted = 0;  ///< receives posted for the current message size
};

struct LatStats {
  double min = 0, max = 0, typical = 0, avg = 0, stdev = 0, p99 = 0, p999 = 0;
};

// perftest's statistics over the sorted deltas d: the two largest are left out (m = n - 2),
// t_max is d[m], the median and the mean are over d[0..m-1], percentiles index d[ceil(p m)].
LatStats lat_stats(std::vector<double> d) {
  LatStats s;
  if (d.size() < 3) return s;
  std::sort(d.begin(), d.end());
  const std::size_t m = d.size() - 2;
  s.min = d[0];
  s.max = d[m];
  s.typical = m % 2 ? d[m / 2] : (d[m / 2 - 1] + d[m / 2]) / 2;
  double sum = 0;
  for (std::size_t i = 0; i < m; ++i) sum += d[i];
  s.avg = sum / static_cast<double>(m);
  double var = 0;
  for (std::size_t i = 0; i < m; ++i) var += (d[i] - s.avg) * (d[i] - s.avg);
  s.stdev = std::sqrt(var / static_cast<double>(m));
  const auto pct = [&](double p) {
    return d[std::min(static_cast<std::size_t>(std::ceil(p * static_cast<double>(m))), m)];
  };
  s.p99 = pct(0.99);
  s.p999 = pct(0.999);
  return s;
}

const char* kLine =
    "---------------------------------------------------------------------------------------";

/// What a test runs on: libroce's Context, on an in-process engine (roce-perf's own port, or
/// the loop roced lends to a hosted service) or attached to roced (--attach).
struct Stack {
  Poller& poller;
  rc::Context& ctx;
  wire::Ipv6Addr gid;
  Env* env = nullptr;  ///< in-process: ARP, rdma_cm (-R) and the engine's counters
};

class Perftest {
 public:
  Perftest(Stack st, Exchange& oob, const Opts& o, Verb verb, Mode mode)
      : o_(o),
        verb_(verb),
        mode_(mode),
        st_(st),
        ctx_(st.ctx),
        oob_(oob),
        cm_(dynamic_cast<CmExchange*>(&oob)) {}
  ~Perftest() = default;  // (-R: the Context lets the CM go of a QP it destroys)
  Perftest(const Perftest&) = delete;
  Perftest& operator=(const Perftest&) = delete;
  int run();

 private:
  bool client() const { return oob_.client(); }
  void apply_defaults();
  void create_resources();
  void create_buffers();
  /// The remote access a test's QPs and buffers grant: only what its verb needs.
  std::uint32_t remote_access() const;
  void exchange_setup();
  void exchange_dests();
  pt::Dest exchange_dest(const pt::Dest& mine);
  void connect_qps();
  void connect_qps_rdma_cm();
  /// --selective-repeat can be offered: the QPs live in an in-process engine (roce-perf's own,
  /// or roced's for a hosted service) that allows it; not attached, not on the FPGA card.
  bool sr_allowed() const;
  /// The engine's QP behind `q` (in-process), or null.
  Qp* engine_qp(const rc::Qp* q) const {
    return st_.env != nullptr ? st_.env->eng.find_qp(q->qp_num) : nullptr;
  }
  void hand_shake(QpCtx* c = nullptr);
  void exchange_reports(const pt::Report& mine);
  void close_connection();
  void banner();
  void print_addresses();
  void print_header();
  void write_json();
  /// Frames this process's own port lost on the way in (PortStats::rx_missed); 0 without one.
  std::uint64_t rx_missed() const;
  // traffic, one message size
  pt::Report bw_client(std::uint32_t size);
  void bw_server_send(std::uint32_t size);
  void lat_pingpong(std::uint32_t size);
  void lat_client(std::uint32_t size);
  pt::Report report_bw(std::uint32_t size, std::uint64_t iters, double secs, double peak_ops);
  void print_bw_row(std::uint64_t size, std::uint64_t iters, double peak, double avg, double rate);
  void report_lat(std::uint32_t size, const std::vector<std::uint64_t>& stamps, double factor);
  void post(QpCtx& c, std::uint32_t size, bool signaled);
  void post_recvs(QpCtx& c, std::uint32_t size, unsigned n);
  void check(const Wc& wc);
  /// -e (attached): waits until `cq` has a completion, at most a millisecond (libroce's
  /// hybrid wait: a short spin, then the CQ's eventfd); the poller adds no rest of its own.
  void wait_events(rc::Cq* cq) {
    if (!o_.events || st_.env) return;
    ctx_.wait_cq(cq, 1);
    st_.poller.rested();
  }

  Opts o_;
  Verb verb_;
  Mode mode_;
  Stack st_;
  rc::Context& ctx_;
  Exchange& oob_;
  CmExchange* cm_;  ///< -R: the exchange is perftest's rdma_cm communication connection
  rc::Pd* pd_ = nullptr;
  rc::Cq* scq_ = nullptr;
  rc::Cq* rcq_ = nullptr;
  std::vector<QpCtx> qps_;
  pt::SysData sys_;
  int mtu_enum_ = 3;
  std::uint32_t buf_size_ = 0;
  std::uint32_t half_ = 0;  ///< max(size, cycle buffer): where the part we advertise starts
  std::string peer_version_;
  bool sr_ = false;  ///< the tested QPs run selective repeat (both sides asked for it)
  std::ostringstream json_rows_;
  std::uint64_t received_bytes_ = 0;
};

void Perftest::apply_defaults() {
  const bool bw = mode_ == Mode::kBw;
  if (!o_.num_qp_given) o_.num_qp = 1;
  if (verb_ == Verb::kAtomic) {
    if (o_.size_given && o_.size != 8) fail("atomic tests move 8 bytes (-s 8)");
    o_.size = 8;
  } else if (!o_.size_given) {
    o_.size = bw ? 65536 : 2;
  }
  if (o_.all_sizes && verb_ == Verb::kAtomic) fail("-a is not available for atomic tests");
  if (!o_.iters_given) o_.iters = bw && verb_ == Verb::kWrite ? 5000 : 1000;
  if (o_.tx_depth == 0) o_.tx_depth = bw ? 128 : 1;
  o_.tx_depth = std::min<unsigned>(o_.tx_depth, o_.iters);
  if (!o_.rx_depth_given) o_.rx_depth = verb_ == Verb::kSend ? 512 : 1;
  o_.rx_depth = std::min<unsigned>(o_.rx_depth, o_.iters);
  // One completion per message above 8 KiB, unless -Q or -a says otherwise.
  if (!o_.cq_mod_given && !o_.all_sizes && o_.size > 8192) o_.cq_mod = 1;
  if (o_.tx_depth > 4096 || o_.rx_depth > 16384) fail("-t or -r is too deep");
  if (o_.cq_mod > o_.tx_depth) o_.cq_mod = o_.tx_depth;
  // perftest takes the device's active MTU unless -m says otherwise: here, the largest path
  // MTU the port carries (roced: from the port's MTU; roce-perf: from --netdev-mtu).
  const std::uint32_t port_mtu = mtu_bytes(ctx_.port().max_mtu);
  if (!o_.mtu_given) o_.mtu = port_mtu;
  if (pt::mtu_enum_of_bytes(o_.mtu) == 0) fail("-m must be 256, 512, 1024, 2048 or 4096");
  if (o_.mtu > port_mtu)
    fail("-m " + std::to_string(o_.mtu) + " is larger than the port carries (path MTU " +
         std::to_string(port_mtu) + "; a larger link MTU, --netdev-mtu, allows more)");
  if (o_.out_reads == 0)
    o_.out_reads = verb_ == Verb::kRead || verb_ == Verb::kAtomic ? kOurMaxRdAtomic : 1;
  o_.out_reads = std::min(o_.out_reads, kOurMaxRdAtomic);
  if (mode_ == Mode::kLat && o_.num_qp != 1) fail("latency tests run one QP (-q 1)");
  if (o_.duration && (mode_ == Mode::kLat || verb_ == Verb::kSend))
    fail("-D is supported by write_bw, read_bw and atomic_bw; use -n here");
  if (o_.inline_size > 4096) fail("-I must not exceed 4096");
}

void Perftest::create_resources() {
  pd_ = ctx_.alloc_pd();
  const unsigned nqp = o_.num_qp;
  scq_ = ctx_.create_cq(o_.tx_depth * nqp + 16);
  rcq_ = ctx_.create_cq(o_.rx_depth * nqp + 16);
  if (!pd_ || !scq_ || !rcq_)
    fail(std::string("cannot create a PD or CQ: ") + std::strerror(errno));
  std::mt19937 rng(static_cast<unsigned>(port::now_ns()));
  qps_.resize(nqp);
  for (unsigned i = 0; i < nqp; ++i) {
    QpCtx& c = qps_[i];
    c.qp = ctx_.create_qp(pd_, QpType::kRc, scq_, rcq_,
                          QpCap{o_.tx_depth + 1, o_.rx_depth + 1, 1, 1, o_.inline_size});
    if (!c.qp) fail(std::string("cannot create a QP: ") + std::strerror(errno));
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qp_access_flags = remote_access();
    if (ctx_.modify_qp(c.qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk)
      fail("failed to modify QP to INIT");
    c.mine.lid = 0;
    c.mine.out_reads = o_.out_reads;
    c.mine.qpn = c.qp->qp_num;
    c.mine.psn = static_cast<std::uint32_t>(rng()) & 0xFFFFFF;
    c.mine.gid = st_.gid;
  }
}

// After the system data: as perftest, each QP's buffer holds twice max(size, cycle buffer)
// (each half rounded up to the cache line), the first half is the local side of our own
// operations, and the peer is given the second half: its WRITEs, READs and atomics land there,
// and what would run past the buffer's end is refused as it would be by perftest.
void Perftest::create_buffers() {
  const std::uint32_t largest = o_.all_sizes ? (1u << 23) : o_.size;
  const std::uint32_t buff = std::max(largest, sys_.cycle_buffer);
  const std::uint32_t cl = sys_.cache_line;
  const std::uint32_t inc = (buff + cl - 1) / cl * cl;
  buf_size_ = 2 * inc;
  half_ = buff;
  std::mt19937 rng(static_cast<unsigned>(port::now_ns()));
  for (auto& c : qps_) {
    // Shared memory (zero-filled): an attached roced reads and writes it directly.
    c.mem = ctx_.alloc_buffer(buf_size_);
    if (!c.mem) fail(std::string("cannot allocate a QP's buffer: ") + std::strerror(errno));
    c.buf = static_cast<std::uint8_t*>(c.mem->addr);
    // perftest fills its buffers with random bytes (zeros for write_lat, which polls them).
    if (!(verb_ == Verb::kWrite && mode_ == Mode::kLat))
      for (std::uint32_t i = 0; i < buf_size_; ++i) c.buf[i] = static_cast<std::uint8_t>(rng());
    // The least access the test needs (perftest: write_bw remote write only, send none).
    c.mr = ctx_.reg_mr(pd_, c.buf, buf_size_, kAccessLocalWrite | remote_access());
    if (!c.mr) fail(std::string("cannot register a QP's buffer: ") + std::strerror(errno));
    c.mine.rkey = c.mr->rkey;
    c.mine.vaddr = c.mr->iova + half_;
  }
}

std::uint32_t Perftest::remote_access() const {
  switch (verb_) {
    case Verb::kWrite:
      return kAccessRemoteWrite;
    case Verb::kRead:
      return kAccessRemoteRead;
    case Verb::kAtomic:
      return kAccessRemoteAtomic;
    case Verb::kSend:
      break;
  }
  return 0;
}

bool Perftest::sr_allowed() const {
  return st_.env != nullptr && st_.env->eng.config().selective_repeat &&
         engine_qp(qps_[0].qp) != nullptr;
}

void Perftest::exchange_setup() {
  // 1. versions; with --selective-repeat over TCP the client's offer past the version's NUL,
  // and the server's accept only to an offer (the server reads first: perftest_proto.h SrMark).
  // With -R the CM's ECE carries them instead (connect_qps_rdma_cm).
  const bool ask = o_.selective_repeat && !cm_ && sr_allowed();
  std::array<char, pt::kVersionLen> theirs{};
  if (client()) {
    const auto mine = pt::version_msg(o_.version, ask ? pt::SrMark::kOffer : pt::SrMark::kNone);
    oob_.send(mine.data(), pt::kVersionLen);
    oob_.recv(theirs.data(), pt::kVersionLen);
    sr_ = ask && pt::sr_mark_of(theirs) == pt::SrMark::kAccept;
  } else {
    oob_.recv(theirs.data(), pt::kVersionLen);
    sr_ = ask && pt::sr_mark_of(theirs) == pt::SrMark::kOffer;
    const auto mine = pt::version_msg(o_.version, sr_ ? pt::SrMark::kAccept : pt::SrMark::kNone);
    oob_.send(mine.data(), pt::kVersionLen);
  }
  peer_version_ = pt::version_of(theirs);
  if (pt::compare_versions(peer_version_, pt::kMinVersion) < 0)
    fail("the peer runs perftest " + peer_version_ + "; versions before " + pt::kMinVersion +
         " are not supported");
  // 2. system data: both keep the larger cycle buffer and cache line
  // (two exchanges of 4 bytes: perftest reads each with one read() of exactly 4)
  const auto sys_mine = pt::encode(sys_);
  std::array<std::uint8_t, 8> sys_theirs{};
  oob_.exchange(sys_mine.data(), sys_theirs.data(), 4);
  oob_.exchange(sys_mine.data() + 4, sys_theirs.data() + 4, 4);
  const pt::SysData peer_sys = pt::decode_sys(sys_theirs);
  sys_.cycle_buffer = std::max(sys_.cycle_buffer, peer_sys.cycle_buffer);
  sys_.cache_line = std::max(sys_.cache_line, peer_sys.cache_line);
  // (a cycle buffer of a page is usual; the bound keeps a peer from making us allocate much)
  if (sys_.cycle_buffer == 0 || sys_.cycle_buffer > kMaxCycleBuffer || sys_.cache_line == 0 ||
      sys_.cache_line > 4096)
    fail("the peer's system data is out of range (cycle buffer " +
         std::to_string(peer_sys.cycle_buffer) + ", cache line " +
         std::to_string(peer_sys.cache_line) + ")");
  // 3. MTU: the smaller one
  const auto mtu_mine = pt::mtu_msg(pt::mtu_enum_of_bytes(o_.mtu));
  std::array<char, 2> mtu_theirs{};
  oob_.exchange(mtu_mine.data(), mtu_theirs.data(), 2);
  const auto peer_mtu = pt::mtu_of(mtu_theirs);
  if (!peer_mtu) fail("the peer sent a malformed MTU");
  mtu_enum_ = std::min(pt::mtu_enum_of_bytes(o_.mtu), *peer_mtu);
  // 4. parameters, when both sides are new enough to send them
  if (pt::compare_versions(peer_version_, pt::kNegotiateVersion) >= 0 &&
      pt::compare_versions(o_.version, pt::kNegotiateVersion) >= 0) {
    pt::Params p;
    // perftest >= 6.28's enums: verb SEND 0, WRITE 2, READ 4, ATOMIC 5; tst LAT 0, BW 1;
    // test_method REGULAR 0, ALL 1; test_type ITERATIONS 0, DURATION 1; report_fmt GBS 0, MBS 1.
    static constexpr std::int32_t kVerbCode[] = {2, 4, 0, 5};
    p.verb = kVerbCode[static_cast<int>(verb_)];
    p.tst = mode_ == Mode::kBw ? 1 : 0;
    p.atomic_type = o_.cmp_and_swap ? 0 : 1;
    p.test_method = o_.all_sizes ? 1 : 0;
    p.test_type = o_.duration ? 1 : 0;
    p.report_fmt = o_.report_gbits ? 0 : 1;
    p.size = o_.size;
    p.iters = o_.iters;
    p.num_of_qps = static_cast<std::int32_t>(o_.num_qp);
    p.duration = static_cast<std::int32_t>(o_.duration);
    p.max_qp_rd_atom = kOurMaxRdAtomic;
    std::vector<std::uint8_t> pm(pt::kParamsLen), pth(pt::kParamsLen);
    pt::encode(p, pm);
    oob_.exchange(pm.data(), pth.data(), pt::kParamsLen);
    const pt::Params peer = pt::decode_params(pth);
    const std::string bad = pt::params_mismatch(p, peer);
    if (!bad.empty()) fail("the peer runs the test with a different " + bad);
    if (peer.max_qp_rd_atom != 0) o_.out_reads = std::min(o_.out_reads, peer.max_qp_rd_atom);
  }
}

void Perftest::exchange_dests() {
  // 5. one QP address each way per QP (the latency tests of WRITE, READ and atomics send the
  // first QP's once more before)
  const bool extra = mode_ == Mode::kLat && verb_ != Verb::kSend;
  // Selective repeat: each QP's address names the message index its QP receives from, drawn
  // by the kernel's generator (a blind forger must not know it; SrIndexBase).
  if (sr_) {
    std::random_device rd;
    for (auto& c : qps_) c.mine.srqn = rd();
  }
  for (std::size_t i = extra ? 0 : 1; i <= qps_.size(); ++i) {
    QpCtx& c = qps_[i == 0 ? 0 : i - 1];
    c.mine.out_reads = o_.out_reads;
    c.peer = exchange_dest(c.mine);
  }
}

// One QP address each way: perftest's text over TCP, its binary struct over rdma_cm.
pt::Dest Perftest::exchange_dest(const pt::Dest& mine) {
  if (cm_) {
    const auto m = pt::dest_bin(mine);
    std::array<std::uint8_t, pt::kDestBinLen> t{};
    oob_.exchange(m.data(), t.data(), pt::kDestBinLen);
    const auto d = pt::dest_of_bin(t);
    if (!d)
      fail("malformed QP address from the peer (QPN 0x" + std::to_string(wire::load_be32(&t[8])) +
           ", PSN " + std::to_string(wire::load_be32(&t[12])) + ")");
    return *d;
  }
  const auto m = pt::dest_msg(mine);
  std::array<char, pt::kDestLen> t{};
  oob_.exchange(m.data(), t.data(), pt::kDestLen);
  const auto d = pt::dest_of(t);
  if (!d) fail("malformed QP address from the peer: '" + printable(t.data(), t.size()) + "'");
  return *d;
}

// -R: a hand-shake with all-zero QP addresses (perftest's are not filled in yet), one rdma_cm
// connection per QP, and a hand-shake again. The CM moves the QPs to RTS.
void Perftest::connect_qps_rdma_cm() {
  oob_.exchange(pt::dest_bin(pt::Dest{}).data(), std::array<std::uint8_t, pt::kDestBinLen>{}.data(),
                pt::kDestBinLen);
  CmQpParams p;
  if (verb_ == Verb::kRead || verb_ == Verb::kAtomic)
    p.responder_resources = p.initiator_depth = static_cast<std::uint8_t>(o_.out_reads);
  std::vector<rc::Qp*> qps;
  for (auto& c : qps_) qps.push_back(c.qp);
  // --selective-repeat: the REQs offer it and the REPs accept it in ECE; the CM turns it on
  // when both did (and go-back-N with a peer that answers anything else).
  p.selective_repeat = o_.selective_repeat && sr_allowed();
  cm_->connect_qps(qps, p);
  if (p.selective_repeat) {
    const Qp* q = engine_qp(qps_[0].qp);
    sr_ = q != nullptr && q->req.sr;
  }
  std::array<std::uint8_t, pt::kDestBinLen> t{};
  oob_.exchange(pt::dest_bin(pt::Dest{}).data(), t.data(), pt::kDestBinLen);
  // The path MTU the CM chose (-R runs in-process: the engine's QP behind the Context's).
  mtu_enum_ = static_cast<int>(st_.env->eng.find_qp(qps_[0].qp->qp_num)->attr.path_mtu);
}

void Perftest::connect_qps() {
  const auto rip = ctl::ipv4_from_gid(qps_[0].peer.gid);
  if (!rip)
    fail("the peer's GID " + ctl::to_string(qps_[0].peer.gid) +
         " is not IPv4-mapped (use its RoCEv2 IPv4 GID index, -x)");
  // In-process we resolve the peer here; attached, roced does (an address vector without MAC).
  const wire::MacAddr mac = st_.env ? st_.env->resolve(*rip, 10) : wire::MacAddr{};
  for (auto& c : qps_) {
    // Selective repeat before RTR: this side's messages from the peer's receive index, the
    // peer's from ours.
    if (sr_ &&
        st_.env->eng.set_selective_repeat(engine_qp(c.qp), true, {c.peer.srqn, c.mine.srqn}) != kOk)
      fail("selective repeat refused on QP " + std::to_string(c.qp->qp_num));
    // Counted as the CM agent counts the connections it sets up with it (roced's
    // sr_connections, Prometheus and roce-ctl; review 22: TCP's went uncounted).
    if (sr_) st_.env->eng.count(Counter::kSrConnections);
    QpAttr a;
    a.qp_state = QpState::kRtr;
    a.path_mtu = mtu_of_enum(mtu_enum_);
    a.dest_qp_num = c.peer.qpn;
    a.rq_psn = c.peer.psn;
    a.max_dest_rd_atomic = static_cast<std::uint8_t>(o_.out_reads);
    a.min_rnr_timer = 12;
    a.ah.dgid = c.peer.gid;
    a.ah.dmac = mac;
    a.ah.hop_limit = 0xFF;
    if (ctx_.modify_qp(c.qp, a,
                       kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                           kQpMinRnrTimer) != kOk)
      fail("failed to modify QP to RTR");
    a.qp_state = QpState::kRts;
    a.sq_psn = c.mine.psn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic =
        static_cast<std::uint8_t>(std::min(std::max(c.peer.out_reads, 1u), kOurMaxRdAtomic));
    if (ctx_.modify_qp(
            c.qp, a,
            kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic) != kOk)
      fail("failed to modify QP to RTS");
  }
}

// A synchronisation point: a QP's address message (the first QP's by default), once each way.
// perftest takes the peer's addresses from the last one it read, so ours never change.
void Perftest::hand_shake(QpCtx* c) {
  if (c == nullptr) c = &qps_[0];
  const pt::Dest d = exchange_dest(c->mine);
  if (d.qpn != c->peer.qpn || d.rkey != c->peer.rkey || d.vaddr != c->peer.vaddr)
    fail("the peer's hand-shake message does not match its QP address (QPN " +
         std::to_string(d.qpn) + ", rkey " + std::to_string(d.rkey) + ")");
}

void Perftest::banner() {
  std::printf("%s\n", kLine);
  std::string title = std::string(verb_name(verb_)) + " ";
  if (verb_ == Verb::kAtomic) title += o_.cmp_and_swap ? "CMP_AND_SWAP " : "FETCH_AND_ADD ";
  title += mode_ == Mode::kBw ? "BW Test" : "Latency Test";
  std::printf("                    %s\n", title.c_str());
  std::printf(" Dual-port       : OFF\t\tDevice         : roce-dpdk\n");
  std::printf(" Number of qps   : %u\t\tTransport type : IB\n", o_.num_qp);
  std::printf(" Connection type : RC\t\tUsing SRQ      : OFF\n");
  std::printf(" PCIe relax order: OFF\n");
  std::printf(" ibv_wr* API     : OFF\n");
  if (client()) std::printf(" TX depth        : %u\n", o_.tx_depth);
  if (verb_ == Verb::kSend && !client()) std::printf(" RX depth        : %u\n", o_.rx_depth);
  if (mode_ == Mode::kBw) std::printf(" CQ Moderation   : %u\n", o_.cq_mod);
  std::printf(" Mtu             : %u[B]\n", pt::mtu_bytes_of_enum(mtu_enum_));
  std::printf(" Link type       : Ethernet\n");
  std::printf(" GID index       : 0\n");
  if (verb_ == Verb::kRead || verb_ == Verb::kAtomic)
    std::printf(" Outstand reads  : %u\n", o_.out_reads);
  else
    std::printf(" Max inline data : %u[B]\n", o_.inline_size);
  std::printf(" rdma_cm QPs\t : %s\n", cm_ ? "ON" : "OFF");
  std::printf(" Data ex. method : %s\n", cm_ ? "rdma_cm" : "Ethernet");
  std::printf("%s\n", kLine);
  std::fflush(stdout);
}

void Perftest::print_addresses() {
  const auto line = [&](const char* who, const pt::Dest& d) {
    std::printf(" %s address: LID %#04x QPN %#06x PSN %#06x", who, d.lid, d.qpn, d.psn);
    if (verb_ == Verb::kRead) std::printf(" OUT %#04x", d.out_reads);
    if (verb_ == Verb::kWrite || verb_ == Verb::kRead)
      std::printf(" RKey %#08x VAddr %#016llx", d.rkey, static_cast<unsigned long long>(d.vaddr));
    std::printf("\n GID: ");
    for (std::size_t i = 0; i < 16; ++i) std::printf(i ? ":%02d" : "%02d", d.gid.b[i]);
    std::printf("\n");
  };
  for (const auto& c : qps_) line("local", c.mine);
  for (const auto& c : qps_) line("remote", c.peer);
  std::fflush(stdout);
}

void Perftest::print_header() {
  std::printf("%s\n", kLine);
  if (mode_ == Mode::kBw)
    std::printf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n",
                o_.report_gbits ? "Gb/sec" : "MB/sec", o_.report_gbits ? "Gb/sec" : "MB/sec");
  else
    std::printf(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
        "t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] \n");
  std::fflush(stdout);
}

void Perftest::check(const Wc& wc) {
  if (wc.status != WcStatus::kSuccess)
    fail("completion with error: " + std::string(to_string(wc.status)) + " (QP " +
         std::to_string(wc.qp_num) + ")");
}

void Perftest::post(QpCtx& c, std::uint32_t size, bool signaled) {
  // Messages of at most half a cycle buffer walk it in cache-line-rounded steps (bw tests);
  // larger ones, and every latency test, use the start of the peer's buffer.
  const std::uint64_t cl = sys_.cache_line;
  const std::uint64_t step = size > cl ? (size + cl - 1) / cl * cl : cl;
  const bool walk = mode_ == Mode::kBw && size <= sys_.cycle_buffer / 2;
  const std::uint64_t off = walk ? (c.posted % (sys_.cycle_buffer / step)) * step : 0;
  Sge sge{reinterpret_cast<std::uint64_t>(c.buf) + off, size, c.mr->lkey};
  SendWr wr;
  wr.wr_id = c.posted;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = signaled ? std::uint32_t{kSendSignaled} : 0u;
  if (size <= o_.inline_size && verb_ != Verb::kRead && verb_ != Verb::kAtomic)
    wr.send_flags |= kSendInline;
  switch (verb_) {
    case Verb::kWrite:
      wr.opcode = WrOpcode::kWrite;
      wr.rdma = {c.peer.vaddr + off, c.peer.rkey};
      break;
    case Verb::kRead:
      wr.opcode = WrOpcode::kRead;
      wr.rdma = {c.peer.vaddr + off, c.peer.rkey};
      break;
    case Verb::kSend:
      wr.opcode = WrOpcode::kSend;
      break;
    case Verb::kAtomic:
      wr.opcode = o_.cmp_and_swap ? WrOpcode::kCmpSwap : WrOpcode::kFetchAdd;
      wr.atomic.remote_addr = c.peer.vaddr + off;
      wr.atomic.rkey = c.peer.rkey;
      wr.atomic.compare_add = o_.cmp_and_swap ? 0 : 1;
      wr.atomic.swap = 1;
      break;
  }
  if (const int rc = ctx_.post_send(c.qp, &wr, nullptr); rc != kOk)
    fail(std::string("post_send failed: ") + std::strerror(rc));
  ++c.posted;
}

pt::Report Perftest::bw_client(std::uint32_t size) {
  for (auto& c : qps_) c.posted = c.completed = 0;
  const std::uint64_t iters = o_.iters;
  const bool timed = o_.duration > 0;
  const std::uint64_t t0 = port::now_ns();
  const std::uint64_t end = t0 + std::uint64_t{o_.duration} * 1'000'000'000;
  std::uint64_t done_total = 0;
  // Peak: the best average rate from the first post to a completion, over every completion
  // after the first full window (earlier ones measure one round trip, not a rate).
  double peak = 0;
  bool stop = false;
  const bool ok = st_.poller.until(
      [&] {
        const std::uint64_t now = port::now_ns();
        if (timed && now >= end) stop = true;
        for (auto& c : qps_) {
          while (!stop && c.posted - c.completed < o_.tx_depth && (timed || c.posted < iters)) {
            const std::uint64_t n = c.posted + 1;
            post(c, size, n % o_.cq_mod == 0 || (!timed && n == iters));
          }
        }
        Wc wc[32];
        const int n = ctx_.poll_cq(scq_, 32, wc);
        if (n < 0) fail(std::string("poll_cq: ") + std::strerror(-n));
        if (n == 0) wait_events(scq_);
        for (int k = 0; k < n; ++k) {
          check(wc[k]);
          for (auto& c : qps_) {
            if (c.qp->qp_num != wc[k].qp_num) continue;
            const std::uint64_t upto = wc[k].wr_id + 1;
            done_total += upto - c.completed;
            c.completed = upto;
          }
        }
        if (n > 0 && done_total >= o_.tx_depth * qps_.size())
          peak = std::max(
              peak, static_cast<double>(done_total) / static_cast<double>(port::now_ns() - t0));
        bool all = true;
        for (auto& c : qps_) all = all && c.completed == c.posted && (stop || c.posted >= iters);
        return all && (!timed || stop);
      },
      timed ? o_.duration + o_.timeout_s : o_.timeout_s);
  if (!ok) fail("the test timed out with " + std::to_string(done_total) + " operations completed");
  const double secs = static_cast<double>(port::now_ns() - t0) / 1e9;
  const double avg_ops = static_cast<double>(done_total) / secs;
  return report_bw(size, done_total, secs, std::max(peak * 1e9, avg_ops));
}

void Perftest::post_recvs(QpCtx& c, std::uint32_t size, unsigned n) {
  c.recv_posted += n;
  // Into the second half, the receive side, as perftest (our SENDs leave from the first).
  Sge sge{reinterpret_cast<std::uint64_t>(c.buf) + half_, size, c.mr->lkey};
  RecvWr wr;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  for (unsigned i = 0; i < n; ++i)
    if (const int rc = ctx_.post_recv(c.qp, &wr, nullptr); rc != kOk)
      fail(std::string("post_recv failed: ") + std::strerror(rc));
}

void Perftest::bw_server_send(std::uint32_t size) {
  // Receives were posted before the start hand-shake; keep the queues full until the client's
  // end hand-shake is waiting on the socket (it comes after all its sends were acknowledged).
  std::uint64_t got = 0, t0 = 0;
  const auto drain = [&] {
    Wc wc[32];
    const int n = ctx_.poll_cq(rcq_, 32, wc);
    if (n < 0) fail(std::string("poll_cq: ") + std::strerror(-n));
    if (n == 0) wait_events(rcq_);
    for (int k = 0; k < n; ++k) {
      check(wc[k]);  // a SEND of another length than -s is fine (perftest does not look)
      if (got++ == 0) t0 = port::now_ns();
      for (auto& c : qps_)  // exactly -n receives per QP and size, as perftest posts
        if (c.qp->qp_num == wc[k].qp_num && c.recv_posted < o_.iters) post_recvs(c, size, 1);
    }
  };
  const double limit = (o_.duration ? o_.duration : 0) + o_.timeout_s;
  if (!st_.poller.until(
          [&] {
            drain();
            return oob_.readable();
          },
          limit))
    fail("the client did not finish (" + std::to_string(got) + " messages received)");
  drain();
  const double secs = got ? static_cast<double>(port::now_ns() - t0) / 1e9 : 0;
  report_bw(size, got, secs > 0 ? secs : 1e-9, 0);  // the receiver reports no peak
}

pt::Report Perftest::report_bw(std::uint32_t size, std::uint64_t iters, double secs,
                               double peak_ops) {
  // MB/sec is MiB per second; Gb/sec is 10^9 bits per second.
  const double bytes = static_cast<double>(size) * static_cast<double>(iters);
  const double unit = o_.report_gbits ? 125000000.0 : 1048576.0;
  pt::Report r;
  r.size = size;
  r.iters = iters;
  r.bw_avg = bytes / secs / unit;
  r.bw_peak = peak_ops * size / unit;
  r.msg_rate = static_cast<double>(iters) / secs / 1e6;
  print_bw_row(size, iters, r.bw_peak, r.bw_avg, r.msg_rate);
  json_rows_ << (json_rows_.tellp() > 0 ? "," : "") << "{\"bytes\":" << size
             << ",\"iterations\":" << iters << ",\"seconds\":" << secs
             << ",\"bw_peak\":" << r.bw_peak << ",\"bw_avg\":" << r.bw_avg << ",\"unit\":\""
             << (o_.report_gbits ? "Gb/sec" : "MB/sec")
             << "\",\"gbit_per_sec\":" << bytes * 8 / secs / 1e9
             << ",\"msg_rate_mpps\":" << r.msg_rate << "}";
  return r;
}

void Perftest::print_bw_row(std::uint64_t size, std::uint64_t iters, double peak, double avg,
                            double rate) {
  if (o_.report_gbits && avg < 0.1)
    std::printf(" %-7llu    %llu           %-7.6f            %-7.6f            %-7.6f\n",
                static_cast<unsigned long long>(size), static_cast<unsigned long long>(iters), peak,
                avg, rate);
  else
    std::printf(" %-7llu    %-10llu       %-7.2f            %-7.2f\t\t   %-7.6f\n",
                static_cast<unsigned long long>(size), static_cast<unsigned long long>(iters), peak,
                avg, rate);
  std::fflush(stdout);
}

void Perftest::report_lat(std::uint32_t size, const std::vector<std::uint64_t>& stamps,
                          double factor) {
  // One sample per pair of consecutive posts: a round trip, divided by `factor`.
  std::vector<double> us;
  for (std::size_t i = 1; i < stamps.size(); ++i)
    us.push_back(static_cast<double>(stamps[i] - stamps[i - 1]) / 1e3 / factor);
  const LatStats s = lat_stats(us);
  std::printf(
      " %-7u %-7u          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     "
      "\t%-7.2f\t\t%-7.2f "
      "\t\t%-7.2f\n",
      size, o_.iters, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999);
  std::fflush(stdout);
  json_rows_ << (json_rows_.tellp() > 0 ? "," : "") << "{\"bytes\":" << size
             << ",\"iterations\":" << stamps.size() - 1 << ",\"t_min_usec\":" << s.min
             << ",\"t_max_usec\":" << s.max << ",\"t_typical_usec\":" << s.typical
             << ",\"t_avg_usec\":" << s.avg << ",\"t_stdev_usec\":" << s.stdev
             << ",\"p99_usec\":" << s.p99 << ",\"p99_9_usec\":" << s.p999 << "}";
}

void Perftest::lat_pingpong(std::uint32_t size) {
  // write_lat: the peer's WRITE lands at the start of the second half of our buffer (what we
  // advertised) and its last byte is the iteration number; we write from the first half. The
  // server writes first.
  // send_lat: SENDs, the client first. Each side waits for the peer's message, sends the next
  // and waits for its completion.
  QpCtx& c = qps_[0];
  const bool write = verb_ == Verb::kWrite;
  const std::uint64_t iters = o_.iters;
  volatile std::uint8_t* poll_byte = c.buf + half_ + size - 1;
  std::uint8_t* src = c.buf;
  std::uint64_t scnt = 0, rcnt = 0;
  bool in_flight = false;
  bool waiting = write ? client() : !client();
  std::vector<std::uint64_t> stamps;
  stamps.reserve(iters);
  const bool ok = st_.poller.until(
      [&] {
        if (waiting) {
          if (rcnt == iters) {
            waiting = false;
          } else if (write) {
            if (*poll_byte == static_cast<std::uint8_t>(rcnt + 1)) ++rcnt, waiting = false;
          } else {
            Wc wc;
            if (ctx_.poll_cq(rcq_, 1, &wc) == 1) {
              check(wc);  // of any length, as perftest
              ++rcnt;
              if (c.recv_posted < iters) post_recvs(c, size, 1);
              waiting = false;
            } else {
              wait_events(rcq_);
            }
          }
        }
        if (!waiting && !in_flight && scnt < iters) {
          src[size - 1] = static_cast<std::uint8_t>(scnt + 1);
          Sge sge{reinterpret_cast<std::uint64_t>(src), size, c.mr->lkey};
          SendWr wr;
          wr.wr_id = scnt;
          wr.sg_list = &sge;
          wr.num_sge = 1;
          wr.send_flags = kSendSignaled;
          if (size <= o_.inline_size) wr.send_flags |= kSendInline;
          wr.opcode = write ? WrOpcode::kWrite : WrOpcode::kSend;
          wr.rdma = {c.peer.vaddr, c.peer.rkey};
          stamps.push_back(port::now_ns());
          if (const int rc = ctx_.post_send(c.qp, &wr, nullptr); rc != kOk)
            fail(std::string("post_send failed: ") + std::strerror(rc));
          ++scnt;
          in_flight = true;
        }
        Wc wc;
        if (in_flight && ctx_.poll_cq(scq_, 1, &wc) == 1) {
          check(wc);
          in_flight = false;
          waiting = true;
        } else if (in_flight && !waiting) {
          wait_events(scq_);  // (-e) for the acknowledgement, which comes before the reply
        }
        return scnt == iters && rcnt == iters && !in_flight;
      },
      o_.timeout_s);
  if (!ok)
    fail("the latency test stalled after " + std::to_string(scnt) + " sends and " +
         std::to_string(rcnt) + " receives");
  report_lat(size, stamps, 2);  // a round trip between our posts is two one-way latencies
}

void Perftest::lat_client(std::uint32_t size) {
  // read_lat, atomic_lat: one operation at a time on the start of the peer's buffer.
  QpCtx& c = qps_[0];
  c.posted = c.completed = 0;
  std::vector<std::uint64_t> stamps;
  stamps.reserve(o_.iters);
  const bool ok = st_.poller.until(
      [&] {
        if (c.posted == c.completed && c.posted < o_.iters) {
          stamps.push_back(port::now_ns());
          post(c, size, true);
        }
        Wc wc[4];
        const int n = ctx_.poll_cq(scq_, 4, wc);
        if (n < 0) fail(std::string("poll_cq: ") + std::strerror(-n));
        if (n == 0) wait_events(scq_);
        for (int k = 0; k < n; ++k) check(wc[k]), ++c.completed;
        return c.completed == o_.iters;
      },
      o_.timeout_s);
  if (!ok) fail("the latency test stalled after " + std::to_string(c.completed) + " operations");
  report_lat(size, stamps, 1);
}

void Perftest::exchange_reports(const pt::Report& mine) {
  // Five exchanges of 8 bytes; the server's half carries nothing (perftest sends garbage).
  auto m = pt::encode(client() ? mine : pt::Report{});
  std::array<std::uint8_t, pt::kReportLen> t{};
  for (std::size_t off = 0; off < pt::kReportLen; off += 8)
    oob_.exchange(m.data() + off, t.data() + off, 8);
  if (client()) return;
  // The client's size may differ from our -s (before 6.28 nothing tells the server): perftest
  // prints the client's report as it is.
  const pt::Report r = pt::decode_report(t);
  print_bw_row(r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate);
}

void Perftest::close_connection() {
  hand_shake();
  // perftest before 6.17 writes "done" (nobody reads it); then it closes. Not over rdma_cm.
  if (!cm_ && pt::compare_versions(o_.version, "6.17") < 0) oob_.send("done", 5);
  oob_.drain_until_closed(2.0);
  oob_.close();
}

int Perftest::run() {
  apply_defaults();
  create_resources();
  if (client())
    std::printf("Connecting to %s:%u\n", o_.server.c_str(), o_.port);
  else
    std::printf(
        "\n************************************\n* Waiting for client to connect... "
        "*\n************************************\n");
  std::fflush(stdout);
  oob_.open();
  exchange_setup();  // V S M [NEG]
  create_buffers();
  const bool bw = mode_ == Mode::kBw;
  const bool read_or_atomic = verb_ == Verb::kRead || verb_ == Verb::kAtomic;
  if (cm_) connect_qps_rdma_cm();
  banner();
  exchange_dests();
  if (!cm_) connect_qps();
  print_addresses();
  if (o_.selective_repeat) {  // only when asked: perftest's own output otherwise
    // Why not, as the user can act on it (review 22: the FPGA card's QPs were reported as
    // roced's setting, and a server was told its client "did not accept").
    std::printf(" Selective repeat: %s\n",
                sr_                                ? "ON"
                : st_.env == nullptr               ? "OFF (not available attached)"
                : engine_qp(qps_[0].qp) == nullptr ? "OFF (the QPs are on the FPGA datapath card, "
                                                     "which runs go-back-N)"
                : !st_.env->eng.config().selective_repeat
                    ? "OFF (not allowed: roced's transport.selective_repeat)"
                : client() ? "OFF (the peer did not accept it: go-back-N)"
                           : "OFF (the peer did not offer it: go-back-N)");
    std::fflush(stdout);
  }
  std::vector<std::uint32_t> sizes;
  if (o_.all_sizes)
    for (std::uint32_t sz = 2; sz <= (1u << 23); sz *= 2) sizes.push_back(sz);
  else
    sizes.push_back(o_.size);
  const auto all_qps_hand_shake = [&] {
    for (auto& c : qps_) hand_shake(&c);
  };
  if (verb_ == Verb::kSend) {
    // send_bw, send_lat: H · H×N, then per size: receives · H · traffic [· H]; then C.
    hand_shake();
    all_qps_hand_shake();
    print_header();
    for (std::uint32_t size : sizes) {
      if (!bw || !client())
        for (auto& c : qps_) {
          c.recv_posted = 0;
          post_recvs(c, size, std::min(o_.rx_depth, o_.iters));
        }
      hand_shake();
      if (!bw)
        lat_pingpong(size);
      else if (client())
        bw_client(size);
      else
        bw_server_send(size);
      if (bw && o_.all_sizes) hand_shake();
    }
    std::printf("%s\n", kLine);
    close_connection();
  } else if (bw) {
    // write_bw, read_bw, atomic_bw: H×N · H, the client's traffic, then H · R · C. The
    // server prints the client's report.
    all_qps_hand_shake();
    hand_shake();
    print_header();
    pt::Report last;
    if (client())
      for (std::uint32_t size : sizes) last = bw_client(size);
    hand_shake();
    exchange_reports(last);
    if (client()) std::printf("%s\n", kLine);
    if (verb_ == Verb::kAtomic && !client()) std::printf("%s\n", kLine);
    close_connection();
    if (verb_ != Verb::kAtomic && !client()) std::printf("%s\n", kLine);
  } else {
    // write_lat, read_lat, atomic_lat: H×N · H, then the traffic; write_lat ends without any
    // exchange, read_lat and atomic_lat with C (their server waits in it throughout).
    all_qps_hand_shake();
    hand_shake();
    if (client() || !read_or_atomic) print_header();
    for (std::uint32_t size : sizes) {
      if (verb_ == Verb::kWrite)
        lat_pingpong(size);
      else if (client())
        lat_client(size);
    }
    std::printf("%s\n", kLine);
    if (read_or_atomic) close_connection();
  }
  oob_.close();
  write_json();
  // What the host lost beside the injected drops (review 22: on a busy host af_packet's ring
  // overflowed and the resends far exceeded --tx-drop's, with nothing to say why).
  if (const std::uint64_t m = rx_missed(); m != 0)
    std::fprintf(stderr,
                 "roce-perf: the port lost %llu frames on the way in (the NIC's imissed, or "
                 "af_packet's receive ring full): losses beside any --tx-drop/--rx-drop\n",
                 static_cast<unsigned long long>(m));
  return 0;
}

std::uint64_t Perftest::rx_missed() const {
  if (st_.env == nullptr || st_.env->port() == nullptr) return 0;  // attached, or roced's port
  return st_.env->port()->dev().stats().rx_missed;
}

void Perftest::write_json() {
  if (o_.json.empty()) return;
  std::ofstream j(o_.json);
  static constexpr const char* kVerb[] = {"write", "read", "send", "atomic"};
  j << "{\"test\":\"" << kVerb[static_cast<int>(verb_)] << (mode_ == Mode::kBw ? "_bw" : "_lat")
    << "\",\"role\":\"" << (client() ? "client" : "server") << "\",\"peer_version\":\""
    << peer_version_ << "\",\"mtu\":" << pt::mtu_bytes_of_enum(mtu_enum_)
    << ",\"qps\":" << o_.num_qp << ",\"rdma_cm\":" << (cm_ ? "true" : "false")
    << ",\"selective_repeat\":" << (sr_ ? "true" : "false")
    << ",\"attached\":" << (st_.env ? "false" : "true");
  if (st_.env) {  // the engine's counters (attached: roced's, from roce-ctl counters)
    const Engine& e = st_.env->eng;
    const port::PollLoop& l = st_.env->loop;
    j << ",\"retransmitted\":" << e.stats().get(Counter::kRetransmittedPackets)
      << ",\"retransmit_timeouts\":" << e.stats().get(Counter::kRetransmitTimeouts)
      << ",\"retransmit_probes\":" << e.stats().get(Counter::kRetransmitProbes)
      << ",\"seq_err_naks_sent\":" << e.stats().get(Counter::kSeqErrNakSent)
      << ",\"seq_err_naks_received\":" << e.stats().get(Counter::kSeqErrNakRcvd)
      << ",\"duplicate_requests\":" << e.stats().get(Counter::kDuplicateRequests)
      << ",\"read_rerequests\":" << e.stats().get(Counter::kReadReRequests)
      << ",\"read_rerequest_bytes\":" << e.stats().get(Counter::kReadReRequestBytes)
      << ",\"read_responses_sent\":" << e.stats().get(Counter::kReadResponsesSent)
      << ",\"retransmitted_bytes\":" << e.stats().get(Counter::kRetransmittedBytes)
      << ",\"sr_retransmits\":" << e.stats().get(Counter::kSrRetransmits)
      << ",\"sr_connections\":" << e.stats().get(Counter::kSrConnections)
      << ",\"tx_dropped_injected\":" << (l.faults() ? l.faults()->stats().dropped : 0)
      << ",\"rx_dropped_injected\":" << (l.rx_faults() ? l.rx_faults()->stats().dropped : 0)
      << ",\"port_rx_missed\":" << rx_missed();
  }
  j << ",\"results\":[" << json_rows_.str() << "]}\n";
}

/// libroce's in-process backend on the test's engine; the test polls the loop itself.
std::unique_ptr<rc::Context> open_local_ctx(Env& env) {
  rc::LocalOptions lo = env.local_options();
  lo.progress = nullptr;  // the test polls the loop itself
  lo.cm_connections = env.cm_connections;
  return rc::open_local(std::move(lo));
}

}  // namespace

int run_perftest(Env& env, Exchange& oob, const Opts& o, Verb verb, Mode mode) {
  std::unique_ptr<rc::Context> ctx;
  if (env.open_card && !o.rdma_cm && (verb == Verb::kWrite || verb == Verb::kRead)) {
    ctx = env.open_card();
    if (!ctx) fail(std::string("cannot open the datapath card: ") + std::strerror(errno));
    std::printf(" QPs on the FPGA datapath card (offload: datapath)\n");
  } else {
    ctx = open_local_ctx(env);
  }
  Perftest t(Stack{env, *ctx, env.gid, &env}, oob, o, verb, mode);
  return t.run();
}

int run_perftest_attached(const Opts& o, Verb verb, Mode mode) {
  if (o.rdma_cm)
    fail(
        "-R (rdma_cm) is not available attached: the connection manager does not go through the "
        "socket yet");
  AttachedEnv env(o.attach, o.attach_port, o.events);
  Oob oob(env, o.server, o.port, o.timeout_s);
  Perftest t(Stack{env, env.ctx(), env.ctx().port().gid, nullptr}, oob, o, verb, mode);
  return t.run();
}

int run_perftest(const Opts& o, Verb verb, Mode mode) {
  Env env(o.link);
  if (o.rdma_cm) {
    // The tested QPs and the communication connection on one Context, whose rdma_cm takes
    // the path MTU from the link, as the kernel's does from the netdev.
    const auto ctx = open_local_ctx(env);
    CmExchange ex(env, *ctx, o.server, o.port, o.timeout_s);
    Perftest t(Stack{env, *ctx, env.gid, &env}, ex, o, verb, mode);
    return t.run();
  }
  Oob oob(env, o.server, o.port, o.timeout_s);
  return run_perftest(env, oob, o, verb, mode);
}

}  // namespace roce::perf
