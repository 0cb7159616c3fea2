/// @file
/// The incast benchmark's command line (roce-incast): options, one result
/// line, the JSON report (apps/switch/incast_cli.cc, docs/congestion.md).
#pragma once

namespace roce::fabric {

/// argv[0] is the program's (or subcommand's) name. Returns the exit status.
int incast_cli(int argc, char** argv);

}  // namespace roce::fabric
