#include "controlplane/address.h"

#include <gtest/gtest.h>

namespace roce::ctl {
namespace {

TEST(Address, MacRoundTrip) {
  const auto m = parse_mac("02:00:5e:0A:ff:01");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->b[3], 0x0A);
  EXPECT_EQ(to_string(*m), "02:00:5e:0a:ff:01");
  EXPECT_TRUE(parse_mac("02-00-5e-0a-ff-01"));
  EXPECT_FALSE(parse_mac("02:00:5e:0a:ff"));
  EXPECT_FALSE(parse_mac("02:00:5e:0a:ff:0g"));
  EXPECT_FALSE(parse_mac("02:00:5e:0a:ff:011"));
}

TEST(Address, Ipv4) {
  const auto a = parse_ipv4("192.0.2.17");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->v, 0xC0000211u);
  EXPECT_EQ(to_string(*a), "192.0.2.17");
  EXPECT_FALSE(parse_ipv4("192.0.2"));
  EXPECT_FALSE(parse_ipv4("192.0.2.256"));
  EXPECT_FALSE(parse_ipv4(""));
}

TEST(Address, Ipv6) {
  const auto a = parse_ipv6("2001:db8::1");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->b[0], 0x20);
  EXPECT_EQ(a->b[15], 0x01);
  EXPECT_EQ(to_string(*a), "2001:db8::1");
  EXPECT_FALSE(parse_ipv6("2001:db8:::1"));
}

TEST(Address, GidFromIpv4IsV4Mapped) {
  const wire::Ipv6Addr g = gid_from_ipv4(wire::Ipv4Addr{0xC0000201});
  EXPECT_EQ(to_string(g), "::ffff:192.0.2.1");
  const auto back = ipv4_from_gid(g);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->v, 0xC0000201u);
  EXPECT_FALSE(ipv4_from_gid(*parse_ipv6("2001:db8::1")));
}

}  // namespace
}  // namespace roce::ctl
