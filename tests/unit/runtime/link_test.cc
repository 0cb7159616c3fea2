// runtime::LinkOptions (runtime/link.h): the text form, the flags, and what a port, an EAL and an
// engine make of a link. Pure: nothing here starts DPDK.
#include "runtime/link.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/env.h"

namespace roce::runtime {
namespace {

namespace po = boost::program_options;

TEST(LinkText, MemifServerByDefault) {
  LinkOptions l = LinkOptions::text_defaults();
  std::string err;
  ASSERT_TRUE(parse_link_text("socket=/tmp/x.sock", l, err)) << err;
  EXPECT_EQ(l.pmd, "memif-server");
  EXPECT_EQ(l.iface, "/tmp/x.sock");
  EXPECT_EQ(l.ip, "192.0.2.1");
  EXPECT_EQ(l.mac, "02:00:00:00:00:01");
  EXPECT_EQ(l.tx_faults.seed, 1u);
  EXPECT_EQ(l.rx_faults.seed, 2u);
  EXPECT_FALSE(l.tx_faults.any());
}

TEST(LinkText, EveryKey) {
  LinkOptions l = LinkOptions::text_defaults();
  std::string err;
  ASSERT_TRUE(parse_link_text(
      "role=client,pmd=memif,socket=/s,ip=192.0.2.9,mac=02:00:00:00:00:09,pcap=/p.pcap,"
      "tx_drop=0.1,rx_drop=0.2,reorder=0.3,seed=7,window=65536,lcore=3",
      l, err))
      << err;
  EXPECT_EQ(l.pmd, "memif");  // the client end
  EXPECT_EQ(l.iface, "/s");
  EXPECT_EQ(l.ip, "192.0.2.9");
  EXPECT_EQ(l.pcap, "/p.pcap");
  EXPECT_DOUBLE_EQ(l.tx_faults.drop_rate, 0.1);
  EXPECT_DOUBLE_EQ(l.rx_faults.drop_rate, 0.2);
  EXPECT_DOUBLE_EQ(l.tx_faults.reorder_rate, 0.3);
  EXPECT_EQ(l.tx_faults.reorder_window, 4u);
  EXPECT_EQ(l.tx_faults.seed, 7u);
  EXPECT_EQ(l.rx_faults.seed, 8u);
  EXPECT_EQ(l.window_bytes, 65536u);
  EXPECT_EQ(l.lcore, 3);
}

TEST(LinkText, KeysNotGivenKeepTheirValue) {
  LinkOptions l = LinkOptions::text_defaults();
  l.pmd = "memif";  // a client, as the NAA host library starts
  l.ip = "192.0.2.2";
  std::string err;
  ASSERT_TRUE(parse_link_text("socket=/s", l, err)) << err;
  EXPECT_EQ(l.pmd, "memif");
  EXPECT_EQ(l.ip, "192.0.2.2");
  // A parsed link parses again to itself (roce-naa checks its flags so).
  const LinkOptions before = l;
  ASSERT_TRUE(parse_link_text("", l, err)) << err;
  EXPECT_EQ(l.pmd, before.pmd);
  EXPECT_EQ(l.iface, before.iface);
}

TEST(LinkText, AfPacket) {
  LinkOptions l = LinkOptions::text_defaults();
  std::string err;
  ASSERT_TRUE(parse_link_text("pmd=af_packet,iface=veth0", l, err)) << err;
  EXPECT_EQ(l.pmd, "af_packet");
  EXPECT_EQ(l.iface, "veth0");
}

TEST(LinkText, Refusals) {
  const auto refused = [](const std::string& text) {
    LinkOptions l = LinkOptions::text_defaults();
    std::string err;
    const bool ok = parse_link_text(text, l, err);
    return !ok && !err.empty();
  };
  EXPECT_TRUE(refused(""));  // memif without a socket
  EXPECT_TRUE(refused("socket=/s,role=both"));
  EXPECT_TRUE(refused("pmd=af_packet"));
  EXPECT_TRUE(refused("pmd=tap,iface=t0"));
  EXPECT_TRUE(refused("socket=/s,bogus=1"));
  EXPECT_TRUE(refused("socket=/s,novalue"));
  EXPECT_TRUE(refused("socket=/s,seed=x"));
  EXPECT_TRUE(refused("socket=/s,ip=300.1.1.1"));
  EXPECT_TRUE(refused("socket=/s,tx_drop=1"));
  // A gateway must be another address of our subnet (text defaults: 192.0.2.1).
  EXPECT_TRUE(refused("socket=/s,gateway=198.18.0.1"));
  EXPECT_TRUE(refused("socket=/s,gateway=192.0.2.1"));
  EXPECT_TRUE(refused("socket=/s,gateway=192.0.2.x"));
  EXPECT_TRUE(refused("socket=/s,gateway=192.0.2.254,prefix_len=33"));
  EXPECT_TRUE(refused("socket=/s,gateway=192.0.3.254,prefix_len=24"));
}

TEST(LinkText, Gateway) {
  LinkOptions l = LinkOptions::text_defaults();
  std::string err;
  ASSERT_TRUE(parse_link_text("socket=/s,gateway=192.0.3.254,prefix_len=22", l, err)) << err;
  EXPECT_EQ(l.gateway, "192.0.3.254");
  EXPECT_EQ(l.prefix_len, 22u);
}

TEST(Link, PortAndVdevPerPmd) {
  LinkOptions l;
  l.iface = "veth0";
  EXPECT_EQ(link_port_spec(l).device, "net_af_packet0");
  EXPECT_NE(link_vdev(l).find("net_af_packet0,iface=veth0"), std::string::npos);
  l.pmd = "af_xdp";
  EXPECT_EQ(link_port_spec(l).device, "net_af_xdp0");
  EXPECT_EQ(link_port_spec(l).mbufs, 2048u);
  l.pmd = "tap";
  EXPECT_FALSE(link_port_spec(l).set_mac);
  ASSERT_TRUE(l.set_memif("/m.sock", "client"));
  EXPECT_EQ(link_port_spec(l).device, "net_memif0");
  EXPECT_EQ(link_port_spec(l).mbufs, 8192u);
  EXPECT_NE(link_vdev(l).find("role=client"), std::string::npos);
  EXPECT_NE(link_vdev(l).find("socket=/m.sock"), std::string::npos);
  EXPECT_FALSE(l.set_memif("/m.sock", "peer"));
  l.pmd = "bogus";
  EXPECT_THROW(link_vdev(l), TestFailure);
  l.pmd = "af_packet";
  l.netdev_mtu = 100;
  EXPECT_THROW(link_vdev(l), TestFailure);
}

TEST(Link, EalArgsAndEngine) {
  LinkOptions l;
  l.iface = "veth0";
  l.lcore = 2;
  l.vlan = 7;
  l.window_bytes = 1 << 20;
  const auto eal = link_eal_args(l, "test", 128);
  EXPECT_NE(std::find(eal.begin(), eal.end(), "-l2"), eal.end());
  EXPECT_NE(std::find(eal.begin(), eal.end(), "128"), eal.end());
  const engine::EngineConfig ec = link_engine_config(l);
  EXPECT_FALSE(ec.advertise_credits);
  EXPECT_EQ(ec.max_mtu, engine::Mtu::k1024);
  EXPECT_EQ(ec.vlan_id, 7);
  EXPECT_EQ(ec.max_inflight_bytes, 1u << 20);
}

TEST(Link, PathMtu) {
  EXPECT_EQ(link_path_mtu(1500), engine::Mtu::k1024);
  EXPECT_EQ(link_path_mtu(9000), engine::Mtu::k4096);
  EXPECT_EQ(link_path_mtu(4096 + 80), engine::Mtu::k4096);
  EXPECT_EQ(link_path_mtu(4096 + 80, kIboeHeaderRoom), engine::Mtu::k2048);
  EXPECT_EQ(link_path_mtu(576), engine::Mtu::k256);
}

TEST(LinkFlags, ParsedIntoTheLink) {
  LinkFlags f;
  po::options_description d;
  f.add_to(d);
  const char* argv[] = {"x",      "--iface",      "eth1",    "--pmd",     "af_xdp",
                        "--vlan", "12",           "--lcore", "3",         "--tx-drop",
                        "0.25",   "--fault-seed", "40",      "--offload", "icrc"};
  po::variables_map vm;
  po::store(po::parse_command_line(static_cast<int>(std::size(argv)), argv, d), vm);
  po::notify(vm);
  f.finish();
  EXPECT_EQ(f.link.iface, "eth1");
  EXPECT_EQ(f.link.pmd, "af_xdp");
  EXPECT_EQ(f.link.vlan, 12u);
  EXPECT_EQ(f.link.lcore, 3);
  EXPECT_EQ(f.link.offload, "icrc");
  EXPECT_DOUBLE_EQ(f.link.tx_faults.drop_rate, 0.25);
  EXPECT_EQ(f.link.tx_faults.seed, 40u);
  EXPECT_EQ(f.link.rx_faults.seed, 41u);
  EXPECT_TRUE(f.faults());
}

TEST(LinkFlags, Refusals) {
  for (const char* bad : {"--vlan=0", "--vlan=4095", "--vlan=x", "--tx-drop=1"}) {
    LinkFlags f;
    po::options_description d;
    f.add_to(d);
    const char* argv[] = {"x", bad};
    EXPECT_THROW(
        {
          po::variables_map vm;
          po::store(po::parse_command_line(2, argv, d), vm);
          po::notify(vm);
          f.finish();
        },
        po::error)
        << bad;
  }
}

}  // namespace
}  // namespace roce::runtime
