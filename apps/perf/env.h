/// @file
/// What every roce-perf test stands on: one DPDK port (net_af_packet on a kernel interface)
/// with an Engine and a poll loop, an optional capture, fault injection on either direction,
/// and the out-of-band TCP connection of rdma-core's and perftest's tools. The RoCE traffic
/// runs on the DPDK port; the exchange runs on a kernel socket, as on a management interface.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/common/pcap_writer.h"
#include "dataplane/fault_injector.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"
#include "dataplane/port/poll_loop.h"

namespace roce::client {
class Context;
}
namespace roce::fpga {
class DeviceModel;
class DatapathOffload;
}  // namespace roce::fpga

namespace roce::perf {

/// A test that cannot go on: roce-perf prints it and exits with status 1; roced logs it and
/// serves the next client.
struct TestFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& msg);  ///< throws TestFailure

struct LinkOpts {
  std::string iface;              ///< kernel interface the DPDK port attaches to
  std::string pmd = "af_packet";  ///< af_packet (net_af_packet) or af_xdp (net_af_xdp)
  std::string ip = "192.0.2.100";
  std::string mac = "02:00:00:00:00:64";
  unsigned netdev_mtu = 1500;      ///< largest IP packet on the link (9000 for path MTU 4096)
  std::string pcap;                ///< capture every frame sent and received here
  unsigned vlan = 0;               ///< 802.1Q VLAN of the port (1-4094); 0: untagged
  int lcore = -1;                  ///< the CPU the poll loop runs on; -1: any of the process's
  std::uint64_t window_bytes = 0;  ///< the engine's requester window per QP (0: its default)
  FaultPolicy tx_faults, rx_faults;
  /// The FPGA offload's device model on the port (fpga/model: icrc, parse, or datapath: the
  /// card runs the WRITE and READ tests' QPs); empty: the environment's ROCE_OFFLOAD, else none.
  std::string offload;
};

/// The EAL --vdev argument for `o`'s interface and PMD; fails (TestFailure) on a bad option.
std::string link_vdev(const LinkOpts& o);
/// The largest path MTU a link of `netdev_mtu` carries, as rxe reckons its active MTU (the
/// netdev MTU less 80 bytes of headers): roce-perf's engine allows no more, and perftest's
/// tools default to it.
engine::Mtu link_path_mtu(unsigned netdev_mtu);
/// The port of `o` (call link_vdev first: it checks the options).
port::PortSpec link_port_spec(const LinkOpts& o);

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
      if (step())
        idle = 0;
      else if (++idle >= kYieldAfterIdlePolls && yield_when_idle)
        rest();
    }
    return true;
  }
  bool yield_when_idle = true;
  static constexpr unsigned kYieldAfterIdlePolls = 32;
  static void yield();

 protected:
  /// One poll of the dataplane; true when it found work.
  virtual bool step() = 0;
  /// What an idle wait does between polls: yield the CPU.
  virtual void rest() { yield(); }
};

/// The dataplane of a test: a poll loop and its engine. roce-perf owns one (EAL, port, engine,
/// loop, from LinkOpts); roced lends the loop of a configured port to the services it hosts.
class Env : public Poller {
 public:
  explicit Env(const LinkOpts& o);
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

 protected:
  bool step() override {
    const bool work = loop.poll_once() != 0 || eng.has_work();
    if (between_polls_) between_polls_();
    return work;
  }

 private:
  std::unique_ptr<engine::Engine> own_eng_;
  std::unique_ptr<port::DpdkPort> own_dev_;
  std::unique_ptr<port::PollLoop> own_loop_;
  std::unique_ptr<fpga::DeviceModel> offload_;   ///< LinkOpts::offload (datapath: its stages)
  std::unique_ptr<fpga::DatapathOffload> card_;  ///< LinkOpts::offload datapath
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

/// How perftest's two processes talk outside the tested QPs: perftest's messages (versions,
/// QP addresses, hand-shakes, reports) each way. The client writes first in every exchange.
/// Implemented by the TCP connection (Oob) and by perftest's rdma_cm communication connection
/// (-R, perftest_cm.h).
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual bool client() const = 0;
  /// Client: connects (retrying while nobody listens, until the timeout); server: accepts.
  virtual void open() = 0;
  virtual void send(const void* buf, std::size_t n) = 0;
  /// Exactly `n` bytes.
  virtual void recv(void* buf, std::size_t n) = 0;
  /// perftest's symmetric step: the client writes then reads, the server reads then writes.
  void exchange(const void* mine, void* theirs, std::size_t n) {
    if (client()) {
      send(mine, n);
      recv(theirs, n);
    } else {
      recv(theirs, n);
      send(mine, n);
    }
  }
  /// True when the peer has sent something not read yet (or is gone). Polls the dataplane.
  virtual bool readable() = 0;
  /// Reads and discards until the peer closes, for at most `seconds`.
  virtual void drain_until_closed(double seconds) = 0;
  virtual void close() = 0;
};

/// The out-of-band TCP connection. The side given a server name connects (client); the other
/// listens for one connection (server). Every transfer keeps the dataplane polling, so that
/// ARP and RoCE traffic are answered while the exchange waits.
class Oob : public Exchange {
 public:
  /// Server: listens on `port` now (so that a peer may connect early); accept() waits.
  Oob(Poller& env, std::string server, unsigned port, double timeout_s);
  /// Server side of a connection accepted elsewhere (roced's services).
  Oob(Poller& env, int connected_fd, double timeout_s);
  ~Oob() override;
  Oob(const Oob&) = delete;
  Oob& operator=(const Oob&) = delete;

  bool client() const override { return !server_.empty(); }
  void open() override;
  void send(const void* buf, std::size_t n) override;
  void recv(void* buf, std::size_t n) override;
  void close() override;
  bool readable() override;
  void drain_until_closed(double seconds) override;

 private:
  Poller& env_;
  std::string server_;
  unsigned port_;
  double timeout_s_;
  int listen_fd_ = -1, fd_ = -1;
};

std::string hex_gid(const wire::Ipv6Addr& g);  ///< 32 hex digits, bytes in order
/// A peer's message for an error text: up to `n` bytes or the first NUL, non-printable bytes
/// shown as '.'.
std::string printable(const char* p, std::size_t n);

}  // namespace roce::perf
