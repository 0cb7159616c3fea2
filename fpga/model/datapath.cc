// The datapath device model and its host driver (datapath.h).
#include "fpga/model/datapath.h"

#include <cstring>

#include "dataplane/engine/verbs.h"

namespace roce::fpga {

using namespace roce::engine;

static_assert(kAccessLocalWrite == 1 && kAccessRemoteWrite == 2 && kAccessRemoteRead == 4 &&
                  kAccessRemoteAtomic == 8,
              "MrReq/HostMrWrite access bits are the verbs bits");
static_assert(static_cast<int>(WcStatus::kLocQpOpErr) == kWcStatusLocQpOpErr &&
              static_cast<int>(WcStatus::kLocProtErr) == kWcStatusLocProtErr);

namespace {

constexpr std::uint32_t kMask24 = 0xFFFFFF;

/// The BTH destination QP of a RoCEv2 frame (UDP port 4791), if it is one.
std::optional<std::uint32_t> roce_dest_qp(std::span<const std::uint8_t> f) {
  std::size_t o = 12;
  if (f.size() < 14) return std::nullopt;
  std::uint16_t et = static_cast<std::uint16_t>(f[o] << 8 | f[o + 1]);
  o += 2;
  if (et == 0x8100) {
    if (f.size() < o + 4) return std::nullopt;
    et = static_cast<std::uint16_t>(f[o + 2] << 8 | f[o + 3]);
    o += 4;
  }
  std::uint8_t proto = 0;
  if (et == 0x0800) {
    if (f.size() < o + 20) return std::nullopt;
    proto = f[o + 9];
    o += (f[o] & 0xF) * 4u;
  } else if (et == 0x86DD) {
    if (f.size() < o + 40) return std::nullopt;
    proto = f[o + 6];
    o += 40;
  } else {
    return std::nullopt;
  }
  if (proto != 17 || f.size() < o + 8 + 12) return std::nullopt;
  if ((f[o + 2] << 8 | f[o + 3]) != 4791) return std::nullopt;
  o += 8;
  return static_cast<std::uint32_t>(f[o + 5] << 16 | f[o + 6] << 8 | f[o + 7]);
}

}  // namespace

DatapathCard::DatapathCard(const Config& cfg) : cfg_(cfg) {
  eng_ = std::make_unique<Engine>(cfg_.net);
  cq_ = eng_->create_cq(static_cast<std::uint32_t>(cfg_.cq_depth));
}

DatapathCard::~DatapathCard() = default;

Pd* DatapathCard::pd(std::uint32_t n) {
  Pd*& p = pds_[n & kMask24];
  if (p == nullptr) p = eng_->alloc_pd();
  return p;
}

WrRsp DatapathCard::host2qp_path(const QpPath& p) {
  if (p.path_mtu < 1 || p.path_mtu > 5) return {3, 0};
  if (p.qpn == 0) {
    QpCap cap{static_cast<std::uint32_t>(cfg_.wq_depth), 1, 1, 1, 0};
    Qp* qp = eng_->create_qp(pd(p.pd), QpType::kRc, cq_, cq_, cap);
    if (qp == nullptr) return {2, 0};
    QpSlot& s = qps_[qp->qpn];
    s.qp = qp;
    s.path = p;
    s.path.qpn = qp->qpn;
    return {0, qp->qpn};
  }
  auto it = qps_.find(p.qpn & kMask24);
  if (it == qps_.end()) return {1, p.qpn};
  if (it->second.state != static_cast<std::uint8_t>(engine::QpState::kReset)) return {3, p.qpn};
  it->second.path = p;
  return {0, p.qpn};
}

WrRsp DatapathCard::host2qp_wr(const HostQpWrite& w) {
  auto it = qps_.find(w.qpn & kMask24);
  if (it == qps_.end()) return {1, w.qpn};
  QpSlot& s = it->second;
  if (!w.valid) {
    eng_->destroy_qp(s.qp);
    qps_.erase(it);
    return {0, w.qpn};
  }
  const auto target = static_cast<engine::QpState>(w.entry.state);
  QpAttr a;
  if (target == engine::QpState::kRts &&
      s.state == static_cast<std::uint8_t>(engine::QpState::kReset)) {
    // RESET -> INIT -> RTR -> RTS from the path entry and the state entry.
    a.qp_state = engine::QpState::kInit;
    a.qp_access_flags = s.path.access;
    if (eng_->modify_qp(s.qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != kOk)
      return {3, w.qpn};
    a.qp_state = engine::QpState::kRtr;
    a.path_mtu = static_cast<Mtu>(s.path.path_mtu);
    a.dest_qp_num = w.entry.remote_qpn & kMask24;
    a.rq_psn = w.entry.epsn & kMask24;
    a.max_dest_rd_atomic = s.path.max_rd_atomic;
    a.min_rnr_timer = s.path.min_rnr_timer;
    std::memcpy(a.ah.dmac.b.data(), s.path.dmac.data(), 6);
    std::memcpy(a.ah.dgid.b.data(), s.path.dgid.data(), 16);
    if (eng_->modify_qp(s.qp, a,
                        kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                            kQpMinRnrTimer) != kOk)
      return {3, w.qpn};
    a.qp_state = engine::QpState::kRts;
    a.sq_psn = w.entry.next_psn & kMask24;
    a.timeout = s.path.timeout;
    a.retry_cnt = s.path.retry_cnt;
    a.rnr_retry = s.path.rnr_retry;
    a.max_rd_atomic = s.path.max_rd_atomic;
    if (eng_->modify_qp(
            s.qp, a,
            kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic) != kOk)
      return {3, w.qpn};
  } else if (target == engine::QpState::kErr) {
    a.qp_state = engine::QpState::kErr;
    if (eng_->modify_qp(s.qp, a, kQpState) != kOk) return {3, w.qpn};
  } else {
    return {3, w.qpn};  // the card takes a QP up in one write, or down to ERR
  }
  s.state = w.entry.state;
  return {0, w.qpn};
}

WrRsp DatapathCard::host2mr_wr(const HostMrWrite& w) {
  if (!w.valid) {
    auto it = mrs_.find(w.key);
    if (it == mrs_.end()) return {1, w.key};
    if (eng_->dereg_mr(it->second.mr) != kOk) return {3, w.key};
    mrs_.erase(it);
    return {0, w.key};
  }
  if (w.len == 0 || w.paddr == 0) return {3, 0};
  // The engine reaches the region at its DMA address; work requests and peers name vaddr.
  Mr* mr = eng_->reg_mr(pd(w.pd), reinterpret_cast<void*>(w.paddr), w.len, w.vaddr, w.access & 0xF);
  if (mr == nullptr) return {2, 0};
  MrEntry& e = mrs_[mr->key];
  e.w = w;
  e.w.key = mr->key;
  e.mr = mr;
  return {0, mr->key};
}

MrRsp DatapathCard::mr_lookup(const MrReq& r) const {
  auto it = mrs_.find(r.key);
  if (it == mrs_.end()) return {1, 0};
  const HostMrWrite& e = it->second.w;
  if ((e.pd & kMask24) != (r.pd & kMask24)) return {2, 0};
  if (r.vaddr < e.vaddr || r.vaddr - e.vaddr > e.len || r.len > e.len - (r.vaddr - e.vaddr))
    return {3, 0};
  if ((r.access & ~e.access & 0xF) != 0) return {4, 0};
  return {0, e.paddr + (r.vaddr - e.vaddr)};
}

bool DatapathCard::host2dev_wq(const Bits& wr) {
  if (wq_.size() >= cfg_.wq_depth) return false;
  wq_.push_back(wr);
  return true;
}

std::optional<Bits> DatapathCard::dev2host_cq() {
  if (cq_ring_.empty()) return std::nullopt;
  Bits b = cq_ring_.front();
  cq_ring_.pop_front();
  return b;
}

void DatapathCard::complete(const WorkRequest& wr, std::uint8_t status) {
  Completion c;
  c.wr_id = wr.wr_id;
  c.qpn = wr.qpn;
  c.status = status;
  c.opcode = static_cast<std::uint8_t>(wr.opcode == WqOpcode::kRead ? WcOpcode::kRdmaRead
                                                                    : WcOpcode::kRdmaWrite);
  cq_ring_.push_back(pack(c));
  ++cnt_[static_cast<std::size_t>(DevCounter::kCqOut)];
}

void DatapathCard::execute(const WorkRequest& wr) {
  ++cnt_[static_cast<std::size_t>(DevCounter::kWqIn)];
  auto it = qps_.find(wr.qpn);
  if (it == qps_.end() || (wr.opcode != WqOpcode::kWrite && wr.opcode != WqOpcode::kRead)) {
    complete(wr, kWcStatusLocQpOpErr);  // the software engine keeps SEND, WRITE_IMM, atomics
    return;
  }
  // dev2mr_req: the local buffer must be an MR entry of the QP's PD, with local write for the
  // READ's destination. Only then may the engine touch it (by DMA at the entry's paddr).
  if (wr.len > 0) {
    MrReq r{wr.lkey, it->second.path.pd, wr.laddr, wr.len,
            static_cast<std::uint8_t>(wr.opcode == WqOpcode::kRead ? kAccessLocalWrite : 0u)};
    if (mr_lookup(r).status != 0) {
      complete(wr, kWcStatusLocProtErr);
      return;
    }
  }
  Sge sge{wr.laddr, wr.len, wr.lkey};
  SendWr s;
  s.wr_id = wr.wr_id;
  s.sg_list = &sge;
  s.num_sge = wr.len > 0 ? 1 : 0;
  s.opcode = wr.opcode == WqOpcode::kRead ? WrOpcode::kRead : WrOpcode::kWrite;
  s.send_flags = ((wr.flags & 1) ? kSendSignaled : 0u) | ((wr.flags & 2) ? kSendFence : 0u) |
                 ((wr.flags & 4) ? kSendSolicited : 0u);
  s.rdma.remote_addr = wr.raddr;
  s.rdma.rkey = wr.rkey;
  if (eng_->post_send(it->second.qp, &s, nullptr) != kOk) complete(wr, kWcStatusLocQpOpErr);
}

void DatapathCard::step(std::uint64_t now_ns) {
  while (!wq_.empty()) {
    execute(unpack_work_request(wq_.front()));
    wq_.pop_front();
  }
  eng_->run(now_ns);
  collect();
}

void DatapathCard::collect() {
  Wc wc[32];
  int n;
  while ((n = cq_->poll(32, wc)) > 0) {
    for (int i = 0; i < n; ++i) {
      Completion c;
      c.wr_id = wc[i].wr_id;
      c.qpn = wc[i].qp_num;
      c.status = static_cast<std::uint8_t>(wc[i].status);
      c.opcode = static_cast<std::uint8_t>(wc[i].opcode);
      c.byte_len = wc[i].byte_len;
      c.imm = wc[i].imm_data;
      cq_ring_.push_back(pack(c));
      ++cnt_[static_cast<std::size_t>(DevCounter::kCqOut)];
    }
  }
}

bool DatapathCard::net2dev_rx(std::span<const std::uint8_t> frame, std::uint64_t now_ns) {
  const auto qpn = roce_dest_qp(frame);
  if (!qpn || qps_.find(*qpn) == qps_.end()) return false;
  ++cnt_[static_cast<std::size_t>(DevCounter::kRxPkgs)];
  ++cnt_[static_cast<std::size_t>(DevCounter::kRoceRxPkgs)];
  const std::uint64_t bad = eng_->stats().get(Counter::kRxDropVerdict);
  eng_->receive(frame, now_ns);
  collect();  // a completion goes out as soon as the frame that finished it is in
  if (eng_->stats().get(Counter::kRxDropVerdict) == bad)
    ++cnt_[static_cast<std::size_t>(DevCounter::kIbvRxPkgs)];
  return true;
}

void DatapathCard::count_tx(std::span<const std::uint8_t> f) {
  ++cnt_[static_cast<std::size_t>(DevCounter::kTxPkgs)];
  if (roce_dest_qp(f)) {
    ++cnt_[static_cast<std::size_t>(DevCounter::kRoceTxPkgs)];
    ++cnt_[static_cast<std::size_t>(DevCounter::kIbvTxPkgs)];
  }
}

const std::array<std::uint64_t, kDevCounters>& DatapathCard::counters() {
  const Stats& st = eng_->stats();
  // The transport's own counts, under Coyote's names: packets dropped for their PSN (out of
  // sequence, duplicates, responses outside the window) and packets sent again.
  cnt_[static_cast<std::size_t>(DevCounter::kPsnDropCnt)] =
      st.get(Counter::kSeqErrNakSent) + st.get(Counter::kRxDropAfterSeqNak) +
      st.get(Counter::kDuplicateRequests) + st.get(Counter::kRxDropUnexpected);
  cnt_[static_cast<std::size_t>(DevCounter::kRetransCnt)] = st.get(Counter::kRetransmittedPackets);
  cnt_[static_cast<std::size_t>(DevCounter::kRxIcrcDrop)] =
      st.verdicts[static_cast<std::size_t>(wire::Verdict::kBadIcrc)];
  return cnt_;
}

// ---- the driver ----------------------------------------------------------------------------

std::uint32_t DatapathDriver::reg_mr(std::uint32_t pd, void* addr, std::uint64_t len,
                                     std::uint8_t access, std::uint64_t iova) {
  HostMrWrite w;
  w.valid = true;
  w.pd = pd;
  w.vaddr = iova != 0 ? iova : reinterpret_cast<std::uint64_t>(addr);
  w.len = len;
  w.paddr = reinterpret_cast<std::uint64_t>(addr);  // the model's DMA address: the host's own
  w.access = access;
  const WrRsp r = card_.host2mr_wr(w);
  return r.status == 0 ? r.id : 0;
}

bool DatapathDriver::dereg_mr(std::uint32_t key) {
  HostMrWrite w;
  w.key = key;
  return card_.host2mr_wr(w).status == 0;
}

std::uint32_t DatapathDriver::create_qp(const QpPath& path) {
  QpPath p = path;
  p.qpn = 0;
  const WrRsp r = card_.host2qp_path(p);
  return r.status == 0 ? r.id : 0;
}

bool DatapathDriver::connect(std::uint32_t qpn, std::uint32_t remote_qpn, std::uint32_t sq_psn,
                             std::uint32_t rq_psn) {
  HostQpWrite w;
  w.qpn = qpn;
  w.valid = true;
  w.entry.state = static_cast<std::uint8_t>(engine::QpState::kRts);
  w.entry.epsn = rq_psn & kMask24;
  w.entry.next_psn = sq_psn & kMask24;
  w.entry.oldest_unacked = sq_psn & kMask24;
  w.entry.remote_qpn = remote_qpn & kMask24;
  w.entry.retries_left = 7;
  return card_.host2qp_wr(w).status == 0;
}

bool DatapathDriver::set_path(std::uint32_t qpn, const QpPath& path) {
  QpPath p = path;
  p.qpn = qpn;
  return qpn != 0 && card_.host2qp_path(p).status == 0;
}

bool DatapathDriver::error(std::uint32_t qpn) {
  HostQpWrite w;
  w.qpn = qpn;
  w.valid = true;
  w.entry.state = static_cast<std::uint8_t>(engine::QpState::kErr);
  return card_.host2qp_wr(w).status == 0;
}

bool DatapathDriver::destroy_qp(std::uint32_t qpn) {
  HostQpWrite w;
  w.qpn = qpn;
  return card_.host2qp_wr(w).status == 0;
}

std::vector<Completion> DatapathDriver::poll() {
  std::vector<Completion> out;
  while (auto b = card_.dev2host_cq()) out.push_back(unpack_completion(*b));
  return out;
}

}  // namespace roce::fpga
