/// @file
/// roce-ctl: talks to a running roced. `roce-ctl counters` prints the appliance counters (read
/// from its Prometheus endpoint) as a table; `roce-ctl clients` the attached client processes
/// and what each holds (docs/client-api.md); `roce-ctl rates` the QPs congestion control holds
/// below their maximum rate (docs/congestion.md).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "apps/roced/metrics.h"

namespace po = boost::program_options;

namespace {

// Whatever the server at `endpoint` does, roce-ctl waits at most kHttpDeadline for the whole
// answer and keeps at most kMaxAnswer bytes of it (a metrics endpoint may be anyone's program).
constexpr int kHttpDeadlineMs = 10000;
constexpr std::size_t kMaxAnswer = 16u << 20;

std::string http_get(const std::string& endpoint) {
  const auto [host, port] = roce::apps::split_host_port(endpoint);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1)
    throw std::runtime_error("'" + host + "' is not an IPv4 address");
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kHttpDeadlineMs);
  // Waits for `events` on fd until the deadline: false when it passed.
  auto wait = [&](short events) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return false;
      pollfd pf{fd, events, 0};
      const int n = ::poll(&pf, 1, static_cast<int>(left));
      if (n > 0) return true;
      if (n < 0 && errno != EINTR) return false;
    }
  };
  auto fail = [&](const std::string& what) {
    ::close(fd);
    throw std::runtime_error(what);
  };
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    int err = errno;
    socklen_t len = sizeof err;
    if (err == EINPROGRESS && wait(POLLOUT))
      err = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : errno;
    if (err != 0)
      fail("cannot connect to " + endpoint + " (is roced running with counters.prometheus?)");
  }
  const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
  for (std::size_t off = 0; off < req.size();) {
    const ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n > 0)
      off += static_cast<std::size_t>(n);
    else if (n < 0 && (errno == EAGAIN || errno == EINTR) && wait(POLLOUT))
      continue;
    else
      fail("write to " + endpoint + " failed");
  }
  std::string resp;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if ((errno == EAGAIN || errno == EINTR) && wait(POLLIN)) continue;
      fail(errno == EAGAIN ? "no complete answer from " + endpoint + " within " +
                                 std::to_string(kHttpDeadlineMs / 1000) + " s"
                           : "read from " + endpoint + " failed");
    }
    if (resp.size() + static_cast<std::size_t>(n) > kMaxAnswer)
      fail("answer from " + endpoint + " too long (over " + std::to_string(kMaxAnswer >> 20) +
           " MiB)");
    resp.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto body = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.0 200", 0) != 0 || body == std::string::npos)
    throw std::runtime_error("unexpected answer from " + endpoint);
  return resp.substr(body + 4);
}

// `s` with control characters (a hostile endpoint's terminal escapes) shown as '?'.
std::string printable(std::string s) {
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return s;
}

// The value after a series' closing brace ("} 42"), empty when the line ends there.
std::string value_after(const std::string& line, std::size_t close) {
  return close + 2 <= line.size() ? line.substr(close + 2) : std::string();
}

// The value of label `key` in `labels` (a="1",b="2"), or "?".
std::string label(const std::string& labels, const std::string& key) {
  const auto p = labels.find(key + "=\"");
  if (p == std::string::npos) return "?";
  const auto b = p + key.size() + 2;
  return labels.substr(b, labels.find('"', b) - b);
}

// roce_attach_client_<kind>{...,client="3",...} value -> one row per client.
int print_clients(const std::string& text) {
  std::istringstream in(text);
  struct Row {
    std::string port, pid, uid, lcore;
    std::map<std::string, std::string> v;
  };
  std::map<unsigned, Row> rows;
  std::string line;
  const std::string prefix = "roce_attach_client_";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const auto brace = line.find('{'), close = line.find('}');
    if (brace == std::string::npos || close == std::string::npos) continue;
    const std::string labels = line.substr(brace + 1, close - brace - 1);
    Row& r = rows[static_cast<unsigned>(std::stoul(label(labels, "client")))];
    r.port = label(labels, "port");
    r.pid = label(labels, "pid");
    r.uid = label(labels, "uid");
    r.lcore = label(labels, "lcore");
    r.v[line.substr(prefix.size(), brace - prefix.size())] = value_after(line, close);
  }
  std::printf("%-7s %-8s %-6s %-10s %-6s %6s %6s %6s %14s\n", "client", "pid", "uid", "port",
              "lcore", "qps", "mrs", "cqs", "memory_bytes");
  for (auto& [id, r] : rows)
    std::printf("%-7u %-8s %-6s %-10s %-6s %6s %6s %6s %14s\n", id, r.pid.c_str(), r.uid.c_str(),
                r.port.c_str(), r.lcore.c_str(), r.v["qps"].c_str(), r.v["mrs"].c_str(),
                r.v["cqs"].c_str(), r.v["memory_bytes"].c_str());
  return 0;
}

// roce_lnet_queue_<counter>{tm="...",queue="..."} value (the metrics endpoint of a program
// using the messaging API, roce::lnet::MetricsEndpoint) -> one row per transfer machine and
// queue, the columns of Motr's m0_net_qstats; then each Tm's connection counters.
int print_lnet(const std::string& text, bool all) {
  std::istringstream in(text);
  std::map<std::pair<std::string, std::string>, std::map<std::string, std::string>> rows;
  std::map<std::string, std::map<std::string, std::string>> tms;
  std::string line;
  const std::string qp = "roce_lnet_queue_", tp = "roce_lnet_";
  while (std::getline(in, line)) {
    if (line.rfind(tp, 0) != 0) continue;
    const auto brace = line.find('{'), close = line.find('}');
    if (brace == std::string::npos || close == std::string::npos) continue;
    const std::string labels = line.substr(brace + 1, close - brace - 1);
    const std::string value = value_after(line, close);
    if (line.rfind(qp, 0) == 0)
      rows[{label(labels, "tm"), label(labels, "queue")}]
          [line.substr(qp.size(), brace - qp.size())] = value;
    else
      tms[label(labels, "tm")][line.substr(tp.size(), brace - tp.size())] = value;
  }
  std::printf("%-28s %-18s %8s %8s %10s %10s %14s %10s %14s\n", "tm", "queue", "adds", "dels",
              "successes", "failures", "bytes", "max_bytes", "time_in_queue_s");
  for (auto& [key, v] : rows) {
    if (!all && v["adds_total"] == "0" && v["failures_total"] == "0") continue;
    std::printf("%-28s %-18s %8s %8s %10s %10s %14s %10s %14s\n", printable(key.first).c_str(),
                printable(key.second).c_str(), printable(v["adds_total"]).c_str(),
                printable(v["dels_total"]).c_str(), printable(v["successes_total"]).c_str(),
                printable(v["failures_total"]).c_str(), printable(v["bytes_total"]).c_str(),
                printable(v["max_bytes"]).c_str(),
                printable(v["time_in_queue_seconds_total"]).c_str());
  }
  for (auto& [tm, v] : tms)
    for (auto& [name, value] : v)
      if (all || value != "0")
        std::printf("%-28s %-34s %16s\n", printable(tm).c_str(), printable(name).c_str(),
                    printable(value).c_str());
  return 0;
}

// roce_cc_qp_rate_mbps{...,port="p0",qpn="17"} value -> one row per QP congestion control
// holds below its maximum rate, lowest first; then each port's count of them.
int print_rates(const std::string& text) {
  std::istringstream in(text);
  struct Row {
    std::string port, qpn;
    unsigned long rate = 0;
  };
  std::vector<Row> rows;
  std::map<std::string, std::string> limited;
  std::string line;
  const std::string series = "roce_cc_qp_rate_mbps{", count = "roce_cc_limited_qps_now{";
  while (std::getline(in, line)) {
    const bool is_rate = line.rfind(series, 0) == 0;
    if (!is_rate && line.rfind(count, 0) != 0) continue;
    const auto brace = line.find('{'), close = line.find('}');
    if (brace == std::string::npos || close == std::string::npos) continue;
    const std::string labels = line.substr(brace + 1, close - brace - 1);
    const std::string value = value_after(line, close);
    if (!is_rate) {
      limited[label(labels, "port")] = value;
      continue;
    }
    Row r{label(labels, "port"), label(labels, "qpn"), 0};
    try {
      r.rate = std::stoul(value);
    } catch (const std::exception&) {
      continue;  // not a number: not roced's
    }
    rows.push_back(std::move(r));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.rate < b.rate; });
  std::printf("%-10s %10s %12s\n", "port", "qpn", "rate_mbps");
  for (const Row& r : rows)
    std::printf("%-10s %10s %12lu\n", printable(r.port).c_str(), printable(r.qpn).c_str(), r.rate);
  if (limited.empty()) std::printf("(no port runs congestion control)\n");
  for (const auto& [port, n] : limited)
    std::printf("port %s: %s QPs below their maximum rate\n", printable(port).c_str(),
                printable(n).c_str());
  return 0;
}

// roce_sr_qp{...,port="p0",qpn="17"} 1 -> one row per QP running selective repeat; then each
// port's count of them (roce_sr_qps_now).
int print_sr(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::pair<std::string, std::string>> rows;
  std::map<std::string, std::string> count;
  std::string line;
  const std::string series = "roce_sr_qp{", now = "roce_sr_qps_now{";
  while (std::getline(in, line)) {
    const bool is_qp = line.rfind(series, 0) == 0;
    if (!is_qp && line.rfind(now, 0) != 0) continue;
    const auto brace = line.find('{'), close = line.find('}');
    if (brace == std::string::npos || close == std::string::npos) continue;
    const std::string labels = line.substr(brace + 1, close - brace - 1);
    if (is_qp)
      rows.emplace_back(label(labels, "port"), label(labels, "qpn"));
    else
      count[label(labels, "port")] = value_after(line, close);
  }
  std::printf("%-10s %10s %s\n", "port", "qpn", "loss recovery");
  for (const auto& [port, qpn] : rows)
    std::printf("%-10s %10s selective repeat\n", printable(port).c_str(), printable(qpn).c_str());
  for (const auto& [port, n] : count)
    std::printf("port %s: %s QPs run selective repeat, the others go-back-N\n",
                printable(port).c_str(), printable(n).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint = "127.0.0.1:9464", command;
  po::options_description desc(
      "Usage: roce-ctl [--prometheus HOST:PORT] [--all] counters|clients|rates|sr|lnet\n\n"
      "rates: each QP congestion control holds below its maximum rate, lowest first\n"
      "sr: each QP running selective repeat (negotiated per connection in the CM's ECE)\n"
      "lnet: the per-queue statistics of a messaging-API program's transfer machines, from\n"
      "its own endpoint (e.g. roce-lnet-ping --metrics HOST:PORT)\n\nOptions");
  desc.add_options()("help,h", "print this help")(
      "prometheus,p", po::value(&endpoint)->default_value(endpoint), "roced counters endpoint")(
      "all,a", "also print counters that are zero")("command", po::value(&command),
                                                    "counters, clients, rates, sr or lnet");
  po::positional_options_description pos;
  pos.add("command", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "roce-ctl: " << e.what() << "\n(try --help)\n";
    return 2;
  }
  if (vm.count("help") || command.empty()) {
    std::cout << desc << '\n';
    return command.empty() && !vm.count("help") ? 2 : 0;
  }
  if (command != "counters" && command != "clients" && command != "lnet" && command != "rates" &&
      command != "sr") {
    std::cerr << "roce-ctl: unknown command '" << command
              << "' (known: counters, clients, lnet, rates, sr)\n";
    return 2;
  }
  try {
    if (command == "clients") return print_clients(http_get(endpoint));
    if (command == "lnet") return print_lnet(http_get(endpoint), vm.count("all") != 0);
    if (command == "rates") return print_rates(http_get(endpoint));
    if (command == "sr") return print_sr(http_get(endpoint));
    std::istringstream in(http_get(endpoint));
    std::map<std::string, std::map<std::string, std::string>> table;  // port -> name -> value
    std::map<std::string, std::string> rnic;  // name -> an RNIC's name for it (its HELP line)
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("# HELP roce_", 0) == 0) {
        const auto sp = line.find(' ', 12), at = line.find("; RNIC: ");
        if (sp != std::string::npos && at != std::string::npos)
          rnic[line.substr(12, sp - 12)] = line.substr(at + 8);
        continue;
      }
      if (line.empty() || line[0] == '#' || line.find("client=\"") != std::string::npos ||
          line.find("qpn=\"") != std::string::npos)
        continue;  // per-client series: roce-ctl clients; per-QP rates: roce-ctl rates
      const auto brace = line.find('{'), close = line.find('}');
      if (brace == std::string::npos || close == std::string::npos) continue;
      const std::string name = line.substr(5, brace - 5);  // strip "roce_"
      const std::string labels = line.substr(brace + 1, close - brace - 1);
      const auto pp = labels.find("port=\"");
      const std::string port =
          pp == std::string::npos ? "?" : labels.substr(pp + 6, labels.find('"', pp + 6) - pp - 6);
      const std::string value = value_after(line, close);
      if (value != "0" || vm.count("all")) table[port][name] = value;
    }
    std::printf("%-10s %-34s %16s  %s\n", "port", "counter", "value", "RNIC's name (mlx5, rxe)");
    for (const auto& [port, rows] : table)
      for (const auto& [name, value] : rows) {
        const auto r = rnic.find(name);
        std::printf("%-10s %-34s %16s%s%s\n", port.c_str(), name.c_str(), value.c_str(),
                    r == rnic.end() ? "" : "  ",
                    r == rnic.end() ? "" : printable(r->second).c_str());
      }
  } catch (const std::exception& e) {
    std::cerr << "roce-ctl: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
