/// @file
/// A program attached to a running roced (roce-perf --attach SOCKET): its QPs, CQs and buffers
/// live in roced's engine, reached through libroce (<roce/client.h>). roced polls
/// the dataplane; waiting here only hands the CPU to it now and then.
#pragma once

#include <roce/client.h>

#include <memory>
#include <string>

#include "runtime/env.h"

namespace roce::runtime {

class AttachedEnv : public Poller {
 public:
  /// Attaches to the roced listening on `socket` (its port `port_name`, empty: the first);
  /// fails the test with the reason when it cannot.
  /// `sleep_when_idle` (-e): idle waits sleep (50 us) instead of yielding, so that a waiting
  /// test leaves the CPU to roced.
  AttachedEnv(const std::string& socket, const std::string& port_name, bool sleep_when_idle);
  client::Context& ctx() { return *ctx_; }

 protected:
  bool step() override;
  void rest() override;

 private:
  std::unique_ptr<client::Context> ctx_;
  bool sleep_;
};

}  // namespace roce::runtime
