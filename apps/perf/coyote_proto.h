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
/// bits, no address, a GID that is not 32 hex digits and NUL or does not repeat ip_addr, a
/// buffer smaller than `need`), returns false with the reason in `err`. size 0 is taken as
/// "not said".
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
