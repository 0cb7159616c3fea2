/// @file
/// librdmacm's ucmatose (rdma-core librdmacm/examples/cmatose.c) spoken by the appliance, in
/// both roles: -c RC connections through rdma_cm (port 7471, RDMA_PS_TCP), each side posting
/// -C receives of -S bytes before it connects or accepts. Once every connection is
/// established the server SENDs -C messages on each and then waits for the client's -C; the
/// client waits for the server's, then answers with -C of its own. The server disconnects
/// (DREQ; the client answers DREP). cmatose sends whatever its buffer holds, so our side checks
/// the count and the length of every message, and sends a known pattern itself. The
/// connections are the connection layer's (include/roce/conn.h) on a libroce Context on the
/// tool's own engine (runtime::Env::local_options).
#include <roce/conn.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include "apps/perf/cm_tools.h"
#include "apps/perf/tools.h"
#include "controlplane/address.h"

namespace roce::perf {

using namespace roce::runtime;
namespace po = boost::program_options;
using client::WcOpcode;
using client::WcStatus;

namespace {

constexpr std::uint32_t kRejInvalidServiceId = 8;  ///< IBA REJ reason: nobody listens there

/// One connection: its buffers (cmatose's mem: -S bytes to send, -C receives of -S bytes).
struct Node {
  conn::ConnId id = 0;
  client::Buffer* buf = nullptr;  ///< the send buffer, then the receives
  client::Mr *send_mr = nullptr, *recv_mr = nullptr;
  unsigned sent = 0, received = 0;
  bool established = false, disconnected = false, closing = false;
};

/// The test's connections on the connection layer (include/roce/conn.h), in-process on the
/// tool's own engine.
class Cmatose {
 public:
  Cmatose(Env& env, const CmatoseOpts& o)
      : env_(env), o_(o), ctx_(open(env)), ep_(*ctx_, options()) {}
  ~Cmatose() {
    for (auto& n : nodes_) {
      for (client::Mr* m : {n->send_mr, n->recv_mr})
        if (m) ep_.dereg_mr(m);
      if (n->buf) ctx_->free_buffer(n->buf);
    }
  }
  Cmatose(const Cmatose&) = delete;
  Cmatose& operator=(const Cmatose&) = delete;

  /// A node with its buffers registered (cmatose's init_node).
  Node& new_node() {
    auto n = std::make_unique<Node>();
    const std::size_t size = std::max(o_.size, 1u);
    n->buf = ctx_->alloc_buffer(size * (1 + depth()));
    if (!n->buf) fail("cannot allocate buffers");
    auto* b = static_cast<std::uint8_t*>(n->buf->addr);
    for (std::size_t i = 0; i < size; ++i) b[i] = static_cast<std::uint8_t>('a' + i % 26);
    n->send_mr = ctx_->reg_mr(ep_.pd(), b, size, 0);
    n->recv_mr = ctx_->reg_mr(ep_.pd(), b + size, size * depth(), verbs::kAccessLocalWrite);
    if (!n->send_mr || !n->recv_mr) fail("cannot create resources");
    nodes_.push_back(std::move(n));
    return *nodes_.back();
  }

  /// cmatose's QP: -C sends and -C receives of one SGE.
  conn::QpSizes sizes() const { return {depth(), depth(), 1, 1}; }

  /// cmatose's post_recvs: -C receives of -S bytes on the node's QP.
  void post_recvs(Node& n) {
    if (o_.size == 0) return;
    auto* b = static_cast<std::uint8_t*>(n.recv_mr->addr);
    for (unsigned i = 0; i < o_.count; ++i) {
      client::Sge sge{reinterpret_cast<std::uint64_t>(b + std::size_t{i} * o_.size), o_.size,
                      n.recv_mr->lkey};
      client::RecvWr wr;
      wr.wr_id = i;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      if (ep_.post_recv(n.id, wr) != 0) fail("failed to post receives");
    }
  }

  void post_sends(Node& n) {
    if (o_.size == 0) return;
    client::Sge sge{reinterpret_cast<std::uint64_t>(n.send_mr->addr), o_.size, n.send_mr->lkey};
    client::SendWr wr;
    wr.opcode = client::WrOpcode::kSend;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = verbs::kSendSignaled;  // cmatose: sq_sig_all
    for (unsigned i = 0; i < o_.count; ++i)
      if (ep_.post_send(n.id, wr) != 0) fail("failed to post sends");
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
  /// Keeps the CM and the dataplane going for `seconds` (a repeated DREQ is answered).
  void linger(double seconds) {
    env_.until(
        [&] {
          step();
          return false;
        },
        seconds);
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

  conn::Endpoint& endpoint() { return ep_; }
  std::vector<std::unique_ptr<Node>>& nodes() { return nodes_; }
  Node* node_of(conn::ConnId id) {
    for (auto& n : nodes_)
      if (n->id == id) return n.get();
    return nullptr;
  }

  std::vector<conn::Event> pending_;  ///< connect requests not answered yet
  std::optional<std::uint32_t> rejected_;

 private:
  static std::unique_ptr<client::Context> open(Env& env) {
    client::LocalOptions lo = env.local_options("ucmatose");
    lo.cm_connections = env.cm_connections;
    auto ctx = client::open_local(std::move(lo));
    if (!ctx) fail("cannot open the engine");
    return ctx;
  }
  static conn::Options options() {
    conn::Options c;
    c.retry_count = 5;  // cmatose's conn_param
    return c;
  }
  unsigned depth() const { return o_.count ? o_.count : 1; }

  void step() {
    events_.clear();
    completions_.clear();
    ep_.poll(events_, completions_);
    for (conn::Event& e : events_) on_event(e);
    for (const conn::Completion& c : completions_)
      if (Node* n = node_of(c.conn)) complete(*n, c.wc);
  }

  void on_event(conn::Event& e) {
    Node* n = node_of(e.conn);
    switch (e.kind) {
      case conn::Event::kConnectRequest:
        pending_.push_back(std::move(e));
        break;
      case conn::Event::kEstablished:
        if (n) n->established = true;
        break;
      case conn::Event::kDisconnected:
        if (n) n->disconnected = true;
        break;
      case conn::Event::kRejected:
        rejected_ = e.reason;
        break;
      case conn::Event::kUnreachable:
        fail("cmatose: event unreachable");
      case conn::Event::kConnectError:
        fail("cmatose: event connect-error");
    }
  }

  void complete(Node& n, const client::Wc& wc) {
    if (wc.status != WcStatus::kSuccess) {
      if (wc.status == WcStatus::kWrFlushErr && (n.disconnected || n.closing)) return;
      fail("completion with status " + std::string(verbs::to_string(wc.status)));
    }
    if (wc.opcode == WcOpcode::kSend) {
      ++n.sent;
    } else if (wc.opcode == WcOpcode::kRecv) {
      if (wc.byte_len != o_.size)
        fail("received " + std::to_string(wc.byte_len) + " bytes, expected " +
             std::to_string(o_.size));
      ++n.received;
    }
  }

  Env& env_;
  const CmatoseOpts& o_;
  std::unique_ptr<client::Context> ctx_;
  conn::Endpoint ep_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<conn::Event> events_;
  std::vector<conn::Completion> completions_;
};

void run_server(Env& env, Cmatose& t, const CmatoseOpts& o) {
  std::printf("cmatose: starting server\n");
  if (!o.bind.empty() && o.bind != "0.0.0.0") {
    const auto bind = ctl::parse_ipv4(o.bind);
    if (!bind || *bind != env.ip) fail("-b " + o.bind + " is not our address (--ip)");
  }
  if (const int rc = t.endpoint().listen(static_cast<std::uint16_t>(o.port)))
    fail("cannot listen on port " + std::to_string(o.port) + ": " + std::strerror(rc));
  std::fflush(stdout);
  while (t.nodes().size() < o.connections) {
    t.wait([&] { return !t.pending_.empty(); }, "a connect request");
    const conn::Event req = std::move(t.pending_.front());
    t.pending_.erase(t.pending_.begin());
    env.resolve(req.peer, 10);
    Node& n = t.new_node();
    n.id = req.conn;
    if (t.endpoint().prepare(n.id, t.sizes()) != 0) fail("failure accepting");
    t.post_recvs(n);
    if (t.endpoint().accept(n.id) != 0) fail("failure accepting");
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
    if (t.endpoint().disconnect(n->id) != 0) fail("cannot disconnect");
  }
  // No event follows our own disconnect: a connection is gone when the DREP came.
  t.wait([&] { return t.endpoint().connections() == 0; }, "the DREPs");
  std::printf("disconnected\n");
}

void run_client(Env& env, Cmatose& t, const CmatoseOpts& o) {
  std::printf("cmatose: starting client\n");
  const auto ip = ctl::parse_ipv4(o.server);
  if (!ip) fail("-s must be the server's IPv4 address");
  env.resolve(*ip, 10);
  std::printf("cmatose: connecting\n");
  const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(o.lf.timeout_s * 1e9);
  for (unsigned i = 0; i < o.connections; ++i) {
    Node& n = t.new_node();
    for (;;) {
      t.rejected_.reset();
      n.id = t.endpoint().connect(*ip, static_cast<std::uint16_t>(o.port), t.sizes());
      if (n.id == 0) fail("failure connecting: " + std::string(std::strerror(errno)));
      t.post_recvs(n);
      t.wait([&] { return n.established || t.rejected_.has_value(); }, "the connection");
      if (n.established) break;
      if (*t.rejected_ != kRejInvalidServiceId || port::now_ns() > end)
        fail("cmatose: event: REJECTED, reason " + std::to_string(*t.rejected_));
      // Nobody listens yet: the connection layer destroyed the QP; a fresh one next time.
      t.linger(0.5);
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
                    t.linger(0.1);
                    return CmatoseResult{o.size ? o.count : 0, o.count, secs};
                  }});
}

}  // namespace roce::perf
