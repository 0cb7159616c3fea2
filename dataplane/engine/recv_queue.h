/// @file
/// Receive queues (a QP's own or an SRQ): receive WQEs and their SGEs, preallocated, consumed
/// in order. A WQE posted with `min_free` (RecvWr) is a multi-message buffer (the Motr LNet
/// transport's nb_min_receive_size / nb_max_receive_msgs; what mlx5 calls a multi-packet
/// receive queue): it takes several incoming messages one after another, each placed where
/// the last one ended, and stays queued while at least `min_free` bytes remain and fewer than
/// `max_msgs` messages have landed. Each message completes on its own (Wc::offset says where
/// it starts, kWcStillQueued that the buffer stays posted); the completion without that flag
/// gives the buffer back to the application.
///
/// An open multi-message buffer leaves the ring (whose slot post_recv may then reuse) for one
/// of kMaxOpen places of its own, with a copy of its SGEs. On an SRQ several QPs may be
/// receiving at once: a message holds its buffer while it arrives (`busy`), and a QP that finds
/// every open buffer busy takes the next WQE from the ring.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <vector>

#include "dataplane/engine/verbs.h"

namespace roce::engine {

struct RecvWqe {
  std::uint64_t wr_id = 0;
  std::uint32_t num_sge = 0;
  std::uint32_t sge_base = 0;  ///< index of the first SGE in the owner's SGE pool
  std::uint64_t length = 0;
  std::uint32_t min_free = 0;  ///< 0: one message; else a multi-message buffer (RecvWr)
  std::uint32_t max_msgs = 0;  ///< multi-message: at most this many messages (0: no limit)
};

struct RecvQueue {
  static constexpr std::uint32_t kMaxOpen = 4;
  /// A multi-message buffer between its first and its last message.
  struct Open {
    RecvWqe wqe;             ///< sge_base indexes open_sges
    std::uint64_t used = 0;  ///< bytes taken by the messages so far
    std::uint32_t msgs = 0;
    bool live = false;
    bool busy = false;  ///< a message is arriving into it
  };

  std::vector<RecvWqe> wqes;  ///< a power of two of them, at least depth(): indexed by mask
  std::vector<Sge> sges;      ///< max_sge per entry of `wqes`
  std::uint32_t max_sge = 0;
  std::uint32_t cap = 0;   ///< receive WQEs that may be outstanding (max_recv_wr)
  std::uint32_t head = 0;  ///< next to consume
  std::uint32_t tail = 0;  ///< next to post
  std::array<Open, kMaxOpen> open{};
  std::vector<Sge> open_sges;  ///< max_sge per entry of `open`

  std::uint32_t depth() const { return cap; }
  /// WQEs posted and not yet taken (open multi-message buffers not counted).
  std::uint32_t count() const { return tail - head; }
  /// The entry of counter `i` (a mask: a division per access cost tens of cycles).
  std::uint32_t slot(std::uint32_t i) const {
    return i & static_cast<std::uint32_t>(wqes.size() - 1);
  }
  void size_for(std::uint32_t n, std::uint32_t sge) {
    cap = n;
    max_sge = sge;
    wqes.resize(std::bit_ceil(std::max<std::uint32_t>(n, 1)));
    sges.resize(wqes.size() * sge);
    open_sges.resize(std::size_t{kMaxOpen} * sge);
  }
  /// An open buffer no message is arriving into, or -1.
  int idle_open() const {
    for (std::uint32_t k = 0; k < kMaxOpen; ++k)
      if (open[k].live && !open[k].busy) return static_cast<int>(k);
    return -1;
  }
  /// Something to receive into: an idle open buffer or a posted WQE.
  bool has_wqe() const { return head != tail || idle_open() >= 0; }
};

}  // namespace roce::engine
