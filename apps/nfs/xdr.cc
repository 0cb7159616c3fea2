/// @file
/// XDR encoder and decoder (xdr.h).
#include "apps/nfs/xdr.h"

namespace roce::nfs {

void XdrEncoder::u32(std::uint32_t v) {
  const std::uint8_t b[4] = {static_cast<std::uint8_t>(v >> 24), static_cast<std::uint8_t>(v >> 16),
                             static_cast<std::uint8_t>(v >> 8), static_cast<std::uint8_t>(v)};
  out_.insert(out_.end(), b, b + 4);
}

void XdrEncoder::u64(std::uint64_t v) {
  u32(static_cast<std::uint32_t>(v >> 32));
  u32(static_cast<std::uint32_t>(v));
}

void XdrEncoder::fixed(std::span<const std::uint8_t> b) {
  out_.insert(out_.end(), b.begin(), b.end());
  out_.insert(out_.end(), xdr_pad(b.size()), 0);
}

void XdrEncoder::opaque(std::span<const std::uint8_t> b) {
  u32(static_cast<std::uint32_t>(b.size()));
  fixed(b);
}

void XdrEncoder::string(std::string_view s) {
  opaque({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()});
}

void XdrEncoder::patch_u32(std::size_t at, std::uint32_t v) {
  if (at + 4 > out_.size()) return;
  out_[at] = static_cast<std::uint8_t>(v >> 24);
  out_[at + 1] = static_cast<std::uint8_t>(v >> 16);
  out_[at + 2] = static_cast<std::uint8_t>(v >> 8);
  out_[at + 3] = static_cast<std::uint8_t>(v);
}

std::uint32_t XdrDecoder::u32() {
  if (!ok_ || in_.size() - pos_ < 4) {
    ok_ = false;
    return 0;
  }
  const std::uint8_t* p = in_.data() + pos_;
  pos_ += 4;
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         p[3];
}

std::uint64_t XdrDecoder::u64() {
  const std::uint64_t hi = u32();
  return (hi << 32) | u32();
}

std::span<const std::uint8_t> XdrDecoder::fixed(std::size_t n) {
  const std::size_t padded = n + xdr_pad(n);
  if (!ok_ || n > in_.size() || in_.size() - pos_ < padded) {
    ok_ = false;
    return {};
  }
  const auto s = in_.subspan(pos_, n);
  pos_ += padded;
  return s;
}

std::span<const std::uint8_t> XdrDecoder::opaque(std::size_t max) {
  const std::uint32_t n = u32();
  if (n > max) {
    ok_ = false;
    return {};
  }
  return fixed(n);
}

std::string XdrDecoder::string(std::size_t max) {
  const auto b = opaque(max);
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

}  // namespace roce::nfs
