/// @file
/// The poll loop: one port queue joined to the engine that owns its QPs (RX burst -> ARP/ICMP
/// or engine; engine.run; TX burst), with optional fault injection and an offload device on
/// the way, commands from other threads (post), steering between the lcores of a port, and
/// the launch of loops on EAL lcores.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "dataplane/engine/engine.h"
#include "dataplane/fault_injector.h"
#include "dataplane/port/command_queue.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/frame_offload.h"
#include "dataplane/port/idle.h"
#include "dataplane/port/neighbour.h"
#include "dataplane/port/poller.h"
#include "dataplane/port/self_delivery.h"

struct rte_mbuf;
struct rte_ring;

namespace roce::port {

/// One poll loop: a port queue, the engine that owns its QPs, the neighbour responder, and
/// optional fault injectors on transmit and on receive. Not thread-safe: run it on one lcore;
/// other threads hand it work with post().
///
/// With several lcores on one port (connect_loops), each loop polls its own RX and TX queue
/// and steers what it receives to the lcore that owns the destination QP (port::owner_lcore)
/// through that lcore's ring of mbufs; lcore 0 also gets everything that is not RoCE (ARP,
/// ICMP, ND) and answers it.
class PollLoop {
 public:
  PollLoop(DpdkPort& port, engine::Engine& eng, const FaultPolicy& faults = {},
           const FaultPolicy& rx_faults = {}, std::uint16_t queue = 0);
  ~PollLoop();
  PollLoop(const PollLoop&) = delete;
  PollLoop& operator=(const PollLoop&) = delete;
  /// One iteration: commands, RX burst (and frames steered here), timers and send queues, TX
  /// burst. Returns frames moved.
  std::size_t poll_once();
  /// Only the transmit half of an iteration: runs the engine when work requests wait and hands
  /// its frames to the port (no receive, no commands). For a thread that has just posted and
  /// wants the requests on the wire before its next poll (the libibverbs provider's
  /// ibv_post_send, in-process). Returns frames sent.
  std::size_t send_now();
  /// Sends an ARP request for `ip` (the reply fills the neighbour cache).
  void resolve(wire::Ipv4Addr ip);
  Neighbour& neighbour() { return nb_; }
  /// Called for every frame received (tx = false) and sent (tx = true): for captures.
  std::function<void(std::span<const std::uint8_t>, bool tx)> tap;
  const FaultyLink* faults() const { return link_.get(); }
  const FaultyLink* rx_faults() const { return rx_link_.get(); }
  /// The largest command post() takes, in bytes (its captures): a slot of the command queue.
  /// The attach server's verbs commands carry up to 104 (the operation's arguments and the
  /// promise its control thread waits on).
  static constexpr std::size_t kCommandBytes = 128;
  /// Commands queued at once.
  static constexpr std::size_t kCommands = 1024;
  /// Runs `fn` on this loop's lcore at its next iteration (from any thread; no locks and no
  /// allocation: `fn` is built in a slot of the loop's command queue, command_queue.h). False,
  /// `fn` untouched, when the queue is full. `fn` is a void() callable of at most
  /// kCommandBytes; a larger one does not compile (capture a pointer to what it needs).
  template <class F>
  bool post(F&& fn) {
    return cmds_.try_push(std::forward<F>(fn));
  }
  engine::Engine& engine() { return eng_; }
  /// Runs `p` at the start of every iteration (port/poller.h) until remove_poller(). Call on
  /// the loop's lcore (from a post()ed command) or before the loop runs.
  void add_poller(Poller* p) { pollers_.push_back(p); }
  /// Puts an offload device (frame_offload.h) between this loop and its port: every frame
  /// received and sent passes it. Call before the loop runs; null removes it.
  void set_offload(FrameOffload* o) { offload_ = o; }
  void remove_poller(Poller* p) { std::erase(pollers_, p); }

  struct SteerStats {
    std::uint64_t steered_out = 0;  ///< received here, owned by another lcore
    std::uint64_t steered_in = 0;   ///< received by another lcore, owned here
    std::uint64_t ring_full = 0;    ///< dropped: the owner's ring was full
  };
  const SteerStats& steer_stats() const { return steer_; }
  /// Frames this loop sent to its own port's MAC and handed back to a receive path
  /// (self_delivery.h; also the engine's tx_self_delivered / tx_self_dropped counters).
  const SelfDeliveryStats& self_delivery_stats() const { return selfd_.stats(); }

  /// Where the loop's time goes: from the start of one poll to the start of the next counts as
  /// busy when that poll moved a frame or ran a command, idle otherwise (the caller's own work
  /// between polls goes with the poll before it). busy / (busy + idle) tells which side of a
  /// link limits a run.
  struct TimeStats {
    std::uint64_t busy_ns = 0, idle_ns = 0, polls = 0;
  };
  const TimeStats& time_stats() const { return time_; }

 private:
  friend void connect_loops(std::span<PollLoop* const> loops);
  static constexpr std::uint16_t kRxBurst = 32;
  static constexpr unsigned kRxBursts = 4;         ///< bursts per iteration while the queue is full
  static constexpr unsigned kCommandsPerPoll = 8;  ///< commands run per iteration, at most
  void send(std::span<const std::uint8_t> frame);
  /// A frame as it goes on the wire (after the offload device): capture, faults, the port.
  void wire_tx(std::span<const std::uint8_t> frame);
  /// Hands the engine's queued frames to the port (through the fault injector and the
  /// capture tap when there are); returns how many.
  std::size_t transmit();
  /// A zero-copy frame copied together (for a capture).
  std::span<const std::uint8_t> whole(const engine::TxFrame& f);
  /// A frame to send as the wire will carry it (for a capture): on a VLAN port, an untagged
  /// frame with the port's tag, which the port adds on transmit.
  std::span<const std::uint8_t> on_wire(std::span<const std::uint8_t> f);
  void deliver(std::span<const std::uint8_t> frame, std::uint64_t now, bool ip_ok = false);
  /// A frame for the port's own MAC: to this loop's self-delivery queue, or (several lcores)
  /// as an mbuf to the ring of the lcore that owns its QP. Never to the wire.
  template <class Frame>
  void to_self(const Frame& frame, std::span<const std::uint8_t> head);
  void arrive(rte_mbuf* m, std::span<const std::uint8_t> frame, std::uint64_t now);
  DpdkPort& port_;
  engine::Engine& eng_;
  std::uint16_t queue_;
  Neighbour nb_;
  std::unique_ptr<FaultyLink> link_;     ///< transmit faults, only when configured
  std::unique_ptr<FaultyLink> rx_link_;  ///< receive faults, only when configured
  std::vector<std::uint8_t> reply_;
  std::vector<std::uint8_t> whole_;
  std::vector<std::uint8_t> tagged_;             ///< on_wire()
  CommandQueue<kCommandBytes> cmds_{kCommands};  ///< post()
  std::vector<Poller*> pollers_;                 ///< add_poller()
  FrameOffload* offload_ = nullptr;              ///< set_offload()
  // steering (connect_loops)
  unsigned self_ = 0, lcores_ = 1;
  std::vector<rte_ring*> rings_;  ///< one per lcore: mbufs for its loop
  rte_ring* own_ring_ = nullptr;  ///< created by connect_loops, freed here
  SteerStats steer_;
  SelfDelivery selfd_;  ///< frames for our own MAC, delivered at the next receive step
  TimeStats time_;
  std::uint64_t last_poll_ns_ = 0;
  bool last_busy_ = false;
};

/// Joins the poll loops of one port's queues (loop i on queue i, engine of lcore i) so that
/// each steers received frames to the owner of their destination QP.
void connect_loops(std::span<PollLoop* const> loops);

/// Runs `loops` (round robin) on DPDK lcore `lcore_id` (a worker of the EAL) until `stop`
/// becomes true. rte_eal_wait_lcore(lcore_id) waits for it to return.
/// `idle`: sleep between empty polls (idle.h); busy polling by default.
void launch_loops(unsigned lcore_id, std::vector<PollLoop*> loops, const std::atomic<bool>& stop,
                  IdlePolicy idle = {});
inline void launch_loop(unsigned lcore_id, PollLoop& loop, const std::atomic<bool>& stop) {
  launch_loops(lcore_id, {&loop}, stop);
}

/// Runs `loop` until `done()` is true or `seconds` pass; false on timeout. For control code
/// (exchanges, set-up) that must keep the dataplane answering while it waits.
template <class F>
bool poll_until(PollLoop& loop, F&& done, double seconds) {
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(seconds * 1e9);
  while (!done()) {
    if (now_ns() > end) return false;
    loop.poll_once();
  }
  return true;
}

/// Resolves `ip` with ARP (a request every 200 ms) while polling; nullopt after `seconds`.
std::optional<wire::MacAddr> resolve_wait(PollLoop& loop, wire::Ipv4Addr ip, double seconds);

}  // namespace roce::port
