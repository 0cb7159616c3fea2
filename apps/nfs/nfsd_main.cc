/// @file
/// roce-nfsd: the appliance's NFSv3 server over RPC-over-RDMA on a DPDK port of its own
/// (net_af_packet, net_memif) or attached to a running roced (--attach SOCKET), serving a host
/// directory; MOUNT over kernel TCP. docs/nfs.md.
///   roce-nfsd --iface dp0 --root DIR [--mount-address 192.0.2.254] [--timeout S]
///   roce-nfsd --attach /run/roced.sock --root DIR
/// MOUNT listens on --mount-address, by default the kernel address of --iface (127.0.0.1 when it
/// has none, or with --memif); never on every address unless told 0.0.0.0.
#include <sched.h>
#include <time.h>

#include <boost/program_options.hpp>
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "apps/nfs/link.h"
#include "apps/nfs/nfs_service.h"
#include "controlplane/address.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/poll_loop.h"

namespace po = boost::program_options;
using namespace roce;

namespace {
volatile std::sig_atomic_t g_stop = 0, g_loop_stats = 0, g_reload = 0;
void on_signal(int) { g_stop = 1; }
void on_usr1(int) { g_loop_stats = 1; }
void on_hup(int) { g_reload = 1; }  // --exports-file read again (exportfs -r)
/// "poll loop: busy B ns, idle I ns, P polls (S% busy)": where the loop's time went since it
/// started (PollLoop::time_stats; the caller's work between polls counts with the poll before
/// it). SIGUSR1 prints it, and the NFSv4 clients (as knfsd's nfsdclnts); a benchmark takes the
/// difference of two.
void print_loop(const nfs::LinkHolder& h) {
  const port::PollLoop* l = h.loop();
  if (!l) return;
  const auto& t = l->time_stats();
  const double all = static_cast<double>(t.busy_ns + t.idle_ns);
  std::cout << "roce-nfsd: poll loop: busy " << t.busy_ns << " ns, idle " << t.idle_ns << " ns, "
            << t.polls << " polls (" << (all > 0 ? 100.0 * static_cast<double>(t.busy_ns) / all : 0)
            << "% busy)" << std::endl;
  // What the port lost on the way in (net_af_packet: its receive ring full, the kernel's drops).
  if (const port::DpdkPort* p = h.port()) {
    const port::PortStats s = p->stats();
    std::cout << "roce-nfsd: port: " << s.rx_frames << " frames received, " << s.rx_missed
              << " missed (receive ring full), " << s.tx_frames << " sent, "
              << s.tx_dropped + s.tx_alloc_failed + s.tx_pmd_dropped << " dropped" << std::endl;
  }
}
double now_s() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}
}  // namespace

int main(int argc, char** argv) {
  nfs::NfsLink nl;
  std::string memif_socket, memif_role = "server";
  runtime::LinkOptions& link = nl.link;
  nfs::NfsServiceConfig c;
  double timeout = 0, tx_drop = 0, rx_drop = 0;
  bool spin = false;
  std::string export_options, clients, delegations = "on", portmap = "auto", grace, versions,
                                       read_inflight;
  po::options_description o(
      "roce-nfsd options (signals: SIGHUP reads --exports-file again; SIGUSR1 prints the poll "
      "loop's time, the NFSv4.1 clients and the counters; SIGTERM or SIGINT stop it, "
      "unregistering from rpcbind and printing the report)");
  o.add_options()("help,h", "this help")(
      "attach", po::value(&nl.attach),
      "a client of the roced listening on this socket (no DPDK port of its own)")(
      "attach-port", po::value(&nl.attach_port), "attached: roced's port by name (default: first)")(
      "iface", po::value(&link.iface), "kernel interface for the DPDK port (net_af_packet)")(
      "memif", po::value(&memif_socket), "net_memif on this control socket instead")(
      "memif-role", po::value(&memif_role)->default_value("server"), "memif: server or client")(
      "ip", po::value(&link.ip)->default_value("192.0.2.100"), "our RoCE IPv4 address")(
      "mac", po::value(&link.mac)->default_value("02:00:00:00:01:00"), "our MAC")(
      "pcap", po::value(&link.pcap), "capture every frame here")(
      "root", po::value(&c.root)->required(), "the host directory to serve")(
      "export", po::value(&c.export_path),
      "the path clients mount (MNT, and NFSv4 below its pseudo-root); default: --root's "
      "canonical path, as exports(5); \"/\" for the export at the top")(
      "export-options", po::value(&export_options),
      "exports(5) options: ro (default) or rw, root_squash (default), no_root_squash, "
      "all_squash, anonuid=N, anongid=N (docs/nfs.md: others accepted)")(
      "exports-file", po::value(&c.exports_file),
      "export options read at the start and again on SIGHUP (or when the file changes), applied "
      "over --export-options and --clients to the calls that start after: lines "
      "'export-options OPTS' and 'clients LIST', # comments")(
      "clients", po::value(&clients),
      "who may mount: IPv4 addresses, address/prefix and address/netmask, comma-separated "
      "(default *: everyone)")(
      "max-handles", po::value<std::string>()->default_value(std::to_string(c.max_handles)),
      "file handles remembered without CAP_DAC_READ_SEARCH (a table of "
      "paths; least recently used forgotten: stale)")(
      "threads", po::value<std::string>()->default_value(std::to_string(c.threads)),
      "worker threads doing the file system calls")(
      "port", po::value<std::string>()->default_value(std::to_string(c.port)),
      "NFS/RDMA rdma_cm port")(
      "mount-address", po::value(&c.mount_address),
      "kernel TCP address for MOUNT (default: the address of --iface, else 127.0.0.1)")(
      "mount-clients", po::value<std::string>()->default_value(std::to_string(c.mount_clients)),
      "MOUNT connections at once")(
      "mount-per-peer", po::value<std::string>()->default_value(std::to_string(c.mount_per_peer)),
      "MOUNT connections of one address")(
      "mount-timeout", po::value<std::string>()->default_value(std::to_string(c.mount_timeout_ms)),
      "ms a MOUNT connection has for each whole call (and to take its reply)")(
      "max-per-peer",
      po::value<std::string>()->default_value(std::to_string(c.transport.max_per_peer)),
      "RDMA connections of one address (beyond: its oldest idle one is closed)")(
      "reap-idle",
      po::value<std::string>()->default_value(std::to_string(c.transport.reap_idle_ms)),
      "ms idle after which an RDMA connection is closed for a REQ when the table is full")(
      "max-connections",
      po::value<std::string>()->default_value(std::to_string(c.transport.max_connections)),
      "RDMA connections at once (beyond: REJ no resources)")(
      "max-half-open",
      po::value<std::string>()->default_value(std::to_string(c.transport.max_half_open)),
      "RDMA connections not yet established")(
      "mount-port", po::value<std::string>()->default_value(std::to_string(c.mount_port)),
      "MOUNT TCP port")("tcp-port", po::value<std::string>()->default_value("0"),
                        "also serve NFS over kernel TCP here (0: no)")(
      "portmap-port", po::value<std::string>()->default_value(std::to_string(c.portmap_port)),
      "port mapper (rpcbind v2-v4) for MOUNT and NFS on the MOUNT address, TCP and UDP "
      "(0: none; 111 needs privilege)")(
      "portmap", po::value(&portmap)->default_value("auto"),
      "own: answer as the port mapper on --portmap-port; register: register MOUNT and NFS with "
      "the host's rpcbind (unregistered at exit; start fails when a host mountd holds MOUNT "
      "there); auto: register when the host's rpcbind answers, else own; off")(
      "rpcbind-wait", po::value<std::string>()->default_value(std::to_string(c.rpcbind_wait_s)),
      "seconds to keep trying the host's rpcbind when it does not answer yet (and, under auto, "
      "to watch for one starting later)")(
      "delegations", po::value(&delegations)->default_value("on"),
      "NFSv4.1 read delegations: on (each backed by a host file lease, recalled when anything "
      "writes the file) or off (yes/no, 1/0 too)")(
      "lease-time", po::value<std::string>()->default_value(std::to_string(c.lease_seconds)),
      "NFSv4.1 lease in seconds (10 to 3600)")(
      "grace-time", po::value(&grace)->default_value(std::to_string(c.grace_seconds)),
      "NFSv4.1 grace period after a restart in seconds (10 to 3600), extended once by up to a "
      "lease while a recorded client is still reclaiming")(
      "versions", po::value(&versions)->default_value("3,4.1"),
      "NFS versions served: 3,4.1, or 4.1 alone (no v3: no MOUNT, no rpcbind registrations; "
      "knfsd's vers3=n) or 3 alone")(
      "state-dir", po::value(&c.state_dir),
      "NFSv4.1 client records for reclaim after a restart (default "
      "/var/lib/roce-nfsd/<root's name>-<port>-<hash>; none, so no grace period, when that is "
      "not usable)")("credits", po::value<std::string>()->default_value("32"), "credits granted")(
      "inline", po::value<std::string>()->default_value("4096"), "inline size")(
      "max-read-inflight", po::value(&read_inflight)->default_value("256K"),
      "bytes of RDMA READs (pulls of the clients' read chunks, WRITE data) out at once, all "
      "connections: their responses arrive at wire speed and must fit the port's receive ring "
      "(4K to 64M; K and M suffixes)")("spin", po::bool_switch(&spin),
                                       "never yield the CPU when idle (a core of its own)")(
      "timeout", po::value(&timeout)->default_value(0), "exit after this many seconds (0: never)")(
      "tx-drop", po::value(&tx_drop)->default_value(0), "drop this fraction of sent frames")(
      "rx-drop", po::value(&rx_drop)->default_value(0), "drop this fraction of received frames");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, o), vm);
    if (vm.count("help")) {
      std::cout << o;
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "roce-nfsd: " << e.what() << "\n";
    return 2;
  }
  if (!vm.count("mount-address")) c.mount_address = nfs::default_mount_address(link.iface);
  std::string err;
  std::vector<std::string> warnings;
  if ((!export_options.empty() &&
       !nfs::parse_export_options(export_options, c.exports, err, &warnings)) ||
      (vm.count("clients") && !nfs::parse_clients(clients, c.exports, err))) {
    std::cerr << "roce-nfsd: " << err << "\n";
    return 2;
  }
  for (const auto& w : warnings) std::cerr << "roce-nfsd: " << w << "\n";
  // One set of rules and messages with roced's `kind: nfs` args (parse_service_args): every
  // numeric flag in its range (exit 2), never wrapped or clamped.
  try {
    std::vector<std::string> args = {"--root",     c.root,   "--delegations",       delegations,
                                     "--portmap",  portmap,  "--grace-time",        grace,
                                     "--versions", versions, "--max-read-inflight", read_inflight};
    for (const char* name :
         {"max-handles", "threads", "mount-clients", "mount-per-peer", "mount-timeout",
          "max-per-peer", "reap-idle", "max-connections", "max-half-open", "mount-port",
          "portmap-port", "rpcbind-wait", "lease-time", "credits", "inline"}) {
      args.push_back(std::string("--") + name);
      args.push_back(vm[name].as<std::string>());
    }
    if (const std::string t = vm["tcp-port"].as<std::string>(); t != "0") {
      args.push_back("--tcp-port");
      args.push_back(t);
    }
    nfs::parse_service_args(args, c);
    c.port = nfs::parse_port("--port", vm["port"].as<std::string>());
  } catch (const std::exception& e) {
    std::string m = e.what();
    if (m.rfind("service nfs: ", 0) == 0) m.erase(0, 13);
    std::cerr << "roce-nfsd: " << m << "\n";
    return 2;
  }
  link.set_drops(tx_drop, rx_drop, 21);
  if (!memif_socket.empty() && !link.set_memif(memif_socket, memif_role)) {
    std::cerr << "roce-nfsd: --memif-role must be server or client\n";
    return 2;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGUSR1, on_usr1);
  std::signal(SIGHUP, on_hup);
  try {
    if (nl.attach.empty() && link.iface.empty() && memif_socket.empty()) {
      std::cerr << "roce-nfsd: --attach, --iface or --memif is required\n";
      return 2;
    }
    nfs::LinkHolder holder(nl);
    nfs::NfsService svc(holder.context(), c);
    std::cout << "roce-nfsd: serving " << c.root << " as " << svc.export_path() << " on "
              << ctl::to_string(holder.context().port().ipv4)
              << (holder.attached() ? " (attached to roced at " + nl.attach + ")" : "")
              << " rdma_cm port " << c.port
              << (c.nfs_v3
                      ? ", MOUNT on TCP " + c.mount_address + ":" + std::to_string(c.mount_port)
                      : ", NFSv4.1 only (no v3, no MOUNT)")
              << std::endl;
    const double end = timeout > 0 ? now_s() + timeout : 1e300;
    unsigned idle = 0;
    while (!g_stop && now_s() < end && holder.context().connected()) {
      if (svc.step())
        idle = 0;
      else if (!spin && ++idle > 64)
        sched_yield();
      if (g_reload) {
        g_reload = 0;
        std::cout << "roce-nfsd: " << svc.reload_exports() << std::endl;
      }
      if (g_loop_stats) {
        g_loop_stats = 0;
        print_loop(holder);
        std::cout << "roce-nfsd: " << svc.clients_report();
        // The counters, named as roced's metrics of the service (nfsstat -s's place).
        std::cout << "roce-nfsd: counters:";
        for (const auto& [name, value] : svc.stats()) std::cout << " " << name << "=" << value;
        std::cout << std::endl;
      }
    }
    std::cout << svc.report() << std::flush;
    print_loop(holder);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "roce-nfsd: " << e.what() << "\n";
    return 1;
  }
}
