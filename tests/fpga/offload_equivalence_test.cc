// The software dataplane with and without the FPGA offload (fpga/model in the frames' path, as
// the poll loop puts it between engine and port): the same seed and the same work must give
// bit-identical frames on the wire and the same completions and memory, whatever is offloaded;
// a frame with a corrupt ICRC is dropped and counted by the device, and recovered from as the
// software path recovers.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "fpga/model/device.h"
#include "tests/support/loopback.h"

namespace roce::fpga {
namespace {

using namespace roce::engine;

struct Outcome {
  std::vector<std::vector<std::uint8_t>> frames;  ///< every frame on the wire, both directions
  std::vector<std::tuple<int, std::uint64_t, int, int, std::uint32_t>> wcs;
  std::vector<std::uint8_t> mem_a, mem_b;
  std::array<std::uint64_t, kDevCounters> dev_b{};
  std::uint64_t engine_b_bad_icrc = 0;
};

constexpr std::uint64_t kIovaA = 0x10000000, kIovaB = 0x20000000;
constexpr std::size_t kBuf = 1 << 18;

/// A fixed workload on one RC connection; `corrupt_nth`: flips a payload bit of that frame
/// from A to B on the wire (0: none).
Outcome run(OffloadMode mode, Mtu mtu, std::size_t corrupt_nth = 0) {
  test::Loopback lb;
  test::RcOptions o;
  o.mtu = mtu;
  auto [a, b] = test::connect(lb, o);
  std::vector<std::uint8_t> ma(kBuf), mb(kBuf);
  test::fill_pattern(ma, 1);
  test::fill_pattern(mb, 2);
  const std::uint32_t acc =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  Mr* mra = lb.a().reg_mr(a.pd, ma.data(), kBuf, kIovaA, acc);
  Mr* mrb = lb.b().reg_mr(b.pd, mb.data(), kBuf, kIovaB, acc);
  EXPECT_NE(mra, nullptr);
  EXPECT_NE(mrb, nullptr);

  std::unique_ptr<DeviceModel> dev[2];
  if (mode != OffloadMode::kNone)
    for (auto& d : dev) d = std::make_unique<DeviceModel>(device_config(mode, 250, 64, 100));

  // Receives for the SENDs.
  for (std::uint64_t i = 0; i < 4; ++i) {
    Sge s{kIovaB + 0x30000 + i * 0x1000, 0x1000, mrb->key};
    RecvWr r;
    r.wr_id = 100 + i;
    r.sg_list = &s;
    r.num_sge = 1;
    EXPECT_EQ(lb.b().post_recv(b.qp, &r, nullptr), kOk);
  }
  struct Op {
    WrOpcode op;
    std::uint32_t len;
  };
  const Op ops[] = {
      {WrOpcode::kWrite, 1},     {WrOpcode::kWrite, 1000},    {WrOpcode::kWrite, 4096},
      {WrOpcode::kWrite, 65536}, {WrOpcode::kRead, 4096},     {WrOpcode::kRead, 100000},
      {WrOpcode::kSend, 300},    {WrOpcode::kWriteImm, 5000}, {WrOpcode::kSendImm, 4096},
      {WrOpcode::kFetchAdd, 8},  {WrOpcode::kCmpSwap, 8},     {WrOpcode::kWrite, 0}};
  std::uint64_t off = 0;
  std::vector<Sge> sges(std::size(ops));
  std::vector<SendWr> wrs(std::size(ops));
  for (std::size_t i = 0; i < std::size(ops); ++i) {
    const bool atomic = ops[i].op == WrOpcode::kFetchAdd || ops[i].op == WrOpcode::kCmpSwap;
    sges[i] = {kIovaA + off, ops[i].len, mra->key};
    SendWr& w = wrs[i];
    w.wr_id = i + 1;
    w.sg_list = &sges[i];
    w.num_sge = 1;
    w.opcode = ops[i].op;
    w.send_flags = kSendSignaled;
    w.imm_data = 0xC0DE0000u + static_cast<std::uint32_t>(i);
    w.rdma.remote_addr = kIovaB + off;
    w.rdma.rkey = mrb->key;
    w.atomic.remote_addr = kIovaB + 0x3F000 + i * 8;
    w.atomic.rkey = mrb->key;
    w.atomic.compare_add = atomic ? 5 : 0;
    w.atomic.swap = 0x1234;
    off += (ops[i].len + 63) & ~std::uint64_t{63};
  }
  for (auto& w : wrs) EXPECT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);

  Outcome out;
  Engine* eng[2] = {&lb.a(), &lb.b()};
  std::size_t a2b = 0;
  std::uint64_t t = 2'000'000;
  std::size_t idle = 0;
  while (idle < 20000 && t < 2'000'000'000) {
    t += 1000;
    bool moved = false;
    for (int side = 0; side < 2; ++side) {
      for (auto& f : test::drain(*eng[side], t)) {
        moved = true;
        std::span<const std::uint8_t> g = f;
        if (dev[side]) g = dev[side]->tx(g);  // host2dev_tx -> dev2net_tx
        std::vector<std::uint8_t> w(g.begin(), g.end());
        out.frames.push_back(w);
        if (side == 0 && ++a2b == corrupt_nth) w[w.size() - 9] ^= 0x04;
        if (dev[1 - side] && !dev[1 - side]->rx(w)) continue;  // net2dev_rx -> dev2host_rx
        eng[1 - side]->receive(w, t);
      }
    }
    Wc wc[16];
    for (Cq* cq : {a.scq, b.rcq}) {
      const int n = cq->poll(16, wc);
      for (int i = 0; i < n; ++i)
        out.wcs.emplace_back(cq == a.scq ? 0 : 1, wc[i].wr_id, static_cast<int>(wc[i].status),
                             static_cast<int>(wc[i].opcode), wc[i].byte_len);
      moved |= n > 0;
    }
    idle = moved ? 0 : idle + 1;
  }
  out.mem_a = ma;
  out.mem_b = mb;
  if (dev[1]) out.dev_b = dev[1]->counters();
  out.engine_b_bad_icrc =
      lb.b().stats().verdicts[static_cast<std::size_t>(wire::Verdict::kBadIcrc)];
  return out;
}

void expect_identical(const Outcome& sw, const Outcome& hw, const char* what) {
  ASSERT_EQ(hw.frames.size(), sw.frames.size()) << what;
  for (std::size_t i = 0; i < sw.frames.size(); ++i)
    ASSERT_EQ(hw.frames[i], sw.frames[i]) << what << ": frame " << i << " differs";
  EXPECT_EQ(hw.wcs, sw.wcs) << what;
  EXPECT_EQ(hw.mem_a, sw.mem_a) << what;
  EXPECT_EQ(hw.mem_b, sw.mem_b) << what;
}

class OffloadEquivalence : public ::testing::TestWithParam<std::tuple<OffloadMode, Mtu>> {};

TEST_P(OffloadEquivalence, SameFramesCompletionsAndMemory) {
  const auto [mode, mtu] = GetParam();
  const Outcome sw = run(OffloadMode::kNone, mtu);
  const Outcome hw = run(mode, mtu);
  // 12 work requests, each completed on A, and 3 receives on B (SEND, WRITE_IMM, SEND_IMM).
  ASSERT_EQ(sw.wcs.size(), 15u);
  for (const auto& w : sw.wcs) EXPECT_EQ(std::get<2>(w), static_cast<int>(WcStatus::kSuccess));
  expect_identical(sw, hw, std::string(to_string(mode)).c_str());
  // The device saw the traffic: every RoCE frame to B passed its checks, and it wrote every
  // ICRC without differing from the software's.
  EXPECT_GT(hw.dev_b[static_cast<std::size_t>(DevCounter::kRoceRxPkgs)], 20u);
  EXPECT_EQ(hw.dev_b[static_cast<std::size_t>(DevCounter::kIbvRxPkgs)],
            hw.dev_b[static_cast<std::size_t>(DevCounter::kRoceRxPkgs)]);
  EXPECT_EQ(hw.dev_b[static_cast<std::size_t>(DevCounter::kTxIcrcGen)],
            hw.dev_b[static_cast<std::size_t>(DevCounter::kRoceTxPkgs)]);
  EXPECT_EQ(hw.dev_b[static_cast<std::size_t>(DevCounter::kTxIcrcDiffer)], 0u);
}

INSTANTIATE_TEST_SUITE_P(Modes, OffloadEquivalence,
                         ::testing::Combine(::testing::Values(OffloadMode::kIcrc,
                                                              OffloadMode::kParse),
                                            ::testing::Values(Mtu::k1024, Mtu::k4096)));

TEST(OffloadEquivalenceCorrupt, DeviceDropsAndCountsACorruptIcrcAndRecoveryIsTheSame) {
  for (const OffloadMode mode : {OffloadMode::kIcrc, OffloadMode::kParse}) {
    const Outcome sw = run(OffloadMode::kNone, Mtu::k1024, 7);
    const Outcome hw = run(mode, Mtu::k1024, 7);
    EXPECT_EQ(sw.engine_b_bad_icrc, 1u);  // the software path drops it in the engine
    EXPECT_EQ(hw.engine_b_bad_icrc, 0u);  // the device never passed it on
    EXPECT_EQ(hw.dev_b[static_cast<std::size_t>(DevCounter::kRxIcrcDrop)], 1u);
    ASSERT_EQ(sw.wcs.size(), 15u);
    expect_identical(sw, hw, "corrupt");
  }
}

TEST(DeviceModel, ReportsCoyoteStatisticsAndPredicts100G) {
  DeviceModel d(device_config(OffloadMode::kIcrc, 250, 64, 100));
  const std::string s = format_nstats(d.counters(), "QSFP0");
  EXPECT_NE(s.find(" -- NET STATS QSFP0"), std::string::npos);
  EXPECT_NE(s.find("ROCE RX pkgs: 0"), std::string::npos);
  EXPECT_NE(s.find("PSN drop cnt: 0"), std::string::npos);
  // 250 MHz x 64 B is 128 Gb/s of datapath: large WRITEs run at the line rate, minus headers.
  const Prediction big = d.predict(1 << 20, 4096, false);
  EXPECT_NEAR(big.pipeline_gbps, 128, 0.01);
  EXPECT_GT(big.gbps, 95);
  EXPECT_LT(big.gbps, 100);
  const Prediction small = d.predict(64, 4096, false);
  EXPECT_LT(small.gbps, big.gbps);
  EXPECT_GT(small.latency_us, 1.0);  // two DMAs of 0.9 us dominate
  EXPECT_GT(d.predict(64, 4096, true).latency_us, small.latency_us);
  // A slower datapath (100 MHz x 32 B = 25.6 Gb/s) limits the rate, not the link.
  DeviceModel slow(device_config(OffloadMode::kIcrc, 100, 32, 100));
  EXPECT_LT(slow.predict(1 << 20, 4096, false).gbps, 25.6);
}

TEST(DeviceModel, CountsClocksAndLatencyPerStage) {
  DeviceModel d(device_config(OffloadMode::kParse, 250, 64, 100));
  ASSERT_EQ(d.rx_stages().size(), 2u);  // CMAC, parser + ICRC check
  ASSERT_EQ(d.tx_stages().size(), 2u);  // ICRC insert, CMAC
  std::vector<std::uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  EXPECT_TRUE(d.rx(arp));                   // not RoCE: passed on, counted as ARP
  EXPECT_EQ(d.tx(arp).data(), arp.data());  // passed through untouched
  std::vector<std::uint8_t> big(129, 0);    // 3 flits
  EXPECT_TRUE(d.rx(big));
  EXPECT_EQ(d.counter(DevCounter::kRxPkgs), 2u);
  EXPECT_EQ(d.counter(DevCounter::kArpRxPkgs), 1u);
  EXPECT_EQ(d.counter(DevCounter::kArpTxPkgs), 1u);
  EXPECT_EQ(d.counter(DevCounter::kRoceRxPkgs), 0u);
  EXPECT_EQ(d.timing().rx_frames, 2u);
  EXPECT_EQ(d.timing().rx_busy_cycles, 1u + 3u);
  EXPECT_EQ(d.timing().rx_latency_cycles_max, 40u + 4u + 3u);
  EXPECT_EQ(d.timing().tx_latency_cycles_max, 2u + 40u + 1u);
}

}  // namespace
}  // namespace roce::fpga
