/// @file
/// libroce's Context on the `datapath` card (fpga/model/datapath.h): an application's RC QPs,
/// MRs and CQs live on the card, reached only through its DatapathDriver (port writes and
/// descriptors), so code written on Context (roce-perf's perftest, roced's hosted services)
/// runs its WRITEs and READs on the card unchanged. What the card does not do is refused with
/// rdma-core's codes: UD/UC QPs, SRQs and receives (EOPNOTSUPP), SEND, WRITE_IMM and atomics
/// (EINVAL at post_send, as a provider refuses an opcode its QP type lacks), rdma_cm (the
/// software engine keeps QP1). Inline sends take their data from the registered buffer (the
/// card DMAs it). Single-threaded: the thread of the loop that runs the card.
#pragma once

#include <roce/client.h>

#include <functional>
#include <memory>
#include <optional>

#include "fpga/model/datapath.h"

namespace roce::fpga {

struct CardContextOptions {
  DatapathDriver* driver = nullptr;
  /// One poll of the loop that runs the card (its DatapathOffload's emit and rx).
  std::function<void()> progress;
  /// The MAC of an IPv4 neighbour, for address vectors without one.
  std::function<std::optional<wire::MacAddr>(wire::Ipv4Addr)> resolve;
  client::PortInfo port;
};

/// Null with errno EINVAL when `o.driver` is null.
std::unique_ptr<client::Context> open_card_context(CardContextOptions o);

}  // namespace roce::fpga
