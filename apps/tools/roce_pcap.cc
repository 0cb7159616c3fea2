/// @file
/// roce-pcap: writes one valid RoCEv2 frame of every opcode the opcode table knows into a pcap
/// file (--out), or checks the RoCEv2 frames of an existing capture with the stack's own
/// parser (--check).
#include <boost/program_options.hpp>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>

#include "apps/common/pcap_reader.h"
#include "apps/common/pcap_writer.h"
#include "apps/common/sample_frames.h"
#include "dataplane/wire/roce_frame.h"

namespace po = boost::program_options;
using namespace roce;

namespace {

// One TSV line per frame, with the fields a decoder should find; "-" where a header is absent.
constexpr const char* kManifestHeader =
    "index\topcode\tname\tdest_qp\tpsn\tse\tack_req\tpad\tpayload_len\treth_va\treth_rkey\t"
    "reth_len\taeth_syndrome\taeth_msn\tatomic_swap_add\tatomic_compare\tatomic_orig\timm\t"
    "ieth_rkey\tdeth_qkey\tdeth_src_qp\ticrc";

std::string manifest_line(std::size_t index, const wire::RxPkt& p) {
  using wire::Ext;
  std::string s = std::to_string(index);
  auto col = [&s](bool present, std::uint64_t v) {
    s += '\t';
    s += present ? std::to_string(v) : "-";
  };
  const wire::OpcodeInfo& i = *p.info;
  col(true, raw(p.opcode));
  s += '\t';
  s += i.name;
  col(true, p.dest_qp.raw());
  col(true, p.psn.raw());
  col(true, p.bth().se());
  col(true, p.ack_req);
  col(true, p.pad);
  col(true, p.payload_len);
  const bool reth = i.has(Ext::kReth), aeth = i.has(Ext::kAeth), atomic = i.has(Ext::kAtomicEth);
  col(reth, reth ? p.reth().va() : 0);
  col(reth, reth ? p.reth().rkey() : 0);
  col(reth, reth ? p.reth().dma_len() : 0);
  col(aeth, aeth ? p.aeth().syndrome().raw() : 0);
  col(aeth, aeth ? p.aeth().msn().raw() : 0);
  col(atomic, atomic ? p.atomic_eth().swap_add() : 0);
  col(atomic, atomic ? p.atomic_eth().compare() : 0);
  col(i.has(Ext::kAtomicAckEth), i.has(Ext::kAtomicAckEth) ? p.atomic_ack_eth().orig() : 0);
  col(i.has(Ext::kImmDt), i.has(Ext::kImmDt) ? p.immdt().imm() : 0);
  col(i.has(Ext::kIeth), i.has(Ext::kIeth) ? p.ieth().rkey() : 0);
  col(i.has(Ext::kDeth), i.has(Ext::kDeth) ? p.deth().qkey() : 0);
  col(i.has(Ext::kDeth), i.has(Ext::kDeth) ? p.deth().src_qp().raw() : 0);
  col(true, p.icrc);
  return s;
}

int write_samples(const po::variables_map& vm) {
  apps::SampleOptions opts;
  opts.ip_version = vm.count("ipv6") ? wire::IpVersion::kV6 : wire::IpVersion::kV4;
  if (vm.count("vlan")) {
    const unsigned vid = vm["vlan"].as<unsigned>();
    if (vid < 1 || vid > 4094) throw po::error("--vlan must be between 1 and 4094");
    opts.vlan_id = static_cast<std::uint16_t>(vid);
  }
  const unsigned pmtu = vm["pmtu"].as<unsigned>();
  if (pmtu != 256 && pmtu != 512 && pmtu != 1024 && pmtu != 2048 && pmtu != 4096)
    throw po::error("--pmtu must be one of 256, 512, 1024, 2048, 4096");
  opts.pmtu = pmtu;

  const auto frames = apps::make_sample_frames(opts);
  const std::string out = vm["out"].as<std::string>();
  apps::PcapWriter pcap(out);
  std::ofstream manifest;
  if (vm.count("manifest")) {
    manifest.open(vm["manifest"].as<std::string>());
    if (!manifest) throw std::runtime_error("cannot open " + vm["manifest"].as<std::string>());
    manifest << kManifestHeader << '\n';
  }
  const bool quiet = vm.count("quiet") != 0;
  if (!quiet)
    std::printf("%5s  %-4s  %-36s %8s %8s %7s %6s\n", "frame", "op", "name", "dest_qp", "psn",
                "payload", "bytes");
  std::uint64_t ts = 1'700'000'000'000'000'000ull;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const auto& f = frames[i];
    pcap.write(f.bytes, ts);
    ts += 1000;
    wire::RxPkt pkt;
    const wire::Verdict v = wire::parse_frame(f.bytes, pkt);
    if (v != wire::Verdict::kOk)
      throw std::logic_error("built frame does not parse: " + std::string(to_string(v)));
    const auto name = wire::opcode_info(f.spec.opcode).name;
    if (!quiet)
      std::printf("%5zu  0x%02x  %-36.*s %#8x %#8x %7zu %6zu\n", i + 1, raw(f.spec.opcode),
                  static_cast<int>(name.size()), name.data(), pkt.dest_qp.raw(), pkt.psn.raw(),
                  f.payload.size(), f.bytes.size());
    if (manifest.is_open()) manifest << manifest_line(i + 1, pkt) << '\n';
  }
  std::printf("roce-pcap: wrote %zu frames (%s%s, path MTU %u) to %s\n", frames.size(),
              opts.ip_version == wire::IpVersion::kV4 ? "IPv4" : "IPv6",
              opts.vlan_id ? (", VLAN " + std::to_string(*opts.vlan_id)).c_str() : "", opts.pmtu,
              out.c_str());
  return 0;
}

int check_capture(const std::string& path) {
  const auto records = apps::read_pcap(path);
  std::size_t counts[wire::kVerdictCount] = {};
  std::size_t not_roce = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    wire::RxPkt pkt;
    const wire::Verdict v = wire::parse_frame(records[i].data, pkt);
    if (v == wire::Verdict::kNotIp || v == wire::Verdict::kNotUdp ||
        v == wire::Verdict::kWrongUdpPort) {
      ++not_roce;
      continue;
    }
    ++counts[static_cast<std::size_t>(v)];
    if (v != wire::Verdict::kOk)
      std::printf("frame %zu: %s\n", i + 1, std::string(to_string(v)).c_str());
  }
  std::printf("roce-pcap: %s: %zu frames, %zu not RoCEv2\n", path.c_str(), records.size(),
              not_roce);
  for (std::size_t v = 0; v < wire::kVerdictCount; ++v)
    if (counts[v] != 0)
      std::printf("  %-22s %zu\n", std::string(to_string(static_cast<wire::Verdict>(v))).c_str(),
                  counts[v]);
  return counts[0] + not_roce == records.size() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc(
      "Usage: roce-pcap --out FILE.pcap [--ipv6] [--vlan ID] [--pmtu N] [--manifest FILE]\n"
      "       roce-pcap --check FILE.pcap\n\n"
      "Writes one valid RoCEv2 frame for every opcode the stack knows, or checks the RoCEv2\n"
      "frames of a capture (ICRC, lengths, headers) and exits 1 if any is bad.\n\nOptions");
  desc.add_options()("help,h", "print this help")("out,o", po::value<std::string>(),
                                                  "pcap file to write")(
      "ipv6", "use IPv6 (2001:db8::1 <-> 2001:db8::2) instead of IPv4 (192.0.2.1 <-> 192.0.2.2)")(
      "vlan", po::value<unsigned>(), "add an 802.1Q tag with this VLAN ID (1-4094)")(
      "pmtu", po::value<unsigned>()->default_value(1024),
      "path MTU: payload of First/Middle packets")(
      "manifest", po::value<std::string>(),
      "also write a TSV line per frame (opcode, QPN, PSN, ...)")("quiet,q",
                                                                 "print only the summary line")(
      "check", po::value<std::string>(), "parse every frame of this pcap file and report verdicts");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << '\n';
      return 0;
    }
    if (vm.count("check")) return check_capture(vm["check"].as<std::string>());
    if (!vm.count("out")) throw po::error("--out FILE or --check FILE is required");
    return write_samples(vm);
  } catch (const po::error& e) {
    std::cerr << "roce-pcap: " << e.what() << "\n(try --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "roce-pcap: " << e.what() << '\n';
    return 1;
  }
}
