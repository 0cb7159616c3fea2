/// @file
/// MOUNT over TCP (mount_tcp.h).
#include "apps/nfs/mount_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>

#include "apps/nfs/rpc.h"

namespace roce::nfs {

namespace {
bool write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n) {
    const ssize_t k = ::write(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}
bool read_all(int fd, std::uint8_t* p, std::size_t n) {
  while (n) {
    const ssize_t k = ::read(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}
}  // namespace

std::optional<std::vector<std::uint8_t>> rpc_tcp_call(const std::string& server, std::uint16_t port,
                                                      const std::vector<std::uint8_t>& call,
                                                      std::string& err) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, server.c_str(), &sa.sin_addr) != 1) {
    err = "bad IPv4 address " + server;
    return std::nullopt;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    err = "socket: " + std::string(std::strerror(errno));
    return std::nullopt;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::optional<std::vector<std::uint8_t>> out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    err = "connect " + server + ":" + std::to_string(port) + ": " + std::strerror(errno);
  } else {
    std::vector<std::uint8_t> rec;
    XdrEncoder e(rec);
    e.u32(0x80000000u | static_cast<std::uint32_t>(call.size()));  // the last fragment
    rec.insert(rec.end(), call.begin(), call.end());
    if (!write_all(fd, rec.data(), rec.size())) {
      err = "write to " + server + " failed";
    } else {
      std::vector<std::uint8_t> reply;
      for (;;) {
        std::uint8_t m[4];
        if (!read_all(fd, m, 4)) {
          err = "short reply from " + server;
          break;
        }
        const std::uint32_t mark = (std::uint32_t{m[0]} << 24) | (std::uint32_t{m[1]} << 16) |
                                   (std::uint32_t{m[2]} << 8) | m[3];
        const std::uint32_t len = mark & 0x7fffffffu;
        if (reply.size() + len > (1u << 20)) {
          err = "reply record too large";
          break;
        }
        const std::size_t at = reply.size();
        reply.resize(at + len);
        if (!read_all(fd, reply.data() + at, len)) {
          err = "short reply from " + server;
          break;
        }
        if (mark & 0x80000000u) {
          out = std::move(reply);
          break;
        }
      }
    }
  }
  ::close(fd);
  return out;
}

std::optional<v3::Fh> mount_tcp(const std::string& server, std::uint16_t port,
                                const std::string& path, std::string& err) {
  std::vector<std::uint8_t> call;
  XdrEncoder e(call);
  rpc::CallHeader h;
  h.xid = 0x4d4e5400u ^ static_cast<std::uint32_t>(::getpid());
  h.prog = v3::kMountProgram;
  h.vers = v3::kMountVersion;
  h.proc = v3::kMnt;
  rpc::AuthSys a;
  a.machine = "roce-nfs";
  h.cred = rpc::auth_sys(a);
  rpc::encode(e, h);
  e.string(path);
  const auto reply = rpc_tcp_call(server, port, call, err);
  if (!reply) return std::nullopt;
  XdrDecoder d(*reply);
  rpc::ReplyHeader rh;
  if (!rpc::decode(d, rh) || rh.xid != h.xid) {
    err = "malformed MOUNT reply";
    return std::nullopt;
  }
  if (rh.stat != rpc::kMsgAccepted || rh.accept != rpc::kSuccess) {
    err = "MOUNT: " + rpc::to_string(rh);
    return std::nullopt;
  }
  const auto m = v3::decode_mount(d);
  if (!d.ok()) {
    err = "malformed MOUNT result";
    return std::nullopt;
  }
  if (m.status != 0) {
    err = "MOUNT of " + path + " refused: status " + std::to_string(m.status);
    return std::nullopt;
  }
  return m.fh;
}

}  // namespace roce::nfs

namespace roce::nfs {

RpcTcpServer::~RpcTcpServer() {
  for (auto& c : clients_) ::close(c.fd);
  if (fd_ >= 0) ::close(fd_);
}

bool RpcTcpServer::listen(const std::string& ipv4, std::uint16_t port, std::string& err) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, ipv4.c_str(), &sa.sin_addr) != 1) {
    err = "bad IPv4 address " + ipv4;
    return false;
  }
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  const int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(fd_, 16) != 0) {
    err = "listen on " + ipv4 + ":" + std::to_string(port) + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

bool RpcTcpServer::poll() {
  if (fd_ < 0) return false;
  bool any = false;
  for (;;) {
    sockaddr_in sa{};
    socklen_t sl = sizeof sa;
    const int c = ::accept4(fd_, reinterpret_cast<sockaddr*>(&sa), &sl, SOCK_NONBLOCK);
    if (c < 0) break;
    clients_.push_back({c, CallContext{wire::Ipv4Addr{ntohl(sa.sin_addr.s_addr)}}, {}, {}});
    any = true;
  }
  for (std::size_t i = 0; i < clients_.size();) {
    Client& c = clients_[i];
    std::uint8_t buf[4096];
    bool closed = false;
    for (;;) {
      const ssize_t n = ::read(c.fd, buf, sizeof buf);
      if (n > 0) {
        c.in.insert(c.in.end(), buf, buf + n);
        any = true;
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed = true;
      break;
    }
    // Whole fragments: a last one completes a record, which is one call.
    while (!closed && c.in.size() >= 4) {
      const std::uint32_t mark = (std::uint32_t{c.in[0]} << 24) | (std::uint32_t{c.in[1]} << 16) |
                                 (std::uint32_t{c.in[2]} << 8) | c.in[3];
      const std::uint32_t len = mark & 0x7fffffffu;
      if (c.record.size() + len > max_record) {
        closed = true;
        break;
      }
      if (c.in.size() < 4 + std::size_t{len}) break;
      c.record.insert(c.record.end(), c.in.begin() + 4, c.in.begin() + 4 + len);
      c.in.erase(c.in.begin(), c.in.begin() + 4 + len);
      if (!(mark & 0x80000000u)) continue;
      std::vector<std::uint8_t> reply;
      handler_(c.ctx, c.record, reply);
      ++calls_;
      c.record.clear();
      if (reply.empty()) continue;
      std::vector<std::uint8_t> rec;
      XdrEncoder e(rec);
      e.u32(0x80000000u | static_cast<std::uint32_t>(reply.size()));
      rec.insert(rec.end(), reply.begin(), reply.end());
      // The reply goes out whole (a client that stops reading for 10 s is dropped).
      std::size_t off = 0;
      while (off < rec.size()) {
        const ssize_t n = ::write(c.fd, rec.data() + off, rec.size() - off);
        if (n > 0) {
          off += static_cast<std::size_t>(n);
          continue;
        }
        pollfd pf{c.fd, POLLOUT, 0};
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && ::poll(&pf, 1, 10000) > 0)
          continue;
        closed = true;
        break;
      }
    }
    if (closed) {
      ::close(c.fd);
      clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
  return any;
}

}  // namespace roce::nfs
