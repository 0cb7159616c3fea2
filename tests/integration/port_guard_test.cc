// What a peer on the segment can do to a port, checked on real DPDK ports (net_ring, no
// hugepages) with the real poll loop: frames injected into a port's receive ring as a NIC that
// does not filter would hand them over (tagged in the frame, or stripped into the mbuf as a
// VLAN-strip offload leaves them).
//
// - VLAN: a frame of another VLAN (or untagged) never reaches the neighbour responder or the
//   engine of a VLAN port, and a port without VLAN takes only untagged and priority-tagged
//   frames; each refusal is counted (port_rx_vlan_dropped).
// - Floods: 1 M frames of ARP, ND and CM REQs with random sources leave the neighbour caches
//   and the CM within their caps and resident memory within a bound, while an RC WRITE stream
//   between the two ports keeps going with every byte checked.
#include <gtest/gtest.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "controlplane/cm/cm_agent.h"
#include "controlplane/cm/mad.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/poll_loop.h"
#include "dataplane/wire/eth.h"
#include "dataplane/wire/ip.h"
#include "dataplane/wire/roce_frame.h"

namespace roce {
namespace {

using namespace engine;

const wire::MacAddr kMacA{{0x02, 0, 0x5e, 0, 0x07, 1}}, kMacB{{0x02, 0, 0x5e, 0, 0x07, 2}};
const wire::Ipv4Addr kIpA{0xC0000201}, kIpB{0xC0000202};
const wire::Ipv6Addr kIp6B{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}};

class Eal : public ::testing::Environment {
 public:
  void SetUp() override {
    port::eal_init({"--no-huge", "--no-shconf", "-m", "512", "--no-pci",
                    "--file-prefix=bounds" + std::to_string(getpid()), "--log-level=*:error", "-l",
                    "0"});
  }
};
const auto* const kEal = ::testing::AddGlobalTestEnvironment(new Eal);

rte_ring* ring(const std::string& name) {
  rte_ring* r = rte_ring_create(name.c_str(), 4096, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
  if (r == nullptr) throw std::runtime_error("cannot create ring " + name);
  return r;
}

// A net_ring port that receives from `rx` and sends into `tx`; returns its ethdev name.
std::string ring_port(const std::string& name, rte_ring* rx, rte_ring* tx) {
  const int id = rte_eth_from_rings(name.c_str(), &rx, 1, &tx, 1, 0);
  char dev[RTE_ETH_NAME_MAX_LEN];
  if (id < 0 || rte_eth_dev_get_name_by_port(static_cast<std::uint16_t>(id), dev) != 0)
    throw std::runtime_error("cannot create net_ring port " + name);
  return dev;
}

rte_mempool* test_pool(const std::string& name) {
  rte_mempool* p =
      rte_pktmbuf_pool_create(name.c_str(), 4095, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
  if (p == nullptr) throw std::runtime_error("cannot create pool " + name);
  return p;
}

// Hands `f` to the port as the NIC would: optionally with its tag stripped into the mbuf.
bool inject(rte_ring* r, rte_mempool* pool, std::span<const std::uint8_t> f,
            std::optional<std::uint16_t> stripped_tci = {}) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m == nullptr) return false;
  std::memcpy(rte_pktmbuf_append(m, static_cast<std::uint16_t>(f.size())), f.data(), f.size());
  if (stripped_tci) {
    m->ol_flags |= RTE_MBUF_F_RX_VLAN | RTE_MBUF_F_RX_VLAN_STRIPPED;
    m->vlan_tci = *stripped_tci;
  }
  if (rte_ring_enqueue(r, m) == 0) return true;
  rte_pktmbuf_free(m);
  return false;
}

std::vector<std::vector<std::uint8_t>> collect(rte_ring* r) {
  std::vector<std::vector<std::uint8_t>> out;
  void* p;
  while (rte_ring_dequeue(r, &p) == 0) {
    auto* m = static_cast<rte_mbuf*>(p);
    std::vector<std::uint8_t> f(rte_pktmbuf_pkt_len(m));
    const void* d = rte_pktmbuf_read(m, 0, static_cast<std::uint32_t>(f.size()), f.data());
    if (d != f.data()) std::memcpy(f.data(), d, f.size());
    rte_pktmbuf_free(m);
    out.push_back(std::move(f));
  }
  return out;
}

// An Ethernet frame with an optional 802.1Q tag around `body` of type `type`.
std::vector<std::uint8_t> eth(const wire::MacAddr& dst, const wire::MacAddr& src,
                              std::optional<std::uint16_t> vlan, std::uint16_t type,
                              std::span<const std::uint8_t> body) {
  std::vector<std::uint8_t> f(12);
  std::memcpy(f.data(), dst.b.data(), 6);
  std::memcpy(f.data() + 6, src.b.data(), 6);
  if (vlan) f.insert(f.end(), {0x81, 0x00, std::uint8_t(*vlan >> 8), std::uint8_t(*vlan)});
  f.insert(f.end(), {std::uint8_t(type >> 8), std::uint8_t(type)});
  f.insert(f.end(), body.begin(), body.end());
  if (f.size() < 60) f.resize(60, 0);
  return f;
}

std::vector<std::uint8_t> arp_body(std::uint16_t op, const wire::MacAddr& sha, wire::Ipv4Addr spa,
                                   wire::Ipv4Addr tpa) {
  std::vector<std::uint8_t> a(28, 0);
  wire::store_be16(a.data(), 1);
  wire::store_be16(a.data() + 2, wire::kEtherTypeIpv4);
  a[4] = 6;
  a[5] = 4;
  wire::store_be16(a.data() + 6, op);
  std::memcpy(a.data() + 8, sha.b.data(), 6);
  wire::store_be32(a.data() + 14, spa.v);
  wire::store_be32(a.data() + 24, tpa.v);
  return a;
}

std::vector<std::uint8_t> roce_send(std::optional<std::uint16_t> vlan) {
  wire::FrameSpec s;
  s.src_mac = kMacA;
  s.dst_mac = kMacB;
  s.vlan_id = vlan;
  s.src_ip4 = kIpA;
  s.dst_ip4 = kIpB;
  s.opcode = wire::Opcode::kRcSendOnly;
  s.dest_qp = wire::Qpn(0x11);
  const std::uint8_t payload[16] = {};
  std::vector<std::uint8_t> f(wire::frame_len(s, sizeof payload));
  wire::build_frame(s, payload, f);
  return f;
}

std::uint64_t engine_frames(const Engine& e) {
  const auto& v = e.stats().verdicts;
  return std::accumulate(v.begin(), v.end(), std::uint64_t{0});
}

struct VlanCase {
  std::string name;
  rte_ring* rx;
  rte_ring* tx;
  rte_mempool* pool;
  std::unique_ptr<Engine> eng;
  std::unique_ptr<port::DpdkPort> port;
  std::unique_ptr<port::PollLoop> loop;

  VlanCase(const std::string& n, std::optional<std::uint16_t> vlan)
      : name(n), rx(ring(n + "_rx")), tx(ring(n + "_tx")), pool(test_pool(n + "_inj")) {
    const std::string dev = ring_port(n, rx, tx);
    EngineConfig ec;
    ec.mac = kMacB;
    ec.ipv4 = kIpB;
    ec.vlan_id = vlan;
    ec.max_qps = 16;
    eng = std::make_unique<Engine>(ec);
    port::PortSpec ps;
    ps.device = dev;
    ps.mac = kMacB;
    ps.mbufs = 2048;
    ps.vlan = vlan;
    port = std::make_unique<port::DpdkPort>(ps);
    loop = std::make_unique<port::PollLoop>(*port, *eng);
  }
  void arp(std::optional<std::uint16_t> tag, std::optional<std::uint16_t> stripped = {}) {
    const auto body = arp_body(1, kMacA, kIpA, kIpB);
    const wire::MacAddr bcast{{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}};
    ASSERT_TRUE(inject(rx, pool, eth(bcast, kMacA, tag, wire::kEtherTypeArp, body), stripped));
  }
  void run() {
    for (int i = 0; i < 8; ++i) loop->poll_once();
  }
};

TEST(PortGuard, AVlanPortTakesOnlyItsVlan) {
  VlanCase c("bounds_vlan100", 100);
  c.arp(100);                         // answered
  c.arp(200);                         // another VLAN
  c.arp(std::nullopt);                // untagged
  c.arp(0);                           // priority-tagged: no VLAN
  c.arp(std::nullopt, 200);           // stripped by the NIC: VLAN 200
  c.arp(std::nullopt, 100);           // stripped by the NIC: VLAN 100, answered
  c.arp(std::nullopt, 0x3000 | 200);  // PCP set, VLAN 200
  ASSERT_TRUE(inject(c.rx, c.pool, roce_send(200)));
  ASSERT_TRUE(inject(c.rx, c.pool, roce_send(std::nullopt)));
  ASSERT_TRUE(inject(c.rx, c.pool, roce_send(std::nullopt), 200));
  c.run();
  const port::PortStats s = c.port->stats();
  EXPECT_EQ(s.rx_frames, 10u);
  EXPECT_EQ(s.rx_vlan_dropped, 8u);
  EXPECT_EQ(s.rx_vlan_stripped, 4u);
  EXPECT_EQ(c.loop->neighbour().stats().arp_requests_answered, 2u);
  EXPECT_EQ(engine_frames(*c.eng), 0u) << "a frame of another VLAN reached the engine";
  const auto sent = collect(c.tx);
  ASSERT_EQ(sent.size(), 2u);
  for (const auto& f : sent) {
    ASSERT_GE(f.size(), 18u);
    EXPECT_EQ(wire::load_be16(f.data() + 12), wire::kEtherTypeVlan);
    EXPECT_EQ(wire::load_be16(f.data() + 14) & 0x0FFF, 100);
    EXPECT_EQ(wire::load_be16(f.data() + 16), wire::kEtherTypeArp);
  }
  // A RoCE frame of our VLAN does reach the engine (it has no QP 0x11: counted there).
  ASSERT_TRUE(inject(c.rx, c.pool, roce_send(100)));
  c.run();
  EXPECT_EQ(engine_frames(*c.eng), 1u);
}

TEST(PortGuard, APortWithoutVlanTakesNoTaggedFrames) {
  VlanCase c("bounds_novlan", std::nullopt);
  c.arp(std::nullopt);       // answered
  c.arp(0);                  // priority-tagged: answered
  c.arp(std::nullopt, 0);    // priority tag stripped by the NIC: answered
  c.arp(200);                // VLAN 200 on an untagged port
  c.arp(std::nullopt, 200);  // the same, stripped by the NIC
  ASSERT_TRUE(inject(c.rx, c.pool, roce_send(200)));
  c.run();
  const port::PortStats s = c.port->stats();
  EXPECT_EQ(s.rx_vlan_dropped, 3u);
  EXPECT_EQ(c.loop->neighbour().stats().arp_requests_answered, 3u);
  EXPECT_EQ(engine_frames(*c.eng), 0u);
  EXPECT_EQ(collect(c.tx).size(), 3u);
}

// ---- floods ---------------------------------------------------------------------------------

std::uint64_t vm_rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

// The frames of the flood, randomised in place: one of each kind, rewritten per frame.
class Flood {
 public:
  explicit Flood(std::uint64_t seed) : rng_(seed) {}

  std::vector<std::uint8_t> next() {
    switch (n_++ % 5) {
      case 0:  // ARP request for B from anyone: learned, cold, evicted
        return eth(kBcast, mac(), std::nullopt, wire::kEtherTypeArp,
                   arp_body(1, mac(), ip(), kIpB));
      case 1:  // ARP reply nobody asked for
        return eth(kMacB, mac(), std::nullopt, wire::kEtherTypeArp, arp_body(2, mac(), ip(), kIpB));
      case 2:  // neighbour solicitation for B from anyone
        return nd(135, kIp6B);
      case 3:  // unsolicited neighbour advertisement
        return nd(136, ip6());
      default:  // CM REQ from a random address and comm ID
        return cm_req();
    }
  }
  static constexpr std::uint64_t kService = 0x1234;

 private:
  static constexpr wire::MacAddr kBcast{{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}};
  wire::MacAddr mac() {
    const auto r = rng_();
    return wire::MacAddr{{0x02, std::uint8_t(r), std::uint8_t(r >> 8), std::uint8_t(r >> 16),
                          std::uint8_t(r >> 24), std::uint8_t(r >> 32)}};
  }
  wire::Ipv4Addr ip() {  // 198.18.0.0/15
    return wire::Ipv4Addr{0xC6120000u | static_cast<std::uint32_t>(rng_() & 0x1FFFF)};
  }
  wire::Ipv6Addr ip6() {
    wire::Ipv6Addr a = kIp6B;
    const auto r = rng_();
    std::memcpy(a.b.data() + 8, &r, 8);
    return a;
  }
  std::vector<std::uint8_t> nd(std::uint8_t type, const wire::Ipv6Addr& target) {
    const wire::MacAddr src_mac = mac();
    std::vector<std::uint8_t> body(40 + 32, 0);
    wire::Ipv6View ip(body.data());
    ip.set_version_tc_flow(0, 0);
    ip.set_payload_len(32);
    ip.set_next_header(wire::kIpProtoIcmpv6);
    ip.set_hop_limit(255);
    ip.set_src(ip6());
    ip.set_dst(kIp6B);
    std::uint8_t* icmp = body.data() + 40;
    icmp[0] = type;
    std::memcpy(icmp + 8, target.b.data(), 16);
    icmp[24] = type == 135 ? 1 : 2;
    icmp[25] = 1;
    std::memcpy(icmp + 26, src_mac.b.data(), 6);
    wire::store_be16(icmp + 2, wire::ipv6_l4_checksum(body.data(), icmp, 32, wire::kIpProtoIcmpv6));
    return eth(kMacB, src_mac, std::nullopt, wire::kEtherTypeIpv6, body);
  }
  std::vector<std::uint8_t> cm_req() {
    const auto r = rng_();
    cm::ReqMsg m;
    m.local_comm_id = static_cast<std::uint32_t>(r);
    m.service_id = kService;
    m.local_ca_guid = r >> 16;
    m.local_qpn = wire::Qpn(static_cast<std::uint32_t>(r >> 40) & 0xFFFFFF);
    m.path_mtu = 3;
    m.local_cm_response_timeout = 31;  // asks us to wait hours
    m.max_cm_retries = 15;
    m.primary.local_ack_timeout = 31;
    cm::MadHeader h;
    h.tid = r;
    const cm::MadBuf mad = cm::encode(h, m);
    wire::FrameSpec s;
    s.src_mac = mac();
    s.dst_mac = kMacB;
    s.src_ip4 = ip();
    s.dst_ip4 = kIpB;
    s.opcode = wire::Opcode::kUdSendOnly;
    s.dest_qp = wire::Qpn(1);
    s.deth.qkey = 0x80010000;
    s.deth.src_qp = wire::Qpn(1);
    std::vector<std::uint8_t> f(wire::frame_len(s, mad.size()));
    wire::build_frame(s, mad, f);
    return f;
  }
  std::mt19937_64 rng_;
  std::uint64_t n_ = 0;
};

struct Side {
  std::unique_ptr<Engine> eng;
  std::unique_ptr<port::DpdkPort> port;
  std::unique_ptr<port::PollLoop> loop;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  Qp* qp = nullptr;
  Mr* mr = nullptr;
  std::vector<std::uint8_t> buf;

  Side(const std::string& dev, const wire::MacAddr& mac, wire::Ipv4Addr ip,
       std::optional<wire::Ipv6Addr> ip6, std::size_t size) {
    EngineConfig ec;
    ec.mac = mac;
    ec.ipv4 = ip;
    ec.ipv6 = ip6;
    ec.max_qps = 16;
    eng = std::make_unique<Engine>(ec);
    port::PortSpec ps;
    ps.device = dev;
    ps.mac = mac;
    ps.mbufs = 8192;
    port = std::make_unique<port::DpdkPort>(ps);
    loop = std::make_unique<port::PollLoop>(*port, *eng);
    pd = eng->alloc_pd();
    cq = eng->create_cq(64);
    qp = eng->create_qp(pd, QpType::kRc, cq, cq, QpCap{16, 16, 1, 1, 0});
    buf.assign(size, 0);
    mr = eng->reg_mr(pd, buf.data(), buf.size(),
                     kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qp_access_flags = kAccessRemoteWrite;
    if (!qp || !mr ||
        eng->modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk)
      throw std::runtime_error("cannot create the QP");
  }
  void connect(const Side& peer, wire::Ipv4Addr peer_ip, const wire::MacAddr& peer_mac) {
    QpAttr a;
    a.qp_state = QpState::kRtr;
    a.path_mtu = Mtu::k1024;
    a.dest_qp_num = peer.qp->qpn;
    a.rq_psn = 100;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah.dgid = wire::ipv4_mapped(peer_ip);
    a.ah.dmac = peer_mac;
    a.ah.hop_limit = 64;
    bool ok = eng->modify_qp(qp, a,
                             kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                 kQpMaxDestRdAtomic | kQpMinRnrTimer) == kOk;
    a.qp_state = QpState::kRts;
    a.sq_psn = 100;
    a.timeout = 10;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    ok = ok && eng->modify_qp(qp, a,
                              kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry |
                                  kQpMaxQpRdAtomic) == kOk;
    if (!ok) throw std::runtime_error("cannot connect the QP");
  }
};

TEST(PortGuard, FloodsStayBoundedWhileATransferRuns) {
  const std::size_t kFrames =
      std::getenv("ROCE_FLOOD_FRAMES") ? std::stoull(std::getenv("ROCE_FLOOD_FRAMES")) : 1000000;
  constexpr std::size_t kSize = 16384;
  constexpr std::uint32_t kCap = 4096;
  rte_ring* ab = ring("bounds_ab");
  rte_ring* ba = ring("bounds_ba");
  const std::string dev_a = ring_port("bounds_a", ba, ab);
  const std::string dev_b = ring_port("bounds_b", ab, ba);
  rte_mempool* pool = test_pool("bounds_flood");
  Side a(dev_a, kMacA, kIpA, std::nullopt, kSize);
  Side b(dev_b, kMacB, kIpB, kIp6B, kSize);
  // B hosts a CM that listens (as an rdma_cm service does) and never answers: every REQ
  // the flood sends is held until the cap or its half-open deadline.
  cm::CmAgentConfig cc;
  cc.cm.ca_guid = 0xB;
  cc.cm.seed = 5;
  cc.cm.max_connections = kCap;
  cc.cm.half_open_timeout = std::chrono::milliseconds(200);
  cc.clock = [] { return port::now_ns(); };
  cc.resolve_mac = [&b](const wire::Ipv6Addr& gid) -> std::optional<wire::MacAddr> {
    const auto ip = wire::ipv4_of_mapped(gid);
    if (!ip) return std::nullopt;
    return b.loop->neighbour().lookup(*ip);
  };
  std::uint64_t connect_requests = 0;
  cm::CmAgent agent(*b.eng, cc, [&](const cm::CmEvent& e) {
    connect_requests += e.type == cm::CmEventType::kConnectRequest;
  });
  agent.cm().listen(Flood::kService);

  a.loop->resolve(kIpB);
  std::optional<wire::MacAddr> peer_of_a;
  for (int i = 0; i < 1000 && !peer_of_a; ++i) {
    a.loop->poll_once();
    b.loop->poll_once();
    peer_of_a = a.loop->neighbour().lookup(kIpB);
  }
  ASSERT_EQ(peer_of_a, std::optional(kMacB));
  ASSERT_EQ(b.loop->neighbour().lookup(kIpA), std::optional(kMacA)) << "B learned the asker";
  a.connect(b, kIpB, kMacB);
  b.connect(a, kIpA, kMacA);

  // A WRITEs a new pattern after each completion; B's buffer is checked every time.
  std::uint64_t writes = 0;
  bool in_flight = false;
  auto post_write = [&] {
    for (std::size_t i = 0; i < kSize; ++i)
      a.buf[i] = static_cast<std::uint8_t>(i * 7 + writes * 13 + 1);
    Sge s{reinterpret_cast<std::uint64_t>(a.buf.data()), kSize, a.mr->key};
    SendWr w;
    w.wr_id = writes;
    w.opcode = WrOpcode::kWrite;
    w.sg_list = &s;
    w.num_sge = 1;
    w.send_flags = kSendSignaled;
    w.rdma = {reinterpret_cast<std::uint64_t>(b.buf.data()), b.mr->key};
    ASSERT_EQ(a.eng->post_send(a.qp, &w, nullptr), kOk);
    in_flight = true;
  };
  auto step = [&] {
    a.loop->poll_once();
    b.loop->poll_once();
    agent.poll(port::now_ns());
    Wc wc[4];
    const int n = a.eng->poll_cq(a.cq, 4, wc);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(wc[i].status, WcStatus::kSuccess) << to_string(wc[i].status);
      ASSERT_EQ(b.buf, a.buf) << "WRITE " << writes << " landed wrong";
      ++writes;
      in_flight = false;
    }
  };
  post_write();
  while (writes < 10) {
    step();
    if (!in_flight) post_write();
  }

  Flood flood(42);
  const std::uint64_t rss0 = vm_rss_kib();
  std::uint64_t rss_warm = 0, writes_warm = 0, injected = 0;
  const std::uint64_t t0 = port::now_ns();
  while (injected < kFrames) {
    // As much as the ring takes beside A's frames; then both loops run.
    for (int k = 0; k < 64 && injected < kFrames && rte_ring_free_count(ab) > 512; ++k)
      injected += inject(ab, pool, flood.next());
    step();
    if (HasFatalFailure()) return;
    if (!in_flight) post_write();
    if (rss_warm == 0 && injected >= 100000) {  // caches at their caps, pools warm
      rss_warm = vm_rss_kib();
      writes_warm = writes;
    }
  }
  for (int i = 0; i < 100; ++i) step();
  const double secs = static_cast<double>(port::now_ns() - t0) / 1e9;
  const std::uint64_t rss1 = vm_rss_kib();
  const port::NeighbourStats& nb = b.loop->neighbour().stats();
  const cm::CmStats& cs = agent.cm().stats();
  std::cout << "flood: " << kFrames << " frames in " << secs << " s; RSS " << rss0 << " -> "
            << rss_warm << " (after 100k) -> " << rss1 << " KiB; writes " << writes << " ("
            << writes - writes_warm << " after 100k); ARP " << nb.arp_entries << " entries, ND "
            << nb.nd_entries << ", evicted " << nb.neighbour_evicted << ", unsolicited ARP "
            << nb.arp_unsolicited << " ND " << nb.nd_unsolicited << "; CM held "
            << agent.cm().size() << ", connect requests " << connect_requests << ", rejected full "
            << cs.rejected_full << ", expired " << cs.half_open_expired << "; neighbour caches "
            << b.loop->neighbour().footprint() / 1024 << " KiB\n";
  EXPECT_LE(nb.arp_entries, kCap);
  EXPECT_LE(nb.nd_entries, kCap);
  EXPECT_LE(agent.cm().size(), kCap);
  EXPECT_EQ(nb.arp_unsolicited, kFrames / 5);
  EXPECT_EQ(nb.nd_unsolicited, kFrames / 5);
  EXPECT_GT(nb.neighbour_evicted, kFrames / 5 - kCap);
  // The peer of the transfer stays resolved, and the transfer kept going.
  EXPECT_EQ(b.loop->neighbour().lookup(kIpA), std::optional(kMacA));
  // (Learned entries may be refused once the CM's lookups made enough of them warm; a request
  // of ours still gets room.)
  const std::uint64_t full = nb.neighbour_cache_full;
  std::vector<std::uint8_t> arp_req(64);
  b.loop->neighbour().make_arp_request(wire::Ipv4Addr{0xC0000299}, arp_req);
  EXPECT_EQ(b.loop->neighbour().stats().neighbour_cache_full, full);
  // Every REQ was either held (and expired or still held) or refused with "no resources"; which
  // of the two depends on how fast the frames came (the cap, or the 200 ms deadline).
  EXPECT_EQ(connect_requests + cs.rejected_full, kFrames / 5);
  EXPECT_EQ(connect_requests, cs.half_open_expired + agent.cm().size());
  EXPECT_GT(writes - writes_warm, 10u) << "the transfer kept going";
  // docs/security.md, "State bounds": the whole flood may cost the process at most 32 MiB (its
  // first 100k frames fill the caches and the CM to their caps and touch the pools' pages);
  // the remaining 900k frames, nothing more than noise.
#ifndef __SANITIZE_ADDRESS__  // (ASan's quarantine keeps what is freed: RSS means nothing)
  EXPECT_LT(rss1 - rss0, 32u * 1024) << "KiB";
  EXPECT_LT(static_cast<std::int64_t>(rss1) - static_cast<std::int64_t>(rss_warm), 2 * 1024)
      << "KiB grown after the caches were full";
#endif
}

}  // namespace
}  // namespace roce
