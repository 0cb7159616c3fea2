/// @file
/// roce-cm-pcap: writes one RoCEv2 frame per CM message (REQ over IPv4 and IPv6, REP, RTU, MRA,
/// REJ, DREQ, DREP, SIDR_REQ, SIDR_REP) into a pcap, each MAD carried as a UD SEND Only to QP1
/// the way rdma_cm sends it, plus a manifest of the values a dissector should find
/// (tests/crosscheck/tshark_cm.py compares them with tshark's infiniband.cm.* fields).
#include <boost/program_options.hpp>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "apps/common/pcap_writer.h"
#include "controlplane/address.h"
#include "controlplane/cm/mad.h"
#include "dataplane/wire/deth.h"
#include "dataplane/wire/roce_frame.h"

namespace po = boost::program_options;
using namespace roce;
using namespace roce::cm;

namespace {

// Documentation addresses (RFC 5737, RFC 3849) and locally administered MACs.
constexpr wire::MacAddr kMacA{{0x02, 0x00, 0x5e, 0x00, 0x02, 0x01}};
constexpr wire::MacAddr kMacB{{0x02, 0x00, 0x5e, 0x00, 0x02, 0x02}};
constexpr Ipv4Addr kIpA{0xC0000201};
constexpr Ipv4Addr kIpB{0xC0000202};
constexpr Ipv6Addr kIp6A{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
constexpr Ipv6Addr kIp6B{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}};
constexpr std::uint64_t kGuidA = 0x02005EFFFE000201ull;
constexpr std::uint64_t kGuidB = 0x02005EFFFE000202ull;
constexpr std::uint32_t kCommA = 0x1A2B3C4D;
constexpr std::uint32_t kCommB = 0x5E6F7081;

struct Frame {
  std::string name;
  bool from_b = false;
  bool ipv6 = false;
  MadHeader hdr;
  CmMsg msg;
  // (tshark field, kind, expected value); kind is "int" or "ip"
  std::vector<std::array<std::string, 3>> expect;
};

std::string num(std::uint64_t v) { return std::to_string(v); }

void expect_int(Frame& f, const std::string& field, std::uint64_t v) {
  f.expect.push_back({field, "int", num(v)});
}
void expect_ip(Frame& f, const std::string& field, const std::string& v) {
  f.expect.push_back({field, "ip", v});
}

ReqMsg make_req(bool ipv6) {
  ReqMsg r;
  r.local_comm_id = kCommA;
  r.service_id = service_id(PortSpace::kTcp, 7174);
  r.local_ca_guid = kGuidA;
  r.local_qpn = Qpn(0x000011);
  r.responder_resources = 4;
  r.initiator_depth = 2;
  r.remote_cm_response_timeout = 20;
  r.transport_type = TransportType::kRc;
  r.e2e_flow_control = true;
  r.starting_psn = Psn(0xABCDEF);
  r.local_cm_response_timeout = 19;
  r.retry_count = 6;
  r.pkey = 0xFFFF;
  r.path_mtu = 3;
  r.rnr_retry_count = 5;
  r.max_cm_retries = 15;
  r.primary.local_gid = ipv6 ? kIp6A : wire::ipv4_mapped(kIpA);
  r.primary.remote_gid = ipv6 ? kIp6B : wire::ipv4_mapped(kIpB);
  r.primary.flow_label = 0x1F00D;
  r.primary.traffic_class = 0x68;
  r.primary.hop_limit = 64;
  r.primary.sl = 3;
  r.primary.local_ack_timeout = 18;
  r.alternate.local_lid = r.alternate.remote_lid = 0;
  r.alternate.hop_limit = 0;
  const CmaHeader cma =
      ipv6 ? CmaHeader::ipv6(kIp6A, 0xD431, kIp6B) : CmaHeader::ipv4(kIpA, 0xD431, kIpB);
  encode_cma_header(cma,
                    std::span<std::uint8_t, kCmaHeaderSize>(r.private_data.data(), kCmaHeaderSize));
  r.private_data[kCmaHeaderSize] = 0x55;
  return r;
}

void expect_req(Frame& f, const ReqMsg& r, bool ipv6) {
  const std::string p = "infiniband.cm.req";
  expect_int(f, p, r.local_comm_id);
  expect_int(f, p + ".serviceid", r.service_id);
  expect_int(f, p + ".serviceid.protocol", 0x06);
  expect_int(f, p + ".serviceid.dport", 7174);
  expect_int(f, p + ".localcaguid", r.local_ca_guid);
  expect_int(f, p + ".localqkey", r.local_qkey);
  expect_int(f, p + ".localqpn", r.local_qpn.raw());
  expect_int(f, p + ".responderres", r.responder_resources);
  expect_int(f, p + ".initdepth", r.initiator_depth);
  expect_int(f, p + ".remoteresptout", r.remote_cm_response_timeout);
  expect_int(f, p + ".transpsvctype", static_cast<unsigned>(r.transport_type));
  expect_int(f, p + ".e2eflowctrl", r.e2e_flow_control);
  expect_int(f, p + ".startpsn", r.starting_psn.raw());
  expect_int(f, p + ".localresptout", r.local_cm_response_timeout);
  expect_int(f, p + ".retrcount", r.retry_count);
  expect_int(f, p + ".pkey", r.pkey);
  expect_int(f, p + ".pppmtu", r.path_mtu);
  expect_int(f, p + ".rdcexist", r.rdc_exists);
  expect_int(f, p + ".rnrretrcount", r.rnr_retry_count);
  expect_int(f, p + ".maxcmretr", r.max_cm_retries);
  expect_int(f, p + ".srq", r.srq);
  expect_int(f, p + ".prim_locallid", r.primary.local_lid);
  expect_int(f, p + ".prim_remotelid", r.primary.remote_lid);
  if (ipv6) {
    expect_ip(f, p + ".prim_localgid", ctl::to_string(r.primary.local_gid));
    expect_ip(f, p + ".prim_remotegid", ctl::to_string(r.primary.remote_gid));
  } else {
    expect_ip(f, p + ".prim_localgid_ipv4", ctl::to_string(kIpA));
    expect_ip(f, p + ".prim_remotegid_ipv4", ctl::to_string(kIpB));
  }
  // tshark 4.0.17 reads the flow label as 3 bytes under a 4-byte mask (0xFFFFF000), so it
  // shows the 20-bit field shifted right by 8; the bytes themselves are checked by the unit test.
  expect_int(f, p + ".prim_flowlabel", r.primary.flow_label >> 8);
  expect_int(f, p + ".prim_tfcclass", r.primary.traffic_class);
  expect_int(f, p + ".prim_hoplim", r.primary.hop_limit);
  expect_int(f, p + ".prim_sl", r.primary.sl);
  expect_int(f, p + ".prim_subnetlocal", r.primary.subnet_local);
  expect_int(f, p + ".prim_localacktout", r.primary.local_ack_timeout);
  expect_int(f, p + ".ip_cm.ipv", ipv6 ? 6 : 4);
  expect_int(f, p + ".ip_cm.sport", 0xD431);
  if (ipv6) {
    expect_ip(f, p + ".ip_cm.sip6", ctl::to_string(kIp6A));
    expect_ip(f, p + ".ip_cm.dip6", ctl::to_string(kIp6B));
  } else {
    expect_ip(f, p + ".ip_cm.sip4", ctl::to_string(kIpA));
    expect_ip(f, p + ".ip_cm.dip4", ctl::to_string(kIpB));
  }
}

std::vector<Frame> make_frames() {
  std::vector<Frame> out;
  std::uint64_t tid = 0x0000000A'00000001ull;
  auto add = [&](std::string name, bool from_b, CmMsg msg, std::uint64_t use_tid) {
    Frame f;
    f.name = std::move(name);
    f.from_b = from_b;
    f.hdr.tid = use_tid;
    f.msg = std::move(msg);
    expect_int(f, "infiniband.mad.baseversion", 1);
    expect_int(f, "infiniband.mad.mgmtclass", kMgmtClassCm);
    expect_int(f, "infiniband.mad.classversion", kCmClassVersion);
    expect_int(f, "infiniband.mad.method", kMethodSend);
    expect_int(f, "infiniband.mad.transactionid", use_tid);
    expect_int(f, "infiniband.mad.attributeid", static_cast<unsigned>(attr_id_of(f.msg)));
    expect_int(f, "infiniband.deth.q_key", wire::kGsiQkey);
    expect_int(f, "infiniband.deth.srcqp", 1);
    expect_int(f, "infiniband.bth.destqp", 1);
    out.push_back(std::move(f));
    return &out.back();
  };
  const std::uint64_t req_tid = tid++;

  for (const bool v6 : {false, true}) {
    const ReqMsg req = make_req(v6);
    Frame* f = add(v6 ? "REQ (IPv6)" : "REQ (IPv4, rping port 7174)", false, req, req_tid);
    f->ipv6 = v6;
    expect_req(*f, req, v6);
  }

  RepMsg rep;
  rep.local_comm_id = kCommB;
  rep.remote_comm_id = kCommA;
  rep.local_qpn = Qpn(0x000022);
  rep.starting_psn = Psn(0x123456);
  rep.responder_resources = 2;
  rep.initiator_depth = 4;
  rep.target_ack_delay = 15;
  rep.e2e_flow_control = true;
  rep.rnr_retry_count = 7;
  rep.srq = true;
  rep.local_ca_guid = kGuidB;
  {
    Frame* f = add("REP", true, rep, req_tid);
    const std::string p = "infiniband.cm.rep";
    expect_int(*f, p, rep.local_comm_id);
    expect_int(*f, p + ".remotecommid", rep.remote_comm_id);
    expect_int(*f, p + ".localqkey", rep.local_qkey);
    expect_int(*f, p + ".localqpn", rep.local_qpn.raw());
    expect_int(*f, p + ".startpsn", rep.starting_psn.raw());
    expect_int(*f, p + ".respres", rep.responder_resources);
    expect_int(*f, p + ".initdepth", rep.initiator_depth);
    expect_int(*f, p + ".tgtackdelay", rep.target_ack_delay);
    expect_int(*f, p + ".failoveracc", rep.failover_accepted);
    expect_int(*f, p + ".e2eflowctrl", rep.e2e_flow_control);
    expect_int(*f, p + ".rnrretrcount", rep.rnr_retry_count);
    expect_int(*f, p + ".srq", rep.srq);
    expect_int(*f, p + ".localcaguid", rep.local_ca_guid);
  }

  RtuMsg rtu;
  rtu.local_comm_id = kCommA;
  rtu.remote_comm_id = kCommB;
  {
    Frame* f = add("RTU", false, rtu, req_tid);
    expect_int(*f, "infiniband.cm.rtu.localcommid", kCommA);
    expect_int(*f, "infiniband.cm.rtu.remotecommid", kCommB);
  }

  MraMsg mra;
  mra.local_comm_id = kCommB;
  mra.remote_comm_id = kCommA;
  mra.message_mraed = MsgKind::kReq;
  mra.service_timeout = 24;
  add("MRA", true, mra, req_tid);  // tshark 4.0 has no MRA fields: header only

  struct RejCase {
    RejReason reason;
    std::uint32_t local;
    MsgKind kind;
  };
  for (const RejCase rc : {RejCase{RejReason::kInvalidServiceId, 0, MsgKind::kReq},
                           RejCase{RejReason::kStaleConn, 0, MsgKind::kReq},
                           RejCase{RejReason::kConsumerDefined, kCommB, MsgKind::kRep}}) {
    RejMsg rej;
    rej.local_comm_id = rc.local;
    rej.remote_comm_id = kCommA;
    rej.message_rejected = rc.kind;
    rej.reason = rc.reason;
    Frame* f = add("REJ reason " + num(static_cast<unsigned>(rc.reason)), true, rej, req_tid);
    expect_int(*f, "infiniband.cm.rej.localcommid", rej.local_comm_id);
    expect_int(*f, "infiniband.cm.rej.remotecommid", rej.remote_comm_id);
    expect_int(*f, "infiniband.cm.rej.msgrej", static_cast<unsigned>(rej.message_rejected));
    expect_int(*f, "infiniband.cm.rej.rejinfolen", rej.reject_info_length);
    expect_int(*f, "infiniband.cm.rej.reason", static_cast<unsigned>(rej.reason));
  }

  DreqMsg dreq;
  dreq.local_comm_id = kCommA;
  dreq.remote_comm_id = kCommB;
  dreq.remote_qpn = Qpn(0x000022);
  const std::uint64_t dreq_tid = tid++;
  {
    Frame* f = add("DREQ", false, dreq, dreq_tid);
    expect_int(*f, "infiniband.cm.dreq.localcommid", kCommA);
    expect_int(*f, "infiniband.cm.dreq.remotecommid", kCommB);
    // tshark 4.0 files the DREQ's Remote QPN/EECN under a REQ-named field.
    expect_int(*f, "infiniband.cm.req.remoteqpneecn", 0x22);
  }
  DrepMsg drep;
  drep.local_comm_id = kCommB;
  drep.remote_comm_id = kCommA;
  {
    Frame* f = add("DREP", true, drep, dreq_tid);
    expect_int(*f, "infiniband.cm.drsp.localcommid", kCommB);
    expect_int(*f, "infiniband.cm.drsp.remotecommid", kCommA);
  }

  SidrReqMsg sreq;
  sreq.request_id = kCommA;
  sreq.service_id = service_id(PortSpace::kUdp, 7174);
  const std::uint64_t sidr_tid = tid++;
  add("SIDR_REQ", false, sreq, sidr_tid);
  SidrRepMsg srep;
  srep.request_id = kCommA;
  srep.qpn = Qpn(0x000033);
  srep.qkey = kRdmaUdpQkey;
  srep.service_id = sreq.service_id;
  add("SIDR_REP", true, srep, sidr_tid);
  return out;
}

std::vector<std::uint8_t> build(const Frame& f, std::uint16_t ip_id, std::uint32_t psn) {
  wire::FrameSpec s;
  s.src_mac = f.from_b ? kMacB : kMacA;
  s.dst_mac = f.from_b ? kMacA : kMacB;
  s.ip_version = f.ipv6 ? wire::IpVersion::kV6 : wire::IpVersion::kV4;
  s.src_ip4 = f.from_b ? kIpB : kIpA;
  s.dst_ip4 = f.from_b ? kIpA : kIpB;
  s.src_ip6 = f.from_b ? kIp6B : kIp6A;
  s.dst_ip6 = f.from_b ? kIp6A : kIp6B;
  s.ip_id = ip_id;
  s.opcode = wire::Opcode::kUdSendOnly;
  s.dest_qp = Qpn(Qpn::kGsi);
  s.psn = Psn(psn);
  s.deth = {wire::kGsiQkey, Qpn(Qpn::kGsi)};
  const MadBuf mad = encode(f.hdr, f.msg);
  std::vector<std::uint8_t> bytes(wire::frame_len(s, mad.size()));
  if (wire::build_frame(s, mad, bytes) != bytes.size())
    throw std::logic_error("frame builder refused a CM MAD frame");
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc(
      "Usage: roce-cm-pcap --out FILE.pcap [--manifest FILE.tsv]\n\n"
      "Writes one RoCEv2 frame per CM message (MAD in a UD SEND Only to QP1).\n\nOptions");
  desc.add_options()("help,h", "print this help")("out,o", po::value<std::string>(),
                                                  "pcap file to write")(
      "manifest", po::value<std::string>(),
      "TSV of frame, tshark field, kind (int or ip) and expected value");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help") || !vm.count("out")) {
      std::cout << desc << '\n';
      return vm.count("help") ? 0 : 2;
    }
    const auto frames = make_frames();
    apps::PcapWriter pcap(vm["out"].as<std::string>());
    std::ofstream manifest;
    if (vm.count("manifest")) {
      manifest.open(vm["manifest"].as<std::string>());
      if (!manifest) throw std::runtime_error("cannot open the manifest file");
      manifest << "frame\tname\tfield\tkind\tvalue\n";
    }
    std::uint64_t ts = 1'700'000'000'000'000'000ull;
    for (std::size_t i = 0; i < frames.size(); ++i) {
      const Frame& f = frames[i];
      pcap.write(
          build(f, static_cast<std::uint16_t>(0x2000 + i), static_cast<std::uint32_t>(0x100 + i)),
          ts);
      ts += 1000;
      if (manifest.is_open())
        for (const auto& [field, kind, value] : f.expect)
          manifest << i + 1 << '\t' << f.name << '\t' << field << '\t' << kind << '\t' << value
                   << '\n';
    }
    std::printf("roce-cm-pcap: wrote %zu CM frames to %s\n", frames.size(),
                vm["out"].as<std::string>().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "roce-cm-pcap: %s\n", e.what());
    return 1;
  }
}
