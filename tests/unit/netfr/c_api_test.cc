// The C API (netfr.h) as code written for upstream NetFR calls it (telescope-proj/netfr 45b215f,
// its test/host and test/client): the host's and the client's addresses and ports in
// NFRInitOpts.addrs (no port, no peer of ours), a client buffer attached with a NULL pointer
// (upstream: the library allocates it), nfrAckBuffer and nfrFreeMemory, on an in-memory fabric
// installed as the process's stack (a program of its own: the stack is process-wide).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>

#include "apps/netfr/endpoint.h"
#include "netfr/netfr_client.h"
#include "netfr/netfr_host.h"
#include "tests/unit/netfr/fake_fabric.h"

namespace roce::netfr {
namespace {

test::FakeFabric* g_fake = nullptr;
std::unique_ptr<Fabric> open_fake(const std::string&, std::string&) {
  auto f = std::make_unique<test::FakeFabric>();
  g_fake = f.get();
  return f;
}

NFRInitOpts upstream_opts(const char* ip, int port) {
  NFRInitOpts o;
  std::memset(&o, 0, sizeof o);
  o.link = "fake";  // ours: which stack (upstream has none to name)
  o.apiVersion = FI_VERSION(1, 18);
  for (int i = 0; i < NETFR_NUM_CHANNELS; ++i) {
    o.addrs[i].sin_family = AF_INET;
    o.addrs[i].sin_addr.s_addr = inet_addr(ip);
    o.addrs[i].sin_port = htons(static_cast<std::uint16_t>(port + i));
    o.transportTypes[i] = NFR_TRANSPORT_RDMA;
  }
  return o;
}

int written = 0;
void on_written(const void** uData) {
  written += static_cast<int>(reinterpret_cast<uintptr_t>(uData[0]));
}

TEST(CApi, UpstreamAddressingNullBufferAckAndFree) {
  set_local_opener(open_fake);
  // Upstream's test/host: the address and ports to listen on in addrs (here 6010 / 6011).
  const NFRInitOpts hopts = upstream_opts("192.0.2.1", 6010);
  PNFRHost host = nullptr;
  ASSERT_EQ(nfrHostInit(&hopts, &host), 0);
  ASSERT_NE(g_fake, nullptr);
  // Upstream's test/client: its own address in opts, the host's in peerInfo.
  const NFRInitOpts copts = upstream_opts("192.0.2.2", 7010);
  const NFRInitOpts peer = upstream_opts("192.0.2.1", 6010);
  PNFRClient client = nullptr;
  ASSERT_EQ(nfrClientInit(&copts, &peer, &client), 0);
  ASSERT_EQ(g_fake->connected_to.size(), 2u);
  EXPECT_EQ(g_fake->connected_to[0], "192.0.2.1:6010");
  EXPECT_EQ(g_fake->connected_to[1], "192.0.2.1:6011");
  int r = -EAGAIN;
  for (int i = 0; i < 50 && r == -EAGAIN; ++i) {
    nfrHostProcess(host);
    r = nfrClientConnect(client);
  }
  ASSERT_EQ(r, 0);
  EXPECT_EQ(nfrHostClientsConnected(host, 0), 1);

  // A buffer too small for the frame first (index 0), so that the frame goes to index 1.
  std::vector<std::uint8_t> small(1024);
  PNFRMemory small_mem = nfrClientAttachMemory(client, small.data(), small.size(), 0);
  ASSERT_NE(small_mem, nullptr);
  // Upstream's test/client attaches with a NULL buffer: the library allocates the memory.
  PNFRMemory mem = nfrClientAttachMemory(client, nullptr, 1 << 20, 0);
  ASSERT_NE(mem, nullptr);
  ASSERT_NE(nfrMemoryPointer(mem), nullptr);
  EXPECT_EQ(nfrMemorySize(mem), 1u << 20);

  std::vector<std::uint8_t> frame(4096);
  for (std::size_t i = 0; i < frame.size(); ++i) frame[i] = static_cast<std::uint8_t>(i * 7 + 3);
  PNFRMemory src = nfrHostAttachMemory(host, frame.data(), frame.size(), 0);
  ASSERT_NE(src, nullptr);
  NFRClientEvent evt{};
  for (int i = 0; i < 50 && (r = nfrClientProcess(client, -1, &evt)) == 0; ++i)
    nfrHostProcess(host);
  NFRCallbackInfo cb{};
  cb.callback = on_written;
  cb.uData[0] = reinterpret_cast<void*>(uintptr_t{1});
  // Upstream's nfrHostWriteBuffer returns 0 on success (ours with udata returns the index).
  ASSERT_EQ(nfrHostWriteBuffer(src, 0, 0, frame.size(), &cb), 0);
  r = 0;
  for (int i = 0; i < 50 && (r = nfrClientProcess(client, -1, &evt)) == 0; ++i)
    nfrHostProcess(host);
  ASSERT_EQ(r, 1);
  EXPECT_EQ(evt.type, NFR_CLIENT_EVENT_MEM_WRITE);
  EXPECT_EQ(evt.memRegion, mem);
  EXPECT_EQ(evt.payloadLength, frame.size());
  EXPECT_EQ(std::memcmp(nfrMemoryPointer(mem), frame.data(), frame.size()), 0);
  for (int i = 0; i < 10; ++i) nfrHostProcess(host);
  EXPECT_EQ(written, 1);
  nfrAckBuffer(mem);

  nfrFreeMemory(&mem);
  EXPECT_EQ(mem, nullptr);
  nfrFreeMemory(&small_mem);
  nfrFreeMemory(&src);
  EXPECT_EQ(src, nullptr);
  nfrClientFree(&client);
  nfrHostFree(&host);
  EXPECT_EQ(host, nullptr);
}

}  // namespace
}  // namespace roce::netfr
