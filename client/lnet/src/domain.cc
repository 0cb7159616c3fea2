/// @file
/// The network domain: buffer registration and the private provisioning thread that answers
/// the receive pools' not-empty callback ([Concurrency Control]: the callback only wakes it).
#include <cerrno>

#include "client/lnet/src/lnet_internal.h"
#include "client/lnet/src/serialized_context.h"

namespace roce::lnet {

std::uint64_t NetBuffer::capacity() const {
  std::uint64_t n = 0;
  for (const Segment& s : segs) n += s.length;
  return n;
}

Domain::Domain(client::Context& ctx, DomainOptions opts)
    : serialized_(opts.serialize_context ? std::make_unique<SerializedContext>(ctx) : nullptr),
      ctx_(serialized_ ? *serialized_ : ctx),
      opts_(std::move(opts)) {
  pd_ = ctx_.alloc_pd();
  prov_thread_ = std::thread([this] { provision_loop(); });
  async_thread_ = std::thread([this] { async_loop(); });
}

Domain::~Domain() {
  {
    std::lock_guard<std::mutex> g(prov_mu_);
    prov_stop_ = true;
  }
  prov_cv_.notify_all();
  prov_thread_.join();
  async_thread_.join();
  if (pd_) ctx_.dealloc_pd(pd_);
}

Ipv4Addr Domain::nid() const { return opts_.nid.value_or(ctx_.port().ipv4); }

std::pair<std::string, std::uint16_t> Domain::oob_locate(const EndPoint& ep) const {
  std::string host = opts_.oob_host;
  if (host.empty()) {
    host = ep.str();
    host.resize(host.find('@'));
  }
  const std::uint32_t index =
      (ep.pid * (kMaxPortal + 1) + ep.portal) * (kMaxTmid + 1) + ep.tmid.value_or(0);
  return {host,
          static_cast<std::uint16_t>(std::min<std::uint32_t>(opts_.oob_port_base + index, 65535))};
}

NetBuffer* Domain::alloc_buffer(std::uint32_t nseg, std::uint64_t seg_size) {
  if (nseg == 0 || nseg > 4 || seg_size == 0 || seg_size > UINT32_MAX) {
    errno = EINVAL;
    return nullptr;
  }
  client::Buffer* b = ctx_.alloc_buffer(nseg * seg_size);
  if (!b) return nullptr;
  auto* nb = new NetBuffer;
  nb->impl = std::make_shared<NetBuffer::Impl>();
  nb->impl->owned = b;
  for (std::uint32_t i = 0; i < nseg; ++i)
    nb->segs.push_back(Segment{static_cast<std::uint8_t*>(b->addr) + i * seg_size, seg_size});
  if (const int rc = register_buffer(*nb)) {
    ctx_.free_buffer(b);
    delete nb;
    errno = rc;
    return nullptr;
  }
  return nb;
}

int Domain::free_buffer(NetBuffer* nb) {
  if (!nb) return 0;
  if (nb->pool) return EINVAL;
  // Queued: the engine may still write into it (a posted receive) or a peer read it (a passive
  // bulk buffer); freeing it now would hand that memory to someone else.
  if (nb->flags & kBufQueued) return EBUSY;
  if (nb->flags & kBufRegistered) deregister_buffer(*nb);
  if (nb->impl && nb->impl->owned) ctx_.free_buffer(nb->impl->owned);
  delete nb;
  return 0;
}

int Domain::register_buffer(NetBuffer& nb) {
  if (nb.flags & kBufRegistered) return EINVAL;
  if (nb.segs.empty() || nb.segs.size() > 4) return EINVAL;
  if (!nb.impl) nb.impl = std::make_shared<NetBuffer::Impl>();
  for (const Segment& s : nb.segs) {
    client::Mr* mr = s.length == 0 || s.length > UINT32_MAX
                         ? nullptr
                         : ctx_.reg_mr(pd_, s.addr, s.length, verbs::kAccessLocalWrite);
    if (!mr) {
      const int rc = errno ? errno : EINVAL;
      for (client::Mr* m : nb.impl->mrs) ctx_.dereg_mr(m);
      nb.impl->mrs.clear();
      return rc;
    }
    nb.impl->mrs.push_back(mr);
  }
  nb.flags |= kBufRegistered;
  return 0;
}

int Domain::deregister_buffer(NetBuffer& nb) {
  if (!(nb.flags & kBufRegistered)) return EINVAL;
  if (nb.flags & kBufQueued) return EBUSY;
  if (!nb.impl->shared_mr)  // a pool's region MR goes with the pool
    for (client::Mr* m : nb.impl->mrs) ctx_.dereg_mr(m);
  nb.impl->shared_mr = false;
  nb.impl->mrs.clear();
  nb.flags &= ~kBufRegistered;
  return 0;
}

void Domain::recv_pool_not_empty(BufferPool&) {
  // Minimal work, on the stack of the put() with the pool lock held: no get(), no Tm lock, not
  // even the Tm list's lock (the provisioning thread holds that one while it calls get()). The
  // domain's own thread provisions every started Tm whose deficit is non-zero.
  {
    std::lock_guard<std::mutex> g(prov_mu_);
    prov_kick_ = true;
  }
  prov_cv_.notify_all();  // the async thread waits on it too
}

void Domain::provision_loop() {
  std::unique_lock<std::mutex> lk(prov_mu_);
  for (;;) {
    prov_cv_.wait(lk, [this] { return prov_kick_ || prov_stop_; });
    if (prov_stop_) return;
    prov_kick_ = false;
    lk.unlock();
    {
      std::lock_guard<std::mutex> g(tms_mu_);
      for (Tm* tm : tms_)
        if (tm->state() == TmState::kStarted && tm->deficit_.load(std::memory_order_acquire))
          tm->provision_from_pool();
    }
    lk.lock();
  }
}

// The Context's asynchronous events (ibv_get_async_event), polled without blocking (a
// serialized Context holds its lock across a call) and routed to the Tm they concern: a CQ
// that overran fails its Tm (M0_NET_TM_FAILED); a QP error ends that connection (its peer is
// gone) and is told as an error event.
void Domain::async_loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(prov_mu_);
      if (prov_cv_.wait_for(lk, std::chrono::milliseconds(20), [this] { return prov_stop_; }))
        return;
    }
    client::AsyncEvent ev;
    while (ctx_.get_async_event(ev, 0) == 0) {
      std::lock_guard<std::mutex> g(tms_mu_);
      for (Tm* tm : tms_) {
        if (ev.type == verbs::AsyncEventType::kCqErr) {
          if (ev.cq != tm->cq_) continue;
          tm->fail(-EOVERFLOW);
          break;
        }
        if (ev.type == verbs::AsyncEventType::kQpLastWqeReached) break;  // not an error
        if (tm->async_qp_error(ev.qp_num)) break;
        continue;
      }
    }
  }
}

}  // namespace roce::lnet
