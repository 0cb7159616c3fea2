/// @file
/// ibv_rc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong (rdma-core libibverbs/examples) spoken
/// by the appliance. The exchange: one "%04x:%06x:%06x:%s" message (lid, qpn, psn, 32 hex
/// digits of GID; 52 bytes with the NUL) per QP each way, then "done" from the client. The
/// traffic: per QP a strict ping-pong of SENDs that the client starts; UD receives carry a
/// 40-byte GRH; srq_pingpong runs -q RC QPs that share one SRQ, and -n counts all QPs' sends.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "apps/common/pingpong_proto.h"
#include "apps/perf/tools.h"
#include "controlplane/address.h"

namespace roce::perf {

using namespace roce::engine;
using namespace roce::runtime;

namespace {

// Q_Key of ibv_ud_pingpong (and of perftest's UD tests).
constexpr std::uint32_t kPingpongQkey = 0x11111111;
constexpr std::size_t kMsgLen = pp::kMsgLen;
using pp::kSrqMaxQp;

Mtu mtu_enum(unsigned m) {
  if (const auto e = mtu_of_bytes(m)) return *e;
  fail("-m must be 256, 512, 1024, 2048 or 4096");
}

pp::Dest parse_msg(const char (&msg)[kMsgLen]) {
  const auto d = pp::dest_of(std::span<const char, kMsgLen>(msg, kMsgLen));
  if (!d) fail("malformed peer message '" + printable(msg, kMsgLen) + "'");
  return *d;
}

}  // namespace

int run_pingpong(const Opts& o, Pingpong kind) {
  Env env(o.link);
  Oob oob(env, o.server, o.port, o.timeout_s);
  return run_pingpong(env, oob, o, kind);
}

int run_pingpong(Env& env, Oob& oob, const Opts& o, Pingpong kind) {
  const bool ud = kind == Pingpong::kUd;
  const unsigned nqp = kind == Pingpong::kSrq ? o.num_qp : 1;
  const bool client = oob.client();
  Engine& eng = env.eng;
  Resources res(eng);

  Pd* pd = eng.alloc_pd();
  res.pds.push_back(pd);
  Cq* cq = eng.create_cq(o.rx_depth + nqp + 16);
  res.cqs.push_back(cq);
  Srq* srq = kind == Pingpong::kSrq ? eng.create_srq(pd, o.rx_depth, 1) : nullptr;
  res.srqs.push_back(srq);
  std::vector<Qp*> qps;
  for (unsigned i = 0; i < nqp; ++i)
    qps.push_back(eng.create_qp(pd, ud ? QpType::kUd : QpType::kRc, cq, cq,
                                QpCap{16, srq ? 0 : o.rx_depth, 1, 1, 0}, srq));
  res.qps = qps;
  // UD receive buffers start with 40 bytes for the GRH (ibv_ud_pingpong posts size + 40).
  const std::uint32_t grh = ud ? 40 : 0;
  // The tools' buffers: 0x7b bytes (rc, ud), zeros (srq); every message carries them.
  const std::uint8_t fill = kind == Pingpong::kSrq ? 0 : 0x7b;
  std::vector<std::uint8_t> buf(o.size, fill), rbuf(o.size + grh);
  Mr* mr = eng.reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  Mr* rmr = eng.reg_mr(pd, rbuf.data(), rbuf.size(), kAccessLocalWrite);
  res.mrs = {mr, rmr};
  if (!mr || !rmr || (kind == Pingpong::kSrq && !srq)) fail("cannot create resources");
  for (Qp* qp : qps) {
    if (!qp) fail("cannot create a QP");
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qkey = kPingpongQkey;
    eng.modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | (ud ? kQpQkey : kQpAccessFlags));
  }
  Sge rs{reinterpret_cast<std::uint64_t>(rbuf.data()), o.size + grh, rmr->key};
  RecvWr rwr;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  const auto post_recv = [&](Qp* qp) {
    const int rc = srq ? eng.post_srq_recv(srq, &rwr, nullptr) : eng.post_recv(qp, &rwr, nullptr);
    if (rc != kOk) fail("post_recv failed");
  };
  for (unsigned i = 0; i < o.rx_depth; ++i) post_recv(qps[0]);

  std::srand(static_cast<unsigned>(port::now_ns()));
  std::vector<std::uint32_t> my_psn(nqp);
  std::vector<std::array<char, kMsgLen>> mine(nqp);
  for (unsigned i = 0; i < nqp; ++i) {
    my_psn[i] = static_cast<std::uint32_t>(std::rand()) & 0xFFFFFF;
    std::snprintf(mine[i].data(), kMsgLen, "%04x:%06x:%06x:%s", 0, qps[i]->qpn, my_psn[i],
                  hex_gid(env.gid).c_str());
    std::printf("  local address:  LID 0x0000, QPN 0x%06x, PSN 0x%06x, GID %s\n", qps[i]->qpn,
                my_psn[i], ctl::to_string(env.gid).c_str());
  }
  std::fflush(stdout);
  oob.open();
  const unsigned nmsg = kind == Pingpong::kSrq ? kSrqMaxQp : 1;
  // (the zero entries of srq_pingpong's fixed-size table)
  mine.resize(nmsg);
  for (unsigned i = nqp; i < nmsg; ++i)
    std::snprintf(mine[i].data(), kMsgLen, "%04x:%06x:%06x:%032x", 0, 0, 0, 0);
  std::vector<pp::Dest> peer(nqp);
  if (client)
    for (auto& m : mine) oob.send(m.data(), kMsgLen);
  for (unsigned i = 0; i < nmsg; ++i) {
    char theirs[kMsgLen] = {};
    oob.recv(theirs, kMsgLen);
    if (i >= nqp) continue;
    peer[i] = parse_msg(theirs);
    std::printf("  remote address: LID 0x0000, QPN 0x%06x, PSN 0x%06x, GID %s\n", peer[i].qpn,
                peer[i].psn, ctl::to_string(peer[i].gid).c_str());
  }
  const auto rip = ctl::ipv4_from_gid(peer[0].gid);
  if (!rip)
    fail("the peer's GID " + ctl::to_string(peer[0].gid) +
         " is not IPv4-mapped (use its RoCEv2 IPv4 GID index)");
  // Resolve the peer's MAC with ARP, as the kernel would.
  const wire::MacAddr peer_mac = env.resolve(*rip, 10);
  AddressVector av;  // UD: where every datagram goes
  av.dgid = peer[0].gid;
  av.dmac = peer_mac;
  av.hop_limit = 64;
  for (unsigned i = 0; i < nqp; ++i) {
    Qp* qp = qps[i];
    QpAttr a;
    if (ud) {
      a.qp_state = QpState::kRtr;
      if (eng.modify_qp(qp, a, kQpState) != kOk) fail("failed to modify QP to RTR");
      a.qp_state = QpState::kRts;
      a.sq_psn = my_psn[i];
      if (eng.modify_qp(qp, a, kQpState | kQpSqPsn) != kOk) fail("failed to modify QP to RTS");
      continue;
    }
    a.qp_state = QpState::kRtr;
    a.path_mtu = mtu_enum(o.mtu);
    a.dest_qp_num = peer[i].qpn;
    a.rq_psn = peer[i].psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah.dgid = peer[i].gid;
    a.ah.dmac = peer_mac;
    a.ah.hop_limit = 64;  // the tools use 1; 64 keeps the frames routable
    if (eng.modify_qp(qp, a,
                      kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                          kQpMinRnrTimer) != kOk)
      fail("failed to modify QP to RTR");
    a.qp_state = QpState::kRts;
    a.sq_psn = my_psn[i];
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (eng.modify_qp(
            qp, a,
            kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic) != kOk)
      fail("failed to modify QP to RTS");
  }
  char done[5] = "done";
  if (!client) {
    for (auto& m : mine) oob.send(m.data(), kMsgLen);
    oob.recv(done, sizeof done);
  } else {
    oob.send(done, sizeof done);
  }

  // Per QP: send after both the previous send completed and a message arrived; the client
  // starts on every QP. -n counts completed sends and receives over all QPs, as the tools do.
  Sge ss{reinterpret_cast<std::uint64_t>(buf.data()), o.size, mr->key};
  SendWr swr;
  swr.opcode = WrOpcode::kSend;
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.send_flags = kSendSignaled;
  swr.ud = {&av, peer[0].qpn, kPingpongQkey};
  enum : unsigned { kSendPending = 1, kRecvPending = 2 };
  std::vector<unsigned> pending(nqp, kRecvPending);
  unsigned scnt = 0, rcnt = 0;
  const auto send_on = [&](unsigned i) {
    swr.ud.remote_qpn = peer[i].qpn;
    if (eng.post_send(qps[i], &swr, nullptr) != kOk) fail("post_send failed");
    pending[i] = kSendPending | kRecvPending;
  };
  if (client)
    for (unsigned i = 0; i < nqp; ++i) send_on(i);
  const auto qp_index = [&](std::uint32_t qpn) {
    for (unsigned i = 0; i < nqp; ++i)
      if (qps[i]->qpn == qpn) return i;
    fail("completion for unknown QP " + std::to_string(qpn));
  };
  const std::uint64_t t0 = port::now_ns();
  const bool ok = env.until(
      [&] {
        Wc wc[32];
        const int n = eng.poll_cq(cq, 32, wc);
        for (int k = 0; k < n; ++k) {
          if (wc[k].status != WcStatus::kSuccess)
            fail("completion with status " + std::string(to_string(wc[k].status)));
          const unsigned i = qp_index(wc[k].qp_num);
          if (wc[k].opcode == WcOpcode::kSend) {
            ++scnt;
            pending[i] &= ~kSendPending;
          } else {
            // A peer may send messages of another size than ours (-s): rdma-core's tools take
            // them as they come. Every byte received is checked. rc/ud: one message at a time,
            // so the buffer is spoiled after the check; srq: the QPs share the receive buffer,
            // so it only can be checked.
            const std::size_t got = std::min<std::size_t>(wc[k].byte_len, rbuf.size());
            for (std::size_t b = grh; b < got; ++b)
              if (rbuf[b] != fill)
                fail("received byte " + std::to_string(b - grh) + " = " + std::to_string(rbuf[b]) +
                     ", expected " + std::to_string(fill));
            if (kind != Pingpong::kSrq)
              std::fill(rbuf.begin() + grh, rbuf.end(), static_cast<std::uint8_t>(~fill));
            ++rcnt;
            pending[i] &= ~kRecvPending;
            post_recv(qps[i]);
          }
          if (scnt < o.iters && pending[i] == 0) send_on(i);
        }
        return scnt >= o.iters && rcnt >= o.iters;
      },
      o.timeout_s);
  if (!ok)
    fail("ping-pong timed out after " + std::to_string(scnt) + " sends and " +
         std::to_string(rcnt) + " receives");
  const double secs = static_cast<double>(port::now_ns() - t0) / 1e9;
  // The peer may still wait for the ACK of its last messages.
  env.until([] { return false; }, 0.2);
  const double bytes = 2.0 * o.size * o.iters;
  std::printf("%.0f bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, secs, bytes * 8 / secs / 1e6);
  std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", o.iters, secs, secs * 1e6 / o.iters);
  const auto& st = eng.stats();
  std::printf("retransmitted %llu, timeouts %llu, RNR NAKs received %llu, rx drops %llu\n",
              static_cast<unsigned long long>(st.get(Counter::kRetransmittedPackets)),
              static_cast<unsigned long long>(st.get(Counter::kRetransmitTimeouts)),
              static_cast<unsigned long long>(st.get(Counter::kRnrNakRcvd)),
              static_cast<unsigned long long>(st.get(Counter::kRxDropVerdict) +
                                              st.get(Counter::kRxDropUnexpected)));
  if (!o.json.empty()) {
    static constexpr const char* kNames[] = {"rc_pingpong", "ud_pingpong", "srq_pingpong"};
    std::ofstream j(o.json);
    j << "{\"test\":\"" << kNames[static_cast<int>(kind)] << "\",\"size\":" << o.size
      << ",\"iters\":" << o.iters << ",\"num_qp\":" << nqp << ",\"mtu\":" << o.mtu
      << ",\"seconds\":" << secs << ",\"mbit_per_sec\":" << bytes * 8 / secs / 1e6
      << ",\"usec_per_iter\":" << secs * 1e6 / o.iters
      << ",\"retransmitted\":" << st.get(Counter::kRetransmittedPackets) << "}\n";
  }
  return 0;
}

}  // namespace roce::perf
