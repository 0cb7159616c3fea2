// C simulation of the HLS-style kernels (fpga/hls/) against the software codec (dataplane/wire):
// the ICRC unit and the header parser see every sample frame (IPv4, IPv6, 802.1Q, every opcode),
// every frame length up to MTU 4096 plus headers, every single-byte corruption and truncation
// of the sample frames' headers, and any rxe capture in $ROCE_FPGA_CAPTURES; they must agree
// with wire::compute_icrc and wire::parse_frame on every one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "apps/common/pcap_reader.h"
#include "apps/common/sample_frames.h"
#include "dataplane/wire/roce_frame.h"
#include "fpga/hls/icrc_kernel.h"
#include "fpga/hls/parser_kernel.h"
#include "fpga/iface/ports.h"
#include "tests/fpga/frame_sweep.h"

namespace roce::fpga {
namespace {

using hls::Stream;

/// Streams `frame` through the parser kernel; returns its meta.
RxMeta run_parser(std::span<const std::uint8_t> frame, hls::ParserConfig cfg = {}) {
  static Stream<Flit, 128> in, out;
  static Stream<RxMeta, 4> meta;
  hls::HeaderParser p(cfg);
  std::array<Flit, 128> flits;
  const std::size_t n = to_flits(frame, flits);
  EXPECT_EQ(n, (frame.size() + kFlitBytes - 1) / kFlitBytes);
  for (std::size_t i = 0; i < n; ++i) EXPECT_TRUE(in.write(flits[i]));
  hls::parse_kernel(p, in, out, meta);
  Flit f;
  std::size_t passed = 0;
  while (out.read(f)) ++passed;
  EXPECT_EQ(passed, n);  // the parser passes every flit on
  RxMeta m;
  EXPECT_TRUE(meta.read(m));
  EXPECT_TRUE(meta.empty());
  return m;
}

hls::IcrcResult run_icrc(std::span<const std::uint8_t> frame, std::vector<std::uint8_t>* insert) {
  std::array<Flit, 128> flits;
  const std::size_t n = to_flits(frame, flits);
  hls::IcrcUnit u;
  hls::IcrcResult r;
  bool done = false;
  for (std::size_t i = 0; i < n; ++i) {
    done = u.step(flits[i], insert != nullptr, r);
    if (insert)
      for (unsigned b = 0; b < kFlitBytes; ++b)
        if ((flits[i].keep >> b) & 1) insert->push_back(flits[i].data[b]);
  }
  EXPECT_TRUE(done);
  return r;
}

/// The kernel's meta against the software parser's RxPkt.
void expect_same(std::span<const std::uint8_t> frame, const char* what) {
  wire::RxPkt pkt;
  const wire::Verdict sw = wire::parse_frame(frame, pkt);
  const RxMeta hw = run_parser(frame);
  ASSERT_EQ(hw.verdict, static_cast<std::uint8_t>(sw))
      << what << ": hw " << wire::to_string(static_cast<wire::Verdict>(hw.verdict)) << ", sw "
      << wire::to_string(sw) << ", " << frame.size() << " bytes";
  if (sw != wire::Verdict::kOk) return;
  EXPECT_EQ(hw.opcode, static_cast<std::uint8_t>(pkt.opcode)) << what;
  EXPECT_EQ(hw.dest_qp, pkt.dest_qp.raw()) << what;
  EXPECT_EQ(hw.psn, pkt.psn.raw()) << what;
  EXPECT_EQ(hw.ack_req, pkt.ack_req) << what;
  EXPECT_EQ(hw.pad, pkt.pad) << what;
  EXPECT_EQ(hw.ipv6, pkt.ip_version == wire::IpVersion::kV6) << what;
  EXPECT_EQ(hw.has_vlan, pkt.has_vlan) << what;
  if (pkt.has_vlan) {
    EXPECT_EQ(hw.vlan_id, pkt.vlan_id & 0x0FFF) << what;
  }
  EXPECT_EQ(hw.ecn, pkt.ecn) << what;
  EXPECT_EQ(hw.l3_off, pkt.l3_off) << what;
  EXPECT_EQ(hw.bth_off, pkt.bth_off) << what;
  EXPECT_EQ(hw.payload_off, pkt.payload_off) << what;
  EXPECT_EQ(hw.payload_len, pkt.payload_len) << what;
  EXPECT_EQ(hw.frame_len, pkt.frame_len) << what;
  EXPECT_EQ(hw.icrc, pkt.icrc) << what;
  if (pkt.info->has(wire::Ext::kReth)) {
    EXPECT_EQ(hw.reth_va, pkt.reth().va()) << what;
    EXPECT_EQ(hw.reth_rkey, pkt.reth().rkey()) << what;
    EXPECT_EQ(hw.reth_len, pkt.reth().dma_len()) << what;
  }
  if (pkt.info->has(wire::Ext::kAeth)) {
    EXPECT_EQ(hw.aeth_syndrome, pkt.aeth().syndrome().raw()) << what;
    EXPECT_EQ(hw.aeth_msn, pkt.aeth().msn().raw()) << what;
  }
  // What the RTL receives is the packed form: it must carry every field.
  const RxMeta back = unpack_rx_meta(pack(hw));
  EXPECT_EQ(back.reth_va, hw.reth_va);
  EXPECT_EQ(back.payload_len, hw.payload_len);
  EXPECT_EQ(back.icrc, hw.icrc);
}

std::vector<apps::SampleFrame> all_samples() {
  std::vector<apps::SampleFrame> all;
  for (const auto ip : {wire::IpVersion::kV4, wire::IpVersion::kV6})
    for (const std::optional<std::uint16_t> vlan :
         {std::optional<std::uint16_t>{}, std::optional<std::uint16_t>{100}})
      for (const std::uint32_t pmtu : {256u, 1024u, 4096u}) {
        apps::SampleOptions o;
        o.ip_version = ip;
        o.vlan_id = vlan;
        o.pmtu = pmtu;
        for (auto& s : apps::make_sample_frames(o)) all.push_back(std::move(s));
      }
  return all;
}

TEST(FpgaPorts, PackedDescriptorsRoundTrip) {
  WorkRequest wr{0x1122334455667788, 0xABCDEF, WqOpcode::kRead, 5,        0xFFFF000012345678,
                 0xCAFEBABE,         0x1000,   0xDEADBEEF,      1u << 20, 7};
  const WorkRequest w2 = unpack_work_request(pack(wr));
  EXPECT_EQ(w2.wr_id, wr.wr_id);
  EXPECT_EQ(w2.qpn, wr.qpn);
  EXPECT_EQ(w2.opcode, wr.opcode);
  EXPECT_EQ(w2.laddr, wr.laddr);
  EXPECT_EQ(w2.rkey, wr.rkey);
  EXPECT_EQ(w2.len, wr.len);
  Completion c{42, 0x123456, 4, 1, 4096, 9};
  const Completion c2 = unpack_completion(pack(c));
  EXPECT_EQ(c2.wr_id, 42u);
  EXPECT_EQ(c2.qpn, 0x123456u);
  EXPECT_EQ(c2.status, 4);
  EXPECT_EQ(c2.byte_len, 4096u);
  // A field wider than its port is cut to its width, as a wire of that width would.
  wr.qpn = 0x1ABCDEF;
  EXPECT_EQ(unpack_work_request(pack(wr)).qpn, 0xABCDEFu);
}

TEST(FpgaIcrcKernel, EverySampleFrame) {
  const auto samples = all_samples();
  ASSERT_GT(samples.size(), 100u);
  for (const auto& s : samples) {
    wire::RxPkt pkt;
    ASSERT_EQ(wire::parse_frame(s.bytes, pkt), wire::Verdict::kOk);
    const hls::IcrcResult r = run_icrc(s.bytes, nullptr);
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.computed, pkt.icrc);
    // Insert mode over a frame whose trailer was zeroed gives the codec's bytes back.
    std::vector<std::uint8_t> zeroed = s.bytes, out;
    std::fill_n(zeroed.begin() + pkt.frame_len - 4, 4, 0);
    run_icrc(zeroed, &out);
    EXPECT_EQ(out, s.bytes);
  }
}

TEST(FpgaIcrcKernel, EveryFrameLengthToMtu4096) {
  std::size_t frames = 0;
  for (const auto& v : test::sweep_variants()) {
    test::for_each_length(v, [&](std::span<const std::uint8_t> f, std::size_t icrc_at) {
      const hls::IcrcResult r = run_icrc(f, nullptr);
      ASSERT_TRUE(r.ok()) << v.name << " " << f.size();
      ASSERT_EQ(r.computed, wire::load_le32(f.data() + icrc_at));
      ++frames;
    });
  }
  EXPECT_GT(frames, 3u * 4096u);
}

TEST(FpgaParserKernel, EverySampleFrameAsSoftware) {
  for (const auto& s : all_samples()) expect_same(s.bytes, "sample");
}

TEST(FpgaParserKernel, EveryLengthAsSoftware) {
  for (const auto& v : test::sweep_variants())
    test::for_each_length(
        v, [&](std::span<const std::uint8_t> f, std::size_t) { expect_same(f, v.name.data()); });
}

TEST(FpgaParserKernel, EveryHeaderByteCorruptedAndEveryTruncationAsSoftware) {
  std::size_t cases = 0;
  for (const auto& s : all_samples()) {
    std::vector<std::uint8_t> f = s.bytes;
    const std::size_t l3 =
        s.spec.ip_version == wire::IpVersion::kV4 ? (s.spec.vlan_id ? 18 : 14) : 0;
    const std::size_t hdr = std::min<std::size_t>(f.size(), 112);
    for (std::size_t i = 0; i < hdr; ++i)
      for (const std::uint8_t x : {0x01, 0x10, 0x20, 0x80, 0xFF}) {
        f[i] ^= x;
        expect_same(f, "corrupted");
        // Inside an IPv4 header, again with a valid checksum: the checks behind it run too.
        if (l3 != 0 && i >= l3 && i < l3 + 20 && i != l3 + 10 && i != l3 + 11) {
          const std::uint8_t c0 = f[l3 + 10], c1 = f[l3 + 11];
          f[l3 + 10] = f[l3 + 11] = 0;
          wire::store_be16(f.data() + l3 + 10, wire::ipv4_header_checksum(f.data() + l3, 20));
          expect_same(f, "corrupted, checksum fixed");
          f[l3 + 10] = c0;
          f[l3 + 11] = c1;
        }
        f[i] ^= x;
        ++cases;
      }
    for (std::size_t n = 1; n < f.size(); n += n < 128 ? 1 : 61) {
      expect_same({f.data(), n}, "truncated");
      ++cases;
    }
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(cases, 100000u);
}

TEST(FpgaParserKernel, CorruptIcrcIsDroppedWithItsReason) {
  apps::SampleOptions o;
  auto samples = apps::make_sample_frames(o);
  std::vector<std::uint8_t> f = samples.front().bytes;
  f[f.size() - 1] ^= 0x40;  // the ICRC's last byte
  EXPECT_EQ(run_parser(f).verdict, static_cast<std::uint8_t>(wire::Verdict::kBadIcrc));
  f[f.size() - 1] ^= 0x40;
  f[f.size() - 10] ^= 0x01;  // a payload byte: the ICRC no longer matches
  EXPECT_EQ(run_parser(f).verdict, static_cast<std::uint8_t>(wire::Verdict::kBadIcrc));
  hls::ParserConfig no_icrc;
  no_icrc.verify_icrc = false;
  EXPECT_EQ(run_parser(f, no_icrc).verdict, 0);
}

// Captures from Linux rxe (a directory of .pcap files, e.g. from the interop cells' capture
// option): every frame must get the same verdict and fields from the kernel and the codec.
TEST(FpgaParserKernel, RxeCaptures) {
  const char* dir = std::getenv("ROCE_FPGA_CAPTURES");
  if (dir == nullptr || !std::filesystem::is_directory(dir))
    GTEST_SKIP() << "no rxe captures (set ROCE_FPGA_CAPTURES to a directory of .pcap files)";
  std::size_t frames = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".pcap") continue;
    for (const auto& rec : apps::read_pcap(e.path().string())) {
      if (rec.data.empty()) continue;
      expect_same(rec.data, e.path().filename().c_str());
      ++frames;
    }
  }
  EXPECT_GT(frames, 0u) << "no frames in " << dir;
}

}  // namespace
}  // namespace roce::fpga
