/// @file
/// Reading a YAML configuration with errors that name the file, line and column: a YamlReader
/// wraps one mapping node, hands out typed values with range checks and, when it goes out of
/// scope, rejects every key nobody asked for (a typo never falls back to a default). Used by
/// the appliance configuration (config.cc) and by roce-perf's benchmark files; `Error` is the
/// exception each of them throws.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <exception>
#include <set>
#include <sstream>
#include <string>

namespace roce::ctl {

template <class Error>
class YamlReader {
 public:
  YamlReader(const YAML::Node& node, std::string origin, std::string path)
      : node_(node), origin_(std::move(origin)), path_(std::move(path)) {
    if (!node_.IsMap()) fail(node_, path_ + " must be a mapping");
  }
  ~YamlReader() noexcept(false) {
    if (std::uncaught_exceptions() || finished_) return;
    finish();
  }
  /// Rejects every key nobody asked for. A function that returns what it read calls this
  /// before its return statement: an exception from the destructor after the return value is
  /// built leaks that value (clang and gcc do not destroy it; found by tests/fuzz/config_yaml).
  void finish() {
    finished_ = true;
    for (const auto& kv : node_) {
      if (!kv.first.IsScalar()) fail(kv.first, "a key in " + path_ + " is not a string");
      const auto key = kv.first.as<std::string>();
      if (!used_.count(key)) fail(kv.first, "unknown key '" + key + "' in " + path_);
    }
  }
  YamlReader(const YamlReader&) = delete;
  YamlReader& operator=(const YamlReader&) = delete;

  bool has(const std::string& key) {
    used_.insert(key);
    return node_[key].IsDefined() && !node_[key].IsNull();
  }
  YAML::Node get(const std::string& key) {
    used_.insert(key);
    return node_[key];
  }
  std::string str(const std::string& key, const std::string& def) {
    if (!has(key)) return def;
    const YAML::Node n = get(key);
    if (!n.IsScalar()) fail(n, where(key) + " must be a string");
    return n.as<std::string>();
  }
  std::uint64_t uint(const std::string& key, std::uint64_t def, std::uint64_t lo,
                     std::uint64_t hi) {
    if (!has(key)) return def;
    return uint_of(get(key), where(key), lo, hi);
  }
  std::uint64_t uint_of(const YAML::Node& n, const std::string& what, std::uint64_t lo,
                        std::uint64_t hi) const {
    std::uint64_t v = 0;
    try {
      if (!n.IsScalar() || n.Scalar().empty() || n.Scalar()[0] == '-')
        throw YAML::Exception({}, "");
      v = n.as<std::uint64_t>();
    } catch (const YAML::Exception&) {
      fail(n, what + " must be an unsigned integer, not '" + scalar(n) + "'");
    }
    if (v < lo || v > hi)
      fail(n, what + " = " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
    return v;
  }
  double real(const std::string& key, double def, double lo, double hi) {
    if (!has(key)) return def;
    const YAML::Node n = get(key);
    double v = 0;
    try {
      if (!n.IsScalar()) throw YAML::Exception({}, "");
      v = n.as<double>();
    } catch (const YAML::Exception&) {
      fail(n, where(key) + " must be a number, not '" + scalar(n) + "'");
    }
    if (!(v >= lo && v <= hi))
      fail(n, where(key) + " is out of range [" + num(lo) + ", " + num(hi) + "]");
    return v;
  }
  bool boolean(const std::string& key, bool def) {
    if (!has(key)) return def;
    const YAML::Node n = get(key);
    try {
      if (!n.IsScalar()) throw YAML::Exception({}, "");
      return n.as<bool>();
    } catch (const YAML::Exception&) {
      fail(n, where(key) + " must be true or false, not '" + scalar(n) + "'");
    }
    return def;
  }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& msg) const {
    const YAML::Mark m = n.Mark();
    std::ostringstream os;
    os << origin_;
    if (m.line >= 0) os << ':' << m.line + 1 << ':' << m.column + 1;
    os << ": " << msg;
    throw Error(os.str());
  }
  std::string where(const std::string& key) const { return path_ + "." + key; }
  const std::string& origin() const { return origin_; }
  const YAML::Node& node() const { return node_; }

 private:
  static std::string scalar(const YAML::Node& n) {
    return n.IsScalar() ? n.Scalar() : "<not a scalar>";
  }
  static std::string num(double d) {
    std::ostringstream os;
    os << d;
    return os.str();
  }
  YAML::Node node_;
  std::string origin_;
  std::string path_;
  std::set<std::string> used_;
  bool finished_ = false;
};

}  // namespace roce::ctl
