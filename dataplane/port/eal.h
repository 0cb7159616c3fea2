/// @file
/// The DPDK environment of a process: the EAL's start and end, the EAL argument that places a
/// poll loop's lcore, and the clock every engine and poll loop reads (now_ns), which the EAL's
/// start switches to the TSC. Once per process; the ports (dpdk_port.h) and poll loops
/// (poll_loop.h) need it started.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace roce::port {

/// Starts the DPDK EAL once per process. `args` are EAL arguments without the program name.
/// Throws std::runtime_error with DPDK's reason on failure.
void eal_init(const std::vector<std::string>& args);
void eal_cleanup();
/// The EAL argument that places a single-lcore tool's poll loop: "-l CPU" pins it to `cpu`;
/// a negative `cpu` lets it run on any CPU the process may use ("--lcores=0@(...)"). Two tools
/// on one host that both pin CPU 0 take turns at the scheduler's pace (milliseconds).
std::string main_lcore_arg(int cpu);

/// The EAL argument that places a daemon's lcores (eal.lcores). When every lcore is a CPU this
/// process may run on, "-l 0,1,..." as configured. Otherwise (a container's cpuset, as under
/// Kubernetes' static CPU manager, where the CPUs are known only once scheduled) the lcores keep
/// their numbers and run on the allowed CPUs in order: "--lcores=0@4,1@5", and `note` says so.
/// More lcores than allowed CPUs: throws std::runtime_error with both lists.
std::string lcores_arg(const std::vector<unsigned>& lcores, std::string& note);
/// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<unsigned> allowed_cpus();

/// Monotonic nanoseconds (the engine's clock): the steady clock until eal_init(), the TSC
/// after it, joined so that it never goes back.
std::uint64_t now_ns();

/// Throws std::runtime_error "`what`: DPDK's reason for `err`" (an errno, either sign; for the
/// port layer's failures).
[[noreturn]] void throw_dpdk_error(const std::string& what, int err);

}  // namespace roce::port
