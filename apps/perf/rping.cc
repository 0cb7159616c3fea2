/// @file
/// librdmacm's rping (rdma-core librdmacm/examples/rping.c) spoken by the appliance, in both
/// roles. rdma_cm connects the RC QPs (REQ/REP/RTU on QP1 through CmAgent, service ID
/// RDMA_PS_TCP << 16 | port, a cma header with both IPs); there is no TCP exchange.
///
/// One ping (roce-wire-reference 5.9 step 4), every message a 16-byte SEND of
/// {be64 addr, be32 rkey, be32 len}:
///   client: descriptor of its start buffer      -> server RDMA READs len bytes of it
///   server: "go ahead" (16 zero bytes)          -> client: descriptor of its sink buffer
///   server: RDMA WRITE of strlen + 1 bytes there, then "go ahead"
/// The client's start buffer is "rdma-ping-N: " followed by an ASCII ramp 'A'..'z' that starts
/// one letter later at every ping, NUL-terminated at size - 1. The client ends with a DREQ.
/// Our side checks every byte it receives: the server the data it READs against the ramp, the
/// client the data written back against what it sent (rping's -V).
///
/// -P (persistent server, as librdmacm's, but one client at a time): after each connection the
/// server frees its QP and serves the next client. A client that vanishes without a DREQ
/// (killed, unplugged) is found by a keepalive probe: when the client has been silent for
/// --keepalive seconds, the server RDMA READs one byte of the buffer it last advertised. With
/// nobody answering, the probe fails when the transport's retries run out; rdma_cm's retry
/// count is 7, which our engine (as rxe) retries without end, so the server also gives up on a
/// probe unanswered for 8 local ACK timeouts (what retry count 7 means in IBA). Then it
/// disconnects (its DREQ is retransmitted and times out as the CM's timers say), releases the
/// QP from the CM and destroys it. The QP count (engine) is printed after every connection.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <random>
#include <vector>

#include "apps/perf/cm_tools.h"
#include "apps/perf/tools.h"
#include "controlplane/address.h"

namespace roce::perf {

using namespace roce::engine;
using namespace roce::runtime;
namespace cm = roce::cm;
namespace po = boost::program_options;

namespace {

constexpr std::size_t kInfoSize = 16;      // struct rping_rdma_info
constexpr std::uint32_t kMinSize = 26;     // RPING_MIN_BUFSIZE
constexpr std::uint32_t kMaxSize = 65535;  // RPING_BUFSIZE - 1
constexpr unsigned kRecvSlots = 4;         // rping keeps one posted; more never hurts
constexpr std::size_t kRecvSlotSize = 64;  // larger than 16, to report a bogus length

struct RpingOpts {
  ToolFlags lf;
  bool server = false;
  std::string addr;  ///< server: bind address (empty: any); client: the server's RoCE IP
  unsigned port = 7174;
  unsigned count = 0;  ///< 0: until the peer disconnects (server) / forever (client)
  unsigned size = 64;
  bool verbose = false, validate = false;
  bool persistent = false;       ///< -P: serve one client after another
  unsigned max_connections = 0;  ///< -P: exit after this many connections (0: never)
  double keepalive = 2;          ///< server: probe a client silent for this long (0: never)
};

/// rping's client buffer for ping `ping`: "rdma-ping-%d: ", then 'A' + ping % 58 counting up
/// to 'z' and wrapping to 'A', with a NUL in the last byte.
void fill_ping(std::uint8_t* buf, std::uint32_t size, unsigned ping) {
  char* b = reinterpret_cast<char*>(buf);
  const int cc = std::snprintf(b, size, "rdma-ping-%d: ", static_cast<int>(ping));
  unsigned char c = static_cast<unsigned char>(65 + ping % 58);
  for (std::uint32_t i = static_cast<std::uint32_t>(cc); i < size; ++i) {
    buf[i] = c;
    if (++c > 122) c = 65;
  }
  buf[size - 1] = 0;
}

struct Info {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0, len = 0;
};

void encode_info(const Info& i, std::uint8_t* p) {
  wire::store_be64(p, i.addr);
  wire::store_be32(p + 8, i.rkey);
  wire::store_be32(p + 12, i.len);
}
Info decode_info(const std::uint8_t* p) {
  return {wire::load_be64(p), wire::load_be32(p + 8), wire::load_be32(p + 12)};
}

/// One rping connection: the CM agent on QP1, an RC QP, rping's buffers and the poll step.
class Session {
 public:
  Session(Env& env, const RpingOpts& o)
      : env_(env),
        eng_(env.eng),
        o_(o),
        agent_(eng_, cm_agent_config(env), [this](const cm::CmEvent& e) { on_event(e); }) {
    pd_ = eng_.alloc_pd();
    cq_ = eng_.create_cq(64);
    recv_buf_.resize(kRecvSlots * kRecvSlotSize);
    send_buf_.resize(kInfoSize);
    rdma_buf_.resize(o.size);
    start_buf_.resize(o.size);
    const std::uint32_t remote = kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite;
    recv_mr_ = eng_.reg_mr(pd_, recv_buf_.data(), recv_buf_.size(), kAccessLocalWrite);
    send_mr_ = eng_.reg_mr(pd_, send_buf_.data(), send_buf_.size(), 0);
    rdma_mr_ = eng_.reg_mr(pd_, rdma_buf_.data(), rdma_buf_.size(), remote);
    start_mr_ = eng_.reg_mr(pd_, start_buf_.data(), start_buf_.size(), remote);
    probe_mr_ = eng_.reg_mr(pd_, probe_buf_.data(), probe_buf_.size(), kAccessLocalWrite);
    if (!pd_ || !cq_ || !recv_mr_ || !send_mr_ || !rdma_mr_ || !start_mr_ || !probe_mr_)
      fail("cannot create resources");
  }
  ~Session() {
    release_qp();
    for (Mr* m : {recv_mr_, send_mr_, rdma_mr_, start_mr_, probe_mr_})
      if (m) eng_.dereg_mr(m);
    if (cq_) eng_.destroy_cq(cq_);
    if (pd_) eng_.dealloc_pd(pd_);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Unbinds the QP from the CM (disconnecting it if still up) and destroys it.
  void release_qp() {
    if (!qp_) return;
    agent_.release(qp_);
    eng_.destroy_qp(qp_);
    qp_ = nullptr;
  }

  /// Ends the current connection (server): DREQ if it is still up, QP released and destroyed,
  /// the per-connection state cleared for the next client.
  void end_connection() {
    closing_ = true;
    release_qp();
    step();
    conn.reset();
    request.reset();
    rejected.reset();
    established = timewait_done = unreachable = false;
    disconnected_ = closing_ = false;
    broken_.reset();
    recvs_.clear();
    rdma_done_ = 0;
    probe_from_.reset();
    probe_in_flight_ = false;
  }

  /// Keepalive (server): while waiting, probe a client silent for `seconds` with a one-byte
  /// RDMA READ of `from` (the buffer it advertised last).
  void keepalive(double seconds, const Info& from) {
    keepalive_s_ = seconds;
    probe_from_ = from;
  }

  cm::CmAgent& agent() { return agent_; }
  std::uint8_t* rdma_buf() { return rdma_buf_.data(); }
  std::uint8_t* start_buf() { return start_buf_.data(); }
  Mr* rdma_mr() { return rdma_mr_; }
  Mr* start_mr() { return start_mr_; }

  /// A fresh RC QP in INIT with its receives posted (rping: max_send_wr 16, max_recv_wr 2).
  Qp* new_qp() {
    release_qp();
    qp_ = eng_.create_qp(pd_, QpType::kRc, cq_, cq_, QpCap{16, kRecvSlots, 1, 1, 0});
    if (!qp_) fail("cannot create a QP");
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qp_access_flags = kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite;
    if (eng_.modify_qp(qp_, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk)
      fail("failed to modify QP to INIT");
    for (unsigned i = 0; i < kRecvSlots; ++i) post_recv(i);
    return qp_;
  }
  Qp* qp() { return qp_; }

  /// Polls the dataplane, the CM and the CQ until `done()`, the peer disconnects, the
  /// connection breaks (a failed completion, an unanswered keepalive probe), or the timeout
  /// (fatal, naming `what`).
  template <class F>
  void wait(F&& done, const std::string& what) {
    last_heard_ = port::now_ns();
    if (!env_.until(
            [&] {
              step();
              maybe_probe();
              return done() || disconnected_ || broken_;
            },
            o_.lf.timeout_s))
      fail("timed out waiting for " + what);
  }

  void step() {
    agent_.poll(port::now_ns());
    Wc wc[16];
    int n;
    while ((n = eng_.poll_cq(cq_, 16, wc)) > 0) {
      for (int k = 0; k < n; ++k) complete(wc[k]);
    }
  }

  void send_info(const Info& i) {
    encode_info(i, send_buf_.data());
    post(WrOpcode::kSend, send_buf_.data(), kInfoSize, send_mr_, {});
  }
  void send_go_ahead() {
    std::memset(send_buf_.data(), 0, kInfoSize);  // rping's server never fills its send buffer
    post(WrOpcode::kSend, send_buf_.data(), kInfoSize, send_mr_, {});
  }
  void post(WrOpcode op, std::uint8_t* buf, std::uint32_t len, Mr* mr, const Info& remote) {
    Sge sge{reinterpret_cast<std::uint64_t>(buf), len, mr->key};
    SendWr wr;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = kSendSignaled;
    wr.rdma.remote_addr = remote.addr;
    wr.rdma.rkey = remote.rkey;
    if (eng_.post_send(qp_, &wr, nullptr) != kOk) fail("post_send failed");
  }

  /// DREQ (the QP moves to error at once: its receives flush); waits for the DREP.
  void disconnect() {
    closing_ = true;
    if (agent_.cm().disconnect(*conn) != cm::CmStatus::kOk) fail("cannot disconnect");
    wait([] { return false; }, "the DREP");
  }

  /// The next 16-byte message, or nullopt when the peer disconnected first.
  std::optional<Info> recv_info(const std::string& what) {
    wait([&] { return !recvs_.empty(); }, what);
    if (broken_) fail("the connection broke waiting for " + what + ": " + *broken_);
    if (recvs_.empty()) return std::nullopt;
    const Info i = recvs_.front();
    recvs_.pop_front();
    return i;
  }
  /// Waits for the completion of our last READ or WRITE.
  void wait_rdma(const std::string& what) {
    wait([&] { return rdma_done_ > 0; }, what);
    if (broken_) fail(what + " failed: " + *broken_);
    if (rdma_done_ == 0) fail("the peer disconnected while waiting for " + what);
    --rdma_done_;
  }

  std::optional<cm::ConnId> conn;
  bool established = false, timewait_done = false;
  std::uint64_t t_start = 0, t_end = 0;  ///< first ping sent / received, last ping done
  std::optional<cm::CmEvent> request, rejected;
  bool unreachable = false;
  unsigned probes = 0;  ///< keepalive probes sent

 private:
  void on_event(const cm::CmEvent& e) {
    switch (e.type) {
      case cm::CmEventType::kConnectRequest:
        if (request) {  // rping serves one connection
          agent_.cm().reject(e.id);
          break;
        }
        request = e;
        break;
      case cm::CmEventType::kEstablished:
        established = true;
        break;
      case cm::CmEventType::kRejected:
        rejected = e;
        break;
      case cm::CmEventType::kUnreachable:
      case cm::CmEventType::kConnectError:
        unreachable = true;
        break;
      case cm::CmEventType::kDisconnected:
        if (conn && e.id == *conn) disconnected_ = true;
        break;
      case cm::CmEventType::kTimewaitExit:
        if (conn && e.id == *conn) timewait_done = true;
        break;
      default:
        break;
    }
  }

  void maybe_probe() {
    if (keepalive_s_ <= 0 || !probe_from_ || !qp_ || disconnected_ || broken_) return;
    const std::uint64_t now = port::now_ns();
    if (probe_in_flight_) {
      // 8 local ACK timeouts: the transport's first try and 7 retries.
      const std::uint64_t limit = 8 * (std::uint64_t{4096} << qp_->attr.timeout);
      if (now - probe_sent_ > limit) {
        char why[96];
        std::snprintf(why, sizeof why, "the keepalive probe went unanswered for %.1f s",
                      static_cast<double>(now - probe_sent_) / 1e9);
        broken_ = why;
      }
      return;
    }
    if (now - last_heard_ < static_cast<std::uint64_t>(keepalive_s_ * 1e9)) return;
    Sge sge{reinterpret_cast<std::uint64_t>(probe_buf_.data()), 1, probe_mr_->key};
    SendWr wr;
    wr.wr_id = kProbeId;
    wr.opcode = WrOpcode::kRead;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = kSendSignaled;
    wr.rdma.remote_addr = probe_from_->addr;
    wr.rdma.rkey = probe_from_->rkey;
    if (eng_.post_send(qp_, &wr, nullptr) != kOk) fail("post_send of the keepalive probe failed");
    probe_in_flight_ = true;
    probe_sent_ = now;
    ++probes;
  }

  void complete(const Wc& wc) {
    last_heard_ = port::now_ns();
    if (wc.wr_id == kProbeId && wc.status == WcStatus::kSuccess) {
      probe_in_flight_ = false;
      return;
    }
    if (wc.status != WcStatus::kSuccess) {
      if (wc.status == WcStatus::kWrFlushErr && (disconnected_ || closing_ || broken_)) return;
      // The peer is gone (retries exhausted) or misbehaves: the QP is in error now.
      if (!broken_) broken_ = std::string(to_string(wc.status));
      return;
    }
    switch (wc.opcode) {
      case WcOpcode::kRecv: {
        if (wc.byte_len != kInfoSize)
          fail("received bogus data, size " + std::to_string(wc.byte_len));
        // The first data on a connection whose RTU is late: COMM_EST.
        if (!established && conn) agent_.cm().notify_established(*conn);
        const auto slot = static_cast<std::uint32_t>(wc.wr_id);
        recvs_.push_back(decode_info(recv_buf_.data() + slot * kRecvSlotSize));
        post_recv(slot);
        break;
      }
      case WcOpcode::kRdmaRead:
      case WcOpcode::kRdmaWrite:
        ++rdma_done_;
        break;
      default:
        break;
    }
  }

  void post_recv(std::uint32_t slot) {
    Sge sge{reinterpret_cast<std::uint64_t>(recv_buf_.data() + slot * kRecvSlotSize),
            static_cast<std::uint32_t>(kRecvSlotSize), recv_mr_->key};
    RecvWr wr;
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (eng_.post_recv(qp_, &wr, nullptr) != kOk) fail("post_recv failed");
  }

  static constexpr std::uint64_t kProbeId = ~0ull;

  Env& env_;
  Engine& eng_;
  const RpingOpts& o_;
  std::array<std::uint8_t, 8> probe_buf_{};
  Mr* probe_mr_ = nullptr;
  double keepalive_s_ = 0;
  std::optional<Info> probe_from_;
  bool probe_in_flight_ = false;
  std::uint64_t probe_sent_ = 0, last_heard_ = 0;
  std::optional<std::string> broken_;  ///< why the connection broke, if it did
  Pd* pd_ = nullptr;
  Cq* cq_ = nullptr;
  Qp* qp_ = nullptr;
  std::vector<std::uint8_t> recv_buf_, send_buf_, rdma_buf_, start_buf_;
  Mr *recv_mr_ = nullptr, *send_mr_ = nullptr, *rdma_mr_ = nullptr, *start_mr_ = nullptr;
  std::deque<Info> recvs_;
  unsigned rdma_done_ = 0;
  bool disconnected_ = false, closing_ = false;
  cm::CmAgent agent_;
};

std::string printable(const std::uint8_t* b, std::size_t n) {
  return std::string(reinterpret_cast<const char*>(b),
                     strnlen(reinterpret_cast<const char*>(b), n));
}

/// Client: connect (retrying while nobody listens yet), ping, disconnect. Returns the pings.
unsigned run_client(Env& env, Session& s, const RpingOpts& o) {
  const auto ip = ctl::parse_ipv4(o.addr);
  if (!ip) fail("-a must be the server's IPv4 address");
  env.resolve(*ip, 10);
  std::mt19937 rng(std::random_device{}());
  const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(o.lf.timeout_s * 1e9);
  for (unsigned attempt = 0;; ++attempt) {
    s.rejected.reset();
    s.unreachable = false;
    s.established = false;
    cm::ConnectParams p;
    p.peer.gid = ctl::gid_from_ipv4(*ip);
    p.service_id = cm::service_id(cm::PortSpace::kTcp, static_cast<std::uint16_t>(o.port));
    p.starting_psn = wire::Psn(rng());
    p.cma = cm::CmaHeader::ipv4(env.ip, cm::ephemeral_port(), *ip);
    s.conn = s.agent().connect(s.new_qp(), p);
    if (!s.conn) fail("cannot send the connect request");
    s.wait([&] { return s.established || s.rejected || s.unreachable; }, "the connection");
    if (s.established) break;
    if (s.unreachable) fail("cma event UNREACHABLE: no answer from " + o.addr);
    const cm::RejReason why = s.rejected->reason;
    if ((why != cm::RejReason::kInvalidServiceId && why != cm::RejReason::kStaleConn) ||
        port::now_ns() > end)
      fail("cma event REJECTED, reason " + std::to_string(static_cast<unsigned>(why)));
    // REJ 8: nobody listens on the port yet (rping -s may still be starting). REJ 10: the
    // server still remembers our QPN from an earlier connection of this address (a process of
    // ours that died; our engine numbers QPs from the same first QPN) until that connection's
    // DREQ is answered and its timewait ends.
    env.until([] { return false; }, 0.5);
    if (attempt == 0 && why == cm::RejReason::kStaleConn)
      std::printf("the server still holds a stale connection of ours, retrying\n");
    else if (attempt == 0)
      std::printf("no listener on port %u yet, retrying\n", o.port);
  }
  std::printf("connected to %s port %u (QPN 0x%06x -> 0x%06x)\n", o.addr.c_str(), o.port,
              s.qp()->qpn, s.qp()->attr.dest_qp_num);
  unsigned ping = 0;
  s.t_start = port::now_ns();
  for (; o.count == 0 || ping < o.count; ++ping) {
    fill_ping(s.start_buf(), o.size, ping);
    s.send_info({reinterpret_cast<std::uint64_t>(s.start_buf()), s.start_mr()->key, o.size});
    if (!s.recv_info("the server's go-ahead after its READ"))
      fail("the server disconnected at ping " + std::to_string(ping));
    std::memset(s.rdma_buf(), 0, o.size);
    s.send_info({reinterpret_cast<std::uint64_t>(s.rdma_buf()), s.rdma_mr()->key, o.size});
    if (!s.recv_info("the server's go-ahead after its WRITE"))
      fail("the server disconnected at ping " + std::to_string(ping));
    if (std::memcmp(s.start_buf(), s.rdma_buf(), o.size) != 0) {
      std::size_t i = 0;
      while (s.start_buf()[i] == s.rdma_buf()[i]) ++i;
      fail("data mismatch at ping " + std::to_string(ping) + ", byte " + std::to_string(i));
    }
    if (o.verbose) std::printf("ping data: %s\n", printable(s.rdma_buf(), o.size).c_str());
  }
  s.t_end = port::now_ns();
  // Let the last ACKs go out, then DREQ (the QP moves to error at once).
  env.until([] { return false; }, 0.01);
  s.disconnect();
  return ping;
}

/// Server, one connection: accept the next client, serve pings until it disconnects. Throws
/// TestFailure when the client misbehaves or vanishes.
unsigned serve_one(Env& env, Session& s, const RpingOpts& o,
                   const std::optional<wire::Ipv4Addr>& bind) {
  for (;;) {
    // A persistent server waits for its next client as long as it takes.
    if (o.persistent)
      env.until(
          [&] {
            s.step();
            return s.request.has_value();
          },
          1e9);
    s.wait([&] { return s.request.has_value(); }, "a connect request");
    const cm::CmEvent& req = *s.request;
    const bool v4 = req.cma && req.cma->ip_version == 4;
    if (v4 && (!bind || req.cma->dst_ipv4() == *bind)) break;
    std::printf("rejecting a connect request for another address\n");
    s.agent().cm().reject(req.id, cm::RejReason::kInvalidServiceId);
    s.request.reset();
  }
  const cm::CmEvent req = *s.request;
  const auto peer_ip = ctl::ipv4_from_gid(req.peer.gid);
  if (!peer_ip) fail("the client's GID " + ctl::to_string(req.peer.gid) + " is not IPv4-mapped");
  env.resolve(*peer_ip, 10);  // before the REP: the QP's path needs the MAC
  cm::AcceptParams ap;
  ap.starting_psn = wire::Psn(std::random_device{}());
  s.conn = req.id;
  if (s.agent().accept(req.id, s.new_qp(), ap) != cm::CmStatus::kOk)
    fail("cannot accept the connection");
  std::printf("accepted %s port %u (QPN 0x%06x -> 0x%06x)\n", ctl::to_string(*peer_ip).c_str(),
              req.cma->src_port, s.qp()->qpn, s.qp()->attr.dest_qp_num);
  std::fflush(stdout);
  std::vector<std::uint8_t> expect(kMaxSize);
  unsigned ping = 0;
  for (;; ++ping) {
    const auto src = s.recv_info("the client's source descriptor");
    if (!src) break;  // DREQ: the client is done
    if (ping == 0) s.t_start = port::now_ns();
    if (src->len == 0 || src->len > o.size)
      fail("ping " + std::to_string(ping) + ": the client offers " + std::to_string(src->len) +
           " bytes, our buffer holds " + std::to_string(o.size) + " (-S)");
    if (o.keepalive > 0) s.keepalive(o.keepalive, *src);
    s.post(WrOpcode::kRead, s.rdma_buf(), src->len, s.rdma_mr(), *src);
    s.wait_rdma("the RDMA READ");
    if (src->len >= kMinSize) {
      fill_ping(expect.data(), src->len, ping);
      if (std::memcmp(expect.data(), s.rdma_buf(), src->len) != 0) {
        std::size_t i = 0;
        while (expect[i] == s.rdma_buf()[i]) ++i;
        fail("ping " + std::to_string(ping) + ": the data READ differs from rping's at byte " +
             std::to_string(i));
      }
    }
    if (o.verbose) std::printf("server ping data: %s\n", printable(s.rdma_buf(), src->len).c_str());
    s.send_go_ahead();
    const auto sink = s.recv_info("the client's sink descriptor");
    if (!sink) fail("the client disconnected in the middle of ping " + std::to_string(ping));
    const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::size_t>(
        {strnlen(reinterpret_cast<const char*>(s.rdma_buf()), src->len) + 1, src->len, sink->len}));
    s.post(WrOpcode::kWrite, s.rdma_buf(), n, s.rdma_mr(), *sink);
    s.wait_rdma("the RDMA WRITE");
    s.send_go_ahead();
    s.t_end = port::now_ns();
  }
  std::printf("server DISCONNECT EVENT...\n");
  // Timewait: a DREQ repeated because our DREP was lost is answered again.
  env.until(
      [&] {
        s.step();
        return s.timewait_done;
      },
      3);
  if (o.count != 0 && ping != o.count)
    fail("served " + std::to_string(ping) + " pings, expected " + std::to_string(o.count));
  return ping;
}

/// What a (persistent) server did.
struct ServerResult {
  unsigned pings = 0;  ///< of the last connection
  unsigned connections = 0, failed = 0;
  std::size_t qps_baseline = 0, qps_after = 0;
};

/// Server: one connection, or with -P one after another; after each the QP is freed and the
/// engine's QP count must be back at its baseline.
ServerResult run_server(Env& env, Session& s, const RpingOpts& o) {
  std::optional<wire::Ipv4Addr> bind;
  if (!o.addr.empty() && o.addr != "0.0.0.0") {
    bind = ctl::parse_ipv4(o.addr);
    if (!bind) fail("-a must be an IPv4 address");
    if (*bind != env.ip) fail("-a " + o.addr + " is not our address (--ip)");
  }
  const std::uint64_t sid = cm::service_id(cm::PortSpace::kTcp, static_cast<std::uint16_t>(o.port));
  ServerResult r;
  r.qps_baseline = env.eng.qp_count();
  s.agent().cm().listen(sid);
  std::printf("listening on port %u (service ID 0x%016llx)%s\n", o.port,
              static_cast<unsigned long long>(sid), o.persistent ? ", persistent" : "");
  std::fflush(stdout);
  for (;;) {
    try {
      r.pings = serve_one(env, s, o, bind);
    } catch (const TestFailure& e) {
      if (!o.persistent) throw;
      ++r.failed;
      std::printf("connection %u failed: %s\n", r.connections + 1, e.what());
    }
    ++r.connections;
    s.end_connection();
    r.qps_after = env.eng.qp_count();
    std::printf("connection %u ended: QPs in use %zu (baseline %zu); keepalive probes so far %u\n",
                r.connections, r.qps_after, r.qps_baseline, s.probes);
    std::fflush(stdout);
    if (r.qps_after != r.qps_baseline)
      fail("the QP count did not return to its baseline after connection " +
           std::to_string(r.connections));
    if (!o.persistent || (o.max_connections != 0 && r.connections >= o.max_connections)) break;
  }
  return r;
}

}  // namespace

int rping_main(int argc, char** argv) {
  RpingOpts o;
  bool client = false;
  po::options_description rp(
      "Usage: roce-perf rping -s [-vV] [-S size] [-C count] [-a addr] [-p port] --iface IF\n"
      "       roce-perf rping -c [-vV] [-S size] [-C count] -a addr [-p port] --iface IF\n\n"
      "librdmacm's rping over rdma_cm (no TCP exchange)");
  rp.add_options()("help,h", "print this help")("server,s", po::bool_switch(&o.server),
                                                "server side")("client,c", po::bool_switch(&client),
                                                               "client side")(
      "addr,a", po::value(&o.addr), "server: address to bind to; client: the server's RoCE IP")(
      "port,p", po::value(&o.port)->default_value(o.port), "rdma_cm port")(
      "count,C", po::value(&o.count)->default_value(o.count), "ping count (0: no limit)")(
      "size,S", po::value(&o.size)->default_value(o.size), "ping data size (26..65535)")(
      "verbose,v", po::bool_switch(&o.verbose), "display ping data")(
      "validate,V", po::bool_switch(&o.validate),
      "validate ping data (always done; accepted for compatibility)")("debug,d",
                                                                      "accepted for compatibility")(
      "persistent,P", po::bool_switch(&o.persistent),
      "server: serve one client after another (one at a time)")(
      "max-connections", po::value(&o.max_connections)->default_value(o.max_connections),
      "with -P: exit after this many connections (0: never)")(
      "keepalive", po::value(&o.keepalive)->default_value(o.keepalive),
      "server: seconds a client may be silent before a one-byte RDMA READ probes it (0: never)");
  o.lf.add_to(rp);
  try {
    po::variables_map vm;
    if (!parse_args(argc, argv, rp, vm)) return 0;
    if (o.server == client) throw po::error("give exactly one of -s (server) and -c (client)");
    if (client && o.addr.empty()) throw po::error("the client needs -a ADDR");
    if (o.size < kMinSize || o.size > kMaxSize) throw po::error("-S must be 26..65535");
    if (o.port == 0 || o.port > 65535) throw po::error("-p must be 1..65535");
    if (o.persistent && !o.server) throw po::error("-P is a server option (-s)");
    if (o.max_connections != 0 && !o.persistent) throw po::error("--max-connections needs -P");
    if (o.keepalive < 0) throw po::error("--keepalive must not be negative");
    o.lf.finish();
  } catch (const po::error& e) {
    std::cerr << "roce-perf: " << e.what() << "\n(try roce-perf rping --help)\n";
    return 2;
  }
  try {
    unsigned pings = 0;
    double secs = 0;
    {
      Env env(o.lf.link);
      Session s(env, o);
      ServerResult sr;
      if (o.server)
        pings = (sr = run_server(env, s, o)).pings;
      else
        pings = run_client(env, s, o);
      secs = static_cast<double>(s.t_end - s.t_start) / 1e9;
      // The peer may still wait for our DREP's or last ACK's retransmission.
      env.until([] { return false; }, 0.1);
      const auto& st = env.eng.stats();
      std::printf("%u pings of %u bytes in %.2f seconds = %.1f usec/ping\n", pings, o.size, secs,
                  pings ? secs * 1e6 / pings : 0.0);
      std::printf("retransmitted %llu, timeouts %llu, RNR NAKs received %llu; CM MADs %llu/%llu\n",
                  static_cast<unsigned long long>(st.get(Counter::kRetransmittedPackets)),
                  static_cast<unsigned long long>(st.get(Counter::kRetransmitTimeouts)),
                  static_cast<unsigned long long>(st.get(Counter::kRnrNakRcvd)),
                  static_cast<unsigned long long>(s.agent().stats().mads_tx),
                  static_cast<unsigned long long>(s.agent().stats().mads_rx));
      if (!o.lf.json.empty()) {
        std::ofstream j(o.lf.json);
        j << "{\"test\":\"rping\",\"role\":\"" << (o.server ? "server" : "client")
          << "\",\"size\":" << o.size << ",\"pings\":" << pings << ",\"seconds\":" << secs
          << ",\"usec_per_ping\":" << (pings ? secs * 1e6 / pings : 0.0)
          << ",\"retransmitted\":" << st.get(Counter::kRetransmittedPackets);
        if (o.server)
          j << ",\"connections\":" << sr.connections << ",\"failed_connections\":" << sr.failed
            << ",\"keepalive_probes\":" << s.probes << ",\"qps_baseline\":" << sr.qps_baseline
            << ",\"qps_after\":" << sr.qps_after;
        j << ",\"qps_in_use\":" << env.eng.qp_count() << "}\n";
      }
    }
    port::eal_cleanup();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "roce-perf: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace roce::perf
