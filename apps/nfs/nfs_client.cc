/// @file
/// NFSv3 client (nfs_client.h).
#include "apps/nfs/nfs_client.h"

#include <sched.h>
#include <unistd.h>

#include <cstring>
#include <random>

namespace roce::nfs {

using namespace v3;

namespace {
/// The XDR position where a call's data opaque begins, given the call so far.
RpcCall begin(std::uint32_t xid, std::uint32_t proc, const rpc::AuthSys& auth) {
  RpcCall c;
  XdrEncoder e(c.msg);
  rpc::CallHeader h;
  h.xid = xid;
  h.prog = kNfsProgram;
  h.vers = kNfsVersion;
  h.proc = proc;
  h.cred = rpc::auth_sys(auth);
  rpc::encode(e, h);
  c.reply_max = 1024;
  return c;
}
}  // namespace

bool NfsClient::check(XdrDecoder& d, const RpcResult& r) {
  if (!r.ok) {
    err_ = r.error;
    return false;
  }
  rpc::ReplyHeader h;
  if (!rpc::decode(d, h)) {
    err_ = "malformed RPC reply";
    return false;
  }
  if (h.stat != rpc::kMsgAccepted || h.accept != rpc::kSuccess) {
    err_ = "RPC " + rpc::to_string(h);
    return false;
  }
  return true;
}

std::optional<RpcResult> NfsClient::invoke(RpcCall c) {
  RpcResult r = t_.call(std::move(c));
  if (!r.ok) {
    err_ = r.error;
    return std::nullopt;
  }
  return r;
}

#define NFS_CALL(proc)                   \
  RpcCall c = begin(++xid_, proc, auth); \
  XdrEncoder e(c.msg)

bool NfsClient::null() {
  NFS_CALL(kNull);
  const auto r = invoke(std::move(c));
  if (!r) return false;
  XdrDecoder d(r->reply);
  return check(d, *r);
}

std::optional<Fattr> NfsClient::getattr(const Fh& fh) {
  NFS_CALL(kGetattr);
  encode(e, fh);
  const auto r = invoke(std::move(c));
  if (!r) return std::nullopt;
  XdrDecoder d(r->reply);
  if (!check(d, *r)) return std::nullopt;
  const auto st = static_cast<Status>(d.u32());
  if (st != kOk) {
    err_ = to_string(st);
    return std::nullopt;
  }
  const Fattr a = decode_fattr(d);
  if (!d.ok()) {
    err_ = "malformed GETATTR result";
    return std::nullopt;
  }
  return a;
}

std::optional<LookupRes> NfsClient::lookup(const Fh& dir, const std::string& name) {
  NFS_CALL(kLookup);
  encode(e, dir);
  e.string(name);
  const auto r = invoke(std::move(c));
  if (!r) return std::nullopt;
  XdrDecoder d(r->reply);
  if (!check(d, *r)) return std::nullopt;
  auto l = decode_lookup(d);
  if (!d.ok()) {
    err_ = "malformed LOOKUP result";
    return std::nullopt;
  }
  if (l.status != kOk) {
    err_ = std::string(to_string(l.status)) + " (" + name + ")";
    return std::nullopt;
  }
  return l;
}

std::optional<LookupRes> NfsClient::walk(const Fh& root, const std::string& path) {
  LookupRes cur;
  cur.fh = root;
  std::size_t i = 0;
  while (i < path.size()) {
    const std::size_t j = std::min(path.find('/', i), path.size());
    if (j > i) {
      auto l = lookup(cur.fh, path.substr(i, j - i));
      if (!l) return std::nullopt;
      cur = std::move(*l);
    }
    i = j + 1;
  }
  if (!cur.attr) {
    cur.attr = getattr(cur.fh);
    if (!cur.attr) return std::nullopt;
  }
  return cur;
}

std::optional<FsinfoRes> NfsClient::fsinfo(const Fh& fh) {
  NFS_CALL(kFsinfo);
  encode(e, fh);
  const auto r = invoke(std::move(c));
  if (!r) return std::nullopt;
  XdrDecoder d(r->reply);
  if (!check(d, *r)) return std::nullopt;
  auto f = decode_fsinfo(d);
  if (!d.ok() || f.status != kOk) {
    err_ = d.ok() ? to_string(f.status) : "malformed FSINFO result";
    return std::nullopt;
  }
  return f;
}

std::optional<std::vector<DirEntry>> NfsClient::readdir(const Fh& dir) {
  std::vector<DirEntry> all;
  std::uint64_t cookie = 0;
  Verf verf{};
  for (int round = 0; round < 100000; ++round) {
    NFS_CALL(kReaddirplus);
    encode(e, dir);
    e.u64(cookie);
    e.fixed(verf);
    e.u32(8192);   // dircount
    e.u32(32768);  // maxcount: past the inline threshold, so a reply chunk is offered
    c.reply_max = 32768 + 512;
    const auto r = invoke(std::move(c));
    if (!r) return std::nullopt;
    XdrDecoder d(r->reply);
    if (!check(d, *r)) return std::nullopt;
    auto res = decode_readdirplus(d);
    if (!d.ok()) {
      err_ = "malformed READDIRPLUS result";
      return std::nullopt;
    }
    if (res.status != kOk) {
      err_ = to_string(res.status);
      return std::nullopt;
    }
    verf = res.verf;
    if (!res.entries.empty()) cookie = res.entries.back().cookie;
    for (auto& x : res.entries) all.push_back(std::move(x));
    if (res.eof) return all;
    if (res.entries.empty()) {
      err_ = "READDIRPLUS returned nothing before eof";
      return std::nullopt;
    }
  }
  err_ = "directory too large";
  return std::nullopt;
}

std::optional<CreateRes> NfsClient::create(const Fh& dir, const std::string& name,
                                           std::uint32_t mode) {
  NFS_CALL(kCreate);
  encode(e, dir);
  e.string(name);
  e.u32(kUnchecked);
  Sattr s;
  s.mode = mode;
  s.size = 0;  // truncate an existing file
  encode(e, s);
  const auto r = invoke(std::move(c));
  if (!r) return std::nullopt;
  XdrDecoder d(r->reply);
  if (!check(d, *r)) return std::nullopt;
  auto cr = decode_create(d);
  if (!d.ok() || cr.status != kOk) {
    err_ = d.ok() ? to_string(cr.status) : "malformed CREATE result";
    return std::nullopt;
  }
  if (!cr.fh) {
    auto l = lookup(dir, name);
    if (!l) return std::nullopt;
    cr.fh = l->fh;
  }
  return cr;
}

bool NfsClient::remove(const Fh& dir, const std::string& name) {
  NFS_CALL(kRemove);
  encode(e, dir);
  e.string(name);
  const auto r = invoke(std::move(c));
  if (!r) return false;
  XdrDecoder d(r->reply);
  if (!check(d, *r)) return false;
  const auto st = static_cast<Status>(d.u32());
  if (st != kOk) err_ = to_string(st);
  return st == kOk;
}

bool NfsClient::commit(const Fh& fh) {
  NFS_CALL(kCommit);
  encode(e, fh);
  e.u64(0);
  e.u32(0);
  const auto r = invoke(std::move(c));
  if (!r) return false;
  XdrDecoder d(r->reply);
  if (!check(d, *r)) return false;
  const auto st = static_cast<Status>(d.u32());
  if (st != kOk) err_ = to_string(st);
  return st == kOk;
}

RpcCall NfsClient::read_call(const Fh& fh, std::uint64_t offset, std::uint8_t* out,
                             std::uint32_t len) {
  NFS_CALL(kRead);
  encode(e, fh);
  e.u64(offset);
  e.u32(len);
  // Large READs: the data comes through a write chunk (RFC 8267 2.2: READ's data is the one
  // DDP-eligible item); small ones inline.
  if (len > ddp_threshold)
    c.write_target = {out, len};
  else
    c.reply_max = len + 256;
  return c;
}

std::optional<std::uint32_t> NfsClient::read_done(const RpcResult& r, std::uint8_t* out,
                                                  std::uint32_t len, bool* eof) {
  XdrDecoder d(r.reply);
  if (!check(d, r)) return std::nullopt;
  const auto rr = decode_read_head(d);
  if (!d.ok() || rr.status != kOk) {
    err_ = d.ok() ? to_string(rr.status) : "malformed READ result";
    return std::nullopt;
  }
  if (rr.count > len || rr.data_len != rr.count) {
    err_ = "READ returned more than asked";
    return std::nullopt;
  }
  if (eof) *eof = rr.eof;
  if (r.written || rr.count == 0) {
    if (r.written != rr.count) {
      err_ = "write chunk carried " + std::to_string(r.written) + " bytes, READ says " +
             std::to_string(rr.count);
      return std::nullopt;
    }
    return rr.count;
  }
  const auto data = d.fixed(rr.count);
  if (!d.ok()) {
    err_ = "READ data missing";
    return std::nullopt;
  }
  std::memcpy(out, data.data(), rr.count);
  return rr.count;
}

std::optional<std::uint32_t> NfsClient::read(const Fh& fh, std::uint64_t offset, std::uint8_t* out,
                                             std::uint32_t len, bool* eof) {
  const auto r = invoke(read_call(fh, offset, out, len));
  if (!r) return std::nullopt;
  return read_done(*r, out, len, eof);
}

RpcCall NfsClient::write_call(const Fh& fh, std::uint64_t offset,
                              std::span<const std::uint8_t> data, StableHow how) {
  NFS_CALL(kWrite);
  encode(e, fh);
  e.u64(offset);
  e.u32(static_cast<std::uint32_t>(data.size()));
  e.u32(how);
  e.u32(static_cast<std::uint32_t>(data.size()));  // the data opaque's length stays inline
  if (data.size() > ddp_threshold) {
    // The data moves to a read chunk at its XDR position (RFC 8166 3.4.5).
    c.read_data = data;
    c.read_position = static_cast<std::uint32_t>(c.msg.size());
  } else {
    e.fixed(data);
  }
  return c;
}

std::optional<std::uint32_t> NfsClient::write_done(const RpcResult& r) {
  XdrDecoder d(r.reply);
  if (!check(d, r)) return std::nullopt;
  const auto w = decode_write(d);
  if (!d.ok() || w.status != kOk) {
    err_ = d.ok() ? to_string(w.status) : "malformed WRITE result";
    return std::nullopt;
  }
  return w.count;
}

std::optional<std::uint32_t> NfsClient::write(const Fh& fh, std::uint64_t offset,
                                              std::span<const std::uint8_t> data, StableHow how) {
  const auto r = invoke(write_call(fh, offset, data, how));
  if (!r) return std::nullopt;
  return write_done(*r);
}

bool NfsClient::read_file(const Fh& fh, std::uint64_t size, std::vector<std::uint8_t>& out,
                          std::uint32_t io, std::uint32_t depth) {
  out.assign(size, 0);
  std::uint64_t next = 0, done = 0;
  std::uint32_t busy = 0;
  bool bad = false;
  while ((next < size || busy) && !bad) {
    while (next < size && busy < depth) {
      const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::uint64_t>(io, size - next));
      std::uint8_t* p = out.data() + next;
      ++busy;
      t_.submit(read_call(fh, next, p, n), [&, p, n](RpcResult&& r) {
        --busy;
        const auto got = read_done(r, p, n, nullptr);
        if (!got || *got != n) {
          if (got) err_ = "short READ (file changed?)";
          bad = true;
        } else {
          done += n;
        }
      });
      next += n;
    }
    if (!t_.poll() && busy) sched_yield();
  }
  t_.drain(5);
  return !bad && done == size;
}

bool NfsClient::write_file(const Fh& fh, std::span<const std::uint8_t> data, std::uint32_t io,
                           std::uint32_t depth) {
  std::uint64_t next = 0;
  std::uint32_t busy = 0;
  bool bad = false;
  while ((next < data.size() || busy) && !bad) {
    while (next < data.size() && busy < depth) {
      const std::uint32_t n =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(io, data.size() - next));
      ++busy;
      t_.submit(write_call(fh, next, data.subspan(next, n), kUnstable), [&, n](RpcResult&& r) {
        --busy;
        const auto got = write_done(r);
        if (!got || *got != n) {
          if (got) err_ = "short WRITE";
          bad = true;
        }
      });
      next += n;
    }
    if (!t_.poll() && busy) sched_yield();
  }
  t_.drain(5);
  return !bad && commit(fh);
}

}  // namespace roce::nfs
