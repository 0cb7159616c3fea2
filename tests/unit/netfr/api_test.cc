// NetFR's C API (apps/netfr/include/netfr/netfr.h) on an in-memory fabric (fake_fabric.h, the
// process's stack through the in-process opener): a memory handle that was freed, or whose host
// went, is refused (-EINVAL) rather than read after it was freed; the handle is checked under
// the API lock, so a thread freeing it meanwhile is no race (security review,
// docs/security.md).
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <string>

#include "apps/netfr/endpoint.h"
#include "tests/unit/netfr/fake_fabric.h"

namespace roce::netfr {
namespace {

std::unique_ptr<Fabric> open_fake(const std::string&, std::string&) {
  return std::make_unique<test::FakeFabric>();
}

NFRInitOpts host_opts() {
  NFRInitOpts o{};
  o.link = "fake";
  o.port = 5010;
  return o;
}

TEST(NetfrApi, FreedMemoryHandleIsRefused) {
  set_local_opener(open_fake);
  PNFRHost h = nullptr;
  const NFRInitOpts o = host_opts();
  ASSERT_EQ(nfrHostInit(&o, &h), 0);
  PNFRMemory m = nfrHostAllocMemory(h, 4096, 0);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(nfrHostWriteBuffer(m, 0, 0, 16, nullptr), -ENOTCONN);  // live: no client yet
  PNFRMemory copy = m;
  nfrFreeMemory(&m);
  EXPECT_EQ(m, nullptr);
  // The copy names freed memory: it was read (its owner, its size) and written through.
  EXPECT_EQ(nfrHostWriteBuffer(copy, 0, 0, 16, nullptr), -EINVAL);
  EXPECT_EQ(nfrFreeMemoryChecked(&copy), -EINVAL);
  nfrAckBuffer(copy);  // nothing (a client's call; the handle is gone)
  nfrHostFree(&h);
}

TEST(NetfrApi, MemoryOfAFreedHostIsRefused) {
  set_local_opener(open_fake);
  PNFRHost h = nullptr;
  NFRInitOpts o = host_opts();
  o.port = 5020;
  ASSERT_EQ(nfrHostInit(&o, &h), 0);
  PNFRMemory m = nfrHostAllocMemory(h, 4096, 1);
  ASSERT_NE(m, nullptr);
  nfrHostFree(&h);  // its memory goes with it
  EXPECT_EQ(nfrHostWriteBuffer(m, 0, 0, 16, nullptr), -EINVAL);
  EXPECT_EQ(nfrFreeMemoryChecked(&m), -EINVAL);
}

}  // namespace
}  // namespace roce::netfr
