// roce-attach-misuse: what an attached client may not do, against a running roced
// (tests/integration/roced_attach.sh): wrong socket or port, memory outside its buffers,
// another client's handles, resources beyond its quotas, a CQ destroyed while in use,
// malformed requests on the raw socket. Every one must get its errno and leave roced serving.
//   roce-attach-misuse SOCKET MAX_QPS MAX_MEMORY      the checks above
//   roce-attach-misuse SOCKET --hold                  attach, wait on a CQ until roced goes
//                                                     away: ENOTCONN, not a hang
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
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

// ---- issue 27, local clients, memory: each scenario a client of its own --------------------

// An SRQ outlives the CQ of its last QP: the CQ may go (as in verbs: no QP uses it), the SRQ's
// refused receives follow the next QP's CQ, and roced keeps serving.
void srq_outlives_its_cq(const std::string& path) {
  auto ctx = Context::attach(path);
  Pd* pd = ctx ? ctx->alloc_pd() : nullptr;
  if (!pd) return check(false, "srq: attach");
  Cq* a = ctx->create_cq(8);
  Srq* s = ctx->create_srq(pd, 8, 1);
  QpCap cap;
  cap.max_recv_wr = 0;
  Qp* q = ctx->create_qp(pd, QpType::kRc, a, a, cap, s);
  check(q && ctx->destroy_qp(q) == 0 && ctx->destroy_cq(a) == 0,
        "an SRQ's last QP and then its CQ destroyed, the SRQ kept");
  Cq* b = ctx->create_cq(8);
  Qp* q2 = ctx->create_qp(pd, QpType::kRc, b, b, cap, s);
  check(q2 && ctx->destroy_qp(q2) == 0 && ctx->destroy_srq(s) == 0 && ctx->destroy_cq(b) == 0,
        "the SRQ with a new QP and CQ, then torn down");
}

// A request on an attached raw connection, with `fd` passed: the reply's errno (-1: none).
// Descriptors that come back are closed.
int raw_call(int sock, roce::attach::Request& rq, int fd = -1) {
  iovec iov{&rq, sizeof rq};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(2 * sizeof(int))] = {};
  if (fd >= 0) {
    m.msg_control = ctl;
    m.msg_controllen = CMSG_SPACE(sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  if (::sendmsg(sock, &m, 0) != sizeof rq) return -1;
  roce::attach::Reply rep;
  iov = {&rep, sizeof rep};
  msghdr r{};
  r.msg_iov = &iov;
  r.msg_iovlen = 1;
  r.msg_control = ctl;
  r.msg_controllen = sizeof ctl;
  if (::recvmsg(sock, &r, MSG_CMSG_CLOEXEC) != sizeof rep) return -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&r); c != nullptr; c = CMSG_NXTHDR(&r, c))
    for (std::size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      ::close(f);
    }
  rq.handle = rep.handle;  // for the caller: what was made
  return rep.err;
}

// A memfd another thread shrinks while roced registers it (on the raw socket: libroce seals
// before it sends): roced seals before it measures, so a registered region is never smaller
// than asked (its pages would fault in roced's poll loop).
void shrinking_memfd(const std::string& path) {
  const int sock = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  roce::attach::Request hello;
  hello.op = roce::attach::Op::kHello;
  if (::connect(sock, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      raw_call(sock, hello) != 0) {
    ::close(sock);
    return check(false, "shrink: attach");
  }
  constexpr std::size_t kLen = 1 << 16;
  std::atomic<int> cur{-1};
  std::atomic<bool> stop{false};
  std::thread shrinker([&] {
    while (!stop.load()) {
      const int fd = cur.load();
      if (fd < 0 || ::ftruncate(fd, 0) != 0) continue;
      if (!(::fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK)) {
        [[maybe_unused]] const int r = ::ftruncate(fd, kLen);
      }
    }
  });
  int ok = 0, refused = 0, short_ones = 0, other = 0;
  constexpr int kTries = 3000;
  for (int i = 0; i < kTries; ++i) {
    const int fd = ::memfd_create("misuse", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ::ftruncate(fd, kLen) != 0) break;
    roce::attach::Request rq;
    rq.op = roce::attach::Op::kRegRegion;
    rq.region.length = kLen;
    rq.region.client_addr = 0x10000;
    cur = fd;
    const int rc = raw_call(sock, rq, fd);
    cur = -1;
    if (rc == 0) {
      ++ok;
      struct stat st {};
      if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < kLen) ++short_ones;
      roce::attach::Request dereg;
      dereg.op = roce::attach::Op::kDeregRegion;
      dereg.handle = rq.handle;
      if (raw_call(sock, dereg) != 0) ++other;
    } else if (rc == EINVAL) {
      ++refused;
    } else {
      ++other;
    }
    ::close(fd);
  }
  stop = true;
  shrinker.join();
  ::close(sock);
  check(short_ones == 0 && other == 0 && ok + refused == kTries,
        "a memfd shrunk while it registers: " + std::to_string(ok) + " registered whole, " +
            std::to_string(refused) + " refused (EINVAL), " + std::to_string(short_ones) +
            " short");
}

// Sizes beyond the limits (EINVAL), and what roced allocates charged to the memory quota.
void limits_and_memory(const std::string& path, std::size_t max_memory) {
  auto ctx = Context::attach(path);
  Pd* pd = ctx ? ctx->alloc_pd() : nullptr;
  if (!pd) return check(false, "limits: attach");
  Cq* cq = ctx->create_cq(16);
  QpCap cap;
  cap.max_send_wr = 1u << 16;
  cap.max_inline_data = 4096;  // the engine would have zeroed 256 MiB of inline buffers
  check(!ctx->create_qp(pd, QpType::kRc, cq, cq, cap) && errno == EINVAL,
        "a QP of 65536 x 4096 bytes of inline data: EINVAL");
  cap = QpCap{};
  cap.max_recv_wr = 1u << 20;
  check(!ctx->create_qp(pd, QpType::kRc, cq, cq, cap) && errno == EINVAL,
        "a QP of 2^20 receives: EINVAL");
  check(!ctx->create_cq(1u << 20) && errno == EINVAL, "a CQ of 2^20: EINVAL");
  check(!ctx->create_srq(pd, 1u << 20, 1) && errno == EINVAL, "an SRQ of 2^20: EINVAL");
  // SRQs of the largest size cost roced about 2 MB each (its ring, the engine's queue): the
  // memory quota ends them before their count does.
  std::vector<Srq*> big;
  Srq* s = nullptr;
  while (big.size() < 64 && (s = ctx->create_srq(pd, 16384, 1)) != nullptr) big.push_back(s);
  const int e = errno;
  check(s == nullptr && e == EDQUOT && !big.empty() && big.size() * 16384 * 80 <= max_memory,
        std::to_string(big.size()) + " SRQs of 16384 receives, then EDQUOT (memory quota)");
  for (Srq* b : big) ctx->destroy_srq(b);
  check(ctx->create_srq(pd, 16384, 1) != nullptr, "memory given back: such an SRQ again");
}

// A client that never polls its CQ while roced refuses its work requests: roced stops taking
// them once the CQ is full, the client's ring fills (post_send ENOMEM); polling resumes it.
void refusals_wait_for_the_cq(const std::string& path) {
  auto ctx = Context::attach(path);
  Pd* pd = ctx ? ctx->alloc_pd() : nullptr;
  if (!pd) return check(false, "refusals: attach");
  Cq* cq = ctx->create_cq(4);
  QpCap cap;
  cap.max_send_wr = 16;
  Qp* q = ctx->create_qp(pd, QpType::kRc, cq, cq, cap);
  SendWr wr;
  wr.opcode = roce::engine::WrOpcode::kRegMr;  // refused by roced
  wr.send_flags = roce::engine::kSendSignaled;
  int posted = 0, rc = 0;
  for (; q && posted < 200; ++posted) {
    wr.wr_id = static_cast<std::uint64_t>(posted);
    if ((rc = ctx->post_send(q, &wr, nullptr)) != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // roced's lane keeps up
  }
  check(rc == ENOMEM && posted <= 16 + 2 * 4 + 2,
        "refused WRs of a client that does not poll: post_send ENOMEM after " +
            std::to_string(posted));
  int got = 0, bad = 0;
  Wc wc[8];
  for (int i = 0; i < 3000 && got < posted; ++i) {
    const int n = ctx->poll_cq(cq, 8, wc);
    for (int k = 0; k < n; ++k, ++got)
      if (wc[k].wr_id != static_cast<std::uint64_t>(got) ||
          wc[k].status != roce::engine::WcStatus::kLocQpOpErr)
        ++bad;
    if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  check(got == posted && bad == 0, "each refusal completes, in order, once the client polls");
}

// Buffers are counted (each is a mapping of roced's): EDQUOT at max_regions (128 by default).
void regions_are_counted(const std::string& path) {
  auto ctx = Context::attach(path);
  if (!ctx) return check(false, "regions: attach");
  std::vector<Buffer*> bufs;
  Buffer* b = nullptr;
  while (bufs.size() < 1000 && (b = ctx->alloc_buffer(1)) != nullptr) bufs.push_back(b);
  const int e = errno;
  check(!b && e == EDQUOT && bufs.size() == 128,
        std::to_string(bufs.size()) + " one-byte buffers, then EDQUOT (max_regions)");
  for (Buffer* x : bufs) ctx->free_buffer(x);
  b = ctx->alloc_buffer(1);
  check(b != nullptr, "a buffer again after freeing them");
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
  srq_outlives_its_cq(path);
  shrinking_memfd(path);
  limits_and_memory(path, max_memory);
  refusals_wait_for_the_cq(path);
  regions_are_counted(path);
  std::printf("%s\n", failures ? "FAIL" : "OK: misuse refused");
  return failures ? 1 : 0;
}
