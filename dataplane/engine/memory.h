/// @file
/// Protection domains and memory regions. An MR covers [addr, addr + length) of host memory;
/// its key (lkey == rkey) is 24 random bits naming the MR plus an 8-bit variant that
/// fast-registration changes, so keys are neither sequential nor guessable.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "dataplane/engine/verbs.h"

namespace roce::engine {

struct Pd {
  std::uint32_t handle = 0;
  std::uint32_t use_count = 0;  ///< MRs, QPs and SRQs created on it
};

enum class MrState : std::uint8_t {
  kValid,  ///< registered and usable
  kFree,   ///< allocated for fast-registration, not (or no longer) registered
};

struct Mr {
  Pd* pd = nullptr;
  std::uint32_t key = 0;  ///< lkey == rkey
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  std::uint32_t access = 0;
  MrState state = MrState::kValid;
  bool fast_reg = false;      ///< allocated by alloc_mr(), registered by a REG_MR work request
  std::uint64_t max_len = 0;  ///< fast-reg: the largest region it may describe
};

/// Result of checking an access through a key.
enum class KeyCheck : std::uint8_t { kOk, kBadKey, kBadPd, kBadAccess, kOutOfBounds, kInvalid };

/// The MR table: key allocation and lookup. Control-plane calls create and destroy; the
/// dataplane only looks up (an unordered_map lookup does not allocate).
class MrTable {
 public:
  explicit MrTable(std::uint64_t seed);
  Mr* create(Pd* pd, std::uint64_t addr, std::uint64_t length, std::uint32_t access);
  Mr* create_fast_reg(Pd* pd, std::uint64_t max_len);
  void destroy(Mr* mr);
  Mr* find(std::uint32_t key) const {
    Mr* mr = lookup(key >> 8);
    return mr != nullptr && mr->key == key ? mr : nullptr;
  }
  /// The MR a key names whatever its variant (low 8 bits): what REG_MR acts on, as verbs pass
  /// the MR itself rather than its current key.
  Mr* find_any_variant(std::uint32_t key) const { return lookup(key >> 8); }
  /// Checks that `key` names a valid MR of `pd` (null: any PD) allowing `access` over
  /// [addr, addr + len). A zero-length access only needs nothing.
  KeyCheck check(std::uint32_t key, const Pd* pd, std::uint64_t addr, std::uint64_t len,
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
  std::size_t size() const { return by_index_.size(); }

 private:
  std::uint32_t new_index();
  Mr* lookup(std::uint32_t index) const {
    Mr* cached = cache_[index % cache_.size()];
    return cached != nullptr && cached->key >> 8 == index ? cached : lookup_slow(index);
  }
  Mr* lookup_slow(std::uint32_t index) const;
  std::mt19937_64 rng_;
  std::unordered_map<std::uint32_t, Mr*> by_index_;  ///< key >> 8 -> MR
  /// Direct-mapped cache in front of by_index_ (every packet checks one or two keys; a hash
  /// lookup is a few times dearer than this): slot index % 4096, cleared when its MR goes.
  /// New keys are picked on free slots (new_index), so it rarely misses.
  mutable std::array<Mr*, 4096> cache_{};
  std::vector<std::unique_ptr<Mr>> owned_;
};

}  // namespace roce::engine
