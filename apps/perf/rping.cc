/// @file
/// librdmacm's rping (rdma-core librdmacm/examples/rping.c) spoken by the appliance, in both
/// roles. rdma_cm connects the RC QPs (REQ/REP/RTU on QP1, service ID RDMA_PS_TCP << 16 |
/// port, a cma header with both IPs); there is no TCP exchange. The connection is the
/// connection layer's (include/roce/conn.h) on a libroce Context on the tool's own engine
/// (runtime::Env::local_options); the engine itself is read for the QP count and the QP's
/// ACK timeout.
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
/// closes the connection (conn::Endpoint::close: the DREQ, retransmitted and timed out as the
/// CM's timers say, and the QP destroyed at once). The QP count (engine) is printed after every
/// connection.
#include <roce/conn.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
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

using namespace roce::runtime;
using engine::Counter;
namespace po = boost::program_options;

namespace {

constexpr std::size_t kInfoSize = 16;              // struct rping_rdma_info
constexpr std::uint32_t kMinSize = 26;             // RPING_MIN_BUFSIZE
constexpr std::uint32_t kMaxSize = 65535;          // RPING_BUFSIZE - 1
constexpr unsigned kRecvSlots = 4;                 // rping keeps one posted; more never hurts
constexpr std::size_t kRecvSlotSize = 64;          // larger than 16, to report a bogus length
constexpr std::uint64_t kRdmaPsTcp = 0x0106;       // rdma_cm's port space of RC
constexpr std::uint32_t kRejInvalidServiceId = 8;  // IBA REJ reasons: nobody listens there,
constexpr std::uint32_t kRejStaleConn = 10;        // a connection of this QPN still held

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

/// One rping connection at a time on the connection layer (include/roce/conn.h), in-process
/// on the tool's own engine: rping's buffers, the connection's QP and the poll step.
class Session {
 public:
  Session(Env& env, const RpingOpts& o)
      : env_(env), o_(o), ctx_(open(env)), ep_(*ctx_, conn::Options{}) {
    // One buffer for all: the receive slots, the send message, rping's rdma and start
    // buffers, the probe's byte.
    const std::size_t recv = kRecvSlots * kRecvSlotSize, send = kInfoSize, probe = 8;
    buf_ = ctx_->alloc_buffer(recv + send + 2 * std::size_t{o.size} + probe);
    if (!buf_) fail("cannot create resources");
    auto* b = static_cast<std::uint8_t*>(buf_->addr);
    const std::uint32_t remote =
        verbs::kAccessLocalWrite | verbs::kAccessRemoteRead | verbs::kAccessRemoteWrite;
    client::Pd* pd = ep_.pd();
    recv_mr_ = ctx_->reg_mr(pd, b, recv, verbs::kAccessLocalWrite);
    send_mr_ = ctx_->reg_mr(pd, b + recv, send, 0);
    rdma_mr_ = ctx_->reg_mr(pd, b + recv + send, o.size, remote);
    start_mr_ = ctx_->reg_mr(pd, b + recv + send + o.size, o.size, remote);
    probe_mr_ = ctx_->reg_mr(pd, b + recv + send + 2 * std::size_t{o.size}, probe,
                             verbs::kAccessLocalWrite);
    if (!recv_mr_ || !send_mr_ || !rdma_mr_ || !start_mr_ || !probe_mr_)
      fail("cannot create resources");
  }
  ~Session() {
    if (conn) ep_.close(*conn);
    for (client::Mr* m : {recv_mr_, send_mr_, rdma_mr_, start_mr_, probe_mr_})
      if (m) ep_.dereg_mr(m);
    if (buf_) ctx_->free_buffer(buf_);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Ends the current connection (server): DREQ if it is still up, the QP destroyed now (the
  /// CM retransmits the DREQ without it), the per-connection state cleared for the next client.
  void end_connection() {
    closing_ = true;
    if (conn) ep_.close(*conn);
    if (request && (!conn || request->conn != *conn)) ep_.close(request->conn);
    step();
    conn.reset();
    request.reset();
    rejected.reset();
    established = unreachable = false;
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

  conn::Endpoint& endpoint() { return ep_; }
  std::uint8_t* rdma_buf() { return static_cast<std::uint8_t*>(rdma_mr_->addr); }
  std::uint8_t* start_buf() { return static_cast<std::uint8_t*>(start_mr_->addr); }
  client::Mr* rdma_mr() { return rdma_mr_; }
  client::Mr* start_mr() { return start_mr_; }

  /// rping's QP: max_send_wr 16, our receive slots.
  static conn::QpSizes sizes() { return {16, kRecvSlots, 1, 1}; }
  /// Posts every receive slot on the connection's fresh QP.
  void post_recvs() {
    for (unsigned i = 0; i < kRecvSlots; ++i) post_recv(i);
  }
  /// The engine's QP of the connection (in-process: for its QPN, its peer's and its ACK
  /// timeout).
  engine::Qp* qp() {
    client::Qp* q = conn ? ep_.qp(*conn) : nullptr;
    return q ? env_.eng.find_qp(q->qp_num) : nullptr;
  }

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
  /// Keeps the CM and the dataplane going for `seconds`.
  void linger(double seconds) {
    env_.until(
        [&] {
          step();
          return false;
        },
        seconds);
  }

  void step() {
    events_.clear();
    completions_.clear();
    ep_.poll(events_, completions_);
    for (conn::Event& e : events_) on_event(e);
    for (const conn::Completion& c : completions_)
      if (conn && c.conn == *conn) complete(c.wc);
  }

  void send_info(const Info& i) {
    encode_info(i, send_buf());
    post(client::WrOpcode::kSend, send_buf(), kInfoSize, send_mr_, {});
  }
  void send_go_ahead() {
    std::memset(send_buf(), 0, kInfoSize);  // rping's server never fills its send buffer
    post(client::WrOpcode::kSend, send_buf(), kInfoSize, send_mr_, {});
  }
  void post(client::WrOpcode op, std::uint8_t* buf, std::uint32_t len, client::Mr* mr,
            const Info& remote) {
    client::Sge sge{reinterpret_cast<std::uint64_t>(buf), len, mr->lkey};
    client::SendWr wr;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = verbs::kSendSignaled;
    wr.rdma.remote_addr = remote.addr;
    wr.rdma.rkey = remote.rkey;
    if (!conn || ep_.post_send(*conn, wr) != 0) fail("post_send failed");
  }

  /// DREQ (the QP moves to error at once: its receives flush); waits for the DREP.
  void disconnect() {
    closing_ = true;
    if (ep_.disconnect(*conn) != 0) fail("cannot disconnect");
    // No event follows our own disconnect: the connection is gone when the DREP came.
    wait([&] { return ep_.connections() == 0; }, "the DREP");
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

  std::optional<conn::ConnId> conn;
  bool established = false;
  std::uint64_t t_start = 0, t_end = 0;  ///< first ping sent / received, last ping done
  std::optional<conn::Event> request, rejected;
  bool unreachable = false;
  unsigned probes = 0;  ///< keepalive probes sent

 private:
  static std::unique_ptr<client::Context> open(Env& env) {
    client::LocalOptions lo = env.local_options("rping");
    lo.cm_connections = env.cm_connections;
    auto ctx = client::open_local(std::move(lo));
    if (!ctx) fail("cannot open the engine");
    return ctx;
  }
  std::uint8_t* send_buf() { return static_cast<std::uint8_t*>(send_mr_->addr); }
  std::uint8_t* recv_buf() { return static_cast<std::uint8_t*>(recv_mr_->addr); }

  void on_event(conn::Event& e) {
    switch (e.kind) {
      case conn::Event::kConnectRequest:
        if (request) {  // rping serves one connection
          ep_.reject(e.conn);
          break;
        }
        request = std::move(e);
        break;
      case conn::Event::kEstablished:
        if (conn && e.conn == *conn) established = true;
        break;
      case conn::Event::kRejected:
        if (conn && e.conn == *conn) rejected = std::move(e);
        break;
      case conn::Event::kUnreachable:
      case conn::Event::kConnectError:
        if (conn && e.conn == *conn) unreachable = true;
        break;
      case conn::Event::kDisconnected:
        if (conn && e.conn == *conn) disconnected_ = true;
        break;
    }
  }

  void maybe_probe() {
    if (keepalive_s_ <= 0 || !probe_from_ || !conn || disconnected_ || broken_) return;
    const std::uint64_t now = port::now_ns();
    if (probe_in_flight_) {
      // 8 local ACK timeouts: the transport's first try and 7 retries.
      const std::uint64_t limit = 8 * (std::uint64_t{4096} << probe_timeout_);
      if (now - probe_sent_ > limit) {
        char why[96];
        std::snprintf(why, sizeof why, "the keepalive probe went unanswered for %.1f s",
                      static_cast<double>(now - probe_sent_) / 1e9);
        broken_ = why;
      }
      return;
    }
    if (now - last_heard_ < static_cast<std::uint64_t>(keepalive_s_ * 1e9)) return;
    const engine::Qp* q = qp();
    if (!q) return;
    client::Sge sge{reinterpret_cast<std::uint64_t>(probe_mr_->addr), 1, probe_mr_->lkey};
    client::SendWr wr;
    wr.wr_id = kProbeId;
    wr.opcode = client::WrOpcode::kRead;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = verbs::kSendSignaled;
    wr.rdma.remote_addr = probe_from_->addr;
    wr.rdma.rkey = probe_from_->rkey;
    if (ep_.post_send(*conn, wr) != 0) fail("post_send of the keepalive probe failed");
    probe_in_flight_ = true;
    probe_sent_ = now;
    probe_timeout_ = q->attr.timeout;
    ++probes;
  }

  void complete(const client::Wc& wc) {
    last_heard_ = port::now_ns();
    if (wc.wr_id == kProbeId && wc.status == client::WcStatus::kSuccess) {
      probe_in_flight_ = false;
      return;
    }
    if (wc.status != client::WcStatus::kSuccess) {
      if (wc.status == client::WcStatus::kWrFlushErr && (disconnected_ || closing_ || broken_))
        return;
      // The peer is gone (retries exhausted) or misbehaves: the QP is in error now.
      if (!broken_) broken_ = std::string(verbs::to_string(wc.status));
      return;
    }
    switch (wc.opcode) {
      case client::WcOpcode::kRecv: {
        if (wc.byte_len != kInfoSize)
          fail("received bogus data, size " + std::to_string(wc.byte_len));
        const auto slot = static_cast<std::uint32_t>(wc.wr_id);
        recvs_.push_back(decode_info(recv_buf() + slot * kRecvSlotSize));
        post_recv(slot);
        break;
      }
      case client::WcOpcode::kRdmaRead:
      case client::WcOpcode::kRdmaWrite:
        ++rdma_done_;
        break;
      default:
        break;
    }
  }

  void post_recv(std::uint32_t slot) {
    client::Sge sge{reinterpret_cast<std::uint64_t>(recv_buf() + slot * kRecvSlotSize),
                    static_cast<std::uint32_t>(kRecvSlotSize), recv_mr_->lkey};
    client::RecvWr wr;
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (!conn || ep_.post_recv(*conn, wr) != 0) fail("post_recv failed");
  }

  static constexpr std::uint64_t kProbeId = ~0ull;

  Env& env_;
  const RpingOpts& o_;
  std::unique_ptr<client::Context> ctx_;
  conn::Endpoint ep_;
  client::Buffer* buf_ = nullptr;
  client::Mr *recv_mr_ = nullptr, *send_mr_ = nullptr, *rdma_mr_ = nullptr, *start_mr_ = nullptr,
             *probe_mr_ = nullptr;
  std::vector<conn::Event> events_;
  std::vector<conn::Completion> completions_;
  double keepalive_s_ = 0;
  std::optional<Info> probe_from_;
  bool probe_in_flight_ = false;
  std::uint8_t probe_timeout_ = 0;
  std::uint64_t probe_sent_ = 0, last_heard_ = 0;
  std::optional<std::string> broken_;  ///< why the connection broke, if it did
  std::deque<Info> recvs_;
  unsigned rdma_done_ = 0;
  bool disconnected_ = false, closing_ = false;
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
  const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(o.lf.timeout_s * 1e9);
  for (unsigned attempt = 0;; ++attempt) {
    s.rejected.reset();
    s.unreachable = false;
    s.established = false;
    const conn::ConnId c =
        s.endpoint().connect(*ip, static_cast<std::uint16_t>(o.port), Session::sizes());
    if (c == 0) fail("cannot send the connect request: " + std::string(std::strerror(errno)));
    s.conn = c;
    s.post_recvs();
    s.wait([&] { return s.established || s.rejected || s.unreachable; }, "the connection");
    if (s.established) break;
    s.conn.reset();  // the connection layer destroyed its QP
    if (s.unreachable) fail("cma event UNREACHABLE: no answer from " + o.addr);
    const std::uint32_t why = s.rejected->reason;
    if ((why != kRejInvalidServiceId && why != kRejStaleConn) || port::now_ns() > end)
      fail("cma event REJECTED, reason " + std::to_string(why));
    // REJ 8: nobody listens on the port yet (rping -s may still be starting). REJ 10: the
    // server still remembers our QPN from an earlier connection of this address (a process of
    // ours that died; our engine numbers QPs from the same first QPN) until that connection's
    // DREQ is answered and its timewait ends.
    s.linger(0.5);
    if (attempt == 0 && why == kRejStaleConn)
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
    s.send_info({reinterpret_cast<std::uint64_t>(s.start_buf()), s.start_mr()->rkey, o.size});
    if (!s.recv_info("the server's go-ahead after its READ"))
      fail("the server disconnected at ping " + std::to_string(ping));
    std::memset(s.rdma_buf(), 0, o.size);
    s.send_info({reinterpret_cast<std::uint64_t>(s.rdma_buf()), s.rdma_mr()->rkey, o.size});
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
  s.linger(0.01);
  s.disconnect();
  return ping;
}

/// Server, one connection: accept the next client, serve pings until it disconnects. Throws
/// TestFailure when the client misbehaves or vanishes.
unsigned serve_one(Env& env, Session& s, const RpingOpts& o) {
  // A persistent server waits for its next client as long as it takes.
  if (o.persistent)
    env.until(
        [&] {
          s.step();
          return s.request.has_value();
        },
        1e9);
  s.wait([&] { return s.request.has_value(); }, "a connect request");
  const conn::Event req = *s.request;
  env.resolve(req.peer, 10);  // before the REP: the QP's path needs the MAC
  s.conn = req.conn;
  if (s.endpoint().prepare(req.conn, Session::sizes()) != 0) fail("cannot accept the connection");
  s.post_recvs();
  if (s.endpoint().accept(req.conn) != 0) fail("cannot accept the connection");
  std::printf("accepted %s (QPN 0x%06x -> 0x%06x)\n", ctl::to_string(req.peer).c_str(), s.qp()->qpn,
              s.qp()->attr.dest_qp_num);
  std::fflush(stdout);
  std::vector<std::uint8_t> expect(kMaxSize);
  std::uint8_t ack_timeout = s.qp()->attr.timeout;
  unsigned ping = 0;
  for (;; ++ping) {
    const auto src = s.recv_info("the client's source descriptor");
    if (!src) break;  // DREQ: the client is done
    if (ping == 0) {
      s.t_start = port::now_ns();
      if (const engine::Qp* q = s.qp()) ack_timeout = q->attr.timeout;  // in RTS now
    }
    if (src->len == 0 || src->len > o.size)
      fail("ping " + std::to_string(ping) + ": the client offers " + std::to_string(src->len) +
           " bytes, our buffer holds " + std::to_string(o.size) + " (-S)");
    if (o.keepalive > 0) s.keepalive(o.keepalive, *src);
    s.post(client::WrOpcode::kRead, s.rdma_buf(), src->len, s.rdma_mr(), *src);
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
    s.post(client::WrOpcode::kWrite, s.rdma_buf(), n, s.rdma_mr(), *sink);
    s.wait_rdma("the RDMA WRITE");
    s.send_go_ahead();
    s.t_end = port::now_ns();
  }
  std::printf("server DISCONNECT EVENT...\n");
  // Timewait (the CM's: one local ACK timeout, at most 3 s here): a DREQ repeated because our
  // DREP was lost is answered again.
  s.linger(std::min(3.0, static_cast<double>(std::uint64_t{4096} << ack_timeout) / 1e9));
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
  if (!o.addr.empty() && o.addr != "0.0.0.0") {
    const auto bind = ctl::parse_ipv4(o.addr);
    if (!bind) fail("-a must be an IPv4 address");
    if (*bind != env.ip) fail("-a " + o.addr + " is not our address (--ip)");
  }
  const std::uint64_t sid = kRdmaPsTcp << 16 | o.port;  // rdma_cm's service ID
  ServerResult r;
  if (const int rc = s.endpoint().listen(static_cast<std::uint16_t>(o.port)))
    fail("cannot listen on port " + std::to_string(o.port) + ": " + std::strerror(rc));
  r.qps_baseline = env.eng.qp_count();  // the CM's QP1 included (made by the first listen)
  std::printf("listening on port %u (service ID 0x%016llx)%s\n", o.port,
              static_cast<unsigned long long>(sid), o.persistent ? ", persistent" : "");
  std::fflush(stdout);
  for (;;) {
    try {
      r.pings = serve_one(env, s, o);
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
      s.linger(0.1);
      const auto& st = env.eng.stats();
      std::printf("%u pings of %u bytes in %.2f seconds = %.1f usec/ping\n", pings, o.size, secs,
                  pings ? secs * 1e6 / pings : 0.0);
      std::printf("retransmitted %llu, timeouts %llu, RNR NAKs received %llu\n",
                  static_cast<unsigned long long>(st.get(Counter::kRetransmittedPackets)),
                  static_cast<unsigned long long>(st.get(Counter::kRetransmitTimeouts)),
                  static_cast<unsigned long long>(st.get(Counter::kRnrNakRcvd)));
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
