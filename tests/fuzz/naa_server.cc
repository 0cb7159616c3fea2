/// @file
/// Fuzz target: the NAA server (apps/naa/naa_server.cc) facing hostile hosts, on a strict
/// scripted Stack. The input is a stream of host actions: connect, an advertisement+request
/// (built from fields, so that flags, NAA addresses, overlaps and sizes are reached; or raw
/// bytes), a call with any immediate, an RDMA WRITE into an advertised region, a disconnect, a
/// failed completion, and the poll loop's steps. Upstream's and the seed's layouts both occur.
///
/// Checked on every work request the server posts: the connection is one it still serves; the
/// local buffer lies inside the MR of its lkey, in that connection's protection domain; a WRITE
/// goes only to an address and rkey the host itself named for a non-internal region, and no
/// longer than that region. Every MR lies inside memory from alloc(); no memory is freed while
/// an MR covers it. At the end, with every host gone: no MR, no memory left. Arenas are exact
/// allocations, so that ASan sees a kernel or a copy that leaves them.
#include "apps/naa/naa_server.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <tuple>
#include <vector>

#include "apps/naa/kernels.h"
#include "apps/naa/mrsp.h"
#include "tests/fuzz/fuzz_bytes.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace roce::naa;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_naa_server: %s\n", what);
  std::abort();
}

class StrictStack : public Stack {
 public:
  struct Mr {
    ConnId conn;
    std::uint8_t* addr;
    std::uint64_t length, iova;
  };
  struct Recv {
    std::uint64_t wr_id;
    std::uint8_t* addr;
    std::uint32_t length;
  };

  std::optional<Memory> alloc(std::uint64_t length) override {
    if (length == 0 || length > (64u << 20)) fail("alloc of an unreasonable size");
    auto* p = new std::uint8_t[length]();
    mem_[p] = length;
    return Memory{p, length, 0};
  }
  void free(const Memory& m) override {
    const auto it = mem_.find(m.addr);
    if (it == mem_.end()) fail("free of memory not from alloc");
    for (const auto& [k, r] : mrs_)
      if (r.addr >= m.addr && r.addr < m.addr + it->second) fail("memory freed under a live MR");
    delete[] m.addr;
    mem_.erase(it);
  }
  std::optional<MrInfo> reg_mr(ConnId c, void* addr, std::uint64_t length,
                               std::optional<std::uint64_t> iova) override {
    auto* a = static_cast<std::uint8_t*>(addr);
    bool inside = false;
    for (const auto& [p, n] : mem_)
      if (a >= p && length <= n && a - p <= static_cast<std::ptrdiff_t>(n - length)) inside = true;
    if (!inside || length == 0) fail("MR outside memory from alloc");
    MrInfo m;
    m.addr = addr;
    m.iova = iova ? *iova : reinterpret_cast<std::uint64_t>(addr);
    m.length = length;
    m.lkey = m.rkey = next_key_++;
    m.handle = m.lkey;
    mrs_[m.lkey] = Mr{c, a, length, m.iova};
    return m;
  }
  void dereg_mr(const MrInfo& mr) override {
    if (!mrs_.erase(mr.lkey)) fail("dereg of an unknown MR");
  }
  bool listen(std::uint16_t) override { return true; }
  bool prepare(ConnId c, const QpSizes&) override { return live_.count(c) != 0; }
  bool accept(ConnId c) override { return live_.count(c) != 0; }
  void reject(ConnId c) override { live_.erase(c); }
  std::optional<ConnId> connect(const std::string&, std::uint16_t, const QpSizes&) override {
    return std::nullopt;
  }
  void disconnect(ConnId c) override {
    live_.erase(c);
    recvs.erase(c);
  }
  bool post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                 std::uint32_t lkey) override {
    if (!live_.count(c)) fail("receive posted on a connection the server dropped");
    check_local(c, lkey, reinterpret_cast<std::uint64_t>(addr), length);
    recvs[c].push_back({wr_id, static_cast<std::uint8_t*>(addr), length});
    return true;
  }
  bool post_send(ConnId c, const WorkRequest& wr) override {
    if (!live_.count(c)) fail("work request posted on a connection the server dropped");
    if (wr.length) check_local(c, wr.lkey, wr.local, wr.length);
    if (wr.op == Op::kSend && wr.length) {  // the MRSP answer, as the host reads it
      const Mr& m = mrs_.at(wr.lkey);
      const DecodeResult d = decode({m.addr + (wr.local - m.iova), wr.length});
      if (!d.ok()) fail("the NAA sent a message that does not decode");
      if (const auto* a = std::get_if<Advertise>(&d.message())) adverts[c] = a->regions;
    }
    if (wr.op != Op::kSend) {
      const auto it = targets.find(c);
      bool named = false;
      if (it != targets.end())
        for (const auto& [addr, rkey, size] : it->second)
          if (addr == wr.remote_addr && rkey == wr.rkey && wr.length <= size) named = true;
      if (!named) fail("a WRITE to an address, rkey or length the host did not name");
    }
    return true;
  }
  bool poll(std::vector<ConnEvent>& ev, std::vector<Completion>& wc) override {
    const bool any = !events.empty() || !completions.empty();
    ev.insert(ev.end(), events.begin(), events.end());
    wc.insert(wc.end(), completions.begin(), completions.end());
    events.clear();
    completions.clear();
    return any;
  }
  void idle(double) override {}

  void check_local(ConnId c, std::uint32_t lkey, std::uint64_t a, std::uint64_t n) const {
    const auto it = mrs_.find(lkey);
    if (it == mrs_.end()) fail("local key of no MR");
    const Mr& m = it->second;
    if (m.conn != c) fail("local key of another connection's protection domain");
    if (a < m.iova || n > m.length || a - m.iova > m.length - n) fail("local buffer beyond its MR");
  }
  /// The host's SEND: into its oldest receive (none: an RNR NAK, nothing happens).
  void send(ConnId c, std::span<const std::uint8_t> msg) {
    auto& q = recvs[c];
    if (q.empty()) return;
    const Recv r = q.front();
    q.pop_front();
    const std::size_t n = std::min<std::size_t>(msg.size(), r.length);
    std::memcpy(r.addr, msg.data(), n);
    Completion wc;
    wc.conn = c;
    wc.wr_id = r.wr_id;
    wc.kind = Completion::kRecv;
    wc.byte_len = static_cast<std::uint32_t>(n);
    completions.push_back(wc);
  }
  void call(ConnId c, std::uint32_t imm) {
    auto& q = recvs[c];
    if (q.empty()) return;
    Completion wc;
    wc.conn = c;
    wc.wr_id = q.front().wr_id;
    q.pop_front();
    wc.kind = Completion::kRecvImm;
    wc.imm = imm;
    completions.push_back(wc);
  }
  /// An RDMA WRITE of host `c`: rkey, PD and bounds checked as an RNIC would.
  void write(ConnId c, std::uint32_t rkey, std::uint64_t addr, std::uint32_t n, std::uint8_t v) {
    const auto it = mrs_.find(rkey);
    if (it == mrs_.end() || it->second.conn != c || addr < it->second.iova ||
        n > it->second.length || addr - it->second.iova > it->second.length - n)
      return;  // NAK
    std::memset(it->second.addr + (addr - it->second.iova), v, n);
  }
  void open(ConnId c) { live_.insert(c); }
  bool clean() const { return mrs_.empty() && mem_.empty(); }

  std::map<ConnId, std::deque<Recv>> recvs;
  std::map<ConnId, std::vector<std::tuple<std::uint64_t, std::uint32_t, std::uint32_t>>> targets;
  std::map<ConnId, std::vector<AdvEntry>> adverts;  ///< the last advertisement to each host
  std::vector<ConnEvent> events;
  std::vector<Completion> completions;

 private:
  std::map<std::uint8_t*, std::uint64_t> mem_;
  std::map<std::uint32_t, Mr> mrs_;
  std::set<ConnId> live_;
  std::uint32_t next_key_ = 1;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  roce::fuzz::Reader in(data, size);
  StrictStack stack;
  const std::uint8_t mode = in.u8();
  NaaConfig cfg;
  cfg.memory_per_host = 1u << 20;
  cfg.max_hosts = 3;
  cfg.max_regions = 1 + mode % kMaxRegions;
  cfg.kernel_threads = mode & 0x40 ? 1 : 0;
  cfg.kernel_queue = 1 + (mode >> 7);
  cfg.inline_bytes = mode & 0x20 ? 0 : 4096;
  cfg.host_idle_timeout = 0;
  std::vector<ConnId> hosts;
  ConnId next = 1;
  {
    NaaServer server(stack, cfg, KernelRegistry::builtin());
    server.start();
    auto pick = [&]() -> const ConnId* {
      if (hosts.empty()) return nullptr;
      return &hosts[in.u8() % hosts.size()];
    };
    for (unsigned ops = 0; !in.empty() && ops < 64; ++ops) {
      switch (in.u8() % 8) {
        case 0: {  // a new host
          const ConnId c = next++;
          stack.open(c);
          stack.events.push_back({ConnEvent::kConnectRequest, c, "192.0.2.9"});
          stack.events.push_back({ConnEvent::kEstablished, c, {}});
          hosts.push_back(c);
          break;
        }
        case 1: {  // an advertisement+request from fields
          const ConnId* h = pick();
          if (!h) break;
          AdvertiseRequest req;
          const unsigned n = 1 + in.u8() % 8;
          for (unsigned i = 0; i < n; ++i) {
            AdvReqEntry e;
            e.flags = in.u8();
            const std::uint8_t where = in.u8();
            e.fpga_addr = where < 96    ? 0
                          : where < 224 ? (in.u32() % (3u << 19)) & ~0xFFFull
                                        : in.u64() & kMaxFpgaAddress;
            e.addr = 0x10000ull * (i + 1);
            e.rkey = 0x100 + i;
            const std::uint8_t big = in.u8();
            e.size = big < 200 ? in.u16() : big < 250 ? in.u32() % (1u << 21) : in.u32();
            req.regions.push_back(e);
            if (!e.internal()) stack.targets[*h].emplace_back(e.addr, e.rkey, e.size);
          }
          std::vector<std::uint8_t> b;
          encode(req, b);
          stack.send(*h, b);
          break;
        }
        case 2: {  // raw bytes as an MRSP message
          const ConnId* h = pick();
          if (!h) break;
          const auto b = in.bytes(in.u8());
          const DecodeResult d = decode(b);
          if (d.ok())
            if (const auto* q = std::get_if<AdvertiseRequest>(&d.message()))
              for (const auto& e : q->regions)
                if (!e.internal()) stack.targets[*h].emplace_back(e.addr, e.rkey, e.size);
          stack.send(*h, b);
          break;
        }
        case 3: {  // a call
          const ConnId* h = pick();
          if (!h) break;
          const std::uint8_t k = in.u8();
          const std::uint32_t imm = k < 128 ? encode_call_imm(k % 10, 0) : in.u32();
          stack.call(*h, imm);
          break;
        }
        case 4: {  // an RDMA WRITE into an advertised region (or next to it)
          const ConnId* h = pick();
          if (!h || stack.adverts[*h].empty()) break;
          const auto& adv = stack.adverts[*h];
          const AdvEntry& r = adv[in.u8() % adv.size()];
          const std::uint32_t off = in.u16(), len = in.u16();
          stack.write(*h, r.rkey, r.addr + off, len, in.u8());
          break;
        }
        case 5: {  // the host goes
          const ConnId* h = pick();
          if (h) stack.events.push_back({ConnEvent::kDisconnected, *h, {}});
          break;
        }
        case 6: {  // its QP breaks
          const ConnId* h = pick();
          if (!h) break;
          Completion wc;
          wc.conn = *h;
          wc.ok = false;
          wc.status = "retry exceeded";
          stack.completions.push_back(wc);
          break;
        }
        default:
          server.drain_kernels();
          break;
      }
      server.step();
    }
    // Every host goes; the kernels finish; nothing is left.
    for (const ConnId h : hosts) stack.events.push_back({ConnEvent::kDisconnected, h, {}});
    server.step();
    server.drain_kernels();
    server.step();
    if (server.hosts() != 0) fail("hosts left after every host went");
  }
  if (!stack.clean()) fail("MRs or memory left after the server went");
  return 0;
}
