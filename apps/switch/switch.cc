/// @file
/// The software switch (switch.h): ECN marking, the output queues, forwarding.
#include "apps/switch/switch.h"

#include <algorithm>
#include <sstream>

#include "dataplane/wire/bytes.h"

namespace roce::fabric {

namespace {

// Offset of the IP header and its version (4 or 6), or 0 when the frame is not IP.
int ip_at(std::span<const std::uint8_t> f, std::size_t& off) {
  if (f.size() < 14) return 0;
  std::uint16_t type = wire::load_be16(f.data() + 12);
  off = 14;
  if (type == 0x8100) {
    if (f.size() < 18) return 0;
    type = wire::load_be16(f.data() + 16);
    off = 18;
  }
  if (type == 0x0800 && f.size() >= off + 20) return 4;
  if (type == 0x86DD && f.size() >= off + 40) return 6;
  return 0;
}

}  // namespace

int ecn_of(std::span<const std::uint8_t> f) {
  std::size_t off = 0;
  const int v = ip_at(f, off);
  if (v == 4) return f[off + 1] & 3;
  if (v == 6) return (f[off + 1] >> 4) & 3;
  return -1;
}

bool mark_ce(std::span<std::uint8_t> f) {
  std::size_t off = 0;
  const int v = ip_at(f, off);
  if (v == 4) {
    std::uint8_t* ip = f.data() + off;
    if ((ip[1] & 3) == 0) return false;
    // RFC 1624 incremental update of the checksum for the 16-bit word holding the TOS.
    const std::uint16_t old_word = wire::load_be16(ip);
    ip[1] |= 3;
    const std::uint16_t new_word = wire::load_be16(ip);
    const std::uint16_t old_sum = wire::load_be16(ip + 10);
    if (old_sum != 0) {  // 0: left to a checksum offload, nothing to keep right
      std::uint32_t s = static_cast<std::uint16_t>(~old_sum);
      s += static_cast<std::uint16_t>(~old_word);
      s += new_word;
      s = (s & 0xFFFF) + (s >> 16);
      s = (s & 0xFFFF) + (s >> 16);
      wire::store_be16(ip + 10, static_cast<std::uint16_t>(~s));
    }
    return true;
  }
  if (v == 6) {
    std::uint8_t* ip = f.data() + off;
    // Traffic class: the low nibble of byte 0 and the high nibble of byte 1; ECN is its
    // low two bits, byte 1 bits 5..4.
    if (((ip[1] >> 4) & 3) == 0) return false;
    ip[1] |= 0x30;
    return true;
  }
  return false;
}

OutputQueue::OutputQueue(const QueueConfig& c, std::uint64_t seed) : cfg_(c), rng_(seed) {
  c_.hist.assign(cfg_.depth_bytes / std::max<std::uint64_t>(cfg_.hist_bucket_bytes, 1) + 2, 0);
}

std::uint64_t OutputQueue::depth(std::uint64_t now) {
  while (!inflight_.empty() && inflight_.front().first <= now) {
    bytes_ -= inflight_.front().second;
    inflight_.pop_front();
  }
  return bytes_;
}

OutputQueue::Verdict OutputQueue::enqueue(std::vector<std::uint8_t> frame, std::uint64_t now) {
  const std::uint64_t d = depth(now);
  const std::uint64_t b = std::max<std::uint64_t>(cfg_.hist_bucket_bytes, 1);
  ++c_.hist[std::min<std::uint64_t>(d / b, c_.hist.size() - 1)];
  const std::uint64_t len = frame.size() + 24;  // preamble, FCS and gap on the wire
  if (d + len > cfg_.depth_bytes) {
    ++c_.dropped;
    c_.dropped_bytes += frame.size();
    return Verdict::kDropped;
  }
  const Verdict v =
      !cfg_.mark_on_dequeue && red_mark(frame, d) ? Verdict::kMarked : Verdict::kQueued;
  const std::uint64_t start = std::max(now, busy_until_);
  const std::uint64_t tx = len * 8000 / std::max<std::uint64_t>(cfg_.rate_mbps, 1);
  busy_until_ = start + tx;
  inflight_.emplace_back(busy_until_, static_cast<std::uint32_t>(len));
  bytes_ += len;
  c_.max_depth = std::max(c_.max_depth, bytes_);
  ++c_.frames;
  c_.bytes += frame.size();
  q_.push_back({std::move(frame), busy_until_, busy_until_ + cfg_.delay_ns});
  return v;
}

bool OutputQueue::red_mark(std::vector<std::uint8_t>& frame, std::uint64_t d) {
  if (!cfg_.ecn || d <= cfg_.kmin_bytes) return false;
  double p = 1.0;
  if (d < cfg_.kmax_bytes)
    p = cfg_.pmax * double(d - cfg_.kmin_bytes) / double(cfg_.kmax_bytes - cfg_.kmin_bytes);
  if (std::uniform_real_distribution<double>(0, 1)(rng_) >= p || !mark_ce(frame)) return false;
  ++c_.marked;
  return true;
}

std::uint64_t OutputQueue::depth_percentile(double p) const {
  std::uint64_t total = 0;
  for (auto n : c_.hist) total += n;
  if (total == 0) return 0;
  const auto want = static_cast<std::uint64_t>(p * double(total));
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < c_.hist.size(); ++i) {
    seen += c_.hist[i];
    if (seen > want) return (i + 1) * std::max<std::uint64_t>(cfg_.hist_bucket_bytes, 1);
  }
  return c_.hist.size() * cfg_.hist_bucket_bytes;
}

Switch::Switch(std::size_t ports, const QueueConfig& c, std::uint64_t seed, bool learn)
    : macs_(ports), learn_(learn) {
  out_.reserve(ports);
  for (std::size_t i = 0; i < ports; ++i) out_.emplace_back(c, seed + i);
}

void Switch::receive(std::size_t in, std::span<const std::uint8_t> frame, std::uint64_t now) {
  if (frame.size() < 14 || in >= out_.size()) {
    ++unknown_;
    return;
  }
  if (learn_ && (frame[6] & 1) == 0) std::copy_n(frame.begin() + 6, 6, macs_[in].b.begin());
  const bool group = (frame[0] & 1) != 0;
  if (!group) {
    for (std::size_t p = 0; p < macs_.size(); ++p) {
      if (std::equal(frame.begin(), frame.begin() + 6, macs_[p].b.begin())) {
        if (p != in) out_[p].enqueue(std::vector<std::uint8_t>(frame.begin(), frame.end()), now);
        return;
      }
    }
  }
  if (!learn_) {
    ++unknown_;
    return;
  }
  ++flooded_;
  for (std::size_t p = 0; p < out_.size(); ++p)
    if (p != in) out_[p].enqueue(std::vector<std::uint8_t>(frame.begin(), frame.end()), now);
}

std::uint64_t Switch::next_event() const {
  std::uint64_t n = 0;
  for (const auto& q : out_) {
    const std::uint64_t e = q.next_event();
    if (e != 0 && (n == 0 || e < n)) n = e;
  }
  return n;
}

std::string Switch::json() const {
  std::ostringstream o;
  o << "{\"unknown_dst\":" << unknown_ << ",\"flooded\":" << flooded_ << ",\"outputs\":[";
  for (std::size_t i = 0; i < out_.size(); ++i) {
    const auto& q = out_[i];
    const auto& c = q.counters();
    o << (i ? "," : "") << "{\"port\":" << i << ",\"frames\":" << c.frames
      << ",\"bytes\":" << c.bytes << ",\"marked\":" << c.marked << ",\"dropped\":" << c.dropped
      << ",\"dropped_bytes\":" << c.dropped_bytes << ",\"max_depth\":" << c.max_depth
      << ",\"p50_depth\":" << q.depth_percentile(0.5)
      << ",\"p99_depth\":" << q.depth_percentile(0.99)
      << ",\"hist_bucket\":" << q.config().hist_bucket_bytes << ",\"hist\":[";
    // Up to the last non-empty bucket.
    std::size_t last = 0;
    for (std::size_t k = 0; k < c.hist.size(); ++k)
      if (c.hist[k]) last = k + 1;
    for (std::size_t k = 0; k < last; ++k) o << (k ? "," : "") << c.hist[k];
    o << "]}";
  }
  o << "]}";
  return o.str();
}

}  // namespace roce::fabric
