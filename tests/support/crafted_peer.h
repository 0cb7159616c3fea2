/// @file
/// One engine with an RC (or UC) QP in RTR facing a peer that exists only as crafted frames:
/// tests send it requests packet by packet (inject) and read back what it answers (flush), to
/// check the responder's rules one at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dataplane/engine/engine.h"

namespace roce::test {

/// An answer of the engine under test, decoded.
struct Answer {
  wire::Opcode op{};
  std::uint32_t psn = 0;
  std::uint8_t syndrome = 0;  ///< AETH syndrome (0 without AETH)
  std::uint32_t msn = 0;
  std::uint32_t payload_len = 0;
};

struct CraftedOptions {
  engine::QpType type = engine::QpType::kRc;
  engine::Mtu mtu = engine::Mtu::k256;
  std::uint32_t access = engine::kAccessLocalWrite | engine::kAccessRemoteWrite |
                         engine::kAccessRemoteRead | engine::kAccessRemoteAtomic;
  std::uint8_t max_dest_rd_atomic = 4;
  std::uint32_t cq_depth = 64;
  std::size_t mem_size = 4096;
  std::uint32_t tx_slots = 0;  ///< the engine's transmit ring; 0: the default
};

class CraftedPeer {
 public:
  static constexpr std::uint32_t kPeerQpn = 0x99;
  static constexpr std::uint32_t kEpsn = 1000;

  explicit CraftedPeer(const CraftedOptions& o = {});

  /// A request as the peer would send it, to `va`/`rkey` (RETH) or the atomic fields.
  struct Req {
    wire::Opcode op{};
    std::uint32_t psn = kEpsn;
    std::size_t payload_len = 0;
    bool ack_req = false;
    std::uint64_t va = 0;
    std::uint32_t rkey = 0;
    std::uint32_t dma_len = 0;
    std::uint64_t compare_add = 0, swap = 0;
    std::uint32_t ieth_rkey = 0;
    std::uint32_t imm = 0;
    bool se = false;
    /// The payload's bytes; empty: payload_len bytes of the PSN's low byte.
    std::vector<std::uint8_t> bytes{};
  };
  void inject(const Req& r);
  /// The same, aimed at `mem` + `off` with the MR's key.
  void inject(wire::Opcode op, std::uint32_t psn, std::size_t payload_len, bool ack_req,
              std::uint64_t off = 0, std::uint32_t dma_len = 0);
  /// Runs the engine and returns everything it sent.
  std::vector<Answer> flush();
  void post_recvs(int n, std::uint32_t len = 2048);
  /// Moves the QP on to RTS (sending from kSpsn), for requester and completer tests.
  void to_rts();
  /// A response as the peer would send it: ACK/NAK (AETH syndrome), READ response (payload of
  /// `payload_len` bytes) or atomic ACK (`orig`).
  void respond(wire::Opcode op, std::uint32_t psn, std::uint8_t syndrome,
               std::size_t payload_len = 0, std::uint64_t orig = 0, std::uint32_t msn = 0);
  static constexpr std::uint32_t kSpsn = 5000;

  std::uint64_t mem_addr() const { return reinterpret_cast<std::uint64_t>(mem.data()); }

  engine::Engine eng;
  engine::EngineConfig peer;
  engine::Pd* pd = nullptr;
  engine::Cq* cq = nullptr;
  engine::Qp* qp = nullptr;
  engine::Mr* mr = nullptr;
  std::vector<std::uint8_t> mem;
  std::uint64_t now = 1'000'000;
};

}  // namespace roce::test
