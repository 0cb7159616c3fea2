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

// The callback frees its own host (netfr.h: callbacks may call the API): the host was deleted
// under the completion and the process call that ran it, which went on using it (ASan: a heap
// use after free). The free now waits until the outermost API call returns.
void free_host(const void** ud) { nfrHostFree(static_cast<PNFRHost*>(const_cast<void*>(ud[0]))); }

TEST(NetfrApi, CallbackMayFreeItsOwnHost) {
  set_local_opener(open_fake);
  PNFRHost h = nullptr;
  NFRInitOpts o = host_opts();
  o.port = 5030;
  ASSERT_EQ(nfrHostInit(&o, &h), 0);
  NFRInitOpts co = host_opts();
  co.port = 5030;
  co.peer = "192.0.2.1";
  PNFRClient c = nullptr;
  ASSERT_EQ(nfrClientInit(&co, nullptr, &c), 0);
  int r = -EAGAIN;
  for (int i = 0; i < 100 && r == -EAGAIN; ++i) {
    nfrHostProcess(h);
    r = nfrClientConnect(c);
  }
  ASSERT_EQ(r, 0);
  ASSERT_NE(nfrClientAllocMemory(c, 4096, 0), nullptr);
  NFRClientEvent ev{};
  for (int i = 0; i < 10; ++i) {
    nfrHostProcess(h);
    nfrClientProcess(c, -1, &ev);
  }
  PNFRMemory hm = nfrHostAllocMemory(h, 4096, 0);
  ASSERT_NE(hm, nullptr);
  NFRCallbackInfo cb{};
  cb.callback = free_host;
  cb.uData[0] = &h;
  ASSERT_EQ(nfrHostWriteBuffer(hm, 0, 0, 64, &cb), 0);
  for (int i = 0; i < 100 && h; ++i) nfrHostProcess(h);
  EXPECT_EQ(h, nullptr);
  nfrClientFree(&c);
}

}  // namespace
}  // namespace roce::netfr
