/// @file
/// Fuzz target: the RoCEv2 frame parser (dataplane/wire/roce_frame.cc), the first code every
/// received byte meets. Input: one option byte, then a frame (Ethernet header first).
///   bit 0  verify the ICRC (else the parser skips it, so mutations reach the later checks)
///   bit 1  verify the IPv4 header checksum
///   bit 2  a frame the parser accepts without its ICRC is given a correct ICRC and parsed
///          again: it must then be accepted with the same fields
/// On kOk every header the opcode table promises is read (ASan checks it lies in the frame).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dataplane/wire/roce_frame.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace roce::wire;

// Where the reads go, so that the compiler keeps them.
volatile std::uint64_t sink;

void check(bool ok) {
  if (!ok) std::abort();
}

// Reads every field the parsed packet offers, as a stage would.
std::uint64_t touch(const RxPkt& p) {
  std::uint64_t sum = p.dest_qp.raw() + p.psn.raw() + p.payload_len + p.pad;
  const OpcodeInfo& i = *p.info;
  if (i.has(Ext::kReth)) sum += p.reth().va() + p.reth().rkey() + p.reth().dma_len();
  if (i.has(Ext::kAeth)) sum += p.aeth().syndrome().raw() + p.aeth().msn().raw();
  if (i.has(Ext::kAtomicEth))
    sum += p.atomic_eth().va() + p.atomic_eth().swap_add() + p.atomic_eth().compare();
  if (i.has(Ext::kAtomicAckEth)) sum += p.atomic_ack_eth().orig();
  if (i.has(Ext::kImmDt)) sum += p.immdt().imm();
  if (i.has(Ext::kIeth)) sum += p.ieth().rkey();
  if (i.has(Ext::kDeth)) sum += p.deth().qkey() + p.deth().src_qp().raw();
  for (std::uint8_t b : p.payload()) sum += b;
  return sum;
}

void check_layout(const RxPkt& p, std::size_t size) {
  check(p.info != nullptr && p.info->valid());
  check(p.frame_len <= size);
  check(p.bth_off + p.info->hdr_len == p.payload_off);
  check(std::size_t{p.payload_off} + p.payload_len + p.pad + kIcrcSize == p.frame_len);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t opt = data[0];
  // An exact-size copy: a read one byte past the frame is a heap overflow, not a read of the
  // next input byte.
  std::vector<std::uint8_t> frame(data + 1, data + size);
  ParseOptions po;
  po.verify_icrc = opt & 1;
  po.verify_ip_checksum = opt & 2;
  RxPkt p;
  if (parse_frame(frame, p, po) == Verdict::kOk) {
    check_layout(p, frame.size());
    sink = touch(p);
  } else {
    return 0;
  }
  if ((opt & 4) && !po.verify_icrc) {
    // Give it a correct ICRC: then the strict parser must accept it too, field for field.
    const RxPkt first = p;
    const std::size_t icrc_at = first.frame_len - kIcrcSize;
    store_le32(frame.data() + icrc_at,
               compute_icrc(frame.data() + first.l3_off, icrc_at - first.l3_off, first.ip_version));
    po.verify_icrc = true;
    RxPkt q;
    check(parse_frame(frame, q, po) == Verdict::kOk);
    check(q.opcode == first.opcode && q.psn == first.psn && q.dest_qp == first.dest_qp &&
          q.payload_off == first.payload_off && q.payload_len == first.payload_len &&
          q.frame_len == first.frame_len);
    sink = touch(q);
  }
  return 0;
}
