// The connection layer (include/roce/conn.h) on two in-process Contexts over the in-memory
// wire: connect with private data both ways, completions named by connection, reject with a
// reason, the connection cap, a disconnect that promises no event, and the exit-time drain.
#include <gtest/gtest.h>
#include <roce/conn.h>

#include <chrono>
#include <cstring>
#include <string>

#include "client/local/local_context.h"
#include "controlplane/cm/cm_hub.h"
#include "dataplane/engine/engine.h"
#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using conn::ConnId;
using conn::Event;

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<std::uint8_t>& v) {
  // rdma_cm pads private data with zeros up to the message's field size.
  std::string s(v.begin(), v.end());
  return s.substr(0, s.find('\0'));
}

struct Side {
  std::unique_ptr<client::Context> ctx;
  std::unique_ptr<conn::Endpoint> ep;
  std::vector<Event> events;
  std::vector<conn::Completion> wcs;
};

class Rig {
 public:
  explicit Rig(conn::Options oa = {}, conn::Options ob = {}, const LoopbackOptions& lo = {},
               std::function<bool(Ipv4Addr, bool)> neighbour_b = {})
      : lb(lo) {
    // Both sides' CMs run only while a side polls: a side's drain at the end would wait for
    // a peer nobody polls, so it waits briefly.
    oa.drain_ms = ob.drain_ms = 20;
    for (int i = 0; i < 2; ++i) {
      client::LocalOptions o;
      o.engine = &lb.side(i);
      o.progress = [this, i] {
        // still: this side's polls do not move the wire. alternate: it moves only at every
        // other progress call of this side (the second of each Endpoint::poll: its CQs').
        if (still[i] || (alternate[i] && (++progress_calls[i] & 1) != 0)) return;
        lb.run_until([] { return false; }, 2000);
      };
      if (i == 1) o.neighbour = neighbour_b;
      engine::Engine& peer = lb.side(1 - i);
      o.resolve = [this, i, &peer](Ipv4Addr ip) -> std::optional<MacAddr> {
        if (ip == peer.config().ipv4 && !unresolvable[i]) return peer.config().mac;
        return std::nullopt;
      };
      o.port.mac = lb.side(i).config().mac;
      o.port.ipv4 = lb.side(i).config().ipv4;
      o.port.gid = ipv4_mapped(o.port.ipv4);
      o.port.max_mtu = verbs::Mtu::k1024;
      s[i].ctx = client::open_local(std::move(o));
      s[i].ep = std::make_unique<conn::Endpoint>(*s[i].ctx, i == 0 ? oa : ob);
    }
  }
  /// Polls both sides until `done` (or 20000 rounds).
  bool run(const std::function<bool()>& done) {
    for (int i = 0; i < 20000; ++i) {
      for (auto& x : s)
        if (x.ep) x.ep->poll(x.events, x.wcs);
      if (done()) return true;
    }
    return false;
  }
  /// run() until `done` or `ms` of wall-clock time (waits paced by the clock).
  bool run_for(const std::function<bool()>& done, int ms = 2000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!run(done))
      if (std::chrono::steady_clock::now() > end) return false;
    return true;
  }
  /// The first event of `kind` on side i, removed from its list.
  std::optional<Event> take(int i, Event::Kind kind) {
    for (auto it = s[i].events.begin(); it != s[i].events.end(); ++it)
      if (it->kind == kind) {
        Event e = *it;
        s[i].events.erase(it);
        return e;
      }
    return std::nullopt;
  }
  bool has(int i, Event::Kind kind) const {
    for (const Event& e : s[i].events)
      if (e.kind == kind) return true;
    return false;
  }
  Ipv4Addr ip(int i) { return lb.side(i).config().ipv4; }

  Loopback lb;
  Side s[2];
  bool unresolvable[2] = {false, false};  ///< side i gets no MAC for its peer (no ARP answer)
  bool still[2] = {false, false};
  bool alternate[2] = {false, false};
  unsigned progress_calls[2] = {0, 0};
};

constexpr std::uint16_t kPort = 7471;

TEST(ConnEndpoint, ConnectsWithPrivateDataAndNamesCompletionsByConnection) {
  Rig r;
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, {}, bytes("hello"));
  ASSERT_NE(a, 0u) << std::strerror(errno);
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
  const Event req = *r.take(1, Event::kConnectRequest);
  EXPECT_EQ(text(req.private_data), "hello");
  EXPECT_EQ(req.port, kPort);
  EXPECT_EQ(req.peer, r.ip(0));

  // The server's receive buffer, posted before accept.
  client::Buffer* rb = r.s[1].ctx->alloc_buffer(4096);
  ASSERT_NE(rb, nullptr);
  ASSERT_EQ(r.s[1].ep->prepare(req.conn, {}), 0);
  client::Mr* rmr =
      r.s[1].ctx->reg_mr(r.s[1].ep->pd(req.conn), rb->addr, 4096, verbs::kAccessLocalWrite);
  ASSERT_NE(rmr, nullptr);
  client::Sge rsge{reinterpret_cast<std::uint64_t>(rb->addr), 4096, rmr->lkey};
  client::RecvWr rwr;
  rwr.wr_id = 77;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ASSERT_EQ(r.s[1].ep->post_recv(req.conn, rwr), 0);
  ASSERT_EQ(r.s[1].ep->accept(req.conn, bytes("welcome")), 0);

  ASSERT_TRUE(
      r.run([&] { return r.has(0, Event::kEstablished) && r.has(1, Event::kEstablished); }));
  EXPECT_EQ(text(r.take(0, Event::kEstablished)->private_data), "welcome");

  client::Buffer* sb = r.s[0].ctx->alloc_buffer(4096);
  ASSERT_NE(sb, nullptr);
  std::memcpy(sb->addr, "payload", 8);
  client::Mr* smr = r.s[0].ctx->reg_mr(r.s[0].ep->pd(a), sb->addr, 4096, 0);
  ASSERT_NE(smr, nullptr);
  client::Sge ssge{reinterpret_cast<std::uint64_t>(sb->addr), 8, smr->lkey};
  client::SendWr swr;
  swr.wr_id = 5;
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.opcode = verbs::WrOpcode::kSend;
  swr.send_flags = verbs::kSendSignaled;
  ASSERT_EQ(r.s[0].ep->post_send(a, swr), 0);
  ASSERT_TRUE(r.run([&] { return !r.s[0].wcs.empty() && !r.s[1].wcs.empty(); }));
  EXPECT_EQ(r.s[0].wcs[0].conn, a);
  EXPECT_TRUE(r.s[0].wcs[0].ok());
  EXPECT_EQ(r.s[0].wcs[0].wc.wr_id, 5u);
  EXPECT_EQ(r.s[1].wcs[0].conn, req.conn);
  EXPECT_EQ(r.s[1].wcs[0].wc.wr_id, 77u);
  EXPECT_EQ(r.s[1].wcs[0].wc.byte_len, 8u);
  EXPECT_STREQ(static_cast<const char*>(rb->addr), "payload");

  // Our disconnect promises no event here; the peer hears it.
  ASSERT_EQ(r.s[0].ep->disconnect(a), 0);
  EXPECT_EQ(r.s[0].ep->post_send(a, swr), ENOTCONN);
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kDisconnected); }));
  EXPECT_TRUE(r.take(1, Event::kDisconnected)->remote);
  ASSERT_TRUE(r.run([&] { return r.s[0].ep->connections() == 0; }));
  EXPECT_FALSE(r.has(0, Event::kDisconnected));
  EXPECT_EQ(r.s[1].ep->connections(), 0u);
  r.s[1].ctx->dereg_mr(rmr);
  r.s[0].ctx->dereg_mr(smr);
}

TEST(ConnEndpoint, RejectCarriesPrivateDataAndTheConsumerReason) {
  Rig r;
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, {}, bytes("let me in"));
  ASSERT_NE(a, 0u);
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
  const Event req = *r.take(1, Event::kConnectRequest);
  ASSERT_EQ(r.s[1].ep->reject(req.conn, bytes("go away")), 0);
  ASSERT_TRUE(r.run([&] { return r.has(0, Event::kRejected); }));
  const Event rej = *r.take(0, Event::kRejected);
  EXPECT_EQ(rej.conn, a);
  EXPECT_EQ(rej.reason, 28u);
  EXPECT_EQ(text(rej.private_data), "go away");
  EXPECT_EQ(r.s[0].ep->connections(), 0u);
  EXPECT_EQ(r.s[1].ep->connections(), 0u);
}

TEST(ConnEndpoint, RequestsBeyondTheCapAreRejected) {
  conn::Options one;
  one.max_connections = 1;
  Rig r({}, one);
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a1 = r.s[0].ep->connect(r.ip(1), kPort, {});
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
  const ConnId a2 = r.s[0].ep->connect(r.ip(1), kPort, {});
  ASSERT_NE(a2, 0u);
  ASSERT_TRUE(r.run([&] { return r.has(0, Event::kRejected); }));
  EXPECT_EQ(r.take(0, Event::kRejected)->conn, a2);
  EXPECT_EQ(r.s[1].ep->connections(), 1u);
  const Event req = *r.take(1, Event::kConnectRequest);
  ASSERT_EQ(r.s[1].ep->accept(req.conn), 0);
  ASSERT_TRUE(r.run([&] { return r.has(0, Event::kEstablished); }));
  EXPECT_EQ(r.take(0, Event::kEstablished)->conn, a1);

  // The active side's own cap: connect() beyond fails at once.
  conn::Options cap;
  cap.max_connections = 0;
  conn::Endpoint none(*r.s[0].ctx, cap);
  EXPECT_EQ(none.connect(r.ip(1), kPort, {}), 0u);
  EXPECT_EQ(errno, EDQUOT);
}

TEST(ConnEndpoint, DestroyingTheEndpointDisconnectsItsConnections) {
  Rig r;
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  ASSERT_NE(r.s[0].ep->connect(r.ip(1), kPort, {}), 0u);
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
  ASSERT_EQ(r.s[1].ep->accept(r.take(1, Event::kConnectRequest)->conn), 0);
  ASSERT_TRUE(
      r.run([&] { return r.has(0, Event::kEstablished) && r.has(1, Event::kEstablished); }));
  r.s[0].ep.reset();  // the drain: DREQ sent and answered before the QP goes
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kDisconnected); }));
  EXPECT_TRUE(r.take(1, Event::kDisconnected)->remote);
  r.s[0].ep = std::make_unique<conn::Endpoint>(*r.s[0].ctx);
}

TEST(ConnEndpoint, PdPerConnectionKeepsRkeysApart) {
  conn::Options own;
  own.pd_per_connection = true;
  Rig r({}, own);
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  ConnId srv[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    ASSERT_NE(r.s[0].ep->connect(r.ip(1), kPort, {}), 0u);
    ASSERT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
    srv[k] = r.take(1, Event::kConnectRequest)->conn;
    ASSERT_EQ(r.s[1].ep->accept(srv[k]), 0);
  }
  EXPECT_NE(r.s[1].ep->pd(srv[0]), r.s[1].ep->pd(srv[1]));
  EXPECT_NE(r.s[1].ep->pd(srv[0]), r.s[1].ep->pd(0));
}

TEST(ConnEndpoint, DataBeforeTheRtuEstablishesThePassiveSideOnce) {
  LoopbackOptions lo;
  lo.a2b.drop_nth = 2;  // A's frames: the REQ, then the RTU (lost), then the SEND
  Rig r({}, {}, lo);
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, {});
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
  const ConnId b = r.take(1, Event::kConnectRequest)->conn;
  client::Buffer* rb = r.s[1].ctx->alloc_buffer(4096);
  client::Mr* rmr = r.s[1].ctx->reg_mr(r.s[1].ep->pd(b), rb->addr, 4096, verbs::kAccessLocalWrite);
  client::Sge rsge{reinterpret_cast<std::uint64_t>(rb->addr), 4096, rmr->lkey};
  client::RecvWr rwr;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ASSERT_EQ(r.s[1].ep->prepare(b, {}), 0);
  ASSERT_EQ(r.s[1].ep->post_recv(b, rwr), 0);
  ASSERT_EQ(r.s[1].ep->accept(b), 0);
  ASSERT_TRUE(r.run([&] { return r.has(0, Event::kEstablished); }));

  client::Buffer* sb = r.s[0].ctx->alloc_buffer(64);
  client::Mr* smr = r.s[0].ctx->reg_mr(r.s[0].ep->pd(a), sb->addr, 64, 0);
  client::Sge ssge{reinterpret_cast<std::uint64_t>(sb->addr), 16, smr->lkey};
  client::SendWr swr;
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.opcode = verbs::WrOpcode::kSend;
  ASSERT_EQ(r.s[0].ep->post_send(a, swr), 0);
  ASSERT_TRUE(r.run([&] { return !r.s[1].wcs.empty(); }));
  // Established came with the data, not after it, and only once.
  ASSERT_TRUE(r.has(1, Event::kEstablished));
  EXPECT_EQ(r.s[1].events.front().kind, Event::kEstablished);
  r.take(1, Event::kEstablished);
  r.run([] { return false; });
  EXPECT_FALSE(r.has(1, Event::kEstablished));
  EXPECT_EQ(r.s[1].wcs[0].conn, b);
  r.s[1].ctx->dereg_mr(rmr);
  r.s[0].ctx->dereg_mr(smr);
}

// A connect request from an address without an ARP answer (a forged source, as a hosted
// service sees one): accept() fails and the CM drops the request (with a REJ "no resources"
// to the forged address). Nothing of it may stay behind: the session's record of the request (its
// id, the peer, the CM's id) went with it, so that the application's reject() finds nothing to do.
TEST(ConnEndpoint, AFailedAcceptLeavesNothingBehind) {
  Rig r;
  r.unresolvable[1] = true;
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, {});
  ASSERT_NE(a, 0u);
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
  const ConnId b = r.take(1, Event::kConnectRequest)->conn;
  EXPECT_EQ(r.s[1].ep->accept(b), EHOSTUNREACH);
  // The CM forgot the request when it sent the REJ; so did the session (before: it kept the
  // id, the peer and the CM's id of every such request, and reject() failed with EINVAL).
  EXPECT_EQ(r.s[1].ep->reject(b), ENOENT);
  EXPECT_EQ(r.s[1].ep->connections(), 0u);
}

// A peer's last message and its DREQ arrive between two polls: rdma_cm leaves the QP to the
// application at RDMA_CM_EVENT_DISCONNECTED, so that it still polls what its CQ holds (the
// message, then the flushed receives). The Endpoint destroys the QP at kDisconnected, so it
// must hand over the CQ's completions with the event, not drop them.
TEST(ConnEndpoint, CompletionsBeforeThePeersDreqAreNotLost) {
  Rig r;
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, {});
  ASSERT_NE(a, 0u);
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
  const ConnId b = r.take(1, Event::kConnectRequest)->conn;
  client::Buffer* rb = r.s[1].ctx->alloc_buffer(4096);
  ASSERT_EQ(r.s[1].ep->prepare(b, {}), 0);
  client::Mr* rmr = r.s[1].ctx->reg_mr(r.s[1].ep->pd(b), rb->addr, 4096, verbs::kAccessLocalWrite);
  ASSERT_NE(rmr, nullptr);
  client::Sge rsge{reinterpret_cast<std::uint64_t>(rb->addr), 2048, rmr->lkey};
  client::RecvWr rwr;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  for (std::uint64_t id : {1, 2}) {
    rwr.wr_id = id;
    rsge.addr = reinterpret_cast<std::uint64_t>(rb->addr) + (id - 1) * 2048;
    ASSERT_EQ(r.s[1].ep->post_recv(b, rwr), 0);
  }
  ASSERT_EQ(r.s[1].ep->accept(b), 0);
  ASSERT_TRUE(
      r.run([&] { return r.has(0, Event::kEstablished) && r.has(1, Event::kEstablished); }));

  client::Buffer* sb = r.s[0].ctx->alloc_buffer(64);
  std::memcpy(sb->addr, "last words", 11);
  client::Mr* smr = r.s[0].ctx->reg_mr(r.s[0].ep->pd(a), sb->addr, 64, 0);
  ASSERT_NE(smr, nullptr);
  client::Sge ssge{reinterpret_cast<std::uint64_t>(sb->addr), 11, smr->lkey};
  client::SendWr swr;
  swr.wr_id = 9;
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.opcode = verbs::WrOpcode::kSend;
  swr.send_flags = verbs::kSendSignaled;
  ASSERT_EQ(r.s[0].ep->post_send(a, swr), 0);
  // Only A polls: the SEND is acknowledged by B's engine, then A disconnects; B's
  // Endpoint has not looked at its CQ in the meantime.
  for (int i = 0; i < 20000 && r.s[0].wcs.empty(); ++i) r.s[0].ep->poll(r.s[0].events, r.s[0].wcs);
  ASSERT_EQ(r.s[0].wcs.size(), 1u);
  ASSERT_TRUE(r.s[0].wcs[0].ok());
  ASSERT_EQ(r.s[0].ep->disconnect(a), 0);
  for (int i = 0; i < 50; ++i) r.s[0].ep->poll(r.s[0].events, r.s[0].wcs);

  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kDisconnected); }));
  ASSERT_FALSE(r.s[1].wcs.empty()) << "the message before the DREQ was dropped";
  EXPECT_EQ(r.s[1].wcs[0].conn, b);
  EXPECT_TRUE(r.s[1].wcs[0].ok());
  EXPECT_EQ(r.s[1].wcs[0].wc.wr_id, 1u);
  EXPECT_EQ(r.s[1].wcs[0].wc.byte_len, 11u);
  EXPECT_STREQ(static_cast<const char*>(rb->addr), "last words");
  r.s[1].ctx->dereg_mr(rmr);
  r.s[0].ctx->dereg_mr(smr);
}

// The peer's DREQ lands while poll() reads the CQs (in-process, poll_cq drives the
// dataplane), after it has read the CM's events: the QP is in error and its receives are
// flushed before kDisconnected is read. A flush must not reach the application ahead of the
// event that explains it (rping's server took such a flush for a broken connection).
TEST(ConnEndpoint, FlushesOfThePeersDreqComeWithItsEvent) {
  Rig r;
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, {});
  ASSERT_NE(a, 0u);
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
  const ConnId b = r.take(1, Event::kConnectRequest)->conn;
  client::Buffer* rb = r.s[1].ctx->alloc_buffer(4096);
  ASSERT_EQ(r.s[1].ep->prepare(b, {}), 0);
  client::Mr* rmr = r.s[1].ctx->reg_mr(r.s[1].ep->pd(b), rb->addr, 4096, verbs::kAccessLocalWrite);
  ASSERT_NE(rmr, nullptr);
  for (std::uint64_t id : {1, 2})
    ASSERT_EQ(r.s[1].ep->post_recv(b, id, static_cast<std::uint8_t*>(rb->addr) + (id - 1) * 2048,
                                   2048, rmr->lkey),
              0);
  ASSERT_EQ(r.s[1].ep->accept(b), 0);
  ASSERT_TRUE(
      r.run([&] { return r.has(0, Event::kEstablished) && r.has(1, Event::kEstablished); }));
  r.s[1].events.clear();
  r.still[0] = true;  // the DREQ reaches B only through B's own polls
  r.alternate[1] = true;
  ASSERT_EQ(r.s[0].ep->disconnect(a), 0);
  bool early_flush = false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!r.has(1, Event::kDisconnected) && std::chrono::steady_clock::now() < end) {
    r.s[0].ep->poll(r.s[0].events, r.s[0].wcs);
    r.s[1].ep->poll(r.s[1].events, r.s[1].wcs);
    if (!r.s[1].wcs.empty() && !r.has(1, Event::kDisconnected)) early_flush = true;
  }
  ASSERT_TRUE(r.has(1, Event::kDisconnected));
  EXPECT_FALSE(early_flush) << "a flushed receive came before kDisconnected";
  ASSERT_EQ(r.s[1].wcs.size(), 2u);
  for (const conn::Completion& c : r.s[1].wcs) {
    EXPECT_EQ(c.conn, b);
    EXPECT_EQ(c.wc.status, verbs::WcStatus::kWrFlushErr);
  }
  r.s[1].ctx->dereg_mr(rmr);
}

// rdma_disconnect (or rdma_destroy_id) of a connection still being set up: the peer must not be
// left with a connection nobody answers on. The passive side's accept ends in an event that
// gives the connection up (a REJ to its REP, or its DREQ answered), not in a lasting one.
TEST(ConnEndpoint, DisconnectWhileConnectingLeavesThePeerNothing) {
  Rig r;
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, {});
  ASSERT_NE(a, 0u);
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
  const ConnId b = r.take(1, Event::kConnectRequest)->conn;
  ASSERT_EQ(r.s[0].ep->disconnect(a), 0);
  EXPECT_EQ(r.s[0].ep->connections(), 0u);
  ASSERT_EQ(r.s[1].ep->accept(b), 0);
  r.run([&] { return r.s[1].ep->connections() == 0; });
  EXPECT_EQ(r.s[1].ep->connections(), 0u);
  EXPECT_FALSE(r.has(0, Event::kEstablished));
  EXPECT_TRUE(r.has(1, Event::kRejected));  // the REJ to the REP: the requester is gone
}

// rdma_reject with more private data than a REJ carries (148 bytes) fails with EINVAL and
// leaves the request to be answered: a second reject() within the limit reaches the peer.
TEST(ConnEndpoint, ARejectTooLongLeavesTheRequestToAnswer) {
  Rig r;
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, {});
  ASSERT_NE(a, 0u);
  ASSERT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
  const ConnId b = r.take(1, Event::kConnectRequest)->conn;
  const std::vector<std::uint8_t> long_data(149, 0x5a);
  EXPECT_EQ(r.s[1].ep->reject(b, long_data), EINVAL);
  EXPECT_EQ(r.s[1].ep->connections(), 1u);
  ASSERT_EQ(r.s[1].ep->reject(b, bytes("go away")), 0);
  ASSERT_TRUE(r.run([&] { return r.has(0, Event::kRejected); }));
  EXPECT_EQ(text(r.take(0, Event::kRejected)->private_data), "go away");
  EXPECT_EQ(r.s[1].ep->connections(), 0u);
}

/// Connects side 0 to side 1 (listening on kPort) and returns both ends once established.
std::pair<ConnId, ConnId> establish(Rig& r, const conn::QpSizes& sizes = {}) {
  EXPECT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, sizes);
  EXPECT_NE(a, 0u);
  EXPECT_TRUE(r.run([&] { return r.has(1, Event::kConnectRequest); }));
  const ConnId b = r.take(1, Event::kConnectRequest)->conn;
  EXPECT_EQ(r.s[1].ep->prepare(b, sizes), 0);
  return {a, b};
}

TEST(ConnEndpoint, CompletionsBeforeTheDisconnectAreReported) {
  Rig r;
  const auto [a, b] = establish(r);
  client::Buffer* rb = r.s[1].ctx->alloc_buffer(4096);
  client::Mr* rmr = r.s[1].ctx->reg_mr(r.s[1].ep->pd(b), rb->addr, 4096, verbs::kAccessLocalWrite);
  client::Sge rsge{reinterpret_cast<std::uint64_t>(rb->addr), 4096, rmr->lkey};
  client::RecvWr rwr;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ASSERT_EQ(r.s[1].ep->post_recv(b, rwr), 0);
  ASSERT_EQ(r.s[1].ep->accept(b), 0);
  ASSERT_TRUE(
      r.run([&] { return r.has(0, Event::kEstablished) && r.has(1, Event::kEstablished); }));

  client::Buffer* sb = r.s[0].ctx->alloc_buffer(64);
  client::Mr* smr = r.s[0].ctx->reg_mr(r.s[0].ep->pd(a), sb->addr, 64, 0);
  client::Sge ssge{reinterpret_cast<std::uint64_t>(sb->addr), 16, smr->lkey};
  client::SendWr swr;
  swr.wr_id = 9;
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.opcode = verbs::WrOpcode::kSend;
  swr.send_flags = verbs::kSendSignaled;
  ASSERT_EQ(r.s[0].ep->post_send(a, swr), 0);
  // Only side 1 polls (the wire runs both engines): the SEND arrives, its ACK waits in side
  // 0's CQ; then side 1's DREQ waits on side 0's QP1.
  for (int i = 0; i < 20000 && r.s[1].wcs.empty(); ++i) r.s[1].ep->poll(r.s[1].events, r.s[1].wcs);
  ASSERT_FALSE(r.s[1].wcs.empty());
  ASSERT_EQ(r.s[1].ep->disconnect(b), 0);
  for (int i = 0; i < 2000; ++i) r.s[1].ep->poll(r.s[1].events, r.s[1].wcs);
  ASSERT_TRUE(r.s[0].wcs.empty());
  ASSERT_TRUE(r.run([&] { return r.has(0, Event::kDisconnected); }));
  ASSERT_FALSE(r.s[0].wcs.empty());
  EXPECT_EQ(r.s[0].wcs[0].conn, a);
  EXPECT_EQ(r.s[0].wcs[0].wc.wr_id, 9u);
  EXPECT_TRUE(r.s[0].wcs[0].ok());
  r.s[1].ep->dereg_mr(rmr);
  r.s[0].ep->dereg_mr(smr);
}

TEST(ConnEndpoint, CloseDestroysTheQpAtOnce) {
  Rig r;
  const auto [a, b] = establish(r);
  ASSERT_EQ(r.s[1].ep->accept(b), 0);
  ASSERT_TRUE(
      r.run([&] { return r.has(0, Event::kEstablished) && r.has(1, Event::kEstablished); }));
  const std::size_t qps = r.lb.side(1).qp_count();
  ASSERT_EQ(r.s[1].ep->close(b), 0);
  EXPECT_EQ(r.lb.side(1).qp_count(), qps - 1);
  EXPECT_EQ(r.s[1].ep->connections(), 0u);
  EXPECT_EQ(r.s[1].ep->qp(b), nullptr);
  EXPECT_EQ(r.s[1].ep->close(b), ENOENT);
  ASSERT_TRUE(r.run([&] { return r.has(0, Event::kDisconnected); }));
  EXPECT_TRUE(r.take(0, Event::kDisconnected)->remote);
  EXPECT_FALSE(r.has(1, Event::kDisconnected));
  EXPECT_EQ(r.s[0].ep->connections(), 0u);
}

TEST(ConnEndpoint, ARequestWaitsForItsSourcesArpAnswer) {
  bool known = false;
  int asked = 0;
  Rig r({}, {}, {}, [&](Ipv4Addr, bool ask) {
    asked += ask ? 1 : 0;
    return known;
  });
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, {}, bytes("early"));
  ASSERT_NE(a, 0u);
  // Not reported while the port has no MAC for the source (accept() would have to wait).
  r.run([&] { return asked > 0 && r.s[1].ep->connections() == 1; });
  r.run([] { return false; });
  EXPECT_FALSE(r.has(1, Event::kConnectRequest));
  EXPECT_EQ(asked, 1);
  known = true;  // the ARP answer
  ASSERT_TRUE(r.run_for([&] { return r.has(1, Event::kConnectRequest); }));
  const Event req = *r.take(1, Event::kConnectRequest);
  EXPECT_EQ(text(req.private_data), "early");
  EXPECT_EQ(req.port, kPort);
  ASSERT_EQ(r.s[1].ep->accept(req.conn), 0);
  ASSERT_TRUE(r.run([&] { return r.has(0, Event::kEstablished); }));
}

TEST(ConnEndpoint, ARequestWhoseSourceNeverAnswersArpIsRejected) {
  conn::Options quick;
  quick.resolve_ms = 50;
  Rig r({}, quick, {}, [](Ipv4Addr, bool) { return false; });
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, {});
  ASSERT_NE(a, 0u);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!r.run([&] { return r.has(0, Event::kRejected); }) &&
         std::chrono::steady_clock::now() < end) {
  }
  ASSERT_TRUE(r.has(0, Event::kRejected));
  EXPECT_EQ(r.take(0, Event::kRejected)->conn, a);
  EXPECT_FALSE(r.has(1, Event::kConnectRequest));
  EXPECT_EQ(r.s[1].ep->connections(), 0u);
}

// A segment host holding every waiting slot with requests from addresses that never answer ARP
// (cheap: max_resolving REQs per resolve_ms) must not turn away the next host's request: the
// oldest waiting request gives way, so a flood has to outpace a real ARP answer.
TEST(ConnEndpoint, AFullResolvingQueueGivesUpItsOldestNotTheNewcomer) {
  conn::Options one;
  one.max_resolving = 1;
  bool known = false;
  Rig r({}, one, {}, [&](Ipv4Addr, bool) { return known; });
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const ConnId a = r.s[0].ep->connect(r.ip(1), kPort, {}, bytes("hog"));
  ASSERT_NE(a, 0u);
  r.run([&] { return r.s[1].ep->connections() == 1; });
  const ConnId b = r.s[0].ep->connect(r.ip(1), kPort, {}, bytes("new"));
  ASSERT_NE(b, 0u);
  ASSERT_TRUE(r.run([&] { return r.has(0, Event::kRejected); }));
  EXPECT_EQ(r.take(0, Event::kRejected)->conn, a);
  known = true;
  ASSERT_TRUE(r.run_for([&] { return r.has(1, Event::kConnectRequest); }));
  EXPECT_EQ(text(r.take(1, Event::kConnectRequest)->private_data), "new");
  EXPECT_EQ(r.s[1].ep->connections(), 1u);
}

// A waiting request is looked up at a pace, not at every poll: attached, each lookup is a round
// trip to roced and a command on the port's loop 0, and a segment host keeps max_resolving of
// them waiting for the cost of a few REQs a second. ARP is asked again meanwhile (a lost
// answer does not cost the connection).
TEST(ConnEndpoint, AWaitingRequestIsLookedUpAtAPaceNotEveryPoll) {
  int lookups = 0, asks = 0;
  Rig r({}, {}, {}, [&](Ipv4Addr, bool ask) {
    ++lookups;
    asks += ask ? 1 : 0;
    return false;
  });
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  ASSERT_NE(r.s[0].ep->connect(r.ip(1), kPort, {}), 0u);
  ASSERT_TRUE(r.run([&] { return lookups > 0; }));
  const int l0 = lookups;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 2000; ++i) r.s[1].ep->poll(r.s[1].events, r.s[1].wcs);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_LE(lookups - l0, ms / 50 + 2) << "2000 polls in " << ms << " ms";
  // Held long enough, ARP is asked again.
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(450);
  while (std::chrono::steady_clock::now() < end) r.s[1].ep->poll(r.s[1].events, r.s[1].wcs);
  EXPECT_GE(asks, 2);
}

// Every request from a source the port does not know asks ARP: a segment host sending REQs
// from ever new (forged) addresses would have the port broadcast one ARP request per REQ. The
// Endpoint asks at most max_arp_asks times (64) per 100 ms; the others at their next turn.
TEST(ConnEndpoint, ArpAsksForRequestsAreBudgeted) {
  int asks = 0;
  conn::Options many;
  many.max_resolving = 256;
  many.max_arp_asks = 8;
  Rig r({}, many, {}, [&](Ipv4Addr, bool ask) {
    asks += ask ? 1 : 0;
    return false;
  });
  ASSERT_EQ(r.s[1].ep->listen(kPort), 0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 40; ++i) ASSERT_NE(r.s[0].ep->connect(r.ip(1), kPort, {}), 0u);
  r.run([&] { return r.s[1].ep->connections() == 40; });
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(r.s[1].ep->connections(), 40u);
  std::printf("40 requests in %lld ms: %d ARP asks\n", static_cast<long long>(ms), asks);
  EXPECT_LE(asks, 8 * (static_cast<int>(ms) / 100 + 1));
}

}  // namespace
}  // namespace roce::test
