/// @file
/// Fabric on a libroce Context and the connection layer (context_fabric.h).
#include "apps/netfr/context_fabric.h"

#include <arpa/inet.h>
#include <sched.h>

#include <cerrno>
#include <chrono>

namespace roce::netfr {

// NetFR's words for events and completions are the connection layer's first ones.
static_assert(FabricEvent::kDisconnected == static_cast<int>(conn::Event::kDisconnected) &&
              FabricCompletion::kRecv == static_cast<int>(conn::Completion::kRecv));

namespace {

constexpr std::uint32_t kLocal = verbs::kAccessLocalWrite;
constexpr std::uint32_t kRemote = verbs::kAccessLocalWrite | verbs::kAccessRemoteWrite;

std::string ipv4_text(Ipv4Addr a) {
  return std::to_string(a.v >> 24) + "." + std::to_string((a.v >> 16) & 0xFF) + "." +
         std::to_string((a.v >> 8) & 0xFF) + "." + std::to_string(a.v & 0xFF);
}

std::optional<Ipv4Addr> parse_ipv4(const std::string& s) {
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) return std::nullopt;
  return Ipv4Addr{ntohl(a.s_addr)};
}

}  // namespace

ContextFabric::ContextFabric(client::Context& ctx)
    : ctx_(ctx), ep_(std::make_unique<conn::Endpoint>(ctx_)) {}

ContextFabric::ContextFabric(std::unique_ptr<client::Context> ctx, std::shared_ptr<void> keep)
    : keep_(std::move(keep)),
      own_(std::move(ctx)),
      ctx_(*own_),
      ep_(std::make_unique<conn::Endpoint>(ctx_)) {}

ContextFabric::~ContextFabric() {
  ep_.reset();  // DREQs and their answers (the exit-time drain), then the QPs and CQs
  for (auto& [h, r] : regs_) {
    ctx_.dereg_mr(r.mr);
    if (r.buf) ctx_.free_buffer(r.buf);
  }
  regs_.clear();
  own_.reset();
  keep_.reset();
}

std::optional<MrInfo> ContextFabric::reg(client::Buffer* b, void* addr, std::uint64_t length,
                                         bool remote_write) {
  client::Mr* mr = ctx_.reg_mr(ep_->pd(), addr, length, remote_write ? kRemote : kLocal);
  if (mr == nullptr) {
    ctx_.free_buffer(b);
    return std::nullopt;
  }
  const std::uint64_t h = next_reg_++;
  regs_[h] = Reg{b, mr};
  MrInfo i;
  i.addr = addr;
  i.length = length;
  i.lkey = mr->lkey;
  i.rkey = mr->rkey;
  i.iova = mr->iova;
  i.handle = h;
  return i;
}

std::optional<MrInfo> ContextFabric::alloc_mr(std::uint64_t length, bool remote_write) {
  client::Buffer* b = ctx_.alloc_buffer(length);
  if (b == nullptr) return std::nullopt;
  return reg(b, b->addr, length, remote_write);
}

std::optional<MrInfo> ContextFabric::reg_memfd(int fd, void* addr, std::uint64_t length,
                                               bool remote_write) {
  client::Buffer* b = ctx_.register_memfd(fd, addr, length);
  if (b == nullptr) return std::nullopt;
  return reg(b, addr, length, remote_write);
}

void ContextFabric::dereg_mr(const MrInfo& mr) {
  auto it = regs_.find(mr.handle);
  if (it == regs_.end()) return;
  ctx_.dereg_mr(it->second.mr);
  if (it->second.buf) ctx_.free_buffer(it->second.buf);
  regs_.erase(it);
}

bool ContextFabric::listen(std::uint16_t port) { return ep_->listen(port) == 0; }

bool ContextFabric::prepare(ConnId c, std::uint32_t send_depth, std::uint32_t recv_depth) {
  conn::QpSizes s;
  s.send = send_depth;
  s.recv = recv_depth;
  return ep_->prepare(c, s) == 0;
}

bool ContextFabric::accept(ConnId c, const std::vector<std::uint8_t>& private_data) {
  return ep_->accept(c, private_data) == 0;
}

void ContextFabric::reject(ConnId c, const std::vector<std::uint8_t>& private_data) {
  ep_->reject(c, private_data);
}

std::optional<ConnId> ContextFabric::connect(const std::string& ipv4, std::uint16_t port,
                                             std::uint32_t send_depth, std::uint32_t recv_depth,
                                             const std::vector<std::uint8_t>& private_data) {
  const auto ip = parse_ipv4(ipv4);
  if (!ip) return std::nullopt;
  conn::QpSizes s;
  s.send = send_depth;
  s.recv = recv_depth;
  const conn::ConnId c = ep_->connect(*ip, port, s, private_data);
  if (c == 0) return std::nullopt;
  return c;
}

void ContextFabric::disconnect(ConnId c) { ep_->disconnect(c); }

bool ContextFabric::post_recv(ConnId c, std::uint64_t wr_id, void* addr, std::uint32_t length,
                              std::uint32_t lkey) {
  return ep_->post_recv(c, wr_id, addr, length, lkey) == 0;
}

bool ContextFabric::post_send(ConnId c, std::uint64_t wr_id, bool write, const void* local,
                              std::uint32_t length, std::uint32_t lkey, std::uint64_t remote_addr,
                              std::uint32_t rkey, bool signaled) {
  client::Sge sge{reinterpret_cast<std::uint64_t>(local), length, lkey};
  client::SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = write ? client::WrOpcode::kWrite : client::WrOpcode::kSend;
  wr.sg_list = length ? &sge : nullptr;
  wr.num_sge = length ? 1 : 0;
  wr.send_flags = signaled ? std::uint32_t{verbs::kSendSignaled} : 0u;
  wr.rdma.remote_addr = remote_addr;
  wr.rdma.rkey = rkey;
  return ep_->post_send(c, wr) == 0;
}

bool ContextFabric::poll(std::vector<FabricEvent>& events, std::vector<FabricCompletion>& wcs) {
  events_.clear();
  wcs_.clear();
  const bool any = ep_->poll(events_, wcs_);
  for (conn::Event& e : events_) {
    FabricEvent f;
    f.conn = e.conn;
    f.port = e.port;
    f.private_data = std::move(e.private_data);
    f.kind = static_cast<FabricEvent::Kind>(conn::coarse(e.kind));
    if (e.kind == conn::Event::kConnectRequest) f.peer = ipv4_text(e.peer);
    events.push_back(std::move(f));
  }
  for (const conn::Completion& c : wcs_) {
    FabricCompletion f;
    f.conn = c.conn;
    f.wr_id = c.wc.wr_id;
    f.ok = c.ok();
    f.status = c.status_text();
    f.byte_len = c.wc.byte_len;
    const conn::Completion::What w = c.what();
    f.kind = w == conn::Completion::kRecv || w == conn::Completion::kWrite
                 ? static_cast<FabricCompletion::Kind>(w)
                 : FabricCompletion::kSend;
    wcs.push_back(std::move(f));
  }
  return any;
}

void ContextFabric::idle(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<FabricEvent> ev;
  std::vector<FabricCompletion> wc;
  while (std::chrono::steady_clock::now() < end) {
    ev.clear();
    wc.clear();
    if (!poll(ev, wc)) sched_yield();
  }
}

std::string ContextFabric::report() const { return report_ ? report_() : std::string(); }

}  // namespace roce::netfr
