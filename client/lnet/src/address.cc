/// @file
/// End-point addresses "NID:PID:Portal:TMID" ([r.m0.net.xprt.lnet.end-point-address]): parsing,
/// validation and the canonical form.

#include <roce/lnet.h>

namespace roce::lnet {
namespace {

bool fail(std::string* error, std::string msg) {
  if (error) *error = std::move(msg);
  return false;
}

/// A decimal number in [0, max], no sign, no spaces, no leading '+'.
bool number(std::string_view s, std::uint32_t max, std::uint32_t& out) {
  if (s.empty() || s.size() > 10) return false;
  std::uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v > max) return false;
  out = static_cast<std::uint32_t>(v);
  return true;
}

bool parse_ipv4(std::string_view s, Ipv4Addr& out) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const std::size_t dot = s.find('.');
    if ((i < 3) != (dot != std::string_view::npos)) return false;  // exactly three dots
    const std::string_view octet_s = s.substr(0, dot);
    std::uint32_t octet = 0;
    if (octet_s.size() > 3 || !number(octet_s, 255, octet)) return false;
    v = v << 8 | octet;
    if (i < 3) s.remove_prefix(dot + 1);
  }
  out.v = v;
  return true;
}

}  // namespace

std::optional<EndPoint> EndPoint::parse(std::string_view s, std::string* error) {
  EndPoint ep;
  std::string_view part[4];
  std::size_t n = 0;
  for (std::string_view rest = s;; ++n) {
    const std::size_t colon = rest.find(':');
    if (n == 4) {
      fail(error, "too many ':' fields (want NID:PID:Portal:TMID)");
      return std::nullopt;
    }
    part[n] = rest.substr(0, colon);
    if (colon == std::string_view::npos) {
      ++n;
      break;
    }
    rest.remove_prefix(colon + 1);
  }
  if (n != 4) {  // "All fields in the end point address must be specified"
    fail(error, "want 4 fields NID:PID:Portal:TMID, got " + std::to_string(n));
    return std::nullopt;
  }
  const std::size_t at = part[0].find('@');
  if (at == std::string_view::npos) {
    fail(error, "NID '" + std::string(part[0]) + "' lacks '@roce'");
    return std::nullopt;
  }
  if (!parse_ipv4(part[0].substr(0, at), ep.ip)) {
    fail(error, "NID address '" + std::string(part[0].substr(0, at)) + "' is not a.b.c.d");
    return std::nullopt;
  }
  std::string_view type = part[0].substr(at + 1);
  if (type.substr(0, 4) != "roce") {
    fail(error, "NID network type '" + std::string(type) + "' is not 'roce'");
    return std::nullopt;
  }
  type.remove_prefix(4);
  if (!type.empty() && !number(type, 65535, ep.net)) {
    fail(error, "NID network number '" + std::string(type) + "' is not 0..65535");
    return std::nullopt;
  }
  if (!number(part[1], kMaxPid, ep.pid)) {
    fail(error, "PID '" + std::string(part[1]) + "' is not 0.." + std::to_string(kMaxPid));
    return std::nullopt;
  }
  if (!number(part[2], kMaxPortal, ep.portal)) {
    fail(error, "portal '" + std::string(part[2]) + "' is not 0.." + std::to_string(kMaxPortal));
    return std::nullopt;
  }
  if (part[3] == "*") return ep;  // [r.m0.net.xprt.lnet.dynamic-address-assignment]
  std::uint32_t tmid = 0;
  if (!number(part[3], kMaxTmid, tmid)) {
    fail(error,
         "TMID '" + std::string(part[3]) + "' is not 0.." + std::to_string(kMaxTmid) + " or *");
    return std::nullopt;
  }
  ep.tmid = tmid;
  return ep;
}

std::string EndPoint::str() const {
  std::string s = std::to_string(ip.v >> 24) + '.' + std::to_string(ip.v >> 16 & 0xFF) + '.' +
                  std::to_string(ip.v >> 8 & 0xFF) + '.' + std::to_string(ip.v & 0xFF) + "@roce";
  if (net != 0) s += std::to_string(net);
  s += ':' + std::to_string(pid) + ':' + std::to_string(portal) + ':';
  s += tmid ? std::to_string(*tmid) : std::string("*");
  return s;
}

const char* to_string(QueueType q) {
  switch (q) {
    case QueueType::kMsgRecv:
      return "msg-recv";
    case QueueType::kMsgSend:
      return "msg-send";
    case QueueType::kPassiveBulkRecv:
      return "passive-bulk-recv";
    case QueueType::kPassiveBulkSend:
      return "passive-bulk-send";
    case QueueType::kActiveBulkRecv:
      return "active-bulk-recv";
    case QueueType::kActiveBulkSend:
      return "active-bulk-send";
    case QueueType::kCount_:
      break;
  }
  return "?";
}

}  // namespace roce::lnet
