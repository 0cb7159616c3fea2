/// @file
/// Internals shared by the files of roce_lnet (nothing outside client/lnet includes this).
#pragma once

#include <cstring>

#include "client/lnet/include/roce/lnet.h"

namespace roce::lnet {

// --- domain.cc ---
/// What the library keeps per network buffer.
struct NetBuffer::Impl {
  client::Buffer* owned = nullptr;    ///< Domain::alloc_buffer's memory
  std::vector<client::Mr*> mrs;       ///< registration: one MR per segment (local write)
  std::vector<client::Mr*> bulk_mrs;  ///< passive bulk: remote access, for this operation only
  std::vector<std::uint64_t> wr_ids;  ///< work requests on the wire
  std::uint32_t ops_left = 0;         ///< active bulk: RDMA work requests not yet complete
  std::uint32_t bulk_id = 0;          ///< passive: its descriptor's id; active: the peer's
  std::uint64_t bulk_len = 0;
  bool posted = false;  ///< kMsgRecv: in the SRQ
  bool bulk_failed = false;
  std::optional<EndPoint> peer;  ///< active bulk: the passive side
};

// --- transfer_machine.cc ---
/// The opaque buffer descriptor of a passive bulk buffer.
struct BulkDesc {
  static constexpr std::uint32_t kMagic = 0x4C4E4244;  // "LNBD"
  struct Seg {
    std::uint64_t iova;
    std::uint32_t rkey;
    std::uint32_t length;
  };
  QueueType kind = QueueType::kPassiveBulkSend;
  std::uint32_t bulk_id = 0;
  EndPoint owner;
  std::vector<Seg> segs;

  std::vector<std::uint8_t> encode() const;
  static std::optional<BulkDesc> decode(const std::vector<std::uint8_t>& b);
};

/// The connection exchange on TCP (fixed size, both directions).
struct OobHello {
  static constexpr std::uint32_t kMagic = 0x4C4E4554;  // "LNET"
  static constexpr std::uint32_t kVersion = 1;
  std::uint32_t magic = kMagic;
  std::uint32_t version = kVersion;
  char src[48] = {};                 ///< the connecting Tm's address
  char dst[48] = {};                 ///< the address it wants
  std::uint32_t qpn = 0, psn = 0;    ///< message QP (on the Tm's SRQ)
  std::uint32_t cqpn = 0, cpsn = 0;  ///< control QP
  std::uint8_t gid[16] = {};
  std::int32_t status = 0;  ///< reply: 0 or an errno value
};

/// A control message (control QP): "the active side has moved `length` bytes of bulk `id`".
struct CtlMsg {
  static constexpr std::uint32_t kMagic = 0x4C4E4344;  // "LNCD"
  std::uint32_t magic = kMagic;
  std::uint32_t bulk_id = 0;
  std::uint64_t length = 0;
  std::int32_t status = 0;
};

}  // namespace roce::lnet
