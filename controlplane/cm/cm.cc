#include "controlplane/cm/cm.h"

#include <sys/random.h>

#include <algorithm>
#include <cstring>
#include <random>

namespace roce::cm {

namespace {

template <std::size_t N>
bool copy_private(std::span<const std::uint8_t> in, PrivateData<N>& out, std::size_t at = 0) {
  if (in.size() > N - at) return false;
  std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
  return true;
}

template <std::size_t N>
std::vector<std::uint8_t> user_part(const PrivateData<N>& pd, std::size_t from = 0) {
  return {pd.begin() + static_cast<std::ptrdiff_t>(from), pd.end()};
}

/// REQ/SIDR_REQ wait before a retransmission (Linux cm.c): twice the packet life time plus the
/// peer's CM response time.
Duration req_interval(const CmConfig& cfg) {
  return 2 * iba_time(cfg.packet_life_time) + iba_time(cfg.cm_response_timeout);
}

bool is_passive_waiting(ConnState s) {
  return s == ConnState::kReqRcvd || s == ConnState::kMraReqSent;
}
bool is_rep_sent(ConnState s) { return s == ConnState::kRepSent || s == ConnState::kMraRepRcvd; }
bool is_req_sent(ConnState s) { return s == ConnState::kReqSent || s == ConnState::kMraReqRcvd; }

}  // namespace

std::uint8_t ack_timeout(std::uint8_t ca_ack_delay, std::uint8_t packet_life_time) {
  int t = packet_life_time + 1;  // the round trip is two packet life times: 2^(plt+1)
  const int d = ca_ack_delay;
  if (t >= d)
    t += d >= t - 1 ? 1 : 0;  // the delay adds up to another doubling when it is close
  else
    t = d + (t >= d - 1 ? 1 : 0);
  return static_cast<std::uint8_t>(std::min(t, 31));
}

Duration iba_time(std::uint8_t t) {
  return std::chrono::milliseconds(std::int64_t{1} << (t > 8 ? t - 8 : 0));
}

std::string_view to_string(ConnState s) {
  switch (s) {
    case ConnState::kIdle:
      return "idle";
    case ConnState::kReqSent:
      return "req-sent";
    case ConnState::kMraReqRcvd:
      return "mra-req-rcvd";
    case ConnState::kReqRcvd:
      return "req-rcvd";
    case ConnState::kMraReqSent:
      return "mra-req-sent";
    case ConnState::kRepSent:
      return "rep-sent";
    case ConnState::kMraRepRcvd:
      return "mra-rep-rcvd";
    case ConnState::kEstablished:
      return "established";
    case ConnState::kDreqSent:
      return "dreq-sent";
    case ConnState::kTimewait:
      return "timewait";
    case ConnState::kSidrReqSent:
      return "sidr-req-sent";
    case ConnState::kSidrReqRcvd:
      return "sidr-req-rcvd";
    case ConnState::kSidrRepSent:
      return "sidr-rep-sent";
  }
  return "unknown";
}

std::string_view to_string(CmEventType t) {
  switch (t) {
    case CmEventType::kConnectRequest:
      return "connect-request";
    case CmEventType::kEstablished:
      return "established";
    case CmEventType::kRejected:
      return "rejected";
    case CmEventType::kUnreachable:
      return "unreachable";
    case CmEventType::kConnectError:
      return "connect-error";
    case CmEventType::kDisconnected:
      return "disconnected";
    case CmEventType::kTimewaitExit:
      return "timewait-exit";
    case CmEventType::kSidrRequest:
      return "sidr-request";
    case CmEventType::kSidrReply:
      return "sidr-reply";
  }
  return "unknown";
}

std::string_view to_string(CmStatus s) {
  switch (s) {
    case CmStatus::kOk:
      return "ok";
    case CmStatus::kNoSuchConn:
      return "no such connection";
    case CmStatus::kBadState:
      return "not allowed in this state";
    case CmStatus::kPrivateDataTooLong:
      return "private data too long";
    case CmStatus::kInvalidParam:
      return "invalid parameter";
    case CmStatus::kQpTransitionFailed:
      return "QP transition failed";
  }
  return "unknown";
}

namespace {

std::uint64_t rotl(std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

// SipHash-2-4 of one 64-bit word under a 128-bit key (Aumasson and Bernstein's PRF).
std::uint64_t siphash(const std::array<std::uint64_t, 2>& k, std::uint64_t m) {
  std::uint64_t v0 = 0x736f6d6570736575ull ^ k[0], v1 = 0x646f72616e646f6dull ^ k[1];
  std::uint64_t v2 = 0x6c7967656e657261ull ^ k[0], v3 = 0x7465646279746573ull ^ k[1];
  auto round = [&] {
    v0 += v1, v1 = rotl(v1, 13), v1 ^= v0, v0 = rotl(v0, 32);
    v2 += v3, v3 = rotl(v3, 16), v3 ^= v2;
    v0 += v3, v3 = rotl(v3, 21), v3 ^= v0;
    v2 += v1, v1 = rotl(v1, 17), v1 ^= v2, v2 = rotl(v2, 32);
  };
  auto absorb = [&](std::uint64_t w) {
    v3 ^= w;
    round();
    round();
    v0 ^= w;
  };
  absorb(m);
  absorb(std::uint64_t{8} << 56);  // the length byte of an 8-byte message
  v2 ^= 0xFF;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

/// 128 bits from the kernel's CSPRNG (std::random_device's, which is getrandom too on Linux,
/// should the call be refused).
std::array<std::uint64_t, 2> random_key() {
  std::array<std::uint64_t, 2> k{};
  if (::getrandom(k.data(), sizeof k, 0) != static_cast<ssize_t>(sizeof k)) {
    std::random_device rd;
    for (auto& w : k) w = (std::uint64_t{rd()} << 32) | rd();
  }
  return k;
}

}  // namespace

Cm::Cm(CmConfig cfg, CmCallbacks cb)
    : cfg_(cfg),
      cb_(std::move(cb)),
      hash_{Hash::mix(std::uint64_t{cfg.seed} << 32 | cfg.hi_tid) ^ cfg.ca_guid},
      conns_(0, hash_),
      by_remote_(0, hash_),
      by_qp_(0, hash_),
      sidr_(0, hash_),
      id_key_(cfg.id_key != 0 ? std::array<std::uint64_t, 2>{cfg.id_key, Hash::mix(cfg.id_key)}
                              : random_key()),
      id_ctr_(cfg.id_key != 0 ? 1 : static_cast<std::uint32_t>(random_key()[0])) {}

std::uint64_t Cm::Hash::mix(std::uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::size_t Cm::Hash::operator()(const std::pair<std::uint32_t, MadAddr>& k) const {
  std::uint64_t lo, hi;
  std::memcpy(&lo, k.second.gid.b.data(), 8);
  std::memcpy(&hi, k.second.gid.b.data() + 8, 8);
  return mix(mix(mix(lo ^ seed) ^ hi) ^ (std::uint64_t{k.first} << 24 | k.second.qpn.raw()));
}

// ---- plumbing --------------------------------------------------------------------------------

void Cm::leave() {
  if (depth_ > 1) {
    --depth_;
    return;
  }
  // Outermost call: deliver in order. Callbacks may call into the Cm; what they queue is
  // delivered by this same loop (depth_ stays 1 while it runs).
  while (!outbox_.empty()) {
    auto item = std::move(outbox_.front());
    outbox_.pop_front();
    if (auto* m = std::get_if<OutMad>(&item)) {
      if (cb_.send_mad) cb_.send_mad(m->bytes, m->to);
    } else if (cb_.on_event) {
      cb_.on_event(std::get<CmEvent>(item));
    }
  }
  depth_ = 0;
}

ConnId Cm::new_id() {
  // A permutation of a counter under a random key (an 8-round Feistel network over the two
  // 16-bit halves, SipHash as the round function): IDs do not repeat before 2^32 more were
  // given, and one seen says nothing of the next (an off-path host that could guess a comm ID
  // could end the connection with one forged REJ or DREQ from its peer's address).
  for (;;) {
    const std::uint32_t x = id_ctr_++;
    std::uint32_t l = x >> 16, r = x & 0xFFFF;
    for (std::uint32_t round = 0; round < 8; ++round) {
      const std::uint32_t f =
          static_cast<std::uint32_t>(siphash(id_key_, std::uint64_t{round} << 32 | r)) & 0xFFFF;
      const std::uint32_t t = r;
      r = l ^ f;
      l = t;
    }
    const std::uint32_t id = l << 16 | r;
    if (id != 0 && !conns_.contains(id)) return ConnId{id};
  }
}

Cm::Conn* Cm::find(ConnId id) {
  auto it = conns_.find(id.v);
  return it == conns_.end() ? nullptr : &it->second;
}

const Cm::Conn* Cm::find(ConnId id) const {
  auto it = conns_.find(id.v);
  return it == conns_.end() ? nullptr : &it->second;
}

Cm::Conn* Cm::find_from(ConnId id, const MadAddr& from) {
  Conn* c = find(id);
  return c != nullptr && from_peer(*c, from) ? c : nullptr;
}

Cm::Conn* Cm::find_remote(std::uint32_t remote_comm_id, std::uint64_t remote_ca_guid) {
  const auto it = by_remote_.find({remote_comm_id, remote_ca_guid});
  return it == by_remote_.end() ? nullptr : find(ConnId{it->second});
}

void Cm::schedule(Conn& c) {
  std::optional<TimePoint> t = c.deadline;
  if (c.expires && (!t || *c.expires < *t)) t = c.expires;
  if (t == c.timer) return;
  if (c.timer) timers_.erase({*c.timer, c.id.v});
  c.timer = t;
  if (t) timers_.insert({*t, c.id.v});
}

bool Cm::make_room() {
  while (conns_.size() >= cfg_.max_connections && !sidr_answered_.empty()) {
    Conn* old = find(ConnId{sidr_answered_.front()});
    if (old != nullptr && old->state == ConnState::kSidrRepSent) {
      ++stats_.sidr_forgotten;
      erase(*old);  // pops it from sidr_answered_
    } else {
      sidr_answered_.pop_front();
    }
  }
  if (conns_.size() < cfg_.max_connections) return true;
  ++stats_.rejected_full;
  return false;
}

Cm::Conn& Cm::store(Conn&& c) {
  const std::uint32_t id = c.id.v;
  Conn& s = conns_.emplace(id, std::move(c)).first->second;
  if (!s.active && s.state == ConnState::kReqRcvd) {
    by_remote_[{s.remote_comm_id, s.remote_ca_guid}] = id;
    if (s.remote_ca_guid != 0) by_qp_.insert({{s.qp.remote_qpn.raw(), s.remote_ca_guid}, id});
  }
  if (s.state == ConnState::kSidrReqRcvd) sidr_[{s.remote_comm_id, s.peer}] = id;
  s.expires = now() + cfg_.half_open_timeout;
  schedule(s);
  return s;
}

void Cm::erase(Conn& c) {
  const std::uint32_t id = c.id.v;
  if (c.timer) timers_.erase({*c.timer, id});
  if (const auto it = by_remote_.find({c.remote_comm_id, c.remote_ca_guid});
      it != by_remote_.end() && it->second == id)
    by_remote_.erase(it);
  for (auto [it, end] = by_qp_.equal_range({c.qp.remote_qpn.raw(), c.remote_ca_guid}); it != end;
       ++it)
    if (it->second == id) {
      by_qp_.erase(it);
      break;
    }
  if (const auto it = sidr_.find({c.remote_comm_id, c.peer}); it != sidr_.end() && it->second == id)
    sidr_.erase(it);
  if (!sidr_answered_.empty() && sidr_answered_.front() == id) sidr_answered_.pop_front();
  conns_.erase(id);
}

MadBuf Cm::send(const MadAddr& to, std::uint64_t tid, const CmMsg& msg, std::uint32_t attr_mod) {
  MadHeader h;
  h.tid = tid;
  h.attr_mod = attr_mod;
  MadBuf b = encode(h, msg);
  outbox_.emplace_back(OutMad{b, to});
  ++stats_.mads_tx;
  return b;
}

CmEvent Cm::event(CmEventType t, const Conn& c) const {
  CmEvent ev;
  ev.type = t;
  ev.id = c.id;
  ev.service_id = c.service_id;
  ev.peer = c.peer;
  ev.qp = c.qp;
  return ev;
}

bool Cm::modify(const Conn& c, QpTransition t) {
  return !cb_.modify_qp || cb_.modify_qp(c.id, t, c.qp);
}

void Cm::arm(Conn& c, const MadBuf& mad, Duration interval) {
  c.retx = mad;
  c.retries_left = c.max_cm_retries;
  c.interval = interval;
  set_deadline(c, now() + interval);
}

Duration Cm::timewait_of(const Conn& c) const {
  if (cfg_.timewait) return *cfg_.timewait;
  const std::uint8_t t = c.qp.timeout != 0 ? c.qp.timeout : cfg_.packet_life_time + 1;
  return std::min(iba_time(t), cfg_.half_open_timeout);
}

void Cm::enter_timewait(Conn& c) {
  c.state = ConnState::kTimewait;
  c.expires.reset();
  set_deadline(c, now() + timewait_of(c));
}

void Cm::send_rej(const MadAddr& to, std::uint64_t tid, std::uint32_t local, std::uint32_t remote,
                  MsgKind kind, RejReason reason, std::span<const std::uint8_t> pd) {
  RejMsg rej;
  rej.local_comm_id = local;
  rej.remote_comm_id = remote;
  rej.message_rejected = kind;
  rej.reason = reason;
  copy_private(pd, rej.private_data);
  send(to, tid, rej);
}

// ---- API -------------------------------------------------------------------------------------

std::optional<ConnId> Cm::connect(const ConnectParams& p) {
  Batch batch(*this);
  const std::size_t user_max = p.cma ? kReqUserPrivateSize : kReqPrivateSize;
  if (p.private_data.size() > user_max || mtu_bytes(p.path_mtu) == 0 || p.retry_count > 7 ||
      p.rnr_retry_count > 7 || !make_room())
    return std::nullopt;
  Conn c;
  c.id = new_id();
  c.active = true;
  c.service_id = p.service_id;
  c.peer = p.peer;
  c.req_tid = new_tid();
  c.max_cm_retries = cfg_.max_cm_retries;
  c.base_interval = req_interval(cfg_);

  ReqMsg req;
  req.local_comm_id = c.id.v;
  req.service_id = p.service_id;
  req.local_ca_guid = cfg_.ca_guid;
  req.local_qpn = p.qpn;
  req.responder_resources = p.responder_resources;
  req.initiator_depth = p.initiator_depth;
  req.remote_cm_response_timeout = cfg_.cm_response_timeout;
  req.transport_type = p.transport;
  req.e2e_flow_control = true;
  req.starting_psn = p.starting_psn;
  req.local_cm_response_timeout = cfg_.cm_response_timeout;
  req.retry_count = p.retry_count;
  req.path_mtu = p.path_mtu;
  req.rnr_retry_count = p.rnr_retry_count;
  req.max_cm_retries = cfg_.max_cm_retries;
  req.srq = p.srq;
  req.primary = p.path;
  // RoCE: permissive LIDs unless the peer is on the subnet (hop limit <= 1).
  req.primary.subnet_local = p.path.hop_limit <= 1;
  req.primary.local_lid = req.primary.remote_lid = req.primary.subnet_local ? 0 : 0xFFFF;
  req.primary.local_ack_timeout = ack_timeout(cfg_.ca_ack_delay, cfg_.packet_life_time);
  req.alternate.local_lid = req.alternate.remote_lid = 0;  // no alternate path
  req.alternate.hop_limit = 0;
  // ECE (kernel cm.c): the vendor ID in the REQ, the options in the AttributeModifier.
  const Ece ece = p.ece.vendor_id != 0 ? Ece{p.ece.vendor_id & 0xFFFFFF, p.ece.options} : Ece{};
  req.vendor_id = ece.vendor_id;
  c.qp.local_ece = ece;
  std::size_t at = 0;
  if (p.cma) {
    encode_cma_header(
        *p.cma, std::span<std::uint8_t, kCmaHeaderSize>(req.private_data.data(), kCmaHeaderSize));
    at = kCmaHeaderSize;
  }
  copy_private(p.private_data, req.private_data, at);

  QpAttrs& q = c.qp;
  q.local_qpn = p.qpn;
  q.rq_psn = p.starting_psn;  // Linux: the REQ's Starting PSN is the active side's rq_psn
  q.path_mtu = p.path_mtu;
  q.retry_cnt = p.retry_count;
  q.transport = p.transport;
  q.min_rnr_timer = 0;
  q.local_gid = p.path.local_gid;
  q.remote_gid = p.path.remote_gid;
  q.hop_limit = p.path.hop_limit;
  q.traffic_class = p.path.traffic_class;
  q.flow_label = p.path.flow_label;
  q.timeout = req.primary.local_ack_timeout;

  c.state = ConnState::kReqSent;
  const ConnId id = c.id;
  Conn& stored = store(std::move(c));
  arm(stored, send(stored.peer, stored.req_tid, req, ece.options), stored.base_interval);
  return id;
}

CmStatus Cm::accept(ConnId id, const AcceptParams& p) {
  Batch batch(*this);
  Conn* c = find(id);
  if (c == nullptr) return CmStatus::kNoSuchConn;
  if (c->active || !is_passive_waiting(c->state)) return CmStatus::kBadState;
  if (p.private_data.size() > kRepPrivateSize) return CmStatus::kPrivateDataTooLong;
  if (p.rnr_retry_count > 7) return CmStatus::kInvalidParam;

  // Responder resources / initiator depth swap: ours may not exceed what the peer will use.
  const std::uint8_t rr = std::min(p.responder_resources, c->req.initiator_depth);
  const std::uint8_t depth = std::min(p.initiator_depth, c->req.responder_resources);
  c->qp.local_qpn = p.qpn;
  c->qp.rq_psn = p.starting_psn;  // Linux: the REP's Starting PSN is the passive side's rq_psn
  c->qp.max_dest_rd_atomic = rr;
  c->qp.max_rd_atomic = depth;
  // ECE: answered only to a REQ of the same vendor, with the owner's options; the QP sees the
  // peer's only then (librdmacm's init_ece clears them on a vendor mismatch).
  Ece ece;
  if (p.ece.vendor_id != 0 && (p.ece.vendor_id & 0xFFFFFF) == c->qp.remote_ece.vendor_id)
    ece = {c->qp.remote_ece.vendor_id, p.ece.options};
  else
    c->qp.remote_ece = {};
  c->qp.local_ece = ece;

  // The QP must be ready before the REP leaves: data may follow the REP immediately.
  if (!modify(*c, QpTransition::kRtr) || !modify(*c, QpTransition::kRts)) {
    modify(*c, QpTransition::kError);
    send_rej(c->peer, c->req_tid, c->id.v, c->remote_comm_id, MsgKind::kReq,
             RejReason::kNoResources);
    erase(*c);
    return CmStatus::kQpTransitionFailed;
  }

  RepMsg rep;
  rep.local_comm_id = c->id.v;
  rep.remote_comm_id = c->remote_comm_id;
  rep.local_qpn = p.qpn;
  rep.starting_psn = p.starting_psn;
  rep.responder_resources = rr;
  rep.initiator_depth = depth;
  rep.target_ack_delay = cfg_.ca_ack_delay;
  rep.failover_accepted = 0;
  rep.e2e_flow_control = true;
  rep.rnr_retry_count = p.rnr_retry_count;
  rep.srq = p.srq;
  rep.local_ca_guid = cfg_.ca_guid;
  rep.vendor_id = ece.vendor_id;
  copy_private(p.private_data, rep.private_data);
  c->state = ConnState::kRepSent;
  c->last_reply = send(c->peer, c->req_tid, rep, ece.options);
  arm(*c, c->last_reply, c->base_interval);
  return CmStatus::kOk;
}

CmStatus Cm::reject(ConnId id, RejReason reason, std::span<const std::uint8_t> private_data) {
  Batch batch(*this);
  Conn* c = find(id);
  if (c == nullptr) return CmStatus::kNoSuchConn;
  if (c->active && (c->state == ConnState::kReqSent || c->state == ConnState::kMraReqRcvd)) {
    // Our own REQ given up before an answer (rdma_destroy_id of a connecting id): as Linux's
    // cm_destroy_id does, a REJ "timeout" naming our CA GUID, so the peer frees what the REQ
    // holds at once instead of waiting out its REP retries. The reason asked for does not apply.
    RejMsg rej;
    rej.local_comm_id = c->id.v;
    rej.remote_comm_id = c->remote_comm_id;
    rej.message_rejected = MsgKind::kOther;
    rej.reason = RejReason::kTimeout;
    rej.reject_info_length = 8;
    for (int i = 0; i < 8; ++i)
      rej.ari[static_cast<std::size_t>(i)] =
          static_cast<std::uint8_t>(cfg_.ca_guid >> (56 - 8 * i));
    send(c->peer, c->req_tid, rej);
    erase(*c);
    return CmStatus::kOk;
  }
  if (c->active || !is_passive_waiting(c->state)) return CmStatus::kBadState;
  if (private_data.size() > kRejPrivateSize) return CmStatus::kPrivateDataTooLong;
  send_rej(c->peer, c->req_tid, c->id.v, c->remote_comm_id, MsgKind::kReq, reason, private_data);
  erase(*c);
  return CmStatus::kOk;
}

CmStatus Cm::notify_established(ConnId id) {
  Batch batch(*this);
  Conn* c = find(id);
  if (c == nullptr) return CmStatus::kNoSuchConn;
  if (c->state == ConnState::kEstablished) return CmStatus::kOk;
  if (c->active || !is_rep_sent(c->state)) return CmStatus::kBadState;
  establish(*c);
  return CmStatus::kOk;
}

void Cm::establish(Conn& c) {
  c.state = ConnState::kEstablished;
  c.expires.reset();
  disarm(c);
  emit(event(CmEventType::kEstablished, c));
}

CmStatus Cm::disconnect(ConnId id, std::span<const std::uint8_t> private_data) {
  Batch batch(*this);
  Conn* c = find(id);
  if (c == nullptr) return CmStatus::kNoSuchConn;
  if (c->state == ConnState::kDreqSent) return CmStatus::kOk;
  // Linux allows a DREQ only when established; a passive side still waiting for its RTU has a
  // working QP too, so it may disconnect as well.
  if (c->state != ConnState::kEstablished && !is_rep_sent(c->state)) return CmStatus::kBadState;
  if (private_data.size() > kDreqPrivateSize) return CmStatus::kPrivateDataTooLong;
  modify(*c, QpTransition::kError);
  DreqMsg dreq;
  dreq.local_comm_id = c->id.v;
  dreq.remote_comm_id = c->remote_comm_id;
  dreq.remote_qpn = c->qp.remote_qpn;
  copy_private(private_data, dreq.private_data);
  c->state = ConnState::kDreqSent;
  c->expires = now() + cfg_.half_open_timeout;
  arm(*c, send(c->peer, new_tid(), dreq), c->base_interval);
  return CmStatus::kOk;
}

std::size_t Cm::disconnecting() const {
  return static_cast<std::size_t>(std::count_if(conns_.begin(), conns_.end(), [](const auto& kv) {
    return kv.second.state == ConnState::kDreqSent;
  }));
}

std::size_t Cm::resend_dreqs() {
  Batch batch(*this);
  std::size_t n = 0;
  for (auto& [id, c] : conns_) {
    if (c.state != ConnState::kDreqSent) continue;
    ++stats_.retransmits;
    ++stats_.mads_tx;
    outbox_.emplace_back(OutMad{c.retx, c.peer});
    ++n;
  }
  return n;
}

std::optional<ConnId> Cm::sidr_resolve(const SidrParams& p) {
  Batch batch(*this);
  const std::size_t at = p.cma ? kCmaHeaderSize : 0;
  if (p.private_data.size() > kSidrReqPrivateSize - at || !make_room()) return std::nullopt;
  Conn c;
  c.id = new_id();
  c.active = true;
  c.service_id = p.service_id;
  c.peer = p.peer;
  c.req_tid = new_tid();
  c.max_cm_retries = cfg_.max_cm_retries;
  c.base_interval = req_interval(cfg_);
  SidrReqMsg m;
  m.request_id = c.id.v;
  m.service_id = p.service_id;
  if (p.cma)
    encode_cma_header(
        *p.cma, std::span<std::uint8_t, kCmaHeaderSize>(m.private_data.data(), kCmaHeaderSize));
  copy_private(p.private_data, m.private_data, at);
  c.state = ConnState::kSidrReqSent;
  const ConnId id = c.id;
  Conn& stored = store(std::move(c));
  arm(stored, send(stored.peer, stored.req_tid, m), stored.base_interval);
  return id;
}

CmStatus Cm::sidr_accept(ConnId id, Qpn qpn, std::uint32_t qkey,
                         std::span<const std::uint8_t> private_data) {
  Batch batch(*this);
  Conn* c = find(id);
  if (c == nullptr) return CmStatus::kNoSuchConn;
  if (c->state != ConnState::kSidrReqRcvd) return CmStatus::kBadState;
  if (private_data.size() > kSidrRepPrivateSize) return CmStatus::kPrivateDataTooLong;
  SidrRepMsg m;
  m.request_id = c->remote_comm_id;
  m.status = SidrStatus::kSuccess;
  m.qpn = qpn;
  m.qkey = qkey;
  m.service_id = c->service_id;
  copy_private(private_data, m.private_data);
  answered_sidr(*c, send(c->peer, c->req_tid, m));
  return CmStatus::kOk;
}

CmStatus Cm::sidr_reject(ConnId id, SidrStatus status) {
  Batch batch(*this);
  Conn* c = find(id);
  if (c == nullptr) return CmStatus::kNoSuchConn;
  if (c->state != ConnState::kSidrReqRcvd) return CmStatus::kBadState;
  if (status == SidrStatus::kSuccess) return CmStatus::kInvalidParam;
  SidrRepMsg m;
  m.request_id = c->remote_comm_id;
  m.status = status;
  m.service_id = c->service_id;
  answered_sidr(*c, send(c->peer, c->req_tid, m));
  return CmStatus::kOk;
}

void Cm::answered_sidr(Conn& c, const MadBuf& rep) {
  // Kept, as Linux keeps a SIDR exchange it answered: a repeated SIDR_REQ (our SIDR_REP was
  // lost) gets the same SIDR_REP from here, not a second request to the application.
  c.state = ConnState::kSidrRepSent;
  c.last_reply = rep;
  c.expires.reset();
  set_deadline(c, now() + (cfg_.sidr_keep ? *cfg_.sidr_keep : 2 * req_interval(cfg_)));
  sidr_answered_.push_back(c.id.v);
}

ConnState Cm::state(ConnId id) const {
  const Conn* c = find(id);
  return c == nullptr ? ConnState::kIdle : c->state;
}

std::optional<QpAttrs> Cm::qp_attrs(ConnId id) const {
  const Conn* c = find(id);
  if (c == nullptr) return std::nullopt;
  return c->qp;
}

std::optional<std::uint32_t> Cm::remote_comm_id(ConnId id) const {
  const Conn* c = find(id);
  if (c == nullptr) return std::nullopt;
  return c->remote_comm_id;
}

// ---- received MADs ---------------------------------------------------------------------------

MadError Cm::on_mad(std::span<const std::uint8_t> mad, const MadAddr& from) {
  Batch batch(*this);
  ++stats_.mads_rx;
  const DecodedMad d = decode(mad);
  if (!d.ok()) {
    ++stats_.mads_rx_bad;
    return d.error;
  }
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, ReqMsg>) on_req(d.hdr, m, from);
        if constexpr (std::is_same_v<T, MraMsg>) on_mra(m, from);
        if constexpr (std::is_same_v<T, RejMsg>) on_rej(m, from);
        if constexpr (std::is_same_v<T, RepMsg>) on_rep(d.hdr, m, from);
        if constexpr (std::is_same_v<T, RtuMsg>) on_rtu(m, from);
        if constexpr (std::is_same_v<T, DreqMsg>) on_dreq(d.hdr, m, from);
        if constexpr (std::is_same_v<T, DrepMsg>) on_drep(m, from);
        if constexpr (std::is_same_v<T, SidrReqMsg>) on_sidr_req(d.hdr, m, from);
        if constexpr (std::is_same_v<T, SidrRepMsg>) on_sidr_rep(m, from);
      },
      d.msg);
  return MadError::kOk;
}

void Cm::on_req(const MadHeader& h, const ReqMsg& m, const MadAddr& from) {
  // A retransmitted REQ of a connection we already know (cm.c cm_dup_req_handler).
  if (Conn* dup = find_remote(m.local_comm_id, m.local_ca_guid)) {
    ++stats_.duplicates;
    switch (dup->state) {
      case ConnState::kReqRcvd: {
        // The application has not answered yet: ask the peer for more time.
        MraMsg mra;
        mra.local_comm_id = dup->id.v;
        mra.remote_comm_id = dup->remote_comm_id;
        mra.message_mraed = MsgKind::kReq;
        mra.service_timeout = cfg_.mra_service_timeout;
        dup->last_reply = send(dup->peer, dup->req_tid, mra);
        dup->state = ConnState::kMraReqSent;
        break;
      }
      case ConnState::kMraReqSent:
      case ConnState::kRepSent:
      case ConnState::kMraRepRcvd:
        // Our MRA or REP was lost: repeat it now rather than wait for the REP timer.
        outbox_.emplace_back(OutMad{dup->last_reply, dup->peer});
        ++stats_.mads_tx;
        break;
      case ConnState::kTimewait:
        send_rej(from, h.tid, dup->id.v, m.local_comm_id, MsgKind::kReq, RejReason::kStaleConn);
        break;
      default:
        break;  // established or disconnecting: the REQ is old news
    }
    return;
  }
  // A REQ from a QP we still remember under another connection: a stale connection (cm.c).
  if (m.local_ca_guid != 0 && by_qp_.contains({m.local_qpn.raw(), m.local_ca_guid})) {
    send_rej(from, h.tid, 0, m.local_comm_id, MsgKind::kReq, RejReason::kStaleConn);
    return;
  }
  auto rej = [&](RejReason reason) {
    send_rej(from, h.tid, 0, m.local_comm_id, MsgKind::kReq, reason);
  };
  if (!listeners_.contains(m.service_id)) return rej(RejReason::kInvalidServiceId);
  if (m.transport_type != TransportType::kRc && m.transport_type != TransportType::kUc)
    return rej(RejReason::kInvalidTransportType);
  // The passive QP takes the REQ's MTU as it is (roce-wire-reference gotcha 13): refuse rather
  // than program an MTU the link cannot carry.
  if (mtu_bytes(m.path_mtu) == 0 || m.path_mtu > cfg_.max_path_mtu)
    return rej(RejReason::kInvalidMtu);
  std::optional<CmaHeader> cma;
  if (is_ip_cm_service(m.service_id)) {
    cma = decode_cma_header(
        std::span<const std::uint8_t, kCmaHeaderSize>(m.private_data.data(), kCmaHeaderSize));
    if (!cma) return rej(RejReason::kConsumerDefined);  // what cma.c's refusal turns into
  }
  if (!make_room()) return rej(RejReason::kNoResources);  // IBA 12.6.7.2: "no resources"

  Conn c;
  c.id = new_id();
  c.active = false;
  c.state = ConnState::kReqRcvd;
  c.remote_comm_id = m.local_comm_id;
  c.remote_ca_guid = m.local_ca_guid;
  c.service_id = m.service_id;
  c.peer = from;
  c.req_tid = h.tid;
  c.req = m;
  c.max_cm_retries = m.max_cm_retries;
  c.base_interval = iba_time(m.local_cm_response_timeout);
  QpAttrs& q = c.qp;
  q.remote_qpn = m.local_qpn;
  q.sq_psn = m.starting_psn;  // we send from the PSN the active side expects
  q.path_mtu = m.path_mtu;
  q.retry_cnt = m.retry_count;
  q.rnr_retry = m.rnr_retry_count;
  q.min_rnr_timer = 0;
  q.timeout = m.primary.local_ack_timeout;
  q.max_dest_rd_atomic = m.initiator_depth;
  q.max_rd_atomic = m.responder_resources;
  q.pkey = m.pkey;
  q.transport = m.transport_type;
  q.local_gid = m.primary.remote_gid;
  q.remote_gid = m.primary.local_gid;
  q.hop_limit = m.primary.hop_limit;
  q.traffic_class = m.primary.traffic_class;
  q.flow_label = m.primary.flow_label;
  // A vendor ID of 0 means no ECE, whatever the AttributeModifier says.
  q.remote_ece = m.vendor_id != 0 ? Ece{m.vendor_id, h.attr_mod} : Ece{};
  Conn& stored = store(std::move(c));

  CmEvent ev = event(CmEventType::kConnectRequest, stored);
  ev.cma = cma;
  ev.private_data = user_part(m.private_data, cma ? kCmaHeaderSize : 0);
  emit(std::move(ev));
}

void Cm::on_mra(const MraMsg& m, const MadAddr& from) {
  Conn* c = find_from(ConnId{m.remote_comm_id}, from);
  const bool for_req = c != nullptr && is_req_sent(c->state) && m.message_mraed == MsgKind::kReq;
  const bool for_rep = c != nullptr && is_rep_sent(c->state) && m.message_mraed == MsgKind::kRep;
  if (!for_req && !for_rep) {
    ++stats_.mads_rx_ignored;
    return;
  }
  // The peer needs up to its service timeout: wait that long (plus a round trip) before each
  // further retransmission, as ib_modify_mad() does for Linux.
  c->state = for_req ? ConnState::kMraReqRcvd : ConnState::kMraRepRcvd;
  c->interval = iba_time(m.service_timeout) + iba_time(cfg_.packet_life_time + 1);
  set_deadline(*c, now() + c->interval);
}

void Cm::on_rej(const RejMsg& m, const MadAddr& from) {
  Conn* c = nullptr;
  bool ours = false;
  if (m.reason == RejReason::kTimeout && m.reject_info_length >= 8) {
    // A requester that gave its REQ up (Linux's cm_destroy_id, our reject() of an active
    // connection) does not know our comm ID: it names its own and its CA GUID (in the ARI),
    // the pair a REQ is remembered by (Linux's cm_acquire_rejected_id).
    std::uint64_t guid = 0;
    for (std::size_t i = 0; i < 8; ++i) guid = guid << 8 | m.ari[i];
    c = find_remote(m.local_comm_id, guid);
    ours = c != nullptr && !c->active && from_peer(*c, from);
  }
  if (!ours) {
    c = find_from(ConnId{m.remote_comm_id}, from);
    // Whose REJ it is (Linux's cm_acquire_rejected_id): the REJ of our REQ comes before we
    // know the peer's comm ID (its own may be new, or 0), so it is taken in REQ-sent states
    // only; any other names the peer's comm ID we know.
    ours = c != nullptr && (m.message_rejected == MsgKind::kReq
                                ? is_req_sent(c->state)
                                : c->remote_comm_id != 0 && c->remote_comm_id == m.local_comm_id);
  }
  if (!ours) {
    ++stats_.mads_rx_ignored;
    return;
  }
  const ConnState st = c->state;
  const bool qp_live = is_rep_sent(st) || st == ConnState::kEstablished;  // in RTR/RTS
  if (!qp_live && !is_req_sent(st) && !is_passive_waiting(st)) {
    ++stats_.mads_rx_ignored;  // disconnecting, timewait, SIDR: nothing to reject
    return;
  }
  if (qp_live) modify(*c, QpTransition::kError);
  CmEvent ev = event(CmEventType::kRejected, *c);
  ev.reason = m.reason;
  ev.private_data = user_part(m.private_data);
  emit(std::move(ev));
  // A stale-connection REJ means the peer remembers our QP: remember it too (cm.c). So does
  // a connection that was up.
  if (m.reason == RejReason::kStaleConn || st == ConnState::kEstablished)
    enter_timewait(*c);
  else
    erase(*c);
}

void Cm::on_rep(const MadHeader& h, const RepMsg& m, const MadAddr& from) {
  Conn* c = find_from(ConnId{m.remote_comm_id}, from);
  if (c == nullptr || !c->active) {
    ++stats_.mads_rx_ignored;
    return;
  }
  if (c->state == ConnState::kEstablished && m.local_comm_id == c->remote_comm_id) {
    // Our RTU was lost: the peer repeats its REP; repeat the RTU.
    ++stats_.duplicates;
    outbox_.emplace_back(OutMad{c->last_reply, c->peer});
    ++stats_.mads_tx;
    return;
  }
  if (!is_req_sent(c->state)) {
    ++stats_.mads_rx_ignored;
    return;
  }
  c->remote_comm_id = m.local_comm_id;
  c->remote_ca_guid = m.local_ca_guid;
  QpAttrs& q = c->qp;
  q.remote_qpn = m.local_qpn;
  if (c->remote_ca_guid != 0) by_qp_.insert({{q.remote_qpn.raw(), c->remote_ca_guid}, c->id.v});
  q.sq_psn = m.starting_psn;  // we send from the PSN the passive side expects
  q.max_dest_rd_atomic = m.initiator_depth;
  q.max_rd_atomic = m.responder_resources;
  q.rnr_retry = m.rnr_retry_count;
  q.min_rnr_timer = 0;
  // The REP's Target ACK Delay replaces our guess of the peer's ACK delay.
  q.timeout = ack_timeout(m.target_ack_delay, cfg_.packet_life_time);
  q.remote_ece = m.vendor_id != 0 ? Ece{m.vendor_id, h.attr_mod} : Ece{};
  disarm(*c);
  if (!modify(*c, QpTransition::kRtr) || !modify(*c, QpTransition::kRts)) {
    modify(*c, QpTransition::kError);
    send_rej(c->peer, c->req_tid, c->id.v, c->remote_comm_id, MsgKind::kRep,
             RejReason::kConsumerDefined);
    CmEvent ev = event(CmEventType::kConnectError, *c);
    emit(std::move(ev));
    erase(*c);
    return;
  }
  RtuMsg rtu;
  rtu.local_comm_id = c->id.v;
  rtu.remote_comm_id = c->remote_comm_id;
  // The event goes out before the RTU: the owner may start posting as soon as it sees it.
  CmEvent ev = event(CmEventType::kEstablished, *c);
  ev.private_data = user_part(m.private_data);
  c->state = ConnState::kEstablished;
  c->expires.reset();
  schedule(*c);
  emit(std::move(ev));
  c->last_reply = send(c->peer, c->req_tid, rtu);
}

void Cm::on_rtu(const RtuMsg& m, const MadAddr& from) {
  Conn* c = find_from(ConnId{m.remote_comm_id}, from);
  if (c == nullptr || c->active || !is_rep_sent(c->state) || c->remote_comm_id != m.local_comm_id) {
    ++stats_.mads_rx_ignored;
    return;
  }
  establish(*c);
}

void Cm::on_dreq(const MadHeader& h, const DreqMsg& m, const MadAddr& from) {
  Conn* c = find(ConnId{m.remote_comm_id});
  if (c != nullptr && !from_peer(*c, from)) {  // another host naming our connection
    ++stats_.mads_rx_ignored;
    return;
  }
  if (c == nullptr || c->remote_comm_id != m.local_comm_id) {
    // Unknown connection: answer anyway so that the peer stops retransmitting (cm.c).
    DrepMsg drep;
    drep.local_comm_id = m.remote_comm_id;
    drep.remote_comm_id = m.local_comm_id;
    send(from, h.tid, drep);
    return;
  }
  // Linux ignores a DREQ naming another QP than ours.
  if (c->qp.local_qpn != m.remote_qpn) {
    ++stats_.mads_rx_ignored;
    return;
  }
  DrepMsg drep;
  drep.local_comm_id = c->id.v;
  drep.remote_comm_id = c->remote_comm_id;
  switch (c->state) {
    case ConnState::kEstablished:
    case ConnState::kRepSent:
    case ConnState::kMraRepRcvd:
    case ConnState::kDreqSent: {
      // (kDreqSent: both sides disconnect at once; the DREP answers both.)
      if (c->state != ConnState::kDreqSent) modify(*c, QpTransition::kError);
      send(c->peer, h.tid, drep);
      CmEvent ev = event(CmEventType::kDisconnected, *c);
      ev.remote = true;
      ev.private_data = user_part(m.private_data);
      emit(std::move(ev));
      enter_timewait(*c);
      break;
    }
    case ConnState::kTimewait:
      ++stats_.duplicates;  // our DREP was lost
      send(c->peer, h.tid, drep);
      break;
    default:
      ++stats_.mads_rx_ignored;
      break;
  }
}

void Cm::on_drep(const DrepMsg& m, const MadAddr& from) {
  Conn* c = find_from(ConnId{m.remote_comm_id}, from);
  if (c == nullptr || c->state != ConnState::kDreqSent || c->remote_comm_id != m.local_comm_id) {
    ++stats_.mads_rx_ignored;
    return;
  }
  CmEvent ev = event(CmEventType::kDisconnected, *c);
  ev.private_data = user_part(m.private_data);
  emit(std::move(ev));
  enter_timewait(*c);
}

void Cm::on_sidr_req(const MadHeader& h, const SidrReqMsg& m, const MadAddr& from) {
  if (const auto it = sidr_.find({m.request_id, from}); it != sidr_.end()) {
    ++stats_.duplicates;
    Conn* c = find(ConnId{it->second});
    if (c != nullptr && c->state == ConnState::kSidrRepSent) {  // our SIDR_REP was lost
      outbox_.emplace_back(OutMad{c->last_reply, c->peer});
      ++stats_.mads_tx;
    }
    return;  // (kSidrReqRcvd: still waiting for the application)
  }
  auto refuse = [&](SidrStatus status) {
    SidrRepMsg rep;
    rep.request_id = m.request_id;
    rep.status = status;
    rep.service_id = m.service_id;
    send(from, h.tid, rep);
  };
  if (!listeners_.contains(m.service_id)) return refuse(SidrStatus::kUnsupported);
  std::optional<CmaHeader> cma;
  if (is_ip_cm_service(m.service_id)) {
    cma = decode_cma_header(
        std::span<const std::uint8_t, kCmaHeaderSize>(m.private_data.data(), kCmaHeaderSize));
    if (!cma) return refuse(SidrStatus::kReject);
  }
  if (!make_room()) return refuse(SidrStatus::kReject);
  Conn c;
  c.id = new_id();
  c.state = ConnState::kSidrReqRcvd;
  c.remote_comm_id = m.request_id;
  c.service_id = m.service_id;
  c.peer = from;
  c.req_tid = h.tid;
  Conn& stored = store(std::move(c));
  CmEvent ev = event(CmEventType::kSidrRequest, stored);
  ev.cma = cma;
  ev.private_data = user_part(m.private_data, cma ? kCmaHeaderSize : 0);
  emit(std::move(ev));
}

void Cm::on_sidr_rep(const SidrRepMsg& m, const MadAddr& from) {
  Conn* c = find_from(ConnId{m.request_id}, from);
  if (c == nullptr || c->state != ConnState::kSidrReqSent) {
    ++stats_.mads_rx_ignored;
    return;
  }
  CmEvent ev = event(CmEventType::kSidrReply, *c);
  ev.sidr_status = m.status;
  ev.sidr_qpn = m.qpn;
  ev.sidr_qkey = m.qkey;
  ev.qp.remote_qpn = m.qpn;
  ev.qp.qkey = m.qkey;
  ev.private_data = user_part(m.private_data);
  emit(std::move(ev));
  erase(*c);
}

// ---- timers ----------------------------------------------------------------------------------

std::optional<TimePoint> Cm::next_deadline() const {
  if (timers_.empty()) return std::nullopt;
  return timers_.begin()->first;
}

void Cm::on_timer(TimePoint now) {
  Batch batch(*this);
  last_now_ = now;
  timer_now_ = now;
  // Each step takes the earliest timer; what it re-arms lies after `now`.
  while (!timers_.empty() && timers_.begin()->first <= now) {
    Conn* c = find(ConnId{timers_.begin()->second});
    if (c == nullptr) {  // cannot happen: erase() unfiles the timer
      timers_.erase(timers_.begin());
      continue;
    }
    if (c->expires && *c->expires <= now)
      give_up(*c);
    else
      expire(*c);
  }
  timer_now_.reset();
}

void Cm::give_up(Conn& c) {
  ++stats_.half_open_expired;
  c.expires.reset();
  switch (c.state) {
    case ConnState::kReqRcvd:
    case ConnState::kMraReqSent:
      // The application never answered: free the peer too.
      send_rej(c.peer, c.req_tid, c.id.v, c.remote_comm_id, MsgKind::kReq, RejReason::kTimeout);
      emit(event(CmEventType::kUnreachable, c));
      erase(c);
      return;
    case ConnState::kSidrReqRcvd:
      emit(event(CmEventType::kUnreachable, c));
      erase(c);
      return;
    default:
      c.retries_left = 0;  // the end a last retransmission would have reached
      expire(c);           // (re-files or erases the connection)
  }
}

void Cm::expire(Conn& c) {
  const TimePoint t = now();
  const bool retransmitting = is_req_sent(c.state) || is_rep_sent(c.state) ||
                              c.state == ConnState::kDreqSent || c.state == ConnState::kSidrReqSent;
  if (retransmitting && c.retries_left > 0) {
    --c.retries_left;
    ++stats_.retransmits;
    ++stats_.mads_tx;
    outbox_.emplace_back(OutMad{c.retx, c.peer});
    set_deadline(c, t + c.interval);
    return;
  }
  disarm(c);
  switch (c.state) {
    case ConnState::kReqSent:
    case ConnState::kMraReqRcvd:
    case ConnState::kSidrReqSent:
      emit(event(CmEventType::kUnreachable, c));
      erase(c);
      break;
    case ConnState::kRepSent:
    case ConnState::kMraRepRcvd:
      // Neither RTU nor data came: tell the peer, and keep the QP in mind for a while.
      modify(c, QpTransition::kError);
      send_rej(c.peer, c.req_tid, c.id.v, c.remote_comm_id, MsgKind::kRep, RejReason::kTimeout);
      emit(event(CmEventType::kUnreachable, c));
      enter_timewait(c);
      break;
    case ConnState::kDreqSent:
      emit(event(CmEventType::kDisconnected, c));
      enter_timewait(c);
      break;
    case ConnState::kTimewait:
      emit(event(CmEventType::kTimewaitExit, c));
      erase(c);
      break;
    case ConnState::kSidrRepSent:
      erase(c);
      break;
    default:
      break;
  }
}

}  // namespace roce::cm
