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
  --mr->pd->use_count;
  std::erase_if(owned_, [mr](const auto& p) { return p.get() == mr; });
}

Mr* MrTable::find(std::uint32_t key) const {
  const auto it = by_index_.find(key >> 8);
  if (it == by_index_.end() || it->second->key != key) return nullptr;
  return it->second;
}

Mr* MrTable::find_any_variant(std::uint32_t key) const {
  const auto it = by_index_.find(key >> 8);
  return it == by_index_.end() ? nullptr : it->second;
}

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
