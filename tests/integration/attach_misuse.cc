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
