/// @file
/// The ordered close of a net_memif link (DpdkPort; the why is in dpdk_port.h). The closing
/// port sends CLOSING; the peer's port stops every burst on the link, waits until none of its
/// queues is inside one, and answers STOPPED with its last burst; the closing port closes once
/// it has the answer (or after kAnswerWait: a peer that is not this port layer never answers).
/// The peer's port bursts again only after its link went down and came back up: a new
/// connection, with new rings. When both ends close at once, the memif client goes first: the
/// server answers the client's CLOSING as if it stayed, and the client ignores the server's.
/// Every memif burst passes enter_burst, so the same code keeps a port whose peer is closing out
/// of rings that are about to be unmapped.
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_pause.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "dataplane/port/dpdk_port.h"

namespace roce::port {

namespace {

// The control frames: broadcast, IEEE's local experimental EtherType, a tag, then the type.
// A frame of that type without the tag is an ordinary frame and passes.
constexpr std::uint8_t kEtherTypeHi = 0x88, kEtherTypeLo = 0xB5;
constexpr char kTag[] = "roce-port-close";
constexpr std::size_t kTagOff = 14, kTagLen = sizeof kTag - 1, kTypeOff = kTagOff + kTagLen;
constexpr std::uint16_t kFrameLen = 60;
constexpr std::uint8_t kClosing = 1, kStopped = 2;
constexpr auto kAnswerWait = std::chrono::milliseconds(500);
// After the link went down, the EAL interrupt thread is still unmapping and freeing the
// regions; our own stop runs the same teardown, and the two must not overlap (both would free
// the same memory: "EAL: Error: Invalid memory").
constexpr auto kTeardownSettle = std::chrono::milliseconds(20);

std::uint8_t control_type(const rte_mbuf* m) {
  if (m->data_len <= kTypeOff) return 0;
  const auto* p = rte_pktmbuf_mtod(m, const std::uint8_t*);
  if (p[12] != kEtherTypeHi || p[13] != kEtherTypeLo) return 0;
  if (std::memcmp(p + kTagOff, kTag, kTagLen) != 0) return 0;
  return p[kTypeOff];
}

}  // namespace

bool DpdkPort::enter_burst(std::uint16_t q) {
  // With on_control, Dekker's pattern: the mark is stored before the flag is read here, and
  // the flag stored before the marks are read there (all sequentially consistent), so either
  // this burst sees the flag or on_control sees the mark and waits for the burst to end.
  in_burst_[q].store(true, std::memory_order_seq_cst);
  if (!peer_closing_.load(std::memory_order_seq_cst)) [[likely]]
    return true;
  in_burst_[q].store(false, std::memory_order_release);
  // The peer's close takes the link down (and the old rings with it); a link up after that is
  // a new connection, whose rings are safe to poll again. The link is looked at every
  // kLinkCheckNs (per queue), not at every burst: an idle loop bursts every few hundred
  // nanoseconds, and a new connection (the peer's socket handshake and its regions mapped on
  // the interrupt thread) takes milliseconds, so its down and up are both seen still.
  Queue& qu = q_[q];
  const std::uint64_t t = rte_rdtsc();
  if (static_cast<std::int64_t>(t - qu.link_check_tsc) < 0) return false;
  qu.link_check_tsc = t + link_check_cycles_;
  if (!link_up())
    saw_link_down_.store(true, std::memory_order_relaxed);
  else if (!closing_ && saw_link_down_.exchange(false, std::memory_order_relaxed))
    peer_closing_.store(false, std::memory_order_seq_cst);
  return false;
}

std::uint16_t DpdkPort::memif_rx_burst(rte_mbuf** pkts, std::uint16_t max, std::uint16_t q) {
  if (!enter_burst(q)) return 0;
  const std::uint16_t n = rte_eth_rx_burst(port_, q, pkts, max);
  leave_burst(q);
  q_[q].stats.rx_frames += n;
  // Control frames are handled after the burst (on_control waits for the other queues and
  // sends one of its own) and go no further.
  std::uint16_t kept = 0;
  for (std::uint16_t i = 0; i < n; ++i) {
    if (const std::uint8_t type = control_type(pkts[i])) [[unlikely]] {
      rte_pktmbuf_free(pkts[i]);
      on_control(type, q);
      continue;
    }
    pkts[kept++] = pkts[i];
  }
  return kept;
}

void DpdkPort::on_control(std::uint8_t type, std::uint16_t q) {
  if (type == kStopped) {
    peer_stopped_.store(true, std::memory_order_release);
    return;
  }
  if (type != kClosing || (closing_ && memif_client_)) return;  // both closing: we go first
  peer_closing_.store(true, std::memory_order_seq_cst);
  for (std::uint16_t i = 0; i < q_.size(); ++i)
    while (i != q && in_burst_[i].load(std::memory_order_seq_cst)) rte_pause();
  // Our last burst on these rings: the peer closes once it has read it.
  send_control(kStopped, q);
}

bool DpdkPort::send_control(std::uint8_t type, std::uint16_t q) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return false;
  auto* p = rte_pktmbuf_mtod(m, std::uint8_t*);
  std::memset(p, 0, kFrameLen);
  std::memset(p, 0xFF, 6);
  std::memcpy(p + 6, mac_.b.data(), 6);
  p[12] = kEtherTypeHi;
  p[13] = kEtherTypeLo;
  std::memcpy(p + kTagOff, kTag, kTagLen);
  p[kTypeOff] = type;
  m->data_len = kFrameLen;
  m->pkt_len = kFrameLen;
  // A full ring (the peer polls slower than we sent) drains as the peer polls: retry, for as
  // long as an answer is awaited.
  const auto end = std::chrono::steady_clock::now() + kAnswerWait;
  for (unsigned i = 0;; ++i) {
    if (rte_eth_tx_burst(port_, q, &m, 1) == 1) return true;
    if (i % 1024 == 1023 && (std::chrono::steady_clock::now() > end || !link_up())) break;
    rte_pause();
  }
  rte_pktmbuf_free(m);
  return false;
}

void DpdkPort::close_memif() {
  using Clock = std::chrono::steady_clock;
  closing_ = true;
  const auto end = Clock::now() + kAnswerWait;
  if (!peer_closing_.load() && link_up()) {
    for (std::uint16_t q = 0; q < q_.size(); ++q) flush(q);
    if (send_control(kClosing, 0)) {
      rte_mbuf* pkts[32];
      while (!peer_stopped_.load() && !peer_closing_.load() && link_up() && Clock::now() < end)
        for (std::uint16_t q = 0; q < q_.size(); ++q) {
          const std::uint16_t n = memif_rx_burst(pkts, 32, q);
          for (std::uint16_t i = 0; i < n; ++i) rte_pktmbuf_free(pkts[i]);
        }
    }
  }
  if (peer_stopped_.load()) {
    // The peer's STOPPED was its last burst; a moment for it to return from it.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } else if (peer_closing_.load()) {
    // The peer closes first (it asked, or we yielded): until its close took the link down.
    while (link_up() && Clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!link_up()) std::this_thread::sleep_for(kTeardownSettle);
  peer_closing_.store(true);  // no burst from here on (closing_ keeps it so)
}

void DpdkPort::memif_closed() {
  // The peer answers our close on its side (its interrupt thread closes its end of the control
  // socket), which wakes ours; the EAL's cleanup unmaps the memory that thread walks (--no-huge:
  // the heap is ordinary mappings), so a program that cleans up right after a close died of
  // SIGSEGV in the interrupt thread.
  std::this_thread::sleep_for(kTeardownSettle);
}

}  // namespace roce::port
