/// @file
/// roce-nfs: an NFSv3 client over RPC-over-RDMA on the appliance's stack (docs/nfs.md).
///   roce-nfs --iface dp0 --server 192.0.2.1 [--export /srv/nfs] COMMAND ARGS [COMMAND ARGS...]
/// Commands (run in order on one connection):
///   ls PATH | stat PATH | cat PATH | get PATH LOCAL | put LOCAL PATH | rm PATH
///   bench PATH BYTES   (writes BYTES to PATH, reads them back, compares; prints MB/s)
///   smallbench DIR N   (N x (create + 4 KiB write + read + remove); prints the latency)
///   latency PATH N     (N GETATTRs, 4 KiB READs and 4 KiB WRITEs; prints each one's latency)
///   errprobe           (version 2 and RDMA_MSGP headers: RDMA_ERROR ERR_VERS and ERR_CHUNK)
#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <random>

#include "apps/nfs/link.h"
#include "apps/nfs/mount_tcp.h"
#include "apps/nfs/nfs_client.h"
#include "apps/nfs/rpc_tcp.h"
#include "apps/nfs/rpcrdma.h"
#include "controlplane/address.h"

namespace po = boost::program_options;
using namespace roce;
using namespace roce::nfs;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string split_dir(const std::string& path, std::string& name) {
  const auto s = path.find_last_of('/');
  if (s == std::string::npos) {
    name = path;
    return "";
  }
  name = path.substr(s + 1);
  return path.substr(0, s);
}

const char* type_char(std::uint32_t t) { return t == v3::kDir ? "d" : t == v3::kLnk ? "l" : "-"; }

struct Tool {
  NfsClient& c;
  v3::Fh root;
  std::uint32_t io = 1u << 20, depth = 8;

  bool fail(const std::string& what) {
    std::cerr << "roce-nfs: " << what << ": " << c.error() << "\n";
    return false;
  }

  bool ls(const std::string& path) {
    const auto d = c.walk(root, path);
    if (!d) return fail("ls " + path);
    const auto es = c.readdir(d->fh);
    if (!es) return fail("ls " + path);
    for (const auto& e : *es) {
      if (e.name == "." || e.name == "..") continue;
      if (e.attr)
        std::printf("%s%04o %3u %5u %5u %12llu %s\n", type_char(e.attr->type), e.attr->mode & 07777,
                    e.attr->nlink, e.attr->uid, e.attr->gid,
                    static_cast<unsigned long long>(e.attr->size), e.name.c_str());
      else
        std::printf("? %s\n", e.name.c_str());
    }
    return true;
  }

  bool stat(const std::string& path) {
    const auto l = c.walk(root, path);
    if (!l) return fail("stat " + path);
    std::printf(
        "%s: type %u mode %04o size %llu fileid %llu mtime %u.%09u\n", path.c_str(), l->attr->type,
        l->attr->mode & 07777, static_cast<unsigned long long>(l->attr->size),
        static_cast<unsigned long long>(l->attr->fileid), l->attr->mtime.sec, l->attr->mtime.nsec);
    return true;
  }

  bool get(const std::string& path, const std::string& local, bool to_stdout) {
    const auto l = c.walk(root, path);
    if (!l) return fail("get " + path);
    std::vector<std::uint8_t> data;
    const double t0 = now_s();
    if (!c.read_file(l->fh, l->attr->size, data, io, depth)) return fail("read " + path);
    const double dt = now_s() - t0;
    if (to_stdout) {
      std::cout.write(reinterpret_cast<const char*>(data.data()),
                      static_cast<std::streamsize>(data.size()));
      return true;
    }
    std::ofstream f(local, std::ios::binary);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    if (!f) return fail("cannot write " + local);
    std::printf("get %s: %zu bytes in %.3f s (%.1f MB/s)\n", path.c_str(), data.size(), dt,
                dt > 0 ? data.size() / dt / 1e6 : 0.0);
    return true;
  }

  bool put_bytes(const std::string& path, std::span<const std::uint8_t> data, double* secs) {
    std::string name;
    const std::string dir = split_dir(path, name);
    const auto d = c.walk(root, dir);
    if (!d) return fail("put " + path);
    const auto cr = c.create(d->fh, name, 0644);
    if (!cr) return fail("create " + path);
    const double t0 = now_s();
    if (!data.empty() && !c.write_file(*cr->fh, data, io, depth)) return fail("write " + path);
    if (secs) *secs = now_s() - t0;
    return true;
  }

  bool put(const std::string& local, const std::string& path) {
    std::ifstream f(local, std::ios::binary);
    if (!f) {
      std::cerr << "roce-nfs: cannot read " << local << "\n";
      return false;
    }
    std::vector<std::uint8_t> data((std::istreambuf_iterator<char>(f)),
                                   std::istreambuf_iterator<char>());
    double dt = 0;
    if (!put_bytes(path, data, &dt)) return false;
    std::printf("put %s: %zu bytes in %.3f s (%.1f MB/s)\n", path.c_str(), data.size(), dt,
                dt > 0 ? data.size() / dt / 1e6 : 0.0);
    return true;
  }

  bool rm(const std::string& path) {
    std::string name;
    const auto d = c.walk(root, split_dir(path, name));
    if (!d || !c.remove(d->fh, name)) return fail("rm " + path);
    return true;
  }

  bool bench(const std::string& path, std::uint64_t bytes) {
    std::vector<std::uint8_t> data(bytes);
    std::mt19937_64 rng(7);
    for (auto& b : data) b = static_cast<std::uint8_t>(rng());
    double wt = 0;
    if (!put_bytes(path, data, &wt)) return false;
    const auto l = c.walk(root, path);
    if (!l) return fail("bench " + path);
    std::vector<std::uint8_t> back;
    const double t0 = now_s();
    if (!c.read_file(l->fh, bytes, back, io, depth)) return fail("bench read " + path);
    const double rt = now_s() - t0;
    if (back != data) {
      std::cerr << "roce-nfs: bench " << path << ": data read back differs\n";
      return false;
    }
    std::printf("bench %s: %llu bytes, io %u, depth %u: write %.1f MB/s, read %.1f MB/s\n",
                path.c_str(), static_cast<unsigned long long>(bytes), io, depth, bytes / wt / 1e6,
                bytes / rt / 1e6);
    return true;
  }

  /// Per-call latency of GETATTR (inline), 4 KiB READ (write chunk) and 4 KiB WRITE (read chunk).
  bool latency(const std::string& path, unsigned n) {
    std::vector<std::uint8_t> data(4096, 0x11), back(4096);
    if (!put_bytes(path, data, nullptr)) return false;
    const auto l = c.walk(root, path);
    if (!l) return fail("latency " + path);
    double t0 = now_s();
    for (unsigned i = 0; i < n; ++i)
      if (!c.getattr(l->fh)) return fail("getattr");
    const double ga = (now_s() - t0) / n;
    t0 = now_s();
    for (unsigned i = 0; i < n; ++i)
      if (!c.read(l->fh, 0, back.data(), 4096)) return fail("read");
    const double rd = (now_s() - t0) / n;
    t0 = now_s();
    for (unsigned i = 0; i < n; ++i)
      if (!c.write(l->fh, 0, data, v3::kUnstable)) return fail("write");
    const double wr = (now_s() - t0) / n;
    std::printf("latency: GETATTR %.1f us, READ 4 KiB %.1f us, WRITE 4 KiB %.1f us (%u each)\n",
                ga * 1e6, rd * 1e6, wr * 1e6, n);
    return true;
  }

  /// Provokes RDMA_ERROR: a transport header of version 2 (ERR_VERS expected) and one with the
  /// retired RDMA_MSGP (ERR_CHUNK expected); then checks that the connection still serves.
  bool errprobe(RpcTransport& t) {
    bool ok = true;
    const auto probe = [&](std::uint32_t vers, std::uint32_t proc, rdma::ErrorCode want,
                           const char* what) {
      RpcCall call;
      XdrEncoder e(call.msg);
      rpc::CallHeader h;
      h.xid = 0x7e570000u + vers * 16 + proc;
      h.prog = v3::kNfsProgram;
      h.vers = v3::kNfsVersion;
      h.proc = v3::kNull;
      rpc::encode(e, h);
      XdrEncoder th(call.transport_header);
      for (std::uint32_t v : {h.xid, vers, 1u, proc}) th.u32(v);
      if (proc == 2) th.u32(0), th.u32(0);    // RDMA_MSGP: align, threshold
      for (int k = 0; k < 3; ++k) th.u32(0);  // empty chunk lists
      const RpcResult r = t.call(std::move(call));
      const bool good = r.rdma_error == want;
      std::printf("errprobe %s: %s\n", what, r.ok ? "a reply" : r.error.c_str());
      ok = ok && good;
    };
    probe(2, 0, rdma::ErrorCode::kVers, "version 2");
    probe(1, 2, rdma::ErrorCode::kChunk, "RDMA_MSGP");
    if (!c.null()) return fail("NULL after the probes");
    std::printf("errprobe: %s; NULL still answered\n", ok ? "as RFC 8166 says" : "NOT as expected");
    return ok;
  }

  bool smallbench(const std::string& dirpath, unsigned n) {
    const auto d = c.walk(root, dirpath);
    if (!d) return fail("smallbench " + dirpath);
    std::vector<std::uint8_t> data(4096, 0x5a), back(4096);
    const double t0 = now_s();
    for (unsigned i = 0; i < n; ++i) {
      const std::string name = "small." + std::to_string(i);
      const auto cr = c.create(d->fh, name, 0644);
      if (!cr) return fail("create " + name);
      if (!c.write(*cr->fh, 0, data, v3::kFileSync)) return fail("write " + name);
      if (!c.read(*cr->fh, 0, back.data(), 4096)) return fail("read " + name);
      if (back != data) return fail("data of " + name);
      if (!c.remove(d->fh, name)) return fail("remove " + name);
    }
    const double dt = now_s() - t0;
    std::printf("smallbench: %u files (create, 4 KiB write, read, remove): %.1f us per file\n", n,
                dt / n * 1e6);
    return true;
  }
};

}  // namespace

int main(int argc, char** argv) {
  NfsLink nl;
  std::string memif_socket, memif_role = "client";
  runtime::LinkOptions& link = nl.link;
  std::string server, exp = "/srv/nfs", mount_server;
  unsigned port = kNfsRdmaPort, mount_port = 20048, io_kib = 1024, depth = 8, tcp_port = 0;
  double tx_drop = 0, rx_drop = 0;
  bool spin = false, no_inv = false;
  TransportOptions topt;
  std::vector<std::string> cmd;
  po::options_description o("roce-nfs options");
  o.add_options()("help,h", "this help")(
      "attach", po::value(&nl.attach),
      "a client of the roced listening on this socket (no DPDK port of its own)")(
      "attach-port", po::value(&nl.attach_port), "attached: roced's port by name (default: first)")(
      "iface", po::value(&link.iface), "kernel interface for the DPDK port (net_af_packet)")(
      "memif", po::value(&memif_socket), "net_memif on this control socket instead")(
      "memif-role", po::value(&memif_role)->default_value("client"), "memif: server or client")(
      "pmd", po::value(&link.pmd)->default_value("af_packet"), "af_packet or af_xdp")(
      "ip", po::value(&link.ip)->default_value("192.0.2.100"), "our RoCE IPv4 address")(
      "mac", po::value(&link.mac)->default_value("02:00:00:00:01:00"), "our MAC")(
      "pcap", po::value(&link.pcap), "capture every frame here")(
      "server", po::value(&server)->required(), "the NFS server's IPv4 address")(
      "port", po::value(&port)->default_value(kNfsRdmaPort), "NFS/RDMA port")(
      "export", po::value(&exp)->default_value("/srv/nfs"), "the export to mount")(
      "mount-server", po::value(&mount_server), "where MOUNT runs over TCP (default: --server)")(
      "mount-port", po::value(&mount_port)->default_value(20048), "mountd's TCP port")(
      "tcp-port", po::value(&tcp_port)->default_value(0),
      "NFS over kernel TCP on this port instead of RDMA (the baseline)")(
      "credits", po::value(&topt.credits)->default_value(32), "credits requested")(
      "inline", po::value(&topt.inline_size)->default_value(4096), "inline threshold (bytes)")(
      "io", po::value(&io_kib)->default_value(1024), "READ/WRITE size (KiB)")(
      "depth", po::value(&depth)->default_value(8), "READs/WRITEs in flight")(
      "tx-drop", po::value(&tx_drop)->default_value(0), "drop this fraction of sent frames")(
      "rx-drop", po::value(&rx_drop)->default_value(0), "drop this fraction of received frames")(
      "spin", po::bool_switch(&spin), "never yield the CPU when idle (a core of its own)")(
      "break-after", po::value(&topt.break_after_calls)->default_value(0),
      "test: tear the connection down once after this many calls (it is made again)")(
      "no-remote-invalidate", po::bool_switch(&no_inv),
      "kept for scripts: SEND with invalidate is never offered (every chunk's registration "
      "ends with the client's own deregistration)")("cmd", po::value(&cmd), "commands");
  po::positional_options_description pos;
  pos.add("cmd", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(o).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << o
                << "\ncommands: ls PATH | stat PATH | cat PATH | get PATH LOCAL | put LOCAL "
                   "PATH | rm PATH | bench PATH BYTES | smallbench DIR N\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "roce-nfs: " << e.what() << "\n";
    return 2;
  }
  if (mount_server.empty()) mount_server = server;
  link.set_drops(tx_drop, rx_drop, 11);
  if (!memif_socket.empty() && !link.set_memif(memif_socket, memif_role)) {
    std::cerr << "roce-nfs: --memif-role must be server or client\n";
    return 2;
  }
  topt.max_chunk = std::max(io_kib * 1024u, 64u * 1024);
  topt.remote_invalidate = false;  // (never offered: see transport.h)
  (void)no_inv;
  topt.yield_when_idle = !spin;
  try {
    std::string err;
    const auto root = mount_tcp(mount_server, static_cast<std::uint16_t>(mount_port), exp, err);
    if (!root) {
      std::cerr << "roce-nfs: " << err << "\n";
      return 1;
    }
    std::unique_ptr<LinkHolder> holder;
    std::unique_ptr<RpcRdmaClient> rdma;
    RpcTcpClient tcp;
    RpcTransport* tr = &tcp;
    if (tcp_port) {  // the baseline: NFS over kernel TCP
      if (!tcp.connect(server, static_cast<std::uint16_t>(tcp_port))) {
        std::cerr << "roce-nfs: " << tcp.error() << "\n";
        return 1;
      }
      std::printf("connected to %s:%u over TCP\n", server.c_str(), tcp_port);
    } else {
      if (nl.attach.empty() && link.iface.empty() && memif_socket.empty()) {
        std::cerr << "roce-nfs: --attach, --iface, --memif or --tcp-port is required\n";
        return 2;
      }
      holder = std::make_unique<LinkHolder>(nl);
      if (holder->attached())
        std::printf("attached to roced at %s (port %s, %s)\n", nl.attach.c_str(),
                    holder->context().port().name.c_str(),
                    ctl::to_string(holder->context().port().ipv4).c_str());
      rdma = std::make_unique<RpcRdmaClient>(holder->context(), topt);
      if (!rdma->connect(server, static_cast<std::uint16_t>(port))) {
        std::cerr << "roce-nfs: " << rdma->error() << "\n";
        return 1;
      }
      std::printf("connected to %s:%u: inline send %u receive %u, RFC 8797 private data %s\n",
                  server.c_str(), port, rdma->send_inline(), rdma->recv_inline(),
                  rdma->peer_private_seen() ? "seen" : "absent (1024 bytes)");
      tr = rdma.get();
    }
    NfsClient c(*tr);
    Tool tool{c, *root, io_kib * 1024u, depth};
    if (auto f = c.fsinfo(*root)) {
      std::printf("fsinfo: rtmax %u wtmax %u dtpref %u\n", f->rtmax, f->wtmax, f->dtpref);
      // READs and WRITEs no larger than the server takes (RFC 1813 FSINFO rtmax, wtmax).
      const std::uint32_t most = std::min(f->rtmax, f->wtmax);
      if (most >= 4096 && tool.io > most) tool.io = most;
    }
    bool ok = true;
    for (std::size_t i = 0; i < cmd.size() && ok;) {
      const std::string& k = cmd[i];
      const auto need = [&](std::size_t n) {
        if (i + n >= cmd.size()) {
          std::cerr << "roce-nfs: " << k << " needs " << n << " argument(s)\n";
          return false;
        }
        return true;
      };
      if (k == "ls" && need(1))
        ok = tool.ls(cmd[i + 1]), i += 2;
      else if (k == "stat" && need(1))
        ok = tool.stat(cmd[i + 1]), i += 2;
      else if (k == "cat" && need(1))
        ok = tool.get(cmd[i + 1], "", true), i += 2;
      else if (k == "get" && need(2))
        ok = tool.get(cmd[i + 1], cmd[i + 2], false), i += 3;
      else if (k == "put" && need(2))
        ok = tool.put(cmd[i + 1], cmd[i + 2]), i += 3;
      else if (k == "rm" && need(1))
        ok = tool.rm(cmd[i + 1]), i += 2;
      else if (k == "bench" && need(2))
        ok = tool.bench(cmd[i + 1], std::stoull(cmd[i + 2])), i += 3;
      else if (k == "errprobe")
        ok = tool.errprobe(*tr), i += 1;
      else if (k == "latency" && need(2))
        ok = tool.latency(cmd[i + 1], static_cast<unsigned>(std::stoul(cmd[i + 2]))), i += 3;
      else if (k == "smallbench" && need(2))
        ok = tool.smallbench(cmd[i + 1], static_cast<unsigned>(std::stoul(cmd[i + 2]))), i += 3;
      else {
        if (k != "ls" && k != "stat" && k != "cat" && k != "get" && k != "put" && k != "rm" &&
            k != "bench" && k != "smallbench" && k != "latency" && k != "errprobe")
          std::cerr << "roce-nfs: unknown command " << k << "\n";
        ok = false;
      }
    }
    if (rdma) {
      const auto& s = rdma->stats();
      std::cout << "transport: " << s.calls << " calls, " << s.read_chunks << " read chunks, "
                << s.write_chunks << " write chunks, " << s.reply_chunks << " reply chunks, "
                << s.registrations << " registrations, invalidations " << s.remote_invalidations
                << " remote " << s.local_invalidations << " local, credits granted " << s.granted
                << ", max outstanding " << s.max_outstanding << ", waits for credit "
                << s.credit_waits << ", reconnects " << s.reconnects << " (calls sent again "
                << s.resent << ", MRs recovered " << s.mrs_recovered << ")" << std::endl;
      rdma->close();
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "roce-nfs: " << e.what() << "\n";
    return 1;
  }
}
