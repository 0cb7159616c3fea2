// eal.lcores placed on the CPUs the process may use (dataplane/port/eal.h lcores_arg): as
// configured when they are all allowed, else lcore@CPU in order (a container's cpuset under
// Kubernetes' static CPU manager), an error when there are more lcores than CPUs.
#include <gtest/gtest.h>
#include <sched.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "dataplane/port/eal.h"

namespace roce::port {
namespace {

// Runs `f` with this thread's affinity narrowed to `cpus`, then restores it.
template <typename F>
void with_affinity(const std::vector<unsigned>& cpus, F f) {
  cpu_set_t old, set;
  ASSERT_EQ(sched_getaffinity(0, sizeof old, &old), 0);
  CPU_ZERO(&set);
  for (unsigned c : cpus) CPU_SET(c, &set);
  ASSERT_EQ(sched_setaffinity(0, sizeof set, &set), 0);
  f();
  ASSERT_EQ(sched_setaffinity(0, sizeof old, &old), 0);
}

TEST(LcoresArg, AllowedLcoresStayAsConfigured) {
  const auto cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  std::string note;
  EXPECT_EQ(lcores_arg({cpus[0]}, note), "-l" + std::to_string(cpus[0]));
  EXPECT_TRUE(note.empty());
}

TEST(LcoresArg, LcoresOutsideTheCpusetRunOnItsCpusInOrder) {
  const auto cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  // The process is given only its last CPU; lcore 0 (configured) runs there, keeping its id.
  with_affinity({cpus.back()}, [&] {
    std::string note;
    const unsigned other = cpus.front();
    EXPECT_EQ(lcores_arg({other}, note),
              "--lcores=" + std::to_string(other) + "@" + std::to_string(cpus.back()));
    EXPECT_NE(note.find("not all CPUs this process may run on"), std::string::npos) << note;
    // Two lcores on one CPU: refused with both lists.
    try {
      lcores_arg({0, 1}, note);
      ADD_FAILURE() << "two lcores on one CPU accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("2 lcores, but this process may run on 1 CPU"),
                std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace roce::port
