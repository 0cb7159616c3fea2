/// @file
/// Fuzz target: the shared-memory ring entries of an attached client as roced consumes them
/// (controlplane/attach/attach_lane.cc). A Lane on a real engine (no DPDK) serves a client
/// whose rings live in this process: an RC QP and a UD QP with their own receive rings, an RC
/// QP on an SRQ, three CQs; one MR of the client. The input is the client, and a hostile one:
/// whole SendEntry and RecvEntry images as it could write them (any opcode, SGE count, flags,
/// keys), ring indices it scribbles over, CQs it polls or not, and the sequence of issue 27's
/// use-after-free (the SRQ's QP and its CQ destroyed while the SRQ stays).
///
/// Input: records, each a kind byte (modulo 7) and its fields:
///   0 send     qp u8 (% 3), a SendEntry's bytes, fix u8 (bit 0: SGEs into the MR, offsets and
///              lengths reduced; bit 1: the UD address is the peer's)
///   1 recv     target u8 (0 the RC QP, 1 the UD QP, 2 the SRQ), a RecvEntry's bytes, fix u8
///   2 run      passes u8 (% 8 + 1), time step u16 in microseconds: the lane polls, the
///              engine runs (timers: retries, then errors and flushes), its frames go nowhere
///   3 reap     cq u8 (% 3), count u8: the client takes completions from a CQ ring
///   4 scribble ring u8 (% 6), value u32: the client writes an index it must not (a send or
///              receive ring's tail, a CQ ring's head)
///   5 churn    the SRQ's QP and its receive CQ are destroyed; if gone, made again
///   6 arm      cq u8 (% 3): the client arms a CQ (the lane signals an eventfd)
/// After every record: each CQ's refused completions waiting on the lane stay within the CQ's
/// depth, whatever the client does.
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "controlplane/attach/attach_lane.h"
#include "tests/fuzz/fuzz_bytes.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace roce;
using namespace roce::attach;
using engine::QpAttr;
using engine::QpState;
using engine::QpType;

constexpr wire::MacAddr kMacUs{{0x02, 0x00, 0x00, 0x00, 0xF1, 0x01}};
constexpr wire::MacAddr kMacPeer{{0x02, 0x00, 0x00, 0x00, 0xF1, 0x02}};
constexpr wire::Ipv4Addr kIpUs{0xC0000201};      // 192.0.2.1
constexpr wire::Ipv4Addr kIpPeer{0xC0000202};    // 192.0.2.2
constexpr std::uint64_t kIova = 0x7f0000100000;  ///< where the client has its buffer
constexpr std::size_t kBuf = 16384;
constexpr std::uint32_t kDepth[3] = {8, 16, 4};  ///< CQ 0: sends, 1: receives, 2: the SRQ's QP
constexpr std::uint32_t kQkey = 0x11111111;
constexpr unsigned kMaxRecords = 256;

// A queue's memory on the heap, 64-byte aligned as a mapping would be.
struct RingMem {
  void* p = nullptr;
  explicit RingMem(std::size_t bytes) {
    p = std::aligned_alloc(64, (bytes + 63) & ~std::size_t{63});
    std::memset(p, 0, bytes);
  }
  ~RingMem() { std::free(p); }
  RingMem(const RingMem&) = delete;
  RingMem& operator=(const RingMem&) = delete;
};

template <class T>
struct ClientCq {  // the client's end of a CQ ring
  std::unique_ptr<RingMem> mem;
  ShmQueueHeader* h = nullptr;
  ShmConsumer<T> ring;
};

void bring_up(engine::Engine& e, engine::Qp* qp, QpType type, std::uint32_t peer_qpn) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = engine::kAccessLocalWrite | engine::kAccessRemoteWrite |
                      engine::kAccessRemoteRead | engine::kAccessRemoteAtomic;
  a.qkey = kQkey;
  std::uint32_t mask = engine::kQpState | engine::kQpPkeyIndex | engine::kQpPort;
  mask |= type == QpType::kUd ? engine::kQpQkey : engine::kQpAccessFlags;
  if (e.modify_qp(qp, a, mask) != engine::kOk) std::abort();
  a.qp_state = QpState::kRtr;
  a.path_mtu = engine::Mtu::k1024;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = 100;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah.dmac = kMacPeer;
  a.ah.dgid = wire::ipv4_mapped(kIpPeer);
  mask = engine::kQpState;
  if (type != QpType::kUd)
    mask |= engine::kQpAv | engine::kQpPathMtu | engine::kQpDestQpn | engine::kQpRqPsn |
            engine::kQpMaxDestRdAtomic | engine::kQpMinRnrTimer;
  if (e.modify_qp(qp, a, mask) != engine::kOk) std::abort();
  a.qp_state = QpState::kRts;
  a.sq_psn = 200;
  a.timeout = 8;
  a.retry_cnt = 1;
  a.rnr_retry = 1;
  a.max_rd_atomic = 4;
  mask = engine::kQpState | engine::kQpSqPsn;
  if (type != QpType::kUd)
    mask |=
        engine::kQpTimeout | engine::kQpRetryCnt | engine::kQpRnrRetry | engine::kQpMaxQpRdAtomic;
  if (e.modify_qp(qp, a, mask) != engine::kOk) std::abort();
}

class Harness {
 public:
  Harness() {
    engine::EngineConfig cfg;
    cfg.mac = kMacUs;
    cfg.ipv4 = kIpUs;
    cfg.max_qps = 8;
    cfg.tx_slots = 64;
    cfg.seed = 1;
    cfg.first_qp_index = 0;
    eng_ = std::make_unique<engine::Engine>(cfg);
    lane_ = std::make_unique<Lane>(*eng_);
    eng_->on_async_event = [this](const engine::AsyncEvent& ev) { lane_->on_async(ev); };
    events_mem_ = std::make_unique<RingMem>(ShmQueueLayout<EventEntry>::bytes(16));
    events_.ring =
        ShmProducer<EventEntry>(ShmQueueLayout<EventEntry>::init(events_mem_->p, 16), 16);
    events_.event_fd = efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pd_ = eng_->alloc_pd();
    buf_.assign(kBuf, 0x5A);
    mr_ = eng_->reg_mr(pd_, buf_.data(), buf_.size(), kIova,
                       engine::kAccessLocalWrite | engine::kAccessRemoteWrite |
                           engine::kAccessRemoteRead | engine::kAccessRemoteAtomic);
    if (pd_ == nullptr || mr_ == nullptr) std::abort();
    for (int i = 0; i < 3; ++i) make_cq(i);
    srq_mem_ = std::make_unique<RingMem>(ShmQueueLayout<RecvEntry>::bytes(17));
    srq_.srq = eng_->create_srq(pd_, 16, kMaxSge);
    srq_.rq = ShmConsumer<RecvEntry>(ShmQueueLayout<RecvEntry>::init(srq_mem_->p, 17), 17);
    srq_prod_ = ShmProducer<RecvEntry>(static_cast<ShmQueueHeader*>(srq_mem_->p), 17);
    if (srq_.srq == nullptr) std::abort();
    lane_->add(&srq_);
    make_qp(0, QpType::kRc, false);
    make_qp(1, QpType::kUd, false);
    make_qp(2, QpType::kRc, true);
  }
  ~Harness() {
    // As the attach server drops a client: QPs, SRQ, MR, CQs.
    for (int i = 0; i < 3; ++i)
      if (qps_[i].qp) drop_qp(i);
    lane_->remove(&srq_);
    eng_->destroy_srq(srq_.srq);
    eng_->dereg_mr(mr_);
    for (int i = 0; i < 3; ++i)
      if (cqs_[i]) drop_cq(i);
    ::close(efd_);
  }

  void run(fuzz::Reader& in) {
    for (unsigned n = 0; n < kMaxRecords && !in.empty(); ++n) {
      switch (in.u8() % 7) {
        case 0:
          send(in);
          break;
        case 1:
          recv(in);
          break;
        case 2: {
          const unsigned passes = in.u8() % 8 + 1;
          const std::uint64_t step = std::uint64_t{in.u16()} * 1000;
          for (unsigned i = 0; i < passes; ++i) pass(step);
          break;
        }
        case 3:
          reap(in.u8() % 3, in.u8());
          break;
        case 4:
          scribble(in.u8() % 6, in.u32());
          break;
        case 5:
          churn();
          break;
        case 6: {
          const int i = in.u8() % 3;
          if (cqs_[i]) client_cqs_[i].ring.arm();
          break;
        }
      }
      pass(1000);
      check();
    }
  }

 private:
  void make_cq(int i) {
    auto c = std::make_unique<LaneCq>();
    const std::uint32_t slots = ShmQueueLayout<CqEntry>::slots_for(kDepth[i]);
    auto mem = std::make_unique<RingMem>(ShmQueueLayout<CqEntry>::bytes(slots));
    c->ring = ShmProducer<CqEntry>(ShmQueueLayout<CqEntry>::init(mem->p, slots), slots);
    c->cq = eng_->create_cq(kDepth[i]);
    c->handle = static_cast<std::uint32_t>(i + 1);
    c->events = &events_;
    c->event_fd = efd_;
    c->depth = kDepth[i];
    c->local.reserve(kDepth[i]);
    if (c->cq == nullptr) std::abort();
    client_cqs_[i].h = static_cast<ShmQueueHeader*>(mem->p);
    client_cqs_[i].ring = ShmConsumer<CqEntry>(client_cqs_[i].h, slots);
    client_cqs_[i].mem = std::move(mem);
    lane_->add(c.get());
    cqs_[i] = std::move(c);
  }
  void drop_cq(int i) {
    lane_->remove(cqs_[i].get());
    if (eng_->destroy_cq(cqs_[i]->cq) != engine::kOk) std::abort();
    cqs_[i].reset();  // freed: ASan sees any later touch
    client_cqs_[i] = {};
  }
  void make_qp(int i, QpType type, bool on_srq) {
    LaneQp& q = qps_[i];
    const std::uint32_t sq_slots = 33, rq_slots = on_srq ? 2 : 33;
    const QpRings rings{sq_slots, rq_slots};
    qp_mem_[i] = std::make_unique<RingMem>(rings.bytes());
    auto* base = static_cast<std::uint8_t*>(qp_mem_[i]->p);
    q.sq = ShmConsumer<SendEntry>(ShmQueueLayout<SendEntry>::init(base, sq_slots), sq_slots);
    sq_prod_[i] = ShmProducer<SendEntry>(reinterpret_cast<ShmQueueHeader*>(base), sq_slots);
    if (!on_srq) {
      auto* rh = ShmQueueLayout<RecvEntry>::init(base + rings.rq_offset(), rq_slots);
      q.rq = ShmConsumer<RecvEntry>(rh, rq_slots);
      rq_prod_[i] = ShmProducer<RecvEntry>(rh, rq_slots);
    }
    const int scq = on_srq ? 2 : 0, rcq = on_srq ? 2 : 1;
    q.events = &events_;
    q.send_cq = cqs_[scq].get();
    q.recv_cq = cqs_[rcq].get();
    q.srq = on_srq ? &srq_ : nullptr;
    const engine::QpCap cap{32, on_srq ? 0u : 32u, kMaxSge, kMaxSge, 0};
    q.qp = eng_->create_qp(pd_, type, q.send_cq->cq, q.recv_cq->cq, cap,
                           on_srq ? srq_.srq : nullptr, false);
    if (q.qp == nullptr) std::abort();
    bring_up(*eng_, q.qp, type, 0x100 + static_cast<std::uint32_t>(i));
    lane_->add(&q);
    if (on_srq && srq_.error_cq == nullptr) srq_.error_cq = q.recv_cq;
  }
  void drop_qp(int i) {
    LaneQp& q = qps_[i];
    lane_->remove(&q);
    eng_->destroy_qp(q.qp);
    q = LaneQp{};
    sq_prod_[i] = {};
    rq_prod_[i] = {};
    qp_mem_[i].reset();
  }

  void fix_sges(engine::Sge* sge, std::size_t n) {
    for (std::size_t i = 0; i < n && i < kMaxSge; ++i) {
      const std::uint64_t off = sge[i].addr % kBuf;
      sge[i].addr = kIova + off;
      sge[i].length = static_cast<std::uint32_t>(sge[i].length % (kBuf - off + 1));
      sge[i].lkey = mr_->key;
    }
  }
  void send(fuzz::Reader& in) {
    const int i = in.u8() % 3;
    SendEntry e;
    const auto b = in.bytes(sizeof e);
    std::memcpy(&e, b.data(), b.size());
    const std::uint8_t fix = in.u8();
    if (fix & 1) fix_sges(e.sge, e.num_sge);
    if (fix & 2) {
      e.ah = {};
      e.ah.dgid = wire::ipv4_mapped(kIpPeer);
      e.ah.dmac = kMacPeer;
      e.remote_qkey = kQkey;
    }
    if (qps_[i].qp) sq_prod_[i].push(e);
  }
  void recv(fuzz::Reader& in) {
    const int t = in.u8() % 3;
    RecvEntry e;
    const auto b = in.bytes(sizeof e);
    std::memcpy(&e, b.data(), b.size());
    if (in.u8() & 1) fix_sges(e.sge, e.num_sge);
    if (t == 2)
      srq_prod_.push(e);
    else if (qps_[t].qp)
      rq_prod_[t].push(e);
  }
  void pass(std::uint64_t step) {
    now_ += step;
    lane_->poll(now_);
    eng_->run(now_);
    eng_->drain_tx([](std::span<const std::uint8_t>) {});
  }
  void reap(int i, unsigned n) {
    if (!cqs_[i]) return;
    CqEntry wc[16];
    while (n != 0) {
      const std::size_t k = client_cqs_[i].ring.pop_n(wc, std::min(n, 16u));
      if (k == 0) break;
      n -= static_cast<unsigned>(k);
    }
  }
  void scribble(int which, std::uint32_t v) {
    if (which < 3) {  // a send ring's tail (the client's index)
      if (qps_[which].qp) reinterpret_cast<ShmQueueHeader*>(qp_mem_[which]->p)->tail.store(v);
    } else if (cqs_[which - 3]) {  // a CQ ring's head
      client_cqs_[which - 3].h->head.store(v);
    }
  }
  // Issue 27's sequence: the SRQ's only QP goes, then its receive CQ; the SRQ stays.
  void churn() {
    if (qps_[2].qp) {
      drop_qp(2);
      drop_cq(2);
    } else {
      make_cq(2);
      make_qp(2, QpType::kRc, true);
    }
  }
  void check() {
    for (const auto& c : cqs_)
      if (c && c->local.size() > c->depth) std::abort();  // refused completions pile up
  }

  std::unique_ptr<engine::Engine> eng_;
  std::unique_ptr<Lane> lane_;
  std::unique_ptr<RingMem> events_mem_;
  LaneEvents events_;
  int efd_ = -1;
  engine::Pd* pd_ = nullptr;
  engine::Mr* mr_ = nullptr;
  std::vector<std::uint8_t> buf_;
  std::array<std::unique_ptr<LaneCq>, 3> cqs_;
  std::array<ClientCq<CqEntry>, 3> client_cqs_;
  std::array<LaneQp, 3> qps_;
  std::array<std::unique_ptr<RingMem>, 3> qp_mem_;
  std::array<ShmProducer<SendEntry>, 3> sq_prod_;
  std::array<ShmProducer<RecvEntry>, 3> rq_prod_;
  LaneSrq srq_;
  std::unique_ptr<RingMem> srq_mem_;
  ShmProducer<RecvEntry> srq_prod_;
  std::uint64_t now_ = 1'000'000;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  roce::fuzz::Reader in(data, size);
  if (in.empty()) return 0;
  Harness h;
  h.run(in);
  return 0;
}
