/// @file
/// The DPDK port (dpdk_port.h). Received frames go to the engine straight from their mbufs.
/// Frames to send are copied from the engine's transmit slots into mbufs, except for the
/// payloads the engine leaves in registered memory (zero-copy transmit), which are attached as
/// external buffers. The ordered close of a net_memif link is in dpdk_port_close.cc.
#include "dataplane/port/dpdk_port.h"

#include <dirent.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "dataplane/port/eal.h"
#include "dataplane/port/pmd_frames.h"

namespace roce::port {

namespace {
/// link_up_or_redial: a memif client dials again 2 s after the start, then twice as long after
/// each dial, up to 8 s apart (a handshake takes milliseconds; a loaded host, hundreds).
constexpr std::uint64_t kFirstRedialNs = 2'000'000'000, kMaxRedialNs = 8'000'000'000;

/// This process's AF_PACKET sockets bound to interface `iface` (net_af_packet's, one per queue,
/// opened when the vdev was probed).
std::vector<int> packet_sockets(const std::string& iface) {
  std::vector<int> fds;
  const unsigned ifindex = if_nametoindex(iface.c_str());
  DIR* d = ifindex ? opendir("/proc/self/fd") : nullptr;
  if (d == nullptr) return fds;
  while (const dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(d)) continue;
    int domain = 0;
    socklen_t len = sizeof domain;
    sockaddr_ll sll{};
    socklen_t alen = sizeof sll;
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
        domain == AF_PACKET &&
        getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&sll), &alen) == 0 &&
        static_cast<unsigned>(sll.sll_ifindex) == ifindex)
      fds.push_back(static_cast<int>(fd));
  }
  closedir(d);
  return fds;
}
}  // namespace

DpdkPort::DpdkPort(const PortSpec& spec) {
  if (rte_eth_dev_get_port_by_name(spec.device.c_str(), &port_) != 0)
    throw std::runtime_error(
        "DPDK port '" + spec.device +
        "' not found (is it a PCI device bound to DPDK, or given with --vdev?)");
  rte_eth_dev_info info{};
  const bool have_info = rte_eth_dev_info_get(port_, &info) == 0;
  // A virtual PMD whose ring slots or buffers are smaller than the frames of the MTU would cut
  // received frames short or drop sent ones without a word (net_af_packet), or chain them over
  // several buffers, which DPDK 22.11's memif receive path crashes on: refuse it here.
  std::uint32_t pmd_room = 0;
  if (have_info && info.device != nullptr) {
    const rte_devargs* da = rte_dev_devargs(info.device);
    const std::string args = da != nullptr && da->args != nullptr ? da->args : "";
    const std::string drv = info.driver_name ? info.driver_name : "";
    std::optional<PmdFrames> f;
    try {
      f = pmd_frames(drv, args);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(spec.device + ": " + e.what());
    }
    if (f) {
      std::uint32_t need = max_frame_len(spec.mtu);
      std::string why = "MTU " + std::to_string(spec.mtu);
      if (const auto iface = devarg(args, "iface"); iface && drv == "net_af_packet")
        if (const auto k = kernel_mtu(*iface); k && max_frame_len(*k) > need) {
          need = max_frame_len(*k);
          why = "the MTU " + std::to_string(*k) + " of " + *iface;
        }
      if (f->max_frame < need)
        throw std::runtime_error(spec.device + " (" + drv + ", " + f->sizing +
                                 ") carries frames of up to " + std::to_string(f->max_frame) +
                                 " bytes; " + why + " needs " + std::to_string(need) +
                                 ": size it for the MTU (roce::port::vdev_arg does)");
      pmd_room = f->mbuf_room;
    }
  }
  max_frame_ = max_frame_len(spec.mtu);
  // One mbuf holds a whole frame: data room for the MTU plus L2 and some slack (and what the
  // PMD wants: net_af_packet a whole ring slot).
  const std::uint32_t room =
      spec.mbuf_data_room
          ? std::max(spec.mbuf_data_room, pmd_room) + RTE_PKTMBUF_HEADROOM
          : std::max<std::uint32_t>({RTE_MBUF_DEFAULT_BUF_SIZE,
                                     std::uint32_t{spec.mtu} + 64 + RTE_PKTMBUF_HEADROOM,
                                     pmd_room + RTE_PKTMBUF_HEADROOM});
  if (room > UINT16_MAX)
    throw std::runtime_error(spec.device + ": frames of MTU " + std::to_string(spec.mtu) +
                             " need mbufs of " + std::to_string(room) +
                             " bytes, more than DPDK's " + std::to_string(UINT16_MAX));
  if (spec.vlan && (*spec.vlan == 0 || *spec.vlan > 4094))
    throw std::runtime_error("VLAN " + std::to_string(*spec.vlan) + " of " + spec.device +
                             " is not between 1 and 4094");
  vlan_ = spec.vlan;
  neighbours_ = spec.neighbours;
  const std::string pool_name = "roce_pool_" + std::to_string(port_);
  pool_ =
      rte_pktmbuf_pool_create(pool_name.c_str(), spec.mbufs, 256, 0,
                              static_cast<std::uint16_t>(room), static_cast<int>(rte_socket_id()));
  if (pool_ == nullptr) throw_dpdk_error("cannot create mbuf pool for " + spec.device, rte_errno);

  rte_eth_conf conf{};
  conf.rxmode.mtu = spec.mtu;
  // Some virtual PMDs (net_af_packet) report a 1518-byte limit yet carry whatever the kernel
  // interface carries: configure what the PMD accepts; the interface MTU decides the rest.
  if (have_info) {
    std::uint32_t cap = info.max_mtu ? info.max_mtu : UINT16_MAX;
    const std::uint32_t l2 = RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
    if (info.max_rx_pktlen > l2) cap = std::min(cap, info.max_rx_pktlen - l2);
    conf.rxmode.mtu = static_cast<std::uint16_t>(std::min<std::uint32_t>(conf.rxmode.mtu, cap));
    if (spec.offloads && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM)) {
      conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
      offloads_.tx_ip_checksum = true;
    }
    if (spec.offloads && (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM)) {
      conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
      offloads_.rx_ip_checksum = true;
    }
    if (spec.vlan && spec.offloads && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_VLAN_INSERT)) {
      conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_VLAN_INSERT;
      offloads_.tx_vlan_insert = true;
    }
    if (spec.vlan && spec.offloads && (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_VLAN_STRIP)) {
      conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_VLAN_STRIP;
      offloads_.rx_vlan_strip = true;
    }
    if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) {
      conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
      offloads_.tx_multi_seg = true;
    }
    // PMDs that copy every frame out before rte_eth_tx_burst returns; any other (a PCI NIC,
    // net_ring, which hands the mbuf itself to its peer) would still read registered memory
    // after the engine let go of it.
    const std::string drv = info.driver_name ? info.driver_name : "";
    memif_ = drv == "net_memif";
    if (drv == "net_af_packet" && info.device != nullptr)
      if (const rte_devargs* da = rte_dev_devargs(info.device); da != nullptr && da->args)
        if (const auto iface = devarg(da->args, "iface")) afp_fds_ = packet_sockets(*iface);
    if (memif_) {
      const rte_devargs* da = rte_dev_devargs(info.device);
      memif_client_ = da != nullptr && da->args != nullptr &&
                      devarg(da->args, "role").value_or("server") == "client";
    }
    const bool copies_out =
        drv == "net_memif" || drv == "net_af_packet" || drv == "net_tap" || drv == "net_pcap";
    if (spec.zero_copy && offloads_.tx_multi_seg && copies_out)
      offloads_.tx_zero_copy = std::max<std::uint32_t>(spec.zero_copy_min, 1);
  }
  if (offloads_.tx_zero_copy) {
    const std::string ext_name = "roce_ext_" + std::to_string(port_);
    ext_pool_ = rte_pktmbuf_pool_create(ext_name.c_str(), spec.mbufs, 256, 0, 0,
                                        static_cast<int>(rte_socket_id()));
    if (ext_pool_ == nullptr) throw_dpdk_error("cannot create the zero-copy mbuf pool", rte_errno);
  }
  const std::uint16_t nq = std::max<std::uint16_t>(spec.queues, 1);
  int rc = rte_eth_dev_configure(port_, nq, nq, &conf);
  if (rc < 0)
    throw_dpdk_error("cannot configure " + spec.device + " with " + std::to_string(nq) + " queues",
                     rc);
  std::uint16_t rxd = spec.rx_desc, txd = spec.tx_desc;
  rte_eth_dev_adjust_nb_rx_tx_desc(port_, &rxd, &txd);
  const int socket = rte_eth_dev_socket_id(port_);
  for (std::uint16_t q = 0; q < nq; ++q) {
    rc = rte_eth_rx_queue_setup(port_, q, rxd, static_cast<unsigned>(socket < 0 ? 0 : socket),
                                nullptr, pool_);
    if (rc < 0)
      throw_dpdk_error("cannot set up RX queue " + std::to_string(q) + " of " + spec.device, rc);
    rc = rte_eth_tx_queue_setup(port_, q, txd, static_cast<unsigned>(socket < 0 ? 0 : socket),
                                nullptr);
    if (rc < 0)
      throw_dpdk_error("cannot set up TX queue " + std::to_string(q) + " of " + spec.device, rc);
  }
  rte_ether_addr mac;
  std::memcpy(mac.addr_bytes, spec.mac.b.data(), 6);
  if (spec.set_mac)
    rte_eth_dev_default_mac_addr_set(port_, &mac);  // not every PMD can; frames carry it anyway
  rc = rte_eth_dev_start(port_);
  if (rc < 0) throw_dpdk_error("cannot start " + spec.device, rc);
  dial_gap_ns_ = kFirstRedialNs;
  next_dial_ns_ = now_ns() + dial_gap_ns_;
  rte_eth_promiscuous_enable(port_);
  q_.resize(nq);
  in_burst_ = std::make_unique<std::atomic<bool>[]>(nq);
  link_check_cycles_ = rte_get_tsc_hz() / (1'000'000'000 / kLinkCheckNs);
  mac_ = spec.mac;
  max_pending_ = std::clamp<std::size_t>(spec.mbufs / (4 * std::size_t{nq}), 64, kMaxPending);
  for (auto& q : q_) {
    q.pending.reserve(max_pending_);
    q.scratch.resize(room);
    q.shinfo = std::make_unique<rte_mbuf_ext_shared_info>();
    q.shinfo->free_cb = [](void*, void*) {};
    q.shinfo->fcb_opaque = nullptr;
    rte_mbuf_ext_refcnt_set(q.shinfo.get(), 1);
  }
}

std::string Offloads::to_string() const {
  std::string s;
  if (tx_ip_checksum) s += "tx-ipv4-checksum ";
  if (rx_ip_checksum) s += "rx-ipv4-checksum ";
  if (tx_multi_seg) s += "tx-multi-segs ";
  if (tx_zero_copy) s += "tx-zero-copy(>=" + std::to_string(tx_zero_copy) + "B) ";
  if (tx_vlan_insert) s += "tx-vlan-insert ";
  if (rx_vlan_strip) s += "rx-vlan-strip ";
  if (s.empty()) return "none";
  s.pop_back();
  return s;
}

bool DpdkPort::rx_ip_checksum_ok(const rte_mbuf* m, std::uint16_t q, bool& bad) {
  bad = false;
  if (!offloads_.rx_ip_checksum) return false;
  const std::uint64_t f = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
  if (f == RTE_MBUF_F_RX_IP_CKSUM_GOOD) {
    ++q_[q].stats.rx_ip_checksum_good;
    return true;
  }
  if (f == RTE_MBUF_F_RX_IP_CKSUM_BAD) {
    ++q_[q].stats.rx_ip_checksum_bad;
    bad = true;
  }
  return false;
}

DpdkPort::~DpdkPort() {
  if (memif_) close_memif();  // dpdk_port_close.cc: the peer stops polling before we close
  for (std::uint16_t q = 0; q < q_.size(); ++q) {
    flush(q);
    for (rte_mbuf* m : q_[q].pending) rte_pktmbuf_free(m);
    rte_pktmbuf_free_bulk(q_[q].stash.data(), q_[q].stashed);
    rte_pktmbuf_free_bulk(q_[q].ext_stash.data(), q_[q].ext_stashed);
  }
  rte_eth_dev_stop(port_);
  rte_eth_dev_close(port_);
  if (memif_) memif_closed();
  rte_mempool_free(pool_);
  rte_mempool_free(ext_pool_);
}

bool DpdkPort::link_up() const {
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port_, &link) != 0) return false;
  return link.link_status == RTE_ETH_LINK_UP;
}

bool DpdkPort::link_up_or_redial() {
  if (link_up()) {
    was_up_ = true;
    return true;
  }
  if (!memif_ || !memif_client_ || was_up_) return false;
  const std::uint64_t now = now_ns();
  if (now < next_dial_ns_) return false;
  // A dial that finds the server still setting up costs one more; one that cuts a slow
  // handshake short (a loaded host), the next, with twice the time.
  rte_eth_dev_stop(port_);
  if (rte_eth_dev_start(port_) == 0) ++redials_;  // no socket (no server yet): next time
  dial_gap_ns_ = std::min(2 * dial_gap_ns_, kMaxRedialNs);
  next_dial_ns_ = now + dial_gap_ns_;
  return link_up();
}

std::uint32_t DpdkPort::link_speed_mbps() const {
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port_, &link) != 0) return 0;
  if (link.link_speed == RTE_ETH_SPEED_NUM_NONE || link.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN)
    return 0;
  return link.link_speed;
}

PortStats DpdkPort::stats() const {
  PortStats t;
  for (const auto& q : q_) {
    t.rx_frames += q.stats.rx_frames;
    t.rx_bytes += q.stats.rx_bytes;
    t.tx_frames += q.stats.tx_frames;
    t.tx_bytes += q.stats.tx_bytes;
    t.tx_dropped += q.stats.tx_dropped;
    t.rx_multiseg += q.stats.rx_multiseg;
    t.tx_alloc_failed += q.stats.tx_alloc_failed;
    t.rx_ip_checksum_good += q.stats.rx_ip_checksum_good;
    t.rx_ip_checksum_bad += q.stats.rx_ip_checksum_bad;
    t.tx_ip_checksum_offloaded += q.stats.tx_ip_checksum_offloaded;
    t.tx_zero_copy += q.stats.tx_zero_copy;
    t.tx_multiseg += q.stats.tx_multiseg;
    t.tx_vlan_inserted += q.stats.tx_vlan_inserted;
    t.rx_vlan_stripped += q.stats.rx_vlan_stripped;
    t.rx_vlan_dropped += q.stats.rx_vlan_dropped;
    t.tx_oversize += q.stats.tx_oversize;
  }
  // The PMD's own count of frames it took and did not send (read from any thread: the PMDs
  // keep plain counters per queue, so another lcore's may lag a little).
  rte_eth_stats es{};
  if (rte_eth_stats_get(port_, &es) == 0) {
    t.tx_pmd_dropped = es.oerrors;
    t.rx_missed = es.imissed;
  }
  for (const int fd : afp_fds_) {
    tpacket_stats ps{};
    socklen_t len = sizeof ps;
    if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &ps, &len) == 0)
      afp_drops_.fetch_add(ps.tp_drops, std::memory_order_relaxed);
  }
  t.rx_missed += afp_drops_.load(std::memory_order_relaxed);
  return t;
}

std::uint16_t DpdkPort::rx_burst(rte_mbuf** pkts, std::uint16_t max, std::uint16_t q) {
  if (memif_) return memif_rx_burst(pkts, max, q);
  const std::uint16_t n = rte_eth_rx_burst(port_, q, pkts, max);
  q_[q].stats.rx_frames += n;
  return n;
}

std::span<const std::uint8_t> DpdkPort::view(rte_mbuf* m, std::uint16_t q) {
  Queue& qu = q_[q];
  qu.stats.rx_bytes += m->pkt_len;
  if (m->nb_segs == 1) return {rte_pktmbuf_mtod(m, const std::uint8_t*), m->data_len};
  ++qu.stats.rx_multiseg;
  const std::uint32_t len =
      std::min<std::uint32_t>(m->pkt_len, static_cast<std::uint32_t>(qu.scratch.size()));
  const void* p = rte_pktmbuf_read(m, 0, len, qu.scratch.data());
  return {static_cast<const std::uint8_t*>(p), len};
}

void DpdkPort::free(rte_mbuf* m) { rte_pktmbuf_free(m); }

rte_mbuf* DpdkPort::copy_in(std::span<const std::uint8_t> frame) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return nullptr;
  rte_mbuf* last = m;
  if (!append(m, last, frame.data(), frame.size())) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  return m;
}

rte_mbuf* DpdkPort::copy_in(const engine::TxFrame& frame) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return nullptr;
  rte_mbuf* last = m;
  bool ok = append(m, last, frame.head.data(), frame.head.size());
  for (const engine::TxSeg& s : frame.ext) ok = ok && append(m, last, s.addr, s.len);
  ok = ok && append(m, last, frame.trailer.data(), frame.trailer.size());
  if (!ok) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  return m;
}

bool DpdkPort::append(rte_mbuf* head, rte_mbuf*& last, const std::uint8_t* p, std::size_t len) {
  while (len > 0) {
    std::size_t room = rte_pktmbuf_tailroom(last);
    if (room == 0) {
      if (!offloads_.tx_multi_seg) return false;
      rte_mbuf* m = rte_pktmbuf_alloc(pool_);
      if (m == nullptr) return false;
      last->next = m;
      last = m;
      ++head->nb_segs;
      room = rte_pktmbuf_tailroom(m);
    }
    const auto n = static_cast<std::uint16_t>(std::min(room, len));
    std::memcpy(rte_pktmbuf_mtod_offset(last, std::uint8_t*, last->data_len), p, n);
    last->data_len = static_cast<std::uint16_t>(last->data_len + n);
    head->pkt_len += n;
    p += n;
    len -= n;
  }
  return true;
}

rte_mbuf* DpdkPort::take(std::uint16_t q) {
  Queue& qu = q_[q];
  if (qu.stashed == 0) {
    if (rte_pktmbuf_alloc_bulk(pool_, qu.stash.data(), qu.stash.size()) != 0)
      return rte_pktmbuf_alloc(pool_);  // the pool runs low: one at a time
    qu.stashed = qu.stash.size();
  }
  return qu.stash[--qu.stashed];
}

rte_mbuf* DpdkPort::take_ext(std::uint16_t q) {
  Queue& qu = q_[q];
  if (qu.ext_stashed == 0) {
    if (rte_pktmbuf_alloc_bulk(ext_pool_, qu.ext_stash.data(), qu.ext_stash.size()) != 0)
      return rte_pktmbuf_alloc(ext_pool_);
    qu.ext_stashed = qu.ext_stash.size();
  }
  return qu.ext_stash[--qu.ext_stashed];
}

void DpdkPort::tx(std::span<const std::uint8_t> frame, std::uint16_t q) {
  PortStats& st = q_[q].stats;
  rte_mbuf* m = take(q);
  if (m == nullptr) {
    ++st.tx_alloc_failed;
    return;
  }
  if (frame.size() <= rte_pktmbuf_tailroom(m)) {  // the common case: one segment
    std::memcpy(rte_pktmbuf_mtod(m, std::uint8_t*), frame.data(), frame.size());
    m->data_len = static_cast<std::uint16_t>(frame.size());
    m->pkt_len = m->data_len;
    return enqueue(m, q);
  }
  rte_mbuf* last = m;
  if (!append(m, last, frame.data(), frame.size())) {
    rte_pktmbuf_free(m);
    ++st.tx_dropped;
    return;
  }
  enqueue(m, q);
}

void DpdkPort::tx(const engine::TxFrame& f, std::uint16_t q) {
  if (f.ext.empty()) return tx(f.head, q);
  Queue& qu = q_[q];
  rte_mbuf* m[2 + engine::TxRing::kMaxExt] = {};
  const unsigned n_ext = static_cast<unsigned>(f.ext.size());
  // (From the queue's stashes: a frame of three mbufs from two pools took two mempool calls
  // per frame, the external segment's a bulk call of its own.)
  unsigned got = 0;
  if (qu.stashed >= 2 && qu.ext_stashed >= n_ext) [[likely]] {
    m[0] = qu.stash[--qu.stashed];
    m[1] = qu.stash[--qu.stashed];
    for (unsigned i = 0; i < n_ext; ++i) m[2 + i] = qu.ext_stash[--qu.ext_stashed];
    got = 2 + n_ext;
  }
  while (got < 2 + n_ext) {  // a stash runs out: refilled one mbuf at a time
    rte_mbuf* x = got < 2 ? take(q) : take_ext(q);
    if (x == nullptr) break;
    m[got++] = x;
  }
  if (got < 2 + n_ext) {
    for (unsigned i = 0; i < got; ++i) rte_pktmbuf_free(m[i]);
    ++qu.stats.tx_alloc_failed;
    return;
  }
  // head -> payload segments (external buffers in registered memory) -> trailer
  rte_mbuf* head = m[0];
  std::memcpy(rte_pktmbuf_mtod(head, std::uint8_t*), f.head.data(), f.head.size());
  head->data_len = static_cast<std::uint16_t>(f.head.size());
  head->pkt_len = head->data_len;
  rte_mbuf* prev = head;
  rte_mbuf_ext_refcnt_update(qu.shinfo.get(), static_cast<std::int16_t>(n_ext));
  for (unsigned i = 0; i < n_ext; ++i) {
    rte_mbuf* e = m[2 + i];
    auto* addr = const_cast<std::uint8_t*>(f.ext[i].addr);
    const auto len = static_cast<std::uint16_t>(f.ext[i].len);
    rte_pktmbuf_attach_extbuf(e, addr, reinterpret_cast<rte_iova_t>(addr), len, qu.shinfo.get());
    e->data_len = len;
    prev->next = e;
    prev = e;
    head->pkt_len += len;
  }
  rte_mbuf* tail = m[1];
  std::memcpy(rte_pktmbuf_mtod(tail, std::uint8_t*), f.trailer.data(), f.trailer.size());
  tail->data_len = static_cast<std::uint16_t>(f.trailer.size());
  prev->next = tail;
  head->pkt_len += tail->data_len;
  head->nb_segs = static_cast<std::uint16_t>(2 + n_ext);
  ++qu.stats.tx_zero_copy;
  enqueue(head, q);
}

bool DpdkPort::tx_vlan(rte_mbuf* m, PortStats& st) {
  auto* p = rte_pktmbuf_mtod(m, std::uint8_t*);
  const bool tagged = m->data_len >= 18 && p[12] == 0x81 && p[13] == 0x00;
  if (offloads_.tx_vlan_insert) {
    // The PMD writes the tag: the frame leaves here untagged, its TCI in the mbuf.
    if (tagged) {
      m->vlan_tci = static_cast<std::uint16_t>(p[14] << 8 | p[15]);
      std::memmove(p + 4, p, 12);
      rte_pktmbuf_adj(m, 4);
    } else {
      m->vlan_tci = *vlan_;
    }
    m->ol_flags |= RTE_MBUF_F_TX_VLAN;
    ++st.tx_vlan_inserted;
    return true;
  }
  if (tagged) return true;
  m->vlan_tci = *vlan_;
  return rte_vlan_insert(&m) == 0;
}

bool DpdkPort::rx_vlan(rte_mbuf*& m, std::uint16_t q) {
  PortStats& st = q_[q].stats;
  // The VID a frame must carry: the port's, or without one 0 (untagged or priority-tagged,
  // IEEE 802.1Q: VID 0 carries only a priority). Whatever the NIC filters or not.
  const std::uint16_t want = vlan_ ? *vlan_ : 0;
  if (m->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED) {
    ++st.rx_vlan_stripped;
    if ((m->vlan_tci & 0x0FFF) != want || !restore_tag(m)) {
      ++st.rx_vlan_dropped;
      return false;
    }
    return true;
  }
  const auto* p = rte_pktmbuf_mtod(m, const std::uint8_t*);
  const bool tagged = m->data_len >= 18 && p[12] == 0x81 && p[13] == 0x00;
  if (tagged ? ((p[14] << 8 | p[15]) & 0x0FFF) == want : !vlan_) return true;
  ++st.rx_vlan_dropped;
  return false;
}

bool DpdkPort::restore_tag(rte_mbuf*& m) {
  if (m->data_len < 12) return false;
  // In place when the mbuf is ours alone and has room in front (rte_vlan_insert checks both);
  // otherwise in a copy (which keeps the PMD's other verdicts, such as the IPv4 checksum).
  if (rte_vlan_insert(&m) == 0) return true;
  rte_mbuf* c = rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX);
  if (c == nullptr) return false;
  if (rte_vlan_insert(&c) != 0) {
    rte_pktmbuf_free(c);
    return false;
  }
  rte_pktmbuf_free(m);
  m = c;
  return true;
}

void DpdkPort::enqueue(rte_mbuf* m, std::uint16_t q) {
  Queue& qu = q_[q];
  PortStats& st = qu.stats;
  std::vector<rte_mbuf*>& pending = qu.pending;
  if (m->pkt_len > max_frame_) [[unlikely]] {
    rte_pktmbuf_free(m);
    ++st.tx_oversize;
    ++st.tx_dropped;
    return;
  }
  if (vlan_ && !tx_vlan(m, st)) {
    rte_pktmbuf_free(m);
    ++st.tx_dropped;
    return;
  }
  std::uint8_t* dst = rte_pktmbuf_mtod(m, std::uint8_t*);
  const std::size_t head_len = m->data_len;
  if (offloads_.tx_ip_checksum && head_len >= 34) {
    // IPv4, tagged or not: the PMD computes the header checksum (the field must be 0).
    std::size_t l2 = 14;
    std::uint16_t type = static_cast<std::uint16_t>(dst[12] << 8 | dst[13]);
    if (type == 0x8100 && head_len >= 38) {
      type = static_cast<std::uint16_t>(dst[16] << 8 | dst[17]);
      l2 = 18;
    }
    if (type == 0x0800) {
      m->l2_len = l2;
      m->l3_len = (dst[l2] & 0x0F) * 4u;
      m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
      dst[l2 + 10] = dst[l2 + 11] = 0;
      ++st.tx_ip_checksum_offloaded;
    }
  }
  if (m->nb_segs > 1) ++st.tx_multiseg;
  if (pending.size() >= max_pending_) {
    flush(q);
    if (pending.size() >= max_pending_) {  // the link is not draining: drop, the transport recovers
      rte_pktmbuf_free(m);
      ++st.tx_dropped;
      return;
    }
  }
  pending.push_back(m);
  st.tx_bytes += m->pkt_len;
  if (pending.size() >= 64) flush(q);
}

std::size_t DpdkPort::tx_room(std::uint16_t q) {
  if (q_[q].pending.size() >= max_pending_ / 2) flush(q);
  return max_pending_ - std::min(max_pending_, q_[q].pending.size());
}

void DpdkPort::make_pending_whole(std::uint16_t q) {
  Queue& qu = q_[q];
  for (rte_mbuf*& m : qu.pending) {
    bool external = false;
    for (const rte_mbuf* s = m; s != nullptr; s = s->next) external |= RTE_MBUF_HAS_EXTBUF(s);
    if (!external) continue;
    // A copy in mbufs of the pool, offload flags and lengths included.
    rte_mbuf* whole = rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX);
    if (whole == nullptr) ++qu.stats.tx_dropped;  // out of mbufs: the transport resends it
    rte_pktmbuf_free(m);
    m = whole;
  }
  std::erase(qu.pending, nullptr);
}

void DpdkPort::flush(std::uint16_t q) {
  PortStats& st = q_[q].stats;
  std::vector<rte_mbuf*>& pending = q_[q].pending;
  if (pending.empty()) return;
  // (memif: not while the peer closes or after; the frames wait, or are dropped when too many)
  if (memif_ && !enter_burst(q)) return;
  // What the TX ring does not take now stays queued, in order, for the next flush: a slow
  // peer (a memif consumer, a busy NIC) back-pressures instead of losing frames.
  std::size_t sent = 0;
  while (sent < pending.size()) {
    const std::uint16_t n = rte_eth_tx_burst(
        port_, q, pending.data() + sent,
        static_cast<std::uint16_t>(std::min<std::size_t>(pending.size() - sent, 64)));
    sent += n;
    if (n == 0) break;
  }
  if (memif_) leave_burst(q);
  st.tx_frames += sent;
  pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(sent));
}

}  // namespace roce::port
