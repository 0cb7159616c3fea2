// LD_PRELOADed into the client of a perftest pair by verbs_bench.sh (in-process on memif):
// connect() to a TCP port that refuses (ECONNREFUSED) is tried again every 20 ms for up to 20 s.
// The server there can only listen once its device is open, and its device (the memif link's
// server end) opens only when the client's end joins; the client then connects at once and
// perftest 4.5 gives up on the first refusal (ethernet_client_connect,
// src/perftest_communication.c). Only the out-of-band exchange is touched: nothing that perftest
// measures.
#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>
#include <time.h>

extern "C" int connect(int fd, const sockaddr* addr, socklen_t len) {
  using Fn = int (*)(int, const sockaddr*, socklen_t);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "connect"));
  int type = 0;
  socklen_t tl = sizeof type;
  const bool tcp = addr != nullptr && addr->sa_family == AF_INET &&
                   getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM;
  for (int i = 0;; ++i) {
    const int rc = real(fd, addr, len);
    if (rc == 0 || !tcp || errno != ECONNREFUSED || i >= 1000) return rc;
    const timespec pause{0, 20'000'000};
    nanosleep(&pause, nullptr);
  }
}
