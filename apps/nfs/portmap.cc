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
#include <chrono>
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
/// A signal (EINTR: SIGHUP, SIGUSR1, the lease-break signal on this thread) is no failure.
bool io_all(int fd, std::uint8_t* b, std::size_t n, bool out, std::uint64_t deadline) {
  std::size_t at = 0;
  while (at < n) {
    const std::uint64_t now = mono_ms();
    if (now >= deadline) return false;
    pollfd p{fd, static_cast<short>(out ? POLLOUT : POLLIN), 0};
    const int r = ::poll(&p, 1, static_cast<int>(deadline - now));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    const ssize_t k = out ? ::send(fd, b + at, n - at, MSG_NOSIGNAL | MSG_DONTWAIT)
                          : ::recv(fd, b + at, n - at, MSG_DONTWAIT);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k <= 0) return false;
    at += static_cast<std::size_t>(k);
  }
  return true;
}
/// connect() that a signal does not fail: the connection goes on (EINTR), so wait for it.
bool connect_fd(int fd, const sockaddr* a, socklen_t len, int timeout_ms) {
  if (::connect(fd, a, len) == 0) return true;
  if (errno != EINTR && errno != EINPROGRESS) return false;
  const std::uint64_t deadline = mono_ms() + static_cast<std::uint64_t>(timeout_ms);
  for (;;) {
    const std::uint64_t now = mono_ms();
    if (now >= deadline) return false;
    pollfd p{fd, POLLOUT, 0};
    const int r = ::poll(&p, 1, static_cast<int>(deadline - now));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    int err = 0;
    socklen_t el = sizeof err;
    return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0;
  }
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
      if (connect_fd(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a, timeout_ms)) return fd;
    }
    if (fd >= 0) ::close(fd);
  }
  // Loopback TCP from a reserved port (rpcbind refuses SET and UNSET from any other).
  if (tcp_port == 0) return -1;
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
  if (!connect_fd(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to, timeout_ms)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::optional<std::vector<std::uint8_t>> RpcbindClient::call(
    std::uint32_t proc, const std::vector<std::uint8_t>& args) {
  failure_ = Failure::kNoAnswer;
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
  // The reply, fragment by fragment until the last: small for SET and UNSET, but DUMP lists
  // every entry anyone registered (rpcbind has no per-user limit): up to max_reply bytes.
  for (bool last = false; ok && !last;) {
    std::uint8_t mk[4];
    ok = io_all(fd, mk, 4, false, deadline);
    if (!ok) break;
    const std::uint32_t v =
        std::uint32_t{mk[0]} << 24 | std::uint32_t{mk[1]} << 16 | std::uint32_t{mk[2]} << 8 | mk[3];
    last = v & 0x80000000u;
    const std::size_t n = v & 0x7fffffffu;
    if (reply.size() + n > max_reply) {
      ok = false;
      failure_ = Failure::kTooLarge;
      break;
    }
    const std::size_t at = reply.size();
    reply.resize(at + n);
    ok = io_all(fd, reply.data() + at, n, false, deadline);
  }
  ::close(fd);
  if (!ok) return std::nullopt;
  failure_ = Failure::kBadReply;
  XdrDecoder d(reply);
  rpc::ReplyHeader r;
  if (!rpc::decode(d, r) || r.xid != h.xid || r.stat != rpc::kMsgAccepted ||
      r.accept != rpc::kSuccess)
    return std::nullopt;
  failure_ = Failure::kNone;
  const auto rest = d.rest();
  return std::vector<std::uint8_t>(rest.begin(), rest.end());
}

std::string RpcbindClient::failure_text() const {
  const std::string where =
      unix_path + (tcp_port ? ", 127.0.0.1:" + std::to_string(tcp_port) : std::string());
  switch (failure_) {
    case Failure::kTooLarge:
      return "the host's rpcbind's table is larger than " + std::to_string(max_reply >> 20) +
             " MiB (" + where + "; somebody registered that many entries)";
    case Failure::kBadReply:
      return "a bad reply from the host's rpcbind (" + where + ")";
    default:
      return "no answer from the host's rpcbind (" + where + ")";
  }
}

std::string describe(const PortmapEntry& x) {
  return "program " + std::to_string(x.prog) + " version " + std::to_string(x.vers) + " " +
         x.netid + " " + universal_address(x);
}

const RpcbEntry* find_entry(const std::vector<RpcbEntry>& list, const PortmapEntry& x) {
  // rpcbind keeps one entry per program, version and netid (its SET refuses a second address).
  for (const auto& r : list)
    if (r.prog == x.prog && r.vers == x.vers && r.netid == x.netid) return &r;
  return nullptr;
}

std::optional<std::vector<RpcbEntry>> RpcbindClient::dump() {
  const auto r = call(kDump, {});
  if (!r) return std::nullopt;
  XdrDecoder d(*r);
  std::vector<RpcbEntry> out;
  // rpcblist: an optional entry after another, bounded by max_reply. rpcbind bounds none of
  // the strings (any user may SET a 250-byte address): each string up to the reply's size.
  const std::size_t any = r->size();
  while (d.ok() && d.boolean()) {
    RpcbEntry x;
    x.prog = d.u32();
    x.vers = d.u32();
    x.netid = d.string(any);
    x.addr = d.string(any);
    x.owner = d.string(any);
    if (d.ok()) out.push_back(std::move(x));
  }
  if (!d.ok()) {
    failure_ = Failure::kBadReply;
    return std::nullopt;
  }
  return out;
}

namespace {
/// An owner rpcbind records only for a privileged caller: "superuser" (uid 0 over its local
/// socket). Any other is a uid's (anyone may SET over the local socket, mode 0666).
bool privileged_owner(const std::string& owner) { return owner == "superuser"; }
}  // namespace

std::string RpcbindClient::self_owner() {
  return ::geteuid() == 0 ? "superuser" : std::to_string(::geteuid());
}

bool RpcbindClient::unset(const PortmapEntry& x) {
  if (x.netid.empty()) return false;  // an empty netid is every netid
  std::vector<std::uint8_t> args;
  XdrEncoder e(args);
  encode_rpcb(e, x);
  const auto r = call(kUnset, args);
  if (!r) return false;
  XdrDecoder d(*r);
  const bool ok = d.boolean();
  return d.ok() && ok;
}

RpcbindClient::Result RpcbindClient::register_entry(const PortmapEntry& x, RpcbEntry* holder) {
  const auto say = [&](const std::string& m) {
    if (log) log(m);
  };
  const std::string what = describe(x);
  const std::string mine_owner = self_owner();
  // Who holds the program, version and netid now: rpcbind's SET would refuse another address
  // (or, from an older rpcbind, replace it); GETADDR answers for the caller's own netid only.
  const auto list = dump();
  if (!list && failure_ != Failure::kTooLarge) {
    say(failure_text() + ": " + what + " not registered");
    return Result::kNoAnswer;
  }
  if (!list) {
    // Flooded (any user may SET): who holds it cannot be seen. SET says whether anybody does;
    // when nobody did, the entry is ours.
    say(failure_text() + ": registering " + what + " without looking");
  } else if (const RpcbEntry* there = find_entry(*list, x);
             there && there->addr != universal_address(x)) {
    if (holder) *holder = *there;
    if (!privileged_owner(there->owner) && there->owner != mine_owner) {
      // A user's entry (anyone may SET over rpcbind's local socket): a squat, not a host
      // mountd, which runs as root. Root takes it away (rpcbind lets "superuser" UNSET any).
      if (!privileged) {
        say("WARNING: the host's rpcbind sends clients of program " + std::to_string(x.prog) +
            " version " + std::to_string(x.vers) + " " + x.netid + " to " + there->addr +
            ", registered by uid " + there->owner +
            " (not root: a squatter?); not root, so it cannot be taken away: " +
            universal_address(x) + " not registered (run as root, or rpcinfo -d as root)");
        return Result::kTaken;
      }
      PortmapEntry theirs = x;
      if (!unset(theirs)) {
        say("the host's rpcbind refused to take away uid " + there->owner + "'s entry of " +
            std::to_string(x.prog) + " version " + std::to_string(x.vers) + " " + x.netid + " at " +
            there->addr + ": " + universal_address(x) + " not registered");
        return Result::kTaken;
      }
      ++squats_removed_;
      say("took away uid " + there->owner + "'s entry of program " + std::to_string(x.prog) +
          " version " + std::to_string(x.vers) + " " + x.netid + " at " + there->addr +
          " from the host's rpcbind (not root's: a squat; counted in rpcbind_squats_removed)");
    } else {
      say("the host's rpcbind already has program " + std::to_string(x.prog) + " version " +
          std::to_string(x.vers) + " " + x.netid + " at " + there->addr + " (owner " +
          there->owner + "): somebody else serves it (a host mountd or nfsd?); " +
          universal_address(x) + " not registered, theirs left alone");
      return Result::kTaken;
    }
  }
  std::vector<std::uint8_t> args;
  XdrEncoder e(args);
  encode_rpcb(e, x);
  const auto r = call(kSet, args);
  if (!r) {
    say(failure_text() + ": " + what + " not registered");
    return Result::kNoAnswer;
  }
  XdrDecoder d(*r);
  const bool set = d.boolean();
  if (!d.ok() || !set) {
    // Someone registered it between the DUMP and the SET, or SET is not allowed from here.
    const auto again = dump();
    const RpcbEntry* there = again ? find_entry(*again, x) : nullptr;
    if (there && there->addr != universal_address(x)) {
      if (holder) *holder = *there;
      say("the host's rpcbind already has " + x.netid + " " + std::to_string(x.prog) + " version " +
          std::to_string(x.vers) + " at " + there->addr + " (owner " + there->owner +
          "): " + universal_address(x) + " not registered");
      return Result::kTaken;
    }
    if (!again && failure_ == Failure::kTooLarge) {
      say(failure_text() + " and its SET of " + what +
          " says no: somebody holds it (whose cannot be listed); not registered");
      return Result::kRefused;
    }
    say("the host's rpcbind refused " + what + " (a reserved source port or root is needed)");
    return Result::kRefused;
  }
  // The owner rpcbind recorded (the caller's uid over the local socket, "superuser" for root):
  // unregister_all() takes away only the entry that still has it.
  PortmapEntry mine = x;
  mine.owner = mine_owner;
  if (const auto after = dump())
    if (const RpcbEntry* there = find_entry(*after, x);
        there && there->addr == universal_address(x))
      mine.owner = there->owner;
  done_.push_back(std::move(mine));
  say("registered with the host's rpcbind: " + what);
  return Result::kRegistered;
}

void RpcbindClient::unregister_all() {
  if (done_.empty()) return;
  const auto list = dump();
  if (!list && log)
    log(failure_text() + ": taking away the " + std::to_string(done_.size()) +
        " entries registered here without looking whether they are still ours");
  while (!done_.empty()) {
    const PortmapEntry x = std::move(done_.back());
    done_.pop_back();
    // rpcbind's UNSET goes by program, version and netid alone: only while the entry there is
    // still the one registered here (a host mountd may have replaced it since: its own UNSET
    // and SET at its start), and never with an empty netid (that is every netid). When rpcbind
    // cannot list (a table flooded past max_reply, or no answer), what was registered here is
    // taken away still: a stale entry would send clients to a port anyone may take.
    if (x.netid.empty()) continue;
    if (list) {
      const RpcbEntry* there = find_entry(*list, x);
      if (!there) continue;  // gone already
      if (there->addr != universal_address(x) || there->owner != x.owner) {
        if (log)
          log("left the host's rpcbind entry of program " + std::to_string(x.prog) + " version " +
              std::to_string(x.vers) + " " + x.netid + " alone: it is " + there->addr + " (owner " +
              there->owner + ") now, not ours");
        continue;
      }
    }
    unset(x);
  }
}

RpcbindRegistrar::RpcbindRegistrar(Options o, std::vector<PortmapEntry> entries,
                                   std::function<void(const std::string&)> log)
    : o_(std::move(o)), log_(std::move(log)), pending_(std::move(entries)) {
  client_.unix_path = o_.unix_path;
  client_.tcp_port = o_.tcp_port;
  client_.timeout_ms = o_.timeout_ms;
  client_.log = log_;
}

RpcbindRegistrar::~RpcbindRegistrar() {
  {
    std::lock_guard g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  client_.unregister_all();  // the host's rpcbind forgets us first: clients stop being sent here
}

bool RpcbindRegistrar::try_all(std::vector<std::pair<PortmapEntry, RpcbEntry>>* taken) {
  std::vector<PortmapEntry> left;
  {
    std::lock_guard g(mu_);
    ++counts_.tries;
    left.swap(pending_);
  }
  std::vector<PortmapEntry> again;
  Counts add;
  for (auto& x : left) {
    RpcbEntry holder;
    switch (client_.register_entry(x, &holder)) {
      case RpcbindClient::Result::kRegistered:
        ++add.registered;
        break;
      case RpcbindClient::Result::kTaken:
        ++add.taken;
        if (taken) taken->emplace_back(x, holder);
        break;
      case RpcbindClient::Result::kRefused:
        break;  // not for us to mend: said once
      case RpcbindClient::Result::kNoAnswer:
        again.push_back(std::move(x));
        break;
    }
  }
  std::lock_guard g(mu_);
  counts_.registered += add.registered;
  counts_.taken += add.taken;
  counts_.squats_removed = client_.squats_removed();
  pending_ = std::move(again);
  return pending_.empty();
}

std::vector<std::pair<PortmapEntry, RpcbEntry>> RpcbindRegistrar::start() {
  std::vector<std::pair<PortmapEntry, RpcbEntry>> taken;
  if (!o_.watch && try_all(&taken)) {
    std::lock_guard g(mu_);
    idle_ = true;
    return taken;
  }
  if (!o_.watch && log_)
    log_("the host's rpcbind does not answer yet: trying again every " +
         std::to_string(o_.retry_ms) + " ms for " + std::to_string(o_.wait_ms / 1000) + " s");
  thread_ = std::thread([this] { run(); });
  return taken;
}

void RpcbindRegistrar::run() {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(o_.wait_ms);
  bool watching = o_.watch;
  for (;;) {
    {
      std::unique_lock g(mu_);
      if (cv_.wait_until(g,
                         std::min(end, std::chrono::steady_clock::now() +
                                           std::chrono::milliseconds(o_.retry_ms)),
                         [&] { return stop_; }))
        return;
    }
    if (std::chrono::steady_clock::now() >= end) break;
    if (watching) {
      // Only rpcbind's local socket (never our own port mapper's TCP port).
      RpcbindClient probe;
      probe.unix_path = o_.unix_path;
      probe.tcp_port = 0;
      probe.timeout_ms = o_.timeout_ms;
      if (!probe.answers()) continue;
      watching = false;
      if (log_)
        log_("the host's rpcbind answers on " + o_.unix_path +
             " now (it started after this service): registering with it too");
    }
    if (try_all(nullptr)) {
      std::lock_guard g(mu_);
      idle_ = true;
      cv_.notify_all();
      return;
    }
  }
  std::lock_guard g(mu_);
  if (!pending_.empty() && !watching) {
    counts_.given_up += pending_.size();
    if (log_)
      log_("gave up registering with the host's rpcbind after " +
           std::to_string(o_.wait_ms / 1000) + " s (" + std::to_string(pending_.size()) +
           " entries): clients need mountport=, mountproto=tcp and mountvers=3 (docs/nfs.md)");
  }
  pending_.clear();
  idle_ = true;
  cv_.notify_all();
}

RpcbindRegistrar::Counts RpcbindRegistrar::counts() const {
  std::lock_guard g(mu_);
  return counts_;
}

void RpcbindRegistrar::wait_idle() {
  std::unique_lock g(mu_);
  cv_.wait(g, [&] { return idle_ || stop_; });
}

}  // namespace roce::nfs
