/// @file
/// ONC RPC over TCP (rpc_tcp.h).
#include "apps/nfs/rpc_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "apps/nfs/rpc.h"

namespace roce::nfs {

RpcTcpClient::~RpcTcpClient() {
  if (fd_ >= 0) ::close(fd_);
}

bool RpcTcpClient::connect(const std::string& ipv4, std::uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, ipv4.c_str(), &sa.sin_addr) != 1) {
    err_ = "bad IPv4 address " + ipv4;
    return false;
  }
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    err_ = "connect " + ipv4 + ":" + std::to_string(port) + ": " + std::strerror(errno);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    return false;
  }
  return true;
}

void RpcTcpClient::fail_all(const std::string& why) {
  err_ = why;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  auto p = std::move(pending_);
  pending_.clear();
  for (auto& [x, d] : p) {
    RpcResult r;
    r.error = why;
    d(std::move(r));
  }
}

void RpcTcpClient::submit(RpcCall c, Done done) {
  const auto xid = rpc::peek_xid(c.msg);
  if (fd_ < 0 || !xid) {
    RpcResult r;
    r.error = fd_ < 0 ? "not connected" : "call without an XID";
    done(std::move(r));
    return;
  }
  std::vector<std::uint8_t> rec;
  XdrEncoder e(rec);
  const std::size_t body =
      c.msg.size() + c.read_data.size() + (c.read_data.empty() ? 0 : xdr_pad(c.read_data.size()));
  e.u32(0x80000000u | static_cast<std::uint32_t>(body));
  // The read chunk's payload goes back where it belongs in the XDR stream.
  const auto pos =
      static_cast<std::ptrdiff_t>(c.read_data.empty() ? c.msg.size() : c.read_position);
  rec.insert(rec.end(), c.msg.begin(), c.msg.begin() + pos);
  if (!c.read_data.empty()) {
    rec.insert(rec.end(), c.read_data.begin(), c.read_data.end());
    rec.insert(rec.end(), xdr_pad(c.read_data.size()), 0);
  }
  rec.insert(rec.end(), c.msg.begin() + pos, c.msg.end());
  pending_[*xid] = std::move(done);
  std::size_t off = 0;
  while (off < rec.size()) {
    pollfd p{fd_, POLLOUT, 0};
    ::poll(&p, 1, 1000);
    const ssize_t n = ::send(fd_, rec.data() + off, rec.size() - off, MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      poll();  // drain replies so that the server can go on
      if (fd_ < 0) return;
      continue;
    }
    fail_all("send failed");
    return;
  }
}

bool RpcTcpClient::poll() {
  if (fd_ < 0) return false;
  bool any = false;
  std::uint8_t buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      in_.insert(in_.end(), buf, buf + n);
      any = true;
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
      fail_all("connection closed by the server");
      return true;
    }
    break;
  }
  std::size_t at = 0;
  while (in_.size() - at >= 4) {
    const std::uint8_t* m = in_.data() + at;
    const std::uint32_t mark = (std::uint32_t{m[0]} << 24) | (std::uint32_t{m[1]} << 16) |
                               (std::uint32_t{m[2]} << 8) | m[3];
    const std::uint32_t len = mark & 0x7fffffffu;
    if (in_.size() - at - 4 < len) break;
    record_.insert(record_.end(), m + 4, m + 4 + len);
    at += 4 + std::size_t{len};
    if (!(mark & 0x80000000u)) continue;
    const auto xid = rpc::peek_xid(record_);
    auto it = xid ? pending_.find(*xid) : pending_.end();
    if (it != pending_.end()) {
      Done d = std::move(it->second);
      pending_.erase(it);
      RpcResult r;
      r.ok = true;
      r.reply = std::move(record_);
      d(std::move(r));
    }
    record_.clear();
  }
  in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(at));
  return any;
}

RpcResult RpcTcpClient::call(RpcCall c) {
  std::optional<RpcResult> out;
  submit(std::move(c), [&](RpcResult&& r) { out = std::move(r); });
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!out && std::chrono::steady_clock::now() < end) {
    pollfd p{fd_, POLLIN, 0};
    if (fd_ >= 0) ::poll(&p, 1, 10);
    poll();
  }
  if (!out) {
    RpcResult r;
    r.error = "call timed out";
    return r;
  }
  return std::move(*out);
}

bool RpcTcpClient::drain(double seconds) {
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(static_cast<long>(seconds * 1000));
  while (!pending_.empty() && std::chrono::steady_clock::now() < end) {
    pollfd p{fd_, POLLIN, 0};
    if (fd_ < 0) break;
    ::poll(&p, 1, 10);
    poll();
  }
  return pending_.empty();
}

}  // namespace roce::nfs
