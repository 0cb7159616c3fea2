/// @file
/// The buffer bookkeeping of a Context backend that runs in the application's own process
/// (the in-process engine, the datapath card's Context in fpga/host): buffers it allocated
/// (sealed memfds, mapped here) or adopted (the caller's memfd region), how many MRs use each,
/// and which one holds an address range. Single-threaded, as those backends are.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "client/include/roce/client.h"

namespace roce::client {

struct OwnedBuffer : Buffer {
  bool own = false;   ///< allocated here: unmapped and closed when released
  unsigned mrs = 0;   ///< MRs registered on it (release() refuses while any)
};

class BufferSet {
 public:
  BufferSet() = default;
  ~BufferSet();  ///< unmaps and closes the buffers it allocated
  BufferSet(const BufferSet&) = delete;
  BufferSet& operator=(const BufferSet&) = delete;

  /// A zero-filled shared buffer of `length` bytes; null with errno set.
  OwnedBuffer* alloc(std::size_t length);
  /// The caller's memfd region (not unmapped here); null with errno EINVAL for a bad one.
  OwnedBuffer* adopt(int fd, void* addr, std::size_t length);
  /// 0, or EBUSY while MRs use it.
  int release(Buffer* b);
  /// The buffer that holds [addr, addr + length), if any.
  OwnedBuffer* holding(const void* addr, std::size_t length) const;

 private:
  std::vector<std::unique_ptr<OwnedBuffer>> bufs_;
};

}  // namespace roce::client
