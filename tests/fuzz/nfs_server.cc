/// @file
/// Fuzz target: the NFS server's procedure decoder as it sits behind RPC-over-RDMA (apps/nfs):
/// one RPC call message, as the transport assembles it, into NfsServer::handle (or handle_mount)
/// over a freshly made temporary export holding a file, a directory with a file, a symbolic link
/// out of the export and a FIFO. The input's first byte picks the export's options (ro/rw,
/// root_squash, all_squash), whether the peer is a listed client and NFS or MOUNT; the rest is
/// the call. A file handle written as a 12-byte opaque "RNF3" and a small index stands for the
/// n-th object of the export (root, f, d, d/g, l, p), so that calls reach the procedures.
///
/// Checked after every call: a non-empty reply is an RPC reply with the call's XID; the thread's
/// file system ids are the process's again; no descriptor left open; the handle table is within
/// its bound; nothing outside the export changed (the link's target directory and its sentinel
/// file).
#include "apps/nfs/nfs_server.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <vector>

#include "apps/nfs/nfs3.h"
#include "apps/nfs/rpc.h"
#include "apps/nfs/xdr.h"
#include "tests/fuzz/fuzz_target.h"

namespace fs = std::filesystem;
using namespace roce::nfs;

namespace {

struct Dirs {
  fs::path base, root, outside;
  Dirs() {
    char tmpl[] = "/tmp/fuzz_nfs_server.XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    base = tmpl;
    root = base / "export";
    outside = base / "outside";
  }
  ~Dirs() {
    std::error_code ec;
    fs::remove_all(base, ec);
  }
};

Dirs& dirs() {
  static Dirs d;
  return d;
}

/// The export as every input finds it.
void make_export() {
  const Dirs& d = dirs();
  std::error_code ec;
  fs::remove_all(d.root, ec);
  fs::remove_all(d.outside, ec);
  fs::create_directories(d.root / "d");
  fs::create_directories(d.outside);
  std::ofstream(d.outside / "sentinel") << "outside";
  ::chmod((d.outside / "sentinel").c_str(), 0644);
  std::ofstream(d.root / "f") << "hello world";
  std::ofstream(d.root / "d" / "g") << "g";
  fs::create_directory_symlink(d.outside, d.root / "l");
  ::mkfifo((d.root / "p").c_str(), 0666);
  ::chmod(d.root.c_str(), 0777);
}

bool outside_unchanged() {
  const Dirs& d = dirs();
  struct stat s {};
  if (::lstat((d.outside / "sentinel").c_str(), &s) != 0 || (s.st_mode & 07777) != 0644 ||
      s.st_size != 7 || s.st_uid != ::geteuid())
    return false;
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(d.outside)) (void)e, ++n;
  std::ifstream in(d.outside / "sentinel");
  std::string got;
  in >> got;
  return n == 1 && got == "outside";
}

constexpr std::uint8_t kMagic[4] = {'R', 'N', 'F', '3'};

std::size_t open_fds() {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) (void)e, ++n;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t flags = data[0];
  make_export();
  ExportOptions o;
  o.rw = flags & 1;
  o.root_squash = flags & 2;
  o.all_squash = flags & 4;
  std::string err;
  if (!parse_clients("192.0.2.0/24", o, err)) std::abort();
  const CallContext ctx{roce::wire::Ipv4Addr{(flags & 8) ? 0xC6120009u : 0xC0000202u}};
  NfsServer srv(dirs().root.string(), "/", o);
  srv.max_io = 65536;
  srv.max_handles = 64;

  // The handles of the export's objects, learnt as a client learns them.
  std::vector<v3::Fh> fhs{srv.root_fh()};
  const auto lookup = [&](const v3::Fh& dir, const char* name) {
    std::vector<std::uint8_t> b;
    XdrEncoder e(b);
    rpc::CallHeader h;
    h.prog = v3::kNfsProgram;
    h.vers = v3::kNfsVersion;
    h.proc = v3::kLookup;
    h.cred = rpc::auth_sys({0, "fuzz", ::geteuid(), ::getegid(), {}});
    rpc::encode(e, h);
    v3::encode(e, dir);
    e.string(name);
    RpcReply r;
    srv.handle(CallContext{roce::wire::Ipv4Addr{0xC0000202u}}, b, r);
    XdrDecoder d(r.msg);
    rpc::ReplyHeader rh;
    if (!rpc::decode(d, rh)) return;
    const auto l = v3::decode_lookup(d);
    if (l.status == v3::kOk) fhs.push_back(l.fh);
  };
  lookup(fhs[0], "f");
  lookup(fhs[0], "d");
  if (fhs.size() == 3) lookup(fhs[2], "g");
  lookup(fhs[0], "l");
  lookup(fhs[0], "p");

  // A placeholder is an opaque of 12 bytes, "RNF3" and an index in its last byte: the real
  // handle (of its own length) takes its place, length word and padding included.
  std::vector<std::uint8_t> call;
  const std::span<const std::uint8_t> in(data + 1, size - 1);
  for (std::size_t i = 0; i < in.size();) {
    if (i + 16 <= in.size() && in[i] == 0 && in[i + 1] == 0 && in[i + 2] == 0 && in[i + 3] == 12 &&
        std::memcmp(in.data() + i + 4, kMagic, 4) == 0) {
      const auto& fh = fhs[in[i + 15] % fhs.size()];
      XdrEncoder e(call);
      v3::encode(e, fh);
      i += 16;
      continue;
    }
    call.push_back(in[i++]);
  }
  const std::size_t fds = open_fds();
  RpcReply r;
  if (flags & 16)
    srv.handle_mount(ctx, call, r);
  else
    srv.handle(ctx, call, r);

  if (!r.msg.empty()) {
    XdrDecoder d(r.msg);
    rpc::ReplyHeader rh;
    if (!rpc::decode(d, rh) || call.size() < 4 || rh.xid != *rpc::peek_xid(call)) std::abort();
  }
  if (r.has_payload && r.payload.size() > srv.max_io) std::abort();
  if (::syscall(SYS_setfsuid, -1) != static_cast<long>(::geteuid()) ||
      ::syscall(SYS_setfsgid, -1) != static_cast<long>(::getegid()))
    std::abort();
  if (srv.handles() > srv.max_handles) std::abort();
  if (srv.open_files() > srv.max_open_files) std::abort();
  srv.close_files();                    // the open-file cache's are the server's to keep
  if (open_fds() != fds) std::abort();  // every other descriptor of the call closed
  if (!outside_unchanged()) std::abort();
  return 0;
}
