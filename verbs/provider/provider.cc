/// @file
/// The libibverbs provider: verbs_device_ops (alloc_context) and verbs_context_ops on a libroce
/// Context, and the bridge (bridge.h) the other parts of verbs/ use. libibverbs calls these
/// through the ops table verbs_set_ops installs; ibv_post_send, ibv_post_recv, ibv_poll_cq and
/// ibv_req_notify_cq are inline calls through ibv_context::ops. Errors are rdma-core's: verbs
/// that create return null with errno set, the others an errno value.
#include "verbs/provider/provider.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "verbs/memory/adopt.h"
#include "verbs/provider/ex_api.h"

namespace roce::verbs_compat {
extern const rdma::verbs_context_ops kOps;

namespace {
/// Address handles a process may hold (rxe's max_ah), and how many it holds.
constexpr std::uint32_t kMaxAh = 32767;
std::atomic<std::uint32_t> g_ahs{0};
}  // namespace

namespace {

Backend* be_of(ibv_context* c) { return rctx(c)->be; }

template <class T>
T* fail_null(int err) {
  errno = err;
  return nullptr;
}

bool attached(ibv_context* c) { return be_of(c)->env == nullptr; }

// ---- device and context ----

void free_context(ibv_context* c);

verbs_context* alloc_context(ibv_device* device, int cmd_fd, void* /*private_data*/) {
  auto* d = reinterpret_cast<Device*>(device);
  // No kernel device behind ours, so libibverbs passes no command fd; the context gets
  // /dev/null's, a character device as the kernel's uverbs node (programs dup it to import
  // the context elsewhere: ibv_import_device then says EOPNOTSUPP, as for rxe; a kernel
  // command on it fails with ENOTTY). libibverbs closes it with the context.
  if (cmd_fd < 0) cmd_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  Backend* be = open_backend(d);
  if (be == nullptr) {
    if (cmd_fd >= 0) ::close(cmd_fd);
    return nullptr;
  }
  auto* rc = static_cast<RContext*>(_verbs_init_and_alloc_context(
      device, cmd_fd, sizeof(RContext), reinterpret_cast<verbs_context*>(offsetof(RContext, vctx)),
      0 /* RDMA_DRIVER_UNKNOWN */));
  if (rc == nullptr) {
    close_backend(be);
    return nullptr;
  }
  rc->be = be;
  rc->async = new EventPipe(sizeof(rdma::async_event_desc));
  if (const int e = rc->async->open()) {
    delete rc->async;
    verbs_uninit_context(&rc->vctx);
    std::free(rc);
    close_backend(be);
    return fail_null<verbs_context>(e);
  }
  rc->vctx.context.async_fd = rc->async->read_fd();
  rc->vctx.context.num_comp_vectors = 1;
  verbs_set_ops(&rc->vctx, &kOps);
  {
    std::lock_guard<std::mutex> g(be->reg);
    be->contexts.push_back(rc);
  }
  return &rc->vctx;
}

void free_context(ibv_context* c) {
  RContext* rc = rctx(c);
  Backend* be = rc->be;
  if (!be->inherited()) {  // a forked child's copy of the registry is left as it is
    std::lock_guard<std::mutex> g(be->reg);
    std::erase(be->contexts, rc);
  }
  delete rc->async;
  verbs_uninit_context(&rc->vctx);  // closes async_fd, puts the device
  std::free(rc);
  close_backend(be);
}

void uninit_device(rdma::verbs_device*) {}  // never: our devices keep a reference of their own

/// The limits a program is told (ibv_query_device) and held to: the attachment's (roced's
/// quotas), else the in-process engine's.
client::DeviceAttr limits(Backend* be) {
  client::DeviceAttr l;
  {
    std::lock_guard<std::mutex> g(be->mu);
    l = be->ctx->query_device();
  }
  const auto def = [](std::uint32_t& v, std::uint32_t d) {
    if (v == 0) v = d;
  };
  def(l.max_qp, 4096);
  def(l.max_qp_wr, 16384);
  def(l.max_sge, 32);
  if (be->env == nullptr) l.max_sge = 32;  // beyond the attachment's 4, the provider copies
  def(l.max_cq, 16384);
  def(l.max_cqe, 1u << 20);
  def(l.max_mr, 1u << 20);
  def(l.max_pd, 1u << 16);
  def(l.max_srq, 1u << 16);
  def(l.max_srq_wr, 16384);
  def(l.max_srq_sge, 32);
  if (l.max_mr_size == 0) l.max_mr_size = 1ull << 40;
  return l;
}

int query_device_ex(ibv_context* c, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, std::size_t attr_size) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  std::memset(attr, 0, std::min(attr_size, sizeof(*attr)));
  Backend* be = be_of(c);
  const client::DeviceAttr lim = limits(be);
  ibv_device_attr& a = attr->orig_attr;
  // The project's version (CMake's) and the mode; hw_ver and vendor_part_id stay 0, as rxe's.
  std::snprintf(a.fw_ver, sizeof a.fw_ver, "roce %s (%s)", ROCE_VERSION,
                attached(c) ? "attached" : "in-process");
  a.node_guid = htobe64(node_guid(be->dev));
  a.sys_image_guid = a.node_guid;
  a.max_mr_size = lim.max_mr_size;
  a.page_size_cap = 0xfffff000;
  a.vendor_id = 0xffffff;  // no IEEE OUI of our own (rxe says the same)
  a.max_qp = static_cast<int>(lim.max_qp);
  a.max_qp_wr = static_cast<int>(lim.max_qp_wr);
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID |
                       IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_CHANGE_PHY_PORT;
  a.max_sge = static_cast<int>(lim.max_sge);
  // Attached, a receive queue entry and a READ carry 4 SGEs at most (only sends beyond 4 are
  // copied): what a program may ask of both queues is 4 (rdma-core tests/test_qp.py creates
  // QPs with up to max_sge / 2 receive SGEs and got EINVAL). Sends take more all the same.
  if (attached(c)) a.max_sge = static_cast<int>(std::min<std::uint32_t>(lim.max_sge, 4));
  a.max_sge_rd = a.max_sge;
  a.max_cq = static_cast<int>(lim.max_cq);
  a.max_cqe = static_cast<int>(lim.max_cqe);
  a.max_mr = static_cast<int>(lim.max_mr);
  a.max_pd = static_cast<int>(lim.max_pd);
  // What the engine takes at RTR/RTS (dataplane/engine/verbs.cc: 16 READs/atomics in flight
  // each way); perftest sizes its -o from these.
  a.max_qp_rd_atom = 16;
  a.max_qp_init_rd_atom = 16;
  a.max_res_rd_atom = a.max_qp * 16;
  a.atomic_cap = IBV_ATOMIC_HCA;
  a.max_srq = static_cast<int>(lim.max_srq);
  a.max_srq_wr = static_cast<int>(lim.max_srq_wr);
  a.max_srq_sge = static_cast<std::uint16_t>(
      attached(c) ? std::min<std::uint32_t>(lim.max_srq_sge, 4) : lim.max_srq_sge);
  // Address handles are the provider's own objects (an address vector each): rxe's limit,
  // enforced per process (create_ah: ENOMEM beyond it).
  a.max_ah = static_cast<int>(kMaxAh);
  a.max_pkeys = 1;
  a.local_ca_ack_delay = 15;
  a.phys_port_cnt = 1;
  // The extended count, as the kernel fills it (rdma-core tests/test_device.py
  // test_phys_port_cnt_ex: equal to phys_port_cnt below 256 ports), when the caller's struct
  // has the field.
  if (attr_size >= offsetof(ibv_device_attr_ex, phys_port_cnt_ex) + sizeof(attr->phys_port_cnt_ex))
    attr->phys_port_cnt_ex = a.phys_port_cnt;
  return 0;
}

int query_port_op(ibv_context* c, std::uint8_t port, ibv_port_attr* attr) {
  if (port != 1) return EINVAL;
  return query_port(be_of(c), *attr);
}

// ---- PD, MR ----

std::atomic<std::uint32_t> g_handles{1};

ibv_pd* alloc_pd(ibv_context* c) {
  Backend* be = be_of(c);
  client::Pd* p;
  {
    std::lock_guard<std::mutex> g(be->mu);
    p = be->ctx->alloc_pd();
  }
  if (p == nullptr) return nullptr;
  auto* r = new RPd;
  r->pd.context = c;
  r->pd.handle = g_handles++;
  r->p = p;
  return &r->pd;
}

int dealloc_pd(ibv_pd* pd) {
  auto* r = reinterpret_cast<RPd*>(pd);
  Backend* be = be_of(pd->context);
  std::lock_guard<std::mutex> g(be->mu);
  if (const int rc = be->ctx->dealloc_pd(r->p)) return rc;
  delete r;
  return 0;
}

constexpr int kAccessKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

/// The engine's access flags of `access`, or -errno.
int check_access(int access) {
  access &= ~IBV_ACCESS_OPTIONAL_RANGE;  // relaxed ordering and the like: hints
  if (access &
      (IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB))
    return -EOPNOTSUPP;
  if (access & ~kAccessKnown) return -EINVAL;
  // IBA 10.6.3.1: remote write or atomic access needs local write.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE))
    return -EINVAL;
  return access;
}

/// Gives back what register_range took for a range (the backend's lock held).
void free_range(Backend* be, client::Buffer* adopted) {
  if (adopted == nullptr) return;
  if (be->env == nullptr)
    release(*be->ctx, adopted);
  else
    be->ctx->free_buffer(adopted);
}

/// Whether libibverbs' fork support is on (ibv_fork_init or RDMAV_FORK_SAFE): adopted pages
/// are then MADV_DONTFORK, as rdma-core advises registered ranges. Asked once: each
/// ibv_is_fork_initialized() is a netlink query.
bool fork_protected() {
  static const bool on = ibv_is_fork_initialized() == IBV_FORK_ENABLED;
  return on;
}

/// Registers [addr, addr + length) at `iova` into `m` (and `adopted`); 0 or an errno value.
int register_range(ibv_context* c, client::Pd* pd, void* addr, std::size_t length,
                   std::uint64_t iova, int access, client::Mr*& m, client::Buffer*& adopted) {
  if (addr == nullptr || length == 0) return EINVAL;
  const int acc = check_access(access);
  if (acc < 0) return -acc;
  const bool att = attached(c);
  const bool dontfork = att && fork_protected();  // outside the lock: a netlink round trip
  Backend* be = be_of(c);
  std::lock_guard<std::mutex> g(be->mu);
  adopted = nullptr;
  if (att) {
    // Attached: the range's pages become pages of a memfd roced maps too (verbs/memory).
    AdoptOptions o;
    o.writable =
        (access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) !=
        0;
    o.dontfork = dontfork;
    int err = 0;
    adopted = adopt(*be->ctx, addr, length, &err, o);
    if (adopted == nullptr && err == EOPNOTSUPP) {
      // A shared mapping that is not adopt()'s: roced already shares it when it is a Buffer
      // of this Context (libroce's alloc_buffer, register_memfd); else EOPNOTSUPP stays.
      errno = 0;
      m = be->ctx->reg_mr_iova(pd, addr, length, iova, static_cast<std::uint32_t>(acc));
      return m != nullptr ? 0 : EOPNOTSUPP;
    }
    if (adopted == nullptr) return err != 0 ? err : ENOMEM;
  } else {
    // In-process the engine reaches any memory of the process: adopt the range as it is.
    adopted = be->ctx->register_memfd(-1, addr, length);
    if (adopted == nullptr) return errno != 0 ? errno : ENOMEM;
  }
  errno = 0;
  m = be->ctx->reg_mr_iova(pd, addr, length, iova, static_cast<std::uint32_t>(acc));
  if (m == nullptr) {
    const int e = errno != 0 ? errno : EINVAL;
    free_range(be, adopted);
    adopted = nullptr;
    return e;
  }
  return 0;
}

void release_range(Backend* be, client::Mr* m, client::Buffer* adopted) {
  if (m != nullptr) be->ctx->dereg_mr(m);
  free_range(be, adopted);
}

ibv_mr* reg_mr(ibv_pd* pd, void* addr, std::size_t length, std::uint64_t iova, int access) {
  auto* p = reinterpret_cast<RPd*>(pd);
  client::Mr* m = nullptr;
  client::Buffer* adopted = nullptr;
  if (const int rc = register_range(pd->context, p->p, addr, length, iova, access, m, adopted))
    return fail_null<ibv_mr>(rc);
  auto* r = new RMr;
  r->m = m;
  r->adopted = adopted;
  r->vmr.mr_type = rdma::IBV_MR_TYPE_MR;
  r->vmr.access = access;
  ibv_mr& mr = r->vmr.ibv_mr;
  mr.context = pd->context;
  mr.pd = pd;
  mr.addr = addr;
  mr.length = length;
  mr.handle = g_handles++;
  mr.lkey = m->lkey;
  mr.rkey = m->rkey;
  return &mr;
}

int dereg_mr(rdma::verbs_mr* vmr) {
  auto* r = reinterpret_cast<RMr*>(vmr);
  Backend* be = be_of(vmr->ibv_mr.context);
  std::lock_guard<std::mutex> g(be->mu);
  if (const int rc = be->ctx->dereg_mr(r->m)) return rc;
  free_range(be, r->adopted);
  delete r;
  return 0;
}

/// ibv_rereg_mr in place, keeping the keys as the kernel's rereg does for what rxe and mlx5
/// change in place (peers already hold the rkey; rdma-core's tests/test_mr.py
/// test_mr_rereg_access / _pd / _addr exchange keys once and rereg after), through
/// client::Context::rereg_mr. Attached, the range is adopted again with the access it now
/// needs (a read-only mapping given write access: EFAULT, as reg_mr) and the old adoption
/// released after. EOPNOTSUPP from a Context without it (a roced of attach protocol 7): the
/// caller registers anew, and the keys change.
int rereg_in_place(RMr* r, ibv_pd* npd, void* naddr, std::size_t nlen, int nacc) {
  ibv_mr& mr = r->vmr.ibv_mr;
  const int acc = check_access(nacc);
  if (acc < 0) return -acc;
  const bool att = attached(mr.context);
  const bool dontfork = att && fork_protected();  // outside the lock: a netlink round trip
  Backend* be = be_of(mr.context);
  std::lock_guard<std::mutex> g(be->mu);
  client::Buffer* adopted = r->adopted;
  bool fresh = false;  // `adopted` is a new reference, the old one goes on success
  if (att) {
    AdoptOptions o;
    o.writable =
        (nacc & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0;
    o.dontfork = dontfork;
    int err = 0;
    adopted = adopt(*be->ctx, naddr, nlen, &err, o);
    // EOPNOTSUPP: a shared mapping, registered as it is when it lies in a Buffer of the
    // Context (register_range); else Context::rereg_mr finds no Buffer.
    if (adopted == nullptr && err != EOPNOTSUPP) return err != 0 ? err : ENOMEM;
    fresh = true;
  } else if (naddr != mr.addr || nlen != mr.length) {
    errno = 0;
    adopted = be->ctx->register_memfd(-1, naddr, nlen);
    if (adopted == nullptr) return errno != 0 ? errno : ENOMEM;
    fresh = true;
  }
  int rc =
      be->ctx->rereg_mr(r->m, reinterpret_cast<RPd*>(npd)->p, naddr, nlen,
                        reinterpret_cast<std::uint64_t>(naddr), static_cast<std::uint32_t>(acc));
  if (rc == EINVAL && att && adopted == nullptr) rc = EOPNOTSUPP;  // not a Buffer of ours
  if (rc != 0) {
    if (fresh) free_range(be, adopted);
    return rc;
  }
  if (fresh) {
    free_range(be, r->adopted);
    r->adopted = adopted;
  }
  return 0;
}

int rereg_mr(rdma::verbs_mr* vmr, int flags, ibv_pd* pd, void* addr, std::size_t length,
             int access) {
  auto* r = reinterpret_cast<RMr*>(vmr);
  ibv_mr& mr = vmr->ibv_mr;
  ibv_pd* npd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr.pd;
  void* naddr = mr.addr;
  std::size_t nlen = mr.length;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    naddr = addr;
    nlen = length;
  }
  const int nacc = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : vmr->access;
  if (npd == nullptr || npd->context != mr.context) return EINVAL;
  if (const int rc = rereg_in_place(r, npd, naddr, nlen, nacc); rc != EOPNOTSUPP) {
    if (rc == 0) vmr->access = nacc;
    return rc;
  }
  client::Mr* m = nullptr;
  client::Buffer* adopted = nullptr;
  if (const int rc = register_range(mr.context, reinterpret_cast<RPd*>(npd)->p, naddr, nlen,
                                    reinterpret_cast<std::uint64_t>(naddr), nacc, m, adopted))
    return rc;
  Backend* be = be_of(mr.context);
  {
    std::lock_guard<std::mutex> g(be->mu);
    release_range(be, r->m, r->adopted);
  }
  r->m = m;
  r->adopted = adopted;
  vmr->access = nacc;
  mr.lkey = m->lkey;
  mr.rkey = m->rkey;
  return 0;
}

// ---- CQ ----

RCq* new_cq(ibv_context* c, int cqe, ibv_comp_channel* channel, int comp_vector) {
  if (cqe < 1 || comp_vector < 0 || comp_vector >= c->num_comp_vectors ||
      static_cast<std::uint32_t>(cqe) > limits(be_of(c)).max_cqe)
    return fail_null<RCq>(EINVAL);
  EventPipe* events = nullptr;
  if (channel != nullptr) {
    events = channel_pipe(channel);
    if (events == nullptr || channel->context != c) return fail_null<RCq>(EINVAL);
  }
  Backend* be = be_of(c);
  client::Cq* q;
  {
    std::lock_guard<std::mutex> g(be->mu);
    q = be->ctx->create_cq(static_cast<std::uint32_t>(cqe));
  }
  if (q == nullptr) return nullptr;
  auto* r = new RCq;
  r->c = q;
  r->be = be;
  r->channel = events;
  ibv_cq& cq = r->vcq.cq;
  cq.context = c;
  cq.channel = channel;
  cq.handle = g_handles++;
  cq.cqe = static_cast<int>(std::max<std::uint32_t>(q->depth, static_cast<std::uint32_t>(cqe)));
  std::lock_guard<std::mutex> g(be->reg);
  be->cqs.push_back(r);
  return r;
}

ibv_cq* create_cq(ibv_context* c, int cqe, ibv_comp_channel* channel, int comp_vector) {
  RCq* r = new_cq(c, cqe, channel, comp_vector);
  return r != nullptr ? &r->vcq.cq : nullptr;
}

ibv_cq_ex* create_cq_ex(ibv_context* c, ibv_cq_init_attr_ex* a) {
  if (const int rc = check_cq_attr(*a)) return fail_null<ibv_cq_ex>(rc);
  RCq* r = new_cq(c, static_cast<int>(a->cqe), a->channel, static_cast<int>(a->comp_vector));
  if (r == nullptr) return nullptr;
  r->ex = true;
  init_cq_ex(&r->vcq.cq_ex, a->wc_flags);
  return &r->vcq.cq_ex;
}

int destroy_cq(ibv_cq* cq) {
  RCq* r = rcq(cq);
  Backend* be = r->be;
  // Out of the registry first: the progress thread looks at the registered CQs (under `reg`)
  // and polls them (under `mu`); a CQ destroyed while still registered was polled after its
  // free.
  {
    std::lock_guard<std::mutex> g(be->reg);
    std::erase(be->cqs, r);
  }
  int rc;
  {
    std::lock_guard<std::mutex> g(be->mu);
    rc = be->ctx->destroy_cq(r->c);
  }
  if (rc != 0) {  // still in use (EBUSY): it stays, and is watched again
    std::lock_guard<std::mutex> g(be->reg);
    be->cqs.push_back(r);
    return rc;
  }
  // No event names it from here on (out of the registry). The unread ones leave the channel and
  // the async fd, as the kernel drops them; those the program read must be acknowledged first
  // (ibv_cmd_destroy_cq waits for comp_events_completed and async_events_completed).
  const auto element = reinterpret_cast<std::uint64_t>(cq);
  EventPipe* async = rctx(cq->context)->async;
  const bool exact = (r->channel == nullptr || r->channel->exact()) && async->exact();
  std::uint32_t comp_read, async_read;
  {
    std::lock_guard<std::mutex> g(be->reg);
    comp_read = r->comp_written - (r->channel != nullptr ? r->channel->purge(element) : 0);
    async_read = r->async_written - async->purge(element);
  }
  pthread_mutex_lock(&cq->mutex);
  while (exact &&
         (cq->comp_events_completed != comp_read || cq->async_events_completed != async_read))
    pthread_cond_wait(&cq->cond, &cq->mutex);
  pthread_mutex_unlock(&cq->mutex);
  if (r->ex) fini_cq_ex(&r->vcq.cq_ex);
  delete r;
  return 0;
}

int poll_cq_op(ibv_cq* cq, int n, ibv_wc* wc) {
  // What an ibv_cq_ex iterator took and has not handed out comes first (the CQ's order).
  const int k = rcq(cq)->ex ? take_pending(cq, n, wc) : 0;
  if (k == n) return k;
  const int m = poll_cq(cq, n - k, wc + k);
  return m < 0 ? (k > 0 ? k : m) : k + m;
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
  rcq(cq)->armed.store(solicited_only ? 2 : 1, std::memory_order_release);
  rcq(cq)->be->maybe_armed.store(true, std::memory_order_release);
  // The program is about to block in ibv_get_cq_event: the progress thread takes the port now.
  wake_progress(rcq(cq)->be);
  return 0;
}

// ---- SRQ ----

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* a) {
  Backend* be = be_of(pd->context);
  const client::DeviceAttr lim = limits(be);
  if (a->attr.max_wr == 0 || a->attr.max_sge == 0 || a->attr.max_wr > lim.max_srq_wr ||
      a->attr.max_sge > lim.max_srq_sge)
    return fail_null<ibv_srq>(EINVAL);
  client::Srq* s;
  {
    std::lock_guard<std::mutex> g(be->mu);
    s = be->ctx->create_srq(reinterpret_cast<RPd*>(pd)->p, a->attr.max_wr, a->attr.max_sge);
  }
  if (s == nullptr) return nullptr;
  auto* r = new RSrq;
  r->s = s;
  r->attr = a->attr;
  r->vsrq.srq_type = IBV_SRQT_BASIC;
  r->vsrq.srq.handle = g_handles++;
  return &r->vsrq.srq;
}

int modify_srq(ibv_srq* srq, ibv_srq_attr* a, int mask) {
  auto* r = reinterpret_cast<RSrq*>(srq);
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR) return EOPNOTSUPP;  // no resizing
  if (mask & IBV_SRQ_LIMIT) {
    if (a->srq_limit > r->attr.max_wr) return EINVAL;
    r->attr.srq_limit = a->srq_limit;  // kept for ibv_query_srq; no SRQ_LIMIT_REACHED event
  }
  return 0;
}

int query_srq(ibv_srq* srq, ibv_srq_attr* a) {
  *a = reinterpret_cast<RSrq*>(srq)->attr;
  return 0;
}

int destroy_srq(ibv_srq* srq) {
  auto* r = reinterpret_cast<RSrq*>(srq);
  Backend* be = be_of(srq->context);
  std::lock_guard<std::mutex> g(be->mu);
  if (const int rc = be->ctx->destroy_srq(r->s)) return rc;
  delete r;
  return 0;
}

/// The first `n` requests of an ibv_recv_wr list as the engine's RecvWr list (`sges` holds
/// their SGEs); their SGE counts were checked.
void to_recv(const ibv_recv_wr* wr, std::size_t n, std::vector<verbs::RecvWr>& out,
             std::vector<verbs::Sge>& sges) {
  std::size_t ns = 0, i = 0;
  for (const ibv_recv_wr* w = wr; i < n; w = w->next, ++i)
    ns += static_cast<std::size_t>(w->num_sge);
  out.resize(n);
  sges.resize(ns);
  std::size_t s = 0;
  i = 0;
  for (const ibv_recv_wr* w = wr; i < n; w = w->next, ++i) {
    verbs::RecvWr& r = out[i];
    r = {};
    r.wr_id = w->wr_id;
    r.sg_list = sges.data() + s;
    r.num_sge = static_cast<std::uint32_t>(w->num_sge);
    for (int k = 0; k < w->num_sge; ++k, ++s)
      sges[s] = {w->sg_list[k].addr, w->sg_list[k].length, w->sg_list[k].lkey};
    r.next = i + 1 < n ? &out[i + 1] : nullptr;
  }
}

/// Posts a receive list to a queue that takes `max_sge` SGEs a request (a QP's or an SRQ's).
template <class F>
int post_recv_list(Backend* be, ibv_recv_wr* wr, ibv_recv_wr** bad, std::uint32_t max_sge,
                   F&& post) {
  // A request with more SGEs than its queue takes (or a negative count) is refused before its
  // list is read (rdma-core's drivers: EINVAL, *bad_wr that request); those before it are
  // posted.
  std::size_t n = 0;
  ibv_recv_wr* refused = wr;
  while (refused != nullptr && refused->num_sge >= 0 &&
         static_cast<std::uint32_t>(refused->num_sge) <= max_sge) {
    refused = refused->next;
    ++n;
  }
  thread_local std::vector<verbs::RecvWr> rs;
  thread_local std::vector<verbs::Sge> sges;
  to_recv(wr, n, rs, sges);
  const verbs::RecvWr* b = nullptr;
  int rc = 0;
  if (n > 0) {
    std::lock_guard<std::mutex> g(be->mu);
    rc = post(rs.data(), &b);
  }
  if (rc != 0) {
    ibv_recv_wr* w = wr;
    for (const verbs::RecvWr* x = rs.data(); x != b && w != nullptr; x = x->next) w = w->next;
    if (bad != nullptr) *bad = b != nullptr ? w : wr;
    return rc;
  }
  if (refused == nullptr) return 0;
  if (bad != nullptr) *bad = refused;
  return EINVAL;
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  auto* r = reinterpret_cast<RSrq*>(srq);
  Backend* be = be_of(srq->context);
  const auto post = [&](const verbs::RecvWr* w, const verbs::RecvWr** b) {
    return be->ctx->post_srq_recv(r->s, w, b);
  };
  return post_recv_list(be, wr, bad, r->attr.max_sge, post);
}

// ---- QP ----

constexpr std::uint32_t kAttachedSge = 4;  // attached post_send: registered SGEs, at most 4

/// The QP's bounce buffer, made at its first use (most QPs never need one); with the
/// backend's lock held. A slot is written again only after 4 x the send queue's depth (rounded
/// up to a power of two, as roced sizes it) more posts: by then the request that used it has
/// left the attachment's ring and the engine's send queue.
int setup_bounce(Backend* be, RQp* r) {
  Bounce& b = r->bounce;
  std::uint32_t depth = 1;
  while (depth < r->cap.max_send_wr) depth <<= 1;
  b.slots = 4 * depth;
  b.slot_size = (std::max<std::size_t>(r->cap.max_inline_data, 1024) + 63) & ~std::size_t{63};
  b.buf = be->ctx->alloc_buffer(b.slots * b.slot_size);
  if (b.buf == nullptr) return errno != 0 ? errno : ENOMEM;
  b.mr = be->ctx->reg_mr(reinterpret_cast<RPd*>(r->vqp.qp.pd)->p, b.buf->addr, b.buf->length,
                         verbs::kAccessLocalWrite);
  if (b.mr == nullptr) {
    const int e = errno;
    be->ctx->free_buffer(b.buf);
    b.buf = nullptr;
    return e != 0 ? e : ENOMEM;
  }
  return 0;
}

void free_bounce(Backend* be, RQp* r) {
  if (r->bounce.mr != nullptr) be->ctx->dereg_mr(r->bounce.mr);
  if (r->bounce.buf != nullptr) be->ctx->free_buffer(r->bounce.buf);
  r->bounce = {};
}

RQp* new_qp(ibv_context* c, ibv_pd* pd, const ibv_qp_init_attr& a, ibv_qp_cap& cap_out) {
  verbs::QpType type;
  switch (a.qp_type) {
    case IBV_QPT_RC:
      type = verbs::QpType::kRc;
      break;
    case IBV_QPT_UC:
      type = verbs::QpType::kUc;
      break;
    case IBV_QPT_UD:
      type = verbs::QpType::kUd;
      break;
    default:
      return fail_null<RQp>(EOPNOTSUPP);
  }
  if (pd == nullptr || a.send_cq == nullptr || a.recv_cq == nullptr || pd->context != c ||
      a.send_cq->context != c || a.recv_cq->context != c ||
      (a.srq != nullptr && a.srq->context != c))
    return fail_null<RQp>(EINVAL);
  Backend* be = be_of(c);
  const bool att = attached(c);
  const client::DeviceAttr lim = limits(be);
  if (a.cap.max_send_sge > lim.max_sge || a.cap.max_recv_sge > lim.max_sge ||
      a.cap.max_inline_data > 4096 || a.cap.max_send_wr > lim.max_qp_wr ||
      a.cap.max_recv_wr > lim.max_qp_wr)
    return fail_null<RQp>(EINVAL);
  verbs::QpCap cap;
  cap.max_send_wr = std::max<std::uint32_t>(a.cap.max_send_wr, 1);
  cap.max_recv_wr = std::max<std::uint32_t>(a.cap.max_recv_wr, 1);
  cap.max_send_sge = std::max<std::uint32_t>(a.cap.max_send_sge, 1);
  cap.max_recv_sge = std::max<std::uint32_t>(a.cap.max_recv_sge, 1);
  // rxe's rule (rxe_qp.c, rxe_qp_init_req): a send queue entry has room for max_send_sge SGEs
  // or max_inline_data bytes, whichever is larger, and the QP's inline capacity is that room:
  // a QP made with max_inline_data 0 and one SGE still sends 16 bytes inline (rdma_xclient,
  // UCX and libfabric post small messages inline; mlx5 rounds up likewise).
  cap.max_inline_data = std::min<std::uint32_t>(
      std::max<std::uint32_t>(a.cap.max_inline_data, 16 * cap.max_send_sge), 4096);
  const std::uint32_t inline_cap = cap.max_inline_data;
  if (att) {
    cap.max_send_sge = std::min(cap.max_send_sge, kAttachedSge);
    cap.max_inline_data = 0;  // copied into the bounce buffer
  }
  auto* r = new RQp;
  r->be = be;
  r->rctx = rctx(c);
  r->cap = a.cap;
  r->cap.max_send_wr = cap.max_send_wr;
  r->cap.max_recv_wr = a.srq != nullptr ? 0 : cap.max_recv_wr;
  r->cap.max_send_sge = std::max<std::uint32_t>(a.cap.max_send_sge, 1);
  r->cap.max_recv_sge = a.srq != nullptr ? 0 : cap.max_recv_sge;
  r->cap.max_inline_data = inline_cap;
  r->sq_sig_all = a.sq_sig_all;
  ibv_qp& qp = r->vqp.qp;
  qp.context = c;
  qp.qp_context = a.qp_context;
  qp.pd = pd;
  qp.send_cq = a.send_cq;
  qp.recv_cq = a.recv_cq;
  qp.srq = a.srq;
  qp.handle = g_handles++;
  qp.state = IBV_QPS_RESET;
  qp.qp_type = a.qp_type;
  pthread_mutex_init(&qp.mutex, nullptr);
  pthread_cond_init(&qp.cond, nullptr);
  qp.events_completed = 0;
  {
    std::lock_guard<std::mutex> g(be->mu);
    r->q = be->ctx->create_qp(
        reinterpret_cast<RPd*>(pd)->p, type, rcq(a.send_cq)->c, rcq(a.recv_cq)->c, cap,
        a.srq != nullptr ? reinterpret_cast<RSrq*>(a.srq)->s : nullptr, a.sq_sig_all != 0);
  }
  if (r->q == nullptr) {
    const int e = errno != 0 ? errno : ENOMEM;
    delete r;
    return fail_null<RQp>(e);
  }
  qp.qp_num = r->q->qp_num;
  r->attr.qp_state = IBV_QPS_RESET;
  r->attr.port_num = 1;
  r->attr.path_mtu = static_cast<ibv_mtu>(be->dev->info.max_mtu);
  cap_out = r->cap;
  std::lock_guard<std::mutex> g(be->reg);
  r->counts_recvs = attached(c) && qp.srq == nullptr;
  be->qps[qp.qp_num] = r;
  return r;
}

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* a) {
  RQp* r = new_qp(pd->context, pd, *a, a->cap);
  return r != nullptr ? &r->vqp.qp : nullptr;
}

ibv_qp* create_qp_ex(ibv_context* c, ibv_qp_init_attr_ex* a) {
  constexpr std::uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  // The create flags field given empty asks for nothing (rdma-core tests/test_qp.py sets the
  // bit with no flag on devices other than mlx4/mlx5 and got EOPNOTSUPP); a flag: EOPNOTSUPP.
  std::uint64_t mask = a->comp_mask;
  if ((mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags == 0)
    mask &= ~std::uint64_t{IBV_QP_INIT_ATTR_CREATE_FLAGS};
  if (mask & ~std::uint64_t{kKnown}) return fail_null<ibv_qp>(EOPNOTSUPP);
  if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD)) return fail_null<ibv_qp>(EINVAL);
  const bool ex = (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
  if (ex)
    if (const int rc = check_send_ops(a->qp_type, a->send_ops_flags)) return fail_null<ibv_qp>(rc);
  ibv_qp_init_attr base{};
  base.qp_context = a->qp_context;
  base.send_cq = a->send_cq;
  base.recv_cq = a->recv_cq;
  base.srq = a->srq;
  base.cap = a->cap;
  base.qp_type = a->qp_type;
  base.sq_sig_all = a->sq_sig_all;
  RQp* r = new_qp(c, a->pd, base, a->cap);
  if (r == nullptr) return nullptr;
  if (ex) {
    r->vqp.comp_mask |= rdma::VERBS_QP_EX;
    r->vqp.qp_ex.comp_mask = 0;
    init_qp_ex(&r->vqp.qp_ex, a->send_ops_flags, a->cap);
  }
  return &r->vqp.qp;
}

constexpr int kQpMaskOurs = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                            IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
                            IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN |
                            IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN;
// Accepted and kept for ibv_query_qp, without effect: no alternate path, no SQD notification.
constexpr int kQpMaskKept = IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_ALT_PATH |
                            IBV_QP_PATH_MIG_STATE | IBV_QP_CAP;

/// The IPv4 TTL of every RoCE v2 frame, whatever the GRH asks (to_av).
constexpr std::uint8_t kRoceHopLimit = 64;

/// An ibv_ah_attr as the engine's address vector (RoCE: a GRH is a must); 0 or an errno value.
int to_av(ibv_context* c, const ibv_ah_attr& ah, verbs::AddressVector& av) {
  if (!ah.is_global) return EINVAL;  // RoCE addresses by GID (the kernel says EINVAL too)
  if (ah.port_num != 1 && ah.port_num != 0) return EINVAL;
  ibv_gid sgid;
  if (!gid_at(be_of(c)->dev, ah.grh.sgid_index, sgid)) return EINVAL;
  std::memcpy(av.dgid.b.data(), ah.grh.dgid.raw, 16);
  // Only IPv4 (::ffff:a.b.c.d): the port has no IPv6 address.
  static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(ah.grh.dgid.raw, kMapped, 12) != 0) return EINVAL;
  // The program's hop limit is not what goes out: for a RoCE address the kernel replaces it
  // with the route's (drivers/infiniband/core/verbs.c, ib_resolve_unicast_gid_dmac: IPv4's
  // default TTL, 64), so rxe sends TTL 64 where ibv_rc_pingpong asks for 1.
  av.hop_limit = kRoceHopLimit;
  av.traffic_class = ah.grh.traffic_class;
  av.flow_label = ah.grh.flow_label;
  return 0;
}

/// Attached, after roced reset the QP: its completions already in the CQs' rings (roced's
/// engine dropped those it still held, as in-process) go too, as mlx4/mlx5 clean a reset QP's
/// CQEs: the next traffic of the QP must not poll the flushes of its old life (rdma-core's
/// test_mr_rereg_addr, _pd restate their QPs after an error). The other QPs' completions move
/// to `held`, which poll_cq hands out first, in their order.
void drop_reset_completions(RQp* r) {
  Backend* be = r->be;
  const ibv_qp& q = r->vqp.qp;
  ibv_cq* cqs[2] = {q.send_cq, q.recv_cq != q.send_cq ? q.recv_cq : nullptr};
  for (ibv_cq* cq : cqs) {
    if (cq == nullptr) continue;
    RCq* c = rcq(cq);
    std::lock_guard<std::mutex> h(c->held_mu);
    std::erase_if(c->held, [&q](const verbs::Wc& w) { return w.qp_num == q.qp_num; });
    // All the ring holds (at most its depth + 1): `held` may pass the CQ's depth until polled.
    verbs::Wc w[32];
    int n = 32;
    while (n == 32) {
      {
        std::lock_guard<std::mutex> g(be->mu);
        n = be->ctx->poll_cq(c->c, 32, w);
      }
      for (int i = 0; i < n; ++i)
        if (w[i].qp_num != q.qp_num) c->held.push_back(w[i]);
    }
  }
}

int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  RQp* r = rqp(qp);
  if (mask & ~(kQpMaskOurs | kQpMaskKept)) return mask & IBV_QP_RATE_LIMIT ? EOPNOTSUPP : EINVAL;
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != r->attr.qp_state) return EINVAL;
  if ((mask & IBV_QP_PORT) && attr->port_num != 1) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_STATE) && attr->qp_state > IBV_QPS_ERR) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096))
    return EINVAL;
  verbs::QpAttr a;
  a.qp_state = static_cast<verbs::QpState>(attr->qp_state);
  a.qp_access_flags = static_cast<std::uint32_t>(attr->qp_access_flags) & kAccessKnown;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qkey = attr->qkey;
  if (mask & IBV_QP_AV)
    if (const int rc = to_av(qp->context, attr->ah_attr, a.ah)) return rc;
  // Up to the port's max_mtu (4096, as rxe) is taken; the engine sends at most what the link
  // carries (active_mtu), and ibv_query_qp reports what was asked.
  a.path_mtu = std::min(static_cast<verbs::Mtu>(attr->path_mtu), r->be->dev->info.max_mtu);
  a.timeout = attr->timeout;
  a.retry_cnt = attr->retry_cnt;
  a.rnr_retry = attr->rnr_retry;
  a.rq_psn = attr->rq_psn;
  a.sq_psn = attr->sq_psn;
  a.max_rd_atomic = attr->max_rd_atomic;
  a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  a.min_rnr_timer = attr->min_rnr_timer;
  a.dest_qp_num = attr->dest_qp_num;
  Backend* be = r->be;
  int rc;
  {
    std::lock_guard<std::mutex> g(be->mu);
    rc = be->ctx->modify_qp(r->q, a, static_cast<std::uint32_t>(mask & kQpMaskOurs));
    // A reset QP's receive queue is empty: what it held completes no more.
    if (rc == 0 && (mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET)
      r->recvs_posted = r->recvs_done.load(std::memory_order_acquire);
  }
  if (rc != 0) return rc;
  if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET && be->env == nullptr)
    drop_reset_completions(r);
  std::lock_guard<std::mutex> g(be->reg);  // the progress thread sets the state on errors
  ibv_qp_attr& s = r->attr;
  if (mask & IBV_QP_STATE) s.qp_state = attr->qp_state;
  if (mask & IBV_QP_ACCESS_FLAGS) s.qp_access_flags = attr->qp_access_flags;
  if (mask & IBV_QP_QKEY) s.qkey = attr->qkey;
  if (mask & IBV_QP_AV) {
    s.ah_attr = attr->ah_attr;
    s.ah_attr.grh.hop_limit = kRoceHopLimit;  // what the kernel keeps (and reports) too
  }
  if (mask & IBV_QP_PATH_MTU) s.path_mtu = attr->path_mtu;
  if (mask & IBV_QP_TIMEOUT) s.timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) s.retry_cnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) s.rnr_retry = attr->rnr_retry;
  if (mask & IBV_QP_RQ_PSN) s.rq_psn = attr->rq_psn;
  if (mask & IBV_QP_SQ_PSN) s.sq_psn = attr->sq_psn;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) s.max_rd_atomic = attr->max_rd_atomic;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) s.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) s.min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_DEST_QPN) s.dest_qp_num = attr->dest_qp_num;
  if (mask & IBV_QP_ALT_PATH) {
    s.alt_ah_attr = attr->alt_ah_attr;
    s.alt_pkey_index = attr->alt_pkey_index;
    s.alt_port_num = attr->alt_port_num;
    s.alt_timeout = attr->alt_timeout;
  }
  if (mask & IBV_QP_PATH_MIG_STATE) s.path_mig_state = attr->path_mig_state;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) s.en_sqd_async_notify = attr->en_sqd_async_notify;
  return 0;
}

int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int /*mask*/, ibv_qp_init_attr* init) {
  RQp* r = rqp(qp);
  std::lock_guard<std::mutex> g(r->be->reg);
  *attr = r->attr;
  attr->cur_qp_state = r->attr.qp_state;
  attr->cap = r->cap;
  attr->port_num = 1;
  attr->sq_draining = 0;
  if (init != nullptr) {
    *init = {};
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
    init->cap = r->cap;
    init->qp_type = qp->qp_type;
    init->sq_sig_all = r->sq_sig_all;
  }
  return 0;
}

int destroy_qp(ibv_qp* qp) {
  RQp* r = rqp(qp);
  Backend* be = r->be;
  {
    std::lock_guard<std::mutex> g(be->mu);
    if (const int rc = be->ctx->destroy_qp(r->q)) return rc;
    free_bounce(be, r);
  }
  std::uint32_t read;
  {
    std::lock_guard<std::mutex> g(be->reg);
    be->qps.erase(qp->qp_num);
    // No event names it from here on: its unread ones leave the async fd; those the program
    // read must be acknowledged first (ibv_cmd_destroy_qp waits for events_completed).
    read = r->async_written - r->rctx->async->purge(reinterpret_cast<std::uint64_t>(qp));
  }
  pthread_mutex_lock(&qp->mutex);
  while (r->rctx->async->exact() && qp->events_completed != read)
    pthread_cond_wait(&qp->cond, &qp->mutex);
  pthread_mutex_unlock(&qp->mutex);
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  if (r->vqp.comp_mask & rdma::VERBS_QP_EX) fini_qp_ex(&r->vqp.qp_ex);
  delete r;
  return 0;
}

/// Attached: posts what the receive queue has room for (cap.max_recv_wr outstanding), then
/// ENOMEM at the first WR past it. `w` is post_recv_list's array, linked in order. The
/// backend's lock held.
int post_counted_recvs(RQp* r, const verbs::RecvWr* w, const verbs::RecvWr** b) {
  const std::uint32_t done = r->recvs_done.load(std::memory_order_acquire);
  // More completions than posts: a reset QP's completions still polled after the reset.
  if (static_cast<std::int32_t>(r->recvs_posted - done) < 0) r->recvs_posted = done;
  const std::uint32_t room =
      r->cap.max_recv_wr - std::min(r->cap.max_recv_wr, r->recvs_posted - done);
  std::uint32_t n = 0;
  const verbs::RecvWr* last = nullptr;
  for (const verbs::RecvWr* x = w; x != nullptr && n <= room; x = x->next, ++n)
    if (n < room) last = x;
  if (room == 0) {
    *b = w;
    return ENOMEM;
  }
  const verbs::RecvWr* past = last->next;
  const_cast<verbs::RecvWr*>(last)->next = nullptr;  // (post_recv_list's own array)
  int rc = r->be->ctx->post_recv(r->q, w, b);
  const_cast<verbs::RecvWr*>(last)->next = past;
  std::uint32_t posted = 0;
  for (const verbs::RecvWr* x = w; x != past && (rc == 0 || x != *b); x = x->next) ++posted;
  r->recvs_posted += posted;
  if (rc == 0 && past != nullptr) {
    *b = past;
    rc = ENOMEM;
  }
  return rc;
}

/// A receive completion of the QP numbered `qpn` polled: one WR fewer outstanding.
void recv_completed(Backend* be, std::uint32_t qpn) {
  std::lock_guard<std::mutex> g(be->reg);
  const auto it = be->qps.find(qpn);
  if (it != be->qps.end() && it->second->counts_recvs)
    it->second->recvs_done.fetch_add(1, std::memory_order_release);
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  RQp* r = rqp(qp);
  if (qp->srq != nullptr) {
    if (bad != nullptr) *bad = wr;
    return EINVAL;
  }
  // A QP in RESET takes no receive (EINVAL, as the engine answers in-process; attached,
  // roced would take them later: rdma-core tests/test_qpex.py
  // test_post_receive_qp_state_bad_flow).
  if (qp->state == IBV_QPS_RESET) {
    if (bad != nullptr) *bad = wr;
    return EINVAL;
  }
  Backend* be = r->be;
  const auto post = [&](const verbs::RecvWr* w, const verbs::RecvWr** b) {
    if (!r->counts_recvs) return be->ctx->post_recv(r->q, w, b);
    return post_counted_recvs(r, w, b);
  };
  return post_recv_list(be, wr, bad, r->cap.max_recv_sge, post);
}

int post_send_op(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) { return post_send(qp, wr, bad); }

// ---- AH ----

/// Attached: whether roced's port knows the MAC of `ip`, asking ARP for it, for up to
/// `seconds`. Once it does, roced fills that MAC into this client's UD sends to `ip` (their
/// address vectors carry the GID only). 0, EHOSTUNREACH, or what the attachment answered.
int attached_neighbour(Backend* be, Ipv4Addr ip, double seconds) {
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(seconds * 1e9);
  for (int i = 0;; ++i) {
    int rc;
    {
      std::lock_guard<std::mutex> g(be->mu);
      // An ARP request every 200 ms while it waits (roced budgets them per client).
      rc = be->ctx->neighbour(ip, i % 20 == 0);
    }
    if (rc != EAGAIN) return rc;
    if (now_ns() >= end) return EHOSTUNREACH;
    ::usleep(10'000);
  }
}

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (g_ahs.fetch_add(1) >= kMaxAh) {
    g_ahs.fetch_sub(1);
    return fail_null<ibv_ah>(ENOMEM);
  }
  auto* r = new RAh;
  if (const int rc = to_av(pd->context, *attr, r->av)) {
    delete r;
    g_ahs.fetch_sub(1);
    return fail_null<ibv_ah>(rc);
  }
  Ipv4Addr ip{static_cast<std::uint32_t>(attr->grh.dgid.raw[12]) << 24 |
              static_cast<std::uint32_t>(attr->grh.dgid.raw[13]) << 16 |
              static_cast<std::uint32_t>(attr->grh.dgid.raw[14]) << 8 | attr->grh.dgid.raw[15]};
  // rdma-core resolves the neighbour when it makes an AH (ibv_resolve_eth_l2_from_gid, 3 s).
  if (attached(pd->context)) {
    // roced keeps the MAC (the address vector goes without one, roced fills it in).
    if (const int rc = attached_neighbour(be_of(pd->context), ip, 3.0)) {
      delete r;
      g_ahs.fetch_sub(1);
      return fail_null<ibv_ah>(rc);
    }
  } else {
    const auto mac = resolve(be_of(pd->context), ip, 3.0);
    if (!mac) {
      delete r;
      g_ahs.fetch_sub(1);
      return fail_null<ibv_ah>(EHOSTUNREACH);
    }
    r->av.dmac = *mac;
  }
  r->ah.handle = g_handles++;
  return &r->ah;
}

// ECE as mlx5's provider keeps it: options of our vendor only (EINVAL otherwise, and for a
// comp_mask), stored on the QP; our librdmacm sends them in the REQ/REP and, once connected,
// stores what is in force (docs/configuration.md "transport"). libibverbs answers a vendor 0
// with EOPNOTSUPP before calling here.
int set_ece(ibv_qp* qp, ibv_ece* ece) {
  if (ece->comp_mask != 0 || ece->vendor_id != kEceVendor) {
    errno = EINVAL;
    return EINVAL;
  }
  rqp(qp)->ece_options = ece->options;
  return 0;
}

int query_ece(ibv_qp* qp, ibv_ece* ece) {
  ece->vendor_id = kEceVendor;
  ece->options = rqp(qp)->ece_options;
  ece->comp_mask = 0;
  return 0;
}

int destroy_ah(ibv_ah* ah) {
  delete reinterpret_cast<RAh*>(ah);
  g_ahs.fetch_sub(1);
  return 0;
}

}  // namespace

// ---- the tables ----

const rdma::verbs_context_ops kOps = [] {
  rdma::verbs_context_ops o{};
  o.alloc_pd = alloc_pd;
  o.create_ah = create_ah;
  o.create_cq = create_cq;
  o.create_cq_ex = create_cq_ex;
  o.create_qp = create_qp;
  o.create_qp_ex = create_qp_ex;
  o.create_srq = create_srq;
  o.dealloc_pd = dealloc_pd;
  o.dereg_mr = dereg_mr;
  o.destroy_ah = destroy_ah;
  o.destroy_cq = destroy_cq;
  o.destroy_qp = destroy_qp;
  o.destroy_srq = destroy_srq;
  o.free_context = free_context;
  o.modify_qp = modify_qp;
  o.modify_srq = modify_srq;
  o.poll_cq = poll_cq_op;
  o.post_recv = post_recv;
  o.post_send = post_send_op;
  o.post_srq_recv = post_srq_recv;
  o.query_device_ex = query_device_ex;
  o.query_port = query_port_op;
  o.query_ece = query_ece;
  o.query_qp = query_qp;
  o.query_srq = query_srq;
  o.reg_mr = reg_mr;
  o.req_notify_cq = req_notify_cq;
  o.rereg_mr = rereg_mr;
  o.set_ece = set_ece;
  return o;
}();

const rdma::verbs_device_ops kDeviceOps = [] {
  rdma::verbs_device_ops o{};
  o.name = "roce";
  o.alloc_context = alloc_context;
  o.uninit_device = uninit_device;
  return o;
}();

std::uint64_t node_guid(const Device* d) {
  const auto& m = d->info.mac.b;
  return std::uint64_t{static_cast<std::uint8_t>(m[0] ^ 2)} << 56 | std::uint64_t{m[1]} << 48 |
         std::uint64_t{m[2]} << 40 | std::uint64_t{0xff} << 32 | std::uint64_t{0xfe} << 24 |
         std::uint64_t{m[3]} << 16 | std::uint64_t{m[4]} << 8 | m[5];
}

void post_async(Backend* be, const client::AsyncEvent& ev) {
  rdma::async_event_desc d{};
  d.event_type = static_cast<std::uint32_t>(ev.type);
  // Written under `reg`: destroy_cq and destroy_qp take their object out of the registry
  // under it, then take its unread events out.
  std::lock_guard<std::mutex> g(be->reg);
  if (ev.type == verbs::AsyncEventType::kCqErr) {
    for (RCq* c : be->cqs)
      if (c->c == ev.cq) {
        d.element = reinterpret_cast<std::uint64_t>(&c->vcq.cq);
        if (rctx(c->vcq.cq.context)->async->write(&d)) ++c->async_written;
      }
  } else {
    const auto it = be->qps.find(ev.qp_num);
    if (it != be->qps.end()) {
      RQp* q = it->second;
      d.element = reinterpret_cast<std::uint64_t>(&q->vqp.qp);
      if (ev.type == verbs::AsyncEventType::kQpFatal ||
          ev.type == verbs::AsyncEventType::kQpReqErr ||
          ev.type == verbs::AsyncEventType::kQpAccessErr) {
        q->attr.qp_state = IBV_QPS_ERR;
        q->vqp.qp.state = IBV_QPS_ERR;
      }
      if (q->rctx->async->write(&d)) ++q->async_written;
    }
  }
}

void post_device_event(Backend* be, ibv_event_type type) {
  rdma::async_event_desc d{};
  d.element = 1;  // the port (ibv_get_async_event: element.port_num)
  d.event_type = static_cast<std::uint32_t>(type);
  std::lock_guard<std::mutex> g(be->reg);
  for (RContext* rc : be->contexts) rc->async->write(&d);
}

// ---- bridge.h ----

client::Context* context_of(ibv_context* c) { return is_ours(c) ? be_of(c)->ctx.get() : nullptr; }
std::mutex& lock_of(ibv_context* c) {
  static std::mutex other;  // another provider's context: nothing of ours to guard
  return is_ours(c) ? be_of(c)->mu : other;
}
client::Qp* qp_of(ibv_qp* q) { return q != nullptr && is_ours(q->context) ? rqp(q)->q : nullptr; }
client::Cq* cq_of(ibv_cq* c) { return c != nullptr && is_ours(c->context) ? rcq(c)->c : nullptr; }
client::Pd* pd_of(ibv_pd* p) {
  return p != nullptr && is_ours(p->context) ? reinterpret_cast<RPd*>(p)->p : nullptr;
}

void set_cm_sink(ibv_context* c, std::function<void(client::CmEvent&&)> sink) {
  if (!is_ours(c)) return;
  Backend* be = be_of(c);
  std::lock_guard<std::mutex> g(be->reg);
  be->has_cm_sink = static_cast<bool>(sink);
  be->cm_sink = std::move(sink);
}

/// runtime::Poller::kYieldAfterIdlePolls, roce-perf's.
constexpr std::uint32_t kYieldAfterEmptyPolls = 32;

namespace {
/// Attached: `n` send completions of QP `qpn` polled. True when the QP has no signaled send
/// left outstanding.
bool sends_completed(Backend* be, std::uint32_t qpn, std::uint32_t n) {
  std::lock_guard<std::mutex> g(be->reg);
  const auto it = be->qps.find(qpn);
  if (it == be->qps.end()) return false;
  RQp* q = it->second;
  const std::uint32_t done = q->sends_done.load(std::memory_order_relaxed) + n;
  q->sends_done.store(done, std::memory_order_relaxed);
  return static_cast<std::int32_t>(q->signaled_posted.load(std::memory_order_relaxed) - done) <= 0;
}
}  // namespace

int poll_cq(ibv_cq* cq, int max, ibv_wc* out) {
  if (max <= 0) return max == 0 ? 0 : -EINVAL;
  RCq* r = rcq(cq);
  Backend* be = r->be;
  app_call(be);
  // Storage for 32 completions, not 32 constructed ones: value-initialising verbs::Wc[32] was a
  // 1.5 KB memset on every call, most of them empty polls (callgrind: 85 of the 424 instructions
  // of an empty ibv_poll_cq, attached). Wc is an implicit-lifetime type, so the bytes are Wcs.
  alignas(verbs::Wc) unsigned char wc_bytes[sizeof(verbs::Wc) * 32];
  auto* wc = reinterpret_cast<verbs::Wc*>(wc_bytes);
  int total = 0;
  bool yield = false;
  // Attached: a run of send completions of one QP (counted per run, sends_completed), and
  // whether the last completion polled left its QP with no signaled send outstanding.
  std::uint32_t run_qpn = 0, run_n = 0;
  bool settled = false;
  const auto end_run = [&] {
    if (run_n != 0) settled = sends_completed(be, run_qpn, run_n);
    run_n = 0;
  };
  bool drained = false, hand_over = false;
  while (total < max) {
    const int want = std::min(max - total, 32);
    int n = 0;
    {
      // One lock (poll_lock: the backend's in-process, the CQ's attached). What the progress
      // thread took for a solicited-only arming comes first (the CQ's order: it takes under
      // this lock too).
      std::mutex& pl = poll_lock(be, r);
      lock_hot(be, pl);
      std::lock_guard<std::mutex> g(pl, std::adopt_lock);
      const std::uint64_t moved = be->env != nullptr ? port_frames(be) : 0;
      if (r->held_n.load(std::memory_order_relaxed) != 0) {
        for (; n < want && !r->held.empty(); ++n) {
          wc[n] = r->held.front();
          r->held.pop_front();
        }
        r->held_n.store(static_cast<std::uint32_t>(r->held.size()), std::memory_order_relaxed);
      }
      if (n < want) {
        // In-process, an empty CQ polls the port (libroce's local poll_cq), which transmits
        // what post_send left unsent.
        const int m = be->ctx->poll_cq(r->c, want - n, wc + n);
        if (m < 0 && n == 0) return total > 0 ? total : m;
        n += std::max(m, 0);
      }
      // Idle, as roce-perf's poller counts it: nothing polled and, in-process, no frame moved
      // by the port's poll inside (a 64 KiB stream's window is all on the wire or in ACKs: its
      // CQ stays empty for dozens of polls while every one of them sends or receives).
      if (total + n == 0 && (be->env == nullptr || port_frames(be) == moved))
        yield = ++r->empty_polls >= kYieldAfterEmptyPolls;
      else
        r->empty_polls = 0;
      if (be->env != nullptr) {
        be->unsent = 0;
        // The last completion handed out is a successful send: the program may next wait for
        // its peer without a verb (perftest's write_lat spins on its memory); catch the
        // peer's frame here rather than leave it to the progress thread.
        if (n > 0 && (n < want || total + n >= max) &&
            (static_cast<unsigned>(wc[n - 1].opcode) & 128u) == 0 &&
            wc[n - 1].status == verbs::WcStatus::kSuccess)
          hand_over = linger(be, wc[n - 1].qp_num);
      }
    }
    for (int i = 0; i < n; ++i) {
      ibv_wc& w = out[total + i];
      const verbs::Wc& s = wc[i];
      w = {};
      w.wr_id = s.wr_id;
      w.status = static_cast<ibv_wc_status>(s.status);
      w.opcode = static_cast<ibv_wc_opcode>(s.opcode);
      w.byte_len = s.byte_len;
      w.qp_num = s.qp_num;
      w.src_qp = s.src_qp;
      w.wc_flags = s.wc_flags & (IBV_WC_GRH | IBV_WC_WITH_IMM | IBV_WC_WITH_INV);
      if (s.wc_flags & verbs::kWcWithInv)
        w.invalidated_rkey = s.invalidated_rkey;
      else
        w.imm_data = htonl(s.imm_data);
      if ((s.opcode == verbs::WcOpcode::kRecv || s.opcode == verbs::WcOpcode::kRecvRdmaWithImm) &&
          r->be->env == nullptr)
        recv_completed(r->be, s.qp_num);
      if (r->be->env == nullptr) {
        if ((static_cast<unsigned>(s.opcode) & 128u) == 0) {  // a send completion
          if (run_n != 0 && run_qpn != s.qp_num) end_run();
          run_qpn = s.qp_num;
          ++run_n;
          settled = false;
        } else {
          end_run();
          settled = false;
        }
      }
      if (s.status != verbs::WcStatus::kSuccess) {
        // A completion in error means its QP is in the error state (IBA 10.8.3.3; flushes
        // follow it there): ibv_query_qp says so, as the kernel's answer would.
        std::lock_guard<std::mutex> g(be->reg);
        const auto it = be->qps.find(s.qp_num);
        if (it != be->qps.end()) {
          it->second->attr.qp_state = IBV_QPS_ERR;
          it->second->vqp.qp.state = IBV_QPS_ERR;
        }
      }
    }
    total += n;
    if (n < want) {
      drained = true;
      break;
    }
  }
  if (run_n != 0) {
    end_run();
    // The CQ drained and its last completion, a send, leaves the QP with nothing signaled
    // outstanding: the program may next wait for its peer without a verb (perftest's
    // write_lat spins on its memory). That peer, or roced, may be waiting for this CPU, and a
    // program that spins without a system call would keep it for a whole scheduler tick
    // (4 ms at HZ=250: write_lat's 2 ms half round trips attached). Give it up once now.
    if (settled && drained && out[total - 1].status == IBV_WC_SUCCESS) yield = true;
  }
  if (hand_over) take_over(be);
  bump(be->st.poll_calls);
  if (total == 0)
    bump(be->st.poll_empty);
  else
    bump(be->st.polled, static_cast<std::uint64_t>(total));
  if (yield) {
    bump(be->st.yields);
    ::sched_yield();
  }
  return total;
}

namespace {
bool known_opcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_LOCAL_INV:
    case IBV_WR_SEND_WITH_INV:
      return true;
    default:
      return false;
  }
}

/// post_send's engine or attachment said `rc` for the converted list `ws` of `wr` (`b`: the
/// first it did not take, null for all): *bad names that request of the program's list, and
/// the requests not taken give their bounce-buffer slots back (`bounced`: which took one;
/// null: none did). A slot holds the data of a request the attachment took until 4 x the
/// queue's depth more have been taken, not posts retried.
[[gnu::noinline]] int post_failed(RQp* r, ibv_send_wr* wr, const verbs::SendWr* ws,
                                  const verbs::SendWr* b, ibv_send_wr** bad, int rc,
                                  const std::uint8_t* bounced, std::uint32_t first_slot) {
  ibv_send_wr* v = wr;
  std::size_t accepted = 0;
  for (const verbs::SendWr* y = ws; b != nullptr && y != b && v != nullptr; y = y->next, ++accepted)
    v = v->next;
  if (bad != nullptr) *bad = b != nullptr ? v : wr;
  if (r->bounce.slots != 0 && bounced != nullptr) {
    const auto kept = static_cast<std::uint32_t>(
        std::count(bounced, bounced + static_cast<std::ptrdiff_t>(accepted), std::uint8_t{1}));
    r->bounce.slot = (first_slot + kept) % r->bounce.slots;
  }
  return rc;
}
}  // namespace

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  RQp* r = rqp(qp);
  // Nothing is sent from RESET (EINVAL with bad_wr, as the engine answers in-process;
  // attached, roced would take the ring later: rdma-core tests/test_qpex.py
  // test_post_send_qp_state_bad_flow).
  if (qp->state == IBV_QPS_RESET && wr != nullptr) {
    if (bad != nullptr) *bad = wr;
    return EINVAL;
  }
  Backend* be = r->be;
  const bool att = be->env == nullptr;
  // SGEs are counted up to the first request with more than the QP takes (refused there,
  // before its list is read).
  std::size_t n = 0, ns = 0;
  bool counting = true, copies = false;
  for (ibv_send_wr* w = wr; w != nullptr; w = w->next) {
    ++n;
    counting = counting && w->num_sge >= 0 &&
               static_cast<std::uint32_t>(w->num_sge) <= r->cap.max_send_sge;
    if (counting) ns += static_cast<std::size_t>(w->num_sge);
    copies |= (w->send_flags & IBV_SEND_INLINE) != 0 || w->num_sge > static_cast<int>(kAttachedSge);
  }
  if (n == 0) return 0;
  // The program is in its verbs loop: the progress thread keeps off the port (mode.cc).
  app_call(be);
  bump(be->st.post_calls);
  bump(be->st.posted, n);
  // The converted list: on the stack for the usual few requests (callgrind: the thread_local
  // vectors cost about 200 of the 616 instructions of a one-WRITE ibv_post_send, attached),
  // else in vectors reused per thread (no allocation once a thread posted its largest list).
  constexpr std::size_t kStackWrs = 8, kStackSges = 32;
  alignas(verbs::SendWr) unsigned char ws_bytes[sizeof(verbs::SendWr) * kStackWrs];
  // Storage, not constructed Sges (value-initialising 32 of them was 68 instructions a call):
  // each one used is assigned before it is read.
  alignas(verbs::Sge) unsigned char sge_bytes[sizeof(verbs::Sge) * kStackSges];
  std::uint8_t bounced_stack[kStackWrs];
  verbs::SendWr* ws;
  verbs::Sge* sges;
  // Which requests took a bounce buffer slot (attached): only those the attachment accepts
  // keep theirs.
  std::uint8_t* bounced;
  // (One SGE more than counted: a copied request with no SGE still writes its first.)
  if (n <= kStackWrs && ns < kStackSges) {
    ws = reinterpret_cast<verbs::SendWr*>(ws_bytes);
    sges = reinterpret_cast<verbs::Sge*>(sge_bytes);
    bounced = bounced_stack;
  } else {
    thread_local std::vector<verbs::SendWr> ws_heap;
    thread_local std::vector<verbs::Sge> sges_heap;
    thread_local std::vector<std::uint8_t> bounced_heap;
    ws_heap.resize(n);
    sges_heap.resize(ns + 1);
    bounced_heap.resize(n);
    ws = ws_heap.data();
    sges = sges_heap.data();
    bounced = bounced_heap.data();
  }
  for (std::size_t k = 0; k < n; ++k) new (&ws[k]) verbs::SendWr{};
  if (att && copies) std::fill_n(bounced, n, std::uint8_t{0});
  // One lock: in-process the backend's (the engine is single threaded), taken once the list is
  // converted (the conversion needs none); attached none of ours (libroce's attached Context
  // locks the send queue) unless a request is copied into the QP's bounce buffer, whose lock
  // covers the whole list.
  std::unique_lock<std::mutex> g;
  if (att && copies) g = std::unique_lock<std::mutex>(r->bounce_mu);
  const std::uint32_t first_slot = r->bounce.slot;
  std::uint32_t slots_taken = 0;
  std::size_t i = 0, s = 0;
  ibv_send_wr* w = wr;
  // A request refused here ends the conversion: those before it are posted (rdma-core's
  // contract: the requests before *bad_wr are), then the call returns this error.
  int refused = 0;
  for (; w != nullptr; w = w->next, ++i) {
    verbs::SendWr& x = ws[i];
    if (w->num_sge < 0 || static_cast<std::uint32_t>(w->num_sge) > r->cap.max_send_sge ||
        !known_opcode(w->opcode)) {
      refused = EINVAL;
      break;
    }
    x.wr_id = w->wr_id;
    x.opcode = static_cast<verbs::WrOpcode>(w->opcode);
    x.send_flags =
        w->send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
    if (w->opcode == IBV_WR_SEND_WITH_INV || w->opcode == IBV_WR_LOCAL_INV)
      x.invalidate_rkey = w->invalidate_rkey;
    else
      x.imm_data = ntohl(w->imm_data);
    if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      x.atomic.remote_addr = w->wr.atomic.remote_addr;
      x.atomic.rkey = w->wr.atomic.rkey;
      x.atomic.compare_add = w->wr.atomic.compare_add;
      x.atomic.swap = w->wr.atomic.swap;
    } else {
      x.rdma.remote_addr = w->wr.rdma.remote_addr;
      x.rdma.rkey = w->wr.rdma.rkey;
    }
    if (qp->qp_type == IBV_QPT_UD) {
      if (w->wr.ud.ah == nullptr || w->wr.ud.ah->context != qp->context) {
        refused = EINVAL;
        break;
      }
      x.ud.ah = &reinterpret_cast<RAh*>(w->wr.ud.ah)->av;
      x.ud.remote_qpn = w->wr.ud.remote_qpn;
      x.ud.remote_qkey = w->wr.ud.remote_qkey;
    }
    verbs::Sge* sg = sges + s;
    std::uint64_t total = 0;
    for (int k = 0; k < w->num_sge; ++k) {
      sg[k] = {w->sg_list[k].addr, w->sg_list[k].length, w->sg_list[k].lkey};
      total += w->sg_list[k].length;
    }
    x.sg_list = sg;
    x.num_sge = static_cast<std::uint32_t>(w->num_sge);
    const bool is_inline = (w->send_flags & IBV_SEND_INLINE) != 0;
    if (is_inline && total > r->cap.max_inline_data) {
      refused = EINVAL;
      break;
    }
    if (att && (is_inline || x.num_sge > kAttachedSge)) {
      // Attached: the SGEs must be registered and at most 4: copy into the bounce buffer.
      const bool reads = w->opcode == IBV_WR_RDMA_READ || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                         w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
      Bounce& b = r->bounce;
      if (reads) refused = EINVAL;
      if (refused == 0 && b.buf == nullptr) refused = setup_bounce(be, r);
      if (refused == 0 && total > b.slot_size) refused = EINVAL;
      // More copies in one call than the queue holds would overwrite slots of this very call
      // before it is posted: the queue could not take them anyway (ENOMEM, as a full queue).
      if (refused == 0 && slots_taken == b.slots / 4) refused = ENOMEM;
      if (refused != 0) break;
      ++slots_taken;
      bounced[i] = 1;
      auto* dst = static_cast<std::uint8_t*>(b.buf->addr) + std::size_t{b.slot} * b.slot_size;
      b.slot = (b.slot + 1) % b.slots;
      std::size_t off = 0;
      for (int k = 0; k < w->num_sge; ++k) {
        std::memcpy(dst + off, reinterpret_cast<const void*>(w->sg_list[k].addr),
                    w->sg_list[k].length);
        off += w->sg_list[k].length;
      }
      sg[0] = {reinterpret_cast<std::uint64_t>(dst), static_cast<std::uint32_t>(total), b.mr->lkey};
      x.num_sge = total > 0 ? 1 : 0;
      x.send_flags &= ~static_cast<std::uint32_t>(IBV_SEND_INLINE);
    }
    s += static_cast<std::size_t>(std::max(w->num_sge, 0));
    x.next = w->next != nullptr ? &ws[i + 1] : nullptr;
  }
  // The converted requests (all, or those before the refused one) go to the engine.
  if (i == 0) {
    if (bad != nullptr) *bad = w;
    return refused;
  }
  ws[i - 1].next = nullptr;
  if (!att) {
    lock_hot(be, be->mu);
    g = std::unique_lock<std::mutex>(be->mu, std::adopt_lock);
  }
  const verbs::SendWr* b = nullptr;
  if (const int rc = be->ctx->post_send(r->q, ws, &b); rc != 0) [[unlikely]]
    return post_failed(r, wr, ws, b, bad, rc, copies ? bounced : nullptr, first_slot);
  if (!att) {
    after_post(be, qp->qp_num, static_cast<unsigned>(i));
  } else {
    std::uint32_t sig = 0;
    for (ibv_send_wr* v = wr; v != w; v = v->next)
      sig += r->sq_sig_all != 0 || (v->send_flags & IBV_SEND_SIGNALED) != 0 ? 1 : 0;
    r->signaled_posted.store(r->signaled_posted.load(std::memory_order_relaxed) + sig,
                             std::memory_order_relaxed);
  }
  if (refused != 0 && bad != nullptr) *bad = w;
  return refused;
}

}  // namespace roce::verbs_compat
