// The NFSv3 and MOUNT server over a temporary directory, driven with encoded calls: MNT, LOOKUP,
// CREATE, WRITE, READ (the data apart from the reply, as the RPC-over-RDMA transport needs it),
// READDIRPLUS, REMOVE, MKDIR/RMDIR; and the refusals: stale handles, names with '/', other
// programs and versions, truncated arguments (GARBAGE_ARGS), not an RPC call (no reply), and
// symbolic links that lead out of the export.
#include "apps/nfs/nfs_server.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace roce::nfs {
namespace {

using namespace v3;
using Bytes = std::vector<std::uint8_t>;

class NfsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("nfs_server_test." + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "hello") << "hello world";
    // The tests of the procedures run as root on a read-write export that keeps root as root.
    ExportOptions o;
    o.rw = true;
    o.root_squash = false;
    srv_ = std::make_unique<NfsServer>(dir_.string(), "/export", o);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// A call of `proc` with the arguments `args` writes; returns the reply's decoder state.
  template <class F>
  RpcReply call(std::uint32_t proc, F&& args, std::uint32_t prog = kNfsProgram,
                std::uint32_t vers = kNfsVersion) {
    Bytes b;
    XdrEncoder e(b);
    rpc::CallHeader h;
    h.xid = ++xid_;
    h.prog = prog;
    h.vers = vers;
    h.proc = proc;
    // The test's own ids: root when run as root (as roced), else what an unprivileged server
    // may be.
    h.cred = rpc::auth_sys({1, "t", ::geteuid(), ::getegid(), {}});
    rpc::encode(e, h);
    args(e);
    RpcReply r;
    if (prog == kMountProgram)
      srv_->handle_mount(ctx_, b, r);
    else
      srv_->handle(ctx_, b, r);
    return r;
  }
  /// The reply's results (after an accepted SUCCESS header).
  static XdrDecoder results(const RpcReply& r, rpc::ReplyHeader* out = nullptr) {
    XdrDecoder d(r.msg);
    rpc::ReplyHeader h;
    EXPECT_TRUE(rpc::decode(d, h));
    if (out) *out = h;
    return d;
  }

  std::filesystem::path dir_;
  std::unique_ptr<NfsServer> srv_;
  std::uint32_t xid_ = 0;
  CallContext ctx_{wire::Ipv4Addr{0xC0000202}};  // 192.0.2.2
};

TEST_F(NfsServerTest, MountLookupReadWriteCreateRemove) {
  auto m = call(
      kMnt, [](XdrEncoder& e) { e.string("/export"); }, kMountProgram, kMountVersion);
  XdrDecoder md = results(m);
  const MountRes mr = decode_mount(md);
  ASSERT_EQ(mr.status, 0u);
  ASSERT_EQ(mr.flavors, std::vector<std::uint32_t>{rpc::kAuthSys});
  const Fh root = mr.fh;

  auto l = call(kLookup, [&](XdrEncoder& e) {
    encode(e, root);
    e.string("hello");
  });
  XdrDecoder ld = results(l);
  const LookupRes lr = decode_lookup(ld);
  ASSERT_TRUE(ld.ok());
  ASSERT_EQ(lr.status, kOk);
  EXPECT_EQ(lr.attr->size, 11u);

  auto rd = call(kRead, [&](XdrEncoder& e) {
    encode(e, lr.fh);
    e.u64(6);
    e.u32(100);
  });
  XdrDecoder rdd = results(rd);
  const ReadRes rr = decode_read_head(rdd);
  ASSERT_TRUE(rdd.ok());
  EXPECT_EQ(rr.count, 5u);
  EXPECT_TRUE(rr.eof);
  EXPECT_EQ(rdd.remaining(), 0u);  // the data is the payload, not in the reply
  ASSERT_TRUE(rd.has_payload);
  EXPECT_EQ(std::string(rd.payload.begin(), rd.payload.end()), "world");

  auto cr = call(kCreate, [&](XdrEncoder& e) {
    encode(e, root);
    e.string("new");
    e.u32(kGuarded);
    encode(e, Sattr{0600, {}, {}, {}, false, false, {}, {}});
  });
  XdrDecoder cd = results(cr);
  const CreateRes c = decode_create(cd);
  ASSERT_EQ(c.status, kOk);
  ASSERT_TRUE(c.fh);
  EXPECT_EQ(c.attr->mode, 0600u);
  const Bytes data{'a', 'b', 'c', 'd', 'e'};
  auto wr = call(kWrite, [&](XdrEncoder& e) {
    encode(e, *c.fh);
    e.u64(0);
    e.u32(5);
    e.u32(kFileSync);
    e.opaque(data);
  });
  XdrDecoder wd = results(wr);
  const WriteRes w = decode_write(wd);
  ASSERT_EQ(w.status, kOk);
  EXPECT_EQ(w.count, 5u);
  EXPECT_EQ(w.committed, kFileSync);
  std::ifstream f(dir_ / "new");
  std::string got;
  f >> got;
  EXPECT_EQ(got, "abcde");
  // GUARDED on an existing name: EXIST.
  auto again = call(kCreate, [&](XdrEncoder& e) {
    encode(e, root);
    e.string("new");
    e.u32(kGuarded);
    encode(e, Sattr{});
  });
  XdrDecoder ad = results(again);
  EXPECT_EQ(decode_create(ad).status, kErrExist);

  auto mk = call(kMkdir, [&](XdrEncoder& e) {
    encode(e, root);
    e.string("d");
    encode(e, Sattr{});
  });
  XdrDecoder mkd = results(mk);
  EXPECT_EQ(decode_create(mkd).status, kOk);
  auto ls = call(kReaddirplus, [&](XdrEncoder& e) {
    encode(e, root);
    e.u64(0);
    e.fixed(Verf{});
    e.u32(4096);
    e.u32(65536);
  });
  XdrDecoder lsd = results(ls);
  const auto dir = decode_readdirplus(lsd);
  ASSERT_TRUE(lsd.ok());
  ASSERT_EQ(dir.status, kOk);
  EXPECT_TRUE(dir.eof);
  std::vector<std::string> names;
  for (const auto& x : dir.entries) names.push_back(x.name);
  std::sort(names.begin(), names.end());  // the directory's order, not the names'
  EXPECT_EQ(names, (std::vector<std::string>{".", "..", "d", "hello", "new"}));

  auto rm = call(kRemove, [&](XdrEncoder& e) {
    encode(e, root);
    e.string("new");
  });
  XdrDecoder rmd = results(rm);
  EXPECT_EQ(rmd.u32(), kOk);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "new"));
  // The removed file's handle is stale now.
  auto st = call(kGetattr, [&](XdrEncoder& e) { encode(e, *c.fh); });
  XdrDecoder std_ = results(st);
  EXPECT_EQ(std_.u32(), kErrStale);
  auto rmdir = call(kRmdir, [&](XdrEncoder& e) {
    encode(e, root);
    e.string("d");
  });
  XdrDecoder rmdd = results(rmdir);
  EXPECT_EQ(rmdd.u32(), kOk);
}

TEST_F(NfsServerTest, RefusesWhatItShould) {
  const Fh root = srv_->root_fh();
  // A name with '/' would leave the directory.
  auto l = call(kLookup, [&](XdrEncoder& e) {
    encode(e, root);
    e.string("../etc");
  });
  XdrDecoder ld = results(l);
  EXPECT_EQ(ld.u32(), kErrInval);
  // A handle the server never gave.
  auto g = call(kGetattr, [&](XdrEncoder& e) { encode(e, Fh{{1, 2, 3}}); });
  XdrDecoder gd = results(g);
  EXPECT_EQ(gd.u32(), kErrStale);
  rpc::ReplyHeader h;
  call(
      kNull, [](XdrEncoder&) {}, 100227, 3);  // NFSACL
  auto acl = call(
      kNull, [](XdrEncoder&) {}, 100227, 3);
  results(acl, &h);
  EXPECT_EQ(h.accept, rpc::kProgUnavail);
  auto v4 = call(
      kNull, [](XdrEncoder&) {}, kNfsProgram, 4);
  results(v4, &h);
  EXPECT_EQ(h.accept, rpc::kProgMismatch);
  EXPECT_EQ(h.low, 3u);
  // Truncated arguments: GARBAGE_ARGS.
  auto bad = call(kRead, [&](XdrEncoder& e) {
    encode(e, root);
    e.u32(0);
  });
  results(bad, &h);
  EXPECT_EQ(h.accept, rpc::kGarbageArgs);
  // Not a call at all: nothing to answer.
  RpcReply r;
  const Bytes junk{1, 2, 3};
  srv_->handle(ctx_, junk, r);
  EXPECT_TRUE(r.msg.empty());
  // A symbolic link out of the export is neither a directory to look into nor a file to read.
  std::filesystem::create_symlink("/etc", dir_ / "out");
  auto ln = call(kLookup, [&](XdrEncoder& e) {
    encode(e, root);
    e.string("out");
  });
  XdrDecoder lnd = results(ln);
  const LookupRes link = decode_lookup(lnd);
  ASSERT_EQ(link.status, kOk);
  EXPECT_EQ(link.attr->type, kLnk);
  auto through = call(kLookup, [&](XdrEncoder& e) {
    encode(e, link.fh);
    e.string("passwd");
  });
  XdrDecoder td = results(through);
  EXPECT_EQ(td.u32(), kErrNotdir);
  auto rdl = call(kRead, [&](XdrEncoder& e) {
    encode(e, link.fh);
    e.u64(0);
    e.u32(100);
  });
  XdrDecoder rdld = results(rdl);
  EXPECT_NE(rdld.u32(), kOk);
  EXPECT_FALSE(rdl.has_payload);
  // MNT of another path.
  auto m = call(
      kMnt, [](XdrEncoder& e) { e.string("/other"); }, kMountProgram, kMountVersion);
  XdrDecoder md = results(m);
  EXPECT_NE(decode_mount(md).status, 0u);
  EXPECT_GE(srv_->stats().garbage, 2u);
}

// Review17 item 5: MNT of a directory beneath the export answers that directory's handle (as
// mountd mounts any directory beneath an export), with trailing slashes and "." dropped; "..",
// a path beside the export, a file, a symbolic link and a missing directory are refused; DUMP
// lists the path as mounted; UMNT with a trailing slash forgets it.
// Review19-user finding 4: --versions 4.1 refuses NFSv3 as knfsd's vers3=n does: PROG_MISMATCH
// 4..4 for every v3 call (so that a v3 mount fails at once and no v3 client locks only
// locally); --versions 3 answers a v4 call (handed here by the service) 3..3.
TEST_F(NfsServerTest, VersionsNotServedGetProgMismatch) {
  rpc::ReplyHeader h;
  auto both = call(
      kNull, [](XdrEncoder&) {}, kNfsProgram, 2);
  results(both, &h);
  EXPECT_EQ(h.accept, rpc::kProgMismatch);
  EXPECT_EQ(h.low, 3u);
  EXPECT_EQ(h.high, 4u);
  srv_->v3_served = false;
  for (const std::uint32_t proc : {kNull, kGetattr}) {
    auto r = call(
        proc, [&](XdrEncoder& e) { encode(e, srv_->root_fh()); }, kNfsProgram, 3);
    results(r, &h);
    EXPECT_EQ(h.accept, rpc::kProgMismatch) << proc;
    EXPECT_EQ(h.low, 4u);
    EXPECT_EQ(h.high, 4u);
  }
  srv_->v3_served = true;
  srv_->v4_served = false;
  auto v4 = call(
      kNull, [](XdrEncoder&) {}, kNfsProgram, 4);
  results(v4, &h);
  EXPECT_EQ(h.accept, rpc::kProgMismatch);
  EXPECT_EQ(h.low, 3u);
  EXPECT_EQ(h.high, 3u);
  auto ok = call(
      kGetattr, [&](XdrEncoder& e) { encode(e, srv_->root_fh()); }, kNfsProgram, 3);
  XdrDecoder d = results(ok, &h);
  EXPECT_EQ(h.accept, rpc::kSuccess);
  EXPECT_EQ(d.u32(), kOk);
}

TEST_F(NfsServerTest, MountOfADirectoryBeneathTheExport) {
  std::filesystem::create_directories(dir_ / "home" / "alice");
  std::ofstream(dir_ / "home" / "alice" / "notes") << "alice";
  std::filesystem::create_directory_symlink("home", dir_ / "link");
  const auto mnt = [&](const std::string& path) {
    auto m = call(
        kMnt, [&](XdrEncoder& e) { e.string(path); }, kMountProgram, kMountVersion);
    XdrDecoder md = results(m);
    return decode_mount(md);
  };
  const MountRes root = mnt("/export/");
  ASSERT_EQ(root.status, 0u) << "a trailing slash";
  EXPECT_EQ(mnt(std::string("/export/home\0tail", 17)).status, 2u)
      << "a NUL: each tail would be a mount list entry of its own";
  EXPECT_EQ(root.fh.data, srv_->root_fh().data);
  const MountRes alice = mnt("/export/home//alice/./");
  ASSERT_EQ(alice.status, 0u);
  EXPECT_NE(alice.fh.data, root.fh.data);
  auto l = call(kLookup, [&](XdrEncoder& e) {
    encode(e, alice.fh);
    e.string("notes");
  });
  XdrDecoder ld = results(l);
  const LookupRes lr = decode_lookup(ld);
  ASSERT_EQ(lr.status, kOk) << "the handle is alice's directory";
  EXPECT_EQ(lr.attr->size, 5u);
  EXPECT_EQ(mnt("/export/home/../home").status, 2u) << "..";
  EXPECT_EQ(mnt("/exported").status, 2u) << "beside the export";
  EXPECT_EQ(mnt("/export/home/missing").status, 2u);
  EXPECT_EQ(mnt("/export/home/alice/notes").status, 20u) << "MNT3ERR_NOTDIR";
  EXPECT_NE(mnt("/export/link").status, 0u) << "a symbolic link on the way";
  auto dump = call(
      kDump, [](XdrEncoder&) {}, kMountProgram, kMountVersion);
  XdrDecoder dd = results(dump);
  std::vector<std::string> paths;
  while (dd.boolean()) {
    dd.string(255);
    paths.push_back(dd.string(1024));
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"/export", "/export/home/alice"}));
  call(
      kUmnt, [](XdrEncoder& e) { e.string("/export/home/alice/"); }, kMountProgram, kMountVersion);
  auto dump2 = call(
      kDump, [](XdrEncoder&) {}, kMountProgram, kMountVersion);
  XdrDecoder dd2 = results(dump2);
  paths.clear();
  while (dd2.boolean()) {
    dd2.string(255);
    paths.push_back(dd2.string(1024));
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"/export"}));
}

// Review17 item 10: MOUNT's list kept as mountd's rmtab: a server made again on the same file
// (a restart) answers DUMP with the clients mounted before; UMNT takes an entry out of the file;
// a malformed or cut line is skipped; the entries are bounded.
TEST_F(NfsServerTest, MountListOutlivesARestart) {
  const std::string rmtab = (dir_ / "rmtab").string();
  ASSERT_TRUE(srv_->keep_mounts_in(rmtab));
  std::filesystem::create_directories(dir_ / "sub");
  const auto mnt = [&](const std::string& path) {
    auto m = call(
        kMnt, [&](XdrEncoder& e) { e.string(path); }, kMountProgram, kMountVersion);
    XdrDecoder md = results(m);
    return decode_mount(md).status;
  };
  const auto dump = [&] {
    auto r = call(
        kDump, [](XdrEncoder&) {}, kMountProgram, kMountVersion);
    XdrDecoder d = results(r);
    std::vector<std::string> out;
    while (d.boolean()) {
      std::string who = d.string(255);
      out.push_back(who + ":" + d.string(1024));
    }
    return out;
  };
  ASSERT_EQ(mnt("/export"), 0u);
  ASSERT_EQ(mnt("/export/sub"), 0u);
  ctx_.peer = wire::Ipv4Addr{0xC0000203};
  ASSERT_EQ(mnt("/export"), 0u);
  call(
      kUmnt, [](XdrEncoder& e) { e.string("/export"); }, kMountProgram, kMountVersion);
  const std::vector<std::string> want{"192.0.2.2:/export", "192.0.2.2:/export/sub"};
  EXPECT_EQ(dump(), want);
  // The restart: a new server on the same root and file, plus junk a hand edit left.
  std::ofstream(rmtab, std::ios::app) << "not-an-address:/x\n192.0.2.9:relative\n192.0.2.8:/cut";
  srv_ = std::make_unique<NfsServer>(dir_.string(), "/export", srv_->options());
  srv_->max_mount_entries = 8;
  ASSERT_TRUE(srv_->keep_mounts_in(rmtab));
  EXPECT_EQ(dump(), want) << "the list after a restart";
  // Bounded: the oldest goes beyond max_mount_entries, in memory and in the file.
  for (std::uint32_t k = 0; k < 10; ++k) {
    ctx_.peer = wire::Ipv4Addr{0xC6120000 + k};
    ASSERT_EQ(mnt("/export"), 0u);
  }
  EXPECT_EQ(dump().size(), 8u);
  std::ifstream in(rmtab);
  std::string line;
  std::size_t lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 8u);
}

TEST_F(NfsServerTest, AttributesDirectoryListingAndFilesystemInfo) {
  const Fh root = srv_->root_fh();
  auto l = call(kLookup, [&](XdrEncoder& e) {
    encode(e, root);
    e.string("hello");
  });
  XdrDecoder ld = results(l);
  const Fh fh = decode_lookup(ld).fh;
  // SETATTR: mode and size.
  auto sa = call(kSetattr, [&](XdrEncoder& e) {
    encode(e, fh);
    encode(e, Sattr{0640, {}, {}, std::uint64_t{5}, false, true, {}, {}});
    e.boolean(false);  // no guard
  });
  XdrDecoder sad = results(sa);
  ASSERT_EQ(sad.u32(), kOk);
  const auto after = decode_wcc(sad);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->mode, 0640u);
  EXPECT_EQ(after->size, 5u);
  EXPECT_EQ(std::filesystem::file_size(dir_ / "hello"), 5u);
  // ACCESS answers what root may do to a 0640 file: read, modify, extend; not execute (no x
  // bit), and lookup and delete are for directories.
  auto ac = call(kAccess, [&](XdrEncoder& e) {
    encode(e, fh);
    e.u32(0x3f);
  });
  XdrDecoder acd = results(ac);
  ASSERT_EQ(acd.u32(), kOk);
  decode_post_op(acd);
  EXPECT_EQ(acd.u32(), 0x0du);
  // READDIR (names and cookies only), then again from the cookie of the entry before "hello":
  // "hello" alone follows, and the end.
  const auto readdir = [&](std::uint64_t cookie, const Verf& verf) {
    auto rd = call(kReaddir, [&](XdrEncoder& e) {
      encode(e, root);
      e.u64(cookie);
      e.fixed(verf);
      e.u32(4096);
    });
    XdrDecoder rdd = results(rd);
    EXPECT_EQ(rdd.u32(), kOk);
    decode_post_op(rdd);
    Verf v{};
    const auto vb = rdd.fixed(8);
    std::copy(vb.begin(), vb.end(), v.begin());
    std::vector<std::pair<std::string, std::uint64_t>> got;
    while (rdd.ok() && rdd.boolean()) {
      rdd.u64();
      std::string n = rdd.string(255);
      got.emplace_back(n, rdd.u64());
    }
    EXPECT_TRUE(rdd.boolean());  // eof
    EXPECT_TRUE(rdd.ok());
    return std::pair{v, got};
  };
  const auto [verf, all] = readdir(0, Verf{});
  ASSERT_EQ(all.size(), 3u);
  std::uint64_t before_hello = 0;
  for (const auto& [n, ck] : all) {
    if (n == "hello") break;
    before_hello = ck;
  }
  if (before_hello != 0) {
    const auto [verf2, rest] = readdir(before_hello, verf);
    EXPECT_EQ(verf2, verf);
    ASSERT_FALSE(rest.empty());
    EXPECT_EQ(rest.front().first, "hello");
  }
  // FSINFO advertises max_io; FSSTAT and PATHCONF answer.
  auto fi = call(kFsinfo, [&](XdrEncoder& e) { encode(e, root); });
  XdrDecoder fid = results(fi);
  const FsinfoRes info = decode_fsinfo(fid);
  ASSERT_EQ(info.status, kOk);
  EXPECT_EQ(info.rtmax, srv_->max_io);
  EXPECT_EQ(info.wtmax, srv_->max_io);
  auto fs = call(kFsstat, [&](XdrEncoder& e) { encode(e, root); });
  XdrDecoder fsd = results(fs);
  EXPECT_EQ(fsd.u32(), kOk);
  auto pc = call(kPathconf, [&](XdrEncoder& e) { encode(e, root); });
  XdrDecoder pcd = results(pc);
  ASSERT_EQ(pcd.u32(), kOk);
  decode_post_op(pcd);
  pcd.u32();
  EXPECT_EQ(pcd.u32(), 255u);  // name_max
  // RENAME in one directory: the file's handle still names it.
  auto rn = call(kRename, [&](XdrEncoder& e) {
    encode(e, root);
    e.string("hello");
    encode(e, root);
    e.string("bye");
  });
  XdrDecoder rnd = results(rn);
  EXPECT_EQ(rnd.u32(), kOk);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "bye"));
  auto ga = call(kGetattr, [&](XdrEncoder& e) { encode(e, fh); });
  XdrDecoder gad = results(ga);
  EXPECT_EQ(gad.u32(), kOk);
}

TEST_F(NfsServerTest, SymlinkSwappedInMidPathLeadsNowhere) {
  // a/b/f in the export; the client holds handles of b and f. Then a local user moves a out of
  // the export and leaves a symbolic link to it in its place: the same inodes are now reached
  // through a link that leads out. No operation on the old handles may touch them there.
  std::filesystem::create_directories(dir_ / "a" / "b");
  std::ofstream(dir_ / "a" / "b" / "f") << "inside";
  const Fh root = srv_->root_fh();
  auto look = [&](const Fh& d, const std::string& n) {
    auto r = call(kLookup, [&](XdrEncoder& e) {
      encode(e, d);
      e.string(n);
    });
    XdrDecoder x = results(r);
    const LookupRes l = decode_lookup(x);
    EXPECT_EQ(l.status, kOk) << n;
    return l.fh;
  };
  const Fh b = look(look(root, "a"), "b");
  const Fh f = look(b, "f");
  const auto out = dir_.parent_path() / ("nfs_server_test.out." + std::to_string(getpid()));
  std::filesystem::create_directories(out);
  struct RemoveAtEnd {
    std::filesystem::path p;
    ~RemoveAtEnd() { std::filesystem::remove_all(p); }
  } remove_out{out};
  std::filesystem::rename(dir_ / "a", out / "a");
  std::filesystem::create_directory_symlink(out / "a", dir_ / "a");
  const auto outf = out / "a" / "b" / "f";
  const auto mode_before = std::filesystem::status(outf).permissions();

  // Not even attributes or names from out there.
  auto ga = call(kGetattr, [&](XdrEncoder& e) { encode(e, f); });
  XdrDecoder gad = results(ga);
  EXPECT_EQ(gad.u32(), kErrStale);
  auto lk = call(kLookup, [&](XdrEncoder& e) {
    encode(e, b);
    e.string("f");
  });
  XdrDecoder lkd = results(lk);
  EXPECT_EQ(lkd.u32(), kErrStale);
  auto cr = call(kCreate, [&](XdrEncoder& e) {
    encode(e, b);
    e.string("x");
    e.u32(kUnchecked);
    encode(e, Sattr{});
  });
  XdrDecoder crd = results(cr);
  EXPECT_NE(decode_create(crd).status, kOk);
  auto mk = call(kMkdir, [&](XdrEncoder& e) {
    encode(e, b);
    e.string("d");
    encode(e, Sattr{});
  });
  XdrDecoder mkd = results(mk);
  EXPECT_NE(mkd.u32(), kOk);
  const Bytes data{'o', 'u', 't'};
  auto wr = call(kWrite, [&](XdrEncoder& e) {
    encode(e, f);
    e.u64(0);
    e.u32(3);
    e.u32(kFileSync);
    e.opaque(data);
  });
  XdrDecoder wrd = results(wr);
  EXPECT_NE(decode_write(wrd).status, kOk);
  auto sa = call(kSetattr, [&](XdrEncoder& e) {
    encode(e, f);
    encode(e, Sattr{0777, {}, {}, std::uint64_t{1}, false, true, {}, {}});
    e.boolean(false);
  });
  XdrDecoder sad = results(sa);
  EXPECT_NE(sad.u32(), kOk);
  auto rd = call(kRead, [&](XdrEncoder& e) {
    encode(e, f);
    e.u64(0);
    e.u32(100);
  });
  XdrDecoder rdd = results(rd);
  EXPECT_NE(rdd.u32(), kOk);
  EXPECT_FALSE(rd.has_payload);
  auto ls = call(kReaddirplus, [&](XdrEncoder& e) {
    encode(e, b);
    e.u64(0);
    e.fixed(Verf{});
    e.u32(4096);
    e.u32(65536);
  });
  XdrDecoder lsd = results(ls);
  EXPECT_NE(lsd.u32(), kOk);
  auto cm = call(kCommit, [&](XdrEncoder& e) {
    encode(e, f);
    e.u64(0);
    e.u32(0);
  });
  XdrDecoder cmd = results(cm);
  EXPECT_NE(cmd.u32(), kOk);
  auto rm = call(kRemove, [&](XdrEncoder& e) {
    encode(e, b);
    e.string("f");
  });
  XdrDecoder rmd = results(rm);
  EXPECT_NE(rmd.u32(), kOk);

  EXPECT_FALSE(std::filesystem::exists(out / "a" / "b" / "x"));
  EXPECT_FALSE(std::filesystem::exists(out / "a" / "b" / "d"));
  ASSERT_TRUE(std::filesystem::exists(outf));
  std::string got;
  std::ifstream(outf) >> got;
  EXPECT_EQ(got, "inside");
  EXPECT_EQ(std::filesystem::status(outf).permissions(), mode_before);
}

TEST_F(NfsServerTest, FileHandleTableIsBounded) {
  // The path table (a server without CAP_DAC_READ_SEARCH) is bounded.
  ExportOptions o;
  o.rw = true;
  o.root_squash = false;
  srv_ = std::make_unique<NfsServer>(dir_.string(), "/export", o, HandleMode::kPathTable);
  srv_->max_handles = 100;
  const Fh root = srv_->root_fh();
  for (int i = 0; i < 300; ++i) std::ofstream(dir_ / ("f" + std::to_string(i))) << i;
  std::vector<Fh> fhs;
  for (int i = 0; i < 300; ++i) {
    auto r = call(kLookup, [&](XdrEncoder& e) {
      encode(e, root);
      e.string("f" + std::to_string(i));
    });
    XdrDecoder d = results(r);
    const LookupRes l = decode_lookup(d);
    ASSERT_EQ(l.status, kOk);
    fhs.push_back(l.fh);
  }
  EXPECT_LE(srv_->handles(), 100u);
  auto getattr = [&](const Fh& fh) {
    auto r = call(kGetattr, [&](XdrEncoder& e) { encode(e, fh); });
    XdrDecoder d = results(r);
    return d.u32();
  };
  EXPECT_EQ(getattr(fhs.front()), kErrStale);  // forgotten: stale, as an evicted knfsd fh
  EXPECT_EQ(getattr(fhs.back()), kOk);
  EXPECT_EQ(getattr(root), kOk);  // the root is never forgotten
  // READDIRPLUS hands out handles too; long names count against the bytes bound.
  srv_->max_handles = 1u << 20;
  srv_->max_handle_bytes = 4096;
  auto ls = call(kReaddirplus, [&](XdrEncoder& e) {
    encode(e, root);
    e.u64(0);
    e.fixed(Verf{});
    e.u32(65536);
    e.u32(1u << 20);
  });
  XdrDecoder lsd = results(ls);
  ASSERT_EQ(decode_readdirplus(lsd).status, kOk);
  EXPECT_LE(srv_->handles(), 4096u / 64);
}

}  // namespace
}  // namespace roce::nfs
