/// @file
/// A NetFR host as a service on any libroce Context: a frame source in the manner of Looking
/// Glass's host (frames.h: one frame at a time written into the client's buffers, a cursor
/// datagram after each), serving one client at a time on its rdma_cm ports (port, port + 1)
/// for as long as it runs. The same class runs in-process (roce-netfr-source --link), attached
/// to a roced (roce-netfr-source --attach) and hosted in roced (the Context roced lends its
/// hosted services): poll() never blocks.
#pragma once

#include <roce/client.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "apps/netfr/include/netfr/netfr.h"

struct NFRMemory;

namespace roce::netfr {

class ContextFabric;
class Host;

struct HostServiceOptions {
  std::uint16_t port = 5010;  ///< rdma_cm port of the primary channel; the secondary is + 1
  std::uint32_t width = 320, height = 180;  ///< RGBA frames of this size
  std::uint64_t frames = 0;  ///< per client, then an end datagram; 0: until the client leaves
  double fps = 0;            ///< 0: as fast as the client gives its buffers back

  /// From options as a hosted service's `args` spell them: --port N, --width N, --height N,
  /// --frames N, --fps F. Throws std::invalid_argument on an unknown or bad one.
  static HostServiceOptions from_args(const std::vector<std::string>& args);
};

class HostService {
 public:
  /// Listens at once; throws std::runtime_error when it cannot (the ports taken, no memory).
  HostService(client::Context& ctx, const HostServiceOptions& o);
  ~HostService();
  HostService(const HostService&) = delete;
  HostService& operator=(const HostService&) = delete;

  /// One round: connections, completions, the next frame or cursor if due. Never blocks.
  /// True when it did something.
  bool poll();
  /// Clients that got every frame (HostServiceOptions::frames) and the end datagram.
  std::uint64_t sessions() const { return sessions_; }
  std::uint64_t frames_sent() const { return frames_total_; }
  /// Writes and datagrams that failed (not those only deferred: no credit, no free buffer).
  std::uint64_t errors() const { return errors_; }
  /// A client is connected now (both channels).
  bool connected() const;
  /// The counters in one line (roced's log, the program's last words).
  std::string report() const;

 private:
  static void on_written(const void** uData);
  void end_session();

  HostServiceOptions o_;
  std::unique_ptr<ContextFabric> fab_;
  std::unique_ptr<Host> host_;
  NFRMemory* mem_ = nullptr;  ///< the frame being sent, in the Context's memory
  std::uint64_t bytes_ = 0;
  bool in_session_ = false, writing_ = false, rendered_ = false, cursor_due_ = false,
       end_sent_ = false;
  std::uint64_t seq_ = 0, next_due_ns_ = 0;
  std::uint64_t sessions_ = 0, frames_total_ = 0, busy_ = 0, errors_ = 0;
};

}  // namespace roce::netfr
