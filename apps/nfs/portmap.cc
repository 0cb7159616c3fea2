/// @file
/// The port mapper's answer (portmap.h).
#include "apps/nfs/portmap.h"

#include "apps/nfs/rpc.h"
#include "apps/nfs/xdr.h"

namespace roce::nfs {

namespace {
constexpr std::uint32_t kNull = 0, kSet = 1, kUnset = 2, kGetport = 3, kDump = 4;
constexpr std::uint32_t kIpProtoTcp = 6, kIpProtoUdp = 17;

/// RFC 1833's universal address: "h1.h2.h3.h4.p1.p2".
std::string uaddr(const PortmapEntry& e) {
  return e.address + "." + std::to_string(e.port >> 8) + "." + std::to_string(e.port & 0xff);
}
}  // namespace

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
  } else if (h.proc == kGetport) {  // RPCBPROC_GETADDR (v3 and v4)
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

}  // namespace roce::nfs
