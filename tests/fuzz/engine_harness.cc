/// @file
/// The seeded engine of engine_harness.h and its record interpreter.
#include "tests/fuzz/engine_harness.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

// ASAN_POISON_MEMORY_REGION: a no-op without ASan (gcc and clang both ship the header).
#if defined(__has_include)
#if __has_include(<sanitizer/asan_interface.h>)
#include <sanitizer/asan_interface.h>
#endif
#endif
#ifndef ASAN_POISON_MEMORY_REGION
#define ASAN_POISON_MEMORY_REGION(a, s) ((void)(a), (void)(s))
#define ASAN_UNPOISON_MEMORY_REGION(a, s) ((void)(a), (void)(s))
#endif

namespace roce::fuzz {

using namespace roce::engine;
using wire::Opcode;
using wire::OpMask;
using wire::Psn;

namespace {

// Documentation addresses (RFC 5737) and locally administered MACs.
constexpr wire::MacAddr kMacUs{{0x02, 0x00, 0x00, 0x00, 0xF0, 0x01}};
constexpr wire::MacAddr kMacPeer{{0x02, 0x00, 0x00, 0x00, 0xF0, 0x02}};
constexpr wire::Ipv4Addr kIpUs{0xC0000201};    // 192.0.2.1
constexpr wire::Ipv4Addr kIpPeer{0xC0000202};  // 192.0.2.2
constexpr std::uint32_t kPeerRcQpn = 0x000111;
constexpr std::uint32_t kPeerUcQpn = 0x000222;
constexpr std::uint32_t kPeerUdQpn = 0x000333;
constexpr std::uint32_t kQkey = 0x11111111;
// Both PSN spaces start just before the wrap, so that the wrap is always in reach.
constexpr std::uint32_t kEpsn = 0xFFFFF0;  // what our responder expects first
constexpr std::uint32_t kSpsn = 0xFFFFE0;  // what our requester sends first
constexpr std::uint32_t kPeerRkey = 0x5EED;
constexpr std::size_t kMaxPayload = 4096 + 64;

constexpr std::array<Opcode, 17> kRcRequests{
    Opcode::kRcSendFirst,   Opcode::kRcSendMiddle,   Opcode::kRcSendLast,   Opcode::kRcSendLastImm,
    Opcode::kRcSendOnly,    Opcode::kRcSendOnlyImm,  Opcode::kRcWriteFirst, Opcode::kRcWriteMiddle,
    Opcode::kRcWriteLast,   Opcode::kRcWriteLastImm, Opcode::kRcWriteOnly,  Opcode::kRcWriteOnlyImm,
    Opcode::kRcReadRequest, Opcode::kRcCompareSwap,  Opcode::kRcFetchAdd,   Opcode::kRcSendLastInv,
    Opcode::kRcSendOnlyInv};
constexpr std::array<Opcode, 6> kRcResponses{
    Opcode::kRcReadResponseFirst, Opcode::kRcReadResponseMiddle, Opcode::kRcReadResponseLast,
    Opcode::kRcReadResponseOnly,  Opcode::kRcAcknowledge,        Opcode::kRcAtomicAcknowledge};
constexpr std::array<std::uint32_t, EngineHarness::kMrs> kMrSize{4096, 8192, 4096, 16384, 8192};
constexpr std::array<std::uint32_t, EngineHarness::kMrs> kMrAccess{
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic,
    kAccessLocalWrite | kAccessRemoteWrite, kAccessRemoteRead, kAccessLocalWrite,
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead};

Opcode pick(std::uint8_t raw, std::span<const Opcode> fallback) {
  if (wire::opcode_info(raw).valid()) return static_cast<Opcode>(raw);
  return fallback[raw % fallback.size()];
}

void bring_up(Engine& e, Qp* qp, QpType type, std::uint32_t peer_qpn, Mtu mtu) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = kMrAccess[0];
  a.qkey = kQkey;
  std::uint32_t mask = kQpState | kQpPkeyIndex | kQpPort;
  mask |= type == QpType::kUd ? kQpQkey : kQpAccessFlags;
  if (e.modify_qp(qp, a, mask) != kOk) std::abort();
  a.qp_state = QpState::kRtr;
  a.path_mtu = mtu;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = kEpsn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah.dmac = kMacPeer;
  a.ah.dgid = wire::ipv4_mapped(kIpPeer);
  mask = kQpState;
  if (type != QpType::kUd) mask |= kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn;
  if (type == QpType::kRc) mask |= kQpMaxDestRdAtomic | kQpMinRnrTimer;
  if (e.modify_qp(qp, a, mask) != kOk) std::abort();
  a.qp_state = QpState::kRts;
  a.sq_psn = kSpsn;
  a.timeout = 10;
  a.retry_cnt = 3;
  a.rnr_retry = 3;
  a.max_rd_atomic = 4;
  mask = kQpState | kQpSqPsn;
  if (type == QpType::kRc) mask |= kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic;
  if (e.modify_qp(qp, a, mask) != kOk) std::abort();
}

}  // namespace

EngineHarness::EngineHarness(std::uint8_t setup, bool allow_dereg, Tap tap)
    : tap_(std::move(tap)), allow_dereg_(allow_dereg), next_req_psn_(kEpsn), last_sent_psn_(kSpsn) {
  const Mtu mtu = static_cast<Mtu>(1 + (setup & 7) % 5);
  mtu_ = mtu_bytes(mtu);
  EngineConfig cfg;
  cfg.mac = kMacUs;
  cfg.ipv4 = kIpUs;
  cfg.max_qps = 8;
  cfg.tx_slots = 64;
  cfg.seed = 1;
  cfg.first_qp_index = 0;
  cfg.advertise_credits = !(setup & 8);
  eng_ = std::make_unique<Engine>(cfg);
  peer_.mac = kMacPeer;
  peer_.ipv4 = kIpPeer;

  pd_ = eng_->alloc_pd();
  cq_ = eng_->create_cq(1024);
  const QpCap cap{32, 32, 4, 4, 64};
  rc_ = eng_->create_qp(pd_, QpType::kRc, cq_, cq_, cap);
  uc_ = eng_->create_qp(pd_, QpType::kUc, cq_, cq_, cap);
  ud_ = eng_->create_qp(pd_, QpType::kUd, cq_, cq_, cap);
  if (!rc_ || !uc_ || !ud_) std::abort();
  bring_up(*eng_, rc_, QpType::kRc, kPeerRcQpn, mtu);
  // Selective repeat on the RC QP (issue 32): its out-of-order placement and SACKs are fed.
  // Indices from 0 each way (SrIndexBase): the inputs reach placement with small indices.
  if ((setup & 16) && eng_->set_selective_repeat(rc_, true, {0, 0}) != kOk) std::abort();
  bring_up(*eng_, uc_, QpType::kUc, kPeerUcQpn, mtu);
  bring_up(*eng_, ud_, QpType::kUd, kPeerUdQpn, mtu);
  for (std::size_t i = 0; i < kMrs; ++i) {
    mem_[i].assign(kMrSize[i], static_cast<std::uint8_t>(0xA0 + i));
    access_[i] = kMrAccess[i];
    mr_[i] = i == kFastRegMr ? eng_->alloc_mr(pd_, 1 << 20)
                             : eng_->reg_mr(pd_, mem_[i].data(), mem_[i].size(), access_[i]);
    if (!mr_[i]) std::abort();
  }
  // MR 4 gets its memory through a REG_MR work request, first on the RC send queue.
  fast_reg(0x01);
  // Receives: RC and UC into MR 0 and 1 (two SGEs), UD into MR 3 (room for the GRH).
  for (unsigned i = 0; i < 8; ++i) {
    const Sge two[2] = {{reinterpret_cast<std::uint64_t>(mem_[0].data()), 2048, mr_[0]->key},
                        {reinterpret_cast<std::uint64_t>(mem_[1].data()), 4096, mr_[1]->key}};
    const Sge ud{reinterpret_cast<std::uint64_t>(mem_[3].data()), 40 + 4096, mr_[3]->key};
    RecvWr r;
    r.wr_id = ++wr_id_;
    r.sg_list = two;
    r.num_sge = 2;
    eng_->post_recv(rc_, &r, nullptr);
    eng_->post_recv(uc_, &r, nullptr);
    r.sg_list = &ud;
    r.num_sge = 1;
    eng_->post_recv(ud_, &r, nullptr);
  }
  // Work for the completer: a multi-packet WRITE, a READ, both atomics and two SENDs, all
  // waiting for the peer's answers (which the input supplies, or not).
  const std::uint64_t local = reinterpret_cast<std::uint64_t>(mem_[3].data());
  const Sge big{local, 3 * mtu_ + 100, mr_[3]->key};
  const Sge read_into{local + 8192, 2 * mtu_ + 8, mr_[3]->key};
  const Sge eight{local + 16384 - 64, 8, mr_[3]->key};
  const Sge small{local + 100, 100, mr_[3]->key};
  SendWr w[6];
  w[0].opcode = WrOpcode::kWrite;
  w[0].sg_list = &big;
  w[1].opcode = WrOpcode::kRead;
  w[1].sg_list = &read_into;
  w[2].opcode = WrOpcode::kFetchAdd;
  w[2].sg_list = &eight;
  w[2].atomic = {0x10000, kPeerRkey, 1, 0};
  w[3].opcode = WrOpcode::kCmpSwap;
  w[3].sg_list = &eight;
  w[3].atomic = {0x10008, kPeerRkey, 0, 7};
  w[4].opcode = WrOpcode::kSend;
  w[4].sg_list = &small;
  w[5].opcode = WrOpcode::kSendImm;
  w[5].sg_list = &small;
  w[5].imm_data = 0xC0FFEE;
  for (SendWr& x : w) {
    x.wr_id = ++wr_id_;
    x.num_sge = 1;
    x.send_flags = kSendSignaled;
    if (x.opcode == WrOpcode::kWrite || x.opcode == WrOpcode::kRead) x.rdma = {0x20000, kPeerRkey};
    eng_->post_send(rc_, &x, nullptr);
  }
  w[4].wr_id = ++wr_id_;
  eng_->post_send(uc_, &w[4], nullptr);
  settle();
}

EngineHarness::~EngineHarness() {
  for (std::size_t i = 0; i < kMrs; ++i)
    if (poisoned_[i]) ASAN_UNPOISON_MEMORY_REGION(mem_[i].data(), mem_[i].size());
}

void EngineHarness::run(Reader& in) {
  for (; records_ < kMaxRecords && !in.empty(); ++records_) {
    if (starts_.size() < kMaxRecords) starts_.push_back(in.left());
    switch (static_cast<EngineOp>(in.u8() % static_cast<unsigned>(EngineOp::kCount_))) {
      case EngineOp::kRequest:
        request(in);
        break;
      case EngineOp::kResponse:
        response(in);
        break;
      case EngineOp::kRaw:
        raw(in);
        break;
      case EngineOp::kTime: {
        const bool us = in.u8() & 1;
        now_ += std::uint64_t{in.u32()} * (us ? 1000 : 1);
        break;
      }
      case EngineOp::kPost:
        post(in);
        break;
      case EngineOp::kDereg:
        dereg(in);
        break;
      case EngineOp::kReg:
        reg(in);
        break;
      case EngineOp::kCount_:
        break;
    }
    settle();
  }
}

wire::FrameSpec EngineHarness::spec_to_us(std::uint32_t dest_qpn) const {
  wire::FrameSpec s;
  s.src_mac = kMacPeer;
  s.dst_mac = kMacUs;
  s.src_ip4 = kIpPeer;
  s.dst_ip4 = kIpUs;
  s.dest_qp = wire::Qpn(dest_qpn);
  return s;
}

void EngineHarness::inject(const wire::FrameSpec& s, std::size_t payload_len) {
  std::vector<std::uint8_t> payload(payload_len);
  for (std::size_t i = 0; i < payload_len; ++i)
    payload[i] = static_cast<std::uint8_t>(s.psn.raw() + i);
  frame_.assign(wire::frame_len(s, payload_len), 0);
  const std::size_t n = wire::build_frame(s, payload, frame_);
  if (n == 0) return;  // the opcode carries no payload, or not this much
  frame_.resize(n);
  if (tap_) tap_(frame_, false);
  eng_->receive(frame_, now_);
  sync_fast_reg();
}

void EngineHarness::request(Reader& in) {
  const Opcode op = pick(in.u8(), kRcRequests);
  const std::uint8_t flags = in.u8();
  const std::uint32_t dest[3] = {rc_->qpn, uc_->qpn, ud_->qpn};
  const unsigned to = flags >> 6;
  wire::FrameSpec s = spec_to_us(to < 3 ? dest[to] : 0);
  s.opcode = op;
  s.ack_req = flags & 1;
  s.se = flags & 2;
  s.fecn = flags & 4;
  s.becn = flags & 8;
  s.mig_req = flags & 16;
  if (flags & 32) {
    s.psn = Psn(in.u32());
  } else {
    s.psn = next_req_psn_ + static_cast<std::uint32_t>(static_cast<std::int8_t>(in.u8()));
  }
  if (to == 3) s.dest_qp = wire::Qpn(in.u32());
  const std::uint8_t key_sel = in.u8();
  const std::size_t mr = key_sel % kMrs;
  const std::uint32_t key = (key_sel & 0x80) ? in.u32() : mr_[mr] ? mr_[mr]->key : 0;
  const std::uint64_t va = reinterpret_cast<std::uint64_t>(mem_[mr].data()) + in.u32();
  const std::uint32_t dma_len = in.u32();
  const std::size_t payload = std::min<std::size_t>(in.u16(), kMaxPayload);
  const wire::OpcodeInfo& info = wire::opcode_info(op);
  s.reth = {va, key, dma_len};
  s.ieth_rkey = key;
  if (info.has(wire::Ext::kAtomicEth)) {
    s.atomic.va = va;
    s.atomic.rkey = key;
    s.atomic.swap_add = in.u64();
    s.atomic.compare = in.u64();
  }
  if (info.has(wire::Ext::kImmDt)) s.imm = in.u32();
  if (info.has(wire::Ext::kDeth)) s.deth = {(flags & 1) ? in.u32() : kQkey, wire::Qpn(kPeerUdQpn)};
  inject(s, info.mask.has(OpMask::kPayload) ? payload : 0);
  if (to == 0) next_req_psn_ = s.psn + 1;
}

void EngineHarness::response(Reader& in) {
  const Opcode op = pick(in.u8(), kRcResponses);
  const std::uint8_t flags = in.u8();
  wire::FrameSpec s = spec_to_us(rc_->qpn);
  s.opcode = op;
  s.ack_req = flags & 1;
  s.becn = flags & 8;
  if (flags & 32) {
    s.psn = Psn(in.u32());
  } else {
    s.psn = last_sent_psn_ + static_cast<std::uint32_t>(static_cast<std::int8_t>(in.u8()));
  }
  s.aeth.syndrome = wire::Syndrome(in.u8());
  s.aeth.msn = wire::Msn(in.u16());
  const std::size_t payload = std::min<std::size_t>(in.u16(), kMaxPayload);
  const wire::OpcodeInfo& info = wire::opcode_info(op);
  if (info.has(wire::Ext::kAtomicAckEth)) s.atomic_orig = in.u64();
  inject(s, info.mask.has(OpMask::kPayload) ? payload : 0);
}

void EngineHarness::raw(Reader& in) {
  const std::uint8_t flags = in.u8();
  const auto bytes = in.bytes(in.u16());
  frame_.assign(bytes.begin(), bytes.end());
  if (flags & 1) {
    wire::RxPkt p;
    wire::ParseOptions po;
    po.verify_icrc = false;
    if (wire::parse_frame(frame_, p, po) == wire::Verdict::kOk) {
      const std::size_t at = p.frame_len - wire::kIcrcSize;
      wire::store_le32(frame_.data() + at,
                       wire::compute_icrc(frame_.data() + p.l3_off, at - p.l3_off, p.ip_version));
    }
  }
  if (tap_) tap_(frame_, false);
  eng_->receive(frame_, now_, flags & 2);
  sync_fast_reg();
}

void EngineHarness::post(Reader& in) {
  const std::uint8_t what = in.u8();
  const std::uint32_t len = in.u16();
  const std::uint8_t flags = in.u8();
  const std::uint32_t rkey = in.u32();
  const std::size_t mr = what % kMrs;
  const std::uint64_t base = reinterpret_cast<std::uint64_t>(mem_[mr].data());
  const Sge sge{base, len, mr_[mr] ? mr_[mr]->key : rkey};
  Qp* qp = (flags & 64) ? uc_ : rc_;
  if ((what >> 4) == 15) {  // a receive
    RecvWr r;
    r.wr_id = ++wr_id_;
    r.sg_list = &sge;
    r.num_sge = 1;
    eng_->post_recv((flags & 128) ? ud_ : qp, &r, nullptr);
    return;
  }
  constexpr WrOpcode kOps[] = {WrOpcode::kWrite,    WrOpcode::kWriteImm, WrOpcode::kSend,
                               WrOpcode::kSendImm,  WrOpcode::kRead,     WrOpcode::kCmpSwap,
                               WrOpcode::kFetchAdd, WrOpcode::kLocalInv, WrOpcode::kSendInv,
                               WrOpcode::kRegMr};
  const WrOpcode op = kOps[(what >> 4) % std::size(kOps)];
  if (op == WrOpcode::kRegMr) {
    fast_reg(static_cast<std::uint8_t>(len));
    return;
  }
  SendWr w;
  w.wr_id = ++wr_id_;
  w.opcode = op;
  w.sg_list = &sge;
  w.num_sge = (flags & 4) ? 0 : 1;
  w.send_flags = flags & (kSendFence | kSendSignaled | kSendSolicited | kSendInline);
  // Inline data is read by post_send itself, with no key: an application does not point it at
  // memory it has given back (the harness poisoned it).
  if (poisoned_[mr]) w.send_flags &= ~std::uint32_t{kSendInline};
  w.imm_data = rkey;
  w.invalidate_rkey = op == WrOpcode::kLocalInv ? mr_[kFastRegMr]->key : rkey;
  w.rdma = {0x20000 + len, rkey};
  w.atomic = {0x10000 + (len & 8), rkey, len, rkey};
  AddressVector av;
  av.dmac = kMacPeer;
  av.dgid = wire::ipv4_mapped(kIpPeer);
  w.ud = {&av, kPeerUdQpn, kQkey};
  eng_->post_send((flags & 128) ? ud_ : qp, &w, nullptr);
}

void EngineHarness::fast_reg(std::uint8_t variant) {
  Mr* fr = mr_[kFastRegMr];
  SendWr w;
  w.wr_id = ++wr_id_;
  w.opcode = WrOpcode::kRegMr;
  w.send_flags = kSendSignaled;
  w.reg = {fr->key, variant, reinterpret_cast<std::uint64_t>(mem_[kFastRegMr].data()),
           mem_[kFastRegMr].size(), kMrAccess[kFastRegMr]};
  eng_->post_send(rc_, &w, nullptr);
}

// MR 4's memory is the application's whenever the engine holds the MR invalid (before a REG_MR
// executes, after a LOCAL_INV executes or a SEND with invalidate arrives): poisoned then, so
// that ASan reports any access. Synchronised with the engine's own state after every call into
// it (a completion comes later than the execution it reports: a REG_MR executed but not yet
// completed already grants access).
void EngineHarness::sync_fast_reg() {
  if (!allow_dereg_) return;
  const bool valid = mr_[kFastRegMr]->state == MrState::kValid;
  std::vector<std::uint8_t>& m = mem_[kFastRegMr];
  if (!valid && !poisoned_[kFastRegMr]) {
    ASAN_POISON_MEMORY_REGION(m.data(), m.size());
    poisoned_[kFastRegMr] = true;
  } else if (valid && poisoned_[kFastRegMr]) {
    ASAN_UNPOISON_MEMORY_REGION(m.data(), m.size());
    poisoned_[kFastRegMr] = false;
  }
}

void EngineHarness::dereg(Reader& in) {
  const std::size_t i = in.u8() % kMrs;
  if (!allow_dereg_ || !mr_[i] || i == kFastRegMr) return;
  if (eng_->dereg_mr(mr_[i]) != kOk) return;
  mr_[i] = nullptr;
  // Deregistered memory is the application's again (it may free it): the engine must not
  // touch it, and ASan now says so if it does.
  ASAN_POISON_MEMORY_REGION(mem_[i].data(), mem_[i].size());
  poisoned_[i] = true;
}

void EngineHarness::reg(Reader& in) {
  const std::size_t i = in.u8() % kMrs;
  const std::uint32_t access = in.u8() & 0xF;
  if (!allow_dereg_ || mr_[i] || i == kFastRegMr) return;
  ASAN_UNPOISON_MEMORY_REGION(mem_[i].data(), mem_[i].size());
  poisoned_[i] = false;
  mr_[i] = eng_->reg_mr(pd_, mem_[i].data(), mem_[i].size(), access);
  access_[i] = access;
  if (!mr_[i]) {
    ASAN_POISON_MEMORY_REGION(mem_[i].data(), mem_[i].size());
    poisoned_[i] = true;
  }
}

void EngineHarness::settle() {
  now_ += 1000;
  eng_->run(now_);
  eng_->drain_tx([&](std::span<const std::uint8_t> f) {
    if (tap_) tap_(f, true);
    wire::RxPkt p;
    if (wire::parse_frame(f, p) != wire::Verdict::kOk) std::abort();  // we sent garbage
    if (p.dest_qp.raw() == kPeerRcQpn && p.info->mask.has(OpMask::kRequest)) last_sent_psn_ = p.psn;
  });
  sync_fast_reg();
  Wc wc[64];
  while (eng_->poll_cq(cq_, 64, wc) > 0) {
  }
  // MR 2 allows remote reads only, not even local writes: nothing may change it, neither a
  // peer's WRITE or atomic nor a receive or READ response the input aims at it.
  if (access_[2] == kMrAccess[2] && mr_[2]) {
    // One memcmp, not a traced compare per byte (that was most of the run time).
    static const std::vector<std::uint8_t> fill(kMrSize[2], 0xA2);
    if (std::memcmp(mem_[2].data(), fill.data(), fill.size()) != 0) std::abort();
  }
}

}  // namespace roce::fuzz
