// TxRing packs frames into its bytes and starts again at the front when empty. Whatever the
// mix of sizes and drains, a frame must come out with the bytes that went in (no frame
// overwrote another), and a free frame entry must always come with a slot's worth of bytes.
#include "dataplane/engine/tx_ring.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// A port's buffers (TxBufferSource): frames are built in them and handed over with them;
// every buffer goes back exactly once, whether its frame was sent, made whole, or dropped.
struct FakePort {
  std::vector<std::vector<std::uint8_t>> mem;
  std::vector<int> state;  // 0: the port's, 1: lent to the ring, 2: a frame the port sends
  std::uint32_t limit = UINT32_MAX;  // buffers it lends in all
  TxBufferSource src{this, &FakePort::take, &FakePort::give_back};
  static std::uint32_t take(void* ctx, TxBuf* out, std::uint32_t n) {
    auto* p = static_cast<FakePort*>(ctx);
    std::uint32_t k = 0;
    for (std::size_t i = 0; i < p->mem.size() && k < n && p->limit > 0; ++i)
      if (p->state[i] == 0) {
        p->state[i] = 1;
        --p->limit;
        out[k++] = {p->mem[i].data(), reinterpret_cast<void*>(i + 1)};
      }
    return k;
  }
  static void give_back(void* ctx, const TxBuf* bufs, std::uint32_t n) {
    auto* p = static_cast<FakePort*>(ctx);
    for (std::uint32_t j = 0; j < n; ++j) {
      const auto i = reinterpret_cast<std::uintptr_t>(bufs[j].handle) - 1;
      ASSERT_EQ(p->state[i], 1) << "buffer " << i << " given back twice or never lent";
      ASSERT_EQ(bufs[j].data, p->mem[i].data());
      p->state[i] = 0;
    }
  }
  explicit FakePort(std::size_t n)
      : mem(n, std::vector<std::uint8_t>(TxRing::kSlotSize)), state(n) {}
  std::size_t lent() const {
    return static_cast<std::size_t>(std::count(state.begin(), state.end(), 1));
  }
};

TEST(TxRing, FramesAreBuiltInTheSourcesBuffersAndEveryBufferComesBack) {
  FakePort port(64);
  TxRing ring(16);
  ring.set_source(&port.src);
  std::mt19937 rng(5);
  const std::uint8_t payload[300] = {7};
  const TxSeg ext{payload, sizeof payload};
  std::deque<Sent> queued;
  std::uint32_t next_id = 0;
  std::size_t sent = 0, whole = 0;
  for (int step = 0; step < 5000; ++step) {
    if (rng() % 2 && ring.free() > 0) {
      auto slot = ring.reserve();
      ASSERT_EQ(slot.size(), TxRing::kSlotSize);
      const std::size_t i = static_cast<std::size_t>(
          std::find_if(port.mem.begin(), port.mem.end(),
                       [&](const auto& m) { return m.data() == slot.data(); }) -
          port.mem.begin());
      ASSERT_LT(i, port.mem.size()) << "a slot that is not one of the port's buffers";
      const bool zc = rng() % 4 == 0;
      const std::size_t len = 60 + rng() % 1000;
      for (std::size_t k = 0; k < len; ++k) slot[k] = byte_of(next_id, k);
      if (zc)
        ring.commit_ext(len, {&ext, 1}, 4);
      else
        ring.commit(len);
      queued.push_back({next_id++, len, zc});
    } else if (rng() % 2) {
      ring.drain_frames(
          [&](const TxFrame& f) {
            const Sent s = queued.front();
            queued.pop_front();
            ASSERT_NE(f.handle, nullptr);
            const auto i = reinterpret_cast<std::uintptr_t>(f.handle) - 1;
            ASSERT_EQ(f.head.data(), port.mem[i].data()) << "the frame is not in its buffer";
            for (std::size_t k = 0; k < s.len; ++k) ASSERT_EQ(f.head[k], byte_of(s.id, k));
            port.state[i] = 2;  // the port sends it, then frees it
            port.state[i] = 0;
            ++sent;
          },
          1 + rng() % 4);
    } else {
      ring.drain(
          [&](std::span<const std::uint8_t> f) {  // a consumer of whole frames: given back after
            const Sent s = queued.front();
            queued.pop_front();
            ASSERT_EQ(f.size(), s.ext ? s.len + sizeof payload + 4 : s.len);
            for (std::size_t k = 0; k < s.len; ++k) ASSERT_EQ(f[k], byte_of(s.id, k));
            ++whole;
          },
          1 + rng() % 4);
    }
  }
  EXPECT_GT(sent, 500u);
  EXPECT_GT(whole, 500u);
  // Teardown with frames queued and buffers stashed: every one goes back.
  while (ring.free() > 0 && !ring.reserve().empty()) ring.commit(100);
  EXPECT_GT(port.lent(), 0u);
  ring.set_source(nullptr);
  EXPECT_EQ(port.lent(), 0u);
  EXPECT_EQ(ring.size(), 0u);
  auto slot = ring.reserve();  // the ring's own bytes again
  ASSERT_FALSE(slot.empty());
  EXPECT_TRUE(std::none_of(port.mem.begin(), port.mem.end(),
                           [&](const auto& m) { return m.data() == slot.data(); }));
}

TEST(TxRing, ASourceWithoutBuffersIsAFullRing) {
  FakePort port(4);
  port.limit = 3;
  TxRing ring(16);
  ring.set_source(&port.src);
  for (int i = 0; i < 3; ++i) {
    ASSERT_FALSE(ring.reserve().empty());
    ring.commit(64);
  }
  EXPECT_TRUE(ring.reserve().empty()) << "no buffer to lend: nothing to build in";
  EXPECT_EQ(ring.size(), 3u);
  ring.set_source(nullptr);  // the three queued frames' buffers go back
  EXPECT_EQ(port.lent(), 0u);
}

}  // namespace
}  // namespace roce::engine
