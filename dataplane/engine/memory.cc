#include "dataplane/engine/memory.h"

#include <algorithm>
#include <memory>

namespace roce::engine {

MrTable::MrTable(std::uint64_t seed, std::uint32_t max_mrs)
    : rng_(seed), max_mrs_(std::min<std::uint32_t>(max_mrs, 1u << 23)) {}

std::uint32_t MrTable::new_index() {
  // Random, and while the table has room, on a cache slot of its own: with up to
  // cache_.size() MRs every lookup is then one load (1000 QPs with an MR each missed a
  // 256-slot cache most of the time, and each miss cost a hash lookup on both sides).
  // max_mrs_ is at most half the 2^24 indices, so a free one turns up within a few draws.
  for (unsigned tries = 0;; ++tries) {
    const auto idx = static_cast<std::uint32_t>(rng_.next() & 0xFF'FFFF);
    if (idx == 0 || by_index_.contains(idx)) continue;
    if (cache_[idx % cache_.size()] == nullptr || tries >= 64) return idx;
  }
}

Mr* MrTable::create(Pd* pd, std::uint64_t addr, std::uint64_t length, std::uint32_t access,
                    std::uint64_t host) {
  if (by_index_.size() >= max_mrs_) return nullptr;
  auto mr = std::make_unique<Mr>();
  mr->pd = pd;
  mr->key = new_index() << 8 | static_cast<std::uint32_t>(rng_.next() & 0xFF);
  mr->addr = addr;
  mr->host_delta = host - addr;
  mr->length = length;
  mr->access = access;
  Mr* raw = mr.get();
  by_index_[raw->key >> 8] = raw;
  if (Mr*& slot = cache_[(raw->key >> 8) % cache_.size()]; slot == nullptr) slot = raw;
  owned_.push_back(std::move(mr));
  ++pd->use_count;
  return raw;
}

Mr* MrTable::create_fast_reg(Pd* pd, std::uint64_t max_len) {
  Mr* mr = create(pd, 0, 0, 0);
  if (mr == nullptr) return nullptr;
  mr->state = MrState::kFree;
  mr->fast_reg = true;
  mr->max_len = max_len;
  return mr;
}

void MrTable::destroy(Mr* mr) {
  changed();
  by_index_.erase(mr->key >> 8);
  Mr*& cached = cache_[(mr->key >> 8) % cache_.size()];
  if (cached == mr) cached = nullptr;
  --mr->pd->use_count;
  std::erase_if(owned_, [mr](const auto& p) { return p.get() == mr; });
}

Mr* MrTable::lookup_slow(std::uint32_t index) const {
  const auto it = by_index_.find(index);
  if (it == by_index_.end()) return nullptr;
  cache_[index % cache_.size()] = it->second;
  return it->second;
}

}  // namespace roce::engine
