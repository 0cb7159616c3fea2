// Selective READ retry (issue 32): a requester that lost READ responses asks again only for the
// responses it is missing, from the first missing PSN of that READ, and never for a READ whose
// responses all arrived. Two engines over the in-memory wire, the fault injector on the
// responses (B to A), seeded, and every READ response frame B sends counted against the
// frames the READs need.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;
using wire::Opcode;

bool is_read_response(Opcode op) {
  return op == Opcode::kRcReadResponseFirst || op == Opcode::kRcReadResponseMiddle ||
         op == Opcode::kRcReadResponseLast || op == Opcode::kRcReadResponseOnly;
}

struct StreamResult {
  std::uint64_t responses_sent = 0;    ///< READ response frames B put on the wire
  std::uint64_t responses_needed = 0;  ///< what the READs need without loss
  std::uint64_t read_requests = 0;     ///< READ request frames A put on the wire
  std::size_t completed = 0;
  bool data_ok = false;
};

// `reads` READs of `size` bytes each, `depth` outstanding, path MTU 1024, faults `b2a` on the
// responses (and `a2b` on the requests).
StreamResult read_stream(const FaultPolicy& b2a, std::uint32_t reads, std::uint32_t size,
                         std::uint32_t depth, const FaultPolicy& a2b = {}) {
  LoopbackOptions lo;
  lo.b2a = b2a;
  lo.a2b = a2b;
  Loopback lb(lo);
  RcOptions o;
  o.cap = {depth + 1, 16, 1, 1, 64};
  auto [a, b] = connect(lb, o);
  Buffer remote = make_buffer(lb.b(), b.pd, std::size_t{reads} * size, 7);
  Buffer local = make_buffer(lb.a(), a.pd, std::size_t{reads} * size, 9);
  StreamResult r;
  std::uint32_t posted = 0;
  std::vector<Wc> wcs;
  wcs.reserve(reads);
  Wc wc[16];
  const auto post_more = [&] {
    while (posted < reads && posted - wcs.size() < depth) {
      Sge s = local.sge(std::uint64_t{posted} * size, size);
      SendWr w = make_wr(posted, &s, remote, std::uint64_t{posted} * size, WrOpcode::kRead);
      if (lb.a().post_send(a.qp, &w, nullptr) != kOk) break;
      ++posted;
    }
  };
  post_more();
  lb.run_until(
      [&] {
        for (int n; (n = a.scq->poll(16, wc)) > 0;)
          for (int i = 0; i < n; ++i) wcs.push_back(wc[i]);
        post_more();
        return wcs.size() >= reads;
      },
      60'000'000'000ull);
  lb.settle();
  r.completed = wcs.size();
  r.data_ok = local.bytes == remote.bytes;
  for (std::size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess) << "READ " << wcs[i].wr_id;
    EXPECT_EQ(wcs[i].wr_id, i) << "completions in post order";
  }
  for (const auto& rec : lb.records()) {
    if (rec.from == 1 && is_read_response(rec.opcode)) ++r.responses_sent;
    if (rec.from == 0 && rec.opcode == Opcode::kRcReadRequest) ++r.read_requests;
  }
  r.responses_needed = std::uint64_t{reads} * ((size + 1023) / 1024);
  const auto a_ = [&](Counter c) { return static_cast<unsigned long long>(lb.a().stats().get(c)); };
  const auto b_ = [&](Counter c) { return static_cast<unsigned long long>(lb.b().stats().get(c)); };
  std::printf(
      "[ read stream ] %u READs of %u B, depth %u: %llu response frames sent, %llu needed "
      "(%.2fx); %llu READ requests; A: %llu re-requests for %llu bytes, %llu go-back-N, "
      "%llu timeouts; B: %llu duplicates, %llu dropped\n",
      reads, size, depth, static_cast<unsigned long long>(r.responses_sent),
      static_cast<unsigned long long>(r.responses_needed),
      static_cast<double>(r.responses_sent) / static_cast<double>(r.responses_needed),
      static_cast<unsigned long long>(r.read_requests), a_(Counter::kReadReRequests),
      a_(Counter::kReadReRequestBytes), a_(Counter::kRetries), a_(Counter::kRetransmitTimeouts),
      b_(Counter::kDuplicateRequests), b_(Counter::kRxDropDupRead) + b_(Counter::kRespQueueFull));
  return r;
}

TEST(ReadRetry, TwoPercentLossOnResponses) {
  FaultPolicy f;
  f.drop_rate = 0.02;
  f.seed = 32;
  const StreamResult r = read_stream(f, 400, 65536, 16);
  EXPECT_EQ(r.completed, 400u);
  EXPECT_TRUE(r.data_ok);
  EXPECT_LE(r.responses_sent * 10, r.responses_needed * 12) << "at most 1.2x the frames needed";
}

}  // namespace
}  // namespace roce::test
