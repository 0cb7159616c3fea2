/// @file
/// The `datapath` offload mode: RC WRITE and READ run on the card (Coyote's RoCE stack: PSN
/// state, ACKs, retransmission, QP and MR tables on the FPGA), the host only sets QPs and MRs up
/// and posts work requests. Two halves, joined by nothing but the ports of iface/ports.h:
///
///   DatapathCard    the device. Behind its ports it runs the project's own engine (as issue
///                   22 allows: what is proven is the boundary), with its own objects: it owns
///                   its QPs, CQ, PDs and MR entries, and reaches host memory only at the DMA
///                   addresses of MR entries the host wrote (each work request is checked on
///                   dev2mr_req before the engine sees it).
///   DatapathDriver  the host's driver: verbs-like calls (create/modify QP, reg MR, post a
///                   WRITE or READ, poll completions) turned into host2qp_path, host2qp_wr,
///                   host2mr_wr writes, host2dev_wq descriptors (packed to their 352 bits) and
///                   dev2host_cq descriptors (unpacked from their 168 bits). It holds numbers
///                   (QPNs, keys), never a pointer into the card.
///
/// The card keeps what it does not do for the host: SEND, WRITE_IMM (receives) and atomics
/// are completed with an error (the software engine keeps them, steered by QPN), frames for
/// QPNs it does not own come out of net2dev_rx unconsumed for the host's software path.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "dataplane/engine/engine.h"
#include "fpga/iface/ports.h"

namespace roce::fpga {

/// Completion status the card writes for a work request it does not run (IBV_WC_LOC_QP_OP_ERR).
inline constexpr std::uint8_t kWcStatusLocQpOpErr = 2;
/// ... and for one whose local buffer no MR entry allows (IBV_WC_LOC_PROT_ERR).
inline constexpr std::uint8_t kWcStatusLocProtErr = 4;

class DatapathCard {
 public:
  struct Config {
    engine::EngineConfig net;     ///< the card's MAC, IP and (tests) seeds
    std::size_t wq_depth = 1024;  ///< host2dev_wq entries
    std::size_t cq_depth = 4096;  ///< dev2host_cq entries
  };
  explicit DatapathCard(const Config& cfg);
  ~DatapathCard();
  DatapathCard(const DatapathCard&) = delete;
  DatapathCard& operator=(const DatapathCard&) = delete;

  // ---- host side ports ----
  WrRsp host2qp_path(const QpPath& p);
  WrRsp host2qp_wr(const HostQpWrite& w);
  WrRsp host2mr_wr(const HostMrWrite& w);
  /// A work request descriptor as the ring carries it; false: the ring is full.
  bool host2dev_wq(const Bits& wr);
  /// The next completion descriptor, if any.
  std::optional<Bits> dev2host_cq();
  const std::array<std::uint64_t, kDevCounters>& counters();
  std::uint64_t counter(DevCounter c) { return counters()[static_cast<std::size_t>(c)]; }

  // ---- network side ----
  /// net2dev_rx: false when the frame is not for a QP of the card (the host's software path
  /// takes it: ARP, CM on QP1, QPs the software keeps).
  bool net2dev_rx(std::span<const std::uint8_t> frame, std::uint64_t now_ns);
  /// The card's clock: takes work requests off the ring, runs timers (retransmission), and
  /// hands every frame to send to `f(std::span<const std::uint8_t>)` (dev2net_tx).
  template <class F>
  void run(std::uint64_t now_ns, F&& f) {
    step(now_ns);
    eng_->drain_tx([&](std::span<const std::uint8_t> fr) {
      count_tx(fr);
      f(fr);
    });
  }
  /// The earliest timer of the card (0: none armed).
  std::uint64_t next_deadline() const { return eng_->next_deadline(); }

 private:
  struct QpSlot {
    engine::Qp* qp = nullptr;
    QpPath path;
    std::uint8_t state = 0;
  };
  struct MrEntry {
    HostMrWrite w;
    engine::Mr* mr = nullptr;
  };
  void step(std::uint64_t now_ns);
  /// The engine's completions onto dev2host_cq.
  void collect();
  void execute(const WorkRequest& wr);
  void complete(const WorkRequest& wr, std::uint8_t status);
  /// dev2mr_req -> mr2dev_rsp: the MR/TLB table's check and translation.
  MrRsp mr_lookup(const MrReq& r) const;
  engine::Pd* pd(std::uint32_t n);
  void count_tx(std::span<const std::uint8_t> f);

  Config cfg_;
  std::unique_ptr<engine::Engine> eng_;
  engine::Cq* cq_ = nullptr;
  std::map<std::uint32_t, engine::Pd*> pds_;
  std::map<std::uint32_t, QpSlot> qps_;
  std::map<std::uint32_t, MrEntry> mrs_;
  std::deque<Bits> wq_, cq_ring_;
  std::array<std::uint64_t, kDevCounters> cnt_{};
};

/// The host's driver for a DatapathCard: verbs-like calls, port accesses underneath.
class DatapathDriver {
 public:
  explicit DatapathDriver(DatapathCard& card) : card_(card) {}

  /// Registers host memory [addr, addr + len) for the card's DMA under the I/O virtual address
  /// `iova` (what work requests and peers name; 0: addr itself); returns the key (0: refused).
  std::uint32_t reg_mr(std::uint32_t pd, void* addr, std::uint64_t len, std::uint8_t access,
                       std::uint64_t iova = 0);
  bool dereg_mr(std::uint32_t key);
  /// Creates an RC QP on the card with its path; returns the QPN the card assigned (0: refused).
  std::uint32_t create_qp(const QpPath& path);
  /// Rewrites a QP's path entry (only while it is in RESET: the peer's address, MTU, timers).
  bool set_path(std::uint32_t qpn, const QpPath& path);
  /// RESET -> RTS in one host2qp_wr: the peer's QPN, our first PSN, the peer's.
  bool connect(std::uint32_t qpn, std::uint32_t remote_qpn, std::uint32_t sq_psn,
               std::uint32_t rq_psn);
  /// Moves the QP to the error state (its work requests complete flushed).
  bool error(std::uint32_t qpn);
  bool destroy_qp(std::uint32_t qpn);
  bool post(const WorkRequest& wr) { return card_.host2dev_wq(pack(wr)); }
  /// Completions written since the last call.
  std::vector<Completion> poll();

 private:
  DatapathCard& card_;
};

}  // namespace roce::fpga
