// The NFSv4.1 server core (nfs4_server.h) over a temporary directory, no transport: a COMPOUND
// encoder drives each operation as the Linux client orders them at mount (EXCHANGE_ID,
// CREATE_SESSION, SEQUENCE, RECLAIM_COMPLETE, SECINFO_NO_NAME, PUTROOTFH, GETFH, GETATTR,
// LOOKUP, LOOKUPP, ACCESS, DESTROY_SESSION, DESTROY_CLIENTID), the slot table and its reply
// cache, and what a hostile client sends: wrong sequence ids, slots out of range, forged handles,
// names with '/' or "..", truncated and huge COMPOUNDs, more clients than the table holds.
#include "apps/nfs/nfs4_server.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

namespace roce::nfs {
namespace {

using namespace v4;
using Bytes = std::vector<std::uint8_t>;
namespace fs = std::filesystem;

/// A COMPOUND being built: each add() appends one operation and its arguments.
struct Ops {
  Bytes b;
  std::uint32_t n = 0;
  std::uint32_t minor = 1;
  Ops& add(std::uint32_t op, const std::function<void(XdrEncoder&)>& args = {}) {
    XdrEncoder e(b);
    e.u32(op);
    if (args) args(e);
    ++n;
    return *this;
  }
};

/// A COMPOUND's reply: its status, and a decoder at the first operation's result.
struct Reply {
  RpcReply raw;
  rpc::ReplyHeader h;
  std::uint32_t status = 0, count = 0;
  std::vector<std::uint8_t> msg;
  std::unique_ptr<XdrDecoder> d;
  /// The next operation's number and status (checked against `op`).
  std::uint32_t next(std::uint32_t op) {
    EXPECT_EQ(d->u32(), op);
    return d->u32();
  }
};

class Nfs4Test : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("nfs4_test." + std::to_string(::getpid()));
    dir_ = base_ / "export";
    fs::create_directories(dir_ / "sub");
    std::ofstream(dir_ / "hello") << "hello world";
    ExportOptions o;
    std::string err;
    ASSERT_TRUE(parse_export_options("rw,no_root_squash", o, err)) << err;
    files_ = std::make_unique<NfsServer>(dir_.string(), "/", o);
    v4::Limits lim;
    lim.clients = 4;
    lim.sessions = 2;
    lim.slots = 4;
    lim.max_ops = 16;
    srv_ = std::make_unique<Nfs4Server>(*files_, lim);
    srv_->now = [this] { return clock_; };
  }
  void TearDown() override {
    srv_.reset();
    files_.reset();
    fs::remove_all(base_);
  }

  Reply send(const Ops& ops, std::uint32_t proc = kCompound, std::uint32_t vers = 4) {
    Bytes b;
    XdrEncoder e(b);
    rpc::CallHeader h;
    h.xid = ++xid_;
    h.prog = v3::kNfsProgram;
    h.vers = vers;
    h.proc = proc;
    h.cred = rpc::auth_sys({1, "t", ::geteuid(), ::getegid(), {}});
    rpc::encode(e, h);
    if (proc == kCompound) {
      e.string("t");
      e.u32(ops.minor);
      e.u32(ops.n);
      b.insert(b.end(), ops.b.begin(), ops.b.end());
    }
    return parse(b);
  }
  Reply parse(const Bytes& call) {
    Reply r;
    srv_->handle(CallContext{}, call, r.raw);
    r.msg = r.raw.msg;
    if (r.raw.has_payload) {  // READ's data back inline, as the transport does without chunks
      r.msg.insert(r.msg.end(), r.raw.payload.begin(), r.raw.payload.end());
      r.msg.insert(r.msg.end(), xdr_pad(r.raw.payload.size()), 0);
    }
    r.d = std::make_unique<XdrDecoder>(r.msg);
    EXPECT_TRUE(rpc::decode(*r.d, r.h));
    if (r.h.stat == rpc::kMsgAccepted && r.h.accept == rpc::kSuccess && !call.empty()) {
      r.status = r.d->u32();
      r.d->string(kMaxTag);
      r.count = r.d->u32();
    }
    return r;
  }

  // EXCHANGE_ID and CREATE_SESSION, as the client mounts.
  void exchange(const std::string& owner = "client-a", std::uint8_t verf = 1) {
    Ops o;
    o.add(kExchangeId, [&](XdrEncoder& e) {
      const std::uint8_t v[8] = {verf, 0, 0, 0, 0, 0, 0, 0};
      e.fixed(v);
      e.string(owner);
      e.u32(0);
      e.u32(kSp4None);
      e.u32(0);
    });
    Reply r = send(o);
    ex_status_ = r.status;
    if (r.status != kOk) return;
    EXPECT_EQ(r.next(kExchangeId), kOk);
    clientid_ = r.d->u64();
    cs_seq_ = r.d->u32();
    ex_flags_ = r.d->u32();
  }
  static void channel(XdrEncoder& e, std::uint32_t slots, std::uint32_t ops = 8) {
    e.u32(0);
    e.u32(1u << 20);
    e.u32(1u << 20);
    e.u32(4096);
    e.u32(ops);
    e.u32(slots);
    e.u32(0);
  }
  Ops create_session_ops(std::uint32_t seq, std::uint32_t slots = 16) {
    Ops o;
    o.add(kCreateSession, [&](XdrEncoder& e) {
      e.u64(clientid_);
      e.u32(seq);
      e.u32(kSessionConnBackChan);
      channel(e, slots);
      channel(e, 1);
      e.u32(0x40000000);
      e.u32(1);
      e.u32(rpc::kAuthNone);
    });
    return o;
  }
  std::uint32_t create_session() {
    Reply r = send(create_session_ops(cs_seq_));
    if (r.status != kOk) return r.status;
    EXPECT_EQ(r.next(kCreateSession), kOk);
    const auto s = r.d->fixed(16);
    std::copy(s.begin(), s.end(), sid_.begin());
    EXPECT_EQ(r.d->u32(), cs_seq_);
    EXPECT_EQ(r.d->u32(), 0u);  // no backchannel granted
    r.d->u32();                 // headerpad
    r.d->u32();
    r.d->u32();
    r.d->u32();
    EXPECT_EQ(r.d->u32(), 8u);  // max operations as asked
    slots_ = r.d->u32();
    EXPECT_EQ(slots_, 4u);  // the server's limit
    seqids_.assign(slots_, 0);
    return kOk;
  }
  void mount() {
    exchange();
    ASSERT_EQ(ex_status_, kOk);
    ASSERT_EQ(create_session(), kOk);
  }
  /// A COMPOUND starting with SEQUENCE on `slot` (its next sequence id unless `seq` says).
  Ops seq(std::uint32_t slot = 0, std::optional<std::uint32_t> seqid = std::nullopt) {
    Ops o;
    const std::uint32_t s = seqid ? *seqid : ++seqids_.at(slot);
    o.add(kSequence, [&](XdrEncoder& e) {
      e.fixed(sid_);
      e.u32(s);
      e.u32(slot);
      e.u32(slot);
      e.boolean(true);
    });
    return o;
  }
  static void skip_sequence(Reply& r) {
    ASSERT_EQ(r.next(kSequence), kOk);
    r.d->fixed(16);
    for (int i = 0; i < 5; ++i) r.d->u32();
  }
  static std::function<void(XdrEncoder&)> bitmap(std::initializer_list<std::uint32_t> attrs) {
    Bitmap b;
    for (auto a : attrs) b.set(a);
    return [b](XdrEncoder& e) { encode(e, b); };
  }
  static std::function<void(XdrEncoder&)> name(const std::string& n) {
    return [n](XdrEncoder& e) { e.string(n); };
  }
  static std::function<void(XdrEncoder&)> fh(const Bytes& f) {
    return [f](XdrEncoder& e) { e.opaque(f); };
  }
  Bytes getfh(Reply& r) {
    EXPECT_EQ(r.next(kGetfh), kOk);
    const auto b = r.d->opaque(kFhSize);
    return Bytes(b.begin(), b.end());
  }

  fs::path base_, dir_;
  std::unique_ptr<NfsServer> files_;
  std::unique_ptr<Nfs4Server> srv_;
  std::int64_t clock_ = 1000;
  std::uint32_t xid_ = 0;
  std::uint64_t clientid_ = 0;
  std::uint32_t cs_seq_ = 0, ex_flags_ = 0, ex_status_ = 0, slots_ = 0;
  SessionId sid_{};
  std::vector<std::uint32_t> seqids_;
};

TEST_F(Nfs4Test, NullAndVersions) {
  Reply r = send(Ops{}, kNull);
  EXPECT_EQ(r.h.accept, rpc::kSuccess);
  Reply m = send(Ops{}, kCompound, 5);
  EXPECT_EQ(m.h.accept, rpc::kProgMismatch);
  EXPECT_EQ(m.h.low, 3u);
  EXPECT_EQ(m.h.high, 4u);
  Reply p = send(Ops{}, 2);
  EXPECT_EQ(p.h.accept, rpc::kProcUnavail);
  // Minor version 0 and 2: MINOR_VERS_MISMATCH with no results.
  for (std::uint32_t minor : {0u, 2u}) {
    Ops o;
    o.minor = minor;
    o.add(kPutrootfh);
    Reply v = send(o);
    EXPECT_EQ(v.status, kErrMinorVersMismatch);
    EXPECT_EQ(v.count, 0u);
  }
}

TEST_F(Nfs4Test, MountLikeTheLinuxClient) {
  exchange();
  ASSERT_EQ(ex_status_, kOk);
  EXPECT_FALSE(ex_flags_ & kExchgidConfirmedR);
  EXPECT_TRUE(ex_flags_ & kExchgidUseNonPnfs);
  ASSERT_EQ(create_session(), kOk);
  // The same client again: the same id, confirmed now.
  const std::uint64_t id = clientid_;
  exchange();
  EXPECT_EQ(clientid_, id);
  EXPECT_TRUE(ex_flags_ & kExchgidConfirmedR);

  Reply rc = send(seq().add(kReclaimComplete, [](XdrEncoder& e) { e.boolean(false); }));
  EXPECT_EQ(rc.status, kOk);
  skip_sequence(rc);
  EXPECT_EQ(rc.next(kReclaimComplete), kOk);
  Reply rc2 = send(seq().add(kReclaimComplete, [](XdrEncoder& e) { e.boolean(false); }));
  EXPECT_EQ(rc2.status, kErrCompleteAlready);

  Reply si = send(seq().add(kPutrootfh).add(kSecinfoNoName, [](XdrEncoder& e) { e.u32(0); }));
  ASSERT_EQ(si.status, kOk);
  skip_sequence(si);
  EXPECT_EQ(si.next(kPutrootfh), kOk);
  EXPECT_EQ(si.next(kSecinfoNoName), kOk);
  EXPECT_EQ(si.d->u32(), 1u);
  EXPECT_EQ(si.d->u32(), rpc::kAuthSys);
  // SECINFO_NO_NAME consumed the current handle.
  Reply nf =
      send(seq().add(kPutrootfh).add(kSecinfoNoName, [](XdrEncoder& e) { e.u32(0); }).add(kGetfh));
  EXPECT_EQ(nf.status, kErrNofilehandle);

  Reply g = send(
      seq()
          .add(kPutrootfh)
          .add(kGetfh)
          .add(kGetattr, bitmap({kSupportedAttrs, kType, kFhExpireType, kLeaseTime, kMaxread, kMode,
                                 kOwner, kOwnerGroup, kNumlinks, kFsid, kFileid, kTimeDelta})));
  ASSERT_EQ(g.status, kOk);
  skip_sequence(g);
  EXPECT_EQ(g.next(kPutrootfh), kOk);
  const Bytes root = getfh(g);
  EXPECT_EQ(root, files_->root_fh().data);
  EXPECT_EQ(g.next(kGetattr), kOk);
  const Bitmap got = decode_bitmap(*g.d);
  EXPECT_TRUE(got.has(kType) && got.has(kOwner) && got.has(kLeaseTime) && got.has(kTimeDelta));
  const auto vals = g.d->opaque(kMaxAttrVals);
  XdrDecoder a(vals);
  const Bitmap sup = decode_bitmap(a);
  EXPECT_TRUE(sup.has(kSize) && sup.has(kTimeModifySet) && !sup.has(12));
  EXPECT_EQ(a.u32(), kDir);
  EXPECT_EQ(a.u32(), files_->persistent_handles() ? 0u : 2u);
  struct stat st;
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  // In attribute number order: fsid, lease_time, fileid, maxread, mode, numlinks, owner,
  // owner_group, time_delta.
  EXPECT_EQ(a.u64(), st.st_dev);
  EXPECT_EQ(a.u64(), 0u);
  EXPECT_EQ(a.u32(), 90u);
  EXPECT_EQ(a.u64(), st.st_ino);
  EXPECT_EQ(a.u64(), 1u << 20);
  EXPECT_EQ(a.u32(), st.st_mode & 07777);
  EXPECT_EQ(a.u32(), st.st_nlink);
  EXPECT_EQ(a.string(64), std::to_string(st.st_uid));
  EXPECT_EQ(a.string(64), std::to_string(st.st_gid));
  EXPECT_EQ(a.u64(), 0u);
  EXPECT_EQ(a.u32(), 1u);
  EXPECT_TRUE(a.ok());
  EXPECT_EQ(a.remaining(), 0u);

  // LOOKUP of a file, its size; LOOKUPP from a directory back to the root; ACCESS.
  Reply l = send(seq()
                     .add(kPutfh, fh(root))
                     .add(kLookup, name("hello"))
                     .add(kGetattr, bitmap({kSize, kType})));
  ASSERT_EQ(l.status, kOk);
  skip_sequence(l);
  l.next(kPutfh);
  l.next(kLookup);
  EXPECT_EQ(l.next(kGetattr), kOk);
  decode_bitmap(*l.d);
  XdrDecoder la(l.d->opaque(kMaxAttrVals));
  EXPECT_EQ(la.u32(), kReg);
  EXPECT_EQ(la.u64(), 11u);
  Reply up = send(seq().add(kPutfh, fh(root)).add(kLookup, name("sub")).add(kLookupp).add(kGetfh));
  ASSERT_EQ(up.status, kOk);
  skip_sequence(up);
  up.next(kPutfh);
  up.next(kLookup);
  up.next(kLookupp);
  EXPECT_EQ(getfh(up), root);
  Reply top = send(seq().add(kPutfh, fh(root)).add(kLookupp));
  EXPECT_EQ(top.status, kErrNoent);
  Reply ac = send(seq().add(kPutfh, fh(root)).add(kAccess, [](XdrEncoder& e) { e.u32(0x3f); }));
  ASSERT_EQ(ac.status, kOk);
  skip_sequence(ac);
  ac.next(kPutfh);
  EXPECT_EQ(ac.next(kAccess), kOk);
  EXPECT_EQ(ac.d->u32(), 0x3fu);
  EXPECT_EQ(ac.d->u32() & (kAccessRead | kAccessLookup), kAccessRead | kAccessLookup);

  // DESTROY_CLIENTID refuses while a session lives; then DESTROY_SESSION, DESTROY_CLIENTID.
  Ops dc;
  dc.add(kDestroyClientid, [&](XdrEncoder& e) { e.u64(clientid_); });
  EXPECT_EQ(send(dc).status, kErrClientidBusy);
  Ops ds;
  ds.add(kDestroySession, [&](XdrEncoder& e) { e.fixed(sid_); });
  EXPECT_EQ(send(ds).status, kOk);
  EXPECT_EQ(send(seq()).status, kErrBadsession);
  EXPECT_EQ(send(dc).status, kOk);
  EXPECT_EQ(srv_->clients(), 0u);
  EXPECT_EQ(srv_->sessions(), 0u);
}

TEST_F(Nfs4Test, CreateSessionSequenceAndRetry) {
  exchange();
  Reply a = send(create_session_ops(cs_seq_));
  ASSERT_EQ(a.status, kOk);
  Reply b = send(create_session_ops(cs_seq_));  // a retry: the same session, word for word
  ASSERT_EQ(b.status, kOk);
  EXPECT_EQ(a.msg.size(), b.msg.size());
  EXPECT_TRUE(std::equal(a.msg.begin() + 4, a.msg.end(), b.msg.begin() + 4));  // all but the xid
  EXPECT_EQ(srv_->sessions(), 1u);
  EXPECT_EQ(send(create_session_ops(cs_seq_ + 5)).status, kErrSeqMisordered);
  clientid_ ^= 0x1234;
  EXPECT_EQ(send(create_session_ops(cs_seq_)).status, kErrStaleClientid);
}

TEST_F(Nfs4Test, SlotTableAndReplyCache) {
  mount();
  Reply first = send(seq(1).add(kPutrootfh).add(kGetfh));
  ASSERT_EQ(first.status, kOk);
  // The same slot and sequence id again: the cached reply, not a second execution.
  Reply again = send(seq(1, seqids_[1]).add(kPutrootfh).add(kGetfh));
  EXPECT_EQ(again.status, kOk);
  EXPECT_TRUE(std::equal(first.msg.begin() + 4, first.msg.end(), again.msg.begin() + 4));
  EXPECT_EQ(srv_->stats().replays, 1u);
  // Misordered, out-of-range slot, unknown session, too many operations.
  EXPECT_EQ(send(seq(1, seqids_[1] + 2)).status, kErrSeqMisordered);
  EXPECT_EQ(send(seq(0, 0)).status, kErrSeqMisordered);
  Ops bad;
  bad.add(kSequence, [&](XdrEncoder& e) {
    e.fixed(sid_);
    e.u32(1);
    e.u32(4);  // slots 0..3
    e.u32(4);
    e.boolean(false);
  });
  EXPECT_EQ(send(bad).status, kErrBadslot);
  Ops big = seq(2, seqids_[2] + 1);
  for (int i = 0; i < 20; ++i) big.add(kPutrootfh);
  EXPECT_EQ(send(big).status, kErrTooManyOps);
  SessionId real = sid_;
  sid_[0] ^= 0xff;
  EXPECT_EQ(send(seq(3, 1)).status, kErrBadsession);
  sid_ = real;
  // The slot still works after all that.
  EXPECT_EQ(send(seq(2)).status, kOk);
}

TEST_F(Nfs4Test, CompoundRules) {
  mount();
  Ops o;
  o.add(kPutrootfh);
  Reply r = send(o);
  EXPECT_EQ(r.status, kErrOpNotInSession);
  EXPECT_EQ(r.count, 1u);
  Reply p = send(seq().add(kSequence, [&](XdrEncoder& e) {
    e.fixed(sid_);
    e.u32(1);
    e.u32(0);
    e.u32(0);
    e.boolean(false);
  }));
  EXPECT_EQ(p.status, kErrSequencePos);
  Reply ill = send(seq().add(9999).add(kPutrootfh));
  EXPECT_EQ(ill.status, kErrOpIllegal);
  EXPECT_EQ(ill.count, 2u);
  skip_sequence(ill);
  EXPECT_EQ(ill.next(kIllegal), kErrOpIllegal);
  for (std::uint32_t old : {kSetclientid, kRenew, kOpenConfirm, kReleaseLockowner}) {
    Reply n = send(seq().add(old));
    EXPECT_EQ(n.status, kErrNotsupp) << old;
  }
  Ops two;
  two.add(kExchangeId).add(kPutrootfh);
  EXPECT_EQ(send(two).status, kErrNotOnlyOp);
  // No current file handle.
  EXPECT_EQ(send(seq().add(kGetfh)).status, kErrNofilehandle);
  EXPECT_EQ(send(seq().add(kGetattr, bitmap({kType}))).status, kErrNofilehandle);
  EXPECT_EQ(send(seq().add(kRestorefh)).status, kErrRestorefh);
}

TEST_F(Nfs4Test, HostileInput) {
  mount();
  const Bytes root = files_->root_fh().data;
  // Names: never a way out of the directory.
  for (const char* n : {"..", ".", "a/b", "../export", "/etc"}) {
    Reply r = send(seq().add(kPutfh, fh(root)).add(kLookup, name(n)));
    EXPECT_EQ(r.status, kErrBadname) << n;
  }
  EXPECT_EQ(send(seq().add(kPutfh, fh(root)).add(kLookup, name(""))).status, kErrInval);
  EXPECT_EQ(send(seq().add(kPutfh, fh(root)).add(kLookup, name(std::string(300, 'a')))).status,
            kErrNametoolong);
  EXPECT_EQ(send(seq().add(kPutfh, fh(root)).add(kLookup, name("nothere"))).status, kErrNoent);
  // LOOKUP on a file; a forged handle (one bit flipped anywhere); an empty one; a long one.
  Reply f = send(seq().add(kPutfh, fh(root)).add(kLookup, name("hello")).add(kLookup, name("x")));
  EXPECT_EQ(f.status, kErrNotdir);
  for (std::size_t i = 0; i < root.size(); ++i) {
    Bytes forged = root;
    forged[i] ^= 0x10;
    EXPECT_EQ(send(seq().add(kPutfh, fh(forged))).status, kErrStale) << i;
  }
  EXPECT_EQ(send(seq().add(kPutfh, fh({}))).status, kErrBadhandle);
  EXPECT_EQ(send(seq().add(kPutfh, fh(Bytes(200, 1)))).status, kErrBadxdr);
  // Truncated arguments: BADXDR for that operation, the session still fine.
  Ops t = seq();
  t.add(kLookup);  // no name follows
  EXPECT_EQ(send(t).status, kErrBadxdr);
  // A COMPOUND claiming a billion operations with none there, and a huge bitmap.
  Ops huge = seq(0, seqids_[0] + 1);  // refused: the slot's sequence id stays
  huge.n = 1'000'000'000;
  EXPECT_EQ(send(huge).status, kErrTooManyOps);
  Reply hb = send(seq().add(kPutrootfh).add(kGetattr, [](XdrEncoder& e) { e.u32(100000); }));
  EXPECT_EQ(hb.status, kErrBadxdr);
  // A truncated COMPOUND header: GARBAGE_ARGS.
  Bytes b;
  XdrEncoder e(b);
  rpc::CallHeader h;
  h.xid = 77;
  h.prog = v3::kNfsProgram;
  h.vers = 4;
  h.proc = kCompound;
  h.cred = rpc::auth_sys({1, "t", ::geteuid(), ::getegid(), {}});
  rpc::encode(e, h);
  e.u32(1u << 30);  // a tag longer than the message
  Reply g = parse(b);
  EXPECT_EQ(g.h.accept, rpc::kGarbageArgs);
  // A credential that is not AUTH_SYS or AUTH_NONE.
  Bytes c;
  XdrEncoder ce(c);
  h.cred = {6, {1, 2, 3, 4}};
  rpc::encode(ce, h);
  Reply bc = parse(c);
  EXPECT_EQ(bc.h.stat, rpc::kMsgDenied);
}

TEST_F(Nfs4Test, BoundedClientsAndSessions) {
  mount();
  // Two sessions per client, the third refused.
  ++cs_seq_;
  EXPECT_EQ(create_session(), kOk);
  ++cs_seq_;
  EXPECT_EQ(create_session(), kErrResource);
  // Four clients, the fifth refused while the others' leases run; taken once they expired.
  for (int i = 0; i < 3; ++i) {
    exchange("other-" + std::to_string(i));
    EXPECT_EQ(ex_status_, kOk);
  }
  exchange("one-too-many");
  EXPECT_EQ(ex_status_, kErrResource);
  EXPECT_EQ(srv_->clients(), 4u);
  clock_ += 1000;
  exchange("one-too-many");
  EXPECT_EQ(ex_status_, kOk);
  EXPECT_EQ(srv_->clients(), 1u);
  EXPECT_EQ(srv_->sessions(), 0u);
  EXPECT_GE(srv_->stats().resource, 2u);
}

TEST_F(Nfs4Test, ClientRebootReplacesItsRecord) {
  mount();
  const std::uint64_t before = clientid_;
  exchange("client-a", 2);  // another verifier: the client rebooted
  EXPECT_NE(clientid_, before);
  EXPECT_FALSE(ex_flags_ & kExchgidConfirmedR);
  EXPECT_EQ(create_session(), kOk);
  EXPECT_EQ(srv_->clients(), 1u);  // the old record went with its session
  EXPECT_EQ(srv_->sessions(), 1u);
}

}  // namespace
}  // namespace roce::nfs
