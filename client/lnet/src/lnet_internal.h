/// @file
/// Internals shared by the files of roce_lnet (outside client/lnet only its tests and the
/// lnet_control fuzz target include this).
#pragma once

#include <roce/lnet.h>

#include <array>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

namespace roce::lnet {

// --- domain.cc ---
/// What the library keeps per network buffer.
struct NetBuffer::Impl {
  client::Buffer* owned = nullptr;    ///< Domain::alloc_buffer's memory
  std::vector<client::Mr*> mrs;       ///< registration: one MR per segment (local write)
  std::vector<client::Mr*> bulk_mrs;  ///< passive bulk: remote access, for this operation only
  std::vector<std::uint64_t> wr_ids;  ///< work requests on the wire
  std::uint32_t ops_left = 0;         ///< active bulk: RDMA work requests not yet complete
  std::uint64_t bulk_token = 0;       ///< passive: its descriptor's token; active: the peer's
  std::uint64_t bulk_len = 0;
  bool posted = false;  ///< kMsgRecv: in the SRQ
  bool bulk_failed = false;
  /// `mrs` are its BufferPool's MR over a region shared by many buffers: not deregistered alone.
  bool shared_mr = false;
  std::optional<EndPoint> peer;     ///< active bulk: the passive side
  std::optional<EndPoint> allowed;  ///< passive bulk: the one peer that may complete it
  std::optional<EndPoint> ref_ep;   ///< the end point reference its operation holds
  const void* conn = nullptr;       ///< the connection its operation went out on
  std::chrono::steady_clock::time_point add_time;  ///< nb_add_time
};

// --- control.cc: what peers send each other, as pure codecs (the fuzz target's subject) ---
/// The opaque buffer descriptor of a passive bulk buffer. Its token is 64 random bits
/// (getrandom): the capability to complete the buffer, never guessed from another's.
struct BulkDesc {
  static constexpr std::uint32_t kMagic = 0x4C4E4244;  // "LNBD"
  struct Seg {
    std::uint64_t iova;
    std::uint32_t rkey;
    std::uint32_t length;
  };
  QueueType kind = QueueType::kPassiveBulkSend;
  std::uint64_t token = 0;
  EndPoint owner;
  std::vector<Seg> segs;

  std::vector<std::uint8_t> encode() const;
  static std::optional<BulkDesc> decode(std::span<const std::uint8_t> b);
};

/// The connection exchange on TCP: the listener sends its greeting (OobGreeting: magic, version,
/// a 16-byte nonce) as soon as it accepts, the connecting Tm its hello, the listener its reply
/// (fixed size, both the struct's bytes). Either end that sees another version in the first 8
/// bytes of what the other sent closes at once (EPROTO): versions do not interoperate.
struct OobHello {
  static constexpr std::uint32_t kMagic = 0x4C4E4554;  // "LNET"
  /// 2: 64-bit bulk tokens in descriptors and control messages, the listener's nonce first.
  /// 3: the listener's greeting starts with magic and version.
  static constexpr std::uint32_t kVersion = 3;
  std::uint32_t magic = kMagic;
  std::uint32_t version = kVersion;
  char src[48] = {};                 ///< the connecting Tm's address
  char dst[48] = {};                 ///< the address it wants
  std::uint32_t qpn = 0, psn = 0;    ///< message QP (on the Tm's SRQ)
  std::uint32_t cqpn = 0, cpsn = 0;  ///< control QP
  std::uint8_t gid[16] = {};
  std::int32_t status = 0;  ///< reply: 0 or an errno value
  /// SipHash-2-4 of the listener's nonce and this hello (tag zero) under the domains' shared
  /// DomainOptions::oob_key; zero without a key.
  std::uint8_t tag[8] = {};

  /// Exactly sizeof(OobHello) bytes with our magic and version, else nullopt (not one of ours:
  /// no answer).
  static std::optional<OobHello> decode(std::span<const std::uint8_t> b);
};

using OobNonce = std::array<std::uint8_t, 16>;

/// The listener's first bytes: OobHello's magic and version (host order, as the hello's), then
/// the nonce the hello's tag covers.
struct OobGreeting {
  static constexpr std::size_t kHead = 8;
  static constexpr std::size_t kSize = kHead + 16;
  static std::array<std::uint8_t, kSize> encode(const OobNonce& nonce);
  /// 0 when `head` (kHead bytes) is ours: magic and version; EPROTO otherwise. Also the
  /// listener's check of the first kHead bytes of a hello (the same two fields).
  static int check_head(std::span<const std::uint8_t> head);
};
using OobKey = std::array<std::uint8_t, 16>;
/// SipHash-2-4 (Aumasson, Bernstein 2012) of `msg` under `key`: the hello's MAC.
std::uint64_t siphash24(const OobKey& key, std::span<const std::uint8_t> msg);
/// The tag of `h` (its own tag ignored) after `nonce`, under `key`.
std::uint64_t hello_tag(const OobKey& key, const OobNonce& nonce, const OobHello& h);
/// Sets h.tag (zero without a key).
void sign_hello(OobHello& h, const OobNonce& nonce, const std::optional<OobKey>& key);
/// True without a key, or when h.tag is the tag of `h` after `nonce` under `key`.
bool hello_tag_ok(const OobHello& h, const OobNonce& nonce, const std::optional<OobKey>& key);

/// The listener's check of a connecting Tm's hello, before it spends anything on it: 0 with
/// `src` set, or the errno value its reply carries (EINVAL: a bad source address, QP number or
/// PSN, a GID that is not its NID's when `check_gid`; EADDRNOTAVAIL: `dst` is not `me`).
int check_hello(const OobHello& h, const EndPoint& me, bool check_gid, EndPoint& src);

/// A control message (control QP): "the active side has moved `length` bytes of bulk `token`".
struct CtlMsg {
  static constexpr std::uint32_t kMagic = 0x4C4E4332;  // "LNC2"
  static constexpr std::size_t kSize = 24;
  std::int32_t status = 0;
  std::uint64_t token = 0;
  std::uint64_t length = 0;

  void encode(std::uint8_t* p) const;  ///< kSize bytes
  /// Exactly kSize bytes (the received length) with the magic, else nullopt.
  static std::optional<CtlMsg> decode(std::span<const std::uint8_t> b);
};

/// What a passive buffer accepts a control message from.
struct PassiveEntry {
  NetBuffer* nb = nullptr;
  std::optional<EndPoint> peer;  ///< NetBuffer::ep at add(): the one peer that may complete it
  std::uint64_t capacity = 0;
};

enum class CtlVerdict : std::uint8_t {
  kComplete,   ///< the buffer's operation is over
  kUnknown,    ///< no such token (forged, or the buffer is gone): dropped, ctl_dropped
  kWrongPeer,  ///< the token of a buffer bound to another peer: refused, ctl_refused
  kTooLong,    ///< more bytes than the buffer holds: refused, ctl_refused
};
/// The passive side's judgement of control message `m` that arrived on a connection with
/// `from`; `entry` is the buffer its token names (null: none).
CtlVerdict judge_ctl(const CtlMsg& m, const PassiveEntry* entry, const EndPoint& from);

/// 64 bits from the kernel's CSPRNG (getrandom), never 0.
std::uint64_t random_token();

}  // namespace roce::lnet
