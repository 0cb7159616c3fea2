/// @file
/// The in-process backend of libroce: every call goes straight to the application's own
/// engine; poll_cq and wait_cq drive its poll loop through LocalOptions::progress. Single
/// threaded, as the engine is.
#include "client/local/local_context.h"

#include <roce/buffers.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <vector>

#include "controlplane/cm/cm_session.h"
#include "dataplane/engine/engine.h"

namespace roce::client {

namespace {

struct LPd : Pd {
  engine::Pd* pd = nullptr;
};
struct LMr : Mr {
  engine::Mr* mr = nullptr;
  OwnedBuffer* buf = nullptr;
};
struct LCq : Cq {
  engine::Cq* cq = nullptr;
};
struct LSrq : Srq {
  engine::Srq* srq = nullptr;
};
struct LQp : Qp {
  engine::Qp* qp = nullptr;
};

class Local final : public Context {
 public:
  explicit Local(LocalOptions o) : o_(std::move(o)), e_(*o_.engine) {}
  ~Local() override {
    if (cm_) {
      // DREQs for connections still up (the QPs below are then the CM's no more), and the
      // answers to every DREQ sent, before the engine may go.
      cm::CmHub& hub = cm_->hub();
      const auto keep = cm_->share_hub();
      cm_.reset();
      hub.agent().drain([&] {
        if (o_.progress) o_.progress();
        hub.poll(now_ns());
      });
    }
    for (auto& q : qps_) e_.destroy_qp(q->qp);
    for (auto& s : srqs_) e_.destroy_srq(s->srq);
    for (auto& m : mrs_) e_.dereg_mr(m->mr);
    for (auto& c : cqs_) e_.destroy_cq(c->cq);
    for (auto& p : pds_) e_.dealloc_pd(p->pd);
  }
  const PortInfo& port() const override { return o_.port; }
  bool connected() const override { return true; }

  Pd* alloc_pd() override {
    auto p = std::make_unique<LPd>();
    p->pd = e_.alloc_pd();
    return p->pd ? keep(pds_, std::move(p)) : fail_null(ENOMEM);
  }
  int dealloc_pd(Pd* pd) override {
    auto* p = static_cast<LPd*>(pd);
    if (const int rc = e_.dealloc_pd(p->pd)) return rc;
    forget(pds_, p);
    return 0;
  }
  Buffer* alloc_buffer(std::size_t length) override { return bufs_.alloc(length); }
  Buffer* register_memfd(int fd, void* addr, std::size_t length) override {
    return bufs_.adopt(fd, addr, length);
  }
  // The engine reaches the process's own memory: where the pages sit in the memfd is moot.
  Buffer* register_memfd_at(int fd, std::uint64_t, void* addr, std::size_t length) override {
    return bufs_.adopt(fd, addr, length);
  }
  int free_buffer(Buffer* buffer) override { return bufs_.release(buffer); }
  Mr* reg_mr(Pd* pd, void* addr, std::size_t length, std::uint32_t access) override {
    return reg_mr_iova(pd, addr, length, reinterpret_cast<std::uint64_t>(addr), access);
  }
  Mr* reg_mr_iova(Pd* pd, void* addr, std::size_t length, std::uint64_t iova,
                  std::uint32_t access) override {
    OwnedBuffer* buf = bufs_.holding(addr, length);
    if (buf == nullptr) return fail_null(EINVAL);
    auto m = std::make_unique<LMr>();
    m->mr = iova == reinterpret_cast<std::uint64_t>(addr)
                ? e_.reg_mr(static_cast<LPd*>(pd)->pd, addr, length, access)
                : e_.reg_mr(static_cast<LPd*>(pd)->pd, addr, length, iova, access);
    if (m->mr == nullptr) return fail_null(EINVAL);
    m->buf = buf;
    m->addr = addr;
    m->length = length;
    m->lkey = m->rkey = m->mr->key;
    m->iova = iova;
    ++buf->mrs;
    return keep(mrs_, std::move(m));
  }
  int rereg_mr(Mr* mr, Pd* pd, void* addr, std::size_t length, std::uint64_t iova,
               std::uint32_t access) override {
    auto* m = static_cast<LMr*>(mr);
    OwnedBuffer* buf = bufs_.holding(addr, length);
    if (buf == nullptr) return EINVAL;
    if (const int rc = e_.rereg_mr(m->mr, static_cast<LPd*>(pd)->pd, addr, length, iova, access))
      return rc;
    --m->buf->mrs;
    ++buf->mrs;
    m->buf = buf;
    m->addr = addr;
    m->length = length;
    m->iova = iova;
    return 0;
  }
  int dereg_mr(Mr* mr) override {
    auto* m = static_cast<LMr*>(mr);
    if (const int rc = e_.dereg_mr(m->mr)) return rc;
    --m->buf->mrs;
    forget(mrs_, m);
    return 0;
  }
  Cq* create_cq(std::uint32_t depth) override {
    auto c = std::make_unique<LCq>();
    c->cq = e_.create_cq(depth);
    c->depth = depth;
    return c->cq ? keep(cqs_, std::move(c)) : fail_null(EINVAL);
  }
  int destroy_cq(Cq* cq) override {
    auto* c = static_cast<LCq*>(cq);
    if (const int rc = e_.destroy_cq(c->cq)) return rc;
    forget(cqs_, c);
    return 0;
  }
  Srq* create_srq(Pd* pd, std::uint32_t max_wr, std::uint32_t max_sge) override {
    auto s = std::make_unique<LSrq>();
    s->srq = e_.create_srq(static_cast<LPd*>(pd)->pd, max_wr, max_sge);
    return s->srq ? keep(srqs_, std::move(s)) : fail_null(EINVAL);
  }
  int destroy_srq(Srq* srq) override {
    auto* s = static_cast<LSrq*>(srq);
    if (const int rc = e_.destroy_srq(s->srq)) return rc;
    forget(srqs_, s);
    return 0;
  }
  Qp* create_qp(Pd* pd, QpType type, Cq* send_cq, Cq* recv_cq, const QpCap& cap, Srq* srq,
                bool sq_sig_all) override {
    auto q = std::make_unique<LQp>();
    q->qp = e_.create_qp(static_cast<LPd*>(pd)->pd, type, static_cast<LCq*>(send_cq)->cq,
                         static_cast<LCq*>(recv_cq)->cq, cap,
                         srq ? static_cast<LSrq*>(srq)->srq : nullptr, sq_sig_all);
    if (q->qp == nullptr) return fail_null(EINVAL);
    q->qp_num = q->qp->qpn;
    q->type = type;
    return keep(qps_, std::move(q));
  }
  int destroy_qp(Qp* qp) override {
    auto* q = static_cast<LQp*>(qp);
    if (cm_) cm_->release(q->qp);
    std::erase(comm_est_, q->qp);
    if (const int rc = e_.destroy_qp(q->qp)) return rc;
    forget(qps_, q);
    return 0;
  }
  int modify_qp(Qp* qp, const QpAttr& attr, std::uint32_t mask) override {
    QpAttr a = attr;
    if ((mask & verbs::kQpAv) && a.ah.dmac == MacAddr{}) {
      const auto& g = a.ah.dgid.b;
      const Ipv4Addr ip{static_cast<std::uint32_t>(g[12]) << 24 |
                        static_cast<std::uint32_t>(g[13]) << 16 |
                        static_cast<std::uint32_t>(g[14]) << 8 | g[15]};
      const auto mac = o_.resolve ? o_.resolve(ip) : std::nullopt;
      if (!mac) return EHOSTUNREACH;
      a.ah.dmac = *mac;
    }
    return e_.modify_qp(static_cast<LQp*>(qp)->qp, a, mask);
  }
  int post_send(Qp* qp, const SendWr* wr, const SendWr** bad_wr) override {
    return e_.post_send(static_cast<LQp*>(qp)->qp, wr, bad_wr);
  }
  int post_recv(Qp* qp, const RecvWr* wr, const RecvWr** bad_wr) override {
    return e_.post_recv(static_cast<LQp*>(qp)->qp, wr, bad_wr);
  }
  int post_srq_recv(Srq* srq, const RecvWr* wr, const RecvWr** bad_wr) override {
    return e_.post_srq_recv(static_cast<LSrq*>(srq)->srq, wr, bad_wr);
  }
  int poll_cq(Cq* cq, int max, Wc* out) override {
    engine::Cq* c = static_cast<LCq*>(cq)->cq;
    if (c->size() == 0) progress();
    const int n = e_.poll_cq(c, max, out);
    if (n > 0 && !comm_est_.empty()) comm_est(out, n);
    return n;
  }
  int get_async_event(AsyncEvent& ev, int timeout_ms) override {
    timespec t0{};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    engine::AsyncEvent e;
    for (unsigned i = 0; !e_.get_async_event(e); ++i) {
      if (timeout_ms == 0) return ETIMEDOUT;
      progress();
      if (timeout_ms > 0 && (i & 255) == 0) {
        timespec t{};
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= timeout_ms)
          return ETIMEDOUT;
      }
    }
    ev.type = e.type;
    ev.qp_num = e.qp_num;
    ev.cq = nullptr;
    for (auto& c : cqs_)
      if (c->cq == e.cq) ev.cq = c.get();
    return 0;
  }
  int wait_cq(Cq* cq, int timeout_ms) override {
    engine::Cq* c = static_cast<LCq*>(cq)->cq;
    timespec t0{};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned i = 0; c->size() == 0; ++i) {
      progress();
      if (timeout_ms >= 0 && (i & 255) == 0) {
        timespec t{};
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= timeout_ms)
          return ETIMEDOUT;
      }
    }
    return 0;
  }

  // ---- rdma_cm on the engine's CM hub (controlplane/cm/cm_session.h) ----
  int cm_listen(std::uint16_t port) override {
    if (const int rc = cm_open()) return rc;
    return cm_->listen(port);
  }
  int cm_connect(Qp* qp, Ipv4Addr dst, std::uint16_t port, const CmConnParam& p,
                 std::uint32_t& id) override {
    if (const int rc = cm_open()) return rc;
    if (!o_.resolve || !o_.resolve(dst)) return EHOSTUNREACH;  // the CM needs the peer's MAC
    return cm_->connect(static_cast<LQp*>(qp)->qp, dst, port, param(p), id);
  }
  int cm_accept(std::uint32_t id, Qp* qp, const CmConnParam& p) override {
    if (const int rc = cm_open()) return rc;
    engine::Qp* q = static_cast<LQp*>(qp)->qp;
    const int rc = cm_->accept(id, q, param(p));
    if (rc == 0) comm_est_.push_back(q);  // until the RTU or the first data
    return rc;
  }
  int cm_reject(std::uint32_t id, std::span<const std::uint8_t> private_data) override {
    if (const int rc = cm_open()) return rc;
    return cm_->reject(id, private_data);
  }
  int cm_disconnect(std::uint32_t id) override {
    if (const int rc = cm_open()) return rc;
    return cm_->disconnect(id);
  }
  int neighbour(Ipv4Addr ip, bool ask) override {
    if (!o_.neighbour) return EOPNOTSUPP;
    return o_.neighbour(ip, ask) ? 0 : EAGAIN;
  }
  int cm_refuse(std::uint32_t id) override {
    if (const int rc = cm_open()) return rc;
    return cm_->refuse(id);
  }
  int cm_notify(std::uint32_t id) override {
    if (const int rc = cm_open()) return rc;
    return cm_->notify(id);
  }
  int cm_unlisten(std::uint16_t port, bool udp) override {
    if (const int rc = cm_open()) return rc;
    return cm_->unlisten(port, udp);
  }
  int cm_sidr_listen(std::uint16_t port) override {
    if (const int rc = cm_open()) return rc;
    return cm_->sidr_listen(port);
  }
  int cm_sidr_resolve(Ipv4Addr dst, std::uint16_t port, std::span<const std::uint8_t> pd,
                      std::uint32_t& id) override {
    if (const int rc = cm_open()) return rc;
    if (!o_.resolve || !o_.resolve(dst)) return EHOSTUNREACH;  // the CM needs the peer's MAC
    return cm_->sidr_resolve(dst, port, pd, id);
  }
  int cm_sidr_accept(std::uint32_t id, std::uint32_t qpn, std::uint32_t qkey,
                     std::span<const std::uint8_t> pd) override {
    if (const int rc = cm_open()) return rc;
    return cm_->sidr_accept(id, qpn, qkey, pd);
  }
  int cm_sidr_reject(std::uint32_t id) override {
    if (const int rc = cm_open()) return rc;
    return cm_->sidr_reject(id);
  }
  int cm_get_event(CmEvent& ev, int timeout_ms) override {
    if (const int rc = cm_open()) return rc;
    const std::uint64_t t0 = now_ns();
    if (cm_events_.empty()) progress();  // once even without waiting, as poll_cq does
    for (unsigned i = 0; cm_events_.empty(); ++i) {
      if (timeout_ms == 0) return ETIMEDOUT;
      progress();
      if (timeout_ms > 0 && (i & 255) == 0 && now_ns() - t0 >= std::uint64_t(timeout_ms) * 1000000)
        return ETIMEDOUT;
    }
    const cm::SessionEvent& s = cm_events_.front();
    if (s.type == cm::SessionEventType::kEstablished)
      std::erase_if(comm_est_, [&](engine::Qp* q) { return q->qpn == s.qp_num; });
    ev.type = static_cast<CmEventType>(s.type);
    ev.id = s.id;
    ev.qp_num = s.qp_num;
    ev.peer = s.peer;
    ev.port = s.port;
    ev.responder_resources = s.responder_resources;
    ev.initiator_depth = s.initiator_depth;
    ev.reason = s.reason;
    ev.remote = s.remote;
    ev.private_data = s.private_data;
    ev.sidr_status = s.sidr_status;
    ev.sidr_qpn = s.sidr_qpn;
    ev.sidr_qkey = s.sidr_qkey;
    ev.ece_vendor = s.ece.vendor_id;
    ev.ece_options = s.ece.options;
    ev.selective_repeat = s.selective_repeat;
    cm_events_.pop_front();
    return 0;
  }

 private:
  static std::uint64_t now_ns() {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return std::uint64_t(t.tv_sec) * 1000000000 + std::uint64_t(t.tv_nsec);
  }
  /// The MAC of a MAD's destination, for the CM, which sends from inside its poll to whatever
  /// source a frame names: never a wait there (o_.resolve may: 10 s in runtime::Env, a stalled
  /// program and 50 ARP requests per forged REQ). With lookup(), the cache only (agent_config
  /// budgets `ask`); an unknown address is nullopt: the MAD is dropped for now and the CM's
  /// retransmission finds the MAC.
  std::optional<MacAddr> cm_mac(Ipv4Addr ip, bool ask) {
    if (o_.lookup) return o_.lookup(ip, ask);
    return o_.resolve ? o_.resolve(ip) : std::nullopt;
  }

  void progress() {
    if (o_.progress) o_.progress();
    if (cm_) cm_->poll(now_ns());
  }
  static cm::SessionParam param(const CmConnParam& p) {
    return {p.responder_resources, p.initiator_depth,
            p.rnr_retry,           p.private_data,
            p.retry_count,         cm::Ece{p.ece_vendor & 0xFFFFFF, p.ece_options}};
  }
  /// The first data on an accepted QP whose RTU has not come (COMM_EST): the CM is told, as
  /// rdma-core's rdma_notify does, so that it stops repeating the REP.
  void comm_est(const Wc* wc, int n) {
    for (int i = 0; i < n && !comm_est_.empty(); ++i) {
      if (wc[i].status != WcStatus::kSuccess ||
          (wc[i].opcode != WcOpcode::kRecv && wc[i].opcode != WcOpcode::kRecvRdmaWithImm))
        continue;
      auto it = std::find_if(comm_est_.begin(), comm_est_.end(),
                             [&](engine::Qp* q) { return q->qpn == wc[i].qp_num; });
      if (it == comm_est_.end()) continue;
      engine::Qp* q = *it;
      comm_est_.erase(it);
      if (cm_) cm_->established_by_data(q);
    }
  }
  int cm_open() {
    if (cm_) return 0;
    try {
      auto hub = cm::CmHub::get(
          e_, cm::agent_config(o_.port.mac, o_.cm_connections, &Local::now_ns,
                               [this](Ipv4Addr ip, bool ask) { return cm_mac(ip, ask); }));
      cm_ = std::make_unique<cm::CmSession>(
          std::move(hub), o_.port.ipv4, static_cast<std::uint8_t>(o_.port.max_mtu),
          [this](cm::SessionEvent ev) { cm_events_.push_back(std::move(ev)); });
    } catch (const std::exception&) {
      return EBUSY;  // the engine's QP1 is taken
    }
    return 0;
  }

  LocalOptions o_;
  engine::Engine& e_;
  std::vector<std::unique_ptr<LPd>> pds_;
  BufferSet bufs_;  ///< before the MRs: destroyed after them
  std::vector<std::unique_ptr<LMr>> mrs_;
  std::vector<std::unique_ptr<LCq>> cqs_;
  std::vector<std::unique_ptr<LSrq>> srqs_;
  std::vector<std::unique_ptr<LQp>> qps_;
  std::unique_ptr<cm::CmSession> cm_;
  std::deque<cm::SessionEvent> cm_events_;
  std::vector<engine::Qp*> comm_est_;  ///< accepted, neither RTU nor data yet
};

}  // namespace

std::unique_ptr<Context> open_local(LocalOptions opts) {
  if (opts.engine == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return std::make_unique<Local>(std::move(opts));
}

}  // namespace roce::client
