/// @file
/// The engine's transmit queue: preallocated frame slots filled by the stages and handed to
/// the port (DPDK, the in-memory test wire, an FPGA model) by Engine::drain_tx().
///
/// A slot holds a whole frame, or (zero-copy transmit) only its headers and its trailer (pad
/// and ICRC) while the payload stays where the application registered it: up to kMaxExt
/// segments of registered memory. A port that can chain buffers (DPDK external buffers) takes
/// the pieces with drain_frames(); everything else gets the frame made whole in its slot by
/// drain(), so that zero-copy is invisible to a consumer that does not ask for it.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace roce::engine {

/// A piece of a frame's payload in registered memory.
struct TxSeg {
  const std::uint8_t* addr = nullptr;
  std::uint32_t len = 0;
};

/// One frame in pieces: head (Ethernet to the last transport header; the whole frame when
/// `ext` is empty), then the `ext` payload segments, then `trailer` (pad and ICRC).
struct TxFrame {
  std::span<const std::uint8_t> head;
  std::span<const TxSeg> ext;
  std::span<const std::uint8_t> trailer;
  std::size_t size() const {
    std::size_t n = head.size() + trailer.size();
    for (const TxSeg& s : ext) n += s.len;
    return n;
  }
  /// The frame in one piece, in `out` (for a consumer that needs it whole: a capture).
  void copy_to(std::vector<std::uint8_t>& out) const {
    out.assign(head.begin(), head.end());
    for (const TxSeg& s : ext) out.insert(out.end(), s.addr, s.addr + s.len);
    out.insert(out.end(), trailer.begin(), trailer.end());
  }
};

class TxRing {
 public:
  /// Large enough for a 4096-byte payload with every header (VLAN, IPv6, RETH+ImmDt) and ICRC.
  static constexpr std::size_t kSlotSize = 4352;
  /// Payload segments of one zero-copy frame; a payload in more pieces is copied.
  static constexpr std::uint32_t kMaxExt = 4;
  /// Where a zero-copy frame's trailer (at most 3 bytes of pad and the 4-byte ICRC) waits.
  static constexpr std::size_t kTrailerOff = kSlotSize - 8;

  /// Room for `slots` frames. The bytes are one more slot's worth: a frame never straddles
  /// the end, and the slack that leaves at the end is always less than a slot.
  explicit TxRing(std::uint32_t slots)
      : buf_(std::size_t{slots + 1} * kSlotSize),
        meta_(std::bit_ceil(std::max<std::uint32_t>(slots, 1))),
        cap_(slots),
        mask_(static_cast<std::uint32_t>(meta_.size() - 1)) {}
  std::uint32_t capacity() const { return cap_; }
  std::uint32_t size() const { return tail_ - head_; }
  std::uint32_t free() const { return capacity() - size(); }

  /// The next free slot (kSlotSize bytes), or an empty span when the ring is full. Frames are
  /// packed (a copied frame takes its length rounded to a cache line, not a slot), and an
  /// empty ring starts again at its first byte: small frames stay in a few hot cache lines
  /// instead of one new line per frame over a ring of megabytes.
  std::span<std::uint8_t> reserve() {
    if (free() == 0) return {};
    if (head_ == tail_) wpos_ = rpos_ = 0;
    std::size_t pos = wpos_;
    if (head_ == tail_ || rpos_ < wpos_) {  // live bytes (if any) are [rpos_, wpos_)
      if (pos + kSlotSize > buf_.size()) pos = 0;
      if (pos == 0 && head_ != tail_ && rpos_ < kSlotSize) return {};
    } else if (pos + kSlotSize > rpos_) {  // live bytes wrap: [rpos_, end) and [0, wpos_)
      return {};
    }
    res_ = static_cast<std::uint32_t>(pos);
    return {buf_.data() + pos, kSlotSize};
  }
  /// A whole frame of `len` bytes was written to the reserved slot.
  void commit(std::size_t len) {
    Meta& m = push(round_up(len));
    m.len = static_cast<std::uint32_t>(len);
    m.n_ext = 0;
    m.trailer = 0;
  }
  /// Headers of `hdr_len` bytes were written to the reserved slot and `trailer_len` bytes of
  /// trailer at kTrailerOff; the payload is `ext` (1..kMaxExt segments). The frame keeps the
  /// whole slot: drain() and flatten_all() may copy the payload in.
  void commit_ext(std::size_t hdr_len, std::span<const TxSeg> ext, std::size_t trailer_len) {
    Meta& m = push(kSlotSize);
    m.len = static_cast<std::uint32_t>(hdr_len);
    m.n_ext = static_cast<std::uint8_t>(ext.size());
    m.trailer = static_cast<std::uint8_t>(trailer_len);
    for (std::size_t i = 0; i < ext.size(); ++i) m.ext[i] = ext[i];
  }

  /// Hands each frame, whole, to `f(std::span<const std::uint8_t>)`: a zero-copy frame is
  /// copied together in its slot first.
  template <class F>
  std::size_t drain(F&& f, std::size_t max) {
    std::size_t n = 0;
    while (head_ != tail_ && n < max) {
      Meta& m = meta_[head_ & mask_];
      flatten(m, slot(head_));
      f(std::span<const std::uint8_t>(slot(head_), m.len));
      pop();
      ++n;
    }
    return n;
  }

  /// Copies the payload of every queued zero-copy frame into its slot: before registered
  /// memory goes away (dereg_mr), nothing queued may still point into it.
  void flatten_all() {
    for (std::uint32_t i = head_; i != tail_; ++i) flatten(meta_[i & mask_], slot(i));
  }

  /// Hands each frame, in pieces, to `f(const TxFrame&)`. The pieces stay valid until the
  /// slot is reused (the next reserve() after this call returns): a consumer that keeps a
  /// payload segment beyond that refers to registered memory, not to the ring.
  template <class F>
  std::size_t drain_frames(F&& f, std::size_t max) {
    std::size_t n = 0;
    while (head_ != tail_ && n < max) {
      const Meta& m = meta_[head_ & mask_];
      const std::uint8_t* p = slot(head_);
      TxFrame fr{{p, m.len}, {m.ext, m.n_ext}, {p + kTrailerOff, m.trailer}};
      f(fr);
      pop();
      ++n;
    }
    return n;
  }

 private:
  struct Meta {
    std::uint32_t off = 0;  ///< where the frame's slot starts in buf_
    std::uint32_t len = 0;  ///< whole frame, or headers only when n_ext != 0
    std::uint8_t n_ext = 0;
    std::uint8_t trailer = 0;
    TxSeg ext[kMaxExt];
  };
  static void flatten(Meta& m, std::uint8_t* p) {
    if (m.n_ext == 0) return;
    std::uint8_t trailer[8];
    std::memcpy(trailer, p + kTrailerOff, m.trailer);
    for (std::uint32_t i = 0; i < m.n_ext; ++i) {
      std::memcpy(p + m.len, m.ext[i].addr, m.ext[i].len);
      m.len += m.ext[i].len;
    }
    std::memcpy(p + m.len, trailer, m.trailer);
    m.len += m.trailer;
    m.n_ext = 0;
    m.trailer = 0;
  }
  static std::size_t round_up(std::size_t len) { return (len + 63) & ~std::size_t{63}; }
  Meta& push(std::size_t bytes) {
    Meta& m = meta_[tail_++ & mask_];
    m.off = res_;
    wpos_ = res_ + static_cast<std::uint32_t>(bytes);
    return m;
  }
  void pop() {
    ++head_;
    rpos_ = head_ != tail_ ? meta_[head_ & mask_].off : wpos_;
  }
  std::uint8_t* slot(std::uint32_t i) { return buf_.data() + meta_[i & mask_].off; }
  std::vector<std::uint8_t> buf_;
  std::vector<Meta> meta_;  ///< a power of two of them, at least cap_: indexed by mask
  std::uint32_t cap_;
  std::uint32_t mask_;
  std::uint32_t head_ = 0;  ///< frames
  std::uint32_t tail_ = 0;
  std::uint32_t rpos_ = 0;  ///< bytes: where the oldest frame starts
  std::uint32_t wpos_ = 0;  ///< bytes: where the newest frame ends
  std::uint32_t res_ = 0;   ///< bytes: the slot reserve() handed out

 public:
  /// Frames written one after the other by one caller (the requester's fast path, which
  /// writes a run of small frames), with what reserve() and commit() keep in the ring held
  /// here meanwhile: the frame bytes written between them could be any of the ring's fields as
  /// far as the compiler knows, and each reserve() and commit() loaded them all again. slot()
  /// is null where reserve() would have to wrap around or stop (finish(), then reserve()
  /// decides). The caller makes sure the ring has a free slot for each frame; nothing else uses
  /// the ring before finish().
  class Run {
   public:
    explicit Run(TxRing& r)
        : r_(r),
          buf_(r.buf_.data()),
          meta_(r.meta_.data()),
          mask_(r.mask_),
          tail_(r.tail_),
          wpos_(r.head_ == r.tail_ ? 0 : r.wpos_),
          // reserve(): live bytes [rpos_, wpos_) leave room up to the end, wrapped ones up to
          // rpos_.
          limit_(r.head_ == r.tail_ || r.rpos_ < r.wpos_ ? r.buf_.size() : r.rpos_) {
      if (r.head_ == r.tail_) r.rpos_ = 0;
    }
    /// Where the next frame (up to kSlotSize bytes) goes, or null.
    std::uint8_t* slot() const { return wpos_ + kSlotSize <= limit_ ? buf_ + wpos_ : nullptr; }
    /// commit() of a frame of `len` bytes written at slot().
    void commit(std::size_t len) {
      Meta& m = meta_[tail_++ & mask_];
      m.off = static_cast<std::uint32_t>(wpos_);
      m.len = static_cast<std::uint32_t>(len);
      m.n_ext = 0;
      m.trailer = 0;
      wpos_ += round_up(len);
    }
    /// The ring takes the frames committed.
    void finish() {
      if (tail_ == r_.tail_) return;
      r_.tail_ = tail_;
      r_.wpos_ = static_cast<std::uint32_t>(wpos_);
    }

   private:
    TxRing& r_;
    std::uint8_t* buf_;
    Meta* meta_;
    std::uint32_t mask_;
    std::uint32_t tail_;
    std::size_t wpos_;
    std::size_t limit_;
  };
};

}  // namespace roce::engine
