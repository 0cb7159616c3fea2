/// @file
/// The DPDK port: one rte_ethdev port, its mbuf pools, and one RX and one TX queue per lcore;
/// frames in and out (copied, or payloads attached from registered memory), the offloads it
/// uses, the VLAN of the port, and the ordered close of a net_memif link
/// (dpdk_port_close.cc). The EAL must be up (eal.h); a poll loop (poll_loop.h) drives it.
/// The port layer's .cc files are the only code that includes DPDK.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dataplane/engine/tx_ring.h"
#include "dataplane/port/neighbour.h"
#include "dataplane/wire/bytes.h"

struct rte_mempool;
struct rte_mbuf;
struct rte_mbuf_ext_shared_info;

namespace roce::port {

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
  /// Frames lost on the way in before the port saw them: the PMD's imissed (a NIC with no free
  /// descriptor) and, on net_af_packet, what the kernel dropped with the socket's receive ring
  /// full (PACKET_STATISTICS' tp_drops, which DPDK 22.11's PMD does not report).
  std::uint64_t rx_missed = 0;
};

class DpdkPort {
 public:
  explicit DpdkPort(const PortSpec& spec);
  ~DpdkPort();
  DpdkPort(const DpdkPort&) = delete;
  DpdkPort& operator=(const DpdkPort&) = delete;

  bool link_up() const;
  /// link_up(); and a net_memif client whose link has never come up dials its server again
  /// now and then (2 s after the start, then 4 and 8 s apart). It dials once by itself, at the
  /// start: a server whose process is up but whose port has not started yet (its socket exists
  /// from its EAL set-up on) answers "ID not found", and DPDK 22.11's client never dials
  /// again. Only from the thread that polls the port (a dial stops and starts the device).
  bool link_up_or_redial();
  /// Dials of link_up_or_redial (after the first, at the start).
  std::uint32_t redials() const { return redials_; }
  /// The link's speed in Mb/s as the driver reports it (rte_eth_link_get_nowait); 0 unknown.
  std::uint32_t link_speed_mbps() const;
  const Offloads& offloads() const { return offloads_; }
  /// The PMD's verdict on the IPv4 header checksum of a received frame: true when it checked
  /// it good; false when it did not check. A bad one is counted and reported by `bad`.
  bool rx_ip_checksum_ok(const rte_mbuf* m, std::uint16_t q, bool& bad);
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
  /// A copy of `frame` in an mbuf of the port's pool, as if received (self-delivery to
  /// another lcore's ring); null when the pool is dry or the frame needs segments the port
  /// cannot chain.
  rte_mbuf* copy_in(std::span<const std::uint8_t> frame);
  rte_mbuf* copy_in(const engine::TxFrame& frame);
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
    std::array<rte_mbuf*, 32> ext_stash{};  ///< the same from ext_pool_ (zero-copy segments)
    unsigned ext_stashed = 0;
    /// memif, while the peer's CLOSING holds the bursts (enter_burst): when (TSC) the link's
    /// state may be looked at again.
    std::uint64_t link_check_tsc = 0;
  };
  /// An mbuf from queue `q`'s stash (refilled from the pool 32 at a time), or null.
  rte_mbuf* take(std::uint16_t q);
  /// An mbuf without data room (ext_pool_) from queue `q`'s stash of them, or null.
  rte_mbuf* take_ext(std::uint16_t q);
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
  // link_up_or_redial: the link came up once; when to dial next, and how long after that
  bool was_up_ = false;
  std::uint64_t next_dial_ns_ = 0, dial_gap_ns_ = 0;
  std::uint32_t redials_ = 0;
  wire::MacAddr mac_;
  std::unique_ptr<std::atomic<bool>[]> in_burst_;  ///< per queue: inside a memif burst
  /// The peer asked us to stop (CLOSING): no burst until the link went down and came back up
  /// (a new connection, new rings).
  std::atomic<bool> peer_closing_{false};
  std::atomic<bool> saw_link_down_{false};
  /// While the peer's CLOSING holds the bursts, enter_burst looks at the link
  /// (rte_eth_link_get_nowait) at most once per kLinkCheckNs and queue, not at every burst of
  /// an idle loop; link_check_cycles_ is that in TSC cycles.
  static constexpr std::uint64_t kLinkCheckNs = 100'000;
  std::uint64_t link_check_cycles_ = 0;
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
  /// net_af_packet: the PMD's sockets (found by their interface in /proc/self/fd), whose drops
  /// stats() reads (reading resets them: summed in afp_drops_).
  std::vector<int> afp_fds_;
  mutable std::atomic<std::uint64_t> afp_drops_{0};
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

}  // namespace roce::port
