/// @file
/// MOUNT over TCP (mount_tcp.h).
#include "apps/nfs/mount_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "apps/nfs/rpc.h"
#include "controlplane/tcp.h"
#include "dataplane/port/dpdk_port.h"
#include "dataplane/port/eal.h"

namespace roce::nfs {

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
    if (!ctl::write_all(fd, rec.data(), rec.size())) {
      err = "write to " + server + " failed";
    } else {
      std::vector<std::uint8_t> reply;
      for (;;) {
        std::uint8_t m[4];
        if (!ctl::read_all(fd, m, 4)) {
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
        if (!ctl::read_all(fd, reply.data() + at, len)) {
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

struct RpcTcpServer::Job {
  std::vector<std::uint8_t> call, reply;
  wire::Ipv4Addr peer;  ///< the client's IPv4 address
};

RpcTcpServer::RpcTcpServer(Handler h, CallWorker* worker)
    : handler_(std::move(h)), worker_(worker) {
  if (!worker_) {
    own_worker_ = std::make_unique<CallWorker>();
    worker_ = own_worker_.get();
  }
}

RpcTcpServer::~RpcTcpServer() {
  own_worker_.reset();  // the handler it may be running is ours
  for (auto& [id, c] : clients_) ::close(c.fd);
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
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd_ >= 0) setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(fd_, 16) != 0) {
    err = "listen on " + ipv4 + ":" + std::to_string(port) + ": " + std::strerror(errno);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    return false;
  }
  return true;
}

void RpcTcpServer::close(std::uint64_t id) {
  const auto it = clients_.find(id);
  if (it == clients_.end()) return;
  ::close(it->second.fd);
  clients_.erase(it);  // a call at the worker finds no client when it returns
  std::erase(waiting_, id);
}

// The one place the handler is called (on the worker thread). j.peer is the client's address.
void RpcTcpServer::run_handler(Job& j) { handler_(CallContext{j.peer}, j.call, j.reply); }

void RpcTcpServer::submit(std::uint64_t id, Client& c) {
  auto job = c.job;
  if (worker_->submit([this, job] { run_handler(*job); }, [this, id, job] { finish(id, job); }))
    return;
  if (std::find(waiting_.begin(), waiting_.end(), id) == waiting_.end()) waiting_.push_back(id);
}

void RpcTcpServer::finish(std::uint64_t id, const std::shared_ptr<Job>& j) {
  const auto it = clients_.find(id);
  if (it == clients_.end() || it->second.job != j) return;
  Client& c = it->second;
  c.job.reset();
  c.busy = false;
  ++calls_;
  restart_clock(c, port::now_ns());  // the reply's time to be taken, or the next record's
  if (j->reply.empty()) return;      // nothing to answer
  XdrEncoder e(c.out);
  e.u32(0x80000000u | static_cast<std::uint32_t>(j->reply.size()));
  c.out.insert(c.out.end(), j->reply.begin(), j->reply.end());
  c.out_off = 0;
}

void RpcTcpServer::restart_clock(Client& c, std::uint64_t now) const {
  c.since_ns = now;
  c.deadline_ns = now + std::uint64_t{idle_timeout_ms} * 1'000'000;
}

// Reads, writes and parses for one client; false when it is to be closed.
bool RpcTcpServer::serve(std::uint64_t id, Client& c, std::uint64_t now) {
  // The reply first: nothing more is read before it is out.
  while (c.out_off < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      c.out_off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return false;
  }
  if (c.out_off == c.out.size() && !c.out.empty()) {
    c.out.clear();
    c.out_off = 0;
    restart_clock(c, now);  // idle again: the next record has its own deadline
  }
  // Then the next call, if the connection is free: at most one record (and its marker) held.
  while (!c.busy && c.out.empty()) {
    // Whole fragments: a last one completes a record, which is one call.
    if (c.in.size() >= 4) {
      const std::uint32_t mark = (std::uint32_t{c.in[0]} << 24) | (std::uint32_t{c.in[1]} << 16) |
                                 (std::uint32_t{c.in[2]} << 8) | c.in[3];
      const std::uint32_t len = mark & 0x7fffffffu;
      if (c.record.size() + len > max_record) {
        ++st_.oversized;
        return false;
      }
      if (c.in.size() >= 4 + std::size_t{len}) {
        c.record.insert(c.record.end(), c.in.begin() + 4, c.in.begin() + 4 + len);
        c.in.erase(c.in.begin(), c.in.begin() + 4 + len);
        if (!(mark & 0x80000000u)) continue;
        c.job = std::make_shared<Job>();
        c.job->call = std::move(c.record);
        c.job->peer = c.peer;
        c.record.clear();
        c.busy = true;
        submit(id, c);
        break;
      }
    }
    const std::size_t room = max_record + 8 > c.in.size() ? max_record + 8 - c.in.size() : 0;
    if (room == 0) return false;
    std::uint8_t buf[4096];
    const ssize_t n = ::recv(c.fd, buf, std::min(room, sizeof buf), MSG_DONTWAIT);
    if (n > 0) {
      c.in.insert(c.in.end(), buf, buf + n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    break;
  }
  // Progress does not move the deadline: a byte now and then does not hold the connection.
  // A call at the worker is our delay, not the client's: the deadline waits for it.
  if (!c.busy && now >= c.deadline_ns) {
    ++st_.timed_out;
    return false;
  }
  return true;
}

// A connection just accepted: within its address's share, and evicting the connection idle the
// longest when the table is full (a record trickled in, or silence, cannot hold a slot against a
// newcomer); closed at once when neither leaves room.
void RpcTcpServer::admit(int fd, wire::Ipv4Addr peer, std::uint64_t now) {
  std::size_t same = 0;
  std::uint64_t victim = 0, oldest = UINT64_MAX;
  for (const auto& [id, c] : clients_) {
    same += c.peer == peer;
    if (!c.busy && c.out.empty() && c.since_ns < oldest) {
      oldest = c.since_ns;
      victim = id;
    }
  }
  if (same >= max_per_peer) {
    ++st_.refused_peer;
    ::close(fd);
    return;
  }
  if (clients_.size() >= max_clients) {
    if (!victim) {
      ++st_.refused;
      ::close(fd);
      return;
    }
    ++st_.evicted;
    close(victim);
  }
  Client cl;
  cl.fd = fd;
  cl.peer = peer;
  restart_clock(cl, now);
  clients_.emplace(next_id_++, std::move(cl));
}

bool RpcTcpServer::poll() {
  if (fd_ < 0) return false;
  bool any = worker_->drain() != 0;
  while (!waiting_.empty() && worker_->in_flight() < worker_->capacity()) {
    const std::uint64_t id = waiting_.front();
    waiting_.pop_front();
    const auto it = clients_.find(id);
    if (it != clients_.end() && it->second.job) submit(id, it->second);
  }
  const std::uint64_t now = port::now_ns();
  for (;;) {
    sockaddr_in sa{};
    socklen_t sl = sizeof sa;
    const int c =
        ::accept4(fd_, reinterpret_cast<sockaddr*>(&sa), &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) break;  // EAGAIN, or EMFILE and the like: tried again at the next poll
    any = true;
    admit(c, wire::Ipv4Addr{ntohl(sa.sin_addr.s_addr)}, now);
  }
  for (auto it = clients_.begin(); it != clients_.end();) {
    const std::uint64_t id = it->first;
    ++it;  // serve() may not erase, close() below may
    if (!serve(id, clients_.at(id), now)) {
      close(id);
      any = true;
    }
  }
  return any;
}

}  // namespace roce::nfs
