/// @file
/// Packing of the boundary's structs into the bit vectors the RTL sees (ports.h).
#include "fpga/iface/ports.h"

#include <algorithm>

namespace roce::fpga {
namespace {

template <std::size_t N>
Bits pack_values(const std::array<Field, N>& fields, const std::array<std::uint64_t, N>& v) {
  Bits b;
  unsigned at = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const unsigned n = fields[i].bits;
    b.put(at, n, n >= 64 ? v[i] : v[i] & ((std::uint64_t{1} << n) - 1));
    at += n;
  }
  return b;
}

template <std::size_t N>
std::array<std::uint64_t, N> unpack_values(const std::array<Field, N>& fields, const Bits& b) {
  std::array<std::uint64_t, N> v{};
  unsigned at = 0;
  for (std::size_t i = 0; i < N; ++i) {
    v[i] = b.get(at, fields[i].bits);
    at += fields[i].bits;
  }
  return v;
}

template <class T, class U>
T narrow(U v) {
  return static_cast<T>(v);
}

}  // namespace

Bits pack(const RxMeta& m) {
  return pack_values(
      RxMeta::kFields,
      {m.verdict,       m.opcode,      m.dest_qp,   m.psn,     m.ack_req,   m.pad,
       m.ipv6,          m.has_vlan,    m.vlan_id,   m.ecn,     m.l3_off,    m.bth_off,
       m.payload_off,   m.payload_len, m.frame_len, m.reth_va, m.reth_rkey, m.reth_len,
       m.aeth_syndrome, m.aeth_msn,    m.icrc});
}

RxMeta unpack_rx_meta(const Bits& b) {
  const auto v = unpack_values(RxMeta::kFields, b);
  RxMeta m;
  m.verdict = narrow<std::uint8_t>(v[0]);
  m.opcode = narrow<std::uint8_t>(v[1]);
  m.dest_qp = narrow<std::uint32_t>(v[2]);
  m.psn = narrow<std::uint32_t>(v[3]);
  m.ack_req = v[4] != 0;
  m.pad = narrow<std::uint8_t>(v[5]);
  m.ipv6 = v[6] != 0;
  m.has_vlan = v[7] != 0;
  m.vlan_id = narrow<std::uint16_t>(v[8]);
  m.ecn = narrow<std::uint8_t>(v[9]);
  m.l3_off = narrow<std::uint8_t>(v[10]);
  m.bth_off = narrow<std::uint8_t>(v[11]);
  m.payload_off = narrow<std::uint16_t>(v[12]);
  m.payload_len = narrow<std::uint16_t>(v[13]);
  m.frame_len = narrow<std::uint16_t>(v[14]);
  m.reth_va = v[15];
  m.reth_rkey = narrow<std::uint32_t>(v[16]);
  m.reth_len = narrow<std::uint32_t>(v[17]);
  m.aeth_syndrome = narrow<std::uint8_t>(v[18]);
  m.aeth_msn = narrow<std::uint32_t>(v[19]);
  m.icrc = narrow<std::uint32_t>(v[20]);
  return m;
}

Bits pack(const WorkRequest& wr) {
  return pack_values(WorkRequest::kFields,
                     {wr.wr_id, wr.qpn, static_cast<std::uint64_t>(wr.opcode), wr.flags, wr.laddr,
                      wr.lkey, wr.raddr, wr.rkey, wr.len, wr.imm});
}

WorkRequest unpack_work_request(const Bits& b) {
  const auto v = unpack_values(WorkRequest::kFields, b);
  WorkRequest wr;
  wr.wr_id = v[0];
  wr.qpn = narrow<std::uint32_t>(v[1]);
  wr.opcode = static_cast<WqOpcode>(v[2]);
  wr.flags = narrow<std::uint8_t>(v[3]);
  wr.laddr = v[4];
  wr.lkey = narrow<std::uint32_t>(v[5]);
  wr.raddr = v[6];
  wr.rkey = narrow<std::uint32_t>(v[7]);
  wr.len = narrow<std::uint32_t>(v[8]);
  wr.imm = narrow<std::uint32_t>(v[9]);
  return wr;
}

Bits pack(const Completion& c) {
  return pack_values(Completion::kFields, {c.wr_id, c.qpn, c.status, c.opcode, c.byte_len, c.imm});
}

Completion unpack_completion(const Bits& b) {
  const auto v = unpack_values(Completion::kFields, b);
  Completion c;
  c.wr_id = v[0];
  c.qpn = narrow<std::uint32_t>(v[1]);
  c.status = narrow<std::uint8_t>(v[2]);
  c.opcode = narrow<std::uint8_t>(v[3]);
  c.byte_len = narrow<std::uint32_t>(v[4]);
  c.imm = narrow<std::uint32_t>(v[5]);
  return c;
}

std::size_t to_flits(std::span<const std::uint8_t> frame, std::span<Flit> out) {
  std::size_t n = 0;
  for (std::size_t at = 0; at < frame.size() && n < out.size(); at += kFlitBytes, ++n) {
    const std::size_t k = std::min<std::size_t>(kFlitBytes, frame.size() - at);
    Flit& f = out[n];
    f.data.fill(0);
    std::copy_n(frame.data() + at, k, f.data.begin());
    f.keep = k == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << k) - 1;
    f.last = at + k == frame.size();
  }
  return n;
}

}  // namespace roce::fpga
