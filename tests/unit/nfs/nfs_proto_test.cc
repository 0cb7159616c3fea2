// XDR, ONC RPC headers, the RPC-over-RDMA v1 transport header and RFC 8797 private data, and
// NFSv3 XDR: golden bytes laid out as the RFCs' XDR says, round trips, and malformed input
// (truncated, retired procedures, bad discriminators, counts past the limits) refused.
#include <gtest/gtest.h>

#include <random>

#include "apps/nfs/nfs3.h"
#include "apps/nfs/rpc.h"
#include "apps/nfs/rpcrdma.h"
#include "apps/nfs/xdr.h"

namespace roce::nfs {
namespace {

using Bytes = std::vector<std::uint8_t>;

TEST(Xdr, OpaquePadsToFourBytes) {
  Bytes b;
  XdrEncoder e(b);
  const std::uint8_t d[5] = {1, 2, 3, 4, 5};
  e.opaque(d);
  EXPECT_EQ(b, (Bytes{0, 0, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0}));
  XdrDecoder x(b);
  const auto s = x.opaque(16);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(Bytes(s.begin(), s.end()), Bytes(d, d + 5));
  EXPECT_EQ(x.remaining(), 0u);
}

TEST(Xdr, ShortAndOversizedInputFailsWithoutThrowing) {
  const Bytes b{0, 0, 0, 9, 1, 2};
  XdrDecoder x(b);
  EXPECT_TRUE(x.opaque(100).empty());
  EXPECT_FALSE(x.ok());
  EXPECT_EQ(x.u32(), 0u);  // sticky
  const Bytes big{0xff, 0xff, 0xff, 0xff};
  XdrDecoder y(big);
  y.opaque(1024);
  EXPECT_FALSE(y.ok());
  XdrDecoder z(big);
  z.string(10);
  EXPECT_FALSE(z.ok());
}

TEST(Rpc, CallHeaderGoldenBytesWithAuthSys) {
  rpc::CallHeader h;
  h.xid = 0x01020304;
  h.prog = 100003;
  h.vers = 3;
  h.proc = 1;
  rpc::AuthSys a{7, "ab", 0, 0, {}};
  h.cred = rpc::auth_sys(a);
  Bytes b;
  XdrEncoder e(b);
  rpc::encode(e, h);
  // One line per XDR item.
  // clang-format off
  const Bytes want{0x01, 0x02, 0x03, 0x04, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0x01, 0x86, 0xa3,
                   0, 0, 0, 3, 0, 0, 0, 1,
                   0, 0, 0, 1, 0, 0, 0, 24,  // AUTH_SYS, 24 bytes
                   0, 0, 0, 7, 0, 0, 0, 2, 'a', 'b', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                   0, 0, 0, 0, 0, 0, 0, 0};  // AUTH_NONE verifier
  // clang-format on
  EXPECT_EQ(b, want);
  XdrDecoder d(b);
  rpc::CallHeader back;
  ASSERT_TRUE(rpc::decode(d, back));
  EXPECT_EQ(back, h);
  EXPECT_EQ(rpc::parse_auth_sys(back.cred), a);
}

TEST(Rpc, RepliesRoundTripAndNameTheirErrors) {
  for (rpc::ReplyHeader h :
       {rpc::ReplyHeader{}, rpc::ReplyHeader{9, rpc::kMsgAccepted, {}, rpc::kProgMismatch, 2, 3}}) {
    Bytes b;
    XdrEncoder e(b);
    rpc::encode(e, h);
    XdrDecoder d(b);
    rpc::ReplyHeader back;
    ASSERT_TRUE(rpc::decode(d, back));
    EXPECT_EQ(back, h);
  }
  rpc::ReplyHeader denied;
  denied.stat = rpc::kMsgDenied;
  denied.reject = rpc::kAuthError;
  denied.auth = rpc::kAuthTooWeak;
  Bytes b;
  XdrEncoder e(b);
  rpc::encode(e, denied);
  XdrDecoder d(b);
  rpc::ReplyHeader back;
  ASSERT_TRUE(rpc::decode(d, back));
  EXPECT_EQ(rpc::to_string(back), "denied: AUTH_ERROR 5");
  // A call is not a reply.
  rpc::CallHeader c;
  Bytes cb;
  XdrEncoder ce(cb);
  rpc::encode(ce, c);
  XdrDecoder cd(cb);
  EXPECT_FALSE(rpc::decode(cd, back));
}

TEST(RpcRdma, MsgWithEveryChunkGoldenBytes) {
  rdma::Header h;
  h.xid = 0xaabbccdd;
  h.credits = 32;
  h.reads.push_back({148, {0x11, 0x1000, 0x0000000100000002ull}});
  h.writes.push_back({{{0x22, 0x2000, 3}}});
  h.reply = rdma::WriteChunk{{{0x33, 0x400, 4}}};
  Bytes b;
  const std::size_t n = rdma::encode(h, b);
  EXPECT_EQ(n, b.size());
  // One line per XDR item.
  // clang-format off
  const Bytes want{
      0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 1, 0, 0, 0, 32, 0, 0, 0, 0,  // xid vers credits MSG
      0, 0, 0, 1, 0, 0, 0, 148, 0, 0, 0, 0x11, 0, 0, 0x10, 0, 0, 0, 0, 1, 0, 0, 0, 2,  // read
      0, 0, 0, 0,                                                                      // end
      0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0x22, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 3,     // write
      0, 0, 0, 0,                                                                      // end
      0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0x33, 0, 0, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 4};    // reply
  // clang-format on
  EXPECT_EQ(b, want);
  b.push_back(0x99);  // the RPC message follows
  rdma::Header back;
  std::size_t len = 0;
  ASSERT_EQ(rdma::decode(b, back, len), rdma::DecodeError::kOk);
  EXPECT_EQ(back, h);
  EXPECT_EQ(len, want.size());
}

TEST(RpcRdma, PlainMsgIsTwentyEightBytes) {
  rdma::Header h;
  Bytes b;
  EXPECT_EQ(rdma::encode(h, b), rdma::kMinHeader);
}

TEST(RpcRdma, ErrorsRoundTrip) {
  rdma::Header h;
  h.xid = 5;
  h.proc = rdma::Proc::kError;
  h.error = rdma::ErrorCode::kVers;
  h.vers_low = h.vers_high = 1;
  Bytes b;
  rdma::encode(h, b);
  EXPECT_EQ(b.size(), 28u);
  rdma::Header back;
  std::size_t len;
  ASSERT_EQ(rdma::decode(b, back, len), rdma::DecodeError::kOk);
  EXPECT_EQ(back, h);
  // An ERR_VERS that echoes the refused version (as Linux's svcrdma does) is still an error.
  Bytes echo = b;
  echo[7] = 2;
  ASSERT_EQ(rdma::decode(echo, back, len), rdma::DecodeError::kOk);
  EXPECT_EQ(back.error, rdma::ErrorCode::kVers);
  h.error = rdma::ErrorCode::kChunk;
  b.clear();
  rdma::encode(h, b);
  EXPECT_EQ(b.size(), 20u);
  ASSERT_EQ(rdma::decode(b, back, len), rdma::DecodeError::kOk);
  EXPECT_EQ(back.error, rdma::ErrorCode::kChunk);
}

Bytes fixed_part(std::uint32_t vers, std::uint32_t proc) {
  Bytes b;
  XdrEncoder e(b);
  e.u32(1);
  e.u32(vers);
  e.u32(8);
  e.u32(proc);
  return b;
}

TEST(RpcRdma, MalformedHeadersAreRefusedWithAReason) {
  rdma::Header h;
  std::size_t len;
  EXPECT_EQ(rdma::decode(Bytes{0, 0, 0}, h, len), rdma::DecodeError::kShort);
  EXPECT_EQ(rdma::decode(fixed_part(2, 0), h, len), rdma::DecodeError::kBadVersion);
  EXPECT_EQ(h.xid, 1u);  // for the ERR_VERS answer
  EXPECT_EQ(rdma::decode(fixed_part(1, 2), h, len), rdma::DecodeError::kRetiredProc);
  EXPECT_EQ(rdma::decode(fixed_part(1, 3), h, len), rdma::DecodeError::kRetiredProc);
  EXPECT_EQ(rdma::decode(fixed_part(1, 5), h, len), rdma::DecodeError::kUnknownProc);
  EXPECT_EQ(rdma::decode(fixed_part(1, 0), h, len), rdma::DecodeError::kShort);  // no lists
  Bytes bad = fixed_part(1, 0);
  XdrEncoder e(bad);
  e.u32(2);  // not a discriminator
  EXPECT_EQ(rdma::decode(bad, h, len), rdma::DecodeError::kBadList);
  Bytes many = fixed_part(1, 0);
  XdrEncoder m(many);
  m.u32(0);
  m.u32(1);
  m.u32(100000);  // segments in one write chunk
  EXPECT_EQ(rdma::decode(many, h, len), rdma::DecodeError::kTooManyChunks);
  Bytes err = fixed_part(1, 4);
  XdrEncoder r(err);
  r.u32(3);
  EXPECT_EQ(rdma::decode(err, h, len), rdma::DecodeError::kBadError);
  // Every truncation of a valid header is refused, never read past.
  rdma::Header full;
  full.reads.push_back({0, {1, 2, 3}});
  full.writes.push_back({{{4, 5, 6}, {7, 8, 9}}});
  full.reply = rdma::WriteChunk{{{1, 1, 1}}};
  Bytes fb;
  rdma::encode(full, fb);
  for (std::size_t n = 0; n < fb.size(); ++n)
    EXPECT_NE(rdma::decode({fb.data(), n}, h, len), rdma::DecodeError::kOk) << n;
}

TEST(RpcRdma, RandomHeadersRoundTrip) {
  std::mt19937 gen(3);
  auto rng = [&] { return static_cast<std::uint32_t>(gen()); };
  for (int i = 0; i < 200; ++i) {
    rdma::Header h;
    h.xid = rng();
    h.credits = rng() % 256;
    h.proc = rng() % 2 ? rdma::Proc::kMsg : rdma::Proc::kNomsg;
    for (unsigned k = rng() % 4; k; --k) h.reads.push_back({rng(), {rng(), rng(), rng()}});
    for (unsigned k = rng() % 3; k; --k) {
      rdma::WriteChunk c;
      for (unsigned s = rng() % 4; s; --s) c.segments.push_back({rng(), rng(), rng()});
      h.writes.push_back(c);
    }
    if (rng() % 2) h.reply = rdma::WriteChunk{{{rng(), rng(), rng()}}};
    Bytes b;
    rdma::encode(h, b);
    rdma::Header back;
    std::size_t len;
    ASSERT_EQ(rdma::decode(b, back, len), rdma::DecodeError::kOk);
    EXPECT_EQ(back, h);
    EXPECT_EQ(len, b.size());
  }
}

TEST(ConnectPrivate, Rfc8797GoldenBytes) {
  rdma::ConnectPrivate p;
  p.remote_invalidate = true;
  p.send_size = 4096;
  p.receive_size = 1024;
  const Bytes b = rdma::encode(p);
  EXPECT_EQ(b, (Bytes{0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 0}));
  EXPECT_EQ(rdma::decode_private(b), p);
  EXPECT_FALSE(rdma::decode_private(Bytes{0xf6, 0xab, 0x0e, 0x18, 1, 1, 3}));
  EXPECT_FALSE(rdma::decode_private(Bytes{0, 0, 0, 0, 1, 1, 3, 0}));
  // Sizes are whole KiB from 1 to 256.
  p.send_size = 1u << 20;
  p.receive_size = 100;
  const auto back = rdma::decode_private(rdma::encode(p));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->send_size, 256u * 1024);
  EXPECT_EQ(back->receive_size, 1024u);
}

TEST(Nfs3, FattrRoundTripAndReadResultHead) {
  v3::Fattr a;
  a.type = v3::kDir;
  a.mode = 0755;
  a.size = 1ull << 40;
  a.fileid = 99;
  a.mtime = {5, 6};
  Bytes b;
  XdrEncoder e(b);
  encode(e, a);
  EXPECT_EQ(b.size(), 84u);
  XdrDecoder d(b);
  EXPECT_EQ(v3::decode_fattr(d), a);
  // READ3res up to the reduced data item: status, post_op_attr, count, eof, data length.
  Bytes r;
  XdrEncoder re(r);
  re.u32(v3::kOk);
  v3::encode_post_op(re, a);
  re.u32(4096);
  re.boolean(true);
  re.u32(4096);
  XdrDecoder rd(r);
  const auto head = v3::decode_read_head(rd);
  ASSERT_TRUE(rd.ok());
  EXPECT_EQ(head.count, 4096u);
  EXPECT_TRUE(head.eof);
  EXPECT_EQ(head.attr, a);
  // A bad file type is malformed.
  b[3] = 9;
  XdrDecoder bad(b);
  v3::decode_fattr(bad);
  EXPECT_FALSE(bad.ok());
}

TEST(Nfs3, ReaddirplusEntries) {
  Bytes b;
  XdrEncoder e(b);
  e.u32(v3::kOk);
  e.boolean(false);  // dir attributes
  e.fixed(Bytes(8, 7));
  for (int i = 0; i < 3; ++i) {
    e.boolean(true);
    e.u64(100 + i);
    e.string("n" + std::to_string(i));
    e.u64(i + 1);
    e.boolean(false);
    e.boolean(true);
    encode(e, v3::Fh{{1, 2, 3}});
  }
  e.boolean(false);
  e.boolean(true);
  XdrDecoder d(b);
  const auto r = v3::decode_readdirplus(d);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(r.entries.size(), 3u);
  EXPECT_EQ(r.entries[2].name, "n2");
  EXPECT_EQ(r.entries[2].cookie, 3u);
  EXPECT_EQ(r.entries[1].fh, (v3::Fh{{1, 2, 3}}));
  EXPECT_TRUE(r.eof);
  // Truncated anywhere: malformed, never a crash.
  for (std::size_t n = 0; n < b.size(); n += 3) {
    XdrDecoder t({b.data(), n});
    v3::decode_readdirplus(t);
    EXPECT_FALSE(t.ok()) << n;
  }
}

}  // namespace
}  // namespace roce::nfs
