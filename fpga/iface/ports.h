/// @file
/// The offload boundary: every port between the host (the software dataplane) and the device
/// (an FPGA, or fpga/model standing in for one), with every field and its width in bits. One
/// description serves the C++ model, the HLS-style kernels and the RTL: `fpga_ports_svh` writes
/// these tables out as SystemVerilog localparams (build/fpga/ports.svh) that the RTL includes,
/// and the Verilator testbench packs and unpacks the same structs with pack()/unpack().
///
/// Port names follow fpga-network-stack's `src2dst_what` habit: host2dev_wq is the work-request
/// ring the host writes and the device reads. Each table client has its own request type
/// (rx2qp_*, tx2qp_*), so who writes which field is visible in both software and RTL.
///
///   host2dev_wq   descriptor ring  work requests (WRITE, READ, SEND...) from the host
///   dev2host_cq   descriptor ring  completions back to the host
///   net2dev_rx    stream           received frames, 64-byte flits (AXI4-Stream: data, keep, last)
///   dev2net_tx    stream           frames to send, same flits
///   dev2host_rx_meta  stream       the parser's result per received frame (RxMeta)
///   host2dev_tx_meta  stream       per frame to send: what the device must do to it (TxMeta)
///   rx2qp_req / qp2rx_rsp          QP state table, read-modify-write by the receive side
///   tx2qp_req / qp2tx_rsp          QP state table, read-modify-write by the transmit side
///   host2qp_wr                     QP state table, written by the host (modify QP)
///   host2qp_path                   QP path table, written by the host (create QP, address, MTU)
///   dev2host_wr_rsp                the device's answer to a table write (QPN or key it assigned)
///   dev2mr_req / mr2dev_rsp        MR/TLB table: key + range check and translation
///   host2mr_wr                     MR/TLB table, written by the host (reg/dereg MR)
///   counters                       64-bit counters, read by the host (Coyote's nstats names)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace roce::fpga {

/// One field of a port: its name as in RTL (snake_case) and its width in bits.
struct Field {
  std::string_view name;
  unsigned bits;
};

template <std::size_t N>
constexpr unsigned total_bits(const std::array<Field, N>& f) {
  unsigned n = 0;
  for (const Field& x : f) n += x.bits;
  return n;
}

/// Bytes per flit on the data streams: 512 bits, as a U55C's 100G CMAC interface at 250 MHz.
inline constexpr unsigned kFlitBytes = 64;

// ---- data streams: net2dev_rx, dev2net_tx ------------------------------------------------------

/// One beat of an AXI4-Stream: `keep` marks valid bytes (contiguous from byte 0; only the last
/// flit of a frame may be partial), `last` ends the frame.
struct Flit {
  std::array<std::uint8_t, kFlitBytes> data{};
  std::uint64_t keep = 0;
  bool last = false;
  static constexpr std::array<Field, 3> kFields{{{"data", 512}, {"keep", 64}, {"last", 1}}};
};

// ---- descriptor rings: host2dev_wq, dev2host_cq ----------------------------------------------

enum class WqOpcode : std::uint8_t { kWrite = 0, kRead = 1, kSend = 2, kWriteImm = 3 };

/// A work request descriptor (Coyote's sq_wr/sq_rd commands with the RDMA fields).
struct WorkRequest {
  std::uint64_t wr_id = 0;
  std::uint32_t qpn = 0;  ///< 24 bits
  WqOpcode opcode = WqOpcode::kWrite;
  std::uint8_t flags = 0;  ///< bit 0 signaled, bit 1 fence, bit 2 solicited
  std::uint64_t laddr = 0;
  std::uint32_t lkey = 0;
  std::uint64_t raddr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t len = 0;
  std::uint32_t imm = 0;
  static constexpr std::array<Field, 10> kFields{{{"wr_id", 64},
                                                  {"qpn", 24},
                                                  {"opcode", 4},
                                                  {"flags", 4},
                                                  {"laddr", 64},
                                                  {"lkey", 32},
                                                  {"raddr", 64},
                                                  {"rkey", 32},
                                                  {"len", 32},
                                                  {"imm", 32}}};
};

/// A completion descriptor.
struct Completion {
  std::uint64_t wr_id = 0;
  std::uint32_t qpn = 0;
  std::uint8_t status = 0;  ///< the verbs WC status
  std::uint8_t opcode = 0;  ///< the verbs WC opcode
  std::uint32_t byte_len = 0;
  std::uint32_t imm = 0;
  static constexpr std::array<Field, 6> kFields{
      {{"wr_id", 64}, {"qpn", 24}, {"status", 8}, {"opcode", 8}, {"byte_len", 32}, {"imm", 32}}};
};

// ---- metadata streams: dev2host_rx_meta, host2dev_tx_meta ------------------------------------

/// The header parser's result for one received frame (rxe_pkt_info's fields, fixed width).
/// `verdict` carries wire::Verdict's value: 0 is a frame to process, anything else a counted
/// drop with its reason.
struct RxMeta {
  std::uint8_t verdict = 0;  ///< wire::Verdict
  std::uint8_t opcode = 0;
  std::uint32_t dest_qp = 0;
  std::uint32_t psn = 0;
  bool ack_req = false;
  std::uint8_t pad = 0;
  bool ipv6 = false;
  bool has_vlan = false;
  std::uint16_t vlan_id = 0;
  std::uint8_t ecn = 0;
  std::uint8_t l3_off = 0;
  std::uint8_t bth_off = 0;
  std::uint16_t payload_off = 0;
  std::uint16_t payload_len = 0;
  std::uint16_t frame_len = 0;  ///< bytes up to the end of the ICRC (Ethernet padding excluded)
  std::uint64_t reth_va = 0;
  std::uint32_t reth_rkey = 0;
  std::uint32_t reth_len = 0;
  std::uint8_t aeth_syndrome = 0;
  std::uint32_t aeth_msn = 0;
  std::uint32_t icrc = 0;  ///< as received
  static constexpr std::array<Field, 21> kFields{
      {{"verdict", 5},      {"opcode", 8},       {"dest_qp", 24},      {"psn", 24},
       {"ack_req", 1},      {"pad", 2},          {"ipv6", 1},          {"has_vlan", 1},
       {"vlan_id", 12},     {"ecn", 2},          {"l3_off", 8},        {"bth_off", 8},
       {"payload_off", 16}, {"payload_len", 16}, {"frame_len", 16},    {"reth_va", 64},
       {"reth_rkey", 32},   {"reth_len", 32},    {"aeth_syndrome", 8}, {"aeth_msn", 24},
       {"icrc", 32}}};
};

/// What the device does to one frame on its way out.
struct TxMeta {
  bool gen_icrc = false;  ///< compute the ICRC and write it over the trailer
  std::uint16_t frame_len = 0;
  static constexpr std::array<Field, 2> kFields{{{"gen_icrc", 1}, {"frame_len", 16}}};
};

// ---- QP state table ----------------------------------------------------------------------------

/// One entry of the QP state table (register-like, TAS style): what the receive and transmit
/// sides need per packet.
struct QpState {
  std::uint8_t state = 0;            ///< the verbs QP state
  std::uint32_t epsn = 0;            ///< responder: next expected PSN
  std::uint32_t msn = 0;             ///< responder: message sequence number
  std::uint32_t next_psn = 0;        ///< requester: PSN of the next new packet
  std::uint32_t oldest_unacked = 0;  ///< completer
  std::uint32_t remote_qpn = 0;
  std::uint8_t retries_left = 0;
  static constexpr std::array<Field, 7> kFields{{{"state", 3},
                                                 {"epsn", 24},
                                                 {"msn", 24},
                                                 {"next_psn", 24},
                                                 {"oldest_unacked", 24},
                                                 {"remote_qpn", 24},
                                                 {"retries_left", 3}}};
};

/// rx2qp_req: the receive side reads a QP's entry and, with `write`, stores epsn/msn back
/// (the responder's fields) or oldest_unacked (the completer's).
struct RxQpReq {
  std::uint32_t qpn = 0;
  bool write = false;
  std::uint32_t epsn = 0;
  std::uint32_t msn = 0;
  std::uint32_t oldest_unacked = 0;
  static constexpr std::array<Field, 5> kFields{
      {{"qpn", 24}, {"write", 1}, {"epsn", 24}, {"msn", 24}, {"oldest_unacked", 24}}};
};

/// tx2qp_req: the transmit side reads a QP's entry and, with `write`, advances next_psn.
struct TxQpReq {
  std::uint32_t qpn = 0;
  bool write = false;
  std::uint32_t next_psn = 0;
  static constexpr std::array<Field, 3> kFields{{{"qpn", 24}, {"write", 1}, {"next_psn", 24}}};
};

/// qp2rx_rsp / qp2tx_rsp: the entry as it was before the request's write.
struct QpRsp {
  bool valid = false;  ///< the QPN names an entry
  QpState entry;
  static constexpr unsigned kBits = 1 + total_bits(QpState::kFields);
};

/// host2qp_wr: the host writes a whole entry (modify QP), or clears it (valid = false).
struct HostQpWrite {
  std::uint32_t qpn = 0;
  bool valid = false;
  QpState entry;
  static constexpr unsigned kBits = 24 + 1 + total_bits(QpState::kFields);
};

/// host2qp_path: what the datapath needs of a QP besides its PSN state (Coyote's QP context:
/// remote address, MTU, timers). `qpn` 0 creates a QP: the device assigns its number and
/// answers on dev2host_wr_rsp, as an RNIC's firmware does.
struct QpPath {
  std::uint32_t qpn = 0;
  std::uint32_t pd = 0;
  std::array<std::uint8_t, 16> dgid{};  ///< the peer's GID (::ffff:a.b.c.d for IPv4)
  std::array<std::uint8_t, 6> dmac{};
  std::uint8_t path_mtu = 3;  ///< IBA enum: 1 = 256 ... 5 = 4096
  std::uint8_t timeout = 14;  ///< local ACK timeout, 4.096 us x 2^timeout
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;
  std::uint8_t min_rnr_timer = 12;
  std::uint8_t max_rd_atomic = 1;  ///< READs outstanding, both directions
  std::uint8_t access = 0;         ///< verbs remote access bits the QP grants
  static constexpr std::array<Field, 11> kFields{{{"qpn", 24},
                                                  {"pd", 24},
                                                  {"dgid", 128},
                                                  {"dmac", 48},
                                                  {"path_mtu", 3},
                                                  {"timeout", 5},
                                                  {"retry_cnt", 3},
                                                  {"rnr_retry", 3},
                                                  {"min_rnr_timer", 5},
                                                  {"max_rd_atomic", 5},
                                                  {"access", 4}}};
};

/// dev2host_wr_rsp: the answer to host2qp_path and host2mr_wr: the QPN or key the device
/// assigned (or the one named), or why not.
struct WrRsp {
  std::uint8_t status = 0;  ///< 0 ok, 1 no such entry, 2 table full, 3 invalid
  std::uint32_t id = 0;     ///< QPN (24 bits) or MR key
  static constexpr std::array<Field, 2> kFields{{{"status", 3}, {"id", 32}}};
};

// ---- MR/TLB table ------------------------------------------------------------------------------

/// dev2mr_req: may the device touch [vaddr, vaddr + len) under `key` with `access`?
struct MrReq {
  std::uint32_t key = 0;
  std::uint32_t pd = 0;
  std::uint64_t vaddr = 0;
  std::uint32_t len = 0;
  std::uint8_t access = 0;  ///< verbs access bits: local write, remote write, remote read, atomic
  static constexpr std::array<Field, 5> kFields{
      {{"key", 32}, {"pd", 24}, {"vaddr", 64}, {"len", 32}, {"access", 4}}};
};

/// mr2dev_rsp: the translation (host physical / DMA address), or why not.
struct MrRsp {
  std::uint8_t status = 0;  ///< 0 ok, 1 no such key, 2 wrong PD, 3 out of range, 4 access
  std::uint64_t paddr = 0;
  static constexpr std::array<Field, 2> kFields{{{"status", 3}, {"paddr", 64}}};
};

/// host2mr_wr: register (valid; the device assigns the key and answers on dev2host_wr_rsp) or
/// deregister (the key names the MR).
struct HostMrWrite {
  std::uint32_t key = 0;
  bool valid = false;
  std::uint32_t pd = 0;
  std::uint64_t vaddr = 0;
  std::uint64_t len = 0;
  std::uint64_t paddr = 0;
  std::uint8_t access = 0;
  static constexpr std::array<Field, 7> kFields{{{"key", 32},
                                                 {"valid", 1},
                                                 {"pd", 24},
                                                 {"vaddr", 64},
                                                 {"len", 64},
                                                 {"paddr", 64},
                                                 {"access", 4}}};
};

// ---- counters -----------------------------------------------------------------------------------

/// Device counters, 64 bits each, readable by the host. The first names are Coyote's network
/// statistics (cyt_attr_nstats) so that numbers compare with the seed's; the rest are ours.
enum class DevCounter : std::uint8_t {
  kRxPkgs,        ///< "RX pkgs": every frame received
  kTxPkgs,        ///< "TX pkgs"
  kArpRxPkgs,     ///< "ARP RX pkgs"
  kArpTxPkgs,     ///< "ARP TX pkgs"
  kIcmpRxPkgs,    ///< "ICMP RX pkgs"
  kIcmpTxPkgs,    ///< "ICMP TX pkgs"
  kRoceRxPkgs,    ///< "ROCE RX pkgs": UDP to the RoCEv2 port
  kRoceTxPkgs,    ///< "ROCE TX pkgs"
  kIbvRxPkgs,     ///< "IBV RX pkgs": RoCE frames that passed every check
  kIbvTxPkgs,     ///< "IBV TX pkgs"
  kPsnDropCnt,    ///< "PSN drop cnt" (datapath mode)
  kRetransCnt,    ///< "Retrans cnt" (datapath mode)
  kRxIcrcDrop,    ///< frames dropped for a bad ICRC
  kRxParseDrop,   ///< frames dropped by the header parser (any other verdict)
  kTxIcrcGen,     ///< ICRCs the device wrote
  kTxIcrcDiffer,  ///< of those, how many differed from what the host had written
  kWqIn,          ///< work requests taken from host2dev_wq
  kCqOut,         ///< completions written to dev2host_cq
  kCount_
};
inline constexpr std::size_t kDevCounters = static_cast<std::size_t>(DevCounter::kCount_);
inline constexpr std::array<std::string_view, kDevCounters> kDevCounterNames{
    "RX pkgs",         "TX pkgs",      "ARP RX pkgs",   "ARP TX pkgs",    "ICMP RX pkgs",
    "ICMP TX pkgs",    "ROCE RX pkgs", "ROCE TX pkgs",  "IBV RX pkgs",    "IBV TX pkgs",
    "PSN drop cnt",    "Retrans cnt",  "ICRC drop cnt", "Parse drop cnt", "ICRC gen cnt",
    "ICRC differ cnt", "WQ in",        "CQ out"};

// ---- the port list ------------------------------------------------------------------------------

enum class PortKind : std::uint8_t { kStream, kRing, kTableReq, kTableRsp, kTableWrite, kRegs };

/// One port of the boundary: its name, kind, direction and payload width.
struct PortDesc {
  std::string_view name;
  PortKind kind;
  bool host_to_dev;  ///< direction (streams from the network count as into the device)
  unsigned bits;     ///< width of one beat / descriptor / request
};

inline constexpr std::array<PortDesc, 19> kPorts{{
    {"host2dev_wq", PortKind::kRing, true, total_bits(WorkRequest::kFields)},
    {"dev2host_cq", PortKind::kRing, false, total_bits(Completion::kFields)},
    {"net2dev_rx", PortKind::kStream, true, total_bits(Flit::kFields)},
    {"dev2net_tx", PortKind::kStream, false, total_bits(Flit::kFields)},
    {"host2dev_tx", PortKind::kStream, true, total_bits(Flit::kFields)},
    {"dev2host_rx", PortKind::kStream, false, total_bits(Flit::kFields)},
    {"dev2host_rx_meta", PortKind::kStream, false, total_bits(RxMeta::kFields)},
    {"host2dev_tx_meta", PortKind::kStream, true, total_bits(TxMeta::kFields)},
    {"rx2qp_req", PortKind::kTableReq, true, total_bits(RxQpReq::kFields)},
    {"qp2rx_rsp", PortKind::kTableRsp, false, QpRsp::kBits},
    {"tx2qp_req", PortKind::kTableReq, true, total_bits(TxQpReq::kFields)},
    {"qp2tx_rsp", PortKind::kTableRsp, false, QpRsp::kBits},
    {"host2qp_wr", PortKind::kTableWrite, true, HostQpWrite::kBits},
    {"host2qp_path", PortKind::kTableWrite, true, total_bits(QpPath::kFields)},
    {"dev2host_wr_rsp", PortKind::kTableRsp, false, total_bits(WrRsp::kFields)},
    {"dev2mr_req", PortKind::kTableReq, true, total_bits(MrReq::kFields)},
    {"mr2dev_rsp", PortKind::kTableRsp, false, total_bits(MrRsp::kFields)},
    {"host2mr_wr", PortKind::kTableWrite, true, total_bits(HostMrWrite::kFields)},
    {"counters", PortKind::kRegs, false, 64 * static_cast<unsigned>(kDevCounters)},
}};

static_assert(total_bits(Flit::kFields) == 577);
static_assert(total_bits(RxMeta::kFields) == 336);
static_assert(total_bits(WorkRequest::kFields) == 352);

// ---- packing: a struct as the bit vector the RTL sees ------------------------------------------

/// A little-endian bit vector of up to 640 bits (the widest port, a flit, has 577): field 0 at
/// bit 0, each next field above the previous, as the SystemVerilog packed structs
/// in ports.svh list them from the LSB.
struct Bits {
  std::array<std::uint64_t, 10> w{};
  void put(unsigned at, unsigned n, std::uint64_t v) {
    for (unsigned i = 0; i < n; ++i)
      if ((v >> i) & 1) w[(at + i) / 64] |= std::uint64_t{1} << ((at + i) % 64);
  }
  std::uint64_t get(unsigned at, unsigned n) const {
    std::uint64_t v = 0;
    for (unsigned i = 0; i < n; ++i) v |= ((w[(at + i) / 64] >> ((at + i) % 64)) & 1) << i;
    return v;
  }
};

/// Packs the scalar fields of RxMeta (the port the RTL parser produces) in kFields order.
Bits pack(const RxMeta& m);
RxMeta unpack_rx_meta(const Bits& b);
/// The same for the descriptors.
Bits pack(const WorkRequest& wr);
WorkRequest unpack_work_request(const Bits& b);
Bits pack(const Completion& c);
Completion unpack_completion(const Bits& b);

/// Splits a frame into flits as net2dev_rx carries it; returns how many (at most out.size()).
std::size_t to_flits(std::span<const std::uint8_t> frame, std::span<Flit> out);

}  // namespace roce::fpga
