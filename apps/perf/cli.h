/// @file
/// roce-perf's command line: which test, with which options. roce-perf parses its argv with it;
/// roced parses the options of the services it hosts with it.
#pragma once

#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/perf/tools.h"

namespace roce::perf {

struct CliError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Invocation {
  std::string test;
  bool pingpong = false;
  Pingpong pp = Pingpong::kRc;
  Verb verb = Verb::kWrite;
  Mode mode = Mode::kBw;
  Opts opts;
  bool coyote = false;  ///< Coyote's benchmark (coyote.cc), with its own flags
};

/// `args[0]` is the test (write_bw, rc_pingpong, ...), then its options and the optional server.
/// Prints the help to `out` and returns nullopt (with the exit status in `help_status`) when
/// asked for it or given nothing; throws CliError on bad usage.
std::optional<Invocation> parse_command_line(const std::vector<std::string>& args,
                                             std::ostream& out, int& help_status);
bool is_test_name(const std::string& name);

/// Runs a parsed test on its own dataplane (roce-perf), or on a lent one with an accepted
/// exchange connection (roced).
int run(const Invocation& inv);
int run(const Invocation& inv, runtime::Env& env, runtime::Oob& oob);

}  // namespace roce::perf
