/// @file
/// DPDK port layer. Received frames go to the engine straight from their mbufs. Frames to send
/// are copied from the engine's transmit slots into mbufs, except for the payloads the engine
/// leaves in registered memory (zero-copy transmit), which are attached as external buffers.
// rte_intr_instance_alloc and its setters (eal_cleanup) are experimental in DPDK 22.11.
#define ALLOW_EXPERIMENTAL_API
#include "dataplane/port/dpdk_port.h"

#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "dataplane/port/pmd_frames.h"
#include "dataplane/port/steering.h"

namespace roce::port {

namespace {
bool g_eal_up = false;
[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + rte_strerror(err < 0 ? -err : err));
}
}  // namespace

namespace {
std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}
// After the EAL is up, now_ns() reads the TSC (a few ns, where clock_gettime cost a poll loop
// 5% of its time), scaled by DPDK's TSC frequency and joined to the steady clock at that
// moment, so that the clock stays continuous and monotonic across the switch.
struct TscClock {
  std::uint64_t tsc0 = 0, ns0 = 0;
  std::uint64_t mult = 0;  ///< ns per cycle, 32.32 fixed point
};
TscClock g_tsc;
std::atomic<bool> g_tsc_ready{false};
void start_tsc_clock() {
  const std::uint64_t hz = rte_get_tsc_hz();
  if (hz == 0 || g_tsc_ready.load()) return;
  g_tsc.mult =
      static_cast<std::uint64_t>((static_cast<unsigned __int128>(1'000'000'000) << 32) / hz);
  g_tsc.ns0 = steady_ns();
  g_tsc.tsc0 = rte_get_tsc_cycles();
  g_tsc_ready.store(true, std::memory_order_release);
}
}  // namespace

std::uint64_t now_ns() {
  if (!g_tsc_ready.load(std::memory_order_acquire)) return steady_ns();
  const std::uint64_t d = rte_get_tsc_cycles() - g_tsc.tsc0;
  return g_tsc.ns0 +
         static_cast<std::uint64_t>((static_cast<unsigned __int128>(d) * g_tsc.mult) >> 32);
}

std::string main_lcore_arg(int cpu) {
  if (cpu >= 0) return "-l" + std::to_string(cpu);
  std::string cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
  return "--lcores=0@(" + (cpus.empty() ? std::string("0") : cpus) + ")";
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
  start_tsc_clock();
}

namespace {
std::atomic<bool> g_intr_parked{false};
void park_intr_thread(void*) {
  g_intr_parked.store(true, std::memory_order_release);
  for (;;) ::pause();  // until the process ends
}

// The EAL's cleanup unmaps its heap, but its interrupt thread goes on and, at its next event,
// walks handles that live there (DPDK 22.11 frees memif's listener handle and the alarm timer's
// without unregistering them): SIGSEGV in that thread, seen at the end of memif runs. Before
// the cleanup the thread is parked in a callback of ours that never returns; nothing of the
// EAL is used after its cleanup, and the process ends with the thread parked.
void park_intr_thread_for_good() {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  rte_intr_handle* h = rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
  if (fd < 0 || h == nullptr || rte_intr_fd_set(h, fd) != 0 ||
      rte_intr_type_set(h, RTE_INTR_HANDLE_EXT) != 0 ||
      rte_intr_callback_register(h, park_intr_thread, nullptr) != 0)
    return;  // (the handle and the descriptor stay: the process is about to end)
  const std::uint64_t one = 1;
  if (::write(fd, &one, sizeof one) != sizeof one) return;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!g_intr_parked.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
}
}  // namespace

void eal_cleanup() {
  if (!g_eal_up) return;
  park_intr_thread_for_good();
  rte_eal_cleanup();
  g_eal_up = false;
}

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
  if (pool_ == nullptr) fail("cannot create mbuf pool for " + spec.device, rte_errno);

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
    if (ext_pool_ == nullptr) fail("cannot create the zero-copy mbuf pool", rte_errno);
  }
  const std::uint16_t nq = std::max<std::uint16_t>(spec.queues, 1);
  int rc = rte_eth_dev_configure(port_, nq, nq, &conf);
  if (rc < 0)
    fail("cannot configure " + spec.device + " with " + std::to_string(nq) + " queues", rc);
  std::uint16_t rxd = spec.rx_desc, txd = spec.tx_desc;
  rte_eth_dev_adjust_nb_rx_tx_desc(port_, &rxd, &txd);
  const int socket = rte_eth_dev_socket_id(port_);
  for (std::uint16_t q = 0; q < nq; ++q) {
    rc = rte_eth_rx_queue_setup(port_, q, rxd, static_cast<unsigned>(socket < 0 ? 0 : socket),
                                nullptr, pool_);
    if (rc < 0) fail("cannot set up RX queue " + std::to_string(q) + " of " + spec.device, rc);
    rc = rte_eth_tx_queue_setup(port_, q, txd, static_cast<unsigned>(socket < 0 ? 0 : socket),
                                nullptr);
    if (rc < 0) fail("cannot set up TX queue " + std::to_string(q) + " of " + spec.device, rc);
  }
  rte_ether_addr mac;
  std::memcpy(mac.addr_bytes, spec.mac.b.data(), 6);
  if (spec.set_mac)
    rte_eth_dev_default_mac_addr_set(port_, &mac);  // not every PMD can; frames carry it anyway
  rc = rte_eth_dev_start(port_);
  if (rc < 0) fail("cannot start " + spec.device, rc);
  rte_eth_promiscuous_enable(port_);
  q_.resize(nq);
  in_burst_ = std::make_unique<std::atomic<bool>[]>(nq);
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
  if (rte_eth_stats_get(port_, &es) == 0) t.tx_pmd_dropped = es.oerrors;
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
  rte_mbuf* m[2 + engine::TxRing::kMaxExt];
  const unsigned n_ext = static_cast<unsigned>(f.ext.size());
  m[0] = take(q);
  m[1] = m[0] ? take(q) : nullptr;
  if (m[1] == nullptr || rte_pktmbuf_alloc_bulk(ext_pool_, m + 2, n_ext) != 0) {
    if (m[0]) rte_pktmbuf_free(m[0]);
    if (m[1]) rte_pktmbuf_free(m[1]);
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

namespace {
std::atomic<unsigned> g_ring_id{0};
rte_ring* make_ring(const char* what, unsigned size) {
  const std::string name = std::string("roce_") + what + std::to_string(g_ring_id++);
  rte_ring* r =
      rte_ring_create(name.c_str(), size, static_cast<int>(rte_socket_id()), RING_F_SC_DEQ);
  if (r == nullptr) fail(std::string("cannot create the ") + what + " ring", rte_errno);
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
      cmds_(make_ring("cmd", 1024)) {
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
  void* p = nullptr;
  while (rte_ring_dequeue(cmds_, &p) == 0) delete static_cast<std::function<void()>*>(p);
  rte_ring_free(cmds_);
  if (own_ring_) {
    while (rte_ring_dequeue(own_ring_, &p) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(p));
    rte_ring_free(own_ring_);
  }
}

bool PollLoop::post(std::function<void()> fn) {
  auto* p = new std::function<void()>(std::move(fn));
  if (rte_ring_enqueue(cmds_, p) == 0) return true;
  delete p;
  return false;
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

void PollLoop::wire_tx(std::span<const std::uint8_t> frame) {
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
  void* cmd[8];
  const unsigned nc = rte_ring_dequeue_burst(cmds_, cmd, 8, nullptr);
  for (unsigned i = 0; i < nc; ++i) {
    auto* fn = static_cast<std::function<void()>*>(cmd[i]);
    // A command that throws (an allocation that failed) must not end the lcore: its poster
    // hears of it through its own means (attach's run_on passes the exception on itself).
    try {
      (*fn)();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "roced: lcore %u: a command failed: %s\n", eng_.config().lcore,
                   e.what());
    }
    delete fn;
  }
  std::size_t moved = 0;
  for (Poller* p : pollers_) moved += p->poll(now);
  if (offload_)
    moved += offload_->emit(now, [this](std::span<const std::uint8_t> f) { wire_tx(f); });
  // Requests posted since the last iteration leave before the receive bursts: with a message
  // in flight at a time (a ping-pong) the receive ring's poll would otherwise sit on the path
  // of every request. What the bursts then acknowledge goes out at the end as before.
  if (eng_.has_send_work()) {
    eng_.run(now);
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
    fail("cannot launch a poll loop on lcore " + std::to_string(lcore_id), rc);
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
