/// @file
/// The connection layer every application uses: rdma_cm connections on a libroce Context, each
/// with its RC QP and its CQ, events and completions named by connection. The NAA, NetFR, the
/// NFS transports and the rdma_cm tools stand on it, and so run unchanged in-process, attached
/// to a roced or hosted in one (the Context decides which).
///
/// It does what every rdma_cm program writes again: a listener's connect requests answered
/// with a QP of the application's sizes (prepare, then accept or reject, both with private
/// data), active connects, the QP's CQ polled with the CM in one call, a connection's resources
/// destroyed only once the CM is done with it, and the exit-time drain (every connection's DREQ
/// sent and its answer awaited, so the peer sees a clean close rather than a timeout).
///
/// Errors follow rdma-core: calls return 0 or an errno value; connect() returns 0 with errno.
/// One thread uses an Endpoint (as a connection's rdma_cm_id is used by one thread). An Endpoint
/// reads every CM event of its Context: one Endpoint per Context (two services in one process
/// open a Context each; in-process they share the engine's CM, each with its own ports).
#pragma once

#include <roce/addr.h>
#include <roce/client.h>
#include <roce/verbs.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace roce::conn {

/// Names a connection for the Endpoint's life (never reused; 0 is none).
using ConnId = std::uint64_t;

/// A connection's QP and CQ sizes.
struct QpSizes {
  std::uint32_t send = 64, recv = 16;
  std::uint32_t send_sge = 1, recv_sge = 1;
};

struct Event {
  enum Kind : std::uint8_t {
    kConnectRequest,  ///< on a listened port: prepare() then accept(), or reject()
    kEstablished,     ///< the QP is in RTS and the peer knows it (passive side: the RTU, or
                      ///< the first completion if the peer's data came first, as COMM_EST)
    kRejected,        ///< active: the peer refused (`reason`, `private_data`); passive: the
                      ///< peer gave up after our REP (a REJ to it). QP gone
    kUnreachable,     ///< active: no answer to the REQ, or no ARP answer; passive: no RTU
                      ///< (RDMA_CM_EVENT_UNREACHABLE on both sides). QP gone
    kDisconnected,    ///< ended (`remote`: by the peer); QP gone, later completions dropped.
                      ///< What its CQ held comes in the same poll's completions (the peer's
                      ///< last messages, flushed work); flushed work (kWrFlushErr) may also
                      ///< complete in an earlier poll: the QP is in the error state from the
                      ///< DREQ on
    kConnectError,    ///< the peer's reply could not be applied; QP gone
  } kind = kConnectRequest;
  ConnId conn = 0;
  Ipv4Addr peer;
  std::uint16_t port = 0;    ///< kConnectRequest: the listened port asked for
  std::uint32_t reason = 0;  ///< kRejected: the IBA REJ reason (28: consumer)
  bool remote = false;
  std::vector<std::uint8_t> private_data;  ///< kConnectRequest, kEstablished, kRejected
};

struct Completion {
  ConnId conn = 0;
  client::Wc wc;
  bool ok() const { return wc.status == verbs::WcStatus::kSuccess; }
  /// What completed, in the few words an application's own interface uses.
  enum What : std::uint8_t { kSend, kWrite, kRecv, kRecvImm, kRead, kOther };
  What what() const {
    switch (wc.opcode) {
      case verbs::WcOpcode::kSend:
        return kSend;
      case verbs::WcOpcode::kRdmaWrite:
        return kWrite;
      case verbs::WcOpcode::kRecv:
        return kRecv;
      case verbs::WcOpcode::kRecvRdmaWithImm:
        return kRecvImm;
      case verbs::WcOpcode::kRdmaRead:
        return kRead;
      default:
        return kOther;
    }
  }
  /// The status as a text for logs and errors; empty when ok().
  std::string status_text() const {
    return ok() ? std::string() : std::string(to_string(wc.status));
  }
};

/// How a connection's end reads in an interface without kConnectError: as kUnreachable (the
/// peer's answer could not be used, so the connection never came up).
constexpr Event::Kind coarse(Event::Kind k) {
  return k == Event::kConnectError ? Event::kUnreachable : k;
}

struct Options {
  /// Each connection gets a PD of its own (an rkey is then refused on every other connection,
  /// as the NAA requires); otherwise all share the Endpoint's PD.
  bool pd_per_connection = false;
  /// Connections at once, requests not yet answered included: requests beyond are rejected
  /// (REJ, consumer reason), connect() beyond fails with EDQUOT.
  std::size_t max_connections = 1024;
  /// rdma_conn_param of every connect and accept (private data aside).
  std::uint8_t responder_resources = 1, initiator_depth = 1, rnr_retry = 7;
  /// connect: the REQ's Retry Count (client::CmConnParam::retry_count; cmatose asks for 5).
  std::uint8_t retry_count = 7;
  /// Selective repeat (docs/loss-recovery.md): connect() offers it and accept() accepts an
  /// offer in the CM's ECE (client::CmConnParam's ece_*); a connection runs it when both ends
  /// asked and roced allows it (`transport: selective_repeat`), go-back-N otherwise.
  bool selective_repeat = false;
  /// The exit-time drain: how long the destructor waits for the peers' answers to its DREQs.
  int drain_ms = 1000;
  /// A connect request from an address whose MAC the port does not know yet waits this long
  /// for the ARP answer (Context::neighbour, asked at once) before it is reported, so that
  /// accept() finds the MAC; then it is rejected. At most `max_resolving` wait at once: beyond,
  /// the oldest waiting is rejected (a flood of requests from addresses that never answer does
  /// not turn the next real host away). A waiting request's MAC is looked up every 50 ms and
  /// ARP asked again every 200 ms. A Context that cannot tell (EOPNOTSUPP) reports every
  /// request at once.
  int resolve_ms = 5000;
  std::size_t max_resolving = 64;
  /// false: report every request at once (an application with a wait of its own, e.g. the NFS
  /// server's, which asks ARP again and counts the sources that never answer).
  bool wait_for_mac = true;
  /// ARP asks (Context::neighbour with ask) per 100 ms: each is a broadcast, and a segment host
  /// can send REQs from ever new (forged) sources. Beyond, a request is asked at a later turn.
  std::uint32_t max_arp_asks = 64;
};

class Endpoint {
 public:
  /// The Context must outlive the Endpoint.
  explicit Endpoint(client::Context& ctx, Options o = {});
  /// Disconnects every connection and drains (Options::drain_ms), then destroys what it made.
  /// MRs registered on its PDs are the application's: deregister them first (a PD that still
  /// has MRs stays until the Context goes).
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  client::Context& context() { return ctx_; }
  /// The PD of connection `c` (its own with pd_per_connection, made on first use, so that a
  /// connect request's memory may be registered before prepare()), or the Endpoint's common PD
  /// for c = 0 or an unknown connection; register the connection's memory there.
  client::Pd* pd(ConnId c = 0);
  /// Deregisters `mr` (Context::dereg_mr). With pd_per_connection, a connection's PD outlives
  /// the connection while MRs are registered in it; deregistering them here frees it with the
  /// last one (ibv_dealloc_pd's EBUSY otherwise keeps it until the Endpoint goes).
  int dereg_mr(client::Mr* mr);

  /// rdma_listen on `port` (EADDRINUSE: taken).
  int listen(std::uint16_t port);
  /// Passive: creates the QP of a connect request (receives may be posted from now on).
  int prepare(ConnId c, const QpSizes& s);
  /// Passive: the REP (with `private_data`, <= 196 bytes); kEstablished follows. A request
  /// not yet prepared is prepared with default sizes.
  int accept(ConnId c, std::span<const std::uint8_t> private_data = {});
  /// Passive: the REJ (consumer reason, `private_data` <= 148 bytes); the connection is gone.
  /// EINVAL (more private data): nothing sent, the request stays to be answered.
  int reject(ConnId c, std::span<const std::uint8_t> private_data = {});
  /// Passive: REJ 3 "no resources" (Context::cm_refuse), what a server at its caps answers;
  /// the connection is gone.
  int refuse(ConnId c);
  /// Active: creates the QP (receives may be posted when this returns) and sends the REQ
  /// (`private_data` <= 56 bytes) to `dst`:`port`; kEstablished, kRejected, kUnreachable or
  /// kConnectError follows. 0 with errno set when it cannot start (EHOSTUNREACH: no ARP answer).
  ConnId connect(Ipv4Addr dst, std::uint16_t port, const QpSizes& s,
                 std::span<const std::uint8_t> private_data = {});
  /// rdma_disconnect: the DREQ if connected; the connection's later completions are dropped
  /// and its QP and CQ destroyed once the CM is done with it. No event follows for it.
  int disconnect(ConnId c);

  /// Ends connection `c` and destroys its QP, CQ and PD now, for a server that must give a
  /// connection's resources back at once (an error completion, a connection reaped for a
  /// newcomer): the DREQ goes out if it was up (the CM retries it and takes the answer by
  /// itself), a request not answered yet is rejected. No event follows for it.
  int close(ConnId c);
  /// The connection's QP (null once it is gone): for modify/query, rarely needed.
  client::Qp* qp(ConnId c);
  /// Posts a chain of work requests on connection `c`'s QP (ENOTCONN: no such connection).
  int post_send(ConnId c, const client::SendWr& wr);
  int post_recv(ConnId c, const client::RecvWr& wr);
  /// One receive of `length` bytes at `addr` (registered with `lkey`), as librdmacm's
  /// rdma_post_recv.
  int post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                std::uint32_t lkey);

  /// Runs the CM and polls every connection's CQ once; appends what happened. True if anything
  /// did. In-process, each poll also drives the dataplane (the Context's progress). A receive
  /// completion on an accepted connection whose RTU has not come establishes it
  /// (Context::cm_notify, as rdma_notify on IBV_EVENT_COMM_EST): kEstablished follows.
  /// Flushed work requests of a connection with no failed one before them wait (up to half a
  /// second) for the kDisconnected that explains them and come with it: a peer's DREQ may
  /// move the QP to error between the CM's events and the CQ's.
  bool poll(std::vector<Event>& events, std::vector<Completion>& completions);
  /// Connections now (requests not yet answered included).
  std::size_t connections() const { return conns_.size(); }

 private:
  struct Conn {
    ConnId id = 0;
    std::uint32_t cm_id = 0;
    bool active = false, requested = false, up = false, closing = false, notified = false,
         accepted = false;
    bool failed = false;           ///< a completion with an error other than a flush was reported
    std::vector<client::Wc> held;  ///< flushes waiting for their kDisconnected
    std::uint64_t held_since_ns = 0;
    client::Pd* pd = nullptr;
    client::Cq* cq = nullptr;
    client::Qp* qp = nullptr;
  };
  Conn* find(ConnId c);
  Conn* by_cm(std::uint32_t cm_id);
  int make_qp(Conn& c, const QpSizes& s);
  void destroy(Conn& c);
  void forget(ConnId c);
  client::CmConnParam param(std::span<const std::uint8_t> private_data, bool passive) const;
  void on_cm(client::CmEvent& ev, std::vector<Event>& events, std::vector<Completion>& completions);
  /// `hold`: flushes with no failure before them wait in Conn::held (see poll).
  void drain_cq(Conn& c, std::vector<Event>* events, std::vector<Completion>* out,
                bool hold = false);

  client::Context& ctx_;
  Options o_;
  client::Pd* pd_ = nullptr;
  std::vector<client::Pd*> retired_;  ///< PDs of connections gone, MRs still registered
  ConnId next_ = 1;
  std::map<ConnId, std::unique_ptr<Conn>> conns_;
  std::map<std::uint32_t, ConnId> by_cm_;
  /// Connect requests waiting for their source's ARP answer (not reported yet).
  struct Resolving {
    ConnId conn = 0;
    Ipv4Addr peer;
    std::uint16_t port = 0;
    std::vector<std::uint8_t> private_data;
    std::uint64_t deadline_ns = 0;
    std::uint64_t next_lookup_ns = 0, next_arp_ns = 0;
  };
  std::vector<Resolving> resolving_;
  void poll_resolving(std::vector<Event>& events);
  /// Whether an ARP ask fits Options::max_arp_asks now (and counts it).
  bool take_ask(std::uint64_t now);
  std::uint64_t ask_window_ns_ = 0;
  std::uint32_t asks_ = 0;
  std::vector<client::Wc> wcs_;
};

}  // namespace roce::conn
