/// @file
/// RPC-over-RDMA v1 transport header and RFC 8797 private data (rpcrdma.h).
#include "apps/nfs/rpcrdma.h"

#include "apps/nfs/xdr.h"

namespace roce::nfs::rdma {

std::uint64_t WriteChunk::length() const {
  std::uint64_t n = 0;
  for (const auto& s : segments) n += s.length;
  return n;
}

std::string_view to_string(DecodeError e) {
  switch (e) {
    case DecodeError::kOk:
      return "ok";
    case DecodeError::kShort:
      return "header runs past the message";
    case DecodeError::kBadVersion:
      return "not RPC-over-RDMA version 1";
    case DecodeError::kRetiredProc:
      return "RDMA_MSGP or RDMA_DONE (retired)";
    case DecodeError::kUnknownProc:
      return "unknown procedure";
    case DecodeError::kBadList:
      return "bad list discriminator";
    case DecodeError::kTooManyChunks:
      return "too many chunks or segments";
    case DecodeError::kBadError:
      return "unknown RDMA_ERROR code";
  }
  return "?";
}

namespace {

void put_segment(XdrEncoder& e, const Segment& s) {
  e.u32(s.handle);
  e.u32(s.length);
  e.u64(s.offset);
}

Segment get_segment(XdrDecoder& d) {
  Segment s;
  s.handle = d.u32();
  s.length = d.u32();
  s.offset = d.u64();
  return s;
}

void put_write_chunk(XdrEncoder& e, const WriteChunk& c) {
  e.u32(static_cast<std::uint32_t>(c.segments.size()));
  for (const auto& s : c.segments) put_segment(e, s);
}

DecodeError get_write_chunk(XdrDecoder& d, WriteChunk& c) {
  const std::uint32_t n = d.u32();
  if (!d.ok()) return DecodeError::kShort;
  if (n > kMaxSegmentsPerChunk) return DecodeError::kTooManyChunks;
  for (std::uint32_t i = 0; i < n; ++i) c.segments.push_back(get_segment(d));
  return d.ok() ? DecodeError::kOk : DecodeError::kShort;
}

/// The discriminator of an XDR optional-data list entry: 1 (another entry) or 0 (the end).
DecodeError more(XdrDecoder& d, bool& v) {
  const std::uint32_t x = d.u32();
  if (!d.ok()) return DecodeError::kShort;
  if (x > 1) return DecodeError::kBadList;
  v = x == 1;
  return DecodeError::kOk;
}

}  // namespace

std::size_t encode(const Header& h, std::vector<std::uint8_t>& out) {
  const std::size_t start = out.size();
  XdrEncoder e(out);
  e.u32(h.xid);
  e.u32(h.vers);
  e.u32(h.credits);
  e.u32(static_cast<std::uint32_t>(h.proc));
  if (h.proc == Proc::kError) {
    e.u32(static_cast<std::uint32_t>(h.error));
    if (h.error == ErrorCode::kVers) {
      e.u32(h.vers_low);
      e.u32(h.vers_high);
    }
    return out.size() - start;
  }
  for (const auto& r : h.reads) {
    e.u32(1);
    e.u32(r.position);
    put_segment(e, r.seg);
  }
  e.u32(0);
  for (const auto& w : h.writes) {
    e.u32(1);
    put_write_chunk(e, w);
  }
  e.u32(0);
  if (h.reply) {
    e.u32(1);
    put_write_chunk(e, *h.reply);
  } else {
    e.u32(0);
  }
  return out.size() - start;
}

DecodeError decode(std::span<const std::uint8_t> msg, Header& h, std::size_t& header_len) {
  XdrDecoder d(msg);
  h = Header{};
  h.xid = d.u32();
  h.vers = d.u32();
  h.credits = d.u32();
  const std::uint32_t proc = d.u32();
  if (!d.ok()) return DecodeError::kShort;
  // An RDMA_ERROR is read whatever its version: an ERR_VERS may carry the version it refuses
  // (Linux's svcrdma echoes the call's).
  if (h.vers != kVersion && proc != static_cast<std::uint32_t>(Proc::kError))
    return DecodeError::kBadVersion;
  if (proc > static_cast<std::uint32_t>(Proc::kError)) return DecodeError::kUnknownProc;
  h.proc = static_cast<Proc>(proc);
  if (h.proc == Proc::kMsgp || h.proc == Proc::kDone) return DecodeError::kRetiredProc;
  if (h.proc == Proc::kError) {
    const std::uint32_t code = d.u32();
    if (!d.ok()) return DecodeError::kShort;
    if (code == static_cast<std::uint32_t>(ErrorCode::kVers)) {
      h.error = ErrorCode::kVers;
      h.vers_low = d.u32();
      h.vers_high = d.u32();
    } else if (code == static_cast<std::uint32_t>(ErrorCode::kChunk)) {
      h.error = ErrorCode::kChunk;
    } else {
      return DecodeError::kBadError;
    }
    if (!d.ok()) return DecodeError::kShort;
    header_len = d.pos();
    return DecodeError::kOk;
  }
  bool again = false;
  DecodeError e;
  for (;;) {
    if ((e = more(d, again)) != DecodeError::kOk) return e;
    if (!again) break;
    if (h.reads.size() == kMaxReadSegments) return DecodeError::kTooManyChunks;
    ReadSegment r;
    r.position = d.u32();
    r.seg = get_segment(d);
    if (!d.ok()) return DecodeError::kShort;
    h.reads.push_back(r);
  }
  for (;;) {
    if ((e = more(d, again)) != DecodeError::kOk) return e;
    if (!again) break;
    if (h.writes.size() == kMaxWriteChunks) return DecodeError::kTooManyChunks;
    h.writes.emplace_back();
    if ((e = get_write_chunk(d, h.writes.back())) != DecodeError::kOk) return e;
  }
  if ((e = more(d, again)) != DecodeError::kOk) return e;
  if (again) {
    h.reply.emplace();
    if ((e = get_write_chunk(d, *h.reply)) != DecodeError::kOk) return e;
  }
  header_len = d.pos();
  return DecodeError::kOk;
}

namespace {
std::uint8_t size_code(std::uint32_t size) {
  if (size < 1024) return 0;
  const std::uint32_t k = size / 1024 - 1;
  return static_cast<std::uint8_t>(k > 255 ? 255 : k);
}
}  // namespace

std::vector<std::uint8_t> encode(const ConnectPrivate& p) {
  std::vector<std::uint8_t> out;
  XdrEncoder e(out);
  e.u32(ConnectPrivate::kMagic);
  out.push_back(p.version);
  out.push_back(p.remote_invalidate ? 1 : 0);
  out.push_back(size_code(p.send_size));
  out.push_back(size_code(p.receive_size));
  return out;
}

std::optional<ConnectPrivate> decode_private(std::span<const std::uint8_t> pd) {
  if (pd.size() < ConnectPrivate::kSize) return std::nullopt;
  XdrDecoder d(pd);
  if (d.u32() != ConnectPrivate::kMagic) return std::nullopt;
  ConnectPrivate p;
  p.version = pd[4];
  p.remote_invalidate = pd[5] & 1;
  p.send_size = (std::uint32_t{pd[6]} + 1) * 1024;
  p.receive_size = (std::uint32_t{pd[7]} + 1) * 1024;
  return p;
}

}  // namespace roce::nfs::rdma
