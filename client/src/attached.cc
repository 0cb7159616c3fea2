/// @file
/// The attached backend of libroce: control requests on roced's Unix socket
/// (controlplane/attach/protocol.h), work requests and completions through the shared rings.
#include <fcntl.h>
#include <poll.h>
#include <roce/client.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "client/src/hybrid_wait.h"
#include "client/src/shared_memory.h"
#include "controlplane/attach/protocol.h"

namespace roce::client {

namespace {

using attach::CmEventEntry;
using attach::CqEntry;
using attach::EventEntry;
using attach::kMaxSge;
using attach::Op;
using attach::RecvEntry;
using attach::Reply;
using attach::Request;
using attach::SendEntry;
using attach::ShmConsumer;
using attach::ShmProducer;
using attach::ShmQueueLayout;

struct APd : Pd {
  std::uint32_t h = 0;
};
struct ABuffer : Buffer {
  std::uint32_t region = 0;
  bool own = false;  ///< alloc_buffer: ours to unmap and close
  unsigned mrs = 0;
};
struct AMr : Mr {
  std::uint32_t h = 0;
  ABuffer* buf = nullptr;
};
struct ACq : Cq {
  std::uint32_t h = 0;
  void* map = nullptr;
  std::size_t bytes = 0;
  std::atomic<int> efd{-1};  ///< asked for on the first wait_cq (Op::kCqNotify)
  std::mutex notify_mu;
  ShmConsumer<CqEntry> ring;
  std::mutex mu;
  unsigned empty_polls = 0;
  SpinBudget spin{SpinBudget::max_from_env()};  ///< wait_cq's spin before it sleeps (under mu)
};
struct ASrq : Srq {
  std::uint32_t h = 0;
  void* map = nullptr;
  std::size_t bytes = 0;
  ShmProducer<RecvEntry> rq;
  std::mutex mu;
};
struct AQp : Qp {
  std::uint32_t h = 0;
  void* map = nullptr;
  std::size_t bytes = 0;
  ShmProducer<SendEntry> sq;
  ShmProducer<RecvEntry> rq;
  std::mutex smu, rmu;
};

template <class T>
void forget(std::vector<std::unique_ptr<T>>& v, const T* p) {
  std::erase_if(v, [p](const auto& u) { return u.get() == p; });
}

std::uint64_t ms_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000 +
         static_cast<std::uint64_t>(ts.tv_nsec) / 1000000;
}

class Attached final : public Context {
 public:
  explicit Attached(int fd) : fd_(fd) {}
  ~Attached() override {
    ::close(fd_);  // roced releases everything of ours when the socket closes
    if (events_map_) ::munmap(events_map_, events_bytes_);
    if (cm_map_) ::munmap(cm_map_, cm_bytes_);
    if (cm_fd_ >= 0) ::close(cm_fd_);
    if (events_fd_ >= 0) ::close(events_fd_);
    for (auto& q : qps_) ::munmap(q->map, q->bytes);
    for (auto& s : srqs_) ::munmap(s->map, s->bytes);
    for (auto& c : cqs_) {
      ::munmap(c->map, c->bytes);
      if (c->efd >= 0) ::close(c->efd);
    }
    for (auto& b : bufs_)
      if (b->own) {
        ::munmap(b->addr, b->length);
        ::close(b->fd);
      }
  }

  int hello(const std::string& port) {
    Request rq;
    rq.op = Op::kHello;
    if (port.size() >= sizeof rq.hello.port) return EINVAL;
    std::memcpy(rq.hello.port, port.data(), port.size());
    Reply rep;
    int fds[2] = {-1, -1};
    // An older roced refuses a newer version (EPROTO): again with the older ones it may speak,
    // without what came after them (version_).
    int rc = EPROTO;
    for (std::uint32_t v = attach::kVersion; rc == EPROTO && v >= attach::kOldestVersion; --v) {
      rq.hello.version = v;
      rc = call(rq, rep, nullptr, 0, fds, 2);
    }
    if (rc != 0) return rc;
    const attach::HelloRep& h = rep.hello;
    version_ = std::min(rq.hello.version, h.version);
    events_fd_ = fds[1];
    events_bytes_ = rep.bytes;
    events_map_ = fds[0] >= 0 ? map_fd(fds[0], rep.bytes) : nullptr;
    if (fds[0] >= 0) ::close(fds[0]);
    attach::ShmQueueHeader* eh = ShmQueueLayout<EventEntry>::open(events_map_, events_bytes_);
    if (eh == nullptr || events_fd_ < 0 || eh->slots != h.event_slots) return EPROTO;
    events_ = ShmConsumer<EventEntry>(eh, h.event_slots);
    port_.name.assign(h.port, strnlen(h.port, sizeof h.port));
    port_.mac = h.mac;
    port_.ipv4 = h.ipv4;
    port_.gid = h.gid;
    port_.max_mtu = h.max_mtu;
    port_.lcore = h.lcore;
    dev_.max_qp = h.max_qps;
    dev_.max_qp_wr = h.max_qp_wr;
    dev_.max_sge = h.max_sge;
    dev_.max_cq = h.max_cqs;
    dev_.max_cqe = h.max_cqe;
    dev_.max_mr = h.max_mrs;
    dev_.max_pd = h.max_pds;
    dev_.max_srq = h.max_srqs;
    dev_.max_srq_wr = h.max_srq_wr;
    dev_.max_srq_sge = h.max_sge;
    dev_.max_inline_data = h.max_inline_data;
    dev_.max_mr_size = h.max_memory;
    return 0;
  }

  const PortInfo& port() const override { return port_; }
  DeviceAttr query_device() const override { return dev_; }
  bool connected() const override { return !dead_; }

  Pd* alloc_pd() override {
    Request rq;
    rq.op = Op::kAllocPd;
    Reply rep;
    if (fail(call(rq, rep))) return nullptr;
    auto p = std::make_unique<APd>();
    p->h = rep.handle;
    return keep(pds_, std::move(p));
  }
  int dealloc_pd(Pd* pd) override {
    auto* p = static_cast<APd*>(pd);
    if (const int rc = simple(Op::kDeallocPd, p->h)) return rc;
    forget(pds_, p);
    return 0;
  }

  Buffer* alloc_buffer(std::size_t length) override {
    void* addr = nullptr;
    const int fd = make_buffer(length, &addr);
    if (fd < 0) return nullptr;
    Buffer* b = add_region(fd, addr, length, true);
    if (b == nullptr) {
      const int e = errno;
      ::munmap(addr, length);
      ::close(fd);
      errno = e;
    }
    return b;
  }
  Buffer* register_memfd(int fd, void* addr, std::size_t length) override {
    if (fd < 0 || addr == nullptr || length == 0) return fail_null(EINVAL);
    ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);  // roced checks; this makes it pass when allowed
    return add_region(fd, addr, length, false);
  }
  Buffer* register_memfd_at(int fd, std::uint64_t offset, void* addr, std::size_t length) override {
    if (fd < 0 || addr == nullptr || length == 0) return fail_null(EINVAL);
    ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
    return add_region(fd, addr, length, false, offset);
  }
  int free_buffer(Buffer* buffer) override {
    auto* b = static_cast<ABuffer*>(buffer);
    if (b->mrs != 0) return EBUSY;
    if (const int rc = simple(Op::kDeregRegion, b->region)) return rc;
    if (b->own) {
      ::munmap(b->addr, b->length);
      ::close(b->fd);
    }
    std::lock_guard<std::mutex> g(tables_);
    forget(bufs_, b);
    return 0;
  }

  Mr* reg_mr(Pd* pd, void* addr, std::size_t length, std::uint32_t access) override {
    return reg_mr_iova(pd, addr, length, reinterpret_cast<std::uint64_t>(addr), access);
  }
  // The request has always carried the IOVA (the client's own address by default): no
  // change of the protocol.
  Mr* reg_mr_iova(Pd* pd, void* addr, std::size_t length, std::uint64_t iova,
                  std::uint32_t access) override {
    ABuffer* b = find_buffer(addr, length);
    if (b == nullptr) return fail_null(EINVAL);
    Request rq;
    rq.op = Op::kRegMr;
    rq.mr.pd = static_cast<APd*>(pd)->h;
    rq.mr.region = b->region;
    rq.mr.offset = static_cast<std::uint64_t>(static_cast<std::uint8_t*>(addr) -
                                              static_cast<std::uint8_t*>(b->addr));
    rq.mr.length = length;
    rq.mr.iova = iova;
    rq.mr.access = access;
    Reply rep;
    if (fail(call(rq, rep))) return nullptr;
    auto m = std::make_unique<AMr>();
    m->h = rep.handle;
    m->buf = b;
    m->addr = addr;
    m->length = length;
    m->lkey = m->rkey = rep.key;
    m->iova = rep.iova;
    ++b->mrs;
    return keep(mrs_, std::move(m));
  }
  /// kReregMr (protocol 8): the MR keeps its keys. An older roced: EOPNOTSUPP.
  int rereg_mr(Mr* mr, Pd* pd, void* addr, std::size_t length, std::uint64_t iova,
               std::uint32_t access) override {
    if (version_ < 8) return EOPNOTSUPP;
    auto* m = static_cast<AMr*>(mr);
    ABuffer* b = find_buffer(addr, length);
    if (m == nullptr || pd == nullptr || b == nullptr) return EINVAL;
    Request rq;
    rq.op = Op::kReregMr;
    rq.handle = m->h;
    rq.mr.pd = static_cast<APd*>(pd)->h;
    rq.mr.region = b->region;
    rq.mr.offset = static_cast<std::uint64_t>(static_cast<std::uint8_t*>(addr) -
                                              static_cast<std::uint8_t*>(b->addr));
    rq.mr.length = length;
    rq.mr.iova = iova;
    rq.mr.access = access;
    Reply rep;
    if (const int rc = call(rq, rep)) return rc;
    --m->buf->mrs;
    ++b->mrs;
    m->buf = b;
    m->addr = addr;
    m->length = length;
    m->iova = rep.iova;
    return 0;
  }
  int dereg_mr(Mr* mr) override {
    auto* m = static_cast<AMr*>(mr);
    if (const int rc = simple(Op::kDeregMr, m->h)) return rc;
    --m->buf->mrs;
    forget(mrs_, m);
    return 0;
  }

  Cq* create_cq(std::uint32_t depth) override {
    Request rq;
    rq.op = Op::kCreateCq;
    rq.cq.depth = depth;
    Reply rep;
    int fd = -1;
    if (fail(call(rq, rep, nullptr, 0, &fd, 1))) return nullptr;
    auto c = std::make_unique<ACq>();
    c->h = rep.handle;
    c->depth = depth;
    c->bytes = rep.bytes;
    c->map = fd >= 0 ? map_fd(fd, rep.bytes) : nullptr;
    if (fd >= 0) ::close(fd);
    attach::ShmQueueHeader* h = ShmQueueLayout<CqEntry>::open(c->map, c->bytes);
    if (h == nullptr || h->slots != rep.slots) {
      if (c->map) ::munmap(c->map, c->bytes);
      simple(Op::kDestroyCq, rep.handle);
      return fail_null(EPROTO);
    }
    c->ring = ShmConsumer<CqEntry>(h, rep.slots);
    return keep(cqs_, std::move(c));
  }
  int destroy_cq(Cq* cq) override {
    auto* c = static_cast<ACq*>(cq);
    if (const int rc = simple(Op::kDestroyCq, c->h)) return rc;
    ::munmap(c->map, c->bytes);
    if (c->efd >= 0) ::close(c->efd);
    forget(cqs_, c);
    return 0;
  }

  Srq* create_srq(Pd* pd, std::uint32_t max_wr, std::uint32_t max_sge) override {
    Request rq;
    rq.op = Op::kCreateSrq;
    rq.srq.pd = static_cast<APd*>(pd)->h;
    rq.srq.max_wr = max_wr;
    rq.srq.max_sge = max_sge;
    Reply rep;
    int fd = -1;
    if (fail(call(rq, rep, nullptr, 0, &fd, 1))) return nullptr;
    auto s = std::make_unique<ASrq>();
    s->h = rep.handle;
    s->bytes = rep.bytes;
    s->map = fd >= 0 ? map_fd(fd, rep.bytes) : nullptr;
    if (fd >= 0) ::close(fd);
    attach::ShmQueueHeader* h = ShmQueueLayout<RecvEntry>::open(s->map, s->bytes);
    if (h == nullptr || h->slots != rep.slots) {
      if (s->map) ::munmap(s->map, s->bytes);
      simple(Op::kDestroySrq, rep.handle);
      return fail_null(EPROTO);
    }
    s->rq = ShmProducer<RecvEntry>(h, rep.slots);
    return keep(srqs_, std::move(s));
  }
  int destroy_srq(Srq* srq) override {
    auto* s = static_cast<ASrq*>(srq);
    if (const int rc = simple(Op::kDestroySrq, s->h)) return rc;
    ::munmap(s->map, s->bytes);
    forget(srqs_, s);
    return 0;
  }

  Qp* create_qp(Pd* pd, QpType type, Cq* send_cq, Cq* recv_cq, const QpCap& cap, Srq* srq,
                bool sq_sig_all) override {
    Request rq;
    rq.op = Op::kCreateQp;
    rq.qp.pd = static_cast<APd*>(pd)->h;
    rq.qp.type = type;
    rq.qp.send_cq = static_cast<ACq*>(send_cq)->h;
    rq.qp.recv_cq = static_cast<ACq*>(recv_cq)->h;
    rq.qp.srq = srq ? static_cast<ASrq*>(srq)->h : 0;
    rq.qp.sq_sig_all = sq_sig_all;
    rq.qp.cap = cap;
    Reply rep;
    int fd = -1;
    if (fail(call(rq, rep, nullptr, 0, &fd, 1))) return nullptr;
    auto q = std::make_unique<AQp>();
    q->h = rep.handle;
    q->qp_num = rep.key;
    q->type = type;
    q->bytes = rep.bytes;
    q->map = fd >= 0 ? map_fd(fd, rep.bytes) : nullptr;
    if (fd >= 0) ::close(fd);
    attach::ShmQueueHeader* sh = ShmQueueLayout<SendEntry>::open(q->map, q->bytes);
    attach::ShmQueueHeader* rh = nullptr;
    if (q->map && rep.slots2 != 0 && rep.offset2 < rep.bytes)
      rh = ShmQueueLayout<RecvEntry>::open(static_cast<std::uint8_t*>(q->map) + rep.offset2,
                                           rep.bytes - rep.offset2);
    if (sh == nullptr || sh->slots != rep.slots || (rep.slots2 != 0 && rh == nullptr)) {
      if (q->map) ::munmap(q->map, q->bytes);
      simple(Op::kDestroyQp, rep.handle);
      return fail_null(EPROTO);
    }
    q->sq = ShmProducer<SendEntry>(sh, rep.slots);
    if (rh) q->rq = ShmProducer<RecvEntry>(rh, rep.slots2);
    return keep(qps_, std::move(q));
  }
  int destroy_qp(Qp* qp) override {
    auto* q = static_cast<AQp*>(qp);
    if (const int rc = simple(Op::kDestroyQp, q->h)) return rc;
    ::munmap(q->map, q->bytes);
    forget(qps_, q);
    return 0;
  }
  int modify_qp(Qp* qp, const QpAttr& attr, std::uint32_t mask) override {
    Request rq;
    rq.op = Op::kModifyQp;
    rq.modify.qp = static_cast<AQp*>(qp)->h;
    rq.modify.attr = attr;
    rq.modify.mask = mask;
    Reply rep;
    return call(rq, rep);
  }

  int post_send(Qp* qp, const SendWr* wr, const SendWr** bad_wr) override {
    auto* q = static_cast<AQp*>(qp);
    int rc = dead_ ? ENOTCONN : 0;
    bool staged = false;
    std::lock_guard<std::mutex> g(q->smu);
    for (; rc == 0 && wr != nullptr; wr = wr->next) {
      if (wr->num_sge > kMaxSge || (q->type == QpType::kUd && wr->ud.ah == nullptr)) {
        rc = EINVAL;
        break;
      }
      SendEntry e;
      e.wr_id = wr->wr_id;
      e.opcode = wr->opcode;
      e.num_sge = static_cast<std::uint8_t>(wr->num_sge);
      e.send_flags = wr->send_flags;
      e.imm_data = wr->imm_data;
      e.invalidate_rkey = wr->invalidate_rkey;
      const bool atomic = wr->opcode == WrOpcode::kCmpSwap || wr->opcode == WrOpcode::kFetchAdd;
      e.remote_addr = atomic ? wr->atomic.remote_addr : wr->rdma.remote_addr;
      e.rkey = atomic ? wr->atomic.rkey : wr->rdma.rkey;
      e.compare_add = wr->atomic.compare_add;
      e.swap = wr->atomic.swap;
      if (q->type == QpType::kUd) {
        e.ah = *wr->ud.ah;
        e.remote_qpn = wr->ud.remote_qpn;
        e.remote_qkey = wr->ud.remote_qkey;
      }
      std::copy_n(wr->sg_list, wr->num_sge, e.sge);
      if (!q->sq.stage(e)) {
        rc = q->sq.broken() ? EIO : ENOMEM;
        break;
      }
      staged = true;
    }
    if (staged) q->sq.publish();
    if (rc != 0 && bad_wr) *bad_wr = wr;
    return rc;
  }
  int post_recv(Qp* qp, const RecvWr* wr, const RecvWr** bad_wr) override {
    auto* q = static_cast<AQp*>(qp);
    if (!q->rq.valid()) {
      if (bad_wr) *bad_wr = wr;
      return EINVAL;  // the QP receives through an SRQ
    }
    std::lock_guard<std::mutex> g(q->rmu);
    return post_recv_to(q->rq, wr, bad_wr);
  }
  int post_srq_recv(Srq* srq, const RecvWr* wr, const RecvWr** bad_wr) override {
    auto* s = static_cast<ASrq*>(srq);
    std::lock_guard<std::mutex> g(s->mu);
    return post_recv_to(s->rq, wr, bad_wr);
  }

  int poll_cq(Cq* cq, int max, Wc* out) override {
    auto* c = static_cast<ACq*>(cq);
    if (max <= 0) return 0;
    std::lock_guard<std::mutex> g(c->mu);
    const std::size_t n = c->ring.pop_n(out, static_cast<std::size_t>(max));
    if (n != 0) {
      c->empty_polls = 0;
      return static_cast<int>(n);
    }
    // A pure poller never blocks: look at the socket now and then to notice roced is gone.
    if (++c->empty_polls >= 4096) {
      c->empty_polls = 0;
      check_alive();
    }
    return dead_ ? -ENOTCONN : 0;
  }
  /// The CQ's eventfd (0 and `efd`), asked for when it is first waited on (as
  /// ibv_req_notify_cq needs a completion channel): a CQ only polled costs roced no descriptor.
  int cq_efd(ACq* c, int& efd) {
    efd = c->efd.load();
    if (efd >= 0) return 0;
    std::lock_guard<std::mutex> g(c->notify_mu);
    efd = c->efd.load();
    if (efd >= 0) return 0;
    Request rq;
    rq.op = Op::kCqNotify;
    rq.handle = c->h;
    Reply rep;
    int fd = -1;
    if (const int rc = call(rq, rep, nullptr, 0, &fd, 1)) return rc;  // EDQUOT: max_fds
    if (fd < 0) return EPROTO;
    c->efd = efd = fd;
    return 0;
  }
  int wait_any(std::span<Cq* const> cqs, int wake_fd, int timeout_ms) override {
    std::vector<pollfd> p;
    p.reserve(cqs.size() + 4);
    // Arm every queue (a queue that already holds something: nothing to wait for), then sleep
    // on their eventfds (shm_queue.h: roced signals an armed queue once).
    for (Cq* cq : cqs) {
      auto* c = static_cast<ACq*>(cq);
      int efd = -1;
      if (const int rc = cq_efd(c, efd)) return rc;
      std::lock_guard<std::mutex> g(c->mu);
      if (!c->ring.arm()) return 0;
      p.push_back({efd, POLLIN, 0});
    }
    {
      std::lock_guard<std::mutex> g(events_mu_);
      if (!events_.arm()) return 0;
    }
    p.push_back({events_fd_, POLLIN, 0});
    {
      std::lock_guard<std::mutex> o(cm_open_mu_);
      if (cm_map_ != nullptr) {
        std::lock_guard<std::mutex> g(cm_mu_);
        if (!cm_ring_.arm()) return 0;
        p.push_back({cm_fd_, POLLIN, 0});
      }
    }
    // roced's end of the socket closing (POLLRDHUP, and POLLHUP); not its replies, which
    // another thread's call() reads
    p.push_back({fd_, POLLRDHUP, 0});
    if (wake_fd >= 0) p.push_back({wake_fd, POLLIN, 0});
    if (dead_) return ENOTCONN;
    const int r = ::poll(p.data(), p.size(), timeout_ms);
    if (r < 0) return errno == EINTR ? 0 : errno;
    if (r == 0) return ETIMEDOUT;
    for (const pollfd& x : p) {
      if (x.fd == fd_ || x.fd == wake_fd || (x.revents & POLLIN) == 0) continue;
      std::uint64_t v;
      [[maybe_unused]] const ssize_t k = ::read(x.fd, &v, sizeof v);
    }
    const pollfd& sock = p[p.size() - (wake_fd >= 0 ? 2 : 1)];
    if (sock.revents != 0 && !check_alive()) return ENOTCONN;
    return 0;
  }
  int wait_cq(Cq* cq, int timeout_ms) override {
    auto* c = static_cast<ACq*>(cq);
    int efd = -1;
    if (const int rc = cq_efd(c, efd)) return rc;
    // The hybrid wait (hybrid_wait.h): spin on the ring for the CQ's budget (within the
    // timeout), then sleep. A caller that does not want to wait (timeout 0) does not spin
    // either, nor does its call count for the budget.
    std::uint32_t budget;
    {
      std::lock_guard<std::mutex> g(c->mu);
      if (!c->ring.empty()) return 0;
      budget = timeout_ms == 0 ? 0 : c->spin.budget();
      if (timeout_ms > 0) budget = std::min<std::uint64_t>(budget, timeout_ms * 1'000'000ull);
    }
    if (budget != 0) {
      const std::uint64_t end = mono_ns() + budget;
      for (unsigned i = 1;; ++i) {
        cpu_relax();
        std::lock_guard<std::mutex> g(c->mu);
        if (!c->ring.empty()) {
          c->spin.hit();
          return 0;
        }
        if (i % 16 == 0 && mono_ns() >= end) break;
      }
    }
    if (timeout_ms == 0) return wait_on(c->ring, c->mu, efd, 0);  // (leaves the budget be)
    const std::uint64_t t0 = mono_ns();
    const int rc = wait_on(c->ring, c->mu, efd, timeout_ms);
    std::lock_guard<std::mutex> g(c->mu);
    c->spin.slept(mono_ns() - t0, rc == 0);
    return rc;
  }
  int get_async_event(AsyncEvent& ev, int timeout_ms) override {
    for (;;) {
      EventEntry e;
      bool got;
      {
        std::lock_guard<std::mutex> g(events_mu_);
        got = events_.pop(e);
      }
      if (got) {
        ev.type = e.type;
        ev.qp_num = e.qp_num;
        ev.cq = nullptr;
        std::lock_guard<std::mutex> g(tables_);
        for (auto& c : cqs_)
          if (e.cq != 0 && c->h == e.cq) ev.cq = c.get();
        return 0;
      }
      if (timeout_ms == 0) return dead_ ? ENOTCONN : ETIMEDOUT;
      if (const int rc = wait_on(events_, events_mu_, events_fd_, timeout_ms)) return rc;
    }
  }

  // ---- rdma_cm: requests on the socket, events through the CM event ring (kCmOpen) ----
  int cm_listen(std::uint16_t port) override {
    Request rq;
    rq.op = Op::kCmListen;
    rq.cm.port = port;
    return cm_call(rq);
  }
  int cm_connect(Qp* qp, Ipv4Addr dst, std::uint16_t port, const CmConnParam& p,
                 std::uint32_t& id) override {
    Request rq;
    rq.op = Op::kCmConnect;
    rq.cm.qp = static_cast<AQp*>(qp)->h;
    rq.cm.dst = dst;
    rq.cm.port = port;
    if (!cm_param(rq, p)) return EINVAL;
    Reply rep;
    if (const int rc = cm_call(rq, &rep)) return rc;
    id = rep.handle;
    return 0;
  }
  int cm_accept(std::uint32_t id, Qp* qp, const CmConnParam& p) override {
    Request rq;
    rq.op = Op::kCmAccept;
    rq.cm.id = id;
    rq.cm.qp = static_cast<AQp*>(qp)->h;
    if (!cm_param(rq, p)) return EINVAL;
    return cm_call(rq);
  }
  int cm_reject(std::uint32_t id, std::span<const std::uint8_t> private_data) override {
    Request rq;
    rq.op = Op::kCmReject;
    rq.cm.id = id;
    CmConnParam p;
    p.private_data.assign(private_data.begin(), private_data.end());
    if (!cm_param(rq, p)) return EINVAL;
    return cm_call(rq);
  }
  int cm_disconnect(std::uint32_t id) override { return cm_id_call(Op::kCmDisconnect, id); }
  int neighbour(Ipv4Addr ip, bool ask) override {
    Request rq;
    rq.op = Op::kNeighbour;
    rq.cm.dst = ip;
    rq.handle = ask ? 1 : 0;
    Reply rep;
    if (const int rc = call(rq, rep)) return rc;
    return rep.handle != 0 ? 0 : EAGAIN;
  }
  int cm_refuse(std::uint32_t id) override { return cm_id_call(Op::kCmRefuse, id); }
  int cm_notify(std::uint32_t id) override { return cm_id_call(Op::kCmNotify, id); }
  // rdma_cm's UDP port space (SIDR) and the end of a listen, as the in-process backend.
  int cm_sidr_listen(std::uint16_t port) override {
    Request rq;
    rq.op = Op::kCmSidrListen;
    rq.cm.port = port;
    return cm_call(rq);
  }
  int cm_sidr_resolve(Ipv4Addr dst, std::uint16_t port, std::span<const std::uint8_t> pd,
                      std::uint32_t& id) override {
    Request rq;
    rq.op = Op::kCmSidrResolve;
    rq.cm.dst = dst;
    rq.cm.port = port;
    if (!cm_private(rq, pd)) return EINVAL;
    Reply rep;
    if (const int rc = cm_call(rq, &rep)) return rc;
    id = rep.handle;
    return 0;
  }
  int cm_sidr_accept(std::uint32_t id, std::uint32_t qpn, std::uint32_t qkey,
                     std::span<const std::uint8_t> pd) override {
    Request rq;
    rq.op = Op::kCmSidrAccept;
    rq.cm.id = id;
    rq.cm.qpn = qpn;
    rq.cm.qkey = qkey;
    if (!cm_private(rq, pd)) return EINVAL;
    return cm_call(rq);
  }
  int cm_sidr_reject(std::uint32_t id) override { return cm_id_call(Op::kCmSidrReject, id); }
  int cm_unlisten(std::uint16_t port, bool udp) override {
    Request rq;
    rq.op = Op::kCmUnlisten;
    rq.cm.port = port;
    rq.cm.udp = udp ? 1 : 0;
    return cm_call(rq);
  }
  int cm_get_event(CmEvent& ev, int timeout_ms) override {
    if (const int rc = cm_open()) return rc;
    for (;;) {
      CmEventEntry e;
      bool got;
      {
        std::lock_guard<std::mutex> g(cm_mu_);
        got = cm_ring_.pop(e);
      }
      if (got) {
        ev.type = static_cast<CmEventType>(e.type);
        ev.id = e.id;
        ev.qp_num = e.qp_num;
        ev.peer = e.peer;
        ev.port = e.port;
        ev.responder_resources = e.responder_resources;
        ev.initiator_depth = e.initiator_depth;
        ev.reason = e.reason;
        ev.remote = e.remote != 0;
        ev.private_data.assign(
            e.private_data,
            e.private_data + std::min<std::size_t>(e.private_len, attach::kCmPrivateMax));
        if (ev.type == CmEventType::kSidrReply) {
          ev.sidr_status = e.sidr_status;
          ev.sidr_qpn = e.sidr_qpn;
          ev.sidr_qkey = e.sidr_qkey;
        } else if (ev.type == CmEventType::kConnectRequest ||
                   ev.type == CmEventType::kEstablished) {
          ev.ece_vendor = e.ece_vendor;
          ev.ece_options = e.ece_options;
          ev.selective_repeat = ev.type == CmEventType::kEstablished && e.selective_repeat != 0;
        }
        return 0;
      }
      if (timeout_ms == 0) return dead_ ? ENOTCONN : ETIMEDOUT;
      if (const int rc = wait_on(cm_ring_, cm_mu_, cm_fd_, timeout_ms)) return rc;
    }
  }

 private:
  /// The CM event ring, asked for at the first CM call (rdma_create_event_channel).
  int cm_open() {
    std::lock_guard<std::mutex> g(cm_open_mu_);
    if (cm_map_) return 0;
    Request rq;
    rq.op = Op::kCmOpen;
    Reply rep;
    int fds[2] = {-1, -1};
    if (const int rc = call(rq, rep, nullptr, 0, fds, 2)) return rc;
    void* map = fds[0] >= 0 ? map_fd(fds[0], rep.bytes) : nullptr;
    if (fds[0] >= 0) ::close(fds[0]);
    attach::ShmQueueHeader* h = ShmQueueLayout<CmEventEntry>::open(map, rep.bytes);
    if (h == nullptr || fds[1] < 0 || h->slots != rep.slots) {
      if (map) ::munmap(map, rep.bytes);
      if (fds[1] >= 0) ::close(fds[1]);
      return EPROTO;
    }
    cm_ring_ = ShmConsumer<CmEventEntry>(h, rep.slots);
    cm_fd_ = fds[1];
    cm_bytes_ = rep.bytes;
    cm_map_ = map;
    return 0;
  }
  /// A CM request that names one connection and nothing else.
  int cm_id_call(Op op, std::uint32_t id) {
    Request rq;
    rq.op = op;
    rq.cm.id = id;
    return cm_call(rq);
  }
  int cm_call(Request& rq, Reply* out = nullptr) {
    if (const int rc = cm_open()) return rc;
    Reply rep;
    return call(rq, out ? *out : rep);
  }
  static bool cm_private(Request& rq, std::span<const std::uint8_t> pd) {
    if (pd.size() > attach::kCmPrivateMax) return false;
    rq.cm.private_len = static_cast<std::uint8_t>(pd.size());
    std::copy(pd.begin(), pd.end(), rq.cm.private_data);
    return true;
  }
  static bool cm_param(Request& rq, const CmConnParam& p) {
    if (p.private_data.size() > attach::kCmPrivateMax) return false;
    rq.cm.responder_resources = p.responder_resources;
    rq.cm.initiator_depth = p.initiator_depth;
    rq.cm.rnr_retry = p.rnr_retry;
    rq.cm.private_len = static_cast<std::uint8_t>(p.private_data.size());
    std::copy(p.private_data.begin(), p.private_data.end(), rq.cm.private_data);
    rq.cm.ece_vendor = p.ece_vendor;
    rq.cm.ece_options = p.ece_options;
    return true;
  }

  /// Sleeps on `efd` until `ring` has an entry (0; at once if it has one), the timeout passes
  /// (ETIMEDOUT) or roced goes away (ENOTCONN).
  template <class T>
  int wait_on(ShmConsumer<T>& ring, std::mutex& mu, int efd, int timeout_ms) {
    const std::uint64_t end =
        timeout_ms < 0 ? 0 : ms_now() + static_cast<std::uint64_t>(timeout_ms);
    for (;;) {
      {
        std::lock_guard<std::mutex> g(mu);
        if (!ring.arm()) return 0;  // something is there: no sleep
      }
      if (dead_) return ENOTCONN;
      int wait = -1;
      if (timeout_ms >= 0) {
        const std::uint64_t now = ms_now();
        if (now >= end) return ETIMEDOUT;
        wait = static_cast<int>(end - now);
      }
      pollfd p[2] = {{efd, POLLIN, 0}, {fd_, POLLIN, 0}};
      const int r = ::poll(p, 2, wait);
      if (r < 0 && errno != EINTR) return errno;
      if (r == 0) return ETIMEDOUT;
      if (p[0].revents & POLLIN) {
        std::uint64_t v;
        [[maybe_unused]] const ssize_t k = ::read(efd, &v, sizeof v);
      }
      if (p[1].revents != 0 && !check_alive()) {
        std::lock_guard<std::mutex> g(mu);
        return ring.empty() ? ENOTCONN : 0;
      }
    }
  }
  template <class T>
  T* keep(std::vector<std::unique_ptr<T>>& v, std::unique_ptr<T> p) {
    std::lock_guard<std::mutex> g(tables_);
    v.push_back(std::move(p));
    return v.back().get();
  }
  static bool fail(int rc) {
    if (rc == 0) return false;
    errno = rc;
    return true;
  }
  static std::nullptr_t fail_null(int rc) {
    errno = rc;
    return nullptr;
  }
  int simple(Op op, std::uint32_t handle) {
    Request rq;
    rq.op = op;
    rq.handle = handle;
    Reply rep;
    return call(rq, rep);
  }
  Buffer* add_region(int fd, void* addr, std::size_t length, bool own,
                     std::uint64_t file_offset = 0) {
    Request rq;
    rq.op = Op::kRegRegion;
    rq.region.length = length;
    rq.region.client_addr = reinterpret_cast<std::uint64_t>(addr);
    rq.region.file_offset = file_offset;
    Reply rep;
    if (fail(call(rq, rep, &fd, 1))) return nullptr;
    auto b = std::make_unique<ABuffer>();
    b->addr = addr;
    b->length = length;
    b->fd = fd;
    b->region = rep.handle;
    b->own = own;
    return keep(bufs_, std::move(b));
  }
  /// The newest Buffer that holds the range: a later registration describes what is mapped
  /// there now, while an older one may claim the addresses without mapping them (verbs/memory's
  /// regions span 2 MiB windows around the pages they adopt; a memfd mapped inside such a
  /// window later is only the newer Buffer's).
  ABuffer* find_buffer(void* addr, std::size_t length) {
    const auto a = reinterpret_cast<std::uintptr_t>(addr);
    std::lock_guard<std::mutex> g(tables_);
    for (auto b = bufs_.rbegin(); b != bufs_.rend(); ++b) {
      const auto s = reinterpret_cast<std::uintptr_t>((*b)->addr);
      if (a >= s && length <= (*b)->length && a - s <= (*b)->length - length) return b->get();
    }
    return nullptr;
  }
  int post_recv_to(ShmProducer<RecvEntry>& ring, const RecvWr* wr, const RecvWr** bad_wr) {
    int rc = dead_ ? ENOTCONN : 0;
    bool staged = false;
    for (; rc == 0 && wr != nullptr; wr = wr->next) {
      if (wr->num_sge > kMaxSge) {
        rc = EINVAL;
        break;
      }
      RecvEntry e;
      e.wr_id = wr->wr_id;
      e.num_sge = wr->num_sge;
      e.min_free = wr->min_free;
      e.max_msgs = wr->max_msgs;
      std::copy_n(wr->sg_list, wr->num_sge, e.sge);
      if (!ring.stage(e)) {
        rc = ring.broken() ? EIO : ENOMEM;
        break;
      }
      staged = true;
    }
    if (staged) ring.publish();
    if (rc != 0 && bad_wr) *bad_wr = wr;
    return rc;
  }
  /// False (and dead from then on) when roced closed the socket.
  bool check_alive() {
    if (dead_) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    char b;
    if ((p.revents & (POLLHUP | POLLERR)) ||
        ((p.revents & POLLIN) && ::recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0))
      dead_ = true;
    return !dead_;
  }
  /// One request, its reply (with up to `nout` descriptors); 0 or an errno value.
  int call(Request& rq, Reply& rep, const int* fds_in = nullptr, int nin = 0,
           int* fds_out = nullptr, int nout = 0) {
    if (dead_) return ENOTCONN;
    std::lock_guard<std::mutex> g(mu_);
    if (++seq_ == 0) ++seq_;  // 0 is roced's: a connection refused
    rq.seq = seq_;
    iovec iov{&rq, sizeof rq};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char ctl[CMSG_SPACE(4 * sizeof(int))] = {};
    if (nin > 0) {
      m.msg_control = ctl;
      m.msg_controllen = CMSG_SPACE(static_cast<std::size_t>(nin) * sizeof(int));
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(static_cast<std::size_t>(nin) * sizeof(int));
      std::memcpy(CMSG_DATA(c), fds_in, static_cast<std::size_t>(nin) * sizeof(int));
    }
    if (::sendmsg(fd_, &m, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof rq)) {
      const int e = errno;
      dead_ = true;
      // roced may have refused the connection (and closed it) before this request went.
      Reply r0;
      if (::recv(fd_, &r0, sizeof r0, MSG_DONTWAIT) == static_cast<ssize_t>(sizeof r0) &&
          r0.seq == 0 && r0.err != 0)
        return r0.err;
      return e == EPIPE || e == ECONNRESET ? EPIPE : ENOTCONN;
    }
    for (;;) {
      iovec riov{&rep, sizeof rep};
      msghdr r{};
      r.msg_iov = &riov;
      r.msg_iovlen = 1;
      r.msg_control = ctl;
      r.msg_controllen = sizeof ctl;
      const ssize_t n = ::recvmsg(fd_, &r, MSG_CMSG_CLOEXEC);
      if (n < 0 && errno == ECONNRESET && !dead_) {
        dead_ = true;  // roced's refusal may still be queued behind the reset: read again
        continue;
      }
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        dead_ = true;
        return ENOTCONN;
      }
      if (n < 0 && errno == EAGAIN) return ETIMEDOUT;  // SO_RCVTIMEO
      if (n < 0) continue;
      int got = 0;
      for (cmsghdr* c = CMSG_FIRSTHDR(&r); c != nullptr; c = CMSG_NXTHDR(&r, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < k; ++i) {
          int f;
          std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
          if (got < nout && rep.seq == rq.seq)
            fds_out[got++] = f;
          else
            ::close(f);
        }
      }
      if (n != static_cast<ssize_t>(sizeof rep)) return EPROTO;
      if (rep.seq == 0 && rep.err != 0) {  // roced refused the connection and closed it
        dead_ = true;
        return rep.err;
      }
      if (rep.seq != rq.seq) continue;  // the late reply of a request that timed out
      return rep.err;
    }
  }

  int fd_;
  std::uint32_t version_ = attach::kVersion;  ///< the protocol spoken with this roced
  PortInfo port_;
  DeviceAttr dev_;     ///< the limits roced sent at hello
  std::mutex mu_;      ///< one request at a time
  std::mutex tables_;  ///< the vectors below
  std::uint32_t seq_ = 0;
  std::atomic<bool> dead_{false};
  ShmConsumer<EventEntry> events_;  ///< asynchronous events (hello)
  std::mutex events_mu_;
  int events_fd_ = -1;
  void* events_map_ = nullptr;
  std::size_t events_bytes_ = 0;
  ShmConsumer<CmEventEntry> cm_ring_;  ///< rdma_cm events (cm_open)
  std::mutex cm_mu_, cm_open_mu_;
  int cm_fd_ = -1;
  void* cm_map_ = nullptr;
  std::size_t cm_bytes_ = 0;
  std::vector<std::unique_ptr<APd>> pds_;
  std::vector<std::unique_ptr<ABuffer>> bufs_;
  std::vector<std::unique_ptr<AMr>> mrs_;
  std::vector<std::unique_ptr<ACq>> cqs_;
  std::vector<std::unique_ptr<ASrq>> srqs_;
  std::vector<std::unique_ptr<AQp>> qps_;
};

}  // namespace

std::unique_ptr<Context> Context::attach(const std::string& socket_path, const std::string& port) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof sa.sun_path) {
    errno = EINVAL;
    return nullptr;
  }
  std::memcpy(sa.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return nullptr;
  }
  // A request waits at most this long for its reply (modify_qp may resolve an address).
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto ctx = std::make_unique<Attached>(fd);
  if (const int rc = ctx->hello(port)) {
    errno = rc;
    return nullptr;
  }
  return ctx;
}

}  // namespace roce::client
