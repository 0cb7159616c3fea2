/// @file
/// The one message ibv_rc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong (rdma-core
/// libibverbs/examples) exchange per QP on their TCP connection: "%04x:%06x:%06x:%s" of LID,
/// QPN, PSN and the GID as 32 hex digits, 52 bytes with the NUL. Pure, fuzzed
/// (tests/fuzz/pingpong_msg.cc).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "dataplane/wire/bytes.h"

namespace roce::pp {

constexpr std::size_t kMsgLen = 52;
/// ibv_srq_pingpong always exchanges this many messages; those past its -q are all zeros.
constexpr unsigned kSrqMaxQp = 256;

struct Dest {
  std::uint32_t lid = 0, qpn = 0, psn = 0;
  wire::Ipv6Addr gid;
  bool operator==(const Dest&) const = default;
};

std::array<char, kMsgLen> msg(const Dest& d);
/// nullopt unless the message has the three numbers and exactly 32 hex digits, and the QPN
/// and PSN fit in 24 bits. The peer's NUL is not needed: nothing past kMsgLen is read.
std::optional<Dest> dest_of(std::span<const char, kMsgLen> m);

}  // namespace roce::pp
