/// @file
/// Receive buffer pools ([r.m0.net.network-buffer-pool]): a free list ordered by put time, most
/// recent first, and the coloured get the seed asks for: "the most recently used buffer last
/// associated with a specific transfer machine, or if none such are found, a buffer which has
/// no previous transfer machine association, or if none such are found, the least recently
/// used buffer from the pool". The not-empty callback runs with the pool lock held, on the
/// stack of the put() that refilled an empty pool (the seed's serialization model).
#include <roce/lnet.h>

#include <algorithm>
#include <cerrno>

#include "client/lnet/src/lnet_internal.h"

namespace roce::lnet {

namespace {
/// A pool's buffers are carved out of regions of at most this many bytes (one alloc_buffer, one
/// MR each): roced counts regions (max_regions, 128 per client) and MRs, not buffers.
constexpr std::uint64_t kRegionBytes = std::uint64_t{64} << 20;
}  // namespace

BufferPool::BufferPool(Domain& dom, std::uint32_t count, std::uint32_t nseg, std::uint64_t seg_size)
    : dom_(dom), not_empty_([](BufferPool& p) { p.domain().recv_pool_not_empty(p); }) {
  if (count == 0) return;
  if (nseg == 0 || nseg > 4 || seg_size == 0 || seg_size > UINT32_MAX) {
    error_ = EINVAL;
    return;
  }
  client::Context& ctx = dom.ctx();
  const std::uint64_t per = nseg * seg_size;
  const std::uint64_t per_region = std::max<std::uint64_t>(1, kRegionBytes / per);
  while (all_.size() < count) {
    const std::uint64_t n = std::min<std::uint64_t>(per_region, count - all_.size());
    errno = 0;
    client::Buffer* b = ctx.alloc_buffer(n * per);
    client::Mr* mr = b ? ctx.reg_mr(dom.pd(), b->addr, n * per, verbs::kAccessLocalWrite) : nullptr;
    if (!mr) {  // a short pool: size() < count, error() says why
      error_ = errno ? errno : ENOMEM;
      if (b) ctx.free_buffer(b);
      break;
    }
    regions_.push_back(Region{b, mr});
    for (std::uint64_t k = 0; k < n; ++k) {
      auto* nb = new NetBuffer;
      nb->impl = std::make_shared<NetBuffer::Impl>();
      nb->impl->shared_mr = true;
      auto* base = static_cast<std::uint8_t*>(b->addr) + k * per;
      for (std::uint32_t i = 0; i < nseg; ++i) {
        nb->segs.push_back(Segment{base + i * seg_size, seg_size});
        nb->impl->mrs.push_back(mr);
      }
      nb->flags |= kBufRegistered;
      nb->pool = this;
      all_.push_back(nb);
      free_.push_back(Entry{nb, std::nullopt});  // unaffiliated buffers at the tail
    }
  }
}

BufferPool::~BufferPool() {
  for (NetBuffer* nb : all_) {
    if (nb->flags & kBufRegistered) dom_.deregister_buffer(*nb);
    delete nb;
  }
  for (const Region& r : regions_) {
    dom_.ctx().dereg_mr(r.mr);
    dom_.ctx().free_buffer(r.buf);
  }
}

NetBuffer* BufferPool::get(std::uint64_t colour) {
  std::lock_guard<std::mutex> g(mu_);
  if (free_.empty()) return nullptr;
  auto pick = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->colour == colour) {  // most recently used first: the first match is it
      pick = it;
      break;
    }
    if (!it->colour && pick == free_.end()) pick = it;  // the first unaffiliated one
  }
  if (pick == free_.end()) pick = std::prev(free_.end());  // the least recently used
  NetBuffer* nb = pick->nb;
  free_.erase(pick);
  return nb;
}

int BufferPool::put(NetBuffer* nb) {
  if (!nb || nb->pool != this) return EINVAL;
  // Still queued (a multi-message buffer with room left, one whose event has not come): the
  // engine may write into it, so it cannot serve anyone else yet.
  if (nb->flags & kBufQueued) return EBUSY;
  std::lock_guard<std::mutex> g(mu_);
  for (const Entry& e : free_)
    if (e.nb == nb) return EALREADY;  // a double put is refused, never a corrupt list
  const bool was_empty = free_.empty();
  std::optional<std::uint64_t> colour;
  if (nb->tm) colour = nb->tm->colour_get();  // nb_tm: the Tm it last served
  nb->flags &= ~(kBufQueued | kBufInProgress | kBufCancelled | kBufTimedOut);
  free_.push_front(Entry{nb, colour});
  if (was_empty && not_empty_) not_empty_(*this);
  return 0;
}

std::uint32_t BufferPool::free_count() const {
  std::lock_guard<std::mutex> g(mu_);
  return static_cast<std::uint32_t>(free_.size());
}

void BufferPool::set_receive_limits(std::uint64_t min_receive_size,
                                    std::uint32_t max_receive_msgs) {
  std::lock_guard<std::mutex> g(mu_);
  for (NetBuffer* nb : all_) {
    nb->min_receive_size = min_receive_size;
    nb->max_receive_msgs = max_receive_msgs;
  }
}

}  // namespace roce::lnet
