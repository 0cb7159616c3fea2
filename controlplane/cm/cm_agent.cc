#include "controlplane/cm/cm_agent.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "dataplane/wire/deth.h"

namespace roce::cm {

using namespace roce::engine;

namespace {

Mtu engine_mtu(std::uint8_t e, Mtu max) {
  const auto m = static_cast<Mtu>(std::clamp<std::uint8_t>(e, 1, 5));
  return std::min(m, max);
}

// splitmix64's finaliser: a bijection of 64 bits whose output bits each depend on all of
// the input's.
std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One direction's base: the messages the end with comm ID `from` sends to the one with `to`.
std::uint32_t sr_base(std::uint32_t from, std::uint32_t to) {
  return static_cast<std::uint32_t>(mix(std::uint64_t{from} << 32 | to) >> 32);
}

}  // namespace

SrIndexBase sr_index_base(std::uint32_t local_comm_id, std::uint32_t remote_comm_id) {
  return {sr_base(local_comm_id, remote_comm_id), sr_base(remote_comm_id, local_comm_id)};
}

CmAgent::CmAgent(Engine& eng, CmAgentConfig cfg, EventFn on_event)
    : eng_(eng), cfg_(std::move(cfg)), on_event_(std::move(on_event)) {
  if (eng_.config().selective_repeat) cfg_.selective_repeat = true;  // roced's `transport:` key
  pd_ = eng_.alloc_pd();
  scq_ = eng_.create_cq(cfg_.send_depth);
  rcq_ = eng_.create_cq(cfg_.recv_depth);
  if (pd_ == nullptr || scq_ == nullptr || rcq_ == nullptr)
    throw std::runtime_error("cm agent: cannot allocate the GSI resources");
  QpCap cap;
  cap.max_send_wr = cfg_.send_depth;
  cap.max_recv_wr = cfg_.recv_depth;
  cap.max_send_sge = 1;
  cap.max_recv_sge = 1;
  cap.max_inline_data = kMadSize;  // MADs go inline: no send buffers to manage
  qp1_ = eng_.create_qp(pd_, QpType::kUd, scq_, rcq_, cap, nullptr, true, wire::Qpn::kGsi);
  if (qp1_ == nullptr) throw std::runtime_error("cm agent: cannot create QP1");
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qkey = wire::kGsiQkey;  // IBA 13.4.6: the GSI's well-known Q_Key
  if (eng_.modify_qp(qp1_, a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey) != kOk)
    throw std::runtime_error("cm agent: QP1 to INIT failed");
  a.qp_state = QpState::kRtr;
  if (eng_.modify_qp(qp1_, a, kQpState) != kOk)
    throw std::runtime_error("cm agent: QP1 to RTR failed");
  a.qp_state = QpState::kRts;
  a.sq_psn = 0;
  if (eng_.modify_qp(qp1_, a, kQpState | kQpSqPsn) != kOk)
    throw std::runtime_error("cm agent: QP1 to RTS failed");

  rx_buf_.resize(std::size_t{cfg_.recv_depth} * kRecvSlot);
  mr_ = eng_.reg_mr(pd_, rx_buf_.data(), rx_buf_.size(), kAccessLocalWrite);
  if (mr_ == nullptr) throw std::runtime_error("cm agent: cannot register MAD buffers");
  for (std::uint32_t i = 0; i < cfg_.recv_depth; ++i)
    if (!post_recv(i)) throw std::runtime_error("cm agent: cannot post MAD buffers");

  CmCallbacks cb;
  cb.send_mad = [this](std::span<const std::uint8_t> mad, const MadAddr& to) { send(mad, to); };
  cb.on_event = [this](const CmEvent& ev) { on_cm_event(ev); };
  cb.modify_qp = [this](ConnId id, QpTransition t, const QpAttrs& q) { return modify(id, t, q); };
  cb.now = [this] { return TimePoint(cfg_.clock ? cfg_.clock() : now_ns_); };
  cm_ = std::make_unique<Cm>(cfg_.cm, std::move(cb));
}

CmAgent::~CmAgent() {
  cm_.reset();
  if (qp1_) eng_.destroy_qp(qp1_);
  if (mr_) eng_.dereg_mr(mr_);
  if (scq_) eng_.destroy_cq(scq_);
  if (rcq_) eng_.destroy_cq(rcq_);
  if (pd_) eng_.dealloc_pd(pd_);
}

Ipv6Addr CmAgent::local_gid() const {
  return cfg_.gid ? *cfg_.gid : wire::ipv4_mapped(eng_.config().ipv4);
}

bool CmAgent::post_recv(std::uint32_t slot) {
  Sge sge{reinterpret_cast<std::uint64_t>(rx_buf_.data() + std::size_t{slot} * kRecvSlot),
          static_cast<std::uint32_t>(kRecvSlot), mr_->key};
  RecvWr wr;
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const RecvWr* bad = nullptr;
  return eng_.post_recv(qp1_, &wr, &bad) == kOk;
}

void CmAgent::send(std::span<const std::uint8_t> mad, const MadAddr& to) {
  // Behind MADs already waiting, or when the send queue is full: wait, in order.
  if (tx_backlog_.empty() && post_mad(mad, to)) return;
  if (tx_backlog_.size() >= kMaxTxBacklog || mad.size() != kMadSize) {
    ++stats_.tx_dropped;  // the CM retransmits
    return;
  }
  PendingMad p;
  std::copy(mad.begin(), mad.end(), p.mad.begin());
  p.to = to;
  tx_backlog_.push_back(p);
  ++stats_.tx_queued;
}

bool CmAgent::post_mad(std::span<const std::uint8_t> mad, const MadAddr& to) {
  if (tx_outstanding_ >= cfg_.send_depth) return false;
  const std::optional<wire::MacAddr> mac =
      cfg_.resolve_mac ? cfg_.resolve_mac(to.gid) : std::nullopt;
  if (!mac) {
    ++stats_.tx_dropped;  // the CM retransmits; the neighbour may be known by then
    return true;
  }
  AddressVector av;
  av.dgid = to.gid;
  av.dmac = *mac;
  Sge sge{reinterpret_cast<std::uint64_t>(mad.data()), static_cast<std::uint32_t>(mad.size()), 0};
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = kSendInline | kSendSignaled;
  wr.ud.ah = &av;
  wr.ud.remote_qpn = to.qpn.raw();
  wr.ud.remote_qkey = wire::kGsiQkey;
  const SendWr* bad = nullptr;
  if (eng_.post_send(qp1_, &wr, &bad) != kOk) return false;
  ++tx_outstanding_;
  ++stats_.mads_tx;
  return true;
}

bool CmAgent::modify(ConnId id, QpTransition t, const QpAttrs& q) {
  Qp* qp = qp_of(id);
  // A released QP has nothing left to move to ERROR; RTR/RTS without a QP fail (REJ).
  if (qp == nullptr) return t == QpTransition::kError;
  QpAttr a;
  int rc = kOk;
  switch (t) {
    case QpTransition::kError:
      a.qp_state = QpState::kErr;
      rc = eng_.modify_qp(qp, a, kQpState);
      break;
    case QpTransition::kRtr: {
      if (qp->state == QpState::kReset) {
        a.qp_state = QpState::kInit;
        a.qp_access_flags = cfg_.qp_access;
        if (eng_.modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk) {
          rc = kErrInval;
          break;
        }
      }
      const std::optional<wire::MacAddr> mac =
          cfg_.resolve_mac ? cfg_.resolve_mac(q.remote_gid) : std::nullopt;
      if (!mac) {
        rc = kErrInval;
        break;
      }
      a.qp_state = QpState::kRtr;
      a.path_mtu = engine_mtu(q.path_mtu, eng_.config().max_mtu);
      a.dest_qp_num = q.remote_qpn.raw();
      a.rq_psn = q.rq_psn.raw();
      a.max_dest_rd_atomic = std::min<std::uint8_t>(q.max_dest_rd_atomic, 16);
      a.min_rnr_timer = q.min_rnr_timer;
      a.ah.dgid = q.remote_gid;
      a.ah.dmac = *mac;
      a.ah.hop_limit = q.hop_limit;
      a.ah.traffic_class = q.traffic_class;
      a.ah.flow_label = q.flow_label;
      std::uint32_t mask = kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn;
      if (qp->type == QpType::kRc) mask |= kQpMaxDestRdAtomic | kQpMinRnrTimer;
      rc = eng_.modify_qp(qp, a, mask);
      // Offered by the active side and accepted by the passive one (the ECE each sent, as
      // the CM kept it): on before any traffic. Otherwise go-back-N, also on a QP that had it
      // in an earlier connection.
      if (rc == kOk && qp->type == QpType::kRc) {
        const bool sr = cfg_.selective_repeat && ece_sr_on(q.local_ece, q.remote_ece);
        // The message indices start where both ends' comm IDs say (sr_index_base).
        if (sr || qp->req.sr)
          rc = eng_.set_selective_repeat(qp, sr,
                                         sr_index_base(id.v, cm_->remote_comm_id(id).value_or(0)));
        if (rc == kOk) ++(sr ? stats_.sr_connections : stats_.gbn_connections);
        if (rc == kOk && sr) eng_.count(Counter::kSrConnections);
      }
      break;
    }
    case QpTransition::kRts: {
      a.qp_state = QpState::kRts;
      a.sq_psn = q.sq_psn.raw();
      a.timeout = q.timeout;
      a.retry_cnt = q.retry_cnt;
      a.rnr_retry = q.rnr_retry;
      a.max_rd_atomic = std::min<std::uint8_t>(q.max_rd_atomic, 16);
      std::uint32_t mask = kQpState | kQpSqPsn;
      if (qp->type == QpType::kRc)
        mask |= kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic;
      rc = eng_.modify_qp(qp, a, mask);
      break;
    }
  }
  if (rc != kOk) ++stats_.qp_errors;
  return rc == kOk;
}

void CmAgent::on_cm_event(const CmEvent& ev) {
  switch (ev.type) {
    case CmEventType::kRejected:
    case CmEventType::kUnreachable:
    case CmEventType::kConnectError:
    case CmEventType::kTimewaitExit:
      qps_.erase(ev.id);
      break;
    default:
      break;
  }
  if (on_event_) on_event_(ev);
}

bool CmAgent::busy(const Qp* qp) const {
  for (const auto& [id, q] : qps_)
    if (q == qp && cm_->state(id) != ConnState::kTimewait && cm_->state(id) != ConnState::kIdle)
      return true;
  return false;
}

std::optional<ConnId> CmAgent::connect(Qp* qp, ConnectParams p) {
  if (qp == nullptr || (qp->type != QpType::kRc && qp->type != QpType::kUc) || busy(qp))
    return std::nullopt;
  p.qpn = wire::Qpn(qp->qpn);
  p.transport = qp->type == QpType::kRc ? TransportType::kRc : TransportType::kUc;
  p.path.local_gid = local_gid();
  if (p.path.remote_gid == Ipv6Addr{}) p.path.remote_gid = p.peer.gid;
  p.path_mtu = std::min(p.path_mtu, static_cast<std::uint8_t>(eng_.config().max_mtu));
  // Selective repeat is offered only by an owner that asks, on an RC QP, when allowed.
  if (ece_ours(p.ece) && (!cfg_.selective_repeat || qp->type != QpType::kRc))
    p.ece.options &= ~kEceSrBits;
  if (ece_ours(p.ece)) p.ece.options &= ~kEceSrAccept;  // a REQ offers, it cannot accept
  const std::optional<ConnId> id = cm_->connect(p);
  if (id) qps_[*id] = qp;
  return id;
}

CmStatus CmAgent::accept(ConnId id, Qp* qp, AcceptParams p) {
  if (qp == nullptr || busy(qp)) return CmStatus::kInvalidParam;
  p.qpn = wire::Qpn(qp->qpn);
  // The REP accepts selective repeat only when the REQ offered it, the owner accepts it and
  // it is allowed on this QP (ece_answer); it never echoes the offer.
  const std::optional<QpAttrs> req = cm_->qp_attrs(id);
  p.ece = ece_answer(req ? req->remote_ece : Ece{}, p.ece,
                     cfg_.selective_repeat && qp->type == QpType::kRc);
  qps_[id] = qp;
  const CmStatus s = cm_->accept(id, p);
  if (s != CmStatus::kOk) qps_.erase(id);
  return s;
}

CmStatus CmAgent::reject(ConnId id, RejReason reason, std::span<const std::uint8_t> private_data) {
  const CmStatus s = cm_->reject(id, reason, private_data);
  if (s == CmStatus::kOk) qps_.erase(id);
  return s;
}

std::size_t CmAgent::release(Qp* qp) {
  std::size_t n = 0;
  for (auto it = qps_.begin(); it != qps_.end();) {
    if (it->second != qp) {
      ++it;
      continue;
    }
    const ConnState s = cm_->state(it->first);
    if (s == ConnState::kEstablished || s == ConnState::kRepSent || s == ConnState::kMraRepRcvd)
      cm_->disconnect(it->first);  // moves the QP to ERROR while it is still bound
    it = qps_.erase(it);
    ++n;
  }
  return n;
}

Qp* CmAgent::qp_of(ConnId id) const {
  auto it = qps_.find(id);
  return it == qps_.end() ? nullptr : it->second;
}

void CmAgent::poll(std::uint64_t now_ns) {
  now_ns_ = now_ns;
  Wc wc[16];
  int n;
  while ((n = eng_.poll_cq(scq_, 16, wc)) > 0)
    tx_outstanding_ -= std::min<std::uint32_t>(tx_outstanding_, static_cast<std::uint32_t>(n));
  while (!tx_backlog_.empty() && post_mad(tx_backlog_.front().mad, tx_backlog_.front().to))
    tx_backlog_.pop_front();
  while ((n = eng_.poll_cq(rcq_, 16, wc)) > 0) {
    for (int i = 0; i < n; ++i) {
      const auto slot = static_cast<std::uint32_t>(wc[i].wr_id);
      const std::uint8_t* buf = rx_buf_.data() + std::size_t{slot} * kRecvSlot;
      if (wc[i].status == WcStatus::kSuccess && wc[i].byte_len == kRecvSlot) {
        // The GRH: an IPv6 header, or for IPv4 20 zero bytes and then the IPv4 header.
        MadAddr from;
        from.qpn = wire::Qpn(wc[i].src_qp);
        if ((buf[0] >> 4) == 6)
          std::memcpy(from.gid.b.data(), buf + 8, 16);
        else
          from.gid = wire::ipv4_mapped(Ipv4Addr{wire::load_be32(buf + 20 + 12)});
        ++stats_.mads_rx;
        cm_->on_mad(std::span<const std::uint8_t>(buf + kGrhSize, kMadSize), from);
      } else if (wc[i].status != WcStatus::kWrFlushErr) {
        ++stats_.rx_dropped;
      }
      if (wc[i].status != WcStatus::kWrFlushErr) post_recv(slot);
    }
  }
  cm_->on_timer(TimePoint(now_ns));
}

std::optional<std::uint64_t> CmAgent::next_deadline_ns() const {
  const std::optional<TimePoint> t = cm_->next_deadline();
  if (!t) return std::nullopt;
  return static_cast<std::uint64_t>(t->count());
}

bool CmAgent::drain(const std::function<void()>& pump, std::chrono::milliseconds budget,
                    std::chrono::milliseconds every) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next = start + every;
  while (cm_->disconnecting() > 0) {
    const auto t = Clock::now();
    if (t - start >= budget) return false;
    if (t >= next) {
      cm_->resend_dreqs();
      next = t + every;
    }
    pump();
  }
  return true;
}

}  // namespace roce::cm
