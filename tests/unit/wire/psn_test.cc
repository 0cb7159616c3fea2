#include "dataplane/wire/psn.h"

#include <gtest/gtest.h>

namespace roce::wire {
namespace {

TEST(Psn, MasksTo24Bits) {
  EXPECT_EQ(Psn(0x1234'5678).raw(), 0x34'5678u);
  EXPECT_EQ(Qpn(0xFF00'0011).raw(), 0x11u);
  EXPECT_EQ(Msn(0x0100'0000).raw(), 0u);
}

TEST(Psn, AdditionWrapsAround) {
  EXPECT_EQ(Psn(0xFF'FFFF) + 1, Psn(0));
  EXPECT_EQ(Psn(0xFF'FFF0) + 0x20, Psn(0x10));
  EXPECT_EQ(Psn(0) - 1, Psn(0xFF'FFFF));
  Psn p(0xFF'FFFF);
  ++p;
  EXPECT_EQ(p, Psn(0));
  p += 5;
  EXPECT_EQ(p, Psn(5));
}

TEST(Psn, DistanceIsSignedOnTheCircle) {
  EXPECT_EQ(distance(Psn(5), Psn(3)), 2);
  EXPECT_EQ(distance(Psn(3), Psn(5)), -2);
  EXPECT_EQ(distance(Psn(2), Psn(0xFF'FFFE)), 4);
  EXPECT_EQ(distance(Psn(0xFF'FFFE), Psn(2)), -4);
  EXPECT_EQ(distance(Psn(0x7F'FFFF), Psn(0)), 0x7F'FFFF);   // largest "after"
  EXPECT_EQ(distance(Psn(0x80'0000), Psn(0)), -0x80'0000);  // half way round is "before"
}

TEST(Psn, BeforeAndAfterAcrossTheWrap) {
  // Walk a window of 1000 PSNs across 2^24 and check ordering against a 64-bit counter.
  for (std::uint64_t base = 0xFF'FE00; base < 0x100'0200; base += 37) {
    for (std::uint64_t d = 1; d < 1000; d += 13) {
      const Psn a(static_cast<std::uint32_t>(base));
      const Psn b(static_cast<std::uint32_t>(base + d));
      ASSERT_TRUE(before(a, b)) << base << "+" << d;
      ASSERT_TRUE(after(b, a));
      ASSERT_FALSE(before(b, a));
      ASSERT_EQ(distance(b, a), static_cast<std::int32_t>(d));
    }
  }
  EXPECT_FALSE(before(Psn(7), Psn(7)));
  EXPECT_FALSE(after(Psn(7), Psn(7)));
}

TEST(Msn, DistanceWraps) { EXPECT_EQ(distance(Msn(1), Msn(0xFF'FFFF)), 2); }

}  // namespace
}  // namespace roce::wire
