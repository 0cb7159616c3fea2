#include "dataplane/fault_injector.h"

#include "dataplane/wire/roce_frame.h"

namespace roce {

FaultInjector::FaultInjector(FaultPolicy policy) : policy_(std::move(policy)), rng_(policy_.seed) {}

bool FaultInjector::chance(double p) {
  if (p <= 0) return false;
  return std::uniform_real_distribution<double>(0, 1)(rng_) < p;
}

FaultDecision FaultInjector::decide(std::span<const std::uint8_t> frame) {
  FaultDecision d;
  ++stats_.frames;
  // Every random draw happens for every frame, so that one policy change does not shift the
  // random stream of the others.
  const bool r_drop = chance(policy_.drop_rate);
  const bool r_dup = chance(policy_.duplicate_rate);
  const bool r_reorder = chance(policy_.reorder_rate);
  const bool r_corrupt = chance(policy_.corrupt_rate);
  const std::uint64_t r = rng_();

  bool drop = r_drop || (policy_.drop_nth != 0 && stats_.frames == policy_.drop_nth);
  wire::RxPkt pkt;
  wire::ParseOptions opts;
  opts.verify_icrc = false;
  const bool roce = wire::parse_frame(frame, pkt, opts) == wire::Verdict::kOk;
  if (roce && !policy_.drop_psn.empty()) {
    for (auto& f : policy_.drop_psn) {
      if (f.times == 0 || f.qpn != pkt.dest_qp.raw() || f.psn != pkt.psn.raw()) continue;
      if (f.opcode >= 0 && f.opcode != wire::raw(pkt.opcode)) continue;
      --f.times;
      drop = true;
      break;
    }
  }
  if (drop) {
    d.drop = true;
    ++stats_.dropped;
    return d;
  }
  if (r_dup) {
    d.copies = 2;
    ++stats_.duplicated;
  }
  if (r_reorder && policy_.reorder_window > 0) {
    d.hold = 1 + static_cast<std::uint32_t>(r % policy_.reorder_window);
    ++stats_.reordered;
  }
  if (r_corrupt && roce) {
    // Flip a bit in the BTH, the rest of the transport headers, the payload or the ICRC: bytes
    // the ICRC covers unmasked (BTH byte 4 is masked, so it is skipped).
    const std::size_t span = pkt.frame_len - pkt.bth_off - 1;
    std::size_t at = pkt.bth_off + 1 + static_cast<std::size_t>((r >> 8) % span);
    if (at == pkt.bth_off + 4u) ++at;
    d.corrupt_at = static_cast<int>(at);
    d.corrupt_mask = static_cast<std::uint8_t>(1u << ((r >> 40) & 7));
    ++stats_.corrupted;
  }
  d.delay_ns = policy_.delay_ns + (policy_.jitter_ns ? (r >> 16) % (policy_.jitter_ns + 1) : 0);
  return d;
}

}  // namespace roce
