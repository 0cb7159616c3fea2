// Self-delivery (dataplane/port/self_delivery.h): two QPs of one engine connected through the
// port's own address talk through the poll loop without a frame on the wire, as two QPs of
// one RNIC do through its own GID. The port is a net_ring (--no-huge) whose TX ring the test
// reads: it must stay empty.
#include "dataplane/port/self_delivery.h"

#include <gtest/gtest.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_ring.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "dataplane/engine/engine.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/poll_loop.h"

namespace roce::port {
namespace {

const wire::MacAddr kMac{{0x02, 0, 0, 0, 0x31, 1}};
const wire::Ipv4Addr kIp{0xC000021F};  // 192.0.2.31

// The queue alone: a frame for our MAC is recognised, copied, delivered once in order; a full
// queue refuses and counts.
TEST(SelfDeliveryQueue, TakesOursDeliversInOrderAndBounds) {
  SelfDelivery q(kMac, 2);
  std::vector<std::uint8_t> f(60, 0);
  std::memcpy(f.data(), kMac.b.data(), 6);
  EXPECT_TRUE(q.is_self(f));
  std::vector<std::uint8_t> other = f;
  other[5] ^= 1;
  EXPECT_FALSE(q.is_self(other));
  EXPECT_FALSE(q.is_self(std::span<const std::uint8_t>(f).first(10)));
  f[20] = 1;
  EXPECT_TRUE(q.take(f));
  f[20] = 2;
  EXPECT_TRUE(q.take(f));
  f[20] = 3;
  EXPECT_FALSE(q.take(f));  // full
  EXPECT_EQ(q.stats().dropped, 1u);
  std::vector<int> seen;
  EXPECT_EQ(q.deliver([&](std::span<const std::uint8_t> g) { seen.push_back(g[20]); }), 2u);
  EXPECT_EQ(seen, (std::vector<int>{1, 2}));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.stats().frames, 2u);
  EXPECT_EQ(q.stats().bytes, 120u);
}

class SelfDeliveryLoop : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    eal_init({"--no-huge", "--no-shconf", "-m", "128", "--no-pci",
              "--file-prefix=selfdel" + std::to_string(getpid()), "--log-level=*:error", "-l",
              "0"});
    rx_ = rte_ring_create("sd_rx", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    tx_ = rte_ring_create("sd_tx", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    ASSERT_TRUE(rx_ && tx_);
    const int id = rte_eth_from_rings("sd", &rx_, 1, &tx_, 1, 0);
    char dev[RTE_ETH_NAME_MAX_LEN];
    ASSERT_TRUE(id >= 0 && rte_eth_dev_get_name_by_port(static_cast<std::uint16_t>(id), dev) == 0);
    engine::EngineConfig ec;
    ec.mac = kMac;
    ec.ipv4 = kIp;
    ec.max_qps = 16;
    eng_ = new engine::Engine(ec);
    PortSpec ps;
    ps.device = dev;
    ps.mac = kMac;
    ps.mbufs = 2048;
    port_ = new DpdkPort(ps);
    loop_ = new PollLoop(*port_, *eng_);
  }
  static void TearDownTestSuite() {
    delete loop_;
    delete port_;
    delete eng_;
  }
  static rte_ring *rx_, *tx_;
  static engine::Engine* eng_;
  static DpdkPort* port_;
  static PollLoop* loop_;
};
rte_ring* SelfDeliveryLoop::rx_ = nullptr;
rte_ring* SelfDeliveryLoop::tx_ = nullptr;
engine::Engine* SelfDeliveryLoop::eng_ = nullptr;
DpdkPort* SelfDeliveryLoop::port_ = nullptr;
PollLoop* SelfDeliveryLoop::loop_ = nullptr;

// QP a -> RTR/RTS towards QP b at the port's own GID, with the MAC the neighbour cache gives.
void bring_up(engine::Engine& e, engine::Qp* me, engine::Qp* peer, wire::MacAddr dmac,
              std::uint32_t my_psn, std::uint32_t peer_psn) {
  using namespace engine;
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  a.port_num = 1;
  ASSERT_EQ(e.modify_qp(me, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags), kOk);
  a.qp_state = QpState::kRtr;
  a.path_mtu = Mtu::k1024;
  a.dest_qp_num = peer->qpn;
  a.rq_psn = peer_psn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 1;
  a.ah.dmac = dmac;
  a.ah.dgid = wire::ipv4_mapped(kIp);
  ASSERT_EQ(e.modify_qp(me, a,
                        kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                            kQpMinRnrTimer),
            kOk);
  a.qp_state = QpState::kRts;
  a.sq_psn = my_psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  ASSERT_EQ(
      e.modify_qp(me, a,
                  kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic),
      kOk);
}

// An RC WRITE of 64 KiB then a READ back, between two QPs of the one engine, through the
// port's own address: the data arrives, nothing goes on the wire, no ARP is sent, and the
// engine counts the frames it delivered to itself.
TEST_F(SelfDeliveryLoop, RcWriteAndReadToOwnAddress) {
  using namespace engine;
  const auto mac = loop_->neighbour().lookup(kIp);  // no ARP for our own address
  ASSERT_TRUE(mac.has_value());
  EXPECT_EQ(*mac, kMac);
  EXPECT_EQ(loop_->neighbour().stats().arp_requests_sent, 0u);

  Pd* pd = eng_->alloc_pd();
  Cq* cq = eng_->create_cq(256);
  Qp* a = eng_->create_qp(pd, QpType::kRc, cq, cq, QpCap{});
  Qp* b = eng_->create_qp(pd, QpType::kRc, cq, cq, QpCap{});
  ASSERT_TRUE(pd && cq && a && b);
  bring_up(*eng_, a, b, *mac, 0x1000, 0x2000);
  bring_up(*eng_, b, a, *mac, 0x2000, 0x1000);

  constexpr std::size_t kLen = 64 * 1024;
  std::vector<std::uint8_t> src(kLen), dst(kLen, 0), back(kLen, 0);
  for (std::size_t i = 0; i < kLen; ++i) src[i] = static_cast<std::uint8_t>(i * 7 + 3);
  const std::uint32_t acc = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  Mr* msrc = eng_->reg_mr(pd, src.data(), kLen, acc);
  Mr* mdst = eng_->reg_mr(pd, dst.data(), kLen, acc);
  Mr* mback = eng_->reg_mr(pd, back.data(), kLen, acc);
  ASSERT_TRUE(msrc && mdst && mback);

  const auto tx_before = eng_->stats().get(Counter::kTxSelfDelivered);
  const auto wait_wc = [&](std::uint64_t id) {
    Wc wc{};
    const bool got = poll_until(
        *loop_, [&] { return eng_->poll_cq(cq, 1, &wc) == 1; }, 10);
    EXPECT_TRUE(got) << "no completion for " << id;
    EXPECT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.status, WcStatus::kSuccess);
  };

  Sge s{reinterpret_cast<std::uint64_t>(src.data()), kLen, msrc->key};
  SendWr w;
  w.wr_id = 1;
  w.opcode = WrOpcode::kWrite;
  w.sg_list = &s;
  w.num_sge = 1;
  w.send_flags = kSendSignaled;
  w.rdma.remote_addr = reinterpret_cast<std::uint64_t>(dst.data());
  w.rdma.rkey = mdst->key;
  const SendWr* bad = nullptr;
  ASSERT_EQ(eng_->post_send(a, &w, &bad), kOk);
  wait_wc(1);
  EXPECT_EQ(dst, src);

  // b reads a's destination back into its own buffer.
  Sge r{reinterpret_cast<std::uint64_t>(back.data()), kLen, mback->key};
  SendWr rd = w;
  rd.wr_id = 2;
  rd.opcode = WrOpcode::kRead;
  rd.sg_list = &r;
  rd.rdma.remote_addr = reinterpret_cast<std::uint64_t>(dst.data());
  rd.rdma.rkey = mdst->key;
  ASSERT_EQ(eng_->post_send(b, &rd, &bad), kOk);
  wait_wc(2);
  EXPECT_EQ(back, src);

  // 64 request packets + ACKs, 64 response packets + the READ request: all delivered here.
  EXPECT_GE(eng_->stats().get(Counter::kTxSelfDelivered) - tx_before, 129u);
  EXPECT_EQ(eng_->stats().get(Counter::kTxSelfDropped), 0u);
  EXPECT_EQ(loop_->self_delivery_stats().frames, eng_->stats().get(Counter::kTxSelfDelivered));
  EXPECT_EQ(rte_ring_count(tx_), 0u) << "a frame for our own address reached the wire";
  EXPECT_EQ(loop_->neighbour().stats().arp_requests_sent, 0u);

  eng_->destroy_qp(a);
  eng_->destroy_qp(b);
  eng_->dereg_mr(msrc);
  eng_->dereg_mr(mdst);
  eng_->dereg_mr(mback);
}

}  // namespace
}  // namespace roce::port
