/// @file
/// One engine in a seeded state, driven by a fuzzer's bytes: an RC, a UC and a UD QP connected
/// to a peer that does not exist (the input speaks for it), five MRs with different remote
/// access (MR 4 fast-registered, so that SEND with Invalidate and LOCAL_INV can end it), receives
/// posted, and WRITE, READ, atomics and SENDs already sent so that the completer has WQEs waiting
/// for their ACKs and responses. The input is a sequence of records; request and response records
/// are built with the project's frame builder (valid ICRC) from fuzzer-chosen
/// BTH/RETH/AETH/AtomicETH/DETH fields, raw records are frames as they come (optionally given a
/// correct ICRC). Used by the engine_receive fuzz target and by roce-fuzz-seeds, which writes the
/// seeds and a pcap of the frames they make.
///
/// Input: one setup byte (bits 0-2: path MTU 256 << (v % 5); bit 3: no credit advertising;
/// bit 4: selective repeat on the RC QP),
/// then records, each a kind byte (EngineOp, modulo kCount_) and its fields, little-endian:
///   kRequest   opcode u8 (an opcode the table does not know: one of the RC requests), flags u8
///              (0 AckReq, 1 SE, 2 FECN, 3 BECN, 4 MigReq, 5 PSN is a raw u32 instead of an i8
///              step from the next expected PSN, 6-7 destination: RC, UC, UD, a raw QPN),
///              the PSN, the raw QPN u32 (destination 3 only), key selector u8 (MR v % 5, or
///              a raw u32 key following when v & 0x80; RETH, AtomicETH and IETH), VA offset u32
///              from that MR's start, DMA length u32, payload length u16, then as the opcode
///              has them: swap/add u64 and compare u64, immediate u32, Q_Key u32 (DETH; only
///              with AckReq, else the right one)
///   kResponse  the same for ACKs, READ responses and atomic ACKs to the RC QP's requester:
///              opcode u8, flags u8, PSN step i8 from the last PSN it sent (bit 5: raw u32),
///              syndrome u8, MSN u16, payload length u16, original value u64 (atomic ACK)
///   kRaw       flags u8 (bit 0: write a correct ICRC when the frame parses without one),
///              length u16, the frame's bytes
///   kTime      scale u8 (bit 0: microseconds, else ns), step u32: the clock moves (timers)
///   kPost      what u8 (high nibble: a SendWr opcode, 15 a receive; low: the MR of the SGE;
///              LOCAL_INV and REG_MR act on MR 4, REG_MR with key variant = length),
///              length u16, flags u8 (send flags; 4: no SGE, 64: on the UC QP, 128: on the
///              UD QP), rkey u32 (also the immediate and the key to invalidate)
///   kDereg     MR u8: deregister it (its memory is poisoned for ASan until kReg; not MR 4)
///   kReg       MR u8, access u8: register it again (not MR 4)
/// After every record the engine runs, its frames are drained and its CQs polled, and MR 2
/// (remote read only) must still hold its fill: no WRITE, atomic, receive or READ response
/// may have changed it.
/// kDereg and kReg run unless ROCE_FUZZ_DEREG=0 is set in the environment; MR 4's memory is
/// also poisoned while the MR is invalidated (remotely or locally), until a REG_MR completes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "dataplane/engine/engine.h"
#include "tests/fuzz/fuzz_bytes.h"

namespace roce::fuzz {

enum class EngineOp : std::uint8_t {
  kRequest,
  kResponse,
  kRaw,
  kTime,
  kPost,
  kDereg,
  kReg,
  kCount_
};

class EngineHarness {
 public:
  static constexpr std::size_t kMrs = 5;
  static constexpr std::size_t kFastRegMr = 4;  ///< alloc_mr + REG_MR; remotely invalidatable
  /// `tap` sees every frame the input makes (before the engine) and, with `from_engine` set,
  /// every frame the engine sends.
  using Tap = std::function<void(std::span<const std::uint8_t>, bool from_engine)>;

  EngineHarness(std::uint8_t setup, bool allow_dereg, Tap tap = {});
  ~EngineHarness();
  EngineHarness(const EngineHarness&) = delete;
  EngineHarness& operator=(const EngineHarness&) = delete;

  /// Runs every record of `in` (at most kMaxRecords).
  void run(Reader& in);
  static constexpr unsigned kMaxRecords = 256;
  /// Records run so far.
  unsigned records() const { return records_; }
  /// Where each record started: bytes of the input left at that point (for checking seeds).
  const std::vector<std::size_t>& record_starts() const { return starts_; }

 private:
  void request(Reader& in);
  void response(Reader& in);
  void raw(Reader& in);
  void post(Reader& in);
  void dereg(Reader& in);
  void reg(Reader& in);
  void inject(const wire::FrameSpec& s, std::size_t payload_len);
  void fast_reg(std::uint8_t key_variant);
  void sync_fast_reg();
  void settle();
  wire::FrameSpec spec_to_us(std::uint32_t dest_qpn) const;

  Tap tap_;
  bool allow_dereg_;
  std::unique_ptr<engine::Engine> eng_;
  engine::EngineConfig peer_;
  engine::Pd* pd_ = nullptr;
  engine::Cq* cq_ = nullptr;
  engine::Qp* rc_ = nullptr;
  engine::Qp* uc_ = nullptr;
  engine::Qp* ud_ = nullptr;
  std::array<std::vector<std::uint8_t>, kMrs> mem_;
  std::array<engine::Mr*, kMrs> mr_{};
  std::array<std::uint32_t, kMrs> access_{};
  std::array<bool, kMrs> poisoned_{};
  std::uint32_t mtu_ = 1024;
  std::uint64_t now_ = 1'000'000;
  wire::Psn next_req_psn_;   ///< the PSN the RC responder expects next, as the input sees it
  wire::Psn last_sent_psn_;  ///< the latest request PSN our RC requester sent
  std::uint64_t wr_id_ = 0;
  unsigned records_ = 0;
  std::vector<std::size_t> starts_;
  std::vector<std::uint8_t> frame_;
};

}  // namespace roce::fuzz
