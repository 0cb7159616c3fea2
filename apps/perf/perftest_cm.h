/// @file
/// perftest's rdma_cm mode (-R, perftest 6.06 = linux-rdma/perftest v4.5-0.17): no TCP at all.
/// Both the exchange and the tested QPs are rdma_cm connections to the same port (18515 by
/// default, RDMA_PS_TCP), through libroce's rdma_cm (client::Context::cm_*: the engine's CM on
/// QP1, shared through its hub). Not conn::Endpoint: perftest connects QPs it made itself (its
/// sizes, its SRQ), and the Endpoint makes a connection's QP:
///
///   1. the communication connection: one RC QP, no private data, responder resources and
///      initiator depth 0. Every perftest message (versions, system data, MTU, QP addresses,
///      hand-shakes, reports) is one SEND on it of exactly the message's size, at most 56 bytes
///      (perftest's receive buffer is one struct pingpong_dest); each side keeps one receive
///      posted and waits for its SEND's completion before going on. The QP addresses are the
///      binary struct (perftest_proto.h, dest_bin), not the TCP mode's text.
///   2. after versions, system data and MTU: a hand-shake (all-zero QP addresses), then one
///      connection per tested QP (the client connects them all; the server accepts them in the
///      order they arrive; responder resources and initiator depth = -o for READ and atomics,
///      else 0), then a hand-shake again. The CM sets the QPs' PSNs and path MTU (the port's,
///      as rdma_cm takes it from the netdev); the QP addresses exchanged afterwards only carry
///      rkey and address.
///   3. the rest as over TCP, without perftest's "done"; at the end each side disconnects
///      (DREQ) what is still connected; the peer answers each with a DREP.
#pragma once

#include <roce/client.h>

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/env.h"
#include "runtime/oob.h"

namespace roce::perf {

/// What perftest puts in each tested QP's rdma_conn_param.
struct CmQpParams {
  std::uint8_t responder_resources = 0;  ///< -o for READ and atomics, else 0
  std::uint8_t initiator_depth = 0;
  /// roce-perf --selective-repeat: the REQ offers it, the REP accepts an offer (ECE,
  /// cm::kEceSrOffer / kEceSrAccept); nothing is set otherwise, as perftest.
  bool selective_repeat = false;
};

/// The communication connection of perftest -R and the connections of the tested QPs.
class CmExchange : public runtime::Exchange {
 public:
  /// The largest message: perftest's receive buffer holds one struct pingpong_dest.
  static constexpr std::size_t kMaxMessage = 56;

  /// Server (`server` empty): listens on `port` at once. Client: connects to `server`'s RoCE
  /// IPv4 address in open(). `ctx`: the test's Context (in-process, on `env`'s engine), whose
  /// rdma_cm connects the tested QPs too; it must outlive the exchange.
  CmExchange(runtime::Env& env, client::Context& ctx, std::string server, unsigned port,
             double timeout_s);
  ~CmExchange() override;
  CmExchange(const CmExchange&) = delete;
  CmExchange& operator=(const CmExchange&) = delete;

  bool client() const override { return !server_.empty(); }
  void open() override;
  void send(const void* buf, std::size_t n) override;
  void recv(void* buf, std::size_t n) override;
  bool readable() override;
  void drain_until_closed(double) override {}  // the connections end in close()
  /// Disconnects every connection still up (DREQ) and waits a moment for the DREPs.
  void close() override;

  /// One rdma_cm connection per QP (the test's, RC, in RESET or INIT), in order: the client
  /// connects (retrying while nobody listens yet), the server accepts the next requests.
  /// Returns when every QP is in RTS. Destroying a QP (Context::destroy_qp) lets the CM go
  /// of it (a connection still up on it is disconnected).
  void connect_qps(const std::vector<client::Qp*>& qps, const CmQpParams& p);

 private:
  void step();
  void on_event(client::CmEvent& e);
  bool live(std::uint32_t id) const;
  void post_recv(std::uint32_t slot);
  /// Waits for the next connect request (server), rejecting those of another client.
  client::CmEvent next_request(const std::string& what);
  std::uint32_t connect_one(client::Qp* qp, const CmQpParams& p, const std::string& what);
  void accept(const client::CmEvent& r, client::Qp* qp, const CmQpParams& p,
              const std::string& what);

  runtime::Env& env_;
  client::Context& ctx_;
  std::string server_;
  unsigned port_;
  double timeout_s_;
  Ipv4Addr peer_ip_{};
  client::Pd* pd_ = nullptr;
  client::Cq* cq_ = nullptr;
  client::Qp* qp_ = nullptr;       ///< the communication QP
  client::Buffer* buf_ = nullptr;  ///< receive slots, then the send buffer
  client::Mr* mr_ = nullptr;
  std::deque<std::vector<std::uint8_t>> received_;
  unsigned sends_done_ = 0;
  bool closing_ = false;
  std::optional<std::uint32_t> comm_;
  std::vector<std::uint32_t> data_;
  std::deque<client::CmEvent> requests_;
  std::set<std::uint32_t> established_, disconnected_, unreachable_, dreq_sent_;
  std::map<std::uint32_t, std::uint32_t> rejected_;  ///< id -> IBA REJ reason
};

}  // namespace roce::perf
