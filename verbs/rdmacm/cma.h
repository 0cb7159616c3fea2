/// @file
/// librdmacm's state machine over the appliance's CM (docs/verbs-compat.md "librdmacm"): event
/// channels, ids and their states, address and route resolution, listen / connect / accept /
/// reject / disconnect on a port's client::Context, and the events in rdma-core's structs.
/// Independent of libibverbs' functions: the C API (librdmacm.cc) creates QPs and PDs through
/// libibverbs and hands the appliance's QP (bridge qp_of) in; the tests hand a Context's QP in
/// directly.
///
/// Locking: `mu_` guards every id, channel and queue; a Context is called with its port's lock
/// held, taken after `mu_` (never the other way round). deliver() (the provider's CM sink) is
/// called without any of them.
#pragma once

#include <rdma/rdma_cma.h>
#include <roce/client.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <vector>

namespace roce::rdmacm {

/// One appliance port: an ibv_context of the provider (null in the tests) and its Context.
struct Port {
  ibv_context* verbs = nullptr;
  client::Context* ctx = nullptr;
  std::mutex* lock = nullptr;
  ibv_pd* pd = nullptr;  ///< the device's default PD (the C API allocates it)
  /// Ports cm_listen'ed or cm_sidr_listen'ed (key(), the Context cannot unlisten).
  std::set<std::uint32_t> listened;
};

struct Id;

/// rdma_event_channel with its queue; `pub.fd` is an eventfd whose count is the queue's length
/// (written and read under Cma::mu_, EFD_SEMAPHORE: each read takes one), so poll() on it says
/// whether an event waits, and reading it under the lock never blocks.
struct Channel {
  rdma_event_channel pub{};
  std::deque<struct Event*> queue;
  int ids = 0;      ///< ids reporting here
  int readers = 0;  ///< threads inside get_event
  bool sync = false;
  bool closed = false;  ///< destroyed while a reader waited: kept, the reader blocks for good
};

/// What rdma_get_cm_event hands out (rdma-core's struct cma_event holds the same: the public
/// event, room for the private data, the id whose count the ack lowers).
struct Event {
  rdma_cm_event pub{};
  std::uint8_t private_data[256]{};
  Id* owner = nullptr;  ///< a connect request's: the listener
};

enum class State : std::uint8_t {
  kIdle,
  kBound,
  kAddrQuery,
  kAddrResolved,
  kRouteResolved,
  kListen,
  kRequest,     ///< a connect request not yet answered
  kConnecting,  ///< REQ sent
  kAccepting,   ///< REP sent
  kConnected,
  kDisconnected,
  kClosed,  ///< rejected, refused, unreachable
};

struct Id {
  rdma_cm_id pub{};  ///< first member: the handle a program holds is &pub
  Channel* channel = nullptr;
  Port* port = nullptr;
  State state = State::kIdle;
  bool sync = false;
  bool has_conn = false;  ///< `conn` names a CM connection on `port`
  bool removed = false;   ///< DEVICE_REMOVAL reported (the port's device went away)
  std::uint32_t conn = 0;
  std::uint16_t bound = 0;       ///< the TCP port (a request's: its listener's)
  bool owns_port = false;        ///< `bound` was taken by this id's bind
  Id* listener = nullptr;        ///< a request's listen id while its CONNECT_REQUEST is unread
  int backlog = 0, pending = 0;  ///< a listener's: its requests whose events are unread
  std::vector<Port*> listen_ports;
  int unacked = 0;  ///< events reported and not yet acked (rdma_destroy_id waits for 0)
  std::uint8_t req_responder_resources = 0, req_initiator_depth = 0;  ///< a request's offer
  std::chrono::steady_clock::time_point deadline, next_ask;
  ibv_sa_path_rec path{};
  std::uint8_t tos = 0;
  bool reuseaddr = false, afonly = false;
  std::uint8_t ack_timeout = 0;
  // Owned by the C API: CQs and channels rdma_create_qp made, rdma_create_ep's QP attributes for
  // the requests of a listener.
  bool own_cqs = false;
  bool has_ep_attr = false;
  ibv_qp_init_attr ep_attr{};
  /// ECE (rdma_set_local_ece, rdma_get_remote_ece): ours for the REQ/REP (vendor 0: none),
  /// the peer's from its REQ or REP, and whether the connection runs selective repeat.
  ibv_ece local_ece{}, remote_ece{};
  bool selective_repeat = false;
};

inline Id* id_of(rdma_cm_id* id) { return reinterpret_cast<Id*>(id); }
inline Channel* channel_of(rdma_event_channel* c) { return reinterpret_cast<Channel*>(c); }

/// The private data field sizes of rdma_cm over IP (the REQ's 92 less the 36-byte cma header,
/// the REP's 196, the REJ's 148): a program's data up to these, events report these lengths.
constexpr std::size_t kReqPrivate = 56, kRepPrivate = 196, kRejPrivate = 148;
/// SIDR (UD ids): the SIDR_REQ's 216 less the cma header, the SIDR_REP's 136.
constexpr std::size_t kSidrReqPrivate = 180, kSidrRepPrivate = 136;

inline bool is_ud(const Id* id) { return id->pub.ps == RDMA_PS_UDP; }
/// A port in its port space: TCP and UDP ports are apart.
inline std::uint32_t key(const Id* id, std::uint16_t port) {
  return (is_ud(id) ? 0x10000u : 0u) | port;
}

class Cma {
 public:
  Cma() = default;
  ~Cma();
  Cma(const Cma&) = delete;
  Cma& operator=(const Cma&) = delete;

  /// Ports (devices) ids may use; the first one is the default for unbound ids.
  void add_port(Port* p);
  std::vector<Port*> ports();

  // Every call returns 0 or an errno value (the C API sets errno and returns -1).
  Channel* create_channel(bool sync = false);  ///< null with errno set
  int destroy_channel(Channel* c);
  /// `c` null: a synchronous id with a channel of its own.
  Id* create_id(Channel* c, void* context, rdma_port_space ps, ibv_qp_type qp_type);
  int destroy_id(Id* id);
  int bind(Id* id, const sockaddr* addr);
  int resolve_addr(Id* id, const sockaddr* src, const sockaddr* dst, int timeout_ms);
  int resolve_route(Id* id, int timeout_ms);
  int listen(Id* id, int backlog);
  /// `qp`: the appliance QP behind id->pub.qp (null: EINVAL, no program-managed QPs).
  int connect(Id* id, client::Qp* qp, const rdma_conn_param* p);
  int accept(Id* id, client::Qp* qp, const rdma_conn_param* p);
  int reject(Id* id, const void* private_data, std::uint8_t len);
  int disconnect(Id* id);
  int notify(Id* id, ibv_event_type ev);
  int migrate(Id* id, Channel* c);
  int set_option(Id* id, int level, int optname, const void* optval, std::size_t optlen);
  /// rdma_set_local_ece / rdma_get_remote_ece: rdma-core's checks (EINVAL for an id with a
  /// QP of rdma_create_qp's, whose ECE is the QP's: ibv_set_ece / ibv_query_ece).
  int set_local_ece(Id* id, const ibv_ece* ece);
  int get_remote_ece(Id* id, ibv_ece* ece);
  /// The ECE the REQ/REP of `id` will carry when it has none of rdma_set_local_ece's (the
  /// C API gives its QP's, ibv_query_ece); vendor 0 leaves it as it is.
  void default_local_ece(Id* id, const ibv_ece& ece);
  /// rdma_get_cm_event: blocks on the channel's fd unless it is O_NONBLOCK (EAGAIN).
  int get_event(Channel* c, rdma_cm_event** out);
  int ack_event(rdma_cm_event* e);
  /// A synchronous id's call: acks id->pub.event, waits for the id's next event, keeps it in
  /// id->pub.event and turns its status into the call's result (rdma-core's ucma_complete).
  int complete(Id* id);
  /// The CM sink of `port`: one event of its Context.
  void deliver(Port* port, client::CmEvent&& ev);
  /// At the program's exit, what the kernel's CM does when the rdma_cm file closes, since the
  /// appliance's CM ends with the process: connections still up are disconnected (DREQ), and
  /// the exit waits (at most `budget`) for the DREQs this process sent to be answered and for
  /// what the CM last queued (a DREP) to leave: otherwise a peer waits for its DISCONNECTED
  /// until its DREQ retries run out. Call before the provider stops its port.
  void linger_at_exit(std::chrono::milliseconds budget = std::chrono::milliseconds(1000));
  /// Called (with the Cma's lock held) when a connection of an id with a QP is established,
  /// with whether it runs selective repeat: the C API stores that in the QP's ECE
  /// (ibv_query_ece). Set before the first connection.
  void (*on_established)(rdma_cm_id* id, bool selective_repeat) = nullptr;

 private:
  Channel* make_channel(bool sync);  ///< with mu_ held
  void queue(Channel* c, Event* e);
  /// Takes one queued event's count off `c`'s fd (its event left the queue).
  static void unqueue_token(Channel* c);
  void set_port(Id* id, Port* p);
  Port* port_with(std::uint32_t ipv4);
  void fill_route(Id* id);
  void timer_loop();
  void check_resolve(Id* id, std::chrono::steady_clock::time_point now);
  void drop_conn(Id* id);
  int connect_ud(Id* id, const rdma_conn_param* p);
  void deliver_request(Port* port, client::CmEvent&& ev);
  Event* new_event(Id* id, rdma_cm_event_type type, int status);

  std::mutex mu_;
  std::condition_variable acked_;
  std::vector<Port*> ports_;
  std::set<Id*> ids_;
  std::set<Channel*> channels_;  ///< every channel not yet destroyed (freed with the Cma)
  std::map<std::pair<Port*, std::uint32_t>, Id*> conns_;
  std::map<std::pair<Port*, std::uint32_t>, Id*> listeners_;  ///< by key()
  std::set<std::uint32_t> bound_ports_;  ///< key()s of the ports bound by ids (EADDRINUSE)
  std::set<Id*> resolving_;
  std::thread timer_;
  std::condition_variable timer_cv_;
  bool stop_ = false;
  std::condition_variable disconnected_;             ///< a DISCONNECTED arrived
  std::set<std::pair<Port*, std::uint32_t>> dreqs_;  ///< connections we sent a DREQ on, unanswered
  std::chrono::steady_clock::time_point last_cm_{};  ///< our last CM call or event
};

}  // namespace roce::rdmacm
