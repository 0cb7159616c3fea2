/// @file
/// Coyote's RDMA benchmark exchange (Coyote's examples/08_perf_rdma, its cThread::initRDMA and
/// connSync), spoken byte for byte. Pure: encoding and checks, no sockets.
///
/// On one TCP connection (default port 18488; the server listens, the client connects):
///  1. the client sends its queue (64 bytes, below), the server answers with its own;
///  2. before every timed run, a barrier: the client sends a 4-byte 0 and reads 4 bytes, the
///     server reads 4 and sends a 4-byte 0; once more after the last size;
///  3. the client ends with a 4-byte 0 (close request) and closes.
///
/// The seed's cLib (Coyote's sw/include/cLib.hpp of 2023, `cLib(sock, fid, cthread, addr, port)`)
/// frames the same exchange differently: the client sends its 4-byte function id (an int32,
/// e.g. fidRDMA) before its queue, and its destructor sends a 12-byte request whose first int32
/// is defOpClose (0); the other 8 bytes are whatever its stack held. A server tells the two
/// apart by the first word: a queue starts with the client's IPv4 address, never in 0.0.0.0/8,
/// while a function id is a small number (see looks_like_fid).
///
/// A real card numbers its QPs `(vfid << 6) | ctid`, so the first thread of vFPGA 0 sends QPN 0:
/// QPN 0 is a valid Coyote queue (RoCE has no QP0 of its own; the IB SMI QP is not on the wire).
///
/// The queue is Coyote's `ibvQ` as an x86-64 process lays it out (little-endian, natural
/// alignment): ip_addr u32 @0, qpn u32 @4, psn u32 @8, rkey u32 @12, vaddr u64 @16, size u32
/// @24, gid char[33] @28 (32 lower-case hex digits: the IPv4 address's value as 8 digits, four
/// times, then NUL), 3 bytes of padding @61. ip_addr is the IPv4 address as a number
/// (10.1.212.173 is 0x0A01D4AD).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace roce::perf::coyote {

constexpr std::size_t kQueueLen = 64;
constexpr unsigned kDefaultPort = 18488;
/// The example's batch (constants.hpp): operations per throughput run, per latency run.
constexpr unsigned kThroughputReps = 64;
constexpr unsigned kLatencyReps = 1;
constexpr std::uint32_t kCloseConn = 0;  ///< DEF_OP_CLOSE_CONN
/// The seed's cLib: the function id before the queue, and its close request's length.
constexpr std::size_t kFidLen = 4;
constexpr std::size_t kClibCloseLen = 12;

/// True when the first 4 bytes a client sent are cLib's function id rather than the start of a
/// queue: an ip_addr below 1.0.0.0 is not an address a card or host has.
bool looks_like_fid(const std::uint8_t (&first)[kFidLen]);
/// cLib's 4-byte function id as an x86-64 process writes it (little-endian int32).
std::array<std::uint8_t, kFidLen> encode_fid(std::int32_t fid);
/// cLib's close request: defOpClose in the first int32, the rest zero from us.
std::array<std::uint8_t, kClibCloseLen> encode_clib_close();
/// Checks a received cLib close request (only the first word carries meaning).
bool is_clib_close(const std::array<std::uint8_t, kClibCloseLen>& b);

struct Queue {
  std::uint32_t ip_addr = 0;  ///< IPv4 as a number (host order value)
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  std::uint32_t rkey = 0;
  std::uint64_t vaddr = 0;
  std::uint32_t size = 0;
  std::string gid;  ///< the 32 hex digits
};

/// Our queue: the GID is ip_addr's 8 hex digits four times, as Coyote writes it.
Queue make_queue(std::uint32_t ip, std::uint32_t qpn, std::uint32_t psn, std::uint32_t rkey,
                 std::uint64_t vaddr, std::uint32_t size);
std::array<std::uint8_t, kQueueLen> encode(const Queue& q);
/// Decodes and checks a peer's queue; on anything Coyote would not send (a QPN or PSN over 24
/// bits (QPN 0 is fine: a card's first thread), no address, a GID that is not 32 hex digits and NUL
/// or does not repeat ip_addr, a buffer smaller than `need`), returns false with the reason in
/// `err`. size 0 is taken as "not said".
bool decode(const std::array<std::uint8_t, kQueueLen>& b, std::uint32_t need, Queue& q,
            std::string& err);
/// Coyote's debug line for a queue ("Local: QPN 0x..., PSN 0x..., VADDR ..., SIZE ..., IP ...").
std::string describe(const char* name, const Queue& q);

/// Coyote's per-size row: "Size: %8u; Average throughput: %8g MB/s; Average latency: %8g us",
/// formatted as its iostream (setw(8), default precision) does.
std::string result_row(std::uint32_t size, double mbps, double lat_us);
/// Its formulas: throughput in MB/s (2^20 bytes) of `ops` operations of `size` bytes in `ns`.
double throughput_mbps(unsigned ops, std::uint32_t size, double ns);

}  // namespace roce::perf::coyote
