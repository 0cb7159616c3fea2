#include "dataplane/wire/opcode_table.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace roce::wire {
namespace {

TEST(OpcodeTable, KnowsEveryRcUcUdOpcodeAndCnp) {
  // RC: 0x00-0x14, 0x16, 0x17, 0x1C, 0x1D (25); UC: 0x20-0x2B (12); UD: 0x64, 0x65; CNP 0x81;
  // selective repeat's manufacturer-specific 0xE0-0xE3.
  EXPECT_EQ(kKnownOpcodeCount, 25u + 12u + 2u + 1u + 4u);
  for (unsigned op = 0; op <= 0x14; ++op) EXPECT_TRUE(opcode_info(std::uint8_t(op)).valid()) << op;
  EXPECT_FALSE(opcode_info(std::uint8_t{0x15}).valid());
  for (unsigned op = 0x20; op <= 0x2B; ++op) EXPECT_TRUE(opcode_info(std::uint8_t(op)).valid());
  for (unsigned op = 0x2C; op < 0x64; ++op) EXPECT_FALSE(opcode_info(std::uint8_t(op)).valid());
  EXPECT_TRUE(opcode_info(Opcode::kCnp).valid());
  EXPECT_FALSE(opcode_info(std::uint8_t{0x80}).valid());
  EXPECT_FALSE(opcode_info(std::uint8_t{0xFF}).valid());
  for (unsigned op = 0xE0; op <= 0xE3; ++op) {
    EXPECT_TRUE(opcode_info(std::uint8_t(op)).valid());
    EXPECT_TRUE(opcode_info(std::uint8_t(op)).mask.has(OpMask::kSr | OpMask::kRequest));
  }
  EXPECT_FALSE(opcode_info(std::uint8_t{0xE4}).valid());
}

TEST(OpcodeTable, NamesAreUniqueAndMatchTransport) {
  std::set<std::string> names;
  for (Opcode op : kKnownOpcodes) {
    const std::string name(opcode_info(op).name);
    EXPECT_TRUE(names.insert(name).second) << name;
    switch (transport_of(op)) {
      case Transport::kRc:
        EXPECT_EQ(name.substr(0, 3), "RC_");
        break;
      case Transport::kUc:
        EXPECT_EQ(name.substr(0, 3), "UC_");
        break;
      case Transport::kUd:
        EXPECT_EQ(name.substr(0, 3), "UD_");
        break;
      case Transport::kCnp:
        EXPECT_EQ(name, "CNP");
        break;
      case Transport::kVendor:
        EXPECT_EQ(name.substr(0, 3), "SR_");
        break;
      default:
        ADD_FAILURE() << name;
    }
  }
}

// Header lengths after the BTH, as rxe_opcode.c lists them (BTH + extension headers).
TEST(OpcodeTable, HeaderLengthsMatchRxe) {
  struct Row {
    Opcode op;
    unsigned len;
  };
  const Row rows[] = {
      {Opcode::kRcSendFirst, 12},
      {Opcode::kRcSendLastImm, 16},
      {Opcode::kRcSendOnlyImm, 16},
      {Opcode::kRcWriteFirst, 28},
      {Opcode::kRcWriteMiddle, 12},
      {Opcode::kRcWriteLastImm, 16},
      {Opcode::kRcWriteOnly, 28},
      {Opcode::kRcWriteOnlyImm, 32},
      {Opcode::kRcReadRequest, 28},
      {Opcode::kRcReadResponseFirst, 16},
      {Opcode::kRcReadResponseMiddle, 12},
      {Opcode::kRcReadResponseLast, 16},
      {Opcode::kRcReadResponseOnly, 16},
      {Opcode::kRcAcknowledge, 16},
      {Opcode::kRcAtomicAcknowledge, 24},
      {Opcode::kRcCompareSwap, 40},
      {Opcode::kRcFetchAdd, 40},
      {Opcode::kRcSendLastInv, 16},
      {Opcode::kRcSendOnlyInv, 16},
      {Opcode::kRcFlush, 32},
      {Opcode::kRcAtomicWrite, 28},
      {Opcode::kUcWriteOnlyImm, 32},
      {Opcode::kUdSendOnly, 20},
      {Opcode::kUdSendOnlyImm, 24},
      {Opcode::kCnp, 28},
  };
  for (const Row& r : rows) EXPECT_EQ(opcode_info(r.op).hdr_len, r.len) << opcode_info(r.op).name;
}

TEST(OpcodeTable, OffsetsFollowIbaOrder) {
  EXPECT_EQ(opcode_info(Opcode::kRcWriteOnlyImm).offset(Ext::kReth), 12);
  EXPECT_EQ(opcode_info(Opcode::kRcWriteOnlyImm).offset(Ext::kImmDt), 28);
  EXPECT_EQ(opcode_info(Opcode::kRcAtomicAcknowledge).offset(Ext::kAeth), 12);
  EXPECT_EQ(opcode_info(Opcode::kRcAtomicAcknowledge).offset(Ext::kAtomicAckEth), 16);
  EXPECT_EQ(opcode_info(Opcode::kUdSendOnlyImm).offset(Ext::kDeth), 12);
  EXPECT_EQ(opcode_info(Opcode::kUdSendOnlyImm).offset(Ext::kImmDt), 20);
  EXPECT_EQ(opcode_info(Opcode::kRcFlush).offset(Ext::kFeth), 12);
  EXPECT_EQ(opcode_info(Opcode::kRcFlush).offset(Ext::kReth), 16);
  EXPECT_EQ(opcode_info(Opcode::kCnp).offset(Ext::kCnpPad), 12);
  EXPECT_FALSE(opcode_info(Opcode::kRcReadResponseMiddle).has(Ext::kAeth));
}

TEST(OpcodeTable, HeaderLengthIsBthPlusExtensions) {
  for (Opcode op : kKnownOpcodes) {
    const OpcodeInfo& i = opcode_info(op);
    std::size_t len = kBthSize;
    for (std::size_t e = 0; e < kExtCount; ++e)
      if (i.has(static_cast<Ext>(e))) len += ext_size(static_cast<Ext>(e));
    EXPECT_EQ(i.hdr_len, len) << i.name;
  }
}

TEST(OpcodeTable, RcAndUcShareOperations) {
  for (unsigned op = 0; op <= 0x0B; ++op) {
    const OpcodeInfo& rc = opcode_info(std::uint8_t(op));
    const OpcodeInfo& uc = opcode_info(std::uint8_t(0x20 + op));
    EXPECT_EQ(rc.mask, uc.mask) << rc.name;
    EXPECT_EQ(rc.hdr_len, uc.hdr_len);
    EXPECT_EQ(rc.name.substr(3), uc.name.substr(3));
  }
}

TEST(OpcodeTable, MessagePositionAndDirection) {
  for (Opcode op : kKnownOpcodes) {
    const OpcodeInfo& i = opcode_info(op);
    const int pos =
        i.mask.has(OpMask::kStart) + i.mask.has(OpMask::kMiddle) * 2 + i.mask.has(OpMask::kEnd) * 4;
    // Selective repeat's packets are messages of their own to no one but sr_msg.cc: no position.
    if (i.mask.has(OpMask::kSr))
      EXPECT_EQ(pos, 0) << i.name;
    else
      EXPECT_TRUE(pos == 1 || pos == 2 || pos == 4 || pos == 5) << i.name << " position " << pos;
    if (!i.mask.has(OpMask::kCnp)) {
      EXPECT_NE(i.mask.has(OpMask::kRequest), i.mask.has(OpMask::kResponse)) << i.name;
    }
  }
  EXPECT_TRUE(opcode_info(Opcode::kRcSendFirst).mask.has(OpMask::kStart));
  EXPECT_FALSE(opcode_info(Opcode::kRcSendFirst).mask.has(OpMask::kEnd));
  EXPECT_TRUE(opcode_info(Opcode::kRcSendOnly).mask.has(OpMask::kStart | OpMask::kEnd));
  EXPECT_TRUE(opcode_info(Opcode::kRcReadResponseMiddle).mask.has(OpMask::kMiddle));
  EXPECT_TRUE(opcode_info(Opcode::kRcAcknowledge).mask.has(OpMask::kResponse | OpMask::kAck));
  EXPECT_TRUE(opcode_info(Opcode::kRcReadRequest).mask.has(OpMask::kRequest | OpMask::kRead));
  EXPECT_TRUE(opcode_info(Opcode::kRcCompareSwap).mask.has(OpMask::kAtomic));
}

TEST(OpcodeTable, PayloadAndReceiveWqe) {
  EXPECT_FALSE(opcode_info(Opcode::kRcReadRequest).mask.has(OpMask::kPayload));
  EXPECT_FALSE(opcode_info(Opcode::kRcAcknowledge).mask.has(OpMask::kPayload));
  EXPECT_FALSE(opcode_info(Opcode::kRcFetchAdd).mask.has(OpMask::kPayload));
  EXPECT_FALSE(opcode_info(Opcode::kCnp).mask.has(OpMask::kPayload));
  EXPECT_TRUE(opcode_info(Opcode::kRcReadResponseOnly).mask.has(OpMask::kPayload));
  EXPECT_EQ(opcode_info(Opcode::kRcAtomicWrite).fixed_payload, 8);
  // SENDs and WRITE with immediate consume a receive WQE; plain WRITEs do not.
  EXPECT_TRUE(opcode_info(Opcode::kRcSendMiddle).mask.has(OpMask::kRecvWqe));
  EXPECT_TRUE(opcode_info(Opcode::kRcWriteLastImm).mask.has(OpMask::kRecvWqe));
  EXPECT_TRUE(opcode_info(Opcode::kUcWriteOnlyImm).mask.has(OpMask::kRecvWqe));
  EXPECT_FALSE(opcode_info(Opcode::kRcWriteLast).mask.has(OpMask::kRecvWqe));
  EXPECT_TRUE(opcode_info(Opcode::kUdSendOnlyImm).mask.has(OpMask::kRecvWqe | OpMask::kImm));
  EXPECT_TRUE(opcode_info(Opcode::kRcSendOnlyInv).mask.has(OpMask::kInvalidate));
}

}  // namespace
}  // namespace roce::wire
