// The port mapper's answers (apps/nfs/portmap.h): PMAP v2 GETPORT and DUMP, RPCBIND v3/v4
// GETADDR as mount.nfs and the kernel ask them, and the refusals (SET, other versions,
// truncated arguments, not a call).
#include "apps/nfs/portmap.h"

#include <gtest/gtest.h>

#include "apps/nfs/nfs3.h"
#include "apps/nfs/rpc.h"
#include "apps/nfs/xdr.h"

namespace roce::nfs {
namespace {

using Bytes = std::vector<std::uint8_t>;

const std::vector<PortmapEntry> kTable = {
    {v3::kMountProgram, 3, "tcp", "192.0.2.254", 20048},
    {v3::kNfsProgram, 3, "rdma", "192.0.2.100", 20049},
    {kPortmapProgram, 2, "udp", "192.0.2.254", 111},
};

template <class F>
Bytes ask(std::uint32_t vers, std::uint32_t proc, F&& args) {
  Bytes b;
  XdrEncoder e(b);
  rpc::CallHeader h;
  h.xid = 0x1234;
  h.prog = kPortmapProgram;
  h.vers = vers;
  h.proc = proc;
  rpc::encode(e, h);
  args(e);
  Bytes out;
  portmap_reply(kTable, b, out);
  return out;
}

XdrDecoder accepted(const Bytes& r, rpc::AcceptStat want = rpc::kSuccess) {
  XdrDecoder d(r);
  rpc::ReplyHeader h;
  EXPECT_TRUE(rpc::decode(d, h));
  EXPECT_EQ(h.xid, 0x1234u);
  EXPECT_EQ(h.accept, want);
  return d;
}

TEST(Portmap, GetportV2) {
  const auto getport = [](std::uint32_t prog, std::uint32_t vers, std::uint32_t prot) {
    auto r = ask(2, 3, [&](XdrEncoder& e) {
      e.u32(prog);
      e.u32(vers);
      e.u32(prot);
      e.u32(0);
    });
    XdrDecoder d = accepted(r);
    return d.u32();
  };
  EXPECT_EQ(getport(v3::kMountProgram, 3, 6), 20048u);  // MOUNT v3 over TCP
  EXPECT_EQ(getport(v3::kMountProgram, 3, 17), 0u);     // not over UDP
  EXPECT_EQ(getport(v3::kMountProgram, 1, 6), 0u);      // nor v1
  EXPECT_EQ(getport(100021, 4, 6), 0u);                 // no NLM
}

TEST(Portmap, GetaddrV3AndV4) {
  for (std::uint32_t vers : {3u, 4u}) {
    const auto getaddr = [&](std::uint32_t prog, const char* netid) {
      auto r = ask(vers, 3, [&](XdrEncoder& e) {
        e.u32(prog);
        e.u32(3);
        e.string(netid);
        e.string("");
        e.string("");
      });
      XdrDecoder d = accepted(r);
      return d.string(128);
    };
    EXPECT_EQ(getaddr(v3::kMountProgram, "tcp"), "192.0.2.254.78.80");  // 20048
    EXPECT_EQ(getaddr(v3::kNfsProgram, "rdma"), "192.0.2.100.78.81");   // 20049
    EXPECT_EQ(getaddr(v3::kNfsProgram, "tcp"), "");
  }
}

TEST(Portmap, DumpListsTcpAndUdp) {
  auto r = ask(2, 4, [](XdrEncoder&) {});
  XdrDecoder d = accepted(r);
  int n = 0;
  while (d.ok() && d.boolean()) {
    d.u32(), d.u32(), d.u32(), d.u32();
    ++n;
  }
  EXPECT_TRUE(d.ok());
  EXPECT_EQ(n, 2);  // MOUNT/tcp and the port mapper/udp; NFS/rdma has no PMAP v2 protocol number
}

// Review17 item 10: `rpcinfo ADDR` (no -p) lists through RPCBIND v4 DUMP, then v3: every
// entry with its netid, NFS on "rdma" included, its universal address and owner.
TEST(Portmap, DumpV3AndV4ListEveryNetid) {
  for (std::uint32_t vers : {3u, 4u}) {
    auto r = ask(vers, 4, [](XdrEncoder&) {});
    XdrDecoder d = accepted(r);
    std::vector<std::string> got;
    while (d.ok() && d.boolean()) {
      const std::uint32_t prog = d.u32(), v = d.u32();
      const std::string netid = d.string(64), addr = d.string(128), owner = d.string(128);
      got.push_back(std::to_string(prog) + " " + std::to_string(v) + " " + netid + " " + addr +
                    " " + owner);
    }
    EXPECT_TRUE(d.ok());
    EXPECT_EQ(got, (std::vector<std::string>{"100005 3 tcp 192.0.2.254.78.80 superuser",
                                             "100003 3 rdma 192.0.2.100.78.81 superuser",
                                             "100000 2 udp 192.0.2.254.0.111 superuser"}))
        << "version " << vers;
  }
  // v4 GETVERSADDR answers as GETADDR.
  auto r = ask(4, 9, [&](XdrEncoder& e) {
    e.u32(v3::kNfsProgram);
    e.u32(3);
    e.string("rdma");
    e.string("");
    e.string("");
  });
  XdrDecoder d = accepted(r);
  EXPECT_EQ(d.string(128), "192.0.2.100.78.81");
}

TEST(Portmap, RefusesWhatItShould) {
  // SET: nobody registers here.
  auto set = ask(2, 1, [](XdrEncoder& e) {
    for (int i = 0; i < 4; ++i) e.u32(7);
  });
  XdrDecoder sd = accepted(set);
  EXPECT_FALSE(sd.boolean());
  // Version 5: PROG_MISMATCH 2..4.
  auto v5 = ask(5, 3, [](XdrEncoder&) {});
  XdrDecoder vd(v5);
  rpc::ReplyHeader h;
  ASSERT_TRUE(rpc::decode(vd, h));
  EXPECT_EQ(h.accept, rpc::kProgMismatch);
  EXPECT_EQ(h.low, 2u);
  EXPECT_EQ(h.high, 4u);
  // Truncated: GARBAGE_ARGS; an unknown procedure: PROC_UNAVAIL.
  accepted(ask(2, 3, [](XdrEncoder& e) { e.u32(1); }), rpc::kGarbageArgs);
  accepted(ask(4, 12, [](XdrEncoder&) {}), rpc::kProcUnavail);  // GETSTAT
  // Not a call: no answer.
  Bytes out;
  portmap_reply(kTable, Bytes{1, 2, 3}, out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace roce::nfs
