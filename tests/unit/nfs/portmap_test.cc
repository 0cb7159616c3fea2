// The port mapper's answers (apps/nfs/portmap.h): PMAP v2 GETPORT and DUMP, RPCBIND v3/v4
// GETADDR as mount.nfs and the kernel ask them, and the refusals (SET, other versions,
// truncated arguments, not a call). And the client of the host's rpcbind against a fake one on
// a local socket with rpcbind's rules (SET refuses a second address for a program, version and
// netid; UNSET takes every address away): what it takes away at stop, an entry another server
// holds, an rpcbind that starts late.
#include "apps/nfs/portmap.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

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

/// rpcbind's registration rules on a local socket of its own (one call per connection, as
/// RpcbindClient makes them): SET of a program, version and netid already held at another
/// address is FALSE (at the same address TRUE); UNSET removes the program, version and netid at
/// whatever address (rpcbind's map_unset, a caller of uid 0 being "superuser"); DUMP lists all.
class FakeRpcbind {
 public:
  explicit FakeRpcbind(std::string path) : path_(std::move(path)) {}
  ~FakeRpcbind() { stop(); }
  void start() {
    ::unlink(path_.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path_.c_str(), path_.size() + 1);
    ASSERT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(fd_, 8), 0);
    stop_ = false;
    thread_ = std::thread([this] { serve(); });
  }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    ::unlink(path_.c_str());
  }
  /// What a host mountd does at its start: UNSET, then SET at its own address.
  void replace(RpcbEntry x) {
    std::lock_guard g(mu_);
    std::erase_if(table_, [&](const RpcbEntry& r) {
      return r.prog == x.prog && r.vers == x.vers && r.netid == x.netid;
    });
    table_.push_back(std::move(x));
  }
  std::vector<std::string> table() const {
    std::lock_guard g(mu_);
    std::vector<std::string> out;
    for (const auto& r : table_)
      out.push_back(std::to_string(r.prog) + " " + std::to_string(r.vers) + " " + r.netid + " " +
                    r.addr + " " + r.owner);
    return out;
  }
  int unsets() const { return unsets_; }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::uint8_t mk[4];
      Bytes call;
      if (::recv(c, mk, 4, MSG_WAITALL) == 4) {
        const std::uint32_t n = (std::uint32_t{mk[0]} << 24 | std::uint32_t{mk[1]} << 16 |
                                 std::uint32_t{mk[2]} << 8 | mk[3]) &
                                0x7fffffffu;
        call.resize(n);
        if (::recv(c, call.data(), n, MSG_WAITALL) != static_cast<ssize_t>(n)) call.clear();
      }
      Bytes reply(4);
      answer(call, reply);
      const std::uint32_t m = 0x80000000u | static_cast<std::uint32_t>(reply.size() - 4);
      for (int i = 0; i < 4; ++i)
        reply[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(m >> (24 - 8 * i));
      if (!call.empty()) (void)::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }
  void answer(const Bytes& call, Bytes& out) {
    XdrDecoder d(call);
    rpc::CallHeader h;
    if (!rpc::decode(d, h)) return;
    XdrEncoder e(out);
    rpc::ReplyHeader r;
    r.xid = h.xid;
    rpc::encode(e, r);
    std::lock_guard g(mu_);
    if (h.proc == 4) {  // DUMP
      for (const auto& x : table_) {
        e.boolean(true);
        e.u32(x.prog);
        e.u32(x.vers);
        e.string(x.netid);
        e.string(x.addr);
        e.string(x.owner);
      }
      e.boolean(false);
      return;
    }
    if (h.proc != 1 && h.proc != 2) return;  // NULL: the header alone
    RpcbEntry x;
    x.prog = d.u32();
    x.vers = d.u32();
    x.netid = d.string(64);
    x.addr = d.string(128);
    d.string(128);          // r_owner: rpcbind takes the caller's, never the argument
    x.owner = "superuser";  // uid 0 over the local socket
    bool ok = true;
    const auto same = [&](const RpcbEntry& t) {
      return t.prog == x.prog && t.vers == x.vers && (x.netid.empty() || t.netid == x.netid);
    };
    if (h.proc == 1) {
      for (const auto& t : table_)
        if (same(t)) ok = t.addr == x.addr;
      if (ok && std::none_of(table_.begin(), table_.end(), same)) table_.push_back(x);
    } else {
      ++unsets_;
      std::erase_if(table_, same);
    }
    e.boolean(ok);
  }
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{true};
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<RpcbEntry> table_;
  std::atomic<int> unsets_{0};
};

std::string fake_path(const char* what) {
  return "/tmp/rpcbind-test-" + std::to_string(::getpid()) + "-" + what + ".sock";
}
const PortmapEntry kMount = {v3::kMountProgram, 3, "tcp", "127.0.0.1", 20048};
const PortmapEntry kNfsRdma = {v3::kNfsProgram, 3, "rdma", "192.0.2.100", 20049};

// Review31a-4: rpcbind's UNSET takes away the program, version and netid at any address. A host
// mountd that (re)started after the service took MOUNT v3/tcp over (its UNSET and SET): the
// service, stopping, leaves it there and takes away only its own NFS entry.
TEST(Rpcbind, StopTakesAwayOnlyWhatIsStillOurs) {
  FakeRpcbind rb(fake_path("unset"));
  rb.start();
  std::vector<std::string> lines;
  {
    RpcbindClient c;
    c.unix_path = fake_path("unset");
    c.tcp_port = 0;
    c.log = [&](const std::string& m) { lines.push_back(m); };
    ASSERT_EQ(c.register_entry(kMount), RpcbindClient::Result::kRegistered);
    ASSERT_EQ(c.register_entry(kNfsRdma), RpcbindClient::Result::kRegistered);
    EXPECT_EQ(rb.table(), (std::vector<std::string>{"100005 3 tcp 127.0.0.1.78.80 superuser",
                                                    "100003 3 rdma 192.0.2.100.78.81 superuser"}));
    rb.replace({v3::kMountProgram, 3, "tcp", "0.0.0.0.78.80", "superuser"});  // a host mountd
  }
  EXPECT_EQ(rb.table(), std::vector<std::string>{"100005 3 tcp 0.0.0.0.78.80 superuser"})
      << "the host mountd's entry was taken away with ours";
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("alone"), std::string::npos) << lines.back();
}

// Review31u-N3: a host mountd registered before the service: its entry is reported (kTaken,
// with its address), never replaced, and left there at stop.
TEST(Rpcbind, AnotherServersEntryIsReportedAndLeftAlone) {
  FakeRpcbind rb(fake_path("taken"));
  rb.start();
  rb.replace({v3::kMountProgram, 3, "tcp", "0.0.0.0.3.233", "superuser"});
  {
    RpcbindClient c;
    c.unix_path = fake_path("taken");
    c.tcp_port = 0;
    RpcbEntry holder;
    EXPECT_EQ(c.register_entry(kMount, &holder), RpcbindClient::Result::kTaken);
    EXPECT_EQ(holder.addr, "0.0.0.0.3.233");
    EXPECT_EQ(c.register_entry(kNfsRdma), RpcbindClient::Result::kRegistered);
    // Left by a killed earlier run at our own address: taken over.
    rb.replace({v3::kNfsProgram, 3, "tcp", "127.0.0.1.8.1", "0"});
    EXPECT_EQ(c.register_entry({v3::kNfsProgram, 3, "tcp", "127.0.0.1", 2049}),
              RpcbindClient::Result::kRegistered);
  }
  EXPECT_EQ(rb.table(), std::vector<std::string>{"100005 3 tcp 0.0.0.0.3.233 superuser"});
  // The registrar hands the taken entries back to its caller (the service fails or warns).
  RpcbindRegistrar::Options o;
  o.unix_path = fake_path("taken");
  o.tcp_port = 0;
  RpcbindRegistrar reg(o, {kMount, kNfsRdma}, nullptr);
  const auto taken = reg.start();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].first.prog, v3::kMountProgram);
  EXPECT_EQ(taken[0].second.addr, "0.0.0.0.3.233");
  EXPECT_EQ(reg.counts().registered, 1u);
  EXPECT_EQ(reg.counts().taken, 1u);
}

// Review31u-N2: rpcbind not up yet when the service starts: registered once it answers, within
// the wait; never answering, given up (counted, said).
TEST(Rpcbind, RegistrarTriesAgainUntilRpcbindAnswers) {
  FakeRpcbind rb(fake_path("late"));
  std::vector<std::string> lines;
  std::mutex lm;
  RpcbindRegistrar::Options o;
  o.unix_path = fake_path("late");
  o.tcp_port = 0;
  o.retry_ms = 20;
  o.wait_ms = 10000;
  {
    RpcbindRegistrar reg(o, {kMount, kNfsRdma}, [&](const std::string& m) {
      std::lock_guard g(lm);
      lines.push_back(m);
    });
    EXPECT_TRUE(reg.start().empty());
    EXPECT_EQ(reg.counts().registered, 0u);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rb.start();
    reg.wait_idle();
    EXPECT_EQ(reg.counts().registered, 2u);
    EXPECT_GE(reg.counts().tries, 2u);
    EXPECT_EQ(rb.table().size(), 2u);
  }
  EXPECT_TRUE(rb.table().empty()) << "unregistered at stop";
  rb.stop();
  o.wait_ms = 100;
  RpcbindRegistrar never(o, {kMount}, [&](const std::string& m) {
    std::lock_guard g(lm);
    lines.push_back(m);
  });
  never.start();
  never.wait_idle();
  EXPECT_EQ(never.counts().given_up, 1u);
  std::lock_guard g(lm);
  EXPECT_NE(lines.back().find("gave up"), std::string::npos) << lines.back();
}

// `auto` answering as its own port mapper watches for an rpcbind that comes up after it (boot
// order, or one on IPv6 and its local socket alone) and registers with it too.
TEST(Rpcbind, OwnPortMapperRegistersWithAnRpcbindStartedLater) {
  FakeRpcbind rb(fake_path("watch"));
  RpcbindRegistrar::Options o;
  o.unix_path = fake_path("watch");
  o.tcp_port = 0;
  o.retry_ms = 20;
  o.wait_ms = 10000;
  o.watch = true;
  RpcbindRegistrar reg(o, {kMount, kNfsRdma}, nullptr);
  EXPECT_TRUE(reg.start().empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(reg.counts().tries, 0u) << "nothing is tried before rpcbind answers";
  rb.start();
  reg.wait_idle();
  EXPECT_EQ(reg.counts().registered, 2u);
}

// Review19-attacker 1: any uid may SET over rpcbind's local socket. An entry of ours held by
// another uid (not "superuser") is a squat: root takes it away and registers (counted); without
// privilege it is only reported (kTaken, a warning naming the uid).
TEST(Rpcbind, AnotherUidsEntryIsASquatRootTakesAway) {
  FakeRpcbind rb(fake_path("squat"));
  rb.start();
  rb.replace({v3::kMountProgram, 3, "tcp", "0.0.0.0.169.1", "65534"});
  std::vector<std::string> lines;
  {
    RpcbindClient c;
    c.unix_path = fake_path("squat");
    c.tcp_port = 0;
    c.privileged = false;
    c.log = [&](const std::string& m) { lines.push_back(m); };
    RpcbEntry holder;
    EXPECT_EQ(c.register_entry(kMount, &holder), RpcbindClient::Result::kTaken);
    EXPECT_EQ(holder.owner, "65534");
    ASSERT_FALSE(lines.empty());
    EXPECT_NE(lines.back().find("uid 65534"), std::string::npos) << lines.back();
    EXPECT_EQ(c.squats_removed(), 0u);
    c.privileged = true;
    EXPECT_EQ(c.register_entry(kMount, &holder), RpcbindClient::Result::kRegistered);
    EXPECT_EQ(c.squats_removed(), 1u);
    EXPECT_EQ(rb.table(), std::vector<std::string>{"100005 3 tcp 127.0.0.1.78.80 superuser"});
  }
  // Root's entry (a host mountd) stays a host mountd's, privileged or not.
  rb.replace({v3::kMountProgram, 3, "tcp", "0.0.0.0.3.233", "superuser"});
  RpcbindClient c;
  c.unix_path = fake_path("squat");
  c.tcp_port = 0;
  c.privileged = true;
  EXPECT_EQ(c.register_entry(kMount), RpcbindClient::Result::kTaken);
  EXPECT_EQ(c.squats_removed(), 0u);
}

// Review19-attacker 2: a table flooded with long addresses (past 64 KiB) is read whole; past
// max_reply, SET is tried without looking, the failure is named ("larger than"), and at stop
// what was registered here is taken away even though DUMP fails.
TEST(Rpcbind, FloodedTableIsReadOrNamedAndOursStillGoes) {
  FakeRpcbind rb(fake_path("flood"));
  rb.start();
  const std::string longaddr(250, '1');
  for (std::uint32_t v = 1; v <= 300; ++v) rb.replace({400000, v, "tcp", longaddr, "65534"});
  std::vector<std::string> lines;
  {
    RpcbindClient c;
    c.unix_path = fake_path("flood");
    c.tcp_port = 0;
    c.log = [&](const std::string& m) { lines.push_back(m); };
    const auto all = c.dump();
    ASSERT_TRUE(all.has_value());
    EXPECT_EQ(all->size(), 300u);
    EXPECT_EQ(c.register_entry(kMount), RpcbindClient::Result::kRegistered);
    c.max_reply = 64 * 1024;
    EXPECT_FALSE(c.dump().has_value());
    EXPECT_NE(c.failure_text().find("larger than"), std::string::npos) << c.failure_text();
    EXPECT_EQ(c.register_entry(kNfsRdma), RpcbindClient::Result::kRegistered);
    EXPECT_EQ(rb.table().size(), 302u);
  }
  EXPECT_EQ(rb.table().size(), 300u) << "our two entries are left after stop";
  for (const auto& l : lines) EXPECT_EQ(l.find("no answer"), std::string::npos) << l;
}

}  // namespace
}  // namespace roce::nfs
