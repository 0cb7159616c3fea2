/// @file
/// The C wrapper (roce/roce.h) over roce::client::Context.
#include <roce/client.h>
#include <roce/roce.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

using namespace roce::client;

struct roce_context {
  std::unique_ptr<Context> ctx;
};

namespace {
// The C handles are the C++ objects themselves.
template <class C, class T>
C* out(T* p) {
  return reinterpret_cast<C*>(p);
}
template <class T, class C>
T* in(C* p) {
  return reinterpret_cast<T*>(p);
}
static_assert(sizeof(roce_sge) == sizeof(Sge));
constexpr int kMaxWrs = 64;  ///< work requests per roce_post_* call converted on the stack
}  // namespace

extern "C" {

roce_context* roce_attach(const char* socket_path, const char* port) {
  if (socket_path == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto ctx = Context::attach(socket_path, port ? port : "");
  if (!ctx) return nullptr;
  return new roce_context{std::move(ctx)};
}

void roce_close(roce_context* ctx) { delete ctx; }

int roce_query_port(roce_context* ctx, roce_port_info* o) {
  const PortInfo& p = ctx->ctx->port();
  std::memcpy(o->mac, p.mac.b.data(), 6);
  std::memcpy(o->gid, p.gid.b.data(), 16);
  o->ipv4 = p.ipv4.v;
  o->max_mtu = static_cast<int>(p.max_mtu);
  return 0;
}

roce_pd* roce_alloc_pd(roce_context* ctx) { return out<roce_pd>(ctx->ctx->alloc_pd()); }
int roce_dealloc_pd(roce_context* ctx, roce_pd* pd) { return ctx->ctx->dealloc_pd(in<Pd>(pd)); }

roce_buffer* roce_alloc_buffer(roce_context* ctx, size_t length, void** addr) {
  Buffer* b = ctx->ctx->alloc_buffer(length);
  if (b && addr) *addr = b->addr;
  return out<roce_buffer>(b);
}
int roce_free_buffer(roce_context* ctx, roce_buffer* b) {
  return ctx->ctx->free_buffer(in<Buffer>(b));
}

roce_mr* roce_reg_mr(roce_context* ctx, roce_pd* pd, void* addr, size_t length, unsigned access) {
  return out<roce_mr>(ctx->ctx->reg_mr(in<Pd>(pd), addr, length, access));
}
int roce_dereg_mr(roce_context* ctx, roce_mr* mr) { return ctx->ctx->dereg_mr(in<Mr>(mr)); }
uint32_t roce_mr_lkey(const roce_mr* mr) { return reinterpret_cast<const Mr*>(mr)->lkey; }
uint32_t roce_mr_rkey(const roce_mr* mr) { return reinterpret_cast<const Mr*>(mr)->rkey; }
uint64_t roce_mr_iova(const roce_mr* mr) { return reinterpret_cast<const Mr*>(mr)->iova; }

roce_cq* roce_create_cq(roce_context* ctx, uint32_t depth) {
  return out<roce_cq>(ctx->ctx->create_cq(depth));
}
int roce_destroy_cq(roce_context* ctx, roce_cq* cq) { return ctx->ctx->destroy_cq(in<Cq>(cq)); }

roce_qp* roce_create_qp(roce_context* ctx, roce_pd* pd, int type, roce_cq* send_cq,
                        roce_cq* recv_cq, const roce_qp_cap* cap) {
  if (type != ROCE_QPT_RC && type != ROCE_QPT_UC) {  // UD needs address handles: C++ only
    errno = EINVAL;
    return nullptr;
  }
  QpCap c;
  c.max_send_wr = cap->max_send_wr;
  c.max_recv_wr = cap->max_recv_wr;
  c.max_send_sge = cap->max_send_sge;
  c.max_recv_sge = cap->max_recv_sge;
  return out<roce_qp>(ctx->ctx->create_qp(in<Pd>(pd), static_cast<QpType>(type), in<Cq>(send_cq),
                                          in<Cq>(recv_cq), c));
}
int roce_destroy_qp(roce_context* ctx, roce_qp* qp) { return ctx->ctx->destroy_qp(in<Qp>(qp)); }
uint32_t roce_qp_num(const roce_qp* qp) { return reinterpret_cast<const Qp*>(qp)->qp_num; }

int roce_connect_rc(roce_context* ctx, roce_qp* qp, const roce_rc_peer* peer, uint32_t sq_psn,
                    int mtu) {
  if (mtu < ROCE_MTU_256 || mtu > ROCE_MTU_4096) return EINVAL;
  RcPeer p;
  p.qpn = peer->qpn;
  p.psn = peer->psn;
  std::memcpy(p.gid.b.data(), peer->gid, 16);
  return ctx->ctx->connect_rc(in<Qp>(qp), p, sq_psn, static_cast<Mtu>(mtu));
}

int roce_post_send(roce_context* ctx, roce_qp* qp, roce_send_wr* wr, roce_send_wr** bad_wr) {
  SendWr w[kMaxWrs];
  roce_send_wr* src[kMaxWrs];
  int n = 0;
  for (roce_send_wr* x = wr; x != nullptr; x = x->next) {
    if (n == kMaxWrs || x->num_sge < 0) {
      if (bad_wr) *bad_wr = x;
      return EINVAL;
    }
    SendWr& s = w[n];
    s = SendWr{};
    s.wr_id = x->wr_id;
    s.sg_list = reinterpret_cast<const Sge*>(x->sg_list);
    s.num_sge = static_cast<std::uint32_t>(x->num_sge);
    s.opcode = static_cast<WrOpcode>(x->opcode);
    s.send_flags = x->send_flags;
    s.imm_data = x->imm_data;
    s.rdma.remote_addr = s.atomic.remote_addr = x->remote_addr;
    s.rdma.rkey = s.atomic.rkey = x->rkey;
    s.atomic.compare_add = x->compare_add;
    s.atomic.swap = x->swap;
    if (n > 0) w[n - 1].next = &s;
    src[n++] = x;
  }
  const SendWr* bad = nullptr;
  const int rc = ctx->ctx->post_send(in<Qp>(qp), n ? w : nullptr, &bad);
  if (rc != 0 && bad_wr) *bad_wr = bad ? src[bad - w] : wr;
  return rc;
}

int roce_post_recv(roce_context* ctx, roce_qp* qp, roce_recv_wr* wr, roce_recv_wr** bad_wr) {
  RecvWr w[kMaxWrs];
  roce_recv_wr* src[kMaxWrs];
  int n = 0;
  for (roce_recv_wr* x = wr; x != nullptr; x = x->next) {
    if (n == kMaxWrs || x->num_sge < 0) {
      if (bad_wr) *bad_wr = x;
      return EINVAL;
    }
    w[n] = RecvWr{};
    w[n].wr_id = x->wr_id;
    w[n].sg_list = reinterpret_cast<const Sge*>(x->sg_list);
    w[n].num_sge = static_cast<std::uint32_t>(x->num_sge);
    if (n > 0) w[n - 1].next = &w[n];
    src[n++] = x;
  }
  const RecvWr* bad = nullptr;
  const int rc = ctx->ctx->post_recv(in<Qp>(qp), n ? w : nullptr, &bad);
  if (rc != 0 && bad_wr) *bad_wr = bad ? src[bad - w] : wr;
  return rc;
}

int roce_poll_cq(roce_context* ctx, roce_cq* cq, int max, roce_wc* o) {
  Wc w[64];
  if (max > 64) max = 64;
  const int n = ctx->ctx->poll_cq(in<Cq>(cq), max, w);
  for (int i = 0; i < n; ++i) {
    o[i].wr_id = w[i].wr_id;
    o[i].status = static_cast<int>(w[i].status);
    o[i].opcode = static_cast<int>(w[i].opcode);
    o[i].byte_len = w[i].byte_len;
    o[i].imm_data = w[i].imm_data;
    o[i].qp_num = w[i].qp_num;
    o[i].src_qp = w[i].src_qp;
    o[i].wc_flags = w[i].wc_flags;
  }
  return n;
}

int roce_wait_cq(roce_context* ctx, roce_cq* cq, int timeout_ms) {
  return ctx->ctx->wait_cq(in<Cq>(cq), timeout_ms);
}

static CmConnParam cm_param(const roce_cm_param* p) {
  CmConnParam c;
  if (p == nullptr) return c;
  c.responder_resources = p->responder_resources;
  c.initiator_depth = p->initiator_depth;
  c.rnr_retry = p->rnr_retry;
  if (p->private_data != nullptr)
    c.private_data.assign(static_cast<const std::uint8_t*>(p->private_data),
                          static_cast<const std::uint8_t*>(p->private_data) + p->private_len);
  return c;
}

int roce_cm_listen(roce_context* ctx, uint16_t port) { return ctx->ctx->cm_listen(port); }

int roce_cm_connect(roce_context* ctx, roce_qp* qp, uint32_t dst, uint16_t port,
                    const roce_cm_param* p, uint32_t* id) {
  if (p && p->private_len > 196) return EINVAL;
  std::uint32_t i = 0;
  const int rc = ctx->ctx->cm_connect(in<Qp>(qp), roce::Ipv4Addr{dst}, port, cm_param(p), i);
  if (rc == 0 && id) *id = i;
  return rc;
}

int roce_cm_accept(roce_context* ctx, uint32_t id, roce_qp* qp, const roce_cm_param* p) {
  if (p && p->private_len > 196) return EINVAL;
  return ctx->ctx->cm_accept(id, in<Qp>(qp), cm_param(p));
}

int roce_cm_reject(roce_context* ctx, uint32_t id, const void* data, uint32_t len) {
  if (len > 196 || (len && !data)) return EINVAL;
  return ctx->ctx->cm_reject(id, {static_cast<const std::uint8_t*>(data), len});
}

int roce_cm_disconnect(roce_context* ctx, uint32_t id) { return ctx->ctx->cm_disconnect(id); }

int roce_cm_get_event(roce_context* ctx, roce_cm_event* ev, int timeout_ms) {
  CmEvent e;
  const int rc = ctx->ctx->cm_get_event(e, timeout_ms);
  if (rc != 0) return rc;
  *ev = roce_cm_event{};
  ev->type = static_cast<int>(e.type);
  ev->id = e.id;
  ev->qp_num = e.qp_num;
  ev->peer_ipv4 = e.peer.v;
  ev->port = e.port;
  ev->reason = e.reason;
  ev->remote = e.remote ? 1 : 0;
  ev->private_len = static_cast<uint32_t>(std::min<std::size_t>(e.private_data.size(), 196));
  if (ev->private_len != 0) std::memcpy(ev->private_data, e.private_data.data(), ev->private_len);
  return 0;
}

}  // extern "C"
