/// @file
/// BTH opcode values (IBA Vol.1 9.2, Table 38; values as in Linux include/rdma/ib_pack.h).
/// Bits 7..5 select the transport, bits 4..0 the operation.
#pragma once

#include <cstdint>

namespace roce::wire {

enum class Opcode : std::uint8_t {
  // Reliable Connected (000)
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastImm = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyImm = 0x05,
  kRcWriteFirst = 0x06,
  kRcWriteMiddle = 0x07,
  kRcWriteLast = 0x08,
  kRcWriteLastImm = 0x09,
  kRcWriteOnly = 0x0A,
  kRcWriteOnlyImm = 0x0B,
  kRcReadRequest = 0x0C,
  kRcReadResponseFirst = 0x0D,
  kRcReadResponseMiddle = 0x0E,
  kRcReadResponseLast = 0x0F,
  kRcReadResponseOnly = 0x10,
  kRcAcknowledge = 0x11,
  kRcAtomicAcknowledge = 0x12,
  kRcCompareSwap = 0x13,
  kRcFetchAdd = 0x14,
  kRcSendLastInv = 0x16,
  kRcSendOnlyInv = 0x17,
  kRcFlush = 0x1C,
  kRcAtomicWrite = 0x1D,
  // Unreliable Connected (001)
  kUcSendFirst = 0x20,
  kUcSendMiddle = 0x21,
  kUcSendLast = 0x22,
  kUcSendLastImm = 0x23,
  kUcSendOnly = 0x24,
  kUcSendOnlyImm = 0x25,
  kUcWriteFirst = 0x26,
  kUcWriteMiddle = 0x27,
  kUcWriteLast = 0x28,
  kUcWriteLastImm = 0x29,
  kUcWriteOnly = 0x2A,
  kUcWriteOnlyImm = 0x2B,
  // Unreliable Datagram (011)
  kUdSendOnly = 0x64,
  kUdSendOnlyImm = 0x65,
  // Congestion Notification Packet (100), IBA Annex A17.9.3
  kCnp = 0x81,
  // Manufacturer specific (111): selective repeat between two of our stacks, on RC QPs that
  // negotiated it only (docs/loss-recovery.md, "SENDs and WRITE with immediate"). Each packet
  // is a message of its own to the wire and opens its payload with the SR header (srh.h).
  kSrSend = 0xE0,
  kSrSendImm = 0xE1,
  kSrSendInv = 0xE2,
  kSrWriteImm = 0xE3,
};

constexpr std::uint8_t raw(Opcode op) { return static_cast<std::uint8_t>(op); }

/// Transport service named by opcode bits 7..5.
enum class Transport : std::uint8_t { kRc = 0, kUc = 1, kRd = 2, kUd = 3, kCnp = 4, kVendor = 7 };

constexpr Transport transport_of(Opcode op) { return static_cast<Transport>(raw(op) >> 5); }

}  // namespace roce::wire
