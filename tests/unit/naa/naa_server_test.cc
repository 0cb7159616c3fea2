// The NAA server against a scripted Stack (no DPDK, no wire): the whole NAAICE exchange, and
// what a misbehaving host gets (malformed MRSP, a call before the MRSP, too many regions, an
// unknown function, too many hosts, silence): a named error or a disconnect, every region
// deregistered afterwards, never a crash.
#include "apps/naa/naa_server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include "dataplane/wire/bytes.h"

namespace roce::naa {
namespace {

struct Sent {
  ConnId conn;
  WorkRequest wr;
  std::vector<std::uint8_t> data;  ///< the payload as it was when posted
};

class FakeStack : public Stack {
 public:
  std::optional<Memory> alloc(std::uint64_t length) override {
    void* p = std::aligned_alloc(4096, (length + 4095) / 4096 * 4096);
    if (p == nullptr) return std::nullopt;
    std::memset(p, 0, length);
    ++allocated;
    return Memory{static_cast<std::uint8_t*>(p), length, 0};
  }
  void free(const Memory& m) override {
    if (m.addr == nullptr) return;
    --allocated;
    std::free(m.addr);
  }
  /// One protection domain per connection, as the engine's and rdma-core's stacks do.
  std::optional<MrInfo> reg_mr(ConnId c, void* addr, std::uint64_t length,
                               std::optional<std::uint64_t> iova) override {
    MrInfo m;
    m.addr = addr;
    m.iova = iova ? *iova : reinterpret_cast<std::uint64_t>(addr);
    m.length = length;
    m.lkey = m.rkey = next_key_++;
    m.handle = m.lkey;
    mrs_[m.lkey] = m;
    pd_of_[m.lkey] = c;
    return m;
  }
  void dereg_mr(const MrInfo& mr) override { mrs_.erase(mr.lkey); }
  bool listen(std::uint16_t port) override {
    listened = port;
    return true;
  }
  bool prepare(ConnId, const QpSizes&) override { return true; }
  bool accept(ConnId c) override {
    accepted.push_back(c);
    return true;
  }
  void reject(ConnId c) override { rejected.push_back(c); }
  std::optional<ConnId> connect(const std::string&, std::uint16_t, const QpSizes&) override {
    return std::nullopt;
  }
  void disconnect(ConnId c) override { disconnected.push_back(c); }
  bool post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                 std::uint32_t) override {
    recvs[c].push_back({wr_id, static_cast<std::uint8_t*>(addr), length});
    return true;
  }
  bool post_send(ConnId c, const WorkRequest& wr) override {
    Sent s{c, wr, {}};
    if (wr.length) {
      const std::uint8_t* p = local(wr.lkey, wr.local);
      s.data.assign(p, p + wr.length);
    }
    sent.push_back(std::move(s));
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

  /// Where an MR's address `a` (in its iova space) is in memory.
  std::uint8_t* local(std::uint32_t key, std::uint64_t a) {
    const MrInfo& m = mrs_.at(key);
    return static_cast<std::uint8_t*>(m.addr) + (a - m.iova);
  }
  /// An RDMA WRITE of the host into the NAA: rkey, PD and bounds checked as an RNIC would.
  bool remote_write(std::uint32_t rkey, std::uint64_t addr, const void* data, std::size_t n) {
    return mrs_.count(rkey) && remote_write(pd_of_.at(rkey), rkey, addr, data, n);
  }
  /// The same arriving on connection `c`'s QP.
  bool remote_write(ConnId c, std::uint32_t rkey, std::uint64_t addr, const void* data,
                    std::size_t n) {
    const auto it = mrs_.find(rkey);
    if (it == mrs_.end() || pd_of_.at(rkey) != c || addr < it->second.iova ||
        addr + n > it->second.iova + it->second.length)
      return false;
    std::memcpy(local(rkey, addr), data, n);
    return true;
  }
  /// A SEND of the host: lands in the oldest receive of `c`.
  void deliver_send(ConnId c, const std::vector<std::uint8_t>& msg) {
    auto& q = recvs[c];
    ASSERT_FALSE(q.empty());
    const Recv r = q.front();
    q.pop_front();
    ASSERT_LE(msg.size(), r.length);
    std::memcpy(r.addr, msg.data(), msg.size());
    Completion wc;
    wc.conn = c;
    wc.wr_id = r.wr_id;
    wc.kind = Completion::kRecv;
    wc.byte_len = static_cast<std::uint32_t>(msg.size());
    completions.push_back(wc);
  }
  /// The host's final WRITE_WITH_IMM (its data already written): consumes a receive.
  void deliver_imm(ConnId c, std::uint32_t imm) {
    auto& q = recvs[c];
    ASSERT_FALSE(q.empty());
    const Recv r = q.front();
    q.pop_front();
    Completion wc;
    wc.conn = c;
    wc.wr_id = r.wr_id;
    wc.kind = Completion::kRecvImm;
    wc.imm = imm;
    completions.push_back(wc);
  }
  std::size_t live_mrs() const { return mrs_.size(); }
  int allocated = 0;  ///< Memory from alloc() not yet freed

  struct Recv {
    std::uint64_t wr_id;
    std::uint8_t* addr;
    std::uint32_t length;
  };
  std::optional<std::uint16_t> listened;
  std::vector<ConnId> accepted, rejected, disconnected;
  std::map<ConnId, std::deque<Recv>> recvs;
  std::vector<Sent> sent;
  std::vector<ConnEvent> events;
  std::vector<Completion> completions;

 private:
  std::map<std::uint32_t, MrInfo> mrs_;
  std::map<std::uint32_t, ConnId> pd_of_;  ///< rkey -> the connection of its PD
  std::uint32_t next_key_ = 100;
};

/// A host's regions as NAAICE lays them out: region 0 the metadata (return address), then the
/// parameters; its addresses and keys are made up (the fake has no host side).
AdvertiseRequest request(const std::vector<std::uint32_t>& sizes) {
  AdvertiseRequest r;
  r.regions.push_back({0, 0, 0x10000, 1, 8});
  for (std::size_t i = 0; i < sizes.size(); ++i)
    r.regions.push_back({0, 0, 0x100000 * (i + 1), static_cast<std::uint32_t>(2 + i), sizes[i]});
  return r;
}

std::vector<std::uint8_t> bytes(const auto& msg) {
  std::vector<std::uint8_t> b;
  encode(msg, b);
  return b;
}

class NaaServerTest : public ::testing::Test {
 protected:
  void SetUp() { make(NaaConfig{}); }
  void make(NaaConfig cfg, KernelRegistry k = KernelRegistry::builtin()) {
    server.reset();
    server = std::make_unique<NaaServer>(stack, cfg, std::move(k));
    server->start();
  }
  /// One step, and the results of the calls it started (they run on the kernel threads).
  void step() {
    server->step();
    server->drain_kernels();
  }
  ConnId connect_host() {
    const ConnId c = next_conn++;
    stack.events.push_back({ConnEvent::kConnectRequest, c, "192.0.2.2"});
    stack.events.push_back({ConnEvent::kEstablished, c, {}});
    server->step();
    return c;
  }
  /// The last message the NAA SENT to `c`, decoded.
  Message last_mrsp(ConnId c) {
    for (auto it = stack.sent.rbegin(); it != stack.sent.rend(); ++it)
      if (it->conn == c && it->wr.op == Op::kSend) {
        const auto d = decode(it->data);
        EXPECT_TRUE(d.ok()) << d.detail;
        return d.message();
      }
    ADD_FAILURE() << "no MRSP answer";
    return ErrorMsg{};
  }

  FakeStack stack;
  std::unique_ptr<NaaServer> server;
  ConnId next_conn = 1;
};

TEST_F(NaaServerTest, WholeExchangeVectorAdd) {
  EXPECT_EQ(stack.listened, 12345);
  const ConnId c = connect_host();
  ASSERT_EQ(stack.accepted.size(), 1u);
  EXPECT_EQ(stack.recvs[c].size(), 2u);  // posted before the REP
  const std::uint32_t n = 64;
  stack.deliver_send(c, bytes(request({n * 4, n * 4, n * 4})));
  step();
  const auto adv = std::get<Advertise>(last_mrsp(c));
  ASSERT_EQ(adv.regions.size(), 4u);
  // The host writes the metadata (return address = its third parameter) and a, b.
  std::uint8_t meta[8];
  wire::store_be64(meta, 0x300000);
  ASSERT_TRUE(stack.remote_write(adv.regions[0].rkey, adv.regions[0].addr, meta, 8));
  std::vector<std::uint32_t> a(n), b(n);
  for (std::uint32_t i = 0; i < n; ++i) a[i] = i * 7, b[i] = 1000 + i;
  ASSERT_TRUE(stack.remote_write(adv.regions[1].rkey, adv.regions[1].addr, a.data(), n * 4));
  ASSERT_TRUE(stack.remote_write(adv.regions[2].rkey, adv.regions[2].addr, b.data(), n * 4));
  // Beyond a region: refused by the (fake) transport, as an RNIC would NAK it.
  EXPECT_FALSE(stack.remote_write(adv.regions[1].rkey, adv.regions[1].addr + 1, a.data(), n * 4));
  stack.deliver_imm(c, kFnVectorAdd);
  const std::size_t before = stack.sent.size();
  step();
  ASSERT_EQ(stack.sent.size(), before + 1);
  const Sent& r = stack.sent.back();
  EXPECT_EQ(r.wr.op, Op::kWriteImm);
  EXPECT_EQ(r.wr.imm, 0u);
  EXPECT_EQ(r.wr.remote_addr, 0x300000u);
  EXPECT_EQ(r.wr.rkey, 4u);
  ASSERT_EQ(r.data.size(), n * 4);
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint32_t v;
    std::memcpy(&v, r.data.data() + i * 4, 4);
    EXPECT_EQ(v, a[i] + b[i]);
  }
  EXPECT_EQ(server->stats().calls, 1u);
  // DREQ: everything freed.
  stack.events.push_back({ConnEvent::kDisconnected, c, {}});
  step();
  EXPECT_EQ(server->hosts(), 0u);
  EXPECT_EQ(stack.live_mrs(), 0u);
  EXPECT_EQ(stack.allocated, 0);  // the messages' memory and the host's NAA memory
}

TEST_F(NaaServerTest, IncrementWritesEveryParameterReturnLast) {
  const ConnId c = connect_host();
  stack.deliver_send(c, bytes(request({16, 32, 8})));
  step();
  const auto adv = std::get<Advertise>(last_mrsp(c));
  std::uint8_t meta[8];
  wire::store_be64(meta, 0x200000);  // the second parameter is the return region
  stack.remote_write(adv.regions[0].rkey, adv.regions[0].addr, meta, 8);
  stack.deliver_imm(c, kFnIncrement);
  const std::size_t before = stack.sent.size();
  step();
  ASSERT_EQ(stack.sent.size(), before + 3);  // n-1 WRITEs, then the WRITE_WITH_IMM
  EXPECT_EQ(stack.sent[before].wr.op, Op::kWrite);
  EXPECT_EQ(stack.sent[before + 1].wr.op, Op::kWrite);
  EXPECT_EQ(stack.sent[before + 2].wr.op, Op::kWriteImm);
  EXPECT_EQ(stack.sent[before + 2].wr.remote_addr, 0x200000u);
  EXPECT_EQ(stack.sent[before + 2].data, std::vector<std::uint8_t>(32, 1));
}

TEST_F(NaaServerTest, MrspErrors) {
  NaaConfig cfg;
  cfg.memory_per_host = 1 << 20;
  make(cfg);
  const ConnId c = connect_host();
  // Too many regions: 40 fit the message (and our receive), the NAA handles 32.
  AdvertiseRequest many;
  many.regions.assign(40, AdvReqEntry{0, 0, 0x1000, 1, 64});
  stack.deliver_send(c, bytes(many));
  step();
  EXPECT_EQ(std::get<ErrorMsg>(last_mrsp(c)).code, 0x03);
  // An address beyond the memory, then one running over its end.
  AdvertiseRequest r = request({4096});
  r.regions[1].fpga_addr = 2 << 20;
  stack.deliver_send(c, bytes(r));
  step();
  EXPECT_EQ(std::get<ErrorMsg>(last_mrsp(c)).code, 0x02);
  r.regions[1].fpga_addr = (1 << 20) - 100;
  stack.deliver_send(c, bytes(r));
  step();
  EXPECT_EQ(std::get<ErrorMsg>(last_mrsp(c)).code, 0x01);
  // Too much memory for the regions placed anywhere.
  stack.deliver_send(c, bytes(request({1 << 20})));
  step();
  EXPECT_EQ(std::get<ErrorMsg>(last_mrsp(c)).code, 0x01);
  // A size of 0.
  stack.deliver_send(c, bytes(request({0})));
  step();
  EXPECT_EQ(std::get<ErrorMsg>(last_mrsp(c)).code, 0x02);
  // The host is still connected and may try again: this one fits.
  EXPECT_EQ(server->hosts(), 1u);
  stack.deliver_send(c, bytes(request({4096})));
  step();
  EXPECT_EQ(std::get<Advertise>(last_mrsp(c)).regions.size(), 2u);
  EXPECT_EQ(server->stats().mrsp_errors.at(0x01), 2u);
  EXPECT_EQ(server->stats().mrsp_errors.at(0x02), 2u);
  EXPECT_EQ(server->stats().mrsp_errors.at(0x03), 1u);
  // The regions of the failed attempts were not kept: metadata, parameter, receive, send.
  EXPECT_EQ(stack.live_mrs(), 4u);
}

TEST_F(NaaServerTest, MalformedMrspDisconnects) {
  const std::vector<std::vector<std::uint8_t>> bad = {
      {0x01, 0x02},                 // truncated header
      {0x01, 0x03, 0, 0, 1, 2, 3},  // count larger than the message
      {0x07, 0x01, 0, 0},           // unknown type
      {0x02, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  // an advertisement
  };
  for (const auto& m : bad) {
    const ConnId c = connect_host();
    stack.deliver_send(c, m);
    step();
    EXPECT_EQ(server->hosts(), 0u);
    EXPECT_EQ(stack.disconnected.back(), c);
  }
  EXPECT_EQ(server->stats().mrsp_malformed, bad.size());
  EXPECT_EQ(stack.live_mrs(), 0u);
  EXPECT_EQ(stack.allocated, 0);
}

TEST_F(NaaServerTest, CallErrors) {
  // A call before the MRSP: disconnected.
  ConnId c = connect_host();
  stack.deliver_imm(c, kFnVectorAdd);
  step();
  EXPECT_EQ(server->hosts(), 0u);
  // Unknown function: zero-length WRITE_WITH_IMM(0x10) to the return region.
  c = connect_host();
  stack.deliver_send(c, bytes(request({64})));
  step();
  const auto adv = std::get<Advertise>(last_mrsp(c));
  std::uint8_t meta[8];
  wire::store_be64(meta, 0x100000);
  stack.remote_write(adv.regions[0].rkey, adv.regions[0].addr, meta, 8);
  stack.deliver_imm(c, 0x77);
  step();
  EXPECT_EQ(stack.sent.back().wr.op, Op::kWriteImm);
  EXPECT_EQ(stack.sent.back().wr.imm, kRpcUnknownFunction);
  EXPECT_EQ(stack.sent.back().wr.length, 0u);
  // A return address that names no region: 0x11, to the metadata region's host address.
  wire::store_be64(meta, 0xdead);
  stack.remote_write(adv.regions[0].rkey, adv.regions[0].addr, meta, 8);
  stack.deliver_imm(c, kFnIncrement);
  step();
  EXPECT_EQ(stack.sent.back().wr.imm, kRpcBadReturnAddress);
  EXPECT_EQ(stack.sent.back().wr.remote_addr, 0x10000u);
  // Function code 0 (an error on the host's side): nothing runs, nothing is sent.
  const std::size_t before = stack.sent.size();
  stack.deliver_imm(c, 0);
  step();
  EXPECT_EQ(stack.sent.size(), before);
  EXPECT_EQ(server->hosts(), 1u);
  // Receives are reposted after each message: the host can go on.
  EXPECT_EQ(stack.recvs[c].size(), 2u);
}

TEST_F(NaaServerTest, MaxHostsAndFailedCompletions) {
  NaaConfig cfg;
  cfg.max_hosts = 2;
  make(cfg);
  const ConnId a = connect_host();
  connect_host();
  const ConnId c = connect_host();
  EXPECT_EQ(server->hosts(), 2u);
  EXPECT_EQ(stack.rejected, std::vector<ConnId>{c});
  EXPECT_EQ(server->stats().hosts_rejected, 1u);
  // A failed completion (the host vanished): dropped and freed.
  Completion wc;
  wc.conn = a;
  wc.ok = false;
  wc.status = "transport retry counter exceeded";
  stack.completions.push_back(wc);
  step();
  EXPECT_EQ(server->hosts(), 1u);
  EXPECT_EQ(server->stats().transport_errors, 1u);
  // The freed slot takes a new host.
  connect_host();
  EXPECT_EQ(server->hosts(), 2u);
}

TEST_F(NaaServerTest, SilentHostExpires) {
  NaaConfig cfg;
  cfg.host_idle_timeout = 0.05;
  make(cfg);
  connect_host();
  step();
  EXPECT_EQ(server->hosts(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  step();
  EXPECT_EQ(server->hosts(), 0u);
  EXPECT_EQ(server->stats().hosts_expired, 1u);
  EXPECT_EQ(stack.live_mrs(), 0u);
}

// ---- kernels off the poll loop, one protection domain per host ---------------------------------

/// A kernel (code 100) that runs until the test opens its gate, or 5 s pass (so that a server
/// that runs it on the poll loop ends the test with a failure instead of hanging).
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<int> entered{0};
  KernelRegistry registry() {
    KernelRegistry k = KernelRegistry::builtin();
    k.add(100, Kernel{"gate", "p1 (any)", [this](std::span<Param> p) {
                        ++entered;
                        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
                        while (!open && std::chrono::steady_clock::now() < end)
                          std::this_thread::sleep_for(std::chrono::milliseconds(1));
                        p[0].data[0] ^= 0xFF;
                        return KernelResult{0, {0}};
                      }});
    return k;
  }
};

class NaaKernelThreads : public NaaServerTest {
 protected:
  /// A host with one 64-byte parameter, its return region; its call to the gate is running.
  ConnId calling_host() {
    const ConnId c = connect_host();
    stack.deliver_send(c, bytes(request({64})));
    server->step();
    const auto adv = std::get<Advertise>(last_mrsp(c));
    std::uint8_t meta[8];
    wire::store_be64(meta, 0x100000);
    EXPECT_TRUE(stack.remote_write(adv.regions[0].rkey, adv.regions[0].addr, meta, 8));
    stack.deliver_imm(c, 100);
    server->step();
    return c;
  }
  /// The WRITE_WITH_IMMs the NAA posted to `c` so far (the calls' answers).
  std::vector<Sent> answers(ConnId c) {
    std::vector<Sent> v;
    for (const Sent& x : stack.sent)
      if (x.conn == c && x.wr.op == Op::kWriteImm) v.push_back(x);
    return v;
  }
  Gate gate;
};

TEST_F(NaaKernelThreads, TheLoopServesOtherHostsWhileAKernelRuns) {
  make(NaaConfig{}, gate.registry());
  const ConnId a = calling_host();
  // A's kernel is running; the loop goes on: host B connects and gets its advertisement.
  const ConnId b = connect_host();
  stack.deliver_send(b, bytes(request({256})));
  server->step();
  EXPECT_TRUE(std::holds_alternative<Advertise>(last_mrsp(b)));
  EXPECT_TRUE(answers(a).empty()) << "A's call was answered before B was served: the kernel "
                                     "ran on the poll loop";
  EXPECT_EQ(server->kernels_in_flight(), 1u);
  gate.open = true;
  server->drain_kernels();
  const auto ans = answers(a);
  ASSERT_EQ(ans.size(), 1u);
  EXPECT_EQ(ans[0].wr.imm, 0u);
  ASSERT_EQ(ans[0].data.size(), 64u);
  EXPECT_EQ(ans[0].data[0], 0xFF);
}

TEST_F(NaaKernelThreads, AFullQueueOrASecondCallIsAnsweredBusy) {
  NaaConfig cfg;
  cfg.kernel_queue = 1;
  make(cfg, gate.registry());
  const ConnId a = calling_host();
  const ConnId b = calling_host();  // the queue holds A's call: B is answered 0x01 at once
  auto ab = answers(b);
  ASSERT_EQ(ab.size(), 1u);
  EXPECT_EQ(ab[0].wr.imm, kRpcSocketNotAvailable);
  EXPECT_EQ(ab[0].wr.length, 0u);
  // A calls again before its answer: 0x01 as well, its first call goes on.
  stack.deliver_imm(a, 100);
  server->step();
  auto aa = answers(a);
  ASSERT_EQ(aa.size(), 1u);
  EXPECT_EQ(aa[0].wr.imm, kRpcSocketNotAvailable);
  gate.open = true;
  server->drain_kernels();
  aa = answers(a);
  ASSERT_EQ(aa.size(), 2u);
  EXPECT_EQ(aa[1].wr.imm, 0u);
  EXPECT_EQ(server->stats().calls_busy, 2u);
  // B's next call runs.
  stack.deliver_imm(b, 100);
  step();
  ab = answers(b);
  ASSERT_EQ(ab.size(), 2u);
  EXPECT_EQ(ab[1].wr.imm, 0u);
}

TEST_F(NaaKernelThreads, AHostGoneOrRemappedDuringItsCallLeavesTheKernelItsMemory) {
  make(NaaConfig{}, gate.registry());
  const ConnId a = calling_host();
  const ConnId b = calling_host();
  stack.events.push_back({ConnEvent::kDisconnected, a, {}});
  server->step();
  stack.deliver_send(b, bytes(request({64})));  // an MRSP during its call: dropped
  server->step();
  EXPECT_EQ(server->hosts(), 0u);
  EXPECT_EQ(stack.live_mrs(), 0u);
  const std::size_t sent = stack.sent.size();
  gate.open = true;
  server->drain_kernels();  // the kernels write into memory the hosts no longer have
  server->step();
  EXPECT_EQ(stack.sent.size(), sent);  // and nothing goes to a host that is gone
}

TEST_F(NaaKernelThreads, AHostGoneBeforeItsKernelStartsLeavesNoQueuedCall) {
  // Hostile: call a long kernel, disconnect, reconnect, call again. A call whose host is gone
  // before its kernel started must leave the queue (and free its memory), or a single host fills
  // the queue with orphans and every other host is answered 0x01 for as long as they run.
  NaaConfig cfg;
  cfg.kernel_queue = 2;
  make(cfg, gate.registry());
  const ConnId a = calling_host();  // running
  const ConnId b = calling_host();  // queued behind A
  EXPECT_EQ(server->kernels_in_flight(), 2u);
  const int memory_with_b = stack.allocated;
  stack.events.push_back({ConnEvent::kDisconnected, b, {}});
  server->step();
  EXPECT_EQ(server->kernels_in_flight(), 1u) << "B's queued call outlived B";
  EXPECT_LT(stack.allocated, memory_with_b - 1) << "B's NAA memory is held by its queued call";
  const ConnId c = calling_host();  // takes B's place in the queue
  EXPECT_TRUE(answers(c).empty()) << "C was answered busy: the queue is full of a gone host";
  EXPECT_EQ(server->stats().calls_busy, 0u);
  gate.open = true;
  server->drain_kernels();
  ASSERT_EQ(answers(a).size(), 1u);
  ASSERT_EQ(answers(c).size(), 1u);
  EXPECT_EQ(answers(c)[0].wr.imm, 0u);
  EXPECT_EQ(gate.entered, 2) << "the kernel ran for a host that was gone before it started";
}

TEST_F(NaaKernelThreads, OnlySmallLinearKernelsRunOnThePollLoop) {
  // Kernel 101 records the thread it ran on; linear, as echo and vector_add are.
  std::thread::id ran_on;
  KernelRegistry k = KernelRegistry::builtin();
  k.add(101, Kernel{"where", "p1",
                    [&](std::span<Param>) {
                      ran_on = std::this_thread::get_id();
                      return KernelResult{0, {0}};
                    },
                    true});
  NaaConfig cfg;
  cfg.inline_bytes = 4096;
  make(cfg, std::move(k));
  auto call = [&](std::uint32_t size) {
    const ConnId c = connect_host();
    stack.deliver_send(c, bytes(request({size})));
    server->step();
    const auto adv = std::get<Advertise>(last_mrsp(c));
    std::uint8_t meta[8];
    wire::store_be64(meta, 0x100000);
    stack.remote_write(adv.regions[0].rkey, adv.regions[0].addr, meta, 8);
    stack.deliver_imm(c, 101);
    step();
    EXPECT_EQ(answers(c).size(), 1u);
  };
  call(4096);  // a copy's worth of work: on the loop, no handoff
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  call(4097);  // more: on a kernel thread
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST_F(NaaServerTest, EachHostsMemoryIsInItsOwnProtectionDomain) {
  const ConnId a = connect_host(), b = connect_host();
  stack.deliver_send(a, bytes(request({64})));
  server->step();
  const auto adv_a = std::get<Advertise>(last_mrsp(a));
  stack.deliver_send(b, bytes(request({64})));
  server->step();
  const std::uint8_t junk[64] = {0xEE};
  // B's WRITE with A's rkey, on B's connection: refused (remote access error).
  EXPECT_FALSE(stack.remote_write(b, adv_a.regions[1].rkey, adv_a.regions[1].addr, junk, 64));
  EXPECT_TRUE(stack.remote_write(a, adv_a.regions[1].rkey, adv_a.regions[1].addr, junk, 64));
}

// ---- upstream NAAICE's layout (naa-communication-library f7b72fc) ------------------------------
// Every region is data, flagged INPUT / OUTPUT / SINGLESEND; no metadata region. The NAA writes
// the OUTPUT regions back, the last as WRITE_WITH_IMM(status << 8); everything the host waits
// for carries the Solicited Event bit (upstream arms its CQ with ibv_req_notify_cq(cq, 1)).

/// Regions as upstream's naaice_send_message lays them out, addresses as its
/// get_sequential_naa_addresses makes them (from 0, 4 KiB pages).
AdvertiseRequest upstream_request(const std::vector<std::pair<std::uint8_t, std::uint32_t>>& r) {
  AdvertiseRequest q;
  std::uint64_t naa = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    q.regions.push_back(
        {r[i].first, naa, 0x100000 * (i + 1), static_cast<std::uint32_t>(2 + i), r[i].second});
    naa += (r[i].second + 4095) / 4096 * 4096;
  }
  return q;
}

constexpr std::uint8_t kIn = kMrFlagInput, kOut = kMrFlagOutput, kOnce = kMrFlagSingleSend;

TEST_F(NaaServerTest, UpstreamClientExchange) {
  // examples/naaice_client IP 2 '1024 64': FNCODE 3, region 0 input + single send, region 1
  // input + output; region 0 sends 2 bytes on the first call.
  const ConnId c = connect_host();
  stack.deliver_send(c, bytes(upstream_request({{kIn | kOnce, 1024}, {kIn | kOut, 64}})));
  step();
  ASSERT_EQ(stack.sent.size(), 1u);
  EXPECT_EQ(stack.sent[0].wr.op, Op::kSend);
  EXPECT_TRUE(stack.sent[0].wr.solicited) << "the host sleeps until a solicited completion";
  const auto adv = std::get<Advertise>(last_mrsp(c));
  ASSERT_EQ(adv.regions.size(), 2u);   // no metadata region
  EXPECT_EQ(adv.regions[0].addr, 0u);  // at the addresses requested
  EXPECT_EQ(adv.regions[1].addr, 0x1000u);
  EXPECT_EQ(adv.regions[0].size, 1024u);
  EXPECT_EQ(adv.regions[1].size, 64u);
  const std::uint8_t two[2] = {10, 10};
  ASSERT_TRUE(stack.remote_write(adv.regions[0].rkey, adv.regions[0].addr, two, 2));
  const std::vector<std::uint8_t> p1(64, 11);
  ASSERT_TRUE(stack.remote_write(adv.regions[1].rkey, adv.regions[1].addr, p1.data(), 64));
  stack.deliver_imm(c, 0x00000083);  // htonl(3 | 0x80)
  step();
  ASSERT_EQ(stack.sent.size(), 2u);  // region 1 only: it alone is OUTPUT
  const Sent& r = stack.sent[1];
  EXPECT_EQ(r.wr.op, Op::kWriteImm);
  EXPECT_TRUE(r.wr.solicited);
  EXPECT_EQ(r.wr.imm, 0u);
  EXPECT_EQ(r.wr.remote_addr, 0x200000u);
  EXPECT_EQ(r.wr.rkey, 3u);
  EXPECT_EQ(r.data, p1);  // function 3: unchanged
  EXPECT_EQ(server->stats().statuses.at(0), 1u);
}

TEST_F(NaaServerTest, UpstreamAp2ClientAddOne) {
  // examples/naaice_client_ap2 2 ... with 4 inputs and outputs 0, 1, 3, FNCODE 1: every region
  // + 1 on the NAA; the OUTPUT ones written back in order, the last with the immediate.
  const ConnId c = connect_host();
  stack.deliver_send(
      c, bytes(upstream_request({{kIn | kOut, 16}, {kIn | kOut, 32}, {kIn, 8}, {kIn | kOut, 24}})));
  step();
  const auto adv = std::get<Advertise>(last_mrsp(c));
  ASSERT_EQ(adv.regions.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const std::vector<std::uint8_t> v(adv.regions[i].size, static_cast<std::uint8_t>(i));
    ASSERT_TRUE(stack.remote_write(adv.regions[i].rkey, adv.regions[i].addr, v.data(), v.size()));
  }
  const std::size_t before = stack.sent.size();
  stack.deliver_imm(c, encode_call_imm(1, 0));
  step();
  ASSERT_EQ(stack.sent.size(), before + 3);
  EXPECT_EQ(stack.sent[before].wr.op, Op::kWrite);
  EXPECT_EQ(stack.sent[before].wr.remote_addr, 0x100000u);
  EXPECT_EQ(stack.sent[before].data, std::vector<std::uint8_t>(16, 1));
  EXPECT_EQ(stack.sent[before + 1].wr.op, Op::kWrite);
  EXPECT_EQ(stack.sent[before + 1].wr.remote_addr, 0x200000u);
  EXPECT_EQ(stack.sent[before + 1].data, std::vector<std::uint8_t>(32, 2));
  const Sent& last = stack.sent[before + 2];
  EXPECT_EQ(last.wr.op, Op::kWriteImm);
  EXPECT_TRUE(last.wr.solicited);
  EXPECT_EQ(last.wr.remote_addr, 0x400000u);
  EXPECT_EQ(last.data, std::vector<std::uint8_t>(24, 4));
  // Function 2 (add 2), with user bytes in the immediate's upper 24 bits (naaice_set_immediate).
  stack.deliver_imm(c, encode_call_imm(2, 0xABCDEF));
  step();
  EXPECT_EQ(stack.sent.back().data, std::vector<std::uint8_t>(24, 6));
  EXPECT_EQ(stack.sent.back().wr.imm, 0u);
}

TEST_F(NaaServerTest, UpstreamErrorsAsUpstreamDecodesThem) {
  NaaConfig cfg;
  cfg.memory_per_host = 1 << 20;
  cfg.max_regions = 2;
  make(cfg);
  const ConnId c = connect_host();
  // MRSP errors: each a 4-byte MSG_MR_ERR with the Solicited Event bit.
  struct Case {
    AdvertiseRequest req;
    std::uint8_t code;
  };
  const std::vector<Case> cases = {
      {upstream_request({{kIn, 64}, {kIn, 64}, {kIn | kOut, 64}}), 0x03},  // 3 > max 2
      {upstream_request({{kIn, 1 << 20}, {kIn | kOut, 16}}), 0x02},        // 2nd at 1 MiB: beyond
      {upstream_request({{kIn | kOut, 2 << 20}}), 0x01},                   // 0 + 2 MiB > 1 MiB
  };
  for (const Case& k : cases) {
    stack.deliver_send(c, bytes(k.req));
    step();
    EXPECT_EQ(std::get<ErrorMsg>(last_mrsp(c)).code, k.code);
    EXPECT_EQ(stack.sent.back().data.size(), 4u);
    EXPECT_TRUE(stack.sent.back().wr.solicited);
  }
  // Then a request that fits, and call errors: a zero-length WRITE_WITH_IMM whose immediate
  // has the status in bits 8..15 (ntohl(imm) >> 8), solicited.
  stack.deliver_send(c, bytes(upstream_request({{kIn, 64}, {kIn | kOut, 64}})));
  step();
  ASSERT_TRUE(std::holds_alternative<Advertise>(last_mrsp(c)));
  stack.deliver_imm(c, encode_call_imm(0x77, 0));
  step();
  EXPECT_EQ(stack.sent.back().wr.op, Op::kWriteImm);
  EXPECT_EQ(stack.sent.back().wr.imm, 0x1000u);
  EXPECT_EQ(stack.sent.back().wr.imm >> 8, kRpcUnknownFunction);
  EXPECT_EQ(stack.sent.back().wr.length, 0u);
  EXPECT_EQ(stack.sent.back().wr.remote_addr, 0x200000u);  // the OUTPUT region
  EXPECT_TRUE(stack.sent.back().wr.solicited);
  // A kernel's own check: vector_add wants 3 parameters.
  stack.deliver_imm(c, encode_call_imm(kFnVectorAdd, 0));
  step();
  EXPECT_EQ(stack.sent.back().wr.imm >> 8, kRpcBadParamCount);
  // Function code 0: the host's error message (htonl(0)); and 0x80 alone: nothing to run,
  // nothing answered.
  const std::size_t before = stack.sent.size();
  stack.deliver_imm(c, 0);
  stack.deliver_imm(c, 0x80);
  step();
  EXPECT_EQ(stack.sent.size(), before);
  EXPECT_EQ(server->hosts(), 1u);
}

TEST_F(NaaServerTest, UpstreamHostWithoutOutputStillGetsItsAnswer) {
  // No OUTPUT region (upstream's software NAA posts an empty list then): the status alone, as
  // a zero-length WRITE_WITH_IMM to the first region.
  const ConnId c = connect_host();
  stack.deliver_send(c, bytes(upstream_request({{kIn, 64}, {kIn, 64}})));
  step();
  stack.deliver_imm(c, encode_call_imm(3, 0));
  step();
  EXPECT_EQ(stack.sent.back().wr.op, Op::kWriteImm);
  EXPECT_EQ(stack.sent.back().wr.length, 0u);
  EXPECT_EQ(stack.sent.back().wr.imm, 0u);
  EXPECT_EQ(stack.sent.back().wr.remote_addr, 0x100000u);
  EXPECT_TRUE(stack.sent.back().wr.solicited);
}

TEST_F(NaaServerTest, UpstreamInternalRegionsAreNotParameters) {
  // An internal region (flag 0x01, no host address): allocated on the NAA, not advertised, not
  // a kernel parameter, never written back.
  const ConnId c = connect_host();
  AdvertiseRequest q = upstream_request({{kIn | kOut, 16}});
  // Flagged OUTPUT as well, by a confused (or hostile) host: still never written anywhere.
  q.regions.insert(q.regions.begin(),
                   AdvReqEntry{kMrFlagInternal | kOut, 0x10000, 0xdead0000, 9, 4096});
  stack.deliver_send(c, bytes(q));
  step();
  const auto adv = std::get<Advertise>(last_mrsp(c));
  ASSERT_EQ(adv.regions.size(), 1u);
  const std::size_t before = stack.sent.size();
  stack.deliver_imm(c, encode_call_imm(1, 0));
  step();
  ASSERT_EQ(stack.sent.size(), before + 1);
  ASSERT_EQ(stack.sent.back().data, std::vector<std::uint8_t>(16, 1));
  EXPECT_EQ(stack.sent.back().wr.remote_addr, 0x100000u);
  // Every bit set in the immediate: function 0x7f, not in the table: status 0x10, answered.
  stack.deliver_imm(c, 0xFFFFFFFF);
  step();
  EXPECT_EQ(stack.sent.back().wr.imm, status_imm(kRpcUnknownFunction));
  EXPECT_EQ(server->hosts(), 1u);
}

TEST_F(NaaServerTest, AHostCannotFloodTheLog) {
  // Hostile: thousands of calls of an unknown function, of function 0, and failing MRSP
  // requests, each a small packet. Every one is answered and counted, but the log (printf and
  // fflush on the poll loop, a disk behind it) takes a bounded number of lines per host.
  const ConnId c = connect_host();
  stack.deliver_send(c, bytes(upstream_request({{kIn, 64}, {kIn | kOut, 64}})));
  step();
  ASSERT_TRUE(std::holds_alternative<Advertise>(last_mrsp(c)));
  testing::internal::CaptureStdout();
  for (int i = 0; i < 2000; ++i) {
    stack.deliver_imm(c, i % 2 ? encode_call_imm(0x77, 0) : 0);
    step();
  }
  for (int i = 0; i < 500; ++i) {
    stack.deliver_send(c, bytes(upstream_request({{kIn | kOut, 1u << 30}})));
    step();
  }
  const std::string out = testing::internal::GetCapturedStdout();
  const auto lines = std::count(out.begin(), out.end(), '\n');
  EXPECT_LE(lines, 40) << out.substr(0, 400);
  EXPECT_EQ(server->stats().statuses.at(kRpcUnknownFunction), 1000u);
  EXPECT_EQ(server->stats().mrsp_errors.at(0x01), 500u);
  EXPECT_EQ(server->hosts(), 1u);
  // The suppression is counted, and said once.
  EXPECT_NE(out.find("not logged"), std::string::npos) << out.substr(0, 400);
  EXPECT_GT(server->stats().log_suppressed, 0u);
}

TEST_F(NaaServerTest, SeedLayoutAnswersAreSolicitedToo) {
  const ConnId c = connect_host();
  stack.deliver_send(c, bytes(request({64})));
  step();
  EXPECT_TRUE(stack.sent.back().wr.solicited);
  const auto adv = std::get<Advertise>(last_mrsp(c));
  std::uint8_t meta[8];
  wire::store_be64(meta, 0x100000);
  stack.remote_write(adv.regions[0].rkey, adv.regions[0].addr, meta, 8);
  stack.deliver_imm(c, kFnIncrement);
  step();
  EXPECT_EQ(stack.sent.back().wr.op, Op::kWriteImm);
  EXPECT_EQ(stack.sent.back().wr.imm, 0u);
  EXPECT_TRUE(stack.sent.back().wr.solicited);
}

}  // namespace
}  // namespace roce::naa
