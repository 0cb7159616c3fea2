/// @file
/// Single-producer / single-consumer circular queues in memory shared by two processes (an
/// attached client and roced): work requests client -> lcore, completions lcore -> client.
/// The rules are those of the Motr LNet transport HLD's shared circular queues:
///   - positions are indices into the slot array, never pointers (each process maps the memory
///     at its own address), moved with atomic loads and stores;
///   - a queue of N slots holds at most N - 1 entries: empty when head == tail, full when
///     tail + 1 == head (mod N), so the two indices alone tell the states apart;
///   - entries are fixed-size and copied in and out whole; the producer fills as many as it
///     has before publishing the tail once, the consumer takes everything published before it
///     publishes the head once (many operations per notification);
///   - the queue that carries events is sized for every operation that can be pending plus one,
///     so that an event is never dropped (the caller's duty: ShmQueue::slots_for()).
/// Wake-up: a consumer that wants to sleep sets `armed`, checks the queue once more and only
/// then blocks (on an eventfd); the producer, after publishing, clears `armed` and signals
/// only when it was set. Both sides fence between their store and their load (Dekker), so
/// either the consumer sees the new entries or the producer sees `armed`: no lost wake-up.
///
/// Each side keeps its own index privately and only reads the other's. An index read from the
/// peer is checked (< N) before use: a corrupted or hostile peer makes the queue `broken()`,
/// never an out-of-bounds access.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

namespace roce::attach {

/// The header at the start of a queue's memory. Head, tail and armed sit on cache lines of
/// their own: the producer writes only `tail`, the consumer only `head` (and `armed`).
struct ShmQueueHeader {
  static constexpr std::uint32_t kMagic = 0x52515545;  // "RQUE"
  std::uint32_t magic = 0;
  std::uint32_t slots = 0;       ///< N: capacity N - 1 entries
  std::uint32_t entry_size = 0;  ///< sizeof the entry type, checked by both sides
  std::uint32_t reserved = 0;
  alignas(64) std::atomic<std::uint32_t> head{0};   ///< next slot to read (consumer writes)
  alignas(64) std::atomic<std::uint32_t> tail{0};   ///< next slot to write (producer writes)
  alignas(64) std::atomic<std::uint32_t> armed{0};  ///< consumer sleeps: producer must signal
  alignas(64) std::uint8_t entries[];               ///< slots * entry_size bytes
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free,
              "indices shared between processes must be lock-free");
static_assert(offsetof(ShmQueueHeader, entries) == 256);

/// What both sides need to know about a queue's memory.
template <class T>
struct ShmQueueLayout {
  static_assert(std::is_trivially_copyable_v<T>, "entries are copied between processes");
  /// Slots for a queue that must hold `pending` entries at once (the seed's pending + 1).
  static constexpr std::uint32_t slots_for(std::uint32_t pending) { return pending + 1; }
  /// Bytes of memory a queue of `slots` slots occupies.
  static constexpr std::size_t bytes(std::uint32_t slots) {
    return offsetof(ShmQueueHeader, entries) + std::size_t{slots} * sizeof(T);
  }
  /// Writes a fresh header into `mem` (bytes(slots) long, 64-byte aligned). The creator does
  /// this once, before the other side maps the memory.
  static ShmQueueHeader* init(void* mem, std::uint32_t slots) {
    auto* h = new (mem) ShmQueueHeader;
    h->slots = slots;
    h->entry_size = sizeof(T);
    h->head.store(0, std::memory_order_relaxed);
    h->tail.store(0, std::memory_order_relaxed);
    h->armed.store(0, std::memory_order_relaxed);
    // release: the header fields must be visible before the magic says the queue is ready
    std::atomic_thread_fence(std::memory_order_release);
    h->magic = ShmQueueHeader::kMagic;
    return h;
  }
  /// The header of a queue another process created in `mem` (`len` bytes mapped), or null when
  /// it does not describe a queue of T that fits.
  static ShmQueueHeader* open(void* mem, std::size_t len) {
    if (mem == nullptr || len < offsetof(ShmQueueHeader, entries)) return nullptr;
    auto* h = static_cast<ShmQueueHeader*>(mem);
    if (h->magic != ShmQueueHeader::kMagic || h->entry_size != sizeof(T) || h->slots < 2 ||
        bytes(h->slots) > len)
      return nullptr;
    return h;
  }
};

/// The producing side of a queue.
template <class T>
class ShmProducer {
 public:
  ShmProducer() = default;
  /// `h` from ShmQueueLayout<T>::init or open; `slots` as the creator knows it (the header's
  /// copy could be changed by the peer).
  ShmProducer(ShmQueueHeader* h, std::uint32_t slots)
      : h_(h), slots_(slots), tail_(h->tail.load(std::memory_order_relaxed)) {
    if (tail_ >= slots_) broken_ = true;
    head_ = 0;
  }
  bool valid() const { return h_ != nullptr; }
  bool broken() const { return broken_; }
  std::uint32_t slots() const { return slots_; }

  /// Free slots now (reads the consumer's head).
  std::uint32_t room() {
    refresh_head();
    return slots_ - 1 - used(head_);
  }
  /// Writes `e` into the next slot without publishing it; false when full (or broken).
  bool stage(const T& e) {
    const std::uint32_t next = inc(tail_);
    if (next == head_) {
      refresh_head();
      if (next == head_ || broken_) return false;
    }
    std::memcpy(slot(tail_), &e, sizeof(T));
    tail_ = next;
    return true;
  }
  /// Makes every staged entry visible to the consumer.
  void publish() {
    // release: the entries' bytes must be visible before the consumer sees the tail move
    h_->tail.store(tail_, std::memory_order_release);
  }
  /// stage + publish.
  bool push(const T& e) {
    if (!stage(e)) return false;
    publish();
    return true;
  }
  /// Stages up to `n` entries and publishes once; returns how many went in.
  std::size_t push_n(const T* e, std::size_t n) {
    std::size_t i = 0;
    while (i < n && stage(e[i])) ++i;
    if (i != 0) publish();
    return i;
  }
  /// After publish(): true when the consumer had armed for a wake-up (and disarms it): the
  /// caller then signals its eventfd.
  bool should_wake() {
    // Pairs with the consumer's fence in ShmConsumer::arm(): either it sees our tail or we
    // see its armed flag.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (h_->armed.load(std::memory_order_relaxed) == 0) return false;
    return h_->armed.exchange(0, std::memory_order_relaxed) != 0;
  }

 private:
  std::uint32_t inc(std::uint32_t i) const { return i + 1 == slots_ ? 0 : i + 1; }
  std::uint32_t used(std::uint32_t head) const {
    return tail_ >= head ? tail_ - head : slots_ - head + tail_;
  }
  void refresh_head() {
    // acquire: the consumer finished reading the slots before it moved the head
    const std::uint32_t h = h_->head.load(std::memory_order_acquire);
    if (h >= slots_) {
      broken_ = true;
      head_ = inc(tail_);  // looks full from now on
      return;
    }
    head_ = h;
  }
  std::uint8_t* slot(std::uint32_t i) { return h_->entries + std::size_t{i} * sizeof(T); }
  ShmQueueHeader* h_ = nullptr;
  std::uint32_t slots_ = 0;
  std::uint32_t tail_ = 0;  ///< private copy; the header's is only written
  std::uint32_t head_ = 0;  ///< last head seen
  bool broken_ = false;
};

/// The consuming side of a queue.
template <class T>
class ShmConsumer {
 public:
  ShmConsumer() = default;
  ShmConsumer(ShmQueueHeader* h, std::uint32_t slots)
      : h_(h), slots_(slots), head_(h->head.load(std::memory_order_relaxed)) {
    if (head_ >= slots_) broken_ = true;
    tail_ = head_;
  }
  bool valid() const { return h_ != nullptr; }
  bool broken() const { return broken_; }
  std::uint32_t slots() const { return slots_; }

  /// True when nothing is published (reads the producer's tail).
  bool empty() {
    refresh_tail();
    return tail_ == head_;
  }
  /// Copies out up to `max` published entries and releases their slots at once; returns how
  /// many. The copies are the caller's: the producer may reuse the slots right after.
  std::size_t pop_n(T* out, std::size_t max) {
    refresh_tail();  // everything published by now
    std::size_t n = 0;
    while (n < max && head_ != tail_) {
      std::memcpy(&out[n++], slot(head_), sizeof(T));
      head_ = head_ + 1 == slots_ ? 0 : head_ + 1;
    }
    // release: our reads of the slots must be done before the producer may overwrite them
    if (n != 0) h_->head.store(head_, std::memory_order_release);
    return n;
  }
  bool pop(T& out) { return pop_n(&out, 1) == 1; }
  /// Copies out up to `max` published entries without releasing them (consume() does): for a
  /// consumer that may have to leave some in the queue (roced when an engine queue is full).
  std::size_t peek_n(T* out, std::size_t max) {
    refresh_tail();  // everything published by now
    std::size_t n = 0;
    for (std::uint32_t i = head_; n < max && i != tail_; i = i + 1 == slots_ ? 0 : i + 1)
      std::memcpy(&out[n++], slot(i), sizeof(T));
    return n;
  }
  /// Releases the first `n` entries peek_n() returned.
  void consume(std::size_t n) {
    if (n == 0) return;
    head_ = static_cast<std::uint32_t>((head_ + n) % slots_);
    // release: our reads of the slots must be done before the producer may overwrite them
    h_->head.store(head_, std::memory_order_release);
  }
  /// Asks the producer for a wake-up; returns true when the queue is (still) empty, so that
  /// the caller may block on its eventfd; false: entries arrived, do not sleep.
  bool arm() {
    h_->armed.store(1, std::memory_order_relaxed);
    // Pairs with the producer's fence in should_wake() (see the file comment).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!empty()) {
      h_->armed.store(0, std::memory_order_relaxed);
      return false;
    }
    return true;
  }

 private:
  void refresh_tail() {
    // acquire: the entries' bytes were written before the producer moved the tail
    const std::uint32_t t = h_->tail.load(std::memory_order_acquire);
    if (t >= slots_) {
      broken_ = true;
      tail_ = head_;  // looks empty from now on
      return;
    }
    tail_ = t;
  }
  const std::uint8_t* slot(std::uint32_t i) const {
    return h_->entries + std::size_t{i} * sizeof(T);
  }
  ShmQueueHeader* h_ = nullptr;
  std::uint32_t slots_ = 0;
  std::uint32_t head_ = 0;  ///< private copy; the header's is only written
  std::uint32_t tail_ = 0;  ///< last tail seen
  bool broken_ = false;
};

}  // namespace roce::attach
