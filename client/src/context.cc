/// @file
/// What every backend shares: connect_rc(), and reg_mr_iova() for a backend without it.
#include <roce/client.h>

#include <cerrno>

namespace roce::client {

Mr* Context::reg_mr_iova(Pd* pd, void* addr, std::size_t length, std::uint64_t iova,
                         std::uint32_t access) {
  if (iova == reinterpret_cast<std::uint64_t>(addr)) return reg_mr(pd, addr, length, access);
  errno = EOPNOTSUPP;
  return nullptr;
}

int Context::rereg_mr(Mr*, Pd*, void*, std::size_t, std::uint64_t, std::uint32_t) {
  return EOPNOTSUPP;
}

Buffer* Context::register_memfd_at(int fd, std::uint64_t offset, void* addr, std::size_t length) {
  if (offset == 0) return register_memfd(fd, addr, length);
  errno = EOPNOTSUPP;
  return nullptr;
}

int Context::wait_any(std::span<Cq* const>, int, int) { return EOPNOTSUPP; }

int Context::connect_rc(Qp* qp, const RcPeer& peer, std::uint32_t sq_psn, Mtu mtu,
                        std::uint32_t access) {
  using namespace verbs;
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = access;
  if (const int rc = modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags))
    return rc;
  a.qp_state = QpState::kRtr;
  a.path_mtu = mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.ah.dgid = peer.gid;
  a.ah.dmac = peer.mac.value_or(MacAddr{});
  a.ah.hop_limit = 64;
  if (const int rc = modify_qp(qp, a,
                               kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                   kQpMaxDestRdAtomic | kQpMinRnrTimer))
    return rc;
  a.qp_state = QpState::kRts;
  a.sq_psn = sq_psn;
  // A vanished peer must end the QP (the engine takes retry_cnt 7 as "retry for ever"): 7
  // tries of 0.54 s (4.096 us x 2^17), about 4 s; shorter timeouts failed QPs whose ACKs a
  // heavily loaded host delayed by half a second.
  a.timeout = 17;
  a.retry_cnt = 6;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  return modify_qp(qp, a,
                   kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic);
}

}  // namespace roce::client
