// Coyote's benchmark exchange (apps/perf/coyote_proto.h): the 64 bytes of its ibvQ as an x86-64
// Coyote process writes them, the checks on a peer's, and its output row.
#include "apps/perf/coyote_proto.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace roce::perf::coyote {
namespace {

TEST(CoyoteProto, QueueLayoutAsCoyoteWritesIt) {
  // 10.1.212.173 is 0x0A01D4AD, Coyote's own example of an address and its number.
  const Queue q =
      make_queue(0x0A01D4AD, 0x000401, 0x123456, 0xCAFEBABE, 0x00007F0012345000ull, 0x100000);
  const auto b = encode(q);
  ASSERT_EQ(b.size(), 64u);
  const std::uint8_t head[28] = {0xAD, 0xD4, 0x01, 0x0A, 0x01, 0x04, 0x00, 0x00, 0x56, 0x34,
                                 0x12, 0x00, 0xBE, 0xBA, 0xFE, 0xCA, 0x00, 0x50, 0x34, 0x12,
                                 0x00, 0x7F, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00};
  EXPECT_EQ(std::memcmp(b.data(), head, sizeof head), 0);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(&b[28]), 32),
            "0a01d4ad0a01d4ad0a01d4ad0a01d4ad");
  for (std::size_t i = 60; i < 64; ++i) EXPECT_EQ(b[i], 0) << i;  // NUL and padding
  Queue back;
  std::string err;
  ASSERT_TRUE(decode(b, 0x100000, back, err)) << err;
  EXPECT_EQ(back.ip_addr, q.ip_addr);
  EXPECT_EQ(back.qpn, q.qpn);
  EXPECT_EQ(back.psn, q.psn);
  EXPECT_EQ(back.rkey, q.rkey);
  EXPECT_EQ(back.vaddr, q.vaddr);
  EXPECT_EQ(back.size, q.size);
}

TEST(CoyoteProto, RejectsWhatCoyoteWouldNotSend) {
  const auto good = encode(make_queue(0xC0000201, 7, 1, 0, 0x1000, 4096));
  Queue q;
  std::string err;
  auto bad = good;
  bad[7] = 1;  // QPN over 24 bits
  EXPECT_FALSE(decode(bad, 4096, q, err));
  EXPECT_NE(err.find("24-bit"), std::string::npos);
  bad = good;
  bad[28] = 'z';  // not hex
  EXPECT_FALSE(decode(bad, 4096, q, err));
  bad = good;
  bad[60] = '0';  // no NUL after the 32 digits
  EXPECT_FALSE(decode(bad, 4096, q, err));
  bad = good;
  bad[0] = 0x02;  // the GID no longer repeats the address
  EXPECT_FALSE(decode(bad, 4096, q, err));
  EXPECT_NE(err.find("does not repeat"), std::string::npos);
  EXPECT_FALSE(decode(good, 8192, q, err));  // a buffer too small for -X
  std::array<std::uint8_t, kQueueLen> junk;
  junk.fill('A');
  EXPECT_FALSE(decode(junk, 64, q, err));
  EXPECT_TRUE(decode(good, 4096, q, err)) << err;
}

TEST(CoyoteProto, AcceptsQpnZeroOfACardsFirstThread) {
  // A card numbers its QPs (vfid << 6) | ctid: vFPGA 0's first thread sends QPN 0.
  const auto b = encode(make_queue(0xC0000201, (0 << 6) | 0, 5, 0x10, 0x1000, 4096));
  Queue q;
  std::string err;
  ASSERT_TRUE(decode(b, 4096, q, err)) << err;
  EXPECT_EQ(q.qpn, 0u);
  const auto c = encode(make_queue(0xC0000201, (3 << 6) | 2, 5, 0x10, 0x1000, 4096));
  ASSERT_TRUE(decode(c, 4096, q, err)) << err;
  EXPECT_EQ(q.qpn, 0xC2u);
}

TEST(CoyoteProto, SeedClibFraming) {
  // cLib writes its int32 function id before the queue, little-endian as x86-64 lays it out.
  const auto f = encode_fid(1);
  const std::uint8_t want_fid[4] = {0x01, 0x00, 0x00, 0x00};
  EXPECT_EQ(std::memcmp(f.data(), want_fid, 4), 0);
  std::uint8_t first[kFidLen];
  std::memcpy(first, f.data(), kFidLen);
  EXPECT_TRUE(looks_like_fid(first));
  // A queue's first word is the client's IPv4 address: never taken for a function id.
  const auto q = encode(make_queue(0x0A01D4AD, 1, 1, 1, 0x1000, 64));
  std::memcpy(first, q.data(), kFidLen);
  EXPECT_FALSE(looks_like_fid(first));
  std::memcpy(first, encode(make_queue(0x01000001, 1, 1, 1, 0x1000, 64)).data(), kFidLen);
  EXPECT_FALSE(looks_like_fid(first));  // 1.0.0.1: the lowest address a host can have
  // The close request: 12 bytes, defOpClose (0) first; the rest is cLib's stack garbage.
  const auto c = encode_clib_close();
  ASSERT_EQ(c.size(), 12u);
  EXPECT_TRUE(is_clib_close(c));
  std::array<std::uint8_t, kClibCloseLen> theirs{};
  theirs.fill(0xA5);
  std::memset(theirs.data(), 0, 4);
  EXPECT_TRUE(is_clib_close(theirs));
  theirs[0] = 1;  // defOpTask: not a close
  EXPECT_FALSE(is_clib_close(theirs));
}

TEST(CoyoteProto, RowAsCoyotePrintsIt) {
  EXPECT_EQ(result_row(64, 25.7753, 11.517),
            "Size:       64; Average throughput:  25.7753 MB/s; Average latency:   11.517 us");
  EXPECT_EQ(result_row(1048576, 11234.5678, 2.5),
            "Size:  1048576; Average throughput:  11234.6 MB/s; Average latency:      2.5 us");
  // 64 operations of 1 MiB in one second: 64 MB/s in Coyote's MiB-based unit
  EXPECT_DOUBLE_EQ(throughput_mbps(64, 1u << 20, 1e9), 64.0);
}

}  // namespace
}  // namespace roce::perf::coyote
