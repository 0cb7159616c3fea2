/// @file
/// roce/m0_net.h: the C API with Motr's names over roce::lnet. A C structure's private pointer
/// holds its C++ object: the domain's Domain (and the Context it attached), the Tm, the
/// NetBuffer of a registered buffer, the reference-counted end point.
#include <roce/lnet.h>
#include <roce/m0_net.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "client/lnet/src/lnet_internal.h"

using namespace roce;
using namespace roce::lnet;

namespace {

/// A memfd of m0_bufvec_alloc, by the address it is mapped at.
struct Region {
  int fd;
  std::size_t length;
};
std::mutex g_regions_mu;
std::map<std::uintptr_t, Region> g_regions;

struct CDomain {
  std::unique_ptr<client::Context> owned;
  std::unique_ptr<Domain> dom;
  std::mutex mu;
  std::map<std::uintptr_t, client::Buffer*> memfds;  ///< regions registered with the Context
};

struct CEndPoint {
  m0_net_end_point pub{};
  EndPoint ep;
  std::string addr;
  std::uint32_t refs = 0;
};

struct CTm {
  std::unique_ptr<Tm> tm;
  std::map<EndPoint, CEndPoint*> eps;  ///< under g_eps_mu
};

/// Every end point object alive, of every Tm, and their counts and Tms' maps: a pointer the
/// application passes is used only if it is one of these (a put after the last one, or after
/// m0_net_tm_fini, is ignored instead of touching freed memory).
std::mutex g_eps_mu;
std::unordered_set<const m0_net_end_point*> g_eps;

CEndPoint* live_locked(const m0_net_end_point* p) {
  return p && g_eps.count(p) ? static_cast<CEndPoint*>(p->nep_xprt_pvt) : nullptr;
}

CDomain* dom_of(m0_net_domain* d) {
  return d ? static_cast<CDomain*>(d->nd_xprt_private) : nullptr;
}
CTm* tm_of(m0_net_transfer_mc* t) { return t ? static_cast<CTm*>(t->ntm_xprt_private) : nullptr; }

m0_net_end_point* ep_get_locked(m0_net_transfer_mc* t, CTm& c, const EndPoint& ep) {
  auto it = c.eps.find(ep);
  CEndPoint* e;
  if (it != c.eps.end()) {
    e = it->second;
  } else {
    e = new CEndPoint;
    e->ep = ep;
    e->addr = ep.str();
    e->pub.nep_addr = e->addr.c_str();
    e->pub.nep_tm = t;
    e->pub.nep_xprt_pvt = e;
    c.eps[ep] = e;
    g_eps.insert(&e->pub);
    EndPoint tmp;  // the Tm's reference, one per object: its connection lives while it does
    c.tm->end_point_create(e->addr, tmp);
  }
  if (e->refs != UINT32_MAX) ++e->refs;  // saturated: the object stays until tm_fini
  return &e->pub;
}

void ep_put(m0_net_end_point* p) {
  CTm* c = nullptr;
  CEndPoint* e = nullptr;
  {
    std::lock_guard<std::mutex> g(g_eps_mu);
    e = live_locked(p);
    if (!e || e->refs == 0 || e->refs == UINT32_MAX) return;
    if (--e->refs != 0) return;
    c = tm_of(p->nep_tm);
    c->eps.erase(e->ep);
    g_eps.erase(p);
  }
  if (c->tm) c->tm->end_point_put(e->ep);  // the Tm's reference: its connection may go
  delete e;
}

enum m0_net_tm_state c_state(TmState s) {
  switch (s) {
    case TmState::kInitialized:
      return M0_NET_TM_INITIALIZED;
    case TmState::kStarted:
      return M0_NET_TM_STARTED;
    case TmState::kStopped:
      return M0_NET_TM_STOPPED;
    case TmState::kFailed:
      return M0_NET_TM_FAILED;
  }
  return M0_NET_TM_UNDEFINED;
}

std::optional<std::chrono::steady_clock::time_point> deadline_of(m0_time_t t) {
  if (t == M0_TIME_NEVER || t == 0) return std::nullopt;
  const m0_time_t now = m0_time_now();
  const auto left = std::chrono::nanoseconds(t > now ? t - now : 0);
  return std::chrono::steady_clock::now() + left;
}

const char* env_or(const char* v, const char* name, const char* def) {
  if (v) return v;
  const char* e = std::getenv(name);
  return e ? e : def;
}

}  // namespace

extern "C" {

const struct m0_net_xprt m0_net_roce_xprt = {"roce", nullptr};

m0_time_t m0_time_now(void) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<m0_time_t>(ts.tv_sec) * 1000000000ull + static_cast<m0_time_t>(ts.tv_nsec);
}

m0_time_t m0_time_from_now(uint64_t secs, long ns) {
  return m0_time_now() + secs * 1000000000ull + static_cast<m0_time_t>(ns);
}

int m0_bufvec_alloc(struct m0_bufvec* bv, uint32_t num_segs, m0_bcount_t seg_size) {
  if (!bv || num_segs == 0 || seg_size == 0) return -EINVAL;
  const std::size_t len = static_cast<std::size_t>(num_segs) * seg_size;
  const int fd = memfd_create("m0_bufvec", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -errno;
  if (ftruncate(fd, static_cast<off_t>(len)) != 0) {
    const int e = errno;
    close(fd);
    return -e;
  }
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return -e;
  }
  bv->ov_vec.v_nr = num_segs;
  bv->ov_vec.v_count = static_cast<m0_bcount_t*>(std::calloc(num_segs, sizeof(m0_bcount_t)));
  bv->ov_buf = static_cast<void**>(std::calloc(num_segs, sizeof(void*)));
  for (uint32_t i = 0; i < num_segs; ++i) {
    bv->ov_vec.v_count[i] = seg_size;
    bv->ov_buf[i] = static_cast<std::uint8_t*>(p) + i * seg_size;
  }
  std::lock_guard<std::mutex> g(g_regions_mu);
  g_regions[reinterpret_cast<std::uintptr_t>(p)] = Region{fd, len};
  return 0;
}

void m0_bufvec_free(struct m0_bufvec* bv) {
  if (!bv || !bv->ov_buf || bv->ov_vec.v_nr == 0) return;
  const auto base = reinterpret_cast<std::uintptr_t>(bv->ov_buf[0]);
  Region r{-1, 0};
  {
    std::lock_guard<std::mutex> g(g_regions_mu);
    auto it = g_regions.find(base);
    if (it != g_regions.end()) {
      r = it->second;
      g_regions.erase(it);
    }
  }
  if (r.fd >= 0) {
    munmap(bv->ov_buf[0], r.length);
    close(r.fd);
  }
  std::free(bv->ov_vec.v_count);
  std::free(bv->ov_buf);
  bv->ov_vec.v_count = nullptr;
  bv->ov_buf = nullptr;
  bv->ov_vec.v_nr = 0;
}

int m0_net_roce_domain_init(struct m0_net_domain* d, const struct m0_net_roce_options* o,
                            void* context) {
  if (!d || d->nd_xprt_private) return -EINVAL;
  auto c = std::make_unique<CDomain>();
  const m0_net_roce_options none{};
  if (!o) o = &none;
  client::Context* ctx = static_cast<client::Context*>(context);
  if (!ctx) {
    c->owned = client::Context::attach(env_or(o->socket, "ROCE_SOCKET", "/run/roce/roced.sock"),
                                       env_or(o->port, "ROCE_PORT", ""));
    if (!c->owned) return -(errno ? errno : ECONNREFUSED);
    ctx = c->owned.get();
  }
  DomainOptions opts;
  opts.pid = o->pid ? o->pid
                    : static_cast<std::uint32_t>(std::atoi(env_or(nullptr, "ROCE_LNET_PID", "0")));
  opts.oob_host = env_or(o->oob_host, "ROCE_LNET_OOB_HOST", "");
  opts.oob_port_base =
      o->oob_port_base
          ? o->oob_port_base
          : static_cast<std::uint16_t>(std::atoi(env_or(nullptr, "ROCE_LNET_OOB_BASE", "16384")));
  c->dom = std::make_unique<Domain>(*ctx, opts);
  d->nd_xprt = &m0_net_roce_xprt;
  d->nd_xprt_private = c.release();
  return 0;
}

int m0_net_domain_init(struct m0_net_domain* d, const struct m0_net_xprt* xprt) {
  if (xprt && xprt != &m0_net_roce_xprt) return -EINVAL;
  return m0_net_roce_domain_init(d, nullptr, nullptr);
}

void m0_net_domain_fini(struct m0_net_domain* d) {
  CDomain* c = dom_of(d);
  if (!c) return;
  for (auto& [base, b] : c->memfds) c->dom->ctx().free_buffer(b);
  c->dom.reset();
  delete c;
  d->nd_xprt_private = nullptr;
  d->nd_xprt = nullptr;
}

m0_bcount_t m0_net_domain_get_max_buffer_segment_size(struct m0_net_domain*) {
  return UINT32_MAX;  // a segment is one SGE (and one descriptor entry): 32-bit lengths
}
int32_t m0_net_domain_get_max_buffer_segments(struct m0_net_domain*) { return 4; }
m0_bcount_t m0_net_domain_get_max_buffer_size(struct m0_net_domain* d) {
  return m0_net_domain_get_max_buffer_segment_size(d) *
         static_cast<m0_bcount_t>(m0_net_domain_get_max_buffer_segments(d));
}
m0_bcount_t m0_net_domain_get_max_buffer_desc_size(struct m0_net_domain* d) {
  // BulkDesc: a 16-byte head, the owner's address (at most 255 bytes), 16 bytes a segment.
  return 16 + 255 + 16 * static_cast<m0_bcount_t>(m0_net_domain_get_max_buffer_segments(d));
}

int m0_net_tm_init(struct m0_net_transfer_mc* t, struct m0_net_domain* d) {
  CDomain* cd = dom_of(d);
  if (!t || !cd || t->ntm_xprt_private) return -EINVAL;
  auto* c = new CTm;
  c->tm = std::make_unique<Tm>(*cd->dom);
  t->ntm_dom = d;
  t->ntm_ep = nullptr;
  t->ntm_state = M0_NET_TM_INITIALIZED;
  t->ntm_xprt_private = c;
  c->tm->on_event([t, c](const TmEvent& ev) {
    m0_net_tm_event e{};
    e.nte_type = ev.type == TmEvent::Type::kError ? M0_NET_TEV_ERROR : M0_NET_TEV_STATE_CHANGE;
    e.nte_tm = t;
    e.nte_time = m0_time_now();
    e.nte_status = ev.status;
    e.nte_next_state = c_state(ev.next_state);
    if (ev.type == TmEvent::Type::kStateChange) {
      t->ntm_state = e.nte_next_state;
      if (ev.next_state == TmState::kStarted && !t->ntm_ep) {
        std::lock_guard<std::mutex> g(g_eps_mu);
        t->ntm_ep = ep_get_locked(t, *c, c->tm->ep());
      }
      e.nte_ep = t->ntm_ep;
    } else if (ev.ep) {
      std::lock_guard<std::mutex> g(g_eps_mu);
      e.nte_ep = ep_get_locked(t, *c, *ev.ep);
    }
    if (t->ntm_callbacks && t->ntm_callbacks->ntc_event_cb) t->ntm_callbacks->ntc_event_cb(&e);
    if (ev.type == TmEvent::Type::kError && e.nte_ep) ep_put(e.nte_ep);
  });
  return 0;
}

void m0_net_tm_fini(struct m0_net_transfer_mc* t) {
  CTm* c = tm_of(t);
  if (!c) return;
  if (t->ntm_state == M0_NET_TM_STARTED) c->tm->stop();
  if (t->ntm_ep) {
    ep_put(t->ntm_ep);
    t->ntm_ep = nullptr;
  }
  c->tm.reset();
  {
    std::lock_guard<std::mutex> g(g_eps_mu);
    for (auto& [ep, e] : c->eps) {  // references the application did not put
      g_eps.erase(&e->pub);
      delete e;
    }
    c->eps.clear();
  }
  delete c;
  t->ntm_xprt_private = nullptr;
  t->ntm_state = M0_NET_TM_UNDEFINED;
}

int m0_net_tm_start(struct m0_net_transfer_mc* t, const char* addr) {
  CTm* c = tm_of(t);
  if (!c || !addr || t->ntm_state != M0_NET_TM_INITIALIZED) return -EINVAL;
  t->ntm_state = M0_NET_TM_STARTING;
  const int rc = c->tm->start(addr);
  if (rc != 0) t->ntm_state = M0_NET_TM_FAILED;  // as Motr's: no retry, fini it
  return -rc;
}

int m0_net_tm_stop(struct m0_net_transfer_mc* t, bool) {
  CTm* c = tm_of(t);
  if (!c) return -EINVAL;
  const m0_net_tm_state old = t->ntm_state;
  if (old == M0_NET_TM_INITIALIZED) {  // never started: nothing to cancel, the event all the same
    t->ntm_state = M0_NET_TM_STOPPING;
    m0_net_tm_event e{};
    e.nte_type = M0_NET_TEV_STATE_CHANGE;
    e.nte_tm = t;
    e.nte_time = m0_time_now();
    e.nte_next_state = M0_NET_TM_STOPPED;
    t->ntm_state = M0_NET_TM_STOPPED;
    if (t->ntm_callbacks && t->ntm_callbacks->ntc_event_cb) t->ntm_callbacks->ntc_event_cb(&e);
    return 0;
  }
  if (old != M0_NET_TM_STARTED && old != M0_NET_TM_FAILED) return -EINVAL;
  t->ntm_state = M0_NET_TM_STOPPING;
  const int rc = c->tm->stop();
  if (rc != 0) t->ntm_state = old;
  return -rc;
}

int m0_net_tm_stats_get(struct m0_net_transfer_mc* t, enum m0_net_queue_type qtype,
                        struct m0_net_qstats* qs, bool reset) {
  CTm* c = tm_of(t);
  if (!c || qtype > M0_NET_QT_NR) return -EINVAL;
  const int n = qtype == M0_NET_QT_NR ? M0_NET_QT_NR : 1;
  QueueStats s[M0_NET_QT_NR];
  if (const int rc = c->tm->qstats(static_cast<QueueType>(qtype), s, reset)) return -rc;
  for (int i = 0; qs && i < n; ++i) {
    qs[i].nqs_num_adds = s[i].adds;
    qs[i].nqs_num_dels = s[i].dels;
    qs[i].nqs_num_s_events = s[i].successes;
    qs[i].nqs_num_f_events = s[i].failures;
    qs[i].nqs_time_in_queue = s[i].time_in_queue_ns;
    qs[i].nqs_total_bytes = s[i].bytes;
    qs[i].nqs_max_bytes = s[i].max_bytes;
  }
  return 0;
}

int m0_net_buffer_event_deliver_synchronously(struct m0_net_transfer_mc* t) {
  CTm* c = tm_of(t);
  return c ? -c->tm->deliver_synchronously() : -EINVAL;
}
bool m0_net_buffer_event_pending(struct m0_net_transfer_mc* t) {
  CTm* c = tm_of(t);
  return c && c->tm->pending();
}
void m0_net_buffer_event_deliver_all(struct m0_net_transfer_mc* t) {
  if (CTm* c = tm_of(t)) c->tm->deliver_all();
}

int m0_net_end_point_create(struct m0_net_end_point** epp, struct m0_net_transfer_mc* t,
                            const char* addr) {
  CTm* c = tm_of(t);
  if (!epp || !c || !addr) return -EINVAL;
  const auto ep = EndPoint::parse(addr);
  if (!ep || !ep->tmid) return -EINVAL;
  if (c->tm->state() != TmState::kStarted) return -ENOTCONN;
  std::lock_guard<std::mutex> g(g_eps_mu);
  *epp = ep_get_locked(t, *c, *ep);
  return 0;
}

void m0_net_end_point_get(struct m0_net_end_point* p) {
  std::lock_guard<std::mutex> g(g_eps_mu);
  CEndPoint* e = live_locked(p);
  if (e && e->refs != 0 && e->refs != UINT32_MAX) ++e->refs;
}

void m0_net_end_point_put(struct m0_net_end_point* p) { ep_put(p); }

int m0_net_buffer_register(struct m0_net_buffer* b, struct m0_net_domain* d) {
  CDomain* cd = dom_of(d);
  if (!b || !cd || (b->nb_flags & M0_NET_BUF_REGISTERED) || b->nb_buffer.ov_vec.v_nr == 0 ||
      b->nb_buffer.ov_vec.v_nr > 4 || !b->nb_buffer.ov_buf)
    return -EINVAL;
  auto nb = std::make_unique<NetBuffer>();
  for (uint32_t i = 0; i < b->nb_buffer.ov_vec.v_nr; ++i) {
    void* a = b->nb_buffer.ov_buf[i];
    nb->segs.push_back(Segment{a, b->nb_buffer.ov_vec.v_count[i]});
    // Memory of m0_bufvec_alloc: its memfd is registered with the Context once (attached,
    // roced maps it); other memory must already be the Context's.
    std::lock_guard<std::mutex> g(g_regions_mu);
    auto it = g_regions.upper_bound(reinterpret_cast<std::uintptr_t>(a));
    if (it == g_regions.begin()) continue;
    --it;
    if (reinterpret_cast<std::uintptr_t>(a) >= it->first + it->second.length) continue;
    std::lock_guard<std::mutex> g2(cd->mu);
    if (!cd->memfds.count(it->first)) {
      client::Buffer* reg = cd->dom->ctx().register_memfd(
          it->second.fd, reinterpret_cast<void*>(it->first), it->second.length);
      if (reg) cd->memfds[it->first] = reg;  // (a backend that takes any mapping: none needed)
    }
  }
  if (const int rc = cd->dom->register_buffer(*nb)) return -rc;
  b->nb_dom = d;
  b->nb_flags = M0_NET_BUF_REGISTERED;
  b->nb_timeout = M0_TIME_NEVER;
  nb->app = b;
  b->nb_xprt_private = nb.release();
  return 0;
}

void m0_net_buffer_deregister(struct m0_net_buffer* b, struct m0_net_domain* d) {
  CDomain* cd = dom_of(d);
  if (!b || !cd || !b->nb_xprt_private) return;
  auto* nb = static_cast<NetBuffer*>(b->nb_xprt_private);
  if (nb->flags & kBufQueued) return;  // in use: Motr's precondition
  cd->dom->deregister_buffer(*nb);
  delete nb;
  b->nb_xprt_private = nullptr;
  b->nb_flags = 0;
}

int m0_net_buffer_add(struct m0_net_buffer* b, struct m0_net_transfer_mc* t) {
  CTm* c = tm_of(t);
  if (!b || !c || !b->nb_xprt_private || b->nb_qtype >= M0_NET_QT_NR || !b->nb_callbacks ||
      !b->nb_callbacks->nbc_cb[b->nb_qtype])
    return -EINVAL;
  if (b->nb_offset != 0) return -EINVAL;
  auto* nb = static_cast<NetBuffer*>(b->nb_xprt_private);
  if (b->nb_timeout != M0_TIME_NEVER && b->nb_timeout != 0 && b->nb_timeout <= m0_time_now())
    return -ETIME;
  nb->deadline = deadline_of(b->nb_timeout);
  nb->length = b->nb_length;
  nb->min_receive_size = b->nb_min_receive_size;
  nb->max_receive_msgs = b->nb_max_receive_msgs ? b->nb_max_receive_msgs : 1;
  nb->ep.reset();
  if (b->nb_ep) {
    std::lock_guard<std::mutex> g(g_eps_mu);
    const CEndPoint* e = live_locked(b->nb_ep);
    if (!e || e->refs == 0 || b->nb_ep->nep_tm != t) return -EINVAL;  // put, or another Tm's
    nb->ep = e->ep;
  }
  if (b->nb_qtype == M0_NET_QT_ACTIVE_BULK_RECV || b->nb_qtype == M0_NET_QT_ACTIVE_BULK_SEND) {
    if (!b->nb_desc.nbd_data || b->nb_desc.nbd_len == 0) return -EINVAL;
    nb->desc.assign(b->nb_desc.nbd_data, b->nb_desc.nbd_data + b->nb_desc.nbd_len);
  }
  // A send holds a reference on its end point until its event has been delivered (Motr's
  // m0_net_buffer_add gets nb_ep, the event post puts it): the application may put its own
  // right after the add, and nb_ep stays valid in the callback.
  m0_net_end_point* held = b->nb_qtype == M0_NET_QT_MSG_SEND ? b->nb_ep : nullptr;
  nb->cb = [b, t, held](const BufferEvent& ev) {
    auto* n = static_cast<NetBuffer*>(b->nb_xprt_private);
    m0_net_buffer_event e{};
    e.nbe_buffer = b;
    e.nbe_time = m0_time_now();
    e.nbe_status = ev.status;
    e.nbe_length = ev.length;
    e.nbe_offset = ev.offset;
    CTm* ct = tm_of(t);
    if (ev.ep && ev.queue == QueueType::kMsgRecv && ev.status == 0) {
      std::lock_guard<std::mutex> g(g_eps_mu);
      e.nbe_ep = ep_get_locked(t, *ct, *ev.ep);
    }
    b->nb_flags = M0_NET_BUF_REGISTERED | (n->flags & kBufQueued ? M0_NET_BUF_QUEUED : 0);
    if (ev.queue == QueueType::kMsgRecv && ev.status == 0) ++b->nb_msgs_received;
    if (!(n->flags & kBufQueued)) b->nb_timeout = M0_TIME_NEVER;
    const auto q = static_cast<int>(ev.queue);
    if (b->nb_callbacks && b->nb_callbacks->nbc_cb[q]) b->nb_callbacks->nbc_cb[q](&e);
    if (e.nbe_ep) ep_put(e.nbe_ep);  // put after the callback, as Motr's event post does
    if (held && !ev.keep_queued) ep_put(held);
  };
  b->nb_tm = t;
  b->nb_msgs_received = 0;
  b->nb_add_time = m0_time_now();
  if (held) m0_net_end_point_get(held);
  // Set before the add: the event may be delivered (and the flag cleared) before it returns.
  b->nb_flags = M0_NET_BUF_REGISTERED | M0_NET_BUF_QUEUED;
  if (const int rc = c->tm->add(*nb, static_cast<QueueType>(b->nb_qtype))) {
    b->nb_flags = M0_NET_BUF_REGISTERED;
    nb->cb = nullptr;
    if (held) ep_put(held);
    return -rc;
  }
  if (b->nb_qtype == M0_NET_QT_PASSIVE_BULK_RECV || b->nb_qtype == M0_NET_QT_PASSIVE_BULK_SEND) {
    std::free(b->nb_desc.nbd_data);
    b->nb_desc.nbd_len = static_cast<uint32_t>(nb->desc.size());
    b->nb_desc.nbd_data = static_cast<uint8_t*>(std::malloc(nb->desc.size()));
    std::memcpy(b->nb_desc.nbd_data, nb->desc.data(), nb->desc.size());
  }
  return 0;
}

bool m0_net_buffer_del(struct m0_net_buffer* b, struct m0_net_transfer_mc* t) {
  CTm* c = tm_of(t);
  if (!b || !c || !b->nb_xprt_private) return false;
  return c->tm->del(*static_cast<NetBuffer*>(b->nb_xprt_private)) == 0;
}

int m0_net_desc_copy(const struct m0_net_buf_desc* from, struct m0_net_buf_desc* to) {
  if (!from || !to) return -EINVAL;
  to->nbd_len = from->nbd_len;
  to->nbd_data = static_cast<uint8_t*>(std::malloc(from->nbd_len ? from->nbd_len : 1));
  if (!to->nbd_data) return -ENOMEM;
  if (from->nbd_len) std::memcpy(to->nbd_data, from->nbd_data, from->nbd_len);
  return 0;
}

void m0_net_desc_free(struct m0_net_buf_desc* desc) {
  if (!desc) return;
  std::free(desc->nbd_data);
  desc->nbd_data = nullptr;
  desc->nbd_len = 0;
}

}  // extern "C"
