// Verilator testbench of fpga/rtl/header_parser.sv: its rx_meta_t (the dev2host_rx_meta port,
// unpacked with fpga/iface/ports.h's unpack_rx_meta) must equal the HLS kernel's RxMeta, and so
// the software parser's verdict and fields, on every sample frame, every length to MTU 4096
// over IPv4/IPv6/802.1Q, single-byte corruptions of the headers and truncations.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "Vheader_parser.h"
#include "apps/common/sample_frames.h"
#include "dataplane/wire/roce_frame.h"
#include "fpga/hls/parser_kernel.h"
#include "fpga/iface/ports.h"
#include "tests/fpga/frame_sweep.h"
#include "verilated.h"

namespace roce::fpga {
namespace {

class Rtl {
 public:
  Rtl()
      : ctx_(std::make_unique<VerilatedContext>()),
        dut_(std::make_unique<Vheader_parser>(ctx_.get())) {
    dut_->rst_n = 0;
    dut_->s_valid = 0;
    dut_->verify_icrc = 1;
    dut_->verify_ip_checksum = 1;
    tick();
    tick();
    dut_->rst_n = 1;
  }
  ~Rtl() { dut_->final(); }

  RxMeta parse(std::span<const std::uint8_t> frame) {
    std::array<Flit, 160> flits;
    const std::size_t n = to_flits(frame, flits);
    RxMeta out;
    bool got = false;
    for (std::size_t i = 0; i < n; ++i) {
      dut_->s_valid = 1;
      for (unsigned w = 0; w < 16; ++w) {
        std::uint32_t v = 0;
        for (unsigned k = 0; k < 4; ++k) v |= std::uint32_t{flits[i].data[4 * w + k]} << (8 * k);
        dut_->s_data[w] = v;
      }
      dut_->s_keep = flits[i].keep;
      dut_->s_last = flits[i].last;
      dut_->eval();
      EXPECT_TRUE(dut_->s_ready);
      tick();
      EXPECT_FALSE(dut_->meta_valid && i + 1 < n);
    }
    dut_->s_valid = 0;
    if (dut_->meta_valid) {
      Bits b;
      for (unsigned w = 0; w < (total_bits(RxMeta::kFields) + 31) / 32; ++w)
        b.w[w / 2] |= std::uint64_t{dut_->meta[w]} << (32 * (w % 2));
      out = unpack_rx_meta(b);
      got = true;
    }
    EXPECT_TRUE(got) << "no meta after the last flit";
    tick();
    return out;
  }
  std::uint64_t frames() const { return dut_->cnt_frames; }
  std::uint64_t drops() const { return dut_->cnt_drops; }

 private:
  void tick() {
    dut_->clk = 0;
    dut_->eval();
    dut_->clk = 1;
    dut_->eval();
  }
  std::unique_ptr<VerilatedContext> ctx_;
  std::unique_ptr<Vheader_parser> dut_;
};

RxMeta kernel(std::span<const std::uint8_t> frame) {
  hls::HeaderParser p;
  std::array<Flit, 160> flits;
  const std::size_t n = to_flits(frame, flits);
  RxMeta m;
  for (std::size_t i = 0; i < n; ++i) p.step(flits[i], m);
  return m;
}

/// RTL against the kernel: the verdict always, every field when the frame passes.
void expect_same(Rtl& rtl, std::span<const std::uint8_t> f, const char* what) {
  const RxMeta hw = rtl.parse(f);
  const RxMeta c = kernel(f);
  wire::RxPkt pkt;
  ASSERT_EQ(c.verdict, static_cast<std::uint8_t>(wire::parse_frame(f, pkt))) << what;
  ASSERT_EQ(hw.verdict, c.verdict)
      << what << ": rtl " << wire::to_string(static_cast<wire::Verdict>(hw.verdict)) << ", kernel "
      << wire::to_string(static_cast<wire::Verdict>(c.verdict)) << ", " << f.size() << " bytes";
  if (c.verdict != 0) return;
  EXPECT_EQ(pack(hw).w, pack(c).w) << what << ": fields differ";
}

std::vector<std::vector<std::uint8_t>> samples() {
  std::vector<std::vector<std::uint8_t>> v;
  for (const auto ip : {wire::IpVersion::kV4, wire::IpVersion::kV6})
    for (const bool vlan : {false, true})
      for (const std::uint32_t pmtu : {256u, 4096u}) {
        apps::SampleOptions o;
        o.ip_version = ip;
        if (vlan) o.vlan_id = 0x123;
        o.pmtu = pmtu;
        for (auto& s : apps::make_sample_frames(o)) v.push_back(std::move(s.bytes));
      }
  return v;
}

TEST(FpgaParserRtl, EverySampleFrame) {
  Rtl rtl;
  const auto frames = samples();
  for (const auto& f : frames) expect_same(rtl, f, "sample");
  EXPECT_EQ(rtl.frames(), frames.size());
  EXPECT_EQ(rtl.drops(), 0u);
}

TEST(FpgaParserRtl, EveryLengthToMtu4096) {
  Rtl rtl;
  for (const auto& v : test::sweep_variants())
    test::for_each_length(v, [&](std::span<const std::uint8_t> f, std::size_t) {
      expect_same(rtl, f, v.name.data());
    });
  EXPECT_EQ(rtl.drops(), 0u);
}

TEST(FpgaParserRtl, CorruptionsAndTruncations) {
  Rtl rtl;
  std::size_t cases = 0;
  for (auto f : samples()) {
    if (f.size() > 600) continue;  // headers are what matters; keeps the simulation short
    for (std::size_t i = 0; i < std::min<std::size_t>(f.size(), 112); ++i)
      for (const std::uint8_t x : {0x01, 0x20, 0xFF}) {
        f[i] ^= x;
        expect_same(rtl, f, "corrupted");
        // Inside an IPv4 header, again with a valid checksum: the checks behind it run too.
        const std::size_t l3 = f[12] == 0x81 ? 18 : 14;
        if (f[l3 - 2] == 0x08 && f[l3 - 1] == 0x00 && i >= l3 && i < l3 + 20 && i != l3 + 10 &&
            i != l3 + 11) {
          const std::uint8_t c0 = f[l3 + 10], c1 = f[l3 + 11];
          f[l3 + 10] = f[l3 + 11] = 0;
          wire::store_be16(f.data() + l3 + 10, wire::ipv4_header_checksum(f.data() + l3, 20));
          expect_same(rtl, f, "corrupted, checksum fixed");
          f[l3 + 10] = c0;
          f[l3 + 11] = c1;
        }
        f[i] ^= x;
        ++cases;
      }
    for (std::size_t n = 1; n < f.size(); n += 7) {
      expect_same(rtl, {f.data(), n}, "truncated");
      ++cases;
    }
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(cases, 10000u);
  EXPECT_GT(rtl.drops(), 0u);
}

}  // namespace
}  // namespace roce::fpga
