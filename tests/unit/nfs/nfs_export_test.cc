// The NFS server's export as exports(5) describes it, driven with calls encoded as the Linux
// client sends them (AUTH_SYS with the caller's uid, gid and groups): the option and client list
// syntax; clients outside the list refused (MNT3ERR_ACCES for MNT, AUTH_ERROR for NFS as knfsd
// answers); read-only by default (NFS3ERR_ROFS); root squashed to the anonymous ids; the
// caller's identity deciding what it may do (the kernel's own rules through setfsuid, so a
// non-owner cannot chmod, a user cannot give a file away, a write clears the setuid bit); ACCESS
// answering what that identity may really do. The identity tests need root (as roced runs).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "apps/nfs/nfs_server.h"

namespace roce::nfs {
namespace {

using namespace v3;
using Bytes = std::vector<std::uint8_t>;
constexpr wire::Ipv4Addr kClient{0xC0000202};  // 192.0.2.2

rpc::OpaqueAuth as(std::uint32_t uid, std::uint32_t gid, std::vector<std::uint32_t> groups = {}) {
  return rpc::auth_sys({1, "client", uid, gid, std::move(groups)});
}

class NfsExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("nfs_export_test." + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "hello") << "hello world";
    ::chmod((dir_ / "hello").c_str(), 0644);
    ::chmod(dir_.c_str(), 0777);  // anyone may make files in the root
  }
  void TearDown() override {
    srv_.reset();
    std::filesystem::remove_all(dir_);
  }
  void serve(const std::string& options, const std::string& clients = "*") {
    ExportOptions o;
    std::string err;
    ASSERT_TRUE(parse_export_options(options, o, err)) << err;
    ASSERT_TRUE(parse_clients(clients, o, err)) << err;
    srv_ = std::make_unique<NfsServer>(dir_.string(), "/", o);
    root_ = srv_->root_fh();
  }
  bool root() const { return ::geteuid() == 0; }

  template <class F>
  RpcReply call(std::uint32_t proc, F&& args, std::uint32_t prog = kNfsProgram) {
    Bytes b;
    XdrEncoder e(b);
    rpc::CallHeader h;
    h.xid = ++xid_;
    h.prog = prog;
    h.vers = prog == kMountProgram ? kMountVersion : kNfsVersion;
    h.proc = proc;
    h.cred = cred_;
    rpc::encode(e, h);
    args(e);
    RpcReply r;
    if (prog == kMountProgram)
      srv_->handle_mount(ctx_, b, r);
    else
      srv_->handle(ctx_, b, r);
    // Whatever the call did, the thread is itself again afterwards.
    EXPECT_EQ(::syscall(SYS_setfsuid, -1), static_cast<long>(::geteuid()));
    EXPECT_EQ(::syscall(SYS_setfsgid, -1), static_cast<long>(::getegid()));
    return r;
  }
  static XdrDecoder results(const RpcReply& r, rpc::ReplyHeader* out = nullptr) {
    XdrDecoder d(r.msg);
    rpc::ReplyHeader h;
    EXPECT_TRUE(rpc::decode(d, h));
    if (out) *out = h;
    return d;
  }
  Fh lookup(const std::string& name) {
    auto r = call(kLookup, [&](XdrEncoder& e) {
      encode(e, root_);
      e.string(name);
    });
    XdrDecoder d = results(r);
    const LookupRes l = decode_lookup(d);
    EXPECT_EQ(l.status, kOk) << name;
    return l.fh;
  }
  CreateRes create(const std::string& name, std::uint32_t mode) {
    auto r = call(kCreate, [&](XdrEncoder& e) {
      encode(e, root_);
      e.string(name);
      e.u32(kGuarded);
      encode(e, Sattr{mode, {}, {}, {}, false, false, {}, {}});
    });
    XdrDecoder d = results(r);
    return decode_create(d);
  }
  Status write(const Fh& fh, const std::string& data) {
    auto r = call(kWrite, [&](XdrEncoder& e) {
      encode(e, fh);
      e.u64(0);
      e.u32(static_cast<std::uint32_t>(data.size()));
      e.u32(kFileSync);
      e.opaque(std::span(reinterpret_cast<const std::uint8_t*>(data.data()), data.size()));
    });
    XdrDecoder d = results(r);
    return decode_write(d).status;
  }
  Status setattr(const Fh& fh, const Sattr& s) {
    auto r = call(kSetattr, [&](XdrEncoder& e) {
      encode(e, fh);
      encode(e, s);
      e.boolean(false);
    });
    XdrDecoder d = results(r);
    return static_cast<Status>(d.u32());
  }
  std::uint32_t access(const Fh& fh, std::uint32_t want) {
    auto r = call(kAccess, [&](XdrEncoder& e) {
      encode(e, fh);
      e.u32(want);
    });
    XdrDecoder d = results(r);
    if (d.u32() != kOk) return 0xdead;
    decode_post_op(d);
    return d.u32();
  }
  struct stat host_stat(const std::string& name) {
    struct stat s {};
    ::lstat((dir_ / name).c_str(), &s);
    return s;
  }

  std::filesystem::path dir_;
  std::unique_ptr<NfsServer> srv_;
  Fh root_;
  std::uint32_t xid_ = 0;
  CallContext ctx_{kClient};
  rpc::OpaqueAuth cred_ = as(::geteuid(), ::getegid());
};

// ACCESS3 bits.
constexpr std::uint32_t kAcRead = 1, kAcLookup = 2, kAcModify = 4, kAcExtend = 8, kAcDelete = 0x10,
                        kAcExecute = 0x20;

TEST_F(NfsExportTest, OptionsAndClientsParseAsExports5) {
  ExportOptions o;
  std::string err;
  EXPECT_FALSE(o.rw);
  EXPECT_TRUE(o.root_squash);
  EXPECT_TRUE(o.allows(wire::Ipv4Addr{0x01020304}));  // everyone unless a list is given
  ASSERT_TRUE(parse_export_options("rw,no_root_squash,anonuid=1000,anongid=100", o, err));
  EXPECT_TRUE(o.rw);
  EXPECT_FALSE(o.root_squash);
  EXPECT_EQ(o.anonuid, 1000u);
  EXPECT_EQ(o.anongid, 100u);
  ASSERT_TRUE(parse_export_options("ro,all_squash,sync,no_subtree_check", o, err));
  EXPECT_FALSE(o.rw);
  EXPECT_TRUE(o.all_squash);
  for (const char* bad :
       {"rx", "anonuid=", "anonuid=-1", "anonuid=4294967295", "rw=1", "anongid=12a", "rw,,ro"}) {
    ExportOptions x;
    EXPECT_FALSE(parse_export_options(bad, x, err)) << bad;
    EXPECT_FALSE(err.empty());
  }
  ASSERT_TRUE(parse_clients("192.0.2.0/24,198.18.0.5", o, err));
  EXPECT_TRUE(o.allows(wire::Ipv4Addr{0xC0000263}));   // 192.0.2.99
  EXPECT_TRUE(o.allows(wire::Ipv4Addr{0xC6120005}));   // 198.18.0.5
  EXPECT_FALSE(o.allows(wire::Ipv4Addr{0xC6120006}));  // 198.18.0.6
  EXPECT_FALSE(o.allows(wire::Ipv4Addr{0xC0000302}));  // 192.0.3.2
  for (const char* bad :
       {"", "192.0.2.0/33", "192.0.2", "host.example", "192.0.2.1/", "1.2.3.4,"}) {
    ExportOptions x;
    EXPECT_FALSE(parse_clients(bad, x, err)) << bad;
    EXPECT_TRUE(x.allows(wire::Ipv4Addr{0x01020304})) << "a bad list changes nothing";
  }
  ASSERT_TRUE(parse_clients("*", o, err));
  EXPECT_TRUE(o.allows(wire::Ipv4Addr{0x01020304}));
}

// exports(5)'s other common options do not stop the service (secure is exports(5)'s default);
// a client list may say addr/netmask as exports(5) does.
TEST_F(NfsExportTest, CommonExports5OptionsAndNetmasksAreAccepted) {
  std::string err;
  for (const char* ok :
       {"secure", "insecure", "async", "sync", "wdelay", "no_wdelay", "subtree_check",
        "no_subtree_check", "hide", "nohide", "crossmnt", "fsid=0", "fsid=7", "fsid=root",
        "sec=sys", "rw,secure,async,no_subtree_check,fsid=1,sec=sys"}) {
    ExportOptions x;
    EXPECT_TRUE(parse_export_options(ok, x, err)) << ok << ": " << err;
  }
  ExportOptions x;
  std::vector<std::string> warnings;
  EXPECT_TRUE(parse_export_options("rw,async,no_subtree_check,crossmnt,sync", x, err, &warnings));
  EXPECT_TRUE(x.rw);
  // One line for each option that asks for what is not done here, none for the others.
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("async"), std::string::npos);
  EXPECT_NE(warnings[1].find("crossmnt"), std::string::npos);
  for (const char* bad : {"sec=krb5", "fsid=", "secure=1", "nosuch"}) {
    ExportOptions y;
    EXPECT_FALSE(parse_export_options(bad, y, err)) << bad;
  }
  EXPECT_NE(err.find("crossmnt"), std::string::npos) << "the error lists what is accepted: " << err;
  ExportOptions o;
  ASSERT_TRUE(parse_clients("192.0.2.0/255.255.255.0,198.18.0.0/255.254.0.0", o, err)) << err;
  EXPECT_TRUE(o.allows(wire::Ipv4Addr{0xC0000263}));   // 192.0.2.99
  EXPECT_FALSE(o.allows(wire::Ipv4Addr{0xC0000302}));  // 192.0.3.2
  EXPECT_TRUE(o.allows(wire::Ipv4Addr{0xC6130001}));   // 198.19.0.1
  for (const char* bad :
       {"192.0.2.0/255.0.255.0", "192.0.2.0/0.0.0.255", "192.0.2.0/255.255.255"}) {
    ExportOptions y;
    EXPECT_FALSE(parse_clients(bad, y, err)) << bad;
  }
}

TEST_F(NfsExportTest, ClientsOutsideTheListAreRefused) {
  serve("rw,no_root_squash", "192.0.2.0/24");
  ctx_.peer = wire::Ipv4Addr{0xC6120009};  // 198.18.0.9
  auto m = call(
      kMnt, [](XdrEncoder& e) { e.string("/"); }, kMountProgram);
  XdrDecoder md = results(m);
  EXPECT_EQ(decode_mount(md).status, 13u);  // MNT3ERR_ACCES, as mountd answers
  // NFS calls (with a handle learnt elsewhere): AUTH_ERROR, AUTH_BADCRED, as knfsd answers a
  // client it has no export for; NULL is answered.
  rpc::ReplyHeader h;
  auto g = call(kGetattr, [&](XdrEncoder& e) { encode(e, root_); });
  results(g, &h);
  EXPECT_EQ(h.stat, rpc::kMsgDenied);
  EXPECT_EQ(h.reject, rpc::kAuthError);
  EXPECT_EQ(h.auth, rpc::kAuthBadCred);
  auto w = call(kRemove, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string("hello");
  });
  results(w, &h);
  EXPECT_EQ(h.stat, rpc::kMsgDenied);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "hello"));
  EXPECT_EQ(srv_->mount_denied(), 1u);
  EXPECT_EQ(srv_->stats().denied, 2u);
  auto n = call(kNull, [](XdrEncoder&) {});
  results(n, &h);
  EXPECT_EQ(h.stat, rpc::kMsgAccepted);
  // A client in the list mounts.
  ctx_.peer = wire::Ipv4Addr{0xC0000263};
  auto ok = call(
      kMnt, [](XdrEncoder& e) { e.string("/"); }, kMountProgram);
  XdrDecoder okd = results(ok);
  EXPECT_EQ(decode_mount(okd).status, 0u);
  auto g2 = call(kGetattr, [&](XdrEncoder& e) { encode(e, root_); });
  XdrDecoder g2d = results(g2);
  EXPECT_EQ(g2d.u32(), kOk);
}

TEST_F(NfsExportTest, ReadOnlyUnlessRw) {
  serve("no_root_squash");  // ro by default
  const Fh hello = lookup("hello");
  EXPECT_EQ(write(hello, "HELLO"), kErrRofs);
  EXPECT_EQ(create("new", 0644).status, kErrRofs);
  EXPECT_EQ(setattr(hello, Sattr{0777, {}, {}, {}, false, false, {}, {}}), kErrRofs);
  auto rm = call(kRemove, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string("hello");
  });
  XdrDecoder rmd = results(rm);
  EXPECT_EQ(rmd.u32(), kErrRofs);
  auto mk = call(kMkdir, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string("d");
    encode(e, Sattr{});
  });
  XdrDecoder mkd = results(mk);
  EXPECT_EQ(mkd.u32(), kErrRofs);
  EXPECT_EQ(host_stat("hello").st_mode & 07777, 0644u);
  EXPECT_EQ(host_stat("hello").st_size, 11);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "new"));
  // ACCESS grants reading, never changing.
  EXPECT_EQ(access(hello, 0x3f) & (kAcModify | kAcExtend | kAcDelete), 0u);
  EXPECT_EQ(access(hello, 0x3f) & kAcRead, kAcRead);
}

// Review17 item 9: the export's options replaced while it serves (roce-nfsd's SIGHUP, an
// exports file that changed): the calls after see them, through the same handles, no restart.
// ro to rw (WRITE then succeeds), a client added to the list (MNT and calls then allowed) and
// removed again (AUTH_ERROR for its next call), the squash changed (the next file's owner).
TEST_F(NfsExportTest, OptionsReloadedApplyToTheNextCalls) {
  serve("no_root_squash", "198.18.0.0/15");
  const auto reload = [&](const std::string& options, const std::string& clients) {
    ExportOptions o;
    std::string err;
    ASSERT_TRUE(parse_export_options(options, o, err)) << err;
    ASSERT_TRUE(parse_clients(clients, o, err)) << err;
    srv_->set_options(o);
  };
  const auto mnt = [&] {
    auto m = call(
        kMnt, [](XdrEncoder& e) { e.string("/"); }, kMountProgram);
    XdrDecoder md = results(m);
    return decode_mount(md).status;
  };
  EXPECT_EQ(mnt(), 13u) << "192.0.2.2 is not listed yet";
  reload("no_root_squash", "198.18.0.0/15,192.0.2.0/24");
  EXPECT_EQ(mnt(), 0u);
  const Fh hello = lookup("hello");
  EXPECT_EQ(write(hello, "HELLO"), kErrRofs);
  reload("rw,no_root_squash", "192.0.2.0/24");
  EXPECT_EQ(write(hello, "HELLO"), kOk) << "rw applies to the handle the client holds";
  EXPECT_EQ(host_stat("hello").st_size, 11);
  if (root()) {
    reload("rw,all_squash,anonuid=1234,anongid=4321", "192.0.2.0/24");
    ASSERT_EQ(create("squashed", 0644).status, kOk);
    EXPECT_EQ(host_stat("squashed").st_uid, 1234u);
  }
  reload("rw", "198.18.0.0/15");
  rpc::ReplyHeader h;
  auto g = call(kGetattr, [&](XdrEncoder& e) { encode(e, root_); });
  results(g, &h);
  EXPECT_EQ(h.stat, rpc::kMsgDenied) << "a client taken off the list is refused at once";
  EXPECT_FALSE(srv_->allows(ctx_.peer));
}

TEST_F(NfsExportTest, RootIsSquashedToTheAnonymousIds) {
  serve("rw");  // root_squash by default
  EXPECT_EQ(srv_->acts_as_callers(), root());
  if (!root()) {
    // Unprivileged: a call as somebody else is refused, not served as the process's user.
    cred_ = as(0, 0);
    rpc::ReplyHeader h;
    auto c = call(kCreate, [&](XdrEncoder& e) {
      encode(e, root_);
      e.string("byroot");
      e.u32(kGuarded);
      encode(e, Sattr{});
    });
    results(c, &h);
    EXPECT_EQ(h.accept, rpc::kSystemErr);
    EXPECT_FALSE(std::filesystem::exists(dir_ / "byroot"));
    GTEST_SKIP() << "needs root (setfsuid)";
  }
  cred_ = as(0, 0);
  const CreateRes c = create("byroot", 04755);
  ASSERT_EQ(c.status, kOk);
  EXPECT_EQ(host_stat("byroot").st_uid, 65534u);
  EXPECT_EQ(host_stat("byroot").st_gid, 65534u);
  // root's file is not squashed root's to change.
  const Fh hello = lookup("hello");
  EXPECT_EQ(setattr(hello, Sattr{07777, {}, {}, {}, false, false, {}, {}}), kErrPerm);
  EXPECT_EQ(host_stat("hello").st_mode & 07777, 0644u);
  EXPECT_EQ(write(hello, "HELLO"), kErrAcces);
  // AUTH_NONE is the anonymous ids too; all_squash maps everyone to anonuid/anongid.
  cred_ = rpc::OpaqueAuth{};
  ASSERT_EQ(create("bynone", 0644).status, kOk);
  EXPECT_EQ(host_stat("bynone").st_uid, 65534u);
  serve("rw,all_squash,anonuid=1234,anongid=4321");
  cred_ = as(1000, 1000);
  ASSERT_EQ(create("squashed", 0644).status, kOk);
  EXPECT_EQ(host_stat("squashed").st_uid, 1234u);
  EXPECT_EQ(host_stat("squashed").st_gid, 4321u);
  // no_root_squash keeps root.
  serve("rw,no_root_squash");
  cred_ = as(0, 0);
  ASSERT_EQ(create("asroot", 0600).status, kOk);
  EXPECT_EQ(host_stat("asroot").st_uid, 0u);
}

TEST_F(NfsExportTest, TheCallerIsWhoTheKernelChecks) {
  if (!root()) GTEST_SKIP() << "needs root (setfsuid)";
  serve("rw");
  cred_ = as(1000, 1000);
  // A file of root's, 0644: readable, not writable, not the user's to chmod.
  const Fh hello = lookup("hello");
  EXPECT_EQ(write(hello, "HELLO"), kErrAcces);
  EXPECT_EQ(setattr(hello, Sattr{0666, {}, {}, {}, false, false, {}, {}}), kErrPerm);
  EXPECT_EQ(setattr(hello, Sattr{{}, {}, {}, std::uint64_t{0}, false, false, {}, {}}), kErrAcces);
  EXPECT_EQ(host_stat("hello").st_size, 11);
  EXPECT_EQ(access(hello, kAcRead | kAcModify | kAcExtend | kAcExecute), kAcRead);
  EXPECT_EQ(access(root_, kAcRead | kAcLookup | kAcModify | kAcExtend | kAcDelete),
            kAcRead | kAcLookup | kAcModify | kAcExtend | kAcDelete);  // the root is 0777
  // The user's own file: created as the user; a setuid bit the user sets goes on the first
  // write (the kernel clears it for a writer without CAP_FSETID); giving it away is refused.
  const CreateRes c = create("mine", 0755);
  ASSERT_EQ(c.status, kOk);
  EXPECT_EQ(host_stat("mine").st_uid, 1000u);
  EXPECT_EQ(host_stat("mine").st_gid, 1000u);
  EXPECT_EQ(setattr(*c.fh, Sattr{04755, {}, {}, {}, false, false, {}, {}}), kOk);
  EXPECT_EQ(host_stat("mine").st_mode & 07777, 04755u);
  EXPECT_EQ(write(*c.fh, "#!/bin/sh\n"), kOk);
  EXPECT_EQ(host_stat("mine").st_mode & 07777, 0755u);
  EXPECT_EQ(setattr(*c.fh, Sattr{{}, std::uint32_t{1001}, {}, {}, false, false, {}, {}}), kErrPerm);
  EXPECT_EQ(setattr(*c.fh, Sattr{{}, std::uint32_t{0}, {}, {}, false, false, {}, {}}), kErrPerm);
  EXPECT_EQ(host_stat("mine").st_uid, 1000u);
  // The owner may give the file to a group of its own; the kernel drops the setuid bit then.
  EXPECT_EQ(setattr(*c.fh, Sattr{04755, {}, {}, {}, false, false, {}, {}}), kOk);
  cred_ = as(1000, 1000, {20});
  EXPECT_EQ(setattr(*c.fh, Sattr{{}, {}, std::uint32_t{20}, {}, false, false, {}, {}}), kOk);
  EXPECT_EQ(host_stat("mine").st_gid, 20u);
  EXPECT_EQ(host_stat("mine").st_mode & 07777, 0755u);
  EXPECT_EQ(setattr(*c.fh, Sattr{{}, {}, std::uint32_t{30}, {}, false, false, {}, {}}), kErrPerm);
  // Supplementary groups count: root:500 0660 is readable with 500 among the groups only.
  ASSERT_EQ(::chown((dir_ / "hello").c_str(), 0, 500), 0);
  ASSERT_EQ(::chmod((dir_ / "hello").c_str(), 0660), 0);
  EXPECT_EQ(access(hello, kAcRead), 0u);
  cred_ = as(1000, 1000, {20, 500});
  EXPECT_EQ(access(hello, kAcRead | kAcModify), kAcRead | kAcModify);
  EXPECT_EQ(write(hello, "HELLO"), kOk);
  // A user may not remove another's file from a sticky directory.
  ASSERT_EQ(::chmod(dir_.c_str(), 01777), 0);
  cred_ = as(1001, 1001);
  auto rm = call(kRemove, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string("mine");
  });
  XdrDecoder rmd = results(rm);
  EXPECT_EQ(rmd.u32(), kErrPerm);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "mine"));
}

TEST_F(NfsExportTest, TheOwnerMayReadAndWriteItsFileWhateverItsMode) {
  if (!root()) GTEST_SKIP() << "needs root (setfsuid)";
  serve("rw");
  cred_ = as(1000, 1000);
  // A client's open(O_CREAT | O_WRONLY, 0444) then writes through its descriptor: knfsd lets
  // the owner (NFSD_MAY_OWNER_OVERRIDE). The write is still the caller's: setuid goes.
  const CreateRes c = create("ro-mine", 04444);
  ASSERT_EQ(c.status, kOk);
  EXPECT_EQ(host_stat("ro-mine").st_mode & 07777, 04444u);
  EXPECT_EQ(write(*c.fh, "data"), kOk);
  EXPECT_EQ(host_stat("ro-mine").st_size, 4);
  EXPECT_EQ(host_stat("ro-mine").st_mode & 07777, 0444u);
  EXPECT_EQ(setattr(*c.fh, Sattr{{}, {}, {}, std::uint64_t{1}, false, false, {}, {}}), kOk);
  EXPECT_EQ(host_stat("ro-mine").st_size, 1);
  // ACCESS still says what the mode says; and another user gets nothing of it.
  EXPECT_EQ(access(*c.fh, kAcRead | kAcModify), kAcRead);
  ASSERT_EQ(::chmod((dir_ / "ro-mine").c_str(), 0), 0);
  cred_ = as(1001, 1001);
  EXPECT_EQ(write(*c.fh, "x"), kErrAcces);
  auto rd = call(v3::kRead, [&](XdrEncoder& e) {
    encode(e, *c.fh);
    e.u64(0);
    e.u32(10);
  });
  XdrDecoder rdd = results(rd);
  EXPECT_EQ(rdd.u32(), kErrAcces);
  EXPECT_FALSE(rd.has_payload);
}

TEST_F(NfsExportTest, MalformedCredentialsAreRefused) {
  serve("rw,no_root_squash");
  rpc::ReplyHeader h;
  cred_.flavor = rpc::kAuthSys;
  cred_.body = {0, 0, 0, 1};  // a stamp and nothing else
  auto g = call(kGetattr, [&](XdrEncoder& e) { encode(e, root_); });
  results(g, &h);
  EXPECT_EQ(h.stat, rpc::kMsgDenied);
  EXPECT_EQ(h.reject, rpc::kAuthError);
  EXPECT_EQ(h.auth, rpc::kAuthBadCred);
}

// A caller whose uid and gid are the server's own gets its own groups, not the server's: an
// unprivileged server (a thread of uid 1000 here, in group 500 besides its own) with
// all_squash,anonuid=1000,anongid=1000 used to skip setgroups, so that every caller read what
// group 500 may. The squashed caller has no supplementary groups (as knfsd's); a server that
// cannot drop its groups answers SYSTEM_ERR rather than lend them.
TEST_F(NfsExportTest, ACallerAsTheServersIdsDoesNotGetItsGroups) {
  if (!root()) GTEST_SKIP() << "needs root (to make a thread of another user)";
  ASSERT_EQ(::chown(dir_.c_str(), 0, 500), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0770), 0);  // group 500 only
  rpc::ReplyHeader h;
  std::uint32_t bits = 0;
  std::thread([&] {
    // Per thread (raw syscalls, not glibc's process-wide wrappers): groups {500}, then 1000:1000.
    const std::uint32_t groups[] = {500};
    ASSERT_EQ(::syscall(SYS_setgroups, 1, groups), 0);
    ASSERT_EQ(::syscall(SYS_setresgid, 1000, 1000, 1000), 0);
    ASSERT_EQ(::syscall(SYS_setresuid, 1000, 1000, 1000), 0);
    serve("all_squash,anonuid=1000,anongid=1000");
    ASSERT_FALSE(srv_->acts_as_callers());
    auto r = call(kAccess, [&](XdrEncoder& e) {
      encode(e, root_);
      e.u32(kAcRead | kAcLookup);
    });
    XdrDecoder d = results(r, &h);
    if (h.accept == rpc::kSuccess && d.u32() == kOk) {
      decode_post_op(d);
      bits = d.u32();
    }
  }).join();
  EXPECT_EQ(bits & (kAcRead | kAcLookup), 0u) << "the caller read the root with the server's group";
  EXPECT_EQ(h.accept, rpc::kSystemErr);
}

TEST_F(NfsExportTest, ACallAsLinuxEncodesIt) {
  if (!root()) GTEST_SKIP() << "needs root (setfsuid)";
  serve("rw");
  // CREATE "k" as net/sunrpc/auth_unix.c and fs/nfs/nfs3xdr.c lay it out, written out word by
  // word: AUTH_UNIX with stamp 0, the node name, fsuid 1000, fsgid 1000 and two groups; an
  // AUTH_NULL verifier; the directory's handle, the name, UNCHECKED, a sattr3 with the mode only.
  Bytes b;
  const auto w = [&](std::initializer_list<std::uint32_t> words) {
    for (std::uint32_t v : words)
      for (int i = 3; i >= 0; --i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  };
  w({0x5eed0001, 0, 2, 100003, 3, 8});                 // xid, CALL, RPC 2, NFS 3, CREATE
  w({1, 36, 0, 5, 0x72786576, 0x6d000000});            // AUTH_UNIX, 36 bytes: stamp, "rxevm"
  w({1000, 1000, 2, 1000, 27});                        // uid, gid, groups
  w({0, 0});                                           // AUTH_NULL verifier
  w({static_cast<std::uint32_t>(root_.data.size())});  // the directory's handle
  b.insert(b.end(), root_.data.begin(), root_.data.end());
  b.insert(b.end(), xdr_pad(root_.data.size()), 0);
  w({1, 0x6b000000, 0});        // "k", UNCHECKED
  w({1, 0640, 0, 0, 0, 0, 0});  // mode 0640; uid, gid, size, atime, mtime unset
  RpcReply r;
  srv_->handle(ctx_, b, r);
  rpc::ReplyHeader h;
  XdrDecoder d = results(r, &h);
  ASSERT_EQ(h.stat, rpc::kMsgAccepted);
  ASSERT_EQ(h.accept, rpc::kSuccess);
  ASSERT_EQ(decode_create(d).status, kOk);
  EXPECT_EQ(host_stat("k").st_uid, 1000u);
  EXPECT_EQ(host_stat("k").st_gid, 1000u);
  EXPECT_EQ(host_stat("k").st_mode & 07777, 0640u);
  EXPECT_EQ(::syscall(SYS_setfsuid, -1), 0);
}

}  // namespace
}  // namespace roce::nfs
