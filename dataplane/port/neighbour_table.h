/// @file
/// A bounded neighbour cache (IPv4 ARP or IPv6 ND) for the neighbour responder: every entry
/// and index slot is allocated when the table is made, lookups are O(1) (open addressing with
/// linear probing behind a seeded hash, load at most one half, backward-shift deletion), and
/// what it learns follows Linux with arp_accept=0 and tightens it so that an unsolicited frame
/// never moves a known peer:
///
/// - expect(ip): we sent a request for `ip`; an entry waits for the answer (pending).
/// - answer(ip, mac): a reply; taken only while `ip` is pending (then confirmed, and it may
///   replace an older MAC: we asked). Otherwise it is unsolicited and refused.
/// - learn(ip, mac): a request addressed to us; fills an entry without a MAC, refuses one whose
///   known MAC differs (kConflict).
///
/// Eviction when full: the oldest *cold* entry goes, cold being an entry with a MAC that
/// neither came from a reply to our request nor was ever looked up (a flood of requests only
/// ever creates cold entries). A request of ours still waiting for its answer (pending, no MAC)
/// gives way only to another request of ours, never to what a peer sends, so a flood cannot
/// keep us from resolving. Confirmed or used (warm) entries never give way to what a peer
/// sends: with the table full of them, an entry learned from a request is refused (kFull). A
/// request of ours, with nothing cold or waiting left, takes the least recently used warm
/// entry (a peer that makes us look its addresses up cannot lock us out). An evicted entry
/// costs only a new resolution: a QP keeps the MAC it was given at connection time.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "dataplane/wire/bytes.h"

namespace roce::port {

/// splitmix64's finaliser: a bijective mix; with a secret seed a flood cannot aim at one slot.
inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
inline std::uint64_t neighbour_hash(wire::Ipv4Addr a, std::uint64_t seed) {
  return mix64(a.v ^ seed);
}
inline std::uint64_t neighbour_hash(const wire::Ipv6Addr& a, std::uint64_t seed) {
  std::uint64_t lo, hi;
  std::memcpy(&lo, a.b.data(), 8);
  std::memcpy(&hi, a.b.data() + 8, 8);
  return mix64(mix64(lo ^ seed) ^ hi);
}

enum class LearnResult : std::uint8_t {
  kLearned,      ///< a new entry, or a MAC for an entry that had none
  kUnchanged,    ///< the same MAC again
  kConflict,     ///< refused: the entry holds another MAC
  kUnsolicited,  ///< refused: a reply we did not ask for
  kFull,         ///< refused: no room and nothing cold to evict
};

template <class Key>
class NeighbourTable {
 public:
  /// `capacity` entries at most (at least 1); `seed` keys the hash.
  NeighbourTable(std::uint32_t capacity, std::uint64_t seed)
      : seed_(seed),
        nodes_(capacity == 0 ? 1 : capacity),
        slots_(std::bit_ceil(std::size_t{nodes_.size()} * 2), kNone) {
    for (std::uint32_t i = 0; i < nodes_.size(); ++i) nodes_[i].next = i + 1;
    nodes_.back().next = kNone;
    free_ = 0;
  }

  /// The MAC of `k`; the entry counts as used from then on (warm, most recently used).
  std::optional<wire::MacAddr> lookup(const Key& k) {
    const std::uint32_t i = find(k);
    if (i == kNone || !(nodes_[i].flags & kHasMac)) return std::nullopt;
    nodes_[i].flags |= kUsed;
    touch(i, kWarm);
    return nodes_[i].mac;
  }
  /// The MAC without marking the entry used (counters, tests).
  std::optional<wire::MacAddr> peek(const Key& k) const {
    const std::uint32_t i = find(k);
    if (i == kNone || !(nodes_[i].flags & kHasMac)) return std::nullopt;
    return nodes_[i].mac;
  }
  bool pending(const Key& k) const {
    const std::uint32_t i = find(k);
    return i != kNone && (nodes_[i].flags & kPending);
  }

  /// We sent a request for `k`: the next reply for it is taken. False when there is no room.
  bool expect(const Key& k) {
    std::uint32_t i = find(k);
    if (i == kNone && (i = insert(k, kAsked)) == kNone) return false;
    nodes_[i].flags |= kPending;
    return true;
  }
  /// A reply for `k`: taken (and confirmed) only while a request of ours is pending.
  LearnResult answer(const Key& k, const wire::MacAddr& mac) {
    const std::uint32_t i = find(k);
    if (i == kNone || !(nodes_[i].flags & kPending)) return LearnResult::kUnsolicited;
    Node& n = nodes_[i];
    const bool same = (n.flags & kHasMac) && n.mac == mac;
    n.mac = mac;
    n.flags = static_cast<std::uint8_t>((n.flags & ~kPending) | kHasMac | kConfirmed);
    touch(i, kWarm);
    return same ? LearnResult::kUnchanged : LearnResult::kLearned;
  }
  /// A request addressed to us from `k`: a new entry, or the MAC of one without it.
  LearnResult learn(const Key& k, const wire::MacAddr& mac) {
    std::uint32_t i = find(k);
    if (i == kNone) {
      if ((i = insert(k, kCold)) == kNone) return LearnResult::kFull;
    } else if (nodes_[i].flags & kHasMac) {
      return nodes_[i].mac == mac ? LearnResult::kUnchanged : LearnResult::kConflict;
    }
    nodes_[i].mac = mac;
    nodes_[i].flags |= kHasMac;
    if (nodes_[i].list == kAsked) move(i, kCold);  // it has a MAC now (the reply may follow)
    return LearnResult::kLearned;
  }

  std::size_t size() const { return size_; }
  std::size_t capacity() const { return nodes_.size(); }
  std::uint64_t evicted() const { return evicted_; }
  /// Bytes held, all of them allocated by the constructor.
  std::size_t footprint() const {
    return nodes_.capacity() * sizeof(Node) + slots_.capacity() * sizeof(std::uint32_t);
  }

 private:
  static constexpr std::uint32_t kNone = ~std::uint32_t{0};
  static constexpr std::uint8_t kHasMac = 1, kPending = 2, kConfirmed = 4, kUsed = 8;
  /// The lists, oldest first: evictable by anything; waiting for our request's answer;
  /// never evicted.
  enum ListId : std::uint8_t { kCold, kAsked, kWarm };
  struct Node {
    Key key{};
    wire::MacAddr mac{};
    std::uint8_t flags = 0;
    ListId list = kCold;
    std::uint32_t prev = kNone, next = kNone;  ///< in lists_[list] (or the free list)
  };
  struct List {
    std::uint32_t head = kNone, tail = kNone;
  };

  std::size_t home(const Key& k) const { return neighbour_hash(k, seed_) & (slots_.size() - 1); }
  std::uint32_t find(const Key& k) const {
    for (std::size_t s = home(k);; s = (s + 1) & (slots_.size() - 1)) {
      const std::uint32_t i = slots_[s];
      if (i == kNone || nodes_[i].key == k) return i;
    }
  }

  void link(ListId id, std::uint32_t i) {
    List& l = lists_[id];
    nodes_[i].list = id;
    nodes_[i].prev = l.tail;
    nodes_[i].next = kNone;
    if (l.tail != kNone)
      nodes_[l.tail].next = i;
    else
      l.head = i;
    l.tail = i;
  }
  void unlink(std::uint32_t i) {
    Node& n = nodes_[i];
    List& l = lists_[n.list];
    if (n.prev != kNone)
      nodes_[n.prev].next = n.next;
    else
      l.head = n.next;
    if (n.next != kNone)
      nodes_[n.next].prev = n.prev;
    else
      l.tail = n.prev;
  }
  void move(std::uint32_t i, ListId to) {
    if (nodes_[i].list == to) return;
    unlink(i);
    link(to, i);
  }
  /// To the tail (most recent) of list `to`.
  void touch(std::uint32_t i, ListId to) {
    unlink(i);
    link(to, i);
  }

  /// A new entry for `k` (no MAC yet) in list `id`; when full, evicts the oldest cold entry,
  /// or for a request of ours the oldest one still waiting, else the least recently used.
  std::uint32_t insert(const Key& k, ListId id) {
    if (free_ == kNone) {
      std::uint32_t victim = lists_[kCold].head;
      if (victim == kNone && id == kAsked) victim = lists_[kAsked].head;
      if (victim == kNone && id == kAsked) victim = lists_[kWarm].head;
      if (victim == kNone) return kNone;
      remove(victim);
      ++evicted_;
    }
    const std::uint32_t i = free_;
    free_ = nodes_[i].next;
    nodes_[i] = Node{k, {}, 0, id, kNone, kNone};
    link(id, i);
    std::size_t s = home(k);
    while (slots_[s] != kNone) s = (s + 1) & (slots_.size() - 1);
    slots_[s] = i;
    ++size_;
    return i;
  }
  /// Takes node `i` out of its list and the index (backward-shift deletion: no tombstones, so
  /// probe lengths stay as if the entry had never been there).
  void remove(std::uint32_t i) {
    unlink(i);
    const std::size_t mask = slots_.size() - 1;
    std::size_t s = home(nodes_[i].key);
    while (slots_[s] != i) s = (s + 1) & mask;
    for (std::size_t j = (s + 1) & mask; slots_[j] != kNone; j = (j + 1) & mask) {
      const std::size_t h = home(nodes_[slots_[j]].key);
      // The entry at j may move to the hole at s if its home is not in (s, j] (cyclically).
      if (((j - h) & mask) >= ((j - s) & mask)) {
        slots_[s] = slots_[j];
        s = j;
      }
    }
    slots_[s] = kNone;
    nodes_[i].next = free_;
    free_ = i;
    --size_;
  }

  std::uint64_t seed_;
  std::vector<Node> nodes_;
  std::vector<std::uint32_t> slots_;
  std::uint32_t free_ = kNone;
  List lists_[3];
  std::size_t size_ = 0;
  std::uint64_t evicted_ = 0;
};

}  // namespace roce::port
