/// @file
/// What roce-perf's rdma_cm tools (rping, ucmatose, udaddy) share: the options of their command
/// lines, and the whole main of the cmatose family (ucmatose, udaddy).
#pragma once

#include <boost/program_options.hpp>
#include <functional>
#include <string>

#include "runtime/env.h"
#include "runtime/link.h"

namespace roce::perf {

/// Parses argv[1..] by `d` into `vm` (throws program_options::error); with --help prints `d`
/// and returns false: the tool then exits 0.
bool parse_args(int argc, char** argv, const boost::program_options::options_description& d,
                boost::program_options::variables_map& vm);

/// The options every tool shares: the link's (runtime::LinkFlags), --timeout and --json.
struct ToolFlags : runtime::LinkFlags {
  double timeout_s = 60;
  std::string json;

  void add_to(boost::program_options::options_description& d);
};

/// The flags of librdmacm's cmatose family (ucmatose, udaddy).
struct CmatoseOpts {
  ToolFlags lf;
  std::string server;  ///< -s: the server's address (we are the client); empty: we serve
  std::string bind;    ///< -b
  unsigned port = 7471, connections = 1, count = 10, size = 100;
};

/// What a cmatose-family test reports: the messages each way per connection as printed, and
/// as written to the JSON file, and the seconds the test took.
struct CmatoseResult {
  unsigned printed = 0, recorded = 0;
  double seconds = 0;
};

/// The description of one cmatose-family tool for cmatose_main.
struct CmatoseTool {
  const char* name;          ///< "ucmatose"
  const char* usage;         ///< the usage text of --help
  const char* size_help;     ///< the help of -S
  const char* port_help;     ///< the help of -p
  unsigned port;             ///< default rdma_cm port
  unsigned max_size;         ///< the largest -S
  const char* max_size_why;  ///< the error when -S is larger
  /// Runs the test on `env` (server or client by `o.server`), times it, and keeps polling a
  /// moment longer while its CM agent still exists (a peer's repeated MAD is answered).
  std::function<CmatoseResult(runtime::Env& env, const CmatoseOpts& o)> run;
};

/// The whole main of a cmatose-family tool: its command line, the test, its report.
int cmatose_main(int argc, char** argv, const CmatoseTool& tool);

}  // namespace roce::perf
