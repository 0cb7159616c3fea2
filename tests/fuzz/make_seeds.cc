/// @file
/// roce-fuzz-seeds --out DIR --config-dir DIR: writes the seed corpus of every fuzz target
/// (DIR/<target>/NNN) from the project's own builders and encoders, and the frames the seeds
/// carry as pcaps (DIR/frames.pcap, DIR/engine.pcap, DIR/cm.pcap) for check_seeds.py, which
/// has tshark confirm they decode as RoCEv2.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "apps/common/pcap_writer.h"
#include "apps/common/pingpong_proto.h"
#include "apps/common/sample_frames.h"
#include "apps/naa/mrsp.h"
#include "apps/netfr/protocol.h"
#include "apps/nfs/nfs3.h"
#include "apps/nfs/rpc.h"
#include "apps/nfs/rpcrdma.h"
#include "apps/perf/coyote_proto.h"
#include "apps/perf/perftest_proto.h"
#include "client/lnet/src/lnet_internal.h"
#include "controlplane/attach/protocol.h"
#include "controlplane/cm/mad.h"
#include "tests/fuzz/engine_harness.h"
#include "tests/fuzz/fuzz_bytes.h"

namespace fs = std::filesystem;
using namespace roce;
using fuzz::EngineOp;
using fuzz::Writer;
using wire::Opcode;

namespace {

class Corpus {
 public:
  Corpus(fs::path dir, std::string target) : dir_(std::move(dir) / std::move(target)) {
    fs::create_directories(dir_);
  }
  void add(std::span<const std::uint8_t> bytes) {
    char name[16];
    std::snprintf(name, sizeof name, "seed-%03u", n_++);
    std::ofstream(dir_ / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  void add(const Writer& w) { add(w.data()); }

 private:
  fs::path dir_;
  unsigned n_ = 0;
};

// ---- frame_parser: one frame of every opcode, four encapsulations ------------------------------
void frame_seeds(const fs::path& out) {
  Corpus c(out, "frame_parser");
  apps::PcapWriter pcap((out / "frames.pcap").string());
  std::uint64_t t = 0;
  for (int v = 0; v < 4; ++v) {
    apps::SampleOptions o;
    o.ip_version = (v & 1) ? wire::IpVersion::kV6 : wire::IpVersion::kV4;
    if (v & 2) o.vlan_id = 100;
    o.pmtu = 256;
    for (const auto& f : apps::make_sample_frames(o)) {
      Writer w;
      w.u8(v == 0 ? 0x07 : 0x03).bytes(f.bytes);  // verify ICRC and IP checksum
      c.add(w);
      pcap.write(f.bytes, t += 1000);
    }
  }
}

// ---- engine_receive: records in the format of engine_harness.h ---------------------------------
class EngineSeed {
 public:
  explicit EngineSeed(std::uint8_t setup) { w_.u8(setup); }
  /// A request to our RC QP (to: 0 RC, 1 UC, 2 UD), at `step` from the next expected PSN.
  EngineSeed& req(Opcode op, std::int8_t step, std::uint8_t key_sel, std::uint32_t va_off,
                  std::uint32_t dma_len, std::uint16_t payload, bool ack_req = true,
                  unsigned to = 0) {
    start();
    w_.u8(static_cast<unsigned>(EngineOp::kRequest)).u8(wire::raw(op));
    w_.u8((ack_req ? 1 : 0) | (to << 6)).u8(static_cast<std::uint8_t>(step)).u8(key_sel);
    if (key_sel & 0x80) w_.u32(0x0BAD0BAD);  // a raw key instead of an MR's
    w_.u32(va_off).u32(dma_len).u16(payload);
    const auto& info = wire::opcode_info(op);
    if (info.has(wire::Ext::kAtomicEth)) w_.u64(5).u64(0);
    if (info.has(wire::Ext::kImmDt)) w_.u32(0x12345678);
    if (info.has(wire::Ext::kDeth) && ack_req) w_.u32(0x11111111);
    ++frames_;
    return *this;
  }
  /// An answer to our RC requester, at `step` from the last PSN it sent.
  EngineSeed& resp(Opcode op, std::int8_t step, std::uint8_t syndrome, std::uint16_t msn,
                   std::uint16_t payload) {
    start();
    w_.u8(static_cast<unsigned>(EngineOp::kResponse)).u8(wire::raw(op)).u8(0);
    w_.u8(static_cast<std::uint8_t>(step)).u8(syndrome).u16(msn).u16(payload);
    if (wire::opcode_info(op).has(wire::Ext::kAtomicAckEth)) w_.u64(42);
    ++frames_;
    return *this;
  }
  EngineSeed& raw(std::span<const std::uint8_t> frame, bool fix_icrc) {
    start();
    w_.u8(static_cast<unsigned>(EngineOp::kRaw))
        .u8(fix_icrc ? 1 : 0)
        .u16(frame.size())
        .bytes(frame);
    ++frames_;
    return *this;
  }
  EngineSeed& time(std::uint32_t us) {
    start();
    w_.u8(static_cast<unsigned>(EngineOp::kTime)).u8(1).u32(us);
    return *this;
  }
  EngineSeed& post(std::uint8_t what, std::uint16_t len, std::uint8_t flags) {
    start();
    w_.u8(static_cast<unsigned>(EngineOp::kPost)).u8(what).u16(len).u8(flags).u32(0x5EED);
    return *this;
  }
  EngineSeed& dereg(std::uint8_t mr) {
    start();
    w_.u8(static_cast<unsigned>(EngineOp::kDereg)).u8(mr);
    return *this;
  }
  EngineSeed& reg(std::uint8_t mr, std::uint8_t access) {
    start();
    w_.u8(static_cast<unsigned>(EngineOp::kReg)).u8(mr).u8(access);
    return *this;
  }
  const Writer& writer() const { return w_; }
  /// Frames the harness must build from this seed: one per request, response and raw record.
  unsigned frames() const { return frames_; }
  /// Bytes left after each record's start, as the harness reports them.
  std::vector<std::size_t> record_starts() const {
    std::vector<std::size_t> v;
    for (std::size_t off : starts_) v.push_back(w_.data().size() - off);
    return v;
  }

 private:
  Writer w_;
  void start() { starts_.push_back(w_.data().size()); }
  unsigned frames_ = 0;
  std::vector<std::size_t> starts_;
};

void engine_seeds(const fs::path& out) {
  Corpus c(out, "engine_receive");
  std::vector<EngineSeed> seeds;
  constexpr std::uint8_t kMtu256 = 0, kMtu1024 = 2, kMtu4096 = 4;
  // The responder: a three-packet WRITE, SENDs, a READ, atomics, and the NAK cases (no write
  // access on MR 2, a bad key, beyond the MR, a PSN gap, a duplicate).
  seeds.emplace_back(kMtu256)
      .req(Opcode::kRcWriteFirst, 0, 0, 0, 600, 256, false)
      .req(Opcode::kRcWriteMiddle, 0, 0, 0, 0, 256, false)
      .req(Opcode::kRcWriteLast, 0, 0, 0, 0, 88)
      .req(Opcode::kRcSendOnly, 0, 0, 0, 0, 100)
      .req(Opcode::kRcSendFirst, 0, 0, 0, 0, 256, false)
      .req(Opcode::kRcSendLastImm, 0, 0, 0, 0, 10)
      .req(Opcode::kRcReadRequest, 0, 0, 64, 700, 0)
      .req(Opcode::kRcFetchAdd, 0, 0, 8, 0, 0)
      .req(Opcode::kRcCompareSwap, 0, 0, 16, 0, 0)
      .req(Opcode::kRcWriteOnlyImm, 0, 1, 100, 40, 40)
      .req(Opcode::kRcSendOnlyInv, 0, 0, 0, 0, 8);
  seeds.emplace_back(kMtu1024)
      .req(Opcode::kRcWriteOnly, 0, 2, 0, 16, 16)  // MR 2: no remote write
      .req(Opcode::kRcWriteOnly, 0, 0, 0, 16, 16)
      .req(Opcode::kRcWriteOnly, 0, 4, 0, 16, 16)     // a raw key
      .req(Opcode::kRcWriteOnly, 0, 0, 4090, 16, 16)  // beyond the MR
      .req(Opcode::kRcWriteOnly, 3, 0, 0, 8, 8)       // a gap
      .req(Opcode::kRcWriteOnly, -3, 0, 0, 8, 8)      // back to the expected PSN
      .req(Opcode::kRcReadRequest, -1, 0, 0, 64, 0)   // a duplicate READ
      .req(Opcode::kRcFetchAdd, 0, 0, 3, 0, 0)        // misaligned
      .req(Opcode::kRcReadRequest, 0, 3, 0, 64, 0);   // MR 3: no remote read
  // The completer: ACKs, READ responses, atomic ACKs, NAKs and RNR NAKs for the work the
  // harness sent, then timeouts.
  seeds.emplace_back(kMtu1024)
      .resp(Opcode::kRcAcknowledge, -6, 0x1F, 1, 0)
      .resp(Opcode::kRcReadResponseFirst, -5, 0x1F, 1, 1024)
      .resp(Opcode::kRcReadResponseMiddle, -4, 0, 0, 1024)
      .resp(Opcode::kRcReadResponseLast, -3, 0x1F, 2, 8)
      .resp(Opcode::kRcAtomicAcknowledge, -2, 0x1F, 3, 0)
      .resp(Opcode::kRcAtomicAcknowledge, -1, 0x1F, 4, 0)
      .resp(Opcode::kRcAcknowledge, 0, 0x1F, 6, 0);
  seeds.emplace_back(kMtu4096)
      .resp(Opcode::kRcAcknowledge, -3, 0x60, 0, 0)  // PSN sequence error NAK
      .time(100)
      .resp(Opcode::kRcAcknowledge, -2, 0x21, 0, 0)  // RNR NAK
      .time(10000)
      .resp(Opcode::kRcAcknowledge, 0, 0x62, 0, 0)  // remote access error
      .time(100000)
      .post(0x00, 100, 2)
      .post(0x40, 64, 2)
      .post(0xF0, 256, 0)
      .time(1000000);
  seeds.emplace_back(kMtu1024)
      .req(Opcode::kUdSendOnly, 0, 0, 0, 0, 100, true, 2)
      .req(Opcode::kUdSendOnlyImm, 0, 0, 0, 0, 1000, false, 2)
      .req(Opcode::kUcSendOnly, 0, 0, 0, 0, 64, false, 1)
      .req(Opcode::kUcWriteFirst, 0, 0, 0, 2048, 1024, false, 1)
      .req(Opcode::kUcWriteLast, 0, 0, 0, 0, 1024, false, 1)
      .post(0x83, 8, 130);
  // Selective repeat on the RC QP (setup bit 4): WRITE Only packets past a gap are placed, the
  // gap is reported (a SACK) after the reorder window, the missing one fills it; a SACK to the
  // requester, and one naming PSNs it never sent.
  seeds.emplace_back(kMtu1024 | 16)
      .req(Opcode::kRcWriteOnly, 1, 0, 64, 64, 64, false)
      .req(Opcode::kRcWriteOnly, 2, 0, 128, 64, 64, false)
      .req(Opcode::kRcSendOnly, 3, 0, 0, 0, 16, false)
      .time(10)
      .req(Opcode::kRcWriteOnly, 4, 0, 256, 64, 64, true)
      .req(Opcode::kRcWriteOnly, 0, 0, 0, 64, 64, true)
      .resp(Opcode::kRcAcknowledge, -3, 0x40, 0, 0)
      .resp(Opcode::kRcAcknowledge, 1, 0x40, 0xFFFF, 0)
      .time(1000);
  // Raw frames: sample frames addressed elsewhere, given a correct ICRC.
  {
    EngineSeed s(kMtu1024);
    apps::SampleOptions o;
    for (const auto& f : apps::make_sample_frames(o)) {
      if (f.spec.opcode == Opcode::kRcWriteOnly || f.spec.opcode == Opcode::kRcAcknowledge ||
          f.spec.opcode == Opcode::kUdSendOnly || f.spec.opcode == Opcode::kCnp)
        s.raw(f.bytes, true);
    }
    seeds.push_back(s);
  }
  // The fast-registered MR 4: a WRITE into it, SEND with Invalidate of its key, a WRITE that
  // must be refused, LOCAL_INV, then REG_MR (key variant 0x5A) and a WRITE with the new key.
  seeds.emplace_back(kMtu1024)
      .req(Opcode::kRcWriteOnly, 0, 4, 0, 64, 64)
      .req(Opcode::kRcSendOnlyInv, 0, 4, 0, 0, 8)
      .req(Opcode::kRcWriteOnly, 0, 4, 0, 64, 64)
      .post(0x70, 0, 2)
      .post(0x90, 0x5A, 0)
      .req(Opcode::kRcWriteOnly, 0, 4, 128, 64, 64);
  // A local invalidation between the packets of a WRITE (caught only with ROCE_FUZZ_DEREG=1).
  seeds.emplace_back(kMtu256)
      .req(Opcode::kRcWriteFirst, 0, 4, 0, 600, 256, false)
      .post(0x70, 0, 2 | 64)  // on the UC QP, whose send queue is not waiting for ACKs
      .req(Opcode::kRcWriteMiddle, 0, 4, 0, 0, 256, false)
      .req(Opcode::kRcWriteLast, 0, 4, 0, 0, 88);
  // Deregistration between the packets of a WRITE (only with ROCE_FUZZ_DEREG=1).
  seeds.emplace_back(kMtu256)
      .req(Opcode::kRcWriteFirst, 0, 0, 0, 600, 256, false)
      .dereg(0)
      .req(Opcode::kRcWriteMiddle, 0, 0, 0, 0, 256, false)
      .req(Opcode::kRcWriteLast, 0, 0, 0, 0, 88)
      .reg(0, 0xF);

  apps::PcapWriter pcap((out / "engine.pcap").string());
  std::uint64_t t = 0;
  for (const auto& s : seeds) {
    c.add(s.writer());
    fuzz::Reader in(s.writer().data().data(), s.writer().data().size());
    unsigned injected = 0;
    fuzz::EngineHarness h(in.u8(), false, [&](std::span<const std::uint8_t> f, bool from_engine) {
      pcap.write(f, t += 1000);
      injected += from_engine ? 0 : 1;
    });
    h.run(in);
    // A seed the harness reads differently from how it was written is caught here.
    if (injected != s.frames() || h.record_starts() != s.record_starts()) {
      std::cerr << "roce-fuzz-seeds: engine seed " << &s - seeds.data()
                << " is not read as it was written (" << injected << " frames, " << h.records()
                << " records)\n";
      std::exit(1);
    }
  }
}

// ---- CM: every message, and exchanges for the state machine ------------------------------------
constexpr std::uint64_t kGuidPeer = 0x02005EFFFE000202ull;

cm::MadBuf mad(std::uint64_t tid, const cm::CmMsg& m) {
  cm::MadHeader h;
  h.tid = tid;
  return cm::encode(h, m);
}

cm::ReqMsg make_req(std::uint16_t port) {
  cm::ReqMsg r;
  r.local_comm_id = 0x1A2B3C4D;
  r.service_id = cm::service_id(cm::PortSpace::kTcp, port);
  r.local_ca_guid = kGuidPeer;
  r.local_qpn = wire::Qpn(0x11);
  r.responder_resources = 4;
  r.initiator_depth = 2;
  r.remote_cm_response_timeout = 20;
  r.starting_psn = wire::Psn(0xABCDEF);
  r.local_cm_response_timeout = 19;
  r.retry_count = 6;
  r.path_mtu = 3;
  r.rnr_retry_count = 5;
  r.max_cm_retries = 15;
  r.primary.local_gid = wire::ipv4_mapped(wire::Ipv4Addr{0xC0000210});
  r.primary.remote_gid = wire::ipv4_mapped(wire::Ipv4Addr{0xC0000201});
  r.primary.hop_limit = 64;
  r.primary.local_ack_timeout = 18;
  const auto cma =
      cm::CmaHeader::ipv4(wire::Ipv4Addr{0xC0000210}, 0xD431, wire::Ipv4Addr{0xC0000201});
  cm::encode_cma_header(
      cma, std::span<std::uint8_t, cm::kCmaHeaderSize>(r.private_data.data(), cm::kCmaHeaderSize));
  return r;
}

std::vector<cm::MadBuf> all_mads() {
  std::vector<cm::MadBuf> v;
  v.push_back(mad(1, make_req(7170)));
  cm::RepMsg rep;
  rep.local_comm_id = 0x5E6F7081;
  rep.remote_comm_id = 0x1A2B3C4D;
  rep.local_qpn = wire::Qpn(0x22);
  rep.starting_psn = wire::Psn(0x123456);
  rep.responder_resources = 2;
  rep.initiator_depth = 4;
  rep.target_ack_delay = 15;
  rep.rnr_retry_count = 7;
  rep.local_ca_guid = kGuidPeer;
  v.push_back(mad(2, rep));
  v.push_back(mad(3, cm::RtuMsg{0x1A2B3C4D, 0x5E6F7081, {}}));
  cm::MraMsg mra;
  mra.local_comm_id = 1;
  mra.remote_comm_id = 2;
  mra.service_timeout = 24;
  v.push_back(mad(4, mra));
  cm::RejMsg rej;
  rej.local_comm_id = 3;
  rej.remote_comm_id = 4;
  rej.reason = cm::RejReason::kConsumerDefined;
  rej.reject_info_length = 4;
  v.push_back(mad(5, rej));
  v.push_back(mad(6, cm::DreqMsg{0x1A2B3C4D, 0x5E6F7081, wire::Qpn(0x22), {}}));
  v.push_back(mad(7, cm::DrepMsg{0x5E6F7081, 0x1A2B3C4D, {}}));
  cm::SidrReqMsg sreq;
  sreq.request_id = 9;
  sreq.pkey = 0xFFFF;
  sreq.service_id = cm::service_id(cm::PortSpace::kUdp, 7171);
  const auto cma =
      cm::CmaHeader::ipv4(wire::Ipv4Addr{0xC0000210}, 0xD431, wire::Ipv4Addr{0xC0000201});
  cm::encode_cma_header(cma, std::span<std::uint8_t, cm::kCmaHeaderSize>(sreq.private_data.data(),
                                                                         cm::kCmaHeaderSize));
  v.push_back(mad(8, sreq));
  cm::SidrRepMsg srep;
  srep.request_id = 9;
  srep.qpn = wire::Qpn(0x33);
  srep.qkey = cm::kRdmaUdpQkey;
  v.push_back(mad(9, srep));
  return v;
}

void cm_seeds(const fs::path& out) {
  const auto mads = all_mads();
  {
    Corpus c(out, "cm_mad");
    apps::PcapWriter pcap((out / "cm.pcap").string());
    std::uint64_t t = 0;
    for (const auto& m : mads) {
      c.add(m);
      wire::FrameSpec s;
      s.src_mac = {{0x02, 0, 0, 0, 0xF0, 0x02}};
      s.dst_mac = {{0x02, 0, 0, 0, 0xF0, 0x01}};
      s.src_ip4 = wire::Ipv4Addr{0xC0000210};
      s.dst_ip4 = wire::Ipv4Addr{0xC0000201};
      s.opcode = Opcode::kUdSendOnly;
      s.dest_qp = wire::Qpn(wire::Qpn::kGsi);
      s.deth = {wire::kGsiQkey, wire::Qpn(wire::Qpn::kGsi)};
      std::vector<std::uint8_t> f(wire::frame_len(s, m.size()));
      wire::build_frame(s, m, f);
      pcap.write(f, t += 1000);
    }
  }
  Corpus c(out, "cm_state");
  const auto put_mad = [](Writer& w, const cm::MadBuf& m, std::uint8_t patch) {
    w.u8(0).u8(0).u8(patch).u16(m.size()).bytes(m);
  };
  // Passive: REQ for a listened service, accept, RTU, DREQ; then time for timewait.
  {
    Writer w;
    put_mad(w, mad(1, make_req(7170)), 0);
    w.u8(4).u8(0);  // accept
    put_mad(w, mads[2], 1);
    put_mad(w, mads[5], 1);
    w.u8(1).u32(2'000'000);
    c.add(w);
  }
  // Passive: a duplicate REQ, a reject, a REQ for nobody.
  {
    Writer w;
    put_mad(w, mad(1, make_req(7170)), 0);
    put_mad(w, mad(1, make_req(7170)), 0);
    w.u8(4).u8(1);
    put_mad(w, mad(2, make_req(9999)), 0);
    c.add(w);
  }
  // Active: connect, the peer's REP (matching our comm ID and TID), DREQ, timeouts.
  {
    Writer w;
    w.u8(2).u8(0).u8(8);
    put_mad(w, mads[1], 3);
    put_mad(w, mads[5], 1);
    w.u8(1).u32(100'000);
    c.add(w);
  }
  // Active: connect, MRA, REJ; connect and never an answer (retries, then unreachable).
  {
    Writer w;
    w.u8(2).u8(0).u8(0);
    put_mad(w, mads[3], 3);
    put_mad(w, mads[4], 3);
    w.u8(2).u8(1).u8(0);
    for (int i = 0; i < 20; ++i) w.u8(1).u32(5'000'000);
    c.add(w);
  }
  // SIDR both ways.
  {
    Writer w;
    put_mad(w, mads[7], 0);
    w.u8(4).u8(0);
    w.u8(2).u8(0x81).u8(4);
    put_mad(w, mads[8], 2);
    c.add(w);
  }
}

// ---- perftest and pingpong -----------------------------------------------------------------
void perf_seeds(const fs::path& out) {
  Corpus c(out, "perftest_proto");
  const auto add = [&](std::uint8_t sel, const auto& bytes) {
    Writer w;
    w.u8(sel).bytes(std::span<const std::uint8_t>(
        reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
    c.add(w);
  };
  add(0, perf::pt::version_msg("6.06"));
  add(0, perf::pt::version_msg("6.29"));
  add(1, perf::pt::encode(perf::pt::SysData{}));
  add(2, perf::pt::mtu_msg(3));
  perf::pt::Dest d{0,
                   16,
                   0x11,
                   0x123456,
                   0xABCD,
                   0x7F0000001000ull,
                   wire::ipv4_mapped(wire::Ipv4Addr{0xC0000201}),
                   0};
  add(3, perf::pt::dest_msg(d));
  add(4, perf::pt::dest_bin(d));
  perf::pt::Report r{65536, 5000, 11.5, 10.25, 0.02};
  add(5, perf::pt::encode(r));
  perf::pt::Params p;
  p.size = 65536;
  p.iters = 5000;
  p.max_qp_rd_atom = 16;
  std::vector<std::uint8_t> pb(perf::pt::kParamsLen);
  perf::pt::encode(p, pb);
  add(6, pb);

  // Coyote: a server's first 4 bytes (here the transfer size the checks need), then a queue
  // (QPN 0: a card's first thread), and a cLib-framed one (function id 1 before the queue).
  Corpus cq(out, "coyote_queue");
  const auto queue = perf::coyote::encode(
      perf::coyote::make_queue(0x0A01D4AD, 0, 0x123456, 0xABCD, 0x7F0000001000ull, 1 << 20));
  for (const std::uint32_t fid : {65536u, 1u}) {
    std::vector<std::uint8_t> b(4);
    std::memcpy(b.data(), &fid, 4);
    b.insert(b.end(), queue.begin(), queue.end());
    cq.add(b);
  }

  Corpus pc(out, "pingpong_msg");
  const auto m = pp::msg({0, 0x11, 0xABCDEF, wire::ipv4_mapped(wire::Ipv4Addr{0xC0000201})});
  pc.add(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(m.data()), m.size()));
}

// ---- NetFR -------------------------------------------------------------------------------------
void netfr_seeds(const fs::path& out) {
  namespace nf = netfr;
  Corpus c(out, "netfr_proto");
  const auto add = [&](std::uint8_t sel, std::span<const std::uint8_t> msg) {
    std::vector<std::uint8_t> b{sel};
    b.insert(b.end(), msg.begin(), msg.end());
    c.add(b);
  };
  add(1, nf::wrap_cm_data(nf::encode_vec(nf::ClientHello{nf::kExtAll})));
  add(1, nf::wrap_cm_data(nf::encode_vec(nf::ServerHello{nf::HelloStatus::kOk, nf::kExtAll})));
  add(1, nf::encode_vec(nf::ClientHello{}));
  add(0, nf::encode_vec(nf::BufferUpdate{3, 4096, 64, 7, 7, 0x1122334455667788ull}));
  add(0, nf::encode_vec(nf::BufferState{5, 4096, 0x7F0000001000ull, 1 << 20, 0x1234}));
  add(0, nf::encode_vec(nf::HostBufferSizes{{1 << 20, 8 << 20}}));
  const std::uint8_t payload[6] = {'c', 'u', 'r', 's', 'o', 'r'};
  add(0, nf::encode_vec(nf::Data{true, 1, 1, 9, {payload, sizeof payload}}));
  add(0, nf::encode_vec(nf::Data{false, 2, 2, 0, {payload, sizeof payload}}));
  add(0, nf::encode_vec(nf::Ack{true}));
  add(0, nf::encode_vec(nf::Keepalive{}));
}

// ---- NAAICE MRSP -----------------------------------------------------------------------------
void mrsp_seeds(const fs::path& out) {
  Corpus c(out, "mrsp");
  std::vector<std::uint8_t> b;
  naa::AdvertiseRequest req;
  req.regions.push_back({naa::kMrFlagInternal, 0, 0x7F0000001000ull, 0x1234, 4096});
  req.regions.push_back({0, 0x100000, 0x7F0000002000ull, 0x5678, 65536});
  naa::encode(req, b);
  c.add(b);
  b.clear();
  naa::Advertise adv;
  adv.regions.push_back({0x100000, 0x9ABC, 65536});
  naa::encode(adv, b);
  c.add(b);
  b.clear();
  naa::encode(naa::ErrorMsg{0x02}, b);
  c.add(b);
}

// ---- the NAA server against hostile hosts (tests/fuzz/naa_server.cc's op stream) --------------
void naa_server_seeds(const fs::path& out) {
  Corpus c(out, "naa_server");
  // An advertisement+request op: host, count - 1, then per region flags, where (0: address 0;
  // 96..223: a u32 address follows), size class (0: a u16 size follows).
  auto req = [](Writer& w, unsigned host, std::initializer_list<std::pair<unsigned, unsigned>> r,
                std::uint32_t second_at) {
    w.u8(1).u8(host).u8(r.size() - 1);
    unsigned i = 0;
    for (const auto& [flags, size] : r) {
      w.u8(flags);
      if (i++ == 1 && second_at)
        w.u8(100).u32(second_at);
      else
        w.u8(0);
      w.u8(0).u16(size);
    }
  };
  // Upstream's naaice_client 2 '1024 64': a write, function 3, again, function 1.
  Writer up;
  up.u8(0x41).u8(0);
  req(up, 0, {{0x06, 1024}, {0x0C, 64}}, 0x1000);
  up.u8(4).u8(0).u8(1).u16(0).u16(64).u8(9).u8(3).u8(0).u8(3).u8(7).u8(3).u8(0).u8(1);
  c.add(up);
  // The seed layout: metadata region, two parameters, vector_add's code.
  Writer seed;
  seed.u8(0x00).u8(0);
  req(seed, 0, {{0, 8}, {0, 64}, {0, 64}}, 0);
  seed.u8(4).u8(0).u8(0).u16(0).u16(8).u8(1).u8(3).u8(0).u8(8).u8(7);
  c.add(seed);
  // Two hosts on the kernel threads, calls, a disconnect during a call.
  Writer two;
  two.u8(0x61).u8(0).u8(0);
  req(two, 0, {{0x04, 16}, {0x04, 16}, {0x08, 16}}, 0);
  req(two, 1, {{0x05, 64}, {0x0C, 12}}, 0x2000);
  two.u8(3).u8(0).u8(7).u8(3).u8(1).u8(5).u8(5).u8(0).u8(7).u8(3).u8(1).u8(5).u8(7);
  c.add(two);
}

// ---- the NAAICE host library against a hostile NAA (tests/fuzz/naaice_host.cc) -------------
void naaice_host_seeds(const fs::path& out) {
  Corpus c(out, "naaice_host");
  // Two regions of 64 and 128 bytes, both input and output, function 1: MRSP, an
  // advertisement from fields (op 2, bit 0 set), a poll, a call, the result, poll.
  Writer one;
  one.u8(1).u8(0).u8(63).u8(127).u8(0).u8(0x33);
  one.u8(0).u8(2).u8(1).u8(2).u16(64).u16(128).u8(7).u8(1).u8(7).u8(3).u32(0x300).u32(128);
  one.u8(7).u8(1).u8(7);
  c.add(one);
  // Three regions and an internal one, single send: an MRSP error (raw bytes), then again.
  Writer two;
  two.u8(2).u8(1).u8(15).u8(15).u8(15).u8(3).u8(0x85);
  two.u8(0).u8(2).u8(0).u16(4).u8(0).u8(1).u8(0).u8(0).u8(7);
  two.u8(0).u8(2).u8(1).u8(3).u16(16).u16(16).u16(16).u8(7).u8(1).u8(6).u8(7);
  c.add(two);
}

// ---- LNet control messages (client/lnet) ----------------------------------------------------
void lnet_control_seeds(const fs::path& out) {
  Corpus c(out, "lnet_control");
  auto bytes = [](const auto& v) {
    return std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(&v), sizeof v);
  };
  lnet::OobHello h;
  auto put = [](char(&d)[48], const std::string& s) { std::memcpy(d, s.data(), s.size()); };
  put(h.src, "192.0.2.2@roce:0:31:6");
  put(h.dst, "192.0.2.1@roce:0:31:5");
  h.qpn = 0x1234;
  h.cqpn = 0x1235;
  h.psn = 0x10;
  h.cpsn = 0x20;
  const wire::Ipv6Addr g = wire::ipv4_mapped(wire::Ipv4Addr{0xC0000202});
  std::memcpy(h.gid, g.b.data(), 16);
  c.add(bytes(h));
  lnet::CtlMsg m;
  m.token = 0x0123456789ABCDEFull;
  m.length = 4096;
  std::uint8_t mb[lnet::CtlMsg::kSize];
  m.encode(mb);
  c.add(mb);
  lnet::BulkDesc d;
  d.kind = lnet::QueueType::kPassiveBulkRecv;
  d.token = m.token;
  d.owner = *lnet::EndPoint::parse("192.0.2.1@roce:0:31:5");
  d.segs.push_back({0x7F0000001000ull, 0x42, 4096});
  d.segs.push_back({0x7F0000003000ull, 0x43, 8192});
  c.add(d.encode());
  const auto greeting = lnet::OobGreeting::encode(lnet::OobNonce{0x5A, 0xA5});
  c.add(greeting);
}

// ---- RPC-over-RDMA (apps/nfs) ----------------------------------------------------------------
void rpcrdma_seeds(const fs::path& out) {
  using namespace roce::nfs;
  Corpus c(out, "rpcrdma");
  // RDMA_MSG: a GETATTR call inline, with AUTH_NONE.
  rdma::Header h;
  h.xid = 0x01020304;
  h.credits = 32;
  std::vector<std::uint8_t> b;
  rdma::encode(h, b);
  XdrEncoder e(b);
  rpc::CallHeader call;
  call.xid = h.xid;
  call.prog = v3::kNfsProgram;
  call.vers = v3::kNfsVersion;
  call.proc = 1;  // GETATTR
  rpc::encode(e, call);
  e.opaque(std::vector<std::uint8_t>(32, 0x11));  // the file handle
  c.add(b);
  // A READ's reply into a write chunk of two segments, and a reply chunk.
  rdma::Header w = h;
  w.writes.push_back({{{0x1234, 65536, 0x7F0000001000ull}, {0x1235, 65536, 0x7F0000011000ull}}});
  w.reply = rdma::WriteChunk{{{0x2222, 4096, 0x7F0000100000ull}}};
  b.clear();
  rdma::encode(w, b);
  c.add(b);
  // A WRITE's data in the read list (position 100), RDMA_NOMSG with a position-zero chunk.
  rdma::Header r = h;
  r.reads.push_back({100, {0x3333, 131072, 0x7F0000200000ull}});
  b.clear();
  rdma::encode(r, b);
  c.add(b);
  r.proc = rdma::Proc::kNomsg;
  r.reads = {{0, {0x4444, 8192, 0x7F0000300000ull}}};
  b.clear();
  rdma::encode(r, b);
  c.add(b);
  // RDMA_ERROR: ERR_VERS and ERR_CHUNK.
  rdma::Header er = h;
  er.proc = rdma::Proc::kError;
  er.error = rdma::ErrorCode::kVers;
  b.clear();
  rdma::encode(er, b);
  c.add(b);
  er.error = rdma::ErrorCode::kChunk;
  b.clear();
  rdma::encode(er, b);
  c.add(b);
}

// ---- nfs_server: a call of every procedure (tests/fuzz/nfs_server.cc)
// ----------------------------
void nfs_server_seeds(const fs::path& out) {
  using namespace roce::nfs;
  Corpus c(out, "nfs_server");
  // "RNF3" and an index: the harness puts the handle of the export's n-th object there (root, f,
  // d, d/g, l, p).
  const auto fh = [](std::uint8_t k) {
    return v3::Fh{{'R', 'N', 'F', '3', 0, 0, 0, 0, 0, 0, 0, k}};
  };
  std::uint32_t xid = 1;
  // flags: 1 rw, 2 root_squash, 4 all_squash, 8 a peer outside the list, 16 MOUNT.
  const auto add = [&](std::uint8_t flags, std::uint32_t proc, auto&& args,
                       rpc::OpaqueAuth cred = rpc::auth_sys({1, "seed", 1000, 1000, {100}})) {
    std::vector<std::uint8_t> b{flags};
    XdrEncoder e(b);
    rpc::CallHeader h;
    h.xid = xid++;
    h.prog = (flags & 16) ? v3::kMountProgram : v3::kNfsProgram;
    h.vers = (flags & 16) ? v3::kMountVersion : v3::kNfsVersion;
    h.proc = proc;
    h.cred = std::move(cred);
    rpc::encode(e, h);
    args(e);
    c.add(b);
  };
  const auto none = [](XdrEncoder&) {};
  const auto one = [&](std::uint8_t k) { return [&, k](XdrEncoder& e) { v3::encode(e, fh(k)); }; };
  const auto named = [&](std::uint8_t k, const char* n) {
    return [&, k, n](XdrEncoder& e) {
      v3::encode(e, fh(k));
      e.string(n);
    };
  };
  add(3, v3::kNull, none);
  add(3, v3::kGetattr, one(1));
  add(
      1, v3::kSetattr,
      [&](XdrEncoder& e) {
        v3::encode(e, fh(1));
        v3::encode(e, v3::Sattr{04777, 0u, 0u, std::uint64_t{3}, true, true, {}, {}});
        e.boolean(false);
      },
      rpc::auth_sys({1, "seed", 0, 0, {}}));
  add(3, v3::kLookup, named(0, "d"));
  add(3, v3::kLookup, named(2, ".."));
  add(3, v3::kLookup, named(4, "sentinel"));
  add(3, v3::kAccess, [&](XdrEncoder& e) {
    v3::encode(e, fh(0));
    e.u32(0x3f);
  });
  add(3, v3::kRead, [&](XdrEncoder& e) {
    v3::encode(e, fh(1));
    e.u64(0);
    e.u32(4096);
  });
  add(3, v3::kRead, [&](XdrEncoder& e) {  // the FIFO
    v3::encode(e, fh(5));
    e.u64(0);
    e.u32(4096);
  });
  add(
      1, v3::kWrite,
      [&](XdrEncoder& e) {
        v3::encode(e, fh(1));
        e.u64(2);
        e.u32(5);
        e.u32(v3::kFileSync);
        e.opaque(std::vector<std::uint8_t>{'w', 'r', 'i', 't', 'e'});
      },
      rpc::auth_sys({1, "seed", 0, 0, {}}));
  add(3, v3::kCreate, [&](XdrEncoder& e) {
    v3::encode(e, fh(0));
    e.string("new");
    e.u32(v3::kGuarded);
    v3::encode(e, v3::Sattr{06755, {}, {}, {}, false, false, {}, {}});
  });
  add(3, v3::kCreate, [&](XdrEncoder& e) {  // through the link
    v3::encode(e, fh(4));
    e.string("escape");
    e.u32(v3::kUnchecked);
    v3::encode(e, v3::Sattr{});
  });
  add(3, v3::kMkdir, [&](XdrEncoder& e) {
    v3::encode(e, fh(2));
    e.string("sub");
    v3::encode(e, v3::Sattr{0700, {}, {}, {}, false, false, {}, {}});
  });
  add(1, v3::kRemove, named(2, "g"), rpc::auth_sys({1, "seed", 0, 0, {}}));
  add(3, v3::kRmdir, named(0, "d"));
  for (std::uint32_t proc : {v3::kReaddir, v3::kReaddirplus})
    add(3, proc, [&, proc](XdrEncoder& e) {
      v3::encode(e, fh(0));
      e.u64(0);
      e.fixed(v3::Verf{});
      e.u32(4096);
      if (proc == v3::kReaddirplus) e.u32(65536);
    });
  add(3, v3::kFsstat, one(0));
  add(3, v3::kFsinfo, one(0));
  add(3, v3::kPathconf, one(3));
  add(3, v3::kCommit, [&](XdrEncoder& e) {
    v3::encode(e, fh(1));
    e.u64(0);
    e.u32(0);
  });
  add(3, v3::kRename, [&](XdrEncoder& e) {
    v3::encode(e, fh(0));
    e.string("f");
    v3::encode(e, fh(2));
    e.string("f2");
  });
  add(3, v3::kRename, [&](XdrEncoder& e) {  // a directory into itself
    v3::encode(e, fh(0));
    e.string("d");
    v3::encode(e, fh(2));
    e.string("d2");
  });
  add(3, v3::kReadlink, one(4));
  add(3, v3::kSymlink, [&](XdrEncoder& e) {
    v3::encode(e, fh(0));
    e.string("s");
    v3::encode(e, v3::Sattr{});
    e.string("../../etc/passwd");
  });
  add(3, v3::kMknod, [&](XdrEncoder& e) {
    v3::encode(e, fh(2));
    e.string("fifo");
    e.u32(v3::kFifo);
    v3::encode(e, v3::Sattr{0600, {}, {}, {}, false, false, {}, {}});
  });
  add(1, v3::kMknod, [&](XdrEncoder& e) {
    v3::encode(e, fh(0));
    e.string("null");
    e.u32(v3::kChr);
    v3::encode(e, v3::Sattr{});
    e.u32(1);
    e.u32(3);
  });
  add(3, v3::kLink, [&](XdrEncoder& e) {
    v3::encode(e, fh(1));
    v3::encode(e, fh(2));
    e.string("f-link");
  });
  add(3, v3::kLink, [&](XdrEncoder& e) {  // the link out, linked again
    v3::encode(e, fh(4));
    v3::encode(e, fh(0));
    e.string("l2");
  });
  add(3, v3::kCreate, [&](XdrEncoder& e) {
    v3::encode(e, fh(0));
    e.string("excl");
    e.u32(v3::kExclusive);
    e.fixed(v3::Verf{1, 2, 3, 4, 5, 6, 7, 8});
  });
  add(3, v3::kSetattr, [&](XdrEncoder& e) {  // with a guard, client times
    v3::encode(e, fh(1));
    v3::encode(e, v3::Sattr{{}, {}, {}, {}, false, false, v3::Time{1, 2}, v3::Time{3, 4}});
    e.boolean(true);
    e.u32(0);
    e.u32(0);
  });
  add(3, v3::kReaddirplus, [&](XdrEncoder& e) {  // a cookie with no verifier
    v3::encode(e, fh(0));
    e.u64(12345);
    e.fixed(v3::Verf{});
    e.u32(4096);
    e.u32(65536);
  });
  add(16 | 3, v3::kDump, none);
  add(16 | 3, v3::kUmntAll, none);
  add(3 | 8, v3::kGetattr, one(0));                 // a client not listed
  add(3, v3::kGetattr, one(0), rpc::OpaqueAuth{});  // AUTH_NONE
  add(16 | 3, v3::kMnt, [](XdrEncoder& e) { e.string("/"); });
  add(16 | 8, v3::kMnt, [](XdrEncoder& e) { e.string("/"); });
  add(16, v3::kExport, none);
}

void config_seeds(const fs::path& out, const fs::path& config_dir) {
  Corpus c(out, "config_yaml");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(config_dir))
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string s{std::istreambuf_iterator<char>(in), {}};
    c.add(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()));
  }
}

// ---- attach_ring: a client's ring entries, in the record format of attach_ring.cc -------------
namespace attach_ring {
Writer& send(Writer& w, unsigned qp, engine::WrOpcode op, std::uint8_t num_sge, std::uint8_t fix,
             std::uint64_t wr_id = 1) {
  attach::SendEntry e;
  e.wr_id = wr_id;
  e.opcode = op;
  e.num_sge = num_sge;
  e.send_flags = engine::kSendSignaled;
  e.remote_addr = 0x7f0000100000;
  e.rkey = 0x5EED;
  for (unsigned i = 0; i < attach::kMaxSge; ++i) e.sge[i] = {64u * i, 64, 0};
  w.u8(0).u8(qp).bytes({reinterpret_cast<const std::uint8_t*>(&e), sizeof e});
  return w.u8(fix);
}
Writer& recv(Writer& w, unsigned target, std::uint32_t num_sge, std::uint8_t fix,
             std::uint64_t wr_id = 2) {
  attach::RecvEntry e;
  e.wr_id = wr_id;
  e.num_sge = num_sge;
  for (unsigned i = 0; i < attach::kMaxSge; ++i) e.sge[i] = {1024u * i, 1024, 0};
  w.u8(1).u8(target).bytes({reinterpret_cast<const std::uint8_t*>(&e), sizeof e});
  return w.u8(fix);
}
Writer& run(Writer& w, unsigned passes, std::uint16_t us) { return w.u8(2).u8(passes).u16(us); }
Writer& reap(Writer& w, unsigned cq, unsigned n) { return w.u8(3).u8(cq).u8(n); }
}  // namespace attach_ring

void attach_ring_seeds(const fs::path& out) {
  namespace ar = attach_ring;
  using engine::WrOpcode;
  Corpus c(out, "attach_ring");
  {  // the work requests a client posts, into its MR: SEND, WRITE, READ, atomics, receives
    Writer w;
    ar::recv(w, 0, 2, 1);
    ar::recv(w, 2, 1, 1);
    ar::send(w, 0, WrOpcode::kSend, 1, 1);
    ar::send(w, 0, WrOpcode::kWrite, 2, 1);
    ar::send(w, 0, WrOpcode::kRead, 1, 1);
    ar::send(w, 0, WrOpcode::kFetchAdd, 1, 1);
    ar::send(w, 1, WrOpcode::kSend, 1, 3);  // UD
    ar::send(w, 2, WrOpcode::kSendImm, 1, 1);
    ar::run(w, 4, 100);
    ar::reap(w, 0, 16);
    ar::reap(w, 1, 16);
    c.add(w);
  }
  {  // refused work requests of a client that never polls (issue 27), then it polls
    Writer w;
    for (unsigned i = 0; i < 30; ++i) ar::send(w, 0, WrOpcode::kRegMr, 1, 1, i);
    ar::run(w, 8, 10);
    ar::reap(w, 0, 255);
    ar::run(w, 8, 10);
    c.add(w);
  }
  {  // the SRQ's QP and CQ destroyed, then a receive it must refuse (issue 27's UAF)
    Writer w;
    ar::recv(w, 2, attach::kMaxSge + 1, 0);
    w.u8(5);  // churn: gone
    ar::recv(w, 2, attach::kMaxSge + 1, 0, 3);
    ar::run(w, 2, 10);
    w.u8(5);  // churn: back
    ar::recv(w, 2, attach::kMaxSge + 1, 0, 4);
    ar::run(w, 2, 10);
    ar::reap(w, 2, 8);
    c.add(w);
  }
  {  // indices scribbled over, SGE counts and opcodes out of range
    Writer w;
    ar::send(w, 0, static_cast<WrOpcode>(200), 1, 1);
    ar::send(w, 0, WrOpcode::kSend, 250, 0);
    ar::recv(w, 0, 0xFFFFFFFF, 0);
    w.u8(4).u8(0).u32(1000);  // a send ring's tail past its end
    w.u8(4).u8(4).u32(5);     // a CQ ring's head
    w.u8(6).u8(1);            // armed
    ar::run(w, 4, 10);
    c.add(w);
  }
  {  // no peer answers: retries, then the QP errors and its queues flush into small CQs
    Writer w;
    for (unsigned i = 0; i < 12; ++i) ar::send(w, 0, WrOpcode::kWrite, 1, 1, i);
    for (unsigned i = 0; i < 8; ++i) ar::recv(w, 0, 1, 1, 100 + i);
    ar::run(w, 8, 60000);
    ar::run(w, 8, 60000);
    ar::reap(w, 0, 4);
    ar::run(w, 8, 60000);
    c.add(w);
  }
}

// ---- attach_control: request sequences as libroce sends them --------------------------------
void attach_seeds(const fs::path& out) {
  using attach::Op;
  using attach::Request;
  Corpus c(out, "attach_control");
  constexpr std::size_t kBody = offsetof(Request, hello);
  auto record = [](Writer& w, const Request& rq, std::uint8_t flags = 0) {
    w.u8(static_cast<std::uint8_t>(rq.op)).u8(flags).u32(rq.handle).u8(sizeof rq - kBody);
    w.bytes({reinterpret_cast<const std::uint8_t*>(&rq) + kBody, sizeof rq - kBody});
  };
  auto op = [](Op o, std::uint32_t handle = 0) {
    Request rq;
    rq.op = o;
    rq.handle = handle;
    return rq;
  };
  for (std::uint8_t privileged : {0, 1}) {
    Writer w;
    w.u8(8).u8(privileged);  // handles wrap after 16
    Request hello = op(Op::kHello);
    hello.hello = attach::HelloReq{};
    record(w, hello);
    record(w, op(Op::kAllocPd));  // handle 1
    Request region = op(Op::kRegRegion);
    region.region.length = 65536;
    region.region.client_addr = 0x7F0000000000ull;
    record(w, region, 1 << 1);  // its memfd; handle 2
    Request mr = op(Op::kRegMr);
    mr.mr.pd = 1;
    mr.mr.region = 2;
    mr.mr.length = 4096;
    mr.mr.access = engine::kAccessLocalWrite | engine::kAccessRemoteWrite;
    record(w, mr);
    Request cq = op(Op::kCreateCq);
    cq.cq.depth = 64;
    for (int i = 0; i < 20; ++i) {  // past the wrap
      record(w, cq);
      record(w, op(Op::kDestroyCq, static_cast<std::uint32_t>(4 + i % 12)));
    }
    record(w, cq);
    Request qp = op(Op::kCreateQp);
    qp.qp.pd = 1;
    qp.qp.send_cq = qp.qp.recv_cq = 4;
    qp.qp.type = engine::QpType::kUd;
    record(w, qp);
    Request modify = op(Op::kModifyQp);
    modify.modify.qp = 5;
    modify.modify.mask = engine::kQpState | engine::kQpQkey;
    modify.modify.attr.qp_state = engine::QpState::kInit;
    modify.modify.attr.qkey = 0x80010000u;  // privileged
    record(w, modify);
    Request srq = op(Op::kCreateSrq);
    srq.srq.pd = 1;
    srq.srq.max_wr = 128;
    srq.srq.max_sge = 2;
    record(w, srq);
    record(w, op(Op::kCmOpen));
    Request cm = op(Op::kCmConnect);
    cm.cm.qp = 5;
    cm.cm.dst = wire::Ipv4Addr{0xC0000202u};
    cm.cm.port = 7471;
    cm.cm.private_len = 56;
    record(w, cm);
    cm.op = Op::kCmListen;
    record(w, cm);
    cm.op = Op::kCmReject;
    cm.cm.private_len = 200;  // too long
    record(w, cm);
    record(w, op(Op::kDestroyQp, 5));
    record(w, op(Op::kAllocPd), 1);  // truncated
    c.add(w);
  }
  Writer early;  // requests before hello, an unknown op
  early.u8(0).u8(0);
  record(early, op(Op::kAllocPd));
  record(early, op(static_cast<Op>(99)));
  c.add(early);
}

}  // namespace

int main(int argc, char** argv) {
  fs::path out, config_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--out") == 0) out = argv[i + 1];
    if (std::strcmp(argv[i], "--config-dir") == 0) config_dir = argv[i + 1];
  }
  if (out.empty() || config_dir.empty()) {
    std::cerr << "usage: roce-fuzz-seeds --out DIR --config-dir DIR\n";
    return 2;
  }
  fs::remove_all(out);
  fs::create_directories(out);
  frame_seeds(out);
  engine_seeds(out);
  cm_seeds(out);
  perf_seeds(out);
  netfr_seeds(out);
  mrsp_seeds(out);
  naa_server_seeds(out);
  naaice_host_seeds(out);
  lnet_control_seeds(out);
  rpcrdma_seeds(out);
  nfs_server_seeds(out);
  config_seeds(out, config_dir);
  attach_ring_seeds(out);
  attach_seeds(out);
  std::cout << "roce-fuzz-seeds: wrote " << out.string() << "\n";
  return 0;
}
