#include "dataplane/engine/memory.h"

#include <algorithm>
#include <memory>

namespace roce::engine {

MrTable::MrTable(std::uint64_t seed) : rng_(seed) {}

std::uint32_t MrTable::new_index() {
  for (;;) {
    const auto idx = static_cast<std::uint32_t>(rng_() & 0xFF'FFFF);
    if (idx != 0 && !by_index_.contains(idx)) return idx;
  }
}

Mr* MrTable::create(Pd* pd, std::uint64_t addr, std::uint64_t length, std::uint32_t access) {
  auto mr = std::make_unique<Mr>();
  mr->pd = pd;
  mr->key = new_index() << 8 | static_cast<std::uint32_t>(rng_() & 0xFF);
  mr->addr = addr;
  mr->length = length;
  mr->access = access;
  Mr* raw = mr.get();
  by_index_[raw->key >> 8] = raw;
  owned_.push_back(std::move(mr));
  ++pd->use_count;
  return raw;
}

Mr* MrTable::create_fast_reg(Pd* pd, std::uint64_t max_len) {
  Mr* mr = create(pd, 0, 0, 0);
  mr->state = MrState::kFree;
  mr->fast_reg = true;
  mr->max_len = max_len;
  return mr;
}

void MrTable::destroy(Mr* mr) {
  by_index_.erase(mr->key >> 8);
  Mr*& cached = cache_[(mr->key >> 8) % cache_.size()];
  if (cached == mr) cached = nullptr;
  --mr->pd->use_count;
  std::erase_if(owned_, [mr](const auto& p) { return p.get() == mr; });
}

Mr* MrTable::lookup(std::uint32_t index) const {
  Mr*& cached = cache_[index % cache_.size()];
  if (cached != nullptr && cached->key >> 8 == index) return cached;
  const auto it = by_index_.find(index);
  if (it == by_index_.end()) return nullptr;
  cached = it->second;
  return cached;
}

Mr* MrTable::find(std::uint32_t key) const {
  Mr* mr = lookup(key >> 8);
  return mr != nullptr && mr->key == key ? mr : nullptr;
}

Mr* MrTable::find_any_variant(std::uint32_t key) const { return lookup(key >> 8); }

KeyCheck MrTable::check(std::uint32_t key, const Pd* pd, std::uint64_t addr, std::uint64_t len,
                        std::uint32_t access, Mr** out) const {
  Mr* mr = find(key);
  if (mr == nullptr) return KeyCheck::kBadKey;
  if (mr->state != MrState::kValid) return KeyCheck::kInvalid;
  if (pd != nullptr && mr->pd != pd) return KeyCheck::kBadPd;
  if ((mr->access & access) != access) return KeyCheck::kBadAccess;
  if (addr < mr->addr || len > mr->length || addr - mr->addr > mr->length - len)
    return KeyCheck::kOutOfBounds;
  if (out) *out = mr;
  return KeyCheck::kOk;
}

}  // namespace roce::engine
