/// @file
/// Writes the boundary of fpga/iface/ports.h as SystemVerilog: a localparam per field width
/// and per port width, and a packed struct per descriptor, LSB first as pack() lays them out.
/// The RTL includes the result, so the widths it uses are the ones the model uses.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "dataplane/wire/opcode_table.h"
#include "dataplane/wire/roce_frame.h"
#include "fpga/iface/ports.h"

namespace {

using roce::fpga::Field;

std::string upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return u;
}

template <std::size_t N>
void emit(std::ostream& o, std::string_view type, const std::array<Field, N>& fields) {
  const std::string t = upper(type);
  for (const Field& f : fields)
    o << "localparam int " << t << "_" << upper(f.name) << "_W = " << f.bits << ";\n";
  o << "localparam int " << t << "_W = " << roce::fpga::total_bits(fields) << ";\n";
  // SystemVerilog packed structs list the MSB first: reverse, so field 0 sits at bit 0.
  o << "typedef struct packed {\n";
  for (std::size_t i = N; i-- > 0;)
    o << "  logic [" << fields[i].bits - 1 << ":0] " << fields[i].name << ";\n";
  o << "} " << type << "_t;\n\n";
}

/// A ROM of one byte per opcode, as a packed vector indexed [8 * opcode +: 8].
template <class F>
void emit_rom(std::ostream& o, const char* name, F&& byte_of) {
  o << "localparam logic [2047:0] " << name << " = {";
  for (int op = 255; op >= 0; --op)
    o << "8'd"
      << static_cast<unsigned>(byte_of(roce::wire::opcode_info(static_cast<std::uint8_t>(op))))
      << (op ? (op % 16 == 0 ? ",\n    " : ", ") : "");
  o << "};\n";
}

/// The opcode table (dataplane/wire/opcode_table.h) as ROMs for the RTL parser.
void emit_opcode_roms(std::ostream& o) {
  using roce::wire::Ext;
  using roce::wire::OpcodeInfo;
  emit_rom(o, "OP_VALID", [](const OpcodeInfo& i) { return i.valid() ? 1 : 0; });
  emit_rom(o, "OP_HDR_LEN", [](const OpcodeInfo& i) { return i.hdr_len; });
  emit_rom(o, "OP_PAYLOAD",
           [](const OpcodeInfo& i) { return i.mask.has(roce::wire::OpMask::kPayload) ? 1 : 0; });
  emit_rom(o, "OP_FIXED_PAYLOAD", [](const OpcodeInfo& i) { return i.fixed_payload; });
  emit_rom(o, "OP_RETH_OFF", [](const OpcodeInfo& i) { return i.offset(Ext::kReth); });
  emit_rom(o, "OP_AETH_OFF", [](const OpcodeInfo& i) { return i.offset(Ext::kAeth); });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fpga_ports_svh OUT.svh\n";
    return 2;
  }
  std::ofstream o(argv[1]);
  o << "// Generated from fpga/iface/ports.h (and dataplane/wire's opcode table and verdicts) by\n"
    << "// fpga_ports_svh; do not edit. fpga/rtl/ports.svh is checked in (Verilator reads it when\n"
    << "// CMake configures); the test fpga_ports_svh_current fails when it differs from a fresh "
       "one:\n"
    << "// build/bin/fpga_ports_svh fpga/rtl/ports.svh\n"
    << "`ifndef ROCE_FPGA_PORTS_SVH\n`define ROCE_FPGA_PORTS_SVH\n\n"
    << "localparam int FLIT_BYTES = " << roce::fpga::kFlitBytes << ";\n\n";
  emit(o, "flit", roce::fpga::Flit::kFields);
  emit(o, "work_request", roce::fpga::WorkRequest::kFields);
  emit(o, "completion", roce::fpga::Completion::kFields);
  emit(o, "rx_meta", roce::fpga::RxMeta::kFields);
  emit(o, "tx_meta", roce::fpga::TxMeta::kFields);
  emit(o, "qp_state", roce::fpga::QpState::kFields);
  emit(o, "rx_qp_req", roce::fpga::RxQpReq::kFields);
  emit(o, "tx_qp_req", roce::fpga::TxQpReq::kFields);
  emit(o, "mr_req", roce::fpga::MrReq::kFields);
  emit(o, "mr_rsp", roce::fpga::MrRsp::kFields);
  emit(o, "host_mr_write", roce::fpga::HostMrWrite::kFields);
  emit(o, "qp_path", roce::fpga::QpPath::kFields);
  emit(o, "wr_rsp", roce::fpga::WrRsp::kFields);
  emit_opcode_roms(o);
  o << "\n";
  // wire::Verdict: the parser's verdicts, the same numbers as the software's.
  for (std::size_t v = 0; v < roce::wire::kVerdictCount; ++v)
    o << "localparam logic [4:0] V_"
      << upper(roce::wire::to_string(static_cast<roce::wire::Verdict>(v))) << " = 5'd" << v
      << ";\n";
  o << "\n";
  for (const auto& p : roce::fpga::kPorts)
    o << "localparam int PORT_" << upper(p.name) << "_W = " << p.bits << ";\n";
  o << "localparam int DEV_COUNTERS = " << roce::fpga::kDevCounters << ";\n";
  for (std::size_t i = 0; i < roce::fpga::kDevCounters; ++i) {
    std::string n = upper(roce::fpga::kDevCounterNames[i]);
    for (char& c : n)
      if (c == ' ') c = '_';
    o << "localparam int CNT_" << n << " = " << i << ";\n";
  }
  o << "\n`endif\n";
  return o ? 0 : 1;
}
