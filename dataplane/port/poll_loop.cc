/// @file
/// The poll loop (poll_loop.h): one iteration's order of work, steering between the lcores of
/// a port, and the lcore launch.
#include "dataplane/port/poll_loop.h"

#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <cstdio>
#include <stdexcept>

#include "dataplane/port/steering.h"

namespace roce::port {

namespace {
std::atomic<unsigned> g_ring_id{0};
rte_ring* make_ring(const char* what, unsigned size) {
  const std::string name = std::string("roce_") + what + std::to_string(g_ring_id++);
  rte_ring* r =
      rte_ring_create(name.c_str(), size, static_cast<int>(rte_socket_id()), RING_F_SC_DEQ);
  if (r == nullptr) throw_dpdk_error(std::string("cannot create the ") + what + " ring", rte_errno);
  return r;
}
}  // namespace

PollLoop::PollLoop(DpdkPort& port, engine::Engine& eng, const FaultPolicy& faults,
                   const FaultPolicy& rx_faults, std::uint16_t queue)
    : port_(port),
      eng_(eng),
      queue_(queue),
      nb_(eng.config().mac, eng.config().ipv4, eng.config().ipv6, port.neighbours()),
      reply_(9216 + 64),
      selfd_(eng.config().mac) {
  eng.set_tx_ip_checksum_offload(port.offloads().tx_ip_checksum);
  // Transmit faults other than drops need whole frames to act on (corrupt, hold): they copy.
  if (!faults.any() || faults.drop_only()) {
    eng.set_tx_zero_copy(port.offloads().tx_zero_copy);
    if (port.offloads().tx_zero_copy)
      eng.before_mr_release = [&port, queue] { port.make_pending_whole(queue); };
  }
  if (faults.any()) link_ = std::make_unique<FaultyLink>(faults);
  if (rx_faults.any()) rx_link_ = std::make_unique<FaultyLink>(rx_faults);
}

PollLoop::~PollLoop() {
  // The port outlives this loop, and the application may deregister and free its memory once
  // the loop is gone: nothing it queued may still point there.
  if (eng_.tx_zero_copy() != 0) port_.make_pending_whole(queue_);
  eng_.before_mr_release = nullptr;
  // (Commands still queued are destroyed unrun with cmds_.)
  if (own_ring_) {
    void* p = nullptr;
    while (rte_ring_dequeue(own_ring_, &p) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(p));
    rte_ring_free(own_ring_);
  }
}

void PollLoop::deliver(std::span<const std::uint8_t> f, std::uint64_t now, bool ip_ok) {
  if (offload_ && !offload_->rx(f)) return;  // the device dropped it (and counted why)
  // RoCE is IPv4/IPv6 + UDP; ARP and ICMP go to the neighbour responder.
  if (const auto n = nb_.on_frame(f, reply_)) {
    if (*n) send({reply_.data(), *n});
    return;
  }
  eng_.receive(f, now, ip_ok);
}

void PollLoop::arrive(rte_mbuf* m, std::span<const std::uint8_t> f, std::uint64_t now) {
  if (tap) tap(f, false);  // what the wire carried, before receive-side faults
  bool bad = false;
  // A checksum the PMD verified is not checked again; one it found bad is dropped here.
  const bool ip_ok = port_.rx_ip_checksum_ok(m, queue_, bad);
  if (bad) return;
  if (rx_link_)  // a frame the fault injector corrupts must be checked in software
    rx_link_->submit(f, [&](std::span<const std::uint8_t> g, std::uint64_t) { deliver(g, now); });
  else
    deliver(f, now, ip_ok);
}

std::size_t PollLoop::transmit() {
  // No more than the port takes: the rest waits in the engine's ring, not lost in the port.
  const std::size_t room = port_.tx_room(queue_);
  // These faults act on whole frames, and an offload device sends frames of its own.
  if (offload_ || (link_ && !link_->policy().drop_only()))
    return eng_.drain_tx([&](std::span<const std::uint8_t> f) { send(f); }, room);
  return eng_.drain_tx_frames(
      [&](const engine::TxFrame& f) {
        if (selfd_.is_self(f.head)) return to_self(f, f.head);
        if (tap) tap(on_wire(whole(f)), true);
        if (!link_ || !link_->drop_next(f.head)) port_.tx(f, queue_);
      },
      room);
}

std::span<const std::uint8_t> PollLoop::on_wire(std::span<const std::uint8_t> f) {
  const auto vlan = port_.vlan();
  if (!vlan || f.size() < 14 || (f[12] == 0x81 && f[13] == 0x00)) return f;
  tagged_.assign(f.begin(), f.begin() + 12);
  tagged_.insert(tagged_.end(), {0x81, 0x00, static_cast<std::uint8_t>(*vlan >> 8),
                                 static_cast<std::uint8_t>(*vlan & 0xFF)});
  tagged_.insert(tagged_.end(), f.begin() + 12, f.end());
  return tagged_;
}

std::span<const std::uint8_t> PollLoop::whole(const engine::TxFrame& f) {
  if (f.ext.empty()) return f.head;
  f.copy_to(whole_);
  return whole_;
}

void PollLoop::send(std::span<const std::uint8_t> frame) {
  if (offload_) frame = offload_->tx(frame);
  wire_tx(frame);
}

template <class Frame>
void PollLoop::to_self(const Frame& frame, std::span<const std::uint8_t> head) {
  const unsigned owner = lcores_ > 1 ? owner_lcore(head, lcores_) : self_;
  bool ok = false;
  if (owner == self_) {
    ok = selfd_.take(frame);
  } else if (rte_mbuf* m = port_.copy_in(frame)) {  // the owner's loop receives and frees it
    ok = rte_ring_enqueue(rings_[owner], m) == 0;
    if (ok)
      ++steer_.steered_out;
    else
      DpdkPort::free(m);
  }
  eng_.count(ok ? engine::Counter::kTxSelfDelivered : engine::Counter::kTxSelfDropped);
}

void PollLoop::wire_tx(std::span<const std::uint8_t> frame) {
  // Frames for our own address never reach the wire (self_delivery.h): a frame the offload
  // device built for us included, so that it meets the device again on receive.
  if (selfd_.is_self(frame)) return to_self(frame, frame);
  if (tap) tap(on_wire(frame), true);
  if (!link_) {
    port_.tx(frame, queue_);
    return;
  }
  link_->submit(frame,
                [this](std::span<const std::uint8_t> f, std::uint64_t) { port_.tx(f, queue_); });
}

std::size_t PollLoop::poll_once() {
  std::uint64_t now = now_ns();
  if (last_poll_ns_ != 0) (last_busy_ ? time_.busy_ns : time_.idle_ns) += now - last_poll_ns_;
  last_poll_ns_ = now;
  ++time_.polls;
  unsigned nc = 0;
  for (; nc < kCommandsPerPoll; ++nc) {
    // A command that throws (an allocation that failed) must not end the lcore: its poster
    // hears of it through its own means (attach's run_on passes the exception on itself).
    try {
      if (!cmds_.run_one()) break;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "roced: lcore %u: a command failed: %s\n", eng_.config().lcore,
                   e.what());
    }
  }
  std::size_t moved = 0;
  for (Poller* p : pollers_) moved += p->poll(now);
  if (offload_)
    moved += offload_->emit(now, [this](std::span<const std::uint8_t> f) { wire_tx(f); });
  // Requests posted since the last iteration leave before the receive bursts: with a message
  // in flight at a time (a ping-pong) the receive ring's poll would otherwise sit on the path
  // of every request. What the bursts then acknowledge goes out at the end as before.
  if (eng_.has_send_work()) {
    // Timers wait for the receive bursts below (run() with rx_backlog; the run() after them
    // fires what is still due): after the loop lost the CPU for longer than an ACK timeout,
    // the answers are in the receive ring, and firing first retransmitted what they answer.
    eng_.run(now, true);
    moved += transmit();
    port_.flush(queue_);
    // A fresh clock for what comes back: with hundreds of frames sent, the first ACKs can be
    // in the bursts below, and timed against the same `now` their round trip would read 0
    // (the RTT estimate fell to 1 ns and 1000 QPs sent 2 M spurious probes in 3 s).
    now = now_ns();
  }
  rte_mbuf* pkts[kRxBurst];
  // Several bursts per iteration: a loop that sends hundreds of frames per run() must also
  // take in the acknowledgements they draw, or they queue up behind its own sends.
  bool rx_backlog = false;
  for (unsigned burst = 0; burst < kRxBursts; ++burst) {
    const std::uint16_t n = port_.rx_burst(pkts, kRxBurst, queue_);
    moved += n;
    rx_backlog = n == kRxBurst;
    for (std::uint16_t i = 0; i < n; ++i) {
      if (!port_.rx_vlan(pkts[i], queue_)) {
        DpdkPort::free(pkts[i]);
        continue;
      }
      const auto f = port_.view(pkts[i], queue_);
      const unsigned owner = lcores_ > 1 ? owner_lcore(f, lcores_) : self_;
      if (owner != self_) {  // the owner's loop processes and frees it
        if (rte_ring_enqueue(rings_[owner], pkts[i]) == 0) {
          ++steer_.steered_out;
          continue;
        }
        ++steer_.ring_full;
      } else {
        arrive(pkts[i], f, now);
      }
      DpdkPort::free(pkts[i]);
    }
    if (!rx_backlog) break;
    // More to receive: what this burst acknowledged goes out first (the peer's window is
    // waiting for it, and the next bursts take a while).
    eng_.flush_acks(now);
    transmit();
  }
  if (own_ring_) {
    void* in[32];
    const unsigned k = rte_ring_dequeue_burst(own_ring_, in, 32, nullptr);
    steer_.steered_in += k;
    moved += k;
    for (unsigned i = 0; i < k; ++i) {
      auto* m = static_cast<rte_mbuf*>(in[i]);
      arrive(m, port_.view(m, queue_), now);
      DpdkPort::free(m);
    }
  }
  // Frames this loop sent to its own address, as if they had just been received (their IP
  // checksum is ours: not checked again, as a kernel's loopback).
  moved += selfd_.deliver([&](std::span<const std::uint8_t> f) { deliver(f, now, true); });
  // The device's answers to what it just took (ACKs, READ responses) leave in this iteration,
  // as the engine's do below.
  if (offload_)
    moved += offload_->emit(now, [this](std::span<const std::uint8_t> f) { wire_tx(f); });
  if (!link_ && !rx_link_ && eng_.idle_at(now) && !port_.has_pending(queue_)) {
    // Nothing to send and nothing due (what came in, if anything, asked for no answer): the
    // engine and the port have nothing more to do. Returning now shortens both an idle
    // iteration, the delay before the next frame is seen, and the way from a completion to
    // the application that polls for it.
    last_busy_ = moved + nc != 0;
    return moved + nc;
  }
  const auto late = [&](std::span<const std::uint8_t> f, std::uint64_t) { deliver(f, now); };
  if (rx_link_ && moved == 0) rx_link_->release_held(late);
  eng_.run(now, rx_backlog);
  moved += transmit();
  if (link_ && moved == 0)  // idle: release frames held for reordering
    link_->release_held(
        [this](std::span<const std::uint8_t> f, std::uint64_t) { port_.tx(f, queue_); });
  port_.flush(queue_);
  last_busy_ = moved + nc != 0;
  return moved + nc;
}

std::size_t PollLoop::send_now() {
  if (!eng_.has_send_work()) return 0;
  eng_.run(now_ns());
  const std::size_t n = transmit();
  port_.flush(queue_);
  return n;
}

void connect_loops(std::span<PollLoop* const> loops) {
  std::vector<rte_ring*> rings;
  for (PollLoop* l : loops) {
    l->own_ring_ = make_ring("steer", 4096);
    rings.push_back(l->own_ring_);
  }
  for (unsigned i = 0; i < loops.size(); ++i) {
    loops[i]->self_ = i;
    loops[i]->lcores_ = static_cast<unsigned>(loops.size());
    loops[i]->rings_ = rings;
  }
}

namespace {
struct LaunchArgs {
  std::vector<PollLoop*> loops;
  const std::atomic<bool>* stop;
  IdlePolicy idle;
};
int loop_main(void* arg) {
  std::unique_ptr<LaunchArgs> a(static_cast<LaunchArgs*>(arg));
  IdleBackoff idle(a->idle);
  while (!a->stop->load(std::memory_order_relaxed)) {
    std::size_t moved = 0;
    for (PollLoop* l : a->loops) moved += l->poll_once();
    idle.after_poll(moved);
  }
  return 0;
}
}  // namespace

void launch_loops(unsigned lcore_id, std::vector<PollLoop*> loops, const std::atomic<bool>& stop,
                  IdlePolicy idle) {
  auto* a = new LaunchArgs{std::move(loops), &stop, idle};
  const int rc = rte_eal_remote_launch(loop_main, a, lcore_id);
  if (rc != 0) {
    delete a;
    throw_dpdk_error("cannot launch a poll loop on lcore " + std::to_string(lcore_id), rc);
  }
}

std::optional<wire::MacAddr> resolve_wait(PollLoop& loop, wire::Ipv4Addr ip, double seconds) {
  std::uint64_t next = 0;
  poll_until(
      loop,
      [&] {
        if (loop.neighbour().lookup(ip)) return true;
        if (now_ns() > next) {
          loop.resolve(ip);
          next = now_ns() + 200'000'000;
        }
        return false;
      },
      seconds);
  return loop.neighbour().lookup(ip);
}

void PollLoop::resolve(wire::Ipv4Addr ip) {
  const std::size_t n = nb_.make_arp_request(ip, reply_);
  send({reply_.data(), n});
  port_.flush(queue_);
}

}  // namespace roce::port
