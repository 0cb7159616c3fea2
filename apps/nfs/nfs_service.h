/// @file
/// The NFSv3 service of the appliance: the NFS server over a host directory (nfs_server.h)
/// behind the RPC-over-RDMA responder (server_transport.h) on rdma_cm port `port` (20049), and
/// MOUNT over kernel TCP on `mount_address`:`mount_port` (mountd does not run over RDMA). One
/// code on a libroce Context: roce-nfsd on a port of its own (in-process), roce-nfsd --attach
/// (a client of a running roced) and roced's configured service (`test: nfs`, hosted).
///
/// Threads: step() runs on the poll loop's thread (an lcore); the NFS server's handlers (NFS and
/// MOUNT calls alike: fsync, directory walks) run on the service's pool of worker threads
/// (call_worker.h, `threads`), several calls of one connection at once, so that the loop answers
/// ARP, the CM and other connections meanwhile and never waits on the file system.
#pragma once

#include <roce/client.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "apps/nfs/in_process.h"
#include "apps/nfs/mount_tcp.h"
#include "apps/nfs/nfs4_server.h"
#include "apps/nfs/nfs_server.h"
#include "apps/nfs/portmap.h"
#include "apps/nfs/server_transport.h"
#include "apps/nfs/transport.h"
#include "controlplane/config.h"

namespace roce::nfs {

struct NfsServiceConfig {
  std::string root;  ///< the host directory served
  /// What clients mount (MNT's path, NFSv4's pseudo-root leads to it): empty is the root's
  /// canonical path, as exports(5) names an export ("/srv/export"); "/" the old default.
  std::string export_path;
  ExportOptions exports;  ///< --export-options, --clients (exports(5))
  /// --exports-file: lines `export-options OPTS` and `clients LIST` (and `#` comments) applied
  /// over `exports`, read at the start and again at each reload (reload_exports(): SIGHUP to
  /// roce-nfsd; a change of the file, looked at once a second).
  std::string exports_file;
  std::uint32_t max_handles = 65536;
  /// Worker threads doing the file system calls (knfsd starts 8 by default).
  std::uint32_t threads = 8;
  std::uint16_t port = kNfsRdmaPort;
  /// Kernel TCP address of MOUNT: loopback unless told (roced: the service's listen_address,
  /// the management address; roce-nfsd: its interface's address). 0.0.0.0 only on purpose.
  std::string mount_address = "127.0.0.1";
  std::uint16_t mount_port = 20048;
  std::size_t mount_clients = 16;  ///< MOUNT connections at once
  std::size_t mount_per_peer = 8;  ///< MOUNT connections of one address
  /// A MOUNT connection that does not deliver a whole call (or take its reply) in this long is
  /// closed.
  std::uint32_t mount_timeout_ms = 30000;
  ServerOptions transport;
  std::uint16_t tcp_port = 0;  ///< non-zero: NFS over kernel TCP too (the benchmarks' baseline)
  /// The port mapper (portmap.h) on `mount_address`, TCP and UDP: 111 by default (binding it
  /// needs CAP_NET_BIND_SERVICE or root, and no rpcbind of the host on that address); 0: none.
  /// When it cannot bind, the service says so and goes on without it.
  std::uint16_t portmap_port = kPortmapPort;
  /// --portmap: `own` answers as a port mapper itself (portmap_port); `register` registers MOUNT
  /// v3/tcp and NFS v3/rdma with the host's rpcbind (its local socket or 127.0.0.1:111) and
  /// takes them away at stop (start fails when another program already holds one of them there:
  /// root's entry: a host mountd; another uid's is a squat, taken away when root); `auto` (the
  /// default) is `register` when the host's rpcbind answers or is installed (its binary or
  /// systemd socket unit: rpcbind_installed_paths; retried for rpcbind_wait_s, a taken entry
  /// only warned about), else `own`, or `register` when the port is taken by something not
  /// answering yet; `off` neither. `own` watches for an rpcbind that comes up later.
  enum class Portmap { kAuto, kOwn, kRegister, kOff } portmap = Portmap::kAuto;
  /// Where `register` finds the host's rpcbind (tests point it elsewhere).
  std::string rpcbind_socket = "/run/rpcbind.sock";
  /// `auto` with no rpcbind answering: when any of these exists, an rpcbind is installed (and
  /// will start: boot order), so the service registers with it (retried for rpcbind_wait_s)
  /// rather than take port 111 itself, which would break it.
  std::vector<std::string> rpcbind_installed_paths = {"/usr/sbin/rpcbind",
                                                      "/sbin/rpcbind",
                                                      "/usr/bin/rpcbind",
                                                      "/lib/systemd/system/rpcbind.socket",
                                                      "/usr/lib/systemd/system/rpcbind.socket",
                                                      "/etc/systemd/system/rpcbind.socket"};
  /// --rpcbind-wait: how long registrations rpcbind did not answer are tried again (once a
  /// second), and how long `auto`'s own port mapper watches for an rpcbind starting after it.
  std::uint32_t rpcbind_wait_s = 60;
  /// NFSv4.1 read delegations (--delegations on|off): granted only where the host gives a file
  /// lease for each, so that every writer (local, NFSv3, v4) has it recalled first.
  bool delegations = true;
  /// The NFSv4.1 lease (--lease-time SECONDS, 10 to 3600; knfsd's 90).
  std::uint32_t lease_seconds = 90;
  /// The NFSv4.1 grace period after a restart (--grace-time SECONDS, 10 to 3600; knfsd's 90),
  /// extended once by up to a lease while a recorded client is still reclaiming.
  std::uint32_t grace_seconds = 90;
  /// The NFS versions served (--versions 3,4.1, the default; `4.1` alone is knfsd's vers3=n):
  /// a version not served gets PROG_MISMATCH naming the other, and without v3 there is no
  /// MOUNT (as rpc.mountd without v2 and v3 listens nowhere) and nothing is registered.
  bool nfs_v3 = true, nfs_v41 = true;
  /// NFSv4.1's stable client records (--state-dir): who may reclaim opens and locks in the
  /// grace period after a restart. Empty: /var/lib/roce-nfsd/<root's name>-<port>-<hash>.
  std::string state_dir;
};

/// The kernel address MOUNT binds to by default for a tool on kernel interface `iface`: that
/// interface's first IPv4 address, else 127.0.0.1 (never every address: a MOUNT listener on
/// 0.0.0.0 answers on every network of the host, the management one included).
std::string default_mount_address(const std::string& iface);

/// `base` with the lines of exports file `path` applied (export-options, clients); throws
/// std::runtime_error naming the file and line when it cannot be read or a line is bad.
ExportOptions read_exports_file(const std::string& path, const ExportOptions& base);

/// The first of `paths` that exists (an rpcbind binary or systemd unit), else empty.
std::string rpcbind_installed(const std::vector<std::string>& paths);

/// The export's path for `c`: --export, else the canonical path of --root.
std::string export_path_for(const NfsServiceConfig& c);

/// Parses a service's args (--root DIR, --export PATH, --export-options OPTS, --clients LIST,
/// --max-handles N, --threads N, --portmap-port N, --mount-address IP, --mount-port N, --credits N,
/// --inline BYTES, --tcp-port N, --max-read-inflight BYTES, --delegations on|off, --lease-time
/// SECONDS, --grace-time SECONDS,
/// --versions LIST, --state-dir DIR,
/// --portmap MODE, --rpcbind-wait SECONDS) into
/// `c`; throws std::runtime_error on a bad one.
void parse_service_args(const std::vector<std::string>& args, NfsServiceConfig& c);

/// A port flag's value, 1..65535; throws std::runtime_error naming `flag` otherwise.
std::uint16_t parse_port(const std::string& flag, const std::string& v);

/// --max-read-inflight (ServerOptions::max_read_bytes): bytes, or with a K or M suffix (256K),
/// kMinReadInflight to kMaxReadInflight; throws std::runtime_error saying so on anything else.
std::uint32_t parse_read_inflight(const std::string& v);

/// For a process without CAP_SETUID/CAP_SETGID (it can act only as itself): throws
/// std::runtime_error, saying what to do, unless the export squashes every caller to the
/// process's own uid and gid (all_squash,anonuid,anongid) and the process has no supplementary
/// groups (which it could not drop, so that every caller would have them). Anything else would
/// fail call by call (SYSTEM_ERR).
void check_unprivileged(const ExportOptions& e);

/// The directory of the NFSv4.1 client records for `c` (made 0700 if missing): --state-dir,
/// else /var/lib/roce-nfsd/<root's name>-<port>-<hash of the canonical root and the port>; empty
/// (and a line on stderr: no grace period) when that is not this user's own directory. Throws
/// when --state-dir was given and is not a directory of this user's that only it may write.
std::string state_dir_for(const NfsServiceConfig& c);
/// The default directory's path for `c` (nothing made).
std::string default_state_dir(const NfsServiceConfig& c);

class NfsService {
 public:
  /// Throws std::runtime_error when the root is not a directory or MOUNT cannot listen. The
  /// Context (in-process, attached or hosted) must outlive the service.
  NfsService(client::Context& ctx, const NfsServiceConfig& c);
  /// Stops the worker first (a call it runs finishes): the servers' handlers go after it.
  ~NfsService();
  /// Serves what arrived (in-process and hosted, one poll of the port's loop included); true
  /// when anything happened.
  bool step();
  std::string report() const;
  /// The NFSv4.1 clients as knfsd's `nfsdclnts` shows them (client id, address, principal,
  /// minor version, state, sessions, opens, locks, delegations, seconds since the last renewal,
  /// co_ownerid): read-only, at most 256 lines. Never waits for a COMPOUND: a few tries, then a
  /// line saying the server is busy. roce-nfsd and roced print it on SIGUSR1.
  std::string clients_report() const;
  /// Reads --exports-file again and applies its options to the calls that start from now on
  /// (no restart, no grace period: knfsd's `exportfs -r`). A bad file, or options an unprivileged
  /// server cannot serve, leave the options as they were. Returns the line to log.
  std::string reload_exports();
  /// What clients mount (MNT's path, and NFSv4's below its pseudo-root).
  const std::string& export_path() const { return nfs_.export_path(); }
  /// Counters for an operator to scrape (roced's metrics): flat (name, value) pairs, names in
  /// snake_case without a prefix, cumulative unless the name says otherwise (`_now`).
  std::vector<std::pair<std::string, std::uint64_t>> stats() const;

 private:
  void start_portmap(client::Context& context, const NfsServiceConfig& c);
  /// Once a second: reload_exports() when --exports-file changed (mtime, size or inode).
  void watch_exports();
  bool step_portmap_udp();

  std::string state_dir_;  ///< v4 client records and MOUNT's rmtab; empty: none (state_dir_for)
  NfsServer nfs_;          ///< thread-safe: the pool's handlers call it at once
  Nfs4Server nfs4_;        ///< NFS version 4.1 calls over the same export; its own mutex
  /// The v4 server's counts as stats() and report() last read them: they run on the poll loop
  /// and only try its lock (a COMPOUND may hold it through an fsync), reusing these meanwhile.
  mutable Nfs4Stats seen4_;
  std::chrono::steady_clock::time_point next_cb_{}, next_tick_{};  ///< the v4 back channel's
  mutable std::size_t seen4_clients_ = 0, seen4_sessions_ = 0, seen4_states_ = 0;
  CallWorker worker_;  ///< the pool that runs every handler; stopped first by the destructor
  RpcRdmaServer rdma_;
  RpcTcpServer mount_;
  std::unique_ptr<RpcTcpServer> tcp_;
  std::vector<PortmapEntry> portmap_table_;
  std::unique_ptr<RpcTcpServer> portmap_tcp_;
  std::unique_ptr<RpcbindRegistrar> rpcbind_;  ///< registrations with the host's rpcbind
  int portmap_udp_ = -1;                       ///< non-blocking; answered from step()
  std::uint64_t portmap_udp_calls_ = 0;
  std::uint64_t portmap_udp_denied_ = 0;  ///< datagrams from addresses the export does not list
  ExportOptions base_exports_;            ///< the flags' options, under the file's
  std::string exports_file_;
  struct timespec exports_mtime_ {};
  std::uint64_t exports_size_ = 0, exports_ino_ = 0;
  std::chrono::steady_clock::time_point next_watch_{};
  std::uint64_t reloads_ = 0, reload_errors_ = 0;
};

/// roced's `test: nfs` service (docs/configuration.md): the service on a port the daemon owns
/// (a Context of client::open_local on its engine and poll loop, lcore 0), stepped from roced's
/// main loop. `listen_port` is the
/// rdma_cm port (20049 for mount.nfs), `args` are parse_service_args()'s; MOUNT listens on
/// `listen_address` unless --mount-address says otherwise.
class HostedNfsService {
 public:
  HostedNfsService(const ctl::ServiceConfig& sc, engine::Engine& eng, port::PollLoop& loop,
                   wire::Ipv4Addr ip, std::uint32_t cm_connections);
  void step() { svc_->step(); }
  std::string report() const { return svc_->report(); }
  std::string clients_report() const { return svc_->clients_report(); }
  std::vector<std::pair<std::string, std::uint64_t>> stats() const { return svc_->stats(); }
  std::string reload_exports() { return svc_->reload_exports(); }

 private:
  std::unique_ptr<client::Context> ctx_;
  std::unique_ptr<NfsService> svc_;
};

}  // namespace roce::nfs
