/// @file
/// DPDK port layer. Frames are copied from the engine's transmit slots into mbufs and handed to
/// the engine straight from received mbufs (zero-copy transmit of registered memory comes with
/// the performance work).
#include "dataplane/port/dpdk_port.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include <chrono>
#include <cstring>
#include <stdexcept>

namespace roce::port {

namespace {
bool g_eal_up = false;
[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + rte_strerror(err < 0 ? -err : err));
}
}  // namespace

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

void eal_init(const std::vector<std::string>& args) {
  if (g_eal_up) return;
  std::vector<std::string> all{"roce"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = rte_eal_init(static_cast<int>(all.size()), argv.data());
  if (rc < 0) fail("DPDK EAL initialisation failed", rte_errno);
  g_eal_up = true;
}

void eal_cleanup() {
  if (!g_eal_up) return;
  rte_eal_cleanup();
  g_eal_up = false;
}

DpdkPort::DpdkPort(const PortSpec& spec) {
  if (rte_eth_dev_get_port_by_name(spec.device.c_str(), &port_) != 0)
    throw std::runtime_error(
        "DPDK port '" + spec.device +
        "' not found (is it a PCI device bound to DPDK, or given with --vdev?)");
  // One mbuf holds a whole frame: data room for the MTU plus L2 and some slack.
  const std::uint32_t room = spec.mbuf_data_room
                                 ? spec.mbuf_data_room + RTE_PKTMBUF_HEADROOM
                                 : std::max<std::uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE,
                                                           spec.mtu + 64 + RTE_PKTMBUF_HEADROOM);
  const std::string pool_name = "roce_pool_" + std::to_string(port_);
  pool_ =
      rte_pktmbuf_pool_create(pool_name.c_str(), spec.mbufs, 256, 0,
                              static_cast<std::uint16_t>(room), static_cast<int>(rte_socket_id()));
  if (pool_ == nullptr) fail("cannot create mbuf pool for " + spec.device, rte_errno);

  rte_eth_conf conf{};
  conf.rxmode.mtu = spec.mtu;
  // Some virtual PMDs (net_af_packet) report a 1518-byte limit yet carry whatever the kernel
  // interface carries: configure what the PMD accepts; the interface MTU decides the rest.
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(port_, &info) == 0) {
    std::uint32_t cap = info.max_mtu ? info.max_mtu : UINT16_MAX;
    const std::uint32_t l2 = RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
    if (info.max_rx_pktlen > l2) cap = std::min(cap, info.max_rx_pktlen - l2);
    conf.rxmode.mtu = static_cast<std::uint16_t>(std::min<std::uint32_t>(conf.rxmode.mtu, cap));
  }
  int rc = rte_eth_dev_configure(port_, 1, 1, &conf);
  if (rc < 0) fail("cannot configure " + spec.device, rc);
  std::uint16_t rxd = spec.rx_desc, txd = spec.tx_desc;
  rte_eth_dev_adjust_nb_rx_tx_desc(port_, &rxd, &txd);
  const int socket = rte_eth_dev_socket_id(port_);
  rc = rte_eth_rx_queue_setup(port_, 0, rxd, static_cast<unsigned>(socket < 0 ? 0 : socket),
                              nullptr, pool_);
  if (rc < 0) fail("cannot set up RX queue of " + spec.device, rc);
  rc = rte_eth_tx_queue_setup(port_, 0, txd, static_cast<unsigned>(socket < 0 ? 0 : socket),
                              nullptr);
  if (rc < 0) fail("cannot set up TX queue of " + spec.device, rc);
  rte_ether_addr mac;
  std::memcpy(mac.addr_bytes, spec.mac.b.data(), 6);
  rte_eth_dev_default_mac_addr_set(port_, &mac);  // not every PMD can; the frames carry it anyway
  rc = rte_eth_dev_start(port_);
  if (rc < 0) fail("cannot start " + spec.device, rc);
  rte_eth_promiscuous_enable(port_);
  pending_.reserve(kMaxPending);
  scratch_.resize(room);
}

DpdkPort::~DpdkPort() {
  flush();
  for (rte_mbuf* m : pending_) rte_pktmbuf_free(m);
  rte_eth_dev_stop(port_);
  rte_eth_dev_close(port_);
  rte_mempool_free(pool_);
}

bool DpdkPort::link_up() const {
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port_, &link) != 0) return false;
  return link.link_status == RTE_ETH_LINK_UP;
}

std::uint16_t DpdkPort::rx_burst(rte_mbuf** pkts, std::uint16_t max) {
  const std::uint16_t n = rte_eth_rx_burst(port_, 0, pkts, max);
  stats_.rx_frames += n;
  return n;
}

std::span<const std::uint8_t> DpdkPort::view(rte_mbuf* m) {
  stats_.rx_bytes += m->pkt_len;
  if (m->nb_segs == 1) return {rte_pktmbuf_mtod(m, const std::uint8_t*), m->data_len};
  ++stats_.rx_multiseg;
  const std::uint32_t len =
      std::min<std::uint32_t>(m->pkt_len, static_cast<std::uint32_t>(scratch_.size()));
  const void* p = rte_pktmbuf_read(m, 0, len, scratch_.data());
  return {static_cast<const std::uint8_t*>(p), len};
}

void DpdkPort::free(rte_mbuf* m) { rte_pktmbuf_free(m); }

void DpdkPort::tx(std::span<const std::uint8_t> frame) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) {
    ++stats_.tx_alloc_failed;
    return;
  }
  char* dst = rte_pktmbuf_append(m, static_cast<std::uint16_t>(frame.size()));
  if (dst == nullptr) {
    rte_pktmbuf_free(m);
    ++stats_.tx_dropped;
    return;
  }
  std::memcpy(dst, frame.data(), frame.size());
  if (pending_.size() >= kMaxPending) {
    flush();
    if (pending_.size() >= kMaxPending) {  // the link is not draining: drop, the transport recovers
      rte_pktmbuf_free(m);
      ++stats_.tx_dropped;
      return;
    }
  }
  pending_.push_back(m);
  stats_.tx_bytes += frame.size();
  if (pending_.size() >= 64) flush();
}

void DpdkPort::flush() {
  // What the TX ring does not take now stays queued, in order, for the next flush: a slow
  // peer (a memif consumer, a busy NIC) back-pressures instead of losing frames.
  std::size_t sent = 0;
  while (sent < pending_.size()) {
    const std::uint16_t n = rte_eth_tx_burst(
        port_, 0, pending_.data() + sent,
        static_cast<std::uint16_t>(std::min<std::size_t>(pending_.size() - sent, 64)));
    sent += n;
    if (n == 0) break;
  }
  stats_.tx_frames += sent;
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(sent));
}

PollLoop::PollLoop(DpdkPort& port, engine::Engine& eng, const FaultPolicy& faults,
                   const FaultPolicy& rx_faults)
    : port_(port),
      eng_(eng),
      nb_(eng.config().mac, eng.config().ipv4, eng.config().ipv6),
      reply_(9216 + 64) {
  if (faults.any()) link_ = std::make_unique<FaultyLink>(faults);
  if (rx_faults.any()) rx_link_ = std::make_unique<FaultyLink>(rx_faults);
}

void PollLoop::deliver(std::span<const std::uint8_t> f, std::uint64_t now) {
  // RoCE is IPv4/IPv6 + UDP; ARP and ICMP go to the neighbour responder.
  if (const auto n = nb_.on_frame(f, reply_)) {
    if (*n) send({reply_.data(), *n});
    return;
  }
  eng_.receive(f, now);
}

void PollLoop::send(std::span<const std::uint8_t> frame) {
  if (tap) tap(frame, true);
  if (!link_) {
    port_.tx(frame);
    return;
  }
  link_->submit(frame, [this](std::span<const std::uint8_t> f, std::uint64_t) { port_.tx(f); });
}

std::size_t PollLoop::poll_once() {
  const std::uint64_t now = now_ns();
  const auto arrive = [&](std::span<const std::uint8_t> f, std::uint64_t) { deliver(f, now); };
  std::size_t moved = port_.rx(
      [&](std::span<const std::uint8_t> f) {
        if (tap) tap(f, false);  // what the wire carried, before receive-side faults
        if (rx_link_)
          rx_link_->submit(f, arrive);
        else
          deliver(f, now);
      },
      32);
  if (rx_link_ && moved == 0) rx_link_->release_held(arrive);
  eng_.run(now);
  moved += eng_.drain_tx([&](std::span<const std::uint8_t> f) { send(f); });
  if (link_ && moved == 0)  // idle: release frames held for reordering
    link_->release_held([this](std::span<const std::uint8_t> f, std::uint64_t) { port_.tx(f); });
  port_.flush();
  return moved;
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
  port_.flush();
}

}  // namespace roce::port
