#include "verbs/rdmacm/cma.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>

namespace roce::rdmacm {
namespace {

using Clock = std::chrono::steady_clock;

/// The engine's limit on outstanding READs and atomics (the CM clamps to it as well).
constexpr std::uint8_t kMaxRdAtomic = 16;
/// Linux's ip_local_port_range, where rdma_cm's ephemeral ports come from.
constexpr std::uint16_t kEphemeralLow = 32768, kEphemeralHigh = 60999;
/// The kernel's listen backlog when a program asks for 0 or less.
constexpr int kDefaultBacklog = 1024;

struct Ipv4 {
  std::uint32_t ip = 0;  ///< host order; 0: any
  std::uint16_t port = 0;
};

/// An IPv4 address (AF_INET, or AF_INET6 mapped or unspecified): nullopt for anything else.
std::optional<Ipv4> ipv4_of(const sockaddr* a) {
  if (a == nullptr) return std::nullopt;
  if (a->sa_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(a);
    return Ipv4{ntohl(s->sin_addr.s_addr), ntohs(s->sin_port)};
  }
  if (a->sa_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(a);
    if (IN6_IS_ADDR_UNSPECIFIED(&s->sin6_addr)) return Ipv4{0, ntohs(s->sin6_port)};
    if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr)) {
      std::uint32_t v;
      std::memcpy(&v, s->sin6_addr.s6_addr + 12, 4);
      return Ipv4{ntohl(v), ntohs(s->sin6_port)};
    }
  }
  return std::nullopt;
}

void set_sin(sockaddr_in& s, std::uint32_t ip, std::uint16_t port) {
  std::memset(&s, 0, sizeof s);
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(ip);
  s.sin_port = htons(port);
}

std::uint16_t port_of(const rdma_addr& a, bool src) {
  const sockaddr* s = src ? &a.src_addr : &a.dst_addr;
  if (s->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(s)->sin_port);
  if (s->sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(s)->sin6_port);
  return 0;
}

void set_port_of(rdma_addr& a, std::uint16_t port) {
  if (a.src_addr.sa_family == AF_INET) a.src_sin.sin_port = htons(port);
  if (a.src_addr.sa_family == AF_INET6) a.src_sin6.sin6_port = htons(port);
}

std::uint32_t dst_ip(const Id* id) { return ntohl(id->pub.route.addr.dst_sin.sin_addr.s_addr); }

void copy_private(Event* e, const std::vector<std::uint8_t>& data, std::size_t field) {
  std::memcpy(e->private_data, data.data(), std::min(data.size(), field));
  e->pub.param.conn.private_data = e->private_data;
  e->pub.param.conn.private_data_len = static_cast<std::uint8_t>(field);
}

std::uint8_t clamp_rd(std::uint8_t v) { return std::min(v, kMaxRdAtomic); }

}  // namespace

Cma::~Cma() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  timer_cv_.notify_all();
  if (timer_.joinable()) timer_.join();
  for (Id* id : ids_) delete id;
  for (Channel* c : channels_) {
    for (Event* e : c->queue) delete e;
    close(c->pub.fd);
    delete c;
  }
}

void Cma::add_port(Port* p) {
  std::lock_guard lk(mu_);
  ports_.push_back(p);
}

std::vector<Port*> Cma::ports() {
  std::lock_guard lk(mu_);
  return ports_;
}

Channel* Cma::create_channel(bool sync) {
  std::lock_guard lk(mu_);
  return make_channel(sync);
}

Channel* Cma::make_channel(bool sync) {
  const int fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  if (fd < 0) return nullptr;
  auto* c = new Channel;
  c->pub.fd = fd;
  c->sync = sync;
  channels_.insert(c);
  return c;
}

int Cma::destroy_channel(Channel* c) {
  if (c == nullptr) return EINVAL;
  std::lock_guard lk(mu_);
  if (c->ids != 0) return EBUSY;
  for (Event* e : c->queue) delete e;
  c->queue.clear();
  close(c->pub.fd);
  // A thread still blocked in rdma_get_cm_event keeps waiting, as on the kernel's closed file
  // (rping destroys its channel while its CM thread reads it): the channel stays for it.
  if (c->readers > 0) {
    c->closed = true;
  } else {
    channels_.erase(c);
    delete c;
  }
  return 0;
}

Id* Cma::create_id(Channel* c, void* context, rdma_port_space ps, ibv_qp_type qp_type) {
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB) {
    errno = EINVAL;
    return nullptr;
  }
  if (ps == RDMA_PS_IB || ps == RDMA_PS_IPOIB) {  // AF_IB service ids: no such CM here
    errno = ENOSYS;
    return nullptr;
  }
  const bool sync = c == nullptr;
  if (sync && (c = create_channel(true)) == nullptr) return nullptr;
  auto* id = new Id;
  id->pub.channel = &c->pub;
  id->pub.context = context;
  id->pub.ps = ps;
  id->pub.qp_type = qp_type;
  id->channel = c;
  id->sync = sync;
  std::lock_guard lk(mu_);
  ++c->ids;
  ids_.insert(id);
  return id;
}

void Cma::set_port(Id* id, Port* p) {
  id->port = p;
  id->pub.verbs = p->verbs;
  id->pub.pd = p->pd;
  id->pub.port_num = 1;
}

Port* Cma::port_with(std::uint32_t ipv4) {
  for (Port* p : ports_)
    if (p->ctx->port().ipv4.v == ipv4) return p;
  return nullptr;
}

int Cma::bind(Id* id, const sockaddr* addr) {
  if (addr == nullptr) return EINVAL;
  // rdma-core takes no address of a family it does not know (EINVAL); AF_IB needs IB's CM.
  if (addr->sa_family == AF_IB) return EAFNOSUPPORT;
  if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) return EINVAL;
  const std::optional<Ipv4> a = ipv4_of(addr);
  if (!a) return EADDRNOTAVAIL;  // an IPv6 address: the ports have IPv4 addresses only
  std::lock_guard lk(mu_);
  if (id->state != State::kIdle) return EINVAL;
  Port* p = nullptr;
  if (a->ip != 0 && (p = port_with(a->ip)) == nullptr) return EADDRNOTAVAIL;
  std::uint16_t port = a->port;
  if (port == 0) {
    static std::mt19937 rng{std::random_device{}()};
    std::uniform_int_distribution<int> d(kEphemeralLow, kEphemeralHigh);
    for (int i = 0; i < 1000 && (port == 0 || bound_ports_.count(key(id, port))); ++i)
      port = static_cast<std::uint16_t>(d(rng));
    if (bound_ports_.count(key(id, port))) return EADDRINUSE;
  } else if (bound_ports_.count(key(id, port)) && !id->reuseaddr) {
    return EADDRINUSE;
  }
  bound_ports_.insert(key(id, port));
  id->bound = port;
  id->owns_port = true;
  const socklen_t len = addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  std::memset(&id->pub.route.addr.src_storage, 0, sizeof id->pub.route.addr.src_storage);
  std::memcpy(&id->pub.route.addr.src_storage, addr, len);
  set_port_of(id->pub.route.addr, port);
  if (p != nullptr) set_port(id, p);
  id->state = State::kBound;
  return 0;
}

void Cma::fill_route(Id* id) {
  const client::PortInfo& pi = id->port->ctx->port();
  rdma_route& r = id->pub.route;
  std::memcpy(r.addr.addr.ibaddr.sgid.raw, pi.gid.b.data(), 16);
  const Ipv6Addr dgid = ipv4_mapped(Ipv4Addr{dst_ip(id)});
  std::memcpy(r.addr.addr.ibaddr.dgid.raw, dgid.b.data(), 16);
  r.addr.addr.ibaddr.pkey = htons(0xFFFF);
  ibv_sa_path_rec& path = id->path;
  path = {};
  path.sgid = r.addr.addr.ibaddr.sgid;
  path.dgid = r.addr.addr.ibaddr.dgid;
  path.pkey = htons(0xFFFF);
  path.reversible = 1;
  path.numb_path = 1;
  path.hop_limit = 64;
  path.traffic_class = id->tos;
  path.mtu_selector = 2;  // exactly
  path.mtu = static_cast<std::uint8_t>(pi.max_mtu);
  path.rate_selector = 2;
  path.rate = 3;  // 10 Gb/s, as rdma_cm reports for an Ethernet port it cannot measure
  path.packet_life_time_selector = 2;
  path.packet_life_time = 16;
}

int Cma::resolve_addr(Id* id, const sockaddr* src, const sockaddr* dst, int timeout_ms) {
  if (dst == nullptr) return EINVAL;
  if (dst->sa_family != AF_INET && dst->sa_family != AF_INET6 && dst->sa_family != AF_IB)
    return EINVAL;
  const std::optional<Ipv4> d = ipv4_of(dst);
  if (!d || d->ip == 0) return d ? EINVAL : EAFNOSUPPORT;
  // Multicast (224/4) and broadcast: the kernel maps them to a group's MAC for
  // rdma_join_multicast, which the appliance does not offer; asking ARP for them would only
  // time out (ADDR_ERROR -110 after the timeout). Say so at once.
  if ((d->ip >> 28) == 0xe || d->ip == 0xffffffffu) return EOPNOTSUPP;
  if (src != nullptr) {
    bool idle;
    {
      std::lock_guard lk(mu_);
      idle = id->state == State::kIdle;
    }
    if (idle)
      if (const int rc = bind(id, src)) return rc;
  } else {
    bool idle;
    {
      std::lock_guard lk(mu_);
      idle = id->state == State::kIdle;
    }
    if (idle) {
      sockaddr_in any{};
      any.sin_family = AF_INET;
      if (const int rc = bind(id, reinterpret_cast<const sockaddr*>(&any))) return rc;
    }
  }
  {
    std::lock_guard lk(mu_);
    if (id->state != State::kBound) return EINVAL;
    if (id->port == nullptr) {
      Port* p = port_with(d->ip);
      if (p == nullptr && !ports_.empty()) p = ports_.front();
      if (p == nullptr) return ENODEV;
      set_port(id, p);
    }
    // The source: the port's address (bound to "any": rdma_cm reports the one it chose).
    set_sin(id->pub.route.addr.src_sin, id->port->ctx->port().ipv4.v, id->bound);
    set_sin(id->pub.route.addr.dst_sin, d->ip, d->port);
    id->state = State::kAddrQuery;
    const Clock::time_point now = Clock::now();
    id->deadline = now + std::chrono::milliseconds(std::max(timeout_ms, 1));
    id->next_ask = now;
    check_resolve(id, now);
    if (id->state == State::kAddrQuery) {
      resolving_.insert(id);
      if (!timer_.joinable()) timer_ = std::thread([this] { timer_loop(); });
      timer_cv_.notify_all();
    }
  }
  return id->sync ? complete(id) : 0;
}

void Cma::check_resolve(Id* id, Clock::time_point now) {
  Port* p = id->port;
  const std::uint32_t ip = dst_ip(id);
  int rc = 0;
  if (ip != p->ctx->port().ipv4.v) {
    const bool ask = now >= id->next_ask;
    if (ask) id->next_ask = now + std::chrono::seconds(1);
    std::lock_guard lk(*p->lock);
    rc = p->ctx->neighbour(Ipv4Addr{ip}, ask);
  }
  if (rc == 0 || rc == EOPNOTSUPP) {  // EOPNOTSUPP: the backend resolves at connect time
    fill_route(id);
    id->state = State::kAddrResolved;
    resolving_.erase(id);
    queue(id->channel, new_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0));
    return;
  }
  if (rc == EAGAIN && now < id->deadline) return;
  id->state = State::kBound;
  resolving_.erase(id);
  queue(id->channel, new_event(id, RDMA_CM_EVENT_ADDR_ERROR, rc == EAGAIN ? -ETIMEDOUT : -rc));
}

void Cma::timer_loop() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    if (resolving_.empty()) {
      timer_cv_.wait(lk);
      continue;
    }
    timer_cv_.wait_for(lk, std::chrono::milliseconds(2));
    const Clock::time_point now = Clock::now();
    const std::vector<Id*> ids(resolving_.begin(), resolving_.end());
    for (Id* id : ids) check_resolve(id, now);
  }
}

int Cma::resolve_route(Id* id, int timeout_ms) {
  (void)timeout_ms;  // the route is the address's: known at once
  {
    std::lock_guard lk(mu_);
    if (id->state != State::kAddrResolved) return EINVAL;
    id->state = State::kRouteResolved;
    id->pub.route.path_rec = &id->path;
    id->pub.route.num_paths = 1;
    queue(id->channel, new_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
  }
  return id->sync ? complete(id) : 0;
}

int Cma::listen(Id* id, int backlog) {
  bool idle;
  {
    std::lock_guard lk(mu_);
    idle = id->state == State::kIdle;
  }
  if (idle) {  // rdma_listen on an unbound id binds it to "any" and an ephemeral port
    sockaddr_in any{};
    any.sin_family = AF_INET;
    if (const int rc = bind(id, reinterpret_cast<const sockaddr*>(&any))) return rc;
  }
  std::lock_guard lk(mu_);
  if (id->state == State::kListen) {  // a second rdma_listen changes the backlog only
    id->backlog = backlog > 0 ? backlog : kDefaultBacklog;
    return 0;
  }
  if (id->state != State::kBound) return EINVAL;
  std::vector<Port*> ports = id->port ? std::vector<Port*>{id->port} : ports_;
  if (ports.empty()) return ENODEV;
  const std::uint16_t lport = id->bound;
  for (Port* p : ports) {
    if (listeners_.count({p, key(id, lport)})) return EADDRINUSE;
    if (!p->listened.count(key(id, lport))) {
      std::lock_guard plk(*p->lock);
      const int rc = is_ud(id) ? p->ctx->cm_sidr_listen(lport) : p->ctx->cm_listen(lport);
      if (rc) return rc == EOPNOTSUPP ? ENOSYS : rc;
      p->listened.insert(key(id, lport));
    }
  }
  for (Port* p : ports) listeners_[{p, key(id, lport)}] = id;
  id->listen_ports = ports;
  id->backlog = backlog > 0 ? backlog : kDefaultBacklog;
  id->state = State::kListen;
  return 0;
}

Event* Cma::new_event(Id* id, rdma_cm_event_type type, int status) {
  auto* e = new Event;
  e->pub.id = &id->pub;
  e->pub.event = type;
  e->pub.status = status;
  e->owner = id;
  return e;
}

void Cma::queue(Channel* c, Event* e) {
  c->queue.push_back(e);
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(c->pub.fd, &one, sizeof one);
}

void Cma::unqueue_token(Channel* c) {
  std::uint64_t v;
  [[maybe_unused]] const ssize_t n = read(c->pub.fd, &v, sizeof v);
}

int Cma::connect_ud(Id* id, const rdma_conn_param* p) {
  std::span<const std::uint8_t> pd;
  if (p != nullptr) {
    if (p->private_data_len > kSidrReqPrivate || (p->private_data_len && !p->private_data))
      return EINVAL;
    pd = {static_cast<const std::uint8_t*>(p->private_data), p->private_data_len};
  }
  {
    std::lock_guard lk(mu_);
    if (id->state != State::kRouteResolved) return EINVAL;
    std::uint32_t conn = 0;
    {
      std::lock_guard plk(*id->port->lock);
      const int rc = id->port->ctx->cm_sidr_resolve(Ipv4Addr{dst_ip(id)},
                                                    port_of(id->pub.route.addr, false), pd, conn);
      if (rc) return rc == EOPNOTSUPP ? ENOSYS : rc;
    }
    id->has_conn = true;
    id->conn = conn;
    conns_[{id->port, conn}] = id;
    id->state = State::kConnecting;
  }
  return id->sync ? complete(id) : 0;
}

int Cma::set_local_ece(Id* id, const ibv_ece* ece) {
  if (ece == nullptr || id->pub.qp != nullptr || ece->vendor_id == 0 || ece->comp_mask != 0)
    return EINVAL;
  std::lock_guard lk(mu_);
  id->local_ece = {ece->vendor_id, ece->options, 0};
  return 0;
}

int Cma::get_remote_ece(Id* id, ibv_ece* ece) {
  if (ece == nullptr || id->pub.qp != nullptr) return EINVAL;
  std::lock_guard lk(mu_);
  *ece = {id->remote_ece.vendor_id, id->remote_ece.options, 0};
  return 0;
}

void Cma::default_local_ece(Id* id, const ibv_ece& ece) {
  std::lock_guard lk(mu_);
  if (id->local_ece.vendor_id == 0 && ece.vendor_id != 0)
    id->local_ece = {ece.vendor_id, ece.options, 0};
}

int Cma::connect(Id* id, client::Qp* qp, const rdma_conn_param* p) {
  if (is_ud(id)) return connect_ud(id, p);  // SIDR: no QP needed to ask
  if (qp == nullptr) return EINVAL;
  client::CmConnParam cp;
  cp.responder_resources = cp.initiator_depth = kMaxRdAtomic;
  if (p != nullptr) {
    if (p->private_data_len > kReqPrivate || (p->private_data_len && !p->private_data))
      return EINVAL;
    cp.responder_resources = clamp_rd(p->responder_resources);
    cp.initiator_depth = clamp_rd(p->initiator_depth);
    cp.retry_count = std::min<std::uint8_t>(p->retry_count, 7);
    cp.rnr_retry = std::min<std::uint8_t>(p->rnr_retry_count, 7);
    const auto* b = static_cast<const std::uint8_t*>(p->private_data);
    cp.private_data.assign(b, b + p->private_data_len);
  }
  {
    std::lock_guard lk(mu_);
    if (id->state != State::kRouteResolved) return EINVAL;
    cp.ece_vendor = id->local_ece.vendor_id;
    cp.ece_options = id->local_ece.options;
    std::uint32_t conn = 0;
    {
      std::lock_guard plk(*id->port->lock);
      const int rc = id->port->ctx->cm_connect(qp, Ipv4Addr{dst_ip(id)},
                                               port_of(id->pub.route.addr, false), cp, conn);
      if (rc) return rc;
    }
    id->has_conn = true;
    id->conn = conn;
    conns_[{id->port, conn}] = id;
    id->state = State::kConnecting;
  }
  return id->sync ? complete(id) : 0;
}

int Cma::accept(Id* id, client::Qp* qp, const rdma_conn_param* p) {
  if (is_ud(id)) {  // SIDR_REP with our QPN and rdma_cm's Q_Key; no event follows
    std::span<const std::uint8_t> pd;
    if (p != nullptr) {
      if (p->private_data_len > kSidrRepPrivate || (p->private_data_len && !p->private_data))
        return EINVAL;
      pd = {static_cast<const std::uint8_t*>(p->private_data), p->private_data_len};
    }
    const std::uint32_t qpn = qp ? qp->qp_num : (p ? p->qp_num : 0);
    if (qpn == 0) return EINVAL;
    std::lock_guard lk(mu_);
    if (id->state != State::kRequest) return EINVAL;
    {
      std::lock_guard plk(*id->port->lock);
      if (const int rc = id->port->ctx->cm_sidr_accept(id->conn, qpn, RDMA_UDP_QKEY, pd)) return rc;
    }
    id->state = State::kConnected;
    if (id->listener) --id->listener->pending;
    id->listener = nullptr;
    drop_conn(id);
    return 0;
  }
  if (qp == nullptr) return EINVAL;
  Port* port;
  std::uint32_t peer;
  client::CmConnParam cp;
  {
    std::lock_guard lk(mu_);
    if (id->state != State::kRequest) return EINVAL;
    port = id->port;
    peer = dst_ip(id);
    cp.responder_resources = id->req_responder_resources;
    cp.initiator_depth = id->req_initiator_depth;
    cp.ece_vendor = id->local_ece.vendor_id;
    cp.ece_options = id->local_ece.options;
  }
  if (p != nullptr) {
    if (p->private_data_len > kRepPrivate || (p->private_data_len && !p->private_data))
      return EINVAL;
    if (p->responder_resources != RDMA_MAX_RESP_RES)
      cp.responder_resources = clamp_rd(p->responder_resources);
    if (p->initiator_depth != RDMA_MAX_INIT_DEPTH)
      cp.initiator_depth = clamp_rd(p->initiator_depth);
    cp.rnr_retry = std::min<std::uint8_t>(p->rnr_retry_count, 7);
    const auto* b = static_cast<const std::uint8_t*>(p->private_data);
    cp.private_data.assign(b, b + p->private_data_len);
  }
  // The REP needs the requester's MAC: ask the port (ARP) and give it a moment, without mu_.
  for (int i = 0; i < 1500; ++i) {
    int rc;
    {
      std::lock_guard plk(*port->lock);
      rc = port->ctx->neighbour(Ipv4Addr{peer}, i % 500 == 0);
    }
    if (rc != EAGAIN) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  {
    std::lock_guard lk(mu_);
    if (id->state != State::kRequest) return EINVAL;
    {
      std::lock_guard plk(*port->lock);
      if (const int rc = port->ctx->cm_accept(id->conn, qp, cp)) return rc;
    }
    id->state = State::kAccepting;
    if (id->listener) --id->listener->pending;
    id->listener = nullptr;
  }
  return id->sync ? complete(id) : 0;
}

int Cma::reject(Id* id, const void* private_data, std::uint8_t len) {
  if (len > kRejPrivate || (len && !private_data)) return EINVAL;
  std::lock_guard lk(mu_);
  if (id->state != State::kRequest) return EINVAL;
  const auto* b = static_cast<const std::uint8_t*>(private_data);
  {
    std::lock_guard plk(*id->port->lock);
    const int rc = is_ud(id) ? id->port->ctx->cm_sidr_reject(id->conn)
                             : id->port->ctx->cm_reject(id->conn, {b, len});
    if (rc) return rc;
  }
  id->state = State::kClosed;
  if (id->listener) --id->listener->pending;
  id->listener = nullptr;
  drop_conn(id);
  return 0;
}

int Cma::disconnect(Id* id) {
  std::lock_guard lk(mu_);
  if (is_ud(id)) return EINVAL;  // a SIDR exchange leaves nothing to disconnect
  switch (id->state) {
    case State::kConnecting:
    case State::kAccepting:
    case State::kConnected: {
      std::lock_guard plk(*id->port->lock);
      // A connection the peer is already ending answers with EINVAL: rdma_cm returns 0 then.
      if (id->port->ctx->cm_disconnect(id->conn) == 0) dreqs_.insert({id->port, id->conn});
      last_cm_ = Clock::now();
      return 0;
    }
    case State::kDisconnected:
      return 0;
    default:
      return EINVAL;
  }
}

int Cma::notify(Id* id, ibv_event_type ev) {
  std::lock_guard lk(mu_);
  if (!id->has_conn) return EINVAL;
  if (ev != IBV_EVENT_COMM_EST) return 0;
  std::lock_guard plk(*id->port->lock);
  const int rc = id->port->ctx->cm_notify(id->conn);
  return rc == EOPNOTSUPP ? 0 : rc;  // without it the REP's retransmission establishes
}

void Cma::drop_conn(Id* id) {
  if (!id->has_conn) return;
  conns_.erase({id->port, id->conn});
  id->has_conn = false;
}

int Cma::destroy_id(Id* id) {
  if (id == nullptr) return EINVAL;
  if (id->sync && id->pub.event) {
    ack_event(id->pub.event);
    id->pub.event = nullptr;
  }
  std::vector<Id*> orphans;  // requests nobody retrieved from a listener going away
  std::unique_lock lk(mu_);
  acked_.wait(lk, [&] { return id->unacked == 0; });
  // Events of the id not yet retrieved go with it.
  auto& q = id->channel->queue;
  for (auto it = q.begin(); it != q.end();) {
    Event* e = *it;
    if (e->owner == id || e->pub.id == &id->pub) {
      if (e->pub.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->owner == id)
        orphans.push_back(id_of(e->pub.id));
      delete e;
      it = q.erase(it);
      unqueue_token(id->channel);
    } else {
      ++it;
    }
  }
  if (id->state == State::kListen) {
    for (Port* p : id->listen_ports) {
      listeners_.erase({p, key(id, id->bound)});
      // Nobody listens any more: the CM answers "invalid service ID" (REJ 8), as the kernel
      // does, where a Context without unlisten leaves us to reject (REJ 28).
      std::lock_guard plk(*p->lock);
      if (p->ctx->cm_unlisten(id->bound, is_ud(id)) == 0) p->listened.erase(key(id, id->bound));
    }
    for (Id* other : ids_)
      if (other->listener == id) other->listener = nullptr;
  }
  resolving_.erase(id);
  if (id->port && id->has_conn) {
    std::lock_guard plk(*id->port->lock);
    if (id->state == State::kRequest && is_ud(id))
      id->port->ctx->cm_sidr_reject(id->conn);
    else if (id->state == State::kRequest)
      id->port->ctx->cm_reject(id->conn, {});
    else if (id->state == State::kConnecting && !is_ud(id) &&
             id->port->ctx->cm_reject(id->conn, {}) == 0)
      ;  // our REQ not answered yet: given up with a REJ, as Linux does
    else if (is_ud(id))
      ;  // a SIDR request under way: its reply finds no id
    else if ((id->state == State::kConnecting || id->state == State::kAccepting ||
              id->state == State::kConnected) &&
             id->port->ctx->cm_disconnect(id->conn) == 0)
      dreqs_.insert({id->port, id->conn});
    last_cm_ = Clock::now();
  }
  if (id->listener) --id->listener->pending;
  drop_conn(id);
  if (id->owns_port) bound_ports_.erase(key(id, id->bound));
  Channel* own = id->sync ? id->channel : nullptr;
  --id->channel->ids;
  ids_.erase(id);
  delete id;
  lk.unlock();
  if (own) destroy_channel(own);
  for (Id* o : orphans) destroy_id(o);
  return 0;
}

int Cma::migrate(Id* id, Channel* c) {
  if (c == nullptr) return EINVAL;
  Channel* old_sync = nullptr;
  {
    std::lock_guard lk(mu_);
    if (id->unacked) return EBUSY;
    Channel* old = id->channel;
    if (old == c) return 0;
    auto& q = old->queue;
    for (auto it = q.begin(); it != q.end();) {
      if ((*it)->owner == id || (*it)->pub.id == &id->pub) {
        queue(c, *it);
        it = q.erase(it);
        unqueue_token(old);
      } else {
        ++it;
      }
    }
    --old->ids;
    ++c->ids;
    id->channel = c;
    id->pub.channel = &c->pub;
    if (id->sync) old_sync = old;
    id->sync = false;
  }
  if (old_sync) destroy_channel(old_sync);
  return 0;
}

int Cma::set_option(Id* id, int level, int optname, const void* optval, std::size_t optlen) {
  if (optval == nullptr) return EINVAL;
  std::lock_guard lk(mu_);
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(std::uint8_t)) return EINVAL;
        id->tos = *static_cast<const std::uint8_t*>(optval);
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
        if (optlen != sizeof(int)) return EINVAL;
        if (id->state != State::kIdle) return EINVAL;
        id->reuseaddr = *static_cast<const int*>(optval) != 0;
        return 0;
      case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int)) return EINVAL;
        if (id->state != State::kIdle) return EINVAL;
        id->afonly = *static_cast<const int*>(optval) != 0;
        return 0;
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(std::uint8_t)) return EINVAL;
        id->ack_timeout = *static_cast<const std::uint8_t*>(optval);
        return 0;
      default:
        return ENOSYS;
    }
  }
  if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) {
    if (optlen == 0 || optlen % sizeof(ibv_path_data) != 0) return EINVAL;
    if (id->state != State::kAddrResolved) return EINVAL;
    // A path given by the program: the route is then resolved (rdma_set_ib_path).
    id->state = State::kRouteResolved;
    id->pub.route.path_rec = &id->path;
    id->pub.route.num_paths = 1;
    return 0;
  }
  return ENOSYS;
}

int Cma::get_event(Channel* c, rdma_cm_event** out) {
  if (c == nullptr || out == nullptr) return EINVAL;
  {
    std::lock_guard lk(mu_);
    if (c->closed) return EBADF;
    ++c->readers;
  }
  // The program's O_NONBLOCK on the fd makes an empty channel EAGAIN, as the kernel's file.
  const int flags = fcntl(c->pub.fd, F_GETFL);
  const bool nonblock = flags >= 0 && (flags & O_NONBLOCK);
  for (;;) {
    pollfd p{c->pub.fd, POLLIN, 0};
    const int n = poll(&p, 1, nonblock ? 0 : -1);
    const int err = errno;
    std::unique_lock lk(mu_);
    if (c->closed) {  // destroyed while we waited: block as a read of the kernel's file would
      for (;;) acked_.wait(lk);
    }
    if (!c->queue.empty()) {
      Event* e = c->queue.front();
      c->queue.pop_front();
      unqueue_token(c);
      // A connect request read: its listener's backlog slot is free again (ucma_get_event).
      if (e->pub.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        Id* req = id_of(e->pub.id);
        if (req->listener) --req->listener->pending;
        req->listener = nullptr;
      }
      ++e->owner->unacked;
      --c->readers;
      *out = &e->pub;
      return 0;
    }
    // Empty: another reader took the event, or it went with its id (destroy_id, migrate).
    int rc = 0;
    if (n < 0 && err != EINTR)
      rc = err;
    else if (n > 0 && (p.revents & POLLNVAL))
      rc = EBADF;
    else if (n == 0 && nonblock)
      rc = EAGAIN;
    if (rc) {
      --c->readers;
      return rc;
    }
  }
}

int Cma::ack_event(rdma_cm_event* ev) {
  if (ev == nullptr) return EINVAL;
  Event* e = reinterpret_cast<Event*>(ev);
  {
    std::lock_guard lk(mu_);
    --e->owner->unacked;
  }
  acked_.notify_all();
  delete e;
  return 0;
}

int Cma::complete(Id* id) {
  if (id->pub.event) {
    ack_event(id->pub.event);
    id->pub.event = nullptr;
  }
  rdma_cm_event* e = nullptr;
  if (const int rc = get_event(id->channel, &e)) return rc;
  id->pub.event = e;
  if (e->status == 0) return 0;
  if (e->event == RDMA_CM_EVENT_REJECTED) return ECONNREFUSED;
  return e->status < 0 ? -e->status : e->status;
}

void Cma::deliver_request(Port* port, client::CmEvent&& ev) {
  const bool ud = ev.type == client::CmEventType::kSidrRequest;
  const std::uint32_t k = (ud ? 0x10000u : 0u) | ev.port;
  auto it = listeners_.find({port, k});
  Id* l = it == listeners_.end() ? nullptr : it->second;
  auto refuse = [&](bool no_listener) {
    std::lock_guard plk(*port->lock);
    if (ud)
      port->ctx->cm_sidr_reject(ev.id);
    else if (no_listener)
      port->ctx->cm_reject(ev.id, {});
    else
      port->ctx->cm_refuse(ev.id);
  };
  if (l == nullptr || l->pending >= l->backlog) return refuse(l == nullptr);
  Channel* c = l->channel;
  if (l->sync && (c = make_channel(true)) == nullptr) return refuse(false);
  auto* child = new Id;
  child->pub.channel = &c->pub;
  child->pub.context = l->pub.context;
  child->pub.ps = l->pub.ps;
  child->pub.qp_type = l->pub.qp_type;
  child->channel = c;
  child->sync = l->sync;
  ++c->ids;
  ids_.insert(child);
  set_port(child, port);
  set_sin(child->pub.route.addr.src_sin, port->ctx->port().ipv4.v, ev.port);
  set_sin(child->pub.route.addr.dst_sin, ev.peer.v, 0);
  fill_route(child);
  child->pub.route.path_rec = &child->path;
  child->pub.route.num_paths = 1;
  child->bound = l->bound;
  child->state = State::kRequest;
  child->has_conn = true;
  child->conn = ev.id;
  child->listener = l;
  ++l->pending;
  conns_[{port, ev.id}] = child;
  Event* e = new_event(child, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
  e->owner = l;
  e->pub.listen_id = &l->pub;
  if (ud) {
    std::memcpy(e->private_data, ev.private_data.data(),
                std::min(ev.private_data.size(), kSidrReqPrivate));
    e->pub.param.ud.private_data = e->private_data;
    e->pub.param.ud.private_data_len = kSidrReqPrivate;
  } else {
    // rdma_cm reports the offer from the listener's side: the requester's responder
    // resources are what we may issue (initiator depth), and the other way round.
    child->req_initiator_depth = clamp_rd(ev.responder_resources);
    child->req_responder_resources = clamp_rd(ev.initiator_depth);
    copy_private(e, ev.private_data, kReqPrivate);
    child->remote_ece = {ev.ece_vendor, ev.ece_options, 0};
    e->pub.param.conn.initiator_depth = child->req_initiator_depth;
    e->pub.param.conn.responder_resources = child->req_responder_resources;
    e->pub.param.conn.retry_count = 7;
    e->pub.param.conn.rnr_retry_count = 7;
  }
  queue(l->channel, e);
}

void Cma::deliver(Port* port, client::CmEvent&& ev) {
  std::lock_guard lk(mu_);
  last_cm_ = Clock::now();
  if (ev.type == client::CmEventType::kDisconnected ||
      ev.type == client::CmEventType::kUnreachable) {
    // Our DREQ answered (or given up): also for ids destroyed meanwhile.
    if (dreqs_.erase({port, ev.id})) disconnected_.notify_all();
  }
  if (ev.type == client::CmEventType::kConnectRequest ||
      ev.type == client::CmEventType::kSidrRequest)
    return deliver_request(port, std::move(ev));
  if (ev.type == client::CmEventType::kDeviceRemoval) {
    // Every id on the port, once: the program is expected to destroy them (rping: "cma
    // detected device removal"). Waiters for DREPs on it give up.
    for (Id* id : ids_)
      if (id->port == port && !id->removed && id->channel != nullptr) {
        id->removed = true;
        queue(id->channel, new_event(id, RDMA_CM_EVENT_DEVICE_REMOVAL, 0));
      }
    std::erase_if(dreqs_, [port](const auto& k) { return k.first == port; });
    disconnected_.notify_all();
    return;
  }
  auto it = conns_.find({port, ev.id});
  if (it == conns_.end()) return;  // its id is gone
  Id* id = it->second;
  Event* e = nullptr;
  switch (ev.type) {
    case client::CmEventType::kEstablished:
      e = new_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
      if (id->state == State::kConnecting) copy_private(e, ev.private_data, kRepPrivate);
      e->pub.param.conn.qp_num = ev.qp_num;
      if (id->state == State::kConnecting) id->remote_ece = {ev.ece_vendor, ev.ece_options, 0};
      id->selective_repeat = ev.selective_repeat;
      if (on_established != nullptr && id->pub.qp != nullptr)
        on_established(&id->pub, ev.selective_repeat);
      id->state = State::kConnected;
      break;
    case client::CmEventType::kSidrReply:
      if (ev.sidr_status != 0) {  // rdma_cm: UNREACHABLE with the SIDR_REP's status
        e = new_event(id, RDMA_CM_EVENT_UNREACHABLE, ev.sidr_status);
        id->state = State::kClosed;
      } else {
        e = new_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
        rdma_ud_param& ud = e->pub.param.ud;
        ud.qp_num = ev.sidr_qpn;
        ud.qkey = ev.sidr_qkey;
        // The address vector to the peer: RoCE v2, the GID of its IPv4 address.
        ud.ah_attr.is_global = 1;
        ud.ah_attr.grh.dgid = id->pub.route.addr.addr.ibaddr.dgid;
        ud.ah_attr.grh.sgid_index = 0;
        ud.ah_attr.grh.hop_limit = 64;
        ud.ah_attr.grh.traffic_class = id->tos;
        ud.ah_attr.port_num = 1;
        id->state = State::kConnected;
      }
      std::memcpy(e->private_data, ev.private_data.data(),
                  std::min(ev.private_data.size(), kSidrRepPrivate));
      e->pub.param.ud.private_data = e->private_data;
      e->pub.param.ud.private_data_len = kSidrRepPrivate;
      drop_conn(id);
      break;
    case client::CmEventType::kRejected:
      e = new_event(id, RDMA_CM_EVENT_REJECTED, static_cast<int>(ev.reason));
      copy_private(e, ev.private_data, kRejPrivate);
      id->state = State::kClosed;
      drop_conn(id);
      break;
    case client::CmEventType::kUnreachable:
      e = new_event(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      id->state = State::kClosed;
      drop_conn(id);
      break;
    case client::CmEventType::kConnectError:
      e = new_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNABORTED);
      id->state = State::kClosed;
      drop_conn(id);
      break;
    case client::CmEventType::kDisconnected:
      e = new_event(id, RDMA_CM_EVENT_DISCONNECTED, 0);
      id->state = State::kDisconnected;
      drop_conn(id);
      break;
    case client::CmEventType::kConnectRequest:
    case client::CmEventType::kSidrRequest:
    case client::CmEventType::kDeviceRemoval:
      return;
  }
  // A request that ends before its CONNECT_REQUEST was read keeps its backlog slot until
  // then (get_event gives it back, as the kernel's ucma does).
  queue(id->channel, e);
}

void Cma::linger_at_exit(std::chrono::milliseconds budget) {
  const Clock::time_point deadline = Clock::now() + budget;
  std::unique_lock lk(mu_);
  for (Id* id : ids_) {
    if (is_ud(id) || !id->has_conn) continue;
    if (id->state != State::kConnecting && id->state != State::kAccepting &&
        id->state != State::kConnected)
      continue;
    std::lock_guard plk(*id->port->lock);
    if (id->port->ctx->cm_disconnect(id->conn) == 0) dreqs_.insert({id->port, id->conn});
    last_cm_ = Clock::now();
  }
  disconnected_.wait_until(lk, deadline, [&] { return dreqs_.empty(); });
  // What the CM queued last (a DREP, our last DREQ) leaves with the port's next poll.
  const Clock::time_point settle = std::min(last_cm_ + std::chrono::milliseconds(50), deadline);
  lk.unlock();
  std::this_thread::sleep_until(settle);
}

}  // namespace roce::rdmacm
