// The rsockets calls rstream and riostream do not make, as a client of rstream's server
// (tests/integration/rsocket_api.sh: `rstream -T v -T b -S 16 -C 1`, which receives bytes 0..15,
// sends 0..15, receives 16..31, sends 16..31 and closes): a non-blocking rconnect (EINPROGRESS)
// finished by rpoll over an rsocket and a pipe together, rgetsockopt/rsetsockopt, rfcntl,
// rgetpeername/rgetsockname, rwritev, MSG_PEEK, rsendmsg, rselect, rreadv, end of stream, the
// errors after the peer is gone and for what is not offered (SOCK_DGRAM).
//   rsocket_api_client SERVER_IP PORT CLIENT_IP
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

bool pattern(const std::uint8_t* b, int n, int first) {
  for (int i = 0; i < n; ++i)
    if (b[i] != static_cast<std::uint8_t>(first + i)) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: rsocket_api_client SERVER_IP PORT CLIENT_IP\n");
    return 2;
  }
  sockaddr_in srv{};
  srv.sin_family = AF_INET;
  srv.sin_port = htons(static_cast<std::uint16_t>(std::atoi(argv[2])));
  inet_pton(AF_INET, argv[1], &srv.sin_addr);

  errno = 0;
  check(rsocket(AF_INET, SOCK_DGRAM, 0) == -1 && errno == EOPNOTSUPP, "SOCK_DGRAM: EOPNOTSUPP");
  errno = 0;
  check(rsocket(AF_UNIX, SOCK_STREAM, 0) == -1 && errno == EAFNOSUPPORT, "AF_UNIX: EAFNOSUPPORT");
  errno = 0;
  check(rclose(12345) == -1 && errno == EBADF, "rclose of no rsocket: EBADF");

  const int rs = rsocket(AF_INET, SOCK_STREAM, 0);
  if (rs < 0) {
    std::perror("rsocket");
    return 1;
  }
  int v = 64;
  check(rsetsockopt(rs, SOL_RDMA, RDMA_SQSIZE, &v, sizeof v) == 0, "RDMA_SQSIZE set");
  socklen_t len = sizeof v;
  v = 0;
  check(rgetsockopt(rs, SOL_RDMA, RDMA_SQSIZE, &v, &len) == 0 && v == 64, "RDMA_SQSIZE reads 64");
  v = 1;
  check(rsetsockopt(rs, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v) == 0, "TCP_NODELAY set");
  v = 0;
  len = sizeof v;
  check(rgetsockopt(rs, IPPROTO_TCP, TCP_NODELAY, &v, &len) == 0 && v == 1, "TCP_NODELAY reads 1");
  linger lg{1, 0};
  check(rsetsockopt(rs, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0, "SO_LINGER set");
  v = 1 << 16;
  check(rsetsockopt(rs, SOL_SOCKET, SO_RCVBUF, &v, sizeof v) == 0, "SO_RCVBUF set");
  len = sizeof v;
  check(rgetsockopt(rs, SOL_SOCKET, SO_RCVBUF, &v, &len) == 0 && v == 1 << 17,
        "SO_RCVBUF reads twice the size (as rdma-core)");
  errno = 0;
  check(rsetsockopt(rs, SOL_SOCKET, SO_BROADCAST, &v, sizeof v) == -1 && errno == ENOTSUP,
        "SO_BROADCAST: ENOTSUP");

  check(rfcntl(rs, F_SETFL, O_NONBLOCK) == 0 && (rfcntl(rs, F_GETFL) & O_NONBLOCK), "O_NONBLOCK");
  errno = 0;
  int rc = rconnect(rs, reinterpret_cast<sockaddr*>(&srv), sizeof srv);
  check(rc == 0 || errno == EINPROGRESS, "non-blocking rconnect: 0 or EINPROGRESS");
  std::uint8_t buf[64];
  errno = 0;
  if (rc) check(rrecv(rs, buf, 16, 0) == -1 && errno == EAGAIN, "rrecv while connecting: EAGAIN");

  int p[2];
  if (pipe(p)) return 1;
  pollfd fds[2] = {{p[0], POLLIN, 0}, {rs, POLLOUT, 0}};
  bool writable = false, pipe_quiet = true;
  for (int i = 0; i < 50 && !writable; ++i) {
    rc = rpoll(fds, 2, 200);
    if (rc < 0) break;
    writable = fds[1].revents & POLLOUT;
    pipe_quiet = pipe_quiet && fds[0].revents == 0;
  }
  check(writable && pipe_quiet,
        "rpoll(pipe, rsocket): the rsocket becomes writable, the pipe stays quiet");
  int err = -1;
  len = sizeof err;
  check(rgetsockopt(rs, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0, "SO_ERROR 0");

  sockaddr_in a{};
  len = sizeof a;
  check(rgetpeername(rs, reinterpret_cast<sockaddr*>(&a), &len) == 0 && len == sizeof a &&
            a.sin_addr.s_addr == srv.sin_addr.s_addr && a.sin_port == srv.sin_port,
        "rgetpeername: the server's address and port");
  in_addr me{};
  inet_pton(AF_INET, argv[3], &me);
  len = sizeof a;
  check(rgetsockname(rs, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
            a.sin_addr.s_addr == me.s_addr,
        "rgetsockname: our address");

  check(rfcntl(rs, F_SETFL, 0) == 0, "back to blocking");
  std::uint8_t out[32];
  for (int i = 0; i < 32; ++i) out[i] = static_cast<std::uint8_t>(i);
  iovec w[2] = {{out, 8}, {out + 8, 8}};
  check(rwritev(rs, w, 2) == 16, "rwritev 8 + 8 bytes");

  check(write(p[1], "x", 1) == 1, "a byte into the pipe");
  fds[0] = {p[0], POLLIN, 0};
  fds[1] = {rs, POLLIN, 0};
  bool both = false;
  // The pipe is readable at once: rpoll returns with it until the server's bytes are in too.
  for (int i = 0; i < 200000 && !both; ++i) {
    rc = rpoll(fds, 2, 200);
    both = rc == 2 && (fds[0].revents & POLLIN) && (fds[1].revents & POLLIN);
  }
  check(both, "rpoll(pipe, rsocket): both readable, count 2");
  std::memset(buf, 0, sizeof buf);
  check(rrecv(rs, buf, 4, MSG_PEEK) == 4 && pattern(buf, 4, 0), "MSG_PEEK sees 0..3");
  std::memset(buf, 0, sizeof buf);
  check(rrecv(rs, buf, 16, MSG_WAITALL) == 16 && pattern(buf, 16, 0), "rrecv MSG_WAITALL 0..15");

  msghdr m{};
  iovec mi{out + 16, 16};
  m.msg_iov = &mi;
  m.msg_iovlen = 1;
  check(rsendmsg(rs, &m, 0) == 16, "rsendmsg 16..31");
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(rs, &rd);
  timeval tv{5, 0};
  check(rselect(rs + 1, &rd, nullptr, nullptr, &tv) == 1 && FD_ISSET(rs, &rd), "rselect: readable");
  std::memset(buf, 0, sizeof buf);
  iovec r[2] = {{buf, 8}, {buf + 8, 8}};
  ssize_t got = 0;
  for (int i = 0; i < 16 && got < 16; ++i) {
    iovec rest[2] = {r[0], r[1]};
    int cnt = 2;
    iovec* start = rest;
    if (got >= 8) {
      start = rest + 1;
      start->iov_base = buf + got;
      start->iov_len = static_cast<std::size_t>(16 - got);
      cnt = 1;
    } else {
      rest[0].iov_base = buf + got;
      rest[0].iov_len = static_cast<std::size_t>(8 - got);
    }
    const ssize_t n = rreadv(rs, start, cnt);
    if (n <= 0) break;
    got += n;
  }
  check(got == 16 && pattern(buf, 16, 16), "rreadv 8 + 8 bytes: 16..31");

  // The server closes: end of stream, then sends fail.
  check(rrecv(rs, buf, sizeof buf, 0) == 0, "rrecv after the server closed: 0 (end of stream)");
  errno = 0;
  ssize_t s = 0;
  for (int i = 0; i < 10 && s >= 0; ++i) s = rsend(rs, out, 16, 0);
  check(s == -1 && errno == ECONNRESET, "rsend after the server closed: ECONNRESET");
  check(rclose(rs) == 0, "rclose");
  errno = 0;
  check(rsend(rs, out, 1, 0) == -1 && errno == EBADF, "rsend after rclose: EBADF");
  std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "OK", failures);
  return failures ? 1 : 0;
}
