/// @file
/// The two modes (docs/verbs-compat.md, "Running a program"): the devices the environment
/// names, the backend an opened context runs on, and the progress thread that keeps it going
/// (the in-process engine's polling) and turns its completions, asynchronous events and CM
/// events into what libibverbs and librdmacm read from file descriptors.
///   ROCE_LINK="--pmd memif --iface PATH --ip A --mac M ..."  in-process (roce-perf's link flags)
///   ROCE_ATTACH=SOCKET [ROCE_PORT=NAME[,NAME...]]              attached to roced (a device a port)
///   ROCE_DEVICE=NAME                  the device's name (roce0; several ports: roce0, roce1...)
///   ROCE_LINK_WAIT=SECONDS     how long a memif server's open waits for its client (0)
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "client/local/local_context.h"
#include "controlplane/address.h"
#include "dataplane/engine/stats.h"
#include "dataplane/port/eal.h"
#include "runtime/env.h"
#include "runtime/link.h"
#include "runtime/port.h"
#include "verbs/memory/adopt.h"
#include "verbs/provider/ex_api.h"
#include "verbs/provider/netdev.h"
#include "verbs/provider/progress_policy.h"
#include "verbs/provider/provider.h"

namespace roce::verbs_compat {
namespace {

namespace po = boost::program_options;

const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

/// ROCE_LINK split into words (no quoting: paths with blanks are not supported).
std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool parse_link(const std::string& text, runtime::LinkOptions& out, std::string& err) {
  runtime::LinkFlags flags;
  po::options_description d;
  flags.add_to(d);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(words(text)).options(d).run(), vm);
    po::notify(vm);
    flags.finish();
    // On a kernel interface the link is the interface's: its own MAC and address unless named.
    const auto given = [&vm](const char* k) { return vm.count(k) != 0 && !vm[k].defaulted(); };
    if (!netdev_defaults(flags.link, given("mac"), given("ip"), err)) return false;
  } catch (const std::exception& e) {
    err = e.what();
    return false;
  }
  out = flags.link;
  if (out.pmd == "af_packet") remember_promiscuous(out.iface);
  return true;
}

runtime::LinkOptions g_link;  // ROCE_LINK's link (in-process)
Backend* g_local = nullptr;   // the process's one in-process backend
std::mutex g_open_mu;

void init_device(Device& d) {
  ibv_device& v = d.vdev.device;
  v.node_type = IBV_NODE_CA;
  v.transport_type = IBV_TRANSPORT_IB;  // what every RoCE device reports
  std::snprintf(v.name, sizeof v.name, "%s", d.name.c_str());
  std::snprintf(v.dev_name, sizeof v.dev_name, "%s", d.name.c_str());
  // dev_path and ibdev_path stay empty: no cdev, no sysfs (ibv_read_sysfs_file fails on them).
  d.vdev.ops = &kDeviceOps;
  d.vdev.refcount = 1;  // ours, for the life of the process: libibverbs' puts never free it
  d.vdev.entry.next = d.vdev.entry.prev = &d.vdev.entry;
  d.vdev.sysfs = nullptr;  // verbs_open_device opens no cdev and no async fd for it
}

std::vector<Device*> find_devices() {
  std::vector<Device*> out;
  // One port: ROCE_DEVICE or roce0; attached to several: ROCE_DEVICE or roce, and the index.
  const std::string name = env_or("ROCE_DEVICE", "");
  if (const char* link = std::getenv("ROCE_LINK"); link != nullptr && *link != '\0') {
    std::string err;
    if (!parse_link(link, g_link, err)) {
      std::fprintf(stderr, "libroce-verbs: ROCE_LINK: %s\n", err.c_str());
      return out;
    }
    auto* d = new Device;
    d->name = name.empty() ? "roce0" : name;
    d->info.name = d->name;
    const auto mac = ctl::parse_mac(g_link.mac);
    const auto ip = ctl::parse_ipv4(g_link.ip);
    if (!mac || !ip) {
      // Say which, and the form wanted (roced's YAML takes a prefix length; a link does not).
      if (!mac)
        std::fprintf(stderr, "libroce-verbs: ROCE_LINK: bad --mac '%s' (want 02:00:00:00:00:01)\n",
                     g_link.mac.c_str());
      else
        std::fprintf(stderr,
                     "libroce-verbs: ROCE_LINK: bad --ip '%s' (want an IPv4 address such as "
                     "192.0.2.1, no prefix length)\n",
                     g_link.ip.c_str());
      delete d;
      return out;
    }
    if (!runtime::check_gateway(g_link, err)) {
      std::fprintf(stderr, "libroce-verbs: ROCE_LINK: --gateway: %s\n", err.c_str());
      delete d;
      return out;
    }
    d->info.mac = *mac;
    d->info.ipv4 = *ip;
    d->info.gid = ctl::gid_from_ipv4(*ip);
    d->info.max_mtu = runtime::link_path_mtu(g_link.netdev_mtu);
    init_device(*d);
    out.push_back(d);
  } else if (const char* sock = std::getenv("ROCE_ATTACH"); sock != nullptr && *sock != '\0') {
    // One device per port ROCE_PORT names (comma-separated), else roced's first port.
    std::vector<std::string> ports;
    std::string list = env_or("ROCE_PORT", "");
    for (std::size_t at = 0;;) {
      const std::size_t comma = list.find(',', at);
      ports.push_back(list.substr(at, comma == std::string::npos ? comma : comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    for (std::size_t i = 0; i < ports.size(); ++i) {
      auto d = std::make_unique<Device>();
      d->attached = true;
      d->socket = sock;
      d->port = ports[i];
      d->probe = client::Context::attach(d->socket, d->port);
      d->probe_pid = ::getpid();
      if (!d->probe) {
        std::fprintf(stderr, "libroce-verbs: ROCE_ATTACH=%s%s%s: %s\n", sock,
                     ports[i].empty() ? "" : " ROCE_PORT=", ports[i].c_str(), std::strerror(errno));
        continue;
      }
      d->info = d->probe->port();
      d->name = ports.size() == 1 ? (name.empty() ? "roce0" : name)
                                  : (name.empty() ? "roce" : name) + std::to_string(i);
      init_device(*d);
      out.push_back(d.release());
    }
  }
  return out;
}

/// A CQ armed for solicited completions only: takes its new completions (into `held`, which
/// poll_cq hands out first, up to the CQ's depth) and says whether one is solicited (the
/// sender's IBV_SEND_SOLICITED: the SE bit) or in error, rxe's rule for waking.
bool take_for_solicited(Backend* be, RCq* c) {
  bool hit = false;
  std::lock_guard<std::mutex> h(poll_lock(be, c));
  verbs::Wc w[32];
  for (;;) {
    const std::size_t depth = c->c->depth;
    const std::size_t room = depth > c->held.size() ? depth - c->held.size() : 0;
    if (room == 0) break;  // the program does not poll: the rest stays in the CQ
    const int want = static_cast<int>(std::min<std::size_t>(room, 32));
    const int n = be->ctx->poll_cq(c->c, want, w);
    for (int i = 0; i < n; ++i) {
      hit |= (w[i].wc_flags & verbs::kWcSolicited) != 0 || w[i].status != verbs::WcStatus::kSuccess;
      c->held.push_back(w[i]);
    }
    c->held_n.store(static_cast<std::uint32_t>(c->held.size()), std::memory_order_release);
    if (n < want) break;
  }
  return hit;
}

/// How the progress thread behaves, from the environment (read once per backend).
struct ProgressPolicy {
  /// While the program's own verbs calls drive the port: how long it backs off between looks
  /// (ROCE_VERBS_BACKOFF_US, 100). In-process, each back-off in which the calls kept coming
  /// doubles the next, up to `backoff_max_ns` (ROCE_VERBS_BACKOFF_MAX_US, 1600): a program in
  /// a streaming loop is woken past 600 times a second, not 10 000 (each wake-up preempts it,
  /// or its peer, on a host with no spare core). What needs the thread at once wakes it
  /// (a linger that missed, ibv_req_notify_cq), and a back-off that ends on stopped calls
  /// starts the next at `backoff` again.
  timespec backoff{0, 100'000};
  std::uint64_t backoff_max_ns = 1'600'000;
  /// In-process, what the thread does between polls of an idle port (ROCE_VERBS_PROGRESS,
  /// progress_policy.h): auto (the default), nap, spin or yield. `spin_ns`
  /// (ROCE_VERBS_SPIN_US, 50): the gaps nap and yield spin through; `yield_ns`
  /// (ROCE_VERBS_YIELD_US, 10000): how long auto yields before it naps as nap does.
  IdleMode idle = IdleMode::kAuto;
  std::uint64_t spin_ns = 50'000;
  std::uint64_t yield_ns = 10'000'000;
  /// In-process, the longest sleep once the port and the engine have been quiet a while
  /// (ROCE_VERBS_IDLE_US, 10000; at most 1 s; 10 keeps the 10 us nap forever): 10 us naps for
  /// the first 10 ms, then 100 us, 1 ms from 100 ms on, this from 1 s on (deep_nap()).
  std::uint64_t idle_max_ns = 10'000'000;
  /// In-process: whether the thread takes the port when the program's verbs stop while its
  /// thread is runnable but not running (ROCE_VERBS_PREEMPT_CHECK=0: it does, as before).
  bool preempt_check = true;
};

ProgressPolicy progress_policy() {
  ProgressPolicy p;
  if (const char* v = std::getenv("ROCE_VERBS_BACKOFF_US"); v != nullptr && *v != '\0') {
    const long us = std::clamp(std::atol(v), 10L, 100'000L);
    p.backoff = {us / 1'000'000, (us % 1'000'000) * 1000};
  }
  if (const char* v = std::getenv("ROCE_VERBS_BACKOFF_MAX_US"); v != nullptr && *v != '\0')
    p.backoff_max_ns = static_cast<std::uint64_t>(std::clamp(std::atol(v), 10L, 100'000L)) * 1000;
  p.backoff_max_ns = std::max<std::uint64_t>(
      p.backoff_max_ns, static_cast<std::uint64_t>(p.backoff.tv_sec) * 1'000'000'000u +
                            static_cast<std::uint64_t>(p.backoff.tv_nsec));
  const std::string mode = env_or("ROCE_VERBS_PROGRESS", "auto");
  p.idle = mode == "spin"    ? IdleMode::kSpin
           : mode == "yield" ? IdleMode::kYield
           : mode == "nap"   ? IdleMode::kNap
                             : IdleMode::kAuto;
  if (const char* v = std::getenv("ROCE_VERBS_SPIN_US"); v != nullptr && *v != '\0')
    p.spin_ns = static_cast<std::uint64_t>(std::clamp(std::atol(v), 0L, 1'000'000L)) * 1000;
  if (const char* v = std::getenv("ROCE_VERBS_YIELD_US"); v != nullptr && *v != '\0')
    p.yield_ns = static_cast<std::uint64_t>(std::clamp(std::atol(v), 0L, 1'000'000L)) * 1000;
  if (const char* v = std::getenv("ROCE_VERBS_IDLE_US"); v != nullptr && *v != '\0')
    p.idle_max_ns = static_cast<std::uint64_t>(std::clamp(std::atol(v), 10L, 1'000'000L)) * 1000;
  p.preempt_check = std::string(env_or("ROCE_VERBS_PREEMPT_CHECK", "1")) != "0";
  return p;
}

/// What the program's thread `tid` is doing, seen from the progress thread: its CPU time
/// (the thread's clock, ns) and whether it is runnable ('R': running or waiting for a CPU).
/// The /proc file stays open while the thread is the same.
class ProgramThread {
 public:
  ~ProgramThread() {
    if (fd_ >= 0) ::close(fd_);
  }
  /// The thread's CPU time in ns (0 when it cannot be read: the thread is gone).
  static std::uint64_t cpu_ns(pid_t tid) {
    if (tid <= 0) return 0;
    // MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) of the kernel's posix-timers.h, as glibc's
    // pthread_getcpuclockid makes it: any thread of this process, by its id.
    const clockid_t clk = static_cast<clockid_t>((~static_cast<unsigned>(tid)) << 3) | 6;
    timespec t{};
    if (::clock_gettime(clk, &t) != 0) return 0;
    return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(t.tv_nsec);
  }
  /// Whether the thread is runnable ("R" in /proc/self/task/TID/stat); false when unknown.
  bool runnable(pid_t tid) {
    if (tid <= 0) return false;
    if (tid != tid_) {
      if (fd_ >= 0) ::close(fd_);
      char path[64];
      std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
      fd_ = ::open(path, O_RDONLY | O_CLOEXEC);
      tid_ = tid;
    }
    if (fd_ < 0) return false;
    char buf[256];
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    if (n <= 0) return false;
    buf[n] = '\0';
    // "TID (COMM) S ...": the name may hold blanks and parentheses, the last ')' ends it
    const char* p = std::strrchr(buf, ')');
    return p != nullptr && p[1] == ' ' && p[2] == 'R';
  }

 private:
  pid_t tid_ = 0;
  int fd_ = -1;
};

/// One round of the progress thread: polls the in-process engine (unless the program drives
/// it: `app_active`), fires armed CQs, hands asynchronous and CM events over. True when it
/// found something to do.
bool progress_once(Backend* be, bool app_active, std::uint32_t seen) {
  bool work = false;
  // While the program drives the port with its own verbs calls, this thread stays out of its
  // way: it looks at events once a millisecond only.
  if (app_active) {
    const std::uint64_t now = now_ns();
    if (now - be->events_ns < 1'000'000) return false;
    be->events_ns = now;
  }
  if (be->env && !app_active) {
    // One poll per hold of the lock, and none once the program is back: its post_send or
    // poll_cq must not wait behind this thread (a contended std::mutex puts it to sleep, and
    // on a busy host it wakes a scheduler slice later).
    for (int i = 0; i < 8 && be->app_calls.load(std::memory_order_relaxed) == seen; ++i) {
      std::unique_lock<std::mutex> g(be->mu, std::try_to_lock);
      if (!g.owns_lock()) break;
      const bool w = be->env->loop.poll_once() != 0 || be->env->eng.has_work();
      bump(be->st.port_polls);
      if (w) bump(be->st.port_busy);
      work |= w;
      if (!w) break;
    }
  }
  // Completion channels: only while a CQ may be armed (ibv_req_notify_cq sets the flag after
  // arming; a scan that leaves one armed sets it again), so that a busy port's rounds take
  // neither the registry's lock nor the backend's for them.
  std::vector<RCq*> fire;
  if (be->maybe_armed.load(std::memory_order_relaxed) &&
      be->maybe_armed.exchange(false, std::memory_order_acquire)) {
    bool still = false;
    std::lock_guard<std::mutex> r(be->reg);
    for (RCq* c : be->cqs) {
      const int armed = c->armed.load(std::memory_order_acquire);
      if (armed == 0 || c->channel == nullptr) continue;
      if (armed == 2) {
        if (take_for_solicited(be, c) && c->armed.exchange(0) != 0)
          fire.push_back(c);
        else
          still = true;
        continue;
      }
      int rc;
      {
        std::lock_guard<std::mutex> g(be->mu);
        rc = be->ctx->wait_cq(c->c, 0);
      }
      // An ibv_cq_ex iterator that holds completions outside a batch counts too.
      if ((rc == 0 || (c->ex && pending(&c->vcq.cq) > 0)) && c->armed.exchange(0) != 0)
        fire.push_back(c);
      else
        still = true;
    }
    if (still) be->maybe_armed.store(true, std::memory_order_relaxed);
    for (RCq* c : fire) {
      // Under `reg`: destroy_cq takes the CQ out of the registry, then its unread events out.
      rdma::comp_event_desc ev{reinterpret_cast<std::uint64_t>(&c->vcq.cq)};
      if (c->channel->write(&ev)) ++c->comp_written;
      bump(be->st.fired);
    }
  }
  work |= !fire.empty();
  // Asynchronous and CM events and the port's state: in-process, while the port's polls move
  // frames, every 32nd round only (each look takes the backend's lock and reads the clock:
  // about a third of a busy round's cost beside a poll of a few frames, ib_write_bw's server).
  if (be->env && !app_active && work && (++be->busy_rounds & 31u) != 0) return true;
  const std::uint64_t now = app_active ? be->events_ns : now_ns();
  client::AsyncEvent ae;
  for (;;) {
    int rc;
    {
      std::lock_guard<std::mutex> g(be->mu);
      rc = be->ctx->get_async_event(ae, 0);
    }
    if (rc != 0) break;
    post_async(be, ae);
    work = true;
  }
  // The port's state as the kernel reports it: IBV_EVENT_PORT_ACTIVE / IBV_EVENT_PORT_ERR
  // (in-process, the link: looked at every millisecond, a memif peer may come and go within
  // 50), and IBV_EVENT_DEVICE_FATAL once roced is gone (attached: Context::wait_any watches
  // the attachment's socket and says ENOTCONN, and the thread then looks at once).
  if (now - be->state_ns >= (be->env ? 1'000'000u : 50'000'000u)) {
    be->state_ns = now;
    if (!be->env && !be->ctx->connected()) {
      if (!be->fatal_sent) {
        post_device_event(be, IBV_EVENT_DEVICE_FATAL);
        // and librdmacm's ids on the device: RDMA_CM_EVENT_DEVICE_REMOVAL, as the kernel's
        // rdma_cm reports a device that goes away
        std::function<void(client::CmEvent &&)> sink;
        {
          std::lock_guard<std::mutex> r(be->reg);
          sink = be->cm_sink;
        }
        client::CmEvent gone;
        gone.type = client::CmEventType::kDeviceRemoval;
        if (sink) sink(std::move(gone));
      }
      be->fatal_sent = true;
    } else if (const bool up = be->link_up(); up != be->was_up) {
      be->was_up = up;
      post_device_event(be, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
    }
  }
  if (be->has_cm_sink.load()) {
    for (;;) {
      client::CmEvent ev;
      int rc;
      {
        std::lock_guard<std::mutex> g(be->mu);
        rc = be->ctx->cm_get_event(ev, 0);
      }
      if (rc != 0) break;
      std::function<void(client::CmEvent &&)> sink;
      {
        std::lock_guard<std::mutex> r(be->reg);
        sink = be->cm_sink;
      }
      if (sink) sink(std::move(ev));
      work = true;
    }
  }
  return work;
}

/// Backs off for `t` (or until wake_progress): the program drives the port.
void back_off(Backend* be, const timespec& t) {
  bump(be->st.backoffs);
  be->backing_off.store(true);
  ::syscall(SYS_futex, &be->backoff_word, FUTEX_WAIT_PRIVATE, 0, &t, nullptr, 0);
  be->backing_off.store(false);
  be->backoff_word.store(0, std::memory_order_relaxed);
}

/// Attached: roced moves the data, this thread only relays events. It sleeps in
/// Context::wait_any on the eventfds of the CQs armed for a completion channel, of the
/// asynchronous and CM event queues and of the attachment's socket (roced gone), and on
/// `wake_fd` (ibv_req_notify_cq arming a CQ it does not wait on yet): a completion wakes it
/// as soon as roced writes it, and an idle program costs no wake-up at all.
void attached_progress(Backend* be, const ProgressPolicy& pol) {
  std::vector<client::Cq*> cqs;
  std::uint32_t seen = be->app_calls.load(std::memory_order_relaxed);
  unsigned idle = 0;
  while (!be->stop.load(std::memory_order_relaxed)) {
    // While the program's verbs come, and for 100 rounds of 20 us after, the thread keeps the
    // rhythm it had before the event wait: a futex back-off of ROCE_VERBS_BACKOFF_US while the
    // calls move (events looked at once a millisecond), then 20 us sleeps. Its wake-ups are
    // scheduling points on CPUs a busy-polling roced shares with the program: without them
    // attached ib_send_lat across two roced read 48-64 ms typical instead of 1.2-3.2 ms (load
    // 13-20). ibv_req_notify_cq (the handoff) goes to the event wait at once.
    const std::uint32_t calls = be->app_calls.load(std::memory_order_relaxed);
    const bool handoff = be->handoff.load(std::memory_order_relaxed) &&
                         be->handoff.exchange(false, std::memory_order_acquire);
    if (handoff) idle = 100;
    if (calls != seen && !handoff) {
      seen = calls;
      idle = 0;
      progress_once(be, true, seen);
      back_off(be, pol.backoff);
      continue;
    }
    seen = calls;
    if (idle < 100) {
      bump(be->st.rounds);
      if (progress_once(be, false, 0))
        idle = 0;
      else
        ++idle;
      bump(be->st.naps);
      ::usleep(20);
      continue;
    }
    bump(be->st.rounds);
    progress_once(be, false, 0);
    be->waiting.store(true);
    // Pairs with wake_progress: either it sees `waiting` and writes wake_fd, or the arming it
    // made before is seen here.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    cqs.clear();
    bool skipped = false;
    {
      std::lock_guard<std::mutex> r(be->reg);
      for (RCq* c : be->cqs) {
        const int armed = c->armed.load(std::memory_order_acquire);
        if (armed == 0 || c->channel == nullptr) continue;
        // Solicited-only with its holding full: the program must poll first (looked at again
        // within 100 ms), else the wait would end at once on the entries it cannot take.
        if (armed == 2 && c->held_n.load(std::memory_order_relaxed) >= c->c->depth) {
          skipped = true;
          continue;
        }
        cqs.push_back(c->c);
      }
    }
    if (be->stop.load(std::memory_order_relaxed)) break;
    bump(be->st.sleeps);
    const int rc = be->ctx->wait_any(cqs, be->wake_fd, skipped ? 100 : 1000);
    be->waiting.store(false, std::memory_order_relaxed);
    std::uint64_t v;
    while (::read(be->wake_fd, &v, sizeof v) > 0) {
    }
    if (rc == ENOTCONN) {
      be->state_ns = 0;  // the next round reports it
      if (be->fatal_sent) {
        // Nothing more will come: look at the program's armings now and then only.
        timespec t{0, 100'000'000};
        ::nanosleep(&t, nullptr);
      }
    } else if (rc != 0 && rc != ETIMEDOUT) {
      // (EDQUOT: roced gave no eventfd for a CQ) poll as before, every 200 us
      ::usleep(200);
    }
  }
}

/// In-process, the port and the engine have been quiet for `quiet_ns`: how long to sleep
/// before the next poll (0: just the nap). Nothing is outstanding (no timer armed, nothing to
/// send), so what can come is a peer's new request, whose first frame waits this long.
std::uint64_t deep_nap(Backend* be, const ProgressPolicy& pol, std::uint64_t quiet_ns) {
  if (quiet_ns < 10'000'000 || pol.idle_max_ns <= 10'000) return 0;
  {
    std::unique_lock<std::mutex> g(be->mu, std::try_to_lock);
    if (!g.owns_lock()) return 0;
    const engine::Engine& e = be->env->eng;
    if (e.has_work() || e.tx_pending() != 0 || e.next_deadline() != 0) return 0;
  }
  const std::uint64_t t = quiet_ns >= 1'000'000'000 ? pol.idle_max_ns
                          : quiet_ns >= 100'000'000 ? 1'000'000
                                                    : 100'000;
  return std::min(t, pol.idle_max_ns);
}

void progress_thread(Backend* be) {
  if (!be->env) return attached_progress(be, progress_policy());
  // In-process, while the program spins on its memory without calling us (perftest's
  // write_lat, when ibv_poll_cq's linger did not catch the peer's WRITE: only this thread
  // takes it in), the idle waits below are 10 us naps: a thread that sleeps comes back at the
  // nap's end and takes the WRITE in, where one that yields to the spinner waits for its time
  // slice. 1 us of timer slack (50 us by default) keeps the nap near 10 us. Otherwise (a
  // server blocked outside our verbs, ib_write_bw's) the thread rests as roce-perf's loop
  // does, a sched_yield from the 32nd idle poll: it stays runnable, and a stream's next frames
  // find it polling, not asleep (on Linux 6.6 and later, EEVDF, a thread that wakes from a
  // nap on a busy CPU waits for the running thread's slice: 94 us a wake-up on average in
  // issue 30's 4 KiB write_bw, perf sched).
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  const ProgressPolicy pol = progress_policy();
  const timespec nap{0, 10'000};
  unsigned idle = 0;
  std::uint64_t idle_since = 0;  // when the port went idle
  std::uint32_t seen = be->app_calls.load(std::memory_order_relaxed);
  std::uint64_t handoff_until = 0;
  // Whether the program is believed to spin on its memory (naps) rather than block (yields).
  bool spins = false;
  // Backing off while the program's verbs came: when its thread started the last back-off,
  // and its CPU time then (ProgramThread::cpu_ns).
  bool driven = false;
  std::uint64_t off_ns = 0, off_cpu = 0, off_lingers = 0;
  // Send completions that left their QP with nothing outstanding (the linger's chances): a
  // program that had one since the back-off began waits for its peer next, maybe spinning on
  // its memory without a verb (write_lat), and then needs this thread on the port even while
  // it is preempted: its own next look is at its memory, not at the port.
  const auto linger_chances = [be] {
    return be->st.lingers.load(std::memory_order_relaxed) +
           be->st.linger_early.load(std::memory_order_relaxed) +
           be->st.linger_skips.load(std::memory_order_relaxed);
  };
  ProgramThread program;
  // The next back-off while the program's verbs come: ProgressPolicy::backoff, doubling while
  // they keep coming (ProgressPolicy::backoff_max_ns).
  const std::uint64_t base_backoff_ns =
      static_cast<std::uint64_t>(pol.backoff.tv_sec) * 1'000'000'000u +
      static_cast<std::uint64_t>(pol.backoff.tv_nsec);
  std::uint64_t backoff_ns = base_backoff_ns;
  while (!be->stop.load(std::memory_order_relaxed)) {
    // The program's ibv_post_send / ibv_poll_cq calls drive the port while they come: the
    // count moved since the last look. This thread then leaves the port to them and backs off
    // (one wake-up per back-off, not one per 10 us nap: each wake-up preempts the program on
    // a host with fewer cores than threads). After an ibv_req_notify_cq it takes the port for
    // a millisecond whatever the program does (it is about to block).
    if (be->handoff.load(std::memory_order_relaxed) &&
        be->handoff.exchange(false, std::memory_order_acquire)) {
      handoff_until = now_ns() + 1'000'000;
      spins = driven = false;
      backoff_ns = base_backoff_ns;
    }
    // A linger caught nothing: the program's calls up to that one are seen, so the port is
    // this thread's until the next (no back-off of 100-200 us to notice they stopped).
    if (be->takeover.load(std::memory_order_relaxed) &&
        be->takeover.exchange(false, std::memory_order_acquire)) {
      seen = be->takeover_calls.load(std::memory_order_relaxed);
      spins = true;
      driven = false;
      backoff_ns = base_backoff_ns;
    }
    const std::uint32_t calls = be->app_calls.load(std::memory_order_relaxed);
    if (calls != seen && (handoff_until == 0 || now_ns() >= handoff_until)) {
      seen = calls;
      handoff_until = 0;
      progress_once(be, true, seen);
      driven = pol.preempt_check;
      if (driven) {
        off_ns = now_ns();
        off_cpu = ProgramThread::cpu_ns(be->app_tid.load(std::memory_order_relaxed));
        off_lingers = linger_chances();
      }
      back_off(be, {static_cast<time_t>(backoff_ns / 1'000'000'000),
                    static_cast<long>(backoff_ns % 1'000'000'000)});
      // The calls kept coming through the whole back-off (none wakes it but a handoff or a
      // takeover, which reset this): the next one is twice as long, up to backoff_max_ns.
      backoff_ns = next_backoff(backoff_ns, true, base_backoff_ns, pol.backoff_max_ns);
      idle = 0;
      continue;
    }
    if (driven) {
      // The verbs stopped for a back-off. A program thread that ran meanwhile spins on its
      // memory or computes (take the port, nap when idle); one that did not run and is not
      // runnable blocked (take the port, rest as roce-perf's loop). One that is runnable but
      // did not run lost its CPU to another thread: taking the port now would only take more
      // CPU from it (on a busy host, its peer's and roced's too), and its next verb drives the
      // port again. Back off once more.
      const pid_t tid = be->app_tid.load(std::memory_order_relaxed);
      const std::uint64_t now = now_ns(), cpu = ProgramThread::cpu_ns(tid);
      const bool waits_peer = linger_chances() != off_lingers;
      const Stopped st = waits_peer ? Stopped::kSpins
                                    : verbs_stopped(cpu > off_cpu ? cpu - off_cpu : 0, now - off_ns,
                                                    program.runnable(tid));
      if (st == Stopped::kPreempted) {
        // (growing as while the calls come: the program's next verb drives the port, and
        // each look at it here is a wake-up and two system calls taken from its CPU share)
        bump(be->st.preempted);
        off_ns = now;
        off_cpu = cpu;
        back_off(be, {static_cast<time_t>(backoff_ns / 1'000'000'000),
                      static_cast<long>(backoff_ns % 1'000'000'000)});
        backoff_ns = next_backoff(backoff_ns, true, base_backoff_ns, pol.backoff_max_ns);
        continue;
      }
      spins = st == Stopped::kSpins;
      driven = false;
    }
    backoff_ns = next_backoff(backoff_ns, false, base_backoff_ns, pol.backoff_max_ns);
    seen = calls;
    bump(be->st.rounds);
    if (progress_once(be, false, seen)) {
      idle = 0;
      continue;
    }
    const std::uint64_t now = now_ns();
    if (++idle == 1) idle_since = now;
    const IdleAction act =
        idle_action(pol.idle, spins, idle, now - idle_since, pol.spin_ns, pol.yield_ns);
    if (act == IdleAction::kPoll) continue;
    if (act == IdleAction::kYield) {
      bump(be->st.idle_yields);
      ::sched_yield();
      continue;
    }
    // Quiet for longer (nothing outstanding, no frame for 10 ms and more): longer sleeps, so
    // that an idle program costs next to nothing (ROCE_VERBS_IDLE_US). The program's next
    // verb or ibv_req_notify_cq ends one at once; a frame waits for its end.
    if (const std::uint64_t deep = deep_nap(be, pol, now - idle_since); deep != 0) {
      bump(be->st.sleeps);
      const timespec t{static_cast<time_t>(deep / 1'000'000'000),
                       static_cast<long>(deep % 1'000'000'000)};
      be->deep_sleep.store(true);
      be->backing_off.store(true);
      // (a verb between the store and the wait makes the word non-zero: no sleep)
      ::syscall(SYS_futex, &be->backoff_word, FUTEX_WAIT_PRIVATE, 0, &t, nullptr, 0);
      be->backing_off.store(false);
      be->deep_sleep.store(false, std::memory_order_relaxed);
      be->backoff_word.store(0, std::memory_order_relaxed);
      continue;
    }
    bump(be->st.naps);
    ::nanosleep(&nap, nullptr);
  }
}

/// ROCE_VERBS_STATS=1 (stderr) or =FILE (appended): when a backend ends, what the provider did
/// (VerbsStats) and, in-process, the port's and the engine's counters and the poll loop's time.
/// For measuring where a run's time goes (docs/verbs-compat.md, "The progress thread").
void dump_stats(Backend* be) {
  const char* where = std::getenv("ROCE_VERBS_STATS");
  if (where == nullptr || *where == '\0') return;
  std::FILE* f = std::strcmp(where, "1") == 0 ? stderr : std::fopen(where, "a");
  if (f == nullptr) return;
  const VerbsStats& t = be->st;
  const auto v = [](const std::atomic<std::uint64_t>& c) {
    return static_cast<unsigned long long>(c.load(std::memory_order_relaxed));
  };
  std::fprintf(
      f,
      "libroce-verbs stats pid %d %s: post_calls %llu posted %llu send_now %llu "
      "send_now_frames %llu poll_calls %llu poll_empty %llu polled %llu yields %llu "
      "lingers %llu linger_hits %llu linger_early %llu linger_skips %llu takeovers %llu | "
      "progress rounds %llu port_polls %llu port_busy %llu backoffs %llu naps %llu sleeps %llu "
      "fired %llu preempted %llu idle_yields %llu | lock_spins %llu lock_waits %llu\n",
      static_cast<int>(::getpid()), be->env ? "in-process" : "attached", v(t.post_calls),
      v(t.posted), v(t.send_now), v(t.send_now_frames), v(t.poll_calls), v(t.poll_empty),
      v(t.polled), v(t.yields), v(t.lingers), v(t.linger_hits), v(t.linger_early),
      v(t.linger_skips), v(t.takeovers), v(t.rounds), v(t.port_polls), v(t.port_busy),
      v(t.backoffs), v(t.naps), v(t.sleeps), v(t.fired), v(t.preempted), v(t.idle_yields),
      v(t.lock_spins), v(t.lock_waits));
  if (be->env) {
    const port::PollLoop::TimeStats& ts = be->env->loop.time_stats();
    std::fprintf(f, "libroce-verbs stats pid %d loop: polls %llu busy_ms %.1f idle_ms %.1f\n",
                 static_cast<int>(::getpid()), static_cast<unsigned long long>(ts.polls),
                 static_cast<double>(ts.busy_ns) / 1e6, static_cast<double>(ts.idle_ns) / 1e6);
    if (runtime::Port* p = be->env->port()) {
      const port::PortStats ps = p->dev().stats();
      std::fprintf(f,
                   "libroce-verbs stats pid %d port: rx_frames %llu tx_frames %llu tx_dropped "
                   "%llu tx_alloc_failed %llu\n",
                   static_cast<int>(::getpid()), static_cast<unsigned long long>(ps.rx_frames),
                   static_cast<unsigned long long>(ps.tx_frames),
                   static_cast<unsigned long long>(ps.tx_dropped),
                   static_cast<unsigned long long>(ps.tx_alloc_failed));
    }
    std::fprintf(f, "libroce-verbs stats pid %d engine:", static_cast<int>(::getpid()));
    const engine::Stats& es = be->env->eng.stats();
    for (std::size_t i = 0; i < engine::kCounterCount; ++i)
      if (es.c[i] != 0)
        std::fprintf(f, " %s %llu",
                     std::string(engine::to_string(static_cast<engine::Counter>(i))).c_str(),
                     static_cast<unsigned long long>(es.c[i]));
    std::fprintf(f, "\n");
  }
  if (f != stderr) std::fclose(f);
}

/// At exit: the progress thread stops, the port closes (a memif link in order) and the EAL
/// cleans up after itself (its run directory), as roce-perf ends. Not in a forked child: the
/// thread is not there, and the port and the EAL's files are the parent's.
void stop_all() {
  if (g_local == nullptr || g_local->inherited()) return;
  g_local->stop = true;
  if (g_local->progress.joinable()) g_local->progress.join();
  std::lock_guard<std::mutex> g(g_local->mu);  // a thread of the program still in a call
  dump_stats(g_local);
  g_local->ctx.reset();
  g_local->env.reset();
  port::eal_cleanup();
  restore_promiscuous();
}

}  // namespace

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

namespace {
/// Whether `m` is `q`'s post mark and can tell a request of the peer (RC and UC: UD has no
/// PSN to expect), and whether one came since it was set (the responder's expected PSN moved).
bool has_mark(const engine::Qp& q, const Backend::PostMark& m) {
  return m.qpn == q.qpn && q.type != engine::QpType::kUd;
}
bool request_since(const engine::Qp& q, const Backend::PostMark& m) {
  return q.resp.epsn.raw() != m.epsn;
}
}  // namespace

void after_post(Backend* be, std::uint32_t qpn, unsigned posted) {
  engine::Engine& eng = be->env->eng;
  if (be->missed_qpn != 0) [[unlikely]] {
    // The last linger caught nothing. If the peer's request came since, the program was
    // waiting for it (the peer was slow: keep lingering); if not, it was not waiting (a READ's
    // requester posts again): skip the next 1, 3, 7 ... 1023 chances.
    const engine::Qp* q = eng.find_qp(be->missed_qpn);
    const Backend::PostMark& m = be->post_marks[be->missed_qpn % be->post_marks.size()];
    const bool waited =
        q != nullptr &&
        (has_mark(*q, m) ? request_since(*q, m)
                         : eng.stats().get(engine::Counter::kRxFrames) != be->missed_rx);
    if (waited) {
      be->linger_misses = 0;
    } else {
      be->linger_misses = std::min(be->linger_misses + 1, 10u);
      be->linger_skip = (1u << be->linger_misses) - 1;
    }
    be->missed_qpn = 0;
  }
  if (const engine::Qp* q = eng.find_qp(qpn))
    be->post_marks[qpn % be->post_marks.size()] = {qpn, q->resp.epsn.raw()};
  // 16: a window of small WRITEs goes out in bursts of 16 as perftest posts it (the peer is
  // busy meanwhile) rather than all at its next poll; one post alone waits for that poll.
  be->unsent += posted;
  if (be->unsent < 16) return;
  be->unsent = 0;
  bump(be->st.send_now);
  bump(be->st.send_now_frames, be->env->loop.send_now());
}

bool linger(Backend* be, std::uint32_t qpn) {
  if (be->linger_ns == 0) return false;
  engine::Engine& eng = be->env->eng;
  const engine::Qp* q = eng.find_qp(qpn);
  // Requests outstanding: the program will poll again for them, nothing to wait for here.
  if (q == nullptr || q->sq_head != q->sq_tail) return false;
  const Backend::PostMark& m = be->post_marks[qpn % be->post_marks.size()];
  // The peer's next request came already (with the ACK, or before it): the program finds it.
  const bool by_psn = has_mark(*q, m);
  if (by_psn && request_since(*q, m)) {
    bump(be->st.linger_early);
    return false;
  }
  if (be->linger_skip > 0) {
    --be->linger_skip;
    bump(be->st.linger_skips);
    return false;
  }
  // Without a mark (a UD QP, or another QP took its slot since the post), any frame ends it.
  const std::uint64_t rx = eng.stats().get(engine::Counter::kRxFrames);
  const std::uint64_t end = now_ns() + be->linger_ns;
  bump(be->st.lingers);
  do {
    be->env->loop.poll_once();
    if (by_psn ? request_since(*q, m) : eng.stats().get(engine::Counter::kRxFrames) != rx) {
      bump(be->st.linger_hits);
      be->linger_misses = 0;
      return false;
    }
  } while (now_ns() < end);
  // Nothing came: the progress thread takes the port at once (the program may now spin on its
  // memory), and the program's next post says whether it was waiting (after_post).
  be->missed_qpn = qpn;
  be->missed_rx = eng.stats().get(engine::Counter::kRxFrames);
  return true;
}

void take_over(Backend* be) {
  bump(be->st.takeovers);
  be->takeover_calls.store(be->app_calls.load(std::memory_order_relaxed),
                           std::memory_order_relaxed);
  be->takeover.store(true, std::memory_order_release);
  if (be->backing_off.load()) {
    be->backoff_word.store(1);
    ::syscall(SYS_futex, &be->backoff_word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }
}

void wake_progress(Backend* be) {
  be->handoff.store(true, std::memory_order_release);
  if (!be->env) {
    // Attached: the thread waits on the armed CQs' eventfds; this CQ may not be among them.
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the arming before, `waiting` after
    if (be->waiting.load(std::memory_order_relaxed)) {
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t k = ::write(be->wake_fd, &one, sizeof one);
    }
  }
  if (be->backing_off.load()) {
    be->backoff_word.store(1);
    ::syscall(SYS_futex, &be->backoff_word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }
}

void wake_deep(Backend* be) {
  if (!be->deep_sleep.exchange(false)) return;
  be->backoff_word.store(1);
  ::syscall(SYS_futex, &be->backoff_word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

pid_t this_tid_slow() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

bool Backend::inherited() const { return pid != ::getpid(); }

bool Backend::link_up() const {
  if (env) return env->port() != nullptr && env->port()->dev().link_up();
  return ctx && ctx->connected();
}

const std::vector<Device*>& devices() {
  // For the life of the process, exit included (libibverbs may still hold them in its
  // handlers): never destroyed, so the devices stay reachable.
  static const auto* all = new std::vector<Device*>(find_devices());
  return *all;
}

bool is_ours(ibv_device* d) {
  for (Device* x : devices())
    if (&x->vdev.device == d) return true;
  return false;
}

bool is_ours(ibv_context* c) { return c != nullptr && is_ours(c->device); }

Backend* open_backend(Device* d) {
  std::lock_guard<std::mutex> g(g_open_mu);
  if (!d->attached && g_local != nullptr) {
    if (g_local->inherited()) {
      // The EAL cannot start twice in one process image, and the port is the parent's.
      std::fprintf(stderr,
                   "libroce-verbs: %s: the in-process port is the parent's (pid %d); a forked "
                   "child cannot open it\n",
                   d->name.c_str(), static_cast<int>(g_local->pid));
      errno = ENODEV;
      return nullptr;
    }
    ++g_local->users;
    return g_local;
  }
  auto be = std::make_unique<Backend>();
  be->dev = d;
  be->pid = ::getpid();
  if (d->attached) {
    // A listing's attachment made by the parent is the parent's connection: a child makes its
    // own (the inherited one is left as it is, not closed).
    if (d->probe && d->probe_pid != ::getpid()) (void)d->probe.release();
    be->ctx = d->probe ? std::move(d->probe) : client::Context::attach(d->socket, d->port);
    if (!be->ctx) return nullptr;  // errno from attach
    be->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (be->wake_fd < 0) return nullptr;  // errno from eventfd
  } else {
    try {
      be->env = std::make_unique<runtime::Env>(g_link);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "libroce-verbs: ROCE_LINK: %s\n", e.what());
      errno = ENODEV;
      return nullptr;
    }
    // A memif server's link comes up when its client joins. Programs that check the port's
    // state right after opening it (perftest gives up on a port that is down) can wait for it
    // ROCE_LINK_WAIT seconds; by default the open does not wait (a program that listens for
    // its peer only after opening would otherwise never let it join).
    if (g_link.pmd == "memif-server") {
      const double wait = std::atof(env_or("ROCE_LINK_WAIT", "0"));
      port::DpdkPort& dev = be->env->port()->dev();
      if (wait > 0) be->env->until([&] { return dev.link_up(); }, wait);
    }
    be->ctx = client::open_local(be->env->local_options(d->name));
    if (!be->ctx) return nullptr;
    const engine::Stats& es = be->env->eng.stats();
    be->rx_frames = &es.c[static_cast<std::size_t>(engine::Counter::kRxFrames)];
    be->tx_frames = &es.c[static_cast<std::size_t>(engine::Counter::kTxFrames)];
    d->info = be->ctx->port();
  }
  be->users = 1;
  be->was_up = be->link_up();
  if (const char* v = std::getenv("ROCE_VERBS_LOCK_SPIN"); v != nullptr && *v != '\0')
    be->lock_spin = static_cast<unsigned>(std::clamp(std::atol(v), 0L, 1'000'000L));
  if (!d->attached)
    be->linger_ns = static_cast<std::uint64_t>(
        std::clamp(std::atof(env_or("ROCE_VERBS_LINGER_US", "50")), 0.0, 10'000.0) * 1000);
  Backend* raw = be.release();
  raw->progress = std::thread(progress_thread, raw);
  if (!d->attached) {
    g_local = raw;
    // The engine is polled until the program ends; stop the thread before static
    // destructors run under it. The Env itself stays (the EAL cannot start twice).
    std::atexit(stop_all);
  }
  return raw;
}

void close_backend(Backend* be) {
  if (be->inherited()) return;  // a forked child: the parent's
  if (--be->users > 0 || be == g_local) return;
  be->stop = true;
  if (be->progress.joinable()) be->progress.join();
  dump_stats(be);
  if (be->env == nullptr) {
    // The attached Context's regions go with it: verbs/memory forgets its Buffers first.
    std::lock_guard<std::mutex> g(be->mu);
    forget(*be->ctx);
  }
  if (be->wake_fd >= 0) ::close(be->wake_fd);
  delete be;
}

int query_port(Backend* be, ibv_port_attr& a) {
  a = {};
  const client::PortInfo& p = be->dev->info;
  const bool up = be->link_up();
  a.state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  // max_mtu as rxe reports it (the largest RoCE MTU; modify_qp takes path MTUs up to it);
  // active_mtu the path MTU the link carries, which perftest and UCX use.
  a.max_mtu = IBV_MTU_4096;
  a.active_mtu = static_cast<ibv_mtu>(p.max_mtu);
  a.gid_tbl_len = kGidTableLen;
  a.port_cap_flags = IBV_PORT_CM_SUP;
  a.max_msg_sz = 1u << 31;
  a.pkey_tbl_len = 1;
  a.max_vl_num = 1;
  a.active_width = 1;         // 1X
  a.active_speed = 32;        // EDR (25 Gb/s per lane): a virtual link has no speed of its own
  a.phys_state = up ? 5 : 3;  // LinkUp, Disabled
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

bool gid_at(const Device* d, unsigned index, ibv_gid& gid) {
  std::memset(&gid, 0, sizeof gid);
  if (index != 0) return false;
  std::memcpy(gid.raw, d->info.gid.b.data(), 16);
  return true;
}

std::optional<MacAddr> resolve(Backend* be, Ipv4Addr ip, double seconds) {
  if (be->env) {
    std::lock_guard<std::mutex> g(be->mu);
    return port::resolve_wait(be->env->loop, ip, seconds);
  }
  return std::nullopt;
}

}  // namespace roce::verbs_compat
