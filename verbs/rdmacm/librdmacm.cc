/// @file
/// librdmacm's C API (rdma/rdma_cma.h of rdma-core 44) over the appliance: the devices are the
/// provider's ibv_contexts (libibverbs' device list, with the provider LD_PRELOADed), the CM is
/// each port's client::Context (verbs/rdmacm/cma.h), QPs, CQs and PDs are made through
/// libibverbs. Exported with librdmacm.so.1's symbol versions (librdmacm.map).
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "verbs/provider/bridge.h"
#include "verbs/rdmacm/cma.h"

// The provider (libroce-verbs.so) is LD_PRELOADed; without it these stay null and librdmacm
// lists no devices (ENODEV) instead of failing to load.
namespace roce::verbs_compat {
__attribute__((weak)) client::Context* context_of(ibv_context*);
__attribute__((weak)) std::mutex& lock_of(ibv_context*);
__attribute__((weak)) client::Qp* qp_of(ibv_qp*);
__attribute__((weak)) void set_cm_sink(ibv_context*, std::function<void(client::CmEvent&&)>);
}  // namespace roce::verbs_compat

#define RDMACM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using roce::rdmacm::Channel;
using roce::rdmacm::Cma;
using roce::rdmacm::Id;
using roce::rdmacm::id_of;
using roce::rdmacm::Port;
namespace bridge = roce::verbs_compat;

/// Access of the QPs rdma_create_qp moves to INIT: everything rdma_cm grants a connected QP
/// (the kernel's CM adds the remote rights at RTR; ours leaves the QP's own).
constexpr unsigned kConnAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

/// ECE (controlplane/cm/cm.h): our vendor ID, and the options a connected QP reports when it
/// runs selective repeat (the signature, offered and accepted).
constexpr std::uint32_t kEceVendor = 0xFFFFFF;
constexpr std::uint32_t kEceSrInForce = 0x524F0003;

struct Global {
  Cma cma;
  std::once_flag once;
  std::vector<std::unique_ptr<Port>> ports;
  /// The process that opened the ports. A child it forks inherits them as memory (and,
  /// attached, the parent's attachment): its exit leaves the parent's connections alone, as
  /// the kernel's CM does while the parent still holds the rdma_cm file.
  pid_t pid = 0;
};

/// Never destroyed: programs call librdmacm from atexit handlers and other threads at exit.
Global& g() {
  static Global* x = new Global;
  return *x;
}

/// Without an ECE of rdma_set_local_ece's, the REQ/REP carry the QP's (ibv_set_ece on it), as
/// rdma-core's librdmacm takes a rdma_cm QP's from ibv_query_ece.
void take_qp_ece(rdma_cm_id* id) {
  ibv_ece e{};
  if (id->qp != nullptr && ibv_query_ece(id->qp, &e) == 0 && e.vendor_id != 0 && e.options != 0)
    g().cma.default_local_ece(id_of(id), e);
}

bool bridge_present() {
  return &bridge::context_of != nullptr && &bridge::lock_of != nullptr &&
         &bridge::qp_of != nullptr && &bridge::set_cm_sink != nullptr;
}

/// Opens every device of the provider once (rdma-core's ucma_init opens them all too) and
/// installs the CM sinks.
void init() {
  std::call_once(g().once, [] {
    if (!bridge_present()) return;
    // Once connected, the QP's ECE says what is in force (as mlx5's provider reports the
    // options the device agreed to): selective repeat on, or nothing.
    g().cma.on_established = [](rdma_cm_id* id, bool sr) {
      ibv_ece e{kEceVendor, sr ? kEceSrInForce : 0u, 0};
      ibv_set_ece(id->qp, &e);
    };
    g().pid = ::getpid();
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return;
    for (int i = 0; i < n; ++i) {
      ibv_context* verbs = ibv_open_device(list[i]);
      if (verbs == nullptr) continue;
      roce::client::Context* ctx = bridge::context_of(verbs);
      if (ctx == nullptr) {
        ibv_close_device(verbs);
        continue;
      }
      auto p = std::make_unique<Port>();
      p->verbs = verbs;
      p->ctx = ctx;
      p->lock = &bridge::lock_of(verbs);
      p->pd = ibv_alloc_pd(verbs);
      Port* port = p.get();
      g().ports.push_back(std::move(p));
      g().cma.add_port(port);
      bridge::set_cm_sink(
          verbs, [port](roce::client::CmEvent&& ev) { g().cma.deliver(port, std::move(ev)); });
    }
    // After the provider's own exit handler (registered when the first device opened), so
    // that this one runs first, while the port still runs.
    if (!g().ports.empty())
      std::atexit([] {
        if (::getpid() == g().pid) g().cma.linger_at_exit();
      });
    // The list stays: the opened contexts refer to its devices.
  });
}

int result(int rc) {
  if (rc == 0) return 0;
  errno = rc;
  return -1;
}

roce::client::Qp* appliance_qp(rdma_cm_id* id) {
  return id->qp != nullptr && bridge_present() ? bridge::qp_of(id->qp) : nullptr;
}

void destroy_own_cqs(rdma_cm_id* id) {
  Id* i = id_of(id);
  if (!i->own_cqs) return;
  if (id->send_cq && id->send_cq != id->recv_cq) ibv_destroy_cq(id->send_cq);
  if (id->recv_cq) ibv_destroy_cq(id->recv_cq);
  if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel)
    ibv_destroy_comp_channel(id->send_cq_channel);
  if (id->recv_cq_channel) ibv_destroy_comp_channel(id->recv_cq_channel);
  id->send_cq = id->recv_cq = nullptr;
  id->send_cq_channel = id->recv_cq_channel = nullptr;
  i->own_cqs = false;
}

/// rdma_create_qp's CQs when the program gives none: one per direction, each with a
/// completion channel (what rdma_get_send_comp / rdma_get_recv_comp wait on).
int create_cqs(rdma_cm_id* id, std::uint32_t send_wr, std::uint32_t recv_wr) {
  Id* i = id_of(id);
  if (id->recv_cq == nullptr) {
    id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
    if (id->recv_cq_channel == nullptr) return errno ? errno : ENOMEM;
    id->recv_cq = ibv_create_cq(id->verbs, recv_wr ? recv_wr : 1, id, id->recv_cq_channel, 0);
    i->own_cqs = true;
    if (id->recv_cq == nullptr) return errno ? errno : ENOMEM;
  }
  if (id->send_cq == nullptr) {
    id->send_cq_channel = ibv_create_comp_channel(id->verbs);
    i->own_cqs = true;
    if (id->send_cq_channel == nullptr) return errno ? errno : ENOMEM;
    id->send_cq = ibv_create_cq(id->verbs, send_wr ? send_wr : 1, id, id->send_cq_channel, 0);
    if (id->send_cq == nullptr) return errno ? errno : ENOMEM;
  }
  return 0;
}

/// rdma_cm's first QP transitions: a connected QP to INIT (the CM does RTR and RTS), a UD QP
/// all the way to RTS with rdma_cm's Q_Key.
int init_qp(rdma_cm_id* id, ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  if (qp->qp_type == IBV_QPT_UD) {
    a.qkey = RDMA_UDP_QKEY;
    if (const int rc =
            ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
      return rc;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    if (const int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE)) return rc;
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
  }
  a.qp_access_flags = kConnAccess;
  (void)id;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

}  // namespace

// ---- event channels and ids --------------------------------------------------------------

RDMACM_EXPORT rdma_event_channel* rdma_create_event_channel(void) {
  init();
  Channel* c = g().cma.create_channel();
  return c ? &c->pub : nullptr;
}

RDMACM_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel) g().cma.destroy_channel(roce::rdmacm::channel_of(channel));
}

RDMACM_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                                 rdma_port_space ps) {
  if (id == nullptr) return result(EINVAL);
  init();
  const ibv_qp_type type = (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) ? IBV_QPT_UD : IBV_QPT_RC;
  Id* i =
      g().cma.create_id(channel ? roce::rdmacm::channel_of(channel) : nullptr, context, ps, type);
  if (i == nullptr) return -1;
  *id = &i->pub;
  return 0;
}

RDMACM_EXPORT int rdma_destroy_id(rdma_cm_id* id) {
  if (id == nullptr) return result(EINVAL);
  return result(g().cma.destroy_id(id_of(id)));
}

RDMACM_EXPORT int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  if (id == nullptr) return result(EINVAL);
  Channel* c = nullptr;
  if (channel == nullptr) {  // a synchronous id from now on, on a channel of its own
    c = g().cma.create_channel(true);
    if (c == nullptr) return -1;
    const int rc = g().cma.migrate(id_of(id), c);
    if (rc) {
      g().cma.destroy_channel(c);
      return result(rc);
    }
    id_of(id)->sync = true;
    return 0;
  }
  return result(g().cma.migrate(id_of(id), roce::rdmacm::channel_of(channel)));
}

// ---- addresses ----------------------------------------------------------------------------

RDMACM_EXPORT int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  if (id == nullptr) return result(EINVAL);
  return result(g().cma.bind(id_of(id), addr));
}

RDMACM_EXPORT int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr,
                                    int timeout_ms) {
  if (id == nullptr) return result(EINVAL);
  return result(g().cma.resolve_addr(id_of(id), src_addr, dst_addr, timeout_ms));
}

RDMACM_EXPORT int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  if (id == nullptr) return result(EINVAL);
  return result(g().cma.resolve_route(id_of(id), timeout_ms));
}

RDMACM_EXPORT __be16 rdma_get_src_port(rdma_cm_id* id) {
  const sockaddr* a = &id->route.addr.src_addr;
  if (a->sa_family == AF_INET) return id->route.addr.src_sin.sin_port;
  if (a->sa_family == AF_INET6) return id->route.addr.src_sin6.sin6_port;
  return 0;
}

RDMACM_EXPORT __be16 rdma_get_dst_port(rdma_cm_id* id) {
  const sockaddr* a = &id->route.addr.dst_addr;
  if (a->sa_family == AF_INET) return id->route.addr.dst_sin.sin_port;
  if (a->sa_family == AF_INET6) return id->route.addr.dst_sin6.sin6_port;
  return 0;
}

RDMACM_EXPORT int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval,
                                  size_t optlen) {
  if (id == nullptr) return result(EINVAL);
  return result(g().cma.set_option(id_of(id), level, optname, optval, optlen));
}

// ---- connections --------------------------------------------------------------------------

RDMACM_EXPORT int rdma_listen(rdma_cm_id* id, int backlog) {
  if (id == nullptr) return result(EINVAL);
  return result(g().cma.listen(id_of(id), backlog));
}

RDMACM_EXPORT int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (id == nullptr) return result(EINVAL);
  // A QP of the program's own (conn_param->qp_num, no QP on the id): the appliance's CM needs
  // the QP object to move it through RTR and RTS. A UD id's SIDR request needs no QP.
  if (id->qp == nullptr && !roce::rdmacm::is_ud(id_of(id))) return result(ENOSYS);
  take_qp_ece(id);
  return result(g().cma.connect(id_of(id), appliance_qp(id), conn_param));
}

RDMACM_EXPORT int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (id == nullptr) return result(EINVAL);
  if (id->qp == nullptr && !roce::rdmacm::is_ud(id_of(id))) return result(ENOSYS);
  take_qp_ece(id);
  return result(g().cma.accept(id_of(id), appliance_qp(id), conn_param));
}

RDMACM_EXPORT int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  if (id == nullptr) return result(EINVAL);
  return result(g().cma.reject(id_of(id), private_data, private_data_len));
}

RDMACM_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data,
                                  uint8_t private_data_len) {
  return rdma_reject(id, private_data, private_data_len);
}

RDMACM_EXPORT int rdma_notify(rdma_cm_id* id, ibv_event_type event) {
  if (id == nullptr) return result(EINVAL);
  return result(g().cma.notify(id_of(id), event));
}

RDMACM_EXPORT int rdma_disconnect(rdma_cm_id* id) {
  if (id == nullptr) return result(EINVAL);
  return result(g().cma.disconnect(id_of(id)));
}

RDMACM_EXPORT int rdma_establish(rdma_cm_id* id) {
  (void)id;  // only for program-managed QPs, which rdma_connect does not take
  return result(ENOSYS);
}

RDMACM_EXPORT int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  (void)id;
  (void)qp_attr;
  (void)qp_attr_mask;
  return result(ENOSYS);
}

// rdma-core's checks and errno: EINVAL without an id or ECE, for a vendor 0 or a comp_mask,
// and for an id with a QP (its ECE is the QP's: ibv_set_ece / ibv_query_ece).
RDMACM_EXPORT int rdma_set_local_ece(rdma_cm_id* id, ibv_ece* ece) {
  if (id == nullptr) return result(EINVAL);
  return result(g().cma.set_local_ece(id_of(id), ece));
}

RDMACM_EXPORT int rdma_get_remote_ece(rdma_cm_id* id, ibv_ece* ece) {
  if (id == nullptr) return result(EINVAL);
  return result(g().cma.get_remote_ece(id_of(id), ece));
}

RDMACM_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  if (listen == nullptr || id == nullptr) return result(EINVAL);
  Id* l = id_of(listen);
  if (!l->sync) return result(EINVAL);
  if (listen->event) {
    g().cma.ack_event(listen->event);
    listen->event = nullptr;
  }
  rdma_cm_event* e = nullptr;
  if (const int rc = g().cma.get_event(l->channel, &e)) return result(rc);
  // On failure the event stays on the listener (acked by its next call), as rdma-core keeps it.
  int rc = 0;
  if (e->event == RDMA_CM_EVENT_REJECTED)
    rc = ECONNREFUSED;
  else if (e->status)
    rc = e->status < 0 ? -e->status : e->status;
  else if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST)
    rc = EINVAL;
  rdma_cm_id* child = e->id;
  if (rc == 0 && l->has_ep_attr) {  // rdma_create_ep's QP attributes: the new id's QP now
    ibv_qp_init_attr attr = l->ep_attr;
    if (rdma_create_qp(child, listen->pd, &attr)) rc = errno;
  }
  if (rc) {
    listen->event = e;
    return result(rc);
  }
  child->event = e;
  *id = child;
  return 0;
}

// ---- events -------------------------------------------------------------------------------

RDMACM_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) return result(EINVAL);
  return result(g().cma.get_event(roce::rdmacm::channel_of(channel), event));
}

RDMACM_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  return result(g().cma.ack_event(event));
}

RDMACM_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR:
      return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE:
      return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED:
      return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED:
      return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED:
      return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN:
      return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR:
      return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE:
      return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

// ---- devices, QPs, SRQs -------------------------------------------------------------------

RDMACM_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
  init();
  const std::vector<Port*> ports = g().cma.ports();
  auto** list = static_cast<ibv_context**>(std::calloc(ports.size() + 1, sizeof(ibv_context*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (std::size_t i = 0; i < ports.size(); ++i) list[i] = ports[i]->verbs;
  if (num_devices) *num_devices = static_cast<int>(ports.size());
  return list;
}

RDMACM_EXPORT void rdma_free_devices(ibv_context** list) { std::free(list); }

RDMACM_EXPORT int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  if (id == nullptr || attr == nullptr) return result(EINVAL);
  if (id->verbs == nullptr) return result(EINVAL);  // no device yet: bind or resolve first
  if (id->qp != nullptr) return result(EINVAL);
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr) {
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
    attr->pd = id->pd;
  }
  if (attr->pd == nullptr) return result(ENOMEM);
  if (attr->pd->context != id->verbs) return result(EINVAL);
  if (attr->send_cq == nullptr || attr->recv_cq == nullptr) {
    id->send_cq = attr->send_cq;  // the program's, kept as they are
    id->recv_cq = attr->recv_cq;
    if (const int rc = create_cqs(id, attr->cap.max_send_wr, attr->cap.max_recv_wr)) {
      destroy_own_cqs(id);
      id->send_cq = id->recv_cq = nullptr;
      return result(rc);
    }
    attr->send_cq = id->send_cq;
    attr->recv_cq = id->recv_cq;
  }
  if (attr->srq == nullptr && id->srq != nullptr) attr->srq = id->srq;
  ibv_qp* qp = ibv_create_qp_ex(id->verbs, attr);
  if (qp == nullptr) {
    const int err = errno;
    destroy_own_cqs(id);
    return result(err ? err : ENOMEM);
  }
  if (const int rc = init_qp(id, qp)) {
    ibv_destroy_qp(qp);
    destroy_own_cqs(id);
    return result(rc);
  }
  id->qp = qp;
  return 0;
}

RDMACM_EXPORT int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || qp_init_attr == nullptr) return result(EINVAL);
  ibv_qp_init_attr_ex ex{};
  ex.qp_context = qp_init_attr->qp_context;
  ex.send_cq = qp_init_attr->send_cq;
  ex.recv_cq = qp_init_attr->recv_cq;
  ex.srq = qp_init_attr->srq;
  ex.cap = qp_init_attr->cap;
  ex.qp_type = qp_init_attr->qp_type;
  ex.sq_sig_all = qp_init_attr->sq_sig_all;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd ? pd : id->pd;
  const int rc = rdma_create_qp_ex(id, &ex);
  // As rdma-core, the attributes come back updated (caps, CQs made here), failed or not.
  qp_init_attr->send_cq = ex.send_cq;
  qp_init_attr->recv_cq = ex.recv_cq;
  qp_init_attr->srq = ex.srq;
  qp_init_attr->cap = ex.cap;
  return rc;
}

RDMACM_EXPORT void rdma_destroy_qp(rdma_cm_id* id) {
  if (id == nullptr) return;
  if (id->qp) ibv_destroy_qp(id->qp);
  id->qp = nullptr;
  destroy_own_cqs(id);
}

RDMACM_EXPORT int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  if (id == nullptr || attr == nullptr) return result(EINVAL);
  if (id->verbs == nullptr) return result(EINVAL);
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) {
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_TYPE;
    attr->srq_type = IBV_SRQT_BASIC;
  }
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == nullptr) {
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    attr->pd = id->pd;
  }
  if (attr->srq_type != IBV_SRQT_BASIC) return result(ENOSYS);  // XRC
  ibv_srq_init_attr basic{};
  basic.srq_context = attr->srq_context;
  basic.attr = attr->attr;
  ibv_srq* srq = ibv_create_srq(attr->pd, &basic);
  if (srq == nullptr) return -1;
  attr->attr = basic.attr;
  id->srq = srq;
  return 0;
}

RDMACM_EXPORT int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (id == nullptr || attr == nullptr) return result(EINVAL);
  ibv_srq_init_attr_ex ex{};
  ex.srq_context = attr->srq_context;
  ex.attr = attr->attr;
  ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  ex.srq_type = IBV_SRQT_BASIC;
  ex.pd = pd ? pd : id->pd;
  if (rdma_create_srq_ex(id, &ex)) return -1;
  attr->attr = ex.attr;
  return 0;
}

RDMACM_EXPORT void rdma_destroy_srq(rdma_cm_id* id) {
  if (id == nullptr || id->srq == nullptr) return;
  ibv_destroy_srq(id->srq);
  id->srq = nullptr;
}

// ---- endpoints (synchronous ids) ----------------------------------------------------------

RDMACM_EXPORT int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd,
                                 ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr) return result(EINVAL);
  init();
  const rdma_port_space ps = res->ai_port_space
                                 ? static_cast<rdma_port_space>(res->ai_port_space)
                                 : (res->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP);
  const ibv_qp_type type = res->ai_qp_type ? static_cast<ibv_qp_type>(res->ai_qp_type)
                                           : (ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC);
  Id* i = g().cma.create_id(nullptr, nullptr, ps, type);
  if (i == nullptr) return -1;
  rdma_cm_id* cm = &i->pub;
  int rc;
  if (res->ai_flags & RAI_PASSIVE) {
    rc = rdma_bind_addr(cm, res->ai_src_addr);
    if (rc == 0 && pd) cm->pd = pd;
    if (rc == 0 && qp_init_attr) {
      i->has_ep_attr = true;
      i->ep_attr = *qp_init_attr;
      i->ep_attr.qp_type = type;
    }
  } else {
    rc =
        rdma_resolve_addr(cm, res->ai_src_len ? res->ai_src_addr : nullptr, res->ai_dst_addr, 2000);
    if (rc == 0) rc = rdma_resolve_route(cm, 2000);
    if (rc == 0 && qp_init_attr) {
      qp_init_attr->qp_type = type;
      rc = rdma_create_qp(cm, pd, qp_init_attr);
    }
  }
  if (rc) {
    const int err = errno;
    rdma_destroy_id(cm);
    return result(err);
  }
  *id = cm;
  return 0;
}

RDMACM_EXPORT void rdma_destroy_ep(rdma_cm_id* id) {
  if (id == nullptr) return;
  if (id->qp) rdma_destroy_qp(id);
  if (id->srq) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

// ---- multicast: not offered (the appliance has no multicast groups) ------------------------

RDMACM_EXPORT int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  (void)id;
  (void)addr;
  (void)context;
  return result(ENOSYS);
}

RDMACM_EXPORT int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* mc_join_attr,
                                         void* context) {
  (void)id;
  (void)mc_join_attr;
  (void)context;
  return result(ENOSYS);
}

RDMACM_EXPORT int rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr) {
  (void)id;
  (void)addr;
  return result(EADDRNOTAVAIL);  // never joined
}

// ---- rdma_getaddrinfo ----------------------------------------------------------------------

namespace {

int copy_addr(sockaddr** dst, socklen_t* dst_len, const sockaddr* src, socklen_t len) {
  *dst = static_cast<sockaddr*>(std::malloc(len));
  if (*dst == nullptr) return ENOMEM;
  std::memcpy(*dst, src, len);
  *dst_len = len;
  return 0;
}

}  // namespace

RDMACM_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

RDMACM_EXPORT int rdma_getaddrinfo(const char* node, const char* service,
                                   const rdma_addrinfo* hints, rdma_addrinfo** res) {
  if (res == nullptr || (!node && !service && !hints)) return result(EINVAL);
  static const rdma_addrinfo kNoHints{};
  if (hints == nullptr) hints = &kNoHints;
  auto* rai = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (rai == nullptr) return result(ENOMEM);
  int rc = 0;
  if (node || service) {
    addrinfo h{};
    addrinfo* ai = nullptr;
    if (hints != &kNoHints) {
      if (hints->ai_flags & RAI_PASSIVE) h.ai_flags |= AI_PASSIVE;
      if (hints->ai_flags & RAI_NUMERICHOST) h.ai_flags |= AI_NUMERICHOST;
      if (hints->ai_family != AF_IB) h.ai_family = hints->ai_family;
      if (hints->ai_qp_type == IBV_QPT_RC || hints->ai_port_space == RDMA_PS_TCP) {
        h.ai_socktype = SOCK_STREAM;
        h.ai_protocol = IPPROTO_TCP;
      } else if (hints->ai_qp_type == IBV_QPT_UD || hints->ai_port_space == RDMA_PS_UDP) {
        h.ai_socktype = SOCK_DGRAM;
        h.ai_protocol = IPPROTO_UDP;
      }
    }
    // getaddrinfo's EAI_* code is the result, as rdma-core returns it.
    rc = getaddrinfo(node, service, hints != &kNoHints ? &h : nullptr, &ai);
    if (rc) {
      std::free(rai);
      return rc;
    }
    rai->ai_qp_type = hints->ai_qp_type ? hints->ai_qp_type
                                        : (ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC);
    rai->ai_port_space = hints->ai_port_space
                             ? hints->ai_port_space
                             : (ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP : RDMA_PS_TCP);
    rai->ai_family = ai->ai_family;
    if (hints->ai_flags & RAI_PASSIVE) {
      rai->ai_flags = RAI_PASSIVE;
      if (ai->ai_canonname) rai->ai_src_canonname = strdup(ai->ai_canonname);
      rc = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, ai->ai_addr, ai->ai_addrlen);
    } else {
      if (ai->ai_canonname) rai->ai_dst_canonname = strdup(ai->ai_canonname);
      rc = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
    }
    freeaddrinfo(ai);
  } else {
    rai->ai_flags = hints->ai_flags;
    rai->ai_family = hints->ai_family;
    rai->ai_qp_type = hints->ai_qp_type;
    rai->ai_port_space = hints->ai_port_space;
    if (hints->ai_dst_len)
      rc = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, hints->ai_dst_addr, hints->ai_dst_len);
  }
  if (rc == 0 && !rai->ai_src_len && hints->ai_src_len)
    rc = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, hints->ai_src_addr, hints->ai_src_len);
  if (rc) {
    rdma_freeaddrinfo(rai);
    return result(rc);
  }
  *res = rai;
  return 0;
}

// Internal to the library (rsocket.cc): rdma-core's ucma_complete on a synchronous id: acks the
// id's last event, takes its next one (EAGAIN when its channel's fd is O_NONBLOCK and nothing
// waits) and returns 0 or the event's status as an errno value.
int roce_rdmacm_complete(rdma_cm_id* id);
int roce_rdmacm_complete(rdma_cm_id* id) { return g().cma.complete(id_of(id)); }
