/// @file
/// What Tms send each other, as pure functions of bytes: the TCP hello and the listener's check
/// of it, control messages and the passive side's verdict on them, bulk descriptors, tokens.
/// Everything a peer controls passes through here before the Tm spends a QP, a slot or a
/// buffer on it (tests/fuzz/lnet_control.cc fuzzes exactly this file).
#include <sys/random.h>

#include <cerrno>
#include <random>

#include "client/lnet/src/lnet_internal.h"

namespace roce::lnet {

std::uint64_t random_token() {
  std::uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
      // No getrandom (seccomp, an old kernel): the C++ library's non-deterministic source.
      std::random_device rd;
      v = static_cast<std::uint64_t>(rd()) << 32 | rd();
    }
  }
  return v;
}

// ---- bulk descriptors: magic(4) kind(1) nseg(1) olen(1) 0(1) token(8) owner(olen) segs --------

std::vector<std::uint8_t> BulkDesc::encode() const {
  const std::string owner_s = owner.str();
  std::vector<std::uint8_t> b(16 + owner_s.size() + segs.size() * sizeof(Seg));
  std::uint8_t* p = b.data();
  std::memcpy(p, &kMagic, 4);
  p[4] = static_cast<std::uint8_t>(kind);
  p[5] = static_cast<std::uint8_t>(segs.size());
  p[6] = static_cast<std::uint8_t>(owner_s.size());
  std::memcpy(p + 8, &token, 8);
  std::memcpy(p + 16, owner_s.data(), owner_s.size());
  if (!segs.empty()) std::memcpy(p + 16 + owner_s.size(), segs.data(), segs.size() * sizeof(Seg));
  return b;
}

std::optional<BulkDesc> BulkDesc::decode(std::span<const std::uint8_t> b) {
  if (b.size() < 16) return std::nullopt;
  std::uint32_t magic = 0;
  std::memcpy(&magic, b.data(), 4);
  BulkDesc d;
  const std::size_t nseg = b[5], olen = b[6];
  if (magic != kMagic || nseg == 0 || nseg > 4 || b.size() != 16 + olen + nseg * sizeof(Seg))
    return std::nullopt;
  if (b[4] != static_cast<std::uint8_t>(QueueType::kPassiveBulkSend) &&
      b[4] != static_cast<std::uint8_t>(QueueType::kPassiveBulkRecv))
    return std::nullopt;
  d.kind = static_cast<QueueType>(b[4]);
  std::memcpy(&d.token, b.data() + 8, 8);
  auto ep = EndPoint::parse(std::string_view(reinterpret_cast<const char*>(b.data() + 16), olen));
  if (!ep || !ep->tmid || d.token == 0) return std::nullopt;
  d.owner = *ep;
  d.segs.resize(nseg);
  std::memcpy(d.segs.data(), b.data() + 16 + olen, nseg * sizeof(Seg));
  for (const Seg& s : d.segs)
    if (s.length == 0) return std::nullopt;
  return d;
}

// ---- the hello's MAC ----------------------------------------------------------------------------

namespace {

std::uint64_t rotl(std::uint64_t x, int b) { return x << b | x >> (64 - b); }
std::uint64_t le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

}  // namespace

std::uint64_t siphash24(const OobKey& key, std::span<const std::uint8_t> msg) {
  const std::uint64_t k0 = le64(key.data()), k1 = le64(key.data() + 8);
  std::uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1,
                v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  auto round = [&] {
    v0 += v1, v1 = rotl(v1, 13), v1 ^= v0, v0 = rotl(v0, 32);
    v2 += v3, v3 = rotl(v3, 16), v3 ^= v2;
    v0 += v3, v3 = rotl(v3, 21), v3 ^= v0;
    v2 += v1, v1 = rotl(v1, 17), v1 ^= v2, v2 = rotl(v2, 32);
  };
  const std::size_t n = msg.size(), full = n / 8 * 8;
  for (std::size_t i = 0; i < full; i += 8) {
    const std::uint64_t m = le64(msg.data() + i);
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  std::uint8_t last[8] = {};
  if (n > full) std::memcpy(last, msg.data() + full, n - full);
  const std::uint64_t b = static_cast<std::uint64_t>(n) << 56 | le64(last);
  v3 ^= b;
  round();
  round();
  v0 ^= b;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

std::uint64_t hello_tag(const OobKey& key, const OobNonce& nonce, const OobHello& h) {
  std::array<std::uint8_t, sizeof(OobNonce) + sizeof(OobHello)> m{};
  OobHello c = h;
  std::memset(c.tag, 0, sizeof c.tag);
  std::memcpy(m.data(), nonce.data(), nonce.size());
  std::memcpy(m.data() + nonce.size(), &c, sizeof c);
  return siphash24(key, m);
}

void sign_hello(OobHello& h, const OobNonce& nonce, const std::optional<OobKey>& key) {
  const std::uint64_t t = key ? hello_tag(*key, nonce, h) : 0;
  std::memcpy(h.tag, &t, sizeof h.tag);
}

bool hello_tag_ok(const OobHello& h, const OobNonce& nonce, const std::optional<OobKey>& key) {
  if (!key) return true;
  const std::uint64_t want = hello_tag(*key, nonce, h);
  std::uint8_t w[8];
  std::memcpy(w, &want, 8);
  std::uint8_t diff = 0;  // no early exit: the time taken says nothing of the tag
  for (int i = 0; i < 8; ++i) diff |= static_cast<std::uint8_t>(w[i] ^ h.tag[i]);
  return diff == 0;
}

// ---- the hello ---------------------------------------------------------------------------------

std::optional<OobHello> OobHello::decode(std::span<const std::uint8_t> b) {
  if (b.size() != sizeof(OobHello)) return std::nullopt;
  OobHello h;
  std::memcpy(&h, b.data(), sizeof h);
  if (h.magic != kMagic || h.version != kVersion) return std::nullopt;
  return h;
}

namespace {

std::optional<std::string> fixed_str(const char (&s)[48]) {
  const std::size_t n = strnlen(s, sizeof s);
  if (n == sizeof s) return std::nullopt;  // no terminator
  return std::string(s, n);
}

bool qpn_ok(std::uint32_t q) { return q != 0 && q != 1 && q <= 0xFFFFFF; }

}  // namespace

std::array<std::uint8_t, OobGreeting::kSize> OobGreeting::encode(const OobNonce& nonce) {
  std::array<std::uint8_t, kSize> b{};
  const std::uint32_t magic = OobHello::kMagic, version = OobHello::kVersion;
  std::memcpy(b.data(), &magic, 4);
  std::memcpy(b.data() + 4, &version, 4);
  std::memcpy(b.data() + kHead, nonce.data(), nonce.size());
  return b;
}

int OobGreeting::check_head(std::span<const std::uint8_t> head) {
  if (head.size() < kHead) return EPROTO;
  std::uint32_t magic = 0, version = 0;
  std::memcpy(&magic, head.data(), 4);
  std::memcpy(&version, head.data() + 4, 4);
  return magic == OobHello::kMagic && version == OobHello::kVersion ? 0 : EPROTO;
}

int check_hello(const OobHello& h, const EndPoint& me, bool check_gid, EndPoint& src) {
  const auto s = fixed_str(h.src), d = fixed_str(h.dst);
  if (!s || !d) return EINVAL;
  const auto ep = EndPoint::parse(*s);
  if (!ep || !ep->tmid) return EINVAL;
  if (*d != me.str()) return EADDRNOTAVAIL;  // a stale address: another Tm took this port
  if (!qpn_ok(h.qpn) || !qpn_ok(h.cqpn) || h.qpn == h.cqpn || h.psn > 0xFFFFFF ||
      h.cpsn > 0xFFFFFF || h.status != 0)
    return EINVAL;
  // The connection's QPs go to this GID: it must be the RoCE address of the NID the peer
  // claims, so that a process claiming another's address talks to that address, not itself.
  if (check_gid) {
    const Ipv6Addr want = ipv4_mapped(ep->ip);
    if (std::memcmp(want.b.data(), h.gid, 16) != 0) return EINVAL;
  }
  src = *ep;
  return 0;
}

// ---- control messages: magic(4) status(4) token(8) length(8) -----------------------------------

void CtlMsg::encode(std::uint8_t* p) const {
  std::memcpy(p, &kMagic, 4);
  std::memcpy(p + 4, &status, 4);
  std::memcpy(p + 8, &token, 8);
  std::memcpy(p + 16, &length, 8);
}

std::optional<CtlMsg> CtlMsg::decode(std::span<const std::uint8_t> b) {
  if (b.size() != kSize) return std::nullopt;
  std::uint32_t magic = 0;
  std::memcpy(&magic, b.data(), 4);
  if (magic != kMagic) return std::nullopt;
  CtlMsg m;
  std::memcpy(&m.status, b.data() + 4, 4);
  std::memcpy(&m.token, b.data() + 8, 8);
  std::memcpy(&m.length, b.data() + 16, 8);
  return m;
}

CtlVerdict judge_ctl(const CtlMsg& m, const PassiveEntry* entry, const EndPoint& from) {
  if (!entry || m.token == 0) return CtlVerdict::kUnknown;
  if (entry->peer && !(*entry->peer == from)) return CtlVerdict::kWrongPeer;
  if (m.length > entry->capacity) return CtlVerdict::kTooLong;
  return CtlVerdict::kComplete;
}

}  // namespace roce::lnet
