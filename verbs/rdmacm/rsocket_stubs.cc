/// @file
/// rsockets (rdma/rsocket.h) are not offered: every call fails with ENOSYS. They exist so that
/// programs linked against librdmacm.so.1 load (Debian's binaries bind all symbols at start).
#include <rdma/rsocket.h>

#include <cerrno>

#define RDMACM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
int nosys() {
  errno = ENOSYS;
  return -1;
}
}  // namespace

RDMACM_EXPORT int rsocket(int, int, int) { return nosys(); }
RDMACM_EXPORT int rbind(int, const struct sockaddr*, socklen_t) { return nosys(); }
RDMACM_EXPORT int rlisten(int, int) { return nosys(); }
RDMACM_EXPORT int raccept(int, struct sockaddr*, socklen_t*) { return nosys(); }
RDMACM_EXPORT int rconnect(int, const struct sockaddr*, socklen_t) { return nosys(); }
RDMACM_EXPORT int rshutdown(int, int) { return nosys(); }
RDMACM_EXPORT int rclose(int) { return nosys(); }
RDMACM_EXPORT ssize_t rrecv(int, void*, size_t, int) { return nosys(); }
RDMACM_EXPORT ssize_t rrecvfrom(int, void*, size_t, int, struct sockaddr*, socklen_t*) {
  return nosys();
}
RDMACM_EXPORT ssize_t rrecvmsg(int, struct msghdr*, int) { return nosys(); }
RDMACM_EXPORT ssize_t rsend(int, const void*, size_t, int) { return nosys(); }
RDMACM_EXPORT ssize_t rsendto(int, const void*, size_t, int, const struct sockaddr*, socklen_t) {
  return nosys();
}
RDMACM_EXPORT ssize_t rsendmsg(int, const struct msghdr*, int) { return nosys(); }
RDMACM_EXPORT ssize_t rread(int, void*, size_t) { return nosys(); }
RDMACM_EXPORT ssize_t rreadv(int, const struct iovec*, int) { return nosys(); }
RDMACM_EXPORT ssize_t rwrite(int, const void*, size_t) { return nosys(); }
RDMACM_EXPORT ssize_t rwritev(int, const struct iovec*, int) { return nosys(); }
RDMACM_EXPORT int rpoll(struct pollfd*, nfds_t, int) { return nosys(); }
RDMACM_EXPORT int rselect(int, fd_set*, fd_set*, fd_set*, struct timeval*) { return nosys(); }
RDMACM_EXPORT int rgetpeername(int, struct sockaddr*, socklen_t*) { return nosys(); }
RDMACM_EXPORT int rgetsockname(int, struct sockaddr*, socklen_t*) { return nosys(); }
RDMACM_EXPORT int rsetsockopt(int, int, int, const void*, socklen_t) { return nosys(); }
RDMACM_EXPORT int rgetsockopt(int, int, int, void*, socklen_t*) { return nosys(); }
RDMACM_EXPORT int rfcntl(int, int, ...) { return nosys(); }
RDMACM_EXPORT off_t riomap(int, void*, size_t, int, int, off_t) { return nosys(); }
RDMACM_EXPORT int riounmap(int, void*, size_t) { return nosys(); }
RDMACM_EXPORT size_t riowrite(int, const void*, size_t, off_t, int) {
  errno = ENOSYS;
  return 0;
}
