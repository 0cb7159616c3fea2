// The extended verbs API over the provider's post_send and poll_cq (ex_api.h). Semantics follow
// rdma-core's libibverbs/man/ibv_wr_post.3.md and ibv_create_cq_ex.3, with providers/rxe/rxe.c
// as the software reference (the errno values of a refused batch).
//
// State. libibverbs' ibv_qp_ex and ibv_cq_ex have no room for a provider's pointer, and the
// provider owns the objects around them, so each QP's builder and each CQ's iterator lives in a
// registry keyed by the address of the ibv_qp_ex / ibv_cq_ex. init_* replaces the entry (a new
// object at a reused address starts afresh), fini_* erases it. A thread caches the last entry
// it used; the cache is valid while no entry has been freed since (g_generation), so the
// calls of a batch take no lock but the per-object critical section.
//
// Critical sections. rdma-core makes wr_start..wr_complete/wr_abort a per-QP critical section
// and start_poll..end_poll a per-CQ one (rxe: a spinlock). Here SectionLock, which the thread
// that ends the section may release whatever thread began it, and which makes no system call
// unless another thread waits (std::binary_semaphore's release wakes a futex every time).
#include "verbs/provider/ex_api.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <vector>

#include "verbs/provider/bridge.h"

namespace roce::verbs_compat {
namespace {

constexpr std::uint64_t kUdOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
constexpr std::uint64_t kUcOps = kUdOps | IBV_QP_EX_WITH_RDMA_WRITE |
                                 IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND_WITH_INV |
                                 IBV_QP_EX_WITH_LOCAL_INV;
constexpr std::uint64_t kRcOps = kUcOps | IBV_QP_EX_WITH_RDMA_READ |
                                 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

// Bounds when the QP's capabilities are not known (init_qp_ex without them): far above any
// device's, there only so that a hostile count cannot make the builder allocate without end.
constexpr std::uint32_t kSanityWr = 1u << 16;
constexpr std::uint32_t kSanitySge = 1u << 12;
constexpr std::uint32_t kSanityInline = 1u << 20;

// Completions taken from poll_cq at a time.
constexpr int kPollBatch = 16;

/// A lock free of thread ownership, uncontended without system calls: 0 free, 1 held, 2 held
/// with waiters (the futex mutex of Drepper's "Futexes Are Tricky", on C++20 atomic waits).
class SectionLock {
 public:
  void acquire() {
    int s = 0;
    if (state_.compare_exchange_strong(s, 1, std::memory_order_acquire)) return;
    if (s != 2) s = state_.exchange(2, std::memory_order_acquire);
    while (s != 0) {
      state_.wait(2, std::memory_order_relaxed);
      s = state_.exchange(2, std::memory_order_acquire);
    }
  }
  bool try_acquire() {
    int s = 0;
    return state_.compare_exchange_strong(s, 1, std::memory_order_acquire);
  }
  void release() {
    if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
  }

 private:
  std::atomic<int> state_{0};
};

/// One work request of a batch. Its sg_list and next are set at wr_complete: the vectors the
/// SGEs and inline bytes live in may grow (and move) while the batch is built.
struct Pending {
  ibv_send_wr wr;
  std::size_t sge_off = 0;     ///< first SGE in QpEx::sges
  std::size_t inline_off = 0;  ///< its bytes in QpEx::inline_bytes (when is_inline)
  bool is_inline = false;
};

struct QpEx {
  SectionLock lock;
  /// The thread inside wr_start..wr_complete, or none (no batch open).
  std::atomic<std::thread::id> owner{};
  std::uint32_t max_wr = kSanityWr;
  std::uint32_t max_sge = kSanitySge;
  std::uint32_t max_inline = kSanityInline;
  int err = 0;  ///< the first error of the open batch (rxe's qp->err)
  std::vector<Pending> wrs;
  std::vector<ibv_sge> sges;
  std::vector<std::uint8_t> inline_bytes;
  std::vector<ibv_send_wr> posted;  ///< the list handed to post_send
};

struct CqEx {
  SectionLock lock;
  std::atomic<std::thread::id> owner{};  ///< the thread inside start_poll..end_poll
  std::array<ibv_wc, kPollBatch> wc{};
  int n = 0;             ///< completions in wc
  int pos = 0;           ///< the next (or current) one
  bool current = false;  ///< wc[pos] is the iterator's current completion
};

template <class State>
struct Registry {
  std::mutex mutex;
  std::unordered_map<const void*, std::unique_ptr<State>> map;
};

Registry<QpEx>& qp_registry() {
  static auto* r = new Registry<QpEx>;  // never destroyed: QPs may outlive static destruction
  return *r;
}
Registry<CqEx>& cq_registry() {
  static auto* r = new Registry<CqEx>;
  return *r;
}

/// Bumped (under a registry's mutex) whenever a state object is freed or replaced.
std::atomic<std::uint64_t> g_generation{0};
/// CQs whose iterator holds completions outside a batch (take_pending's fast way out).
std::atomic<int> g_cqs_with_pending{0};

template <class State>
struct Cache {
  const void* key = nullptr;
  State* state = nullptr;
  std::uint64_t generation = 0;
};
thread_local Cache<QpEx> t_qp;
thread_local Cache<CqEx> t_cq;

template <class State>
State* find(Registry<State>& registry, Cache<State>& cache, const void* key) {
  if (cache.key == key && cache.generation == g_generation.load(std::memory_order_acquire))
    return cache.state;
  std::lock_guard guard(registry.mutex);
  auto it = registry.map.find(key);
  if (it == registry.map.end()) return nullptr;
  cache = {key, it->second.get(), g_generation.load(std::memory_order_relaxed)};
  return cache.state;
}

template <class State>
void replace(Registry<State>& registry, const void* key, std::unique_ptr<State> state) {
  std::unique_ptr<State> old;
  {
    std::lock_guard guard(registry.mutex);
    g_generation.fetch_add(1, std::memory_order_acq_rel);
    auto& slot = registry.map[key];
    old = std::move(slot);
    if (state)
      slot = std::move(state);
    else
      registry.map.erase(key);
  }
}

bool mine(const std::atomic<std::thread::id>& owner) {
  return owner.load(std::memory_order_relaxed) == std::this_thread::get_id();
}
bool open(const std::atomic<std::thread::id>& owner) {
  return owner.load(std::memory_order_relaxed) != std::thread::id{};
}

// ---- the work request builder --------------------------------------------------------------

QpEx* batch_of(ibv_qp_ex* qp) {
  QpEx* s = find(qp_registry(), t_qp, qp);
  return s && open(s->owner) ? s : nullptr;
}

void reset_batch(QpEx& s) {
  s.err = 0;
  s.wrs.clear();
  s.sges.clear();
  s.inline_bytes.clear();
  s.posted.clear();
}

/// A builder's new work request (wr_id and wr_flags from the QP), or null once the batch has
/// failed (calls after a failure are ignored, as rxe does).
ibv_send_wr* build(ibv_qp_ex* qp, ibv_wr_opcode opcode) {
  QpEx* s = batch_of(qp);
  if (!s || s->err) return nullptr;
  if (s->wrs.size() >= s->max_wr) {
    s->err = ENOSPC;
    return nullptr;
  }
  try {
    s->wrs.emplace_back();
  } catch (const std::bad_alloc&) {
    s->err = ENOMEM;
    return nullptr;
  }
  ibv_send_wr& wr = s->wrs.back().wr;
  std::memset(&wr, 0, sizeof wr);
  wr.wr_id = qp->wr_id;
  wr.send_flags = qp->wr_flags;
  wr.opcode = opcode;
  return &wr;
}

/// The request a setter adjusts: the last one built. A setter before any builder fails the
/// batch (EINVAL).
Pending* last(QpEx* s) {
  if (!s || s->err) return nullptr;
  if (s->wrs.empty()) {
    s->err = EINVAL;
    return nullptr;
  }
  return &s->wrs.back();
}

void wr_atomic_cmp_swp(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t remote_addr,
                       std::uint64_t compare, std::uint64_t swap) {
  if (ibv_send_wr* wr = build(qp, IBV_WR_ATOMIC_CMP_AND_SWP)) {
    wr->wr.atomic.remote_addr = remote_addr;
    wr->wr.atomic.rkey = rkey;
    wr->wr.atomic.compare_add = compare;
    wr->wr.atomic.swap = swap;
  }
}

void wr_atomic_fetch_add(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t remote_addr,
                         std::uint64_t add) {
  if (ibv_send_wr* wr = build(qp, IBV_WR_ATOMIC_FETCH_AND_ADD)) {
    wr->wr.atomic.remote_addr = remote_addr;
    wr->wr.atomic.rkey = rkey;
    wr->wr.atomic.compare_add = add;
  }
}

void wr_local_inv(ibv_qp_ex* qp, std::uint32_t invalidate_rkey) {
  if (ibv_send_wr* wr = build(qp, IBV_WR_LOCAL_INV)) wr->invalidate_rkey = invalidate_rkey;
}

void wr_rdma_read(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t remote_addr) {
  if (ibv_send_wr* wr = build(qp, IBV_WR_RDMA_READ)) {
    wr->wr.rdma.remote_addr = remote_addr;
    wr->wr.rdma.rkey = rkey;
  }
}

void wr_rdma_write(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t remote_addr) {
  if (ibv_send_wr* wr = build(qp, IBV_WR_RDMA_WRITE)) {
    wr->wr.rdma.remote_addr = remote_addr;
    wr->wr.rdma.rkey = rkey;
  }
}

void wr_rdma_write_imm(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t remote_addr,
                       __be32 imm_data) {
  if (ibv_send_wr* wr = build(qp, IBV_WR_RDMA_WRITE_WITH_IMM)) {
    wr->wr.rdma.remote_addr = remote_addr;
    wr->wr.rdma.rkey = rkey;
    wr->imm_data = imm_data;
  }
}

void wr_send(ibv_qp_ex* qp) { build(qp, IBV_WR_SEND); }

void wr_send_imm(ibv_qp_ex* qp, __be32 imm_data) {
  if (ibv_send_wr* wr = build(qp, IBV_WR_SEND_WITH_IMM)) wr->imm_data = imm_data;
}

void wr_send_inv(ibv_qp_ex* qp, std::uint32_t invalidate_rkey) {
  if (ibv_send_wr* wr = build(qp, IBV_WR_SEND_WITH_INV)) wr->invalidate_rkey = invalidate_rkey;
}

void wr_set_ud_addr(ibv_qp_ex* qp, ibv_ah* ah, std::uint32_t remote_qpn,
                    std::uint32_t remote_qkey) {
  Pending* p = last(batch_of(qp));
  // ibv_send_wr keeps the UD address in the union with the RDMA and atomic fields: on other
  // QP types the call is a no-op rather than a clobber of those.
  if (!p || qp->qp_base.qp_type != IBV_QPT_UD) return;
  p->wr.wr.ud.ah = ah;
  p->wr.wr.ud.remote_qpn = remote_qpn;
  p->wr.wr.ud.remote_qkey = remote_qkey;
}

/// Appends `n` SGEs to the last request's data, replacing what an earlier setter gave it.
ibv_sge* data_sges(QpEx* s, Pending* p, std::size_t n) {
  try {
    p->sge_off = s->sges.size();
    s->sges.resize(s->sges.size() + n);
  } catch (const std::bad_alloc&) {
    s->err = ENOMEM;
    return nullptr;
  }
  p->wr.num_sge = static_cast<int>(n);
  p->is_inline = false;
  return s->sges.data() + p->sge_off;
}

void wr_set_sge(ibv_qp_ex* qp, std::uint32_t lkey, std::uint64_t addr, std::uint32_t length) {
  QpEx* s = batch_of(qp);
  Pending* p = last(s);
  if (!p) return;
  if (length == 0) {  // no data (rxe: a zero length leaves the request without an SGE)
    p->wr.num_sge = 0;
    p->is_inline = false;
    return;
  }
  if (ibv_sge* sge = data_sges(s, p, 1)) *sge = {addr, length, lkey};
}

void wr_set_sge_list(ibv_qp_ex* qp, std::size_t num_sge, const ibv_sge* sg_list) {
  QpEx* s = batch_of(qp);
  Pending* p = last(s);
  if (!p) return;
  if (num_sge > s->max_sge) {
    s->err = ENOSPC;
    return;
  }
  if (num_sge && !sg_list) {
    s->err = EINVAL;
    return;
  }
  if (ibv_sge* sge = data_sges(s, p, num_sge)) std::copy_n(sg_list, num_sge, sge);
}

/// Copies `n` buffers, concatenated, as the last request's inline data (one SGE whose address
/// is an offset into inline_bytes until wr_complete).
void set_inline(ibv_qp_ex* qp, std::size_t n, const ibv_data_buf* bufs) {
  QpEx* s = batch_of(qp);
  Pending* p = last(s);
  if (!p) return;
  if (n && !bufs) {
    s->err = EINVAL;
    return;
  }
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (bufs[i].length && !bufs[i].addr) {
      s->err = EINVAL;
      return;
    }
    if (bufs[i].length > s->max_inline - total) {
      s->err = ENOSPC;
      return;
    }
    total += bufs[i].length;
  }
  std::size_t off = s->inline_bytes.size();
  try {
    s->inline_bytes.resize(off + total);
  } catch (const std::bad_alloc&) {
    s->err = ENOMEM;
    return;
  }
  std::uint8_t* to = s->inline_bytes.data() + off;
  for (std::size_t i = 0; i < n; ++i) {
    if (bufs[i].length) std::memcpy(to, bufs[i].addr, bufs[i].length);
    to += bufs[i].length;
  }
  if (total == 0) {
    p->wr.num_sge = 0;
    p->is_inline = true;
    return;
  }
  if (ibv_sge* sge = data_sges(s, p, 1)) {
    *sge = {off, static_cast<std::uint32_t>(total), 0};
    p->inline_off = off;
    p->is_inline = true;
  }
}

void wr_set_inline_data(ibv_qp_ex* qp, void* addr, std::size_t length) {
  ibv_data_buf buf{addr, length};
  set_inline(qp, 1, &buf);
}

void wr_set_inline_data_list(ibv_qp_ex* qp, std::size_t num_buf, const ibv_data_buf* buf_list) {
  set_inline(qp, num_buf, buf_list);
}

void wr_start(ibv_qp_ex* qp) {
  QpEx* s = find(qp_registry(), t_qp, qp);
  if (!s) return;  // not a QP of init_qp_ex: wr_complete will say EINVAL
  if (mine(s->owner)) {
    // wr_start again inside its own critical section (rxe would spin forever on its lock):
    // the open batch is dropped and a new one begins.
    reset_batch(*s);
    return;
  }
  s->lock.acquire();
  reset_batch(*s);
  s->owner.store(std::this_thread::get_id(), std::memory_order_relaxed);
}

/// The batch's requests allowed on the QP's type, UD ones addressed: else EINVAL, before
/// anything is posted.
int check_batch(const QpEx& s, ibv_qp_type type) {
  std::uint64_t ops = supported_send_ops(type);
  for (const Pending& p : s.wrs) {
    std::uint64_t op = 0;
    switch (p.wr.opcode) {
      case IBV_WR_RDMA_WRITE:
        op = IBV_QP_EX_WITH_RDMA_WRITE;
        break;
      case IBV_WR_RDMA_WRITE_WITH_IMM:
        op = IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
        break;
      case IBV_WR_SEND:
        op = IBV_QP_EX_WITH_SEND;
        break;
      case IBV_WR_SEND_WITH_IMM:
        op = IBV_QP_EX_WITH_SEND_WITH_IMM;
        break;
      case IBV_WR_RDMA_READ:
        op = IBV_QP_EX_WITH_RDMA_READ;
        break;
      case IBV_WR_ATOMIC_CMP_AND_SWP:
        op = IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
        break;
      case IBV_WR_ATOMIC_FETCH_AND_ADD:
        op = IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
        break;
      case IBV_WR_LOCAL_INV:
        op = IBV_QP_EX_WITH_LOCAL_INV;
        break;
      case IBV_WR_SEND_WITH_INV:
        op = IBV_QP_EX_WITH_SEND_WITH_INV;
        break;
      default:
        return EINVAL;
    }
    if (!(ops & op)) return EINVAL;
    if (type == IBV_QPT_UD && !p.wr.wr.ud.ah) return EINVAL;
  }
  return 0;
}

/// The batch as a linked ibv_send_wr list pointing into the builder's storage, then posted.
int post_batch(ibv_qp_ex* qp, QpEx& s) {
  if (int rc = check_batch(s, qp->qp_base.qp_type)) return rc;
  try {
    s.posted.resize(s.wrs.size());
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
  for (std::size_t i = 0; i < s.wrs.size(); ++i) {
    Pending& p = s.wrs[i];
    ibv_send_wr& wr = s.posted[i];
    wr = p.wr;
    wr.next = i + 1 < s.wrs.size() ? &s.posted[i + 1] : nullptr;
    wr.sg_list = wr.num_sge ? &s.sges[p.sge_off] : nullptr;
    if (p.is_inline) {
      wr.send_flags |= IBV_SEND_INLINE;
      if (wr.num_sge)
        s.sges[p.sge_off].addr =
            reinterpret_cast<std::uintptr_t>(s.inline_bytes.data() + p.inline_off);
    }
  }
  ibv_send_wr* bad = nullptr;
  int rc = post_send(&qp->qp_base, s.posted.data(), &bad);
  return rc < 0 ? -rc : rc;
}

int wr_complete(ibv_qp_ex* qp) {
  QpEx* s = find(qp_registry(), t_qp, qp);
  if (!s || !open(s->owner)) return EINVAL;  // no wr_start
  int rc = s->err;
  if (!rc && !s->wrs.empty()) rc = post_batch(qp, *s);
  reset_batch(*s);
  s->owner.store(std::thread::id{}, std::memory_order_relaxed);
  s->lock.release();
  return rc;
}

void wr_abort(ibv_qp_ex* qp) {
  QpEx* s = find(qp_registry(), t_qp, qp);
  if (!s || !open(s->owner)) return;
  reset_batch(*s);
  s->owner.store(std::thread::id{}, std::memory_order_relaxed);
  s->lock.release();
}

// ---- the completion iterator ---------------------------------------------------------------

CqEx* cq_state(ibv_cq_ex* cq) { return find(cq_registry(), t_cq, cq); }

/// The current completion (the accessors' answer between start_poll and end_poll).
const ibv_wc& cur(ibv_cq_ex* cq) {
  static const ibv_wc kNone{};
  CqEx* s = cq_state(cq);
  return s && s->current ? s->wc[static_cast<std::size_t>(s->pos)] : kNone;
}

/// Makes wc[pos] current, taking a new batch from poll_cq when the held one is used up:
/// 0, ENOENT (none), or poll_cq's errno.
int advance(ibv_cq_ex* cq, CqEx& s) {
  if (s.pos == s.n) {
    int got = poll_cq(ibv_cq_ex_to_cq(cq), kPollBatch, s.wc.data());
    s.pos = s.n = 0;
    if (got < 0) return -got;
    s.n = std::min(got, kPollBatch);
    if (s.n == 0) return ENOENT;
  }
  s.current = true;
  const ibv_wc& wc = s.wc[static_cast<std::size_t>(s.pos)];
  cq->wr_id = wc.wr_id;
  cq->status = wc.status;
  return 0;
}

void leave(CqEx& s) {
  if (s.current) {
    ++s.pos;
    s.current = false;
  }
  s.owner.store(std::thread::id{}, std::memory_order_relaxed);
  if (s.pos < s.n) g_cqs_with_pending.fetch_add(1, std::memory_order_relaxed);
  s.lock.release();
}

/// Inside the CQ's critical section: its pending count is taken back while inside.
void entered(CqEx& s) {
  s.owner.store(std::this_thread::get_id(), std::memory_order_relaxed);
  if (s.pos < s.n) g_cqs_with_pending.fetch_sub(1, std::memory_order_relaxed);
}

/// Enters the CQ's critical section, waiting for another thread's batch to end.
void enter(CqEx& s) {
  s.lock.acquire();
  entered(s);
}

/// Enters it only if no thread is inside (take_pending and pending, called by the provider
/// with its own locks held, never wait on a program's batch: that thread is polling anyway).
bool try_enter(CqEx& s) {
  if (!s.lock.try_acquire()) return false;
  entered(s);
  return true;
}

/// Replaces (or, with null, erases) a CQ's iterator; the completions the old one held outside a
/// batch stop counting as pending (a destroyed CQ, or one at a reused address).
void retire_cq(ibv_cq_ex* cq, std::unique_ptr<CqEx> replacement) {
  {
    std::lock_guard guard(cq_registry().mutex);
    auto it = cq_registry().map.find(cq);
    if (it != cq_registry().map.end() && !open(it->second->owner) &&
        it->second->pos < it->second->n)
      g_cqs_with_pending.fetch_sub(1, std::memory_order_relaxed);
  }
  replace(cq_registry(), cq, std::move(replacement));
}

int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  CqEx* s = cq_state(cq);
  if (!s) return EINVAL;
  if (attr && attr->comp_mask) return EINVAL;
  if (mine(s->owner)) {
    // start_poll again without end_poll: the batch goes on from where it was.
    if (s->current) {
      ++s->pos;
      s->current = false;
    }
  } else {
    enter(*s);
  }
  int rc = advance(cq, *s);
  if (rc) {
    leave(*s);  // an error from start_poll: the caller will not call end_poll
    errno = rc;
  }
  return rc;
}

int next_poll(ibv_cq_ex* cq) {
  CqEx* s = cq_state(cq);
  if (!s || !mine(s->owner)) return EINVAL;
  if (s->current) {
    ++s->pos;
    s->current = false;
  }
  int rc = advance(cq, *s);
  if (rc) errno = rc;  // end_poll still comes
  return rc;
}

void end_poll(ibv_cq_ex* cq) {
  CqEx* s = cq_state(cq);
  if (s && open(s->owner)) leave(*s);
}

ibv_wc_opcode read_opcode(ibv_cq_ex* cq) { return cur(cq).opcode; }
std::uint32_t read_vendor_err(ibv_cq_ex* cq) { return cur(cq).vendor_err; }
std::uint32_t read_byte_len(ibv_cq_ex* cq) { return cur(cq).byte_len; }
// The union as ibv_wc holds it: imm_data big-endian, or (IBV_WC_WITH_INV) the invalidated rkey,
// which ibv_wc_read_invalidated_rkey returns as it is.
__be32 read_imm_data(ibv_cq_ex* cq) { return cur(cq).imm_data; }
std::uint32_t read_qp_num(ibv_cq_ex* cq) { return cur(cq).qp_num; }
std::uint32_t read_src_qp(ibv_cq_ex* cq) { return cur(cq).src_qp; }
unsigned read_wc_flags(ibv_cq_ex* cq) { return cur(cq).wc_flags; }
std::uint32_t read_slid(ibv_cq_ex* cq) { return cur(cq).slid; }
std::uint8_t read_sl(ibv_cq_ex* cq) { return cur(cq).sl; }
std::uint8_t read_dlid_path_bits(ibv_cq_ex* cq) { return cur(cq).dlid_path_bits; }

}  // namespace

std::uint64_t supported_send_ops(ibv_qp_type type) {
  switch (type) {
    case IBV_QPT_RC:
      return kRcOps;
    case IBV_QPT_UC:
      return kUcOps;
    case IBV_QPT_UD:
      return kUdOps;
    default:
      return 0;
  }
}

int check_send_ops(ibv_qp_type type, std::uint64_t send_ops_flags) {
  return send_ops_flags & ~supported_send_ops(type) ? EOPNOTSUPP : 0;
}

void init_qp_ex(ibv_qp_ex* qp) {
  ibv_qp_cap unknown{};
  unknown.max_send_wr = kSanityWr;
  unknown.max_send_sge = kSanitySge;
  unknown.max_inline_data = kSanityInline;
  init_qp_ex(qp, kRcOps, unknown);
}

void init_qp_ex(ibv_qp_ex* qp, std::uint64_t send_ops_flags, const ibv_qp_cap& cap) {
  if (!qp) return;
  auto s = std::make_unique<QpEx>();
  // A QP may post a batch as deep as its send queue (a zero from a provider that did not fill
  // the capability means "not known").
  s->max_wr = cap.max_send_wr ? std::min(cap.max_send_wr, kSanityWr) : kSanityWr;
  s->max_sge = std::min(cap.max_send_sge, kSanitySge);
  s->max_inline = std::min(cap.max_inline_data, kSanityInline);
  replace(qp_registry(), qp, std::move(s));

  auto want = [&](std::uint64_t flag) { return (send_ops_flags & kRcOps & flag) != 0; };
  qp->wr_atomic_cmp_swp = want(IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP) ? wr_atomic_cmp_swp : nullptr;
  qp->wr_atomic_fetch_add =
      want(IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) ? wr_atomic_fetch_add : nullptr;
  qp->wr_local_inv = want(IBV_QP_EX_WITH_LOCAL_INV) ? wr_local_inv : nullptr;
  qp->wr_rdma_read = want(IBV_QP_EX_WITH_RDMA_READ) ? wr_rdma_read : nullptr;
  qp->wr_rdma_write = want(IBV_QP_EX_WITH_RDMA_WRITE) ? wr_rdma_write : nullptr;
  qp->wr_rdma_write_imm = want(IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) ? wr_rdma_write_imm : nullptr;
  qp->wr_send = want(IBV_QP_EX_WITH_SEND) ? wr_send : nullptr;
  qp->wr_send_imm = want(IBV_QP_EX_WITH_SEND_WITH_IMM) ? wr_send_imm : nullptr;
  qp->wr_send_inv = want(IBV_QP_EX_WITH_SEND_WITH_INV) ? wr_send_inv : nullptr;
  // Not on the appliance (check_send_ops refuses them at creation).
  qp->wr_bind_mw = nullptr;
  qp->wr_send_tso = nullptr;
  qp->wr_set_xrc_srqn = nullptr;
  qp->wr_atomic_write = nullptr;

  qp->wr_set_ud_addr = wr_set_ud_addr;
  qp->wr_set_inline_data = wr_set_inline_data;
  qp->wr_set_inline_data_list = wr_set_inline_data_list;
  qp->wr_set_sge = wr_set_sge;
  qp->wr_set_sge_list = wr_set_sge_list;
  qp->wr_start = wr_start;
  qp->wr_complete = wr_complete;
  qp->wr_abort = wr_abort;
}

void fini_qp_ex(ibv_qp_ex* qp) {
  if (qp) replace<QpEx>(qp_registry(), qp, nullptr);
}

std::uint64_t supported_wc_flags() { return IBV_WC_STANDARD_FLAGS; }

int check_cq_attr(const ibv_cq_init_attr_ex& attr) {
  if (attr.comp_mask & ~std::uint32_t{IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD})
    return EOPNOTSUPP;
  if (attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) return EINVAL;
  if ((attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
      (attr.flags & ~std::uint32_t{IBV_CREATE_CQ_ATTR_SINGLE_THREADED}))
    return EOPNOTSUPP;
  if (attr.wc_flags & ~supported_wc_flags()) return EOPNOTSUPP;
  return 0;
}

void init_cq_ex(ibv_cq_ex* cq) { init_cq_ex(cq, supported_wc_flags()); }

void init_cq_ex(ibv_cq_ex* cq, std::uint64_t wc_flags) {
  if (!cq) return;
  retire_cq(cq, std::make_unique<CqEx>());
  cq->start_poll = start_poll;
  cq->next_poll = next_poll;
  cq->end_poll = end_poll;
  cq->read_opcode = read_opcode;
  cq->read_vendor_err = read_vendor_err;
  cq->read_wc_flags = read_wc_flags;
  auto want = [&](std::uint64_t flag) { return (wc_flags & flag) != 0; };
  cq->read_byte_len = want(IBV_WC_EX_WITH_BYTE_LEN) ? read_byte_len : nullptr;
  cq->read_imm_data = want(IBV_WC_EX_WITH_IMM) ? read_imm_data : nullptr;
  cq->read_qp_num = want(IBV_WC_EX_WITH_QP_NUM) ? read_qp_num : nullptr;
  cq->read_src_qp = want(IBV_WC_EX_WITH_SRC_QP) ? read_src_qp : nullptr;
  cq->read_slid = want(IBV_WC_EX_WITH_SLID) ? read_slid : nullptr;
  cq->read_sl = want(IBV_WC_EX_WITH_SL) ? read_sl : nullptr;
  cq->read_dlid_path_bits = want(IBV_WC_EX_WITH_DLID_PATH_BITS) ? read_dlid_path_bits : nullptr;
  cq->read_completion_ts = nullptr;
  cq->read_cvlan = nullptr;
  cq->read_flow_tag = nullptr;
  cq->read_tm_info = nullptr;
  cq->read_completion_wallclock_ns = nullptr;
}

void fini_cq_ex(ibv_cq_ex* cq) {
  if (cq) retire_cq(cq, nullptr);
}

int take_pending(ibv_cq* cq, int max, ibv_wc* out) {
  if (g_cqs_with_pending.load(std::memory_order_relaxed) == 0 || max <= 0 || !out) return 0;
  // ibv_cq_ex begins with ibv_cq's fields (libibverbs' verbs_cq is a union of the two).
  auto* cqx = reinterpret_cast<ibv_cq_ex*>(cq);
  CqEx* s = cq_state(cqx);
  // ibv_poll_cq inside our own start_poll..end_poll, or while another thread is inside its own.
  if (!s || mine(s->owner) || !try_enter(*s)) return 0;
  int moved = std::min(max, s->n - s->pos);
  std::copy_n(s->wc.begin() + s->pos, moved, out);
  s->pos += moved;
  leave(*s);
  return moved;
}

int pending(ibv_cq* cq) {
  if (g_cqs_with_pending.load(std::memory_order_relaxed) == 0) return 0;
  CqEx* s = cq_state(reinterpret_cast<ibv_cq_ex*>(cq));
  if (!s || mine(s->owner) || !try_enter(*s)) return 0;
  int held = s->n - s->pos;
  leave(*s);
  return held;
}

}  // namespace roce::verbs_compat
