/// @file
/// roce-conn-hostile: a hostile peer of a hosted service written on the connection layer
/// (<roce/conn.h>), attached to a roced. Each scenario is something a host on the segment may
/// do to a service; the test then checks that the service still serves a well-behaved client.
///   roce-conn-hostile SOCKET SERVER PORT abandon N
///     N times: connect, then give the connection up before the service's REP arrives (the
///     QP goes, so the REP is answered with a REJ): the service has accepted and must let the
///     connection's resources go when the REJ comes.
/// Exit status 0 when the scenario ran, 1 otherwise.
#include <roce/client.h>
#include <roce/conn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace roce;

namespace {

int fail(const std::string& m) {
  std::fprintf(stderr, "roce-conn-hostile: %s\n", m.c_str());
  return 1;
}

std::optional<Ipv4Addr> parse_ip(const std::string& s) {
  unsigned a, b, c, d;
  char tail;
  if (std::sscanf(s.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4 || a > 255 || b > 255 ||
      c > 255 || d > 255)
    return std::nullopt;
  return Ipv4Addr{(a << 24) | (b << 16) | (c << 8) | d};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: roce-conn-hostile SOCKET SERVER PORT abandon N\n");
    return 2;
  }
  const auto ip = parse_ip(argv[2]);
  const auto port = static_cast<std::uint16_t>(std::atoi(argv[3]));
  const std::string what = argv[4];
  const int n = std::atoi(argv[5]);
  if (!ip || what != "abandon" || n <= 0) return fail("bad arguments");
  auto ctx = client::Context::attach(argv[1]);
  if (!ctx) return fail(std::string("attach: ") + std::strerror(errno));
  conn::Endpoint ep(*ctx);
  for (int i = 0; i < n; ++i) {
    const conn::ConnId c = ep.connect(*ip, port, {});
    if (c == 0) return fail(std::string("connect: ") + std::strerror(errno));
    // Not yet established: the endpoint destroys the QP at once; the CM answers the REP with
    // a REJ (the QP cannot be moved to RTR any more).
    ep.disconnect(c);
  }
  // Let the REPs come and be refused.
  std::vector<conn::Event> ev;
  std::vector<conn::Completion> wc;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < end) {
    ep.poll(ev, wc);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::printf("roce-conn-hostile: %d connections abandoned before the REP\n", n);
  return 0;
}
