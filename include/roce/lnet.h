/// @file
/// roce::lnet: an LNet-style messaging API on top of libroce's Context (client.h), after the
/// Motr LNet transport HLD (the seed of issue 17). Vocabulary and rules are the seed's:
///   - a Domain (m0_net_domain) over one Context: registration, buffer pools, a provisioning
///     thread;
///   - transfer machines (Tm, m0_net_transfer_mc) named by end-point addresses
///     "NID:PID:Portal:TMID" (EndPoint), with `*` as TMID allocating one from the top down;
///   - network buffers (NetBuffer, m0_net_buffer) with a buffer vector of up to 4 segments in
///     registered shared memory, added to one of the queues of a Tm (QueueType);
///   - message send/receive (RC SEND into a shared receive queue), passive/active bulk (the
///     passive side advertises a descriptor, the active side moves the data with RDMA READ or
///     WRITE and tells the passive side on a control QP);
///   - multi-message receive buffers (min_receive_size, max_receive_msgs, kBufQueued);
///   - receive buffer pools (BufferPool) attached to Tms: automatic re-provisioning before the
///     application's callback, coloured get, deficit and not-empty rules;
///   - asynchronous event delivery on a thread confined to a CPU set, or synchronous
///     (deliver_synchronously, pending, deliver_all, notify);
///   - timeouts and cancellation (status -ETIMEDOUT / -ECANCELED).
/// docs/client-api.md, "The messaging API", is the guide.
#pragma once

#include <roce/client.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace roce::lnet {

// ---- end-point addresses ------------------------------------------------------------------------

/// Limits of the address components ([r.m0.net.xprt.lnet.end-point-address]). PID names the
/// roced instance on a host, the portal an opening (LNet's 0..63), the TMID a transfer machine.
inline constexpr std::uint32_t kMaxPid = 3;
inline constexpr std::uint32_t kMaxPortal = 63;
inline constexpr std::uint32_t kMaxTmid = 63;
/// The TCP port of a Tm's connection listener is kOobPortBase + ((pid*64 + portal)*64 + tmid)
/// unless DomainOptions::oob_port_base says otherwise: one port per address, so that binding
/// it is what makes an address unique on a host (16384 .. 32767 by default).
inline constexpr std::uint16_t kOobPortBase = 16384;

/// "a.b.c.d@roce[N]:PID:Portal:TMID" -- the seed's 4-tuple "NID:PID:PortalNumber:TMID", with
/// the NID the IPv4 address of the roced port (its RoCE address) and the network type "roce"
/// (optionally numbered, like o2ib0). `tmid` nullopt: "*" (only for Tm::start).
struct EndPoint {
  Ipv4Addr ip{};
  std::uint32_t net = 0;  ///< the N of "@roceN" (0 when absent)
  std::uint32_t pid = 0;
  std::uint32_t portal = 0;
  std::optional<std::uint32_t> tmid;

  /// Parses `s`; on failure nullopt and `*error` (when given) says which part is wrong.
  static std::optional<EndPoint> parse(std::string_view s, std::string* error = nullptr);
  std::string str() const;  ///< the canonical form: "192.0.2.1@roce:0:31:5"
  bool operator==(const EndPoint& o) const = default;
  bool operator<(const EndPoint& o) const { return str() < o.str(); }
};

// ---- buffers and events -------------------------------------------------------------------------

/// The queues of a transfer machine (m0_net_queue_type).
enum class QueueType : std::uint8_t {
  kMsgRecv,
  kMsgSend,
  kPassiveBulkRecv,
  kPassiveBulkSend,
  kActiveBulkRecv,
  kActiveBulkSend,
  kCount_,
};
const char* to_string(QueueType q);

/// NetBuffer::flags.
enum BufFlags : std::uint32_t {
  kBufRegistered = 1u << 0,
  kBufQueued = 1u << 1,      ///< on a queue of a Tm (M0_NET_BUF_QUEUED)
  kBufInProgress = 1u << 2,  ///< its operation is on the wire
  kBufCancelled = 1u << 3,   ///< Tm::del was called; the event carries -ECANCELED
  kBufTimedOut = 1u << 4,    ///< its deadline passed; the event carries -ETIMEDOUT
};

struct NetBuffer;
class Tm;
struct OobHello;
class BufferPool;
class SerializedContext;

/// A buffer event (m0_net_buffer_event).
struct BufferEvent {
  NetBuffer* buf = nullptr;
  QueueType queue = QueueType::kMsgRecv;
  int status = 0;              ///< 0, -ECANCELED, -ETIMEDOUT, -EIO (the transfer failed)
  std::uint64_t offset = 0;    ///< kMsgRecv: where in the buffer vector the message starts
  std::uint64_t length = 0;    ///< bytes received or moved
  std::optional<EndPoint> ep;  ///< kMsgRecv: the sender's end point
  /// Transport: the buffer stays queued (a multi-message receive buffer with room left), so
  /// buffer_event_post leaves kBufQueued set ([r.m0.net.xprt.lnet.multiple-messages-in-buffer]).
  bool keep_queued = false;
};
using BufferCallback = std::function<void(const BufferEvent&)>;

/// A segment of a buffer vector: registered shared memory.
struct Segment {
  void* addr = nullptr;
  std::uint64_t length = 0;
};

/// A network buffer (m0_net_buffer). Fill `segs`, `cb` and, per queue, `ep`, `desc`,
/// `min_receive_size` / `max_receive_msgs`, `length`, `deadline`; register with Domain, add to a
/// Tm's queue. Fields below "transport" are the library's.
struct NetBuffer {
  std::vector<Segment> segs;  ///< the buffer vector: at most 4 segments
  BufferCallback cb;
  std::uint64_t length = 0;  ///< kMsgSend / kActiveBulkSend: bytes to send (0: all)
  /// kMsgSend: the destination. kPassiveBulk*: the one peer whose control message may complete
  /// the buffer (a message from any other connection is refused and counted); unset: whoever
  /// holds the descriptor.
  std::optional<EndPoint> ep;
  std::vector<std::uint8_t> desc;      ///< passive: filled by Tm::add; active: copy the peer's
  std::uint64_t min_receive_size = 0;  ///< kMsgRecv: 0 = one message (the whole buffer)
  std::uint32_t max_receive_msgs = 1;  ///< kMsgRecv with min_receive_size: 0 = no limit
  /// The operation's deadline: the buffer is dequeued with -ETIMEDOUT when it passes.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  void* app = nullptr;  ///< the application's

  // transport
  std::uint32_t flags = 0;
  QueueType queue = QueueType::kMsgRecv;
  Tm* tm = nullptr;            ///< the Tm it is (or was last) queued on (nb_tm)
  BufferPool* pool = nullptr;  ///< the pool it belongs to (nb_pool)
  std::uint64_t capacity() const;
  struct Impl;
  std::shared_ptr<Impl> impl;  ///< registration (MRs), bookkeeping
};

// ---- domain and pools ---------------------------------------------------------------------------

struct DomainOptions {
  std::uint32_t pid = 0;  ///< the roced instance number this process is attached to
  /// The host address (dotted IPv4) where the connection listeners of every Tm are reached
  /// over TCP; empty: the NID's own address. A roced port's address is not the kernel's, so
  /// processes on one host use e.g. "127.0.0.1".
  std::string oob_host;
  /// The listener of address E is at port oob_port_base + ((E.pid*64 + E.portal)*64 + E.tmid).
  std::uint16_t oob_port_base = kOobPortBase;
  /// The NID of this domain's Tms: default the Context's port address, net 0.
  std::optional<Ipv4Addr> nid;
  /// A key shared by every domain that may connect to this one: hellos and their replies then
  /// carry a SipHash-2-4 tag over a nonce the listener chose, and a hello without the right tag
  /// is refused (EACCES) before anything is spent on it; a listener's reply without it fails
  /// the connection. nullopt: hellos are not authenticated.
  std::optional<std::array<std::uint8_t, 16>> oob_key;
  /// When a Tm has all its 64 connections and needs another, it closes the one that has carried
  /// nothing since its hello (or failed) the longest, if longer than this.
  std::chrono::milliseconds conn_reclaim_after{10000};
  /// A connection set-up's whole TCP exchange (connect, greeting, hello, reply): add() waits no
  /// longer for a peer that does not answer or trickles; its operations then end with
  /// -ETIMEDOUT. (A set-up that fails otherwise ends them with its reason: -EHOSTUNREACH no
  /// listener, -EPROTO another version, -EACCES key mismatch, -EBUSY, -EAGAIN, -EADDRNOTAVAIL
  /// as the peer's listener answered, or the QP calls' errno.)
  std::chrono::milliseconds oob_timeout{5000};
  /// Serialise every Context call on one mutex: needed with client::open_local, whose engine
  /// is single threaded (the Tms' threads and the application's then take turns).
  bool serialize_context = false;
};

class Domain {
 public:
  /// `ctx` must outlive the Domain.
  Domain(client::Context& ctx, DomainOptions opts = {});
  ~Domain();
  Domain(const Domain&) = delete;
  Domain& operator=(const Domain&) = delete;

  /// A buffer with `nseg` segments of `seg_size` bytes each, in one alloc_buffer() region,
  /// registered. Null with errno on failure. Freed with free_buffer().
  NetBuffer* alloc_buffer(std::uint32_t nseg, std::uint64_t seg_size);
  /// 0, or EBUSY while `nb` is queued on a Tm (kBufQueued: the engine may still write into it;
  /// nothing is freed), EINVAL for a buffer of a pool (it goes with its pool).
  int free_buffer(NetBuffer* nb);
  /// m0_net_buffer_register: every segment must lie in shared memory of the Context
  /// (alloc_buffer / register_memfd). 0 or an errno value.
  int register_buffer(NetBuffer& nb);
  int deregister_buffer(NetBuffer& nb);  ///< EBUSY while queued

  /// m0_net_domain_recv_pool_not_empty: the not-empty callback of receive pools. Minimal
  /// work: wakes the provisioning thread for Tms with a deficit ([Concurrency Control]).
  void recv_pool_not_empty(BufferPool& pool);

  client::Context& ctx() { return ctx_; }
  client::Pd* pd() { return pd_; }
  const DomainOptions& options() const { return opts_; }
  Ipv4Addr nid() const;
  std::pair<std::string, std::uint16_t> oob_locate(const EndPoint& ep) const;

 private:
  friend class Tm;
  void provision_loop();
  void async_loop();
  std::unique_ptr<SerializedContext> serialized_;
  client::Context& ctx_;
  DomainOptions opts_;
  client::Pd* pd_ = nullptr;
  std::mutex tms_mu_;
  std::vector<Tm*> tms_;
  std::mutex prov_mu_;
  std::condition_variable prov_cv_;
  bool prov_kick_ = false, prov_stop_ = false;
  std::thread prov_thread_;
  std::thread async_thread_;  ///< the Context's asynchronous events, to the Tms they concern
};

/// A pool of registered network buffers (m0_net_buffer_pool, [r.m0.net.network-buffer-pool]):
/// non-blocking get/put, a coloured get, and a not-empty callback.
class BufferPool {
 public:
  /// `count` buffers of `nseg` x `seg_size` bytes, registered in `dom`: carved out of as few
  /// regions as fit (one alloc_buffer and one MR per 64 MiB), not one region per buffer, so a
  /// pool costs roced's max_regions (128 per client) one region per 64 MiB. When a region
  /// cannot be had the pool is short: size() < count and error() says why.
  BufferPool(Domain& dom, std::uint32_t count, std::uint32_t nseg, std::uint64_t seg_size);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  /// The coloured get: the most recently used free buffer last used with `colour`, else one
  /// that has no colour yet, else the least recently used one; null when empty.
  NetBuffer* get(std::uint64_t colour);
  /// Returns `nb`, coloured with the colour of the Tm it last served. Invokes the not-empty
  /// callback (with the pool lock held, as the seed says) when the pool was empty. 0, or
  /// EBUSY while `nb` is queued on a Tm (kBufQueued: a multi-message buffer with room left, or
  /// one not yet given back; it is not taken), EINVAL for another pool's buffer, EALREADY when
  /// it is already in the pool.
  int put(NetBuffer* nb);
  std::uint32_t free_count() const;
  std::uint32_t size() const { return static_cast<std::uint32_t>(all_.size()); }
  /// 0 when the pool has all `count` buffers; else the errno value that cut it short (EDQUOT:
  /// roced's max_regions or max_mrs; ENOMEM; EINVAL: a bad nseg or seg_size).
  int error() const { return error_; }
  /// Default: the domain's recv_pool_not_empty.
  void set_not_empty(std::function<void(BufferPool&)> cb) { not_empty_ = std::move(cb); }
  /// Sets min_receive_size / max_receive_msgs on every buffer (multi-message receive).
  void set_receive_limits(std::uint64_t min_receive_size, std::uint32_t max_receive_msgs);
  Domain& domain() { return dom_; }

 private:
  struct Entry {
    NetBuffer* nb;
    std::optional<std::uint64_t> colour;
  };
  Domain& dom_;
  mutable std::mutex mu_;
  std::vector<NetBuffer*> all_;
  std::list<Entry> free_;  ///< most recently put first
  std::function<void(BufferPool&)> not_empty_;
  struct Region {
    client::Buffer* buf;
    client::Mr* mr;
  };
  std::vector<Region> regions_;  ///< the memory of every buffer, one MR each
  int error_ = 0;
};

// ---- transfer machines --------------------------------------------------------------------------

enum class TmState : std::uint8_t { kInitialized, kStarted, kStopped, kFailed };

/// A transfer machine event (m0_net_tm_event): a state change (kStarted, kStopped, kFailed with
/// the reason in `status`), or an error outside any buffer operation (kError: a connection's QP
/// went to the error state; the connection is released and `ep` names its peer).
struct TmEvent {
  enum class Type : std::uint8_t { kError, kStateChange } type = Type::kStateChange;
  int status = 0;  ///< 0 or a negative errno value (-EOVERFLOW: the CQ overran)
  TmState next_state = TmState::kInitialized;
  std::optional<EndPoint> ep;
};

/// Statistics of one queue of a Tm (m0_net_qstats).
struct QueueStats {
  std::uint64_t adds = 0;  ///< nqs_num_adds: add() calls that queued a buffer (and provisioning)
  std::uint64_t dels = 0;  ///< nqs_num_dels: del() calls that cancelled a queued buffer
  std::uint64_t successes = 0;  ///< nqs_num_s_events: events with status 0
  /// nqs_num_f_events: events with an error status; for kMsgRecv also, as Motr counts, the
  /// buffers a pool could not provide when the Tm tried to fill its receive queue.
  std::uint64_t failures = 0;
  std::uint64_t time_in_queue_ns = 0;  ///< nqs_time_in_queue: add to dequeue, summed
  std::uint64_t bytes = 0;             ///< nqs_total_bytes: of successful events
  std::uint64_t max_bytes = 0;         ///< nqs_max_bytes: the largest single event
};

/// Counters of one Tm.
struct TmStats {
  std::uint64_t msgs_sent = 0, msgs_received = 0, bytes_received = 0;
  std::uint64_t bulk_ops = 0, connections = 0, provisioned = 0;
  /// Messages dropped because they landed in a cancelled receive buffer: none since issue 29
  /// (such messages are delivered: late_cancel_delivered); kept for the counters' users.
  std::uint64_t dropped_cancelled = 0;
  std::uint64_t ctl_dropped = 0;  ///< control messages for no passive buffer (gone, or forged)
  /// Control messages refused: the token of a buffer bound to another peer (NetBuffer::ep), or
  /// a length beyond the buffer. The buffer stays queued.
  std::uint64_t ctl_refused = 0;
  /// Connection hellos refused or dropped: malformed, for another address, a GID not the
  /// NID's, a peer with kMaxConnsPerPeer connections, over the half-open bound or its
  /// deadline, no slots or QPs.
  std::uint64_t hellos_refused = 0;
  /// Connections closed to make room (all 64 taken): unused since their hello, or failed, for
  /// longer than DomainOptions::conn_reclaim_after.
  std::uint64_t conns_reclaimed = 0;
  /// Connection exchanges of another protocol version (counted in hellos_refused too): a peer
  /// of another version, closed at once.
  std::uint64_t hellos_version = 0;
  /// Connections now set up (what the 64-connection limit counts).
  std::uint64_t conns_live = 0;
  /// Connections released: their peer said goodbye (its Tm stopped), their QP failed, the peer
  /// restarted and connected afresh (a connection that carried something goes once the fresh
  /// one has received something: a hello alone does not end it), or room was needed and no end
  /// point reference, operation or waiting buffer held them.
  std::uint64_t conns_released = 0;
  /// Messages that landed in a receive buffer whose del() or deadline had not taken effect yet:
  /// delivered with status 0 (the operation completed first; Motr's m0_net_buffer_del race).
  std::uint64_t late_cancel_delivered = 0;
  /// Asynchronous events of the Context that concerned this Tm (kCqErr, QP errors).
  std::uint64_t async_errors = 0;
};

class Tm {
 public:
  explicit Tm(Domain& dom);
  ~Tm();  ///< stops it if started
  Tm(const Tm&) = delete;
  Tm& operator=(const Tm&) = delete;

  // Before start().
  /// m0_net_tm_confine: the Tm's event thread runs only on `cpus` (pthread_setaffinity_np).
  int confine(const std::vector<int>& cpus);
  /// m0_net_buffer_event_deliver_synchronously: no event thread delivers; the application calls
  /// pending()/deliver_all(). EINVAL once started.
  int deliver_synchronously();
  /// m0_net_tm_pool_attach: provisions kMsgRecv from `pool` to `min_length` buffers (default
  /// 2) with `cb` as their callback. EINVAL once started.
  int pool_attach(BufferPool& pool, BufferCallback cb, std::uint32_t min_length = 2);
  /// m0_net_tm_pool_length_set: the minimum receive queue length (provisions at once when
  /// started; a lower value leaves extra buffers queued until they are used).
  int pool_length_set(std::uint32_t min_length);
  void colour_set(std::uint64_t c) { colour_ = c; }
  std::uint64_t colour_get() const { return colour_; }
  /// State-change callback (m0_net_tm_event): called with the new state, after pool buffers
  /// went back to their pool on a stop.
  void on_state(std::function<void(TmState)> cb) { state_cb_ = std::move(cb); }
  /// Every Tm event (m0_net_tm_callbacks::ntc_event_cb): state changes (after on_state's
  /// callback) and errors outside buffer operations. Called on the Tm's event thread, or on the
  /// thread that called start()/stop().
  void on_event(std::function<void(const TmEvent&)> cb) { event_cb_ = std::move(cb); }

  /// m0_net_tm_start: `addr` may end in ":*" (a TMID from kMaxTmid down); the address taken is
  /// ep(). 0 or EINVAL (bad address, wrong NID/PID), EADDRINUSE (taken on this host), errno.
  int start(const std::string& addr);
  /// Cancels what is queued (events with -ECANCELED), puts pool buffers back, stops.
  int stop();
  TmState state() const { return state_.load(std::memory_order_acquire); }
  const EndPoint& ep() const { return ep_; }

  /// A connection with a plain verbs peer instead of another Tm: an rdma-core program such as
  /// ibv_rc_pingpong or ib_send_bw, which exchanges its QP number its own way. The connection
  /// is an RC QP on this Tm's receive queue, named `peer` in the Tm's events: the peer's SENDs
  /// land in the message receive buffers (multi-message buffers included) with `peer` as their
  /// source, and kMsgSend buffers for `peer` leave on it as plain SENDs. (Bulk transfers need a
  /// Tm at the far end.) foreign_open creates the QP and gives its number and first PSN, for
  /// the peer; foreign_connect moves it to RTS towards the peer's QP. 0, ENOTCONN (not
  /// started), EEXIST (`peer` has a connection), or the errno of the QP calls.
  int foreign_open(const EndPoint& peer, std::uint32_t& qpn, std::uint32_t& psn);
  int foreign_connect(const EndPoint& peer, const client::RcPeer& far, client::Mtu mtu);

  /// m0_net_buffer_add: 0 or EINVAL (not registered, already queued, bad fields), ENOTCONN
  /// (not started), EMSGSIZE. A connection that cannot be set up ends the operation with the
  /// reason (DomainOptions::oob_timeout says which). kPassiveBulk*: fills nb.desc; kActiveBulk*:
  /// nb.desc is the peer's.
  int add(NetBuffer& nb, QueueType q);
  /// m0_net_buffer_del: cancels; the buffer's event carries -ECANCELED. A kMsgRecv buffer
  /// posted to the wire comes back with its next message (delivered with status 0: the
  /// operation completed first) or when the Tm stops; an operation on the wire completes first
  /// (its status then -ECANCELED).
  int del(NetBuffer& nb);

  // Synchronous delivery ([r.m0.net.synchronous-buffer-event-delivery]).
  /// Events waiting for deliver_all(); no context switch (an atomic).
  bool pending() const;
  /// Posts every pending event on this thread; no lock is held across a post. Not an error
  /// when there is none.
  void deliver_all();
  /// Non-blocking: the background thread writes 1 to eventfd `efd` when the next event is
  /// pending (at once if one is), once per call.
  void notify(int efd);

  // End points (m0_net_end_point_create/get/put): reference counts per peer address. A
  // connection lives while its peer's end point is referenced or an operation uses it; one
  // whose end point is no longer referenced is released when room is needed (the limit of 64
  // counts live connections only), when the peer says goodbye, or when its QP fails. Every
  // operation towards a peer holds a reference until its event is posted (add() takes it), and
  // a received message's sender is referenced while its callback runs: get() it there to keep
  // it.
  /// m0_net_end_point_create: parses `addr` and takes a reference. EINVAL (a bad address or
  /// "*"), ENOTCONN (not started).
  int end_point_create(const std::string& addr, EndPoint& out);
  /// m0_net_end_point_get. EINVAL when `ep` has no reference.
  int end_point_get(const EndPoint& ep);
  /// m0_net_end_point_put. EINVAL when `ep` has no reference.
  int end_point_put(const EndPoint& ep);
  /// The references held on `ep` (the application's and the operations').
  std::uint32_t end_point_refs(const EndPoint& ep) const;
  /// Whether a connection (live, not closing) with `ep` exists.
  bool connected_to(const EndPoint& ep) const;

  std::size_t queue_length(QueueType q) const;
  /// The seed's ntm_recv_pool_deficit.
  std::uint32_t recv_pool_deficit() const { return deficit_.load(std::memory_order_acquire); }
  TmStats stats() const;
  /// m0_net_tm_stats_get: the statistics of queue `q` (kCount_: every queue, into `out[0..5]`),
  /// reset at once when `reset`. EINVAL for another value of `q`.
  int qstats(QueueType q, QueueStats* out, bool reset);

  struct Conn;

 private:
  friend class Domain;
  void event_loop();
  void oob_loop();
  void handle_wc(const client::Wc& wc, std::vector<BufferEvent>& out);
  void buffer_event_post(const BufferEvent& ev);
  void reprovision_locked();
  void provision_from_pool();
  bool post_recv_locked(NetBuffer& nb);
  void conn_for(const EndPoint& ep, NetBuffer& first);
  std::shared_ptr<Conn> make_conn();
  void post_ctl_recvs(Conn& c);
  int connect_conn(Conn& c, const std::string& host, std::uint16_t port);
  void send_pending_locked(Conn& c);
  void start_op_locked(NetBuffer& nb, Conn& c, std::vector<BufferEvent>& evs);
  void check_deadlines(std::vector<BufferEvent>& out);
  void finish_locked(NetBuffer& nb, int status, std::vector<BufferEvent>& out,
                     std::uint64_t length = 0);
  void queue_events(std::vector<BufferEvent>& evs, bool event_thread = false);
  void drain_pending();
  void take_pool_buffers_locked(std::vector<NetBuffer*>& to_pool);
  void send_ctl_locked(Conn& c, std::uint64_t token, std::uint64_t length, int status,
                       std::uint64_t what = 0);
  void unmake_conn_locked(Conn& c);
  bool reclaim_one_locked();
  bool serve_hello(int fd, std::span<const std::uint8_t> bytes,
                   const std::array<std::uint8_t, 16>& nonce);
  void finish_setup(int fd, const OobHello& h, std::shared_ptr<Conn> c,
                    const std::array<std::uint8_t, 16>& nonce, const EndPoint& src);
  void send_reply(int fd, OobHello& r, const EndPoint& src,
                  const std::array<std::uint8_t, 16>& nonce);
  void reap_setups(bool all);
  void ep_ref_locked(const EndPoint& ep, int delta);
  bool releasable_locked(const Conn& c) const;
  void close_conn_locked(const std::shared_ptr<Conn>& c, bool bye);
  void supersede_locked(Conn& c);
  void reap_closing_locked(bool force);
  std::shared_ptr<Conn> conn_ptr_locked(Conn* c) const;
  void fail(int status);
  bool async_qp_error(std::uint32_t qpn);
  void emit(const TmEvent& ev);
  void account_event_locked(const BufferEvent& ev);

  Domain& dom_;
  std::atomic<TmState> state_{TmState::kInitialized};
  EndPoint ep_;
  std::uint64_t colour_;
  bool sync_ = false;
  std::vector<int> cpus_;
  std::function<void(TmState)> state_cb_;
  std::function<void(const TmEvent&)> event_cb_;
  std::map<EndPoint, std::uint32_t> ep_refs_;   ///< end point reference counts
  std::vector<std::shared_ptr<Conn>> closing_;  ///< released, QPs destroyed once quiet
  QueueStats qstats_[static_cast<int>(QueueType::kCount_)];
  std::vector<TmEvent> tm_events_;   ///< error events for the event thread to tell
  std::atomic<int> fail_status_{0};  ///< set by the domain's async thread: the Tm failed

  BufferPool* pool_ = nullptr;
  BufferCallback pool_cb_;
  std::uint32_t min_length_ = 2;  ///< ntm_recv_queue_min_length
  std::atomic<std::uint32_t> deficit_{0};

  mutable std::mutex mu_;  ///< the Tm lock: queues, connections, pending events
  std::list<NetBuffer*> queues_[static_cast<int>(QueueType::kCount_)];
  std::map<std::uint64_t, NetBuffer*> passive_;  ///< by descriptor token
  std::uint64_t next_wr_ = 1;
  std::map<std::uint64_t, NetBuffer*> by_wr_;  ///< buffers on the wire by wr_id
  std::map<EndPoint, std::shared_ptr<Conn>> conns_;
  std::map<std::uint32_t, Conn*> by_qpn_;
  std::vector<std::shared_ptr<Conn>> parked_;  ///< second connections of a simultaneous pair
  std::vector<EndPoint> setups_;  ///< the sources of hellos whose QP set-up is in flight
  /// Set-up threads (the listener's): joined once done, all before the listener ends.
  std::vector<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> setup_threads_;
  std::deque<BufferEvent> pending_;
  std::atomic<std::size_t> npending_{0};
  int notify_fd_ = -1;
  TmStats stats_;

  client::Cq* cq_ = nullptr;
  client::Srq* srq_ = nullptr;
  client::Buffer* ctl_buf_ = nullptr;  ///< control-message slots of every connection
  client::Mr* ctl_mr_ = nullptr;
  std::uint64_t ctl_blocks_ = 0;  ///< control-slot blocks in use, one bit per connection
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread event_thread_, oob_thread_;
};

// ---- statistics for Prometheus and roce-ctl -----------------------------------------------------

/// The statistics of `tms` in Prometheus' text format: per queue (label `queue`, to_string's
/// names) the m0_net_qstats counters roce_lnet_queue_{adds,dels,successes,failures,bytes}_total,
/// roce_lnet_queue_time_in_queue_seconds_total and the gauge roce_lnet_queue_max_bytes; per Tm
/// its connection counters (roce_lnet_connections_live and friends). Every series carries
/// `tm` = the Tm's address. `roce-ctl --prometheus HOST:PORT lnet` prints them as a table.
std::string prometheus_text(const std::vector<Tm*>& tms);

/// An HTTP/1.0 endpoint answering GET /metrics with `render()`, on a thread of its own: how a
/// program that uses this library publishes its Tms' statistics (roced's own endpoint serves
/// roced's counters; an attached program's Tms live in the program). Up to 16 clients at once,
/// each given a second in all (a request line of 4 KiB at most); a 17th evicts the oldest. No
/// authentication: bind it to 127.0.0.1 unless the scraper is elsewhere.
class MetricsEndpoint {
 public:
  MetricsEndpoint() = default;
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
  /// Listens on `host` (dotted IPv4) : `port` (0: any free one). 0 or an errno value.
  int start(const std::string& host, std::uint16_t port, std::function<std::string()> render);
  void stop();
  std::uint16_t port() const { return port_; }

 private:
  void serve();
  std::function<std::string()> render_;
  int fd_ = -1, wake_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace roce::lnet
