/// @file
/// What Context backends that run in the application's own process (the in-process engine,
/// the datapath card's Context in fpga/host) share: the buffer bookkeeping (buffers allocated
/// as sealed memfds mapped here, or adopted from the caller's memfd region; how many MRs use
/// each; which one holds an address range) and the lists their objects live in.
/// Single-threaded, as those backends are.
#pragma once

#include <roce/client.h>

#include <cerrno>
#include <cstddef>
#include <memory>
#include <vector>

namespace roce::client {

struct OwnedBuffer : Buffer {
  bool own = false;  ///< allocated here: unmapped and closed when released
  unsigned mrs = 0;  ///< MRs registered on it (release() refuses while any)
};

/// A backend's objects: kept in a list that owns them, forgotten when destroyed.
template <class T>
T* keep(std::vector<std::unique_ptr<T>>& v, std::unique_ptr<T> p) {
  v.push_back(std::move(p));
  return v.back().get();
}
template <class T>
void forget(std::vector<std::unique_ptr<T>>& v, const T* p) {
  std::erase_if(v, [p](const auto& u) { return u.get() == p; });
}
/// rdma-core's way for calls that create: null, with errno `e`.
inline std::nullptr_t fail_null(int e) {
  errno = e;
  return nullptr;
}

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
