// TxRing packs frames into its bytes and starts again at the front when empty. Whatever the
// mix of sizes and drains, a frame must come out with the bytes that went in (no frame
// overwrote another), and a free frame entry must always come with a slot's worth of bytes.
#include "dataplane/engine/tx_ring.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <vector>

namespace roce::engine {
namespace {

struct Sent {
  std::uint32_t id;
  std::size_t len;  // copied frames: the whole frame; zero-copy: the headers
  bool ext;
};

std::uint8_t byte_of(std::uint32_t id, std::size_t i) {
  return static_cast<std::uint8_t>(id * 131 + i * 7);
}

TEST(TxRing, FramesNeverOverlapAndAFreeEntryAlwaysHasRoom) {
  std::mt19937 rng(11);
  TxRing ring(8);
  std::deque<Sent> queued;
  std::uint32_t next_id = 0;
  const std::uint8_t payload[600] = {};
  const TxSeg ext{payload, sizeof payload};
  std::size_t checked = 0;
  for (int step = 0; step < 20000; ++step) {
    if (rng() % 3 != 0 && ring.free() > 0) {
      auto slot = ring.reserve();
      ASSERT_EQ(slot.size(), TxRing::kSlotSize) << "a free entry without room, step " << step;
      const bool zc = rng() % 5 == 0;
      const std::size_t len =
          zc ? 60 + rng() % 60 : (rng() % 4 == 0 ? TxRing::kSlotSize : 60 + rng() % 1500);
      for (std::size_t i = 0; i < len; ++i) slot[i] = byte_of(next_id, i);
      if (zc) {
        for (std::size_t i = 0; i < 4; ++i)
          slot[TxRing::kTrailerOff + i] = byte_of(next_id, 9000 + i);
        ring.commit_ext(len, {&ext, 1}, 4);
      } else {
        ring.commit(len);
      }
      queued.push_back({next_id++, len, zc});
    } else {
      const std::size_t max = 1 + rng() % 4;
      const auto check = [&](std::span<const std::uint8_t> head, std::size_t whole) {
        ASSERT_FALSE(queued.empty());
        const Sent s = queued.front();
        queued.pop_front();
        ASSERT_EQ(head.size(), whole == 0 ? s.len : whole);
        for (std::size_t i = 0; i < s.len; ++i)
          ASSERT_EQ(head[i], byte_of(s.id, i)) << "frame " << s.id << " byte " << i;
        ++checked;
      };
      if (rng() % 2) {
        ring.drain_frames(
            [&](const TxFrame& f) {
              const bool zc = !queued.empty() && queued.front().ext;
              if (zc) {
                ASSERT_EQ(f.trailer.size(), 4u);
                EXPECT_EQ(f.trailer[0], byte_of(queued.front().id, 9000));
              }
              check(f.head, 0);
            },
            max);
      } else {
        ring.drain(
            [&](std::span<const std::uint8_t> f) {
              const Sent s = queued.front();
              check(f, s.ext ? s.len + sizeof payload + 4 : 0);
            },
            max);
      }
    }
  }
  EXPECT_GT(checked, 5000u);
}

TEST(TxRing, SmallFramesReuseTheFrontOfTheRing) {
  TxRing ring(512);
  const std::uint8_t* first = nullptr;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 32; ++i) {
      auto slot = ring.reserve();
      ASSERT_FALSE(slot.empty());
      if (first == nullptr) first = slot.data();
      // 32 frames of 82 bytes: 32 x 128 bytes from the front, not 32 slots of 4352.
      EXPECT_LT(slot.data() - first, 32 * 128);
      ring.commit(82);
    }
    ring.drain_frames([](const TxFrame&) {}, 1000);
    EXPECT_EQ(ring.size(), 0u);
  }
}

// TxRing::Run (the requester's fast path) puts frames where reserve() and commit() would have,
// and stops (null) where reserve() would wrap around or refuse: two rings, one written through
// runs and one frame by frame, with drains in between, hold the same frames at the same places.
TEST(TxRing, RunPlacesFramesAsReserveAndCommit) {
  std::mt19937 rng(5);
  TxRing a(16), b(16);
  std::uint32_t id = 0, stops = 0;
  std::deque<Sent> queued;
  for (int step = 0; step < 5000; ++step) {
    if (rng() % 2) {
      TxRing::Run run(a);
      const std::uint32_t n = rng() % 6;
      for (std::uint32_t k = 0; k < n && a.free() > k; ++k) {
        std::uint8_t* p = run.slot();
        auto slot = b.reserve();
        if (p == nullptr) {  // reserve() may still find room by wrapping; the run stops
          ++stops;
          break;
        }
        ASSERT_FALSE(slot.empty());
        const std::size_t len = rng() % 8 == 0 ? TxRing::kSlotSize : 60 + rng() % 300;
        for (std::size_t i = 0; i < len; ++i) p[i] = slot[i] = byte_of(id, i);
        run.commit(len);
        b.commit(len);
        queued.push_back({id++, len, false});
      }
      run.finish();
      ASSERT_EQ(a.size(), b.size());
    } else {
      const std::size_t max = 1 + rng() % 5;
      std::vector<std::vector<std::uint8_t>> fa, fb;
      a.drain([&](std::span<const std::uint8_t> f) { fa.emplace_back(f.begin(), f.end()); }, max);
      b.drain([&](std::span<const std::uint8_t> f) { fb.emplace_back(f.begin(), f.end()); }, max);
      ASSERT_EQ(fa, fb);
      for (const auto& f : fa) {
        ASSERT_FALSE(queued.empty());
        ASSERT_EQ(f.size(), queued.front().len);
        for (std::size_t i = 0; i < f.size(); ++i) ASSERT_EQ(f[i], byte_of(queued.front().id, i));
        queued.pop_front();
      }
    }
    if (rng() % 4 == 0 && a.free() > 0) {  // a frame the ordinary way in between
      auto sa = a.reserve();
      auto sb = b.reserve();
      ASSERT_EQ(sa.empty(), sb.empty());
      if (!sa.empty()) {
        const std::size_t len = 60 + rng() % 2000;
        for (std::size_t i = 0; i < len; ++i) sa[i] = sb[i] = byte_of(id, i);
        a.commit(len);
        b.commit(len);
        queued.push_back({id++, len, false});
      }
    }
  }
  EXPECT_GT(id, 3000u);
  EXPECT_GT(stops, 0u);
}

}  // namespace
}  // namespace roce::engine
