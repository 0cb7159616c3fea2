/// @file
/// librdmacm's ucmatose (rdma-core librdmacm/examples/cmatose.c) spoken by the appliance, in
/// both roles: -c RC connections through rdma_cm (port 7471, RDMA_PS_TCP), each side posting
/// -C receives of -S bytes before it connects or accepts. Once every connection is
/// established the server SENDs -C messages on each and then waits for the client's -C; the
/// client waits for the server's, then answers with -C of its own. The server disconnects
/// (DREQ; the client answers DREP). cmatose sends whatever its buffer holds, so our side checks
/// the count and the length of every message, and sends a known pattern itself.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <vector>

#include "apps/perf/cm_tools.h"
#include "apps/perf/tools.h"
#include "controlplane/address.h"

namespace roce::perf {

using namespace roce::engine;
using namespace roce::runtime;
namespace po = boost::program_options;

namespace {

struct Node {
  Qp* qp = nullptr;
  Cq* cq = nullptr;
  std::optional<cm::ConnId> id;
  std::vector<std::uint8_t> send_buf, recv_buf;
  Mr *send_mr = nullptr, *recv_mr = nullptr;
  unsigned sent = 0, received = 0;
  bool established = false, disconnected = false, closing = false;
};

class Cmatose {
 public:
  Cmatose(Env& env, const CmatoseOpts& o)
      : env_(env),
        eng_(env.eng),
        o_(o),
        agent_(eng_, cm_agent_config(env), [this](const cm::CmEvent& e) { events_.push_back(e); }) {
    pd_ = eng_.alloc_pd();
    if (!pd_) fail("cannot allocate a PD");
  }

  /// A node with its QP in INIT and -C receives posted (cmatose's init_node + post_recvs).
  Node& new_node() {
    auto n = std::make_unique<Node>();
    const unsigned depth = o_.count ? o_.count : 1;
    n->cq = eng_.create_cq(2 * depth + 4);
    n->qp = eng_.create_qp(pd_, QpType::kRc, n->cq, n->cq, QpCap{depth, depth, 1, 1, 0});
    n->send_buf.resize(std::max(o_.size, 1u));
    n->recv_buf.resize(std::size_t{std::max(o_.size, 1u)} * depth);
    for (std::size_t i = 0; i < n->send_buf.size(); ++i)
      n->send_buf[i] = static_cast<std::uint8_t>('a' + i % 26);
    n->send_mr = eng_.reg_mr(pd_, n->send_buf.data(), n->send_buf.size(), 0);
    n->recv_mr = eng_.reg_mr(pd_, n->recv_buf.data(), n->recv_buf.size(), kAccessLocalWrite);
    if (!n->cq || !n->qp || !n->send_mr || !n->recv_mr) fail("cannot create resources");
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qp_access_flags = kAccessLocalWrite;
    if (eng_.modify_qp(n->qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk)
      fail("failed to modify QP to INIT");
    if (o_.size != 0)
      for (unsigned i = 0; i < o_.count; ++i) {
        Sge sge{reinterpret_cast<std::uint64_t>(n->recv_buf.data() + std::size_t{i} * o_.size),
                o_.size, n->recv_mr->key};
        RecvWr wr;
        wr.wr_id = i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        if (eng_.post_recv(n->qp, &wr, nullptr) != kOk) fail("failed to post receives");
      }
    nodes_.push_back(std::move(n));
    return *nodes_.back();
  }

  void post_sends(Node& n) {
    if (o_.size == 0) return;
    Sge sge{reinterpret_cast<std::uint64_t>(n.send_buf.data()), o_.size, n.send_mr->key};
    SendWr wr;
    wr.opcode = WrOpcode::kSend;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = kSendSignaled;  // cmatose: sq_sig_all
    for (unsigned i = 0; i < o_.count; ++i)
      if (eng_.post_send(n.qp, &wr, nullptr) != kOk) fail("failed to post sends");
  }

  template <class F>
  void wait(F&& done, const std::string& what) {
    if (!env_.until(
            [&] {
              step();
              return done();
            },
            o_.lf.timeout_s))
      fail("timed out waiting for " + what);
  }

  bool all(bool Node::*flag) const {
    for (const auto& n : nodes_)
      if (!(n.get()->*flag)) return false;
    return nodes_.size() == o_.connections;
  }
  bool all_count(unsigned Node::*c) const {
    const unsigned want = o_.size ? o_.count : 0;
    for (const auto& n : nodes_)
      if (n.get()->*c < want) return false;
    return true;
  }

  cm::CmAgent& agent() { return agent_; }
  std::vector<std::unique_ptr<Node>>& nodes() { return nodes_; }
  Node* node_of(cm::ConnId id) {
    for (auto& n : nodes_)
      if (n->id && *n->id == id) return n.get();
    return nullptr;
  }

 private:
  void step() {
    agent_.poll(port::now_ns());
    for (const cm::CmEvent& e : events_) on_event(e);
    events_.clear();
    for (auto& n : nodes_) {
      Wc wc[16];
      int k;
      while ((k = eng_.poll_cq(n->cq, 16, wc)) > 0)
        for (int i = 0; i < k; ++i) complete(*n, wc[i]);
    }
  }

  void on_event(const cm::CmEvent& e) {
    Node* n = node_of(e.id);
    switch (e.type) {
      case cm::CmEventType::kConnectRequest:
        pending_.push_back(e);
        break;
      case cm::CmEventType::kEstablished:
        if (n) n->established = true;
        break;
      case cm::CmEventType::kDisconnected:
        if (n) n->disconnected = true;
        break;
      case cm::CmEventType::kRejected:
        rejected_ = e.reason;
        break;
      case cm::CmEventType::kUnreachable:
      case cm::CmEventType::kConnectError:
        fail("cmatose: event " + std::string(cm::to_string(e.type)));
      default:
        break;
    }
  }

  void complete(Node& n, const Wc& wc) {
    if (wc.status != WcStatus::kSuccess) {
      if (wc.status == WcStatus::kWrFlushErr && (n.disconnected || n.closing)) return;
      fail("completion with status " + std::string(to_string(wc.status)));
    }
    if (wc.opcode == WcOpcode::kSend) {
      ++n.sent;
    } else if (wc.opcode == WcOpcode::kRecv) {
      if (wc.byte_len != o_.size)
        fail("received " + std::to_string(wc.byte_len) + " bytes, expected " +
             std::to_string(o_.size));
      // The first data on a connection whose RTU is late: COMM_EST.
      if (!n.established && n.id) agent_.cm().notify_established(*n.id);
      ++n.received;
    }
  }

  Env& env_;
  Engine& eng_;
  const CmatoseOpts& o_;
  Pd* pd_ = nullptr;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<cm::CmEvent> events_;

 public:
  std::vector<cm::CmEvent> pending_;  ///< connect requests not answered yet
  std::optional<cm::RejReason> rejected_;

 private:
  cm::CmAgent agent_;
};

void run_server(Env& env, Cmatose& t, const CmatoseOpts& o) {
  std::printf("cmatose: starting server\n");
  std::optional<wire::Ipv4Addr> bind;
  if (!o.bind.empty() && o.bind != "0.0.0.0") {
    bind = ctl::parse_ipv4(o.bind);
    if (!bind || *bind != env.ip) fail("-b " + o.bind + " is not our address (--ip)");
  }
  t.agent().cm().listen(cm::service_id(cm::PortSpace::kTcp, static_cast<std::uint16_t>(o.port)));
  std::fflush(stdout);
  std::mt19937 rng(std::random_device{}());
  while (t.nodes().size() < o.connections) {
    t.wait([&] { return !t.pending_.empty(); }, "a connect request");
    const cm::CmEvent req = t.pending_.front();
    t.pending_.erase(t.pending_.begin());
    if (!req.cma || req.cma->ip_version != 4 || (bind && req.cma->dst_ipv4() != *bind)) {
      t.agent().cm().reject(req.id, cm::RejReason::kInvalidServiceId);
      continue;
    }
    const auto peer = ctl::ipv4_from_gid(req.peer.gid);
    if (!peer) fail("the client's GID is not IPv4-mapped");
    env.resolve(*peer, 10);
    Node& n = t.new_node();
    n.id = req.id;
    cm::AcceptParams ap;
    ap.starting_psn = wire::Psn(rng());
    if (t.agent().accept(req.id, n.qp, ap) != cm::CmStatus::kOk) fail("failure accepting");
  }
  t.wait([&] { return t.all(&Node::established); }, "the connections");
  if (o.count && o.size) {
    std::printf("initiating data transfers\n");
    for (auto& n : t.nodes()) t.post_sends(*n);
    std::printf("completing sends\n");
    t.wait([&] { return t.all_count(&Node::sent); }, "our send completions");
    std::printf("receiving data transfers\n");
    t.wait([&] { return t.all_count(&Node::received); }, "the client's messages");
    std::printf("data transfers complete\n");
  }
  std::printf("cmatose: disconnecting\n");
  for (auto& n : t.nodes()) {
    n->closing = true;  // our DREQ flushes the QP
    if (t.agent().cm().disconnect(*n->id) != cm::CmStatus::kOk) fail("cannot disconnect");
  }
  t.wait([&] { return t.all(&Node::disconnected); }, "the DREPs");
  std::printf("disconnected\n");
}

void run_client(Env& env, Cmatose& t, const CmatoseOpts& o) {
  std::printf("cmatose: starting client\n");
  const auto ip = ctl::parse_ipv4(o.server);
  if (!ip) fail("-s must be the server's IPv4 address");
  env.resolve(*ip, 10);
  std::printf("cmatose: connecting\n");
  std::mt19937 rng(std::random_device{}());
  const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(o.lf.timeout_s * 1e9);
  for (unsigned i = 0; i < o.connections; ++i) {
    for (;;) {
      Node& n = i < t.nodes().size() ? *t.nodes()[i] : t.new_node();
      cm::ConnectParams p;
      p.peer.gid = ctl::gid_from_ipv4(*ip);
      p.service_id = cm::service_id(cm::PortSpace::kTcp, static_cast<std::uint16_t>(o.port));
      p.starting_psn = wire::Psn(rng());
      p.retry_count = 5;  // cmatose's conn_param
      p.cma = cm::CmaHeader::ipv4(env.ip, cm::ephemeral_port(), *ip);
      t.rejected_.reset();
      n.id = t.agent().connect(n.qp, p);
      if (!n.id) fail("failure connecting");
      t.wait([&] { return n.established || t.rejected_.has_value(); }, "the connection");
      if (n.established) break;
      if (*t.rejected_ != cm::RejReason::kInvalidServiceId || port::now_ns() > end)
        fail("cmatose: event: REJECTED, reason " +
             std::to_string(static_cast<unsigned>(*t.rejected_)));
      // Nobody listens yet: a fresh QP for the next attempt.
      env.until([] { return false; }, 0.5);
      t.nodes().pop_back();
    }
  }
  if (o.count && o.size) {
    std::printf("receiving data transfers\n");
    t.wait([&] { return t.all_count(&Node::received); }, "the server's messages");
    std::printf("sending replies\n");
    for (auto& n : t.nodes()) t.post_sends(*n);
    t.wait([&] { return t.all_count(&Node::sent); }, "our send completions");
    std::printf("data transfers complete\n");
  }
  t.wait([&] { return t.all(&Node::disconnected); }, "the server's DREQ");
}

}  // namespace

int ucmatose_main(int argc, char** argv) {
  return cmatose_main(
      argc, argv,
      CmatoseTool{"ucmatose",
                  "Usage: roce-perf ucmatose [-s SERVER] [-b BIND] [-c N] [-C COUNT] [-S SIZE] "
                  "[-p PORT] --iface IF\n\nlibrdmacm's ucmatose over rdma_cm (no TCP exchange); "
                  "without -s we serve",
                  "message size", "rdma_cm port", 7471, 65536, "-S must be at most 65536",
                  [](Env& env, const CmatoseOpts& o) {
                    Cmatose t(env, o);
                    const std::uint64_t t0 = port::now_ns();
                    if (o.server.empty())
                      run_server(env, t, o);
                    else
                      run_client(env, t, o);
                    const double secs = static_cast<double>(port::now_ns() - t0) / 1e9;
                    // a repeated DREQ or a late ACK is still answered by the test's CM agent
                    env.until([] { return false; }, 0.1);
                    return CmatoseResult{o.size ? o.count : 0, o.count, secs};
                  }});
}

}  // namespace roce::perf
