/// @file
/// The DPDK port layer: EAL start-up, one rte_ethdev port with one RX and one TX queue, and the
/// poll loop that joins a port to an Engine (RX burst -> ARP/ICMP or engine; engine.run; TX
/// burst), with optional fault injection on transmit. This is the only code that includes DPDK.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dataplane/engine/engine.h"
#include "dataplane/fault_injector.h"
#include "dataplane/port/frame_offload.h"
#include "dataplane/port/idle.h"
#include "dataplane/port/neighbour.h"
#include "dataplane/port/poller.h"

struct rte_mempool;
struct rte_mbuf;
struct rte_ring;
struct rte_mbuf_ext_shared_info;

namespace roce::port {

/// Starts the DPDK EAL once per process. `args` are EAL arguments without the program name.
/// Throws std::runtime_error with DPDK's reason on failure.
void eal_init(const std::vector<std::string>& args);
void eal_cleanup();
/// The EAL argument that places a single-lcore tool's poll loop: "-l CPU" pins it to `cpu`;
/// a negative `cpu` lets it run on any CPU the process may use ("--lcores=0@(...)"). Two tools
/// on one host that both pin CPU 0 take turns at the scheduler's pace (milliseconds).
std::string main_lcore_arg(int cpu);

struct PortSpec {
  std::string device;  ///< ethdev name (a vdev given to the EAL, or a PCI address)
  wire::MacAddr mac;
  std::uint16_t mtu = 1500;
  std::uint32_t mbufs = 8192;
  std::uint32_t mbuf_data_room = 0;  ///< 0: room for one frame of `mtu`
  std::uint16_t rx_desc = 1024;
  std::uint16_t tx_desc = 1024;
  std::uint16_t queues = 1;  ///< RX/TX queue pairs: one per lcore (memif: one ring pair each)
  bool offloads = true;      ///< use the checksum offloads the PMD offers (false: software only)
  /// Give the device our MAC. Not for net_tap: its device is the kernel's end of the wire, and
  /// a bridge would take frames for a MAC of its own port as its own.
  bool set_mac = true;
  /// Zero-copy transmit: payloads of at least `zero_copy_min` bytes go out as DPDK external
  /// buffers pointing into registered memory, chained behind a header mbuf. Used only where
  /// that is safe: PMDs that copy a frame out at rte_eth_tx_burst (net_memif, net_af_packet,
  /// net_tap, net_pcap) and chain segments. A PCI NIC would read the memory by DMA later and
  /// needs it mapped for DMA, which registered application memory is not: it copies.
  bool zero_copy = true;
  std::uint32_t zero_copy_min = 512;
  /// 802.1Q VLAN of the port: every frame sent carries this tag (frames the engine tagged keep
  /// theirs; untagged ones, such as ARP requests, get it), and received frames of another VLAN
  /// or without a tag are dropped and counted. The PMD's VLAN insert and strip offloads are used
  /// when offered; above the port every frame looks as on the wire, tag included.
  std::optional<std::uint16_t> vlan;
  /// Entries of each neighbour cache (ARP, ND) of the poll loops on this port.
  std::uint32_t neighbours = Neighbour::kDefaultCapacity;
};

/// The offloads a port uses (those the PMD offers, unless PortSpec::offloads is false).
struct Offloads {
  bool tx_ip_checksum = false;     ///< the PMD fills the IPv4 header checksum of what we send
  bool rx_ip_checksum = false;     ///< the PMD flags received IPv4 headers good or bad
  bool tx_multi_seg = false;       ///< the PMD sends chained mbufs (frames larger than one mbuf)
  std::uint32_t tx_zero_copy = 0;  ///< payloads from this size leave from registered memory
  bool tx_vlan_insert = false;     ///< the PMD inserts the 802.1Q tag (PortSpec::vlan)
  bool rx_vlan_strip = false;      ///< the PMD strips the tag into the mbuf (PortSpec::vlan)
  std::string to_string() const;
};

struct PortStats {
  /// tx_dropped: frames given to the port that never reached the PMD (no room while the link
  /// does not drain, no mbufs for a copy, no room for a tag, longer than the port carries).
  std::uint64_t rx_frames = 0, rx_bytes = 0, tx_frames = 0, tx_bytes = 0, tx_dropped = 0;
  std::uint64_t rx_multiseg = 0, tx_alloc_failed = 0;
  std::uint64_t rx_ip_checksum_good = 0;  ///< verified by the PMD (RX offload)
  std::uint64_t rx_ip_checksum_bad = 0;   ///< flagged bad by the PMD: dropped
  std::uint64_t tx_ip_checksum_offloaded = 0;
  std::uint64_t tx_zero_copy = 0;      ///< frames sent with their payload in registered memory
  std::uint64_t tx_multiseg = 0;       ///< frames sent as a chain of mbufs (zero-copy or large)
  std::uint64_t tx_vlan_inserted = 0;  ///< tags left to the PMD's VLAN insert offload
  std::uint64_t rx_vlan_stripped = 0;  ///< tags the PMD stripped (put back before the engine)
  /// Frames of another VLAN, or untagged, on a VLAN port; and stripped frames whose tag could
  /// not be put back (no mbuf for the copy).
  std::uint64_t rx_vlan_dropped = 0;
  /// Frames longer than the port's MTU allows (max_frame_len): dropped before the PMD, which
  /// would lose them silently (also in tx_dropped).
  std::uint64_t tx_oversize = 0;
  /// Frames the PMD took but did not send (its oerrors: net_af_packet drops a frame longer than
  /// its ring slot so, or when the kernel refuses the send).
  std::uint64_t tx_pmd_dropped = 0;
};

class DpdkPort {
 public:
  explicit DpdkPort(const PortSpec& spec);
  ~DpdkPort();
  DpdkPort(const DpdkPort&) = delete;
  DpdkPort& operator=(const DpdkPort&) = delete;

  bool link_up() const;
  const Offloads& offloads() const { return offloads_; }
  /// The PMD's verdict on the IPv4 header checksum of a received frame: true when it checked
  /// it good; false when it did not check. A bad one is counted and reported by `bad`.
  bool rx_ip_checksum_ok(const rte_mbuf* m, std::uint16_t q, bool& bad);
  std::uint16_t port_id() const { return port_; }
  std::uint16_t queues() const { return static_cast<std::uint16_t>(q_.size()); }
  /// Receives up to `max` frames from queue `q` and hands each that passes rx_vlan() to
  /// `f(std::span<const std::uint8_t>)`; returns how many were received.
  template <class F>
  std::uint16_t rx(F&& f, std::uint16_t max = 32, std::uint16_t q = 0);
  /// Lower level, for steering: a burst of mbufs, their bytes, and freeing them.
  std::uint16_t rx_burst(rte_mbuf** pkts, std::uint16_t max, std::uint16_t q = 0);
  std::span<const std::uint8_t> view(rte_mbuf* m, std::uint16_t q = 0);
  /// The VLAN check of a received frame (PortSpec::vlan): puts back a tag the PMD stripped (in
  /// place, or in a copy that replaces `m` when the mbuf is shared or has no headroom); false
  /// (counted) when the frame is not of the port's VLAN and must be dropped (then `m` is still
  /// the caller's to free). Without a port VLAN every frame passes, a stripped tag put back.
  bool rx_vlan(rte_mbuf*& m, std::uint16_t q);
  /// The port's VLAN (PortSpec::vlan).
  std::optional<std::uint16_t> vlan() const { return vlan_; }
  /// PortSpec::neighbours.
  std::uint32_t neighbours() const { return neighbours_; }
  static void free(rte_mbuf* m);
  /// Queues a copy of `frame` for transmit on queue `q`; sent by flush() (or when the burst
  /// is full). Each queue belongs to one lcore.
  void tx(std::span<const std::uint8_t> frame, std::uint16_t q = 0);
  /// The same for a frame in pieces (engine::Engine::drain_tx_frames): the head and trailer are
  /// copied, the payload segments are attached as external buffers (Offloads::tx_zero_copy).
  void tx(const engine::TxFrame& frame, std::uint16_t q = 0);
  /// Copies every queued frame of queue `q` whose payload is still in registered memory into
  /// mbufs of its own (Engine::before_mr_release): the application may then free that memory.
  void make_pending_whole(std::uint16_t q = 0);
  void flush(std::uint16_t q = 0);
  /// Whether frames of queue `q` wait for room in the TX ring (flush() retries them).
  bool has_pending(std::uint16_t q = 0) const { return !q_[q].pending.empty(); }
  /// How many more frames queue `q` takes without dropping (after a flush when half full):
  /// the poll loop drains no more than this from the engine, whose ring then holds the rest
  /// and stops the requesters (back-pressure instead of loss).
  std::size_t tx_room(std::uint16_t q = 0);
  /// Counters summed over the queues (read from the owning lcore, or approximately elsewhere).
  PortStats stats() const;

 private:
  struct Queue {
    std::vector<rte_mbuf*> pending;     ///< frames queued while the TX ring is full
    std::vector<std::uint8_t> scratch;  ///< linearised multi-segment frames
    PortStats stats;
    /// Shared by every external buffer of this queue: its count is one plus the zero-copy
    /// segments not yet freed; nothing is freed when it drops (the memory is the application's).
    std::unique_ptr<rte_mbuf_ext_shared_info> shinfo;
    std::array<rte_mbuf*, 32> stash{};  ///< mbufs allocated in bulk, taken one per frame
    unsigned stashed = 0;
  };
  /// An mbuf from queue `q`'s stash (refilled from the pool 32 at a time), or null.
  rte_mbuf* take(std::uint16_t q);
  /// Copies `len` bytes behind `last`, the last segment of the chain `head`, chaining new mbufs
  /// when it is full (only if the PMD takes chains). False when out of mbufs or room.
  bool append(rte_mbuf* head, rte_mbuf*& last, const std::uint8_t* p, std::size_t len);
  /// Offload flags of a frame whose headers are in its first segment; queues it for flush().
  void enqueue(rte_mbuf* m, std::uint16_t q);
  /// The 802.1Q tag of a frame about to be queued (PortSpec::vlan): left to the PMD or
  /// written. False when it cannot be (no headroom): the frame is dropped.
  bool tx_vlan(rte_mbuf* m, PortStats& st);
  /// Writes the tag the PMD stripped back into the frame (rx_vlan).
  bool restore_tag(rte_mbuf*& m);
  // --- dpdk_port_close.cc: the ordered close of a net_memif link ---
  // memif takes a connection down on the EAL interrupt thread when the peer leaves, unmapping
  // the shared rings a burst of ours may be reading (SIGSEGV). So a port closing sends its peer
  // a CLOSING frame, the peer's port stops every burst on the link and answers STOPPED, and only
  // then does the first close. Both ends are this port layer in all our programs; another peer
  // does not answer, and the close goes ahead after a short wait, as before.
  /// memif: marks queue `q` as in a burst; false (and not marked) when no burst may start.
  bool enter_burst(std::uint16_t q);
  void leave_burst(std::uint16_t q) { in_burst_[q].store(false, std::memory_order_release); }
  /// rx_burst on memif: the bursts guarded, and CLOSING and STOPPED frames taken out.
  std::uint16_t memif_rx_burst(rte_mbuf** pkts, std::uint16_t max, std::uint16_t q);
  /// Handles a received CLOSING (stop every queue's bursts, answer STOPPED) or STOPPED.
  void on_control(std::uint8_t type, std::uint16_t q);
  bool send_control(std::uint8_t type, std::uint16_t q);
  /// Before the port closes: CLOSING to the peer and its answer awaited (bounded).
  void close_memif();
  /// After: the interrupt thread's last events of the connection handled before we go on (an
  /// EAL cleanup right after would unmap what it walks).
  static void memif_closed();
  bool memif_ = false;         ///< net_memif: its rings vanish when the peer leaves
  bool memif_client_ = false;  ///< its role (in a close of both ends at once, the server yields)
  bool closing_ = false;       ///< in close_memif
  wire::MacAddr mac_;
  std::unique_ptr<std::atomic<bool>[]> in_burst_;  ///< per queue: inside a memif burst
  /// The peer asked us to stop (CLOSING): no burst until the link went down and came back up
  /// (a new connection, new rings).
  std::atomic<bool> peer_closing_{false};
  std::atomic<bool> saw_link_down_{false};
  std::atomic<bool> peer_stopped_{false};  ///< our CLOSING was answered
  std::optional<std::uint16_t> vlan_;
  std::uint32_t neighbours_ = Neighbour::kDefaultCapacity;
  std::uint32_t max_frame_ = 0;  ///< longest frame the port sends (max_frame_len of the MTU)
  std::uint16_t port_ = 0;
  rte_mempool* pool_ = nullptr;
  rte_mempool* ext_pool_ = nullptr;  ///< mbufs without data room, for external buffers
  Offloads offloads_;
  static constexpr std::size_t kMaxPending = 4096;
  /// Frames a queue may hold for the PMD: a quarter of the pool's mbufs (a zero-copy frame
  /// takes two of them, and receive needs its share), at most kMaxPending. With 4096 of 8192
  /// the pool ran dry under 1000 QPs: frames were lost to failed allocations.
  std::size_t max_pending_ = kMaxPending;
  std::vector<Queue> q_;
};

template <class F>
std::uint16_t DpdkPort::rx(F&& f, std::uint16_t max, std::uint16_t q) {
  rte_mbuf* pkts[64];
  const std::uint16_t n = rx_burst(pkts, max > 64 ? 64 : max, q);
  for (std::uint16_t i = 0; i < n; ++i) {
    if (rx_vlan(pkts[i], q)) f(view(pkts[i], q));
    free(pkts[i]);
  }
  return n;
}

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
  /// Sends an ARP request for `ip` (the reply fills the neighbour cache).
  void resolve(wire::Ipv4Addr ip);
  Neighbour& neighbour() { return nb_; }
  /// Called for every frame received (tx = false) and sent (tx = true): for captures.
  std::function<void(std::span<const std::uint8_t>, bool tx)> tap;
  const FaultyLink* faults() const { return link_.get(); }
  const FaultyLink* rx_faults() const { return rx_link_.get(); }
  /// Runs `fn` on this loop's lcore at its next iteration (from any thread; no locks: a ring).
  /// False when the command ring is full.
  bool post(std::function<void()> fn);
  engine::Engine& engine() { return eng_; }
  std::uint16_t queue() const { return queue_; }
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
  static constexpr unsigned kRxBursts = 4;  ///< bursts per iteration while the queue is full
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
  void arrive(rte_mbuf* m, std::span<const std::uint8_t> frame, std::uint64_t now);
  DpdkPort& port_;
  engine::Engine& eng_;
  std::uint16_t queue_;
  Neighbour nb_;
  std::unique_ptr<FaultyLink> link_;     ///< transmit faults, only when configured
  std::unique_ptr<FaultyLink> rx_link_;  ///< receive faults, only when configured
  std::vector<std::uint8_t> reply_;
  std::vector<std::uint8_t> whole_;
  std::vector<std::uint8_t> tagged_;  ///< on_wire()
  rte_ring* cmds_ = nullptr;          ///< std::function<void()>* from other threads
  std::vector<Poller*> pollers_;      ///< add_poller()
  FrameOffload* offload_ = nullptr;   ///< set_offload()
  // steering (connect_loops)
  unsigned self_ = 0, lcores_ = 1;
  std::vector<rte_ring*> rings_;  ///< one per lcore: mbufs for its loop
  rte_ring* own_ring_ = nullptr;  ///< created by connect_loops, freed here
  SteerStats steer_;
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

/// Monotonic nanoseconds (the engine's clock).
std::uint64_t now_ns();

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
