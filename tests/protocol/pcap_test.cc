// The sample catalogue covers every opcode, every frame in it parses, and a pcap round trip
// keeps the bytes.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "apps/common/pcap_reader.h"
#include "apps/common/pcap_writer.h"
#include "apps/common/sample_frames.h"

namespace roce::apps {
namespace {

TEST(SampleFrames, OneValidFramePerOpcode) {
  for (wire::IpVersion ip : {wire::IpVersion::kV4, wire::IpVersion::kV6}) {
    const auto frames = make_sample_frames({ip, std::uint16_t{9}, 4096});
    ASSERT_EQ(frames.size(), wire::kKnownOpcodeCount);
    std::set<std::uint8_t> seen;
    for (const auto& f : frames) {
      wire::RxPkt p;
      ASSERT_EQ(wire::parse_frame(f.bytes, p), wire::Verdict::kOk);
      EXPECT_TRUE(seen.insert(raw(p.opcode)).second);
      EXPECT_EQ(p.payload_len, f.payload.size());
      EXPECT_EQ(p.vlan_id, 9);
    }
  }
}

TEST(Pcap, WriteThenReadKeepsEveryByte) {
  const auto path = std::filesystem::temp_directory_path() / "roce_pcap_test.pcap";
  const auto frames = make_sample_frames({});
  {
    PcapWriter w(path.string());
    for (std::size_t i = 0; i < frames.size(); ++i) w.write(frames[i].bytes, 1'000'000'123 + i);
    EXPECT_EQ(w.frames(), frames.size());
  }
  const auto recs = read_pcap(path.string());
  ASSERT_EQ(recs.size(), frames.size());
  for (std::size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i].data, frames[i].bytes);
    EXPECT_EQ(recs[i].orig_len, frames[i].bytes.size());
    EXPECT_EQ(recs[i].timestamp_ns, 1'000'000'000 + i / 1000 * 1000) << "microsecond stamps";
  }
  std::filesystem::remove(path);
}

TEST(Pcap, BadFilesGetClearErrors) {
  const auto path = std::filesystem::temp_directory_path() / "roce_not_a_pcap.bin";
  {
    std::ofstream f(path);
    f << "this is not a capture file at all";
  }
  EXPECT_THROW(read_pcap(path.string()), std::runtime_error);
  {
    // A valid header followed by a record that claims more bytes than the file holds.
    PcapWriter w(path.string());
    w.write(make_sample_frames({})[0].bytes, 0);
  }
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 5);
  EXPECT_THROW(read_pcap(path.string()), std::runtime_error);
  EXPECT_THROW(read_pcap("/nonexistent/dir/x.pcap"), std::runtime_error);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace roce::apps
