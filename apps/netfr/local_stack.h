/// @file
/// NetFR in-process: a link of this process's own ("pmd=memif,..." or "pmd=af_packet,...",
/// netfr.h) with its DPDK port, engine and poll loop, and libroce's in-process Context on it.
/// The one place NetFR's programs open a port of their own; a program that only attaches to a
/// roced does not link it (no DPDK, no engine).
#pragma once

#include <roce/client.h>

#include <functional>
#include <memory>
#include <string>

namespace roce::netfr {

/// A Context on an in-process link.
struct LocalContext {
  std::unique_ptr<client::Context> ctx;
  /// What `ctx` stands on (port, engine, loop, EAL): release it after `ctx`.
  std::shared_ptr<void> keep;
  /// The engine's counters in a line (retransmissions, RNR NAKs, injected drops).
  std::function<std::string()> report;
};

/// Opens `link` in-process; nullopt-like (ctx null) and `err` when it cannot. The EAL starts
/// once per process: one link per process.
LocalContext open_local_context(const std::string& link, std::string& err);

/// Lets open_fabric() and the C API (nfrHostInit, nfrClientInit) open in-process links: call
/// once at the start of main(). Attach links ("attach=SOCKET") work without it.
void use_local_stack();

}  // namespace roce::netfr
