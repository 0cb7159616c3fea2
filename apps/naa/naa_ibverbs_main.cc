/// @file
/// roce-naa-ibverbs: the same NAA server (naa_server.h) on rdma-core (ibverbs_stack.h), for any
/// RDMA device (an RNIC, Linux rxe). The interop test runs it in the rxe VM and drives it with
/// the appliance's host library.
#include <sched.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "apps/naa/ibverbs_stack.h"
#include "apps/naa/naa_server.h"

using namespace roce::naa;

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

[[noreturn]] void usage(int rc) {
  std::fprintf(rc ? stderr : stdout,
               "Usage: roce-naa-ibverbs [-p PORT] [--max-hosts N] [--memory-per-host MIB]\n"
               "                        [--max-regions N] [--host-idle-timeout S]\n"
               "                        [--functions CODE=KERNEL,...] [--exit-after N]\n"
               "                        [--timeout S] [-v]\n");
  std::exit(rc);
}

unsigned long number(const char* s, unsigned long lo, unsigned long hi, const char* what) {
  char* e = nullptr;
  const unsigned long v = std::strtoul(s, &e, 10);
  if (!*s || *e || v < lo || v > hi) {
    std::fprintf(stderr, "roce-naa-ibverbs: %s must be %lu..%lu\n", what, lo, hi);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  NaaConfig cfg;
  std::uint64_t exit_after = 0;
  double timeout = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "-h" || a == "--help") usage(0);
    if (a == "-v" || a == "--verbose") {
      cfg.verbose = true;
      continue;
    }
    if (!v) usage(2);
    ++i;
    if (a == "-p" || a == "--port")
      cfg.port = static_cast<std::uint16_t>(number(v, 1, 65535, "--port"));
    else if (a == "--max-hosts")
      cfg.max_hosts = static_cast<std::uint32_t>(number(v, 1, 4096, "--max-hosts"));
    else if (a == "--memory-per-host")
      cfg.memory_per_host = number(v, 1, 1ul << 20, "--memory-per-host") << 20;
    else if (a == "--max-regions")
      cfg.max_regions = static_cast<std::uint32_t>(number(v, 1, kMaxRegions, "--max-regions"));
    else if (a == "--host-idle-timeout")
      cfg.host_idle_timeout = static_cast<double>(number(v, 0, 1ul << 30, "--host-idle-timeout"));
    else if (a == "--exit-after")
      exit_after = number(v, 0, ~0ul, "--exit-after");
    else if (a == "--functions") {
      if (std::string err; !KernelRegistry::builtin().configure(v, err)) {
        std::fprintf(stderr, "roce-naa-ibverbs: --functions: %s\n", err.c_str());
        std::exit(2);
      }
      cfg.functions = v;
    } else if (a == "--timeout")
      timeout = static_cast<double>(number(v, 0, 1ul << 30, "--timeout"));
    else
      usage(2);
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  try {
    IbverbsStack stack;
    NaaServer server(stack, cfg, KernelRegistry::builtin());
    server.start();
    std::printf("roce-naa-ibverbs: listening on rdma_cm port %u (%u hosts, %llu MiB each)\n",
                cfg.port, cfg.max_hosts,
                static_cast<unsigned long long>(cfg.memory_per_host >> 20));
    std::fflush(stdout);
    const bool ok = server.run(g_stop, exit_after, timeout, [] { sched_yield(); });
    stack.idle(0.2);
    std::printf("%s", server.report().c_str());
    if (!ok) {
      std::fprintf(stderr, "roce-naa-ibverbs: timed out\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "roce-naa-ibverbs: %s\n", e.what());
    return 1;
  }
  return 0;
}
