/// @file
/// perftest -R: the rdma_cm communication connection and the connections of the tested QPs.
#include "apps/perf/perftest_cm.h"

#include <cerrno>
#include <cstring>

#include "controlplane/address.h"
#include "controlplane/cm/cm.h"

namespace roce::perf {

using namespace roce::runtime;
using client::CmEventType;

namespace {

constexpr unsigned kRecvSlots = 4;       // perftest keeps one posted; more never hurt
constexpr std::size_t kSlotSize = 64;    // room above perftest's 56 bytes to see a bad length
constexpr double kRetryDelay = 0.1;      // perftest's client waits 100 ms between attempts
constexpr double kDisconnectWait = 3.0;  // seconds to wait for the DREPs at the end
constexpr std::uint32_t kRejInvalidServiceId = 8;  // IBA REJ reason: nobody listens there

}  // namespace

CmExchange::CmExchange(Env& env, client::Context& ctx, std::string server, unsigned port,
                       double timeout_s)
    : env_(env), ctx_(ctx), server_(std::move(server)), port_(port), timeout_s_(timeout_s) {
  if (port == 0 || port > 65535) fail("-p must be 1..65535");
  if (client()) {
    const auto ip = ctl::parse_ipv4(server_);
    if (!ip) fail("with -R the server is named by its RoCE IPv4 address, not '" + server_ + "'");
    peer_ip_ = *ip;
  }
  pd_ = ctx_.alloc_pd();
  cq_ = ctx_.create_cq(32);
  buf_ = ctx_.alloc_buffer(kRecvSlots * kSlotSize + kSlotSize);
  if (pd_ != nullptr && buf_ != nullptr)
    mr_ = ctx_.reg_mr(pd_, buf_->addr, buf_->length, verbs::kAccessLocalWrite);
  if (pd_ != nullptr && cq_ != nullptr)
    qp_ = ctx_.create_qp(pd_, client::QpType::kRc, cq_, cq_, client::QpCap{4, kRecvSlots, 1, 1, 0});
  if (pd_ == nullptr || cq_ == nullptr || mr_ == nullptr || qp_ == nullptr)
    fail("cannot create the rdma_cm communication QP");
  client::QpAttr a;
  a.qp_state = client::QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = verbs::kAccessLocalWrite;
  if (ctx_.modify_qp(
          qp_, a, verbs::kQpState | verbs::kQpPkeyIndex | verbs::kQpPort | verbs::kQpAccessFlags) !=
      0)
    fail("failed to modify the communication QP to INIT");
  // Posted now: the peer may send as soon as it has our REP or RTU.
  for (std::uint32_t i = 0; i < kRecvSlots; ++i) post_recv(i);
  if (!client()) {
    if (const int rc = ctx_.cm_listen(static_cast<std::uint16_t>(port)))
      fail("cannot listen on rdma_cm port " + std::to_string(port) + ": " + std::strerror(rc));
  }
}

CmExchange::~CmExchange() {
  // Destroying the QP lets the CM go of it (DREQ if its connection is still up).
  if (qp_ != nullptr) ctx_.destroy_qp(qp_);
  if (mr_ != nullptr) ctx_.dereg_mr(mr_);
  if (buf_ != nullptr) ctx_.free_buffer(buf_);
  if (cq_ != nullptr) ctx_.destroy_cq(cq_);
  if (pd_ != nullptr) ctx_.dealloc_pd(pd_);
}

void CmExchange::post_recv(std::uint32_t slot) {
  auto* b = static_cast<std::uint8_t*>(buf_->addr);
  client::Sge sge{reinterpret_cast<std::uint64_t>(b + slot * kSlotSize),
                  static_cast<std::uint32_t>(kSlotSize), mr_->lkey};
  client::RecvWr wr;
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const client::RecvWr* bad = nullptr;
  if (ctx_.post_recv(qp_, &wr, &bad) != 0) fail("post_recv failed on the communication QP");
}

void CmExchange::on_event(client::CmEvent& e) {
  switch (e.type) {
    case CmEventType::kConnectRequest:
      if (client()) {
        ctx_.cm_reject(e.id);
        break;
      }
      requests_.push_back(std::move(e));
      break;
    case CmEventType::kEstablished:
      established_.insert(e.id);
      break;
    case CmEventType::kRejected:
      rejected_[e.id] = e.reason;
      break;
    case CmEventType::kUnreachable:
    case CmEventType::kConnectError:
      unreachable_.insert(e.id);
      break;
    case CmEventType::kDisconnected:
      disconnected_.insert(e.id);
      break;
    default:  // SIDR: no UD ids here
      break;
  }
}

void CmExchange::step() {
  for (;;) {
    client::CmEvent ev;
    if (ctx_.cm_get_event(ev, 0) != 0) break;
    on_event(ev);
  }
  client::Wc wc[8];
  int n;
  while ((n = ctx_.poll_cq(cq_, 8, wc)) > 0) {
    for (int k = 0; k < n; ++k) {
      const client::Wc& w = wc[k];
      if (w.status != client::WcStatus::kSuccess) {
        if (w.status == client::WcStatus::kWrFlushErr && (closing_ || (comm_ && !live(*comm_))))
          continue;
        fail("the rdma_cm communication QP completed with " +
             std::string(verbs::to_string(w.status)));
      }
      if (w.opcode == client::WcOpcode::kRecv) {
        // (The first message on a connection whose RTU is late is COMM_EST: libroce tells
        // the CM.)
        const auto slot = static_cast<std::uint32_t>(w.wr_id);
        const std::uint8_t* p = static_cast<const std::uint8_t*>(buf_->addr) + slot * kSlotSize;
        received_.emplace_back(p, p + w.byte_len);
        post_recv(slot);
      } else {
        ++sends_done_;
      }
    }
  }
}

bool CmExchange::live(std::uint32_t id) const {
  return !disconnected_.contains(id) && !unreachable_.contains(id) && !rejected_.contains(id) &&
         !dreq_sent_.contains(id);
}

client::CmEvent CmExchange::next_request(const std::string& what) {
  for (;;) {
    if (!env_.until(
            [&] {
              step();
              return !requests_.empty();
            },
            timeout_s_))
      fail("timed out waiting for " + what);
    client::CmEvent r = std::move(requests_.front());
    requests_.pop_front();
    // (Requests other than rdma_cm's IPv4 ones were rejected by the CM: invalid service ID.)
    if (peer_ip_ != Ipv4Addr{} && r.peer != peer_ip_) {
      ctx_.cm_reject(r.id);  // perftest serves one client
      continue;
    }
    peer_ip_ = r.peer;
    env_.resolve(peer_ip_, 10);  // before the REP: the QP's path needs the MAC
    return r;
  }
}

void CmExchange::accept(const client::CmEvent& r, client::Qp* qp, const CmQpParams& p,
                        const std::string& what) {
  client::CmConnParam cp;
  cp.responder_resources = p.responder_resources;
  cp.initiator_depth = p.initiator_depth;
  if (p.selective_repeat) {
    cp.ece_vendor = cm::kEceVendorId;
    cp.ece_options = cm::kEceSignature | cm::kEceSrAccept;
  }
  if (ctx_.cm_accept(r.id, qp, cp) != 0) fail("cannot accept " + what);
}

std::uint32_t CmExchange::connect_one(client::Qp* qp, const CmQpParams& p,
                                      const std::string& what) {
  const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(timeout_s_ * 1e9);
  for (unsigned attempt = 0;; ++attempt) {
    client::CmConnParam cp;
    cp.responder_resources = p.responder_resources;
    cp.initiator_depth = p.initiator_depth;
    cp.retry_count = 7;
    cp.rnr_retry = 7;
    if (p.selective_repeat) {
      cp.ece_vendor = cm::kEceVendorId;
      cp.ece_options = cm::kEceSignature | cm::kEceSrOffer;
    }
    std::uint32_t id = 0;
    if (const int rc = ctx_.cm_connect(qp, peer_ip_, static_cast<std::uint16_t>(port_), cp, id))
      fail("cannot send the connect request for " + what + ": " + std::strerror(rc));
    if (!env_.until(
            [&] {
              step();
              return established_.contains(id) || rejected_.contains(id) ||
                     unreachable_.contains(id);
            },
            timeout_s_))
      fail("timed out connecting " + what);
    if (established_.contains(id)) return id;
    if (unreachable_.contains(id))
      fail("cma event UNREACHABLE for " + what + ": no answer from " + server_);
    const std::uint32_t why = rejected_[id];
    // Nobody listens yet: perftest's server may still be starting, or be between its
    // communication connection and the listener of the tested QPs.
    if (why != kRejInvalidServiceId || port::now_ns() > end)
      fail("cma event REJECTED for " + what + ", reason " + std::to_string(why));
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
  const client::CmEvent r = next_request("the client's rdma_cm connection");
  accept(r, qp_, CmQpParams{}, "the communication connection");
  comm_ = r.id;
}

void CmExchange::send(const void* buf, std::size_t n) {
  if (!comm_) fail("the rdma_cm communication connection is not open");
  if (n > kMaxMessage)
    fail("a " + std::to_string(n) + "-byte message does not fit perftest's " +
         std::to_string(kMaxMessage) + "-byte rdma_cm buffer");
  std::uint8_t* sbuf = static_cast<std::uint8_t*>(buf_->addr) + kRecvSlots * kSlotSize;
  std::memcpy(sbuf, buf, n);
  client::Sge sge{reinterpret_cast<std::uint64_t>(sbuf), static_cast<std::uint32_t>(n), mr_->lkey};
  client::SendWr wr;
  wr.opcode = client::WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = verbs::kSendSignaled;
  const client::SendWr* bad = nullptr;
  if (ctx_.post_send(qp_, &wr, &bad) != 0) fail("post_send failed on the communication QP");
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

void CmExchange::connect_qps(const std::vector<client::Qp*>& qps, const CmQpParams& p) {
  for (std::size_t i = 0; i < qps.size(); ++i) {
    const std::string what = "tested QP " + std::to_string(i);
    if (client()) {
      data_.push_back(connect_one(qps[i], p, what));
    } else {
      const client::CmEvent r = next_request("the rdma_cm connection of " + what);
      accept(r, qps[i], p, "the connection of " + what);
      data_.push_back(r.id);
    }
    // In-process: the engine's QP behind the Context's.
    const engine::Qp* q = env_.eng.find_qp(qps[i]->qp_num);
    if (q == nullptr || q->state != engine::QpState::kRts)
      fail("the connection of " + what + " left it not in RTS");
  }
}

void CmExchange::close() {
  if (closing_) return;
  closing_ = true;
  std::vector<std::uint32_t> all = data_;
  if (comm_) all.push_back(*comm_);
  for (std::uint32_t id : all)
    if (live(id) && ctx_.cm_disconnect(id) == 0) dreq_sent_.insert(id);
  // The peer's kernel answers every DREQ at once, whatever its process does; a peer that
  // vanished leaves them to the CM's retransmission and timeout.
  env_.until(
      [&] {
        step();
        for (std::uint32_t id : dreq_sent_)
          if (!disconnected_.contains(id)) return false;
        return true;
      },
      kDisconnectWait);
  // A DREQ of the peer's that crossed ours, or a repeated one, is answered meanwhile.
  env_.until(
      [&] {
        step();
        return false;
      },
      0.1);
}

}  // namespace roce::perf
