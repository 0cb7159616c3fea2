// The NFSv3 procedures with RFC 1813's semantics, on the server core over a temporary directory
// (no transport): READLINK, SYMLINK, MKNOD, RENAME across directories, LINK, EXCLUSIVE CREATE
// with its verifier, the SETATTR guard and client times, wcc data on every modifying call,
// FSINFO and PATHCONF; file handles that outlive the server and refuse forgeries; READDIR
// cookies that stay valid while the directory changes, and a verifier that refuses another's;
// MOUNT's DUMP and UMNTALL. And what a hostile client sends: forged and truncated handles,
// cookies of another directory, names with '/', "..", NUL, over-long names.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "apps/nfs/nfs_server.h"

namespace roce::nfs {
namespace {

using namespace v3;
using Bytes = std::vector<std::uint8_t>;
namespace fs = std::filesystem;

bool root() { return ::geteuid() == 0; }

class NfsProcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("nfs_proc_test." + std::to_string(::getpid()));
    dir_ = base_ / "export";
    fs::create_directories(dir_);
    std::ofstream(dir_ / "hello") << "hello world";
    serve();
  }
  void TearDown() override {
    srv_.reset();
    fs::remove_all(base_);
  }
  void serve(HandleMode mode = HandleMode::kAuto, std::string options = "rw,no_root_squash") {
    ExportOptions o;
    std::string err;
    EXPECT_TRUE(parse_export_options(options, o, err)) << err;
    srv_.reset();
    srv_ = std::make_unique<NfsServer>(dir_.string(), "/export", o, mode);
    root_ = srv_->root_fh();
  }

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
    h.cred = rpc::auth_sys({1, "t", uid_, gid_, {}});
    rpc::encode(e, h);
    args(e);
    RpcReply r;
    if (prog == kMountProgram)
      srv_->handle_mount(ctx_, b, r);
    else
      srv_->handle(ctx_, b, r);
    return r;
  }
  static XdrDecoder results(const RpcReply& r) {
    XdrDecoder d(r.msg);
    rpc::ReplyHeader h;
    EXPECT_TRUE(rpc::decode(d, h));
    EXPECT_EQ(h.accept, rpc::kSuccess);
    return d;
  }
  LookupRes lookup(const Fh& dir, const std::string& name) {
    auto r = call(kLookup, [&](XdrEncoder& e) {
      encode(e, dir);
      e.string(name);
    });
    XdrDecoder d = results(r);
    return decode_lookup(d);
  }
  Status getattr(const Fh& fh, Fattr* a = nullptr) {
    auto r = call(kGetattr, [&](XdrEncoder& e) { encode(e, fh); });
    XdrDecoder d = results(r);
    const auto s = static_cast<Status>(d.u32());
    if (s == kOk && a) *a = decode_fattr(d);
    return s;
  }
  /// wcc_data: whether both the pre-op and the post-op attributes are there.
  static bool full_wcc(XdrDecoder& d) {
    const bool pre = d.boolean();
    if (pre) d.fixed(24);
    const bool post = d.boolean();
    if (post) decode_fattr(d);
    return pre && post;
  }
  CreateRes create(const Fh& dir, const std::string& name, CreateMode how, const Verf& v = {},
                   bool* wcc = nullptr) {
    auto r = call(kCreate, [&](XdrEncoder& e) {
      encode(e, dir);
      e.string(name);
      e.u32(how);
      if (how == kExclusive)
        e.fixed(v);
      else
        encode(e, Sattr{0644, {}, {}, {}, false, false, {}, {}});
    });
    XdrDecoder d = results(r);
    CreateRes c;
    c.status = static_cast<Status>(d.u32());
    if (c.status == kOk) {
      if (d.boolean()) c.fh = decode_fh(d);
      c.attr = decode_post_op(d);
    }
    const bool w = full_wcc(d);
    if (wcc) *wcc = w;
    return c;
  }
  struct Listing {
    Status status = kOk;
    Verf verf{};
    std::vector<std::pair<std::string, std::uint64_t>> entries;
    bool eof = false;
  };
  Listing readdir(const Fh& dir, std::uint64_t cookie, const Verf& verf, std::uint32_t count) {
    auto r = call(kReaddir, [&](XdrEncoder& e) {
      encode(e, dir);
      e.u64(cookie);
      e.fixed(verf);
      e.u32(count);
    });
    XdrDecoder d = results(r);
    Listing l;
    l.status = static_cast<Status>(d.u32());
    decode_post_op(d);
    if (l.status != kOk) return l;
    const auto v = d.fixed(8);
    std::copy(v.begin(), v.end(), l.verf.begin());
    while (d.ok() && d.boolean()) {
      d.u64();
      std::string n = d.string(kMaxName);
      l.entries.emplace_back(n, d.u64());
    }
    l.eof = d.boolean();
    EXPECT_TRUE(d.ok());
    return l;
  }

  fs::path base_, dir_;
  std::unique_ptr<NfsServer> srv_;
  Fh root_;
  std::uint32_t xid_ = 0;
  std::uint32_t uid_ = ::geteuid(), gid_ = ::getegid();
  CallContext ctx_{wire::Ipv4Addr{0xC0000202}};  // 192.0.2.2
};

TEST_F(NfsProcTest, SymlinkAndReadlink) {
  auto r = call(kSymlink, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string("ln");
    encode(e, Sattr{});
    e.string("../outside/target");
  });
  XdrDecoder d = results(r);
  const CreateRes c = decode_create(d);
  ASSERT_EQ(c.status, kOk);
  ASSERT_TRUE(c.fh);
  EXPECT_EQ(c.attr->type, kLnk);
  EXPECT_EQ(fs::read_symlink(dir_ / "ln"), "../outside/target");
  auto rl = call(kReadlink, [&](XdrEncoder& e) { encode(e, *c.fh); });
  XdrDecoder rd = results(rl);
  ASSERT_EQ(rd.u32(), kOk);
  decode_post_op(rd);
  EXPECT_EQ(rd.string(4096), "../outside/target");
  // The link is never followed: READ, LOOKUP through it and SETATTR of its size refuse.
  EXPECT_EQ(lookup(*c.fh, "x").status, kErrNotdir);
  // READLINK of a file is INVAL; an empty target is INVAL; one beyond PATH_MAX NAMETOOLONG.
  auto rf = call(kReadlink, [&](XdrEncoder& e) { encode(e, lookup(root_, "hello").fh); });
  XdrDecoder rfd = results(rf);
  EXPECT_EQ(rfd.u32(), kErrInval);
  for (const auto& [target, want] :
       {std::pair{std::string(), kErrInval}, std::pair{std::string(4096, 'x'), kErrNametoolong}}) {
    auto s = call(kSymlink, [&](XdrEncoder& e) {
      encode(e, root_);
      e.string("bad");
      encode(e, Sattr{});
      e.string(target);
    });
    XdrDecoder sd = results(s);
    EXPECT_EQ(sd.u32(), want);
    EXPECT_TRUE(full_wcc(sd));
  }
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "bad")));
}

TEST_F(NfsProcTest, MknodFifoSocketAndDevices) {
  const auto mknod = [&](const std::string& name, std::uint32_t type) {
    auto r = call(kMknod, [&](XdrEncoder& e) {
      encode(e, root_);
      e.string(name);
      e.u32(type);
      if (type == kChr || type == kBlk || type == kSock || type == kFifo)
        encode(e, Sattr{0640, {}, {}, {}, false, false, {}, {}});
      if (type == kChr || type == kBlk) {
        e.u32(1);
        e.u32(3);
      }
    });
    XdrDecoder d = results(r);
    return decode_create(d);
  };
  const CreateRes p = mknod("fifo", kFifo);
  ASSERT_EQ(p.status, kOk);
  EXPECT_EQ(p.attr->type, kFifo);
  EXPECT_EQ(p.attr->mode, 0640u);
  EXPECT_TRUE(fs::is_fifo(dir_ / "fifo"));
  // ACCESS of a FIFO (the client opens it itself, and asks here whether it may write it).
  auto ac = call(kAccess, [&](XdrEncoder& e) {
    encode(e, *p.fh);
    e.u32(0x3f);
  });
  XdrDecoder acd = results(ac);
  ASSERT_EQ(acd.u32(), kOk);
  decode_post_op(acd);
  EXPECT_EQ(acd.u32() & 0x0du, 0x0du);  // READ, MODIFY, EXTEND
  EXPECT_EQ(mknod("sock", kSock).status, kOk);
  EXPECT_TRUE(fs::is_socket(dir_ / "sock"));
  // A regular file, a directory or a link is not MKNOD's to make.
  EXPECT_EQ(mknod("reg", kReg).status, kErrBadtype);
  EXPECT_EQ(mknod("dir", kDir).status, kErrBadtype);
  // A device node: root's alone, as on a local file system.
  if (root()) {
    const CreateRes c = mknod("null", kChr);
    ASSERT_EQ(c.status, kOk);
    EXPECT_EQ(c.attr->type, kChr);
    EXPECT_EQ(c.attr->rdev1, 1u);
    EXPECT_EQ(c.attr->rdev2, 3u);
    uid_ = gid_ = 1000;
    EXPECT_EQ(mknod("null2", kChr).status, kErrPerm);
    EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "null2")));
  }
  // READ of a FIFO never blocks: INVAL.
  auto rd = call(kRead, [&](XdrEncoder& e) {
    encode(e, *p.fh);
    e.u64(0);
    e.u32(10);
  });
  XdrDecoder rdd = results(rd);
  EXPECT_EQ(rdd.u32(), kErrInval);
}

TEST_F(NfsProcTest, RenameAcrossDirectoriesKeepsHandles) {
  fs::create_directories(dir_ / "a");
  fs::create_directories(dir_ / "b" / "sub");
  std::ofstream(dir_ / "a" / "f") << "data";
  const Fh a = lookup(root_, "a").fh, b = lookup(root_, "b").fh;
  const Fh f = lookup(a, "f").fh, sub = lookup(b, "sub").fh;
  const auto rename = [&](const Fh& from, const std::string& fn, const Fh& to,
                          const std::string& tn, bool* wcc = nullptr) {
    auto r = call(kRename, [&](XdrEncoder& e) {
      encode(e, from);
      e.string(fn);
      encode(e, to);
      e.string(tn);
    });
    XdrDecoder d = results(r);
    const auto s = static_cast<Status>(d.u32());
    const bool w1 = full_wcc(d), w2 = full_wcc(d);
    if (wcc) *wcc = w1 && w2;
    EXPECT_TRUE(d.ok());
    return s;
  };
  bool wcc = false;
  ASSERT_EQ(rename(a, "f", b, "g", &wcc), kOk);
  EXPECT_TRUE(wcc);
  EXPECT_FALSE(fs::exists(dir_ / "a" / "f"));
  EXPECT_TRUE(fs::exists(dir_ / "b" / "g"));
  // The handles taken before still name the file and the directories (no path in them).
  Fattr at;
  EXPECT_EQ(getattr(f, &at), kOk);
  EXPECT_EQ(at.size, 4u);
  EXPECT_EQ(lookup(b, "g").fh, f);
  // A directory moved with what it holds: its child's handle still works.
  ASSERT_EQ(rename(b, "sub", a, "moved"), kOk);
  EXPECT_EQ(getattr(sub), kOk);
  // Over an existing file: replaced; a directory into itself: INVAL; over a non-empty
  // directory: NOTEMPTY (or EXIST, RFC 1813 allows both); from a name that is not there: NOENT.
  std::ofstream(dir_ / "b" / "victim") << "v";
  EXPECT_EQ(rename(b, "g", b, "victim"), kOk);
  EXPECT_EQ(getattr(f), kOk);
  EXPECT_EQ(rename(root_, "a", a, "inside"), kErrInval);
  fs::create_directories(dir_ / "b" / "full" / "x");
  fs::create_directories(dir_ / "b" / "empty");
  const Status s = rename(b, "empty", b, "full");
  EXPECT_TRUE(s == kErrNotempty || s == kErrExist) << s;
  EXPECT_EQ(rename(b, "nope", b, "x"), kErrNoent);
  // Names that leave the directory or are too long.
  EXPECT_EQ(rename(b, "victim", a, "../escape"), kErrInval);
  EXPECT_EQ(rename(b, "..", a, "up"), kErrInval);
  EXPECT_EQ(rename(b, "victim", a, std::string(256, 'n')), kErrNametoolong);
  EXPECT_FALSE(fs::exists(base_ / "escape"));
}

TEST_F(NfsProcTest, RenameInThePathTableMovesItsEntries) {
  serve(HandleMode::kPathTable);
  EXPECT_FALSE(srv_->persistent_handles());
  EXPECT_FALSE(srv_->handle_note().empty());
  fs::create_directories(dir_ / "a" / "b");
  std::ofstream(dir_ / "a" / "b" / "f") << "data";
  const Fh a = lookup(root_, "a").fh, b = lookup(a, "b").fh, f = lookup(b, "f").fh;
  auto r = call(kRename, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string("a");
    encode(e, root_);
    e.string("z");
  });
  XdrDecoder d = results(r);
  ASSERT_EQ(d.u32(), kOk);
  EXPECT_EQ(getattr(a), kOk);
  EXPECT_EQ(getattr(b), kOk);
  EXPECT_EQ(getattr(f), kOk);
}

TEST_F(NfsProcTest, HardLinks) {
  fs::create_directories(dir_ / "d");
  const Fh hello = lookup(root_, "hello").fh, d = lookup(root_, "d").fh;
  const auto link = [&](const Fh& file, const Fh& dir, const std::string& name) {
    auto r = call(kLink, [&](XdrEncoder& e) {
      encode(e, file);
      encode(e, dir);
      e.string(name);
    });
    XdrDecoder x = results(r);
    const auto s = static_cast<Status>(x.u32());
    const auto attr = decode_post_op(x);
    EXPECT_TRUE(full_wcc(x));
    EXPECT_TRUE(attr.has_value());
    return std::pair{s, attr};
  };
  const auto [s, attr] = link(hello, d, "again");
  ASSERT_EQ(s, kOk);
  EXPECT_EQ(attr->nlink, 2u);
  EXPECT_EQ(fs::hard_link_count(dir_ / "hello"), 2u);
  EXPECT_EQ(fs::file_size(dir_ / "d" / "again"), 11u);
  EXPECT_EQ(link(hello, d, "again").first, kErrExist);
  EXPECT_EQ(link(d, root_, "dirlink").first, kErrIsdir);
  EXPECT_EQ(link(hello, d, "a/b").first, kErrInval);
  // A symbolic link is linked as itself, never what it points to.
  fs::create_symlink("/etc/passwd", dir_ / "sl");
  const Fh sl = lookup(root_, "sl").fh;
  ASSERT_EQ(link(sl, d, "sl2").first, kOk);
  EXPECT_TRUE(fs::is_symlink(dir_ / "d" / "sl2"));
  EXPECT_EQ(fs::read_symlink(dir_ / "d" / "sl2"), "/etc/passwd");
}

TEST_F(NfsProcTest, ExclusiveCreateKeepsItsVerifier) {
  const Verf v{1, 2, 3, 4, 5, 6, 7, 8}, w{9, 9, 9, 9, 9, 9, 9, 9};
  bool wcc = false;
  const CreateRes first = create(root_, "lock", kExclusive, v, &wcc);
  ASSERT_EQ(first.status, kOk);
  EXPECT_TRUE(wcc);
  ASSERT_TRUE(first.fh);
  // Kept in the times, as knfsd keeps it: mtime's seconds the first half, atime's the second.
  struct stat st;
  ASSERT_EQ(::lstat((dir_ / "lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 0x01020304);
  EXPECT_EQ(st.st_atim.tv_sec, 0x05060708);
  // The same call again (its reply lost): the same file, OK.
  const CreateRes retry = create(root_, "lock", kExclusive, v);
  ASSERT_EQ(retry.status, kOk);
  EXPECT_EQ(*retry.fh, *first.fh);
  // Another verifier, or a file that was there before: EXIST (O_EXCL on a lock file).
  EXPECT_EQ(create(root_, "lock", kExclusive, w).status, kErrExist);
  EXPECT_EQ(create(root_, "hello", kExclusive, v).status, kErrExist);
  // GUARDED on an existing name: EXIST; UNCHECKED: the file, its size kept (no size asked).
  EXPECT_EQ(create(root_, "hello", kGuarded).status, kErrExist);
  const CreateRes u = create(root_, "hello", kUnchecked);
  ASSERT_EQ(u.status, kOk);
  EXPECT_EQ(u.attr->size, 11u);
  // A name that is a directory: EXIST for every mode.
  fs::create_directories(dir_ / "dir");
  EXPECT_EQ(create(root_, "dir", kUnchecked).status, kErrExist);
  EXPECT_EQ(create(root_, "dir", kExclusive, v).status, kErrExist);
}

TEST_F(NfsProcTest, SetattrGuardAndClientTimes) {
  fs::permissions(dir_ / "hello", fs::perms::owner_read | fs::perms::owner_write |
                                      fs::perms::group_read | fs::perms::others_read);
  const Fh fh = lookup(root_, "hello").fh;
  Fattr a;
  ASSERT_EQ(getattr(fh, &a), kOk);
  const auto setattr = [&](const Sattr& s, std::optional<Time> guard) {
    auto r = call(kSetattr, [&](XdrEncoder& e) {
      encode(e, fh);
      encode(e, s);
      e.boolean(guard.has_value());
      if (guard) {
        e.u32(guard->sec);
        e.u32(guard->nsec);
      }
    });
    XdrDecoder d = results(r);
    const auto st = static_cast<Status>(d.u32());
    EXPECT_TRUE(full_wcc(d));
    return st;
  };
  // A ctime that no longer holds: NOT_SYNC, nothing changed.
  EXPECT_EQ(setattr(Sattr{0600, {}, {}, {}, false, false, {}, {}}, Time{a.ctime.sec - 1, 0}),
            kErrNotSync);
  EXPECT_EQ(fs::status(dir_ / "hello").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
  // The right one: done.
  EXPECT_EQ(setattr(Sattr{0600, {}, {}, {}, false, false, {}, {}}, a.ctime), kOk);
  EXPECT_EQ(fs::status(dir_ / "hello").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  // The client's times, to the nanosecond.
  EXPECT_EQ(setattr(Sattr{{}, {}, {}, {}, false, false, Time{1000000, 5}, Time{2000000, 7}},
                    std::nullopt),
            kOk);
  struct stat st;
  ASSERT_EQ(::lstat((dir_ / "hello").c_str(), &st), 0);
  EXPECT_EQ(st.st_atim.tv_sec, 1000000);
  EXPECT_EQ(st.st_atim.tv_nsec, 5);
  EXPECT_EQ(st.st_mtim.tv_sec, 2000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 7);
  // Nanoseconds beyond a second: INVAL.
  EXPECT_EQ(setattr(Sattr{{}, {}, {}, {}, false, false, {}, Time{1, 1000000000}}, std::nullopt),
            kErrInval);
}

TEST_F(NfsProcTest, WccDataOnEveryModifyingCall) {
  const Fh hello = lookup(root_, "hello").fh;
  bool wcc = false;
  ASSERT_EQ(create(root_, "c", kGuarded, {}, &wcc).status, kOk);
  EXPECT_TRUE(wcc) << "CREATE";
  auto check = [&](const char* what, std::uint32_t proc, auto&& args) {
    auto r = call(proc, args);
    XdrDecoder d = results(r);
    EXPECT_EQ(d.u32(), kOk) << what;
    if (proc == kMkdir) {
      if (d.boolean()) decode_fh(d);
      decode_post_op(d);
    }
    EXPECT_TRUE(full_wcc(d)) << what;
  };
  check("MKDIR", kMkdir, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string("m");
    encode(e, Sattr{});
  });
  check("SETATTR", kSetattr, [&](XdrEncoder& e) {
    encode(e, hello);
    encode(e, Sattr{0644, {}, {}, {}, false, true, {}, {}});
    e.boolean(false);
  });
  const Bytes data{'x', 'y'};
  check("WRITE", kWrite, [&](XdrEncoder& e) {
    encode(e, hello);
    e.u64(0);
    e.u32(2);
    e.u32(kUnstable);
    e.opaque(data);
  });
  check("COMMIT", kCommit, [&](XdrEncoder& e) {
    encode(e, hello);
    e.u64(0);
    e.u32(0);
  });
  check("REMOVE", kRemove, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string("c");
  });
  check("RMDIR", kRmdir, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string("m");
  });
  // Refusals carry wcc data too.
  auto r = call(kRemove, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string("nothing");
  });
  XdrDecoder d = results(r);
  EXPECT_EQ(d.u32(), kErrNoent);
  EXPECT_TRUE(full_wcc(d));
}

TEST_F(NfsProcTest, FsinfoAndPathconfAreTruthful) {
  auto fi = call(kFsinfo, [&](XdrEncoder& e) { encode(e, root_); });
  XdrDecoder fid = results(fi);
  const FsinfoRes info = decode_fsinfo(fid);
  ASSERT_EQ(info.status, kOk);
  EXPECT_EQ(info.properties & 0x3u, 0x3u);  // hard links and symbolic links: served now
  EXPECT_GT(info.maxfilesize, 1ull << 32);
  auto pc = call(kPathconf, [&](XdrEncoder& e) { encode(e, root_); });
  XdrDecoder pcd = results(pc);
  ASSERT_EQ(pcd.u32(), kOk);
  decode_post_op(pcd);
  EXPECT_GT(pcd.u32(), 1u);    // linkmax, the file system's
  EXPECT_EQ(pcd.u32(), 255u);  // name_max
  EXPECT_TRUE(pcd.boolean());  // no_trunc: a longer name is refused, not cut
  // ...and it is: NAMETOOLONG.
  EXPECT_EQ(lookup(root_, std::string(256, 'n')).status, kErrNametoolong);
  EXPECT_EQ(create(root_, std::string(256, 'n'), kGuarded).status, kErrNametoolong);
}

TEST_F(NfsProcTest, HandlesOutliveTheServer) {
  if (!root()) GTEST_SKIP() << "open_by_handle_at needs CAP_DAC_READ_SEARCH";
  if (!srv_->persistent_handles()) GTEST_SKIP() << srv_->handle_note();
  fs::create_directories(dir_ / "d" / "e");
  std::ofstream(dir_ / "d" / "e" / "f") << "persist";
  const Fh d = lookup(root_, "d").fh;
  const Fh f = lookup(lookup(d, "e").fh, "f").fh;
  const Fh old_root = root_;
  serve();  // a new server on the same export: a restart
  EXPECT_EQ(srv_->root_fh(), old_root);
  Fattr a;
  ASSERT_EQ(getattr(f, &a), kOk);
  EXPECT_EQ(a.size, 7u);
  auto rd = call(kRead, [&](XdrEncoder& e) {
    encode(e, f);
    e.u64(0);
    e.u32(100);
  });
  XdrDecoder rdd = results(rd);
  ASSERT_EQ(rdd.u32(), kOk);
  EXPECT_EQ(std::string(rd.payload.begin(), rd.payload.end()), "persist");
  EXPECT_EQ(lookup(d, "e").status, kOk);
  // Removed: stale.
  fs::remove(dir_ / "d" / "e" / "f");
  EXPECT_EQ(getattr(f), kErrStale);
  // The path table's handles do not outlive the server.
  serve(HandleMode::kPathTable);
  const Fh t = lookup(root_, "d").fh;
  serve(HandleMode::kPathTable);
  EXPECT_EQ(getattr(t), kErrStale);
}

TEST_F(NfsProcTest, ForgedHandlesAreStale) {
  fs::create_directories(dir_ / "d");
  const Fh d = lookup(root_, "d").fh;
  const Fh hello = lookup(root_, "hello").fh;
  // Every byte flipped in turn (magic, export id, type, length, body, MAC): stale, never another
  // object.
  for (std::size_t i = 0; i < hello.data.size(); ++i) {
    Fh x = hello;
    x.data[i] ^= 0x40;
    EXPECT_EQ(getattr(x), kErrStale) << "byte " << i;
  }
  // Short, empty, longer: stale; the longest a client may send decodes.
  for (std::size_t n : {0u, 1u, 8u, 23u, 24u, 63u, 64u}) {
    Fh x;
    x.data.assign(n, 0x5a);
    EXPECT_EQ(getattr(x), kErrStale) << n;
  }
  // A handle of another export (another root, its own key) is not this export's.
  fs::create_directories(base_ / "other");
  NfsServer other((base_ / "other").string(), "/export", srv_->options());
  EXPECT_EQ(getattr(other.root_fh()), kErrStale);
  // A handle longer than NFS3_FHSIZE does not even decode.
  auto r = call(kGetattr, [&](XdrEncoder& e) { e.opaque(Bytes(65, 1)); });
  XdrDecoder x(r.msg);
  rpc::ReplyHeader h;
  ASSERT_TRUE(rpc::decode(x, h));
  EXPECT_EQ(h.accept, rpc::kGarbageArgs);
  // A directory moved out of the export (by someone on the host): its handle, though genuine,
  // no longer reaches it; nor do its files'.
  std::ofstream(dir_ / "d" / "f") << "x";
  const Fh f = lookup(d, "f").fh;
  fs::rename(dir_ / "d", base_ / "moved-out");
  EXPECT_EQ(getattr(d), kErrStale);
  EXPECT_EQ(getattr(f), kErrStale);
  EXPECT_EQ(create(d, "new", kGuarded).status, kErrStale);
  EXPECT_FALSE(fs::exists(base_ / "moved-out" / "new"));
}

TEST_F(NfsProcTest, HostileNames) {
  fs::create_directories(dir_ / "d");
  const Fh d = lookup(root_, "d").fh;
  // ".." of the root is the root: never its parent.
  const LookupRes up = lookup(root_, "..");
  ASSERT_EQ(up.status, kOk);
  EXPECT_EQ(up.fh, root_);
  EXPECT_EQ(lookup(d, "..").fh, root_);
  for (const std::string& n :
       std::vector<std::string>{"../hello", "a/b", "/etc", std::string("x\0y", 3), std::string()})
    EXPECT_EQ(lookup(root_, n).status, kErrInval) << n;
  for (const std::string n : {"..", ".", "a/b"}) {
    const Status s = create(d, n, kGuarded).status;
    EXPECT_TRUE(s == kErrInval || s == kErrExist) << n << " " << s;
  }
  EXPECT_FALSE(fs::exists(dir_ / "a"));
  // A name longer than the wire allows at all: GARBAGE_ARGS; one past NAME_MAX: NAMETOOLONG.
  auto r = call(kLookup, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string(std::string(5000, 'x'));
  });
  XdrDecoder x(r.msg);
  rpc::ReplyHeader h;
  ASSERT_TRUE(rpc::decode(x, h));
  EXPECT_EQ(h.accept, rpc::kGarbageArgs);
}

TEST_F(NfsProcTest, ReaddirCookiesSurviveChanges) {
  for (int i = 0; i < 200; ++i) std::ofstream(dir_ / ("f" + std::to_string(i))) << i;
  // The first page, small.
  Listing first = readdir(root_, 0, Verf{}, 1024);
  ASSERT_EQ(first.status, kOk);
  ASSERT_FALSE(first.eof);
  ASSERT_GT(first.entries.size(), 4u);
  std::set<std::string> seen;
  for (const auto& [n, c] : first.entries) seen.insert(n);
  // The directory changes between pages: entries already listed removed, new ones made.
  for (std::size_t i = 0; i < first.entries.size(); ++i) {
    const std::string& n = first.entries[i].first;
    if (n.starts_with("f") && i % 2 == 0) fs::remove(dir_ / n);
  }
  for (int i = 0; i < 50; ++i) std::ofstream(dir_ / ("new" + std::to_string(i))) << i;
  std::uint64_t cookie = first.entries.back().second;
  std::map<std::string, int> count;
  for (const auto& n : seen) count[n] = 1;
  for (int pages = 0; pages < 1000; ++pages) {
    const Listing l = readdir(root_, cookie, first.verf, 1024);
    ASSERT_EQ(l.status, kOk);
    EXPECT_EQ(l.verf, first.verf);
    for (const auto& [n, c] : l.entries) ++count[n];
    if (l.eof) break;
    ASSERT_FALSE(l.entries.empty());
    cookie = l.entries.back().second;
  }
  // Every file there all along listed exactly once: none skipped, none repeated.
  for (int i = 0; i < 200; ++i) {
    const std::string n = "f" + std::to_string(i);
    if (fs::exists(dir_ / n)) {
      EXPECT_EQ(count[n], 1) << n;
    }
  }
  for (const auto& [n, k] : count) EXPECT_LE(k, 1) << n;
  // A cookie with another directory's verifier, or none: BAD_COOKIE.
  fs::create_directories(dir_ / "sub");
  const Fh sub = lookup(root_, "sub").fh;
  const Listing s = readdir(sub, 0, Verf{}, 4096);
  ASSERT_EQ(s.status, kOk);
  EXPECT_NE(s.verf, first.verf);
  EXPECT_EQ(readdir(root_, cookie, s.verf, 4096).status, kErrBadCookie);
  EXPECT_EQ(readdir(root_, cookie, Verf{}, 4096).status, kErrBadCookie);
  // Too small for even one entry: TOOSMALL.
  EXPECT_EQ(readdir(root_, 0, Verf{}, 100).status, kErrToosmall);
}

// The mode a client asks for is made as it is (the client applied its umask): the server's
// umask, 022 here, takes nothing off, as with knfsd. Served on a thread of its own whose umask
// (shared with the test's) is 022 when the call comes.
TEST_F(NfsProcTest, ModesAreTheClientsNotTheServersUmask) {
  std::thread t([&] {
    const mode_t old = ::umask(022);
    auto r = call(kMkdir, [&](XdrEncoder& e) {
      encode(e, root_);
      e.string("d777");
      encode(e, Sattr{0777, {}, {}, {}, false, false, {}, {}});
    });
    XdrDecoder d = results(r);
    EXPECT_EQ(d.u32(), kOk);
    auto c = call(kCreate, [&](XdrEncoder& e) {
      encode(e, root_);
      e.string("f666");
      e.u32(kGuarded);
      encode(e, Sattr{0666, {}, {}, {}, false, false, {}, {}});
    });
    XdrDecoder cd = results(c);
    EXPECT_EQ(cd.u32(), kOk);
    ::umask(old);
  });
  t.join();
  struct stat st;
  ASSERT_EQ(::lstat((dir_ / "d777").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u);
  ASSERT_EQ(::lstat((dir_ / "f666").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0666u);
}

TEST_F(NfsProcTest, OpenFilesAreCachedAndLetGo) {
  const Fh hello = lookup(root_, "hello").fh;
  const auto read = [&](const Fh& fh) {
    auto r = call(kRead, [&](XdrEncoder& e) {
      encode(e, fh);
      e.u64(0);
      e.u32(100);
    });
    XdrDecoder d = results(r);
    return static_cast<Status>(d.u32());
  };
  const auto write = [&](const Fh& fh) {
    auto r = call(kWrite, [&](XdrEncoder& e) {
      encode(e, fh);
      e.u64(0);
      e.u32(1);
      e.u32(kUnstable);
      e.opaque(Bytes{'H'});
    });
    XdrDecoder d = results(r);
    return static_cast<Status>(d.u32());
  };
  // A hundred READs and WRITEs of one file: one descriptor.
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(read(hello), kOk);
    ASSERT_EQ(write(hello), kOk);
  }
  EXPECT_EQ(srv_->open_files(), 1u);
  // The cache does not lend the server's descriptor to a caller the file refuses.
  if (root()) {
    fs::permissions(dir_ / "hello", fs::perms::owner_read | fs::perms::owner_write);
    uid_ = gid_ = 1000;
    EXPECT_EQ(read(hello), kErrAcces);
    EXPECT_EQ(write(hello), kErrAcces);
    uid_ = ::geteuid(), gid_ = ::getegid();
  }
  // REMOVE lets its descriptor go (the file's space with it).
  auto rm = call(kRemove, [&](XdrEncoder& e) {
    encode(e, root_);
    e.string("hello");
  });
  XdrDecoder rmd = results(rm);
  ASSERT_EQ(rmd.u32(), kOk);
  EXPECT_EQ(srv_->open_files(), 0u);
  // Idle ones close by themselves.
  srv_->file_idle_ms = 1;
  std::ofstream(dir_ / "other") << "x";
  ASSERT_EQ(read(lookup(root_, "other").fh), kOk);
  ::usleep(600'000);
  ASSERT_EQ(read(lookup(root_, "other").fh), kOk);  // sweeps the old entry, opens anew
  EXPECT_EQ(srv_->open_files(), 1u);
}

// On a file system whose directory offsets are positions (ramfs), a change to the directory
// changes the verifier: the old cookies are BAD_COOKIE (they would skip or repeat entries).
TEST_F(NfsProcTest, CookiesOfShiftingOffsetsGoBadWhenTheDirectoryChanges) {
  if (!root()) GTEST_SKIP() << "needs root (mount ramfs)";
  srv_.reset();
  if (::mount("ramfs", dir_.c_str(), "ramfs", 0, nullptr) != 0)
    GTEST_SKIP() << "cannot mount ramfs here";
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{dir_};
  for (int i = 0; i < 50; ++i) std::ofstream(dir_ / ("f" + std::to_string(i))) << i;
  serve();
  EXPECT_FALSE(srv_->stable_cookies());
  const Listing first = readdir(root_, 0, Verf{}, 1024);
  ASSERT_EQ(first.status, kOk);
  ASSERT_FALSE(first.eof);
  const std::uint64_t cookie = first.entries.back().second;
  EXPECT_EQ(readdir(root_, cookie, first.verf, 1024).status, kOk);  // unchanged: fine
  ::usleep(10'000);
  fs::remove(dir_ / "f3");
  EXPECT_EQ(readdir(root_, cookie, first.verf, 1024).status, kErrBadCookie);
  const Listing again = readdir(root_, 0, Verf{}, 65536);  // from the start: a new verifier
  ASSERT_EQ(again.status, kOk);
  EXPECT_NE(again.verf, first.verf);
}

TEST_F(NfsProcTest, MountDumpAndUmntall) {
  const auto mnt = [&](std::uint32_t proc, bool with_path) {
    return call(
        proc,
        [&](XdrEncoder& e) {
          if (with_path) {
            e.string("/export");
          }
        },
        kMountProgram, kMountVersion);
  };
  const auto dump = [&] {
    auto r = mnt(kDump, false);
    XdrDecoder d = results(r);
    std::vector<std::pair<std::string, std::string>> out;
    while (d.ok() && d.boolean()) {
      std::string host = d.string(255);
      out.emplace_back(host, d.string(1024));
    }
    EXPECT_TRUE(d.ok());
    return out;
  };
  EXPECT_TRUE(dump().empty());
  mnt(kMnt, true);
  mnt(kMnt, true);  // once per client and path
  ctx_.peer = wire::Ipv4Addr{0xC0000203};
  mnt(kMnt, true);
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(dump(), (std::vector<P>{{"192.0.2.2", "/export"}, {"192.0.2.3", "/export"}}));
  mnt(kUmntAll, false);  // 192.0.2.3's
  EXPECT_EQ(dump(), (std::vector<P>{{"192.0.2.2", "/export"}}));
  ctx_.peer = wire::Ipv4Addr{0xC0000202};
  mnt(kUmnt, true);
  EXPECT_TRUE(dump().empty());
}

// The open-file cache may not fill the descriptor table, and a full table answers JUKEBOX
// (try again), never STALE: a handle stays good.
TEST_F(NfsProcTest, FewDescriptorsLeftNeverMakeHandlesStale) {
  if (!root()) GTEST_SKIP() << "kernel handles need CAP_DAC_READ_SEARCH";
  ASSERT_TRUE(srv_->persistent_handles() || true);
  for (int i = 0; i < 300; ++i) std::ofstream(dir_ / ("f" + std::to_string(i))) << "x";
  std::vector<Fh> fhs;
  for (int i = 0; i < 300; ++i) {
    const LookupRes l = lookup(root_, "f" + std::to_string(i));
    ASSERT_EQ(l.status, kOk);
    fhs.push_back(l.fh);
  }
  // A small descriptor budget in place of roce-nfsd's usual 1024 (it never raises it).
  rlimit old{};
  ::getrlimit(RLIMIT_NOFILE, &old);
  int probe = ::open("/dev/null", O_RDONLY);
  ::close(probe);
  rlimit lim = old;
  lim.rlim_cur = static_cast<rlim_t>(probe + 200);
  ::setrlimit(RLIMIT_NOFILE, &lim);
  int ok = 0, other = 0;
  for (const Fh& f : fhs) {
    auto r = call(kRead, [&](XdrEncoder& e) {
      encode(e, f);
      e.u64(0);
      e.u32(1);
    });
    XdrDecoder d = results(r);
    (d.u32() == kOk ? ok : other)++;
  }
  const Status root_attr = getattr(root_);
  const Status file_attr = getattr(fhs[0]);
  std::printf("%d READs ok, %d failed; open files cached %zu; GETATTR root %u, file %u\n", ok,
              other, srv_->open_files(), root_attr, file_attr);
  EXPECT_EQ(ok, 300);
  EXPECT_LE(srv_->open_files(), lim.rlim_cur / 4);
  EXPECT_EQ(root_attr, kOk);
  EXPECT_EQ(file_attr, kOk);
  // No descriptor left at all (the limit at the lowest free one): try again, not stale.
  srv_->close_files();
  probe = ::open("/dev/null", O_RDONLY);
  ::close(probe);
  lim.rlim_cur = static_cast<rlim_t>(probe);
  ::setrlimit(RLIMIT_NOFILE, &lim);
  const Status root_none = getattr(root_), file_none = getattr(fhs[1]);
  ::setrlimit(RLIMIT_NOFILE, &old);
  EXPECT_EQ(root_none, kErrJukebox);
  EXPECT_EQ(file_none, kErrJukebox);
  EXPECT_EQ(getattr(root_), kOk);
}

// A call on a directory handle does not walk ".." up to the root: no cost by depth.
TEST_F(NfsProcTest, DeepDirectoryCostsNoWalkPerCall) {
  if (!root()) GTEST_SKIP() << "kernel handles need CAP_DAC_READ_SEARCH";
  // 1000 deep has a path the kernel names (one readlink); 2100 deep has not (more than a
  // page): walked once, then believed for a second.
  constexpr int kDepth = 2100;
  {
    int fd = ::open(dir_.c_str(), O_PATH | O_DIRECTORY);
    for (int i = 0; i < kDepth; ++i) {
      ::mkdirat(fd, "d", 0755);
      const int n = ::openat(fd, "d", O_PATH | O_DIRECTORY);
      ::close(fd);
      fd = n;
    }
    ::close(fd);
  }
  Fh fh = root_, mid;
  for (int i = 0; i < kDepth; ++i) {
    const LookupRes l = lookup(fh, "d");
    ASSERT_EQ(l.status, kOk) << i;
    fh = l.fh;
    if (i == 999) mid = fh;
  }
  const auto time_getattrs = [&](const Fh& f) {
    EXPECT_EQ(getattr(f), kOk);  // the walk, if any
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) EXPECT_EQ(getattr(f), kOk);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
               .count() /
           200;
  };
  const double shallow = time_getattrs(root_), middle = time_getattrs(mid),
               deep = time_getattrs(fh);
  std::printf("GETATTR of the root %.1f us, of a directory 1000 deep %.1f us, %d deep %.1f us\n",
              shallow, middle, kDepth, deep);
  EXPECT_LT(middle, 20 * shallow + 500);
  EXPECT_LT(deep, 20 * shallow + 500);
}

}  // namespace
}  // namespace roce::nfs
