// Randomized soak: mixed WRITE, READ, SEND and atomic traffic on several QPs over a wire that
// drops, duplicates, reorders and corrupts, checking every byte and every completion against a
// model, while both sides deregister and re-register the regions of finished rounds. Seeded
// and bounded in time:
//   ROCE_SOAK_SECONDS (default 20), ROCE_SOAK_SEED (default 1), ROCE_SOAK_LOSS (default 0.01),
//   ROCE_SOAK_REREG (default 1)
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "tests/support/loopback.h"

namespace roce::test {
namespace {

using namespace roce::engine;

double env_or(const char* name, double def) {
  const char* v = std::getenv(name);
  return v ? std::atof(v) : def;
}

struct Pair {
  Endpoint a, b;
  Buffer src;                       // A: data to send/write
  Buffer back;                      // A: READ destination
  Buffer results;                   // A: atomic results
  Buffer region;                    // B: WRITE/READ target
  Buffer inbox;                     // B: receive buffers
  Buffer counter;                   // B: atomic target
  std::vector<std::uint8_t> model;  // expected content of region
  std::uint64_t counter_model = 0;
  Mr* fr = nullptr;                  // A: a fast-registration MR, registered and invalidated
  std::vector<std::uint8_t> fr_mem;  //    by REG_MR / LOCAL_INV work requests in the mix
  bool fr_registered = false;
  std::uint8_t fr_variant = 0;
};

enum class Kind { kWrite, kRead, kSend, kAtomic, kLocal };
struct Pending {
  Kind kind;
  std::uint64_t off = 0, len = 0;
  std::uint64_t dst = 0;  ///< READ: where in `back` the data lands (one slot per WQE)
  std::vector<std::uint8_t> expect;
  std::uint64_t expect_orig = 0;
};

// A new registration of the same memory (new key), then the old one deregistered.
void rereg_buffer(Engine& e, Pd* pd, Buffer& b) {
  Mr* fresh = e.reg_mr(pd, b.bytes.data(), b.bytes.size(), b.mr->access);
  ASSERT_NE(fresh, nullptr);
  ASSERT_EQ(e.dereg_mr(b.mr), kOk);
  b.mr = fresh;
}

TEST(Soak, MixedTrafficOverALossyWire) {
  const double seconds = env_or("ROCE_SOAK_SECONDS", 20);
  const auto seed = static_cast<std::uint64_t>(env_or("ROCE_SOAK_SEED", 1));
  const double loss = env_or("ROCE_SOAK_LOSS", 0.01);
  std::printf("soak: %.0f s, seed %llu, loss/dup/reorder %.3f\n", seconds,
              static_cast<unsigned long long>(seed), loss);
  LoopbackOptions lo;
  // ROCE_SOAK_FAULTS picks the fault kinds (default all): any of drop,dup,reorder,corrupt.
  const std::string faults = std::getenv("ROCE_SOAK_FAULTS") ? std::getenv("ROCE_SOAK_FAULTS")
                                                             : "drop,dup,reorder,corrupt";
  auto on = [&](const char* k) { return faults.find(k) != std::string::npos; };
  for (FaultPolicy* f : {&lo.a2b, &lo.b2a}) {
    f->drop_rate = on("drop") ? loss : 0;
    f->duplicate_rate = on("dup") ? loss : 0;
    f->reorder_rate = on("reorder") ? loss : 0;
    f->reorder_window = 4;
    f->corrupt_rate = on("corrupt") ? loss / 5 : 0;
  }
  lo.a2b.seed = seed * 2;
  lo.b2a.seed = seed * 2 + 1;
  lo.record = std::getenv("ROCE_SOAK_RECORD") != nullptr;
  Loopback lb(lo);
  std::mt19937_64 rng(seed);

  constexpr int kPairs = 8;
  constexpr std::size_t kRegion = 64 * 1024;
  const Mtu mtus[] = {Mtu::k256, Mtu::k512, Mtu::k1024, Mtu::k2048, Mtu::k4096};
  std::vector<Pair> pairs(kPairs);
  Endpoint base_a, base_b;
  for (int i = 0; i < kPairs; ++i) {
    RcOptions o;
    o.mtu = mtus[i % 5];
    o.timeout = 8;
    o.psn_a = static_cast<std::uint32_t>(rng()) & 0xFFFFFF;
    o.psn_b = static_cast<std::uint32_t>(rng()) & 0xFFFFFF;
    o.max_rd_atomic = 4;
    // Same PDs, but CQs of its own per pair, so completions can be matched to their QP.
    Endpoint ra = base_a, rb = base_b;
    if (i > 0) {
      ra.scq = lb.a().create_cq(256);
      ra.rcq = lb.a().create_cq(256);
      rb.scq = lb.b().create_cq(256);
      rb.rcq = lb.b().create_cq(256);
    }
    auto [a, b] = i == 0 ? connect(lb, o) : connect_on(lb, ra, rb, o);
    if (i == 0) {
      base_a = a;
      base_b = b;
    }
    Pair& p = pairs[static_cast<std::size_t>(i)];
    p.a = a;
    p.b = b;
    p.src = make_buffer(lb.a(), a.pd, kRegion, static_cast<std::uint8_t>(i));
    p.back = make_buffer(lb.a(), a.pd, 6 * (kRegion / 2), 0);
    p.results = make_buffer(lb.a(), a.pd, 8 * 64, 0);
    p.region = make_buffer(lb.b(), b.pd, kRegion, static_cast<std::uint8_t>(100 + i));
    p.inbox = make_buffer(lb.b(), b.pd, kRegion, 0);
    p.counter = make_buffer(lb.b(), b.pd, 8, 0);
    std::memset(p.counter.bytes.data(), 0, 8);
    p.model = p.region.bytes;
    p.fr_mem.resize(4096);
    p.fr = lb.a().alloc_mr(a.pd, p.fr_mem.size());
  }

  // ROCE_SOAK_REREG=0 keeps every MR for the whole run.
  const bool rereg = env_or("ROCE_SOAK_REREG", 1) != 0;
  std::uint64_t ops = 0, bytes = 0, rounds = 0, reregs = 0;
  const auto t_end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < t_end) {
    ++rounds;
    std::vector<std::vector<Pending>> pend(kPairs);
    std::vector<std::vector<Wc>> got(kPairs);
    for (int i = 0; i < kPairs; ++i) {
      Pair& p = pairs[static_cast<std::size_t>(i)];
      const int n = 1 + static_cast<int>(rng() % 6);
      std::uint64_t send_off = 0;
      int atomics = 0;
      for (int k = 0; k < n; ++k) {
        Pending pd;
        pd.kind = static_cast<Kind>(rng() % 9 == 0 ? 4 : rng() % 4);
        SendWr wr;
        Sge s;
        wr.wr_id = static_cast<std::uint64_t>(k);
        wr.send_flags = kSendSignaled;
        wr.sg_list = &s;
        wr.num_sge = 1;
        pd.len = rng() % 3 == 0 ? rng() % 64 : rng() % (kRegion / 2);
        pd.off = rng() % (kRegion - pd.len);
        switch (pd.kind) {
          case Kind::kWrite: {
            fill_pattern(p.src.bytes, static_cast<std::uint32_t>(rng()));
            // Each WQE needs its own source bytes: take them from a fresh offset.
            s = p.src.sge(0, pd.len);
            pd.expect.assign(p.src.bytes.begin(),
                             p.src.bytes.begin() + static_cast<std::ptrdiff_t>(pd.len));
            if (pd.len) std::memcpy(p.model.data() + pd.off, pd.expect.data(), pd.len);
            wr.opcode = WrOpcode::kWrite;
            wr.rdma = {p.region.addr() + pd.off, p.region.mr->key};
            // IBA 10.8.3.3: without a fence a WRITE may pass an earlier READ at the
            // responder, so a READ of the same bytes could see the new data. Fence when a READ
            // of this round is still outstanding.
            for (const auto& q : pend[static_cast<std::size_t>(i)])
              if (q.kind == Kind::kRead) wr.send_flags |= kSendFence;
            // Copy inline-like: post, then settle this WQE before the source is refilled.
            break;
          }
          case Kind::kRead:
            pd.dst = static_cast<std::uint64_t>(k) * (kRegion / 2);
            s = p.back.sge(pd.dst, pd.len);
            pd.expect.assign(p.model.begin() + static_cast<std::ptrdiff_t>(pd.off),
                             p.model.begin() + static_cast<std::ptrdiff_t>(pd.off + pd.len));
            wr.opcode = WrOpcode::kRead;
            wr.rdma = {p.region.addr() + pd.off, p.region.mr->key};
            break;
          case Kind::kSend: {
            pd.len = std::min<std::uint64_t>(pd.len, kRegion / 8);
            if (send_off + pd.len > kRegion) pd.len = 0;
            pd.off = send_off;
            send_off += pd.len;
            fill_pattern(p.src.bytes, static_cast<std::uint32_t>(rng()));
            s = p.src.sge(0, pd.len);
            pd.expect.assign(p.src.bytes.begin(),
                             p.src.bytes.begin() + static_cast<std::ptrdiff_t>(pd.len));
            Sge rs = p.inbox.sge(pd.off, pd.len);
            RecvWr r;
            r.wr_id = static_cast<std::uint64_t>(k);
            r.sg_list = &rs;
            r.num_sge = 1;
            ASSERT_EQ(lb.b().post_recv(p.b.qp, &r, nullptr), kOk);
            wr.opcode = WrOpcode::kSend;
            break;
          }
          case Kind::kLocal: {
            pd.len = 0;
            if (p.fr_registered) {
              wr.opcode = WrOpcode::kLocalInv;
              // The key the pending REG_MR gives it (its low byte is the variant).
              wr.invalidate_rkey = (p.fr->key & ~0xFFu) | p.fr_variant;
            } else {
              wr.opcode = WrOpcode::kRegMr;
              wr.reg = {p.fr->key, ++p.fr_variant, reinterpret_cast<std::uint64_t>(p.fr_mem.data()),
                        p.fr_mem.size(), kAccessLocalWrite | kAccessRemoteWrite};
            }
            wr.num_sge = 0;
            p.fr_registered = !p.fr_registered;
            break;
          }
          case Kind::kAtomic: {
            const std::uint64_t add = 1 + rng() % 1000;
            s = p.results.sge(8 * static_cast<std::uint64_t>(atomics), 8);
            pd.off = 8 * static_cast<std::uint64_t>(atomics++);
            pd.expect_orig = p.counter_model;
            p.counter_model += add;
            wr.opcode = WrOpcode::kFetchAdd;
            wr.atomic = {p.counter.addr(), p.counter.mr->key, add, 0};
            break;
          }
        }
        ASSERT_EQ(lb.a().post_send(p.a.qp, &wr, nullptr), kOk);
        // WRITE and SEND sources are reused: wait for this WQE to finish before the next.
        if (pd.kind == Kind::kWrite || pd.kind == Kind::kSend) {
          const std::uint64_t id = static_cast<std::uint64_t>(k);
          const bool ok = lb.run_until(
              [&] {
                Wc w[16];
                int m;
                while ((m = lb.a().poll_cq(p.a.scq, 16, w)) > 0)
                  got[static_cast<std::size_t>(i)].insert(got[static_cast<std::size_t>(i)].end(), w,
                                                          w + m);
                for (const auto& c : got[static_cast<std::size_t>(i)])
                  if (c.wr_id == id) return true;
                return false;
              },
              120'000'000'000ull);
          if (!ok) {
            const Qp& q = *p.a.qp;
            std::printf(
                "stuck: state %s sq_head %u next_wqe %u sq_tail %u rd_atomic_out %u "
                "comp.psn %06x next_psn %06x high %06x rnr %llu retrans %llu\n",
                std::string(to_string(q.state)).c_str(), q.sq_head, q.req.next_wqe, q.sq_tail,
                q.req.rd_atomic_out, q.comp.psn.raw(), q.req.next_psn.raw(), q.req.high_psn.raw(),
                static_cast<unsigned long long>(q.comp.rnr_deadline),
                static_cast<unsigned long long>(q.comp.retrans_deadline));
            for (std::uint32_t x = q.sq_head; x != q.sq_tail; ++x) {
              const SendWqe& w = q.sq[x % q.sq.size()];
              std::printf("  wqe %u op %d state %d flags %x len %llu psn %06x..%06x\n", x,
                          static_cast<int>(w.opcode), static_cast<int>(w.state), w.flags,
                          static_cast<unsigned long long>(w.length), w.first_psn.raw(),
                          w.last_psn.raw());
            }
            int shown = 0;
            const auto& recs = lb.records();
            for (auto it = recs.rbegin(); it != recs.rend() && shown < 40; ++it) {
              if (it->dest_qp != q.qpn && it->dest_qp != q.attr.dest_qp_num) continue;
              ++shown;
              std::printf("  t=%llu from %d op %02x psn %06x syn %d len %u%s\n",
                          static_cast<unsigned long long>(it->t), it->from, wire::raw(it->opcode),
                          it->psn, it->syndrome, it->payload_len, it->dropped ? " DROPPED" : "");
            }
          }
          ASSERT_TRUE(ok) << "round " << rounds << " qp " << i << " wr " << k;
        }
        bytes += pd.len;
        ++ops;
        pend[static_cast<std::size_t>(i)].push_back(std::move(pd));
      }
    }
    // Collect the READ and atomic completions, then check every result against the model.
    for (int i = 0; i < kPairs; ++i) {
      Pair& p = pairs[static_cast<std::size_t>(i)];
      const std::size_t want = pend[static_cast<std::size_t>(i)].size();
      auto& g = got[static_cast<std::size_t>(i)];
      lb.run_until(
          [&] {
            Wc w[16];
            int m;
            while ((m = lb.a().poll_cq(p.a.scq, 16, w)) > 0) g.insert(g.end(), w, w + m);
            return g.size() >= want;
          },
          120'000'000'000ull);
      ASSERT_EQ(g.size(), want) << "round " << rounds << " qp " << i;
      for (std::size_t c = 0; c < g.size(); ++c) {
        ASSERT_EQ(g[c].status, WcStatus::kSuccess)
            << to_string(g[c].status) << " on wr " << c << " kind "
            << static_cast<int>(pend[static_cast<std::size_t>(i)][c].kind) << " fr state "
            << static_cast<int>(p.fr->state) << " key " << std::hex << p.fr->key << " variant "
            << int(p.fr_variant) << std::dec << " round " << rounds;
        ASSERT_EQ(g[c].wr_id, c) << "completions in order";
      }
      std::size_t sends = 0;
      for (const auto& pd : pend[static_cast<std::size_t>(i)]) {
        switch (pd.kind) {
          case Kind::kWrite:
          case Kind::kLocal:
            break;
          case Kind::kRead:
            ASSERT_TRUE(std::equal(pd.expect.begin(), pd.expect.end(),
                                   p.back.bytes.begin() + static_cast<std::ptrdiff_t>(pd.dst)))
                << "READ data, round " << rounds;
            break;
          case Kind::kSend:
            ASSERT_TRUE(std::equal(pd.expect.begin(), pd.expect.end(),
                                   p.inbox.bytes.begin() + static_cast<std::ptrdiff_t>(pd.off)))
                << "SEND data, round " << rounds;
            ++sends;
            break;
          case Kind::kAtomic: {
            std::uint64_t orig;
            std::memcpy(&orig, p.results.bytes.data() + pd.off, 8);
            ASSERT_EQ(orig, pd.expect_orig) << "atomic result, round " << rounds;
            break;
          }
        }
      }
      auto rwc = wait_wcs(lb, p.b.rcq, sends, 120'000'000'000ull);
      ASSERT_EQ(rwc.size(), sends);
      for (const auto& c : rwc) ASSERT_EQ(c.status, WcStatus::kSuccess);
      ASSERT_EQ(p.region.bytes, p.model) << "region diverged from the model, round " << rounds;
      ASSERT_EQ(p.fr->state == MrState::kValid, p.fr_registered) << "fast-reg MR state";
      if (p.fr_registered) {
        ASSERT_EQ(p.fr->key & 0xFF, p.fr_variant);
      }
      std::uint64_t counter;
      std::memcpy(&counter, p.counter.bytes.data(), 8);
      ASSERT_EQ(counter, p.counter_model);
      ASSERT_EQ(p.a.qp->state, QpState::kRts);
      // Re-register this pair's regions on both sides (new keys) while the other pairs'
      // traffic is still under way; stale duplicates with the old keys must not hurt.
      if (rereg && rng() % 2 == 0) {
        for (Buffer* buf : {&p.src, &p.back, &p.results}) rereg_buffer(lb.a(), p.a.pd, *buf);
        for (Buffer* buf : {&p.region, &p.inbox, &p.counter}) rereg_buffer(lb.b(), p.b.pd, *buf);
        reregs += 6;
      }
    }
  }
  const auto& sa = lb.a().stats();
  const auto& sb = lb.b().stats();
  std::printf(
      "soak: %llu rounds, %llu ops, %.1f MB; dropped %llu+%llu, duplicated %llu+%llu, "
      "corrupted %llu+%llu; retries %llu, timeouts %llu, seq NAKs %llu, duplicates %llu; "
      "MRs re-registered %llu\n",
      static_cast<unsigned long long>(rounds), static_cast<unsigned long long>(ops),
      static_cast<double>(bytes) / 1e6,
      static_cast<unsigned long long>(lb.injector(0).stats().dropped),
      static_cast<unsigned long long>(lb.injector(1).stats().dropped),
      static_cast<unsigned long long>(lb.injector(0).stats().duplicated),
      static_cast<unsigned long long>(lb.injector(1).stats().duplicated),
      static_cast<unsigned long long>(lb.injector(0).stats().corrupted),
      static_cast<unsigned long long>(lb.injector(1).stats().corrupted),
      static_cast<unsigned long long>(sa.get(Counter::kRetries)),
      static_cast<unsigned long long>(sa.get(Counter::kRetransmitTimeouts)),
      static_cast<unsigned long long>(sb.get(Counter::kSeqErrNakSent)),
      static_cast<unsigned long long>(sb.get(Counter::kDuplicateRequests)),
      static_cast<unsigned long long>(reregs));
  if (rereg) {
    EXPECT_GT(reregs, 0u);
  }
  EXPECT_GT(ops, 0u);
  if (loss > 0 && (on("drop") || on("reorder") || on("corrupt"))) {
    EXPECT_GT(sa.get(Counter::kRetries), 0u) << "the faults must have been felt";
  }
}

}  // namespace
}  // namespace roce::test
