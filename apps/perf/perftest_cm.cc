/// @file
/// perftest -R: the rdma_cm communication connection and the connections of the tested QPs.
#include "apps/perf/perftest_cm.h"

#include <cstring>
#include <random>

#include "apps/perf/cm_tools.h"
#include "runtime/cm_agent.h"
#include "controlplane/address.h"

namespace roce::perf {

using namespace roce::engine;
using namespace roce::runtime;

namespace {

constexpr unsigned kRecvSlots = 4;       // perftest keeps one posted; more never hurt
constexpr std::size_t kSlotSize = 64;    // room above perftest's 56 bytes to see a bad length
constexpr double kRetryDelay = 0.1;      // perftest's client waits 100 ms between attempts
constexpr double kDisconnectWait = 3.0;  // seconds to wait for the DREPs at the end

}  // namespace

CmExchange::CmExchange(Env& env, std::string server, unsigned port, double timeout_s, int path_mtu)
    : env_(env),
      server_(std::move(server)),
      port_(port),
      timeout_s_(timeout_s),
      service_id_(cm::service_id(cm::PortSpace::kTcp, static_cast<std::uint16_t>(port))),
      path_mtu_(path_mtu),
      agent_(env.eng, cm_agent_config(env), [this](const cm::CmEvent& e) { on_event(e); }) {
  if (port == 0 || port > 65535) fail("-p must be 1..65535");
  if (client()) {
    const auto ip = ctl::parse_ipv4(server_);
    if (!ip) fail("with -R the server is named by its RoCE IPv4 address, not '" + server_ + "'");
    peer_ip_ = *ip;
  }
  Engine& e = env_.eng;
  pd_ = e.alloc_pd();
  cq_ = e.create_cq(32);
  buf_.assign(kRecvSlots * kSlotSize + kSlotSize, 0);
  if (pd_ != nullptr) mr_ = e.reg_mr(pd_, buf_.data(), buf_.size(), kAccessLocalWrite);
  if (pd_ != nullptr && cq_ != nullptr)
    qp_ = e.create_qp(pd_, QpType::kRc, cq_, cq_, QpCap{4, kRecvSlots, 1, 1, 0});
  if (pd_ == nullptr || cq_ == nullptr || mr_ == nullptr || qp_ == nullptr)
    fail("cannot create the rdma_cm communication QP");
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = kAccessLocalWrite;
  if (e.modify_qp(qp_, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk)
    fail("failed to modify the communication QP to INIT");
  // Posted now: the peer may send as soon as it has our REP or RTU.
  for (std::uint32_t i = 0; i < kRecvSlots; ++i) post_recv(i);
  if (!client()) agent_.cm().listen(service_id_);
}

CmExchange::~CmExchange() {
  Engine& e = env_.eng;
  release_qps();
  if (qp_ != nullptr) {
    agent_.release(qp_);
    e.destroy_qp(qp_);
  }
  if (mr_ != nullptr) e.dereg_mr(mr_);
  if (cq_ != nullptr) e.destroy_cq(cq_);
  if (pd_ != nullptr) e.dealloc_pd(pd_);
}

void CmExchange::post_recv(std::uint32_t slot) {
  Sge sge{reinterpret_cast<std::uint64_t>(buf_.data() + slot * kSlotSize),
          static_cast<std::uint32_t>(kSlotSize), mr_->key};
  RecvWr wr;
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (env_.eng.post_recv(qp_, &wr, nullptr) != kOk)
    fail("post_recv failed on the communication QP");
}

void CmExchange::on_event(const cm::CmEvent& e) {
  switch (e.type) {
    case cm::CmEventType::kConnectRequest:
      if (client()) {
        agent_.cm().reject(e.id);
        break;
      }
      requests_.push_back(e);
      break;
    case cm::CmEventType::kEstablished:
      established_.insert(e.id);
      break;
    case cm::CmEventType::kRejected:
      rejected_[e.id] = e.reason;
      break;
    case cm::CmEventType::kUnreachable:
    case cm::CmEventType::kConnectError:
      unreachable_.insert(e.id);
      break;
    case cm::CmEventType::kDisconnected:
      disconnected_.insert(e.id);
      break;
    default:
      break;
  }
}

void CmExchange::step() {
  agent_.poll(port::now_ns());
  Wc wc[8];
  int n;
  while ((n = env_.eng.poll_cq(cq_, 8, wc)) > 0) {
    for (int k = 0; k < n; ++k) {
      const Wc& w = wc[k];
      if (w.status != WcStatus::kSuccess) {
        if (w.status == WcStatus::kWrFlushErr && (closing_ || (comm_ && !live(*comm_)))) continue;
        fail("the rdma_cm communication QP completed with " + std::string(to_string(w.status)));
      }
      if (w.opcode == WcOpcode::kRecv) {
        // The first message on a connection whose RTU is late: COMM_EST.
        if (comm_ && !established_.contains(*comm_)) agent_.cm().notify_established(*comm_);
        const auto slot = static_cast<std::uint32_t>(w.wr_id);
        const std::uint8_t* p = buf_.data() + slot * kSlotSize;
        received_.emplace_back(p, p + w.byte_len);
        post_recv(slot);
      } else {
        ++sends_done_;
      }
    }
  }
}

bool CmExchange::live(cm::ConnId id) const {
  const cm::ConnState s = agent_.cm().state(id);
  return s == cm::ConnState::kEstablished || s == cm::ConnState::kRepSent ||
         s == cm::ConnState::kMraRepRcvd;
}

cm::CmEvent CmExchange::next_request(const std::string& what) {
  for (;;) {
    if (!env_.until(
            [&] {
              step();
              return !requests_.empty();
            },
            timeout_s_))
      fail("timed out waiting for " + what);
    cm::CmEvent r = requests_.front();
    requests_.pop_front();
    if (r.cma && r.cma->ip_version == 4 && r.cma->dst_ipv4() == env_.ip) {
      const auto ip = ctl::ipv4_from_gid(r.peer.gid);
      if (!ip) fail("the client's GID " + ctl::to_string(r.peer.gid) + " is not IPv4-mapped");
      if (peer_ip_ != wire::Ipv4Addr{} && *ip != peer_ip_) {
        agent_.cm().reject(r.id);  // perftest serves one client
        continue;
      }
      peer_ip_ = *ip;
      env_.resolve(peer_ip_, 10);  // before the REP: the QP's path needs the MAC
      return r;
    }
    agent_.cm().reject(r.id, cm::RejReason::kInvalidServiceId);
  }
}

cm::ConnId CmExchange::connect_one(Qp* qp, const CmQpParams& p, const std::string& what) {
  static std::mt19937 rng(std::random_device{}());
  const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(timeout_s_ * 1e9);
  for (unsigned attempt = 0;; ++attempt) {
    cm::ConnectParams cp;
    cp.peer.gid = ctl::gid_from_ipv4(peer_ip_);
    cp.service_id = service_id_;
    cp.starting_psn = wire::Psn(static_cast<std::uint32_t>(rng()));
    cp.responder_resources = p.responder_resources;
    cp.initiator_depth = p.initiator_depth;
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    cp.path_mtu = static_cast<std::uint8_t>(path_mtu_);
    cp.cma = cm::CmaHeader::ipv4(env_.ip, cm::ephemeral_port(), peer_ip_);
    const std::optional<cm::ConnId> id = agent_.connect(qp, cp);
    if (!id) fail("cannot send the connect request for " + what);
    if (!env_.until(
            [&] {
              step();
              return established_.contains(*id) || rejected_.contains(*id) ||
                     unreachable_.contains(*id);
            },
            timeout_s_))
      fail("timed out connecting " + what);
    if (established_.contains(*id)) return *id;
    if (unreachable_.contains(*id))
      fail("cma event UNREACHABLE for " + what + ": no answer from " + server_);
    const cm::RejReason why = rejected_[*id];
    // Nobody listens yet: perftest's server may still be starting, or be between its
    // communication connection and the listener of the tested QPs.
    if (why != cm::RejReason::kInvalidServiceId || port::now_ns() > end)
      fail("cma event REJECTED for " + what + ", reason " +
           std::to_string(static_cast<unsigned>(why)));
    env_.until(
        [&] {
          step();
          return false;
        },
        kRetryDelay);
    if (attempt == 0) std::printf("no rdma_cm listener on port %u yet, retrying\n", port_);
  }
}

void CmExchange::open() {
  if (client()) {
    env_.resolve(peer_ip_, 10);
    comm_ = connect_one(qp_, CmQpParams{}, "the communication connection");
    return;
  }
  const cm::CmEvent r = next_request("the client's rdma_cm connection");
  cm::AcceptParams ap;
  ap.starting_psn = wire::Psn(std::random_device{}());
  ap.responder_resources = 0;
  ap.initiator_depth = 0;
  if (agent_.accept(r.id, qp_, ap) != cm::CmStatus::kOk)
    fail("cannot accept the communication connection");
  comm_ = r.id;
}

void CmExchange::send(const void* buf, std::size_t n) {
  if (!comm_) fail("the rdma_cm communication connection is not open");
  if (n > kMaxMessage)
    fail("a " + std::to_string(n) + "-byte message does not fit perftest's " +
         std::to_string(kMaxMessage) + "-byte rdma_cm buffer");
  std::uint8_t* sbuf = buf_.data() + kRecvSlots * kSlotSize;
  std::memcpy(sbuf, buf, n);
  Sge sge{reinterpret_cast<std::uint64_t>(sbuf), static_cast<std::uint32_t>(n), mr_->key};
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  if (env_.eng.post_send(qp_, &wr, nullptr) != kOk)
    fail("post_send failed on the communication QP");
  const unsigned want = sends_done_ + 1;
  // As perftest: wait for the SEND's completion (the peer's ACK) before going on.
  if (!env_.until(
          [&] {
            step();
            return sends_done_ >= want || !live(*comm_);
          },
          timeout_s_))
    fail("timed out sending on the rdma_cm communication connection");
  if (sends_done_ < want) fail("the peer closed the rdma_cm communication connection");
}

void CmExchange::recv(void* buf, std::size_t n) {
  if (!comm_) fail("the rdma_cm communication connection is not open");
  if (!env_.until(
          [&] {
            step();
            return !received_.empty() || !live(*comm_);
          },
          timeout_s_))
    fail("timed out in the rdma_cm exchange");
  if (received_.empty()) fail("the peer closed the rdma_cm communication connection");
  const std::vector<std::uint8_t> m = std::move(received_.front());
  received_.pop_front();
  if (m.size() != n)
    fail("the peer sent a " + std::to_string(m.size()) + "-byte message where " +
         std::to_string(n) + " bytes were expected");
  std::memcpy(buf, m.data(), n);
}

bool CmExchange::readable() {
  step();
  return !received_.empty() || !comm_ || !live(*comm_);
}

void CmExchange::connect_qps(const std::vector<Qp*>& qps, const CmQpParams& p) {
  for (std::size_t i = 0; i < qps.size(); ++i) {
    const std::string what = "tested QP " + std::to_string(i);
    if (client()) {
      data_.push_back(connect_one(qps[i], p, what));
    } else {
      const cm::CmEvent r = next_request("the rdma_cm connection of " + what);
      cm::AcceptParams ap;
      ap.starting_psn = wire::Psn(std::random_device{}());
      ap.responder_resources = p.responder_resources;
      ap.initiator_depth = p.initiator_depth;
      if (agent_.accept(r.id, qps[i], ap) != cm::CmStatus::kOk)
        fail("cannot accept the connection of " + what);
      data_.push_back(r.id);
    }
    data_qps_.push_back(qps[i]);
    if (qps[i]->state != QpState::kRts) fail("the connection of " + what + " left it not in RTS");
  }
}

void CmExchange::release_qps() {
  for (Qp* q : data_qps_) agent_.release(q);
  data_qps_.clear();
}

void CmExchange::close() {
  if (closing_) return;
  closing_ = true;
  std::vector<cm::ConnId> all = data_;
  if (comm_) all.push_back(*comm_);
  for (cm::ConnId id : all)
    if (live(id)) agent_.cm().disconnect(id);
  // The peer's kernel answers every DREQ at once, whatever its process does; a peer that
  // vanished leaves them to the CM's retransmission and timeout.
  env_.until(
      [&] {
        step();
        for (cm::ConnId id : all)
          if (agent_.cm().state(id) == cm::ConnState::kDreqSent) return false;
        return true;
      },
      kDisconnectWait);
  release_qps();
  // A DREQ of the peer's that crossed ours, or a repeated one, is answered meanwhile.
  env_.until(
      [&] {
        step();
        return false;
      },
      0.1);
}

}  // namespace roce::perf
