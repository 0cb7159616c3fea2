// RPC over kernel TCP, the server side (apps/nfs/mount_tcp.h: the MOUNT listener, and NFS over
// TCP for the benchmarks), on loopback: poll() never blocks (a slow handler runs on the worker,
// a client that does not read its replies leaves them in the connection's buffer), connections
// are capped, and a connection that makes no progress is closed at its deadline.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "apps/nfs/mount_tcp.h"
#include "apps/nfs/nfs_service.h"
#include "dataplane/port/eal.h"

namespace roce::nfs {
namespace {

std::uint16_t g_port = static_cast<std::uint16_t>(21000 + (getpid() % 4000) * 4);

// A listening server on 127.0.0.1 at a port of its own.
std::uint16_t listen_on(RpcTcpServer& s) {
  std::string err;
  for (int k = 0; k < 50; ++k) {
    const std::uint16_t p = g_port++;
    if (s.listen("127.0.0.1", p, err)) return p;
  }
  ADD_FAILURE() << err;
  return 0;
}

int connect_to(std::uint16_t port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  return fd;
}

// One record: the last-fragment mark and `body`.
std::vector<std::uint8_t> record(std::uint32_t xid, std::size_t body = 40) {
  std::vector<std::uint8_t> r(4 + body, 0);
  const std::uint32_t mark = 0x80000000u | static_cast<std::uint32_t>(body);
  r[0] = static_cast<std::uint8_t>(mark >> 24);
  r[1] = static_cast<std::uint8_t>(mark >> 16);
  r[2] = static_cast<std::uint8_t>(mark >> 8);
  r[3] = static_cast<std::uint8_t>(mark);
  r[4] = static_cast<std::uint8_t>(xid >> 24);
  r[5] = static_cast<std::uint8_t>(xid >> 16);
  r[6] = static_cast<std::uint8_t>(xid >> 8);
  r[7] = static_cast<std::uint8_t>(xid);
  return r;
}

// Polls `s` until `done` or `seconds`; returns the longest poll() in ns.
template <class F>
std::uint64_t poll_until(RpcTcpServer& s, F&& done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::uint64_t longest = 0;
  while (!done() && std::chrono::steady_clock::now() < end) {
    const std::uint64_t t0 = port::now_ns();
    s.poll();
    longest = std::max(longest, port::now_ns() - t0);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return longest;
}

// True when `fd` was closed by the server (EOF or reset), after reading what is pending.
bool closed_by_peer(int fd) {
  std::uint8_t b[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (n > 0) continue;
    return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  }
}

void echo(const CallContext&, std::span<const std::uint8_t> call,
          std::vector<std::uint8_t>& reply) {
  reply.assign(call.begin(), call.end());
}

// A handler that takes a second (an fsync on a slow disk): the poll loop goes on meanwhile. (The
// bounds on one poll are functional: blocked, a poll takes the handler's second, or the 10 s a
// reply once waited for a client that did not read.)
TEST(RpcTcpServer, SlowHandlerDoesNotBlockThePoll) {
  RpcTcpServer s(
      [](const CallContext&, std::span<const std::uint8_t> call, std::vector<std::uint8_t>& reply) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        echo({}, call, reply);
      });
  const std::uint16_t port = listen_on(s);
  const int fd = connect_to(port);
  const auto rec = record(0x11);
  ASSERT_EQ(::send(fd, rec.data(), rec.size(), 0), static_cast<ssize_t>(rec.size()));
  std::vector<std::uint8_t> got;
  const std::uint64_t longest = poll_until(
      s,
      [&] {
        std::uint8_t b[256];
        const ssize_t n = ::recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (n > 0) got.insert(got.end(), b, b + n);
        return got.size() >= rec.size();
      },
      5);
  ASSERT_EQ(got, rec);
  EXPECT_LT(longest, 250'000'000u) << "one poll took " << longest / 1000000 << " ms";
  ::close(fd);
}

// A client that sends calls and never reads the replies: they wait in the connection (one at a
// time), no poll blocks, and the connection is closed at its deadline.
TEST(RpcTcpServer, ClientThatDoesNotReadBlocksNothing) {
  RpcTcpServer s(
      [](const CallContext&, std::span<const std::uint8_t> call, std::vector<std::uint8_t>& reply) {
        reply.assign(60000, 0xAB);
        std::copy_n(call.begin(), 4, reply.begin());
      });
  s.idle_timeout_ms = 500;
  const std::uint16_t port = listen_on(s);
  const int fd = connect_to(port, 4096);
  std::vector<std::uint8_t> calls;
  for (std::uint32_t x = 0; x < 400; ++x) {
    const auto r = record(x);
    calls.insert(calls.end(), r.begin(), r.end());
  }
  std::size_t off = 0;
  std::uint64_t longest = poll_until(
      s, [&] { return s.clients() == 1; }, 2);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2000);
  while (std::chrono::steady_clock::now() < end && s.clients() > 0) {
    if (off < calls.size()) {
      const ssize_t n = ::send(fd, calls.data() + off, calls.size() - off, MSG_DONTWAIT);
      if (n > 0) off += static_cast<std::size_t>(n);
    }
    const std::uint64_t t0 = port::now_ns();
    s.poll();
    longest = std::max(longest, port::now_ns() - t0);
    if (longest > 1'000'000'000u) break;
  }
  EXPECT_LT(longest, 250'000'000u) << "one poll took " << longest / 1000000 << " ms";
  EXPECT_EQ(s.clients(), 0u) << "a connection without progress outlived its deadline";
  EXPECT_GT(s.calls(), 0u);
  EXPECT_LT(s.calls(), 400u);
  ::close(fd);
}

// Beyond max_clients, the connection idle the longest makes room (none has a call under way).
TEST(RpcTcpServer, CapsConnections) {
  RpcTcpServer s(echo);
  s.max_clients = 4;
  const std::uint16_t port = listen_on(s);
  std::vector<int> fds;
  for (int k = 0; k < 6; ++k) fds.push_back(connect_to(port));
  poll_until(
      s, [] { return false; }, 0.2);
  EXPECT_EQ(s.clients(), 4u);
  int refused = 0;
  for (const int fd : fds) refused += closed_by_peer(fd);
  EXPECT_EQ(refused, 2);
  // The four it kept are served.
  int served = 0;
  for (const int fd : fds) {
    const auto rec = record(7);
    if (::send(fd, rec.data(), rec.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(rec.size()))
      continue;
    std::vector<std::uint8_t> got;
    poll_until(
        s,
        [&] {
          std::uint8_t b[256];
          const ssize_t n = ::recv(fd, b, sizeof b, MSG_DONTWAIT);
          if (n > 0) got.insert(got.end(), b, b + n);
          return got.size() >= rec.size() || n == 0;
        },
        2);
    served += got == rec;
  }
  EXPECT_EQ(served, 4);
  for (const int fd : fds) ::close(fd);
}

// A connection that sends half a record marker and nothing more is closed at its deadline.
TEST(RpcTcpServer, SilentConnectionIsClosedAtItsDeadline) {
  RpcTcpServer s(echo);
  s.idle_timeout_ms = 300;
  const std::uint16_t port = listen_on(s);
  const int fd = connect_to(port);
  const std::uint8_t half[2] = {0x80, 0};
  ASSERT_EQ(::send(fd, half, 2, 0), 2);
  poll_until(
      s, [&] { return s.clients() == 1; }, 1);
  poll_until(
      s, [&] { return s.clients() == 0; }, 2);
  EXPECT_EQ(s.clients(), 0u);
  EXPECT_TRUE(closed_by_peer(fd));
  ::close(fd);
}

// review-attack PoC: a connection that trickles one byte of a record per (deadline - e) used to
// never reach its deadline (progress moved it), and max_clients of them kept every other client
// out for good. The deadline is absolute now: each record must be whole within idle_timeout_ms.
TEST(RpcTcpServer, TricklingConnectionsHoldEverySlot) {
  RpcTcpServer s(echo);
  s.idle_timeout_ms = 300;
  s.max_clients = 2;
  const std::uint16_t port = listen_on(s);
  std::vector<int> slow = {connect_to(port), connect_to(port)};
  poll_until(
      s, [&] { return s.clients() == 2; }, 1);
  const auto rec = record(9, 400);  // a whole call, sent one byte every 200 ms
  std::size_t off = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(3000);
  auto next = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < end) {
    if (std::chrono::steady_clock::now() >= next) {
      for (const int fd : slow) ::send(fd, rec.data() + off, 1, MSG_NOSIGNAL);
      ++off;
      next += std::chrono::milliseconds(200);
    }
    s.poll();
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  // 3 s = 10 deadlines later: both closed at their first deadline, and a real client is served.
  EXPECT_EQ(s.stats().timed_out, 2u);
  EXPECT_TRUE(closed_by_peer(slow[0]));
  EXPECT_TRUE(closed_by_peer(slow[1]));
  const int fd = connect_to(port);
  poll_until(
      s, [] { return false; }, 0.2);
  EXPECT_FALSE(closed_by_peer(fd)) << "a newcomer is refused: the tricklers hold every slot";
  for (const int f : slow) ::close(f);
  ::close(fd);
}

// A full table (deadlines far away) does not refuse a newcomer while a connection sits idle with
// part of a record: the one idle the longest is evicted; connections with a call under way are
// not, and when every one has, the newcomer is closed.
TEST(RpcTcpServer, AFullTableEvictsTheLongestIdle) {
  std::atomic<bool> release{false};
  RpcTcpServer s(
      [&](const CallContext&, std::span<const std::uint8_t> call, std::vector<std::uint8_t>& r) {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        echo({}, call, r);
      });
  s.max_clients = 2;
  const std::uint16_t port = listen_on(s);
  const int a = connect_to(port);
  poll_until(
      s, [&] { return s.clients() == 1; }, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int b = connect_to(port);
  poll_until(
      s, [&] { return s.clients() == 2; }, 1);
  const std::uint8_t half[3] = {0x80, 0, 0};
  ASSERT_EQ(::send(a, half, 3, 0), 3);  // a: the older, with part of a record
  const auto rec = record(5);
  ASSERT_EQ(::send(b, rec.data(), rec.size(), 0), static_cast<ssize_t>(rec.size()));
  poll_until(
      s, [] { return false; }, 0.1);  // b's call is at the (blocked) worker
  const int c = connect_to(port);
  poll_until(
      s, [&] { return s.stats().evicted == 1; }, 1);
  EXPECT_EQ(s.stats().evicted, 1u);
  EXPECT_EQ(s.stats().refused, 0u);
  EXPECT_TRUE(closed_by_peer(a));
  EXPECT_FALSE(closed_by_peer(b));
  ASSERT_EQ(::send(c, rec.data(), rec.size(), 0), static_cast<ssize_t>(rec.size()));
  poll_until(
      s, [] { return false; }, 0.1);  // c's call waits behind b's
  const int d = connect_to(port);     // b and c have calls under way: d is the one closed
  poll_until(
      s, [&] { return s.stats().refused == 1; }, 1);
  EXPECT_EQ(s.stats().refused, 1u);
  EXPECT_TRUE(closed_by_peer(d));
  release = true;
  std::vector<std::uint8_t> got;
  poll_until(
      s,
      [&] {
        std::uint8_t buf[256];
        const ssize_t n = ::recv(c, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) got.insert(got.end(), buf, buf + n);
        return got.size() >= rec.size();
      },
      2);
  EXPECT_EQ(got, rec);
  for (const int f : {a, b, c, d}) ::close(f);
}

// One address may hold max_per_peer connections; beyond, its newcomer is closed (and evicts
// nobody else's).
TEST(RpcTcpServer, CapsConnectionsPerPeer) {
  RpcTcpServer s(echo);
  s.max_per_peer = 2;
  const std::uint16_t port = listen_on(s);
  std::vector<int> fds;
  for (int k = 0; k < 3; ++k) fds.push_back(connect_to(port));
  poll_until(
      s, [&] { return s.stats().refused_peer == 1; }, 1);
  EXPECT_EQ(s.clients(), 2u);
  EXPECT_EQ(s.stats().refused_peer, 1u);
  EXPECT_EQ(s.stats().evicted, 0u);
  EXPECT_TRUE(closed_by_peer(fds[2]));
  for (const int f : fds) ::close(f);
}

// MOUNT does not listen on every address unless told: the service's default is loopback, and
// roce-nfsd's is the address of its interface (loopback when it has none).
TEST(MountBinding, DefaultsToALocalAddress) {
  EXPECT_EQ(NfsServiceConfig{}.mount_address, "127.0.0.1");
  EXPECT_EQ(default_mount_address("lo"), "127.0.0.1");
  EXPECT_EQ(default_mount_address(""), "127.0.0.1");
  EXPECT_EQ(default_mount_address("no-such-interface0"), "127.0.0.1");
}

// An unprivileged service that would have to act as others, or lend its supplementary groups,
// refuses to start, saying why (a thread of uid 1000 here; raw syscalls are per thread).
TEST(NfsServiceUnprivileged, RefusesWhatItCannotServe) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to make a thread of another user)";
  ExportOptions self, rw;
  std::string err;
  ASSERT_TRUE(parse_export_options("rw,all_squash,anonuid=1000,anongid=1000", self, err));
  ASSERT_TRUE(parse_export_options("rw", rw, err));
  std::string with_group, without_group, other_ids;
  std::thread([&] {
    const std::uint32_t groups[] = {1000, 500};
    ASSERT_EQ(::syscall(SYS_setgroups, 2, groups), 0);
    ASSERT_EQ(::syscall(SYS_setresgid, 1000, 1000, 1000), 0);
    ASSERT_EQ(::syscall(SYS_setresuid, 1000, 1000, 1000), 0);
    try {
      check_unprivileged(self);
    } catch (const std::runtime_error& e) {
      with_group = e.what();
    }
    try {
      check_unprivileged(rw);
    } catch (const std::runtime_error& e) {
      other_ids = e.what();
    }
  }).join();
  std::thread([&] {
    const std::uint32_t groups[] = {1000};  // its own gid only: nothing to lend
    ASSERT_EQ(::syscall(SYS_setgroups, 1, groups), 0);
    ASSERT_EQ(::syscall(SYS_setresgid, 1000, 1000, 1000), 0);
    ASSERT_EQ(::syscall(SYS_setresuid, 1000, 1000, 1000), 0);
    try {
      check_unprivileged(self);
    } catch (const std::runtime_error& e) {
      without_group = e.what();
    }
  }).join();
  EXPECT_NE(with_group.find("groups 500"), std::string::npos) << with_group;
  EXPECT_NE(other_ids.find("all_squash,anonuid=1000,anongid=1000"), std::string::npos) << other_ids;
  EXPECT_EQ(without_group, "");
}

}  // namespace
}  // namespace roce::nfs
