/// @file
/// `roce-perf coyote`: Coyote's RDMA benchmark (the seed's example 8, Coyote's
/// examples/08_perf_rdma), spoken with its flags, its TCP exchange (coyote_proto.h), its traffic
/// and its output, so that its numbers compare with Coyote's:
///
///   roce-perf coyote [--tcpaddr|-t SERVER] [--operation|-o 1|0] [--min_size|-x N]
///                    [--max_size|-X N] [--reps_thr|-r N] (--iface IF | --attach SOCK) ...
///
/// For each size from -x to -X, doubling: a throughput run (the client issues a batch of 64
/// operations; WRITE: the server, once all have arrived, writes the same number back; READ: the
/// server is passive) and a latency run (the same with one operation), each repeated -r times
/// after a barrier on the TCP connection. The times are averaged; WRITE's are halved (two
/// ways). Counting the WRITEs that arrive needs the engine's responder state (its MSN), so
/// WRITE runs in-process or hosted by roced, not --attach; READ runs everywhere.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "apps/perf/cli.h"

namespace roce::perf {

/// Parses `coyote ...` (args[0] is "coyote"); nullopt after printing the help.
std::optional<Invocation> parse_coyote_command_line(const std::vector<std::string>& args,
                                                    std::ostream& out, int& help_status);

}  // namespace roce::perf
