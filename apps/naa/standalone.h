/// @file
/// The NAA's processes on a DPDK port of their own (roce-naa, the host library in-process):
/// EAL, port, engine and poll loop, and libroce's in-process backend on them. The one place in
/// apps/naa that stands on apps/perf's Env (which is moving to the shared runtime).
#pragma once

#include <roce/client.h>

#include <memory>
#include <string>

#include "apps/naa/conn_stack.h"
#include "apps/perf/link_text.h"

namespace roce::naa {

/// The link of a process with its own port: roce-naa's flags, NAAICE_ROCE's "key=value,..."
/// (apps/perf/link_text.h).
using LinkConfig = perf::LinkText;
/// Parses NAAICE_ROCE-style text into `l`; false and `err` when it is not a link.
bool parse_link(const std::string& text, LinkConfig& l, std::string& err);

class Standalone {
 public:
  /// Own EAL, port, engine and poll loop (throws std::runtime_error on a bad link).
  explicit Standalone(const LinkConfig& link);
  /// The Context first, then the port; the EAL stays (it cannot start twice in a process).
  ~Standalone();
  Standalone(const Standalone&) = delete;
  Standalone& operator=(const Standalone&) = delete;

  client::Context& context() { return *ctx_; }
  /// For the ConnStack on context(): the neighbour cache of the port.
  const ConnStackOptions& stack_options() const { return stack_; }
  /// The engine's and the link's counters (local_port.h).
  std::string transport_report() const;

  /// Gives the CPU away once (an idle poller on a host with few cores).
  static void yield();
  /// The EAL's cleanup, at the process's end.
  static void cleanup();

 private:
  struct Env;
  std::unique_ptr<Env> env_;
  std::unique_ptr<client::Context> ctx_;
  ConnStackOptions stack_;
};

}  // namespace roce::naa
