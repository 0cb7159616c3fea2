// Semantics beyond the data path: atomics, RNR, access violations, retry exhaustion, local
// errors, SRQ, UD, fast-registration and invalidation, fences, max_rd_atomic, unsignaled
// completions, inline data, PSN wrap, many QPs, and a 1 GiB message.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;

void post_recv(Engine& e, Qp* qp, std::uint64_t id, const Sge& s) {
  RecvWr r;
  r.wr_id = id;
  r.sg_list = &s;
  r.num_sge = 1;
  ASSERT_EQ(e.post_recv(qp, &r, nullptr), kOk);
}

// ---- atomics --------------------------------------------------------------------------------

TEST(Atomics, CompareSwapAndFetchAdd) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer remote = make_buffer(lb.b(), b.pd, 64, 0);
  std::uint64_t v = 100;
  std::memcpy(remote.bytes.data() + 8, &v, 8);
  Buffer result = make_buffer(lb.a(), a.pd, 64, 0);

  Sge s = result.sge(0, 8);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::kFetchAdd;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  wr.atomic = {remote.addr() + 8, remote.mr->key, 5, 0};
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wc[0].opcode, WcOpcode::kFetchAdd);
  std::uint64_t got, now_remote;
  std::memcpy(&got, result.bytes.data(), 8);
  std::memcpy(&now_remote, remote.bytes.data() + 8, 8);
  EXPECT_EQ(got, 100u);
  EXPECT_EQ(now_remote, 105u);

  // Compare-and-swap: a miss returns the value and changes nothing; a hit swaps.
  Sge s2 = result.sge(8, 8);
  wr.wr_id = 2;
  wr.opcode = WrOpcode::kCmpSwap;
  wr.sg_list = &s2;
  wr.atomic = {remote.addr() + 8, remote.mr->key, 7, 999};
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  SendWr wr3 = wr;
  Sge s3 = result.sge(16, 8);
  wr3.wr_id = 3;
  wr3.sg_list = &s3;
  wr3.atomic = {remote.addr() + 8, remote.mr->key, 105, 4242};
  ASSERT_EQ(lb.a().post_send(a.qp, &wr3, nullptr), kOk);
  wc = wait_wcs(lb, a.scq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 2u);
  EXPECT_EQ(wc[1].wr_id, 3u);
  std::memcpy(&got, result.bytes.data() + 8, 8);
  EXPECT_EQ(got, 105u);
  std::memcpy(&got, result.bytes.data() + 16, 8);
  EXPECT_EQ(got, 105u);
  std::memcpy(&now_remote, remote.bytes.data() + 8, 8);
  EXPECT_EQ(now_remote, 4242u);
}

TEST(Atomics, MisalignedIsInvalidRequest) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer remote = make_buffer(lb.b(), b.pd, 64, 3);
  const auto before = remote.bytes;
  Buffer result = make_buffer(lb.a(), a.pd, 8, 0);
  Sge s = result.sge();
  SendWr wr;
  wr.opcode = WrOpcode::kFetchAdd;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.atomic = {remote.addr() + 4, remote.mr->key, 1, 0};
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(remote.bytes, before);
  EXPECT_EQ(a.qp->state, QpState::kErr);
}

TEST(Atomics, DuplicatedPacketsApplyOnce) {
  // Every frame in both directions is delivered twice, and some are reordered: each atomic must
  // still be executed exactly once and return its first result.
  LoopbackOptions lo;
  lo.a2b.duplicate_rate = 1.0;
  lo.b2a.duplicate_rate = 1.0;
  lo.a2b.reorder_rate = 0.3;
  lo.a2b.reorder_window = 3;
  lo.a2b.seed = 7;
  Loopback lb(lo);
  auto [a, b] = connect(lb);
  Buffer counter = make_buffer(lb.b(), b.pd, 8, 0);
  std::memset(counter.bytes.data(), 0, 8);
  Buffer results = make_buffer(lb.a(), a.pd, 8 * 50, 0);
  std::vector<Sge> sges(50);
  std::vector<SendWr> wrs(50);
  for (int i = 0; i < 50; ++i) {
    sges[i] = results.sge(8 * i, 8);
    wrs[i].wr_id = static_cast<std::uint64_t>(i);
    wrs[i].opcode = WrOpcode::kFetchAdd;
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].send_flags = kSendSignaled;
    wrs[i].atomic = {counter.addr(), counter.mr->key, 1, 0};
    if (i) wrs[i - 1].next = &wrs[i];
  }
  ASSERT_EQ(lb.a().post_send(a.qp, &wrs[0], nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 50);
  ASSERT_EQ(wc.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
    std::uint64_t r;
    std::memcpy(&r, results.bytes.data() + 8 * i, 8);
    EXPECT_EQ(r, static_cast<std::uint64_t>(i)) << "fetch-add " << i << " returned " << r;
  }
  std::uint64_t final_value;
  std::memcpy(&final_value, counter.bytes.data(), 8);
  EXPECT_EQ(final_value, 50u) << "an atomic was applied twice";
  EXPECT_GT(lb.b().stats().get(Counter::kDuplicateRequests), 0u);
}

// ---- RNR ------------------------------------------------------------------------------------

TEST(Rnr, RecoversWhenAReceiveIsPosted) {
  Loopback lb;
  RcOptions o;
  o.min_rnr_timer = 4;  // 40 us
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, 3000, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 3000, 2);
  Sge s = src.sge();
  SendWr wr = make_wr(9, &s, dst, 0, WrOpcode::kSend);
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  // Let the requester hit the empty receive queue a few times.
  lb.run_until([] { return false; }, 200'000);
  EXPECT_GE(lb.b().stats().get(Counter::kRnrNakSent), 2u);
  EXPECT_EQ(lb.b().stats().get(Counter::kRnrNakSent), lb.a().stats().get(Counter::kRnrNakRcvd));
  post_recv(lb.b(), b.qp, 1, dst.sge());
  auto wc = wait_wcs(lb, a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  auto rwc = wait_wcs(lb, b.rcq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].byte_len, 3000u);
  EXPECT_EQ(dst.bytes, src.bytes);
  // The RNR NAKs carried the responder's min_rnr_timer.
  bool saw = false;
  for (const auto& r : lb.records())
    if (r.from == 1 && r.syndrome == 0x24) saw = true;
  EXPECT_TRUE(saw);
}

TEST(Rnr, RetryExhaustedFlushesAndErrors) {
  Loopback lb;
  RcOptions o;
  o.rnr_retry = 2;
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, 100, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 100, 2);
  Sge s = src.sge();
  SendWr w1 = make_wr(1, &s, dst, 0, WrOpcode::kSend);
  SendWr w2 = make_wr(2, &s, dst, 0, WrOpcode::kWrite);
  w1.next = &w2;
  ASSERT_EQ(lb.a().post_send(a.qp, &w1, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kRnrRetryExcErr);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(a.qp->state, QpState::kErr);
  EXPECT_EQ(lb.a().stats().get(Counter::kRnrNakRcvd), 3u) << "first try + rnr_retry retries";
}

// ---- access violations ----------------------------------------------------------------------

struct Violation {
  const char* name;
  WrOpcode op;
  std::uint32_t mr_access;  // access of the remote MR
  std::int64_t va_offset;   // added to the remote VA
  std::uint32_t rkey_xor;   // applied to the rkey
  bool other_pd;            // remote MR on another PD
  std::uint32_t qp_access;  // responder QP access flags
  WcStatus expect;
};

class AccessViolation : public ::testing::TestWithParam<Violation> {};

TEST_P(AccessViolation, RemoteMemoryUntouchedAndBothSidesReport) {
  const Violation& v = GetParam();
  Loopback lb;
  RcOptions o;
  o.access = v.qp_access;
  auto [a, b] = connect(lb, o);
  Pd* pd = v.other_pd ? lb.b().alloc_pd() : b.pd;
  Buffer remote = make_buffer(lb.b(), pd, 4096, 5, v.mr_access);
  const auto remote_before = remote.bytes;
  Buffer local = make_buffer(lb.a(), a.pd, 4096, 6);
  Buffer recv_buf = make_buffer(lb.b(), b.pd, 64, 0);
  post_recv(lb.b(), b.qp, 500, recv_buf.sge());
  Sge s = local.sge(0, v.op == WrOpcode::kFetchAdd ? 8 : 2048);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = v.op;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  const std::uint64_t va = remote.addr() + static_cast<std::uint64_t>(v.va_offset);
  wr.rdma = {va, remote.mr->key ^ v.rkey_xor};
  wr.atomic = {va, remote.mr->key ^ v.rkey_xor, 1, 0};
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(to_string(wc[0].status), to_string(v.expect));
  EXPECT_EQ(remote.bytes, remote_before) << "remote memory was written";
  EXPECT_EQ(a.qp->state, QpState::kErr);
  EXPECT_EQ(b.qp->state, QpState::kErr) << "class C errors move the responder to error";
  auto rwc = wait_wcs(lb, b.rcq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].wr_id, 500u);
  EXPECT_EQ(rwc[0].status, WcStatus::kWrFlushErr);
}

constexpr std::uint32_t kAll =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
INSTANTIATE_TEST_SUITE_P(
    Violations, AccessViolation,
    testing::Values(Violation{"write_bad_rkey", WrOpcode::kWrite, kAll, 0, 0x100, false, kAll,
                              WcStatus::kRemAccessErr},
                    Violation{"write_past_end", WrOpcode::kWrite, kAll, 4096 - 1000, 0, false, kAll,
                              WcStatus::kRemAccessErr},
                    Violation{"write_before_start", WrOpcode::kWrite, kAll, -8, 0, false, kAll,
                              WcStatus::kRemAccessErr},
                    Violation{"write_mr_read_only", WrOpcode::kWrite,
                              kAccessLocalWrite | kAccessRemoteRead, 0, 0, false, kAll,
                              WcStatus::kRemAccessErr},
                    Violation{"write_other_pd", WrOpcode::kWrite, kAll, 0, 0, true, kAll,
                              WcStatus::kRemAccessErr},
                    Violation{"read_bad_rkey", WrOpcode::kRead, kAll, 0, 0x1, false, kAll,
                              WcStatus::kRemAccessErr},
                    Violation{"read_mr_write_only", WrOpcode::kRead,
                              kAccessLocalWrite | kAccessRemoteWrite, 0, 0, false, kAll,
                              WcStatus::kRemAccessErr},
                    Violation{"read_past_end", WrOpcode::kRead, kAll, 4000, 0, false, kAll,
                              WcStatus::kRemAccessErr},
                    Violation{"atomic_no_atomic_access", WrOpcode::kFetchAdd,
                              kAccessLocalWrite | kAccessRemoteWrite, 0, 0, false, kAll,
                              WcStatus::kRemAccessErr},
                    Violation{"atomic_past_end", WrOpcode::kFetchAdd, kAll, 4096, 0, false, kAll,
                              WcStatus::kRemAccessErr},
                    Violation{"write_qp_not_enabled", WrOpcode::kWrite, kAll, 0, 0, false,
                              kAccessLocalWrite, WcStatus::kRemInvReqErr},
                    Violation{"read_qp_not_enabled", WrOpcode::kRead, kAll, 0, 0, false,
                              kAccessLocalWrite | kAccessRemoteWrite, WcStatus::kRemInvReqErr}),
    [](const auto& i) { return std::string(i.param.name); });

TEST(Errors, SendLongerThanReceiveBuffer) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 2000, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 2000, 2);
  const auto before = dst.bytes;
  post_recv(lb.b(), b.qp, 7, dst.sge(0, 500));
  Sge s = src.sge();
  SendWr wr = make_wr(1, &s, dst, 0, WrOpcode::kSend);
  ASSERT_EQ(lb.a().post_send(a.qp, &wr, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kRemInvReqErr);
  auto rwc = wait_wcs(lb, b.rcq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].status, WcStatus::kLocLenErr);
  EXPECT_TRUE(std::equal(before.begin() + 500, before.end(), dst.bytes.begin() + 500));
}

TEST(Errors, BadLocalKeyIsLocalProtectionError) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 100, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 100, 2);
  Sge s = src.sge();
  s.lkey ^= 0x300;
  SendWr w1 = make_wr(1, &s, dst);
  Sge ok = src.sge();
  SendWr w2 = make_wr(2, &ok, dst);
  w1.next = &w2;
  ASSERT_EQ(lb.a().post_send(a.qp, &w1, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, WcStatus::kLocProtErr);
  EXPECT_EQ(wc[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(a.qp->state, QpState::kErr);
  // A later post on the errored QP completes at once with a flush error.
  SendWr w3 = make_wr(3, &ok, dst);
  ASSERT_EQ(lb.a().post_send(a.qp, &w3, nullptr), kOk);
  Wc out;
  ASSERT_EQ(lb.a().poll_cq(a.scq, 1, &out), 1);
  EXPECT_EQ(out.wr_id, 3u);
  EXPECT_EQ(out.status, WcStatus::kWrFlushErr);
}

TEST(Errors, PostSendReportsBadWr) {
  Loopback lb;
  RcOptions o;
  o.cap.max_send_wr = 4;
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, 100, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 100, 2);
  Sge s[8];
  for (auto& x : s) x = src.sge(0, 10);
  SendWr wrs[6];
  for (int i = 0; i < 6; ++i) {
    wrs[i] = make_wr(static_cast<std::uint64_t>(i), s, dst);
    if (i) wrs[i - 1].next = &wrs[i];
  }
  wrs[1].num_sge = 5;  // more than max_send_sge (4)
  const SendWr* bad = nullptr;
  EXPECT_EQ(lb.a().post_send(a.qp, &wrs[0], &bad), kErrInval);
  EXPECT_EQ(bad, &wrs[1]) << "the first WR was posted, the second refused";
  wrs[1].num_sge = 1;
  bad = nullptr;
  EXPECT_EQ(lb.a().post_send(a.qp, &wrs[1], &bad), kErrNoMem) << "SQ of 4 has room for 3 more";
  EXPECT_EQ(bad, &wrs[4]);
  auto wc = wait_wcs(lb, a.scq, 4);
  EXPECT_EQ(wc.size(), 4u);
  // Inline data larger than max_inline_data, and atomics with a wrong length, are refused.
  SendWr in = make_wr(9, s, dst);
  Sge big = src.sge(0, 100);
  in.sg_list = &big;
  in.send_flags |= kSendInline;
  EXPECT_EQ(lb.a().post_send(a.qp, &in, &bad), kOk);  // 100 <= 128
  o.cap.max_inline_data = 16;
  SendWr fa;
  fa.opcode = WrOpcode::kFetchAdd;
  fa.sg_list = &big;
  fa.num_sge = 1;
  EXPECT_EQ(lb.a().post_send(a.qp, &fa, &bad), kErrInval);
  EXPECT_EQ(bad, &fa);
}

// ---- retry exhaustion -----------------------------------------------------------------------

TEST(Retry, ExhaustedOnDeadLink) {
  LoopbackOptions lo;
  lo.a2b.drop_rate = 1.0;
  Loopback lb(lo);
  RcOptions o;
  o.retry_cnt = 3;
  o.timeout = 8;  // 1.05 ms
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, 5000, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 5000, 2);
  Sge s = src.sge();
  SendWr w1 = make_wr(1, &s, dst), w2 = make_wr(2, &s, dst), w3 = make_wr(3, &s, dst);
  w2.send_flags = 0;  // flushed WRs complete even when unsignaled
  w1.next = &w2;
  w2.next = &w3;
  const std::uint64_t t0 = lb.now();
  ASSERT_EQ(lb.a().post_send(a.qp, &w1, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 3, 60'000'000'000ull);
  ASSERT_EQ(wc.size(), 3u);
  EXPECT_EQ(wc[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(wc[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(wc[2].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(a.qp->state, QpState::kErr);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitTimeouts), 4u) << "1 try + retry_cnt retries";
  // 4 timeouts of 4.096 us x 2^8 each, microsecond-granular.
  const double elapsed_us = static_cast<double>(lb.now() - t0) / 1000.0;
  EXPECT_GE(elapsed_us, 4 * 1048.576);
  EXPECT_LT(elapsed_us, 4 * 1048.576 + 100);
  EXPECT_EQ(std::vector<std::uint8_t>(dst.bytes), make_buffer(lb.b(), b.pd, 5000, 2).bytes);
}

TEST(Retry, ProbesDoNotKeepADeadLinkAlive) {
  // With a long ACK timeout, probes (1 ms, doubling) go out in between, but they neither
  // restart the timeout nor spend the budget: retry_cnt + 1 timeouts still end the QP.
  LoopbackOptions lo;
  lo.a2b.drop_rate = 1.0;
  Loopback lb(lo);
  RcOptions o;
  o.retry_cnt = 2;
  o.timeout = 14;  // 67.1 ms
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, 5000, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 5000, 2);
  Sge s = src.sge();
  SendWr w = make_wr(1, &s, dst);
  const std::uint64_t t0 = lb.now();
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1, 60'000'000'000ull);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(lb.a().stats().get(Counter::kRetransmitTimeouts), 3u);
  EXPECT_GE(lb.a().stats().get(Counter::kRetransmitProbes), 6u) << "1, 2, 4, 8, 16, 32 ms";
  const double elapsed_ms = static_cast<double>(lb.now() - t0) / 1e6;
  EXPECT_GE(elapsed_ms, 3 * 67.1);
  EXPECT_LT(elapsed_ms, 3 * 67.1 + 1);
}

// ---- SRQ, UD, fast registration, fences, rd_atomic, unsignaled, inline -------------------------

TEST(Srq, TwoQpsShareOneReceiveQueue) {
  Loopback lb;
  RcOptions o;
  o.use_srq_b = true;
  auto [a1, b1] = connect(lb, o);
  auto [a2, b2] = connect_on(lb, a1, b1, o);
  Buffer dst = make_buffer(lb.b(), b1.pd, 4 * 256, 0);
  for (int i = 0; i < 4; ++i) {
    Sge s = dst.sge(static_cast<std::uint64_t>(i) * 256, 256);
    RecvWr r;
    r.wr_id = 100 + static_cast<std::uint64_t>(i);
    r.sg_list = &s;
    r.num_sge = 1;
    ASSERT_EQ(lb.b().post_srq_recv(b1.srq, &r, nullptr), kOk);
  }
  Buffer src = make_buffer(lb.a(), a1.pd, 256, 9);
  Sge s = src.sge(0, 200);
  SendWr w = make_wr(1, &s, dst, 0, WrOpcode::kSend);
  ASSERT_EQ(lb.a().post_send(a1.qp, &w, nullptr), kOk);
  ASSERT_EQ(lb.a().post_send(a2.qp, &w, nullptr), kOk);
  ASSERT_EQ(lb.a().post_send(a1.qp, &w, nullptr), kOk);
  auto rwc = wait_wcs(lb, b1.rcq, 3);
  ASSERT_EQ(rwc.size(), 3u);
  std::map<std::uint32_t, int> per_qp;
  for (const auto& wc : rwc) {
    EXPECT_EQ(wc.status, WcStatus::kSuccess);
    ++per_qp[wc.qp_num];
  }
  EXPECT_EQ(per_qp[b1.qp->qpn], 2);
  EXPECT_EQ(per_qp[b2.qp->qpn], 1);
}

TEST(Ud, DatagramsWithGrhAndQkey) {
  Loopback lb;
  Engine& ea = lb.a();
  Engine& eb = lb.b();
  Pd* pa = ea.alloc_pd();
  Pd* pb = eb.alloc_pd();
  Cq* ca = ea.create_cq(64);
  Cq* cb = eb.create_cq(64);
  QpCap cap{16, 16, 2, 2, 0};
  Qp* qa = ea.create_qp(pa, QpType::kUd, ca, ca, cap);
  Qp* qb = eb.create_qp(pb, QpType::kUd, cb, cb, cap);
  for (auto [e, q] : {std::pair{&ea, qa}, std::pair{&eb, qb}}) {
    QpAttr at;
    at.qp_state = QpState::kInit;
    at.qkey = 0x11111111;
    ASSERT_EQ(e->modify_qp(q, at, kQpState | kQpPkeyIndex | kQpPort | kQpQkey), kOk);
    at.qp_state = QpState::kRtr;
    ASSERT_EQ(e->modify_qp(q, at, kQpState), kOk);
    at.qp_state = QpState::kRts;
    ASSERT_EQ(e->modify_qp(q, at, kQpState | kQpSqPsn), kOk);
  }
  Buffer rb = make_buffer(eb, pb, 40 + 1000, 0);
  post_recv(eb, qb, 5, rb.sge());
  Buffer sb = make_buffer(ea, pa, 1000, 4);
  AddressVector av;
  av.dmac = eb.config().mac;
  av.dgid = wire::ipv4_mapped(eb.config().ipv4);
  Sge s = sb.sge();
  SendWr wr;
  wr.wr_id = 8;
  wr.opcode = WrOpcode::kSendImm;
  wr.imm_data = 0xABCD;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  wr.ud = {&av, qb->qpn, 0x11111111};
  ASSERT_EQ(ea.post_send(qa, &wr, nullptr), kOk);
  auto swc = wait_wcs(lb, ca, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, WcStatus::kSuccess);
  auto rwc = wait_wcs(lb, cb, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rwc[0].byte_len, 1040u);
  EXPECT_EQ(rwc[0].src_qp, qa->qpn);
  EXPECT_EQ(rwc[0].imm_data, 0xABCDu);
  EXPECT_TRUE(rwc[0].wc_flags & kWcGrh);
  EXPECT_TRUE(std::equal(sb.bytes.begin(), sb.bytes.end(), rb.bytes.begin() + 40));
  // The GRH area holds 20 zero bytes and the IPv4 header (source 198.18.0.1).
  EXPECT_EQ(rb.bytes[20], 0x45);
  EXPECT_EQ(wire::load_be32(rb.bytes.data() + 20 + 12), ea.config().ipv4.v);
  // A wrong Q_Key is dropped and counted.
  post_recv(eb, qb, 6, rb.sge());
  wr.ud.remote_qkey = 0x22222222;
  ASSERT_EQ(ea.post_send(qa, &wr, nullptr), kOk);
  lb.settle();
  EXPECT_EQ(eb.stats().get(Counter::kRxDropQkey), 1u);
  Wc out;
  EXPECT_EQ(eb.poll_cq(cb, 1, &out), 0);
}

TEST(FastReg, RegisterSendWithInvalidateAndLocalInvalidate) {
  Loopback lb;
  auto [a, b] = connect(lb);
  // B fast-registers a region and advertises its rkey; A writes into it, then invalidates it
  // remotely with SEND with invalidate; a later WRITE with that rkey must fail.
  std::vector<std::uint8_t> region(8192, 0);
  Mr* fr = lb.b().alloc_mr(b.pd, 1 << 20);
  ASSERT_NE(fr, nullptr);
  SendWr reg;
  reg.wr_id = 50;
  reg.opcode = WrOpcode::kRegMr;
  reg.send_flags = kSendSignaled;
  reg.reg = {fr->key, 0x5A, reinterpret_cast<std::uint64_t>(region.data()), region.size(),
             kAccessLocalWrite | kAccessRemoteWrite};
  Buffer dummy = make_buffer(lb.b(), b.pd, 16, 0);
  Sge ds = dummy.sge();
  reg.sg_list = &ds;
  reg.num_sge = 0;
  ASSERT_EQ(lb.b().post_send(b.qp, &reg, nullptr), kOk);
  auto bw = wait_wcs(lb, b.scq, 1);
  ASSERT_EQ(bw.size(), 1u);
  EXPECT_EQ(bw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(bw[0].opcode, WcOpcode::kRegMr);
  const std::uint32_t rkey = fr->key;
  EXPECT_EQ(rkey & 0xFF, 0x5Au);

  Buffer src = make_buffer(lb.a(), a.pd, 8192, 3);
  Sge s = src.sge();
  SendWr w;
  w.wr_id = 1;
  w.opcode = WrOpcode::kWrite;
  w.sg_list = &s;
  w.num_sge = 1;
  w.send_flags = kSendSignaled;
  w.rdma = {reinterpret_cast<std::uint64_t>(region.data()), rkey};
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  ASSERT_EQ(wait_wcs(lb, a.scq, 1).at(0).status, WcStatus::kSuccess);
  EXPECT_EQ(region, src.bytes);

  Buffer rbuf = make_buffer(lb.b(), b.pd, 16, 0);
  post_recv(lb.b(), b.qp, 60, rbuf.sge());
  Sge none{};
  SendWr inv;
  inv.wr_id = 2;
  inv.opcode = WrOpcode::kSendInv;
  inv.invalidate_rkey = rkey;
  inv.sg_list = &none;
  inv.num_sge = 0;
  inv.send_flags = kSendSignaled;
  ASSERT_EQ(lb.a().post_send(a.qp, &inv, nullptr), kOk);
  ASSERT_EQ(wait_wcs(lb, a.scq, 1).at(0).status, WcStatus::kSuccess);
  auto rw = wait_wcs(lb, b.rcq, 1);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_TRUE(rw[0].wc_flags & kWcWithInv);
  EXPECT_EQ(rw[0].invalidated_rkey, rkey);
  EXPECT_EQ(fr->state, MrState::kFree);

  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  EXPECT_EQ(wait_wcs(lb, a.scq, 1).at(0).status, WcStatus::kRemAccessErr);
}

TEST(FastReg, LocalInvalidate) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer buf = make_buffer(lb.a(), a.pd, 64, 1);
  SendWr li;
  li.wr_id = 3;
  li.opcode = WrOpcode::kLocalInv;
  li.invalidate_rkey = buf.mr->key;
  li.send_flags = kSendSignaled;
  ASSERT_EQ(lb.a().post_send(a.qp, &li, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wc[0].opcode, WcOpcode::kLocalInv);
  EXPECT_EQ(buf.mr->state, MrState::kFree);
}

TEST(Ordering, FenceWaitsForEarlierReads) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer remote = make_buffer(lb.b(), b.pd, 64 * 1024, 1);
  Buffer local = make_buffer(lb.a(), a.pd, 64 * 1024, 2);
  Buffer rbuf = make_buffer(lb.b(), b.pd, 64, 0);
  post_recv(lb.b(), b.qp, 1, rbuf.sge());
  Sge rs = local.sge();
  SendWr rd = make_wr(1, &rs, remote, 0, WrOpcode::kRead);
  Sge ss = local.sge(0, 8);
  SendWr send = make_wr(2, &ss, remote, 0, WrOpcode::kSend);
  send.send_flags |= kSendFence;
  rd.next = &send;
  ASSERT_EQ(lb.a().post_send(a.qp, &rd, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 2);
  ASSERT_EQ(wc.size(), 2u);
  // On the wire, the fenced SEND left A only after the last READ response arrived at A.
  std::uint64_t last_resp = 0, send_t = 0;
  for (const auto& r : lb.records()) {
    if (r.from == 1 && (r.opcode == wire::Opcode::kRcReadResponseLast)) last_resp = r.t;
    if (r.from == 0 && r.opcode == wire::Opcode::kRcSendOnly) send_t = r.t;
  }
  EXPECT_GT(send_t, last_resp);
  EXPECT_EQ(local.bytes, remote.bytes);
}

TEST(Ordering, MaxRdAtomicLimitsOutstandingReads) {
  Loopback lb;
  RcOptions o;
  o.max_rd_atomic = 2;
  auto [a, b] = connect(lb, o);
  Buffer remote = make_buffer(lb.b(), b.pd, 8 * 4096, 1);
  Buffer local = make_buffer(lb.a(), a.pd, 8 * 4096, 2);
  std::vector<Sge> sges(8);
  std::vector<SendWr> wrs(8);
  for (int i = 0; i < 8; ++i) {
    sges[i] = local.sge(static_cast<std::uint64_t>(i) * 4096, 4096);
    wrs[i] = make_wr(static_cast<std::uint64_t>(i), &sges[i], remote,
                     static_cast<std::uint64_t>(i) * 4096, WrOpcode::kRead);
    if (i) wrs[i - 1].next = &wrs[i];
  }
  ASSERT_EQ(lb.a().post_send(a.qp, &wrs[0], nullptr), kOk);
  ASSERT_EQ(wait_wcs(lb, a.scq, 8).size(), 8u);
  EXPECT_EQ(local.bytes, remote.bytes);
  // Count READ requests sent minus READs completed (last response seen) at each moment.
  int outstanding = 0, max_out = 0;
  for (const auto& r : lb.records()) {
    if (r.from == 0 && r.opcode == wire::Opcode::kRcReadRequest)
      max_out = std::max(max_out, ++outstanding);
    if (r.from == 1 && (r.opcode == wire::Opcode::kRcReadResponseLast ||
                        r.opcode == wire::Opcode::kRcReadResponseOnly))
      --outstanding;
  }
  EXPECT_EQ(max_out, 2);
}

TEST(Completions, UnsignaledProduceNoCompletion) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 4096, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 4096, 2);
  Sge s = src.sge(0, 100);
  SendWr wrs[10];
  for (int i = 0; i < 10; ++i) {
    wrs[i] = make_wr(static_cast<std::uint64_t>(i), &s, dst, static_cast<std::uint64_t>(i) * 100);
    wrs[i].send_flags = i == 9 ? std::uint32_t{kSendSignaled} : 0u;
    if (i) wrs[i - 1].next = &wrs[i];
  }
  ASSERT_EQ(lb.a().post_send(a.qp, &wrs[0], nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1);
  lb.settle();
  Wc more;
  EXPECT_EQ(lb.a().poll_cq(a.scq, 1, &more), 0);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 9u);
  for (int i = 0; i < 10; ++i)
    EXPECT_TRUE(
        std::equal(src.bytes.begin(), src.bytes.begin() + 100, dst.bytes.begin() + i * 100));
}

TEST(Completions, InlineDataIsCopiedAtPost) {
  Loopback lb;
  auto [a, b] = connect(lb);
  std::vector<std::uint8_t> data(100, 0x77);
  Buffer dst = make_buffer(lb.b(), b.pd, 100, 0);
  Sge s{reinterpret_cast<std::uint64_t>(data.data()), 100, 0};  // no lkey needed inline
  SendWr w = make_wr(1, &s, dst);
  w.send_flags |= kSendInline;
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  std::fill(data.begin(), data.end(), 0x11);  // reuse the buffer at once
  ASSERT_EQ(wait_wcs(lb, a.scq, 1).at(0).status, WcStatus::kSuccess);
  EXPECT_EQ(dst.bytes, std::vector<std::uint8_t>(100, 0x77));
}

// ---- PSN wrap, many QPs, 1 GiB -----------------------------------------------------------------

TEST(Scale, PsnWrapAcross2To24) {
  Loopback lb;
  RcOptions o;
  o.psn_a = 0xFFFF00;
  o.psn_b = 0xFFFFFE;
  o.mtu = Mtu::k256;
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, 256 * 1024, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 256 * 1024, 2);
  Buffer back = make_buffer(lb.a(), a.pd, 256 * 1024, 3);
  Sge s = src.sge();
  SendWr w = make_wr(1, &s, dst);  // 1024 packets: PSNs 0xFFFF00 .. 0x0002FF
  Sge r = back.sge();
  SendWr rd = make_wr(2, &r, dst, 0, WrOpcode::kRead);
  w.next = &rd;
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wc[1].status, WcStatus::kSuccess);
  EXPECT_EQ(dst.bytes, src.bytes);
  EXPECT_EQ(back.bytes, src.bytes);
  EXPECT_EQ(a.qp->req.next_psn, wire::Psn(0xFFFF00 + 2048));
}

TEST(Scale, ManyQpsAtOnce) {
  Loopback lb;
  RcOptions o;
  o.cap = {16, 16, 1, 1, 0};
  auto [a0, b0] = connect(lb, o);
  constexpr int kQps = 300;
  std::vector<std::pair<Endpoint, Endpoint>> pairs{{a0, b0}};
  for (int i = 1; i < kQps; ++i) pairs.push_back(connect_on(lb, a0, b0, o));
  Buffer src = make_buffer(lb.a(), a0.pd, kQps * 2048, 1);
  Buffer dst = make_buffer(lb.b(), b0.pd, kQps * 2048, 2);
  Buffer rd = make_buffer(lb.a(), a0.pd, kQps * 2048, 3);
  std::vector<Sge> ws(kQps), rs(kQps);
  std::vector<SendWr> w(kQps), r(kQps);
  for (int i = 0; i < kQps; ++i) {
    const std::uint64_t off = static_cast<std::uint64_t>(i) * 2048;
    ws[i] = src.sge(off, 2048);
    rs[i] = rd.sge(off, 2048);
    w[i] = make_wr(static_cast<std::uint64_t>(i), &ws[i], dst, off);
    r[i] = make_wr(static_cast<std::uint64_t>(kQps + i), &rs[i], dst, off, WrOpcode::kRead);
    w[i].next = &r[i];
    ASSERT_EQ(lb.a().post_send(pairs[static_cast<std::size_t>(i)].first.qp, &w[i], nullptr), kOk);
  }
  auto wc = wait_wcs(lb, a0.scq, 2 * kQps);
  ASSERT_EQ(wc.size(), 2u * kQps);
  for (const auto& c : wc) EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(dst.bytes, src.bytes);
  EXPECT_EQ(rd.bytes, src.bytes);
  EXPECT_EQ(lb.a().qp_count(), static_cast<std::size_t>(kQps));
}

TEST(Scale, OneGibWrite) {
  Loopback lb;
  RcOptions o;
  o.mtu = Mtu::k4096;
  auto [a, b] = connect(lb, o);
  constexpr std::size_t kLen = std::size_t{1} << 30;
  std::vector<std::uint8_t> src(kLen), dst(kLen, 0);
  for (std::size_t i = 0; i < kLen; i += 4096)
    std::memset(src.data() + i, static_cast<int>(i >> 12), 4096);
  src[kLen - 1] = 0xEE;
  Mr* smr = lb.a().reg_mr(a.pd, src.data(), kLen, kAccessLocalWrite);
  Mr* dmr = lb.b().reg_mr(b.pd, dst.data(), kLen, kAccessLocalWrite | kAccessRemoteWrite);
  Sge s{reinterpret_cast<std::uint64_t>(src.data()), static_cast<std::uint32_t>(kLen), smr->key};
  SendWr w;
  w.wr_id = 1;
  w.opcode = WrOpcode::kWrite;
  w.sg_list = &s;
  w.num_sge = 1;
  w.send_flags = kSendSignaled;
  w.rdma = {reinterpret_cast<std::uint64_t>(dst.data()), dmr->key};
  ASSERT_EQ(lb.a().post_send(a.qp, &w, nullptr), kOk);
  auto wc = wait_wcs(lb, a.scq, 1, 600'000'000'000ull);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wc[0].byte_len, kLen);
  EXPECT_TRUE(src == dst);
}

// ---- QP state machine -----------------------------------------------------------------------

TEST(StateMachine, TransitionsAndRequiredAttributes) {
  Loopback lb;
  Engine& e = lb.a();
  Pd* pd = e.alloc_pd();
  Cq* cq = e.create_cq(16);
  Qp* qp = e.create_qp(pd, QpType::kRc, cq, cq, QpCap{});
  ASSERT_NE(qp, nullptr);
  QpAttr at;
  at.qp_state = QpState::kRtr;
  EXPECT_EQ(e.modify_qp(qp, at, kQpState), kErrInval) << "RESET -> RTR is not a transition";
  at.qp_state = QpState::kInit;
  EXPECT_EQ(e.modify_qp(qp, at, kQpState | kQpPort), kErrInval) << "missing access flags";
  EXPECT_EQ(e.modify_qp(qp, at, kQpState | kQpPort | kQpPkeyIndex | kQpAccessFlags | kQpSqPsn),
            kErrInval)
      << "SQ PSN is not an INIT attribute";
  ASSERT_EQ(e.modify_qp(qp, at, kQpState | kQpPort | kQpPkeyIndex | kQpAccessFlags), kOk);
  EXPECT_EQ(qp->state, QpState::kInit);
  at.qp_state = QpState::kRtr;
  at.path_mtu = Mtu::k1024;
  EXPECT_EQ(e.modify_qp(qp, at, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn), kErrInval)
      << "RC RTR needs max_dest_rd_atomic and min_rnr_timer";
  at.path_mtu = static_cast<Mtu>(7);
  EXPECT_EQ(e.modify_qp(qp, at,
                        kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                            kQpMinRnrTimer),
            kErrInval)
      << "bad MTU value";
  at.path_mtu = Mtu::k4096;
  ASSERT_EQ(e.modify_qp(qp, at,
                        kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                            kQpMinRnrTimer),
            kOk);
  at.qp_state = QpState::kRts;
  at.retry_cnt = 9;
  EXPECT_EQ(
      e.modify_qp(qp, at,
                  kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic),
      kErrInval)
      << "retry_cnt above 7";
  at.retry_cnt = 7;
  ASSERT_EQ(
      e.modify_qp(qp, at,
                  kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic),
      kOk);
  at.qp_state = QpState::kSqd;
  ASSERT_EQ(e.modify_qp(qp, at, kQpState), kOk);
  at.qp_state = QpState::kRts;
  ASSERT_EQ(e.modify_qp(qp, at, kQpState | kQpMinRnrTimer), kOk);
  at.qp_state = QpState::kErr;
  ASSERT_EQ(e.modify_qp(qp, at, kQpState), kOk);
  at.qp_state = QpState::kRts;
  EXPECT_EQ(e.modify_qp(qp, at, kQpState), kErrInval) << "ERR only goes to RESET";
  at.qp_state = QpState::kReset;
  ASSERT_EQ(e.modify_qp(qp, at, kQpState), kOk);
  EXPECT_EQ(qp->state, QpState::kReset);
  // Posting in RESET is refused with bad_wr.
  SendWr w;
  const SendWr* bad = nullptr;
  EXPECT_EQ(e.post_send(qp, &w, &bad), kErrInval);
  EXPECT_EQ(bad, &w);
  EXPECT_EQ(e.destroy_qp(qp), kOk);
  EXPECT_EQ(e.qp_count(), 0u);
  EXPECT_EQ(e.dealloc_pd(pd), kOk);
}

TEST(Keys, AreNeitherSequentialNorReused) {
  Loopback lb;
  Pd* pd = lb.a().alloc_pd();
  std::vector<std::uint8_t> mem(64);
  std::set<std::uint32_t> keys;
  std::uint32_t prev = 0;
  int sequential = 0;
  for (int i = 0; i < 1000; ++i) {
    Mr* mr = lb.a().reg_mr(pd, mem.data(), mem.size(), kAccessLocalWrite);
    ASSERT_TRUE(keys.insert(mr->key).second);
    if (mr->key == prev + 1 || mr->key == prev + 0x100) ++sequential;
    prev = mr->key;
  }
  EXPECT_LT(sequential, 3);
  EXPECT_EQ(lb.a().dealloc_pd(pd), kErrBusy) << "MRs still use the PD";
}

}  // namespace
}  // namespace roce::test

namespace roce::test {
namespace {

using namespace roce::engine;

TEST(Uc, WritesAndSendsWithoutAcksAndLossDropsTheMessage) {
  LoopbackOptions lo;
  // Drop the second packet of the second SEND (PSNs: send 1 = 0..2, send 2 = 3..5).
  lo.a2b.drop_psn.push_back({Engine::kFirstQpn, 0x123456 + 4, 1, -1});
  Loopback lb(lo);
  RcOptions o;
  o.type = QpType::kUc;
  o.access = kAccessLocalWrite | kAccessRemoteWrite;
  auto [a, b] = connect(lb, o);
  Buffer src = make_buffer(lb.a(), a.pd, 3 * 3000, 1);
  Buffer dst = make_buffer(lb.b(), b.pd, 3 * 3000, 2);
  for (int i = 0; i < 2; ++i) {
    Sge rs = dst.sge(static_cast<std::uint64_t>(i) * 3000, 3000);
    RecvWr r;
    r.wr_id = 10 + static_cast<std::uint64_t>(i);
    r.sg_list = &rs;
    r.num_sge = 1;
    ASSERT_EQ(lb.b().post_recv(b.qp, &r, nullptr), kOk);
  }
  Sge s[3];
  SendWr w[3];
  for (int i = 0; i < 3; ++i) {
    s[i] = src.sge(static_cast<std::uint64_t>(i) * 3000, 3000);
    w[i].wr_id = static_cast<std::uint64_t>(i);
    w[i].opcode = WrOpcode::kSend;
    w[i].sg_list = &s[i];
    w[i].num_sge = 1;
    w[i].send_flags = kSendSignaled;
    if (i) w[i - 1].next = &w[i];
  }
  ASSERT_EQ(lb.a().post_send(a.qp, &w[0], nullptr), kOk);
  auto swc = wait_wcs(lb, a.scq, 3);
  ASSERT_EQ(swc.size(), 3u) << "UC sends complete when sent";
  for (const auto& c : swc) EXPECT_EQ(c.status, WcStatus::kSuccess);
  lb.settle();
  Wc rwc[4];
  ASSERT_EQ(lb.b().poll_cq(b.rcq, 4, rwc), 2) << "the damaged message is lost, the others land";
  EXPECT_EQ(rwc[0].wr_id, 10u);
  EXPECT_EQ(rwc[1].wr_id, 11u) << "the receive WQE of the lost message is reused";
  EXPECT_TRUE(std::equal(src.bytes.begin(), src.bytes.begin() + 3000, dst.bytes.begin()));
  EXPECT_TRUE(std::equal(src.bytes.begin() + 6000, src.bytes.end(), dst.bytes.begin() + 3000));
  EXPECT_EQ(lb.b().stats().get(Counter::kAckSent), 0u) << "UC never acknowledges";
  EXPECT_EQ(lb.b().stats().get(Counter::kSeqErrNakSent), 0u);
  EXPECT_EQ(a.qp->state, QpState::kRts);
}

}  // namespace
}  // namespace roce::test

namespace roce::test {
namespace {

// RESET -> INIT -> RTR -> RTS of a connected QP, as rdma-core's tests/test_mr.py restate_qps.
void restate(Endpoint& me, const Endpoint& peer, std::uint32_t my_psn, std::uint32_t peer_psn) {
  Engine& e = *me.eng;
  QpAttr a;
  a.qp_state = QpState::kReset;
  ASSERT_EQ(e.modify_qp(me.qp, a, kQpState), kOk);
  a.qp_state = QpState::kInit;
  a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite;
  a.port_num = 1;
  ASSERT_EQ(e.modify_qp(me.qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags), kOk);
  a.qp_state = QpState::kRtr;
  a.path_mtu = Mtu::k1024;
  a.dest_qp_num = peer.qp->qpn;
  a.rq_psn = peer_psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah.dmac = peer.eng->config().mac;
  a.ah.dgid = wire::ipv4_mapped(peer.eng->config().ipv4);
  ASSERT_EQ(e.modify_qp(me.qp, a,
                        kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                            kQpMinRnrTimer),
            kOk);
  a.qp_state = QpState::kRts;
  a.sq_psn = my_psn;
  a.timeout = 10;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  ASSERT_EQ(
      e.modify_qp(me.qp, a,
                  kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic),
      kOk);
}

// QPs taken through RESET back to RTS send and receive again, and the reset takes the QP's
// completions out of its CQs. The reset left the QP marked
// as in the send list (so nothing was ever sent again) and emptied the responder's SGE
// storage (the next receive wrote through a null pointer).
TEST(Reset, ReceivesAfterResetAndReconnect) {
  Loopback lb;
  auto [a, b] = connect(lb);
  Buffer src = make_buffer(lb.a(), a.pd, 3000, 1), dst = make_buffer(lb.b(), b.pd, 3000, 2);
  // A receive flushed by the error state: its completion goes with the reset (mlx5 cleans a
  // reset QP's CQEs), or the program would poll it first after restarting the QP.
  const Sge old_rs = dst.sge();
  RecvWr old_r;
  old_r.wr_id = 99;
  old_r.sg_list = &old_rs;
  old_r.num_sge = 1;
  const RecvWr* old_bad = nullptr;
  ASSERT_EQ(lb.b().post_recv(b.qp, &old_r, &old_bad), kOk);
  QpAttr err;
  err.qp_state = QpState::kErr;
  ASSERT_EQ(lb.b().modify_qp(b.qp, err, kQpState), kOk);
  EXPECT_EQ(b.rcq->size(), 1u) << "the flushed receive";
  restate(a, b, 0x100, 0x200);
  restate(b, a, 0x200, 0x100);
  EXPECT_EQ(b.rcq->size(), 0u) << "the reset left the flushed completion in the CQ";
  const Sge rs = dst.sge();
  RecvWr r;
  r.wr_id = 7;
  r.sg_list = &rs;
  r.num_sge = 1;
  const RecvWr* rbad = nullptr;
  ASSERT_EQ(lb.b().post_recv(b.qp, &r, &rbad), kOk);
  const Sge ss = src.sge();
  SendWr w = make_wr(8, &ss, dst, 0, WrOpcode::kSend);
  const SendWr* bad = nullptr;
  ASSERT_EQ(lb.a().post_send(a.qp, &w, &bad), kOk);
  const auto wcs = wait_wcs(lb, b.rcq, 1);
  const auto sent = wait_wcs(lb, a.scq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, WcStatus::kSuccess);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[0].byte_len, 3000u);
  EXPECT_EQ(dst.bytes, src.bytes);
}

}  // namespace
}  // namespace roce::test
