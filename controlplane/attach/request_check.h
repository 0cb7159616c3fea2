/// @file
/// The pure part of the attach server's request handling (attach_server.cc): what it checks
/// of a control request before it looks at any table or engine, and how it names resources.
/// No descriptors, no engine, no DPDK: tests/fuzz/attach_control.cc drives it with sequences
/// of requests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "controlplane/attach/protocol.h"

namespace roce::attach {

/// CQ depth, QP and SRQ work requests a client may ask for.
inline constexpr std::uint32_t kMaxDepth = 1u << 16;

/// Q_Keys with the high bit set are privileged (IBA 10.2.4; the kernel wants CAP_NET_RAW).
inline constexpr std::uint32_t kPrivilegedQkey = 0x8000'0000u;

/// What the configuration and the client's credentials allow.
struct RequestLimits {
  std::uint64_t max_memory = 1ull << 30;  ///< AttachQuotas::max_memory
  bool privileged = false;                ///< the client's uid is in privileged_uids
};

/// The errno a request gets before anything is looked up (0: go on). `whole`: it came in one
/// piece, untruncated; `hello`: the client said hello already; `nfds`: descriptors passed.
/// The handlers check what needs their tables (handles, quotas, references) themselves.
int check_request(const Request& rq, bool whole, bool hello, std::size_t nfds,
                  const RequestLimits& lim);

/// A client's handles: a counter that skips 0 (no resource) and, once it wrapped after
/// `limit`, every handle still in use. Among (live + 1) candidates one is free, and the live
/// ones are bounded by the quotas (far below 2^32), so next() returns at once; 0 only when
/// every handle up to `limit` is live (a test's tiny limit).
class HandleCounter {
 public:
  explicit HandleCounter(std::uint32_t limit = 0xFFFF'FFFFu) : limit_(limit < 1 ? 1 : limit) {}
  std::uint32_t next(const std::function<bool(std::uint32_t)>& live) {
    for (std::uint64_t n = 0; n < limit_; ++n) {
      const std::uint32_t h = next_;
      next_ = h >= limit_ ? 1 : h + 1;
      if (h != 0 && !live(h)) return h;
    }
    return 0;
  }

 private:
  std::uint32_t limit_;
  std::uint32_t next_ = 1;
};

}  // namespace roce::attach
