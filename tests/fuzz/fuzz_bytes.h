/// @file
/// Reading a fuzzer's input as a stream of little-endian fields (a reader that returns zeros
/// once the input is used up), and writing seeds in the same form.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace roce::fuzz {

class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }
  std::size_t left() const { return n_; }
  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(take(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(take(4)); }
  std::uint64_t u64() { return take(8); }
  /// Up to `n` bytes (fewer at the end of the input).
  std::span<const std::uint8_t> bytes(std::size_t n) {
    n = std::min(n, n_);
    std::span<const std::uint8_t> s(p_, n);
    p_ += n;
    n_ -= n;
    return s;
  }

 private:
  std::uint64_t take(unsigned len) {
    std::uint64_t v = 0;
    for (unsigned i = 0; i < len && n_ > 0; ++i, ++p_, --n_) v |= std::uint64_t{*p_} << (8 * i);
    return v;
  }
  const std::uint8_t* p_;
  std::size_t n_;
};

class Writer {
 public:
  Writer& u8(std::uint64_t v) { return put(v, 1); }
  Writer& u16(std::uint64_t v) { return put(v, 2); }
  Writer& u32(std::uint64_t v) { return put(v, 4); }
  Writer& u64(std::uint64_t v) { return put(v, 8); }
  Writer& bytes(std::span<const std::uint8_t> b) {
    out_.insert(out_.end(), b.begin(), b.end());
    return *this;
  }
  const std::vector<std::uint8_t>& data() const { return out_; }

 private:
  Writer& put(std::uint64_t v, unsigned len) {
    for (unsigned i = 0; i < len; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  std::vector<std::uint8_t> out_;
};

}  // namespace roce::fuzz
