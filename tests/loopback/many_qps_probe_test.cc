// The tail-loss probe with many QPs (issue 33): roce-perf's 10,000-QP row sent thousands of
// probes with no loss at all, each QP's round trip growing with what the other QPs had queued
// ahead of it. The model here is the two appliances' poll loops on a clock of their own each
// (deterministic, in memory): the requester's run() takes time per packet it writes, so a QP
// at the end of a full ring leaves long after the poll's clock was read, and the receive side
// takes the ACKs in bursts of at most 128 per poll, as port::PollLoop does. Without loss such
// a run must send no probe; with a real tail loss among the QPs the probe must still find it.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <vector>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {
using namespace roce::engine;

struct LoopModel {
  std::uint32_t qps = 10000;
  std::uint32_t depth = 2;
  std::uint64_t messages = 100000;   ///< completions to wait for (after the first pass)
  std::uint64_t req_cpu_ns = 1500;   ///< requester: per request packet written
  std::uint64_t ack_cpu_ns = 300;    ///< requester: per ACK received (and its completion)
  std::uint64_t resp_cpu_ns = 1000;  ///< responder: per request packet received
  std::uint64_t link_ns = 2000;      ///< one way
  /// The responder's loop loses the CPU for stall_ns every stall_every_ns (0: never), as a
  /// vCPU does on a busy host.
  std::uint64_t stall_ns = 3'000'000, stall_every_ns = 10'000'000;
  /// Drops the request frame `n` (counted from 0, all QPs) when it returns true.
  std::function<bool(std::uint64_t)> drop;
};

struct ModelResult {
  std::uint64_t completed = 0, probes = 0, deferred = 0, timeouts = 0, retransmitted = 0;
  std::uint64_t requests = 0;
};

ModelResult run_model(const LoopModel& m) {
  EngineConfig ca = Loopback::default_config(0), cb = Loopback::default_config(1);
  ca.max_qps = cb.max_qps = m.qps + 16;
  LoopbackOptions lo;
  lo.record = false;
  Loopback lb(lo, ca, cb);
  Engine& a = lb.a();
  Engine& b = lb.b();
  RcOptions o;
  o.mtu = Mtu::k1024;
  o.timeout = 14;  // roce-perf's 67 ms
  o.cap = {m.depth + 1, 4, 1, 1, 0};
  Endpoint ea{&a, a.alloc_pd(), nullptr, nullptr, nullptr, nullptr};
  Endpoint eb{&b, b.alloc_pd(), nullptr, nullptr, nullptr, nullptr};
  ea.scq = a.create_cq(m.qps * (m.depth + 1) + 64);
  ea.rcq = a.create_cq(64);
  eb.scq = b.create_cq(64);
  eb.rcq = b.create_cq(64);
  struct Q {
    Qp* qp = nullptr;
    SendWr wr{};
    Sge sge{};
    std::uint32_t out = 0;
  };
  std::vector<Q> qs(m.qps);
  // One 4 KiB source and destination shared by every QP: the model times the protocol, and
  // 80 MB of buffers would only slow the test.
  Buffer src = make_buffer(a, ea.pd, 4096, 1);
  Buffer dst = make_buffer(b, eb.pd, 4096, 2);
  std::vector<std::uint32_t> ready;
  for (std::uint32_t i = 0; i < m.qps; ++i) {
    Q& q = qs[i];
    q.qp = connect_on(lb, ea, eb, o).first.qp;
    q.sge = src.sge();
    q.wr = make_wr(i, &q.sge, dst);
    ready.push_back(i);
  }
  struct InFlight {
    std::uint64_t at;
    std::vector<std::uint8_t> f;
  };
  std::deque<InFlight> to_b, to_a;
  std::uint64_t ta = lb.now(), tb = lb.now(), sent = 0;
  std::uint64_t next_stall = lb.now() + m.stall_every_ns;
  const Stats& s = a.stats();
  const std::uint64_t probes0 = s.get(Counter::kRetransmitProbes);
  ModelResult r;
  std::vector<Wc> wc(64);
  constexpr std::size_t kRxPerPoll = 128;  // port::PollLoop: 4 bursts of 32
  while (r.completed < m.messages) {
    if (ta <= tb) {
      // The requester's poll: post, run() (each frame leaves as it is written), receive.
      for (const std::uint32_t i : ready)
        while (qs[i].out < m.depth && a.post_send(qs[i].qp, &qs[i].wr, nullptr) == kOk) ++qs[i].out;
      ready.clear();
      const std::uint64_t t0 = ta;
      for (auto& f : drain(a, ta)) {
        ta += m.req_cpu_ns;
        ++r.requests;
        if (!m.drop || !m.drop(sent++)) to_b.push_back({ta + m.link_ns, std::move(f)});
      }
      std::size_t n = 0;
      for (; n < kRxPerPoll && !to_a.empty() && to_a.front().at <= ta; ++n) {
        a.receive(to_a.front().f, ta);
        to_a.pop_front();
        ta += m.ack_cpu_ns;
      }
      for (int k = 64; k == 64;) {
        k = a.poll_cq(ea.scq, 64, wc.data());
        for (int j = 0; j < k; ++j) {
          EXPECT_EQ(wc[static_cast<std::size_t>(j)].status, WcStatus::kSuccess);
          const auto i = static_cast<std::uint32_t>(wc[static_cast<std::size_t>(j)].wr_id);
          if (qs[i].out-- == m.depth) ready.push_back(i);
          ++r.completed;
        }
      }
      if (ta == t0) {  // idle: to the next frame or timer
        std::uint64_t next = ta + 1000;
        if (!to_a.empty()) next = std::min(next, std::max(to_a.front().at, ta + 100));
        ta = next;
      }
    } else {
      if (m.stall_every_ns != 0 && tb >= next_stall) {
        tb += m.stall_ns;
        next_stall += m.stall_every_ns;
      }
      const std::uint64_t t0 = tb;
      for (std::size_t n = 0; n < kRxPerPoll && !to_b.empty() && to_b.front().at <= tb; ++n) {
        b.receive(to_b.front().f, tb);
        to_b.pop_front();
        tb += m.resp_cpu_ns;
      }
      for (auto& f : drain(b, tb)) to_a.push_back({tb + m.link_ns, std::move(f)});
      if (tb == t0)
        tb = to_b.empty() ? std::max(tb + 1000, ta) : std::max(to_b.front().at, tb + 100);
    }
    if (ta > lb.now() + 60'000'000'000ull) break;  // a minute of model time: stuck
  }
  r.probes = s.get(Counter::kRetransmitProbes) - probes0;
  r.deferred = s.get(Counter::kProbesDeferred);
  r.timeouts = s.get(Counter::kRetransmitTimeouts);
  r.retransmitted = s.get(Counter::kRetransmittedPackets);
  return r;
}

void print(const char* what, const ModelResult& r) {
  std::printf(
      "%s: %llu messages, %llu requests, %llu probes (%llu deferred), %llu timeouts, "
      "%llu sent again\n",
      what, static_cast<unsigned long long>(r.completed),
      static_cast<unsigned long long>(r.requests), static_cast<unsigned long long>(r.probes),
      static_cast<unsigned long long>(r.deferred), static_cast<unsigned long long>(r.timeouts),
      static_cast<unsigned long long>(r.retransmitted));
}

// 10,000 QPs, two 4 KiB WRITEs in flight on each, the responder's loop losing the CPU for
// 3 ms every 10 ms: every QP's round trip is a few hundred microseconds to a millisecond, and
// the QPs whose packets wait behind a stall see three times their estimate. Nothing is lost,
// so nothing may be sent again (before the probe's test of the other QPs' progress: 1,342
// probes here, 411 at 1,000 QPs).
TEST(ManyQpsProbe, TenThousandQpsWithoutLossSendNoProbe) {
  LoopModel m;
  const ModelResult r = run_model(m);
  print("10,000 QPs, no loss", r);
  EXPECT_GE(r.completed, m.messages);
  EXPECT_EQ(r.probes, 0u);
  EXPECT_GT(r.deferred, 0u) << "the stalls put probe deadlines behind the queue";
  EXPECT_EQ(r.timeouts, 0u);
  EXPECT_EQ(r.retransmitted, 0u);
}

// The same run with a real tail loss on two QPs: QP 5000's last packet (its 8th: two
// 4-packet WRITEs per turn), and all eight of QP 6000's. Later QPs' ACKs show the path moving,
// so the probes go out: QP 5000's first one sends its 5th packet again (the 5th to 7th asked
// for no ACK), whose answer shows them arrived, the second its 8th; QP 6000's answer (its
// first packet filled) orders a go-back-N for the other seven, which goes out ahead of the
// 10,000 QPs' new work (before, it waited behind them past the ACK timeout: 2 timeouts).
TEST(ManyQpsProbe, ATailLostAmongTenThousandQpsIsStillProbed) {
  LoopModel m;
  m.drop = [](std::uint64_t n) { return n == 8 * 5000 + 7 || (n >= 8 * 6000 && n < 8 * 6001); };
  const ModelResult r = run_model(m);
  print("10,000 QPs, 9 frames lost", r);
  EXPECT_GE(r.completed, m.messages);
  EXPECT_EQ(r.probes, 3u);
  EXPECT_EQ(r.timeouts, 0u);
  EXPECT_EQ(r.retransmitted, 3u + 7u);
}

}  // namespace
}  // namespace roce::test
