// End-point addresses "NID:PID:Portal:TMID" ([r.m0.net.xprt.lnet.end-point-address]).
#include <gtest/gtest.h>
#include <roce/lnet.h>

namespace roce::lnet {

TEST(LnetAddress, ParsesAndFormatsTheFourTuple) {
  const auto ep = EndPoint::parse("192.0.2.14@roce:1:31:5");
  ASSERT_TRUE(ep);
  EXPECT_EQ(ep->ip.v, 0xC000020Eu);
  EXPECT_EQ(ep->net, 0u);
  EXPECT_EQ(ep->pid, 1u);
  EXPECT_EQ(ep->portal, 31u);
  EXPECT_EQ(ep->tmid, 5u);
  EXPECT_EQ(ep->str(), "192.0.2.14@roce:1:31:5");
  EXPECT_EQ(EndPoint::parse("10.0.0.1@roce2:0:0:0")->str(), "10.0.0.1@roce2:0:0:0");
}

TEST(LnetAddress, StarLeavesTheTmidOpen) {  // [r.m0.net.xprt.lnet.dynamic-address-assignment]
  const auto ep = EndPoint::parse("192.0.2.14@roce:0:31:*");
  ASSERT_TRUE(ep);
  EXPECT_FALSE(ep->tmid);
  EXPECT_EQ(ep->str(), "192.0.2.14@roce:0:31:*");
}

TEST(LnetAddress, BadInputGetsAClearError) {
  struct Case {
    const char* in;
    const char* says;
  } cases[] = {
      {"192.0.2.14@roce:0:31", "want 4 fields"},  // "All fields ... must be specified"
      {"192.0.2.14@roce:0:31:1:2", "too many"},
      {"192.0.2.14:0:31:1", "lacks '@roce'"},
      {"192.0.2@roce:0:31:1", "not a.b.c.d"},
      {"192.0.2.256@roce:0:31:1", "not a.b.c.d"},
      {"192.0.2.1.5@roce:0:31:1", "not a.b.c.d"},
      {"192.0.2.14@o2ib0:0:31:1", "not 'roce'"},
      {"192.0.2.14@rocex:0:31:1", "network number"},
      {"192.0.2.14@roce:4:31:1", "PID '4'"},
      {"192.0.2.14@roce:-1:31:1", "PID"},
      {"192.0.2.14@roce:0:64:1", "portal '64'"},
      {"192.0.2.14@roce:0::1", "portal ''"},
      {"192.0.2.14@roce:0:31:64", "TMID '64'"},
      {"192.0.2.14@roce:0:31:+1", "TMID"},
      {"192.0.2.14@roce:0:31: 1", "TMID"},
      {"", "want 4 fields"},
  };
  for (const Case& c : cases) {
    std::string err;
    EXPECT_FALSE(EndPoint::parse(c.in, &err)) << c.in;
    EXPECT_NE(err.find(c.says), std::string::npos) << c.in << " -> " << err;
  }
}

}  // namespace roce::lnet
