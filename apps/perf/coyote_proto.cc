/// @file
/// Coyote's benchmark exchange: the 64-byte queue, checks and the output row.
#include "apps/perf/coyote_proto.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <sstream>

namespace roce::perf::coyote {

namespace {

void put32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t get32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
std::uint64_t get64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
std::string hex8(std::uint32_t v) {
  char s[9];
  std::snprintf(s, sizeof s, "%08x", v);
  return s;
}

}  // namespace

Queue make_queue(std::uint32_t ip, std::uint32_t qpn, std::uint32_t psn, std::uint32_t rkey,
                 std::uint64_t vaddr, std::uint32_t size) {
  Queue q{ip, qpn, psn, rkey, vaddr, size, {}};
  for (int i = 0; i < 4; ++i) q.gid += hex8(ip);
  return q;
}

std::array<std::uint8_t, kQueueLen> encode(const Queue& q) {
  std::array<std::uint8_t, kQueueLen> b{};
  put32(&b[0], q.ip_addr);
  put32(&b[4], q.qpn);
  put32(&b[8], q.psn);
  put32(&b[12], q.rkey);
  put64(&b[16], q.vaddr);
  put32(&b[24], q.size);
  std::memcpy(&b[28], q.gid.data(), std::min<std::size_t>(q.gid.size(), 32));
  return b;  // gid[32] and the padding stay 0
}

bool looks_like_fid(const std::uint8_t (&first)[kFidLen]) { return get32(first) < 0x01000000; }

std::array<std::uint8_t, kFidLen> encode_fid(std::int32_t fid) {
  std::array<std::uint8_t, kFidLen> b{};
  put32(b.data(), static_cast<std::uint32_t>(fid));
  return b;
}

std::array<std::uint8_t, kClibCloseLen> encode_clib_close() {
  std::array<std::uint8_t, kClibCloseLen> b{};
  put32(b.data(), kCloseConn);
  return b;
}

bool is_clib_close(const std::array<std::uint8_t, kClibCloseLen>& b) {
  return get32(b.data()) == kCloseConn;
}

bool decode(const std::array<std::uint8_t, kQueueLen>& b, std::uint32_t need, Queue& q,
            std::string& err) {
  q.ip_addr = get32(&b[0]);
  q.qpn = get32(&b[4]);
  q.psn = get32(&b[8]);
  q.rkey = get32(&b[12]);
  q.vaddr = get64(&b[16]);
  q.size = get32(&b[24]);
  q.gid.assign(reinterpret_cast<const char*>(&b[28]), 32);
  std::ostringstream e;
  if (q.qpn > 0xFFFFFF)
    e << "QPN 0x" << std::hex << q.qpn << " is not a 24-bit QP number";
  else if (q.psn > 0xFFFFFF)
    e << "PSN 0x" << std::hex << q.psn << " is over 24 bits";
  else if (q.ip_addr == 0 || q.ip_addr == 0xFFFFFFFF)
    e << "no IPv4 address (0x" << std::hex << q.ip_addr << ")";
  else if (b[60] != 0 || q.gid.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    e << "the GID is not 32 hex digits and a NUL";
  else if (q.gid != make_queue(q.ip_addr, 0, 0, 0, 0, 0).gid)
    e << "the GID " << q.gid << " does not repeat the IPv4 address " << hex8(q.ip_addr);
  else if (q.vaddr == 0)
    e << "no buffer address";
  else if (q.size != 0 && q.size < need)
    e << "its buffer holds " << q.size << " bytes, the largest transfer needs " << need;
  err = e.str();
  return err.empty();
}

std::string describe(const char* name, const Queue& q) {
  char s[160];
  std::snprintf(s, sizeof s, "%s: QPN 0x%06x, PSN 0x%06x, VADDR %016llx, SIZE %08x, IP 0x%08x",
                name, q.qpn, q.psn, static_cast<unsigned long long>(q.vaddr), q.size, q.ip_addr);
  return s;
}

std::string result_row(std::uint32_t size, double mbps, double lat_us) {
  std::ostringstream o;
  o << "Size: " << std::setw(8) << size << "; Average throughput: " << std::setw(8) << mbps
    << " MB/s; Average latency: " << std::setw(8) << lat_us << " us";
  return o.str();
}

double throughput_mbps(unsigned ops, std::uint32_t size, double ns) {
  return static_cast<double>(ops) * static_cast<double>(size) / (1024.0 * 1024.0 * ns * 1e-9);
}

}  // namespace roce::perf::coyote
