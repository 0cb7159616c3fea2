/// @file
/// perftest's rdma_cm mode (-R, perftest 6.06 = linux-rdma/perftest v4.5-0.17): no TCP at all.
/// Both the exchange and the tested QPs are rdma_cm connections to the same port (18515 by
/// default, RDMA_PS_TCP), through our CM on QP1 (controlplane/cm/cm_agent.h):
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
///      else 0), then a hand-shake again. The CM sets the QPs' PSNs and path MTU; the QP
///      addresses exchanged afterwards only carry rkey and address.
///   3. the rest as over TCP, without perftest's "done"; at the end each side disconnects
///      (DREQ) what is still connected; the peer answers each with a DREP.
#pragma once

#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "controlplane/cm/cm_agent.h"
#include "runtime/env.h"
#include "runtime/oob.h"

namespace roce::perf {

/// What perftest puts in each tested QP's rdma_conn_param.
struct CmQpParams {
  std::uint8_t responder_resources = 0;  ///< -o for READ and atomics, else 0
  std::uint8_t initiator_depth = 0;
};

/// The communication connection of perftest -R and the connections of the tested QPs.
class CmExchange : public runtime::Exchange {
 public:
  /// The largest message: perftest's receive buffer holds one struct pingpong_dest.
  static constexpr std::size_t kMaxMessage = 56;

  /// Server (`server` empty): listens on `port` at once. Client: connects to `server`'s RoCE
  /// IPv4 address in open(). `path_mtu`: the IB enum of the link's MTU (rdma_cm takes the path
  /// MTU from the netdev, not from -m).
  CmExchange(runtime::Env& env, std::string server, unsigned port, double timeout_s, int path_mtu);
  ~CmExchange() override;
  CmExchange(const CmExchange&) = delete;
  CmExchange& operator=(const CmExchange&) = delete;

  bool client() const override { return !server_.empty(); }
  void open() override;
  void send(const void* buf, std::size_t n) override;
  void recv(void* buf, std::size_t n) override;
  bool readable() override;
  void drain_until_closed(double) override {}  // the connections end in close()
  /// Disconnects every connection still up (DREQ), waits a moment for the DREPs, and unbinds
  /// the QPs from the CM.
  void close() override;

  /// One rdma_cm connection per QP (RC, in RESET or INIT), in order: the client connects
  /// (retrying while nobody listens yet), the server accepts the next requests. Returns when
  /// every QP is in RTS.
  void connect_qps(const std::vector<engine::Qp*>& qps, const CmQpParams& p);
  /// Before the tested QPs are destroyed: disconnects those still up, drops their bindings.
  void release_qps();

 private:
  void step();
  void on_event(const cm::CmEvent& e);
  bool live(cm::ConnId id) const;
  void post_recv(std::uint32_t slot);
  /// Waits for the next connect request (server), rejecting those not for our address.
  cm::CmEvent next_request(const std::string& what);
  cm::ConnId connect_one(engine::Qp* qp, const CmQpParams& p, const std::string& what);

  runtime::Env& env_;
  std::string server_;
  unsigned port_;
  double timeout_s_;
  std::uint64_t service_id_;
  wire::Ipv4Addr peer_ip_{};
  int path_mtu_ = 3;  ///< what the client asks for (the server takes the REQ's)
  engine::Pd* pd_ = nullptr;
  engine::Cq* cq_ = nullptr;
  engine::Qp* qp_ = nullptr;  ///< the communication QP
  engine::Mr* mr_ = nullptr;
  std::vector<std::uint8_t> buf_;  ///< receive slots, then the send buffer
  std::deque<std::vector<std::uint8_t>> received_;
  unsigned sends_done_ = 0;
  bool closing_ = false;
  std::optional<cm::ConnId> comm_;
  std::vector<cm::ConnId> data_;
  std::vector<engine::Qp*> data_qps_;
  std::deque<cm::CmEvent> requests_;
  std::set<cm::ConnId> established_, disconnected_, unreachable_;
  std::map<cm::ConnId, cm::RejReason> rejected_;
  cm::CmAgent agent_;
};

}  // namespace roce::perf
