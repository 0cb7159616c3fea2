/// @file
/// Fuzz target: what one Tm of the messaging API takes from another (client/lnet/src/control.cc)
/// -- the listener's greeting, the TCP hello, its SipHash tag and the listener's check of it, a
/// control message and the passive side's verdict on it, a bulk descriptor. The input is tried
/// as each of them. What
/// decodes must encode back (control messages to the same bytes, descriptors to an equal
/// descriptor).
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "client/lnet/src/lnet_internal.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace roce::lnet;
  const std::span<const std::uint8_t> in(data, size);
  static const EndPoint me = *EndPoint::parse("192.0.2.1@roce:0:31:5");
  static const OobKey key{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  static const OobNonce nonce{0xA5};
  (void)siphash24(key, in);
  // The listener's greeting (and a hello's first 8 bytes): ours, or EPROTO, never anything
  // else; what we encode is ours.
  if (const int rc = OobGreeting::check_head(in); rc != 0 && rc != EPROTO) std::abort();
  if (OobGreeting::check_head(in) == 0) {
    std::uint32_t magic;
    std::memcpy(&magic, data, 4);
    if (magic != OobHello::kMagic) std::abort();
  }
  OobNonce n{};
  std::memcpy(n.data(), data, std::min(size, n.size()));
  if (OobGreeting::check_head(OobGreeting::encode(n)) != 0) std::abort();
  if (const auto h = OobHello::decode(in)) {
    for (const bool gid : {false, true}) {
      EndPoint src;
      const int rc = check_hello(*h, me, gid, src);
      if (rc == 0 && !src.tmid) std::abort();  // an accepted hello names a Tm
    }
    // A tag we made verifies; flipping any bit of the hello breaks it.
    OobHello signed_h = *h;
    sign_hello(signed_h, nonce, key);
    if (!hello_tag_ok(signed_h, nonce, key)) std::abort();
    signed_h.src[data[4] % sizeof signed_h.src] ^= 1;  // 2^-64 to collide
    if (hello_tag_ok(signed_h, nonce, key)) std::abort();
  }
  if (const auto m = CtlMsg::decode(in)) {
    std::uint8_t again[CtlMsg::kSize];
    m->encode(again);
    if (std::memcmp(again, data, CtlMsg::kSize) != 0) std::abort();
    PassiveEntry e;
    e.capacity = 4096;
    e.peer = EndPoint::parse("192.0.2.2@roce:0:31:6");
    const CtlVerdict v = judge_ctl(*m, &e, me);  // `me` is not the bound peer
    if (v == CtlVerdict::kComplete) std::abort();
    e.peer.reset();
    if (judge_ctl(*m, &e, me) == CtlVerdict::kComplete && (m->length > 4096 || m->token == 0))
      std::abort();
  }
  if (const auto d = BulkDesc::decode(in)) {
    const auto back = BulkDesc::decode(d->encode());
    if (!back || back->token != d->token || back->kind != d->kind || !(back->owner == d->owner) ||
        back->segs.size() != d->segs.size())
      std::abort();
    for (std::size_t i = 0; i < d->segs.size(); ++i)
      if (std::memcmp(&back->segs[i], &d->segs[i], sizeof d->segs[i]) != 0) std::abort();
  }
  return 0;
}
