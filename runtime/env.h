/// @file
/// The in-process host of one application: the EAL, one DPDK port (runtime/port.h) with an
/// engine and a poll loop on it, an optional capture, fault injection either way, and what
/// keeps that dataplane going while the application waits (Poller). roce-perf, the NAA, NetFR
/// and NFS programs, the link demo and the examples open one from a LinkOptions; roced lends
/// the engine and loop of a configured port to the services it hosts.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "apps/common/pcap_writer.h"
#include "client/local/local_context.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/poll_loop.h"
#include "runtime/link.h"

namespace roce::runtime {
class Port;
}

namespace roce::runtime {

/// A test that cannot go on: roce-perf prints it and exits with status 1; roced logs it and
/// serves the next client.
struct TestFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& msg);  ///< throws TestFailure

/// What keeps a test's dataplane going while the test waits (for completions, for the peer
/// on the exchange socket). In-process (Env) that is polling the loop; attached to roced
/// (AttachedEnv) roced polls, and waiting only leaves the CPU to it now and then.
class Poller {
 public:
  virtual ~Poller() = default;
  /// Polls until `done()` or `seconds`; false on timeout.
  /// When idle for a while, it yields the CPU: on a host with fewer cores than busy pollers,
  /// the kernel's softirq work (af_packet, veth, taps) or roced would otherwise wait for a tick.
  template <class F>
  bool until(F&& done, double seconds) {
    const std::uint64_t end = port::now_ns() + static_cast<std::uint64_t>(seconds * 1e9);
    unsigned idle = 0;
    while (!done()) {
      if (port::now_ns() > end) return false;
      if (step() || std::exchange(rested_, false))
        idle = 0;
      else if (++idle >= kYieldAfterIdlePolls && yield_when_idle)
        rest();
    }
    return true;
  }
  bool yield_when_idle = true;
  static constexpr unsigned kYieldAfterIdlePolls = 32;
  static void yield();
  /// The test just waited of its own accord (attached -e: in wait_cq, which sleeps when
  /// nothing comes): no rest() on top of it, which would delay the completion it waited for.
  void rested() { rested_ = true; }

 protected:
  /// One poll of the dataplane; true when it found work.
  virtual bool step() = 0;
  /// What an idle wait does between polls: yield the CPU.
  virtual void rest() { yield(); }

 private:
  bool rested_ = false;
};

/// The dataplane of a test or an application: a poll loop and its engine. A program owns one
/// (EAL, port, engine, loop, from LinkOptions; the EAL stays up: port::eal_cleanup at exit);
/// roced lends the loop of a configured port to the services it hosts.
class Env : public Poller {
 public:
  /// Opens the link: the EAL (once per process), the port, its engine and loop, the offload
  /// (`o.offload`, else ROCE_OFFLOAD); waits for the link unless it is a memif server's (that
  /// one comes up when its client connects). Fails (TestFailure) on a bad option.
  explicit Env(const LinkOptions& o);
  /// Borrows a running engine and loop; `between_polls` runs after every poll (roced: its other
  /// ports and counters) and may throw to abandon the test.
  Env(engine::Engine& e, port::PollLoop& l, wire::Ipv4Addr ip, std::function<void()> between_polls);
  ~Env() override;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

  /// CmConfig::max_connections of the rdma_cm tools' CM agents (roced: limits.cm_connections).
  std::uint32_t cm_connections = 4096;
  /// roced's port in the `datapath` offload mode: a Context whose RC QPs live on the card
  /// (fpga/host/card_context.h). perftest's WRITE and READ tests run there; the others, and
  /// -R (the CM modifies the engine's QPs), stay on the engine.
  std::function<std::unique_ptr<client::Context>()> open_card;
  /// The peer's MAC by ARP; fails the test after `seconds`.
  wire::MacAddr resolve(wire::Ipv4Addr peer, double seconds);
  /// libroce's in-process backend on this engine (client::open_local): progress polls the
  /// loop, resolve waits up to 10 s for ARP, the port is named `name`.
  client::LocalOptions local_options(const std::string& name = {});
  /// The port this Env owns; null when it borrows roced's.
  Port* port() { return own_port_.get(); }

 protected:
  bool step() override {
    const bool work = loop.poll_once() != 0 || eng.has_work();
    if (between_polls_) between_polls_();
    return work;
  }

 private:
  std::unique_ptr<Port> own_port_;
  std::function<void()> between_polls_;

 public:
  wire::Ipv4Addr ip;
  wire::Ipv6Addr gid;  ///< ::ffff:ip
  engine::Engine& eng;
  port::PollLoop& loop;
  std::unique_ptr<apps::PcapWriter> capture;
};

/// What a test created on the engine, destroyed when the test ends (roced runs many tests on
/// one engine).
struct Resources {
  explicit Resources(engine::Engine& e) : eng(e) {}
  ~Resources();
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;
  engine::Engine& eng;
  std::vector<engine::Qp*> qps;
  std::vector<engine::Srq*> srqs;
  std::vector<engine::Mr*> mrs;
  std::vector<engine::Cq*> cqs;
  std::vector<engine::Pd*> pds;
};

}  // namespace roce::runtime
