/// @file
/// runtime::Oob (oob.h).
#include "runtime/oob.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "controlplane/tcp.h"

namespace roce::runtime {

Oob::Oob(Poller& env, std::string server, unsigned port, double timeout_s)
    : env_(env), server_(std::move(server)), port_(port), timeout_s_(timeout_s) {
  if (client()) return;
  try {
    listen_fd_ = ctl::tcp_listen(wire::Ipv4Addr{}, static_cast<std::uint16_t>(port_));
  } catch (const std::runtime_error& e) {
    fail(e.what());
  }
  fcntl(listen_fd_, F_SETFL, O_NONBLOCK);
}

Oob::Oob(Poller& env, int connected_fd, double timeout_s)
    : env_(env), port_(0), timeout_s_(timeout_s), fd_(connected_fd) {
  ctl::tcp_nodelay(fd_);
  fcntl(fd_, F_SETFL, O_NONBLOCK);
}

Oob::~Oob() {
  close();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void Oob::open() {
  if (fd_ >= 0) return;  // accepted elsewhere
  if (!client()) {
    if (!env_.until([&] { return (fd_ = ::accept(listen_fd_, nullptr, nullptr)) >= 0; },
                    timeout_s_))
      fail("no client connected to port " + std::to_string(port_));
    ::close(listen_fd_);
    listen_fd_ = -1;
  } else {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(server_.c_str(), std::to_string(port_).c_str(), &hints, &res) != 0)
      fail("cannot resolve " + server_);
    int err = 0;
    const bool ok = env_.until(
        [&] {
          fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
          if (::connect(fd_, res->ai_addr, res->ai_addrlen) == 0) return true;
          err = errno;
          ::close(fd_);
          fd_ = -1;
          if (err != ECONNREFUSED) return true;
          ::usleep(100000);  // the server may not listen yet
          return false;
        },
        timeout_s_);
    freeaddrinfo(res);
    if (!ok || fd_ < 0)
      fail("couldn't connect to " + server_ + ":" + std::to_string(port_) + ": " +
           std::strerror(err ? err : ETIMEDOUT));
  }
  ctl::tcp_nodelay(fd_);
  fcntl(fd_, F_SETFL, O_NONBLOCK);
}

void transfer(Poller& env, int fd, void* buf, std::size_t n, bool write, double to) {
  std::size_t done = 0;
  const bool ok = env.until(
      [&] {
        const ssize_t r = write ? ::send(fd, static_cast<char*>(buf) + done, n - done, MSG_NOSIGNAL)
                                : ::recv(fd, static_cast<char*>(buf) + done, n - done, 0);
        if (r > 0) done += static_cast<std::size_t>(r);
        if (r == 0 && !write) fail("the peer closed the exchange connection");
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
          fail(std::string("exchange: ") + std::strerror(errno));
        return done == n;
      },
      to);
  if (!ok) fail("timed out in the out-of-band exchange");
}

void Oob::send(const void* buf, std::size_t n) {
  transfer(env_, fd_, const_cast<void*>(buf), n, true, timeout_s_);
}
void Oob::recv(void* buf, std::size_t n) { transfer(env_, fd_, buf, n, false, timeout_s_); }

bool Oob::readable() {
  char c;
  return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) >= 0 ||
         (errno != EAGAIN && errno != EWOULDBLOCK);
}

void Oob::drain_until_closed(double seconds) {
  if (fd_ < 0) return;
  env_.until(
      [&] {
        char b[64];
        const ssize_t r = ::recv(fd_, b, sizeof b, 0);
        return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
      },
      seconds);
}

void Oob::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace roce::runtime
