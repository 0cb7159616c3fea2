// A fixed-iteration driver for counting the engine's instructions per packet under callgrind
// (tests/perf/engine_instructions.sh): the loop of roce-engine-bench's BM_Write (two engines
// joined in memory, A posts RDMA WRITEs of --size bytes with --depth in flight, path MTU 4096),
// without the benchmark library, for a fixed number of messages. Each side's share of an
// iteration is one non-inlined function (instr_*), so that their inclusive costs split the
// instructions between the requester, the responder and the completer exactly; the measured
// loop is instr_measure (run callgrind with --collect-atstart=no
// --toggle-collect=instr_measure), after a warm-up (instr_warmup) that is not collected.
//
// Usage: roce-engine-instr [--messages N] [--size B] [--depth D] [--warmup N]
// Prints one JSON line of the packet counts of the measured loop.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "tests/support/loopback.h"

using namespace roce::engine;
using roce::test::Buffer;
using roce::test::Endpoint;
using roce::test::Loopback;
using roce::test::LoopbackOptions;
using roce::test::RcOptions;

namespace instr {

struct Run {
  explicit Run(const LoopbackOptions& lo) : lb(lo) {}
  Loopback lb;
  Endpoint a, b;
  std::vector<SendWr> wrs;
  std::vector<std::span<const std::uint8_t>> frames;
  Sge sge{};
  std::uint64_t now = 1'000'000;
  int outstanding = 0;
  std::uint64_t done = 0;
  Wc wc[64]{};
};

}  // namespace instr
using instr::Run;

// One function per share of an iteration (external linkage, never inlined: callgrind names
// them as they are written here).
extern "C" {
void instr_post(Run& r, int depth);
void instr_requester_run(Run& r);
void instr_hand_over(Run& r, Engine& from);
void instr_responder_receive(Run& r);
void instr_responder_run(Run& r);
void instr_completer_receive(Run& r);
void instr_poll(Run& r);
void instr_iteration(Run& r, int depth);
void instr_warmup(Run& r, int depth, std::uint64_t messages);
void instr_measure(Run& r, int depth, std::uint64_t messages);
[[gnu::noinline]] void instr_post(Run& r, int depth) {
  while (r.outstanding < depth) {
    if (r.lb.a().post_send(r.a.qp, &r.wrs[static_cast<std::size_t>(r.outstanding)], nullptr) != kOk)
      break;
    ++r.outstanding;
  }
}
[[gnu::noinline]] void instr_requester_run(Run& r) { r.lb.a().run(r.now); }
// The port's part: the frames an engine queued, taken from its ring (they stay in place until
// that engine's next run()), so that the receiving side's share is receive() alone.
[[gnu::noinline]] void instr_hand_over(Run& r, Engine& from) {
  r.frames.clear();
  from.drain_tx([&](std::span<const std::uint8_t> f) { r.frames.push_back(f); });
}
[[gnu::noinline]] void instr_responder_receive(Run& r) {
  for (const auto f : r.frames) r.lb.b().receive(f, r.now);
}
[[gnu::noinline]] void instr_responder_run(Run& r) { r.lb.b().run(r.now); }
[[gnu::noinline]] void instr_completer_receive(Run& r) {
  for (const auto f : r.frames) r.lb.a().receive(f, r.now);
}
[[gnu::noinline]] void instr_poll(Run& r) {
  const int n = r.lb.a().poll_cq(r.a.scq, 64, r.wc);
  r.outstanding -= n;
  r.done += static_cast<std::uint64_t>(n);
}
[[gnu::noinline]] void instr_iteration(Run& r, int depth) {
  instr_post(r, depth);
  r.now += 100;
  instr_requester_run(r);
  instr_hand_over(r, r.lb.a());
  instr_responder_receive(r);
  instr_responder_run(r);
  instr_hand_over(r, r.lb.b());
  instr_completer_receive(r);
  instr_poll(r);
}
[[gnu::noinline]] void instr_warmup(Run& r, int depth, std::uint64_t messages) {
  const std::uint64_t until = r.done + messages;
  while (r.done < until) instr_iteration(r, depth);
}
[[gnu::noinline]] void instr_measure(Run& r, int depth, std::uint64_t messages) {
  const std::uint64_t until = r.done + messages;
  while (r.done < until) instr_iteration(r, depth);
}
}

int main(int argc, char** argv) {
  std::uint64_t messages = 20000, warmup = 2000;
  std::size_t size = 8;
  int depth = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view k = argv[i];
    const std::uint64_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (k == "--messages")
      messages = v;
    else if (k == "--size")
      size = v;
    else if (k == "--depth")
      depth = static_cast<int>(v);
    else if (k == "--warmup")
      warmup = v;
    else {
      std::fprintf(stderr, "usage: %s [--messages N] [--size B] [--depth D] [--warmup N]\n",
                   argv[0]);
      return 2;
    }
  }
  if (depth < 1 || depth > 256 || messages == 0) {
    std::fprintf(stderr, "--depth 1..256, --messages > 0\n");
    return 2;
  }
  LoopbackOptions lo;
  lo.record = false;
  Run r(lo);
  RcOptions o;
  o.mtu = Mtu::k4096;
  o.cap = {256, 16, 1, 1, 0};
  std::tie(r.a, r.b) = connect(r.lb, o);
  Buffer src = roce::test::make_buffer(r.lb.a(), r.a.pd, size, 1);
  Buffer dst = roce::test::make_buffer(r.lb.b(), r.b.pd, size, 2);
  r.sge = src.sge();
  r.wrs.resize(static_cast<std::size_t>(depth));
  r.frames.reserve(4096);
  for (auto& w : r.wrs) {
    w.opcode = WrOpcode::kWrite;
    w.sg_list = &r.sge;
    w.num_sge = 1;
    w.send_flags = kSendSignaled;
    w.rdma = {dst.addr(), dst.mr->key};
  }
  instr_warmup(r, depth, warmup);  // not collected (callgrind --toggle-collect=instr_measure)
  const Stats& sa = r.lb.a().stats();
  const Stats& sb = r.lb.b().stats();
  const std::uint64_t a_tx = sa.get(Counter::kTxFrames), b_rx = sb.get(Counter::kRxFrames);
  const std::uint64_t b_tx = sb.get(Counter::kTxFrames), a_rx = sa.get(Counter::kRxFrames);
  const std::uint64_t done0 = r.done, retx0 = sa.get(Counter::kRetransmittedPackets);
  instr_measure(r, depth, messages);
  const std::uint64_t retx = sa.get(Counter::kRetransmittedPackets) - retx0;
  std::printf(
      "{\"messages\": %llu, \"size\": %zu, \"depth\": %d, \"requests_sent\": %llu, "
      "\"requests_received\": %llu, \"acks_sent\": %llu, \"acks_received\": %llu, "
      "\"retransmitted\": %llu, \"warmup_messages\": %llu}\n",
      static_cast<unsigned long long>(r.done - done0), size, depth,
      static_cast<unsigned long long>(sa.get(Counter::kTxFrames) - a_tx),
      static_cast<unsigned long long>(sb.get(Counter::kRxFrames) - b_rx),
      static_cast<unsigned long long>(sb.get(Counter::kTxFrames) - b_tx),
      static_cast<unsigned long long>(sa.get(Counter::kRxFrames) - a_rx),
      static_cast<unsigned long long>(retx), static_cast<unsigned long long>(done0));
  return 0;
}
