/// @file
/// check_request: a control request's fields before any lookup (request_check.h).
#include "controlplane/attach/request_check.h"

#include <cerrno>

namespace roce::attach {

namespace {

int check_qp(const CreateQpReq& r) {
  if (r.type != verbs::QpType::kRc && r.type != verbs::QpType::kUc && r.type != verbs::QpType::kUd)
    return EINVAL;
  const verbs::QpCap& cap = r.cap;
  if (cap.max_send_wr == 0 || cap.max_send_wr > kMaxDepth || cap.max_recv_wr > kMaxDepth ||
      (r.srq == 0 && cap.max_recv_wr == 0) || cap.max_send_sge == 0 || cap.max_send_sge > kMaxSge ||
      cap.max_recv_sge > kMaxSge)
    return EINVAL;
  return 0;
}

int check_cm(const CmReq& r, Op op) {
  if (r.private_len > kCmPrivateMax) return EINVAL;
  const bool names_port = op == Op::kCmListen || op == Op::kCmConnect || op == Op::kCmSidrListen ||
                          op == Op::kCmSidrResolve || op == Op::kCmUnlisten;
  if (names_port && r.port == 0) return EINVAL;
  if (op == Op::kCmUnlisten && r.udp > 1) return EINVAL;
  return 0;
}

}  // namespace

int check_request(const Request& rq, bool whole, bool hello, std::size_t nfds,
                  const RequestLimits& lim) {
  if (!whole) return EINVAL;
  if (!hello && rq.op != Op::kHello) return ENOTCONN;
  constexpr std::uint32_t kKnownAccess = verbs::kAccessLocalWrite | verbs::kAccessRemoteWrite |
                                         verbs::kAccessRemoteRead | verbs::kAccessRemoteAtomic;
  switch (rq.op) {
    case Op::kHello:
      if (hello) return EINVAL;
      return rq.hello.version < kOldestVersion || rq.hello.version > kVersion ? EPROTO : 0;
    case Op::kAllocPd:
    case Op::kDeallocPd:
    case Op::kDeregRegion:
    case Op::kDeregMr:
    case Op::kDestroyCq:
    case Op::kDestroyQp:
    case Op::kDestroySrq:
    case Op::kCmOpen:
    case Op::kCqNotify:
    case Op::kNeighbour:
      return 0;
    case Op::kRegRegion:
      if (nfds != 1) return EBADF;
      return rq.region.length == 0 || rq.region.length > lim.max_memory ? EINVAL : 0;
    case Op::kRegMr:
    case Op::kReregMr:
      return rq.mr.length == 0 || (rq.mr.access & ~kKnownAccess) ? EINVAL : 0;
    case Op::kCreateCq:
      return rq.cq.depth == 0 || rq.cq.depth > kMaxDepth ? EINVAL : 0;
    case Op::kCreateQp:
      return check_qp(rq.qp);
    case Op::kModifyQp:
      if ((rq.modify.mask & verbs::kQpQkey) && (rq.modify.attr.qkey & kPrivilegedQkey) &&
          !lim.privileged)
        return EPERM;
      return 0;
    case Op::kCreateSrq:
      return rq.srq.max_wr == 0 || rq.srq.max_wr > kMaxDepth || rq.srq.max_sge == 0 ||
                     rq.srq.max_sge > kMaxSge
                 ? EINVAL
                 : 0;
    case Op::kCmListen:
    case Op::kCmConnect:
    case Op::kCmAccept:
    case Op::kCmReject:
    case Op::kCmDisconnect:
    case Op::kCmRefuse:
    case Op::kCmNotify:
    case Op::kCmSidrListen:
    case Op::kCmSidrResolve:
    case Op::kCmSidrReject:
    case Op::kCmUnlisten:
      return check_cm(rq.cm, rq.op);
    case Op::kCmSidrAccept:
      // The Q_Key a SIDR_REP tells the peer to use: a privileged one only for the clients that
      // may set one on a QP (as the kernel's rdma_cm, which answers with RDMA_UDP_QKEY).
      if ((rq.cm.qkey & kPrivilegedQkey) && !lim.privileged) return EPERM;
      return check_cm(rq.cm, rq.op);
  }
  return EINVAL;  // no such request
}

}  // namespace roce::attach
