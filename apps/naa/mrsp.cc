/// @file
/// MRSP codec (mrsp.h): offsets as in the NAAICE message figures.
#include "apps/naa/mrsp.h"

#include <cstdio>

#include "dataplane/wire/bytes.h"

namespace roce::naa {

using wire::load_be32;
using wire::load_be64;
using wire::store_be32;
using wire::store_be64;

std::string_view to_string(MrspError e) {
  switch (e) {
    case MrspError::kNotEnoughMemory:
      return "not enough memory (address + size exceeds the memory boundary)";
    case MrspError::kInvalidAddress:
      return "invalid address (address is out of bounds)";
    case MrspError::kTooManyRegions:
      return "too many regions requested";
  }
  return "unknown MRSP error";
}

std::string_view to_string(DecodeError e) {
  switch (e) {
    case DecodeError::kTruncatedHeader:
      return "truncated header";
    case DecodeError::kBadType:
      return "bad message type";
    case DecodeError::kZeroCount:
      return "count is zero";
    case DecodeError::kTruncatedEntries:
      return "count larger than the message";
    case DecodeError::kBadFpgaAddress:
      return "FPGA address beyond 56 bits";
    case DecodeError::kTooManyEntries:
      return "more than 255 regions";
  }
  return "unknown decode error";
}

namespace {

DecodeResult failed(DecodeError e, std::string detail) {
  DecodeResult r;
  r.v.emplace<1>(e);
  r.detail = std::move(detail);
  return r;
}

}  // namespace

DecodeResult decode(std::span<const std::uint8_t> buf) {
  if (buf.size() < kHeaderSize)
    return failed(DecodeError::kTruncatedHeader,
                  "MRSP message of " + std::to_string(buf.size()) + " bytes, the header has 4");
  const std::uint8_t type = buf[0];
  const std::size_t count = buf[1];
  switch (static_cast<MsgType>(type)) {
    case MsgType::kError: {
      DecodeResult r;
      std::get<0>(r.v).emplace<ErrorMsg>(ErrorMsg{buf[1]});
      return r;
    }
    case MsgType::kAdvertiseRequest:
    case MsgType::kAdvertise: {
      const auto t = static_cast<MsgType>(type);
      if (count == 0)
        return failed(DecodeError::kZeroCount,
                      "MRSP message of type " + std::to_string(type) + " announces no region");
      const std::size_t need = encoded_size(t, count);
      if (buf.size() < need)
        return failed(DecodeError::kTruncatedEntries,
                      "MRSP message of type " + std::to_string(type) + " counts " +
                          std::to_string(count) + " regions (" + std::to_string(need) +
                          " bytes) but holds " + std::to_string(buf.size()) + " bytes");
      const std::uint8_t* p = buf.data() + kHeaderSize;
      // Built in place: no variant is moved (GCC 12 reports such moves as maybe-uninitialized).
      DecodeResult r;
      Message& msg = std::get<0>(r.v);
      if (t == MsgType::kAdvertiseRequest) {
        auto& m = msg.emplace<AdvertiseRequest>();
        m.regions.reserve(count);
        for (std::size_t i = 0; i < count; ++i, p += kAdvReqEntrySize) {
          const std::uint64_t info = load_be64(p);
          m.regions.push_back(AdvReqEntry{static_cast<std::uint8_t>(info >> 56),
                                          info & kMaxFpgaAddress, load_be64(p + 8),
                                          load_be32(p + 16), load_be32(p + 20)});
        }
        return r;
      }
      auto& m = msg.emplace<Advertise>();
      m.regions.reserve(count);
      for (std::size_t i = 0; i < count; ++i, p += kAdvEntrySize)
        m.regions.push_back(AdvEntry{load_be64(p), load_be32(p + 8), load_be32(p + 12)});
      return r;
    }
    default:
      break;
  }
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", type);
  return failed(DecodeError::kBadType, std::string("MRSP message of unknown type ") + hex);
}

namespace {

std::uint8_t* grow(std::vector<std::uint8_t>& out, std::size_t n) {
  const std::size_t at = out.size();
  out.resize(at + n, 0);
  return out.data() + at;
}

void header(std::uint8_t* p, MsgType t, std::uint8_t second) {
  p[0] = static_cast<std::uint8_t>(t);
  p[1] = second;
  p[2] = p[3] = 0;
}

}  // namespace

std::size_t encode(const AdvertiseRequest& m, std::vector<std::uint8_t>& out) {
  if (m.regions.empty() || m.regions.size() > kMaxCount) return 0;
  for (const auto& r : m.regions)
    if (r.fpga_addr > kMaxFpgaAddress) return 0;
  const std::size_t n = encoded_size(MsgType::kAdvertiseRequest, m.regions.size());
  std::uint8_t* p = grow(out, n);
  header(p, MsgType::kAdvertiseRequest, static_cast<std::uint8_t>(m.regions.size()));
  p += kHeaderSize;
  for (const auto& r : m.regions) {
    store_be64(p, (std::uint64_t{r.flags} << 56) | r.fpga_addr);
    store_be64(p + 8, r.addr);
    store_be32(p + 16, r.rkey);
    store_be32(p + 20, r.size);
    p += kAdvReqEntrySize;
  }
  return n;
}

std::size_t encode(const Advertise& m, std::vector<std::uint8_t>& out) {
  if (m.regions.empty() || m.regions.size() > kMaxCount) return 0;
  const std::size_t n = encoded_size(MsgType::kAdvertise, m.regions.size());
  std::uint8_t* p = grow(out, n);
  header(p, MsgType::kAdvertise, static_cast<std::uint8_t>(m.regions.size()));
  p += kHeaderSize;
  for (const auto& r : m.regions) {
    store_be64(p, r.addr);
    store_be32(p + 8, r.rkey);
    store_be32(p + 12, r.size);
    p += kAdvEntrySize;
  }
  return n;
}

std::size_t encode(const ErrorMsg& m, std::vector<std::uint8_t>& out) {
  header(grow(out, kHeaderSize), MsgType::kError, m.code);
  return kHeaderSize;
}

Layout layout_of(const AdvertiseRequest& m) {
  for (const auto& r : m.regions)
    if (r.flags & (kMrFlagInput | kMrFlagOutput)) return Layout::kUpstream;
  return Layout::kSeed;
}

std::string rpc_status_string(std::uint32_t s) {
  char b[96];
  switch (s) {
    case kRpcSuccess:
      return "success";
    case kRpcSocketNotAvailable:
      return "socket not available";
    case kRpcKernelTimeout:
      return "kernel (NAA application) timeout";
    case kRpcUnknownFunction:
      return "application error 0x10 (no kernel for the function code)";
    case kRpcBadReturnAddress:
      return "application error 0x11 (the return address names no region)";
    case kRpcBadParamCount:
      return "application error 0x12 (wrong number of parameters)";
    case kRpcBadParamSize:
      return "application error 0x13 (a parameter has the wrong size)";
    default:
      break;
  }
  if (s >= 0x03 && s <= 0x0f)
    std::snprintf(b, sizeof b, "reserved (0x%02x)", s);
  else if (s >= kRpcFirstAppError && s <= kRpcLastAppError)
    std::snprintf(b, sizeof b, "application error 0x%02x", s);
  else
    std::snprintf(b, sizeof b, "undefined status 0x%x", s);
  return b;
}

}  // namespace roce::naa
