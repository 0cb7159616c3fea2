/// @file
/// Protection domains and memory regions. An MR covers [addr, addr + length) of its I/O virtual
/// address space (the addresses work requests and peers name: the registering process's own,
/// as with an RNIC), which maps onto the engine's own memory at addr + host_delta. Its key
/// (lkey == rkey) is 24 random bits naming the MR plus an 8-bit variant that fast-registration
/// changes, drawn from the kernel's CSPRNG, so keys are neither sequential nor guessable.
///
/// Every access to registered memory, local or remote, goes through map(): a key that was
/// deregistered or invalidated since a message started stops the next packet.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "dataplane/engine/key_random.h"
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
  std::uint32_t key = 0;   ///< lkey == rkey
  std::uint64_t addr = 0;  ///< I/O virtual address of the first byte (what keys are checked on)
  /// Engine address minus I/O virtual address (mod 2^64): 0 when the registering code and the
  /// engine share an address space, the offset of the engine's mapping for an attached client.
  std::uint64_t host_delta = 0;
  std::uint64_t length = 0;
  std::uint32_t access = 0;
  MrState state = MrState::kValid;
  bool fast_reg = false;      ///< allocated by alloc_mr(), registered by a REG_MR work request
  std::uint64_t max_len = 0;  ///< fast-reg: the largest region it may describe
};

/// A range whose key was checked whole (a WRITE's message, a READ's, a one-SGE WQE's buffer),
/// kept with the MR table's generation (MrTable::gen): while the table is unchanged every part
/// of the range is granted still, and its engine address is the I/O address + `delta`.
struct CheckedRange {
  std::uint64_t gen = 0;  ///< 0: nothing checked
  std::uint64_t delta = 0;
};

/// The last key a QP's requester (or responder) found granted, with its MR's whole range and
/// access, at the MR table's generation: while the table is unchanged, another access through
/// the same key is granted or not by a few compares (MrTable::check_memo). Messages of one
/// buffer each (a WQE's SGE, a WRITE's RETH) then cost no key lookup.
struct KeyMemo {
  std::uint64_t gen = 0;  ///< 0: empty
  std::uint32_t key = 0;
  std::uint32_t access = 0;
  const Pd* pd = nullptr;
  std::uint64_t addr = 0;  ///< the MR's [addr, addr + length)
  std::uint64_t length = 0;
  std::uint64_t delta = 0;
};

/// Result of checking an access through a key.
enum class KeyCheck : std::uint8_t { kOk, kBadKey, kBadPd, kBadAccess, kOutOfBounds, kInvalid };

/// The MR table: key allocation and lookup. Control-plane calls create and destroy; the
/// dataplane only looks up (an unordered_map lookup does not allocate).
class MrTable {
 public:
  /// `max_mrs`: the most MRs at once (create returns null beyond it).
  MrTable(std::uint64_t seed, std::uint32_t max_mrs = 1u << 20);
  /// `addr` is the I/O virtual address, `host` where the engine reaches its first byte.
  Mr* create(Pd* pd, std::uint64_t addr, std::uint64_t length, std::uint32_t access,
             std::uint64_t host);
  Mr* create(Pd* pd, std::uint64_t addr, std::uint64_t length, std::uint32_t access) {
    return create(pd, addr, length, access, addr);
  }
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
  /// check(), then the engine's address of `addr`; null when the key does not grant it (`why`
  /// says why). Every byte the engine reads from or writes to registered memory comes from here.
  std::uint8_t* map(std::uint32_t key, const Pd* pd, std::uint64_t addr, std::uint64_t len,
                    std::uint32_t access, KeyCheck* why = nullptr) const {
    Mr* mr = nullptr;
    const KeyCheck c = check(key, pd, addr, len, access, &mr);
    if (why) *why = c;
    return c == KeyCheck::kOk ? reinterpret_cast<std::uint8_t*>(addr + mr->host_delta) : nullptr;
  }
  std::size_t size() const { return by_index_.size(); }
  /// Changes whenever an MR stops granting what it granted (destroyed, invalidated,
  /// re-registered). Per-packet paths keep the engine address a check gave them with the
  /// generation it was given at, and check again only when the generation moved: the check
  /// on every packet costs a compare instead of a table lookup.
  std::uint64_t gen() const { return gen_; }
  void changed() { ++gen_; }
  /// Remembers that `mr` granted a whole range (after a successful check() of it).
  CheckedRange remember(const Mr* mr) const { return {gen_, mr->host_delta}; }
  /// check() of a whole range to remember (`out`), through `memo`: the same key on an
  /// unchanged table is a few compares; otherwise check() and `memo` takes the MR.
  [[gnu::always_inline]] KeyCheck check_memo(KeyMemo& memo, std::uint32_t key, const Pd* pd,
                                             std::uint64_t addr, std::uint64_t len,
                                             std::uint32_t access, CheckedRange& out) const {
    if (memo.gen == gen_ && memo.key == key && memo.pd == pd && (memo.access & access) == access &&
        addr >= memo.addr && len <= memo.length && addr - memo.addr <= memo.length - len) {
      out = {gen_, memo.delta};
      return KeyCheck::kOk;
    }
    Mr* mr = nullptr;
    const KeyCheck c = check(key, pd, addr, len, access, &mr);
    if (c != KeyCheck::kOk) return c;
    memo = {gen_, key, mr->access, pd, mr->addr, mr->length, mr->host_delta};
    out = remember(mr);
    return c;
  }
  /// map() of a part of a remembered range: a compare while the table is unchanged, the full
  /// check otherwise.
  std::uint8_t* map(const CheckedRange& c, std::uint32_t key, const Pd* pd, std::uint64_t addr,
                    std::uint64_t len, std::uint32_t access) const {
    if (c.gen == gen_) return reinterpret_cast<std::uint8_t*>(addr + c.delta);
    return map(key, pd, addr, len, access);
  }
  std::uint32_t max_mrs() const { return max_mrs_; }

 private:
  std::uint32_t new_index();
  Mr* lookup(std::uint32_t index) const {
    Mr* cached = cache_[index % cache_.size()];
    return cached != nullptr && cached->key >> 8 == index ? cached : lookup_slow(index);
  }
  Mr* lookup_slow(std::uint32_t index) const;
  KeyRandom rng_;
  std::uint64_t gen_ = 1;
  std::uint32_t max_mrs_;
  std::unordered_map<std::uint32_t, Mr*> by_index_;  ///< key >> 8 -> MR
  /// Direct-mapped cache in front of by_index_ (every packet checks one or two keys; a hash
  /// lookup is a few times dearer than this): slot index % 4096, cleared when its MR goes.
  /// New keys are picked on free slots (new_index), so it rarely misses.
  mutable std::array<Mr*, 4096> cache_{};
  std::vector<std::unique_ptr<Mr>> owned_;
};

}  // namespace roce::engine
