/// @file
/// Two engines joined by an in-memory wire with a simulated clock and a FaultInjector per
/// direction. Every frame each engine emits is recorded (decoded) so that tests can check the
/// exact packet sequence, Lumina-style.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "dataplane/engine/engine.h"
#include "dataplane/fault_injector.h"

namespace roce::test {

struct WireRecord {
  std::uint64_t t = 0;
  int from = 0;  ///< 0 = engine A, 1 = engine B
  bool dropped = false;
  wire::Opcode opcode{};
  std::uint32_t dest_qp = 0;
  std::uint32_t psn = 0;
  bool ack_req = false;
  int syndrome = -1;  ///< AETH syndrome byte, -1 without AETH
  std::uint32_t payload_len = 0;
};

struct LoopbackOptions {
  FaultPolicy a2b;
  FaultPolicy b2a;
  std::uint64_t link_delay_ns = 1000;
  /// Each direction's rate in bytes per microsecond (0: unlimited): a frame leaves when the
  /// frames before it have, and takes its length / rate (a serialization delay), so that
  /// simulated time measures goodput.
  std::uint64_t bytes_per_us = 0;
  std::uint64_t tick_ns = 200;
  bool record = true;
  /// Zero-copy transmit (Engine::set_tx_zero_copy) from payloads of this size: the wire then
  /// takes frames in pieces, as a DPDK port does, and puts them together itself. 0: off.
  std::uint32_t zero_copy = 0;
};

class Loopback {
 public:
  explicit Loopback(const LoopbackOptions& opts = {}, engine::EngineConfig a = default_config(0),
                    engine::EngineConfig b = default_config(1));
  static engine::EngineConfig default_config(int side);

  engine::Engine& a() { return *eng_[0]; }
  engine::Engine& b() { return *eng_[1]; }
  engine::Engine& side(int i) { return *eng_[i]; }
  std::uint64_t now() const { return now_; }
  const std::vector<WireRecord>& records() const { return records_; }
  void clear_records() { records_.clear(); }
  const FaultyLink& injector(int from) const { return *link_[from]; }

  /// Runs both engines once, moves their frames onto the wire and delivers what is due.
  /// Returns true when something happened.
  bool step();
  /// Steps until `done()` or until the simulated time passes `limit_ns` from now. When the
  /// wire is idle the clock jumps to the next event (delivery or timer).
  bool run_until(const std::function<bool()>& done, std::uint64_t limit_ns);
  /// Steps until nothing is in flight and no engine has work or an armed timer that expires
  /// within `quiet_ns`.
  void settle(std::uint64_t limit_ns = 10'000'000'000ull);

 private:
  void carry(int from);
  std::unique_ptr<engine::Engine> eng_[2];
  std::unique_ptr<FaultyLink> link_[2];
  std::multimap<std::uint64_t, std::vector<std::uint8_t>> queue_[2];  ///< to engine i
  LoopbackOptions opts_;
  std::uint64_t now_ = 1'000'000;
  std::uint64_t link_free_[2] = {0, 0};  ///< when each direction's last frame has left (rate)
  std::vector<WireRecord> records_;
};

// ---- connection helpers ---------------------------------------------------------------------

struct RcOptions {
  engine::QpType type = engine::QpType::kRc;
  engine::Mtu mtu = engine::Mtu::k1024;
  std::uint32_t psn_a = 0x123456;
  std::uint32_t psn_b = 0xABCDEF;
  std::uint8_t timeout = 10;  ///< ~4 ms
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;
  std::uint8_t min_rnr_timer = 1;  ///< 10 us
  std::uint8_t max_rd_atomic = 16;
  std::uint32_t access = engine::kAccessLocalWrite | engine::kAccessRemoteWrite |
                         engine::kAccessRemoteRead | engine::kAccessRemoteAtomic;
  engine::QpCap cap{256, 256, 4, 4, 128};
  bool use_srq_b = false;
};

/// One side of a connection: its PD, CQs, QP.
struct Endpoint {
  engine::Engine* eng = nullptr;
  engine::Pd* pd = nullptr;
  engine::Cq* scq = nullptr;
  engine::Cq* rcq = nullptr;
  engine::Qp* qp = nullptr;
  engine::Srq* srq = nullptr;
};

/// Creates and connects an RC (or UC) QP on each engine (RESET -> INIT -> RTR -> RTS).
std::pair<Endpoint, Endpoint> connect(Loopback& lb, const RcOptions& o = {});
/// Creates QPs on an existing pair of PDs/CQs (for many-QP tests).
std::pair<Endpoint, Endpoint> connect_on(Loopback& lb, const Endpoint& a_res, const Endpoint& b_res,
                                         const RcOptions& o);

/// Selective repeat at both ends of a connected pair, `on_a` at A and `on_b` at B, with the
/// message index bases the two agree on when both have it (as the CM or roce-perf's exchange
/// arranges, engine::SrIndexBase; each direction's starts 8 below the 32-bit wrap, so a test
/// of a few messages crosses it). kOk, or the first refusal.
int set_selective_repeat(const Endpoint& a, const Endpoint& b, bool on_a, bool on_b);
inline int set_selective_repeat(const Endpoint& a, const Endpoint& b, bool on) {
  return set_selective_repeat(a, b, on, on);
}

/// A registered buffer with a recognisable fill.
struct Buffer {
  std::vector<std::uint8_t> bytes;
  engine::Mr* mr = nullptr;
  std::uint64_t addr() const { return reinterpret_cast<std::uint64_t>(bytes.data()); }
  engine::Sge sge(std::uint64_t off = 0, std::uint64_t len = UINT64_MAX) const;
};
Buffer make_buffer(engine::Engine& e, engine::Pd* pd, std::size_t size, std::uint8_t seed,
                   std::uint32_t access = engine::kAccessLocalWrite | engine::kAccessRemoteWrite |
                                          engine::kAccessRemoteRead | engine::kAccessRemoteAtomic);
void fill_pattern(std::vector<std::uint8_t>& v, std::uint32_t seed);

/// A signaled work request on one SGE, aimed at `dst` + `off` (READ, WRITE; ignored by SEND).
engine::SendWr make_wr(std::uint64_t id, const engine::Sge* s, const Buffer& dst,
                       std::uint64_t off = 0, engine::WrOpcode op = engine::WrOpcode::kWrite);

/// Frames taken off the wire by hand (tests that deliver, drop or reorder them themselves).
using Frames = std::vector<std::vector<std::uint8_t>>;
/// Runs `e` at `t` and returns every frame it sends.
Frames drain(engine::Engine& e, std::uint64_t t);

/// Polls `cq` while stepping until `n` completions arrived (or the limit passed).
std::vector<engine::Wc> wait_wcs(Loopback& lb, engine::Cq* cq, std::size_t n,
                                 std::uint64_t limit_ns = 5'000'000'000ull);

}  // namespace roce::test
