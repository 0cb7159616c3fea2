/// @file
/// The out-of-band exchange of rdma-core's and perftest's tools: a kernel TCP connection beside
/// the RoCE traffic, as on a management interface. Every transfer keeps the dataplane polling
/// (Poller), so that ARP and RoCE traffic are answered while the exchange waits.
#pragma once

#include <cstddef>
#include <string>

#include "runtime/env.h"

namespace roce::runtime {

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

/// Moves exactly `n` bytes on the non-blocking socket `fd` (send when `write`, else receive),
/// keeping `env` polling; fails (TestFailure) when the peer closes, on an error, or after
/// `timeout_s`.
void transfer(Poller& env, int fd, void* buf, std::size_t n, bool write, double timeout_s);

}  // namespace roce::runtime
