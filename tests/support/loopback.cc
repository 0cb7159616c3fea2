#include "tests/support/loopback.h"

#include <algorithm>
#include <stdexcept>

#include "apps/common/pattern.h"

namespace roce::test {

using namespace roce::engine;

int set_selective_repeat(const Endpoint& a, const Endpoint& b, bool on_a, bool on_b) {
  constexpr SrIndexBase kA{0xFFFFFFF8u, 0x7FFFFFF8u};  // A sends from the first, B the second
  const bool both = on_a && on_b;
  int rc =
      both ? a.eng->set_selective_repeat(a.qp, true, kA) : a.eng->set_selective_repeat(a.qp, on_a);
  if (rc != kOk) return rc;
  return both ? b.eng->set_selective_repeat(b.qp, true, {kA.rx, kA.tx})
              : b.eng->set_selective_repeat(b.qp, on_b);
}

EngineConfig Loopback::default_config(int side) {
  EngineConfig c;
  c.mac = wire::MacAddr{{0x02, 0x00, 0x00, 0x00, 0x00, static_cast<std::uint8_t>(0x0A + side)}};
  c.ipv4 = wire::Ipv4Addr{0xC6120000u + 1 + static_cast<std::uint32_t>(side)};  // 198.18.0.1/2
  c.seed = 0x5EED0000ull + static_cast<std::uint64_t>(side);
  c.first_qp_index = 0;  // the first QP is kFirstQpn: tests name frames by QPN
  return c;
}

Loopback::Loopback(const LoopbackOptions& opts, EngineConfig a, EngineConfig b) : opts_(opts) {
  eng_[0] = std::make_unique<Engine>(a);
  eng_[1] = std::make_unique<Engine>(b);
  link_[0] = std::make_unique<FaultyLink>(opts.a2b);
  link_[1] = std::make_unique<FaultyLink>(opts.b2a);
  for (auto& e : eng_) e->set_tx_zero_copy(opts.zero_copy);
}

void Loopback::carry(int from) {
  const int to = 1 - from;
  // With a rate, every frame put on the wire (dropped ones too) takes its time on it.
  std::uint64_t sent_at = now_;
  auto deliver = [&](std::span<const std::uint8_t> f, std::uint64_t delay) {
    queue_[to].emplace(sent_at + opts_.link_delay_ns + delay,
                       std::vector<std::uint8_t>(f.begin(), f.end()));
  };
  const auto each = [&](std::span<const std::uint8_t> f) {
    if (opts_.bytes_per_us != 0) {
      link_free_[from] = std::max(link_free_[from], now_) + f.size() * 1000 / opts_.bytes_per_us;
      sent_at = link_free_[from];
    }
    const FaultDecision d = link_[from]->submit(f, deliver);
    if (!opts_.record) return;
    WireRecord r;
    r.t = now_;
    r.from = from;
    r.dropped = d.drop;
    wire::RxPkt p;
    wire::ParseOptions po;
    po.verify_icrc = false;
    if (wire::parse_frame(f, p, po) == wire::Verdict::kOk) {
      r.opcode = p.opcode;
      r.dest_qp = p.dest_qp.raw();
      r.psn = p.psn.raw();
      r.ack_req = p.ack_req;
      r.payload_len = p.payload_len;
      if (p.info->has(wire::Ext::kAeth)) r.syndrome = p.aeth().syndrome().raw();
    }
    records_.push_back(r);
  };
  if (opts_.zero_copy == 0) {
    eng_[from]->drain_tx(each);
    return;
  }
  std::vector<std::uint8_t> whole;
  eng_[from]->drain_tx_frames([&](const TxFrame& f) {
    f.copy_to(whole);
    each(whole);
  });
}

bool Loopback::step() {
  bool busy = false;
  for (int i = 0; i < 2; ++i) {
    eng_[i]->run(now_);
    busy |= eng_[i]->tx_pending() > 0;
    carry(i);
  }
  for (int i = 0; i < 2; ++i) {
    auto& q = queue_[i];
    while (!q.empty() && q.begin()->first <= now_) {
      auto node = q.extract(q.begin());
      eng_[i]->receive(node.mapped(), now_);
      busy = true;
    }
  }
  return busy;
}

bool Loopback::run_until(const std::function<bool()>& done, std::uint64_t limit_ns) {
  const std::uint64_t end = now_ + limit_ns;
  while (!done()) {
    if (now_ > end) return false;
    const bool busy = step();
    if (busy || eng_[0]->has_work() || eng_[1]->has_work()) {
      now_ += opts_.tick_ns;
      continue;
    }
    // Idle: release reorder-held frames, then jump to the next delivery or timer.
    bool released = false;
    for (int from = 0; from < 2; ++from) {
      released |= link_[from]->release_held([&](std::span<const std::uint8_t> f, std::uint64_t) {
        queue_[1 - from].emplace(now_ + opts_.link_delay_ns,
                                 std::vector<std::uint8_t>(f.begin(), f.end()));
      });
    }
    if (released) {
      now_ += opts_.tick_ns;
      continue;
    }
    std::uint64_t next = UINT64_MAX;
    for (int i = 0; i < 2; ++i) {
      if (!queue_[i].empty()) next = std::min(next, queue_[i].begin()->first);
      if (eng_[i]->next_deadline() != 0) next = std::min(next, eng_[i]->next_deadline());
    }
    if (next == UINT64_MAX) {
      now_ += opts_.tick_ns;
      return done();  // nothing can happen any more
    }
    now_ = std::max(now_ + opts_.tick_ns, next);
  }
  return true;
}

void Loopback::settle(std::uint64_t limit_ns) {
  run_until(
      [&] {
        return queue_[0].empty() && queue_[1].empty() && !link_[0]->holding() &&
               !link_[1]->holding() && !eng_[0]->has_work() && !eng_[1]->has_work() &&
               eng_[0]->tx_pending() == 0 && eng_[1]->tx_pending() == 0 &&
               eng_[0]->next_deadline() == 0 && eng_[1]->next_deadline() == 0;
      },
      limit_ns);
}

namespace {
void bring_up(Endpoint& me, const Endpoint& peer, Engine& peer_eng, const RcOptions& o,
              std::uint32_t my_psn, std::uint32_t peer_psn) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = o.access;
  a.pkey_index = 0;
  a.port_num = 1;
  if (me.eng->modify_qp(me.qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk)
    throw std::runtime_error("INIT failed");
  a.qp_state = QpState::kRtr;
  a.path_mtu = o.mtu;
  a.dest_qp_num = peer.qp->qpn;
  a.rq_psn = peer_psn;
  a.max_dest_rd_atomic = o.max_rd_atomic;
  a.min_rnr_timer = o.min_rnr_timer;
  a.ah.dmac = peer_eng.config().mac;
  a.ah.dgid = wire::ipv4_mapped(peer_eng.config().ipv4);
  std::uint32_t mask = kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn;
  if (o.type == QpType::kRc) mask |= kQpMaxDestRdAtomic | kQpMinRnrTimer;
  if (me.eng->modify_qp(me.qp, a, mask) != kOk) throw std::runtime_error("RTR failed");
  a.qp_state = QpState::kRts;
  a.sq_psn = my_psn;
  a.timeout = o.timeout;
  a.retry_cnt = o.retry_cnt;
  a.rnr_retry = o.rnr_retry;
  a.max_rd_atomic = o.max_rd_atomic;
  mask = kQpState | kQpSqPsn;
  if (o.type == QpType::kRc) mask |= kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic;
  if (me.eng->modify_qp(me.qp, a, mask) != kOk) throw std::runtime_error("RTS failed");
}
}  // namespace

std::pair<Endpoint, Endpoint> connect_on(Loopback& lb, const Endpoint& ar, const Endpoint& br,
                                         const RcOptions& o) {
  Endpoint a = ar, b = br;
  a.qp = a.eng->create_qp(a.pd, o.type, a.scq, a.rcq, o.cap);
  b.qp = b.eng->create_qp(b.pd, o.type, b.scq, b.rcq, o.cap, b.srq);
  if (!a.qp || !b.qp) throw std::runtime_error("create_qp failed");
  bring_up(a, b, lb.b(), o, o.psn_a, o.psn_b);
  bring_up(b, a, lb.a(), o, o.psn_b, o.psn_a);
  return {a, b};
}

std::pair<Endpoint, Endpoint> connect(Loopback& lb, const RcOptions& o) {
  Endpoint a, b;
  a.eng = &lb.a();
  b.eng = &lb.b();
  a.pd = a.eng->alloc_pd();
  b.pd = b.eng->alloc_pd();
  a.scq = a.eng->create_cq(4096);
  a.rcq = a.eng->create_cq(4096);
  b.scq = b.eng->create_cq(4096);
  b.rcq = b.eng->create_cq(4096);
  if (o.use_srq_b) b.srq = b.eng->create_srq(b.pd, 256, 4);
  return connect_on(lb, a, b, o);
}

engine::Sge Buffer::sge(std::uint64_t off, std::uint64_t len) const {
  if (len == UINT64_MAX) len = bytes.size() - off;
  return engine::Sge{addr() + off, static_cast<std::uint32_t>(len), mr ? mr->key : 0};
}

void fill_pattern(std::vector<std::uint8_t>& v, std::uint32_t seed) { apps::fill_pattern(v, seed); }

Buffer make_buffer(Engine& e, Pd* pd, std::size_t size, std::uint8_t seed, std::uint32_t access) {
  Buffer b;
  b.bytes.resize(size);
  fill_pattern(b.bytes, seed);
  b.mr = e.reg_mr(pd, b.bytes.data(), size, access);
  return b;
}

SendWr make_wr(std::uint64_t id, const Sge* s, const Buffer& dst, std::uint64_t off, WrOpcode op) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.sg_list = s;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  wr.rdma.remote_addr = dst.addr() + off;
  wr.rdma.rkey = dst.mr->key;
  return wr;
}

std::vector<Wc> wait_wcs(Loopback& lb, Cq* cq, std::size_t n, std::uint64_t limit_ns) {
  std::vector<Wc> out;
  Wc wc[64];
  lb.run_until(
      [&] {
        int k;
        while ((k = cq->poll(64, wc)) > 0) out.insert(out.end(), wc, wc + k);
        return out.size() >= n;
      },
      limit_ns);
  return out;
}

Frames drain(engine::Engine& e, std::uint64_t t) {
  e.run(t);
  Frames out;
  e.drain_tx([&](std::span<const std::uint8_t> f) { out.emplace_back(f.begin(), f.end()); });
  return out;
}

}  // namespace roce::test
