// Verilator testbench of fpga/rtl/icrc_unit.sv: the vectors of the software codec's tests
// (every sample frame over IPv4, IPv6 and 802.1Q; every frame length from 60 bytes to an MTU
// 4096 packet plus headers) go through the RTL clock by clock, with the output side stalling
// on a seeded pattern. Check mode: every computed ICRC must equal wire::compute_icrc, every
// frame must pass, and a corrupted ICRC must be flagged and counted. Insert mode: over a zeroed
// trailer, the RTL must give back the codec's frame byte for byte.
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <vector>

#include "Vicrc_unit.h"
#include "apps/common/sample_frames.h"
#include "dataplane/wire/roce_frame.h"
#include "fpga/iface/ports.h"
#include "tests/fpga/frame_sweep.h"
#include "verilated.h"

namespace roce::fpga {
namespace {

struct Result {
  bool ok;
  std::uint32_t computed, received;
  std::vector<std::uint8_t> bytes;  ///< the frame as it left m_*
};

class Rtl {
 public:
  Rtl()
      : ctx_(std::make_unique<VerilatedContext>()), dut_(std::make_unique<Vicrc_unit>(ctx_.get())) {
    dut_->rst_n = 0;
    dut_->s_valid = 0;
    dut_->m_ready = 1;
    dut_->insert = 0;
    tick();
    tick();
    dut_->rst_n = 1;
  }
  ~Rtl() { dut_->final(); }

  /// Streams `frames` back to back; returns one result per frame.
  std::vector<Result> run(const std::vector<std::vector<std::uint8_t>>& frames, bool insert) {
    dut_->insert = insert;
    std::deque<Flit> in;
    std::array<Flit, 128> buf;
    for (const auto& f : frames) {
      const std::size_t n = to_flits(f, buf);
      in.insert(in.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    }
    std::vector<Result> out;
    Result cur{};
    std::uint64_t guard = 0;
    while ((!in.empty() || out.size() < frames.size()) && ++guard < 10'000'000) {
      // Inputs for this clock.
      dut_->s_valid = !in.empty();
      if (!in.empty()) drive(in.front());
      lcg_ = lcg_ * 6364136223846793005ull + 1442695040888963407ull;
      dut_->m_ready = (lcg_ >> 60) != 0;  // stalls about one clock in 16
      dut_->eval();
      const bool took = dut_->s_valid && dut_->s_ready;
      const bool gave = dut_->m_valid && dut_->m_ready;
      if (gave) {
        for (unsigned i = 0; i < kFlitBytes; ++i)
          if ((dut_->m_keep >> i) & 1) cur.bytes.push_back(data_byte(i));
        if (dut_->m_last) {
          EXPECT_TRUE(dut_->res_valid);
          cur.ok = dut_->res_ok;
          cur.computed = dut_->res_computed;
          cur.received = dut_->res_received;
          out.push_back(std::move(cur));
          cur = Result{};
        }
      }
      tick();
      if (took) in.pop_front();
    }
    EXPECT_LT(guard, 10'000'000u) << "the RTL stopped moving";
    return out;
  }
  std::uint64_t frames() const { return dut_->cnt_frames; }
  std::uint64_t drops() const { return dut_->cnt_icrc_drop; }
  std::uint64_t gens() const { return dut_->cnt_icrc_gen; }
  std::uint64_t cycles() const { return cycles_; }

 private:
  void tick() {
    dut_->clk = 0;
    dut_->eval();
    dut_->clk = 1;
    dut_->eval();
    ++cycles_;
  }
  void drive(const Flit& f) {
    for (unsigned w = 0; w < 16; ++w) {
      std::uint32_t v = 0;
      for (unsigned b = 0; b < 4; ++b) v |= std::uint32_t{f.data[4 * w + b]} << (8 * b);
      dut_->s_data[w] = v;
    }
    dut_->s_keep = f.keep;
    dut_->s_last = f.last;
  }
  std::uint8_t data_byte(unsigned i) const {
    return static_cast<std::uint8_t>(dut_->m_data[i / 4] >> (8 * (i % 4)));
  }
  std::unique_ptr<VerilatedContext> ctx_;
  std::unique_ptr<Vicrc_unit> dut_;
  std::uint64_t lcg_ = 0x5EED;
  std::uint64_t cycles_ = 0;
};

std::vector<std::vector<std::uint8_t>> sample_vectors() {
  std::vector<std::vector<std::uint8_t>> v;
  for (const auto ip : {wire::IpVersion::kV4, wire::IpVersion::kV6})
    for (const bool vlan : {false, true})
      for (const std::uint32_t pmtu : {256u, 4096u}) {
        apps::SampleOptions o;
        o.ip_version = ip;
        if (vlan) o.vlan_id = 7;
        o.pmtu = pmtu;
        for (auto& s : apps::make_sample_frames(o)) v.push_back(std::move(s.bytes));
      }
  return v;
}

std::uint32_t software_icrc(const std::vector<std::uint8_t>& f) {
  wire::RxPkt pkt;
  EXPECT_EQ(wire::parse_frame(f, pkt), wire::Verdict::kOk);
  return pkt.icrc;
}

TEST(FpgaIcrcRtl, SampleFramesChecked) {
  Rtl rtl;
  const auto frames = sample_vectors();
  const auto res = rtl.run(frames, false);
  ASSERT_EQ(res.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    EXPECT_TRUE(res[i].ok) << i;
    EXPECT_EQ(res[i].computed, software_icrc(frames[i])) << i;
    EXPECT_EQ(res[i].bytes, frames[i]) << i;  // check mode passes frames on unchanged
  }
  EXPECT_EQ(rtl.frames(), frames.size());
  EXPECT_EQ(rtl.drops(), 0u);
}

TEST(FpgaIcrcRtl, EveryFrameLengthToMtu4096) {
  Rtl rtl;
  std::size_t total = 0;
  for (const auto& v : test::sweep_variants()) {
    std::vector<std::vector<std::uint8_t>> frames;
    std::vector<std::uint32_t> want;
    test::for_each_length(v, [&](std::span<const std::uint8_t> f, std::size_t at) {
      frames.emplace_back(f.begin(), f.end());
      want.push_back(wire::load_le32(f.data() + at));
    });
    const auto res = rtl.run(frames, false);
    ASSERT_EQ(res.size(), frames.size()) << v.name;
    for (std::size_t i = 0; i < frames.size(); ++i) {
      ASSERT_TRUE(res[i].ok) << v.name << " frame of " << frames[i].size() << " bytes";
      ASSERT_EQ(res[i].computed, want[i]) << v.name << " frame of " << frames[i].size();
    }
    total += frames.size();
  }
  EXPECT_EQ(rtl.frames(), total);
  EXPECT_EQ(rtl.drops(), 0u);
  std::printf("icrc_unit: %zu frames in %llu clocks\n", total,
              static_cast<unsigned long long>(rtl.cycles()));
}

TEST(FpgaIcrcRtl, CorruptIcrcIsFlaggedAndCounted) {
  Rtl rtl;
  auto frames = sample_vectors();
  std::size_t corrupted = 0;
  for (std::size_t i = 0; i < frames.size(); i += 3) {
    wire::RxPkt pkt;
    ASSERT_EQ(wire::parse_frame(frames[i], pkt), wire::Verdict::kOk);
    frames[i][pkt.frame_len - 1 - i % 4] ^= static_cast<std::uint8_t>(1u << (i % 8));
    ++corrupted;
  }
  const auto res = rtl.run(frames, false);
  ASSERT_EQ(res.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(res[i].ok, i % 3 != 0) << i;
  EXPECT_EQ(rtl.drops(), corrupted);
}

TEST(FpgaIcrcRtl, InsertModeWritesTheCodecsIcrc) {
  Rtl rtl;
  const auto frames = sample_vectors();
  auto zeroed = frames;
  for (auto& f : zeroed) {
    wire::RxPkt pkt;
    ASSERT_EQ(wire::parse_frame(f, pkt), wire::Verdict::kOk);
    std::fill_n(f.begin() + pkt.frame_len - 4, 4, 0);
  }
  const auto res = rtl.run(zeroed, true);
  ASSERT_EQ(res.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(res[i].bytes, frames[i]) << i;
  EXPECT_EQ(rtl.gens(), frames.size());
}

}  // namespace
}  // namespace roce::fpga
