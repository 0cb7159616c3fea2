// rdma_cm's UDP port space (SIDR) and the end of a listen through roced's attach socket, with
// the rules roced applies to its clients (sidr_attach.sh runs it against two roced on memif):
// L1 and L2 are clients of roced X, R a client of roced Y that asks X's port by SIDR.
//
//  1. L1 listens on the UDP port; L2 may not listen there (EADDRINUSE) nor end L1's listens,
//     UDP or TCP (ENOENT);
//  2. R's SIDR request reaches L1 with its private data; L2 can neither accept nor reject it
//     (ENOENT: it was not delivered to L2); L1 cannot answer with a QP that is not its own UD QP
//     (EINVAL); L1's answer reaches R with L1's QPN and rdma_cm's Q_Key;
//  3. R's SIDR exchanges in flight are budgeted (roced Y's cm_backlog: EDQUOT beyond);
//  4. L1 stops listening (cm_unlisten, what rdma_destroy_id of its listen id does): R's next
//     request gets SIDR status 1 "no listener" (a connect request to its TCP port REJ 8), L1
//     no event; the port can be listened on again,
//     by L1 and then by L2, who gets the next request and rejects it (R: status 2);
//  5. L2 goes away with a request unanswered: R gets status 2 at once (not after its retries),
//     and the port is free again for L1.
//   sidr_attach X_SOCK Y_SOCK X_IP UDP_PORT TCP_PORT BUDGET
#include <arpa/inet.h>
#include <roce/client.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using roce::Ipv4Addr;
using roce::client::CmEvent;
using roce::client::CmEventType;
using roce::client::Context;

constexpr std::uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) std::exit(1);
}

std::string err(int e) { return std::to_string(e) + " (" + std::strerror(e) + ")"; }

/// The next CM event of `ctx` within `ms`, else an event of type 0.
CmEvent next_event(Context& ctx, int ms) {
  CmEvent ev;
  if (ctx.cm_get_event(ev, ms) != 0) ev.type = static_cast<CmEventType>(0);
  return ev;
}

struct Client {
  std::unique_ptr<Context> ctx;
  roce::client::Qp* ud = nullptr;
  explicit Client(const std::string& sock) : ctx(Context::attach(sock)) {
    check(ctx != nullptr, "attach to " + sock);
    roce::client::Pd* pd = ctx->alloc_pd();
    roce::client::Cq* cq = ctx->create_cq(16);
    roce::verbs::QpCap cap;
    cap.max_send_wr = cap.max_recv_wr = 4;
    cap.max_send_sge = cap.max_recv_sge = 1;
    ud = ctx->create_qp(pd, roce::verbs::QpType::kUd, cq, cq, cap);
    check(pd && cq && ud, "a UD QP on " + sock);
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: sidr_attach X_SOCK Y_SOCK X_IP UDP_PORT TCP_PORT BUDGET\n");
    return 2;
  }
  in_addr ia{};
  if (inet_pton(AF_INET, argv[3], &ia) != 1) return 2;
  const Ipv4Addr x{ntohl(ia.s_addr)};
  const auto port = static_cast<std::uint16_t>(std::atoi(argv[4]));
  const auto tport = static_cast<std::uint16_t>(std::atoi(argv[5]));
  const int budget = std::atoi(argv[6]);
  Client l1(argv[1]);
  auto l2 = std::make_unique<Client>(argv[1]);
  Client r(argv[2]);
  const std::vector<std::uint8_t> hello = {'s', 'i', 'd', 'r'};
  std::uint32_t rid = 0;

  // 1. listens and their owners
  check(l1.ctx->cm_sidr_listen(port) == 0, "L1 listens on UDP port");
  check(l1.ctx->cm_listen(tport) == 0, "L1 listens on TCP port");
  int rc = l2->ctx->cm_sidr_listen(port);
  check(rc == EADDRINUSE, "L2 listening on L1's UDP port: EADDRINUSE, got " + err(rc));
  rc = l2->ctx->cm_unlisten(port, true);
  check(rc == ENOENT, "L2 unlistening L1's UDP port: ENOENT, got " + err(rc));
  rc = l2->ctx->cm_unlisten(tport, false);
  check(rc == ENOENT, "L2 unlistening L1's TCP port: ENOENT, got " + err(rc));
  rc = l2->ctx->cm_unlisten(static_cast<std::uint16_t>(port + 1), true);
  check(rc == ENOENT, "L2 unlistening a port nobody listens on: ENOENT, got " + err(rc));

  // 2. a request, delivered to its listener only
  check(r.ctx->cm_sidr_resolve(x, port, hello, rid) == 0, "R resolves X's UDP port");
  CmEvent ev = next_event(*l1.ctx, 5000);
  check(ev.type == CmEventType::kSidrRequest && ev.port == port,
        "L1 gets the SIDR request (type " + std::to_string(int(ev.type)) + ")");
  check(ev.private_data.size() >= hello.size() &&
            std::equal(hello.begin(), hello.end(), ev.private_data.begin()),
        "with R's private data");
  const std::uint32_t req = ev.id;
  rc = l2->ctx->cm_sidr_accept(req, l2->ud->qp_num, kUdpQkey);
  check(rc == ENOENT, "L2 accepting L1's request: ENOENT, got " + err(rc));
  rc = l2->ctx->cm_sidr_reject(req);
  check(rc == ENOENT, "L2 rejecting L1's request: ENOENT, got " + err(rc));
  rc = l2->ctx->cm_reject(req);
  check(rc == ENOENT, "L2 rejecting it as a connect request: ENOENT, got " + err(rc));
  rc = l1.ctx->cm_sidr_accept(req, l2->ud->qp_num, kUdpQkey);
  check(rc == EINVAL, "L1 answering with L2's QP: EINVAL, got " + err(rc));
  rc = l1.ctx->cm_sidr_accept(0xFFFFFFF0u, l1.ud->qp_num, kUdpQkey);
  check(rc == ENOENT, "L1 accepting an id it never got: ENOENT, got " + err(rc));
  check(l1.ctx->cm_sidr_accept(req, l1.ud->qp_num, kUdpQkey) == 0, "L1 accepts");
  ev = next_event(*r.ctx, 5000);
  check(ev.type == CmEventType::kSidrReply && ev.id == rid && ev.sidr_status == 0 &&
            ev.sidr_qpn == l1.ud->qp_num && ev.sidr_qkey == kUdpQkey,
        "R gets L1's QPN " + std::to_string(l1.ud->qp_num) + " and Q_Key (status " +
            std::to_string(ev.sidr_status) + ", qpn " + std::to_string(ev.sidr_qpn) + ")");
  rc = l1.ctx->cm_sidr_accept(req, l1.ud->qp_num, kUdpQkey);
  check(rc == ENOENT, "accepting it twice: ENOENT, got " + err(rc));

  // 3. the budget of exchanges in flight (L1 leaves them unanswered)
  std::vector<std::uint32_t> held;
  int n = 0;
  std::uint32_t id = 0;
  while (n < budget && r.ctx->cm_sidr_resolve(x, port, hello, id) == 0) ++n;
  check(n == budget,
        "R has " + std::to_string(budget) + " exchanges in flight (" + std::to_string(n) + ")");
  rc = r.ctx->cm_sidr_resolve(x, port, hello, id);
  check(rc == EDQUOT, "one beyond the budget: EDQUOT, got " + err(rc));
  for (int i = 0; i < budget; ++i) {
    ev = next_event(*l1.ctx, 5000);
    if (ev.type != CmEventType::kSidrRequest) break;
    held.push_back(ev.id);
  }
  check(held.size() == std::size_t(budget),
        "L1 gets them all (" + std::to_string(held.size()) + ")");
  n = 0;
  for (const std::uint32_t h : held) n += l1.ctx->cm_sidr_reject(h) == 0;
  check(n == budget, "L1 rejects them");
  n = 0;
  for (int i = 0; i < budget; ++i) {
    ev = next_event(*r.ctx, 5000);
    n += ev.type == CmEventType::kSidrReply && ev.sidr_status == 2;
  }
  check(n == budget, "R: each rejected (status 2), " + std::to_string(n));
  check(r.ctx->cm_sidr_resolve(x, port, hello, id) == 0, "within the budget again");
  ev = next_event(*l1.ctx, 5000);
  check(ev.type == CmEventType::kSidrRequest && l1.ctx->cm_sidr_reject(ev.id) == 0,
        "L1 rejects it");
  ev = next_event(*r.ctx, 5000);
  check(ev.type == CmEventType::kSidrReply && ev.sidr_status == 2, "R: rejected");

  // 4. unlisten: no more requests; the port listened on again, by anyone
  check(l1.ctx->cm_unlisten(port, true) == 0, "L1 stops listening on the UDP port");
  check(l1.ctx->cm_unlisten(tport, false) == 0, "L1 stops listening on the TCP port");
  rc = l1.ctx->cm_unlisten(port, true);
  check(rc == ENOENT, "twice: ENOENT, got " + err(rc));
  check(r.ctx->cm_sidr_resolve(x, port, hello, rid) == 0, "R resolves again");
  ev = next_event(*r.ctx, 5000);
  check(ev.type == CmEventType::kSidrReply && ev.id == rid && ev.sidr_status == 1,
        "R: no listener (status " + std::to_string(ev.sidr_status) + ")");
  ev = next_event(*l1.ctx, 300);
  check(ev.type == static_cast<CmEventType>(0), "L1 gets no more requests");
  {  // the TCP port too: a connect request gets REJ 8 "invalid service ID", as the kernel's
    roce::client::Pd* pd = r.ctx->alloc_pd();
    roce::client::Cq* cq = r.ctx->create_cq(16);
    roce::verbs::QpCap cap;
    cap.max_send_wr = cap.max_recv_wr = 4;
    cap.max_send_sge = cap.max_recv_sge = 1;
    roce::client::Qp* rc_qp = r.ctx->create_qp(pd, roce::verbs::QpType::kRc, cq, cq, cap);
    std::uint32_t cid = 0;
    check(rc_qp && r.ctx->cm_connect(rc_qp, x, tport, {}, cid) == 0, "R connects to the TCP port");
    ev = next_event(*r.ctx, 5000);
    check(ev.type == CmEventType::kRejected && ev.id == cid && ev.reason == 8,
          "R: REJ 8 (type " + std::to_string(int(ev.type)) + ", reason " +
              std::to_string(ev.reason) + ")");
    check(next_event(*l1.ctx, 300).type == static_cast<CmEventType>(0), "L1 gets no request");
    check(r.ctx->destroy_qp(rc_qp) == 0, "R's RC QP goes");
  }
  check(l1.ctx->cm_sidr_listen(port) == 0, "L1 listens on the port again");
  check(l1.ctx->cm_unlisten(port, true) == 0, "and stops again");
  check(l2->ctx->cm_sidr_listen(port) == 0, "L2 listens on the port L1 left");
  check(l2->ctx->cm_listen(tport) == 0, "and on the TCP port L1 left");
  check(r.ctx->cm_sidr_resolve(x, port, hello, rid) == 0, "R resolves");
  ev = next_event(*l2->ctx, 5000);
  check(ev.type == CmEventType::kSidrRequest, "L2 gets the request");
  check(l2->ctx->cm_sidr_reject(ev.id) == 0, "L2 rejects it");
  ev = next_event(*r.ctx, 5000);
  check(ev.type == CmEventType::kSidrReply && ev.sidr_status == 2, "R: rejected (status 2)");

  // 5. a listener that goes away with a request unanswered
  check(r.ctx->cm_sidr_resolve(x, port, hello, rid) == 0, "R resolves");
  ev = next_event(*l2->ctx, 5000);
  check(ev.type == CmEventType::kSidrRequest, "L2 gets the request and leaves it");
  const auto t0 = std::chrono::steady_clock::now();
  l2.reset();
  ev = next_event(*r.ctx, 5000);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  check(ev.type == CmEventType::kSidrReply && ev.sidr_status == 2 && ms < 1000,
        "R: rejected once L2 is gone (status " + std::to_string(ev.sidr_status) + ", " +
            std::to_string(ms) + " ms)");
  check(l1.ctx->cm_sidr_listen(port) == 0, "the port is free for L1 again");
  check(l1.ctx->cm_listen(tport) == 0, "and the TCP port");
  check(r.ctx->cm_sidr_resolve(x, port, hello, rid) == 0, "R resolves");
  ev = next_event(*l1.ctx, 5000);
  check(ev.type == CmEventType::kSidrRequest &&
            l1.ctx->cm_sidr_accept(ev.id, l1.ud->qp_num, kUdpQkey) == 0,
        "L1 gets it and accepts");
  ev = next_event(*r.ctx, 5000);
  check(ev.type == CmEventType::kSidrReply && ev.sidr_status == 0 && ev.sidr_qpn == l1.ud->qp_num,
        "R gets L1's QPN");
  check(l1.ctx->connected() && r.ctx->connected(), "both roced still serve their clients");
  std::printf("OK\n");
  return 0;
}
