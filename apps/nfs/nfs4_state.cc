/// @file
/// Byte-range locks of one file (nfs4_state.h).
#include "apps/nfs/nfs4_state.h"

#include <algorithm>

namespace roce::nfs::v4 {

std::optional<Range> FileLocks::conflict(const Owner& who, bool write, std::uint64_t start,
                                         std::uint64_t end) const {
  for (const auto& r : ranges_)
    if (r.owner != who && (write || r.write) && r.start <= end && start <= r.end) return r;
  return std::nullopt;
}

void FileLocks::unlock(const Owner& who, std::uint64_t start, std::uint64_t end) {
  std::vector<Range> out;
  out.reserve(ranges_.size() + 1);
  for (auto& r : ranges_) {
    if (r.owner != who || r.end < start || end < r.start) {
      out.push_back(std::move(r));
      continue;
    }
    if (r.start < start) {  // the part before stays
      Range a = r;
      a.end = start - 1;
      out.push_back(std::move(a));
    }
    if (end < r.end) {  // the part after stays
      Range b = r;
      b.start = end + 1;
      out.push_back(std::move(b));
    }
  }
  ranges_ = std::move(out);
}

bool FileLocks::lock(const Owner& who, bool write, std::uint64_t start, std::uint64_t end,
                     std::size_t max) {
  std::vector<Range> saved = ranges_;
  unlock(who, start, end);
  if (ranges_.size() + 1 > max) {
    ranges_ = std::move(saved);
    return false;
  }
  ranges_.push_back(Range{who, write, start, end});
  return true;
}

bool FileLocks::holds(const Owner& who) const {
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [&](const Range& r) { return r.owner == who; });
}

}  // namespace roce::nfs::v4
