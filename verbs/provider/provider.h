/// @file
/// The provider's own objects (docs/verbs-compat.md, "Mechanism"): the device libibverbs lists,
/// the backend behind an opened context (a libroce Context, in-process or attached, its lock
/// and its progress thread), and the objects behind each libibverbs handle. Each handle's
/// libibverbs struct comes first, so that the handle and our object convert both ways.
#pragma once

#include <roce/client.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "verbs/provider/bridge.h"
#include "verbs/provider/events.h"
#include "verbs/provider/rdma_private.h"

namespace roce::runtime {
class Env;
}

namespace roce::verbs_compat {

struct Backend;
struct RCq;
struct RContext;
struct RQp;

/// One appliance port, as libibverbs lists it.
struct Device {
  rdma::verbs_device vdev{};  // first: the ibv_device libibverbs hands around
  std::string name;
  bool attached = false;
  std::string socket, port;                ///< attached: roced's socket, the port's name
  client::PortInfo info;                   ///< what listing learnt (MAC, address, MTU)
  std::unique_ptr<client::Context> probe;  ///< attached: the listing's attachment, reused once
  pid_t probe_pid = 0;                     ///< the process that made `probe`
};

/// What the provider did, counted for ROCE_VERBS_STATS (mode.cc, dump_stats). Relaxed load and
/// store, as app_calls: no read-modify-write on the hot path, so counts from several threads
/// at once may lose a few (a diagnostic, not an accounting).
struct VerbsStats {
  using C = std::atomic<std::uint64_t>;
  // the program's verbs
  C post_calls{0}, posted{0}, send_now{0}, send_now_frames{0};
  C poll_calls{0}, poll_empty{0}, polled{0}, yields{0}, lingers{0}, linger_hits{0};
  /// lingers not needed (the peer's request came before), lingers skipped, misses handed over
  C linger_early{0}, linger_skips{0}, takeovers{0};
  // the progress thread
  C rounds{0}, port_polls{0}, port_busy{0}, backoffs{0}, naps{0}, sleeps{0}, fired{0};
  /// In-process: back-offs renewed because the program's thread, its verbs stopped, was
  /// runnable without running (preempted: not this thread's turn to take the port), and the
  /// thread's own sched_yield calls while the port is idle (roce-perf's Poller rule)
  C preempted{0}, idle_yields{0};
  /// The program's ibv_post_send / ibv_poll_cq found the backend's lock held (by the progress
  /// thread, or another thread of the program): got it spinning, or had to sleep for it
  C lock_spins{0}, lock_waits{0};
};
inline void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

/// What an opened context runs on: one per open when attached; one per process in-process
/// (one Env, one EAL), shared by the contexts opened on it.
struct Backend {
  Device* dev = nullptr;
  std::unique_ptr<runtime::Env> env;  ///< in-process only
  std::unique_ptr<client::Context> ctx;
  std::mutex mu;  ///< around every call into ctx (and the in-process engine's polling)
  /// How many times the program's hot path tries the lock before it sleeps on it
  /// (lock_hot; ROCE_VERBS_LOCK_SPIN, 2000; 0 sleeps at once, as before 2026-11-29).
  unsigned lock_spin = 2000;
  std::thread progress;
  std::atomic<bool> stop{false};
  std::atomic<int> users{0};

  // What the progress thread serves (under `reg`, never while holding `mu` for long).
  std::mutex reg;
  std::vector<RCq*> cqs;  ///< every CQ (the armed ones fire)
  /// Set by ibv_req_notify_cq after it armed a CQ: the progress thread scans `cqs` only while
  /// it is set (a scan that leaves a CQ armed sets it again).
  std::atomic<bool> maybe_armed{false};
  /// The progress thread's rounds whose port polls moved frames (in-process: events and the
  /// port's state are looked at every 32nd of them, mode.cc progress_once).
  std::uint32_t busy_rounds = 0;
  std::map<std::uint32_t, RQp*> qps;  ///< by QP number: async events name QPs by number
  std::function<void(client::CmEvent&&)> cm_sink;
  std::atomic<bool> has_cm_sink{false};
  /// The program's ibv_post_send and ibv_poll_cq calls, counted (a relaxed increment, no
  /// clock read): while the count moves, the program drives the port itself and the progress
  /// thread keeps off it (mode.cc, progress_thread).
  std::atomic<std::uint32_t> app_calls{0};
  /// The thread that made the last of them (in-process: the progress thread looks at it when
  /// they stop, to tell a program preempted from one blocked or spinning on its memory).
  std::atomic<pid_t> app_tid{0};
  /// The progress thread's futex word while it backs off: ibv_req_notify_cq wakes it (a
  /// program about to block in ibv_get_cq_event leaves the port to it at once).
  std::atomic<std::uint32_t> backoff_word{0};
  std::atomic<bool> backing_off{false};
  std::atomic<bool> handoff{false};  ///< set by wake_progress: take the port now
  /// In-process, the progress thread sleeps longer than a nap (the port and the engine quiet
  /// for a while): the program's next verb wakes it (app_call), ibv_req_notify_cq too.
  std::atomic<bool> deep_sleep{false};
  /// Attached: the progress thread sleeps in Context::wait_any, on the armed CQs' and the
  /// event queues' eventfds and on `wake_fd`, which ibv_req_notify_cq writes (a CQ newly armed).
  std::atomic<bool> waiting{false};
  int wake_fd = -1;
  // In-process, under `mu`: the program's verbs calls drive the engine (mode.cc).
  /// Work requests posted since the engine last transmitted (post_send sends every kTxBatch).
  unsigned unsent = 0;
  /// Lingering: after a send completion leaves a QP with nothing outstanding, ibv_poll_cq keeps
  /// polling the port up to `linger_ns` for the peer's next request (ROCE_VERBS_LINGER_US).
  /// A linger that catches nothing hands the port to the progress thread at once (`takeover`);
  /// the program's next ibv_post_send judges it: when the peer's request came meanwhile, the
  /// program was waiting for it (a slow peer: linger again next time), else the program had
  /// not been waiting (a READ's requester) and the next 2^misses - 1 completions skip it.
  std::uint64_t linger_ns = 0;
  unsigned linger_misses = 0, linger_skip = 0;
  /// Per QP (direct-mapped by QP number; 0: empty), its responder's expected PSN when the
  /// program last posted to it: the peer's next request is the one that moves it.
  struct PostMark {
    std::uint32_t qpn = 0;
    std::uint32_t epsn = 0;
  };
  std::array<PostMark, 64> post_marks{};
  std::uint32_t missed_qpn = 0;  ///< the QP of a linger that caught nothing, not yet judged
  std::uint64_t missed_rx = 0;   ///< the port's received frames then (a QP without a mark)
  /// Set by a linger that caught nothing: the progress thread polls the port from the
  /// program's call `takeover_calls` on (the program now spins on its memory), not after its
  /// back-off notices the calls stopped.
  std::atomic<bool> takeover{false};
  std::atomic<std::uint32_t> takeover_calls{0};
  /// In-process: the engine's received and sent frame counters (port_frames()).
  const std::uint64_t* rx_frames = nullptr;
  const std::uint64_t* tx_frames = nullptr;
  std::uint64_t events_ns = 0;      ///< the progress thread's last look at events
  std::uint64_t state_ns = 0;       ///< its last look at the port's state
  bool was_up = false;              ///< the port's state it last reported
  bool fatal_sent = false;          ///< attached: IBV_EVENT_DEVICE_FATAL sent (roced gone)
  std::vector<RContext*> contexts;  ///< the contexts opened on it (device events go to each)
  VerbsStats st;
  /// The process that opened it. A child the program forks inherits the backend as memory
  /// only: no progress thread, and the port, the EAL and the attachment are the parent's.
  pid_t pid = 0;

  bool link_up() const;
  /// Whether this process is a forked child of the one that opened the backend: it then leaves
  /// the backend alone (never stops, closes or frees it).
  bool inherited() const;
};

/// Our ibv_context: libibverbs allocates it (_verbs_init_and_alloc_context) with `vctx` at
/// offset 0 (its ibv_context last, verbs.h); the rest is ours.
struct RContext {
  verbs_context vctx;
  Backend* be;
  EventPipe* async;  ///< what vctx.context.async_fd reads (ours: the write side)
};

struct RPd {
  ibv_pd pd{};
  client::Pd* p = nullptr;
};

struct RMr {
  rdma::verbs_mr vmr{};
  client::Mr* m = nullptr;
  /// The program's memory made reachable for it: in-process register_memfd(-1) of the range,
  /// attached verbs/memory's adopt() (released with release()).
  client::Buffer* adopted = nullptr;
};

struct RCq {
  rdma::verbs_cq vcq{};
  client::Cq* c = nullptr;
  Backend* be = nullptr;
  EventPipe* channel = nullptr;  ///< the completion channel's events; null: none
  /// Events written for this CQ (completion events, async CQ_ERR): what the program read of
  /// them is what ibv_destroy_cq waits to see acknowledged. Written under the backend's `reg`.
  std::uint32_t comp_written = 0, async_written = 0;
  std::atomic<int> armed{0};  ///< 0: not armed; 1: next completion; 2: solicited only
  bool ex = false;            ///< made by ibv_create_cq_ex (ex_api.cc's iterator state)
  /// Armed for solicited completions only, the progress thread takes the CQ's completions to
  /// look at them (a solicited or error one fires the channel, as rxe); poll_cq hands these
  /// out first, oldest first. At most the CQ's depth. Guarded, with every poll of the CQ, by
  /// poll_lock(): the backend's lock in-process, `held_mu` attached (roced's CQ needs no
  /// backend lock: libroce's attached Context locks per CQ).
  std::mutex held_mu;
  std::deque<verbs::Wc> held;
  std::atomic<std::uint32_t> held_n{0};  ///< held.size(), read without the lock
  /// ibv_poll_cq calls in a row that found nothing (under poll_lock): from 32 on, each empty
  /// poll yields the CPU, as roce-perf's poller does (a program's pure CQ spin would otherwise
  /// hold a CPU that roced, or the peer on the same host, needs to produce that completion).
  std::uint32_t empty_polls = 0;
  // ibv_start_poll's state (ex_api.cc): completions polled ahead, the current one.
  std::vector<ibv_wc> ahead;
  std::size_t pos = 0;
};

struct RSrq {
  rdma::verbs_srq vsrq{};
  client::Srq* s = nullptr;
  ibv_srq_attr attr{};
};

/// Registered memory the provider copies into: inline data, and SGE lists an attached QP
/// cannot take (attached post_send: <= 4 registered SGEs).
struct Bounce {
  client::Buffer* buf = nullptr;
  client::Mr* mr = nullptr;
  std::uint32_t slot = 0, slots = 0;
  std::size_t slot_size = 0;
};

struct RQp {
  rdma::verbs_qp vqp{};
  client::Qp* q = nullptr;
  Backend* be = nullptr;
  RContext* rctx = nullptr;
  ibv_qp_cap cap{};
  ibv_qp_attr attr{};  ///< what modify_qp set (ibv_query_qp reports it)
  /// ECE options (ibv_set_ece / ibv_query_ece, vendor kEceVendor): what the program asks for
  /// until the connection is made, then what is in force (our librdmacm sets it then).
  std::uint32_t ece_options = 0;
  int sq_sig_all = 0;
  /// Attached: the bounce buffer's lock (a post that copies takes it; libroce's attached
  /// Context locks the send queue itself, so other posts take no lock of ours).
  std::mutex bounce_mu;
  Bounce bounce;
  std::uint32_t async_written = 0;  ///< async events written for it (under the backend's `reg`)
  /// Attached, its own receive queue (no SRQ): receive WRs posted (under the backend's `mu`)
  /// and completed (polled, flushed or refused: a receive completion of the QP polled from
  /// its CQ). roced takes the ring as it goes, so a full receive queue is told here: more than
  /// cap.max_recv_wr outstanding is ENOMEM, as a kernel provider's full RQ.
  bool counts_recvs = false;
  std::uint32_t recvs_posted = 0;
  std::atomic<std::uint32_t> recvs_done{0};
  /// Attached: signaled send WRs posted and send completions polled (poll_cq yields once when
  /// a send completion leaves none outstanding: provider.cc, settle()). Each written by one
  /// thread at a time (relaxed load and store); flushes may make `sends_done` the larger.
  std::atomic<std::uint32_t> signaled_posted{0}, sends_done{0};
};

struct RAh {
  ibv_ah ah{};
  verbs::AddressVector av;
};

/// ibv_context is verbs_context's last member (verbs.h): step back to our struct.
inline RContext* rctx(ibv_context* c) {
  return reinterpret_cast<RContext*>(reinterpret_cast<char*>(c) - offsetof(RContext, vctx.context));
}
inline RCq* rcq(ibv_cq* c) { return reinterpret_cast<RCq*>(c); }
inline RQp* rqp(ibv_qp* q) { return reinterpret_cast<RQp*>(q); }
/// The vendor ID of our ECE (struct ibv_ece), as ibv_query_device reports it (controlplane/cm
/// cm.h kEceVendorId).
inline constexpr std::uint32_t kEceVendor = 0xFFFFFF;

/// Whether libibverbs opened `c` on one of our devices.
bool is_ours(ibv_context* c);
bool is_ours(ibv_device* d);

// mode.cc: devices from the environment, backends, the progress thread.
/// Our devices (found once, from ROCE_LINK or ROCE_ATTACH); empty without either.
const std::vector<Device*>& devices();
/// The backend for a new context on `d` (null and errno on failure).
Backend* open_backend(Device* d);
void close_backend(Backend* be);
/// The port's attributes and GID table.
int query_port(Backend* be, ibv_port_attr& a);
/// Our GID table: index 0 the port's IPv4-mapped address (RoCE v2). False beyond.
bool gid_at(const Device* d, unsigned index, ibv_gid& gid);
inline constexpr unsigned kGidTableLen = 16;
/// A MAC for an IPv4 neighbour (ARP on the in-process port); nullopt after `seconds` or when
/// attached (roced's ARP cache answers whether it knows a neighbour, not its MAC).
std::optional<MacAddr> resolve(Backend* be, Ipv4Addr ip, double seconds);

/// A monotonic clock in nanoseconds.
std::uint64_t now_ns();

/// The lock around every poll of `c`'s CQ and its `held` completions: the backend's in-process
/// (the engine is single threaded), the CQ's own attached.
inline std::mutex& poll_lock(Backend* be, RCq* c) { return be->env ? be->mu : c->held_mu; }
/// The program's ibv_post_send and ibv_poll_cq take `m` (the backend's lock, in-process) with
/// `lock_spin` tries before they sleep on it: the progress thread holds it for one poll of the
/// port at a time, and a program thread that sleeps on a std::mutex is woken a scheduler slice
/// late on a busy host (and looks blocked to the progress thread, which then takes the port).
inline void lock_hot(Backend* be, std::mutex& m) {
  if (m.try_lock()) [[likely]]
    return;
  for (unsigned i = 0; i < be->lock_spin; ++i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (m.try_lock()) {
      bump(be->st.lock_spins);
      return;
    }
  }
  bump(be->st.lock_waits);
  m.lock();
}
/// Wakes the progress thread from a deep sleep (mode.cc).
void wake_deep(Backend* be);
/// The calling thread's id (gettid, once per thread).
pid_t this_tid_slow();
inline pid_t this_tid() {
  thread_local pid_t tid = 0;
  if (tid == 0) [[unlikely]]
    tid = this_tid_slow();
  return tid;
}
/// The program called a verb that drives the port (post_send, poll_cq): counted, and a
/// progress thread in a deep sleep is woken (the program is back; a relaxed look, so at worst
/// the sleep runs its course while the program's own verbs drive the port).
inline void app_call(Backend* be) {
  be->app_calls.store(be->app_calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  be->app_tid.store(this_tid(), std::memory_order_relaxed);
  if (be->deep_sleep.load(std::memory_order_relaxed)) [[unlikely]]
    wake_deep(be);
}
/// In-process, the backend's lock held: after `posted` requests to QP `qpn`, they go on the
/// wire once 16 of them wait (a single post leaves at the program's next ibv_poll_cq, which
/// polls the port before it receives); the QP's post mark is set, and a linger that missed
/// judged.
void after_post(Backend* be, std::uint32_t qpn, unsigned posted);
/// In-process, the backend's lock held: after ibv_poll_cq returned a send completion of QP
/// `qpn`, polls the port for the peer's next request while the QP has nothing outstanding
/// (Backend::linger_ns). True when it caught nothing: the caller then hands the port over
/// (take_over, once it released the lock).
bool linger(Backend* be, std::uint32_t qpn);
/// Wakes the progress thread to poll the port until the program's next verb.
void take_over(Backend* be);
/// Wakes the progress thread from a back-off (ibv_req_notify_cq: the program will block).
void wake_progress(Backend* be);
/// In-process, the backend's lock held: the frames the port received and sent so far (the
/// engine's counters). Whether a poll of the port moved any is the difference across it.
inline std::uint64_t port_frames(const Backend* be) { return *be->rx_frames + *be->tx_frames; }

// provider.cc
extern const rdma::verbs_device_ops kDeviceOps;
/// The node GUID (host order): EUI-64 of the port's MAC, as rxe derives it.
std::uint64_t node_guid(const Device* d);
/// interpose.cc: the events of a completion channel we made; null for others.
EventPipe* channel_pipe(ibv_comp_channel* ch);
/// Writes an async event for `qp`/`cq` to its context's async fd.
void post_async(Backend* be, const client::AsyncEvent& ev);
/// Writes a port or device event (port 1) to the async fd of every context on `be`.
void post_device_event(Backend* be, ibv_event_type type);

}  // namespace roce::verbs_compat
