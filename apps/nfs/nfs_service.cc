/// @file
/// The NFSv3 service (nfs_service.h).
#include "apps/nfs/nfs_service.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

#include "controlplane/address.h"

namespace roce::nfs {

std::string default_mount_address(const std::string& iface) {
  std::string out = "127.0.0.1";
  ifaddrs* all = nullptr;
  if (iface.empty() || ::getifaddrs(&all) != 0) return out;
  for (const ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || iface != i->ifa_name) continue;
    char b[INET_ADDRSTRLEN];
    const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (inet_ntop(AF_INET, &sin->sin_addr, b, sizeof b)) out = b;
    break;
  }
  ::freeifaddrs(all);
  return out;
}

ExportOptions read_exports_file(const std::string& path, const ExportOptions& base) {
  // Who may mount is decided here: the file must be a regular file (a FIFO would block the
  // loop that reloads it) of root or of this server's user, writable by its owner alone, and
  // whole: at most 64 KiB, at least one setting, its last line ended by a newline. A file caught
  // while it is being written (truncated, or a line cut short: "192.0.2.0/24" read as "/2")
  // is refused and the options in force stay. Write it elsewhere and rename it over.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    throw std::runtime_error("service nfs: --exports-file " + path + ": " + std::strerror(errno));
  struct stat st {};
  std::string text;
  const char* bad = nullptr;
  if (::fstat(fd, &st) != 0)
    bad = "cannot stat it";
  else if (!S_ISREG(st.st_mode))
    bad = "not a regular file";
  else if (st.st_uid != 0 && st.st_uid != ::geteuid())
    bad = "owned by another user (it must be root's or this server's)";
  else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    bad = "writable by group or others";
  else if (st.st_size > 65536)
    bad = "larger than 64 KiB";
  if (bad == nullptr) {
    char chunk[4096];
    for (;;) {
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        bad = "cannot read it";
        break;
      }
      if (n == 0) break;
      text.append(chunk, static_cast<std::size_t>(n));
      if (text.size() > 65536) {
        bad = "larger than 64 KiB";
        break;
      }
    }
  }
  ::close(fd);
  if (bad == nullptr && text.empty()) bad = "empty (being written? write it elsewhere and rename)";
  if (bad == nullptr && text.back() != '\n')
    bad = "its last line has no newline (being written? write it elsewhere and rename)";
  if (bad != nullptr) throw std::runtime_error("service nfs: --exports-file " + path + ": " + bad);
  std::FILE* f = ::fmemopen(text.data(), text.size(), "r");
  if (!f) throw std::runtime_error("service nfs: --exports-file " + path + ": out of memory");
  ExportOptions o = base;
  int settings = 0;
  char buf[4096];
  int line = 0;
  std::string err;
  while (std::fgets(buf, sizeof buf, f)) {
    ++line;
    std::string l(buf);
    const auto why = [&](const std::string& w) {
      std::fclose(f);
      return std::runtime_error("service nfs: " + path + ":" + std::to_string(line) + ": " + w);
    };
    if (!l.empty() && l.back() != '\n' && !std::feof(f)) throw why("line too long");
    if (const auto hash = l.find('#'); hash != std::string::npos) l.erase(hash);
    const auto first = l.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) continue;
    l.erase(0, first);
    l.erase(l.find_last_not_of(" \t\r\n") + 1);
    const auto sp = l.find_first_of(" \t");
    std::string key = l.substr(0, sp);
    const std::string value =
        sp == std::string::npos ? std::string() : l.substr(l.find_first_not_of(" \t", sp));
    if (key.rfind("--", 0) == 0) key.erase(0, 2);
    std::vector<std::string> warnings;
    ++settings;
    if (key == "export-options") {
      if (!parse_export_options(value, o, err, &warnings)) throw why(err);
      for (const auto& w : warnings) std::fprintf(stderr, "service nfs: %s\n", w.c_str());
    } else if (key == "clients") {
      if (!parse_clients(value, o, err)) throw why(err);
    } else {
      throw why("unknown key '" + key + "' (export-options OPTS, clients LIST)");
    }
  }
  std::fclose(f);
  if (settings == 0)
    throw std::runtime_error("service nfs: --exports-file " + path +
                             ": no export-options or clients line (being written?)");
  return o;
}

std::string rpcbind_installed(const std::vector<std::string>& paths) {
  for (const auto& p : paths)
    if (::access(p.c_str(), F_OK) == 0) return p;
  return {};
}

std::string export_path_for(const NfsServiceConfig& c) {
  if (!c.export_path.empty()) return c.export_path;
  std::error_code ec;
  const auto p = std::filesystem::canonical(c.root, ec);  // the root must exist: checked later
  return ec ? c.root : p.string();
}

namespace {
/// std::stoull's value of `v` and in `used` the characters it took: 0 when it took none or the
/// value overflowed. The callers' own checks say what else a flag accepts.
unsigned long long stoull_or_none(const std::string& v, std::size_t& used) {
  try {
    return std::stoull(v, &used);
  } catch (const std::exception&) {
    used = 0;
    return 0;
  }
}
}  // namespace

std::uint16_t parse_port(const std::string& flag, const std::string& v) {
  std::size_t used = 0;
  const unsigned long long n = stoull_or_none(v, used);
  if (v.empty() || v[0] == '-' || used != v.size() || n < 1 || n > 65535)
    throw std::runtime_error("service nfs: " + flag + " must be a number in 1..65535");
  return static_cast<std::uint16_t>(n);
}

std::uint32_t parse_read_inflight(const std::string& v) {
  std::size_t used = 0;
  unsigned long long n = stoull_or_none(v, used);
  if (v.empty() || v[0] < '0' || v[0] > '9') used = 0;  // (stoull takes " 1" and "-1")
  const std::string unit = used ? v.substr(used) : "";
  if (n > kMaxReadInflight) used = 0;  // (before a shift could wrap it)
  if (unit == "K" || unit == "k")
    n <<= 10;
  else if (unit == "M" || unit == "m")
    n <<= 20;
  else if (!unit.empty())
    used = 0;
  if (!used || n < kMinReadInflight || n > kMaxReadInflight)
    throw std::runtime_error("--max-read-inflight '" + v + "': bytes of RDMA READs out at once, " +
                             std::to_string(kMinReadInflight) + " (4K) to " +
                             std::to_string(kMaxReadInflight) + " (64M)");
  return static_cast<std::uint32_t>(n);
}

void parse_service_args(const std::vector<std::string>& args, NfsServiceConfig& c) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (i + 1 >= args.size()) throw std::runtime_error("service nfs: " + a + " needs a value");
    const std::string& v = args[++i];
    const auto num = [&](unsigned long lo, unsigned long hi) {
      std::size_t used = 0;
      const unsigned long long n = stoull_or_none(v, used);
      if (v.empty() || v[0] < '0' || v[0] > '9' || used != v.size() || n < lo || n > hi)
        throw std::runtime_error("service nfs: " + a + " must be a number in " +
                                 std::to_string(lo) + ".." + std::to_string(hi));
      return static_cast<std::uint32_t>(n);
    };
    if (a == "--root")
      c.root = v;
    else if (a == "--export")
      c.export_path = v;
    else if (a == "--export-options" || a == "--clients") {
      std::string err;
      std::vector<std::string> warnings;
      if (!(a == "--clients" ? parse_clients(v, c.exports, err)
                             : parse_export_options(v, c.exports, err, &warnings)))
        throw std::runtime_error("service nfs: " + a + ": " + err);
      for (const auto& w : warnings) std::fprintf(stderr, "service nfs: %s\n", w.c_str());
    } else if (a == "--max-handles")
      c.max_handles = num(16, 1u << 24);
    else if (a == "--threads")
      c.threads = num(1, 256);
    else if (a == "--portmap-port")
      c.portmap_port = static_cast<std::uint16_t>(num(0, 65535));
    else if (a == "--rpcbind-wait")
      c.rpcbind_wait_s = num(0, 3600);
    else if (a == "--mount-address")
      c.mount_address = v;
    else if (a == "--mount-port")
      c.mount_port = static_cast<std::uint16_t>(num(1, 65535));
    else if (a == "--credits")
      c.transport.credits = num(1, 128);
    else if (a == "--inline")
      c.transport.inline_size = num(1024, 65536);
    else if (a == "--max-read-inflight") {
      try {
        c.transport.max_read_bytes = parse_read_inflight(v);
      } catch (const std::runtime_error& e) {
        throw std::runtime_error(std::string("service nfs: ") + e.what());
      }
    } else if (a == "--tcp-port")
      c.tcp_port = static_cast<std::uint16_t>(num(1, 65535));
    else if (a == "--max-connections")
      c.transport.max_connections = num(1, 4096);
    else if (a == "--max-half-open")
      c.transport.max_half_open = num(1, 4096);
    else if (a == "--max-per-peer")
      c.transport.max_per_peer = num(1, 4096);
    else if (a == "--reap-idle")
      c.transport.reap_idle_ms = num(0, 86'400'000);
    else if (a == "--mount-clients")
      c.mount_clients = num(1, 1024);
    else if (a == "--mount-per-peer")
      c.mount_per_peer = num(1, 1024);
    else if (a == "--mount-timeout")
      c.mount_timeout_ms = num(100, 3'600'000);
    else if (a == "--delegations") {
      const auto on = v4::parse_switch(v);
      if (!on)
        throw std::runtime_error("service nfs: --delegations must be on or off (yes/no, 1/0)");
      c.delegations = *on;
    } else if (a == "--lease-time")
      c.lease_seconds = num(v4::Limits::kMinLeaseSeconds, v4::Limits::kMaxLeaseSeconds);
    else if (a == "--grace-time")
      c.grace_seconds = num(v4::Limits::kMinGraceSeconds, v4::Limits::kMaxGraceSeconds);
    else if (a == "--versions") {
      // rpc.nfsd's -N/-V and nfs.conf's vers3=/vers4.1=: which NFS versions are served.
      bool v3 = false, v41 = false;
      for (std::size_t at = 0; at <= v.size();) {
        const std::size_t j = std::min(v.find(',', at), v.size());
        const std::string item = v.substr(at, j - at);
        if (item == "3")
          v3 = true;
        else if (item == "4.1")
          v41 = true;
        else
          throw std::runtime_error("service nfs: --versions: \"" + item +
                                   "\" is not a served version (a list of 3 and 4.1)");
        at = j + 1;
      }
      c.nfs_v3 = v3;
      c.nfs_v41 = v41;
    } else if (a == "--state-dir")
      c.state_dir = v;
    else if (a == "--exports-file")
      c.exports_file = v;
    else if (a == "--portmap") {
      using P = NfsServiceConfig::Portmap;
      if (v == "auto")
        c.portmap = P::kAuto;
      else if (v == "own")
        c.portmap = P::kOwn;
      else if (v == "register")
        c.portmap = P::kRegister;
      else if (v == "off")
        c.portmap = P::kOff;
      else
        throw std::runtime_error("service nfs: --portmap must be auto, own, register or off");
    } else
      throw std::runtime_error(
          "service nfs: unknown option " + a +
          " (--root, --export, --export-options, --clients, --max-handles, "
          "--threads, --portmap-port, "
          "--mount-address, --mount-port, --credits, --inline, --tcp-port, "
          "--max-connections, --max-half-open, --max-per-peer, --reap-idle, --max-read-inflight, "
          "--mount-clients, --mount-per-peer, --mount-timeout, "
          "--delegations, --lease-time, --grace-time, --versions, --state-dir, --exports-file, "
          "--portmap, --rpcbind-wait)");
  }
  if (c.root.empty()) throw std::runtime_error("service nfs: --root DIR is required");
}

void check_unprivileged(const ExportOptions& e) {
  const unsigned uid = ::geteuid(), gid = ::getegid();
  if (!(e.all_squash && e.anonuid == uid && e.anongid == gid))
    throw std::runtime_error(
        "service nfs: not root (no CAP_SETUID/CAP_SETGID), so it cannot act as its callers: "
        "export with all_squash,anonuid=" +
        std::to_string(uid) + ",anongid=" + std::to_string(gid) +
        " to serve every caller as this user, or run as root (docs/nfs.md)");
  const int n = ::getgroups(0, nullptr);
  std::vector<gid_t> g(n > 0 ? static_cast<std::size_t>(n) : 0);
  if (n > 0 && ::getgroups(n, g.data()) != n) g.clear();
  std::string extra;
  for (const gid_t x : g)
    if (x != gid) extra += (extra.empty() ? "" : ",") + std::to_string(x);
  if (!extra.empty())
    throw std::runtime_error("service nfs: not root and a member of groups " + extra +
                             ", which it cannot drop: every caller would have them too. Run it "
                             "as a user without supplementary groups (systemd: User= with no "
                             "SupplementaryGroups=, and not in /etc/group's lists), or as root "
                             "(docs/nfs.md)");
}

namespace {
/// Makes `path` (its last directory 0700) and judges it as Nfs4Server will: a directory, not a
/// link, owned by this process's user, writable by nobody else. Empty: fine; else why not.
std::string usable_dir(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return std::strerror(errno);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a directory (or a symbolic link)";
  if (st.st_uid != ::geteuid()) return "owned by uid " + std::to_string(st.st_uid);
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "writable by group or others";
  if (::access(path.c_str(), W_OK | X_OK) != 0) return std::strerror(errno);
  return {};
}
}  // namespace

std::string state_dir_for(const NfsServiceConfig& c) {
  // The root first: a start that fails leaves no directory behind (review19-user 6).
  if (struct stat st{}; ::stat(c.root.c_str(), &st) != 0)
    throw std::runtime_error("NFS export root " + c.root + ": " + std::strerror(errno));
  else if (!S_ISDIR(st.st_mode))
    throw std::runtime_error("NFS export root " + c.root + " is not a directory");
  if (!c.state_dir.empty()) {
    if (const std::string why = usable_dir(c.state_dir); !why.empty())
      throw std::runtime_error("service nfs: --state-dir " + c.state_dir + ": " + why +
                               " (it must be this user's own directory, mode 0700 or 0755)");
    return c.state_dir;
  }
  const std::string system = default_state_dir(c);
  if (const std::string why = usable_dir(system); !why.empty()) {
    std::fprintf(stderr,
                 "service nfs: no directory for NFSv4.1 client records (%s: %s): no grace period "
                 "after a restart (--state-dir DIR)\n",
                 system.c_str(), why.c_str());
    return {};
  }
  return system;
}

std::string default_state_dir(const NfsServiceConfig& c) {
  // One directory per service: the root's canonical path and the service's port, hashed (two
  // services on one root, or the roots "/a/b" and "/a_b", never share records), with the
  // root's last name to help a reader: /var/lib/roce-nfsd/export-20049-<hash>. Never next to
  // the export, where its clients might write.
  std::error_code ec;
  const std::filesystem::path root = std::filesystem::weakly_canonical(c.root, ec);
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (const unsigned char ch : root.string() + '\0' + std::to_string(c.port)) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  std::string base = root.filename().string();
  if (base.empty()) base = "root";
  char tail[40];
  std::snprintf(tail, sizeof tail, "-%u-%016llx", unsigned{c.port},
                static_cast<unsigned long long>(h));
  return "/var/lib/roce-nfsd/" + base + tail;
}

namespace {
// The transport's options with the export's client list as its door: an unlisted source is
// refused at its REQ (the list as it is now: a reload changes it).
ServerOptions with_door(const NfsServiceConfig& c, const NfsServer& nfs) {
  ServerOptions o = c.transport;
  if (!o.allows) o.allows = [&nfs](wire::Ipv4Addr a) { return nfs.allows(a); };
  return o;
}
ExportOptions initial_exports(const NfsServiceConfig& c) {
  return c.exports_file.empty() ? c.exports : read_exports_file(c.exports_file, c.exports);
}
}  // namespace

NfsService::NfsService(client::Context& context, const NfsServiceConfig& c)
    : state_dir_(state_dir_for(c)),
      nfs_(c.root, export_path_for(c), initial_exports(c)),
      nfs4_(
          nfs_,
          [&c] {
            v4::Limits l;
            l.lease_seconds = c.lease_seconds;
            l.grace_seconds = c.grace_seconds;
            return l;
          }(),
          state_dir_),
      worker_(CallWorker::kDefaultCapacity, c.threads),
      rdma_(
          context, with_door(c, nfs_),
          [this](const CallContext& ctx, std::span<const std::uint8_t> call, RpcReply& r) {
            // v4 holds its own lock; v3 is thread-safe (and answers a version not served)
            if (nfs_.v4_served && Nfs4Server::is_v4(call))
              nfs4_.handle(ctx, call, r);
            else
              nfs_.handle(ctx, call, r);
          },
          &worker_),
      mount_(
          [this](const CallContext& ctx, std::span<const std::uint8_t> call,
                 std::vector<std::uint8_t>& reply) {
            RpcReply r;
            nfs_.handle_mount(ctx, call, r);
            reply = std::move(r.msg);
          },
          &worker_) {
  if (!nfs_.acts_as_callers()) check_unprivileged(nfs_.options());
  // MOUNT's list of who mounted what, kept as mountd's rmtab: `showmount -a` after a restart.
  if (!state_dir_.empty() && !nfs_.keep_mounts_in(state_dir_ + "/rmtab"))
    std::fprintf(stderr, "service nfs: cannot read %s/rmtab (%s): MOUNT's list in memory only\n",
                 state_dir_.c_str(), std::strerror(errno));
  base_exports_ = c.exports;
  exports_file_ = c.exports_file;
  if (!exports_file_.empty()) {
    struct stat st {};
    if (::stat(exports_file_.c_str(), &st) == 0) {
      exports_mtime_ = st.st_mtim;
      exports_size_ = static_cast<std::uint64_t>(st.st_size);
      exports_ino_ = st.st_ino;
    }
  }
  // Descriptors: the open-file cache takes up to a quarter of the soft limit (nfs_server.cc),
  // connections, handles being served and directories the rest; take the hard limit.
  if (rlimit nofile{};
      ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  if (!nfs_.persistent_handles())
    std::fprintf(stderr, "service nfs: %s\n", nfs_.handle_note().c_str());
  nfs_.max_io = c.transport.max_io;
  nfs4_.max_io = c.transport.max_io;
  // NFSv4.1's back channel in the RDMA connection's reverse direction (RFC 8167): CB_RECALLs out
  // through the transport, their REPLYs and closed connections back, never waiting on the loop.
  nfs4_.log = [](const std::string& m) { std::fprintf(stderr, "service nfs: %s\n", m.c_str()); };
  if (const std::string why = nfs4_.state_error(); !why.empty())  // a link, others may write...
    std::fprintf(stderr, "service nfs: %s\n", why.c_str());
  nfs4_.backchannel = true;
  nfs4_.delegations = c.delegations;
  if (c.delegations && !Nfs4Server::leases_usable())
    std::fprintf(stderr,
                 "service nfs: the host gives no file leases (fs.leases-enable=0): no NFSv4 "
                 "read delegations\n");
  rdma_.on_backward_reply = [this](std::uint64_t conn, std::span<const std::uint8_t> r) {
    nfs4_.post_reply(conn, r);
  };
  rdma_.on_closed = [this](std::uint64_t conn) { nfs4_.post_closed(conn); };
  nfs_.max_handles = c.max_handles;
  mount_.max_clients = c.mount_clients;
  mount_.max_per_peer = c.mount_per_peer;
  mount_.idle_timeout_ms = c.mount_timeout_ms;
  nfs_.v3_served = c.nfs_v3;
  nfs_.v4_served = c.nfs_v41;
  std::string err;
  // Without v3 no MOUNT and no port mapper (what they serve is v3's: a v4.1 mount needs
  // neither), as knfsd's rpc.mountd with vers3=n listens nowhere.
  if (c.nfs_v3 && !mount_.listen(c.mount_address, c.mount_port, err)) throw std::runtime_error(err);
  rdma_.listen(c.port);
  if (c.nfs_v3 && c.portmap_port && c.portmap != NfsServiceConfig::Portmap::kOff)
    start_portmap(context, c);
  if (c.tcp_port) {
    tcp_ = std::make_unique<RpcTcpServer>(
        [this](const CallContext& ctx, std::span<const std::uint8_t> call,
               std::vector<std::uint8_t>& reply) {
          RpcReply r;
          if (nfs_.v4_served && Nfs4Server::is_v4(call))
            nfs4_.handle(ctx, call, r);
          else
            nfs_.handle(ctx, call, r);
          reply = std::move(r.msg);
          if (r.has_payload) {  // no chunks over TCP: READ's data follows inline
            const std::size_t n = r.payload.size();
            reply.insert(reply.end(), r.payload.begin(), r.payload.end());
            reply.insert(reply.end(), xdr_pad(n), 0);
          }
        },
        &worker_);
    tcp_->max_record = c.transport.max_io + 4096;
    if (!tcp_->listen(c.mount_address, c.tcp_port, err)) throw std::runtime_error(err);
  }
}

NfsService::~NfsService() {
  rpcbind_.reset();  // the host's rpcbind forgets us first: clients stop being sent here
  worker_.stop();
  if (portmap_udp_ >= 0) ::close(portmap_udp_);
}

void NfsService::start_portmap(client::Context& context, const NfsServiceConfig& c) {
  // What mount.nfs asks for: MOUNT v3 (TCP), NFS v3 over RDMA at the RoCE address (and over
  // TCP when --tcp-port serves it), and the port mapper itself.
  using namespace v3;
  const std::string roce = ctl::to_string(context.port().ipv4);
  portmap_table_ = {{kMountProgram, kMountVersion, "tcp", c.mount_address, c.mount_port},
                    {kNfsProgram, kNfsVersion, "rdma", roce, c.port},
                    {kPortmapProgram, 2, "tcp", c.mount_address, c.portmap_port},
                    {kPortmapProgram, 2, "udp", c.mount_address, c.portmap_port},
                    {kPortmapProgram, 3, "tcp", c.mount_address, c.portmap_port},
                    {kPortmapProgram, 4, "tcp", c.mount_address, c.portmap_port}};
  if (c.tcp_port)
    portmap_table_.push_back({kNfsProgram, kNfsVersion, "tcp", c.mount_address, c.tcp_port});
  using P = NfsServiceConfig::Portmap;
  const auto say = [](const std::string& m) {
    std::fprintf(stderr, "service nfs: %s\n", m.c_str());
  };
  // What mountd and nfsd register with the host's rpcbind: MOUNT v3 on TCP and NFS v3 on RDMA
  // (and TCP), unregistered at stop (only while still ours: RpcbindClient).
  std::vector<PortmapEntry> entries;
  const std::string owner = ::geteuid() == 0 ? "superuser" : std::to_string(::geteuid());
  for (auto x : portmap_table_)
    if (x.prog != kPortmapProgram) {
      x.owner = owner;
      entries.push_back(std::move(x));
    }
  const auto registrar = [&](bool watch) {
    RpcbindRegistrar::Options o;
    o.unix_path = c.rpcbind_socket;
    o.tcp_port = watch ? 0 : c.portmap_port;  // watching: never our own port mapper's port
    o.wait_ms = static_cast<int>(c.rpcbind_wait_s * 1000);
    o.watch = watch;
    return std::make_unique<RpcbindRegistrar>(o, entries, say);
  };
  // A host mountd (nfs-kernel-server) or nfsd holding MOUNT v3/tcp (or NFS v3) there already:
  // `register` refuses to start (the administrator asked for the host's rpcbind to send clients
  // here, and it cannot); `auto` says so and goes on (clients of the host's rpcbind reach the
  // host's mountd; this export needs mountport= and mountaddr=).
  const auto register_with_host = [&](bool strict) {
    std::vector<std::pair<PortmapEntry, RpcbEntry>> taken;
    // Only root's entries ("superuser": a host mountd or nfsd) keep `register` from starting:
    // another uid's is a squat (any user may SET over rpcbind's local socket), taken away when
    // this service runs as root (RpcbindClient), else warned about.
    const auto a_hosts = [](const RpcbEntry& t) { return t.owner == "superuser"; };
    if (strict) {  // refused before anything is registered
      RpcbindClient probe;
      probe.unix_path = c.rpcbind_socket;
      probe.tcp_port = c.portmap_port;
      if (const auto list = probe.dump())
        for (const auto& x : entries)
          if (const RpcbEntry* t = find_entry(*list, x);
              t && t->addr != universal_address(x) && a_hosts(*t))
            taken.emplace_back(x, *t);
    }
    if (taken.empty()) {
      rpcbind_ = registrar(false);
      taken = rpcbind_->start();
    }
    if (strict) std::erase_if(taken, [&](const auto& t) { return !a_hosts(t.second); });
    if (taken.empty()) return;
    std::string what;
    for (const auto& [x, there] : taken)
      what += (what.empty() ? "" : "; ") + std::string(x.prog == kMountProgram ? "MOUNT" : "NFS") +
              " v" + std::to_string(x.vers) + "/" + x.netid + " is registered at " + there.addr +
              " (owner " + there.owner + ")";
    if (strict) {
      rpcbind_.reset();  // what it did register goes again
      throw std::runtime_error(
          "service nfs: --portmap register: the host's rpcbind serves another server's: " + what +
          " (a host mountd or nfsd: stop it, or run with --portmap off and have clients mount "
          "with mountport=" +
          std::to_string(c.mount_port) + ",mountaddr=" + c.mount_address + ")");
    }
    say("--portmap auto: the host's rpcbind serves another server's: " + what +
        "; left alone: clients mounting this export need mountport=" +
        std::to_string(c.mount_port) + ",mountaddr=" + c.mount_address);
  };
  if (c.portmap == P::kRegister) return register_with_host(true);
  if (c.portmap == P::kAuto) {
    // The host runs rpcbind when it answers: on its local socket (also when it listens on IPv6
    // alone) or on 127.0.0.1:111.
    RpcbindClient probe;
    probe.unix_path = c.rpcbind_socket;
    probe.tcp_port = c.portmap_port;
    if (probe.answers()) {
      say("the host's rpcbind answers (" + c.rpcbind_socket +
          " or 127.0.0.1:" + std::to_string(c.portmap_port) +
          "): registering with it (--portmap own|register|off to choose)");
      return register_with_host(false);
    }
    // Installed but not up yet (boot order, a restart): taking its port 111 would break it when
    // it starts (its wildcard bind fails; systemd's rpcbind.socket fails outright). Wait for it.
    if (const std::string found = rpcbind_installed(c.rpcbind_installed_paths); !found.empty()) {
      say("no rpcbind answers yet, but one is installed (" + found +
          "): registering with it once it does, for " + std::to_string(c.rpcbind_wait_s) +
          " s; not answering as the port mapper (--portmap own to do so)");
      return register_with_host(false);
    }
  }
  portmap_tcp_ = std::make_unique<RpcTcpServer>(
      [this](const CallContext&, std::span<const std::uint8_t> call,
             std::vector<std::uint8_t>& reply) { portmap_reply(portmap_table_, call, reply); },
      &worker_);
  std::string err;
  if (!portmap_tcp_->listen(c.mount_address, c.portmap_port, err)) {
    portmap_tcp_.reset();
    if (c.portmap == P::kAuto) {
      say("port " + std::to_string(c.portmap_port) + " is taken on " + c.mount_address + " (" +
          err +
          ") and no rpcbind answers yet: registering with the host's rpcbind when it does "
          "(--portmap own|register|off to choose)");
      return register_with_host(false);
    }
    std::fprintf(stderr,
                 "service nfs: no port mapper on %s:%u (%s): clients need mountport=%u, "
                 "mountproto=tcp and mountvers=3 (docs/nfs.md)\n",
                 c.mount_address.c_str(), c.portmap_port, err.c_str(), c.mount_port);
    return;
  }
  if (c.rpcbind_wait_s) {
    // No rpcbind now (auto: none installed either; own: not asked): one that starts later
    // cannot have this address's port 111 (it fails to bind 0.0.0.0:111), but its local socket
    // comes up: registered with it too, so that local tools find us.
    say(std::string(c.portmap == P::kAuto ? "no rpcbind answers or is installed"
                                          : "--portmap own") +
        ": answering as the port mapper on " + c.mount_address + ":" +
        std::to_string(c.portmap_port) +
        " (an rpcbind started later cannot listen on IPv4 port 111: start this service after "
        "rpcbind, or choose --portmap register)");
    rpcbind_ = registrar(true);
    rpcbind_->start();
  }
  portmap_udp_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(c.portmap_port);
  if (portmap_udp_ < 0 || ::inet_pton(AF_INET, c.mount_address.c_str(), &a.sin_addr) != 1 ||
      ::bind(portmap_udp_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    std::fprintf(stderr, "service nfs: no port mapper on UDP %s:%u: TCP only\n",
                 c.mount_address.c_str(), c.portmap_port);
    if (portmap_udp_ >= 0) ::close(portmap_udp_);
    portmap_udp_ = -1;
  }
}

bool NfsService::step_portmap_udp() {
  // A few datagrams per step: each call is answered at once (small, from a fixed table).
  bool any = false;
  std::uint8_t in[1024];
  std::vector<std::uint8_t> out;
  for (int i = 0; i < 16; ++i) {
    sockaddr_in from{};
    socklen_t fl = sizeof from;
    const ssize_t n =
        ::recvfrom(portmap_udp_, in, sizeof in, 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n <= 0) break;
    any = true;
    // A datagram's source is not proven: answering anyone would reflect (about 3x) at whoever
    // a forger names. Only the export's clients get answers (TCP's port mapper answers all).
    if (!nfs_.allows(wire::Ipv4Addr{ntohl(from.sin_addr.s_addr)})) {
      ++portmap_udp_denied_;
      continue;
    }
    ++portmap_udp_calls_;
    portmap_reply(portmap_table_, std::span(in, static_cast<std::size_t>(n)), out);
    if (!out.empty())
      ::sendto(portmap_udp_, out.data(), out.size(), 0, reinterpret_cast<const sockaddr*>(&from),
               fl);
  }
  return any;
}

std::string NfsService::reload_exports() {
  if (exports_file_.empty()) return "service nfs: nothing to reload (no --exports-file)";
  try {
    ExportOptions o = read_exports_file(exports_file_, base_exports_);
    if (!nfs_.acts_as_callers()) check_unprivileged(o);
    const std::size_t n = o.clients.size();
    const bool rw = o.rw;
    nfs_.set_options(std::move(o));
    ++reloads_;
    return "service nfs: exports reloaded from " + exports_file_ + ": " + (rw ? "rw" : "ro") +
           ", " + std::to_string(n) + " client entr" + (n == 1 ? "y" : "ies") +
           " (new calls use them; no grace period)";
  } catch (const std::exception& e) {
    ++reload_errors_;
    return std::string(e.what()) + " (the export's options are unchanged)";
  }
}

void NfsService::watch_exports() {
  const auto now = std::chrono::steady_clock::now();
  if (exports_file_.empty() || now < next_watch_) return;
  next_watch_ = now + std::chrono::seconds(1);
  struct stat st {};
  if (::stat(exports_file_.c_str(), &st) != 0) return;  // being replaced: looked at again
  if (st.st_mtim.tv_sec == exports_mtime_.tv_sec && st.st_mtim.tv_nsec == exports_mtime_.tv_nsec &&
      static_cast<std::uint64_t>(st.st_size) == exports_size_ && st.st_ino == exports_ino_)
    return;
  exports_mtime_ = st.st_mtim;
  exports_size_ = static_cast<std::uint64_t>(st.st_size);
  exports_ino_ = st.st_ino;
  std::fprintf(stderr, "%s\n", reload_exports().c_str());
}

bool NfsService::step() {
  watch_exports();
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_cb_) {  // the v4 back channel: calls to send, once a millisecond; timeouts
    next_cb_ = now + std::chrono::milliseconds(1);
    for (const auto& cb : nfs4_.take_callbacks()) rdma_.send_call(cb.conn, cb.msg);
    if (now >= next_tick_ && nfs4_.tick()) next_tick_ = now + std::chrono::seconds(1);
  }
  const bool a = rdma_.poll();
  const bool b = mount_.poll();
  const bool t = tcp_ && tcp_->poll();
  const bool p = portmap_tcp_ && portmap_tcp_->poll();
  const bool u = portmap_udp_ >= 0 && step_portmap_udp();
  return a || b || t || p || u;
}

std::string NfsService::report() const {
  const auto& t = rdma_.stats();
  const NfsServerStats n = nfs_.stats();
  std::string s = "nfs: " + std::to_string(n.calls) + " calls (" + std::to_string(n.errors) +
                  " errors, " + std::to_string(n.garbage) + " garbage, " +
                  std::to_string(n.denied + nfs_.mount_denied()) + " denied), " +
                  std::to_string(n.bytes_read) + " bytes read, " + std::to_string(n.bytes_written) +
                  " written; MOUNT calls " + std::to_string(mount_.calls()) + "\n";
  s += "rpcrdma: " + std::to_string(t.connections) + " connections, " + std::to_string(t.calls) +
       " calls, " + std::to_string(t.replies) + " answers, " + std::to_string(t.reads) +
       " RDMA READs (" + std::to_string(t.read_bytes) + " bytes), " + std::to_string(t.writes) +
       " RDMA WRITEs (" + std::to_string(t.write_bytes) + " bytes), " +
       std::to_string(t.reply_chunks) + " reply chunks, " + std::to_string(t.send_inv) +
       " SEND with invalidate, ERR_VERS " + std::to_string(t.err_vers) + ", ERR_CHUNK " +
       std::to_string(t.err_chunk) + "; beyond credits " + std::to_string(t.over_credit) +
       ", refused " + std::to_string(t.rejected_full) + " (full), " + std::to_string(t.denied) +
       " (not listed), " + std::to_string(t.unresolved) + " (no ARP answer), " +
       std::to_string(t.reaped) + " idle reaped, " + std::to_string(t.closed) +
       " closed; at most " + std::to_string(t.reads_in_flight_peak) + " RDMA READs and " +
       std::to_string(t.chunk_buffers_peak) +
       " chunk buffers of a connection at once\nrpcrdma read window: at most " +
       std::to_string(t.read_bytes_in_flight_peak) + " bytes of RDMA READs out (limit " +
       std::to_string(rdma_.options().max_read_bytes) + "), " + std::to_string(t.reads_queued) +
       " pulls waited for room (at most " + std::to_string(t.reads_queued_peak) + " at once), " +
       std::to_string(t.read_pieces) + " READs of part of a segment\n";
  const auto& m = mount_.stats();
  s += "mount: " + std::to_string(mount_.clients()) + " connections, refused " +
       std::to_string(m.refused) + " (full), " + std::to_string(m.refused_peer) +
       " (per address), evicted " + std::to_string(m.evicted) + ", timed out " +
       std::to_string(m.timed_out) + ", oversized " + std::to_string(m.oversized) + "\n";
  s += "procedures:";
  for (const auto& [p, k] : n.by_proc) s += " " + std::to_string(p) + ":" + std::to_string(k);
  // Never waits for a COMPOUND holding the v4 server (an fsync): its last values then.
  nfs4_.try_stats(seen4_, seen4_clients_, seen4_sessions_, seen4_states_);
  const Nfs4Stats& v4 = seen4_;
  s += "\nnfs4: " + std::to_string(v4.compounds) + " compounds, " + std::to_string(v4.ops) +
       " operations (" + std::to_string(v4.errors) + " failed, " + std::to_string(v4.replays) +
       " replayed from the reply cache, " + std::to_string(v4.resource) + " tables full), " +
       std::to_string(seen4_clients_) + " clients, " + std::to_string(seen4_sessions_) +
       " sessions, " + std::to_string(seen4_states_) +
       " stateids now\nnfs4 back channel: " + std::to_string(v4.delegations) +
       " read delegations, " + std::to_string(v4.recalls) + " CB_RECALLs (" +
       std::to_string(t.backward_calls) + " calls sent, " + std::to_string(t.backward_replies) +
       " replies, " + std::to_string(t.backward_dropped) + " not sent), " +
       std::to_string(v4.cb_replies) + " replies taken, " + std::to_string(v4.cb_bad_replies) +
       " dropped, " + std::to_string(v4.cb_timeouts) + " timed out, " + std::to_string(v4.revoked) +
       " revoked; recalls " + std::to_string(v4.recalls_begun) + " begun, " +
       std::to_string(v4.lease_breaks) + " lease breaks, " + std::to_string(v4.delegreturns) +
       " returned, " + std::to_string(v4.recall_delays) + " DELAY and " +
       std::to_string(v4.recall_jukebox) +
       " v3 JUKEBOX answers\nnfs4 grace: " + std::to_string(v4.grace_periods) + " periods, " +
       std::to_string(v4.grace_now) + " now (nfs4_grace_now), " + std::to_string(v4.grace_answers) +
       " GRACE answers, " + std::to_string(v4.grace_extensions) + " extended; " +
       std::to_string(v4.courtesy_expired) + " courteous clients expired\nnfs4 operations:";
  for (const auto& [op, k] : v4.by_op)
    s += std::string(" ") + v4::op_name(op) + ":" + std::to_string(k);
  return s + "\n";
}

std::string NfsService::clients_report() const {
  std::vector<Nfs4Server::ClientInfo> list;
  std::size_t total = 0;
  for (int i = 0; i < 64; ++i) {
    if (nfs4_.try_client_list(list, total)) return Nfs4Server::format_clients(list, total);
    std::this_thread::yield();
  }
  return "nfs4 clients: the server is busy (a COMPOUND holds it): ask again\n";
}

std::vector<std::pair<std::string, std::uint64_t>> NfsService::stats() const {
  const auto& t = rdma_.stats();
  const auto& m = mount_.stats();
  // The server's locks guard counters and tables only, never a file system call; the v4
  // server's may be held by a COMPOUND through an fsync: only tried, else the last values.
  const NfsServerStats n = nfs_.stats();
  const std::uint64_t handles = nfs_.handles();
  nfs4_.try_stats(seen4_, seen4_clients_, seen4_sessions_, seen4_states_);
  const RpcbindRegistrar::Counts rb = rpcbind_ ? rpcbind_->counts() : RpcbindRegistrar::Counts{};
  return {
      {"nfs4_compounds", seen4_.compounds},
      {"nfs4_ops", seen4_.ops},
      {"nfs4_errors", seen4_.errors},
      {"nfs4_replays", seen4_.replays},    // answered from a slot's reply cache
      {"nfs4_resource", seen4_.resource},  // NFS4ERR_RESOURCE: a table was full
      {"nfs4_clients_now", seen4_clients_},
      {"nfs4_sessions_now", seen4_sessions_},
      {"nfs4_stateids_now", seen4_states_},
      {"nfs4_grace_now", seen4_.grace_now},                // 1 while in the grace period
      {"nfs4_grace_answers", seen4_.grace_answers},        // NFS4ERR_GRACE: new state refused
      {"nfs4_grace_extensions", seen4_.grace_extensions},  // a client was still reclaiming
      {"nfs4_courtesy_expired", seen4_.courtesy_expired},  // unrenewed for 24 h: forgotten
      {"nfs4_recalls", seen4_.recalls},                    // CB_RECALLs sent
      {"nfs4_revoked", seen4_.revoked},                    // delegations revoked
      {"nfs4_delegations", seen4_.delegations},            // read delegations granted
      {"nfs4_recalls_begun", seen4_.recalls_begun},        // a conflict or a lease break
      {"nfs4_lease_breaks", seen4_.lease_breaks},          // a writer on the host broke a lease
      {"nfs4_recall_delays", seen4_.recall_delays},        // NFS4ERR_DELAY while a recall runs
      {"nfs4_recall_jukebox", seen4_.recall_jukebox},      // NFS3ERR_JUKEBOX (v3 waits 5 s)
      {"nfs4_delegreturns", seen4_.delegreturns},
      {"nfs4_locks_table_only", seen4_.locks_table_only},          // no host descriptor left for it
      {"nfs4_notify_locks", seen4_.notify_locks},                  // CB_NOTIFY_LOCKs sent
      {"nfs4_lock_waiters_now", seen4_.lock_waiters_now},          // blocked waiters remembered
      {"nfs4_lock_waiters_dropped", seen4_.lock_waiters_dropped},  // beyond a client's 64
      {"nfs4_host_wait_freed", seen4_.host_wait_freed},            // a host lock went: waiters told
      {"nfs4_host_wait_unwatched", seen4_.host_wait_unwatched},    // not watched: client polls
      {"nfs4_meta_recalls", seen4_.meta_recalls},  // host chmod/chown/mv/rm/ln of a delegated file
      {"nfs4_records_writes", seen4_.records_writes},        // client records rewritten
      {"nfs4_records_error", seen4_.records_error},          // 1: records not written (no reclaim)
      {"nfs4_records_waits", seen4_.records_waits},          // RECLAIM_COMPLETEs held for the disk
      {"nfs4_records_rewritten", seen4_.records_rewritten},  // a client's new principal recorded
      {"nfs4_records_refused", seen4_.records_refused},      // not: another credential, same owner
      {"nfs4_watch_refused", seen4_.unwatched},              // no inotify watch: no delegation
      {"nfs4_watch_overflows", seen4_.watch_overflows},      // events lost: every one recalled
      {"nfs4_notify_lost", seen4_.notify_lost},              // CB_NOTIFY_LOCKs not delivered
      {"rpcrdma_backward_calls", t.backward_calls},          // calls sent to clients
      {"rpcrdma_backward_dropped", t.backward_dropped},      // calls that could not be sent
      {"nfs_calls", n.calls},
      {"nfs_errors", n.errors},
      {"nfs_garbage", n.garbage},
      {"nfs_denied", n.denied},  // AUTH_ERROR: bad credential, client not listed
      {"nfs_bytes_read", n.bytes_read},
      {"nfs_bytes_written", n.bytes_written},
      {"nfs_handles_now", handles},
      {"rpcrdma_connections_now", rdma_.connections()},
      {"rpcrdma_connections", t.connections},
      {"rpcrdma_calls", t.calls},
      {"rpcrdma_replies", t.replies},  // answers posted (RDMA_ERROR too)
      {"rpcrdma_over_credit", t.over_credit},
      {"rpcrdma_rejected_full", t.rejected_full},
      {"rpcrdma_denied", t.denied},
      {"rpcrdma_unresolved", t.unresolved},
      {"rpcrdma_reaped", t.reaped},
      {"rpcrdma_closed", t.closed},
      {"rpcrdma_err_vers", t.err_vers},
      {"rpcrdma_err_chunk", t.err_chunk},
      {"rpcrdma_reads_in_flight_peak", t.reads_in_flight_peak},            // of one connection
      {"rpcrdma_chunk_buffers_peak", t.chunk_buffers_peak},                // of one connection
      {"rpcrdma_read_bytes_in_flight_peak", t.read_bytes_in_flight_peak},  // all connections
      {"rpcrdma_reads_queued", t.reads_queued},  // pulls that waited for the READ window
      {"rpcrdma_reads_queued_peak", t.reads_queued_peak},
      {"rpcrdma_read_pieces", t.read_pieces},  // READs of part of a segment
      {"mount_calls", mount_.calls()},
      {"exports_reloads", reloads_},              // --exports-file read again and applied
      {"exports_reload_errors", reload_errors_},  // a bad file: the options kept
      {"portmap_calls", (portmap_tcp_ ? portmap_tcp_->calls() : 0) + portmap_udp_calls_},
      {"portmap_udp_denied", portmap_udp_denied_},    // datagrams from hosts not listed: dropped
      {"rpcbind_registered", rb.registered},          // entries registered with the host's rpcbind
      {"rpcbind_taken", rb.taken},                    // held there by another server: left alone
      {"rpcbind_given_up", rb.given_up},              // rpcbind never answered within the wait
      {"rpcbind_squats_removed", rb.squats_removed},  // other uids' entries of ours taken away
      {"mount_denied", nfs_.mount_denied()},          // MNT3ERR_ACCES
      {"mount_connections_now", mount_.clients()},
      {"mount_refused", m.refused},
      {"mount_refused_peer", m.refused_peer},
      {"mount_evicted", m.evicted},
      {"mount_timed_out", m.timed_out},
      {"mount_oversized", m.oversized},
  };
}

HostedNfsService::HostedNfsService(const ctl::ServiceConfig& sc, engine::Engine& eng,
                                   port::PollLoop& loop, wire::Ipv4Addr ip,
                                   std::uint32_t cm_connections)
    : ctx_(open_local_context(eng, loop, ip, cm_connections)) {
  NfsServiceConfig c;
  c.port = sc.listen_port;
  c.mount_address = ctl::to_string(sc.listen_address);
  parse_service_args(sc.args, c);
  svc_ = std::make_unique<NfsService>(*ctx_, c);
}

}  // namespace roce::nfs
