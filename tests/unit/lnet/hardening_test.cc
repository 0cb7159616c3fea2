// What a hostile peer of a Tm can do through its two doors, the TCP listener (hellos) and a
// connection's control QP (bulk control messages), on the fake Context: a refused or stalled
// hello spends no QP and no control slot and holds the listener for no one else; a forged or
// misdirected bulk token completes nobody's buffer.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <roce/lnet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <set>

#include "client/lnet/src/lnet_internal.h"
#include "tests/unit/lnet/fake_context.h"
#include "tests/unit/lnet/test_net.h"

namespace roce::lnet {
namespace {

using namespace std::chrono_literals;
using test::ctl;
using test::eventually;
using test::read_within;
using test::set_str;
using test::tcp_connect;

/// True when the listener closes `fd` within `ms` (EOF or reset); what it sends before (its
/// nonce) is read and dropped.
bool closed_within(int fd, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          end - std::chrono::steady_clock::now())
                          .count();
    pollfd pf{fd, POLLIN, 0};
    if (left <= 0 || poll(&pf, 1, static_cast<int>(left)) <= 0) return false;
    char c[64];
    if (recv(fd, c, sizeof c, MSG_DONTWAIT) <= 0) return true;
  }
}

/// The listener's greeting: magic and version (checked), then the nonce.
bool read_greeting(int fd, OobNonce& nonce, int ms) {
  std::uint8_t head[OobGreeting::kHead];
  return read_within(fd, head, sizeof head, ms) && OobGreeting::check_head(head) == 0 &&
         read_within(fd, nonce.data(), nonce.size(), ms);
}

class LnetHostile : public ::testing::Test {
 protected:
  FakeContext ctx;
  DomainOptions opts() { return test::loopback_options(7); }
  Domain dom{ctx, opts()};
  Tm tm{dom};

  void SetUp() override { ASSERT_EQ(tm.start("192.0.2.1@roce:0:1:*"), 0); }
  std::uint16_t port() { return dom.oob_locate(tm.ep()).second; }

  /// A well-formed hello of the Tm at 192.0.2.2@roce:0:1:`tmid` (its QPs 0x500 + 2*tmid).
  OobHello good_hello(std::uint32_t tmid) {
    OobHello h;
    set_str(h.src, "192.0.2.2@roce:0:1:" + std::to_string(tmid));
    set_str(h.dst, tm.ep().str());
    h.qpn = 0x500 + 2 * tmid;
    h.cqpn = h.qpn + 1;
    h.psn = 1;
    h.cpsn = 2;
    const Ipv6Addr g = ipv4_mapped(Ipv4Addr{0xC0000202});
    std::memcpy(h.gid, g.b.data(), 16);
    return h;
  }
  /// Sends `h` (signed with `key` after the listener's nonce, when given); the listener's
  /// reply, or nullopt when it closes or says nothing within `ms`. `nonce_out`: the nonce.
  std::optional<OobHello> say(OobHello h, int ms = 2000, std::optional<OobKey> key = {},
                              OobNonce* nonce_out = nullptr) {
    const int fd = tcp_connect(port());
    if (fd < 0) return std::nullopt;
    OobNonce nonce;
    if (!read_greeting(fd, nonce, ms)) {
      close(fd);
      return std::nullopt;
    }
    if (nonce_out) *nonce_out = nonce;
    if (key) sign_hello(h, nonce, key);
    EXPECT_EQ(send(fd, &h, sizeof h, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof h));
    OobHello r;
    const bool ok = read_within(fd, &r, sizeof r, ms);
    close(fd);
    return ok ? std::optional<OobHello>(r) : std::nullopt;
  }
};

// ---- hellos -----------------------------------------------------------------------------------

TEST_F(LnetHostile, RefusedHellosSpendNoQpAndNoControlSlot) {
  // A GID that is not the claimed NID's: refused before anything is allocated.
  for (std::uint32_t i = 0; i < 70; ++i) {
    OobHello h = good_hello(i % 60);
    h.gid[15] ^= 0x55;
    const auto r = say(h);
    ASSERT_TRUE(r.has_value()) << "hello " << i;
    ASSERT_EQ(r->status, EINVAL) << "hello " << i;
  }
  EXPECT_EQ(ctx.qps(), 0);
  // Hellos that pass the check but whose QPs cannot be connected: QPs and slots go back.
  ctx.fail_modify = true;
  for (std::uint32_t i = 0; i < 70; ++i) {
    const auto r = say(good_hello(i % 60));
    ASSERT_TRUE(r.has_value()) << "hello " << i;
    ASSERT_NE(r->status, 0) << "hello " << i;
  }
  ctx.fail_modify = false;
  EXPECT_EQ(ctx.qps(), 0);
  // Junk and a wrong address: closed, or answered EADDRNOTAVAIL.
  const int fd = tcp_connect(port());
  ASSERT_GE(fd, 0);
  std::vector<std::uint8_t> junk(sizeof(OobHello), 0xA5);
  send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(closed_within(fd, 3000));
  close(fd);
  OobHello wrong = good_hello(1);
  set_str(wrong.dst, "192.0.2.1@roce:0:1:7");
  ASSERT_TRUE(say(wrong).has_value());
  // A good one still gets its connection: the 140 failures above took no slot for good.
  const auto ok = say(good_hello(1));
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 0);
  EXPECT_EQ(ctx.qps(), 2);
  EXPECT_EQ(tm.stats().connections, 1u);
  EXPECT_EQ(tm.stats().hellos_refused, 142u);
}

TEST_F(LnetHostile, HellosFromAConnectedPeerReplaceItsConnectionNotAddToIt) {
  // We are not connecting to it ourselves, so a second hello is not a simultaneous connect:
  // the peer lost its end (it restarted). Its old connection goes; a peer repeating hellos
  // never holds more than one.
  for (int i = 0; i < 5; ++i) ASSERT_EQ(say(good_hello(3))->status, 0) << i;
  EXPECT_TRUE(eventually([&] { return ctx.qps() == 2; }));
  EXPECT_EQ(tm.stats().conns_live, 1u);
  EXPECT_EQ(tm.stats().conns_released, 4u);
}

TEST_F(LnetHostile, StalledHellosDoNotHoldTheListener) {
  // Twelve peers that connect and send a few bytes of a hello, then nothing.
  std::vector<int> stalled;
  for (int i = 0; i < 12; ++i) {
    const int fd = tcp_connect(port());
    ASSERT_GE(fd, 0);
    send(fd, "LNET", 4, MSG_NOSIGNAL);
    stalled.push_back(fd);
  }
  // A real peer is answered at once, not after the stalled ones' timeouts.
  const auto r = say(good_hello(4), 1500);
  ASSERT_TRUE(r.has_value()) << "the listener served stalled hellos first";
  EXPECT_EQ(r->status, 0);
  // Every stalled one is closed: evicted by a newer hello or at its deadline.
  for (const int fd : stalled) {
    EXPECT_TRUE(closed_within(fd, 4000));
    close(fd);
  }
  EXPECT_TRUE(eventually([&] { return tm.stats().hellos_refused == 12; }));
  EXPECT_EQ(ctx.qps(), 2);
}

TEST_F(LnetHostile, ConnectionsThatCarriedNothingMakeRoomWhenTheTmIsFull) {
  FakeContext fctx;
  DomainOptions o = opts();
  o.oob_port_base = static_cast<std::uint16_t>(o.oob_port_base + 1500);
  // Long enough that the 64 hellos below (and the 63 after) all stay young on a loaded host
  // running the sanitizer build (at 200 ms the first ones aged while the last were made).
  o.conn_reclaim_after = std::chrono::milliseconds(3000);
  Domain fdom(fctx, o);
  Tm ftm(fdom);
  ASSERT_EQ(ftm.start("192.0.2.1@roce:0:3:*"), 0);
  const std::uint16_t fport = fdom.oob_locate(ftm.ep()).second;
  auto hello_from = [&](std::uint32_t host, std::uint32_t tmid) {
    OobHello h = good_hello(tmid);
    set_str(h.src, "192.0.2." + std::to_string(host) + "@roce:0:1:" + std::to_string(tmid));
    set_str(h.dst, ftm.ep().str());
    const Ipv6Addr g = ipv4_mapped(Ipv4Addr{0xC0000200 + host});
    std::memcpy(h.gid, g.b.data(), 16);
    const int fd = tcp_connect(fport);
    OobNonce nonce;
    EXPECT_TRUE(read_greeting(fd, nonce, 2000));
    send(fd, &h, sizeof h, MSG_NOSIGNAL);
    OobHello r;
    const bool ok = read_within(fd, &r, sizeof r, 2000);
    close(fd);
    return ok ? r : OobHello{};
  };
  // Well-formed hellos claiming 64 addresses take every connection of the Tm...
  std::uint32_t cqpn0 = 0;
  for (std::uint32_t t = 0; t < 64; ++t) {
    const OobHello r = hello_from(2, t);
    ASSERT_EQ(r.status, 0) << t;
    if (t == 0) cqpn0 = r.cqpn;
  }
  EXPECT_EQ(hello_from(4, 0).status, ENOSPC);  // young ones are not taken back
  // ...one of them carries something (a real peer's would at once), and the application holds
  // a reference on its end point...
  ASSERT_TRUE(fctx.arrive(cqpn0, ctl(12345, 1)));
  EndPoint held;
  ASSERT_EQ(ftm.end_point_create("192.0.2.2@roce:0:1:0", held), 0);
  ASSERT_TRUE(eventually([&] { return ftm.stats().ctl_dropped == 1; }));
  std::this_thread::sleep_for(3100ms);
  // ...so after conn_reclaim_after, 63 new peers get the others' places, not its.
  for (std::uint32_t t = 0; t < 63; ++t) ASSERT_EQ(hello_from(3, t).status, 0) << t;
  EXPECT_EQ(hello_from(3, 63).status, ENOSPC);
  EXPECT_EQ(ftm.stats().conns_reclaimed, 63u);
  EXPECT_EQ(fctx.qps(), 128);
  // Once its end point is gone, it too makes room (it has carried something: at once).
  ASSERT_EQ(ftm.end_point_put(held), 0);
  EXPECT_EQ(hello_from(3, 63).status, 0);
  EXPECT_EQ(ftm.stats().conns_released, 64u);
  ftm.stop();
  EXPECT_EQ(fctx.qps(), 0);
}

TEST_F(LnetHostile, AStalledPeerListenerDoesNotHoldUpAdd) {
  FakeContext fctx;
  DomainOptions o = opts();
  o.oob_port_base = static_cast<std::uint16_t>(o.oob_port_base + 1200);
  o.oob_timeout = std::chrono::milliseconds(500);
  Domain fdom(fctx, o);
  Tm ftm(fdom);
  ASSERT_EQ(ftm.start("192.0.2.1@roce:0:4:1"), 0);
  // The "peer" at :4:50 is a listener that accepts and then trickles a byte every 100 ms.
  const auto peer = EndPoint::parse("192.0.2.1@roce:0:4:50");
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(fdom.oob_locate(*peer).second);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(lfd, 4), 0);
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    pollfd pf{lfd, POLLIN, 0};
    if (poll(&pf, 1, 5000) <= 0) return;
    const int fd = accept(lfd, nullptr, nullptr);
    for (int i = 0; i < 600 && !stop; ++i) {  // at most a minute
      if (send(fd, "x", 1, MSG_NOSIGNAL) != 1) break;
      std::this_thread::sleep_for(100ms);
    }
    close(fd);
  });
  NetBuffer* nb = fdom.alloc_buffer(1, 64);
  std::atomic<int> status{1};
  nb->ep = peer;
  nb->cb = [&](const BufferEvent& e) { status = e.status; };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ftm.add(*nb, QueueType::kMsgSend), 0);
  const auto took = std::chrono::steady_clock::now() - t0;
  stop = true;
  trickler.join();
  close(lfd);
  // Bounded by oob_timeout (500 ms), not by the peer (16 + 148 bytes at 100 ms each: 16 s).
  EXPECT_LT(took, std::chrono::seconds(3));
  EXPECT_TRUE(eventually([&] { return status.load() == -ETIMEDOUT; }));
  EXPECT_EQ(fctx.qps(), 0);  // the failed set-up gave its QPs back
  ftm.stop();
  fdom.free_buffer(nb);
}

// ---- keyed hellos ------------------------------------------------------------------------------

TEST(LnetSipHash, ReferenceVector) {
  // The reference implementation's first vector: key 00..0f, empty message.
  OobKey k;
  for (int i = 0; i < 16; ++i) k[i] = static_cast<std::uint8_t>(i);
  EXPECT_EQ(siphash24(k, {}), 0x726fdb47dd0e0e31ull);
  std::uint8_t m[15];
  for (int i = 0; i < 15; ++i) m[i] = static_cast<std::uint8_t>(i);
  EXPECT_EQ(siphash24(k, m), 0xa129ca6149be45e5ull);  // vector 15: 8 bytes and a 7-byte tail
}

class LnetKeyed : public LnetHostile {
 protected:
  static OobKey key(std::uint8_t seed) {
    OobKey k;
    for (int i = 0; i < 16; ++i) k[i] = static_cast<std::uint8_t>(seed + 31 * i);
    return k;
  }
  DomainOptions keyed(std::uint8_t seed, int port_shift) {
    DomainOptions o = opts();
    o.oob_port_base = static_cast<std::uint16_t>(o.oob_port_base + port_shift);
    o.oob_key = key(seed);
    return o;
  }
};

TEST_F(LnetKeyed, WithAKeyOnlyATaggedHelloOverTheListenersNonceConnects) {
  FakeContext kctx;
  Domain kdom(kctx, keyed(1, 1000));
  Tm ktm(kdom);
  ASSERT_EQ(ktm.start("192.0.2.1@roce:0:1:*"), 0);
  const std::uint16_t kport = kdom.oob_locate(ktm.ep()).second;
  auto say_to = [&](OobHello h, std::optional<OobKey> k, OobNonce* n = nullptr,
                    const OobNonce* replay = nullptr) -> std::optional<OobHello> {
    const int fd = tcp_connect(kport);
    OobNonce nonce;
    if (fd < 0 || !read_greeting(fd, nonce, 2000)) return std::nullopt;
    if (n) *n = nonce;
    if (k) sign_hello(h, replay ? *replay : nonce, k);
    send(fd, &h, sizeof h, MSG_NOSIGNAL);
    OobHello r;
    const bool ok = read_within(fd, &r, sizeof r, 2000);
    close(fd);
    return ok ? std::optional<OobHello>(r) : std::nullopt;
  };
  OobHello h = good_hello(5);
  set_str(h.dst, ktm.ep().str());
  EXPECT_EQ(say_to(h, std::nullopt)->status, EACCES);  // no tag
  EXPECT_EQ(say_to(h, key(2))->status, EACCES);        // another key
  OobNonce old;
  const auto ok = say_to(h, key(1), &old);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 0);
  EXPECT_TRUE(hello_tag_ok(*ok, old, key(1)));  // the reply is signed too
  EXPECT_EQ(kctx.qps(), 2);
  // A hello signed over an old nonce (a replay) is refused.
  OobHello h6 = good_hello(6);
  set_str(h6.dst, ktm.ep().str());
  EXPECT_EQ(say_to(h6, key(1), nullptr, &old)->status, EACCES);
  EXPECT_EQ(kctx.qps(), 2);
  EXPECT_EQ(ktm.stats().hellos_refused, 3u);
}

TEST_F(LnetKeyed, TmsWithTheSameKeyConnectOthersDoNot) {
  // Two Tms on one fake Context: a message from one to the other sets up a connection.
  FakeContext kctx;
  kctx.port_.gid = ipv4_mapped(kctx.port_.ipv4);
  Domain d1(kctx, keyed(1, 1000)), d2(kctx, keyed(1, 1000)), d3(kctx, keyed(9, 1000));
  Tm t1(d1), t2(d2), t3(d3);
  ASSERT_EQ(t1.start("192.0.2.1@roce:0:2:10"), 0);
  ASSERT_EQ(t2.start("192.0.2.1@roce:0:2:11"), 0);
  ASSERT_EQ(t3.start("192.0.2.1@roce:0:2:12"), 0);
  std::vector<int> st;
  std::mutex mu;
  auto send_to = [&](Domain& d, Tm& t, const std::string& to) {
    NetBuffer* nb = d.alloc_buffer(1, 64);
    nb->ep = EndPoint::parse(to);
    nb->cb = [&](const BufferEvent& e) {
      std::lock_guard<std::mutex> g(mu);
      st.push_back(e.status);
    };
    EXPECT_EQ(t.add(*nb, QueueType::kMsgSend), 0);
    return nb;
  };
  NetBuffer* a = send_to(d1, t1, "192.0.2.1@roce:0:2:11");  // same key: connected
  EXPECT_TRUE(eventually([&] { return t1.stats().connections == 1; }));
  EXPECT_EQ(t2.stats().connections, 1u);
  NetBuffer* b = send_to(d3, t3, "192.0.2.1@roce:0:2:11");  // another key: refused
  EXPECT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> g(mu);
    return st.size() == 1;
  }));
  EXPECT_EQ(st[0], -EACCES);  // the reason, not just "no route"
  EXPECT_EQ(t3.stats().connections, 0u);
  EXPECT_EQ(t2.stats().hellos_refused, 1u);
  t1.stop();
  t2.stop();
  t3.stop();
  d1.free_buffer(a);
  d3.free_buffer(b);
}

// ---- bulk tokens ------------------------------------------------------------------------------

TEST_F(LnetHostile, ForgedOrMisdirectedBulkTokensCompleteNoBuffer) {
  // Peer A (tmid 5) will do the active side; peer M (tmid 6) is connected too.
  const auto a = say(good_hello(5)), m = say(good_hello(6));
  ASSERT_TRUE(a && m);
  ASSERT_EQ(a->status, 0);
  ASSERT_EQ(m->status, 0);
  NetBuffer* nb = dom.alloc_buffer(1, 4096);
  ASSERT_NE(nb, nullptr);
  std::vector<BufferEvent> evs;
  std::mutex mu;
  nb->cb = [&](const BufferEvent& e) {
    std::lock_guard<std::mutex> g(mu);
    evs.push_back(e);
  };
  nb->ep = EndPoint::parse("192.0.2.2@roce:0:1:5");
  ASSERT_EQ(tm.add(*nb, QueueType::kPassiveBulkRecv), 0);
  const auto d = BulkDesc::decode(nb->desc);
  ASSERT_TRUE(d.has_value());
  auto events = [&] {
    std::lock_guard<std::mutex> g(mu);
    return evs.size();
  };
  auto settle = [&] { std::this_thread::sleep_for(60ms); };

  // M guesses: the first sequential id, and its neighbours.
  for (std::uint64_t guess = 1; guess <= 4; ++guess)  // (token 0 is a goodbye)
    ASSERT_TRUE(ctx.arrive(m->cqpn, ctl(guess, 4096)));
  ASSERT_TRUE(eventually([&] { return tm.stats().ctl_dropped == 4; }));
  settle();
  EXPECT_EQ(events(), 0u) << "a guessed id completed another peer's buffer";
  // M learned the real token: refused on M's connection.
  ASSERT_TRUE(ctx.arrive(m->cqpn, ctl(d->token, 100)));
  ASSERT_TRUE(eventually([&] { return tm.stats().ctl_refused == 1; }));
  // A claims more than the buffer holds: refused.
  ASSERT_TRUE(ctx.arrive(a->cqpn, ctl(d->token, 4097)));
  ASSERT_TRUE(eventually([&] { return tm.stats().ctl_refused == 2; }));
  settle();
  EXPECT_EQ(events(), 0u);
  EXPECT_EQ(tm.queue_length(QueueType::kPassiveBulkRecv), 1u);
  // A's real completion still ends A's transfer.
  ASSERT_TRUE(ctx.arrive(a->cqpn, ctl(d->token, 100)));
  ASSERT_TRUE(eventually([&] { return events() == 1; }));
  EXPECT_EQ(evs[0].status, 0);
  EXPECT_EQ(evs[0].length, 100u);
  EXPECT_EQ(tm.queue_length(QueueType::kPassiveBulkRecv), 0u);
  // Tokens are not a sequence.
  ASSERT_EQ(tm.add(*nb, QueueType::kPassiveBulkRecv), 0);
  const auto d2 = BulkDesc::decode(nb->desc);
  ASSERT_TRUE(d2.has_value());
  EXPECT_GT(d2->token > d->token ? d2->token - d->token : d->token - d2->token, 1u << 20);
  tm.stop();
  dom.free_buffer(nb);
}

// ---- the review's second round -----------------------------------------------------------------

/// A hello of the Tm at `ip`@roce:0:1:`tmid` with its NID's GID, for `to`.
OobHello hello_as(std::uint32_t ip, std::uint32_t tmid, const EndPoint& to) {
  OobHello h;
  const std::string nid = std::to_string(ip >> 24) + "." + std::to_string(ip >> 16 & 255) + "." +
                          std::to_string(ip >> 8 & 255) + "." + std::to_string(ip & 255);
  set_str(h.src, nid + "@roce:0:1:" + std::to_string(tmid));
  set_str(h.dst, to.str());
  h.qpn = 0x500 + 2 * tmid;
  h.cqpn = h.qpn + 1;
  h.psn = 1;
  h.cpsn = 2;
  const Ipv6Addr g = ipv4_mapped(Ipv4Addr{ip});
  std::memcpy(h.gid, g.b.data(), 16);
  return h;
}

/// Connects, reads the listener's greeting and sends `h`; the socket (the reply is still to
/// come), or -1.
int hello_no_wait(std::uint16_t port, const OobHello& h) {
  const int fd = tcp_connect(port);
  std::uint8_t greeting[8 + 16];
  if (fd < 0 || !read_within(fd, greeting, sizeof greeting, 2000)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  send(fd, &h, sizeof h, MSG_NOSIGNAL);
  return fd;
}

TEST_F(LnetHostile, AnUnresolvableHelloDoesNotHoldUpARealPeer) {
  // A hello claiming 192.0.2.77, where nobody answers ARP: its set-up waits 3 s for the
  // address (roced's resolve_timeout_ms is 10 s), but not on the listener's thread.
  ctx.slow_from = 0xC000024D;
  ctx.slow_to = 0xC000024E;
  ctx.slow_ms = 3000;
  const int slow = hello_no_wait(port(), hello_as(0xC000024D, 9, tm.ep()));
  ASSERT_GE(slow, 0);
  std::this_thread::sleep_for(100ms);  // the listener has it now
  const int fd = hello_no_wait(port(), good_hello(4));
  ASSERT_GE(fd, 0) << "the listener did not greet a real peer while a set-up resolved";
  OobHello r;
  ASSERT_TRUE(read_within(fd, &r, sizeof r, 1000)) << "a real peer waited for an ARP timeout";
  close(fd);
  EXPECT_EQ(r.status, 0);
  // The slow one fails in the end, and gives its QPs back.
  ASSERT_TRUE(read_within(slow, &r, sizeof r, 5000));
  close(slow);
  EXPECT_EQ(r.status, EHOSTUNREACH);
  EXPECT_TRUE(eventually([&] { return ctx.qps() == 2; }));
}

TEST_F(LnetHostile, SetUpsInFlightAreBoundedPerClaimedSubnet) {
  ctx.slow_from = 0xC0000240;  // 192.0.2.64 .. 127: nobody there
  ctx.slow_to = 0xC0000280;
  ctx.slow_ms = 2000;
  std::vector<int> slow;
  for (std::uint32_t i = 0; i < 4; ++i) {
    slow.push_back(hello_no_wait(port(), hello_as(0xC0000240 + i, 10 + i, tm.ep())));
    ASSERT_GE(slow.back(), 0);
  }
  std::this_thread::sleep_for(100ms);
  // A fifth set-up for 192.0.2.0/24 is refused at once (EAGAIN: try again later)...
  OobHello r;
  const int fifth = hello_no_wait(port(), hello_as(0xC0000250, 20, tm.ep()));
  ASSERT_GE(fifth, 0);
  ASSERT_TRUE(read_within(fifth, &r, sizeof r, 1000));
  close(fifth);
  EXPECT_EQ(r.status, EAGAIN);
  // ...while a peer in another subnet is served.
  const int other = hello_no_wait(port(), hello_as(0xC6120002, 21, tm.ep()));  // 198.18.0.2
  ASSERT_GE(other, 0);
  ASSERT_TRUE(read_within(other, &r, sizeof r, 1000));
  close(other);
  EXPECT_EQ(r.status, 0);
  for (const int fd : slow) {
    ASSERT_TRUE(read_within(fd, &r, sizeof r, 5000));
    EXPECT_EQ(r.status, EHOSTUNREACH);
    close(fd);
  }
  EXPECT_TRUE(eventually([&] { return ctx.qps() == 2; }));
}

TEST(LnetPool, APoolIsCarvedFromFewRegionsAndAShortOneIsReported) {
  // roced allows max_regions (128) memfd regions per client: a pool of 256 buffers must not
  // need one each.
  FakeContext c;
  c.max_buffers = 128;
  {
    Domain d(c);
    BufferPool p(d, 256, 2, 4096);
    EXPECT_EQ(p.size(), 256u);
    EXPECT_EQ(p.error(), 0);
    EXPECT_LE(c.buffers(), 4);
    // Every buffer is registered, its segments are its own.
    std::vector<NetBuffer*> got;
    while (NetBuffer* nb = p.get(0)) got.push_back(nb);
    ASSERT_EQ(got.size(), 256u);
    std::set<void*> addrs;
    for (NetBuffer* nb : got) {
      EXPECT_TRUE(nb->flags & kBufRegistered);
      ASSERT_EQ(nb->segs.size(), 2u);
      EXPECT_EQ(nb->capacity(), 8192u);
      for (const Segment& s : nb->segs) addrs.insert(s.addr);
      std::memset(nb->segs[1].addr, 0xA5, 4096);  // ASan: inside the region
    }
    EXPECT_EQ(addrs.size(), 512u);
    for (NetBuffer* nb : got) p.put(nb);
  }
  EXPECT_EQ(c.buffers(), 0);
  // No region at all: an empty pool that says why.
  FakeContext none;
  none.max_buffers = 0;
  Domain d(none);
  BufferPool p(d, 8, 1, 64);
  EXPECT_EQ(p.size(), 0u);
  EXPECT_EQ(p.error(), EDQUOT);
}

TEST_F(LnetHostile, TheListenerGreetsWithMagicAndVersion) {
  const int fd = tcp_connect(port());
  ASSERT_GE(fd, 0);
  std::uint32_t head[2] = {};
  ASSERT_TRUE(read_within(fd, head, sizeof head, 2000));
  close(fd);
  EXPECT_EQ(head[0], OobHello::kMagic);
  EXPECT_EQ(head[1], OobHello::kVersion);
}

TEST_F(LnetHostile, AnOlderVersionsHelloIsClosedAtOnce) {
  // A peer of an older version sends its hello without waiting for (or reading) a greeting.
  const int fd = tcp_connect(port());
  ASSERT_GE(fd, 0);
  const std::uint32_t head[2] = {OobHello::kMagic, OobHello::kVersion - 1};
  send(fd, head, sizeof head, MSG_NOSIGNAL);
  EXPECT_TRUE(closed_within(fd, 1000)) << "held until the hello deadline (2 s)";
  close(fd);
  EXPECT_TRUE(eventually([&] { return tm.stats().hellos_version == 1; }));
  EXPECT_EQ(tm.stats().hellos_refused, 1u);
}

TEST_F(LnetHostile, AnOlderListenerFailsAddAtOnceWithEproto) {
  FakeContext fctx;
  DomainOptions o = opts();
  o.oob_port_base = static_cast<std::uint16_t>(o.oob_port_base + 1300);
  o.oob_timeout = std::chrono::milliseconds(3000);
  Domain fdom(fctx, o);
  Tm ftm(fdom);
  ASSERT_EQ(ftm.start("192.0.2.1@roce:0:4:1"), 0);
  // The "peer" at :4:51 speaks the previous exchange: a bare 16-byte nonce, then it waits.
  const auto peer = EndPoint::parse("192.0.2.1@roce:0:4:51");
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(fdom.oob_locate(*peer).second);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(lfd, 4), 0);
  std::thread old([&] {
    pollfd pf{lfd, POLLIN, 0};
    if (poll(&pf, 1, 5000) <= 0) return;
    const int fd = accept(lfd, nullptr, nullptr);
    const std::uint64_t nonce[2] = {random_token(), random_token()};
    send(fd, nonce, sizeof nonce, MSG_NOSIGNAL);
    char buf[256];
    pollfd rf{fd, POLLIN, 0};
    while (poll(&rf, 1, 4000) > 0 && recv(fd, buf, sizeof buf, 0) > 0) {
    }
    close(fd);
  });
  NetBuffer* nb = fdom.alloc_buffer(1, 64);
  std::atomic<int> status{1};
  nb->ep = peer;
  nb->cb = [&](const BufferEvent& e) { status = e.status; };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ftm.add(*nb, QueueType::kMsgSend), 0);
  EXPECT_TRUE(eventually([&] { return status.load() != 1; }, 5000));
  const auto took = std::chrono::steady_clock::now() - t0;
  old.join();
  close(lfd);
  EXPECT_EQ(status.load(), -EPROTO);
  EXPECT_LT(took, std::chrono::milliseconds(1500)) << "not at once: after oob_timeout";
  EXPECT_EQ(fctx.qps(), 0);
  ftm.stop();
  fdom.free_buffer(nb);
}

}  // namespace
}  // namespace roce::lnet
