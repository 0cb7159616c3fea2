/// @file
/// Control path of the engine: PDs, MRs, CQs, SRQs, QPs, the QP state machine (IBA 10.3.1,
/// with the required/optional attribute table of libibverbs' ibv_modify_qp), posting work
/// requests, and moving a QP to the error state with its work requests flushed.
#include <algorithm>
#include <array>
#include <bit>
#include <random>
#include <stdexcept>
#include <string>

#include "dataplane/engine/engine_loc.h"

namespace roce::engine {

using wire::Psn;

namespace {
void reset_qp(Qp& qp);
}  // namespace

namespace {

// Linux's symmetric flow label of a QP pair and the UDP source port derived from it
// (include/rdma/ib_verbs.h: rdma_calc_flow_label, rdma_flow_label_to_udp_sport).
std::uint32_t calc_flow_label(std::uint32_t lqpn, std::uint32_t rqpn) {
  std::uint64_t v = std::uint64_t{lqpn} * rqpn;
  v ^= v >> 20;
  v ^= v >> 40;
  return static_cast<std::uint32_t>(v & 0xF'FFFF);
}
std::uint16_t flow_label_to_udp_sport(std::uint32_t fl) {
  std::uint32_t low = fl & 0x3FFF;
  low ^= (fl & 0xF'C000) >> 14;
  return static_cast<std::uint16_t>(low | 0xC000);
}

// Required and optional attributes per transition (IBA 11.2.4.2 table, as libibverbs checks).
struct Transition {
  std::uint32_t required[3];  // RC, UC, UD
  std::uint32_t optional[3];
  bool valid = false;
};

int type_index(QpType t) { return t == QpType::kRc ? 0 : t == QpType::kUc ? 1 : 2; }

Transition transition(QpState from, QpState to) {
  using S = QpState;
  const std::uint32_t rtr_rc =
      kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer;
  const std::uint32_t rtr_uc = kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn;
  const std::uint32_t rts_rc = kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic;
  if (to == S::kReset || to == S::kErr) return {{0, 0, 0}, {0, 0, 0}, true};
  if (from == S::kReset && to == S::kInit)
    return {{kQpPkeyIndex | kQpPort | kQpAccessFlags, kQpPkeyIndex | kQpPort | kQpAccessFlags,
             kQpPkeyIndex | kQpPort | kQpQkey},
            {0, 0, 0},
            true};
  if (from == S::kInit && to == S::kInit)
    return {{0, 0, 0},
            {kQpPkeyIndex | kQpPort | kQpAccessFlags, kQpPkeyIndex | kQpPort | kQpAccessFlags,
             kQpPkeyIndex | kQpPort | kQpQkey},
            true};
  if (from == S::kInit && to == S::kRtr)
    return {{rtr_rc, rtr_uc, 0},
            {kQpPkeyIndex | kQpAccessFlags, kQpPkeyIndex | kQpAccessFlags, kQpPkeyIndex | kQpQkey},
            true};
  if (from == S::kRtr && to == S::kRts)
    return {{rts_rc, kQpSqPsn, kQpSqPsn},
            {kQpAccessFlags | kQpMinRnrTimer, kQpAccessFlags, kQpQkey},
            true};
  if ((from == S::kRts || from == S::kSqd || from == S::kSqe) && to == S::kRts)
    return {{0, 0, 0}, {kQpAccessFlags | kQpMinRnrTimer, kQpAccessFlags, kQpQkey}, true};
  if ((from == S::kRts || from == S::kSqd) && to == S::kSqd) return {{0, 0, 0}, {0, 0, 0}, true};
  return {};
}

bool valid_values(const QpAttr& a, std::uint32_t mask, Mtu max_mtu) {
  if ((mask & kQpPathMtu) &&
      (a.path_mtu < Mtu::k256 || a.path_mtu > Mtu::k4096 || a.path_mtu > max_mtu))
    return false;
  if ((mask & kQpTimeout) && a.timeout > 31) return false;
  if ((mask & kQpRetryCnt) && a.retry_cnt > 7) return false;
  if ((mask & kQpRnrRetry) && a.rnr_retry > 7) return false;
  if ((mask & kQpMinRnrTimer) && a.min_rnr_timer > 31) return false;
  if ((mask & kQpMaxQpRdAtomic) && a.max_rd_atomic > 16) return false;
  if ((mask & kQpMaxDestRdAtomic) && a.max_dest_rd_atomic > 16) return false;
  if ((mask & kQpDestQpn) && a.dest_qp_num > wire::kMask24) return false;
  if ((mask & kQpPort) && a.port_num != 1) return false;
  if ((mask & kQpPkeyIndex) && a.pkey_index != 0) return false;
  if ((mask & kQpAccessFlags) && (a.qp_access_flags & ~(kAccessLocalWrite | kAccessRemoteWrite |
                                                        kAccessRemoteRead | kAccessRemoteAtomic)))
    return false;
  return true;
}

}  // namespace

Engine::Engine(const EngineConfig& cfg)
    : cfg_(cfg), tx_(cfg.tx_slots), mrs_(cfg.seed, cfg.max_mrs) {
  async_.resize(std::bit_ceil(std::max<std::uint32_t>(cfg_.max_async_events, 1)));
  if (cfg_.lcore >= kMaxLcores)
    throw std::invalid_argument("engine lcore " + std::to_string(cfg_.lcore) + " is not below " +
                                std::to_string(kMaxLcores));
  // One lcore's QPN range: (lcore << 20) + 0x11 up to the next lcore's.
  cfg_.max_qps = std::min<std::uint32_t>(cfg_.max_qps, (1u << kQpnLcoreShift) - kFirstQpn);
  first_qpn_ = (cfg_.lcore << kQpnLcoreShift) + kFirstQpn;
  qps_.resize(cfg_.max_qps);
  if (cfg_.first_qp_index) next_qp_index_ = *cfg_.first_qp_index % cfg_.max_qps;
  qp_freed_at_.assign(cfg_.max_qps, 0);
  send_list_.reserve(cfg.max_qps);
  retry_list_.reserve(cfg.max_qps);
  ack_list_.reserve(cfg.max_qps);
  read_list_.reserve(cfg.max_qps);
}

Engine::~Engine() = default;

Pd* Engine::alloc_pd() {
  pds_.push_back(std::make_unique<Pd>());
  pds_.back()->handle = next_pd_++;
  return pds_.back().get();
}

int Engine::dealloc_pd(Pd* pd) {
  if (pd->use_count != 0) return kErrBusy;
  std::erase_if(pds_, [pd](const auto& p) { return p.get() == pd; });
  return kOk;
}

Mr* Engine::reg_mr(Pd* pd, void* addr, std::uint64_t length, std::uint32_t access) {
  return reg_mr(pd, addr, length, reinterpret_cast<std::uint64_t>(addr), access);
}

Mr* Engine::reg_mr(Pd* pd, void* host_addr, std::uint64_t length, std::uint64_t iova,
                   std::uint32_t access) {
  if (pd == nullptr) return nullptr;
  // IBA 10.6.3.1: remote write or atomic access requires local write.
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite))
    return nullptr;
  // The region may not wrap around the I/O address space.
  if (length != 0 && iova + (length - 1) < iova) return nullptr;
  return mrs_.create(pd, iova, length, access, reinterpret_cast<std::uint64_t>(host_addr));
}

Mr* Engine::alloc_mr(Pd* pd, std::uint64_t max_len) { return mrs_.create_fast_reg(pd, max_len); }

int Engine::dereg_mr(Mr* mr) {
  mrs_.destroy(mr);
  // Zero-copy frames still queued point into registered memory, perhaps this region's.
  tx_.flatten_all();
  if (before_mr_release) before_mr_release();
  return kOk;
}

int Engine::rereg_mr(Mr* mr, Pd* pd, void* host_addr, std::uint64_t length, std::uint64_t iova,
                     std::uint32_t access) {
  if (mr == nullptr || pd == nullptr || mr->fast_reg) return kErrInval;
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite))
    return kErrInval;
  if (length != 0 && iova + (length - 1) < iova) return kErrInval;
  mrs_.changed();  // what the MR granted before is checked again
  tx_.flatten_all();
  if (before_mr_release) before_mr_release();
  --mr->pd->use_count;
  ++pd->use_count;
  mr->pd = pd;
  mr->addr = iova;
  mr->host_delta = reinterpret_cast<std::uint64_t>(host_addr) - iova;
  mr->length = length;
  mr->access = access;
  return kOk;
}

Cq* Engine::create_cq(std::uint32_t depth) {
  if (depth == 0 || depth > cfg_.max_cq_depth) return nullptr;
  cqs_.push_back(std::make_unique<Cq>(depth));
  return cqs_.back().get();
}

int Engine::destroy_cq(Cq* cq) {
  for (const auto& q : qps_)
    if (q && (q->send_cq == cq || q->recv_cq == cq)) return kErrBusy;
  std::erase_if(cqs_, [cq](const auto& p) { return p.get() == cq; });
  return kOk;
}

Srq* Engine::create_srq(Pd* pd, std::uint32_t max_wr, std::uint32_t max_sge) {
  if (max_wr == 0 || max_sge == 0) return nullptr;
  auto srq = std::make_unique<Srq>();
  srq->pd = pd;
  srq->rq.size_for(max_wr, max_sge);
  ++pd->use_count;
  srqs_.push_back(std::move(srq));
  return srqs_.back().get();
}

int Engine::destroy_srq(Srq* srq) {
  if (srq->use_count != 0) return kErrBusy;
  --srq->pd->use_count;
  std::erase_if(srqs_, [srq](const auto& p) { return p.get() == srq; });
  return kOk;
}

Qp* Engine::create_qp(Pd* pd, QpType type, Cq* send_cq, Cq* recv_cq, const QpCap& cap, Srq* srq,
                      bool sq_sig_all, std::optional<std::uint32_t> qpn) {
  if (pd == nullptr || send_cq == nullptr || recv_cq == nullptr) return nullptr;
  if (cap.max_send_wr == 0 || cap.max_send_sge == 0 || (srq == nullptr && cap.max_recv_wr == 0))
    return nullptr;
  if (cap.max_send_sge > 64 || cap.max_recv_sge > 64 || cap.max_inline_data > 4096) return nullptr;
  std::unique_ptr<Qp>* slot = nullptr;
  std::uint32_t number = 0;
  if (qpn) {
    if (*qpn != wire::Qpn::kGsi || type != QpType::kUd || gsi_ != nullptr) return nullptr;
    number = *qpn;
  } else {
    const std::uint32_t i = Stages::pick_qp_index(*this);
    if (i == cfg_.max_qps) return nullptr;
    slot = &qps_[i];
    number = first_qpn_ + i;
  }
  auto qp = std::make_unique<Qp>();
  qp->qpn = number;
  qp->type = type;
  qp->pd = pd;
  qp->send_cq = send_cq;
  qp->recv_cq = recv_cq;
  qp->srq = srq;
  qp->sq_sig_all = sq_sig_all;
  qp->cap = cap;
  // Rings of a power of two entries (indexed by mask), of which cap's count may be used.
  qp->sq.resize(std::bit_ceil(std::max<std::uint32_t>(cap.max_send_wr, 1)));
  qp->sq_sges.resize(qp->sq.size() * cap.max_send_sge);
  qp->sq_inline.resize(qp->sq.size() * cap.max_inline_data);
  if (type == QpType::kUd) qp->sq_ah.resize(qp->sq.size());
  if (srq == nullptr) {
    qp->rq.size_for(cap.max_recv_wr, std::max<std::uint32_t>(cap.max_recv_sge, 1));
  } else {
    ++srq->use_count;
  }
  qp->resp.res.resize(32);  // max_dest_rd_atomic (at most 16) and replays of older READs
  qp->resp.recv_sges.resize(srq ? srq->rq.max_sge : qp->rq.max_sge);
  ++pd->use_count;
  Qp* raw = qp.get();
  if (slot) {
    *slot = std::move(qp);
  } else {
    gsi_ = raw;
    qps_.push_back(std::move(qp));  // owned at the end; found through gsi_
  }
  ++live_qps_;
  return raw;
}

// A free QPN: at random (a peer cannot predict the next one from the last), and not one
// destroyed among the last quarantine destructions (its peer may still send to it, or hold it
// in CM timewait); any free one when every free one is that recent. With first_qp_index set,
// cyclic from there instead (reproducible numbers for tests). max_qps when none is free.
std::uint32_t Engine::Stages::pick_qp_index(Engine& eng) {
  const std::uint32_t n = eng.cfg_.max_qps;
  if (eng.cfg_.first_qp_index) {
    for (std::uint32_t k = 0; k < n; ++k) {
      const std::uint32_t i = (eng.next_qp_index_ + k) % n;
      if (!eng.qps_[i]) {
        eng.next_qp_index_ = (i + 1) % n;
        return i;
      }
    }
    return n;
  }
  const std::uint32_t quarantine = std::min<std::uint32_t>(n / 2, 1024);
  const auto start = static_cast<std::uint32_t>(eng.qpn_rng_.next() % n);
  std::uint32_t fallback = n;
  for (std::uint32_t k = 0; k < n; ++k) {
    const std::uint32_t i = (start + k) % n;
    if (eng.qps_[i]) continue;
    if (eng.qp_freed_at_[i] == 0 || eng.qp_destroyed_ - eng.qp_freed_at_[i] >= quarantine) return i;
    if (fallback == n || eng.qp_freed_at_[i] < eng.qp_freed_at_[fallback]) fallback = i;
  }
  return fallback;
}

int Engine::destroy_qp(Qp* qp) {
  // A multi-message buffer of an SRQ held by a message of this QP goes back to the others.
  if (qp->resp.have_recv && qp->resp.recv_open >= 0)
    qp->resp.recv_q->open[static_cast<std::size_t>(qp->resp.recv_open)].busy = false;
  send_list_.erase(qp);
  retry_list_.erase(qp);
  std::erase(ack_list_, qp);
  read_list_.erase(qp);
  timers_.erase(qp);
  if (cc_pacing_) pace_.erase(qp);
  --qp->pd->use_count;
  if (qp->srq) --qp->srq->use_count;
  if (qp == gsi_) gsi_ = nullptr;
  // The table is indexed by QPN (the GSI QP sits after it): no search for the others.
  if (const std::size_t i = qp->qpn - first_qpn_; i < cfg_.max_qps && qps_[i].get() == qp) {
    if (i < qp_freed_at_.size()) qp_freed_at_[i] = ++qp_destroyed_;
    qps_[i].reset();
    --live_qps_;
    return kOk;
  }
  for (std::size_t i = 0; i < qps_.size(); ++i) {
    if (qps_[i].get() == qp) {
      if (i < qp_freed_at_.size()) qp_freed_at_[i] = ++qp_destroyed_;
      qps_[i].reset();
      --live_qps_;
      return kOk;
    }
  }
  return kErrInval;
}

namespace {
void reset_qp(Qp& qp) {
  qp.sq_head = qp.sq_tail = 0;
  qp.rq.head = qp.rq.tail = 0;
  qp.req = ReqState{};
  qp.comp = CompState{};
  // The responder's storage sized at create_qp survives the reset: its READ/atomic
  // resources, and the place a taken receive WQE's SGEs are copied to (emptied, the next SEND
  // after RESET -> RTS wrote through a null pointer: rdma-core's test_mr_rereg_addr, whose
  // restate_qps does that, crashed roced).
  std::vector<RdAtomicRes> res = std::move(qp.resp.res);
  std::vector<Sge> sges = std::move(qp.resp.recv_sges);
  qp.resp = RespState{};
  for (auto& r : res) r = RdAtomicRes{};
  qp.resp.res = std::move(res);
  qp.resp.recv_sges = std::move(sges);
}
}  // namespace

wire::FrameSpec Engine::Stages::path_spec(const Engine& eng, const AddressVector& av) {
  wire::FrameSpec s;
  s.src_mac = eng.cfg_.mac;
  s.dst_mac = av.dmac;
  s.vlan_id = eng.cfg_.vlan_id;
  s.ip_checksum = !eng.tx_ip_checksum_offload_;
  if (const auto v4 = wire::ipv4_of_mapped(av.dgid)) {
    s.ip_version = wire::IpVersion::kV4;
    s.src_ip4 = eng.cfg_.ipv4;
    s.dst_ip4 = *v4;
  } else {
    s.ip_version = wire::IpVersion::kV6;
    s.src_ip6 = eng.cfg_.ipv6.value_or(wire::Ipv6Addr{});
    s.dst_ip6 = av.dgid;
  }
  s.tos = av.traffic_class;
  // ECN-capable transport, ECT(0), unless the traffic class chose its ECN bits
  // (congestion.ecn: by default only with an algorithm that reacts to marks).
  if (eng.cfg_.congestion.ect_on() && (s.tos & 3) == 0) s.tos |= 2;
  s.ttl = av.hop_limit;
  s.flow_label = av.flow_label;
  return s;
}

void Engine::Stages::build_tx_template(Engine& eng, Qp& qp) {
  const AddressVector& av = qp.attr.ah;
  qp.tx = path_spec(eng, av);
  const std::uint32_t fl =
      av.flow_label ? av.flow_label : calc_flow_label(qp.qpn, qp.attr.dest_qp_num);
  qp.tx.udp_sport = av.udp_sport ? av.udp_sport : flow_label_to_udp_sport(fl);
  qp.tx.dest_qp = wire::Qpn(qp.attr.dest_qp_num);
  qp.hdr = wire::make_path_template(qp.tx);
  qp.rx_expect = eng.cfg_.fast_paths && qp.type == QpType::kRc && !eng.cfg_.vlan_id
                     ? wire::make_rx_expect(qp.tx, qp.qpn)
                     : wire::RxExpect{};
}

int Engine::modify_qp(Qp* qp, const QpAttr& a, std::uint32_t mask) {
  const QpState cur = qp->state;
  const QpState next = (mask & kQpState) ? a.qp_state : cur;
  const Transition t = transition(cur, next);
  if (!t.valid) return kErrInval;
  const int ti = type_index(qp->type);
  const std::uint32_t attrs = mask & ~kQpState;
  if ((attrs & t.required[ti]) != t.required[ti]) return kErrInval;
  if (attrs & ~(t.required[ti] | t.optional[ti])) return kErrInval;
  if (!valid_values(a, attrs, cfg_.max_mtu)) return kErrInval;

  if (attrs & kQpAccessFlags) qp->attr.qp_access_flags = a.qp_access_flags;
  if (attrs & kQpPkeyIndex) qp->attr.pkey_index = a.pkey_index;
  if (attrs & kQpPort) qp->attr.port_num = a.port_num;
  if (attrs & kQpQkey) qp->attr.qkey = a.qkey;
  if (attrs & kQpAv) qp->attr.ah = a.ah;
  if (attrs & kQpPathMtu) qp->attr.path_mtu = a.path_mtu;
  if (attrs & kQpTimeout) qp->attr.timeout = a.timeout;
  if (attrs & kQpRetryCnt) qp->attr.retry_cnt = a.retry_cnt;
  if (attrs & kQpRnrRetry) qp->attr.rnr_retry = a.rnr_retry;
  if (attrs & kQpRqPsn) qp->attr.rq_psn = a.rq_psn & wire::kMask24;
  if (attrs & kQpSqPsn) qp->attr.sq_psn = a.sq_psn & wire::kMask24;
  if (attrs & kQpMaxQpRdAtomic) qp->attr.max_rd_atomic = a.max_rd_atomic;
  if (attrs & kQpMaxDestRdAtomic) qp->attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (attrs & kQpMinRnrTimer) qp->attr.min_rnr_timer = a.min_rnr_timer;
  if (attrs & kQpDestQpn) qp->attr.dest_qp_num = a.dest_qp_num;

  if (next == QpState::kErr) {
    if (cur != QpState::kErr) Stages::qp_to_error(*this, *qp);
    return kOk;
  }
  if (next == QpState::kReset) {
    reset_qp(*qp);
    // Selective repeat is a property of a connection: the next one negotiates it again (the CM
    // at RTR, roce-perf after INIT), so a QP reconnected to a standard peer never SACKs it.
    qp->req.sr = false;
    qp->sr.reset();
    send_list_.erase(qp);
    retry_list_.erase(qp);
    std::erase(ack_list_, qp);
    read_list_.erase(qp);
    qp->timer_at = 0;  // its wheel entries are stale now
    // Out of every work list, flags included: a flag left set kept the QP out of the send
    // list for good once it was back in RTS (rdma-core's test_mr.py restate_qps).
    qp->in_send_list = qp->in_ack_list = qp->in_read_list = qp->in_retry_list = false;
    // Its completions still in the CQs go too, as mlx4/mlx5 clean a reset QP's CQEs: a
    // program that restarts a QP from ERR (rdma-core's test_mr.py restate_qps) must not poll
    // the flushed completions of its old life first.
    if (qp->send_cq) qp->send_cq->remove_qp(qp->qpn);
    if (qp->recv_cq && qp->recv_cq != qp->send_cq) qp->recv_cq->remove_qp(qp->qpn);
    qp->state = QpState::kReset;
    return kOk;
  }
  if (cur == QpState::kInit && next == QpState::kRtr) {
    qp->resp.epsn = Psn(qp->attr.rq_psn);
    if (qp->type != QpType::kUd) Stages::build_tx_template(*this, *qp);
  }
  if (cur == QpState::kRtr && next == QpState::kRts) {
    qp->req.next_psn = Psn(qp->attr.sq_psn);
    qp->req.high_psn = Psn(qp->attr.sq_psn);
    qp->comp.psn = Psn(qp->attr.sq_psn);
    qp->comp.retry_left = qp->attr.retry_cnt;
    qp->comp.rnr_left = qp->attr.rnr_retry;
    Stages::cc_start(*this, *qp);
    if (qp->req.sr) Stages::sr_bdp_refresh(*this, *qp);
  }
  qp->state = next;
  qp->attr.qp_state = next;
  if (next == QpState::kRts) Stages::schedule_send(*this, *qp);
  return kOk;
}

void Engine::Stages::post_cqe(Engine& eng, Cq* cq, const Wc& wc) {
  if (cq->push(wc)) return;
  eng.stats_.inc(Counter::kCqOverflow);
  if (!cq->overflowed()) {
    cq->set_overflowed();
    cq_overrun(eng, cq);
  }
}

// IBA 11.6.2 (CQ overrun): the CQ stops (nothing more is written to it: poll_cq returns what
// it holds), the application hears of it through a CQ error event, and the QPs that complete
// into it go to the error state, since their completions can no longer be reported. The
// completion that did not fit is lost: its data was placed and acknowledged, as on an RNIC; it
// is counted (cq_overflow), as is everything the stopped CQ refuses after it.
void Engine::Stages::cq_overrun(Engine& eng, Cq* cq) {
  async_event(eng, {AsyncEventType::kCqErr, 0, cq});
  if (eng.in_overrun_)
    return;  // the flushes below complete into stopped CQs: counted, no recursion
  eng.in_overrun_ = true;
  for (auto& q : eng.qps_) {
    if (!q || q->state == QpState::kErr || q->state == QpState::kReset) continue;
    if (q->send_cq != cq && q->recv_cq != cq) continue;
    qp_to_error(eng, *q);
    async_event(eng, {AsyncEventType::kQpFatal, q->qpn, nullptr});
  }
  eng.in_overrun_ = false;
}

void Engine::Stages::async_event(Engine& eng, const AsyncEvent& ev) {
  eng.stats_.inc(Counter::kAsyncEvents);
  const auto mask = static_cast<std::uint32_t>(eng.async_.size() - 1);
  if (eng.async_tail_ - eng.async_head_ == eng.async_.size()) {
    ++eng.async_head_;  // keep the newest; the oldest is counted lost
    eng.stats_.inc(Counter::kAsyncEventsLost);
  }
  eng.async_[eng.async_tail_++ & mask] = ev;
  if (eng.on_async_event) eng.on_async_event(ev);
}

bool Engine::get_async_event(AsyncEvent& ev) {
  if (async_head_ == async_tail_) return false;
  ev = async_[async_head_++ & static_cast<std::uint32_t>(async_.size() - 1)];
  return true;
}

namespace {

bool opcode_allowed(QpType t, WrOpcode op) {
  switch (t) {
    case QpType::kRc:
      return true;
    case QpType::kUc:
      return op == WrOpcode::kSend || op == WrOpcode::kSendImm || op == WrOpcode::kWrite ||
             op == WrOpcode::kWriteImm || op == WrOpcode::kLocalInv || op == WrOpcode::kRegMr;
    case QpType::kUd:
      return op == WrOpcode::kSend || op == WrOpcode::kSendImm;
  }
  return false;
}

}  // namespace

void Engine::Stages::comp_wqe_done(Engine& eng, Qp& qp, SendWqe& w, WcStatus status) {
  if (w.state == WqeState::kDone) return;
  w.state = WqeState::kDone;
  if (w.is_rd_atomic() && w.npkts != 0 && qp.req.rd_atomic_out > 0) --qp.req.rd_atomic_out;
  if (status != WcStatus::kSuccess || qp.sq_sig_all || (w.flags & kSendSignaled)) {
    Wc wc;
    wc.wr_id = w.wr_id;
    wc.status = status;
    wc.opcode = wc_opcode(w.opcode);
    wc.byte_len = static_cast<std::uint32_t>(w.length);
    wc.qp_num = qp.qpn;
    post_cqe(eng, qp.send_cq, wc);
  }
}

void Engine::Stages::flush_recvs(Engine& eng, Qp& qp) {
  auto flush_one = [&](std::uint64_t wr_id) {
    Wc wc;
    wc.wr_id = wr_id;
    wc.status = WcStatus::kWrFlushErr;
    wc.opcode = WcOpcode::kRecv;
    wc.qp_num = qp.qpn;
    post_cqe(eng, qp.recv_cq, wc);
  };
  RespState& rs = qp.resp;
  if (rs.have_recv) {
    flush_one(rs.recv.wr_id);
    rs.have_recv = false;
    if (rs.recv_open >= 0) rs.recv_q->open[static_cast<std::size_t>(rs.recv_open)] = {};
    rs.recv_open = -1;
  }
  if (qp.srq) return;           // an SRQ's WQEs belong to every QP attached to it
  for (auto& o : qp.rq.open) {  // open multi-message buffers first: they were posted first
    if (o.live) flush_one(o.wqe.wr_id);
    o = {};
  }
  while (qp.rq.head != qp.rq.tail) flush_one(qp.rq.wqes[qp.rq.slot(qp.rq.head++)].wr_id);
}

void Engine::Stages::qp_to_error(Engine& eng, Qp& qp, std::optional<WcStatus> head_status) {
  qp.state = QpState::kErr;
  qp.attr.qp_state = QpState::kErr;
  // In post order: finished WQEs complete successfully, a locally failed one with its own
  // status, the first outstanding one with `head_status` (the NAK or retry verdict), the rest
  // as flushed.
  bool first = true;
  for (std::uint32_t i = qp.sq_head; i != qp.sq_tail; ++i) {
    SendWqe& w = qp.wqe(i);
    switch (w.state) {
      case WqeState::kDone:
        break;
      case WqeState::kExecuted:
        comp_wqe_done(eng, qp, w, WcStatus::kSuccess);
        break;
      case WqeState::kFailed:
        comp_wqe_done(eng, qp, w, w.status);
        first = false;
        break;
      default:
        comp_wqe_done(eng, qp, w, first && head_status ? *head_status : WcStatus::kWrFlushErr);
        first = false;
    }
  }
  qp.sq_head = qp.sq_tail;
  qp.req.next_wqe = qp.sq_tail;
  qp.req.rd_atomic_out = 0;
  qp.comp.retrans_deadline = qp.comp.rnr_deadline = qp.comp.probe_deadline = 0;
  qp.comp.retry_pending = qp.comp.probing = qp.comp.probe_sent = false;
  for (auto& r : qp.resp.res) {
    r.active = false;
    r.pending = 0;
  }
  qp.resp.out_head = qp.resp.out_tail = 0;
  qp.resp.reads_queued = 0;
  flush_recvs(eng, qp);
}

int Engine::post_send(Qp* qp, const SendWr* wr, const SendWr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    auto fail = [&](int err) {
      if (bad_wr) *bad_wr = wr;
      return err;
    };
    if (qp->state == QpState::kReset || qp->state == QpState::kInit || qp->state == QpState::kRtr)
      return fail(kErrInval);
    if (!opcode_allowed(qp->type, wr->opcode)) return fail(kErrInval);
    if (wr->num_sge > qp->cap.max_send_sge) return fail(kErrInval);
    if (qp->sq_tail - qp->sq_head == qp->sq_depth()) return fail(kErrNoMem);
    std::uint64_t length = 0;
    for (std::uint32_t i = 0; i < wr->num_sge; ++i) length += wr->sg_list[i].length;
    const bool is_inline = (wr->send_flags & kSendInline) != 0;
    const bool atomic = wr->opcode == WrOpcode::kCmpSwap || wr->opcode == WrOpcode::kFetchAdd;
    if (is_inline && (length > qp->cap.max_inline_data || atomic || wr->opcode == WrOpcode::kRead))
      return fail(kErrInval);
    if (atomic && (wr->num_sge != 1 || length != 8)) return fail(kErrInval);
    if (length > (1ull << 31)) return fail(kErrInval);
    // IBA keeps fewer than 2^23 PSNs outstanding: one message is at most 2^22 packets (1 GiB
    // at the smallest path MTU).
    if (qp->type != QpType::kUd && length > (std::uint64_t{qp->pmtu()} << 22))
      return fail(kErrInval);
    if (qp->type == QpType::kUd && (length > mtu_bytes(cfg_.max_mtu) || wr->ud.ah == nullptr))
      return fail(kErrInval);

    const std::uint32_t idx = qp->sq_slot(qp->sq_tail);
    SendWqe& w = qp->sq[idx];
    // A copy of a fresh WQE: a few vector moves (assigning SendWqe{} built it field by field).
    static const SendWqe kFresh{};
    w = kFresh;
    w.wr_id = wr->wr_id;
    w.opcode = wr->opcode;
    w.flags = wr->send_flags;
    w.length = length;
    w.imm = wr->imm_data;
    w.inv_rkey = wr->invalidate_rkey;
    if (atomic) {
      w.remote_addr = wr->atomic.remote_addr;
      w.rkey = wr->atomic.rkey;
      w.compare_add = wr->atomic.compare_add;
      w.swap = wr->atomic.swap;
    } else {
      w.remote_addr = wr->rdma.remote_addr;
      w.rkey = wr->rdma.rkey;
    }
    if (qp->type == QpType::kUd) {
      qp->sq_ah[idx] = *wr->ud.ah;
      w.ud_qpn = wr->ud.remote_qpn;
      w.ud_qkey = wr->ud.remote_qkey;
    }
    if (wr->opcode == WrOpcode::kRegMr) {
      w.compare_add = wr->reg.host ? wr->reg.host : wr->reg.addr;  // where the engine reaches it
      w.reg_key = wr->reg.mr_key;
      w.reg_variant = wr->reg.new_key_variant;
      w.reg_access = wr->reg.access;
      w.remote_addr = wr->reg.addr;
      w.length = wr->reg.length;
    }
    if (wr->opcode == WrOpcode::kLocalInv) w.inv_rkey = wr->invalidate_rkey;
    if (is_inline) {
      // Inline data is copied now: the caller may reuse its buffers when post_send returns.
      w.is_inline = true;
      std::uint8_t* dst = qp->sq_inline.data() + std::size_t{idx} * qp->cap.max_inline_data;
      for (std::uint32_t i = 0; i < wr->num_sge; ++i) {
        std::memcpy(dst, reinterpret_cast<const void*>(wr->sg_list[i].addr), wr->sg_list[i].length);
        dst += wr->sg_list[i].length;
      }
    } else {
      w.num_sge = wr->num_sge;
      std::copy_n(wr->sg_list, wr->num_sge,
                  qp->sq_sges.begin() + std::ptrdiff_t{idx} * qp->cap.max_send_sge);
    }
    ++qp->sq_tail;
    if (qp->state == QpState::kErr) {
      Stages::comp_wqe_done(*this, *qp, w, WcStatus::kWrFlushErr);
      qp->sq_head = qp->sq_tail;
      qp->req.next_wqe = qp->sq_tail;
    }
  }
  if (qp->state == QpState::kRts) Stages::schedule_send(*this, *qp);
  return kOk;
}

namespace {
int post_to_queue(RecvQueue& q, const RecvWr* wr, const RecvWr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    if (wr->num_sge > q.max_sge) {
      if (bad_wr) *bad_wr = wr;
      return kErrInval;
    }
    if (q.count() == q.depth()) {
      if (bad_wr) *bad_wr = wr;
      return kErrNoMem;
    }
    std::uint64_t length = 0;
    for (std::uint32_t i = 0; i < wr->num_sge; ++i) length += wr->sg_list[i].length;
    // A multi-message buffer: room for at least one message, offsets within 32 bits (Wc).
    if (wr->min_free != 0 && (wr->min_free > length || length > UINT32_MAX)) {
      if (bad_wr) *bad_wr = wr;
      return kErrInval;
    }
    const std::uint32_t idx = q.slot(q.tail);
    RecvWqe& r = q.wqes[idx];
    r.wr_id = wr->wr_id;
    r.num_sge = wr->num_sge;
    r.sge_base = idx * q.max_sge;
    r.length = length;
    r.min_free = wr->min_free;
    r.max_msgs = wr->max_msgs;
    std::copy_n(wr->sg_list, wr->num_sge, q.sges.begin() + r.sge_base);
    ++q.tail;
  }
  return kOk;
}
}  // namespace

int Engine::post_recv(Qp* qp, const RecvWr* wr, const RecvWr** bad_wr) {
  if (qp->srq != nullptr || qp->state == QpState::kReset) {
    if (bad_wr) *bad_wr = wr;
    return kErrInval;
  }
  const int rc = post_to_queue(qp->rq, wr, bad_wr);
  if (qp->state == QpState::kErr) Stages::flush_recvs(*this, *qp);
  return rc;
}

int Engine::post_srq_recv(Srq* srq, const RecvWr* wr, const RecvWr** bad_wr) {
  return post_to_queue(srq->rq, wr, bad_wr);
}

Engine::Stages::TxPacket Engine::Stages::tx_begin(Engine& eng, const Qp& qp,
                                                  std::span<std::uint8_t> slot,
                                                  const wire::PacketFields& f,
                                                  std::size_t payload) {
  TxPacket p{slot, 0, nullptr};
  if (qp.hdr.usable() && wire::fast_opcode(f.opcode)) {
    p.hdr = wire::write_masked_headers(qp.hdr, f, payload, slot.data());
    return p;
  }
  wire::FrameSpec& s = eng.tx_spec_ = qp.tx;
  p.spec = &s;
  s.opcode = f.opcode;
  s.se = f.se;
  s.ack_req = f.ack_req;
  s.psn = f.psn;
  s.ip_id = f.ip_id;
  s.reth = {f.reth_va, f.reth_rkey, f.reth_len};
  s.imm = f.imm;
  s.ieth_rkey = f.ieth_rkey;
  s.aeth = {f.aeth_syndrome, f.aeth_msn};
  p.hdr = wire::write_frame_headers(s, payload, slot);
  return p;
}

void Engine::Stages::tx_finish(Engine& eng, const Qp& qp, TxPacket& p, std::size_t payload) {
  tx_commit(eng, p.spec ? wire::finish_frame(*p.spec, p.hdr, payload, p.slot)
                        : wire::finish_masked(qp.hdr, p.hdr, payload, p.slot.data()));
}

void Engine::Stages::tx_finish_ext(Engine& eng, const Qp& qp, TxPacket& p,
                                   std::span<const TxSeg> ext) {
  if (p.spec)
    tx_commit_ext(eng, *p.spec, p.slot, p.hdr, ext);
  else
    tx_commit_pieces(eng, &qp.hdr, nullptr, p.slot, p.hdr, ext);
}

void Engine::Stages::tx_commit_ext(Engine& eng, const wire::FrameSpec& s,
                                   std::span<std::uint8_t> slot, std::size_t hdr,
                                   std::span<const TxSeg> ext) {
  tx_commit_pieces(eng, nullptr, &s, slot, hdr, ext);
}

void Engine::Stages::tx_commit_pieces(Engine& eng, const wire::PathTemplate* t,
                                      const wire::FrameSpec* s, std::span<std::uint8_t> slot,
                                      std::size_t hdr, std::span<const TxSeg> ext) {
  std::span<const std::uint8_t> pieces[TxRing::kMaxExt];
  std::size_t len = hdr;
  for (std::size_t i = 0; i < ext.size(); ++i) {
    pieces[i] = {ext[i].addr, ext[i].len};
    len += ext[i].len;
  }
  std::uint8_t* trailer_at = slot.data() + TxRing::kTrailerOff;
  const std::size_t trailer =
      t ? wire::finish_masked_pieces(*t, slot.first(hdr), {pieces, ext.size()}, trailer_at)
        : wire::finish_frame_pieces(*s, slot.first(hdr), {pieces, ext.size()}, trailer_at);
  eng.tx_.commit_ext(hdr, ext, trailer);
  eng.stats_.inc(Counter::kTxFrames);
  eng.stats_.inc(Counter::kTxBytes, len + trailer);
  eng.stats_.inc(Counter::kTxZeroCopyFrames);
}

}  // namespace roce::engine
