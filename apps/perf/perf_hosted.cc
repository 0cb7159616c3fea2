/// @file
/// roce-perf's tests hosted in roced (`services: - kind: write_bw`, ..., `kind: coyote`;
/// runtime/service.h): each listens for a perftest/pingpong/Coyote client's out-of-band TCP
/// connection on the management address (or its own `listen_address`) and runs the RoCE test
/// against it, as perftest's own server would. A client is only served once it has spoken
/// (perftest's client sends first): a client that connects and stays silent waits in a bounded
/// queue and is dropped at its deadline, so it cannot hold the others up. The test itself runs
/// to completion on the port's poll loop (a `blocking` kind: the rest of the appliance runs
/// through env.background meanwhile), one at a time, as a perftest server serves one client.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <sstream>
#include <stdexcept>
#include <string>

#include "apps/perf/cli.h"
#include "apps/perf/coyote_proto.h"
#include "controlplane/address.h"
#include "controlplane/tcp.h"
#include "runtime/env.h"
#include "runtime/oob.h"
#include "runtime/service.h"

namespace roce::perf {

namespace {

/// A test service's options, parsed as roce-perf parses them; throws std::runtime_error.
Invocation parse_test_service(const ctl::ServiceConfig& sc) {
  std::vector<std::string> args{sc.kind};
  args.insert(args.end(), sc.args.begin(), sc.args.end());
  int help = 0;
  std::ostringstream ignored;
  Invocation out;
  try {
    auto inv = parse_command_line(args, ignored, help);
    if (!inv) throw CliError("--help is not an option of a service");
    out = *inv;
  } catch (const CliError& e) {
    throw std::runtime_error(e.what());
  }
  if (!out.opts.server.empty())
    throw std::runtime_error("a service is a server; its args name no peer");
  // `selective_repeat: true` (perftest's tests), as --selective-repeat in args: the server
  // accepts a roce-perf client's offer; the port must allow it (transport.selective_repeat).
  if (sc.has("selective_repeat")) {
    if (out.pingpong || out.coyote)
      throw std::runtime_error(sc.options.at("selective_repeat").where +
                               ": selective repeat is offered by perftest's tests only");
    out.opts.selective_repeat = sc.option_bool("selective_repeat", false);
  }
  return out;
}

class TestService final : public runtime::HostedService {
 public:
  static constexpr std::size_t kMaxWaiting = 8;

  explicit TestService(runtime::ServiceEnv& env)
      : env_(env), sc_(env.config), inv_(parse_test_service(env.config)) {}
  ~TestService() override { stop(); }

  void start() override {
    listen_fd_ = ctl::tcp_listen(sc_.listen_address, sc_.listen_port, 16);  // roced names us
    ::fcntl(listen_fd_, F_SETFL, O_NONBLOCK);
    std::printf("  service %s: TCP %u on %s (out-of-band exchange), RoCE on port %s\n",
                sc_.kind.c_str(), sc_.listen_port, ctl::to_string(sc_.listen_address).c_str(),
                sc_.port.c_str());
    std::fflush(stdout);
  }

  // Accepts new clients, drops silent ones past their deadline, and runs the test of the
  // first client that has spoken. Looks for clients once a millisecond.
  bool poll() override {
    const std::uint64_t now = port::now_ns();
    if (listen_fd_ < 0 || now < next_accept_) return false;
    next_accept_ = now + 1'000'000;
    // New clients join the queue; beyond its bound they are refused at once.
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK);
      if (fd < 0) break;
      if (waiting_.size() >= kMaxWaiting) {
        ++refused_busy_;
        ::close(fd);
        std::printf("roced: service %s: %zu clients already waiting, one refused\n",
                    sc_.kind.c_str(), waiting_.size());
        continue;
      }
      const auto wait_ns = static_cast<std::uint64_t>(inv_.opts.timeout_s * 1e9);
      waiting_.push_back({fd, now + wait_ns});
    }
    // The first client that has spoken (or hung up: the test reports it) is served; silent
    // ones past their deadline go.
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      pollfd p{it->fd, POLLIN, 0};
      if (::poll(&p, 1, 0) > 0) {
        const int fd = it->fd;
        waiting_.erase(it);
        run(fd);
        return true;  // one test per call: roced's loop keeps the rest of the appliance going
      }
      if (now >= it->deadline_ns) {
        ++dropped_silent_;
        ::close(it->fd);
        std::printf("roced: service %s: a client sent nothing within %.0f s, dropped\n",
                    sc_.kind.c_str(), inv_.opts.timeout_s);
        it = waiting_.erase(it);
        continue;
      }
      ++it;
    }
    std::fflush(stdout);
    return false;
  }

  void stop() override {
    for (const auto& w : waiting_) ::close(w.fd);
    waiting_.clear();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
  }

  std::string report() const override {
    char line[160];
    std::snprintf(line, sizeof line,
                  "  service %s (TCP %u): %u runs, %u failed, %u silent clients dropped\n",
                  sc_.kind.c_str(), sc_.listen_port, runs_, failures_, dropped_silent_);
    return line;
  }

 private:
  struct Waiting {
    int fd = -1;
    std::uint64_t deadline_ns = 0;
  };

  // One test against a client that has spoken (owns `fd`); the other ports and the counters
  // keep going through env.background.
  void run(int fd) {
    runtime::Env env(env_.engine, env_.loop, env_.ipv4, env_.background);
    env.cm_connections = env_.cm_connections;
    if (env_.open_card) env.open_card = env_.open_card;
    std::printf("roced: service %s on port %s, TCP %u: a client connected\n", sc_.kind.c_str(),
                sc_.port.c_str(), sc_.listen_port);
    std::fflush(stdout);
    ++runs_;
    try {
      runtime::Oob oob(env, fd, inv_.opts.timeout_s);
      perf::run(inv_, env, oob);
      std::printf("roced: service %s: done\n", sc_.kind.c_str());
    } catch (const runtime::TestFailure& e) {
      ++failures_;
      std::printf("roced: service %s failed: %s\n", sc_.kind.c_str(), e.what());
    } catch (const runtime::HostShutdown&) {
      std::printf("roced: service %s abandoned\n", sc_.kind.c_str());
    }
    std::fflush(stdout);
  }

  runtime::ServiceEnv& env_;
  const ctl::ServiceConfig& sc_;
  Invocation inv_;
  int listen_fd_ = -1;
  std::uint64_t next_accept_ = 0;
  std::deque<Waiting> waiting_;  ///< accepted, not yet spoken (at most kMaxWaiting)
  unsigned runs_ = 0, failures_ = 0, dropped_silent_ = 0, refused_busy_ = 0;
};

/// `port`: the tool's own default (perftest's and rdma-core's 18515, Coyote's 18488).
runtime::ServiceKind test_kind(const char* name, const char* what, unsigned port = 18515) {
  runtime::ServiceKind k;
  k.name = name;
  k.description = std::string(what) + " server (args: roce-perf's options of the test)";
  k.default_port = static_cast<std::uint16_t>(port);
  k.blocking = true;
  if (std::string(name).find('_') != std::string::npos &&
      std::string(name).find("pingpong") == std::string::npos)
    k.keys.push_back({"selective_repeat",
                      "accept a roce-perf client's selective repeat offer (as --selective-repeat "
                      "in args; needs transport.selective_repeat: true); default false"});
  k.check = [](const ctl::ServiceConfig& sc) { parse_test_service(sc); };
  k.make = [](runtime::ServiceEnv& env) -> std::unique_ptr<runtime::HostedService> {
    return std::make_unique<TestService>(env);
  };
  return k;
}

const runtime::RegisterService kTests[] = {
    runtime::RegisterService{test_kind("write_bw", "perftest's ib_write_bw")},
    runtime::RegisterService{test_kind("read_bw", "perftest's ib_read_bw")},
    runtime::RegisterService{test_kind("send_bw", "perftest's ib_send_bw")},
    runtime::RegisterService{test_kind("atomic_bw", "perftest's ib_atomic_bw")},
    runtime::RegisterService{test_kind("write_lat", "perftest's ib_write_lat")},
    runtime::RegisterService{test_kind("read_lat", "perftest's ib_read_lat")},
    runtime::RegisterService{test_kind("send_lat", "perftest's ib_send_lat")},
    runtime::RegisterService{test_kind("atomic_lat", "perftest's ib_atomic_lat")},
    runtime::RegisterService{test_kind("rc_pingpong", "rdma-core's ibv_rc_pingpong")},
    runtime::RegisterService{test_kind("ud_pingpong", "rdma-core's ibv_ud_pingpong")},
    runtime::RegisterService{test_kind("srq_pingpong", "rdma-core's ibv_srq_pingpong")},
    runtime::RegisterService{
        test_kind("coyote", "Coyote's RDMA benchmark (its example 8)", coyote::kDefaultPort)},
};

}  // namespace

}  // namespace roce::perf
