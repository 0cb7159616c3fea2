/// @file
/// The DPDK environment (eal.h): the EAL's start and end, the lcore argument, and the clock.
// rte_intr_instance_alloc and its setters (eal_cleanup) are experimental in DPDK 22.11.
#define ALLOW_EXPERIMENTAL_API
#include "dataplane/port/eal.h"

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_interrupts.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace roce::port {

void throw_dpdk_error(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + rte_strerror(err < 0 ? -err : err));
}

namespace {
bool g_eal_up = false;

std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}
// After the EAL is up, now_ns() reads the TSC (a few ns, where clock_gettime cost a poll loop
// 5% of its time), scaled by DPDK's TSC frequency and joined to the steady clock at that
// moment, so that the clock stays continuous and monotonic across the switch.
struct TscClock {
  std::uint64_t tsc0 = 0, ns0 = 0;
  std::uint64_t mult = 0;  ///< ns per cycle, 32.32 fixed point
};
TscClock g_tsc;
std::atomic<bool> g_tsc_ready{false};
void start_tsc_clock() {
  const std::uint64_t hz = rte_get_tsc_hz();
  if (hz == 0 || g_tsc_ready.load()) return;
  g_tsc.mult =
      static_cast<std::uint64_t>((static_cast<unsigned __int128>(1'000'000'000) << 32) / hz);
  g_tsc.ns0 = steady_ns();
  g_tsc.tsc0 = rte_get_tsc_cycles();
  g_tsc_ready.store(true, std::memory_order_release);
}
}  // namespace

std::uint64_t now_ns() {
  if (!g_tsc_ready.load(std::memory_order_acquire)) return steady_ns();
  const std::uint64_t d = rte_get_tsc_cycles() - g_tsc.tsc0;
  return g_tsc.ns0 +
         static_cast<std::uint64_t>((static_cast<unsigned __int128>(d) * g_tsc.mult) >> 32);
}

std::string main_lcore_arg(int cpu) {
  if (cpu >= 0) return "-l" + std::to_string(cpu);
  std::string cpus;
  for (unsigned c : allowed_cpus()) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
  return "--lcores=0@(" + (cpus.empty() ? std::string("0") : cpus) + ")";
}

std::vector<unsigned> allowed_cpus() {
  std::vector<unsigned> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(static_cast<unsigned>(c));
  return cpus;
}

std::string lcores_arg(const std::vector<unsigned>& lcores, std::string& note) {
  const std::vector<unsigned> cpus = allowed_cpus();
  const auto allowed = [&](unsigned l) {
    return std::find(cpus.begin(), cpus.end(), l) != cpus.end();
  };
  const auto list = [](const std::vector<unsigned>& v) {
    std::string s;
    for (unsigned x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
  };
  note.clear();
  if (cpus.empty() || std::all_of(lcores.begin(), lcores.end(), allowed))
    return "-l" + list(lcores);
  if (lcores.size() > cpus.size())
    throw std::runtime_error("eal.lcores [" + list(lcores) + "]: " + std::to_string(lcores.size()) +
                             " lcores, but this process may run on " + std::to_string(cpus.size()) +
                             " CPU(s) only (" + list(cpus) + ")");
  std::string arg = "--lcores=";
  for (std::size_t i = 0; i < lcores.size(); ++i)
    arg += (i ? "," : "") + std::to_string(lcores[i]) + "@" + std::to_string(cpus[i]);
  note = "eal.lcores [" + list(lcores) + "] are not all CPUs this process may run on (" +
         list(cpus) + "): " + arg.substr(std::string("--lcores=").size()) + " (lcore@CPU)";
  return arg;
}

void eal_init(const std::vector<std::string>& args) {
  if (g_eal_up) return;
  std::vector<std::string> all{"roce"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = rte_eal_init(static_cast<int>(all.size()), argv.data());
  if (rc < 0) throw_dpdk_error("DPDK EAL initialisation failed", rte_errno);
  g_eal_up = true;
  start_tsc_clock();
}

namespace {
std::atomic<bool> g_intr_parked{false};
void park_intr_thread(void*) {
  g_intr_parked.store(true, std::memory_order_release);
  for (;;) ::pause();  // until the process ends
}

// The EAL's cleanup unmaps its heap, but its interrupt thread goes on and, at its next event,
// walks handles that live there (DPDK 22.11 frees memif's listener handle and the alarm timer's
// without unregistering them): SIGSEGV in that thread, seen at the end of memif runs. Before
// the cleanup the thread is parked in a callback of ours that never returns; nothing of the
// EAL is used after its cleanup, and the process ends with the thread parked.
void park_intr_thread_for_good() {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  rte_intr_handle* h = rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
  if (fd < 0 || h == nullptr || rte_intr_fd_set(h, fd) != 0 ||
      rte_intr_type_set(h, RTE_INTR_HANDLE_EXT) != 0 ||
      rte_intr_callback_register(h, park_intr_thread, nullptr) != 0)
    return;  // (the handle and the descriptor stay: the process is about to end)
  const std::uint64_t one = 1;
  if (::write(fd, &one, sizeof one) != sizeof one) return;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!g_intr_parked.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
}
}  // namespace

void eal_cleanup() {
  if (!g_eal_up) return;
  park_intr_thread_for_good();
  rte_eal_cleanup();
  g_eal_up = false;
}

}  // namespace roce::port
