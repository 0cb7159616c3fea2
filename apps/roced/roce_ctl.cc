/// @file
/// roce-ctl: talks to a running roced. `roce-ctl counters` prints the appliance counters (read
/// from its Prometheus endpoint) as a table.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "apps/roced/metrics.h"

namespace po = boost::program_options;

namespace {

std::string http_get(const std::string& endpoint) {
  const auto [host, port] = roce::apps::split_host_port(endpoint);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1)
    throw std::runtime_error("'" + host + "' is not an IPv4 address");
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot connect to " + endpoint +
                             " (is roced running with counters.prometheus?)");
  }
  const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    throw std::runtime_error("write failed");
  }
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) resp.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const auto body = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.0 200", 0) != 0 || body == std::string::npos)
    throw std::runtime_error("unexpected answer from " + endpoint);
  return resp.substr(body + 4);
}

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint = "127.0.0.1:9464", command;
  po::options_description desc(
      "Usage: roce-ctl [--prometheus HOST:PORT] [--all] counters\n\nOptions");
  desc.add_options()("help,h", "print this help")(
      "prometheus,p", po::value(&endpoint)->default_value(endpoint), "roced counters endpoint")(
      "all,a", "also print counters that are zero")("command", po::value(&command), "counters");
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
  if (command != "counters") {
    std::cerr << "roce-ctl: unknown command '" << command << "' (known: counters)\n";
    return 2;
  }
  try {
    std::istringstream in(http_get(endpoint));
    std::map<std::string, std::map<std::string, std::string>> table;  // port -> name -> value
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const auto brace = line.find('{'), close = line.find('}');
      if (brace == std::string::npos || close == std::string::npos) continue;
      const std::string name = line.substr(5, brace - 5);  // strip "roce_"
      const std::string labels = line.substr(brace + 1, close - brace - 1);
      const auto pp = labels.find("port=\"");
      const std::string port =
          pp == std::string::npos ? "?" : labels.substr(pp + 6, labels.find('"', pp + 6) - pp - 6);
      const std::string value = line.substr(close + 2);
      if (value != "0" || vm.count("all")) table[port][name] = value;
    }
    std::printf("%-10s %-34s %16s\n", "port", "counter", "value");
    for (const auto& [port, rows] : table)
      for (const auto& [name, value] : rows)
        std::printf("%-10s %-34s %16s\n", port.c_str(), name.c_str(), value.c_str());
  } catch (const std::exception& e) {
    std::cerr << "roce-ctl: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
