// roce-attach-misuse: what an attached client may not do, against a running roced
// (tests/integration/roced_attach.sh): wrong socket or port, memory outside its buffers,
// another client's handles, resources beyond its quotas, a CQ destroyed while in use,
// malformed requests on the raw socket. Every one must get its errno and leave roced serving.
//   roce-attach-misuse SOCKET MAX_QPS MAX_MEMORY      the checks above
//   roce-attach-misuse SOCKET --hold                  attach, wait on a CQ until roced goes
//                                                     away: ENOTCONN, not a hang
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "client/include/roce/client.h"
#include "controlplane/attach/protocol.h"

using namespace roce::client;

namespace {

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// A request on a raw connection: the reply's errno (or -1 when none came).
int raw(const std::string& path, const void* msg, std::size_t len) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return -1;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  [[maybe_unused]] const ssize_t w = ::send(fd, msg, len, 0);
  roce::attach::Reply rep;
  const ssize_t n = ::recv(fd, &rep, sizeof rep, 0);
  ::close(fd);
  return n == sizeof rep ? rep.err : -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[2]) == "--hold") {
    auto ctx = Context::attach(argv[1]);
    if (!ctx) return std::perror("attach"), 1;
    Cq* cq = ctx->create_cq(4);
    std::printf("holding\n");
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = ctx->wait_cq(cq, 60000);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Pd* pd = ctx->alloc_pd();
    const int e = errno;
    std::printf("roced gone: wait_cq %s after %.1f s, alloc_pd %s (%s)\n", std::strerror(rc), s,
                pd ? "succeeded" : "failed", std::strerror(e));
    Wc wc;
    const bool ok = rc == ENOTCONN && !pd && (e == ENOTCONN || e == EPIPE) &&
                    ctx->poll_cq(cq, 1, &wc) == -ENOTCONN && !ctx->connected();
    std::printf("%s\n", ok ? "OK: roced gone: ENOTCONN" : "FAIL");
    return ok ? 0 : 1;
  }
  if (argc != 4) {
    std::fprintf(stderr, "usage: roce-attach-misuse SOCKET MAX_QPS MAX_MEMORY | SOCKET --hold\n");
    return 2;
  }
  const std::string path = argv[1];
  const unsigned max_qps = static_cast<unsigned>(std::stoul(argv[2]));
  const std::size_t max_memory = std::stoull(argv[3]);

  check(!Context::attach(path + ".nothing") && errno == ENOENT, "no roced at the path: ENOENT");
  check(!Context::attach(path, "no-such-port") && errno == ENODEV, "unknown port: ENODEV");
  auto ctx = Context::attach(path);
  if (!ctx) return std::perror("attach"), 1;
  Pd* pd = ctx->alloc_pd();
  Buffer* buf = ctx->alloc_buffer(1 << 20);
  check(pd && buf, "alloc_pd, alloc_buffer");
  static char not_shared[4096];
  check(!ctx->reg_mr(pd, not_shared, sizeof not_shared, 1) && errno == EINVAL,
        "reg_mr of memory outside every buffer: EINVAL");
  check(!ctx->reg_mr(pd, static_cast<char*>(buf->addr) + 4096, 1 << 20, 1) && errno == EINVAL,
        "reg_mr past the end of a buffer: EINVAL");
  check(!ctx->alloc_buffer(max_memory) && errno == EDQUOT, "memory beyond the quota: EDQUOT");
  Mr* mr = ctx->reg_mr(pd, buf->addr, 1 << 20, roce::engine::kAccessLocalWrite);
  check(mr != nullptr, "reg_mr inside the buffer");
  check(ctx->free_buffer(buf) == EBUSY, "free_buffer under an MR: EBUSY");
  Cq* cq = ctx->create_cq(16);
  std::vector<Qp*> qps;
  QpCap cap;
  for (unsigned i = 0; i < max_qps; ++i)
    qps.push_back(ctx->create_qp(pd, QpType::kRc, cq, cq, cap));
  check(qps.back() != nullptr, std::to_string(max_qps) + " QPs (the quota)");
  check(!ctx->create_qp(pd, QpType::kRc, cq, cq, cap) && errno == EDQUOT, "one QP more: EDQUOT");
  check(ctx->destroy_cq(cq) == EBUSY, "destroy_cq while QPs use it: EBUSY");
  check(ctx->dealloc_pd(pd) == EBUSY, "dealloc_pd while in use: EBUSY");
  QpCap big;
  big.max_send_sge = 5;
  check(!ctx->create_qp(pd, QpType::kRc, cq, cq, big) && errno == EINVAL,
        "more SGEs than a queue entry holds: EINVAL");
  check(ctx->wait_cq(cq, 50) == ETIMEDOUT, "wait_cq on an empty CQ: ETIMEDOUT");
  AsyncEvent ev;
  check(ctx->get_async_event(ev, 0) == ETIMEDOUT, "no asynchronous event yet");

  // A CQ too small for what it gets: three receives flushed into a CQ of depth 1 overrun it.
  // The engine stops the CQ and moves its QPs to error; the client hears of both through its
  // event ring (IBV_EVENT_CQ_ERR, IBV_EVENT_QP_FATAL).
  {
    for (int i = 0; i < 2; ++i) {  // room within the QP quota
      ctx->destroy_qp(qps.back());
      qps.pop_back();
    }
    Cq* tiny = ctx->create_cq(1);
    Qp* q = ctx->create_qp(pd, QpType::kRc, tiny, tiny, cap);
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qp_access_flags = roce::engine::kAccessLocalWrite;
    int rc = q ? ctx->modify_qp(q, a,
                                roce::engine::kQpState | roce::engine::kQpPkeyIndex |
                                    roce::engine::kQpPort | roce::engine::kQpAccessFlags)
               : -1;
    // A second QP on the CQ, in INIT: the overrun moves it to error (QP_FATAL).
    Qp* other = ctx->create_qp(pd, QpType::kRc, tiny, tiny, cap);
    if (rc == 0)
      rc = other ? ctx->modify_qp(other, a,
                                  roce::engine::kQpState | roce::engine::kQpPkeyIndex |
                                      roce::engine::kQpPort | roce::engine::kQpAccessFlags)
                 : -1;
    Sge sge{reinterpret_cast<std::uint64_t>(buf->addr), 64, mr->lkey};
    RecvWr r[3];
    for (int i = 0; i < 3; ++i) {
      r[i].wr_id = static_cast<std::uint64_t>(i);
      r[i].sg_list = &sge;
      r[i].num_sge = 1;
      r[i].next = i < 2 ? &r[i + 1] : nullptr;
    }
    if (rc == 0) rc = ctx->post_recv(q, r, nullptr);
    // The lane hands the receives to the engine on its next pass; then the flush.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    a.qp_state = QpState::kErr;
    if (rc == 0) rc = ctx->modify_qp(q, a, roce::engine::kQpState);
    bool cq_err = false, qp_fatal = false;
    while (rc == 0 && !(cq_err && qp_fatal) && ctx->get_async_event(ev, 2000) == 0) {
      cq_err |= ev.type == roce::engine::AsyncEventType::kCqErr && ev.cq == tiny;
      qp_fatal |= ev.type == roce::engine::AsyncEventType::kQpFatal && ev.qp_num == other->qp_num;
    }
    check(rc == 0 && cq_err && qp_fatal,
          "a CQ overrun: CQ_ERR for the CQ, QP_FATAL for the other QP on it (event ring)");
    if (q) ctx->destroy_qp(q);
    if (other) ctx->destroy_qp(other);
    ctx->destroy_cq(tiny);
  }

  // Another client names only its own resources: the first one's handles mean nothing to it.
  auto other = Context::attach(path);
  check(other && other->dealloc_pd(pd) == EINVAL, "another client's PD: EINVAL");
  check(other && other->destroy_qp(qps.front()) == EINVAL, "another client's QP: EINVAL");

  // Malformed requests on the raw socket.
  roce::attach::Request rq;
  check(raw(path, &rq, 7) == EINVAL, "a short request: EINVAL");
  rq.op = static_cast<roce::attach::Op>(999);
  check(raw(path, &rq, sizeof rq) == ENOTCONN, "a request before hello: ENOTCONN");
  rq.op = roce::attach::Op::kHello;
  rq.hello.version = 77;
  check(raw(path, &rq, sizeof rq) == EPROTO, "another protocol version: EPROTO");

  // Still served after all that.
  for (Qp* q : qps) ctx->destroy_qp(q);
  check(ctx->destroy_cq(cq) == 0 && ctx->dereg_mr(mr) == 0 && ctx->free_buffer(buf) == 0 &&
            ctx->dealloc_pd(pd) == 0,
        "orderly teardown");
  std::printf("%s\n", failures ? "FAIL" : "OK: misuse refused");
  return failures ? 1 : 0;
}
