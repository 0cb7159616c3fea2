#include "tests/support/crafted_peer.h"

#include <gtest/gtest.h>

#include "tests/support/loopback.h"

namespace roce::test {

using namespace roce::engine;

namespace {
engine::EngineConfig crafted_config(const CraftedOptions& o) {
  engine::EngineConfig c = Loopback::default_config(1);
  if (o.tx_slots != 0) c.tx_slots = o.tx_slots;
  return c;
}
}  // namespace

CraftedPeer::CraftedPeer(const CraftedOptions& o)
    : eng(crafted_config(o)), peer(Loopback::default_config(0)) {
  pd = eng.alloc_pd();
  cq = eng.create_cq(o.cq_depth);
  qp = eng.create_qp(pd, o.type, cq, cq, QpCap{16, 16, 2, 2, 0});
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = o.access;
  EXPECT_EQ(eng.modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags), kOk);
  a.qp_state = QpState::kRtr;
  a.path_mtu = o.mtu;
  a.dest_qp_num = kPeerQpn;
  a.rq_psn = kEpsn;
  a.max_dest_rd_atomic = o.max_dest_rd_atomic;
  a.min_rnr_timer = 12;
  a.ah.dmac = peer.mac;
  a.ah.dgid = wire::ipv4_mapped(peer.ipv4);
  std::uint32_t mask = kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn;
  if (o.type == QpType::kRc) mask |= kQpMaxDestRdAtomic | kQpMinRnrTimer;
  EXPECT_EQ(eng.modify_qp(qp, a, mask), kOk);
  mem.resize(o.mem_size);
  mr = eng.reg_mr(pd, mem.data(), mem.size(),
                  kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic);
}

void CraftedPeer::inject(const Req& r) {
  wire::FrameSpec s;
  s.src_mac = peer.mac;
  s.dst_mac = eng.config().mac;
  s.src_ip4 = peer.ipv4;
  s.dst_ip4 = eng.config().ipv4;
  s.opcode = r.op;
  s.dest_qp = wire::Qpn(qp->qpn);
  s.psn = wire::Psn(r.psn);
  s.ack_req = r.ack_req;
  s.reth = {r.va, r.rkey, r.dma_len};
  s.atomic = {r.va, r.rkey, r.op == wire::Opcode::kRcCompareSwap ? r.swap : r.compare_add,
              r.compare_add};
  s.ieth_rkey = r.ieth_rkey;
  s.imm = r.imm;
  s.se = r.se;
  std::vector<std::uint8_t> payload =
      r.bytes.empty() ? std::vector<std::uint8_t>(r.payload_len, static_cast<std::uint8_t>(r.psn))
                      : r.bytes;
  std::vector<std::uint8_t> frame(wire::frame_len(s, payload.size()));
  ASSERT_EQ(wire::build_frame(s, payload, frame), frame.size());
  eng.receive(frame, now);
}

void CraftedPeer::inject(wire::Opcode op, std::uint32_t psn, std::size_t payload_len, bool ack_req,
                         std::uint64_t off, std::uint32_t dma_len) {
  Req r;
  r.op = op;
  r.psn = psn;
  r.payload_len = payload_len;
  r.ack_req = ack_req;
  r.va = mem_addr() + off;
  r.rkey = mr ? mr->key : 0;
  r.dma_len = dma_len;
  inject(r);
}

std::vector<Answer> CraftedPeer::flush() {
  now += 1000;
  eng.run(now);
  std::vector<Answer> out;
  eng.drain_tx([&](std::span<const std::uint8_t> f) {
    wire::RxPkt p;
    ASSERT_EQ(wire::parse_frame(f, p), wire::Verdict::kOk);
    EXPECT_EQ(p.dest_qp.raw(), kPeerQpn);
    const bool aeth = p.info->has(wire::Ext::kAeth);
    out.push_back({p.opcode, p.psn.raw(), aeth ? p.aeth().syndrome().raw() : std::uint8_t{0},
                   aeth ? p.aeth().msn().raw() : 0, p.payload_len});
  });
  return out;
}

void CraftedPeer::to_rts() {
  QpAttr a;
  a.qp_state = QpState::kRts;
  a.sq_psn = kSpsn;
  a.timeout = 14;
  a.retry_cnt = 3;
  a.rnr_retry = 3;
  a.max_rd_atomic = 4;
  ASSERT_EQ(eng.modify_qp(qp, a,
                          kQpState | kQpSqPsn |
                              (qp->type == QpType::kRc
                                   ? kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic
                                   : 0u)),
            kOk);
}

void CraftedPeer::respond(wire::Opcode op, std::uint32_t psn, std::uint8_t syndrome,
                          std::size_t payload_len, std::uint64_t orig, std::uint32_t msn) {
  wire::FrameSpec s;
  s.src_mac = peer.mac;
  s.dst_mac = eng.config().mac;
  s.src_ip4 = peer.ipv4;
  s.dst_ip4 = eng.config().ipv4;
  s.opcode = op;
  s.dest_qp = wire::Qpn(qp->qpn);
  s.psn = wire::Psn(psn);
  s.aeth = {wire::Syndrome(syndrome), wire::Msn(msn)};
  s.atomic_orig = orig;
  std::vector<std::uint8_t> payload(payload_len, 0xD5);
  std::vector<std::uint8_t> frame(wire::frame_len(s, payload_len));
  ASSERT_EQ(wire::build_frame(s, payload, frame), frame.size());
  eng.receive(frame, now);
}

void CraftedPeer::post_recvs(int n, std::uint32_t len) {
  for (int i = 0; i < n; ++i) {
    Sge s{mem_addr(), len, mr->key};
    RecvWr r;
    r.wr_id = static_cast<std::uint64_t>(i);
    r.sg_list = &s;
    r.num_sge = 1;
    ASSERT_EQ(eng.post_recv(qp, &r, nullptr), kOk);
  }
}

}  // namespace roce::test
