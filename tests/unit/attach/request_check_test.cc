// The attach server's checks of a control request before any lookup, and its handle counter
// (controlplane/attach/request_check.h): the order of the errnos, privileged Q_Keys, and
// handles that are never 0 nor one still in use when the counter wraps.
#include "controlplane/attach/request_check.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <set>

namespace roce::attach {
namespace {

Request op(Op o) {
  Request rq;
  rq.op = o;
  return rq;
}

TEST(RequestCheck, OrderOfErrors) {
  RequestLimits lim;
  EXPECT_EQ(check_request(op(Op::kAllocPd), false, true, 0, lim), EINVAL) << "truncated";
  EXPECT_EQ(check_request(op(Op::kAllocPd), true, false, 0, lim), ENOTCONN) << "before hello";
  Request hello = op(Op::kHello);
  hello.hello = HelloReq{};
  EXPECT_EQ(check_request(hello, true, false, 0, lim), 0);
  EXPECT_EQ(check_request(hello, true, true, 0, lim), EINVAL) << "a second hello";
  hello.hello.version = kVersion + 1;
  EXPECT_EQ(check_request(hello, true, false, 0, lim), EPROTO);
  // Protocol 8 only added kReregMr: a client of 7 is answered, one older is refused.
  hello.hello.version = 7;
  EXPECT_EQ(check_request(hello, true, false, 0, lim), 0);
  hello.hello.version = kOldestVersion - 1;
  EXPECT_EQ(check_request(hello, true, false, 0, lim), EPROTO);
  EXPECT_EQ(check_request(op(static_cast<Op>(0)), true, true, 0, lim), EINVAL);
  EXPECT_EQ(check_request(op(static_cast<Op>(999)), true, true, 0, lim), EINVAL);
  Request region = op(Op::kRegRegion);
  region.region.length = 4096;
  EXPECT_EQ(check_request(region, true, true, 0, lim), EBADF) << "no memfd";
  EXPECT_EQ(check_request(region, true, true, 2, lim), EBADF);
  EXPECT_EQ(check_request(region, true, true, 1, lim), 0);
  region.region.length = lim.max_memory + 1;
  EXPECT_EQ(check_request(region, true, true, 1, lim), EINVAL);
}

TEST(RequestCheck, FieldRanges) {
  RequestLimits lim;
  for (Op o : {Op::kRegMr, Op::kReregMr}) {
    Request mr = op(o);
    EXPECT_EQ(check_request(mr, true, true, 0, lim), EINVAL) << "length 0";
    mr.mr.length = 4096;
    EXPECT_EQ(check_request(mr, true, true, 0, lim), 0);
    mr.mr.access = 1u << 20;
    EXPECT_EQ(check_request(mr, true, true, 0, lim), EINVAL) << "unknown access";
  }
  Request cq = op(Op::kCreateCq);
  cq.cq.depth = kMaxDepth + 1;
  EXPECT_EQ(check_request(cq, true, true, 0, lim), EINVAL);
  Request qp = op(Op::kCreateQp);
  qp.qp.cap.max_send_sge = kMaxSge + 1;
  EXPECT_EQ(check_request(qp, true, true, 0, lim), EINVAL);
  qp.qp.cap = verbs::QpCap{};
  qp.qp.type = verbs::QpType::kRc;  // (the zeroed request has no valid type)
  EXPECT_EQ(check_request(qp, true, true, 0, lim), 0);
  qp.qp.type = static_cast<verbs::QpType>(77);
  EXPECT_EQ(check_request(qp, true, true, 0, lim), EINVAL);
  qp.qp.type = verbs::QpType::kRc;
  qp.qp.cap.max_send_sge = 0;  // (the engine cannot make it: not ENOMEM, a bad argument)
  EXPECT_EQ(check_request(qp, true, true, 0, lim), EINVAL);
  Request cm = op(Op::kCmReject);
  cm.cm.private_len = kCmPrivateMax + 1;
  EXPECT_EQ(check_request(cm, true, true, 0, lim), EINVAL);
  Request listen = op(Op::kCmListen);
  EXPECT_EQ(check_request(listen, true, true, 0, lim), EINVAL) << "port 0";
}

TEST(RequestCheck, PrivilegedQkeyNeedsPrivilege) {
  Request m = op(Op::kModifyQp);
  m.modify.mask = verbs::kQpState | verbs::kQpQkey;
  m.modify.attr.qkey = 0x80010000u;
  RequestLimits user, root;
  root.privileged = true;
  EXPECT_EQ(check_request(m, true, true, 0, user), EPERM);
  EXPECT_EQ(check_request(m, true, true, 0, root), 0);
  m.modify.mask = verbs::kQpState;  // the Q_Key is not being set
  EXPECT_EQ(check_request(m, true, true, 0, user), 0);
  m.modify.mask |= verbs::kQpQkey;
  m.modify.attr.qkey = 0x7FFFFFFFu;
  EXPECT_EQ(check_request(m, true, true, 0, user), 0);
}

// Protocol 7: the SIDR requests and kCmUnlisten name a port (0: EINVAL); the Q_Key a SIDR_REP
// announces is privileged only for privileged clients, as a QP's.
TEST(RequestCheck, SidrAndUnlisten) {
  RequestLimits user, root;
  root.privileged = true;
  for (Op o : {Op::kCmSidrListen, Op::kCmSidrResolve, Op::kCmUnlisten}) {
    Request rq = op(o);
    EXPECT_EQ(check_request(rq, true, true, 0, user), EINVAL) << "port 0";
    rq.cm.port = 7174;
    EXPECT_EQ(check_request(rq, true, true, 0, user), 0);
    rq.cm.private_len = kCmPrivateMax + 1;
    EXPECT_EQ(check_request(rq, true, true, 0, user), EINVAL);
  }
  Request un = op(Op::kCmUnlisten);
  un.cm.port = 1;
  un.cm.udp = 2;
  EXPECT_EQ(check_request(un, true, true, 0, user), EINVAL);
  Request acc = op(Op::kCmSidrAccept);
  acc.cm.qkey = 0x01234567u;  // RDMA_UDP_QKEY
  EXPECT_EQ(check_request(acc, true, true, 0, user), 0);
  acc.cm.qkey = 0x80000001u;
  EXPECT_EQ(check_request(acc, true, true, 0, user), EPERM);
  EXPECT_EQ(check_request(acc, true, true, 0, root), 0);
  Request rej = op(Op::kCmSidrReject);
  EXPECT_EQ(check_request(rej, true, true, 0, user), 0);
}

TEST(HandleCounter, WrapsPastLiveHandlesNeverZero) {
  HandleCounter h(8);
  std::set<std::uint32_t> live;
  auto is_live = [&](std::uint32_t x) { return live.count(x) != 0; };
  for (std::uint32_t want = 1; want <= 3; ++want) EXPECT_EQ(h.next(is_live), want);
  live = {1, 2};
  // 4..8, then wrapped: 3 (1 and 2 are live, 0 is never), 4, ...
  for (std::uint32_t want = 4; want <= 8; ++want) EXPECT_EQ(h.next(is_live), want);
  EXPECT_EQ(h.next(is_live), 3u);
  EXPECT_EQ(h.next(is_live), 4u);
  live = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(h.next(is_live), 0u) << "every handle in use";
  live.erase(6);
  EXPECT_EQ(h.next(is_live), 6u);
}

TEST(HandleCounter, FullRangeWrapsToOne) {
  HandleCounter h;  // 2^32 - 1
  std::uint32_t last = 0;
  for (int i = 0; i < 3; ++i) last = h.next([](std::uint32_t) { return false; });
  EXPECT_EQ(last, 3u);
}

}  // namespace
}  // namespace roce::attach
