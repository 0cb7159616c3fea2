/// @file
/// Fuzz target: the attach control protocol (controlplane/attach/protocol.h) as roced's
/// control thread takes it, minus the engine: check_request() on a sequence of requests of
/// every type with random fields, and the client's handle table named through HandleCounter
/// (request_check.h) with a small wrap limit. Input: a header, then records.
///   header   limit u8 (handles wrap after 8 + limit), flags u8 (bit 0: a privileged uid)
///   record   op u8 (any value), flags u8 (bit 0: truncated, bits 1-2: descriptors passed),
///            handle u32, body length u8, the body: bytes of the request's union (the rest 0)
/// What must hold: the errno a request gets follows the protocol's order (truncated: EINVAL,
/// before hello: ENOTCONN, EBADF only for a region without its memfd); what passes has sizes
/// that bound what roced would allocate; privileged Q_Keys only for the privileged; a new
/// handle is never 0 and never one in use, unless every handle is in use.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>

#include "controlplane/attach/request_check.h"
#include "tests/fuzz/fuzz_bytes.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace roce::attach;
using roce::fuzz::Reader;

void check(bool ok) {
  if (!ok) std::abort();
}

constexpr std::size_t kBodyOffset = offsetof(Request, hello);
constexpr std::size_t kBodySize = sizeof(Request) - kBodyOffset;
static_assert(kBodySize < 256);
constexpr std::size_t kQuota = 96;  ///< resources a client may hold here (its quotas)

enum class Kind { kPd, kRegion, kMr, kCq, kQp, kSrq };

// The kind of resource `op` creates (first) or destroys (second), if any.
struct OpKind {
  Op create, destroy;
  Kind kind;
};
constexpr OpKind kOpKinds[] = {
    {Op::kAllocPd, Op::kDeallocPd, Kind::kPd},  {Op::kRegRegion, Op::kDeregRegion, Kind::kRegion},
    {Op::kRegMr, Op::kDeregMr, Kind::kMr},      {Op::kCreateCq, Op::kDestroyCq, Kind::kCq},
    {Op::kCreateQp, Op::kDestroyQp, Kind::kQp}, {Op::kCreateSrq, Op::kDestroySrq, Kind::kSrq},
};
const OpKind* creates(Op op) {
  for (const OpKind& o : kOpKinds)
    if (o.create == op) return &o;
  return nullptr;
}
const OpKind* destroys(Op op) {
  for (const OpKind& o : kOpKinds)
    if (o.destroy == op) return &o;
  return nullptr;
}

bool is_cm(Op op) {
  return op == Op::kCmListen || op == Op::kCmConnect || op == Op::kCmAccept ||
         op == Op::kCmReject || op == Op::kCmDisconnect || op == Op::kCmRefuse ||
         op == Op::kCmNotify || op == Op::kCmSidrListen || op == Op::kCmSidrResolve ||
         op == Op::kCmSidrAccept || op == Op::kCmSidrReject || op == Op::kCmUnlisten;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader in(data, size);
  const std::uint32_t limit = 8u + in.u8();
  RequestLimits lim;
  lim.max_memory = 1u << 20;
  lim.privileged = (in.u8() & 1) != 0;
  HandleCounter handles(limit);
  std::map<std::uint32_t, Kind> live;
  bool hello = false;

  for (unsigned n = 0; n < 512 && !in.empty(); ++n) {
    Request rq;
    rq.op = static_cast<Op>(in.u8());
    const std::uint8_t flags = in.u8();
    rq.handle = in.u32();
    const auto body = in.bytes(std::min<std::size_t>(in.u8(), kBodySize));
    std::memcpy(reinterpret_cast<std::uint8_t*>(&rq) + kBodyOffset, body.data(), body.size());
    const bool whole = (flags & 1) == 0;
    const std::size_t nfds = (flags >> 1) & 3;

    const int err = check_request(rq, whole, hello, nfds, lim);
    if (!whole) {
      check(err == EINVAL);
      continue;
    }
    if (!hello && rq.op != Op::kHello) {
      check(err == ENOTCONN);
      continue;
    }
    check(err != EBADF || rq.op == Op::kRegRegion);
    if (rq.op == Op::kModifyQp && (rq.modify.mask & roce::verbs::kQpQkey) &&
        (rq.modify.attr.qkey & kPrivilegedQkey))
      check(err == (lim.privileged ? 0 : EPERM));
    if (rq.op == Op::kCmSidrAccept && (rq.cm.qkey & kPrivilegedQkey) && !lim.privileged)
      check(err == EPERM);
    if (err != 0) continue;

    // What roced would size from what passed: bounded, no wrap-around.
    switch (rq.op) {
      case Op::kHello:
        hello = true;
        break;
      case Op::kCreateCq: {
        const std::uint32_t slots = ShmQueueLayout<CqEntry>::slots_for(rq.cq.depth);
        check(slots > rq.cq.depth && ShmQueueLayout<CqEntry>::bytes(slots) <= (64u << 20));
        break;
      }
      case Op::kCreateQp: {
        const QpRings r{rq.qp.cap.max_send_wr + 1, rq.qp.srq ? 2 : rq.qp.cap.max_recv_wr + 1};
        check(r.rq_offset() >= ShmQueueLayout<SendEntry>::bytes(r.sq_slots) &&
              r.bytes() > r.rq_offset() && r.bytes() <= (64u << 20));
        check(rq.qp.cap.max_send_sge <= kMaxSge && rq.qp.cap.max_recv_sge <= kMaxSge);
        break;
      }
      case Op::kCreateSrq: {
        const std::uint32_t slots = ShmQueueLayout<RecvEntry>::slots_for(rq.srq.max_wr);
        check(ShmQueueLayout<RecvEntry>::bytes(slots) <= (64u << 20));
        break;
      }
      case Op::kRegRegion:
        check(nfds == 1 && rq.region.length != 0 && rq.region.length <= lim.max_memory);
        break;
      default:
        if (is_cm(rq.op)) check(rq.cm.private_len <= kCmPrivateMax);
        break;
    }

    // The client's table: new handles never 0 nor live; destroys name what they destroy.
    if (const OpKind* c = creates(rq.op)) {
      if (live.size() >= kQuota) continue;  // EDQUOT
      const std::uint32_t h = handles.next([&](std::uint32_t x) { return live.count(x) != 0; });
      if (live.size() >= limit) {
        check(h == 0);  // every handle in use (a tiny limit only)
        continue;
      }
      check(h != 0 && h <= limit && live.count(h) == 0);
      live[h] = c->kind;
    } else if (const OpKind* d = destroys(rq.op)) {
      const auto it = live.find(rq.handle);
      if (it != live.end() && it->second == d->kind) live.erase(it);
    }
  }
  return 0;
}
