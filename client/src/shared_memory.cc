/// @file
/// make_buffer, map_fd (shared_memory.h).
#include "client/src/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace roce::client {

int make_buffer(std::size_t length, void** addr) {
  if (length == 0) {
    errno = EINVAL;
    return -1;
  }
  const int fd = ::memfd_create("roce-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  void* p = map_fd(fd, length);
  if (p == nullptr) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  *addr = p;
  return fd;
}

void* map_fd(int fd, std::size_t length) {
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace roce::client
