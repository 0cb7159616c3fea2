// librdmacm's state machine (verbs/rdmacm/cma.h) on two in-process Contexts over the in-memory
// wire, each side with its own Cma as two processes would have: events on a pollable channel
// in rdma-core's structs, private data both ways, reject, address errors, synchronous ids,
// backlog, migrate, and the errors of bad calls. A pump thread plays the provider's progress
// thread: it reads each Context's CM events and hands them to the side's Cma (the CM sink).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/local/local_context.h"
#include "controlplane/cm/cm_hub.h"
#include "dataplane/engine/engine.h"
#include "tests/support/loopback.h"
#include "verbs/rdmacm/cma.h"

namespace roce::test {
namespace {

using rdmacm::Channel;
using rdmacm::Cma;
using rdmacm::Id;
using rdmacm::Port;

constexpr std::uint16_t kPort = 7471;

sockaddr_in sin_of(Ipv4Addr ip, std::uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(ip.v);
  s.sin_port = htons(port);
  return s;
}
const sockaddr* sa(const sockaddr_in& s) { return reinterpret_cast<const sockaddr*>(&s); }

struct Side {
  std::unique_ptr<client::Context> ctx;
  Port port;
  std::unique_ptr<Cma> cma;
  client::Pd* pd = nullptr;
  client::Cq* cq = nullptr;
};

class Rig {
 public:
  /// `sr`: both engines allow selective repeat (roced's `transport: selective_repeat`).
  explicit Rig(bool sr = false) : lb({}, config(0, sr), config(1, sr)) {
    for (int i = 0; i < 2; ++i) {
      client::LocalOptions o;
      o.engine = &lb.side(i);
      o.progress = [this] { lb.run_until([] { return false; }, 2000); };
      engine::Engine& peer = lb.side(1 - i);
      o.resolve = [&peer](Ipv4Addr ip) -> std::optional<MacAddr> {
        if (ip == peer.config().ipv4) return peer.config().mac;
        return std::nullopt;
      };
      o.neighbour = [&peer](Ipv4Addr ip, bool) { return ip == peer.config().ipv4; };
      o.port.mac = lb.side(i).config().mac;
      o.port.ipv4 = lb.side(i).config().ipv4;
      o.port.gid = ipv4_mapped(o.port.ipv4);
      o.port.max_mtu = verbs::Mtu::k1024;
      s[i].ctx = client::open_local(std::move(o));
      s[i].port.ctx = s[i].ctx.get();
      s[i].port.lock = &mu;  // one wire under both: every call into either is serialised
      s[i].cma = std::make_unique<Cma>();
      s[i].cma->add_port(&s[i].port);
      std::lock_guard lk(mu);
      s[i].pd = s[i].ctx->alloc_pd();
      s[i].cq = s[i].ctx->create_cq(64);
    }
    pump = std::thread([this] {
      while (!stop) {
        bool any = false;
        for (auto& x : s) {
          client::CmEvent ev;
          int rc;
          {
            std::lock_guard lk(mu);
            rc = x.ctx->cm_get_event(ev, 0);
          }
          if (rc == 0) {
            x.cma->deliver(&x.port, std::move(ev));
            any = true;
          }
        }
        if (!any) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    });
  }
  ~Rig() {
    stop = true;
    pump.join();
    for (auto& x : s) x.cma.reset();
  }
  static engine::EngineConfig config(int side, bool sr) {
    engine::EngineConfig c = Loopback::default_config(side);
    c.selective_repeat = sr;
    return c;
  }
  Ipv4Addr ip(int i) { return lb.side(i).config().ipv4; }
  /// A QP in INIT, as rdma_create_qp leaves it (receives may be posted before connecting).
  client::Qp* qp(int i) {
    std::lock_guard lk(mu);
    client::QpCap cap;
    cap.max_send_wr = cap.max_recv_wr = 16;
    cap.max_send_sge = cap.max_recv_sge = 1;
    client::Qp* q = s[i].ctx->create_qp(s[i].pd, client::QpType::kRc, s[i].cq, s[i].cq, cap);
    if (q == nullptr) return nullptr;
    client::QpAttr a;
    a.qp_state = client::QpState::kInit;
    a.qp_access_flags = verbs::kAccessLocalWrite | verbs::kAccessRemoteWrite |
                        verbs::kAccessRemoteRead | verbs::kAccessRemoteAtomic;
    EXPECT_EQ(
        s[i].ctx->modify_qp(
            q, a, verbs::kQpState | verbs::kQpPkeyIndex | verbs::kQpPort | verbs::kQpAccessFlags),
        0);
    return q;
  }
  /// The next event of `c` within `ms` (poll() on its fd first, as a program would).
  rdma_cm_event* next(int i, Channel* c, int ms = 3000) {
    pollfd p{c->pub.fd, POLLIN, 0};
    if (poll(&p, 1, ms) != 1) return nullptr;
    rdma_cm_event* e = nullptr;
    return s[i].cma->get_event(c, &e) == 0 ? e : nullptr;
  }
  /// next() that must be of `type`; acked unless `keep`.
  rdma_cm_event* expect(int i, Channel* c, rdma_cm_event_type type, bool keep = false) {
    rdma_cm_event* e = next(i, c);
    EXPECT_NE(e, nullptr) << "no event, wanted " << type;
    if (e == nullptr) return nullptr;
    EXPECT_EQ(e->event, type) << "status " << e->status;
    if (!keep) {
      s[i].cma->ack_event(e);
      return nullptr;
    }
    return e;
  }
  /// A listener on side 1 at kPort and a client id on side 0 with its route resolved.
  void listen_and_route(Channel*& c0, Channel*& c1, Id*& cl, Id*& lis) {
    c0 = s[0].cma->create_channel();
    c1 = s[1].cma->create_channel();
    lis = s[1].cma->create_id(c1, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
    const sockaddr_in any = sin_of(Ipv4Addr{0}, kPort);
    ASSERT_EQ(s[1].cma->bind(lis, sa(any)), 0);
    ASSERT_EQ(s[1].cma->listen(lis, 4), 0);
    cl = s[0].cma->create_id(c0, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
    const sockaddr_in dst = sin_of(ip(1), kPort);
    ASSERT_EQ(s[0].cma->resolve_addr(cl, nullptr, sa(dst), 2000), 0);
    expect(0, c0, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_EQ(s[0].cma->resolve_route(cl, 2000), 0);
    expect(0, c0, RDMA_CM_EVENT_ROUTE_RESOLVED);
  }

  Loopback lb;
  std::mutex mu;
  Side s[2];
  std::atomic<bool> stop{false};
  std::thread pump;
};

std::string text(const void* p, std::size_t n) {
  std::string s(static_cast<const char*>(p), n);
  return s.substr(0, s.find('\0'));
}

TEST(RdmaCm, ConnectsWithPrivateDataMovesDataAndDisconnects) {
  Rig r;
  Channel *c0, *c1;
  Id *cl, *lis;
  r.listen_and_route(c0, c1, cl, lis);
  // The resolved route: our address, the peer's, the GIDs.
  EXPECT_EQ(ntohl(cl->pub.route.addr.src_sin.sin_addr.s_addr), r.ip(0).v);
  EXPECT_EQ(ntohl(cl->pub.route.addr.dst_sin.sin_addr.s_addr), r.ip(1).v);
  EXPECT_EQ(ntohs(cl->pub.route.addr.dst_sin.sin_port), kPort);
  EXPECT_EQ(cl->pub.route.num_paths, 1);
  EXPECT_EQ(cl->pub.route.addr.addr.ibaddr.dgid.raw[10], 0xFF);

  client::Qp* q0 = r.qp(0);
  client::Qp* q1 = r.qp(1);
  ASSERT_NE(q0, nullptr);
  ASSERT_NE(q1, nullptr);
  rdma_conn_param p{};
  p.private_data = "hello";
  p.private_data_len = 6;
  p.responder_resources = 2;
  p.initiator_depth = 3;
  p.retry_count = 7;
  p.rnr_retry_count = 7;
  ASSERT_EQ(r.s[0].cma->connect(cl, q0, &p), 0);
  EXPECT_EQ(r.s[0].cma->connect(cl, q0, &p), EINVAL);  // already connecting

  rdma_cm_event* req = r.expect(1, c1, RDMA_CM_EVENT_CONNECT_REQUEST, true);
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(req->listen_id, &lis->pub);
  ASSERT_NE(req->id, &lis->pub);
  EXPECT_EQ(req->param.conn.private_data_len, rdmacm::kReqPrivate);
  EXPECT_EQ(text(req->param.conn.private_data, req->param.conn.private_data_len), "hello");
  // From the listener's side: what it may issue is the requester's responder resources.
  EXPECT_EQ(req->param.conn.initiator_depth, 2);
  EXPECT_EQ(req->param.conn.responder_resources, 3);
  rdma_cm_id* child = req->id;
  EXPECT_EQ(ntohl(child->route.addr.dst_sin.sin_addr.s_addr), r.ip(0).v);
  EXPECT_EQ(ntohs(child->route.addr.src_sin.sin_port), kPort);
  EXPECT_EQ(r.s[1].cma->ack_event(req), 0);

  // The server posts its receive before accepting, as rping does.
  client::Buffer *rb, *sb;
  client::Mr *rmr, *smr;
  {
    std::lock_guard lk(r.mu);
    rb = r.s[1].ctx->alloc_buffer(4096);
    rmr = r.s[1].ctx->reg_mr(r.s[1].pd, rb->addr, 4096, verbs::kAccessLocalWrite);
    client::Sge sge{reinterpret_cast<std::uint64_t>(rb->addr), 4096, rmr->lkey};
    client::RecvWr wr;
    wr.wr_id = 77;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const client::RecvWr* bad = nullptr;
    ASSERT_EQ(r.s[1].ctx->post_recv(q1, &wr, &bad), 0);
  }
  rdma_conn_param ap{};
  ap.private_data = "welcome";
  ap.private_data_len = 8;
  ap.responder_resources = 1;
  ap.initiator_depth = 1;
  ASSERT_EQ(r.s[1].cma->accept(rdmacm::id_of(child), q1, &ap), 0);
  rdma_cm_event* est = r.expect(0, c0, RDMA_CM_EVENT_ESTABLISHED, true);
  ASSERT_NE(est, nullptr);
  EXPECT_EQ(est->id, &cl->pub);
  EXPECT_EQ(est->param.conn.private_data_len, rdmacm::kRepPrivate);
  EXPECT_EQ(text(est->param.conn.private_data, est->param.conn.private_data_len), "welcome");
  r.s[0].cma->ack_event(est);
  r.expect(1, c1, RDMA_CM_EVENT_ESTABLISHED);

  // The QPs are connected: a SEND arrives.
  {
    std::lock_guard lk(r.mu);
    sb = r.s[0].ctx->alloc_buffer(4096);
    std::memcpy(sb->addr, "payload", 8);
    smr = r.s[0].ctx->reg_mr(r.s[0].pd, sb->addr, 4096, 0);
    client::Sge sge{reinterpret_cast<std::uint64_t>(sb->addr), 8, smr->lkey};
    client::SendWr wr;
    wr.wr_id = 5;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = verbs::WrOpcode::kSend;
    wr.send_flags = verbs::kSendSignaled;
    const client::SendWr* bad = nullptr;
    ASSERT_EQ(r.s[0].ctx->post_send(q0, &wr, &bad), 0);
  }
  bool got = false;
  for (int i = 0; i < 2000 && !got; ++i) {
    std::lock_guard lk(r.mu);
    client::Wc wc[4];
    const int n = r.s[1].ctx->poll_cq(r.s[1].cq, 4, wc);
    for (int k = 0; k < n; ++k)
      if (wc[k].wr_id == 77) {
        EXPECT_EQ(wc[k].status, client::WcStatus::kSuccess);
        got = true;
      }
  }
  ASSERT_TRUE(got);
  EXPECT_STREQ(static_cast<const char*>(rb->addr), "payload");

  // Either side's disconnect: both hear DISCONNECTED; a second disconnect is harmless.
  ASSERT_EQ(r.s[0].cma->disconnect(cl), 0);
  r.expect(1, c1, RDMA_CM_EVENT_DISCONNECTED);
  r.expect(0, c0, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(r.s[1].cma->disconnect(rdmacm::id_of(child)), 0);

  EXPECT_EQ(r.s[1].cma->destroy_id(rdmacm::id_of(child)), 0);
  EXPECT_EQ(r.s[1].cma->destroy_id(lis), 0);
  EXPECT_EQ(r.s[0].cma->destroy_id(cl), 0);
  EXPECT_EQ(r.s[0].cma->destroy_channel(c0), 0);
  EXPECT_EQ(r.s[1].cma->destroy_channel(c1), 0);
}

TEST(RdmaCm, RejectCarriesPrivateDataAndTheConsumerReason) {
  Rig r;
  Channel *c0, *c1;
  Id *cl, *lis;
  r.listen_and_route(c0, c1, cl, lis);
  ASSERT_EQ(r.s[0].cma->connect(cl, r.qp(0), nullptr), 0);
  rdma_cm_event* req = r.expect(1, c1, RDMA_CM_EVENT_CONNECT_REQUEST, true);
  ASSERT_NE(req, nullptr);
  Id* child = rdmacm::id_of(req->id);
  r.s[1].cma->ack_event(req);
  std::string big(rdmacm::kRejPrivate + 1, 'x');
  EXPECT_EQ(r.s[1].cma->reject(child, big.data(), static_cast<std::uint8_t>(big.size())), EINVAL);
  ASSERT_EQ(r.s[1].cma->reject(child, "go away", 8), 0);
  EXPECT_EQ(r.s[1].cma->accept(child, r.qp(1), nullptr), EINVAL);  // answered already
  rdma_cm_event* rej = r.expect(0, c0, RDMA_CM_EVENT_REJECTED, true);
  ASSERT_NE(rej, nullptr);
  EXPECT_EQ(rej->status, 28);  // IBA "consumer defined"
  EXPECT_EQ(rej->param.conn.private_data_len, rdmacm::kRejPrivate);
  EXPECT_EQ(text(rej->param.conn.private_data, rej->param.conn.private_data_len), "go away");
  r.s[0].cma->ack_event(rej);
  EXPECT_EQ(r.s[1].cma->destroy_id(child), 0);
}

TEST(RdmaCm, UnresolvableAddressGivesAddrErrorAfterTheTimeout) {
  Rig r;
  Channel* c = r.s[0].cma->create_channel();
  Id* id = r.s[0].cma->create_id(c, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
  const sockaddr_in dst = sin_of(Ipv4Addr{0xC00002FE}, kPort);  // 192.0.2.254: nobody
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(r.s[0].cma->resolve_addr(id, nullptr, sa(dst), 300), 0);
  rdma_cm_event* e = r.expect(0, c, RDMA_CM_EVENT_ADDR_ERROR, true);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->status, -ETIMEDOUT);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(290));
  r.s[0].cma->ack_event(e);
  EXPECT_EQ(r.s[0].cma->resolve_route(id, 100), EINVAL);  // no address
  EXPECT_EQ(r.s[0].cma->destroy_id(id), 0);
  EXPECT_EQ(r.s[0].cma->destroy_channel(c), 0);
}

TEST(RdmaCm, SynchronousIdsWaitForTheirResults) {
  Rig r;
  Channel* c1 = r.s[1].cma->create_channel();
  Id* lis = r.s[1].cma->create_id(c1, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
  const sockaddr_in me = sin_of(r.ip(1), kPort);
  ASSERT_EQ(r.s[1].cma->bind(lis, sa(me)), 0);
  ASSERT_EQ(r.s[1].cma->listen(lis, 0), 0);
  client::Qp* q1 = r.qp(1);
  std::thread server([&] {
    rdma_cm_event* req = r.expect(1, c1, RDMA_CM_EVENT_CONNECT_REQUEST, true);
    if (req == nullptr) return;
    Id* child = rdmacm::id_of(req->id);
    r.s[1].cma->ack_event(req);
    EXPECT_EQ(r.s[1].cma->accept(child, q1, nullptr), 0);
  });
  Id* cl = r.s[0].cma->create_id(nullptr, nullptr, RDMA_PS_TCP, IBV_QPT_RC);  // synchronous
  ASSERT_TRUE(cl->sync);
  const sockaddr_in dst = sin_of(r.ip(1), kPort);
  ASSERT_EQ(r.s[0].cma->resolve_addr(cl, nullptr, sa(dst), 2000), 0);
  ASSERT_NE(cl->pub.event, nullptr);
  EXPECT_EQ(cl->pub.event->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(r.s[0].cma->resolve_route(cl, 2000), 0);
  ASSERT_EQ(r.s[0].cma->connect(cl, r.qp(0), nullptr), 0);
  EXPECT_EQ(cl->pub.event->event, RDMA_CM_EVENT_ESTABLISHED);
  server.join();
  r.expect(1, c1, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(r.s[0].cma->destroy_id(cl), 0);  // acks its last event, disconnects
  r.expect(1, c1, RDMA_CM_EVENT_DISCONNECTED);

  // A synchronous connect that is refused: ECONNREFUSED, the REJECTED event kept on the id.
  Id* cl2 = r.s[0].cma->create_id(nullptr, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
  const sockaddr_in nobody = sin_of(r.ip(1), kPort + 1);
  ASSERT_EQ(r.s[0].cma->resolve_addr(cl2, nullptr, sa(nobody), 2000), 0);
  ASSERT_EQ(r.s[0].cma->resolve_route(cl2, 2000), 0);
  EXPECT_EQ(r.s[0].cma->connect(cl2, r.qp(0), nullptr), ECONNREFUSED);
  EXPECT_EQ(cl2->pub.event->event, RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(r.s[0].cma->destroy_id(cl2), 0);
}

TEST(RdmaCm, AGoneListenerIsAnInvalidServiceIdAndItsPortListensAgain) {
  // perftest -R listens twice on its port, one listen id after the other; its client retries
  // on REJ 8 "invalid service ID" (nobody listens yet), as the kernel answers then.
  Rig r;
  Channel *c0, *c1;
  Id *cl, *lis;
  r.listen_and_route(c0, c1, cl, lis);
  ASSERT_EQ(r.s[1].cma->destroy_id(lis), 0);
  ASSERT_EQ(r.s[0].cma->connect(cl, r.qp(0), nullptr), 0);
  rdma_cm_event* rej = r.expect(0, c0, RDMA_CM_EVENT_REJECTED, true);
  ASSERT_NE(rej, nullptr);
  EXPECT_EQ(rej->status, 8);
  r.s[0].cma->ack_event(rej);
  // A new listener on the same port is heard.
  Id* lis2 = r.s[1].cma->create_id(c1, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
  const sockaddr_in any = sin_of(Ipv4Addr{0}, kPort);
  ASSERT_EQ(r.s[1].cma->bind(lis2, sa(any)), 0);
  ASSERT_EQ(r.s[1].cma->listen(lis2, 1), 0);
  Id* cl2 = r.s[0].cma->create_id(c0, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
  const sockaddr_in dst = sin_of(r.ip(1), kPort);
  ASSERT_EQ(r.s[0].cma->resolve_addr(cl2, nullptr, sa(dst), 2000), 0);
  r.expect(0, c0, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(r.s[0].cma->resolve_route(cl2, 2000), 0);
  r.expect(0, c0, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ASSERT_EQ(r.s[0].cma->connect(cl2, r.qp(0), nullptr), 0);
  rdma_cm_event* req = r.expect(1, c1, RDMA_CM_EVENT_CONNECT_REQUEST, true);
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(req->listen_id, &lis2->pub);
  r.s[1].cma->ack_event(req);
}

// The backlog counts connect requests whose CONNECT_REQUEST the program has not retrieved
// (the kernel's ucma takes a slot when it queues the event and gives it back when
// rdma_get_cm_event hands it out): a request that ends before it is read keeps its slot, so a
// program that does not read its channel cannot be queued requests without bound.
TEST(RdmaCm, BacklogCountsTheRequestsNotYetRetrieved) {
  Rig r;
  Channel* c0 = r.s[0].cma->create_channel();
  Channel* c1 = r.s[1].cma->create_channel();
  Id* lis = r.s[1].cma->create_id(c1, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
  const sockaddr_in any = sin_of(Ipv4Addr{0}, kPort);
  ASSERT_EQ(r.s[1].cma->bind(lis, sa(any)), 0);
  ASSERT_EQ(r.s[1].cma->listen(lis, 1), 0);
  Id* a[4];
  for (Id*& id : a) {
    id = r.s[0].cma->create_id(c0, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
    const sockaddr_in dst = sin_of(r.ip(1), kPort);
    ASSERT_EQ(r.s[0].cma->resolve_addr(id, nullptr, sa(dst), 2000), 0);
    r.expect(0, c0, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_EQ(r.s[0].cma->resolve_route(id, 2000), 0);
    r.expect(0, c0, RDMA_CM_EVENT_ROUTE_RESOLVED);
  }
  const auto refused = [&](Id* id) {
    rdma_cm_event* rej = r.expect(0, c0, RDMA_CM_EVENT_REJECTED, true);
    ASSERT_NE(rej, nullptr);
    EXPECT_EQ(rej->id, &id->pub);
    EXPECT_EQ(rej->status, 3);  // IBA "no resources"
    r.s[0].cma->ack_event(rej);
  };
  // a[0]'s request queued, not read: the backlog of 1 is full.
  ASSERT_EQ(r.s[0].cma->connect(a[0], r.qp(0), nullptr), 0);
  pollfd p{c1->pub.fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 3000), 1);
  ASSERT_EQ(r.s[0].cma->connect(a[1], r.qp(0), nullptr), 0);
  refused(a[1]);
  // a[0]'s requester goes away: the request's event is still unread, its slot still taken.
  EXPECT_EQ(r.s[0].cma->destroy_id(a[0]), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(r.s[0].cma->connect(a[2], r.qp(0), nullptr), 0);
  refused(a[2]);
  // Read: the slot comes back, unanswered as the request is.
  rdma_cm_event* req = r.expect(1, c1, RDMA_CM_EVENT_CONNECT_REQUEST, true);
  ASSERT_NE(req, nullptr);
  Id* child = rdmacm::id_of(req->id);
  r.s[1].cma->ack_event(req);
  while (rdma_cm_event* e = r.next(1, c1, 200)) r.s[1].cma->ack_event(e);  // what a[0] left
  ASSERT_EQ(r.s[0].cma->connect(a[3], r.qp(0), nullptr), 0);
  req = r.expect(1, c1, RDMA_CM_EVENT_CONNECT_REQUEST, true);
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(req->listen_id, &lis->pub);
  r.s[1].cma->ack_event(req);
  EXPECT_EQ(r.s[1].cma->destroy_id(child), 0);
  EXPECT_EQ(r.s[1].cma->destroy_id(lis), 0);
}

TEST(RdmaCm, HundredsOfConnectsAtOnceNeedNoRetransmission) {
  // cmtime's pattern: every REQ at once, then every DREQ. MADs beyond QP1's queues used to be
  // dropped and waited for their retransmission (4.6 s).
  constexpr int kConns = 150;
  Rig r;
  Channel* c0 = r.s[0].cma->create_channel();
  Channel* c1 = r.s[1].cma->create_channel();
  Id* lis = r.s[1].cma->create_id(c1, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
  const sockaddr_in any = sin_of(Ipv4Addr{0}, kPort);
  ASSERT_EQ(r.s[1].cma->bind(lis, sa(any)), 0);
  ASSERT_EQ(r.s[1].cma->listen(lis, 0), 0);
  std::vector<Id*> ids;
  for (int i = 0; i < kConns; ++i) {
    Id* id = r.s[0].cma->create_id(c0, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
    const sockaddr_in dst = sin_of(r.ip(1), kPort);
    ASSERT_EQ(r.s[0].cma->resolve_addr(id, nullptr, sa(dst), 2000), 0);
    r.expect(0, c0, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_EQ(r.s[0].cma->resolve_route(id, 2000), 0);
    r.expect(0, c0, RDMA_CM_EVENT_ROUTE_RESOLVED);
    ids.push_back(id);
  }
  std::vector<client::Qp*> qps0, qps1;
  for (int i = 0; i < kConns; ++i) {
    qps0.push_back(r.qp(0));
    qps1.push_back(r.qp(1));
    ASSERT_NE(qps0.back(), nullptr);
    ASSERT_NE(qps1.back(), nullptr);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kConns; ++i) ASSERT_EQ(r.s[0].cma->connect(ids[i], qps0[i], nullptr), 0);
  std::vector<Id*> children;
  int established = 0;
  while ((children.size() < kConns || established < kConns) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    for (int side : {1, 0}) {
      Channel* c = side ? c1 : c0;
      pollfd p{c->pub.fd, POLLIN, 0};
      if (poll(&p, 1, 1) != 1) continue;
      rdma_cm_event* e = nullptr;
      ASSERT_EQ(r.s[side].cma->get_event(c, &e), 0);
      if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        Id* child = rdmacm::id_of(e->id);
        children.push_back(child);
        r.s[1].cma->ack_event(e);
        ASSERT_EQ(r.s[1].cma->accept(child, qps1[children.size() - 1], nullptr), 0);
        continue;
      }
      if (side == 0) {
        EXPECT_EQ(e->event, RDMA_CM_EVENT_ESTABLISHED) << "status " << e->status;
        ++established;
      }
      r.s[side].cma->ack_event(e);
    }
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(established, kConns) << children.size() << " requests";
  EXPECT_LT(took, std::chrono::seconds(3)) << "a MAD waited for its retransmission";
  // Every DREQ at once: every DISCONNECTED without retransmission too.
  const auto t1 = std::chrono::steady_clock::now();
  for (Id* id : ids) ASSERT_EQ(r.s[0].cma->disconnect(id), 0);
  int down = 0;
  while (down < kConns && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(10)) {
    pollfd p{c0->pub.fd, POLLIN, 0};
    if (poll(&p, 1, 1) != 1) continue;
    rdma_cm_event* e = nullptr;
    ASSERT_EQ(r.s[0].cma->get_event(c0, &e), 0);
    if (e->event == RDMA_CM_EVENT_DISCONNECTED) ++down;
    r.s[0].cma->ack_event(e);
  }
  EXPECT_EQ(down, kConns);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(3));
  // Neither side's QP1 overran its send CQ (the engine runs between the CM's polls: the CM
  // must not post beyond what it has reaped) nor dropped a MAD.
  std::lock_guard lk(r.mu);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.lb.side(i).stats().get(engine::Counter::kCqOverflow), 0u) << "side " << i;
    EXPECT_EQ(cm::CmHub::get(r.lb.side(i), {})->agent().stats().tx_dropped, 0u) << "side " << i;
  }
}

TEST(RdmaCm, ExitDisconnectsWhatIsUpAndWaitsForTheAnswer) {
  // The kernel's CM sends the DREQs of a process that exits; ours ends with the process, so
  // librdmacm's exit handler does it and waits for the DREPs (rping's peer must not wait for
  // its DREQ retries to run out).
  Rig r;
  Channel *c0, *c1;
  Id *cl, *lis;
  r.listen_and_route(c0, c1, cl, lis);
  ASSERT_EQ(r.s[0].cma->connect(cl, r.qp(0), nullptr), 0);
  rdma_cm_event* req = r.expect(1, c1, RDMA_CM_EVENT_CONNECT_REQUEST, true);
  ASSERT_NE(req, nullptr);
  Id* child = rdmacm::id_of(req->id);
  r.s[1].cma->ack_event(req);
  ASSERT_EQ(r.s[1].cma->accept(child, r.qp(1), nullptr), 0);
  r.expect(0, c0, RDMA_CM_EVENT_ESTABLISHED);
  r.expect(1, c1, RDMA_CM_EVENT_ESTABLISHED);
  const auto t0 = std::chrono::steady_clock::now();
  r.s[1].cma->linger_at_exit();  // the server "exits" without disconnecting
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(45));   // its last MAD had time to leave
  EXPECT_LT(took, std::chrono::milliseconds(900));  // the DREP came: no need to wait longer
  r.expect(0, c0, RDMA_CM_EVENT_DISCONNECTED);
  r.expect(1, c1, RDMA_CM_EVENT_DISCONNECTED);
  // Nothing up any more: the next exit does not wait.
  const auto t1 = std::chrono::steady_clock::now();
  r.s[0].cma->linger_at_exit();
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::milliseconds(900));
}

TEST(RdmaCm, BadCallsGetRdmaCoreErrors) {
  Rig r;
  Cma& cma = *r.s[0].cma;
  Channel* c = cma.create_channel();
  Id* id = cma.create_id(c, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
  EXPECT_EQ(cma.create_id(c, nullptr, static_cast<rdma_port_space>(7), IBV_QPT_RC), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Not this host's address; IPv6; AF_IB.
  const sockaddr_in other = sin_of(Ipv4Addr{0xC00002FE}, 1);
  EXPECT_EQ(cma.bind(id, sa(other)), EADDRNOTAVAIL);
  sockaddr_in6 six{};
  six.sin6_family = AF_INET6;
  six.sin6_addr.s6_addr[15] = 1;
  EXPECT_EQ(cma.bind(id, reinterpret_cast<const sockaddr*>(&six)), EADDRNOTAVAIL);
  sockaddr ib{};
  ib.sa_family = AF_IB;
  EXPECT_EQ(cma.bind(id, &ib), EAFNOSUPPORT);
  sockaddr unspec{};  // rping -s without -a
  EXPECT_EQ(cma.bind(id, &unspec), EINVAL);
  EXPECT_EQ(cma.resolve_addr(id, nullptr, &unspec, 100), EINVAL);
  // Multicast and broadcast (mckey): no multicast here, said at once instead of an ARP timeout.
  const sockaddr_in group = sin_of(Ipv4Addr{0xEF010203}, 1);  // 239.1.2.3
  const sockaddr_in bcast = sin_of(Ipv4Addr{0xFFFFFFFF}, 1);
  EXPECT_EQ(cma.resolve_addr(id, nullptr, sa(group), 100), EOPNOTSUPP);
  EXPECT_EQ(cma.resolve_addr(id, nullptr, sa(bcast), 100), EOPNOTSUPP);
  EXPECT_EQ(cma.resolve_route(id, 10), EINVAL);
  EXPECT_EQ(cma.connect(id, r.qp(0), nullptr), EINVAL);
  EXPECT_EQ(cma.disconnect(id), EINVAL);
  // Two listeners on one port.
  const sockaddr_in mine = sin_of(r.ip(0), kPort);
  ASSERT_EQ(cma.bind(id, sa(mine)), 0);
  EXPECT_EQ(cma.bind(id, sa(mine)), EINVAL);  // bound already
  Id* id2 = cma.create_id(c, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
  EXPECT_EQ(cma.bind(id2, sa(mine)), EADDRINUSE);
  ASSERT_EQ(cma.listen(id, 1), 0);
  // Options: rdma-core's sizes, ENOSYS for unknown ones.
  std::uint8_t tos = 32;
  int on = 1;
  EXPECT_EQ(cma.set_option(id2, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1), 0);
  EXPECT_EQ(cma.set_option(id2, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &on, sizeof on), EINVAL);
  EXPECT_EQ(cma.set_option(id2, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on), 0);
  EXPECT_EQ(cma.set_option(id2, RDMA_OPTION_ID, 99, &on, sizeof on), ENOSYS);
  EXPECT_EQ(cma.set_option(id2, 42, 0, &on, sizeof on), ENOSYS);
  EXPECT_EQ(cma.set_option(id2, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, nullptr, 1), EINVAL);
  // UD ids: no connection to disconnect, a SIDR request needs a route.
  Id* ud = cma.create_id(c, nullptr, RDMA_PS_UDP, IBV_QPT_UD);
  ASSERT_NE(ud, nullptr);
  EXPECT_EQ(cma.connect(ud, nullptr, nullptr), EINVAL);
  EXPECT_EQ(cma.disconnect(ud), EINVAL);
  EXPECT_EQ(cma.bind(ud, sa(mine)), 0);  // the UDP port space is apart from TCP's
  // The channel is busy while ids report to it.
  EXPECT_EQ(cma.destroy_channel(c), EBUSY);
  for (Id* x : {id, id2, ud}) EXPECT_EQ(cma.destroy_id(x), 0);
  EXPECT_EQ(cma.destroy_channel(c), 0);
}

// ECE through librdmacm (rdma_set_local_ece / rdma_get_remote_ece, rdma-core's semantics):
// the requester offers selective repeat, the listener sees the offer on the request's id and
// accepts it with an ECE of its own; an echo of the offer, a side that asks nothing, or roced
// not allowing it leave the connection on go-back-N. Review 18, findings 1 and 2.
TEST(RdmaCm, EceNegotiatesSelectiveRepeatPerConnection) {
  const ibv_ece offer{0xFFFFFF, 0x524F0001, 0};
  const ibv_ece accept{0xFFFFFF, 0x524F0002, 0};
  const ibv_ece none{};
  struct Case {
    const char* what;
    bool allowed;
    ibv_ece a, b;  ///< rdma_set_local_ece before connect / accept (vendor 0: not called)
    bool sr;
  };
  const Case cases[] = {
      {"offered and accepted", true, offer, accept, true},
      {"the passive side echoes the offer", true, offer, offer, false},
      {"the passive side asks nothing", true, offer, none, false},
      {"the active side asks nothing", true, none, accept, false},
      {"roced does not allow it", false, offer, accept, false},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    Rig r(k.allowed);
    Channel *c0, *c1;
    Id *cl, *lis;
    r.listen_and_route(c0, c1, cl, lis);
    if (k.a.vendor_id) {
      ASSERT_EQ(r.s[0].cma->set_local_ece(cl, &k.a), 0);
    }
    ASSERT_EQ(r.s[0].cma->connect(cl, r.qp(0), nullptr), 0);
    rdma_cm_event* req = r.expect(1, c1, RDMA_CM_EVENT_CONNECT_REQUEST, true);
    ASSERT_NE(req, nullptr);
    Id* child = rdmacm::id_of(req->id);
    r.s[1].cma->ack_event(req);
    ibv_ece got{1, 1, 1};
    ASSERT_EQ(r.s[1].cma->get_remote_ece(child, &got), 0);
    if (k.a.vendor_id == 0) {
      EXPECT_EQ(got.vendor_id, 0u) << "no ECE in the REQ";
    } else {
      EXPECT_EQ(got.vendor_id, 0xFFFFFFu);
      EXPECT_EQ(got.options, k.allowed ? k.a.options : 0x524F0000u) << "not allowed: no offer";
    }
    EXPECT_EQ(got.comp_mask, 0u);
    if (k.b.vendor_id) {
      ASSERT_EQ(r.s[1].cma->set_local_ece(child, &k.b), 0);
    }
    ASSERT_EQ(r.s[1].cma->accept(child, r.qp(1), nullptr), 0);
    r.expect(0, c0, RDMA_CM_EVENT_ESTABLISHED);
    r.expect(1, c1, RDMA_CM_EVENT_ESTABLISHED);
    EXPECT_EQ(cl->selective_repeat, k.sr);
    EXPECT_EQ(child->selective_repeat, k.sr);
    if (k.sr) {
      EXPECT_EQ(cl->remote_ece.options, accept.options) << "the REP accepts: no echo";
    }
    ASSERT_EQ(r.s[0].cma->disconnect(cl), 0);
    r.expect(1, c1, RDMA_CM_EVENT_DISCONNECTED);
    r.expect(0, c0, RDMA_CM_EVENT_DISCONNECTED);
    for (Id* x : {child, lis}) EXPECT_EQ(r.s[1].cma->destroy_id(x), 0);
    EXPECT_EQ(r.s[0].cma->destroy_id(cl), 0);
  }
}

// rdma-core's librdmacm: EINVAL without an ECE, for vendor 0, a comp_mask, or an id with a QP
// of rdma_create_qp's (whose ECE is the QP's, ibv_set_ece).
TEST(RdmaCm, EceCallsGetRdmaCoreErrors) {
  Rig r;
  Cma& cma = *r.s[0].cma;
  Channel* c = cma.create_channel();
  Id* id = cma.create_id(c, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
  ibv_ece e{0xFFFFFF, 0x524F0001, 0};
  EXPECT_EQ(cma.set_local_ece(id, nullptr), EINVAL);
  EXPECT_EQ(cma.get_remote_ece(id, nullptr), EINVAL);
  ibv_ece zero{0, 1, 0};
  EXPECT_EQ(cma.set_local_ece(id, &zero), EINVAL);
  ibv_ece mask{0xFFFFFF, 1, 1};
  EXPECT_EQ(cma.set_local_ece(id, &mask), EINVAL);
  ibv_qp fake{};
  id->pub.qp = &fake;
  EXPECT_EQ(cma.set_local_ece(id, &e), EINVAL);
  EXPECT_EQ(cma.get_remote_ece(id, &e), EINVAL);
  id->pub.qp = nullptr;
  EXPECT_EQ(cma.set_local_ece(id, &e), 0);
  ibv_ece got{1, 1, 1};
  EXPECT_EQ(cma.get_remote_ece(id, &got), 0);
  EXPECT_EQ(got.vendor_id, 0u) << "nothing received yet";
  EXPECT_EQ(got.options, 0u);
  EXPECT_EQ(cma.destroy_id(id), 0);
  EXPECT_EQ(cma.destroy_channel(c), 0);
}

TEST(RdmaCm, UdIdsResolveThePeersQpBySidr) {
  Rig r;
  Channel* c0 = r.s[0].cma->create_channel();
  Channel* c1 = r.s[1].cma->create_channel();
  Id* lis = r.s[1].cma->create_id(c1, nullptr, RDMA_PS_UDP, IBV_QPT_UD);
  const sockaddr_in any = sin_of(Ipv4Addr{0}, kPort);
  ASSERT_EQ(r.s[1].cma->bind(lis, sa(any)), 0);
  ASSERT_EQ(r.s[1].cma->listen(lis, 4), 0);
  client::Qp* uq;
  {
    std::lock_guard lk(r.mu);
    client::QpCap cap;
    cap.max_send_wr = cap.max_recv_wr = 4;
    cap.max_send_sge = cap.max_recv_sge = 1;
    uq = r.s[1].ctx->create_qp(r.s[1].pd, client::QpType::kUd, r.s[1].cq, r.s[1].cq, cap);
  }
  ASSERT_NE(uq, nullptr);
  auto routed = [&](std::uint16_t port) {
    Id* id = r.s[0].cma->create_id(c0, nullptr, RDMA_PS_UDP, IBV_QPT_UD);
    const sockaddr_in dst = sin_of(r.ip(1), port);
    EXPECT_EQ(r.s[0].cma->resolve_addr(id, nullptr, sa(dst), 2000), 0);
    r.expect(0, c0, RDMA_CM_EVENT_ADDR_RESOLVED);
    EXPECT_EQ(r.s[0].cma->resolve_route(id, 2000), 0);
    r.expect(0, c0, RDMA_CM_EVENT_ROUTE_RESOLVED);
    return id;
  };
  // Accepted: the requester learns our QPN, rdma_cm's Q_Key and the address vector.
  Id* a = routed(kPort);
  rdma_conn_param p{};
  p.private_data = "ud hello";
  p.private_data_len = 9;
  ASSERT_EQ(r.s[0].cma->connect(a, nullptr, &p), 0);
  rdma_cm_event* req = r.expect(1, c1, RDMA_CM_EVENT_CONNECT_REQUEST, true);
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(req->listen_id, &lis->pub);
  EXPECT_EQ(req->param.ud.private_data_len, rdmacm::kSidrReqPrivate);
  EXPECT_EQ(text(req->param.ud.private_data, req->param.ud.private_data_len), "ud hello");
  Id* child = rdmacm::id_of(req->id);
  EXPECT_EQ(ntohl(child->pub.route.addr.dst_sin.sin_addr.s_addr), r.ip(0).v);
  r.s[1].cma->ack_event(req);
  rdma_conn_param ap{};
  ap.private_data = "ud welcome";
  ap.private_data_len = 11;
  ASSERT_EQ(r.s[1].cma->accept(child, uq, &ap), 0);
  rdma_cm_event* est = r.expect(0, c0, RDMA_CM_EVENT_ESTABLISHED, true);
  ASSERT_NE(est, nullptr);
  EXPECT_EQ(est->status, 0);
  EXPECT_EQ(est->param.ud.qp_num, uq->qp_num);
  EXPECT_EQ(est->param.ud.qkey, static_cast<std::uint32_t>(RDMA_UDP_QKEY));
  EXPECT_EQ(est->param.ud.ah_attr.is_global, 1);
  EXPECT_EQ(std::memcmp(est->param.ud.ah_attr.grh.dgid.raw, ipv4_mapped(r.ip(1)).b.data(), 16), 0);
  EXPECT_EQ(est->param.ud.private_data_len, rdmacm::kSidrRepPrivate);
  EXPECT_EQ(text(est->param.ud.private_data, est->param.ud.private_data_len), "ud welcome");
  r.s[0].cma->ack_event(est);
  // Rejected: UNREACHABLE with SIDR status 2 "rejected".
  Id* b = routed(kPort);
  ASSERT_EQ(r.s[0].cma->connect(b, nullptr, nullptr), 0);
  req = r.expect(1, c1, RDMA_CM_EVENT_CONNECT_REQUEST, true);
  ASSERT_NE(req, nullptr);
  Id* child2 = rdmacm::id_of(req->id);
  r.s[1].cma->ack_event(req);
  ASSERT_EQ(r.s[1].cma->reject(child2, nullptr, 0), 0);
  rdma_cm_event* un = r.expect(0, c0, RDMA_CM_EVENT_UNREACHABLE, true);
  ASSERT_NE(un, nullptr);
  EXPECT_EQ(un->status, 2);
  r.s[0].cma->ack_event(un);
  // Nobody on the port: SIDR status 1.
  Id* n = routed(kPort + 1);
  ASSERT_EQ(r.s[0].cma->connect(n, nullptr, nullptr), 0);
  un = r.expect(0, c0, RDMA_CM_EVENT_UNREACHABLE, true);
  ASSERT_NE(un, nullptr);
  EXPECT_EQ(un->status, 1);
  r.s[0].cma->ack_event(un);
  for (Id* x : {a, b, n}) EXPECT_EQ(r.s[0].cma->destroy_id(x), 0);
  for (Id* x : {child, child2, lis}) EXPECT_EQ(r.s[1].cma->destroy_id(x), 0);
}

TEST(RdmaCm, MigrateMovesQueuedEventsAndNonBlockingChannelsSayEagain) {
  Rig r;
  Cma& cma = *r.s[0].cma;
  Channel* a = cma.create_channel();
  Channel* b = cma.create_channel();
  Id* id = cma.create_id(a, nullptr, RDMA_PS_TCP, IBV_QPT_RC);
  const sockaddr_in dst = sin_of(r.ip(1), kPort);
  ASSERT_EQ(cma.resolve_addr(id, nullptr, sa(dst), 2000), 0);  // ADDR_RESOLVED queued on a
  ASSERT_EQ(cma.migrate(id, b), 0);
  EXPECT_EQ(id->pub.channel, &b->pub);
  rdma_cm_event* e = r.expect(0, b, RDMA_CM_EVENT_ADDR_RESOLVED, true);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(cma.migrate(id, a), EBUSY);  // an event not acked yet
  cma.ack_event(e);
  ASSERT_EQ(fcntl(a->pub.fd, F_SETFL, O_NONBLOCK), 0);
  rdma_cm_event* none = nullptr;
  EXPECT_EQ(cma.get_event(a, &none), EAGAIN);  // its event went to b
  EXPECT_EQ(cma.destroy_id(id), 0);
  EXPECT_EQ(cma.destroy_channel(a), 0);
  EXPECT_EQ(cma.destroy_channel(b), 0);
}

}  // namespace
}  // namespace roce::test
