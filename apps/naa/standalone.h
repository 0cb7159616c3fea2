/// @file
/// The NAA's processes on a DPDK port of their own (roce-naa, the host library in-process):
/// EAL, port, engine and poll loop (runtime/env.h), and libroce's in-process backend on them.
#pragma once

#include <roce/client.h>

#include <memory>
#include <string>

#include "apps/naa/conn_stack.h"
#include "runtime/link.h"

namespace roce::naa {

class Standalone {
 public:
  /// Own EAL, port, engine and poll loop (throws std::runtime_error on a bad link).
  explicit Standalone(const runtime::LinkOptions& link);
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
