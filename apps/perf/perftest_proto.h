/// @file
/// The bytes perftest (ib_write_bw and friends, linux-rdma/perftest) exchanges on its TCP
/// connection before and after the RoCE traffic, without rdma_cm. Pure functions, unit-tested
/// against messages captured from the real tools. Layouts: roce-wire-reference section 4.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "dataplane/wire/bytes.h"

namespace roce::perf::pt {

/// Step 1: the version, NUL-padded ASCII.
constexpr std::size_t kVersionLen = 16;
/// perftest refuses peers older than this.
constexpr const char* kMinVersion = "5.70";
/// Peers at or above this version exchange the negotiate_params struct (step 4).
constexpr const char* kNegotiateVersion = "6.28";

/// Compares "MAJOR.MINOR" strings numerically by field ("6.06" < "6.20" < "6.28"); -1, 0, 1.
int compare_versions(const std::string& a, const std::string& b);

/// Selective repeat between two roce-perf's (--selective-repeat; docs/loss-recovery.md), asked
/// for in the version message's padding: perftest reads the version as a C string (strverscmp
/// up to its NUL) and sends zeros after it, so bytes past the NUL reach no standard peer's
/// logic. The client offers; the server, which reads first, answers with an accept only to an
/// offer, so a standard client never receives anything but zeros there. With both, each QP
/// address carries in its SRQ number (unused by RC) the message index its QP receives from
/// (SrIndexBase::rx), which the peer's QP sends from.
enum class SrMark : std::uint8_t { kNone, kOffer, kAccept };
/// Where the mark goes: a version of up to kSrMarkAt - 1 characters leaves room for it.
constexpr std::size_t kSrMarkAt = 10;
constexpr std::size_t kSrMarkLen = 5;  ///< "RoSRo" (offer) or "RoSRa" (accept), no NUL
std::array<char, kVersionLen> version_msg(const std::string& v, SrMark mark = SrMark::kNone);
std::string version_of(std::span<const char, kVersionLen> msg);
SrMark sr_mark_of(std::span<const char, kVersionLen> msg);

/// Step 2: cycle buffer and cache line size, 32-bit big-endian each.
struct SysData {
  std::uint32_t cycle_buffer = 4096, cache_line = 64;
};
std::array<std::uint8_t, 8> encode(const SysData& s);
SysData decode_sys(std::span<const std::uint8_t, 8> b);

/// Step 3: the ibv_mtu enum (1 = 256 ... 5 = 4096) as "%d" with its NUL: 2 bytes.
std::array<char, 2> mtu_msg(int mtu_enum);
std::optional<int> mtu_of(std::span<const char, 2> msg);
int mtu_enum_of_bytes(unsigned bytes);  ///< 0 when not a valid path MTU
unsigned mtu_bytes_of_enum(int e);

/// Steps 5-7, 11: one QP's address, "%04x:%04x:%06x:%06x:%08x:%016llx:" then the 16 GID bytes
/// as "%02x:" each, then "%08x:" of the SRQ number; 107 characters and a NUL.
struct Dest {
  std::uint32_t lid = 0, out_reads = 0, qpn = 0, psn = 0, rkey = 0;
  std::uint64_t vaddr = 0;
  wire::Ipv6Addr gid;
  std::uint32_t srqn = 0;
  bool operator==(const Dest&) const = default;
};
constexpr std::size_t kDestLen = 108;
std::array<char, kDestLen> dest_msg(const Dest& d);
std::optional<Dest> dest_of(std::span<const char, kDestLen> msg);

/// The same QP address when perftest exchanges it over rdma_cm (-R): struct pingpong_dest sent
/// as one 56-byte SEND on the communication connection, every field big-endian (perftest
/// converts each with htobe32/htobe64): lid, out_reads, qpn, psn, rkey at 0, 4, 8, 12, 16;
/// 4 bytes of padding; vaddr at 24; the GID at 32; srqn at 48; gid_index at 52. The padding is
/// whatever the sender's stack held, and the reader ignores srqn and gid_index.
constexpr std::size_t kDestBinLen = 56;
std::array<std::uint8_t, kDestBinLen> dest_bin(const Dest& d, std::int32_t gid_index = 0);
/// nullopt when the QPN or the PSN does not fit in 24 bits.
std::optional<Dest> dest_of_bin(std::span<const std::uint8_t, kDestBinLen> msg);

/// Step 10: the client's results for the server's report: size, iterations (u64 BE), peak and
/// average bandwidth and message rate (IEEE-754 doubles, big-endian).
struct Report {
  std::uint64_t size = 0, iters = 0;
  double bw_peak = 0, bw_avg = 0, msg_rate = 0;
};
constexpr std::size_t kReportLen = 40;
std::array<std::uint8_t, kReportLen> encode(const Report& r);
Report decode_report(std::span<const std::uint8_t, kReportLen> b);

/// Step 4 (both sides >= 6.28): the test parameters both sides must agree on, and the peer's
/// device limits, in 312 bytes (320 when perftest was built with mlx5dv).
struct Params {
  std::int32_t test_method = 0, connection_type = 0, verb = 0, tst = 0, atomic_type = 0,
               test_type = 0, report_fmt = 0;
  std::uint64_t size = 0, iters = 0;
  std::int32_t aes_xts = 0, num_of_qps = 1, duration = 0, use_rdma_cm = 0, use_write_with_imm = 0,
               no_enhanced_reorder = 0, sig_offload = 0, data_validation = 0;
  std::uint32_t max_qp_rd_atom = 0;  ///< the one device attribute perftest reads
  bool operator==(const Params&) const = default;
};
constexpr std::size_t kParamsLen = 312;
constexpr std::size_t kParamsOffDevAttr = 80;
constexpr std::size_t kDevAttrOffMaxQpRdAtom = 144;         ///< inside struct ibv_device_attr
void encode(const Params& p, std::span<std::uint8_t> out);  ///< out.size() >= kParamsLen
Params decode_params(std::span<const std::uint8_t> in);
/// The name of the first field that differs in a way that makes the peers disagree, or "".
std::string params_mismatch(const Params& a, const Params& b);

}  // namespace roce::perf::pt
