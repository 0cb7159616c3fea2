/// @file
/// AttachServer: the control thread of the attachment (attach_server.h).
#include "controlplane/attach/attach_server.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>

#include "controlplane/attach/attach_lane.h"
#include "controlplane/attach/request_check.h"

namespace roce::attach {

namespace {

struct Stopped {};   // the server stops while a request waits for an lcore
struct NoHandle {};  // every handle is in use (only with a tiny test handle_limit)

// ---- what a client costs roced (charged to AttachQuotas::max_memory) ----
constexpr std::uint64_t kPage = 4096;
std::uint64_t page_round(std::uint64_t b) { return (b + kPage - 1) / kPage * kPage; }
std::uint64_t pow2(std::uint32_t n) { return std::bit_ceil(std::max<std::uint32_t>(n, 1)); }
// What the engine allocates (Engine::create_cq, create_srq, create_qp in
// dataplane/engine/verbs.cc, RecvQueue::size_for): rings of a power of two entries.
std::uint64_t engine_rq_bytes(std::uint32_t wr, std::uint32_t sge) {
  return pow2(wr) * (sizeof(engine::RecvWqe) + sge * sizeof(engine::Sge)) +
         std::uint64_t{engine::RecvQueue::kMaxOpen} * sge * sizeof(engine::Sge);
}
std::uint64_t cq_cost(std::uint32_t depth, std::size_t ring_bytes) {
  return page_round(ring_bytes) + sizeof(LaneCq) + sizeof(engine::Cq) +
         (pow2(depth) + depth) * sizeof(engine::Wc);  // the engine's ring, the lane's `local`
}
std::uint64_t srq_cost(std::uint32_t max_wr, std::uint32_t max_sge, std::size_t ring_bytes) {
  return page_round(ring_bytes) + sizeof(LaneSrq) + sizeof(engine::Srq) +
         engine_rq_bytes(max_wr, max_sge);
}
std::uint64_t qp_cost(engine::QpType type, const engine::QpCap& cap, bool srq,
                      std::size_t ring_bytes) {
  const std::uint64_t sq = pow2(cap.max_send_wr);
  std::uint64_t b = page_round(ring_bytes) + sizeof(LaneQp) + sizeof(engine::Qp) +
                    sq * (sizeof(engine::SendWqe) + cap.max_send_sge * sizeof(engine::Sge) +
                          cap.max_inline_data) +
                    16 * sizeof(engine::RdAtomicRes) + kMaxSge * sizeof(engine::Sge);
  if (type == engine::QpType::kUd) b += sq * sizeof(engine::AddressVector);
  if (!srq) b += engine_rq_bytes(cap.max_recv_wr, std::max<std::uint32_t>(cap.max_recv_sge, 1));
  return b;
}
constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kArpWindowNs = 100 * kMs;   ///< kNeighbour: a client's ARP asks
constexpr std::uint32_t kArpAsksPerWindow = 64;     ///< (Ops::neighbour)
constexpr std::uint64_t kResolveStepNs = 50 * kMs;  ///< neighbour cache looked at; ARP x4

/// A request waiting for ARP (Ops::resolve throws Deferred): the control thread goes on
/// serving everyone else and runs the request again once the MAC is known or the time is up.
/// The client's own next requests wait behind it (its socket is not read meanwhile).
struct Deferred {
  wire::Ipv4Addr ip;
};
/// Descriptors of one client waiting for the Closer beyond which it is disconnected (it
/// cannot send more then; those it sent still close in their time).
constexpr int kMaxClosing = 8;
/// PDs one client holds at once (EDQUOT beyond).
constexpr std::uint32_t kMaxPds = 64;
/// SCM_MAX_FD (include/net/scm.h): the most descriptors one message can carry. Every request
/// is received with room for them all: what does not fit the kernel closes itself, inside
/// recvmsg, on the control thread.
constexpr std::size_t kScmMaxFd = 253;
/// Fd-less messages read from a closing socket before it is handed to the Closer instead.
constexpr int kDrainMessages = 64;

struct Pending {
  Request rq;
  wire::Ipv4Addr ip;
  std::uint64_t deadline_ns = 0, next_ns = 0;
  unsigned tries = 0;
  bool expired = false;  ///< no answer by the deadline: resolve() fails (EHOSTUNREACH)
};

struct PdRec {
  engine::Pd* pd = nullptr;
  std::uint32_t refs = 0;  ///< MRs, QPs, SRQs on it
};
struct Region {
  void* map = nullptr;
  std::uint64_t length = 0;
  std::uint64_t client_addr = 0;
  std::uint32_t mrs = 0;
};
struct MrRec {
  engine::Mr* mr = nullptr;
  std::uint32_t pd = 0, region = 0;
};
struct CqRec {
  std::unique_ptr<LaneCq> lane;
  void* map = nullptr;
  std::size_t bytes = 0;
  std::uint32_t refs = 0;  ///< QPs
  std::uint64_t charge = 0;
};
struct QpRec {
  std::unique_ptr<LaneQp> lane;
  void* map = nullptr;
  std::size_t bytes = 0;
  std::uint32_t pd = 0, send_cq = 0, recv_cq = 0, srq = 0;
  std::uint64_t charge = 0;
};
struct SrqRec {
  std::unique_ptr<LaneSrq> lane;
  void* map = nullptr;
  std::size_t bytes = 0;
  std::uint32_t pd = 0, refs = 0;
  std::uint64_t charge = 0;
};

// A sealed memfd of `bytes` mapped here; the fd stays open for passing.
void* make_shared(const char* name, std::size_t bytes, int& fd) {
  fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return nullptr;
  void* p = MAP_FAILED;
  // Sealed against resizing: a client that could shrink it would make roced's next access a
  // SIGBUS.
  if (::ftruncate(fd, static_cast<off_t>(bytes)) == 0 &&
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    fd = -1;
    return nullptr;
  }
  return p;
}

/// The shared memory of a ring of `slots` T entries lcore -> client, and the eventfd that wakes
/// its reader: false (nothing left open) when either cannot be made.
template <class T>
struct EventRing {
  ShmProducer<T> ring;
  void* map = nullptr;
  std::size_t bytes = 0;
  int memfd = -1, efd = -1;
  bool make(const char* name, std::uint32_t slots) {
    bytes = ShmQueueLayout<T>::bytes(slots);
    map = make_shared(name, bytes, memfd);
    if (map == nullptr) return false;
    efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd < 0) {
      ::munmap(map, bytes);
      ::close(memfd);
      return false;
    }
    ring = ShmProducer<T>(ShmQueueLayout<T>::init(map, slots), slots);
    return true;
  }
};

void send_reply(int fd, const Reply& r, const int* fds = nullptr, int nfds = 0) {
  iovec iov{const_cast<Reply*>(&r), sizeof r};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(2 * sizeof(int))] = {};
  if (nfds > 0) {
    m.msg_control = ctl;
    m.msg_controllen = CMSG_SPACE(static_cast<std::size_t>(nfds) * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(static_cast<std::size_t>(nfds) * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, static_cast<std::size_t>(nfds) * sizeof(int));
  }
  // A client that stopped reading loses its reply; its next read sees the socket closed.
  [[maybe_unused]] const ssize_t n = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

/// Closes descriptors clients passed that are not memfds, off the control thread: closing
/// may block (a TCP socket lingering with unsent data; a FUSE file waits for its daemon's
/// FLUSH answer, as long as the daemon likes). A memfd's close never blocks and is done in
/// place. A client's socket with messages still queued goes here too: closing it purges the
/// queue, and the last reference of a descriptor in it would be dropped on the closing
/// thread. Each entry counts against its connection and its uid, and in total, until closed
/// (AttachConfig::closing_per_uid, closing_total).
class Closer {
 public:
  Closer() : st_(std::make_shared<State>()) {
    std::thread([st = st_] { run(*st); }).detach();
  }
  ~Closer() {
    {
      std::lock_guard<std::mutex> g(st_->mu);
      st_->stop = true;
    }
    st_->cv.notify_one();
    // The thread closes what is still queued and ends; one stuck in a close that never
    // returns (a FUSE daemon that never answers) is left (its state is shared with it).
  }
  Closer(const Closer&) = delete;
  Closer& operator=(const Closer&) = delete;
  /// Queues `fd`, counted against `conn` (may be null) and `uid` until closed.
  void close(int fd, std::shared_ptr<std::atomic<int>> conn,
             std::shared_ptr<std::atomic<int>> uid) {
    if (conn) ++*conn;
    ++*uid;
    ++st_->total;
    {
      std::lock_guard<std::mutex> g(st_->mu);
      st_->q.push_back({fd, std::move(conn), std::move(uid)});
    }
    st_->cv.notify_one();
  }
  /// Descriptors queued and not yet closed, of everyone.
  int pending() const { return st_->total.load(); }

 private:
  struct Entry {
    int fd = -1;
    std::shared_ptr<std::atomic<int>> conn, uid;
  };
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Entry> q;
    std::atomic<int> total{0};
    bool stop = false;
  };
  static void run(State& st) {
    for (;;) {
      Entry e;
      {
        std::unique_lock<std::mutex> g(st.mu);
        st.cv.wait(g, [&st] { return st.stop || !st.q.empty(); });
        if (st.q.empty()) return;
        e = std::move(st.q.front());
        st.q.pop_front();
      }
      ::close(e.fd);
      if (e.conn) --*e.conn;
      --*e.uid;
      --st.total;
    }
  }
  std::shared_ptr<State> st_;
};

struct Client {
  int fd = -1;
  std::uint32_t id = 0;
  pid_t pid = 0;
  uid_t uid = 0;
  bool hello = false;
  std::size_t port = 0;
  std::uint32_t lcore = 0;
  Lane* lane = nullptr;
  port::PollLoop* loop = nullptr;
  HandleCounter handles;
  std::uint64_t since_ns = 0;  ///< accepted (port::now_ns): the hello deadline
  std::uint32_t fds = 0;       ///< descriptors roced holds for it (quotas.max_fds)
  bool privileged = false;     ///< its uid is in privileged_uids (privileged Q_Keys)
  /// Descriptors it passed that the Closer has yet to close; those of its uid.
  std::shared_ptr<std::atomic<int>> closing = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> uid_closing;
  std::uint64_t to_closer = 0;  ///< descriptors of its requests handed to the Closer, ever
  std::optional<Pending> pending;
  /// kNeighbour's ARP asks in the current window (Ops::neighbour's budget).
  std::uint64_t arp_window_ns = 0;
  std::uint32_t arp_asks = 0;
  /// Whether `h` names one of its resources.
  bool live(std::uint32_t h) const {
    return pds.count(h) || regions.count(h) || mrs.count(h) || cqs.count(h) || qps.count(h) ||
           srqs.count(h);
  }
  std::map<std::uint32_t, PdRec> pds;
  std::map<std::uint32_t, Region> regions;
  std::map<std::uint32_t, MrRec> mrs;
  std::map<std::uint32_t, CqRec> cqs;
  std::map<std::uint32_t, QpRec> qps;
  std::map<std::uint32_t, SrqRec> srqs;
  std::uint64_t memory = 0;  ///< charged: regions, rings, engine queues (AttachQuotas::max_memory)
  std::unique_ptr<LaneEvents> events;  ///< asynchronous events (hello)
  std::unique_ptr<LaneCm> cm;          ///< rdma_cm (kCmOpen)
  /// memory and the CM events waiting for it on the lane (LaneCm::waiting_bytes).
  std::uint64_t held() const {
    return memory + (cm ? cm->waiting_bytes.load(std::memory_order_relaxed) : 0);
  }
  void* cm_map = nullptr;
  std::size_t cm_bytes = 0;
  void* events_map = nullptr;
  std::size_t events_bytes = 0;
  ClientInfo info;  ///< what clients() reports, refreshed after each request (under mu_)
};

namespace {

// Lane::add on the lcore; when it cannot (an allocation), `undo` releases what the engine made
// for it and the exception goes on to run_on's boundary.
template <class T, class U>
void add_or_undo(Lane& lane, T* l, U undo) {
  try {
    lane.add(l);
  } catch (...) {
    undo();
    throw;
  }
}

// Runs `fn` on the lcore of `loop` and returns its result (directly when the loops stopped).
template <class F>
auto run_on(port::PollLoop* loop, const std::atomic<bool>& stop,
            const std::atomic<bool>& loops_stopped, F fn) -> decltype(fn()) {
  using R = decltype(fn());
  if (loops_stopped.load()) return fn();
  auto done = std::make_shared<std::promise<R>>();
  auto fut = done->get_future();
  // Nothing thrown on the lcore may leave the command (it would end roced): it travels to the
  // waiting control thread instead, which answers the client ENOMEM (handle()).
  const auto cmd = [done, fn]() mutable {
    try {
      done->set_value(fn());
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  };
  while (!loop->post(cmd)) {
    if (stop.load()) throw Stopped{};
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // When roced stops, the worker lcores still run for a moment: a command they take runs
  // and is waited for. One that is not taken by then never runs (the main lcore, which is
  // stopping us, polls no more; its ring is freed unrun), so nothing it names is touched
  // after we give up on it.
  int after_stop = 0;
  while (fut.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready)
    if (stop.load() && ++after_stop > 5) throw Stopped{};
  return fut.get();
}

}  // namespace

AttachServer::AttachServer(const AttachConfig& cfg, std::vector<AttachPort> ports)
    : cfg_(cfg), ports_(std::move(ports)), counts_(new PortCounts[ports_.size()]) {
  if (cfg_.socket.empty()) throw std::runtime_error("attach: no socket path");
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (cfg_.socket.size() >= sizeof sa.sun_path)
    throw std::runtime_error("attach: socket path too long: " + cfg_.socket);
  std::memcpy(sa.sun_path, cfg_.socket.c_str(), cfg_.socket.size() + 1);
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw std::runtime_error("attach: socket: " + std::string(strerror(errno)));
  // A socket file left by a roced that died is replaced; anything else at the path is not.
  struct stat st {};
  if (::lstat(cfg_.socket.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      ::close(listen_fd_);
      throw std::runtime_error("attach: " + cfg_.socket + " exists and is not a socket");
    }
    ::unlink(cfg_.socket.c_str());
  }
  gid_t gid = static_cast<gid_t>(-1);  // unchanged
  if (!cfg_.group.empty()) {
    const group* g = ::getgrnam(cfg_.group.c_str());
    if (g == nullptr) {
      ::close(listen_fd_);
      throw std::runtime_error("attach: no group '" + cfg_.group + "'");
    }
    gid = g->gr_gid;
  }
  // Group and mode before listen(): nobody connects in between.
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::chown(cfg_.socket.c_str(), static_cast<uid_t>(-1), gid) != 0 ||
      ::chmod(cfg_.socket.c_str(), cfg_.mode) != 0 || ::listen(listen_fd_, 16) != 0) {
    const std::string why = strerror(errno);
    ::close(listen_fd_);
    throw std::runtime_error("attach: cannot listen on " + cfg_.socket + ": " + why);
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  // Descriptors: every client costs its socket and up to quotas.max_fds eventfds. Take the
  // hard limit, say when the configuration could need more, and keep one in reserve for
  // refusing a connection when they run out (accept_client).
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
    const std::uint64_t need =
        std::uint64_t{cfg_.max_clients} * (cfg_.quotas.max_fds + 1) + cfg_.closing_total + 256;
    if (nofile.rlim_cur != RLIM_INFINITY && need > nofile.rlim_cur)
      std::fprintf(stderr,
                   "roced: attach: %u clients x %u descriptors may need %llu, RLIMIT_NOFILE "
                   "is %llu: lower attach.max_clients or attach.quotas.max_fds\n",
                   cfg_.max_clients, cfg_.quotas.max_fds + 1, static_cast<unsigned long long>(need),
                   static_cast<unsigned long long>(nofile.rlim_cur));
  }
  reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (const AttachPort& p : ports_) {
    auto& v = lanes_.emplace_back();
    for (port::PollLoop* l : p.loops) {
      v.push_back(std::make_unique<Lane>(l->engine()));
      Lane* lane = v.back().get();
      l->add_poller(lane);
      // Asynchronous events go to the clients that own the QP or CQ (and on to whoever
      // listened before).
      lane->cm_config = [l, n = cfg_.cm_connections] {
        return cm::agent_config(
            l->engine().config().mac, n, [] { return port::now_ns(); },
            [l](wire::Ipv4Addr ip, bool ask) {
              auto mac = l->neighbour().lookup(ip);
              if (!mac && ask) l->resolve(ip);
              return mac;
            });
      };
      lane->next_async = std::move(l->engine().on_async_event);
      l->engine().on_async_event = [lane](const engine::AsyncEvent& ev) { lane->on_async(ev); };
    }
  }
  closer_ = std::make_unique<Closer>();
  thread_ = std::thread([this] { serve(); });
}

void AttachServer::stop() {
  if (stop_.exchange(true)) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::unlink(cfg_.socket.c_str());
}

AttachServer::~AttachServer() {
  stop();
  // The loops no longer run: what remains is torn down here, on this thread.
  loops_stopped_ = true;
  stop_ = false;
  while (!clients_.empty()) drop(*clients_.back(), false);
  for (std::size_t p = 0; p < ports_.size(); ++p)
    for (std::size_t l = 0; l < ports_[p].loops.size(); ++l) {
      lanes_[p][l]->drop_cm_hub();
      ports_[p].loops[l]->remove_poller(lanes_[p][l].get());
      ports_[p].loops[l]->engine().on_async_event = std::move(lanes_[p][l]->next_async);
    }
  ::close(wake_fd_);
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
}

bool AttachServer::closing_full() const {
  return closer_->pending() >= static_cast<int>(cfg_.closing_total);
}

AttachCounts AttachServer::counts(std::size_t i) const {
  const PortCounts& c = counts_[i];
  AttachCounts a;
  a.clients = c.clients;
  a.qps = c.qps;
  a.mrs = c.mrs;
  a.cqs = c.cqs;
  a.memory_bytes = c.memory;
  a.clients_total = c.total;
  a.clients_lost = c.lost;
  a.requests = c.requests;
  a.bad_requests = c.bad;
  a.alloc_failures = c.alloc_failures;
  for (const auto& lane : lanes_[i]) {
    a.refused_wrs += lane->stats().refused_wrs.load(std::memory_order_relaxed);
    a.broken_rings += lane->stats().broken_rings.load(std::memory_order_relaxed);
  }
  if (i == 0) {  // the server's, not a port's: reported with the first port
    a.refused = refused_;
    a.silent = silent_;
    a.out_of_fds = out_of_fds_;
  }
  for (const auto& lane : lanes_[i]) {
    a.cm_refused += lane->cm_refused();
    a.memory_bytes += lane->cm_waiting_bytes();  // the clients' unread CM events
  }
  return a;
}

std::vector<ClientInfo> AttachServer::clients() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<ClientInfo> out;
  for (const auto& c : clients_)
    if (c->info.id != 0) out.push_back(c->info);
  return out;
}

void AttachServer::serve() {
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    // Out of descriptors and nothing in reserve, or closing_total descriptors waiting for the
    // Closer: the backlog waits (looked at again every 100 ms, no spinning).
    const bool wait = port::now_ns() < accept_after_ns_ || closing_full();
    fds.push_back({listen_fd_, static_cast<short>(wait ? 0 : POLLIN), 0});
    // A client whose request waits for ARP is not read (its hangup still shows).
    for (const auto& c : clients_)
      fds.push_back({c->fd, static_cast<short>(c->pending ? 0 : POLLIN), 0});
    if (::poll(fds.data(), fds.size(), next_timeout_ms()) < 0 && errno != EINTR) break;
    if (stop_) break;
    if (fds[1].revents & POLLIN) accept_client();
    // Newest first, so that dropping one does not move the ones still to look at.
    for (std::size_t i = fds.size(); i-- > 2;) {
      if (fds[i].revents == 0) continue;
      Client* c = nullptr;
      for (auto& k : clients_)
        if (k->fd == fds[i].fd) c = k.get();
      if (c == nullptr) continue;
      try {
        const bool gone = c->pending && (fds[i].revents & (POLLHUP | POLLERR | POLLNVAL));
        if (gone || !handle(*c)) {
          drop(*c, true);
        } else if (c->hello) {
          std::lock_guard<std::mutex> g(mu_);
          c->info = {c->id,    c->pid,        c->uid,        ports_[c->port].name,
                     c->lcore, c->qps.size(), c->mrs.size(), c->cqs.size(),
                     c->held()};
        }
      } catch (const Stopped&) {
        return;
      }
    }
    try {
      tick();
    } catch (const Stopped&) {
      return;
    }
  }
}

int AttachServer::next_timeout_ms() const {
  const std::uint64_t now = port::now_ns();
  std::uint64_t next = now + 1000 * kMs;
  if (accept_after_ns_ > now) next = std::min(next, accept_after_ns_);
  if (closing_full()) next = std::min(next, now + 100 * kMs);
  for (const auto& c : clients_) {
    if (!c->hello) next = std::min(next, c->since_ns + cfg_.hello_timeout_ms * kMs);
    if (c->pending) next = std::min(next, c->pending->next_ns);
  }
  return next <= now ? 0 : static_cast<int>((next - now + kMs - 1) / kMs);
}

void AttachServer::tick() {
  const std::uint64_t now = port::now_ns();
  for (std::size_t i = clients_.size(); i-- > 0;) {
    Client& c = *clients_[i];
    if (!c.hello && now - c.since_ns >= cfg_.hello_timeout_ms * kMs) {
      // A connection that never says hello holds a max_clients slot: closed, counted.
      ++silent_;
      Reply rep;
      rep.err = ETIMEDOUT;
      send_reply(c.fd, rep);
      drop(c, false);
      continue;
    }
    if (!c.pending || now < c.pending->next_ns) continue;
    // A step of a resolve: the neighbour cache of the port's loop 0 (which answers ARP),
    // an ARP request every 200 ms. Then the request runs again, with the MAC or without.
    Pending& p = *c.pending;
    port::PollLoop* l0 = ports_[c.port].loops[0];
    const wire::Ipv4Addr ip = p.ip;
    const bool ask = ++p.tries % 4 == 0;
    const bool known = run_on(l0, stop_, loops_stopped_, [l0, ip, ask] {
      if (l0->neighbour().lookup(ip)) return true;
      if (ask) l0->resolve(ip);
      return false;
    });
    if (!known && now < p.deadline_ns) {
      p.next_ns = now + kResolveStepNs;
      continue;
    }
    p.expired = !known;
    const Request rq = p.rq;
    std::vector<int> none;
    execute(c, rq, true, none);
    if (c.hello) {
      std::lock_guard<std::mutex> g(mu_);
      c.info = {c.id,         c.pid,        c.uid,   ports_[c.port].name, c.lcore, c.qps.size(),
                c.mrs.size(), c.cqs.size(), c.held()};
    }
  }
}

std::shared_ptr<std::atomic<int>> AttachServer::uid_closing(std::uint32_t uid) {
  // Counters nobody holds any more (no client, nothing queued) are forgotten.
  std::erase_if(uid_closing_, [](const auto& kv) {
    return kv.second.use_count() == 1 && kv.second->load() == 0;
  });
  auto& p = uid_closing_[uid];
  if (!p) p = std::make_shared<std::atomic<int>>(0);
  return p;
}

void AttachServer::close_socket(int fd, const std::shared_ptr<std::atomic<int>>& uid) {
  // Closing a socket purges the messages still queued on it, and with them the last reference
  // of any descriptor they carry, on this thread (a lingering TCP socket would block it).
  // Shut down first, the peer can queue nothing more (its sends fail, EPIPE). What is queued
  // is then looked at: with SO_PASSCRED every message comes with credentials, so a receive
  // without any control message is the end of the queue (an empty message is not). Messages
  // without descriptors are read (a socket closed with unread data resets its peer, which
  // then might not see the reply sent just before); one with descriptors (MSG_CTRUNC: there is
  // no room for them, the peek takes no reference) sends the socket to the Closer.
  ::shutdown(fd, SHUT_RDWR);
  const int on = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0) {
    for (int i = 0; i < kDrainMessages; ++i) {
      char b;
      iovec iov{&b, 1};
      alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(ucred))];
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = ctl;
      m.msg_controllen = sizeof ctl;
      if (::recvmsg(fd, &m, MSG_PEEK | MSG_DONTWAIT) < 0) {
        // ECONNRESET: the peer closed with our replies unread (a client killed), reported
        // once; the queue is looked at again.
        if (errno == ECONNRESET || errno == EINTR) continue;
        break;
      }
      if (m.msg_controllen == 0) {  // nothing queued
        ::close(fd);
        return;
      }
      if (m.msg_flags & MSG_CTRUNC) break;  // descriptors in it
      [[maybe_unused]] const ssize_t n = ::recv(fd, &b, 1, MSG_DONTWAIT);
    }
  }
  closer_->close(fd, nullptr, uid);
}

// A connection turned away: one reply of sequence number 0 with the reason, then closed
// (close_socket: what it sent is read or goes to the Closer with it).
void AttachServer::refuse_connection(int fd, int err,
                                     const std::shared_ptr<std::atomic<int>>& uid) {
  ++refused_;
  Reply rep;
  rep.err = err;
  send_reply(fd, rep);
  close_socket(fd, uid);
}

void AttachServer::accept_client() {
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno != EMFILE && errno != ENFILE) return;
    // Out of descriptors: the connection would stay in the backlog and poll() report it at
    // once, again and again. The reserve descriptor makes room to take it and refuse it.
    const int why = errno;
    ++out_of_fds_;
    if (reserve_fd_ >= 0) {
      ::close(reserve_fd_);
      const int taken = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (taken >= 0) {
        ucred cred{};
        socklen_t len = sizeof cred;
        ::getsockopt(taken, SOL_SOCKET, SO_PEERCRED, &cred, &len);
        refuse_connection(taken, why, uid_closing(cred.uid));
      }
      reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    if (reserve_fd_ < 0) accept_after_ns_ = port::now_ns() + 100 * kMs;  // none in reserve: wait
    return;
  }
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    close_socket(fd, uid_closing(static_cast<std::uint32_t>(-1)));
    return;
  }
  auto uid_closing_now = uid_closing(cred.uid);
  const auto same_uid = static_cast<std::uint32_t>(std::count_if(
      clients_.begin(), clients_.end(), [&](const auto& k) { return k->uid == cred.uid; }));
  const std::uint32_t per_uid =
      cfg_.max_clients_per_uid != 0 ? cfg_.max_clients_per_uid : cfg_.max_clients;
  // A uid whose passed descriptors still wait for the Closer beyond closing_per_uid (their
  // close blocks): no more connections (and so no more descriptors) until they are closed.
  const bool closing = uid_closing_now->load() >= static_cast<int>(cfg_.closing_per_uid);
  if (clients_.size() >= cfg_.max_clients || same_uid >= per_uid || closing) {
    const bool all = clients_.size() >= cfg_.max_clients;
    const char* what = all ? "max_clients" : closing ? "closing_per_uid" : "max_clients_per_uid";
    std::fprintf(stderr, "roced: attach: refused a client of uid %u (pid %d): %s %u reached\n",
                 static_cast<unsigned>(cred.uid), static_cast<int>(cred.pid), what,
                 all       ? cfg_.max_clients
                 : closing ? cfg_.closing_per_uid
                           : per_uid);
    refuse_connection(fd, all ? EUSERS : closing ? EAGAIN : EDQUOT, uid_closing_now);
    return;
  }
  auto c = std::make_unique<Client>();
  c->fd = fd;
  c->id = next_id_++;
  c->pid = cred.pid;
  c->uid = cred.uid;
  c->since_ns = port::now_ns();
  c->uid_closing = std::move(uid_closing_now);
  c->handles = HandleCounter(cfg_.handle_limit);
  const auto& pu = cfg_.privileged_uids;
  c->privileged = std::find(pu.begin(), pu.end(), cred.uid) != pu.end();
  std::lock_guard<std::mutex> g(mu_);
  clients_.push_back(std::move(c));
}

void AttachServer::drop(Client& c, bool lost) {
  PortCounts& pc = counts_[c.port];
  const bool held = !c.qps.empty() || !c.mrs.empty() || !c.cqs.empty() || !c.regions.empty();
  if (c.hello) {
    // Order: no QP may send from or write into memory once its MR is gone, so every QP goes
    // to the error state (flushing its work requests) and is destroyed first; the SRQs, the
    // MRs, the CQs and the PDs follow, all in one command on the owning lcore.
    try {
      run_on(c.loop, stop_, loops_stopped_, [&c] {
        engine::Engine& e = c.lane->engine();
        if (c.cm) {  // DREQs for connections still up, QPs out of the CM's hands
          c.lane->remove(c.cm.get());
          c.cm->session.reset();
        }
        engine::QpAttr err;
        err.qp_state = engine::QpState::kErr;
        for (auto& [h, q] : c.qps) {
          c.lane->remove(q.lane.get());
          e.modify_qp(q.lane->qp, err, engine::kQpState);
          e.destroy_qp(q.lane->qp);
        }
        for (auto& [h, s] : c.srqs) {
          c.lane->remove(s.lane.get());
          e.destroy_srq(s.lane->srq);
        }
        for (auto& [h, m] : c.mrs) e.dereg_mr(m.mr);
        for (auto& [h, q] : c.cqs) {
          c.lane->remove(q.lane.get());
          e.destroy_cq(q.lane->cq);
        }
        for (auto& [h, p] : c.pds) e.dealloc_pd(p.pd);
        return 0;
      });
    } catch (const Stopped&) {
      throw;  // the command never ran: ~AttachServer releases everything directly
    }
    for (auto& [h, q] : c.qps) ::munmap(q.map, q.bytes);
    for (auto& [h, s] : c.srqs) ::munmap(s.map, s.bytes);
    for (auto& [h, q] : c.cqs) {
      ::munmap(q.map, q.bytes);
      if (q.lane->event_fd >= 0) ::close(q.lane->event_fd);
    }
    for (auto& [h, r] : c.regions) ::munmap(r.map, r.length);
    if (c.events_map) ::munmap(c.events_map, c.events_bytes);
    if (c.cm_map) ::munmap(c.cm_map, c.cm_bytes);
    if (c.cm) ::close(c.cm->event_fd);
    if (c.events) ::close(c.events->event_fd);
    pc.qps -= c.qps.size();
    pc.mrs -= c.mrs.size();
    pc.cqs -= c.cqs.size();
    pc.memory -= c.memory;
    --pc.clients;
    if (lost && held) ++pc.lost;
    std::printf("roced: attach: client %u (pid %d) %s: %zu QPs, %zu MRs, %zu CQs released\n", c.id,
                static_cast<int>(c.pid), lost ? "gone" : "detached", c.qps.size(), c.mrs.size(),
                c.cqs.size());
    std::fflush(stdout);
  }
  close_socket(c.fd, c.uid_closing);
  std::lock_guard<std::mutex> g(mu_);
  std::erase_if(clients_, [&c](const auto& p) { return p.get() == &c; });
}

/// What a request's handler passes back besides the reply: descriptors to send with it, and
/// those to close once sent.
struct Out {
  int send[2] = {-1, -1};
  int nsend = 0;
  int close_after[2] = {-1, -1};
  int nclose = 0;
};

/// One handler per request; each returns 0 or an errno value (the reply's err).
struct Ops {
  AttachServer& s;
  Client& c;
  const Request& rq;
  Reply& rep;
  Out& out;
  std::vector<int>& passed;  ///< descriptors that came with the request (closed after)

  template <class F>
  auto run(F fn) {
    return run_on(c.loop, s.stop_, s.loops_stopped_, fn);
  }
  AttachServer::PortCounts& counts() { return s.counts_[c.port]; }
  /// Takes `bytes` from the client's memory quota: EDQUOT when they do not fit.
  int charge(std::uint64_t bytes) {
    if (bytes > quota().max_memory || c.held() > quota().max_memory - bytes) return EDQUOT;
    c.memory += bytes;
    counts().memory += bytes;
    return 0;
  }
  void uncharge(std::uint64_t bytes) {
    c.memory -= bytes;
    counts().memory -= bytes;
  }
  /// A name for a new resource of the client.
  std::uint32_t new_handle() {
    // Never 0, never one still in use once the counter wrapped (request_check.h).
    const std::uint32_t h = c.handles.next([this](std::uint32_t k) { return c.live(k); });
    if (h == 0) throw NoHandle{};
    return h;
  }
  engine::Engine& eng() { return c.lane->engine(); }
  const AttachQuotas& quota() const { return s.cfg_.quotas; }

  int hello();
  int alloc_pd();
  int dealloc_pd();
  int reg_region();
  int dereg_region();
  int reg_mr();
  int rereg_mr();
  int dereg_mr();
  int create_cq();
  int destroy_cq();
  int cq_notify();
  int create_qp();
  int destroy_qp();
  int modify_qp();
  int create_srq();
  int destroy_srq();
  int cm_open();
  int cm_listen();
  int cm_connect();
  int cm_accept();
  int cm_reject();
  int cm_disconnect();
  int cm_refuse();
  int cm_notify();
  int cm_sidr_listen();
  int cm_sidr_resolve();
  int cm_sidr_accept();
  int cm_sidr_reject();
  int cm_unlisten();
  int neighbour();
  /// The CM request's parameters (private data bounded).
  static cm::SessionParam cm_param(const CmReq& r) {
    cm::SessionParam p;
    p.responder_resources = r.responder_resources;
    p.initiator_depth = r.initiator_depth;
    p.rnr_retry = r.rnr_retry;
    p.private_data.assign(r.private_data,
                          r.private_data + std::min<std::size_t>(r.private_len, kCmPrivateMax));
    p.ece = {r.ece_vendor & 0xFFFFFF, r.ece_options};
    return p;
  }
  /// The MAC of `gid`'s IPv4 address from the port's neighbour cache, by ARP if need be.
  std::optional<wire::MacAddr> resolve(const wire::Ipv6Addr& gid);
};

int Ops::hello() {
  if (c.hello) return EINVAL;
  if (rq.hello.version < kOldestVersion || rq.hello.version > kVersion) return EPROTO;
  const std::string want(rq.hello.port, strnlen(rq.hello.port, sizeof rq.hello.port));
  std::size_t pi = s.ports_.size();
  for (std::size_t i = 0; i < s.ports_.size(); ++i)
    if (want.empty() || s.ports_[i].name == want) {
      pi = i;
      break;
    }
  if (pi == s.ports_.size()) return ENODEV;
  // The event ring: room for a fatal and one more event per QP, one per CQ and SRQ at once.
  const AttachQuotas& q = quota();
  const std::uint32_t slots =
      ShmQueueLayout<EventEntry>::slots_for(2 * q.max_qps + q.max_cqs + q.max_srqs);
  EventRing<EventEntry> er;
  if (!er.make("roce-events", slots)) return ENOMEM;
  c.events = std::make_unique<LaneEvents>();
  c.events->ring = er.ring;
  c.events->event_fd = er.efd;
  c.events_map = er.map;
  c.events_bytes = er.bytes;
  c.fds = 1;  // the event ring's eventfd
  rep.bytes = er.bytes;
  rep.hello.event_slots = slots;
  out = Out{{er.memfd, er.efd}, 2, {er.memfd, -1}, 1};
  const AttachPort& port = s.ports_[pi];
  c.port = pi;
  c.lcore = c.id % static_cast<std::uint32_t>(port.loops.size());
  c.loop = port.loops[c.lcore];
  c.lane = s.lanes_[pi][c.lcore].get();
  c.hello = true;
  ++counts().clients;
  ++counts().total;
  c.memory += page_round(er.bytes) + sizeof(LaneEvents);  // always granted
  counts().memory += page_round(er.bytes) + sizeof(LaneEvents);
  HelloRep& hr = rep.hello;
  hr.client_id = c.id;
  hr.lcore = c.lcore;
  hr.mac = port.mac;
  hr.ipv4 = port.ipv4;
  hr.gid.b[10] = hr.gid.b[11] = 0xFF;
  for (int i = 0; i < 4; ++i)
    hr.gid.b[12 + i] = static_cast<std::uint8_t>(hr.ipv4.v >> (24 - 8 * i));
  hr.max_mtu = eng().config().max_mtu;
  std::snprintf(hr.port, sizeof hr.port, "%s", port.name.c_str());
  hr.max_qps = quota().max_qps;
  hr.max_mrs = quota().max_mrs;
  hr.max_cqs = quota().max_cqs;
  hr.max_memory = quota().max_memory;
  hr.max_pds = kMaxPds;
  hr.max_srqs = quota().max_srqs;
  hr.max_qp_wr = quota().max_qp_wr;
  hr.max_srq_wr = quota().max_srq_wr;
  hr.max_sge = kMaxSge;
  hr.max_cqe = std::min(quota().max_cqe, eng().config().max_cq_depth);
  hr.max_inline_data = quota().max_inline_data;
  std::printf("roced: attach: client %u (pid %d, uid %u) on port %s, lcore %u\n", c.id,
              static_cast<int>(c.pid), static_cast<unsigned>(c.uid), port.name.c_str(), c.lcore);
  std::fflush(stdout);
  return 0;
}

int Ops::alloc_pd() {
  if (c.pds.size() >= kMaxPds) return EDQUOT;
  // The handle and the record first: nothing may throw once the engine made the PD (it would
  // be nobody's, drop() would miss it).
  const std::uint32_t h = new_handle();
  PdRec& rec = c.pds[h];
  engine::Engine* e = &eng();
  engine::Pd* pd = nullptr;
  try {
    pd = run([e] { return e->alloc_pd(); });
  } catch (...) {
    c.pds.erase(h);
    throw;
  }
  if (pd == nullptr) {
    c.pds.erase(h);
    return ENOMEM;
  }
  rec.pd = pd;
  rep.handle = h;
  return 0;
}

int Ops::dealloc_pd() {
  const auto it = c.pds.find(rq.handle);
  if (it == c.pds.end()) return EINVAL;
  if (it->second.refs != 0) return EBUSY;
  engine::Engine* e = &eng();
  if (const int rc = run([e, pd = it->second.pd] { return e->dealloc_pd(pd); })) return rc;
  c.pds.erase(it);
  return 0;
}

int Ops::reg_region() {
  if (passed.size() != 1) return EBADF;
  const std::uint64_t len = rq.region.length;
  if (len == 0 || len > quota().max_memory) return EINVAL;
  // Each region is a mapping of roced's (vm.max_map_count is per process): counted, and
  // charged whole pages.
  if (c.regions.size() >= quota().max_regions) return EDQUOT;
  const std::uint64_t cost = page_round(len);
  if (c.held() + cost > quota().max_memory) return EDQUOT;
  const int fd = passed[0];
  // Only a memfd sealed against shrinking (or one we can seal) is mapped: truncated under
  // roced's feet, its pages would fault (SIGBUS) in the poll loop. Sealed first, measured
  // after: another thread of the client may be shrinking it right now.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) return EINVAL;  // not a memfd
  // Nor a hugetlbfs one: its pages can be punched out under the shrink seal, and roced's next
  // touch then needs a fresh huge page; with the pool empty that fault is a SIGBUS.
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0 || fs.f_type == HUGETLBFS_MAGIC) return EINVAL;
  if (!(seals & F_SEAL_SHRINK) && ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) return EPERM;
  const std::uint64_t off = rq.region.file_offset;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  struct stat st {};
  if (off % page != 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::uint64_t>(st.st_size) < len ||
      off > static_cast<std::uint64_t>(st.st_size) - len)
    return EINVAL;
  const std::uint32_t h = new_handle();
  Region& r = c.regions[h];  // before the mapping: nothing may throw once it is made
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(off));
  if (p == MAP_FAILED) {
    c.regions.erase(h);
    return ENOMEM;
  }
  r = Region{p, len, rq.region.client_addr, 0};
  rep.handle = h;
  charge(cost);
  return 0;
}

int Ops::dereg_region() {
  const auto it = c.regions.find(rq.handle);
  if (it == c.regions.end()) return EINVAL;
  if (it->second.mrs != 0) return EBUSY;
  ::munmap(it->second.map, it->second.length);
  uncharge(page_round(it->second.length));
  c.regions.erase(it);
  return 0;
}

int Ops::reg_mr() {
  const RegMrReq& r = rq.mr;
  const auto pd = c.pds.find(r.pd);
  const auto reg = c.regions.find(r.region);
  if (pd == c.pds.end() || reg == c.regions.end()) return EINVAL;
  const Region& g = reg->second;
  if (r.length == 0 || r.offset > g.length || r.length > g.length - r.offset) return EINVAL;
  constexpr std::uint32_t kKnown = engine::kAccessLocalWrite | engine::kAccessRemoteWrite |
                                   engine::kAccessRemoteRead | engine::kAccessRemoteAtomic;
  if (r.access & ~kKnown) return EINVAL;
  if (c.mrs.size() >= quota().max_mrs) return EDQUOT;
  void* host = static_cast<std::uint8_t*>(g.map) + r.offset;
  Lane* lane = c.lane;
  engine::Pd* epd = pd->second.pd;
  const RegMrReq req = r;
  // The handle and the record first: an MR the engine made must never be untracked (its rkey
  // would outlive the region's mapping after drop()).
  const std::uint32_t h = new_handle();
  MrRec& rec = c.mrs[h];
  // Registered at roced's mapping, addressed (by the client's SGEs and by peers) through the
  // client's own address, the IOVA.
  engine::Mr* mr = nullptr;
  try {
    mr = run([=] { return lane->engine().reg_mr(epd, host, req.length, req.iova, req.access); });
  } catch (...) {
    c.mrs.erase(h);
    throw;
  }
  if (mr == nullptr) {
    c.mrs.erase(h);
    return EINVAL;
  }
  rec = MrRec{mr, r.pd, r.region};
  rep.handle = h;
  rep.key = mr->key;
  rep.iova = r.iova;
  ++pd->second.refs;
  ++reg->second.mrs;
  ++counts().mrs;
  return 0;
}

// ibv_rereg_mr in place: the engine's MR takes the new PD, memory, IOVA and access and keeps
// its key, which peers already hold. Refused as reg_mr refuses; on a refusal nothing changes.
int Ops::rereg_mr() {
  const auto it = c.mrs.find(rq.handle);
  if (it == c.mrs.end()) return EINVAL;
  const RegMrReq& r = rq.mr;
  const auto pd = c.pds.find(r.pd);
  const auto reg = c.regions.find(r.region);
  if (pd == c.pds.end() || reg == c.regions.end()) return EINVAL;
  const Region& g = reg->second;
  if (r.length == 0 || r.offset > g.length || r.length > g.length - r.offset) return EINVAL;
  constexpr std::uint32_t kKnown = engine::kAccessLocalWrite | engine::kAccessRemoteWrite |
                                   engine::kAccessRemoteRead | engine::kAccessRemoteAtomic;
  if (r.access & ~kKnown) return EINVAL;
  void* host = static_cast<std::uint8_t*>(g.map) + r.offset;
  Lane* lane = c.lane;
  engine::Pd* epd = pd->second.pd;
  const RegMrReq req = r;
  engine::Mr* mr = it->second.mr;
  if (const int rc = run(
          [=] { return lane->engine().rereg_mr(mr, epd, host, req.length, req.iova, req.access); }))
    return rc;  // EINVAL
  MrRec& rec = it->second;
  --c.pds[rec.pd].refs;
  --c.regions[rec.region].mrs;
  rec.pd = r.pd;
  rec.region = r.region;
  ++pd->second.refs;
  ++reg->second.mrs;
  rep.handle = rq.handle;
  rep.key = mr->key;
  rep.iova = r.iova;
  return 0;
}

int Ops::dereg_mr() {
  const auto it = c.mrs.find(rq.handle);
  if (it == c.mrs.end()) return EINVAL;
  engine::Engine* e = &eng();
  run([e, mr = it->second.mr] { return e->dereg_mr(mr); });
  --c.pds[it->second.pd].refs;
  --c.regions[it->second.region].mrs;
  c.mrs.erase(it);
  --counts().mrs;
  return 0;
}

int Ops::create_cq() {
  const std::uint32_t depth = rq.cq.depth;
  if (depth == 0 || depth > quota().max_cqe || depth > eng().config().max_cq_depth) return EINVAL;
  if (c.cqs.size() >= quota().max_cqs) return EDQUOT;
  const std::uint32_t slots = ShmQueueLayout<CqEntry>::slots_for(depth);
  const std::size_t bytes = ShmQueueLayout<CqEntry>::bytes(slots);
  const std::uint64_t cost = cq_cost(depth, bytes);
  if (const int rc = charge(cost)) return rc;
  // No eventfd yet: it is made when the client first waits on the CQ (cq_notify).
  int memfd = -1;
  void* p = make_shared("roce-cq", bytes, memfd);
  std::unique_ptr<LaneCq> lc;
  std::uint32_t h = 0;
  engine::Cq* cq = nullptr;
  if (p != nullptr) {
    try {
      lc = std::make_unique<LaneCq>();
      lc->local.reserve(depth);  // the lcore never allocates for it
      h = lc->handle = new_handle();
      c.cqs[h];  // the record's node before the lane has the CQ: nothing throws after
    } catch (...) {
      lc.reset();
    }
  }
  if (lc) {
    lc->ring = ShmProducer<CqEntry>(ShmQueueLayout<CqEntry>::init(p, slots), slots);
    lc->events = c.events.get();
    lc->depth = depth;
    Lane* lane = c.lane;
    LaneCq* l = lc.get();
    try {
      cq = run([=] {
        l->cq = lane->engine().create_cq(depth);
        if (l->cq) add_or_undo(*lane, l, [&] { lane->engine().destroy_cq(l->cq); });
        return l->cq;
      });
    } catch (const std::exception&) {  // thrown on the lcore (run_on): nothing was kept
      ++counts().alloc_failures;
    } catch (...) {  // Stopped: no half-made record for ~AttachServer to find
      c.cqs.erase(h);
      throw;
    }
  }
  if (cq == nullptr) {
    if (h != 0) c.cqs.erase(h);
    if (p) ::munmap(p, bytes);
    if (memfd >= 0) ::close(memfd);
    uncharge(cost);
    return ENOMEM;
  }
  rep.handle = h;
  rep.slots = slots;
  rep.bytes = bytes;
  c.cqs[h] = CqRec{std::move(lc), p, bytes, 0, cost};
  ++counts().cqs;
  out = Out{{memfd, -1}, 1, {memfd, -1}, 1};
  return 0;
}

int Ops::cq_notify() {
  const auto it = c.cqs.find(rq.handle);
  if (it == c.cqs.end()) return EINVAL;
  LaneCq* l = it->second.lane.get();
  if (l->event_fd < 0) {
    if (c.fds >= quota().max_fds) return EDQUOT;
    const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd < 0) return errno == EMFILE || errno == ENFILE ? EMFILE : ENOMEM;
    try {
      run([l, efd] {  // the lane reads it on its lcore
        l->event_fd = efd;
        return 0;
      });
    } catch (...) {
      if (l->event_fd != efd) ::close(efd);  // (Stopped: it never ran)
      throw;
    }
    ++c.fds;
  }
  out = Out{{l->event_fd, -1}, 1, {-1, -1}, 0};  // it stays ours too (the lane signals it)
  return 0;
}

int Ops::destroy_cq() {
  const auto it = c.cqs.find(rq.handle);
  if (it == c.cqs.end()) return EINVAL;
  if (it->second.refs != 0) return EBUSY;
  LaneCq* l = it->second.lane.get();
  Lane* lane = c.lane;
  const int rc = run([=] {
    const int r = lane->engine().destroy_cq(l->cq);
    if (r == 0) lane->remove(l);
    return r;
  });
  if (rc != 0) return rc;
  ::munmap(it->second.map, it->second.bytes);
  if (l->event_fd >= 0) {
    ::close(l->event_fd);
    --c.fds;
  }
  uncharge(it->second.charge);
  c.cqs.erase(it);
  --counts().cqs;
  return 0;
}

int Ops::create_qp() {
  const CreateQpReq& r = rq.qp;
  const auto pd = c.pds.find(r.pd);
  const auto scq = c.cqs.find(r.send_cq);
  const auto rcq = c.cqs.find(r.recv_cq);
  const auto srq = r.srq ? c.srqs.find(r.srq) : c.srqs.end();
  if (pd == c.pds.end() || scq == c.cqs.end() || rcq == c.cqs.end() ||
      (r.srq != 0 && srq == c.srqs.end()))
    return EINVAL;
  if (r.type != engine::QpType::kRc && r.type != engine::QpType::kUc &&
      r.type != engine::QpType::kUd)
    return EINVAL;
  engine::QpCap cap = r.cap;
  if (cap.max_send_wr == 0 || cap.max_send_wr > quota().max_qp_wr ||
      cap.max_recv_wr > quota().max_qp_wr || (r.srq == 0 && cap.max_recv_wr == 0) ||
      cap.max_send_sge > kMaxSge || cap.max_recv_sge > kMaxSge ||
      cap.max_inline_data > quota().max_inline_data)
    return EINVAL;
  if (c.qps.size() >= quota().max_qps) return EDQUOT;
  // The lane sends inline requests through their SGEs (attach_lane.cc): the engine keeps no
  // inline buffer for an attached QP.
  cap.max_inline_data = 0;
  const QpRings rings{cap.max_send_wr + 1, r.srq ? 2 : cap.max_recv_wr + 1};
  const std::size_t bytes = rings.bytes();
  const std::uint64_t cost = qp_cost(r.type, cap, r.srq != 0, bytes);
  if (const int rc = charge(cost)) return rc;
  int memfd = -1;
  void* p = make_shared("roce-qp", bytes, memfd);
  std::unique_ptr<LaneQp> lq;
  std::uint32_t h = 0;
  if (p != nullptr) {
    try {
      lq = std::make_unique<LaneQp>();
      h = new_handle();
      c.qps[h];  // the record's node before the lane has the QP: nothing throws after
    } catch (...) {
      lq.reset();
    }
  }
  if (!lq) {
    if (h != 0) c.qps.erase(h);
    if (p) ::munmap(p, bytes);
    if (memfd >= 0) ::close(memfd);
    uncharge(cost);
    return ENOMEM;
  }
  lq->sq =
      ShmConsumer<SendEntry>(ShmQueueLayout<SendEntry>::init(p, rings.sq_slots), rings.sq_slots);
  if (r.srq == 0)
    lq->rq = ShmConsumer<RecvEntry>(
        ShmQueueLayout<RecvEntry>::init(static_cast<std::uint8_t*>(p) + rings.rq_offset(),
                                        rings.rq_slots),
        rings.rq_slots);
  lq->events = c.events.get();
  lq->send_cq = scq->second.lane.get();
  lq->recv_cq = rcq->second.lane.get();
  LaneSrq* ls = r.srq ? srq->second.lane.get() : nullptr;
  lq->srq = ls;
  Lane* lane = c.lane;
  LaneQp* l = lq.get();
  engine::Pd* epd = pd->second.pd;
  const bool sig_all = r.sq_sig_all != 0;
  const engine::QpType type = r.type;
  engine::Qp* qp = nullptr;
  try {
    qp = run([=] {
      l->qp = lane->engine().create_qp(epd, type, l->send_cq->cq, l->recv_cq->cq, cap,
                                       ls ? ls->srq : nullptr, sig_all);
      if (l->qp) {
        add_or_undo(*lane, l, [&] { lane->engine().destroy_qp(l->qp); });
        if (ls && ls->error_cq == nullptr) ls->error_cq = l->recv_cq;
      }
      return l->qp;
    });
  } catch (const std::exception&) {  // thrown on the lcore (run_on): nothing was kept
    ++counts().alloc_failures;
  } catch (...) {  // Stopped: no half-made record for ~AttachServer to find
    c.qps.erase(h);
    throw;
  }
  if (qp == nullptr) {
    c.qps.erase(h);
    ::munmap(p, bytes);
    ::close(memfd);
    uncharge(cost);
    return ENOMEM;
  }
  rep.handle = h;
  rep.key = qp->qpn;
  rep.slots = rings.sq_slots;
  rep.slots2 = r.srq ? 0 : rings.rq_slots;
  rep.bytes = bytes;
  rep.offset2 = rings.rq_offset();
  c.qps[rep.handle] = QpRec{std::move(lq), p, bytes, r.pd, r.send_cq, r.recv_cq, r.srq, cost};
  ++pd->second.refs;
  ++scq->second.refs;
  ++rcq->second.refs;
  if (r.srq) ++srq->second.refs;
  ++counts().qps;
  out = Out{{memfd, -1}, 1, {memfd, -1}, 1};
  return 0;
}

int Ops::destroy_qp() {
  const auto it = c.qps.find(rq.handle);
  if (it == c.qps.end()) return EINVAL;
  LaneQp* l = it->second.lane.get();
  Lane* lane = c.lane;
  LaneCm* lcm = c.cm.get();
  const int rc = run([=] {
    if (lcm) lcm->session->release(l->qp);  // a connection on it: DREQ, the CM lets go
    lane->remove(l);
    return lane->engine().destroy_qp(l->qp);
  });
  if (rc != 0) return rc;
  ::munmap(it->second.map, it->second.bytes);
  uncharge(it->second.charge);
  --c.pds[it->second.pd].refs;
  --c.cqs[it->second.send_cq].refs;
  --c.cqs[it->second.recv_cq].refs;
  if (it->second.srq) --c.srqs[it->second.srq].refs;
  c.qps.erase(it);
  --counts().qps;
  return 0;
}

std::optional<wire::MacAddr> Ops::resolve(const wire::Ipv6Addr& g) {
  const wire::Ipv4Addr ip{static_cast<std::uint32_t>(g.b[12]) << 24 |
                          static_cast<std::uint32_t>(g.b[13]) << 16 |
                          static_cast<std::uint32_t>(g.b[14]) << 8 | g.b[15]};
  // Loop 0 of the port answers ARP and keeps the neighbour cache. A MAC it does not know yet
  // takes a while (up to resolve_timeout_ms): the request is deferred (Pending) and the
  // control thread serves the others meanwhile; AttachServer::tick() runs it again.
  port::PollLoop* l0 = s.ports_[c.port].loops[0];
  const bool first = !c.pending;
  const auto mac = run_on(l0, s.stop_, s.loops_stopped_, [l0, ip, first] {
    auto found = l0->neighbour().lookup(ip);
    if (!found && first) l0->resolve(ip);
    return found;
  });
  if (mac) return mac;
  if (c.pending && c.pending->expired) return std::nullopt;
  throw Deferred{ip};
}

int Ops::modify_qp() {
  const auto it = c.qps.find(rq.modify.qp);
  if (it == c.qps.end()) return EINVAL;
  engine::QpAttr attr = rq.modify.attr;
  const std::uint32_t mask = rq.modify.mask;
  // The peer's MAC, when the client names it, is a unicast one: the kernel never lets a
  // program's RoCE frames go to broadcast or a group address (and the engine has no multicast).
  if ((mask & engine::kQpAv) && (attr.ah.dmac.b[0] & 1) != 0) return EINVAL;
  if ((mask & engine::kQpAv) && attr.ah.dmac == wire::MacAddr{}) {
    // The client names its peer by GID; the port's ARP finds the MAC.
    const auto mac = resolve(attr.ah.dgid);
    if (!mac) return EHOSTUNREACH;
    attr.ah.dmac = *mac;
  }
  LaneQp* l = it->second.lane.get();
  engine::Engine* e = &eng();
  return run([=] { return e->modify_qp(l->qp, attr, mask); });
}

int Ops::create_srq() {
  const CreateSrqReq& r = rq.srq;
  const auto pd = c.pds.find(r.pd);
  if (pd == c.pds.end()) return EINVAL;
  if (r.max_wr == 0 || r.max_wr > quota().max_srq_wr || r.max_sge == 0 || r.max_sge > kMaxSge)
    return EINVAL;
  if (c.srqs.size() >= quota().max_srqs) return EDQUOT;
  const std::uint32_t slots = ShmQueueLayout<RecvEntry>::slots_for(r.max_wr);
  const std::size_t bytes = ShmQueueLayout<RecvEntry>::bytes(slots);
  const std::uint64_t cost = srq_cost(r.max_wr, r.max_sge, bytes);
  if (const int rc = charge(cost)) return rc;
  int memfd = -1;
  void* p = make_shared("roce-srq", bytes, memfd);
  std::unique_ptr<LaneSrq> ls;
  std::uint32_t h = 0;
  if (p != nullptr) {
    try {
      ls = std::make_unique<LaneSrq>();
      h = new_handle();
      c.srqs[h];  // the record's node before the lane has the SRQ: nothing throws after
    } catch (...) {
      ls.reset();
    }
  }
  if (!ls) {
    if (h != 0) c.srqs.erase(h);
    if (p) ::munmap(p, bytes);
    if (memfd >= 0) ::close(memfd);
    uncharge(cost);
    return ENOMEM;
  }
  ls->rq = ShmConsumer<RecvEntry>(ShmQueueLayout<RecvEntry>::init(p, slots), slots);
  Lane* lane = c.lane;
  LaneSrq* l = ls.get();
  engine::Pd* epd = pd->second.pd;
  const std::uint32_t max_wr = r.max_wr, max_sge = r.max_sge;
  engine::Srq* srq = nullptr;
  try {
    srq = run([=] {
      l->srq = lane->engine().create_srq(epd, max_wr, max_sge);
      if (l->srq) add_or_undo(*lane, l, [&] { lane->engine().destroy_srq(l->srq); });
      return l->srq;
    });
  } catch (const std::exception&) {  // thrown on the lcore (run_on): nothing was kept
    ++counts().alloc_failures;
  } catch (...) {  // Stopped: no half-made record for ~AttachServer to find
    c.srqs.erase(h);
    throw;
  }
  if (srq == nullptr) {
    c.srqs.erase(h);
    ::munmap(p, bytes);
    ::close(memfd);
    uncharge(cost);
    return ENOMEM;
  }
  rep.handle = h;
  rep.slots = slots;
  rep.bytes = bytes;
  c.srqs[rep.handle] = SrqRec{std::move(ls), p, bytes, r.pd, 0, cost};
  ++pd->second.refs;
  out = Out{{memfd, -1}, 1, {memfd, -1}, 1};
  return 0;
}

int Ops::destroy_srq() {
  const auto it = c.srqs.find(rq.handle);
  if (it == c.srqs.end()) return EINVAL;
  if (it->second.refs != 0) return EBUSY;
  LaneSrq* l = it->second.lane.get();
  Lane* lane = c.lane;
  const int rc = run([=] {
    const int r = lane->engine().destroy_srq(l->srq);
    if (r == 0) lane->remove(l);
    return r;
  });
  if (rc != 0) return rc;
  ::munmap(it->second.map, it->second.bytes);
  uncharge(it->second.charge);
  --c.pds[it->second.pd].refs;
  c.srqs.erase(it);
  return 0;
}

int Ops::cm_open() {
  if (c.cm) return 0;
  if (c.fds >= quota().max_fds) return EDQUOT;
  EventRing<CmEventEntry> er;
  if (!er.make("roce-cm-events", kCmEventSlots)) return ENOMEM;
  auto lc = std::make_unique<LaneCm>();
  lc->ring = er.ring;
  lc->event_fd = er.efd;
  lc->backlog_limit = s.cfg_.cm_backlog;
  Lane* lane = c.lane;
  LaneCm* l = lc.get();
  const wire::Ipv4Addr ip = s.ports_[c.port].ipv4;
  const auto mtu = static_cast<std::uint8_t>(eng().config().max_mtu);
  cm::SessionLimits lim;
  lim.max_conns = quota().max_cm_conns;
  lim.max_listens = quota().max_listens;
  lim.low_ports = c.privileged;  // uids in privileged_uids (CAP_NET_BIND_SERVICE's part)
  const bool ok = run([=] {
    try {
      l->session = std::make_unique<cm::CmSession>(
          lane->cm_hub(), ip, mtu, [lane, l](cm::SessionEvent ev) { lane->push(*l, ev); });
    } catch (const std::exception&) {
      return false;  // QP1 could not be created
    }
    l->session->set_limits(lim);
    lane->add(l);
    return true;
  });
  if (!ok) {
    ::munmap(er.map, er.bytes);
    ::close(er.memfd);
    ::close(er.efd);
    return EBUSY;
  }
  c.cm = std::move(lc);
  ++c.fds;
  c.cm_map = er.map;
  c.cm_bytes = er.bytes;
  c.memory += page_round(er.bytes) + sizeof(LaneCm);  // always granted, once
  counts().memory += page_round(er.bytes) + sizeof(LaneCm);
  rep.bytes = er.bytes;
  rep.slots = kCmEventSlots;
  out = Out{{er.memfd, er.efd}, 2, {er.memfd, -1}, 1};
  return 0;
}

int Ops::cm_listen() {
  if (!c.cm) return EINVAL;
  LaneCm* l = c.cm.get();
  const std::uint16_t port = rq.cm.port;
  return run([=] { return l->session->listen(port); });
}

int Ops::cm_connect() {
  if (!c.cm) return EINVAL;
  const auto it = c.qps.find(rq.cm.qp);
  if (it == c.qps.end()) return EINVAL;
  // The CM moves the QP to RTR with the peer's MAC: find it now (ARP), off the lcore.
  const wire::Ipv4Addr dst = rq.cm.dst;
  const auto mac = resolve(wire::ipv4_mapped(dst));
  if (!mac) return EHOSTUNREACH;
  LaneCm* l = c.cm.get();
  Lane* lane = c.lane;
  engine::Qp* qp = it->second.lane->qp;
  const std::uint16_t port = rq.cm.port;
  const cm::SessionParam p = cm_param(rq.cm);
  std::uint32_t id = 0;
  const int rc = run([=, &id] {
    if (l->backlog_full()) return EAGAIN;  // its events are not read: no more of them
    lane->learn(dst, *mac);
    return l->session->connect(qp, dst, port, p, id);
  });
  rep.handle = id;
  return rc;
}

int Ops::cm_accept() {
  if (!c.cm) return EINVAL;
  const auto it = c.qps.find(rq.cm.qp);
  if (it == c.qps.end()) return EINVAL;
  LaneCm* l = c.cm.get();
  Lane* lane = c.lane;
  engine::Qp* qp = it->second.lane->qp;
  const std::uint32_t id = rq.cm.id;
  const cm::SessionParam p = cm_param(rq.cm);
  // The requester's MAC, for the QP's RTR (its REQ came from it: the cache has it, or ARP).
  const auto peer = run([=] { return l->session->peer_of(id); });
  if (!peer) return ENOENT;
  const auto mac = resolve(wire::ipv4_mapped(*peer));
  if (!mac) return EHOSTUNREACH;
  return run([=] {
    if (l->backlog_full()) return EAGAIN;
    lane->learn(*peer, *mac);
    return l->session->accept(id, qp, p);
  });
}

int Ops::cm_reject() {
  if (!c.cm) return EINVAL;
  LaneCm* l = c.cm.get();
  const std::uint32_t id = rq.cm.id;
  const cm::SessionParam p = cm_param(rq.cm);
  return run([=] { return l->session->reject(id, p.private_data); });
}

int Ops::cm_disconnect() {
  if (!c.cm) return EINVAL;
  LaneCm* l = c.cm.get();
  const std::uint32_t id = rq.cm.id;
  return run([=] { return l->session->disconnect(id); });
}

int Ops::cm_refuse() {
  if (!c.cm) return EINVAL;
  LaneCm* l = c.cm.get();
  const std::uint32_t id = rq.cm.id;
  return run([=] { return l->session->refuse(id); });
}

int Ops::cm_notify() {
  if (!c.cm) return EINVAL;
  LaneCm* l = c.cm.get();
  const std::uint32_t id = rq.cm.id;
  return run([=] { return l->session->notify(id); });
}

int Ops::cm_sidr_listen() {
  if (!c.cm) return EINVAL;
  LaneCm* l = c.cm.get();
  const std::uint16_t port = rq.cm.port;
  return run([=] { return l->session->sidr_listen(port); });
}

int Ops::cm_sidr_resolve() {
  if (!c.cm) return EINVAL;
  // The CM sends the SIDR_REQ to the peer's MAC: find it now (ARP), off the lcore.
  const wire::Ipv4Addr dst = rq.cm.dst;
  const auto mac = resolve(wire::ipv4_mapped(dst));
  if (!mac) return EHOSTUNREACH;
  LaneCm* l = c.cm.get();
  Lane* lane = c.lane;
  const std::uint16_t port = rq.cm.port;
  const cm::SessionParam p = cm_param(rq.cm);
  // Each exchange holds a slot of the port's CM (shared by every client) until its reply or
  // the CM gives up; a client has as many in flight as it may leave CM events unread (its
  // ring's and the backlog's: each exchange ends in one event).
  const std::size_t budget = std::size_t{kCmEventSlots} + s.cfg_.cm_backlog;
  std::uint32_t id = 0;
  const int rc = run([=, &id] {
    if (l->session->sidr_resolving() >= budget) return EDQUOT;
    lane->learn(dst, *mac);
    return l->session->sidr_resolve(dst, port, p.private_data, id);
  });
  rep.handle = id;
  return rc;
}

int Ops::cm_sidr_accept() {
  if (!c.cm) return EINVAL;
  // The QPN the peer is told to send to: one of this client's UD QPs, never another's.
  const std::uint32_t qpn = rq.cm.qpn;
  const bool own = std::any_of(c.qps.begin(), c.qps.end(), [&](const auto& kv) {
    const engine::Qp* q = kv.second.lane->qp;
    return q->qpn == qpn && q->type == engine::QpType::kUd;
  });
  if (!own) return EINVAL;
  LaneCm* l = c.cm.get();
  const std::uint32_t id = rq.cm.id;
  const std::uint32_t qkey = rq.cm.qkey;
  const cm::SessionParam p = cm_param(rq.cm);
  return run([=] { return l->session->sidr_accept(id, qpn, qkey, p.private_data); });
}

int Ops::cm_sidr_reject() {
  if (!c.cm) return EINVAL;
  LaneCm* l = c.cm.get();
  const std::uint32_t id = rq.cm.id;
  return run([=] { return l->session->sidr_reject(id); });
}

int Ops::cm_unlisten() {
  if (!c.cm) return EINVAL;
  LaneCm* l = c.cm.get();
  const std::uint16_t port = rq.cm.port;
  const bool udp = rq.cm.udp != 0;
  return run([=] { return l->session->unlisten(port, udp); });
}

int Ops::neighbour() {
  // Loop 0 of the port answers ARP and keeps the neighbour cache; nothing waits here.
  port::PollLoop* l0 = s.ports_[c.port].loops[0];
  const wire::Ipv4Addr ip = rq.cm.dst;
  // Each ask is a broadcast from roced's port: a client gets kArpAsksPerWindow of them per
  // kArpWindowNs (an Endpoint asks once per new source and again every 200 ms while it waits,
  // 64 waiting at most); beyond, the cache is only looked at. A client asking in a loop over
  // many addresses made roced flood the segment (and fill the cache with the answers).
  bool ask = rq.handle != 0;
  if (ask) {
    const std::uint64_t now = port::now_ns();
    if (now - c.arp_window_ns >= kArpWindowNs) {
      c.arp_window_ns = now;
      c.arp_asks = 0;
    }
    ask = c.arp_asks < kArpAsksPerWindow;
    c.arp_asks += ask ? 1 : 0;
  }
  const auto mac = run_on(l0, s.stop_, s.loops_stopped_, [l0, ip, ask] {
    auto found = l0->neighbour().lookup(ip);
    if (!found && ask) l0->resolve(ip);
    return found;
  });
  if (mac && c.lane != nullptr && c.events) {
    // The client's lane fills it into the client's UD address vectors that come without a MAC
    // (the libibverbs provider's attached AH names its peer by GID only): kept for this
    // client alone, charged to it (EDQUOT when an entry more does not fit).
    LaneEvents* ev = c.events.get();
    const wire::MacAddr m = *mac;
    constexpr std::uint64_t kCost = LaneEvents::kUdNeighbourCost;
    if (c.held() + kCost > quota().max_memory) {
      const bool known = run([=] { return ev->ud_macs.contains(ip.v); });
      if (!known) return EDQUOT;
    }
    if (run([=] { return Lane::learn_ud(*ev, ip, m); })) charge(kCost);
  }
  rep.handle = mac ? 1 : 0;  // (not an error: roced's count of bad requests stays)
  return 0;
}

bool AttachServer::handle(Client& c) {
  Request rq;
  iovec iov{&rq, sizeof rq};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(kScmMaxFd * sizeof(int))];
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  const ssize_t n = ::recvmsg(c.fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n == 0) return false;
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  // Take every passed descriptor; they are closed when the request is done (a mapping keeps
  // what it needs).
  std::vector<int> passed;
  for (cmsghdr* h = CMSG_FIRSTHDR(&m); h != nullptr; h = CMSG_NXTHDR(&m, h))
    if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
      const std::size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < k; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(h) + i * sizeof(int), sizeof f);
        passed.push_back(f);
      }
    }
  // MSG_CTRUNC (cannot be for descriptors, there is room for SCM_MAX_FD): a protocol error,
  // answered and disconnected.
  const bool ctrunc = (m.msg_flags & MSG_CTRUNC) != 0;
  const std::uint64_t sent_before = c.to_closer;
  execute(c, rq, static_cast<std::size_t>(n) == sizeof rq && !(m.msg_flags & MSG_TRUNC) && !ctrunc,
          passed);
  if (ctrunc || *c.closing > kMaxClosing) return false;  // beyond: descriptors that do not close
  // This request brought descriptors for the Closer while its uid's, or everyone's, are over
  // their bound: disconnected (its uid cannot connect again until they are closed).
  return c.to_closer == sent_before ||
         (c.uid_closing->load() < static_cast<int>(cfg_.closing_per_uid) &&
          closer_->pending() < static_cast<int>(cfg_.closing_total));
}

void AttachServer::release(Client& c, std::vector<int>& passed) {
  for (int f : passed)
    if (::fcntl(f, F_GET_SEALS) >= 0)
      ::close(f);  // shmem (a memfd): never blocks
    else {
      closer_->close(f, c.closing, c.uid_closing);
      ++c.to_closer;
    }
  passed.clear();
}

void AttachServer::execute(Client& c, const Request& rq, bool whole, std::vector<int>& passed) {
  Reply rep;
  rep.seq = rq.seq;
  Out out;
  PortCounts& pc = counts_[c.port];
  if (whole && (c.hello || rq.op == Op::kHello) && !c.pending) ++pc.requests;  // (once)
  // Fields first (request_check.cc: privileged Q_Keys, sizes, ...), then the handler.
  int err = check_request(rq, whole, c.hello, passed.size(),
                          RequestLimits{cfg_.quotas.max_memory, c.privileged});
  if (err == 0) {
    Ops ops{*this, c, rq, rep, out, passed};
    try {
      switch (rq.op) {
        case Op::kHello:
          err = ops.hello();
          break;
        case Op::kAllocPd:
          err = ops.alloc_pd();
          break;
        case Op::kDeallocPd:
          err = ops.dealloc_pd();
          break;
        case Op::kRegRegion:
          err = ops.reg_region();
          break;
        case Op::kDeregRegion:
          err = ops.dereg_region();
          break;
        case Op::kRegMr:
          err = ops.reg_mr();
          break;
        case Op::kDeregMr:
          err = ops.dereg_mr();
          break;
        case Op::kReregMr:
          err = ops.rereg_mr();
          break;
        case Op::kCreateCq:
          err = ops.create_cq();
          break;
        case Op::kDestroyCq:
          err = ops.destroy_cq();
          break;
        case Op::kCreateQp:
          err = ops.create_qp();
          break;
        case Op::kDestroyQp:
          err = ops.destroy_qp();
          break;
        case Op::kModifyQp:
          err = ops.modify_qp();
          break;
        case Op::kCreateSrq:
          err = ops.create_srq();
          break;
        case Op::kDestroySrq:
          err = ops.destroy_srq();
          break;
        case Op::kCmOpen:
          err = ops.cm_open();
          break;
        case Op::kCmListen:
          err = ops.cm_listen();
          break;
        case Op::kCmConnect:
          err = ops.cm_connect();
          break;
        case Op::kCmAccept:
          err = ops.cm_accept();
          break;
        case Op::kCmReject:
          err = ops.cm_reject();
          break;
        case Op::kCmDisconnect:
          err = ops.cm_disconnect();
          break;
        case Op::kCqNotify:
          err = ops.cq_notify();
          break;
        case Op::kCmRefuse:
          err = ops.cm_refuse();
          break;
        case Op::kCmNotify:
          err = ops.cm_notify();
          break;
        case Op::kNeighbour:
          err = ops.neighbour();
          break;
        case Op::kCmSidrListen:
          err = ops.cm_sidr_listen();
          break;
        case Op::kCmSidrResolve:
          err = ops.cm_sidr_resolve();
          break;
        case Op::kCmSidrAccept:
          err = ops.cm_sidr_accept();
          break;
        case Op::kCmSidrReject:
          err = ops.cm_sidr_reject();
          break;
        case Op::kCmUnlisten:
          err = ops.cm_unlisten();
          break;
        default:
          err = EINVAL;
          break;
      }
    } catch (const Deferred& d) {
      release(c, passed);
      const std::uint64_t now = port::now_ns();
      if (!c.pending)
        c.pending = Pending{rq, d.ip, now + cfg_.resolve_timeout_ms * kMs, now + kResolveStepNs};
      else
        c.pending->next_ns = now + kResolveStepNs;
      return;  // the reply waits for ARP
    } catch (const NoHandle&) {
      err = ENOMEM;
    } catch (const Stopped&) {
      release(c, passed);
      throw;
    } catch (const std::exception& e) {
      // An allocation failed, here or in a command on the lcore (run_on passes it on): this
      // request fails, the client and roced go on.
      std::fprintf(stderr, "roced: attach: client %u: request %u failed: %s\n", c.id,
                   static_cast<unsigned>(rq.op), e.what());
      ++pc.alloc_failures;
      err = ENOMEM;
    }
  }
  c.pending.reset();
  release(c, passed);
  if (err != 0) {
    ++counts_[c.port].bad;  // (c.port may have been set by this very hello)
    rep = Reply{};
    rep.seq = rq.seq;
    rep.err = err;
    send_reply(c.fd, rep);
    return;
  }
  send_reply(c.fd, rep, out.send, out.nsend);
  for (int i = 0; i < out.nclose; ++i) ::close(out.close_after[i]);
}

}  // namespace roce::attach
