/// @file
/// perftest's out-of-band messages.
#include "apps/perf/perftest_proto.h"

#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dataplane/engine/verbs.h"

namespace roce::perf::pt {

using wire::load_be32;
using wire::load_be64;
using wire::store_be32;
using wire::store_be64;

int compare_versions(const std::string& a, const std::string& b) {
  const char* pa = a.c_str();
  const char* pb = b.c_str();
  for (int field = 0; field < 4; ++field) {
    char* ea;
    char* eb;
    const long va = std::strtol(pa, &ea, 10);
    const long vb = std::strtol(pb, &eb, 10);
    if (va != vb) return va < vb ? -1 : 1;
    if (*ea != '.' || *eb != '.') break;
    pa = ea + 1;
    pb = eb + 1;
  }
  return 0;
}

namespace {
constexpr char kSrOffer[kSrMarkLen + 1] = "RoSRo";
constexpr char kSrAccept[kSrMarkLen + 1] = "RoSRa";
}  // namespace

std::array<char, kVersionLen> version_msg(const std::string& v, SrMark mark) {
  std::array<char, kVersionLen> m{};
  // A mark keeps the version to the bytes before it, with its NUL.
  const std::size_t room = mark == SrMark::kNone ? kVersionLen - 1 : kSrMarkAt - 1;
  std::memcpy(m.data(), v.data(), std::min(v.size(), room));
  if (mark != SrMark::kNone)
    std::memcpy(m.data() + kSrMarkAt, mark == SrMark::kOffer ? kSrOffer : kSrAccept, kSrMarkLen);
  return m;
}

SrMark sr_mark_of(std::span<const char, kVersionLen> msg) {
  // Only after the version's NUL: a version string that runs into the mark's bytes is not one.
  if (strnlen(msg.data(), kVersionLen) >= kSrMarkAt) return SrMark::kNone;
  if (std::memcmp(msg.data() + kSrMarkAt, kSrOffer, kSrMarkLen) == 0) return SrMark::kOffer;
  if (std::memcmp(msg.data() + kSrMarkAt, kSrAccept, kSrMarkLen) == 0) return SrMark::kAccept;
  return SrMark::kNone;
}

std::string version_of(std::span<const char, kVersionLen> msg) {
  return std::string(msg.data(), strnlen(msg.data(), kVersionLen));
}

std::array<std::uint8_t, 8> encode(const SysData& s) {
  std::array<std::uint8_t, 8> b{};
  store_be32(b.data(), s.cycle_buffer);
  store_be32(b.data() + 4, s.cache_line);
  return b;
}

SysData decode_sys(std::span<const std::uint8_t, 8> b) {
  return {load_be32(b.data()), load_be32(b.data() + 4)};
}

std::array<char, 2> mtu_msg(int mtu_enum) { return {static_cast<char>('0' + mtu_enum), '\0'}; }

std::optional<int> mtu_of(std::span<const char, 2> msg) {
  if (msg[0] < '1' || msg[0] > '5' || msg[1] != '\0') return std::nullopt;
  return msg[0] - '0';
}

int mtu_enum_of_bytes(unsigned bytes) {
  const auto m = engine::mtu_of_bytes(bytes);
  return m ? static_cast<int>(*m) : 0;
}

unsigned mtu_bytes_of_enum(int e) {
  return e >= 1 && e <= 5 ? engine::mtu_bytes(static_cast<engine::Mtu>(e)) : 0;
}

std::array<char, kDestLen> dest_msg(const Dest& d) {
  std::array<char, kDestLen> m{};
  int n =
      std::snprintf(m.data(), m.size(), "%04x:%04x:%06x:%06x:%08x:%016" PRIx64 ":", d.lid & 0xFFFF,
                    d.out_reads & 0xFFFF, d.qpn & 0xFFFFFF, d.psn & 0xFFFFFF, d.rkey, d.vaddr);
  for (auto b : d.gid.b)
    n += std::snprintf(m.data() + n, m.size() - static_cast<std::size_t>(n), "%02x:", b);
  std::snprintf(m.data() + n, m.size() - static_cast<std::size_t>(n), "%08x:", d.srqn);
  return m;
}

std::array<std::uint8_t, kDestBinLen> dest_bin(const Dest& d, std::int32_t gid_index) {
  std::array<std::uint8_t, kDestBinLen> m{};
  wire::store_be32(m.data() + 0, d.lid);
  wire::store_be32(m.data() + 4, d.out_reads);
  wire::store_be32(m.data() + 8, d.qpn);
  wire::store_be32(m.data() + 12, d.psn);
  wire::store_be32(m.data() + 16, d.rkey);
  wire::store_be64(m.data() + 24, d.vaddr);
  std::memcpy(m.data() + 32, d.gid.b.data(), 16);
  wire::store_be32(m.data() + 48, d.srqn);
  wire::store_be32(m.data() + 52, static_cast<std::uint32_t>(gid_index));
  return m;
}

std::optional<Dest> dest_of_bin(std::span<const std::uint8_t, kDestBinLen> msg) {
  Dest d;
  d.lid = wire::load_be32(msg.data() + 0);
  d.out_reads = wire::load_be32(msg.data() + 4);
  d.qpn = wire::load_be32(msg.data() + 8);
  d.psn = wire::load_be32(msg.data() + 12);
  d.rkey = wire::load_be32(msg.data() + 16);
  d.vaddr = wire::load_be64(msg.data() + 24);
  std::memcpy(d.gid.b.data(), msg.data() + 32, 16);
  d.srqn = wire::load_be32(msg.data() + 48);
  if (d.qpn > 0xFFFFFF || d.psn > 0xFFFFFF) return std::nullopt;
  return d;
}

std::optional<Dest> dest_of(std::span<const char, kDestLen> msg) {
  if (msg[kDestLen - 1] != '\0' || std::strlen(msg.data()) != kDestLen - 1) return std::nullopt;
  // Fixed-width lower-case hex fields separated by ':'.
  static constexpr int kWidths[] = {4, 4, 6, 6, 8, 16, 2, 2, 2, 2, 2, 2,
                                    2, 2, 2, 2, 2, 2,  2, 2, 2, 2, 8};
  std::uint64_t v[std::size(kWidths)];
  const char* p = msg.data();
  for (std::size_t f = 0; f < std::size(kWidths); ++f) {
    std::uint64_t x = 0;
    for (int i = 0; i < kWidths[f]; ++i, ++p) {
      const char c = *p;
      int d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        return std::nullopt;
      x = x << 4 | static_cast<unsigned>(d);
    }
    if (*p++ != ':') return std::nullopt;
    v[f] = x;
  }
  Dest d;
  d.lid = static_cast<std::uint32_t>(v[0]);
  d.out_reads = static_cast<std::uint32_t>(v[1]);
  d.qpn = static_cast<std::uint32_t>(v[2]);
  d.psn = static_cast<std::uint32_t>(v[3]);
  d.rkey = static_cast<std::uint32_t>(v[4]);
  d.vaddr = v[5];
  for (std::size_t i = 0; i < 16; ++i) d.gid.b[i] = static_cast<std::uint8_t>(v[6 + i]);
  d.srqn = static_cast<std::uint32_t>(v[22]);
  return d;
}

std::array<std::uint8_t, kReportLen> encode(const Report& r) {
  std::array<std::uint8_t, kReportLen> b{};
  store_be64(b.data(), r.size);
  store_be64(b.data() + 8, r.iters);
  store_be64(b.data() + 16, std::bit_cast<std::uint64_t>(r.bw_peak));
  store_be64(b.data() + 24, std::bit_cast<std::uint64_t>(r.bw_avg));
  store_be64(b.data() + 32, std::bit_cast<std::uint64_t>(r.msg_rate));
  return b;
}

Report decode_report(std::span<const std::uint8_t, kReportLen> b) {
  Report r;
  r.size = load_be64(b.data());
  r.iters = load_be64(b.data() + 8);
  r.bw_peak = std::bit_cast<double>(load_be64(b.data() + 16));
  r.bw_avg = std::bit_cast<double>(load_be64(b.data() + 24));
  r.msg_rate = std::bit_cast<double>(load_be64(b.data() + 32));
  return r;
}

void encode(const Params& p, std::span<std::uint8_t> out) {
  std::memset(out.data(), 0, kParamsLen);
  std::uint8_t* b = out.data();
  const std::int32_t head[] = {p.test_method, p.connection_type, p.verb,      p.tst,
                               p.atomic_type, p.test_type,       p.report_fmt};
  for (std::size_t i = 0; i < std::size(head); ++i)
    store_be32(b + 4 * i, static_cast<std::uint32_t>(head[i]));
  store_be64(b + 32, p.size);
  store_be64(b + 40, p.iters);
  const std::int32_t tail[] = {p.aes_xts,     p.num_of_qps,         p.duration,
                               p.use_rdma_cm, p.use_write_with_imm, p.no_enhanced_reorder,
                               p.sig_offload, p.data_validation};
  for (std::size_t i = 0; i < std::size(tail); ++i)
    store_be32(b + 48 + 4 * i, static_cast<std::uint32_t>(tail[i]));
  // struct ibv_device_attr travels raw, in the sender's byte order (x86: little-endian).
  const std::uint32_t v = p.max_qp_rd_atom;
  std::memcpy(b + kParamsOffDevAttr + kDevAttrOffMaxQpRdAtom, &v, 4);
}

Params decode_params(std::span<const std::uint8_t> in) {
  Params p;
  const std::uint8_t* b = in.data();
  std::int32_t* head[] = {&p.test_method, &p.connection_type, &p.verb,      &p.tst,
                          &p.atomic_type, &p.test_type,       &p.report_fmt};
  for (std::size_t i = 0; i < std::size(head); ++i)
    *head[i] = static_cast<std::int32_t>(load_be32(b + 4 * i));
  p.size = load_be64(b + 32);
  p.iters = load_be64(b + 40);
  std::int32_t* tail[] = {&p.aes_xts,     &p.num_of_qps,         &p.duration,
                          &p.use_rdma_cm, &p.use_write_with_imm, &p.no_enhanced_reorder,
                          &p.sig_offload, &p.data_validation};
  for (std::size_t i = 0; i < std::size(tail); ++i)
    *tail[i] = static_cast<std::int32_t>(load_be32(b + 48 + 4 * i));
  std::memcpy(&p.max_qp_rd_atom, b + kParamsOffDevAttr + kDevAttrOffMaxQpRdAtom, 4);
  return p;
}

std::string params_mismatch(const Params& a, const Params& b) {
#define ROCE_PT_CMP(f) \
  if (a.f != b.f) return #f
  ROCE_PT_CMP(test_method);
  ROCE_PT_CMP(connection_type);
  ROCE_PT_CMP(verb);
  ROCE_PT_CMP(tst);
  ROCE_PT_CMP(atomic_type);
  ROCE_PT_CMP(test_type);
  ROCE_PT_CMP(report_fmt);
  ROCE_PT_CMP(size);
  ROCE_PT_CMP(iters);
  ROCE_PT_CMP(num_of_qps);
  ROCE_PT_CMP(duration);
  ROCE_PT_CMP(use_rdma_cm);
  ROCE_PT_CMP(use_write_with_imm);
  ROCE_PT_CMP(aes_xts);
  ROCE_PT_CMP(no_enhanced_reorder);
  ROCE_PT_CMP(sig_offload);
  ROCE_PT_CMP(data_validation);
#undef ROCE_PT_CMP
  return "";
}

}  // namespace roce::perf::pt
