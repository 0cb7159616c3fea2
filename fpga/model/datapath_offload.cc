// The `datapath` mode on a poll loop's port (datapath_offload.h).
#include "fpga/model/datapath_offload.h"

namespace roce::fpga {

namespace {
DatapathCard::Config on_card(DatapathCard::Config c) {
  c.net.lcore = kCardLcore;
  return c;
}
}  // namespace

DatapathOffload::DatapathOffload(DeviceModel& stream, DatapathCard::Config card)
    : stream_(stream), card_(on_card(std::move(card))) {}

bool DatapathOffload::rx(std::span<const std::uint8_t> frame) {
  if (!stream_.rx(frame)) return false;             // the ICRC unit or the parser dropped it
  if (!card_.net2dev_rx(frame, now_)) return true;  // not a QP of the card: the host's
  ++to_card_;
  return false;
}

std::span<const std::uint8_t> DatapathOffload::tx(std::span<const std::uint8_t> frame) {
  return stream_.tx(frame);
}

std::size_t DatapathOffload::emit(std::uint64_t now_ns,
                                  const std::function<void(std::span<const std::uint8_t>)>& send) {
  now_ = now_ns;
  const std::uint64_t wrs = card_.counter(DevCounter::kWqIn);
  std::size_t sent = 0;
  card_.run(now_ns, [&](std::span<const std::uint8_t> f) {
    ++sent;
    send(f);
  });
  return sent + static_cast<std::size_t>(card_.counter(DevCounter::kWqIn) - wrs);
}

std::array<std::uint64_t, kDevCounters> DatapathOffload::counters() {
  std::array<std::uint64_t, kDevCounters> c = stream_.counters();
  const auto& k = card_.counters();
  const auto add = [&](DevCounter d) {
    c[static_cast<std::size_t>(d)] += k[static_cast<std::size_t>(d)];
  };
  // Received frames went through the stream stages first and are counted there already.
  for (DevCounter d :
       {DevCounter::kTxPkgs, DevCounter::kRoceTxPkgs, DevCounter::kIbvTxPkgs,
        DevCounter::kPsnDropCnt, DevCounter::kRetransCnt, DevCounter::kWqIn, DevCounter::kCqOut})
    add(d);
  // The card's transport writes the ICRC of every frame it sends.
  c[static_cast<std::size_t>(DevCounter::kTxIcrcGen)] +=
      k[static_cast<std::size_t>(DevCounter::kRoceTxPkgs)];
  return c;
}

}  // namespace roce::fpga
