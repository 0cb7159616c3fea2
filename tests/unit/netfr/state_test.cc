// NetFR's host and client state machines (apps/netfr/host.h, client.h) against each other on an
// in-memory fabric: hellos and refusal, buffer choice, credits as upstream NetFR keeps them,
// the total order (our extension) when one channel is held back, upstream's order, the
// keepalive freeing the host of a silent client, and what a broken peer gets.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "apps/netfr/client.h"
#include "apps/netfr/host.h"
#include "tests/unit/netfr/fake_fabric.h"

namespace roce::netfr {
namespace {

struct Pair : ::testing::Test {
  test::FakeFabric fab;
  std::unique_ptr<Host> host;
  std::unique_ptr<Client> client;
  NFRClientEvent ev{};

  NFRInitOpts opts(bool nonblocking = true, bool relaxed = false, double keepalive = 0) {
    NFRInitOpts o{};
    o.peer = "192.0.2.1";
    o.port = 5010;
    o.blocking = nonblocking ? 0 : 1;
    o.timeoutSec = 1;
    o.totalOrder = relaxed ? 0 : 1;
    o.keepaliveSec = keepalive;
    return o;
  }
  void connect(bool relaxed = false, double keepalive = 0) {
    host = std::make_unique<Host>(fab, opts(true, false, keepalive));
    ASSERT_TRUE(host->start());
    client = std::make_unique<Client>(fab, opts(true, relaxed, keepalive));
    ASSERT_EQ(client->connect("192.0.2.1"), 0);
    for (int i = 0; i < 10; ++i) host->process();
    ASSERT_TRUE(host->connected());
  }
  /// Runs both sides until the client has an event (true) or nothing moves.
  bool next_event() {
    for (int i = 0; i < 100; ++i) {
      host->process();
      const int r = client->process(-1, &ev);
      if (r == 1) return true;
      if (r < 0) return false;
    }
    return false;
  }
  void settle() {
    for (int i = 0; i < 20; ++i) {
      host->process();
      client->process(-1, &ev);
    }
  }
};

TEST_F(Pair, ConnectsBothChannelsWithHellos) {
  connect();
  EXPECT_EQ(host->clients(0), 1);
  EXPECT_EQ(host->clients(1), 1);
  settle();
  EXPECT_EQ(client->extensions(), kExtKeepalive | kExtHostSizes | kExtTotalOrder);
  ASSERT_NE(client->host_sizes(), nullptr);  // the HostBufferSizes arrived (extension)
  EXPECT_EQ(client->host_sizes()[0], 0u);    // no memory attached yet
}

TEST_F(Pair, WithoutExtensionsNothingButUpstreamsMessages) {
  // A client that offers nothing (as upstream's): the host sends none of our messages.
  host = std::make_unique<Host>(fab, opts());
  ASSERT_TRUE(host->start());
  NFRInitOpts o = opts(true, true, -1);  // upstream's order, no keepalive
  client = std::make_unique<Client>(fab, o);
  ASSERT_EQ(client->connect("192.0.2.1"), 0);
  settle();
  EXPECT_EQ(client->extensions(), kExtHostSizes);  // ours still asks for the sizes
}

TEST_F(Pair, KeepaliveFreesTheHostOfASilentClient) {
  // The host: a keepalive every 10 ms, a client gone after 100 ms of silence. The client (its
  // own period 10 s) stays quiet, as a killed one would.
  host = std::make_unique<Host>(fab, opts(true, false, 0.01));
  ASSERT_TRUE(host->start());
  client = std::make_unique<Client>(fab, opts(true, false, 10));
  ASSERT_EQ(client->connect("192.0.2.1"), 0);
  settle();
  EXPECT_TRUE(client->extensions() & kExtKeepalive);
  fab.hold(5010, true);  // the client is killed: nothing of its comes any more
  fab.hold(5011, true);
  bool gone = false;
  for (int i = 0; i < 2000000 && !gone; ++i) gone = host->process() == -ENOTCONN;
  EXPECT_TRUE(gone);
  EXPECT_GE(host->stats().peers_silent, 1u);
  fab.hold(5010, false);
  fab.hold(5011, false);
  client.reset();
  client = std::make_unique<Client>(fab, opts(true, false, 0.01));
  ASSERT_EQ(client->connect("192.0.2.1"), 0);  // the slot is free again
  for (int i = 0; i < 10; ++i) host->process();
  EXPECT_TRUE(host->connected());
}

TEST_F(Pair, SecondClientIsRefusedFirstGoesOn) {
  connect();
  Client second(fab, opts());
  EXPECT_EQ(second.connect("192.0.2.1"), -ECONNREFUSED);
  EXPECT_TRUE(host->connected());
  const std::uint8_t msg[4] = {1, 2, 3, 4};
  EXPECT_EQ(host->send_data(1, msg, 4, 9), 0);
  ASSERT_TRUE(next_event());
  EXPECT_EQ(ev.udata, 9u);
  EXPECT_EQ(host->stats().rejected, 2u);  // both of its channels (it asks for both at once)
}

TEST_F(Pair, SmallestFittingBufferAndTooLarge) {
  connect();
  std::vector<std::uint8_t> a(64 << 10), b(4096), c(1 << 20), src(1 << 20);
  for (auto* v : {&a, &b, &c}) ASSERT_NE(client->attach(v->data(), v->size(), 0), nullptr);
  settle();
  NFRMemory* m = host->attach(src.data(), src.size(), 0);
  ASSERT_NE(m, nullptr);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 7);
  EXPECT_EQ(host->write_buffer(m, 0, 0, 4096, 1, nullptr), 1);        // 4 KiB buffer (index 1)
  EXPECT_EQ(host->write_buffer(m, 0, 0, 4096, 2, nullptr), 0);        // 4 KiB busy: 64 KiB
  EXPECT_EQ(host->write_buffer(m, 0, 0, 5000, 3, nullptr), 2);        // only the 1 MiB is free
  EXPECT_EQ(host->write_buffer(m, 0, 0, 100, 4, nullptr), -ENOBUFS);  // all busy, non-blocking
  EXPECT_EQ(host->write_buffer(m, 0, 0, (1 << 20) + 1, 5, nullptr), -EINVAL);  // past the source
  std::vector<std::uint8_t> big((1 << 20) + 8);
  NFRMemory* bm = host->attach(big.data(), big.size(), 0);
  // None large enough: -ENOBUFS as upstream (it does not tell this from "all busy").
  EXPECT_EQ(host->write_buffer(bm, 0, 0, big.size(), 6, nullptr), -ENOBUFS);
  EXPECT_EQ(host->write_buffer(m, 0, (1 << 20) - 10, 20, 7, nullptr), -ENOBUFS);  // offset
  for (std::uint64_t want : {1u, 2u, 3u}) {
    ASSERT_TRUE(next_event());
    EXPECT_EQ(ev.type, NFR_CLIENT_EVENT_MEM_WRITE);
    EXPECT_EQ(ev.udata, want);
    EXPECT_EQ(std::memcmp(static_cast<std::uint8_t*>(ev.memRegion->ptr) + ev.payloadOffset,
                          src.data(), ev.payloadLength),
              0);
    EXPECT_EQ(client->buffer_ack(ev.memRegion), 0);
  }
  EXPECT_FALSE(next_event());  // nothing of the refused writes
  EXPECT_EQ(fab.bad_writes, 0u);
  EXPECT_EQ(host->write_buffer(m, 0, 0, 100, 8, nullptr), 1);  // given back: the smallest again
}

TEST_F(Pair, StackMemoryInPlaceOtherMemoryThroughABounceBuffer) {
  connect();
  // The client's: the stack's own (the host writes where the application reads), and a
  // vector of the application's (the host writes a bounce buffer, copied at delivery).
  NFRMemory* own = client->attach(nullptr, 8192, 0);
  std::vector<std::uint8_t> app(64 << 10, 0xEE);
  NFRMemory* copied = client->attach(app.data(), app.size(), 0);
  ASSERT_NE(own, nullptr);
  ASSERT_NE(copied, nullptr);
  EXPECT_FALSE(own->bounced());
  EXPECT_TRUE(copied->bounced());
  EXPECT_EQ(copied->ptr, app.data());
  settle();
  NFRMemory* src = host->attach(nullptr, 16384, 0);
  ASSERT_NE(src, nullptr);
  auto* s = static_cast<std::uint8_t*>(src->ptr);
  for (int i = 0; i < 16384; ++i) s[i] = static_cast<std::uint8_t>(i * 13 + 1);
  EXPECT_EQ(host->write_buffer(src, 0, 0, 8000, 1, nullptr), 0);     // fits the 8 KiB one
  EXPECT_EQ(host->write_buffer(src, 100, 16, 9000, 2, nullptr), 1);  // only the 64 KiB one
  ASSERT_TRUE(next_event());
  EXPECT_EQ(ev.memRegion, own);
  EXPECT_EQ(std::memcmp(own->ptr, s, 8000), 0);
  ASSERT_TRUE(next_event());
  EXPECT_EQ(ev.memRegion, copied);
  EXPECT_EQ(ev.payloadOffset, 16u);
  EXPECT_EQ(std::memcmp(app.data() + 16, s + 100, 9000), 0);
  EXPECT_EQ(app[15], 0xEE);  // only what was written is copied
  EXPECT_EQ(app[16 + 9000], 0xEE);
  EXPECT_EQ(fab.bad_writes, 0u);
}

TEST_F(Pair, CreditsRunOutAndComeBack) {
  connect();
  settle();
  const std::uint8_t msg[16] = {};
  int sent = 0;
  while (host->send_data(0, msg, sizeof msg, static_cast<std::uint64_t>(sent)) == 0) ++sent;
  // Upstream's rule: a datagram goes while at least the reserve is left.
  EXPECT_EQ(sent, NETFR_CREDIT_COUNT - NETFR_RESERVED_CREDIT_COUNT + 1);
  EXPECT_EQ(host->send_data(0, msg, sizeof msg, 0), -EAGAIN);
  EXPECT_EQ(host->send_data(1, msg, sizeof msg, static_cast<std::uint64_t>(sent)),
            0);  // other channel
  for (int i = 0; i <= sent; ++i) {
    ASSERT_TRUE(next_event()) << i;
    EXPECT_EQ(ev.udata, static_cast<std::uint64_t>(i));
  }
  settle();
  EXPECT_EQ(host->send_data(0, msg, sizeof msg, 0), 0);
  // Client -> host: the host does not read.
  int csent = 0;
  while (client->send_data(1, msg, sizeof msg, static_cast<std::uint64_t>(csent)) == 0) {
    ++csent;
    host->process();
  }
  EXPECT_EQ(csent, NETFR_CREDIT_COUNT - NETFR_RESERVED_CREDIT_COUNT + 1);
  std::uint8_t buf[64];
  std::uint32_t len = 4;
  std::uint64_t ud = 0;
  EXPECT_EQ(host->read_data(1, buf, &len, &ud), -ENOBUFS);  // too small: kept
  EXPECT_EQ(len, 16u);
  for (int i = 0; i < csent; ++i) {
    len = sizeof buf;
    ASSERT_EQ(host->read_data(1, buf, &len, &ud), 0);
    EXPECT_EQ(ud, static_cast<std::uint64_t>(i));
  }
  len = sizeof buf;
  EXPECT_EQ(host->read_data(1, buf, &len, &ud), -EAGAIN);
  settle();
  EXPECT_EQ(client->send_data(1, msg, sizeof msg, 0), 0);
}

TEST_F(Pair, StrictOrderWaitsForTheHeldChannel) {
  connect();
  std::vector<std::uint8_t> cb(1 << 16), src(1 << 16, 0x5A);
  client->attach(cb.data(), cb.size(), 0);
  settle();
  NFRMemory* m = host->attach(src.data(), src.size(), 0);
  fab.hold(5010, true);  // the primary (frames) lags
  ASSERT_EQ(host->write_buffer(m, 0, 0, 1000, 0, nullptr), 0);
  const std::uint8_t cur[8] = {};
  ASSERT_EQ(host->send_data(1, cur, 8, 1), 0);  // a cursor after the frame
  EXPECT_FALSE(next_event());                   // it arrived, but waits for the frame
  fab.hold(5010, false);
  ASSERT_TRUE(next_event());
  EXPECT_EQ(ev.type, NFR_CLIENT_EVENT_MEM_WRITE);
  EXPECT_EQ(ev.serial, 1u);
  ASSERT_TRUE(next_event());
  EXPECT_EQ(ev.udata, 1u);
  EXPECT_EQ(ev.serial, 2u);
}

TEST_F(Pair, UpstreamOrderDeliversWhatHasArrived) {
  connect(true);
  std::vector<std::uint8_t> cb(1 << 16), src(1 << 16, 0x5A);
  client->attach(cb.data(), cb.size(), 0);
  settle();
  NFRMemory* m = host->attach(src.data(), src.size(), 0);
  fab.hold(5010, true);
  ASSERT_EQ(host->write_buffer(m, 0, 0, 1000, 0, nullptr), 0);
  const std::uint8_t cur[8] = {};
  ASSERT_EQ(host->send_data(1, cur, 8, 1), 0);
  ASSERT_TRUE(next_event());  // the cursor does not wait
  EXPECT_EQ(ev.udata, 1u);
  EXPECT_EQ(ev.serial, 1u);  // upstream's order: the channel's serial
  EXPECT_EQ(ev.channelIndex, 1u);
  fab.hold(5010, false);
  ASSERT_TRUE(next_event());
  EXPECT_EQ(ev.type, NFR_CLIENT_EVENT_MEM_WRITE);
  EXPECT_EQ(ev.serial, 1u);
}

TEST_F(Pair, BadMessagesCloseTheConnectionAndAreCounted) {
  connect();
  settle();
  fab.inject_from_host(5011, std::vector<std::uint8_t>(20, 0x42));  // no magic
  for (int i = 0; i < 10; ++i) client->process(-1, &ev);
  EXPECT_EQ(client->stats().bad_messages, 1u);
  EXPECT_EQ(client->process(-1, &ev), -ENOTCONN);
  for (int i = 0; i < 10; ++i) host->process();
  EXPECT_FALSE(host->connected());  // the host saw the disconnect and waits for the next one
  EXPECT_EQ(host->stats().disconnects, 1u);
  client = std::make_unique<Client>(fab, opts());
  ASSERT_EQ(client->connect("192.0.2.1"), 0);  // reconnect
  for (int i = 0; i < 10; ++i) host->process();
  EXPECT_TRUE(host->connected());
}

// Upstream's client (nfr_CheckConnState): the first nfrClientProcess after the host went returns
// -ECONNRESET, every later one -ENOTCONN; what had arrived before is delivered first (ours).
TEST_F(Pair, HostGoneIsConnResetOnceThenNotConnected) {
  connect(true);
  std::uint8_t payload[4] = {1, 2, 3, 4};
  ASSERT_EQ(host->send_data(1, payload, sizeof payload, 7), 0);
  for (int i = 0; i < 5; ++i) host->process();
  host.reset();                            // the host closes both channels (DREQs)
  EXPECT_EQ(client->process(-1, &ev), 1);  // the datagram that had arrived
  EXPECT_EQ(ev.udata, 7u);
  EXPECT_EQ(client->process(-1, &ev), -ECONNRESET);
  EXPECT_EQ(client->process(-1, &ev), -ENOTCONN);
  EXPECT_EQ(client->process(-1, &ev), -ENOTCONN);
}

// Upstream runs a write's callback from nfrHostProcess only (its CQ is read there): not from
// nfrHostReadData, nor from another object's call polling the shared stack (here the client's).
int g_callbacks = 0;
void count_callback(const void** uData) {
  g_callbacks += static_cast<int>(reinterpret_cast<uintptr_t>(uData[0]));
}
TEST_F(Pair, WriteCallbackRunsFromHostProcessOnly) {
  connect(true);
  std::vector<std::uint8_t> cb(4096), src(4096, 0x11);
  ASSERT_NE(client->attach(cb.data(), cb.size(), 0), nullptr);
  settle();
  NFRMemory* m = host->attach(src.data(), src.size(), 0);
  NFRCallbackInfo info{};
  info.callback = count_callback;
  info.uData[0] = reinterpret_cast<void*>(uintptr_t{1});
  g_callbacks = 0;
  ASSERT_EQ(host->write_buffer(m, 0, 0, 4096, 0, &info), 0);
  std::uint8_t buf[64];
  std::uint32_t len = sizeof buf;
  std::uint64_t ud = 0;
  for (int i = 0; i < 20; ++i) {
    client->process(-1, &ev);
    EXPECT_EQ(host->read_data(1, buf, &len, &ud), -EAGAIN);
  }
  EXPECT_EQ(ev.type, NFR_CLIENT_EVENT_MEM_WRITE);  // the write and its notification are done
  EXPECT_EQ(g_callbacks, 0);
  host->process();
  EXPECT_EQ(g_callbacks, 1);
}

// Upstream's nfrHostReadData says -EAGAIN whenever nothing waits, client or not: its test/host
// treats anything else as fatal, so a client leaving between nfrHostProcess and the read must
// not end the host.
TEST_F(Pair, ReadDataWithoutClientIsEagain) {
  std::uint8_t buf[64];
  std::uint32_t len = sizeof buf;
  std::uint64_t ud = 0;
  host = std::make_unique<Host>(fab, opts());
  ASSERT_TRUE(host->start());
  EXPECT_EQ(host->read_data(1, buf, &len, &ud), -EAGAIN);  // no client yet
  client = std::make_unique<Client>(fab, opts());
  ASSERT_EQ(client->connect("192.0.2.1"), 0);
  for (int i = 0; i < 10; ++i) host->process();
  ASSERT_TRUE(host->connected());
  client.reset();  // the client leaves (DREQs)
  EXPECT_EQ(host->read_data(1, buf, &len, &ud), -EAGAIN);
  EXPECT_FALSE(host->connected());
}

TEST_F(Pair, SerialGapFromTheHostIsAProtocolError) {
  connect();
  settle();
  std::uint8_t buf[64];
  std::uint8_t payload[4] = {};
  const auto n = encode(buf, Data{true, 1, 5, 0, {payload, 4}});  // channel serial 5, not 1
  fab.inject_from_host(5010, {buf, buf + n});
  for (int i = 0; i < 10; ++i) client->process(-1, &ev);
  EXPECT_EQ(client->stats().protocol_errors, 1u);
  EXPECT_EQ(client->process(-1, &ev), -ENOTCONN);
}

TEST_F(Pair, UpstreamHostsMessagesAreTaken) {
  connect(true);  // upstream's order: no total order, no serial checks
  std::vector<std::uint8_t> cb(4096);
  client->attach(cb.data(), cb.size(), 0);
  settle();
  // Upstream's test/host's BufferUpdate as captured (protocol_test.cc kCapBufferUpdate: serials
  // and padding unset, 0xa5), its payload size made to fit this 4 KiB buffer.
  std::vector<std::uint8_t> bu = {0x4e, 0x65, 0x74, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x01, 0x04,
                                  0x00, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0x00, 0x10, 0x00, 0x00,
                                  0x00, 0x00, 0x00, 0x00, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5,
                                  0xa5, 0xa5, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  fab.inject_from_host(5010, bu);
  ASSERT_TRUE(next_event());
  EXPECT_EQ(ev.type, NFR_CLIENT_EVENT_MEM_WRITE);
  EXPECT_EQ(ev.payloadLength, 4096u);
  // Upstream's nfrHostSendData sends its datagrams as ClientData (type 6): taken as the host's.
  std::uint8_t buf[64];
  const std::uint8_t payload[5] = {'c', 'u', 'r', 's', 'r'};
  const auto n = encode(buf, Data{false, 1, 1, 7, {payload, 5}});
  fab.inject_from_host(5011, {buf, buf + n});
  ASSERT_TRUE(next_event());
  EXPECT_EQ(ev.type, NFR_CLIENT_EVENT_DATA);
  EXPECT_EQ(ev.udata, 7u);
  EXPECT_EQ(std::memcmp(ev.inlineData, payload, 5), 0);
  EXPECT_EQ(client->stats().protocol_errors, 0u);
}

TEST_F(Pair, BufferUpdateOutsideAdvertisedBufferIsRefused) {
  connect();
  std::vector<std::uint8_t> cb(4096);
  client->attach(cb.data(), cb.size(), 0);
  settle();
  std::uint8_t buf[64];
  const auto n = encode(buf, BufferUpdate{0, 4000, 200, 0, 0, 0});  // 200 + 4000 > 4096
  fab.inject_from_host(5010, {buf, buf + n});
  for (int i = 0; i < 10; ++i) client->process(-1, &ev);
  EXPECT_EQ(client->stats().protocol_errors, 1u);
  EXPECT_EQ(client->process(-1, &ev), -ENOTCONN);
}

// Security review (docs/security.md, "NetFR and Coyote's exchange"): what a hostile peer or a
// careless caller gets.

TEST_F(Pair, WriteWhoseRemoteOffsetWrapsIsRefused) {
  // roff + len wraps to 8: it passed the size checks and wrote 8 bytes before the buffer.
  connect();
  std::vector<std::uint8_t> cb(4096), src(4096, 0x77);
  ASSERT_NE(client->attach(cb.data(), cb.size(), 0), nullptr);
  settle();
  NFRMemory* m = host->attach(src.data(), src.size(), 0);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(host->write_buffer(m, 0, ~std::uint64_t{0} - 7, 16, 1, nullptr), -EMSGSIZE);
  settle();
  EXPECT_EQ(fab.bad_writes, 0u);
  EXPECT_TRUE(host->connected());
  EXPECT_EQ(host->write_buffer(m, 0, 4080, 16, 2, nullptr), 0);  // the last 16 bytes still go
}

TEST_F(Pair, KeepalivesDoNotPileUpBehindAPeerThatTakesNothing) {
  // A client that keeps talking (its keepalives) but takes nothing (each SEND answered with an
  // RNR NAK, retried without end): once the send slots are gone, the host queued a keepalive
  // at every poll, without bound.
  host = std::make_unique<Host>(fab, opts(true, false, 0.005));
  ASSERT_TRUE(host->start());
  client = std::make_unique<Client>(fab, opts(true, false, 10));
  ASSERT_EQ(client->connect("192.0.2.1"), 0);
  settle();
  ASSERT_TRUE(client->extensions() & kExtKeepalive);
  fab.deafen_client(5010);
  fab.deafen_client(5011);
  std::uint8_t ka[kKeepaliveSize];
  encode(ka, Keepalive{});
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  std::size_t most = 0;
  while (std::chrono::steady_clock::now() < end) {
    fab.inject_from_client(5010, {ka, ka + sizeof ka});
    fab.inject_from_client(5011, {ka, ka + sizeof ka});
    for (int i = 0; i < 10; ++i) host->process();
    most = std::max({most, host->channel(0).internal.size(), host->channel(1).internal.size()});
  }
  EXPECT_LE(most, 4u);
  // (Not asserted: that it stays connected. It talks, but a loaded machine that stops this
  // loop for 50 ms makes it silent to the host.)
  EXPECT_EQ(host->stats().protocol_errors, 0u);
}

TEST_F(Pair, HostMemoryStaysWhileAWriteFromItIsInFlight) {
  // The RDMA WRITE reads the host's memory when the stack sends it, after write_buffer
  // returned: freeing the memory before the notification completed let the stack read memory
  // that was gone (or reused).
  connect();
  std::vector<std::uint8_t> cb(4096);
  ASSERT_NE(client->attach(cb.data(), cb.size(), 0), nullptr);
  settle();
  NFRMemory* m = host->attach(nullptr, 4096, 0);
  ASSERT_NE(m, nullptr);
  fab.hold(5010, true);
  ASSERT_EQ(host->write_buffer(m, 0, 0, 1024, 1, nullptr), 0);
  EXPECT_EQ(host->free_memory(m), -EBUSY);
  fab.hold(5010, false);
  ASSERT_TRUE(next_event());
  EXPECT_EQ(host->free_memory(m), 0);
}

TEST_F(Pair, HalfConnectedClientDoesNotHoldTheHost) {
  // A peer that connects the primary channel and never the secondary held the host's one slot
  // for good: every other client refused, no keepalive (it runs on a whole connection only).
  host = std::make_unique<Host>(fab, opts());  // its time-out: 1 s
  ASSERT_TRUE(host->start());
  std::uint8_t hello[kClientHelloSize + 1];
  const std::size_t n = encode(hello, ClientHello{});
  fab.peer_ip = "192.0.2.66";
  ASSERT_TRUE(fab.connect("192.0.2.1", 5010, 8, 8, wrap_cm_data({hello, n})));
  for (int i = 0; i < 10; ++i) host->process();
  ASSERT_EQ(host->clients(0), 1);
  fab.peer_ip = "192.0.2.2";
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  int r = -1;
  while (r != 0 && std::chrono::steady_clock::now() < end) {
    client = std::make_unique<Client>(fab, opts());
    r = client->connect("192.0.2.1");
    for (int i = 0; i < 100; ++i) host->process();
  }
  EXPECT_EQ(r, 0);
  EXPECT_TRUE(host->connected());
}

TEST_F(Pair, OnlyTheClientsAdvertisedBuffersTakeRemoteWrites) {
  // Every NetFR registration took REMOTE_WRITE: a client that learns (or guesses) a key of the
  // host's could write the host's frame memory and its send and receive slots. Only what a
  // client advertises is written from afar.
  connect();
  std::vector<std::uint8_t> cb(4096);
  NFRMemory* advertised = client->attach(cb.data(), cb.size(), 0);
  ASSERT_NE(advertised, nullptr);
  settle();
  NFRMemory* frame = host->attach(nullptr, 4096, 0);
  ASSERT_NE(frame, nullptr);
  const std::uint8_t junk[16] = {0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE,
                                 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE};
  const ConnId from_client = client->channel(0).conn;
  const MrInfo slots = host->channel(0).tx_mr;
  ASSERT_TRUE(
      fab.post_send(from_client, 0, true, junk, 16, 0, frame->mr.iova, frame->mr.rkey, true));
  ASSERT_TRUE(fab.post_send(from_client, 0, true, junk, 16, 0, slots.iova, slots.rkey, true));
  std::vector<FabricEvent> evs;
  std::vector<FabricCompletion> wcs;
  fab.poll(evs, wcs);  // not through the endpoints: the failed writes would close the client
  EXPECT_EQ(fab.bad_writes, 2u);
  EXPECT_EQ(static_cast<std::uint8_t*>(frame->ptr)[0], 0u);
  // The advertised buffer is written from afar, as the host does.
  const MrInfo& mr = advertised->mr;
  ASSERT_TRUE(fab.post_send(host->channel(0).conn, 0, true, junk, 16, 0, mr.iova, mr.rkey, true));
  fab.poll(evs, wcs);
  EXPECT_EQ(fab.bad_writes, 2u);
}

TEST_F(Pair, ChannelsWhoseHellosDifferAreRefused) {
  // A host answering the primary with total order and the secondary without: the client took
  // the last answer, the host kept the first, and the client's events waited in the other
  // order's queue for good. The two answers must agree.
  host = std::make_unique<Host>(fab, opts());
  ASSERT_TRUE(host->start());
  std::uint8_t rep[kServerHelloSize + 1];
  const std::size_t n = encode(rep, ServerHello{HelloStatus::kOk, kExtKeepalive | kExtHostSizes});
  fab.rep_override[5011] = wrap_cm_data({rep, n});
  client = std::make_unique<Client>(fab, opts());  // offers total order; the host takes it
  EXPECT_NE(client->connect("192.0.2.1"), 0);
  EXPECT_EQ(client->stats().protocol_errors, 1u);
}

TEST_F(Pair, AckOfTheWrongDirectionIsRefused) {
  // Upstream's host sends ClientDataAck, its client HostDataAck; each side took either.
  connect();
  settle();
  fab.inject_from_host(5011, encode_vec(Ack{true}));  // a HostDataAck, from the host
  for (int i = 0; i < 10; ++i) client->process(-1, &ev);
  EXPECT_EQ(client->process(-1, &ev), -ENOTCONN);
  EXPECT_GE(client->stats().protocol_errors, 1u);
  connect();
  settle();
  fab.inject_from_client(5010, encode_vec(Ack{false}));  // a ClientDataAck, from the client
  for (int i = 0; i < 10; ++i) host->process();
  EXPECT_FALSE(host->connected());
}

TEST_F(Pair, AcksDoNotPileUpBehindAPeerThatTakesNothing) {
  // A client that sends datagrams without end (credits are the sender's to keep) and takes
  // nothing (RNR NAKs): every datagram the host reads queued an ack once the send slots were
  // gone, without bound. Past a bound far above what a live peer leaves waiting, the
  // connection goes.
  connect();
  settle();
  fab.deafen_client(5011);
  const std::uint8_t payload[8] = {};
  std::uint8_t buf[64];
  std::uint8_t out[64];
  std::size_t most = 0;
  for (std::uint32_t i = 1; i <= 3000 && host->connected(); ++i) {
    const auto n = encode(buf, Data{false, i, i, 0, {payload, sizeof payload}});
    fab.inject_from_client(5011, {buf, buf + n});
    host->process();
    std::uint32_t len = sizeof out;
    host->read_data(1, out, &len, nullptr);
    most = std::max(most, host->channel(1).internal.size());
  }
  EXPECT_LE(most, std::size_t{kMaxQueued});
  EXPECT_FALSE(host->connected());
}

}  // namespace
}  // namespace roce::netfr
