/// @file
/// The port mapper's answer (portmap.h).
#include "apps/nfs/portmap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "apps/nfs/rpc.h"
#include "apps/nfs/xdr.h"

namespace roce::nfs {

namespace {
constexpr std::uint32_t kNull = 0, kSet = 1, kUnset = 2, kGetport = 3, kDump = 4;
constexpr std::uint32_t kGetversaddr = 9;  // RPCBIND v4
constexpr std::uint32_t kIpProtoTcp = 6, kIpProtoUdp = 17;

std::string uaddr(const PortmapEntry& e) { return universal_address(e); }
}  // namespace

std::string universal_address(const PortmapEntry& e) {
  return e.address + "." + std::to_string(e.port >> 8) + "." + std::to_string(e.port & 0xff);
}

void portmap_reply(const std::vector<PortmapEntry>& table, std::span<const std::uint8_t> call,
                   std::vector<std::uint8_t>& reply) {
  reply.clear();
  XdrDecoder d(call);
  rpc::CallHeader h;
  XdrEncoder e(reply);
  rpc::ReplyHeader r;
  if (!rpc::decode(d, h)) {
    if (!d.ok() || call.size() < 8) return;
    r.xid = h.xid;
    r.stat = rpc::kMsgDenied;
    r.reject = rpc::kRpcMismatch;
    r.low = r.high = rpc::kRpcVersion;
    rpc::encode(e, r);
    return;
  }
  r.xid = h.xid;
  if (h.prog != kPortmapProgram) {
    r.accept = rpc::kProgUnavail;
    rpc::encode(e, r);
    return;
  }
  if (h.vers < 2 || h.vers > 4) {
    r.accept = rpc::kProgMismatch;
    r.low = 2;
    r.high = 4;
    rpc::encode(e, r);
    return;
  }
  const auto garbage = [&] {
    reply.clear();
    r.accept = rpc::kGarbageArgs;
    rpc::encode(e, r);
  };
  if (h.proc == kNull) return rpc::encode(e, r);
  if (h.proc == kSet || h.proc == kUnset) {
    // Only the service's own programs are known here: nobody registers through it.
    rpc::encode(e, r);
    e.boolean(false);
    return;
  }
  if (h.vers == 2) {
    if (h.proc == kGetport) {
      const std::uint32_t prog = d.u32(), vers = d.u32(), prot = d.u32();
      d.u32();  // port: ignored
      if (!d.ok()) return garbage();
      std::uint32_t port = 0;
      const char* netid = prot == kIpProtoTcp ? "tcp" : prot == kIpProtoUdp ? "udp" : "";
      for (const auto& x : table)
        if (x.prog == prog && x.vers == vers && x.netid == netid) port = x.port;
      rpc::encode(e, r);
      e.u32(port);
      return;
    }
    if (h.proc == kDump) {
      rpc::encode(e, r);
      for (const auto& x : table) {
        if (x.netid != "tcp" && x.netid != "udp") continue;
        e.boolean(true);
        e.u32(x.prog);
        e.u32(x.vers);
        e.u32(x.netid == "tcp" ? kIpProtoTcp : kIpProtoUdp);
        e.u32(x.port);
      }
      e.boolean(false);
      return;
    }
  } else if (h.proc == kDump) {  // RPCBPROC_DUMP (v3 and v4): every netid, rdma included
    rpc::encode(e, r);
    for (const auto& x : table) {
      e.boolean(true);
      e.u32(x.prog);
      e.u32(x.vers);
      e.string(x.netid);
      e.string(uaddr(x));
      e.string(x.owner);
    }
    e.boolean(false);
    return;
  } else if (h.proc == kGetport || (h.vers == 4 && h.proc == kGetversaddr)) {
    // RPCBPROC_GETADDR (v3 and v4); v4's GETVERSADDR answers the same from a table with one
    // version of each program per netid.
    const std::uint32_t prog = d.u32(), vers = d.u32();
    const std::string netid = d.string(64);
    d.string(128);  // r_addr
    d.string(128);  // r_owner
    if (!d.ok()) return garbage();
    std::string addr;
    for (const auto& x : table)
      if (x.prog == prog && x.vers == vers && x.netid == netid) addr = uaddr(x);
    rpc::encode(e, r);
    e.string(addr);  // "" when not offered
    return;
  }
  r.accept = rpc::kProcUnavail;
  rpc::encode(e, r);
}

namespace {
std::uint64_t mono_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::uint64_t(t.tv_sec) * 1000 + std::uint64_t(t.tv_nsec) / 1'000'000;
}
/// Sends all of `b` or reads exactly `n` bytes before `deadline` (ms); false on error or time.
bool io_all(int fd, std::uint8_t* b, std::size_t n, bool out, std::uint64_t deadline) {
  std::size_t at = 0;
  while (at < n) {
    const std::uint64_t now = mono_ms();
    if (now >= deadline) return false;
    pollfd p{fd, static_cast<short>(out ? POLLOUT : POLLIN), 0};
    if (::poll(&p, 1, static_cast<int>(deadline - now)) <= 0) return false;
    const ssize_t k =
        out ? ::send(fd, b + at, n - at, MSG_NOSIGNAL) : ::recv(fd, b + at, n - at, 0);
    if (k <= 0) return false;
    at += static_cast<std::size_t>(k);
  }
  return true;
}
void encode_rpcb(XdrEncoder& e, const PortmapEntry& x) {
  e.u32(x.prog);
  e.u32(x.vers);
  e.string(x.netid);
  e.string(universal_address(x));
  e.string(x.owner);
}
}  // namespace

int RpcbindClient::connect_rpcbind() {
  // rpcbind's local socket first: no reserved port needed, the owner is our uid.
  if (!unix_path.empty()) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (fd >= 0 && unix_path.size() < sizeof a.sun_path) {
      std::memcpy(a.sun_path, unix_path.c_str(), unix_path.size() + 1);
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return fd;
    }
    if (fd >= 0) ::close(fd);
  }
  // Loopback TCP from a reserved port (rpcbind refuses SET and UNSET from any other).
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (std::uint16_t p = 1023; p >= 600; --p) {
    me.sin_port = htons(p);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&me), sizeof me) == 0) break;
    if (errno == EACCES || errno == EPERM) break;  // not privileged: rpcbind will say no
  }
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(tcp_port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::optional<std::vector<std::uint8_t>> RpcbindClient::call(
    std::uint32_t proc, const std::vector<std::uint8_t>& args) {
  const int fd = connect_rpcbind();
  if (fd < 0) return std::nullopt;
  std::vector<std::uint8_t> m(4);
  XdrEncoder e(m);
  rpc::CallHeader h;
  h.xid = ++xid_;
  h.prog = kPortmapProgram;
  h.vers = 4;
  h.proc = proc;
  rpc::encode(e, h);
  m.insert(m.end(), args.begin(), args.end());
  const std::uint32_t mark = 0x80000000u | static_cast<std::uint32_t>(m.size() - 4);
  for (int i = 0; i < 4; ++i)
    m[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(mark >> (24 - 8 * i));
  const std::uint64_t deadline = mono_ms() + static_cast<std::uint64_t>(timeout_ms);
  std::vector<std::uint8_t> reply;
  bool ok = io_all(fd, m.data(), m.size(), true, deadline);
  // The reply: fragments until the last (small: a boolean, an address), at most 64 KiB.
  for (bool last = false; ok && !last;) {
    std::uint8_t mk[4];
    ok = io_all(fd, mk, 4, false, deadline);
    if (!ok) break;
    const std::uint32_t v =
        std::uint32_t{mk[0]} << 24 | std::uint32_t{mk[1]} << 16 | std::uint32_t{mk[2]} << 8 | mk[3];
    last = v & 0x80000000u;
    const std::size_t n = v & 0x7fffffffu;
    if (reply.size() + n > 65536) {
      ok = false;
      break;
    }
    const std::size_t at = reply.size();
    reply.resize(at + n);
    ok = io_all(fd, reply.data() + at, n, false, deadline);
  }
  ::close(fd);
  if (!ok) return std::nullopt;
  XdrDecoder d(reply);
  rpc::ReplyHeader r;
  if (!rpc::decode(d, r) || r.xid != h.xid || r.stat != rpc::kMsgAccepted ||
      r.accept != rpc::kSuccess)
    return std::nullopt;
  const auto rest = d.rest();
  return std::vector<std::uint8_t>(rest.begin(), rest.end());
}

bool RpcbindClient::register_entry(const PortmapEntry& x) {
  const auto say = [&](const std::string& m) {
    if (log) log(m);
  };
  const std::string what = "program " + std::to_string(x.prog) + " version " +
                           std::to_string(x.vers) + " " + x.netid + " " + universal_address(x);
  std::vector<std::uint8_t> args;
  XdrEncoder e(args);
  encode_rpcb(e, x);
  const auto set = [&]() -> std::optional<bool> {
    const auto r = call(kSet, args);
    if (!r) return std::nullopt;
    XdrDecoder d(*r);
    const bool b = d.boolean();
    return d.ok() && b;
  };
  auto ok = set();
  if (!ok) {
    say("no answer from the host's rpcbind (" + unix_path +
        ", 127.0.0.1:" + std::to_string(tcp_port) + "): " + what + " not registered");
    return false;
  }
  if (!*ok) {
    // Taken: ours from a run that could not unregister (same address), or someone else's.
    std::vector<std::uint8_t> q;
    XdrEncoder qe(q);
    encode_rpcb(qe, x);
    const auto r = call(kGetport, q);  // RPCBPROC_GETADDR
    std::string there;
    if (r) {
      XdrDecoder d(*r);
      there = d.string(128);
    }
    if (there != universal_address(x)) {
      say("the host's rpcbind refused " + what +
          (there.empty() ? std::string(" (a reserved source port or root is needed)")
                         : " (registered there already at " + there + ": left alone)"));
      return false;
    }
    call(kUnset, args);
    ok = set();
    if (!ok || !*ok) {
      say("the host's rpcbind refused " + what);
      return false;
    }
  }
  done_.push_back(x);
  say("registered with the host's rpcbind: " + what);
  return true;
}

void RpcbindClient::unregister_all() {
  while (!done_.empty()) {
    std::vector<std::uint8_t> args;
    XdrEncoder e(args);
    encode_rpcb(e, done_.back());
    call(kUnset, args);
    done_.pop_back();
  }
}

}  // namespace roce::nfs
