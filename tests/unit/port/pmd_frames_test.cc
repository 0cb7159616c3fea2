// The frame sizes of net_af_packet and net_memif, and their device arguments sized for an MTU.
#include "dataplane/port/pmd_frames.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace roce::port {
namespace {

// No interface by this name: vdev_arg sizes from the MTU alone.
const std::string kNoIface = "iface=roce-no-such0";

TEST(PmdFrames, DevargFindsKeysAnywhere) {
  EXPECT_EQ(devarg("iface=a,framesz=4096,qpairs=2", "framesz"), "4096");
  EXPECT_EQ(devarg("iface=a,framesz=4096,qpairs=2", "qpairs"), "2");
  EXPECT_EQ(devarg("iface=a", "iface"), "a");
  EXPECT_FALSE(devarg("iface=a,xframesz=1", "framesz"));
  EXPECT_FALSE(devarg("", "bsize"));
}

TEST(PmdFrames, AfPacketSlotsCarryLessThanTheirSize) {
  // A received frame starts 66 bytes into its slot; the default slot of 2 KiB carries a
  // 1500-byte MTU with a VLAN tag, not 2 KiB frames.
  const auto f = pmd_frames("net_af_packet", "iface=x");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->max_frame, 2048u - 66);
  EXPECT_EQ(f->mbuf_room, 2048u - 32);
  EXPECT_GE(f->max_frame, max_frame_len(1500));
  EXPECT_EQ(pmd_frames("net_af_packet0", "framesz=16384")->max_frame, 16384u - 66);
  EXPECT_EQ(pmd_frames("net_memif", "")->max_frame, 2048u);
  EXPECT_EQ(pmd_frames("net_memif0", "role=client,bsize=8192")->max_frame, 8192u);
  EXPECT_EQ(pmd_frames("net_memif0", "bsize=8192")->mbuf_room, 8192u);  // one buffer, one mbuf
  EXPECT_FALSE(pmd_frames("net_tap", "iface=x"));
  EXPECT_FALSE(pmd_frames("mlx5_pci", ""));
  EXPECT_THROW(pmd_frames("net_memif", "bsize=big"), std::invalid_argument);
}

TEST(PmdFrames, AfPacketSizedForTheMtu) {
  EXPECT_EQ(vdev_arg("net_af_packet0", kNoIface, 1500),
            "--vdev=net_af_packet0," + kNoIface + ",framesz=2048");
  EXPECT_EQ(vdev_arg("net_af_packet0", kNoIface, 4096),
            "--vdev=net_af_packet0," + kNoIface + ",framesz=8192,blocksz=8192");
  EXPECT_EQ(vdev_arg("net_af_packet0", kNoIface, 9000),
            "--vdev=net_af_packet0," + kNoIface + ",framesz=16384,blocksz=16384");
  // Whatever the arguments give, the result carries the MTU's frames.
  for (unsigned mtu : {576u, 1500u, 2000u, 4096u, 4200u, 9000u, 9216u}) {
    const std::string v = vdev_arg("net_af_packet0", kNoIface, mtu);
    const auto f = pmd_frames("net_af_packet", v.substr(v.find(',') + 1));
    EXPECT_GE(f->max_frame, max_frame_len(mtu)) << v;
  }
}

TEST(PmdFrames, AfPacketArgumentsTooSmallAreRefused) {
  EXPECT_EQ(vdev_arg("net_af_packet0", kNoIface + ",framesz=16384", 9000),
            "--vdev=net_af_packet0," + kNoIface + ",framesz=16384");
  try {
    vdev_arg("net_af_packet0", kNoIface + ",framesz=2048", 4096);
    FAIL() << "framesz=2048 accepted for MTU 4096";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "net_af_packet0: framesz=2048 carries frames of up to 1982 bytes; MTU 4096 needs "
                 "4114 (framesz=8192 or more)");
  }
  EXPECT_THROW(vdev_arg("net_af_packet0", kNoIface + ",blocksz=4096", 9000), std::invalid_argument);
}

TEST(PmdFrames, MemifBuffersHoldAWholeFrame) {
  // A frame chained over several memif buffers takes the receive path that crashes in DPDK
  // 22.11: every MTU gets buffers that hold its longest frame.
  EXPECT_EQ(vdev_arg("net_memif0", "role=server", 1500),
            "--vdev=net_memif0,role=server,bsize=2048");
  EXPECT_EQ(vdev_arg("net_memif0", "role=client", 4096),
            "--vdev=net_memif0,role=client,bsize=4224");
  EXPECT_EQ(vdev_arg("net_memif0", "", 9000), "--vdev=net_memif0,bsize=9088");
  for (unsigned mtu : {576u, 1500u, 2048u, 4224u, 9000u, 9216u}) {
    const std::string v = vdev_arg("net_memif0", "id=0", mtu);
    EXPECT_GE(pmd_frames("net_memif", v.substr(v.find(',') + 1))->max_frame, max_frame_len(mtu))
        << v;
  }
  EXPECT_THROW(vdev_arg("net_memif0", "bsize=2048", 4096), std::invalid_argument);
  EXPECT_THROW(vdev_arg("net_memif0", "bsize=70000", 1500), std::invalid_argument);
  EXPECT_EQ(vdev_arg("net_memif0", "bsize=4096", 4000), "--vdev=net_memif0,bsize=4096");
}

TEST(PmdFrames, OtherDevicesPassAsGiven) {
  EXPECT_EQ(vdev_arg("net_tap0", "iface=t0", 9000), "--vdev=net_tap0,iface=t0");
  EXPECT_EQ(vdev_arg("net_ring0", "", 1500), "--vdev=net_ring0");
}

}  // namespace
}  // namespace roce::port
