/// @file
/// A command-line number of the examples' hand-parsed options: all of the text a decimal number
/// that fits in T, else nothing (the caller says which option was bad and exits 2).
#pragma once

#include <charconv>
#include <optional>
#include <string_view>

namespace roce::examples {

template <class T>
std::optional<T> number_arg(std::string_view v) {
  T out{};
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return out;
}

}  // namespace roce::examples
