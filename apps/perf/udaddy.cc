/// @file
/// librdmacm's udaddy (rdma-core librdmacm/examples/udaddy.c) spoken by the appliance, in both
/// roles: -c UD "connections" resolved through rdma_cm's SIDR (port 7174, RDMA_PS_UDP), each
/// side's UD QP with Q_Key 0x01234567 (RDMA_UDP_QKEY) and -C receives of -S bytes plus the
/// 40-byte GRH posted before its SIDR_REQ or SIDR_REP leaves. The client takes the server's QPN
/// and Q_Key from the SIDR_REP and sends -C SEND_WITH_IMM (the immediate: its own QPN); the
/// server answers the first of them's sender (the GRH's source and the immediate) with -C of
/// its own. udaddy sends whatever its buffer holds, so our side checks the count, the length
/// and the immediate of every message, and sends a known pattern itself.
/// The one rdma_cm tool below the connection layer (<roce/conn.h> is RC only, and libroce has
/// no SIDR call): it owns a share of the engine's CM hub (controlplane/cm/cm_hub.h) and its UD
/// QPs on the engine.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <vector>

#include "apps/perf/cm_tools.h"
#include "apps/perf/tools.h"
#include "controlplane/address.h"
#include "runtime/cm_agent.h"

namespace roce::perf {

using namespace roce::engine;
using namespace roce::runtime;
namespace po = boost::program_options;

namespace {

constexpr std::uint32_t kUdpQkey = 0x01234567;  ///< RDMA_UDP_QKEY
constexpr std::uint32_t kGrh = 40;

using UdaddyOpts = CmatoseOpts;  // udaddy's default port is 7174 (set in udaddy_main)

struct Node {
  Qp* qp = nullptr;
  Cq* cq = nullptr;
  std::optional<cm::ConnId> id;  ///< the SIDR exchange (client: until its reply)
  std::vector<std::uint8_t> send_buf, recv_buf;
  Mr *send_mr = nullptr, *recv_mr = nullptr;
  AddressVector av;
  std::uint32_t remote_qpn = 0, remote_qkey = 0;
  std::optional<wire::Ipv4Addr> reply_to;  ///< server: the GRH source of the first message
  unsigned sent = 0, received = 0;
  bool resolved = false;  ///< client: the SIDR_REP arrived
  std::optional<cm::SidrStatus> sidr_status;
};

class Udaddy {
 public:
  Udaddy(Env& env, const UdaddyOpts& o)
      : env_(env),
        eng_(env.eng),
        o_(o),
        hub_(cm::CmHub::get(eng_, cm_agent_config(env))),
        owner_(hub_->add_owner([this](const cm::CmEvent& e) { events_.push_back(e); })) {
    pd_ = eng_.alloc_pd();
    if (!pd_) fail("cannot allocate a PD");
  }

  ~Udaddy() { hub_->remove_owner(owner_); }
  Udaddy(const Udaddy&) = delete;
  Udaddy& operator=(const Udaddy&) = delete;

  unsigned messages() const { return o_.size ? o_.count : 0; }

  /// A node with its UD QP in RTS and -C receives posted (udaddy's init_node + post_recvs).
  Node& new_node() {
    auto n = std::make_unique<Node>();
    const unsigned depth = messages() ? messages() : 1;
    const std::size_t slot = std::size_t{o_.size} + kGrh;
    n->cq = eng_.create_cq(2 * depth + 4);
    n->qp = eng_.create_qp(pd_, QpType::kUd, n->cq, n->cq, QpCap{depth, depth, 1, 1, 0});
    n->send_buf.resize(std::max(o_.size, 1u));
    n->recv_buf.resize(slot * depth);
    for (std::size_t i = 0; i < n->send_buf.size(); ++i)
      n->send_buf[i] = static_cast<std::uint8_t>('a' + i % 26);
    n->send_mr = eng_.reg_mr(pd_, n->send_buf.data(), n->send_buf.size(), 0);
    n->recv_mr = eng_.reg_mr(pd_, n->recv_buf.data(), n->recv_buf.size(), kAccessLocalWrite);
    if (!n->cq || !n->qp || !n->send_mr || !n->recv_mr) fail("cannot create resources");
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qkey = kUdpQkey;
    if (eng_.modify_qp(n->qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey) != kOk)
      fail("failed to modify QP to INIT");
    a.qp_state = QpState::kRtr;
    if (eng_.modify_qp(n->qp, a, kQpState) != kOk) fail("failed to modify QP to RTR");
    a.qp_state = QpState::kRts;
    a.sq_psn = rng_() & 0xFFFFFF;
    if (eng_.modify_qp(n->qp, a, kQpState | kQpSqPsn) != kOk) fail("failed to modify QP to RTS");
    for (unsigned i = 0; i < messages(); ++i) {
      Sge sge{reinterpret_cast<std::uint64_t>(n->recv_buf.data() + i * slot),
              static_cast<std::uint32_t>(slot), n->recv_mr->key};
      RecvWr wr;
      wr.wr_id = i;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      if (eng_.post_recv(n->qp, &wr, nullptr) != kOk) fail("failed to post receives");
    }
    nodes_.push_back(std::move(n));
    return *nodes_.back();
  }

  /// -C SEND_WITH_IMM to the node's peer, the immediate our QPN (udaddy's post_sends).
  void post_sends(Node& n) {
    if (!messages()) return;
    Sge sge{reinterpret_cast<std::uint64_t>(n.send_buf.data()), o_.size, n.send_mr->key};
    SendWr wr;
    wr.opcode = WrOpcode::kSendImm;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = kSendSignaled;
    wr.imm_data = n.qp->qpn;  // sent big-endian, as udaddy's htobe32(qp_num)
    wr.ud.ah = &n.av;
    wr.ud.remote_qpn = n.remote_qpn;
    wr.ud.remote_qkey = n.remote_qkey;
    for (unsigned i = 0; i < messages(); ++i)
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

  bool all_count(unsigned Node::*c) const {
    for (const auto& n : nodes_)
      if (n.get()->*c < messages()) return false;
    return nodes_.size() == o_.connections;
  }

  /// The engine's CM (its hub: this test is one of its owners).
  cm::CmHub& hub() { return *hub_; }
  cm::CmHub::Owner owner() const { return owner_; }
  std::vector<std::unique_ptr<Node>>& nodes() { return nodes_; }
  Node* node_of(cm::ConnId id) {
    for (auto& n : nodes_)
      if (n->id && *n->id == id) return n.get();
    return nullptr;
  }

 private:
  void step() {
    hub_->poll(port::now_ns());
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
      case cm::CmEventType::kSidrRequest:
        // (A repeated SIDR_REQ whose SIDR_REP was lost is answered by the CM itself.)
        pending_.push_back(e);
        break;
      case cm::CmEventType::kSidrReply:
        if (!n) break;
        n->sidr_status = e.sidr_status;
        if (e.sidr_status == cm::SidrStatus::kSuccess) {
          n->remote_qpn = e.sidr_qpn.raw();
          n->remote_qkey = e.sidr_qkey;
          n->resolved = true;
        }
        break;
      case cm::CmEventType::kUnreachable:
        // Server: a request we left unanswered too long is gone (the CM's half-open deadline).
        std::erase_if(pending_, [&](const cm::CmEvent& p) { return p.id == e.id; });
        if (n) fail("udaddy: event: UNREACHABLE (no SIDR_REP)");
        break;
      default:
        break;
    }
  }

  void complete(Node& n, const Wc& wc) {
    if (wc.status != WcStatus::kSuccess)
      fail("completion with status " + std::string(to_string(wc.status)));
    if (wc.opcode == WcOpcode::kSend) {
      ++n.sent;
      return;
    }
    if (wc.opcode != WcOpcode::kRecv) fail("unexpected completion");
    if (wc.byte_len != o_.size + kGrh)
      fail("received " + std::to_string(wc.byte_len) + " bytes, expected " +
           std::to_string(o_.size + kGrh) + " (" + std::to_string(o_.size) + " + the GRH)");
    if (!(wc.wc_flags & kWcWithImm)) fail("a message without immediate data");
    if (!(wc.wc_flags & kWcGrh)) fail("a message without a GRH");
    if (n.resolved) {
      // Client: the server's replies carry its QPN, the one of its SIDR_REP.
      if (wc.imm_data != n.remote_qpn)
        fail("reply with immediate " + std::to_string(wc.imm_data) +
             ", expected the server's QPN " + std::to_string(n.remote_qpn));
    } else if (!n.reply_to) {
      // Server: the first message names the client (create_reply_ah).
      const std::uint8_t* grh = n.recv_buf.data() + wc.wr_id * (std::size_t{o_.size} + kGrh);
      n.reply_to = wire::Ipv4Addr{wire::load_be32(grh + 20 + 12)};  // IPv4 source
      n.remote_qpn = wc.imm_data;
      n.remote_qkey = kUdpQkey;
      if (wc.src_qp != wc.imm_data)
        fail("immediate " + std::to_string(wc.imm_data) + " is not the sender's QPN " +
             std::to_string(wc.src_qp));
    } else if (wc.imm_data != n.remote_qpn) {
      fail("messages from two QPs on one node");
    }
    ++n.received;
  }

  Env& env_;
  Engine& eng_;
  const UdaddyOpts& o_;
  Pd* pd_ = nullptr;
  std::mt19937 rng_{std::random_device{}()};
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<cm::CmEvent> events_;

 public:
  std::vector<cm::CmEvent> pending_;  ///< SIDR requests not answered yet

 private:
  std::shared_ptr<cm::CmHub> hub_;
  cm::CmHub::Owner owner_;
};

void run_server(Env& env, Udaddy& t, const UdaddyOpts& o) {
  std::printf("udaddy: starting server\n");
  std::optional<wire::Ipv4Addr> bind;
  if (!o.bind.empty() && o.bind != "0.0.0.0") {
    bind = ctl::parse_ipv4(o.bind);
    if (!bind || *bind != env.ip) fail("-b " + o.bind + " is not our address (--ip)");
  }
  if (!t.hub().listen(t.owner(),
                      cm::service_id(cm::PortSpace::kUdp, static_cast<std::uint16_t>(o.port))))
    fail("port " + std::to_string(o.port) + " is taken");
  std::fflush(stdout);
  while (t.nodes().size() < o.connections) {
    t.wait([&] { return !t.pending_.empty(); }, "a SIDR request");
    const cm::CmEvent req = t.pending_.front();
    t.pending_.erase(t.pending_.begin());
    if (!req.cma || req.cma->ip_version != 4 || (bind && req.cma->dst_ipv4() != *bind)) {
      t.hub().agent().cm().sidr_reject(req.id, cm::SidrStatus::kReject);
      continue;
    }
    Node& n = t.new_node();
    n.id = req.id;
    if (t.hub().agent().cm().sidr_accept(req.id, wire::Qpn(n.qp->qpn), kUdpQkey) !=
        cm::CmStatus::kOk)
      fail("failure accepting");
  }
  if (t.messages()) {
    std::printf("receiving data transfers\n");
    t.wait([&] { return t.all_count(&Node::received); }, "the client's messages");
    for (auto& n : t.nodes()) {
      n->av.dgid = ctl::gid_from_ipv4(*n->reply_to);
      n->av.dmac = env.resolve(*n->reply_to, 10);
      n->av.hop_limit = 64;
    }
    std::printf("sending replies\n");
    for (auto& n : t.nodes()) t.post_sends(*n);
    t.wait([&] { return t.all_count(&Node::sent); }, "our send completions");
    std::printf("data transfers complete\n");
  }
}

void run_client(Env& env, Udaddy& t, const UdaddyOpts& o) {
  std::printf("udaddy: starting client\n");
  const auto ip = ctl::parse_ipv4(o.server);
  if (!ip) fail("-s must be the server's IPv4 address");
  const wire::MacAddr mac = env.resolve(*ip, 10);
  std::printf("udaddy: connecting\n");
  const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(o.lf.timeout_s * 1e9);
  for (unsigned i = 0; i < o.connections; ++i) {
    Node& n = t.new_node();
    for (;;) {
      cm::SidrParams p;
      p.peer.gid = ctl::gid_from_ipv4(*ip);
      p.service_id = cm::service_id(cm::PortSpace::kUdp, static_cast<std::uint16_t>(o.port));
      p.cma = cm::CmaHeader::ipv4(env.ip, cm::ephemeral_port(), *ip);
      n.sidr_status.reset();
      n.id = t.hub().sidr_resolve(t.owner(), p);
      if (!n.id) fail("failure resolving");
      t.wait([&] { return n.sidr_status.has_value(); }, "the SIDR reply");
      if (n.resolved) break;
      if (*n.sidr_status != cm::SidrStatus::kUnsupported || port::now_ns() > end)
        fail("udaddy: event: UNREACHABLE, SIDR status " +
             std::to_string(static_cast<unsigned>(*n.sidr_status)));
      env.until([] { return false; }, 0.5);  // nobody listens yet
    }
    n.av.dgid = ctl::gid_from_ipv4(*ip);
    n.av.dmac = mac;
    n.av.hop_limit = 64;
  }
  if (t.messages()) {
    std::printf("initiating data transfers\n");
    for (auto& n : t.nodes()) t.post_sends(*n);
    std::printf("receiving data transfers\n");
    t.wait([&] { return t.all_count(&Node::received); }, "the server's replies");
    t.wait([&] { return t.all_count(&Node::sent); }, "our send completions");
    std::printf("data transfers complete\n");
  }
}

}  // namespace

int udaddy_main(int argc, char** argv) {
  return cmatose_main(
      argc, argv,
      CmatoseTool{"udaddy",
                  "Usage: roce-perf udaddy [-s SERVER] [-b BIND] [-c N] [-C COUNT] [-S SIZE] "
                  "[-p PORT] --iface IF\n\nlibrdmacm's udaddy: UD over rdma_cm's SIDR (no TCP "
                  "exchange); without -s we serve",
                  "message size (at most the path MTU)", "rdma_cm port (RDMA_PS_UDP)", 7174, 4096,
                  "-S must be at most 4096 (a UD message fits one packet)",
                  [](Env& env, const CmatoseOpts& o) {
                    Udaddy t(env, o);
                    const std::uint64_t t0 = port::now_ns();
                    if (o.server.empty())
                      run_server(env, t, o);
                    else
                      run_client(env, t, o);
                    const double secs = static_cast<double>(port::now_ns() - t0) / 1e9;
                    env.until([] { return false; }, 0.1);  // a repeated SIDR_REQ is still answered
                    return CmatoseResult{t.messages(), t.messages(), secs};
                  }});
}

}  // namespace roce::perf
