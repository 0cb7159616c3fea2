/// @file
/// XDR (RFC 4506): big-endian 32-bit units, opaques padded to four bytes. An encoder that appends
/// to a byte vector and a decoder over a span that records its first failure instead of
/// throwing, so that a malformed message is one check at the end of a decode, never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace roce::nfs {

/// XDR's round-up of an opaque's length to a whole number of four-byte units.
constexpr std::size_t xdr_pad(std::size_t n) { return (4 - (n & 3)) & 3; }

class XdrEncoder {
 public:
  explicit XdrEncoder(std::vector<std::uint8_t>& out) : out_(out) {}

  void u32(std::uint32_t v);
  void u64(std::uint64_t v);
  void boolean(bool v) { u32(v ? 1 : 0); }
  /// Fixed-length opaque: the bytes and their padding, no length.
  void fixed(std::span<const std::uint8_t> b);
  /// Variable-length opaque: length, bytes, padding.
  void opaque(std::span<const std::uint8_t> b);
  void string(std::string_view s);
  /// The byte offset of the next item (for the position of a read chunk).
  std::size_t size() const { return out_.size(); }
  /// Overwrites the 32-bit unit at `at` (a length or count known only later).
  void patch_u32(std::size_t at, std::uint32_t v);

 private:
  std::vector<std::uint8_t>& out_;
};

class XdrDecoder {
 public:
  explicit XdrDecoder(std::span<const std::uint8_t> in) : in_(in) {}

  std::uint32_t u32();
  std::uint64_t u64();
  bool boolean() { return u32() != 0; }
  /// Fixed-length opaque of `n` bytes (and its padding); empty span on failure.
  std::span<const std::uint8_t> fixed(std::size_t n);
  /// Variable-length opaque of at most `max` bytes.
  std::span<const std::uint8_t> opaque(std::size_t max);
  std::string string(std::size_t max);

  /// False once anything was short or out of range; every later read returns zeros.
  bool ok() const { return ok_; }
  void fail() { ok_ = false; }
  std::size_t pos() const { return pos_; }
  std::size_t remaining() const { return ok_ ? in_.size() - pos_ : 0; }
  std::span<const std::uint8_t> rest() const { return ok_ ? in_.subspan(pos_) : in_.subspan(0, 0); }

 private:
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace roce::nfs
