// libroce's Context on the datapath card (card_context.h).
#include "fpga/host/card_context.h"

#include <roce/buffers.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <map>
#include <vector>

namespace roce::fpga {

namespace {

using namespace roce::client;
namespace eng = roce::engine;

struct CPd : Pd {
  std::uint32_t n = 0;
};
struct CMr : Mr {
  OwnedBuffer* buf = nullptr;
};
struct CCq : Cq {
  std::deque<Wc> q;
};
struct CQp : Qp {
  QpPath path;
  CCq* scq = nullptr;
  client::QpState state = client::QpState::kReset;
  std::uint32_t remote_qpn = 0, rq_psn = 0;
};

std::uint64_t now_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1000 +
         static_cast<std::uint64_t>(t.tv_nsec) / 1000000;
}

class CardContext final : public Context {
 public:
  explicit CardContext(CardContextOptions o) : o_(std::move(o)), d_(*o_.driver) {}
  ~CardContext() override {
    for (auto& q : qps_) d_.destroy_qp(q->qp_num);
    for (auto& m : mrs_) d_.dereg_mr(m->lkey);
  }

  const PortInfo& port() const override { return o_.port; }
  bool connected() const override { return true; }

  Pd* alloc_pd() override {
    auto p = std::make_unique<CPd>();
    p->n = next_pd_++;
    return keep(pds_, std::move(p));
  }
  int dealloc_pd(Pd* pd) override {
    forget(pds_, static_cast<CPd*>(pd));
    return 0;
  }
  Buffer* alloc_buffer(std::size_t length) override { return bufs_.alloc(length); }
  Buffer* register_memfd(int fd, void* addr, std::size_t length) override {
    return bufs_.adopt(fd, addr, length);
  }
  int free_buffer(Buffer* buffer) override { return bufs_.release(buffer); }
  Mr* reg_mr(Pd* pd, void* addr, std::size_t length, std::uint32_t access) override {
    OwnedBuffer* buf = bufs_.holding(addr, length);
    if (buf == nullptr || pd == nullptr) return fail_null(EINVAL);
    if (access & ~std::uint32_t{0xF}) return fail_null(EINVAL);
    // host2mr_wr: the card's MR/TLB entry; the model's DMA address is the host's own.
    const std::uint32_t key =
        d_.reg_mr(static_cast<CPd*>(pd)->n, addr, length, static_cast<std::uint8_t>(access));
    if (key == 0) return fail_null(ENOMEM);
    auto m = std::make_unique<CMr>();
    m->buf = buf;
    m->addr = addr;
    m->length = length;
    m->lkey = m->rkey = key;
    m->iova = reinterpret_cast<std::uint64_t>(addr);
    ++buf->mrs;
    return keep(mrs_, std::move(m));
  }
  int dereg_mr(Mr* mr) override {
    auto* m = static_cast<CMr*>(mr);
    if (!d_.dereg_mr(m->lkey)) return EINVAL;
    --m->buf->mrs;
    forget(mrs_, m);
    return 0;
  }
  Cq* create_cq(std::uint32_t depth) override {
    if (depth == 0) return fail_null(EINVAL);
    auto c = std::make_unique<CCq>();
    c->depth = depth;
    return keep(cqs_, std::move(c));
  }
  int destroy_cq(Cq* cq) override {
    auto* c = static_cast<CCq*>(cq);
    for (auto& q : qps_)
      if (q->scq == c) return EBUSY;
    forget(cqs_, c);
    return 0;
  }
  Srq* create_srq(Pd*, std::uint32_t, std::uint32_t) override { return fail_null(EOPNOTSUPP); }
  int destroy_srq(Srq*) override { return EINVAL; }
  Qp* create_qp(Pd* pd, QpType type, Cq* send_cq, Cq* recv_cq, const QpCap&, Srq* srq,
                bool) override {
    if (type != QpType::kRc || srq != nullptr) return fail_null(EOPNOTSUPP);
    if (pd == nullptr || send_cq == nullptr || recv_cq == nullptr) return fail_null(EINVAL);
    auto q = std::make_unique<CQp>();
    q->path.pd = static_cast<CPd*>(pd)->n;
    q->path.path_mtu = static_cast<std::uint8_t>(o_.port.max_mtu);
    // host2qp_path with QPN 0: the card creates the QP and answers its number.
    q->qp_num = d_.create_qp(q->path);
    if (q->qp_num == 0) return fail_null(ENOMEM);
    q->type = type;
    q->scq = static_cast<CCq*>(send_cq);
    by_qpn_[q->qp_num] = q.get();
    return keep(qps_, std::move(q));
  }
  int destroy_qp(Qp* qp) override {
    auto* q = static_cast<CQp*>(qp);
    if (!d_.destroy_qp(q->qp_num)) return EINVAL;
    by_qpn_.erase(q->qp_num);
    forget(qps_, q);
    return 0;
  }
  /// The card takes a QP from RESET to RTS in one write: INIT and RTR collect the path and the
  /// peer, RTS writes them (host2qp_path, then host2qp_wr). ERR is a write of its own.
  int modify_qp(Qp* qp, const QpAttr& a, std::uint32_t mask) override {
    auto* q = static_cast<CQp*>(qp);
    if (!(mask & eng::kQpState)) return EINVAL;
    switch (a.qp_state) {
      case client::QpState::kInit:
        if (q->state != client::QpState::kReset && q->state != client::QpState::kInit)
          return EINVAL;
        if (mask & eng::kQpAccessFlags)
          q->path.access = static_cast<std::uint8_t>(a.qp_access_flags & 0xE);
        break;
      case client::QpState::kRtr: {
        if (q->state != client::QpState::kInit) return EINVAL;
        const std::uint32_t need = eng::kQpAv | eng::kQpPathMtu | eng::kQpDestQpn | eng::kQpRqPsn;
        if ((mask & need) != need) return EINVAL;
        wire::MacAddr mac = a.ah.dmac;
        if (mac == wire::MacAddr{}) {
          const auto& g = a.ah.dgid.b;
          const wire::Ipv4Addr ip{static_cast<std::uint32_t>(g[12]) << 24 |
                                  static_cast<std::uint32_t>(g[13]) << 16 |
                                  static_cast<std::uint32_t>(g[14]) << 8 | g[15]};
          const auto m = o_.resolve ? o_.resolve(ip) : std::nullopt;
          if (!m) return EHOSTUNREACH;
          mac = *m;
        }
        std::copy(a.ah.dgid.b.begin(), a.ah.dgid.b.end(), q->path.dgid.begin());
        std::copy(mac.b.begin(), mac.b.end(), q->path.dmac.begin());
        q->path.path_mtu = static_cast<std::uint8_t>(
            std::min(static_cast<int>(a.path_mtu), static_cast<int>(o_.port.max_mtu)));
        if (mask & eng::kQpMinRnrTimer) q->path.min_rnr_timer = a.min_rnr_timer;
        if (mask & eng::kQpMaxDestRdAtomic)
          q->path.max_rd_atomic = std::max(q->path.max_rd_atomic, a.max_dest_rd_atomic);
        q->remote_qpn = a.dest_qp_num;
        q->rq_psn = a.rq_psn;
        break;
      }
      case client::QpState::kRts: {
        if (q->state != client::QpState::kRtr) return EINVAL;
        if (!(mask & eng::kQpSqPsn)) return EINVAL;
        if (mask & eng::kQpTimeout) q->path.timeout = a.timeout;
        if (mask & eng::kQpRetryCnt) q->path.retry_cnt = a.retry_cnt;
        if (mask & eng::kQpRnrRetry) q->path.rnr_retry = a.rnr_retry;
        if (mask & eng::kQpMaxQpRdAtomic)
          q->path.max_rd_atomic = std::max(q->path.max_rd_atomic, a.max_rd_atomic);
        if (q->path.max_rd_atomic == 0) q->path.max_rd_atomic = 1;
        if (!d_.set_path(q->qp_num, q->path)) return EINVAL;
        if (!d_.connect(q->qp_num, q->remote_qpn, a.sq_psn, q->rq_psn)) return EINVAL;
        break;
      }
      case client::QpState::kErr:
        if (q->state == client::QpState::kRts && !d_.error(q->qp_num)) return EINVAL;
        break;
      default:
        return EINVAL;
    }
    q->state = a.qp_state;
    return 0;
  }
  int post_send(Qp* qp, const SendWr* wr, const SendWr** bad_wr) override {
    auto* q = static_cast<CQp*>(qp);
    for (const SendWr* w = wr; w != nullptr; w = w->next) {
      const int rc = post_one(*q, *w);
      if (rc != 0) {
        if (bad_wr) *bad_wr = w;
        return rc;
      }
    }
    return 0;
  }
  int post_recv(Qp*, const RecvWr* wr, const RecvWr** bad_wr) override {
    if (bad_wr) *bad_wr = wr;
    return EOPNOTSUPP;
  }
  int post_srq_recv(Srq*, const RecvWr* wr, const RecvWr** bad_wr) override {
    if (bad_wr) *bad_wr = wr;
    return EOPNOTSUPP;
  }
  int poll_cq(Cq* cq, int max, Wc* out) override {
    auto* c = static_cast<CCq*>(cq);
    if (max < 0) return -EINVAL;
    if (c->q.empty()) {
      if (o_.progress) o_.progress();
      reap();
    }
    int n = 0;
    for (; n < max && !c->q.empty(); ++n) {
      out[n] = c->q.front();
      c->q.pop_front();
    }
    return n;
  }
  int wait_cq(Cq* cq, int timeout_ms) override {
    auto* c = static_cast<CCq*>(cq);
    const std::uint64_t t0 = now_ms();
    while (c->q.empty()) {
      if (o_.progress) o_.progress();
      reap();
      if (timeout_ms >= 0 && now_ms() - t0 >= static_cast<std::uint64_t>(timeout_ms))
        return c->q.empty() ? ETIMEDOUT : 0;
    }
    return 0;
  }
  int get_async_event(AsyncEvent&, int timeout_ms) override {
    // The card reports a QP's failure through its completions only.
    const std::uint64_t t0 = now_ms();
    while (timeout_ms != 0 &&
           (timeout_ms < 0 || now_ms() - t0 < static_cast<std::uint64_t>(timeout_ms)))
      if (o_.progress) o_.progress();
    return ETIMEDOUT;
  }
  int cm_listen(std::uint16_t) override { return EOPNOTSUPP; }
  int cm_connect(Qp*, wire::Ipv4Addr, std::uint16_t, const CmConnParam&, std::uint32_t&) override {
    return EOPNOTSUPP;
  }
  int cm_accept(std::uint32_t, Qp*, const CmConnParam&) override { return EOPNOTSUPP; }
  int cm_reject(std::uint32_t, std::span<const std::uint8_t>) override { return EOPNOTSUPP; }
  int cm_disconnect(std::uint32_t) override { return EOPNOTSUPP; }
  int cm_get_event(CmEvent&, int) override { return EOPNOTSUPP; }

 private:
  int post_one(CQp& q, const SendWr& w) {
    if (q.state != client::QpState::kRts) return EINVAL;
    WorkRequest r;
    switch (w.opcode) {
      case WrOpcode::kWrite:
        r.opcode = WqOpcode::kWrite;
        break;
      case WrOpcode::kRead:
        r.opcode = WqOpcode::kRead;
        break;
      default:
        return EINVAL;  // SEND, WRITE_IMM, atomics: the software engine's
    }
    if (w.num_sge > 1) return EINVAL;  // one local buffer per descriptor
    r.wr_id = w.wr_id;
    r.qpn = q.qp_num;
    r.flags = static_cast<std::uint8_t>(((w.send_flags & eng::kSendSignaled) ? 1 : 0) |
                                        ((w.send_flags & eng::kSendFence) ? 2 : 0) |
                                        ((w.send_flags & eng::kSendSolicited) ? 4 : 0));
    if (w.num_sge == 1) {
      r.laddr = w.sg_list[0].addr;
      r.lkey = w.sg_list[0].lkey;
      r.len = w.sg_list[0].length;
    }
    r.raddr = w.rdma.remote_addr;
    r.rkey = w.rdma.rkey;
    return d_.post(r) ? 0 : ENOMEM;
  }
  /// dev2host_cq into the CQ of each completion's QP.
  void reap() {
    for (const Completion& c : d_.poll()) {
      const auto it = by_qpn_.find(c.qpn);
      if (it == by_qpn_.end()) continue;  // a QP destroyed since
      Wc wc;
      wc.wr_id = c.wr_id;
      wc.status = static_cast<WcStatus>(c.status);
      wc.opcode = static_cast<WcOpcode>(c.opcode);
      wc.byte_len = c.byte_len;
      wc.qp_num = c.qpn;
      it->second->scq->q.push_back(wc);
    }
  }

  CardContextOptions o_;
  DatapathDriver& d_;
  std::uint32_t next_pd_ = 1;
  std::vector<std::unique_ptr<CPd>> pds_;
  BufferSet bufs_;
  std::vector<std::unique_ptr<CMr>> mrs_;
  std::vector<std::unique_ptr<CCq>> cqs_;
  std::vector<std::unique_ptr<CQp>> qps_;
  std::map<std::uint32_t, CQp*> by_qpn_;
};

}  // namespace

std::unique_ptr<client::Context> open_card_context(CardContextOptions o) {
  if (o.driver == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return std::make_unique<CardContext>(std::move(o));
}

}  // namespace roce::fpga
