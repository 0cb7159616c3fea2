/// @file
/// The NAA server (naa_server.h).
#include "apps/naa/naa_server.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "dataplane/wire/bytes.h"

namespace roce::naa {

namespace {

constexpr unsigned kRxSlots = 2;
constexpr std::uint64_t kArenaAlign = 4096;  ///< where "anywhere" regions are placed
constexpr std::uint64_t kTxId = 1ull << 40;  ///< wr_id of our sends and writes
/// log_often: lines per host and window (a hostile host's small packets must not become a
/// stream of printf and fflush on the poll loop, and of disk behind it).
constexpr std::uint32_t kLogBurst = 16;
constexpr std::uint64_t kLogWindowNs = 10'000'000'000ull;

std::uint64_t mono_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

bool Arena::allocate(std::uint64_t size) {
  reset();
  const auto m = stack_.alloc(size);
  if (!m) return false;
  m_ = *m;
  return true;
}

void Arena::reset() {
  if (m_.addr) stack_.free(m_);
  m_ = Memory{};
}

// ---- the kernel threads ------------------------------------------------------------------------

/// One call on its way through the kernel threads. The arena is shared, so that a host dropped
/// meanwhile (DREQ, an error, a new MRSP) leaves the memory to the kernel until it is done.
struct KernelJob {
  ConnId conn = 0;
  std::uint32_t fncode = 0;
  std::size_t ret = 0;  ///< seed layout: the return region (index into Host::data)
  std::shared_ptr<Arena> arena;
  std::vector<Param> params;
  KernelResult result;
};

/// Worker threads with one bounded queue (in), and the finished calls (out) that the poll loop
/// collects in step(): the only state the two sides share, under one mutex.
struct NaaServer::KernelPool {
  KernelPool(const KernelRegistry& k, unsigned threads, std::size_t max, double delay_ms)
      : kernels(k), cap(max), delay(std::chrono::duration<double, std::milli>(delay_ms)) {
    // Made on the poll loop's thread: when that is pinned to one CPU (an lcore of roced), the
    // kernels go to the other CPUs, so that a long one does not take the loop's CPU from it.
    cpu_set_t mine, others;
    CPU_ZERO(&others);
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    bool move = false;
    if (sched_getaffinity(0, sizeof mine, &mine) == 0 && CPU_COUNT(&mine) == 1)
      for (long c = 0; c < online && c < CPU_SETSIZE; ++c)
        if (!CPU_ISSET(c, &mine)) {
          CPU_SET(c, &others);
          move = true;
        }
    for (unsigned i = 0; i < threads; ++i) {
      workers.emplace_back([this] { work(); });
      if (move) pthread_setaffinity_np(workers.back().native_handle(), sizeof others, &others);
    }
  }
  ~KernelPool() {
    {
      std::lock_guard<std::mutex> g(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : workers) t.join();
  }
  /// False when `cap` calls are queued or running.
  bool submit(std::unique_ptr<KernelJob>& j) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (in_flight >= cap) return false;
      ++in_flight;
      in.push_back(std::move(j));
    }
    cv.notify_one();
    return true;
  }
  /// Takes the calls of `conn` that no kernel has started yet out of the queue (their host is
  /// gone): they give their place back and, once the caller lets them go, their memory. A
  /// kernel already running goes on (kernels run to completion) and is dropped when done.
  std::vector<std::unique_ptr<KernelJob>> cancel(ConnId conn) {
    std::vector<std::unique_ptr<KernelJob>> gone;
    std::lock_guard<std::mutex> g(mu);
    for (auto it = in.begin(); it != in.end();)
      if ((*it)->conn == conn) {
        gone.push_back(std::move(*it));
        it = in.erase(it);
        --in_flight;
      } else {
        ++it;
      }
    return gone;
  }
  void take_done(std::vector<std::unique_ptr<KernelJob>>& to) {
    std::lock_guard<std::mutex> g(mu);
    in_flight -= out.size();
    for (auto& j : out) to.push_back(std::move(j));
    out.clear();
  }
  std::size_t busy() const {
    std::lock_guard<std::mutex> g(mu);
    return in_flight;
  }
  void work() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      cv.wait(lk, [&] { return stop || !in.empty(); });
      if (stop) return;
      std::unique_ptr<KernelJob> j = std::move(in.front());
      in.pop_front();
      lk.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      j->result = kernels.run(j->fncode, j->params);
      // The test hook: a long kernel, busy on its CPU as a real one would be.
      while (delay.count() > 0 && std::chrono::steady_clock::now() < t0 + delay) {
      }
      lk.lock();
      out.push_back(std::move(j));
    }
  }

  const KernelRegistry& kernels;
  const std::size_t cap;
  const std::chrono::duration<double, std::milli> delay;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<KernelJob>> in, out;
  std::size_t in_flight = 0;  ///< queued, running, or done and not yet collected
  bool stop = false;
  std::vector<std::thread> workers;
};

NaaServer::NaaServer(Stack& stack, NaaConfig cfg, KernelRegistry kernels)
    : stack_(stack), cfg_(cfg), kernels_(std::move(kernels)) {
  if (std::string err; !kernels_.configure(cfg_.functions, err)) throw std::invalid_argument(err);
  if (cfg_.max_regions == 0 || cfg_.max_regions > kMaxRegions) cfg_.max_regions = kMaxRegions;
  if (cfg_.kernel_queue == 0) cfg_.kernel_queue = std::max<std::uint32_t>(cfg_.max_hosts, 1);
  if (cfg_.kernel_threads)
    pool_ = std::make_unique<KernelPool>(kernels_, cfg_.kernel_threads, cfg_.kernel_queue,
                                         cfg_.kernel_delay_ms);
}

std::size_t NaaServer::kernels_in_flight() const { return pool_ ? pool_->busy() : 0; }

void NaaServer::drain_kernels() {
  while (kernels_in_flight() != 0) {
    collect_kernels();
    if (kernels_in_flight() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void NaaServer::collect_kernels() {
  if (!pool_) return;
  std::vector<std::unique_ptr<KernelJob>> done;
  pool_->take_done(done);
  for (auto& j : done) {
    const auto it = hosts_.find(j->conn);
    if (it == hosts_.end()) continue;  // the host went meanwhile: its results with it
    Host& h = *it->second;
    h.running = false;
    h.last_active_ns = mono_ns();
    answer(h, j->fncode, j->result, j->ret);
  }
}

NaaServer::~NaaServer() {
  pool_.reset();  // running kernels finish first
  for (auto& [c, h] : hosts_) {
    stack_.disconnect(c);
    free_regions(*h);
    free_messages(*h);
  }
}

void NaaServer::free_messages(Host& h) {
  if (h.rx_mr.handle) stack_.dereg_mr(h.rx_mr);
  if (h.tx_mr.handle) stack_.dereg_mr(h.tx_mr);
  h.rx_mr = h.tx_mr = MrInfo{};
  if (h.msg.addr) stack_.free(h.msg);
  h.msg = Memory{};
  h.rx = h.tx = nullptr;
}

void NaaServer::start() { stack_.listen(cfg_.port); }

void NaaServer::log(const Host& h, const std::string& msg) const {
  std::printf("naa: host %s (conn %llu): %s\n", h.peer.c_str(),
              static_cast<unsigned long long>(h.conn), msg.c_str());
  std::fflush(stdout);
}

void NaaServer::log_often(Host& h, const std::string& msg) {
  const std::uint64_t now = mono_ns();
  if (h.log_window_ns == 0 || now - h.log_window_ns > kLogWindowNs) {
    if (h.suppressed)
      log(h, std::to_string(h.suppressed) + " more call or MRSP errors were not logged");
    h.log_window_ns = now;
    h.logged = 0;
    h.suppressed = 0;
  }
  if (h.logged < kLogBurst) {
    ++h.logged;
    log(h, msg);
    if (h.logged == kLogBurst)
      log(h, "further call and MRSP errors of this host are counted, not logged, for " +
                 std::to_string(kLogWindowNs / 1'000'000'000ull) + " s");
    return;
  }
  ++h.suppressed;
  ++stats_.log_suppressed;
}

bool NaaServer::step() {
  events_.clear();
  completions_.clear();
  const bool any = stack_.poll(events_, completions_);
  for (const auto& e : events_) on_event(e);
  for (const auto& c : completions_) on_completion(c);
  collect_kernels();
  post_late_receives();
  expire_idle();
  return any;
}

void NaaServer::post_late_receives() {
  if (cfg_.late_receives_ms <= 0) return;
  const std::uint64_t now = mono_ns();
  std::vector<ConnId> failed;
  for (auto& [c, h] : hosts_) {
    if (h->receives_due_ns == 0 || now < h->receives_due_ns) continue;
    h->receives_due_ns = 0;
    for (unsigned s = 0; s < kRxSlots; ++s)
      if (!post_rx(*h, s)) failed.push_back(c);
  }
  for (ConnId c : failed) drop_host(c, "cannot post a receive");
}

void NaaServer::expire_idle() {
  if (cfg_.host_idle_timeout <= 0 || hosts_.empty()) return;
  const std::uint64_t now = mono_ns();
  if (now - last_expiry_check_ns_ < 100'000'000) return;  // ten times a second
  last_expiry_check_ns_ = now;
  const auto limit = static_cast<std::uint64_t>(cfg_.host_idle_timeout * 1e9);
  std::vector<ConnId> idle;
  for (const auto& [c, h] : hosts_)
    if (!h->running && now - h->last_active_ns > limit) idle.push_back(c);
  for (ConnId c : idle) {
    ++stats_.hosts_expired;
    char why[64];
    std::snprintf(why, sizeof why, "silent for more than %g s", cfg_.host_idle_timeout);
    drop_host(c, why);
  }
}

bool NaaServer::post_rx(Host& h, unsigned slot) {
  return stack_.post_recv(h.conn, slot, h.rx + slot * kMaxMessageSize,
                          static_cast<std::uint32_t>(kMaxMessageSize), h.rx_mr.lkey);
}

void NaaServer::on_event(const ConnEvent& e) {
  switch (e.kind) {
    case ConnEvent::kConnectRequest: {
      if (hosts_.size() >= cfg_.max_hosts) {
        std::printf("naa: rejecting %s: %zu hosts connected (max_hosts)\n", e.peer.c_str(),
                    hosts_.size());
        ++stats_.hosts_rejected;
        stack_.reject(e.conn);
        return;
      }
      auto h = std::make_unique<Host>();
      h->conn = e.conn;
      h->peer = e.peer;
      h->last_active_ns = mono_ns();
      // One piece of memory (shared with roced when attached): receive slots, send buffer.
      if (const auto m = stack_.alloc((kRxSlots + 1) * kMaxMessageSize)) {
        h->msg = *m;
        h->rx = m->addr;
        h->tx = m->addr + kRxSlots * kMaxMessageSize;
      }
      // In this host's own protection domain: no other host's rkey reaches its memory.
      const auto rx = h->msg.addr
                          ? stack_.reg_mr(e.conn, h->rx, kRxSlots * kMaxMessageSize, std::nullopt)
                          : std::nullopt;
      const auto tx =
          rx ? stack_.reg_mr(e.conn, h->tx, kMaxMessageSize, std::nullopt) : std::nullopt;
      if (rx) h->rx_mr = *rx;
      if (tx) h->tx_mr = *tx;
      // Receives first (the host may SEND as soon as it has our REP), then the REP.
      bool ok = rx && tx && stack_.prepare(e.conn, QpSizes{64, kRxSlots + 2});
      if (cfg_.late_receives_ms > 0)  // test mode: the host's first SEND meets an RNR NAK
        h->receives_due_ns = mono_ns() + static_cast<std::uint64_t>(cfg_.late_receives_ms * 1e6);
      for (unsigned s = 0; ok && h->receives_due_ns == 0 && s < kRxSlots; ++s) ok = post_rx(*h, s);
      if (!ok || !stack_.accept(e.conn)) {
        std::printf("naa: cannot accept %s (resources)\n", e.peer.c_str());
        ++stats_.hosts_rejected;
        free_messages(*h);
        stack_.reject(e.conn);
        return;
      }
      ++stats_.hosts_accepted;
      log(*h, "accepted");
      hosts_[e.conn] = std::move(h);
      return;
    }
    case ConnEvent::kEstablished: {
      const auto it = hosts_.find(e.conn);
      if (it != hosts_.end()) it->second->established = true;
      return;
    }
    case ConnEvent::kDisconnected:
      drop_host(e.conn, "disconnected");
      return;
    default:
      drop_host(e.conn, "connection failed");
      return;
  }
}

void NaaServer::drop_host(ConnId c, const std::string& why) {
  const auto it = hosts_.find(c);
  if (it == hosts_.end()) {
    stack_.disconnect(c);
    return;
  }
  Host& h = *it->second;
  log(h, why + " after " + std::to_string(h.calls) + " calls");
  // A call not started yet goes with its host: a host that calls and disconnects, again and
  // again, must not fill the queue (and hold NAA memory) for the hosts that stay.
  if (h.running && pool_) pool_->cancel(c);
  stack_.disconnect(c);  // the QP goes first: nothing lands in the memory any more
  free_regions(h);
  free_messages(h);
  ++stats_.hosts_done;
  hosts_.erase(it);
}

void NaaServer::free_regions(Host& h) {
  for (auto& r : h.regions)
    if (r.registered) stack_.dereg_mr(r.mr);
  h.regions.clear();
  h.data.clear();
  h.arena.reset();  // a kernel still running on it keeps it until it is done
}

void NaaServer::on_completion(const Completion& c) {
  const auto it = hosts_.find(c.conn);
  if (it == hosts_.end()) return;
  Host& h = *it->second;
  h.last_active_ns = mono_ns();
  if (!c.ok) {
    ++stats_.transport_errors;
    drop_host(c.conn, "work completion failed (" + c.status + ")");
    return;
  }
  switch (c.kind) {
    case Completion::kRecv: {
      const unsigned slot = static_cast<unsigned>(c.wr_id);
      if (slot >= kRxSlots) return;
      on_mrsp(h, std::span<const std::uint8_t>(h.rx + slot * kMaxMessageSize,
                                               std::min<std::size_t>(c.byte_len, kMaxMessageSize)));
      if (hosts_.count(c.conn) && !post_rx(h, slot)) drop_host(c.conn, "cannot repost a receive");
      return;
    }
    case Completion::kRecvImm: {
      const unsigned slot = static_cast<unsigned>(c.wr_id);
      on_call(h, c.imm);
      if (hosts_.count(c.conn) && slot < kRxSlots && !post_rx(h, slot))
        drop_host(c.conn, "cannot repost a receive");
      return;
    }
    default:
      return;  // our SENDs and WRITEs
  }
}

void NaaServer::send_mrsp(Host& h, std::size_t len) {
  WorkRequest wr;
  wr.wr_id = kTxId;
  wr.op = Op::kSend;
  wr.local = reinterpret_cast<std::uint64_t>(h.tx);
  wr.length = static_cast<std::uint32_t>(len);
  wr.lkey = h.tx_mr.lkey;
  wr.solicited = true;  // the host sleeps until a solicited completion (NAAICE)
  if (!stack_.post_send(h.conn, wr)) drop_host(h.conn, "cannot post the MRSP answer");
}

void NaaServer::on_mrsp(Host& h, std::span<const std::uint8_t> msg) {
  const DecodeResult d = decode(msg);
  std::vector<std::uint8_t> out;
  auto answer_error = [&](MrspError e, const std::string& why) {
    ++stats_.mrsp_errors[static_cast<std::uint8_t>(e)];
    log_often(h, "MRSP error " + hex(static_cast<unsigned>(e)) + " (" + std::string(to_string(e)) +
                     "): " + why);
    out.clear();
    encode(ErrorMsg{static_cast<std::uint8_t>(e)}, out);
    std::memcpy(h.tx, out.data(), out.size());
    send_mrsp(h, out.size());
  };
  if (!d.ok() || !std::holds_alternative<AdvertiseRequest>(d.message())) {
    ++stats_.mrsp_malformed;
    // NAAICE's error codes are about memory; a message that is not a request at all breaks
    // the protocol: the host is disconnected.
    drop_host(h.conn, "malformed MRSP message: " +
                          (d.ok() ? std::string("not an advertisement+request") : d.detail));
    return;
  }
  const auto& req = std::get<AdvertiseRequest>(d.message());
  if (h.running) {  // the regions are the running kernel's: the host broke the protocol
    ++stats_.mrsp_malformed;
    drop_host(h.conn, "an MRSP message during a call");
    return;
  }
  // A new request replaces what an earlier one set up.
  free_regions(h);
  h.layout = layout_of(req);
  if (req.regions.size() > cfg_.max_regions) {
    answer_error(MrspError::kTooManyRegions, std::to_string(req.regions.size()) +
                                                 " regions requested, at most " +
                                                 std::to_string(cfg_.max_regions));
    return;
  }
  // Place the regions in this host's NAA memory: first every requested address is checked,
  // then the regions requested at address 0: the first of them at 0 when that does not overlap
  // a region requested elsewhere (upstream's hosts number their regions from 0), the others
  // after the highest region so far (a host that requests no addresses at all).
  const std::uint64_t mem = cfg_.memory_per_host;
  std::uint64_t cursor = 0, extent = 0;
  for (std::size_t i = 0; i < req.regions.size(); ++i) {
    const AdvReqEntry& r = req.regions[i];
    if (r.size == 0) {
      answer_error(MrspError::kInvalidAddress, "region " + std::to_string(i) + " has size 0");
      return;
    }
    if (r.size > kMaxRegionSize) {
      answer_error(MrspError::kNotEnoughMemory,
                   "region " + std::to_string(i) + " is larger than 1 GiB");
      return;
    }
    if (r.fpga_addr == 0) continue;
    if (r.fpga_addr >= mem) {
      answer_error(MrspError::kInvalidAddress,
                   "region " + std::to_string(i) + " at " + hex(r.fpga_addr) +
                       " is beyond the NAA memory of " + hex(mem) + " bytes");
      return;
    }
    if (r.fpga_addr + r.size > mem) {
      answer_error(MrspError::kNotEnoughMemory,
                   "region " + std::to_string(i) + " at " + hex(r.fpga_addr) + " of " +
                       std::to_string(r.size) + " bytes exceeds the NAA memory of " + hex(mem) +
                       " bytes");
      return;
    }
    cursor = std::max(cursor, r.fpga_addr + r.size);
  }
  std::vector<Region> regions;
  bool zero_free = true;  // no region placed at 0 yet
  for (std::size_t i = 0; i < req.regions.size(); ++i) {
    const AdvReqEntry& r = req.regions[i];
    Region g;
    g.req = r;
    bool at_zero = false;
    if (r.fpga_addr == 0 && zero_free) {
      at_zero = true;
      for (const AdvReqEntry& o : req.regions)
        if (o.fpga_addr != 0 && o.fpga_addr < r.size) at_zero = false;
      zero_free = false;
    }
    if (r.fpga_addr != 0 || at_zero) {
      g.offset = r.fpga_addr;
      if (at_zero) {
        if (r.size > mem) {
          answer_error(MrspError::kNotEnoughMemory,
                       "region " + std::to_string(i) + " at 0x0 of " + std::to_string(r.size) +
                           " bytes exceeds the NAA memory of " + hex(mem) + " bytes");
          return;
        }
        cursor = std::max<std::uint64_t>(cursor, r.size);
      }
    } else {
      g.offset = (cursor + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
      cursor = g.offset + r.size;
      if (g.offset + r.size > mem) {
        answer_error(MrspError::kNotEnoughMemory, "the regions need more than the NAA memory of " +
                                                      hex(mem) + " bytes (region " +
                                                      std::to_string(i) + ")");
        return;
      }
    }
    extent = std::max(extent, g.offset + r.size);
    regions.push_back(g);
  }
  h.arena = std::make_shared<Arena>(stack_);
  if (!h.arena->allocate(extent)) {
    answer_error(MrspError::kNotEnoughMemory,
                 "cannot allocate " + std::to_string(extent) + " bytes");
    return;
  }
  Advertise adv;
  for (std::size_t i = 0; i < regions.size(); ++i) {
    Region& g = regions[i];
    if (g.req.internal()) continue;
    const auto mr = stack_.reg_mr(h.conn, h.arena->get() + g.offset, g.req.size, g.offset);
    if (!mr) {
      h.regions = std::move(regions);
      free_regions(h);
      answer_error(MrspError::kNotEnoughMemory,
                   "the stack refused to register region " + std::to_string(i));
      return;
    }
    g.mr = *mr;
    g.registered = true;
    h.data.push_back(i);
    adv.regions.push_back(AdvEntry{mr->iova, mr->rkey, g.req.size});
  }
  h.regions = std::move(regions);
  if (adv.regions.empty()) {
    free_regions(h);
    answer_error(MrspError::kInvalidAddress, "no region to transfer (all internal)");
    return;
  }
  encode(adv, out);
  std::memcpy(h.tx, out.data(), out.size());
  ++stats_.mrsp_ok;
  if (cfg_.verbose)
    log_often(h, "MRSP: " + std::to_string(h.regions.size()) + " regions, " +
                     std::to_string(extent) + " bytes of NAA memory");
  send_mrsp(h, out.size());
}

void NaaServer::on_call(Host& h, std::uint32_t imm) {
  ++h.calls;
  ++stats_.calls;
  if (h.data.empty()) {
    drop_host(h.conn, "a function call before the MRSP");
    return;
  }
  // Upstream: the code in the low 7 bits (0x80 marks host-to-NAA, the upper 24 bits are the
  // host's own); the seed: the whole immediate.
  const std::uint32_t fncode = h.layout == Layout::kUpstream ? decode_call_imm(imm).fncode : imm;
  if (fncode == 0) {
    // NAAICE: function code 0 is the host telling of an error on its side; nothing to run.
    log_often(h, "function code 0 (a host-side error): nothing run");
    return;
  }
  std::size_t ret = 0;  // seed layout: index into h.data of the return region
  std::size_t first_param = 0;
  if (h.layout == Layout::kSeed) {
    const Region& meta = h.regions[h.data[0]];
    if (meta.req.size >= 8) {
      const std::uint64_t ra = wire::load_be64(h.arena->get() + meta.offset);
      for (std::size_t k = 1; k < h.data.size(); ++k)
        if (h.regions[h.data[k]].req.addr == ra) {
          ret = k;
          break;
        }
    }
    first_param = 1;
  }
  for (std::size_t i : h.data) stats_.bytes_in += h.regions[i].req.size;
  if (h.layout == Layout::kSeed && ret == 0) {
    answer(h, fncode, KernelResult{kRpcBadReturnAddress, {}}, 0);
    return;
  }
  if (h.running) {  // NAAICE hosts wait for the answer; this one did not
    ++stats_.calls_busy;
    answer(h, fncode, KernelResult{kRpcSocketNotAvailable, {}}, ret);
    return;
  }
  auto job = std::make_unique<KernelJob>();
  job->conn = h.conn;
  job->fncode = fncode;
  job->ret = ret;
  job->arena = h.arena;
  for (std::size_t k = first_param; k < h.data.size(); ++k) {
    const Region& g = h.regions[h.data[k]];
    job->params.push_back(Param{h.arena->get() + g.offset, g.req.size});
  }
  std::uint64_t bytes = 0;
  for (const Param& p : job->params) bytes += p.size;
  const Kernel* k = kernels_.find(fncode);
  const bool quick = k && k->linear && bytes <= cfg_.inline_bytes && cfg_.kernel_delay_ms <= 0;
  if (!pool_ || quick) {  // on the poll loop
    answer(h, fncode, kernels_.run(fncode, job->params), ret);
    return;
  }
  if (!pool_->submit(job)) {
    ++stats_.calls_busy;
    answer(h, fncode, KernelResult{kRpcSocketNotAvailable, {}}, ret);
    return;
  }
  h.running = true;
}

void NaaServer::answer(Host& h, std::uint32_t fncode, const KernelResult& r, std::size_t ret) {
  ++stats_.statuses[r.status];
  if (r.status != 0) ++stats_.calls_failed;
  if (cfg_.verbose || r.status != 0)
    log_often(h, "call " + std::to_string(h.calls) + " function " + std::to_string(fncode) + ": " +
                     rpc_status_string(r.status));
  // What goes back, in order (indexes into h.data); the last of them carries the immediate.
  std::vector<std::size_t> writes;
  std::size_t target = 0;  // where the WRITE_WITH_IMM goes
  std::uint32_t imm = r.status;
  if (h.layout == Layout::kUpstream) {
    // The regions the host flagged OUTPUT, whatever the kernel wrote (upstream's software NAA);
    // without any, the status alone goes to the first region.
    imm = status_imm(r.status);
    for (std::size_t k = 0; k < h.data.size(); ++k)
      if (h.regions[h.data[k]].req.output()) writes.push_back(k);
    if (!writes.empty()) {
      target = writes.back();
      writes.pop_back();
    }
    const bool data = r.status == 0 && h.regions[h.data[target]].req.output();
    post_results(h, r.status == 0 ? writes : std::vector<std::size_t>{}, target, data, imm);
    return;
  }
  // The seed: the parameters the kernel wrote (kernel index + 1: region 0 is the metadata), the
  // return region last; on an error the status alone, to the return region (or the metadata's).
  for (std::size_t o : r.outputs)
    if (o + 1 != ret) writes.push_back(o + 1);
  target = ret;
  post_results(h, r.status == 0 ? writes : std::vector<std::size_t>{}, target, r.status == 0, imm);
}

void NaaServer::post_results(Host& h, const std::vector<std::size_t>& writes, std::size_t target,
                             bool target_data, std::uint32_t imm) {
  for (std::size_t k : writes) {
    const Region& g = h.regions[h.data[k]];
    WorkRequest wr;
    wr.wr_id = kTxId;
    wr.op = Op::kWrite;
    wr.local = g.mr.iova;
    wr.length = g.req.size;
    wr.lkey = g.mr.lkey;
    wr.remote_addr = g.req.addr;
    wr.rkey = g.req.rkey;
    wr.signaled = false;
    if (!stack_.post_send(h.conn, wr)) {
      drop_host(h.conn, "cannot post a result WRITE");
      return;
    }
    stats_.bytes_out += g.req.size;
  }
  const Region& g = h.regions[h.data[target]];
  WorkRequest wr;
  wr.wr_id = kTxId;
  wr.op = Op::kWriteImm;
  wr.imm = imm;
  wr.solicited = true;  // the host sleeps until a solicited completion (NAAICE)
  wr.remote_addr = g.req.addr;
  wr.rkey = g.req.rkey;
  if (target_data) {
    wr.local = g.mr.iova;
    wr.length = g.req.size;
    wr.lkey = g.mr.lkey;
    stats_.bytes_out += g.req.size;
  }
  if (!stack_.post_send(h.conn, wr)) drop_host(h.conn, "cannot post the completion");
}

bool NaaServer::run(const volatile std::sig_atomic_t& stop, std::uint64_t exit_after,
                    double timeout, const std::function<void()>& on_idle) {
  using clock = std::chrono::steady_clock;
  const auto end = clock::now() + std::chrono::duration_cast<clock::duration>(
                                      std::chrono::duration<double>(timeout));
  unsigned idle = 0;
  while (!stop) {
    if (step())
      idle = 0;
    else if (++idle >= 32 && on_idle)
      on_idle();
    if (exit_after && stats_.hosts_done >= exit_after && hosts_.empty()) return true;
    if (timeout > 0 && clock::now() > end) return false;
  }
  return true;
}

std::string NaaServer::report() const {
  std::ostringstream o;
  o << "hosts accepted " << stats_.hosts_accepted << ", rejected " << stats_.hosts_rejected
    << ", done " << stats_.hosts_done << " (expired " << stats_.hosts_expired << ")\n";
  o << "MRSP ok " << stats_.mrsp_ok << ", malformed " << stats_.mrsp_malformed;
  for (const auto& [code, n] : stats_.mrsp_errors) o << ", error " << hex(code) << ": " << n;
  o << "\ncalls " << stats_.calls << ", failed " << stats_.calls_failed << ", busy "
    << stats_.calls_busy;
  for (const auto& [s, n] : stats_.statuses) o << ", status " << hex(s) << ": " << n;
  o << "\nbytes in " << stats_.bytes_in << ", out " << stats_.bytes_out << ", transport errors "
    << stats_.transport_errors << ", log lines suppressed " << stats_.log_suppressed << "\n";
  return o.str();
}

}  // namespace roce::naa
