// The pingpong tools' address message (apps/common/pingpong_proto.h): the bytes rdma-core's
// ibv_rc_pingpong writes, and what a peer may send instead.
#include "apps/common/pingpong_proto.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace roce::pp {
namespace {

std::array<char, kMsgLen> raw(const std::string& s) {
  std::array<char, kMsgLen> m{};
  std::memcpy(m.data(), s.data(), std::min(s.size(), kMsgLen));
  return m;
}

TEST(PingpongProto, MessageAsRdmaCoreWritesIt) {
  Dest d{0, 0x11, 0xABCDEF, wire::ipv4_mapped(wire::Ipv4Addr{0xC0000201})};
  const auto m = msg(d);
  EXPECT_STREQ(m.data(), "0000:000011:abcdef:00000000000000000000ffffc0000201");
  const auto back = dest_of(m);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, d);
}

TEST(PingpongProto, NoNulNeeded) {
  auto m = raw("0000:000011:abcdef:00000000000000000000ffffc0000201");
  m[kMsgLen - 1] = 'x';  // the 52nd byte, where the NUL belongs
  EXPECT_TRUE(dest_of(m));
}

TEST(PingpongProto, RejectsWhatIsNotAnAddress) {
  // A GID with non-hex digits used to leave bytes of it uninitialized.
  EXPECT_FALSE(dest_of(raw("0000:000011:abcdef:000000000000000000zzffffc0000201")));
  EXPECT_FALSE(dest_of(raw("0000:000011:abcdef:00000000000000000000ffffc00002")));  // 30 digits
  EXPECT_FALSE(
      dest_of(raw("0000:1000000:abcdef:00000000000000000000ffffc0000201")));  // QPN > 24 bits
  EXPECT_FALSE(dest_of(raw("garbage")));
  EXPECT_FALSE(dest_of(raw("")));
}

}  // namespace
}  // namespace roce::pp
