/// @file
/// BufferSet (buffers.h).
#include <roce/buffers.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "client/src/shared_memory.h"

namespace roce::client {

namespace {
void unmap(OwnedBuffer& b) {
  if (!b.own) return;
  ::munmap(b.addr, b.length);
  ::close(b.fd);
}
}  // namespace

BufferSet::~BufferSet() {
  for (auto& b : bufs_) unmap(*b);
}

OwnedBuffer* BufferSet::alloc(std::size_t length) {
  void* addr = nullptr;
  const int fd = make_buffer(length, &addr);
  if (fd < 0) return nullptr;
  auto b = std::make_unique<OwnedBuffer>();
  b->addr = addr;
  b->length = length;
  b->fd = fd;
  b->own = true;
  bufs_.push_back(std::move(b));
  return bufs_.back().get();
}

OwnedBuffer* BufferSet::adopt(int fd, void* addr, std::size_t length) {
  // fd -1: memory without a memfd, which only an in-process engine can reach (the verbs
  // provider registers a program's own memory so).
  if (fd < -1 || addr == nullptr || length == 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto b = std::make_unique<OwnedBuffer>();
  b->addr = addr;
  b->length = length;
  b->fd = fd;
  bufs_.push_back(std::move(b));
  return bufs_.back().get();
}

int BufferSet::release(Buffer* buffer) {
  auto* b = static_cast<OwnedBuffer*>(buffer);
  if (b->mrs != 0) return EBUSY;
  unmap(*b);
  std::erase_if(bufs_, [b](const auto& u) { return u.get() == b; });
  return 0;
}

OwnedBuffer* BufferSet::holding(const void* addr, std::size_t length) const {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  for (const auto& b : bufs_) {
    const auto s = reinterpret_cast<std::uintptr_t>(b->addr);
    if (a >= s && length <= b->length && a - s <= b->length - length) return b.get();
  }
  return nullptr;
}

}  // namespace roce::client
